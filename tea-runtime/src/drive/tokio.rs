//! The async driver (feature `tokio`): the same executor as the blocking API, carried by tokio.
//!
//! - An async node ([`Graph::is_async`]) is awaited on the runtime, its panics caught.
//! - A sync node goes to tokio's blocking pool (`spawn_blocking`) with its own copy of the state
//!   and `Ctx`, so it never blocks the runtime's threads, whatever it waits on.
//! - A fan-out's branches are polled concurrently as one stream, at most
//!   [`Builder::max_parallel_branches`](crate::Builder::max_parallel_branches) at once, and their
//!   results come back in declared order (the merge is the executor's, as in the blocking API).
//! - Checkpoints go through [`Checkpointer::append_async`].
//!
//! Dropping a run's future (or stream) part-way cancels it: its run is abandoned as the blocking
//! API abandons a dropped `Stream` — a resumed run puts its pause back, so the token that resumed
//! it works again; any other run releases its lease, so `recover` continues it from its last
//! checkpoint. A sync node already running on the blocking pool finishes there, and its result
//! is dropped.

use crate::machine::driver::Driver;
use crate::machine::run::{Progress, Run};
use crate::model::event::Event;
use crate::model::graph::Graph;
use crate::model::hitl::Hitl;
use crate::model::node::Ctx;
use crate::model::outcome::Outcome;
use crate::model::produce::{produce, produced, Produced};
use crate::store::{Append, Checkpointer};
use crate::vocab::error::{panic_message, Error};
use crate::vocab::name::{CheckpointId, NodeName, ThreadId};
use futures::{FutureExt, Stream, StreamExt};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

/// Drives the executor on tokio.
pub(crate) struct TokioDriver<G> {
    /// The graph, for the blocking tasks that run sync nodes.
    graph: Arc<G>,
}

#[allow(clippy::manual_async_fn)] // as for the thread driver
impl<G: Graph> Driver<G> for TokioDriver<G> {
    fn produce<'a>(
        &'a self,
        graph: &'a G,
        node: G::Node,
        state: &'a G::State,
        ctx: &'a Ctx<G::State>,
        answers: Vec<serde_json::Value>,
    ) -> impl Future<Output = Result<Produced<G::State, G::Node>, Error>> + Send + 'a {
        async move {
            if graph.is_async(node) {
                let run = async {
                    let mut hitl = Hitl::with_answers(answers);
                    let result = graph.run_async(node, state, ctx, &mut hitl).await;
                    produced(graph, node, ctx, result, hitl)
                };
                match AssertUnwindSafe(run).catch_unwind().await {
                    Ok(produced) => produced,
                    Err(payload) => {
                        Err(Error::NodePanicked { node: ctx.node.clone(), message: panic_message(payload) })
                    }
                }
            } else {
                let (graph, state, task_ctx) = (Arc::clone(&self.graph), state.clone(), ctx.clone_for_task());
                #[cfg(feature = "tracing")]
                let span = tracing::Span::current();
                let task = tokio::task::spawn_blocking(move || {
                    #[cfg(feature = "tracing")]
                    let _node = span.enter();
                    produce(&*graph, node, &state, &task_ctx, answers)
                });
                match task.await {
                    Ok(produced) => produced,
                    Err(error) => Err(lost(&ctx.node, error)),
                }
            }
        }
    }

    fn append<'a>(
        &'a self,
        store: &'a dyn Checkpointer,
        graph: &'a str,
        thread: &'a ThreadId,
        expected: Option<CheckpointId>,
        id: CheckpointId,
        bytes: &'a [u8],
        durable: bool,
    ) -> impl Future<Output = Result<Append, Error>> + Send + 'a {
        crate::vocab::trace::store_call_async(
            "append",
            graph,
            Some(thread),
            store.append_async(graph, thread, expected, id, bytes, durable),
        )
    }

    fn branches<'a, J, T, F, Fut>(
        &'a self,
        jobs: Vec<J>,
        run: F,
        max: usize,
    ) -> impl Future<Output = Vec<T>> + Send + 'a
    where
        J: Send + 'static,
        T: Send + 'static,
        F: Fn(J) -> Fut + Send + Sync + 'a,
        Fut: Future<Output = T> + Send + 'a,
    {
        futures::stream::iter(jobs).map(run).buffered(max.max(1)).collect()
    }
}

