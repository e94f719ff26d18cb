//! The core language and engine on graphs that do not pause: order, reducers, guards, routers,
//! errors, the context, streaming and the drawings.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Calc {
    value: i64,
    #[reducer(append)]
    trail: Vec<String>,
    #[reducer(sum)]
    visits: u32,
}

fn step(name: &str) -> CalcUpdate {
    Calc::update().trail(vec![name.to_owned()]).visits(1)
}

mod linear {
    use super::*;

    fn first(_: &Calc) -> CalcUpdate {
        step("first").value(1)
    }
    fn second(s: &Calc) -> CalcUpdate {
        step("second").value(s.value * 10)
    }
    fn third(s: &Calc) -> CalcUpdate {
        step("third").value(s.value + 3)
    }

    graph! {
        pub Linear for Calc {
            start -> first;
            first -> second;
            second -> third;
            third -> end;
        }
    }

    #[test]
    fn nodes_run_in_order_and_updates_go_through_the_reducers() {
        let out = Linear::builder().build().invoke(Calc { visits: 100, ..Calc::default() }).unwrap();
        assert_eq!(out.trail, ["first", "second", "third"]);
        assert_eq!(out.value, 13);
        assert_eq!(out.visits, 103, "sum adds onto the input");
    }

    #[test]
    fn the_stream_reports_every_node_then_done() {
        let app = Linear::builder().build();
        let events: Vec<Event<Calc>> = app.stream(Calc::default()).collect::<Result<_, _>>().unwrap();
        assert_eq!(events.len(), 4);
        let mut expected_trail = Vec::new();
        for (event, name) in events.iter().zip(["first", "second", "third"]) {
            expected_trail.push(name.to_owned());
            match event {
                Event::Step { node, branch, state, .. } => {
                    assert_eq!(*node, name);
                    assert!(branch.is_none());
                    assert_eq!(state.trail, expected_trail, "each event carries the state after its node");
                }
                other => panic!("expected a step, got {other:?}"),
            }
        }
        match &events[3] {
            Event::Done(state) => assert_eq!(state.value, 13),
            other => panic!("expected done, got {other:?}"),
        }
    }

    #[test]
    fn drawings_show_every_node_and_edge() {
        assert!(Linear::MERMAID.starts_with("flowchart TD"));
        for line in ["__start__ --> first", "first --> second", "second --> third", "third --> __end__"] {
            assert!(Linear::MERMAID.contains(line), "MERMAID lacks {line:?}:\n{}", Linear::MERMAID);
        }
        assert!(Linear::DOT.starts_with("digraph Linear {"));
        for line in ["\"__start__\" -> \"first\";", "\"second\" -> \"third\";", "\"third\" -> \"__end__\";"] {
            assert!(Linear::DOT.contains(line), "DOT lacks {line:?}:\n{}", Linear::DOT);
        }
        assert_eq!(Linear::NAME, "Linear");
        assert_eq!(LinearNode::ALL, [LinearNode::First, LinearNode::Second, LinearNode::Third]);
        assert_eq!(LinearNode::Second.to_string(), "second");
    }
}

mod conditional_loop {
    use super::*;

    fn add_five(s: &Calc) -> CalcUpdate {
        step("add_five").value(s.value + 5)
    }
    fn double(s: &Calc) -> CalcUpdate {
        step("double").value(s.value * 2)
    }
    fn above_ten(s: &Calc) -> bool {
        s.value > 10
    }

    graph! {
        pub Loop for Calc {
            start -> add_five;
            add_five -> end if above_ten;
            add_five -> double;
            double -> add_five;
        }
    }

    #[test]
    fn loops_until_the_guard_holds() {
        let out = Loop::builder().build().invoke(Calc { value: 1, ..Calc::default() }).unwrap();
        assert_eq!(out.value, 17);
        assert_eq!(out.trail, ["add_five", "double", "add_five"]);
    }

    #[test]
    fn the_guard_is_drawn_on_its_edge() {
        assert!(Loop::MERMAID.contains("add_five -->|\"above_ten\"| __end__"), "{}", Loop::MERMAID);
        assert!(Loop::DOT.contains("\"add_five\" -> \"__end__\" [label=\"above_ten\"];"), "{}", Loop::DOT);
    }

    fn forever(_: &Calc) -> CalcUpdate {
        Calc::update().visits(1)
    }
    fn never(_: &Calc) -> bool {
        false
    }

    graph! {
        Endless for Calc {
            start -> forever;
            forever -> end if never;
            forever -> forever;
        }
    }

