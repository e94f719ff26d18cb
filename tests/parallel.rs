//! `parallel a => [x, y, z] -> join;`: concurrent branches on copies of the state, merged in
//! declared order through the reducers.

use serde::{Deserialize, Serialize};
use std::sync::Barrier;
use std::time::Duration;
use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
pub struct Work {
    #[reducer(append)]
    log: Vec<String>,
    #[reducer(sum)]
    total: u64,
    owner: String,
    seen_by_y: usize,
}

fn entry(s: &Work) -> WorkUpdate {
    Work::update().log(vec!["a".into()]).total(s.total)
}

mod order {
    use super::*;

    fn x(_: &Work) -> WorkUpdate {
        // The first branch is the slowest: it still merges first.
        std::thread::sleep(Duration::from_millis(80));
        Work::update().log(vec!["x".into()]).total(1)
    }
    fn x_more(s: &Work) -> WorkUpdate {
        Work::update().log(vec![format!("x2 saw {}", s.log.len())]).total(10)
    }
    fn y(s: &Work) -> WorkUpdate {
        // Isolation: a branch sees the state at the fan-out plus its own writes only.
        Work::update().log(vec!["y".into()]).total(100).seen_by_y(s.log.len())
    }
    fn z(_: &Work) -> WorkUpdate {
        Work::update().log(vec!["z".into()]).total(1000).owner("z".into())
    }
    fn join(s: &Work, ctx: &Ctx<Work>) -> WorkUpdate {
        let heads: Vec<String> = ctx.branches().iter().map(|b| b.head().to_string()).collect();
        let own_logs: Vec<usize> = ctx.branches().iter().map(|b| b.state().log.len()).collect();
        Work::update().log(vec![format!("join {heads:?} {own_logs:?} total={}", s.total)])
    }

    graph! {
        pub Fan for Work {
            start -> entry;
            parallel entry => [x, y, z] -> join;
            x -> x_more;
            x_more -> join;
            join -> end;
        }
    }

    #[test]
    fn branches_merge_in_declared_order_whatever_order_they_finish_in() {
        let out = Fan::builder().build().invoke(Work::default()).unwrap();
        assert_eq!(out.log[..5], ["a", "x", "x2 saw 2", "y", "z"]);
        assert_eq!(out.total, 1111, "sum adds every branch's writes");
        assert_eq!(out.owner, "z");
        assert_eq!(out.seen_by_y, 1, "y saw only `a`, not x's writes");
    }

    #[test]
    fn the_join_sees_the_merged_state_and_each_branch_state() {
        let out = Fan::builder().build().invoke(Work::default()).unwrap();
        assert_eq!(out.log[5], r#"join ["x", "y", "z"] [3, 2, 2] total=1111"#);
    }

    #[test]
    fn twenty_runs_collect_every_branch_every_time() {
        let app = Fan::builder().build();
        for _ in 0..20 {
            let out = app.invoke(Work::default()).unwrap();
            assert_eq!(out.log[..5], ["a", "x", "x2 saw 2", "y", "z"]);
            assert_eq!(out.total, 1111);
        }
    }

    #[test]
    fn the_stream_reports_branch_steps_with_their_branch() {
        let app = Fan::builder().build();
        let steps: Vec<(String, Option<String>, usize)> = app
            .stream(Work::default())
            .filter_map(|event| match event.unwrap() {
                Event::Step { node, branch, state, .. } => {
                    Some((node.to_string(), branch.map(|b| b.to_string()), state.log.len()))
                }
                _ => None,
            })
            .collect();
        let expected: Vec<(String, Option<String>, usize)> = vec![
            ("entry".into(), None, 1),
            ("x".into(), Some("x".into()), 2),
            ("x_more".into(), Some("x".into()), 3),
            ("y".into(), Some("y".into()), 2),
            ("z".into(), Some("z".into()), 2),
            ("join".into(), None, 6),
        ];
        assert_eq!(steps, expected);
    }

    #[test]
    fn fan_outs_are_drawn() {
        assert!(Fan::MERMAID.contains("entry ==> x"), "{}", Fan::MERMAID);
        assert!(Fan::MERMAID.contains("y --> join"), "{}", Fan::MERMAID);
        assert!(Fan::DOT.contains("\"entry\" -> \"z\" [style=bold];"), "{}", Fan::DOT);
    }
}

mod conflicts {
    use super::*;

    fn left(_: &Work) -> WorkUpdate {
        Work::update().owner("left".into())
    }
    fn middle(_: &Work) -> WorkUpdate {
        Work::update().total(1)
    }
    fn right(_: &Work) -> WorkUpdate {
        Work::update().owner("right".into())
    }
    fn join(_: &Work) {}

    graph! {
        pub Clash for Work {
            start -> entry;
            parallel entry => [left, middle, right] -> join;
            join -> end;
        }
    }

