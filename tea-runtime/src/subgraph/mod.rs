//! Graphs inside graphs: subgraph nodes (`subgraph research = Researcher;`).
//!
//! A subgraph node runs a whole child graph through the same engine: an [`App`] of the child on
//! the parent's store and options (its [`Tenure`](crate::tenure::Tenure), carried by the parent's
//! `Ctx`). The child's
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
//!
//! Generated code calls `run_subgraph_shared`/`run_subgraph_mapped` from the node's
//! `Graph::run` (the blocking API) and `run_subgraph_shared_async`/`run_subgraph_mapped_async`
//! from its `Graph::run_async` (the async driver awaits subgraph nodes, so the child runs on
//! the async driver whether it has async nodes or not). All four are one `run_child`, async
//! code written once over a `ChildApi` (`child`), as the machine is over its `Driver`. Neither
//! asks the child to be a `SyncGraph`: `graph!` bounds the parent's `impl SyncGraph` on its
//! children's, so a child with async nodes makes its parent async.
//!
//! A child over the parent's state turns what it changed into an update (`delta`: `append` by
//! the items added, `sum` by the difference, …), so it merges in a parallel branch like any
//! node. A child's busy thread, lost lease, pause without a store and bad answers leave
//! `run_child` as the parent's run error rather than as the node's failure (`pass_through`).
//! A child without a store runs within its parent's limits, as a child with one does.
//!
//! Streams: a recording parent run gives its nodes' `Ctx` (a branch's too) a sink for child
//! steps; `run_child` then streams the child and pushes each of its steps there, its node and
//! branch prefixed with `node/`, and the parent's stream yields them before the node's own step.
//! A run that does not record has no sink, at no cost to `invoke`.
//!
//! `Command::parent` is a `ParentJump`: the child's run ends, its final checkpoint records the
//! jump with the parent graph's declared name (never a Rust type name), and the subgraph node
//! checks that name against its own graph's and turns the jump into its step, so a recover of
//! the parent replays it.
//!
//! Leases across levels: while a child runs, whenever it writes its own lease or its
//! ancestors' are due, it renews the lease of each ancestor whose lease is half gone, by
//! compare-and-swap on that ancestor's head through the child's own driver; a lost swap is
//! `Error::LeaseLost`. A live parent whose child outlasts the lease is therefore never taken
//! over by a `recover`.

use crate::api::app::App;
use crate::api::call::Call;
use crate::format::checkpoint::ParentJump;
use crate::format::interrupt::Interrupt;
use crate::format::memo::{MEMO, REPLY};
use crate::format::token::Resume;
use crate::machine::driver::now_or_never;
use crate::machine::validate::decode_for;
use crate::model::event::Event;
use crate::model::graph::Graph;
use crate::model::hitl::Hitl;
use crate::model::node::{child_steps, ChildSteps, Ctx, Goto, NodeFuture, NodeId, NodeStep};
use crate::model::outcome::Outcome;
use crate::store::Checkpointer;
use crate::vocab::error::{BoxError, Error, Passthrough};
use crate::vocab::name::{CheckpointId, NodeName, ThreadId};
use crate::vocab::state::{GraphState, Reducer};
#[cfg(feature = "tokio")]
use child::OnTokio;
use child::{again, Blocking, ChildApi, Forward, Inherit};
use serde_json::{json, Value};
use std::any::TypeId;
use std::pin::pin;
use std::sync::{Arc, PoisonError};

mod child;

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
/// calls it for `subgraph node = Child(input => output);` from the node's `run` (the blocking
/// API: the child runs on the calling thread).
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
    C: Graph,
    I: Fn(&S) -> C::State,
    O: Fn(&S, C::State) -> S::Update,
{
    // The blocking API's answers are ready at once: the child's whole run is one poll.
    let run = run_child(&Blocking, child, state, ctx, hitl, TypeId::of::<N>(), input, &|_| None, false);
    let done = now_or_never(pin!(run)).map_err(pass_through(&ctx.node))?;
    mapped_step(done, output, state, ctx)
}

