//! The chaos test of `tea serve` on PostgreSQL (issue 41), through its HTTP API only: three
//! replicas of `tea serve` on one database, clients that start runs of an agent that pauses twice
//! and answer the pauses, while a seeded schedule kills replicas with SIGKILL (restarting them a
//! moment later) and cuts the replicas' database connections (`pg_terminate_backend`). Afterwards
//! a checker reads every thread (its status, state and history) and counts what went wrong:
//!
//! - **runs lost**: a thread whose start was acknowledged and later found without it, or that
//!   never finished (not busy) by the end;
//! - **answers lost**: an answer acknowledged (`200`) whose pause was later found pending again,
//!   or that is missing from the final state;
//! - **answers applied twice**: an answer found twice in the state, or acknowledged twice;
//! - **nodes re-run after they were recorded**: a node's marker twice in the state, or a
//!   checkpoint of the history that is not a prefix of the final run;
//! - **threads stuck busy**: `busy` once everything has been restarted and given time to settle;
//! - **runs stuck pending**: a run record still `pending` then.
//!
//! All must be zero. Clients retry as real ones do: a request that died with its replica is sent
//! again to another replica, the same answer to the same pause (pinned to its checkpoint with
//! `checkpoint_id`, so it cannot land on a later pause); some answers are sent to two replicas
//! at once. A thread the client finds `error` (a run failed, say on a cut connection) is
//! continued with a run without input; those are counted, not failures.
//!
//! The short form (CI) runs a few dozen threads in well under a minute. Knobs: `TEA_CHAOS_RUNS`
//! (threads; the long form is 1000), `TEA_CHAOS_SEED` (replays a schedule: the seed is printed),
//! `TEA_CHAOS_SETTLE_SECS` (how long the threads get to finish after the chaos stops). The
//! measurement of runs per second is `serve_throughput` below (ignored; see bench/README.md).
//! Skipped, with a message, without PostgreSQL (see tests/postgres_support).
#![cfg(feature = "postgres")]

#[path = "../../tests/postgres_support/mod.rs"]
mod postgres_support;
mod serve_support;

use postgres_support::TestSchema;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The agent the clients run: each node appends its marker (`node@thread`) to `marks`, each
/// answer lands in `applied` once the node after its pause runs.
const CHAOS_AGENT: &str = r#"name: chaos
state:
  marks: { type: list, reducer: append }
  applied: { type: list, reducer: append }
nodes:
  - name: prepare
    run: return { marks = { "prepare@" .. state.key } }
  - name: ask1
    type: interrupt
    message: "first answer?"
    resume_key: answer1
  - name: use1
    run: return { marks = { "use1@" .. state.key }, applied = { state.answer1 } }
  - name: ask2
    type: interrupt
    message: "second answer?"
    resume_key: answer2
  - name: use2
    run: return { marks = { "use2@" .. state.key }, applied = { state.answer2 } }
    goto: __end__
"#;

/// The agent of the throughput figures: start → pause → answer.
const THROUGHPUT_AGENT: &str = r#"name: approve
state:
  marks: { type: list, reducer: append }
nodes:
  - name: prepare
    run: return { marks = { "prepare@" .. state.key } }
  - name: ask
    type: interrupt
    message: "approve?"
    resume_key: answer
  - name: finish
    run: return { marks = { "finish@" .. state.key } }
    goto: __end__
"#;

/// The replicas' lease (`tea serve --lease`): how long a killed replica's runs wait before
/// another takes them over. Short, so that the short form settles quickly.
const LEASE: &str = "2s";

/// Longer than any run takes on a loaded machine, shorter than the lease: a thread `busy` for
/// this long was (almost surely) held by a killed replica's run.
const LONG_BUSY: Duration = Duration::from_millis(1500);

