//! What running a child graph asks of the API it runs on ([`ChildApi`]), and its two answers:
//! the blocking API ([`Blocking`]: its futures are ready, so that `run_child`, written once as
//! async code over a `ChildApi`, is polled once with `now_or_never` on the calling thread) and
//! the async one (`OnTokio`, feature `tokio`). Each call is one call of that API; what a
//! subgraph node decides around them is `run_child`'s (`subgraph/mod.rs`).

use crate::api::app::App;
use crate::api::call::Call;
use crate::api::stream::Stream;
use crate::api::token::without_store;
use crate::format::checkpoint::ParentJump;
use crate::machine::run::{Over, Run};
use crate::model::event::Event;
use crate::model::graph::Graph;
use crate::model::outcome::Outcome;
use crate::store::Checkpointer;
use crate::vocab::error::{BoxError, Error};
use crate::vocab::name::{CheckpointId, NodeName, ThreadId};
use crate::vocab::state::GraphState;
use std::any::TypeId;
use std::future::Future;
use std::sync::Arc;

/// A child run's events, one at a time, as the API it runs on yields them: the blocking
/// [`Stream`] (whose futures are ready), and on the async API the run itself
/// (`AsyncRun`) or the stream of one of the app's async calls.
trait Events<T: GraphState> {
    /// The next event; `None` once the run is over.
    fn next_event(&mut self) -> impl Future<Output = Option<Result<Event<T>, Error>>> + Send + '_;
}

impl<C: Graph> Events<C::State> for Stream<'_, C> {
    fn next_event(&mut self) -> impl Future<Output = Option<Result<Event<C::State>, Error>>> + Send + '_ {
        std::future::ready(self.next())
    }
}

#[cfg(feature = "tokio")]
impl<C: Graph> Events<C::State> for crate::drive::tokio::AsyncRun<'_, C> {
    fn next_event(&mut self) -> impl Future<Output = Option<Result<Event<C::State>, Error>>> + Send + '_ {
        crate::api::async_app::next_event(self)
    }
}

#[cfg(feature = "tokio")]
impl<T: GraphState, E> Events<T> for std::pin::Pin<&mut E>
where
    E: futures::Stream<Item = Result<Event<T>, Error>> + Send,
{
    fn next_event(&mut self) -> impl Future<Output = Option<Result<Event<T>, Error>>> + Send + '_ {
        futures::StreamExt::next(self)
    }
}

/// Drives a child's `events` to its end or pause, handing `forward` each step.
async fn drain<T: GraphState>(events: &mut impl Events<T>, forward: Forward<'_, T>) -> Result<Outcome<T>, BoxError> {
    while let Some(event) = events.next_event().await {
        if let Some(outcome) = ended(event?, forward) {
            return Ok(outcome);
        }
    }
    Err(NEVER_ENDED.into())
}

const NEVER_ENDED: &str = "the child graph's run ended without finishing or pausing";

/// The outcome a child's `event` ends its run with, or `None` after handing a step to `forward`.
fn ended<T: GraphState>(event: Event<T>, forward: &mut (dyn FnMut(Event<T>) + '_)) -> Option<Outcome<T>> {
    match event {
        Event::Done(last) => Some(Outcome::Done(last)),
        Event::Interrupted { state, resume } => Some(Outcome::Interrupted { state, resume }),
        step => {
            forward(step);
            None
        }
    }
}

/// A child's run, the app it runs on with a store.
pub(super) type ChildApp<C> = App<C, Arc<dyn Checkpointer>>;

/// Where a child's steps go while its parent streams (see [`forwarder`]).
pub(super) type Forward<'f, T> = &'f mut (dyn FnMut(Event<T>) + Send);

/// `forward` lent again, for one call.
pub(super) fn again<'s, T: GraphState>(forward: &'s mut Option<Forward<'_, T>>) -> Option<Forward<'s, T>> {
    match forward {
        Some(forward) => Some(&mut **forward),
        None => None,
    }
}

/// What running a child graph asks of the API it runs on: the blocking API ([`Blocking`],
/// whose futures are ready, so that [`run_child`] is polled once with `now_or_never`) or the
/// async one (`OnTokio`). [`run_child`] is written once over it, as the machine is over its
/// `Driver`; each call here is one call of that API.
pub(super) trait ChildApi<C: Graph>: Sync {
    /// Runs the child without a store from `input` to its end (a child that can pause needs a
    /// store, like any graph), within its parent's limits; its final state and its parent jump.
    fn alone<'a>(
        &'a self,
        child: C,
        input: C::State,
        inherit: Inherit,
        parent_node: TypeId,
        forward: Option<Forward<'a, C::State>>,
    ) -> impl Future<Output = Result<(C::State, Option<ParentJump>), BoxError>> + Send + 'a;

    /// Whether the child's thread has a checkpoint.
    fn started<'a>(
        &'a self,
        app: &'a ChildApp<C>,
        thread: &'a ThreadId,
    ) -> impl Future<Output = Result<bool, Error>> + Send + 'a;

    /// Carries out `call` on the child's thread: starts it, recovers it (paused: its pause comes
    /// back with a fresh token; finished: its final state; stopped part-way: it continues where
    /// it stopped) or resumes its pause; its steps go to `forward` while the parent streams.
    fn call<'a>(
        &'a self,
        app: &'a ChildApp<C>,
        call: Call<C::State>,
        forward: Option<Forward<'a, C::State>>,
    ) -> impl Future<Output = Result<Outcome<C::State>, BoxError>> + Send + 'a;

    /// The child's thread's checkpoints, newest first.
    fn history<'a>(
        &'a self,
        app: &'a ChildApp<C>,
        thread: &'a ThreadId,
    ) -> impl Future<Output = Result<Vec<(CheckpointId, Vec<u8>)>, BoxError>> + Send + 'a;

    /// The child's thread's head.
    fn head<'a>(
        &'a self,
        app: &'a ChildApp<C>,
        thread: &'a ThreadId,
    ) -> impl Future<Output = Result<Option<(CheckpointId, Vec<u8>)>, Error>> + Send + 'a;
}

