//! Retention on every store — memory, sled, dir, PostgreSQL, and each through `Sealed`: a
//! finished thread expires once its time passes on a manual clock, a paused thread is kept (and
//! reported) unless paused expiry was asked, `keep_last` prunes, a thread's own retention holds
//! after the store is opened again, and a sweep never deletes a thread that moved on.
//!
//! PostgreSQL (feature `postgres`) is skipped, saying why, without a server and without
//! `TEA_TEST_POSTGRES_URL`.

#[cfg(feature = "postgres")]
#[path = "../../postgres_support/mod.rs"]
mod postgres_support;

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::{Duration, SystemTime};
use tea::prelude::*;
use tea::{Clock, KeptBecause, KeyRing, Rest, Retention, Sealed};

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Doc {
    #[reducer(append)]
    trail: Vec<String>,
}

fn draft(_: &Doc) -> DocUpdate {
    Doc::update().trail(vec!["draft".to_owned()])
}

fn edit(_: &Doc) -> DocUpdate {
    Doc::update().trail(vec!["edit".to_owned()])
}

fn publish(_: &Doc) -> DocUpdate {
    Doc::update().trail(vec!["publish".to_owned()])
}

graph! {
    Review for Doc {
        start -> draft; draft -> edit; edit -> publish; publish -> end;
        interrupt_before publish;
    }
}

const DAY: Duration = Duration::from_secs(86_400);

fn clock() -> Clock {
    Clock::manual(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000))
}

fn app<C: Checkpointer>(store: C, clock: &Clock, retention: Retention) -> App<Review, C> {
    Review::builder().checkpointer(store).clock(clock.clone()).retention(retention).build()
}

/// Starts `thread`, which pauses before `publish`; returns its token.
fn pause<C: Checkpointer>(app: &App<Review, C>, thread: &str) -> Resume<Doc> {
    let outcome = app.run(Call::start(Doc::default()).on(thread)).unwrap();
    outcome.interrupted().expect("the run pauses before publish").1
}

/// Runs `thread` to its end.
fn finish<C: Checkpointer>(app: &App<Review, C>, thread: &str) {
    let token = pause(app, thread);
    assert!(app.resume(token).unwrap().is_done());
}

fn ids(threads: &[ThreadId]) -> Vec<&str> {
    threads.iter().map(ThreadId::as_str).collect()
}

