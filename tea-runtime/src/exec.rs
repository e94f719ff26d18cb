//! The executor: runs a [`Graph`] one node at a time.
//!
//! [`Run::advance`] is the whole engine for the main line: run the node (panics caught), apply
//! its update through the reducers, route. A fan-out is one more advance that runs the branches
//! (see `parallel`) and merges them. `invoke` loops over `advance`; `stream` turns each advance
//! into [`Event`]s. Nothing here allocates per step on the main line without a store: node names
//! are `Clone` without allocating and the state is updated in place.
//!
//! With a store (`Persist`), a run writes checkpoints by compare-and-swap on the thread's head:
//! one when it starts (which claims a new thread, or claims an existing one on resume or
//! recover), one per step unless `Durability::OnPause` (flushed with `EveryStep`), one durable
//! checkpoint when it pauses (before the token exists) and one durable checkpoint when it
//! finishes (before `invoke`/`resume`/`recover` returns). While it runs, its checkpoints carry a
//! *lease* (an owner and an expiry, renewed as it advances), so `recover` can tell a live run
//! from a crashed one. A resumed run that fails writes its pause back, so the same token works
//! again; any other run that fails writes its last checkpoint again without its lease, so
//! `recover` can continue it at once.

use crate::checkpoint::{self, BranchAt, BranchProgress, Checkpoint, Identity, Lease, Position, Target};
use crate::drive::{now_or_never, Driver, ThreadDriver};
use crate::error::Error;
use crate::event::Event;
use crate::graph::Graph;
use crate::hitl::{Asked, Hitl};
use crate::name::{NodeName, ThreadId};
use crate::node::{Ctx, Goto, More};
use crate::outcome::Durability;
use crate::parallel::{self, Env, ForkOutcome};
use crate::resume::{graph_id, Interrupt, PauseKind, Resume, SigningKey, Token};
use crate::state::GraphState;
use crate::store::{Append, CheckpointId, Checkpointer};
#[cfg(feature = "tracing")]
use crate::trace;
use crate::trace::traced;
use std::any::Any;
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::pin;
use std::time::{Duration, Instant};

pub(crate) const START: NodeName = NodeName::from_static("start");
pub(crate) const END: NodeName = NodeName::from_static("end");

/// Where a run stands.
#[derive(Clone, Copy, Debug)]
enum Cursor<N> {
    /// Nothing has run; the start edges are still to be evaluated.
    Start,
    /// `N` runs next.
    At(N),
    /// `N` ran; routing from it (with a router's choice) comes next.
    After(N, Option<Goto<N>>),
    /// The fan-out after `N` runs next.
    Fork(N),
    /// The run reached `end`.
    Done,
}

/// What one call to [`Run::advance`] did.
pub(crate) enum Progress<S: GraphState> {
    /// A node ran on the main line.
    Stepped,
    /// The branches of a fan-out ran and were merged.
    Forked,
    /// The run paused; its checkpoint is durable. (Boxed: a pause is rare and a token is big,
    /// and every step returns a `Progress`.)
    Paused(Box<Resume<S>>),
    /// The run reached `end`.
    Done,
}

/// What follows a node.
pub(crate) enum After<N> {
    Goto(Goto<N>),
    Fork(N),
}

/// What the run does next, as [`Run::next`] decides it.
enum Next<N> {
    /// Runs this node (its step is counted and its name is in the context).
    Run(N),
    /// A step that runs no node ([`Run::settle`]).
    Settle(Settle<N>),
}

/// A step that runs no node.
enum Settle<N> {
    /// The run reached `end`.
    Done,
    /// The fan-out after this node runs.
    Fork(N),
    /// The run pauses at a breakpoint.
    Pause(Vec<Interrupt>),
}

/// What is left of a step once the node's result is applied ([`Run::finish`]).
enum Then {
    /// Nothing: the next advance goes on (an `interrupt_after` pauses there).
    Stepped,
    /// The step is checkpointed (when the run has a store).
    Save,
    /// The run pauses on these.
    Pause(Vec<Interrupt>),
}

/// A checkpoint encoded for the store: its bytes, the head it replaces, and its id.
struct Encoded {
    bytes: Vec<u8>,
    head: Option<CheckpointId>,
    id: CheckpointId,
}

/// The `checkpoint` span of a write of `ckpt`, and when the write started.
#[cfg(feature = "tracing")]
fn checkpoint_span<S: GraphState>(ckpt: &Checkpoint<S>, durable: bool) -> (tracing::Span, Instant) {
    let span = tracing::debug_span!(
        target: "tea",
        "checkpoint",
        step = ckpt.step,
        pause = ckpt.pause.is_some(),
        durable,
        bytes = tracing::field::Empty,
        duration_us = tracing::field::Empty,
    );
    (span, Instant::now())
}

/// What running a node did, once its update is applied.
pub(crate) enum Executed<S: GraphState, N> {
    /// The node ran; a router's choice, if any.
    Ran(Option<Goto<N>>),
    /// The node ran and sent nodes, or routes the parent graph of this one.
    More(Box<More<S, N>>),
    /// The node paused through its `Hitl` (its update was discarded but for what it keeps).
    Paused(Box<Paused<S>>),
}

/// What running a node produced, before anything is applied. Small, because every step moves
/// one: what few steps do (send, route a parent, pause) is boxed.
pub(crate) enum Produced<S: GraphState, N> {
    /// The node ran: its update, a router's choice, and what it sent or where it routes its
    /// parent graph.
    Ran { update: Option<S::Update>, goto: Option<Goto<N>>, more: Option<Box<More<S, N>>> },
    /// The node paused through its `Hitl`.
    Paused(Box<Paused<S>>),
}

/// A node's pause through its `Hitl`.
pub(crate) struct Paused<S: GraphState> {
    /// What the node asked with.
    pub(crate) payload: serde_json::Value,
    /// The answers it was given, to give it again on resume.
    pub(crate) answers: Vec<serde_json::Value>,
    /// The update it keeps anyway ([`Graph::keeps_update_on_pause`]).
    pub(crate) kept: Option<S::Update>,
    /// The pauses of a subgraph node's child, as the parent lists them (empty for a node's own
    /// pause).
    pub(crate) nested: Vec<Interrupt>,
}

/// Runs `node` on `state` with the answers to its earlier pauses. Panics are caught.
pub(crate) fn produce<G: Graph>(
    graph: &G,
    node: G::Node,
    state: &G::State,
    ctx: &Ctx<G::State>,
    answers: Vec<serde_json::Value>,
) -> Result<Produced<G::State, G::Node>, Error> {
    let outcome = catch_unwind(AssertUnwindSafe(|| -> Result<Produced<G::State, G::Node>, Error> {
        let mut hitl = Hitl::with_answers(answers);
        let result = graph.run(node, state, ctx, &mut hitl);
        produced(graph, node, ctx, result, hitl)
    }));
    outcome
        .unwrap_or_else(|payload| Err(Error::NodePanicked { node: ctx.node.clone(), message: panic_message(payload) }))
}

