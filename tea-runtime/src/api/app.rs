//! Building and running a graph: the typestate [`Builder`] and the [`App`] it builds.
//!
//! An app without a checkpointer runs a graph that cannot pause and returns its final state. An
//! app with one ([`Checkpointer`]) runs each invocation as a *thread* whose checkpoints live in
//! the store, and returns an [`Outcome`]: done, or paused with a [`Resume`] token.

use crate::api::call::{Call, What};
use crate::api::pauses::Pauses;
use crate::api::stream::Stream;
use crate::api::token;
use crate::format::checkpoint::{Checkpoint, Position};
use crate::format::token::{issue, PauseRecord, Resume, SigningKey};
use crate::machine::run::{Over, Run};
use crate::machine::validate::{decode_for, identity};
use crate::model::graph::{Graph, PauseFree, SyncGraph};
use crate::model::outcome::{Outcome, Snapshot};
use crate::model::scope::{Emitter, GraphAndCache};
use crate::store::{fold, Checkpointer, Memory};
use crate::tenure::Tenure;
use crate::vocab::clock::Clock;
use crate::vocab::error::Error;
use crate::vocab::name::{CheckpointId, NodeName, ThreadId, START};
use crate::vocab::options::{
    Durability, Limits, RunContext, RunOptions, DEFAULT_GROUP_COMMIT, DEFAULT_LEASE, DEFAULT_MAX_PARALLEL_BRANCHES,
    DEFAULT_RECURSION_LIMIT,
};
use crate::vocab::policy::StreamModes;
use crate::vocab::retention::Retention;
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
    group_commit: Duration,
    lease: Duration,
    max_branches: usize,
    key: Option<SigningKey>,
    sync_inline: bool,
    clock: Clock,
    retention: Retention,
    memory: Option<Memory>,
}

impl<G: Graph> Builder<G, NoCheckpointer> {
    /// A builder for `graph` with the default options.
    pub fn new(graph: G) -> Self {
        Builder {
            graph,
            checkpointer: NoCheckpointer,
            recursion_limit: DEFAULT_RECURSION_LIMIT,
            durability: Durability::EveryStep,
            group_commit: DEFAULT_GROUP_COMMIT,
            lease: DEFAULT_LEASE,
            max_branches: DEFAULT_MAX_PARALLEL_BRANCHES,
            key: None,
            sync_inline: false,
            clock: Clock::system(),
            retention: Retention::new(),
            memory: None,
        }
    }

    /// Builds an app without a checkpointer: `invoke` returns the final state directly.
    ///
    /// Compiles only for graphs that cannot pause ([`PauseFree`]).
    pub fn build(self) -> App<G, NoCheckpointer>
    where
        G: PauseFree,
    {
        self.assemble(None)
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
        self.keeping_in(store)
    }

    /// The long-term memory the app's nodes reach with [`Ctx::store`](crate::Ctx::store), and
    /// [`App::sweep`] sweeps: by default (without this), a memory on the app's own checkpointer
    /// at the app's clock, and none for an app without a checkpointer. Give one to keep items
    /// elsewhere than the threads, to share one memory (with its [`Memory::embedder`]) among
    /// apps, or to give a store-less app a memory.
    ///
    /// ```
    /// # use tea::prelude::*;
    /// # #[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
    /// # struct Doc { text: String }
    /// # fn draft(_: &Doc) {}
    /// # graph! { Drafts for Doc { start -> draft; draft -> end; } }
    /// let memory = tea::Memory::new(MemoryStore::new());
    /// let app = Drafts::builder().memory(memory.clone()).build();
    /// assert!(app.memory().is_some());
    /// ```
    pub fn memory(mut self, memory: Memory) -> Self {
        self.memory = Some(memory);
        self
    }

    /// The app these settings describe: every [`App`] is made here (both `build`s and
    /// [`App::for_child`]). `default_memory`: the memory the app gets when not given one.
    fn assemble(self, default_memory: Option<fn(&Arc<C>, &Clock) -> Memory>) -> App<G, C> {
        let graph = Arc::new(self.graph);
        let checkpointer = Arc::new(self.checkpointer);
        let memory = self.memory.or_else(|| default_memory.map(|make| make(&checkpointer, &self.clock)));
        App {
            shared: Arc::new(GraphAndCache::new(graph.clone())),
            graph,
            checkpointer,
            memory,
            recursion_limit: self.recursion_limit,
            durability: self.durability,
            group_commit: self.group_commit,
            lease: self.lease,
            max_branches: self.max_branches,
            key: self.key,
            sync_inline: self.sync_inline,
            clock: self.clock,
            retention: self.retention,
            parent_node: None,
            parent: None,
            context: None,
            modes: StreamModes::default(),
            pauses: Arc::default(),
        }
    }

