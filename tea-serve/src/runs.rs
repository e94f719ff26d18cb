//! Runs: each one a task that drives the engine's stream of a thread, keeps its events for
//! whoever streams or waits on it, and writes the thread's record when it ends. The registry is
//! this process's (a run's events are streamed by the replica that runs it); each run's record
//! in the store (`runlog.rs`) makes it known to the other replicas and across restarts, while
//! the threads (checkpoints and records) are shared through the store.
//!
//! A launch follows the protocol's multitask strategies: `reject` refuses a run on a thread a run
//! holds, `enqueue` queues it behind the run that holds the thread (started in order as each
//! run ends) and polls the store while another replica's run holds it. The task that follows a
//! run also polls the run's record for a cancel asked through another replica.

use crate::error::ApiError;
use crate::hub::Hub;
use crate::plan::{prepare_held, Plan, RunRequest, Settings};
use crate::records::{self, Entry, PauseToken, ThreadRecord};
use crate::runlog;
use crate::served::{Events, JsonCall, JsonEvent, Served};
use crate::time::{now_ms, rfc3339};
use crate::Shared;
use serde_json::{json, Map, Value};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use tea_runtime::{Interrupt, ThreadId};
use tokio::sync::{broadcast, watch};

/// How long a queued run waits for a run of another replica that holds its thread, and how
/// often it looks.
const QUEUE_WAIT_ELSEWHERE: std::time::Duration = std::time::Duration::from_secs(300);
const QUEUE_POLL: std::time::Duration = std::time::Duration::from_millis(250);

/// How many finished runs the registry remembers.
const FINISHED_KEPT: usize = 1000;

/// One server-sent event: its name and its data.
#[derive(Clone, Debug)]
pub(crate) struct SseItem {
    pub(crate) event: &'static str,
    pub(crate) data: Value,
}

/// How a run ended (or that it has not).
#[derive(Clone, Debug)]
pub(crate) enum End {
    Running,
    Paused,
    Done,
    /// Refused before it ran anything (a stale answer, a busy thread, a bad input).
    Refused(ApiError),
    Failed(ApiError),
    Cancelled,
}

pub(crate) struct Progress {
    pub(crate) end: End,
    pub(crate) updated_at: u64,
    pub(crate) values: Value,
    pub(crate) interrupts: Value,
    log: Vec<SseItem>,
}

/// A run of this process.
pub(crate) struct RunEntry {
    pub(crate) id: String,
    pub(crate) thread: ThreadId,
    pub(crate) agent: String,
    pub(crate) created_at: u64,
    /// The request's fields echoed in the protocol's `Run` (input, metadata, config, …).
    pub(crate) request: Map<String, Value>,
    progress: Mutex<Progress>,
    events: broadcast::Sender<SseItem>,
    finished: watch::Sender<bool>,
    cancel: watch::Sender<bool>,
    /// Whether the run's `pending` record has been written (or failed to be): its final record
    /// waits for it, and a background run's response too (so every replica knows the run).
    recorded: watch::Sender<bool>,
    /// Whether a `pending` record is written as the run starts.
    announced: bool,
    /// How it runs (its options) and what its streams send by default (its modes).
    pub(crate) settings: Settings,
    /// Its thread's events (`/threads/{id}/stream`), which its own join.
    hub: Arc<Hub>,
}

