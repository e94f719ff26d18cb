//! The Agent Protocol's handlers: agents, threads and runs, over the served agents (the
//! store's are in `store.rs`, a thread's streaming operations in `streaming.rs`; `routes.rs`
//! is the table of routes).
//!
//! The handlers stand on `runs` (this process's runs), `plan` (what a run request means) and
//! `request` (bodies, ids, pages, blocking store calls), which import downwards in that order;
//! `tests/layers.rs` at the workspace root fails on an import circle between them.

use crate::error::ApiError;
use crate::journal;
use crate::modes::Modes;
use crate::plan::{agent_named, checkpoint_number, locate_now, Prepared};
pub(crate) use crate::plan::{checkpoint_uuid, locate, prepare, status, Located, RunCommand, RunRequest};
use crate::queue;
use crate::records::{self, ThreadRecord};
pub(crate) use crate::request::Id;
use crate::request::{blocking, matches, one_of, page, valid_thread_id, Body};
use crate::runlog::{self, RunRecord};
use crate::runs::{self, interrupt_json_plain, CancelOnDrop, End, RunEntry};
use crate::served::Served;
use crate::time::rfc3339;
use crate::Shared;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::Stream;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::borrow::Cow;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tea_runtime::{Interrupt, ThreadId};

type Shd = State<Arc<Shared>>;
type ApiResult<T> = Result<T, ApiError>;

fn interrupt_json(agent: &dyn Served, interrupt: &Interrupt) -> Value {
    let mut out = interrupt_json_plain(interrupt);
    out["answer_kind"] = json!(agent.answer_kind(interrupt).as_str());
    out
}

fn object(value: &Value) -> Value {
    match value {
        Value::Object(_) => value.clone(),
        other => json!({ "value": other }),
    }
}

/// The protocol's `Thread`, with the pending pauses (`interrupts`) and the agent beside.
pub(crate) fn thread_json(shared: &Shared, located: &Located) -> Value {
    let record = located.record.clone().unwrap_or_default();
    let mut out = json!({
        "thread_id": located.thread.as_str(),
        "created_at": rfc3339(record.created_at),
        "updated_at": rfc3339(record.updated_at),
        "metadata": record.metadata,
        "status": status(shared, located),
        "values": located.snapshot.as_ref().map_or(json!({}), |s| object(&s.state)),
    });
    if let (Some(agent), Some(snapshot)) = (&located.agent, &located.snapshot) {
        out["agent_id"] = json!(agent.name());
        out["interrupts"] = snapshot.interrupts.iter().map(|i| interrupt_json(&**agent, i)).collect();
    }
    if let Some(error) = &record.error {
        out["error"] = json!({ "code": "run_failed", "message": error });
    }
    out
}

// ---- agents ----

fn agent_json(agent: &dyn Served) -> Value {
    json!({
        "agent_id": agent.name(),
        "name": agent.name(),
        "metadata": {},
        "capabilities": { "ap.io.messages": false, "ap.io.streaming": true },
    })
}

#[derive(Deserialize)]
pub(crate) struct AgentSearch {
    name: Option<String>,
    metadata: Option<Map<String, Value>>,
    limit: Option<i64>,
    offset: Option<i64>,
}

pub(crate) async fn search_agents(State(shared): Shd, Body(search): Body<AgentSearch>) -> ApiResult<Json<Value>> {
    let (limit, offset) = page(search.limit, search.offset)?;
    let found: Vec<Value> = shared
        .agents
        .iter()
        .filter(|a| search.name.as_ref().is_none_or(|n| a.name() == n))
        .filter(|_| search.metadata.as_ref().is_none_or(Map::is_empty))
        .skip(offset)
        .take(limit)
        .map(|a| agent_json(&**a))
        .collect();
    Ok(Json(Value::Array(found)))
}

pub(crate) async fn get_agent(State(shared): Shd, Id(id): Id) -> ApiResult<Json<Value>> {
    Ok(Json(agent_json(&*agent_named(&shared, &id)?)))
}

