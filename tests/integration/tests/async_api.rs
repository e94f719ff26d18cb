//! The async driver: `run_async`, `run_stream_async`, `invoke_async`, `resume_async`, `stream_async` on tokio.
//!
//! The graphs are written with `graph!`; `Delayed` wraps one and makes some of its nodes wait
//! before they run — async nodes awaiting a tokio timer, or sync nodes blocking their thread
//! (a stand-in for a synchronous LLM call) — and records when each node started and ended, so
//! concurrency is shown with timestamps (every branch started before any ended), not by
//! asserting how long a sleep took.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tea::__private::NodeStep;
use tea::prelude::*;
use tea::{BoxError, Fork, Graph, NodeFuture, SyncGraph};

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
pub struct Trip {
    #[reducer(append)]
    log: Vec<String>,
    answer: String,
}

fn visit(ctx: &Ctx<Trip>) -> TripUpdate {
    Trip::update().log(vec![ctx.node().to_string()])
}

mod fan {
    use super::*;
    pub fn plan(_: &Trip, ctx: &Ctx<Trip>) -> TripUpdate {
        visit(ctx)
    }
    macro_rules! branches {
        ($($name:ident),*) => {$(
            pub fn $name(_: &Trip, ctx: &Ctx<Trip>) -> TripUpdate {
                visit(ctx)
            }
        )*};
    }
    branches!(a, b, c, d, e, f, g, h);
    pub fn join(s: &Trip, ctx: &Ctx<Trip>) -> TripUpdate {
        Trip::update().log(vec![format!("{}:{}", ctx.node(), s.log.len())])
    }
    graph! {
        pub Fan for Trip {
            start -> plan;
            parallel plan => [a, b, c, d, e, f, g, h] -> join;
            join -> end;
        }
    }
}
use fan::{Fan, FanNode};

mod desk {
    use super::*;
    pub fn prepare(_: &Trip, ctx: &Ctx<Trip>) -> TripUpdate {
        visit(ctx)
    }
    pub fn ask(_: &Trip, hitl: &mut Hitl) -> Result<TripUpdate, Pause> {
        let answer: String = hitl.interrupt("where to?")?;
        Ok(Trip::update().answer(answer).log(vec!["ask".into()]))
    }
    pub fn slow(_: &Trip, ctx: &Ctx<Trip>) -> TripUpdate {
        visit(ctx)
    }
    pub fn finish(_: &Trip, ctx: &Ctx<Trip>) -> TripUpdate {
        visit(ctx)
    }
    graph! {
        pub Desk for Trip {
            start -> prepare;
            prepare -> ask;
            ask -> slow;
            slow -> finish;
            finish -> end;
            interruptible ask;
        }
    }
}
use desk::{Desk, DeskNode};

/// How a delayed node waits.
#[derive(Clone, Copy, PartialEq)]
enum Wait {
    /// An async node: awaits a tokio timer.
    Async,
    /// A sync node: blocks its thread.
    Blocking,
}

/// `graph`, with the nodes `slow` picks waiting `delay` before they run.
struct Delayed<G: Graph> {
    graph: G,
    slow: fn(G::Node) -> bool,
    wait: Wait,
    delay_ms: AtomicU64,
    panics: bool,
    spans: Mutex<Vec<(String, Instant, Instant)>>,
}

impl<G: Graph> Delayed<G> {
    fn new(graph: G, slow: fn(G::Node) -> bool, wait: Wait, delay: Duration) -> Self {
        let delay_ms = AtomicU64::new(delay.as_millis() as u64);
        Delayed { graph, slow, wait, delay_ms, panics: false, spans: Mutex::new(Vec::new()) }
    }

    fn delay(&self) -> Duration {
        Duration::from_millis(self.delay_ms.load(Ordering::SeqCst))
    }

    fn record(&self, node: G::Node, started: Instant) {
        let name = self.graph.node_name(node).to_string();
        self.spans.lock().unwrap().push((name, started, Instant::now()));
    }

    /// (node, started, ended) of every delayed node run so far.
    fn spans(&self) -> Vec<(String, Instant, Instant)> {
        self.spans.lock().unwrap().clone()
    }
}

impl<G: Graph> SyncGraph for Delayed<G> {}
impl<G: tea::PauseFree> tea::PauseFree for Delayed<G> {}

