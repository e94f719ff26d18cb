//! A local server that speaks OpenAI's chat completions (`POST /v1/chat/completions`) and
//! Anthropic's Messages API (`POST /v1/messages`), for tests and examples that must not reach a
//! real provider (feature `testing`).
//!
//! It answers from a script ([`Scripted`]: a text, tool calls — several for parallel calls —
//! or an error status), in order; with the script used up, it echoes the last user message
//! (`echo: …`), or answers as a function of the request says ([`TestServer::answer_with`]). A request with `"stream": true` gets Server-Sent Events shaped as the API
//! documents them: OpenAI's `data:` chunks with `delta.content` pieces and `delta.tool_calls`
//! fragments (then usage when asked, then `[DONE]`), Anthropic's `message_start`,
//! `content_block_*` (`text_delta`, `input_json_delta`), `message_delta` and `message_stop`.
//! It checks what the APIs check — a tool result must answer a call of the message before it;
//! Anthropic's turns alternate, start with the user and need `max_tokens` and
//! `anthropic-version` — and answers 400 in the API's error shape when a request breaks a rule.
//! Every request is recorded ([`TestServer::requests`]).
//!
//! ```
//! use tea_models::testing::{Scripted, TestServer};
//! use tea_models::{ChatModel, ChatRequest};
//! use tea::Message;
//! use serde_json::json;
//!
//! let server = TestServer::start();
//! server.script([Scripted::tool_calls([("add", json!({"a": 2, "b": 2}))]), Scripted::text("4")]);
//! let model = server.openai("test-model");
//! let mut chat = vec![Message::user("2 + 2?")];
//! let reply = model.chat_blocking(ChatRequest::new(&chat))?;
//! assert_eq!(reply.message.tool_calls()[0].name, "add");
//! chat.push(reply.message.clone());
//! chat.push(Message::tool(reply.message.tool_calls()[0].id.clone(), "4"));
//! assert_eq!(model.chat_blocking(ChatRequest::new(&chat))?.message.text(), "4");
//! assert_eq!(server.requests()[1].body["messages"][2]["role"], "tool");
//! # Ok::<(), tea_models::ModelError>(())
//! ```

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

/// One scripted answer of a [`TestServer`].
#[derive(Clone, Debug, PartialEq)]
pub enum Scripted {
    /// An answer with this text (and no tool call).
    Text(String),
    /// An answer that calls these tools (name, arguments), all at once, after `text` if any.
    ToolCalls {
        /// Text before the calls (`None`: none).
        text: Option<String>,
        /// The calls, in order.
        calls: Vec<(String, Value)>,
    },
    /// An error answer: this status, and this message in the API's error shape.
    Error {
        /// The HTTP status.
        status: u16,
        /// The error's message.
        message: String,
    },
}

impl Scripted {
    /// A text answer.
    pub fn text(text: impl Into<String>) -> Scripted {
        Scripted::Text(text.into())
    }

    /// An answer calling `calls` (name, arguments) at once.
    pub fn tool_calls<N: Into<String>>(calls: impl IntoIterator<Item = (N, Value)>) -> Scripted {
        Scripted::ToolCalls { text: None, calls: calls.into_iter().map(|(n, a)| (n.into(), a)).collect() }
    }

    /// An error answer.
    pub fn error(status: u16, message: impl Into<String>) -> Scripted {
        Scripted::Error { status, message: message.into() }
    }
}

/// A request the server received.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// The path and query: `/v1/chat/completions`, `/v1/messages`, or an Azure deployment's
    /// `/openai/deployments/NAME/chat/completions?api-version=…`.
    pub path: String,
    /// The headers, names in lower case.
    pub headers: Vec<(String, String)>,
    /// The JSON body.
    pub body: Value,
}

