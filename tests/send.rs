//! `SendTo`: a node fans out to one node many times, each run with its own input
//! (`parallel plan => worker* -> join;` and `Command::send`).
//!
//! The scenarios run on `MemoryStore` and `SledStore`: merges in send order whatever order the
//! sends finish in, pauses inside sends answered by id, completed sends never run again on a
//! resume or a recover (LangGraph's #6208 and #5952), and conflicts named by send.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Map {
    questions: Vec<String>,
    question: String,
    #[reducer(append)]
    answers: Vec<String>,
    summary: String,
}

/// How many times each question's worker ran (by question).
static RUNS: Mutex<BTreeMap<String, usize>> = Mutex::new(BTreeMap::new());

fn runs(question: &str) -> usize {
    RUNS.lock().unwrap().get(question).copied().unwrap_or(0)
}

fn plan(m: &Map) -> Command<FanNode> {
    Command::send(m.questions.iter().map(|q| tea::SendTo::new(FanNode::Worker, Map::update().question(q.clone()))))
}

fn worker(m: &Map) -> MapUpdate {
    *RUNS.lock().unwrap().entry(m.question.clone()).or_default() += 1;
    // The first questions take longest: they finish last.
    let delay = 30u64.saturating_sub(m.question.len() as u64 * 5);
    std::thread::sleep(Duration::from_millis(delay));
    Map::update().answers(vec![format!("answer to {}", m.question)])
}

fn summarize(m: &Map) -> MapUpdate {
    Map::update().summary(m.answers.join(" | "))
}

graph! {
    pub Fan for Map {
        start -> plan;
        parallel plan => worker* -> summarize;
        summarize -> end;
    }
}

fn questions(list: &[&str]) -> Map {
    Map { questions: list.iter().map(|s| (*s).to_owned()).collect(), ..Map::default() }
}

#[test]
fn sends_merge_in_send_order_whatever_order_they_finish() {
    let out = Fan::builder().build().invoke(questions(&["a", "bb", "ccc", "dddd"])).unwrap();
    assert_eq!(out.answers, ["answer to a", "answer to bb", "answer to ccc", "answer to dddd"]);
    assert_eq!(out.summary, "answer to a | answer to bb | answer to ccc | answer to dddd");
    // A send's input is its own: the main state's `question` is untouched.
    assert_eq!(out.question, "");
}

#[test]
fn no_sends_go_straight_to_the_join() {
    let out = Fan::builder().build().invoke(questions(&[])).unwrap();
    assert!(out.answers.is_empty());
    assert_eq!(out.summary, "");
}

#[test]
fn streams_report_each_send_as_a_branch() {
    let events: Vec<Event<Map>> =
        Fan::builder().build().stream(questions(&["x1", "x2"])).collect::<Result<_, _>>().unwrap();
    let branches: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            Event::Step { branch: Some(b), node, .. } => Some(format!("{node}@{b}")),
            _ => None,
        })
        .collect();
    assert_eq!(branches, ["worker@worker#0", "worker@worker#1"]);
}

#[test]
fn drawings_show_the_sends() {
    assert!(Fan::MERMAID.contains("plan ==>|\"send *\"| worker"), "{}", Fan::MERMAID);
    assert!(Fan::DOT.contains("\"plan\" -> \"worker\" [style=bold, label=\"send *\"];"), "{}", Fan::DOT);
}

// ---------------------------------------------------------------------------------------------
// Pauses inside sends.

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Review {
    items: Vec<String>,
    item: String,
    #[reducer(append)]
    verdicts: Vec<String>,
}

static ASKED: AtomicUsize = AtomicUsize::new(0);

fn split(r: &Review) -> Command<ReviewsNode> {
    Command::send(r.items.iter().map(|i| tea::SendTo::new(ReviewsNode::Judge, Review::update().item(i.clone()))))
}

fn judge(r: &Review, hitl: &mut Hitl) -> Result<ReviewUpdate, Pause> {
    if r.item.starts_with("auto") {
        return Ok(Review::update().verdicts(vec![format!("{}: auto", r.item)]));
    }
    ASKED.fetch_add(1, Ordering::SeqCst);
    let verdict: String = hitl.interrupt(format!("verdict on {}?", r.item))?;
    Ok(Review::update().verdicts(vec![format!("{}: {verdict}", r.item)]))
}

fn collect(_: &Review) {}

