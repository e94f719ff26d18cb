//! Building and running a graph: the typestate [`Builder`] and the [`App`] it builds.
//!
//! An app without a checkpointer runs a graph that cannot pause and returns its final state. An
//! app with one ([`Checkpointer`]) runs each invocation as a *thread* whose checkpoints live in
//! the store, and returns an [`Outcome`]: done, or paused with a [`Resume`] token.

use crate::api::stream::Stream;
use crate::api::token;
use crate::format::checkpoint::{self, Checkpoint, Position};
use crate::format::token::{issue, PauseRecord, Resume, SigningKey};
use crate::lease::{Host, Tenancy};
use crate::machine::run::{Over, Persist, Run};
use crate::machine::validate::{decode_for, identity};
use crate::model::graph::{Graph, PauseFree, SyncGraph};
use crate::model::outcome::{Outcome, Snapshot};
use crate::model::scope::{Emitter, Shared};
use crate::store::Checkpointer;
use crate::vocab::clock::{now_ms, random_u64};
use crate::vocab::error::Error;
use crate::vocab::name::{CheckpointId, NodeName, ThreadId, START};
use crate::vocab::options::{
    Durability, Limits, RunContext, RunOptions, DEFAULT_LEASE, DEFAULT_MAX_PARALLEL_BRANCHES, DEFAULT_RECURSION_LIMIT,
};
use crate::vocab::policy::StreamModes;
use crate::vocab::trace::{self, traced};
use std::fmt;
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
    sync_inline: bool,
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
            sync_inline: false,
        }
    }

    /// Builds an app without a checkpointer: `invoke` returns the final state directly.
    ///
    /// Compiles only for graphs that cannot pause ([`PauseFree`]).
    pub fn build(self) -> App<G, NoCheckpointer>
    where
        G: PauseFree,
    {
        let graph = Arc::new(self.graph);
        App {
            shared: Arc::new(Shared::new(graph.clone())),
            graph,
            checkpointer: Arc::new(self.checkpointer),
            recursion_limit: self.recursion_limit,
            durability: self.durability,
            lease: self.lease,
            max_branches: self.max_branches,
            key: self.key,
            sync_inline: self.sync_inline,
            parent_node: None,
            parent: None,
            context: None,
            modes: StreamModes::default(),
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
            sync_inline: self.sync_inline,
        }
    }

    /// Runs the graph's sync nodes right on the tokio runtime's thread under the async API
    /// (`invoke_async` and its kin), on the run's own state, instead of on tokio's blocking pool
    /// with a copy of the state (the default). Worth it for graphs whose sync nodes only compute
    /// something quick — a prompt built, a field parsed, a route chosen — and whose state is
    /// large or whose steps are many: no copy of the state, no task, no thread hop per node.
    ///
    /// Only for such nodes: a sync node run inline holds the runtime's thread for as long as
    /// it runs, so one that blocks (a blocking HTTP client, a file read, `std::thread::sleep`,
    /// a long computation) stalls every task on that thread, and a blocking call that enters
    /// a runtime of its own (`reqwest::blocking`) panics there. Keep those on the pool, or
    /// make them `async` nodes. The children of subgraph nodes run their sync nodes as their
    /// parent's app says, at any depth. The blocking API (`invoke`, …) is not affected: it runs
    /// every node on the calling thread anyway.
    pub fn sync_nodes_inline(mut self, inline: bool) -> Self {
        self.sync_inline = inline;
        self
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
        let graph = Arc::new(self.graph);
        App {
            shared: Arc::new(Shared::new(graph.clone())),
            graph,
            checkpointer: Arc::new(self.checkpointer),
            recursion_limit: self.recursion_limit,
            durability: self.durability,
            lease: self.lease,
            max_branches: self.max_branches,
            key: self.key,
            sync_inline: self.sync_inline,
            parent_node: None,
            parent: None,
            context: None,
            modes: StreamModes::default(),
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
            .field("sync_nodes_inline", &self.sync_inline)
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
    /// The async driver runs sync nodes inline ([`Builder::sync_nodes_inline`]).
    pub(crate) sync_inline: bool,
    /// A subgraph node's child app: the node type of the parent graph, which `Command::parent`
    /// may route to.
    pub(crate) parent_node: Option<std::any::TypeId>,
    /// A child app's link to the run of its parent graph (the [`Host`](Host)
    /// of the run whose subgraph node made it): its runs keep that run's lease alive.
    pub(crate) parent: Option<Arc<Host>>,
    /// What its runs share: the graph for nodes run on a thread of their own, the node cache.
    pub(crate) shared: Arc<Shared>,
    /// The context of this app's runs ([`App::with_context`]).
    pub(crate) context: Option<RunContext>,
    /// The modes of this call's streams ([`RunOptions::stream_modes`]).
    pub(crate) modes: StreamModes,
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
            shared: Arc::new(Shared::new(graph.clone())),
            graph,
            checkpointer,
            recursion_limit,
            durability,
            lease,
            max_branches,
            key: None,
            // Inherited from the parent's driver when it runs the child (`drive::tokio`).
            sync_inline: false,
            parent_node: Some(parent_node),
            parent,
            // Set from the parent run's `Ctx` (`subgraph`).
            context: None,
            modes: StreamModes::default(),
        }
    }

    /// This app, sharing its graph, store, options and node cache, whose runs have `context`:
    /// a value that is not state — a user id, a model name, an API client, a deadline — which
    /// every node reads with [`Ctx::context`](crate::Ctx::context), and the child runs of its
    /// subgraph nodes too. A context is never written to a checkpoint: give it again to the
    /// app that resumes or recovers the thread. A graph that declares its context type
    /// (`graph!`'s `context T;`) refuses a run without one of that type
    /// ([`Error::MissingContext`]). Cheap: a few reference counts.
    ///
    /// ```
    /// # use tea::prelude::*;
    /// # #[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
    /// # struct Chat { user: String }
    /// struct Session { user_id: String }
    ///
    /// fn greet(_: &Chat, ctx: &Ctx<Chat>) -> Result<ChatUpdate, tea::BoxError> {
    ///     Ok(Chat::update().user(ctx.context::<Session>()?.user_id.clone()))
    /// }
    /// graph! { Greeter for Chat { context Session; start -> greet; greet -> end; } }
    ///
    /// let app = Greeter::builder().build();
    /// let out = app.with_context(Session { user_id: "ada".into() }).invoke(Chat::default())?;
    /// assert_eq!(out.user, "ada");
    /// # Ok::<(), tea::Error>(())
    /// ```
    pub fn with_context<T: std::any::Any + Send + Sync>(&self, context: T) -> App<G, C> {
        App { context: Some(RunContext::new(context)), ..self.copy() }
    }

    /// A copy of this app: its graph, store, options, context and node cache shared.
    fn copy(&self) -> App<G, C> {
        App {
            graph: self.graph.clone(),
            checkpointer: self.checkpointer.clone(),
            recursion_limit: self.recursion_limit,
            durability: self.durability,
            lease: self.lease,
            max_branches: self.max_branches,
            key: self.key.clone(),
            parent_node: self.parent_node,
            parent: self.parent.clone(),
            sync_inline: self.sync_inline,
            shared: self.shared.clone(),
            context: self.context.clone(),
            modes: self.modes,
        }
    }

    /// This app running `graph` instead: an equal graph with other settings of its own (a
    /// YAML agent's per-call cancel flag), on the same store, with the same options, context
    /// and node cache.
    #[doc(hidden)]
    pub fn with_graph(&self, graph: G) -> App<G, C> {
        let graph = Arc::new(graph);
        App { shared: Arc::new(self.shared.with_graph(graph.clone())), graph, ..self.copy() }
    }

    /// The graph this app runs.
    pub fn graph(&self) -> &G {
        &self.graph
    }

    /// The recursion limit in force.
    pub fn recursion_limit(&self) -> usize {
        self.recursion_limit
    }

    /// Gives `run` what this app's runs share (its graph, its node cache), this call's context,
    /// and — when it streams — where its nodes' emits go; refuses it if the graph declares a
    /// context type this call did not supply. Allocates only for a stream.
    pub(crate) fn attach_cache_context_emitter(&self, run: &mut Run<'_, G>) -> Result<(), Error> {
        self.attach_cache_context_emitter_with(run, &RunOptions::new())
    }

    /// [`attach_cache_context_emitter`](Self::attach_cache_context_emitter) with this call's `options` over the app's.
    pub(crate) fn attach_cache_context_emitter_with(
        &self,
        run: &mut Run<'_, G>,
        options: &RunOptions,
    ) -> Result<(), Error> {
        let context = self.context.as_ref();
        if let Some((type_id, expected)) = self.graph.context_type() {
            if !context.is_some_and(|context| context.is(type_id)) {
                return Err(Error::MissingContext {
                    graph: self.graph.name().to_owned(),
                    node: None,
                    expected,
                    found: context.map(RunContext::type_name),
                });
            }
        }
        run.ctx.shared = Some(self.shared.clone());
        run.ctx.context = context.cloned();
        if run.record {
            run.ctx.emitter = Some(Arc::new(Emitter::new(options.stream_modes.unwrap_or(self.modes))));
        }
        Ok(())
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
        // Scoped in place: a run is large, and this is every call's path.
        let mut run = Run::new(&*self.graph, input, self.limits(), None, false);
        self.attach_cache_context_emitter(&mut run)?;
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
        let mut run = Run::new(&*self.graph, input, self.limits(), None, true);
        let run = self.attach_cache_context_emitter(&mut run).map(|()| run);
        traced! { if let Ok(run) = &run { run.call("stream"); } }
        Stream::new(run)
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
        self.invoke_on_now(thread.into(), input)
    }

    /// [`invoke`](Self::invoke) with `options` in force for this call (its durability, for
    /// one: a throw-away run with [`Durability::OnPause`] on an app that checkpoints every step).
    ///
    /// # Errors
    /// Those of [`invoke`](Self::invoke).
    pub fn invoke_with(&self, input: G::State, options: impl Into<RunOptions>) -> Result<Outcome<G::State>, Error>
    where
        G: SyncGraph,
    {
        self.with_options(options.into()).invoke_on(ThreadId::random(), input)
    }

    /// [`invoke_on`](Self::invoke_on) with `options` in force for this call.
    ///
    /// # Errors
    /// Those of [`invoke_on`](Self::invoke_on).
    pub fn invoke_on_with(
        &self,
        thread: impl Into<ThreadId>,
        input: G::State,
        options: impl Into<RunOptions>,
    ) -> Result<Outcome<G::State>, Error>
    where
        G: SyncGraph,
    {
        self.with_options(options.into()).invoke_on(thread, input)
    }

    /// [`resume`](Self::resume) with `options` in force for this call (its pause, if it pauses
    /// again, and its end are flushed whatever the durability).
    ///
    /// # Errors
    /// Those of [`resume`](Self::resume).
    pub fn resume_with(
        &self,
        resume: Resume<G::State>,
        options: impl Into<RunOptions>,
    ) -> Result<Outcome<G::State>, Error>
    where
        G: SyncGraph,
    {
        self.with_options(options.into()).resume(resume)
    }

    /// [`recover`](Self::recover) with `options` in force for this call.
    ///
    /// # Errors
    /// Those of [`recover`](Self::recover).
    pub fn recover_with(&self, thread: &ThreadId, options: impl Into<RunOptions>) -> Result<Outcome<G::State>, Error>
    where
        G: SyncGraph,
    {
        self.with_options(options.into()).recover(thread)
    }

    /// Continues the paused thread `resume` names, with its answers and update.
    ///
    /// # Errors
    /// [`Error::InvalidToken`] (the app signs tokens and this one is unsigned, altered or signed
    /// under another key), [`Error::GraphMismatch`], [`Error::SchemaMismatch`],
    /// [`Error::StaleResume`] (the thread was resumed already: of two resumes of one token,
    /// exactly one proceeds), [`Error::CheckpointNotFound`], and the errors of a run. A run that
    /// fails after resuming puts the pause back, so the same token can be used again, unless a
    /// node after the one it paused at had completed: the thread then stays there for
    /// [`recover`](Self::recover), and the token is spent.
    pub fn resume(&self, resume: Resume<G::State>) -> Result<Outcome<G::State>, Error>
    where
        G: SyncGraph,
    {
        // Top-down: the token is checked against this app and graph, the thread's head is read
        // and checked against the token (answers, timeouts, the update), the run claims the
        // thread by compare-and-swap on that head, the machine runs on the thread driver until
        // it pauses or ends, and the outcome (a new token at a pause) is made here.
        self.resume_now(resume)
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
        self.recover_now(thread)
    }

    /// What recovering `thread`, whose head is checkpoint `head` (`bytes`), does: report where
    /// it stopped, or claim it with a run that continues it, for the API call named `call`.
    pub(crate) fn recovery(
        &self,
        thread: &ThreadId,
        head: CheckpointId,
        bytes: Vec<u8>,
        #[cfg_attr(not(feature = "tracing"), allow(unused_variables))] call: &'static str,
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
        let mut run = Run::from_checkpoint(&*self.graph, ckpt, resuming, self.limits(), persist, false)?;
        self.attach_cache_context_emitter(&mut run)?;
        traced! { run.call(call); }
        Ok(Recovery::Run(run))
    }

    /// Starts thread `thread` at `node`, with `state` as the state: `node` runs first (its
    /// `interrupt_before` breakpoint does not stop it), then the run goes on as usual. This is
    /// how a front end continues from a checkpoint file ([`decode_checkpoint`](crate::decode_checkpoint)) in a new thread.
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
        let mut run = self.new_run(thread.into(), state, false, "invoke_at")?;
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
        Stream::new(self.new_run(ThreadId::random(), input, true, "stream"))
    }

    /// Like [`invoke_on`](Self::invoke_on), as a stream of events.
    pub fn stream_on(&self, thread: impl Into<ThreadId>, input: G::State) -> Stream<'_, G>
    where
        G: SyncGraph,
    {
        self.stream_on_now(thread.into(), input)
    }

    /// Like [`resume`](Self::resume), as a stream of events (an invalid token is the stream's
    /// one item). Dropping the stream before it pauses again or finishes abandons the resume:
    /// the pause is put back and the same token works again (unless a node after the one it
    /// paused at had completed, as for [`resume`](Self::resume)).
    pub fn stream_resume(&self, resume: Resume<G::State>) -> Stream<'_, G>
    where
        G: SyncGraph,
    {
        self.stream_resume_now(resume)
    }

    /// [`invoke_on`](Self::invoke_on) on the calling thread, for any graph: a subgraph node's
    /// child, which the blocking API runs only under a parent that is a [`SyncGraph`] — and
    /// so only when the child is one too (`graph!` bounds the parent's impl on its children's).
    pub(crate) fn invoke_on_now(&self, thread: ThreadId, input: G::State) -> Result<Outcome<G::State>, Error> {
        let mut run = self.new_run(thread, input, false, "invoke")?;
        run.claim_now()?;
        let over = run.run_to_end()?;
        token::outcome(run, over)
    }

    /// [`resume`](Self::resume) on the calling thread, for any graph (see
    /// [`invoke_on_now`](Self::invoke_on_now)).
    pub(crate) fn resume_now(&self, resume: Resume<G::State>) -> Result<Outcome<G::State>, Error> {
        let thread = self.verify(&resume)?;
        let (head, bytes) = self.head(&thread)?;
        let mut run = self.resume_at(resume, head, bytes, false, &RunOptions::new(), "resume")?;
        run.claim_now()?;
        let over = run.run_to_end()?;
        token::outcome(run, over)
    }

    /// [`recover`](Self::recover) on the calling thread, for any graph (see
    /// [`invoke_on_now`](Self::invoke_on_now)).
    pub(crate) fn recover_now(&self, thread: &ThreadId) -> Result<Outcome<G::State>, Error> {
        let (head, bytes) = self.head(thread)?;
        match self.recovery(thread, head, bytes, "recover")? {
            Recovery::Over(outcome) => Ok(outcome),
            Recovery::Run(mut run) => {
                run.claim_now()?;
                let over = run.run_to_end()?;
                token::outcome(run, over)
            }
        }
    }

    /// [`stream_on`](Self::stream_on) for any graph (see [`invoke_on_now`](Self::invoke_on_now)).
    pub(crate) fn stream_on_now(&self, thread: ThreadId, input: G::State) -> Stream<'_, G> {
        Stream::new(self.new_run(thread, input, true, "stream"))
    }

    /// [`stream_resume`](Self::stream_resume) for any graph (see
    /// [`invoke_on_now`](Self::invoke_on_now)).
    pub(crate) fn stream_resume_now(&self, resume: Resume<G::State>) -> Stream<'_, G> {
        Stream::new(self.resume_run(resume, true, &RunOptions::new(), "stream_resume"))
    }

    /// [`stream_on`](Self::stream_on) with `options` in force for this run.
    pub fn stream_on_with(
        &self,
        thread: impl Into<ThreadId>,
        input: G::State,
        options: impl Into<RunOptions>,
    ) -> Stream<'_, G>
    where
        G: SyncGraph,
    {
        Stream::new(self.new_run_as(thread.into(), input, true, &options.into(), "stream"))
    }

    /// [`stream_resume`](Self::stream_resume) with `options` in force for this run.
    pub fn stream_resume_with(&self, resume: Resume<G::State>, options: impl Into<RunOptions>) -> Stream<'_, G>
    where
        G: SyncGraph,
    {
        Stream::new(self.resume_run(resume, true, &options.into(), "stream_resume"))
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
        self.persist_as(thread, head, rollback, claim, self.durability)
    }

    /// [`persist`](Self::persist) with `durability` for this run (and its children's runs).
    pub(crate) fn persist_as(
        &self,
        thread: ThreadId,
        head: Option<CheckpointId>,
        rollback: Option<Vec<u8>>,
        claim: bool,
        durability: Durability,
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
        let host = Host::new(store, durability, self.lease, self.recursion_limit, self.max_branches, tenancy);
        Persist {
            parent_node: self.parent_node,
            host: Arc::new(host),
            store: &*self.checkpointer,
            thread,
            durability,
            key: self.key.as_ref(),
            rollback,
            paused_node: None,
            claim,
            recovering: false,
        }
    }

    /// A run that starts thread `thread` on `input`, for the API call named `call` (its `run`
    /// span's field `call`, recorded here once).
    pub(crate) fn new_run(
        &self,
        thread: ThreadId,
        input: G::State,
        record: bool,
        call: &'static str,
    ) -> Result<Run<'_, G>, Error> {
        self.new_run_as(thread, input, record, &RunOptions::new(), call)
    }

    /// [`new_run`](Self::new_run) with this call's `options`.
    pub(crate) fn new_run_as(
        &self,
        thread: ThreadId,
        input: G::State,
        record: bool,
        options: &RunOptions,
        #[cfg_attr(not(feature = "tracing"), allow(unused_variables))] call: &'static str,
    ) -> Result<Run<'_, G>, Error> {
        self.check_key()?;
        self.check_thread_id(&thread)?;
        let persist = self.persist_as(thread, None, None, true, options.durability.unwrap_or(self.durability));
        let mut run = Run::new(&*self.graph, input, self.limits(), Some(persist), record);
        self.attach_cache_context_emitter_with(&mut run, options)?;
        traced! { run.call(call); }
        Ok(run)
    }

    /// A thread id a new thread may take: not empty, at most [`ThreadId::MAX_LEN`] bytes.
    pub(crate) fn check_thread_id(&self, thread: &ThreadId) -> Result<(), Error> {
        if thread.as_str().is_empty() {
            return Err(Error::InvalidThreadId { thread: thread.clone(), reason: "it is empty" });
        }
        if thread.as_str().len() > ThreadId::MAX_LEN {
            return Err(Error::InvalidThreadId { thread: thread.clone(), reason: "it is longer than 1024 bytes" });
        }
        Ok(())
    }

    /// This app with `options` in force, for one call: the same graph and store (shared), its
    /// own durability.
    pub(crate) fn with_options(&self, options: RunOptions) -> App<G, C> {
        App {
            durability: options.durability.unwrap_or(self.durability),
            modes: options.stream_modes.unwrap_or(self.modes),
            ..self.copy()
        }
    }

    /// A run must not start (and write anything) when it could not sign its token at a pause.
    pub(crate) fn check_key(&self) -> Result<(), Error> {
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
}

/// What `recover` found: a thread that is over (paused or finished), or a run that continues it.
#[allow(clippy::large_enum_variant)] // made once per `recover`, and moved at once
pub(crate) enum Recovery<'a, G: Graph> {
    Over(Outcome<G::State>),
    Run(Run<'a, G>),
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
            .field("sync_nodes_inline", &self.sync_inline)
            .finish()
    }
}