impl Recorded {
    /// The value of header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// How a server answers once its script is used up ([`TestServer::answer_with`]).
type Responder = Arc<dyn Fn(&Value) -> Scripted + Send + Sync>;

#[derive(Default)]
struct Inner {
    script: VecDeque<Scripted>,
    requests: Vec<Recorded>,
    /// Numbers for response and tool-call ids.
    next: u64,
    /// What answers when the script is used up; `None`: the echo.
    responder: Option<Responder>,
    /// Whether requests are recorded.
    unrecorded: bool,
}

type Shared = Arc<Mutex<Inner>>;

/// The server: on `127.0.0.1` at a free port, on a thread of its own, until dropped.
pub struct TestServer {
    base: String,
    inner: Shared,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for TestServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestServer").field("base", &self.base).finish_non_exhaustive()
    }
}

impl TestServer {
    /// Starts a server.
    ///
    /// # Panics
    /// When no local port can be bound (a test machine without loopback).
    pub fn start() -> TestServer {
        let inner = Shared::default();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready, port) = std::sync::mpsc::channel();
        let router = Router::new()
            .route("/v1/chat/completions", post(openai))
            .route("/openai/deployments/{deployment}/chat/completions", post(openai))
            .route("/v1/messages", post(anthropic))
            .with_state(inner.clone());
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a local port");
                let _ = ready.send(listener.local_addr().expect("its address").port());
                let _ = axum::serve(listener, router)
                    .with_graceful_shutdown(async move {
                        let _ = stopped.await;
                    })
                    .await;
            });
        });
        let port = port.recv().expect("the test server started");
        TestServer { base: format!("http://127.0.0.1:{port}"), inner, stop: Some(stop), thread: Some(thread) }
    }

    /// `http://127.0.0.1:PORT`: Anthropic's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `http://127.0.0.1:PORT/v1`: the OpenAI-compatible base URL.
    pub fn v1(&self) -> String {
        format!("{}/v1", self.base)
    }

    /// An [`OpenAi`](crate::OpenAi) model on this server (key `test-key`).
    pub fn openai(&self, model: &str) -> crate::OpenAi {
        crate::OpenAi::compatible(self.v1(), model).api_key("test-key")
    }

    /// An [`Anthropic`](crate::Anthropic) model on this server (key `test-key`).
    pub fn anthropic(&self, model: &str) -> crate::Anthropic {
        crate::Anthropic::new(&self.base, model).api_key("test-key")
    }

    /// Adds answers to the script, to be given in order.
    pub fn script(&self, answers: impl IntoIterator<Item = Scripted>) {
        self.lock().script.extend(answers);
    }

    /// How the server answers once the script is used up, instead of the echo: `answer` gets
    /// each request's JSON body (in the shape of the API it was sent to) and returns the
    /// answer. For conversations of any length, a benchmark's say.
    ///
    /// ```
    /// use tea_models::testing::{Scripted, TestServer};
    /// use tea_models::{ChatModel, ChatRequest};
    /// use tea::Message;
    /// use serde_json::json;
    ///
    /// let server = TestServer::start();
    /// // A tool call after each user message, a text after each tool result.
    /// server.answer_with(|body| match body["messages"].as_array().and_then(|m| m.last()) {
    ///     Some(last) if last["role"] == "tool" => Scripted::text("done"),
    ///     _ => Scripted::tool_calls([("lookup", json!({"item": 1}))]),
    /// });
    /// let model = server.openai("m");
    /// let reply = model.chat_blocking(ChatRequest::new(&[Message::user("look it up")]))?;
    /// assert_eq!(reply.message.tool_calls()[0].name, "lookup");
    /// # Ok::<(), tea_models::ModelError>(())
    /// ```
    pub fn answer_with(&self, answer: impl Fn(&Value) -> Scripted + Send + Sync + 'static) {
        self.lock().responder = Some(Arc::new(answer));
    }

    /// Whether requests are recorded ([`requests`](Self::requests)); on by default. A server
    /// that answers a long benchmark keeps none.
    pub fn record(&self, on: bool) {
        self.lock().unrecorded = !on;
    }

    /// The requests received so far, in order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.lock().requests.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Takes the request in and the answer to give: the script's next, or an echo.
