//! Runs survive their replica: `tea serve` processes on one store, one killed with SIGKILL
//! while a run of it is in a node; another (or the same one restarted) takes the run over once
//! its lease lapses and finishes it from the last checkpoint — no recorded node runs again, an
//! answer is applied once, the thread is not left busy — and a stream of the run (or of its
//! thread) opened on any replica, or reopened with `Last-Event-ID`, sees its events. A run that a server from before
//! the queue left `pending` (its thread busy, no claim) is finished by one of the servers
//! started on its store.
//!
//! The nodes are `http.get`s to a gate in the test that counts the requests by path and holds
//! those the test asks it to, so the kill lands while a node runs however slow the machine is.
//! The tests on PostgreSQL are skipped (with a message) when no server answers and
//! `TEA_TEST_POSTGRES_URL` is not set; the one on a sled store always runs.

#[path = "../../tests/postgres_support/mod.rs"]
mod postgres_support;
mod serve_support;

use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long anything here may take before the test fails.
const PATIENCE: Duration = Duration::from_secs(60);

/// An HTTP server that counts the requests by path, answers `{"ok": true}` at once, except the
/// paths it holds: those are handed to the test, unanswered.
struct Gate {
    url: String,
    counts: Arc<Mutex<HashMap<String, usize>>>,
    hold: Arc<Mutex<HashSet<String>>>,
    held: Receiver<(String, TcpStream)>,
}

fn answer(mut stream: TcpStream) {
    let body = r#"{"ok": true}"#;
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
}

impl Gate {
    fn open() -> Gate {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let counts: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let hold: Arc<Mutex<HashSet<String>>> = Arc::default();
        let (send, held) = channel();
        let (c, h) = (counts.clone(), hold.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let mut reader = BufReader::new(&stream);
                let mut first = String::new();
                let _ = reader.read_line(&mut first);
                let mut line = String::new();
                while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                    line.clear();
                }
                let path = first.split_whitespace().nth(1).unwrap_or("").to_owned();
                *c.lock().unwrap().entry(path.clone()).or_default() += 1;
                if h.lock().unwrap().contains(&path) {
                    if send.send((path, stream)).is_err() {
                        return;
                    }
                } else {
                    answer(stream);
                }
            }
        });
        Gate { url, counts, hold, held }
    }

    fn hold(&self, path: &str, on: bool) {
        let mut hold = self.hold.lock().unwrap();
        if on {
            hold.insert(path.to_owned());
        } else {
            hold.remove(path);
        }
    }

    /// Waits for a held request: its node is running.
    fn next(&self) -> (String, TcpStream) {
        self.held.recv_timeout(PATIENCE).expect("no request reached the gate")
    }

    fn count(&self, path: &str) -> usize {
        self.counts.lock().unwrap().get(path).copied().unwrap_or(0)
    }
}

