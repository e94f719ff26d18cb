//! Building and running a graph: the typestate [`Builder`] and the [`App`] it builds.
//!
//! An app without a checkpointer runs a graph that cannot pause and returns its final state. An
//! app with one ([`Checkpointer`]) runs each invocation as a *thread* whose checkpoints live in
//! the store, and returns an [`Outcome`]: done, or paused with a [`Resume`] token.

use crate::api::stream::Stream;
use crate::api::token;
use crate::format::checkpoint::{self, BranchAt, Checkpoint, Position, Target};
use crate::format::memo::{reply, MEMO};
use crate::format::token::{graph_id, issue, Interrupt, PauseRecord, Resume, SigningKey};
use crate::lease::{Host, Tenancy};
use crate::machine::persist::Persist;
use crate::machine::run::{Over, Run};
use crate::machine::step::apply_update;
use crate::machine::validate::{decode_for, identity};
use crate::model::graph::{Graph, PauseFree, SyncGraph};
use crate::model::node::Goto;
use crate::model::outcome::{Outcome, Snapshot, SubgraphSnapshot};
use crate::store::Checkpointer;
use crate::vocab::clock::{now, now_ms, random_u64};
use crate::vocab::error::{drop_payload, Error};
use crate::vocab::name::{CheckpointId, NodeName, ThreadId, START};
use crate::vocab::options::{
    Durability, Limits, DEFAULT_LEASE, DEFAULT_MAX_PARALLEL_BRANCHES, DEFAULT_RECURSION_LIMIT,
};
use crate::vocab::state::GraphState;
use crate::vocab::trace::{self, traced};
use serde_json::Value;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

/// The "no checkpointer" state of a [`Builder`] and [`App`]: runs return their final state
/// directly and cannot pause.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoCheckpointer;

/// Configures and builds an [`App`]; made by the graph's `builder()` (`ReviewFlow::builder()`).
///
/// The second parameter records whether a checkpointer was given. A graph that can pause does
/// not implement [`PauseFree`], so its `.build()` does not compile until `.checkpointer(…)` has
/// been called:
///
/// ```compile_fail,E0277
/// # use tea::prelude::*;
/// # #[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
/// # struct Doc { text: String }
/// # fn draft(_: &Doc) {}
/// # fn publish(_: &Doc) {}
/// graph! { Review for Doc { start -> draft; draft -> publish; publish -> end; interrupt_before publish; } }
/// let app = Review::builder().build(); // error: graph `Review` can pause, so it needs a checkpointer
/// ```
pub struct Builder<G: Graph, C = NoCheckpointer> {
    graph: G,
    checkpointer: C,
    recursion_limit: usize,
    durability: Durability,
    lease: Duration,
    max_branches: usize,
    key: Option<SigningKey>,
}

impl<G: Graph> Builder<G, NoCheckpointer> {
    /// A builder for `graph` with the default options.
    pub fn new(graph: G) -> Self {
        Builder {
            graph,
            checkpointer: NoCheckpointer,
            recursion_limit: DEFAULT_RECURSION_LIMIT,
            durability: Durability::EveryStep,
            lease: DEFAULT_LEASE,
            max_branches: DEFAULT_MAX_PARALLEL_BRANCHES,
            key: None,
        }
    }

    /// Builds an app without a checkpointer: `invoke` returns the final state directly.
    ///
    /// Compiles only for graphs that cannot pause ([`PauseFree`]).
    pub fn build(self) -> App<G, NoCheckpointer>
    where
        G: PauseFree,
    {
        App {
            graph: Arc::new(self.graph),
            checkpointer: Arc::new(self.checkpointer),
            recursion_limit: self.recursion_limit,
            durability: self.durability,
            lease: self.lease,
            max_branches: self.max_branches,
            key: self.key,
            parent_node: None,
            parent: None,
        }
    }
}

impl<G: Graph, C> Builder<G, C> {
    /// The most node runs one invocation (`invoke`, `resume`, `recover`) may take before it
    /// fails with [`Error::RecursionLimit`] (default [`DEFAULT_RECURSION_LIMIT`]). A thread that
    /// pauses and resumes many times gets the full limit on each resume.
    pub fn recursion_limit(mut self, limit: usize) -> Self {
        self.recursion_limit = limit;
        self
    }

    /// The most branches of one fan-out that run at the same time (default
    /// [`DEFAULT_MAX_PARALLEL_BRANCHES`], 128).
    ///
    /// Branches start on the calling thread and rayon's pool; when some are still waiting for a
    /// thread after a millisecond (their siblings block: a synchronous LLM or HTTP call, a sleep,
    /// a barrier), threads of their own start for them, up to this many branches at once, so
    /// branches that wait never starve each other: 100 branches that each block 20 ms take about
    /// 20 ms, not 100 × 20 ms divided by the number of cores. CPU-bound branches keep the
    /// machine's speedup. A fan-out of more branches than this runs them in waves.
    pub fn max_parallel_branches(mut self, max: usize) -> Self {
        self.max_branches = max.max(1);
        self
    }

