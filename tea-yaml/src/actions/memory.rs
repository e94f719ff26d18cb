//! The agent's memory: The Edge Agent's key-value `memory.*` (`memory.store`,
//! `memory.retrieve`, `memory.delete`, `memory.clear`) and long-term `ltm.*` (`ltm.store`,
//! `ltm.retrieve`, `ltm.delete`, `ltm.search`). With a store, both keep their values in the
//! engine's long-term memory (`tea::Memory`, what a node's `ctx.store()` is, on the agent's
//! store): durable, shared by every thread and process on the store, and what `tea serve`'s
//! `/store` routes show. Without one, they keep them in this process, as long as the loaded
//! agent, with limits on keys and bytes. DSPy's, TextGrad's and mem0's fallbacks keep what they
//! keep in it too.
//!
//! A `memory.*` value is the item `{"value": …}` under the namespace its `namespace` names
//! (`default`; dots separate labels, `users.ada` is `["users", "ada"]`); an `ltm.*` value is
//! `{"value": …, "metadata": …}` under `["ltm"]` (or its `namespace`).

use serde_json::{json, Map, Value};
use std::time::Duration;
use tea_runtime::BoxError;

/// One of the `memory.*` and `ltm.*` actions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MemoryOp {
    Store,
    Retrieve,
    Delete,
    Clear,
    LtmStore,
    LtmRetrieve,
    LtmDelete,
    LtmSearch,
}

impl MemoryOp {
    /// The action's name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            MemoryOp::Store => "memory.store",
            MemoryOp::Retrieve => "memory.retrieve",
            MemoryOp::Delete => "memory.delete",
            MemoryOp::Clear => "memory.clear",
            MemoryOp::LtmStore => "ltm.store",
            MemoryOp::LtmRetrieve => "ltm.retrieve",
            MemoryOp::LtmDelete => "ltm.delete",
            MemoryOp::LtmSearch => "ltm.search",
        }
    }

    /// The op `name` names.
    pub(crate) fn named(name: &str) -> Option<MemoryOp> {
        Some(match name {
            "memory.store" => MemoryOp::Store,
            "memory.retrieve" => MemoryOp::Retrieve,
            "memory.delete" => MemoryOp::Delete,
            "memory.clear" => MemoryOp::Clear,
            "ltm.store" => MemoryOp::LtmStore,
            "ltm.retrieve" => MemoryOp::LtmRetrieve,
            "ltm.delete" => MemoryOp::LtmDelete,
            "ltm.search" => MemoryOp::LtmSearch,
            _ => return None,
        })
    }
}

/// How many keys an agent's in-process memory holds at most: a `memory.store` beyond it fails
/// (in its result, as The Edge Agent's store failures).
pub(crate) const MAX_MEMORY_KEYS: usize = 100_000;
/// How many bytes (as JSON text) an agent's in-process memory holds at most, over all its values.
pub(crate) const MAX_MEMORY_BYTES: usize = 64 << 20;
/// The most items `memory.clear` and `ltm.search` read from a store.
const MAX_READ: usize = 100_000;

/// An agent's in-process memory, for an agent without a store: items by namespace and key,
/// each with an optional expiry. It lives as long as the loaded agent, in this process,
/// outside the state (so outside checkpoints).
#[derive(Debug, Default)]
pub(crate) struct Memory {
    entries: std::sync::Mutex<std::collections::HashMap<Slot, Entry>>,
}

/// An item's namespace (its labels joined by dots) and key.
type Slot = (String, String);
/// An item, when it expires, and its size as JSON text.
type Entry = (Map<String, Value>, Option<std::time::Instant>, usize);

/// Items of one namespace, by key.
type Keyed = Vec<(String, Map<String, Value>)>;

/// Where the items go: the engine's memory on the agent's store, or this process's.
enum Backend<'a> {
    Local(&'a Memory),
    Durable(tea_runtime::Memory),
}

