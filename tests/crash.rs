//! Processes killed with SIGKILL at chosen moments, on a `SledStore`: what a call acknowledged
//! survives, no token completes twice, and under `Durability::EveryStep` no completed node runs
//! again after `recover`.
//!
//! The test binary runs itself as the processes that get killed (`std::env::current_exe()`), with
//! environment variables selecting the role. Each node appends its name to a log file as it
//! starts (a `write` that is complete survives the kill of its process), so the test counts how
//! often each node ran across processes.
//!
//! A second test kills a process while a node *inside a child graph* (a `subgraph` node) runs,
//! and recovers the parent thread in the test's own process.

use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tea::prelude::*;
use tea::ThreadId;

const TEST: &str = "processes_killed_at_chosen_moments_lose_nothing_acknowledged";
const ROLE: &str = "TEA_CRASH_ROLE";
const DB: &str = "TEA_CRASH_DB";
const LOG: &str = "TEA_CRASH_LOG";
const TOKEN: &str = "TEA_CRASH_TOKEN";
const THREAD: &str = "TEA_CRASH_THREAD";
const MODE: &str = "TEA_CRASH_DURABILITY";
/// The node that stops (and waits to be killed) as it starts.
const STOP_AT: &str = "TEA_CRASH_STOP_AT";
const LEASE: Duration = Duration::from_millis(400);

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Job {
    #[reducer(append)]
    trail: Vec<String>,
    approved: bool,
}

/// The log file of nodes run by the test's own process (a child process gets its path in `LOG`).
static LOG_HERE: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Logs the node's start in this process's log file; stops for good if it is the node the test
/// kills the process in.
fn enter(node: &str) -> JobUpdate {
    let log = std::env::var(LOG).map(PathBuf::from).ok().or_else(|| LOG_HERE.lock().unwrap().clone());
    if let Some(path) = log {
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
        file.write_all(format!("{node}\n").as_bytes()).unwrap();
    }
    if std::env::var(STOP_AT).is_ok_and(|at| at == node) {
        // The test harness may have left its `test … ` on the line: start a fresh one.
        println!("\n@@IN={node}");
        std::io::stdout().flush().unwrap();
        loop {
            std::thread::sleep(Duration::from_secs(60));
        }
    }
    Job::update().trail(vec![node.to_owned()])
}
fn prepare(_: &Job) -> JobUpdate {
    enter("prepare")
}
fn draft(_: &Job) -> JobUpdate {
    enter("draft")
}
fn publish(_: &Job) -> JobUpdate {
    enter("publish")
}
fn archive(_: &Job) -> JobUpdate {
    enter("archive")
}

graph! {
    pub Pipeline for Job {
        start -> prepare;
        prepare -> draft;
        draft -> publish;
        publish -> archive;
        archive -> end;
        interrupt_before publish;
    }
}

fn lint(_: &Job) -> JobUpdate {
    enter("lint")
}
fn proof(_: &Job) -> JobUpdate {
    enter("proof")
}
fn sign(_: &Job) -> JobUpdate {
    enter("sign")
}

graph! {
    /// The child graph: three checks in a row.
    pub Checks for Job {
        start -> lint;
        lint -> proof;
        proof -> sign;
        sign -> end;
    }
}

graph! {
    /// The parent: prepares, runs `Checks` as its node `review`, archives.
    pub Reviewed for Job {
        start -> prepare;
        prepare -> review;
        review -> archive;
        archive -> end;
        subgraph review = Checks;
    }
}

/// The parent graph's app: every step checkpointed, the same short lease.
fn reviewed_app(db: &Path) -> App<Reviewed, SledStore> {
    Reviewed::builder()
        .checkpointer(SledStore::open(db).unwrap())
        .durability(Durability::EveryStep)
        .lease(LEASE)
        .build()
}

fn durability(name: &str) -> Durability {
    match name {
        "buffered" => Durability::Buffered,
        "on_pause" => Durability::OnPause,
        _ => Durability::EveryStep,
    }
}

fn app(db: &Path, mode: &str) -> App<Pipeline, SledStore> {
    Pipeline::builder().checkpointer(SledStore::open(db).unwrap()).durability(durability(mode)).lease(LEASE).build()
}

/// Prints a `KEY=value` line for the parent and waits to be killed (or exits, for `recover`).
fn report(key: &str, value: impl std::fmt::Display) {
    println!("\n@@{key}={value}");
    std::io::stdout().flush().unwrap();
}

