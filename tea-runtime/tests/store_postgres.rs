//! `PostgresStore` against a real server, beyond the `Checkpointer` contract (which
//! `store_contract.rs` runs on it): appends racing from separate pools, migrations raced by
//! concurrent connects, errors that name the database problem, and use from inside a tokio
//! runtime.
//!
//! Each test has a schema of its own (see `tests/postgres_support`); without a server (and
//! without `TEA_TEST_POSTGRES_URL`) the tests print why they are skipped and pass.
#![cfg(feature = "postgres")]

#[path = "../../tests/postgres_support/mod.rs"]
mod postgres_support;

use postgres_support::TestSchema;
use std::sync::Barrier;
use tea_runtime::{AppendOutcome, CheckpointId, Checkpointer, Error, PostgresStore, ThreadId};

fn thread(id: &str) -> ThreadId {
    ThreadId::from(id)
}

/// The source message of an [`Error::Store`].
fn store_message<T: std::fmt::Debug>(result: Result<T, Error>) -> String {
    match result {
        Err(Error::Store { source }) => source.to_string(),
        other => panic!("expected Error::Store, got {other:?}"),
    }
}

/// `head`, `history` and `get` agree with `expected`, oldest first.
fn assert_thread(store: &PostgresStore, graph: &str, id: &str, expected: &[&[u8]]) {
    let t = thread(id);
    let stored: Vec<(CheckpointId, Vec<u8>)> = (1..).zip(expected.iter().map(|b| b.to_vec())).collect();
    let newest_first: Vec<_> = stored.iter().rev().cloned().collect();
    assert_eq!(store.head(graph, &t).unwrap(), stored.last().cloned(), "head of {graph}/{id}");
    assert_eq!(store.history(graph, &t).unwrap(), newest_first, "history of {graph}/{id}");
    assert_eq!(store.get(graph, &t, 0).unwrap(), None);
    for (checkpoint, bytes) in &stored {
        assert_eq!(store.get(graph, &t, *checkpoint).unwrap().as_ref(), Some(bytes), "{graph}/{id} {checkpoint}");
    }
    assert_eq!(store.get(graph, &t, stored.len() as CheckpointId + 1).unwrap(), None);
}

fn append_all(store: &PostgresStore, graph: &str, id: &str, payloads: &[&[u8]]) {
    let t = thread(id);
    for (checkpoint, bytes) in (1..).zip(payloads) {
        let expected = Some(checkpoint - 1).filter(|&head| head > 0);
        assert_eq!(store.append(graph, &t, expected, checkpoint, bytes, false).unwrap(), AppendOutcome::Written);
    }
}

#[test]
fn ids_out_of_sequence_and_unstorable_names_are_store_errors() {
    let Some(db) = TestSchema::new("refused") else { return };
    let store = db.store();
    let t = thread("t");
    append_all(&store, "g", "t", &[b"one", b"two", b"three"]);
    // Refused before anything is sent.
    for (expected, id) in [(None, 2), (None, 0), (Some(3), 3), (Some(u64::MAX), 0)] {
        let message = store_message(store.append("g", &t, expected, id, b"x", false));
        assert!(message.contains(&format!("checkpoint {id} cannot follow")), "{message}");
    }
    // Past PostgreSQL's bigint.
    let message = store_message(store.append("g", &t, Some(1 << 63), (1 << 63) + 1, b"x", false));
    assert!(message.contains("does not fit PostgreSQL's bigint"), "{message}");
    assert_eq!(store.get("g", &t, u64::MAX).unwrap(), None);
    assert_thread(&store, "g", "t", &[b"one", b"two", b"three"]);

    // A name the server cannot store (text holds no NUL) is an error naming the operation.
    let message = store_message(store.append("bad\0graph", &t, None, 1, b"x", true));
    assert!(message.contains("cannot append a checkpoint"), "{message}");
    assert!(message.contains(db.url().rsplit('@').next().unwrap()), "{message}");
}

