//! The graph-description trait the engine runs.
//!
//! `graph!` implements it with generated `match` code (static dispatch, no allocation, no string
//! look-ups); a front end that loads graphs at run time implements it over its own tables. The
//! engine (`machine`) knows nothing else about a graph, so execution logic lives in the engine,
//! never in generated code.
//!
//! Besides the description (`start`, `run`, `route`, `can_goto`, `fork`, `node_named`,
//! breakpoints, pause timeouts) and the facts that let the engine do less (`fixed_route`,
//! `reads_branches`, `check_answer`), the trait has the hooks a run-time front end needs, which
//! default to the compile-time schema and cost `graph!` nothing: `schema_fingerprint` (what
//! checkpoints and tokens carry), `apply` (every update the engine applies goes through it — a
//! node's, a branch's at the join, a resume's — so a graph may refuse a write), `join_update`
//! (what of a branch's update reaches the main state), `keeps_update_on_pause`, and
//! `try_start`/`try_route` (routing that can fail is the node's failure). [`Fork`] describes a
//! fan-out; [`PauseFree`] marks graphs that build without a checkpointer and [`SyncGraph`] those
//! the blocking API runs.

use crate::model::hitl::Hitl;
use crate::model::node::{Ctx, Goto, NodeFuture, NodeId, NodeStep};
use crate::vocab::error::BoxError;
use crate::vocab::name::NodeName;
use crate::vocab::policy::NodePolicy;
use crate::vocab::state::GraphState;

/// The update type of a graph's state.
type UpdateOf<G> = <<G as Graph>::State as GraphState>::Update;

