//! The checks on small graphs, most built by name ([`Graph::builder`]): where each problem is
//! reported, its kind and message, and what is not checked once the graph is not the one meant.

use super::*;

fn macro_graph() -> Builder {
    Graph::builder(Spelling::GraphMacro)
}

/// The messages `check` reports for a graph, in order.
fn messages(graph: &Graph) -> Vec<String> {
    check(graph, Spelling::GraphMacro).iter().map(Problem::to_string).collect()
}

#[test]
fn a_sound_graph_passes() {
    // start -> a; a -> b if ok; a -> c; b -> c | end; parallel c => [x, y] -> j; x -> x2; x2 -> j;
    // y -> j; j -> end;
    let graph = macro_graph()
        .edge("start", "a", None)
        .edge("a", "b", Some("ok"))
        .edge("a", "c", None)
        .router("b", ["c", "end"])
        .fork("c", ["x", "y"], "j")
        .edge("x", "x2", None)
        .edge("x2", "j", None)
        .edge("y", "j", None)
        .edge("j", "end", None)
        .build();
    assert_eq!(messages(&graph), Vec::<String>::new());
}

#[test]
fn a_loop_without_exit_is_reported_once_where_the_run_enters_it() {
    let graph = macro_graph()
        .edge("start", "a", None)
        .edge("a", "b", Some("ok"))
        .edge("a", "end", None)
        .edge("b", "c", None)
        .edge("c", "b", None)
        .build();
    let problems = check(&graph, Spelling::GraphMacro);
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0].at, At::Node(1));
    assert_eq!(problems[0].kind, Kind::NoWayToEnd);
    assert_eq!(
        problems[0].message,
        "node `b` never reaches `end`: every path from it loops through `b`, `c`; add an edge towards `end`"
    );
}

#[test]
fn a_node_without_edges_is_reported_not_the_nodes_leading_to_it() {
    let graph = macro_graph().edge("start", "a", None).edge("a", "b", None).edge("b", "c", None).build();
    assert_eq!(messages(&graph), ["node `c` has no outgoing edge; add one, e.g. `c -> end;`"]);
    assert_eq!(
        check(&graph, Spelling::Yaml)[0].message,
        "node `c` has no outgoing edge; add one, e.g. `- { from: c, to: __end__ }`"
    );
}

#[test]
fn an_unreachable_part_is_reported_on_its_first_node() {
    let graph = macro_graph()
        .edge("start", "a", None)
        .edge("a", "end", None)
        .edge("c", "end", None)
        .edge("b", "c", None)
        .build();
    let problems = check(&graph, Spelling::GraphMacro);
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0].at, At::Node(graph.index("b").unwrap()));
    assert_eq!(
        problems[0].message,
        "node `b` is unreachable: no path from `start` leads to it, nor to `c` after it; add an edge to `b` or remove them"
    );
    let graph =
        macro_graph().edge("start", "a", None).edge("a", "end", None).edge("x", "y", None).edge("y", "x", None).build();
    assert_eq!(messages(&graph).len(), 1, "a loop cut off from `start` is one problem");
}

#[test]
fn a_branch_problem_is_reported_on_its_edge_and_only_there() {
    let graph = macro_graph()
        .edge("start", "a", None)
        .fork("a", ["x", "y"], "j")
        .edge("x", "after", None)
        .edge("y", "j", None)
        .edge("j", "after", None)
        .edge("after", "end", None)
        .build();
    let problems = check(&graph, Spelling::GraphMacro);
    assert_eq!(problems.len(), 1, "{problems:?}");
    let (x, after) = (graph.index("x").unwrap(), graph.index("after").unwrap());
    assert_eq!(problems[0].at, At::Edge { from: x, to: Target::Node(after) });
    assert_eq!(problems[0].kind, Kind::LeavesBranch);
    assert_eq!(
        problems[0].message,
        "this edge leaves branch `x` for `after`, which is not part of the branch; a branch of `parallel a` must \
         reach its join `j` before the run goes on"
    );

    let graph = macro_graph()
        .edge("start", "a", None)
        .fork("a", ["x", "y"], "j")
        .edge("x", "x2", None)
        .edge("x2", "x", None)
        .edge("y", "stuck", None)
        .edge("j", "end", None)
        .build();
    assert_eq!(
        messages(&graph),
        [
            "branch `x` never reaches its join `j`: every path from it loops through `x`, `x2`; add an edge to `j`",
            "node `stuck` has no outgoing edge; it is in branch `y`, so add one towards its join: `stuck -> j;`",
        ]
    );
}

#[test]
fn a_branch_that_ends_the_run_is_reported_on_the_edge_to_the_exit() {
    let graph = macro_graph()
        .edge("start", "a", None)
        .fork("a", ["x", "y"], "j")
        .edge("x", "j", Some("ok"))
        .edge("x", "end", None)
        .edge("y", "j", None)
        .edge("j", "end", None)
        .build();
    let problems = check(&graph, Spelling::GraphMacro);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].at, At::Edge { from: graph.index("x").unwrap(), to: Target::End });
    assert_eq!(problems[0].kind, Kind::EndsInBranch);
}

