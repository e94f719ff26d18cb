//! The Agent Protocol's streaming operations on a thread: `POST /threads/{id}/stream`, a
//! server-sent events stream of every run's events on the thread (the protocol's
//! `StreamingEvent`s, by channel, replayed after `since`); `POST /threads/{id}/commands`, its
//! request/response companion (`run.start`, `input.respond`, `state.get`,
//! `state.listCheckpoints`); and `GET /threads/{id}/stream`, the WebSocket form of both
//! (commands in; answers, and the events of the connection's subscriptions, out).
//!
//! A thread's events are its runs' own events (`journal.rs`), run after run in the order they
//! held the thread (`hub.rs`): a stream on any replica reads a run of its own from the run's
//! events here and another replica's as they are stored, so it sees the same events with the
//! same sequence numbers wherever it is opened, and goes on after `since` where it left off.
//! Channels: `lifecycle` (a run's start and end), `values`, `updates`, `custom`, `messages`,
//! `tasks` (the `debug` events) and `input` (a pause,
//! `input.requested`).

use crate::access::{Granted, Right};
use crate::api::{self, locate, RunRequest};
use crate::error::ApiError;
use crate::hub::{self, ThreadEvent};
use crate::request::{blocking, Body, Id};
use crate::runs::CancelOnDrop;
use crate::Shared;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::HashMap;
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

/// What a stream (or a WebSocket subscription) of a thread sends: the events of its channels
/// (`custom:NAME`: custom events whose data names `NAME` as its `name`) of the namespaces asked for.
#[derive(Clone, Debug)]
struct Filter {
    channels: Vec<String>,
    /// Every event here is the root agent's (namespace `[]`, depth 0): a namespace prefix other
    /// than the root's matches none.
    root_only: bool,
}

impl Filter {
    /// The filter of `request`, or `422` naming the channel that is not one.
    fn of(request: &EventStreamRequest) -> Result<Filter, ApiError> {
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
        let _ = request.depth;
        let root_only = request.namespaces.as_ref().is_none_or(|n| n.iter().any(Vec::is_empty));
        Ok(Filter { channels: request.channels.clone(), root_only })
    }

