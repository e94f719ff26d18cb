//! The store-less engine allocates nothing per step: a run of 1 000 steps allocates no more than
//! a run of 10. (A dedicated test binary: the counting allocator sees the whole process.)

use serde::{Deserialize, Serialize};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use tea::prelude::*;

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
pub struct Counter {
    count: u64,
    target: u64,
    #[reducer(sum)]
    visits: u64,
    #[reducer(append)]
    log: Vec<String>,
}

fn tick(s: &Counter) -> CounterUpdate {
    Counter::update().count(s.count + 1).visits(1)
}
fn tock(_: &Counter, ctx: &Ctx<Counter>) -> CounterUpdate {
    Counter::update().visits(ctx.step() % 2)
}
fn reached(s: &Counter) -> bool {
    s.count >= s.target
}
fn choose(s: &Counter) -> Command<CountNode> {
    if reached(s) {
        Command::end()
    } else {
        Command::goto(CountNode::Tick)
    }
}
fn split(_: &Counter) {}
fn left(_: &Counter) -> CounterUpdate {
    Counter::update().log(vec!["left".into()])
}
fn right(_: &Counter) -> CounterUpdate {
    Counter::update().log(vec!["right".into()])
}
fn join(_: &Counter) {}

graph! {
    pub Count for Counter {
        start -> split;
        parallel split => [left, right] -> join;
        join -> tick;
        tick -> tock;
        tock -> end if reached;
        tock -> choose;
        choose -> tick | end;
    }
}

fn again(s: &Counter) -> Command<StraightNode> {
    if reached(s) {
        Command::end()
    } else {
        Command::goto(StraightNode::Tick)
    }
}

graph! {
    pub Straight for Counter {
        start -> tick;
        tick -> tock;
        tock -> end if reached;
        tock -> again;
        again -> tick | end;
    }
}

fn allocations_of<G: tea::PauseFree<State = Counter> + tea::SyncGraph>(app: &App<G>, target: u64) -> usize {
    let input = Counter { target, ..Counter::default() };
    let before = ALLOCATIONS.load(Ordering::SeqCst);
    let out = app.invoke(input).unwrap();
    let after = ALLOCATIONS.load(Ordering::SeqCst);
    assert_eq!(out.count, target);
    drop(out);
    after - before
}

/// The fewest allocations of `runs` runs: rayon's queues allocate a block every few dozen
/// jobs, so a single run with a fan-out can count one or two more than the next.
fn fewest_allocations_of<G: tea::PauseFree<State = Counter> + tea::SyncGraph>(
    app: &App<G>,
    target: u64,
    runs: usize,
) -> usize {
    (0..runs).map(|_| allocations_of(app, target)).min().unwrap_or(usize::MAX)
}

// One test function: the counter sees the whole process, so two tests running side by side
// would count each other's allocations.
#[test]
fn a_thousand_steps_allocate_no_more_than_ten() {
    main_line_alone();
    with_a_fan_out();
}

/// The main line alone: exactly comparable runs. The fewest of several runs, since the counter
/// sees the whole process: the test harness's own thread allocates a few times as the test
/// starts (about one run in ten counted 4 allocations of it); an allocation per step would show
/// in every run.
fn main_line_alone() {
    let app = Straight::builder().build();
    allocations_of(&app, 10);
    let short = fewest_allocations_of(&app, 10, 5);
    let long = fewest_allocations_of(&app, 1_000, 5);
    assert!(
        long <= short,
        "a run of ~3000 steps made {long} allocations, a run of ~30 steps {short}: the engine allocates per step"
    );
    assert_eq!(short, 0, "a store-less run without a fan-out allocates nothing");
}

/// A fan-out allocates its branches' bookkeeping; the main line still allocates nothing per step.
fn with_a_fan_out() {
    let app = Count::builder().build();
    // Warm up rayon's pool and any lazily initialised statics.
    allocations_of(&app, 10);
    let short = fewest_allocations_of(&app, 10, 8);
    let long = fewest_allocations_of(&app, 1_000, 8);
    assert!(
        long <= short,
        "a run of ~3000 steps made {long} allocations, a run of ~30 steps {short}: the engine allocates per step"
    );
}
