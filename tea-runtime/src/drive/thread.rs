//! The thread driver: what carries the machine through a blocking run.
//!
//! The machine (`machine::run::Run` on the main line, `machine::fork` for fan-outs) is written
//! once, as async code generic over a [`Driver`] (whose trait it defines). It decides what runs
//! next, applies what nodes produced (declared-order merges, conflicts, checkpoints, claims),
//! and asks its driver for the three things that can wait: running a node, writing to the
//! store, and running a fan-out's branches.
//!
//! [`ThreadDriver`] answers each at once, on the calling thread (branches on the calling thread
//! and the pool, see `share`): its futures are always ready ([`Driver::READY`]). The blocking
//! API (`invoke`, `resume`, `recover`, `stream`) takes each step (the first claims the thread) ([`Run::advance`]) through the
//! machine's step in its ready form (`Run::step_ready`, written once with the async
//! `Run::step`): the node is a call, and the futures only some steps make (checkpoint writes,
//! pauses, fan-outs) are polled once in place with [`now_or_never`], so that a step allocates
//! nothing the machine does not. (Boxing and awaiting a future per step, as the async form
//! does, was measured at twice the instructions of tea-bench's `sequential_1000`.) The tokio
//! driver is `drive::tokio`.

use crate::machine::driver::{now_or_never, Driver};
use crate::machine::run::{Over, Progress, Run};
use crate::model::graph::Graph;
use crate::model::node::Ctx;
use crate::model::produce::{produce, Produced};
use crate::store::{AppendOutcome, Checkpointer};
use crate::tenure::Appends;
use crate::vocab::error::Error;
use crate::vocab::name::{CheckpointId, ThreadId};
use crate::vocab::trace::traced;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Drives the executor on the calling thread: every future it returns is ready.
pub(crate) struct ThreadDriver;

#[allow(clippy::manual_async_fn)] // as for the driver below
impl Appends for ThreadDriver {
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
        async move {
            crate::vocab::trace::store_call("append", graph, Some(thread), || {
                store.append(graph, thread, expected, id, bytes, durable)
            })
        }
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
        async move {
            crate::vocab::trace::store_call("append", graph, Some(thread), || {
                store.append_over(graph, thread, head, head_bytes, id, bytes, durable)
            })
        }
    }
}

// Written as `async` blocks rather than `async fn`s: the trait's futures are `Send` and borrow for
// `'a` only, which the blocks state as the trait does.
#[allow(clippy::manual_async_fn)]
impl<G: Graph> Driver<G> for ThreadDriver {
    const READY: bool = true;
    const WRITES_BEHIND: bool = true;

    /// Runs the journal's writer on the pool of journal writers (`share::write_behind`): a
    /// fan-out's next branch runs while the last one's progress is written, as it would on
    /// another of the pool's threads.
    fn write_behind(&self, job: Box<dyn FnOnce(&Self) + Send>) {
        crate::drive::share::write_behind(move || job(&ThreadDriver));
    }

    /// Runs `node` at once, on the calling thread: what [`Driver::produce`] is, and what
    /// [`Driver::produce_within`] does outside an app.
    #[inline]
    fn produce_ready(
        &self,
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

    fn produce<'a>(
        &'a self,
        graph: &'a G,
        node: G::Node,
        state: &'a G::State,
        ctx: &'a Ctx<G::State>,
        answers: Vec<serde_json::Value>,
    ) -> impl Future<Output = Result<Produced<G::State, G::Node>, Error>> + Send + 'a {
        // Lazy (run when polled), so that a span the executor puts on the future is entered.
        async move { self.produce_ready(graph, node, state, ctx, answers) }
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
            if graph.is_async(node) {
                return Err(Error::NeedsAsync { graph: graph.name().to_owned(), node: ctx.node.clone() });
            }
            // The node runs on a thread of its own, so that the run can stop waiting for it at
            // the limit: the app's graph (shared) and a copy of the state and `Ctx` go with it.
            let shared = ctx.shared.as_ref().and_then(|shared| Arc::clone(&shared.graph).downcast::<G>().ok());
            let Some(shared) = shared else {
                // Outside an app (no shared graph): wait, and discard a late result.
                let started = Instant::now();
                let produced = self.produce_ready(graph, node, state, ctx, answers);
                return if started.elapsed() > limit {
                    Err(Error::NodeTimedOut { node: ctx.node.clone(), after: limit })
                } else {
                    produced
                };
            };
            let (state, task_ctx) = (state.clone(), ctx.clone_for_task());
            let (sender, receiver) = std::sync::mpsc::sync_channel(1);
            #[cfg(feature = "tracing")]
            let span = tracing::Span::current();
            let spawned = std::thread::Builder::new().name(format!("tea-node-{}", ctx.node)).spawn(move || {
                #[cfg(feature = "tracing")]
                let _node = span.enter();
                // The run may have stopped waiting: then nobody receives the late result.
                let _ = sender.send(produce(&*shared, node, &state, &task_ctx, answers));
            });
            if let Err(error) = spawned {
                return Err(Error::NodeFailed {
                    node: ctx.node.clone(),
                    source: format!("no thread could be started for the node: {error}").into(),
                });
            }
            match receiver.recv_timeout(limit) {
                Ok(produced) => produced,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    Err(Error::NodeTimedOut { node: ctx.node.clone(), after: limit })
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(Error::NodeFailed {
                    node: ctx.node.clone(),
                    source: "the thread running the node stopped without a result".into(),
                }),
            }
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
            crate::drive::share::run_shared(jobs, &run_job, rayon::current_num_threads(), max)
        }
    }
}

/// The blocking API's calls into the machine, on the calling thread: its ready step and run
/// loop, and the abandon.
impl<G: Graph> Run<'_, G> {
    /// Runs the next node (or fan-out), or pauses: the machine's step made for a ready driver
    /// ([`Run::step_ready`]) on the calling thread. After an error the run is over; a resumed
    /// run then puts its pause back.
    pub(crate) fn advance(&mut self) -> Result<Progress, Error> {
        traced! { let _run = self.span.clone().entered(); }
        self.step_ready(&ThreadDriver)
    }

    /// Advances the run until it pauses or reaches `end` ([`Run::until_over_ready`], the
    /// machine's run loop, on the calling thread).
    pub(crate) fn run_to_end(&mut self) -> Result<Over, Error> {
        traced! { let _run = self.span.clone().entered(); }
        self.until_over_ready(&ThreadDriver)
    }

    /// After a failure, or when a stream is dropped part-way: a resumed run writes its pause
    /// back as the head, so that the token that resumed it works again; any other run writes
    /// its last checkpoint again without its lease, so that `recover` may continue it at once.
    /// A run that has not claimed its thread yet wrote nothing, and writes nothing.
    pub(crate) fn abandon(&mut self) {
        now_or_never(pin!(self.abandon_with(&ThreadDriver)));
    }
}