    /// Keeps the app's threads in `store` ([`MemoryStore`](crate::MemoryStore), `SledStore`, or
    /// your own [`Checkpointer`]). Required for graphs that can pause; with it, `invoke` returns
    /// an [`Outcome`] rather than the final state.
    pub fn checkpointer<K: Checkpointer>(self, store: K) -> Builder<G, K> {
        Builder {
            graph: self.graph,
            checkpointer: store,
            recursion_limit: self.recursion_limit,
            durability: self.durability,
            lease: self.lease,
            max_branches: self.max_branches,
            key: self.key,
        }
    }
}

impl<G: Graph, C: Checkpointer> Builder<G, C> {
    /// When checkpoints are written (default [`Durability::EveryStep`]).
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// How long a running thread stays owned by its run without news from it (default
    /// [`DEFAULT_LEASE`], one minute).
    ///
    /// A run's checkpoints carry a lease on its thread, renewed as the run advances (at every
    /// checkpoint, and before a node once half the lease has gone). [`App::recover`] of a
    /// thread whose lease has not expired is [`Error::ThreadBusy`]: a live run is never taken
    /// over, so no node runs twice because two processes recovered one thread. A run that
    /// crashed is taken over once its lease expires; a run that failed releases it at once.
    /// Make the lease longer than the slowest node: a node that runs longer than the lease
    /// cannot renew it, and its thread may be recovered meanwhile (the running one then fails
    /// with [`Error::StaleResume`] at its next checkpoint).
    ///
    /// A subgraph node is not such a node: while it runs, its child graph's run renews the
    /// parent's lease (and each ancestor's, for a child of a child) as it renews its own, once
    /// half of it is gone, so a parent whose child runs longer than the lease in total stays
    /// owned as long as each node of the child is shorter than the lease. A child that finds
    /// its parent taken over meanwhile stops with [`Error::LeaseLost`]; a `recover` of a parent
    /// whose child's thread a live run owns is [`Error::ThreadBusy`] naming the child's thread.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Signs `Resume` tokens with HMAC-SHA256 under `key`, and refuses tokens that are unsigned,
    /// altered or signed under another key ([`Error::InvalidToken`]). The key must not be empty.
    pub fn sign_tokens(mut self, key: impl AsRef<[u8]>) -> Self {
        self.key = Some(SigningKey(key.as_ref().to_vec()));
        self
    }

    /// Builds the app.
    pub fn build(self) -> App<G, C> {
        App {
            graph: Arc::new(self.graph),
            checkpointer: Arc::new(self.checkpointer),
            recursion_limit: self.recursion_limit,
            durability: self.durability,
            lease: self.lease,
            max_branches: self.max_branches,
            key: self.key,
            parent_node: None,
            parent: None,
        }
    }
}

impl<G: Graph, C: fmt::Debug> fmt::Debug for Builder<G, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("graph", &self.graph.name())
            .field("checkpointer", &self.checkpointer)
            .field("recursion_limit", &self.recursion_limit)
            .field("durability", &self.durability)
            .field("lease", &self.lease)
            .field("signs_tokens", &self.key.is_some())
            .finish()
    }
}

/// A built graph, ready to run. `Send + Sync`: share one in an `Arc` across request handlers.
///
/// ```
/// # use tea::prelude::*;
/// # #[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
/// # struct Counter { #[reducer(sum)] n: u32 }
/// # fn bump(_: &Counter) -> CounterUpdate { Counter::update().n(1) }
/// # graph! { Twice for Counter { start -> bump; bump -> end if done; bump -> bump; } }
/// # fn done(s: &Counter) -> bool { s.n >= 2 }
/// let app = std::sync::Arc::new(Twice::builder().build());
/// let handle = { let app = app.clone(); std::thread::spawn(move || app.invoke(Counter::default())) };
/// assert_eq!(handle.join().unwrap().unwrap().n, 2);
/// ```
pub struct App<G: Graph, C = NoCheckpointer> {
    /// Shared with the async driver's blocking tasks, which run sync nodes off the runtime.
    pub(crate) graph: Arc<G>,
    /// Shared with the child graphs of subgraph nodes.
    pub(crate) checkpointer: Arc<C>,
    pub(crate) recursion_limit: usize,
    pub(crate) durability: Durability,
    pub(crate) lease: Duration,
    pub(crate) max_branches: usize,
    pub(crate) key: Option<SigningKey>,
    /// A subgraph node's child app: the node type of the parent graph, which `Command::parent`
    /// may route to.
    pub(crate) parent_node: Option<std::any::TypeId>,
    /// A child app's link to the run of its parent graph (the [`Host`](Host)
    /// of the run whose subgraph node made it): its runs keep that run's lease alive.
    pub(crate) parent: Option<Arc<Host>>,
}

