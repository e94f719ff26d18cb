//! Runs: each one a task that drives the engine's stream of a thread, keeps its events for
//! whoever streams or waits on it (and stores them, `journal.rs`), and writes the thread's
//! record when it ends. The registry is this process's; each run's record in the store
//! (`runlog.rs`) makes it known to the other replicas and across restarts, and its claim
//! (`queue.rs`), written before it begins and renewed by this replica's worker ([`work`]), lets
//! another replica take it over when this one dies ([`take_over`]).
//!
//! A launch follows the protocol's multitask strategies: `reject` refuses a run on a thread a run
//! holds, `enqueue` queues it behind the run that holds the thread (started in order as each
//! run ends) and polls the store while another replica's run holds it. The task that follows a
//! run also polls the run's record for a cancel asked through another replica.

use crate::error::ApiError;
use crate::hub::{self, Hub};
use crate::plan::{locate_now, prepare_held, Plan, Prepared, RunRequest, Settings};
use crate::queue::{self, Claim};
use crate::records::{self, Entry, PauseToken, ThreadRecord};
use crate::runlog::RunRecord;
use crate::served::{Events, JsonCall, JsonEvent, Served};
use crate::time::{now_ms, rfc3339};
use crate::Shared;
use crate::{journal, runlog};
use serde_json::{json, Map, Value};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
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
    /// When it happened (milliseconds since the Unix epoch).
    pub(crate) at: u64,
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
    /// Whether the run's claim and `pending` record have been written (or failed to be): its
    /// final record waits for it, and a background run's response too (so every replica knows
    /// the run).
    recorded: watch::Sender<bool>,
    /// Whether its events' writer (`journal_events`) has stopped: a record deleted after it
    /// leaves no events behind.
    journaled: watch::Sender<bool>,
    /// Taken over from a replica whose lease on it lapsed (`queue.rs`).
    takeover: bool,
    /// Another replica took the run's claim from this one (this one stalled past its lease):
    /// the taker records the run, this one no longer does.
    lost: AtomicBool,
    /// The head of the run's claim as this replica last wrote it (0: not known), so that
    /// releasing it is one call (`queue::release`).
    claim_head: AtomicU64,
    /// When (milliseconds since the Unix epoch) this replica last wrote the claim's lease: the
    /// worker renews only claims older than half a lease.
    renewed_at: AtomicU64,
    /// The head of the run's record as this replica wrote it (0: not known), so that its final
    /// record is one append (`runlog::write_after`).
    record_head: AtomicU64,
    /// How many of the run's events were stored before this replica had it (`journal.rs`):
    /// the place of its first event here.
    pub(crate) base: usize,
    /// How it runs (its options) and what its streams send by default (its modes).
    pub(crate) settings: Settings,
    /// Its thread's list of runs as this process knows it (`hub.rs`), which the run joins when
    /// it begins.
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

    /// Whether another replica took the run over from this one (which then stopped it).
    pub(crate) fn lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
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
        let item = SseItem { event, data, at: now_ms() };
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

    /// Whether a run of this process holds `thread`, ended or not: a new run of the thread
    /// waits its turn (`enqueue`) or is refused while this holds ([`launch`] decides by it too).
    pub(crate) fn held(&self, thread: &ThreadId) -> bool {
        lock(&self.busy).contains_key(thread)
    }

    /// Whether a run of this process holds `thread` and has not ended (a run that ended holds
    /// its thread only while its records are written; one queued behind it holds it next): what
    /// a thread's status reports as `busy`.
    pub(crate) fn running(&self, thread: &ThreadId) -> bool {
        let holder = {
            let busy = lock(&self.busy);
            match busy.get(thread) {
                None => return false,
                Some(holder) if !holder.queue.is_empty() => return true,
                Some(holder) => holder.run.clone(),
            }
        };
        self.get(&holder).is_none_or(|run| matches!(run.progress().end, End::Running))
    }

    /// The run of this process that holds `thread` when it has stopped — it announced its
    /// pause, or its end — and only writes its records before it lets the thread go (none
    /// queued behind it).
    pub(crate) fn stopping(&self, thread: &ThreadId) -> Option<Arc<RunEntry>> {
        let holder = {
            let busy = lock(&self.busy);
            let holder = busy.get(thread)?;
            if !holder.queue.is_empty() {
                return None;
            }
            holder.run.clone()
        };
        let run = self.get(&holder)?;
        // The pause is announced under the progress lock, with `interrupts` set before it is
        // let go: whoever heard of it finds it here.
        let stopped = {
            let progress = run.progress();
            !matches!(progress.end, End::Running) || progress.interrupts.as_array().is_some_and(|i| !i.is_empty())
        };
        stopped.then_some(run)
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
/// whose thread went with it, deletes it — and then lets its claim go. A run another replica
/// took from this one is left to it.
async fn record_end(shared: &Arc<Shared>, run: &Arc<RunEntry>, keep: bool) {
    run.recorded().await;
    if run.lost.load(Ordering::SeqCst) {
        return;
    }
    if !keep {
        let mut journaled = run.journaled.subscribe();
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), journaled.wait_for(|done| *done)).await;
    }
    let (s, id, wait) = (shared.clone(), run.id.clone(), run.wait_json());
    let known = |head: &AtomicU64| Some(head.load(Ordering::SeqCst)).filter(|&n| n > 0);
    let (record_head, claim_head) = (known(&run.record_head), known(&run.claim_head));
    let _ = tokio::task::spawn_blocking(move || {
        let Some(store) = s.records() else { return };
        // Best effort, as the `pending` record: the run's own answer does not depend on it.
        let written = if keep {
            runlog::write_after(store, &id, record_head, wait)
        } else {
            runlog::delete(store, &id).map(drop)
        };
        if let Err(error) = written {
            eprintln!("tea serve: the record of run `{id}`: {}", error.message);
        }
        if let Err(error) = queue::release(store, &id, &s.worker.replica, claim_head) {
            eprintln!("tea serve: the claim of run `{id}`: {}", error.message);
        }
    })
    .await;
}

