//! Time travel and durability per call: `App::fork` (a new thread from a past checkpoint, the
//! original untouched; a fork of a parent paused inside a subgraph node keeps the child where it
//! paused — LangGraph #8458 and #6792 must not happen here), `App::update_state` (a checkpoint
//! as if a node had produced an update; `recover` continues from the node its edges lead to),
//! and `Call::start`/`resume`/`recover` with `RunOptions`.
//!
//! Every scenario runs on `MemoryStore` and `SledStore`, through the blocking and the async API.

#[cfg(feature = "postgres")]
#[path = "../../postgres_support/mod.rs"]
mod postgres_support;

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tea::prelude::*;
use tea::RunOptions;

/// Every node run: (thread, node).
static RUNS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

fn ran(ctx_thread: Option<&ThreadId>, node: &str) {
    let thread = ctx_thread.map(ToString::to_string).unwrap_or_default();
    RUNS.lock().unwrap().push((thread, node.to_owned()));
}

/// The nodes run on `thread` (exactly), in order.
fn runs_on(thread: &str) -> Vec<String> {
    RUNS.lock().unwrap().iter().filter(|(t, _)| t == thread).map(|(_, n)| n.clone()).collect()
}

/// The node runs on threads that start with `prefix`.
fn runs_under(prefix: &str) -> Vec<(String, String)> {
    RUNS.lock().unwrap().iter().filter(|(t, _)| t.starts_with(prefix)).cloned().collect()
}

// ---------------------------------------------------------------------------------------------
// A line of five nodes.

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Line {
    #[reducer(append)]
    log: Vec<String>,
    #[reducer(sum)]
    n: u64,
}

/// Nodes that record their run and log their name.
macro_rules! visits {
    ($state:ident, $update:ident, $extra:expr; $($name:ident),*) => {$(
        pub fn $name(_: &$state, ctx: &Ctx<$state>) -> $update {
            crate::ran(ctx.thread(), ctx.node().as_str());
            $extra($state::update().log(vec![ctx.node().to_string()]))
        }
    )*};
}

mod line {
    use super::*;
    visits!(Line, LineUpdate, |u: LineUpdate| u.n(1); a, b, c, d, e);
    graph! {
        pub Five for Line {
            start -> a;
            a -> b;
            b -> c;
            c -> d;
            d -> e;
            e -> end;
        }
    }
}
use line::Five;

