//! The async API under hostile use: many concurrent `resume_async`s of one token, and runs
//! cancelled over and over by dropping their future. Every scenario runs on `MemoryStore` and on
//! `SledStore`; the race also on `DirStore`.
//!
//! The graph pauses in `ask`, then runs the async node `work`, which waits on a tokio timer as
//! long as its thread's delay says (an LLM call stands in). Every node counts its runs per thread,
//! so a test sees which nodes ran and how often.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Ticket {
    #[reducer(append)]
    log: Vec<String>,
    answer: String,
}

/// Counters by (thread, node).
type Counters = HashMap<(String, String), Arc<AtomicUsize>>;

/// Per thread and node: how many times the node started (`work` also counts `work done`, when
/// its wait is over).
static RUNS: Mutex<Option<Counters>> = Mutex::new(None);
/// Per thread: how long `work` waits, in milliseconds (0 if unset).
static DELAYS: Mutex<Option<HashMap<String, Arc<AtomicU64>>>> = Mutex::new(None);

fn counter(thread: &str, node: &str) -> Arc<AtomicUsize> {
    let mut runs = RUNS.lock().unwrap();
    Arc::clone(runs.get_or_insert_with(HashMap::new).entry((thread.to_owned(), node.to_owned())).or_default())
}

fn runs(thread: &str, node: &str) -> usize {
    counter(thread, node).load(Ordering::SeqCst)
}

fn delay(thread: &str) -> Arc<AtomicU64> {
    let mut delays = DELAYS.lock().unwrap();
    Arc::clone(delays.get_or_insert_with(HashMap::new).entry(thread.to_owned()).or_default())
}

fn thread_of(ctx: &Ctx<Ticket>) -> String {
    ctx.thread().map(ToString::to_string).unwrap_or_default()
}

fn visit(ctx: &Ctx<Ticket>, node: &str) -> TicketUpdate {
    counter(&thread_of(ctx), node).fetch_add(1, Ordering::SeqCst);
    Ticket::update().log(vec![node.to_owned()])
}

mod desk {
    use super::*;

    pub fn prepare(_: &Ticket, ctx: &Ctx<Ticket>) -> TicketUpdate {
        visit(ctx, "prepare")
    }
    pub fn ask(_: &Ticket, ctx: &Ctx<Ticket>, hitl: &mut Hitl) -> Result<TicketUpdate, Pause> {
        let answer: String = hitl.interrupt("which way?")?;
        Ok(visit(ctx, "ask").answer(answer))
    }
    pub async fn work(_: &Ticket, ctx: &Ctx<Ticket>) -> TicketUpdate {
        let thread = thread_of(ctx);
        let update = visit(ctx, "work");
        let wait = delay(&thread).load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        counter(&thread, "work done").fetch_add(1, Ordering::SeqCst);
        update
    }
    pub fn finish(_: &Ticket, ctx: &Ctx<Ticket>) -> TicketUpdate {
        visit(ctx, "finish")
    }

