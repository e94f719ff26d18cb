//! The run state machine: runs a [`Graph`] one node at a time.
//!
//! A step is [`Run::begin`] (claim or lease first if due, then [`Run::next`]: where the run
//! goes, breakpoints, the step count), the node (run by the driver), and [`Run::end`]
//! ([`Run::finish`]: apply its update through the reducers, route, sends, parent jumps, pauses);
//! what is left — a checkpoint, a pause, a fan-out (`fork`), the end — the driver fulfils
//! through the machine's async parts. The step strings them together and the run loop repeats
//! it, both written once (`step_machine!`) and made twice: `Run::step`/`until_over`, async, for
//! any [`Driver`], and `Run::step_ready`/`until_over_ready`, plain, for a [`Driver::READY`]
//! driver (the thread driver), which calls the node and polls the rest once in place. Nothing
//! here allocates per step on the main line without a store: node names are
//! `Clone` without allocating and the state is updated in place. The run's writes (claim,
//! leases, checkpoints, pauses, abandons) are its [`Tenure`]'s, which writes what the run hands
//! it (its checkpoint, its pause) through the run's driver.

use crate::format::checkpoint::{AtRef, BranchAt, BranchProgress, Checkpoint, CheckpointRef, Position};
use crate::format::interrupt::Interrupt;
use crate::format::token::PauseRecord;
use crate::machine::driver::{now_or_never, Driver};
use crate::machine::fork::{self as parallel, Env, ForkOutcome};
use crate::machine::journal::Journal;
use crate::machine::line::{Applied, Cursor, InPlace, Line, Next, Settle};
use crate::machine::step::{goto_of, node_named, target_of};
use crate::model::event::Event;
use crate::model::graph::Graph;
use crate::model::node::{child_steps, ChildSteps, Ctx};
use crate::model::produce::Produced;
use crate::tenure::Tenure;
use crate::vocab::error::Error;
use crate::vocab::name::{CheckpointId, NodeName, START};
use crate::vocab::options::{Durability, Limits};
use crate::vocab::policy::StreamModes;
use crate::vocab::state::GraphState;
#[cfg(feature = "tracing")]
use crate::vocab::trace;
use crate::vocab::trace::traced;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What one call to [`Run::advance`] did.
pub(crate) enum Progress {
    /// A node ran on the main line.
    Stepped,
    /// The branches of a fan-out ran and were merged.
    Forked,
    /// The run paused; its checkpoint is durable, and the API makes its token from this record.
    /// (Boxed: a pause is rare, and every step returns a `Progress`.)
    Paused(Box<PauseRecord>),
    /// The run reached `end`.
    Done,
}

/// How a run that was advanced to its end stopped.
pub(crate) enum Over {
    /// It reached `end`.
    Done,
    /// It paused (see [`Progress::Paused`]).
    Paused(Box<PauseRecord>),
}

/// What the first half of a step asks of its driver ([`Run::begin`]).
pub(crate) enum Request<N> {
    /// Claim the thread ([`Run::claim`]), then begin again.
    Claim,
    /// Renew the run's lease, or its ancestors' ([`Run::save_lease`]), then begin again.
    Lease,
    /// Settle a step that runs no node ([`Run::settle`]): the end, a fan-out, a breakpoint.
    Settle(Settle<N>),
    /// Run this node with the answers to its earlier pauses, and hand what it produced to
    /// [`Run::end`].
    Node(N, Vec<serde_json::Value>),
}

/// What is left of a step once the node's result is applied ([`Run::finish`]).
pub(crate) enum Then {
    /// Nothing: the next advance goes on (an `interrupt_after` pauses there).
    Stepped,
    /// The step is checkpointed (when the run has a store).
    Save,
    /// The run pauses on these.
    Pause(Vec<Interrupt>),
}

/// A future of the executor that only some steps await (a claim, a lease renewal, a checkpoint
/// write, a pause, a fan-out, an abandon), boxed on the async step: the step's own future stays
/// small. Every one of these allocates anyway (encoded bytes, branch lists); a store-less step
/// awaits none of them, so the main line allocates nothing.
#[cfg(any(test, feature = "tokio"))]
type Boxed<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// The async step's way to wait for one of the futures only some steps make: boxed, awaited.
#[cfg(any(test, feature = "tokio"))]
macro_rules! boxed_await {
    ($future:expr) => {{
        let future: Boxed<'_, _> = Box::pin($future);
        future.await
    }};
}

/// The ready step's way: polled once where it is made, which neither allocates nor waits (a
/// [`Driver::READY`] driver's futures are ready).
macro_rules! polled {
    ($future:expr) => {
        now_or_never(std::pin::pin!($future))
    };
}

/// The async step's node: run under its policy through the driver, awaited in its `node` span.
#[cfg(any(test, feature = "tokio"))]
macro_rules! node_awaited {
    ($run:ident, $driver:ident, $node:ident, $answers:ident, $span:ident) => {{
        let future = crate::machine::policy::run_node($driver, $run.graph, $node, &$run.state, &$run.ctx, $answers);
        #[cfg(feature = "tracing")]
        let future = tracing::Instrument::instrument(future, $span.clone());
        future.await
    }};
}

