//! Drivers: what carries the one executor through a run.
//!
//! The executor (`exec::Run` on the main line, `parallel` for fan-outs) is written once, as
//! async code generic over a [`Driver`]. It decides what runs next, applies what nodes produced
//! (declared-order merges, conflicts, checkpoints, claims), and asks its driver for the three
//! things that can wait: running a node, writing to the store, and running a fan-out's branches.
//!
//! - [`ThreadDriver`] answers each at once, on the calling thread (branches on the calling thread
//!   and the pool, see `share`): its futures are always ready. The blocking API (`invoke`,
//!   `resume`, `recover`, `stream`) takes each step through the same parts as the async step
//!   (`Run::next`, the node, `Run::finish`) without making a future for a node's step, and polls
//!   the executor's futures for the rest — checkpoint writes, pauses, fan-outs — once, with
//!   [`now_or_never`], which allocates nothing.
//! - The tokio driver (feature `tokio`, `tokio_driver`) awaits async nodes on the runtime, sends
//!   sync nodes to tokio's blocking pool, awaits the store's async calls, and polls a fan-out's
//!   branches concurrently.

use crate::error::Error;
use crate::exec::{produce, Produced};
use crate::graph::Graph;
use crate::name::ThreadId;
use crate::node::Ctx;
use crate::store::{Append, CheckpointId, Checkpointer};
use std::future::Future;
use std::pin::{pin, Pin};
use std::task::{Context, Poll, Waker};

/// What the executor asks of the code that drives it.
pub(crate) trait Driver<G: Graph>: Sync {
    /// Runs `node` on `state` with the answers to its earlier pauses (panics caught).
    fn produce<'a>(
        &'a self,
        graph: &'a G,
        node: G::Node,
        state: &'a G::State,
        ctx: &'a Ctx<G::State>,
        answers: Vec<serde_json::Value>,
    ) -> impl Future<Output = Result<Produced<G::State, G::Node>, Error>> + Send + 'a;

    /// [`Checkpointer::append`].
    #[allow(clippy::too_many_arguments)]
    fn append<'a>(
        &'a self,
        store: &'a dyn Checkpointer,
        graph: &'a str,
        thread: &'a ThreadId,
        expected: Option<CheckpointId>,
        id: CheckpointId,
        bytes: &'a [u8],
        durable: bool,
    ) -> impl Future<Output = Result<Append, Error>> + Send + 'a;

    /// Runs every job through `run`, at most `max` at once, and returns the results in the jobs'
    /// order.
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
        Fut: Future<Output = T> + Send + 'a;
}

/// Drives the executor on the calling thread: every future it returns is ready.
pub(crate) struct ThreadDriver;

impl ThreadDriver {
    /// Runs `node` at once: [`Driver::produce`] without the future, which the executor's
    /// thread-driven step ([`Run::step_now`](crate::exec::Run)) calls directly.
    #[inline]
    pub(crate) fn produce_now<G: Graph>(
        graph: &G,
        node: G::Node,
        state: &G::State,
        ctx: &Ctx<G::State>,
        answers: Vec<serde_json::Value>,
    ) -> Result<Produced<G::State, G::Node>, Error> {
        if graph.is_async(node) {
            Err(Error::NeedsAsync { graph: graph.name().to_owned(), node: ctx.node.clone() })
        } else {
            produce(graph, node, state, ctx, answers)
        }
    }
}

// Written as `async` blocks rather than `async fn`s: the trait's futures are `Send` and borrow for
// `'a` only, which the blocks state as the trait does.
#[allow(clippy::manual_async_fn)]
impl<G: Graph> Driver<G> for ThreadDriver {
    fn produce<'a>(
        &'a self,
        graph: &'a G,
        node: G::Node,
        state: &'a G::State,
        ctx: &'a Ctx<G::State>,
        answers: Vec<serde_json::Value>,
    ) -> impl Future<Output = Result<Produced<G::State, G::Node>, Error>> + Send + 'a {
        // Lazy (run when polled), so that a span the executor puts on the future is entered.
        async move { ThreadDriver::produce_now(graph, node, state, ctx, answers) }
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
        async move {
            crate::trace::store_call("append", graph, Some(thread), || {
                store.append(graph, thread, expected, id, bytes, durable)
            })
        }
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
        async move {
            let run_job = |job: J| now_or_never(pin!(run(job)));
            crate::share::run_shared(jobs, &run_job, rayon::current_num_threads(), max)
        }
    }
}

/// Polls `future` once and returns its output: the thread driver's executor futures complete
/// on their first poll, because every future the [`ThreadDriver`] hands them is ready.
///
/// Takes the future pinned where it was made, so that it is not moved (a step's future is
/// hundreds of bytes, made once per step).
pub(crate) fn now_or_never<F: Future>(mut future: Pin<&mut F>) -> F::Output {
    match future.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => output,
        Poll::Pending => unreachable!("the thread driver's futures are all ready, so the executor never waits"),
    }
}

/// The error of a node the async driver could not run to its end because its task was lost
/// (the runtime shut down under it).
#[cfg(feature = "tokio")]
pub(crate) fn lost(node: &crate::name::NodeName, why: impl std::fmt::Display) -> Error {
    Error::NodeFailed { node: node.clone(), source: format!("the task running the node was lost: {why}").into() }
}
