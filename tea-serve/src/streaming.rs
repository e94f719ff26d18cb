//! The Agent Protocol's streaming operations on a thread: `POST /threads/{id}/stream`, a
//! server-sent events stream of every run's events on the thread (the protocol's
//! `StreamingEvent`s, by channel, replayed after `since`), and `POST /threads/{id}/commands`,
//! its request/response companion (`run.start`, `input.respond`, `state.get`,
//! `state.listCheckpoints`). The WebSocket form (`GET /threads/{id}/stream`) is not served.
//!
//! A thread's events are its runs' own events (`journal.rs`), run after run in the order they
//! held the thread (`hub.rs`): a stream on any replica reads a run of its own from the run's
//! events here and another replica's as they are stored, so it sees the same events with the
//! same sequence numbers wherever it is opened, and goes on after `since` where it left off.
//! Channels: `lifecycle` (a run's start and end), `values`, `updates`, `custom`, `messages`,
//! `tasks` (the `debug` events) and `input` (a pause,
//! `input.requested`).

use crate::api::{self, locate, RunRequest};
use crate::error::ApiError;
use crate::hub::{self, ThreadEvent};
use crate::request::{blocking, Body, Id};
use crate::runs::CancelOnDrop;
use crate::Shared;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::Arc;
use tea_runtime::ThreadId;
use tokio::sync::mpsc;

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
/// `since` (or the `Last-Event-ID` a reconnecting client sends; those still kept) on, until the
/// client disconnects.
pub(crate) async fn open_stream(
    State(shared): State<Arc<Shared>>,
    Id(id): Id,
    headers: HeaderMap,
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
    // A client that reconnects says the last event it saw (an event id is its `seq`).
    let seen = match headers.get("last-event-id").map(|v| v.to_str().map(str::parse::<u64>)) {
        None => None,
        Some(Ok(Ok(seq))) => Some(seq),
        Some(_) => {
            return Err(ApiError::unprocessable("bad_request", "`Last-Event-ID` is not an event id of this server"))
        }
    };
    let since = request.since.unwrap_or(0).max(seen.unwrap_or(0));
    let located = locate(&shared, &id).await?;
    let (tx, rx) = tokio::sync::mpsc::channel::<ThreadEvent>(64);
    tokio::spawn(follow(shared, located.thread, since, tx));
    let channels = request.channels;
    let events = futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (e, rx)) });
    use futures_util::StreamExt;
    let events = events.filter(move |e| std::future::ready(root_only && wanted(&channels, e))).map(|e| {
        Ok::<_, Infallible>(SseEvent::default().id(e.seq.to_string()).event(e.method).data(e.json().to_string()))
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::default()).into_response())
}

/// Sends `thread`'s events after sequence number `since` to `tx`, run after run in the order
/// they held the thread (`hub.rs`), each run's from its own events here or as stored, until the
/// stream's client goes (`tx` closes).
async fn follow(shared: Arc<Shared>, thread: ThreadId, since: u64, tx: mpsc::Sender<ThreadEvent>) {
    use futures_util::StreamExt;
    let hub = shared.runs.hub(&thread);
    let mut grew = hub.watch();
    let (mut entry, mut after) = hub::start_after(since);
    loop {
        grew.borrow_and_update();
        let (s, t) = (shared.clone(), thread.clone());
        let from = entry;
        let listed = blocking(move || match s.records() {
            Some(store) => hub::entries(store, &t, from),
            None => Ok(Vec::new()),
        })
        .await;
        let listed = match listed {
            Ok(listed) => listed,
            Err(error) => {
                eprintln!("tea serve: the stream of thread `{thread}`: {}", error.message);
                Vec::new()
            }
        };
        for (n, run_id) in listed {
            if n != entry {
                // Entries before `n` are no longer kept.
                after = None;
            }
            let mut stored_only = false;
            loop {
                let here = if stored_only { None } else { shared.runs.get(&run_id) };
                let mut events = match &here {
                    Some(run) if run.base == 0 || after.is_some_and(|a| a + 1 >= run.base) => {
                        api::events_here(run.clone(), CancelOnDrop(None)).boxed()
                    }
                    _ => api::events_stored(shared.clone(), run_id.clone()).boxed(),
                };
                loop {
                    let next = tokio::select! {
                        next = events.next() => next,
                        () = tx.closed() => return,
                    };
                    let Some((place, event, data, at)) = next else { break };
                    if after.is_some_and(|a| place <= a) {
                        continue;
                    }
                    after = Some(place);
                    if let Some(event) = ThreadEvent::of(hub::seq(n, place), &run_id, &event, &data, at) {
                        if tx.send(event).await.is_err() {
                            return;
                        }
                    }
                }
                // A run another replica took over from this one goes on there: its events as stored.
                if !here.is_some_and(|run| run.lost()) {
                    break;
                }
                stored_only = true;
            }
            (entry, after) = (n + 1, None);
        }
        tokio::select! {
            _ = grew.changed() => {}
            () = tokio::time::sleep(hub::POLL) => {}
            () = tx.closed() => return,
        }
    }
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