/// The schemas of `agent`, LangGraph's `GraphSchema` and the protocol's `AgentSchema` at once:
/// the state's JSON Schema as its input, output and state schema.
pub(crate) fn schemas_json(agent: &dyn Served) -> Value {
    let state = agent.state_schema();
    json!({
        "agent_id": agent.name(),
        "graph_id": agent.name(),
        "input_schema": state,
        "output_schema": state,
        "state_schema": state,
        "config_schema": { "type": "object", "properties": {} },
        "context_schema": null,
    })
}

pub(crate) async fn agent_schemas(State(shared): Shd, Id(id): Id) -> ApiResult<Json<Value>> {
    Ok(Json(schemas_json(&*agent_named(&shared, &id)?)))
}

// ---- threads ----

#[derive(Deserialize)]
pub(crate) struct ThreadCreate {
    thread_id: Option<String>,
    #[serde(default)]
    metadata: Map<String, Value>,
    if_exists: Option<String>,
}

pub(crate) async fn create_thread(State(shared): Shd, Body(create): Body<ThreadCreate>) -> ApiResult<Json<Value>> {
    let do_nothing = match create.if_exists.as_deref() {
        None | Some("raise") => false,
        Some("do_nothing") => true,
        Some(other) => {
            return Err(ApiError::unprocessable(
                "bad_request",
                format!("`if_exists` must be `raise` or `do_nothing`, not `{other}`"),
            ))
        }
    };
    let thread = match &create.thread_id {
        Some(id) => valid_thread_id(id)?,
        None => ThreadId::random(),
    };
    let s = shared.clone();
    let located = blocking(move || {
        let store = s.records().ok_or_else(|| ApiError::not_found("this server serves no agent"))?;
        if let Some(found) = locate_now(&s, &thread)? {
            if do_nothing {
                return Ok(found);
            }
            return Err(ApiError::conflict("thread_exists", format!("thread `{thread}` exists already")));
        }
        let metadata = create.metadata.clone();
        records::update(store, &thread, |current| match current {
            Some(_) if do_nothing => Ok(None),
            Some(_) => Err(ApiError::conflict("thread_exists", format!("thread `{thread}` exists already"))),
            None => Ok(Some(ThreadRecord::new(None, metadata.clone()))),
        })?;
        locate_now(&s, &thread)?
            .ok_or_else(|| ApiError::internal(format!("thread `{thread}` vanished as it was created")))
    })
    .await?;
    Ok(Json(thread_json(&shared, &located)))
}

#[derive(Deserialize)]
pub(crate) struct ThreadSearch {
    metadata: Option<Map<String, Value>>,
    values: Option<Map<String, Value>>,
    status: Option<String>,
    limit: Option<i64>,
    offset: Option<i64>,
}

/// Every thread the agents and the records know, located.
pub(crate) async fn all_threads(shared: &Arc<Shared>) -> ApiResult<Vec<Located>> {
    let s = shared.clone();
    blocking(move || {
        let mut ids = std::collections::BTreeSet::new();
        if let Some(store) = s.records() {
            ids.extend(records::threads(store)?);
        }
        for agent in &s.agents {
            ids.extend(agent.threads()?.into_iter().filter(|t| !t.as_str().contains('/')));
        }
        let mut found = Vec::new();
        for id in ids {
            if let Some(located) = locate_now(&s, &id)? {
                found.push(located);
            }
        }
        Ok(found)
    })
    .await
}

pub(crate) async fn search_threads(State(shared): Shd, Body(search): Body<ThreadSearch>) -> ApiResult<Json<Value>> {
    let (limit, offset) = page(search.limit, search.offset)?;
    if let Some(status) = &search.status {
        if !["idle", "busy", "interrupted", "error"].contains(&status.as_str()) {
            return Err(ApiError::unprocessable(
                "bad_request",
                format!("`status` must be idle, busy, interrupted or error, not `{status}`"),
            ));
        }
    }
    let threads: Vec<Value> = all_threads(&shared)
        .await?
        .iter()
        .map(|l| thread_json(&shared, l))
        .filter(|t| search.status.as_ref().is_none_or(|s| t["status"] == **s))
        .filter(|t| search.metadata.as_ref().is_none_or(|m| matches(m, &t["metadata"])))
        .filter(|t| search.values.as_ref().is_none_or(|v| matches(v, &t["values"])))
        .collect();
    Ok(Json(newest_first(threads, "updated_at", "thread_id", offset, limit)))
}