impl Backend<'_> {
    /// Puts `item`; `Ok(Some(why))` when the in-process memory is full.
    fn put(
        &self,
        ns: &[String],
        key: &str,
        item: Map<String, Value>,
        ttl: Option<Duration>,
    ) -> Result<Option<String>, BoxError> {
        match self {
            Backend::Durable(memory) => {
                memory.put_with_ttl(ns, key, Value::Object(item), ttl).map(|()| None).map_err(Into::into)
            }
            Backend::Local(memory) => Ok(memory.put(ns.join("."), key, item, ttl)),
        }
    }

    fn get(&self, ns: &[String], key: &str) -> Result<Option<Map<String, Value>>, BoxError> {
        match self {
            Backend::Durable(memory) => Ok(memory.get(ns, key)?.map(|item| item.value)),
            Backend::Local(memory) => Ok(memory.live().get(&(ns.join("."), key.to_owned())).map(|(v, _, _)| v.clone())),
        }
    }

    fn delete(&self, ns: &[String], key: &str) -> Result<bool, BoxError> {
        match self {
            Backend::Durable(memory) => Ok(memory.delete(ns, key)?),
            Backend::Local(memory) => Ok(memory.live().remove(&(ns.join("."), key.to_owned())).is_some()),
        }
    }

    /// The items of namespace `ns` (exactly), by key, sorted by key.
    fn items(&self, ns: &[String]) -> Result<Keyed, BoxError> {
        let mut found: Keyed = match self {
            Backend::Durable(memory) => memory
                .search(&tea_runtime::SearchQuery::under(ns).limit(MAX_READ))?
                .into_iter()
                .filter(|item| item.namespace == ns)
                .map(|item| (item.key, item.value))
                .collect(),
            Backend::Local(memory) => {
                let joined = ns.join(".");
                memory
                    .live()
                    .iter()
                    .filter(|((n, _), _)| *n == joined)
                    .map(|((_, key), (value, _, _))| (key.clone(), value.clone()))
                    .collect()
            }
        };
        found.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(found)
    }
}

impl Memory {
    /// The entries, expired ones dropped.
    fn live(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<Slot, Entry>> {
        let now = std::time::Instant::now();
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|_, (_, expires, _)| expires.is_none_or(|at| at > now));
        entries
    }

    /// Keeps `item`; `Some(why)` when that would pass the limits.
    fn put(&self, ns: String, key: &str, item: Map<String, Value>, ttl: Option<Duration>) -> Option<String> {
        let mut entries = self.live();
        let slot = (ns, key.to_owned());
        let size = serde_json::to_vec(&item).map_or(0, |v| v.len()) + slot.0.len() + slot.1.len();
        let held: usize = entries.iter().filter(|(s, _)| **s != slot).map(|(_, (_, _, n))| *n).sum();
        if entries.len() >= MAX_MEMORY_KEYS && !entries.contains_key(&slot) {
            return Some(format!("the agent's memory holds {MAX_MEMORY_KEYS} keys, its limit"));
        }
        if held + size > MAX_MEMORY_BYTES {
            return Some(format!("the agent's memory would hold more than {MAX_MEMORY_BYTES} bytes, its limit"));
        }
        let expires = ttl.and_then(|d| std::time::Instant::now().checked_add(d));
        entries.insert(slot, (item, expires, size));
        None
    }

    /// Runs `op` with the rendered `args`, on the app's memory when the node runs with one (the
    /// agent has a store), else on this in-process memory. See [`memory_call`] and [`ltm_call`].
    pub(super) fn call(&self, op: MemoryOp, args: &Value) -> Result<Value, BoxError> {
        let backend = match crate::lang::scope::run_memory() {
            Some(memory) => Backend::Durable(memory),
            None => Backend::Local(self),
        };
        match op {
            MemoryOp::Store | MemoryOp::Retrieve | MemoryOp::Delete | MemoryOp::Clear => {
                memory_call(&backend, op, args)
            }
            _ => ltm_call(&backend, op, args),
        }
    }
}