    /// These settings with `store` (any type: a child app's store is its parent's, whatever
    /// that is).
    fn keeping_in<K>(self, store: K) -> Builder<G, K> {
        Builder {
            graph: self.graph,
            checkpointer: store,
            recursion_limit: self.recursion_limit,
            durability: self.durability,
            group_commit: self.group_commit,
            lease: self.lease,
            max_branches: self.max_branches,
            key: self.key,
            sync_inline: self.sync_inline,
            clock: self.clock,
            retention: self.retention,
            memory: self.memory,
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

    /// How much finished branch work a fan-out may hold unwritten (default
    /// [`DEFAULT_GROUP_COMMIT`]: none): what a crash may run again, per fan-out, in exchange for
    /// writing cheap branches together rather than one write each.
    ///
    /// By default every branch's progress is written as its nodes complete, and a branch that
    /// *finished* — it reached its join, or stopped at a pause — is recorded at once and written
    /// while the next branch runs (on the blocking API by the fan-out's writer, which starts
    /// writing once the fan-out has run for 100 µs; a branch that finished before then is
    /// written with the fan-out's end, or before its failure when its branches cannot merge):
    /// after a crash, `recover` runs again only finished branches the store did not hold yet —
    /// those that finished in the fan-out's first 100 µs, and the last few the writer had not
    /// caught up with. That is a record per branch, which for a fan-out of many cheap branches
    /// costs more than the branches themselves (on a disk store, a flush per write).
    ///
    /// With a `window`, a finished branch whose work since its last write, together with that
    /// of the finished branches the fan-out already holds unwritten, took less than `window` is
    /// not written on its own: the checkpoint that ends the fan-out (its join's step, its pause,
    /// its failure) holds it. Once that much finished work is held, each further finished
    /// branch is written on its own as by default. A branch that goes on to another node still
    /// waits for its write, as a node on the main line does. So a crash, or a dropped future of
    /// the async API, runs again at most `window` of finished branch work per fan-out (nested
    /// fan-outs included), and no finished branch that worked `window` or longer — a branch
    /// that calls a model or a service is written as today. Child graphs of subgraph nodes use
    /// their parent app's window.
    ///
    /// ```
    /// # use tea::prelude::*;
    /// # use std::time::Duration;
    /// # #[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
    /// # struct Doc { #[reducer(append)] parts: Vec<String> }
    /// # fn split(_: &Doc) {}
    /// # fn left(_: &Doc) -> DocUpdate { Doc::update().parts(vec!["left".into()]) }
    /// # fn right(_: &Doc) -> DocUpdate { Doc::update().parts(vec!["right".into()]) }
    /// # fn join(_: &Doc) {}
    /// graph! { Split for Doc { start -> split; parallel split => [left, right] -> join; join -> end; } }
    /// // Up to a millisecond of finished branches may run again after a crash; cheap branches
    /// // are written with the join's step.
    /// let app = Split::builder().checkpointer(MemoryStore::new()).group_commit(Duration::from_millis(1)).build();
    /// assert_eq!(app.invoke(Doc::default())?.done().unwrap().parts, ["left", "right"]);
    /// # Ok::<(), tea::Error>(())
    /// ```
    pub fn group_commit(mut self, window: Duration) -> Self {
        self.group_commit = window;
        self
    }

    /// How long a running thread stays owned by its run without news from it (default
    /// [`DEFAULT_LEASE`], one minute).
    ///
    /// A run's checkpoints carry a lease on its thread, renewed as the run advances (at every
    /// checkpoint, and before a node once half the lease has gone). A [`Call::recover`] of a
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

    /// Where the app's runs read the time — lease expiries, pause timeouts, when a checkpoint
    /// was written — and draw their lease owners and pause nonces (default
    /// [`Clock::system`]). A [`Clock::manual`] clock lets a test expire a lease or a pause by
    /// advancing it, without waiting.
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// What [`App::sweep`] (and [`App::sweep_every`], `tea prune`, `tea serve`'s sweeper) keeps
    /// of the app's threads: the last checkpoints of each, finished threads for a time, paused
    /// ones for a time only if asked (default: everything, for ever). A thread's own setting
    /// ([`App::set_retention`]) comes over this one. Nothing is deleted until a sweep runs.
    pub fn retention(mut self, retention: Retention) -> Self {
        self.retention = retention;
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
        self.assemble(Some(|store: &Arc<C>, clock: &Clock| {
            Memory::on(store.clone() as Arc<dyn Checkpointer>).clock(clock.clone())
        }))
    }
}

impl<G: Graph, C: fmt::Debug> fmt::Debug for Builder<G, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("graph", &self.graph.name())
            .field("checkpointer", &self.checkpointer)
            .field("recursion_limit", &self.recursion_limit)
            .field("durability", &self.durability)
            .field("group_commit", &self.group_commit)
            .field("lease", &self.lease)
            .field("signs_tokens", &self.key.is_some())
            .field("sync_nodes_inline", &self.sync_inline)
            .field("retention", &self.retention)
            .field("memory", &self.memory)
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
    /// How much finished branch work a fan-out holds unwritten ([`Builder::group_commit`]).
    pub(crate) group_commit: Duration,
    pub(crate) lease: Duration,
    pub(crate) max_branches: usize,
    pub(crate) key: Option<SigningKey>,
    /// The async driver runs sync nodes inline ([`Builder::sync_nodes_inline`]).
    pub(crate) sync_inline: bool,
    /// A subgraph node's child app: the node type of the parent graph, which `Command::parent`
    /// may route to.
    pub(crate) parent_node: Option<std::any::TypeId>,
    /// A child app's link to the run of its parent graph (the tenure
    /// of the run whose subgraph node made it): its runs keep that run's lease alive.
    pub(crate) parent: Option<Arc<Tenure>>,
    /// What its runs share: the graph for nodes run on a thread of their own, the node cache.
    pub(crate) shared: Arc<GraphAndCache>,
    /// The context of this app's runs ([`App::with_context`]).
    pub(crate) context: Option<RunContext>,
    /// The modes of this call's streams ([`RunOptions::stream_modes`]).
    pub(crate) modes: StreamModes,
    /// Where its runs read the time and draw random numbers ([`Builder::clock`]).
    pub(crate) clock: Clock,
    /// What a sweep keeps of its threads ([`Builder::retention`]).
    pub(crate) retention: Retention,
    /// Its nodes' long-term memory ([`Builder::memory`]).
    pub(crate) memory: Option<Memory>,
    /// The pauses its runs (streamed or not) wrote, remembered on a store that
    /// [`resumes_without_read`](Checkpointer::resumes_without_read) (see `api::pauses`).
    pub(crate) pauses: Arc<Pauses>,
}

impl<G: Graph, C> App<G, C> {
    /// An app running `graph`, a subgraph node's child, on its parent's store and options
    /// (`tenure`, the parent's run's; `None`: the parent has no store). Its runs keep the parent's
    /// lease alive. Its tokens are never handed out: the parent lists its pauses in its own.
    pub(crate) fn for_child(
        graph: G,
        checkpointer: C,
        tenure: Option<&Arc<Tenure>>,
        parent_node: std::any::TypeId,
    ) -> Self {
        let mut settings = Builder::new(graph).keeping_in(checkpointer);
        if let Some(parent) = tenure {
            settings.recursion_limit = parent.limit;
            settings.durability = parent.durability;
            settings.group_commit = parent.group_commit;
            settings.lease = parent.lease;
            settings.max_branches = parent.max_branches;
            settings.clock = parent.clock.clone();
        }
        // `sync_inline` is inherited from the parent's driver when it runs the child
        // (`drive::tokio`); `context` is set from the parent run's `Ctx` (`subgraph`).
        App { parent_node: Some(parent_node), parent: tenure.cloned(), ..settings.assemble(None) }
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
    pub(crate) fn copy(&self) -> App<G, C> {
        App {
            graph: self.graph.clone(),
            checkpointer: self.checkpointer.clone(),
            recursion_limit: self.recursion_limit,
            durability: self.durability,
            group_commit: self.group_commit,
            lease: self.lease,
            max_branches: self.max_branches,
            key: self.key.clone(),
            parent_node: self.parent_node,
            parent: self.parent.clone(),
            sync_inline: self.sync_inline,
            clock: self.clock.clone(),
            retention: self.retention,
            memory: self.memory.clone(),
            shared: self.shared.clone(),
            context: self.context.clone(),
            modes: self.modes,
            pauses: self.pauses.clone(),
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

    /// The long-term memory its nodes reach with [`Ctx::store`](crate::Ctx::store)
    /// ([`Builder::memory`]; `None` for an app with neither a checkpointer nor a memory).
    pub fn memory(&self) -> Option<&Memory> {
        self.memory.as_ref()
    }

    /// The recursion limit in force.
    pub fn recursion_limit(&self) -> usize {
        self.recursion_limit
    }

    /// Gives `run` what this app's runs share (its graph, its node cache), this call's context,
    /// and — when it streams — where its nodes' emits go; refuses it if the graph declares a
    /// context type this call did not supply. Allocates only for a stream.
    /// This call's `options` come over the app's.
    pub(crate) fn attach_cache_context_emitter(&self, run: &mut Run<'_, G>, options: &RunOptions) -> Result<(), Error> {
        let context = options.context.as_ref().or(self.context.as_ref());
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
        run.ctx.memory.clone_from(&self.memory);
        if run.record {
            run.ctx.emitter = Some(Arc::new(Emitter::new(options.stream_modes.unwrap_or(self.modes))));
        }
        Ok(())
    }

    /// The limits a run with `options` works within.
    pub(crate) fn limits_for(&self, options: &RunOptions) -> Limits {
        Limits { recursion: options.recursion_limit.unwrap_or(self.recursion_limit), max_branches: self.max_branches }
    }
}

/// The name of the API call a run's `run` span records (its field `call`), and
/// [`Error::NoRuntime`] names.
pub(crate) fn call_name<S: crate::vocab::state::GraphState>(
    what: &What<S>,
    record: bool,
    on_tokio: bool,
) -> &'static str {
    match (what, record, on_tokio) {
        (What::Start(_), false, false) => "invoke",
        (What::Start(_), false, true) => "invoke_async",
        (What::Start(_), true, false) => "stream",
        (What::Start(_), true, true) => "stream_async",
        (What::StartAt { .. }, _, _) => "invoke_at",
        (What::Resume(_), false, false) => "resume",
        (What::Resume(_), false, true) => "resume_async",
        (What::Resume(_), true, false) => "stream_resume",
        (What::Resume(_), true, true) => "stream_resume_async",
        (What::Recover(_), _, false) => "recover",
        (What::Recover(_), _, true) => "recover_async",
    }
}

impl<G: Graph> App<G, NoCheckpointer> {
    /// Carries out `call` without a store: a start ([`Call::start`], or [`Call::start_at`] a
    /// node) runs to its end and returns the final state. Nothing is kept, so a thread the call
    /// names is only a name, and a resume or a recover finds no checkpoint.
    ///
    /// # Errors
    /// [`Error::CheckpointNotFound`] for a resume or a recover; [`Error::NoRoute`] for a
    /// `start_at` node the graph does not have; [`Error::NodeFailed`] / [`Error::NodePanicked`]
    /// naming the node, [`Error::NoRoute`] when no edge applies, [`Error::ConflictingWrites`]
    /// when parallel branches replace the same field, [`Error::RecursionLimit`] when the run
    /// takes too many steps.
    pub fn run(&self, call: Call<G::State>) -> Result<G::State, Error>
    where
        G: SyncGraph,
    {
        let (input, at, options) = self.unstored(call)?;
        self.run_unstored(input, at, &options)
    }

    /// Carries out `call` without a store as a stream of events: an
    /// [`Event::Step`](crate::Event::Step) after each node and [`Event::Done`](crate::Event::Done)
    /// at the end; a failing run yields its error and ends. A subgraph node's child steps come
    /// before the node's own step, named by their path (`review/check`).
    pub fn run_stream(&self, call: Call<G::State>) -> Stream<'_, G>
    where
        G: SyncGraph,
    {
        Stream::new(self.unstored_run(call, true, "stream"))
    }

    /// Runs the graph from `start` to `end` on `input` and returns the final state:
    /// `run(Call::start(input))`.
    ///
    /// # Errors
    /// Those of [`run`](Self::run).
    pub fn invoke(&self, input: G::State) -> Result<G::State, Error>
    where
        G: SyncGraph,
    {
        // `run(Call::start(input))` without making and taking apart the call: every call's path.
        self.run_unstored(input, None, &RunOptions::new())
    }

    /// Runs the graph from `input` (from node `at`, if given) to its end with `options`.
    fn run_unstored(&self, input: G::State, at: Option<G::Node>, options: &RunOptions) -> Result<G::State, Error>
    where
        G: SyncGraph,
    {
        // Scoped in place: a run is large, and this is every call's path.
        let mut run = Run::new(&*self.graph, input, self.limits_for(options), None, false);
        if let Some(at) = at {
            run.start_at(at);
        }
        self.attach_cache_context_emitter(&mut run, options)?;
        traced! { run.call(if at.is_some() { "invoke_at" } else { "invoke" }); }
        match run.run_to_end()? {
            Over::Done => Ok(run.state),
            Over::Paused(record) => Err(token::without_store(run.graph, &record)),
        }
    }

    /// Runs the graph on `input` as a stream of events: `run_stream(Call::start(input))`.
    pub fn stream(&self, input: G::State) -> Stream<'_, G>
    where
        G: SyncGraph,
    {
        self.run_stream(Call::start(input))
    }

    /// What a store-less `call` starts from: its input, the node it starts at, its options.
    #[allow(clippy::type_complexity)]
    pub(crate) fn unstored(&self, call: Call<G::State>) -> Result<(G::State, Option<G::Node>, RunOptions), Error> {
        let Call { what, thread: _, options } = call;
        match what {
            What::Start(input) => Ok((input, None, options)),
            What::StartAt { node, state } => match self.graph.node_named(&node) {
                Some(at) => Ok((state, Some(at), options)),
                None => Err(Error::NoRoute { node: START, goto: Some(NodeName::from(node)) }),
            },
            What::Resume(resume) => Err(Error::CheckpointNotFound { thread: resume.thread().clone() }),
            What::Recover(thread) => Err(Error::CheckpointNotFound { thread }),
        }
    }

    /// The run a store-less `call` makes; `record`: it is streamed; `name`: the API call its
    /// `run` span records.
    pub(crate) fn unstored_run(
        &self,
        call: Call<G::State>,
        record: bool,
        #[cfg_attr(not(feature = "tracing"), allow(unused_variables))] name: &'static str,
    ) -> Result<Run<'_, G>, Error> {
        let (input, at, options) = self.unstored(call)?;
        let mut run = Run::new(&*self.graph, input, self.limits_for(&options), None, record);
        if let Some(at) = at {
            run.start_at(at);
        }
        self.attach_cache_context_emitter(&mut run, &options)?;
        traced! { run.call(name); }
        Ok(run)
    }
}

impl<G: Graph, C: Checkpointer> App<G, C> {
    /// Carries out `call` — starts a thread, answers a pause, recovers a thread or starts one at
    /// a node ([`Call`]) — on the calling thread, until the run finishes or pauses.
    ///
    /// ```
    /// # use tea::prelude::*;
    /// # use tea::Call;
    /// # #[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
    /// # struct Doc { text: String, approved: bool }
    /// # fn draft(_: &Doc) -> DocUpdate { Doc::update().text("draft".into()) }
    /// # fn publish(_: &Doc) {}
    /// # graph! { Review for Doc { start -> draft; draft -> publish; publish -> end; interrupt_before publish; } }
    /// let app = Review::builder().checkpointer(MemoryStore::new()).build();
    /// let paused = app.run(Call::start(Doc::default()).on("doc-1"))?;
    /// let (_, resume) = paused.interrupted().expect("paused before publish");
    /// let done = app.run(Call::resume(resume.update(Doc::update().approved(true))))?;
    /// assert!(done.done().unwrap().approved);
    /// # Ok::<(), tea::Error>(())
    /// ```
    ///
    /// # Errors
    /// A start: [`Error::ThreadExists`] when the thread has checkpoints already,
    /// [`Error::InvalidThreadId`] for an empty id or one longer than [`ThreadId::MAX_LEN`]
    /// bytes, [`Error::NoRoute`] for a `start_at` node the graph does not have. A resume:
    /// [`Error::InvalidToken`] (the app signs tokens and this one is unsigned, altered or
    /// signed under another key, or the call names another thread than the token's),
    /// [`Error::GraphMismatch`], [`Error::SchemaMismatch`], [`Error::StaleResume`] (the thread
    /// was resumed already: of two resumes of one token, exactly one proceeds),
    /// [`Error::CheckpointNotFound`]. A resume that fails puts the pause back, so the same token
    /// can be used again, unless a node after the one it paused at had completed: the thread
    /// then stays there for a recover, and the token is spent. A recover:
    /// [`Error::CheckpointNotFound`], [`Error::ThreadBusy`] while another run owns the thread
    /// (through its lease, [`Builder::lease`]; of several recovers of a stopped thread exactly
    /// one runs), [`Error::StaleResume`] when a resume moved the thread on meanwhile,
    /// [`Error::CorruptCheckpoint`]. Any run: [`Error::NodeFailed`] / [`Error::NodePanicked`]
    /// naming the node, [`Error::NoRoute`], [`Error::ConflictingWrites`],
    /// [`Error::RecursionLimit`], [`Error::Store`]. A run that fails leaves its last checkpoint
    /// in the store for a recover; with [`Durability::EveryStep`] the nodes that completed are
    /// not run again.
    pub fn run(&self, call: Call<G::State>) -> Result<Outcome<G::State>, Error>
    where
        G: SyncGraph,
    {
        self.execute(call)
    }

