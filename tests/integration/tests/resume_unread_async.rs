//! A resume of a pause its app wrote, without a read of the head, on the async API
//! (`resume_async`, and `run_stream_async`, which `tea serve` runs every run with): on a `MemoryStore` that says it resumes without a read (its calls counted),
//! and on `PostgresStore` (skipped, saying so, without a server). The blocking API's are in the
//! root crate's `tests/resume_unread.rs` and the shared store scenarios.

#[path = "../../store_forward/mod.rs"]
mod store_forward;
use store_forward::forward;

#[cfg(feature = "postgres")]
#[path = "../../postgres_support/mod.rs"]
mod postgres_support;

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tea::prelude::*;
use tea::{AppendOutcome, CheckpointId, Checkpointer};

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Doc {
    #[reducer(append)]
    trail: Vec<String>,
    note: String,
}

fn visit(ctx: &Ctx<Doc>) -> DocUpdate {
    Doc::update().trail(vec![ctx.node().to_string()])
}
fn a(_: &Doc, ctx: &Ctx<Doc>) -> DocUpdate {
    visit(ctx)
}
fn b(_: &Doc, ctx: &Ctx<Doc>) -> DocUpdate {
    visit(ctx)
}

graph! {
    pub Review for Doc {
        start -> a; a -> b; b -> end;
        interrupt_before b;
    }
}

/// A `MemoryStore` that resumes without a read, counting the engine's head reads and its claims
/// over a remembered pause.
#[derive(Clone, Default)]
struct Unread {
    inner: MemoryStore,
    heads: Arc<AtomicUsize>,
    overs: Arc<AtomicUsize>,
}

impl Checkpointer for Unread {
    fn append(
        &self,
        graph: &str,
        thread: &ThreadId,
        expected: Option<CheckpointId>,
        id: CheckpointId,
        bytes: &[u8],
        durable: bool,
    ) -> Result<AppendOutcome, Error> {
        self.inner.append(graph, thread, expected, id, bytes, durable)
    }
    fn head(&self, graph: &str, thread: &ThreadId) -> Result<Option<(CheckpointId, Vec<u8>)>, Error> {
        self.heads.fetch_add(1, Ordering::SeqCst);
        self.inner.head(graph, thread)
    }
    forward!(inner: get, history, threads, delete, prune);
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
        self.overs.fetch_add(1, Ordering::SeqCst);
        self.inner.append_over(graph, thread, head, head_bytes, id, bytes, durable)
    }
    fn resumes_without_read(&self) -> bool {
        true
    }
}

fn paused(outcome: Result<Outcome<Doc>, Error>) -> Resume<Doc> {
    match outcome {
        Ok(Outcome::Interrupted { resume, .. }) => resume,
        other => panic!("expected a pause, got {other:?}"),
    }
}

/// The nodes a stream's steps name, and how it ended (its pause or its final state).
async fn streamed(
    stream: impl futures::Stream<Item = Result<Event<Doc>, Error>>,
) -> (Vec<String>, Result<Outcome<Doc>, Error>) {
    use futures::StreamExt;
    let mut stream = std::pin::pin!(stream);
    let mut steps = Vec::new();
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Step { node, .. }) => steps.push(node.to_string()),
            Ok(Event::Interrupted { state, resume }) => return (steps, Ok(Outcome::Interrupted { state, resume })),
            Ok(Event::Done(state)) => return (steps, Ok(Outcome::Done(state))),
            Ok(_) => {}
            Err(error) => return (steps, Err(error)),
        }
    }
    panic!("the stream ended without its pause, end or error (steps {steps:?})")
}

fn done(outcome: Result<Outcome<Doc>, Error>) -> Doc {
    match outcome {
        Ok(Outcome::Done(state)) => state,
        other => panic!("expected the end, got {other:?}"),
    }
}

