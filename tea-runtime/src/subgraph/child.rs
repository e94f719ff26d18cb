//! What running a child graph asks of the API it runs on ([`ChildApi`]), and its two answers:
//! the blocking API ([`Blocking`]: its futures are ready, so that `run_child`, written once as
//! async code over a `ChildApi`, is polled once with `now_or_never` on the calling thread) and
//! the async one (`OnTokio`, feature `tokio`). Each call is one call of that API; what a
//! subgraph node decides around them is `run_child`'s (`subgraph/mod.rs`).

use crate::api::app::{App, Recovery};
use crate::api::call::Call;
use crate::api::stream::Stream;
use crate::api::token::without_store;
use crate::format::checkpoint::ParentJump;
use crate::format::token::Resume;
use crate::machine::run::{Over, Run};
use crate::model::event::Event;
use crate::model::graph::Graph;
use crate::model::outcome::Outcome;
use crate::store::Checkpointer;
use crate::vocab::error::{BoxError, Error};
use crate::vocab::name::{CheckpointId, NodeName, ThreadId};
use crate::vocab::options::RunOptions;
use crate::vocab::state::GraphState;
use std::any::TypeId;
use std::future::Future;
use std::sync::Arc;

/// Drives a child's stream to its end or pause, handing `forward` each step.
fn drain<C: Graph>(stream: &mut Stream<'_, C>, forward: Forward<'_, C::State>) -> Result<Outcome<C::State>, BoxError> {
    for event in stream.by_ref() {
        if let Some(outcome) = ended(event?, forward) {
            return Ok(outcome);
        }
    }
    Err(NEVER_ENDED.into())
}

/// Drives a child's async event stream to its end or pause, handing `forward` each step.
#[cfg(feature = "tokio")]
async fn drain_async<T: GraphState>(
    stream: impl futures::Stream<Item = Result<Event<T>, Error>>,
    forward: Forward<'_, T>,
) -> Result<Outcome<T>, BoxError> {
    use futures::StreamExt;
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
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

    /// Runs a new child thread from `input`.
    fn invoke<'a>(
        &'a self,
        app: &'a ChildApp<C>,
        thread: ThreadId,
        input: C::State,
        forward: Option<Forward<'a, C::State>>,
    ) -> impl Future<Output = Result<Outcome<C::State>, BoxError>> + Send + 'a;

    /// Recovers the child's thread: paused (its pause comes back with a fresh token),
    /// finished (its final state), or stopped part-way (it continues where it stopped).
    fn recover<'a>(
        &'a self,
        app: &'a ChildApp<C>,
        thread: &'a ThreadId,
        forward: Option<Forward<'a, C::State>>,
    ) -> impl Future<Output = Result<Outcome<C::State>, BoxError>> + Send + 'a;

    /// Resumes the child's pause.
    fn resume<'a>(
        &'a self,
        app: &'a ChildApp<C>,
        resume: Resume<C::State>,
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
/// blocking API). Its futures are ready: each call is made when the future is, and the future
/// only hands its result over.
pub(super) struct Blocking;

