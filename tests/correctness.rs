//! Regression tests for the engine's guarantees under races and hostile input: one test (at
//! least) per way the engine was once found to lose a thread, run a node twice, or crash on
//! stored bytes or odd values. Crashes of whole processes are in `tests/crash.rs`.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tea::prelude::*;
use tea::{Checkpointer, Ctx, Hitl, Pause, ThreadId};

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
pub struct Doc {
    #[reducer(append)]
    trail: Vec<String>,
    error: Option<String>,
    score: f64,
    #[reducer(append)]
    seen: Vec<String>,
    answer: String,
    #[reducer(sum)]
    loops: u32,
    #[reducer(with = picky)]
    picky: u32,
}

/// A reducer that panics on the value 13.
fn picky(current: &mut u32, new: u32) {
    assert!(new != 13, "picky refuses 13");
    *current += new;
}

/// How many times each node ran, per thread (tests run in parallel: each uses its own thread id).
static RUNS: Mutex<Option<HashMap<(String, String), usize>>> = Mutex::new(None);

fn ran(ctx: &Ctx<Doc>) {
    let thread = ctx.thread().map_or_else(String::new, |t| t.to_string());
    *RUNS.lock().unwrap().get_or_insert_with(HashMap::new).entry((thread, ctx.node().to_string())).or_default() += 1;
}

fn runs(thread: &str, node: &str) -> usize {
    RUNS.lock()
        .unwrap()
        .get_or_insert_with(HashMap::new)
        .get(&(thread.to_owned(), node.to_owned()))
        .copied()
        .unwrap_or(0)
}

fn step(name: &str) -> DocUpdate {
    Doc::update().trail(vec![name.to_owned()])
}

#[track_caller]
fn paused(outcome: Result<Outcome<Doc>, Error>) -> (Doc, Resume<Doc>) {
    match outcome {
        Ok(Outcome::Interrupted { state, resume }) => (state, resume),
        other => panic!("expected a pause, got {other:?}"),
    }
}

#[track_caller]
fn done(outcome: Result<Outcome<Doc>, Error>) -> Doc {
    match outcome {
        Ok(Outcome::Done(state)) => state,
        other => panic!("expected the end, got {other:?}"),
    }
}

/// `a -> b -> c`, where `b` fails for threads whose id starts with `fail-b` on their first run.
mod line {
    use super::*;

    pub fn a(_: &Doc, ctx: &Ctx<Doc>) -> DocUpdate {
        ran(ctx);
        step("a")
    }
    pub fn b(_: &Doc, ctx: &Ctx<Doc>) -> Result<DocUpdate, String> {
        ran(ctx);
        let thread = ctx.thread().map(ToString::to_string).unwrap_or_default();
        if thread.starts_with("fail-b") && runs(&thread, "b") == 1 {
            return Err("b fails once".into());
        }
        Ok(step("b"))
    }
    pub fn c(_: &Doc, ctx: &Ctx<Doc>) -> DocUpdate {
        ran(ctx);
        step("c")
    }
    pub fn d(_: &Doc, ctx: &Ctx<Doc>) -> DocUpdate {
        ran(ctx);
        step("d")
    }

    graph! {
        pub Line for Doc {
            start -> a;
            a -> b;
            b -> c;
            c -> d;
            d -> end;
            interrupt_before c;
        }
    }
}
use line::Line;

#[test]
fn sixty_four_concurrent_recovers_run_the_rest_of_a_stopped_thread_once() {
    let app = Line::builder().checkpointer(MemoryStore::new()).build();
    let t = "fail-b-race";
    assert!(matches!(app.run(Call::start(Doc::default()).on(t)), Err(Error::NodeFailed { .. })));
    let results: Vec<Result<Outcome<Doc>, Error>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..64).map(|_| scope.spawn(|| app.run(Call::recover(ThreadId::from(t))))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let paused = results.iter().filter(|r| matches!(r, Ok(Outcome::Interrupted { .. }))).count();
    let busy = results.iter().filter(|r| matches!(r, Err(Error::ThreadBusy { .. }))).count();
    // The winner runs b and pauses before c; a recover that reads that pause returns it.
    assert!(paused >= 1, "{results:?}");
    assert_eq!(paused + busy, 64, "every other recover is ThreadBusy: {results:?}");
    assert_eq!(runs(t, "b"), 2, "one failed run and one recovered run of b");
    assert_eq!(runs(t, "a"), 1);
    assert_eq!(runs(t, "c"), 0);
}