/// LangGraph's answer to a wait (see [`RunEntry::state_json`]) from the protocol's
/// `RunWaitResponse` `wait`, as a run or its record has it.
pub(crate) fn state_json(wait: &Value) -> Value {
    if let Some(error) = wait.get("error") {
        let code = error["code"].clone();
        return json!({ "__error__": { "error": code, "message": error["message"] } });
    }
    let mut values = wait["values"].clone();
    if let (Value::Object(map), Some(interrupts)) = (&mut values, wait.get("interrupts")) {
        map.insert("__interrupt__".into(), interrupts.clone());
    }
    values
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl RunEntry {
    pub(crate) fn progress(&self) -> MutexGuard<'_, Progress> {
        lock(&self.progress)
    }

    /// The protocol's `RunStatus`.
    pub(crate) fn status(&self) -> &'static str {
        match self.progress().end {
            End::Running => "pending",
            End::Paused => "interrupted",
            End::Done => "success",
            End::Refused(_) | End::Failed(_) | End::Cancelled => "error",
        }
    }

    /// The protocol's `Run` (also LangGraph's: `assistant_id`, `multitask_strategy`).
    pub(crate) fn json(&self) -> Value {
        let mut run = self.request.clone();
        let status = self.status();
        let progress = self.progress();
        run.insert("run_id".into(), json!(self.id));
        run.insert("thread_id".into(), json!(self.thread.as_str()));
        run.insert("agent_id".into(), json!(self.agent));
        run.insert("assistant_id".into(), json!(self.agent));
        run.entry("multitask_strategy").or_insert_with(|| json!("reject"));
        run.insert("created_at".into(), json!(rfc3339(self.created_at)));
        run.insert("updated_at".into(), json!(rfc3339(progress.updated_at)));
        run.insert("status".into(), json!(status));
        run.entry("metadata").or_insert_with(|| json!({}));
        if let End::Refused(e) | End::Failed(e) = &progress.end {
            run.insert("error".into(), e.body());
        }
        if matches!(progress.end, End::Cancelled) {
            run.insert("error".into(), json!({"code": "cancelled", "message": "the run was cancelled"}));
        }
        Value::Object(run)
    }

    /// The protocol's `RunWaitResponse`.
    pub(crate) fn wait_json(&self) -> Value {
        let run = self.json();
        let progress = self.progress();
        let mut out = json!({ "run": run, "values": progress.values });
        if progress.interrupts.as_array().is_some_and(|i| !i.is_empty()) {
            out["interrupts"] = progress.interrupts.clone();
        }
        if let Some(error) = run.get("error") {
            out["error"] = error.clone();
        }
        out
    }

    /// What LangGraph's `runs.wait` and `runs.join` answer: the state where the run stopped,
    /// with the pauses under `__interrupt__`, or `{"__error__": {error, message}}` for a run
    /// that failed or was cancelled.
    pub(crate) fn state_json(&self) -> Value {
        state_json(&self.wait_json())
    }

    /// Waits until the run's `pending` record is in the store.
    pub(crate) async fn recorded(&self) {
        let mut rx = self.recorded.subscribe();
        let _ = rx.wait_for(|done| *done).await;
    }

    /// Waits until the run ends.
    pub(crate) async fn finished(&self) {
        let mut rx = self.finished.subscribe();
        let _ = rx.wait_for(|done| *done).await;
    }

    /// Asks the run to stop: its stream is dropped, which leaves the thread resumable.
    pub(crate) fn cancel(&self) {
        self.cancel.send_replace(true);
    }

    /// The events so far and a receiver of the rest (ending with an `end` event).
    pub(crate) fn subscribe(&self) -> (Vec<SseItem>, broadcast::Receiver<SseItem>) {
        let progress = self.progress();
        (progress.log.clone(), self.events.subscribe())
    }

    fn emit(&self, progress: &mut Progress, event: &'static str, data: Value) {
        let item = SseItem { event, data };
        self.hub.publish(&self.id, event, &item.data);
        progress.log.push(item.clone());
        let _ = self.events.send(item);
    }
}

/// Cancels a run when dropped before it finished: a client that disconnects from a run it
/// waits on or streams (the protocol's `on_disconnect: cancel`).
pub(crate) struct CancelOnDrop(pub(crate) Option<Arc<RunEntry>>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(run) = self.0.take() {
            if matches!(run.progress().end, End::Running) {
                run.cancel();
            }
        }
    }
}