    #[test]
    fn two_branches_replacing_one_field_conflict() {
        let err = Clash::builder().build().invoke(Work::default()).unwrap_err();
        match &err {
            Error::ConflictingWrites { field, branches } => {
                assert_eq!(*field, "owner");
                assert_eq!(*branches, ["left", "right"]);
            }
            other => panic!("expected ConflictingWrites, got {other:?}"),
        }
        assert!(err.to_string().contains("`owner`"), "{err}");
    }
}

mod failures {
    use super::*;

    fn fine(_: &Work) -> WorkUpdate {
        Work::update().total(1)
    }
    fn broken(s: &Work) -> Result<WorkUpdate, String> {
        if s.owner == "boom" {
            panic!("branch panicked");
        }
        Err(format!("broken at {}", s.total))
    }
    fn join(_: &Work) {}

    graph! {
        pub Fragile for Work {
            start -> entry;
            parallel entry => [fine, broken] -> join;
            join -> end;
        }
    }

    #[test]
    fn a_failing_branch_fails_the_run_naming_its_node() {
        let app = Fragile::builder().build();
        match app.invoke(Work::default()).unwrap_err() {
            Error::NodeFailed { node, source } => {
                assert_eq!(node, "broken");
                assert_eq!(source.to_string(), "broken at 0");
            }
            other => panic!("expected NodeFailed, got {other:?}"),
        }
        match app.invoke(Work { owner: "boom".into(), ..Work::default() }).unwrap_err() {
            Error::NodePanicked { node, message } => {
                assert_eq!(node, "broken");
                assert_eq!(message, "branch panicked");
            }
            other => panic!("expected NodePanicked, got {other:?}"),
        }
    }
}

mod chains_and_nesting {
    use super::*;

    fn is_big(s: &Work) -> bool {
        s.total > 5
    }
    fn head(s: &Work) -> WorkUpdate {
        Work::update().log(vec![format!("head {}", s.total)])
    }
    fn big(_: &Work) -> WorkUpdate {
        Work::update().log(vec!["big".into()])
    }
    fn small(_: &Work) -> WorkUpdate {
        Work::update().log(vec!["small".into()])
    }
    fn outer(_: &Work) -> WorkUpdate {
        Work::update().log(vec!["outer".into()])
    }
    fn inner_a(_: &Work) -> WorkUpdate {
        Work::update().log(vec!["inner_a".into()]).total(1)
    }
    fn inner_b(_: &Work) -> WorkUpdate {
        Work::update().log(vec!["inner_b".into()]).total(2)
    }
    fn inner_join(s: &Work) -> WorkUpdate {
        Work::update().log(vec![format!("inner_join {}", s.log.len())])
    }
    fn join(_: &Work) {}

    graph! {
        pub Nested for Work {
            start -> entry;
            parallel entry => [head, outer] -> join;
            head -> big if is_big;
            head -> small;
            big -> join;
            small -> join;
            parallel outer => [inner_a, inner_b] -> inner_join;
            inner_join -> join;
            join -> end;
        }
    }

    #[test]
    fn a_branch_can_be_a_guarded_chain_and_a_branch_can_fan_out_again() {
        let out = Nested::builder().build().invoke(Work::default()).unwrap();
        assert_eq!(out.log, ["a", "head 0", "small", "outer", "inner_a", "inner_b", "inner_join 4"]);
        assert_eq!(out.total, 3);
        let out = Nested::builder().build().invoke(Work { total: 10, ..Work::default() }).unwrap();
        assert_eq!(out.log[1..3], ["head 20", "big"]);
    }
}

mod concurrency {
    use super::*;
    use std::sync::OnceLock;

    fn barrier() -> &'static Barrier {
        static BARRIER: OnceLock<Barrier> = OnceLock::new();
        BARRIER.get_or_init(|| Barrier::new(2))
    }
    fn ping(_: &Work) -> WorkUpdate {
        barrier().wait();
        Work::update().log(vec!["ping".into()])
    }
    fn pong(_: &Work) -> WorkUpdate {
        barrier().wait();
        Work::update().log(vec!["pong".into()])
    }
    fn join(_: &Work) {}

    graph! {
        pub Rendezvous for Work {
            start -> entry;
            parallel entry => [ping, pong] -> join;
            join -> end;
        }
    }

    #[test]
    fn branches_really_run_at_the_same_time() {
        // Each branch waits at a barrier for the other: a sequential engine would hang here, so
        // the run happens on a thread and the test fails after a timeout instead.
        let (done, result) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(Rendezvous::builder().build().invoke(Work::default()));
        });
        let out = result
            .recv_timeout(Duration::from_secs(20))
            .expect("the branches did not run concurrently (they never met at the barrier)")
            .unwrap();
        assert_eq!(out.log, ["a", "ping", "pong"]);
    }
}