fn take(inner: &Shared, uri: &Uri, headers: &HeaderMap, body: &Value) -> (Scripted, u64) {
    let path = uri.path_and_query().map_or_else(|| uri.path().to_owned(), |p| p.as_str().to_owned());
    let mut inner = inner.lock().unwrap_or_else(PoisonError::into_inner);
    if !inner.unrecorded {
        let headers = headers
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect();
        inner.requests.push(Recorded { path, headers, body: body.clone() });
    }
    inner.next += 1;
    let n = inner.next;
    let answer = match (inner.script.pop_front(), &inner.responder) {
        (Some(scripted), _) => scripted,
        (None, Some(responder)) => {
            let responder = responder.clone();
            // Not under the lock: the responder may take its time.
            drop(inner);
            return (responder(body), n);
        }
        (None, None) => Scripted::Text(format!("echo: {}", last_user_text(body))),
    };
    (answer, n)
}

/// The text of the last user message (either API's shape).
fn last_user_text(body: &Value) -> String {
    let messages = body.get("messages").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    let Some(last) = messages.iter().rev().find(|m| m["role"] == "user") else { return String::new() };
    match &last["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect(),
        _ => String::new(),
    }
}

/// Tokens as the server counts them: words.
fn words(text: &str) -> u64 {
    text.split_whitespace().count() as u64
}

fn prompt_words(body: &Value) -> u64 {
    let text = body.get("messages").map(Value::to_string).unwrap_or_default();
    words(&text)
}

/// `text` in pieces of about a word, each with the space before the next.
fn pieces(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut piece = String::new();
    for c in text.chars() {
        piece.push(c);
        if c == ' ' {
            out.push(std::mem::take(&mut piece));
        }
    }
    if !piece.is_empty() {
        out.push(piece);
    }
    out
}

fn json_response(status: u16, body: Value) -> Response {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap_or_default()
}

fn sse_response(events: String) -> Response {
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream")
        .body(Body::from(events))
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// OpenAI.

fn openai_error(status: u16, message: &str) -> Response {
    json_response(status, json!({"error": {"message": message, "type": "invalid_request_error", "code": null}}))
}

/// What OpenAI refuses: no model, no messages, a tool result answering no call.
fn openai_problem(body: &Value) -> Option<String> {
    if !body.get("model").is_some_and(Value::is_string) {
        return Some("you must provide a model parameter".to_owned());
    }
    let messages = body.get("messages").and_then(Value::as_array)?;
    if messages.is_empty() {
        return Some("'messages' must contain at least one message".to_owned());
    }
    let mut open: Vec<String> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        match m["role"].as_str() {
            Some("assistant") => {
                open = m["tool_calls"]
                    .as_array()
                    .map(|c| c.iter().filter_map(|c| c["id"].as_str().map(str::to_owned)).collect())
                    .unwrap_or_default();
                for call in m["tool_calls"].as_array().map_or(&[][..], Vec::as_slice) {
                    if !call["function"]["arguments"].is_string() {
                        return Some(format!("messages[{i}].tool_calls: `arguments` must be a string"));
                    }
                }
            }
            Some("tool") => {
                let id = m["tool_call_id"].as_str().unwrap_or_default();
                if !open.iter().any(|o| o == id) {
                    return Some(format!(
                        "messages[{i}]: a message with role 'tool' must be a response to a preceding message with 'tool_calls' (id `{id}`)"
                    ));
                }
            }
            Some("system" | "user" | "developer") => open.clear(),
            other => return Some(format!("messages[{i}]: invalid role {other:?}")),
        }
    }
    None
}

