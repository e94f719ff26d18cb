//! What the executor asks of the code that drives it: running a node, writing to the store, and
//! running a fan-out's branches — the three things that can wait. Defined here, by the executor
//! that asks; implemented by the drivers above it (`drive::thread`, `drive::tokio`), which never
//! reach back into it for anything but the run they carry.

use crate::model::graph::Graph;
use crate::model::node::Ctx;
use crate::model::produce::Produced;
use crate::store::Checkpointer;
use crate::tenure::Appends;
use crate::vocab::error::Error;
use crate::vocab::name::{CheckpointId, ThreadId};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// What the executor asks of the code that drives it; its store writes ([`Appends`]) are what
/// the run's [`Tenure`](crate::tenure::Tenure) asks of it.
pub(crate) trait Driver<G: Graph>: Appends {
    /// Whether every future this driver returns is ready on its first poll (the thread
    /// driver's). The step then polls the machine's own futures in place with
    /// [`now_or_never`], allocating nothing; a driver whose futures wait (tokio's) has them
    /// boxed, so that a step's future stays small.
    const READY: bool = false;

    /// Whether [`write_behind`](Self::write_behind) runs a fan-out journal's writes on a thread
    /// of their own (the thread driver's, whose branches otherwise wait for each write in turn;
    /// tokio's branches already go on while a write waits).
    const WRITES_BEHIND: bool = false;

    /// Runs `job` — a fan-out journal's writer, which writes what finished branches recorded —
    /// on a thread of its own, handing it this driver, while the branch that recorded goes on
    /// (`Journal::flush`). Called only when [`WRITES_BEHIND`](Self::WRITES_BEHIND); the default
    /// runs it here.
    fn write_behind(&self, job: Box<dyn FnOnce(&Self) + Send>) {
        job(self)
    }

    /// Runs `node` on `state` with the answers to its earlier pauses (panics caught).
    fn produce<'a>(
        &'a self,
        graph: &'a G,
        node: G::Node,
        state: &'a G::State,
        ctx: &'a Ctx<G::State>,
        answers: Vec<serde_json::Value>,
    ) -> impl Future<Output = Result<Produced<G::State, G::Node>, Error>> + Send + 'a;

    /// Runs `node` at once, without a future: what the step does on a [`READY`](Self::READY)
    /// driver for a node without a policy whose run streams nothing (most steps). The default
    /// polls [`produce`](Self::produce) once, which a ready driver's future answers.
    fn produce_ready(
        &self,
        graph: &G,
        node: G::Node,
        state: &G::State,
        ctx: &Ctx<G::State>,
        answers: Vec<serde_json::Value>,
    ) -> Result<Produced<G::State, G::Node>, Error> {
        now_or_never(std::pin::pin!(self.produce(graph, node, state, ctx, answers)))
    }

    /// [`produce`](Self::produce) within `limit`: a run that takes longer fails with
    /// [`Error::NodeTimedOut`]. The default waits for the node and then discards a late result;
    /// the drivers stop waiting at the limit (an async node is cancelled, a blocking node's
    /// thread is left to finish on its own).
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
            let started = std::time::Instant::now();
            let produced = self.produce(graph, node, state, ctx, answers).await;
            if started.elapsed() > limit {
                return Err(Error::NodeTimedOut { node: ctx.node.clone(), after: limit });
            }
            produced
        }
    }

    /// Waits `wait` (between a node's retries).
    fn sleep(&self, wait: Duration) -> impl Future<Output = ()> + Send + '_ {
        async move { std::thread::sleep(wait) }
    }

    /// [`Checkpointer::head`].
    fn head<'a>(
        &'a self,
        store: &'a dyn Checkpointer,
        graph: &'a str,
        thread: &'a ThreadId,
    ) -> impl Future<Output = Result<Option<(CheckpointId, Vec<u8>)>, Error>> + Send + 'a {
        async move { crate::vocab::trace::store_call("head", graph, Some(thread), || store.head(graph, thread)) }
    }

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

/// Polls `future` once and returns its output: the futures of a [`Driver::READY`] driver's
/// machine complete on their first poll, because every future the driver hands them is ready.
///
/// Takes the future pinned where it was made, so that it is not moved (a step's future is
/// hundreds of bytes, made once per step).
pub(crate) fn now_or_never<F: Future>(mut future: Pin<&mut F>) -> F::Output {
    match future.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => output,
        Poll::Pending => unreachable!("a ready driver's futures are all ready, so the machine never waits"),
    }
}