/// The labels of a namespace written as text (`users.ada`), or as a list of labels.
fn namespace(args: &Value, default: &str) -> Vec<String> {
    match args.get("namespace") {
        None | Some(Value::Null) => vec![default.to_owned()],
        Some(Value::String(n)) => n.split('.').map(str::to_owned).collect(),
        Some(Value::Array(labels)) => labels
            .iter()
            .map(|l| match l {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect(),
        Some(other) => vec![other.to_string()],
    }
}

/// The `key` argument, as text (`None`: missing, null or empty).
fn key_of(args: &Value) -> Option<String> {
    match args.get("key") {
        Some(Value::String(k)) if !k.is_empty() => Some(k.clone()),
        None | Some(Value::Null | Value::String(_)) => None,
        Some(other) => Some(other.to_string()),
    }
}

/// The `ttl` argument: a positive number of seconds.
fn ttl_of(what: &str, args: &Value) -> Result<Option<Duration>, BoxError> {
    match args.get("ttl") {
        None | Some(Value::Null) => Ok(None),
        Some(t) => Ok(Some(
            t.as_f64()
                .filter(|t| *t > 0.0)
                .and_then(|t| Duration::try_from_secs_f64(t).ok())
                .ok_or_else(|| format!("{what}: `ttl` is a positive number of seconds, not {t}"))?,
        )),
    }
}

/// `memory.*` with the rendered `args`: `key`, `value`, `ttl` (seconds), `default`,
/// `namespace` (`default`). Results as The Edge Agent's: `{stored, key, namespace}`,
/// `{value, found, key}`, `{deleted, key}`, `{cleared, namespace}`.
fn memory_call(backend: &Backend<'_>, op: MemoryOp, args: &Value) -> Result<Value, BoxError> {
    let what = op.name();
    let ns = namespace(args, "default");
    let shown = ns.join(".");
    if op == MemoryOp::Clear {
        for (key, _) in backend.items(&ns)? {
            backend.delete(&ns, &key)?;
        }
        return Ok(json!({ "cleared": true, "namespace": shown }));
    }
    let Some(key) = key_of(args) else { return Err(format!("{what} needs `with: {{ key: … }}`").into()) };
    Ok(match op {
        MemoryOp::Store => {
            let Some(value) = args.get("value") else { return Err(format!("{what} needs `value`").into()) };
            let ttl = ttl_of(what, args)?;
            let mut item = Map::new();
            item.insert("value".to_owned(), value.clone());
            match backend.put(&ns, &key, item, ttl)? {
                Some(error) => json!({ "stored": false, "key": key, "error": error }),
                None => json!({ "stored": true, "key": key, "namespace": shown }),
            }
        }
        MemoryOp::Retrieve => match backend.get(&ns, &key)? {
            Some(mut item) => {
                json!({ "value": item.remove("value").unwrap_or(Value::Null), "found": true, "key": key })
            }
            None => json!({ "value": args.get("default").cloned().unwrap_or(Value::Null), "found": false, "key": key }),
        },
        _ => json!({ "deleted": backend.delete(&ns, &key)?, "key": key }),
    })
}

/// The Edge Agent's answer to an `ltm.*` call without a key.
fn no_key() -> Value {
    json!({ "success": false, "error": "Key is required", "error_type": "validation_error" })
}

/// `ltm.*` with the rendered `args`, as The Edge Agent's: `ltm.store` (`key`, `value`,
/// `metadata`, `ttl` seconds) → `{success, stored, key, created}`; `ltm.retrieve` (`key`,
/// `default`) → `{success, value, found, metadata}`; `ltm.delete` (`key`) →
/// `{success, deleted, key}`; `ltm.search` (`query`, `metadata_filter`, `limit` 10) →
/// `{success, results: [{key, value, metadata, score}], count}`. Each takes a `namespace`
/// (`ltm`). A search's `query` matches the words of each value's and metadata's text (its
/// score: the share of the query's words found), not an index.
fn ltm_call(backend: &Backend<'_>, op: MemoryOp, args: &Value) -> Result<Value, BoxError> {
    let what = op.name();
    let ns = namespace(args, "ltm");
    if op == MemoryOp::LtmSearch {
        return ltm_search(backend, &ns, args);
    }
    let Some(key) = key_of(args) else { return Ok(no_key()) };
    Ok(match op {
        MemoryOp::LtmStore => {
            let value = args.get("value").cloned().unwrap_or(Value::Null);
            let metadata = match args.get("metadata") {
                None | Some(Value::Null) => Value::Object(Map::new()),
                Some(m @ Value::Object(_)) => m.clone(),
                Some(other) => return Err(format!("{what}: `metadata` is a mapping, not {other}").into()),
            };
            let ttl = ttl_of(what, args)?;
            let created = backend.get(&ns, &key)?.is_none();
            let mut item = Map::new();
            item.insert("value".to_owned(), value);
            item.insert("metadata".to_owned(), metadata);
            match backend.put(&ns, &key, item, ttl)? {
                Some(error) => json!({ "success": false, "error": error, "error_type": "capacity_error" }),
                None => json!({ "success": true, "stored": true, "key": key, "created": created }),
            }
        }
        MemoryOp::LtmRetrieve => match backend.get(&ns, &key)? {
            Some(mut item) => json!({
                "success": true,
                "value": item.remove("value").unwrap_or(Value::Null),
                "found": true,
                "metadata": item.remove("metadata").unwrap_or(Value::Null),
            }),
            None => json!({
                "success": true,
                "value": args.get("default").cloned().unwrap_or(Value::Null),
                "found": false,
                "metadata": Value::Null,
            }),
        },
        _ => json!({ "success": true, "deleted": backend.delete(&ns, &key)?, "key": key }),
    })
}

fn ltm_search(backend: &Backend<'_>, ns: &[String], args: &Value) -> Result<Value, BoxError> {
    let limit = match args.get("limit") {
        None | Some(Value::Null) => 10,
        Some(l) => l
            .as_u64()
            .and_then(|l| usize::try_from(l).ok())
            .filter(|l| *l > 0)
            .ok_or_else(|| format!("ltm.search: `limit` is a positive whole number, not {l}"))?,
    };
    let filter = match args.get("metadata_filter") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(f)) => f.clone(),
        Some(other) => return Err(format!("ltm.search: `metadata_filter` is a mapping, not {other}").into()),
    };
    let words: Vec<String> = match args.get("query") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(q)) => q.split_whitespace().map(str::to_lowercase).collect(),
        Some(other) => return Err(format!("ltm.search: `query` is text, not {other}").into()),
    };
    let mut results: Vec<(f64, String, Value, Value)> = Vec::new();
    for (key, mut item) in backend.items(ns)? {
        let value = item.remove("value").unwrap_or(Value::Null);
        let metadata = item.remove("metadata").unwrap_or(Value::Null);
        if !filter.iter().all(|(k, v)| metadata.get(k) == Some(v)) {
            continue;
        }
        let score = if words.is_empty() {
            1.0
        } else {
            let text = format!("{key} {value} {metadata}").to_lowercase();
            let found = words.iter().filter(|w| text.contains(w.as_str())).count();
            found as f64 / words.len() as f64
        };
        if score > 0.0 {
            results.push((score, key, value, metadata));
        }
    }
    results.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap_or(std::cmp::Ordering::Equal).then_with(|| a.1.cmp(&b.1)));
    results.truncate(limit);
    let results: Vec<Value> = results
        .into_iter()
        .map(
            |(score, key, value, metadata)| json!({ "key": key, "value": value, "metadata": metadata, "score": score }),
        )
        .collect();
    Ok(json!({ "success": true, "count": results.len(), "results": results }))
}

/// DSPy's, TextGrad's and mem0's fallbacks keep what they keep in the agent's memory.
impl crate::actions::fallback::Keep for Memory {
    fn kept(&self, namespace: &str, key: &str) -> Result<Option<Value>, BoxError> {
        let found = self.call(MemoryOp::Retrieve, &json!({ "namespace": namespace, "key": key }))?;
        Ok(match found.get("found") {
            Some(Value::Bool(true)) => found.get("value").cloned(),
            _ => None,
        })
    }

    fn keep(&self, namespace: &str, key: &str, value: &Value) -> Result<Value, BoxError> {
        self.call(MemoryOp::Store, &json!({ "namespace": namespace, "key": key, "value": value }))
    }
}
