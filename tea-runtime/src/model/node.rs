//! What a node is to the engine: a function of the state (and optionally its [`Ctx`]) whose
//! return value converts into an update or, for routers, a [`Command`].
//!
//! The traits here let `graph!` call a node without knowing which of the accepted forms it has
//! (sync, or `async` with the `Async…` traits, whose futures the async driver awaits);
//! their `on_unimplemented` messages are what a user sees, on the node's name, when a node has
//! the wrong shape.

use crate::format::checkpoint::{BranchState, ParentJump};
use crate::model::event::Event;
use crate::model::hitl::Hitl;
pub use crate::model::id::{Goto, NodeId};
use crate::model::scope::{Emit, Emitter, GraphAndCache};
use crate::tenure::Tenure;
use crate::vocab::error::BoxError;
use crate::vocab::name::{NodeName, ThreadId};
use crate::vocab::options::{Limits, RunContext};
use crate::vocab::state::GraphState;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

/// What an async node's run returns to the engine: a boxed `Send` future borrowing the state,
/// the [`Ctx`] and the [`Hitl`] for the node's run ([`Graph::run_async`](crate::model::graph::Graph::run_async)).
pub type NodeFuture<'a, S, N> = Pin<Box<dyn Future<Output = Result<NodeStep<S, N>, BoxError>> + Send + 'a>>;

/// What a router node (declared `node -> a | b;`) returns: the node to run next, and optionally
/// an update to apply first.
///
/// ```
/// # use tea::prelude::*;
/// # #[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
/// # struct Ticket { priority: u8, notes: Vec<String> }
/// # fn triage(s: &Ticket) -> Command<DeskNode> {
/// if s.priority > 3 {
///     Command::goto(DeskNode::Escalate).update(Ticket::update().notes(vec!["urgent".into()]))
/// } else {
///     Command::end()
/// }
/// # }
/// # fn escalate(_: &Ticket) {}
/// # graph! { Desk for Ticket { start -> triage; triage -> escalate | end; escalate -> end; } }
/// ```
pub struct Command<N: NodeId> {
    goto: Goto<N>,
    update: Option<<N::State as GraphState>::Update>,
    sends: Vec<crate::model::send::SendTo<N>>,
    parent: Option<ParentJump>,
}

/// A route out of a child graph to a node of its parent, made by [`Command::parent`]; its
/// [`update`](Self::update) (an update of the parent's state) makes it a [`Command`].
pub struct ParentCommand<N: NodeId, P: NodeId> {
    target: P,
    child: std::marker::PhantomData<fn() -> N>,
}

impl<N: NodeId, P: NodeId> ParentCommand<N, P> {
    /// Applies `update` to the parent's state (through its reducers) before the parent goes on.
    pub fn update(self, update: <P::State as GraphState>::Update) -> Command<N> {
        Command::with_parent(ParentJump::new(self.target, Some(update)))
    }
}

impl<N: NodeId, P: NodeId> From<ParentCommand<N, P>> for Command<N> {
    fn from(command: ParentCommand<N, P>) -> Self {
        Command::with_parent(ParentJump::new::<P>(command.target, None))
    }
}

impl<N: NodeId, P: NodeId> fmt::Debug for ParentCommand<N, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ParentCommand").field("target", &self.target).finish()
    }
}

impl<N: NodeId> Command<N> {
    /// Go to `node` next. It must be listed in this router's `->` declaration, or the run fails
    /// with [`Error::NoRoute`](crate::Error::NoRoute).
    pub fn goto(node: N) -> Self {
        Command { goto: Goto::Node(node), update: None, sends: Vec::new(), parent: None }
    }

    fn with_parent(jump: ParentJump) -> Self {
        Command { goto: Goto::End, update: None, sends: Vec::new(), parent: Some(jump) }
    }

    /// End this graph — a child graph run by a subgraph node — and go on in its parent at
    /// `target`, a node of the parent graph (its node enum: a node the parent lacks does not
    /// compile), after applying the parent update given to
    /// [`ParentCommand::update`] (or none: `.into()`). The subgraph node's own output mapping
    /// is not applied. A graph run on its own, or inside another parent than `target`'s graph,
    /// fails with [`Error::NoRoute`](crate::Error::NoRoute).
    pub fn parent<P: NodeId>(target: P) -> ParentCommand<N, P> {
        ParentCommand { target, child: std::marker::PhantomData }
    }

    /// Finish the run (the router's declaration must list `end`).
    pub fn end() -> Self {
        Command { goto: Goto::End, update: None, sends: Vec::new(), parent: None }
    }

