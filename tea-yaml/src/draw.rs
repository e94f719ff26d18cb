//! An agent's graph drawn as Mermaid and Graphviz DOT, in the style of `graph!`'s `MERMAID` and
//! `DOT`: plain edges, guarded edges with their condition as label, fan-out branches in bold,
//! interrupt nodes as hexagons. YAML node names may be any string, so nodes get ids (`n0`, …)
//! and their names as labels.

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

fn id(to: &Goto<crate::graph::NodeIx>) -> String {
    match to {
        Goto::Node(n) => format!("n{}", n.index()),
        Goto::End => "__end__".to_owned(),
    }
}

fn edges(graph: &YamlGraph) -> Vec<Drawn> {
    let inner = graph.inner();
    let rules = |from: String, rules: &[Rule]| -> Vec<Drawn> {
        rules
            .iter()
            .map(|r| Drawn {
                from: from.clone(),
                to: id(&r.to),
                kind: match &r.cond {
                    Cond::Always | Cond::Const(true) => Kind::Plain,
                    Cond::Const(false) => Kind::Guarded("false".to_owned()),
                    Cond::Expr { source, expect: true, .. } => Kind::Guarded(source.to_string()),
                    Cond::Expr { source, expect: false, .. } => Kind::Guarded(format!("not ({source})")),
                },
            })
            .collect()
    };
    let mut out = rules("__start__".to_owned(), &inner.start);
    for (i, node) in inner.nodes.iter().enumerate() {
        out.extend(rules(format!("n{i}"), &node.rules));
        if let Some((heads, _)) = &node.fork {
            out.extend(heads.iter().map(|h| Drawn {
                from: format!("n{i}"),
                to: id(&Goto::Node(*h)),
                kind: Kind::Branch,
            }));
        }
    }
    out
}

fn escape(label: &str) -> String {
    label.replace('\\', "\\\\").replace('"', "#quot;")
}

pub(crate) fn mermaid(graph: &YamlGraph) -> String {
    let mut out = String::from("flowchart TD\n    __start__([start])\n");
    for (i, node) in graph.inner().nodes.iter().enumerate() {
        let label = escape(node.name.as_str());
        out.push_str(&match node.exec {
            Exec::Interrupt { .. } => format!("    n{i}{{{{\"{label}\"}}}}\n"),
            _ => format!("    n{i}[\"{label}\"]\n"),
        });
    }
    out.push_str("    __end__([end])\n");
    for Drawn { from, to, kind } in edges(graph) {
        out.push_str(&match kind {
            Kind::Plain => format!("    {from} --> {to}\n"),
            Kind::Guarded(label) => format!("    {from} -->|\"{}\"| {to}\n", escape(&label)),
            Kind::Branch => format!("    {from} ==> {to}\n"),
        });
    }
    out
}

pub(crate) fn dot(graph: &YamlGraph) -> String {
    let quote = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
    let mut out = format!(
        "digraph \"{}\" {{\n    \"__start__\" [label=\"start\", shape=circle];\n",
        quote(graph.inner().name.as_str())
    );
    for (i, node) in graph.inner().nodes.iter().enumerate() {
        let shape = if matches!(node.exec, Exec::Interrupt { .. }) { ", shape=hexagon" } else { "" };
        out.push_str(&format!("    \"n{i}\" [label=\"{}\"{shape}];\n", quote(node.name.as_str())));
    }
    out.push_str("    \"__end__\" [label=\"end\", shape=doublecircle];\n");
    for Drawn { from, to, kind } in edges(graph) {
        let attributes = match kind {
            Kind::Plain => String::new(),
            Kind::Guarded(label) => format!(" [label=\"{}\"]", quote(&label)),
            Kind::Branch => String::from(" [style=bold]"),
        };
        out.push_str(&format!("    \"{from}\" -> \"{to}\"{attributes};\n"));
    }
    out.push_str("}\n");
    out
}