/// Nodes `a` and `b` call the gate, `ask` pauses for an answer (kept under `answer`), `c` calls
/// the gate, `d` notes the answer in the `log` (appended: an answer applied twice shows twice).
fn agent(dir: &Path, gate: &Gate) -> PathBuf {
    let call = |name: &str| {
        format!(
            "  - {{ name: {name}, uses: http.get, with: {{ url: \"{{{{ variables.gate }}}}/{name}\", timeout: 3600, retry: {{ max: 0 }} }}, output: {name} }}\n"
        )
    };
    let text = format!(
        "name: relay\nstate:\n  log: {{ type: list, reducer: append }}\nvariables: {{ gate: \"{}\" }}\nnodes:\n{}{}  - name: ask\n    type: interrupt\n    message: go on?\n    resume_key: answer\n{}  - name: d\n    run: return {{ log = {{ \"answered \" .. tostring(state.answer) }} }}\n",
        gate.url,
        call("a"),
        call("b"),
        call("c")
    );
    let path = dir.join("relay.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `tea serve AGENT --store STORE --lease 2s` on a free loopback port: the child and its address.
fn serve(agent: &Path, store: &str) -> (Child, String) {
    let mut command = serve_support::tea();
    command.args(["serve", agent.to_str().unwrap(), "--store", store, "--bind", "127.0.0.1:0"]).args([
        "--insecure-local",
        "--lease",
        "2s",
        "--allow-net",
        "127.0.0.1",
    ]);
    serve_support::serve(&mut command, std::io::stderr())
}

fn kill(mut child: Child) {
    child.kill().unwrap();
    let _ = child.wait();
}

/// A request over a fresh connection; the status and the body as JSON.
fn call(address: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    serve_support::call(address, method, path, body, None)
}

/// One server-sent event: its id, name and data.
#[derive(Debug, Clone)]
struct Sse {
    id: Option<usize>,
    event: String,
    data: Value,
}

/// Opens `path` as an event stream (HTTP/1.0: the body ends when the server closes it), with
/// `Last-Event-ID: after`; its events arrive on the receiver as they come, until `end`.
fn stream(address: &str, path: &str, after: Option<usize>) -> Receiver<Sse> {
    open_events(address, "GET", path, None, after)
}

/// [`stream`] by `method`, with `body` (JSON) when there is one.
fn open_events(address: &str, method: &str, path: &str, body: Option<Value>, after: Option<usize>) -> Receiver<Sse> {
    let mut stream = TcpStream::connect(address).unwrap();
    let last = after.map(|n| format!("Last-Event-ID: {n}\r\n")).unwrap_or_default();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.0\r\nHost: {address}\r\nAccept: text/event-stream\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{last}\r\n{body}",
        body.len()
    )
    .unwrap();
    let (send, events) = channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        // The head.
        while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
            line.clear();
        }
        let (mut id, mut event, mut data) = (None, String::new(), String::new());
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let text = line.trim_end_matches(['\r', '\n']);
            if let Some(rest) = text.strip_prefix("id:") {
                id = rest.trim().parse().ok();
            } else if let Some(rest) = text.strip_prefix("event:") {
                event = rest.trim().to_owned();
            } else if let Some(rest) = text.strip_prefix("data:") {
                data.push_str(rest.trim());
            } else if text.is_empty() && !event.is_empty() {
                let parsed = serde_json::from_str(&data).unwrap_or(Value::Null);
                let end = event == "end";
                if send.send(Sse { id, event: std::mem::take(&mut event), data: parsed }).is_err() || end {
                    return;
                }
                (id, data) = (None, String::new());
            }
        }
    });
    events
}

/// The events of a stream until its `end` (which is the last).
fn until_end(events: &Receiver<Sse>) -> Vec<Sse> {
    let mut seen = Vec::new();
    loop {
        let event = events.recv_timeout(PATIENCE).unwrap_or_else(|_| panic!("no `end` after {seen:?}"));
        let end = event.event == "end";
        seen.push(event);
        if end {
            return seen;
        }
    }
}