    /// Fan out: run each send's node with its own input, as the branches of the node's
    /// `parallel node => target* -> join;` statement. Their updates merge at the join through
    /// the reducers in send order, whatever order they finish in; no sends go straight to the
    /// join. Each send's node must be the statement's `target`, or the run fails with
    /// [`Error::NoRoute`](crate::Error::NoRoute).
    ///
    /// ```
    /// # use tea::prelude::*;
    /// #[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
    /// struct Job { topics: Vec<String>, topic: String, #[reducer(append)] done: Vec<String> }
    ///
    /// fn plan(job: &Job) -> Command<MapNode> {
    ///     Command::send(job.topics.iter().map(|t| tea::SendTo::new(MapNode::Work, Job::update().topic(t.clone()))))
    /// }
    /// fn work(job: &Job) -> JobUpdate {
    ///     Job::update().done(vec![format!("did {}", job.topic)])
    /// }
    /// fn collect(_: &Job) {}
    ///
    /// graph! {
    ///     Map for Job {
    ///         start -> plan;
    ///         parallel plan => work* -> collect;
    ///         collect -> end;
    ///     }
    /// }
    /// let job = Job { topics: vec!["a".into(), "b".into()], ..Job::default() };
    /// let out = Map::builder().build().invoke(job)?;
    /// assert_eq!(out.done, ["did a", "did b"]);
    /// # Ok::<(), tea::Error>(())
    /// ```
    pub fn send(sends: impl IntoIterator<Item = crate::model::send::SendTo<N>>) -> Self {
        Command { goto: Goto::End, update: None, sends: sends.into_iter().collect(), parent: None }
    }

    /// The sends of this command ([`Command::send`]).
    pub fn sends(&self) -> &[crate::model::send::SendTo<N>] {
        &self.sends
    }

    /// Apply `update` (through the reducers) before going on.
    pub fn update(mut self, update: <N::State as GraphState>::Update) -> Self {
        self.update = Some(update);
        self
    }

    /// Where this command goes.
    pub fn target(&self) -> Goto<N> {
        self.goto
    }

    /// The update this command applies, if any.
    pub fn pending_update(&self) -> Option<&<N::State as GraphState>::Update> {
        self.update.as_ref()
    }
}

impl<N: NodeId> Clone for Command<N> {
    fn clone(&self) -> Self {
        Command { goto: self.goto, update: self.update.clone(), sends: self.sends.clone(), parent: self.parent.clone() }
    }
}

impl<N: NodeId> fmt::Debug for Command<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Command")
            .field("goto", &self.goto)
            .field("update", &self.update)
            .field("sends", &self.sends)
            .field("parent", &self.parent)
            .finish()
    }
}

/// What one node run produced, in the engine's terms.
#[doc(hidden)]
#[derive(Debug)]
pub struct NodeStep<S: GraphState, N> {
    /// The update to apply, if any.
    pub update: Option<S::Update>,
    /// A router's choice of the next node; `None` for plain nodes.
    pub goto: Option<Goto<N>>,
    /// What few steps do besides (sends, a jump in the parent graph): boxed, so that the step of
    /// a plain node stays small as it moves through the executor.
    pub(crate) more: Option<Box<More<S, N>>>,
}

/// The rare part of a [`NodeStep`].
#[derive(Debug)]
pub(crate) enum More<S: GraphState, N> {
    /// What a node that fans out by sends sent: each target node with its input.
    Sends(Vec<(N, S::Update)>),
    /// A node of a child graph routing its parent ([`Command::parent`]).
    Parent(ParentJump),
}

impl<S: GraphState, N> NodeStep<S, N> {
    /// A step with `update` and `goto`, sending nothing.
    pub fn new(update: Option<S::Update>, goto: Option<Goto<N>>) -> Self {
        NodeStep { update, goto, more: None }
    }

    /// A step with `update` that sends `sends`: each target node with its input (the node's
    /// fan-out by sends; no sends go straight to its join).
    pub fn with_sends(update: Option<S::Update>, sends: Vec<(N, S::Update)>) -> Self {
        NodeStep { update, goto: None, more: Some(Box::new(More::Sends(sends))) }
    }
}

/// The information a node can ask for by taking `&Ctx<S>` as its second argument.
///
/// Inside a parallel branch, [`step`](Ctx::step) counts from the fan-out: the node that fans out
/// at step `n`, then `n + 1`, `n + 2`, … along each branch.
///
/// ```
/// # use tea::prelude::*;
/// # #[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
/// # struct Trace { #[reducer(append)] seen: Vec<String> }
/// fn visit(_: &Trace, ctx: &Ctx<Trace>) -> TraceUpdate {
///     Trace::update().seen(vec![format!("{}@{}", ctx.node(), ctx.step())])
/// }
/// # graph! { Walk for Trace { start -> visit; visit -> end; } }
/// let out = Walk::builder().build().invoke(Trace::default()).unwrap();
/// assert_eq!(out.seen, ["visit@1"]);
/// ```
pub struct Ctx<S> {
    pub(crate) node: NodeName,
    pub(crate) step: u64,
    pub(crate) thread: Option<ThreadId>,
    pub(crate) branch: Option<NodeName>,
    pub(crate) branches: Vec<BranchState<S>>,
    /// The store and options of the run, for subgraph nodes to run their child on.
    pub(crate) tenure: Option<std::sync::Arc<Tenure>>,
    /// While streaming: where subgraph nodes put their child graph's steps (a
    /// [`ChildSteps<S>`](crate::model::node::ChildSteps), erased because `Ctx` has no `S` bound).
    pub(crate) child_steps: Option<std::sync::Arc<dyn std::any::Any + Send + Sync>>,
    /// The run's limits, which a subgraph node's child run honours too.
    pub(crate) limits: Limits,
    /// The app's graph and node cache (see `model::scope`); `None` outside an app's run.
    pub(crate) shared: Option<std::sync::Arc<GraphAndCache>>,
    /// The run's context ([`App::with_context`](crate::App::with_context)).
    pub(crate) context: Option<RunContext>,
    /// The app's long-term memory ([`Ctx::store`]).
    pub(crate) memory: Option<crate::store::Memory>,
    /// While streaming: where [`emit`](Ctx::emit) puts what the node emits.
    pub(crate) emitter: Option<std::sync::Arc<Emitter>>,
    /// Node runs the line may still take after the one running (set as each node starts): a
    /// retry is a run, and takes one of them.
    pub(crate) steps_left: u64,
    /// Retries the line's nodes took in this invocation: they count against the recursion
    /// limit as node runs do (a counter, since a node runs under a shared `&Ctx`).
    pub(crate) retried: std::sync::atomic::AtomicU64,
}