impl<G: Graph, C> App<G, C> {
    /// An app running `graph`, a subgraph node's child, on its parent's store and options
    /// (`host`, the parent's run; `None`: the parent has no store). Its runs keep the parent's
    /// lease alive. Its tokens are never handed out: the parent lists its pauses in its own.
    pub(crate) fn for_child(
        graph: G,
        checkpointer: C,
        host: Option<&Arc<Host>>,
        parent_node: std::any::TypeId,
    ) -> Self {
        let (recursion_limit, durability, lease, max_branches) = match host {
            Some(h) => (h.limit, h.durability, h.lease, h.max_branches),
            None => (DEFAULT_RECURSION_LIMIT, Durability::EveryStep, DEFAULT_LEASE, DEFAULT_MAX_PARALLEL_BRANCHES),
        };
        let checkpointer = Arc::new(checkpointer);
        let graph = Arc::new(graph);
        let parent = host.cloned();
        App {
            graph,
            checkpointer,
            recursion_limit,
            durability,
            lease,
            max_branches,
            key: None,
            parent_node: Some(parent_node),
            parent,
        }
    }

    /// The graph this app runs.
    pub fn graph(&self) -> &G {
        &self.graph
    }

    /// The recursion limit in force.
    pub fn recursion_limit(&self) -> usize {
        self.recursion_limit
    }

    /// The limits its runs work within.
    pub(crate) fn limits(&self) -> Limits {
        Limits { recursion: self.recursion_limit, max_branches: self.max_branches }
    }
}

impl<G: Graph> App<G, NoCheckpointer> {
    /// Runs the graph from `start` to `end` on `input` and returns the final state.
    ///
    /// # Errors
    /// [`Error::NodeFailed`] / [`Error::NodePanicked`] naming the node, [`Error::NoRoute`] when no
    /// edge applies, [`Error::ConflictingWrites`] when parallel branches replace the same field,
    /// [`Error::RecursionLimit`] when the run takes too many steps.
    pub fn invoke(&self, input: G::State) -> Result<G::State, Error>
    where
        G: SyncGraph,
    {
        let mut run = Run::new(&*self.graph, input, self.limits(), None, false);
        traced! { run.call("invoke"); }
        match run.run_to_end()? {
            Over::Done => Ok(run.state),
            Over::Paused(record) => Err(token::without_store(&run, &record)),
        }
    }

    /// Runs the graph on `input`, yielding an [`Event::Step`](crate::Event::Step) after each
    /// node and [`Event::Done`](crate::Event::Done) at the end; a failing run yields its error
    /// and ends. A subgraph node's child steps come before the node's own step, named by their
    /// path (`review/check`).
    pub fn stream(&self, input: G::State) -> Stream<'_, G>
    where
        G: SyncGraph,
    {
        let run = Run::new(&*self.graph, input, self.limits(), None, true);
        traced! { run.call("stream"); }
        Stream::new(Ok(run))
    }
}

impl<G: Graph, C: Checkpointer> App<G, C> {
    /// Starts a new thread (with a random id) on `input` and runs it until it finishes or
    /// pauses.
    ///
    /// # Errors
    /// Those of the store-less `invoke`, and [`Error::Store`] when the store fails. A run that
    /// fails leaves its last checkpoint in the store: see [`recover`](Self::recover).
    pub fn invoke(&self, input: G::State) -> Result<Outcome<G::State>, Error>
    where
        G: SyncGraph,
    {
        self.invoke_on(ThreadId::random(), input)
    }

    /// Starts thread `thread` on `input`; [`Error::ThreadExists`] if it already has checkpoints,
    /// [`Error::InvalidThreadId`] if the id is empty or longer than [`ThreadId::MAX_LEN`] bytes.
    pub fn invoke_on(&self, thread: impl Into<ThreadId>, input: G::State) -> Result<Outcome<G::State>, Error>
    where
        G: SyncGraph,
    {
        let mut run = self.new_run(thread.into(), input, false)?;
        run.claim_now()?;
        let over = run.run_to_end()?;
        token::outcome(run, over)
    }

    /// Continues the paused thread `resume` names, with its answers and update.
    ///
    /// # Errors
    /// [`Error::InvalidToken`] (the app signs tokens and this one is unsigned, altered or signed
    /// under another key), [`Error::GraphMismatch`], [`Error::SchemaMismatch`],
    /// [`Error::StaleResume`] (the thread was resumed already: of two resumes of one token,
    /// exactly one proceeds), [`Error::CheckpointNotFound`], and the errors of a run. A run that
    /// fails after resuming puts the pause back: the same token can be used again.
    pub fn resume(&self, resume: Resume<G::State>) -> Result<Outcome<G::State>, Error>
    where
        G: SyncGraph,
    {
        // Top-down: the token is checked against this app and graph, the thread's head is read
        // and checked against the token (answers, timeouts, the update), the run claims the
        // thread by compare-and-swap on that head, the machine runs on the thread driver until
        // it pauses or ends, and the outcome (a new token at a pause) is made here.
        let thread = self.verify(&resume)?;
        let (head, bytes) = self.head(&thread)?;
        let mut run = self.resume_at(resume, head, bytes, false)?;
        run.claim_now()?;
        let over = run.run_to_end()?;
        token::outcome(run, over)
    }