/// The ready step's node: a call (no future) when it has no policy and its run streams nothing,
/// as most steps; else [`run_node`](crate::machine::policy::run_node) polled once.
macro_rules! node_now {
    ($run:ident, $driver:ident, $node:ident, $answers:ident, $span:ident) => {{
        const { assert!(<D as Driver<G>>::READY, "the ready step polls its futures once: it needs a ready driver") };
        #[cfg(feature = "tracing")]
        let _node = $span.enter();
        if crate::machine::policy::runs_plain::<G, D>($run.graph, $node, &$run.ctx) {
            $driver.produce_ready($run.graph, $node, &$run.state, &$run.ctx, $answers)
        } else {
            let (graph, state, ctx) = ($run.graph, &$run.state, &$run.ctx);
            now_or_never(std::pin::pin!(crate::machine::policy::run_node($driver, graph, $node, state, ctx, $answers)))
        }
    }};
}

/// The step and the run loop, written once and made twice (in the `impl` below): as `async`
/// methods for any [`Driver`] (`step`, `until_over`: the tokio driver, the machine's tests), and
/// as plain methods for a [`Driver::READY`] driver (`step_ready`, `until_over_ready`: the thread
/// driver), which call the node and poll the rest in place — a future per step costs the main
/// line more than its node (measured: 1.6–2× the instructions of `sequential_1000`). The two
/// differ only in how they wait: `$part` for the futures only some steps make, `$node` for the
/// node.
macro_rules! step_machine {
    (
        $(#[$step_doc:meta])* fn $step:ident;
        $(#[$until_doc:meta])* fn $until:ident;
        fn $checked:ident;
        fn $inner:ident;
        [$($async:ident)?] [$($await:ident)?] part: $part:ident, node: $node_of:ident
    ) => {
        $(#[$step_doc])*
        pub(crate) $($async)? fn $step<D: Driver<G>>(&mut self, driver: &D) -> Result<Progress, Error> {
            // A step asked for on its own (a stream's next event) may come any time after the
            // one before: its lease is judged by the clock.
            self.lease_fresh = false;
            self.$checked(driver) $(.$await)?
        }

        /// One step, the run abandoned if it fails.
        $($async)? fn $checked<D: Driver<G>>(&mut self, driver: &D) -> Result<Progress, Error> {
            let result = self.$inner(driver) $(.$await)?;
            if result.is_err() {
                $part!(self.abandon_with(driver));
            }
            traced! { self.trace_progress(&result); }
            result
        }

        $(#[$until_doc])*
        pub(crate) $($async)? fn $until<D: Driver<G>>(&mut self, driver: &D) -> Result<Over, Error> {
            loop {
                match self.$checked(driver) $(.$await)? ? {
                    Progress::Stepped | Progress::Forked => {}
                    Progress::Paused(record) => return Ok(Over::Paused(record)),
                    Progress::Done => return Ok(Over::Done),
                }
            }
        }

        /// One step: a node on the main line (or a fan-out, a pause, the end). What can wait —
        /// the node, the store, the branches — goes through `driver`; the decisions around it
        /// are [`begin`](Self::begin) and [`end`](Self::end), which do not wait.
        $($async)? fn $inner<D: Driver<G>>(&mut self, driver: &D) -> Result<Progress, Error> {
            let mut prelude_done = false;
            let (node, answers) = loop {
                match self.begin(prelude_done)? {
                    Request::Claim => $part!(self.claim(driver))?,
                    Request::Lease => $part!(self.save_lease(driver))?,
                    Request::Settle(settle) => {
                        // A pause writes the step it follows; anything else writes it first.
                        if self.deferred.is_some() && !matches!(settle, Settle::Pause(_)) {
                            $part!(self.save_deferred(driver))?;
                        }
                        return $part!(self.settle(driver, settle));
                    }
                    Request::Node(node, answers) => {
                        if self.deferred.is_some() && !self.graph.asks_only(node) {
                            $part!(self.save_deferred(driver))?;
                        }
                        break (node, answers);
                    }
                }
                prelude_done = true;
            };
            // A write before the node (a deferred step's) says nothing of the lease after it.
            self.lease_fresh = false;
            traced! { let span = self.node_span(); }
            let started = self.clock();
            let produced = $node_of!(self, driver, node, answers, span);
            self.timed(
                started,
                #[cfg(feature = "tracing")]
                &span,
            );
            match self.end(node, produced)? {
                Then::Stepped => Ok(Progress::Stepped),
                then => $part!(self.then(driver, then)),
            }
        }
    };
}

/// One run of a graph: from an input state, a paused checkpoint or a crashed run, to `end` or
/// the next pause.
pub(crate) struct Run<'g, G: Graph> {
    pub(crate) graph: &'g G,
    pub(crate) state: G::State,
    pub(crate) ctx: Ctx<G::State>,
    /// The main line: where the run stands (its cursor, breakpoints passed, answers, step
    /// budget, parent jump), stepped by the same machine as a fan-out's branches.
    pub(crate) line: Line<G::Node>,
    /// The most branches of one fan-out that run at once (`Builder::max_parallel_branches`).
    pub(crate) max_branches: usize,
    /// Whether branch steps are recorded as events (streaming).
    pub(crate) record: bool,
    /// Events of the last fan-out's branches, in branch order, while streaming.
    pub(crate) branch_events: VecDeque<Event<G::State>>,
    /// The run's tenure of its thread, with a store: the only writer of its checkpoints,
    /// shared with its fan-outs' branches and lent to its subgraph nodes' child runs, which keep
    /// its lease alive.
    pub(crate) tenure: Option<Arc<Tenure>>,
    /// The branches of a fan-out resumed from a checkpoint.
    pub(crate) saved_branches: Vec<BranchProgress<G::State>>,
    /// The last record this run wrote at a fan-out that holds its branches and nothing else
    /// besides the state (no answers, joined branches, parent jump or resume mark): its id and
    /// step. While it is the thread's head, the fan-out's journal patches it (see
    /// [`Journal::new`]'s `based`) instead of writing the fan-out's checkpoint whole again.
    fork_record: Option<(CheckpointId, u64)>,
    /// The last step's checkpoint is not written yet: a pause comes next with no user code
    /// before it (at an interrupt node or a breakpoint, see [`pause_follows`](Self::pause_follows)),
    /// and the pause's checkpoint, which holds the same state, is that step's write. Anything
    /// else the next step does (a node with a function, the end, a fan-out, a failure) writes
    /// it first.
    /// (The step's count and node, which the next step moves on.)
    deferred: Option<(u64, NodeName)>,
    /// The last step's checkpoint renewed the run's lease (and kept its ancestors' alive) and
    /// the next step follows at once (`until_over`): its lease is not due, and the clock is not
    /// read to find so. Taken by the next step's [`begin`](Self::begin); a step run on its
    /// own (a stream's) clears it first.
    lease_fresh: bool,
    pub(crate) finished: bool,
    /// How long the last node on the main line took (measured while streaming or tracing).
    pub(crate) last_duration: Duration,
    /// A copy of the last main-line node's update, for a stream that yields updates
    /// ([`StreamModes::UPDATES`]).
    pub(crate) shown: Option<Option<<G::State as GraphState>::Update>>,
    /// While streaming: the error the run failed with, yielded once the events queued before
    /// it (what the failed node emitted) have been.
    pub(crate) failure: Option<Error>,
    /// The run's `run` span, entered by every advance.
    #[cfg(feature = "tracing")]
    pub(crate) span: tracing::Span,
}

impl<'g, G: Graph> Run<'g, G> {
    pub(crate) fn new(graph: &'g G, input: G::State, limits: Limits, tenure: Option<Tenure>, record: bool) -> Self {
        let tenure = tenure.map(Arc::new);
        let thread = tenure.as_ref().map(|t| t.thread.clone());
        let mut line = Line::new(Cursor::Start, 0, limits.recursion, tenure.is_some());
        line.parent_node = tenure.as_ref().and_then(|t| t.parent_node);
        line.parent = tenure.as_ref().and_then(|t| t.parent.clone());
        let mut ctx = Ctx::new(START, thread.clone());
        ctx.limits = limits;
        ctx.tenure = tenure.clone();
        if record {
            ctx.child_steps = Some(Arc::new(ChildSteps::<G::State>::default()));
        }
        #[cfg(feature = "tracing")]
        let span = tracing::info_span!(
            target: "tea",
            "run",
            graph = graph.name(),
            thread = thread.as_ref().map(crate::vocab::name::ThreadId::as_str),
            call = tracing::field::Empty,
        );
        Run {
            graph,
            state: input,
            ctx,
            line,
            max_branches: limits.max_branches,
            record,
            branch_events: VecDeque::new(),
            tenure,
            saved_branches: Vec::new(),
            fork_record: None,
            deferred: None,
            lease_fresh: false,
            finished: false,
            last_duration: Duration::ZERO,
            shown: None,
            failure: None,
            #[cfg(feature = "tracing")]
            span,
        }
    }

    /// A run that continues from checkpoint `ckpt` (the thread's head, the one `tenure` holds).
    /// `resuming`: it resumes past the pause the checkpoint records.
    pub(crate) fn from_checkpoint(
        graph: &'g G,
        ckpt: Checkpoint<G::State>,
        resuming: bool,
        limits: Limits,
        tenure: Tenure,
        record: bool,
    ) -> Result<Self, Error> {
        let thread = tenure.thread.clone();
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
                Error::CorruptCheckpoint { thread, checkpoint: tenure.head().unwrap_or_default(), reason }
            }
            other => other,
        })?;
        let mut run = Run::new(graph, ckpt.state, limits, Some(tenure), record);
        run.ctx.branches = ckpt.joined;
        run.ctx.step = ckpt.step;
        run.line.first_step = ckpt.step;
        run.line.cursor = cursor;
        run.line.resuming = resuming;
        run.saved_branches = saved_branches;
        run.line.answers = ckpt.answers;
        run.finished = matches!(cursor, Cursor::Done);
        run.line.jump = ckpt.parent;
        Ok(run)
    }

    /// Makes a fresh run start at `node` rather than at `start`; `node`'s own breakpoint
    /// before it does not stop it.
    pub(crate) fn start_at(&mut self, node: G::Node) {
        self.line.cursor = Cursor::At(node);
        self.line.resuming = true;
    }

    /// Queues the steps of the child graph a subgraph node just ran (while streaming), ahead of
    /// the node's own step; whether there were any.
    pub(crate) fn queue_child_steps(&mut self) -> bool {
        let Some(sink) = child_steps(&self.ctx) else { return false };
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

    // The async form serves the tokio driver and the machine's tests.
    #[cfg(any(test, feature = "tokio"))]
    step_machine! {
        /// One step through driver `driver` (the async driver instruments the returned future
        /// with the run's span). After an error the run is over; a resumed run then puts its
        /// pause back.
        fn step;
        /// Steps through `driver` until the run pauses or reaches `end`.
        fn until_over;
        fn step_checked;
        fn step_inner;
        [async] [await] part: boxed_await, node: node_awaited
    }

    step_machine! {
        /// The step on a [`Driver::READY`] driver (the thread driver), without a future: the
        /// node is called and the rest polled once in place. After an error the run is over.
        fn step_ready;
        /// Steps on a [`Driver::READY`] driver until the run pauses or reaches `end`.
        fn until_over_ready;
        fn step_ready_checked;
        fn step_ready_inner;
        [] [] part: polled, node: node_now
    }

    /// Names the call that started this run (`invoke`, `resume`, `recover`, `stream`, …) in its
    /// `run` span.
    #[cfg(feature = "tracing")]
    pub(crate) fn call(&self, call: &'static str) {
        self.span.record("call", call);
    }

    /// The `paused`, `done` and `failed` events of an advance.
    #[cfg(feature = "tracing")]
    pub(crate) fn trace_progress(&self, result: &Result<Progress, Error>) {
        match result {
            Ok(Progress::Paused(record)) => {
                let (ids, kinds) = crate::format::interrupt::pauses(&record.pending);
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

    /// The first half of every step, for both drivers: what the driver must do before the
    /// step's node — claim the thread or renew the lease (then call again with
    /// `prelude_done`), settle a step that runs no node, or run the node, whose step is now
    /// counted. Waits for nothing: the driver fulfils the request its own way.
    pub(crate) fn begin(&mut self, prelude_done: bool) -> Result<Request<G::Node>, Error> {
        // A step left to the pause that follows at once renews nothing before it; an answered
        // interrupt node runs before the claim, whose write is its step (`answer_claims`).
        let fresh = !prelude_done && std::mem::take(&mut self.lease_fresh);
        if !prelude_done && self.deferred.is_none() && !self.answer_claims() {
            if self.claim_pending() {
                return Ok(Request::Claim);
            }
            if !fresh && self.lease_due() {
                return Ok(Request::Lease);
            }
        }
        Ok(match self.next()? {
            Next::Run(node) => Request::Node(node, std::mem::take(&mut self.line.answers)),
            Next::Settle(settle) => Request::Settle(settle),
        })
    }

    /// The second half of every step, for both drivers: applies what the step's node produced
    /// and says what is left ([`Then`]; a step of a run without a store saves nothing).
    #[inline]
    pub(crate) fn end(
        &mut self,
        node: G::Node,
        produced: Result<Produced<G::State, G::Node>, Error>,
    ) -> Result<Then, Error> {
        match self.finish(node, produced)? {
            Then::Save if self.tenure.is_none() => Ok(Then::Stepped),
            then => Ok(then),
        }
    }

    /// A step that runs no node: the end, a fan-out, or a breakpoint's pause.
    pub(crate) async fn settle<D: Driver<G>>(
        &mut self,
        driver: &D,
        settle: Settle<G::Node>,
    ) -> Result<Progress, Error> {
        match settle {
            Settle::Done => {
                if !self.finished {
                    // What `invoke`/`resume` report must survive a crash: the final
                    // checkpoint is flushed before they return. (Marked finished only once
                    // written: a failed final write still releases the lease.)
                    self.save(driver, true).await?;
                    self.finished = true;
                }
                if let Some(tenure) = &self.tenure {
                    // The resume is complete: nothing is left to roll back to.
                    tenure.settled();
                }
                Ok(Progress::Done)
            }
            Settle::Fork(source) => self.fork(driver, source).await,
            Settle::Pause(pending) => self.pause(driver, pending).await,
        }
    }

    /// What is left of a node's step once it is applied ([`Then`]).
    pub(crate) async fn then<D: Driver<G>>(&mut self, driver: &D, then: Then) -> Result<Progress, Error> {
        match then {
            Then::Stepped => Ok(Progress::Stepped),
            Then::Save => {
                if self.pause_follows() {
                    self.deferred = Some((self.ctx.step, self.ctx.node.clone()));
                } else {
                    self.save_step(driver).await?;
                }
                Ok(Progress::Stepped)
            }
            Then::Pause(pending) => self.pause(driver, pending).await,
        }
    }

    /// The `node` span of the node about to run, with its `started` event.
    #[cfg(feature = "tracing")]
    pub(crate) fn node_span(&self) -> tracing::Span {
        let span = tracing::debug_span!(
            target: "tea",
            "node",
            node = %self.ctx.node,
            step = self.ctx.step,
            duration_us = tracing::field::Empty,
        );
        trace::started(&span);
        span
    }

    /// When the node about to run started, when its duration is reported (streaming, tracing).
    pub(crate) fn clock(&self) -> Option<Instant> {
        if self.record || cfg!(feature = "tracing") {
            Some(Instant::now())
        } else {
            None
        }
    }

    /// Records how long the node that started at `started` took.
    pub(crate) fn timed(&mut self, started: Option<Instant>, #[cfg(feature = "tracing")] span: &tracing::Span) {
        if let Some(started) = started {
            self.last_duration = started.elapsed();
            traced! { span.record("duration_us", trace::micros(self.last_duration)); }
        }
    }

    /// Moves the cursor to the next node to run and counts its step; or says that the run is
    /// over, forks, or pauses at a breakpoint: the step machine every line shares
    /// ([`Line::next`]), on the run's state.
    #[inline]
    pub(crate) fn next(&mut self) -> Result<Next<G::Node>, Error> {
        self.line.next(self.graph, &mut self.ctx, &mut InPlace(&mut self.state))
    }

    /// Applies what `node` produced and moves the cursor past it: to where it routes, its
    /// fan-out, its sends' fan-out, or the end of a child graph; or to its pause. The step
    /// machine every line shares ([`Line::finish`]), on the run's state; the main line plans
    /// the fan-out of a node's sends.
    #[inline]
    pub(crate) fn finish(
        &mut self,
        node: G::Node,
        produced: Result<Produced<G::State, G::Node>, Error>,
    ) -> Result<Then, Error> {
        if let (Some(emitter), Ok(Produced::Ran { update, .. })) = (&self.ctx.emitter, &produced) {
            if emitter.modes.contains(StreamModes::UPDATES) {
                self.shown = Some(update.clone());
            }
        }
        Ok(match self.line.finish(self.graph, &mut self.ctx, &mut InPlace(&mut self.state), node, produced)? {
            Applied::Stepped => Then::Stepped,
            Applied::Save => Then::Save,
            Applied::Pause(pending) => Then::Pause(pending),
            Applied::Sends(sends) => {
                // The sends become the branches of the node's fan-out, checkpointed before any
                // of them runs: a recover or resume runs each exactly once.
                self.line.cursor = self.send(node, sends)?;
                Then::Save
            }
        })
    }

    /// Where the run goes after `node` sent `sends`: its fan-out, whose branches they become,
    /// or its join when it sent nothing.
    pub(crate) fn send(
        &mut self,
        node: G::Node,
        sends: Vec<(G::Node, <G::State as GraphState>::Update)>,
    ) -> Result<Cursor<G::Node>, Error> {
        let graph = self.graph;
        let (branches, join) = crate::machine::send::branches(graph, node, sends, &self.state, self.tenure.is_some())?;
        if branches.is_empty() {
            return Ok(Cursor::At(join));
        }
        self.saved_branches = branches;
        Ok(Cursor::Fork(node))
    }

    /// Whether the step just applied leaves its checkpoint to the pause that comes next without
    /// any user code before it: the line stands before an interrupt node with no answer yet
    /// (within the recursion limit), or before a breakpoint. That pause's checkpoint holds the
    /// same state, written durably, so what a crash could lose or repeat is what it was; the
    /// thread's history has the pause where the step's record and the pause's were. Only with
    /// a store that writes steps.
    fn pause_follows(&self) -> bool {
        let Cursor::At(node) = self.line.cursor else { return false };
        if self.tenure.is_none() || self.step_durability().is_none() || !self.line.pausable || self.line.pause_after {
            return false;
        }
        (!self.line.resuming && self.graph.interrupt_before(node))
            || (self.graph.asks_only(node)
                && self.line.answers.is_empty()
                && self.line.taken(&self.ctx) < self.line.budget)
    }

    /// Whether the run, still to claim its thread, stands before an interrupt node with its
    /// answer: that node runs no user code, so it runs first and the checkpoint of its step
    /// claims the thread (by the same compare-and-swap on the paused head: of two resumes of
    /// one token, one writes and the other gets `StaleResume`), one record instead of two.
    fn answer_claims(&self) -> bool {
        matches!(self.line.cursor, Cursor::At(node) if self.graph.asks_only(node))
            && !self.line.answers.is_empty()
            && self.claim_pending()
            && self.step_durability().is_some()
    }

    /// Writes the step left to a pause that did not come ([`pause_follows`](Self::pause_follows)).
    /// The step's own count and node, which the next step had moved on.
    async fn save_deferred<D: Driver<G>>(&mut self, driver: &D) -> Result<(), Error> {
        let Some((step, node)) = self.deferred.take() else { return Ok(()) };
        let next_step = std::mem::replace(&mut self.ctx.step, step);
        let next_node = std::mem::replace(&mut self.ctx.node, node);
        let saved = self.save_step(driver).await;
        self.ctx.step = next_step;
        self.ctx.node = next_node;
        saved
    }

    /// Node runs in this invocation.
    pub(crate) fn steps_taken(&self) -> u64 {
        self.line.taken(&self.ctx)
    }

    /// Runs the branches of the fan-out after `source` and merges them in declared order, or
    /// pauses if a branch paused.
    pub(crate) async fn fork<D: Driver<G>>(&mut self, driver: &D, source: G::Node) -> Result<Progress, Error> {
        let graph = self.graph;
        let Some(fork) = graph.fork(source) else {
            return Err(Error::NoRoute { node: graph.node_name(source), goto: None });
        };
        let env = Env {
            thread: self.ctx.thread.clone(),
            base_step: self.ctx.step,
            budget: self.line.budget.saturating_sub(self.steps_taken()),
            limit: self.line.limit,
            max_branches: self.max_branches,
            record: self.record,
            pausable: self.tenure.is_some(),
            tenure: self.ctx.tenure.clone(),
            parent_node: self.line.parent_node,
            parent: self.line.parent.clone(),
            shared: self.ctx.shared.clone(),
            context: self.ctx.context.clone(),
            memory: self.ctx.memory.clone(),
            emitter: self.ctx.emitter.clone(),
        };
        self.line.resuming = false;
        let saved = std::mem::take(&mut self.saved_branches);
        let keep_states = graph.reads_branches(fork.join);
        let tenure = self.tenure.clone();
        let head_before = tenure.as_ref().and_then(|t| t.head());
        let outcome = {
            // With a store (and unless only pauses are written), the branches' progress is
            // written as they run: the journal of pending writes.
            let journal = match &tenure {
                Some(tenure) if tenure.durability != Durability::OnPause => {
                    let branches = if saved.is_empty() {
                        fork.heads.iter().map(|&head| BranchProgress::fresh(graph.node_name(head))).collect()
                    } else {
                        saved.iter().map(|branch| branch.copy(false)).collect()
                    };
                    // The head is this run's record of this fan-out, with these branches (a
                    // send's or a resumed fan-out's): the journal's writes patch it.
                    let based = !saved.is_empty()
                        && self
                            .fork_record
                            .is_some_and(|(id, step)| tenure.head() == Some(id) && step == self.ctx.step);
                    Some(Journal::new(
                        tenure,
                        tenure.durability == Durability::EveryStep,
                        self.ctx.step,
                        &self.state,
                        graph.node_name(source),
                        branches,
                        based,
                        // One branch at a time: the next starts once this one is written.
                        self.max_branches > 1,
                    ))
                }
                _ => None,
            };
            let jot = journal.as_ref().map(|journal| (journal, &[][..]));
            let outcome = parallel::run_fork(driver, graph, fork, &self.state, &env, saved, keep_states, jot).await;
            (outcome, journal.as_ref().is_some_and(Journal::held_any))
        };
        let (outcome, held) = outcome;
        if held || tenure.as_ref().is_some_and(|t| t.head() != head_before) {
            // Branch nodes completed and are in the store (pending writes), or will be with the
            // checkpoint that ends the fan-out (finished branches left to it, `Journal::hold`).
            self.progressed();
        }
        let outcome = outcome?;
        match outcome {
            ForkOutcome::Paused { branches, interrupts, mut events } => {
                if self.record {
                    self.branch_events.extend(events.drain(..));
                }
                self.saved_branches = branches;
                self.pause(driver, interrupts).await
            }
            ForkOutcome::Failed { error, branches } => {
                // The branches that finished are kept: `recover` runs only the others.
                if !branches.is_empty() && self.tenure.as_ref().is_some_and(|t| t.durability != Durability::OnPause) {
                    self.saved_branches = branches;
                    // The branch's failure is what the run reports, even if this write fails.
                    let _ = self.save(driver, false).await;
                }
                Err(error)
            }
            ForkOutcome::Joined { mut branches, steps, taken } => {
                if self.steps_taken().saturating_add(taken) > self.line.budget {
                    return Err(Error::RecursionLimit { limit: self.line.limit });
                }
                self.ctx.step = self.ctx.step.saturating_add(steps);
                // Branch steps of earlier invocations count in the thread's step, not in this
                // invocation's recursion limit; the branches' retries (in `taken`, not in
                // `steps`) count in it, not in the thread's step.
                self.line.first_step = self.line.first_step.saturating_add(steps.saturating_sub(taken));
                self.ctx.retried.fetch_add(taken.saturating_sub(steps), std::sync::atomic::Ordering::Relaxed);
                let jump = parallel::take_jump(&mut branches)?;
                parallel::merge(graph, &mut self.state, &mut branches, fork.join)?;
                if self.record {
                    for branch in &mut branches {
                        self.branch_events.extend(branch.events.drain(..));
                    }
                }
                if let Some(jump) = jump {
                    // A branch routed the parent graph: the child's run ends here, its final
                    // checkpoint recording where the parent goes.
                    self.line.jump = Some(jump);
                    self.line.cursor = Cursor::Done;
                    self.save_step(driver).await?;
                    return Ok(Progress::Forked);
                }
                self.ctx.branches = branches.into_iter().filter_map(parallel::Branch::into_state).collect();
                self.line.cursor = Cursor::At(fork.join);
                self.save_step(driver).await?;
                Ok(Progress::Forked)
            }
        }
    }

    /// Where the run stands, as a step's checkpoint writes it: a fan-out's branches borrowed.
    pub(crate) fn position_ref(&self) -> AtRef<'_, G::State> {
        fork_ref(self.graph, self.line.cursor, &self.saved_branches).unwrap_or_else(|| AtRef::Position(self.position()))
    }

    /// Where the run stands, as a checkpoint records it.
    pub(crate) fn position(&self) -> Position<G::State> {
        let graph = self.graph;
        match self.line.cursor {
            Cursor::Start => Position::Start,
            Cursor::At(node) => Position::Before(graph.node_name(node)),
            Cursor::After(node, goto) => Position::After { node: graph.node_name(node), goto: target_of(graph, goto) },
            Cursor::Fork(source) => Position::Fork {
                source: graph.node_name(source),
                branches: self.saved_branches.iter().map(|b| b.copy(false)).collect(),
            },
            Cursor::Done => Position::Done,
        }
    }
}

/// The run's writes, each made by its [`Tenure`] through the run's driver: the claim of its
/// thread, its lease and its ancestors', the checkpoint of each step, its pause, and what it
/// writes back when it is abandoned.
impl<G: Graph> Run<'_, G> {
    /// Whether the run writes its lease before the next node ([`Tenure::lease_due`]): it has
    /// not claimed its thread yet, or half its lease (or an ancestor's) is gone.
    pub(crate) fn lease_due(&self) -> bool {
        !self.finished && self.tenure.as_deref().is_some_and(Tenure::lease_due)
    }

    /// Whether the run has yet to claim its thread ([`claim`](Self::claim)).
    #[inline]
    pub(crate) fn claim_pending(&self) -> bool {
        self.tenure.as_deref().is_some_and(Tenure::claim_pending)
    }

    /// Claims the run's thread before any node runs ([`Tenure::claim`]: of two runs of one
    /// thread exactly one goes on): the first step of every run with a store, so that a stream
    /// never polled writes nothing. One store call; nothing once claimed.
    pub(crate) async fn claim<D: Driver<G>>(&mut self, driver: &D) -> Result<(), Error> {
        let Some(tenure) = self.tenure.clone() else { return Ok(()) };
        if !tenure.claim_pending() {
            return Ok(());
        }
        let ckpt = self.checkpoint(&tenure);
        tenure.claim(driver, &ckpt, &self.ctx.node).await?;
        self.fork_record = plain_fork(&ckpt).then(|| tenure.head()).flatten().map(|id| (id, ckpt.step));
        Ok(())
    }

    /// Writes the run's lease when its own is due, or else only renews its ancestors'.
    pub(crate) async fn save_lease<D: Driver<G>>(&mut self, driver: &D) -> Result<(), Error> {
        let Some(tenure) = self.tenure.clone() else { return Ok(()) };
        if tenure.own_lease_due() {
            self.save(driver, false).await
        } else {
            tenure.keep_ancestors_alive(driver).await
        }
    }

    /// Checkpoints a node's step, as the run's durability says.
    pub(crate) async fn save_step<D: Driver<G>>(&mut self, driver: &D) -> Result<(), Error> {
        let Some(durable) = self.step_durability() else { return Ok(()) };
        // A step that routed to `end` writes the final checkpoint, which is always flushed.
        let done = matches!(self.line.cursor, Cursor::Done);
        // A write that claims the thread (an answered interrupt node's step, see
        // `answer_claims`) is a claim, and claims are not flushed: if a crash loses it, the
        // thread is paused where it was and the same token resumes it again.
        let claims = self.claim_pending();
        self.save(driver, (durable && !claims) || done).await?;
        self.finished = done;
        // Its checkpoint holds the lease renewed; the next step's `begin` comes before any
        // node runs.
        self.lease_fresh = !done;
        self.progressed();
        Ok(())
    }

    /// A node of the run completed and is in the store ([`Tenure::progressed`]).
    pub(crate) fn progressed(&mut self) {
        if let Some(tenure) = &self.tenure {
            tenure.progressed(&self.ctx.node);
        }
    }

    /// Whether a node's step is checkpointed, and flushed: `None` without a store or with
    /// [`Durability::OnPause`].
    pub(crate) fn step_durability(&self) -> Option<bool> {
        match self.tenure.as_ref()?.durability {
            Durability::OnPause => None,
            Durability::Buffered => Some(false),
            Durability::EveryStep => Some(true),
        }
    }

    /// A checkpoint of where the run stands (no pause): with the lease of `tenure` (the run's),
    /// renewed, unless the run is over.
    /// Borrows the run's state, answers and join branches: a step's checkpoint copies none.
    pub(crate) fn checkpoint(&self, tenure: &Tenure) -> CheckpointRef<'_, G::State> {
        // One reading of the clock for both (the lease runs from when the checkpoint is written).
        let now = tenure.clock.now_ms();
        let lease = (!matches!(self.line.cursor, Cursor::Done)).then(|| tenure.lease_from(now));
        CheckpointRef {
            step: self.ctx.step,
            state: &self.state,
            at: self.position_ref(),
            pending: Vec::new(),
            pause: None,
            paused_at: None,
            nonce: None,
            resumed: self.line.resuming,
            answers: &self.line.answers,
            joined: &self.ctx.branches,
            lease,
            parent: self.line.jump.as_ref(),
            written_at: Some(now),
        }
    }

    /// Writes a checkpoint of where the run stands ([`checkpoint`](Self::checkpoint)).
    pub(crate) async fn save<D: Driver<G>>(&mut self, driver: &D, durable: bool) -> Result<(), Error> {
        let Some(tenure) = self.tenure.clone() else { return Ok(()) };
        let ckpt = self.checkpoint(&tenure);
        let id = tenure.write(driver, &ckpt, durable, &self.ctx.node).await?;
        self.fork_record = plain_fork(&ckpt).then_some((id, ckpt.step));
        self.deferred = None;
        Ok(())
    }

    /// Pauses on `pending`: writes the paused checkpoint durably and records the pause.
    pub(crate) async fn pause<D: Driver<G>>(&mut self, driver: &D, pending: Vec<Interrupt>) -> Result<Progress, Error> {
        let Some(tenure) = self.tenure.clone() else {
            let node = pending.first().map_or_else(|| self.ctx.node.clone(), |p| p.node().clone());
            return Err(Error::PausedWithoutCheckpointer { graph: self.graph.name().to_owned(), node });
        };
        let id = tenure.next_id();
        let clock = &tenure.clock;
        let now = clock.now_ms();
        let at = fork_ref(self.graph, self.line.cursor, &self.saved_branches)
            .unwrap_or_else(|| AtRef::Position(self.position()));
        let ckpt = CheckpointRef {
            step: self.ctx.step,
            state: &self.state,
            at,
            pending,
            pause: Some(id),
            paused_at: Some(now / 1000),
            nonce: Some(clock.random_u64()),
            resumed: false,
            answers: &self.line.answers,
            joined: &self.ctx.branches,
            lease: None,
            parent: None,
            written_at: Some(now),
        };
        let node = self.ctx.node.clone();
        tenure.write(driver, &ckpt, true, &node).await?;
        // It holds the step before it, if that was left to it.
        self.deferred = None;
        // The pause is durable: nothing is left to roll back to.
        tenure.settled();
        // The token is the API's to make (`api::token`), from what the checkpoint records.
        let record = PauseRecord { pause: id, nonce: ckpt.nonce.unwrap_or_default(), pending: ckpt.pending };
        Ok(Progress::Paused(Box::new(record)))
    }

    /// Lets the run's thread go after a failure, through driver `driver` ([`Tenure::abandon`]).
    pub(crate) async fn abandon_with<D: Driver<G>>(&mut self, driver: &D) {
        if self.deferred.is_some() {
            // The step before the failure completed: it is kept (the failure is what the run
            // reports, even if this write fails).
            let _ = self.save_deferred(driver).await;
        }
        if let Some(tenure) = self.tenure.clone() {
            tenure.abandon(driver, self.finished).await;
        }
    }
}

/// Whether `ckpt` records a fan-out under way with its branches and nothing else a fan-out's
/// own checkpoint (`format::checkpoint::ForkCheckpoint`, which its journal writes) would not
/// hold: so that patching its branches, lease and time makes that checkpoint exactly.
fn plain_fork<S: GraphState>(ckpt: &CheckpointRef<'_, S>) -> bool {
    ckpt.at.branches().is_some_and(|branches| !branches.is_empty())
        && ckpt.pending.is_empty()
        && ckpt.pause.is_none()
        && !ckpt.resumed
        && ckpt.answers.is_empty()
        && ckpt.paused_at.is_none()
        && ckpt.nonce.is_none()
        && ckpt.joined.is_empty()
        && ckpt.parent.is_none()
        && ckpt.lease.is_some()
        && ckpt.written_at.is_some()
}

/// A fan-out under way at `cursor`, its branches `saved` borrowed; `None` elsewhere.
fn fork_ref<'a, G: Graph>(
    graph: &G,
    cursor: Cursor<G::Node>,
    saved: &'a [BranchProgress<G::State>],
) -> Option<AtRef<'a, G::State>> {
    match cursor {
        Cursor::Fork(source) => Some(AtRef::Fork { source: graph.node_name(source), branches: saved }),
        _ => None,
    }
}
