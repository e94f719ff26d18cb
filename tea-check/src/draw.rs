//! Mermaid and Graphviz DOT drawings of a [`Graph`], the same for both front ends: `graph!`
//! computes its drawings at compile time and emits them as string literals, the YAML loader
//! draws an agent when asked.
//!
//! A drawing is made as a *template*: the text with [`MARK`] before every node id, and a
//! [`Part::Child`] where a subgraph node's child graph goes. [`splice`] inserts each child's
//! template with its ids prefixed by the subgraph node's id and `__` (`review__check`), so ids
//! stay unique however deep children nest; [`unmark`] removes the marks. `graph!` cannot see a
//! child graph's nodes (the child is another type), so it leaves the splicing to constants the
//! compiler evaluates; a front end that holds its children, as the YAML loader does, calls
//! [`drawing`].
//!
//! ```
//! use tea_check::draw::{drawing, Format, Ids, Look, Shape};
//! use tea_check::{Graph, Spelling};
//!
//! let graph = Graph::builder(Spelling::GraphMacro)
//!     .edge("start", "write", None)
//!     .edge("write", "end", Some("done"))
//!     .edge("write", "write", None)
//!     .build();
//! let look = Look::new(Ids::Names, vec![Shape::Step]);
//! let mermaid = drawing(&graph, &look, "Flow", Format::Mermaid, |_| String::new());
//! assert_eq!(
//!     mermaid,
//!     "flowchart TD\n    __start__([start])\n    write[write]\n    __end__([end])\n    \
//!      __start__ --> write\n    write -->|\"done\"| __end__\n    write --> write\n"
//! );
//! ```

use crate::{Edge, Graph, Routing, Target};

/// The character before every node id in a template (U+0001, never part of a name).
pub const MARK: char = '\u{1}';

/// The drawing's language.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// A Mermaid `flowchart TD`.
    Mermaid,
    /// A Graphviz `digraph`.
    Dot,
}

/// How nodes are named in a drawing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ids {
    /// Names are identifiers (as in `graph!`): each node's id is its name, and names are written
    /// as they are (`write[write]`, `digraph Flow {`).
    Names,
    /// Names may hold any character (as in YAML): nodes get the ids `n0`, `n1`, … and their
    /// names are written quoted and escaped as labels (`n0["say #quot;hi#quot;"]`,
    /// `digraph "my agent" {`).
    Numbered,
}

/// What a node is, which decides its shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Shape {
    /// A node that runs a function or a script: a box.
    Step,
    /// A node whose function awaits (an `async fn`): a parallelogram.
    Async,
    /// An interrupt node (it pauses, it runs nothing): a hexagon.
    Interrupt,
    /// A subgraph node: a block holding its child graph's drawing, labelled `node: child`.
    Subgraph {
        /// The child graph's name, as the label shows it.
        child: String,
    },
}

/// What a drawing shows beyond a [`Graph`]'s shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Look {
    /// How nodes are named.
    pub ids: Ids,
    /// Each node's shape, by index in [`Graph::nodes`] (a node without one is a [`Shape::Step`]).
    pub shapes: Vec<Shape>,
    /// The nodes whose fan-out sends its branch once per item (`parallel a => b* -> j;`): the
    /// branch is drawn `send *`. By index in [`Graph::nodes`].
    pub sends: Vec<usize>,
    /// The nodes with a breakpoint before them (`interrupt_before`), by index.
    pub interrupt_before: Vec<usize>,
    /// The nodes with a breakpoint after them (`interrupt_after`), by index.
    pub interrupt_after: Vec<usize>,
}

impl Look {
    /// A look with these ids and shapes, no fan-out that sends and no breakpoint.
    pub fn new(ids: Ids, shapes: Vec<Shape>) -> Look {
        Look { ids, shapes, sends: Vec::new(), interrupt_before: Vec::new(), interrupt_after: Vec::new() }
    }

    fn shape(&self, node: usize) -> &Shape {
        self.shapes.get(node).unwrap_or(&Shape::Step)
    }

    /// Node `i`'s id (without its mark).
    fn id(&self, graph: &Graph, i: usize) -> String {
        match self.ids {
            Ids::Names => graph.nodes[i].name.clone(),
            Ids::Numbered => format!("n{i}"),
        }
    }
}

/// A piece of a template: text (its ids marked with [`MARK`]), or the place of a subgraph node's
/// child graph.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Part {
    /// Text, ids marked.
    Text(String),
    /// The template of the child graph of subgraph node `node` goes here, every id in it
    /// prefixed by `prefix` (the node's id and `__`).
    Child {
        /// The subgraph node's index in [`Graph::nodes`].
        node: usize,
        /// What each of the child's ids is prefixed with.
        prefix: String,
    },
}