    /// Carries out `call` as a stream of events: an [`Event::Step`](crate::Event::Step) after
    /// each node, ending with [`Event::Interrupted`](crate::Event::Interrupted) or
    /// [`Event::Done`](crate::Event::Done); a call refused before it runs (an invalid token, a
    /// busy thread) is the stream's one item. Dropping the stream before the run pauses or
    /// finishes abandons it: a resume puts its pause back (the same token works again unless a
    /// node after the one it paused at had completed), another run releases its lease, so a
    /// recover continues it.
    pub fn run_stream(&self, call: Call<G::State>) -> Stream<'_, G>
    where
        G: SyncGraph,
    {
        self.execute_stream(call)
    }

    /// Starts a new thread (with a random id) on `input` and runs it until it finishes or
    /// pauses: `run(Call::start(input))`.
    ///
    /// # Errors
    /// Those of [`run`](Self::run).
    pub fn invoke(&self, input: G::State) -> Result<Outcome<G::State>, Error>
    where
        G: SyncGraph,
    {
        self.execute(Call::start(input))
    }

    /// Continues the paused thread `resume` names, with its answers and update:
    /// `run(Call::resume(resume))`.
    ///
    /// # Errors
    /// Those of [`run`](Self::run).
    pub fn resume(&self, resume: Resume<G::State>) -> Result<Outcome<G::State>, Error>
    where
        G: SyncGraph,
    {
        // Top-down: the token is checked against this app and graph, the thread's head is read
        // and checked against the token (answers, timeouts, the update), the run claims the
        // thread by compare-and-swap on that head, the machine runs on the thread driver until
        // it pauses or ends, and the outcome (a new token at a pause) is made here.
        self.execute(Call::resume(resume))
    }

