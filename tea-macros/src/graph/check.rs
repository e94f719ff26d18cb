//! Checking a parsed graph and lowering it to the model the expansion works from.
//!
//! Every problem is collected (never just the first) and spanned on the identifier that causes
//! it. The checks that need the syntax live here: reserved names, routers and fan-outs mixed with
//! edges, breakpoints on unknown nodes, interrupt nodes that route with `|`. The checks of the
//! graph's shape — duplicate and shadowed edges, fan-outs without branches or with a branch that
//! is their source or join, unreachable nodes, nodes with no way to `end`, branches that never
//! reach their join or leave their branch, pauses in nested fan-outs — are
//! `tea_check`'s, shared with the YAML front end; this module lowers the graph to a
//! `tea_check::Graph` and puts each problem on the identifier it is about.
//!
//! The node table lists nodes in order of first appearance. A problem about one statement (an
//! edge of a list, a fan-out) goes back among the errors of that statement, so errors keep the
//! statements' order. A node nothing routes out of, named like a node nothing leads to, is one
//! error ("unknown node `bok`: no statement routes out of it; did you mean `book`?",
//! `tea_check::suggest`), and the path checks are skipped: they would only repeat it.

use super::parse::{GraphDef, GuardRef, Setting, Stmt, SubgraphDef, When};
use proc_macro2::Span;
use std::collections::BTreeSet;
use syn::{Ident, LitInt, Type};
use tea_check::suggest;
pub use tea_check::Target;
use tea_check::{At, Kind, Source, Spelling};

/// Words of the `graph!` language that cannot name a node.
const KEYWORDS: &[&str] =
    &["parallel", "interrupt", "interrupt_before", "interrupt_after", "interruptible", "subgraph"];

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

    /// How many errors there are so far: where a later error can be put back in order.
    fn len(&self) -> usize {
        self.0.len()
    }

    fn insert(&mut self, position: usize, span: Span, message: impl std::fmt::Display) {
        self.0.insert(position, syn::Error::new(span, message));
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
    /// `context T;`: the type of the run context.
    pub context: Option<&'a Type>,
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
    /// Listed in an `async` statement: its function returns a future.
    pub is_async: bool,
    pub interrupt_before: bool,
    pub interrupt_after: bool,
    /// A subgraph node's `parent -> a | b`: where its child may route this graph (empty: not
    /// declared, and then anywhere).
    pub jumps: Vec<usize>,
    /// `retry node(…);`, `timeout node(…);`, `cache node(…);`.
    pub retry: Option<&'a Setting>,
    pub timeout: Option<&'a Setting>,
    pub cache: Option<&'a Setting>,
}

#[cfg_attr(test, derive(Debug))]
pub enum NodeKind<'a> {
    /// A node run by the function of the same name.
    Function,
    /// `interrupt ask(payload => answer, timeout = …)`: no function.
    Interrupt { payload: &'a Ident, answer: &'a Ident, timeout: Option<&'a LitInt> },
    /// `subgraph node = Child;`: runs a child graph, no function.
    Subgraph(&'a SubgraphDef),
}

#[cfg_attr(test, derive(Debug))]
pub enum Routing<'a> {
    /// Edges tried in order; `implicit` marks a branch head's silent edge to its join.
    Edges { routes: Vec<Route<'a>>, implicit: bool },
    /// `a -> b | c;`: the node returns a `Command` naming one of the targets.
    Router(Vec<Target>),
    /// `parallel a => [heads] -> join;`; `each`: `parallel a => head* -> join;`, where `a`
    /// returns a `Command` sending `head` once per item.
    Fork { heads: Vec<usize>, join: usize, each: bool },
}

#[cfg_attr(test, derive(Debug))]
pub struct Route<'a> {
    pub guard: Option<&'a GuardRef>,
    pub to: Target,
}