/// The first line of a drawing of the graph `name`: `flowchart TD`, or `digraph name {`.
pub fn head(format: Format, ids: Ids, name: &str) -> String {
    match (format, ids) {
        (Format::Mermaid, _) => String::from("flowchart TD\n"),
        (Format::Dot, Ids::Names) => format!("digraph {name} {{\n"),
        (Format::Dot, Ids::Numbered) => format!("digraph \"{}\" {{\n", dot_escape(name)),
    }
}

/// What closes a drawing: nothing in Mermaid, `}` in DOT.
pub fn tail(format: Format) -> &'static str {
    match format {
        Format::Mermaid => "",
        Format::Dot => "}\n",
    }
}

/// The template of `graph`'s drawing, without [`head`] and [`tail`]: its entry, nodes, exit and
/// edges, each subgraph node's child left as a [`Part::Child`].
///
/// Edges are drawn in order: the entry's, then each node's — plain (`-->`), guarded with their
/// guard as label, routers' targets dashed (`-.->`), fan-outs' branches bold (`==>`, `send *`
/// for a fan-out that sends). A fan-out's join is reached by its branches' own edges.
///
/// Breakpoints come last, in lines of their own (the lines above stay as they are): in Mermaid
/// a class per kind (`class review interrupt_before`, drawn with a thick border, dashed for
/// `interrupt_after`), in DOT the node's attributes again with an outside label
/// (`"review" [xlabel="interrupt_before", penwidth=3];`).
pub fn template(graph: &Graph, look: &Look, format: Format) -> Vec<Part> {
    let mut parts = Vec::new();
    let m = MARK;
    let text = |parts: &mut Vec<Part>, text: String| match parts.last_mut() {
        _ if text.is_empty() => {}
        Some(Part::Text(last)) => last.push_str(&text),
        _ => parts.push(Part::Text(text)),
    };
    text(
        &mut parts,
        match format {
            Format::Mermaid => format!("    {m}__start__([start])\n"),
            Format::Dot => format!("    \"{m}__start__\" [label=\"start\", shape=circle];\n"),
        },
    );
    for (i, node) in graph.nodes.iter().enumerate() {
        let id = look.id(graph, i);
        let name = node.name.as_str();
        let shape = look.shape(i);
        if let Shape::Subgraph { child } = shape {
            let label = format!("{name}: {child}");
            text(
                &mut parts,
                match format {
                    Format::Mermaid => format!("    subgraph {m}{id} [\"{}\"]\n", mermaid_escape(&label)),
                    Format::Dot => {
                        let label = dot_escape(&label);
                        format!(
                            "    subgraph \"cluster_{m}{id}\" {{\n    label=\"{label}\";\n    \"{m}{id}\" [label=\"{label}\", shape=box3d];\n"
                        )
                    }
                },
            );
            parts.push(Part::Child { node: i, prefix: format!("{id}__") });
            text(
                &mut parts,
                String::from(match format {
                    Format::Mermaid => "    end\n",
                    Format::Dot => "    }\n",
                }),
            );
            continue;
        }
        let line = match format {
            Format::Mermaid => {
                let label = match look.ids {
                    Ids::Names => name.to_owned(),
                    Ids::Numbered => format!("\"{}\"", mermaid_escape(name)),
                };
                match shape {
                    Shape::Interrupt => format!("    {m}{id}{{{{{label}}}}}\n"),
                    Shape::Async => format!("    {m}{id}[/{label}/]\n"),
                    Shape::Step | Shape::Subgraph { .. } => format!("    {m}{id}[{label}]\n"),
                }
            }
            Format::Dot => {
                let attributes = match shape {
                    Shape::Interrupt => ", shape=hexagon",
                    Shape::Async => ", shape=parallelogram",
                    Shape::Step | Shape::Subgraph { .. } => "",
                };
                format!("    \"{m}{id}\" [label=\"{}\"{attributes}];\n", dot_escape(name))
            }
        };
        text(&mut parts, line);
    }
    text(
        &mut parts,
        match format {
            Format::Mermaid => format!("    {m}__end__([end])\n"),
            Format::Dot => format!("    \"{m}__end__\" [label=\"end\", shape=doublecircle];\n"),
        },
    );
    for (from, to, kind) in edges(graph, look) {
        text(
            &mut parts,
            match (format, kind) {
                (Format::Mermaid, Drawn::Plain) => format!("    {m}{from} --> {m}{to}\n"),
                (Format::Mermaid, Drawn::Guarded(guard)) => {
                    format!("    {m}{from} -->|\"{}\"| {m}{to}\n", mermaid_escape(guard))
                }
                (Format::Mermaid, Drawn::Router) => format!("    {m}{from} -.-> {m}{to}\n"),
                (Format::Mermaid, Drawn::Branch) => format!("    {m}{from} ==> {m}{to}\n"),
                (Format::Mermaid, Drawn::Sends) => format!("    {m}{from} ==>|\"send *\"| {m}{to}\n"),
                (Format::Dot, kind) => {
                    let attributes = match kind {
                        Drawn::Plain => String::new(),
                        Drawn::Guarded(guard) => format!(" [label=\"{}\"]", dot_escape(guard)),
                        Drawn::Router => String::from(" [style=dashed]"),
                        Drawn::Branch => String::from(" [style=bold]"),
                        Drawn::Sends => String::from(" [style=bold, label=\"send *\"]"),
                    };
                    format!("    \"{m}{from}\" -> \"{m}{to}\"{attributes};\n")
                }
            },
        );
    }
    text(&mut parts, breakpoints(graph, look, format));
    parts
}

