//! Drives `examples/approval_server.rs` over loopback with a real HTTP client: reviews that
//! approve, reject, repeat, race and tamper with tokens, a restart between the pause and the
//! review, and (feature `postgres`) two server processes on one PostgreSQL database.
//!
//! The example is included as a module, so each test runs the server in-process on its own
//! tokio runtime (on `127.0.0.1:0`) and stops it by dropping that runtime, which releases the
//! sled database for a restart on the same path.

#[cfg(feature = "postgres")]
mod postgres_support;
#[allow(dead_code)]
#[path = "../examples/approval_server.rs"]
mod server;

use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

const KEY: &[u8] = b"approval-server-test-key";
/// No request may take longer than this.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A server running on its own thread and tokio runtime.
struct Server {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Server {
    fn start(db: &Path, key: &[u8]) -> Server {
        Server::start_on(db.into(), key)
    }

    fn start_on(db: server::Db, key: &[u8]) -> Server {
        let app = server::open(db, key).expect("the database opens");
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
                server::serve(listener, app, stopped).await.expect("the server runs");
            });
            // Dropping the runtime drops every task, and with them the last handle on the store.
        });
        let addr = ready_rx.recv_timeout(REQUEST_TIMEOUT).expect("the server starts listening");
        Server { addr, stop: Some(stop_tx), thread: Some(thread) }
    }

    fn client(&self) -> Client {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(REQUEST_TIMEOUT))
            .build()
            .into();
        Client { agent, base: format!("http://{}", self.addr) }
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

/// A blocking HTTP client; every response body must be JSON.
#[derive(Clone)]
struct Client {
    agent: ureq::Agent,
    base: String,
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

    fn submit(&self, text: &str) -> Value {
        let (status, body) = self.post("/documents", &json!({ "text": text }));
        assert_eq!(status, 202, "{body}");
        assert_eq!(body["status"], "awaiting_review", "{body}");
        body
    }

    fn review(&self, token: &Value, approved: bool, comment: Option<&str>) -> (u16, Value) {
        self.post("/reviews", &json!({ "token": token, "approved": approved, "comment": comment }))
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

fn assert_error(response: (u16, Value), status: u16, code: &str) {
    let (got, body) = response;
    assert_eq!((got, body["error"].as_str()), (status, Some(code)), "{body}");
    assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
}

#[test]
fn a_document_approved_in_one_review_is_published() {
    let db = Scratch::new("approved");
    let server = Server::start(&db.0, KEY);
    let client = server.client();

    let paused = client.submit("  tea   ships its first release today ");
    assert_eq!(paused["draft"], "Tea ships its first release today.");
    assert_eq!(paused["revision"], 1);
    let thread = paused["thread"].as_str().unwrap();

    let (status, view) = client.get(&format!("/threads/{thread}"));
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["status"], "awaiting_review");
    assert_eq!(view["next"], json!(["review"]));
    assert_eq!(view["pending"][0]["id"], "review#0");
    assert_eq!(view["pending"][0]["question"]["draft"], paused["draft"]);
    assert_eq!(view["pending"][0]["question"]["issues"], json!([]));
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let expires_at = view["pending"][0]["expires_at"].as_u64().expect("the review has a deadline");
    assert!(expires_at > now + 604_800 - 600 && expires_at <= now + 604_800, "{expires_at} vs {now}");

    let (status, done) = client.review(&paused["token"], true, Some("ship it"));
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["status"], "published");
    assert_eq!(done["thread"], thread);
    assert_eq!(done["document"], "Tea ships its first release today.");
    assert_eq!(done["revision"], 1);
    assert_eq!(done["comments"], json!(["ship it"]));

    let (status, view) = client.get(&format!("/threads/{thread}"));
    assert_eq!(status, 200, "{view}");
    assert_eq!((view["status"].as_str(), view["pending"].as_array().map(Vec::len)), (Some("published"), Some(0)));
    assert_eq!(view["state"]["published"], true);
    server.stop();
}