impl<G: Graph> Graph for Delayed<G> {
    type State = G::State;
    type Node = G::Node;

    fn name(&self) -> &str {
        self.graph.name()
    }
    fn fingerprint(&self) -> u64 {
        self.graph.fingerprint()
    }
    fn node_name(&self, node: G::Node) -> NodeName {
        self.graph.node_name(node)
    }
    fn start(&self, state: &G::State) -> Option<Goto<G::Node>> {
        self.graph.start(state)
    }
    fn is_async(&self, node: G::Node) -> bool {
        self.wait == Wait::Async && (self.slow)(node)
    }
    fn run(
        &self,
        node: G::Node,
        state: &G::State,
        ctx: &Ctx<G::State>,
        hitl: &mut Hitl,
    ) -> Result<NodeStep<G::State, G::Node>, BoxError> {
        if (self.slow)(node) {
            let started = Instant::now();
            std::thread::sleep(self.delay());
            self.record(node, started);
        }
        self.graph.run(node, state, ctx, hitl)
    }
    fn run_async<'a>(
        &'a self,
        node: G::Node,
        state: &'a G::State,
        ctx: &'a Ctx<G::State>,
        hitl: &'a mut Hitl,
    ) -> NodeFuture<'a, G::State, G::Node> {
        Box::pin(async move {
            let started = Instant::now();
            tokio::time::sleep(self.delay()).await;
            self.record(node, started);
            if self.panics {
                panic!("the model went away");
            }
            self.graph.run(node, state, ctx, hitl)
        })
    }
    fn route(&self, node: G::Node, state: &G::State) -> Option<Goto<G::Node>> {
        self.graph.route(node, state)
    }
    fn can_goto(&self, from: G::Node, to: Goto<G::Node>) -> bool {
        self.graph.can_goto(from, to)
    }
    fn node_named(&self, name: &str) -> Option<G::Node> {
        self.graph.node_named(name)
    }
    fn fork(&self, node: G::Node) -> Option<Fork<'_, G::Node>> {
        self.graph.fork(node)
    }
    fn reads_branches(&self, join: G::Node) -> bool {
        self.graph.reads_branches(join)
    }
    fn interrupt_before(&self, node: G::Node) -> bool {
        self.graph.interrupt_before(node)
    }
    fn interrupt_after(&self, node: G::Node) -> bool {
        self.graph.interrupt_after(node)
    }
}

fn branch_node(node: FanNode) -> bool {
    !matches!(node, FanNode::Plan | FanNode::Join)
}

fn fan(wait: Wait, delay: Duration) -> App<Delayed<Fan>> {
    tea::Builder::new(Delayed::new(Fan, branch_node, wait, delay)).build()
}

fn slow_node(node: DeskNode) -> bool {
    node == DeskNode::Slow
}

fn desk<C: Checkpointer>(store: C, delay: Duration) -> App<Delayed<Desk>, C> {
    tea::Builder::new(Delayed::new(Desk, slow_node, Wait::Async, delay)).checkpointer(store).build()
}

/// Every one of the `n` spans started before any of them ended.
fn all_overlap(spans: &[(String, Instant, Instant)], n: usize) {
    assert_eq!(spans.len(), n, "{spans:?}");
    let last_start = spans.iter().map(|s| s.1).max().unwrap();
    let first_end = spans.iter().map(|s| s.2).min().unwrap();
    assert!(last_start < first_end, "a branch started only after another ended: they did not all run at once");
}

const EXPECTED_LOG: [&str; 10] = ["plan", "a", "b", "c", "d", "e", "f", "g", "h", "join:9"];

#[tokio::test]
async fn async_branches_of_a_fan_out_run_concurrently_and_merge_in_declared_order() {
    let app = fan(Wait::Async, Duration::from_millis(150));
    let out = app.invoke_async(Trip::default()).await.unwrap();
    assert_eq!(out.log, EXPECTED_LOG);
    all_overlap(&app.graph().spans(), 8);
}