/// [`run_subgraph_mapped`] from the node's `run_async` (the async API): the child runs on the
/// async driver, its async nodes awaited. Without tea's feature `tokio` there is no async driver
/// to call it, and it fails.
#[doc(hidden)]
pub fn run_subgraph_mapped_async<'a, S, N, C, I, O>(
    child: C,
    input: &'a I,
    output: &'a O,
    state: &'a S,
    ctx: &'a Ctx<S>,
    hitl: &'a mut Hitl,
) -> NodeFuture<'a, S, N>
where
    S: GraphState,
    N: NodeId,
    C: Graph,
    I: Fn(&S) -> C::State + Sync,
    O: Fn(&S, C::State) -> S::Update + Sync,
{
    #[cfg(feature = "tokio")]
    return Box::pin(async move {
        let done = run_child(&OnTokio, child, state, ctx, hitl, TypeId::of::<N>(), input, &|_| None, false)
            .await
            .map_err(pass_through(&ctx.node))?;
        mapped_step(done, output, state, ctx)
    });
    #[cfg(not(feature = "tokio"))]
    {
        let _ = (input, output, state, hitl);
        Box::pin(std::future::ready(Err(needs_tokio(&ctx.node, child.name()))))
    }
}

/// The error of a subgraph node's `run_async` without tea's feature `tokio` (no driver calls it
/// then: the blocking API runs the node's `run`).
#[cfg(not(feature = "tokio"))]
fn needs_tokio(node: &NodeName, child: &str) -> BoxError {
    format!("subgraph node `{node}` runs its child `{child}` with the async API, which needs tea's feature `tokio`")
        .into()
}