    /// Continues thread `thread` from its last checkpoint after a run that stopped without
    /// pausing (a node failed or panicked, the process died). With [`Durability::EveryStep`]
    /// the nodes that completed are not run again. A paused thread returns its pause (with a
    /// fresh token); a finished one, its final state.
    ///
    /// A running thread is owned by its run through a lease ([`Builder::lease`]): recovering
    /// a thread whose run is alive — in this process or another — is [`Error::ThreadBusy`], and
    /// of several recovers of a stopped thread exactly one runs (it claims the thread by
    /// compare-and-swap on the checkpoint it read; the others get `ThreadBusy`). A run that
    /// failed released its lease, so it can be recovered at once; one whose process died is
    /// taken over when its lease expires.
    ///
    /// # Errors
    /// [`Error::CheckpointNotFound`] for a thread without checkpoints, [`Error::ThreadBusy`]
    /// while another run owns the thread (or the thread of the child graph a subgraph node
    /// continues: the error names that thread, and this recover releases its claim on
    /// `thread`), [`Error::StaleResume`] when a resume moved the thread
    /// on while this recover ran, [`Error::CorruptCheckpoint`] for a checkpoint that does not
    /// decode or records what this graph cannot do, and the errors of a run.
    pub fn recover(&self, thread: &ThreadId) -> Result<Outcome<G::State>, Error>
    where
        G: SyncGraph,
    {
        let (head, bytes) = self.head(thread)?;
        match self.recovery(thread, head, bytes)? {
            Recovery::Over(outcome) => Ok(outcome),
            Recovery::Run(mut run) => {
                run.claim_now()?;
                let over = run.run_to_end()?;
                token::outcome(run, over)
            }
        }
    }