/// The run that holds a thread, and the runs queued behind it (`enqueue`), first first.
struct Holder {
    run: String,
    queue: VecDeque<(Arc<RunEntry>, Box<RunRequest>)>,
}

/// This process's runs, and which thread each running one holds.
#[derive(Default)]
pub(crate) struct Runs {
    runs: Mutex<HashMap<String, Arc<RunEntry>>>,
    finished: Mutex<VecDeque<String>>,
    busy: Mutex<HashMap<ThreadId, Holder>>,
    hubs: Mutex<HashMap<ThreadId, Arc<Hub>>>,
}

/// How many threads' hubs are kept before those nobody streams are let go.
const HUBS_KEPT: usize = 1000;

impl Runs {
    /// The events hub of `thread` (made on first use).
    pub(crate) fn hub(&self, thread: &ThreadId) -> Arc<Hub> {
        let mut hubs = lock(&self.hubs);
        if hubs.len() > HUBS_KEPT {
            hubs.retain(|_, hub| Arc::strong_count(hub) > 1 || hub.listened());
        }
        hubs.entry(thread.clone()).or_default().clone()
    }

    pub(crate) fn get(&self, id: &str) -> Option<Arc<RunEntry>> {
        lock(&self.runs).get(id).cloned()
    }

    pub(crate) fn all(&self) -> Vec<Arc<RunEntry>> {
        let mut runs: Vec<_> = lock(&self.runs).values().cloned().collect();
        runs.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| a.id.cmp(&b.id)));
        runs
    }

    pub(crate) fn remove(&self, id: &str) -> Option<Arc<RunEntry>> {
        lock(&self.runs).remove(id)
    }

    /// Whether a run of this process holds `thread`.
    pub(crate) fn running(&self, thread: &ThreadId) -> bool {
        lock(&self.busy).contains_key(thread)
    }

    /// Takes `run` out of the queue it waits in; whether it was queued.
    pub(crate) fn withdraw(&self, run: &RunEntry) -> bool {
        let mut busy = lock(&self.busy);
        let Some(holder) = busy.get_mut(&run.thread) else { return false };
        let before = holder.queue.len();
        holder.queue.retain(|(queued, _)| queued.id != run.id);
        holder.queue.len() < before
    }

    /// Notes that `run` has ended: the thread goes to the first run queued behind it (which is
    /// returned, to be started) or is free.
    fn done(&self, run: &RunEntry) -> Option<(Arc<RunEntry>, Box<RunRequest>)> {
        let next = {
            let mut busy = lock(&self.busy);
            match busy.get_mut(&run.thread) {
                Some(holder) if holder.run == run.id => match holder.queue.pop_front() {
                    Some((next, request)) => {
                        holder.run = next.id.clone();
                        Some((next, request))
                    }
                    None => {
                        busy.remove(&run.thread);
                        None
                    }
                },
                _ => None,
            }
        };
        let mut finished = lock(&self.finished);
        finished.push_back(run.id.clone());
        while finished.len() > FINISHED_KEPT {
            if let Some(old) = finished.pop_front() {
                lock(&self.runs).remove(&old);
            }
        }
        next
    }
}

/// Ends `run` and hands its thread to the next queued run, if any.
fn release(shared: &Arc<Shared>, run: &RunEntry) {
    if let Some((next, request)) = shared.runs.done(run) {
        tokio::spawn(start_queued(shared.clone(), next, request));
    }
}

/// Whether another replica asked (through the run's record) to cancel run `id`.
async fn cancelled_elsewhere(shared: &Arc<Shared>, id: &str) -> bool {
    let (s, id) = (shared.clone(), id.to_owned());
    let read = tokio::task::spawn_blocking(move || s.records().map(|store| runlog::read(store, &id))).await;
    matches!(read, Ok(Some(Ok(Some(record)))) if record.cancel)
}