/// The step of a subgraph node with a mapped child that finished as `done`.
fn mapped_step<S, N, T, O>(done: Finished<T>, output: &O, state: &S, ctx: &Ctx<S>) -> Result<NodeStep<S, N>, BoxError>
where
    S: GraphState,
    N: NodeId,
    O: Fn(&S, T) -> S::Update,
{
    if let Some(jump) = done.jump {
        return jump.step(&done.graph, done.thread.as_ref(), parent_graph(ctx));
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
/// code calls it for `subgraph node = Child;` from the node's `run` (the blocking API).
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
    C: Graph<State = S>,
{
    let (input, as_parent) = (|s: &S| s.clone(), |s: &S| Some(s.clone()));
    let run = run_child(&Blocking, child, state, ctx, hitl, TypeId::of::<N>(), &input, &as_parent, true);
    let done = now_or_never(pin!(run)).map_err(pass_through(&ctx.node))?;
    shared_step(done, state, ctx)
}

/// [`run_subgraph_shared`] from the node's `run_async` (the async API): the child runs on the
/// async driver. Without tea's feature `tokio` there is no async driver to call it, and it fails.
///
/// It does not ask `C::State` to be `S` of the compiler: the node's `run` arm, which calls
/// [`run_subgraph_shared`], does, so that a child over another state is one error, not two. A
/// child whose state is not the parent's therefore never gets here; were one to, the node fails.
#[doc(hidden)]
pub fn run_subgraph_shared_async<'a, S, N, C>(
    child: C,
    state: &'a S,
    ctx: &'a Ctx<S>,
    hitl: &'a mut Hitl,
) -> NodeFuture<'a, S, N>
where
    S: GraphState,
    N: NodeId,
    C: Graph,
{
    #[cfg(feature = "tokio")]
    return Box::pin(async move {
        let name = child.name().to_owned();
        let not_shared = || -> BoxError {
            format!("child graph `{name}` does not have its parent's state, so it needs a mapping").into()
        };
        let Some(start) = (state as &dyn std::any::Any).downcast_ref::<C::State>().cloned() else {
            return Err(not_shared());
        };
        let as_parent = |s: &C::State| (s as &dyn std::any::Any).downcast_ref::<S>().cloned();
        let done =
            run_child(&OnTokio, child, state, ctx, hitl, TypeId::of::<N>(), &|_: &S| start.clone(), &as_parent, true)
                .await
                .map_err(pass_through(&ctx.node))?;
        let owned =
            |s: C::State| (Box::new(s) as Box<dyn std::any::Any>).downcast::<S>().map(|s| *s).map_err(|_| not_shared());
        let last = owned(done.last)?;
        let first = done.first.map(owned).transpose()?;
        let done = Finished { first, last, jump: done.jump, graph: done.graph, thread: done.thread };
        shared_step(done, state, ctx)
    });
    #[cfg(not(feature = "tokio"))]
    {
        let _ = (state, hitl);
        Box::pin(std::future::ready(Err(needs_tokio(&ctx.node, child.name()))))
    }
}

/// The step of a subgraph node whose child, over the parent's state, finished as `done`.
fn shared_step<S: GraphState, N: NodeId>(
    done: Finished<S>,
    state: &S,
    ctx: &Ctx<S>,
) -> Result<NodeStep<S, N>, BoxError> {
    if let Some(jump) = done.jump {
        return jump.step(&done.graph, done.thread.as_ref(), parent_graph(ctx));
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
    /// The child's thread (`None`: it ran without a store).
    thread: Option<ThreadId>,
}

/// The declared name of the graph whose run runs this subgraph node (`None` without a store).
fn parent_graph<S>(ctx: &Ctx<S>) -> Option<&str> {
    ctx.tenure.as_deref().map(|tenure| tenure.graph.as_str())
}

/// Marks the child's errors that the parent's run reports as its own ([`Passthrough`]) rather
/// than as subgraph node `node`'s failure: a busy child thread, a lost lease, a pause without a
/// store, and a bad answer to one of the child's pauses — [`Error::BadResumeValue`], its node
/// named by its path (`review/judge`), as the parent's pause ids name it. (The parent's resume
/// then fails as a whole: its pause is put back and the child's stays, so the token stays good.)
fn pass_through(node: &NodeName) -> impl Fn(BoxError) -> BoxError + '_ {
    move |error| match error.downcast::<Error>() {
        Ok(error) => match *error {
            Error::BadResumeValue { node: child, expected, reason } => Box::new(Passthrough(Error::BadResumeValue {
                node: NodeName::from(format!("{node}/{child}")),
                expected,
                reason,
            })),
            error @ (Error::ThreadBusy { .. } | Error::LeaseLost { .. } | Error::PausedWithoutCheckpointer { .. }) => {
                Box::new(Passthrough(error))
            }
            error => Box::new(error),
        },
        Err(other) => other,
    }
}

/// What hands the child's steps to the parent's stream (`sink`, `None`: the parent does not
/// stream), named by their path (`review/judge`), with the child's state where `as_parent`
/// makes it the parent's and the parent's `state` before the node otherwise.
fn forwarder<'a, S: GraphState, T: GraphState, F: Fn(&T) -> Option<S> + Sync + ?Sized>(
    ctx: &'a Ctx<S>,
    state: &'a S,
    sink: Option<&'a ChildSteps<S>>,
    as_parent: &'a F,
) -> impl FnMut(Event<T>) + Send + 'a {
    move |event: Event<T>| {
        let Some(sink) = sink else { return };
        let path = |node: NodeName| NodeName::from(format!("{}/{node}", ctx.node));
        let event = match event {
            Event::Step { node, branch, state: child_state, duration } => {
                let state = as_parent(&child_state).unwrap_or_else(|| state.clone());
                Event::Step { node: path(node), branch: branch.map(path), state, duration }
            }
            // What the child's nodes emitted, their starts, retries and cache hits: the
            // parent's stream yields them too, by their path.
            Event::Custom { node, value } => Event::Custom { node: path(node), value },
            Event::Started { node, branch, step, at } => {
                Event::Started { node: path(node), branch: branch.map(path), step, at }
            }
            Event::Retry { node, branch, attempt, error, wait } => {
                Event::Retry { node: path(node), branch: branch.map(path), attempt, error, wait }
            }
            Event::CacheHit { node, branch } => Event::CacheHit { node: path(node), branch: branch.map(path) },
            // The child's updates are of its own state; its end and pauses are the node's.
            Event::Update { .. } | Event::Interrupted { .. } | Event::Done(_) => return,
        };
        sink.lock().unwrap_or_else(PoisonError::into_inner).push(event);
    }
}