/// What a node run that returned `result` produced, given what it asked of its `hitl`: a pause,
/// a bad answer, or its update and routing.
pub(crate) fn produced<G: Graph>(
    graph: &G,
    node: G::Node,
    ctx: &Ctx<G::State>,
    result: Result<crate::node::NodeStep<G::State, G::Node>, crate::error::BoxError>,
    mut hitl: Hitl,
) -> Result<Produced<G::State, G::Node>, Error> {
    {
        match hitl.asked.take() {
            None => {}
            Some(Asked::Pause(payload)) => {
                let kept = match result {
                    Ok(step) if graph.keeps_update_on_pause(node) => step.update,
                    _ => None,
                };
                let answers = hitl.into_answers();
                return Ok(Produced::Paused(Box::new(Paused { payload, answers, kept, nested: Vec::new() })));
            }
            Some(Asked::Child(nested)) => {
                let payload = serde_json::Value::Null;
                let answers = hitl.into_answers();
                return Ok(Produced::Paused(Box::new(Paused { payload, answers, kept: None, nested })));
            }
            Some(Asked::BadAnswer { expected, reason }) => {
                return Err(Error::BadResumeValue { node: ctx.node.clone(), expected: expected.to_owned(), reason })
            }
            Some(Asked::BadPayload(reason)) => {
                return Err(Error::NodeFailed {
                    node: ctx.node.clone(),
                    source: format!("the pause's payload does not serialize: {reason}").into(),
                })
            }
        }
        let step = result.map_err(|source| match source.downcast::<crate::compose::Passthrough>() {
            // A subgraph node's child found its thread owned by a live run, or an ancestor's
            // thread taken over: the run reports that, not the node's failure.
            Ok(through) => through.0,
            Err(source) => Error::NodeFailed { node: ctx.node.clone(), source },
        })?;
        Ok(Produced::Ran { update: step.update, goto: step.goto, more: step.more })
    }
}

/// Applies what `node` produced to `state` through the reducers.
fn apply_produced<G: Graph>(
    graph: &G,
    state: &mut G::State,
    ctx: &Ctx<G::State>,
    produced: Produced<G::State, G::Node>,
) -> Result<Executed<G::State, G::Node>, Error> {
    match produced {
        Produced::Paused(mut paused) => {
            if let Some(update) = paused.kept.take() {
                apply_update(graph, state, update, &ctx.node)?;
            }
            Ok(Executed::Paused(paused))
        }
        Produced::Ran { update, goto, more } => {
            if let Some(update) = update {
                apply_update(graph, state, update, &ctx.node)?;
            }
            Ok(match more {
                None => Executed::Ran(goto),
                Some(more) => Executed::More(more),
            })
        }
    }
}

/// The pause a node asked for: its id counts the node's pauses (`ask#0`, `ask#1`, …; `@head`
/// inside a branch), and an interrupt node's timeout sets when it expires.
pub(crate) fn asked<G: Graph>(
    graph: &G,
    node: G::Node,
    payload: serde_json::Value,
    index: usize,
    branch: Option<&NodeName>,
) -> Interrupt {
    let name = graph.node_name(node);
    let id = match branch {
        Some(head) => format!("{name}#{index}@{head}"),
        None => format!("{name}#{index}"),
    };
    let mut interrupt = Interrupt::new(id, name, payload);
    interrupt.kind = PauseKind::Ask;
    interrupt.expires_at = graph.pause_timeout(node).map(|secs| now().saturating_add(secs));
    interrupt
}

/// Where the run goes after `node` (named `name`): a router's choice if it made one (checked
/// against its declaration), else its fan-out, else its edges. Guards' panics are caught.
pub(crate) fn route_from<G: Graph>(
    graph: &G,
    node: G::Node,
    goto: Option<Goto<G::Node>>,
    state: &G::State,
    name: &NodeName,
) -> Result<After<G::Node>, Error> {
    if let Some(target) = goto {
        return if graph.can_goto(node, target) {
            Ok(After::Goto(target))
        } else {
            Err(Error::NoRoute { node: name.clone(), goto: Some(goto_name(graph, target)) })
        };
    }
    if graph.fork(node).is_some() {
        return Ok(After::Fork(node));
    }
    match catch_unwind(AssertUnwindSafe(|| graph.try_route(node, state))) {
        Ok(Ok(Some(target))) => Ok(After::Goto(target)),
        Ok(Ok(None)) => Err(Error::NoRoute { node: name.clone(), goto: None }),
        Ok(Err(source)) => Err(Error::NodeFailed { node: name.clone(), source }),
        Err(payload) => Err(Error::NodePanicked { node: name.clone(), message: panic_message(payload) }),
    }
}

pub(crate) fn goto_name<G: Graph>(graph: &G, target: Goto<G::Node>) -> NodeName {
    match target {
        Goto::Node(n) => graph.node_name(n),
        Goto::End => END,
    }
}

pub(crate) fn target_of<G: Graph>(graph: &G, goto: Option<Goto<G::Node>>) -> Option<Target> {
    goto.map(|g| match g {
        Goto::Node(n) => Target::Node(graph.node_name(n)),
        Goto::End => Target::End,
    })
}

pub(crate) fn goto_of<G: Graph>(
    graph: &G,
    target: &Option<Target>,
    thread: &ThreadId,
) -> Result<Option<Goto<G::Node>>, Error> {
    match target {
        None => Ok(None),
        Some(Target::End) => Ok(Some(Goto::End)),
        Some(Target::Node(name)) => node_named(graph, name, thread).map(|n| Some(Goto::Node(n))),
    }
}

/// A node named in a checkpoint; the fingerprint check makes a miss a corrupt checkpoint.
pub(crate) fn node_named<G: Graph>(graph: &G, name: &NodeName, thread: &ThreadId) -> Result<G::Node, Error> {
    graph.node_named(name.as_str()).ok_or_else(|| Error::CorruptCheckpoint {
        thread: thread.clone(),
        checkpoint: 0,
        reason: format!("it names node `{name}`, which graph `{}` does not have", graph.name()),
    })
}

/// A future of the executor that only some steps await (a checkpoint write, a pause, a fan-out,
/// an abandon), boxed: a step's own future stays small, and the thread driver moves it once per
/// step. Every one of these allocates anyway (encoded bytes, branch lists); a store-less step
/// awaits none of them, so the main line allocates nothing.
#[cfg(feature = "tokio")]
type Boxed<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

#[cfg(feature = "tokio")]
fn boxed<'a, T>(future: impl std::future::Future<Output = T> + Send + 'a) -> Boxed<'a, T> {
    Box::pin(future)
}

/// The largest step count a checkpoint may record: far more node runs than any thread makes,
/// and far from overflowing the arithmetic on it.
pub(crate) const MAX_STEP: u64 = 1 << 48;

/// Decodes checkpoint `id` of `thread` for `graph`, then checks that what it records is
/// possible for this graph (`validate`): every read of a checkpoint goes through here.
pub(crate) fn decode_for<G: Graph>(
    graph: &G,
    bytes: &[u8],
    thread: &ThreadId,
    id: CheckpointId,
) -> Result<Checkpoint<G::State>, Error> {
    let ckpt = checkpoint::decode(bytes, &identity(graph), thread, id)?;
    validate(graph, &ckpt).map_err(|reason| Error::CorruptCheckpoint {
        thread: thread.clone(),
        checkpoint: id,
        reason,
    })?;
    Ok(ckpt)
}

