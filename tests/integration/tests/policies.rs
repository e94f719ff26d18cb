//! What a graph declares of its nodes and runs besides their functions: retries (`retry`), time
//! limits (`timeout`), caches (`cache`), a run context (`context`), and what nodes emit to a
//! stream (`Ctx::emit`) with the stream modes a caller picks. On `MemoryStore` and `SledStore`,
//! through the blocking and the async API.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tea::prelude::*;
use tea::{RunOptions, StreamModes};

/// How many times each (tag, node) ran.
static RUNS: Mutex<Option<HashMap<(String, String), u32>>> = Mutex::new(None);

/// Counts a run of `node` under `tag`; returns which run this is (1 for the first).
fn count(tag: &str, node: &str) -> u32 {
    let mut runs = RUNS.lock().unwrap();
    let n = runs.get_or_insert_with(HashMap::new).entry((tag.to_owned(), node.to_owned())).or_insert(0);
    *n += 1;
    *n
}

fn runs(tag: &str, node: &str) -> u32 {
    RUNS.lock().unwrap().as_ref().and_then(|r| r.get(&(tag.to_owned(), node.to_owned())).copied()).unwrap_or(0)
}

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Separates the counters of tests running side by side.
    tag: String,
    /// How many runs of a flaky node fail before one succeeds.
    failures: u32,
    /// How long a slow node sleeps, in milliseconds, on its first run (later runs are quick).
    slow_ms: u64,
    query: String,
    #[reducer(append)]
    log: Vec<String>,
}

