//! Checking a parsed graph and lowering it to the model the expansion works from.
//!
//! Every problem is collected (never just the first) and spanned on the identifier that causes
//! it: reserved names, duplicate and shadowed edges, routers and fan-outs mixed with edges,
//! breakpoints on unknown nodes, unreachable nodes, nodes with no way to `end`, branches that
//! never reach their join or leave their branch.

use super::parse::{GraphDef, GuardRef, Stmt, When};
use proc_macro2::Span;
use std::collections::BTreeSet;
use syn::{Ident, LitInt};

/// Words of the `graph!` language that cannot name a node.
const KEYWORDS: &[&str] = &["parallel", "interrupt", "interrupt_before", "interrupt_after", "interruptible"];

/// Collects errors so that a user sees every problem of a graph in one build.
#[derive(Default)]
pub struct Errors(Vec<syn::Error>);

impl Errors {
    pub fn push(&mut self, span: Span, message: impl std::fmt::Display) {
        self.0.push(syn::Error::new(span, message));
    }

    pub fn extend(&mut self, errors: impl IntoIterator<Item = syn::Error>) {
        self.0.extend(errors);
    }

    pub fn into_error(self) -> Option<syn::Error> {
        let mut iter = self.0.into_iter();
        let mut first = iter.next()?;
        for error in iter {
            first.combine(error);
        }
        Some(first)
    }
}

/// A checked graph.
#[cfg_attr(test, derive(Debug))]
pub struct Model<'a> {
    pub nodes: Vec<Node<'a>>,
    /// The edges out of `start`, in order.
    pub start: Vec<Route<'a>>,
    pub can_pause: bool,
}

#[cfg_attr(test, derive(Debug))]
pub struct Node<'a> {
    /// Where the node first appears: spans of node-level errors and of its function call.
    pub ident: &'a Ident,
    pub name: String,
    /// The node's variant in the generated enum.
    pub variant: Ident,
    pub kind: NodeKind<'a>,
    pub routing: Routing<'a>,
    pub interruptible: bool,
    pub interrupt_before: bool,
    pub interrupt_after: bool,
}

#[cfg_attr(test, derive(Debug))]
pub enum NodeKind<'a> {
    /// A node run by the function of the same name.
    Function,
    /// `interrupt ask(payload => answer, timeout = …)`: no function.
    Interrupt { payload: &'a Ident, answer: &'a Ident, timeout: Option<&'a LitInt> },
}

#[cfg_attr(test, derive(Debug))]
pub enum Routing<'a> {
    /// Edges tried in order; `implicit` marks a branch head's silent edge to its join.
    Edges { routes: Vec<Route<'a>>, implicit: bool },
    /// `a -> b | c;`: the node returns a `Command` naming one of the targets.
    Router(Vec<Target>),
    /// `parallel a => [heads] -> join;`
    Fork { heads: Vec<usize>, join: usize },
}

#[cfg_attr(test, derive(Debug))]
pub struct Route<'a> {
    pub guard: Option<&'a GuardRef>,
    pub to: Target,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Target {
    Node(usize),
    End,
}

