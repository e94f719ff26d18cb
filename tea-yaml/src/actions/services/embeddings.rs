//! `embedding.create`, `vector.store`, `vector.query` (and `rag.llamaindex.query`, `router`):
//! embeddings from an OpenAI-compatible `/embeddings`, kept in and searched from the agent's vector
//! store (`vectors.rs`).

use super::*;

pub(super) struct VectorRequest {
    /// The embeddings' provider, with `model`, `base_url`, `api_key` for its endpoint.
    provider: crate::actions::net::llm::Provider,
    endpoint: Map<String, Value>,
    key: Option<String>,
    default_model: &'static str,
    texts: Vec<String>,
    /// `embedding.create`'s `text` was a list or `batch` was asked.
    batch: bool,
    embeddings: Option<Vec<Vec<f64>>>,
    ids: Vec<String>,
    metadata: Vec<Value>,
    collection: String,
    k: usize,
    /// `None`: `filter` was given and is not a mapping (The Edge Agent's failure result).
    filter: Option<Map<String, Value>>,
    with_embeddings: bool,
}

pub(super) fn vector_request(service: Service, args: &Args<'_>) -> Result<VectorRequest, String> {
    let what = args.what;
    let strings = |key: &str| -> Result<(Vec<String>, bool), String> {
        let bad = |v: &Value| format!("{what}: `{key}` must be a string or a list of strings, not {v}");
        match args.get(key) {
            None => Ok((Vec::new(), false)),
            Some(Value::String(s)) => Ok((vec![s.clone()], false)),
            Some(Value::Array(list)) => list
                .iter()
                .map(|v| v.as_str().map(str::to_owned).ok_or_else(|| bad(v)))
                .collect::<Result<Vec<_>, _>>()
                .map(|l| (l, true)),
            Some(other) => Err(bad(other)),
        }
    };
    let provider = crate::actions::net::llm::Provider::of(what, args.map, crate::actions::net::llm::Provider::OpenAi)?;
    if provider == crate::actions::net::llm::Provider::Shell {
        return Err(format!("{what}: a shell provider gives no embeddings"));
    }
    let default_model = if provider == crate::actions::net::llm::Provider::Ollama {
        crate::actions::net::llm::DEFAULT_EMBED_MODEL
    } else {
        "text-embedding-3-small"
    };
    let mut endpoint = Map::new();
    for key in ["model", "base_url", "api_key"] {
        if let Some(v) = args.get(key) {
            endpoint.insert(key.to_owned(), v.clone());
        }
    }
    if let (None, Some(m)) = (args.get("model"), args.get("embedding_model")) {
        endpoint.insert("model".to_owned(), m.clone());
    }
    let (texts, listed) = match service {
        Service::EmbeddingCreate => strings("text")?,
        Service::VectorStore => strings("texts")?,
        _ => (vec![args.needed("query")?], false),
    };
    if texts.is_empty() {
        let key = if service == Service::VectorStore { "texts" } else { "text" };
        return Err(format!("{what} needs `{key}`"));
    }
    let embeddings = match args.get("embeddings") {
        None => None,
        Some(Value::Array(rows)) => Some(
            rows.iter()
                .map(|r| r.as_array().and_then(|r| r.iter().map(Value::as_f64).collect::<Option<Vec<f64>>>()))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| format!("{what}: `embeddings` must be a list of lists of numbers"))?,
        ),
        Some(other) => return Err(format!("{what}: `embeddings` must be a list of lists of numbers, not {other}")),
    };
    let (ids, _) = strings("ids")?;
    let metadata = match args.get("metadata") {
        None => vec![json!({}); texts.len()],
        Some(m @ Value::Object(_)) => vec![m.clone(); texts.len()],
        Some(Value::Array(list)) => list.clone(),
        Some(other) => return Err(format!("{what}: `metadata` must be a mapping or a list of mappings, not {other}")),
    };
    let filter = match args.get("filter") {
        None => Some(Map::new()),
        Some(Value::Object(f)) => Some(f.clone()),
        Some(_) => None,
    };
    let k_key = if service == Service::LlamaQuery { "similarity_top_k" } else { "k" };
    Ok(VectorRequest {
        provider,
        endpoint,
        key: std::env::var("OPENAI_API_KEY").ok(),
        default_model,
        texts,
        batch: listed || args.flag("batch", false)?,
        embeddings,
        ids,
        metadata,
        collection: args.text("collection")?.unwrap_or_else(|| "default".to_owned()),
        k: args.count(k_key, 5)?.min(crate::actions::services::vectors::MAX_VECTORS as u64) as usize,
        filter,
        with_embeddings: args.flag("include_embeddings", false)?,
    })
}

pub(super) async fn vector_call(
    service: Service,
    request: VectorRequest,
    vectors: Arc<crate::actions::services::vectors::Vectors>,
) -> Result<Value, String> {
    let what = service.name();
    let prefix = match service {
        Service::EmbeddingCreate => "Embedding creation failed",
        Service::VectorStore => "Vector store failed",
        _ => "Vector query failed",
    };
    let failed = |e: String| json!({ "error": format!("{prefix}: {e}"), "success": false });
    let Some(filter) = request.filter.as_ref() else {
        return Ok(json!({ "error": "Filter must be a dictionary", "success": false }));
    };
    let n = request.texts.len();
    if service == Service::VectorStore {
        let mismatch = |what: &str, got: usize| json!({ "error": format!("Number of {what} ({got}) doesn't match texts ({n})"), "success": false });
        if !request.ids.is_empty() && request.ids.len() != n {
            return Ok(mismatch("IDs", request.ids.len()));
        }
        if let Some(e) = request.embeddings.as_ref().filter(|e| e.len() != n) {
            return Ok(mismatch("embeddings", e.len()));
        }
        if request.metadata.len() != n {
            return Ok(mismatch("metadata", request.metadata.len()));
        }
    }
    let embedded = match request.embeddings.clone().filter(|_| service == Service::VectorStore) {
        Some(given) => given,
        None => {
            let asked = net::embed_texts(
                what,
                request.provider,
                &request.endpoint,
                request.key.clone(),
                &request.texts,
                request.default_model,
            );
            match asked.await {
                Ok(e) => e,
                Err(e) => return Ok(failed(e)),
            }
        }
    };
    let model = request.endpoint.get("model").and_then(Value::as_str).unwrap_or(request.default_model).to_owned();
    Ok(match service {
        Service::EmbeddingCreate => {
            let dimensions = embedded.first().map_or(0, Vec::len);
            if request.batch || n > 1 {
                json!({ "embeddings": embedded, "model": model, "count": n, "dimensions": dimensions })
            } else {
                json!({ "embedding": embedded[0], "model": model, "dimensions": dimensions })
            }
        }
        Service::VectorStore => {
            let ids: Vec<String> = if request.ids.is_empty() {
                (0..n).map(|_| format!("{:016x}", vectors::new_id())).collect()
            } else {
                request.ids.clone()
            };
            match vectors.add(&request.collection, &request.texts, embedded, &ids, &request.metadata) {
                Ok(()) => json!({ "stored": n, "collection": request.collection, "ids": ids }),
                Err(e) => failed(e),
            }
        }
        _ => {
            let found = vectors.query(&request.collection, &embedded[0], request.k, filter, request.with_embeddings);
            json!({ "results": found, "query": request.texts[0], "collection": request.collection, "k": request.k })
        }
    })
}