pub(crate) async fn get_thread(State(shared): Shd, Id(id): Id) -> ApiResult<Json<Value>> {
    let located = locate(&shared, &id).await?;
    Ok(Json(thread_json(&shared, &located)))
}

#[derive(Deserialize)]
pub(crate) struct ThreadPatch {
    metadata: Option<Map<String, Value>>,
    values: Option<Value>,
    messages: Option<Value>,
}

pub(crate) async fn patch_thread(
    State(shared): Shd,
    Id(id): Id,
    Body(patch): Body<ThreadPatch>,
) -> ApiResult<Json<Value>> {
    if patch.values.is_some() || patch.messages.is_some() {
        return Err(ApiError::unprocessable(
            "unsupported",
            "a thread's state changes only through a run: send `command.update` with a run (metadata can be patched)",
        ));
    }
    let located = locate(&shared, &id).await?;
    let s = shared.clone();
    let thread = located.thread.clone();
    let agent = located.agent.as_ref().map(|a| a.name().to_owned());
    blocking(move || {
        let store = s.records().ok_or_else(|| ApiError::not_found("this server serves no agent"))?;
        records::update(store, &thread, |current| {
            let mut record = current.unwrap_or_else(|| ThreadRecord::new(agent.clone(), Map::new()));
            if let Some(metadata) = &patch.metadata {
                record.metadata.extend(metadata.clone());
            }
            record.updated_at = crate::time::now_ms();
            Ok(Some(record))
        })
    })
    .await?;
    get_thread(State(shared), Id(id)).await
}

