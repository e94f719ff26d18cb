//! The graph checks of [tea](https://docs.rs/tea), shared by its two front ends: the `graph!`
//! macro and the YAML loader.
//!
//! A front end lowers its graph to a [`Graph`] — nodes by index, each with its [`Routing`] — and
//! [`check`] returns every [`Problem`] of the graph's shape: duplicate edges, edges after an
//! unguarded fallback, fan-outs with no branches or with a branch that is their source or join,
//! nodes no path from the entry reaches, nodes with no way to the exit, loops
//! with no exit, branches that leave their fan-out or never reach its join, pauses inside nested
//! fan-outs. Each problem says where it is ([`At`] a node or an edge) and carries its message in
//! the front end's words ([`Spelling`]); the front end maps the place to its own positions —
//! `graph!` to the span of an identifier, the YAML loader to a line and a column.
//!
//! The checks that need syntax (reserved names, statements that do not parse, routers declared
//! twice, …) stay in the front ends. This crate knows nothing of syntax or of the engine: it
//! depends on `std` only.
//!
//! Two more things both front ends do the same way live here: [`suggest()`] picks the known name a
//! misspelled one most likely means (their "did you mean …?"), and [`draw`] draws a graph as
//! Mermaid or Graphviz DOT (`graph!`'s `MERMAID`/`DOT` constants, the YAML agents' drawings).
//!
//! ```
//! use tea_check::{check, At, Edge, Graph, Node, Routing, Spelling, Target};
//!
//! // start -> a; a -> b if ok; a -> end; b -> b;
//! let graph = Graph {
//!     nodes: vec![
//!         Node::new("a", Routing::Edges(vec![Edge::guarded(Target::Node(1), "ok"), Edge::to(Target::End)])),
//!         Node::new("b", Routing::Edges(vec![Edge::to(Target::Node(1))])),
//!     ],
//!     start: vec![Edge::to(Target::Node(0))],
//! };
//! let problems = check(&graph, Spelling::GraphMacro);
//! assert_eq!(problems.len(), 1);
//! assert_eq!(problems[0].at, At::Node(1));
//! assert_eq!(
//!     problems[0].message,
//!     "node `b` never reaches `end`: every path from it loops through `b`; add an edge towards `end`"
//! );
//! ```
//!
//! # Placing problems
//!
//! A front end remembers where it read each part of the graph and places each problem there. A
//! YAML loader, say, keeps the line of every node and of every edge entry:
//!
//! ```
//! use tea_check::{check, At, Graph, Source, Spelling};
//!
//! // nodes:                                  line 1
//! //   - name: draft                         line 2
//! //   - name: review                        line 3
//! // edges:                                  line 4
//! //   - { from: __start__, to: draft }      line 5
//! //   - { from: draft, to: review }         line 6
//! //   - { from: draft, to: __end__ }        line 7
//! //   - { from: review, to: __end__ }       line 8
//! let graph = Graph::builder(Spelling::Yaml)
//!     .node("draft")
//!     .node("review")
//!     .edge("__start__", "draft", None)
//!     .edge("draft", "review", None)
//!     .edge("draft", "__end__", None)
//!     .edge("review", "__end__", None)
//!     .build();
//! let node_lines = [2, 3];
//! let edge_lines = |from: Source, index: usize| match from {
//!     Source::Start => 5 + index,
//!     Source::Node(0) => 6 + index,
//!     Source::Node(_) => 8 + index,
//! };
//! let placed: Vec<String> = check(&graph, Spelling::Yaml)
//!     .iter()
//!     .map(|problem| {
//!         let line = match problem.at {
//!             At::Node(i) => node_lines[i],
//!             At::Listed { from, index } => edge_lines(from, index),
//!             _ => 1, // edges of routers and fan-outs, the fan-outs themselves, the entry
//!         };
//!         format!("agent.yaml:{line}: {problem}")
//!     })
//!     .collect();
//! assert_eq!(
//!     placed,
//!     ["agent.yaml:7: this edge is never taken: `draft` already has an unconditional edge, \
//!       `{ from: draft, to: review }`, which always applies; give one of them a condition (`when: …`)"]
//! );
//! ```
#![deny(missing_docs, missing_debug_implementations)]

mod builder;
pub mod draw;
mod edges;
mod forks;
mod paths;
mod spelling;
mod suggest;

pub use builder::Builder;
pub use spelling::Spelling;
pub use suggest::{jaro_winkler, suggest};

/// Where an edge leads: a node (by its index in [`Graph::nodes`]) or the exit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// The node at this index of [`Graph::nodes`].
    Node(usize),
    /// The exit: `end` in `graph!`, `__end__` in YAML.
    End,
}

