//! The crash matrix: processes killed with SIGKILL at random moments of a fan-out, on
//! `SledStore`, `DirStore` and PostgreSQL, with `Durability::EveryStep`; after each kill
//! `recover` finishes the run, and the tally shows that no completed node ran again and no
//! result was lost.
//!
//! Four scenarios: a fan-out of 20 sends of two steps each, a fan-out with another nested in a
//! branch, a subgraph node in a branch, and a fan-out of 20 async sends on tokio. Each is run in
//! a child process (this test binary, `std::env::current_exe()`, in a role) that the test kills
//! after a random delay within the scenario's measured run time; then the test reads the
//! thread's checkpoint — what the store holds as completed: the main line's state, each
//! branch's own state (`Snapshot::branches`, nested ones too) and, for the subgraph, the child
//! graph's thread — recovers the thread in its own process, and compares:
//! - no node whose completion the store held was started again (each node logs its start, with
//!   its thread, to a shared log file that survives the kill);
//! - the final state holds every node exactly once, as an uninterrupted run's does.
//!
//! `TEA_CRASH_KILLS` sets the kills per scenario and store (50 by default). The PostgreSQL
//! column skips, saying so, without a server (see `postgres_support`).

#[path = "../../postgres_support/mod.rs"]
mod postgres_support;

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command as Process, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tea::prelude::*;
use tea::{Checkpointer, DirStore, Snapshot, ThreadId};

const TEST: &str = "processes_killed_at_random_moments_of_fan_outs_rerun_nothing_completed";
const ROLE: &str = "TEA_MATRIX_ROLE";
const SCENARIO: &str = "TEA_MATRIX_SCENARIO";
const STORE: &str = "TEA_MATRIX_STORE";
const WHERE: &str = "TEA_MATRIX_WHERE";
const THREAD: &str = "TEA_MATRIX_THREAD";
const LOG: &str = "TEA_MATRIX_LOG";
const LEASE: Duration = Duration::from_millis(300);

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// The thread, so that nodes log which run they belong to.
    thread: String,
    items: Vec<String>,
    item: String,
    #[reducer(append)]
    done: Vec<String>,
}

/// The log file of the test's own process (a child process gets its path in `LOG`).
static LOG_HERE: Mutex<Option<PathBuf>> = Mutex::new(None);

/// A random number below `n` (the clock's nanoseconds, mixed).
fn random_below(n: u64) -> u64 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    let mut x = nanos ^ 0x9e37_79b9_7f4a_7c15;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x % n.max(1)
}

/// Logs the node's start (a complete `write` survives the kill of its process); the key it
/// writes into the state.
fn enter(job: &Job, node: &str) -> (String, Duration) {
    let key = format!("{node}:{}", job.item);
    let log = std::env::var(LOG).map(PathBuf::from).ok().or_else(|| LOG_HERE.lock().unwrap().clone());
    if let Some(path) = log {
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
        file.write_all(format!("{} {key}\n", job.thread).as_bytes()).unwrap();
    }
    (key, Duration::from_millis(1 + random_below(5)))
}

fn step(job: &Job, node: &str) -> JobUpdate {
    let (key, pause) = enter(job, node);
    std::thread::sleep(pause);
    Job::update().done(vec![key])
}

async fn step_async(job: &Job, node: &str) -> JobUpdate {
    let (key, pause) = enter(job, node);
    tokio::time::sleep(pause).await;
    Job::update().done(vec![key])
}

fn items() -> Vec<String> {
    (0..20).map(|i| format!("i{i:02}")).collect()
}

// Scenario `sends`: 20 sends of two steps each.

fn plan(job: &Job) -> Command<SendsNode> {
    Command::send(job.items.iter().map(|i| tea::SendTo::new(SendsNode::Fetch, Job::update().item(i.clone()))))
}
fn fetch(job: &Job) -> JobUpdate {
    step(job, "fetch")
}
fn parse(job: &Job) -> JobUpdate {
    step(job, "parse")
}
fn gather(job: &Job) -> JobUpdate {
    step(job, "gather")
}

graph! {
    pub Sends for Job {
        start -> plan;
        parallel plan => fetch* -> gather;
        fetch -> parse;
        parse -> gather;
        gather -> end;
    }
}

// Scenario `nested`: a fan-out inside a branch of another.