fn sled(name: &str) -> (SledStore, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("tea-timetravel-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    (SledStore::open(&dir).unwrap(), dir)
}

/// The history's checkpoints as (id, state, next), newest first.
fn shape(history: &[Snapshot<Line>]) -> Vec<(u64, Line, Vec<NodeName>)> {
    history.iter().map(|s| (s.checkpoint, s.state.clone(), s.next.clone())).collect()
}

fn fork_three_steps_back<C: Checkpointer>(store: C, thread: &str) {
    let app = Five::builder().checkpointer(store).build();
    let thread = ThreadId::from(thread.to_owned());
    let done = app.run(Call::start(Line::default()).on(thread.clone())).unwrap().done().unwrap();
    assert_eq!(done.log, ["a", "b", "c", "d", "e"]);
    let before = shape(&app.history(&thread).unwrap());
    // Three steps back from the end: the checkpoint after `b`, before `c`.
    let back = app.history(&thread).unwrap().into_iter().find(|s| s.step == 2).expect("a checkpoint after b");
    assert_eq!(back.next, ["c"]);
    let fork = ThreadId::from(format!("{thread}-fork"));
    let first = app.fork(&thread, back.checkpoint, fork.clone()).unwrap();
    assert_eq!((first.checkpoint, first.state.clone(), first.next.clone()), (1, back.state.clone(), back.next));
    // The fork continues from there: only c, d, e run again.
    let out = app.run(Call::recover(&fork)).unwrap().done().unwrap();
    assert_eq!(out.log, ["a", "b", "c", "d", "e"]);
    assert_eq!(out.n, 5);
    assert_eq!(runs_on(fork.as_str()), ["c", "d", "e"]);
    // The original is untouched.
    assert_eq!(shape(&app.history(&thread).unwrap()), before);
    assert_eq!(runs_on(thread.as_str()), ["a", "b", "c", "d", "e"]);
    // Typed refusals.
    let again = app.fork(&thread, back.checkpoint, fork.clone());
    assert!(matches!(&again, Err(Error::ThreadExists { thread: t }) if *t == fork), "{again:?}");
    let missing = app.fork(&thread, 999, format!("{thread}-none"));
    assert!(matches!(&missing, Err(Error::NoSuchCheckpoint { checkpoint: 999, .. })), "{missing:?}");
    let nobody = app.fork(&ThreadId::from("nobody"), 1, format!("{thread}-none"));
    assert!(matches!(&nobody, Err(Error::NoSuchCheckpoint { .. })), "{nobody:?}");
    let empty = app.fork(&thread, 1, "");
    assert!(matches!(&empty, Err(Error::InvalidThreadId { .. })), "{empty:?}");
}

#[test]
fn a_fork_from_three_steps_back_reruns_only_what_follows_on_memory() {
    fork_three_steps_back(MemoryStore::new(), "tt-fork-mem");
}

#[test]
fn a_fork_from_three_steps_back_reruns_only_what_follows_on_sled() {
    let (store, dir) = sled("fork");
    fork_three_steps_back(store, "tt-fork-sled");
    let _ = std::fs::remove_dir_all(dir);
}

async fn fork_three_steps_back_async<C: Checkpointer>(store: C, thread: &str) {
    let app = Five::builder().checkpointer(store).build();
    let thread = ThreadId::from(thread.to_owned());
    app.run_async(Call::start(Line::default()).on(thread.clone())).await.unwrap().done().unwrap();
    let before = shape(&app.history(&thread).unwrap());
    let back = app.history(&thread).unwrap().into_iter().find(|s| s.step == 2).unwrap();
    let fork = ThreadId::from(format!("{thread}-fork"));
    let first = app.fork_async(&thread, back.checkpoint, fork.clone()).await.unwrap();
    assert_eq!(first.next, ["c"]);
    let out = app.run_async(Call::recover(&fork)).await.unwrap().done().unwrap();
    assert_eq!(out.log, ["a", "b", "c", "d", "e"]);
    assert_eq!(runs_on(fork.as_str()), ["c", "d", "e"]);
    assert_eq!(shape(&app.history(&thread).unwrap()), before);
}

#[tokio::test]
async fn a_fork_from_three_steps_back_through_the_async_api_on_memory() {
    fork_three_steps_back_async(MemoryStore::new(), "tt-afork-mem").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_from_three_steps_back_through_the_async_api_on_sled() {
    let (store, dir) = sled("afork");
    fork_three_steps_back_async(store, "tt-afork-sled").await;
    let _ = std::fs::remove_dir_all(dir);
}

// ---------------------------------------------------------------------------------------------
// update_state: a pause before `approve` skipped by writing approve's update; the guard on the
// new state picks the next node.

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Order {
    amount: u64,
    #[reducer(append)]
    log: Vec<String>,
}

mod orders {
    use super::*;
    visits!(Order, OrderUpdate, |u| u; plan, approve, big, small);
    fn is_big(s: &Order) -> bool {
        s.amount >= 100
    }
    graph! {
        pub Orders for Order {
            start -> plan;
            plan -> approve;
            approve -> big if is_big;
            approve -> small;
            big -> end;
            small -> end;
            interrupt_before approve;
        }
    }
    graph! {
        pub Busy for Order {
            start -> plan;
            plan -> hold;
            hold -> end;
        }
    }
    graph! {
        pub Split for Order {
            start -> plan;
            parallel plan => [ask, small] -> big;
            big -> end;
            interruptible ask;
        }
    }
}
use orders::{Busy, Orders, Split};

fn update_then_recover<C: Checkpointer>(store: C, thread: &str) {
    let app = Orders::builder().checkpointer(store).build();
    let thread = ThreadId::from(thread.to_owned());
    let (_, resume) = app.run(Call::start(Order::default()).on(thread.clone())).unwrap().interrupted().unwrap();
    let head = app.state(&thread).unwrap().unwrap();
    assert_eq!(head.next, ["approve"]);
    // A node the graph lacks: nothing written.
    let unknown = app.update_state(&thread, Order::update().amount(1), "aprove");
    assert!(matches!(&unknown, Err(Error::UnknownNode { node, .. }) if node == "aprove"), "{unknown:?}");
    assert_eq!(app.state(&thread).unwrap().unwrap().checkpoint, head.checkpoint);
    // As if `approve` had run and set the amount: its guard sends the run to `big`.
    let updated = app.update_state(&thread, Order::update().amount(250), "approve").unwrap();
    assert_eq!(updated.checkpoint, head.checkpoint + 1);
    assert_eq!(updated.next, ["big"]);
    assert_eq!(updated.step, head.step + 1);
    assert!(updated.interrupts.is_empty());
    // The pause is replaced: its token is stale.
    let stale = app.resume(resume);
    assert!(matches!(stale, Err(Error::StaleResume { .. })), "{stale:?}");
    let out = app.run(Call::recover(&thread)).unwrap().done().unwrap();
    assert_eq!(out.amount, 250);
    assert_eq!(out.log, ["plan", "big"]);
    assert_eq!(runs_on(thread.as_str()), ["plan", "big"]);
    // A finished thread can be moved on too: as if `approve` ran again with a small amount
    // (`amount` replaces).
    let again = app.update_state(&thread, Order::update().amount(5), "approve").unwrap();
    assert_eq!(again.next, ["small"]);
    let out = app.run(Call::recover(&thread)).unwrap().done().unwrap();
    assert_eq!(out.log, ["plan", "big", "small"]);
    // No thread: its own error.
    let none = app.update_state(&ThreadId::from("tt-nobody"), Order::update(), "approve");
    assert!(matches!(none, Err(Error::CheckpointNotFound { .. })), "{none:?}");
}

#[test]
fn update_state_then_recover_continues_from_the_computed_node_on_memory() {
    update_then_recover(MemoryStore::new(), "tt-update-mem");
}

#[test]
fn update_state_then_recover_continues_from_the_computed_node_on_sled() {
    let (store, dir) = sled("update");
    update_then_recover(store, "tt-update-sled");
    let _ = std::fs::remove_dir_all(dir);
}

async fn update_then_recover_async<C: Checkpointer>(store: C, thread: &str) {
    let app = Orders::builder().checkpointer(store).build();
    let thread = ThreadId::from(thread.to_owned());
    app.run_async(Call::start(Order::default()).on(thread.clone())).await.unwrap().interrupted().unwrap();
    let updated = app.update_state_async(&thread, Order::update().amount(7), "approve").await.unwrap();
    assert_eq!(updated.next, ["small"]);
    let out = app.run_async(Call::recover(&thread)).await.unwrap().done().unwrap();
    assert_eq!(out.log, ["plan", "small"]);
    assert_eq!(runs_on(thread.as_str()), ["plan", "small"]);
}

/// The async calls' futures are `Send`: a multi-threaded runtime's `spawn` takes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_async_time_travel_calls_are_send() {
    let app = std::sync::Arc::new(Orders::builder().checkpointer(MemoryStore::new()).build());
    let thread = ThreadId::from("tt-send");
    app.run_async(Call::start(Order::default()).on(thread.clone())).await.unwrap();
    let head = app.state(&thread).unwrap().unwrap().checkpoint;
    let spawned = {
        let (app, thread) = (app.clone(), thread.clone());
        tokio::spawn(async move {
            app.fork_async(&thread, head, "tt-send-fork").await?;
            app.update_state_async(&thread, Order::update().amount(1), "approve").await?;
            app.run_async(Call::recover(&thread).durability(Durability::Buffered)).await
        })
    };
    assert_eq!(spawned.await.unwrap().unwrap().done().unwrap().log, ["plan", "small"]);
}

#[tokio::test]
async fn update_state_through_the_async_api_on_memory() {
    update_then_recover_async(MemoryStore::new(), "tt-aupdate-mem").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_state_through_the_async_api_on_sled() {
    let (store, dir) = sled("aupdate");
    update_then_recover_async(store, "tt-aupdate-sled").await;
    let _ = std::fs::remove_dir_all(dir);
}

// ---------------------------------------------------------------------------------------------
// Refusals: a running thread (its lease held), a thread paused inside a fan-out.

static ENTERED: AtomicBool = AtomicBool::new(false);
static RELEASE: AtomicBool = AtomicBool::new(false);

pub fn hold(_: &Order) -> OrderUpdate {
    ENTERED.store(true, Ordering::SeqCst);
    while !RELEASE.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(5));
    }
    Order::update().log(vec!["hold".into()])
}

