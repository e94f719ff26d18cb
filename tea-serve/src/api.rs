//! The Agent Protocol's routes: agents, threads and runs, over the served agents (and the
//! store's, whose handlers are in `store.rs`).

use crate::error::ApiError;
use crate::records::{self, Entry, ThreadRecord};
use crate::runlog::{self, RunRecord};
use crate::runs::{self, interrupt_json_plain, CancelOnDrop, End, Plan, RunEntry};
use crate::served::{Answer, JsonSnapshot, Served};
use crate::time::rfc3339;
use crate::{store, Shared};
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::Stream;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tea_runtime::{Interrupt, ThreadId};

type Shd = State<Arc<Shared>>;
type ApiResult<T> = Result<T, ApiError>;

pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/agents/search", post(search_agents))
        .route("/agents/{agent_id}", get(get_agent))
        .route("/agents/{agent_id}/schemas", get(agent_schemas))
        .route("/threads", post(create_thread))
        .route("/threads/search", post(search_threads))
        .route("/threads/{thread_id}", get(get_thread).patch(patch_thread).delete(delete_thread))
        .route("/threads/{thread_id}/history", get(thread_history))
        .route("/threads/{thread_id}/copy", post(copy_thread))
        .route("/threads/{thread_id}/runs", post(thread_run_background))
        .route("/threads/{thread_id}/runs/wait", post(thread_run_wait))
        .route("/threads/{thread_id}/runs/stream", post(thread_run_stream))
        .route("/runs", post(run_background))
        .route("/runs/wait", post(run_wait))
        .route("/runs/stream", post(run_stream))
        .route("/runs/search", post(search_runs))
        .route("/runs/{run_id}", get(get_run).delete(delete_run))
        .route("/runs/{run_id}/wait", get(wait_run))
        .route("/runs/{run_id}/stream", get(stream_run))
        .route("/runs/{run_id}/cancel", post(cancel_run))
        .route("/store/items", get(store::get_item).put(store::put_item).delete(store::delete_item))
        .route("/store/items/search", post(store::search_items))
        .route("/store/namespaces", post(store::list_namespaces))
        .fallback(|| async { ApiError::not_found("no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", "this route does not take that method")
        })
}

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

/// A thread as the served agents and the records know it.
pub(crate) struct Located {
    pub(crate) thread: ThreadId,
    pub(crate) agent: Option<Arc<dyn Served>>,
    pub(crate) record: Option<ThreadRecord>,
    pub(crate) snapshot: Option<JsonSnapshot>,
}

fn locate_now(shared: &Shared, thread: &ThreadId) -> ApiResult<Option<Located>> {
    let Some(store) = shared.records() else { return Ok(None) };
    let record = records::read(store, thread)?;
    let named = record.as_ref().and_then(|r| r.agent.as_deref()).and_then(|n| shared.agent(n));
    if let Some(agent) = named {
        let snapshot = agent.state(thread)?;
        return Ok(Some(Located { thread: thread.clone(), agent: Some(agent), record, snapshot }));
    }
    for agent in &shared.agents {
        if let Some(snapshot) = agent.state(thread)? {
            return Ok(Some(Located {
                thread: thread.clone(),
                agent: Some(agent.clone()),
                record,
                snapshot: Some(snapshot),
            }));
        }
    }
    Ok(record.map(|record| Located { thread: thread.clone(), agent: None, record: Some(record), snapshot: None }))
}

/// The thread `id`, or `404`.
pub(crate) async fn locate(shared: &Arc<Shared>, id: &str) -> ApiResult<Located> {
    let thread = ThreadId::from(id);
    let shared2 = shared.clone();
    let t = thread.clone();
    blocking(move || locate_now(&shared2, &t))
        .await?
        .ok_or_else(|| ApiError::not_found(format!("thread `{thread}` not found")))
}

/// A thread's status: `busy` while a run holds it, `interrupted` when it waits on a pause,
/// `idle` when it has not started or has finished, `error` when its last run failed.
pub(crate) fn status(shared: &Shared, located: &Located) -> &'static str {
    if shared.runs.running(&located.thread) {
        return "busy";
    }
    let failed = located.record.as_ref().is_some_and(|r| r.error.is_some());
    match &located.snapshot {
        None if failed => "error",
        None => "idle",
        Some(s) if s.paused() => "interrupted",
        Some(s) if s.finished() => "idle",
        Some(_) if failed => "error",
        Some(_) => "busy",
    }
}