/// A run the async driver carries. Dropped before it paused or finished (its future or stream
/// was dropped), it abandons the run, as a dropped blocking `Stream` does.
pub(crate) struct AsyncRun<'g, G: Graph> {
    run: Run<'g, G>,
    driver: TokioDriver<G>,
    over: bool,
}

impl<'g, G: Graph> AsyncRun<'g, G> {
    pub(crate) fn new(run: Run<'g, G>, graph: &Arc<G>) -> Self {
        AsyncRun { run, driver: TokioDriver { graph: Arc::clone(graph) }, over: false }
    }

    /// One advance of the run, inside its `run` span.
    async fn step(&mut self) -> Result<Progress<G::State>, Error> {
        #[cfg(feature = "tracing")]
        let span = self.run.span.clone();
        let step = self.run.step(&self.driver);
        #[cfg(feature = "tracing")]
        let step = tracing::Instrument::instrument(step, span);
        let progress = step.await;
        // A failed step abandoned the run itself; a pause and the end are final.
        self.over = !matches!(progress, Ok(Progress::Stepped | Progress::Forked));
        progress
    }

    /// Runs to the next pause or the end.
    pub(crate) async fn outcome(mut self) -> Result<Outcome<G::State>, Error> {
        loop {
            match self.step().await? {
                Progress::Stepped | Progress::Forked => {}
                Progress::Paused(resume) => {
                    return Ok(Outcome::Interrupted { state: self.run.state.clone(), resume: *resume })
                }
                Progress::Done => return Ok(Outcome::Done(self.run.state.clone())),
            }
        }
    }

    /// The next event of the run, as the blocking `Stream` yields them; `None` once it is over.
    async fn next_event(&mut self) -> Option<Result<Event<G::State>, Error>> {
        if let Some(event) = self.run.branch_events.pop_front() {
            return Some(Ok(event));
        }
        if self.over {
            return None;
        }
        loop {
            match self.step().await {
                Ok(Progress::Stepped) => {
                    let step = Event::Step {
                        node: self.run.last_node().clone(),
                        branch: None,
                        state: self.run.state.clone(),
                        duration: self.run.last_duration,
                    };
                    if self.run.queue_child_steps() {
                        // A subgraph node: its child's steps come first.
                        self.run.branch_events.push_back(step);
                        return self.run.branch_events.pop_front().map(Ok);
                    }
                    return Some(Ok(step));
                }
                Ok(Progress::Forked) => {
                    if let Some(event) = self.run.branch_events.pop_front() {
                        return Some(Ok(event));
                    }
                }
                Ok(Progress::Paused(resume)) => {
                    // A subgraph node paused inside its child: the child's steps so far first.
                    self.run.queue_child_steps();
                    let paused = Event::Interrupted { state: self.run.state.clone(), resume: *resume };
                    // Branch steps before the pause come first; the pause follows them.
                    self.run.branch_events.push_back(paused);
                    return self.run.branch_events.pop_front().map(Ok);
                }
                Ok(Progress::Done) => {
                    self.run.branch_events.push_back(Event::Done(self.run.state.clone()));
                    return self.run.branch_events.pop_front().map(Ok);
                }
                Err(error) => return Some(Err(error)),
            }
        }
    }
}

impl<G: Graph> Drop for AsyncRun<'_, G> {
    fn drop(&mut self) {
        if !self.over {
            self.run.abandon();
        }
    }
}

/// The events of a run as a `Send` stream.
pub(crate) fn events<'g, G: Graph>(
    run: Result<AsyncRun<'g, G>, Error>,
) -> impl Stream<Item = Result<Event<G::State>, Error>> + Send + 'g {
    enum At<R> {
        Failed(Error),
        Running(R),
        Over,
    }
    let at = match run {
        Ok(run) => At::Running(run),
        Err(error) => At::Failed(error),
    };
    futures::stream::unfold(at, |at| async move {
        match at {
            At::Over => None,
            At::Failed(error) => Some((Err(error), At::Over)),
            At::Running(mut run) => match run.next_event().await {
                Some(Ok(event)) => Some((Ok(event), At::Running(run))),
                Some(Err(error)) => Some((Err(error), At::Over)),
                None => None,
            },
        }
    })
}

/// The error of a node the async driver could not run to its end because its task was lost
/// (the runtime shut down under it).
fn lost(node: &NodeName, why: impl std::fmt::Display) -> Error {
    Error::NodeFailed { node: node.clone(), source: format!("the task running the node was lost: {why}").into() }
}
