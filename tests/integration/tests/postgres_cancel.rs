//! Cancellation and lost connections on a `PostgresStore`: a run dropped part-way, or failed by
//! a connection the server killed, leaves its thread as the other stores do — a dropped resume
//! puts its pause back (the token works again), a dropped or failed run releases its lease (so
//! `recover` continues it at once instead of reporting `ThreadBusy` for a minute).
//!
//! Each test has a schema of its own (`tests/postgres_support`); without a server (and without
//! `TEA_TEST_POSTGRES_URL`) the tests print why they are skipped and pass. Each prints its figures
//! (how many of N runs were left stranded) on stderr.
#![cfg(feature = "postgres")]

#[path = "../../postgres_support/mod.rs"]
mod postgres_support;

use postgres_support::TestSchema;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Ticket {
    #[reducer(append)]
    log: Vec<String>,
    answer: String,
    /// How long `work` waits, in milliseconds.
    wait_ms: u64,
}

mod desk {
    use super::*;

    pub fn prepare(_: &Ticket) -> TicketUpdate {
        Ticket::update().log(vec!["prepare".to_owned()])
    }
    pub fn ask(_: &Ticket, hitl: &mut Hitl) -> Result<TicketUpdate, Pause> {
        let answer: String = hitl.interrupt("which way?")?;
        Ok(Ticket::update().log(vec!["ask".to_owned()]).answer(answer))
    }
    pub async fn work(state: &Ticket) -> TicketUpdate {
        tokio::time::sleep(Duration::from_millis(state.wait_ms)).await;
        Ticket::update().log(vec!["work".to_owned()])
    }
    pub fn finish(_: &Ticket) -> TicketUpdate {
        Ticket::update().log(vec!["finish".to_owned()])
    }

    graph! {
        /// Prepares, asks a human, works (async, as slow as the state says), finishes.
        pub Desk for Ticket {
            start -> prepare;
            prepare -> ask;
            ask -> work;
            work -> finish;
            finish -> end;
            async work;
            interruptible ask;
        }
    }
}
use desk::Desk;

mod chain {
    use super::*;

    fn step(name: &str) -> TicketUpdate {
        std::thread::sleep(Duration::from_millis(15));
        Ticket::update().log(vec![name.to_owned()])
    }
    pub fn a(_: &Ticket) -> TicketUpdate {
        step("a")
    }
    pub fn b(_: &Ticket) -> TicketUpdate {
        step("b")
    }
    pub fn c(_: &Ticket) -> TicketUpdate {
        step("c")
    }
    pub fn d(_: &Ticket) -> TicketUpdate {
        step("d")
    }
    pub fn e(_: &Ticket) -> TicketUpdate {
        step("e")
    }
    pub fn f(_: &Ticket) -> TicketUpdate {
        step("f")
    }

    graph! {
        /// Six short steps, each written to the store.
        pub Chain for Ticket {
            start -> a;
            a -> b;
            b -> c;
            c -> d;
            d -> e;
            e -> f;
            f -> end;
        }
    }
}
use chain::Chain;

/// xorshift, seeded from the clock; the seed is printed with any failure.
struct Rng(u64);

