//! What a run with a checkpointer returns ([`Outcome`]: done, or paused with its token), and
//! what a thread's checkpoints show ([`Snapshot`], with a [`BranchSnapshot`] per branch of a
//! fan-out under way and a [`SubgraphSnapshot`] per subgraph node paused inside its child).

use crate::format::checkpoint::BranchState;
use crate::format::interrupt::Interrupt;
use crate::format::token::Resume;
use crate::vocab::name::CheckpointId;
use crate::vocab::name::{NodeName, ThreadId};
use crate::vocab::state::GraphState;
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
    /// The subgraph nodes paused inside their child graph at this checkpoint, with the child's
    /// state; empty unless the thread waits on a pause inside a child.
    pub subgraphs: Vec<SubgraphSnapshot>,
    /// At a fan-out under way (paused, or written while its branches ran), every branch and
    /// how far it got; empty elsewhere.
    pub branches: Vec<BranchSnapshot<S>>,
    /// Before a join that reads its branches, once they all reached it (at a pause before the
    /// join or inside it, or a run stopped there): each branch's own final state, in declared
    /// order, as the join will see it through [`Ctx::branches`](crate::Ctx::branches); empty
    /// elsewhere.
    pub joined: Vec<BranchState<S>>,
    /// When the checkpoint was written (`None` for a checkpoint written by an earlier version
    /// of tea, which did not record it).
    pub written_at: Option<std::time::SystemTime>,
}

/// A branch of a fan-out under way at a checkpoint, as [`Snapshot::branches`] lists it: what
/// the branch completed is kept, and runs no more on `recover` or `resume`.
#[derive(Clone, PartialEq)]
pub struct BranchSnapshot<S> {
    /// The branch's first node, which names it (`{node}#{i}` for a send).
    pub head: NodeName,
    /// The branch's own state: the state at the fan-out plus this branch's updates only.
    pub state: S,
    /// The nodes of the branch that completed.
    pub steps: u64,
    /// The branch reached its join.
    pub done: bool,
    /// The nodes the branch runs next (empty once done).
    pub next: Vec<NodeName>,
    /// At a fan-out inside the branch, its branches.
    pub branches: Vec<BranchSnapshot<S>>,
}

impl<S: fmt::Debug> fmt::Debug for BranchSnapshot<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BranchSnapshot")
            .field("head", &self.head)
            .field("state", &self.state)
            .field("steps", &self.steps)
            .field("done", &self.done)
            .field("next", &self.next)
            .field("branches", &self.branches)
            .finish()
    }
}

/// A subgraph node paused inside its child graph, as [`Snapshot::subgraphs`] lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct SubgraphSnapshot {
    /// The parent's subgraph node.
    pub node: NodeName,
    /// Inside a parallel branch of the parent, the branch's head.
    pub branch: Option<NodeName>,
    /// The child graph's name.
    pub graph: String,
    /// The child's thread in the parent's store (`{parent thread}/{node}@{step}`): read it with
    /// an app of the child graph on the same store for its full history.
    pub thread: ThreadId,
    /// The child's state when it paused, as JSON.
    pub state: serde_json::Value,
}

impl<S: fmt::Debug> fmt::Debug for Snapshot<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Snapshot")
            .field("state", &self.state)
            .field("next", &self.next)
            .field("interrupts", &self.interrupts)
            .field("checkpoint", &self.checkpoint)
            .field("step", &self.step)
            .field("subgraphs", &self.subgraphs)
            .field("branches", &self.branches)
            .field("joined", &self.joined)
            .field("written_at", &self.written_at)
            .finish()
    }
}