pub fn check(def: &GraphDef) -> Result<Model<'_>, syn::Error> {
    let mut errors = Errors::default();
    let mut table = Table::default();

    // Pass 1: every node, in order of first appearance.
    for stmt in &def.stmts {
        match stmt {
            Stmt::Edge(edge) => {
                table.endpoint(&edge.from, Role::Source, &mut errors);
                table.endpoint(&edge.to, Role::Target, &mut errors);
            }
            Stmt::Router { from, targets } => {
                table.endpoint(from, Role::RouterSource, &mut errors);
                for target in targets {
                    table.endpoint(target, Role::Target, &mut errors);
                }
            }
            Stmt::Parallel { source, heads, join, .. } => {
                table.endpoint(source, Role::Named("the source of a `parallel` statement"), &mut errors);
                for head in heads {
                    table.endpoint(head, Role::Named("a branch of a `parallel` statement"), &mut errors);
                }
                table.endpoint(join, Role::Named("the join of a `parallel` statement"), &mut errors);
            }
            Stmt::Interrupt { node, .. } => {
                table.endpoint(node, Role::Named("an interrupt node"), &mut errors);
            }
            Stmt::Breakpoint { .. } | Stmt::Interruptible { .. } => {}
        }
    }

    let mut nodes: Vec<Node> = table
        .nodes
        .iter()
        .map(|ident| Node {
            ident,
            name: syn::ext::IdentExt::unraw(*ident).to_string(),
            variant: Ident::new(&upper_camel(&ident.to_string()), ident.span()),
            kind: NodeKind::Function,
            routing: Routing::Edges { routes: Vec::new(), implicit: false },
            interruptible: false,
            interrupt_before: false,
            interrupt_after: false,
        })
        .collect();

    for (i, node) in nodes.iter().enumerate() {
        if let Some(first) = nodes[..i].iter().find(|other| other.variant == node.variant) {
            errors.push(
                node.ident.span(),
                format!(
                    "nodes `{}` and `{}` would both be `{}` in the generated node enum; rename one of them",
                    first.name, node.name, node.variant
                ),
            );
        }
    }

    // Pass 2: routing, declarations and breakpoints.
    let mut start: Vec<Route> = Vec::new();
    let mut start_fallback = false;
    let mut interrupt_declared: BTreeSet<usize> = BTreeSet::new();
    let mut declared_by_router_or_fork: Vec<Option<&'static str>> = vec![None; nodes.len()];
    let mut fallback: Vec<bool> = vec![false; nodes.len()];
    for stmt in &def.stmts {
        match stmt {
            Stmt::Edge(edge) => {
                let Some(to) = table.target(&edge.to) else {
                    continue;
                };
                let guard = edge.guard.as_ref();
                let (routes, has_fallback, source_name) = if edge.from == "start" {
                    (&mut start, &mut start_fallback, "start".to_owned())
                } else {
                    let Some(from) = table.index(&edge.from) else {
                        continue;
                    };
                    if let Some(what) = declared_by_router_or_fork[from] {
                        errors.push(
                            edge.to.span(),
                            format!(
                                "node `{}` is {what}, so it cannot also have plain edges; remove this edge",
                                edge.from
                            ),
                        );
                        continue;
                    }
                    let Routing::Edges { routes, .. } = &mut nodes[from].routing else {
                        continue;
                    };
                    (routes, &mut fallback[from], edge.from.to_string())
                };
                let label = guard.map(GuardRef::label);
                if routes.iter().any(|r| r.to == to && r.guard.map(GuardRef::label) == label) {
                    let what = match &label {
                        Some(label) => format!("`{source_name} -> {} if {label}`", edge.to),
                        None => format!("`{source_name} -> {}`", edge.to),
                    };
                    errors.push(edge.to.span(), format!("duplicate edge {what}; remove one of them"));
                    continue;
                }
                if *has_fallback {
                    errors.push(
                        edge.to.span(),
                        format!(
                            "this edge is never taken: an earlier edge out of `{source_name}` has no guard and always applies; \
                             put guarded edges first and the unguarded fallback last"
                        ),
                    );
                    continue;
                }
                if guard.is_none() {
                    *has_fallback = true;
                }
                routes.push(Route { guard, to });
            }
            Stmt::Router { from, targets } => {
                if from == "start" {
                    errors.push(from.span(), "`start` has no function to choose with; route it with edges (`start -> a;`, `start -> a if guard;`)");
                    continue;
                }
                let Some(index) = table.index(from) else {
                    continue;
                };
                if let Err(message) = claim_routing(&nodes[index], declared_by_router_or_fork[index], "a router") {
                    errors.push(from.span(), message);
                    continue;
                }
                declared_by_router_or_fork[index] = Some("a router (`node -> a | b;`)");
                let mut list = Vec::new();
                for target in targets {
                    let Some(to) = table.target(target) else {
                        continue;
                    };
                    if list.contains(&to) {
                        errors.push(target.span(), format!("`{target}` is listed twice"));
                    } else {
                        list.push(to);
                    }
                }
                nodes[index].routing = Routing::Router(list);
            }
            Stmt::Parallel { source, heads, bracket, join } => {
                let (Some(index), Some(join_index)) = (table.index(source), table.index(join)) else {
                    continue;
                };
                if let Err(message) = claim_routing(
                    &nodes[index],
                    declared_by_router_or_fork[index],
                    "the source of a `parallel` statement",
                ) {
                    errors.push(source.span(), message);
                    continue;
                }
                declared_by_router_or_fork[index] = Some("the source of a `parallel` statement");
                if heads.is_empty() {
                    errors.push(
                        *bracket,
                        "a `parallel` statement needs at least one branch: `parallel a => [x, y] -> join;`",
                    );
                    continue;
                }
                let mut list: Vec<usize> = Vec::new();
                for head in heads {
                    let Some(h) = table.index(head) else { continue };
                    if list.contains(&h) {
                        errors.push(head.span(), format!("branch `{head}` is listed twice"));
                    } else if h == index {
                        errors.push(head.span(), format!("`{head}` is the source of this `parallel` statement; it cannot also be one of its branches"));
                    } else if h == join_index {
                        errors.push(head.span(), format!("`{head}` is the join of this `parallel` statement; it cannot also be one of its branches"));
                    } else {
                        list.push(h);
                    }
                }
                if join_index == index {
                    errors.push(join.span(), "a `parallel` statement cannot join at its own source");
                    continue;
                }
                nodes[index].routing = Routing::Fork { heads: list, join: join_index };
            }
            Stmt::Breakpoint { when, nodes: listed } => {
                let keyword = match when {
                    When::Before => "interrupt_before",
                    When::After => "interrupt_after",
                };
                for ident in listed {
                    let Some(index) = known_node(&table, ident, keyword, &mut errors) else {
                        continue;
                    };
                    let flag = match when {
                        When::Before => &mut nodes[index].interrupt_before,
                        When::After => &mut nodes[index].interrupt_after,
                    };
                    if *flag {
                        errors.push(ident.span(), format!("`{keyword} {ident}` is declared twice"));
                    }
                    *flag = true;
                }
            }
            Stmt::Interruptible { nodes: listed } => {
                for ident in listed {
                    let Some(index) = known_node(&table, ident, "interruptible", &mut errors) else {
                        continue;
                    };
                    if nodes[index].interruptible {
                        errors.push(ident.span(), format!("`{ident}` is declared `interruptible` twice"));
                    }
                    nodes[index].interruptible = true;
                }
            }
            Stmt::Interrupt { node, payload, answer, timeout } => {
                let Some(index) = table.index(node) else {
                    continue;
                };
                if !interrupt_declared.insert(index) {
                    errors.push(node.span(), format!("interrupt node `{node}` is declared twice"));
                    continue;
                }
                if let Some(timeout) = timeout {
                    match timeout.base10_parse::<u64>() {
                        Ok(0) | Err(_) => {
                            errors.push(timeout.span(), "the timeout is a whole number of seconds greater than 0")
                        }
                        Ok(_) => {}
                    }
                }
                nodes[index].kind = NodeKind::Interrupt { payload, answer, timeout: timeout.as_ref() };
            }
        }
    }
    for node in &nodes {
        if node.interruptible && matches!(node.kind, NodeKind::Interrupt { .. }) {
            errors.push(
                node.ident.span(),
                format!(
                    "`{}` is an interrupt node (it has no function), so it cannot also be `interruptible`",
                    node.name
                ),
            );
        }
    }

    // A branch head with no edges of its own goes straight to its join.
    let forks: Vec<(usize, Vec<usize>, usize)> = nodes
        .iter()
        .enumerate()
        .filter_map(|(i, n)| match &n.routing {
            Routing::Fork { heads, join } => Some((i, heads.clone(), *join)),
            _ => None,
        })
        .collect();
    for (_, heads, join) in &forks {
        for &head in heads {
            if let Routing::Edges { routes, implicit } = &mut nodes[head].routing {
                if routes.is_empty() {
                    routes.push(Route { guard: None, to: Target::Node(*join) });
                    *implicit = true;
                }
            }
        }
    }

    if start.is_empty() && !def.stmts.is_empty() {
        errors.push(
            def.name.span(),
            format!("graph `{}` has no edge out of `start`; add one, e.g. `start -> first_node;`", def.name),
        );
    } else if start.is_empty() {
        errors.push(
            def.name.span(),
            format!("graph `{}` is empty; give it edges, e.g. `start -> first_node; first_node -> end;`", def.name),
        );
    }

    if errors.0.is_empty() {
        check_paths(&nodes, &start, &forks, &mut errors);
    }

    let can_pause = nodes.iter().any(|n| {
        n.interruptible || n.interrupt_before || n.interrupt_after || matches!(n.kind, NodeKind::Interrupt { .. })
    });
    match errors.into_error() {
        Some(error) => Err(error),
        None => Ok(Model { nodes, start, can_pause }),
    }
}

