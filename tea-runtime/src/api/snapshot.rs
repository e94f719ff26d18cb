//! What a thread's checkpoints show ([`Snapshot`]: the state, the nodes that run next, the
//! pauses, the subgraph nodes paused inside their child), and checkpoint files a front end
//! writes and reads back ([`encode_checkpoint`], [`decode_checkpoint`], [`checkpoint_holds_pause`]):
//! with a new thread started at the file's node, they are how a front end saves a run and
//! continues it elsewhere.

use crate::api::app::App;
use crate::format::checkpoint::{self, BranchAt, BranchProgress, Checkpoint, Position, Target};
use crate::format::interrupt::Interrupt;
use crate::format::memo::MEMO;
use crate::machine::fork::branch_state;
use crate::machine::validate::{decode_for, identity};
use crate::model::graph::Graph;
use crate::model::node::Goto;
use crate::model::outcome::{BranchSnapshot, Snapshot, SubgraphSnapshot};
use crate::store::Checkpointer;
use crate::vocab::error::{drop_payload, Error};
use crate::vocab::name::{CheckpointId, NodeName, ThreadId};
use crate::vocab::state::GraphState;
use serde_json::Value;
use std::panic::{catch_unwind, AssertUnwindSafe};

impl<G: Graph, C: Checkpointer> App<G, C> {
    pub(crate) fn snapshot(
        &self,
        thread: &ThreadId,
        id: CheckpointId,
        bytes: &[u8],
    ) -> Result<Snapshot<G::State>, Error> {
        let ckpt: Checkpoint<G::State> = decode_for(&*self.graph, bytes, thread, id)?;
        let graph = &*self.graph;
        let branches = match &ckpt.at {
            Position::Fork { branches, .. } => branch_snapshots(graph, &ckpt.state, branches)?,
            _ => Vec::new(),
        };
        let next = match &ckpt.at {
            Position::Fork { source, branches: saved } if !saved.is_empty() => {
                fn all<S>(branches: &[BranchSnapshot<S>], into: &mut Vec<NodeName>) {
                    for branch in branches {
                        into.extend(branch.next.iter().cloned());
                        all(&branch.branches, into);
                    }
                }
                let mut next = Vec::new();
                all(&branches, &mut next);
                if next.is_empty() {
                    // Every branch reached the join, which runs next.
                    next.extend(join_of(graph, source));
                }
                next
            }
            _ => next_nodes(graph, &ckpt),
        };
        let subgraphs = paused_children(&ckpt);
        Ok(Snapshot {
            state: ckpt.state,
            next,
            interrupts: ckpt.pending,
            checkpoint: id,
            step: ckpt.step,
            subgraphs,
            branches,
            joined: ckpt.joined,
            written_at: ckpt.written_at.map(|ms| std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms)),
        })
    }
}

/// A checkpoint of `graph` standing before `node` with `state`, in the envelope format of the
/// stores (magic, version, graph name, fingerprints, checksum): what a front end writes as a
/// checkpoint file (a YAML agent's `checkpoint.save`). [`decode_checkpoint`] reads it back.
///
/// # Errors
/// [`Error::Store`] when the state does not serialize or is over the size limit.
pub fn encode_checkpoint<G: Graph>(graph: &G, node: &NodeName, state: &G::State) -> Result<Vec<u8>, Error> {
    let ckpt = Checkpoint {
        step: 0,
        state: state.clone(),
        at: Position::Before(node.clone()),
        pending: Vec::new(),
        pause: None,
        paused_at: None,
        nonce: None,
        resumed: false,
        answers: Vec::new(),
        joined: Vec::new(),
        lease: None,
        parent: None,
        written_at: Some(crate::vocab::clock::Clock::system().now_ms()),
    };
    checkpoint::encode(&identity(graph), &ckpt)
}