graph! {
    pub Reviews for Review {
        start -> split;
        parallel split => judge* -> collect;
        collect -> end;
        interruptible judge;
        interrupt_before collect;
    }
}

fn pauses_inside_sends_are_answered_by_id<C: Checkpointer>(store: C) {
    let app = Reviews::builder().checkpointer(store).build();
    let input = Review { items: vec!["x".into(), "auto1".into(), "y".into()], ..Review::default() };
    let (_, resume) = app.invoke(input).unwrap().interrupted().expect("two sends ask");
    let ids: Vec<&str> = resume.interrupts().iter().map(|i| i.id()).collect();
    assert_eq!(ids, ["judge#0@judge#0", "judge#0@judge#2"]);
    let asked = ASKED.load(Ordering::SeqCst);

    // Answer one: only that send continues; the other still waits, and nothing re-fires (#5952).
    let (_, resume) =
        app.resume(resume.answer_to("judge#0@judge#2", "no")).unwrap().interrupted().expect("one still asks");
    let ids: Vec<&str> = resume.interrupts().iter().map(|i| i.id()).collect();
    assert_eq!(ids, ["judge#0@judge#0"]);
    assert_eq!(ASKED.load(Ordering::SeqCst) - asked, 1, "only the answered send ran again");

    // The join stops at its breakpoint; its checkpoint keeps the sends' own states (named
    // `judge#i`), and reads back.
    let (_, resume) = app.resume(resume.answer("yes")).unwrap().interrupted().expect("before collect");
    assert_eq!(resume.interrupts()[0].id(), "before:collect");
    let done = app.resume(resume).unwrap().done().unwrap();
    // Send order, not answer order.
    assert_eq!(done.verdicts, ["x: yes", "auto1: auto", "y: no"]);
    assert_eq!(ASKED.load(Ordering::SeqCst) - asked, 2);
}

#[test]
fn pauses_inside_sends_memory() {
    pauses_inside_sends_are_answered_by_id(MemoryStore::new());
}

#[test]
fn pauses_inside_sends_sled() {
    let dir = tempdir("pauses");
    pauses_inside_sends_are_answered_by_id(SledStore::open(&dir).unwrap());
    std::fs::remove_dir_all(&dir).ok();
}

// ---------------------------------------------------------------------------------------------
// Completed sends are not run again on recover (#6208).

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Batch {
    jobs: Vec<String>,
    job: String,
    #[reducer(append)]
    done: Vec<String>,
}

fn fan(b: &Batch) -> Command<BatchFlowNode> {
    Command::send(b.jobs.iter().map(|j| tea::SendTo::new(BatchFlowNode::Job, Batch::update().job(j.clone()))))
}

fn job(b: &Batch) -> Result<BatchUpdate, String> {
    let run = {
        let mut runs = RUNS.lock().unwrap();
        let count = runs.entry(b.job.clone()).or_default();
        *count += 1;
        *count
    };
    // A flaky job fails its first run.
    if b.job.starts_with("flaky") && run == 1 {
        return Err("the service was down".into());
    }
    Ok(Batch::update().done(vec![b.job.clone()]))
}

fn gather(_: &Batch) {}

graph! {
    pub BatchFlow for Batch {
        start -> fan;
        parallel fan => job* -> gather;
        gather -> end;
    }
}

fn a_failed_send_is_recovered<C: Checkpointer>(store: C, tag: &str) {
    let app = BatchFlow::builder().checkpointer(store).build();
    let jobs = vec![format!("{tag}-1"), format!("flaky-{tag}"), format!("{tag}-3")];
    let thread = ThreadId::from(format!("batch-{tag}"));
    let error = app.run(Call::start(Batch { jobs: jobs.clone(), ..Batch::default() }).on(thread.clone())).unwrap_err();
    match &error {
        Error::NodeFailed { node, source } => {
            assert_eq!(node, "job");
            assert_eq!(source.to_string(), "the service was down");
        }
        other => panic!("expected the job to fail, got {other}"),
    }
    // The sends were checkpointed before they ran: recover runs the fan-out from there.
    let done = app.run(Call::recover(&thread)).unwrap().done().unwrap();
    assert_eq!(done.done, jobs);
    // The failed fan-out's checkpoint kept the sends that finished: recover ran only the flaky
    // one again (LangGraph #6208: completed sends re-run).
    assert_eq!(runs(&format!("flaky-{tag}")), 2);
    assert_eq!(runs(&format!("{tag}-1")), 1);
    assert_eq!(runs(&format!("{tag}-3")), 1);
}