/// Completes when another replica asks to cancel run `id`: its record is read every
/// [`runlog::CANCEL_POLL`] while the run lasts (a run that ends sooner never reads it).
async fn cancel_elsewhere(shared: &Arc<Shared>, id: &str) {
    loop {
        tokio::time::sleep(runlog::CANCEL_POLL).await;
        if cancelled_elsewhere(shared, id).await {
            return;
        }
    }
}

/// Writes the run's final record (after its `pending` one) — or, for a run that never ran or
/// whose thread went with it, deletes it.
async fn record_end(shared: &Arc<Shared>, run: &Arc<RunEntry>, keep: bool) {
    run.recorded().await;
    let (s, id, wait, announced) = (shared.clone(), run.id.clone(), run.wait_json(), run.announced);
    let _ = tokio::task::spawn_blocking(move || {
        let Some(store) = s.records() else { return };
        // Best effort, as the `pending` record: the run's own answer does not depend on it.
        let _ = match (keep, announced) {
            (true, true) => runlog::write(store, &id, wait),
            (true, false) => runlog::write_first(store, &id, wait),
            (false, true) => runlog::delete(store, &id).map(drop),
            (false, false) => Ok(()),
        };
    })
    .await;
}

/// Starts a run that waited in the queue, now that it holds the thread: plans it from its
/// request against the thread as it is now (a refusal — the pause it answers was answered by
/// the run before it, say — ends it as that error), unless it was cancelled meanwhile (here or
/// through another replica). While a run of another replica holds the thread (it is mid-run in
/// the store), it looks again every [`QUEUE_POLL`], for up to [`QUEUE_WAIT_ELSEWHERE`].
async fn start_queued(shared: Arc<Shared>, run: Arc<RunEntry>, request: Box<RunRequest>) {
    let deadline = tokio::time::Instant::now() + QUEUE_WAIT_ELSEWHERE;
    let planned = loop {
        if *run.cancel.borrow() || cancelled_elsewhere(&shared, &run.id).await {
            return end_unstarted(&shared, &run, End::Cancelled);
        }
        match prepare_held(&shared, run.thread.as_str().to_owned(), (*request).clone()).await {
            // A run of another replica holds the thread: wait for it too.
            Err(error) if error.code == "thread_busy" && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(QUEUE_POLL).await;
            }
            planned => break planned,
        }
    };
    match planned {
        Ok(prepared) => {
            let (agent, plan, delete_after) = prepared.parts();
            match plan {
                Plan::Queued(_) => end_unstarted(
                    &shared,
                    &run,
                    End::Failed(ApiError::internal("a queued run was queued again while it held its thread")),
                ),
                plan => begin(&shared, agent, run, plan, delete_after),
            }
        }
        Err(error) => end_unstarted(&shared, &run, End::Refused(error)),
    }
}

/// Ends a queued run that never ran: `end` (refused, cancelled) is what its waiters see; its
/// record goes (it never touched its thread).
pub(crate) fn end_unstarted(shared: &Arc<Shared>, run: &Arc<RunEntry>, end: End) {
    {
        let mut progress = run.progress();
        progress.updated_at = now_ms();
        if let End::Refused(e) | End::Failed(e) = &end {
            run.emit(&mut progress, "error", e.body());
        }
        progress.end = end;
        run.emit(&mut progress, "end", json!({ "run_id": run.id, "status": "error" }));
    }
    release(shared, run);
    let (shared, run) = (shared.clone(), run.clone());
    tokio::spawn(async move {
        record_end(&shared, &run, false).await;
        run.finished.send_replace(true);
    });
}