    /// Like [`invoke`](Self::invoke), as a stream of events: `run_stream(Call::start(input))`.
    pub fn stream(&self, input: G::State) -> Stream<'_, G>
    where
        G: SyncGraph,
    {
        self.execute_stream(Call::start(input))
    }

    /// [`run`](Self::run) for any graph, on the calling thread: also a subgraph node's child,
    /// which the blocking API runs only under a parent that is a [`SyncGraph`] — and so only
    /// when the child is one too (`graph!` bounds the parent's impl on its children's).
    ///
    /// On a store that [`resumes_without_read`](Checkpointer::resumes_without_read), a resume
    /// of a pause this app wrote starts from the pause as the app remembers it, without reading
    /// the head; if its claim finds another head, nothing was written, and it starts again from
    /// the head it reads (see `api::pauses`).
    pub(crate) fn execute(&self, call: Call<G::State>) -> Result<Outcome<G::State>, Error> {
        let thread = self.head_to_read(&call)?;
        let mut call = call;
        if let Some((head, again)) = self.remembered(&call, thread.as_ref()) {
            let mut missed = false;
            let outcome = self.execute_from(call, Some(head), Some(&mut missed));
            if !missed {
                return outcome;
            }
            call = again;
        }
        let head = match thread {
            Some(thread) => Some(self.head(&thread)?),
            None => None,
        };
        self.execute_from(call, head, None)
    }

