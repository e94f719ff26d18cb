//! Drives `examples/approval-server` over loopback with a real HTTP client, through the Agent
//! Protocol that `tea::serve` answers: reviews that approve, reject, repeat, race and point at
//! pauses that are not there, a restart between the pause and the review, and (feature
//! `postgres`) two server processes on one PostgreSQL database.
//!
//! Between the request that pauses and the one that answers, the client keeps the thread's id
//! (and, to pin the pause it answers, the pause's `checkpoint_id`); the server keeps the pause's
//! `Resume` token in the thread's record in the store, where the answering request — on this
//! process, after a restart, or on another replica — takes it from.
//!
//! The example is included as a module, so each test runs the server in-process on its own
//! tokio runtime (on `127.0.0.1:0`) and stops it by dropping that runtime, which releases the
//! sled database for a restart on the same path.

#[cfg(feature = "postgres")]
#[path = "../../postgres_support/mod.rs"]
mod postgres_support;
#[allow(dead_code)]
#[path = "../../../examples/approval-server/src/main.rs"]
mod server;

use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

/// No request may take longer than this.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A server running on its own thread and tokio runtime.
struct Server {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Server {
    fn start(db: &Path) -> Server {
        Server::start_on(db.into())
    }

    fn start_on(db: server::Db) -> Server {
        let app = server::open(db).expect("the database opens");
        let (ready_tx, ready_rx) = mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a tokio runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
                ready_tx.send(listener.local_addr().expect("the bound address")).expect("the test waits");
                let stopped = async {
                    let _ = stop_rx.await;
                };
                // Loopback clients need no token (`Access::insecure_local`).
                let router = server::router(app, tea::serve::Access::insecure_local());
                tea::serve::serve(listener, router, stopped).await.expect("the server runs");
            });
            // Dropping the runtime drops every task, and with them the last handle on the store.
        });
        let addr = ready_rx.recv_timeout(REQUEST_TIMEOUT).expect("the server starts listening");
        Server { addr, stop: Some(stop_tx), thread: Some(thread) }
    }

    fn client(&self) -> Client {
        client_of(self.addr)
    }

    /// Stops the server and waits (a bounded time) for its thread; true if it ended.
    fn shut_down(&mut self) -> bool {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let Some(thread) = self.thread.take() else { return true };
        let deadline = Instant::now() + REQUEST_TIMEOUT;
        while !thread.is_finished() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
        }
        thread.is_finished() && thread.join().is_ok()
    }

    fn stop(mut self) {
        assert!(self.shut_down(), "the server stops within {REQUEST_TIMEOUT:?}");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shut_down();
    }
}

fn client_of(addr: SocketAddr) -> Client {
    let agent =
        ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(REQUEST_TIMEOUT)).build().into();
    Client { agent, base: format!("http://{addr}") }
}

/// A blocking HTTP client; every response body must be JSON.
#[derive(Clone)]
struct Client {
    agent: ureq::Agent,
    base: String,
}

/// A thread paused at `review`: its id, the pause's checkpoint, and the run's answer.
struct Paused {
    thread: String,
    checkpoint: String,
    out: Value,
}

impl Client {
    fn get(&self, path: &str) -> (u16, Value) {
        reply(self.agent.get(format!("{}{path}", self.base)).call())
    }

    fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.post_raw(path, &body.to_string())
    }

    fn post_raw(&self, path: &str, body: &str) -> (u16, Value) {
        reply(self.agent.post(format!("{}{path}", self.base)).content_type("application/json").send(body))
    }

    /// The checkpoint the thread is at (its newest), as the protocol names it.
    fn checkpoint(&self, thread: &str) -> String {
        let (status, history) = self.get(&format!("/threads/{thread}/history?limit=1"));
        assert_eq!(status, 200, "{history}");
        history[0]["checkpoint"]["checkpoint_id"].as_str().expect("a checkpoint id").to_owned()
    }

    /// Submits a document: a run on a new thread, which pauses at `review`.
    fn submit(&self, text: &str) -> Paused {
        let (status, out) = self.post("/runs/wait", &json!({ "input": { "text": text }, "on_completion": "keep" }));
        assert_eq!(status, 200, "{out}");
        assert_eq!(out["run"]["status"], "interrupted", "{out}");
        assert_eq!(out["interrupts"][0]["node"], "review", "{out}");
        let thread = out["run"]["thread_id"].as_str().expect("the run's thread").to_owned();
        Paused { checkpoint: self.checkpoint(&thread), thread, out }
    }

    /// Answers the pause of `thread` (pinned to `checkpoint` when given).
    fn review(&self, thread: &str, checkpoint: Option<&str>, approved: bool, comment: Option<&str>) -> (u16, Value) {
        self.answer(thread, checkpoint, json!({ "approved": approved, "comment": comment }))
    }

    fn answer(&self, thread: &str, checkpoint: Option<&str>, resume: Value) -> (u16, Value) {
        let mut body = json!({ "command": { "resume": resume } });
        if let Some(checkpoint) = checkpoint {
            body["checkpoint_id"] = json!(checkpoint);
        }
        self.post(&format!("/threads/{thread}/runs/wait"), &body)
    }
}

