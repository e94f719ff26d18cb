//! LangGraph Platform's routes where the Agent Protocol is silent or says it otherwise, so that
//! LangGraph's SDKs work unchanged: assistants (the served graphs, by their name), a thread's
//! state (read, updated as a node, its history by `POST`), and the runs of a thread (list, get,
//! join, join a stream, cancel). Each stands on the protocol's handlers and the engine's calls:
//! one implementation under both.
//!
//! An assistant's id is its graph's name (LangGraph's `graph_id`, which its SDKs also accept
//! as an assistant id). Checkpoint ids are the protocol's (`plan::checkpoint_uuid`); a
//! thread's checkpoints have no namespace (`checkpoint_ns: ""`).

use crate::api::{self, locate, Located};
use crate::error::ApiError;
use crate::modes::Modes;
use crate::plan::{checkpoint_number, checkpoint_uuid};
use crate::records::{self, Entry, ThreadRecord};
use crate::request::{blocking, matches, page, Body, Id};
use crate::runs::{interrupt_json_plain, state_json};
use crate::served::{JsonSnapshot, Served};
use crate::time::rfc3339;
use crate::{draw, Shared};
use axum::extract::{FromRequestParts, Path, RawQuery, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use tea_runtime::ThreadId;

type Shd = State<Arc<Shared>>;
type ApiResult<T> = Result<T, ApiError>;

/// A route's two path parameters: a thread's id and a run's.
pub(crate) struct ThreadRun(String, String);

impl<S: Send + Sync> FromRequestParts<S> for ThreadRun {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Path::<(String, String)>::from_request_parts(parts, state)
            .await
            .map(|Path((thread, run))| ThreadRun(thread, run))
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_path", e.body_text()))
    }
}

/// A query's parameters as pairs (a name may repeat: `stream_mode=values&stream_mode=updates`),
/// each checked against `known` (a parameter of another name is `422`).
fn query_pairs(query: Option<String>, known: &[&str]) -> ApiResult<Vec<(String, String)>> {
    let mut pairs = Vec::new();
    for (name, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        if !known.contains(&&*name) {
            return Err(ApiError::unprocessable(
                "bad_request",
                format!("unknown query parameter `{name}` ({})", known.join(", ")),
            ));
        }
        pairs.push((name.into_owned(), value.into_owned()));
    }
    Ok(pairs)
}

/// A query's whole number `name`, if given.
fn query_number(pairs: &[(String, String)], name: &str) -> ApiResult<Option<i64>> {
    match pairs.iter().find(|(n, _)| n == name) {
        None => Ok(None),
        Some((_, v)) => v
            .parse()
            .map(Some)
            .map_err(|_| ApiError::unprocessable("bad_request", format!("`{name}` must be a whole number, not `{v}`"))),
    }
}

/// A query's flag `name` (`true`/`false`, `1`/`0`), if given.
fn query_flag(pairs: &[(String, String)], name: &str) -> ApiResult<Option<bool>> {
    match pairs.iter().find(|(n, _)| n == name).map(|(_, v)| v.to_ascii_lowercase()) {
        None => Ok(None),
        Some(v) if v == "true" || v == "1" => Ok(Some(true)),
        Some(v) if v == "false" || v == "0" => Ok(Some(false)),
        Some(v) => Err(ApiError::unprocessable("bad_request", format!("`{name}` must be true or false, not `{v}`"))),
    }
}

// ---- assistants ----

