//! `kill -9` while a tool-calling agent's tools run, then `recover` in a new process: no tool
//! that finished runs again, the approval the crash interrupted is asked again, and the
//! conversation completes.
//!
//! The test binary runs itself as the two processes (`std::env::current_exe()`), with an
//! environment variable selecting the role. The model answers with four parallel tool calls:
//! `fetch` twice (they finish), `summarise` (it never finishes in the first process) and
//! `delete` (it needs approval). Every run of a tool creates a file of its own, synced before
//! the tool returns, so the test counts how often each ran across processes. The first process
//! is killed with SIGKILL once `summarise` runs and the two `fetch` results are in the store;
//! the second recovers the thread, approves the deletion and finishes.

use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tea::models::{react_agent, AgentState, Approval, ReactAgent, ScriptedModel, ToolNode};
use tea::{tool, Call, Checkpointer, DirStore, Durability, Message, Outcome, ThreadId, ToolCall};

const TEST: &str = "a_process_killed_while_tools_run_recovers_without_running_a_finished_tool_again";
const ROLE: &str = "TEA_MODELS_CRASH_ROLE";
const DIR: &str = "TEA_MODELS_CRASH_DIR";
const THREAD: &str = "crash-agent";
const GRAPH: &str = "react_agent";
/// Short, so the second process need not wait long for the killed run's lease to lapse.
const LEASE: Duration = Duration::from_millis(400);
/// How long the test waits for anything before it fails.
const PATIENCE: Duration = Duration::from_secs(60);

fn dir() -> PathBuf {
    PathBuf::from(std::env::var(DIR).expect("the test sets the directory"))
}

/// Records a run of `what`: a new file, synced, in `DIR/runs`.
fn mark(what: &str) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let runs = dir().join("runs");
    std::fs::create_dir_all(&runs).unwrap();
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    let mut file = std::fs::File::create(runs.join(format!("{what}.{}.{n}", std::process::id()))).unwrap();
    file.write_all(b"ran").unwrap();
    file.sync_all().unwrap();
}

/// How often `what` ran, in every process.
fn runs(dir: &Path, what: &str) -> usize {
    let Ok(entries) = std::fs::read_dir(dir.join("runs")) else { return 0 };
    entries
        .filter(|e| e.as_ref().is_ok_and(|e| e.file_name().to_string_lossy().starts_with(&format!("{what}."))))
        .count()
}

/// Fetches page `n`.
#[tool]
fn fetch(n: u32) -> String {
    mark(&format!("fetch-{n}"));
    format!("page {n} fetched")
}

/// Summarises the pages; in the first process it runs until the process is killed.
#[tool]
fn summarise() -> String {
    mark("summarise");
    if std::env::var(ROLE).is_ok_and(|r| r == "run") {
        loop {
            std::thread::sleep(Duration::from_secs(60));
        }
    }
    "summary written".to_owned()
}

/// Deletes a file, once a person approves.
#[tool(approval)]
fn delete(path: String) -> String {
    mark(&format!("delete-{path}"));
    format!("deleted {path}")
}

fn agent(model: ScriptedModel) -> ReactAgent {
    react_agent(model, ToolNode::new().with(Fetch).with(Summarise).with(Delete))
}

fn store(dir: &Path) -> DirStore {
    DirStore::open(dir.join("store")).unwrap()
}

/// A line the parent reads: `@@KEY=value`.
fn report(key: &str, value: impl std::fmt::Display) {
    println!("\n@@{key}={value}");
    std::io::stdout().flush().unwrap();
}

/// The first process: starts the thread; its tools run until it is killed.
fn run_until_killed(dir: &Path) {
    let calls = [
        ("c1", "fetch", json!({"n": 1})),
        ("c2", "fetch", json!({"n": 2})),
        ("c3", "summarise", json!({})),
        ("c4", "delete", json!({"path": "old.txt"})),
    ];
    let model = ScriptedModel::new([Message::tool_calls_of(
        calls.iter().map(|(id, name, args)| ToolCall::new(*id, *name, args.clone())).collect(),
    )]);
    let app = agent(model).builder().checkpointer(store(dir)).durability(Durability::EveryStep).lease(LEASE).build();
    let result = app.run(Call::start(AgentState::user("fetch two pages, summarise, delete old.txt")).on(THREAD));
    report("ERROR", format!("the run ended though `summarise` never returns: {result:?}"));
}