#[test]
fn a_rejected_document_is_redrafted_and_then_approved() {
    let db = Scratch::new("rejected");
    let server = Server::start(&db.0, KEY);
    let client = server.client();

    let first = client.submit("the release notes. TODO: add the date");
    assert_eq!(first["issues"], json!(["contains a TODO"]));

    let (status, second) = client.review(&first["token"], false, Some("say when it ships"));
    assert_eq!(status, 202, "{second}");
    assert_eq!(second["status"], "awaiting_review");
    assert_eq!(second["thread"], first["thread"]);
    assert_eq!(second["revision"], 2);
    assert_eq!(second["draft"], "The release notes. [Revision 2: say when it ships]");
    assert_eq!(second["issues"], json!([]), "the redraft dropped the TODO");
    assert_ne!(second["token"], first["token"], "a new pause has a new token");

    // The first token is spent.
    assert_error(client.review(&first["token"], true, None), 409, "already_resumed");

    let (status, done) = client.review(&second["token"], true, Some("good now"));
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["status"], "published");
    assert_eq!(done["revision"], 2);
    assert_eq!(done["document"], second["draft"]);
    assert_eq!(done["comments"], json!(["say when it ships", "good now"]));
    assert_eq!(
        done["log"],
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
fn the_same_token_posted_twice_is_refused_the_second_time() {
    let db = Scratch::new("twice");
    let server = Server::start(&db.0, KEY);
    let client = server.client();
    let paused = client.submit("once only");
    let (status, body) = client.review(&paused["token"], true, None);
    assert_eq!(status, 200, "{body}");
    assert_error(client.review(&paused["token"], true, None), 409, "already_resumed");
    assert_error(client.review(&paused["token"], false, Some("too late")), 409, "already_resumed");
    server.stop();
}

#[test]
fn of_sixteen_concurrent_reviews_of_one_token_exactly_one_proceeds() {
    const RACERS: usize = 16;
    let db = Scratch::new("race");
    let server = Server::start(&db.0, KEY);
    let client = server.client();
    let paused = client.submit("a popular document");
    let token = paused["token"].clone();

    let start = Arc::new(Barrier::new(RACERS));
    let racers: Vec<_> = (0..RACERS)
        .map(|_| {
            let (client, token, start) = (client.clone(), token.clone(), start.clone());
            thread::spawn(move || {
                start.wait();
                client.review(&token, true, None)
            })
        })
        .collect();
    let responses: Vec<(u16, Value)> = racers.into_iter().map(|r| r.join().expect("a racer")).collect();

    let published: Vec<&Value> = responses.iter().filter(|(s, _)| *s == 200).map(|(_, b)| b).collect();
    assert_eq!(published.len(), 1, "{responses:?}");
    assert_eq!(published[0]["status"], "published");
    for (status, body) in responses.iter().filter(|(s, _)| *s != 200) {
        assert_eq!((*status, body["error"].as_str()), (409, Some("already_resumed")), "{body}");
    }
    let (_, view) = client.get(&format!("/threads/{}", paused["thread"].as_str().unwrap()));
    assert_eq!(
        view["state"]["log"],
        json!(["drafted revision 1", "checked revision 1: 0 issue(s)", "published revision 1"])
    );
    server.stop();
}

#[test]
fn altered_garbage_and_foreign_tokens_are_bad_tokens_and_the_real_one_still_works() {
    let db = Scratch::new("altered");
    let other_db = Scratch::new("altered-other-key");
    let server = Server::start(&db.0, KEY);
    let client = server.client();
    let paused = client.submit("a document worth forging");
    let token = paused["token"].as_str().unwrap();

    // Change one character in the middle (inside the thread id or the signature).
    for at in [token.len() / 2, token.len() - 10] {
        let mut altered: Vec<char> = token.chars().collect();
        altered[at] = if altered[at] == 'A' { 'B' } else { 'A' };
        let altered: String = altered.into_iter().collect();
        assert_error(client.review(&json!(altered), true, None), 400, "bad_token");
    }
    for garbage in ["", "not a token", "AAAA", &token[..token.len() - 1], &format!("{token}AA")] {
        assert_error(client.review(&json!(garbage), true, None), 400, "bad_token");
    }

    // A token of the same graph signed by a server with another key.
    let other = Server::start(&other_db.0, b"another key entirely");
    let foreign = other.client().submit("elsewhere");
    other.stop();
    assert_error(client.review(&foreign["token"], true, None), 400, "bad_token");

    let (status, body) = client.review(&paused["token"], true, None);
    assert_eq!(status, 200, "{body}");
    server.stop();
}

#[test]
fn a_token_survives_a_server_restart_on_the_same_database() {
    let db = Scratch::new("restart");
    let server = Server::start(&db.0, KEY);
    let paused = server.client().submit("written before the restart");
    let thread = paused["thread"].as_str().unwrap().to_owned();
    server.stop();

    // A new server on the same sled path (and key), on another port.
    let server = Server::start(&db.0, KEY);
    let client = server.client();
    let (status, view) = client.get(&format!("/threads/{thread}"));
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["status"], "awaiting_review");
    assert_eq!(view["state"]["draft"], "Written before the restart.");

    let (status, done) = client.review(&paused["token"], true, None);
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["document"], "Written before the restart.");
    assert_error(client.review(&paused["token"], true, None), 409, "already_resumed");
    server.stop();
}

