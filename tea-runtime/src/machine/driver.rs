//! What the executor asks of the code that drives it: running a node, writing to the store, and
//! running a fan-out's branches — the three things that can wait. Defined here, by the executor
//! that asks; implemented by the drivers above it (`drive::thread`, `drive::tokio`), which never
//! reach back into it for anything but the run they carry.

use crate::model::graph::Graph;
use crate::model::node::Ctx;
use crate::model::produce::Produced;
use crate::store::{Append, Checkpointer};
use crate::vocab::error::Error;
use crate::vocab::name::{CheckpointId, ThreadId};
use std::future::Future;

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