/// Stores the run's events as they come (`journal.rs`), from place `run.base` on, until its
/// `end` is stored (or another replica took it over).
async fn journal_events(shared: Arc<Shared>, run: Arc<RunEntry>) {
    write_events(&shared, &run).await;
    run.journaled.send_replace(true);
}

async fn write_events(shared: &Arc<Shared>, run: &Arc<RunEntry>) {
    let mut rx = run.events.subscribe();
    let mut written = 0usize;
    // The head of the run's stored events as this writer left them: a new run has none (its
    // id is new); a taken-over run's are read.
    let mut head: Option<Option<u64>> = (!run.takeover && run.base == 0).then_some(None);
    loop {
        let (batch, ended) = {
            let progress = run.progress();
            let new = &progress.log[written.min(progress.log.len())..];
            let batch: Vec<(String, Value)> = new.iter().map(|i| (i.event.to_owned(), i.data.clone())).collect();
            let at: Vec<u64> = new.iter().map(|i| i.at).collect();
            ((batch, at), progress.log.last().is_some_and(|i| i.event == "end"))
        };
        if run.lost.load(Ordering::SeqCst) {
            return;
        }
        let (batch, at) = batch;
        if !batch.is_empty() {
            let (s, id, first, count) = (shared.clone(), run.id.clone(), run.base + written, batch.len());
            let known = head.take();
            let stored = tokio::task::spawn_blocking(move || match (s.records(), known) {
                (Some(store), Some(known)) => journal::append_after(store, &id, known, first, &batch, &at),
                (Some(store), None) => journal::append(store, &id, first, &batch, &at).map(|()| None),
                (None, _) => Ok(None),
            })
            .await;
            match stored {
                Ok(Ok(now)) => head = now.map(Some),
                Ok(Err(error)) => eprintln!("tea serve: the events of run `{}`: {}", run.id, error.message),
                Err(_) => {}
            }
            written += count;
        }
        if ended {
            return;
        }
        match rx.recv().await {
            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
            Err(broadcast::error::RecvError::Closed) => return,
        }
        tokio::time::sleep(journal::COALESCE).await;
    }
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
            let from = prepared.from;
            let (agent, plan, delete_after) = prepared.parts();
            match plan {
                Plan::Queued(_) => end_unstarted(
                    &shared,
                    &run,
                    End::Failed(ApiError::internal("a queued run was queued again while it held its thread")),
                ),
                plan => {
                    noted_started(&shared, &run, from).await;
                    begin(&shared, agent, run, plan, delete_after)
                }
            }
        }
        Err(error) => end_unstarted(&shared, &run, End::Refused(error)),
    }
}

