//! The protocol's store: JSON objects ("items") under a key in a namespace (a path of labels),
//! which outlive threads — what agents remember across threads, what operators configure. Kept
//! in the agents' own `Checkpointer` under a graph name of its own ([`GRAPH`]), one store
//! thread per item (its id is the JSON array of the namespace's labels and the key), each write
//! a compare-and-swap on the item's head: replicas on one database share the items, durably as
//! the store keeps checkpoints.
//!
//! Searches and namespace listings read the store's list of items and filter it here (the
//! `Checkpointer` trait has no query by prefix): fine for thousands of items, not millions.
//! Search filters are exact matches of top-level fields of the value; the protocol's semantic
//! `query` is not supported (`422`).

use crate::error::ApiError;
use crate::records::{decode_in, swap};
use crate::request::{blocking, matches, page, Body};
use crate::time::{now_ms, rfc3339};
use crate::Shared;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::sync::Arc;
use tea_runtime::{Checkpointer, ThreadId};

/// The graph name the items are stored under.
pub(crate) const GRAPH: &str = "tea-serve#store";

type Shd = State<Arc<Shared>>;

/// An item as stored.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct StoredItem {
    namespace: Vec<String>,
    key: String,
    value: Map<String, Value>,
    created_at: u64,
    updated_at: u64,
}

impl StoredItem {
    /// The protocol's `Item`.
    fn json(&self) -> Value {
        json!({
            "namespace": self.namespace,
            "key": self.key,
            "value": self.value,
            "created_at": rfc3339(self.created_at),
            "updated_at": rfc3339(self.updated_at),
        })
    }
}

/// Checks a namespace's labels: each non-empty, without `.` (LangGraph's separator of labels,
/// which `GET /store/items?namespace=a.b` also accepts) and without control characters.
/// `required`: at least one label.
fn check_namespace(namespace: &[String], required: bool) -> Result<(), ApiError> {
    if required && namespace.is_empty() {
        return Err(ApiError::unprocessable("bad_namespace", "`namespace` must have at least one label"));
    }
    for label in namespace {
        if label.is_empty() || label.contains('.') || label.chars().any(char::is_control) {
            return Err(ApiError::unprocessable(
                "bad_namespace",
                format!(
                    "namespace label {label:?} cannot be used: labels are non-empty, without `.` or control characters"
                ),
            ));
        }
    }
    Ok(())
}

/// The store thread of the item `key` in `namespace`: the JSON array of both, so distinct
/// pairs never share an id.
fn item_id(namespace: &[String], key: &str) -> Result<ThreadId, ApiError> {
    check_namespace(namespace, true)?;
    if key.is_empty() || key.chars().any(char::is_control) {
        return Err(ApiError::unprocessable(
            "bad_key",
            format!("key {key:?} cannot be used: it must be non-empty, without control characters"),
        ));
    }
    let mut path: Vec<&str> = namespace.iter().map(String::as_str).collect();
    path.push(key);
    let id = serde_json::to_string(&path).map_err(|e| ApiError::internal(e.to_string()))?;
    if id.len() > ThreadId::MAX_LEN {
        return Err(ApiError::unprocessable(
            "bad_key",
            format!(
                "the namespace and key are too long: at most {} bytes together, as a JSON array",
                ThreadId::MAX_LEN
            ),
        ));
    }
    Ok(ThreadId::from(id))
}

/// The namespace and key of a store thread (`None` for an id this module did not write).
fn decode_id(id: &ThreadId) -> Option<(Vec<String>, String)> {
    let mut path: Vec<String> = serde_json::from_str(id.as_str()).ok()?;
    let key = path.pop()?;
    Some((path, key))
}

fn read(store: &dyn Checkpointer, id: &ThreadId) -> Result<Option<StoredItem>, ApiError> {
    match store.head(GRAPH, id)? {
        None => Ok(None),
        Some((_, bytes)) => decode_in(GRAPH, id, &bytes).map(Some),
    }
}

/// The namespaces and keys of every item.
fn listed(store: &dyn Checkpointer) -> Result<Vec<(ThreadId, Vec<String>, String)>, ApiError> {
    Ok(store.threads(GRAPH)?.into_iter().filter_map(|id| decode_id(&id).map(|(ns, key)| (id, ns, key))).collect())
}