/// Every retention behaviour on one store; `open` gives a new handle on the same store each
/// call (after the previous ones are dropped), as another process would open it.
fn scenario<C: Checkpointer>(label: &str, open: impl Fn() -> C) {
    let clock = clock();
    let thirty_days = Retention::new().expire_finished_after(30 * DAY);

    // A finished thread expires once its time has passed; a paused one is kept and reported.
    let token = {
        let app = app(open(), &clock, thirty_days);
        finish(&app, "done-1");
        let token = pause(&app, "paused-1");
        let report = app.sweep().unwrap();
        assert!(report.expired.is_empty() && report.kept_paused.is_empty(), "{label}: {report:?}");
        assert_eq!(report.threads, 2, "{label}");
        clock.advance(29 * DAY);
        assert!(app.sweep().unwrap().expired.is_empty(), "{label}: 29 days are not 30");
        clock.advance(2 * DAY);
        let report = app.sweep().unwrap();
        assert_eq!(report.expired.len(), 1, "{label}: {report:?}");
        assert_eq!(report.expired[0].thread.as_str(), "done-1", "{label}");
        assert_eq!(report.expired[0].rest, Rest::Finished, "{label}");
        assert_eq!(report.expired[0].idle, 31 * DAY, "{label}");
        assert_eq!(report.kept_paused.len(), 1, "{label}: {report:?}");
        assert_eq!(report.kept_paused[0].thread.as_str(), "paused-1", "{label}");
        assert_eq!(report.kept_paused[0].because, KeptBecause::PausedNotExpired, "{label}");
        assert!(report.kept_paused[0].to_string().contains("paused threads do not expire"), "{label}");
        assert_eq!(ids(&app.threads().unwrap()), ["paused-1"], "{label}");
        assert!(app.state(&ThreadId::from("done-1")).unwrap().is_none(), "{label}");
        token
    };

    // The paused thread survived: its token still resumes it, in a new process.
    {
        let app = app(open(), &clock, thirty_days);
        assert!(app.resume(token).unwrap().is_done(), "{label}");
        app.delete(&ThreadId::from("paused-1")).unwrap();
    }

    // Paused threads expire only when asked, after their own time.
    {
        let app = app(open(), &clock, thirty_days.expire_paused_after(7 * DAY));
        let token = pause(&app, "paused-2");
        clock.advance(6 * DAY);
        let report = app.sweep().unwrap();
        assert!(report.expired.is_empty(), "{label}: {report:?}");
        clock.advance(DAY);
        let report = app.sweep().unwrap();
        assert_eq!(report.expired.len(), 1, "{label}: {report:?}");
        assert_eq!((report.expired[0].thread.as_str(), report.expired[0].rest), ("paused-2", Rest::Paused));
        match app.resume(token) {
            Err(Error::CheckpointNotFound { thread }) => assert_eq!(thread.as_str(), "paused-2"),
            other => panic!("{label}: the token of an expired thread: {other:?}"),
        }
    }

    // Between the two times, a paused thread is kept and the report says until when.
    {
        let app = app(open(), &clock, Retention::new().expire_finished_after(DAY).expire_paused_after(10 * DAY));
        pause(&app, "paused-3");
        clock.advance(2 * DAY);
        let report = app.sweep().unwrap();
        assert!(report.expired.is_empty(), "{label}: {report:?}");
        assert_eq!(report.kept_paused[0].because, KeptBecause::NotIdleLongEnough { ttl: 10 * DAY }, "{label}");
        app.delete(&ThreadId::from("paused-3")).unwrap();
    }

    // `keep_last` prunes each thread's history; the head stays.
    {
        let app = app(open(), &clock, Retention::new().keep_last(2));
        finish(&app, "long");
        let before = app.history(&ThreadId::from("long")).unwrap().len();
        assert!(before > 2, "{label}: {before} checkpoints");
        let report = app.sweep().unwrap();
        assert_eq!(report.pruned, before - 2, "{label}: {report:?}");
        let left = app.history(&ThreadId::from("long")).unwrap();
        assert_eq!(left.len(), 2, "{label}");
        assert_eq!(left[0].state.trail, ["draft", "edit", "publish"], "{label}: the head is kept");
        assert_eq!(app.sweep().unwrap().pruned, 0, "{label}: nothing more to prune");
        app.delete(&ThreadId::from("long")).unwrap();
    }

    // A thread's own retention is kept in the store: it holds in the next process.
    {
        let app = app(open(), &clock, thirty_days);
        finish(&app, "audit");
        finish(&app, "chat");
        app.set_retention(&ThreadId::from("audit"), Some(Retention::new().never_expire_finished())).unwrap();
        app.set_retention(&ThreadId::from("chat"), Some(Retention::new().expire_finished_after(DAY))).unwrap();
        // Set twice: the record is replaced, not appended to.
        app.set_retention(&ThreadId::from("chat"), Some(Retention::new().expire_finished_after(2 * DAY))).unwrap();
    }
    {
        let app = app(open(), &clock, thirty_days);
        let own = app.thread_retention(&ThreadId::from("chat")).unwrap().expect("kept in the store");
        assert_eq!(own.finished_ttl(), Some(2 * DAY), "{label}");
        clock.advance(DAY);
        assert!(app.sweep().unwrap().expired.is_empty(), "{label}: chat has two days");
        clock.advance(DAY);
        let report = app.sweep().unwrap();
        assert_eq!(report.expired.len(), 1, "{label}: {report:?}");
        assert_eq!(report.expired[0].thread.as_str(), "chat", "{label}");
        assert_eq!(app.thread_retention(&ThreadId::from("chat")).unwrap(), None, "{label}: gone with its thread");
        clock.advance(365 * DAY);
        assert!(app.sweep().unwrap().expired.is_empty(), "{label}: audit never expires");
        assert_eq!(ids(&app.threads().unwrap()), ["audit"], "{label}");
        // Removing the thread's own retention brings back the app's.
        app.set_retention(&ThreadId::from("audit"), None).unwrap();
        assert_eq!(app.sweep().unwrap().expired.len(), 1, "{label}");
        assert!(app.threads().unwrap().is_empty(), "{label}");
    }

    // A thread that moved on since it was read is not deleted.
    {
        let store = open();
        let app = app(store, &clock, thirty_days);
        finish(&app, "moving");
        let head = app.state(&ThreadId::from("moving")).unwrap().unwrap().checkpoint;
        let store = app.checkpointer();
        assert!(!store.delete_at("Review", &ThreadId::from("moving"), head - 1).unwrap(), "{label}");
        assert!(!store.delete_at("Review", &ThreadId::from("nobody"), 1).unwrap(), "{label}");
        assert!(app.state(&ThreadId::from("moving")).unwrap().is_some(), "{label}");
        assert!(store.delete_at("Review", &ThreadId::from("moving"), head).unwrap(), "{label}");
        assert!(app.threads().unwrap().is_empty(), "{label}");
    }
}

