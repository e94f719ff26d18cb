//! Leases across subgraph nodes: a subgraph node's child run keeps its parent's lease (and its
//! ancestors') alive, so a live parent whose child outlasts the lease — each of the child's nodes
//! far shorter than it — is never taken over by a concurrent `recover`; a child owned by a live
//! run makes the parent's `recover` `ThreadBusy`; a child whose parent was taken over stops.
//!
//! Every node takes 200 ms, half the 400 ms lease; a child of three nodes takes 600 ms, so a
//! parent's lease written before its subgraph node would expire while the child still runs.
//! `recover` is tried every 50 ms while the live run goes on: each attempt must find the thread
//! busy (or, once the run is over, finished), and no node may run twice.

mod store_forward;
use store_forward::forward;

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tea::prelude::*;
use tea::{AppendOutcome, Graph};

const LEASE: Duration = Duration::from_millis(400);
const NODE: Duration = Duration::from_millis(200);

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Job {
    #[reducer(append)]
    trail: Vec<String>,
}

/// Every node run, as `{thread} {node}`.
static RUNS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The node runs of the threads under `root` (`root` and its children `root/…`).
fn runs_under(root: &str) -> Vec<String> {
    let child = format!("{root}/");
    let runs = RUNS.lock().unwrap();
    runs.iter().filter(|r| r.split(' ').next().is_some_and(|t| t == root || t.starts_with(&child))).cloned().collect()
}

/// A node that takes `NODE` and records its run.
fn slow(ctx: &Ctx<Job>) -> JobUpdate {
    let thread = ctx.thread().map(ToString::to_string).unwrap_or_default();
    RUNS.lock().unwrap().push(format!("{thread} {}", ctx.node()));
    std::thread::sleep(NODE);
    Job::update().trail(vec![ctx.node().to_string()])
}

fn c1(_: &Job, ctx: &Ctx<Job>) -> JobUpdate {
    slow(ctx)
}
fn c2(_: &Job, ctx: &Ctx<Job>) -> JobUpdate {
    slow(ctx)
}
fn c3(_: &Job, ctx: &Ctx<Job>) -> JobUpdate {
    slow(ctx)
}
fn p(_: &Job, ctx: &Ctx<Job>) -> JobUpdate {
    slow(ctx)
}
fn q(_: &Job, ctx: &Ctx<Job>) -> JobUpdate {
    slow(ctx)
}
fn g(_: &Job, ctx: &Ctx<Job>) -> JobUpdate {
    slow(ctx)
}
fn other(_: &Job, ctx: &Ctx<Job>) -> JobUpdate {
    slow(ctx)
}
fn join(_: &Job) {}

graph! {
    /// A child of three nodes: 600 ms, longer than the lease.
    pub Kid for Job { start -> c1; c1 -> c2; c2 -> c3; c3 -> end; }
}
graph! {
    /// A parent whose subgraph node runs `Kid`.
    pub Mom for Job { start -> p; p -> k; k -> q; q -> end; subgraph k = Kid; }
}
graph! {
    /// Two levels: `Gran` runs `Mom`, which runs `Kid`.
    pub Gran for Job { start -> g; g -> m; m -> end; subgraph m = Mom; }
}
graph! {
    /// A subgraph node as one branch of a fan-out.
    pub Fan for Job {
        start -> p;
        parallel p => [k, other] -> join;
        join -> end;
        subgraph k = Kid;
    }
}