impl<S> Ctx<S> {
    pub(crate) fn new(node: NodeName, thread: Option<ThreadId>) -> Self {
        Ctx {
            node,
            step: 0,
            thread,
            branch: None,
            branches: Vec::new(),
            tenure: None,
            child_steps: None,
            limits: Limits::default(),
            shared: None,
            context: None,
            memory: None,
            emitter: None,
            steps_left: u64::MAX,
            retried: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// A copy for a task that runs the node elsewhere (the async driver's blocking pool).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn clone_for_task(&self) -> Self
    where
        S: Clone,
    {
        Ctx {
            node: self.node.clone(),
            step: self.step,
            thread: self.thread.clone(),
            branch: self.branch.clone(),
            branches: self.branches.clone(),
            tenure: self.tenure.clone(),
            child_steps: self.child_steps.clone(),
            limits: self.limits,
            shared: self.shared.clone(),
            context: self.context.clone(),
            memory: self.memory.clone(),
            emitter: self.emitter.clone(),
            steps_left: self.steps_left,
            retried: std::sync::atomic::AtomicU64::new(self.retried()),
        }
    }

    /// Retries the line's nodes took in this invocation.
    pub(crate) fn retried(&self) -> u64 {
        self.retried.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The node being run.
    pub fn node(&self) -> &NodeName {
        &self.node
    }

    /// The number of node runs in this run so far, counting this one (the first node is step 1).
    pub fn step(&self) -> u64 {
        self.step
    }

    /// The thread this run belongs to; `None` for an app without a checkpointer.
    pub fn thread(&self) -> Option<&ThreadId> {
        self.thread.as_ref()
    }

    /// Inside a parallel branch, the head of that branch; `None` on the main line.
    pub fn branch(&self) -> Option<&NodeName> {
        self.branch.as_ref()
    }

    /// At the join of a `parallel` statement, each branch's own final state, in declared branch
    /// order (the main state the join reads already has every branch merged in). Empty for every
    /// other node.
    pub fn branches(&self) -> &[BranchState<S>] {
        &self.branches
    }

    /// The run's context: the value its app was given with
    /// [`App::with_context`](crate::App::with_context) — a user id, a model name, an API
    /// client — which is not state and is never checkpointed.
    ///
    /// # Errors
    /// [`Error::MissingContext`](crate::Error::MissingContext) when the run was given no
    /// context, or one of another type than `T`.
    ///
    /// ```
    /// # use tea::prelude::*;
    /// # #[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
    /// # struct Chat { reply: String }
    /// struct Settings { model: &'static str }
    ///
    /// fn answer(_: &Chat, ctx: &Ctx<Chat>) -> Result<ChatUpdate, tea::BoxError> {
    ///     let settings = ctx.context::<Settings>()?;
    ///     Ok(Chat::update().reply(format!("asked {}", settings.model)))
    /// }
    /// graph! { Bot for Chat { context Settings; start -> answer; answer -> end; } }
    ///
    /// let app = Bot::builder().build();
    /// let out = app.with_context(Settings { model: "small" }).invoke(Chat::default())?;
    /// assert_eq!(out.reply, "asked small");
    /// // The graph declares its context: a run without one is refused before any node runs.
    /// assert!(matches!(app.invoke(Chat::default()), Err(tea::Error::MissingContext { .. })));
    /// # Ok::<(), tea::Error>(())
    /// ```
    pub fn context<T: std::any::Any>(&self) -> Result<&T, crate::vocab::error::Error> {
        let context = self.context.as_ref();
        context.and_then(|c| c.get::<T>()).ok_or_else(|| crate::vocab::error::Error::MissingContext {
            graph: String::new(),
            node: Some(self.node.clone()),
            expected: std::any::type_name::<T>(),
            found: context.map(RunContext::type_name),
        })
    }

    /// Sends `value` to the run's stream as an [`Event::Custom`](crate::Event::Custom) while
    /// the node runs — progress, an LLM's tokens — in order, before the node's own
    /// [`Event::Step`](crate::Event::Step). The async stream yields it at once; the blocking
    /// one when it next yields. Outside a stream (`invoke`, `resume`), or when the stream's
    /// modes leave out [`StreamModes::CUSTOM`](crate::StreamModes::CUSTOM), it goes nowhere.
    ///
    /// ```
    /// # use tea::prelude::*;
    /// # #[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
    /// # struct Chat { reply: String }
    /// fn answer(_: &Chat, ctx: &Ctx<Chat>) -> ChatUpdate {
    ///     let mut reply = String::new();
    ///     for token in ["Hel", "lo"] {
    ///         ctx.emit(token);
    ///         reply.push_str(token);
    ///     }
    ///     Chat::update().reply(reply)
    /// }
    /// graph! { Bot for Chat { start -> answer; answer -> end; } }
    ///
    /// let app = Bot::builder().build();
    /// let tokens: Vec<_> = app
    ///     .stream(Chat::default())
    ///     .filter_map(|event| match event {
    ///         Ok(Event::Custom { value, .. }) => Some(value),
    ///         _ => None,
    ///     })
    ///     .collect();
    /// assert_eq!(tokens, ["Hel", "lo"]);
    /// ```
    pub fn emit(&self, value: impl Into<serde_json::Value>) {
        self.note(Emit::Custom(value.into()));
    }

    /// A handle that emits as this node ([`emit`](Self::emit)) from anywhere: a task or thread
    /// the node starts (an LLM client's token callback), cheap to clone, `Send` and `'static`.
    pub fn writer(&self) -> crate::model::scope::Writer {
        crate::model::scope::Writer::new(self.emitter.clone(), self.node.clone(), self.branch.clone(), self.step)
    }

    /// Tells the run's stream (if any) `what` happened to this node.
    pub(crate) fn note(&self, what: Emit) {
        if let Some(emitter) = &self.emitter {
            emitter.emit(&self.node, self.branch.as_ref(), self.step, what);
        }
    }

    /// A `Ctx` for calling a node function outside a run, as a unit test does: `node()` is
    /// `node`, `step()` is 0, and there is no thread, no branch and no branches.
    ///
    /// ```
    /// # use tea::prelude::*;
    /// # #[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
    /// # struct Trace { #[reducer(append)] seen: Vec<String> }
    /// fn visit(_: &Trace, ctx: &Ctx<Trace>) -> TraceUpdate {
    ///     Trace::update().seen(vec![ctx.node().to_string()])
    /// }
    /// let mut trace = Trace::default();
    /// trace.apply(visit(&trace, &Ctx::detached("visit")));
    /// assert_eq!(trace.seen, ["visit"]);
    /// ```
    pub fn detached(node: impl Into<NodeName>) -> Self {
        Ctx::new(node.into(), None)
    }

    /// This `Ctx` with `memory` as its [`store`](Self::store): for a node function called
    /// outside a run ([`detached`](Self::detached)).
    pub fn with_store(mut self, memory: crate::store::Memory) -> Self {
        self.memory = Some(memory);
        self
    }

    /// The app's long-term memory: JSON items under namespaces, shared by every thread (and
    /// every app and process on the same store) — what an agent remembers of a user from one
    /// conversation to the next. It is the app's [`Builder::memory`](crate::Builder::memory),
    /// or else a memory on the app's own checkpointer; subgraph nodes' children and parallel
    /// branches share their run's.
    ///
    /// Its calls are blocking store calls (an async node on a disk or network store makes them
    /// as it makes any blocking call).
    ///
    /// # Errors
    /// [`Error::NoMemory`](crate::Error::NoMemory) in an app with neither a checkpointer nor a
    /// memory.
    ///
    /// ```
    /// # use tea::prelude::*;
    /// use serde_json::json;
    /// # #[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
    /// # struct Chat { user: String, reply: String }
    /// fn answer(state: &Chat, ctx: &Ctx<Chat>) -> Result<ChatUpdate, tea::BoxError> {
    ///     let memory = ctx.store()?;
    ///     let ns = ["users", state.user.as_str()];
    ///     let seen = memory.get(&ns, "visits")?.map_or(0, |item| item.value["n"].as_u64().unwrap_or(0));
    ///     memory.put(&ns, "visits", json!({ "n": seen + 1 }))?;
    ///     Ok(Chat::update().reply(format!("visit {}", seen + 1)))
    /// }
    /// graph! { Bot for Chat { start -> answer; answer -> end; } }
    ///
    /// let app = Bot::builder().checkpointer(MemoryStore::new()).build();
    /// let ada = || Chat { user: "ada".into(), ..Chat::default() };
    /// app.run(Call::start(ada()).on("monday"))?;
    /// let out = app.run(Call::start(ada()).on("tuesday"))?.done().unwrap();
    /// assert_eq!(out.reply, "visit 2"); // another thread, the same memory
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn store(&self) -> Result<&crate::store::Memory, crate::vocab::error::Error> {
        self.memory.as_ref().ok_or_else(|| crate::vocab::error::Error::NoMemory { node: self.node.clone() })
    }
}

impl<S> fmt::Debug for Ctx<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ctx")
            .field("node", &self.node)
            .field("step", &self.step)
            .field("thread", &self.thread)
            .field("branch", &self.branch)
            .field("branches", &self.branches.len())
            .finish()
    }
}

/// What a plain node may return: its state's update type, `()`, or a `Result` of either.
///
/// `#[derive(GraphState)]` implements it for the update type it generates (and `Result`s of it).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not what a node of state `{S}` can return",
    label = "this node's function returns `{Self}`",
    note = "a node returns the state's update type (`{S}::update()…`), `()`, or `Result` of either with an error that converts into `Box<dyn Error + Send + Sync>`",
    note = "a node that returns a `Command` must be declared as a router in the graph: `node -> a | b;`",
    note = "an `async fn` node (one that returns a future) must be listed in the graph's `async` statement: `async node;`"
)]
pub trait NodeOutput<S: GraphState> {
    /// The update to apply, or the node's error.
    fn into_update(self) -> Result<Option<S::Update>, BoxError>;
}

