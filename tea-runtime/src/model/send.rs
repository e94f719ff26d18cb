//! Fan-outs by sends: `parallel plan => worker* -> join;`.
//!
//! The source node returns `Command::send([SendTo::new(Node::Worker, input), …])`. Each send
//! becomes one branch of the node's fan-out, run by `machine::fork` like any branch:
//! it starts at the target on the state at the fan-out with the send's input applied (for that
//! branch only), follows the target's edges to the join, and its updates merge there through
//! the reducers in send order. Branch `i` is named `{target}#{i}` (in events, pause ids and
//! `ConflictingWrites`).
//!
//! The branches are made — and, with a store, checkpointed — as soon as the source node has
//! run, before any of them starts (`BranchAt::Start`): a recover after a crash runs each send
//! once, from there; a resume after a pause in some sends continues only those, and the sends
//! that finished keep their results.

use crate::model::id::NodeId;
use crate::vocab::state::GraphState;
use std::fmt;

/// One run of a node with its own input, sent by a node that fans out to a node many times
/// (`parallel plan => worker* -> join;`): see [`Command::send`](crate::Command::send).
///
/// LangGraph calls it `Send`; here that name would hide the `Send` marker trait under
/// `use tea::*`, so it is `SendTo` (in the prelude).
pub struct SendTo<N: NodeId> {
    node: N,
    input: <N::State as GraphState>::Update,
}

impl<N: NodeId> SendTo<N> {
    /// Run `node` on the state at the fan-out with `input` applied (for this run only: the
    /// input is not merged into the main state, the node's own update is).
    pub fn new(node: N, input: <N::State as GraphState>::Update) -> Self {
        SendTo { node, input }
    }

    /// The node this send runs.
    pub fn node(&self) -> N {
        self.node
    }

    pub(crate) fn into_parts(self) -> (N, <N::State as GraphState>::Update) {
        (self.node, self.input)
    }

    /// The input this send runs with.
    pub fn input(&self) -> &<N::State as GraphState>::Update {
        &self.input
    }
}

impl<N: NodeId> Clone for SendTo<N> {
    fn clone(&self) -> Self {
        SendTo { node: self.node, input: self.input.clone() }
    }
}

impl<N: NodeId> fmt::Debug for SendTo<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SendTo").field("node", &self.node).field("input", &self.input).finish()
    }
}
