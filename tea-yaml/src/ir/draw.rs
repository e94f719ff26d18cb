//! An agent's graph drawn as Mermaid and Graphviz DOT by `tea_check::draw`, the drawing code
//! `graph!` uses too: plain edges, guarded edges with their condition as label, fan-out branches
//! in bold, interrupt nodes as hexagons, breakpoints (`interrupt: before|after`) marked in lines
//! of their own after the edges. YAML node names may be any string, so nodes get ids
//! (`n0`, …) and their names as labels (`Ids::Numbered`). A `type: subgraph` node is drawn with
//! its child agent inside it, the child's ids prefixed by the node's (`n2__n0`,
//! `n2____start__`), so they cannot collide, however deep children nest.

use crate::graph::{Cond, Exec, NodeDef, Rule, YamlGraph};
use tea_check::draw::{self, Format, Ids, Look, Shape};
use tea_runtime::Goto;

/// The shape of an agent's nodes and rules, as `tea_check` reads it: a condition is a guard
/// written as its source (`not (…)` when it must not hold), a fan-out node is its fan-out.
pub(crate) fn shape(nodes: &[NodeDef], start: &[Rule]) -> tea_check::Graph {
    let target = |g: &Goto<crate::graph::NodeIx>| match g {
        Goto::Node(n) => tea_check::Target::Node(n.index()),
        Goto::End => tea_check::Target::End,
    };
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
            .map(|node| tea_check::Node {
                name: node.name.as_str().to_owned(),
                routing: match &node.fork {
                    Some((heads, join)) => tea_check::Routing::Fork {
                        heads: heads.iter().map(|h| h.index()).collect(),
                        join: join.index(),
                    },
                    None => tea_check::Routing::Edges(edges(&node.rules)),
                },
                can_pause: node.interrupt_before || node.interrupt_after || node.exec.can_pause(),
                // A YAML child graph cannot route its parent (no `Command::parent`).
                jumps: Vec::new(),
            })
            .collect(),
        start: edges(start),
    }
}

/// `graph`'s template in `format` (ids marked), its children's spliced in.
fn template(graph: &YamlGraph, format: Format) -> String {
    let inner = graph.inner();
    let shapes = inner
        .nodes
        .iter()
        .map(|node| match &node.exec {
            Exec::Interrupt { .. } => Shape::Interrupt,
            Exec::Subgraph { child, .. } => Shape::Subgraph { child: child.inner().name.clone() },
            _ => Shape::Step,
        })
        .collect();
    let mut look = Look::new(Ids::Numbered, shapes);
    let indices = |keep: fn(&NodeDef) -> bool| -> Vec<usize> {
        inner.nodes.iter().enumerate().filter(|(_, n)| keep(n)).map(|(i, _)| i).collect()
    };
    look.interrupt_before = indices(|n| n.interrupt_before);
    look.interrupt_after = indices(|n| n.interrupt_after);
    let parts = draw::template(&shape(&inner.nodes, &inner.start), &look, format);
    draw::splice(&parts, |i| match &inner.nodes[i].exec {
        Exec::Subgraph { child, .. } => template(child, format),
        _ => String::new(),
    })
}

fn drawing(graph: &YamlGraph, format: Format) -> String {
    let head = draw::head(format, Ids::Numbered, &graph.inner().name);
    format!("{head}{}{}", draw::unmark(&template(graph, format)), draw::tail(format))
}

pub(crate) fn mermaid(graph: &YamlGraph) -> String {
    drawing(graph, Format::Mermaid)
}

pub(crate) fn dot(graph: &YamlGraph) -> String {
    drawing(graph, Format::Dot)
}
