//! Reading a checkpoint back: its envelope is checked by `format::checkpoint::decode`, then what
//! it records is checked against the graph (`validate`), so a run never starts from a position
//! the graph cannot be in. Every read of a checkpoint goes through [`decode_for`].

use crate::format::checkpoint::{self, BranchAt, BranchProgress, Checkpoint, Identity, Position, Target};
use crate::model::graph::Graph;
use crate::vocab::error::Error;
use crate::vocab::name::{CheckpointId, NodeName, ThreadId};

/// The largest step count a checkpoint may record: far more node runs than any thread makes,
/// and far from overflowing the arithmetic on it.
pub(crate) const MAX_STEP: u64 = 1 << 48;

/// Decodes checkpoint `id` of `thread` for `graph`, then checks that what it records is
/// possible for this graph (`validate`): every read of a checkpoint goes through here.
pub(crate) fn decode_for<G: Graph>(
    graph: &G,
    bytes: &[u8],
    thread: &ThreadId,
    id: CheckpointId,
) -> Result<Checkpoint<G::State>, Error> {
    let ckpt = checkpoint::decode(bytes, &identity(graph), thread, id)?;
    validate(graph, &ckpt).map_err(|reason| Error::CorruptCheckpoint {
        thread: thread.clone(),
        checkpoint: id,
        reason,
    })?;
    Ok(ckpt)
}

/// The node of `graph` a checkpoint names as `name`, or why the checkpoint is wrong.
fn known<G: Graph>(graph: &G, name: &NodeName) -> Result<G::Node, String> {
    graph
        .node_named(name.as_str())
        .ok_or_else(|| format!("it names node `{name}`, which graph `{}` does not have", graph.name()))
}

/// Whether the node a checkpoint's `goto` names (if any) is one of `graph`'s.
fn target<G: Graph>(graph: &G, goto: &Option<Target>) -> Result<(), String> {
    match goto {
        Some(Target::Node(name)) => known(graph, name).map(|_| ()),
        _ => Ok(()),
    }
}

/// What a checkpoint with a valid envelope may still get wrong: an impossible step count, a
/// node the graph lacks, a fan-out where the graph has none or with other branches, a finished
/// run with pending pauses, a pause record without pauses.
fn validate<G: Graph>(graph: &G, ckpt: &Checkpoint<G::State>) -> Result<(), String> {
    if ckpt.step > MAX_STEP {
        return Err(format!("its step count {} is impossible", ckpt.step));
    }
    match &ckpt.at {
        Position::Start | Position::Done => {}
        Position::Before(node) => {
            known(graph, node)?;
        }
        Position::After { node, goto } => {
            known(graph, node)?;
            target(graph, goto)?;
        }
        Position::Fork { source, branches } => fan_out(graph, source, branches, true)?,
    }
    if matches!(ckpt.at, Position::Done) && !ckpt.pending.is_empty() {
        return Err("it records a finished run that still waits on pauses".into());
    }
    if ckpt.pending.is_empty() != ckpt.pause.is_none() {
        return Err("its pause record and its pending pauses disagree".into());
    }
    for pending in &ckpt.pending {
        known(graph, pending.node())?;
    }
    for branch in &ckpt.joined {
        // A send's branch is named `{target}#{i}`.
        let head = branch.head().as_str();
        let node = match head.rsplit_once('#') {
            Some((target, i)) if !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()) => target,
            _ => head,
        };
        known(graph, &NodeName::from(node.to_owned()))?;
    }
    Ok(())
}

/// Checks a fan-out's progress: the fan-out after `source` exists, its branches are the
/// graph's (or its sends'), and each is at a node the graph has; a fan-out inside a branch
/// (`top`: false) has no sends and no pauses.
fn fan_out<G: Graph>(
    graph: &G,
    source: &NodeName,
    branches: &[BranchProgress<G::State>],
    top: bool,
) -> Result<(), String> {
    let source_node = known(graph, source)?;
    let Some(fork) = graph.fork(source_node) else {
        return Err(format!("it records a fan-out after node `{source}`, which has none"));
    };
    let sends = graph.sends(source_node);
    if sends && !top {
        return Err(format!("it records sends of node `{source}` inside a parallel branch"));
    }
    if sends {
        crate::machine::send::validate(graph, fork, branches)?;
    } else if !branches.is_empty() && branches.len() != fork.heads.len() {
        return Err(format!(
            "it records {} branches after node `{source}`, whose fan-out has {}",
            branches.len(),
            fork.heads.len()
        ));
    }
    for (i, branch) in branches.iter().enumerate() {
        if let (false, Some(&head)) = (sends, fork.heads.get(i)) {
            if branch.head != graph.node_name(head) {
                return Err(format!(
                    "it records branch `{}` where the fan-out has `{}`",
                    branch.head,
                    graph.node_name(head)
                ));
            }
        }
        if branch.steps > MAX_STEP {
            return Err(format!("branch `{}` records an impossible step count {}", branch.head, branch.steps));
        }
        if !top && (branch.pending.is_some() || !branch.more_pending.is_empty()) {
            return Err(format!("branch `{}` records a pause inside a nested fan-out", branch.head));
        }
        match &branch.at {
            BranchAt::Joined => {}
            BranchAt::Before(node) | BranchAt::Start(node) => {
                known(graph, node)?;
            }
            BranchAt::After { node, goto } => {
                known(graph, node)?;
                target(graph, goto)?;
            }
            BranchAt::Fork { source } => fan_out(graph, source, &branch.branches, false)?,
        }
        if !branch.branches.is_empty() && !matches!(branch.at, BranchAt::Fork { .. }) {
            return Err(format!("branch `{}` records a nested fan-out's branches outside one", branch.head));
        }
        for pending in branch.pending.as_deref().into_iter().chain(&branch.more_pending) {
            known(graph, pending.node())?;
        }
    }
    Ok(())
}

/// The identity of `graph`'s checkpoints.
pub(crate) fn identity<G: Graph>(graph: &G) -> Identity<'_> {
    Identity {
        graph: graph.name(),
        graph_fingerprint: graph.fingerprint(),
        schema_fingerprint: graph.schema_fingerprint(),
    }
}
