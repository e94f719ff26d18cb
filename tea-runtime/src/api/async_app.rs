//! The async API (feature `tokio`): `App::run_async` and `run_stream_async` (and the short
//! `invoke_async`, `resume_async`, `stream_async`), carried by the tokio driver (`drive::tokio`).

use crate::api::app::{call_name, App, NoCheckpointer, Recovery};
use crate::api::call::Call;
use crate::api::pauses::Pauses;
use crate::api::stream::{ended_event, event_after};
use crate::api::token;
use crate::drive::tokio::AsyncRun;
use crate::format::token::Resume;
use crate::model::event::Event;
use crate::model::graph::Graph;
use crate::model::outcome::{Outcome, Snapshot};
use crate::model::scope::{Emitted, Emitter};
use crate::store::Checkpointer;
use crate::tenure::Tenure;
use crate::vocab::error::Error;
use crate::vocab::name::{CheckpointId, ThreadId};
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use std::sync::Arc;
use std::task::Poll;

/// Advances a run the async driver carries to a pause or the end, and makes its outcome
/// ([`token::outcome`], as the blocking driver does).
async fn outcome<G: Graph>(mut run: AsyncRun<'_, G>) -> Result<Outcome<G::State>, Error> {
    let over = run.run_to_end().await?;
    let run = run.run();
    token::outcome(run.graph, run.tenure.as_deref(), over, run.state.clone())
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

/// How a streamed call begins: from a pause its app remembered (its run, and the call again
/// with the thread whose head to read if the run's claim finds another head), from the head it
/// is to read, or over already (a recover that found its thread paused or finished).
#[allow(clippy::large_enum_variant)] // made once per streamed call, and moved at once
enum Begun<'g, G: Graph> {
    Remembered(AsyncRun<'g, G>, Call<G::State>, Option<ThreadId>),
    Read(Call<G::State>, Option<ThreadId>),
    Over(Outcome<G::State>),
}

/// The events of a run begun from a remembered pause (`first`, its tenure `tenure`), or, when
/// its first item is the error of a claim that found another head (the run wrote nothing, and
/// nothing came before: its claim is its first advance, before any node runs), those of `read`.
fn or_read<'g, S: crate::vocab::state::GraphState>(
    first: BoxStream<'g, Result<Event<S>, Error>>,
    tenure: Option<Arc<Tenure>>,
    read: impl FnOnce() -> BoxStream<'g, Result<Event<S>, Error>> + Send + 'g,
) -> impl Stream<Item = Result<Event<S>, Error>> + Send + 'g {
    enum At<'g, S, R> {
        First(BoxStream<'g, S>, R),
        Rest(BoxStream<'g, S>),
    }
    futures::stream::unfold(At::First(first, read), move |at| {
        let tenure = tenure.clone();
        async move {
            match at {
                At::First(mut first, read) => match first.next().await {
                    Some(Err(_)) if tenure.as_deref().is_some_and(Tenure::missed_unread) => {
                        drop(first);
                        let mut rest = read();
                        rest.next().await.map(|item| (item, At::Rest(rest)))
                    }
                    Some(item) => Some((item, At::Rest(first))),
                    None => None,
                },
                At::Rest(mut rest) => rest.next().await.map(|item| (item, At::Rest(rest))),
            }
        }
    })
}