#[test]
fn pauses_inside_nested_fan_outs_are_refused() {
    let graph = macro_graph()
        .edge("start", "a", None)
        .fork("a", ["b", "c"], "j")
        .fork("b", ["x", "y"], "k")
        .edge("x", "k", None)
        .edge("y", "k", None)
        .edge("k", "j", None)
        .edge("c", "j", None)
        .edge("j", "end", None)
        .can_pause("x")
        .can_pause("c")
        .build();
    let problems = check(&graph, Spelling::GraphMacro);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].at, At::Node(graph.index("x").unwrap()));
    assert_eq!(
        problems[0].message,
        "node `x` can pause, but it runs in the fan-out after `b`, nested inside branch `b`, where tea cannot \
         pause; pause before `b` or after the nested join `k` instead"
    );
}

#[test]
fn duplicate_edges_are_reported_on_the_repeat_and_the_paths_still_checked() {
    let graph = macro_graph()
        .edge("start", "a", None)
        .edge("a", "b", Some("ok"))
        .edge("a", "b", Some("!ok"))
        .edge("a", "b", Some("ok"))
        .edge("b", "end", None)
        .edge("lost", "end", None)
        .build();
    let problems = check(&graph, Spelling::GraphMacro);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert_eq!(problems[0].at, At::Listed { from: Source::Node(0), index: 2 });
    assert_eq!(problems[0].message, "duplicate edge `a -> b if ok`; remove one of them");
    assert_eq!(problems[1].kind, Kind::Unreachable);
    assert_eq!(
        check(&graph, Spelling::Yaml)[0].message,
        "duplicate edge `{ from: a, to: b, when: ok }`; remove one of them"
    );
}

#[test]
fn an_edge_after_the_fallback_is_never_taken_and_the_paths_are_not_guessed() {
    let graph = macro_graph()
        .edge("start", "a", None)
        .edge("a", "b", None)
        .edge("a", "c", None)
        .edge("a", "d", Some("ok"))
        .edge("b", "end", None)
        .edge("c", "end", None)
        .build();
    let problems = check(&graph, Spelling::GraphMacro);
    assert_eq!(problems.len(), 2, "`d` has no edge, but that is not reported: {problems:?}");
    assert_eq!(problems[0].at, At::Listed { from: Source::Node(0), index: 1 });
    assert_eq!(problems[0].kind, Kind::NeverTaken);
    assert_eq!(
        problems[0].message,
        "this edge is never taken: `a` already has an unguarded edge, `a -> b`, which always applies; give one of \
         them a guard (`a -> c if …;`), or make `a` a router (`a -> b | c;`)"
    );
    assert_eq!(
        problems[1].message,
        "this edge is never taken: the unguarded edge `a -> b` before it always applies; put the guarded edges \
         first and the unguarded fallback last"
    );
    let yaml = check(&graph, Spelling::Yaml);
    assert_eq!(
        yaml[0].message,
        "this edge is never taken: `a` already has an unconditional edge, `{ from: a, to: b }`, which always \
         applies; give one of them a condition (`when: …`)"
    );
}

#[test]
fn the_entry_s_edges_are_checked_too() {
    let graph = macro_graph().edge("start", "a", None).edge("start", "b", None).edge("a", "end", None).build();
    let problems = check(&graph, Spelling::GraphMacro);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].at, At::Listed { from: Source::Start, index: 1 });
    assert_eq!(
        problems[0].message,
        "this edge is never taken: `start` already has an unguarded edge, `start -> a`, which always applies; give \
         one of them a guard (`start -> b if …;`)"
    );
}

#[test]
fn a_graph_without_an_entry_suggests_the_first_node_nothing_leads_to() {
    let graph = macro_graph().edge("b", "end", None).edge("a", "b", None).build();
    assert_eq!(suggested_entry(&graph), Some(1));
    let problems = check(&graph, Spelling::Yaml);
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0].at, At::Start);
    assert_eq!(
        problems[0].message,
        "the graph has no edge out of `__start__`; add one, e.g. `- { from: __start__, to: a }`"
    );
    assert_eq!(messages(&Graph::default()), ["the graph is empty; give it edges, e.g. `start -> first_node;`"]);
}

#[test]
fn an_index_out_of_range_is_reported_instead_of_checked() {
    let graph = Graph {
        nodes: vec![Node::new("a", Routing::Fork { heads: vec![3], join: 0 })],
        start: vec![Edge::to(Target::Node(0)), Edge::to(Target::Node(7))],
    };
    let problems = check(&graph, Spelling::GraphMacro);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems.iter().all(|p| p.kind == Kind::UnknownIndex));
    assert_eq!(problems[0].at, At::Listed { from: Source::Start, index: 1 });
    assert_eq!(problems[1].message, "node index 3 is out of range: the graph has 1 node");
}

