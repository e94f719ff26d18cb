//! Planning a fan-out by sends (`parallel plan => worker* -> join;`): the sends a node made
//! become the branches of its fan-out, checkpointed before any runs; a checkpoint's sends are
//! checked against the graph.

use crate::format::checkpoint::{BranchAt, BranchProgress};
use crate::machine::step::apply_update;
use crate::model::graph::{Fork, Graph};
use crate::vocab::error::Error;
use crate::vocab::name::NodeName;
use crate::vocab::state::GraphState;

/// The branches of `source`'s fan-out for `sends`, and its join. Every send must go to the
/// fan-out's target; an input the state refuses is `source`'s failure. `keep_input`: the
/// branches keep their input too (a run with a store writes it, not the branch's state).
#[allow(clippy::type_complexity)]
pub(crate) fn branches<G: Graph>(
    graph: &G,
    source: G::Node,
    sends: Vec<(G::Node, <G::State as GraphState>::Update)>,
    state: &G::State,
    keep_input: bool,
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
        let kept = keep_input.then(|| input.clone());
        apply_update(graph, &mut own, input, &name)?;
        let mut branch = BranchProgress::fresh(NodeName::numbered(target_name.as_str(), i));
        branch.at = BranchAt::Start(target_name.clone());
        // Checkpoints keep the input; the branch's state, built here to check the input, is
        // kept in memory for its first node.
        branch.state = Some(Box::new(own));
        branch.input = kept;
        branches.push(branch);
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
