//! The async API (feature `tokio`): `App::invoke_async`, `resume_async`, `recover_async`,
//! `stream_async` and their kin, carried by the tokio driver (`drive::tokio`).

use crate::api::app::{App, NoCheckpointer, Recovery};
use crate::api::stream::event_after;
use crate::api::token;
use crate::drive::tokio::AsyncRun;
use crate::format::token::Resume;
use crate::machine::run::{Over, Run};
use crate::model::event::Event;
use crate::model::graph::Graph;
use crate::model::outcome::{Outcome, Snapshot};
use crate::model::scope::{Emitted, Emitter};
use crate::store::Checkpointer;
use crate::vocab::error::Error;
use crate::vocab::name::{CheckpointId, ThreadId};
use crate::vocab::options::RunOptions;
use crate::vocab::trace::traced;
use futures::{Stream, StreamExt};
use std::sync::Arc;
use std::task::Poll;

/// Claims the thread of a run the async driver carries, advances it to a pause or the end, and
/// makes its outcome (a pause's token is made here).
async fn outcome<G: Graph>(mut run: AsyncRun<'_, G>) -> Result<Outcome<G::State>, Error> {
    run.claim().await?;
    let over = run.run_to_end().await?;
    let run = run.run();
    match over {
        Over::Done => Ok(Outcome::Done(run.state.clone())),
        Over::Paused(record) => {
            let resume = token::token(run, &record)?;
            Ok(Outcome::Interrupted { state: run.state.clone(), resume })
        }
    }
}

/// The next event of a run the async driver carries, as the blocking `Stream` yields them
/// ([`event_after`], the one event pump); `None` once it is over.
pub(crate) async fn next_event<G: Graph>(run: &mut AsyncRun<'_, G>) -> Option<Result<Event<G::State>, Error>> {
    if let Some(event) = run.run().branch_events.pop_front() {
        return Some(Ok(event));
    }
    if let Some(error) = run.run().failure.take() {
        return Some(Err(error));
    }
    if run.is_over() {
        return None;
    }
    loop {
        let progress = run.step().await;
        if let Some(event) = event_after(run.run(), progress) {
            return Some(event);
        }
    }
}

/// The events of a run as a `Send` stream. What its nodes emit while they run
/// ([`Ctx::emit`](crate::Ctx::emit), retries, starts) is yielded at once, while the node still
/// runs; whatever is left when the node ends comes before its step.
pub(crate) fn events<'g, G: Graph>(
    mut run: Result<AsyncRun<'g, G>, Error>,
) -> impl Stream<Item = Result<Event<G::State>, Error>> + Send + 'g {
    enum At<R> {
        Failed(Error),
        Running(R),
        Over,
    }
    let emitter = run.as_mut().ok().and_then(|run| run.run().ctx.emitter.clone());
    let at = match run {
        Ok(run) => At::Running(run),
        Err(error) => At::Failed(error),
    };
    let steps = futures::stream::unfold(at, |at| async move {
        match at {
            At::Over => None,
            At::Failed(error) => Some((Err(error), At::Over)),
            At::Running(mut run) => match next_event(&mut run).await {
                Some(Ok(event)) => Some((Ok(event), At::Running(run))),
                Some(Err(error)) => Some((Err(error), At::Over)),
                None => None,
            },
        }
    });
    live(steps, emitter)
}

/// `steps`, with what is emitted meanwhile yielded as soon as it is, while `steps` waits.
fn live<'g, S, T>(steps: T, emitter: Option<Arc<Emitter>>) -> impl Stream<Item = Result<Event<S>, Error>> + Send + 'g
where
    S: crate::vocab::state::GraphState,
    T: Stream<Item = Result<Event<S>, Error>> + Send + 'g,
{
    let mut steps = Box::pin(steps);
    let mut ready = std::collections::VecDeque::new();
    let mut over = false;
    futures::stream::poll_fn(move |cx| {
        if let Some(event) = ready.pop_front() {
            return Poll::Ready(Some(Ok(event)));
        }
        if over {
            return Poll::Ready(None);
        }
        match steps.as_mut().poll_next(cx) {
            Poll::Ready(None) => {
                over = true;
                Poll::Ready(None)
            }
            Poll::Ready(Some(item)) => Poll::Ready(Some(item)),
            Poll::Pending => {
                if let Some(emitter) = &emitter {
                    ready.extend(emitter.take_or_wait(cx.waker()).into_iter().map(Emitted::into_event));
                    if let Some(event) = ready.pop_front() {
                        return Poll::Ready(Some(Ok(event)));
                    }
                }
                Poll::Pending
            }
        }
    })
}

