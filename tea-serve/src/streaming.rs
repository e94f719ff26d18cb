//! The Agent Protocol's streaming operations on a thread: `POST /threads/{id}/stream`, a
//! server-sent events stream of every run's events on the thread (the protocol's
//! `StreamingEvent`s, by channel, replayed after `since`), and `POST /threads/{id}/commands`,
//! its request/response companion (`run.start`, `input.respond`, `state.get`,
//! `state.listCheckpoints`). The WebSocket form (`GET /threads/{id}/stream`) is not served.
//!
//! A thread's events come from its runs in this process (`runs.rs` publishes each run event
//! to its thread's [`Hub`]), each with the thread's next sequence number; the hub keeps the
//! last [`KEPT`] for replay. Channels: `lifecycle` (a run's start and end), `values`,
//! `updates`, `custom`, `messages`, `tasks` (the `debug` events) and `input` (a pause,
//! `input.requested`).

use crate::api::{self, locate, RunRequest};
use crate::error::ApiError;
use crate::hub::ThreadEvent;
use crate::request::{Body, Id};
use crate::Shared;
use axum::extract::State;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::Arc;
use tokio::sync::broadcast;

/// The channels a stream may ask for (and `custom:NAME`).
const CHANNELS: [&str; 9] =
    ["values", "updates", "messages", "tools", "lifecycle", "input", "checkpoints", "tasks", "custom"];

/// The protocol's `EventStreamRequest`.
#[derive(Deserialize)]
pub(crate) struct EventStreamRequest {
    channels: Vec<String>,
    #[serde(default)]
    namespaces: Option<Vec<Vec<String>>>,
    #[serde(default)]
    depth: Option<u64>,
    #[serde(default)]
    since: Option<u64>,
}

/// Whether a stream of `channels` sends `event` (`custom:NAME`: custom events whose data names
/// `NAME` as its `name`).
fn wanted(channels: &[String], event: &ThreadEvent) -> bool {
    channels.iter().any(|c| match c.strip_prefix("custom:") {
        Some(name) => event.channel == "custom" && event.data.get("name").and_then(Value::as_str) == Some(name),
        None => c == event.channel,
    })
}

/// `POST /threads/{id}/stream`: the thread's events of the channels asked for, from after
/// `since` (those still kept) on, until the client disconnects.
pub(crate) async fn open_stream(
    State(shared): State<Arc<Shared>>,
    Id(id): Id,
    Body(request): Body<EventStreamRequest>,
) -> Result<Response, ApiError> {
    if request.channels.is_empty() {
        return Err(ApiError::unprocessable("bad_request", "`channels` must name at least one channel"));
    }
    for channel in &request.channels {
        if !CHANNELS.contains(&channel.as_str()) && channel.strip_prefix("custom:").is_none_or(str::is_empty) {
            return Err(ApiError::unprocessable(
                "bad_request",
                format!("`{channel}` is not a channel ({}, or custom:NAME)", CHANNELS.join(", ")),
            ));
        }
    }
    // Every event here is the root agent's (namespace `[]`, depth 0): a namespace prefix other
    // than the root's matches none.
    let root_only = request.namespaces.as_ref().is_none_or(|n| n.iter().any(Vec::is_empty));
    let _ = request.depth;
    let located = locate(&shared, &id).await?;
    let hub = shared.runs.hub(&located.thread);
    let (kept, rx) = hub.subscribe(request.since.unwrap_or(0));
    let channels = request.channels;
    let last = kept.last().map_or(request.since.unwrap_or(0), |e| e.seq);
    let head = futures_util::stream::iter(kept);
    let tail = futures_util::stream::unfold((rx, last), |(mut rx, last)| async move {
        loop {
            match rx.recv().await {
                Ok(event) if event.seq <= last => continue,
                Ok(event) => {
                    let seq = event.seq;
                    return Some((event, (rx, seq)));
                }
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    use futures_util::StreamExt;
    let events = head.chain(tail).filter(move |e| std::future::ready(root_only && wanted(&channels, e))).map(|e| {
        Ok::<_, Infallible>(SseEvent::default().id(e.seq.to_string()).event(e.method).data(e.json().to_string()))
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::default()).into_response())
}

/// The protocol's `StreamingCommand`.
#[derive(Deserialize)]
pub(crate) struct StreamingCommand {
    id: u64,
    method: String,
    #[serde(default)]
    params: Option<Value>,
}

fn success(id: u64, result: Value) -> Json<Value> {
    Json(json!({ "type": "success", "id": id, "result": result }))
}

fn failure(id: u64, error: &ApiError) -> Json<Value> {
    Json(json!({ "type": "error", "id": id, "error": error.code, "message": error.message }))
}

/// `POST /threads/{id}/commands`: `run.start` (`params`: a run request's fields — `input`,
/// `agent_id` or `assistant_id`, `config`, `context`, `metadata` — started in the background),
/// `input.respond` (`response`, and `interrupt_id` to answer one of several pauses),
/// `state.get` (the thread's state) and `state.listCheckpoints` (`limit`). A command that fails
/// is answered as the protocol's `StreamingErrorResponse`, with the code and message a run
/// route would give.
pub(crate) async fn command(
    State(shared): State<Arc<Shared>>,
    Id(id): Id,
    Body(command): Body<StreamingCommand>,
) -> Result<Json<Value>, ApiError> {
    locate(&shared, &id).await?;
    let params = command.params.clone().unwrap_or_else(|| json!({}));
    if !params.is_object() {
        return Err(ApiError::unprocessable("bad_request", "`params` must be an object"));
    }
    let outcome = match command.method.as_str() {
        "run.start" => start(&shared, &id, params).await,
        "input.respond" => {
            let response = params.get("response").cloned().unwrap_or(Value::Null);
            let resume = match params.get("interrupt_id").and_then(Value::as_str) {
                Some(interrupt) => json!({ interrupt: response }),
                None => response,
            };
            start(&shared, &id, json!({ "command": { "resume": resume } })).await
        }
        "state.get" => crate::langgraph::state_now(&shared, &id).await,
        "state.listCheckpoints" => {
            let limit = params.get("limit").and_then(Value::as_i64);
            crate::langgraph::checkpoints(&shared, &id, limit).await.map(|c| json!({ "checkpoints": c }))
        }
        other => Err(ApiError::unprocessable(
            "unknown_method",
            format!(
                "`{other}` is not a command this server takes over HTTP (run.start, input.respond, state.get, state.listCheckpoints)"
            ),
        )),
    };
    Ok(match outcome {
        Ok(result) => success(command.id, result),
        Err(error) => failure(command.id, &error),
    })
}

/// Starts a run on thread `id` from `params` (a run request's fields) in the background, with
/// every stream mode on (the thread's stream chooses by channel); `{run_id}`.
async fn start(shared: &Arc<Shared>, id: &str, params: Value) -> Result<Value, ApiError> {
    let mut params = params;
    params["stream_mode"] = json!(["values", "updates", "custom", "debug", "messages-tuple"]);
    params["on_disconnect"] = json!("continue");
    let request: RunRequest = serde_json::from_value(params)
        .map_err(|e| ApiError::unprocessable("bad_request", format!("the command's `params` do not fit: {e}")))?;
    let prepared = api::prepare(shared, Some(id.to_owned()), request).await?;
    let run = api::start(shared, prepared)?;
    run.recorded().await;
    Ok(json!({ "run_id": run.id }))
}
