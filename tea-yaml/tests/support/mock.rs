//! An OpenAI-compatible mock server on `127.0.0.1:0` for the network actions' tests (also
//! used by tea-cli's tests). It runs on a thread of its own and records every request with the
//! times it started and ended.
//!
//! `POST /v1/chat/completions` answers by the request's `model`, `KIND[:ARG][:TAG]`:
//! - `echo`: `"echo: {the last message's content}"`, with word counts as usage;
//! - `slow:MS`: the same after MS milliseconds;
//! - `busy:N`: 429 (with `Retry-After: 0`) for the first N requests of that model name, then echo;
//! - `down:N`: 500 for the first N requests, then echo;
//! - `garbage`: 200 with a body that is not JSON; `shapeless`: 200 with JSON but no `choices`;
//! - `deny`: 401 whose body repeats the `Authorization` header (as some APIs quote the key).
//!
//! `POST /v1/embeddings` answers `[len(input), 1.0, 0.5]` as the embedding; `POST
//! /azure/openai/deployments/{deployment}/chat/completions` answers as `echo` (Azure OpenAI), and
//! records the `api-key` header and the query string.
//!
//! Other paths: `GET /json` (a JSON body and an `x-mock` header), `POST /echo` (the body sent,
//! with its content type), `GET /status/CODE`, `POST /hook` (a webhook: 204), `GET /big` (17 MiB).

#![allow(dead_code)]

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One request the mock answered.
#[derive(Clone, Debug)]
pub struct Hit {
    pub path: String,
    pub model: String,
    pub authorization: Option<String>,
    /// The `api-key` header (Azure's).
    pub api_key: Option<String>,
    /// The query string, if any.
    pub query: Option<String>,
    pub body: Value,
    pub status: u16,
    pub started: Instant,
    pub ended: Instant,
}

#[derive(Default)]
struct Shared {
    hits: Mutex<Vec<Hit>>,
    counts: Mutex<HashMap<String, u32>>,
}

/// The running mock; the server stops when the test process ends.
pub struct Mock {
    pub base: String,
    shared: Arc<Shared>,
}

impl Mock {
    pub fn start() -> Mock {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let shared = Arc::new(Shared::default());
        let state = shared.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            runtime.block_on(async move {
                let app = Router::new()
                    .route("/v1/chat/completions", post(chat))
                    .route("/v1/embeddings", post(embeddings))
                    .route("/azure/openai/deployments/{deployment}/chat/completions", post(azure))
                    .route("/json", get(json_page))
                    .route("/echo", post(echo))
                    .route("/status/{code}", get(status))
                    .route("/hook", post(hook))
                    .route("/big", get(big))
                    .with_state(state);
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                axum::serve(listener, app).await.unwrap();
            });
        });
        Mock { base, shared }
    }

    /// The chat-completions base URL (`…/v1`).
    pub fn v1(&self) -> String {
        format!("{}/v1", self.base)
    }

    pub fn hits(&self) -> Vec<Hit> {
        self.shared.hits.lock().unwrap().clone()
    }

    /// The requests whose model is `model`.
    pub fn hits_of(&self, model: &str) -> Vec<Hit> {
        self.hits().into_iter().filter(|h| h.model == model).collect()
    }
}

/// An address on which nothing listens (bound, then released).
pub fn refused() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}/v1")
}

fn record(shared: &Shared, path: &str, headers: &HeaderMap, body: Value, status: u16, started: Instant) {
    let model = body.get("model").and_then(Value::as_str).unwrap_or_default().to_owned();
    let authorization = headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let api_key = headers.get("api-key").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let hit = Hit {
        path: path.to_owned(),
        model,
        authorization,
        api_key,
        query: None,
        body,
        status,
        started,
        ended: Instant::now(),
    };
    shared.hits.lock().unwrap().push(hit);
}

fn words(text: &str) -> usize {
    text.split_whitespace().count()
}

