//! Checkpoints, breakpoints and resumes on a `SledStore` in a temporary directory: the shared
//! scenarios (`tests/store_scenarios`), and a store closed and reopened between pause and resume.

#[macro_use]
mod store_scenarios;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use store_scenarios::{done, forward, names, paused, runs, thread, Doc, EdgeAgent, StopBefore};
use tea::prelude::*;

/// A temporary directory, removed when dropped; each `store()` opens a new database in it.
struct Sled {
    dir: PathBuf,
    opened: AtomicUsize,
}

impl Sled {
    fn new(test: &str) -> Self {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let dir = std::env::temp_dir().join(format!("tea-checkpoints-{}-{test}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Sled { dir, opened: AtomicUsize::new(0) }
    }

    fn store(&self) -> SledStore {
        let n = self.opened.fetch_add(1, Ordering::Relaxed);
        SledStore::open(self.dir.join(format!("db{n}"))).unwrap()
    }

    fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Sled {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

store_tests!(Sled);

/// Opens the database at `path`, waiting a little for a handle dropped a moment ago to let go of
/// the directory's lock.
fn reopen(path: &Path) -> SledStore {
    let mut last = None;
    for _ in 0..50 {
        match SledStore::open(path) {
            Ok(store) => return store,
            Err(error) => last = Some(error),
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("could not reopen {}: {:?}", path.display(), last)
}

#[test]
fn a_store_closed_and_reopened_between_pause_and_resume() {
    let tmp = Sled::new("reopen");
    let path = tmp.path().join("db");
    let t = thread("reopen");

    let token = {
        let app = EdgeAgent::builder().checkpointer(SledStore::open(&path).unwrap()).build();
        let (_, resume) = paused(app.run(Call::start(Doc::default()).on(t.clone())));
        resume.to_string()
    };

    // Each resume on a freshly opened store, each store closed before the next.
    let mut token = token;
    let mut stops = Vec::new();
    let last = loop {
        let app = EdgeAgent::builder().checkpointer(reopen(&path)).build();
        let snapshot = app.state(&t).unwrap().expect("the paused thread survived the close");
        stops.push(names(&snapshot.next));
        let mut resume: Resume<Doc> = token.parse().unwrap();
        if resume.node() == "g" {
            resume = resume.update(Doc::update().approved(true));
        }
        match app.resume(resume).unwrap() {
            Outcome::Done(state) => break state,
            Outcome::Interrupted { resume, .. } => token = resume.to_string(),
        }
    };
    assert_eq!(stops, [vec!["b"], vec!["f"], vec!["g"], vec!["l"]]);
    assert_eq!(last.trail, ["a", "b", "c", "d", "e", "f", "g", "h", "i", "k", "l"]);
    for node in ["a", "b", "c", "d", "e", "f", "g", "h", "i", "k", "l"] {
        assert_eq!(runs(&t, node), 1, "{node}");
    }

    let app = EdgeAgent::builder().checkpointer(reopen(&path)).build();
    let snapshot = app.state(&t).unwrap().unwrap();
    assert_eq!(snapshot.state, last);
    assert!(snapshot.next.is_empty());
    let history = app.history(&t).unwrap();
    assert_eq!(history[0].checkpoint, snapshot.checkpoint);
    assert_eq!(history.len() as u64, snapshot.checkpoint, "every checkpoint is kept, numbered from 1");
    assert!(matches!(app.resume(token.parse().unwrap()), Err(Error::StaleResume { .. })));
}

#[test]
fn a_thread_started_on_one_store_handle_resumes_on_a_reopened_one_with_the_same_token_string() {
    let tmp = Sled::new("reopen-simple");
    let path = tmp.path().join("db");
    let t = thread("reopen-simple");
    let token = {
        let app = StopBefore::builder().checkpointer(SledStore::open(&path).unwrap()).build();
        paused(app.run(Call::start(Doc { note: "kept on disk".into(), ..Doc::default() }).on(t.clone()))).1.to_string()
    };
    let app = StopBefore::builder().checkpointer(reopen(&path)).build();
    let out = done(app.resume(token.parse().unwrap()));
    assert_eq!(out.trail, ["a", "b", "c"]);
    assert_eq!(out.note, "kept on disk");
}

/// A store that counts durable appends that wrote, passing everything to a `SledStore`.
struct CountingDurable {
    inner: SledStore,
    durable: AtomicUsize,
}

impl Checkpointer for CountingDurable {
    fn append(
        &self,
        graph: &str,
        thread: &ThreadId,
        expected: Option<u64>,
        id: u64,
        bytes: &[u8],
        durable: bool,
    ) -> Result<tea::AppendOutcome, Error> {
        let outcome = self.inner.append(graph, thread, expected, id, bytes, durable)?;
        if durable && outcome == tea::AppendOutcome::Written {
            self.durable.fetch_add(1, Ordering::Relaxed);
        }
        Ok(outcome)
    }
    forward!(inner: head, get, history, threads, delete, prune);
}

#[test]
fn a_pause_and_resume_cycle_flushes_once_per_durable_write() {
    let tmp = Sled::new("flushes");
    for durability in [Durability::EveryStep, Durability::OnPause] {
        let store = CountingDurable { inner: tmp.store(), durable: AtomicUsize::new(0) };
        let app = StopBefore::builder().checkpointer(store).durability(durability).build();
        let (_, resume) = paused(app.run(Call::start(Doc::default()).on(thread("flushes"))));
        done(app.resume(resume));
        let store = app.checkpointer();
        let durable = store.durable.load(Ordering::Relaxed) as u64;
        assert!(durable >= 1, "{durability:?}: the pause is durable");
        assert_eq!(store.inner.flushes(), durable, "{durability:?}: one flush per durable append");
    }
}

mod asking {
    use super::*;
    use store_scenarios::DocUpdate;

    fn prepare(_: &Doc) -> DocUpdate {
        Doc::update().trail(vec!["prepare".into()])
    }
    fn finish(_: &Doc) -> DocUpdate {
        Doc::update().trail(vec!["finish".into()])
    }

    graph! {
        pub Ask for Doc {
            start -> prepare;
            prepare -> ask;
            ask -> finish;
            finish -> end;
            interrupt ask(trail => note);
        }
    }

    #[test]
    fn a_cycle_at_an_interrupt_node_flushes_the_pause_and_the_end_only() {
        let tmp = Sled::new("asking");
        let store = CountingDurable { inner: tmp.store(), durable: AtomicUsize::new(0) };
        let app = Ask::builder().checkpointer(store).build();
        let (_, resume) = paused(app.run(Call::start(Doc::default()).on(thread("asking"))));
        let out = done(app.resume(resume.answer("ok")));
        assert_eq!((out.trail.as_slice(), out.note.as_str()), (&["prepare".to_owned(), "finish".to_owned()][..], "ok"));
        let store = app.checkpointer();
        // The claims (the start's, and the answered node's step claiming the thread) are not
        // flushed; `prepare`'s step is the pause's.
        assert_eq!(store.durable.load(Ordering::Relaxed), 2, "the pause and the end");
        assert_eq!(store.inner.flushes(), 2);
    }
}