impl<S: GraphState> NodeOutput<S> for () {
    fn into_update(self) -> Result<Option<S::Update>, BoxError> {
        Ok(None)
    }
}

impl<S: GraphState, E: Into<BoxError>> NodeOutput<S> for Result<(), E> {
    fn into_update(self) -> Result<Option<S::Update>, BoxError> {
        self.map(|()| None).map_err(Into::into)
    }
}

/// What a router node (`node -> a | b;`) may return: a [`Command`] of its graph, or a `Result`
/// of one.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not what a router node can return",
    label = "this node is declared `node -> a | b;`, so it must return a `Command`",
    note = "a router returns `Command<{N}>` (or `Result<Command<{N}>, E>`): `Command::goto({N}::…)` or `Command::end()`",
    note = "if the node should return a plain update, route it with edges (`node -> a;`, `node -> a if guard;`) instead of `|`",
    note = "an `async fn` router must be listed in the graph's `async` statement: `async node;`"
)]
pub trait RouterOutput<N: NodeId> {
    /// The command, or the node's error.
    fn into_command(self) -> Result<Command<N>, BoxError>;
}

impl<N: NodeId> RouterOutput<N> for Command<N> {
    fn into_command(self) -> Result<Command<N>, BoxError> {
        Ok(self)
    }
}