fn reply(response: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> (u16, Value) {
    let mut response = response.expect("the request completes");
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().expect("a readable body");
    let body =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("a {status} response that is not JSON ({e}): {text:?}"));
    (status, body)
}

/// A database directory for one test, removed before and after.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("tea-approval-server-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The protocol's `ErrorResponse`: `status`, `code`, and a message.
fn assert_error(response: (u16, Value), status: u16, code: &str) {
    let (got, body) = response;
    assert_eq!((got, body["code"].as_str()), (status, Some(code)), "{body}");
    assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
}

/// A refused second answer: `409`, because the pause was answered (`stale_resume`), the thread
/// has moved past it (`not_paused`) or is running the answer that won (`thread_busy`).
fn assert_already_answered(response: &(u16, Value)) {
    let (status, body) = response;
    assert_eq!(*status, 409, "{body}");
    let code = body["code"].as_str().unwrap_or_default();
    assert!(["stale_resume", "not_paused", "thread_busy"].contains(&code), "{body}");
}

#[test]
fn a_document_approved_in_one_review_is_published() {
    let db = Scratch::new("approved");
    let server = Server::start(&db.0);
    let client = server.client();

    let paused = client.submit("  tea   ships its first release today ");
    assert_eq!(paused.out["values"]["draft"], "Tea ships its first release today.");
    assert_eq!(paused.out["values"]["revision"], 1);
    let thread = paused.thread.as_str();

    let (status, view) = client.get(&format!("/threads/{thread}"));
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["status"], "interrupted");
    assert_eq!(view["interrupts"][0]["id"], "review#0");
    assert_eq!(view["interrupts"][0]["value"]["draft"], paused.out["values"]["draft"]);
    assert_eq!(view["interrupts"][0]["value"]["issues"], json!([]));
    assert_eq!(view["interrupts"][0]["answer_kind"], "json", "an object answer: the inbox shows a JSON form");
    let expires_at = view["interrupts"][0]["expires_at"].as_str().expect("the review has a deadline");
    let expires_at = humantime::parse_rfc3339(expires_at).expect("RFC 3339");
    let week = Duration::from_secs(604_800);
    let now = SystemTime::now();
    assert!(
        expires_at > now + week - Duration::from_secs(600) && expires_at <= now + week,
        "{expires_at:?} vs {now:?}"
    );

    let (status, done) = client.review(thread, None, true, Some("ship it"));
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["run"]["status"], "success");
    assert_eq!(done["run"]["thread_id"], thread);
    assert_eq!(done["values"]["published"], true);
    assert_eq!(done["values"]["draft"], "Tea ships its first release today.");
    assert_eq!(done["values"]["revision"], 1);
    assert_eq!(done["values"]["comments"], json!(["ship it"]));

    let (status, view) = client.get(&format!("/threads/{thread}"));
    assert_eq!(status, 200, "{view}");
    assert_eq!((view["status"].as_str(), view["interrupts"].as_array().map(Vec::len)), (Some("idle"), Some(0)));
    assert_eq!(view["values"]["published"], true);
    server.stop();
}