/// Reachability: every node reachable from `start`, able to reach `end`, and every branch
/// staying inside itself until its join.
fn check_paths(nodes: &[Node], start: &[Route], forks: &[(usize, Vec<usize>, usize)], errors: &mut Errors) {
    let successors = |i: usize, into_branches: bool| -> Vec<Target> {
        match &nodes[i].routing {
            Routing::Edges { routes, .. } => routes.iter().map(|r| r.to).collect(),
            Routing::Router(targets) => targets.clone(),
            Routing::Fork { heads, join } => {
                if into_branches {
                    heads.iter().map(|&h| Target::Node(h)).collect()
                } else {
                    vec![Target::Node(*join)]
                }
            }
        }
    };

    let mut reachable = vec![false; nodes.len()];
    let mut stack: Vec<usize> = start.iter().filter_map(|r| node_of(r.to)).collect();
    while let Some(i) = stack.pop() {
        if std::mem::replace(&mut reachable[i], true) {
            continue;
        }
        stack.extend(successors(i, true).into_iter().filter_map(node_of));
    }

    // Fixed point: a node reaches `end` if one of its successors does (a fan-out through its join).
    let mut reaches_end = vec![false; nodes.len()];
    let mut changed = true;
    while changed {
        changed = false;
        for i in 0..nodes.len() {
            if !reaches_end[i]
                && successors(i, false).iter().any(|t| match t {
                    Target::End => true,
                    Target::Node(n) => reaches_end[*n],
                })
            {
                reaches_end[i] = true;
                changed = true;
            }
        }
    }

    for (i, node) in nodes.iter().enumerate() {
        if !reachable[i] {
            errors.push(
                node.ident.span(),
                format!(
                    "node `{}` is unreachable: no edge from `start` leads to it; add an edge to it or remove it",
                    node.name
                ),
            );
        } else if successors(i, false).is_empty() {
            errors.push(
                node.ident.span(),
                format!("node `{}` has no outgoing edge; add one, e.g. `{} -> end;`", node.name, node.name),
            );
        } else if !reaches_end[i] {
            errors.push(
                node.ident.span(),
                format!(
                    "node `{}` never reaches `end`: every path from it loops or stops; add an edge towards `end`",
                    node.name
                ),
            );
        }
    }

    // The main line: what runs outside every branch.
    let mut main_line = vec![false; nodes.len()];
    let mut stack: Vec<usize> = start.iter().filter_map(|r| node_of(r.to)).collect();
    while let Some(i) = stack.pop() {
        if std::mem::replace(&mut main_line[i], true) {
            continue;
        }
        stack.extend(successors(i, false).into_iter().filter_map(node_of));
    }

    for (source, heads, join) in forks {
        for &head in heads {
            // The nodes of this branch: reachable from its head without passing the join.
            let mut members = vec![false; nodes.len()];
            let mut stack = vec![head];
            let mut reaches_join = false;
            while let Some(i) = stack.pop() {
                if i == *join {
                    reaches_join = true;
                    continue;
                }
                if std::mem::replace(&mut members[i], true) {
                    continue;
                }
                if i == *source || main_line[i] {
                    errors.push(
                        nodes[head].ident.span(),
                        format!(
                            "branch `{}` leads to `{}`, outside the branch; a branch must stay inside itself until its join `{}`",
                            nodes[head].name, nodes[i].name, nodes[*join].name
                        ),
                    );
                    break;
                }
                for target in successors(i, false) {
                    match target {
                        Target::Node(n) => stack.push(n),
                        Target::End => errors.push(
                            nodes[i].ident.span(),
                            format!(
                                "node `{}` in branch `{}` leads to `end`; a branch must reach its join `{}` first",
                                nodes[i].name, nodes[head].name, nodes[*join].name
                            ),
                        ),
                    }
                }
            }
            if !reaches_join {
                errors.push(
                    nodes[head].ident.span(),
                    format!(
                        "branch `{}` never reaches its join `{}`; add an edge to it",
                        nodes[head].name, nodes[*join].name
                    ),
                );
            }
        }
    }
}