#[test]
fn the_builder_numbers_nodes_in_order_of_first_appearance() {
    let graph = Graph::builder(Spelling::Yaml)
        .node("first")
        .edge("__start__", "first", None)
        .edge("first", "end", Some("done"))
        .edge("first", "__end__", None)
        .build();
    assert_eq!(graph.nodes.len(), 2, "`end` is an ordinary name in YAML");
    assert_eq!(graph.index("end"), Some(1));
    assert_eq!(
        graph.nodes[0].routing,
        Routing::Edges(vec![Edge::guarded(Target::Node(1), "done"), Edge::to(Target::End)])
    );
    assert_eq!(graph.start, [Edge::to(Target::Node(0))]);
}

#[test]
fn a_fan_out_needs_branches_that_are_neither_its_source_nor_its_join() {
    let graph = macro_graph().edge("start", "plan", None).fork("plan", [], "merge").edge("merge", "end", None).build();
    let problems = check(&graph, Spelling::GraphMacro);
    assert_eq!(problems.len(), 1, "the paths are not guessed: {problems:?}");
    assert_eq!((problems[0].at, problems[0].kind), (At::Fork(0), Kind::BadFork));
    assert_eq!(
        check(&graph, Spelling::Yaml)[0].message,
        "the fan-out at `plan` has no branches; list them: `- { from: plan, parallel: [a, b], fan_in: merge }`"
    );

    let graph = macro_graph()
        .edge("start", "plan", None)
        .fork("plan", ["draft", "plan", "merge"], "merge")
        .edge("draft", "merge", None)
        .edge("merge", "end", None)
        .build();
    let problems = check(&graph, Spelling::GraphMacro);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert_eq!(problems[0].at, At::Branch { fork: 0, index: 1 });
    assert_eq!(
        problems[0].message,
        "`plan` is the source of this `parallel` statement; it cannot also be one of its branches"
    );
    assert_eq!(problems[1].at, At::Branch { fork: 0, index: 2 });
    assert_eq!(
        check(&graph, Spelling::Yaml)[1].message,
        "`merge` is the fan-in of the fan-out at `plan`; it cannot also be one of its branches"
    );

    let graph = macro_graph().edge("start", "plan", None).fork("plan", ["draft"], "plan").build();
    let problems = check(&graph, Spelling::GraphMacro);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].at, At::Edge { from: 0, to: Target::Node(0) });
    assert_eq!(problems[0].message, "a `parallel` statement cannot join at its own source");
}

#[test]
fn a_branch_listed_twice_is_reported_once_and_walked_once() {
    // `draft` leaves its branch: that is reported once, not once per listing.
    let graph = macro_graph()
        .edge("start", "plan", None)
        .fork("plan", ["draft", "outline", "draft"], "merge")
        .edge("draft", "after", None)
        .edge("outline", "merge", None)
        .edge("merge", "after", None)
        .edge("after", "end", None)
        .build();
    let problems = check(&graph, Spelling::GraphMacro);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert_eq!(problems[0].at, At::Branch { fork: 0, index: 2 });
    assert_eq!(
        (problems[0].kind, problems[0].message.as_str()),
        (Kind::DuplicateBranch, "branch `draft` is listed twice")
    );
    assert_eq!(problems[1].kind, Kind::LeavesBranch);
}

#[test]
fn a_node_reached_only_by_a_declared_parent_jump_is_reachable() {
    // start -> review; review -> publish; publish -> end; quarantine -> end;
    // and review's child may route its parent to `quarantine` (`Command::parent`).
    let shape = || {
        macro_graph().edge("start", "review", None).edge("review", "publish", None).edge("publish", "end", None).edge(
            "quarantine",
            "end",
            None,
        )
    };
    assert_eq!(
        messages(&shape().build()),
        ["node `quarantine` is unreachable: no path from `start` leads to it; add an edge to it or remove it"]
    );
    assert_eq!(messages(&shape().jumps("review", ["quarantine"]).build()), Vec::<String>::new());
    // A jump into a loop with no exit is still one.
    let graph = shape().jumps("review", ["quarantine", "trap"]).edge("trap", "trap", None).build();
    assert_eq!(
        messages(&graph),
        ["node `trap` never reaches `end`: every path from it loops through `trap`; add an edge towards `end`"]
    );
    // The node's own routing still needs a way on.
    let graph = macro_graph()
        .edge("start", "review", None)
        .jumps("review", ["quarantine"])
        .edge("quarantine", "end", None)
        .build();
    assert_eq!(messages(&graph), ["node `review` has no outgoing edge; add one, e.g. `review -> end;`"]);
}
