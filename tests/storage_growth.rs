//! Storage that grows with what changed (issue 39): the bytes a thread's checkpoints cost,
//! counted through a wrapping store.
//!
//! - A durable `Send` fan-out, a checkpoint per branch: the bytes written grow linearly with the
//!   branches (each write names the branch that moved, not every branch).
//! - A 1000-step run over a state with a 1 MB field that never changes stores that field a
//!   couple of times, not a thousand.
//! - What is read back — `state`, `history`, time travel (`fork`, `update_state`), a recover —
//!   is what a full snapshot per step would show: the states computed here step by step.
//! - `App::prune` keeps the full checkpoint the kept deltas fold from.
//!
//! On `MemoryStore`, `SledStore` and `DirStore`; on `PostgresStore` too when built with the
//! feature `postgres` and `TEA_TEST_POSTGRES_URL` is set (else the test says it skipped).

mod store_forward;
use store_forward::forward;

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tea::prelude::*;
use tea::{AppendOutcome, CheckpointId, Checkpointer, DirStore, Error, MemoryStore, ThreadId};

/// A store that counts what is appended to it (the compare-and-swaps that were written).
#[derive(Clone)]
struct Counting<C> {
    inner: C,
    bytes: Arc<AtomicU64>,
    appends: Arc<AtomicU64>,
    largest: Arc<AtomicU64>,
}

impl<C> Counting<C> {
    fn new(inner: C) -> Self {
        Counting { inner, bytes: Arc::default(), appends: Arc::default(), largest: Arc::default() }
    }

    fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::SeqCst)
    }
}

impl<C: Checkpointer> Checkpointer for Counting<C> {
    fn append(
        &self,
        graph: &str,
        thread: &ThreadId,
        expected: Option<CheckpointId>,
        id: CheckpointId,
        bytes: &[u8],
        durable: bool,
    ) -> Result<AppendOutcome, Error> {
        let outcome = self.inner.append(graph, thread, expected, id, bytes, durable)?;
        if outcome == AppendOutcome::Written {
            self.bytes.fetch_add(bytes.len() as u64, Ordering::SeqCst);
            self.appends.fetch_add(1, Ordering::SeqCst);
            self.largest.fetch_max(bytes.len() as u64, Ordering::SeqCst);
        }
        Ok(outcome)
    }
    forward!(inner: head, get, history, range, threads, delete, prune);
}

// ---------------------------------------------------------------------------------------------
// A durable `Send` fan-out.

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Batch {
    items: Vec<u32>,
    item: u32,
    #[reducer(append)]
    done: Vec<u32>,
    total: u64,
    /// How long each `work` takes, in milliseconds (most tests: no time at all).
    nap: u64,
}

fn plan(b: &Batch) -> Command<SpreadNode> {
    Command::send(b.items.iter().map(|&i| tea::SendTo::new(SpreadNode::Work, Batch::update().item(i))))
}

fn work(b: &Batch) -> BatchUpdate {
    std::thread::sleep(Duration::from_millis(b.nap));
    Batch::update().done(vec![b.item * 2])
}

fn sum(b: &Batch) -> BatchUpdate {
    Batch::update().total(b.done.iter().map(|&d| u64::from(d)).sum())
}

graph! {
    pub Spread for Batch {
        start -> plan;
        parallel plan => work* -> sum;
        sum -> end;
    }
}

/// Runs a fan-out of `branches` sends on `store` (one branch at a time, so each branch's
/// progress is a write of its own); the bytes written, the appends, the largest append.
fn fan_out<C: Checkpointer + Clone>(store: &Counting<C>, branches: u32, thread: &str) -> (u64, u64, u64) {
    let app = Spread::builder().checkpointer(store.clone()).max_parallel_branches(1).build();
    let before = (store.bytes(), store.appends.load(Ordering::SeqCst));
    store.largest.store(0, Ordering::SeqCst);
    let input = Batch { items: (0..branches).collect(), ..Batch::default() };
    let out = app.run(Call::start(input).on(thread)).unwrap().done().unwrap();
    assert_eq!(out.done, (0..branches).map(|i| i * 2).collect::<Vec<_>>(), "merged in send order");
    assert_eq!(out.total, (0..u64::from(branches)).map(|i| i * 2).sum::<u64>());
    (store.bytes() - before.0, store.appends.load(Ordering::SeqCst) - before.1, store.largest.load(Ordering::SeqCst))
}

/// The growth exponent of bytes from `small` to `large` branches.
fn exponent((small, small_bytes): (u32, u64), (large, large_bytes): (u32, u64)) -> f64 {
    (large_bytes as f64 / small_bytes as f64).ln() / (f64::from(large) / f64::from(small)).ln()
}