/// Waits until `run` (`{thread} {node}`) has started: a node records itself before it works.
fn wait_until_started(run: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !RUNS.lock().unwrap().iter().any(|r| r == run) {
        assert!(std::time::Instant::now() < deadline, "`{run}` did not start within 30 s");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Waits until the test sets `gate` (for at most 30 s, so a failed test never hangs).
fn wait_for(gate: &AtomicBool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !gate.load(Ordering::Acquire) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Tries `recover` on each of `threads` every 50 ms until `live` is over; every attempt must
/// find the thread busy (or already finished). Returns how many found it busy.
fn race_recovers<F: Fn(&ThreadId) -> Result<Outcome<Job>, Error>>(
    recover: F,
    threads: &[&str],
    live: &AtomicBool,
) -> usize {
    let mut busy = 0;
    while live.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(50));
        for thread in threads {
            match recover(&ThreadId::from(*thread)) {
                Err(Error::ThreadBusy { .. }) => busy += 1,
                Ok(Outcome::Done(_)) | Err(Error::CheckpointNotFound { .. }) => {}
                other => panic!("a live run's thread `{thread}` was taken over: {other:?}"),
            }
        }
    }
    busy
}

/// Runs `run` (a live run of thread `root`) while `recover` races it on `threads`; the live run
/// must finish with `trail`, every node having run once.
fn not_taken_over<R, F>(run: R, recover: F, root: &str, threads: &[&str], trail: &[&str])
where
    R: FnOnce() -> Result<Outcome<Job>, Error> + Send,
    F: Fn(&ThreadId) -> Result<Outcome<Job>, Error> + Sync,
{
    let live = AtomicBool::new(true);
    let (outcome, busy) = std::thread::scope(|s| {
        let racer = s.spawn(|| race_recovers(&recover, threads, &live));
        let outcome = run();
        live.store(false, Ordering::Release);
        (outcome, racer.join().unwrap())
    });
    let state = match outcome {
        Ok(Outcome::Done(state)) => state,
        other => panic!("the live run failed: {other:?}"),
    };
    assert_eq!(state.trail, trail);
    assert!(busy > 0, "no recover raced the live run");
    let mut runs = runs_under(root);
    let all = runs.len();
    runs.sort();
    runs.dedup();
    assert_eq!(all, runs.len(), "a node ran twice: {runs:?}");
    assert_eq!(all, trail.len(), "{runs:?}");
}

fn a_live_parent_whose_child_outlasts_the_lease_is_not_taken_over<C: Checkpointer + Clone>(store: C, thread: &str) {
    let app = Mom::builder().checkpointer(store).lease(LEASE).build();
    not_taken_over(
        || app.run(Call::start(Job::default()).on(thread)),
        |t| app.run(Call::recover(t)),
        thread,
        &[thread],
        &["p", "c1", "c2", "c3", "q"],
    );
    // The child finished on its own thread, once.
    let kid = Kid::builder().checkpointer(app.checkpointer().clone()).build();
    let child = kid.state(&ThreadId::from(format!("{thread}/k@2"))).unwrap().expect("the child's thread");
    assert!(child.next.is_empty(), "{:?}", child.next);
}

#[test]
fn a_live_parent_whose_child_outlasts_the_lease_is_not_taken_over_on_memory() {
    a_live_parent_whose_child_outlasts_the_lease_is_not_taken_over(MemoryStore::new(), "mem");
}

#[test]
fn a_live_parent_whose_child_outlasts_the_lease_is_not_taken_over_on_sled() {
    let dir = std::env::temp_dir().join(format!("tea-subgraph-leases-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    a_live_parent_whose_child_outlasts_the_lease_is_not_taken_over(SledStore::open(&dir).unwrap(), "sled");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_grandchild_keeps_its_parent_and_grandparent_alive() {
    let store = MemoryStore::new();
    let gran = Gran::builder().checkpointer(store.clone()).lease(LEASE).build();
    let mom = Mom::builder().checkpointer(store).lease(LEASE).build();
    // The middle run (`Mom` in thread `two/m@2`) is raced too, through an app of its own graph.
    not_taken_over(
        || gran.run(Call::start(Job::default()).on("two")),
        |t| if t.as_str() == "two" { gran.run(Call::recover(t)) } else { mom.run(Call::recover(t)) },
        "two",
        &["two", "two/m@2"],
        &["g", "p", "c1", "c2", "c3", "q"],
    );
}

#[test]
fn a_subgraph_node_in_a_parallel_branch_keeps_its_parent_alive() {
    let app = Fan::builder().checkpointer(MemoryStore::new()).lease(LEASE).build();
    let (outcome, busy) = {
        let live = AtomicBool::new(true);
        std::thread::scope(|s| {
            let racer = s.spawn(|| race_recovers(|t| app.run(Call::recover(t)), &["fan"], &live));
            let outcome = app.run(Call::start(Job::default()).on("fan"));
            live.store(false, Ordering::Release);
            (outcome, racer.join().unwrap())
        })
    };
    let state = match outcome {
        Ok(Outcome::Done(state)) => state,
        other => panic!("the live run failed: {other:?}"),
    };
    // Branches merge in declared order.
    assert_eq!(state.trail, ["p", "c1", "c2", "c3", "other"]);
    assert!(busy > 0, "no recover raced the live run");
    let mut runs = runs_under("fan");
    let all = runs.len();
    runs.sort();
    runs.dedup();
    assert_eq!((all, runs.len()), (5, 5), "{runs:?}");
}

// ---------------------------------------------------------------------------------------------
// A child owned by a live run: the parent's `recover` is `ThreadBusy`, naming the child.

/// Whether `d2` fails (the first run of `Mom2` stops there).
static FAIL_D2: AtomicBool = AtomicBool::new(true);
/// Set once the parent's `recover` has met the live child: `d2` holds the child's thread till then.
static RELEASE_D2: AtomicBool = AtomicBool::new(false);

fn d1(_: &Job, ctx: &Ctx<Job>) -> JobUpdate {
    slow(ctx)
}
fn d2(_: &Job, ctx: &Ctx<Job>) -> Result<JobUpdate, String> {
    if FAIL_D2.load(Ordering::Acquire) {
        return Err("d2 is down".into());
    }
    let update = slow(ctx);
    wait_for(&RELEASE_D2);
    Ok(update)
}

graph! { pub Kid2 for Job { start -> d1; d1 -> d2; d2 -> end; } }
graph! { pub Mom2 for Job { start -> k; k -> end; subgraph k = Kid2; } }

#[test]
fn a_parents_recover_finds_its_child_owned_by_a_live_run_busy() {
    let store = MemoryStore::new();
    let lease = Duration::from_secs(30);
    let mom = Mom2::builder().checkpointer(store.clone()).lease(lease).build();
    let kid = Kid2::builder().checkpointer(store).lease(lease).build();
    // The first run stops at `d2`: the parent and the child release their leases.
    let failed = mom.run(Call::start(Job::default()).on("busy"));
    assert!(matches!(failed, Err(Error::NodeFailed { .. })), "{failed:?}");
    FAIL_D2.store(false, Ordering::Release);
    let child = ThreadId::from("busy/k@1");
    std::thread::scope(|s| {
        // A live run of the child's thread (another process recovering it directly, say).
        let live = s.spawn(|| kid.run(Call::recover(&child)));
        wait_until_started("busy/k@1 d2");
        let busy = mom.run(Call::recover(ThreadId::from("busy")));
        RELEASE_D2.store(true, Ordering::Release);
        match busy {
            Err(Error::ThreadBusy { thread, expires_in }) => {
                assert_eq!(thread, child);
                assert!(expires_in > Duration::ZERO && expires_in <= lease, "{expires_in:?}");
            }
            other => panic!("the parent's recover should find its child busy: {other:?}"),
        }
        let done = live.join().unwrap();
        assert!(matches!(done, Ok(Outcome::Done(_))), "{done:?}");
    });
    // The refused recover released its claim on the parent: the next one runs at once (the
    // 30 s lease would make it `ThreadBusy` otherwise) and finds the child finished.
    let done = mom.run(Call::recover(ThreadId::from("busy"))).unwrap();
    let state = done.done().expect("the parent finishes");
    assert_eq!(state.trail, ["d1", "d2"]);
    assert_eq!(runs_under("busy"), ["busy/k@1 d1", "busy/k@1 d2"]);
}

// ---------------------------------------------------------------------------------------------
// A parent taken over while its child runs: the child stops with `LeaseLost`.

/// Set once the test has moved the parent's head: `e1` runs till then.
static RELEASE_E1: AtomicBool = AtomicBool::new(false);

fn e1(_: &Job, ctx: &Ctx<Job>) -> JobUpdate {
    let update = slow(ctx);
    wait_for(&RELEASE_E1);
    update
}
fn e2(_: &Job, ctx: &Ctx<Job>) -> JobUpdate {
    slow(ctx)
}
fn e3(_: &Job, ctx: &Ctx<Job>) -> JobUpdate {
    slow(ctx)
}
graph! { pub Kid3 for Job { start -> e1; e1 -> e2; e2 -> e3; e3 -> end; } }
graph! { pub Mom3 for Job { start -> k; k -> end; subgraph k = Kid3; } }

#[test]
fn a_child_whose_parent_was_taken_over_stops() {
    let store = MemoryStore::new();
    let app = Mom3::builder().checkpointer(store.clone()).lease(LEASE).build();
    let thread = ThreadId::from("lost");
    std::thread::scope(|s| {
        let live = s.spawn(|| app.run(Call::start(Job::default()).on(thread.clone())));
        // While `e1` runs, another writer moves the parent's head (as a recover claiming it
        // would): the child's renewal of the parent's lease, due after `e1`, loses.
        wait_until_started("lost/k@1 e1");
        let graph = app.graph().name();
        let (head, bytes) = store.head(graph, &thread).unwrap().expect("the parent's checkpoint");
        let moved = store.append(graph, &thread, Some(head), head + 1, &bytes, true);
        RELEASE_E1.store(true, Ordering::Release);
        assert!(matches!(moved, Ok(AppendOutcome::Written)), "{moved:?}");
        match live.join().unwrap() {
            Err(Error::LeaseLost { thread: lost }) => assert_eq!(lost, thread),
            other => panic!("the child should stop for its lost parent: {other:?}"),
        }
    });
    // The child stopped after `e1`: nothing ran for a parent that was gone.
    assert_eq!(runs_under("lost"), ["lost/k@1 e1"]);
}

// ---------------------------------------------------------------------------------------------
// A store whose write lands but reports an error: the run reports the store's error.

/// A `MemoryStore` whose append number `good` (from 0) to `thread` is written and then answered
/// with an error (as by a store whose acknowledgement was lost).
struct LandsThenFails {
    inner: MemoryStore,
    thread: ThreadId,
    good: usize,
    seen: std::sync::atomic::AtomicUsize,
}

impl Checkpointer for LandsThenFails {
    fn append(
        &self,
        graph: &str,
        thread: &ThreadId,
        expected: Option<tea::CheckpointId>,
        id: tea::CheckpointId,
        bytes: &[u8],
        durable: bool,
    ) -> Result<AppendOutcome, Error> {
        let appended = self.inner.append(graph, thread, expected, id, bytes, durable)?;
        if *thread == self.thread && self.seen.fetch_add(1, Ordering::SeqCst) == self.good {
            return Err(Error::store("the disk answered EIO after the write"));
        }
        Ok(appended)
    }
    forward!(inner: head, get, history, threads, delete, prune);
}

#[test]
fn a_write_that_lands_but_fails_is_reported_as_the_stores_error() {
    // Each write of the parent's thread in turn (its claim, its fan-out's progress, the
    // renewals of its lease by the subgraph node's child) is the one that lands and fails: the
    // run stops on the store's error, never on a takeover that did not happen. (Which write
    // fails first depends on timing: `lease::tests` checks the same deterministically.)
    for failing in 0..7 {
        let thread = ThreadId::from(format!("landed{failing}"));
        let store = LandsThenFails {
            inner: MemoryStore::new(),
            thread: thread.clone(),
            good: failing,
            seen: Default::default(),
        };
        let app = Fan::builder().checkpointer(store).lease(LEASE).build();
        match app.run(Call::start(Job::default()).on(thread.clone())) {
            Err(error) => {
                let chain = tea::error_chain(&error);
                assert!(chain.contains("the disk answered EIO after the write"), "write {failing}: {chain}");
                assert!(!matches!(error, Error::LeaseLost { .. }), "write {failing}: {error:?}");
            }
            Ok(outcome) => panic!("write {failing} failed, yet the run went on: {outcome:?}"),
        }
    }
}