/// A temporary directory, removed when dropped.
struct Tmp(PathBuf);

impl Tmp {
    fn new(test: &str) -> Self {
        let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_nanos();
        let dir = std::env::temp_dir().join(format!("tea-retention-{}-{test}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Tmp(dir)
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn ring() -> KeyRing {
    KeyRing::new(3, [0x5A; 32])
}

#[test]
fn memory_store() {
    let store = MemoryStore::new();
    scenario("memory", || store.clone());
}

#[test]
fn sled_store() {
    let tmp = Tmp::new("sled");
    scenario("sled", || SledStore::open(tmp.0.join("db")).unwrap());
}

#[test]
fn dir_store() {
    let tmp = Tmp::new("dir");
    scenario("dir", || DirStore::open(tmp.0.join("dir")).unwrap());
}

#[test]
fn sealed_stores() {
    let store = MemoryStore::new();
    scenario("sealed memory", || Sealed::new(store.clone(), ring()));
    let tmp = Tmp::new("sealed");
    scenario("sealed sled", || Sealed::new(SledStore::open(tmp.0.join("db")).unwrap(), ring()));
    scenario("sealed dir", || Sealed::new(DirStore::open(tmp.0.join("dir")).unwrap(), ring()));
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_store() {
    let Some(schema) = postgres_support::TestSchema::new("retention") else { return };
    scenario("postgres", || schema.store());
    // The store kept marks: a sweep expired through them, and none is left for a gone thread.
    let store = schema.store();
    let marks = tea::Checkpointer::rest_marks(&store).expect("PostgreSQL keeps marks");
    assert!(marks.unmarked("Review").unwrap().is_empty());
}

#[cfg(feature = "postgres")]
#[test]
fn sealed_postgres_store() {
    let Some(schema) = postgres_support::TestSchema::new("retention_sealed") else { return };
    scenario("sealed postgres", || Sealed::new(schema.store(), ring()));
}

#[cfg(not(feature = "postgres"))]
#[test]
fn postgres_store() {
    eprintln!(
        "skipped: this build has no `postgres` feature (cargo test -p tea-integration-tests --features postgres)"
    );
}

#[test]
fn a_sweeper_sweeps_on_its_own_until_dropped() {
    let clock = clock();
    let app = app(MemoryStore::new(), &clock, Retention::new().expire_finished_after(DAY));
    finish(&app, "done");
    let (sender, reports) = std::sync::mpsc::channel();
    let sweeper = app.sweep_every(Duration::from_millis(5), move |report| {
        let _ = sender.send(report.map(|r| r.expired.len()));
    });
    assert!(sweeper.is_running());
    // The first sweep runs at once and finds nothing to expire.
    assert_eq!(reports.recv_timeout(Duration::from_secs(10)).unwrap().unwrap(), 0);
    clock.advance(2 * DAY);
    let expired = (0..2000)
        .map(|_| reports.recv_timeout(Duration::from_secs(10)).unwrap().unwrap())
        .find(|&n| n > 0)
        .expect("a later sweep expires the thread");
    assert_eq!(expired, 1);
    assert!(app.threads().unwrap().is_empty());
    sweeper.stop();
    // Stopped: its handler (and the channel's sender) is gone.
    while reports.try_recv().is_ok() {}
    assert!(reports.recv_timeout(Duration::from_millis(50)).is_err());
}

#[test]
fn a_stopped_thread_is_never_expired() {
    fn failing(_: &Doc) -> Result<DocUpdate, tea::BoxError> {
        Err("the model is down".into())
    }
    graph! { Failing for Doc { start -> draft; draft -> failing; failing -> end; } }
    let clock = clock();
    let everything = Retention::new().expire_finished_after(Duration::ZERO).expire_paused_after(Duration::ZERO);
    let app = Failing::builder().checkpointer(MemoryStore::new()).clock(clock.clone()).retention(everything).build();
    // A run that failed part-way: its last checkpoint is neither finished nor paused, and
    // `recover` continues it.
    assert!(app.run(Call::start(Doc::default()).on("stopped")).is_err());
    clock.advance(365 * DAY);
    let report = app.sweep().unwrap();
    assert!(report.expired.is_empty() && report.kept_paused.is_empty(), "{report:?}");
    assert_eq!(ids(&app.threads().unwrap()), ["stopped"]);
}

#[cfg(feature = "serve")]
#[test]
fn a_served_app_is_swept_while_its_router_lives() {
    let clock = clock();
    let store = MemoryStore::new();
    let app = app(store.clone(), &clock, Retention::new().expire_finished_after(DAY));
    finish(&app, "served");
    let router = tea::serve::Serve::new().app(app).sweep_every(Duration::from_millis(5)).router();
    clock.advance(2 * DAY);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while store.thread_count() > 0 {
        assert!(std::time::Instant::now() < deadline, "the router's sweeper expires the thread");
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(router);
    // With the router gone, so is its sweeper: a thread finished now stays.
    let app = self::app(store.clone(), &clock, Retention::new().expire_finished_after(DAY));
    finish(&app, "after");
    clock.advance(2 * DAY);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(ids(&app.threads().unwrap()), ["after"]);
}

#[test]
fn a_pause_inside_a_parallel_branch_counts_as_paused() {
    fn step(_: &Doc) -> DocUpdate {
        Doc::update().trail(vec!["step".to_owned()])
    }
    graph! {
        Fan for Doc {
            start -> draft;
            parallel draft => [edit, step] -> publish;
            publish -> end;
            interrupt_before step;
        }
    }
    let clock = clock();
    let app = Fan::builder()
        .checkpointer(MemoryStore::new())
        .clock(clock.clone())
        .retention(Retention::new().expire_finished_after(DAY))
        .build();
    let (_, token) = app.run(Call::start(Doc::default()).on("fan")).unwrap().interrupted().unwrap();
    clock.advance(2 * DAY);
    let report = app.sweep().unwrap();
    assert!(report.expired.is_empty(), "{report:?}");
    assert_eq!(report.kept_paused.len(), 1, "the branch's pause is the thread's: {report:?}");
    let paused = app.with_retention(Retention::new().expire_paused_after(DAY));
    assert_eq!(paused.sweep().unwrap().expired[0].rest, Rest::Paused);
    assert!(matches!(app.resume(token), Err(Error::CheckpointNotFound { .. })));
}
