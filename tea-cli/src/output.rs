//! What goes to stdout: JSON for states, pauses, events and snapshots, each flushed as written.

use serde_json::{json, Value};
use std::io::Write;
use tea_runtime::{Event, Resume, Snapshot, ThreadId};
use tea_yaml::{Agent, State};

/// Writes `text` and a newline to stdout and flushes it, so a reader of a pipe sees each line
/// as it happens. A closed stdout (`tea … | head -1`) ends the output quietly.
pub fn line(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}").and_then(|()| out.flush());
}

/// Pretty JSON for a one-shot answer.
pub fn pretty(value: &Value) {
    line(&serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string()));
}

/// A pause as the command line reports it: what `tea resume` needs to continue it.
pub fn pause(agent: &Agent, resume: &Resume<State>) -> Value {
    let interrupts: Vec<Value> = resume
        .interrupts()
        .iter()
        .map(|i| json!({ "id": i.id(), "node": i.node().as_str(), "value": i.value() }))
        .collect();
    let mut pause = json!({
        "status": "interrupted",
        "thread": resume.thread().as_str(),
        "token": resume.to_string(),
        "interrupts": interrupts,
    });
    if let Some(path) = agent.checkpoint_path(resume) {
        pause["checkpoint_path"] = Value::String(path.display().to_string());
    }
    pause
}

/// One `--stream` event as a JSON line.
pub fn event(agent: &Agent, event: &Event<State>) -> Value {
    match event {
        Event::Step { node, branch, state, duration } => json!({
            "event": "step",
            "node": node.as_str(),
            "branch": branch.as_ref().map(|b| b.as_str()),
            "duration_us": u64::try_from(duration.as_micros()).unwrap_or(u64::MAX),
            "state": state.to_json(),
        }),
        Event::Interrupted { resume, .. } => {
            let mut pause = pause(agent, resume);
            pause["event"] = json!("interrupted");
            pause
        }
        Event::Done(state) => json!({ "event": "done", "state": state.to_json() }),
    }
}

/// A checkpoint of a thread.
pub fn snapshot(thread: &ThreadId, snapshot: &Snapshot<State>) -> Value {
    let interrupts: Vec<Value> = snapshot
        .interrupts
        .iter()
        .map(|i| json!({ "id": i.id(), "node": i.node().as_str(), "value": i.value() }))
        .collect();
    json!({
        "thread": thread.as_str(),
        "checkpoint": snapshot.checkpoint,
        "step": snapshot.step,
        "next": snapshot.next.iter().map(|n| n.as_str()).collect::<Vec<_>>(),
        "interrupts": interrupts,
        "state": snapshot.state.to_json(),
    })
}