#[test]
fn bad_answers_are_422_and_leave_the_token_usable() {
    let db = Scratch::new("bad-answer");
    let server = Server::start(&db.0, KEY);
    let client = server.client();
    let paused = client.submit("needs a careful review");
    let token = &paused["token"];

    // A rejection without a comment, an `approved` that is not a bool, a missing `approved`,
    // and a field the review does not know.
    assert_error(client.review(token, false, None), 422, "bad_answer");
    assert_error(client.review(token, false, Some("   ")), 422, "bad_answer");
    assert_error(client.post("/reviews", &json!({ "token": token, "approved": "yes" })), 422, "bad_answer");
    assert_error(client.post("/reviews", &json!({ "token": token, "comment": "hm" })), 422, "bad_answer");
    assert_error(client.post("/reviews", &json!({ "token": token, "approve": true })), 422, "bad_answer");
    let (_, body) = client.review(token, false, None);
    assert!(body["message"].as_str().unwrap().contains("comment"), "{body}");

    let (status, body) = client.review(token, false, Some("shorter, please"));
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["revision"], 2);
    server.stop();
}

#[test]
fn client_mistakes_are_4xx_with_a_json_error() {
    let db = Scratch::new("mistakes");
    let server = Server::start(&db.0, KEY);
    let client = server.client();

    assert_error(client.post_raw("/documents", "{not json"), 400, "bad_request");
    assert_error(client.post_raw("/documents", ""), 400, "bad_request");
    assert_error(client.post("/documents", &json!({ "txt": "typo" })), 400, "bad_request");
    assert_error(client.post("/documents", &json!({ "text": 42 })), 400, "bad_request");
    assert_error(client.post("/documents", &json!({ "text": "  \n " })), 400, "bad_request");
    assert_error(client.post_raw("/reviews", "[]"), 400, "bad_request");
    assert_error(client.post("/reviews", &json!({ "approved": true })), 400, "bad_request");
    assert_error(client.post("/reviews", &json!({ "token": 7, "approved": true })), 400, "bad_request");
    assert_error(client.get("/threads/no-such-thread"), 404, "not_found");
    assert_error(client.get("/threads/%FF"), 400, "bad_request");
    assert_error(client.get("/nowhere"), 404, "not_found");
    assert_error(client.get("/documents"), 405, "method_not_allowed");
    server.stop();
}

#[test]
fn every_engine_error_has_a_status_and_a_stable_code() {
    use tea::{Error, NodeName, ThreadId};
    let thread = || ThreadId::from("t");
    let node = || NodeName::from_static("review");
    let cases: Vec<(Error, u16, &str)> = vec![
        (Error::InvalidToken { reason: "altered" }, 400, "bad_token"),
        (Error::GraphMismatch { expected: "Approval".into(), found: None }, 400, "wrong_graph"),
        (Error::StaleResume { thread: thread() }, 409, "already_resumed"),
        (Error::SchemaMismatch { graph: "Approval".into(), thread: thread(), what: "graph" }, 409, "schema_changed"),
        (Error::ThreadExists { thread: thread() }, 409, "thread_exists"),
        (Error::Expired { thread: thread(), node: node() }, 410, "expired"),
        (Error::BadResumeValue { node: node(), expected: "Decision".into(), reason: "no".into() }, 422, "bad_answer"),
        (Error::CheckpointNotFound { thread: thread() }, 404, "not_found"),
        (Error::NodeFailed { node: node(), source: "boom".into() }, 500, "internal"),
        (Error::NodePanicked { node: node(), message: "boom".into() }, 500, "internal"),
        (Error::NoRoute { node: node(), goto: None }, 500, "internal"),
        (Error::RecursionLimit { limit: 1 }, 500, "internal"),
        (Error::ConflictingWrites { field: "draft".into(), branches: vec![node()] }, 500, "internal"),
        (Error::CorruptCheckpoint { thread: thread(), checkpoint: 1, reason: "crc".into() }, 500, "internal"),
        (Error::store("disk full"), 500, "internal"),
    ];
    for (error, status, code) in cases {
        let (got_status, got_code) = server::classify(&error);
        assert_eq!((got_status.as_u16(), got_code), (status, code), "{error:?}");
    }
}