fn entry(job: &Job) -> JobUpdate {
    step(job, "entry")
}
fn a(job: &Job) -> JobUpdate {
    step(job, "a")
}
fn a2(job: &Job) -> JobUpdate {
    step(job, "a2")
}
fn outer(job: &Job) -> JobUpdate {
    step(job, "outer")
}
fn i1(job: &Job) -> JobUpdate {
    step(job, "i1")
}
fn i2(job: &Job) -> JobUpdate {
    step(job, "i2")
}
fn i3(job: &Job) -> JobUpdate {
    step(job, "i3")
}
fn i3b(job: &Job) -> JobUpdate {
    step(job, "i3b")
}
fn ijoin(job: &Job) -> JobUpdate {
    step(job, "ijoin")
}
fn c(job: &Job) -> JobUpdate {
    step(job, "c")
}
fn join(job: &Job) -> JobUpdate {
    step(job, "join")
}

graph! {
    pub Nested for Job {
        start -> entry;
        parallel entry => [a, outer, c] -> join;
        a -> a2;
        a2 -> join;
        parallel outer => [i1, i2, i3] -> ijoin;
        i3 -> i3b;
        i3b -> ijoin;
        ijoin -> join;
        c -> join;
        join -> end;
    }
}

// Scenario `subgraph`: a child graph run by a node in a branch.

fn lint(job: &Job) -> JobUpdate {
    step(job, "lint")
}
fn proof(job: &Job) -> JobUpdate {
    step(job, "proof")
}
fn sign(job: &Job) -> JobUpdate {
    step(job, "sign")
}

graph! {
    pub Checks for Job {
        start -> lint;
        lint -> proof;
        proof -> sign;
        sign -> end;
    }
}

fn x(job: &Job) -> JobUpdate {
    step(job, "x")
}
fn x2(job: &Job) -> JobUpdate {
    step(job, "x2")
}
fn x3(job: &Job) -> JobUpdate {
    step(job, "x3")
}

graph! {
    pub Reviewed for Job {
        start -> entry;
        parallel entry => [x, review] -> join;
        x -> x2;
        x2 -> x3;
        x3 -> join;
        review -> join;
        join -> end;
        subgraph review = Checks;
    }
}

// Scenario `async`: 20 async sends.

fn plan_async(job: &Job) -> Command<AsyncSendsNode> {
    Command::send(job.items.iter().map(|i| tea::SendTo::new(AsyncSendsNode::Call, Job::update().item(i.clone()))))
}
async fn call(job: &Job) -> JobUpdate {
    step_async(job, "call").await
}
async fn reply(job: &Job) -> JobUpdate {
    step_async(job, "reply").await
}

graph! {
    pub AsyncSends for Job {
        start -> plan_async;
        parallel plan_async => call* -> gather;
        call -> reply;
        reply -> gather;
        gather -> end;
        async call, reply;
    }
}

const SCENARIOS: [&str; 4] = ["sends", "nested", "subgraph", "async"];

/// A store of kind `kind` at `at` (a directory, or a PostgreSQL `url schema`).
fn open_store(kind: &str, at: &str) -> Arc<dyn Checkpointer> {
    match kind {
        "sled" => Arc::new(SledStore::open(Path::new(at).join("db")).unwrap()),
        "dir" => Arc::new(DirStore::open(Path::new(at).join("dir")).unwrap()),
        "postgres" => {
            let (url, schema) = at.split_once(' ').unwrap();
            Arc::new(tea::PostgresStore::builder(url).schema(schema).max_connections(4).connect().unwrap())
        }
        other => panic!("unknown store {other}"),
    }
}

fn input(thread: &str, scenario: &str) -> Job {
    let items = if matches!(scenario, "sends" | "async") { items() } else { Vec::new() };
    Job { thread: thread.to_owned(), items, ..Job::default() }
}

/// What a run of `scenario` left: its final state, or its error.
type Ran = Result<Job, Error>;

/// Runs (`recover`: false) or recovers thread `thread` of `scenario` on `store`.
fn drive(scenario: &str, store: Arc<dyn Checkpointer>, thread: &str, recover: bool) -> Ran {
    let id = ThreadId::from(thread);
    macro_rules! blocking {
        ($graph:ident) => {{
            let app = $graph::builder().checkpointer(store).durability(Durability::EveryStep).lease(LEASE).build();
            let outcome = if recover {
                app.run(Call::recover(&id))
            } else {
                app.run(Call::start(input(thread, scenario)).on(thread))
            };
            outcome.map(|o| o.done().expect("the scenarios do not pause"))
        }};
    }
    match scenario {
        "sends" => blocking!(Sends),
        "nested" => blocking!(Nested),
        "subgraph" => blocking!(Reviewed),
        "async" => {
            let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            let app = AsyncSends::builder().checkpointer(store).durability(Durability::EveryStep).lease(LEASE).build();
            runtime.block_on(async {
                if recover {
                    app.run_async(Call::recover(&id)).await.map(|o| o.done().expect("the scenarios do not pause"))
                } else {
                    app.run_async(Call::start(input(thread, scenario)).on(thread)).await.map(|o| o.done().unwrap())
                }
            })
        }
        other => panic!("unknown scenario {other}"),
    }
}

