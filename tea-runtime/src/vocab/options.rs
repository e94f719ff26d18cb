//! The options of a run that every layer may read: when checkpoints are written, and the
//! defaults of the builder's limits. Defined here, at the bottom, so that the executor and the
//! drivers never read them from the API layer above them: [`Durability`], [`RunOptions`] (a
//! call's own durability and context), [`RunContext`], the limits a run works within, and the
//! `DEFAULT_*` constants.

use crate::vocab::policy::StreamModes;
use std::time::Duration;

/// How many branches of one fan-out run at once by default: see
/// [`Builder::max_parallel_branches`](crate::Builder::max_parallel_branches).
pub const DEFAULT_MAX_PARALLEL_BRANCHES: usize = 128;

/// How long a running thread's lease lasts unless renewed: see [`Builder::lease`](crate::Builder::lease).
pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);

/// How much finished branch work a fan-out may hold unwritten by default: none, so that with
/// [`Durability::EveryStep`] no finished branch runs again after a crash. See
/// [`Builder::group_commit`](crate::Builder::group_commit).
pub const DEFAULT_GROUP_COMMIT: Duration = Duration::ZERO;

/// The default recursion limit: the number of node runs after which a run fails with
/// [`Error::RecursionLimit`](crate::Error::RecursionLimit).
pub const DEFAULT_RECURSION_LIMIT: usize = 10_000;

/// The limits a run works within ([`Builder::recursion_limit`](crate::Builder::recursion_limit),
/// [`Builder::max_parallel_branches`](crate::Builder::max_parallel_branches)): carried by the
/// run and by each node's `Ctx`, so that a subgraph node's child run honours its parent's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    /// The most node runs one invocation may take.
    pub(crate) recursion: usize,
    /// The most branches of one fan-out that run at once.
    pub(crate) max_branches: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { recursion: DEFAULT_RECURSION_LIMIT, max_branches: DEFAULT_MAX_PARALLEL_BRANCHES }
    }
}

/// When a run with a checkpointer writes checkpoints, and which writes are flushed (made to
/// survive a crash of the process) before the run goes on.
///
/// In every mode, a pause is flushed before its token exists, and a finished run's final
/// checkpoint is flushed before `invoke`/`resume`/`recover` returns: what a call reported
/// survives a crash, and a token whose resume returned can never be resumed again. The modes
/// differ in what a crash *during* a run loses:
///
/// | mode | written | flushed | after a crash, `recover` continues from |
/// |---|---|---|---|
/// | `EveryStep` (default) | after every node | every write | the last node that completed |
/// | `Buffered` | after every node | pauses and the end | the last write the store had flushed on its own (at worst the start or the last pause) |
/// | `OnPause` | at the start, pauses and the end | pauses and the end | the start of the run or its last pause |
///
/// Inside a fan-out, each branch's progress is written as its nodes complete (pending writes),
/// so "after every node" holds for branches too. An app built with a
/// [`Builder::group_commit`](crate::Builder::group_commit) window leaves the branches that
/// finish within it to the checkpoint that ends the fan-out: a crash then runs again at most
/// that much finished branch work per fan-out.
///
/// After a failed run (a node error or panic; the process still there), `recover` continues
/// from the run's last checkpoint: with `EveryStep` and `Buffered` the node that failed.
///
/// Two writes with no user code between them are one: a node's step followed at once by a
/// pause (a breakpoint, an interrupt node) is written by that pause, and an interrupt node's
/// answer by the resume's claim of the thread ([`Graph::asks_only`](crate::Graph::asks_only)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// A checkpoint after every node, flushed before the next node starts:
    /// `app.run(Call::recover(thread))` continues a run that crashed without running again the
    /// nodes that completed. One flush per node on a disk store.
    #[default]
    EveryStep,
    /// A checkpoint after every node, flushed only at pauses and at the end (LangGraph's
    /// "async" durability): as cheap as `OnPause` in flushes, as precise as `EveryStep` after
    /// a failure, but a crash may lose the last nodes' checkpoints.
    Buffered,
    /// Checkpoints only when the run starts, pauses and finishes: the fewest writes; a crashed
    /// or failed run restarts from its start or its last pause.
    OnPause,
}

