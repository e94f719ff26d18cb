//! The protocol's store: JSON objects ("items") under a key in a namespace (a path of labels),
//! which outlive threads — what agents remember across threads, what operators configure. The
//! routes serve the engine's long-term memory, [`Memory`] (the first agent's, which its nodes
//! reach with `ctx.store()` and YAML agents' `ltm.*` and `memory.*` actions use, or the one
//! given to `Serve::memory`): this module only reads requests and writes answers.
//!
//! Search filters match top-level fields of the value (exactly, or with `$eq`, `$ne`, `$gt`,
//! `$gte`, `$lt`, `$lte`); the protocol's semantic `query` needs a memory with an embedder, and
//! is `422` without one.

use crate::error::ApiError;
use crate::request::{blocking, page, Body};
use crate::time::rfc3339;
use crate::Shared;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use tea_runtime::{Error, Item, Memory, MemoryProblem, SearchQuery};

type Shd = State<Arc<Shared>>;

/// The protocol's `Item`.
fn item_json(item: &Item) -> Value {
    let mut json = json!({
        "namespace": item.namespace,
        "key": item.key,
        "value": item.value,
        "created_at": rfc3339(item.created_at_ms),
        "updated_at": rfc3339(item.updated_at_ms),
    });
    if let Some(score) = item.score {
        json["score"] = json!(score);
    }
    json
}

/// A memory's error as the protocol's: what the request got wrong is `422`, with the code the
/// routes have always answered.
fn api_error(error: Error) -> ApiError {
    let message = tea_runtime::error_chain(&error);
    match &error {
        Error::Memory { problem, .. } => match problem {
            MemoryProblem::BadNamespace { .. } => ApiError::unprocessable("bad_namespace", message),
            MemoryProblem::BadKey | MemoryProblem::TooLong { .. } => ApiError::unprocessable("bad_key", message),
            MemoryProblem::NotAnObject { .. } => ApiError::unprocessable("bad_value", message),
            MemoryProblem::NoEmbedder => ApiError::unprocessable(
                "unsupported",
                "semantic `query` search needs a memory with an embedder, and this server has none: use `namespace_prefix` and `filter`",
            ),
            MemoryProblem::Busy { .. } => ApiError::conflict("busy", message),
            _ => ApiError::internal(message),
        },
        _ => ApiError::from(error),
    }
}

/// Runs `work` on the served memory off the runtime's threads, or `404` with none.
fn with_memory<T: Send + 'static>(
    shared: &Arc<Shared>,
    work: impl FnOnce(&Memory) -> Result<T, Error> + Send + 'static,
) -> impl std::future::Future<Output = Result<T, ApiError>> {
    let memory = shared.memory.clone();
    blocking(move || {
        let memory = memory.ok_or_else(|| ApiError::not_found("this server serves no agent, so it has no store"))?;
        work(&memory).map_err(api_error)
    })
}

#[derive(Deserialize)]
pub(crate) struct PutRequest {
    namespace: Vec<String>,
    key: String,
    value: Value,
    /// LangGraph's: minutes until the item expires (`null`: never).
    #[serde(default)]
    ttl: Option<f64>,
}

