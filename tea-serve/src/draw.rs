//! A graph's Mermaid drawing (`graph!`'s `MERMAID`, a YAML agent's `mermaid()`) read back
//! into nodes and edges, and drawn as an HTML list with the current nodes marked: no
//! JavaScript, nothing fetched.

use std::collections::HashSet;

#[derive(Debug, PartialEq)]
struct Node {
    id: String,
    label: String,
}

#[derive(Debug, PartialEq)]
struct Edge {
    from: String,
    to: String,
    arrow: &'static str,
    label: Option<String>,
}

const ARROWS: [(&str, &str); 3] = [("-.->", "⇢"), ("==>", "⇉"), ("-->", "→")];

fn unquote(text: &str) -> String {
    text.trim().trim_matches('"').replace("#quot;", "\"").replace("\\\\", "\\")
}

/// The node a declaration line (`id[label]`, `id{{label}}`, `id([label])`, `id[/label/]`)
/// declares.
fn node(line: &str) -> Option<Node> {
    let at = line.find(['[', '(', '{'])?;
    let id = line[..at].trim();
    let label = line[at..].trim_matches(|c| matches!(c, '[' | ']' | '(' | ')' | '{' | '}' | '/'));
    (!id.is_empty() && !id.contains(char::is_whitespace)).then(|| Node { id: id.to_owned(), label: unquote(label) })
}

fn edge(line: &str) -> Option<Edge> {
    let (at, pattern, arrow) =
        ARROWS.iter().filter_map(|(p, a)| line.find(p).map(|at| (at, *p, *a))).min_by_key(|x| x.0)?;
    let from = line[..at].trim();
    let mut rest = line[at + pattern.len()..].trim_start();
    let mut label = None;
    if let Some(after) = rest.strip_prefix('|') {
        let end = after.find('|')?;
        label = Some(unquote(&after[..end]));
        rest = after[end + 1..].trim_start();
    }
    let to = rest.trim();
    (!from.is_empty() && !to.is_empty()).then(|| Edge { from: from.to_owned(), to: to.to_owned(), arrow, label })
}

fn parse(mermaid: &str) -> (Vec<Node>, Vec<Edge>) {
    let (mut nodes, mut edges) = (Vec::new(), Vec::new());
    for line in mermaid.lines().map(str::trim) {
        let first = line.split_whitespace().next().unwrap_or("");
        if line.is_empty() || matches!(first, "flowchart" | "graph" | "end" | "%%" | "classDef" | "class" | "style") {
            continue;
        }
        if first == "subgraph" {
            if let Some(n) = node(line.trim_start_matches("subgraph").trim()) {
                nodes.push(n);
            }
        } else if let Some(e) = edge(line) {
            edges.push(e);
        } else if let Some(n) = node(line) {
            nodes.push(n);
        }
    }
    (nodes, edges)
}

/// `mermaid` as LangGraph draws a graph in JSON (`GET /assistants/{id}/graph`): `nodes`
/// (`{id, type, data}`; `__start__` and `__end__` of type `schema`) and `edges`
/// (`{source, target, conditional}`, with the condition as `data` when it has one), the
/// drawing's ids replaced by the nodes' names.
pub(crate) fn json(mermaid: &str) -> serde_json::Value {
    use serde_json::json;
    let (nodes, edges) = parse(mermaid);
    let name = |id: &str| match id {
        "__start__" | "__end__" => id.to_owned(),
        _ => nodes.iter().find(|n| n.id == id).map_or(id, |n| n.label.as_str()).to_owned(),
    };
    let nodes: Vec<_> = nodes
        .iter()
        .map(|n| match n.id.as_str() {
            "__start__" | "__end__" => json!({ "id": n.id, "type": "schema", "data": n.id }),
            _ => json!({ "id": n.label, "type": "runnable", "data": { "id": ["tea", "node", n.label], "name": n.label } }),
        })
        .collect();
    let edges: Vec<_> = edges
        .iter()
        .map(|e| {
            let mut edge = json!({
                "source": name(&e.from),
                "target": name(&e.to),
                "conditional": e.label.is_some() || e.arrow != "→",
            });
            if let Some(label) = &e.label {
                edge["data"] = json!(label);
            }
            edge
        })
        .collect();
    json!({ "nodes": nodes, "edges": edges })
}

/// `mermaid` as an HTML list: each node with its outgoing edges; nodes whose name is in
/// `current` are marked.
pub(crate) fn html(mermaid: &str, current: &HashSet<String>) -> String {
    let (nodes, edges) = parse(mermaid);
    let label = |id: &str| nodes.iter().find(|n| n.id == id).map_or(id, |n| n.label.as_str()).to_owned();
    let mut out = String::from("<ol class=\"graph\">");
    for node in &nodes {
        let marked = current.contains(&node.label);
        out.push_str(&format!(
            "<li class=\"node{}\" data-node=\"{}\"><span class=\"name\">{}</span>{}",
            if marked { " current" } else { "" },
            escape(&node.label),
            escape(&node.label),
            if marked { " <span class=\"here\">◀ here</span>" } else { "" }
        ));
        let outgoing: Vec<&Edge> = edges.iter().filter(|e| e.from == node.id).collect();
        if !outgoing.is_empty() {
            out.push_str("<ul class=\"edges\">");
            for e in outgoing {
                let condition = e.label.as_ref().map_or(String::new(), |l| format!(" <i>if {}</i>", escape(l)));
                out.push_str(&format!("<li>{} <b>{}</b>{condition}</li>", e.arrow, escape(&label(&e.to))));
            }
            out.push_str("</ul>");
        }
        out.push_str("</li>");
    }
    out.push_str("</ol>");
    out
}

/// `text` with HTML's special characters escaped.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_front_ends_drawings() {
        let graph = "flowchart TD\n    __start__([start])\n    write[write]\n    ask{{ask}}\n    fetch[/fetch/]\n    __end__([end])\n    __start__ --> write\n    write --> ask\n    ask -->|\"approved\"| __end__\n    ask -.-> fetch\n";
        let (nodes, edges) = parse(graph);
        assert_eq!(
            nodes.iter().map(|n| n.label.as_str()).collect::<Vec<_>>(),
            ["start", "write", "ask", "fetch", "end"]
        );
        assert_eq!(edges.len(), 4);
        assert_eq!(
            edges[2],
            Edge { from: "ask".into(), to: "__end__".into(), arrow: "→", label: Some("approved".into()) }
        );
        assert_eq!(edges[3].arrow, "⇢");
        let yaml = "flowchart TD\n    __start__([start])\n    n0[\"prepare\"]\n    n1{{\"ask\"}}\n    __end__([end])\n    __start__ --> n0\n    n0 -->|\"state.count > 10\"| n1\n";
        let (nodes, edges) = parse(yaml);
        assert_eq!(nodes[2], Node { id: "n1".into(), label: "ask".into() });
        assert_eq!(edges[1].label.as_deref(), Some("state.count > 10"));
        let drawn = html(yaml, &HashSet::from(["ask".to_owned()]));
        assert!(drawn.contains("<li class=\"node current\" data-node=\"ask\">"), "{drawn}");
        assert!(drawn.contains("→ <b>ask</b> <i>if state.count &gt; 10</i>"), "{drawn}");
    }
}