pub fn check(def: &GraphDef) -> Result<Model<'_>, Rejected> {
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
            Stmt::Subgraph(sub) => {
                table.endpoint(&sub.node, Role::Named("a subgraph node"), &mut errors);
                for target in &sub.jumps {
                    table.endpoint(
                        target,
                        Role::Named("a target of `parent ->` (a child graph routes its parent to a node)"),
                        &mut errors,
                    );
                }
            }
            Stmt::Breakpoint { .. }
            | Stmt::Interruptible { .. }
            | Stmt::Async { .. }
            | Stmt::Policy(_)
            | Stmt::Context(_) => {}
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
            is_async: false,
            interrupt_before: false,
            interrupt_after: false,
            jumps: Vec::new(),
            retry: None,
            timeout: None,
            cache: None,
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

    // Pass 2: routing, declarations and breakpoints. An error that drops an edge or a routing
    // declaration leaves a graph whose paths are not the user's: `shape_known` turns the path
    // checks off then, rather than report nodes cut off only by the dropped statement.
    let mut shape_known = !def.incomplete && !table.refused;
    let mut start: Vec<Route> = Vec::new();
    let mut interrupt_declared: BTreeSet<usize> = BTreeSet::new();
    let mut context: Option<&Type> = None;
    let mut declared: Vec<Option<Declared>> = vec![None; nodes.len()];
    // Where each node's successors are named, for errors about one edge.
    let mut edge_spans: Vec<Vec<(Target, Span)>> = vec![Vec::new(); nodes.len()];
    // Where the edges of edge lists and the parts of fan-outs are written, in statement order:
    // for `tea_check`'s problems about one statement.
    let mut located: Vec<Located> = Vec::new();
    for stmt in &def.stmts {
        match stmt {
            Stmt::Edge(edge) => {
                let Some(to) = table.target(&edge.to) else {
                    continue;
                };
                let guard = edge.guard.as_ref();
                let (routes, from) = if edge.from == "start" {
                    (&mut start, Source::Start)
                } else {
                    let Some(from) = table.index(&edge.from) else {
                        continue;
                    };
                    if let Some(what) = declared[from] {
                        errors.push(
                            edge.from.span(),
                            format!(
                                "node `{}` is {}, so it cannot also have plain edges; remove this edge",
                                edge.from,
                                what.describe()
                            ),
                        );
                        shape_known = false;
                        continue;
                    }
                    let Routing::Edges { routes, .. } = &mut nodes[from].routing else {
                        continue;
                    };
                    (routes, Source::Node(from))
                };
                // Duplicate and shadowed edges are `tea_check`'s to find: all edges are kept.
                let at = At::Listed { from, index: routes.len() };
                located.push(Located { at, span: edge.to.span(), position: errors.len() });
                routes.push(Route { guard, to });
                if let Source::Node(from) = from {
                    edge_spans[from].push((to, edge.to.span()));
                }
            }
            Stmt::Router { from, targets } => {
                if from == "start" {
                    errors.push(from.span(), "`start` has no function to choose with; route it with edges (`start -> a;`, `start -> a if guard;`)");
                    table.start_refused = true;
                    continue;
                }
                let Some(index) = table.index(from) else {
                    continue;
                };
                if let Err(message) = claim_routing(&nodes[index], declared[index], Declared::Router) {
                    errors.push(from.span(), message);
                    shape_known = false;
                    continue;
                }
                declared[index] = Some(Declared::Router);
                let mut list = Vec::new();
                for target in targets {
                    let Some(to) = table.target(target) else {
                        continue;
                    };
                    if list.contains(&to) {
                        errors.push(target.span(), format!("`{target}` is listed twice"));
                    } else {
                        list.push(to);
                        edge_spans[index].push((to, target.span()));
                    }
                }
                nodes[index].routing = Routing::Router(list);
            }
            Stmt::Parallel { source, heads, bracket, join, each } => {
                let (Some(index), Some(join_index)) = (table.index(source), table.index(join)) else {
                    continue;
                };
                if let Err(message) = claim_routing(&nodes[index], declared[index], Declared::Fork) {
                    errors.push(source.span(), message);
                    shape_known = false;
                    continue;
                }
                declared[index] = Some(Declared::Fork);
                // A fan-out with no branches, or with a branch or a join that cannot be, is
                // `tea_check`'s to find: the fan-out is kept as written.
                let position = errors.len();
                located.push(Located { at: At::Fork(index), span: *bracket, position });
                let mut list: Vec<usize> = Vec::new();
                for head in heads {
                    // A reserved name was refused where it stands.
                    let Some(h) = table.index(head) else { continue };
                    located.push(Located {
                        at: At::Branch { fork: index, index: list.len() },
                        span: head.span(),
                        position,
                    });
                    list.push(h);
                }
                let to_join = Target::Node(join_index);
                located.push(Located { at: At::Edge { from: index, to: to_join }, span: join.span(), position });
                edge_spans[index].push((to_join, join.span()));
                nodes[index].routing = Routing::Fork { heads: list, join: join_index, each: *each };
            }
            Stmt::Breakpoint { when, nodes: listed } => {
                let keyword = match when {
                    When::Before => "interrupt_before",
                    When::After => "interrupt_after",
                };
                for ident in listed {
                    let Some(index) = known_node(&table, &nodes, ident, keyword, &mut errors) else {
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
                    let Some(index) = known_node(&table, &nodes, ident, "interruptible", &mut errors) else {
                        continue;
                    };
                    if nodes[index].interruptible {
                        errors.push(ident.span(), format!("`{ident}` is declared `interruptible` twice"));
                    }
                    nodes[index].interruptible = true;
                }
            }
            Stmt::Async { nodes: listed } => {
                for ident in listed {
                    if ident == "start" || ident == "end" {
                        errors.push(
                            ident.span(),
                            format!(
                                "`{ident}` has no function, so it cannot be `async`; \
                                 list the nodes whose functions are `async fn`s"
                            ),
                        );
                        continue;
                    }
                    let Some(index) = known_node(&table, &nodes, ident, "async", &mut errors) else {
                        continue;
                    };
                    if nodes[index].is_async {
                        errors.push(ident.span(), format!("`{ident}` is declared `async` twice"));
                    }
                    nodes[index].is_async = true;
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
            Stmt::Policy(policy) => {
                let ident = &policy.node;
                if ident == "start" || ident == "end" {
                    errors.push(
                        ident.span(),
                        format!(
                            "`{ident}` runs no function, so it takes no `{}`; name a node of the graph",
                            policy.keyword
                        ),
                    );
                    continue;
                }
                let Some(index) = known_node(&table, &nodes, ident, policy.keyword, &mut errors) else {
                    continue;
                };
                let slot = match &policy.setting {
                    Setting::Retry { .. } => &mut nodes[index].retry,
                    Setting::Timeout { .. } => &mut nodes[index].timeout,
                    Setting::Cache { .. } => &mut nodes[index].cache,
                };
                if slot.is_some() {
                    errors.push(ident.span(), format!("`{} {ident}` is declared twice", policy.keyword));
                    continue;
                }
                *slot = Some(&policy.setting);
            }
            Stmt::Context(ty) => {
                if context.is_some() {
                    errors.push(syn::spanned::Spanned::span(ty), "the graph's `context` is declared twice");
                }
                context = Some(ty);
            }
            Stmt::Subgraph(sub) => {
                let Some(index) = table.index(&sub.node) else {
                    continue;
                };
                if !interrupt_declared.insert(index) {
                    errors.push(
                        sub.node.span(),
                        format!("node `{}` is already declared as an interrupt or subgraph node", sub.node),
                    );
                    continue;
                }
                nodes[index].kind = NodeKind::Subgraph(sub);
                for target in &sub.jumps {
                    // `start` and `end` were refused where they stand.
                    let Some(to) = table.index(target) else { continue };
                    if nodes[index].jumps.contains(&to) {
                        errors.push(target.span(), format!("`{target}` is listed twice"));
                    } else {
                        nodes[index].jumps.push(to);
                    }
                }
            }
        }
    }
    for node in &nodes {
        if matches!(node.kind, NodeKind::Interrupt { .. }) {
            for (keyword, set) in [("retry", node.retry), ("timeout", node.timeout), ("cache", node.cache)] {
                if set.is_some() {
                    errors.push(
                        node.ident.span(),
                        format!(
                            "`{}` is an interrupt node (it has no function), so it takes no `{keyword}`",
                            node.name
                        ),
                    );
                }
            }
        }
        if matches!(node.kind, NodeKind::Interrupt { .. }) && matches!(node.routing, Routing::Router(_)) {
            errors.push(
                node.ident.span(),
                format!(
                    "`{}` is an interrupt node (it has no function), so it cannot choose its next node with `|`; \
                     route it with edges (`{0} -> a if guard; {0} -> b;`)",
                    node.name
                ),
            );
        }
        if matches!(node.routing, Routing::Fork { each: true, .. }) {
            let refused = match node.kind {
                NodeKind::Interrupt { .. } => Some("an interrupt node (it has no function to send with)"),
                NodeKind::Subgraph(_) => Some("a subgraph node (it has no function to send with)"),
                NodeKind::Function if node.interrupt_after => {
                    Some("stopped by `interrupt_after` (its sends would be lost at the pause; stop before the target instead)")
                }
                NodeKind::Function => None,
            };
            if let Some(what) = refused {
                errors.push(
                    node.ident.span(),
                    format!("`{}` sends (`parallel {0} => …* -> …;`), so it cannot be {what}", node.name),
                );
            }
        }
        if matches!(node.kind, NodeKind::Subgraph(_)) {
            let refused = if node.interruptible {
                Some("be `interruptible` (its child graph pauses by itself)")
            } else if node.is_async {
                Some("be `async` (its child graph's nodes are what may be async)")
            } else if matches!(node.routing, Routing::Router(_)) {
                Some("choose its next node with `|`; route it with edges (`node -> a;`, `node -> a if guard;`)")
            } else {
                None
            };
            if let Some(what) = refused {
                errors.push(
                    node.ident.span(),
                    format!(
                        "`{}` is a subgraph node (it runs a child graph, not a function), so it cannot {what}",
                        node.name
                    ),
                );
            }
        }
        if node.is_async && matches!(node.kind, NodeKind::Interrupt { .. }) {
            errors.push(
                node.ident.span(),
                format!("`{}` is an interrupt node (it has no function), so it cannot be `async`", node.name),
            );
        }
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
    let forks: Vec<(Vec<usize>, usize)> = nodes
        .iter()
        .filter_map(|n| match &n.routing {
            Routing::Fork { heads, join, .. } => Some((heads.clone(), *join)),
            _ => None,
        })
        .collect();
    for (heads, join) in &forks {
        for &head in heads {
            if let Routing::Edges { routes, implicit } = &mut nodes[head].routing {
                if routes.is_empty() {
                    routes.push(Route { guard: None, to: Target::Node(*join) });
                    *implicit = true;
                }
            }
        }
    }

    // A node that nothing routes out of, named like a node that nothing leads to, is most likely
    // that node misspelled (`search -> bok;` … `book -> end;`): one error on the name, and no
    // path checks, which would report both halves of the typo as two misleading problems.
    let mut unknown: Vec<String> = Vec::new();
    let mut led_to = vec![false; nodes.len()];
    let mut targets: Vec<Target> = start.iter().map(|r| r.to).collect();
    for node in &nodes {
        match &node.routing {
            Routing::Edges { routes, .. } => targets.extend(routes.iter().map(|r| r.to)),
            Routing::Router(listed) => targets.extend(listed),
            Routing::Fork { heads, join, .. } => targets.extend(heads.iter().chain([join]).map(|&i| Target::Node(i))),
        }
        targets.extend(node.jumps.iter().map(|&i| Target::Node(i)));
    }
    for target in targets {
        if let Target::Node(i) = target {
            led_to[i] = true;
        }
    }
    let routes_out = |node: &Node| match (&node.kind, &node.routing) {
        (NodeKind::Function, Routing::Edges { routes, implicit }) => !routes.is_empty() && !implicit,
        _ => true,
    };
    let cut_off: Vec<&str> =
        nodes.iter().zip(&led_to).filter(|(n, led)| !**led && routes_out(n)).map(|(n, _)| n.name.as_str()).collect();
    for node in nodes.iter().filter(|n| !routes_out(n)) {
        if let Some(meant) = suggest(&node.name, cut_off.iter().copied()) {
            errors.push(
                node.ident.span(),
                format!("unknown node `{}`: no statement routes out of it; did you mean `{meant}`?", node.name),
            );
            unknown.push(node.ident.to_string());
            shape_known = false;
        }
    }

    // The graph's shape, checked by `tea_check`. Its problems about one statement (an edge of a
    // list, a fan-out) go back among the errors of the statements, where that statement stands.
    let shape = lower(&nodes, &start);
    let mut path_problems = Vec::new();
    let mut inserts = Vec::new();
    for problem in tea_check::check(&shape, Spelling::GraphMacro) {
        match (problem.kind, problem.at) {
            // Reported below, naming the graph, unless an error where `start` stands already says it.
            (Kind::NoStart, _) => {}
            (kind, _) if kind.is_about_paths() => {
                if shape_known {
                    path_problems.push(problem);
                }
            }
            (_, at) => match located.iter().position(|l| l.at == at) {
                Some(entry) => inserts.push((entry, problem.message)),
                None => errors.push(span_at(at, &nodes, &edge_spans, def), problem.message),
            },
        }
    }
    // Later statements first, so that each position still counts the errors before it.
    inserts.sort_by_key(|(entry, _)| std::cmp::Reverse(*entry));
    for (entry, message) in inserts {
        let Located { span, position, .. } = located[entry];
        errors.insert(position, span, message);
    }

    let start_written = def.stmts.iter().any(|stmt| matches!(stmt, Stmt::Edge(edge) if edge.from == "start"));
    if table.start_refused || (start.is_empty() && start_written) {
        // Already reported where `start` stands, or at the edge out of it that was refused.
    } else if start.is_empty() && !def.stmts.is_empty() {
        // Suggest the first node nothing leads to: most likely where the user meant to begin.
        let example = tea_check::suggested_entry(&shape).map_or("first_node", |i| nodes[i].name.as_str());
        errors.push(
            def.name.span(),
            format!("graph `{}` has no edge out of `start`; add one, e.g. `start -> {example};`", def.name),
        );
    } else if start.is_empty() {
        errors.push(
            def.name.span(),
            format!("graph `{}` is empty; give it edges, e.g. `start -> first_node; first_node -> end;`", def.name),
        );
    }

    // A node nothing leads to may be where a child graph routes its parent: say how to declare it.
    let first_subgraph = nodes.iter().find_map(|n| match n.kind {
        NodeKind::Subgraph(sub) => Some((n.name.as_str(), sub)),
        _ => None,
    });
    for problem in path_problems {
        let span = span_at(problem.at, &nodes, &edge_spans, def);
        let message = match (problem.kind, problem.at, first_subgraph) {
            (Kind::Unreachable, At::Node(i), Some((sub_node, sub))) => format!(
                "{}; or, if a child graph routes here with `Command::parent`, declare it: \
                 `subgraph {sub_node} = {}, parent -> {};`",
                problem.message,
                match &sub.mapping {
                    Some((input, output)) => format!(
                        "{}({} => {})",
                        super::parse::path_string(&sub.child),
                        super::parse::path_string(input),
                        super::parse::path_string(output)
                    ),
                    None => super::parse::path_string(&sub.child),
                },
                nodes[i].name
            ),
            _ => problem.message,
        };
        errors.push(span, message);
    }

    let can_pause = nodes.iter().any(|n| {
        n.interruptible || n.interrupt_before || n.interrupt_after || matches!(n.kind, NodeKind::Interrupt { .. })
    });
    match errors.into_error() {
        Some(error) => Err(Rejected { error, unknown }),
        None => Ok(Model { nodes, start, can_pause, context }),
    }
}

/// A graph that did not pass its checks: every problem, and the names reported as unknown
/// nodes (the fallback expansion does not look for their functions: that would report the same
/// typo again).
#[cfg_attr(test, derive(Debug))]
pub struct Rejected {
    pub error: syn::Error,
    pub unknown: Vec<String>,
}

/// A part of a statement that `tea_check` may report on (an edge of a list, a fan-out, one of its
/// branches, its join), written at `span`; the statement's errors start at `position` among the
/// errors.
#[derive(Clone, Copy)]
struct Located {
    at: At,
    span: Span,
    position: usize,
}

/// The graph's shape, as `tea_check` reads it.
pub fn lower(nodes: &[Node], start: &[Route]) -> tea_check::Graph {
    let edges = |routes: &[Route]| -> Vec<tea_check::Edge> {
        routes.iter().map(|r| tea_check::Edge { to: r.to, guard: r.guard.map(GuardRef::label) }).collect()
    };
    tea_check::Graph {
        nodes: nodes
            .iter()
            .map(|node| tea_check::Node {
                name: node.name.clone(),
                routing: match &node.routing {
                    Routing::Edges { routes, .. } => tea_check::Routing::Edges(edges(routes)),
                    Routing::Router(targets) => tea_check::Routing::Router(targets.clone()),
                    Routing::Fork { heads, join, .. } => tea_check::Routing::Fork { heads: heads.clone(), join: *join },
                },
                can_pause: node.interruptible
                    || node.interrupt_before
                    || node.interrupt_after
                    || matches!(node.kind, NodeKind::Interrupt { .. }),
                jumps: node.jumps.clone(),
            })
            .collect(),
        start: edges(start),
    }
}

/// Where a problem `tea_check` found is reported: the node's first identifier, or the identifier
/// that names an edge's target.
fn span_at(at: At, nodes: &[Node], edge_spans: &[Vec<(Target, Span)>], def: &GraphDef) -> Span {
    match at {
        At::Node(i) => nodes[i].ident.span(),
        At::Edge { from, to } => {
            edge_spans[from].iter().find(|(t, _)| *t == to).map_or_else(|| nodes[from].ident.span(), |(_, span)| *span)
        }
        At::Listed { from: Source::Node(i), .. } | At::Fork(i) | At::Branch { fork: i, .. } => nodes[i].ident.span(),
        At::Listed { from: Source::Start, .. } | At::Start => def.name.span(),
    }
}

/// How a node's routing was declared, when not by edges.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Declared {
    Router,
    Fork,
}

impl Declared {
    fn describe(self) -> &'static str {
        match self {
            Declared::Router => "a router (`node -> a | b;`)",
            Declared::Fork => "the source of a `parallel` statement",
        }
    }
}

fn claim_routing(node: &Node, declared: Option<Declared>, what: Declared) -> Result<(), String> {
    let name = &node.name;
    match (declared, what) {
        (Some(Declared::Router), Declared::Router) => {
            return Err(format!(
                "node `{name}` is already a router in an earlier statement; list all its targets in one: \
                 `{name} -> a | b | c;`"
            ));
        }
        (Some(Declared::Fork), Declared::Fork) => {
            return Err(format!(
                "node `{name}` already fans out in an earlier `parallel` statement; a node fans out once, \
                 so list all its branches there: `parallel {name} => [a, b, c] -> join;`"
            ));
        }
        (Some(previous), _) => {
            return Err(format!(
                "node `{name}` is already {}; it cannot also be {}",
                previous.describe(),
                what.describe()
            ));
        }
        (None, _) => {}
    }
    if let Routing::Edges { routes, .. } = &node.routing {
        if !routes.is_empty() {
            return Err(format!(
                "node `{name}` already has edges, so it cannot also be {}; remove its `{name} -> …;` edges",
                what.describe()
            ));
        }
    }
    Ok(())
}

fn known_node(table: &Table, nodes: &[Node], ident: &Ident, keyword: &str, errors: &mut Errors) -> Option<usize> {
    let index = table.index(ident);
    if index.is_none() {
        let hint = match suggest(&ident.to_string(), nodes.iter().map(|n| n.name.as_str())) {
            Some(known) => format!("; did you mean `{known}`?"),
            None => String::new(),
        };
        errors.push(ident.span(), format!("`{keyword}` names `{ident}`, which is not a node of this graph{hint}"));
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
    /// A reserved name was refused where a node stands, so a statement lost an endpoint.
    refused: bool,
    /// `start` was refused where it stood; that error already tells the user to add `start -> a;`.
    start_refused: bool,
    /// Keywords already reported as node names (once each, not at every use).
    keywords_reported: BTreeSet<String>,
}

impl<'a> Table<'a> {
    /// Registers an identifier seen in `role`, refusing reserved names where they cannot stand.
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
                self.start_refused = true;
            }
            ("start", _) => errors.push(ident.span(), "`start` is where the run begins; no edge can lead to it"),
            ("end", Role::Source | Role::RouterSource) => {
                errors.push(ident.span(), "`end` is where the run finishes; no edge can leave it")
            }
            ("end", Role::Named(what)) => {
                errors.push(ident.span(), format!("`end` cannot be {what}; it is where the run finishes"))
            }
            (word, _) if KEYWORDS.contains(&word) => {
                if self.keywords_reported.insert(name.clone()) {
                    errors.push(
                        ident.span(),
                        format!(
                            "`{word}` is a keyword of `graph!` and cannot name a node; \
                             rename the function and the node everywhere in the graph"
                        ),
                    );
                }
            }
            _ => {
                if self.index(ident).is_none() {
                    self.nodes.push(ident);
                }
                return;
            }
        }
        self.refused = true;
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

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    /// The messages `check` reports for a graph, in order, or nothing when it passes.
    fn problems(def: GraphDef) -> Vec<String> {
        match check(&def) {
            Ok(_) => Vec::new(),
            Err(rejected) => rejected.error.into_iter().map(|e| e.to_string()).collect(),
        }
    }

    #[test]
    fn a_node_only_a_childs_parent_jump_reaches_is_declared_on_the_subgraph_node() {
        let undeclared: GraphDef = parse_quote! {
            Ward for S {
                start -> sorter;
                sorter -> close;
                quarantine -> close;
                close -> end;
                subgraph sorter = Sorter(to => from);
            }
        };
        assert_eq!(
            problems(undeclared),
            ["node `quarantine` is unreachable: no path from `start` leads to it; add an edge to it or remove it; \
              or, if a child graph routes here with `Command::parent`, declare it: \
              `subgraph sorter = Sorter(to => from), parent -> quarantine;`"]
        );
        let declared: GraphDef = parse_quote! {
            Ward for S {
                start -> sorter;
                sorter -> close;
                quarantine -> close;
                close -> end;
                subgraph sorter = Sorter(to => from), parent -> quarantine;
            }
        };
        assert_eq!(problems(declared), Vec::<String>::new());
    }

    #[test]
    fn a_sound_graph_passes() {
        let def: GraphDef = parse_quote! {
            Flow for S {
                start -> a;
                a -> b if ok;
                a -> c;
                b -> c | end;
                parallel c => [x, y] -> j;
                x -> x2;
                x2 -> j;
                j -> end;
            }
        };
        assert_eq!(problems(def), Vec::<String>::new());
    }

    #[test]
    fn path_problems_come_with_the_others_when_the_shape_is_known() {
        let def: GraphDef = parse_quote! {
            Flow for S {
                start -> a;
                a -> end;
                a -> end;
                lost -> end;
                interrupt_before b;
            }
        };
        let found = problems(def);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found[0].starts_with("duplicate edge `a -> end`"));
        assert!(found[1].starts_with("`interrupt_before` names `b`"));
        assert!(found[2].starts_with("node `lost` is unreachable"));
    }

    #[test]
    fn path_problems_are_not_guessed_when_a_statement_was_dropped() {
        // The edge into `start` is refused, so `b` seems to have no edge: that is not reported.
        let def: GraphDef = parse_quote! {
            Flow for S { start -> a; a -> b; b -> start; }
        };
        assert_eq!(problems(def), ["`start` is where the run begins; no edge can lead to it"]);
    }

    #[test]
    fn pauses_inside_nested_fan_outs_and_interrupt_routers_are_refused() {
        let found = problems(parse_quote! {
            Flow for S {
                start -> a;
                parallel a => [b, c] -> j;
                parallel b => [x, y] -> k;
                k -> j;
                j -> ask;
                ask -> end | a;
                interrupt_before x;
                interrupt ask(q => r);
            }
        });
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found.iter().any(|f| f.starts_with("`ask` is an interrupt node")), "{found:?}");
        assert!(
            found.iter().any(|f| f.starts_with("node `x` can pause, but it runs in the fan-out after `b`")),
            "{found:?}"
        );
    }

    #[test]
    fn a_keyword_as_a_node_is_reported_once() {
        let def: GraphDef = parse_quote! {
            Flow for S { start -> parallel; parallel -> end; }
        };
        let found = problems(def);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("`parallel` is a keyword of `graph!`"));
    }

    #[test]
    fn a_refused_start_does_not_also_count_as_a_missing_start() {
        let def: GraphDef = parse_quote! {
            Flow for S { parallel start => [a, b] -> j; j -> end; }
        };
        assert_eq!(problems(def).len(), 1);
    }

    #[test]
    fn unknown_nodes_in_declarations_get_a_suggestion() {
        let def: GraphDef = parse_quote! {
            Flow for S { start -> review; review -> end; interrupt_after reveiw; interruptible zzz; }
        };
        assert_eq!(
            problems(def),
            [
                "`interrupt_after` names `reveiw`, which is not a node of this graph; did you mean `review`?",
                "`interruptible` names `zzz`, which is not a node of this graph",
            ]
        );
    }

    #[test]
    fn async_names_nodes_with_functions_once_each() {
        let def: GraphDef = parse_quote! {
            Flow for S {
                start -> fetch;
                fetch -> ask;
                ask -> end;
                interrupt ask(q => a);
                async fetch, fecth, start, fetch, ask;
            }
        };
        assert_eq!(
            problems(def),
            [
                "`async` names `fecth`, which is not a node of this graph; did you mean `fetch`?",
                "`start` has no function, so it cannot be `async`; list the nodes whose functions are `async fn`s",
                "`fetch` is declared `async` twice",
                "`ask` is an interrupt node (it has no function), so it cannot be `async`",
            ]
        );
    }

    #[test]
    fn a_subgraph_node_cannot_be_async() {
        let def: GraphDef = parse_quote! {
            Flow for S { start -> research; research -> end; subgraph research = Researcher; async research; }
        };
        assert_eq!(
            problems(def),
            ["`research` is a subgraph node (it runs a child graph, not a function), so it cannot be `async` \
              (its child graph's nodes are what may be async)"]
        );
    }

    #[test]
    fn async_nodes_are_marked_in_the_model() {
        let def: GraphDef = parse_quote! {
            Flow for S { start -> a; a -> b | end; b -> end; async b; interruptible b; }
        };
        let model = check(&def).expect("a sound graph");
        let marked: Vec<(&str, bool, bool)> =
            model.nodes.iter().map(|n| (n.name.as_str(), n.is_async, n.interruptible)).collect();
        assert_eq!(marked, [("a", false, false), ("b", true, true)]);
    }

    #[test]
    fn fan_out_problems_keep_their_statement_s_place_among_the_errors() {
        let found = problems(parse_quote! {
            Flow for S {
                start -> a;
                parallel a => [x, a] -> j;
                interrupt_before zzz;
                parallel j => [] -> k;
                x -> j;
                k -> end;
            }
        });
        assert_eq!(
            found,
            [
                "`a` is the source of this `parallel` statement; it cannot also be one of its branches",
                "`interrupt_before` names `zzz`, which is not a node of this graph",
                "a `parallel` statement needs at least one branch: `parallel a => [x, y] -> join;`",
            ]
        );
    }

    #[test]
    fn a_misspelled_node_is_one_error_with_the_name_it_means() {
        let def: GraphDef = parse_quote! {
            Flow for S { start -> search; search -> bok; book -> end; }
        };
        let Err(rejected) = check(&def) else { panic!("a misspelled node passed") };
        let found: Vec<String> = rejected.error.into_iter().map(|e| e.to_string()).collect();
        assert_eq!(found, ["unknown node `bok`: no statement routes out of it; did you mean `book`?"]);
        assert_eq!(rejected.unknown, ["bok"]);
    }

    #[test]
    fn a_dead_end_like_no_cut_off_node_is_still_a_dead_end() {
        // `boo` resembles `book`, but something leads to `book`: the graph is not a typo of it.
        let found = problems(parse_quote! {
            Flow for S { start -> book; book -> boo; }
        });
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("node `boo` has no outgoing edge"), "{found:?}");
    }

    #[test]
    fn fallbacks_name_the_edge_that_shadows() {
        let def: GraphDef = parse_quote! {
            Flow for S { start -> a; a -> b; a -> c; b -> end; c -> end; }
        };
        let found = problems(def);
        assert!(found[0].contains("`a` already has an unguarded edge, `a -> b`"), "{found:?}");
        assert!(found[0].contains("`a -> b | c;`"), "{found:?}");
    }
}