fn fan_outs_grow_linearly<C: Checkpointer + Clone>(name: &str, store: C, sizes: &[u32]) {
    let store = Counting::new(store);
    let mut rows = Vec::new();
    println!("{name}: | branches | appends | bytes written | largest append |");
    for &n in sizes {
        let (bytes, appends, largest) = fan_out(&store, n, &format!("fan-{name}-{n}"));
        println!("{name}: | {n} | {appends} | {bytes} | {largest} |");
        assert!(appends >= u64::from(n), "{name}: a write per branch ({appends} appends for {n} branches)");
        rows.push((n, bytes));
    }
    // The smallest fan-out's checkpoints read back through the store's `range`: a fork from a
    // checkpoint inside it (a delta, folded from the full record before it) reads its state.
    let app = Spread::builder().checkpointer(store.clone()).build();
    let t = ThreadId::from(format!("fan-{name}-{}", sizes[0]));
    let history = app.history(&t).unwrap();
    assert!(history.len() > sizes[0] as usize);
    for snapshot in history.iter().step_by(history.len() / 5) {
        let fork = app.fork(&t, snapshot.checkpoint, format!("{t}-fork-{}", snapshot.checkpoint)).unwrap();
        assert_eq!(fork.state, snapshot.state);
        assert_eq!(fork.branches.len(), snapshot.branches.len());
    }
    let (first, last) = (rows[0], rows[rows.len() - 1]);
    let fitted = exponent(first, last);
    println!("{name}: growth exponent {fitted:.3} from {} to {} branches", first.0, last.0);
    assert!(fitted <= 1.1, "{name}: bytes grow with exponent {fitted:.3} ({rows:?})");
}

#[test]
fn a_durable_fan_out_writes_bytes_linear_in_its_branches_on_memory() {
    fan_outs_grow_linearly("memory", MemoryStore::new(), &[100, 300, 1000]);
}