/// Notes in `run`'s claim that it began on its thread, whose head was `from`.
async fn noted_started(shared: &Arc<Shared>, run: &Arc<RunEntry>, from: Option<u64>) {
    let (s, id) = (shared.clone(), run.id.clone());
    let noted = tokio::task::spawn_blocking(move || match s.records() {
        Some(store) => queue::started(store, &id, &s.worker.replica, from),
        None => Ok(None),
    })
    .await;
    if let Ok(Ok(head)) = noted {
        run.claim_head.store(head.unwrap_or(0), Ordering::SeqCst);
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

/// A run's entry in this process's registry, before it runs.
#[allow(clippy::too_many_arguments)]
fn entry(
    shared: &Shared,
    id: String,
    thread: ThreadId,
    agent: String,
    created_at: u64,
    request: Map<String, Value>,
    settings: Settings,
    takeover: bool,
    base: usize,
) -> Arc<RunEntry> {
    let now = now_ms();
    Arc::new(RunEntry {
        id,
        thread: thread.clone(),
        agent,
        created_at,
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
        journaled: watch::channel(false).0,
        takeover,
        lost: AtomicBool::new(false),
        claim_head: AtomicU64::new(0),
        renewed_at: AtomicU64::new(now),
        record_head: AtomicU64::new(0),
        base,
        settings,
        hub: shared.runs.hub(&thread),
    })
}

/// Starts the prepared run: the protocol's `reject` multitask strategy refuses it with `409`
/// while a run of this process holds the thread, and `enqueue` ([`Plan::Queued`]) queues it
/// behind that run (the engine's own claim on the thread refuses a run while a run of another
/// process holds it). Before it touches its thread, its claim (`queue.rs`, held by this
/// replica) and its `pending` record are written, so that another replica finishes it if this
/// one dies; its events are stored as they come (`journal.rs`).
pub(crate) fn launch(shared: &Arc<Shared>, prepared: Prepared) -> Result<Arc<RunEntry>, ApiError> {
    let Prepared { agent, thread, plan, delete_after, echo, settings, request, from, .. } = prepared;
    let id = uuid::Uuid::new_v4().to_string();
    let run = entry(shared, id.clone(), thread.clone(), agent.name().to_owned(), now_ms(), echo, settings, false, 0);
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
    let started = plan.as_ref().is_some_and(|p| !matches!(p, Plan::Queued(_)));
    let claim = Claim {
        thread: thread.as_str().to_owned(),
        agent: run.agent.clone(),
        holder: shared.worker.replica.clone(),
        until: shared.worker.until(),
        request,
        started,
        from: from.filter(|_| started),
        delete_after,
        takeovers: 0,
        created_at: run.created_at,
    };
    let pending = run.wait_json();
    let (shared, run_id) = (shared.clone(), run.id.clone());
    let written = run.clone();
    tokio::spawn(async move {
        // Best effort: a run whose claim or record cannot be written is known to this process
        // only (and a store that fails these fails the run's own writes too). Each is one
        // append: the run's id is new, so neither exists yet.
        let (s, r) = (shared.clone(), written.clone());
        let _ = tokio::task::spawn_blocking(move || {
            if let Some(store) = s.records() {
                match queue::put(store, &run_id, &claim) {
                    Ok(head) => r.claim_head.store(head, Ordering::SeqCst),
                    Err(error) => eprintln!("tea serve: the claim of run `{run_id}`: {}", error.message),
                }
                r.renewed_at.store(now_ms(), Ordering::SeqCst);
                match runlog::create(store, &run_id, pending) {
                    Ok(head) => r.record_head.store(head, Ordering::SeqCst),
                    Err(error) => eprintln!("tea serve: the record of run `{run_id}`: {}", error.message),
                }
            }
        })
        .await;
        written.recorded.send_replace(true);
        tokio::spawn(journal_events(shared.clone(), written.clone()));
        start_planned(&shared, agent, written, plan, delete_after);
    });
    Ok(run)
}

/// Starts `run` as `launch` planned it (`None`: it waits in a queue, which starts it).
fn start_planned(
    shared: &Arc<Shared>,
    agent: Arc<dyn Served>,
    run: Arc<RunEntry>,
    plan: Option<Plan>,
    delete_after: bool,
) {
    match plan {
        // Queued behind the run that holds the thread: `release` starts it.
        None => {}
        // The thread came free between planning and now: plan it again, holding the thread.
        Some(Plan::Queued(request)) => {
            tokio::spawn(start_queued(shared.clone(), run.clone(), request));
        }
        Some(plan) => begin(shared, agent, run, plan, delete_after),
    }
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
        let noted = tokio::spawn(join_thread_runs(shared.clone(), run.clone()));
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
        // The next run on the thread joins the list after this one: it cannot begin before
        // this one finishes.
        let _ = tokio::time::timeout(JOIN_WAIT, noted).await;
        finish(&shared, agent, &run, outcome, timeline, delete_after).await;
    });
}