/// Polls `check` until it returns `Some`, for up to [`PATIENCE`].
fn wait_for<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(started.elapsed() < PATIENCE, "waited too long for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A new thread on `address` and a background run of it (from the start); its ids.
fn start_run(address: &str) -> (String, String) {
    let (status, thread) = call(address, "POST", "/threads", Some(json!({})));
    assert_eq!(status, 200, "{thread}");
    let thread = thread["thread_id"].as_str().unwrap().to_owned();
    let (status, run) = call(address, "POST", &format!("/threads/{thread}/runs"), Some(json!({ "input": {} })));
    assert_eq!(status, 200, "{run}");
    (thread, run["run_id"].as_str().unwrap().to_owned())
}

/// The run's record once it has ended, asked of `address`.
fn ended(address: &str, run: &str) -> Value {
    wait_for("the run to end", || {
        let (status, out) = call(address, "GET", &format!("/runs/{run}"), None);
        (status == 200 && out["status"] != "pending").then_some(out)
    })
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tea-cli-replicas-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn postgres(test: &str) -> Option<(postgres_support::TestSchema, String)> {
    let schema = postgres_support::TestSchema::new(test)?;
    let url = format!("{}?schema={}", schema.url(), schema.name());
    // The schema and its tables, made before the servers race to make them.
    drop(schema.store());
    Some((schema, url))
}

#[test]
fn a_run_whose_replica_is_killed_finishes_on_another_and_its_stream_follows_it() {
    let Some((_schema, store)) = postgres("replicas_takeover") else { return };
    let dir = scratch("takeover");
    let gate = Gate::open();
    let agent = agent(&dir, &gate);
    let (a, on_a) = serve(&agent, &store);
    let (b, on_b) = serve(&agent, &store);

    gate.hold("/b", true);
    let (thread, run) = start_run(&on_a);
    // Node `b` runs on replica A; a stream of the run opened on replica B sees it live.
    let (_, held) = gate.next();
    let live = stream(&on_b, &format!("/runs/{run}/stream"), None);
    let first = live.recv_timeout(PATIENCE).expect("the stream on B sees the run's first event");
    assert_eq!((first.event.as_str(), first.id), ("metadata", Some(0)), "{first:?}");
    kill(a);
    drop(held);
    gate.hold("/b", false);

    // B takes the run over once A's lease lapses, and runs `b` again (it had not finished),
    // never `a` (recorded): the run pauses at `ask`.
    let out = ended(&on_b, &run);
    assert_eq!(out["status"], "interrupted", "{out}");
    assert_eq!((gate.count("/a"), gate.count("/b")), (1, 2), "`a` ran once, `b` again after the kill");
    let (status, seen) = call(&on_b, "GET", &format!("/threads/{thread}"), None);
    assert_eq!((status, seen["status"].as_str()), (200, Some("interrupted")), "{seen}");

    // The stream opened on B before the kill went on to the end, with every event once.
    let events: Vec<Sse> = std::iter::once(first).chain(until_end(&live)).collect();
    let ids: Vec<usize> = events.iter().map(|e| e.id.expect("every event has an id")).collect();
    // (Ids count every event of the run; those of modes the stream does not send are skipped.)
    assert!(ids.windows(2).all(|w| w[1] > w[0]), "ids in order, none twice: {ids:?}");
    assert_eq!(events.last().unwrap().data["status"], "interrupted", "{events:?}");
    assert!(
        events.iter().any(|e| e.event == "values" && e.data.get("__interrupt__").is_some()),
        "the pause is streamed: {events:?}"
    );
    // Reopened after the third event, on a new replica C: the rest, from the fourth.
    let (c, on_c) = serve(&agent, &store);
    let resumed = until_end(&stream(&on_c, &format!("/runs/{run}/stream"), Some(ids[2])));
    let resumed_ids: Vec<usize> = resumed.iter().map(|e| e.id.unwrap()).collect();
    assert_eq!(resumed_ids, ids[3..].to_vec(), "Last-Event-ID resumes after the last event seen");
    // And on LangGraph's route on B.
    let path = format!("/threads/{thread}/runs/{run}/stream");
    let resumed = until_end(&stream(&on_b, &path, Some(ids[1])));
    assert_eq!(resumed.first().and_then(|e| e.id), Some(ids[2]), "{resumed:?}");

    // The answer, on C: the run finishes.
    let (status, out) =
        call(&on_c, "POST", &format!("/threads/{thread}/runs/wait"), Some(json!({ "command": { "resume": "yes" } })));
    assert_eq!((status, out["run"]["status"].as_str()), (200, Some("success")), "{out}");
    assert_eq!(out["values"]["log"], json!(["answered yes"]), "{out}");
    assert_eq!(gate.count("/c"), 1);
    kill(b);
    kill(c);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The events of a thread's stream (`POST /threads/{id}/stream`, which does not end) until one
/// `done` accepts (which is the last).
fn thread_events_until(events: &Receiver<Sse>, done: impl Fn(&Sse) -> bool) -> Vec<Sse> {
    let mut seen = Vec::new();
    loop {
        let event = events.recv_timeout(PATIENCE).unwrap_or_else(|_| panic!("the stream stopped after {seen:?}"));
        let last = done(&event);
        seen.push(event);
        if last {
            return seen;
        }
    }
}

/// Whether `event` is the thread's lifecycle event `what` (`running`, `interrupted`, `completed`).
fn lifecycle(event: &Sse, what: &str) -> bool {
    event.event == "lifecycle" && event.data["params"]["data"]["event"] == what
}

#[test]
fn a_threads_stream_on_any_replica_follows_its_runs_across_a_kill_and_resumes_after_last_event_id() {
    let Some((_schema, store)) = postgres("replicas_thread_stream") else { return };
    let dir = scratch("thread-stream");
    let gate = Gate::open();
    let agent = agent(&dir, &gate);
    let (a, on_a) = serve(&agent, &store);
    let (b, on_b) = serve(&agent, &store);

    // The thread's stream is opened on B; its runs run on A.
    let (status, thread) = call(&on_a, "POST", "/threads", Some(json!({})));
    assert_eq!(status, 200, "{thread}");
    let thread = thread["thread_id"].as_str().unwrap().to_owned();
    let channels = json!({ "channels": ["lifecycle", "input", "updates"] });
    let path = format!("/threads/{thread}/stream");
    let live = open_events(&on_b, "POST", &path, Some(channels.clone()), None);
    gate.hold("/b", true);
    let (status, run) = call(&on_a, "POST", &format!("/threads/{thread}/runs"), Some(json!({ "input": {} })));
    assert_eq!(status, 200, "{run}");
    let first_run = run["run_id"].as_str().unwrap().to_owned();
    let (_, held) = gate.next();
    let started = live.recv_timeout(PATIENCE).expect("the stream on B sees the run on A begin");
    assert!(lifecycle(&started, "running"), "{started:?}");
    assert_eq!(started.data["params"]["run_id"], first_run.as_str(), "{started:?}");
    // A dies in node `b`; B takes the run over and it pauses.
    kill(a);
    drop(held);
    gate.hold("/b", false);
    let mut events = vec![started];
    events.extend(thread_events_until(&live, |e| lifecycle(e, "interrupted")));
    assert!(events.iter().any(|e| e.event == "input.requested"), "the pause is streamed: {events:?}");
    // The answer on B: a second run, streamed after the first.
    let (status, out) =
        call(&on_b, "POST", &format!("/threads/{thread}/runs/wait"), Some(json!({ "command": { "resume": "yes" } })));
    assert_eq!((status, out["run"]["status"].as_str()), (200, Some("success")), "{out}");
    let second_run = out["run"]["run_id"].as_str().unwrap().to_owned();
    let answered = thread_events_until(&live, |e| lifecycle(e, "completed"));
    assert!(lifecycle(&answered[0], "running"), "{answered:?}");
    assert!(answered.iter().all(|e| e.data["params"]["run_id"] == second_run.as_str()), "{answered:?}");
    events.extend(answered);
    let seqs: Vec<usize> = events.iter().map(|e| e.id.expect("every event has an id")).collect();
    assert!(seqs.windows(2).all(|w| w[1] > w[0]), "in order, none twice: {seqs:?}");
    for (event, seq) in events.iter().zip(&seqs) {
        assert_eq!(event.data["seq"].as_u64(), Some(*seq as u64), "the event's `seq` is its id: {event:?}");
    }
    assert_eq!(events.iter().filter(|e| lifecycle(e, "running")).count(), 2, "{events:?}");

    // A client that reconnects on a new replica C with `Last-Event-ID` gets the rest, from the
    // event after the one it names; `since` in the body says the same.
    let (c, on_c) = serve(&agent, &store);
    let resumed = open_events(&on_c, "POST", &path, Some(channels.clone()), Some(seqs[2]));
    let rest = thread_events_until(&resumed, |e| lifecycle(e, "completed"));
    let rest_seqs: Vec<usize> = rest.iter().map(|e| e.id.unwrap()).collect();
    assert_eq!(rest_seqs, seqs[3..].to_vec(), "Last-Event-ID resumes after the last event seen");
    let mut since = channels.clone();
    since["since"] = json!(seqs[0]);
    let replayed =
        thread_events_until(&open_events(&on_c, "POST", &path, Some(since), None), |e| lifecycle(e, "completed"));
    assert_eq!(replayed.iter().map(|e| e.id.unwrap()).collect::<Vec<_>>(), seqs[1..].to_vec());
    kill(b);
    kill(c);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_answer_whose_replica_is_killed_is_applied_once() {
    let Some((_schema, store)) = postgres("replicas_answer") else { return };
    let dir = scratch("answer");
    let gate = Gate::open();
    let agent = agent(&dir, &gate);
    let (a, on_a) = serve(&agent, &store);
    let (b, on_b) = serve(&agent, &store);

    let (thread, run) = start_run(&on_a);
    assert_eq!(ended(&on_a, &run)["status"], "interrupted");
    // The answer's run is in `c` on A when A is killed.
    gate.hold("/c", true);
    let answer = json!({ "command": { "resume": "once" } });
    let (status, answering) = call(&on_a, "POST", &format!("/threads/{thread}/runs"), Some(answer.clone()));
    assert_eq!(status, 200, "{answering}");
    let answering = answering["run_id"].as_str().unwrap().to_owned();
    let (_, held) = gate.next();
    kill(a);
    drop(held);
    gate.hold("/c", false);

    // While the run is B's to finish, a second answer is refused, never applied.
    let (status, out) = call(&on_b, "POST", &format!("/threads/{thread}/runs/wait"), Some(answer.clone()));
    assert_eq!(status, 409, "{out}");
    let out = ended(&on_b, &answering);
    assert_eq!(out["status"], "success", "{out}");
    let (status, state) = call(&on_b, "GET", &format!("/threads/{thread}"), None);
    assert_eq!((status, state["status"].as_str()), (200, Some("idle")), "{state}");
    assert_eq!(state["values"]["log"], json!(["answered once"]), "applied once: {state}");
    assert_eq!((gate.count("/a"), gate.count("/b"), gate.count("/c")), (1, 1, 2));
    // The thread has finished: another answer is refused.
    let (status, out) = call(&on_b, "POST", &format!("/threads/{thread}/runs/wait"), Some(answer));
    assert_eq!(status, 409, "{out}");
    kill(b);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_killed_server_restarted_on_its_store_finishes_its_run() {
    let dir = scratch("restart");
    let gate = Gate::open();
    let agent = agent(&dir, &gate);
    let store = format!("sled:{}", dir.join("store").display());
    let (first, address) = serve(&agent, &store);
    gate.hold("/b", true);
    let (thread, run) = start_run(&address);
    let (_, held) = gate.next();
    kill(first);
    drop(held);
    gate.hold("/b", false);

    let (second, address) = serve(&agent, &store);
    let out = ended(&address, &run);
    assert_eq!(out["status"], "interrupted", "{out}");
    assert_eq!((gate.count("/a"), gate.count("/b")), (1, 2));
    let (status, seen) = call(&address, "GET", &format!("/threads/{thread}"), None);
    assert_eq!((status, seen["status"].as_str()), (200, Some("interrupted")), "not left busy: {seen}");
    let (status, out) =
        call(&address, "POST", &format!("/threads/{thread}/runs/wait"), Some(json!({ "command": { "resume": 1 } })));
    assert_eq!((status, out["run"]["status"].as_str()), (200, Some("success")), "{out}");
    kill(second);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_run_left_busy_by_a_server_from_before_the_queue_is_finished_once() {
    let Some((schema, store)) = postgres("replicas_legacy") else { return };
    let dir = scratch("legacy");
    let gate = Gate::open();
    let agent = agent(&dir, &gate);
    let (a, on_a) = serve(&agent, &store);
    gate.hold("/b", true);
    let (thread, run) = start_run(&on_a);
    let (_, held) = gate.next();
    kill(a);
    drop(held);
    gate.hold("/b", false);
    // What a server from before the queue left: the run's record `pending`, its thread
    // mid-run, and no claim.
    let pg = schema.store();
    for id in tea::Checkpointer::threads(&pg, "tea-serve#queue").unwrap() {
        tea::Checkpointer::delete(&pg, "tea-serve#queue", &id).unwrap();
    }
    drop(pg);

    // Two servers start on it: after a lease, one of them finishes the run from its last
    // checkpoint (`a` is not run again; `b`, cut off mid-node, runs once more), once.
    let (b, on_b) = serve(&agent, &store);
    let (c, on_c) = serve(&agent, &store);
    let out = ended(&on_c, &run);
    assert_eq!(out["status"], "interrupted", "{out}");
    assert_eq!((gate.count("/a"), gate.count("/b")), (1, 2));
    for address in [&on_b, &on_c] {
        let (status, seen) = call(address, "GET", &format!("/threads/{thread}"), None);
        assert_eq!((status, seen["status"].as_str()), (200, Some("interrupted")), "not left busy: {seen}");
    }
    let (status, out) =
        call(&on_b, "POST", &format!("/threads/{thread}/runs/wait"), Some(json!({ "command": { "resume": 1 } })));
    assert_eq!((status, out["run"]["status"].as_str()), (200, Some("success")), "{out}");
    assert_eq!((gate.count("/a"), gate.count("/b"), gate.count("/c")), (1, 2, 1));
    kill(b);
    kill(c);
    let _ = std::fs::remove_dir_all(&dir);
}