impl<N: NodeId, E: Into<BoxError>> RouterOutput<N> for Result<Command<N>, E> {
    fn into_command(self) -> Result<Command<N>, BoxError> {
        self.map_err(Into::into)
    }
}

/// A node function, whatever its accepted form: `fn(&S) -> R` or `fn(&S, &Ctx<S>) -> R`.
///
/// `Form` only tells the forms apart; it is inferred.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a node function of state `{S}`",
    label = "expected `fn(&{S}) -> R` or `fn(&{S}, &Ctx<{S}>) -> R`",
    note = "a node takes the state by reference, optionally followed by `&Ctx<{S}>`",
    note = "a node that takes `&mut Hitl` to pause from inside must be declared in the graph: `interruptible node;`",
    note = "an `async fn` node must be listed in the graph's `async` statement: `async node;`"
)]
pub trait NodeFn<S, Form> {
    /// What the function returns.
    type Output;
    /// Whether the function takes `&Ctx<S>`.
    const TAKES_CTX: bool;
    /// Calls the function.
    fn call(&self, state: &S, ctx: &Ctx<S>) -> Self::Output;
}

#[doc(hidden)]
#[derive(Debug)]
pub enum StateOnly {}
#[doc(hidden)]
#[derive(Debug)]
pub enum WithCtx {}

/// Implements a node-function trait for one of its forms: the trait's `call` takes the state
/// and `$param`s, and hands the function the state and `$arg`s (those of the `$param`s the form
/// takes, in order). `async` forms return the function's future, borrowing for `'a`.
macro_rules! node_form {
    ($Trait:ident<$Form:ident>($($param:ident: $pty:ty),*) => ($($arg:ident: $aty:ty),*), takes_ctx: $takes:literal) => {
        impl<S, F, R> $Trait<S, ($Form, R)> for F
        where
            F: Fn(&S $(, $aty)*) -> R,
        {
            type Output = R;
            const TAKES_CTX: bool = $takes;
            #[allow(unused_variables)] // the `$param`s the form does not take
            fn call(&self, state: &S, $($param: $pty),*) -> R {
                self(state $(, $arg)*)
            }
        }
    };
    (async $Trait:ident<$Form:ident>($($param:ident: $pty:ty),*) => ($($arg:ident: $aty:ty),*), takes_ctx: $takes:literal) => {
        impl<'a, S: 'a, F, Fut> $Trait<'a, S, ($Form, Fut)> for F
        where
            F: Fn(&'a S $(, $aty)*) -> Fut,
            Fut: Future + 'a,
        {
            type Output = Fut::Output;
            type Future = Fut;
            const TAKES_CTX: bool = $takes;
            #[allow(unused_variables)] // the `$param`s the form does not take
            fn call(&self, state: &'a S, $($param: $pty),*) -> Fut {
                self(state $(, $arg)*)
            }
        }
    };
}

node_form!(NodeFn<StateOnly>(ctx: &Ctx<S>) => (), takes_ctx: false);
node_form!(NodeFn<WithCtx>(ctx: &Ctx<S>) => (ctx: &Ctx<S>), takes_ctx: true);

/// The function of an `interruptible` node: `fn(&S, &mut Hitl) -> R` or
/// `fn(&S, &Ctx<S>, &mut Hitl) -> R`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not the function of an interruptible node of state `{S}`",
    label = "this node is declared `interruptible`, so its function takes `&mut Hitl`",
    note = "an interruptible node is `fn(&{S}, &mut Hitl) -> R` or `fn(&{S}, &Ctx<{S}>, &mut Hitl) -> R`",
    note = "if the node never pauses, remove it from the `interruptible` statement",
    note = "an `async fn` node must be listed in the graph's `async` statement: `async node;`"
)]
pub trait InterruptibleFn<S, Form> {
    /// What the function returns.
    type Output;
    /// Whether the function takes `&Ctx<S>`.
    const TAKES_CTX: bool;
    /// Calls the function.
    fn call(&self, state: &S, ctx: &Ctx<S>, hitl: &mut Hitl) -> Self::Output;
}