/// The lines that mark the breakpoints (nothing without any).
fn breakpoints(graph: &Graph, look: &Look, format: Format) -> String {
    let m = MARK;
    let mut out = String::new();
    match format {
        Format::Mermaid => {
            for (kind, nodes, style) in [
                ("interrupt_before", &look.interrupt_before, "stroke-width:4px"),
                ("interrupt_after", &look.interrupt_after, "stroke-width:4px,stroke-dasharray:6 3"),
            ] {
                let ids: Vec<String> = nodes
                    .iter()
                    .filter(|&&i| i < graph.nodes.len())
                    .map(|&i| format!("{m}{}", look.id(graph, i)))
                    .collect();
                if !ids.is_empty() {
                    out.push_str(&format!("    classDef {kind} {style}\n    class {} {kind}\n", ids.join(",")));
                }
            }
        }
        Format::Dot => {
            for i in 0..graph.nodes.len() {
                let kinds: Vec<&str> =
                    [("interrupt_before", &look.interrupt_before), ("interrupt_after", &look.interrupt_after)]
                        .into_iter()
                        .filter(|(_, nodes)| nodes.contains(&i))
                        .map(|(kind, _)| kind)
                        .collect();
                if !kinds.is_empty() {
                    out.push_str(&format!(
                        "    \"{m}{}\" [xlabel=\"{}\", penwidth=3];\n",
                        look.id(graph, i),
                        kinds.join(", ")
                    ));
                }
            }
        }
    }
    out
}

/// How an edge is drawn.
enum Drawn<'g> {
    Plain,
    Guarded(&'g str),
    Router,
    Branch,
    Sends,
}

/// Every edge as (from id, to id, kind), in the order [`template`] draws them.
fn edges<'g>(graph: &'g Graph, look: &Look) -> Vec<(String, String, Drawn<'g>)> {
    let id = |to: Target| match to {
        Target::Node(n) => look.id(graph, n),
        Target::End => String::from("__end__"),
    };
    let list = |from: String, edges: &'g [Edge]| -> Vec<(String, String, Drawn<'g>)> {
        edges
            .iter()
            .map(|e| (from.clone(), id(e.to), e.guard.as_deref().map_or(Drawn::Plain, Drawn::Guarded)))
            .collect()
    };
    let mut out = list(String::from("__start__"), &graph.start);
    for (i, node) in graph.nodes.iter().enumerate() {
        let from = look.id(graph, i);
        match &node.routing {
            Routing::Edges(edges) => out.extend(list(from, edges)),
            Routing::Router(targets) => out.extend(targets.iter().map(|&t| (from.clone(), id(t), Drawn::Router))),
            Routing::Fork { heads, .. } => {
                let kind = || if look.sends.contains(&i) { Drawn::Sends } else { Drawn::Branch };
                out.extend(heads.iter().map(|&h| (from.clone(), id(Target::Node(h)), kind())));
            }
        }
    }
    out
}

/// The template `parts` make: text as it is, and in each [`Part::Child`] the template
/// `child(node)` gives, with every mark followed by the part's prefix (the marks stay, so the
/// result can itself be spliced into a parent).
pub fn splice(parts: &[Part], mut child: impl FnMut(usize) -> String) -> String {
    let mut out = String::new();
    for part in parts {
        match part {
            Part::Text(text) => out.push_str(text),
            Part::Child { node, prefix } => {
                for c in child(*node).chars() {
                    out.push(c);
                    if c == MARK {
                        out.push_str(prefix);
                    }
                }
            }
        }
    }
    out
}