/// The child's thread of a subgraph node run with a store (the one its memo names when it
/// paused before, else [`child_thread`]), and the reply a resume handed the node for it.
fn thread_and_reply<S>(ctx: &Ctx<S>, hitl: &Hitl, parent: &ThreadId) -> (ThreadId, Option<Value>) {
    let given = hitl.given();
    let memo = given.first().and_then(|v| v.get(MEMO));
    let reply = given.last().and_then(|v| v.get(REPLY)).cloned();
    let thread = match memo.and_then(|m| m.get("thread")).and_then(Value::as_str) {
        Some(thread) => ThreadId::from(thread.to_owned()),
        None => child_thread(ctx, parent),
    };
    (thread, reply)
}

/// The child's pause `resume` given the answers of `reply` (by the child's own pause ids).
fn answered<T: GraphState>(mut resume: Resume<T>, reply: &Value) -> Resume<T> {
    for pair in reply.as_array().into_iter().flatten() {
        if let (Some(id), Some(value)) = (pair.get(0).and_then(Value::as_str), pair.get(1)) {
            resume = resume.answer_to(id, value);
        }
    }
    resume
}

/// Pauses the subgraph node on its child's pause (`resume`, the child of graph `graph` on
/// `thread`, in `child_state`): the child's pauses listed under ids that name the path, and the
/// memo the node is given back when resumed.
fn pause_on_child<S, T: GraphState>(
    ctx: &Ctx<S>,
    hitl: &mut Hitl,
    graph: &str,
    thread: &ThreadId,
    child_state: &T,
    resume: &Resume<T>,
) -> BoxError {
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
    let child_state = serde_json::to_value(child_state).unwrap_or(Value::Null);
    let memo = json!({ MEMO: { "graph": graph, "thread": thread.as_str(), "state": child_state } });
    Box::new(hitl.pause_child(memo, pauses))
}

/// Runs, resumes or recovers the child of a subgraph node through `api`; a pause of the child
/// pauses the node (an `Err` the engine reads as a pause through `hitl`). While the parent
/// streams, the child streams too and its steps go to the parent's stream ([`forwarder`]).
/// Callers hand its errors through [`pass_through`], so that a busy child or a lost lease is the
/// parent run's own error.
#[allow(clippy::too_many_arguments)] // the two generic subgraph forms differ only in these
async fn run_child<S, C, A, I>(
    api: &A,
    child: C,
    state: &S,
    ctx: &Ctx<S>,
    hitl: &mut Hitl,
    parent_node: TypeId,
    input: &I,
    as_parent: &(dyn Fn(&C::State) -> Option<S> + Sync),
    want_first: bool,
) -> Result<Finished<C::State>, BoxError>
where
    S: GraphState,
    C: Graph,
    A: ChildApi<C>,
    I: Fn(&S) -> C::State + ?Sized,
{
    let sink = child_steps(ctx);
    let mut forwarding = forwarder(ctx, state, sink, as_parent);
    let mut forward: Option<Forward<'_, C::State>> = match sink {
        Some(_) => Some(&mut forwarding),
        None => None,
    };
    let (Some(tenure), Some(parent)) = (ctx.tenure.as_ref(), ctx.thread.as_ref()) else {
        // No store: the child runs to its end, within its parent's limits (as a child with a
        // store does, `App::for_child`).
        let graph = child.name().to_owned();
        let first = input(state);
        let kept = want_first.then(|| first.clone());
        let (last, jump) = api.alone(child, first, Inherit::of(ctx), parent_node, forward).await?;
        return Ok(Finished { first: kept, last, jump, graph, thread: None });
    };
    let (thread, reply) = thread_and_reply(ctx, hitl, parent);
    let mut app = App::for_child(child, tenure.store.clone(), Some(tenure), parent_node);
    // The parent run's context, and its stream's modes, hold in the child's runs.
    app.context = ctx.context.clone();
    app.memory = ctx.memory.clone();
    if let Some(emitter) = &ctx.emitter {
        app.modes = emitter.modes;
    }
    let mut first = None;
    let outcome = if !api.started(&app, &thread).await? {
        let start = input(state);
        if want_first {
            first = Some(start.clone());
        }
        api.call(&app, Call::start(start).on(thread.clone()), again(&mut forward)).await?
    } else {
        // Paused (its pause comes back with a fresh token), finished (its final state), or
        // stopped part-way by a failure or a crash (it continues where it stopped).
        let recovered = api.call(&app, Call::recover(thread.clone()), again(&mut forward)).await?;
        match (recovered, reply) {
            (Outcome::Interrupted { resume, .. }, Some(reply)) => {
                api.call(&app, Call::resume(answered(resume, &reply)), again(&mut forward)).await?
            }
            (outcome, _) => outcome,
        }
    };
    match outcome {
        Outcome::Done(last) => {
            if want_first && first.is_none() {
                first = Some(first_state(&app, &thread, api.history(&app, &thread).await?)?);
            }
            // Did the child end by routing its parent? Its final checkpoint says.
            let graph = app.graph().name().to_owned();
            let jump = jump_of(&app, &thread, api.head(&app, &thread).await?)?;
            Ok(Finished { first, last, jump, graph, thread: Some(thread) })
        }
        Outcome::Interrupted { state: child_state, resume } => {
            Err(pause_on_child(ctx, hitl, app.graph().name(), &thread, &child_state, &resume))
        }
    }
}

