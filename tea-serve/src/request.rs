//! What the protocol's handlers read from a request, and how they call the store: JSON bodies
//! (`400`/`413`/`422`), path ids, pages, filters, checked fields, blocking calls.

use crate::error::ApiError;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::HeaderMap;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};
use tea_runtime::ThreadId;

type ApiResult<T> = Result<T, ApiError>;

/// A JSON body: `413` past the body limit, `400` for bytes that are not JSON, `422` for JSON
/// of the wrong shape (naming the field), an empty body read as `{}`.
pub(crate) struct Body<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = axum::body::Bytes::from_request(request, state)
            .await
            .map_err(|e| ApiError::new(e.status(), "bad_body", e.body_text()))?;
        let value: Value = if bytes.iter().all(u8::is_ascii_whitespace) {
            json!({})
        } else {
            serde_json::from_slice(&bytes)
                .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_json", format!("the body is not JSON: {e}")))?
        };
        serde_json::from_value(value)
            .map(Body)
            .map_err(|e| ApiError::unprocessable("bad_request", format!("the body does not fit: {e}")))
    }
}

/// A route's one path parameter (a thread's or a run's id); one that is not UTF-8 once
/// decoded is `400` as the protocol's `ErrorResponse`, like every other refusal.
pub(crate) struct Id(pub(crate) String);

impl<S: Send + Sync> FromRequestParts<S> for Id {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Path::<String>::from_request_parts(parts, state)
            .await
            .map(|Path(id)| Id(id))
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_path", e.body_text()))
    }
}

/// Runs store calls off the runtime's threads.
pub(crate) async fn blocking<T: Send + 'static>(work: impl FnOnce() -> ApiResult<T> + Send + 'static) -> ApiResult<T> {
    tokio::task::spawn_blocking(work).await.map_err(|e| ApiError::internal(format!("a store call failed: {e}")))?
}

pub(crate) fn page(limit: Option<i64>, offset: Option<i64>) -> ApiResult<(usize, usize)> {
    let limit = limit.unwrap_or(10);
    let offset = offset.unwrap_or(0);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::unprocessable("bad_request", format!("`limit` must be 1 to 1000, not {limit}")));
    }
    if offset < 0 {
        return Err(ApiError::unprocessable("bad_request", format!("`offset` must not be negative, not {offset}")));
    }
    Ok((limit as usize, offset as usize))
}

/// Whether `value` holds every key of `filter` with an equal value.
pub(crate) fn matches(filter: &Map<String, Value>, value: &Value) -> bool {
    filter.iter().all(|(k, v)| value.get(k) == Some(v))
}

pub(crate) fn one_of(field: &str, value: &Option<String>, allowed: &[&str]) -> ApiResult<()> {
    match value {
        Some(v) if !allowed.contains(&v.as_str()) => Err(ApiError::unprocessable(
            "bad_request",
            format!("`{field}` must be one of {}, not `{v}`", allowed.join(", ")),
        )),
        _ => Ok(()),
    }
}

pub(crate) fn valid_thread_id(id: &str) -> ApiResult<ThreadId> {
    if id.is_empty() || id.len() > ThreadId::MAX_LEN || id.chars().any(char::is_control) {
        return Err(ApiError::unprocessable(
            "invalid_thread_id",
            format!(
                "thread id {id:?} cannot be used: it must be 1 to {} bytes without control characters",
                ThreadId::MAX_LEN
            ),
        ));
    }
    Ok(ThreadId::from(id))
}

/// Whether a request comes from one of LangGraph's SDKs, for the one route whose answer differs
/// with the same request: `POST /store/namespaces`. The Python SDK says so in its `User-Agent`
/// (`langgraph-sdk-py/…`); the JS SDK sends no agent of its own (Node's `fetch` says `node`, a
/// browser its own), so its key header, `x-api-key` (LangGraph's; the protocol's clients send
/// a bearer token), is taken as the sign.
pub(crate) fn from_sdk(headers: &HeaderMap) -> bool {
    headers
        .get(axum::http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ua| ua.starts_with("langgraph-sdk"))
        || headers.contains_key("x-api-key")
}
