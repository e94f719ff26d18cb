//! Graphs inside graphs: subgraph nodes (`subgraph research = Researcher;`).
//!
//! A subgraph node runs a whole child graph through the same engine: an [`App`] of the child on
//! the parent's store and options ([`Host`], carried by the parent's `Ctx`). The child's
//! checkpoints are a thread of their own in that store, under the child graph's name, with an
//! id derived from where the parent stands — `{parent thread}/{node}@{step}`, with `@{head}`
//! inside a parallel branch — so that a recover of the parent, which runs the node again at the
//! same step, finds the child where it stopped instead of starting it again.
//!
//! When the child pauses, the node pauses the parent through its `Hitl` on the child's pauses,
//! listed under ids that name the path (`research/ask#0`), and keeps a *memo* (the child's
//! thread and state) among its answers. A resume of the parent hands the node a *reply* (the
//! answers meant for the child, by the child's own ids); the node then resumes the child's
//! thread with them, so the child continues where it paused and its completed nodes do not run
//! again.

use crate::app::{App, Recovery};
use crate::checkpoint::{Checkpoint, Identity, Lease, Position};
use crate::error::{BoxError, Error};
use crate::event::Event;
use crate::exec::{decode_for, Progress, Run, Stream};
use crate::graph::{Graph, SyncGraph};
use crate::hitl::Hitl;
use crate::name::{NodeName, ThreadId};
use crate::node::{Ctx, NodeStep};
use crate::node::{Goto, NodeId};
use crate::outcome::SubgraphSnapshot;
use crate::outcome::{Durability, Outcome};
use crate::resume::Interrupt;
use crate::state::{GraphState, Reducer};
use crate::store::{Append, CheckpointId, Checkpointer};
use crate::trace::traced;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// What a run lends its subgraph nodes: its store and its app's options, and its hold on its
/// thread, which the child runs of its subgraph nodes keep alive.
///
/// One per run with a store (made by `App::persist`, reached by nodes through `Ctx::host`). The
/// run writes its checkpoints through [`Held`]; while a subgraph node runs, the run writes
/// nothing, so its lease would expire after `lease` however short each node of the child is.
/// The child's run (whose app carries this host as its `parent`) therefore renews it whenever
/// it writes its own lease and half of this one is gone ([`keep_alive`](Host::keep_alive)): it
/// writes this run's last checkpoint again with a new expiry, by compare-and-swap on the head
/// this run last saw, and updates [`Held`] so that this run's next write follows on from it.
pub(crate) struct Host {
    pub(crate) store: Arc<dyn Checkpointer>,
    pub(crate) durability: Durability,
    pub(crate) lease: Duration,
    pub(crate) limit: usize,
    pub(crate) max_branches: usize,
    /// The run's thread.
    pub(crate) thread: ThreadId,
    /// The identity of the run's graph, which its checkpoints carry.
    graph: String,
    graph_fingerprint: u64,
    schema_fingerprint: u64,
    /// Writes a checkpoint of the run's graph again with another lease
    /// ([`checkpoint::relet`](crate::checkpoint::relet) for the graph's state).
    relet: Relet,
    /// The run's lease owner, and its lease's length in milliseconds.
    pub(crate) owner: u64,
    pub(crate) lease_ms: u64,
    /// Until when (milliseconds since the Unix epoch) the run's last checkpoint holds its lease;
    /// 0 when it holds none (not claimed yet, paused, finished, abandoned). Written only with
    /// `held` locked; read without it.
    until: AtomicU64,
    /// The thread as the run last wrote it; locked for a renewal's whole compare-and-swap.
    held: Mutex<Held>,
    /// The host of the run whose subgraph node runs this one (this is a child's run): kept
    /// alive by this run's progress, and its own parent by it.
    pub(crate) parent: Option<Arc<Host>>,
}