// ---- a seeded random number generator (splitmix64) ----

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn millis(&mut self, low: u64, high: u64) -> Duration {
        Duration::from_millis(low + self.next() % (high - low + 1))
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

// ---- HTTP, one request per connection ----

/// Why a request got no answer: the connection failed (a killed replica), or timed out.
type Transport = String;

fn http(
    address: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
    timeout: Duration,
) -> Result<(u16, Value), Transport> {
    let socket = address.to_socket_addrs().map_err(|e| e.to_string())?.next().ok_or("no address")?;
    let mut stream =
        TcpStream::connect_timeout(&socket, Duration::from_secs(2)).map_err(|e| format!("connect: {e}"))?;
    stream.set_read_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    stream.set_write_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
    let body = body.map(Value::to_string).unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .map_err(|e| format!("write: {e}"))?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).map_err(|e| format!("read: {e}"))?;
    let response = String::from_utf8_lossy(&response);
    let status =
        response.get(9..12).and_then(|s| s.parse().ok()).ok_or_else(|| format!("no status line: {response:?}"))?;
    let (_, payload) = response.split_once("\r\n\r\n").ok_or("no end of headers")?;
    Ok((status, serde_json::from_str(payload).unwrap_or(Value::Null)))
}

// ---- the replicas ----

struct Replica {
    child: Option<Child>,
    address: Option<String>,
}

/// `count` replicas of `tea serve AGENT` on one store; each one's stderr goes to a log file.
struct Cluster {
    agent: PathBuf,
    store: String,
    dir: PathBuf,
    /// `--lease`, if not the default.
    lease: Option<&'static str>,
    replicas: Mutex<Vec<Replica>>,
}

impl Cluster {
    fn new(agent: PathBuf, store: String, dir: PathBuf, count: usize, lease: Option<&'static str>) -> Cluster {
        let replicas = (0..count).map(|_| Replica { child: None, address: None }).collect();
        let cluster = Cluster { agent, store, dir, lease, replicas: Mutex::new(replicas) };
        for i in 0..count {
            cluster.start(i);
        }
        cluster
    }

    /// Starts replica `i` (retried: a start may meet a cut connection), once it listens.
    fn start(&self, i: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match self.spawn(i) {
                Ok((child, address)) => {
                    let mut replicas = self.replicas.lock().unwrap();
                    replicas[i] = Replica { child: Some(child), address: Some(address) };
                    return;
                }
                Err(e) => assert!(Instant::now() < deadline, "replica {i} did not start within 60 s: {e}"),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn spawn(&self, i: usize) -> Result<(Child, String), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("replica-{i}.log")))
            .map_err(|e| e.to_string())?;
        let mut command = serve_support::tea();
        command
            .arg("serve")
            .arg(&self.agent)
            .args(["--store", &self.store, "--bind", "127.0.0.1:0", "--insecure-local"])
            .args(self.lease.map(|lease| ["--lease", lease]).into_iter().flatten())
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        serve_support::listening(&mut command, log)
    }

    /// SIGKILL to replica `i` (`Child::kill`); false if it was down already.
    fn kill(&self, i: usize) -> bool {
        let taken = {
            let mut replicas = self.replicas.lock().unwrap();
            replicas[i].address = None;
            replicas[i].child.take()
        };
        match taken {
            Some(mut child) => {
                let _ = child.kill();
                let _ = child.wait();
                true
            }
            None => false,
        }
    }

    fn up(&self) -> Vec<usize> {
        let replicas = self.replicas.lock().unwrap();
        (0..replicas.len()).filter(|i| replicas[*i].address.is_some()).collect()
    }

    fn down(&self) -> Vec<usize> {
        let replicas = self.replicas.lock().unwrap();
        (0..replicas.len()).filter(|i| replicas[*i].address.is_none()).collect()
    }

    /// A live replica's address, chosen by `rng`.
    fn pick(&self, rng: &mut Rng) -> Option<String> {
        let replicas = self.replicas.lock().unwrap();
        let live: Vec<&String> = replicas.iter().filter_map(|r| r.address.as_ref()).collect();
        (!live.is_empty()).then(|| live[rng.below(live.len())].clone())
    }

    /// A request to a live replica, tried on others until one answers (or `patience` runs out).
    fn ask(&self, rng: &mut Rng, method: &str, path: &str, body: Option<&Value>, patience: Duration) -> (u16, Value) {
        let deadline = Instant::now() + patience;
        loop {
            let failure = match self.pick(rng) {
                Some(address) => match http(&address, method, path, body, Duration::from_secs(30)) {
                    Ok(answer) if answer.0 < 500 => return answer,
                    Ok((status, body)) => format!("{status} {body}"),
                    Err(e) => e,
                },
                None => "no replica is up".to_owned(),
            };
            assert!(Instant::now() < deadline, "{method} {path}: no replica answered: {failure}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let count = self.replicas.lock().unwrap().len();
        for i in 0..count {
            self.kill(i);
        }
    }
}

/// The scratch directory of one run of the harness (the agent file, the replicas' logs).
fn scratch(name: &str, agent: &str) -> (PathBuf, PathBuf) {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let dir = std::env::temp_dir().join(format!("tea-cli-{name}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("agent.yaml");
    std::fs::write(&file, agent).unwrap();
    (dir, file)
}

/// The store URL of `schema`, with an application name of its own so that the connections of
/// these replicas (and only theirs) can be cut.
fn store_url(schema: &TestSchema, application: &str) -> String {
    let glue = if schema.url().contains('?') { '&' } else { '?' };
    format!("{}{glue}application_name={application}&schema={}", schema.url(), schema.name())
}

/// `pg_terminate_backend` on every connection named `application`; how many were cut.
fn cut_connections(url: &str, application: &str) -> Result<u64, String> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let mut config: tokio_postgres::Config = url.parse().map_err(|e: tokio_postgres::Error| e.to_string())?;
        config.connect_timeout(Duration::from_secs(3));
        config.application_name("tea_chaos_killer");
        let (client, connection) = config.connect(tokio_postgres::NoTls).await.map_err(|e| e.to_string())?;
        let driver = tokio::spawn(connection);
        let row = client
            .query_one(
                "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE application_name = $1 AND pid <> pg_backend_pid()) AS cut",
                &[&application],
            )
            .await
            .map_err(|e| e.to_string());
        drop(client);
        let _ = driver.await;
        Ok(row?.get::<_, i64>(0) as u64)
    })
}