/// What the store holds as completed for `thread`: the keys in the state of its checkpoint,
/// in every branch's own state, and (for the subgraph) in the child graph's threads.
fn durable(scenario: &str, store: &Arc<dyn Checkpointer>, thread: &str) -> BTreeSet<String> {
    fn collect(snapshot: &Snapshot<Job>, into: &mut BTreeSet<String>) {
        into.extend(snapshot.state.done.iter().cloned());
        fn branches(list: &[tea::BranchSnapshot<Job>], into: &mut BTreeSet<String>) {
            for branch in list {
                into.extend(branch.state.done.iter().cloned());
                branches(&branch.branches, into);
            }
        }
        branches(&snapshot.branches, into);
    }
    let id = ThreadId::from(thread);
    let mut keys = BTreeSet::new();
    macro_rules! read {
        ($graph:ident) => {{
            let app = $graph::builder().checkpointer(store.clone()).build();
            if let Some(snapshot) = app.state(&id).unwrap() {
                collect(&snapshot, &mut keys);
            }
        }};
    }
    match scenario {
        "sends" => read!(Sends),
        "nested" => read!(Nested),
        "subgraph" => {
            read!(Reviewed);
            let children = Checks::builder().checkpointer(store.clone()).build();
            for child in store.threads("Checks").unwrap() {
                if child.as_str().starts_with(&format!("{thread}/")) {
                    if let Some(snapshot) = children.state(&child).unwrap() {
                        collect(&snapshot, &mut keys);
                    }
                }
            }
        }
        "async" => {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let app = AsyncSends::builder().checkpointer(store.clone()).build();
            if let Some(snapshot) = runtime.block_on(app.state_async(&id)).unwrap() {
                collect(&snapshot, &mut keys);
            }
        }
        other => panic!("unknown scenario {other}"),
    }
    keys
}

/// How often each node of `thread` started, from the log.
fn starts(log: &Path, thread: &str) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for line in std::fs::read_to_string(log).unwrap_or_default().lines() {
        if let Some((t, key)) = line.split_once(' ') {
            if t == thread {
                *counts.entry(key.to_owned()).or_insert(0) += 1;
            }
        }
    }
    counts
}

/// The child process: runs its thread and reports `@@DONE`, or is killed first.
fn child_main() {
    let scenario = std::env::var(SCENARIO).unwrap();
    let store = open_store(&std::env::var(STORE).unwrap(), &std::env::var(WHERE).unwrap());
    let thread = std::env::var(THREAD).unwrap();
    println!("\n@@STARTED");
    std::io::stdout().flush().unwrap();
    let ran = drive(&scenario, store, &thread, false);
    println!("\n@@DONE={}", ran.is_ok());
    std::io::stdout().flush().unwrap();
}

/// What one column of the matrix (a scenario on a store) saw.
#[derive(Debug, Default)]
struct Tally {
    kills: usize,
    /// Kills that landed after the run had finished.
    late: usize,
    /// Node runs started again after a kill (they were under way, not completed).
    reruns: usize,
    /// Completed nodes the store held at the kills, branch nodes among them.
    held: usize,
    held_in_branches: usize,
}

