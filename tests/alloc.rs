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

fn allocations_of(app: &App<Count>, target: u64) -> usize {
    let input = Counter { target, ..Counter::default() };
    let before = ALLOCATIONS.load(Ordering::SeqCst);
    let out = app.invoke(input).unwrap();
    let after = ALLOCATIONS.load(Ordering::SeqCst);
    assert_eq!(out.count, target);
    drop(out);
    after - before
}

#[test]
fn a_thousand_steps_allocate_no_more_than_ten() {
    let app = Count::builder().build();
    // Warm up rayon's pool and any lazily initialised statics.
    allocations_of(&app, 10);
    let short = allocations_of(&app, 10);
    let long = allocations_of(&app, 1_000);
    assert!(
        long <= short,
        "a run of ~3000 steps made {long} allocations, a run of ~30 steps {short}: the engine allocates per step"
    );
}