/// `PUT /store/items`: stores (or replaces) an item, expiring after `ttl` minutes when given;
/// `204`.
pub(crate) async fn put_item(State(shared): Shd, Body(put): Body<PutRequest>) -> Result<StatusCode, ApiError> {
    let ttl = match put.ttl {
        None => None,
        Some(minutes) => {
            Some(std::time::Duration::try_from_secs_f64(minutes * 60.0).ok().filter(|ttl| !ttl.is_zero()).ok_or_else(
                || {
                    ApiError::unprocessable(
                        "bad_request",
                        format!("`ttl` is a positive number of minutes, not {minutes}"),
                    )
                },
            )?)
        }
    };
    with_memory(&shared, move |memory| memory.put_with_ttl(&put.namespace, &put.key, put.value, ttl)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /store/items?key=K&namespace=A&namespace=B` (also `namespace=A.B`, as LangGraph's
/// clients send it): the item, or `404`.
pub(crate) async fn get_item(State(shared): Shd, RawQuery(query): RawQuery) -> Result<Json<Value>, ApiError> {
    let mut key = None;
    let mut namespace = Vec::new();
    for (name, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match &*name {
            "key" if key.is_some() => return Err(ApiError::unprocessable("bad_request", "`key` is given twice")),
            "key" => key = Some(value.into_owned()),
            "namespace" => namespace.extend(value.split('.').map(str::to_owned)),
            other => {
                return Err(ApiError::unprocessable(
                    "bad_request",
                    format!("unknown query parameter `{other}` (`key`, `namespace`)"),
                ))
            }
        }
    }
    let key = key.ok_or_else(|| ApiError::unprocessable("bad_request", "the query parameter `key` is missing"))?;
    let (ns, k) = (namespace.clone(), key.clone());
    let item = with_memory(&shared, move |memory| memory.get(&ns, &k)).await?;
    match item {
        Some(item) => Ok(Json(item_json(&item))),
        None => Err(ApiError::not_found(format!("no item `{key}` in namespace {namespace:?}"))),
    }
}

#[derive(Deserialize)]
pub(crate) struct DeleteRequest {
    #[serde(default)]
    namespace: Vec<String>,
    key: String,
}

/// `DELETE /store/items`: deletes an item; `204`, or `404` when there was none.
pub(crate) async fn delete_item(State(shared): Shd, Body(delete): Body<DeleteRequest>) -> Result<StatusCode, ApiError> {
    let (ns, k) = (delete.namespace.clone(), delete.key.clone());
    if with_memory(&shared, move |memory| memory.delete(&ns, &k)).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(format!("no item `{}` in namespace {:?}", delete.key, delete.namespace)))
    }
}

#[derive(Deserialize)]
pub(crate) struct SearchRequest {
    namespace_prefix: Option<Vec<String>>,
    filter: Option<Map<String, Value>>,
    limit: Option<i64>,
    offset: Option<i64>,
    query: Option<String>,
}

/// `POST /store/items/search`: the items under a namespace prefix whose values match the
/// filter, the most recently updated first — or, with a `query`, the most similar to it first,
/// each with its `score`.
pub(crate) async fn search_items(
    State(shared): Shd,
    Body(search): Body<SearchRequest>,
) -> Result<Json<Value>, ApiError> {
    let (limit, offset) = page(search.limit, search.offset)?;
    let query = SearchQuery::under(&search.namespace_prefix.unwrap_or_default())
        .filters(search.filter.unwrap_or_default())
        .text(search.query.unwrap_or_default())
        .limit(limit)
        .offset(offset);
    let items = with_memory(&shared, move |memory| memory.search(&query)).await?;
    let items: Vec<Value> = items.iter().map(item_json).collect();
    Ok(Json(json!({ "items": items })))
}

#[derive(Deserialize)]
pub(crate) struct NamespacesRequest {
    prefix: Option<Vec<String>>,
    suffix: Option<Vec<String>>,
    max_depth: Option<i64>,
    limit: Option<i64>,
    offset: Option<i64>,
}

/// `POST /store/namespaces`: the namespaces that hold items, matching the prefix and suffix,
/// cut to `max_depth` labels, sorted and without repeats.
///
/// The protocol answers a bare array of namespaces; LangGraph's SDKs (by their `User-Agent`)
/// get LangGraph's `{"namespaces": [...]}` from the same route and body.
pub(crate) async fn list_namespaces(
    State(shared): Shd,
    headers: axum::http::HeaderMap,
    Body(request): Body<NamespacesRequest>,
) -> Result<Json<Value>, ApiError> {
    let (limit, offset) = page(Some(request.limit.unwrap_or(100)), request.offset)?;
    let depth = match request.max_depth {
        None => None,
        Some(d) if d >= 1 => Some(usize::try_from(d).unwrap_or(usize::MAX)),
        Some(d) => {
            return Err(ApiError::unprocessable("bad_request", format!("`max_depth` must be at least 1, not {d}")))
        }
    };
    let prefix = request.prefix.unwrap_or_default();
    let suffix = request.suffix.unwrap_or_default();
    let namespaces = with_memory(&shared, move |memory| memory.namespaces(&prefix, &suffix, depth)).await?;
    let page: Vec<Value> = namespaces.into_iter().skip(offset).take(limit).map(|ns| json!(ns)).collect();
    if crate::request::from_sdk(&headers) {
        return Ok(Json(json!({ "namespaces": page })));
    }
    Ok(Json(Value::Array(page)))
}
