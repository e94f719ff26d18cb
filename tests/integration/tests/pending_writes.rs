//! Pending writes: with `Durability::EveryStep`, what a fan-out's branches completed is durable
//! as they complete, so a dropped future, a failed branch or a failed step inside a branch
//! re-runs only what had not completed — in sends and static fan-outs, blocking and async, and
//! in a fan-out nested inside a branch. On `MemoryStore` and `SledStore`.
//!
//! Each node counts its runs by a key of its own (`RUNS`); a test sets which key fails (once)
//! and checks, after `recover`, that every node that completed ran exactly once.
//!
//! On the blocking API a finished branch's progress is written behind it, by its journal's
//! writer, while the next branch runs: a write that fails there fails the fan-out as the
//! branch's own write did, a store's panic reaches the caller, a finished branch is written
//! while a long sibling still runs, and with one branch at a time each branch starts only once
//! the one before it is written.

#[path = "../../store_forward/mod.rs"]
mod store_forward;
use store_forward::forward;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tea::prelude::*;
use tea::{AppendOutcome, CheckpointId, Checkpointer, ThreadId};

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Work {
    /// The test that runs (keys of `RUNS` are prefixed with it: tests run at once).
    test: String,
    items: Vec<String>,
    item: String,
    #[reducer(append)]
    done: Vec<String>,
}

/// How often each node ran, by `{test}/{node}/{item}`.
static RUNS: Mutex<BTreeMap<String, usize>> = Mutex::new(BTreeMap::new());
/// Keys that fail the first time they run (removed as they fail).
static FAIL_ONCE: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn count(w: &Work, node: &str) -> Result<WorkUpdate, String> {
    let key = format!("{}/{node}/{}", w.test, w.item);
    *RUNS.lock().unwrap().entry(key.clone()).or_default() += 1;
    let mut fail = FAIL_ONCE.lock().unwrap();
    if let Some(i) = fail.iter().position(|k| *k == key) {
        fail.remove(i);
        return Err(format!("{key} fails this once"));
    }
    Ok(Work::update().done(vec![format!("{node}:{}", w.item)]))
}

fn runs(test: &str) -> BTreeMap<String, usize> {
    let prefix = format!("{test}/");
    RUNS.lock().unwrap().iter().filter_map(|(k, v)| k.strip_prefix(&prefix).map(|k| (k.to_owned(), *v))).collect()
}

fn fail_once(key: &str) {
    FAIL_ONCE.lock().unwrap().push(key.to_owned());
}

fn work(test: &str, items: &[&str]) -> Work {
    Work { test: test.to_owned(), items: items.iter().map(|s| (*s).to_owned()).collect(), ..Work::default() }
}

/// A directory of its own for one test, removed when dropped.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("tea-pending-{name}-{}", std::process::id()));
        std::fs::remove_dir_all(&dir).ok();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

fn sorted(mut done: Vec<String>) -> Vec<String> {
    done.sort();
    done
}

// Sends that each run `probe` then `check` (blocking).

fn plan(w: &Work) -> Command<SendsNode> {
    Command::send(w.items.iter().map(|i| tea::SendTo::new(SendsNode::Probe, Work::update().item(i.clone()))))
}
fn probe(w: &Work) -> Result<WorkUpdate, String> {
    count(w, "probe")
}
fn check(w: &Work) -> Result<WorkUpdate, String> {
    count(w, "check")
}
fn gather(_: &Work) -> WorkUpdate {
    Work::update()
}

graph! {
    pub Sends for Work {
        start -> plan;
        parallel plan => probe* -> gather;
        probe -> check;
        check -> gather;
        gather -> end;
    }
}