#[test]
fn update_state_of_a_running_thread_is_thread_busy() {
    let app = std::sync::Arc::new(Busy::builder().checkpointer(MemoryStore::new()).build());
    let thread = ThreadId::from("tt-busy");
    let running = {
        let (app, thread) = (app.clone(), thread.clone());
        std::thread::spawn(move || app.run(Call::start(Order::default()).on(thread)))
    };
    while !ENTERED.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let busy = app.update_state(&thread, Order::update().amount(1), "plan");
    assert!(matches!(&busy, Err(Error::ThreadBusy { thread: t, .. }) if *t == thread), "{busy:?}");
    // A fork of the running thread's checkpoint is a thread of its own, free at once.
    let head = app.state(&thread).unwrap().unwrap();
    app.fork(&thread, head.checkpoint, "tt-busy-fork").unwrap();
    RELEASE.store(true, Ordering::SeqCst);
    let done = running.join().unwrap().unwrap().done().unwrap();
    assert_eq!(done.log, ["plan", "hold"]);
    let forked = app.run(Call::recover(ThreadId::from("tt-busy-fork"))).unwrap().done().unwrap();
    assert_eq!(forked.log, ["plan", "hold"]);
}

pub fn ask(_: &Order, hitl: &mut Hitl) -> Result<OrderUpdate, Pause> {
    let amount: u64 = hitl.interrupt("amount?")?;
    Ok(Order::update().amount(amount))
}