/// The second process: recovers the thread (once the dead run's lease lapsed), approves the
/// deletion it pauses for, and reports the conversation.
fn recover(dir: &Path) {
    let model = ScriptedModel::new([Message::assistant("Fetched, summarised, deleted.")]);
    let app =
        agent(model.clone()).builder().checkpointer(store(dir)).durability(Durability::EveryStep).lease(LEASE).build();
    let deadline = Instant::now() + PATIENCE;
    let outcome = loop {
        match app.run(Call::recover(THREAD)) {
            Err(tea::Error::ThreadBusy { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            other => break other,
        }
    };
    let resume = match outcome {
        Ok(Outcome::Interrupted { resume, .. }) => resume,
        other => return report("ERROR", format!("the recover did not pause for the approval: {other:?}")),
    };
    let asked = resume.interrupts().iter().map(|i| i.value()["tool"].clone()).collect::<Vec<_>>();
    if asked != [json!("delete")] {
        return report("ERROR", format!("the recover paused for {asked:?}, not for `delete` alone"));
    }
    let state = match app.resume(resume.answer(Approval::Approve)) {
        Ok(Outcome::Done(state)) => state,
        other => return report("ERROR", format!("the approved run did not finish: {other:?}")),
    };
    report("ASKED", model.requests().len());
    report("DONE", serde_json::to_string(&state.messages).unwrap());
}

/// A child process in `role`, its standard output read line by line.
fn spawn(role: &str, dir: &Path) -> (Child, std::io::Lines<BufReader<std::process::ChildStdout>>) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env(DIR, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    (child, lines)
}

/// Waits for `done` to hold, checking every few milliseconds, for at most `PATIENCE`.
fn wait_for(what: &str, child: &mut Child, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the first process ended ({status}) before {what}");
        }
        assert!(Instant::now() < deadline, "waited {PATIENCE:?} for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether the thread's checkpoints hold `text` (a tool's result, written by its branch).
fn stored(store: &DirStore, text: &str) -> bool {
    let thread = ThreadId::from(THREAD);
    store
        .history(GRAPH, &thread)
        .unwrap_or_default()
        .iter()
        .any(|(_, bytes)| bytes.windows(text.len()).any(|w| w == text.as_bytes()))
}

#[test]
fn a_process_killed_while_tools_run_recovers_without_running_a_finished_tool_again() {
    match std::env::var(ROLE).as_deref() {
        Ok("run") => return run_until_killed(&dir()),
        Ok("recover") => return recover(&dir()),
        _ => {}
    }
    let dir = std::env::temp_dir().join(format!("tea-models-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    // The first process: killed while `summarise` runs, once both fetches are in the store.
    let (mut first, _lines) = spawn("run", &dir);
    let reader = store(&dir);
    wait_for("`summarise` started", &mut first, || runs(&dir, "summarise") == 1);
    wait_for("both fetches stored", &mut first, || {
        stored(&reader, "page 1 fetched") && stored(&reader, "page 2 fetched")
    });
    first.kill().unwrap(); // SIGKILL
    first.wait().unwrap();
    assert_eq!(runs(&dir, "delete-old.txt"), 0, "nothing is deleted before the approval");

    // The second process: recover, approve, finish.
    let (mut second, lines) = spawn("recover", &dir);
    let mut report = std::collections::BTreeMap::new();
    for line in lines {
        let line = line.unwrap();
        for key in ["ASKED", "DONE", "ERROR"] {
            if let Some(value) = line.strip_prefix(&format!("@@{key}=")) {
                report.insert(key, value.to_owned());
            }
        }
    }
    let status = second.wait().unwrap();
    assert!(!report.contains_key("ERROR"), "the second process: {:?}", report["ERROR"]);
    assert!(status.success(), "the second process failed: {status}");
    let messages: Vec<Message> = serde_json::from_str(report.get("DONE").expect("the conversation finished")).unwrap();

    assert_eq!(runs(&dir, "fetch-1"), 1, "a finished tool ran again");
    assert_eq!(runs(&dir, "fetch-2"), 1, "a finished tool ran again");
    assert_eq!(runs(&dir, "summarise"), 2, "the tool the kill interrupted ran again, once");
    assert_eq!(runs(&dir, "delete-old.txt"), 1, "the approved tool ran once");
    // The model was asked once more, for the answer: not again for the calls.
    assert_eq!(report["ASKED"], "1");
    let texts: Vec<(String, String)> = messages.iter().map(|m| (m.role().to_string(), m.text())).collect::<Vec<_>>();
    assert_eq!(
        texts[2..],
        [
            ("tool".to_owned(), "page 1 fetched".to_owned()),
            ("tool".to_owned(), "page 2 fetched".to_owned()),
            ("tool".to_owned(), "summary written".to_owned()),
            ("tool".to_owned(), "deleted old.txt".to_owned()),
            ("assistant".to_owned(), "Fetched, summarised, deleted.".to_owned()),
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}