/// How one run goes, over the app's own settings for that run only: its
/// [`durability`](Self::durability), which events its stream yields
/// ([`stream_modes`](Self::stream_modes)), its [`context`](Self::context) and its
/// [`recursion_limit`](Self::recursion_limit). A [`Call`](crate::Call) carries them (its setters
/// set them one by one); a [`Durability`] converts into the options that set only it. A field
/// left `None` keeps the app's setting.
///
/// ```
/// # use tea::prelude::*;
/// # use tea::{Call, Durability, RunOptions};
/// # #[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
/// # struct Doc { text: String }
/// # fn draft(_: &Doc) -> DocUpdate { Doc::update().text("draft".into()) }
/// # graph! { Write for Doc { start -> draft; draft -> end; } }
/// let app = Write::builder().checkpointer(MemoryStore::new()).build(); // EveryStep by default
/// // A cheap, throw-away run: checkpoints only at its start, pauses and end.
/// let cheap = RunOptions::new().durability(Durability::OnPause);
/// let done = app.run(Call::start(Doc::default()).options(cheap))?;
/// assert_eq!(done.done().unwrap().text, "draft");
/// // The same, shorter.
/// let done = app.run(Call::start(Doc::default()).durability(Durability::OnPause))?;
/// # Ok::<(), tea::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct RunOptions {
    /// When this run's checkpoints are written (`None`: the app's
    /// [`Builder::durability`](crate::Builder::durability)). A subgraph node's child run takes
    /// its parent run's.
    pub durability: Option<Durability>,
    /// Which events a stream of this run yields (`None`: [`StreamModes::default`]).
    pub stream_modes: Option<StreamModes>,
    /// The value this run's nodes read with [`Ctx::context`](crate::Ctx::context) (`None`: the
    /// app's, [`App::with_context`](crate::App::with_context)). Never checkpointed: give it again
    /// to the call that resumes or recovers the thread.
    pub context: Option<RunContext>,
    /// How many steps this run may take (`None`: the app's
    /// [`Builder::recursion_limit`](crate::Builder::recursion_limit)).
    pub recursion_limit: Option<usize>,
}

impl RunOptions {
    /// The app's own options.
    pub const fn new() -> Self {
        RunOptions { durability: None, stream_modes: None, context: None, recursion_limit: None }
    }

    /// This run writes its checkpoints as `durability` says.
    #[must_use]
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = Some(durability);
        self
    }

    /// Which events a stream of this run yields.
    #[must_use]
    pub fn stream_modes(mut self, modes: StreamModes) -> Self {
        self.stream_modes = Some(modes);
        self
    }

    /// This run's nodes read `context` with [`Ctx::context`](crate::Ctx::context).
    #[must_use]
    pub fn context<T: std::any::Any + Send + Sync>(self, context: T) -> Self {
        self.with_context(RunContext::new(context))
    }

    /// [`context`](Self::context) with a context value made already (a front end's).
    #[must_use]
    pub fn with_context(mut self, context: RunContext) -> Self {
        self.context = Some(context);
        self
    }

    /// This run stops with [`Error::RecursionLimit`](crate::Error::RecursionLimit) after
    /// `limit` steps.
    #[must_use]
    pub fn recursion_limit(mut self, limit: usize) -> Self {
        self.recursion_limit = Some(limit);
        self
    }

    /// Whether every setting is the app's own.
    pub fn is_default(&self) -> bool {
        self.durability.is_none()
            && self.stream_modes.is_none()
            && self.context.is_none()
            && self.recursion_limit.is_none()
    }
}

impl From<Durability> for RunOptions {
    fn from(durability: Durability) -> Self {
        RunOptions::new().durability(durability)
    }
}

/// A run's context value ([`App::with_context`](crate::App::with_context)), shared by every
/// node of the run.
#[derive(Clone)]
pub struct RunContext {
    value: std::sync::Arc<dyn std::any::Any + Send + Sync>,
    type_name: &'static str,
}

impl RunContext {
    /// `value` as a run's context.
    pub fn new<T: std::any::Any + Send + Sync>(value: T) -> Self {
        RunContext { value: std::sync::Arc::new(value), type_name: std::any::type_name::<T>() }
    }

    /// The value, if it is a `T`.
    pub fn get<T: std::any::Any>(&self) -> Option<&T> {
        self.value.downcast_ref()
    }

    /// Whether the value is of the type `type_id`.
    pub fn is(&self, type_id: std::any::TypeId) -> bool {
        (*self.value).type_id() == type_id
    }

    /// The name of the value's type.
    pub fn type_name(&self) -> &'static str {
        self.type_name
    }
}

impl std::fmt::Debug for RunContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunContext").field("type", &self.type_name).finish_non_exhaustive()
    }
}