/// The child's error when it pauses without a store.
fn paused_alone(graph: &str, node: &NodeName) -> BoxError {
    Box::new(Error::PausedWithoutCheckpointer { graph: graph.to_owned(), node: node.clone() })
}

/// The blocking API: a child of a subgraph node run on the calling thread (by a parent on the
/// blocking API). Its futures are ready on their first poll: they make the API's calls then, and
/// await nothing but ready futures (a [`Stream`]'s events).
pub(super) struct Blocking;

// Written as `async` blocks, as `OnTokio`'s are (see there).
#[allow(clippy::manual_async_fn)]
impl<C: Graph> ChildApi<C> for Blocking {
    fn alone<'a>(
        &'a self,
        child: C,
        input: C::State,
        inherit: Inherit,
        parent_node: TypeId,
        forward: Option<Forward<'a, C::State>>,
    ) -> impl Future<Output = Result<(C::State, Option<ParentJump>), BoxError>> + Send + 'a {
        async move {
            let mut run = inherit.run(&child, input, parent_node, forward.is_some());
            match forward {
                Some(forward) => {
                    let mut stream = Stream::new(Ok(run));
                    let last = alone_end(drain(&mut stream, forward).await?, child.name())?;
                    Ok((last, stream.take_jump()))
                }
                None => match run.run_to_end()? {
                    Over::Done => {
                        let jump = run.line.jump.take();
                        Ok((run.state, jump))
                    }
                    Over::Paused(record) => Err(Box::new(without_store(run.graph, &record)) as BoxError),
                },
            }
        }
    }

    fn started<'a>(
        &'a self,
        app: &'a ChildApp<C>,
        thread: &'a ThreadId,
    ) -> impl Future<Output = Result<bool, Error>> + Send + 'a {
        std::future::ready(app.state(thread).map(|state| state.is_some()))
    }

    fn call<'a>(
        &'a self,
        app: &'a ChildApp<C>,
        call: Call<C::State>,
        forward: Option<Forward<'a, C::State>>,
    ) -> impl Future<Output = Result<Outcome<C::State>, BoxError>> + Send + 'a {
        async move {
            match forward {
                Some(forward) => drain(&mut app.execute_stream(call), forward).await,
                None => Ok(app.execute(call)?),
            }
        }
    }

    fn history<'a>(
        &'a self,
        app: &'a ChildApp<C>,
        thread: &'a ThreadId,
    ) -> impl Future<Output = Result<Vec<(CheckpointId, Vec<u8>)>, BoxError>> + Send + 'a {
        let history = crate::store::fold::history(&**app.checkpointer(), app.graph().name(), thread);
        std::future::ready(history.map_err(BoxError::from))
    }

    fn head<'a>(
        &'a self,
        app: &'a ChildApp<C>,
        thread: &'a ThreadId,
    ) -> impl Future<Output = Result<Option<(CheckpointId, Vec<u8>)>, Error>> + Send + 'a {
        std::future::ready(crate::store::fold::head(&**app.checkpointer(), app.graph().name(), thread))
    }
}

/// What a store-less child's run came to: its final state, or, for a pause, the error of a
/// child that cannot pause without a store.
fn alone_end<T: GraphState>(outcome: Outcome<T>, graph: &str) -> Result<T, BoxError> {
    match outcome {
        Outcome::Done(last) => Ok(last),
        Outcome::Interrupted { resume, .. } => Err(paused_alone(graph, resume.node())),
    }
}