/// Fails unless polled inside a tokio runtime (the driver spawns onto it).
fn runtime(call: &'static str) -> Result<(), Error> {
    tokio::runtime::Handle::try_current().map(|_| ()).map_err(|_| Error::NoRuntime { call })
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
        let mut run = Run::new(&*self.graph, input, self.limits(), None, false);
        self.attach_cache_context_emitter(&mut run)?;
        traced! { run.call("invoke_async"); }
        match outcome(AsyncRun::new(run, &self.graph, self.sync_inline)).await? {
            Outcome::Done(state) => Ok(state),
            Outcome::Interrupted { resume, .. } => {
                let (graph, node) = (self.graph.name().to_owned(), resume.node().clone());
                Err(Error::PausedWithoutCheckpointer { graph, node })
            }
        }
    }

    /// [`stream`](Self::stream) on the current tokio runtime: a `Send` stream of the run's events.
    pub fn stream_async(&self, input: G::State) -> impl Stream<Item = Result<Event<G::State>, Error>> + Send + '_ {
        let run = runtime("stream_async").and_then(|()| {
            let mut run = Run::new(&*self.graph, input, self.limits(), None, true);
            self.attach_cache_context_emitter(&mut run)?;
            traced! { run.call("stream_async"); }
            Ok(AsyncRun::new(run, &self.graph, self.sync_inline))
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
        let run = self.new_run(thread.into(), input, false, "invoke_async")?;
        outcome(AsyncRun::new(run, &self.graph, self.sync_inline)).await
    }

    /// [`resume`](Self::resume) on the current tokio runtime.
    ///
    /// Dropping the future before it completes cancels the run and leaves the thread resumable:
    /// the pause it resumed from is put back, so the same token works again unless a node after
    /// the one it paused at had completed (a run that was not
    /// resuming releases its lease, so [`recover_async`](Self::recover_async) continues it from
    /// its last checkpoint).
    ///
    /// # Errors
    /// Those of [`resume`](Self::resume), and [`Error::NoRuntime`] outside a tokio runtime.
    pub async fn resume_async(&self, resume: Resume<G::State>) -> Result<Outcome<G::State>, Error> {
        runtime("resume_async")?;
        let thread = self.verify(&resume)?;
        let (head, bytes) = self.head_async(&thread).await?;
        let run = self.resume_at(resume, head, bytes, false, &RunOptions::new(), "resume_async")?;
        outcome(AsyncRun::new(run, &self.graph, self.sync_inline)).await
    }

    /// [`recover`](Self::recover) on the current tokio runtime.
    ///
    /// # Errors
    /// Those of [`recover`](Self::recover), and [`Error::NoRuntime`] outside a tokio runtime.
    pub async fn recover_async(&self, thread: &ThreadId) -> Result<Outcome<G::State>, Error> {
        runtime("recover_async")?;
        let (head, bytes) = self.head_async(thread).await?;
        match self.recovery(thread, head, bytes, "recover_async")? {
            Recovery::Over(outcome) => Ok(outcome),
            Recovery::Run(run) => outcome(AsyncRun::new(run, &self.graph, self.sync_inline)).await,
        }
    }

    /// [`invoke_with`](Self::invoke_with) on the current tokio runtime.
    ///
    /// # Errors
    /// Those of [`invoke_async`](Self::invoke_async).
    pub async fn invoke_with_async(
        &self,
        input: G::State,
        options: impl Into<RunOptions>,
    ) -> Result<Outcome<G::State>, Error> {
        self.with_options(options.into()).invoke_on_async(ThreadId::random(), input).await
    }

    /// [`invoke_on_with`](Self::invoke_on_with) on the current tokio runtime.
    ///
    /// # Errors
    /// Those of [`invoke_on_async`](Self::invoke_on_async).
    pub async fn invoke_on_with_async(
        &self,
        thread: impl Into<ThreadId>,
        input: G::State,
        options: impl Into<RunOptions>,
    ) -> Result<Outcome<G::State>, Error> {
        self.with_options(options.into()).invoke_on_async(thread, input).await
    }

    /// [`resume_with`](Self::resume_with) on the current tokio runtime.
    ///
    /// # Errors
    /// Those of [`resume_async`](Self::resume_async).
    pub async fn resume_with_async(
        &self,
        resume: Resume<G::State>,
        options: impl Into<RunOptions>,
    ) -> Result<Outcome<G::State>, Error> {
        self.with_options(options.into()).resume_async(resume).await
    }

    /// [`recover_with`](Self::recover_with) on the current tokio runtime.
    ///
    /// # Errors
    /// Those of [`recover_async`](Self::recover_async).
    pub async fn recover_with_async(
        &self,
        thread: &ThreadId,
        options: impl Into<RunOptions>,
    ) -> Result<Outcome<G::State>, Error> {
        self.with_options(options.into()).recover_async(thread).await
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
        let run = runtime("stream_async").and_then(|()| self.new_run(thread, input, true, "stream_async"));
        events(run.map(|run| AsyncRun::new(run, &self.graph, self.sync_inline)))
    }

    /// [`stream_resume`](Self::stream_resume) on the current tokio runtime.
    pub fn stream_resume_async(
        &self,
        resume: Resume<G::State>,
    ) -> impl Stream<Item = Result<Event<G::State>, Error>> + Send + '_ {
        self.stream_resume_as_async(resume, RunOptions::new())
    }

    fn stream_resume_as_async(
        &self,
        resume: Resume<G::State>,
        options: RunOptions,
    ) -> impl Stream<Item = Result<Event<G::State>, Error>> + Send + '_ {
        let start = async move {
            runtime("stream_resume_async")?;
            let thread = self.verify(&resume)?;
            let (head, bytes) = self.head_async(&thread).await?;
            let run = self.resume_at(resume, head, bytes, true, &options, "stream_resume_async")?;
            Ok(AsyncRun::new(run, &self.graph, self.sync_inline))
        };
        futures::stream::once(start).flat_map(events)
    }

    /// [`stream_on_with`](Self::stream_on_with) on the current tokio runtime.
    pub fn stream_on_with_async(
        &self,
        thread: impl Into<ThreadId>,
        input: G::State,
        options: impl Into<RunOptions>,
    ) -> impl Stream<Item = Result<Event<G::State>, Error>> + Send + '_ {
        let thread = thread.into();
        let run = runtime("stream_async")
            .and_then(|()| self.new_run_as(thread, input, true, &options.into(), "stream_async"));
        events(run.map(|run| AsyncRun::new(run, &self.graph, self.sync_inline)))
    }

    /// [`stream_resume_with`](Self::stream_resume_with) on the current tokio runtime.
    pub fn stream_resume_with_async(
        &self,
        resume: Resume<G::State>,
        options: impl Into<RunOptions>,
    ) -> impl Stream<Item = Result<Event<G::State>, Error>> + Send + '_ {
        self.stream_resume_as_async(resume, options.into())
    }

    /// [`state`](Self::state) for async code: the store is read with its async call.
    ///
    /// # Errors
    /// Those of [`state`](Self::state).
    pub async fn state_async(&self, thread: &ThreadId) -> Result<Option<Snapshot<G::State>>, Error> {
        let graph = self.graph.name();
        let head = crate::vocab::trace::store_call_async(
            "head",
            graph,
            Some(thread),
            self.checkpointer.head_async(graph, thread),
        )
        .await?;
        match head {
            None => Ok(None),
            Some((id, bytes)) => self.snapshot(thread, id, &bytes).map(Some),
        }
    }

    pub(crate) async fn head_async(&self, thread: &ThreadId) -> Result<(CheckpointId, Vec<u8>), Error> {
        let graph = self.graph.name();
        crate::vocab::trace::store_call_async("head", graph, Some(thread), self.checkpointer.head_async(graph, thread))
            .await?
            .ok_or_else(|| Error::CheckpointNotFound { thread: thread.clone() })
    }
}