#[test]
fn update_state_inside_a_paused_fan_out_is_refused() {
    let app = Split::builder().checkpointer(MemoryStore::new()).build();
    let thread = ThreadId::from("tt-split");
    let (_, resume) = app.run(Call::start(Order::default()).on(thread.clone())).unwrap().interrupted().unwrap();
    let head = app.state(&thread).unwrap().unwrap();
    let refused = app.update_state(&thread, Order::update().amount(3), "big");
    assert!(
        matches!(&refused, Err(Error::InsideFanOut { node, checkpoint, .. }) if node == "plan" && *checkpoint == head.checkpoint),
        "{refused:?}"
    );
    // Nothing was written: the token still resumes.
    let out = app.resume(resume.answer(3u64)).unwrap().done().unwrap();
    assert_eq!(out.amount, 3);
    // A fork of the paused fan-out is resumable with the fork's own token; the branch that
    // finished does not run again.
    let fork = ThreadId::from("tt-split-fork");
    app.fork(&thread, head.checkpoint, fork.clone()).unwrap();
    let (_, token) = app.run(Call::recover(&fork)).unwrap().interrupted().unwrap();
    assert_eq!(token.thread(), &fork);
    let out = app.resume(token.answer(9u64)).unwrap().done().unwrap();
    assert_eq!(out.amount, 9);
    assert_eq!(runs_on(fork.as_str()), ["big"]);
}

// ---------------------------------------------------------------------------------------------
// A parent paused inside a subgraph node, forked: the child's completed nodes do not run again
// (LangGraph #8458: time travel into a subgraph reruns it from the start; #6792: resuming inside
// a subgraph re-runs earlier tasks).

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Doc {
    draft: String,
    #[reducer(append)]
    log: Vec<String>,
    verdict: String,
}

mod docs {
    use super::*;
    visits!(Doc, DocUpdate, |u| u; check, polish, write, publish, intro, outro, side);
    fn judge(s: &Doc, hitl: &mut Hitl) -> Result<DocUpdate, Pause> {
        let verdict: String = hitl.interrupt(format!("verdict on {}?", s.draft))?;
        Ok(Doc::update().verdict(verdict).log(vec!["judge".into()]))
    }
    graph! {
        pub Reviewer for Doc {
            start -> check;
            check -> polish;
            polish -> judge;
            judge -> end;
            interruptible judge;
        }
    }
    graph! {
        pub Desk for Doc {
            start -> write;
            write -> review;
            review -> publish;
            publish -> end;
            subgraph review = Reviewer;
        }
    }
    graph! {
        /// Two levels: the pause is in `Reviewer`, inside `Desk`, inside this.
        pub Top for Doc {
            start -> intro;
            intro -> inner;
            inner -> outro;
            outro -> end;
            subgraph inner = Desk;
        }
    }
    graph! {
        /// The subgraph node in a parallel branch beside another.
        pub Wide for Doc {
            start -> write;
            parallel write => [review, side] -> publish;
            publish -> end;
            subgraph review = Reviewer;
        }
    }
}
use docs::{Desk, Top, Wide};

