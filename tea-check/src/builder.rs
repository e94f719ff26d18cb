//! Building a [`Graph`] from node names, for front ends that read names rather than indices.

use crate::{Edge, Graph, Node, Routing, Spelling, Target};

/// Builds a [`Graph`] from names: nodes are numbered in order of first appearance, the entry's and
/// the exit's names are those of the [`Spelling`] (`start`/`end`, `__start__`/`__end__`).
///
/// Each node has one routing: edges accumulate in order, and [`router`](Builder::router) or
/// [`fork`](Builder::fork) replace whatever routing the node had — a front end reports a node
/// routed two ways itself, before building.
///
/// ```
/// use tea_check::{check, Graph, Spelling};
///
/// let graph = Graph::builder(Spelling::Yaml)
///     .edge("__start__", "plan", None)
///     .fork("plan", ["web", "papers"], "merge")
///     .edge("web", "merge", None)
///     .edge("papers", "__end__", None)
///     .edge("merge", "__end__", None)
///     .build();
/// let problems = check(&graph, Spelling::Yaml);
/// assert_eq!(
///     problems[0].message,
///     "this edge ends the run inside branch `papers`; a branch of the fan-out at `plan` must reach \
///      its join `merge` instead"
/// );
/// ```
#[derive(Debug)]
pub struct Builder {
    spelling: Spelling,
    graph: Graph,
}

impl Graph {
    /// A [`Builder`] that reads the entry and the exit as `spelling` names them.
    pub fn builder(spelling: Spelling) -> Builder {
        Builder { spelling, graph: Graph::default() }
    }

    /// The index of the node named `name`.
    pub fn index(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }
}

impl Builder {
    /// Declares node `name` (numbered now if it is new).
    pub fn node(mut self, name: &str) -> Builder {
        self.declare(name);
        self
    }

    /// Adds an edge from `from` (a node or the entry) to `to` (a node or the exit), guarded by
    /// `guard` as written, after the edges `from` already has.
    pub fn edge(mut self, from: &str, to: &str, guard: Option<&str>) -> Builder {
        let edge = Edge { to: self.target(to), guard: guard.map(str::to_owned) };
        if from == self.spelling.start() {
            self.graph.start.push(edge);
        } else {
            let i = self.declare(from);
            match &mut self.graph.nodes[i].routing {
                Routing::Edges(edges) => edges.push(edge),
                other => *other = Routing::Edges(vec![edge]),
            }
        }
        self
    }

    /// Makes `from` a router that names one of `targets` (nodes or the exit).
    pub fn router<'a>(mut self, from: &str, targets: impl IntoIterator<Item = &'a str>) -> Builder {
        let i = self.declare(from);
        let targets = targets.into_iter().map(|t| self.target(t)).collect();
        self.graph.nodes[i].routing = Routing::Router(targets);
        self
    }

    /// Makes `source` fan out to branches starting at `heads`, which meet at `join`. All of them
    /// are nodes: a front end refuses the entry or the exit there before building (given here,
    /// their names would be read as names of nodes).
    pub fn fork<'a>(mut self, source: &str, heads: impl IntoIterator<Item = &'a str>, join: &str) -> Builder {
        let i = self.declare(source);
        let heads = heads.into_iter().map(|h| self.declare(h)).collect();
        let join = self.declare(join);
        self.graph.nodes[i].routing = Routing::Fork { heads, join };
        self
    }

    /// Declares that the child graph of subgraph node `from` may route this graph to `targets`
    /// (nodes) instead of `from`'s own routing, added to the jumps `from` already declares.
    pub fn jumps<'a>(mut self, from: &str, targets: impl IntoIterator<Item = &'a str>) -> Builder {
        let i = self.declare(from);
        for target in targets {
            let t = self.declare(target);
            if !self.graph.nodes[i].jumps.contains(&t) {
                self.graph.nodes[i].jumps.push(t);
            }
        }
        self
    }

    /// Marks node `name` as one where the run can pause.
    pub fn can_pause(mut self, name: &str) -> Builder {
        let i = self.declare(name);
        self.graph.nodes[i].can_pause = true;
        self
    }

    /// The graph built so far.
    pub fn build(self) -> Graph {
        self.graph
    }

    fn declare(&mut self, name: &str) -> usize {
        self.graph.index(name).unwrap_or_else(|| {
            self.graph.nodes.push(Node::new(name, Routing::Edges(Vec::new())));
            self.graph.nodes.len() - 1
        })
    }

    fn target(&mut self, name: &str) -> Target {
        if name == self.spelling.end() {
            Target::End
        } else {
            Target::Node(self.declare(name))
        }
    }
}
