//! Branches that block (a synchronous LLM or HTTP call, a barrier) never starve each other:
//! every branch of a fan-out runs at once, up to `max_parallel_branches`, whatever the size of
//! rayon's pool. Concurrency is shown with timestamps (every branch started before any ended),
//! not by asserting how long a sleep took.

use serde::{Deserialize, Serialize};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};
use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
pub struct Calls {
    #[reducer(append)]
    log: Vec<u32>,
}

/// (branch, started, ended) of every branch run, per test.
static SPANS: Mutex<Vec<(&'static str, u32, Instant, Instant)>> = Mutex::new(Vec::new());

fn call(test: &'static str, i: u32, wait: impl FnOnce()) -> CallsUpdate {
    let started = Instant::now();
    wait();
    SPANS.lock().unwrap().push((test, i, started, Instant::now()));
    Calls::update().log(vec![i])
}

fn spans(test: &str) -> Vec<(u32, Instant, Instant)> {
    SPANS.lock().unwrap().iter().filter(|s| s.0 == test).map(|s| (s.1, s.2, s.3)).collect()
}

mod twenty {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// The branches that have started.
    static STARTED: AtomicUsize = AtomicUsize::new(0);

    /// Blocks until all twenty branches have started — waiting on that, not for a fixed time, so
    /// a loaded machine only makes the test slower. Branches that did not run at once would wait
    /// out the 30 s and end before the last one started, which the test's timestamps show.
    fn until_all_started() {
        STARTED.fetch_add(1, Ordering::SeqCst);
        let deadline = Instant::now() + Duration::from_secs(30);
        while STARTED.load(Ordering::SeqCst) < 20 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    macro_rules! sleepers {
        ($($name:ident = $i:expr),*) => {$(
            pub fn $name(_: &Calls) -> CallsUpdate {
                call("twenty", $i, until_all_started)
            }
        )*};
    }
    sleepers!(
        b0 = 0,
        b1 = 1,
        b2 = 2,
        b3 = 3,
        b4 = 4,
        b5 = 5,
        b6 = 6,
        b7 = 7,
        b8 = 8,
        b9 = 9,
        b10 = 10,
        b11 = 11,
        b12 = 12,
        b13 = 13,
        b14 = 14,
        b15 = 15,
        b16 = 16,
        b17 = 17,
        b18 = 18,
        b19 = 19
    );
    pub fn fan(_: &Calls) -> CallsUpdate {
        Calls::update()
    }
    pub fn join(_: &Calls) -> CallsUpdate {
        Calls::update()
    }

    graph! {
        pub Twenty for Calls {
            start -> fan;
            parallel fan => [b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14, b15, b16, b17, b18, b19] -> join;
            join -> end;
        }
    }
}

#[test]
fn twenty_blocking_branches_all_run_at_once_and_merge_in_order() {
    let app = twenty::Twenty::builder().build();
    let out = app.invoke(Calls::default()).unwrap();
    assert_eq!(out.log, (0..20).collect::<Vec<_>>(), "merged in declared order");
    let spans = spans("twenty");
    let last_start = spans.iter().map(|s| s.1).max().unwrap();
    let first_end = spans.iter().map(|s| s.2).min().unwrap();
    assert!(last_start < first_end, "every branch started before any ended: they ran at once");
}

mod limited {
    use super::*;

    macro_rules! sleepers {
        ($($name:ident = $i:expr),*) => {$(
            pub fn $name(_: &Calls) -> CallsUpdate {
                call("limited", $i, || std::thread::sleep(Duration::from_millis(30)))
            }
        )*};
    }
    sleepers!(c0 = 0, c1 = 1, c2 = 2, c3 = 3, c4 = 4, c5 = 5, c6 = 6, c7 = 7);
    pub fn fan(_: &Calls) -> CallsUpdate {
        Calls::update()
    }
    pub fn join(_: &Calls) -> CallsUpdate {
        Calls::update()
    }

    graph! {
        pub Limited for Calls {
            start -> fan;
            parallel fan => [c0, c1, c2, c3, c4, c5, c6, c7] -> join;
            join -> end;
        }
    }
}

#[test]
fn max_parallel_branches_caps_the_branches_running_at_once() {
    let app = limited::Limited::builder().max_parallel_branches(2).build();
    assert_eq!(app.invoke(Calls::default()).unwrap().log, (0..8).collect::<Vec<_>>());
    let spans = spans("limited");
    // At no instant were more than two branches inside their node.
    for (_, started, _) in &spans {
        let running = spans.iter().filter(|(_, s, e)| s <= started && started < e).count();
        assert!(running <= 2, "{running} branches ran at once");
    }
}

mod nested {
    use super::*;

    /// Inner branches `x` and `y` of each outer branch wait for each other.
    static BARRIERS: Mutex<Vec<(u32, std::sync::Arc<Barrier>)>> = Mutex::new(Vec::new());

    fn rendezvous(outer: u32) {
        let barrier = {
            let mut all = BARRIERS.lock().unwrap();
            match all.iter().find(|(o, _)| *o == outer) {
                Some((_, b)) => b.clone(),
                None => {
                    let b = std::sync::Arc::new(Barrier::new(2));
                    all.push((outer, b.clone()));
                    b
                }
            }
        };
        barrier.wait();
    }

    pub fn fan(_: &Calls) -> CallsUpdate {
        Calls::update()
    }
    macro_rules! outer {
        ($($name:ident = $i:expr),*) => {$(
            pub fn $name(_: &Calls) -> CallsUpdate {
                Calls::update().log(vec![$i * 10])
            }
        )*};
    }
    outer!(o0 = 0, o1 = 1, o2 = 2, o3 = 3);
    fn outer_of(s: &Calls) -> u32 {
        s.log.iter().copied().find(|v| v % 10 == 0).unwrap_or(0) / 10
    }
    pub fn x(s: &Calls) -> CallsUpdate {
        let outer = outer_of(s);
        call("nested", outer * 10 + 1, || rendezvous(outer))
    }
    pub fn y(s: &Calls) -> CallsUpdate {
        let outer = outer_of(s);
        call("nested", outer * 10 + 2, || rendezvous(outer))
    }
    pub fn inner_join(_: &Calls) -> CallsUpdate {
        Calls::update()
    }
    pub fn join(_: &Calls) -> CallsUpdate {
        Calls::update()
    }

    graph! {
        pub Nested for Calls {
            start -> fan;
            parallel fan => [o0, o1, o2, o3] -> join;
            parallel o0 => [x, y] -> inner_join;
            inner_join -> join;
            o1 -> o0;
            o2 -> o0;
            o3 -> o0;
            join -> end;
        }
    }
}

#[test]
fn nested_fan_outs_whose_branches_wait_for_each_other_complete() {
    // Four outer branches, each running an inner fan-out of two branches that meet at a
    // barrier: eight blocked threads at once on a pool of two or three.
    let app = nested::Nested::builder().build();
    let out = app.invoke(Calls::default()).unwrap();
    assert_eq!(out.log.len(), 4 + 4 * 2 + 3, "{:?}", out.log);
}

mod rounds {
    use super::*;

    /// `x` and `y` meet here in every round (a `Barrier` is reusable).
    static MEET: Barrier = Barrier::new(2);
    pub const ROUNDS: usize = 30;

    pub fn fan(_: &Calls) -> CallsUpdate {
        Calls::update()
    }
    pub fn x(_: &Calls) -> CallsUpdate {
        MEET.wait();
        Calls::update().log(vec![1])
    }
    pub fn y(_: &Calls) -> CallsUpdate {
        MEET.wait();
        Calls::update().log(vec![2])
    }
    pub fn join(_: &Calls) -> CallsUpdate {
        Calls::update()
    }
    fn done(s: &Calls) -> bool {
        s.log.len() >= 2 * ROUNDS
    }

    graph! {
        pub Rounds for Calls {
            start -> fan;
            parallel fan => [x, y] -> join;
            join -> end if done;
            join -> fan;
        }
    }
}

#[test]
fn a_graph_looping_over_a_fan_out_whose_branches_meet_completes_every_round() {
    // A small fan-out in a loop: the calling thread does not ask the pool for help at once
    // (cheap fan-outs wake no thread), so in every round the branch it cannot get to is handed
    // to a thread of its own; no round may hang.
    let app = rounds::Rounds::builder().build();
    let out = app.invoke(Calls::default()).unwrap();
    assert_eq!(out.log, [1, 2].repeat(rounds::ROUNDS), "every round merges x then y");
}
