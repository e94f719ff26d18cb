//! An agent's graph drawn as Mermaid and Graphviz DOT by `tea_check::draw`, the drawing code
//! `graph!` uses too: plain edges, guarded edges with their condition as label, fan-out branches
//! in bold, interrupt nodes as hexagons, breakpoints (`interrupt: before|after`) marked in lines
//! of their own after the edges. YAML node names may be any string, so nodes get ids
//! (`n0`, …) and their names as labels (`Ids::Numbered`). A `type: subgraph` node is drawn with
//! its child agent inside it, the child's ids prefixed by the node's (`n2__n0`,
//! `n2____start__`), so they cannot collide, however deep children nest.
//!
//! Mermaid and DOT through `tea_check::draw` (a `type: subgraph` node drawn with its loaded child
//! inside it, ids prefixed by the node's, recursively).

use super::{shape, Exec, NodeDef, YamlGraph};
use tea_check::draw::{self, Format, Ids, Look, Shape};

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
    let parts = draw::template(&shape(&inner.nodes, &inner.start, &inner.jumps), &look, format);
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