/// What a checkpoint with a valid envelope may still get wrong: an impossible step count, a
/// node the graph lacks, a fan-out where the graph has none or with other branches, a finished
/// run with pending pauses, a pause record without pauses.
fn validate<G: Graph>(graph: &G, ckpt: &Checkpoint<G::State>) -> Result<(), String> {
    let known = |name: &NodeName| -> Result<G::Node, String> {
        graph
            .node_named(name.as_str())
            .ok_or_else(|| format!("it names node `{name}`, which graph `{}` does not have", graph.name()))
    };
    let target = |goto: &Option<Target>| -> Result<(), String> {
        match goto {
            Some(Target::Node(name)) => known(name).map(|_| ()),
            _ => Ok(()),
        }
    };
    if ckpt.step > MAX_STEP {
        return Err(format!("its step count {} is impossible", ckpt.step));
    }
    match &ckpt.at {
        Position::Start | Position::Done => {}
        Position::Before(node) => {
            known(node)?;
        }
        Position::After { node, goto } => {
            known(node)?;
            target(goto)?;
        }
        Position::Fork { source, branches } => {
            let source_node = known(source)?;
            let Some(fork) = graph.fork(source_node) else {
                return Err(format!("it records a fan-out after node `{source}`, which has none"));
            };
            let sends = graph.sends(source_node);
            if sends {
                crate::send::validate(graph, fork, branches)?;
            } else if !branches.is_empty() && branches.len() != fork.heads.len() {
                return Err(format!(
                    "it records {} branches after node `{source}`, whose fan-out has {}",
                    branches.len(),
                    fork.heads.len()
                ));
            }
            for (i, branch) in branches.iter().enumerate() {
                if let (false, Some(&head)) = (sends, fork.heads.get(i)) {
                    if branch.head != graph.node_name(head) {
                        return Err(format!(
                            "it records branch `{}` where the fan-out has `{}`",
                            branch.head,
                            graph.node_name(head)
                        ));
                    }
                }
                if branch.steps > MAX_STEP {
                    return Err(format!("branch `{}` records an impossible step count {}", branch.head, branch.steps));
                }
                match &branch.at {
                    BranchAt::Joined => {}
                    BranchAt::Before(node) | BranchAt::Start(node) => {
                        known(node)?;
                    }
                    BranchAt::After { node, goto } => {
                        known(node)?;
                        target(goto)?;
                    }
                }
                for pending in branch.pending.iter().chain(&branch.more_pending) {
                    known(pending.node())?;
                }
            }
        }
    }
    if matches!(ckpt.at, Position::Done) && !ckpt.pending.is_empty() {
        return Err("it records a finished run that still waits on pauses".into());
    }
    if ckpt.pending.is_empty() != ckpt.pause.is_none() {
        return Err("its pause record and its pending pauses disagree".into());
    }
    for pending in &ckpt.pending {
        known(pending.node())?;
    }
    for branch in &ckpt.joined {
        // A send's branch is named `{target}#{i}`.
        let head = branch.head().as_str();
        let node = match head.rsplit_once('#') {
            Some((target, i)) if !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()) => target,
            _ => head,
        };
        known(&NodeName::from(node.to_owned()))?;
    }
    Ok(())
}

/// Milliseconds since the Unix epoch (lease times).
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// The identity of `graph`'s checkpoints.
pub(crate) fn identity<G: Graph>(graph: &G) -> Identity<'_> {
    Identity {
        graph: graph.name(),
        graph_fingerprint: graph.fingerprint(),
        schema_fingerprint: graph.schema_fingerprint(),
    }
}

/// A run's link to its checkpoint store.
pub(crate) struct Persist<'g> {
    pub(crate) store: &'g dyn Checkpointer,
    pub(crate) thread: ThreadId,
    pub(crate) durability: Durability,
    pub(crate) key: Option<&'g SigningKey>,
    /// The paused checkpoint this run resumed from, written back if the run fails.
    pub(crate) rollback: Option<Vec<u8>>,
    /// Whether the run's first checkpoint (claiming the thread) is still to be written.
    pub(crate) claim: bool,
    /// The run recovers a thread: losing the race for its claim means another run owns it.
    pub(crate) recovering: bool,
    /// What subgraph nodes run their child graphs on (this store and the app's options), and
    /// this run's hold on its thread, shared with their child runs, which keep it alive: the
    /// thread's head as this run last saw it, the bytes of its last checkpoint (written again
    /// without the lease if the run fails), and this run's lease (its owner, its length, until
    /// when the last checkpoint holds it). See [`Host`](crate::compose::Host).
    pub(crate) host: std::sync::Arc<crate::compose::Host>,
    /// The run is a child graph's (an app made by `App::for_child`).
    pub(crate) nested: bool,
}

/// Whether half of a run's own lease is gone (or it holds none yet).
fn own_lease_due(persist: &Persist<'_>) -> bool {
    let host = &persist.host;
    host.until() < now_ms().saturating_add(host.lease_ms / 2)
}

/// A random 64-bit number: a run's lease owner, a pause's nonce.
pub(crate) fn random_u64() -> u64 {
    uuid::Uuid::new_v4().as_u64_pair().0
}

/// One run of a graph: from an input state, a paused checkpoint or a crashed run, to `end` or
/// the next pause.
pub(crate) struct Run<'g, G: Graph> {
    graph: &'g G,
    pub(crate) state: G::State,
    ctx: Ctx<G::State>,
    cursor: Cursor<G::Node>,
    limit: usize,
    /// The most branches of one fan-out that run at once (`Builder::max_parallel_branches`).
    pub(crate) max_branches: usize,
    /// Whether branch steps are recorded as events (streaming).
    record: bool,
    /// Events of the last fan-out's branches, in branch order, while streaming.
    pub(crate) branch_events: VecDeque<Event<G::State>>,
    persist: Option<Persist<'g>>,
    /// The run resumes past a pause: the breakpoints where it paused do not stop it again.
    resuming: bool,
    /// An `interrupt_after` node just ran: the next advance pauses.
    pause_after: bool,
    /// The branches of a fan-out resumed from a checkpoint.
    saved_branches: Vec<BranchProgress<G::State>>,
    /// The answers to the earlier pauses of the node at the cursor.
    answers: Vec<serde_json::Value>,
    /// The thread's step count when this invocation began: the recursion limit counts the node
    /// runs of one invocation (`invoke`, `resume` or `recover`), not of the thread's life.
    first_step: u64,
    finished: bool,
    /// The run is a child graph's, run by a subgraph node: `Command::parent` may end it.
    pub(crate) nested: bool,
    /// Where a child's run routes its parent (`Command::parent`), once it did.
    pub(crate) jump: Option<crate::compose::ParentJump>,
    /// How long the last node on the main line took (measured while streaming or tracing).
    pub(crate) last_duration: Duration,
    /// The run's `run` span, entered by every advance.
    #[cfg(feature = "tracing")]
    pub(crate) span: tracing::Span,
}

impl<'g, G: Graph> Run<'g, G> {
    pub(crate) fn new(graph: &'g G, input: G::State, limit: usize, persist: Option<Persist<'g>>, record: bool) -> Self {
        let thread = persist.as_ref().map(|p| p.thread.clone());
        let nested = persist.as_ref().is_some_and(|p| p.nested);
        let mut ctx = Ctx::new(START, thread.clone());
        ctx.host = persist.as_ref().map(|p| p.host.clone());
        if record {
            ctx.child_steps = Some(std::sync::Arc::new(crate::compose::ChildSteps::<G::State>::default()));
        }
        #[cfg(feature = "tracing")]
        let span = tracing::info_span!(
            target: "tea",
            "run",
            graph = graph.name(),
            thread = thread.as_ref().map(ThreadId::as_str),
            call = tracing::field::Empty,
        );
        Run {
            graph,
            state: input,
            ctx,
            cursor: Cursor::Start,
            limit,
            max_branches: crate::app::DEFAULT_MAX_PARALLEL_BRANCHES,
            record,
            branch_events: VecDeque::new(),
            persist,
            resuming: false,
            pause_after: false,
            saved_branches: Vec::new(),
            answers: Vec::new(),
            first_step: 0,
            finished: false,
            nested,
            jump: None,
            last_duration: Duration::ZERO,
            #[cfg(feature = "tracing")]
            span,
        }
    }

