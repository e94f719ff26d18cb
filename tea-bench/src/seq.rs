//! `sequential_*`, `fanout_100`, `send_100` (with and without a store), `fanout_io_100`, `fanout_io_100_async` and `fanout_8_cpu`:
//! chains and fan-outs over a counter state.

use serde::{Deserialize, Serialize};
use std::hint::black_box;
use tea::prelude::*;

/// The state of the script's `Seq`: `count` (replace) and `log` (append).
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
pub struct Seq {
    pub count: u64,
    #[reducer(append)]
    pub log: Vec<String>,
}

// `seq10::Seq10`, `seq1000::Seq1000` (chains, each node `count += 1`) and `fan100::Fan100`
// (`a`, `parallel a => [b0, …, b99] -> join`), written by build.rs.
include!(concat!(env!("OUT_DIR"), "/graphs.rs"));

fn check_count(out: &Seq, n: u64) {
    assert_eq!(out.count, n, "a chain of {n} nodes counts to {n}");
    assert!(out.log.is_empty());
}

pub fn sequential_10() -> impl FnMut() {
    let app = seq10::Seq10::builder().build();
    move || check_count(&app.invoke(black_box(Seq::default())).expect("sequential_10 runs"), 10)
}

pub fn sequential_1000() -> impl FnMut() {
    let app = seq1000::Seq1000::builder().build();
    move || check_count(&app.invoke(black_box(Seq::default())).expect("sequential_1000 runs"), 1000)
}

/// The 1000-node chain with a checkpoint after every step, each run a new thread.
pub fn sequential_1000_memory_store() -> impl FnMut() {
    sequential_1000_in(MemoryStore::new())
}

/// The same in a `MemoryStore` sealed at rest (`Sealed`, XChaCha20-Poly1305).
pub fn sequential_1000_memory_store_sealed() -> impl FnMut() {
    sequential_1000_in(crate::sealed(MemoryStore::new()))
}

fn sequential_1000_in(store: impl Checkpointer + 'static) -> impl FnMut() {
    let app = seq1000::Seq1000::builder().checkpointer(store).build();
    move || {
        let outcome = app.invoke(black_box(Seq::default())).expect("sequential_1000_memory_store runs");
        check_count(&outcome.done().expect("a graph without breakpoints finishes"), 1000);
    }
}

fn check_fanout(out: &Seq, width: usize) {
    assert_eq!(out.count, width as u64, "the join counts every branch's entry");
    assert!(out.log.iter().enumerate().all(|(i, entry)| *entry == i.to_string()), "branch order: {:?}", out.log);
}

pub fn fanout_100() -> impl FnMut() {
    let app = fan100::Fan100::builder().build();
    move || check_fanout(&app.invoke(black_box(Seq::default())).expect("fanout_100 runs"), 100)
}

/// `fanout_100` with a checkpoint store (`Durability::EveryStep`, each run a new thread): every
/// branch's progress is written as it completes (pending writes), and the join's step.
pub fn fanout_100_memory_store() -> impl FnMut() {
    fanout_100_in(MemoryStore::new())
}

/// The same in a `MemoryStore` sealed at rest.
pub fn fanout_100_memory_store_sealed() -> impl FnMut() {
    fanout_100_in(crate::sealed(MemoryStore::new()))
}

/// `fanout_100_memory_store` with a group commit window of 1 ms (`Builder::group_commit`): the
/// cheap branches are written with the join's step instead of one write each.
pub fn fanout_100_memory_store_grouped() -> impl FnMut() {
    fanout_100_in_with(MemoryStore::new(), GROUP_COMMIT)
}

/// The group commit window of the `/group_commit_1ms` rows.
const GROUP_COMMIT: std::time::Duration = std::time::Duration::from_millis(1);

fn fanout_100_in(store: impl Checkpointer + 'static) -> impl FnMut() {
    fanout_100_in_with(store, tea::DEFAULT_GROUP_COMMIT)
}

fn fanout_100_in_with(store: impl Checkpointer + 'static, window: std::time::Duration) -> impl FnMut() {
    let app = fan100::Fan100::builder().checkpointer(store).group_commit(window).build();
    move || {
        let outcome = app.invoke(black_box(Seq::default())).expect("fanout_100_memory_store runs");
        check_fanout(&outcome.done().expect("a graph without breakpoints finishes"), 100);
    }
}

/// `send_100`'s state: the script's `Seq` plus each send's own input `i`.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
pub struct Items {
    pub count: u64,
    #[reducer(append)]
    pub log: Vec<String>,
    pub i: u64,
}

/// The nodes of `send_100`: `a` sends `worker` 100 times with `i = 0..100`, `worker` appends its
/// `i`, `join` counts.
mod send100 {
    use super::*;

    pub(super) fn a(_: &Items) -> Command<Send100Node> {
        Command::send((0..100).map(|i| tea::SendTo::new(Send100Node::Worker, Items::update().i(i))))
            .update(Items::update().count(0))
    }
    pub(super) fn worker(s: &Items) -> ItemsUpdate {
        Items::update().log(vec![s.i.to_string()])
    }
    pub(super) fn join(s: &Items) -> ItemsUpdate {
        Items::update().count(s.log.len() as u64)
    }

    graph! {
        pub Send100 for Items {
            start -> a;
            parallel a => worker* -> join;
            join -> end;
        }
    }
}

