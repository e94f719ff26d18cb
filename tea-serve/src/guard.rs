//! What every request must be before a handler reads it: a state-changing request of the JSON
//! API with a body says `Content-Type: application/json` (`415` otherwise), and a body arrives
//! whole within the router's body read timeout (`408` otherwise) and within its body limit
//! (`413`). With the header read timeout of [`serve`](crate::serve), no connection can hold
//! the server by sending slowly.
//!
//! The content type is what keeps a web page from posting to the API: a browser sends a
//! cross-site `text/plain`, form or multipart body without asking (a "simple" request, `no-cors`),
//! but `application/json` only after a CORS preflight, which this server grants only to pages
//! of a loopback origin or an allowed host (`access::cors`: the origins `insecure_local` access
//! already lets in), never with credentials. A request
//! without a body (a `cancel`, a `DELETE`) carries no command; from a browser it carries an
//! `Origin`, which `insecure_local` access checks ([`crate::access`]), and no bearer token,
//! which token access needs.

use crate::error::ApiError;
use crate::Shared;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use std::sync::Arc;

/// Whether `path` is one of the inbox's pages and forms (HTML, form-encoded, CSRF-checked),
/// not the JSON API.
pub(crate) fn inbox_path(path: &str) -> bool {
    path == "/" || path == "/inbox" || path.starts_with("/inbox/")
}

/// Whether the request has a body: a `Content-Length` above 0, or a `Transfer-Encoding`.
fn has_body(headers: &HeaderMap) -> bool {
    if headers.contains_key(header::TRANSFER_ENCODING) {
        return true;
    }
    match headers.get(header::CONTENT_LENGTH) {
        None => false,
        Some(length) => length.to_str().ok().and_then(|v| v.trim().parse::<u64>().ok()).is_none_or(|n| n > 0),
    }
}

/// Whether a `Content-Type` is JSON: `application/json`, with or without parameters
/// (`; charset=utf-8`), in any case.
fn is_json(content_type: Option<&HeaderValue>) -> bool {
    content_type
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

/// The middleware: the JSON API's content type, then the body, read whole within the
/// router's time and size limits before the handler runs.
pub(crate) async fn guard(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let changes = matches!(parts.method, Method::POST | Method::PUT | Method::PATCH | Method::DELETE);
    let with_body = has_body(&parts.headers);
    if changes && with_body && !inbox_path(parts.uri.path()) && !is_json(parts.headers.get(header::CONTENT_TYPE)) {
        let given = parts.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("none");
        return ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!("this route takes a JSON body (`Content-Type: application/json`), not `{given}`"),
        )
        .into_response();
    }
    if !with_body {
        return next.run(Request::from_parts(parts, body)).await;
    }
    let limit = shared.body_limit;
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "bad_body",
            format!("the request body is larger than this server's limit of {limit} bytes"),
        )
    };
    let declared = parts.headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return closing(too_large().into_response());
    }
    let read = async {
        let mut stream = body.into_data_stream();
        let mut bytes = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                ApiError::new(StatusCode::BAD_REQUEST, "bad_body", format!("the request body could not be read: {e}"))
            })?;
            if bytes.len() + chunk.len() > limit {
                return Err(too_large());
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    };
    match tokio::time::timeout(shared.body_read_timeout, read).await {
        Ok(Ok(bytes)) => next.run(Request::from_parts(parts, Body::from(bytes))).await,
        Ok(Err(error)) => closing(error.into_response()),
        Err(_) => closing(
            ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                format!("the request body did not arrive within {} s", shared.body_read_timeout.as_secs_f64()),
            )
            .into_response(),
        ),
    }
}

/// `response`, closing its connection (the rest of a body that was not read is not awaited).
fn closing(mut response: Response) -> Response {
    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_content_types_and_bodies_are_told_apart() {
        let json = |v: &'static str| is_json(Some(&HeaderValue::from_static(v)));
        assert!(json("application/json") && json("Application/JSON; charset=utf-8"));
        assert!(!json("text/plain") && !json("application/x-www-form-urlencoded") && !json("application/jsonx"));
        assert!(!is_json(None));
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut map = HeaderMap::new();
            for (k, v) in pairs {
                map.insert(*k, HeaderValue::from_static(v));
            }
            map
        };
        assert!(has_body(&headers(&[("content-length", "2")])));
        assert!(has_body(&headers(&[("transfer-encoding", "chunked")])));
        assert!(!has_body(&headers(&[("content-length", "0")])));
        assert!(!has_body(&headers(&[])));
    }
}