#[test]
fn a_rejected_document_is_redrafted_and_then_approved() {
    let db = Scratch::new("rejected");
    let server = Server::start(&db.0);
    let client = server.client();

    let first = client.submit("the release notes. TODO: add the date");
    assert_eq!(first.out["values"]["issues"], json!(["contains a TODO"]));
    let thread = first.thread.as_str();

    let (status, second) = client.review(thread, Some(&first.checkpoint), false, Some("say when it ships"));
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["run"]["status"], "interrupted", "paused again for the redraft's review: {second}");
    assert_eq!(second["run"]["thread_id"], thread);
    assert_eq!(second["values"]["revision"], 2);
    assert_eq!(second["values"]["draft"], "The release notes. [Revision 2: say when it ships]");
    assert_eq!(second["values"]["issues"], json!([]), "the redraft dropped the TODO");
    let second_checkpoint = client.checkpoint(thread);
    assert_ne!(second_checkpoint, first.checkpoint, "a new pause is at a new checkpoint");

    // The first pause is answered: an answer pinned to it is stale.
    assert_error(client.review(thread, Some(&first.checkpoint), true, None), 409, "stale_resume");

    let (status, done) = client.review(thread, Some(&second_checkpoint), true, Some("good now"));
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["run"]["status"], "success");
    assert_eq!(done["values"]["published"], true);
    assert_eq!(done["values"]["revision"], 2);
    assert_eq!(done["values"]["draft"], second["values"]["draft"]);
    assert_eq!(done["values"]["comments"], json!(["say when it ships", "good now"]));
    assert_eq!(
        done["values"]["log"],
        json!([
            "drafted revision 1",
            "checked revision 1: 1 issue(s)",
            "rejected (say when it ships); drafted revision 2",
            "checked revision 2: 0 issue(s)",
            "published revision 2 (good now)",
        ])
    );
    server.stop();
}

#[test]
fn the_same_answer_posted_twice_is_refused_the_second_time() {
    let db = Scratch::new("twice");
    let server = Server::start(&db.0);
    let client = server.client();
    let paused = client.submit("once only");
    let (status, body) = client.review(&paused.thread, Some(&paused.checkpoint), true, None);
    assert_eq!(status, 200, "{body}");
    assert_error(client.review(&paused.thread, Some(&paused.checkpoint), true, None), 409, "not_paused");
    assert_error(client.review(&paused.thread, None, false, Some("too late")), 409, "not_paused");
    server.stop();
}

#[test]
fn of_sixteen_concurrent_answers_to_one_pause_exactly_one_proceeds() {
    const RACERS: usize = 16;
    let db = Scratch::new("race");
    let server = Server::start(&db.0);
    let client = server.client();
    let paused = Arc::new(client.submit("a popular document"));

    let start = Arc::new(Barrier::new(RACERS));
    let racers: Vec<_> = (0..RACERS)
        .map(|i| {
            let (client, paused, start) = (client.clone(), paused.clone(), start.clone());
            thread::spawn(move || {
                start.wait();
                // Half pin the pause, half answer whatever is pending.
                let pinned = (i % 2 == 0).then_some(paused.checkpoint.as_str());
                client.review(&paused.thread, pinned, true, None)
            })
        })
        .collect();
    let responses: Vec<(u16, Value)> = racers.into_iter().map(|r| r.join().expect("a racer")).collect();

    let published: Vec<&Value> = responses.iter().filter(|(s, _)| *s == 200).map(|(_, b)| b).collect();
    assert_eq!(published.len(), 1, "{responses:?}");
    assert_eq!(published[0]["values"]["published"], true);
    responses.iter().filter(|(s, _)| *s != 200).for_each(assert_already_answered);
    let (_, view) = client.get(&format!("/threads/{}", paused.thread));
    assert_eq!(
        view["values"]["log"],
        json!(["drafted revision 1", "checked revision 1: 0 issue(s)", "published revision 1"])
    );
    server.stop();
}

#[test]
fn answers_to_pauses_that_are_not_there_are_refused_and_the_real_one_still_works() {
    let db = Scratch::new("altered");
    let other_db = Scratch::new("altered-other-db");
    let server = Server::start(&db.0);
    let client = server.client();
    let paused = client.submit("a document worth forging");
    let (thread, checkpoint) = (paused.thread.as_str(), paused.checkpoint.as_str());

    // A checkpoint id that is not one, and checkpoints the thread is not paused at.
    for garbage in ["", "not a checkpoint", "00000000-0000-0000-zzzz-000000000001", &format!("{checkpoint}ZZ")] {
        assert_error(client.review(thread, Some(garbage), true, None), 422, "bad_request");
    }
    for other in ["1", "999"] {
        assert_error(client.review(thread, Some(other), true, None), 409, "stale_resume");
    }
    // A thread id changed in one character, and a thread of another server's database.
    let mut altered: Vec<char> = thread.chars().collect();
    altered[4] = if altered[4] == 'a' { 'b' } else { 'a' };
    let altered: String = altered.into_iter().collect();
    assert_error(client.review(&altered, Some(checkpoint), true, None), 404, "not_found");
    let other = Server::start(&other_db.0);
    let foreign = other.client().submit("elsewhere");
    other.stop();
    assert_error(client.review(&foreign.thread, Some(&foreign.checkpoint), true, None), 404, "not_found");

    let (status, body) = client.review(thread, Some(checkpoint), true, None);
    assert_eq!((status, &body["run"]["status"]), (200, &json!("success")), "{body}");
    server.stop();
}

