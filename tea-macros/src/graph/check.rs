//! Checking a parsed graph and lowering it to the model the expansion works from.
//!
//! Every problem is collected (never just the first) and spanned on the identifier that causes
//! it: reserved names, duplicate and shadowed edges, routers and fan-outs mixed with edges,
//! breakpoints on unknown nodes, unreachable nodes, nodes with no way to `end`, branches that
//! never reach their join or leave their branch.

use super::parse::{GraphDef, GuardRef, Stmt, When};
use crate::suggest::suggest;
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

    // Pass 2: routing, declarations and breakpoints. An error that drops an edge or a routing
    // declaration leaves a graph whose paths are not the user's: `shape_known` turns the path
    // checks off then, rather than report nodes cut off only by the dropped statement.
    let mut shape_known = !def.incomplete && !table.refused;
    let mut start: Vec<Route> = Vec::new();
    let mut start_fallback: Option<&Ident> = None;
    let mut interrupt_declared: BTreeSet<usize> = BTreeSet::new();
    let mut declared: Vec<Option<Declared>> = vec![None; nodes.len()];
    let mut fallback: Vec<Option<&Ident>> = vec![None; nodes.len()];
    // Where each node's successors are named, for errors about one edge.
    let mut edge_spans: Vec<Vec<(Target, Span)>> = vec![Vec::new(); nodes.len()];
    for stmt in &def.stmts {
        match stmt {
            Stmt::Edge(edge) => {
                let Some(to) = table.target(&edge.to) else {
                    continue;
                };
                let guard = edge.guard.as_ref();
                let (routes, fallback_target, from) = if edge.from == "start" {
                    (&mut start, &mut start_fallback, None)
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
                    (routes, &mut fallback[from], Some(from))
                };
                let source = &edge.from;
                let label = guard.map(GuardRef::label);
                if routes.iter().any(|r| r.to == to && r.guard.map(GuardRef::label) == label) {
                    let what = match &label {
                        Some(label) => format!("`{source} -> {} if {label}`", edge.to),
                        None => format!("`{source} -> {}`", edge.to),
                    };
                    errors.push(edge.to.span(), format!("duplicate edge {what}; remove one of them"));
                    continue;
                }
                if let Some(earlier) = *fallback_target {
                    let message = match &label {
                        Some(_) => format!(
                            "this edge is never taken: the unguarded edge `{source} -> {earlier}` before it always \
                             applies; put the guarded edges first and the unguarded fallback last"
                        ),
                        None => format!(
                            "this edge is never taken: `{source}` already has an unguarded edge, `{source} -> {earlier}`, \
                             which always applies; give one of them a guard (`{source} -> {to} if …;`), or make \
                             `{source}` a router (`{source} -> {earlier} | {to};`)",
                            to = edge.to
                        ),
                    };
                    errors.push(edge.to.span(), message);
                    shape_known = false;
                    continue;
                }
                if guard.is_none() {
                    *fallback_target = Some(&edge.to);
                }
                routes.push(Route { guard, to });
                if let Some(from) = from {
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
            Stmt::Parallel { source, heads, bracket, join } => {
                let (Some(index), Some(join_index)) = (table.index(source), table.index(join)) else {
                    continue;
                };
                if let Err(message) = claim_routing(&nodes[index], declared[index], Declared::Fork) {
                    errors.push(source.span(), message);
                    shape_known = false;
                    continue;
                }
                declared[index] = Some(Declared::Fork);
                if heads.is_empty() {
                    errors.push(
                        *bracket,
                        "a `parallel` statement needs at least one branch: `parallel a => [x, y] -> join;`",
                    );
                    shape_known = false;
                    continue;
                }
                let mut list: Vec<usize> = Vec::new();
                for head in heads {
                    let Some(h) = table.index(head) else { continue };
                    if list.contains(&h) {
                        errors.push(head.span(), format!("branch `{head}` is listed twice"));
                    } else if h == index {
                        errors.push(head.span(), format!("`{head}` is the source of this `parallel` statement; it cannot also be one of its branches"));
                        shape_known = false;
                    } else if h == join_index {
                        errors.push(head.span(), format!("`{head}` is the join of this `parallel` statement; it cannot also be one of its branches"));
                        shape_known = false;
                    } else {
                        list.push(h);
                    }
                }
                if join_index == index {
                    errors.push(join.span(), "a `parallel` statement cannot join at its own source");
                    shape_known = false;
                    continue;
                }
                edge_spans[index].push((Target::Node(join_index), join.span()));
                nodes[index].routing = Routing::Fork { heads: list, join: join_index };
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

    let start_written = def.stmts.iter().any(|stmt| matches!(stmt, Stmt::Edge(edge) if edge.from == "start"));
    if table.start_refused || (start.is_empty() && start_written) {
        // Already reported where `start` stands, or at the edge out of it that was refused.
    } else if start.is_empty() && !def.stmts.is_empty() {
        // Suggest the first node nothing leads to: most likely where the user meant to begin.
        let mut led_to = vec![false; nodes.len()];
        for node in &nodes {
            let targets: Vec<Target> = match &node.routing {
                Routing::Edges { routes, .. } => routes.iter().map(|r| r.to).collect(),
                Routing::Router(targets) => targets.clone(),
                Routing::Fork { heads, join } => heads.iter().chain([join]).map(|&n| Target::Node(n)).collect(),
            };
            for n in targets.into_iter().filter_map(node_of) {
                led_to[n] = true;
            }
        }
        let first =
            nodes.iter().zip(&led_to).find(|(_, led_to)| !**led_to).or_else(|| nodes.iter().zip(&led_to).next());
        let example = first.map_or("first_node", |(node, _)| node.name.as_str());
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

    if shape_known && !start.is_empty() {
        check_paths(&nodes, &start, &forks, &edge_spans, &mut errors);
    }

    let can_pause = nodes.iter().any(|n| {
        n.interruptible || n.interrupt_before || n.interrupt_after || matches!(n.kind, NodeKind::Interrupt { .. })
    });
    match errors.into_error() {
        Some(error) => Err(error),
        None => Ok(Model { nodes, start, can_pause }),
    }
}

/// The checks of a graph's paths, run once its statements are all understood: every node
/// reachable from `start` and able to reach `end`, every branch staying inside itself until its
/// join.
///
/// Each problem is reported once, where it is fixed: the first node of an unreachable part, the
/// node without edges rather than every node leading to it, the way into a loop with no exit
/// rather than each of its nodes.
fn check_paths(
    nodes: &[Node],
    start: &[Route],
    forks: &[(usize, Vec<usize>, usize)],
    edge_spans: &[Vec<(Target, Span)>],
    errors: &mut Errors,
) {
    let count = nodes.len();
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
    // Past a fan-out, to its join: how the node's own line goes on.
    let next = |i: usize| -> Vec<usize> { successors(i, false).into_iter().filter_map(node_of).collect() };
    // Into the branches and to the join alike: everything a node leads to.
    let next_all = |i: usize| -> Vec<usize> {
        let mut all: Vec<usize> = successors(i, true).into_iter().filter_map(node_of).collect();
        all.extend(next(i));
        all
    };
    let edge_span = |i: usize, target: Target| -> Span {
        edge_spans[i].iter().find(|(t, _)| *t == target).map_or_else(|| nodes[i].ident.span(), |(_, span)| *span)
    };
    let names = |set: &[bool]| -> String {
        let listed: Vec<String> =
            (0..count).filter(|&i| set[i]).map(|i| format!("`{}`", nodes[i].name)).take(5).collect();
        let more = if set.iter().filter(|&&b| b).count() > listed.len() { ", …" } else { "" };
        format!("{}{more}", listed.join(", "))
    };

    let from_start: Vec<usize> = start.iter().filter_map(|r| node_of(r.to)).collect();
    let reachable = closure(count, &from_start, next_all);
    let main_line = closure(count, &from_start, next);
    let dead_end: Vec<bool> = (0..count).map(|i| successors(i, false).is_empty()).collect();
    let reaches_end = fixed_point(count, |i, known: &[bool]| {
        successors(i, false).iter().any(|t| match t {
            Target::End => true,
            Target::Node(n) => known[*n],
        })
    });
    let reaches_dead_end = fixed_point(count, |i, known: &[bool]| dead_end[i] || next(i).iter().any(|&n| known[n]));

    // Branches: the nodes reachable from a head without passing its join (the innermost branch
    // of a node wins, since a nested fan-out is passed to its own join). An edge leaving the
    // branch is reported on the edge.
    let mut branch_of: Vec<Option<(usize, usize)>> = vec![None; count];
    let mut branch_errors = Errors::default();
    for (source, heads, join) in forks {
        for &head in heads {
            let (head_name, join_name, source_name) = (&nodes[head].name, &nodes[*join].name, &nodes[*source].name);
            let mut seen = vec![false; count];
            let mut stack = vec![head];
            while let Some(i) = stack.pop() {
                if std::mem::replace(&mut seen[i], true) {
                    continue;
                }
                if branch_of[i].is_none() {
                    branch_of[i] = Some((head, *join));
                }
                for target in successors(i, false) {
                    match target {
                        Target::Node(n) if n == *join => {}
                        Target::Node(n) if n == *source || main_line[n] => branch_errors.push(
                            edge_span(i, target),
                            format!(
                                "this edge leaves branch `{head_name}` for `{}`, which is not part of the branch; \
                                 a branch of `parallel {source_name}` must reach its join `{join_name}` before the run goes on",
                                nodes[n].name
                            ),
                        ),
                        Target::Node(n) => stack.push(n),
                        Target::End => branch_errors.push(
                            edge_span(i, target),
                            format!(
                                "this edge ends the run inside branch `{head_name}`; a branch of `parallel {source_name}` \
                                 must reach its join `{join_name}` instead"
                            ),
                        ),
                    }
                }
            }
        }
    }

    // Unreachable parts: each reported once, on a node no other unreachable node leads to when
    // there is one (a part that is only a loop is reported on its first node).
    let mut covered = vec![false; count];
    let led_to: Vec<bool> = {
        let mut led_to = vec![false; count];
        for p in (0..count).filter(|&p| !reachable[p]) {
            for n in next_all(p) {
                if n != p {
                    led_to[n] = true;
                }
            }
        }
        led_to
    };
    let roots = (0..count).filter(|&i| !reachable[i] && !led_to[i]);
    let rest = (0..count).filter(|&i| !reachable[i] && led_to[i]);
    for i in roots.chain(rest) {
        if covered[i] {
            continue;
        }
        let mut part = closure(count, &[i], next_all);
        for n in 0..count {
            part[n] &= !reachable[n] && !covered[n];
            covered[n] |= part[n];
        }
        part[i] = false;
        let name = &nodes[i].name;
        let message = if part.iter().any(|&b| b) {
            format!(
                "node `{name}` is unreachable: no path from `start` leads to it, nor to {} after it; \
                 add an edge to `{name}` or remove them",
                names(&part)
            )
        } else {
            format!("node `{name}` is unreachable: no path from `start` leads to it; add an edge to it or remove it")
        };
        errors.push(nodes[i].ident.span(), message);
    }

    for (i, node) in nodes.iter().enumerate() {
        if !reachable[i] {
            continue;
        }
        let name = &node.name;
        if dead_end[i] {
            let message = match branch_of[i] {
                Some((head, join)) => format!(
                    "node `{name}` has no outgoing edge; it is in branch `{}`, so add one towards its join: `{name} -> {};`",
                    nodes[head].name, nodes[join].name
                ),
                None => format!("node `{name}` has no outgoing edge; add one, e.g. `{name} -> end;`"),
            };
            errors.push(node.ident.span(), message);
            continue;
        }
        if reaches_end[i] || reaches_dead_end[i] {
            continue;
        }
        // A node caught in a loop with no exit: reported where the run enters the loop.
        let entered =
            from_start.contains(&i) || (0..count).any(|p| reachable[p] && reaches_end[p] && next_all(p).contains(&i));
        if !entered {
            continue;
        }
        let trapped = closure(count, &[i], next);
        let message = match branch_of[i] {
            Some((head, join)) if head == i => format!(
                "branch `{name}` never reaches its join `{join}`: every path from it loops through {}; add an edge to `{join}`",
                names(&trapped),
                join = nodes[join].name
            ),
            Some((head, join)) => format!(
                "node `{name}` in branch `{}` never reaches the join `{join}`: every path from it loops through {}; \
                 add an edge to `{join}`",
                nodes[head].name,
                names(&trapped),
                join = nodes[join].name
            ),
            None => format!(
                "node `{name}` never reaches `end`: every path from it loops through {}; add an edge towards `end`",
                names(&trapped)
            ),
        };
        errors.push(node.ident.span(), message);
    }
    // A fan-out nested inside a branch runs to its join in one go: nothing in it can pause.
    let can_pause = |i: usize| {
        let n = &nodes[i];
        n.interruptible || n.interrupt_before || n.interrupt_after || matches!(n.kind, NodeKind::Interrupt { .. })
    };
    for (source, heads, join) in forks {
        let Some((outer, _)) = branch_of[*source] else { continue };
        let mut seen = vec![false; count];
        let mut stack = heads.clone();
        while let Some(i) = stack.pop() {
            if i == *join || std::mem::replace(&mut seen[i], true) {
                continue;
            }
            if can_pause(i) {
                branch_errors.push(
                    nodes[i].ident.span(),
                    format!(
                        "node `{}` can pause, but it runs in the fan-out after `{}`, nested inside branch `{}`, \
                         where tea cannot pause; pause before `{}` or after the nested join `{}` instead",
                        nodes[i].name, nodes[*source].name, nodes[outer].name, nodes[*source].name, nodes[*join].name
                    ),
                );
            }
            stack.extend(next_all(i));
        }
    }
    errors.0.extend(branch_errors.0);
}

/// The nodes reachable from `seeds` (themselves included) by `next`.
fn closure(count: usize, seeds: &[usize], next: impl Fn(usize) -> Vec<usize>) -> Vec<bool> {
    let mut found = vec![false; count];
    let mut stack = seeds.to_vec();
    while let Some(i) = stack.pop() {
        if !std::mem::replace(&mut found[i], true) {
            stack.extend(next(i));
        }
    }
    found
}

/// The least set closed under `holds`: a node is in it once `holds(node, set so far)`.
fn fixed_point(count: usize, holds: impl Fn(usize, &[bool]) -> bool) -> Vec<bool> {
    let mut set = vec![false; count];
    let mut changed = true;
    while changed {
        changed = false;
        for i in 0..count {
            if !set[i] && holds(i, &set) {
                set[i] = true;
                changed = true;
            }
        }
    }
    set
}

fn node_of(target: Target) -> Option<usize> {
    match target {
        Target::Node(i) => Some(i),
        Target::End => None,
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
            Err(error) => error.into_iter().map(|e| e.to_string()).collect(),
        }
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
    fn a_loop_without_exit_is_reported_once_where_the_run_enters_it() {
        let def: GraphDef = parse_quote! {
            Flow for S {
                start -> a;
                a -> b if ok;
                a -> end;
                b -> c;
                c -> b;
            }
        };
        assert_eq!(
            problems(def),
            ["node `b` never reaches `end`: every path from it loops through `b`, `c`; add an edge towards `end`"]
        );
    }

    #[test]
    fn a_node_without_edges_is_reported_not_the_nodes_leading_to_it() {
        let def: GraphDef = parse_quote! {
            Flow for S { start -> a; a -> b; b -> c; }
        };
        assert_eq!(problems(def), ["node `c` has no outgoing edge; add one, e.g. `c -> end;`"]);
    }

    #[test]
    fn an_unreachable_part_is_reported_on_its_first_node() {
        let def: GraphDef = parse_quote! {
            Flow for S { start -> a; a -> end; c -> end; b -> c; }
        };
        assert_eq!(
            problems(def),
            ["node `b` is unreachable: no path from `start` leads to it, nor to `c` after it; add an edge to `b` or remove them"]
        );
        let def: GraphDef = parse_quote! {
            Flow for S { start -> a; a -> end; x -> y; y -> x; }
        };
        assert_eq!(problems(def).len(), 1, "a loop cut off from `start` is one problem");
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
    fn a_branch_problem_is_reported_on_its_edge_and_only_there() {
        let def: GraphDef = parse_quote! {
            Flow for S {
                start -> a;
                parallel a => [x, y] -> j;
                x -> after;
                j -> after;
                after -> end;
            }
        };
        let found = problems(def);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("this edge leaves branch `x` for `after`"), "{found:?}");

        let def: GraphDef = parse_quote! {
            Flow for S {
                start -> a;
                parallel a => [x, y] -> j;
                x -> x2;
                x2 -> x;
                y -> stuck;
                j -> end;
            }
        };
        assert_eq!(
            problems(def),
            [
                "branch `x` never reaches its join `j`: every path from it loops through `x`, `x2`; add an edge to `j`",
                "node `stuck` has no outgoing edge; it is in branch `y`, so add one towards its join: `stuck -> j;`",
            ]
        );
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
    fn fallbacks_name_the_edge_that_shadows() {
        let def: GraphDef = parse_quote! {
            Flow for S { start -> a; a -> b; a -> c; b -> end; c -> end; }
        };
        let found = problems(def);
        assert!(found[0].contains("`a` already has an unguarded edge, `a -> b`"), "{found:?}");
        assert!(found[0].contains("`a -> b | c;`"), "{found:?}");
    }
}