/// Writes checkpoint `id` of a thread (its bytes) again with another lease.
pub(crate) type Relet = fn(&[u8], &Identity<'_>, &ThreadId, CheckpointId, Option<Lease>) -> Result<Vec<u8>, Error>;

/// A run's thread as the run last wrote it: what renewing its lease from elsewhere needs.
#[derive(Default)]
pub(crate) struct Held {
    /// The thread's head as the run last saw it.
    pub(crate) head: Option<CheckpointId>,
    /// The bytes of the last checkpoint the run wrote (or a child wrote for it).
    pub(crate) last: Option<Vec<u8>>,
    /// A renewal lost its compare-and-swap: another run took the thread over.
    lost: bool,
}

/// What a run's [`Host`] is made of, besides its app's options.
pub(crate) struct Tenancy {
    pub(crate) thread: ThreadId,
    pub(crate) graph: String,
    pub(crate) graph_fingerprint: u64,
    pub(crate) schema_fingerprint: u64,
    pub(crate) relet: Relet,
    pub(crate) owner: u64,
    pub(crate) lease_ms: u64,
    pub(crate) head: Option<CheckpointId>,
    pub(crate) parent: Option<Arc<Host>>,
}

impl Host {
    /// The host of a run on `store` with these options, holding `tenancy.thread` at
    /// `tenancy.head`.
    pub(crate) fn new(
        store: Arc<dyn Checkpointer>,
        durability: Durability,
        lease: Duration,
        limit: usize,
        max_branches: usize,
        tenancy: Tenancy,
    ) -> Self {
        let Tenancy { thread, graph, graph_fingerprint, schema_fingerprint, relet, owner, lease_ms, head, parent } =
            tenancy;
        Host {
            store,
            durability,
            lease,
            limit,
            max_branches,
            thread,
            graph,
            graph_fingerprint,
            schema_fingerprint,
            relet,
            owner,
            lease_ms,
            until: AtomicU64::new(0),
            held: Mutex::new(Held { head, last: None, lost: false }),
            parent,
        }
    }

    /// The thread as the run last wrote it. Never held across an await.
    pub(crate) fn held(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The thread's head as the run last saw it.
    pub(crate) fn head(&self) -> Option<CheckpointId> {
        self.held().head
    }

    /// Until when the run's last checkpoint holds its lease (0: it holds none).
    pub(crate) fn until(&self) -> u64 {
        self.until.load(Ordering::Acquire)
    }

    /// Records that the run wrote checkpoint `id` (`bytes`), holding its lease until `until`
    /// (0: released).
    pub(crate) fn wrote(&self, held: &mut Held, id: CheckpointId, bytes: Vec<u8>, until: u64) {
        held.head = Some(id);
        held.last = Some(bytes);
        self.until.store(until, Ordering::Release);
    }

    /// Records that the run let its lease go (it paused, finished, or was abandoned): its
    /// children no longer renew it.
    pub(crate) fn released(&self) {
        let _held = self.held();
        self.until.store(0, Ordering::Release);
    }

    /// Whether the run holds a lease of which half is gone at `now`.
    fn half_gone(&self, now: u64) -> bool {
        let until = self.until();
        until != 0 && until <= now.saturating_add(self.lease_ms / 2)
    }

    /// Whether this run's lease, or an ancestor's, is half gone: a child's run then renews
    /// them before its next node ([`keep_alive`](Self::keep_alive)).
    pub(crate) fn due(&self) -> bool {
        let now = crate::exec::now_ms();
        let mut at = Some(self);
        while let Some(host) = at {
            if host.half_gone(now) {
                return true;
            }
            at = host.parent.as_deref();
        }
        false
    }

    /// Renews the lease of this run and of each of its ancestors where half of it is gone.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when one of them was taken over (its renewal lost the
    /// compare-and-swap on its head), and the store's errors.
    pub(crate) fn keep_alive(&self) -> Result<(), Error> {
        let mut at = Some(self);
        while let Some(host) = at {
            host.renew()?;
            at = host.parent.as_deref();
        }
        Ok(())
    }

    /// Writes the run's last checkpoint again with a renewed lease, if half of it is gone.
    fn renew(&self) -> Result<(), Error> {
        if !self.half_gone(crate::exec::now_ms()) {
            return Ok(());
        }
        let mut held = self.held();
        let now = crate::exec::now_ms();
        if held.lost {
            return Err(Error::LeaseLost { thread: self.thread.clone() });
        }
        // Checked again under the lock: a sibling branch's child may have renewed it meanwhile,
        // or the run released it.
        if !self.half_gone(now) {
            return Ok(());
        }
        let (Some(head), Some(last)) = (held.head, held.last.as_deref()) else { return Ok(()) };
        let identity = Identity {
            graph: &self.graph,
            graph_fingerprint: self.graph_fingerprint,
            schema_fingerprint: self.schema_fingerprint,
        };
        let until = now.saturating_add(self.lease_ms);
        let bytes = (self.relet)(last, &identity, &self.thread, head, Some(Lease { owner: self.owner, until }))?;
        let Some(id) = head.checked_add(1) else {
            return Err(Error::store(format!("thread `{}` has no checkpoint id after {head}", self.thread)));
        };
        let appended = crate::trace::store_call("append", &self.graph, Some(&self.thread), || {
            self.store.append(&self.graph, &self.thread, Some(head), id, &bytes, false)
        })?;
        match appended {
            Append::Written => {
                traced! {
                    tracing::debug!(target: "tea", thread = %self.thread, checkpoint = id, "lease renewed by a child");
                }
                self.wrote(&mut held, id, bytes, until);
                Ok(())
            }
            Append::Conflict { .. } => {
                held.lost = true;
                Err(Error::LeaseLost { thread: self.thread.clone() })
            }
        }
    }
}

/// A node of a child graph routing its parent (`Command::parent`): the parent's node type (to
/// check it is the parent running the child), the target node's name and the parent's update,
/// by name and as JSON so that the child's final checkpoint records it (a recover of the parent
/// finds the child finished and routes the same way).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct ParentJump {
    graph: String,
    pub(crate) target: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    update: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

impl ParentJump {
    pub(crate) fn new<P: NodeId>(target: P, update: Option<<P::State as GraphState>::Update>) -> Self {
        let (update, error) = match update.map(serde_json::to_value) {
            None => (None, None),
            Some(Ok(value)) => (Some(value), None),
            Some(Err(e)) => (None, Some(format!("the parent update does not serialize: {e}"))),
        };
        let name = target.node_str().map_or_else(|| format!("{target:?}"), str::to_owned);
        ParentJump { graph: std::any::type_name::<P>().to_owned(), target: name, update, error }
    }

    /// The step of a subgraph node (of a parent whose nodes are `N`) whose child made this jump.
    fn step<S: GraphState, N: NodeId>(self, child: &str) -> Result<NodeStep<S, N>, BoxError> {
        if self.graph != std::any::type_name::<N>() {
            return Err(format!(
                "child graph `{child}` routes to node `{}` of `{}` with `Command::parent`, but runs inside `{}`",
                self.target,
                self.graph,
                std::any::type_name::<N>()
            )
            .into());
        }
        let Some(target) = N::from_node_str(&self.target) else {
            return Err(format!(
                "child graph `{child}` routes to node `{}`, which its parent does not have",
                self.target
            )
            .into());
        };
        if let Some(error) = self.error {
            return Err(error.into());
        }
        let update = match self.update {
            None => None,
            Some(value) => {
                Some(serde_json::from_value(value).map_err(|e| format!("the parent update does not read back: {e}"))?)
            }
        };
        Ok(NodeStep::new(update, Some(Goto::Node(target))))
    }
}

/// The key of the memo a paused subgraph node keeps among its answers.
const MEMO: &str = "subgraph";
/// The key of the reply a resume hands a paused subgraph node.
const REPLY: &str = "subgraph_answers";

/// The reply to a subgraph node whose child paused on `pauses` (as the parent lists them): the
/// answers meant for the child, by the child's own ids. `None` when nothing of the child
/// continues (every pause waits for an answer and none was given). The pauses that continue are
/// added to `continuing`.
pub(crate) fn reply(
    pauses: &[Interrupt],
    answer_of: &dyn Fn(&Interrupt) -> Option<Value>,
    continuing: &mut Vec<Interrupt>,
) -> Option<Value> {
    let mut answers = Vec::new();
    let mut any = false;
    for pause in pauses {
        let Some(child_id) = &pause.child else { continue };
        if !pause.needs_answer() {
            any = true;
            continuing.push(pause.clone());
        } else if let Some(value) = answer_of(pause) {
            answers.push(json!([child_id, value]));
            any = true;
            continuing.push(pause.clone());
        }
    }
    any.then(|| json!({ REPLY: answers }))
}

/// The child's thread of a subgraph node: `{parent thread}/{node}@{step}`, and `@{head}` inside
/// a parallel branch. Deterministic: the node run again at the same place finds it.
fn child_thread<S>(ctx: &Ctx<S>, parent: &ThreadId) -> ThreadId {
    match &ctx.branch {
        Some(head) => ThreadId::from(format!("{parent}/{}@{}@{head}", ctx.node, ctx.step)),
        None => ThreadId::from(format!("{parent}/{}@{}", ctx.node, ctx.step)),
    }
}

/// Runs a subgraph node whose child graph has its own state: `input` maps the parent's state to
/// the child's input, `output` the child's final state to the parent's update. Generated code
/// calls it for `subgraph node = Child(input => output);`.
#[doc(hidden)]
pub fn run_subgraph_mapped<S, N, C, I, O>(
    child: C,
    input: &I,
    output: &O,
    state: &S,
    ctx: &Ctx<S>,
    hitl: &mut Hitl,
) -> Result<NodeStep<S, N>, BoxError>
where
    S: GraphState,
    N: NodeId,
    C: Graph + SyncGraph,
    I: Fn(&S) -> C::State,
    O: Fn(&S, C::State) -> S::Update,
{
    let done = run_child(child, state, ctx, hitl, &|s| input(s), &|_| None, false).map_err(pass_through)?;
    if let Some(jump) = done.jump {
        return jump.step(&done.graph);
    }
    Ok(NodeStep::new(Some(output(state, done.last)), None))
}

/// Checks a subgraph's input mapping where the graph names it: `fn(&State) -> ChildState`.
#[doc(hidden)]
pub fn subgraph_input<S, C: Graph, F: Fn(&S) -> C::State>(f: &F) -> &F {
    f
}

/// Checks a subgraph's output mapping where the graph names it:
/// `fn(&State, ChildState) -> StateUpdate`.
#[doc(hidden)]
pub fn subgraph_output<S: GraphState, C: Graph, F: Fn(&S, C::State) -> S::Update>(f: &F) -> &F {
    f
}

/// Runs a subgraph node whose child graph has the parent's state: the child starts on a copy
/// of the parent's state, and what it changed is the node's update (see [`delta`]). Generated
/// code calls it for `subgraph node = Child;`.
#[doc(hidden)]
pub fn run_subgraph_shared<S, N, C>(
    child: C,
    state: &S,
    ctx: &Ctx<S>,
    hitl: &mut Hitl,
) -> Result<NodeStep<S, N>, BoxError>
where
    S: GraphState,
    N: NodeId,
    C: Graph<State = S> + SyncGraph,
{
    let done =
        run_child(child, state, ctx, hitl, &|s: &S| s.clone(), &|s: &S| Some(s.clone()), true).map_err(pass_through)?;
    if let Some(jump) = done.jump {
        return jump.step(&done.graph);
    }
    let first = done.first.as_ref().unwrap_or(state);
    Ok(NodeStep::new(Some(delta(first, &done.last)?), None))
}

/// A child run that finished: its final state, when asked for its input, and where it routes
/// its parent if it ended with `Command::parent`.
struct Finished<T> {
    first: Option<T>,
    last: T,
    jump: Option<ParentJump>,
    graph: String,
}

/// Where a streaming run's subgraph nodes put their child's steps (held by `Ctx::child_steps`,
/// drained by the run after the node, ahead of the node's own step).
pub(crate) type ChildSteps<S> = Mutex<Vec<Event<S>>>;

/// The sink for child steps of a streaming run (`None` when the run does not stream).
pub(crate) fn child_steps<S: GraphState>(ctx: &Ctx<S>) -> Option<&ChildSteps<S>> {
    ctx.child_steps.as_deref().and_then(|sink| sink.downcast_ref::<ChildSteps<S>>())
}

/// Drives a child's stream to its end or pause, handing `forward` each step.
fn drain<C: Graph>(
    stream: &mut Stream<'_, C>,
    forward: &mut dyn FnMut(Event<C::State>),
) -> Result<Outcome<C::State>, BoxError> {
    for event in stream.by_ref() {
        match event? {
            Event::Done(last) => return Ok(Outcome::Done(last)),
            Event::Interrupted { state, resume } => return Ok(Outcome::Interrupted { state, resume }),
            step => forward(step),
        }
    }
    Err("the child graph's run ended without finishing or pausing".into())
}

/// An error of a subgraph node's child that the parent's run reports as its own rather than as
/// the node's failure: the child's thread is owned by a live run ([`Error::ThreadBusy`]), or an
/// ancestor's thread was taken over ([`Error::LeaseLost`]). `exec::produced` unwraps it.
#[derive(Debug)]
pub(crate) struct Passthrough(pub(crate) Error);

impl std::fmt::Display for Passthrough {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Passthrough {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// Marks the child's errors that the parent's run reports as its own ([`Passthrough`]).
fn pass_through(error: BoxError) -> BoxError {
    match error.downcast::<Error>() {
        Ok(error) if matches!(*error, Error::ThreadBusy { .. } | Error::LeaseLost { .. }) => {
            Box::new(Passthrough(*error))
        }
        Ok(error) => error,
        Err(other) => other,
    }
}

/// Runs, resumes or recovers the child of a subgraph node; a pause of the child pauses the node
/// (an `Err` the engine reads as a pause through `hitl`). While the parent streams, the child
/// streams too and its steps go to the parent's stream, named by their path (`review/judge`),
/// with the child's state where `as_parent` makes it the parent's (a child with the parent's
/// state) and the parent's state before the node otherwise. Callers hand its errors through
/// [`pass_through`], so that a busy child or a lost lease is the parent run's own error.
fn run_child<S, C>(
    child: C,
    state: &S,
    ctx: &Ctx<S>,
    hitl: &mut Hitl,
    input: &dyn Fn(&S) -> C::State,
    as_parent: &dyn Fn(&C::State) -> Option<S>,
    want_first: bool,
) -> Result<Finished<C::State>, BoxError>
where
    S: GraphState,
    C: Graph + SyncGraph,
{
    let sink = child_steps(ctx);
    let mut forward = |event: Event<C::State>| {
        let (Some(sink), Event::Step { node, branch, state: child_state, duration }) = (sink, event) else { return };
        let node = NodeName::from(format!("{}/{node}", ctx.node));
        let branch = branch.map(|head| NodeName::from(format!("{}/{head}", ctx.node)));
        let state = as_parent(&child_state).unwrap_or_else(|| state.clone());
        sink.lock().unwrap_or_else(PoisonError::into_inner).push(Event::Step { node, branch, state, duration });
    };
    let (Some(host), Some(parent)) = (ctx.host.as_ref(), ctx.thread.as_ref()) else {
        // No store: the child runs to its end (a child that can pause needs one, like any graph).
        let graph = child.name().to_owned();
        let first = input(state);
        let kept = want_first.then(|| first.clone());
        let mut run = Run::new(&child, first, crate::app::DEFAULT_RECURSION_LIMIT, None, sink.is_some());
        run.nested = true;
        let paused = || Error::store(format!("graph `{graph}` paused without a checkpointer"));
        if sink.is_some() {
            let mut stream = Stream::new(Ok(run));
            let last = match drain(&mut stream, &mut forward)? {
                Outcome::Done(last) => last,
                Outcome::Interrupted { .. } => return Err(paused().into()),
            };
            let jump = stream.jump.take();
            return Ok(Finished { first: kept, last, jump, graph });
        }
        loop {
            match run.advance()? {
                Progress::Stepped | Progress::Forked => {}
                Progress::Done => break,
                Progress::Paused(_) => return Err(paused().into()),
            }
        }
        let jump = run.jump.take();
        return Ok(Finished { first: kept, last: run.state, jump, graph });
    };
    let given = hitl.given();
    let memo = given.first().and_then(|v| v.get(MEMO));
    let reply = given.last().and_then(|v| v.get(REPLY));
    let thread = match memo.and_then(|m| m.get("thread")).and_then(Value::as_str) {
        Some(thread) => ThreadId::from(thread.to_owned()),
        None => child_thread(ctx, parent),
    };
    let app = App::for_child(child, host.store.clone(), Some(host));
    let mut first = None;
    let outcome = if app.state(&thread)?.is_none() {
        let start = input(state);
        if want_first {
            first = Some(start.clone());
        }
        if sink.is_some() {
            drain(&mut app.stream_on(thread.clone(), start), &mut forward)?
        } else {
            app.invoke_on(thread.clone(), start)?
        }
    } else {
        // Paused (its pause comes back with a fresh token), finished (its final state), or
        // stopped part-way by a failure or a crash (it continues where it stopped).
        let recovered = if sink.is_some() {
            let (head, bytes) = app.head(&thread)?;
            match app.recovery(&thread, head, bytes)? {
                Recovery::Over(outcome) => outcome,
                Recovery::Run(mut run) => {
                    run.record_steps();
                    drain(&mut Stream::new(Ok(run)), &mut forward)?
                }
            }
        } else {
            app.recover(&thread)?
        };
        match (recovered, reply) {
            (Outcome::Interrupted { resume, .. }, Some(reply)) => {
                let mut resume = resume;
                for pair in reply.as_array().into_iter().flatten() {
                    if let (Some(id), Some(value)) = (pair.get(0).and_then(Value::as_str), pair.get(1)) {
                        resume = resume.answer_to(id, value);
                    }
                }
                if sink.is_some() {
                    drain(&mut app.stream_resume(resume), &mut forward)?
                } else {
                    app.resume(resume)?
                }
            }
            (outcome, _) => outcome,
        }
    };
    match outcome {
        Outcome::Done(last) => {
            if want_first && first.is_none() {
                first = Some(first_state(&app, &thread)?);
            }
            // Did the child end by routing its parent? Its final checkpoint says.
            let graph = app.graph().name().to_owned();
            let jump = match app.checkpointer().head(&graph, &thread)? {
                Some((id, bytes)) => decode_for(app.graph(), &bytes, &thread, id)?.parent,
                None => None,
            };
            Ok(Finished { first, last, jump, graph })
        }
        Outcome::Interrupted { state: child_state, resume } => {
            let pauses: Vec<Interrupt> = resume
                .interrupts()
                .iter()
                .map(|pause| {
                    let id = match &ctx.branch {
                        Some(head) => format!("{}/{}@{head}", ctx.node, pause.id()),
                        None => format!("{}/{}", ctx.node, pause.id()),
                    };
                    pause.nested(id, ctx.node.clone())
                })
                .collect();
            let child_state = serde_json::to_value(&child_state).unwrap_or(Value::Null);
            let memo =
                json!({ MEMO: { "graph": app.graph().name(), "thread": thread.as_str(), "state": child_state } });
            Err(Box::new(hitl.pause_child(memo, pauses)))
        }
    }
}

/// The subgraph nodes a checkpoint waits on inside their child graph, from the memos they keep
/// among their answers (on the main line and in each stopped branch).
pub(crate) fn paused_children<S: GraphState>(ckpt: &Checkpoint<S>) -> Vec<SubgraphSnapshot> {
    let mut found = Vec::new();
    let mut read = |answers: &[Value], pending: Option<&Interrupt>, branch: Option<&NodeName>| {
        let (Some(memo), Some(pause)) = (answers.first().and_then(|v| v.get(MEMO)), pending) else { return };
        if pause.child.is_none() {
            return;
        }
        let text = |key: &str| memo.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
        found.push(SubgraphSnapshot {
            node: pause.node().clone(),
            branch: branch.cloned(),
            graph: text("graph"),
            thread: ThreadId::from(text("thread")),
            state: memo.get("state").cloned().unwrap_or(Value::Null),
        });
    };
    match &ckpt.at {
        Position::Fork { branches, .. } => {
            for branch in branches {
                read(&branch.answers, branch.pending.as_ref(), Some(&branch.head));
            }
        }
        _ => read(&ckpt.answers, ckpt.pending.first(), None),
    }
    found
}

/// The state a child thread started with (its first checkpoint).
fn first_state<C: Graph>(app: &App<C, Arc<dyn Checkpointer>>, thread: &ThreadId) -> Result<C::State, Error> {
    let history = app.history(thread)?;
    history
        .into_iter()
        .last()
        .map(|snapshot| snapshot.state)
        .ok_or_else(|| Error::CheckpointNotFound { thread: thread.clone() })
}

/// What a child graph with its parent's state changed, as an update of that state: each field
/// whose value differs is written so that applying the update to `before` gives `after`. A field
/// with a reducer is written through it where that is exact — an `append` field by the items
/// added, a `sum` field by the difference, a `max`/`min`/`union`/`merge` field by its new value
/// when that only grew — so that sibling parallel branches still merge with it; otherwise the
/// field is overwritten.
pub(crate) fn delta<S: GraphState>(before: &S, after: &S) -> Result<S::Update, BoxError> {
    let encode = |state: &S| match serde_json::to_value(state) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err("a subgraph over its parent's state needs a state that serializes as a map of its fields"),
        Err(_) => Err("the state does not serialize"),
    };
    let (before, after) = (encode(before)?, encode(after)?);
    let mut update = serde_json::Map::new();
    for field in S::FIELDS {
        let (Some(old), Some(new)) = (before.get(field.name), after.get(field.name)) else {
            return Err(format!(
                "field `{}` is not serialized under its name, so a subgraph over this state cannot tell what it changed",
                field.name
            )
            .into());
        };
        if old == new {
            continue;
        }
        let written = match field.reducer {
            Reducer::Replace => new.clone(),
            reducer => match reduced(reducer, old, new) {
                Some(value) => json!({ "reduce": value }),
                None => json!({ "overwrite": new }),
            },
        };
        update.insert(field.name.to_owned(), written);
    }
    serde_json::from_value(Value::Object(update))
        .map_err(|e| format!("the child's changes do not form an update: {e}").into())
}

/// The value that, merged into `old` by `reducer`, gives `new`; `None` when there is none that
/// is sure to (the field is then overwritten).
fn reduced(reducer: Reducer, old: &Value, new: &Value) -> Option<Value> {
    match (reducer, old, new) {
        (Reducer::Append, Value::Array(old), Value::Array(new)) if new.starts_with(old) => {
            Some(Value::Array(new[old.len()..].to_vec()))
        }
        (Reducer::Append, Value::String(old), Value::String(new)) => new.strip_prefix(old.as_str()).map(|s| json!(s)),
        (Reducer::Sum, Value::Number(old), Value::Number(new)) => {
            if let (Some(o), Some(n)) = (old.as_i64(), new.as_i64()) {
                n.checked_sub(o).map(|d| json!(d))
            } else if let (Some(o), Some(n)) = (old.as_u64(), new.as_u64()) {
                n.checked_sub(o).map(|d| json!(d))
            } else {
                let (o, n) = (old.as_f64()?, new.as_f64()?);
                let d = n - o;
                (o + d == n).then(|| json!(d))
            }
        }
        (Reducer::Max, Value::Number(old), Value::Number(new)) => (new.as_f64()? >= old.as_f64()?).then(|| json!(new)),
        (Reducer::Min, Value::Number(old), Value::Number(new)) => (new.as_f64()? <= old.as_f64()?).then(|| json!(new)),
        (Reducer::Union, Value::Array(old), Value::Array(new)) => {
            old.iter().all(|item| new.contains(item)).then(|| Value::Array(new.clone()))
        }
        (Reducer::Merge, Value::Object(old), Value::Object(new)) => {
            old.keys().all(|key| new.contains_key(key)).then(|| Value::Object(new.clone()))
        }
        _ => None,
    }
}
