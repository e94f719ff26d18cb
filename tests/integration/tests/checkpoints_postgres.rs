//! Checkpoints, breakpoints and resumes on a `PostgresStore`: the shared scenarios
//! (the root's `tests/store_scenarios`, each in a schema of its own), and K processes racing to resume one
//! token, of which exactly one proceeds.
//!
//! Without a server (and without `TEA_TEST_POSTGRES_URL`) each test prints why it is skipped.
#![cfg(feature = "postgres")]

#[macro_use]
#[path = "../../store_scenarios/mod.rs"]
mod store_scenarios;
#[path = "../../postgres_support/mod.rs"]
mod postgres_support;

use postgres_support::TestSchema;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use store_scenarios::{paused, thread, Doc, StopBefore};
use tea::prelude::*;

/// A schema per scenario; each `store()` is a new connection pool on it, like another replica.
struct Postgres {
    schema: TestSchema,
}

impl Postgres {
    fn new(test: &str) -> Option<Self> {
        TestSchema::new(test).map(|schema| Postgres { schema })
    }

    fn store(&self) -> PostgresStore {
        self.schema.store()
    }
}

store_tests!(optional Postgres);

const RACE_TEST: &str = "processes_racing_to_resume_one_token_have_one_winner";
/// Set in a racer process: `url schema token`, separated by newlines.
const RACER_ENV: &str = "TEA_CHECKPOINTS_POSTGRES_RACER";
const RACERS: usize = 5;

/// A racer: connects, says `READY`, waits for `go` on stdin, resumes, prints its outcome.
fn race(spec: &str) {
    let mut lines = spec.lines();
    let (url, schema, token) = (lines.next().unwrap(), lines.next().unwrap(), lines.next().unwrap());
    let store = PostgresStore::builder(url).schema(schema).max_connections(2).connect().unwrap();
    let app = StopBefore::builder().checkpointer(store).build();
    let resume: Resume<Doc> = token.parse().unwrap();
    println!("READY {}", std::process::id());
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).unwrap();
    let outcome = match app.resume(resume) {
        Ok(Outcome::Done(state)) => format!("done {}", state.trail.join(",")),
        Err(Error::StaleResume { .. }) => "stale".to_owned(),
        other => format!("unexpected {other:?}"),
    };
    println!("OUTCOME {outcome}");
}

/// Reads `child`'s stdout up to the line starting with `prefix`; returns the rest of that line.
fn read_until(child: &mut BufReader<std::process::ChildStdout>, prefix: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(child.read_line(&mut line).unwrap() > 0, "a racer ended without printing {prefix}");
        // libtest may print `test NAME ... ` on the same line, before the child's output.
        if let Some((_, rest)) = line.split_once(prefix) {
            return rest.trim().to_owned();
        }
    }
}

#[test]
fn processes_racing_to_resume_one_token_have_one_winner() {
    if let Ok(spec) = std::env::var(RACER_ENV) {
        return race(&spec);
    }
    let Some(db) = TestSchema::new("process_race") else { return };
    let app = StopBefore::builder().checkpointer(db.store()).build();
    let t = thread("race");
    let (_, resume) = paused(app.run(Call::start(Doc::default()).on(t.clone())));
    let spec = format!("{}\n{}\n{resume}", db.url(), db.name());

    let mut racers: Vec<(Child, BufReader<std::process::ChildStdout>)> = (0..RACERS)
        .map(|_| {
            let mut child = Command::new(std::env::current_exe().unwrap())
                .args([RACE_TEST, "--exact", "--nocapture", "--test-threads=1"])
                .env(RACER_ENV, &spec)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            let stdout = BufReader::new(child.stdout.take().unwrap());
            (child, stdout)
        })
        .collect();
    // Every racer is connected and holds the token before any of them resumes.
    let pids: Vec<String> = racers.iter_mut().map(|(_, stdout)| read_until(stdout, "READY ")).collect();
    for (child, _) in &mut racers {
        child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    }
    let mut outcomes: Vec<String> = racers.iter_mut().map(|(_, stdout)| read_until(stdout, "OUTCOME ")).collect();
    for (mut child, _) in racers {
        assert!(child.wait().unwrap().success());
    }
    outcomes.sort();
    let mut expected = vec!["stale".to_owned(); RACERS - 1];
    expected.insert(0, "done a,b,c".to_owned());
    assert_eq!(outcomes, expected, "racers {pids:?}");

    // Every process sees the one finished thread, and the token is used up here too.
    let snapshot = app.state(&t).unwrap().unwrap();
    assert_eq!(snapshot.state.trail, ["a", "b", "c"]);
    assert!(snapshot.next.is_empty());
    assert!(matches!(app.resume(resume), Err(Error::StaleResume { .. })));
}