/// Starts a run of `agent` on `thread`: the protocol's `reject` multitask strategy refuses it
/// with `409` while a run of this process holds the thread, and `enqueue` ([`Plan::Queued`])
/// queues it behind that run (the engine's own claim on the thread refuses a run while a run
/// of another process holds it). `delete_after`: the thread is deleted when the run finishes
/// (a stateless run's `on_completion: delete`). `announce`: the run's record is written as it
/// starts (else only when it ends).
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch(
    shared: &Arc<Shared>,
    agent: Arc<dyn Served>,
    thread: ThreadId,
    plan: Plan,
    request: Map<String, Value>,
    delete_after: bool,
    announce: bool,
    settings: Settings,
) -> Result<Arc<RunEntry>, ApiError> {
    let id = uuid::Uuid::new_v4().to_string();
    let now = now_ms();
    let run = Arc::new(RunEntry {
        id: id.clone(),
        thread: thread.clone(),
        agent: agent.name().to_owned(),
        created_at: now,
        request,
        progress: Mutex::new(Progress {
            end: End::Running,
            updated_at: now,
            values: json!({}),
            interrupts: json!([]),
            log: Vec::new(),
        }),
        events: broadcast::channel(1024).0,
        finished: watch::channel(false).0,
        cancel: watch::channel(false).0,
        recorded: watch::channel(false).0,
        announced: announce,
        settings,
        hub: shared.runs.hub(&thread),
    });
    let plan = {
        let mut busy = lock(&shared.runs.busy);
        if let Some(holder) = busy.get_mut(&thread) {
            let Plan::Queued(request) = plan else {
                return Err(ApiError::conflict(
                    "thread_busy",
                    format!("thread `{thread}` is running (run `{}`); a thread takes one run at a time", holder.run),
                ));
            };
            holder.queue.push_back((run.clone(), request));
            None
        } else {
            busy.insert(thread.clone(), Holder { run: id.clone(), queue: VecDeque::new() });
            Some(plan)
        }
    };
    lock(&shared.runs.runs).insert(id, run.clone());
    {
        let mut progress = run.progress();
        run.emit(&mut progress, "metadata", json!({ "run_id": run.id, "thread_id": thread.as_str() }));
    }
    if !announce {
        run.recorded.send_replace(true);
        return Ok(start_planned(shared, agent, run, plan, delete_after));
    }
    let pending = run.wait_json();
    let (s, run_id) = (shared.clone(), run.id.clone());
    let written = run.clone();
    tokio::spawn(async move {
        // Best effort: a run whose record cannot be written is known to this process only.
        let _ = tokio::task::spawn_blocking(move || {
            if let Some(store) = s.records() {
                let _ = runlog::write(store, &run_id, pending);
            }
        })
        .await;
        written.recorded.send_replace(true);
    });
    Ok(start_planned(shared, agent, run, plan, delete_after))
}

/// Starts `run` as `launch` planned it (`None`: it waits in a queue, which starts it).
fn start_planned(
    shared: &Arc<Shared>,
    agent: Arc<dyn Served>,
    run: Arc<RunEntry>,
    plan: Option<Plan>,
    delete_after: bool,
) -> Arc<RunEntry> {
    match plan {
        // Queued behind the run that holds the thread: `release` starts it.
        None => {}
        // The thread came free between planning and now: plan it again, holding the thread.
        Some(Plan::Queued(request)) => {
            tokio::spawn(start_queued(shared.clone(), run.clone(), request));
        }
        Some(plan) => begin(shared, agent, run.clone(), plan, delete_after),
    }
    run
}

