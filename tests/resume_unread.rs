//! A resume of a pause its app wrote, on a store that
//! [`resumes_without_read`](tea::Checkpointer::resumes_without_read): the app claims the thread
//! with [`append_over`](tea::Checkpointer::append_over) (the pause's bytes compared) instead of
//! reading the head first. Here on a `MemoryStore` that says it does, counting its calls: the
//! shared scenarios (`tests/store_scenarios`) all hold, and the reads it saves are counted.

#[macro_use]
mod store_scenarios;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use store_scenarios::{done, forward, paused, thread, Doc, StopBefore};
use tea::prelude::*;
use tea::{AppendOutcome, CheckpointId, Checkpointer};

/// A `MemoryStore` that resumes without a read, counting the engine's head reads and claims
/// over a remembered pause.
#[derive(Clone, Default)]
struct Unread {
    inner: MemoryStore,
    heads: Arc<AtomicUsize>,
    overs: Arc<AtomicUsize>,
    missed: Arc<AtomicUsize>,
}

impl Unread {
    fn new(_test: &str) -> Self {
        Unread::default()
    }

    fn store(&self) -> Unread {
        Unread::default()
    }

    fn counts(&self) -> (usize, usize, usize) {
        (self.heads.load(Ordering::SeqCst), self.overs.load(Ordering::SeqCst), self.missed.load(Ordering::SeqCst))
    }
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
    forward!(inner: get, history, range, threads, delete, prune, delete_at);

    /// The default's read of the head and append, on the inner store (its read not counted).
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
        let appended = self.inner.append_over(graph, thread, head, head_bytes, id, bytes, durable)?;
        if let AppendOutcome::Conflict { .. } = appended {
            self.missed.fetch_add(1, Ordering::SeqCst);
        }
        Ok(appended)
    }

    fn resumes_without_read(&self) -> bool {
        true
    }
}

store_tests!(Unread);

#[test]
fn a_resume_of_a_pause_the_app_wrote_reads_no_head() {
    let store = Unread::default();
    let app = StopBefore::builder().checkpointer(store.clone()).build();
    let t = thread("unread");
    let (_, resume) = paused(app.run(Call::start(Doc::default()).on(t.clone())));
    let before = store.counts();
    let out = done(app.resume(resume));
    assert_eq!(out.trail, ["a", "b", "c"]);
    let after = store.counts();
    assert_eq!(
        (after.0 - before.0, after.1 - before.1, after.2 - before.2),
        (0, 1, 0),
        "the resume read no head and claimed over the remembered pause"
    );
}

#[test]
fn another_app_reads_the_head_and_a_missed_claim_writes_nothing() {
    let store = Unread::default();
    let first = StopBefore::builder().checkpointer(store.clone()).build();
    let other = StopBefore::builder().checkpointer(store.clone()).build();

    // A token resumed by an app that did not write its pause: that app reads the head.
    let t = thread("replica");
    let (_, resume) = paused(first.run(Call::start(Doc::default()).on(t.clone())));
    let before = store.counts();
    done(other.resume(resume));
    let after = store.counts();
    assert_eq!((after.0 - before.0, after.1 - before.1), (1, 0), "the other app read the head, once");

    // The thread deleted and started again under its id by the other app: the first app's
    // remembered pause (same checkpoint id, other bytes) is refused by the claim, which writes
    // nothing, and the head the app then reads makes its old token stale.
    let t = thread("restarted");
    let (_, old) = paused(first.run(Call::start(Doc::default()).on(t.clone())));
    assert!(other.delete(&t).unwrap());
    let (_, new) = paused(other.run(Call::start(Doc { note: "second".into(), ..Doc::default() }).on(t.clone())));
    let head = other.state(&t).unwrap().unwrap().checkpoint;
    let before = store.counts();
    match first.resume(old) {
        Err(Error::StaleResume { thread }) => assert_eq!(thread, t),
        other => panic!("expected StaleResume, got {other:?}"),
    }
    let after = store.counts();
    assert_eq!(
        (after.0 - before.0, after.1 - before.1, after.2 - before.2),
        (1, 1, 1),
        "one claim over the remembered pause, missed; then one read of the head"
    );
    assert_eq!(other.state(&t).unwrap().unwrap().checkpoint, head, "the missed claim wrote nothing");
    let out = done(first.resume(new));
    assert_eq!(out.note, "second");
}