/// What a child process does, by its role.
fn child_main(role: &str) {
    let db = PathBuf::from(std::env::var(DB).unwrap());
    let mode = std::env::var(MODE).unwrap();
    let thread = ThreadId::from(std::env::var(THREAD).unwrap());
    if role == "invoke_reviewed" {
        // Runs into the node the test kills this process in (inside the child graph).
        let result = reviewed_app(&db).run(Call::start(Job::default()).on(thread));
        return report("ERROR", format!("the run did not stop where it was told to: {result:?}"));
    }
    let app = app(&db, &mode);
    let result = match role {
        "invoke" => app.run(Call::start(Job::default()).on(thread)),
        "resume" => {
            let token: Resume<Job> = std::env::var(TOKEN).unwrap().parse().unwrap();
            app.resume(token.update(Job::update().approved(true)))
        }
        "recover" => app.run(Call::recover(&thread)),
        other => panic!("unknown role {other}"),
    };
    match result {
        Ok(Outcome::Interrupted { resume, .. }) => report("TOKEN", resume),
        Ok(Outcome::Done(state)) => report("DONE", state.trail.join(",")),
        Err(error) => report("ERROR", format!("{error:?}")),
    }
    if role != "recover" {
        // Acknowledged; the parent kills this process now, before the store's own flush.
        loop {
            std::thread::sleep(Duration::from_secs(60));
        }
    }
}

/// A child process in `role`; returns it and the first `KEY=value` line it printed.
fn spawn(role: &str, dir: &Path, mode: &str, env: &[(&str, &str)]) -> (Child, (String, String)) {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env(DB, dir.join("db"))
        .env(LOG, dir.join("nodes.log"))
        .env(THREAD, "job-1")
        .env(MODE, mode)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        for key in ["TOKEN", "DONE", "ERROR", "IN"] {
            if let Some(value) = line.strip_prefix(&format!("@@{key}=")) {
                return (child, (key.to_owned(), value.to_owned()));
            }
        }
    }
    let status = child.wait().unwrap();
    panic!("child `{role}` ended ({status}) without reporting");
}

/// Kills `child` with SIGKILL (`Child::kill` on Unix) and reaps it.
fn kill(mut child: Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}

/// A child that runs to its report and exits.
fn run(role: &str, dir: &Path, mode: &str, env: &[(&str, &str)]) -> (String, String) {
    let (mut child, report) = spawn(role, dir, mode, env);
    if role == "recover" {
        child.wait().unwrap();
    } else {
        kill(child);
    }
    report
}

/// How often each node started, across every process of the cycle.
fn starts(dir: &Path, node: &str) -> usize {
    std::fs::read_to_string(dir.join("nodes.log")).unwrap_or_default().lines().filter(|l| *l == node).count()
}

fn expect(report: (String, String), key: &str) -> String {
    assert_eq!(report.0, key, "expected {key}, got {report:?}");
    report.1
}

/// Killed right after a pause was acknowledged, then right after `Done`: the pause resumes in a
/// new process; the finished resume's token is spent in every later process; nothing ran twice.
fn acknowledged_pause_and_end(dir: &Path, mode: &str) {
    let token = expect(run("invoke", dir, mode, &[]), "TOKEN");
    let done = expect(run("resume", dir, mode, &[(TOKEN, &token)]), "DONE");
    assert_eq!(done, "prepare,draft,publish,archive");
    // A new process: the token is spent, the thread is finished with its final state.
    let again = expect(run("resume", dir, mode, &[(TOKEN, &token)]), "ERROR");
    assert!(again.starts_with("StaleResume"), "{mode}: the token completed twice: {again}");
    assert_eq!(expect(run("recover", dir, mode, &[]), "DONE"), done, "{mode}: the end was lost");
    for node in ["prepare", "draft", "publish", "archive"] {
        assert_eq!(starts(dir, node), 1, "{mode}: node {node} ran again");
    }
}

/// Killed as a node starts (EveryStep): `recover` in a new process runs that node again — it had
/// not completed — and no node that completed.
fn killed_as_a_node_starts(dir: &Path, node: &str) {
    let mode = "every_step";
    // The dead run's lease is written after this instant (when its process starts `node`): a
    // recover that gets the thread less than `LEASE` after it took the lease of a live run. The
    // instant the child is killed would not do: on a loaded machine the lease may be written
    // long before the kill, and have lapsed by the recover.
    let mut spawned = Instant::now();
    let token = if node == "draft" {
        let (child, report) = spawn("invoke", dir, mode, &[(STOP_AT, node)]);
        assert_eq!(report, ("IN".to_owned(), node.to_owned()));
        kill(child);
        None
    } else {
        let token = expect(run("invoke", dir, mode, &[]), "TOKEN");
        spawned = Instant::now();
        let (child, report) = spawn("resume", dir, mode, &[(TOKEN, &token), (STOP_AT, node)]);
        assert_eq!(report, ("IN".to_owned(), node.to_owned()));
        kill(child);
        Some(token)
    };
    // After `draft` starts, the head is `prepare`'s flushed checkpoint; after `archive` starts,
    // `publish`'s: both carry the dead run's lease, which holds for a moment (unless this
    // machine took longer than the lease to start the next process). When `publish` starts,
    // the resume's claim was never flushed: the head is still the pause, and recover returns it.
    let mut out = run("recover", dir, mode, &[]);
    if out.0 == "ERROR" {
        assert!(out.1.starts_with("ThreadBusy"), "{out:?}");
        std::thread::sleep(LEASE + Duration::from_millis(50));
        out = run("recover", dir, mode, &[]);
    } else if node != "publish" {
        assert!(spawned.elapsed() >= LEASE, "killed as {node} started, recovered while its lease held: {out:?}");
    }
    let out = if out.0 == "TOKEN" {
        // Stopped at the breakpoint: resume it.
        expect(run("resume", dir, mode, &[(TOKEN, &out.1)]), "DONE")
    } else {
        expect(out, "DONE")
    };
    assert_eq!(out, "prepare,draft,publish,archive");
    for n in ["prepare", "draft", "publish", "archive"] {
        let expected = if n == node { 2 } else { 1 };
        assert_eq!(starts(dir, n), expected, "killed as {node} started: node {n}");
    }
    if let Some(token) = token {
        let again = expect(run("resume", dir, mode, &[(TOKEN, &token)]), "ERROR");
        assert!(again.starts_with("StaleResume"), "{again}");
    }
}