async fn chat(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let started = Instant::now();
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let model = request["model"].as_str().unwrap_or_default().to_owned();
    let mut parts = model.split(':');
    let kind = parts.next().unwrap_or_default();
    let arg: u64 = parts.next().and_then(|a| a.parse().ok()).unwrap_or(0);
    let seen = {
        let mut counts = shared.counts.lock().unwrap();
        let n = counts.entry(model.clone()).or_default();
        *n += 1;
        *n
    };
    let (status, response) = match kind {
        "slow" => {
            tokio::time::sleep(Duration::from_millis(arg)).await;
            completion(&request)
        }
        "busy" if u64::from(seen) <= arg => {
            let mut r = (StatusCode::TOO_MANY_REQUESTS, "slow down").into_response();
            r.headers_mut().insert("retry-after", "0".parse().unwrap());
            (StatusCode::TOO_MANY_REQUESTS, r)
        }
        "down" if u64::from(seen) <= arg => (
            StatusCode::INTERNAL_SERVER_ERROR,
            (StatusCode::INTERNAL_SERVER_ERROR, "upstream fell over").into_response(),
        ),
        "garbage" => (StatusCode::OK, ([("content-type", "application/json")], "{not json").into_response()),
        "shapeless" => (StatusCode::OK, axum::Json(json!({ "id": "x", "object": "nothing" })).into_response()),
        "deny" => {
            let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
            (
                StatusCode::UNAUTHORIZED,
                (StatusCode::UNAUTHORIZED, format!("Incorrect API key provided: {auth}")).into_response(),
            )
        }
        _ => completion(&request),
    };
    record(&shared, "/v1/chat/completions", &headers, request, status.as_u16(), started);
    response
}

async fn embeddings(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let length = request["input"].as_str().map_or(0, str::len);
    record(&shared, "/v1/embeddings", &headers, request.clone(), 200, Instant::now());
    axum::Json(json!({
        "object": "list",
        "model": request["model"],
        "data": [{ "object": "embedding", "index": 0, "embedding": [length as f64, 1.0, 0.5] }],
        "usage": { "prompt_tokens": 2, "total_tokens": 2 },
    }))
    .into_response()
}

async fn azure(
    State(shared): State<Arc<Shared>>,
    Path(deployment): Path<String>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let (_, response) = completion(&request);
    record(&shared, &format!("/azure/{deployment}"), &headers, request, 200, Instant::now());
    if let Some(hit) = shared.hits.lock().unwrap().last_mut() {
        hit.query = query;
    }
    response
}

fn completion(request: &Value) -> (StatusCode, Response) {
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().and_then(|m| m["content"].as_str()).unwrap_or_default();
    let reply = format!("echo: {last}");
    let prompt: usize = messages.iter().map(|m| words(m["content"].as_str().unwrap_or_default())).sum();
    let body = json!({
        "id": "chatcmpl-mock",
        "object": "chat.completion",
        "model": request["model"],
        "choices": [{ "index": 0, "message": { "role": "assistant", "content": reply }, "finish_reason": "stop" }],
        "usage": { "prompt_tokens": prompt, "completion_tokens": words(&reply), "total_tokens": prompt + words(&reply) },
    });
    (StatusCode::OK, axum::Json(body).into_response())
}

async fn json_page(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    record(&shared, "/json", &headers, Value::Null, 200, Instant::now());
    ([("x-mock", "yes")], axum::Json(json!({ "hello": "world" }))).into_response()
}

async fn echo(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let text = String::from_utf8_lossy(&body).into_owned();
    let kind = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    record(&shared, "/echo", &headers, Value::String(text.clone()), 200, Instant::now());
    axum::Json(json!({ "received": text, "content_type": kind })).into_response()
}

async fn status(State(shared): State<Arc<Shared>>, Path(code): Path<u16>, headers: HeaderMap) -> Response {
    record(&shared, "/status", &headers, json!(code), code, Instant::now());
    let code = StatusCode::from_u16(code).unwrap_or(StatusCode::IM_A_TEAPOT);
    (code, format!("status {}", code.as_u16())).into_response()
}

async fn hook(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    record(&shared, "/hook", &headers, body, 204, Instant::now());
    StatusCode::NO_CONTENT.into_response()
}

async fn big() -> Response {
    vec![b'a'; 17 << 20].into_response()
}
