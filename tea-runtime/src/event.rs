//! The events a streamed run yields.

use crate::name::NodeName;
use std::fmt;

/// One event of a streamed run (`app.stream(input)`).
pub enum Event<S> {
    /// A node ran and its update was applied.
    Step {
        /// The node that ran.
        node: NodeName,
        /// Inside a parallel branch, the head of that branch; `None` on the main line.
        branch: Option<NodeName>,
        /// The state after the node's update (the branch's own state inside a branch).
        state: S,
    },
    /// The run reached `end`; this is the final state.
    Done(S),
}

impl<S: fmt::Debug> fmt::Debug for Event<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Step { node, branch, state } => {
                f.debug_struct("Step").field("node", node).field("branch", branch).field("state", state).finish()
            }
            Event::Done(state) => f.debug_tuple("Done").field(state).finish(),
        }
    }
}

impl<S: Clone> Clone for Event<S> {
    fn clone(&self) -> Self {
        match self {
            Event::Step { node, branch, state } => {
                Event::Step { node: node.clone(), branch: branch.clone(), state: state.clone() }
            }
            Event::Done(state) => Event::Done(state.clone()),
        }
    }
}