/// The async API: a child of a subgraph node run on the async driver (by a parent on the async
/// API), so that the child's async nodes are awaited, its sync nodes run as its parent's app
/// says, and its checkpoints are written with the store's async calls.
#[cfg(feature = "tokio")]
pub(super) struct OnTokio;

// Written as `async` blocks rather than `async fn`s: the trait's futures are `Send` and borrow for
// `'a` only, which the blocks state as the trait does.
#[cfg(feature = "tokio")]
#[allow(clippy::manual_async_fn)]
impl<C: Graph> ChildApi<C> for OnTokio {
    fn alone<'a>(
        &'a self,
        child: C,
        input: C::State,
        inherit: Inherit,
        parent_node: TypeId,
        forward: Option<Forward<'a, C::State>>,
    ) -> impl Future<Output = Result<(C::State, Option<ParentJump>), BoxError>> + Send + 'a {
        use crate::drive::tokio::AsyncRun;
        async move {
            let child = Arc::new(child);
            let run = inherit.run(&*child, input, parent_node, forward.is_some());
            let mut run = AsyncRun::new(run, &child, false);
            let last = match forward {
                Some(forward) => alone_end(drain(&mut run, forward).await?, child.name())?,
                None => {
                    if let Over::Paused(record) = run.run_to_end().await? {
                        return Err(Box::new(without_store(run.run().graph, &record)) as BoxError);
                    }
                    run.run().state.clone()
                }
            };
            let jump = run.run().line.jump.take();
            Ok((last, jump))
        }
    }

    fn started<'a>(
        &'a self,
        app: &'a ChildApp<C>,
        thread: &'a ThreadId,
    ) -> impl Future<Output = Result<bool, Error>> + Send + 'a {
        async move { Ok(app.state_async(thread).await?.is_some()) }
    }

    fn call<'a>(
        &'a self,
        app: &'a ChildApp<C>,
        call: Call<C::State>,
        forward: Option<Forward<'a, C::State>>,
    ) -> impl Future<Output = Result<Outcome<C::State>, BoxError>> + Send + 'a {
        async move {
            match forward {
                Some(forward) => drain(&mut std::pin::pin!(app.run_stream_async(call)), forward).await,
                None => Ok(app.run_async(call).await?),
            }
        }
    }

    fn history<'a>(
        &'a self,
        app: &'a ChildApp<C>,
        thread: &'a ThreadId,
    ) -> impl Future<Output = Result<Vec<(CheckpointId, Vec<u8>)>, BoxError>> + Send + 'a {
        async move {
            // The store's history has no async call: read it off the runtime's threads.
            let (store, name, id) = (Arc::clone(app.checkpointer()), app.graph().name().to_owned(), thread.clone());
            let history = tokio::task::spawn_blocking(move || crate::store::fold::history(&*store, &name, &id))
                .await
                .map_err(|e| format!("the task reading the child's history was lost: {e}"))??;
            Ok(history)
        }
    }

    fn head<'a>(
        &'a self,
        app: &'a ChildApp<C>,
        thread: &'a ThreadId,
    ) -> impl Future<Output = Result<Option<(CheckpointId, Vec<u8>)>, Error>> + Send + 'a {
        crate::store::fold::head_async(&**app.checkpointer(), app.graph().name(), thread)
    }
}

/// What a store-less child run takes from its parent's: its limits, its context and, when it
/// streams, its stream's modes (its events reach the parent's stream through [`forwarder`]).
pub(super) struct Inherit {
    limits: crate::vocab::options::Limits,
    context: Option<crate::vocab::options::RunContext>,
    memory: Option<crate::store::Memory>,
    modes: Option<crate::vocab::policy::StreamModes>,
}

impl Inherit {
    pub(super) fn of<S>(ctx: &crate::model::node::Ctx<S>) -> Inherit {
        Inherit {
            limits: ctx.limits,
            context: ctx.context.clone(),
            memory: ctx.memory.clone(),
            modes: ctx.emitter.as_ref().map(|e| e.modes),
        }
    }

    /// The store-less run of `child` from `input` for a subgraph node of the parent's node type
    /// `parent_node`, recording its steps when it `streams`: within its parent's limits, and
    /// with what else it inherits.
    fn run<C: Graph>(self, child: &C, input: C::State, parent_node: TypeId, streams: bool) -> Run<'_, C> {
        let mut run = Run::new(child, input, self.limits, None, streams);
        run.line.parent_node = Some(parent_node);
        run.ctx.context = self.context;
        run.ctx.memory = self.memory;
        if let (true, Some(modes)) = (run.record, self.modes) {
            run.ctx.emitter = Some(Arc::new(crate::model::scope::Emitter::new(modes)));
        }
        run
    }
}