#[test]
fn a_live_run_is_never_taken_over_and_a_resume_racing_recovers_runs_each_node_once() {
    let app = Line::builder().checkpointer(MemoryStore::new()).build();
    for round in 0..8 {
        let t = format!("race-{round}");
        let (_, resume) = paused(app.run(Call::start(Doc::default()).on(t.as_str())));
        let results: Vec<Result<Outcome<Doc>, Error>> = std::thread::scope(|scope| {
            let mut handles = vec![scope.spawn(|| app.resume(resume))];
            for _ in 0..7 {
                handles.push(scope.spawn(|| app.run(Call::recover(ThreadId::from(t.as_str())))));
            }
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(matches!(results[0], Ok(Outcome::Done(_))), "the resume proceeds: {results:?}");
        for other in &results[1..] {
            assert!(
                matches!(other, Ok(Outcome::Interrupted { .. } | Outcome::Done(_)) | Err(Error::ThreadBusy { .. })),
                "a recover sees the pause, the live run, or the end: {other:?}"
            );
        }
        assert_eq!((runs(&t, "c"), runs(&t, "d")), (1, 1), "round {round}: {results:?}");
    }
}

/// `slow` waits on a channel, so a test can hold a run in the middle of a node.
mod slow {
    use super::*;
    use std::sync::mpsc::{Receiver, Sender};

    pub static GATE: Mutex<Option<(Sender<()>, Receiver<()>)>> = Mutex::new(None);

    pub fn begin(_: &Doc, ctx: &Ctx<Doc>) -> DocUpdate {
        ran(ctx);
        step("begin")
    }
    pub fn slow(_: &Doc, ctx: &Ctx<Doc>) -> DocUpdate {
        ran(ctx);
        let (entered, release) = GATE.lock().unwrap().take().expect("the test set the gate");
        entered.send(()).unwrap();
        release.recv().unwrap();
        step("slow")
    }

    graph! {
        pub Slow for Doc {
            start -> begin;
            begin -> slow;
            slow -> end;
        }
    }
}

#[test]
fn recover_of_a_running_thread_is_thread_busy_until_it_finishes() {
    let app = slow::Slow::builder().checkpointer(MemoryStore::new()).build();
    let (entered_tx, entered_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel();
    *slow::GATE.lock().unwrap() = Some((entered_tx, release_rx));
    std::thread::scope(|scope| {
        let running = scope.spawn(|| app.run(Call::start(Doc::default()).on("live")));
        entered_rx.recv().unwrap();
        match app.run(Call::recover(ThreadId::from("live"))) {
            Err(Error::ThreadBusy { thread, expires_in }) => {
                assert_eq!(thread, ThreadId::from("live"));
                assert!(expires_in <= tea::DEFAULT_LEASE && expires_in > Duration::ZERO);
            }
            other => panic!("a live run is not taken over: {other:?}"),
        }
        release_tx.send(()).unwrap();
        assert_eq!(done(running.join().unwrap()).trail, ["begin", "slow"]);
    });
    assert_eq!(done(app.run(Call::recover(ThreadId::from("live")))).trail, ["begin", "slow"]);
    assert_eq!(runs("live", "slow"), 1);
}

#[test]
fn dropping_an_unpolled_resumed_stream_changes_nothing() {
    let app = Line::builder().checkpointer(MemoryStore::new()).build();
    let t = ThreadId::from("unpolled");
    let (_, resume) = paused(app.run(Call::start(Doc::default()).on(t.clone())));
    let before = app.history(&t).unwrap().len();
    for _ in 0..5 {
        drop(app.run_stream(Call::resume(resume.clone())));
    }
    assert_eq!(app.history(&t).unwrap().len(), before, "nothing was claimed, nothing is written");
    assert_eq!(done(app.resume(resume)).trail, ["a", "b", "c", "d"]);
}

/// `prep` sets `error`; branch `clear` writes `error: None`, branch `ask` pauses.
mod nulls {
    use super::*;

    pub fn prep(_: &Doc) -> DocUpdate {
        Doc::update().error(Some("stale".into()))
    }
    pub fn clear(_: &Doc) -> DocUpdate {
        Doc::update().error(None)
    }
    pub fn ask(_: &Doc, hitl: &mut Hitl) -> Result<DocUpdate, Pause> {
        let answer: String = hitl.interrupt("?")?;
        Ok(Doc::update().answer(answer))
    }
    pub fn also_clear(_: &Doc) -> DocUpdate {
        Doc::update().error(None)
    }
    pub fn join(_: &Doc) -> DocUpdate {
        Doc::update()
    }

    graph! {
        pub Nulls for Doc {
            start -> prep;
            parallel prep => [clear, ask] -> join;
            join -> end;
            interruptible ask;
        }
    }

    graph! {
        pub NullConflict for Doc {
            start -> prep;
            parallel prep => [clear, also_clear, ask] -> join;
            join -> end;
            interruptible ask;
        }
    }
}

#[test]
fn a_branch_writing_none_keeps_its_write_across_a_sibling_pause_and_conflicts_like_any_write() {
    let store = MemoryStore::new();
    let app = nulls::Nulls::builder().checkpointer(store.clone()).build();
    let (_, resume) = paused(app.invoke(Doc::default()));
    let out = done(app.resume(resume.answer("yes")));
    assert_eq!(out.error, None, "the branch's None was kept");
    assert_eq!(out.answer, "yes");

    let app = nulls::NullConflict::builder().checkpointer(store).build();
    let (_, resume) = paused(app.invoke(Doc::default()));
    match app.resume(resume.answer("yes")) {
        Err(Error::ConflictingWrites { field, branches }) => {
            assert_eq!(field, "error");
            assert_eq!(branches, ["clear", "also_clear"]);
        }
        other => panic!("two branches writing None conflict: {other:?}"),
    }
}

/// `divide` writes the square root of -1 (NaN) into `score`, then the run pauses.
mod nan {
    use super::*;

    pub fn divide(s: &Doc) -> DocUpdate {
        Doc::update().score((s.score - 1.0).sqrt())
    }
    pub fn after(_: &Doc) -> DocUpdate {
        step("after")
    }

    graph! {
        pub Nan for Doc {
            start -> divide;
            divide -> after;
            after -> end;
            interrupt_before after;
        }
    }
}

/// A fan-out whose second branch, `divide`, writes NaN into `score` while its sibling does not.
mod nan_branch {
    use super::*;

    pub fn split(_: &Doc) -> DocUpdate {
        step("split")
    }
    pub fn left(_: &Doc) -> DocUpdate {
        step("left")
    }
    pub fn join(_: &Doc) -> DocUpdate {
        step("join")
    }
    use super::nan::divide;

    graph! {
        pub NanBranch for Doc {
            start -> split;
            parallel split => [left, divide] -> join;
            join -> end;
        }
    }
}

#[test]
fn a_nan_in_a_branchs_update_is_refused_naming_the_branch_and_the_field() {
    for durability in [Durability::EveryStep, Durability::Buffered] {
        let app = nan_branch::NanBranch::builder().checkpointer(MemoryStore::new()).durability(durability).build();
        let t = ThreadId::from("nan-branch");
        match app.run(Call::start(Doc::default()).on(t.clone())) {
            Err(Error::StateNotStorable { thread, path, reason, .. }) => {
                assert_eq!(thread, t);
                // The branch's own record names it; a branch that finished in the fan-out's
                // first 100 µs is left to the join's checkpoint, which names the field in the
                // merged state.
                assert!(
                    path == "at.fork.branches[1].updates[0].score" || path == "state.score",
                    "{durability:?}: {path}"
                );
                assert!(reason.contains("NaN"), "{reason}");
            }
            other => panic!("{durability:?}: expected StateNotStorable, got {other:?}"),
        }
        // What the store holds still reads back.
        for snapshot in app.history(&t).unwrap() {
            assert!(snapshot.interrupts.is_empty());
        }
    }
}

#[test]
fn a_nan_in_the_state_is_refused_naming_the_field_and_no_token_is_handed_out() {
    for durability in [Durability::EveryStep, Durability::OnPause] {
        let store = MemoryStore::new();
        let app = nan::Nan::builder().checkpointer(store).durability(durability).build();
        let t = ThreadId::from("nan");
        match app.run(Call::start(Doc::default()).on(t.clone())) {
            Err(Error::StateNotStorable { node, thread, path, reason }) => {
                assert_eq!(node, "divide");
                assert_eq!(thread, t);
                assert_eq!(path, "state.score");
                assert!(reason.contains("NaN"), "{reason}");
            }
            other => panic!("{durability:?}: expected StateNotStorable, got {other:?}"),
        }
        // What the store holds still reads back.
        for snapshot in app.history(&t).unwrap() {
            assert!(snapshot.interrupts.is_empty());
        }
    }
    // An infinity in the input is refused before the run writes anything.
    let store = MemoryStore::new();
    let app = nan::Nan::builder().checkpointer(store.clone()).build();
    let input = Doc { score: f64::INFINITY, ..Doc::default() };
    assert!(matches!(app.run(Call::start(input).on("inf")), Err(Error::StateNotStorable { .. })));
    assert!(app.history(&ThreadId::from("inf")).unwrap().is_empty());
}

/// A join that reads its branches, behind a breakpoint, as an interruptible node, or failing once.
mod joins {
    use super::*;

    pub fn fan(_: &Doc) -> DocUpdate {
        step("fan")
    }
    pub fn left(_: &Doc) -> DocUpdate {
        step("left")
    }
    pub fn right(_: &Doc) -> DocUpdate {
        step("right")
    }
    pub fn heads(ctx: &Ctx<Doc>) -> Vec<String> {
        ctx.branches().iter().map(|b| format!("{}:{}", b.head(), b.state().trail.join("+"))).collect()
    }
    pub fn join(_: &Doc, ctx: &Ctx<Doc>) -> DocUpdate {
        Doc::update().seen(heads(ctx))
    }
    pub fn ask_join(_: &Doc, ctx: &Ctx<Doc>, hitl: &mut Hitl) -> Result<DocUpdate, Pause> {
        let pick: String = hitl.interrupt(heads(ctx))?;
        Ok(Doc::update().seen(heads(ctx)).answer(pick))
    }
    pub fn flaky_join(_: &Doc, ctx: &Ctx<Doc>) -> Result<DocUpdate, String> {
        ran(ctx);
        if runs("flaky-join", "flaky_join") == 1 {
            return Err("the join fails once".into());
        }
        Ok(Doc::update().seen(heads(ctx)))
    }

    graph! {
        pub Before for Doc {
            start -> fan;
            parallel fan => [left, right] -> join;
            join -> end;
            interrupt_before join;
        }
    }
    graph! {
        pub Asking for Doc {
            start -> fan;
            parallel fan => [left, right] -> ask_join;
            ask_join -> end;
            interruptible ask_join;
        }
    }
    graph! {
        pub Flaky for Doc {
            start -> fan;
            parallel fan => [left, right] -> flaky_join;
            flaky_join -> end;
        }
    }
}

const BRANCHES: [&str; 2] = ["left:fan+left", "right:fan+right"];

#[test]
fn a_join_sees_its_branches_after_a_pause_before_it() {
    let store = MemoryStore::new();
    let app = joins::Before::builder().checkpointer(store.clone()).build();
    let (_, resume) = paused(app.invoke(Doc::default()));
    // Another app on the same store: the branches come from the checkpoint, not from memory.
    let other = joins::Before::builder().checkpointer(store).build();
    assert_eq!(done(other.resume(resume.to_string().parse().unwrap())).seen, BRANCHES);
}

#[test]
fn an_interruptible_join_sees_its_branches_when_it_asks_and_when_it_resumes() {
    let app = joins::Asking::builder().checkpointer(MemoryStore::new()).build();
    let (_, resume) = paused(app.invoke(Doc::default()));
    assert_eq!(resume.interrupts()[0].value(), &serde_json::json!(BRANCHES));
    let out = done(app.resume(resume.answer("left")));
    assert_eq!(out.seen, BRANCHES);
    assert_eq!(out.answer, "left");
}

#[test]
fn a_recovered_join_sees_its_branches() {
    let app = joins::Flaky::builder().checkpointer(MemoryStore::new()).build();
    assert!(matches!(app.run(Call::start(Doc::default()).on("flaky-join")), Err(Error::NodeFailed { .. })));
    assert_eq!(done(app.run(Call::recover(ThreadId::from("flaky-join")))).seen, BRANCHES);
}

/// A fan-out nested inside a branch, whose join reads its branches.
mod nested {
    use super::*;

    pub fn fan(_: &Doc) -> DocUpdate {
        step("fan")
    }
    pub fn inner_fan(_: &Doc) -> DocUpdate {
        step("inner_fan")
    }
    pub fn x(_: &Doc) -> DocUpdate {
        step("x")
    }
    pub fn y(_: &Doc) -> DocUpdate {
        step("y")
    }
    pub fn inner_join(_: &Doc, ctx: &Ctx<Doc>) -> DocUpdate {
        Doc::update().seen(joins::heads(ctx))
    }
    pub fn other(_: &Doc) -> DocUpdate {
        step("other")
    }
    pub fn join(_: &Doc) -> DocUpdate {
        step("join")
    }

    graph! {
        pub Nested for Doc {
            start -> fan;
            parallel fan => [inner_fan, other] -> join;
            parallel inner_fan => [x, y] -> inner_join;
            inner_join -> join;
            join -> end;
        }
    }
}

#[test]
fn the_join_of_a_fan_out_nested_in_a_branch_sees_its_branches() {
    let app = nested::Nested::builder().build();
    let out = app.invoke(Doc::default()).unwrap();
    assert_eq!(out.seen, ["x:fan+inner_fan+x", "y:fan+inner_fan+y"]);
}

/// A branch that loops through a question: each resume runs one node.
mod looping {
    use super::*;

    pub fn fan(_: &Doc) -> DocUpdate {
        Doc::update()
    }
    pub fn quiz(_: &Doc, hitl: &mut Hitl) -> Result<DocUpdate, Pause> {
        let _: String = hitl.interrupt("again?")?;
        Ok(Doc::update().loops(1))
    }
    pub fn idle(_: &Doc) -> DocUpdate {
        Doc::update()
    }
    pub fn more(s: &Doc) -> bool {
        s.loops < 8
    }
    pub fn join(_: &Doc) -> DocUpdate {
        Doc::update()
    }

    graph! {
        pub Looping for Doc {
            start -> fan;
            parallel fan => [quiz, idle] -> join;
            quiz -> quiz if more;
            quiz -> join;
            join -> end;
            interruptible quiz;
        }
    }
}

#[test]
fn a_branch_looping_through_a_question_counts_each_invocation_against_the_limit() {
    let app = looping::Looping::builder().checkpointer(MemoryStore::new()).recursion_limit(5).build();
    let (_, mut resume) = paused(app.invoke(Doc::default()));
    for turn in 0..7 {
        let (_, next) = paused(app.resume(resume.answer("yes")));
        assert_eq!(next.interrupts()[0].node(), "quiz", "turn {turn}");
        resume = next;
    }
    let out = done(app.resume(resume.answer("yes")));
    assert_eq!(out.loops, 8);
}

/// A node whose panic payload panics again when dropped.
mod bomb {
    use super::*;

    pub struct Bomb;
    impl Drop for Bomb {
        fn drop(&mut self) {
            panic!("the payload explodes when dropped");
        }
    }

    pub fn boom(_: &Doc) -> DocUpdate {
        std::panic::panic_any(Bomb)
    }

    graph! {
        pub Boom for Doc {
            start -> boom;
            boom -> end;
        }
    }
}

#[test]
fn a_panic_whose_payload_panics_on_drop_does_not_escape() {
    let app = bomb::Boom::builder().build();
    for _ in 0..3 {
        match app.invoke(Doc::default()) {
            Err(Error::NodePanicked { node, message }) => {
                assert_eq!(node, "boom");
                assert_eq!(message, "(a panic without a message)");
            }
            other => panic!("expected NodePanicked, got {other:?}"),
        }
    }
}

/// `x` writes 13 to `picky` (whose reducer panics on 13); `x2` follows it in the branch.
mod blame {
    use super::*;

    pub fn fan(_: &Doc) -> DocUpdate {
        Doc::update()
    }
    pub fn x(_: &Doc) -> DocUpdate {
        Doc::update().picky(13)
    }
    pub fn x2(_: &Doc) -> DocUpdate {
        step("x2")
    }
    pub fn y(_: &Doc) -> DocUpdate {
        Doc::update()
    }
    pub fn join(_: &Doc) -> DocUpdate {
        Doc::update()
    }

    graph! {
        pub Blame for Doc {
            start -> fan;
            parallel fan => [x, y] -> join;
            x -> x2;
            x2 -> join;
            join -> end;
        }
    }
    graph! {
        pub BlameAtJoin for Doc {
            start -> fan;
            parallel fan => [x, y] -> join;
            join -> end;
        }
    }
}

#[test]
fn a_panicking_reducer_is_blamed_on_the_node_whose_update_it_was() {
    for result in [
        blame::Blame::builder().build().invoke(Doc::default()),
        blame::BlameAtJoin::builder().build().invoke(Doc::default()),
    ] {
        match result {
            Err(Error::NodePanicked { node, message }) => {
                assert_eq!(node, "x");
                assert!(message.contains("picky refuses 13"), "{message}");
            }
            other => panic!("expected NodePanicked on x, got {other:?}"),
        }
    }
}

/// Rewrites the payload of an envelope (a serde_json value), fixing its length and checksum as a
/// careful forger would.
fn forge(envelope: &[u8], edit: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
    let name_len = u16::from_le_bytes([envelope[6], envelope[7]]) as usize;
    let start = 32 + name_len;
    let mut payload: serde_json::Value = serde_json::from_slice(&envelope[start..]).unwrap();
    edit(&mut payload);
    let payload = serde_json::to_vec(&payload).unwrap();
    let mut out = envelope[..start].to_vec();
    out.extend_from_slice(&payload);
    out[24..28].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&out[..28]);
    hasher.update(&out[32..]);
    let checksum = hasher.finalize();
    out[28..32].copy_from_slice(&checksum.to_le_bytes());
    out
}

#[test]
fn impossible_checkpoints_with_valid_checksums_are_corrupt_everywhere_they_are_read() {
    type Edit = fn(&mut serde_json::Value);
    let edits: [(&str, Edit); 5] = [
        ("a step near u64::MAX", |p| p["step"] = serde_json::json!(u64::MAX - 1)),
        ("a node the graph lacks", |p| p["at"] = serde_json::json!({ "before": "nowhere" })),
        ("an unknown routing target", |p| {
            p["at"] = serde_json::json!({ "after": { "node": "b", "goto": { "node": "zz" } } })
        }),
        ("a finished run with pauses", |p| p["at"] = serde_json::json!("done")),
        ("a pause record without pauses", |p| {
            p["pending"] = serde_json::json!([]);
        }),
    ];
    for (what, edit) in edits {
        let store = MemoryStore::new();
        let app = Line::builder().checkpointer(store.clone()).build();
        let t = ThreadId::from("forged");
        let (_, resume) = paused(app.run(Call::start(Doc::default()).on(t.clone())));
        let (head, bytes) = store.head("Line", &t).unwrap().unwrap();
        let forged = forge(&bytes, edit);
        assert_eq!(store.append("Line", &t, Some(head), head + 1, &forged, true).unwrap(), tea::AppendOutcome::Written);
        let corrupt = |result: Result<(), Error>, call: &str| match result {
            Err(Error::CorruptCheckpoint { reason, .. }) => reason,
            other => panic!("{what}: {call} gave {other:?}"),
        };
        corrupt(app.state(&t).map(drop), "state");
        corrupt(app.history(&t).map(drop), "history");
        corrupt(app.run(Call::recover(&t)).map(drop), "recover");
        let resumed = app.resume(resume.clone()).map(drop);
        assert!(
            matches!(resumed, Err(Error::CorruptCheckpoint { .. } | Error::StaleResume { .. })),
            "{what}: resume gave {resumed:?}"
        );
    }
}

#[test]
fn a_token_of_a_deleted_thread_never_resumes_a_new_thread_of_the_same_id() {
    let app = Line::builder().checkpointer(MemoryStore::new()).build();
    let t = ThreadId::from("reborn");
    let (_, old) = paused(app.run(Call::start(Doc::default()).on(t.clone())));
    assert!(app.delete(&t).unwrap());
    // The new thread pauses at the same node and the same checkpoint number.
    let (_, new) = paused(app.run(Call::start(Doc::default()).on(t.clone())));
    assert_eq!(new.checkpoint(), old.checkpoint());
    assert!(matches!(app.resume(old), Err(Error::StaleResume { .. })), "the old token is spent with its thread");
    assert_eq!(done(app.resume(new)).trail, ["a", "b", "c", "d"]);
}

/// `a -> b -> c` on a manual clock, for what a run's lease holds while its nodes run: `a` moves
/// the clock on by what its thread's entry in `LATE` says (a slow node), `b` tries `recover` of
/// its own thread through another app on the same store and records the answer. Each thread
/// has a store and clock of its own (tests run at once).
mod leased {
    use super::*;

    /// The store and clock of each thread's apps.
    static WORLDS: Mutex<Option<HashMap<String, (MemoryStore, tea::Clock)>>> = Mutex::new(None);
    /// How long `a` takes on the clock, per thread.
    pub static LATE: Mutex<Option<HashMap<String, Duration>>> = Mutex::new(None);
    /// What `recover` from inside `b` gave, per thread: `true` for `ThreadBusy`.
    pub static BUSY: Mutex<Option<HashMap<String, bool>>> = Mutex::new(None);

    /// The store and clock of `thread`'s apps.
    pub fn world(thread: &str) -> (MemoryStore, tea::Clock) {
        let mut worlds = WORLDS.lock().unwrap();
        let worlds = worlds.get_or_insert_with(HashMap::new);
        let world = worlds
            .entry(thread.to_owned())
            .or_insert_with(|| (MemoryStore::new(), tea::Clock::manual(std::time::SystemTime::now())));
        world.clone()
    }

    /// An app on `thread`'s store and clock, with a lease of 60 s.
    pub fn app(thread: &str, durability: tea::Durability) -> tea::App<Leased, MemoryStore> {
        let (store, clock) = world(thread);
        Leased::builder()
            .checkpointer(store.clone())
            .clock(clock.clone())
            .lease(Duration::from_secs(60))
            .durability(durability)
            .build()
    }

    fn thread_of(ctx: &Ctx<Doc>) -> String {
        ctx.thread().map(ToString::to_string).unwrap_or_default()
    }

    pub fn a(_: &Doc, ctx: &Ctx<Doc>) -> DocUpdate {
        let thread = thread_of(ctx);
        let late = LATE.lock().unwrap().get_or_insert_with(HashMap::new).get(&thread).copied();
        if let Some(late) = late {
            world(&thread).1.advance(late);
        }
        step("a")
    }

    pub fn b(_: &Doc, ctx: &Ctx<Doc>) -> DocUpdate {
        let thread = thread_of(ctx);
        let taken = app(&thread, tea::Durability::EveryStep).run(Call::recover(ThreadId::from(thread.as_str())));
        let busy = matches!(taken, Err(Error::ThreadBusy { .. }));
        BUSY.lock().unwrap().get_or_insert_with(HashMap::new).insert(thread, busy);
        step("b")
    }

    pub fn c(_: &Doc) -> DocUpdate {
        step("c")
    }

    graph! {
        pub Leased for Doc { start -> a; a -> b; b -> c; c -> end; }
    }
}

fn busy_in_b(thread: &str) -> Option<bool> {
    leased::BUSY.lock().unwrap().get_or_insert_with(HashMap::new).get(thread).copied()
}

#[test]
fn a_run_whose_node_outlasts_its_lease_still_owns_its_thread_at_the_next_node() {
    // `a` takes 70 s of a 60 s lease. Writing a's step renews the lease (EveryStep); without
    // step checkpoints (OnPause) the run renews it before `b` because it is due. Either way a
    // `recover` while `b` runs finds the thread busy: it is never taken over from a live run.
    for (thread, durability) in
        [("late-every-step", tea::Durability::EveryStep), ("late-on-pause", tea::Durability::OnPause)]
    {
        leased::LATE.lock().unwrap().get_or_insert_with(HashMap::new).insert(thread.into(), Duration::from_secs(70));
        let out = leased::app(thread, durability).run(Call::start(Doc::default()).on(thread));
        assert_eq!(done(out).trail, ["a", "b", "c"], "{thread}");
        assert_eq!(busy_in_b(thread), Some(true), "{thread}: a recover during `b` took the thread over");
    }
}

#[test]
fn a_stream_read_slowly_renews_its_lease_before_its_next_node() {
    // The caller of a stream takes 70 s of a 60 s lease between a's event and the next: the
    // run renews its lease before `b` runs, and a `recover` while `b` runs finds it busy.
    let thread = "slow-reader";
    let app = leased::app(thread, tea::Durability::EveryStep);
    let mut stream = app.run_stream(Call::start(Doc::default()).on(thread));
    let first = stream.next().expect("a's event").expect("a ran");
    assert!(format!("{first:?}").contains("\"a\""), "{first:?}");
    leased::world(thread).1.advance(Duration::from_secs(70));
    for event in stream {
        event.expect("the rest of the run");
    }
    assert_eq!(busy_in_b(thread), Some(true), "a recover during `b` took a slowly read stream's thread over");
}