    /// A run that continues from checkpoint `ckpt` (the thread's head, in `persist.head`).
    /// `resuming`: it resumes past the pause the checkpoint records.
    pub(crate) fn from_checkpoint(
        graph: &'g G,
        ckpt: Checkpoint<G::State>,
        resuming: bool,
        limit: usize,
        persist: Persist<'g>,
        record: bool,
    ) -> Result<Self, Error> {
        let thread = persist.thread.clone();
        let mut saved_branches = Vec::new();
        let cursor = (|| -> Result<Cursor<G::Node>, Error> {
            Ok(match ckpt.at {
                Position::Start => Cursor::Start,
                Position::Before(name) => Cursor::At(node_named(graph, &name, &thread)?),
                Position::After { node, goto } => {
                    Cursor::After(node_named(graph, &node, &thread)?, goto_of(graph, &goto, &thread)?)
                }
                Position::Fork { source, branches } => {
                    // The branches' nodes too, before the run claims the thread.
                    for branch in &branches {
                        if let BranchAt::Before(node) | BranchAt::Start(node) | BranchAt::After { node, .. } =
                            &branch.at
                        {
                            node_named(graph, node, &thread)?;
                        }
                        if let BranchAt::After { goto, .. } = &branch.at {
                            goto_of(graph, goto, &thread)?;
                        }
                    }
                    saved_branches = branches;
                    Cursor::Fork(node_named(graph, &source, &thread)?)
                }
                Position::Done => Cursor::Done,
            })
        })()
        .map_err(|error| match error {
            // `node_named` does not know which checkpoint it reads: this one.
            Error::CorruptCheckpoint { thread, reason, .. } => {
                Error::CorruptCheckpoint { thread, checkpoint: persist.host.head().unwrap_or_default(), reason }
            }
            other => other,
        })?;
        let mut run = Run::new(graph, ckpt.state, limit, Some(persist), record);
        run.ctx.branches = ckpt.joined;
        run.ctx.step = ckpt.step;
        run.first_step = ckpt.step;
        run.cursor = cursor;
        run.resuming = resuming;
        run.saved_branches = saved_branches;
        run.answers = ckpt.answers;
        run.finished = matches!(cursor, Cursor::Done);
        run.jump = ckpt.parent;
        Ok(run)
    }

    /// Makes a fresh run start at `node` rather than at `start`; `node`'s own breakpoint
    /// before it does not stop it.
    pub(crate) fn start_at(&mut self, node: G::Node) {
        self.cursor = Cursor::At(node);
        self.resuming = true;
    }

    /// Makes a run made without recording record its steps (a child's `recover` while its
    /// parent streams).
    pub(crate) fn record_steps(&mut self) {
        if !self.record {
            self.record = true;
            self.ctx.child_steps = Some(std::sync::Arc::new(crate::compose::ChildSteps::<G::State>::default()));
        }
    }

    /// Queues the steps of the child graph a subgraph node just ran (while streaming), ahead of
    /// the node's own step; whether there were any.
    pub(crate) fn queue_child_steps(&mut self) -> bool {
        let Some(sink) = crate::compose::child_steps(&self.ctx) else { return false };
        let mut steps = sink.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if steps.is_empty() {
            return false;
        }
        self.branch_events.extend(steps.drain(..));
        true
    }

    /// The node that ran last (`start` before any).
    pub(crate) fn last_node(&self) -> &NodeName {
        &self.ctx.node
    }

    /// Runs the next node (or fan-out), or pauses. After an error the run is over; a resumed
    /// run then puts its pause back.
    pub(crate) fn advance(&mut self) -> Result<Progress<G::State>, Error> {
        traced! { let _run = self.span.clone().entered(); }
        let result = self.step_now();
        if result.is_err() {
            self.abandon();
        }
        traced! { self.trace_progress(&result); }
        result
    }

    /// [`advance`](Self::advance) through driver `driver` (the async driver instruments the
    /// returned future with the run's span).
    #[cfg(feature = "tokio")]
    pub(crate) async fn step<D: Driver<G>>(&mut self, driver: &D) -> Result<Progress<G::State>, Error> {
        let result = self.step_inner(driver).await;
        if result.is_err() {
            {
                let future = boxed(self.abandon_with(driver));
                future
            }
            .await;
        }
        traced! { self.trace_progress(&result); }
        result
    }

    /// Names the call that started this run (`invoke`, `resume`, `recover`, `stream`, …) in its
    /// `run` span.
    #[cfg(feature = "tracing")]
    pub(crate) fn call(&self, call: &'static str) {
        self.span.record("call", call);
    }

    /// The `paused`, `done` and `failed` events of an advance.
    #[cfg(feature = "tracing")]
    fn trace_progress(&self, result: &Result<Progress<G::State>, Error>) {
        match result {
            Ok(Progress::Paused(resume)) => {
                let (ids, kinds) = trace::pauses(resume.interrupts());
                tracing::info!(target: "tea", step = self.ctx.step, ids = ?ids, kinds = ?kinds, "paused");
            }
            Ok(Progress::Done) => tracing::info!(target: "tea", step = self.ctx.step, "done"),
            Ok(Progress::Stepped | Progress::Forked) => {}
            Err(error) => tracing::error!(
                target: "tea",
                error = trace::error_kind(error),
                node = %self.ctx.node,
                step = self.ctx.step,
                reason = %error,
                "failed"
            ),
        }
    }

    /// One step: a node on the main line (or a fan-out, a pause, the end). What can wait —
    /// the node, the store, the branches — goes through `driver`; the decisions around it are
    /// [`next`](Self::next) and [`finish`](Self::finish), which do not wait.
    #[cfg(feature = "tokio")]
    async fn step_inner<D: Driver<G>>(&mut self, driver: &D) -> Result<Progress<G::State>, Error> {
        if self.lease_due() {
            boxed(self.save_lease(driver)).await?;
        }
        let node = match self.next()? {
            Next::Run(node) => node,
            Next::Settle(settle) => return boxed(self.settle(driver, settle)).await,
        };
        let answers = std::mem::take(&mut self.answers);
        traced! { let span = self.node_span(); }
        let started = self.clock();
        let produced = {
            let future = driver.produce(self.graph, node, &self.state, &self.ctx, answers);
            #[cfg(feature = "tracing")]
            let future = tracing::Instrument::instrument(future, span.clone());
            future.await
        };
        self.timed(
            started,
            #[cfg(feature = "tracing")]
            &span,
        );
        match self.finish(node, produced)? {
            Then::Stepped => Ok(Progress::Stepped),
            Then::Save if self.persist.is_none() => Ok(Progress::Stepped),
            then => boxed(self.then(driver, then)).await,
        }
    }