    fn wants(&self, event: &ThreadEvent) -> bool {
        self.root_only
            && self.channels.iter().any(|c| match c.strip_prefix("custom:") {
                Some(name) => event.channel == "custom" && event.data.get("name").and_then(Value::as_str) == Some(name),
                None => c == event.channel,
            })
    }
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
    let filter = Filter::of(&request)?;
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
    let events = futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (e, rx)) });
    use futures_util::StreamExt;
    let events = events.filter(move |e| std::future::ready(filter.wants(e))).map(|e| {
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

fn success(id: u64, result: Value) -> Value {
    json!({ "type": "success", "id": id, "result": result })
}

fn failure(id: impl Serialize, error: &ApiError) -> Value {
    json!({ "type": "error", "id": id, "error": error.code, "message": error.message })
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
    Ok(Json(answer(&shared, &id, command).await))
}

/// The answer to `command` on thread `id`: the protocol's `StreamingSuccessResponse` or
/// `StreamingErrorResponse`.
async fn answer(shared: &Arc<Shared>, id: &str, command: StreamingCommand) -> Value {
    let params = command.params.clone().unwrap_or_else(|| json!({}));
    if !params.is_object() {
        return failure(command.id, &ApiError::unprocessable("bad_request", "`params` must be an object"));
    }
    let outcome = match command.method.as_str() {
        "run.start" => start(shared, id, params).await,
        "input.respond" => {
            let response = params.get("response").cloned().unwrap_or(Value::Null);
            let resume = match params.get("interrupt_id").and_then(Value::as_str) {
                Some(interrupt) => json!({ interrupt: response }),
                None => response,
            };
            start(shared, id, json!({ "command": { "resume": resume } })).await
        }
        "state.get" => crate::langgraph::state_now(shared, id).await,
        "state.listCheckpoints" => {
            let limit = params.get("limit").and_then(Value::as_i64);
            crate::langgraph::checkpoints(shared, id, limit).await.map(|c| json!({ "checkpoints": c }))
        }
        other => Err(ApiError::unprocessable(
            "unknown_method",
            format!(
                "`{other}` is not a command this server takes (run.start, input.respond, state.get, state.listCheckpoints; subscription.subscribe, subscription.unsubscribe and subscription.reconnect over the WebSocket)"
            ),
        )),
    };
    match outcome {
        Ok(result) => success(command.id, result),
        Err(error) => failure(command.id, &error),
    }
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

/// `GET /threads/{id}/stream`: the protocol's WebSocket form of the two operations above. The
/// client sends `StreamingCommand`s as text frames and gets each answer as a text frame, with
/// the events of its subscriptions in between: `subscription.subscribe` (`params`: an
/// `EventStreamRequest` — `channels`, `namespaces`, `depth`, `since`; `result`:
/// `{subscription_id}`), `subscription.unsubscribe` (`subscription_id`) and
/// `subscription.reconnect` (`since`, and `subscription_id` for one subscription, else all:
/// their events after `since` again, as after a lost connection), plus every command of
/// `POST /threads/{id}/commands`. Each event is a `StreamingEvent` with the `subscription_id`
/// it was sent for. A request without a WebSocket upgrade is `426`.
pub(crate) async fn open_socket(
    State(shared): State<Arc<Shared>>,
    Extension(Granted(right)): Extension<Granted>,
    Id(id): Id,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let upgrade = upgrade.map_err(|rejection| {
        ApiError::new(
            StatusCode::UPGRADE_REQUIRED,
            "upgrade_required",
            format!(
                "`GET /threads/{{id}}/stream` is the protocol's WebSocket stream ({rejection}); `POST` it for server-sent events"
            ),
        )
    })?;
    let located = locate(&shared, &id).await?;
    Ok(upgrade.on_upgrade(move |socket| session(shared, id, located.thread, right, socket)))
}

/// How many subscriptions one WebSocket may hold at once (each follows the thread on a task of
/// its own, reading the store while another replica's run goes).
pub(crate) const SUBSCRIPTIONS_MAX: usize = 16;

/// One subscription of a WebSocket: what it sends, and the task that follows the thread for it.
struct Subscription {
    filter: Filter,
    task: tokio::task::AbortHandle,
}

/// A WebSocket session on thread `id`: its commands answered in turn, its subscriptions'
/// events sent as they come, until the client closes (or the connection goes). `right`: what
/// the token that opened it may do — a read token's `run.start` and `input.respond` are refused
/// (`forbidden`), as they are on `POST /threads/{id}/commands`.
async fn session(shared: Arc<Shared>, id: String, thread: ThreadId, right: Right, mut socket: WebSocket) {
    let (events_tx, mut events) = mpsc::channel::<(String, ThreadEvent)>(64);
    let mut subscriptions: HashMap<String, Subscription> = HashMap::new();
    let mut made = 0u64;
    loop {
        let reply = tokio::select! {
            message = socket.recv() => match message {
                Some(Ok(Message::Text(text))) => {
                    let command = match serde_json::from_str::<StreamingCommand>(text.as_str()) {
                        Ok(command) => command,
                        Err(error) => {
                            let error = ApiError::unprocessable("bad_request", format!("not a streaming command: {error}"));
                            let reply = failure(Value::Null, &error);
                            if socket.send(Message::text(reply.to_string())).await.is_err() {
                                break;
                            }
                            continue;
                        }
                    };
                    let id_of = command.id;
                    let params = command.params.clone().unwrap_or_else(|| json!({}));
                    match command.method.as_str() {
                        "subscription.subscribe" => match serde_json::from_value::<EventStreamRequest>(params)
                            .map_err(|e| ApiError::unprocessable("bad_request", format!("the subscription's `params` do not fit: {e}")))
                            .and_then(|request| Filter::of(&request).map(|filter| (filter, request.since.unwrap_or(0))))
                        {
                            Ok(_) if subscriptions.len() >= SUBSCRIPTIONS_MAX => failure(
                                id_of,
                                &ApiError::unprocessable(
                                    "too_many_subscriptions",
                                    format!("a connection holds at most {SUBSCRIPTIONS_MAX} subscriptions: unsubscribe one first"),
                                ),
                            ),
                            Ok((filter, since)) => {
                                made += 1;
                                let name = format!("sub-{made}");
                                let task = subscribe(&shared, &thread, &name, filter.clone(), since, &events_tx);
                                subscriptions.insert(name.clone(), Subscription { filter, task });
                                success(id_of, json!({ "subscription_id": name }))
                            }
                            Err(error) => failure(id_of, &error),
                        },
                        "subscription.unsubscribe" => {
                            let name = params.get("subscription_id").and_then(Value::as_str).unwrap_or_default();
                            match subscriptions.remove(name) {
                                Some(gone) => {
                                    gone.task.abort();
                                    success(id_of, json!({}))
                                }
                                None => failure(id_of, &ApiError::not_found(format!("no subscription `{name}` on this connection"))),
                            }
                        }
                        "subscription.reconnect" => {
                            let since = params.get("since").and_then(Value::as_u64).unwrap_or(0);
                            let only = params.get("subscription_id").and_then(Value::as_str);
                            if let Some(name) = only.filter(|n| !subscriptions.contains_key(*n)) {
                                failure(id_of, &ApiError::not_found(format!("no subscription `{name}` on this connection")))
                            } else {
                                for (name, subscription) in subscriptions.iter_mut().filter(|(n, _)| only.is_none_or(|o| o == n.as_str())) {
                                    subscription.task.abort();
                                    subscription.task = subscribe(&shared, &thread, name, subscription.filter.clone(), since, &events_tx);
                                }
                                success(id_of, json!({}))
                            }
                        }
                        "run.start" | "input.respond" if right < Right::Answer => failure(
                            id_of,
                            &ApiError::new(StatusCode::FORBIDDEN, "forbidden", "this token has read rights only"),
                        ),
                        _ => answer(&shared, &id, command).await,
                    }
                }
                Some(Ok(Message::Binary(_))) => {
                    failure(Value::Null, &ApiError::unprocessable("bad_request", "commands are JSON text frames"))
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                Some(Ok(_)) => continue,
            },
            Some((name, event)) = events.recv() => {
                // An event of a subscription since ended is not sent.
                if !subscriptions.contains_key(&name) {
                    continue;
                }
                let mut json = event.json();
                json["subscription_id"] = json!(name);
                json
            }
        };
        if socket.send(Message::text(reply.to_string())).await.is_err() {
            break;
        }
    }
    for subscription in subscriptions.values() {
        subscription.task.abort();
    }
}

/// Follows `thread` from after `since` for subscription `name` (`follow`), sending the events
/// `filter` wants to `out`, until aborted.
fn subscribe(
    shared: &Arc<Shared>,
    thread: &ThreadId,
    name: &str,
    filter: Filter,
    since: u64,
    out: &mpsc::Sender<(String, ThreadEvent)>,
) -> tokio::task::AbortHandle {
    let (shared, thread, name, out) = (shared.clone(), thread.clone(), name.to_owned(), out.clone());
    tokio::spawn(async move {
        let (tx, mut rx) = mpsc::channel::<ThreadEvent>(64);
        let follower = tokio::spawn(follow(shared, thread, since, tx));
        while let Some(event) = rx.recv().await {
            if filter.wants(&event) && out.send((name.clone(), event)).await.is_err() {
                break;
            }
        }
        follower.abort();
    })
    .abort_handle()
}
