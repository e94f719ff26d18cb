//! What goes to stdout: JSON for states, pauses, events and snapshots, each flushed as written.
//!
//! Also the summaries of `tea threads`, and `tea draw`'s Mermaid and DOT with the agent's
//! breakpoints and interrupt nodes marked.

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
        Event::Custom { node, value } => json!({ "event": "custom", "node": node.as_str(), "value": value }),
        Event::Update { node, branch, update } => json!({
            "event": "update",
            "node": node.as_str(),
            "branch": branch.as_ref().map(|b| b.as_str()),
            "update": serde_json::to_value(update).unwrap_or(Value::Null),
        }),
        Event::Started { node, branch, step, at } => json!({
            "event": "started",
            "node": node.as_str(),
            "branch": branch.as_ref().map(|b| b.as_str()),
            "step": step,
            "at": humantime::format_rfc3339_micros(*at).to_string(),
        }),
        Event::Retry { node, branch, attempt, error, wait } => json!({
            "event": "retry",
            "node": node.as_str(),
            "branch": branch.as_ref().map(|b| b.as_str()),
            "attempt": attempt,
            "error": error,
            "wait_ms": u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
        }),
        Event::CacheHit { node, branch } => json!({
            "event": "cache_hit",
            "node": node.as_str(),
            "branch": branch.as_ref().map(|b| b.as_str()),
        }),
        // A kind of event this version does not know yet.
        #[allow(unreachable_patterns)]
        _ => json!({ "event": "other" }),
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
        "written_at": written_at(snapshot),
    })
}

/// When `snapshot`'s checkpoint was written, as RFC 3339 in UTC to the second (`null` for a
/// checkpoint of an earlier version of tea, which did not record it).
fn written_at(snapshot: &Snapshot<State>) -> Value {
    snapshot.written_at.map_or(Value::Null, |at| Value::String(humantime::format_rfc3339_seconds(at).to_string()))
}

/// `tea prune`'s report: what the sweep deleted and kept.
pub fn sweep_report(report: &tea_runtime::SweepReport) -> Value {
    use tea_runtime::{KeptBecause, Rest};
    let expired: Vec<Value> = report
        .expired
        .iter()
        .map(|e| {
            let status = if e.rest == Rest::Paused { "paused" } else { "done" };
            json!({ "thread": e.thread.as_str(), "status": status, "idle_seconds": e.idle.as_secs() })
        })
        .collect();
    let kept: Vec<Value> = report
        .kept_paused
        .iter()
        .map(|k| {
            let mut entry = json!({ "thread": k.thread.as_str(), "idle_seconds": k.idle.as_secs() });
            match k.because {
                KeptBecause::PausedNotExpired => entry["reason"] = json!("paused threads do not expire"),
                KeptBecause::NotIdleLongEnough { ttl } => {
                    entry["reason"] = json!("paused threads expire later");
                    entry["expires_after_seconds"] = json!(ttl.as_secs());
                }
            }
            entry
        })
        .collect();
    let unreadable: Vec<Value> = report
        .unreadable
        .iter()
        .map(|(thread, error)| json!({ "thread": thread.as_str(), "error": tea_runtime::error_chain(error) }))
        .collect();
    json!({
        "threads": report.threads,
        "expired": expired,
        "pruned": report.pruned,
        "kept_paused": kept,
        "unreadable": unreadable,
    })
}

/// A thread as `tea threads` lists it: its status (`paused`, `done`, or `stopped` — running now,
/// or stopped part-way), the nodes next, the pause's message, and where its latest checkpoint
/// stands, and when it was written (`updated_at`).
pub fn thread_summary(thread: &ThreadId, latest: Option<&Snapshot<State>>) -> Value {
    let Some(latest) = latest else { return json!({ "thread": thread.as_str(), "status": "empty" }) };
    let status = if !latest.interrupts.is_empty() {
        "paused"
    } else if latest.next.is_empty() {
        "done"
    } else {
        "stopped"
    };
    let message = latest.interrupts.first().map(|i| match i.value() {
        Value::Null => Value::String(format!("`{}` waits", i.node())),
        value => value.clone(),
    });
    json!({
        "thread": thread.as_str(),
        "status": status,
        "next": latest.next.iter().map(|n| n.as_str()).collect::<Vec<_>>(),
        "message": message,
        "step": latest.step,
        "checkpoint": latest.checkpoint,
        "updated_at": written_at(latest),
    })
}

/// The nodes `tea draw` marks: (id, name, what) for each breakpoint (`interrupt_before`,
/// `interrupt_after`) and interrupt node. Node ids are `n{index}` in file order, as the
/// drawings name them.
fn marked(agent: &Agent) -> Vec<(String, String, &'static str)> {
    use tea_runtime::Graph;
    let graph = agent.graph();
    let mut marks = Vec::new();
    for (i, name) in agent.nodes().into_iter().enumerate() {
        let Some(node) = graph.node_named(name) else { continue };
        let mut push = |what| marks.push((format!("n{i}"), name.to_owned(), what));
        if graph.interrupt_before(node) {
            push("breakpoint before");
        }
        if graph.interrupt_after(node) {
            push("breakpoint after");
        }
        if agent.resume_key(name).is_some() {
            push("interrupt");
        }
    }
    marks
}

/// The agent's Mermaid flowchart, with its breakpoints drawn with a thick red border (dashed
/// for `interrupt_after`) and its interrupt nodes filled, each listed in a comment.
pub fn mermaid_marked(agent: &Agent) -> String {
    let mut text = agent.mermaid().trim_end().to_owned();
    let marks = marked(agent);
    if marks.is_empty() {
        return text;
    }
    text.push_str("\n    classDef breakpoint_before stroke:#d33,stroke-width:4px");
    text.push_str("\n    classDef breakpoint_after stroke:#d33,stroke-width:4px,stroke-dasharray:6 3");
    text.push_str("\n    classDef interrupt fill:#fff3cd,stroke:#b58900");
    for (id, name, what) in &marks {
        text.push_str(&format!("\n    %% {what}: {name}\n    class {id} {}", what.replace(' ', "_")));
    }
    text
}

/// The agent's Graphviz DOT, with its breakpoints drawn red (dashed for `interrupt_after`) and
/// its interrupt nodes filled, each with an `xlabel` saying so.
pub fn dot_marked(agent: &Agent) -> String {
    let text = agent.dot();
    let marks = marked(agent);
    let Some(close) = text.trim_end().strip_suffix('}') else { return text };
    if marks.is_empty() {
        return text;
    }
    let mut out = close.to_owned();
    for (id, _, what) in &marks {
        let style = match *what {
            "breakpoint before" => "color=\"#dd3333\", penwidth=3",
            "breakpoint after" => "color=\"#dd3333\", penwidth=3, style=dashed",
            _ => "style=filled, fillcolor=\"#fff3cd\"",
        };
        out.push_str(&format!("    {id} [{style}, xlabel=\"{what}\"];\n"));
    }
    out.push_str("}\n");
    out
}