impl<C: Graph> ChildApi<C> for Blocking {
    fn alone<'a>(
        &'a self,
        child: C,
        input: C::State,
        inherit: Inherit,
        parent_node: TypeId,
        forward: Option<Forward<'a, C::State>>,
    ) -> impl Future<Output = Result<(C::State, Option<ParentJump>), BoxError>> + Send + 'a {
        let mut run = Run::new(&child, input, inherit.limits, None, forward.is_some());
        run.line.parent_node = Some(parent_node);
        inherit.apply(&mut run);
        let result = match forward {
            Some(forward) => {
                let mut stream = Stream::new(Ok(run));
                match drain(&mut stream, forward) {
                    Ok(Outcome::Done(last)) => Ok((last, stream.take_jump())),
                    Ok(Outcome::Interrupted { resume, .. }) => Err(paused_alone(child.name(), resume.node())),
                    Err(error) => Err(error),
                }
            }
            None => match run.run_to_end() {
                Ok(Over::Done) => {
                    let jump = run.line.jump.take();
                    Ok((run.state, jump))
                }
                Ok(Over::Paused(record)) => Err(Box::new(without_store(&run, &record)) as BoxError),
                Err(error) => Err(error.into()),
            },
        };
        std::future::ready(result)
    }

    fn started<'a>(
        &'a self,
        app: &'a ChildApp<C>,
        thread: &'a ThreadId,
    ) -> impl Future<Output = Result<bool, Error>> + Send + 'a {
        std::future::ready(app.state(thread).map(|state| state.is_some()))
    }

    fn invoke<'a>(
        &'a self,
        app: &'a ChildApp<C>,
        thread: ThreadId,
        input: C::State,
        forward: Option<Forward<'a, C::State>>,
    ) -> impl Future<Output = Result<Outcome<C::State>, BoxError>> + Send + 'a {
        std::future::ready(match forward {
            Some(forward) => drain(&mut app.execute_stream(Call::start(input).on(thread)), forward),
            None => app.execute(Call::start(input).on(thread)).map_err(BoxError::from),
        })
    }

    fn recover<'a>(
        &'a self,
        app: &'a ChildApp<C>,
        thread: &'a ThreadId,
        forward: Option<Forward<'a, C::State>>,
    ) -> impl Future<Output = Result<Outcome<C::State>, BoxError>> + Send + 'a {
        let Some(forward) = forward else {
            return std::future::ready(app.execute(Call::recover(thread.clone())).map_err(BoxError::from));
        };
        let recovered = app
            .head(thread)
            .and_then(|(head, bytes)| app.recovery(thread, head, bytes, false, &RunOptions::new(), "recover"));
        std::future::ready(match recovered {
            Ok(Recovery::Over(outcome)) => Ok(outcome),
            Ok(Recovery::Run(mut run)) => {
                run.record_steps();
                drain(&mut Stream::new(Ok(run)), forward)
            }
            Err(error) => Err(error.into()),
        })
    }

    fn resume<'a>(
        &'a self,
        app: &'a ChildApp<C>,
        resume: Resume<C::State>,
        forward: Option<Forward<'a, C::State>>,
    ) -> impl Future<Output = Result<Outcome<C::State>, BoxError>> + Send + 'a {
        std::future::ready(match forward {
            Some(forward) => drain(&mut app.execute_stream(Call::resume(resume)), forward),
            None => app.execute(Call::resume(resume)).map_err(BoxError::from),
        })
    }

    fn history<'a>(
        &'a self,
        app: &'a ChildApp<C>,
        thread: &'a ThreadId,
    ) -> impl Future<Output = Result<Vec<(CheckpointId, Vec<u8>)>, BoxError>> + Send + 'a {
        std::future::ready(app.checkpointer().history(app.graph().name(), thread).map_err(BoxError::from))
    }

    fn head<'a>(
        &'a self,
        app: &'a ChildApp<C>,
        thread: &'a ThreadId,
    ) -> impl Future<Output = Result<Option<(CheckpointId, Vec<u8>)>, Error>> + Send + 'a {
        std::future::ready(app.checkpointer().head(app.graph().name(), thread))
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
        use crate::api::async_app::next_event;
        use crate::drive::tokio::AsyncRun;
        async move {
            let child = Arc::new(child);
            let mut run = Run::new(&*child, input, inherit.limits, None, forward.is_some());
            run.line.parent_node = Some(parent_node);
            inherit.apply(&mut run);
            let mut run = AsyncRun::new(run, &child, false);
            let last = match forward {
                Some(forward) => loop {
                    let Some(event) = next_event(&mut run).await else { return Err(NEVER_ENDED.into()) };
                    match ended(event?, forward) {
                        None => {}
                        Some(Outcome::Done(last)) => break last,
                        Some(Outcome::Interrupted { resume, .. }) => {
                            return Err(paused_alone(child.name(), resume.node()))
                        }
                    }
                },
                None => {
                    if let Over::Paused(record) = run.run_to_end().await? {
                        return Err(Box::new(without_store(run.run(), &record)));
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

    fn invoke<'a>(
        &'a self,
        app: &'a ChildApp<C>,
        thread: ThreadId,
        input: C::State,
        forward: Option<Forward<'a, C::State>>,
    ) -> impl Future<Output = Result<Outcome<C::State>, BoxError>> + Send + 'a {
        async move {
            match forward {
                Some(forward) => drain_async(app.run_stream_async(Call::start(input).on(thread)), forward).await,
                None => Ok(app.run_async(Call::start(input).on(thread)).await?),
            }
        }
    }

    fn recover<'a>(
        &'a self,
        app: &'a ChildApp<C>,
        thread: &'a ThreadId,
        forward: Option<Forward<'a, C::State>>,
    ) -> impl Future<Output = Result<Outcome<C::State>, BoxError>> + Send + 'a {
        use crate::api::async_app::events;
        use crate::drive::tokio::AsyncRun;
        async move {
            let Some(forward) = forward else { return Ok(app.run_async(Call::recover(thread.clone())).await?) };
            let (head, bytes) = app.head_async(thread).await?;
            match app.recovery(thread, head, bytes, false, &RunOptions::new(), "recover_async")? {
                Recovery::Over(outcome) => Ok(outcome),
                Recovery::Run(mut run) => {
                    run.record_steps();
                    drain_async(events(Ok(AsyncRun::new(run, &app.graph, app.sync_inline))), forward).await
                }
            }
        }
    }

    fn resume<'a>(
        &'a self,
        app: &'a ChildApp<C>,
        resume: Resume<C::State>,
        forward: Option<Forward<'a, C::State>>,
    ) -> impl Future<Output = Result<Outcome<C::State>, BoxError>> + Send + 'a {
        async move {
            match forward {
                Some(forward) => drain_async(app.run_stream_async(Call::resume(resume)), forward).await,
                None => Ok(app.resume_async(resume).await?),
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
            let history = tokio::task::spawn_blocking(move || store.history(&name, &id))
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
        app.checkpointer().head_async(app.graph().name(), thread)
    }
}

/// What a store-less child run takes from its parent's: its limits, its context and, when it
/// streams, its stream's modes (its events reach the parent's stream through [`forwarder`]).
pub(super) struct Inherit {
    pub(super) limits: crate::vocab::options::Limits,
    context: Option<crate::vocab::options::RunContext>,
    modes: Option<crate::vocab::policy::StreamModes>,
}

impl Inherit {
    pub(super) fn of<S>(ctx: &crate::model::node::Ctx<S>) -> Inherit {
        Inherit { limits: ctx.limits, context: ctx.context.clone(), modes: ctx.emitter.as_ref().map(|e| e.modes) }
    }

    /// Gives `run` (the child's) what it inherits besides its limits.
    pub(super) fn apply<C: Graph>(self, run: &mut Run<'_, C>) {
        run.ctx.context = self.context;
        if let (true, Some(modes)) = (run.record, self.modes) {
            run.ctx.emitter = Some(Arc::new(crate::model::scope::Emitter::new(modes)));
        }
    }
}