fn interrupt_json(agent: &dyn Served, interrupt: &Interrupt) -> Value {
    let mut out = interrupt_json_plain(interrupt);
    out["answer_kind"] = json!(agent.answer_kind(interrupt).as_str());
    out
}

/// A checkpoint number as the protocol's `checkpoint_id` (a UUID): the number in its last
/// 16 hex digits.
pub(crate) fn checkpoint_uuid(n: u64) -> String {
    format!("00000000-0000-0000-{:04x}-{:012x}", n >> 48, n & 0xffff_ffff_ffff)
}

/// A `checkpoint_id` back to its number (also accepts the bare number).
fn checkpoint_number(id: &str) -> Option<u64> {
    if let Ok(n) = id.parse() {
        return Some(n);
    }
    let rest = id.strip_prefix("00000000-0000-0000-")?;
    let (hi, lo) = rest.split_once('-')?;
    Some(u64::from_str_radix(hi, 16).ok()? << 48 | u64::from_str_radix(lo, 16).ok()?)
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

fn agent_named(shared: &Shared, id: &str) -> ApiResult<Arc<dyn Served>> {
    shared.agent(id).ok_or_else(|| ApiError::not_found(format!("agent `{id}` not found")))
}

#[derive(Deserialize)]
struct AgentSearch {
    name: Option<String>,
    metadata: Option<Map<String, Value>>,
    limit: Option<i64>,
    offset: Option<i64>,
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

async fn search_agents(State(shared): Shd, Body(search): Body<AgentSearch>) -> ApiResult<Json<Value>> {
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

async fn get_agent(State(shared): Shd, Id(id): Id) -> ApiResult<Json<Value>> {
    Ok(Json(agent_json(&*agent_named(&shared, &id)?)))
}

async fn agent_schemas(State(shared): Shd, Id(id): Id) -> ApiResult<Json<Value>> {
    let agent = agent_named(&shared, &id)?;
    let properties: Map<String, Value> =
        agent.fields().into_iter().map(|(name, ty)| (name, json!({ "description": ty }))).collect();
    let state = json!({ "type": "object", "properties": properties });
    Ok(Json(json!({
        "agent_id": agent.name(),
        "input_schema": state,
        "output_schema": state,
        "state_schema": state,
    })))
}

// ---- threads ----

#[derive(Deserialize)]
struct ThreadCreate {
    thread_id: Option<String>,
    #[serde(default)]
    metadata: Map<String, Value>,
    if_exists: Option<String>,
}

fn valid_thread_id(id: &str) -> ApiResult<ThreadId> {
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

async fn create_thread(State(shared): Shd, Body(create): Body<ThreadCreate>) -> ApiResult<Json<Value>> {
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
struct ThreadSearch {
    metadata: Option<Map<String, Value>>,
    values: Option<Map<String, Value>>,
    status: Option<String>,
    limit: Option<i64>,
    offset: Option<i64>,
}

/// Whether `value` holds every key of `filter` with an equal value.
pub(crate) fn matches(filter: &Map<String, Value>, value: &Value) -> bool {
    filter.iter().all(|(k, v)| value.get(k) == Some(v))
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

async fn search_threads(State(shared): Shd, Body(search): Body<ThreadSearch>) -> ApiResult<Json<Value>> {
    let (limit, offset) = page(search.limit, search.offset)?;
    if let Some(status) = &search.status {
        if !["idle", "busy", "interrupted", "error"].contains(&status.as_str()) {
            return Err(ApiError::unprocessable(
                "bad_request",
                format!("`status` must be idle, busy, interrupted or error, not `{status}`"),
            ));
        }
    }
    let mut threads: Vec<Value> = all_threads(&shared)
        .await?
        .iter()
        .map(|l| thread_json(&shared, l))
        .filter(|t| search.status.as_ref().is_none_or(|s| t["status"] == **s))
        .filter(|t| search.metadata.as_ref().is_none_or(|m| matches(m, &t["metadata"])))
        .filter(|t| search.values.as_ref().is_none_or(|v| matches(v, &t["values"])))
        .collect();
    threads.sort_by(|a, b| {
        b["updated_at"]
            .as_str()
            .cmp(&a["updated_at"].as_str())
            .then_with(|| a["thread_id"].as_str().cmp(&b["thread_id"].as_str()))
    });
    Ok(Json(threads.into_iter().skip(offset).take(limit).collect()))
}

async fn get_thread(State(shared): Shd, Id(id): Id) -> ApiResult<Json<Value>> {
    let located = locate(&shared, &id).await?;
    Ok(Json(thread_json(&shared, &located)))
}

#[derive(Deserialize)]
struct ThreadPatch {
    metadata: Option<Map<String, Value>>,
    values: Option<Value>,
    messages: Option<Value>,
}

async fn patch_thread(State(shared): Shd, Id(id): Id, Body(patch): Body<ThreadPatch>) -> ApiResult<Json<Value>> {
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

async fn delete_thread(State(shared): Shd, Id(id): Id) -> ApiResult<StatusCode> {
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
struct HistoryQuery {
    limit: Option<i64>,
    before: Option<String>,
}

async fn thread_history(
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

async fn copy_thread(State(shared): Shd, Id(id): Id) -> ApiResult<Json<Value>> {
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

#[derive(Deserialize, Default, Clone)]
pub(crate) struct RunCommand {
    #[serde(default)]
    pub(crate) resume: Option<Value>,
    #[serde(default)]
    pub(crate) update: Option<Value>,
    #[serde(default)]
    pub(crate) goto: Option<Value>,
}

/// The body of a run request: the protocol's `RunCreate` / `RunStream`, with LangGraph
/// Server's `command` (answers to pauses) and `checkpoint_id` (the pause being answered).
#[derive(Deserialize, Default, Clone)]
pub(crate) struct RunRequest {
    pub(crate) thread_id: Option<String>,
    pub(crate) agent_id: Option<String>,
    pub(crate) input: Option<Value>,
    pub(crate) metadata: Option<Map<String, Value>>,
    pub(crate) config: Option<Value>,
    pub(crate) on_completion: Option<String>,
    pub(crate) on_disconnect: Option<String>,
    pub(crate) if_not_exists: Option<String>,
    pub(crate) stream_mode: Option<Value>,
    pub(crate) webhook: Option<String>,
    pub(crate) multitask_strategy: Option<String>,
    pub(crate) command: Option<RunCommand>,
    pub(crate) checkpoint_id: Option<String>,
    pub(crate) checkpoint: Option<Value>,
}

fn one_of(field: &str, value: &Option<String>, allowed: &[&str]) -> ApiResult<()> {
    match value {
        Some(v) if !allowed.contains(&v.as_str()) => Err(ApiError::unprocessable(
            "bad_request",
            format!("`{field}` must be one of {}, not `{v}`", allowed.join(", ")),
        )),
        _ => Ok(()),
    }
}

/// The answers of `resume` for the pending `interrupts`.
fn answers(thread: &ThreadId, resume: Option<Value>, interrupts: &[Interrupt]) -> ApiResult<Answer> {
    let asks: Vec<&Interrupt> = interrupts.iter().filter(|i| i.needs_answer()).collect();
    let Some(resume) = resume.filter(|v| !v.is_null()) else {
        if asks.is_empty() {
            return Ok(Answer::None);
        }
        let ids: Vec<&str> = asks.iter().map(|i| i.id()).collect();
        return Err(ApiError::unprocessable(
            "answer_missing",
            format!("thread `{thread}` waits on an answer to {}: send it as `command.resume`", ids.join(", ")),
        ));
    };
    if let Value::Object(map) = &resume {
        if !map.is_empty() && map.keys().all(|k| interrupts.iter().any(|i| i.id() == k)) {
            return Ok(Answer::Keyed(map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()));
        }
    }
    match asks.len() {
        0 => Ok(Answer::None),
        1 => Ok(Answer::One(resume)),
        _ => {
            let ids: Vec<&str> = asks.iter().map(|i| i.id()).collect();
            Err(ApiError::unprocessable(
                "answer_ambiguous",
                format!(
                    "thread `{thread}` waits on {} pauses ({}): key the answers by interrupt id in `command.resume`",
                    ids.len(),
                    ids.join(", ")
                ),
            ))
        }
    }
}

/// A run ready to launch.
pub(crate) struct Prepared {
    agent: Arc<dyn Served>,
    thread: ThreadId,
    plan: Plan,
    delete_after: bool,
    echo: Map<String, Value>,
    pub(crate) cancel_on_disconnect: bool,
    /// Whether the run's record is written when it starts (not only when it ends).
    announce: bool,
}

impl Prepared {
    /// Keeps the thread when the run finishes, even for a run that named no thread.
    pub(crate) fn keep(&mut self) {
        self.delete_after = false;
    }

    /// Writes the run's record only when it ends, for a run whose id nobody learns before
    /// (one waited for): a store write less per run.
    pub(crate) fn unannounced(&mut self) {
        self.announce = false;
    }

    /// The agent, the plan and whether the thread goes when the run ends.
    pub(crate) fn parts(self) -> (Arc<dyn Served>, Plan, bool) {
        (self.agent, self.plan, self.delete_after)
    }
}

/// Checks a run request against the thread it names and decides what the run does.
pub(crate) async fn prepare(
    shared: &Arc<Shared>,
    path_thread: Option<String>,
    request: RunRequest,
) -> ApiResult<Prepared> {
    prepare_run(shared, path_thread, request, false).await
}

/// [`prepare`] for a queued run whose turn has come: it holds `thread` already.
pub(crate) async fn prepare_held(shared: &Arc<Shared>, thread: String, request: RunRequest) -> ApiResult<Prepared> {
    prepare_run(shared, Some(thread), request, true).await
}

async fn prepare_run(
    shared: &Arc<Shared>,
    path_thread: Option<String>,
    request: RunRequest,
    holding: bool,
) -> ApiResult<Prepared> {
    one_of("on_completion", &request.on_completion, &["delete", "keep"])?;
    one_of("on_disconnect", &request.on_disconnect, &["cancel", "continue"])?;
    one_of("if_not_exists", &request.if_not_exists, &["create", "reject"])?;
    one_of("multitask_strategy", &request.multitask_strategy, &["reject", "enqueue"])?;
    // Kept whole for a run that may wait its turn: it is planned again when the turn comes.
    let queueable = (request.multitask_strategy.as_deref() == Some("enqueue")).then(|| request.clone());
    if request.webhook.is_some() {
        return Err(ApiError::unprocessable("unsupported", "webhooks are not supported by this server"));
    }
    if request.command.as_ref().is_some_and(|c| c.goto.is_some()) {
        return Err(ApiError::unprocessable(
            "unsupported",
            "`command.goto` is not supported: a node routes with its graph's edges",
        ));
    }
    let mut echo = Map::new();
    for (key, value) in [
        ("input", request.input.clone()),
        ("metadata", request.metadata.clone().map(Value::Object)),
        ("config", request.config.clone()),
        ("on_completion", request.on_completion.clone().map(Value::String)),
        ("on_disconnect", request.on_disconnect.clone().map(Value::String)),
        ("if_not_exists", request.if_not_exists.clone().map(Value::String)),
        ("stream_mode", request.stream_mode.clone()),
    ] {
        if let Some(value) = value {
            echo.insert(key.into(), value);
        }
    }
    let named = path_thread.or(request.thread_id.clone());
    let stateless = named.is_none();
    let thread = match &named {
        Some(id) => valid_thread_id(id)?,
        None => ThreadId::random(),
    };
    let wanted = request.agent_id.as_deref().map(|id| agent_named(shared, id)).transpose()?;
    let located = if stateless {
        None
    } else {
        let s = shared.clone();
        let t = thread.clone();
        blocking(move || locate_now(&s, &t)).await?
    };
    if located.is_none() && !stateless && request.if_not_exists.as_deref() != Some("create") {
        return Err(ApiError::not_found(format!(
            "thread `{thread}` not found (create it, or send `if_not_exists: create`)"
        )));
    }
    let owner = located.as_ref().and_then(|l| l.agent.clone());
    let agent = match (owner, wanted) {
        (Some(owner), Some(wanted)) if owner.name() != wanted.name() => {
            return Err(ApiError::conflict(
                "agent_mismatch",
                format!("thread `{thread}` runs agent `{}`, not `{}`", owner.name(), wanted.name()),
            ))
        }
        (Some(agent), _) | (None, Some(agent)) => agent,
        (None, None) if shared.agents.len() == 1 => shared.agents[0].clone(),
        (None, None) if shared.agents.is_empty() => return Err(ApiError::not_found("this server serves no agent")),
        (None, None) => {
            return Err(ApiError::unprocessable(
                "agent_missing",
                "this server serves several agents: name one with `agent_id`",
            ))
        }
    };
    let cancel_on_disconnect = request.on_disconnect.as_deref() != Some("continue");
    let delete_after = match request.on_completion.as_deref() {
        Some("delete") => true,
        Some(_) => false,
        None => stateless,
    };
    if !holding && shared.runs.running(&thread) {
        if let Some(request) = queueable {
            let plan = Plan::Queued(Box::new(request));
            return Ok(Prepared { agent, thread, plan, delete_after, echo, cancel_on_disconnect, announce: true });
        }
        return Err(ApiError::conflict(
            "thread_busy",
            format!(
                "thread `{thread}` is running; a thread takes one run at a time (send `multitask_strategy: enqueue` to wait)"
            ),
        ));
    }
    let snapshot = located.as_ref().and_then(|l| l.snapshot.clone());
    let status = located.as_ref().map_or("idle", |l| status(shared, l));
    let plan = if let Some(command) = request.command {
        let Some(snapshot) = snapshot.filter(JsonSnapshot::paused) else {
            return Err(ApiError::conflict(
                "not_paused",
                format!("thread `{thread}` is not paused (it is {status}): there is nothing to answer"),
            ));
        };
        let pinned = request.checkpoint_id.clone().or_else(|| {
            request.checkpoint.as_ref().and_then(|c| c.get("checkpoint_id")).and_then(Value::as_str).map(str::to_owned)
        });
        if let Some(pinned) = pinned {
            let number = checkpoint_number(&pinned).ok_or_else(|| {
                ApiError::unprocessable("bad_request", format!("`checkpoint_id` is not a checkpoint id: {pinned}"))
            })?;
            if number != snapshot.checkpoint {
                return Err(ApiError::conflict(
                    "stale_resume",
                    format!(
                        "thread `{thread}` has moved on since checkpoint {number} (it is at checkpoint {}): that pause was answered already",
                        snapshot.checkpoint
                    ),
                ));
            }
        }
        let answer = answers(&thread, command.resume.clone(), &snapshot.interrupts)?;
        let recorded = located.as_ref().and_then(|l| l.record.as_ref()).and_then(|r| r.pause.clone());
        let token = match recorded.filter(|p| p.checkpoint == snapshot.checkpoint) {
            Some(pause) => pause.token,
            None => agent.clone().token(thread.clone()).await?.ok_or_else(|| {
                ApiError::conflict("not_paused", format!("thread `{thread}` has finished: there is nothing to answer"))
            })?,
        };
        let node = snapshot.interrupts.first().map(|i| i.node().as_str().to_owned());
        let entry = Entry::new("answer", node, json!({ "resume": command.resume, "update": command.update }));
        Plan::Resume { token, answer, update: command.update, entry }
    } else {
        match &snapshot {
            None => {}
            Some(s) if s.paused() => {
                let ids: Vec<&str> = s.interrupts.iter().map(|i| i.id()).collect();
                return Err(ApiError::conflict(
                    "thread_paused",
                    format!("thread `{thread}` waits on {}: answer it with `command.resume`", ids.join(", ")),
                ));
            }
            Some(s) if s.finished() => {
                return Err(ApiError::conflict(
                    "thread_finished",
                    format!("thread `{thread}` has finished; a thread runs its graph once: start a new thread"),
                ))
            }
            Some(_) => {
                return Err(ApiError::conflict(
                    "thread_busy",
                    format!("thread `{thread}` is {status}: a thread takes one run at a time"),
                ))
            }
        }
        let input = request.input.clone().unwrap_or_else(|| json!({}));
        if !input.is_object() {
            return Err(ApiError::unprocessable(
                "bad_input",
                format!("the input of agent `{}` must be a JSON object of state keys, not {input}", agent.name()),
            ));
        }
        Plan::Start { input }
    };
    Ok(Prepared { agent, thread, plan, delete_after, echo, cancel_on_disconnect, announce: true })
}

/// Launches a prepared run.
pub(crate) fn start(shared: &Arc<Shared>, prepared: Prepared) -> ApiResult<Arc<RunEntry>> {
    let p = prepared;
    runs::launch(shared, p.agent, p.thread, p.plan, p.echo, p.delete_after, p.announce)
}

async fn wait_for(shared: Arc<Shared>, thread: Option<String>, request: RunRequest) -> ApiResult<Json<Value>> {
    let mut prepared = prepare(&shared, thread, request).await?;
    prepared.unannounced();
    let cancel = prepared.cancel_on_disconnect;
    let run = start(&shared, prepared)?;
    let guard = CancelOnDrop(cancel.then(|| run.clone()));
    run.finished().await;
    drop(guard);
    if let End::Refused(error) = &run.progress().end {
        return Err(error.clone());
    }
    Ok(Json(run.wait_json()))
}

async fn stream_for(shared: Arc<Shared>, thread: Option<String>, request: RunRequest) -> ApiResult<Response> {
    let prepared = prepare(&shared, thread, request).await?;
    let cancel = prepared.cancel_on_disconnect;
    let run = start(&shared, prepared)?;
    let guard = CancelOnDrop(cancel.then(|| run.clone()));
    // A run refused at once (a stale answer, a busy thread) is the request's error, not a stream.
    let _ = tokio::time::timeout(Duration::from_secs(1), run.finished()).await;
    if let End::Refused(error) = &run.progress().end {
        return Err(error.clone());
    }
    Ok(sse(run, guard).into_response())
}

async fn background(shared: Arc<Shared>, thread: Option<String>, request: RunRequest) -> ApiResult<Json<Value>> {
    let prepared = prepare(&shared, thread, request).await?;
    let run = start(&shared, prepared)?;
    // Answered once the run is in the store, so any replica can be asked about it next.
    run.recorded().await;
    Ok(Json(run.json()))
}

async fn run_wait(State(shared): Shd, Body(request): Body<RunRequest>) -> ApiResult<Json<Value>> {
    wait_for(shared, None, request).await
}

async fn thread_run_wait(State(shared): Shd, Id(id): Id, Body(request): Body<RunRequest>) -> ApiResult<Json<Value>> {
    wait_for(shared, Some(id), request).await
}

async fn run_stream(State(shared): Shd, Body(request): Body<RunRequest>) -> ApiResult<Response> {
    stream_for(shared, None, request).await
}

async fn thread_run_stream(State(shared): Shd, Id(id): Id, Body(request): Body<RunRequest>) -> ApiResult<Response> {
    stream_for(shared, Some(id), request).await
}

async fn run_background(State(shared): Shd, Body(request): Body<RunRequest>) -> ApiResult<Json<Value>> {
    background(shared, None, request).await
}

async fn thread_run_background(
    State(shared): Shd,
    Id(id): Id,
    Body(request): Body<RunRequest>,
) -> ApiResult<Json<Value>> {
    background(shared, Some(id), request).await
}

/// A run's events as server-sent events: `metadata`, then `updates` and `values` after each
/// step (`values` with `__interrupt__` at a pause), `error` if it fails, and `end`.
fn sse(run: Arc<RunEntry>, guard: CancelOnDrop) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let (log, rx) = run.subscribe();
    let ended = log.iter().any(|i| i.event == "end");
    let head = futures_util::stream::iter(log);
    let tail = futures_util::stream::unfold((rx, ended, guard), |(mut rx, ended, guard)| async move {
        if ended {
            return None;
        }
        loop {
            match rx.recv().await {
                Ok(item) => {
                    let ended = item.event == "end";
                    return Some((item, (rx, ended, guard)));
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    use futures_util::StreamExt;
    let events = head.chain(tail).map(|item| Ok(SseEvent::default().event(item.event).data(item.data.to_string())));
    Sse::new(events).keep_alive(KeepAlive::default())
}

/// A run as this server knows it: its own (with its events), or another replica's (or an
/// earlier process's) through the run's record in the store.
enum Found {
    Here(Arc<RunEntry>),
    Stored(RunRecord),
}

/// The run `id`, or `404`.
async fn find_run(shared: &Arc<Shared>, id: &str) -> ApiResult<Found> {
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
const STORED_WAIT: Duration = Duration::from_secs(300);

/// The record of run `id` once it is no longer pending (polled), or as it stands after `limit`.
async fn stored_end(shared: &Arc<Shared>, id: &str, mut record: RunRecord, limit: Duration) -> ApiResult<RunRecord> {
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

#[derive(Deserialize)]
struct RunSearch {
    metadata: Option<Map<String, Value>>,
    status: Option<String>,
    thread_id: Option<String>,
    agent_id: Option<String>,
    limit: Option<i64>,
    offset: Option<i64>,
}

/// `POST /runs/search`: this server's runs and the records of the others' (read through).
async fn search_runs(State(shared): Shd, Body(search): Body<RunSearch>) -> ApiResult<Json<Value>> {
    let (limit, offset) = page(search.limit, search.offset)?;
    one_of("status", &search.status, &["pending", "error", "success", "timeout", "interrupted"])?;
    let mut runs: Vec<Value> = shared.runs.all().iter().map(|r| r.json()).collect();
    let here: std::collections::HashSet<String> =
        runs.iter().filter_map(|r| r["run_id"].as_str().map(str::to_owned)).collect();
    let s = shared.clone();
    let stored = blocking(move || s.records().map(runlog::all).transpose().map(Option::unwrap_or_default)).await?;
    runs.extend(stored.into_iter().filter(|(id, _)| !here.contains(id)).map(|(_, record)| record.run().clone()));
    let wanted = |field: &str, want: &Option<String>, run: &Value| want.as_ref().is_none_or(|w| run[field] == **w);
    let mut found: Vec<Value> = runs
        .into_iter()
        .filter(|r| wanted("thread_id", &search.thread_id, r))
        .filter(|r| wanted("agent_id", &search.agent_id, r))
        .filter(|r| wanted("status", &search.status, r))
        .filter(|r| search.metadata.as_ref().is_none_or(|m| matches(m, &r["metadata"])))
        .collect();
    found.sort_by(|a, b| {
        b["created_at"]
            .as_str()
            .cmp(&a["created_at"].as_str())
            .then_with(|| a["run_id"].as_str().cmp(&b["run_id"].as_str()))
    });
    Ok(Json(found.into_iter().skip(offset).take(limit).collect()))
}

async fn get_run(State(shared): Shd, Id(id): Id) -> ApiResult<Json<Value>> {
    match find_run(&shared, &id).await? {
        Found::Here(run) => Ok(Json(run.json())),
        Found::Stored(record) => Ok(Json(record.run().clone())),
    }
}

async fn wait_run(State(shared): Shd, Id(id): Id) -> ApiResult<Json<Value>> {
    match find_run(&shared, &id).await? {
        Found::Here(run) => {
            run.finished().await;
            Ok(Json(run.wait_json()))
        }
        Found::Stored(record) => Ok(Json(stored_end(&shared, &id, record, STORED_WAIT).await?.wait)),
    }
}

/// `GET /runs/{id}/stream`: this server's run as it goes; another's once it has ended, as
/// its record tells it (`metadata`, the last `values`, `error`, `end`).
async fn stream_run(State(shared): Shd, Id(id): Id) -> ApiResult<Response> {
    let record = match find_run(&shared, &id).await? {
        Found::Here(run) => return Ok(sse(run, CancelOnDrop(None)).into_response()),
        Found::Stored(record) => stored_end(&shared, &id, record, STORED_WAIT).await?,
    };
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
    Ok(Sse::new(events).into_response())
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
async fn cancel_anywhere(shared: &Arc<Shared>, id: &str) -> ApiResult<()> {
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

async fn cancel_run(State(shared): Shd, Id(id): Id) -> ApiResult<StatusCode> {
    cancel_anywhere(&shared, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn delete_run(State(shared): Shd, Id(id): Id) -> ApiResult<StatusCode> {
    cancel_anywhere(&shared, &id).await?;
    shared.runs.remove(&id);
    let s = shared.clone();
    blocking(move || s.records().map(|store| runlog::delete(store, &id)).transpose().map(drop)).await?;
    Ok(StatusCode::NO_CONTENT)
}
