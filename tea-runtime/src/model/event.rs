//! The events a streamed run yields.

use crate::format::token::Resume;
use crate::vocab::name::NodeName;
use crate::vocab::state::GraphState;
use std::fmt;
use std::time::Duration;

/// One event of a streamed run (`app.stream(input)`).
///
/// Which of them a stream yields is chosen with
/// [`RunOptions::stream_modes`](crate::RunOptions::stream_modes) (`stream_with` and its kin);
/// by default [`Step`](Event::Step), [`Custom`](Event::Custom), [`Retry`](Event::Retry),
/// [`CacheHit`](Event::CacheHit), and [`Interrupted`](Event::Interrupted) or
/// [`Done`](Event::Done) at the end. More kinds may come: a `match` needs a `_` arm.
#[non_exhaustive]
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
    /// A value a node emitted while it ran ([`Ctx::emit`](crate::Ctx::emit)), before the
    /// node's own step (stream mode [`StreamModes::CUSTOM`](crate::StreamModes::CUSTOM), on by
    /// default).
    Custom {
        /// The node that emitted it (its path inside a child graph).
        node: NodeName,
        /// What it emitted.
        value: serde_json::Value,
    },
    /// A node ran: its update alone (stream mode
    /// [`StreamModes::UPDATES`](crate::StreamModes::UPDATES)), before its
    /// [`Event::Step`] if that mode is on too.
    Update {
        /// The node that ran.
        node: NodeName,
        /// Inside a parallel branch, the head of that branch; `None` on the main line.
        branch: Option<NodeName>,
        /// Its update (`None`: it wrote nothing).
        update: Option<S::Update>,
    },
    /// A node is about to run (stream mode [`StreamModes::DEBUG`](crate::StreamModes::DEBUG)):
    /// its step and the time; its [`Event::Step`] carries how long it took.
    Started {
        /// The node.
        node: NodeName,
        /// Inside a parallel branch, the head of that branch; `None` on the main line.
        branch: Option<NodeName>,
        /// Its step ([`Ctx::step`](crate::Ctx::step)).
        step: u64,
        /// When it started.
        at: std::time::SystemTime,
    },
    /// A run of a node failed and is tried again after `wait` (its
    /// [`RetryPolicy`](crate::RetryPolicy)); the node's step follows once a run succeeds.
    Retry {
        /// The node.
        node: NodeName,
        /// Inside a parallel branch, the head of that branch; `None` on the main line.
        branch: Option<NodeName>,
        /// The run that failed: 1 for the first.
        attempt: u32,
        /// Why it failed.
        error: String,
        /// How long the engine waits before the next run.
        wait: Duration,
    },
    /// A cached node's result was taken from its cache ([`CachePolicy`](crate::CachePolicy)):
    /// the node did not run. Its step follows.
    CacheHit {
        /// The node.
        node: NodeName,
        /// Inside a parallel branch, the head of that branch; `None` on the main line.
        branch: Option<NodeName>,
    },
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
            Event::Custom { node, value } => {
                f.debug_struct("Custom").field("node", node).field("value", value).finish()
            }
            Event::Update { node, branch, update } => {
                f.debug_struct("Update").field("node", node).field("branch", branch).field("update", update).finish()
            }
            Event::Started { node, branch, step, at } => f
                .debug_struct("Started")
                .field("node", node)
                .field("branch", branch)
                .field("step", step)
                .field("at", at)
                .finish(),
            Event::Retry { node, branch, attempt, error, wait } => f
                .debug_struct("Retry")
                .field("node", node)
                .field("branch", branch)
                .field("attempt", attempt)
                .field("error", error)
                .field("wait", wait)
                .finish(),
            Event::CacheHit { node, branch } => {
                f.debug_struct("CacheHit").field("node", node).field("branch", branch).finish()
            }
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
            Event::Custom { node, value } => Event::Custom { node: node.clone(), value: value.clone() },
            Event::Update { node, branch, update } => {
                Event::Update { node: node.clone(), branch: branch.clone(), update: update.clone() }
            }
            Event::Started { node, branch, step, at } => {
                Event::Started { node: node.clone(), branch: branch.clone(), step: *step, at: *at }
            }
            Event::Retry { node, branch, attempt, error, wait } => Event::Retry {
                node: node.clone(),
                branch: branch.clone(),
                attempt: *attempt,
                error: error.clone(),
                wait: *wait,
            },
            Event::CacheHit { node, branch } => Event::CacheHit { node: node.clone(), branch: branch.clone() },
        }
    }
}