    #[test]
    fn an_endless_loop_stops_at_the_recursion_limit() {
        let err = Endless::builder().build().invoke(Calc::default()).unwrap_err();
        assert!(matches!(err, Error::RecursionLimit { limit: 10_000 }), "{err:?}");
        let err = Endless::builder().recursion_limit(25).build().invoke(Calc::default()).unwrap_err();
        assert!(matches!(err, Error::RecursionLimit { limit: 25 }), "{err:?}");
        assert!(err.to_string().contains("25 steps"), "{err}");
    }

    #[test]
    fn a_run_within_the_limit_is_not_cut() {
        // add_five, double, add_five: three steps.
        let out = Loop::builder().recursion_limit(3).build().invoke(Calc { value: 1, ..Calc::default() });
        assert_eq!(out.unwrap().value, 17);
        let err = Loop::builder().recursion_limit(2).build().invoke(Calc { value: 1, ..Calc::default() });
        assert!(matches!(err, Err(Error::RecursionLimit { limit: 2 })));
    }
}

mod guards {
    use super::*;

    fn classify(_: &Calc) {}
    fn low(_: &Calc) -> CalcUpdate {
        step("low")
    }
    fn mid(_: &Calc) -> CalcUpdate {
        step("mid")
    }
    fn high(_: &Calc) -> CalcUpdate {
        step("high")
    }
    fn is_low(s: &Calc) -> bool {
        s.value < 10
    }
    fn is_mid(s: &Calc) -> bool {
        s.value < 100
    }
    fn is_known(s: &Calc) -> bool {
        s.value >= 0
    }

    graph! {
        pub ThreeWay for Calc {
            start -> classify;
            classify -> low if is_low;
            classify -> mid if is_mid;
            classify -> high;
            low -> end;
            mid -> end;
            high -> end;
        }
    }

    graph! {
        pub Negated for Calc {
            start -> classify;
            classify -> low if !is_known;
            classify -> high if !is_mid;
            low -> end;
            high -> end;
        }
    }

    fn run(value: i64) -> Vec<String> {
        ThreeWay::builder().build().invoke(Calc { value, ..Calc::default() }).unwrap().trail
    }

    #[test]
    fn guards_are_tried_in_order_and_the_fallback_comes_last() {
        assert_eq!(run(3), ["low"]);
        assert_eq!(run(50), ["mid"]);
        assert_eq!(run(500), ["high"]);
    }

    #[test]
    fn negated_guards() {
        let app = Negated::builder().build();
        assert_eq!(app.invoke(Calc { value: -1, ..Calc::default() }).unwrap().trail, ["low"]);
        assert_eq!(app.invoke(Calc { value: 500, ..Calc::default() }).unwrap().trail, ["high"]);
    }

    #[test]
    fn no_route_when_no_guard_holds() {
        let err = Negated::builder().build().invoke(Calc { value: 5, ..Calc::default() }).unwrap_err();
        match &err {
            Error::NoRoute { node, goto: None } => assert_eq!(*node, "classify"),
            other => panic!("expected NoRoute, got {other:?}"),
        }
        assert!(err.to_string().contains("`classify`"), "{err}");
    }
}

mod routers {
    use super::*;

    fn choose(s: &Calc) -> Command<RouterNode> {
        match s.value {
            0 => Command::goto(RouterNode::Left),
            1 => Command::goto(RouterNode::Right).update(step("choose").value(100)),
            2 => Command::end(),
            // `middle` is a node of the graph but not one of `choose`'s declared targets.
            _ => Command::goto(RouterNode::Middle),
        }
    }
    fn left(_: &Calc) -> CalcUpdate {
        step("left")
    }
    fn right(s: &Calc) -> CalcUpdate {
        step("right").value(s.value + 1)
    }
    fn middle(_: &Calc) -> CalcUpdate {
        step("middle")
    }
    fn is_three(s: &Calc) -> bool {
        s.value == 3
    }

    graph! {
        pub Router for Calc {
            start -> middle if is_three;
            start -> choose;
            choose -> left | right | end;
            left -> end;
            right -> end;
            middle -> choose;
        }
    }

    fn run(value: i64) -> Result<Calc, Error> {
        Router::builder().build().invoke(Calc { value, ..Calc::default() })
    }

    #[test]
    fn goto_without_an_update() {
        assert_eq!(run(0).unwrap().trail, ["left"]);
    }

    #[test]
    fn goto_with_an_update_applies_it_before_the_next_node() {
        let out = run(1).unwrap();
        assert_eq!(out.trail, ["choose", "right"]);
        assert_eq!(out.value, 101);
    }