    graph! {
        /// Prepares, asks a human, works (async, slow), finishes.
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

const FULL_LOG: [&str; 4] = ["prepare", "ask", "work", "finish"];

/// A fresh directory for a store under the temp directory, removed when dropped.
struct TempDb(std::path::PathBuf);

impl TempDb {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("tea-hostile-async-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        TempDb(dir)
    }
    fn store(&self) -> SledStore {
        SledStore::open(&self.0).unwrap()
    }
    fn dir_store(&self) -> DirStore {
        DirStore::open(&self.0).unwrap()
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Starts `thread` and returns the token of its pause in `ask`.
async fn paused<C: Checkpointer>(app: &App<Desk, C>, thread: &str) -> Resume<Ticket> {
    match app.run_async(Call::start(Ticket::default()).on(thread)).await {
        Ok(Outcome::Interrupted { state, resume }) => {
            assert_eq!(state.log, ["prepare"]);
            resume
        }
        other => panic!("expected the pause in `ask`, got {other:?}"),
    }
}

const RACERS: usize = 64;

/// 64 tasks resume one token at once, each with its own answer: one proceeds, the others are
/// `StaleResume`; `work` runs once; the thread ends with the winner's answer.
async fn sixty_four_resumes_of_one_token<C: Checkpointer>(store: C, thread: &str) {
    let app = Arc::new(Desk::builder().checkpointer(store).build());
    // `work` waits a little, so most racers arrive while the winner's run is still live.
    delay(thread).store(20, Ordering::SeqCst);
    let token = paused(&app, thread).await.to_string();
    let start = Arc::new(tokio::sync::Barrier::new(RACERS));
    let racers: Vec<_> = (0..RACERS)
        .map(|i| {
            let (app, start) = (Arc::clone(&app), Arc::clone(&start));
            // Every racer gets its own copy of the token, parsed from the string as a request
            // handler would.
            let resume: Resume<Ticket> = token.parse().unwrap();
            tokio::spawn(async move {
                start.wait().await;
                (i, app.resume_async(resume.answer(format!("racer {i}"))).await)
            })
        })
        .collect();
    let mut winners = Vec::new();
    for racer in racers {
        match racer.await.expect("a racer panicked") {
            (i, Ok(Outcome::Done(state))) => winners.push((i, state)),
            (_, Err(Error::StaleResume { thread: stale })) => assert_eq!(stale.as_str(), thread),
            (i, other) => panic!("racer {i}: neither the winner nor StaleResume: {other:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one resume proceeds: {winners:?}");
    let (winner, done) = winners.pop().unwrap();
    assert_eq!(done.log, FULL_LOG);
    assert_eq!(done.answer, format!("racer {winner}"));
    assert_eq!(runs(thread, "work"), 1, "the node after the pause ran once");
    assert_eq!(runs(thread, "finish"), 1);
    assert_eq!(runs(thread, "prepare"), 1);
    let last = app.state_async(&ThreadId::from(thread)).await.unwrap().expect("the thread is stored");
    assert_eq!(last.state, done, "the thread's final state is the winner's");
    assert!(last.next.is_empty() && last.interrupts.is_empty(), "the thread is over: {last:?}");
    // The token stays spent.
    let again = app.resume_async(token.parse::<Resume<Ticket>>().unwrap().answer("late")).await;
    assert!(matches!(again, Err(Error::StaleResume { .. })), "{again:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_sixty_four_concurrent_async_resumes_of_one_token_exactly_one_proceeds_memory() {
    sixty_four_resumes_of_one_token(MemoryStore::new(), "race-memory").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_sixty_four_concurrent_async_resumes_of_one_token_exactly_one_proceeds_sled() {
    let db = TempDb::new("race");
    sixty_four_resumes_of_one_token(db.store(), "race-sled").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_sixty_four_concurrent_async_resumes_of_one_token_exactly_one_proceeds_dir() {
    let db = TempDb::new("race-dir");
    sixty_four_resumes_of_one_token(db.dir_store(), "race-dir").await;
}

/// A small xorshift generator: the storm's delays differ from run to run, and a failure prints
/// the seed that produced them.
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

const STORM: usize = 20;

/// 20 resumes of one token, each dropped a few milliseconds in: the even rounds at a random
/// moment (before the claim, in `ask`, or while `work` waits), the odd ones a random moment after
/// `work` has started. Then the same token resumes to the end, with every node in the log once
/// and `prepare` (completed before the pause) never run again.
async fn cancellation_storm<C: Checkpointer>(store: C, thread: &str) {
    let app = Desk::builder().checkpointer(store).build();
    let token = paused(&app, thread).await;
    // Far longer than any wait below: no resume of the storm can finish.
    delay(thread).store(60_000, Ordering::SeqCst);
    let mut rng = Rng::seeded();
    let seed = rng.0;
    for round in 0..STORM {
        let give_up = Duration::from_micros(rng.below(8_000));
        let started = runs(thread, "work");
        // What a client that gives up does (`tokio::time::timeout` does the same): the resume's
        // future is dropped when the other branch of the `select!` completes first.
        let deadline = async {
            if round % 2 == 1 {
                while runs(thread, "work") == started {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            tokio::time::sleep(give_up).await;
        };
        tokio::select! {
            outcome = app.resume_async(token.clone().answer(format!("round {round}"))) => {
                panic!("seed {seed}, round {round}: a resume finished under a 60 s node: {outcome:?}")
            }
            () = deadline => {}
        }
        // The pause is back after every drop: the thread shows it, waiting in `ask`.
        let snapshot = app.state_async(&ThreadId::from(thread)).await.unwrap().unwrap();
        assert_eq!(snapshot.interrupts.len(), 1, "seed {seed}, round {round}: the pause is gone: {snapshot:?}");
        assert_eq!(snapshot.next, ["ask"], "seed {seed}, round {round}");
        assert_eq!(snapshot.state.log, ["prepare"], "seed {seed}, round {round}");
    }
    assert!(runs(thread, "work") >= STORM / 2, "seed {seed}: the odd rounds were dropped while `work` ran");
    assert_eq!(runs(thread, "work done"), 0, "seed {seed}: no cancelled `work` finished");
    delay(thread).store(0, Ordering::SeqCst);
    let done = match app.resume_async(token.clone().answer("at last")).await {
        Ok(Outcome::Done(state)) => state,
        other => panic!("seed {seed}: the token does not resume after the storm: {other:?}"),
    };
    assert_eq!(done.log, FULL_LOG, "seed {seed}: a cancelled run left a trace in the state");
    assert_eq!(done.answer, "at last");
    assert_eq!(runs(thread, "prepare"), 1, "seed {seed}: `prepare`, completed before the pause, ran again");
    assert_eq!(runs(thread, "work done"), 1, "seed {seed}");
    assert_eq!(runs(thread, "finish"), 1, "seed {seed}");
    let last = app.state_async(&ThreadId::from(thread)).await.unwrap().unwrap();
    assert_eq!(last.state, done);
    let again = app.resume_async(token.answer("late")).await;
    assert!(matches!(again, Err(Error::StaleResume { .. })), "seed {seed}: {again:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_survives_twenty_dropped_resumes_memory() {
    cancellation_storm(MemoryStore::new(), "storm-memory").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_survives_twenty_dropped_resumes_sled() {
    let db = TempDb::new("storm");
    cancellation_storm(db.store(), "storm-sled").await;
}