/// A graph the engine can run: its nodes, how to run each, and how to route between them.
///
/// Implemented by `graph!`; implement it by hand only for graphs built at run time.
pub trait Graph: Send + Sync + 'static {
    /// The state the graph carries.
    type State: GraphState;
    /// The graph's node ids.
    type Node: NodeId<State = Self::State>;

    /// The graph's name (`ReviewFlow`).
    fn name(&self) -> &str;

    /// A fingerprint of the graph's shape: nodes, edges, branches, pauses and state schema.
    fn fingerprint(&self) -> u64;

    /// A fingerprint of the state's schema (its fields, types and reducers), which checkpoints
    /// and tokens carry. Defaults to [`GraphState::SCHEMA_FINGERPRINT`]; a graph whose state's
    /// keys are known only at run time (a YAML agent's) computes its own.
    #[inline]
    fn schema_fingerprint(&self) -> u64 {
        <Self::State as GraphState>::SCHEMA_FINGERPRINT
    }

    /// Applies `update` to `state` through the reducers. Every update the engine applies goes
    /// through here: a node's, a branch's at the join, a resume's `.update(…)`. The default is
    /// [`GraphState::apply`]; a graph whose reducers and types are known only at run time
    /// applies them here, and refuses a write that does not fit with an error (the node's
    /// failure, or `Error::BadResumeValue` for a resume's update).
    #[inline]
    fn apply(&self, state: &mut Self::State, update: UpdateOf<Self>) -> Result<(), BoxError> {
        state.apply(update);
        Ok(())
    }

    /// What of a parallel branch's `update` reaches the main state at `join` (before the
    /// conflict check). The default keeps all of it; `None` drops it. A YAML agent keeps only
    /// the writes to declared keys: other writes stay in their branch.
    #[inline]
    fn join_update(&self, join: Self::Node, update: UpdateOf<Self>) -> Option<UpdateOf<Self>> {
        let _ = join;
        Some(update)
    }

    /// Whether a node that pauses through its `Hitl` keeps the update it returned anyway: the
    /// engine applies it before the pause is written (a YAML interrupt node stores its rendered
    /// question in the state that way). Default `false`: a pausing node's update is discarded.
    #[inline]
    fn keeps_update_on_pause(&self, node: Self::Node) -> bool {
        let _ = node;
        false
    }

    /// The name of `node`.
    fn node_name(&self, node: Self::Node) -> NodeName;

    /// Where the run goes from `start`, given the input state; `None` if no edge applies.
    fn start(&self, state: &Self::State) -> Option<Goto<Self::Node>>;

    /// Runs `node` on `state`. An interruptible node pauses by calling `hitl.interrupt(…)`.
    fn run(
        &self,
        node: Self::Node,
        state: &Self::State,
        ctx: &Ctx<Self::State>,
        hitl: &mut Hitl,
    ) -> Result<NodeStep<Self::State, Self::Node>, BoxError>;

    /// Whether `node` is async: the async driver (`App::invoke_async` and its kin, feature
    /// `tokio`) awaits [`run_async`](Self::run_async) for it, and the sync driver refuses it
    /// with [`Error::NeedsAsync`](crate::Error::NeedsAsync). Default `false`: every node is run
    /// by [`run`](Self::run) (in an async run, on tokio's blocking pool, or on the runtime's
    /// thread for an app built with `sync_nodes_inline`).
    #[inline]
    fn is_async(&self, node: Self::Node) -> bool {
        let _ = node;
        false
    }

    /// Whether the async driver awaits [`run_async`](Self::run_async) for `node` rather than
    /// sending [`run`](Self::run) to tokio's blocking pool: every async node, and the nodes that
    /// have both forms — `graph!`'s subgraph nodes, whose child graph runs on the async driver
    /// under the async API (through `run_async`) and on the calling thread under the blocking
    /// API (through `run`). The sync driver asks [`is_async`](Self::is_async) only. Defaults to
    /// `is_async(node)`.
    #[inline]
    fn awaits(&self, node: Self::Node) -> bool {
        self.is_async(node)
    }

    /// Runs an async `node` (one for which [`awaits`](Self::awaits) holds). The future may
    /// borrow the state, the `Ctx` and the `Hitl` for as long as it runs; it is polled on the
    /// async driver's runtime, so it must not block. The default runs [`run`](Self::run) and
    /// returns its result, ready.
    fn run_async<'a>(
        &'a self,
        node: Self::Node,
        state: &'a Self::State,
        ctx: &'a Ctx<Self::State>,
        hitl: &'a mut Hitl,
    ) -> NodeFuture<'a, Self::State, Self::Node> {
        let result = self.run(node, state, ctx, hitl);
        Box::pin(std::future::ready(result))
    }

    /// Where the run goes after `node`, by its edges in declaration order; `None` if no edge
    /// applies. Not called for routers that chose with a `Command`.
    fn route(&self, node: Self::Node, state: &Self::State) -> Option<Goto<Self::Node>>;

    /// [`start`](Self::start) for a graph whose routing can fail (a condition that does not
    /// evaluate): the engine calls this one, and an error fails the run at `start`. Defaults to
    /// `Ok(self.start(state))`.
    #[inline]
    fn try_start(&self, state: &Self::State) -> Result<Option<Goto<Self::Node>>, BoxError> {
        Ok(self.start(state))
    }

    /// [`route`](Self::route) for a graph whose routing can fail: the engine calls this one,
    /// and an error is `node`'s failure. Defaults to `Ok(self.route(node, state))`.
    #[inline]
    fn try_route(&self, node: Self::Node, state: &Self::State) -> Result<Option<Goto<Self::Node>>, BoxError> {
        Ok(self.route(node, state))
    }

    /// Where the run goes after `node` when that does not depend on the state (its one edge has
    /// no guard), so the engine can route without materializing a parallel branch's state.
    /// `None`: ask [`route`](Self::route).
    fn fixed_route(&self, node: Self::Node) -> Option<Goto<Self::Node>> {
        let _ = node;
        None
    }

    /// Whether `join`'s function can read each branch's own state (it takes `&Ctx`, whose
    /// `branches()` gives them); when it cannot, the engine does not build them.
    fn reads_branches(&self, join: Self::Node) -> bool {
        let _ = join;
        true
    }

    /// Whether `from`, a router, declares `to` among its targets.
    fn can_goto(&self, from: Self::Node, to: Goto<Self::Node>) -> bool;

    /// The node named `name`, if the graph has one (used when a checkpoint is read back).
    fn node_named(&self, name: &str) -> Option<Self::Node>;

    /// Whether the run stops before `node` runs (`interrupt_before node;`).
    fn interrupt_before(&self, node: Self::Node) -> bool {
        let _ = node;
        false
    }

    /// Whether the run stops after `node` ran (`interrupt_after node;`).
    fn interrupt_after(&self, node: Self::Node) -> bool {
        let _ = node;
        false
    }

    /// For an interrupt node (`interrupt ask(q => answer);`), whether `answer` fits its answer
    /// field: checked before a resume claims the thread, so a bad answer never holds up a good
    /// one. `Err((expected type, reason))`.
    fn check_answer(&self, node: Self::Node, answer: &serde_json::Value) -> Result<(), (&'static str, String)> {
        let _ = (node, answer);
        Ok(())
    }

    /// Whether `node` is an interrupt node (`interrupt ask(q => answer);`): it runs no user
    /// code, only pauses with its question and, resumed, writes its answer. Knowing this, the
    /// engine writes the step before such a node together with its pause, and its answer
    /// together with the resume's claim of the thread: no user code runs in between, so
    /// nothing a crash could lose or repeat differs, and a cycle writes two records fewer.
    /// Default `false` (a node with a function): every step is written as it completes.
    fn asks_only(&self, node: Self::Node) -> bool {
        let _ = node;
        false
    }

    /// How long a pause of `node` may wait for its answer, in seconds (`interrupt ask(…,
    /// timeout = 3600);`); `None`: no limit.
    fn pause_timeout(&self, node: Self::Node) -> Option<u64> {
        let _ = node;
        None
    }

    /// Whether the fan-out after `node` runs its one head once per send of `node`'s command
    /// (`parallel node => target* -> join;`, see [`Command::send`](crate::Command::send)),
    /// each with its own input, rather than each head once.
    fn sends(&self, node: Self::Node) -> bool {
        let _ = node;
        false
    }

    /// What the graph declares of `node` besides its function: its retry policy, time limit
    /// and cache (`graph!`'s `retry`, `timeout` and `cache` statements; a YAML node's `retry:`,
    /// `timeout:` and `cache:`). Default `None`: the node runs once, with no limit, uncached.
    #[inline]
    fn policy(&self, node: Self::Node) -> Option<&NodePolicy> {
        let _ = node;
        None
    }

    /// The type of the run context the graph's nodes read (`graph!`'s `context T;`): its
    /// `TypeId` and name. A run that is not given a context of that type is refused with
    /// [`Error::MissingContext`](crate::Error::MissingContext) before it starts. Default
    /// `None`: a context is optional.
    #[inline]
    fn context_type(&self) -> Option<(std::any::TypeId, &'static str)> {
        None
    }

    /// The fan-out that follows `node`, if `node` is the source of a `parallel` statement.
    fn fork(&self, node: Self::Node) -> Option<Fork<'_, Self::Node>> {
        let _ = node;
        None
    }
}