    /// What recovering `thread`, whose head is checkpoint `head` (`bytes`), does: report where
    /// it stopped, or claim it with a run that continues it.
    pub(crate) fn recovery(
        &self,
        thread: &ThreadId,
        head: CheckpointId,
        bytes: Vec<u8>,
    ) -> Result<Recovery<'_, G>, Error> {
        let ckpt: Checkpoint<G::State> = decode_for(&*self.graph, &bytes, thread, head)?;
        if !ckpt.pending.is_empty() {
            let resume = issue(&identity(&*self.graph), thread, &PauseRecord::of(&ckpt), self.key.as_ref())?;
            return Ok(Recovery::Over(Outcome::Interrupted { state: ckpt.state, resume }));
        }
        if matches!(ckpt.at, Position::Done) {
            return Ok(Recovery::Over(Outcome::Done(ckpt.state)));
        }
        if let Some(lease) = ckpt.lease {
            let now = now_ms();
            if lease.until > now {
                return Err(Error::ThreadBusy {
                    thread: thread.clone(),
                    expires_in: Duration::from_millis(lease.until - now),
                });
            }
        }
        let resuming = ckpt.resumed;
        // Claim the thread before running anything, as a resume does: of several recovers of one
        // thread, exactly one runs its nodes; the others find its lease.
        let mut persist = self.persist(thread.clone(), Some(head), None, true);
        persist.recovering = true;
        let run = Run::from_checkpoint(&*self.graph, ckpt, resuming, self.limits(), persist, false)?;
        traced! { run.call("recover"); }
        Ok(Recovery::Run(run))
    }

    /// Starts thread `thread` at `node`, with `state` as the state: `node` runs first (its
    /// `interrupt_before` breakpoint does not stop it), then the run goes on as usual. This is
    /// how a front end continues from a checkpoint file ([`decode_checkpoint`]) in a new thread.
    ///
    /// # Errors
    /// [`Error::NoRoute`] (from `start`) when the graph has no node `node`, and those of
    /// [`invoke_on`](Self::invoke_on).
    pub fn invoke_at(
        &self,
        thread: impl Into<ThreadId>,
        node: &str,
        state: G::State,
    ) -> Result<Outcome<G::State>, Error>
    where
        G: SyncGraph,
    {
        let Some(at) = self.graph.node_named(node) else {
            return Err(Error::NoRoute { node: START, goto: Some(NodeName::from(node.to_owned())) });
        };
        let mut run = self.new_run(thread.into(), state, false)?;
        traced! { run.call("invoke_at"); }
        run.start_at(at);
        run.claim_now()?;
        let over = run.run_to_end()?;
        token::outcome(run, over)
    }

    /// Like [`invoke`](Self::invoke), as a stream of events ending with
    /// [`Event::Interrupted`](crate::Event::Interrupted) or [`Event::Done`](crate::Event::Done).
    pub fn stream(&self, input: G::State) -> Stream<'_, G>
    where
        G: SyncGraph,
    {
        Stream::new(self.new_run(ThreadId::random(), input, true))
    }

    /// Like [`invoke_on`](Self::invoke_on), as a stream of events.
    pub fn stream_on(&self, thread: impl Into<ThreadId>, input: G::State) -> Stream<'_, G>
    where
        G: SyncGraph,
    {
        Stream::new(self.new_run(thread.into(), input, true))
    }

    /// Like [`resume`](Self::resume), as a stream of events (an invalid token is the stream's
    /// one item). Dropping the stream before it pauses again or finishes abandons the resume:
    /// the pause is put back and the same token works again.
    pub fn stream_resume(&self, resume: Resume<G::State>) -> Stream<'_, G>
    where
        G: SyncGraph,
    {
        Stream::new(self.resume_run(resume, true))
    }

    /// The thread's latest checkpoint, or `None` if the thread has none.
    pub fn state(&self, thread: &ThreadId) -> Result<Option<Snapshot<G::State>>, Error> {
        let graph = self.graph.name();
        match trace::store_call("head", graph, Some(thread), || self.checkpointer.head(graph, thread))? {
            None => Ok(None),
            Some((id, bytes)) => self.snapshot(thread, id, &bytes).map(Some),
        }
    }

    /// Every checkpoint of the thread, newest first (empty if it has none).
    pub fn history(&self, thread: &ThreadId) -> Result<Vec<Snapshot<G::State>>, Error> {
        let graph = self.graph.name();
        let entries = trace::store_call("history", graph, Some(thread), || self.checkpointer.history(graph, thread))?;
        entries.iter().map(|(id, bytes)| self.snapshot(thread, *id, bytes)).collect()
    }

    /// The threads of this graph that have checkpoints in the store, sorted by id.
    ///
    /// # Errors
    /// [`Error::Store`] when the store fails.
    pub fn threads(&self) -> Result<Vec<ThreadId>, Error> {
        let graph = self.graph.name();
        trace::store_call("threads", graph, None, || self.checkpointer.threads(graph))
    }

    /// Deletes every checkpoint of `thread`; `Ok(false)` if it had none. The thread id is free
    /// again: [`invoke_on`](Self::invoke_on) can start it anew. A token of the deleted thread
    /// fails with [`Error::CheckpointNotFound`] while the id is unused, and with
    /// [`Error::StaleResume`] once it is reused: a token carries its pause's random nonce, which
    /// no pause of the new thread has.
    ///
    /// # Errors
    /// [`Error::Store`] when the store fails.
    pub fn delete(&self, thread: &ThreadId) -> Result<bool, Error> {
        let graph = self.graph.name();
        trace::store_call("delete", graph, Some(thread), || self.checkpointer.delete(graph, thread))
    }

    /// Deletes the oldest checkpoints of `thread`, keeping the newest `keep_last` (never fewer
    /// than one: the head stays, so the thread can still be resumed or recovered). Returns how
    /// many were deleted; [`history`](Self::history) lists what is left.
    ///
    /// # Errors
    /// [`Error::Store`] when the store fails.
    pub fn prune(&self, thread: &ThreadId, keep_last: usize) -> Result<usize, Error> {
        let graph = self.graph.name();
        trace::store_call("prune", graph, Some(thread), || self.checkpointer.prune(graph, thread, keep_last))
    }

    /// The app's checkpoint store.
    pub fn checkpointer(&self) -> &C {
        &self.checkpointer
    }

    pub(crate) fn persist(
        &self,
        thread: ThreadId,
        head: Option<CheckpointId>,
        rollback: Option<Vec<u8>>,
        claim: bool,
    ) -> Persist<'_> {
        let store: Arc<dyn Checkpointer> = self.checkpointer.clone();
        let graph = &*self.graph;
        let tenancy = Tenancy {
            thread: thread.clone(),
            graph: graph.name().to_owned(),
            graph_fingerprint: graph.fingerprint(),
            schema_fingerprint: graph.schema_fingerprint(),
            relet: checkpoint::relet::<G::State>,
            owner: random_u64(),
            lease_ms: u64::try_from(self.lease.as_millis()).unwrap_or(u64::MAX).max(1),
            head,
            parent: self.parent.clone(),
        };
        let host = Host::new(store, self.durability, self.lease, self.recursion_limit, self.max_branches, tenancy);
        Persist {
            parent_node: self.parent_node,
            host: Arc::new(host),
            store: &*self.checkpointer,
            thread,
            durability: self.durability,
            key: self.key.as_ref(),
            rollback,
            claim,
            recovering: false,
        }
    }

    pub(crate) fn new_run(&self, thread: ThreadId, input: G::State, record: bool) -> Result<Run<'_, G>, Error> {
        self.check_key()?;
        if thread.as_str().is_empty() {
            return Err(Error::InvalidThreadId { thread, reason: "it is empty" });
        }
        if thread.as_str().len() > ThreadId::MAX_LEN {
            return Err(Error::InvalidThreadId { thread, reason: "it is longer than 1024 bytes" });
        }
        let persist = self.persist(thread, None, None, true);
        let run = Run::new(&*self.graph, input, self.limits(), Some(persist), record);
        traced! { run.call(if record { "stream" } else { "invoke" }); }
        Ok(run)
    }

    /// A run must not start (and write anything) when it could not sign its token at a pause.
    fn check_key(&self) -> Result<(), Error> {
        match &self.key {
            Some(key) if key.0.is_empty() => Err(Error::InvalidToken {
                reason: "the app's token signing key is empty; give `.sign_tokens` a non-empty key",
            }),
            _ => Ok(()),
        }
    }

    pub(crate) fn head(&self, thread: &ThreadId) -> Result<(CheckpointId, Vec<u8>), Error> {
        let graph = self.graph.name();
        trace::store_call("head", graph, Some(thread), || self.checkpointer.head(graph, thread))?
            .ok_or_else(|| Error::CheckpointNotFound { thread: thread.clone() })
    }

    fn resume_run(&self, resume: Resume<G::State>, record: bool) -> Result<Run<'_, G>, Error> {
        let thread = self.verify(&resume)?;
        let (head, bytes) = self.head(&thread)?;
        self.resume_at(resume, head, bytes, record)
    }

    /// The thread `resume` continues, once the token is checked against this app and graph.
    pub(crate) fn verify(&self, resume: &Resume<G::State>) -> Result<ThreadId, Error> {
        self.check_key()?;
        resume.verify(self.key.as_ref())?;
        let graph = &*self.graph;
        let token = &resume.token;
        if token.graph != graph_id(graph.name()) {
            return Err(Error::GraphMismatch { expected: graph.name().to_owned(), found: None });
        }
        let schema_changed = token.schema_fingerprint != graph.schema_fingerprint();
        if schema_changed || token.graph_fingerprint != graph.fingerprint() {
            return Err(Error::SchemaMismatch {
                graph: graph.name().to_owned(),
                thread: token.thread.clone(),
                what: if schema_changed { "state struct" } else { "graph" },
            });
        }
        Ok(token.thread.clone())
    }

    /// A run that resumes `resume` from the thread's head, checkpoint `head` (`bytes`).
    pub(crate) fn resume_at(
        &self,
        resume: Resume<G::State>,
        head: CheckpointId,
        bytes: Vec<u8>,
        record: bool,
    ) -> Result<Run<'_, G>, Error> {
        let graph = &*self.graph;
        let token = &resume.token;
        let thread = token.thread.clone();
        let mut ckpt: Checkpoint<G::State> = decode_for(graph, &bytes, &thread, head)?;
        if ckpt.pending.is_empty() || ckpt.pause != Some(token.pause) || ckpt.nonce.unwrap_or_default() != token.nonce {
            return Err(Error::StaleResume { thread });
        }
        let continuing = match_answers(graph, &mut ckpt, &resume)?;
        let now = now();
        if let Some(expired) = continuing.iter().find(|p| p.expires_at.is_some_and(|at| at < now)) {
            return Err(Error::Expired { thread, node: expired.node().clone() });
        }
        traced! { let resume_updated = resume.update.is_some(); }
        if let Some(update) = resume.update {
            // A refused update changes nothing: the token stays good.
            let refused = |error| match error {
                Error::NodeFailed { node, source } => Error::BadResumeValue {
                    node,
                    expected: "an update that fits the state".to_owned(),
                    reason: source.to_string(),
                },
                other => other,
            };
            if let Position::Fork { branches, .. } = &mut ckpt.at {
                for branch in branches.iter_mut().filter(|b| !matches!(b.at, BranchAt::Joined)) {
                    apply_update(graph, &mut branch.state, update.clone(), &token.node).map_err(refused)?;
                }
            }
            apply_update(graph, &mut ckpt.state, update, &token.node).map_err(refused)?;
        }
        ckpt.pending.clear();
        ckpt.pause = None;
        ckpt.paused_at = None;
        ckpt.nonce = None;
        traced! { let (pause, answers, updated) = (token.pause, resume.answers.len(), resume_updated); }
        let persist = self.persist(thread, Some(head), Some(bytes), true);
        let run = Run::from_checkpoint(graph, ckpt, true, self.limits(), persist, record)?;
        traced! {
            run.call(if record { "stream_resume" } else { "resume" });
            run.span.in_scope(|| tracing::info!(target: "tea", pause, answers, update = updated, "resumed"));
        }
        Ok(run)
    }

    pub(crate) fn snapshot(
        &self,
        thread: &ThreadId,
        id: CheckpointId,
        bytes: &[u8],
    ) -> Result<Snapshot<G::State>, Error> {
        let ckpt: Checkpoint<G::State> = decode_for(&*self.graph, bytes, thread, id)?;
        let next = next_nodes(&*self.graph, &ckpt);
        let subgraphs = paused_children(&ckpt);
        Ok(Snapshot { state: ckpt.state, next, interrupts: ckpt.pending, checkpoint: id, step: ckpt.step, subgraphs })
    }
}