#[test]
fn a_durable_fan_out_writes_bytes_linear_in_its_branches_on_sled() {
    let dir = scratch("sled-fan");
    fan_outs_grow_linearly("sled", tea::SledStore::open(dir.join("db")).unwrap(), &[100, 300]);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_durable_fan_out_writes_bytes_linear_in_its_branches_on_dir() {
    let dir = scratch("dir-fan");
    fan_outs_grow_linearly("dir", DirStore::open(&dir).unwrap(), &[100, 300]);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_fan_out_reads_back_and_forks_from_any_checkpoint() {
    let store = MemoryStore::new();
    let app = Spread::builder().checkpointer(store.clone()).max_parallel_branches(1).build();
    let t = ThreadId::from("fan-read");
    let input = Batch { items: (0..40).collect(), ..Batch::default() };
    let done = app.run(Call::start(input.clone()).on(t.clone())).unwrap().done().unwrap();
    let history = app.history(&t).unwrap();
    assert!(history.len() > 40);
    // Every checkpoint reads, and stands where a full snapshot would: inside the fan-out, the
    // fan-out's state with the branches that finished so far.
    let mut finished_before = usize::MAX;
    for snapshot in &history {
        let finished = snapshot.branches.iter().filter(|b| b.done).count();
        if !snapshot.branches.is_empty() {
            assert!(finished <= finished_before, "history runs newest first");
            finished_before = finished;
            assert_eq!(snapshot.state.done, Vec::<u32>::new(), "the fan-out's own state");
            for branch in snapshot.branches.iter().filter(|b| b.done) {
                assert_eq!(branch.state.done, vec![branch.state.item * 2]);
            }
        }
    }
    assert_eq!(app.state(&t).unwrap().unwrap().state, done);
    // A fork from the middle of the fan-out runs only the branches that had not finished.
    let middle = history.iter().find(|s| s.branches.iter().filter(|b| b.done).count() == 20).unwrap();
    app.fork(&t, middle.checkpoint, "fan-read-fork").unwrap();
    let forked = app.run(Call::recover("fan-read-fork")).unwrap().done().unwrap();
    assert_eq!(forked, done);
}

/// Runs a fan-out of 100 sends, one at a time, each taking `nap` milliseconds, with the group
/// commit `window`; the appends it made, and its history.
fn grouped(window: Duration, nap: u64, thread: &str) -> (u64, Vec<tea::Snapshot<Batch>>) {
    let store = Counting::new(MemoryStore::new());
    let app = Spread::builder().checkpointer(store.clone()).max_parallel_branches(1).group_commit(window).build();
    let input = Batch { items: (0..100).collect(), nap, ..Batch::default() };
    let out = app.run(Call::start(input).on(thread)).unwrap().done().unwrap();
    assert_eq!(out.done, (0..100).map(|i| i * 2).collect::<Vec<_>>(), "merged in send order");
    (store.appends.load(Ordering::SeqCst), app.history(&ThreadId::from(thread)).unwrap())
}

#[test]
fn cheap_finished_branches_are_written_together_by_the_join() {
    // Well inside the window: the fan-out's finished branches are written by the join's step
    // (the claim, the fan-out's checkpoint, the join's step, the end: four writes).
    let (appends, history) = grouped(Duration::from_secs(60), 0, "grouped-cheap");
    assert_eq!(appends, 4, "appends for 100 cheap branches in one window");
    assert!(history.iter().all(|s| s.branches.iter().all(|b| !b.done)), "no branch written on its own");
    let join = history.iter().find(|s| s.next == ["sum"]).expect("the join's step");
    assert_eq!(join.state.done, (0..100).map(|i| i * 2).collect::<Vec<_>>(), "every branch merged");
    // No window (the default): a write per branch.
    let (appends, _) = grouped(tea::DEFAULT_GROUP_COMMIT, 0, "grouped-none");
    assert!(appends >= 100, "{appends} appends for 100 branches written one by one");
}

#[test]
fn a_branch_that_works_longer_than_the_window_is_written_on_its_own() {
    // Each branch sleeps 2 ms against a window of 1 ms: none may wait for a later write.
    let (appends, history) = grouped(Duration::from_millis(1), 2, "grouped-slow");
    assert!(appends >= 100, "{appends} appends for 100 branches longer than the window");
    for finished in 1..100 {
        assert!(
            history.iter().any(|s| s.branches.iter().filter(|b| b.done).count() == finished),
            "a checkpoint holds exactly {finished} finished branches"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// A long run over a large field that never changes.

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Long {
    blob: String,
    #[reducer(sum)]
    n: u64,
    #[reducer(append)]
    log: Vec<u64>,
    last: u64,
}

fn tick(s: &Long) -> LongUpdate {
    // Every tenth step appends to the log; every step moves `n` and `last`.
    let update = Long::update().n(1).last(s.n * 7 % 13);
    if s.n.is_multiple_of(10) {
        update.log(vec![s.n])
    } else {
        update
    }
}

/// A run of `Ticks` makes a thousand steps.
fn finished(s: &Long) -> bool {
    s.n >= 1000
}

graph! {
    pub Ticks for Long {
        start -> tick;
        tick -> end if finished;
        tick -> tick;
    }
}

/// The state after `k` ticks from `input`, computed here as the reducers would.
fn after(input: &Long, k: u64) -> Long {
    let mut s = input.clone();
    for _ in 0..k {
        let before = s.n;
        if before.is_multiple_of(10) {
            s.log.push(before);
        }
        s.last = before * 7 % 13;
        s.n += 1;
    }
    s
}

#[test]
fn a_thousand_steps_over_a_large_unchanging_field_store_what_changed() {
    let store = Counting::new(MemoryStore::new());
    let app = Ticks::builder().checkpointer(store.clone()).build();
    let input = Long { blob: "x".repeat(1 << 20), ..Long::default() };
    let t = ThreadId::from("long");
    let out = app.run(Call::start(input.clone()).on(t.clone())).unwrap().done().unwrap();
    let steps = out.n;
    assert_eq!(steps, 1000);
    assert_eq!(out, after(&input, steps));
    let bytes = store.bytes();
    let appends = store.appends.load(Ordering::SeqCst);
    println!("{steps} steps over a 1 MB field: {appends} appends, {bytes} bytes written");
    assert!(appends > 1000);
    assert!(bytes < 3 << 20, "{bytes} bytes written for {steps} steps over an unchanging 1 MB field");
    // The head, and a checkpoint in the middle (forked), read as full snapshots would.
    assert_eq!(app.state(&t).unwrap().unwrap().state, out);
    let fork = app.fork(&t, 500, "long-fork").unwrap();
    assert_eq!(fork.state, after(&input, fork.state.n));
    assert!((490..=500).contains(&fork.state.n), "checkpoint 500 is about step 500: {}", fork.state.n);
    assert_eq!(app.run(Call::recover("long-fork")).unwrap().done().unwrap(), out);
}

#[test]
fn history_time_travel_and_prune_read_the_states_a_full_snapshot_run_would() {
    let store = MemoryStore::new();
    let app = Ticks::builder().checkpointer(store.clone()).build();
    // A field large enough that many steps are deltas, small enough to read every checkpoint.
    let input = Long { blob: "y".repeat(4000), ..Long::default() };
    let t = ThreadId::from("travel");
    let out = app.run(Call::start(input.clone()).on(t.clone())).unwrap().done().unwrap();
    let history = app.history(&t).unwrap();
    let raw = store.history("Ticks", &t).unwrap();
    assert_eq!(history.len(), raw.len(), "every checkpoint reads");
    let deltas = raw.iter().filter(|(_, bytes)| bytes[0..4] == *b"TEAd").count();
    assert!(deltas * 2 > raw.len(), "most checkpoints are deltas: {deltas} of {}", raw.len());
    for snapshot in &history {
        assert_eq!(snapshot.state, after(&input, snapshot.state.n), "checkpoint {}", snapshot.checkpoint);
    }
    assert_eq!(history[0].state, out);
    // `update_state` on a delta head: the update goes through the reducers.
    let updated = app.update_state(&t, Long::update().n(5).log(vec![99]), "tick").unwrap();
    let mut expected = out.clone();
    expected.n += 5;
    expected.log.push(99);
    assert_eq!(updated.state, expected);
    assert_eq!(app.state(&t).unwrap().unwrap().state, expected);
    // Forks from every tenth checkpoint read the state that checkpoint held.
    for snapshot in history.iter().step_by(10) {
        let name = format!("travel-{}", snapshot.checkpoint);
        let fork = app.fork(&t, snapshot.checkpoint, name.as_str()).unwrap();
        assert_eq!(fork.state, snapshot.state);
    }
    // Prune keeps the newest readable checkpoints, and the full ones they fold from.
    let before: Vec<Long> = app.history(&t).unwrap().into_iter().map(|s| s.state).collect();
    for keep in [50, 7, 1] {
        app.prune(&t, keep).unwrap();
        let kept = app.history(&t).unwrap();
        assert!(kept.len() >= keep, "prune({keep}) left {}", kept.len());
        for (snapshot, state) in kept.iter().zip(&before) {
            assert_eq!(&snapshot.state, state);
        }
        assert_eq!(app.state(&t).unwrap().unwrap().state, expected);
    }
}

#[test]
fn a_resumed_pause_and_a_recover_continue_from_delta_checkpoints() {
    let store = MemoryStore::new();
    // The clock moves only when the test says: the copied checkpoints' lease runs out then.
    let clock = tea::Clock::manual(std::time::SystemTime::now());
    let app = Ticks::builder().checkpointer(store.clone()).clock(clock.clone()).build();
    let input = Long { blob: "z".repeat(2000), ..Long::default() };
    let t = ThreadId::from("recover");
    app.run(Call::start(input.clone()).on(t.clone())).unwrap();
    // Rewind to a delta in the middle, as a crash after it would leave the thread: every
    // checkpoint after it gone. A recover continues from there, and ends where the run did.
    let raw = store.history("Ticks", &t).unwrap();
    let middle =
        raw.iter().find(|(id, bytes)| bytes[0..4] == *b"TEAd" && *id < raw[0].0 / 2).map(|(id, _)| *id).unwrap();
    let kept: Vec<_> = raw.iter().rev().filter(|(id, _)| *id <= middle).cloned().collect();
    let other = ThreadId::from("recover-copy");
    for (id, bytes) in &kept {
        store.append("Ticks", &other, id.checked_sub(1).filter(|&h| h > 0), *id, bytes, true).unwrap();
    }
    let at = app.state(&other).unwrap().unwrap().state;
    assert_eq!(at, after(&input, at.n));
    assert!(matches!(app.run(Call::recover(&other)), Err(Error::ThreadBusy { .. })), "its lease is live");
    clock.advance(std::time::Duration::from_secs(3600));
    let out = app.run(Call::recover(&other)).unwrap().done().unwrap();
    assert_eq!(out, after(&input, 1000));
}

#[cfg(feature = "postgres")]
#[test]
fn a_durable_fan_out_writes_bytes_linear_in_its_branches_on_postgres() {
    let Ok(url) = std::env::var("TEA_TEST_POSTGRES_URL") else {
        eprintln!("skipped: TEA_TEST_POSTGRES_URL is not set");
        return;
    };
    let store = tea::PostgresStore::connect(&url).unwrap();
    let tag = std::process::id();
    fan_outs_grow_linearly(&format!("postgres{tag}"), store.clone(), &[100, 300]);
    for thread in store.threads("Spread").unwrap() {
        if thread.as_str().contains(&format!("postgres{tag}")) {
            store.delete("Spread", &thread).unwrap();
        }
    }
}

/// A fresh directory under the system's temporary directory.
fn scratch(name: &str) -> std::path::PathBuf {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let dir = std::env::temp_dir().join(format!("tea-growth-{name}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