    #[test]
    fn command_end_finishes_the_run() {
        assert_eq!(run(2).unwrap().trail, Vec::<String>::new());
    }

    #[test]
    fn goto_to_an_undeclared_target_is_no_route() {
        match run(3).unwrap_err() {
            Error::NoRoute { node, goto: Some(target) } => {
                assert_eq!(node, "choose");
                assert_eq!(target, "middle");
            }
            other => panic!("expected NoRoute with a goto, got {other:?}"),
        }
    }

    #[test]
    fn routers_are_drawn_dashed() {
        assert!(Router::MERMAID.contains("choose -.-> left"), "{}", Router::MERMAID);
        assert!(Router::DOT.contains("\"choose\" -> \"__end__\" [style=dashed];"), "{}", Router::DOT);
    }
}

mod failures {
    use super::*;

    #[derive(Debug)]
    struct Overdrawn(i64);
    impl std::fmt::Display for Overdrawn {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "account overdrawn by {}", self.0)
        }
    }
    impl std::error::Error for Overdrawn {}

    fn withdraw(s: &Calc) -> Result<CalcUpdate, Overdrawn> {
        if s.value < 0 {
            Err(Overdrawn(-s.value))
        } else {
            Ok(step("withdraw"))
        }
    }
    fn audit(s: &Calc) -> Result<(), &'static str> {
        if s.value == 13 {
            Err("unlucky balance")
        } else {
            Ok(())
        }
    }
    fn explode(s: &Calc) -> CalcUpdate {
        if s.value == 666 {
            panic!("the node blew up on {}", s.value);
        }
        step("explode")
    }

    graph! {
        pub Bank for Calc {
            start -> withdraw;
            withdraw -> audit;
            audit -> explode;
            explode -> end;
        }
    }

    #[test]
    fn node_failed_names_the_node_and_keeps_the_cause() {
        let err = Bank::builder().build().invoke(Calc { value: -5, ..Calc::default() }).unwrap_err();
        assert_eq!(err.to_string(), "node `withdraw` failed");
        match err {
            Error::NodeFailed { node, source } => {
                assert_eq!(node, "withdraw");
                let cause = source.downcast_ref::<Overdrawn>().expect("the node's own error type is kept");
                assert_eq!(cause.0, 5);
            }
            other => panic!("expected NodeFailed, got {other:?}"),
        }
        let err = Bank::builder().build().invoke(Calc { value: 13, ..Calc::default() }).unwrap_err();
        let source = std::error::Error::source(&err).expect("the cause is the error's source");
        assert_eq!(source.to_string(), "unlucky balance");
    }

    #[test]
    fn a_panicking_node_is_caught_and_the_app_stays_usable() {
        let app = Bank::builder().build();
        match app.invoke(Calc { value: 666, ..Calc::default() }).unwrap_err() {
            Error::NodePanicked { node, message } => {
                assert_eq!(node, "explode");
                assert_eq!(message, "the node blew up on 666");
            }
            other => panic!("expected NodePanicked, got {other:?}"),
        }
        assert_eq!(app.invoke(Calc::default()).unwrap().trail, ["withdraw", "explode"]);
    }

    #[test]
    fn a_failing_stream_yields_the_error_and_ends() {
        let app = Bank::builder().build();
        let mut stream = app.stream(Calc { value: 666, ..Calc::default() });
        assert!(matches!(stream.next(), Some(Ok(Event::Step { .. }))));
        assert!(matches!(stream.next(), Some(Ok(Event::Step { .. }))));
        assert!(matches!(stream.next(), Some(Err(Error::NodePanicked { .. }))));
        assert!(stream.next().is_none());
    }
}

mod context {
    use super::*;

    fn record(_: &Calc, ctx: &Ctx<Calc>) -> CalcUpdate {
        assert!(ctx.thread().is_none(), "a store-less app has no thread");
        assert!(ctx.branch().is_none());
        Calc::update().trail(vec![format!("{}#{}", ctx.node(), ctx.step())])
    }
    fn again(s: &Calc, ctx: &Ctx<Calc>) -> CalcUpdate {
        record(s, ctx)
    }

    graph! {
        pub Trace for Calc {
            start -> record;
            record -> again;
            again -> end;
        }
    }

    #[test]
    fn ctx_tells_the_node_and_the_step() {
        let out = Trace::builder().build().invoke(Calc::default()).unwrap();
        assert_eq!(out.trail, ["record#1", "again#2"]);
    }
}