/// A fan-out: after its source node, the branches start at `heads` and meet at `join`.
#[derive(Clone, Copy, Debug)]
pub struct Fork<'g, N> {
    /// The first node of each branch, in declared order (the merge order).
    pub heads: &'g [N],
    /// The node where the branches meet.
    pub join: N,
}

/// Graphs whose nodes are all sync, and so run with the blocking `run`, `run_stream`, `invoke`,
/// `resume` and `stream`.
///
/// `graph!` implements it for every graph without an `async` statement; a graph with async nodes
/// runs with `invoke_async(…).await` and its kin (feature `tokio`). A graph built at run time
/// implements it and reports an async node met by the sync driver as
/// [`Error::NeedsAsync`](crate::Error::NeedsAsync).
#[diagnostic::on_unimplemented(
    message = "graph `{Self}` has async nodes, so it runs with the async API",
    label = "`{Self}` has an `async` statement: its nodes await, which a blocking call cannot do",
    note = "call `.invoke_async(input).await` (or `run_async`, `resume_async`, `stream_async`) inside a tokio runtime; they need tea's feature `tokio`"
)]
pub trait SyncGraph: Graph {}

/// Graphs that cannot pause, and so build without a checkpointer.
///
/// `graph!` implements it for every graph without `interrupt_before`, `interrupt_after`,
/// `interruptible` or `interrupt` statements.
#[diagnostic::on_unimplemented(
    message = "graph `{Self}` can pause, so it needs a checkpointer to resume from",
    label = "`{Self}` has an interrupt, so `.build()` needs a checkpointer first",
    note = "call `.checkpointer(MemoryStore::new())` or `.checkpointer(SledStore::open(path)?)` on the builder before `.build()`"
)]
pub trait PauseFree: Graph {}