#[doc(hidden)]
#[derive(Debug)]
pub enum WithHitl {}
#[doc(hidden)]
#[derive(Debug)]
pub enum WithCtxHitl {}

node_form!(InterruptibleFn<WithHitl>(ctx: &Ctx<S>, hitl: &mut Hitl) => (hitl: &mut Hitl), takes_ctx: false);
node_form!(InterruptibleFn<WithCtxHitl>(ctx: &Ctx<S>, hitl: &mut Hitl) => (ctx: &Ctx<S>, hitl: &mut Hitl), takes_ctx: true);

/// A guard on an edge (`a -> b if guard;`): `fn(&S) -> bool`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a guard of state `{S}`",
    label = "expected `fn(&{S}) -> bool`",
    note = "a guard reads the state and says whether its edge applies: `fn approved(s: &{S}) -> bool`"
)]
pub trait Guard<S> {
    /// Whether the edge applies.
    fn holds(&self, state: &S) -> bool;
}

impl<S, F: Fn(&S) -> bool> Guard<S> for F {
    fn holds(&self, state: &S) -> bool {
        self(state)
    }
}

/// Runs a plain node (generated code calls this, spanned on the node's name).
#[doc(hidden)]
#[inline(always)]
pub fn run_node<S, N, F, Form>(f: &F, state: &S, ctx: &Ctx<S>) -> Result<NodeStep<S, N>, BoxError>
where
    S: GraphState,
    F: NodeFn<S, Form>,
    F::Output: NodeOutput<S>,
{
    update_step(f.call(state, ctx))
}

/// Runs a router node (generated code calls this, spanned on the node's name).
#[doc(hidden)]
#[inline(always)]
pub fn run_router<S, N, F, Form>(f: &F, state: &S, ctx: &Ctx<S>) -> Result<NodeStep<S, N>, BoxError>
where
    S: GraphState,
    N: NodeId<State = S>,
    F: NodeFn<S, Form>,
    F::Output: RouterOutput<N>,
{
    router_step(f.call(state, ctx))
}

/// A router's command as a step: its goto, or its sends (which go to the node's fan-out).
fn command_step<S: GraphState, N: NodeId<State = S>>(command: Command<N>) -> NodeStep<S, N> {
    if let Some(jump) = command.parent {
        NodeStep { update: command.update, goto: None, more: Some(Box::new(More::Parent(jump))) }
    } else if command.sends.is_empty() {
        NodeStep::new(command.update, Some(command.goto))
    } else {
        let sends = command.sends.into_iter().map(crate::model::send::SendTo::into_parts).collect();
        NodeStep::with_sends(command.update, sends)
    }
}

/// A plain node's output as its step: the update it returned, if any.
#[inline(always)]
fn update_step<S: GraphState, N>(output: impl NodeOutput<S>) -> Result<NodeStep<S, N>, BoxError> {
    Ok(NodeStep::new(output.into_update()?, None))
}

/// A router's output as its step ([`command_step`]).
#[inline(always)]
fn router_step<S: GraphState, N: NodeId<State = S>>(output: impl RouterOutput<N>) -> Result<NodeStep<S, N>, BoxError> {
    Ok(command_step(output.into_command()?))
}

/// An async node's run: its function's `future`, whose output `step` makes the node's step.
#[inline]
fn boxed<'a, S, N, Fut>(
    future: Fut,
    step: impl FnOnce(Fut::Output) -> Result<NodeStep<S, N>, BoxError> + Send + 'a,
) -> NodeFuture<'a, S, N>
where
    S: GraphState,
    Fut: Future + Send + 'a,
{
    Box::pin(async move { step(future.await) })
}

/// Runs an `interruptible` plain node (generated code calls this, spanned on the node's name).
#[doc(hidden)]
#[inline(always)]
pub fn run_interruptible<S, N, F, Form>(
    f: &F,
    state: &S,
    ctx: &Ctx<S>,
    hitl: &mut Hitl,
) -> Result<NodeStep<S, N>, BoxError>
where
    S: GraphState,
    F: InterruptibleFn<S, Form>,
    F::Output: NodeOutput<S>,
{
    update_step(f.call(state, ctx, hitl))
}

/// Runs an `interruptible` router (generated code calls this, spanned on the node's name).
#[doc(hidden)]
#[inline(always)]
pub fn run_interruptible_router<S, N, F, Form>(
    f: &F,
    state: &S,
    ctx: &Ctx<S>,
    hitl: &mut Hitl,
) -> Result<NodeStep<S, N>, BoxError>
where
    S: GraphState,
    N: NodeId<State = S>,
    F: InterruptibleFn<S, Form>,
    F::Output: RouterOutput<N>,
{
    router_step(f.call(state, ctx, hitl))
}

