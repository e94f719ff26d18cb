//! The checks of a graph's paths: every node reachable from the entry and able to reach the exit,
//! every branch staying inside itself until its join, no pause inside a nested fan-out.
//!
//! Each problem is reported once, where it is fixed: the first node of an unreachable part, the
//! node without edges rather than every node leading to it, the way into a loop with no exit
//! rather than each of its nodes. [`check`](crate::check) skips these checks when an edge is
//! never taken or a fan-out is malformed: the graph is then not the one its author meant.

use crate::{At, Graph, Kind, Problem, Routing, Spelling, Target};

pub(crate) fn check(graph: &Graph, spelling: Spelling, problems: &mut Vec<Problem>) {
    let nodes = &graph.nodes;
    let count = nodes.len();
    let mut push = |at: At, kind: Kind, message: String| problems.push(Problem { at, kind, message });
    let successors = |i: usize, into_branches: bool| -> Vec<Target> {
        match &nodes[i].routing {
            Routing::Edges(edges) => edges.iter().map(|e| e.to).collect(),
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
    // Past a fan-out, to its join: how the node's own line goes on (a subgraph node's declared
    // jumps included: its child may route the run there).
    let next = |i: usize| -> Vec<usize> {
        let mut next: Vec<usize> = successors(i, false).into_iter().filter_map(node_of).collect();
        next.extend(nodes[i].jumps.iter().copied());
        next
    };
    // Into the branches and to the join alike: everything a node leads to.
    let next_all = |i: usize| -> Vec<usize> {
        let mut all: Vec<usize> = successors(i, true).into_iter().filter_map(node_of).collect();
        all.extend(next(i));
        all
    };
    let names = |set: &[bool]| -> String {
        let listed: Vec<String> =
            (0..count).filter(|&i| set[i]).map(|i| format!("`{}`", nodes[i].name)).take(5).collect();
        let more = if set.iter().filter(|&&b| b).count() > listed.len() { ", …" } else { "" };
        format!("{}{more}", listed.join(", "))
    };
    let (start, end) = (spelling.start(), spelling.end());
    let forks: Vec<(usize, &[usize], usize)> = nodes
        .iter()
        .enumerate()
        .filter_map(|(i, n)| match &n.routing {
            Routing::Fork { heads, join } => Some((i, heads.as_slice(), *join)),
            _ => None,
        })
        .collect();

    let from_start: Vec<usize> = graph.start.iter().filter_map(|e| node_of(e.to)).collect();
    let reachable = closure(count, &from_start, next_all);
    let main_line = closure(count, &from_start, next);
    let dead_end: Vec<bool> = (0..count).map(|i| successors(i, false).is_empty()).collect();
    let reaches_end = fixed_point(count, |i, known: &[bool]| {
        successors(i, false).iter().any(|t| match t {
            Target::End => true,
            Target::Node(n) => known[*n],
        }) || nodes[i].jumps.iter().any(|&n| known[n])
    });
    let reaches_dead_end = fixed_point(count, |i, known: &[bool]| dead_end[i] || next(i).iter().any(|&n| known[n]));

    // Branches: the nodes reachable from a head without passing its join (the innermost branch
    // of a node wins, since a nested fan-out is passed to its own join). An edge leaving the
    // branch is reported on the edge, after the other problems.
    let mut branch_of: Vec<Option<(usize, usize)>> = vec![None; count];
    let mut branch_problems: Vec<Problem> = Vec::new();
    for &(source, heads, join) in &forks {
        for (index, &head) in heads.iter().enumerate() {
            if heads[..index].contains(&head) {
                continue; // listed twice: reported once, as `Kind::DuplicateBranch`
            }
            let (head_name, join_name) = (&nodes[head].name, &nodes[join].name);
            let fan_out = spelling.fan_out(&nodes[source].name);
            let mut seen = vec![false; count];
            let mut stack = vec![head];
            while let Some(i) = stack.pop() {
                if std::mem::replace(&mut seen[i], true) {
                    continue;
                }
                if branch_of[i].is_none() {
                    branch_of[i] = Some((head, join));
                }
                for to in successors(i, false) {
                    let at = At::Edge { from: i, to };
                    match to {
                        Target::Node(n) if n == join => {}
                        Target::Node(n) if n == source || main_line[n] => branch_problems.push(Problem {
                            at,
                            kind: Kind::LeavesBranch,
                            message: format!(
                                "this edge leaves branch `{head_name}` for `{}`, which is not part of the branch; \
                                 a branch of {fan_out} must reach its join `{join_name}` before the run goes on",
                                nodes[n].name
                            ),
                        }),
                        Target::Node(n) => stack.push(n),
                        Target::End => branch_problems.push(Problem {
                            at,
                            kind: Kind::EndsInBranch,
                            message: format!(
                                "this edge ends the run inside branch `{head_name}`; a branch of {fan_out} must \
                                 reach its join `{join_name}` instead"
                            ),
                        }),
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
                "node `{name}` is unreachable: no path from `{start}` leads to it, nor to {} after it; \
                 add an edge to `{name}` or remove them",
                names(&part)
            )
        } else {
            format!("node `{name}` is unreachable: no path from `{start}` leads to it; add an edge to it or remove it")
        };
        push(At::Node(i), Kind::Unreachable, message);
    }

    for (i, node) in nodes.iter().enumerate() {
        if !reachable[i] {
            continue;
        }
        let name = &node.name;
        if dead_end[i] {
            let message = match branch_of[i] {
                Some((head, join)) => format!(
                    "node `{name}` has no outgoing edge; it is in branch `{}`, so add one towards its join: `{}`",
                    nodes[head].name,
                    spelling.add_edge(name, &nodes[join].name)
                ),
                None => format!("node `{name}` has no outgoing edge; add one, e.g. `{}`", spelling.add_edge(name, end)),
            };
            push(At::Node(i), Kind::DeadEnd, message);
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
                "node `{name}` never reaches `{end}`: every path from it loops through {}; add an edge towards `{end}`",
                names(&trapped)
            ),
        };
        push(At::Node(i), Kind::NoWayToEnd, message);
    }

    // A fan-out nested inside a branch runs to its join in one go: nothing in it can pause.
    for &(source, heads, join) in &forks {
        let Some((outer, _)) = branch_of[source] else { continue };
        let mut seen = vec![false; count];
        let mut stack = heads.to_vec();
        while let Some(i) = stack.pop() {
            if i == join || std::mem::replace(&mut seen[i], true) {
                continue;
            }
            if nodes[i].can_pause {
                branch_problems.push(Problem {
                    at: At::Node(i),
                    kind: Kind::PauseInNestedFanOut,
                    message: format!(
                        "node `{}` can pause, but it runs in the fan-out after `{}`, nested inside branch `{}`, \
                         where tea cannot pause; pause before `{}` or after the nested join `{}` instead",
                        nodes[i].name, nodes[source].name, nodes[outer].name, nodes[source].name, nodes[join].name
                    ),
                });
            }
            stack.extend(next_all(i));
        }
    }
    problems.extend(branch_problems);
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

pub(crate) fn node_of(target: Target) -> Option<usize> {
    match target {
        Target::Node(i) => Some(i),
        Target::End => None,
    }
}