fn a_failed_send_reruns_only_its_failed_step<C: Checkpointer>(store: C, test: &str) {
    let app = Sends::builder().checkpointer(store).durability(Durability::EveryStep).build();
    fail_once(&format!("{test}/check/b"));
    let err = app.run(Call::start(work(test, &["a", "b", "c"])).on(test)).unwrap_err();
    assert!(matches!(&err, Error::NodeFailed { node, .. } if node.as_str() == "check"), "{err:?}");
    // What is durable: sends `a` and `c` at their join, `b` past `probe`.
    let snapshot = app.state(&ThreadId::from(test)).unwrap().unwrap();
    let progress: Vec<(String, u64, bool)> =
        snapshot.branches.iter().map(|b| (b.head.to_string(), b.steps, b.done)).collect();
    assert_eq!(progress, [("probe#0".into(), 2, true), ("probe#1".into(), 1, false), ("probe#2".into(), 2, true)]);
    assert_eq!(snapshot.next, ["check"]);
    assert_eq!(snapshot.branches[1].state.done, ["probe:b"], "a branch's own state: its updates only");

    let out = app.run(Call::recover(ThreadId::from(test))).unwrap().done().unwrap();
    assert_eq!(sorted(out.done), ["check:a", "check:b", "check:c", "probe:a", "probe:b", "probe:c"]);
    let expected: BTreeMap<String, usize> = [
        ("check/a", 1),
        ("check/b", 2), // failed once, then ran
        ("check/c", 1),
        ("probe/a", 1),
        ("probe/b", 1), // completed before its send failed: not run again
        ("probe/c", 1),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(runs(test), expected);
}

#[test]
fn a_failed_send_reruns_only_its_failed_step_on_memory() {
    a_failed_send_reruns_only_its_failed_step(MemoryStore::new(), "send-memory");
}

#[test]
fn a_failed_send_reruns_only_its_failed_step_on_sled() {
    let dir = Scratch::new("send-sled");
    a_failed_send_reruns_only_its_failed_step(SledStore::open(dir.0.join("db")).unwrap(), "send-sled");
}

// A static fan-out with a nested one inside a branch.

fn entry(_: &Work) -> WorkUpdate {
    Work::update()
}
fn left(w: &Work) -> Result<WorkUpdate, String> {
    count(w, "left")
}
fn left_more(w: &Work) -> Result<WorkUpdate, String> {
    count(w, "left_more")
}
fn outer(w: &Work) -> Result<WorkUpdate, String> {
    count(w, "outer")
}
fn inner_a(w: &Work) -> Result<WorkUpdate, String> {
    count(w, "inner_a")
}
fn inner_b(w: &Work) -> Result<WorkUpdate, String> {
    count(w, "inner_b")
}
fn inner_join(w: &Work) -> Result<WorkUpdate, String> {
    count(w, "inner_join")
}
fn join(w: &Work) -> Result<WorkUpdate, String> {
    count(w, "join")
}

graph! {
    pub Nested for Work {
        start -> entry;
        parallel entry => [left, outer] -> join;
        left -> left_more;
        left_more -> join;
        parallel outer => [inner_a, inner_b] -> inner_join;
        inner_join -> join;
        join -> end;
    }
}

fn nested_app<C: Checkpointer>(store: C) -> App<Nested, C> {
    Nested::builder().checkpointer(store).durability(Durability::EveryStep).build()
}

fn a_failure_inside_a_nested_fan_out_reruns_only_what_failed<C: Checkpointer>(store: C, test: &str) {
    let app = nested_app(store);
    fail_once(&format!("{test}/inner_b/"));
    fail_once(&format!("{test}/left_more/"));
    assert!(app.run(Call::start(work(test, &[])).on(test)).is_err());
    let snapshot = app.state(&ThreadId::from(test)).unwrap().unwrap();
    let outer = &snapshot.branches[1];
    assert_eq!((outer.head.as_str(), outer.steps, outer.done), ("outer", 1, false));
    let inner: Vec<(&str, u64, bool)> = outer.branches.iter().map(|b| (b.head.as_str(), b.steps, b.done)).collect();
    assert_eq!(inner, [("inner_a", 1, true), ("inner_b", 0, false)]);

    let out = app.run(Call::recover(ThreadId::from(test))).unwrap().done().unwrap();
    // The same result as a run that never failed.
    let clean = Nested::builder().build().invoke(work(&format!("{test}-clean"), &[])).unwrap();
    assert_eq!(out.done, clean.done);
    let expected: BTreeMap<String, usize> = [
        ("inner_a/", 1),
        ("inner_b/", 2),
        ("inner_join/", 1),
        ("join/", 1),
        ("left/", 1),
        ("left_more/", 2),
        ("outer/", 1),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(runs(test), expected);
}

#[test]
fn a_failure_inside_a_nested_fan_out_reruns_only_what_failed_on_memory() {
    a_failure_inside_a_nested_fan_out_reruns_only_what_failed(MemoryStore::new(), "nested-memory");
}

#[test]
fn a_failure_inside_a_nested_fan_out_reruns_only_what_failed_on_sled() {
    let dir = Scratch::new("nested-sled");
    let store = SledStore::open(dir.0.join("db")).unwrap();
    a_failure_inside_a_nested_fan_out_reruns_only_what_failed(store, "nested-sled");
}

#[test]
fn with_on_pause_durability_nothing_of_a_fan_out_is_written_while_it_runs() {
    let test = "on-pause";
    let app = Nested::builder().checkpointer(MemoryStore::new()).durability(Durability::OnPause).build();
    fail_once(&format!("{test}/left_more/"));
    assert!(app.run(Call::start(work(test, &[])).on(test)).is_err());
    // The run wrote only its claim: nothing of the fan-out is kept, as documented.
    let history = app.history(&ThreadId::from(test)).unwrap();
    assert!(history.iter().all(|s| s.branches.is_empty()), "{history:?}");
}

// Async sends: the caller drops the future while one send still waits.

/// While set, `slow` sends wait (for good: the test drops the run).
static HOLD: AtomicBool = AtomicBool::new(true);

fn plan_async(w: &Work) -> Command<AsyncSendsNode> {
    Command::send(w.items.iter().map(|i| tea::SendTo::new(AsyncSendsNode::Fetch, Work::update().item(i.clone()))))
}
async fn fetch(w: &Work) -> Result<WorkUpdate, String> {
    let update = count(w, "fetch")?;
    if w.item == "slow" && HOLD.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    Ok(update)
}

graph! {
    pub AsyncSends for Work {
        start -> plan_async;
        parallel plan_async => fetch* -> gather;
        gather -> end;
        async fetch;
    }
}

async fn a_dropped_fan_out_keeps_the_sends_that_finished<C: Checkpointer>(store: C, test: &str) {
    let app = AsyncSends::builder().checkpointer(store).durability(Durability::EveryStep).build();
    let run = app.run_async(Call::start(work(test, &["a", "b", "slow"])).on(test));
    // `a` and `b` finish at once; the caller gives up 200 ms later, dropping the run.
    assert!(tokio::time::timeout(Duration::from_millis(200), run).await.is_err());
    HOLD.store(false, Ordering::SeqCst);
    let out = app.run_async(Call::recover(ThreadId::from(test))).await.unwrap().done().unwrap();
    assert_eq!(out.done, ["fetch:a", "fetch:b", "fetch:slow"]);
    let expected: BTreeMap<String, usize> =
        [("fetch/a", 1), ("fetch/b", 1), ("fetch/slow", 2)].into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    // `slow` was cancelled mid-way: it runs again; `a` and `b` completed and do not.
    assert_eq!(runs(test), expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_fan_out_keeps_the_sends_that_finished_on_memory_and_sled() {
    a_dropped_fan_out_keeps_the_sends_that_finished(MemoryStore::new(), "drop-memory").await;
    HOLD.store(true, Ordering::SeqCst);
    let dir = Scratch::new("drop-sled");
    let store = SledStore::open(dir.0.join("db")).unwrap();
    a_dropped_fan_out_keeps_the_sends_that_finished(store, "drop-sled").await;
}

// With a group commit window, a dropped fan-out runs again at most the window's worth of the
// sends that finished, and none that took longer than the window.

/// While set, the `slow` timed send waits (for good: the test drops the run).
static HOLD_TIMED: AtomicBool = AtomicBool::new(true);

fn plan_timed(w: &Work) -> Command<AsyncTimedNode> {
    Command::send(w.items.iter().map(|i| tea::SendTo::new(AsyncTimedNode::Timed, Work::update().item(i.clone()))))
}
async fn timed(w: &Work) -> Result<WorkUpdate, String> {
    let update = count(w, "timed")?;
    let millis = match w.item.as_str() {
        "long" => 60,
        "slow" if HOLD_TIMED.load(Ordering::SeqCst) => 3_600_000,
        _ => SHORT_MS,
    };
    tokio::time::sleep(Duration::from_millis(millis)).await;
    Ok(update)
}

/// How long each short send works; the window is four times as long.
const SHORT_MS: u64 = 5;

graph! {
    pub AsyncTimed for Work {
        start -> plan_timed;
        parallel plan_timed => timed* -> gather;
        gather -> end;
        async timed;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_fan_out_runs_again_at_most_its_window_of_finished_sends() {
    let test = "window";
    let window = Duration::from_millis(4 * SHORT_MS);
    let app = AsyncTimed::builder()
        .checkpointer(MemoryStore::new())
        .durability(Durability::EveryStep)
        .group_commit(window)
        .build();
    let items = ["s1", "s2", "s3", "s4", "s5", "s6", "s7", "long", "slow"];
    let run = app.run_async(Call::start(work(test, &items)).on(test));
    // The caller gives up once `long` is in the store (its branch shows done): waited for, not
    // slept on, so a loaded machine changes nothing.
    let thread = ThreadId::from(test);
    let long_written = async {
        loop {
            let state = app.state(&thread).unwrap();
            if state.is_some_and(|s| s.branches.iter().any(|b| b.done && b.state.item == "long")) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    let given_up = tokio::time::timeout(Duration::from_secs(30), async {
        tokio::select! {
            _ = run => panic!("the run cannot finish: `slow` waits"),
            () = long_written => {}
        }
    });
    given_up.await.expect("`long` worked longer than the window: it is written on its own");
    HOLD_TIMED.store(false, Ordering::SeqCst);
    let out = app.run_async(Call::recover(ThreadId::from(test))).await.unwrap().done().unwrap();
    assert_eq!(out.done.len(), items.len(), "{:?}", out.done);
    let runs = runs(test);
    // `long` worked longer than the window: it was written on its own, and does not run again.
    assert_eq!(runs["timed/long"], 1, "{runs:?}");
    assert_eq!(runs["timed/slow"], 2, "{runs:?}");
    // Each short send worked at least SHORT_MS: fewer than four of them fit in the window.
    let again: usize = (1..=7).map(|i| runs[&format!("timed/s{i}")] - 1).sum();
    assert!(again < 4, "{again} finished sends ran again: more than the window's worth ({runs:?})");
}

// A fan-out whose every branch finished, stopped before its join: the join runs next.

fn split(_: &Work) -> WorkUpdate {
    Work::update()
}
fn left_owner(_: &Work) -> WorkUpdate {
    Work::update().item("left".to_owned())
}
fn right_owner(_: &Work) -> WorkUpdate {
    Work::update().item("right".to_owned())
}
fn settle(_: &Work) -> WorkUpdate {
    Work::update()
}

graph! {
    pub Clash for Work {
        start -> split;
        parallel split => [left_owner, right_owner] -> settle;
        settle -> end;
    }
}

#[test]
fn a_fan_out_whose_branches_all_finished_shows_its_join_next() {
    // Both branches replace `item`: the merge fails after both finished and were written.
    let app = Clash::builder().checkpointer(MemoryStore::new()).durability(Durability::EveryStep).build();
    let error = app.run(Call::start(work("clash", &[])).on("clash")).unwrap_err();
    assert!(matches!(error, Error::ConflictingWrites { .. }), "{error:?}");
    let snapshot = app.state(&ThreadId::from("clash")).unwrap().unwrap();
    assert!(snapshot.branches.iter().all(|b| b.done), "{snapshot:?}");
    assert_eq!(snapshot.next, ["settle"], "the thread is not finished: its join runs next");
}

#[test]
fn a_fan_out_whose_merge_fails_fails_again_on_recover_with_a_group_commit() {
    // The same fan-out with a group commit: its cheap branches are left to the join's
    // checkpoint, which the failed merge never writes; `recover` runs them again, and the
    // merge fails the same way.
    let app = Clash::builder()
        .checkpointer(MemoryStore::new())
        .durability(Durability::EveryStep)
        .group_commit(Duration::from_secs(60))
        .build();
    let error = app.run(Call::start(work("clash-grouped", &[])).on("clash-grouped")).unwrap_err();
    assert!(matches!(error, Error::ConflictingWrites { .. }), "{error:?}");
    let snapshot = app.state(&ThreadId::from("clash-grouped")).unwrap().unwrap();
    assert_eq!(snapshot.next, ["left_owner", "right_owner"], "{snapshot:?}");
    let again = app.run(Call::recover("clash-grouped")).unwrap_err();
    assert!(matches!(again, Error::ConflictingWrites { .. }), "{again:?}");
}

// ---------------------------------------------------------------------------------------------
// Writes behind the branches (the blocking API): sends of one node each, which finish at the
// join, through a store that fails, panics or is slow on chosen appends.

fn plan_quick(w: &Work) -> Command<QuickNode> {
    Command::send(w.items.iter().map(|i| tea::SendTo::new(QuickNode::Quick, Work::update().item(i.clone()))))
}

/// Counts its run; with one branch at a time (test `one-at-a-time`), first checks that the
/// send before it (items are numbers) is already in the store. Item `wait` (test
/// `long-sibling`) waits, up to ten seconds, for send `0`'s progress to be in the store; send
/// `0` of that test first works 2 ms (past the fan-out's first 100 µs, whose finished branches
/// are left to its end).
fn quick(w: &Work) -> Result<WorkUpdate, String> {
    if (w.test.as_str(), w.item.as_str()) == ("long-sibling", "0") {
        std::thread::sleep(Duration::from_millis(2));
        return count(w, "quick");
    }
    if w.item == "wait" {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !written(&w.test, "quick:0") {
            if std::time::Instant::now() > deadline {
                return Err("send 0 finished ten seconds ago and is still not in the store".into());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        return count(w, "quick");
    }
    let before = w.item.parse::<u32>().ok().and_then(|i| i.checked_sub(1));
    if let (Some(before), "one-at-a-time") = (before, w.test.as_str()) {
        if !written(&w.test, &format!("quick:{before}")) {
            return Err(format!("send {} started before send {before} was written", w.item));
        }
    }
    count(w, "quick")
}

/// Whether test `test`'s store wrote a record holding `needle`.
fn written(test: &str, needle: &str) -> bool {
    WRITTEN
        .lock()
        .unwrap()
        .get(test)
        .is_some_and(|records| records.iter().any(|r| r.windows(needle.len()).any(|at| at == needle.as_bytes())))
}

fn gather_quick(_: &Work) -> WorkUpdate {
    Work::update()
}

graph! {
    pub Quick for Work {
        start -> plan_quick;
        parallel plan_quick => quick* -> gather_quick;
        gather_quick -> end;
    }
}

/// What each test's store wrote, by test (for `quick`'s check).
static WRITTEN: Mutex<BTreeMap<String, Vec<Vec<u8>>>> = Mutex::new(BTreeMap::new());

/// What a `Faulty` store does on an append.
#[derive(Clone, Copy)]
enum Fault {
    /// Refuses the append (once).
    Fail,
    /// Panics (once).
    Panic,
    /// Takes this long, from that append on.
    Slow(Duration),
}

/// A `MemoryStore` that keeps what it writes under its test's name and does `fault` on its
/// `at`-th append (counted from 1).
#[derive(Clone)]
struct Faulty {
    inner: MemoryStore,
    test: String,
    appends: Arc<AtomicUsize>,
    at: usize,
    fault: Fault,
}

impl Faulty {
    fn new(test: &str, at: usize, fault: Fault) -> Self {
        Faulty { inner: MemoryStore::new(), test: test.to_owned(), appends: Arc::default(), at, fault }
    }
}

impl Checkpointer for Faulty {
    fn append(
        &self,
        graph: &str,
        thread: &ThreadId,
        expected: Option<CheckpointId>,
        id: CheckpointId,
        bytes: &[u8],
        durable: bool,
    ) -> Result<AppendOutcome, Error> {
        let n = self.appends.fetch_add(1, Ordering::SeqCst) + 1;
        match self.fault {
            Fault::Fail if n == self.at => return Err(Error::store(format!("append {n} refused, as planned"))),
            Fault::Panic if n == self.at => panic!("append {n} panics, as planned"),
            Fault::Slow(wait) if n >= self.at => std::thread::sleep(wait),
            _ => {}
        }
        let outcome = self.inner.append(graph, thread, expected, id, bytes, durable)?;
        if outcome == AppendOutcome::Written {
            WRITTEN.lock().unwrap().entry(self.test.clone()).or_default().push(bytes.to_vec());
        }
        Ok(outcome)
    }
    forward!(inner: head, get, history, range, threads, delete, prune);
}

fn numbered(test: &str, n: u32) -> Work {
    let items: Vec<String> = (0..n).map(|i| i.to_string()).collect();
    Work { test: test.to_owned(), items, ..Work::default() }
}

#[test]
fn a_write_behind_the_branches_that_fails_fails_the_fan_out_and_recover_reruns_nothing_finished() {
    // Appends 1 and 2 are the run's first checkpoint and the fan-out's; the 3rd is the first
    // write of a finished send's progress, made behind it.
    let test = "behind-fails";
    let store = Faulty::new(test, 3, Fault::Fail);
    let app = Quick::builder().checkpointer(store).durability(Durability::EveryStep).build();
    let error = app.run(Call::start(numbered(test, 8)).on(test)).unwrap_err();
    assert!(error.to_string().contains("append 3 refused, as planned"), "{error}");
    // Every send finished: the failure's checkpoint keeps them all, and nothing runs again.
    let out = app.run(Call::recover(ThreadId::from(test))).unwrap().done().unwrap();
    assert_eq!(out.done.len(), 8, "{:?}", out.done);
    let runs = runs(test);
    assert_eq!(runs.len(), 8, "{runs:?}");
    assert!(runs.values().all(|&n| n == 1), "a finished send ran again: {runs:?}");
}

#[test]
fn a_store_that_panics_behind_the_branches_panics_in_the_caller() {
    let test = "behind-panics";
    let store = Faulty::new(test, 3, Fault::Panic);
    let app = Quick::builder().checkpointer(store).durability(Durability::EveryStep).build();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = app.run(Call::start(numbered(test, 8)).on(test));
    }));
    let payload = caught.expect_err("the store's panic reaches the caller");
    let message = payload.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.contains("append 3 panics, as planned"), "{message:?}");
}

#[test]
fn a_finished_send_is_written_while_a_long_sibling_still_runs() {
    // A branch that finishes after its fan-out's first 100 µs is written behind it: send `0`,
    // done after 2 ms, is in the store while `wait` still runs (which waits for it), not only
    // at the join.
    let test = "long-sibling";
    let store = Faulty::new(test, usize::MAX, Fault::Fail);
    let app = Quick::builder().checkpointer(store).durability(Durability::EveryStep).build();
    let out = app.run(Call::start(work(test, &["0", "wait"])).on(test)).unwrap().done().unwrap();
    assert_eq!(sorted(out.done), ["quick:0", "quick:wait"]);
}

#[test]
fn one_branch_at_a_time_starts_each_branch_once_the_one_before_is_written() {
    // Each write from the fan-out's on takes 20 ms: a send that started while the one before
    // it was still being written would fail its own check (`quick`).
    let test = "one-at-a-time";
    let store = Faulty::new(test, 3, Fault::Slow(Duration::from_millis(20)));
    let app = Quick::builder().checkpointer(store).durability(Durability::EveryStep).max_parallel_branches(1).build();
    let out = app.run(Call::start(numbered(test, 5)).on(test)).unwrap().done().unwrap();
    assert_eq!(sorted(out.done), ["quick:0", "quick:1", "quick:2", "quick:3", "quick:4"]);
}
