//! A real process boundary: one process starts a thread on a `SledStore` and pauses it, prints
//! the token and exits; another process resumes that token from the string alone.
//!
//! The test binary runs itself as those processes (`std::env::current_exe()`), with an
//! environment variable selecting the role.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::Command;
use tea::prelude::*;

const TEST: &str = "a_thread_paused_in_one_process_resumes_in_another";
const ROLE: &str = "TEA_PROCESS_BOUNDARY_ROLE";
const DB: &str = "TEA_PROCESS_BOUNDARY_DB";
const TOKEN: &str = "TEA_PROCESS_BOUNDARY_TOKEN";
const THREAD: &str = "order-1234";

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Order {
    #[reducer(append)]
    trail: Vec<String>,
    approved_by: String,
}

/// Each node notes the process it ran in.
fn mark(node: &str) -> OrderUpdate {
    Order::update().trail(vec![format!("{node} in {}", std::process::id())])
}
fn receive(_: &Order) -> OrderUpdate {
    mark("receive")
}
fn approve(s: &Order) -> Result<OrderUpdate, String> {
    if s.approved_by.is_empty() {
        return Err("nobody approved".into());
    }
    Ok(mark("approve"))
}
fn ship(_: &Order) -> OrderUpdate {
    mark("ship")
}

graph! {
    pub Fulfilment for Order {
        start -> receive;
        receive -> approve;
        approve -> ship;
        ship -> end;
        interrupt_before approve;
    }
}

fn app(path: &Path) -> App<Fulfilment, SledStore> {
    Fulfilment::builder().checkpointer(SledStore::open(path).unwrap()).sign_tokens("process boundary key").build()
}

/// Role `pause`: start the thread, print its token.
fn pause_here(path: &Path) {
    let app = app(path);
    match app.run(Call::start(Order::default()).on(THREAD)).unwrap() {
        Outcome::Interrupted { resume, .. } => println!("TOKEN={resume}"),
        Outcome::Done(state) => panic!("the run did not pause: {state:?}"),
    }
}

/// Role `resume`: resume the token given in the environment, print the final state.
fn resume_here(path: &Path) {
    let app = app(path);
    let token: Resume<Order> = std::env::var(TOKEN).unwrap().parse().unwrap();
    let done = app.resume(token.update(Order::update().approved_by("alice".into()))).unwrap();
    let state = done.done().expect("the run finishes");
    println!("STATE={}", serde_json::to_string(&state).unwrap());
}

/// Runs this test in a new process with `role`, and returns the value of its `KEY=` line.
fn child(role: &str, path: &Path, token: Option<&str>, key: &str) -> String {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.args([TEST, "--exact", "--nocapture", "--test-threads=1"]).env(ROLE, role).env(DB, path);
    if let Some(token) = token {
        command.env(TOKEN, token);
    }
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the {role} process failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // libtest prints `test NAME ... ` on the same line, before the child's output.
    let prefix = format!("{key}=");
    let line = stdout.lines().find_map(|line| line.split_once(&prefix).map(|(_, value)| value));
    line.unwrap_or_else(|| panic!("the {role} process printed no {key}:\n{stdout}")).to_owned()
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_thread_paused_in_one_process_resumes_in_another() {
    match std::env::var(ROLE).as_deref() {
        Ok("pause") => return pause_here(Path::new(&std::env::var(DB).unwrap())),
        Ok("resume") => return resume_here(Path::new(&std::env::var(DB).unwrap())),
        _ => {}
    }
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let tmp = TempDir(std::env::temp_dir().join(format!("tea-process-boundary-{}-{nanos}", std::process::id())));
    let path = tmp.0.join("db");

    let token = child("pause", &path, None, "TOKEN");
    {
        // Between the two processes, the paused thread is on disk.
        let app = app(&path);
        let snapshot = app.state(&ThreadId::from(THREAD)).unwrap().unwrap();
        let next: Vec<String> = snapshot.next.iter().map(|n| n.to_string()).collect();
        assert_eq!(next, ["approve"]);
        assert_eq!(snapshot.interrupts.len(), 1);
        assert_eq!(snapshot.state.trail.len(), 1);
    }
    let state: Order = serde_json::from_str(&child("resume", &path, Some(&token), "STATE")).unwrap();

    let pids: Vec<(&str, u32)> = state
        .trail
        .iter()
        .map(|entry| {
            let (node, pid) = entry.split_once(" in ").unwrap();
            (node, pid.parse().unwrap())
        })
        .collect();
    let nodes: Vec<&str> = pids.iter().map(|(node, _)| *node).collect();
    assert_eq!(nodes, ["receive", "approve", "ship"]);
    assert_eq!(state.approved_by, "alice");
    let (first, second) = (pids[0].1, pids[1].1);
    assert_ne!(first, second, "paused in one process, resumed in another");
    assert_eq!(pids[2].1, second);
    assert!(first != std::process::id() && second != std::process::id());

    // This process sees the finished thread, and the token is used up.
    let app = app(&path);
    let snapshot = app.state(&ThreadId::from(THREAD)).unwrap().unwrap();
    assert_eq!(snapshot.state, state);
    assert!(snapshot.next.is_empty() && snapshot.interrupts.is_empty());
    assert!(matches!(app.resume(token.parse().unwrap()), Err(Error::StaleResume { .. })));
}