/// The shared store of the served agents (the first agent's), or `404` with none.
fn with_store<T: Send + 'static>(
    shared: &Arc<Shared>,
    work: impl FnOnce(&dyn Checkpointer) -> Result<T, ApiError> + Send + 'static,
) -> impl std::future::Future<Output = Result<T, ApiError>> {
    let shared = shared.clone();
    blocking(move || {
        let store =
            shared.records().ok_or_else(|| ApiError::not_found("this server serves no agent, so it has no store"))?;
        work(store)
    })
}

#[derive(Deserialize)]
pub(crate) struct PutRequest {
    namespace: Vec<String>,
    key: String,
    value: Value,
}

/// `PUT /store/items`: stores (or replaces) an item; `204`.
pub(crate) async fn put_item(State(shared): Shd, Body(put): Body<PutRequest>) -> Result<StatusCode, ApiError> {
    let id = item_id(&put.namespace, &put.key)?;
    let Value::Object(value) = put.value else {
        return Err(ApiError::unprocessable(
            "bad_value",
            format!("an item's `value` must be a JSON object, not {}", put.value),
        ));
    };
    with_store(&shared, move |store| {
        swap(store, GRAPH, &id, |current: Option<StoredItem>| {
            let now = now_ms();
            Ok(Some(StoredItem {
                namespace: put.namespace.clone(),
                key: put.key.clone(),
                value: value.clone(),
                created_at: current.map_or(now, |c| c.created_at),
                updated_at: now,
            }))
        })
    })
    .await?;
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
    let id = item_id(&namespace, &key)?;
    let item = with_store(&shared, move |store| read(store, &id)).await?;
    match item {
        Some(item) => Ok(Json(item.json())),
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
    let id = item_id(&delete.namespace, &delete.key)?;
    let deleted = with_store(&shared, move |store| Ok(store.delete(GRAPH, &id)?)).await?;
    if deleted {
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

/// `POST /store/items/search`: the items under a namespace prefix whose values hold the
/// filter's fields, the most recently updated first.
pub(crate) async fn search_items(
    State(shared): Shd,
    Body(search): Body<SearchRequest>,
) -> Result<Json<Value>, ApiError> {
    let (limit, offset) = page(search.limit, search.offset)?;
    if search.query.as_deref().is_some_and(|q| !q.is_empty()) {
        return Err(ApiError::unprocessable(
            "unsupported",
            "semantic `query` search is not supported: use `namespace_prefix` and `filter`",
        ));
    }
    let prefix = search.namespace_prefix.unwrap_or_default();
    check_namespace(&prefix, false)?;
    let filter = search.filter.unwrap_or_default();
    let mut items = with_store(&shared, move |store| {
        let mut found = Vec::new();
        for (id, namespace, _) in listed(store)? {
            if !namespace.starts_with(&prefix) {
                continue;
            }
            // An item deleted since the listing is skipped.
            if let Some(item) = read(store, &id)? {
                if matches(&filter, &Value::Object(item.value.clone())) {
                    found.push(item);
                }
            }
        }
        Ok(found)
    })
    .await?;
    items.sort_by(|a, b| {
        b.updated_at.cmp(&a.updated_at).then_with(|| (&a.namespace, &a.key).cmp(&(&b.namespace, &b.key)))
    });
    let items: Vec<Value> = items.iter().skip(offset).take(limit).map(StoredItem::json).collect();
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
        None => usize::MAX,
        Some(d) if d >= 1 => usize::try_from(d).unwrap_or(usize::MAX),
        Some(d) => {
            return Err(ApiError::unprocessable("bad_request", format!("`max_depth` must be at least 1, not {d}")))
        }
    };
    let prefix = request.prefix.unwrap_or_default();
    let suffix = request.suffix.unwrap_or_default();
    check_namespace(&prefix, false)?;
    check_namespace(&suffix, false)?;
    let listed = with_store(&shared, listed).await?;
    let namespaces: std::collections::BTreeSet<Vec<String>> = listed
        .into_iter()
        .map(|(_, namespace, _)| namespace)
        .filter(|ns| ns.starts_with(&prefix) && ns.ends_with(&suffix))
        .map(|mut ns| {
            ns.truncate(depth);
            ns
        })
        .collect();
    let page: Vec<Value> = namespaces.into_iter().skip(offset).take(limit).map(|ns| json!(ns)).collect();
    if crate::request::from_sdk(&headers) {
        return Ok(Json(json!({ "namespaces": page })));
    }
    Ok(Json(Value::Array(page)))
}