#[test]
fn processes_killed_at_chosen_moments_lose_nothing_acknowledged() {
    if let Ok(role) = std::env::var(ROLE) {
        return child_main(&role);
    }
    let root = std::env::temp_dir().join(format!("tea-crash-{}", std::process::id()));
    let started = Instant::now();
    let mut cycles = 0;
    for round in 0..4 {
        for mode in ["every_step", "buffered", "on_pause"] {
            let dir = root.join(format!("ack-{mode}-{round}"));
            std::fs::create_dir_all(&dir).unwrap();
            acknowledged_pause_and_end(&dir, mode);
            cycles += 1;
        }
        for node in ["draft", "publish", "archive"] {
            let dir = root.join(format!("node-{node}-{round}"));
            std::fs::create_dir_all(&dir).unwrap();
            killed_as_a_node_starts(&dir, node);
            cycles += 1;
        }
    }
    let _ = std::fs::remove_dir_all(&root);
    eprintln!("{cycles} kill cycles in {:?}", started.elapsed());
}

/// Killed while `proof`, a node of the child graph `Checks` run by the parent's `review` node,
/// runs (EveryStep): the test's own process recovers the parent thread once the dead run's
/// leases have expired; the run completes, `lint` (completed inside the child before the kill)
/// and `prepare` do not run again, and only `proof` runs twice.
#[test]
fn a_process_killed_inside_a_child_graph_is_recovered_without_rerunning_completed_nodes() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("tea-crash-child-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (child, report) = spawn("invoke_reviewed", &dir, "every_step", &[(STOP_AT, "proof")]);
    assert_eq!(report, ("IN".to_owned(), "proof".to_owned()));
    kill(child);
    let killed = Instant::now();
    *LOG_HERE.lock().unwrap() = Some(dir.join("nodes.log"));
    let app = reviewed_app(&dir.join("db"));
    let thread = ThreadId::from("job-1");
    // The parent's head is `prepare`'s checkpoint and the child's (`job-1/review@2`) is
    // `lint`'s, both flushed with the dead run's lease, which holds for a moment (unless this
    // machine took half the lease to get here).
    let first = app.run(Call::recover(&thread));
    let first_at = killed.elapsed();
    match &first {
        Err(Error::ThreadBusy { thread: busy, expires_in }) => {
            assert_eq!(busy, &thread, "the parent's lease is what holds");
            assert!(*expires_in <= LEASE, "{expires_in:?}");
        }
        other => assert!(first_at >= LEASE / 2, "recovered {first_at:?} after the kill, under its lease: {other:?}"),
    }
    let out = match first {
        Ok(outcome) => outcome,
        Err(_) => {
            // The documented way on: wait until the dead run's leases (the parent's and the
            // child's, both written before the kill) have expired, then recover. Both, not only
            // the parent's that `ThreadBusy` reports: the child's was written later (with
            // `lint`'s checkpoint), and a recover between the two expiries fails with
            // `NodeFailed { node: "review", source: ThreadBusy { thread: "job-1/review@2", .. } }`.
            std::thread::sleep((LEASE + Duration::from_millis(100)).saturating_sub(killed.elapsed()));
            app.run(Call::recover(&thread)).expect("the parent recovers once the dead run's leases expired")
        }
    };
    let done = out.done().expect("the recovered run completes");
    assert_eq!(done.trail, ["prepare", "lint", "proof", "sign", "archive"]);
    for (node, expected) in [("prepare", 1), ("lint", 1), ("proof", 2), ("sign", 1), ("archive", 1)] {
        assert_eq!(starts(&dir, node), expected, "killed inside the child's `proof`: node {node}");
    }
    // The end is durable: another recover returns it without running anything.
    assert_eq!(app.run(Call::recover(&thread)).unwrap().done().unwrap(), done);
    assert_eq!(starts(&dir, "archive"), 1);
    drop(app);
    let _ = std::fs::remove_dir_all(&dir);
}
