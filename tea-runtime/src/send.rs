//! Fan-outs by sends: `parallel plan => worker* -> join;`.
//!
//! The source node returns `Command::send([Send::new(Node::Worker, input), …])`. Each send
//! becomes one branch of the node's fan-out, run by the `parallel` machinery like any branch:
//! it starts at the target on the state at the fan-out with the send's input applied (for that
//! branch only), follows the target's edges to the join, and its updates merge there through
//! the reducers in send order. Branch `i` is named `{target}#{i}` (in events, pause ids and
//! `ConflictingWrites`).
//!
//! The branches are made — and, with a store, checkpointed — as soon as the source node has
//! run, before any of them starts (`BranchAt::Start`): a recover after a crash runs each send
//! once, from there; a resume after a pause in some sends continues only those, and the sends
//! that finished keep their results.

use crate::checkpoint::{BranchAt, BranchProgress};
use crate::error::Error;
use crate::exec::apply_update;
use crate::graph::{Fork, Graph};
use crate::name::NodeName;
use crate::node::NodeId;
use crate::state::GraphState;
use std::fmt;

/// The branches of `source`'s fan-out for `sends`, and its join. Every send must go to the
/// fan-out's target; an input the state refuses is `source`'s failure.
#[allow(clippy::type_complexity)]
pub(crate) fn branches<G: Graph>(
    graph: &G,
    source: G::Node,
    sends: Vec<(G::Node, <G::State as GraphState>::Update)>,
    state: &G::State,
) -> Result<(Vec<BranchProgress<G::State>>, G::Node), Error> {
    let name = graph.node_name(source);
    let Some(fork) = graph.fork(source) else {
        return Err(Error::NoRoute { node: name, goto: None });
    };
    let Some(&target) = fork.heads.first() else {
        return Err(Error::NoRoute { node: name, goto: None });
    };
    let target_name = graph.node_name(target);
    let mut branches = Vec::with_capacity(sends.len());
    for (i, (node, input)) in sends.into_iter().enumerate() {
        if node != target {
            return Err(Error::NoRoute { node: name, goto: Some(graph.node_name(node)) });
        }
        let mut own = state.clone();
        apply_update(graph, &mut own, input, &name)?;
        branches.push(BranchProgress {
            head: NodeName::numbered(target_name.as_str(), i),
            state: own,
            updates: Vec::new(),
            origins: Vec::new(),
            steps: 0,
            at: BranchAt::Start(target_name.clone()),
            answers: Vec::new(),
            pending: None,
            more_pending: Vec::new(),
            resume: true,
        });
    }
    Ok((branches, fork.join))
}

/// What a checkpoint of a fan-out by sends must hold: branches named `{target}#{i}`, in order.
pub(crate) fn validate<G: Graph>(
    graph: &G,
    fork: Fork<'_, G::Node>,
    branches: &[BranchProgress<G::State>],
) -> Result<(), String> {
    let Some(&target) = fork.heads.first() else {
        return Err("it records sends to a fan-out without a target".into());
    };
    let target = graph.node_name(target);
    for (i, branch) in branches.iter().enumerate() {
        let expected = format!("{target}#{i}");
        if branch.head.as_str() != expected {
            return Err(format!("it records send `{}` where the fan-out's send {i} is `{expected}`", branch.head));
        }
    }
    Ok(())
}

/// One run of a node with its own input, sent by a node that fans out to a node many times
/// (`parallel plan => worker* -> join;`): see [`Command::send`](crate::Command::send).
///
/// Not in the prelude (its name would hide the `Send` marker trait): write `tea::Send`.
pub struct Send<N: NodeId> {
    node: N,
    input: <N::State as GraphState>::Update,
}

impl<N: NodeId> Send<N> {
    /// Run `node` on the state at the fan-out with `input` applied (for this run only: the
    /// input is not merged into the main state, the node's own update is).
    pub fn new(node: N, input: <N::State as GraphState>::Update) -> Self {
        Send { node, input }
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

impl<N: NodeId> Clone for Send<N> {
    fn clone(&self) -> Self {
        Send { node: self.node, input: self.input.clone() }
    }
}

impl<N: NodeId> fmt::Debug for Send<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Send").field("node", &self.node).field("input", &self.input).finish()
    }
}