    /// [`execute`](Self::execute) from `head`. `unread`: the head is a pause this app remembered,
    /// not read from the store; set when it was not the thread's head (the run wrote nothing, and
    /// its error is not the call's).
    fn execute_from(
        &self,
        call: Call<G::State>,
        head: Option<(CheckpointId, Vec<u8>)>,
        mut unread: Option<&mut bool>,
    ) -> Result<Outcome<G::State>, Error> {
        let mut run = match self.begin_from(call, head, false, false, &mut unread)? {
            Recovery::Over(outcome) => return Ok(outcome),
            Recovery::Run(run) => run,
        };
        let tenure = run.tenure.clone();
        let over = run.run_to_end();
        self.ended(tenure.as_deref(), &over, unread);
        token::outcome(run.graph, run.tenure.as_deref(), over?, run.state)
    }

    /// For a resume of a pause this app remembers, on a store that
    /// [`resumes_without_read`](Checkpointer::resumes_without_read): the pause (its id and
    /// bytes), and the call again, for when the pause is not the thread's head any more. The
    /// pause is forgotten here.
    pub(crate) fn remembered(
        &self,
        call: &Call<G::State>,
        thread: Option<&ThreadId>,
    ) -> Option<(StoredHead, Call<G::State>)> {
        let (What::Resume(resume), Some(thread)) = (&call.what, thread) else { return None };
        if !self.checkpointer.resumes_without_read() {
            return None;
        }
        let head = self.pauses.take(thread)?;
        let again =
            Call { what: What::Resume(resume.clone()), thread: call.thread.clone(), options: call.options.clone() };
        Some((head, again))
    }