/// Runs `run` (which holds its thread) on a task of its own until it ends.
fn begin(shared: &Arc<Shared>, agent: Arc<dyn Served>, run: Arc<RunEntry>, plan: Plan, delete_after: bool) {
    let thread = run.thread.clone();
    let resuming = matches!(plan, Plan::Resume { .. });
    let settings = &run.settings;
    let how = |call: JsonCall| call.options(settings.options.clone()).context(settings.context.clone());
    let (first, events) = match plan {
        Plan::Start { input } => {
            let entry = Entry::new("start", None, json!({ "input": input }));
            (entry, agent.clone().run_stream(how(JsonCall::start(input).on(thread))))
        }
        Plan::Resume { token, answer, update, entry } => {
            (entry, agent.clone().run_stream(how(JsonCall::resume(token, answer, update))))
        }
        Plan::Recover => {
            let entry = Entry::new("continue", None, Value::Null);
            (entry, agent.clone().run_stream(how(JsonCall::recover(thread))))
        }
        Plan::Queued(_) => {
            let error = ApiError::internal("a queued run was started without being planned");
            return end_unstarted(shared, &run, End::Failed(error));
        }
    };
    let shared = shared.clone();
    tokio::spawn(async move {
        let mut cancel = run.cancel.subscribe();
        let mut timeline = vec![first];
        let outcome = tokio::select! {
            outcome = drive(&run, events, &mut timeline) => outcome,
            _ = cancel.wait_for(|c| *c) => Outcome::Cancelled,
            () = cancel_elsewhere(&shared, &run.id) => Outcome::Cancelled,
        };
        if resuming && matches!(outcome, Outcome::Cancelled) {
            settle(&agent, &run.thread).await;
        }
        finish(&shared, agent, &run, outcome, timeline, delete_after).await;
    });
}

enum Outcome {
    Paused(PauseToken),
    Done,
    Refused(ApiError),
    Failed(ApiError),
    Cancelled,
}

/// The `messages` (mode `messages-tuple`) and `messages/…` (mode `messages`) events of the
/// messages node `node` added to the state's `messages` in its update: each message object
/// whole, with LangGraph's metadata (`langgraph_node`, `langgraph_step`).
fn message_events(run: &RunEntry, progress: &mut Progress, node: &str, step: u64, update: &Value) {
    let Some(messages) = update.get("messages") else { return };
    let listed: Vec<&Value> = match messages {
        Value::Array(list) => list.iter().filter(|m| m.is_object()).collect(),
        one @ Value::Object(_) => vec![one],
        _ => return,
    };
    for message in listed {
        let metadata = json!({ "langgraph_node": node, "langgraph_step": step, "run_id": run.id });
        run.emit(progress, "messages", json!([message, metadata]));
        let id = message.get("id").and_then(Value::as_str).unwrap_or_default();
        run.emit(progress, "messages/metadata", json!({ id: { "metadata": metadata } }));
        run.emit(progress, "messages/complete", json!([message]));
    }
}

/// Follows the run's events until it ends, publishing each and noting the timeline.
async fn drive(run: &RunEntry, mut events: Events, timeline: &mut Vec<Entry>) -> Outcome {
    let mut first = true;
    // Steps seen, for the `debug` and message events' `step`.
    let mut step = 0u64;
    loop {
        let Some(event) = events.recv().await else {
            return Outcome::Failed(ApiError::internal("the run stopped without finishing or pausing"));
        };
        let mut progress = run.progress();
        progress.updated_at = now_ms();
        match event {
            Err(error) if first && error.refuses_request() => return Outcome::Refused(error),
            Err(error) => {
                timeline.push(Entry::new("error", None, json!({ "message": error.message })));
                run.emit(&mut progress, "error", error.body());
                return Outcome::Failed(error);
            }
            Ok(JsonEvent::Step { node, branch, state, duration_ms }) => {
                let mut entry =
                    Entry::new("step", Some(node.clone()), branch.map_or(Value::Null, |b| json!({ "branch": b })));
                entry.duration_ms = Some(duration_ms);
                timeline.push(entry);
                step += 1;
                run.emit(&mut progress, "values", state.clone());
                progress.values = state;
            }
            Ok(JsonEvent::Note { kind: "update", node, data }) => {
                let update = data["update"].clone();
                message_events(run, &mut progress, &node, step + 1, &update);
                run.emit(&mut progress, "updates", json!({ node.clone(): update.clone() }));
                let payload = json!({ "id": format!("{}:{node}", step + 1), "name": node, "result": update, "error": null, "interrupts": [] });
                run.emit(&mut progress, "debug", debug_event("task_result", step + 1, payload));
            }
            Ok(JsonEvent::Note { kind: "start", node, data }) => {
                let at = data["step"].as_u64().unwrap_or(step + 1);
                let payload =
                    json!({ "id": format!("{at}:{node}"), "name": node, "input": progress.values, "triggers": [] });
                run.emit(&mut progress, "debug", debug_event("task", at, payload));
            }
            Ok(JsonEvent::Interrupted { state, token, checkpoint, interrupts }) => {
                let listed: Vec<Value> = interrupts.iter().map(interrupt_json_plain).collect();
                for interrupt in &interrupts {
                    timeline.push(Entry::new(
                        "pause",
                        Some(interrupt.node().as_str().to_owned()),
                        json!({ "id": interrupt.id(), "value": interrupt.value() }),
                    ));
                }
                let mut values = state.clone();
                if let Value::Object(map) = &mut values {
                    map.insert("__interrupt__".into(), Value::Array(listed.clone()));
                }
                run.emit(&mut progress, "updates", json!({ "__interrupt__": listed }));
                run.emit(&mut progress, "values", values);
                progress.values = state;
                progress.interrupts = Value::Array(listed);
                return Outcome::Paused(PauseToken { checkpoint, token });
            }
            Ok(JsonEvent::Custom { node, value }) => {
                timeline.push(Entry::new("custom", Some(node), value.clone()));
                run.emit(&mut progress, "custom", value);
            }
            Ok(JsonEvent::Note { kind, node, data }) => {
                timeline.push(Entry::new(kind, Some(node), data));
            }
            Ok(JsonEvent::Done { state }) => {
                timeline.push(Entry::new("done", None, Value::Null));
                run.emit(&mut progress, "values", state.clone());
                progress.values = state;
                return Outcome::Done;
            }
        }
        first = false;
    }
}

