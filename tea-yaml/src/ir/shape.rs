//! The graph as tea-check reads it ([`shape`]): what the loader's graph checks run on
//! (`load/routing.rs`) and what the drawings are made from (`draw.rs`) — one conversion, so
//! that what is checked is what is drawn.

use super::{Cond, NodeDef, NodeIx, Rule};
use tea_runtime::Goto;

/// The shape of an agent's nodes and rules, as `tea_check` reads it: a condition is a guard
/// written as its source (`not (…)` when it must not hold), a fan-out node is its fan-out, and
/// `jumps` (from, to) are the ways into a node besides routing (a `retry.loop` node runs its
/// correction node; a YAML child graph cannot route its parent, no `Command::parent`).
pub(crate) fn shape(nodes: &[NodeDef], start: &[Rule], jumps: &[(usize, usize)]) -> tea_check::Graph {
    let edges = |rules: &[Rule]| -> Vec<tea_check::Edge> {
        rules
            .iter()
            .map(|r| match &r.cond {
                Cond::Always | Cond::Const(true) => tea_check::Edge::to(target(&r.to)),
                Cond::Const(false) => tea_check::Edge::guarded(target(&r.to), "false"),
                Cond::Expr { source, expect: true, .. } => tea_check::Edge::guarded(target(&r.to), source.to_string()),
                Cond::Expr { source, expect: false, .. } => {
                    tea_check::Edge::guarded(target(&r.to), format!("not ({source})"))
                }
            })
            .collect()
    };
    tea_check::Graph {
        nodes: nodes
            .iter()
            .enumerate()
            .map(|(i, node)| tea_check::Node {
                name: node.name.as_str().to_owned(),
                routing: match &node.fork {
                    Some((heads, join)) => tea_check::Routing::Fork {
                        heads: heads.iter().map(|h| h.index()).collect(),
                        join: join.index(),
                    },
                    None => tea_check::Routing::Edges(edges(&node.rules)),
                },
                can_pause: node.interrupt_before || node.interrupt_after || node.exec.can_pause(),
                jumps: jumps.iter().filter(|(from, _)| *from == i).map(|(_, to)| *to).collect(),
            })
            .collect(),
        start: edges(start),
    }
}

/// Where a rule leads, as tea-check names it.
pub(crate) fn target(goto: &Goto<NodeIx>) -> tea_check::Target {
    match goto {
        Goto::Node(n) => tea_check::Target::Node(n.index()),
        Goto::End => tea_check::Target::End,
    }
}