    /// [`begin`](Self::begin) by a blocking (`on_tokio`: async) call from `head`, streamed
    /// (`record`) or not; `unread`: a
    /// pause this app remembered, set when the call does not begin from it (a resume that a
    /// remembered pause does not fit, its token naming a later pause say, is answered from the
    /// head the store holds), and else the run's claim compares its bytes.
    pub(crate) fn begin_from(
        &self,
        call: Call<G::State>,
        head: Option<(CheckpointId, Vec<u8>)>,
        record: bool,
        on_tokio: bool,
        unread: &mut Option<&mut bool>,
    ) -> Result<Recovery<'_, G>, Error> {
        match self.begin(call, head, record, on_tokio) {
            Err(error) => {
                if let Some(missed) = unread.as_deref_mut() {
                    *missed = true;
                }
                Err(error)
            }
            Ok(Recovery::Run(run)) => {
                if let (Some(tenure), Some(_)) = (&run.tenure, &unread) {
                    tenure.claim_unread();
                }
                Ok(Recovery::Run(run))
            }
            over => over,
        }
    }

    /// What a run begun with [`begin_from`](Self::begin_from) ended with (`over`), on the tenure
    /// of its thread: a pause is remembered; a failure sets `unread` when its claim over a
    /// remembered pause found another head.
    pub(crate) fn ended(&self, tenure: Option<&Tenure>, over: &Result<Over, Error>, unread: Option<&mut bool>) {
        match (over, tenure) {
            (Ok(Over::Paused(_)), Some(tenure)) => self.remember_pause(tenure),
            (Err(_), Some(tenure)) => {
                if let Some(missed) = unread {
                    *missed = tenure.missed_unread();
                }
            }
            _ => {}
        }
    }

    /// Remembers the pause `tenure`'s run wrote last, on a store that
    /// [`resumes_without_read`](Checkpointer::resumes_without_read).
    pub(crate) fn remember_pause(&self, tenure: &Tenure) {
        if let Some(pauses) = self.pause_memory() {
            pauses.keep(tenure);
        }
    }

    /// Where a run of this app that pauses remembers its pause: on a store that
    /// [`resumes_without_read`](Checkpointer::resumes_without_read), the app's pauses.
    pub(crate) fn pause_memory(&self) -> Option<Arc<Pauses>> {
        self.checkpointer.resumes_without_read().then(|| Arc::clone(&self.pauses))
    }