async fn openai(State(inner): State<Shared>, uri: Uri, headers: HeaderMap, body: String) -> Response {
    let Ok(body) = serde_json::from_str::<Value>(&body) else {
        return openai_error(400, "the body is not JSON");
    };
    let (answer, n) = take(&inner, &uri, &headers, &body);
    if let Some(problem) = openai_problem(&body) {
        return openai_error(400, &problem);
    }
    let model = body["model"].as_str().unwrap_or_default().to_owned();
    let (text, calls) = match answer {
        Scripted::Error { status, message } => return openai_error(status, &message),
        Scripted::Text(text) => (Some(text), Vec::new()),
        Scripted::ToolCalls { text, calls } => (text, calls),
    };
    let id = format!("chatcmpl-{n}");
    let calls: Vec<(String, String, String)> = calls
        .into_iter()
        .enumerate()
        .map(|(i, (name, args))| (format!("call_{n}_{i}"), name, args.to_string()))
        .collect();
    let finish = if calls.is_empty() { "stop" } else { "tool_calls" };
    let input = prompt_words(&body);
    let output = text.as_deref().map_or(0, words) + calls.len() as u64;
    if body["stream"] != true {
        let tool_calls: Vec<Value> = calls
            .iter()
            .map(
                |(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}),
            )
            .collect();
        let mut message = json!({"role": "assistant", "content": text, "refusal": null});
        if !tool_calls.is_empty() {
            message["tool_calls"] = Value::Array(tool_calls);
        }
        return json_response(
            200,
            json!({
                "id": id, "object": "chat.completion", "created": 0, "model": model,
                "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
                "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output},
            }),
        );
    }
    let chunk = |delta: Value, finish: Value| {
        let chunk = json!({"id": id, "object": "chat.completion.chunk", "created": 0, "model": model,
                           "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]});
        format!("data: {chunk}\n\n")
    };
    let mut events = chunk(json!({"role": "assistant", "content": ""}), Value::Null);
    for piece in text.as_deref().map(pieces).unwrap_or_default() {
        events.push_str(&chunk(json!({"content": piece}), Value::Null));
    }
    for (i, (id, name, args)) in calls.iter().enumerate() {
        events.push_str(&chunk(
            json!({"tool_calls": [{"index": i, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}]}),
            Value::Null,
        ));
        let middle = args.char_indices().nth(args.chars().count() / 2).map_or(args.len(), |(at, _)| at);
        for part in [&args[..middle], &args[middle..]] {
            events
                .push_str(&chunk(json!({"tool_calls": [{"index": i, "function": {"arguments": part}}]}), Value::Null));
        }
    }
    events.push_str(&chunk(json!({}), json!(finish)));
    if body["stream_options"]["include_usage"] == true {
        let usage = json!({"id": id, "object": "chat.completion.chunk", "created": 0, "model": model, "choices": [],
                           "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output}});
        events.push_str(&format!("data: {usage}\n\n"));
    }
    events.push_str("data: [DONE]\n\n");
    sse_response(events)
}

// ---------------------------------------------------------------------------------------------
// Anthropic.

fn anthropic_error(status: u16, message: &str) -> Response {
    let kind = match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    };
    json_response(status, json!({"type": "error", "error": {"type": kind, "message": message}}))
}

/// What the Messages API refuses.
fn anthropic_problem(headers: &HeaderMap, body: &Value) -> Option<String> {
    if headers.get("anthropic-version").is_none() {
        return Some("anthropic-version: header is required".to_owned());
    }
    if !body.get("max_tokens").is_some_and(Value::is_u64) {
        return Some("max_tokens: Field required".to_owned());
    }
    let messages = body.get("messages").and_then(Value::as_array)?;
    let mut open: Vec<String> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or_default();
        let want = if i % 2 == 0 { "user" } else { "assistant" };
        if role != want {
            return Some(format!("messages.{i}.role: roles must alternate between \"user\" and \"assistant\", starting with \"user\" (found {role:?})"));
        }
        let blocks = match &m["content"] {
            Value::String(_) => Vec::new(),
            Value::Array(blocks) => blocks.clone(),
            _ => return Some(format!("messages.{i}.content: Input should be a valid list")),
        };
        let mut next_open = Vec::new();
        for (j, block) in blocks.iter().enumerate() {
            match block["type"].as_str() {
                Some("tool_use") if role == "assistant" => {
                    if !block["input"].is_object() {
                        return Some(format!("messages.{i}.content.{j}.tool_use.input: Input should be an object"));
                    }
                    next_open.push(block["id"].as_str().unwrap_or_default().to_owned());
                }
                Some("tool_result") if role == "user" => {
                    let id = block["tool_use_id"].as_str().unwrap_or_default();
                    if !open.iter().any(|o| o == id) {
                        return Some(format!(
                            "messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                        ));
                    }
                }
                Some("text" | "image") => {}
                other => {
                    return Some(format!("messages.{i}.content.{j}: unexpected block type {other:?} for role {role}"))
                }
            }
        }
        open = next_open;
    }
    None
}

async fn anthropic(State(inner): State<Shared>, uri: Uri, headers: HeaderMap, body: String) -> Response {
    let Ok(body) = serde_json::from_str::<Value>(&body) else {
        return anthropic_error(400, "the body is not JSON");
    };
    let (answer, n) = take(&inner, &uri, &headers, &body);
    if let Some(problem) = anthropic_problem(&headers, &body) {
        return anthropic_error(400, &problem);
    }
    let model = body["model"].as_str().unwrap_or_default().to_owned();
    let (text, calls) = match answer {
        Scripted::Error { status, message } => return anthropic_error(status, &message),
        Scripted::Text(text) => (Some(text), Vec::new()),
        Scripted::ToolCalls { text, calls } => (text, calls),
    };
    let id = format!("msg_{n}");
    let calls: Vec<(String, String, Value)> =
        calls.into_iter().enumerate().map(|(i, (name, args))| (format!("toolu_{n}_{i}"), name, args)).collect();
    let stop = if calls.is_empty() { "end_turn" } else { "tool_use" };
    let input = prompt_words(&body);
    let output = text.as_deref().map_or(0, words) + calls.len() as u64;
    if body["stream"] != true {
        let mut content: Vec<Value> = text.iter().map(|t| json!({"type": "text", "text": t})).collect();
        content.extend(
            calls.iter().map(|(id, name, args)| json!({"type": "tool_use", "id": id, "name": name, "input": args})),
        );
        return json_response(
            200,
            json!({
                "id": id, "type": "message", "role": "assistant", "model": model, "content": content,
                "stop_reason": stop, "stop_sequence": null,
                "usage": {"input_tokens": input, "output_tokens": output},
            }),
        );
    }
    let event = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    let mut events = event(
        "message_start",
        json!({"type": "message_start", "message": {"id": id, "type": "message", "role": "assistant", "model": model,
               "content": [], "stop_reason": null, "stop_sequence": null,
               "usage": {"input_tokens": input, "output_tokens": 1}}}),
    );
    events.push_str(&event("ping", json!({"type": "ping"})));
    let mut index = 0;
    if let Some(text) = &text {
        events.push_str(&event(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
        ));
        for piece in pieces(text) {
            events.push_str(&event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}}),
            ));
        }
        events.push_str(&event("content_block_stop", json!({"type": "content_block_stop", "index": index})));
        index += 1;
    }
    for (id, name, args) in &calls {
        events.push_str(&event(
            "content_block_start",
            json!({"type": "content_block_start", "index": index,
                   "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
        ));
        let args = args.to_string();
        let middle = args.char_indices().nth(args.chars().count() / 2).map_or(args.len(), |(at, _)| at);
        for part in [&args[..middle], &args[middle..]] {
            events.push_str(&event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index,
                       "delta": {"type": "input_json_delta", "partial_json": part}}),
            ));
        }
        events.push_str(&event("content_block_stop", json!({"type": "content_block_stop", "index": index})));
        index += 1;
    }
    events.push_str(&event(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
               "usage": {"output_tokens": output}}),
    ));
    events.push_str(&event("message_stop", json!({"type": "message_stop"})));
    sse_response(events)
}