fn env_number(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(text) => text.parse().unwrap_or_else(|_| panic!("{name}={text:?} is not a number")),
        Err(_) => default,
    }
}

// ---- the clients ----

/// What the clients and the chaos counted while it ran.
#[derive(Default)]
struct Tally {
    runs_lost: AtomicU64,
    answers_lost: AtomicU64,
    answers_twice: AtomicU64,
    requests: AtomicU64,
    /// Requests that got no answer (their replica was killed under them).
    died: AtomicU64,
    /// Requests answered with a 5xx.
    server_errors: AtomicU64,
    refused: AtomicU64,
    duplicates_sent: AtomicU64,
    failed_runs_continued: AtomicU64,
    /// Threads seen `busy` for longer than any run takes here: a killed replica's run, until
    /// another took it over.
    long_busy: AtomicU64,
    kills: AtomicU64,
    restarts: AtomicU64,
    connection_cuts: AtomicU64,
    connections_cut: AtomicU64,
}

fn add(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// One thread a client drives from start to end.
struct Task {
    key: String,
    /// A start of this thread was acknowledged (the run reached the first pause).
    started: bool,
    /// The pauses whose answer was acknowledged.
    answered: [bool; 2],
    /// How often each lost event was counted already (each is counted once per thread).
    lost_start: bool,
    lost_answer: [bool; 2],
    /// Since when the thread has been seen `busy`.
    busy_since: Option<Instant>,
    due: Instant,
}

/// What a client does next with a thread.
enum Next {
    Done,
    Later(Duration),
}

struct Chaos {
    cluster: Cluster,
    tally: Tally,
    seed: u64,
    runs: usize,
    issued: AtomicUsize,
    finished: AtomicUsize,
    /// Set when the chaos has stopped and every replica is up again: from then, threads settle.
    calm: AtomicBool,
    parked: Mutex<Vec<Task>>,
}

impl Chaos {
    fn path(key: &str, rest: &str) -> String {
        format!("/threads/{key}{rest}")
    }

    /// A request to some replica: `Err` when the replica did not answer (it died, or timed out).
    fn send(&self, rng: &mut Rng, method: &str, path: &str, body: Option<&Value>) -> Result<(u16, Value), Transport> {
        add(&self.tally.requests);
        let Some(address) = self.cluster.pick(rng) else { return Err("no replica is up".into()) };
        let result = http(&address, method, path, body, Duration::from_secs(30));
        match &result {
            Err(_) => add(&self.tally.died),
            Ok((500.., _)) => add(&self.tally.server_errors),
            Ok((409, _)) => add(&self.tally.refused),
            _ => {}
        }
        match result {
            Ok((status, body)) if status >= 500 => Err(format!("{status} {body}")),
            other => other,
        }
    }

    /// One step of `task`: reads the thread, then starts it, answers its pause, continues a
    /// failed run, or waits while it is busy.
    fn step(&self, rng: &mut Rng, task: &mut Task) -> Next {
        let think = rng.millis(0, 80);
        let Ok((status, thread)) = self.send(rng, "GET", &Self::path(&task.key, ""), None) else {
            return Next::Later(Duration::from_millis(100));
        };
        let marks = thread["values"]["marks"].as_array().map_or(0, Vec::len);
        let state = match (status, thread["status"].as_str()) {
            (404, _) => "missing",
            (200, Some(state)) => state,
            _ => panic!("GET /threads/{}: {status} {thread}", task.key),
        };
        if state == "busy" {
            task.busy_since.get_or_insert_with(Instant::now);
        } else if let Some(since) = task.busy_since.take() {
            if since.elapsed() > LONG_BUSY {
                add(&self.tally.long_busy);
            }
        }
        match state {
            "missing" | "idle" if marks == 0 => {
                if task.started && !task.lost_start {
                    task.lost_start = true;
                    add(&self.tally.runs_lost);
                    eprintln!("chaos: run lost: thread {} was started, now it is {state} without a step", task.key);
                }
                let body =
                    json!({ "input": { "key": task.key }, "if_not_exists": "create", "on_disconnect": "continue" });
                if let Ok((200, out)) = self.send(rng, "POST", &Self::path(&task.key, "/runs/wait"), Some(&body)) {
                    task.started |= out["run"]["status"] == "interrupted";
                }
                Next::Later(think)
            }
            "idle"
                if thread["values"]["marks"]
                    .as_array()
                    .is_some_and(|m| m.iter().any(|m| m.as_str().is_some_and(|m| m.starts_with("use2@")))) =>
            {
                Next::Done
            }
            "busy" => Next::Later(rng.millis(50, 250)),
            "interrupted" => {
                let pause = match thread["interrupts"][0]["node"].as_str() {
                    Some("ask1") => 0,
                    Some("ask2") => 1,
                    _ => panic!("thread {} paused elsewhere: {thread}", task.key),
                };
                if task.answered[pause] && !task.lost_answer[pause] {
                    task.lost_answer[pause] = true;
                    add(&self.tally.answers_lost);
                    eprintln!(
                        "chaos: answer lost: thread {}'s pause ask{} was answered, it is pending again",
                        task.key,
                        pause + 1
                    );
                }
                self.answer(rng, task, pause);
                Next::Later(think)
            }
            "error" | "idle" => {
                // A failed run (say, its connection was cut): a run without input goes on from
                // the thread's last checkpoint.
                add(&self.tally.failed_runs_continued);
                let body = json!({ "on_disconnect": "continue" });
                let _ = self.send(rng, "POST", &Self::path(&task.key, "/runs/wait"), Some(&body));
                Next::Later(think)
            }
            other => panic!("thread {} has status {other}: {thread}", task.key),
        }
    }

    /// Answers pause `pause` of `task` (`KEY/a1` or `KEY/a2`), pinned to the checkpoint it was
    /// seen at; sometimes to two replicas at once.
    fn answer(&self, rng: &mut Rng, task: &mut Task, pause: usize) {
        let Ok((200, state)) = self.send(rng, "GET", &Self::path(&task.key, "/state"), None) else { return };
        let Some(checkpoint) = state["checkpoint"]["checkpoint_id"].as_str() else { return };
        let expected = if pause == 0 { "ask1" } else { "ask2" };
        if state["interrupts"][0]["node"] != expected {
            return;
        }
        let body = json!({
            "command": { "resume": format!("{}/a{}", task.key, pause + 1) },
            "checkpoint_id": checkpoint,
            "on_disconnect": "continue",
        });
        let path = Self::path(&task.key, "/runs/wait");
        let twice = rng.chance(20);
        let mut other = Rng(rng.next());
        let acknowledged = |result: Result<(u16, Value), Transport>| matches!(result, Ok((200, out)) if out["run"]["status"] == "interrupted" || out["run"]["status"] == "success");
        let (first, second) = std::thread::scope(|s| {
            let duplicate = twice.then(|| {
                add(&self.tally.duplicates_sent);
                s.spawn(|| acknowledged(self.send(&mut other, "POST", &path, Some(&body))))
            });
            let first = acknowledged(self.send(rng, "POST", &path, Some(&body)));
            (first, duplicate.map(|d| d.join().unwrap()).unwrap_or(false))
        });
        if first && second {
            add(&self.tally.answers_twice);
            eprintln!("chaos: answer acknowledged twice: thread {} pause {expected}", task.key);
        }
        task.answered[pause] |= first || second;
    }

    /// A client: takes parked threads that are due, else a new one, until every thread is done
    /// or the settling time is over.
    fn client(&self, index: u64, settle: Duration) {
        let mut rng = Rng(self.seed ^ (index + 1).wrapping_mul(0x51_7cc1_b727_220a));
        let mut settle_deadline = None;
        loop {
            if self.calm.load(Ordering::SeqCst) {
                let deadline = *settle_deadline.get_or_insert_with(|| Instant::now() + settle);
                if Instant::now() > deadline {
                    return;
                }
            }
            let due = {
                let mut parked = self.parked.lock().unwrap();
                let now = Instant::now();
                parked.iter().position(|t| t.due <= now).map(|i| parked.swap_remove(i))
            };
            let mut task = match due {
                Some(task) => task,
                None => {
                    let n = self.issued.fetch_add(1, Ordering::SeqCst);
                    if n >= self.runs {
                        self.issued.fetch_sub(1, Ordering::SeqCst);
                        if self.finished.load(Ordering::SeqCst) == self.runs {
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(20));
                        continue;
                    }
                    Task {
                        key: format!("chaos-{:x}-{n}", self.seed),
                        started: false,
                        answered: [false; 2],
                        lost_start: false,
                        lost_answer: [false; 2],
                        busy_since: None,
                        due: Instant::now(),
                    }
                }
            };
            match self.step(&mut rng, &mut task) {
                Next::Done => {
                    self.finished.fetch_add(1, Ordering::SeqCst);
                }
                Next::Later(wait) => {
                    task.due = Instant::now() + wait;
                    self.parked.lock().unwrap().push(task);
                }
            }
        }
    }

    /// The chaos: from the seed, a schedule of replica kills (each restarted after a while) and
    /// cuts of every replica's database connections, until every thread has been issued and at
    /// least `least` kills and cuts happened; then every replica is brought back.
    fn nemesis(&self, url: &str, application: &str, least: u64) {
        let mut rng = Rng(self.seed);
        let mut restarts: Vec<(Instant, usize)> = Vec::new();
        let mut step = 0u64;
        loop {
            let enough = self.tally.kills.load(Ordering::SeqCst) >= least
                && self.tally.connection_cuts.load(Ordering::SeqCst) >= least;
            if enough && self.issued.load(Ordering::SeqCst) >= self.runs {
                break;
            }
            std::thread::sleep(rng.millis(100, 700));
            let now = Instant::now();
            restarts.retain(|(when, i)| {
                if *when <= now {
                    self.cluster.start(*i);
                    add(&self.tally.restarts);
                    eprintln!("chaos: step {step}: replica {i} restarted");
                    false
                } else {
                    true
                }
            });
            step += 1;
            if rng.chance(55) {
                let up = self.cluster.up();
                // One replica is always kept up, so that the clients always have somewhere to go.
                if up.len() >= 2 {
                    let i = up[rng.below(up.len())];
                    if self.cluster.kill(i) {
                        add(&self.tally.kills);
                        let back = rng.millis(200, 2_000);
                        eprintln!("chaos: step {step}: replica {i} killed (SIGKILL), back in {back:?}");
                        restarts.push((Instant::now() + back, i));
                    }
                }
            } else {
                match cut_connections(url, application) {
                    Ok(n) => {
                        add(&self.tally.connection_cuts);
                        self.tally.connections_cut.fetch_add(n, Ordering::SeqCst);
                        eprintln!("chaos: step {step}: {n} database connections terminated");
                    }
                    Err(e) => eprintln!("chaos: step {step}: could not cut connections: {e}"),
                }
            }
        }
        for i in self.cluster.down() {
            self.cluster.start(i);
            add(&self.tally.restarts);
        }
        eprintln!("chaos: stopped after {step} steps; all replicas up");
        self.calm.store(true, Ordering::SeqCst);
    }
}

/// What the checker found.
#[derive(Debug, Default)]
struct Findings {
    threads: u64,
    finished: u64,
    runs_lost: u64,
    answers_lost: u64,
    answers_twice: u64,
    nodes_rerun: u64,
    stuck_busy: u64,
    stuck_pending_runs: u64,
}

/// Reads every thread back and counts what is wrong with it.
fn check(chaos: &Chaos) -> Findings {
    let mut rng = Rng(chaos.seed ^ 0xc4ec);
    let mut found = Findings { threads: chaos.issued.load(Ordering::SeqCst) as u64, ..Findings::default() };
    let patience = Duration::from_secs(60);
    for n in 0..found.threads {
        let key = format!("chaos-{:x}-{n}", chaos.seed);
        let (status, thread) = chaos.cluster.ask(&mut rng, "GET", &Chaos::path(&key, ""), None, patience);
        if status == 404 {
            found.runs_lost += 1;
            eprintln!("check: thread {key} is missing");
            continue;
        }
        assert_eq!(status, 200, "GET thread {key}: {thread}");
        let state = thread["status"].as_str().unwrap_or("?");
        let values = &thread["values"];
        let strings = |field: &str| -> Vec<String> {
            values[field]
                .as_array()
                .map_or(Vec::new(), |a| a.iter().map(|v| v.as_str().map_or(v.to_string(), str::to_owned)).collect())
        };
        let (marks, applied) = (strings("marks"), strings("applied"));
        let mut counted: BTreeMap<&str, u64> = BTreeMap::new();
        for mark in &marks {
            *counted.entry(mark).or_default() += 1;
        }
        let rerun: u64 = counted.values().map(|c| c - 1).sum();
        let mut answers: BTreeMap<&str, u64> = BTreeMap::new();
        for answer in &applied {
            *answers.entry(answer).or_default() += 1;
        }
        let twice: u64 = answers.values().map(|c| c - 1).sum();
        // Each answer must be the one its pause was sent: anything else was applied to the wrong
        // pause, i.e. twice.
        let misplaced = applied.iter().enumerate().filter(|(i, a)| **a != format!("{key}/a{}", i + 1)).count() as u64;
        found.nodes_rerun += rerun;
        found.answers_twice += twice.max(misplaced);
        if state == "busy" {
            found.stuck_busy += 1;
            eprintln!("check: thread {key} is stuck busy: {values}");
            continue;
        }
        let done = marks.iter().any(|m| m.starts_with("use2@"));
        if done {
            found.finished += 1;
            for (i, wanted) in ["a1", "a2"].iter().enumerate() {
                if !applied.iter().any(|a| *a == format!("{key}/{wanted}")) {
                    found.answers_lost += 1;
                    eprintln!("check: thread {key} finished without answer {} ({applied:?})", i + 1);
                }
            }
        } else {
            found.runs_lost += 1;
            eprintln!("check: thread {key} never finished: it is {state} with {marks:?}");
        }
        if rerun + twice + misplaced > 0 {
            eprintln!("check: thread {key}: marks {marks:?}, answers {applied:?}");
        }
        // The history: every checkpoint's marks are a prefix of the final ones (a node that ran
        // again after it was recorded, on a fork of the thread, shows here).
        let (status, history) =
            chaos.cluster.ask(&mut rng, "GET", &Chaos::path(&key, "/history?limit=1000"), None, patience);
        assert_eq!(status, 200, "history of {key}: {history}");
        for checkpoint in history.as_array().into_iter().flatten() {
            let seen: Vec<&str> =
                checkpoint["values"]["marks"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            if seen.len() > marks.len() || seen.iter().zip(&marks).any(|(a, b)| a != b) {
                found.nodes_rerun += 1;
                eprintln!(
                    "check: thread {key}: checkpoint {} has marks {seen:?}, not a prefix of {marks:?}",
                    checkpoint["checkpoint"]
                );
            }
        }
    }
    // A run still pending when its thread is done may be one whose replica was killed after the
    // client moved on (its request died with it): another replica takes it over, and ends it,
    // once its lease lapses. What is still pending after two leases and a beat is stuck.
    let checked = Instant::now();
    let settled = checked + humantime::parse_duration(LEASE).unwrap() * 2 + Duration::from_secs(5);
    let mut first = None;
    loop {
        let (status, pending) = chaos.cluster.ask(
            &mut rng,
            "POST",
            "/runs/search",
            Some(&json!({ "status": "pending", "limit": 1000 })),
            patience,
        );
        assert_eq!(status, 200, "runs/search: {pending}");
        let left = pending.as_array().map_or(0, Vec::len) as u64;
        let first = *first.get_or_insert(left);
        if left == 0 && first > 0 {
            println!(
                "chaos: {first} runs pending when their threads were done, all ended {:?} later",
                checked.elapsed()
            );
        }
        if left == 0 || Instant::now() > settled {
            if left > 0 {
                eprintln!("check: runs still pending: {pending}");
            }
            found.stuck_pending_runs = left;
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    found.runs_lost += chaos.tally.runs_lost.load(Ordering::SeqCst);
    found.answers_lost += chaos.tally.answers_lost.load(Ordering::SeqCst);
    found.answers_twice += chaos.tally.answers_twice.load(Ordering::SeqCst);
    found
}

#[test]
fn replicas_killed_and_connections_cut_lose_and_double_nothing() {
    let Some(schema) = TestSchema::new("chaos") else { return };
    let runs = env_number("TEA_CHAOS_RUNS", 36) as usize;
    let settle = Duration::from_secs(env_number("TEA_CHAOS_SETTLE_SECS", 30));
    let seed = env_number(
        "TEA_CHAOS_SEED",
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 & 0xffff_ffff,
    );
    println!("chaos: seed {seed} (replay with TEA_CHAOS_SEED={seed}), {runs} threads, 3 replicas, 8 clients");
    let (dir, agent) = scratch("chaos", CHAOS_AGENT);
    let application = schema.name().to_owned();
    let url = store_url(&schema, &application);
    let started = Instant::now();
    let chaos = Chaos {
        cluster: Cluster::new(agent, url, dir.clone(), 3, Some(LEASE)),
        tally: Tally::default(),
        seed,
        runs,
        issued: AtomicUsize::new(0),
        finished: AtomicUsize::new(0),
        calm: AtomicBool::new(false),
        parked: Mutex::new(Vec::new()),
    };
    // At least four kills and four cuts in the short form, more in a long one.
    let least = (runs as u64 / 12).max(4);
    std::thread::scope(|s| {
        for client in 0..8 {
            let chaos = &chaos;
            s.spawn(move || chaos.client(client, settle));
        }
        chaos.nemesis(schema.url(), &application, least);
    });
    let chaos_time = started.elapsed();
    let found = check(&chaos);
    let t = &chaos.tally;
    let get = |c: &AtomicU64| c.load(Ordering::SeqCst);
    println!(
        "chaos: {} s; {} threads ({} finished), {} requests ({} died with their replica, {} answered 5xx, {} refused with 409), \
         {} answers also sent to a second replica, {} failed runs continued by the client, \
         {} threads busy for over {LONG_BUSY:?} (a killed replica's run, taken over)",
        chaos_time.as_secs(),
        found.threads,
        found.finished,
        get(&t.requests),
        get(&t.died),
        get(&t.server_errors),
        get(&t.refused),
        get(&t.duplicates_sent),
        get(&t.failed_runs_continued),
        get(&t.long_busy),
    );
    println!(
        "chaos: nemesis: {} SIGKILLs, {} restarts, {} connection cuts ({} connections terminated)",
        get(&t.kills),
        get(&t.restarts),
        get(&t.connection_cuts),
        get(&t.connections_cut),
    );
    println!(
        "chaos: runs lost {}, answers lost {}, answers applied twice {}, nodes re-run after they were recorded {}, \
         threads stuck busy {}, runs stuck pending {}",
        found.runs_lost,
        found.answers_lost,
        found.answers_twice,
        found.nodes_rerun,
        found.stuck_busy,
        found.stuck_pending_runs
    );
    let clean = [
        found.runs_lost,
        found.answers_lost,
        found.answers_twice,
        found.nodes_rerun,
        found.stuck_busy,
        found.stuck_pending_runs,
    ]
    .iter()
    .all(|c| *c == 0);
    assert!(clean, "seed {seed}: {found:?} (replicas' logs in {})", dir.display());
    drop(chaos);
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- throughput ----

/// Runs per second and the latency of start → pause → answer, with `replicas` replicas (with
/// the default lease) and 8 clients: each run is two requests (`POST /threads/{id}/runs/wait` with the input, which
/// returns at the pause, then with `command.resume`, which returns at the end).
fn throughput(schema: &TestSchema, replicas: usize, runs: usize) -> (f64, Duration, Duration) {
    let (dir, agent) = scratch("throughput", THROUGHPUT_AGENT);
    let url = store_url(schema, schema.name());
    let cluster = Cluster::new(agent, url, dir.clone(), replicas, None);
    let clients = 8;
    let next = AtomicUsize::new(0);
    let latencies = Mutex::new(Vec::new());
    let prefix = format!("tp{replicas}");
    let started = Instant::now();
    std::thread::scope(|s| {
        for client in 0..clients {
            let (cluster, next, latencies, prefix) = (&cluster, &next, &latencies, &prefix);
            s.spawn(move || {
                let mut rng = Rng(client as u64 + 1);
                loop {
                    let n = next.fetch_add(1, Ordering::SeqCst);
                    if n >= runs {
                        return;
                    }
                    let key = format!("{prefix}-{n}");
                    let path = format!("/threads/{key}/runs/wait");
                    let patience = Duration::from_secs(30);
                    let began = Instant::now();
                    let start = json!({ "input": { "key": key }, "if_not_exists": "create" });
                    let (status, out) = cluster.ask(&mut rng, "POST", &path, Some(&start), patience);
                    assert_eq!((status, &out["run"]["status"]), (200, &json!("interrupted")), "{out}");
                    let answer = json!({ "command": { "resume": "yes" } });
                    let (status, out) = cluster.ask(&mut rng, "POST", &path, Some(&answer), patience);
                    assert_eq!((status, &out["run"]["status"]), (200, &json!("success")), "{out}");
                    latencies.lock().unwrap().push(began.elapsed());
                }
            });
        }
    });
    let elapsed = started.elapsed();
    // Every run finished once: its two markers, each once.
    let mut rng = Rng(7);
    for n in 0..runs {
        let key = format!("{prefix}-{n}");
        let (status, thread) = cluster.ask(&mut rng, "GET", &format!("/threads/{key}"), None, Duration::from_secs(30));
        assert_eq!(status, 200, "{thread}");
        assert_eq!(thread["status"], "idle", "{thread}");
        assert_eq!(thread["values"]["marks"], json!([format!("prepare@{key}"), format!("finish@{key}")]), "{thread}");
    }
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
    let mut latencies = latencies.into_inner().unwrap();
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() as f64 * q).ceil() as usize).clamp(1, latencies.len()) - 1];
    (runs as f64 / elapsed.as_secs_f64(), at(0.50), at(0.99))
}

#[test]
#[ignore = "a measurement, not a check: cargo test --release -p tea-graph-cli --test chaos -- --ignored --nocapture"]
fn serve_throughput() {
    let Some(schema) = TestSchema::new("throughput") else { return };
    let runs = env_number("TEA_THROUGHPUT_RUNS", 1000) as usize;
    let build = if cfg!(debug_assertions) { "debug" } else { "release" };
    println!("throughput: {runs} runs of start → pause → answer, 8 clients, PostgreSQL, a {build} build of tea");
    println!("| replicas | runs/s | p50 | p99 |\n|---|---|---|---|");
    for replicas in 1..=3 {
        let (rate, p50, p99) = throughput(&schema, replicas, runs);
        println!("| {replicas} | {rate:.0} | {:.1} ms | {:.1} ms |", p50.as_secs_f64() * 1e3, p99.as_secs_f64() * 1e3);
    }
}