#[test]
fn a_failed_send_is_recovered_memory() {
    a_failed_send_is_recovered(MemoryStore::new(), "mem");
}

#[test]
fn a_failed_send_is_recovered_sled() {
    let dir = tempdir("recover");
    a_failed_send_is_recovered(SledStore::open(&dir).unwrap(), "sled");
    std::fs::remove_dir_all(&dir).ok();
}

// ---------------------------------------------------------------------------------------------
// Conflicts and misuse.

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Clash {
    n: u32,
    winner: String,
}

fn race(_: &Clash) -> Command<RaceNode> {
    Command::send((0..3).map(|i| tea::SendTo::new(RaceNode::Runner, Clash::update().n(i))))
}

fn runner(c: &Clash) -> ClashUpdate {
    if c.n == 0 {
        Clash::update()
    } else {
        Clash::update().winner(format!("runner {}", c.n))
    }
}

fn finish(_: &Clash) {}

fn wrong(_: &Clash) -> Command<RaceNode> {
    Command::send([tea::SendTo::new(RaceNode::Finish, Clash::update())])
}

graph! {
    pub Race for Clash {
        start -> race;
        parallel race => runner* -> finish;
        finish -> wrong;
        parallel wrong => other* -> done;
        done -> end;
    }
}

fn other(_: &Clash) {}
fn done(_: &Clash) {}

#[test]
fn two_sends_replacing_one_field_conflict() {
    let error = Race::builder().build().invoke(Clash::default()).unwrap_err();
    match error {
        Error::ConflictingWrites { field, branches } => {
            assert_eq!(field, "winner");
            assert_eq!(branches, ["runner#1", "runner#2"]);
        }
        other => panic!("expected a conflict, got {other}"),
    }
}

#[test]
fn a_send_to_another_node_is_no_route() {
    fn once(_: &Clash) -> Command<OnceNode> {
        Command::send([tea::SendTo::new(OnceNode::Finish, Clash::update())])
    }
    fn runner(_: &Clash) {}
    fn finish(_: &Clash) {}
    graph! {
        Once for Clash {
            start -> once;
            parallel once => runner* -> finish;
            finish -> end;
        }
    }
    let error = Once::builder().build().invoke(Clash::default()).unwrap_err();
    assert!(matches!(&error, Error::NoRoute { node, goto: Some(to) } if node == "once" && to == "finish"), "{error}");
}

fn tempdir(name: &str) -> std::path::PathBuf {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let dir = std::env::temp_dir().join(format!("tea-send-{name}-{}-{nanos}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    dir
}

// ---------------------------------------------------------------------------------------------
// The same for the branches of a `parallel` statement: a failed branch does not re-run its
// finished siblings on recover.

static STEADY: AtomicUsize = AtomicUsize::new(0);
static SHAKY: AtomicUsize = AtomicUsize::new(0);

fn open(_: &Batch) {}
fn steady(_: &Batch) -> BatchUpdate {
    STEADY.fetch_add(1, Ordering::SeqCst);
    Batch::update().done(vec!["steady".into()])
}
fn shaky(_: &Batch) -> Result<BatchUpdate, String> {
    if SHAKY.fetch_add(1, Ordering::SeqCst) == 0 {
        return Err("first try fails".into());
    }
    Ok(Batch::update().done(vec!["shaky".into()]))
}
fn close(_: &Batch) {}

graph! {
    pub Pair for Batch {
        start -> open;
        parallel open => [steady, shaky] -> close;
        close -> end;
    }
}

#[test]
fn a_failed_branch_does_not_rerun_its_finished_siblings_on_recover() {
    let app = Pair::builder().checkpointer(MemoryStore::new()).build();
    let thread = ThreadId::from("pair");
    assert!(app.run(Call::start(Batch::default()).on(thread.clone())).is_err());
    let done = app.run(Call::recover(&thread)).unwrap().done().unwrap();
    assert_eq!(done.done, ["steady", "shaky"], "declared order");
    assert_eq!(STEADY.load(Ordering::SeqCst), 1, "the finished branch kept its result");
    assert_eq!(SHAKY.load(Ordering::SeqCst), 2);
}