impl Rng {
    fn seeded() -> Self {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64;
        Rng(nanos | 1)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

const DROPPED: usize = 48;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// 48 threads paused in `ask`; each token resumed into a 60 s `work` and dropped 0–6 ms in (during
/// the claim's write, the step after it, or while `work` waits). Afterwards every thread shows its
/// pause again and its token resumes to the end.
#[test]
fn a_dropped_resume_leaves_the_pause_and_its_token_working() {
    // The schema is made and dropped outside the runtime (its helper blocks on one of its own).
    let Some(db) = TestSchema::new("dropped_resume") else { return };
    runtime().block_on(dropped_resumes(&db));
}

async fn dropped_resumes(db: &TestSchema) {
    let app = Desk::builder().checkpointer(db.store()).build();
    let mut tokens = Vec::new();
    for i in 0..DROPPED {
        let input = Ticket { wait_ms: 60_000, ..Ticket::default() };
        match app.run_async(Call::start(input).on(format!("r{i}"))).await {
            Ok(Outcome::Interrupted { resume, .. }) => tokens.push(resume),
            other => panic!("expected the pause in `ask`, got {other:?}"),
        }
    }
    let mut rng = Rng::seeded();
    let seed = rng.0;
    for token in &tokens {
        let give_up = Duration::from_micros(rng.below(6_000));
        tokio::select! {
            outcome = app.resume_async(token.clone().answer("dropped")) => {
                panic!("seed {seed}: a resume finished under a 60 s node: {outcome:?}")
            }
            () = tokio::time::sleep(give_up) => {}
        }
    }
    let mut stranded = Vec::new();
    for token in tokens {
        let thread = token.thread().clone();
        let snapshot = app.state_async(&thread).await.unwrap().unwrap();
        if snapshot.interrupts.len() != 1 || snapshot.next != ["ask"] {
            stranded.push(format!("{thread}: the pause is gone (next {:?})", snapshot.next));
            continue;
        }
        let resumed = app.resume_async(token.answer("at last").update(Ticket::update().wait_ms(0))).await;
        match resumed {
            Ok(Outcome::Done(state)) => assert_eq!(state.log, ["prepare", "ask", "work", "finish"], "{thread}"),
            other => stranded.push(format!("{thread}: the token does not resume: {other:?}")),
        }
    }
    eprintln!("dropped resumes: {} of {DROPPED} left their thread stranded (seed {seed})", stranded.len());
    assert!(stranded.is_empty(), "seed {seed}: {stranded:#?}");
}

/// 48 new runs, each dropped 0–5 ms in (during its claim, a step's write, or the pause's).
/// Afterwards no thread is `ThreadBusy`: `recover` continues each that has a checkpoint.
#[test]
fn a_dropped_invoke_releases_its_lease() {
    let Some(db) = TestSchema::new("dropped_invoke") else { return };
    runtime().block_on(dropped_invokes(&db));
}

async fn dropped_invokes(db: &TestSchema) {
    let app = Desk::builder().checkpointer(db.store()).build();
    let mut rng = Rng::seeded();
    let seed = rng.0;
    let mut finished = 0;
    for i in 0..DROPPED {
        let give_up = Duration::from_micros(rng.below(5_000));
        tokio::select! {
            _ = app.run_async(Call::start(Ticket::default()).on(format!("i{i}"))) => finished += 1,
            () = tokio::time::sleep(give_up) => {}
        }
    }
    let mut stranded = Vec::new();
    for i in 0..DROPPED {
        let thread = ThreadId::from(format!("i{i}"));
        // Otherwise it continued to the pause, or had nothing to continue (never written, or
        // already paused).
        if let Err(Error::ThreadBusy { expires_in, .. }) = app.run_async(Call::recover(&thread)).await {
            stranded.push(format!("{thread}: ThreadBusy for {expires_in:?}"));
        }
    }
    eprintln!(
        "dropped invokes: {} of {DROPPED} left their thread ThreadBusy ({finished} reached the pause first; seed {seed})",
        stranded.len()
    );
    assert!(stranded.is_empty(), "seed {seed}: {stranded:#?}");
}

/// Twelve runs of six steps while the server kills the store's connections every 40 ms: a run
/// that fails on a lost connection has released its lease, so `recover` continues it at once.
#[test]
fn a_run_failed_by_a_killed_connection_releases_its_lease() {
    const RUNS: usize = 12;
    let Some(db) = TestSchema::new("killed_backends") else { return };
    // An application name of its own, so only this test's connections are killed.
    let name = db.name().to_owned();
    let separator = if db.url().contains('?') { '&' } else { '?' };
    let url = format!("{}{separator}application_name={name}", db.url());
    let store = PostgresStore::builder(&url).schema(db.name()).max_connections(4).connect().unwrap();
    let app = Chain::builder().checkpointer(store).build();
    let stop = Arc::new(AtomicBool::new(false));
    let killer = {
        let (stop, url) = (Arc::clone(&stop), db.url().to_owned());
        std::thread::spawn(move || {
            let kill = format!(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE application_name = '{name}' AND pid <> pg_backend_pid()"
            );
            let schema = TestSchema::borrowed(url, String::new());
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(40));
                schema.execute(&kill);
            }
        })
    };
    let mut failed = Vec::new();
    for i in 0..RUNS {
        let thread = ThreadId::from(format!("k{i}"));
        match app.run(Call::start(Ticket::default()).on(thread.clone())) {
            Ok(_) => {}
            Err(Error::Store { .. }) => failed.push(thread),
            Err(other) => panic!("{thread}: expected done or a store error, got {other:?}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    killer.join().unwrap();
    let mut stranded = Vec::new();
    for thread in &failed {
        match app.run(Call::recover(thread)) {
            Err(Error::ThreadBusy { expires_in, .. }) => {
                stranded.push(format!("{thread}: ThreadBusy for {expires_in:?}"))
            }
            Ok(Outcome::Done(state)) => assert_eq!(state.log.last().map(String::as_str), Some("f"), "{thread}"),
            // Never written: nothing to recover.
            Err(Error::CheckpointNotFound { .. }) => {}
            other => panic!("{thread}: recover after the failure: {other:?}"),
        }
    }
    eprintln!(
        "killed connections: {} of {RUNS} runs failed, {} of them left their thread ThreadBusy",
        failed.len(),
        stranded.len()
    );
    assert!(stranded.is_empty(), "{stranded:#?}");
}