pub(crate) async fn delete_thread(State(shared): Shd, Id(id): Id) -> ApiResult<StatusCode> {
    let located = locate(&shared, &id).await?;
    if shared.runs.running(&located.thread) {
        return Err(ApiError::conflict("thread_busy", format!("thread `{id}` is running: cancel its run first")));
    }
    let s = shared.clone();
    blocking(move || {
        if let Some(agent) = &located.agent {
            agent.delete(&located.thread)?;
        }
        if let Some(store) = s.records() {
            for id in located.record.as_ref().map_or(&[][..], |r| &r.runs) {
                queue::forget(store, id)?;
                runlog::delete(store, id)?;
            }
            records::delete(store, &located.thread)?;
        }
        Ok(())
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
pub(crate) struct HistoryQuery {
    limit: Option<i64>,
    before: Option<String>,
}

pub(crate) async fn thread_history(
    State(shared): Shd,
    Id(id): Id,
    query: Result<Query<HistoryQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Value>> {
    let Query(query) = query.map_err(|e| ApiError::unprocessable("bad_request", e.body_text()))?;
    let (limit, _) = page(query.limit, None)?;
    let before =
        match &query.before {
            None => None,
            Some(b) => Some(checkpoint_number(b).ok_or_else(|| {
                ApiError::unprocessable("bad_request", format!("`before` is not a checkpoint id: {b}"))
            })?),
        };
    let located = locate(&shared, &id).await?;
    let Some(agent) = located.agent.clone() else { return Ok(Json(json!([]))) };
    let thread = located.thread.clone();
    let history = blocking(move || agent.history(&thread)).await?;
    let states: Vec<Value> = history
        .iter()
        .filter(|s| before.is_none_or(|b| s.checkpoint < b))
        .take(limit)
        .map(|s| {
            json!({
                "checkpoint": { "checkpoint_id": checkpoint_uuid(s.checkpoint), "number": s.checkpoint },
                "values": object(&s.state),
                "metadata": {
                    "step": s.step,
                    "next": s.next,
                    "interrupts": s.interrupts.iter().map(interrupt_json_plain).collect::<Vec<_>>(),
                },
            })
        })
        .collect();
    Ok(Json(Value::Array(states)))
}

pub(crate) async fn copy_thread(State(shared): Shd, Id(id): Id) -> ApiResult<Json<Value>> {
    let located = locate(&shared, &id).await?;
    if shared.runs.running(&located.thread) {
        return Err(ApiError::conflict("thread_busy", format!("thread `{id}` is running: copy it once it stops")));
    }
    let copy = ThreadId::random();
    let s = shared.clone();
    let new = copy.clone();
    let located = blocking(move || {
        if let Some(agent) = &located.agent {
            let store = agent.store();
            let mut history = store.history(agent.name(), &located.thread)?;
            history.reverse();
            let mut expected = None;
            for (id, bytes) in history {
                store.append(agent.name(), &new, expected, id, &bytes, true)?;
                expected = Some(id);
            }
        }
        if let Some(store) = s.records() {
            let mut record = located.record.clone().unwrap_or_else(|| ThreadRecord::new(None, Map::new()));
            record.agent = located.agent.as_ref().map(|a| a.name().to_owned());
            // The pause's token names the original thread; the copy gets its own on demand.
            record.pause = None;
            // The runs are the original's: deleting the copy must not delete their records.
            record.runs.clear();
            record.created_at = crate::time::now_ms();
            record.updated_at = record.created_at;
            records::update(store, &new, |_| Ok(Some(record.clone())))?;
        }
        locate_now(&s, &new)?.ok_or_else(|| ApiError::internal(format!("the copy `{new}` vanished")))
    })
    .await?;
    Ok(Json(thread_json(&shared, &located)))
}

// ---- runs ----

/// Launches a prepared run.
pub(crate) fn start(shared: &Arc<Shared>, prepared: Prepared) -> ApiResult<Arc<RunEntry>> {
    runs::launch(shared, prepared)
}

/// Runs `request` and answers when it ends: the protocol's `RunWaitResponse`, or for a request
/// in LangGraph's words (it names an `assistant_id`) the state where the run stopped
/// ([`RunEntry::state_json`]).
pub(crate) async fn wait_for(
    shared: Arc<Shared>,
    thread: Option<String>,
    request: RunRequest,
) -> ApiResult<Json<Value>> {
    let langgraph = request.assistant_id.is_some();
    let prepared = prepare(&shared, thread, request).await?;
    let cancel = prepared.cancel_on_disconnect;
    let run = start(&shared, prepared)?;
    let guard = CancelOnDrop(cancel.then(|| run.clone()));
    run.finished().await;
    drop(guard);
    if let End::Refused(error) = &run.progress().end {
        return Err(error.clone());
    }
    Ok(Json(if langgraph { run.state_json() } else { run.wait_json() }))
}

pub(crate) async fn stream_for(
    shared: Arc<Shared>,
    thread: Option<String>,
    request: RunRequest,
) -> ApiResult<Response> {
    let prepared = prepare(&shared, thread, request).await?;
    let cancel = prepared.cancel_on_disconnect;
    let run = start(&shared, prepared)?;
    let guard = CancelOnDrop(cancel.then(|| run.clone()));
    // A run refused at once (a stale answer, a busy thread) is the request's error, not a stream.
    let _ = tokio::time::timeout(Duration::from_secs(1), run.finished()).await;
    if let End::Refused(error) = &run.progress().end {
        return Err(error.clone());
    }
    let modes = run.settings.modes;
    Ok(sse(run, guard, modes, None).into_response())
}

pub(crate) async fn background(
    shared: Arc<Shared>,
    thread: Option<String>,
    request: RunRequest,
) -> ApiResult<Json<Value>> {
    let prepared = prepare(&shared, thread, request).await?;
    let run = start(&shared, prepared)?;
    // Answered once the run is in the store, so any replica can be asked about it next.
    run.recorded().await;
    Ok(Json(run.json()))
}

pub(crate) async fn run_wait(State(shared): Shd, Body(request): Body<RunRequest>) -> ApiResult<Json<Value>> {
    wait_for(shared, None, request).await
}

pub(crate) async fn thread_run_wait(
    State(shared): Shd,
    Id(id): Id,
    Body(request): Body<RunRequest>,
) -> ApiResult<Json<Value>> {
    wait_for(shared, Some(id), request).await
}

pub(crate) async fn run_stream(State(shared): Shd, Body(request): Body<RunRequest>) -> ApiResult<Response> {
    stream_for(shared, None, request).await
}

pub(crate) async fn thread_run_stream(
    State(shared): Shd,
    Id(id): Id,
    Body(request): Body<RunRequest>,
) -> ApiResult<Response> {
    stream_for(shared, Some(id), request).await
}

pub(crate) async fn run_background(State(shared): Shd, Body(request): Body<RunRequest>) -> ApiResult<Json<Value>> {
    background(shared, None, request).await
}

pub(crate) async fn thread_run_background(
    State(shared): Shd,
    Id(id): Id,
    Body(request): Body<RunRequest>,
) -> ApiResult<Json<Value>> {
    background(shared, Some(id), request).await
}

/// A run's events as server-sent events, those of `modes` (`crate::modes`): `metadata`, then
/// after each step `updates` and `values` (`values` with `__interrupt__` at a pause), `error`
/// if it fails, and `end`. Each event's id is its place in the run's events, so a client that
/// reconnects with `Last-Event-ID: N` (`after`) gets the events after the `N`th — on this
/// replica or another, which reads them from the store (`journal.rs`, [`stored_stream`]).
pub(crate) fn sse(
    run: Arc<RunEntry>,
    guard: CancelOnDrop,
    modes: Modes,
    after: Option<usize>,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    use futures_util::StreamExt;
    let events = events_here(run, guard)
        .filter(move |(n, event, _, _)| std::future::ready(after.is_none_or(|a| *n > a) && modes.sends(event)))
        .map(|(n, event, data, _)| Ok(SseEvent::default().id(n.to_string()).event(event).data(data.to_string())));
    Sse::new(events).keep_alive(KeepAlive::default())
}

/// One event of a run: its place among the run's events (from 0), its name, its data and when
/// it happened (milliseconds since the Unix epoch; 0: not known).
pub(crate) type Placed = (usize, Cow<'static, str>, Value, u64);

/// The events of `run` (this replica's), from its first here (place `run.base`) on, as they
/// come, until its `end`; `guard` goes when the stream does.
pub(crate) fn events_here(run: Arc<RunEntry>, guard: CancelOnDrop) -> impl Stream<Item = Placed> {
    let base = run.base;
    let (log, rx) = run.subscribe();
    let ended = log.iter().any(|i| i.event == "end");
    let seen = log.len();
    let head = futures_util::stream::iter(log.into_iter().enumerate());
    let tail = futures_util::stream::unfold((rx, ended, guard, seen), |(mut rx, ended, guard, n)| async move {
        if ended {
            return None;
        }
        loop {
            match rx.recv().await {
                Ok(item) => {
                    let ended = item.event == "end";
                    return Some(((n, item), (rx, ended, guard, n + 1)));
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    use futures_util::StreamExt;
    head.chain(tail).map(move |(n, item)| (base + n, Cow::Borrowed(item.event), item.data, item.at))
}

/// A run as this server knows it: its own (with its events), or another replica's (or an
/// earlier process's) through the run's record in the store.
pub(crate) enum Found {
    Here(Arc<RunEntry>),
    Stored(RunRecord),
}

/// The run `id`, or `404`.
pub(crate) async fn find_run(shared: &Arc<Shared>, id: &str) -> ApiResult<Found> {
    if let Some(run) = shared.runs.get(id) {
        return Ok(Found::Here(run));
    }
    let (s, i) = (shared.clone(), id.to_owned());
    let stored =
        blocking(move || s.records().map(|store| runlog::read(store, &i)).transpose().map(Option::flatten)).await?;
    stored.map(Found::Stored).ok_or_else(|| ApiError::not_found(format!("run `{id}` not found")))
}

/// How long a wait on another replica's run polls its record before it answers with the run
/// as it stands.
pub(crate) const STORED_WAIT: Duration = Duration::from_secs(300);

/// The record of run `id` once it is no longer pending (polled), or as it stands after `limit`.
pub(crate) async fn stored_end(
    shared: &Arc<Shared>,
    id: &str,
    mut record: RunRecord,
    limit: Duration,
) -> ApiResult<RunRecord> {
    let deadline = tokio::time::Instant::now() + limit;
    while record.pending() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (s, i) = (shared.clone(), id.to_owned());
        let read =
            blocking(move || s.records().map(|store| runlog::read(store, &i)).transpose().map(Option::flatten)).await?;
        record = read.ok_or_else(|| ApiError::not_found(format!("run `{id}` was deleted")))?;
    }
    Ok(record)
}

/// What a search of runs filters on (`POST /runs/search`, `GET /threads/{id}/runs`).
#[derive(Deserialize, Default)]
pub(crate) struct RunFilter {
    pub(crate) metadata: Option<Map<String, Value>>,
    pub(crate) status: Option<String>,
    pub(crate) thread_id: Option<String>,
    pub(crate) agent_id: Option<String>,
    pub(crate) limit: Option<i64>,
    pub(crate) offset: Option<i64>,
}

/// `POST /runs/search`: this server's runs and the records of the others' (read through).
pub(crate) async fn search_runs(State(shared): Shd, Body(search): Body<RunFilter>) -> ApiResult<Json<Value>> {
    Ok(Json(runs_matching(&shared, search).await?))
}

/// The runs `search` finds, this server's and (from their records) the others', newest first.
pub(crate) async fn runs_matching(shared: &Arc<Shared>, search: RunFilter) -> ApiResult<Value> {
    let (limit, offset) = page(search.limit, search.offset)?;
    one_of("status", &search.status, &["pending", "error", "success", "timeout", "interrupted"])?;
    let mut runs: Vec<Value> = shared.runs.all().iter().map(|r| r.json()).collect();
    let here: std::collections::HashSet<String> =
        runs.iter().filter_map(|r| r["run_id"].as_str().map(str::to_owned)).collect();
    let s = shared.clone();
    let stored = blocking(move || s.records().map(runlog::all).transpose().map(Option::unwrap_or_default)).await?;
    runs.extend(stored.into_iter().filter(|(id, _)| !here.contains(id)).map(|(_, record)| record.run().clone()));
    let wanted = |field: &str, want: &Option<String>, run: &Value| want.as_ref().is_none_or(|w| run[field] == **w);
    let found: Vec<Value> = runs
        .into_iter()
        .filter(|r| wanted("thread_id", &search.thread_id, r))
        .filter(|r| wanted("agent_id", &search.agent_id, r))
        .filter(|r| wanted("status", &search.status, r))
        .filter(|r| search.metadata.as_ref().is_none_or(|m| matches(m, &r["metadata"])))
        .collect();
    Ok(newest_first(found, "created_at", "run_id", offset, limit))
}

/// The page of a search's `found` records from `offset`, at most `limit`: the newest first by
/// their `time` field (an RFC 3339 string), records of the same time by their `id` field.
fn newest_first(mut found: Vec<Value>, time: &str, id: &str, offset: usize, limit: usize) -> Value {
    found.sort_by(|a, b| b[time].as_str().cmp(&a[time].as_str()).then_with(|| a[id].as_str().cmp(&b[id].as_str())));
    found.into_iter().skip(offset).take(limit).collect()
}

pub(crate) async fn get_run(State(shared): Shd, Id(id): Id) -> ApiResult<Json<Value>> {
    match find_run(&shared, &id).await? {
        Found::Here(run) => Ok(Json(run.json())),
        Found::Stored(record) => Ok(Json(record.run().clone())),
    }
}

pub(crate) async fn wait_run(State(shared): Shd, Id(id): Id) -> ApiResult<Json<Value>> {
    match find_run(&shared, &id).await? {
        Found::Here(run) => {
            run.finished().await;
            Ok(Json(run.wait_json()))
        }
        Found::Stored(record) => Ok(Json(stored_end(&shared, &id, record, STORED_WAIT).await?.wait)),
    }
}

/// `GET /runs/{id}/stream`: the run's events as they come, from the start or after
/// `Last-Event-ID` — this server's run from its own events, another replica's from the store.
pub(crate) async fn stream_run(State(shared): Shd, Id(id): Id, headers: HeaderMap) -> ApiResult<Response> {
    let after = last_event_id(&headers)?;
    let found = find_run(&shared, &id).await?;
    stream_found(&shared, &id, found, None, after, false).await
}

/// The place of the last event a client saw, from its `Last-Event-ID` header.
pub(crate) fn last_event_id(headers: &HeaderMap) -> ApiResult<Option<usize>> {
    match headers.get("last-event-id").map(|v| v.to_str().map(str::parse::<usize>)) {
        None => Ok(None),
        Some(Ok(Ok(n))) => Ok(Some(n)),
        Some(_) => Err(ApiError::unprocessable("bad_request", "`Last-Event-ID` is not an event id of this server")),
    }
}

/// The events of run `id` (`found`), of `modes` (else those it was started with), after place
/// `after`: from the run's own events when this replica runs it and has them all, else from
/// the store as they are stored. `cancel`: a client that goes cancels the run (here).
pub(crate) async fn stream_found(
    shared: &Arc<Shared>,
    id: &str,
    found: Found,
    modes: Option<Modes>,
    after: Option<usize>,
    cancel: bool,
) -> ApiResult<Response> {
    match found {
        Found::Here(run) if run.base == 0 || after.is_some_and(|a| a + 1 >= run.base) => {
            let modes = modes.unwrap_or(run.settings.modes);
            let guard = CancelOnDrop(cancel.then(|| run.clone()));
            Ok(sse(run, guard, modes, after).into_response())
        }
        _ => stored_stream(shared, id, modes, after).await,
    }
}

/// How many empty reads of a run's stored events pass between looks at its record (whether it
/// ended without its `end` stored, or was deleted).
const QUIET_READS: u32 = 20;

/// Run `id`'s stored events (`journal.rs`) after place `after`, of `modes` (else those the run
/// was started with), as they are stored, until its `end`. A run that ended with no event
/// stored (recorded by an older server) is answered from its record: `metadata`, the last
/// `values`, `error`, `end`.
pub(crate) async fn stored_stream(
    shared: &Arc<Shared>,
    id: &str,
    modes: Option<Modes>,
    after: Option<usize>,
) -> ApiResult<Response> {
    let (s, i) = (shared.clone(), id.to_owned());
    let (record, stored) = blocking(move || match s.records() {
        Some(store) => Ok((runlog::read(store, &i)?, journal::stored(store, &i)?)),
        None => Ok((None, 0)),
    })
    .await?;
    let record = record.ok_or_else(|| ApiError::not_found(format!("run `{id}` not found")))?;
    let modes = match modes {
        Some(modes) => modes,
        None => Modes::parse(record.run().get("stream_mode").filter(|m| !m.is_null()))?,
    };
    if stored == 0 && !record.pending() {
        return Ok(ended_stream(id, &record));
    }
    use futures_util::StreamExt;
    let events = events_stored(shared.clone(), id.to_owned())
        .filter(move |(n, event, _, _)| std::future::ready(after.is_none_or(|a| *n > a) && modes.sends(event)))
        .map(|(n, event, data, _)| {
            Ok::<_, Infallible>(SseEvent::default().id(n.to_string()).event(event).data(data.to_string()))
        });
    Ok(Sse::new(events).keep_alive(KeepAlive::default()).into_response())
}

/// Run `id`'s events as they are stored (`journal.rs`), read every [`journal::POLL`], until
/// its `end` — or, once its record says it ended (or is gone) with no `end` stored, its last
/// stored event.
pub(crate) fn events_stored(shared: Arc<Shared>, id: String) -> impl Stream<Item = Placed> {
    let batches =
        futures_util::stream::unfold((shared, id, 0u64, false), |(shared, id, mut batch, ended)| async move {
            if ended {
                return None;
            }
            let mut quiet = 0u32;
            loop {
                let found = stored_after(&shared, &id, batch).await?;
                // Ended (or deleted) with no `end` stored after it: what was read is the last.
                let mut last = false;
                if found.is_empty() {
                    quiet += 1;
                    if !quiet.is_multiple_of(QUIET_READS) || !ended_or_gone(&shared, &id).await {
                        tokio::time::sleep(journal::POLL).await;
                        continue;
                    }
                    last = true;
                }
                let found = if last { stored_after(&shared, &id, batch).await? } else { found };
                let mut items = Vec::new();
                for (n, stored) in found {
                    batch = n;
                    items.extend(placed(stored));
                }
                let end = last || items.iter().any(|(_, event, _, _)| event == "end");
                return Some((futures_util::stream::iter(items), (shared, id, batch, end)));
            }
        });
    use futures_util::StreamExt;
    batches.flatten()
}

/// The batches of run `id`'s stored events after batch `after` (`None`: the store failed).
async fn stored_after(shared: &Arc<Shared>, id: &str, after: u64) -> Option<Vec<(u64, journal::Batch)>> {
    let (s, i) = (shared.clone(), id.to_owned());
    blocking(move || match s.records() {
        Some(store) => journal::after(store, &i, after),
        None => Ok(Vec::new()),
    })
    .await
    .ok()
}

/// Whether run `id`'s record says it ended, or is gone.
async fn ended_or_gone(shared: &Arc<Shared>, id: &str) -> bool {
    let (s, i) = (shared.clone(), id.to_owned());
    let record = blocking(move || s.records().map(|store| runlog::read(store, &i)).transpose()).await.ok().flatten();
    record.flatten().is_none_or(|r| !r.pending())
}

/// A stored batch's events, each with its place and time.
fn placed(batch: journal::Batch) -> impl Iterator<Item = Placed> {
    let (first, at) = (batch.first, batch.at);
    batch
        .events
        .into_iter()
        .enumerate()
        .map(move |(k, (event, data))| (first + k, Cow::Owned(event), data, at.get(k).copied().unwrap_or(0)))
}

/// A run that ended, as its record tells it: `metadata`, the last `values`, `error`, `end`.
fn ended_stream(id: &str, record: &RunRecord) -> Response {
    let run = record.run();
    let mut values = record.wait["values"].clone();
    if let (Value::Object(map), Some(interrupts)) = (&mut values, record.wait.get("interrupts")) {
        map.insert("__interrupt__".into(), interrupts.clone());
    }
    let mut items = vec![("metadata", json!({ "run_id": id, "thread_id": run["thread_id"] })), ("values", values)];
    if let Some(error) = record.wait.get("error") {
        items.push(("error", error.clone()));
    }
    items.push(("end", json!({ "run_id": id, "status": run["status"] })));
    let events = futures_util::stream::iter(
        items
            .into_iter()
            .map(|(event, data)| Ok::<_, Infallible>(SseEvent::default().event(event).data(data.to_string()))),
    );
    Sse::new(events).into_response()
}

/// Cancels `run`: a queued one leaves its queue at once, a running one stops its stream.
fn cancel(shared: &Arc<Shared>, run: &Arc<RunEntry>) {
    run.cancel();
    if shared.runs.withdraw(run) {
        runs::end_unstarted(shared, run, End::Cancelled);
    }
}

/// How long a cancel waits for the run to stop.
const CANCEL_WAIT: Duration = Duration::from_secs(10);

/// Cancels run `id` wherever it runs: here, or (through its record, which the replica that runs
/// it polls) on another replica; waits until it stops.
pub(crate) async fn cancel_anywhere(shared: &Arc<Shared>, id: &str) -> ApiResult<()> {
    match find_run(shared, id).await? {
        Found::Here(run) => {
            cancel(shared, &run);
            let _ = tokio::time::timeout(CANCEL_WAIT, run.finished()).await;
        }
        Found::Stored(record) if record.pending() => {
            let (s, i) = (shared.clone(), id.to_owned());
            let asked = blocking(move || {
                s.records().map(|store| runlog::ask_cancel(store, &i)).transpose().map(Option::flatten)
            })
            .await?;
            if let Some(record) = asked {
                stored_end(shared, id, record, CANCEL_WAIT).await?;
            }
        }
        Found::Stored(_) => {}
    }
    Ok(())
}

pub(crate) async fn cancel_run(State(shared): Shd, Id(id): Id) -> ApiResult<StatusCode> {
    cancel_anywhere(&shared, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(crate) async fn delete_run(State(shared): Shd, Id(id): Id) -> ApiResult<StatusCode> {
    cancel_anywhere(&shared, &id).await?;
    shared.runs.remove(&id);
    let s = shared.clone();
    blocking(move || s.records().map(|store| runlog::delete(store, &id)).transpose().map(drop)).await?;
    Ok(StatusCode::NO_CONTENT)
}
