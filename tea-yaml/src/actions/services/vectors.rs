//! The agent's in-memory vector store (The Edge Agent's default `vector.*` backend): texts with
//! their embeddings and metadata, by collection, searched by cosine similarity with its
//! metadata filters. It lives as long as the loaded agent, in this process, outside the state
//! (as the agent's key-value memory). `embeddings.rs` embeds texts and queries; this module
//! keeps and ranks them.
//!
//! The agent's in-memory vector store: texts, embeddings and metadata by collection, ranked by
//! cosine similarity with The Edge Agent's metadata filters (`_gte`, `_lt`, `_ne`, `_in`, …); it
//! lives as long as the loaded agent (`actions::RunningAgent::vectors`).

use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::Mutex;

/// A fresh id for a stored text that was given none (`vector.store` without `ids`): random, so
/// that ids from different runs and processes do not meet.
pub(crate) fn new_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(COUNT.fetch_add(1, Ordering::Relaxed));
    hasher.finish()
}

/// How many texts the store holds at most, over all its collections.
pub(crate) const MAX_VECTORS: usize = 100_000;

/// One stored text.
#[derive(Clone, Debug)]
struct Doc {
    id: String,
    text: String,
    embedding: Vec<f64>,
    metadata: Value,
}

/// The store: collections of texts, each in the order first stored.
#[derive(Debug, Default)]
pub(crate) struct Vectors {
    collections: Mutex<HashMap<String, Vec<Doc>>>,
}

impl Vectors {
    /// Stores `texts` with their `embeddings`, `ids` and `metadata` (one each, in order) in
    /// `collection`; an id already there is replaced. `Err` names what does not fit.
    pub(crate) fn add(
        &self,
        collection: &str,
        texts: &[String],
        embeddings: Vec<Vec<f64>>,
        ids: &[String],
        metadata: &[Value],
    ) -> Result<(), String> {
        let dims = embeddings.first().map_or(0, Vec::len);
        if let Some((i, e)) = embeddings.iter().enumerate().find(|(_, e)| e.len() != dims) {
            return Err(format!("Embedding dimension mismatch at index {i}: expected {dims}, got {}", e.len()));
        }
        let mut collections = self.collections.lock().unwrap_or_else(|e| e.into_inner());
        let held: usize = collections.values().map(Vec::len).sum();
        if held + texts.len() > MAX_VECTORS {
            return Err(format!("the agent's vector store holds at most {MAX_VECTORS} texts"));
        }
        let docs = collections.entry(collection.to_owned()).or_default();
        if let Some(first) = docs.first().filter(|d| d.embedding.len() != dims && !texts.is_empty()) {
            return Err(format!(
                "Embedding dimension mismatch: new embeddings have {dims} dims, collection '{collection}' has {} dims",
                first.embedding.len()
            ));
        }
        for (((text, embedding), id), meta) in texts.iter().zip(embeddings).zip(ids).zip(metadata) {
            let doc = Doc { id: id.clone(), text: text.clone(), embedding, metadata: meta.clone() };
            match docs.iter_mut().find(|d| d.id == *id) {
                Some(old) => *old = doc,
                None => docs.push(doc),
            }
        }
        Ok(())
    }

    /// The `k` texts of `collection` most like `query` (cosine similarity, ties in the order
    /// stored) among those whose metadata passes `filter`: `{id, text, score, metadata}` each,
    /// with `embedding` when asked.
    pub(crate) fn query(
        &self,
        collection: &str,
        query: &[f64],
        k: usize,
        filter: &Map<String, Value>,
        with_embeddings: bool,
    ) -> Vec<Value> {
        let collections = self.collections.lock().unwrap_or_else(|e| e.into_inner());
        let Some(docs) = collections.get(collection) else { return Vec::new() };
        let mut scored: Vec<(f64, &Doc)> =
            docs.iter().filter(|d| passes(&d.metadata, filter)).map(|d| (cosine(query, &d.embedding), d)).collect();
        // Stable: equal scores keep the order stored.
        scored.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap_or(std::cmp::Ordering::Equal));
        scored
            .into_iter()
            .take(k)
            .map(|(score, d)| {
                let mut out = json!({ "id": d.id, "text": d.text, "score": score, "metadata": d.metadata });
                if with_embeddings {
                    out["embedding"] = json!(d.embedding);
                }
                out
            })
            .collect()
    }
}