fn fork_inside_a_subgraph<C: Checkpointer + Clone>(store: C, thread: &str) {
    let app = Desk::builder().checkpointer(store).build();
    let thread = ThreadId::from(thread.to_owned());
    let (_, original) = app.run(Call::start(Doc::default()).on(thread.clone())).unwrap().interrupted().unwrap();
    let paused = app.state(&thread).unwrap().unwrap();
    assert_eq!(paused.subgraphs.len(), 1);
    let fork = ThreadId::from(format!("{thread}-fork"));
    let first = app.fork(&thread, paused.checkpoint, fork.clone()).unwrap();
    // The child's thread was forked along, under the fork's name.
    assert_eq!(first.subgraphs.len(), 1);
    assert!(first.subgraphs[0].thread.as_str().starts_with(&format!("{fork}/review@")), "{:?}", first.subgraphs);
    // The fork's pause has a token of its own; the original's does not resume the fork.
    let (_, token) = app.run(Call::recover(&fork)).unwrap().interrupted().unwrap();
    assert_eq!(token.thread(), &fork);
    assert_ne!(token.to_string(), original.to_string());
    let out = app.resume(token.answer("fine")).unwrap().done().unwrap();
    assert_eq!(out.verdict, "fine");
    assert_eq!(out.log, ["write", "check", "polish", "judge", "publish"]);
    // Neither the parent's nor the child's completed nodes ran again in the fork.
    let fork_runs: Vec<String> = runs_under(&format!("{fork}")).into_iter().map(|(_, n)| n).collect();
    assert_eq!(fork_runs, ["publish"]);
    // The original still waits where it was, and its own token resumes it.
    assert_eq!(app.state(&thread).unwrap().unwrap().checkpoint, paused.checkpoint);
    let out = app.resume(original.answer("bad")).unwrap().done().unwrap();
    assert_eq!(out.verdict, "bad");
    assert_eq!(out.log, ["write", "check", "polish", "judge", "publish"]);
    let own: Vec<String> = runs_under(&format!("{thread}/")).into_iter().map(|(_, n)| n).collect();
    assert_eq!(own, ["check", "polish"], "the original's child ran each node once");
    // A fork of the checkpoint the original's resume claimed the thread with (before the
    // subgraph node ran again with its answer): the fork continues a copy of the child with that
    // answer, and leaves the original's child alone.
    let original_child = paused.subgraphs[0].thread.clone();
    let child_app = docs::Reviewer::builder().checkpointer(app.checkpointer().clone()).build();
    let child_history = child_app.history(&original_child).unwrap().len();
    let claimed = app
        .history(&thread)
        .unwrap()
        .into_iter()
        .find(|s| s.checkpoint > paused.checkpoint && s.next == ["review"])
        .expect("the resume's claim");
    let mid = ThreadId::from(format!("{thread}-mid"));
    app.fork(&thread, claimed.checkpoint, mid.clone()).unwrap();
    let out = app.run(Call::recover(&mid)).unwrap().done().unwrap();
    assert_eq!(out.verdict, "bad");
    let mid_runs: Vec<String> = runs_under(&format!("{mid}")).into_iter().map(|(_, n)| n).collect();
    assert_eq!(mid_runs, ["publish"]);
    assert_eq!(child_app.history(&original_child).unwrap().len(), child_history, "the original's child untouched");
    let forked_children: Vec<ThreadId> =
        child_app.threads().unwrap().into_iter().filter(|t| t.as_str().starts_with(&format!("{mid}/"))).collect();
    assert_eq!(forked_children.len(), 1, "the fork continued a copy of the child: {forked_children:?}");
    // A fork of the same checkpoint once the original's child has moved on past its pause:
    // the child's thread is copied up to that pause, not from its head.
    let late = ThreadId::from(format!("{thread}-late"));
    app.fork(&thread, paused.checkpoint, late.clone()).unwrap();
    let (_, token) = app.run(Call::recover(&late)).unwrap().interrupted().unwrap();
    let out = app.resume(token.answer("late")).unwrap().done().unwrap();
    assert_eq!(out.verdict, "late");
    assert_eq!(out.log, ["write", "check", "polish", "judge", "publish"]);
    let late_runs: Vec<String> = runs_under(&format!("{late}")).into_iter().map(|(_, n)| n).collect();
    assert_eq!(late_runs, ["publish"]);
    // The fork deleted, and forked again under its id: the children it left are replaced.
    assert!(app.delete(&late).unwrap());
    app.fork(&thread, paused.checkpoint, late.clone()).unwrap();
    let (_, token) = app.run(Call::recover(&late)).unwrap().interrupted().unwrap();
    assert_eq!(app.resume(token.answer("again")).unwrap().done().unwrap().verdict, "again");
}