/// A node sends one node 100 times, each with its own input (map-reduce with `SendTo`).
pub fn send_100() -> impl FnMut() {
    let app = send100::Send100::builder().build();
    move || {
        let out = app.invoke(black_box(Items::default())).expect("send_100 runs");
        assert_eq!(out.count, 100, "the join counts every send's entry");
        assert!(out.log.iter().enumerate().all(|(i, entry)| *entry == i.to_string()), "send order: {:?}", out.log);
    }
}

/// `send_100` with a checkpoint store (`Durability::EveryStep`, each run a new thread).
pub fn send_100_memory_store() -> impl FnMut() {
    send_100_in(MemoryStore::new())
}

/// The same in a `MemoryStore` sealed at rest.
pub fn send_100_memory_store_sealed() -> impl FnMut() {
    send_100_in(crate::sealed(MemoryStore::new()))
}

/// `send_100_memory_store` with a group commit window of 1 ms.
pub fn send_100_memory_store_grouped() -> impl FnMut() {
    send_100_in_with(MemoryStore::new(), GROUP_COMMIT)
}

fn send_100_in(store: impl Checkpointer + 'static) -> impl FnMut() {
    send_100_in_with(store, tea::DEFAULT_GROUP_COMMIT)
}

fn send_100_in_with(store: impl Checkpointer + 'static, window: std::time::Duration) -> impl FnMut() {
    let app = send100::Send100::builder().checkpointer(store).group_commit(window).build();
    move || {
        let outcome = app.invoke(black_box(Items::default())).expect("send_100_memory_store runs");
        let out = outcome.done().expect("a graph without breakpoints finishes");
        assert_eq!(out.count, 100, "the join counts every send's entry");
    }
}

/// 100 branches that each block 20 ms (`std::thread::sleep`): a fan-out of synchronous LLM or
/// HTTP calls. The physical limit is 20 ms.
pub fn fanout_io_100() -> impl FnMut() {
    let app = fan_io100::FanIo100::builder().build();
    move || check_fanout(&app.invoke(black_box(Seq::default())).expect("fanout_io_100 runs"), 100)
}

/// `fanout_io_100_async`: 100 async branches each awaiting a 20 ms timer, through `invoke_async`
/// on a tokio runtime made once (as a service keeps its runtime).
pub fn fanout_io_100_async() -> impl FnMut() {
    let app = fan_io100_async::FanIo100Async::builder().build();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    move || {
        let out = runtime.block_on(app.invoke_async(black_box(Seq::default())));
        check_fanout(&out.expect("fanout_io_100_async runs"), 100)
    }
}

/// Iterations of the script's LCG in each `fanout_8_cpu` branch.
const WORK: u64 = 200_000;

/// The script's fixed CPU work: `x = (x * 6364136223846793005 + 1442695040888963407) % 2^64`.
fn spin(i: u64) -> SeqUpdate {
    Seq::update().log(vec![lcg(i).to_string()])
}

fn lcg(i: u64) -> u64 {
    let mut x = i;
    for _ in 0..WORK {
        // `black_box` on every step: the compiler may not fold steps together (an affine map
        // composed with itself is one affine map), so each of the 200 000 steps is executed.
        x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407));
    }
    black_box(x);
    i
}

/// The nodes of the CPU-bound graphs: `a`, eight spinning `b0` … `b7`, and `join`.
mod cpu {
    use super::*;

    pub(super) fn a(_: &Seq) -> SeqUpdate {
        Seq::update().count(0)
    }
    pub(super) fn join(s: &Seq) -> SeqUpdate {
        Seq::update().count(s.log.len() as u64)
    }
    macro_rules! spinners {
        ($($name:ident = $i:literal),*) => { $(pub(super) fn $name(_: &Seq) -> SeqUpdate { spin($i) })* };
    }
    spinners!(b0 = 0, b1 = 1, b2 = 2, b3 = 3, b4 = 4, b5 = 5, b6 = 6, b7 = 7);
}

mod fan8 {
    use super::cpu::*;
    use super::*;

    graph! {
        /// The eight loops as parallel branches.
        pub Fan8 for Seq {
            start -> a;
            parallel a => [b0, b1, b2, b3, b4, b5, b6, b7] -> join;
            join -> end;
        }
    }
}

mod chain8 {
    use super::cpu::*;
    use super::*;

    graph! {
        /// The same eight loops one after the other: the baseline of `parallel_speedup`.
        pub Chain8 for Seq {
            start -> a;
            a -> b0;
            b0 -> b1;
            b1 -> b2;
            b2 -> b3;
            b3 -> b4;
            b4 -> b5;
            b5 -> b6;
            b6 -> b7;
            b7 -> join;
            join -> end;
        }
    }
}

pub fn fanout_8_cpu() -> impl FnMut() {
    let app = fan8::Fan8::builder().build();
    move || check_fanout(&app.invoke(black_box(Seq::default())).expect("fanout_8_cpu runs"), 8)
}

pub fn chain_8_cpu() -> impl FnMut() {
    let app = chain8::Chain8::builder().build();
    move || check_fanout(&app.invoke(black_box(Seq::default())).expect("chain_8_cpu runs"), 8)
}

/// The eight loops on rayon directly, without tea: what the machine gives a fan-out of this size
/// (the reference for `parallel_speedup`).
pub fn rayon_8_cpu() -> impl FnMut() {
    use rayon::prelude::*;
    || {
        let out: Vec<u64> = (0..8u64).into_par_iter().map(lcg).collect();
        assert_eq!(out, [0, 1, 2, 3, 4, 5, 6, 7]);
    }
}