/// How long a run that ended waits for its entry in its thread's list of runs to be written.
const JOIN_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Adds `run`, which begins on its thread, to the thread's list of runs (`hub.rs`), and wakes
/// the thread's streams here. Best effort: a run whose entry cannot be written runs all the
/// same; the thread's streams do not see it.
async fn join_thread_runs(shared: Arc<Shared>, run: Arc<RunEntry>) {
    let (s, r) = (shared.clone(), run.clone());
    let noted = tokio::task::spawn_blocking(move || match s.records() {
        Some(store) => hub::note(store, &r.thread, &r.id, r.hub.head(), r.takeover).map(Some),
        None => Ok(None),
    })
    .await;
    match noted {
        Ok(Ok(Some(head))) => run.hub.grew(head),
        Ok(Ok(None)) | Err(_) => {}
        Ok(Err(error)) => eprintln!("tea serve: the list of runs of thread `{}`: {}", run.thread, error.message),
    }
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
    if run.takeover {
        if let Outcome::Refused(error) = &outcome {
            if error.code == "thread_busy" {
                // The engine's lease shows the old run alive: the claim goes back, for this
                // replica or another to try again once that lease has lapsed.
                return put_back(shared, run).await;
            }
        }
    }
    // A refused run did not happen (the request failed) — unless it was taken over, when its
    // request was answered long ago; a deleted thread takes its runs along.
    let keep_record =
        !(matches!(outcome, Outcome::Refused(_)) && !run.takeover || delete_after && matches!(outcome, Outcome::Done));
    let written = if matches!(outcome, Outcome::Refused(_)) || run.lost.load(Ordering::SeqCst) {
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

/// Gives a taken-over run back to the queue without recording anything: its claim may be
/// taken again (by any replica) after a tick.
async fn put_back(shared: &Arc<Shared>, run: &Arc<RunEntry>) {
    let (s, id) = (shared.clone(), run.id.clone());
    let until = now_ms() + u64::try_from(shared.worker.every().as_millis()).unwrap_or(1000);
    let _ = tokio::task::spawn_blocking(move || match s.records() {
        Some(store) => queue::put_back(store, &id, &s.worker.replica, until),
        None => Ok(()),
    })
    .await;
    shared.worker.due_by(until.saturating_add(1));
    run.lost.store(true, Ordering::SeqCst);
    {
        let mut progress = run.progress();
        progress.end = End::Cancelled;
    }
    // Wakes its events' writer, which sees it lost and stops (the event is not kept).
    let _ = run.events.send(SseItem { event: "end", data: Value::Null, at: now_ms() });
    let _ = shared.runs.done(run);
    shared.runs.remove(&run.id);
    run.finished.send_replace(true);
}

/// Renews the claims of this replica's runs that have not ended; a run whose claim another
/// replica took (this one stalled past its lease) is marked lost, and left to the taker.
async fn renew_claims(shared: &Arc<Shared>) {
    // A claim written less than half a lease ago has time enough: it is renewed on a later
    // tick (a tick comes every quarter of a lease).
    let half = u64::try_from(shared.worker.lease.as_millis() / 2).unwrap_or(u64::MAX);
    let now = now_ms();
    let mine: Vec<Arc<RunEntry>> = shared
        .runs
        .all()
        .into_iter()
        .filter(|r| {
            matches!(r.progress().end, End::Running)
                && !r.lost.load(Ordering::SeqCst)
                && now.saturating_sub(r.renewed_at.load(Ordering::SeqCst)) >= half
        })
        .collect();
    if mine.is_empty() {
        return;
    }
    let s = shared.clone();
    let _ = tokio::task::spawn_blocking(move || {
        let Some(store) = s.records() else { return };
        for run in mine {
            // A run whose claim is not written yet has nothing to renew.
            if !*run.recorded.borrow() {
                continue;
            }
            let (now, until) = (now_ms(), s.worker.until());
            match queue::renew(store, &run.id, &s.worker.replica, until) {
                Ok(Some(head)) => {
                    run.claim_head.store(head, Ordering::SeqCst);
                    run.renewed_at.store(now, Ordering::SeqCst);
                }
                Ok(None) => {
                    eprintln!("tea serve: run `{}` was taken over by another replica", run.id);
                    run.lost.store(true, Ordering::SeqCst);
                }
                Err(error) => eprintln!("tea serve: renewing the claim of run `{}`: {}", run.id, error.message),
            }
        }
    })
    .await;
}

/// The worker of a replica, for as long as its router lives: every [`queue::Worker::every`],
/// renews its runs' claims that need it and, when the queue is due ([`queue::Worker::due`]:
/// a claim it saw may have lapsed since), lists it and takes over the runs whose claims lapsed.
/// On its first tick it adopts the runs a server from before the queue left unfinished
/// ([`adopt_orphans`]).
pub(crate) async fn work(shared: Weak<Shared>) {
    let mut adopted = false;
    loop {
        let every = match shared.upgrade() {
            Some(shared) => shared.worker.every(),
            None => return,
        };
        tokio::time::sleep(every).await;
        let Some(shared) = shared.upgrade() else { return };
        if !adopted {
            adopted = true;
            adopt_orphans(&shared).await;
        }
        renew_claims(&shared).await;
        let now = now_ms();
        if !shared.worker.due(now) {
            continue;
        }
        // This replica's running runs: it renews their claims itself.
        let mine: std::collections::HashSet<String> = shared
            .runs
            .all()
            .into_iter()
            .filter(|r| matches!(r.progress().end, End::Running) && !r.lost.load(Ordering::SeqCst))
            .map(|r| r.id.clone())
            .collect();
        shared.worker.listed(now);
        let s = shared.clone();
        let lapsed = tokio::task::spawn_blocking(move || match s.records() {
            Some(store) => queue::lapsed(store, now_ms(), |id| mine.contains(id)),
            None => Ok((Vec::new(), None)),
        })
        .await;
        let (lapsed, next) = match lapsed {
            Ok(Ok(found)) => found,
            Ok(Err(error)) => {
                eprintln!("tea serve: reading the queue of runs: {}", error.message);
                shared.worker.due_by(now);
                continue;
            }
            Err(_) => {
                shared.worker.due_by(now);
                continue;
            }
        };
        if let Some(next) = next {
            shared.worker.due_by(next.saturating_add(1));
        }
        for (id, claim) in lapsed {
            // Whatever becomes of it, the queue is looked at again on the next tick.
            shared.worker.due_by(now);
            // An agent this replica does not serve, or a thread one of its runs holds: left
            // to another replica, or to a later tick.
            if shared.agent(&claim.agent).is_none() || shared.runs.running(&ThreadId::from(claim.thread.as_str())) {
                continue;
            }
            let (s, i) = (shared.clone(), id.clone());
            let taken = tokio::task::spawn_blocking(move || match s.records() {
                Some(store) => queue::take(store, &i, &s.worker.replica, now_ms(), s.worker.until()),
                None => Ok(None),
            })
            .await;
            if let Ok(Ok(Some((claim, head)))) = taken {
                take_over(&shared, id, claim, head).await;
            }
        }
    }
}

/// Adopts the runs that a server from before the queue (which wrote run records, not claims)
/// left `pending`, their threads busy with no run to finish them: each such run of an agent
/// this replica serves gets a claim held by nobody, which lapses a lease from now — then, as
/// any lapsed claim, one replica takes it and finishes the run from its thread's last
/// checkpoint through the engine's `recover` ([`take_over`]). The claim's compare-and-swap
/// makes one replica the adopter; a run that ended meanwhile (its record no longer pending)
/// has the claim deleted again.
async fn adopt_orphans(shared: &Arc<Shared>) {
    let s = shared.clone();
    let adopted = tokio::task::spawn_blocking(move || {
        let Some(store) = s.records() else { return Ok(Vec::new()) };
        let mut adopted = Vec::new();
        for (id, record) in runlog::all(store)? {
            if !record.pending() || store.head(queue::GRAPH, &ThreadId::from(id.as_str()))?.is_some() {
                continue;
            }
            let run = record.run();
            let (Some(thread), Some(agent)) = (run["thread_id"].as_str(), run["agent_id"].as_str()) else { continue };
            if s.agent(agent).is_none() {
                continue;
            }
            let claim = Claim {
                thread: thread.to_owned(),
                agent: agent.to_owned(),
                holder: String::new(),
                until: s.worker.until(),
                request: run.clone(),
                started: true,
                from: None,
                delete_after: false,
                takeovers: 0,
                created_at: now_ms(),
            };
            if !queue::adopt(store, &id, &claim)? {
                continue;
            }
            if runlog::read(store, &id)?.is_some_and(|r| r.pending()) {
                eprintln!("tea serve: run `{id}` of thread `{thread}` was left unfinished by an earlier server: it is finished from its last checkpoint once a lease has passed");
                adopted.push(claim.until);
            } else {
                queue::release(store, &id, "", Some(1))?;
            }
        }
        Ok::<_, ApiError>(adopted)
    })
    .await;
    match adopted {
        Ok(Ok(adopted)) => {
            for until in adopted {
                shared.worker.due_by(until.saturating_add(1));
            }
        }
        Ok(Err(error)) => eprintln!("tea serve: looking for runs left unfinished: {}", error.message),
        Err(_) => {}
    }
}

/// Finishes run `id`, whose claim this replica just took from one whose lease lapsed: from
/// its request when it had not changed its thread yet (it never began; the thread does not
/// exist yet; or the answer it carries still waits, its thread paused where it began), else by
/// the engine's `recover` (no recorded node runs again). Its events go on after those stored.
async fn take_over(shared: &Arc<Shared>, id: String, claim: Claim, head: u64) {
    let s = shared.clone();
    let i = id.clone();
    let thread = ThreadId::from(claim.thread.as_str());
    let t = thread.clone();
    let read = tokio::task::spawn_blocking(move || {
        let store = s.records().ok_or_else(|| ApiError::internal("no store"))?;
        let record = runlog::read(store, &i)?;
        let base = journal::stored(store, &i)?;
        let located = locate_now(&s, &t)?;
        Ok::<_, ApiError>((record, base, located))
    })
    .await;
    let (record, base, located) = match read {
        Ok(Ok(found)) => found,
        Ok(Err(error)) => {
            eprintln!("tea serve: taking over run `{id}`: {}", error.message);
            return give_back(shared, &id).await;
        }
        Err(_) => return give_back(shared, &id).await,
    };
    // No record: the run never began (its replica died before it wrote it). Ended: its end is
    // recorded, only its claim was left.
    let Some(record) = record.filter(RunRecord::pending) else {
        let (s, i) = (shared.clone(), id.clone());
        let _ = tokio::task::spawn_blocking(move || {
            s.records().map(|store| queue::release(store, &i, &s.worker.replica, Some(head)))
        })
        .await;
        return;
    };
    let Some(agent) = shared.agent(&claim.agent) else { return give_back(shared, &id).await };
    let mut request: RunRequest = match serde_json::from_value(claim.request.clone()) {
        Ok(request) => request,
        Err(error) => {
            eprintln!("tea serve: taking over run `{id}`: its request does not read: {error}");
            return give_back(shared, &id).await;
        }
    };
    let settings = match Settings::of(&request) {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("tea serve: taking over run `{id}`: {}", error.message);
            return give_back(shared, &id).await;
        }
    };
    let snapshot = located.as_ref().and_then(|l| l.snapshot.as_ref());
    let answer_waits =
        request.command.is_some() && snapshot.is_some_and(|s| s.paused() && Some(s.checkpoint) == claim.from);
    let again = snapshot.is_none() || !claim.started || answer_waits;
    let echo = record.run().as_object().cloned().unwrap_or_default();
    let run =
        entry(shared, id.clone(), thread.clone(), claim.agent.clone(), claim.created_at, echo, settings, true, base);
    let held_here = {
        let mut busy = lock(&shared.runs.busy);
        let held = busy.contains_key(&thread);
        if !held {
            busy.insert(thread.clone(), Holder { run: id.clone(), queue: VecDeque::new() });
        }
        held
    };
    if held_here {
        return give_back(shared, &id).await;
    }
    run.claim_head.store(head, Ordering::SeqCst);
    lock(&shared.runs.runs).insert(id.clone(), run.clone());
    run.recorded.send_replace(true);
    tokio::spawn(journal_events(shared.clone(), run.clone()));
    eprintln!("tea serve: taking over run `{id}` of thread `{thread}` (its replica's lease lapsed)");
    if !again {
        return begin(shared, agent, run, Plan::Recover, claim.delete_after);
    }
    if snapshot.is_none() {
        request.if_not_exists = Some("create".into());
    }
    match prepare_held(shared, thread.as_str().to_owned(), request).await {
        Ok(prepared) => {
            let from = prepared.from;
            let (agent, plan, _) = prepared.parts();
            noted_started(shared, &run, from).await;
            begin(shared, agent, run, plan, claim.delete_after);
        }
        // Another run holds the thread (a queued run's turn has not come): later.
        Err(error) if error.code == "thread_busy" => put_back(shared, &run).await,
        Err(error) => end_unstarted_kept(shared, &run, error),
    }
}

/// Gives a claim this replica took back to the queue, for a later tick.
async fn give_back(shared: &Arc<Shared>, id: &str) {
    let (s, i) = (shared.clone(), id.to_owned());
    let until = now_ms() + u64::try_from(shared.worker.every().as_millis()).unwrap_or(1000);
    let _ = tokio::task::spawn_blocking(move || match s.records() {
        Some(store) => queue::put_back(store, &i, &s.worker.replica, until),
        None => Ok(()),
    })
    .await;
    shared.worker.due_by(until.saturating_add(1));
}

/// Ends a taken-over run that its request no longer fits (the thread moved on meanwhile):
/// its record says why.
fn end_unstarted_kept(shared: &Arc<Shared>, run: &Arc<RunEntry>, error: ApiError) {
    {
        let mut progress = run.progress();
        progress.updated_at = now_ms();
        run.emit(&mut progress, "error", error.body());
        progress.end = End::Failed(error);
        run.emit(&mut progress, "end", json!({ "run_id": run.id, "status": "error" }));
    }
    release(shared, run);
    let (shared, run) = (shared.clone(), run.clone());
    tokio::spawn(async move {
        record_end(&shared, &run, true).await;
        run.finished.send_replace(true);
    });
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