/// A checkpoint of `graph` standing before `node` with `state`, in the envelope format of the
/// stores (magic, version, graph name, fingerprints, checksum): what a front end writes as a
/// checkpoint file (a YAML agent's `checkpoint.save`). [`decode_checkpoint`] reads it back.
///
/// # Errors
/// [`Error::Store`] when the state does not serialize or is over the size limit.
pub fn encode_checkpoint<G: Graph>(graph: &G, node: &NodeName, state: &G::State) -> Result<Vec<u8>, Error> {
    let ckpt = Checkpoint {
        step: 0,
        state: state.clone(),
        at: Position::Before(node.clone()),
        pending: Vec::new(),
        pause: None,
        paused_at: None,
        nonce: None,
        resumed: false,
        answers: Vec::new(),
        joined: Vec::new(),
        lease: None,
        parent: None,
    };
    checkpoint::encode(&identity(graph), &ckpt)
}

/// Reads a checkpoint of `graph` (a file written by [`encode_checkpoint`], or a checkpoint a
/// store wrote): the node it stands at and its state. A checkpoint after a node (an
/// `interrupt_after` pause) names that node. `source` names where the bytes came from in
/// errors (a path).
///
/// # Errors
/// [`Error::CorruptCheckpoint`] for bytes that are not a checkpoint or one that stands at no
/// node (before the start, at the end, inside a fan-out), [`Error::GraphMismatch`] for another
/// graph's, [`Error::SchemaMismatch`] for another shape of this graph's.
pub fn decode_checkpoint<G: Graph>(graph: &G, bytes: &[u8], source: &str) -> Result<(NodeName, G::State), Error> {
    let label = ThreadId::from(source.to_owned());
    let ckpt: Checkpoint<G::State> = decode_for(graph, bytes, &label, 0)?;
    let node = match ckpt.at {
        Position::Before(node) | Position::After { node, .. } => node,
        Position::Start | Position::Done | Position::Fork { .. } => {
            return Err(Error::CorruptCheckpoint {
                thread: label,
                checkpoint: 0,
                reason: "it does not stand at a node (it is before the start, at the end or inside a fan-out)"
                    .to_owned(),
            })
        }
    };
    if graph.node_named(node.as_str()).is_none() {
        return Err(Error::CorruptCheckpoint {
            thread: label,
            checkpoint: 0,
            reason: format!("it names node `{node}`, which graph `{}` does not have", graph.name()),
        });
    }
    Ok((node, ckpt.state))
}