/// Reads a checkpoint of `graph` (a file written by [`encode_checkpoint`], or a checkpoint a
/// store wrote): the node it stands at and its state. A checkpoint after a node (an
/// `interrupt_after` pause) names that node. `source` names where the bytes came from in
/// errors (a path).
///
/// # Errors
/// [`Error::CorruptCheckpoint`] for bytes that are not a checkpoint or one that stands at no
/// node (before the start, at the end, inside a fan-out), [`Error::GraphMismatch`] for another
/// graph's, [`Error::SchemaMismatch`] for another shape of this graph's.
pub fn decode_checkpoint<G: Graph>(graph: &G, bytes: &[u8], source: &str) -> Result<(NodeName, G::State), Error> {
    let label = ThreadId::from(source.to_owned());
    let ckpt: Checkpoint<G::State> = decode_for(graph, bytes, &label, 0)?;
    let node = match ckpt.at {
        Position::Before(node) | Position::After { node, .. } => node,
        Position::Start | Position::Done | Position::Fork { .. } => {
            return Err(Error::CorruptCheckpoint {
                thread: label,
                checkpoint: 0,
                reason: "it does not stand at a node (it is before the start, at the end or inside a fan-out)"
                    .to_owned(),
            })
        }
    };
    if graph.node_named(node.as_str()).is_none() {
        return Err(Error::CorruptCheckpoint {
            thread: label,
            checkpoint: 0,
            reason: format!("it names node `{node}`, which graph `{}` does not have", graph.name()),
        });
    }
    Ok((node, ckpt.state))
}

/// A checkpoint read without the graph that wrote it ([`read_foreign_checkpoint`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ForeignCheckpoint {
    /// The name of the graph that wrote it.
    pub graph: String,
    /// The node it stands at (before it, or after it for an `interrupt_after` pause); `None`
    /// before the start, at the end or inside a fan-out.
    pub node: Option<NodeName>,
    /// Its state, as JSON.
    pub state: Value,
}

/// Reads a checkpoint of any graph (a file written by [`encode_checkpoint`], or a checkpoint a
/// store wrote) without checking whose it is: what a front end needs to show another graph's
/// checkpoint or take its state (tea-yaml's `checkpoint.load` of a file another agent saved).
/// `source` names where the bytes came from in errors.
///
/// # Errors
/// [`Error::CorruptCheckpoint`] for bytes that are not a checkpoint.
pub fn read_foreign_checkpoint(bytes: &[u8], source: &str) -> Result<ForeignCheckpoint, Error> {
    let label = ThreadId::from(source.to_owned());
    let (graph, payload) = checkpoint::decode_raw(bytes, &label, 0)?;
    let at = payload.get("at");
    let node = at
        .and_then(|at| at.get("before").or_else(|| at.get("after").and_then(|a| a.get("node"))))
        .and_then(Value::as_str)
        .map(|n| NodeName::from(n.to_owned()));
    let state = payload.get("state").cloned().unwrap_or(Value::Null);
    Ok(ForeignCheckpoint { graph, node, state })
}

/// Whether `bytes` are a checkpoint that holds a pause (pending interrupts, a pause, its nonce),
/// as a store writes at a pause, where a file written by [`encode_checkpoint`] holds none: how a
/// front end tells a pause's file (which resumes its thread once) from a saved state. Bytes that
/// are not a readable checkpoint (a sealed one included) hold none.
pub fn checkpoint_holds_pause(bytes: &[u8]) -> bool {
    let Ok((_, Value::Object(payload))) = checkpoint::decode_raw(bytes, &ThreadId::from(String::new()), 0) else {
        return false;
    };
    payload.get("pending").and_then(Value::as_array).is_some_and(|p| !p.is_empty())
        || payload.get("pause").is_some_and(|p| !p.is_null())
        || payload.get("nonce").is_some_and(|n| !n.is_null())
}

