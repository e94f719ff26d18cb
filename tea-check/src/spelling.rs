//! How messages write the graph's words: `start`/`end` and edges in `graph!` syntax, or
//! `__start__`/`__end__` and edges as YAML entries.

use crate::Target;

/// The front end whose words a [`Problem`](crate::Problem)'s message uses: the names of the entry
/// and the exit, and how an edge or a fan-out is written in a suggested fix.
///
/// ```
/// use tea_check::Spelling;
///
/// assert_eq!(Spelling::GraphMacro.end(), "end");
/// assert_eq!(Spelling::Yaml.end(), "__end__");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Spelling {
    /// `graph! { … }`: `start`, `end`, `a -> b;`, `a -> b if guard;`, `parallel a => [x, y] -> j;`.
    GraphMacro,
    /// The YAML front end: `__start__`, `__end__`, `- { from: a, to: b }`, `when: …`.
    Yaml,
}

impl Spelling {
    /// The name of the entry: `start` or `__start__`.
    pub fn start(self) -> &'static str {
        match self {
            Spelling::GraphMacro => "start",
            Spelling::Yaml => "__start__",
        }
    }

    /// The name of the exit: `end` or `__end__`.
    pub fn end(self) -> &'static str {
        match self {
            Spelling::GraphMacro => "end",
            Spelling::Yaml => "__end__",
        }
    }

    /// An edge as it is written, without backticks: `a -> b if ok` or `{ from: a, to: b, when: ok }`.
    pub(crate) fn edge(self, from: &str, to: &str, guard: Option<&str>) -> String {
        match (self, guard) {
            (Spelling::GraphMacro, None) => format!("{from} -> {to}"),
            (Spelling::GraphMacro, Some(guard)) => format!("{from} -> {to} if {guard}"),
            (Spelling::Yaml, None) => format!("{{ from: {from}, to: {to} }}"),
            (Spelling::Yaml, Some(guard)) => format!("{{ from: {from}, to: {to}, when: {guard} }}"),
        }
    }

    /// An edge to add, as a whole statement or list entry: `a -> b;` or `- { from: a, to: b }`.
    pub(crate) fn add_edge(self, from: &str, to: &str) -> String {
        match self {
            Spelling::GraphMacro => format!("{from} -> {to};"),
            Spelling::Yaml => format!("- {}", self.edge(from, to, None)),
        }
    }

    /// The fan-out at `source`, as a phrase: ``the fan-out at `a` `` or `` `parallel a` ``.
    pub(crate) fn fan_out(self, source: &str) -> String {
        match self {
            Spelling::GraphMacro => format!("`parallel {source}`"),
            Spelling::Yaml => format!("the fan-out at `{source}`"),
        }
    }

    /// A target's name: a node's, or the exit's.
    pub(crate) fn target(self, nodes: &[crate::Node], target: Target) -> &str {
        match target {
            Target::Node(i) => &nodes[i].name,
            Target::End => self.end(),
        }
    }
}
