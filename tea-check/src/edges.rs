//! The checks of one ordered edge list: duplicate edges, and edges after an unguarded fallback
//! (which can never be taken).

use crate::{At, Edge, Graph, Kind, Problem, Routing, Source, Spelling};

/// Checks `start`'s edges and every node's edges; returns whether an edge is shadowed by an
/// unguarded one before it (the graph's paths are then not the ones its author meant).
pub(crate) fn check(graph: &Graph, spelling: Spelling, problems: &mut Vec<Problem>) -> bool {
    let mut shadowed = check_list(graph, Source::Start, &graph.start, spelling, problems);
    for (i, node) in graph.nodes.iter().enumerate() {
        if let Routing::Edges(edges) = &node.routing {
            shadowed |= check_list(graph, Source::Node(i), edges, spelling, problems);
        }
    }
    shadowed
}

fn check_list(graph: &Graph, from: Source, edges: &[Edge], spelling: Spelling, problems: &mut Vec<Problem>) -> bool {
    let source = match from {
        Source::Start => spelling.start(),
        Source::Node(i) => graph.nodes[i].name.as_str(),
    };
    let name = |edge: &Edge| spelling.target(&graph.nodes, edge.to);
    let mut shadowed = false;
    let mut fallback: Option<&Edge> = None;
    // The edges not reported: a later edge is a duplicate only of one of these.
    let mut kept: Vec<&Edge> = Vec::with_capacity(edges.len());
    for (index, edge) in edges.iter().enumerate() {
        let at = At::Listed { from, index };
        if kept.contains(&edge) {
            let written = spelling.edge(source, name(edge), edge.guard.as_deref());
            problems.push(Problem {
                at,
                kind: Kind::DuplicateEdge,
                message: format!("duplicate edge `{written}`; remove one of them"),
            });
            continue;
        }
        if let Some(earlier) = fallback {
            let message = shadowed_message(spelling, from, source, name(earlier), name(edge), edge.guard.is_some());
            problems.push(Problem { at, kind: Kind::NeverTaken, message });
            shadowed = true;
            continue;
        }
        if edge.guard.is_none() {
            fallback = Some(edge);
        }
        kept.push(edge);
    }
    shadowed
}

fn shadowed_message(spelling: Spelling, from: Source, source: &str, earlier: &str, to: &str, guarded: bool) -> String {
    let fallback = spelling.edge(source, earlier, None);
    match (spelling, guarded) {
        (Spelling::GraphMacro, true) => format!(
            "this edge is never taken: the unguarded edge `{fallback}` before it always applies; put the guarded \
             edges first and the unguarded fallback last"
        ),
        (Spelling::Yaml, true) => format!(
            "this edge is never taken: the unconditional edge `{fallback}` before it always applies; put the \
             conditional edges first and the unconditional one last"
        ),
        (Spelling::GraphMacro, false) => {
            // `start` has no function, so it cannot be a router.
            let router = match from {
                Source::Start => String::new(),
                Source::Node(_) => format!(", or make `{source}` a router (`{source} -> {earlier} | {to};`)"),
            };
            format!(
                "this edge is never taken: `{source}` already has an unguarded edge, `{fallback}`, which always \
                 applies; give one of them a guard (`{source} -> {to} if …;`){router}"
            )
        }
        (Spelling::Yaml, false) => format!(
            "this edge is never taken: `{source}` already has an unconditional edge, `{fallback}`, which always \
             applies; give one of them a condition (`when: …`)"
        ),
    }
}