    /// [`step_inner`](Self::step_inner) on the [`ThreadDriver`], in the same order through the
    /// same parts, without making a future for the common step: a node that runs and routes is
    /// a few calls, and only the store, pauses and fan-outs go through the driver's (ready)
    /// futures.
    fn step_now(&mut self) -> Result<Progress<G::State>, Error> {
        let driver = &ThreadDriver;
        if self.lease_due() {
            now_or_never(pin!(self.save_lease(driver)))?;
        }
        let node = match self.next()? {
            Next::Run(node) => node,
            Next::Settle(settle) => return now_or_never(pin!(self.settle(driver, settle))),
        };
        let answers = std::mem::take(&mut self.answers);
        traced! { let span = self.node_span(); }
        let started = self.clock();
        let produced = {
            traced! { let _node = span.enter(); }
            ThreadDriver::produce_now(self.graph, node, &self.state, &self.ctx, answers)
        };
        self.timed(
            started,
            #[cfg(feature = "tracing")]
            &span,
        );
        match self.finish(node, produced)? {
            Then::Stepped => Ok(Progress::Stepped),
            Then::Save => {
                self.save_step_now()?;
                Ok(Progress::Stepped)
            }
            then => now_or_never(pin!(self.then(driver, then))),
        }
    }

    /// Whether the run writes its lease before the next node: it has not claimed its thread
    /// yet, or half its lease is gone (renewed, so that `recover` elsewhere does not take a live
    /// run over).
    ///
    /// A child graph's run (a subgraph node's) also renews its ancestors' leases before a node
    /// once half of one is gone: while the node runs, its run writes nothing, and a child that
    /// outlasts the lease must not let it expire.
    fn lease_due(&self) -> bool {
        self.persist.as_ref().is_some_and(|p| {
            p.claim
                || (!self.finished
                    && (own_lease_due(p) || p.host.parent.as_deref().is_some_and(crate::compose::Host::due)))
        })
    }

    /// Writes the run's lease ([`lease_due`](Self::lease_due)), or only renews its ancestors'
    /// when its own is not due.
    async fn save_lease<D: Driver<G>>(&mut self, driver: &D) -> Result<(), Error> {
        let Some(persist) = &self.persist else { return Ok(()) };
        if !persist.claim && !own_lease_due(persist) {
            if let Some(parent) = &persist.host.parent {
                parent.keep_alive()?;
            }
            return Ok(());
        }
        self.save(driver, false).await?;
        if let Some(persist) = &mut self.persist {
            persist.claim = false;
        }
        Ok(())
    }

    /// A step that runs no node: the end, a fan-out, or a breakpoint's pause.
    async fn settle<D: Driver<G>>(&mut self, driver: &D, settle: Settle<G::Node>) -> Result<Progress<G::State>, Error> {
        match settle {
            Settle::Done => {
                if !self.finished {
                    // What `invoke`/`resume` report must survive a crash: the final
                    // checkpoint is flushed before they return. (Marked finished only once
                    // written: a failed final write still releases the lease.)
                    self.save(driver, true).await?;
                    self.finished = true;
                }
                if let Some(persist) = &mut self.persist {
                    // The resume is complete: nothing is left to roll back to.
                    persist.rollback = None;
                }
                Ok(Progress::Done)
            }
            Settle::Fork(source) => self.fork(driver, source).await,
            Settle::Pause(pending) => self.pause(driver, pending).await,
        }
    }

    /// What is left of a node's step once it is applied ([`Then`]).
    async fn then<D: Driver<G>>(&mut self, driver: &D, then: Then) -> Result<Progress<G::State>, Error> {
        match then {
            Then::Stepped => Ok(Progress::Stepped),
            Then::Save => {
                self.save_step(driver).await?;
                Ok(Progress::Stepped)
            }
            Then::Pause(pending) => self.pause(driver, pending).await,
        }
    }

    /// The `node` span of the node about to run.
    #[cfg(feature = "tracing")]
    fn node_span(&self) -> tracing::Span {
        tracing::debug_span!(
            target: "tea",
            "node",
            node = %self.ctx.node,
            step = self.ctx.step,
            duration_us = tracing::field::Empty,
        )
    }

    /// When the node about to run started, when its duration is reported (streaming, tracing).
    fn clock(&self) -> Option<Instant> {
        if self.record || cfg!(feature = "tracing") {
            Some(Instant::now())
        } else {
            None
        }
    }

    /// Records how long the node that started at `started` took.
    fn timed(&mut self, started: Option<Instant>, #[cfg(feature = "tracing")] span: &tracing::Span) {
        if let Some(started) = started {
            self.last_duration = started.elapsed();
            traced! { span.record("duration_us", trace::micros(self.last_duration)); }
        }
    }

    /// Moves the cursor to the next node to run and counts its step; or says that the run is
    /// over, forks, or pauses at a breakpoint.
    fn next(&mut self) -> Result<Next<G::Node>, Error> {
        let graph = self.graph;
        loop {
            let node = match self.cursor {
                Cursor::Done => return Ok(Next::Settle(Settle::Done)),
                Cursor::At(node) => node,
                Cursor::Fork(source) => return Ok(Next::Settle(Settle::Fork(source))),
                Cursor::After(node, goto) => {
                    if std::mem::take(&mut self.pause_after) {
                        let interrupt = Interrupt::breakpoint(PauseKind::After, self.ctx.node.clone(), None);
                        return Ok(Next::Settle(Settle::Pause(vec![interrupt])));
                    }
                    let name = graph.node_name(node);
                    self.resuming = false;
                    self.cursor = self.cursor_after(route_from(graph, node, goto, &self.state, &name)?);
                    continue;
                }
                Cursor::Start => {
                    let state = &self.state;
                    self.cursor = match catch_unwind(AssertUnwindSafe(|| graph.try_start(state))) {
                        Ok(Ok(Some(Goto::Node(node)))) => Cursor::At(node),
                        Ok(Ok(Some(Goto::End))) => Cursor::Done,
                        Ok(Ok(None)) => return Err(Error::NoRoute { node: START, goto: None }),
                        Ok(Err(source)) => return Err(Error::NodeFailed { node: START, source }),
                        Err(payload) => {
                            return Err(Error::NodePanicked { node: START, message: panic_message(payload) })
                        }
                    };
                    continue;
                }
            };
            let pausable = self.persist.is_some();
            if pausable && !std::mem::take(&mut self.resuming) && graph.interrupt_before(node) {
                let interrupt = Interrupt::breakpoint(PauseKind::Before, graph.node_name(node), None);
                return Ok(Next::Settle(Settle::Pause(vec![interrupt])));
            }
            if self.steps_taken() >= self.limit as u64 {
                return Err(Error::RecursionLimit { limit: self.limit });
            }
            self.ctx.step = self.ctx.step.saturating_add(1);
            self.ctx.node = graph.node_name(node);
            return Ok(Next::Run(node));
        }
    }

