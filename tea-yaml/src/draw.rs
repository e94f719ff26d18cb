//! An agent's graph drawn as Mermaid and Graphviz DOT, in the style of `graph!`'s `MERMAID` and
//! `DOT`: plain edges, guarded edges with their condition as label, fan-out branches in bold,
//! interrupt nodes as hexagons. YAML node names may be any string, so nodes get ids (`n0`, …)
//! and their names as labels. A `type: subgraph` node is drawn with its child agent inside it,
//! as `graph!` draws its subgraph nodes: a Mermaid `subgraph` block, a DOT `cluster_` subgraph
//! holding the node (a `box3d`) and the child's nodes and edges; the child's ids are prefixed
//! by the node's (`n2__n0`, `n2____start__`), so they cannot collide, however deep children nest.

use crate::graph::{Cond, Exec, Rule, YamlGraph};
use tea_runtime::Goto;

enum Kind {
    Plain,
    Guarded(String),
    Branch,
}

struct Drawn {
    from: String,
    to: String,
    kind: Kind,
}

/// The id of a routing target, with the ids' `prefix` (`""` at the top).
fn id(prefix: &str, to: &Goto<crate::graph::NodeIx>) -> String {
    match to {
        Goto::Node(n) => format!("{prefix}n{}", n.index()),
        Goto::End => format!("{prefix}__end__"),
    }
}

/// The edges of `graph` (not of its children), ids prefixed by `p`.
fn edges(graph: &YamlGraph, p: &str) -> Vec<Drawn> {
    let inner = graph.inner();
    let rules = |from: String, rules: &[Rule]| -> Vec<Drawn> {
        rules
            .iter()
            .map(|r| Drawn {
                from: from.clone(),
                to: id(p, &r.to),
                kind: match &r.cond {
                    Cond::Always | Cond::Const(true) => Kind::Plain,
                    Cond::Const(false) => Kind::Guarded("false".to_owned()),
                    Cond::Expr { source, expect: true, .. } => Kind::Guarded(source.to_string()),
                    Cond::Expr { source, expect: false, .. } => Kind::Guarded(format!("not ({source})")),
                },
            })
            .collect()
    };
    let mut out = rules(format!("{p}__start__"), &inner.start);
    for (i, node) in inner.nodes.iter().enumerate() {
        out.extend(rules(format!("{p}n{i}"), &node.rules));
        if let Some((heads, _)) = &node.fork {
            out.extend(heads.iter().map(|h| Drawn {
                from: format!("{p}n{i}"),
                to: id(p, &Goto::Node(*h)),
                kind: Kind::Branch,
            }));
        }
    }
    out
}

fn escape(label: &str) -> String {
    label.replace('\\', "\\\\").replace('"', "#quot;")
}

/// A subgraph node's label: its name and the child agent's.
fn child_label(node: &str, child: &YamlGraph) -> String {
    format!("{node}: {}", child.inner().name)
}

pub(crate) fn mermaid(graph: &YamlGraph) -> String {
    let mut out = String::from("flowchart TD\n");
    mermaid_body(graph, "", &mut out);
    out
}

/// `graph`'s nodes (its children's as `subgraph` blocks) and edges, ids prefixed by `p`.
fn mermaid_body(graph: &YamlGraph, p: &str, out: &mut String) {
    out.push_str(&format!("    {p}__start__([start])\n"));
    for (i, node) in graph.inner().nodes.iter().enumerate() {
        let label = escape(node.name.as_str());
        match &node.exec {
            Exec::Interrupt { .. } => out.push_str(&format!("    {p}n{i}{{{{\"{label}\"}}}}\n")),
            Exec::Subgraph { child, .. } => {
                let label = escape(&child_label(node.name.as_str(), child));
                out.push_str(&format!("    subgraph {p}n{i} [\"{label}\"]\n"));
                mermaid_body(child, &format!("{p}n{i}__"), out);
                out.push_str("    end\n");
            }
            _ => out.push_str(&format!("    {p}n{i}[\"{label}\"]\n")),
        }
    }
    out.push_str(&format!("    {p}__end__([end])\n"));
    for Drawn { from, to, kind } in edges(graph, p) {
        out.push_str(&match kind {
            Kind::Plain => format!("    {from} --> {to}\n"),
            Kind::Guarded(label) => format!("    {from} -->|\"{}\"| {to}\n", escape(&label)),
            Kind::Branch => format!("    {from} ==> {to}\n"),
        });
    }
}

fn quote(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

pub(crate) fn dot(graph: &YamlGraph) -> String {
    let mut out = format!("digraph \"{}\" {{\n", quote(graph.inner().name.as_str()));
    dot_body(graph, "", &mut out);
    out.push_str("}\n");
    out
}

/// `graph`'s nodes (its children's in `cluster_` subgraphs) and edges, ids prefixed by `p`.
fn dot_body(graph: &YamlGraph, p: &str, out: &mut String) {
    out.push_str(&format!("    \"{p}__start__\" [label=\"start\", shape=circle];\n"));
    for (i, node) in graph.inner().nodes.iter().enumerate() {
        match &node.exec {
            Exec::Subgraph { child, .. } => {
                let label = quote(&child_label(node.name.as_str(), child));
                out.push_str(&format!(
                    "    subgraph \"cluster_{p}n{i}\" {{\n    label=\"{label}\";\n    \"{p}n{i}\" [label=\"{label}\", shape=box3d];\n"
                ));
                dot_body(child, &format!("{p}n{i}__"), out);
                out.push_str("    }\n");
            }
            exec => {
                let shape = if matches!(exec, Exec::Interrupt { .. }) { ", shape=hexagon" } else { "" };
                out.push_str(&format!("    \"{p}n{i}\" [label=\"{}\"{shape}];\n", quote(node.name.as_str())));
            }
        }
    }
    out.push_str(&format!("    \"{p}__end__\" [label=\"end\", shape=doublecircle];\n"));
    for Drawn { from, to, kind } in edges(graph, p) {
        let attributes = match kind {
            Kind::Plain => String::new(),
            Kind::Guarded(label) => format!(" [label=\"{}\"]", quote(&label)),
            Kind::Branch => String::from(" [style=bold]"),
        };
        out.push_str(&format!("    \"{from}\" -> \"{to}\"{attributes};\n"));
    }
}