/// Gives each pending pause of `ckpt` its answer from `resume` and marks what continues: every
/// breakpoint, and every pause that waits for an answer and got one. Returns the continuing
/// pauses. Nothing is changed in the store; a bad answer leaves the token valid.
fn match_answers<G: Graph>(
    graph: &G,
    ckpt: &mut Checkpoint<G::State>,
    resume: &Resume<G::State>,
) -> Result<Vec<Interrupt>, Error> {
    let bad = |expected: &str, reason: String| Error::BadResumeValue {
        node: resume.node().clone(),
        expected: expected.to_owned(),
        reason,
    };
    let ids = || ckpt.pending.iter().map(|p| format!("`{}`", p.id())).collect::<Vec<_>>().join(", ");
    if let Some(reason) = &resume.answer_error {
        return Err(bad("a value that serializes", reason.clone()));
    }
    let mut answered: Vec<(String, serde_json::Value)> = Vec::new();
    for (id, value) in &resume.answers {
        let id = match id {
            Some(id) => id.clone(),
            None => {
                let asks: Vec<&Interrupt> = ckpt.pending.iter().filter(|p| p.needs_answer()).collect();
                match asks.as_slice() {
                    [one] => one.id().to_owned(),
                    [] => {
                        return Err(bad(
                            "no answer",
                            format!("the pending pauses ({}) are breakpoints, which take no answer; continue with `.update(…)` or nothing", ids()),
                        ))
                    }
                    _ => {
                        return Err(bad(
                            "answers by id",
                            format!("several pauses wait for answers ({}); answer each with `.answer_to(id, value)`", ids()),
                        ))
                    }
                }
            }
        };
        let Some(pause) = ckpt.pending.iter().find(|p| p.id() == id) else {
            return Err(bad(
                "an answer to a pending pause",
                format!("no pending pause has id `{id}`; pending: {}", ids()),
            ));
        };
        if !pause.needs_answer() {
            return Err(bad(
                "no answer",
                format!("pause `{id}` is a breakpoint, which takes no answer; continue with `.update(…)` or nothing"),
            ));
        }
        if answered.iter().any(|(a, _)| *a == id) {
            return Err(bad("one answer per pause", format!("pause `{id}` is answered twice")));
        }
        if let Some(node) = graph.node_named(pause.node().as_str()) {
            if let Err((expected, reason)) = graph.check_answer(node, value) {
                return Err(Error::BadResumeValue {
                    node: pause.node().clone(),
                    expected: expected.to_owned(),
                    reason,
                });
            }
        }
        answered.push((id, value.clone()));
    }
    let answer_of = |pause: &Interrupt| answered.iter().find(|(id, _)| id == pause.id()).map(|(_, v)| v.clone());
    let mut continuing = Vec::new();
    match &mut ckpt.at {
        Position::Fork { branches, .. } => {
            for branch in branches.iter_mut() {
                let Some(pause) = &branch.pending else { continue };
                if pause.child.is_some() {
                    // A subgraph node's child paused in this branch: what continues is the
                    // child's, which the node hands over when it runs again.
                    let pauses: Vec<Interrupt> = std::iter::once(pause).chain(&branch.more_pending).cloned().collect();
                    if let Some(reply) = reply(&pauses, &answer_of, &mut continuing) {
                        branch.answers.push(reply);
                        branch.resume = true;
                    }
                    continue;
                }
                if !pause.needs_answer() {
                    branch.resume = true;
                } else if let Some(value) = answer_of(pause) {
                    branch.answers.push(value);
                    branch.resume = true;
                }
                if branch.resume {
                    continuing.push(pause.clone());
                }
            }
            if continuing.is_empty() {
                return Err(bad(
                    "an answer",
                    format!("every pending pause waits for an answer ({}); answer at least one", ids()),
                ));
            }
        }
        _ => {
            let Some(pause) = ckpt.pending.first() else { return Ok(continuing) };
            if pause.child.is_some() {
                let Some(reply) = reply(&ckpt.pending, &answer_of, &mut continuing) else {
                    return Err(bad(
                        "an answer",
                        format!("every pending pause waits for an answer ({}); answer at least one", ids()),
                    ));
                };
                ckpt.answers.push(reply);
                return Ok(continuing);
            }
            if pause.needs_answer() {
                let Some(value) = answer_of(pause) else {
                    return Err(bad(
                        "an answer",
                        format!("pause `{}` waits for an answer: resume with `.answer(value)`", pause.id()),
                    ));
                };
                ckpt.answers.push(value);
            }
            continuing.push(pause.clone());
        }
    }
    Ok(continuing)
}