    /// Applies what `node` produced and moves the cursor past it: to where it routes, its
    /// fan-out, its sends' fan-out, or the end of a child graph; or to its pause.
    fn finish(&mut self, node: G::Node, produced: Result<Produced<G::State, G::Node>, Error>) -> Result<Then, Error> {
        let graph = self.graph;
        let executed = produced.and_then(|produced| apply_produced(graph, &mut self.state, &self.ctx, produced));
        if !self.ctx.branches.is_empty() && matches!(executed, Ok(Executed::Ran(_) | Executed::More(_))) {
            // The join has seen its branches (a join that paused or failed sees them again).
            self.ctx.branches.clear();
        }
        let goto = match executed? {
            Executed::Ran(goto) if !graph.sends(node) => goto,
            Executed::Ran(_) => {
                // A node that fans out by sends and sent nothing: straight to the join.
                self.cursor = self.send(node, Vec::new())?;
                return Ok(Then::Save);
            }
            Executed::More(more) => match *more {
                More::Parent(jump) => {
                    if !self.nested {
                        let target = NodeName::from(jump.target);
                        return Err(Error::NoRoute { node: self.ctx.node.clone(), goto: Some(target) });
                    }
                    // The child ends here; its final checkpoint records where the parent goes.
                    self.jump = Some(jump);
                    self.cursor = Cursor::Done;
                    return Ok(Then::Save);
                }
                More::Sends(sends) => {
                    // The sends become the branches of the node's fan-out, checkpointed before
                    // any of them runs: a recover or resume runs each exactly once.
                    self.cursor = self.send(node, sends)?;
                    return Ok(Then::Save);
                }
            },
            Executed::Paused(paused) => {
                // The node runs again from its start on resume: this run does not count.
                self.ctx.step -= 1;
                let Paused { payload, answers, nested, .. } = *paused;
                let pending =
                    if nested.is_empty() { vec![asked(graph, node, payload, answers.len(), None)] } else { nested };
                self.answers = answers;
                return Ok(Then::Pause(pending));
            }
        };
        if self.persist.is_some() && graph.interrupt_after(node) {
            self.cursor = Cursor::After(node, goto);
            self.pause_after = true;
            return Ok(Then::Stepped);
        }
        self.cursor = self.cursor_after(route_from(graph, node, goto, &self.state, &self.ctx.node)?);
        Ok(Then::Save)
    }

    /// Where the run goes after `node` sent `sends`: its fan-out, whose branches they become,
    /// or its join when it sent nothing.
    fn send(
        &mut self,
        node: G::Node,
        sends: Vec<(G::Node, <G::State as GraphState>::Update)>,
    ) -> Result<Cursor<G::Node>, Error> {
        let graph = self.graph;
        let (branches, join) = crate::send::branches(graph, node, sends, &self.state)?;
        if branches.is_empty() {
            return Ok(Cursor::At(join));
        }
        self.saved_branches = branches;
        Ok(Cursor::Fork(node))
    }

    /// Node runs in this invocation.
    fn steps_taken(&self) -> u64 {
        self.ctx.step.saturating_sub(self.first_step)
    }

    fn cursor_after(&self, after: After<G::Node>) -> Cursor<G::Node> {
        match after {
            After::Goto(Goto::Node(next)) => Cursor::At(next),
            After::Goto(Goto::End) => Cursor::Done,
            After::Fork(source) => Cursor::Fork(source),
        }
    }

    /// Runs the branches of the fan-out after `source` and merges them in declared order, or
    /// pauses if a branch paused.
    async fn fork<D: Driver<G>>(&mut self, driver: &D, source: G::Node) -> Result<Progress<G::State>, Error> {
        let graph = self.graph;
        let Some(fork) = graph.fork(source) else {
            return Err(Error::NoRoute { node: graph.node_name(source), goto: None });
        };
        let env = Env {
            thread: self.ctx.thread.clone(),
            base_step: self.ctx.step,
            budget: (self.limit as u64).saturating_sub(self.steps_taken()),
            limit: self.limit,
            max_branches: self.max_branches,
            record: self.record,
            pausable: self.persist.is_some(),
            host: self.ctx.host.clone(),
        };
        self.resuming = false;
        let saved = std::mem::take(&mut self.saved_branches);
        let keep_states = graph.reads_branches(fork.join);
        match parallel::run_fork(driver, graph, fork, &self.state, &env, saved, keep_states).await? {
            ForkOutcome::Paused { branches, interrupts, mut events } => {
                if self.record {
                    self.branch_events.extend(events.drain(..));
                }
                self.saved_branches = branches;
                self.pause(driver, interrupts).await
            }
            ForkOutcome::Failed { error, branches } => {
                // The branches that finished are kept: `recover` runs only the others.
                if !branches.is_empty() && self.persist.as_ref().is_some_and(|p| p.durability != Durability::OnPause) {
                    self.saved_branches = branches;
                    // The branch's failure is what the run reports, even if this write fails.
                    let _ = self.save(driver, false).await;
                }
                Err(error)
            }
            ForkOutcome::Joined { mut branches, steps, taken } => {
                if self.steps_taken().saturating_add(taken) > self.limit as u64 {
                    return Err(Error::RecursionLimit { limit: self.limit });
                }
                self.ctx.step = self.ctx.step.saturating_add(steps);
                // Branch steps of earlier invocations count in the thread's step, not in this
                // invocation's recursion limit.
                self.first_step = self.first_step.saturating_add(steps.saturating_sub(taken));
                parallel::merge(graph, &mut self.state, &mut branches, fork.join)?;
                if self.record {
                    for branch in &mut branches {
                        self.branch_events.extend(branch.events.drain(..));
                    }
                }
                self.ctx.branches = branches.into_iter().filter_map(parallel::Branch::into_state).collect();
                self.cursor = Cursor::At(fork.join);
                self.save_step(driver).await?;
                Ok(Progress::Forked)
            }
        }
    }

    /// Where the run stands, as a checkpoint records it.
    fn position(&self) -> Position<G::State> {
        let graph = self.graph;
        match self.cursor {
            Cursor::Start => Position::Start,
            Cursor::At(node) => Position::Before(graph.node_name(node)),
            Cursor::After(node, goto) => Position::After { node: graph.node_name(node), goto: target_of(graph, goto) },
            Cursor::Fork(source) => Position::Fork {
                source: graph.node_name(source),
                branches: self
                    .saved_branches
                    .iter()
                    .map(|b| BranchProgress {
                        head: b.head.clone(),
                        state: b.state.clone(),
                        updates: b.updates.clone(),
                        origins: b.origins.clone(),
                        steps: b.steps,
                        at: b.at.clone(),
                        answers: b.answers.clone(),
                        pending: b.pending.clone(),
                        more_pending: b.more_pending.clone(),
                        resume: b.resume,
                    })
                    .collect(),
            },
            Cursor::Done => Position::Done,
        }
    }

    async fn save_step<D: Driver<G>>(&mut self, driver: &D) -> Result<(), Error> {
        let Some(durable) = self.step_durability() else { return Ok(()) };
        // A step that routed to `end` writes the final checkpoint, which is always flushed.
        let done = matches!(self.cursor, Cursor::Done);
        self.save(driver, durable || done).await?;
        self.finished = done;
        Ok(())
    }

    /// [`save_step`](Self::save_step) on the calling thread, without a future: the same
    /// parts ([`checkpoint`](Self::checkpoint), [`encode_write`](Self::encode_write), the
    /// store's `append`, [`wrote`](Self::wrote)), for the thread driver's common step.
    fn save_step_now(&mut self) -> Result<(), Error> {
        let Some(durable) = self.step_durability() else { return Ok(()) };
        let done = matches!(self.cursor, Cursor::Done);
        let ckpt = self.checkpoint();
        let durable = durable || done;
        let graph = self.graph;
        traced! { let (span, started) = checkpoint_span(&ckpt, durable); }
        let encoded = {
            traced! { let _checkpoint = span.enter(); }
            self.encode_write(&ckpt)?
        };
        traced! { span.record("bytes", encoded.bytes.len()); }
        let Some(persist) = &self.persist else { return Ok(()) };
        let appended = {
            traced! { let _checkpoint = span.enter(); }
            crate::trace::store_call("append", graph.name(), Some(&persist.thread), || {
                persist.store.append(graph.name(), &persist.thread, encoded.head, encoded.id, &encoded.bytes, durable)
            })?
        };
        traced! { self.traced_write(&span, started, &encoded, &appended); }
        self.wrote(&ckpt, encoded, appended)?;
        self.finished = done;
        Ok(())
    }