/// A `debug` event of LangGraph's form: `{type, timestamp, step, payload}`.
fn debug_event(kind: &str, step: u64, payload: Value) -> Value {
    json!({ "type": kind, "timestamp": rfc3339(now_ms()), "step": step, "payload": payload })
}

/// After a cancelled resume, waits (up to 10 s) until the engine has put the pause back, which
/// it does as the dropped run's stream unwinds: the cancel returns once the thread is
/// resumable again.
async fn settle(agent: &Arc<dyn Served>, thread: &ThreadId) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while tokio::time::Instant::now() < deadline {
        let (agent, thread) = (agent.clone(), thread.clone());
        let paused = tokio::task::spawn_blocking(move || agent.state(&thread))
            .await
            .is_ok_and(|state| state.is_ok_and(|s| s.is_some_and(|s| s.paused())));
        if paused {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Ends the run: writes the thread's record (unless the run was refused before it ran) and the
/// run's, then wakes whoever waits on it.
async fn finish(
    shared: &Arc<Shared>,
    agent: Arc<dyn Served>,
    run: &Arc<RunEntry>,
    outcome: Outcome,
    mut timeline: Vec<Entry>,
    delete_after: bool,
) {
    let end = match &outcome {
        Outcome::Paused(_) => End::Paused,
        Outcome::Done => End::Done,
        Outcome::Refused(e) => End::Refused(e.clone()),
        Outcome::Failed(e) => End::Failed(e.clone()),
        Outcome::Cancelled => End::Cancelled,
    };
    if matches!(outcome, Outcome::Cancelled) {
        timeline.push(Entry::new("cancelled", None, Value::Null));
    }
    // A refused run did not happen (the request failed); a deleted thread takes its runs along.
    let keep_record = !(matches!(outcome, Outcome::Refused(_)) || delete_after && matches!(outcome, Outcome::Done));
    let written = if matches!(outcome, Outcome::Refused(_)) {
        Ok(())
    } else {
        let shared = shared.clone();
        let thread = run.thread.clone();
        let name = run.agent.clone();
        let run_id = run.id.clone();
        tokio::task::spawn_blocking(move || {
            let Some(store) = shared.records() else { return Ok(()) };
            if delete_after && matches!(outcome, Outcome::Done) {
                agent.delete(&thread)?;
                for id in records::read(store, &thread)?.map(|r| r.runs).unwrap_or_default() {
                    runlog::delete(store, &id)?;
                }
                records::delete(store, &thread)?;
                return Ok(());
            }
            let mut dropped = Vec::new();
            records::update(store, &thread, |record| {
                let mut record = record.unwrap_or_else(|| ThreadRecord::new(None, Map::new()));
                record.agent = Some(name.clone());
                record.record(timeline.clone());
                dropped.clear();
                if !record.runs.contains(&run_id) {
                    record.runs.push(run_id.clone());
                }
                while record.runs.len() > runlog::KEPT_PER_THREAD {
                    dropped.push(record.runs.remove(0));
                }
                match &outcome {
                    Outcome::Paused(pause) => {
                        record.pause = Some(pause.clone());
                        record.error = None;
                    }
                    Outcome::Done => {
                        record.pause = None;
                        record.error = None;
                    }
                    Outcome::Failed(e) => record.error = Some(e.message.clone()),
                    // A cancelled resume put its pause back: its token still works.
                    Outcome::Cancelled => {
                        if record.pause.is_none() {
                            record.error = Some("the run was cancelled".into());
                        }
                    }
                    Outcome::Refused(_) => {}
                }
                Ok(Some(record))
            })?;
            for id in &dropped {
                runlog::delete(store, id)?;
            }
            Ok(())
        })
        .await
        .unwrap_or_else(|e| Err(ApiError::internal(format!("writing the thread's record failed: {e}"))))
    };
    {
        let mut progress = run.progress();
        progress.updated_at = now_ms();
        progress.end = match (end, written) {
            (end, Ok(())) => end,
            (End::Refused(e), _) => End::Refused(e),
            (_, Err(e)) => End::Failed(e),
        };
        let run_json_status = match &progress.end {
            End::Paused => "interrupted",
            End::Done => "success",
            _ => "error",
        };
        if let End::Refused(e) | End::Failed(e) = &progress.end {
            let body = e.body();
            if !progress.log.iter().any(|i| i.event == "error") {
                run.emit(&mut progress, "error", body);
            }
        }
        run.emit(&mut progress, "end", json!({ "run_id": run.id, "status": run_json_status }));
    }
    record_end(shared, run, keep_record).await;
    release(shared, run);
    run.finished.send_replace(true);
}

/// What a pause asks, as a line of text.
pub(crate) fn pause_message(interrupt: &Interrupt) -> String {
    let value = interrupt.value();
    let field = ["question", "message", "prompt", "text"].iter().find_map(|k| value.get(k).and_then(Value::as_str));
    match (value, field) {
        (Value::String(s), _) => s.clone(),
        (_, Some(s)) => s.to_owned(),
        (Value::Null, _) if interrupt.id().starts_with("after:") => {
            format!("Paused after `{}`: continue?", interrupt.node())
        }
        (Value::Null, _) => format!("Paused before `{}`: continue?", interrupt.node()),
        (other, _) => other.to_string(),
    }
}

/// A pause as the protocol's responses list it; `expires_at` (RFC 3339) when its node has a
/// timeout, after which an answer is refused (`409 expired`).
pub(crate) fn interrupt_json_plain(interrupt: &Interrupt) -> Value {
    let mut out = json!({
        "id": interrupt.id(),
        "node": interrupt.node().as_str(),
        "value": interrupt.value(),
        "needs_answer": interrupt.needs_answer(),
        "message": pause_message(interrupt),
    });
    // `Interrupt` keeps its deadline to itself; its serialized form carries it (seconds).
    let expires_at = serde_json::to_value(interrupt).ok().and_then(|v| v.get("expires_at").and_then(Value::as_u64));
    if let Some(seconds) = expires_at {
        out["expires_at"] = json!(rfc3339(seconds.saturating_mul(1000)));
    }
    out
}
