//! Leases across subgraph nodes on the async driver (feature `tokio`): a live async parent whose
//! child outlasts the lease is never taken over by a concurrent `run_async(Call::recover(…))`, as on the
//! blocking API (`tests/subgraph_leases.rs` at the root, whose `Mom` and `Kid` graphs these are).
//!
//! Every node takes 200 ms, half the 400 ms lease; the child of three nodes takes 600 ms, so a
//! parent's lease written before its subgraph node would expire while the child still runs.
#![cfg(feature = "tokio")]

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tea::prelude::*;

const LEASE: Duration = Duration::from_millis(400);
const NODE: Duration = Duration::from_millis(200);

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Job {
    #[reducer(append)]
    trail: Vec<String>,
}

/// Every node run, as `{thread} {node}`.
static RUNS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The node runs of the threads under `root` (`root` and its children `root/…`).
fn runs_under(root: &str) -> Vec<String> {
    let child = format!("{root}/");
    let runs = RUNS.lock().unwrap();
    runs.iter().filter(|r| r.split(' ').next().is_some_and(|t| t == root || t.starts_with(&child))).cloned().collect()
}

/// A node that takes `NODE` and records its run.
fn slow(ctx: &Ctx<Job>) -> JobUpdate {
    let thread = ctx.thread().map(ToString::to_string).unwrap_or_default();
    RUNS.lock().unwrap().push(format!("{thread} {}", ctx.node()));
    std::thread::sleep(NODE);
    Job::update().trail(vec![ctx.node().to_string()])
}

fn c1(_: &Job, ctx: &Ctx<Job>) -> JobUpdate {
    slow(ctx)
}
fn c2(_: &Job, ctx: &Ctx<Job>) -> JobUpdate {
    slow(ctx)
}
fn c3(_: &Job, ctx: &Ctx<Job>) -> JobUpdate {
    slow(ctx)
}
fn p(_: &Job, ctx: &Ctx<Job>) -> JobUpdate {
    slow(ctx)
}
fn q(_: &Job, ctx: &Ctx<Job>) -> JobUpdate {
    slow(ctx)
}

graph! {
    /// A child of three nodes: 600 ms, longer than the lease.
    pub Kid for Job { start -> c1; c1 -> c2; c2 -> c3; c3 -> end; }
}
graph! {
    /// A parent whose subgraph node runs `Kid`.
    pub Mom for Job { start -> p; p -> k; k -> q; q -> end; subgraph k = Kid; }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_async_parent_whose_child_outlasts_the_lease_is_not_taken_over() {
    let app = std::sync::Arc::new(Mom::builder().checkpointer(MemoryStore::new()).lease(LEASE).build());
    let live = AtomicBool::new(true);
    let racer = async {
        let mut busy = 0;
        while live.load(Ordering::Acquire) {
            tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(50))).await.unwrap();
            match app.run_async(Call::recover(ThreadId::from("async"))).await {
                Err(Error::ThreadBusy { .. }) => busy += 1,
                Ok(Outcome::Done(_)) | Err(Error::CheckpointNotFound { .. }) => {}
                other => panic!("a live run was taken over: {other:?}"),
            }
        }
        busy
    };
    let run = async {
        let outcome = app.run_async(Call::start(Job::default()).on("async")).await;
        live.store(false, Ordering::Release);
        outcome
    };
    let (outcome, busy) = tokio::join!(run, racer);
    let state = match outcome {
        Ok(Outcome::Done(state)) => state,
        other => panic!("the live run failed: {other:?}"),
    };
    assert_eq!(state.trail, ["p", "c1", "c2", "c3", "q"]);
    assert!(busy > 0, "no recover raced the live run");
    let runs = runs_under("async");
    assert_eq!(runs.len(), 5, "a node ran twice: {runs:?}");
}