    /// Whether a node's step is checkpointed, and flushed: `None` without a store or with
    /// [`Durability::OnPause`].
    fn step_durability(&self) -> Option<bool> {
        match self.persist.as_ref()?.durability {
            Durability::OnPause => None,
            Durability::Buffered => Some(false),
            Durability::EveryStep => Some(true),
        }
    }

    /// A checkpoint of where the run stands (no pause): with this run's lease, renewed, unless
    /// the run is over.
    fn checkpoint(&self) -> Checkpoint<G::State> {
        let lease = match &self.persist {
            Some(persist) if !matches!(self.cursor, Cursor::Done) => {
                let host = &persist.host;
                Some(Lease { owner: host.owner, until: now_ms().saturating_add(host.lease_ms) })
            }
            _ => None,
        };
        Checkpoint {
            step: self.ctx.step,
            state: self.state.clone(),
            at: self.position(),
            pending: Vec::new(),
            pause: None,
            paused_at: None,
            nonce: None,
            resumed: self.resuming,
            answers: self.answers.clone(),
            joined: self.ctx.branches.clone(),
            lease,
            parent: self.jump.clone(),
        }
    }

    /// Writes a checkpoint of where the run stands ([`checkpoint`](Self::checkpoint)).
    async fn save<D: Driver<G>>(&mut self, driver: &D, durable: bool) -> Result<(), Error> {
        if self.persist.is_none() {
            return Ok(());
        }
        let ckpt = self.checkpoint();
        self.write(driver, &ckpt, durable).await.map(|_| ())
    }

    /// Writes `ckpt` as the thread's new head, by compare-and-swap on the head this run last saw.
    async fn write<D: Driver<G>>(
        &mut self,
        driver: &D,
        ckpt: &Checkpoint<G::State>,
        durable: bool,
    ) -> Result<CheckpointId, Error> {
        let graph = self.graph;
        if self.persist.is_none() {
            return Ok(0);
        }
        traced! { let (span, started) = checkpoint_span(ckpt, durable); }
        let encoded = {
            traced! { let _checkpoint = span.enter(); }
            self.encode_write(ckpt)?
        };
        traced! { span.record("bytes", encoded.bytes.len()); }
        let Some(persist) = &self.persist else { return Err(no_store(self.graph)) };
        let appended = {
            let future = driver.append(
                persist.store,
                graph.name(),
                &persist.thread,
                encoded.head,
                encoded.id,
                &encoded.bytes,
                durable,
            );
            #[cfg(feature = "tracing")]
            let future = tracing::Instrument::instrument(future, span.clone());
            future.await?
        };
        traced! { self.traced_write(&span, started, &encoded, &appended); }
        self.wrote(ckpt, encoded, appended)
    }

    /// Encodes `ckpt` for the store and checks that its state reads back; the head it is to
    /// replace and its id.
    fn encode_write(&self, ckpt: &Checkpoint<G::State>) -> Result<Encoded, Error> {
        let Some(persist) = &self.persist else { return Err(no_store(self.graph)) };
        let bytes = checkpoint::encode(&identity(self.graph), ckpt)?;
        if let Err((path, reason)) = checkpoint::check_reads_back::<G::State>(&bytes) {
            return Err(Error::StateNotStorable {
                node: self.ctx.node.clone(),
                thread: persist.thread.clone(),
                path,
                reason,
            });
        }
        // Read, not held: the lock is never held across an await. While this run writes, no
        // node of it runs, so no child of it renews its lease.
        let head = persist.host.head();
        Ok(Encoded { bytes, head, id: head.map_or(1, |h| h + 1) })
    }

    /// What the store's answer to writing `encoded` (of `ckpt`) means: the run's new head, or
    /// the error of a lost compare-and-swap.
    fn wrote(
        &mut self,
        ckpt: &Checkpoint<G::State>,
        encoded: Encoded,
        appended: Append,
    ) -> Result<CheckpointId, Error> {
        let Some(persist) = &mut self.persist else { return Err(no_store(self.graph)) };
        match appended {
            Append::Written => {
                let host = &persist.host;
                host.wrote(&mut host.held(), encoded.id, encoded.bytes, ckpt.lease.map_or(0, |lease| lease.until));
                if ckpt.lease.is_some() {
                    // A child graph's run keeps its ancestors' leases alive as it renews its own.
                    if let Some(parent) = &host.parent {
                        parent.keep_alive()?;
                    }
                }
                Ok(encoded.id)
            }
            Append::Conflict { .. } if encoded.head.is_none() => {
                Err(Error::ThreadExists { thread: persist.thread.clone() })
            }
            Append::Conflict { .. } if persist.recovering && persist.claim => Err(Error::ThreadBusy {
                thread: persist.thread.clone(),
                expires_in: std::time::Duration::from_millis(persist.host.lease_ms),
            }),
            Append::Conflict { .. } => Err(Error::StaleResume { thread: persist.thread.clone() }),
        }
    }

    /// Records a write's duration and a lost compare-and-swap in its `checkpoint` span.
    #[cfg(feature = "tracing")]
    fn traced_write(&self, span: &tracing::Span, started: Instant, encoded: &Encoded, appended: &Append) {
        span.record("duration_us", trace::micros(started.elapsed()));
        if let (Append::Conflict { head: found }, Some(persist)) = (appended, &self.persist) {
            let expected = encoded.head;
            tracing::info!(target: "tea", thread = %persist.thread, expected = ?expected, found = ?found, "conflict");
        }
    }

    /// Pauses on `pending`: writes the paused checkpoint durably, then issues its token.
    async fn pause<D: Driver<G>>(&mut self, driver: &D, pending: Vec<Interrupt>) -> Result<Progress<G::State>, Error> {
        let graph = self.graph;
        let Some(persist) = &self.persist else {
            return Err(Error::store(format!("graph `{}` paused in an app without a checkpointer", graph.name())));
        };
        let id = persist.host.head().map_or(1, |h| h + 1);
        let ckpt = Checkpoint {
            step: self.ctx.step,
            state: self.state.clone(),
            at: self.position(),
            pending,
            pause: Some(id),
            paused_at: Some(now()),
            nonce: Some(random_u64()),
            resumed: false,
            answers: self.answers.clone(),
            joined: self.ctx.branches.clone(),
            lease: None,
            parent: None,
        };
        self.write(driver, &ckpt, true).await?;
        let Some(persist) = &mut self.persist else { return Err(no_store(self.graph)) };
        // The pause is durable: nothing is left to roll back to.
        persist.rollback = None;
        let resume = issue(graph, &persist.thread, &ckpt, persist.key)?;
        Ok(Progress::Paused(Box::new(resume)))
    }

    /// After a failure, or when a stream is dropped part-way: a resumed run writes its pause
    /// back as the head, so that the token that resumed it works again; any other run writes
    /// its last checkpoint again without its lease, so that `recover` may continue it at once.
    /// A run that has not claimed its thread yet wrote nothing, and writes nothing.
    pub(crate) fn abandon(&mut self) {
        now_or_never(pin!(self.abandon_with(&ThreadDriver)));
    }