#[test]
fn sixty_four_resumes_of_one_remembered_token_have_one_winner() {
    let store = Unread::default();
    let app = StopBefore::builder().checkpointer(store.clone()).build();
    for round in 0..3 {
        let t = thread(&format!("race64-{round}"));
        let (_, resume) = paused(app.run(Call::start(Doc::default()).on(t.clone())));
        let barrier = std::sync::Barrier::new(64);
        let results: Vec<Result<Outcome<Doc>, Error>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..64)
                .map(|_| {
                    let (token, app, barrier) = (resume.clone(), &app, &barrier);
                    scope.spawn(move || {
                        barrier.wait();
                        app.resume(token)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let winners = results.iter().filter(|r| r.is_ok()).count();
        let stale = results.iter().filter(|r| matches!(r, Err(Error::StaleResume { .. }))).count();
        assert_eq!((winners, stale), (1, 63), "round {round}: {results:?}");
        assert_eq!(store_scenarios::runs(&t, "b"), 1, "round {round}: b ran once");
        assert_eq!(app.state(&t).unwrap().unwrap().state.trail, ["a", "b", "c"]);
    }
}

fn names(names: &[&str]) -> Vec<String> {
    names.iter().map(|name| (*name).to_owned()).collect()
}

/// The nodes a stream's steps name, and how it ended: its pause's token, or its final state.
fn streamed(stream: tea::Stream<'_, StopBefore>) -> (Vec<String>, Result<Outcome<Doc>, Error>) {
    let mut steps = Vec::new();
    for event in stream {
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

#[test]
fn a_streamed_resume_of_a_pause_the_app_wrote_reads_no_head() {
    let store = Unread::default();
    let app = StopBefore::builder().checkpointer(store.clone()).build();

    // Paused and resumed by streams: the stream remembers its pause, and its resume claims
    // over it with no read of the head.
    let t = thread("streamed");
    let (steps, paused_at) = streamed(app.run_stream(Call::start(Doc::default()).on(t.clone())));
    assert_eq!(steps, ["a"]);
    let (_, resume) = paused(paused_at);
    let before = store.counts();
    let (steps, out) = streamed(app.run_stream(Call::resume(resume)));
    let after = store.counts();
    assert_eq!((steps, done(out).trail), (names(&["b", "c"]), names(&["a", "b", "c"])));
    assert_eq!((after.0 - before.0, after.1 - before.1, after.2 - before.2), (0, 1, 0), "no head read");

    // Paused by `run`, resumed by a stream, and the other way round.
    let t = thread("mixed");
    let (_, resume) = paused(app.run(Call::start(Doc::default()).on(t.clone())));
    let before = store.counts();
    let (steps, out) = streamed(app.run_stream(Call::resume(resume)));
    assert_eq!((steps, done(out).trail), (names(&["b", "c"]), names(&["a", "b", "c"])));
    assert_eq!(store.counts().0 - before.0, 0, "a pause `run` wrote, resumed by a stream: no head read");
    let t = thread("mixed-back");
    let (_, paused_at) = streamed(app.run_stream(Call::start(Doc::default()).on(t.clone())));
    let before = store.counts();
    assert_eq!(done(app.resume(paused(paused_at).1)).trail, ["a", "b", "c"]);
    assert_eq!(store.counts().0 - before.0, 0, "a pause a stream wrote, resumed by `resume`: no head read");
}

#[test]
fn a_streamed_resume_whose_claim_misses_starts_again_from_the_head() {
    let store = Unread::default();
    let first = StopBefore::builder().checkpointer(store.clone()).build();
    let other = StopBefore::builder().checkpointer(store.clone()).build();
    // The thread deleted and started again by the other app under the same checkpoint id: the
    // first app's stream claims over its remembered pause, misses, writes nothing, yields
    // nothing of that attempt, and answers from the head it then reads: the old token is stale.
    let t = thread("stream-restarted");
    let (_, old) = paused(streamed(first.run_stream(Call::start(Doc::default()).on(t.clone()))).1);
    assert!(other.delete(&t).unwrap());
    let (_, new) = paused(other.run(Call::start(Doc { note: "second".into(), ..Doc::default() }).on(t.clone())));
    let head = other.state(&t).unwrap().unwrap().checkpoint;
    let before = store.counts();
    let events: Vec<Result<Event<Doc>, Error>> = first.run_stream(Call::resume(old)).collect();
    let after = store.counts();
    assert!(matches!(events.as_slice(), [Err(Error::StaleResume { .. })]), "one item, the read's answer: {events:?}");
    assert_eq!(
        (after.0 - before.0, after.1 - before.1, after.2 - before.2),
        (1, 1, 1),
        "one claim over the remembered pause, missed; then one read of the head"
    );
    assert_eq!(other.state(&t).unwrap().unwrap().checkpoint, head, "the missed claim wrote nothing");
    let (steps, out) = streamed(first.run_stream(Call::resume(new)));
    assert_eq!((steps, done(out).note), (names(&["b", "c"]), "second".to_owned()));
}

/// A stream of a remembered resume dropped before it is polled writes nothing; the token still
/// resumes (the head read, as nothing is remembered any more).
#[test]
fn a_streamed_resume_dropped_unpolled_writes_nothing() {
    let store = Unread::default();
    let app = StopBefore::builder().checkpointer(store.clone()).build();
    let t = thread("stream-dropped");
    let (_, resume) = paused(app.run(Call::start(Doc::default()).on(t.clone())));
    let head = app.state(&t).unwrap().unwrap().checkpoint;
    drop(app.run_stream(Call::resume(resume.clone())));
    assert_eq!(app.state(&t).unwrap().unwrap().checkpoint, head, "nothing written");
    assert_eq!(done(app.resume(resume)).trail, ["a", "b", "c"]);
    assert_eq!(store_scenarios::runs(&t, "b"), 1);
}

/// A blocking stream stays `Send` and `Sync` with the resume it may start again from (it holds
/// the app by reference, and the call).
#[test]
fn a_stream_is_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<tea::Stream<'static, StopBefore>>();
}