#[test]
fn a_fork_of_a_parent_paused_inside_a_subgraph_keeps_the_child_where_it_paused_on_memory() {
    fork_inside_a_subgraph(std::sync::Arc::new(MemoryStore::new()), "tt-sub-mem");
}

#[test]
fn a_fork_of_a_parent_paused_inside_a_subgraph_keeps_the_child_where_it_paused_on_sled() {
    let (store, dir) = sled("sub");
    fork_inside_a_subgraph(std::sync::Arc::new(store), "tt-sub-sled");
    let _ = std::fs::remove_dir_all(dir);
}

async fn fork_inside_a_subgraph_async<C: Checkpointer>(store: C, thread: &str) {
    let app = Desk::builder().checkpointer(store).build();
    let thread = ThreadId::from(thread.to_owned());
    app.run_async(Call::start(Doc::default()).on(thread.clone())).await.unwrap().interrupted().unwrap();
    let paused = app.state_async(&thread).await.unwrap().unwrap();
    let fork = ThreadId::from(format!("{thread}-fork"));
    app.fork_async(&thread, paused.checkpoint, fork.clone()).await.unwrap();
    let (_, token) = app.run_async(Call::recover(&fork)).await.unwrap().interrupted().unwrap();
    let out = app.resume_async(token.answer("fine")).await.unwrap().done().unwrap();
    assert_eq!(out.log, ["write", "check", "polish", "judge", "publish"]);
    let fork_runs: Vec<String> = runs_under(&format!("{fork}")).into_iter().map(|(_, n)| n).collect();
    assert_eq!(fork_runs, ["publish"]);
}