/// LangGraph's `Assistant`: one per served graph, its id the graph's name.
fn assistant_json(shared: &Shared, agent: &dyn Served) -> Value {
    let since = rfc3339(shared.started_at);
    json!({
        "assistant_id": agent.name(),
        "graph_id": agent.name(),
        "name": agent.name(),
        "description": null,
        "config": {},
        "context": {},
        "metadata": {},
        "version": 1,
        "created_at": since,
        "updated_at": since,
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AssistantSearch {
    metadata: Option<Map<String, Value>>,
    graph_id: Option<String>,
    name: Option<String>,
    limit: Option<i64>,
    offset: Option<i64>,
    sort_by: Option<String>,
    sort_order: Option<String>,
    select: Option<Vec<String>>,
}

impl AssistantSearch {
    /// The served agents this search finds: `graph_id` exactly, `name` as a part of the name in
    /// any case (LangGraph's), `metadata` exactly (assistants here have none).
    fn found(&self, shared: &Shared) -> Vec<Value> {
        shared
            .agents
            .iter()
            .filter(|a| self.graph_id.as_ref().is_none_or(|g| a.name() == g))
            .filter(|a| self.name.as_ref().is_none_or(|n| a.name().to_lowercase().contains(&n.to_lowercase())))
            .map(|a| assistant_json(shared, &**a))
            .filter(|a| self.metadata.as_ref().is_none_or(|m| matches(m, &a["metadata"])))
            .collect()
    }
}

/// `POST /assistants/search`: the served graphs as assistants, sorted by name (`sort_by` one of
/// `assistant_id`, `graph_id`, `name`, `created_at`, `updated_at`; `sort_order` `asc` or `desc`).
pub(crate) async fn search_assistants(State(shared): Shd, Body(search): Body<AssistantSearch>) -> ApiResult<Response> {
    let (limit, offset) = page(search.limit, search.offset)?;
    let sort_by = search.sort_by.as_deref().unwrap_or("name");
    if !["assistant_id", "graph_id", "name", "created_at", "updated_at"].contains(&sort_by) {
        return Err(ApiError::unprocessable("bad_request", format!("`sort_by` cannot be `{sort_by}`")));
    }
    let descending = match search.sort_order.as_deref() {
        None | Some("asc") => false,
        Some("desc") => true,
        Some(other) => {
            return Err(ApiError::unprocessable("bad_request", format!("`sort_order` is asc or desc, not `{other}`")))
        }
    };
    let mut found = search.found(&shared);
    found.sort_by(|a, b| {
        a[sort_by].as_str().cmp(&b[sort_by].as_str()).then(a["name"].as_str().cmp(&b["name"].as_str()))
    });
    if descending {
        found.reverse();
    }
    let page: Vec<Value> = found
        .into_iter()
        .skip(offset)
        .take(limit)
        .map(|a| match &search.select {
            Some(fields) => Value::Object(
                fields.iter().filter_map(|f| a.get(f).map(|v| (f.clone(), v.clone()))).collect::<Map<_, _>>(),
            ),
            None => a,
        })
        .collect();
    Ok(Json(Value::Array(page)).into_response())
}

/// `POST /assistants/count`: how many assistants a search finds.
pub(crate) async fn count_assistants(
    State(shared): Shd,
    Body(search): Body<AssistantSearch>,
) -> ApiResult<Json<Value>> {
    Ok(Json(json!(search.found(&shared).len())))
}

fn assistant_named(shared: &Shared, id: &str) -> ApiResult<Arc<dyn Served>> {
    shared.agent(id).ok_or_else(|| ApiError::not_found(format!("assistant `{id}` not found")))
}

/// `GET /assistants/{id}`.
pub(crate) async fn get_assistant(State(shared): Shd, Id(id): Id) -> ApiResult<Json<Value>> {
    Ok(Json(assistant_json(&shared, &*assistant_named(&shared, &id)?)))
}

/// `GET /assistants/{id}/graph`: the graph's nodes and edges, as LangGraph draws them
/// (`__start__` and `__end__` included), read from its drawing.
pub(crate) async fn assistant_graph(
    State(shared): Shd,
    Id(id): Id,
    RawQuery(query): RawQuery,
) -> ApiResult<Json<Value>> {
    query_pairs(query, &["xray"])?;
    let agent = assistant_named(&shared, &id)?;
    let drawing = agent.drawing().ok_or_else(|| {
        ApiError::not_found(format!(
            "the graph of assistant `{id}` is not known to this server: serve it with its drawing (`Serve::app_drawn`)"
        ))
    })?;
    Ok(Json(draw::json(drawing)))
}

/// `GET /assistants/{id}/schemas`.
pub(crate) async fn assistant_schemas(State(shared): Shd, Id(id): Id) -> ApiResult<Json<Value>> {
    Ok(Json(api::schemas_json(&*assistant_named(&shared, &id)?)))
}

/// `GET /assistants/{id}/subgraphs`: the subgraphs' schemas, none known here.
pub(crate) async fn assistant_subgraphs(
    State(shared): Shd,
    Id(id): Id,
    RawQuery(query): RawQuery,
) -> ApiResult<Json<Value>> {
    query_pairs(query, &["recurse"])?;
    assistant_named(&shared, &id)?;
    Ok(Json(json!({})))
}

// ---- thread state ----

fn checkpoint_json(thread: &ThreadId, checkpoint: Option<u64>) -> Value {
    json!({
        "thread_id": thread.as_str(),
        "checkpoint_ns": "",
        "checkpoint_id": checkpoint.map(checkpoint_uuid),
        "checkpoint_map": {},
    })
}

/// LangGraph's `ThreadState` of checkpoint `s` of `thread` (`parent`: the checkpoint before it):
/// the values, the next nodes as tasks with their pauses, the checkpoint and its step.
fn thread_state_json(thread: &ThreadId, s: Option<&JsonSnapshot>, parent: Option<u64>) -> Value {
    let Some(s) = s else {
        return json!({
            "values": {}, "next": [], "tasks": [], "interrupts": [], "metadata": {},
            "checkpoint": checkpoint_json(thread, None), "parent_checkpoint": null, "created_at": null,
        });
    };
    let interrupts: Vec<Value> = s.interrupts.iter().map(interrupt_json_plain).collect();
    let tasks: Vec<Value> = s
        .next
        .iter()
        .map(|node| {
            let pauses: Vec<Value> =
                s.interrupts.iter().filter(|i| i.node().as_str() == node).map(interrupt_json_plain).collect();
            json!({
                "id": format!("{}:{node}", s.step + 1),
                "name": node,
                "path": [],
                "error": null,
                "interrupts": pauses,
                "checkpoint": null,
                "state": null,
                "result": null,
            })
        })
        .collect();
    let created_at = s.written_at.map(|t| {
        rfc3339(t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0)))
    });
    json!({
        "values": match &s.state { Value::Object(_) => s.state.clone(), other => json!({ "value": other }) },
        "next": s.next,
        "tasks": tasks,
        "interrupts": interrupts,
        "metadata": { "step": s.step, "source": "loop", "thread_id": thread.as_str() },
        "checkpoint": checkpoint_json(thread, Some(s.checkpoint)),
        "parent_checkpoint": parent.map(|p| checkpoint_json(thread, Some(p))),
        "created_at": created_at,
    })
}

/// The thread's checkpoints, newest first, each with the one before it.
async fn history_of(located: &Located) -> ApiResult<Vec<(JsonSnapshot, Option<u64>)>> {
    let Some(agent) = located.agent.clone() else { return Ok(Vec::new()) };
    let thread = located.thread.clone();
    let history = blocking(move || agent.history(&thread)).await?;
    let parents: Vec<Option<u64>> = history.iter().skip(1).map(|s| Some(s.checkpoint)).chain([None]).collect();
    Ok(history.into_iter().zip(parents).collect())
}

/// The state of thread `id` now, as `GET /threads/{id}/state` answers it.
pub(crate) async fn state_now(shared: &Arc<Shared>, id: &str) -> ApiResult<Value> {
    let located = locate(shared, id).await?;
    let history = history_of(&located).await?;
    let head = history.first();
    Ok(thread_state_json(&located.thread, head.map(|(s, _)| s), head.and_then(|(_, p)| *p)))
}

/// The last `limit` (10 by default) checkpoints of thread `id`, newest first, as states.
pub(crate) async fn checkpoints(shared: &Arc<Shared>, id: &str, limit: Option<i64>) -> ApiResult<Vec<Value>> {
    let (limit, _) = page(limit, None)?;
    let located = locate(shared, id).await?;
    let history = history_of(&located).await?;
    Ok(history.iter().take(limit).map(|(s, p)| thread_state_json(&located.thread, Some(s), *p)).collect())
}

/// `GET /threads/{id}/state`: the thread's state now.
pub(crate) async fn get_state(State(shared): Shd, Id(id): Id, RawQuery(query): RawQuery) -> ApiResult<Json<Value>> {
    let pairs = query_pairs(query, &["subgraphs", "select"])?;
    Ok(Json(select(state_now(&shared, &id).await?, selected(&pairs).as_deref())))
}

/// The state of `thread` at checkpoint `checkpoint` (a `checkpoint_id`), or `404`.
async fn state_at(shared: &Arc<Shared>, id: &str, checkpoint: &str) -> ApiResult<Json<Value>> {
    let number = checkpoint_number(checkpoint).ok_or_else(|| {
        ApiError::unprocessable("bad_request", format!("`{checkpoint}` is not a checkpoint id of this server"))
    })?;
    let located = locate(shared, id).await?;
    let history = history_of(&located).await?;
    let (s, parent) = history
        .iter()
        .find(|(s, _)| s.checkpoint == number)
        .ok_or_else(|| ApiError::not_found(format!("thread `{id}` has no checkpoint `{checkpoint}`")))?;
    Ok(Json(thread_state_json(&located.thread, Some(s), *parent)))
}

/// `GET /threads/{id}/state/{checkpoint_id}`.
pub(crate) async fn get_state_at(
    State(shared): Shd,
    ThreadRun(id, checkpoint): ThreadRun,
    RawQuery(query): RawQuery,
) -> ApiResult<Json<Value>> {
    let pairs = query_pairs(query, &["subgraphs", "select"])?;
    Ok(Json(select(state_at(&shared, &id, &checkpoint).await?.0, selected(&pairs).as_deref())))
}

/// A checkpoint named in a body: `{checkpoint_id, checkpoint_ns?, …}`; a namespace other than
/// the root's is a subgraph's, which these routes do not reach.
#[derive(Deserialize, Default)]
pub(crate) struct CheckpointRef {
    checkpoint_id: Option<String>,
    #[serde(default)]
    checkpoint_ns: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    thread_id: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    checkpoint_map: Option<Value>,
}

impl CheckpointRef {
    fn id(&self) -> ApiResult<Option<&str>> {
        if self.checkpoint_ns.as_deref().is_some_and(|ns| !ns.is_empty()) {
            return Err(ApiError::unprocessable(
                "unsupported",
                "a subgraph's checkpoints (`checkpoint_ns`) are not served: a child graph's state is its parent's node's",
            ));
        }
        Ok(self.checkpoint_id.as_deref())
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StateAt {
    checkpoint: CheckpointRef,
    select: Option<Vec<String>>,
    #[serde(default)]
    #[allow(dead_code)]
    subgraphs: Option<bool>,
}

/// `POST /threads/{id}/state/checkpoint`: the state at the body's `checkpoint`.
pub(crate) async fn post_state_at(State(shared): Shd, Id(id): Id, Body(at): Body<StateAt>) -> ApiResult<Json<Value>> {
    let state = match at.checkpoint.id()? {
        Some(checkpoint) => state_at(&shared, &id, checkpoint).await?.0,
        None => state_now(&shared, &id).await?,
    };
    Ok(Json(select(state, at.select.as_deref())))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StateUpdate {
    values: Option<Value>,
    as_node: Option<String>,
    checkpoint: Option<CheckpointRef>,
    checkpoint_id: Option<String>,
}

/// `POST /threads/{id}/state`: writes `values` at the thread's head as if node `as_node` had
/// returned them (the engine's `update_state`: through the reducers, routed by the node's
/// edges); without `as_node`, as the node that paused the thread, or else the last node that
/// ran. A run without input then goes on from there. Answers the new checkpoint.
pub(crate) async fn update_state(
    State(shared): Shd,
    Id(id): Id,
    Body(update): Body<StateUpdate>,
) -> ApiResult<Json<Value>> {
    let located = locate(&shared, &id).await?;
    let thread = located.thread.clone();
    if shared.runs.running(&thread) {
        return Err(ApiError::conflict("thread_busy", format!("thread `{id}` is running: update it once it stops")));
    }
    let agent = located.agent.clone().ok_or_else(|| {
        ApiError::conflict("thread_unstarted", format!("thread `{id}` has not run: start it with a run"))
    })?;
    let snapshot = located.snapshot.as_ref().ok_or_else(|| {
        ApiError::conflict("thread_unstarted", format!("thread `{id}` has no checkpoint yet: start it with a run"))
    })?;
    let pinned = match (&update.checkpoint, &update.checkpoint_id) {
        (Some(c), _) => c.id()?.map(str::to_owned),
        (None, id) => id.clone(),
    };
    if let Some(pinned) = pinned {
        let number = checkpoint_number(&pinned).ok_or_else(|| {
            ApiError::unprocessable("bad_request", format!("`{pinned}` is not a checkpoint id of this server"))
        })?;
        if number != snapshot.checkpoint {
            return Err(ApiError::conflict(
                "stale_checkpoint",
                format!(
                    "thread `{id}` is at checkpoint {} ({}), not {pinned}: only its head can be updated",
                    snapshot.checkpoint,
                    checkpoint_uuid(snapshot.checkpoint)
                ),
            ));
        }
    }
    let last_step =
        || located.record.as_ref()?.timeline.iter().rev().find(|e| e.kind == "step").and_then(|e| e.node.clone());
    let as_node = update
        .as_node
        .clone()
        .or_else(|| snapshot.interrupts.first().map(|i| i.node().as_str().to_owned()))
        .or_else(last_step)
        .ok_or_else(|| {
            ApiError::unprocessable(
                "bad_request",
                format!("name the node the update is from with `as_node` (thread `{id}`)"),
            )
        })?;
    let values = update.values.clone().filter(|v| !v.is_null()).unwrap_or_else(|| json!({}));
    let s = shared.clone();
    let written = blocking(move || {
        let snapshot = agent.update_state(&thread, values.clone(), &as_node)?;
        if let Some(store) = s.records() {
            records::update(store, &thread, |record| {
                let mut record = record.unwrap_or_else(|| ThreadRecord::new(None, Map::new()));
                record.agent = Some(agent.name().to_owned());
                record.pause = None;
                record.error = None;
                record.updated_to = Some(snapshot.checkpoint);
                record.record([Entry::new("update", Some(as_node.clone()), json!({ "values": values }))]);
                Ok(Some(record))
            })?;
        }
        Ok(snapshot.checkpoint)
    })
    .await?;
    Ok(Json(json!({ "checkpoint": checkpoint_json(&located.thread, Some(written)) })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HistoryRequest {
    limit: Option<i64>,
    before: Option<Value>,
    metadata: Option<Map<String, Value>>,
    checkpoint: Option<CheckpointRef>,
    select: Option<Vec<String>>,
}

/// `POST /threads/{id}/history`: the thread's states, newest first: at most `limit`, those
/// before checkpoint `before` (an id, or `{checkpoint_id}`), those whose metadata holds
/// `metadata`.
pub(crate) async fn post_history(
    State(shared): Shd,
    Id(id): Id,
    Body(request): Body<HistoryRequest>,
) -> ApiResult<Json<Value>> {
    let (limit, _) = page(request.limit, None)?;
    if let Some(checkpoint) = &request.checkpoint {
        checkpoint.id()?;
    }
    let before = match &request.before {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) => Some(id.clone()),
        Some(Value::Object(c)) => c.get("checkpoint_id").and_then(Value::as_str).map(str::to_owned),
        Some(other) => {
            return Err(ApiError::unprocessable("bad_request", format!("`before` is a checkpoint id, not {other}")))
        }
    };
    let before = before
        .map(|b| {
            checkpoint_number(&b)
                .ok_or_else(|| ApiError::unprocessable("bad_request", format!("`before` is not a checkpoint id: {b}")))
        })
        .transpose()?;
    let located = locate(&shared, &id).await?;
    let states: Vec<Value> = history_of(&located)
        .await?
        .iter()
        .filter(|(s, _)| before.is_none_or(|b| s.checkpoint < b))
        .map(|(s, parent)| thread_state_json(&located.thread, Some(s), *parent))
        .filter(|state| request.metadata.as_ref().is_none_or(|m| matches(m, &state["metadata"])))
        .take(limit)
        .map(|state| select(state, request.select.as_deref()))
        .collect();
    Ok(Json(Value::Array(states)))
}

/// The fields a query's `select` parameters ask for (`None`: all).
fn selected(pairs: &[(String, String)]) -> Option<Vec<String>> {
    let fields: Vec<String> = pairs.iter().filter(|(n, _)| n == "select").map(|(_, v)| v.clone()).collect();
    (!fields.is_empty()).then_some(fields)
}

/// `state` with only the `fields` asked for (`values.KEY` keeps one key of the values).
fn select(state: Value, fields: Option<&[String]>) -> Value {
    let Some(fields) = fields else { return state };
    let mut out = Map::new();
    for field in fields {
        match field.split_once('.') {
            Some(("values", key)) => {
                let values = out.entry("values").or_insert_with(|| json!({}));
                values[key] = state["values"][key].clone();
            }
            _ => {
                if let Some(value) = state.get(field) {
                    out.insert(field.clone(), value.clone());
                }
            }
        }
    }
    Value::Object(out)
}

// ---- runs of a thread ----

/// The run `run` of thread `thread`: `404` when it is not one of that thread's.
async fn thread_run(shared: &Arc<Shared>, thread: &str, run: &str) -> ApiResult<api::Found> {
    let found = api::find_run(shared, run).await?;
    let of = match &found {
        api::Found::Here(entry) => entry.thread.as_str().to_owned(),
        api::Found::Stored(record) => record.run()["thread_id"].as_str().unwrap_or_default().to_owned(),
    };
    if of != thread {
        return Err(ApiError::not_found(format!("thread `{thread}` has no run `{run}`")));
    }
    Ok(found)
}

/// `GET /threads/{id}/runs?limit&offset&status`: the thread's runs, the newest first.
pub(crate) async fn list_runs(State(shared): Shd, Id(id): Id, RawQuery(query): RawQuery) -> ApiResult<Json<Value>> {
    let pairs = query_pairs(query, &["limit", "offset", "status", "select"])?;
    let status = pairs.iter().find(|(n, _)| n == "status").map(|(_, v)| v.clone());
    let located = locate(&shared, &id).await?;
    let filter = api::RunFilter {
        thread_id: Some(located.thread.as_str().to_owned()),
        status,
        limit: query_number(&pairs, "limit")?,
        offset: query_number(&pairs, "offset")?,
        ..api::RunFilter::default()
    };
    let found = api::runs_matching(&shared, filter).await?;
    let fields: Vec<&str> = pairs.iter().filter(|(n, _)| n == "select").map(|(_, v)| v.as_str()).collect();
    if fields.is_empty() {
        return Ok(Json(found));
    }
    let runs = found.as_array().cloned().unwrap_or_default();
    Ok(Json(
        runs.into_iter()
            .map(|r| {
                Value::Object(fields.iter().filter_map(|f| r.get(*f).map(|v| ((*f).to_owned(), v.clone()))).collect())
            })
            .collect(),
    ))
}

/// `GET /threads/{id}/runs/{run_id}`.
pub(crate) async fn get_thread_run(State(shared): Shd, ThreadRun(thread, run): ThreadRun) -> ApiResult<Json<Value>> {
    match thread_run(&shared, &thread, &run).await? {
        api::Found::Here(entry) => Ok(Json(entry.json())),
        api::Found::Stored(record) => Ok(Json(record.run().clone())),
    }
}

/// `DELETE /threads/{id}/runs/{run_id}`.
pub(crate) async fn delete_thread_run(State(shared): Shd, ThreadRun(thread, run): ThreadRun) -> ApiResult<StatusCode> {
    thread_run(&shared, &thread, &run).await?;
    api::delete_run(State(shared), Id(run)).await
}

/// `GET /threads/{id}/runs/{run_id}/join`: waits for the run to end; the state where it
/// stopped, as LangGraph's `runs.wait` answers.
pub(crate) async fn join_run(State(shared): Shd, ThreadRun(thread, run): ThreadRun) -> ApiResult<Json<Value>> {
    match thread_run(&shared, &thread, &run).await? {
        api::Found::Here(entry) => {
            entry.finished().await;
            Ok(Json(entry.state_json()))
        }
        api::Found::Stored(record) => {
            let record = api::stored_end(&shared, &run, record, api::STORED_WAIT).await?;
            Ok(Json(state_json(&record.wait)))
        }
    }
}

/// `GET /threads/{id}/runs/{run_id}/stream?stream_mode=…&cancel_on_disconnect=…`: the run's
/// events (of the modes asked, else those it was started with), from the start or after
/// `Last-Event-ID`.
pub(crate) async fn join_stream(
    State(shared): Shd,
    ThreadRun(thread, run): ThreadRun,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> ApiResult<Response> {
    let pairs = query_pairs(query, &["stream_mode", "cancel_on_disconnect"])?;
    let asked: Vec<Value> =
        pairs.iter().filter(|(n, _)| n == "stream_mode").map(|(_, v)| Value::String(v.clone())).collect();
    let cancel = query_flag(&pairs, "cancel_on_disconnect")?.unwrap_or(false);
    let after = api::last_event_id(&headers)?;
    let modes = if asked.is_empty() { None } else { Some(Modes::parse(Some(&Value::Array(asked)))?) };
    let found = thread_run(&shared, &thread, &run).await?;
    api::stream_found(&shared, &run, found, modes, after, cancel).await
}

/// `POST /threads/{id}/runs/{run_id}/cancel?wait=…&action=interrupt`: cancels the run (here or
/// on another replica) and waits until it stops; a cancelled answer leaves its pause as it was.
/// `action=rollback` (delete the run and what it did) is not supported.
pub(crate) async fn cancel_thread_run(
    State(shared): Shd,
    ThreadRun(thread, run): ThreadRun,
    RawQuery(query): RawQuery,
) -> ApiResult<StatusCode> {
    let pairs = query_pairs(query, &["wait", "action"])?;
    query_flag(&pairs, "wait")?;
    match pairs.iter().find(|(n, _)| n == "action").map(|(_, v)| v.as_str()) {
        None | Some("interrupt") => {}
        Some("rollback") => {
            return Err(ApiError::unprocessable(
                "unsupported",
                "`action=rollback` is not supported: a cancelled run keeps what it checkpointed (`action=interrupt`)",
            ))
        }
        Some(other) => {
            return Err(ApiError::unprocessable(
                "bad_request",
                format!("`action` is interrupt or rollback, not `{other}`"),
            ))
        }
    }
    thread_run(&shared, &thread, &run).await?;
    api::cancel_run(State(shared), Id(run)).await
}
