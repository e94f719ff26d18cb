//! One run of a graph as a value ([`Call`]): what it does (start on an input, answer a pause,
//! recover a thread, start at a node), on which thread, and how ([`RunOptions`]). Every front
//! end runs a call the same way — [`App::run`](crate::App::run) blocking,
//! `App::run_async` on tokio, [`App::run_stream`](crate::App::run_stream) and
//! `App::run_stream_async` as streams of events — so an option is one field of [`RunOptions`],
//! never another method.

use crate::format::token::Resume;
use crate::vocab::name::ThreadId;
use crate::vocab::options::{Durability, RunOptions};
use crate::vocab::policy::StreamModes;
use crate::vocab::state::GraphState;
use std::fmt;

/// One run of a graph: what it does, on which thread, and with which options.
///
/// Made by one of [`Call::start`], [`Call::resume`], [`Call::recover`] or [`Call::start_at`],
/// refined by [`on`](Self::on) and the options' setters, and carried out by the app:
/// [`App::run`](crate::App::run) (blocking), `App::run_async` (on tokio),
/// [`App::run_stream`](crate::App::run_stream) or `App::run_stream_async` (as events).
///
/// ```
/// # use tea::prelude::*;
/// # use tea::{Call, Durability};
/// # #[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
/// # struct Doc { text: String }
/// # fn draft(_: &Doc) -> DocUpdate { Doc::update().text("draft".to_owned()) }
/// # graph! { Write for Doc { start -> draft; draft -> end; } }
/// let app = Write::builder().checkpointer(MemoryStore::new()).build();
/// // Thread "doc-1", checkpointed only at its start, pauses and end.
/// let call = Call::start(Doc::default()).on("doc-1").durability(Durability::OnPause);
/// let done = app.run(call)?;
/// assert_eq!(done.done().unwrap().text, "draft");
/// // A finished thread recovers to its final state.
/// assert_eq!(app.run(Call::recover("doc-1"))?.done().unwrap().text, "draft");
/// # Ok::<(), tea::Error>(())
/// ```
pub struct Call<S: GraphState> {
    pub(crate) what: What<S>,
    pub(crate) thread: Option<ThreadId>,
    pub(crate) options: RunOptions,
}

/// What a [`Call`] does.
pub(crate) enum What<S: GraphState> {
    /// Starts a new thread on this input.
    Start(S),
    /// Starts a new thread at this node, with this state.
    StartAt { node: String, state: S },
    /// Continues the paused thread the token names.
    Resume(Resume<S>),
    /// Continues this thread from its last checkpoint.
    Recover(ThreadId),
}

impl<S: GraphState> Call<S> {
    /// Starts a new thread on `input` and runs it until it finishes or pauses. The thread gets
    /// a random id unless [`on`](Self::on) names one.
    pub fn start(input: S) -> Self {
        Call { what: What::Start(input), thread: None, options: RunOptions::new() }
    }

    /// Continues the paused thread `resume` names, with its answers and update.
    pub fn resume(resume: Resume<S>) -> Self {
        Call { what: What::Resume(resume), thread: None, options: RunOptions::new() }
    }

    /// Continues `thread` from its last checkpoint after a run that stopped without pausing (a
    /// node failed or panicked, the process died). A paused thread gives back its pause (with a
    /// fresh token), a finished one its final state.
    pub fn recover(thread: impl Into<ThreadId>) -> Self {
        Call { what: What::Recover(thread.into()), thread: None, options: RunOptions::new() }
    }

    /// Starts a new thread at `node`, with `state` as the state: `node` runs first (its
    /// `interrupt_before` breakpoint does not stop it), then the run goes on as usual. This is
    /// how a front end continues from a checkpoint file
    /// ([`decode_checkpoint`](crate::decode_checkpoint)) in a new thread.
    pub fn start_at(node: impl Into<String>, state: S) -> Self {
        Call { what: What::StartAt { node: node.into(), state }, thread: None, options: RunOptions::new() }
    }

    /// Runs on thread `thread`. A new thread must not have checkpoints yet
    /// ([`Error::ThreadExists`](crate::Error::ThreadExists)); a resume naming another thread
    /// than its token's is refused ([`Error::InvalidToken`](crate::Error::InvalidToken)).
    #[must_use]
    pub fn on(mut self, thread: impl Into<ThreadId>) -> Self {
        match &mut self.what {
            What::Recover(recovered) => *recovered = thread.into(),
            _ => self.thread = Some(thread.into()),
        }
        self
    }

    /// Runs with `options` in force over the app's (they replace those set before).
    #[must_use]
    pub fn options(mut self, options: impl Into<RunOptions>) -> Self {
        self.options = options.into();
        self
    }

    /// Writes this run's checkpoints as `durability` says ([`RunOptions::durability`]).
    #[must_use]
    pub fn durability(mut self, durability: Durability) -> Self {
        self.options = self.options.durability(durability);
        self
    }

    /// Which events a stream of this run yields ([`RunOptions::stream_modes`]).
    #[must_use]
    pub fn stream_modes(mut self, modes: StreamModes) -> Self {
        self.options = self.options.stream_modes(modes);
        self
    }

    /// Gives this run's nodes `context` ([`RunOptions::context`]).
    #[must_use]
    pub fn context<T: std::any::Any + Send + Sync>(mut self, context: T) -> Self {
        self.options = self.options.context(context);
        self
    }

    /// Stops this run after `limit` steps ([`RunOptions::recursion_limit`]).
    #[must_use]
    pub fn recursion_limit(mut self, limit: usize) -> Self {
        self.options = self.options.recursion_limit(limit);
        self
    }

    /// The thread this call names, if it names one (a resume's is its token's).
    pub fn thread(&self) -> Option<&ThreadId> {
        match &self.what {
            What::Resume(resume) if self.thread.is_none() => Some(resume.thread()),
            What::Recover(thread) => Some(thread),
            _ => self.thread.as_ref(),
        }
    }

    /// The options in force for this call.
    pub fn run_options(&self) -> &RunOptions {
        &self.options
    }

    /// What this call does, as a word: `start`, `start_at`, `resume` or `recover`.
    pub fn kind(&self) -> &'static str {
        match self.what {
            What::Start(_) => "start",
            What::StartAt { .. } => "start_at",
            What::Resume(_) => "resume",
            What::Recover(_) => "recover",
        }
    }
}

impl<S: GraphState> fmt::Debug for Call<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Call")
            .field("kind", &self.kind())
            .field("thread", &self.thread())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}
