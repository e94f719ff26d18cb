//! What one run costs `tea serve` in store round trips beyond the engine's own checkpoints (issue
//! 41): a counting store under the server, one start → pause → answer cycle of a thread, and
//! every call the server makes to its own graphs (the run queue's claims, run records, stored
//! events, thread records) counted. The counts are printed as a table (`--nocapture`) and held
//! to a budget, so that a change that adds a round trip to every run is seen.

use reqwest::Client;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tea::prelude::*;
use tea::serve::Serve;
use tea::{AppendOutcome, CheckpointId};

/// A store that counts its calls by graph and kind, in front of a `MemoryStore`.
#[derive(Clone, Default)]
struct Counting {
    inner: MemoryStore,
    calls: Arc<Mutex<BTreeMap<(String, &'static str), usize>>>,
    /// Says it resumes without a read, as `PostgresStore` does.
    unread: bool,
}

impl Counting {
    fn note(&self, graph: &str, kind: &'static str) {
        *self.calls.lock().unwrap().entry((graph.to_owned(), kind)).or_default() += 1;
    }

    fn snapshot(&self) -> BTreeMap<(String, &'static str), usize> {
        self.calls.lock().unwrap().clone()
    }
}

impl Checkpointer for Counting {
    fn append(
        &self,
        graph: &str,
        thread: &ThreadId,
        expected: Option<CheckpointId>,
        id: CheckpointId,
        bytes: &[u8],
        durable: bool,
    ) -> Result<AppendOutcome, Error> {
        self.note(graph, "append");
        self.inner.append(graph, thread, expected, id, bytes, durable)
    }
    fn head(&self, graph: &str, thread: &ThreadId) -> Result<Option<(CheckpointId, Vec<u8>)>, Error> {
        self.note(graph, "head");
        self.inner.head(graph, thread)
    }
    fn get(&self, graph: &str, thread: &ThreadId, id: CheckpointId) -> Result<Option<Vec<u8>>, Error> {
        self.note(graph, "get");
        self.inner.get(graph, thread, id)
    }
    fn history(&self, graph: &str, thread: &ThreadId) -> Result<Vec<(CheckpointId, Vec<u8>)>, Error> {
        self.note(graph, "history");
        self.inner.history(graph, thread)
    }
    fn threads(&self, graph: &str) -> Result<Vec<ThreadId>, Error> {
        self.note(graph, "threads");
        self.inner.threads(graph)
    }
    fn delete(&self, graph: &str, thread: &ThreadId) -> Result<bool, Error> {
        self.note(graph, "delete");
        self.inner.delete(graph, thread)
    }
    fn prune(&self, graph: &str, thread: &ThreadId, keep_last: usize) -> Result<usize, Error> {
        self.note(graph, "prune");
        self.inner.prune(graph, thread, keep_last)
    }
    fn range(
        &self,
        graph: &str,
        thread: &ThreadId,
        from: CheckpointId,
        to: CheckpointId,
    ) -> Result<Vec<(CheckpointId, Vec<u8>)>, Error> {
        self.note(graph, "range");
        self.inner.range(graph, thread, from, to)
    }
    fn delete_at(&self, graph: &str, thread: &ThreadId, head: CheckpointId) -> Result<bool, Error> {
        self.note(graph, "delete_at");
        self.inner.delete_at(graph, thread, head)
    }
    fn append_over(
        &self,
        graph: &str,
        thread: &ThreadId,
        head: CheckpointId,
        head_bytes: &[u8],
        id: CheckpointId,
        bytes: &[u8],
        durable: bool,
    ) -> Result<AppendOutcome, Error> {
        self.note(graph, "append_over");
        self.inner.append_over(graph, thread, head, head_bytes, id, bytes, durable)
    }
    fn resumes_without_read(&self) -> bool {
        self.unread
    }
}

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
struct Review {
    draft: String,
    approved: bool,
    #[reducer(append)]
    log: Vec<String>,
}

fn write(_: &Review) -> ReviewUpdate {
    Review::update().draft("Tea is served.".into()).log(vec!["write".into()])
}
fn publish(_: &Review) -> ReviewUpdate {
    Review::update().log(vec!["publish".into()])
}

graph! {
    Approval for Review {
        start -> write;
        write -> ask;
        ask -> publish;
        publish -> end;
        interrupt ask(draft => approved);
    }
}

async fn wait(http: &Client, base: &str, path: &str, body: Value) -> Value {
    let response = http.post(format!("{base}{path}")).json(&body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

/// A server of `Approval` on `store`, listening on a free port: a client and its base URL. Its
/// lease is long enough that the worker renews nothing while a cycle runs.
async fn serving(store: &Counting) -> (Client, String) {
    let router = Serve::new()
        .app(Approval::builder().checkpointer(store.clone()).build())
        .lease(Duration::from_secs(60))
        .router();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(tea::serve::serve(listener, router, std::future::pending()));
    (Client::new(), base)
}

/// Waits (up to a minute) until every run's claim is gone and its stored events end with its
/// `end`: the server has written all it writes for the runs.
fn settled(store: &MemoryStore, runs: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let claims = store.threads("tea-serve#queue").unwrap();
        let journals = store.threads("tea-serve#events").unwrap();
        let ended = journals
            .iter()
            .filter(|id| {
                let (_, bytes) = store.head("tea-serve#events", id).unwrap().unwrap();
                let batch: Value = serde_json::from_slice(&bytes).unwrap();
                batch["events"].as_array().and_then(|e| e.last()).is_some_and(|e| e[0] == "end")
            })
            .count();
        if claims.is_empty() && ended == runs {
            return;
        }
        assert!(Instant::now() < deadline, "the runs did not settle: claims {claims:?}, {ended} of {runs} ended");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_start_pause_answer_cycle_costs_few_store_round_trips() {
    let store = Counting::default();
    let (http, base) = serving(&store).await;

    let thread = "queue-cost-1";
    let before = store.snapshot();
    let paused = wait(
        &http,
        &base,
        &format!("/threads/{thread}/runs/wait"),
        json!({ "agent_id": "Approval", "input": {}, "if_not_exists": "create" }),
    )
    .await;
    assert_eq!(paused["run"]["status"], "interrupted", "{paused}");
    let done =
        wait(&http, &base, &format!("/threads/{thread}/runs/wait"), json!({ "command": { "resume": true } })).await;
    assert_eq!(done["run"]["status"], "success", "{done}");
    assert_eq!(done["values"]["log"], json!(["write", "publish"]), "{done}");
    let inner = store.inner.clone();
    tokio::task::spawn_blocking(move || settled(&inner, 2)).await.unwrap();
    let after = store.snapshot();

    let mut by_graph: BTreeMap<String, usize> = BTreeMap::new();
    println!("| graph | call | count |\n|---|---|---|");
    for ((graph, kind), n) in &after {
        let n = n - before.get(&(graph.clone(), *kind)).copied().unwrap_or(0);
        if n > 0 {
            println!("| {graph} | {kind} | {n} |");
            *by_graph.entry(graph.clone()).or_default() += n;
        }
    }
    let server: usize = by_graph.iter().filter(|(g, _)| g.starts_with("tea-serve#")).map(|(_, n)| n).sum();
    println!("per graph: {by_graph:?}; the server's own graphs: {server} calls");
    // Two runs: each its claim written and deleted (one call each: a new run's claim cannot
    // exist yet, and its holder knows its head), its record written twice (one append each),
    // its events stored in a few batches (one append each, more batches on a slow machine),
    // the thread's record read and written. Before these were cut, the cycle cost 30 calls.
    let call = |graph: &str, kind: &'static str| {
        let key = (graph.to_owned(), kind);
        after.get(&key).copied().unwrap_or(0) - before.get(&key).copied().unwrap_or(0)
    };
    let claims = by_graph.get("tea-serve#queue").copied().unwrap_or(0);
    let events = by_graph.get("tea-serve#events").copied().unwrap_or(0);
    assert_eq!(claims, 4, "the claims of two runs: {by_graph:?}");
    // (A run that lasts long reads its record for a cancel asked elsewhere: reads vary.)
    assert_eq!(call("tea-serve#runs", "append"), 4, "the records of two runs: {by_graph:?}");
    assert!(events <= 8, "the events of two runs cost {events} calls: {by_graph:?}");
    assert!(server <= 22, "the server's own writes and reads cost {server} calls: {by_graph:?}");
}

/// The calls a served resume makes on the graph's own store (`Approval`, not the server's
/// graphs), for a thread the same server paused, on a `Counting` store that does or does not
/// resume without a read.
async fn served_resume_calls(unread: bool) -> BTreeMap<&'static str, usize> {
    let store = Counting { unread, ..Counting::default() };
    let (http, base) = serving(&store).await;
    let thread = "unread-1";
    let paused = wait(
        &http,
        &base,
        &format!("/threads/{thread}/runs/wait"),
        json!({ "agent_id": "Approval", "input": {}, "if_not_exists": "create" }),
    )
    .await;
    assert_eq!(paused["run"]["status"], "interrupted", "{paused}");
    let before = store.snapshot();
    let done =
        wait(&http, &base, &format!("/threads/{thread}/runs/wait"), json!({ "command": { "resume": true } })).await;
    assert_eq!(done["run"]["status"], "success", "{done}");
    assert_eq!(done["values"]["log"], json!(["write", "publish"]), "{done}");
    let after = store.snapshot();
    after
        .iter()
        .filter(|((graph, _), _)| graph == "Approval")
        .map(|((graph, kind), n)| (*kind, n - before.get(&(graph.clone(), *kind)).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// On a store where a read is a round trip (it says it resumes without a read, as
/// `PostgresStore` does), a served resume of a pause the server wrote reads the thread's head
/// once — the server's own read, which checks the answer against the pause before the run is
/// queued — where it read it twice: the run (streamed, as every served run is) claims over the
/// pause it remembers instead of reading the head again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_resume_of_its_own_pause_reads_the_head_once() {
    let read = served_resume_calls(false).await;
    println!("a served resume, reading: {read:?}");
    assert_eq!((read.get("head"), read.get("append_over")), (Some(&2), None), "{read:?}");
    let unread = served_resume_calls(true).await;
    println!("a served resume, without the run's read: {unread:?}");
    assert_eq!((unread.get("head"), unread.get("append_over")), (Some(&1), Some(&1)), "{unread:?}");
    assert_eq!(read.get("append"), unread.get("append").map(|n| n + 1).as_ref(), "the claim is the append_over");
}
