//! The async driver (feature `tokio`): the same executor as the blocking API, carried by tokio.
//!
//! - An async node ([`Graph::awaits`]: every async node, and a subgraph node, whose child graph
//!   then runs on this driver too) is awaited on the runtime, its panics caught.
//! - A sync node goes to tokio's blocking pool (`spawn_blocking`) with its own copy of the state
//!   and `Ctx`, so it never blocks the runtime's threads, whatever it waits on — unless the app
//!   was built with [`Builder::sync_nodes_inline`](crate::Builder::sync_nodes_inline): then it
//!   runs right on the runtime's thread, on the run's own state, with no copy and no task. The
//!   children of its subgraph nodes (at any depth) run their sync nodes as it does.
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
use crate::machine::run::{Over, Progress, Run};
use crate::model::graph::Graph;
use crate::model::hitl::Hitl;
use crate::model::node::Ctx;
use crate::model::produce::{produce, produced, Produced};
use crate::store::{AppendOutcome, Checkpointer};
use crate::tenure::Appends;
use crate::vocab::error::{panic_message, Error};
use crate::vocab::name::{CheckpointId, NodeName, ThreadId};
use futures::{FutureExt, StreamExt};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

/// Drives the executor on tokio.
pub(crate) struct TokioDriver<G> {
    /// The graph, for the blocking tasks that run sync nodes.
    graph: Arc<G>,
    /// Sync nodes run on the runtime's thread rather than on the blocking pool.
    inline: bool,
}

tokio::task_local! {
    /// Set while an awaited node of a run whose sync nodes run inline is polled: the runs of a
    /// subgraph node's child (made inside that node) run theirs inline too.
    static INLINE: bool;
}

/// Whether a run made here runs its sync nodes inline: asked by its app (`own`), or made by a
/// subgraph node of a run that does.
pub(crate) fn inline_here(own: bool) -> bool {
    own || INLINE.try_with(|inline| *inline).unwrap_or(false)
}

impl<G: Graph> Appends for TokioDriver<G> {
    fn append<'a>(
        &'a self,
        store: &'a dyn Checkpointer,
        graph: &'a str,
        thread: &'a ThreadId,
        expected: Option<CheckpointId>,
        id: CheckpointId,
        bytes: &'a [u8],
        durable: bool,
    ) -> impl Future<Output = Result<AppendOutcome, Error>> + Send + 'a {
        crate::vocab::trace::store_call_async(
            "append",
            graph,
            Some(thread),
            store.append_async(graph, thread, expected, id, bytes, durable),
        )
    }

    fn append_over<'a>(
        &'a self,
        store: &'a dyn Checkpointer,
        graph: &'a str,
        thread: &'a ThreadId,
        (head, head_bytes): (CheckpointId, &'a [u8]),
        id: CheckpointId,
        bytes: &'a [u8],
        durable: bool,
    ) -> impl Future<Output = Result<AppendOutcome, Error>> + Send + 'a {
        crate::vocab::trace::store_call_async(
            "append",
            graph,
            Some(thread),
            store.append_over_async(graph, thread, head, head_bytes, id, bytes, durable),
        )
    }
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
            if graph.awaits(node) {
                let run = async {
                    let mut hitl = Hitl::with_answers(answers);
                    let result = if self.inline {
                        INLINE.scope(true, graph.run_async(node, state, ctx, &mut hitl)).await
                    } else {
                        graph.run_async(node, state, ctx, &mut hitl).await
                    };
                    produced(graph, node, ctx, result, hitl)
                };
                match AssertUnwindSafe(run).catch_unwind().await {
                    Ok(produced) => produced,
                    Err(payload) => {
                        Err(Error::NodePanicked { node: ctx.node.clone(), message: panic_message(payload) })
                    }
                }
            } else if self.inline {
                // Asked for by the app: the node runs here, between awaits, on the run's state.
                produce(graph, node, state, ctx, answers)
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

    fn produce_within<'a>(
        &'a self,
        graph: &'a G,
        node: G::Node,
        state: &'a G::State,
        ctx: &'a Ctx<G::State>,
        answers: Vec<serde_json::Value>,
        limit: Duration,
    ) -> impl Future<Output = Result<Produced<G::State, G::Node>, Error>> + Send + 'a {
        async move {
            let timed_out = || Error::NodeTimedOut { node: ctx.node.clone(), after: limit };
            if graph.awaits(node) || !self.inline {
                // An awaited node is cancelled at the limit; a sync node on the blocking pool
                // finishes there, and its result is dropped.
                tokio::time::timeout(limit, self.produce(graph, node, state, ctx, answers))
                    .await
                    .unwrap_or_else(|_| Err(timed_out()))
            } else {
                // A sync node the app runs inline goes to the blocking pool when it has a time
                // limit: the runtime's thread cannot be taken back from it.
                let (graph, state, task_ctx) = (Arc::clone(&self.graph), state.clone(), ctx.clone_for_task());
                let task = tokio::task::spawn_blocking(move || produce(&*graph, node, &state, &task_ctx, answers));
                match tokio::time::timeout(limit, task).await {
                    Ok(Ok(produced)) => produced,
                    Ok(Err(error)) => Err(lost(&ctx.node, error)),
                    Err(_) => Err(timed_out()),
                }
            }
        }
    }

    fn sleep(&self, wait: Duration) -> impl Future<Output = ()> + Send + '_ {
        tokio::time::sleep(wait)
    }

    fn head<'a>(
        &'a self,
        store: &'a dyn Checkpointer,
        graph: &'a str,
        thread: &'a ThreadId,
    ) -> impl Future<Output = Result<Option<(CheckpointId, Vec<u8>)>, Error>> + Send + 'a {
        crate::vocab::trace::store_call_async("head", graph, Some(thread), store.head_async(graph, thread))
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
    /// Carries `run` of `graph`; `inline`: its app runs sync nodes inline (so does a run made
    /// by a subgraph node of a run that does, see [`inline_here`]).
    pub(crate) fn new(run: Run<'g, G>, graph: &Arc<G>, inline: bool) -> Self {
        let driver = TokioDriver { graph: Arc::clone(graph), inline: inline_here(inline) };
        AsyncRun { run, driver, over: false }
    }

    /// The run it carries.
    pub(crate) fn run(&mut self) -> &mut Run<'g, G> {
        &mut self.run
    }

    /// Whether the run paused, finished or failed: nothing more comes of it.
    pub(crate) fn is_over(&self) -> bool {
        self.over
    }

    /// One advance of the run, inside its `run` span.
    pub(crate) async fn step(&mut self) -> Result<Progress, Error> {
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

    /// Advances the run until it pauses or reaches `end` ([`Run::until_over`]), inside its
    /// `run` span. Dropped part-way, the run is not over: the drop abandons it.
    pub(crate) async fn run_to_end(&mut self) -> Result<Over, Error> {
        #[cfg(feature = "tracing")]
        let span = self.run.span.clone();
        let until = self.run.until_over(&self.driver);
        #[cfg(feature = "tracing")]
        let until = tracing::Instrument::instrument(until, span);
        let over = until.await;
        // A failed step abandoned the run itself; a pause and the end are final.
        self.over = true;
        over
    }
}

impl<G: Graph> Drop for AsyncRun<'_, G> {
    fn drop(&mut self) {
        if !self.over {
            self.run.abandon();
        }
    }
}

/// The error of a node the async driver could not run to its end because its task was lost
/// (the runtime shut down under it).
fn lost(node: &NodeName, why: impl std::fmt::Display) -> Error {
    Error::NodeFailed { node: node.clone(), source: format!("the task running the node was lost: {why}").into() }
}