    /// [`run_stream`](Self::run_stream) for any graph (see [`execute`](Self::execute)): a
    /// resume of a pause this app remembers begins from it, and if the run's claim (its first
    /// advance, before the stream yields anything) finds another head, the stream starts again
    /// from the head it reads.
    pub(crate) fn execute_stream(&self, call: Call<G::State>) -> Stream<'_, G> {
        let thread = match self.head_to_read(&call) {
            Ok(thread) => thread,
            Err(error) => return Stream::new(Err(error)),
        };
        let mut call = call;
        if let Some((head, again)) = self.remembered(&call, thread.as_ref()) {
            let mut missed = false;
            match self.begin_from(call, Some(head), true, false, &mut Some(&mut missed)) {
                Ok(Recovery::Over(outcome)) => return Stream::ended(outcome),
                Ok(Recovery::Run(run)) => {
                    let read = move || self.stream_from_head(again, thread);
                    return Stream::new(Ok(run)).remembering(self.pause_memory()).or_from(Box::new(read));
                }
                Err(error) if !missed => return Stream::new(Err(error)),
                Err(_) => call = again,
            }
        }
        self.stream_from_head(call, thread)
    }

    /// The stream of `call` from the head of `thread` (what [`head_to_read`](Self::head_to_read)
    /// named), read from the store.
    fn stream_from_head(&self, call: Call<G::State>, thread: Option<ThreadId>) -> Stream<'_, G> {
        let head = match thread {
            Some(thread) => self.head(&thread).map(Some),
            None => Ok(None),
        };
        match head.and_then(|head| self.begin(call, head, true, false)) {
            Ok(Recovery::Over(outcome)) => Stream::ended(outcome),
            Ok(Recovery::Run(run)) => Stream::new(Ok(run)).remembering(self.pause_memory()),
            Err(error) => Stream::new(Err(error)),
        }
    }

    /// The thread whose head `call` reads before it runs (a resume's, once its token is checked
    /// against this app and graph; a recover's), or `None` for a call that starts a thread.
    pub(crate) fn head_to_read(&self, call: &Call<G::State>) -> Result<Option<ThreadId>, Error> {
        match &call.what {
            What::Start(_) | What::StartAt { .. } => Ok(None),
            What::Resume(resume) => {
                let thread = self.verify(resume)?;
                if call.thread.as_ref().is_some_and(|named| *named != thread) {
                    return Err(Error::InvalidToken { reason: "the call names another thread than its token's" });
                }
                Ok(Some(thread))
            }
            What::Recover(thread) => Ok(Some(thread.clone())),
        }
    }

    /// The run `call` makes, given the head of the thread it reads (`head`, read by the driver
    /// after [`head_to_read`](Self::head_to_read)), or the outcome of a recover that finds its
    /// thread over; `record`: the run is streamed; `on_tokio`: by the async API (the name its
    /// `run` span's field `call` records).
    pub(crate) fn begin(
        &self,
        call: Call<G::State>,
        head: Option<(CheckpointId, Vec<u8>)>,
        record: bool,
        on_tokio: bool,
    ) -> Result<Recovery<'_, G>, Error> {
        let name = call_name(&call.what, record, on_tokio);
        let Call { what, thread, options } = call;
        match (what, head) {
            (What::Start(input), _) => {
                let thread = thread.unwrap_or_else(ThreadId::random);
                self.new_run_as(thread, input, record, &options, name).map(Recovery::Run)
            }
            (What::StartAt { node, state }, _) => {
                let Some(at) = self.graph.node_named(&node) else {
                    return Err(Error::NoRoute { node: START, goto: Some(NodeName::from(node)) });
                };
                let thread = thread.unwrap_or_else(ThreadId::random);
                let mut run = self.new_run_as(thread, state, record, &options, name)?;
                run.start_at(at);
                Ok(Recovery::Run(run))
            }
            (What::Resume(resume), Some((head, bytes))) => {
                self.resume_at(resume, head, bytes, record, &options, name).map(Recovery::Run)
            }
            (What::Recover(thread), Some((head, bytes))) => self.recovery(&thread, head, bytes, record, &options, name),
            // The driver reads the head `head_to_read` names: a resume or recover has one.
            (What::Resume(resume), None) => Err(Error::CheckpointNotFound { thread: resume.thread().clone() }),
            (What::Recover(thread), None) => Err(Error::CheckpointNotFound { thread }),
        }
    }

    /// What recovering `thread`, whose head is checkpoint `head` (`bytes`), does: report where
    /// it stopped, or claim it with a run that continues it, for the API call named `call`.
    pub(crate) fn recovery(
        &self,
        thread: &ThreadId,
        head: CheckpointId,
        bytes: Vec<u8>,
        record: bool,
        options: &RunOptions,
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
            let now = self.clock.now_ms();
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
        let durability = options.durability.unwrap_or(self.durability);
        let mut tenure = self.tenure_as(thread.clone(), Some(head), durability);
        tenure.recovering = true;
        let mut run = Run::from_checkpoint(&*self.graph, ckpt, resuming, self.limits_for(options), tenure, record)?;
        self.attach_cache_context_emitter(&mut run, options)?;
        traced! { run.call(call); }
        Ok(Recovery::Run(run))
    }

    /// The thread's latest checkpoint, or `None` if the thread has none.
    pub fn state(&self, thread: &ThreadId) -> Result<Option<Snapshot<G::State>>, Error> {
        let graph = self.graph.name();
        match trace::store_call("head", graph, Some(thread), || fold::head(&*self.checkpointer, graph, thread))? {
            None => Ok(None),
            Some((id, bytes)) => self.snapshot(thread, id, &bytes).map(Some),
        }
    }

    /// Every checkpoint of the thread, newest first (empty if it has none).
    pub fn history(&self, thread: &ThreadId) -> Result<Vec<Snapshot<G::State>>, Error> {
        let graph = self.graph.name();
        let entries =
            trace::store_call("history", graph, Some(thread), || fold::history(&*self.checkpointer, graph, thread))?;
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
    /// again: [`Call::start`]`(…).on(thread)` can start it anew. A token of the deleted thread
    /// fails with [`Error::CheckpointNotFound`] while the id is unused, and with
    /// [`Error::StaleResume`] once it is reused: a token carries its pause's random nonce, which
    /// no pause of the new thread has. Its own retention ([`App::set_retention`]) goes too.
    ///
    /// # Errors
    /// [`Error::Store`] when the store fails.
    pub fn delete(&self, thread: &ThreadId) -> Result<bool, Error> {
        let graph = self.graph.name();
        let deleted = trace::store_call("delete", graph, Some(thread), || self.checkpointer.delete(graph, thread))?;
        self.pauses.forget(thread);
        // The thread's own retention goes with it: a new thread of the id starts with the app's.
        self.set_retention(thread, None)?;
        Ok(deleted)
    }

    /// Deletes the oldest checkpoints of `thread`, keeping the newest `keep_last` (never fewer
    /// than one: the head stays, so the thread can still be resumed or recovered). Returns how
    /// many were deleted; [`history`](Self::history) lists what is left.
    ///
    /// A checkpoint stored as a delta (what changed since the one before) is read from the full
    /// checkpoint before it: such full checkpoints older than the newest `keep_last` stay while
    /// a kept delta needs them, and [`history`](Self::history) then lists them too.
    ///
    /// # Errors
    /// [`Error::Store`] when the store fails.
    pub fn prune(&self, thread: &ThreadId, keep_last: usize) -> Result<usize, Error> {
        let graph = self.graph.name();
        trace::store_call("prune", graph, Some(thread), || {
            let keep = fold::keep_for_prune(&*self.checkpointer, graph, thread, keep_last)?;
            self.checkpointer.prune(graph, thread, keep)
        })
    }

    /// The app's checkpoint store.
    pub fn checkpointer(&self) -> &C {
        &self.checkpointer
    }

    /// The tenure of a run of this app on `thread`, found at `head` (`None`: a new thread), with
    /// `durability` for this run (and its children's runs).
    pub(crate) fn tenure_as(&self, thread: ThreadId, head: Option<CheckpointId>, durability: Durability) -> Tenure {
        let store: Arc<dyn Checkpointer> = self.checkpointer.clone();
        let graph = &*self.graph;
        let mut tenure = Tenure::new(store, thread, head, &identity(graph), self.clock.clone());
        tenure.durability = durability;
        tenure.group_commit = self.group_commit;
        tenure.lease = self.lease;
        tenure.key = self.key.clone();
        tenure.limit = self.recursion_limit;
        tenure.max_branches = self.max_branches;
        tenure.parent_node = self.parent_node;
        tenure.parent = self.parent.clone();
        tenure
    }

    /// A run that starts thread `thread` on `input` with this call's `options`, for the API call
    /// named `call` (its `run` span's field `call`, recorded here once).
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
        let tenure = self.tenure_as(thread, None, options.durability.unwrap_or(self.durability));
        let mut run = Run::new(&*self.graph, input, self.limits_for(options), Some(tenure), record);
        self.attach_cache_context_emitter(&mut run, options)?;
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
        trace::store_call("head", graph, Some(thread), || fold::head(&*self.checkpointer, graph, thread))?
            .ok_or_else(|| Error::CheckpointNotFound { thread: thread.clone() })
    }
}

/// A thread's head as the store holds it: its id and bytes.
pub(crate) type StoredHead = (CheckpointId, Vec<u8>);

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
            .field("group_commit", &self.group_commit)
            .field("lease", &self.lease)
            .field("signs_tokens", &self.key.is_some())
            .field("sync_nodes_inline", &self.sync_inline)
            .field("retention", &self.retention)
            .field("memory", &self.memory)
            .finish()
    }
}