/// One edge of an ordered edge list ([`Routing::Edges`], [`Graph::start`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Edge {
    /// Where the edge leads.
    pub to: Target,
    /// The edge's guard as written (`approved`, `!approved`, `state.count > 3`), or `None` when the
    /// edge is unguarded. Two edges with the same target and the same guard are duplicates; an
    /// unguarded edge always applies, so the edges after it are never taken.
    pub guard: Option<String>,
}

impl Edge {
    /// An unguarded edge to `to`.
    pub fn to(to: Target) -> Edge {
        Edge { to, guard: None }
    }

    /// An edge to `to` taken when `guard` holds.
    pub fn guarded(to: Target, guard: impl Into<String>) -> Edge {
        Edge { to, guard: Some(guard.into()) }
    }
}

/// How a node chooses what runs after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Routing {
    /// Edges tried in order; the first whose guard holds (or that has none) is taken. A front end
    /// whose branch heads go straight to their join when they have no edges of their own (as
    /// `graph!`'s do) gives them that edge before checking.
    Edges(Vec<Edge>),
    /// The node itself names one of these targets.
    Router(Vec<Target>),
    /// The node fans out: branches start at `heads` (node indices) and meet at `join`, where the
    /// run goes on. [`check`] reports a fan-out with no heads, a head listed twice, a head that is
    /// the node itself or the join, and a join that is the node itself.
    Fork {
        /// The first node of each branch.
        heads: Vec<usize>,
        /// Where the branches meet.
        join: usize,
    },
}

/// A node of a [`Graph`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// The node's name, as messages print it (in backticks).
    pub name: String,
    /// What runs after the node.
    pub routing: Routing,
    /// Whether the run can pause at the node: a breakpoint before or after it, an interrupt node,
    /// a node that pauses from inside.
    pub can_pause: bool,
    /// The nodes (by index) a subgraph node's child graph may route this graph to instead of
    /// the node's own routing (`Command::parent` in `graph!`), as declared: they count as ways
    /// out of the node for reachability and for the ways to the exit. The node's own routing
    /// still needs a way on: a child that ends without a jump takes it.
    pub jumps: Vec<usize>,
}

impl Node {
    /// A node named `name` routed by `routing`, which cannot pause and declares no jumps.
    pub fn new(name: impl Into<String>, routing: Routing) -> Node {
        Node { name: name.into(), routing, can_pause: false, jumps: Vec::new() }
    }
}

/// A graph's shape: its nodes and the edges out of its entry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Graph {
    /// The nodes; [`Target::Node`], [`Routing::Fork`] and [`At`] refer to them by index.
    pub nodes: Vec<Node>,
    /// The edges out of the entry (`start`, `__start__`), in order.
    pub start: Vec<Edge>,
}

/// Where an edge list belongs: to the entry or to a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// [`Graph::start`].
    Start,
    /// The [`Routing::Edges`] of the node at this index.
    Node(usize),
}

/// Where a [`Problem`] is, for the front end to point at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum At {
    /// The node at this index (where the front end declares or first names it).
    Node(usize),
    /// The way from node `from` to `to`: the first of `from`'s edges to `to`, the router's target
    /// `to`, or, for a fan-out, its join.
    Edge {
        /// The node the edge leaves.
        from: usize,
        /// Where it leads.
        to: Target,
    },
    /// The edge at `index` of an ordered edge list (duplicate edges have the same target, so
    /// only their index tells them apart).
    Listed {
        /// Whose list.
        from: Source,
        /// The edge's index in the list.
        index: usize,
    },
    /// The entry: the graph has no edge out of it.
    Start,
    /// The fan-out declared at this node (its [`Routing::Fork`] as a whole: it has no branches).
    Fork(usize),
    /// The branch at `index` of the [`Routing::Fork`] of node `fork`.
    Branch {
        /// The node that fans out.
        fork: usize,
        /// The branch's index in the fan-out's heads.
        index: usize,
    },
}

/// What kind of problem a [`Problem`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Kind {
    /// A [`Target::Node`] or a fan-out names a node index the graph does not have (a front end's
    /// bug: the other checks are not run).
    UnknownIndex,
    /// An edge repeats an earlier edge of the same list (same target, same guard).
    DuplicateEdge,
    /// An edge comes after an unguarded edge of the same list, which always applies.
    NeverTaken,
    /// The graph has no edge out of its entry.
    NoStart,
    /// A fan-out lists a branch twice.
    DuplicateBranch,
    /// A fan-out has no branches, a branch that is its source or its join, or joins at its
    /// source.
    BadFork,
    /// No path from the entry reaches the node.
    Unreachable,
    /// The node has no outgoing edge.
    DeadEnd,
    /// Every path from the node loops without reaching the exit (or its branch's join).
    NoWayToEnd,
    /// An edge leaves a fan-out's branch before the branch reaches its join.
    LeavesBranch,
    /// An edge ends the run inside a fan-out's branch.
    EndsInBranch,
    /// A node that can pause runs inside a fan-out nested in another fan-out's branch.
    PauseInNestedFanOut,
}

