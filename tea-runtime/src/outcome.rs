//! What a run with a checkpointer returns, and what a thread's checkpoints show.

use crate::name::NodeName;
use crate::resume::{Interrupt, Resume};
use crate::state::GraphState;
use crate::store::CheckpointId;
use std::fmt;

/// How a run with a checkpointer ended: finished, or paused with a token to continue it.
///
/// (A graph that can pause returns this from `invoke`; a graph that cannot, built without a
/// checkpointer, returns the final state directly.)
pub enum Outcome<S: GraphState> {
    /// The run reached `end`.
    Done(S),
    /// The run paused.
    Interrupted {
        /// The state at the pause.
        state: S,
        /// The token that continues the thread.
        resume: Resume<S>,
    },
}

impl<S: GraphState> Outcome<S> {
    /// The final state, if the run finished.
    pub fn done(self) -> Option<S> {
        match self {
            Outcome::Done(state) => Some(state),
            Outcome::Interrupted { .. } => None,
        }
    }

    /// The state and token, if the run paused.
    pub fn interrupted(self) -> Option<(S, Resume<S>)> {
        match self {
            Outcome::Done(_) => None,
            Outcome::Interrupted { state, resume } => Some((state, resume)),
        }
    }

    /// True if the run finished.
    pub fn is_done(&self) -> bool {
        matches!(self, Outcome::Done(_))
    }

    /// The state, finished or paused.
    pub fn state(&self) -> &S {
        match self {
            Outcome::Done(state) | Outcome::Interrupted { state, .. } => state,
        }
    }
}

impl<S: GraphState + fmt::Debug> fmt::Debug for Outcome<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Done(state) => f.debug_tuple("Done").field(state).finish(),
            Outcome::Interrupted { state, resume } => {
                f.debug_struct("Interrupted").field("state", state).field("resume", resume).finish()
            }
        }
    }
}

/// A thread as one of its checkpoints shows it (`app.state(…)`, `app.history(…)`).
#[derive(Clone)]
pub struct Snapshot<S> {
    /// The state at the checkpoint.
    pub state: S,
    /// The nodes that run next (on resume, for a paused thread); empty for a finished one.
    pub next: Vec<NodeName>,
    /// The pauses the thread waits on; empty unless it is paused.
    pub interrupts: Vec<Interrupt>,
    /// The checkpoint's id in the thread's history.
    pub checkpoint: CheckpointId,
    /// Node runs up to the checkpoint.
    pub step: u64,
}

impl<S: fmt::Debug> fmt::Debug for Snapshot<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Snapshot")
            .field("state", &self.state)
            .field("next", &self.next)
            .field("interrupts", &self.interrupts)
            .field("checkpoint", &self.checkpoint)
            .field("step", &self.step)
            .finish()
    }
}

/// When a run with a checkpointer writes checkpoints.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// After every node (the default): `app.recover(thread)` continues a run that crashed or
    /// failed without running again the nodes that completed.
    #[default]
    EveryStep,
    /// Only when the run starts, pauses and finishes: faster, but a crashed run restarts from
    /// its last pause.
    OnPause,
}