    /// [`abandon`](Self::abandon) through driver `driver`.
    pub(crate) async fn abandon_with<D: Driver<G>>(&mut self, driver: &D) {
        let graph = self.graph;
        let Some(persist) = &mut self.persist else { return };
        let rollback = persist.rollback.take();
        let (head, last) = {
            let mut held = persist.host.held();
            (held.head, held.last.take())
        };
        // The run is over: its children (if any still run) no longer renew its lease.
        persist.host.released();
        if persist.claim || self.finished {
            return;
        }
        traced! { let rollback_pause = rollback.is_some(); }
        let bytes = match rollback {
            Some(bytes) => bytes,
            None => {
                let Some(last) = last else { return };
                let id = head.unwrap_or_default();
                let Ok(mut ckpt) = checkpoint::decode::<G::State>(&last, &identity(graph), &persist.thread, id) else {
                    return;
                };
                if ckpt.lease.is_none() {
                    return;
                }
                ckpt.lease = None;
                let Ok(bytes) = checkpoint::encode(&identity(graph), &ckpt) else { return };
                bytes
            }
        };
        let id = head.map_or(1, |h| h + 1);
        traced! {
            tracing::info!(target: "tea", thread = %persist.thread, put_back_pause = rollback_pause, "abandoned");
        }
        let appended = driver.append(persist.store, graph.name(), &persist.thread, head, id, &bytes, true).await;
        if let Ok(Append::Written) = appended {
            persist.host.held().head = Some(id);
        }
    }
}

/// The error of a run that would write or pause without a checkpointer (the executor checks
/// for one first: this is the error, not a panic, should that ever not hold).
fn no_store<G: Graph>(graph: &G) -> Error {
    Error::store(format!("graph `{}` has no checkpointer to write to", graph.name()))
}

/// The token of a paused checkpoint.
pub(crate) fn issue<G: Graph>(
    graph: &G,
    thread: &ThreadId,
    ckpt: &Checkpoint<G::State>,
    key: Option<&SigningKey>,
) -> Result<Resume<G::State>, Error> {
    let token = Token {
        graph: graph_id(graph.name()),
        graph_fingerprint: graph.fingerprint(),
        schema_fingerprint: graph.schema_fingerprint(),
        pause: ckpt.pause.unwrap_or_default(),
        nonce: ckpt.nonce.unwrap_or_default(),
        thread: thread.clone(),
        node: ckpt.pending.first().map(|i| i.node().clone()).unwrap_or(START),
        interrupts: ckpt.pending.clone(),
    };
    Resume::issue(token, key)
}

/// Seconds since the Unix epoch.
pub(crate) fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The message of a caught panic (`panic!("…")` payloads are `&str` or `String`).
///
/// The payload is user data: its `Drop` may panic in turn (`panic_any(Bomb)`), so it is
/// dropped under `catch_unwind` too, and a payload whose drop panics again is leaked rather
/// than let unwind through tea.
pub(crate) fn panic_message(payload: Box<dyn Any + Send>) -> String {
    let message = if let Some(message) = payload.downcast_ref::<String>() {
        message.clone()
    } else if let Some(message) = payload.downcast_ref::<&'static str>() {
        (*message).to_owned()
    } else {
        String::from("(a panic without a message)")
    };
    drop_payload(payload);
    message
}

/// Drops a caught panic's payload without letting a panicking `Drop` escape.
pub(crate) fn drop_payload(payload: Box<dyn Any + Send>) {
    if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        // The drop panicked and left another payload: dropping that could panic forever.
        std::mem::forget(again);
    }
}

/// Applies an update through the graph's reducers (user code: a panicking reducer is reported
/// on `node`, a refused write is `node`'s failure).
#[inline]
pub(crate) fn apply_update<G: Graph>(
    graph: &G,
    state: &mut G::State,
    update: <G::State as GraphState>::Update,
    node: &NodeName,
) -> Result<(), Error> {
    match catch_unwind(AssertUnwindSafe(|| graph.apply(state, update))) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(source)) => Err(Error::NodeFailed { node: node.clone(), source }),
        Err(payload) => Err(Error::NodePanicked { node: node.clone(), message: panic_message(payload) }),
    }
}

/// The events of a run: [`Event::Step`] per node (branch nodes after their fan-out, in branch
/// order), then [`Event::Done`] or, with a checkpointer, [`Event::Interrupted`]; see
/// [`App::stream`](crate::App::stream). A run that fails yields its error and ends.
pub struct Stream<'g, G: Graph> {
    run: Option<Run<'g, G>>,
    error: Option<Error>,
    /// Where a child graph's run, once over, routes its parent (`Command::parent`).
    pub(crate) jump: Option<crate::compose::ParentJump>,
}

impl<'g, G: Graph> Stream<'g, G> {
    pub(crate) fn new(run: Result<Run<'g, G>, Error>) -> Self {
        match run {
            Ok(run) => Stream { run: Some(run), error: None, jump: None },
            Err(error) => Stream { run: None, error: Some(error), jump: None },
        }
    }
}

impl<G: Graph> Iterator for Stream<'_, G> {
    type Item = Result<Event<G::State>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(error) = self.error.take() {
            return Some(Err(error));
        }
        let run = self.run.as_mut()?;
        if let Some(event) = run.branch_events.pop_front() {
            if matches!(event, Event::Interrupted { .. }) {
                // A pause queued behind its fan-out's branch steps ends the stream.
                self.run = None;
            }
            return Some(Ok(event));
        }
        let event = loop {
            match run.advance() {
                Ok(Progress::Stepped) => {
                    let step = Event::Step {
                        node: run.last_node().clone(),
                        branch: None,
                        state: run.state.clone(),
                        duration: run.last_duration,
                    };
                    if run.queue_child_steps() {
                        // A subgraph node: its child's steps come first.
                        run.branch_events.push_back(step);
                        return run.branch_events.pop_front().map(Ok);
                    }
                    return Some(Ok(step));
                }
                Ok(Progress::Forked) => {
                    if let Some(event) = run.branch_events.pop_front() {
                        return Some(Ok(event));
                    }
                }
                Ok(Progress::Paused(resume)) => {
                    // A subgraph node paused inside its child: the child's steps so far first.
                    run.queue_child_steps();
                    if let Some(event) = run.branch_events.pop_front() {
                        // Branch steps before the pause come first; the pause follows them.
                        run.branch_events.push_back(Event::Interrupted { state: run.state.clone(), resume: *resume });
                        return Some(Ok(event));
                    }
                    break Ok(Event::Interrupted { state: run.state.clone(), resume: *resume });
                }
                Ok(Progress::Done) => break Ok(Event::Done(run.state.clone())),
                Err(error) => break Err(error),
            }
        };
        if run.branch_events.is_empty() {
            self.jump = run.jump.take();
            self.run = None;
        }
        Some(event)
    }
}

/// A stream dropped before its run paused again or finished abandons the run: a resumed run's
/// pause is put back, so the token that resumed it works again; another run releases its lease,
/// so `recover` may continue it. A stream that was never polled wrote nothing and writes nothing.
impl<G: Graph> Drop for Stream<'_, G> {
    fn drop(&mut self) {
        if let Some(run) = &mut self.run {
            run.abandon();
        }
    }
}

impl<G: Graph> std::fmt::Debug for Stream<'_, G> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut s = f.debug_struct("Stream");
        if let Some(run) = &self.run {
            s.field("graph", &run.graph.name()).field("last_node", run.last_node());
        }
        s.field("over", &self.run.is_none()).finish()
    }
}