#[test]
fn a_pause_survives_a_server_restart_on_the_same_database() {
    let db = Scratch::new("restart");
    let server = Server::start(&db.0);
    let paused = server.client().submit("written before the restart");
    server.stop();

    // A new server on the same sled path, on another port: the pause, and the token the first
    // server kept for it, are in the database.
    let server = Server::start(&db.0);
    let client = server.client();
    let (status, view) = client.get(&format!("/threads/{}", paused.thread));
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["status"], "interrupted");
    assert_eq!(view["values"]["draft"], "Written before the restart.");

    // So is the run that paused it, with its outcome.
    let run_id = paused.out["run"]["run_id"].as_str().unwrap();
    let (status, run) = client.get(&format!("/runs/{run_id}"));
    assert_eq!(
        (status, run["status"].as_str(), run["thread_id"].as_str()),
        (200, Some("interrupted"), Some(&*paused.thread))
    );
    let (status, run) = client.get(&format!("/runs/{run_id}/wait"));
    assert_eq!((status, &run["values"]["draft"]), (200, &json!("Written before the restart.")), "{run}");

    let (status, done) = client.review(&paused.thread, Some(&paused.checkpoint), true, None);
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["values"]["published"], true);
    assert_eq!(done["values"]["draft"], "Written before the restart.");
    let (_, runs) = client.post("/runs/search", &json!({ "thread_id": paused.thread }));
    let statuses: Vec<&str> = runs.as_array().unwrap().iter().map(|r| r["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["success", "interrupted"], "both runs of the thread, the newest first: {runs}");
    assert_error(client.review(&paused.thread, Some(&paused.checkpoint), true, None), 409, "not_paused");
    server.stop();
}

#[test]
fn bad_answers_are_422_and_leave_the_pause_answerable() {
    let db = Scratch::new("bad-answer");
    let server = Server::start(&db.0);
    let client = server.client();
    let paused = client.submit("needs a careful review");
    let thread = paused.thread.as_str();

    // A rejection without a comment, an `approved` that is not a bool, a missing `approved`,
    // and a field the review does not know.
    assert_error(client.review(thread, None, false, None), 422, "bad_resume_value");
    assert_error(client.review(thread, None, false, Some("   ")), 422, "bad_resume_value");
    assert_error(client.answer(thread, None, json!({ "approved": "yes" })), 422, "bad_resume_value");
    assert_error(client.answer(thread, None, json!({ "comment": "hm" })), 422, "bad_resume_value");
    assert_error(client.answer(thread, None, json!({ "approve": true })), 422, "bad_resume_value");
    let (_, body) = client.review(thread, None, false, None);
    assert!(body["message"].as_str().unwrap().contains("comment"), "{body}");
    let (_, view) = client.get(&format!("/threads/{thread}"));
    assert_eq!(view["status"], "interrupted", "{view}");

    let (status, body) = client.review(thread, Some(&paused.checkpoint), false, Some("shorter, please"));
    assert_eq!((status, &body["run"]["status"]), (200, &json!("interrupted")), "{body}");
    assert_eq!(body["values"]["revision"], 2);
    server.stop();
}

#[test]
fn client_mistakes_are_4xx_with_a_json_error() {
    let db = Scratch::new("mistakes");
    let server = Server::start(&db.0);
    let client = server.client();

    assert_error(client.post_raw("/runs/wait", "{not json"), 400, "bad_json");
    assert_error(client.post("/runs/wait", &json!({ "input": { "text": 42 } })), 422, "bad_input");
    assert_error(client.post("/runs/wait", &json!({ "input": ["text"] })), 422, "bad_input");
    assert_error(client.post("/runs/wait", &json!({ "input": {}, "multitask_strategy": "shrug" })), 422, "bad_request");
    let big = "word ".repeat(20_000);
    assert_error(client.post("/runs/wait", &json!({ "input": { "text": big } })), 413, "bad_body");
    assert_error(client.review("no-such-thread", None, true, None), 404, "not_found");
    assert_error(client.get("/threads/no-such-thread"), 404, "not_found");
    assert_error(client.get("/threads/%FF"), 400, "bad_path");
    assert_error(client.get("/nowhere"), 404, "not_found");
    assert_error(client.get("/runs/wait"), 405, "method_not_allowed");
    // A finished thread runs its graph once.
    let paused = client.submit("done soon");
    let (status, _) = client.review(&paused.thread, None, true, None);
    assert_eq!(status, 200);
    let again = json!({ "input": { "text": "again" } });
    assert_error(client.post(&format!("/threads/{}/runs/wait", paused.thread), &again), 409, "thread_finished");
    server.stop();
}

/// Two replicas of the server, each its own process (this test binary run again), on one
/// PostgreSQL database: a pause taken on one is answered on the other, exactly once across both.
#[cfg(feature = "postgres")]
mod replicas {
    use super::*;
    use postgres_support::TestSchema;
    use std::io::{BufRead, BufReader, Read};
    use std::process::{Child, Command, Stdio};

    const TEST: &str = "replicas::two_server_processes_on_one_postgres_database_share_pauses";
    /// Set in a replica process: the database URL and the schema, on two lines.
    const REPLICA_ENV: &str = "TEA_APPROVAL_SERVER_REPLICA";
    const ANSWERS: usize = 32;

    /// A server process; killed when dropped.
    struct Replica {
        child: Child,
        addr: SocketAddr,
    }

    impl Replica {
        fn spawn(db: &TestSchema) -> Replica {
            let mut child = Command::new(std::env::current_exe().unwrap())
                .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
                .env(REPLICA_ENV, format!("{}\n{}", db.url(), db.name()))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("a replica process");
            let mut stdout = BufReader::new(child.stdout.take().unwrap());
            let mut line = String::new();
            let addr = loop {
                line.clear();
                assert!(stdout.read_line(&mut line).unwrap() > 0, "the replica exited before listening");
                // libtest may print `test NAME ... ` on the same line first.
                if let Some((_, addr)) = line.split_once("LISTENING ") {
                    break addr.trim().parse().expect("an address");
                }
            };
            Replica { child, addr }
        }

        fn client(&self) -> Client {
            client_of(self.addr)
        }
    }

    impl Drop for Replica {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// The replica role: serves until its stdin closes (the parent exits or kills it).
    fn serve_replica(spec: &str) {
        let (url, schema) = spec.split_once('\n').expect("url and schema");
        let db = server::Db::Postgres { url: url.to_owned(), schema: Some(schema.to_owned()) };
        let server = Server::start_on(db);
        println!("LISTENING {}", server.addr);
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        server.stop();
    }

    #[test]
    fn two_server_processes_on_one_postgres_database_share_pauses() {
        if let Ok(spec) = std::env::var(REPLICA_ENV) {
            return serve_replica(&spec);
        }
        let Some(db) = TestSchema::new("approval_replicas") else { return };
        let (a, b) = (Replica::spawn(&db), Replica::spawn(&db));
        assert_ne!(a.child.id(), b.child.id());
        let (on_a, on_b) = (a.client(), b.client());

        // A pause taken on A is seen and answered on B; A then refuses a second answer.
        let paused = on_a.submit("written on replica A");
        let thread = paused.thread.as_str();
        let (status, view) = on_b.get(&format!("/threads/{thread}"));
        assert_eq!((status, view["status"].as_str()), (200, Some("interrupted")), "{view}");
        let (status, done) = on_b.review(thread, Some(&paused.checkpoint), true, Some("approved on B"));
        assert_eq!(status, 200, "{done}");
        assert_eq!(done["values"]["comments"], json!(["approved on B"]));
        assert_already_answered(&on_a.review(thread, Some(&paused.checkpoint), true, None));
        let (_, view) = on_a.get(&format!("/threads/{thread}"));
        assert_eq!((view["status"].as_str(), &view["values"]["published"]), (Some("idle"), &json!(true)), "{view}");

        // 32 answers to one pause at once, half to each replica: exactly one is taken.
        let paused = Arc::new(on_b.submit("a popular document on two replicas"));
        let start = Arc::new(Barrier::new(ANSWERS));
        let answers: Vec<_> = (0..ANSWERS)
            .map(|i| {
                let client = if i % 2 == 0 { on_a.clone() } else { on_b.clone() };
                let (paused, start) = (paused.clone(), start.clone());
                thread::spawn(move || {
                    start.wait();
                    client.review(&paused.thread, Some(&paused.checkpoint), true, Some(&format!("answer {i}")))
                })
            })
            .collect();
        let responses: Vec<(u16, Value)> = answers.into_iter().map(|a| a.join().expect("an answer")).collect();
        let published: Vec<&Value> = responses.iter().filter(|(s, _)| *s == 200).map(|(_, b)| b).collect();
        assert_eq!(published.len(), 1, "{responses:?}");
        responses.iter().filter(|(s, _)| *s != 200).for_each(assert_already_answered);
        // Both replicas see the one answer that was taken.
        let winner = published[0]["values"]["comments"].clone();
        for client in [&on_a, &on_b] {
            let (_, view) = client.get(&format!("/threads/{}", paused.thread));
            assert_eq!(view["values"]["comments"], winner, "{view}");
            assert_eq!(view["values"]["log"].as_array().map(Vec::len), Some(3), "{view}");
        }
    }

    /// Load: `TEA_LOAD_CLIENTS` clients (16) for `TEA_LOAD_SECONDS` (30), each submitting a
    /// document to one replica and approving it on the other, in a loop; every request must
    /// succeed. Prints the throughput and the latency percentiles. Run it with
    /// `cargo test --release -p tea-integration-tests --features postgres --test approval_server -- --ignored --nocapture load`.
    #[test]
    #[ignore = "a 30-second load test; run it explicitly"]
    fn load_two_replicas() {
        let Some(db) = TestSchema::new("approval_load") else { return };
        let number =
            |name: &str, default: u64| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
        let (clients, seconds) = (number("TEA_LOAD_CLIENTS", 16) as usize, number("TEA_LOAD_SECONDS", 30));
        let (a, b) = (Replica::spawn(&db), Replica::spawn(&db));
        let replicas = [a.client(), b.client()];
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let started = Instant::now();
        let workers: Vec<_> = (0..clients)
            .map(|i| {
                let (submit_on, review_on) = (replicas[i % 2].clone(), replicas[(i + 1) % 2].clone());
                thread::spawn(move || {
                    let mut latencies = Vec::new();
                    let mut n = 0;
                    while Instant::now() < deadline {
                        let t0 = Instant::now();
                        let (status, out) = submit_on.post(
                            "/runs/wait",
                            &json!({ "input": { "text": format!("load {i}-{n}") }, "on_completion": "keep" }),
                        );
                        latencies.push(t0.elapsed());
                        assert_eq!((status, &out["run"]["status"]), (200, &json!("interrupted")), "{out}");
                        let t1 = Instant::now();
                        let (status, body) =
                            review_on.review(out["run"]["thread_id"].as_str().unwrap(), None, true, None);
                        latencies.push(t1.elapsed());
                        assert_eq!((status, &body["run"]["status"]), (200, &json!("success")), "{body}");
                        n += 1;
                    }
                    (n, latencies)
                })
            })
            .collect();
        let mut cycles = 0;
        let mut latencies = Vec::new();
        for worker in workers {
            let (n, mut l) = worker.join().expect("a load client");
            cycles += n;
            latencies.append(&mut l);
        }
        let elapsed = started.elapsed().as_secs_f64();
        latencies.sort();
        let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
        println!(
            "LOAD {clients} clients, {elapsed:.1} s, 2 replicas: {cycles} submit+review cycles ({:.0} requests/s), \
             latency p50 {:?}, p99 {:?}, max {:?}",
            2.0 * cycles as f64 / elapsed,
            at(0.5),
            at(0.99),
            at(1.0)
        );
        assert!(cycles > 0);
        // One thread per cycle in the database, whichever replica served it.
        let db = server::Db::Postgres { url: db.url().to_owned(), schema: Some(db.name().to_owned()) };
        let app = server::open(db).expect("the database opens");
        assert_eq!(app.threads().expect("the threads").len(), cycles);
    }
}