/// Runs `kills` trials of `scenario` on `store` (at `at`), each killing a child at a random
/// moment and recovering in this process.
fn column(scenario: &str, kind: &str, at: &str, log: &Path, kills: usize) -> Tally {
    let spawn = |thread: &str| {
        Process::new(std::env::current_exe().unwrap())
            .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
            .env(ROLE, "run")
            .env(SCENARIO, scenario)
            .env(STORE, kind)
            .env(WHERE, at)
            .env(THREAD, thread)
            .env(LOG, log)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    // Waits for the child to open its store and start its run.
    let started = |child: &mut std::process::Child| {
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let found = lines.by_ref().map_while(Result::ok).any(|l| l == "@@STARTED");
        (found, lines)
    };
    // How long an uninterrupted run takes in a child: the kills land within it.
    let clean = format!("{scenario}-{kind}-clean");
    let mut child = spawn(&clean);
    let (found, mut lines) = started(&mut child);
    let begun = Instant::now();
    let done = found && lines.by_ref().map_while(Result::ok).any(|l| l == "@@DONE=true");
    let window = begun.elapsed().as_millis() as u64;
    child.wait().unwrap();
    assert!(done, "{scenario} on {kind}: the uninterrupted run failed");
    let expected: Vec<String> = {
        let store = open_store(kind, at);
        let app_state = durable(scenario, &store, &clean);
        app_state.into_iter().collect()
    };
    let mut tally = Tally::default();
    for trial in 0..kills {
        let thread = format!("{scenario}-{kind}-{trial}");
        let mut child = spawn(&thread);
        let (found, lines) = started(&mut child);
        assert!(found, "{scenario} on {kind}, trial {trial}: the child did not start");
        std::thread::sleep(Duration::from_millis(random_below(window)));
        // Its output is not read again (a pipe it might fill is closed with it).
        drop(lines);
        if let Ok(Some(_)) = child.try_wait() {
            tally.late += 1;
        }
        child.kill().ok();
        child.wait().unwrap();
        tally.kills += 1;
        let before = starts(log, &thread);
        let store = open_store(kind, at);
        let held = durable(scenario, &store, &thread);
        tally.held += held.len();
        tally.held_in_branches += held.iter().filter(|k| !k.starts_with("entry:") && !k.starts_with("plan")).count();
        // Recover once the dead run's lease has expired (or run it, if it never claimed).
        let deadline = Instant::now() + Duration::from_secs(30);
        let out = loop {
            // Killed before it claimed the thread: nothing to recover, run it.
            let ran = match drive(scenario, store.clone(), &thread, true) {
                Err(Error::CheckpointNotFound { .. }) => drive(scenario, store.clone(), &thread, false),
                other => other,
            };
            match ran {
                Ok(out) => break out,
                Err(error) if busy(&error) && Instant::now() < deadline => std::thread::sleep(LEASE / 3),
                Err(error) => panic!("{scenario} on {kind}, trial {trial}: recover failed: {error:?}"),
            }
        };
        drop(store);
        let mut done = out.done.clone();
        done.sort();
        assert_eq!(
            done, expected,
            "{scenario} on {kind}, trial {trial}: the result differs from an uninterrupted run's"
        );
        let after = starts(log, &thread);
        for (key, count) in &after {
            let again = count - before.get(key).copied().unwrap_or(0);
            assert!(
                again == 0 || !held.contains(key),
                "{scenario} on {kind}, trial {trial}: `{key}` had completed (the store held it) and ran again"
            );
            assert!(*count <= 2, "{scenario} on {kind}, trial {trial}: `{key}` started {count} times");
            tally.reruns += again.min(before.get(key).copied().unwrap_or(0));
        }
    }
    tally
}

/// Whether `error` says a dead run's lease still holds (the thread, or a child's).
fn busy(error: &Error) -> bool {
    match error {
        Error::ThreadBusy { .. } => true,
        Error::NodeFailed { source, .. } => source.downcast_ref::<Error>().is_some_and(busy),
        _ => false,
    }
}

#[test]
fn processes_killed_at_random_moments_of_fan_outs_rerun_nothing_completed() {
    if std::env::var(ROLE).is_ok() {
        return child_main();
    }
    let kills: usize = std::env::var("TEA_CRASH_KILLS").ok().and_then(|k| k.parse().ok()).unwrap_or(50);
    let root = std::env::temp_dir().join(format!("tea-crash-matrix-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    let log = root.join("nodes.log");
    *LOG_HERE.lock().unwrap() = Some(log.clone());
    let schema = postgres_support::TestSchema::new("crash_matrix");
    let mut columns: Vec<(&str, String)> = vec![("sled", String::new()), ("dir", String::new())];
    if let Some(schema) = &schema {
        columns.push(("postgres", format!("{} {}", schema.url(), schema.name())));
    }
    let started = Instant::now();
    let report = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for (kind, at) in &columns {
            let (report, root, log) = (&report, &root, &log);
            scope.spawn(move || {
                for scenario in SCENARIOS {
                    let dir = root.join(format!("{scenario}-{kind}"));
                    std::fs::create_dir_all(&dir).unwrap();
                    let at = if at.is_empty() { dir.to_string_lossy().into_owned() } else { at.clone() };
                    let tally = column(scenario, kind, &at, log, kills);
                    report.lock().unwrap().push(format!("{scenario:>8} on {kind:<8} {tally:?}"));
                    assert!(
                        tally.held_in_branches > 0 || tally.late == tally.kills,
                        "{scenario} on {kind}: no kill found completed branch work in the store: {tally:?}"
                    );
                }
            });
        }
    });
    let _ = std::fs::remove_dir_all(&root);
    for line in report.into_inner().unwrap() {
        eprintln!("{line}");
    }
    eprintln!("crash matrix: {kills} kills per scenario and store in {:?}", started.elapsed());
}