/// Pauses a thread from `first`, deletes it and starts it again from `other` (the same
/// checkpoint id, other bytes), then resumes the first pause's token from `first`: refused,
/// nothing written; the new token resumes from `first`.
async fn restarted_thread<C: Checkpointer + Clone>(store: C) {
    let first = Review::builder().checkpointer(store.clone()).build();
    let other = Review::builder().checkpointer(store).build();
    let t = ThreadId::random();
    let old = paused(first.run_async(Call::start(Doc::default()).on(t.clone())).await);
    let id = first.state_async(&t).await.unwrap().unwrap().checkpoint;
    assert!(other.delete(&t).unwrap());
    let new = paused(other.run_async(Call::start(Doc { note: "second".into(), ..Doc::default() }).on(t.clone())).await);
    assert_eq!(other.state_async(&t).await.unwrap().unwrap().checkpoint, id, "the same checkpoint id again");
    match first.resume_async(old).await {
        Err(Error::StaleResume { thread }) => assert_eq!(thread, t),
        other => panic!("expected StaleResume, got {other:?}"),
    }
    assert_eq!(other.state_async(&t).await.unwrap().unwrap().checkpoint, id, "the refused resume wrote nothing");
    let out = done(first.resume_async(new).await);
    assert_eq!((out.trail, out.note), (vec!["a".to_owned(), "b".to_owned()], "second".to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_resume_of_a_pause_the_app_wrote_reads_no_head() {
    let store = Unread::default();
    let app = Review::builder().checkpointer(store.clone()).build();
    let resume = paused(app.invoke_async(Doc::default()).await);
    let (heads, overs) = (store.heads.load(Ordering::SeqCst), store.overs.load(Ordering::SeqCst));
    let out = done(app.resume_async(resume).await);
    assert_eq!(out.trail, ["a", "b"]);
    assert_eq!(
        (store.heads.load(Ordering::SeqCst) - heads, store.overs.load(Ordering::SeqCst) - overs),
        (0, 1),
        "no head read; one claim over the remembered pause"
    );
}

/// The same, paused and resumed by `run_stream_async`: the stream remembers its pause; the
/// resume's claim (made before the stream yields anything) misses, and the stream answers from
/// the head it reads, yielding nothing of the missed attempt.
async fn restarted_thread_streamed<C: Checkpointer + Clone>(store: C) {
    let first = Review::builder().checkpointer(store.clone()).build();
    let other = Review::builder().checkpointer(store).build();
    let t = ThreadId::random();
    let (steps, old) = streamed(first.run_stream_async(Call::start(Doc::default()).on(t.clone()))).await;
    assert_eq!(steps, ["a"]);
    let old = paused(old);
    let id = first.state_async(&t).await.unwrap().unwrap().checkpoint;
    assert!(other.delete(&t).unwrap());
    let new = paused(other.run_async(Call::start(Doc { note: "second".into(), ..Doc::default() }).on(t.clone())).await);
    let events: Vec<Result<Event<Doc>, Error>> =
        futures::StreamExt::collect(first.run_stream_async(Call::resume(old))).await;
    assert!(matches!(events.as_slice(), [Err(Error::StaleResume { .. })]), "the read's answer alone: {events:?}");
    assert_eq!(other.state_async(&t).await.unwrap().unwrap().checkpoint, id, "the refused resume wrote nothing");
    let (steps, out) = streamed(first.run_stream_async(Call::resume(new))).await;
    assert_eq!((steps, done(out).note), (vec!["b".to_owned()], "second".to_owned()));
    // Paused by a stream, resumed by a stream, from the app that paused.
    let (_, paused_at) = streamed(first.run_stream_async(Call::start(Doc::default()))).await;
    let (steps, out) = streamed(first.run_stream_async(Call::resume(paused(paused_at)))).await;
    assert_eq!((steps, done(out).trail), (vec!["b".to_owned()], vec!["a".to_owned(), "b".to_owned()]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_async_resume_of_a_pause_the_app_wrote_reads_no_head() {
    let store = Unread::default();
    let app = Review::builder().checkpointer(store.clone()).build();
    let (_, paused_at) = streamed(app.run_stream_async(Call::start(Doc::default()))).await;
    let (heads, overs) = (store.heads.load(Ordering::SeqCst), store.overs.load(Ordering::SeqCst));
    let (steps, out) = streamed(app.run_stream_async(Call::resume(paused(paused_at)))).await;
    assert_eq!((steps, done(out).trail), (vec!["b".to_owned()], vec!["a".to_owned(), "b".to_owned()]));
    assert_eq!(
        (store.heads.load(Ordering::SeqCst) - heads, store.overs.load(Ordering::SeqCst) - overs),
        (0, 1),
        "no head read; one claim over the remembered pause"
    );
    restarted_thread_streamed(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_resume_of_a_restarted_thread_is_refused_on_a_memory_store() {
    restarted_thread(Unread::default()).await;
}

#[cfg(feature = "postgres")]
#[test]
fn an_async_resume_of_a_restarted_thread_is_refused_on_postgres() {
    let Some(schema) = postgres_support::TestSchema::new("resume_unread_async") else { return };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let store = schema.store();
        assert!(store.resumes_without_read());
        restarted_thread(store.clone()).await;
        restarted_thread_streamed(store.clone()).await;
        // And the plain cycle, from the app that paused.
        let app = Review::builder().checkpointer(store).build();
        let resume = paused(app.invoke_async(Doc::default()).await);
        assert_eq!(done(app.resume_async(resume).await).trail, ["a", "b"]);
    });
}

/// 64 tasks resume one token from the app that paused (and remembers) it, on PostgreSQL:
/// exactly one goes on.
#[cfg(feature = "postgres")]
#[test]
fn sixty_four_async_resumes_of_one_remembered_token_have_one_winner_on_postgres() {
    let Some(schema) = postgres_support::TestSchema::new("resume_unread_64") else { return };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let app = Arc::new(Review::builder().checkpointer(schema.store()).build());
        let resume = paused(app.invoke_async(Doc::default()).await);
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let (app, token) = (Arc::clone(&app), resume.clone());
                tokio::spawn(async move { app.resume_async(token).await })
            })
            .collect();
        let mut results = Vec::new();
        for task in tasks {
            results.push(task.await.unwrap());
        }
        let winners: Vec<&Doc> = results.iter().filter_map(|r| r.as_ref().ok()).map(Outcome::state).collect();
        let stale = results.iter().filter(|r| matches!(r, Err(Error::StaleResume { .. }))).count();
        assert_eq!((winners.len(), stale), (1, 63), "{results:?}");
        assert_eq!(winners[0].trail, ["a", "b"]);
    });
}