/// Runs an interrupt node (`interrupt ask(question => answer);`): pauses with `payload`, and on
/// resume writes the answer through `write` (the answer field's setter).
#[doc(hidden)]
#[inline(always)]
pub fn run_interrupt_node<S, N, P, A>(
    hitl: &mut Hitl,
    payload: &P,
    write: impl FnOnce(A) -> S::Update,
) -> Result<NodeStep<S, N>, BoxError>
where
    S: GraphState,
    P: serde::Serialize + ?Sized,
    A: serde::de::DeserializeOwned,
{
    let answer: A = hitl.interrupt_for_field(payload)?;
    Ok(NodeStep::new(Some(write(answer)), None))
}

/// Whether a node function takes `&Ctx` (generated code asks it of join nodes).
#[doc(hidden)]
pub fn takes_ctx<S, F: NodeFn<S, Form>, Form>(_: &F) -> bool {
    F::TAKES_CTX
}

/// Whether an interruptible node's function takes `&Ctx`.
#[doc(hidden)]
pub fn interruptible_takes_ctx<S, F: InterruptibleFn<S, Form>, Form>(_: &F) -> bool {
    F::TAKES_CTX
}

/// Evaluates a guard (generated code calls this, spanned on the guard's name).
#[doc(hidden)]
#[inline(always)]
pub fn guard<S, F: Guard<S>>(f: &F, state: &S) -> bool {
    f.holds(state)
}

/// An async node function, whatever its accepted form: `async fn(&S) -> R`,
/// `async fn(&S, &Ctx<S>) -> R`, or a plain `fn` with those arguments returning a future of `R`.
///
/// `'a` is how long the future may borrow the state and the `Ctx`: the node's run. `Form` only
/// tells the forms apart; it is inferred. The engine also needs the future to be `Send` (it
/// runs on a multi-threaded runtime): the functions that run nodes ask for it, so that a future
/// holding an `Rc` across an `.await` gets the compiler's own diagnostic, which names the value
/// and the `.await`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an async node function of state `{S}`",
    label = "this node is declared `async`, so its function returns a future",
    note = "an async node is `async fn(&{S}) -> R` or `async fn(&{S}, &Ctx<{S}>) -> R`, or a `fn` with those arguments returning `impl Future<Output = R> + Send + '_`",
    note = "a node that takes `&mut Hitl` to pause from inside must be declared in the graph: `interruptible node;`",
    note = "a sync node (`fn`, not `async fn`) must not be listed in the `async` statement"
)]
pub trait AsyncNodeFn<'a, S: 'a, Form> {
    /// What the future resolves to.
    type Output;
    /// The future the function returns.
    type Future: Future<Output = Self::Output> + 'a;
    /// Whether the function takes `&Ctx<S>`.
    const TAKES_CTX: bool;
    /// Calls the function.
    fn call(&self, state: &'a S, ctx: &'a Ctx<S>) -> Self::Future;
}

