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
//! `POST /v1/embeddings` answers `[len(input), 1.0, 0.5]` as the embedding (of each input,
//! when `input` is a list); `POST
//! /azure/openai/deployments/{deployment}/chat/completions` answers as `echo` (Azure OpenAI), and
//! records the `api-key` header and the query string.
//!
//! Other paths: `GET /json` (a JSON body and an `x-mock` header), `POST /echo` (the body sent,
//! with its content type), `GET /status/CODE`, `POST /hook` (a webhook: 204), `GET /big` (17 MiB).
//!
//! Hosted services, for `services.rs`: a model named `sonar…` also gets Perplexity's
//! `citations`; `POST /v1/smartscraper` (ScrapeGraphAI: its envelope, `result` naming the prompt
//! and the schema's properties; prompt `deny` is a 401); `POST /v1/scrape` and `POST /v1/crawl`
//! with `GET /v1/crawl/{id}` (Firecrawl: the crawl is `scraping` at the first poll, then
//! `completed`); LlamaCloud's `POST /api/v1/extraction/run` (mode `FAST` answers a pending job
//! `job-1`, any other the file's type and base64 back), `POST /api/v1/extraction/jobs`,
//! `GET /api/v1/extraction/jobs/{id}` (`job-1`: pending once, then done; others 404) and
//! `GET …/{id}/result`. The `api-key` or `SGAI-APIKEY` header is recorded as `api_key`.

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
                    .route("/v1/smartscraper", post(smartscraper))
                    .route("/v1/scrape", post(scrape))
                    .route("/v1/crawl", post(crawl))
                    .route("/v1/crawl/{id}", get(crawl_status))
                    .route("/api/v1/extraction/run", post(extraction_run))
                    .route("/api/v1/extraction/jobs", post(extraction_jobs))
                    .route("/api/v1/extraction/jobs/{id}", get(extraction_job))
                    .route("/api/v1/extraction/jobs/{id}/result", get(extraction_result))
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
    let api_key =
        headers.get("api-key").or_else(|| headers.get("sgai-apikey")).and_then(|v| v.to_str().ok()).map(str::to_owned);
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
    let inputs: Vec<usize> = match &request["input"] {
        Value::Array(items) => items.iter().map(|i| i.as_str().map_or(0, str::len)).collect(),
        other => vec![other.as_str().map_or(0, str::len)],
    };
    record(&shared, "/v1/embeddings", &headers, request.clone(), 200, Instant::now());
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, length)| json!({ "object": "embedding", "index": i, "embedding": [*length as f64, 1.0, 0.5] }))
        .collect();
    axum::Json(json!({
        "object": "list",
        "model": request["model"],
        "data": data,
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
    let mut body = json!({
        "id": "chatcmpl-mock",
        "object": "chat.completion",
        "model": request["model"],
        "choices": [{ "index": 0, "message": { "role": "assistant", "content": reply }, "finish_reason": "stop" }],
        "usage": { "prompt_tokens": prompt, "completion_tokens": words(&reply), "total_tokens": prompt + words(&reply) },
    });
    if request["model"].as_str().is_some_and(|m| m.starts_with("sonar")) {
        body["citations"] = json!([
            "https://a.example/one",
            { "url": "https://b.example/two", "title": "Two", "snippet": "the second" },
            "https://c.example/three",
        ]);
    }
    (StatusCode::OK, axum::Json(body).into_response())
}

/// How many times `key` was seen before, counting this one.
fn seen(shared: &Shared, key: &str) -> u32 {
    let mut counts = shared.counts.lock().unwrap();
    let n = counts.entry(key.to_owned()).or_default();
    *n += 1;
    *n
}

async fn smartscraper(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let prompt = request["user_prompt"].as_str().unwrap_or_default().to_owned();
    let status = if prompt == "deny" { 401 } else { 200 };
    record(&shared, "/v1/smartscraper", &headers, request.clone(), status, Instant::now());
    if status == 401 {
        return (StatusCode::UNAUTHORIZED, axum::Json(json!({ "detail": "Invalid API key" }))).into_response();
    }
    let properties: Vec<String> =
        request["output_schema"]["properties"].as_object().map(|p| p.keys().cloned().collect()).unwrap_or_default();
    axum::Json(json!({
        "request_id": "req-1",
        "status": "completed",
        "website_url": request["website_url"],
        "user_prompt": prompt,
        "result": { "prompt": prompt, "properties": properties },
        "error": "",
    }))
    .into_response()
}

async fn scrape(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    record(&shared, "/v1/scrape", &headers, request.clone(), 200, Instant::now());
    let url = request["url"].clone();
    axum::Json(json!({
        "success": true,
        "data": { "markdown": format!("# {}", url.as_str().unwrap_or_default()), "metadata": { "sourceURL": url } },
    }))
    .into_response()
}

async fn crawl(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    record(&shared, "/v1/crawl", &headers, request, 200, Instant::now());
    axum::Json(json!({ "success": true, "id": "crawl-1" })).into_response()
}

async fn crawl_status(State(shared): State<Arc<Shared>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    record(&shared, "/v1/crawl/status", &headers, json!(id), 200, Instant::now());
    if seen(&shared, &format!("crawl {id}")) == 1 {
        return axum::Json(json!({ "status": "scraping" })).into_response();
    }
    axum::Json(json!({
        "status": "completed",
        "data": [
            { "markdown": "# one", "metadata": { "sourceURL": "https://site.example/one" } },
            { "markdown": "# two", "html": "<h1>two</h1>", "metadata": { "sourceURL": "https://site.example/two" } },
        ],
    }))
    .into_response()
}

async fn extraction_run(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    record(&shared, "/api/v1/extraction/run", &headers, request.clone(), 200, Instant::now());
    if request["config"]["extraction_mode"] == "FAST" {
        return axum::Json(json!({ "id": "job-1", "status": "PENDING" })).into_response();
    }
    axum::Json(json!({
        "data": {
            "mime_type": request["file"]["mime_type"],
            "base64": request["file"]["data"],
            "schema": request["data_schema"],
            "agent_id": request["agent_id"],
        },
    }))
    .into_response()
}

async fn extraction_jobs(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    record(&shared, "/api/v1/extraction/jobs", &headers, request, 200, Instant::now());
    axum::Json(json!({ "id": "job-1", "status": "PENDING" })).into_response()
}

async fn extraction_job(State(shared): State<Arc<Shared>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    record(&shared, "/api/v1/extraction/jobs/status", &headers, json!(id), 200, Instant::now());
    if id != "job-1" {
        return (StatusCode::NOT_FOUND, axum::Json(json!({ "detail": "not found" }))).into_response();
    }
    let status = if seen(&shared, "job-1") == 1 { "PENDING" } else { "SUCCESS" };
    axum::Json(json!({ "id": id, "status": status, "progress": 50 })).into_response()
}

async fn extraction_result(State(shared): State<Arc<Shared>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    record(&shared, "/api/v1/extraction/jobs/result", &headers, json!(id), 200, Instant::now());
    axum::Json(json!({ "run_id": "run-1", "data": { "title": "Attention Is All You Need", "job": id } }))
        .into_response()
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