/// What the branches of a fan-out under way show, their states built from the fan-out's
/// (`base`).
fn branch_snapshots<G: Graph>(
    graph: &G,
    base: &G::State,
    branches: &[BranchProgress<G::State>],
) -> Result<Vec<BranchSnapshot<G::State>>, Error> {
    branches
        .iter()
        .map(|progress| {
            let state = branch_state(graph, base, progress)?;
            let nested = branch_snapshots(graph, &state, &progress.branches)?;
            let next = match &progress.at {
                // Every branch of the nested fan-out reached its join, which runs next.
                BranchAt::Fork { source } if nested.iter().all(|b| b.done) => join_of(graph, source),
                BranchAt::Joined | BranchAt::Fork { .. } => Vec::new(),
                BranchAt::Before(node) | BranchAt::Start(node) => vec![node.clone()],
                BranchAt::After { node, goto } => route(graph, node, goto, &state),
            };
            Ok(BranchSnapshot {
                head: progress.head.clone(),
                done: matches!(progress.at, BranchAt::Joined),
                steps: progress.steps,
                next,
                branches: nested,
                state,
            })
        })
        .collect()
}

/// The join of the fan-out after `source`, by name (none for a node without one).
fn join_of<G: Graph>(graph: &G, source: &NodeName) -> Vec<NodeName> {
    graph
        .node_named(source.as_str())
        .and_then(|node| graph.fork(node))
        .map(|fork| graph.node_name(fork.join))
        .into_iter()
        .collect()
}

/// Where routing from `node` (which ran, with a router's choice `goto`) leads on `state`.
fn route<G: Graph>(graph: &G, node: &NodeName, goto: &Option<Target>, state: &G::State) -> Vec<NodeName> {
    match goto {
        Some(Target::Node(next)) => return vec![next.clone()],
        Some(Target::End) => return Vec::new(),
        None => {}
    }
    let Some(node) = graph.node_named(node.as_str()) else { return Vec::new() };
    if let Some(fork) = graph.fork(node) {
        return fork.heads.iter().map(|&h| graph.node_name(h)).collect();
    }
    match catch_unwind(AssertUnwindSafe(|| graph.route(node, state))) {
        Ok(Some(Goto::Node(next))) => vec![graph.node_name(next)],
        Ok(_) => Vec::new(),
        Err(payload) => {
            drop_payload(payload);
            Vec::new()
        }
    }
}

/// The nodes that run next from a checkpoint (by the graph's routing on its state, for a node
/// that ran and has not been routed from).
fn next_nodes<G: Graph>(graph: &G, ckpt: &Checkpoint<G::State>) -> Vec<NodeName> {
    let route = |node: &NodeName, goto: &Option<Target>, state: &G::State| route(graph, node, goto, state);
    match &ckpt.at {
        Position::Start => match catch_unwind(AssertUnwindSafe(|| graph.start(&ckpt.state))) {
            Ok(Some(Goto::Node(next))) => vec![graph.node_name(next)],
            Ok(_) => Vec::new(),
            Err(payload) => {
                drop_payload(payload);
                Vec::new()
            }
        },
        Position::Before(node) => vec![node.clone()],
        Position::After { node, goto } => route(node, goto, &ckpt.state),
        Position::Fork { source, branches } if branches.is_empty() => route(source, &None, &ckpt.state),
        // Handled with the branches' states (`branch_snapshots`).
        Position::Fork { .. } => Vec::new(),
        Position::Done => Vec::new(),
    }
}

/// The subgraph nodes a checkpoint waits on inside their child graph, from the memos they keep
/// among their answers (on the main line and in each stopped branch).
pub(crate) fn paused_children<S: GraphState>(ckpt: &Checkpoint<S>) -> Vec<SubgraphSnapshot> {
    let mut found = Vec::new();
    let mut read = |answers: &[Value], pending: Option<&Interrupt>, branch: Option<&NodeName>| {
        let (Some(memo), Some(pause)) = (answers.first().and_then(|v| v.get(MEMO)), pending) else { return };
        if pause.child.is_none() {
            return;
        }
        let text = |key: &str| memo.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
        found.push(SubgraphSnapshot {
            node: pause.node().clone(),
            branch: branch.cloned(),
            graph: text("graph"),
            thread: ThreadId::from(text("thread")),
            state: memo.get("state").cloned().unwrap_or(Value::Null),
        });
    };
    match &ckpt.at {
        Position::Fork { branches, .. } => {
            for branch in branches {
                read(&branch.answers, branch.pending.as_deref(), Some(&branch.head));
            }
        }
        _ => read(&ckpt.answers, ckpt.pending.first(), None),
    }
    found
}
