//! The events a streamed run yields.

use crate::format::token::Resume;
use crate::vocab::name::NodeName;
use crate::vocab::state::GraphState;
use std::fmt;
use std::time::Duration;

/// One event of a streamed run (`app.stream(input)`).
pub enum Event<S: GraphState> {
    /// A node ran and its update was applied.
    Step {
        /// The node that ran. Inside a subgraph node's child graph, its path: `review/check`
        /// (the subgraph node, then the child's node; `outer/inner/check` two levels deep).
        node: NodeName,
        /// Inside a parallel branch, the head of that branch (with its path inside a child
        /// graph: `review/web`); `None` on the main line.
        branch: Option<NodeName>,
        /// The state after the node's update (the branch's own state inside a branch; inside a
        /// child graph over the parent's state, the child's state; inside a child graph over a
        /// state of its own, the parent's state before the subgraph node).
        state: S,
        /// How long the node took: its function and the application of its update (not the
        /// checkpoint written after it).
        duration: Duration,
    },
    /// The run paused (only with a checkpointer): the state and the token that continues it.
    Interrupted {
        /// The state at the pause.
        state: S,
        /// The token that continues the thread.
        resume: Resume<S>,
    },
    /// The run reached `end`; this is the final state.
    Done(S),
}

impl<S: GraphState + fmt::Debug> fmt::Debug for Event<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Step { node, branch, state, duration } => f
                .debug_struct("Step")
                .field("node", node)
                .field("branch", branch)
                .field("state", state)
                .field("duration", duration)
                .finish(),
            Event::Interrupted { state, resume } => {
                f.debug_struct("Interrupted").field("state", state).field("resume", resume).finish()
            }
            Event::Done(state) => f.debug_tuple("Done").field(state).finish(),
        }
    }
}

impl<S: GraphState> Clone for Event<S> {
    fn clone(&self) -> Self {
        match self {
            Event::Step { node, branch, state, duration } => {
                Event::Step { node: node.clone(), branch: branch.clone(), state: state.clone(), duration: *duration }
            }
            Event::Interrupted { state, resume } => Event::Interrupted { state: state.clone(), resume: resume.clone() },
            Event::Done(state) => Event::Done(state.clone()),
        }
    }
}