/// Two replicas of the server, each its own process (this test binary run again), on one
/// PostgreSQL database: pauses and tokens move between them, and a token is used once across
/// both.
#[cfg(feature = "postgres")]
mod replicas {
    use super::*;
    use postgres_support::TestSchema;
    use std::io::{BufRead, BufReader, Read};
    use std::process::{Child, Command, Stdio};

    const TEST: &str = "replicas::two_server_processes_on_one_postgres_database_share_pauses_and_tokens";
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
            let agent = ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(REQUEST_TIMEOUT))
                .build()
                .into();
            Client { agent, base: format!("http://{}", self.addr) }
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
        let server = Server::start_on(db, KEY);
        println!("LISTENING {}", server.addr);
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        server.stop();
    }

    #[test]
    fn two_server_processes_on_one_postgres_database_share_pauses_and_tokens() {
        if let Ok(spec) = std::env::var(REPLICA_ENV) {
            return serve_replica(&spec);
        }
        let Some(db) = TestSchema::new("approval_replicas") else { return };
        let (a, b) = (Replica::spawn(&db), Replica::spawn(&db));
        assert_ne!(a.child.id(), b.child.id());
        let (on_a, on_b) = (a.client(), b.client());

        // A pause taken on A is seen and answered on B; A then refuses the spent token.
        let paused = on_a.submit("written on replica A");
        let thread = paused["thread"].as_str().unwrap();
        let (status, view) = on_b.get(&format!("/threads/{thread}"));
        assert_eq!((status, view["status"].as_str()), (200, Some("awaiting_review")), "{view}");
        let (status, done) = on_b.review(&paused["token"], true, Some("approved on B"));
        assert_eq!(status, 200, "{done}");
        assert_eq!(done["comments"], json!(["approved on B"]));
        assert_error(on_a.review(&paused["token"], true, None), 409, "already_resumed");
        let (_, view) = on_a.get(&format!("/threads/{thread}"));
        assert_eq!(view["status"], "published", "{view}");

        // 32 answers to one token at once, half to each replica: exactly one is taken.
        let paused = on_b.submit("a popular document on two replicas");
        let start = Arc::new(Barrier::new(ANSWERS));
        let answers: Vec<_> = (0..ANSWERS)
            .map(|i| {
                let client = if i % 2 == 0 { on_a.clone() } else { on_b.clone() };
                let (token, start) = (paused["token"].clone(), start.clone());
                thread::spawn(move || {
                    start.wait();
                    client.review(&token, true, Some(&format!("answer {i}")))
                })
            })
            .collect();
        let responses: Vec<(u16, Value)> = answers.into_iter().map(|a| a.join().expect("an answer")).collect();
        let published: Vec<&Value> = responses.iter().filter(|(s, _)| *s == 200).map(|(_, b)| b).collect();
        assert_eq!(published.len(), 1, "{responses:?}");
        for (status, body) in responses.iter().filter(|(s, _)| *s != 200) {
            assert_eq!((*status, body["error"].as_str()), (409, Some("already_resumed")), "{body}");
        }
        // Both replicas see the one answer that was taken.
        let winner = published[0]["comments"].clone();
        for client in [&on_a, &on_b] {
            let (_, view) = client.get(&format!("/threads/{}", paused["thread"].as_str().unwrap()));
            assert_eq!(view["state"]["comments"], winner, "{view}");
            assert_eq!(view["state"]["log"].as_array().map(Vec::len), Some(3), "{view}");
        }
    }

    /// Load: `TEA_LOAD_CLIENTS` clients (16) for `TEA_LOAD_SECONDS` (30), each submitting a
    /// document to one replica and approving it on the other, in a loop; every request must
    /// succeed. Prints the throughput and the latency percentiles. Run it with
    /// `cargo test --release --features postgres --test approval_server -- --ignored --nocapture load`.
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
                        let paused = submit_on.submit(&format!("load document {i}-{n}"));
                        latencies.push(t0.elapsed());
                        let t1 = Instant::now();
                        let (status, body) = review_on.review(&paused["token"], true, None);
                        latencies.push(t1.elapsed());
                        assert_eq!(status, 200, "{body}");
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
        let app = server::open(db, KEY).expect("the database opens");
        assert_eq!(app.threads().expect("the threads").len(), cycles);
    }
}