/// The events of a run as a `Send` stream. What its nodes emit while they run
/// ([`Ctx::emit`](crate::Ctx::emit), retries, starts) is yielded at once, while the node still
/// runs; whatever is left when the node ends comes before its step. With `pauses` (a store that
/// resumes without a read), the run's pause is remembered there as its event is yielded.
pub(crate) fn events<'g, G: Graph>(
    mut run: Result<AsyncRun<'g, G>, Error>,
    pauses: Option<Arc<Pauses>>,
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
    let steps = futures::stream::unfold(at, move |at| {
        let pauses = pauses.clone();
        async move {
            match at {
                At::Over => None,
                At::Failed(error) => Some((Err(error), At::Over)),
                At::Running(mut run) => match next_event(&mut run).await {
                    Some(Ok(event)) => {
                        if let (Event::Interrupted { .. }, Some(pauses), Some(tenure)) =
                            (&event, &pauses, &run.run().tenure)
                        {
                            pauses.keep(tenure);
                        }
                        Some((Ok(event), At::Running(run)))
                    }
                    Some(Err(error)) => Some((Err(error), At::Over)),
                    None => None,
                },
            }
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
    /// [`run`](Self::run) on the current tokio runtime: async nodes are awaited, sync nodes run
    /// on tokio's blocking pool, the branches of a fan-out run concurrently.
    ///
    /// # Errors
    /// Those of [`run`](Self::run), and [`Error::NoRuntime`] outside a tokio runtime.
    pub async fn run_async(&self, call: Call<G::State>) -> Result<G::State, Error> {
        runtime("invoke_async")?;
        let run = self.unstored_run(call, false, "invoke_async")?;
        match outcome(AsyncRun::new(run, &self.graph, self.sync_inline)).await? {
            Outcome::Done(state) => Ok(state),
            Outcome::Interrupted { resume, .. } => {
                let (graph, node) = (self.graph.name().to_owned(), resume.node().clone());
                Err(Error::PausedWithoutCheckpointer { graph, node })
            }
        }
    }

    /// [`run_stream`](Self::run_stream) on the current tokio runtime: a `Send` stream of the
    /// run's events.
    pub fn run_stream_async(
        &self,
        call: Call<G::State>,
    ) -> impl Stream<Item = Result<Event<G::State>, Error>> + Send + '_ {
        let run = runtime("stream_async").and_then(|()| {
            let run = self.unstored_run(call, true, "stream_async")?;
            Ok(AsyncRun::new(run, &self.graph, self.sync_inline))
        });
        events(run, None)
    }

    /// Runs the graph from `start` to `end` on `input` on the current tokio runtime and returns
    /// the final state: `run_async(Call::start(input))`.
    ///
    /// # Errors
    /// Those of [`run_async`](Self::run_async).
    pub async fn invoke_async(&self, input: G::State) -> Result<G::State, Error> {
        self.run_async(Call::start(input)).await
    }

    /// [`stream`](Self::stream) on the current tokio runtime: `run_stream_async(Call::start(input))`.
    pub fn stream_async(&self, input: G::State) -> impl Stream<Item = Result<Event<G::State>, Error>> + Send + '_ {
        self.run_stream_async(Call::start(input))
    }
}

impl<G: Graph, C: Checkpointer> App<G, C> {
    /// [`run`](Self::run) on the current tokio runtime: async nodes are awaited, sync nodes run
    /// on tokio's blocking pool, branches run concurrently, checkpoints are written with the
    /// store's async calls.
    ///
    /// Dropping the future before it completes cancels the run and leaves the thread as a
    /// dropped stream does: a resume puts its pause back, so the same token works again unless
    /// a node after the one it paused at had completed; another run releases its lease, so a
    /// recover continues it from its last checkpoint.
    ///
    /// # Errors
    /// Those of [`run`](Self::run), and [`Error::NoRuntime`] outside a tokio runtime.
    pub async fn run_async(&self, call: Call<G::State>) -> Result<Outcome<G::State>, Error> {
        runtime(call_name(&call.what, false, true))?;
        let thread = self.head_to_read(&call)?;
        // A pause this app wrote, resumed without reading the head (see `App::execute`).
        let mut call = call;
        if let Some((head, again)) = self.remembered(&call, thread.as_ref()) {
            let mut missed = false;
            let outcome = self.run_async_from(call, Some(head), Some(&mut missed)).await;
            if !missed {
                return outcome;
            }
            call = again;
        }
        let head = match thread {
            Some(thread) => Some(self.head_async(&thread).await?),
            None => None,
        };
        self.run_async_from(call, head, None).await
    }

    /// [`run_async`](Self::run_async) from `head` (`unread`: as for `App::execute`).
    async fn run_async_from(
        &self,
        call: Call<G::State>,
        head: Option<(CheckpointId, Vec<u8>)>,
        mut unread: Option<&mut bool>,
    ) -> Result<Outcome<G::State>, Error> {
        let run = match self.begin_from(call, head, false, true, &mut unread)? {
            Recovery::Over(outcome) => return Ok(outcome),
            Recovery::Run(run) => run,
        };
        let tenure = run.tenure.clone();
        let mut run = AsyncRun::new(run, &self.graph, self.sync_inline);
        let over = run.run_to_end().await;
        self.ended(tenure.as_deref(), &over, unread);
        let run = run.run();
        token::outcome(run.graph, run.tenure.as_deref(), over?, run.state.clone())
    }