/// A `SledStore` in a directory of its own.
fn sled(name: &str) -> tea::SledStore {
    let dir = std::env::temp_dir().join(format!("tea-policies-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    tea::SledStore::open(&dir).unwrap()
}

macro_rules! tag_of_line {
    () => {
        &format!("line{}", line!())
    };
}

fn job(tag: &str) -> Job {
    Job { tag: tag.to_owned(), ..Job::default() }
}

// ---------------------------------------------------------------------------------------------
// Retries.

fn flaky(s: &Job) -> Result<JobUpdate, tea::BoxError> {
    let run = count(&s.tag, "flaky");
    if run <= s.failures {
        return Err(format!("flaky failed on run {run}").into());
    }
    Ok(Job::update().log(vec![format!("flaky ok on run {run}")]))
}

fn after(_: &Job) -> JobUpdate {
    Job::update().log(vec!["after".into()])
}

graph! {
    Retried for Job {
        start -> flaky;
        flaky -> after;
        after -> end;
        retry flaky(attempts = 3, backoff = 1ms, jitter = 0.0);
    }
}

#[test]
fn a_failing_node_is_retried_until_it_succeeds() {
    let app = Retried::builder().build();
    let out = app.invoke(Job { failures: 2, ..job("retry-ok") }).unwrap();
    assert_eq!(out.log, ["flaky ok on run 3", "after"]);
    assert_eq!(runs("retry-ok", "flaky"), 3);
}

#[test]
fn a_node_that_fails_every_attempt_fails_the_run() {
    let app = Retried::builder().build();
    let error = app.invoke(Job { failures: 5, ..job("retry-out") }).unwrap_err();
    assert!(matches!(&error, Error::NodeFailed { node, .. } if node == "flaky"), "{error:?}");
    assert_eq!(runs("retry-out", "flaky"), 3, "attempts = 3 counts the first run");
}

graph! {
    Stubborn for Job {
        start -> flaky;
        flaky -> after;
        after -> end;
        retry flaky(attempts = 1001, backoff = 0ms, jitter = 0.0);
    }
}

#[test]
fn a_node_that_always_fails_ends_on_the_step_limit_its_retries_count_against() {
    let app = Stubborn::builder().recursion_limit(20).build();
    let started = Instant::now();
    let error = app.invoke(Job { failures: u32::MAX, ..job("retry-forever") }).unwrap_err();
    assert!(matches!(error, Error::RecursionLimit { limit: 20 }), "{error:?}");
    assert_eq!(runs("retry-forever", "flaky"), 20, "each run, retries included, is one of the 20 steps");
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
}

#[test]
fn retries_are_steps_of_the_recursion_limit() {
    // `flaky` runs 3 times (2 retries), `after` once: 4 steps.
    let error = Retried::builder().recursion_limit(3).build().invoke(Job { failures: 2, ..job("retry-steps3") });
    assert!(matches!(error, Err(Error::RecursionLimit { limit: 3 })), "{error:?}");
    let out = Retried::builder().recursion_limit(4).build().invoke(Job { failures: 2, ..job("retry-steps4") }).unwrap();
    assert_eq!(out.log, ["flaky ok on run 3", "after"]);
}

#[test]
fn a_policy_asks_for_at_most_max_attempts_runs() {
    assert_eq!(tea::RetryPolicy::attempts(u32::MAX).attempts, tea::RetryPolicy::MAX_ATTEMPTS);
}

#[test]
fn retries_are_events_of_the_stream() {
    let app = Retried::builder().checkpointer(MemoryStore::new()).build();
    let events: Vec<_> = app.stream(Job { failures: 2, ..job("retry-events") }).map(Result::unwrap).collect();
    let seen: Vec<String> = events
        .iter()
        .map(|event| match event {
            Event::Retry { node, attempt, error, .. } => format!("retry {node} {attempt}: {error}"),
            Event::Step { node, .. } => format!("step {node}"),
            Event::Done(_) => "done".into(),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        seen,
        [
            "retry flaky 1: node `flaky` failed: flaky failed on run 1",
            "retry flaky 2: node `flaky` failed: flaky failed on run 2",
            "step flaky",
            "step after",
            "done"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_node_is_retried_under_the_async_api() {
    let app = Retried::builder().checkpointer(sled(tag_of_line!())).build();
    let out = app.invoke_async(Job { failures: 1, ..job("retry-async") }).await.unwrap().done().unwrap();
    assert_eq!(out.log, ["flaky ok on run 2", "after"]);
}

// A retried node inside a parallel branch.

fn left(s: &Job) -> Result<JobUpdate, tea::BoxError> {
    let run = count(&s.tag, "left");
    if run <= s.failures {
        return Err("left failed".into());
    }
    Ok(Job::update().log(vec!["left".into()]))
}
fn right(s: &Job) -> JobUpdate {
    count(&s.tag, "right");
    Job::update().log(vec!["right".into()])
}
fn split(_: &Job) {}
fn join(_: &Job) {}

graph! {
    Branches for Job {
        start -> split;
        parallel split => [left, right] -> join;
        join -> end;
        retry left(attempts = 4, backoff = 1ms);
    }
}

fn retried_in_a_branch<C: Checkpointer>(tag: &str, store: C) {
    let app = Branches::builder().checkpointer(store).build();
    let out = app.invoke(Job { failures: 3, ..job(tag) }).unwrap().done().unwrap();
    assert_eq!(out.log, ["left", "right"], "{tag}");
    assert_eq!((runs(tag, "left"), runs(tag, "right")), (4, 1), "{tag}");
}

#[test]
fn a_retried_node_inside_a_parallel_branch() {
    retried_in_a_branch("branch-memory", MemoryStore::new());
    retried_in_a_branch("branch-sled", sled("branch"));
}

#[test]
fn retries_in_a_branch_are_steps_of_the_recursion_limit() {
    // `split`, `left` and `right`, `join`: 4 steps without a retry; `left`'s 3 retries make 7.
    let limited = |limit: usize, tag: &str| {
        let app = Branches::builder().checkpointer(MemoryStore::new()).recursion_limit(limit).build();
        app.invoke(Job { failures: 3, ..job(tag) })
    };
    let error = limited(6, "branch-steps6");
    assert!(matches!(error, Err(Error::RecursionLimit { limit: 6 })), "{error:?}");
    let out = limited(7, "branch-steps7").unwrap().done().unwrap();
    assert_eq!(out.log, ["left", "right"]);
}

// A node that pauses is never retried into a second pause.

fn ask(s: &Job, hitl: &mut Hitl) -> Result<JobUpdate, tea::BoxError> {
    count(&s.tag, "ask");
    let answer: String = hitl.interrupt("name?")?;
    Ok(Job::update().log(vec![answer]))
}

graph! {
    Asks for Job {
        start -> ask;
        ask -> end;
        interruptible ask;
        retry ask(attempts = 5, backoff = 1ms);
    }
}

#[test]
fn a_pause_is_not_retried() {
    let app = Asks::builder().checkpointer(MemoryStore::new()).build();
    let (_, resume) = app.invoke(job("pause")).unwrap().interrupted().unwrap();
    assert_eq!(runs("pause", "ask"), 1, "the pause is the node's answer, not a failure");
    let out = app.resume(resume.answer("Ada")).unwrap().done().unwrap();
    assert_eq!(out.log, ["Ada"]);
    assert_eq!(runs("pause", "ask"), 2);
}

// ---------------------------------------------------------------------------------------------
// Timeouts.

fn slow(s: &Job) -> JobUpdate {
    if count(&s.tag, "slow") == 1 {
        std::thread::sleep(Duration::from_millis(s.slow_ms));
    }
    Job::update().log(vec!["slow".into()])
}

graph! {
    Limited for Job {
        start -> slow;
        slow -> end;
        timeout slow(100ms);
    }
}

graph! {
    LimitedRetried for Job {
        start -> slow;
        slow -> end;
        timeout slow(100ms);
        retry slow(attempts = 2, backoff = 1ms, on = timeouts);
    }
}

#[test]
fn a_node_over_its_time_limit_fails_at_the_limit() {
    let app = Limited::builder().build();
    let started = Instant::now();
    let error = app.invoke(Job { slow_ms: 3_000, ..job("timeout") }).unwrap_err();
    assert!(
        matches!(&error, Error::NodeTimedOut { node, after } if node == "slow" && *after == Duration::from_millis(100)),
        "{error:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2), "the run waited for the node: {:?}", started.elapsed());
    assert_eq!(error.to_string(), "node `slow` timed out after 100 ms");
}

#[test]
fn a_timed_out_node_is_retried_if_its_policy_says_so() {
    let app = LimitedRetried::builder().build();
    let out = app.invoke(Job { slow_ms: 3_000, ..job("timeout-retry") }).unwrap();
    assert_eq!(out.log, ["slow"]);
    assert_eq!(runs("timeout-retry", "slow"), 2);
}

async fn slow_async(s: &Job) -> JobUpdate {
    count(&s.tag, "slow_async");
    tokio::time::sleep(Duration::from_millis(s.slow_ms)).await;
    ASYNC_FINISHED.store(true, Ordering::SeqCst);
    Job::update().log(vec!["slow".into()])
}

static ASYNC_FINISHED: AtomicBool = AtomicBool::new(false);

graph! {
    LimitedAsync for Job {
        start -> slow_async;
        slow_async -> end;
        async slow_async;
        timeout slow_async(50ms);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_node_over_its_limit_is_cancelled() {
    let app = LimitedAsync::builder().build();
    let error = app.invoke_async(Job { slow_ms: 400, ..job("timeout-async") }).await.unwrap_err();
    assert!(matches!(error, Error::NodeTimedOut { .. }), "{error:?}");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(!ASYNC_FINISHED.load(Ordering::SeqCst), "the node's future was dropped at the limit");
}

// A timed-out branch whose siblings finish: recover runs only the branch that timed out.

fn quick(s: &Job) -> JobUpdate {
    count(&s.tag, "quick");
    Job::update().log(vec!["quick".into()])
}

graph! {
    SlowBranch for Job {
        start -> split;
        parallel split => [slow, quick] -> join;
        join -> end;
        timeout slow(100ms);
    }
}

fn timed_out_branch<C: Checkpointer>(tag: &str, store: C) {
    let app = SlowBranch::builder().checkpointer(store).build();
    let thread = ThreadId::from(tag);
    let error = app.run(Call::start(Job { slow_ms: 2_000, ..job(tag) }).on(thread.clone())).unwrap_err();
    assert!(matches!(error, Error::NodeTimedOut { .. }), "{error:?}");
    assert_eq!(runs(tag, "quick"), 1, "{tag}: the sibling finished");
    let out = app.run(Call::recover(&thread)).unwrap().done().unwrap();
    assert_eq!(out.log, ["slow", "quick"]);
    assert_eq!((runs(tag, "slow"), runs(tag, "quick")), (2, 1), "{tag}: only the timed-out branch ran again");
}

#[test]
fn a_timed_out_branch_whose_siblings_finish() {
    timed_out_branch("slow-branch-memory", MemoryStore::new());
    timed_out_branch("slow-branch-sled", sled(tag_of_line!()));
}

// ---------------------------------------------------------------------------------------------
// Caching.

fn lookup(s: &Job) -> JobUpdate {
    count(&s.tag, "lookup");
    Job::update().log(vec![format!("looked up {}", s.query)])
}

graph! {
    Cached for Job {
        start -> lookup;
        lookup -> end;
        cache lookup(reads = [tag, query]);
    }
}

graph! {
    Expiring for Job {
        start -> lookup;
        lookup -> end;
        cache lookup(ttl = 100ms, reads = [tag, query]);
    }
}

graph! {
    StoreCached for Job {
        start -> lookup;
        lookup -> end;
        cache lookup(reads = [tag, query], store);
    }
}

#[test]
fn a_cached_node_is_skipped_on_a_second_run() {
    let app = Cached::builder().build();
    let input = Job { query: "tea".into(), ..job("cache") };
    assert_eq!(app.invoke(input.clone()).unwrap().log, ["looked up tea"]);
    assert_eq!(app.invoke(input.clone()).unwrap().log, ["looked up tea"]);
    assert_eq!(runs("cache", "lookup"), 1);
    // Another input is another key; a field the key does not read does not matter.
    assert_eq!(app.invoke(Job { query: "coffee".into(), ..input.clone() }).unwrap().log, ["looked up coffee"]);
    assert_eq!(app.invoke(Job { failures: 9, ..input.clone() }).unwrap().log, ["looked up tea"]);
    assert_eq!(runs("cache", "lookup"), 2);
    // A hit is an event of the stream.
    let events: Vec<_> = app.stream(input).map(Result::unwrap).collect();
    assert!(matches!(&events[0], Event::CacheHit { node, branch: None } if node == "lookup"), "{events:?}");
    assert!(matches!(&events[1], Event::Step { .. }));
}

#[test]
fn a_cached_result_expires_after_its_ttl() {
    let app = Expiring::builder().build();
    let input = Job { query: "tea".into(), ..job("cache-ttl") };
    app.invoke(input.clone()).unwrap();
    app.invoke(input.clone()).unwrap();
    assert_eq!(runs("cache-ttl", "lookup"), 1);
    std::thread::sleep(Duration::from_millis(150));
    app.invoke(input).unwrap();
    assert_eq!(runs("cache-ttl", "lookup"), 2);
}

#[test]
fn a_result_cached_in_the_store_outlives_its_app() {
    let dir = std::env::temp_dir().join(format!("tea-cache-{}", std::process::id()));
    let input = Job { query: "tea".into(), ..job("cache-store") };
    {
        let app = StoreCached::builder().checkpointer(tea::SledStore::open(&dir).unwrap()).build();
        assert_eq!(app.invoke(input.clone()).unwrap().done().unwrap().log, ["looked up tea"]);
    }
    let app = StoreCached::builder().checkpointer(tea::SledStore::open(&dir).unwrap()).build();
    assert_eq!(app.invoke(input).unwrap().done().unwrap().log, ["looked up tea"]);
    assert_eq!(runs("cache-store", "lookup"), 1, "the second app took the first one's result");
    drop(app);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_node_is_skipped_under_the_async_api() {
    let app = StoreCached::builder().checkpointer(MemoryStore::new()).build();
    let input = Job { query: "tea".into(), ..job("cache-async") };
    app.invoke_async(input.clone()).await.unwrap();
    app.invoke_async(input).await.unwrap();
    assert_eq!(runs("cache-async", "lookup"), 1);
}

// ---------------------------------------------------------------------------------------------
// Run context.

pub struct Settings {
    model: &'static str,
}

fn answer(_: &Job, ctx: &Ctx<Job>) -> Result<JobUpdate, tea::BoxError> {
    let settings = ctx.context::<Settings>()?;
    Ok(Job::update().log(vec![format!("asked {}", settings.model)]))
}

graph! {
    WithContext for Job {
        context Settings;
        start -> answer;
        answer -> end;
        interrupt_before answer;
    }
}

#[test]
fn the_run_context_reaches_nodes_and_is_given_again_on_resume() {
    let app = WithContext::builder().checkpointer(MemoryStore::new()).build();
    let error = app.invoke(job("context")).unwrap_err();
    assert!(matches!(&error, Error::MissingContext { expected, found: None, .. } if expected.ends_with("Settings")));
    let small = app.with_context(Settings { model: "small" });
    let (_, resume) = small.invoke(job("context")).unwrap().interrupted().unwrap();
    // Never checkpointed: a resume without it is refused before it runs anything...
    let error = app.resume(resume.clone()).unwrap_err();
    assert!(matches!(error, Error::MissingContext { .. }), "{error:?}");
    // ...and the token stays good for a resume that gives it.
    let out = app.with_context(Settings { model: "large" }).resume(resume).unwrap().done().unwrap();
    assert_eq!(out.log, ["asked large"]);
    // A context of another type is refused too.
    let error = app.with_context(42_u32).invoke(job("context")).unwrap_err();
    assert!(matches!(error, Error::MissingContext { found: Some("u32"), .. }), "{error:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_context_under_the_async_api() {
    let app = WithContext::builder().checkpointer(sled(tag_of_line!())).build();
    let app = app.with_context(Settings { model: "small" });
    let (_, resume) = app.invoke_async(job("context-async")).await.unwrap().interrupted().unwrap();
    let out = app.resume_async(resume).await.unwrap().done().unwrap();
    assert_eq!(out.log, ["asked small"]);
}

// ---------------------------------------------------------------------------------------------
// Custom events and stream modes.

fn speak(_: &Job, ctx: &Ctx<Job>) -> JobUpdate {
    for token in ["Hel", "lo"] {
        ctx.emit(token);
    }
    Job::update().log(vec!["spoke".into()])
}

fn echo(_: &Job, ctx: &Ctx<Job>) -> JobUpdate {
    ctx.emit(serde_json::json!({ "from": ctx.branch().map(|b| b.to_string()) }));
    Job::update().log(vec![ctx.node().to_string()])
}

graph! {
    Speaker for Job {
        start -> speak;
        speak -> split;
        parallel split => [echo, quick] -> join;
        join -> end;
    }
}

fn describe(event: &Event<Job>) -> String {
    match event {
        Event::Custom { node, value } => format!("custom {node} {value}"),
        Event::Step { node, branch: Some(b), .. } => format!("step {node}@{b}"),
        Event::Step { node, .. } => format!("step {node}"),
        Event::Update { node, update, .. } => format!("update {node} {:?}", update.as_ref().map(|_| "…")),
        Event::Started { node, step, .. } => format!("started {node} {step}"),
        Event::Done(_) => "done".into(),
        other => format!("{other:?}"),
    }
}

#[test]
fn custom_events_come_in_order_with_the_steps() {
    let app = Speaker::builder().checkpointer(MemoryStore::new()).build();
    let seen: Vec<String> = app.stream(job("custom")).map(|e| describe(&e.unwrap())).collect();
    assert_eq!(
        seen,
        [
            "custom speak \"Hel\"",
            "custom speak \"lo\"",
            "step speak",
            "step split",
            "custom echo {\"from\":\"echo\"}",
            "step echo@echo",
            "step quick@quick",
            "step join",
            "done"
        ]
    );
    // Outside a stream, emits go nowhere.
    assert_eq!(app.invoke(job("custom")).unwrap().done().unwrap().log, ["spoke", "echo", "quick"]);
}

#[test]
fn stream_modes_pick_the_events() {
    let app = Speaker::builder().checkpointer(MemoryStore::new()).build();
    let modes = RunOptions::new().stream_modes(StreamModes::UPDATES);
    let seen: Vec<String> = app
        .run_stream(Call::start(job("modes")).on("modes-updates").options(modes))
        .map(|e| describe(&e.unwrap()))
        .collect();
    assert_eq!(
        seen,
        [
            "update speak Some(\"…\")",
            "update split None",
            "update echo Some(\"…\")",
            "update quick Some(\"…\")",
            "update join None",
            "done"
        ]
    );
    let modes = RunOptions::new().stream_modes(StreamModes::DEBUG | StreamModes::VALUES);
    let seen: Vec<String> = app
        .run_stream(Call::start(job("modes")).on("modes-debug").options(modes))
        .map(|e| describe(&e.unwrap()))
        .collect();
    assert_eq!(&seen[..4], ["started speak 1", "step speak", "started split 2", "step split"]);
}

/// A node that emits, then waits until the test has seen what it emitted.
async fn stream_tokens(_: &Job, ctx: &Ctx<Job>) -> JobUpdate {
    ctx.emit("first");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !SEEN_FIRST.load(Ordering::SeqCst) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Job::update().log(vec![format!("seen before the end: {}", SEEN_FIRST.load(Ordering::SeqCst))])
}

static SEEN_FIRST: AtomicBool = AtomicBool::new(false);

graph! {
    Tokens for Job {
        start -> stream_tokens;
        stream_tokens -> end;
        async stream_tokens;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_async_stream_yields_custom_events_while_the_node_runs() {
    use futures::StreamExt;
    let app = Tokens::builder().build();
    let mut events = std::pin::pin!(app.stream_async(job("live")));
    let first = events.next().await.unwrap().unwrap();
    assert!(matches!(&first, Event::Custom { value, .. } if value == "first"), "{first:?}");
    SEEN_FIRST.store(true, Ordering::SeqCst);
    let mut last = None;
    while let Some(event) = events.next().await {
        last = Some(event.unwrap());
    }
    match last {
        Some(Event::Done(state)) => assert_eq!(state.log, ["seen before the end: true"]),
        other => panic!("{other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Policies under stress: damaged cache entries, many runs caching one key at once, a retry
// budget of u32::MAX, a process killed while a retry waits.

/// The store's graph under which `StoreCached`'s results are kept.
const STORE_CACHE: &str = "tea:cache:StoreCached";

fn damaged_entry_is_a_miss<C: Checkpointer>(tag: &str, store: std::sync::Arc<C>) {
    let app = StoreCached::builder().checkpointer(std::sync::Arc::clone(&store)).build();
    let input = Job { query: "tea".into(), ..job(tag) };
    app.invoke(input.clone()).unwrap();
    let threads = store.threads(STORE_CACHE).unwrap();
    assert_eq!(threads.len(), 1, "{tag}: one cached result: {threads:?}");
    for damage in [&b"\xff\x00not json"[..], b"{\"input\": 1}", b"[]", b""] {
        let (head, _) = store.head(STORE_CACHE, &threads[0]).unwrap().unwrap();
        store.append(STORE_CACHE, &threads[0], Some(head), head + 1, damage, true).unwrap();
        let before = runs(tag, "lookup");
        assert_eq!(app.invoke(input.clone()).unwrap().done().unwrap().log, ["looked up tea"], "{tag}");
        assert_eq!(runs(tag, "lookup"), before + 1, "{tag}: a damaged entry {damage:?} is a miss: the node ran");
        // The node's fresh result replaced it: the next run takes it.
        app.invoke(input.clone()).unwrap();
        assert_eq!(runs(tag, "lookup"), before + 1, "{tag}: the result kept after {damage:?} is used");
    }
}

#[test]
fn a_damaged_cache_entry_is_a_miss_and_is_replaced() {
    damaged_entry_is_a_miss("cache-damaged-memory", std::sync::Arc::new(MemoryStore::new()));
    damaged_entry_is_a_miss("cache-damaged-sled", std::sync::Arc::new(sled(tag_of_line!())));
}

#[test]
fn many_runs_caching_one_key_at_once_all_succeed_and_agree() {
    let store = std::sync::Arc::new(sled(tag_of_line!()));
    let app = StoreCached::builder().checkpointer(std::sync::Arc::clone(&store)).build();
    let input = Job { query: "tea".into(), ..job("cache-race") };
    std::thread::scope(|scope| {
        let runs: Vec<_> = (0..32).map(|_| scope.spawn(|| app.invoke(input.clone()))).collect();
        for run in runs {
            assert_eq!(run.join().unwrap().unwrap().done().unwrap().log, ["looked up tea"]);
        }
    });
    let ran = runs("cache-race", "lookup");
    assert!((1..=32).contains(&ran), "{ran}");
    // Whoever won, one entry is kept, readable, and taken by the next run.
    assert_eq!(store.threads(STORE_CACHE).unwrap().len(), 1);
    app.invoke(input).unwrap();
    assert_eq!(runs("cache-race", "lookup"), ran, "the next run hit the cache");
}

graph! {
    RetriedForever for Job {
        start -> flaky;
        flaky -> after;
        after -> end;
        retry flaky(attempts = 1001, backoff = 1ms, max_backoff = 1ms, factor = 1000.0, jitter = 1.0);
    }
}

#[test]
fn the_largest_retry_budget_retries_until_the_node_succeeds() {
    let app = RetriedForever::builder().build();
    let out = app.invoke(Job { failures: 200, ..job("retry-max") }).unwrap();
    assert_eq!(out.log, ["flaky ok on run 201", "after"]);
    assert_eq!(runs("retry-max", "flaky"), 201);
}

// A process killed while a retry waits: `recover` (here, in the test's own process) runs the
// failing node again and never the one before it.

const KILL_ROLE: &str = "TEA_POLICIES_ROLE";
const KILL_DIR: &str = "TEA_POLICIES_DIR";
const KILL_TEST: &str = "a_process_killed_while_a_retry_waits_is_recovered";

/// Appends `line` to the log file at `path` (the state's `query`): it survives a kill.
fn log_line(path: &str, line: &str) -> usize {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
    writeln!(file, "{line}").unwrap();
    file.sync_all().unwrap();
    logged(path).iter().filter(|l| *l == line).count()
}

fn logged(path: &str) -> Vec<String> {
    std::fs::read_to_string(path).map(|s| s.lines().map(str::to_owned).collect()).unwrap_or_default()
}

fn prepare(s: &Job) -> JobUpdate {
    log_line(&s.query, "prepare");
    Job::update().log(vec!["prepared".into()])
}

fn fragile(s: &Job) -> Result<JobUpdate, tea::BoxError> {
    if log_line(&s.query, "fragile") == 1 {
        return Err("the first run fails".into());
    }
    Ok(Job::update().log(vec!["fragile ok".into()]))
}

graph! {
    KilledInRetry for Job {
        start -> prepare;
        prepare -> fragile;
        fragile -> end;
        retry fragile(attempts = 3, backoff = 60s, jitter = 0.0);
    }
}

fn killed_in_retry_app(dir: &std::path::Path) -> App<KilledInRetry, tea::SledStore> {
    KilledInRetry::builder()
        .checkpointer(tea::SledStore::open(dir.join("db")).unwrap())
        .durability(Durability::EveryStep)
        .lease(Duration::from_millis(300))
        .build()
}

#[test]
fn a_process_killed_while_a_retry_waits_is_recovered() {
    if let Ok(role) = std::env::var(KILL_ROLE) {
        // The process to be killed: it runs until the failed node's backoff, then is killed.
        assert_eq!(role, "wait-in-retry");
        let dir = std::path::PathBuf::from(std::env::var(KILL_DIR).unwrap());
        let log = dir.join("nodes.log").to_string_lossy().into_owned();
        let outcome = killed_in_retry_app(&dir).run(Call::start(Job { query: log, ..job("killed") }).on("killed"));
        panic!("the run should have been killed in its retry's wait: {outcome:?}");
    }
    let dir = std::env::temp_dir().join(format!("tea-policies-killed-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("nodes.log").to_string_lossy().into_owned();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([KILL_TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(KILL_ROLE, "wait-in-retry")
        .env(KILL_DIR, &dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !logged(&log).contains(&"fragile".to_owned()) {
        assert!(started.elapsed() < Duration::from_secs(60), "the child never ran `fragile`");
        assert!(child.try_wait().unwrap().is_none(), "the child ended before its retry's wait");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200)); // well inside the 60 s backoff
    child.kill().unwrap();
    child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(400)); // the killed run's lease lapses
    let app = killed_in_retry_app(&dir);
    let out = app.run(Call::recover(ThreadId::from("killed"))).unwrap().done().unwrap();
    assert_eq!(out.log, ["prepared", "fragile ok"]);
    assert_eq!(logged(&log), ["prepare", "fragile", "fragile"], "`prepare` ran once; `fragile` again after recover");
    drop(app);
    let _ = std::fs::remove_dir_all(&dir);
}