// A current-thread runtime: had the sync nodes run on the runtime's one thread, they would have
// run one after another.
#[tokio::test(flavor = "current_thread")]
async fn sync_nodes_in_an_async_run_leave_the_runtime_free() {
    let app = fan(Wait::Blocking, Duration::from_millis(150));
    let ticks = Arc::new(AtomicU64::new(0));
    let ticker = {
        let ticks = Arc::clone(&ticks);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(10)).await;
                ticks.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    let out = app.invoke_async(Trip::default()).await.unwrap();
    ticker.abort();
    assert_eq!(out.log, EXPECTED_LOG);
    all_overlap(&app.graph().spans(), 8);
    // The runtime's thread kept running other tasks while the branches blocked.
    assert!(ticks.load(Ordering::SeqCst) >= 3, "the runtime's thread was blocked by sync nodes");
}

#[test]
fn the_blocking_api_refuses_an_async_node_by_name() {
    let app = fan(Wait::Async, Duration::from_millis(1));
    match app.invoke(Trip::default()) {
        Err(Error::NeedsAsync { graph, node }) => {
            assert_eq!(graph, "Fan");
            assert_eq!(node, "a");
        }
        other => panic!("expected NeedsAsync, got {other:?}"),
    }
}

#[test]
fn an_async_call_outside_a_runtime_is_a_typed_error() {
    let app = fan(Wait::Async, Duration::from_millis(1));
    let result = futures::executor::block_on(app.invoke_async(Trip::default()));
    assert!(matches!(result, Err(Error::NoRuntime { call: "invoke_async" })), "{result:?}");
}

#[tokio::test]
async fn a_panicking_async_node_fails_the_run_naming_it() {
    let mut graph = Delayed::new(Fan, branch_node, Wait::Async, Duration::from_millis(1));
    graph.panics = true;
    let app = tea::Builder::new(graph).build();
    match app.invoke_async(Trip::default()).await {
        Err(Error::NodePanicked { node, message }) => {
            assert_eq!(node, "a");
            assert_eq!(message, "the model went away");
        }
        other => panic!("expected NodePanicked, got {other:?}"),
    }
}

async fn pause_and_resume<C: Checkpointer>(store: C) {
    let app = desk(store, Duration::from_millis(5));
    let resume = app.invoke_async(Trip::default()).await.unwrap().interrupted().unwrap().1;
    assert_eq!(resume.interrupts()[0].value(), "where to?");
    // The token travels as a string, as between request handlers.
    let token: Resume<Trip> = resume.to_string().parse().unwrap();
    let out = app.resume_async(token.answer("Lisbon")).await.unwrap().done().unwrap();
    assert_eq!(out.answer, "Lisbon");
    assert_eq!(out.log, ["prepare", "ask", "slow", "finish"]);
    // Used once: the same token again is stale.
    let again = app.resume_async(resume.answer("Porto")).await;
    assert!(matches!(again, Err(Error::StaleResume { .. })), "{again:?}");
}