mod every_reducer {
    use super::*;

    fn keep_longer(current: &mut String, new: String) {
        if new.len() > current.len() {
            *current = new;
        }
    }

    #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    pub struct Ledger {
        name: String,
        #[reducer(append)]
        log: Vec<String>,
        #[reducer(sum)]
        total: u64,
        #[reducer(max)]
        best: i64,
        #[reducer(min)]
        worst: i64,
        #[reducer(union)]
        tags: BTreeSet<String>,
        #[reducer(merge)]
        meta: BTreeMap<String, String>,
        #[reducer(with = keep_longer)]
        summary: String,
    }

    fn one(_: &Ledger) -> LedgerUpdate {
        Ledger::update()
            .name("one".into())
            .log(vec!["a".into()])
            .total(5)
            .best(3)
            .worst(3)
            .tags(["x".to_owned()].into())
            .meta([("k".to_owned(), "1".to_owned()), ("j".to_owned(), "1".to_owned())].into())
            .summary("short".into())
    }
    fn two(_: &Ledger) -> LedgerUpdate {
        Ledger::update()
            .name("two".into())
            .log(vec!["b".into()])
            .total(7)
            .best(9)
            .worst(-2)
            .tags(["x".to_owned(), "y".to_owned()].into())
            .meta([("k".to_owned(), "2".to_owned())].into())
            .summary("much longer".into())
    }
    fn three(_: &Ledger) -> LedgerUpdate {
        Ledger::update().best(1).worst(0).summary("mid".into()).overwrite_log(vec!["reset".into()])
    }

    graph! {
        pub Books for Ledger {
            start -> one;
            one -> two;
            two -> three;
            three -> end;
        }
    }

    #[test]
    fn each_reducer_merges_as_documented() {
        let out = Books::builder().build().invoke(Ledger::default()).unwrap();
        assert_eq!(out.name, "two", "replace keeps the last");
        assert_eq!(out.log, ["reset"], "overwrite bypasses append");
        assert_eq!(out.total, 12);
        assert_eq!(out.best, 9);
        assert_eq!(out.worst, -2);
        assert_eq!(out.tags, BTreeSet::from(["x".to_owned(), "y".to_owned()]));
        assert_eq!(out.meta["k"], "2");
        assert_eq!(out.meta["j"], "1");
        assert_eq!(out.summary, "much longer");
    }
}

#[test]
fn apps_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<App<linear::Linear>>();
    assert_send_sync::<Error>();
    assert_send_sync::<Event<Calc>>();
}

mod timing {
    use super::*;
    use std::time::Duration;

    const NAP: Duration = Duration::from_millis(30);

    fn quick(_: &Calc) -> CalcUpdate {
        step("quick")
    }
    fn slow(_: &Calc) -> CalcUpdate {
        std::thread::sleep(NAP);
        step("slow")
    }
    fn left(_: &Calc) -> CalcUpdate {
        std::thread::sleep(NAP);
        step("left")
    }
    fn right(_: &Calc) -> CalcUpdate {
        step("right")
    }
    fn merge(_: &Calc) -> CalcUpdate {
        step("merge")
    }

    graph! {
        pub Timed for Calc {
            start -> quick;
            quick -> slow;
            parallel slow => [left, right] -> merge;
            merge -> end;
        }
    }

    #[test]
    fn each_step_event_carries_how_long_its_node_took() {
        let app = Timed::builder().build();
        let steps: Vec<(String, Option<String>, Duration)> = app
            .stream(Calc::default())
            .filter_map(|event| match event.unwrap() {
                Event::Step { node, branch, duration, .. } => {
                    Some((node.to_string(), branch.map(|b| b.to_string()), duration))
                }
                _ => None,
            })
            .collect();
        let names: Vec<(&str, Option<&str>)> = steps.iter().map(|(n, b, _)| (n.as_str(), b.as_deref())).collect();
        assert_eq!(
            names,
            [("quick", None), ("slow", None), ("left", Some("left")), ("right", Some("right")), ("merge", None)]
        );
        let took = |name: &str| steps.iter().find(|(n, _, _)| n == name).map(|(_, _, d)| *d).unwrap();
        assert!(took("slow") >= NAP, "slow took {:?}", took("slow"));
        assert!(took("left") >= NAP, "the branch node left took {:?}", took("left"));
        assert!(took("quick") < took("slow"), "quick took {:?}", took("quick"));
        assert!(took("right") < took("left"), "the branch node right took {:?}", took("right"));
    }
}