impl Kind {
    /// Whether the problem is about the graph's paths, found by following its edges (rather than
    /// by reading one edge list). A front end that dropped a statement it could not understand
    /// passes a graph whose paths are not its author's, and should ignore these.
    pub fn is_about_paths(self) -> bool {
        matches!(
            self,
            Kind::Unreachable
                | Kind::DeadEnd
                | Kind::NoWayToEnd
                | Kind::LeavesBranch
                | Kind::EndsInBranch
                | Kind::PauseInNestedFanOut
        )
    }
}

/// One problem of a graph: where it is, what kind it is, and a message that says how to fix it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Where to report it.
    pub at: At,
    /// What kind of problem it is.
    pub kind: Kind,
    /// The message, in the [`Spelling`] given to [`check`]; node names are in backticks.
    pub message: String,
}

/// The message alone: where the problem is, the front end says (a span, `file:line:column: `).
impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Every problem of `graph`'s shape, in a deterministic order: the edge lists' problems (the
/// entry's, then each node's in index order), the fan-outs' (in node order), then the paths' — unreachable parts, nodes with no
/// outgoing edge or no way to the exit, then branches that leave their fan-out and pauses inside
/// nested fan-outs.
///
/// The paths are not checked when an edge is never taken or a fan-out is malformed (the author
/// meant another graph than the one described), nor when the graph has no edge out of its entry
/// (then [`Kind::NoStart`] is reported instead).
pub fn check(graph: &Graph, spelling: Spelling) -> Vec<Problem> {
    let mut problems = Vec::new();
    check_indices(graph, &mut problems);
    if !problems.is_empty() {
        return problems;
    }
    let shadowed = edges::check(graph, spelling, &mut problems);
    let broken = forks::check(graph, spelling, &mut problems);
    if graph.start.is_empty() {
        let (start, example) =
            (spelling.start(), suggested_entry(graph).map_or("first_node", |i| &graph.nodes[i].name));
        let message = if graph.nodes.is_empty() {
            format!("the graph is empty; give it edges, e.g. `{}`", spelling.add_edge(start, "first_node"))
        } else {
            format!("the graph has no edge out of `{start}`; add one, e.g. `{}`", spelling.add_edge(start, example))
        };
        problems.push(Problem { at: At::Start, kind: Kind::NoStart, message });
    } else if !shadowed && !broken {
        paths::check(graph, spelling, &mut problems);
    }
    problems
}

/// The node a graph with no edge out of its entry most likely meant to begin at: the first node
/// no edge leads to, or else the first node.
pub fn suggested_entry(graph: &Graph) -> Option<usize> {
    let mut led_to = vec![false; graph.nodes.len()];
    for node in &graph.nodes {
        let targets: Vec<usize> = match &node.routing {
            Routing::Edges(edges) => edges.iter().filter_map(|e| paths::node_of(e.to)).collect(),
            Routing::Router(targets) => targets.iter().filter_map(|&t| paths::node_of(t)).collect(),
            Routing::Fork { heads, join } => heads.iter().chain([join]).copied().collect(),
        };
        for n in targets.into_iter().chain(node.jumps.iter().copied()) {
            if let Some(led) = led_to.get_mut(n) {
                *led = true;
            }
        }
    }
    led_to.iter().position(|led| !led).or(if graph.nodes.is_empty() { None } else { Some(0) })
}

/// Reports every node index that is out of range, so that the checks never index past the end.
fn check_indices(graph: &Graph, problems: &mut Vec<Problem>) {
    let count = graph.nodes.len();
    let mut bad = |at: At, index: usize| {
        if index >= count {
            problems.push(Problem {
                at,
                kind: Kind::UnknownIndex,
                message: format!(
                    "node index {index} is out of range: the graph has {count} node{}",
                    if count == 1 { "" } else { "s" }
                ),
            });
        }
    };
    let check_edges = |edges: &[Edge], from: Source, bad: &mut dyn FnMut(At, usize)| {
        for (index, edge) in edges.iter().enumerate() {
            if let Target::Node(n) = edge.to {
                bad(At::Listed { from, index }, n);
            }
        }
    };
    check_edges(&graph.start, Source::Start, &mut bad);
    for (i, node) in graph.nodes.iter().enumerate() {
        match &node.routing {
            Routing::Edges(edges) => check_edges(edges, Source::Node(i), &mut bad),
            Routing::Router(targets) => {
                for &to in targets {
                    if let Target::Node(n) = to {
                        bad(At::Node(i), n);
                    }
                }
            }
            Routing::Fork { heads, join } => {
                for &n in heads.iter().chain([join]) {
                    bad(At::Node(i), n);
                }
            }
        }
        for &n in &node.jumps {
            bad(At::Node(i), n);
        }
    }
}

#[cfg(test)]
mod tests;