#[tokio::test]
async fn a_run_pauses_and_resumes_through_the_async_api_on_memory() {
    pause_and_resume(MemoryStore::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_pauses_and_resumes_through_the_async_api_on_sled() {
    let dir = std::env::temp_dir().join(format!("tea-async-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    pause_and_resume(SledStore::open(&dir).unwrap()).await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_dropped_resume_leaves_the_token_good() {
    let app = desk(MemoryStore::new(), Duration::from_secs(30));
    let resume = app.invoke_async(Trip::default()).await.unwrap().interrupted().unwrap().1;
    let thread = resume.thread().clone();
    // The resumed run reaches `slow`, which waits 30 s: the caller gives up after 100 ms.
    let cancelled = tokio::time::timeout(Duration::from_millis(100), app.resume_async(resume.clone().answer("Lisbon")));
    assert!(cancelled.await.is_err(), "the resume should still be waiting on `slow`");
    // The pause is back: the thread shows it, and the same token resumes it.
    let snapshot = app.state(&thread).unwrap().unwrap();
    assert_eq!(snapshot.interrupts.len(), 1);
    app.graph().delay_ms.store(1, Ordering::SeqCst);
    let out = app.resume_async(resume.answer("Lisbon")).await.unwrap().done().unwrap();
    assert_eq!(out.log, ["prepare", "ask", "slow", "finish"]);
}

#[test]
fn a_resume_that_fails_after_a_later_node_completed_keeps_that_node() {
    // `ask` (where the run paused) runs again on any resume; `slow` after it does not: once it
    // completed, a failure leaves the thread after it for `recover`, and the token is spent.
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let app =
            tea::Builder::new(Delayed::new(Desk, |n| n == DeskNode::Finish, Wait::Async, Duration::from_secs(30)))
                .checkpointer(MemoryStore::new())
                .build();
        let resume = app.invoke_async(Trip::default()).await.unwrap().interrupted().unwrap().1;
        let thread = resume.thread().clone();
        let cancelled =
            tokio::time::timeout(Duration::from_millis(100), app.resume_async(resume.clone().answer("Lisbon")));
        assert!(cancelled.await.is_err(), "the resume should still be waiting on `finish`");
        let snapshot = app.state(&thread).unwrap().unwrap();
        assert!(snapshot.interrupts.is_empty(), "the pause is not put back once `slow` completed");
        assert_eq!(snapshot.next, ["finish"]);
        assert!(matches!(app.resume_async(resume.answer("Lisbon")).await, Err(Error::StaleResume { .. })));
        app.graph().delay_ms.store(1, Ordering::SeqCst);
        let out = app.run_async(Call::recover(&thread)).await.unwrap().done().unwrap();
        assert_eq!(out.log, ["prepare", "ask", "slow", "finish"]);
    });
}

#[tokio::test]
async fn a_dropped_run_is_recovered_from_its_last_checkpoint() {
    let graph = Delayed::new(Fan, branch_node, Wait::Async, Duration::from_secs(30));
    let app = tea::Builder::new(graph).checkpointer(MemoryStore::new()).build();
    let run = app.run_async(Call::start(Trip::default()).on("trip-1"));
    // The branches wait 30 s: the caller gives up after 100 ms, dropping the run's future.
    assert!(tokio::time::timeout(Duration::from_millis(100), run).await.is_err());
    // The dropped run released its lease, so the thread can be recovered at once; `plan`,
    // checkpointed before the fan-out, does not run again.
    app.graph().delay_ms.store(1, Ordering::SeqCst);
    let out = app.run_async(Call::recover(ThreadId::from("trip-1"))).await.unwrap().done().unwrap();
    assert_eq!(out.log, EXPECTED_LOG);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_async_yields_what_stream_yields() {
    use futures::StreamExt;
    let app = fan(Wait::Blocking, Duration::from_millis(1));
    let blocking: Vec<String> =
        tokio::task::block_in_place(|| app.stream(Trip::default()).map(|e| describe(&e.unwrap())).collect());
    let events: Vec<String> = app.stream_async(Trip::default()).map(|e| describe(&e.unwrap())).collect().await;
    assert_eq!(events, blocking);
    assert_eq!(events.len(), 11, "{events:?}");
    assert_eq!(events.last().unwrap(), "done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_resume_async_ends_with_done() {
    use futures::StreamExt;
    let app = desk(MemoryStore::new(), Duration::from_millis(1));
    let events: Vec<String> = app.stream_async(Trip::default()).map(|e| describe(&e.unwrap())).collect().await;
    assert_eq!(events, ["prepare", "interrupted"]);
    let resume = app.invoke_async(Trip::default()).await.unwrap().interrupted().unwrap().1;
    let events: Vec<String> =
        app.run_stream_async(Call::resume(resume.answer("Lisbon"))).map(|e| describe(&e.unwrap())).collect().await;
    assert_eq!(events, ["ask", "slow", "finish", "done"]);
}

fn describe(event: &Event<Trip>) -> String {
    match event {
        Event::Step { node, .. } => node.to_string(),
        Event::Interrupted { .. } => "interrupted".into(),
        Event::Done(_) => "done".into(),
        other => format!("{other:?}"),
    }
}

/// The futures and streams of the async API are `Send`: they can be awaited in a spawned task or
/// an axum handler.
#[test]
fn the_async_api_is_send() {
    fn send<T: Send>(_: T) {}
    let store_less = fan(Wait::Async, Duration::ZERO);
    send(store_less.invoke_async(Trip::default()));
    send(store_less.stream_async(Trip::default()));
    let app = desk(MemoryStore::new(), Duration::ZERO);
    send(app.invoke_async(Trip::default()));
    send(app.run_async(Call::recover(ThreadId::from("t"))));
    send(app.stream_async(Trip::default()));
    let resume: Resume<Trip> = "x".parse().unwrap_or_else(|_| {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(app.invoke_async(Trip::default())).unwrap().interrupted().unwrap().1
    });
    send(app.resume_async(resume.clone()));
    send(app.run_stream_async(Call::resume(resume)));
}