/// What `recover` found: a thread that is over (paused or finished), or a run that continues it.
#[allow(clippy::large_enum_variant)] // made once per `recover`, and moved at once
pub(crate) enum Recovery<'a, G: Graph> {
    Over(Outcome<G::State>),
    Run(Run<'a, G>),
}

/// The nodes that run next from a checkpoint (by the graph's routing on its state, for a node
/// that ran and has not been routed from).
fn next_nodes<G: Graph>(graph: &G, ckpt: &Checkpoint<G::State>) -> Vec<NodeName> {
    let route = |node: &NodeName, goto: &Option<Target>, state: &G::State| -> Vec<NodeName> {
        match goto {
            Some(Target::Node(next)) => return vec![next.clone()],
            Some(Target::End) => return Vec::new(),
            None => {}
        }
        let Some(node) = graph.node_named(node.as_str()) else { return Vec::new() };
        if let Some(fork) = graph.fork(node) {
            return fork.heads.iter().map(|&h| graph.node_name(h)).collect();
        }
        match catch_unwind(AssertUnwindSafe(|| graph.route(node, state))) {
            Ok(Some(Goto::Node(next))) => vec![graph.node_name(next)],
            Ok(_) => Vec::new(),
            Err(payload) => {
                drop_payload(payload);
                Vec::new()
            }
        }
    };
    match &ckpt.at {
        Position::Start => match catch_unwind(AssertUnwindSafe(|| graph.start(&ckpt.state))) {
            Ok(Some(Goto::Node(next))) => vec![graph.node_name(next)],
            Ok(_) => Vec::new(),
            Err(payload) => {
                drop_payload(payload);
                Vec::new()
            }
        },
        Position::Before(node) => vec![node.clone()],
        Position::After { node, goto } => route(node, goto, &ckpt.state),
        Position::Fork { source, branches } if branches.is_empty() => route(source, &None, &ckpt.state),
        Position::Fork { branches, .. } => branches
            .iter()
            .flat_map(|b| match &b.at {
                BranchAt::Joined => Vec::new(),
                BranchAt::Before(node) | BranchAt::Start(node) => vec![node.clone()],
                BranchAt::After { node, goto } => route(node, goto, &b.state),
            })
            .collect(),
        Position::Done => Vec::new(),
    }
}

impl<G: Graph, C: fmt::Debug> fmt::Debug for App<G, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("App")
            .field("graph", &self.graph.name())
            .field("checkpointer", &self.checkpointer)
            .field("recursion_limit", &self.recursion_limit)
            .field("durability", &self.durability)
            .field("lease", &self.lease)
            .field("signs_tokens", &self.key.is_some())
            .finish()
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