/// The state a child thread started with: its first checkpoint, the last of `history` (newest
/// first).
fn first_state<C: Graph>(
    app: &App<C, Arc<dyn Checkpointer>>,
    thread: &ThreadId,
    history: Vec<(CheckpointId, Vec<u8>)>,
) -> Result<C::State, Error> {
    let Some((id, bytes)) = history.into_iter().last() else {
        return Err(Error::CheckpointNotFound { thread: thread.clone() });
    };
    Ok(decode_for(app.graph(), &bytes, thread, id)?.state)
}

/// Where a finished child routes its parent, if it ended with `Command::parent`: its final
/// checkpoint (`head`) records it.
fn jump_of<C: Graph>(
    app: &App<C, Arc<dyn Checkpointer>>,
    thread: &ThreadId,
    head: Option<(CheckpointId, Vec<u8>)>,
) -> Result<Option<ParentJump>, Error> {
    match head {
        Some((id, bytes)) => Ok(decode_for(app.graph(), &bytes, thread, id)?.parent),
        None => Ok(None),
    }
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
        // Messages keyed by id: the new ones appended (a replaced or removed one overwrites).
        (Reducer::Append | Reducer::Messages, Value::Array(old), Value::Array(new)) if new.starts_with(old) => {
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

impl ParentJump {
    /// The step of a subgraph node (of a parent graph `parent` whose nodes are `N`) whose child,
    /// graph `child` on thread `thread`, made this jump.
    ///
    /// The jump must be the running parent's: in memory, by its node type; read back from the
    /// child's final checkpoint, by the parent graph's declared name it records. A record of an
    /// earlier tea (by Rust type name) is accepted where that name is the running parent's node
    /// type's, and refused with [`Error::SchemaMismatch`] otherwise.
    fn step<S: GraphState, N: NodeId>(
        self,
        child: &str,
        thread: Option<&ThreadId>,
        parent: Option<&str>,
    ) -> Result<NodeStep<S, N>, BoxError> {
        let parent_name = || parent.map_or_else(|| std::any::type_name::<N>().to_owned(), str::to_owned);
        let other = |made_for: &str| -> BoxError {
            format!(
                "child graph `{child}` routes to node `{}` of `{made_for}` with `Command::parent`, but runs inside `{}`",
                self.target,
                parent_name()
            )
            .into()
        };
        if let Some(made_for) = self.node_type {
            if made_for != std::any::TypeId::of::<N>() {
                return Err(other("another graph"));
            }
        } else if let Some(recorded) = &self.parent {
            if Some(recorded.as_str()) != parent {
                return Err(other(recorded));
            }
        } else if let Some(legacy) = &self.legacy_type {
            if legacy != std::any::type_name::<N>() {
                let error = Error::SchemaMismatch {
                    graph: child.to_owned(),
                    thread: thread.cloned().unwrap_or_else(|| ThreadId::from(child.to_owned())),
                    what: "record of its `Command::parent` jump (written by an earlier tea, naming the parent by a Rust type name this build does not have)",
                };
                return Err(Box::new(Passthrough(error)));
            }
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

#[cfg(all(test, feature = "tokio"))]
mod tests;
