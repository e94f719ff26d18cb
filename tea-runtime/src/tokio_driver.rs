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

use crate::app::{App, NoCheckpointer, Recovery};
use crate::drive::{lost, Driver};
use crate::error::Error;
use crate::event::Event;
use crate::exec::{panic_message, produce, produced, Produced, Progress, Run};
use crate::graph::Graph;
use crate::hitl::Hitl;
use crate::name::ThreadId;
use crate::node::Ctx;
use crate::outcome::{Outcome, Snapshot};
use crate::resume::Resume;
use crate::store::{Append, CheckpointId, Checkpointer};
use crate::trace::traced;
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
        crate::trace::store_call_async(
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

/// Fails unless polled inside a tokio runtime (the driver spawns onto it).
fn runtime(call: &'static str) -> Result<(), Error> {
    tokio::runtime::Handle::try_current().map(|_| ()).map_err(|_| Error::NoRuntime { call })
}

/// A run the async driver carries. Dropped before it paused or finished (its future or stream
/// was dropped), it abandons the run, as a dropped blocking `Stream` does.
struct AsyncRun<'g, G: Graph> {
    run: Run<'g, G>,
    driver: TokioDriver<G>,
    over: bool,
}

impl<'g, G: Graph> AsyncRun<'g, G> {
    fn new(run: Run<'g, G>, graph: &Arc<G>) -> Self {
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
    async fn outcome(mut self) -> Result<Outcome<G::State>, Error> {
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
fn events<'g, G: Graph>(
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

impl<G: Graph> App<G, NoCheckpointer> {
    /// Runs the graph from `start` to `end` on `input` on the current tokio runtime and returns
    /// the final state: async nodes are awaited, sync nodes run on tokio's blocking pool, the
    /// branches of a fan-out run concurrently.
    ///
    /// # Errors
    /// Those of [`invoke`](Self::invoke), and [`Error::NoRuntime`] outside a tokio runtime.
    pub async fn invoke_async(&self, input: G::State) -> Result<G::State, Error> {
        runtime("invoke_async")?;
        let mut run = Run::new(&*self.graph, input, self.recursion_limit, None, false);
        run.max_branches = self.max_branches;
        traced! { run.call("invoke_async"); }
        match AsyncRun::new(run, &self.graph).outcome().await? {
            Outcome::Done(state) => Ok(state),
            Outcome::Interrupted { .. } => {
                Err(Error::store(format!("graph `{}` paused in an app without a checkpointer", self.graph.name())))
            }
        }
    }

    /// [`stream`](Self::stream) on the current tokio runtime: a `Send` stream of the run's events.
    pub fn stream_async(&self, input: G::State) -> impl Stream<Item = Result<Event<G::State>, Error>> + Send + '_ {
        let run = runtime("stream_async").map(|()| {
            let mut run = Run::new(&*self.graph, input, self.recursion_limit, None, true);
            run.max_branches = self.max_branches;
            traced! { run.call("stream_async"); }
            AsyncRun::new(run, &self.graph)
        });
        events(run)
    }
}

impl<G: Graph, C: Checkpointer> App<G, C> {
    /// [`invoke`](Self::invoke) on the current tokio runtime: starts a new thread (with a random
    /// id) and runs it until it finishes or pauses. Async nodes are awaited, sync nodes run on
    /// tokio's blocking pool, branches run concurrently, checkpoints are written with the
    /// store's async calls. Dropping the future part-way cancels the run: see
    /// [`resume_async`](Self::resume_async).
    ///
    /// # Errors
    /// Those of [`invoke`](Self::invoke), and [`Error::NoRuntime`] outside a tokio runtime.
    pub async fn invoke_async(&self, input: G::State) -> Result<Outcome<G::State>, Error> {
        self.invoke_on_async(ThreadId::random(), input).await
    }

    /// [`invoke_on`](Self::invoke_on) on the current tokio runtime.
    pub async fn invoke_on_async(
        &self,
        thread: impl Into<ThreadId>,
        input: G::State,
    ) -> Result<Outcome<G::State>, Error> {
        runtime("invoke_on_async")?;
        let run = self.new_run(thread.into(), input, false)?;
        traced! { run.call("invoke_async"); }
        AsyncRun::new(run, &self.graph).outcome().await
    }

    /// [`resume`](Self::resume) on the current tokio runtime.
    ///
    /// Dropping the future before it completes cancels the run and leaves the thread resumable:
    /// the pause it resumed from is put back, so the same token works again (a run that was not
    /// resuming releases its lease, so [`recover_async`](Self::recover_async) continues it from
    /// its last checkpoint).
    ///
    /// # Errors
    /// Those of [`resume`](Self::resume), and [`Error::NoRuntime`] outside a tokio runtime.
    pub async fn resume_async(&self, resume: Resume<G::State>) -> Result<Outcome<G::State>, Error> {
        runtime("resume_async")?;
        let thread = self.resumed_thread(&resume)?;
        let (head, bytes) = self.head_async(&thread).await?;
        let run = self.resume_at(resume, head, bytes, false)?;
        traced! { run.call("resume_async"); }
        AsyncRun::new(run, &self.graph).outcome().await
    }

    /// [`recover`](Self::recover) on the current tokio runtime.
    ///
    /// # Errors
    /// Those of [`recover`](Self::recover), and [`Error::NoRuntime`] outside a tokio runtime.
    pub async fn recover_async(&self, thread: &ThreadId) -> Result<Outcome<G::State>, Error> {
        runtime("recover_async")?;
        let (head, bytes) = self.head_async(thread).await?;
        match self.recovery(thread, head, bytes)? {
            Recovery::Over(outcome) => Ok(outcome),
            Recovery::Run(run) => {
                traced! { run.call("recover_async"); }
                AsyncRun::new(run, &self.graph).outcome().await
            }
        }
    }

    /// [`stream`](Self::stream) on the current tokio runtime: a `Send` stream of the events of a
    /// new thread. Dropping it part-way cancels the run, as dropping a blocking `Stream` does.
    pub fn stream_async(&self, input: G::State) -> impl Stream<Item = Result<Event<G::State>, Error>> + Send + '_ {
        self.stream_on_async(ThreadId::random(), input)
    }

    /// [`stream_on`](Self::stream_on) on the current tokio runtime.
    pub fn stream_on_async(
        &self,
        thread: impl Into<ThreadId>,
        input: G::State,
    ) -> impl Stream<Item = Result<Event<G::State>, Error>> + Send + '_ {
        let thread = thread.into();
        let run = runtime("stream_async").and_then(|()| self.new_run(thread, input, true));
        events(run.map(|run| AsyncRun::new(run, &self.graph)))
    }