#[test]
fn racing_appends_from_separate_pools_have_one_winner() {
    const RACERS: usize = 6;
    const ROUNDS: CheckpointId = 8;
    let Some(db) = TestSchema::new("race") else { return };
    // One store (one pool) per racer, as if each were its own process.
    let stores: Vec<PostgresStore> = (0..RACERS).map(|_| db.store()).collect();
    let t = thread("contended");
    let barrier = Barrier::new(RACERS);
    for round in 0..ROUNDS {
        let expected = Some(round).filter(|&head| head > 0);
        let id = round + 1;
        let outcomes: Vec<(String, AppendOutcome)> = std::thread::scope(|scope| {
            let racers: Vec<_> = stores
                .iter()
                .enumerate()
                .map(|(racer, store)| {
                    let (barrier, t) = (&barrier, &t);
                    scope.spawn(move || {
                        let name = format!("round {round} racer {racer}");
                        barrier.wait();
                        let outcome = store.append("race", t, expected, id, name.as_bytes(), true).unwrap();
                        (name, outcome)
                    })
                })
                .collect();
            racers.into_iter().map(|r| r.join().unwrap()).collect()
        });
        let winners: Vec<&String> =
            outcomes.iter().filter(|(_, outcome)| *outcome == AppendOutcome::Written).map(|(name, _)| name).collect();
        assert_eq!(winners.len(), 1, "round {round}: {outcomes:?}");
        for (_, outcome) in &outcomes {
            if *outcome != AppendOutcome::Written {
                assert_eq!(*outcome, AppendOutcome::Conflict { head: Some(id) }, "round {round}");
            }
        }
        assert_eq!(stores[0].head("race", &t).unwrap(), Some((id, winners[0].clone().into_bytes())));
    }
    let ids: Vec<CheckpointId> = stores[1].history("race", &t).unwrap().iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, (1..=ROUNDS).rev().collect::<Vec<_>>());
}