/// Cosine similarity; 0 when either vector is all zeros (or their lengths differ).
fn cosine(a: &[f64], b: &[f64]) -> f64 {
    if a.len() != b.len() {
        return 0.0;
    }
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let (na, nb) = (a.iter().map(|x| x * x).sum::<f64>().sqrt(), b.iter().map(|x| x * x).sum::<f64>().sqrt());
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na * nb)
    }
}

/// The Edge Agent's metadata filter: every key must hold. `FIELD_gte`, `_lte`, `_gt`, `_lt`
/// compare (the field must be there), `_ne` differs, `_in` is one of a list, any other key is
/// equality.
fn passes(metadata: &Value, filter: &Map<String, Value>) -> bool {
    let field = |name: &str| metadata.get(name);
    let order = |f: Option<&Value>, v: &Value| -> Option<std::cmp::Ordering> {
        match (f?, v) {
            (Value::Number(a), Value::Number(b)) => a.as_f64()?.partial_cmp(&b.as_f64()?),
            (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
            _ => None,
        }
    };
    filter.iter().all(|(key, want)| {
        use std::cmp::Ordering::*;
        for (suffix, ok) in [
            ("_gte", &[Greater, Equal][..]),
            ("_lte", &[Less, Equal][..]),
            ("_gt", &[Greater][..]),
            ("_lt", &[Less][..]),
        ] {
            if let Some(name) = key.strip_suffix(suffix) {
                return order(field(name), want).is_some_and(|o| ok.contains(&o));
            }
        }
        if let Some(name) = key.strip_suffix("_ne") {
            return field(name) != Some(want);
        }
        if let Some(name) = key.strip_suffix("_in") {
            return match (field(name), want) {
                (Some(v), Value::Array(list)) => list.contains(v),
                _ => false,
            };
        }
        field(key) == Some(want)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_are_ranked_by_cosine_and_filtered_by_metadata() {
        let store = Vectors::default();
        let texts: Vec<String> = ["aaa", "eee", "aei"].iter().map(|s| s.to_string()).collect();
        let ids: Vec<String> = ["x", "y", "z"].iter().map(|s| s.to_string()).collect();
        let meta = [json!({ "t": 1 }), json!({ "t": 2 }), json!({ "t": 3 })];
        store
            .add("c", &texts, vec![vec![3.0, 0.0, 0.0], vec![0.0, 3.0, 0.0], vec![1.0, 1.0, 1.0]], &ids, &meta)
            .unwrap();
        let found = store.query("c", &[1.0, 0.0, 0.0], 2, &Map::new(), false);
        assert_eq!(found[0]["id"], "x");
        assert_eq!(found[0]["score"], 1.0);
        assert_eq!(found[1]["id"], "z");
        let filter = json!({ "t_gte": 2 }).as_object().unwrap().clone();
        let found = store.query("c", &[1.0, 0.0, 0.0], 5, &filter, false);
        let ids: Vec<&str> = found.iter().map(|f| f["id"].as_str().unwrap()).collect();
        assert_eq!(ids, ["z", "y"]);
        assert!(store.query("nowhere", &[1.0], 5, &Map::new(), false).is_empty());
        let err = store.add("c", &texts[..1], vec![vec![1.0]], &ids_of(&["w"]), &meta[..1]).unwrap_err();
        assert!(err.contains("collection 'c' has 3 dims"), "{err}");
    }

    fn ids_of(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }
}