    /// [`stream_resume`](Self::stream_resume) on the current tokio runtime.
    pub fn stream_resume_async(
        &self,
        resume: Resume<G::State>,
    ) -> impl Stream<Item = Result<Event<G::State>, Error>> + Send + '_ {
        let start = async move {
            runtime("stream_resume_async")?;
            let thread = self.resumed_thread(&resume)?;
            let (head, bytes) = self.head_async(&thread).await?;
            let run = self.resume_at(resume, head, bytes, true)?;
            traced! { run.call("stream_resume_async"); }
            Ok(AsyncRun::new(run, &self.graph))
        };
        futures::stream::once(start).flat_map(events)
    }

    /// [`state`](Self::state) for async code: the store is read with its async call.
    ///
    /// # Errors
    /// Those of [`state`](Self::state).
    pub async fn state_async(&self, thread: &ThreadId) -> Result<Option<Snapshot<G::State>>, Error> {
        let graph = self.graph.name();
        let head =
            crate::trace::store_call_async("head", graph, Some(thread), self.checkpointer.head_async(graph, thread))
                .await?;
        match head {
            None => Ok(None),
            Some((id, bytes)) => self.snapshot(thread, id, &bytes).map(Some),
        }
    }

    async fn head_async(&self, thread: &ThreadId) -> Result<(CheckpointId, Vec<u8>), Error> {
        let graph = self.graph.name();
        crate::trace::store_call_async("head", graph, Some(thread), self.checkpointer.head_async(graph, thread))
            .await?
            .ok_or_else(|| Error::CheckpointNotFound { thread: thread.clone() })
    }
}