node_form!(async AsyncNodeFn<StateOnly>(ctx: &'a Ctx<S>) => (), takes_ctx: false);
node_form!(async AsyncNodeFn<WithCtx>(ctx: &'a Ctx<S>) => (ctx: &'a Ctx<S>), takes_ctx: true);

/// The function of a node declared both `async` and `interruptible`:
/// `async fn(&S, &mut Hitl) -> R` or `async fn(&S, &Ctx<S>, &mut Hitl) -> R` (or a `fn` with
/// those arguments returning a future of `R`), whose future is `Send` like
/// [`AsyncNodeFn`]'s.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not the function of an async interruptible node of state `{S}`",
    label = "this node is declared `async` and `interruptible`, so its function takes `&mut Hitl` and returns a future",
    note = "an async interruptible node is `async fn(&{S}, &mut Hitl) -> R` or `async fn(&{S}, &Ctx<{S}>, &mut Hitl) -> R`, or a `fn` with those arguments returning `impl Future<Output = R> + Send + '_`",
    note = "if the node never pauses, remove it from the `interruptible` statement",
    note = "a sync node (`fn`, not `async fn`) must not be listed in the `async` statement"
)]
pub trait AsyncInterruptibleFn<'a, S: 'a, Form> {
    /// What the future resolves to.
    type Output;
    /// The future the function returns.
    type Future: Future<Output = Self::Output> + 'a;
    /// Whether the function takes `&Ctx<S>`.
    const TAKES_CTX: bool;
    /// Calls the function.
    fn call(&self, state: &'a S, ctx: &'a Ctx<S>, hitl: &'a mut Hitl) -> Self::Future;
}

node_form!(async AsyncInterruptibleFn<WithHitl>(ctx: &'a Ctx<S>, hitl: &'a mut Hitl) => (hitl: &'a mut Hitl), takes_ctx: false);
node_form!(
    async AsyncInterruptibleFn<WithCtxHitl>(ctx: &'a Ctx<S>, hitl: &'a mut Hitl) => (ctx: &'a Ctx<S>, hitl: &'a mut Hitl),
    takes_ctx: true
);

/// Runs an async plain node (generated code calls this, spanned on the node's name).
#[doc(hidden)]
#[inline]
pub fn run_node_async<'a, S, N, F, Form, Fut>(f: &F, state: &'a S, ctx: &'a Ctx<S>) -> NodeFuture<'a, S, N>
where
    S: GraphState,
    N: 'a,
    F: AsyncNodeFn<'a, S, Form, Future = Fut>,
    Fut: Future + Send + 'a,
    Fut::Output: NodeOutput<S>,
{
    boxed(f.call(state, ctx), update_step)
}

/// Runs an async router node (generated code calls this, spanned on the node's name).
#[doc(hidden)]
#[inline]
pub fn run_router_async<'a, S, N, F, Form, Fut>(f: &F, state: &'a S, ctx: &'a Ctx<S>) -> NodeFuture<'a, S, N>
where
    S: GraphState,
    N: NodeId<State = S>,
    F: AsyncNodeFn<'a, S, Form, Future = Fut>,
    Fut: Future + Send + 'a,
    Fut::Output: RouterOutput<N>,
{
    boxed(f.call(state, ctx), router_step)
}

/// Runs an async `interruptible` plain node (generated code calls this, spanned on the node's
/// name).
#[doc(hidden)]
#[inline]
pub fn run_interruptible_async<'a, S, N, F, Form, Fut>(
    f: &F,
    state: &'a S,
    ctx: &'a Ctx<S>,
    hitl: &'a mut Hitl,
) -> NodeFuture<'a, S, N>
where
    S: GraphState,
    N: 'a,
    F: AsyncInterruptibleFn<'a, S, Form, Future = Fut>,
    Fut: Future + Send + 'a,
    Fut::Output: NodeOutput<S>,
{
    boxed(f.call(state, ctx, hitl), update_step)
}

/// Runs an async `interruptible` router (generated code calls this, spanned on the node's name).
#[doc(hidden)]
#[inline]
pub fn run_interruptible_router_async<'a, S, N, F, Form, Fut>(
    f: &F,
    state: &'a S,
    ctx: &'a Ctx<S>,
    hitl: &'a mut Hitl,
) -> NodeFuture<'a, S, N>
where
    S: GraphState,
    N: NodeId<State = S>,
    F: AsyncInterruptibleFn<'a, S, Form, Future = Fut>,
    Fut: Future + Send + 'a,
    Fut::Output: RouterOutput<N>,
{
    boxed(f.call(state, ctx, hitl), router_step)
}

/// What the sync [`Graph::run`](crate::Graph::run) of a graph returns for an async node
/// (generated code calls this). The engine's sync driver asks
/// [`Graph::is_async`](crate::Graph::is_async) first and never gets here.
#[doc(hidden)]
#[cold]
pub fn async_node_run_sync<S: GraphState, N>(node: &'static str) -> Result<NodeStep<S, N>, BoxError> {
    Err(format!("node `{node}` is async: it runs with `run_async` (the async API), not with the blocking `run`").into())
}

/// A sync node's result as a ready [`NodeFuture`]: what generated `run_async` does for a node
/// that is not async (the engine only asks it for async nodes).
#[doc(hidden)]
#[inline]
pub fn ready_step<'a, S: GraphState, N: Send + 'a>(result: Result<NodeStep<S, N>, BoxError>) -> NodeFuture<'a, S, N> {
    Box::pin(std::future::ready(result))
}

/// Whether an async node function takes `&Ctx` (generated code asks it of join nodes).
#[doc(hidden)]
pub fn async_takes_ctx<'a, S: 'a, F: AsyncNodeFn<'a, S, Form>, Form>(_: &F) -> bool {
    F::TAKES_CTX
}

/// Whether an async interruptible node's function takes `&Ctx`.
#[doc(hidden)]
pub fn async_interruptible_takes_ctx<'a, S: 'a, F: AsyncInterruptibleFn<'a, S, Form>, Form>(_: &F) -> bool {
    F::TAKES_CTX
}

impl ParentJump {
    /// A jump to `target`, a node of the parent graph (whose node type is `P`), applying
    /// `update` there first.
    pub(crate) fn new<P: NodeId>(target: P, update: Option<<P::State as GraphState>::Update>) -> Self {
        let (update, error) = match update.map(serde_json::to_value) {
            None => (None, None),
            Some(Ok(value)) => (Some(value), None),
            Some(Err(e)) => (None, Some(format!("the parent update does not serialize: {e}"))),
        };
        let target = target.node_str().map_or_else(|| format!("{target:?}"), str::to_owned);
        let node_type = Some(std::any::TypeId::of::<P>());
        ParentJump { parent: None, legacy_type: None, node_type, target, update, error }
    }
}

/// Where a streaming run's subgraph nodes put their child's steps (held by `Ctx::child_steps`,
/// drained by the run after the node, ahead of the node's own step).
pub(crate) type ChildSteps<S> = Mutex<Vec<Event<S>>>;

/// The sink for child steps of a streaming run (`None` when the run does not stream).
pub(crate) fn child_steps<S: GraphState>(ctx: &Ctx<S>) -> Option<&ChildSteps<S>> {
    ctx.child_steps.as_deref().and_then(|sink| sink.downcast_ref::<ChildSteps<S>>())
}