#[test]
fn concurrent_connects_migrate_once() {
    const PROCESSES: usize = 6;
    let Some(db) = TestSchema::new("migrate") else { return };
    let barrier = Barrier::new(PROCESSES);
    let stores: Vec<PostgresStore> = std::thread::scope(|scope| {
        let connects: Vec<_> = (0..PROCESSES)
            .map(|_| {
                let (barrier, db) = (&barrier, &db);
                scope.spawn(move || {
                    barrier.wait();
                    PostgresStore::builder(db.url()).schema(db.name()).max_connections(2).connect()
                })
            })
            .collect();
        connects.into_iter().map(|c| c.join().unwrap().unwrap()).collect()
    });
    // Each store sees the others' writes; the version table says two migrations, each applied once.
    append_all(&stores[0], "g", "t", &[b"one"]);
    assert_thread(&stores[PROCESSES - 1], "g", "t", &[b"one"]);
    db.execute(&format!(
        "DO $$ BEGIN
             IF (SELECT count(*) FROM \"{0}\".tea_schema_version) <> 2
                OR (SELECT max(version) FROM \"{0}\".tea_schema_version) <> 2 THEN
                 RAISE EXCEPTION 'expected exactly versions 1 and 2';
             END IF;
         END $$",
        db.name()
    ));
    // Connecting again finds the tables up to date and keeps the data.
    assert_thread(&db.store(), "g", "t", &[b"one"]);
}

#[test]
fn tables_of_a_newer_tea_are_refused() {
    let Some(db) = TestSchema::new("newer") else { return };
    drop(db.store());
    db.execute(&format!("INSERT INTO \"{}\".tea_schema_version (version) VALUES (99)", db.name()));
    let message = store_message(PostgresStore::builder(db.url()).schema(db.name()).connect());
    assert!(message.contains("version 99, newer than this tea knows (2)"), "{message}");
    assert!(message.contains(db.name()), "{message}");
}

#[test]
fn tables_of_version_1_gain_retention_marks_and_keep_their_threads() {
    let Some(db) = TestSchema::new("version_1") else { return };
    // The tables as the first version of the store made them, with a thread in them.
    db.execute(&format!(
        "CREATE SCHEMA \"{0}\";
         CREATE TABLE \"{0}\".tea_schema_version (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
         INSERT INTO \"{0}\".tea_schema_version (version) VALUES (1);
         CREATE TABLE \"{0}\".tea_threads (graph text NOT NULL, thread text NOT NULL, head bigint NOT NULL CHECK (head > 0), PRIMARY KEY (graph, thread));
         CREATE TABLE \"{0}\".tea_checkpoints (graph text NOT NULL, thread text NOT NULL, id bigint NOT NULL CHECK (id > 0), bytes bytea NOT NULL, PRIMARY KEY (graph, thread, id));
         INSERT INTO \"{0}\".tea_threads VALUES ('g', 'old', 1);
         INSERT INTO \"{0}\".tea_checkpoints VALUES ('g', 'old', 1, 'kept');",
        db.name()
    ));
    let store = db.store();
    assert_thread(&store, "g", "old", &[b"kept"]);
    let marks = store.rest_marks().expect("marks kept as columns");
    assert_eq!(marks.unmarked("g").unwrap(), [ThreadId::from("old")], "not marked yet");
    let mark = tea_runtime::RestMark {
        thread: ThreadId::from("old"),
        head: 1,
        rest: tea_runtime::Rest::Finished,
        since_ms: Some(10),
    };
    marks.mark("g", std::slice::from_ref(&mark)).unwrap();
    assert!(marks.unmarked("g").unwrap().is_empty());
    // A mark for a head the thread has left is dropped; a moved head is unmarked again.
    let old = ThreadId::from("old");
    assert_eq!(store.append("g", &old, Some(1), 2, b"newer", false).unwrap(), AppendOutcome::Written);
    assert_eq!(marks.unmarked("g").unwrap(), [ThreadId::from("old")]);
    let expiry = tea_runtime::Expiry { finished_before: Some(100), paused_before: None, except: Vec::new() };
    assert!(marks.expire("g", &expiry).unwrap().expired.is_empty(), "marked at another head");
    marks.mark("g", &[tea_runtime::RestMark { head: 2, ..mark }]).unwrap();
    let expired = marks.expire("g", &expiry).unwrap();
    assert_eq!(expired.expired.len(), 1);
    assert!(store.threads("g").unwrap().is_empty() && store.history("g", &old).unwrap().is_empty());
}

#[test]
fn a_head_without_its_checkpoint_is_a_store_error() {
    let Some(db) = TestSchema::new("missing_head") else { return };
    let store = db.store();
    append_all(&store, "g", "t", &[b"one"]);
    db.execute(&format!("UPDATE \"{}\".tea_threads SET head = 7", db.name()));
    let message = store_message(store.head("g", &thread("t")));
    assert!(message.contains("thread `t` of graph `g` is checkpoint 7, which is not stored"), "{message}");
}

#[test]
fn connection_errors_name_the_database_problem_but_not_the_password() {
    // Nothing listens on port 1 of the loopback.
    let message = store_message(PostgresStore::connect("postgres://tea:s3cret@127.0.0.1:1/test"));
    assert!(message.contains("tea@127.0.0.1:1/test"), "{message}");
    assert!(message.contains("cannot connect") && message.to_lowercase().contains("refused"), "{message}");
    assert!(!message.contains("s3cret"), "{message}");

    let Some(db) = TestSchema::new("errors") else { return };
    let config: tokio_postgres::Config = db.url().parse().unwrap();
    let host = match &config.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(host) => host.clone(),
        #[allow(unreachable_patterns)]
        _ => return eprintln!("skipped: the test server is not reached over TCP"),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().unwrap_or("postgres");
    let database = config.get_dbname().unwrap_or(user);

    // Same server, a database that does not exist.
    let message =
        store_message(PostgresStore::connect(&format!("postgres://{user}@{host}:{port}/tea_no_such_database")));
    assert!(message.contains("database \"tea_no_such_database\" does not exist"), "{message}");
    assert!(message.contains(&format!("{user}@{host}:{port}/tea_no_such_database")), "{message}");

    // Same server, a role that does not exist: refused at authentication.
    let message =
        store_message(PostgresStore::connect(&format!("postgres://tea_no_such_role:pw@{host}:{port}/{database}")));
    assert!(message.contains("role \"tea_no_such_role\" does not exist"), "{message}");
    assert!(!message.contains(":pw"), "{message}");
}

#[test]
fn sync_calls_work_inside_a_runtime_and_async_calls_await() {
    let Some(db) = TestSchema::new("runtime") else { return };
    let store = db.store();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (url, schema) = (db.url().to_owned(), db.name().to_owned());
    runtime.block_on(async move {
        // A blocking call from a task of another runtime does not panic.
        let sync_store = store.clone();
        tokio::spawn(async move {
            append_all(&sync_store, "g", "sync", &[b"one", b"two"]);
            assert_eq!(sync_store.head("g", &thread("sync")).unwrap(), Some((2, b"two".to_vec())));
        })
        .await
        .unwrap();

        // The async twins, and a store connected from async code whose last handle goes there.
        let other = PostgresStore::builder(&url).schema(&schema).connect_async().await.unwrap();
        let t = thread("async");
        assert_eq!(other.append_async("g", &t, None, 1, b"a1", true).await.unwrap(), AppendOutcome::Written);
        assert_eq!(
            other.append_async("g", &t, None, 1, b"late", false).await.unwrap(),
            AppendOutcome::Conflict { head: Some(1) }
        );
        assert_eq!(other.head_async("g", &t).await.unwrap(), Some((1, b"a1".to_vec())));
        assert_eq!(other.get_async("g", &t, 1).await.unwrap(), Some(b"a1".to_vec()));
        assert_eq!(other.history_async("g", &t).await.unwrap(), vec![(1, b"a1".to_vec())]);
        assert_eq!(other.threads_async("g").await.unwrap(), [thread("async"), thread("sync")]);
        assert_eq!(other.prune_async("g", &thread("sync"), 1).await.unwrap(), 1);
        assert!(other.delete_async("g", &t).await.unwrap());
        drop(other);
        drop(store);
    });
    // A current-thread runtime awaits the async calls too.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let store = db.store();
    runtime.block_on(async {
        assert_eq!(store.head_async("g", &thread("sync")).await.unwrap(), Some((2, b"two".to_vec())));
    });
}