/// `template` without its marks.
pub fn unmark(template: &str) -> String {
    template.chars().filter(|&c| c != MARK).collect()
}

/// The whole drawing of `graph`, named `name`: [`head`], the [`template`] with each subgraph
/// node's child template (`child(node)`, itself made by [`template`] and [`splice`]) inserted,
/// unmarked, then [`tail`].
pub fn drawing(graph: &Graph, look: &Look, name: &str, format: Format, child: impl FnMut(usize) -> String) -> String {
    let template = splice(&template(graph, look, format), child);
    format!("{}{}{}", head(format, look.ids, name), unmark(&template), tail(format))
}

/// A Mermaid label's text inside `"…"`.
fn mermaid_escape(label: &str) -> String {
    label.replace('\\', "\\\\").replace('"', "#quot;")
}

/// A DOT string's text inside `"…"`.
fn dot_escape(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Spelling;

    /// start -> ask; ask -> review | end; review -> end (review: a subgraph node).
    fn graph() -> Graph {
        Graph::builder(Spelling::GraphMacro)
            .edge("start", "ask", None)
            .router("ask", ["review", "end"])
            .edge("review", "end", None)
            .build()
    }

    #[test]
    fn a_child_goes_inside_its_node_with_its_ids_prefixed() {
        let look = Look::new(Ids::Names, vec![Shape::Interrupt, Shape::Subgraph { child: "Reviewer".into() }]);
        let parts = template(&graph(), &look, Format::Mermaid);
        assert!(matches!(&parts[1], Part::Child { node: 1, prefix } if prefix == "review__"), "{parts:?}");
        let child = splice(&template(&graph(), &Look::new(Ids::Names, Vec::new()), Format::Mermaid), |_| String::new());
        let drawn = drawing(&graph(), &look, "Desk", Format::Mermaid, |_| child.clone());
        assert!(
            drawn.contains(
                "    ask{{ask}}\n    subgraph review [\"review: Reviewer\"]\n    review____start__([start])\n"
            ),
            "{drawn}"
        );
        assert!(drawn.contains("    review__ask -.-> review____end__\n"), "{drawn}");
        assert!(drawn.contains("    ask -.-> review\n"), "{drawn}");
        assert!(!drawn.contains(MARK), "{drawn:?}");
    }

    #[test]
    fn numbered_ids_quote_and_escape_names() {
        let graph = Graph::builder(Spelling::Yaml)
            .edge("__start__", "say \"hi\"", None)
            .edge("say \"hi\"", "__end__", Some("state.x == \"a\""))
            .build();
        let look = Look::new(Ids::Numbered, vec![Shape::Step]);
        let mermaid = drawing(&graph, &look, "my \"agent\"", Format::Mermaid, |_| String::new());
        assert!(mermaid.contains("    n0[\"say #quot;hi#quot;\"]\n"), "{mermaid}");
        assert!(mermaid.contains("    n0 -->|\"state.x == #quot;a#quot;\"| __end__\n"), "{mermaid}");
        let dot = drawing(&graph, &look, "my \"agent\"", Format::Dot, |_| String::new());
        assert!(dot.starts_with("digraph \"my \\\"agent\\\"\" {\n") && dot.ends_with("}\n"), "{dot}");
        assert!(dot.contains("    \"n0\" [label=\"say \\\"hi\\\"\"];\n"), "{dot}");
    }

    #[test]
    fn breakpoints_are_marked_in_lines_of_their_own() {
        let mut look = Look::new(Ids::Names, vec![Shape::Step, Shape::Step]);
        let plain = drawing(&graph(), &look, "Desk", Format::Mermaid, |_| String::new());
        assert!(!plain.contains("class"), "no breakpoint, no class: {plain}");
        look.interrupt_before = vec![0, 1];
        look.interrupt_after = vec![1];
        let mermaid = drawing(&graph(), &look, "Desk", Format::Mermaid, |_| String::new());
        assert!(mermaid.starts_with(&plain), "the drawing without marks comes first, unchanged:\n{mermaid}");
        assert!(
            mermaid.ends_with(
                "    classDef interrupt_before stroke-width:4px\n    class ask,review interrupt_before\n    \
             classDef interrupt_after stroke-width:4px,stroke-dasharray:6 3\n    class review interrupt_after\n"
            ),
            "{mermaid}"
        );
        let dot = drawing(&graph(), &look, "Desk", Format::Dot, |_| String::new());
        assert!(
            dot.ends_with(
                "    \"ask\" [xlabel=\"interrupt_before\", penwidth=3];\n    \
             \"review\" [xlabel=\"interrupt_before, interrupt_after\", penwidth=3];\n}\n"
            ),
            "{dot}"
        );
    }
}