#[tokio::test]
async fn a_fork_inside_a_subgraph_through_the_async_api_on_memory() {
    fork_inside_a_subgraph_async(MemoryStore::new(), "tt-asub-mem").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_inside_a_subgraph_through_the_async_api_on_sled() {
    let (store, dir) = sled("asub");
    fork_inside_a_subgraph_async(store, "tt-asub-sled").await;
    let _ = std::fs::remove_dir_all(dir);
}

/// Forks the paused head of `thread` into `fork`, resumes the fork, and returns its final log
/// and the nodes that ran on its threads.
fn fork_paused_and_resume<G: tea::SyncGraph<State = Doc>, C: Checkpointer>(
    app: &App<G, C>,
    thread: &ThreadId,
    fork: &ThreadId,
) -> (Vec<String>, Vec<String>) {
    let paused = app.state(thread).unwrap().unwrap();
    let (_, original) = app.run(Call::recover(thread)).unwrap().interrupted().unwrap();
    let first = app.fork(thread, paused.checkpoint, fork.clone()).unwrap();
    assert!(!first.subgraphs.is_empty());
    for child in &first.subgraphs {
        assert!(child.thread.as_str().starts_with(&format!("{fork}/")), "{:?}", first.subgraphs);
    }
    let (_, token) = app.run(Call::recover(fork)).unwrap().interrupted().unwrap();
    let out = app.resume(token.answer("ok")).unwrap().done().unwrap();
    assert_eq!(out.verdict, "ok");
    // The original's children were not touched by the fork's resume: its own answer lands.
    let theirs = app.resume(original.answer("orig")).unwrap().done().unwrap();
    assert_eq!(theirs.verdict, "orig");
    (out.log, runs_under(fork.as_str()).into_iter().map(|(_, n)| n).collect())
}

fn forks_two_levels_and_in_a_branch<C: Checkpointer + Clone>(store: C, thread: &str) {
    let top = Top::builder().checkpointer(store.clone()).build();
    let t = ThreadId::from(format!("{thread}-top"));
    top.run(Call::start(Doc::default()).on(t.clone())).unwrap().interrupted().unwrap();
    let (log, runs) = fork_paused_and_resume(&top, &t, &ThreadId::from(format!("{thread}-topfork")));
    assert_eq!(log, ["intro", "write", "check", "polish", "judge", "publish", "outro"]);
    assert_eq!(runs, ["publish", "outro"], "no node of either child ran again");

    let wide = Wide::builder().checkpointer(store).build();
    let w = ThreadId::from(format!("{thread}-wide"));
    wide.run(Call::start(Doc::default()).on(w.clone())).unwrap().interrupted().unwrap();
    let (log, runs) = fork_paused_and_resume(&wide, &w, &ThreadId::from(format!("{thread}-widefork")));
    assert!(log.contains(&"judge".to_owned()) && log.ends_with(&["publish".to_owned()]), "{log:?}");
    assert_eq!(runs, ["publish"], "neither the child's nodes nor the finished branch ran again");
}

#[test]
fn forks_of_a_pause_two_subgraph_levels_deep_and_in_a_branch_on_memory() {
    forks_two_levels_and_in_a_branch(std::sync::Arc::new(MemoryStore::new()), "tt-deep-mem");
}

#[test]
fn forks_of_a_pause_two_subgraph_levels_deep_and_in_a_branch_on_sled() {
    let (store, dir) = sled("deep");
    forks_two_levels_and_in_a_branch(std::sync::Arc::new(store), "tt-deep-sled");
    let _ = std::fs::remove_dir_all(dir);
}

// ---------------------------------------------------------------------------------------------
// update_state as a node that fans out by sends: an update sends nothing, so the run goes on at
// the join.

mod sends {
    use super::*;
    pub fn plan(_: &Order, ctx: &Ctx<Order>) -> Command<FanNode> {
        crate::ran(ctx.thread(), "plan");
        Command::send([tea::SendTo::new(FanNode::Worker, Order::update().amount(1))])
    }
    visits!(Order, OrderUpdate, |u| u; worker, join);
    graph! {
        pub Fan for Order {
            start -> plan;
            parallel plan => worker* -> join;
            join -> end;
            interrupt_before plan;
        }
    }
}

#[test]
fn update_state_as_a_sending_node_goes_on_at_its_join() {
    let app = sends::Fan::builder().checkpointer(MemoryStore::new()).build();
    let thread = ThreadId::from("tt-sends");
    app.run(Call::start(Order::default()).on(thread.clone())).unwrap().interrupted().unwrap();
    let updated = app.update_state(&thread, Order::update().amount(40), "plan").unwrap();
    assert_eq!(updated.next, ["join"]);
    let out = app.run(Call::recover(&thread)).unwrap().done().unwrap();
    assert_eq!(out.amount, 40);
    assert_eq!(runs_on(thread.as_str()), ["join"]);
}

// ---------------------------------------------------------------------------------------------
// Durability per call.

fn durability_per_call<C: Checkpointer>(store: C, thread: &str) {
    let app = Five::builder().checkpointer(store).build(); // EveryStep
    let every = ThreadId::from(format!("{thread}-every"));
    let cheap = ThreadId::from(format!("{thread}-cheap"));
    app.run(Call::start(Line::default()).on(every.clone())).unwrap().done().unwrap();
    let on_pause = RunOptions::new().durability(Durability::OnPause);
    let out =
        app.run(Call::start(Line::default()).on(cheap.clone()).options(on_pause.clone())).unwrap().done().unwrap();
    assert_eq!(out.n, 5);
    let (every_n, cheap_n) = (app.history(&every).unwrap().len(), app.history(&cheap).unwrap().len());
    assert!(every_n >= 6, "{every_n}");
    assert_eq!(cheap_n, 2, "the start and the end only");
    // The app's own durability is unchanged for the next call.
    let later = ThreadId::from(format!("{thread}-later"));
    app.run(Call::start(Line::default()).on(later.clone()).options(RunOptions::new())).unwrap();
    assert_eq!(app.history(&later).unwrap().len(), every_n);
    // Streams too.
    let streamed = ThreadId::from(format!("{thread}-stream"));
    let events: Vec<_> =
        app.run_stream(Call::start(Line::default()).on(streamed.clone()).options(on_pause.clone())).collect();
    assert!(events.iter().all(Result::is_ok) && events.len() == 6, "{} events", events.len());
    assert_eq!(app.history(&streamed).unwrap().len(), 2);
    // A recover with options of a finished thread reports it.
    assert_eq!(app.run(Call::recover(&cheap).options(on_pause)).unwrap().done().unwrap().n, 5);
}

#[test]
fn durability_chosen_per_call_on_memory() {
    durability_per_call(MemoryStore::new(), "tt-dur-mem");
}

#[test]
fn durability_chosen_per_call_on_sled() {
    let (store, dir) = sled("dur");
    durability_per_call(store, "tt-dur-sled");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn resume_with_writes_as_its_options_say() {
    let app = Orders::builder().checkpointer(MemoryStore::new()).build();
    let (a, b) = (ThreadId::from("tt-res-a"), ThreadId::from("tt-res-b"));
    let (_, ra) = app.run(Call::start(Order::default()).on(a.clone())).unwrap().interrupted().unwrap();
    let (_, rb) = app.run(Call::start(Order::default()).on(b.clone())).unwrap().interrupted().unwrap();
    app.resume(ra).unwrap().done().unwrap();
    app.run(Call::resume(rb).durability(Durability::OnPause)).unwrap().done().unwrap();
    assert!(app.history(&b).unwrap().len() < app.history(&a).unwrap().len());
    let c = ThreadId::from("tt-res-c");
    let (_, rc) = app.run(Call::start(Order::default()).on(c.clone())).unwrap().interrupted().unwrap();
    let on_pause = RunOptions::new().durability(Durability::OnPause);
    assert!(app.run_stream(Call::resume(rc).options(on_pause)).all(|e| e.is_ok()));
    assert_eq!(app.history(&c).unwrap().len(), app.history(&b).unwrap().len());
}

#[tokio::test]
async fn durability_chosen_per_call_through_the_async_api() {
    let app = Five::builder().checkpointer(MemoryStore::new()).build();
    let on_pause = RunOptions::new().durability(Durability::OnPause);
    let thread = ThreadId::from("tt-adur");
    let out = app
        .run_async(Call::start(Line::default()).on(thread.clone()).options(on_pause.clone()))
        .await
        .unwrap()
        .done()
        .unwrap();
    assert_eq!(out.n, 5);
    assert_eq!(app.history(&thread).unwrap().len(), 2);
    assert!(app.run_async(Call::start(Line::default()).options(on_pause.clone())).await.unwrap().done().is_some());
    assert_eq!(app.run_async(Call::recover(&thread).options(on_pause.clone())).await.unwrap().done().unwrap().n, 5);
    use futures::StreamExt;
    let streamed = ThreadId::from("tt-adur-stream");
    let events: Vec<_> = app
        .run_stream_async(Call::start(Line::default()).on(streamed.clone()).options(on_pause.clone()))
        .collect()
        .await;
    assert_eq!(events.len(), 6);
    assert_eq!(app.history(&streamed).unwrap().len(), 2);
    let orders = Orders::builder().checkpointer(MemoryStore::new()).build();
    let paused = ThreadId::from("tt-adur-resume");
    let (_, resume) =
        orders.run_async(Call::start(Order::default()).on(paused.clone())).await.unwrap().interrupted().unwrap();
    let before = orders.history(&paused).unwrap().len();
    let events: Vec<_> = orders.run_stream_async(Call::resume(resume).options(on_pause)).collect().await;
    assert!(events.iter().all(Result::is_ok), "{events:?}");
    assert_eq!(orders.history(&paused).unwrap().len(), before + 2, "the claim and the end only");
}

// ---------------------------------------------------------------------------------------------
// The same on PostgreSQL (skipped, with a note, without a server: `TEA_TEST_POSTGRES_URL`).

#[cfg(feature = "postgres")]
#[test]
fn fork_update_state_and_subgraph_forks_on_postgres() {
    let Some(schema) = postgres_support::TestSchema::new("time_travel") else { return };
    fork_three_steps_back(schema.store(), "tt-fork-pg");
    update_then_recover(schema.store(), "tt-update-pg");
    fork_inside_a_subgraph(std::sync::Arc::new(schema.store()), "tt-sub-pg");
    durability_per_call(schema.store(), "tt-dur-pg");
}