    /// [`run_stream`](Self::run_stream) on the current tokio runtime: a `Send` stream of the
    /// run's events. Dropping it part-way cancels the run, as dropping a blocking `Stream` does.
    pub fn run_stream_async(
        &self,
        call: Call<G::State>,
    ) -> impl Stream<Item = Result<Event<G::State>, Error>> + Send + '_ {
        let start = async move {
            runtime(call_name(&call.what, true, true))?;
            let thread = self.head_to_read(&call)?;
            // A pause this app wrote, resumed without reading the head (see `App::execute`).
            let mut call = call;
            if let Some((head, again)) = self.remembered(&call, thread.as_ref()) {
                let mut missed = false;
                match self.begin_from(call, Some(head), true, true, &mut Some(&mut missed)) {
                    Ok(Recovery::Run(run)) => {
                        return Ok(Begun::Remembered(AsyncRun::new(run, &self.graph, self.sync_inline), again, thread))
                    }
                    Ok(Recovery::Over(outcome)) => return Ok(Begun::Over(outcome)),
                    Err(error) if !missed => return Err(error),
                    Err(_) => {}
                }
                call = again;
            }
            Ok(Begun::Read(call, thread))
        };
        futures::stream::once(start).flat_map(move |begun| match begun {
            Ok(Begun::Remembered(mut run, again, thread)) => {
                let tenure = run.run().tenure.clone();
                let read = move || self.stream_read(again, thread).boxed();
                or_read(events(Ok(run), self.pause_memory()).boxed(), tenure, read).boxed()
            }
            Ok(Begun::Read(call, thread)) => self.stream_read(call, thread).boxed(),
            Ok(Begun::Over(outcome)) => futures::stream::once(std::future::ready(Ok(ended_event(outcome)))).boxed(),
            Err(error) => events::<G>(Err(error), None).boxed(),
        })
    }

    /// The events of `call` from the head of `thread` (what [`head_to_read`](Self::head_to_read)
    /// named), read from the store.
    fn stream_read(
        &self,
        call: Call<G::State>,
        thread: Option<ThreadId>,
    ) -> impl Stream<Item = Result<Event<G::State>, Error>> + Send + '_ {
        let start = async move {
            let head = match thread {
                Some(thread) => Some(self.head_async(&thread).await?),
                None => None,
            };
            self.begin(call, head, true, true)
        };
        futures::stream::once(start).flat_map(move |begun| match begun {
            Ok(Recovery::Run(run)) => {
                events(Ok(AsyncRun::new(run, &self.graph, self.sync_inline)), self.pause_memory()).left_stream()
            }
            Ok(Recovery::Over(outcome)) => {
                futures::stream::once(std::future::ready(Ok(ended_event(outcome)))).right_stream()
            }
            Err(error) => events(Err(error), None).left_stream(),
        })
    }

    /// [`invoke`](Self::invoke) on the current tokio runtime: `run_async(Call::start(input))`.
    ///
    /// # Errors
    /// Those of [`run_async`](Self::run_async).
    pub async fn invoke_async(&self, input: G::State) -> Result<Outcome<G::State>, Error> {
        self.run_async(Call::start(input)).await
    }

    /// [`resume`](Self::resume) on the current tokio runtime: `run_async(Call::resume(resume))`.
    ///
    /// # Errors
    /// Those of [`run_async`](Self::run_async).
    pub async fn resume_async(&self, resume: Resume<G::State>) -> Result<Outcome<G::State>, Error> {
        self.run_async(Call::resume(resume)).await
    }

    /// [`stream`](Self::stream) on the current tokio runtime: `run_stream_async(Call::start(input))`.
    pub fn stream_async(&self, input: G::State) -> impl Stream<Item = Result<Event<G::State>, Error>> + Send + '_ {
        self.run_stream_async(Call::start(input))
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
            crate::store::fold::head_async(&*self.checkpointer, graph, thread),
        )
        .await?;
        match head {
            None => Ok(None),
            Some((id, bytes)) => self.snapshot(thread, id, &bytes).map(Some),
        }
    }

    pub(crate) async fn head_async(&self, thread: &ThreadId) -> Result<(CheckpointId, Vec<u8>), Error> {
        let graph = self.graph.name();
        let head = crate::store::fold::head_async(&*self.checkpointer, graph, thread);
        crate::vocab::trace::store_call_async("head", graph, Some(thread), head)
            .await?
            .ok_or_else(|| Error::CheckpointNotFound { thread: thread.clone() })
    }
}