fn node_of(target: Target) -> Option<usize> {
    match target {
        Target::Node(i) => Some(i),
        Target::End => None,
    }
}

fn claim_routing(node: &Node, declared: Option<&'static str>, what: &str) -> Result<(), String> {
    if let Some(previous) = declared {
        return Err(format!("node `{}` is already {previous}; it cannot also be {what}", node.name));
    }
    if let Routing::Edges { routes, .. } = &node.routing {
        if !routes.is_empty() {
            return Err(format!(
                "node `{}` already has edges, so it cannot also be {what}; remove its `{} -> …;` edges",
                node.name, node.name
            ));
        }
    }
    Ok(())
}

fn known_node(table: &Table, ident: &Ident, keyword: &str, errors: &mut Errors) -> Option<usize> {
    let index = table.index(ident);
    if index.is_none() {
        errors.push(ident.span(), format!("`{keyword}` names `{ident}`, which is not a node of this graph"));
    }
    index
}

#[derive(Clone, Copy)]
enum Role {
    Source,
    Target,
    RouterSource,
    Named(&'static str),
}

/// The node names of a graph in order of first appearance.
#[derive(Default)]
struct Table<'a> {
    nodes: Vec<&'a Ident>,
}

impl<'a> Table<'a> {
    /// Registers an identifier seen in `role`, refusing reserved names where they cannot stand.
    fn endpoint(&mut self, ident: &'a Ident, role: Role, errors: &mut Errors) {
        let name = ident.to_string();
        match (name.as_str(), role) {
            ("start", Role::Source) | ("end", Role::Target) => return,
            ("start", Role::RouterSource) => return, // refused with a better message in pass 2
            ("start", Role::Named(what)) => {
                errors.push(
                    ident.span(),
                    format!("`start` cannot be {what}; it is where the run begins (add a node: `start -> a;`)"),
                );
                return;
            }
            ("start", _) => {
                errors.push(ident.span(), "`start` is where the run begins; no edge can lead to it");
                return;
            }
            ("end", Role::Source | Role::RouterSource) => {
                errors.push(ident.span(), "`end` is where the run finishes; it has no edges");
                return;
            }
            ("end", Role::Named(what)) => {
                errors.push(ident.span(), format!("`end` cannot be {what}; it is where the run finishes"));
                return;
            }
            (word, _) if KEYWORDS.contains(&word) => {
                errors.push(
                    ident.span(),
                    format!("`{word}` is a keyword of `graph!` and cannot name a node; rename the node's function"),
                );
                return;
            }
            _ => {}
        }
        if self.index(ident).is_none() {
            self.nodes.push(ident);
        }
    }

    fn index(&self, ident: &Ident) -> Option<usize> {
        self.nodes.iter().position(|n| *n == ident)
    }

    fn target(&self, ident: &Ident) -> Option<Target> {
        if ident == "end" {
            Some(Target::End)
        } else {
            self.index(ident).map(Target::Node)
        }
    }
}

/// `review_step` → `ReviewStep`; raw identifiers lose their `r#`.
pub fn upper_camel(name: &str) -> String {
    let name = name.strip_prefix("r#").unwrap_or(name);
    let mut out = String::with_capacity(name.len());
    let mut upper = true;
    for c in name.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, 'N');
    }
    out
}
