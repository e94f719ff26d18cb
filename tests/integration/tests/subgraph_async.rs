//! Subgraph nodes under the async API (feature `tokio`): a child graph with async nodes is a
//! subgraph node of a parent that runs with `invoke_async` and its kin, and every child — async
//! or not — runs on the async driver when its parent does: its async nodes awaited, its sync
//! nodes where the parent's app puts them (the blocking pool, or inline with
//! `Builder::sync_nodes_inline`). Pauses, resumes, recovers, streams, `Command::parent` and bad
//! answers work as they do on the blocking API (`tests/subgraphs.rs`).
#![cfg(feature = "tokio")]

use futures::StreamExt;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Doc {
    topic: String,
    #[reducer(append)]
    log: Vec<String>,
    verdict: String,
}

/// Every node run, as `thread node` (the child's thread names its parent's).
static RUNS: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn ran(ctx: &Ctx<Doc>) {
    let thread = ctx.thread().map(ToString::to_string).unwrap_or_default();
    RUNS.lock().unwrap().push(format!("{thread} {}", ctx.node()));
}

fn runs_under(root: &str) -> Vec<String> {
    RUNS.lock()
        .unwrap()
        .iter()
        .filter(|r| r.starts_with(&format!("{root}/")) || r.starts_with(&format!("{root} ")))
        .cloned()
        .collect()
}

/// Gives the runtime back once, so the async node really suspends.
async fn research(s: &Doc, ctx: &Ctx<Doc>) -> DocUpdate {
    tokio::task::yield_now().await;
    ran(ctx);
    Doc::update().log(vec![format!("research {}", s.topic)])
}

/// Fails once for topic `flaky`, then works.
static FLAKY: AtomicBool = AtomicBool::new(true);

fn judge(s: &Doc, ctx: &Ctx<Doc>, hitl: &mut Hitl) -> Result<DocUpdate, Pause> {
    let verdict: String = hitl.interrupt(format!("publish {}?", s.topic))?;
    ran(ctx);
    Ok(Doc::update().verdict(verdict).log(vec!["judge".into()]))
}

fn check(s: &Doc, ctx: &Ctx<Doc>) -> Result<DocUpdate, String> {
    if s.topic == "flaky" && FLAKY.swap(false, Ordering::SeqCst) {
        return Err("flaky".into());
    }
    ran(ctx);
    Ok(Doc::update().log(vec!["check".into()]))
}

graph! {
    /// The async child: researches (async), checks, asks a human.
    pub Thinker for Doc {
        start -> research;
        research -> check;
        check -> judge;
        judge -> end;
        async research;
        interruptible judge;
    }
}

fn write(_: &Doc, ctx: &Ctx<Doc>) -> DocUpdate {
    ran(ctx);
    Doc::update().log(vec!["write".into()])
}
fn publish(s: &Doc, ctx: &Ctx<Doc>) -> DocUpdate {
    ran(ctx);
    Doc::update().log(vec![format!("publish ({})", s.verdict)])
}

graph! {
    /// The parent: its only async part is its child.
    pub Desk for Doc {
        start -> write;
        write -> think;
        think -> publish;
        publish -> end;
        subgraph think = Thinker;
    }
}

fn doc(topic: &str) -> Doc {
    Doc { topic: topic.into(), ..Doc::default() }
}

async fn pause_inside_an_async_child_and_resume<C: Checkpointer>(store: C, thread: &str) {
    let app = Desk::builder().checkpointer(store).build();
    let (state, resume) =
        app.run_async(Call::start(doc("tea")).on(thread)).await.unwrap().interrupted().expect("the child asks");
    assert_eq!(state.log, ["write"]);
    assert_eq!(resume.interrupts()[0].id(), "think/judge#0");
    let snapshot = app.state_async(&ThreadId::from(thread)).await.unwrap().unwrap();
    assert_eq!(snapshot.subgraphs[0].thread.as_str(), format!("{thread}/think@2"));
    let done = app.resume_async(resume.answer("yes")).await.unwrap().done().expect("done");
    assert_eq!(done.log, ["write", "research tea", "check", "judge", "publish (yes)"]);
    let child = format!("{thread}/think@2");
    assert_eq!(
        runs_under(thread),
        [
            format!("{thread} write"),
            format!("{child} research"),
            format!("{child} check"),
            format!("{child} judge"),
            format!("{thread} publish")
        ],
        "the child's completed nodes did not run again"
    );
}

#[tokio::test]
async fn an_async_child_pauses_and_resumes_on_memory() {
    pause_inside_an_async_child_and_resume(MemoryStore::new(), "async-mem").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_child_pauses_and_resumes_on_sled() {
    let dir = std::env::temp_dir().join(format!("tea-subgraph-async-{}", std::process::id()));
    pause_inside_an_async_child_and_resume(SledStore::open(&dir).unwrap(), "async-sled").await;
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test]
async fn a_bad_answer_to_an_async_childs_pause_is_bad_resume_value() {
    let app = Desk::builder().checkpointer(MemoryStore::new()).build();
    let (_, resume) = app.run_async(Call::start(doc("tea")).on("async-bad")).await.unwrap().interrupted().unwrap();
    let token = resume.to_string();
    let error = app.resume_async(resume.answer(7)).await.unwrap_err();
    assert!(matches!(&error, Error::BadResumeValue { node, .. } if node == "think/judge"), "{error:?}");
    let done = app.resume_async(token.parse::<Resume<Doc>>().unwrap().answer("ok")).await.unwrap().done().unwrap();
    assert_eq!(done.verdict, "ok");
}

#[tokio::test]
async fn a_failed_async_child_is_recovered_without_running_its_completed_nodes() {
    let app = Desk::builder().checkpointer(MemoryStore::new()).build();
    let error = app.run_async(Call::start(doc("flaky")).on("async-flaky")).await.unwrap_err();
    assert!(matches!(&error, Error::NodeFailed { node, .. } if node == "think"), "{error:?}");
    let thread = ThreadId::from("async-flaky");
    let (_, resume) = app.run_async(Call::recover(&thread)).await.unwrap().interrupted().expect("the child asks");
    let done = app.resume_async(resume.answer("fine")).await.unwrap().done().unwrap();
    assert_eq!(done.log, ["write", "research flaky", "check", "judge", "publish (fine)"]);
    let researched = runs_under("async-flaky").iter().filter(|r| r.ends_with(" research")).count();
    assert_eq!(researched, 1, "the child's async node ran once");
}

#[tokio::test]
async fn an_async_childs_steps_stream_named_by_their_path() {
    let app = Desk::builder().checkpointer(MemoryStore::new()).build();
    let names = |events: Vec<Result<Event<Doc>, Error>>| -> Vec<String> {
        events
            .into_iter()
            .map(|event| match event.unwrap() {
                Event::Step { node, .. } => node.to_string(),
                Event::Interrupted { .. } => "Interrupted".to_owned(),
                Event::Done(_) => "Done".to_owned(),
                other => format!("{other:?}"),
            })
            .collect()
    };
    let events: Vec<_> = app.run_stream_async(Call::start(doc("tea")).on("async-stream")).collect().await;
    let token = events.iter().find_map(|event| match event {
        Ok(Event::Interrupted { resume, .. }) => Some(resume.to_string()),
        _ => None,
    });
    assert_eq!(names(events), ["write", "think/research", "think/check", "Interrupted"]);
    let token: Resume<Doc> = token.expect("paused").parse().unwrap();
    assert_eq!(token.interrupts()[0].id(), "think/judge#0");
    let events: Vec<_> = app.run_stream_async(Call::resume(token.answer("go"))).collect().await;
    assert_eq!(names(events), ["think/judge", "think", "publish", "Done"]);
}

// ---------------------------------------------------------------------------------------------
// A mapped async child, two levels deep, and without a store.

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Query {
    q: String,
    #[reducer(append)]
    hits: Vec<String>,
}

async fn search(s: &Query) -> QueryUpdate {
    tokio::task::yield_now().await;
    Query::update().hits(vec![format!("hit {}", s.q)])
}

graph! {
    pub Searcher for Query {
        start -> search;
        search -> end;
        async search;
    }
}

fn to_query(d: &Doc) -> Query {
    Query { q: d.topic.clone(), ..Query::default() }
}
fn from_query(_: &Doc, q: Query) -> DocUpdate {
    Doc::update().log(q.hits)
}

graph! {
    /// The middle level: an async child with its own state.
    pub Middle for Doc {
        start -> find;
        find -> end;
        subgraph find = Searcher(to_query => from_query);
    }
}

graph! {
    pub Top for Doc {
        start -> outer;
        outer -> end;
        subgraph outer = Middle;
    }
}

#[tokio::test]
async fn a_mapped_async_child_two_levels_deep_with_and_without_a_store() {
    let stored = Top::builder().checkpointer(MemoryStore::new()).build();
    let done = stored.run_async(Call::start(doc("rust")).on("deep")).await.unwrap().done().unwrap();
    assert_eq!(done.log, ["hit rust"]);
    let bare = Top::builder().build();
    assert_eq!(bare.invoke_async(doc("rust")).await.unwrap().log, ["hit rust"]);
    let events: Vec<_> = bare.stream_async(doc("go")).collect().await;
    let steps: Vec<String> = events
        .into_iter()
        .filter_map(|e| match e.unwrap() {
            Event::Step { node, .. } => Some(node.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(steps, ["outer/find/search", "outer/find", "outer"]);
}

// ---------------------------------------------------------------------------------------------
// `Command::parent` from an async child.

async fn route(s: &Doc) -> Command<RouterChildNode> {
    tokio::task::yield_now().await;
    if s.topic == "hot" {
        Command::parent(ClinicNode::Escalate).update(Doc::update().log(vec!["escalated".into()]))
    } else {
        Command::goto(RouterChildNode::Fine)
    }
}

fn fine(_: &Doc) -> DocUpdate {
    Doc::update().log(vec!["fine".into()])
}

graph! {
    pub RouterChild for Doc {
        start -> route;
        route -> fine | end;
        fine -> end;
        async route;
    }
}

fn escalate(_: &Doc) -> DocUpdate {
    Doc::update().log(vec!["escalate".into()])
}

graph! {
    pub Clinic for Doc {
        start -> triage;
        triage -> end;
        escalate -> end;
        subgraph triage = RouterChild, parent -> escalate;
    }
}

#[tokio::test]
async fn an_async_child_routes_its_parent() {
    let app = Clinic::builder().checkpointer(MemoryStore::new()).build();
    let done = app.invoke_async(doc("hot")).await.unwrap().done().unwrap();
    assert_eq!(done.log, ["escalated", "escalate"]);
    let calm = Clinic::builder().build().invoke_async(doc("cold")).await.unwrap();
    assert_eq!(calm.log, ["fine"]);
}

// ---------------------------------------------------------------------------------------------
// Where sync nodes run: on the blocking pool, or inline with `sync_nodes_inline` — children
// included, which shows they run on the async driver (a child run by the blocking API inside
// the parent's blocking task would run its nodes on that task's thread).

static THREADS: Mutex<Vec<(String, std::thread::ThreadId)>> = Mutex::new(Vec::new());

fn where_(name: &str) {
    THREADS.lock().unwrap().push((name.to_owned(), std::thread::current().id()));
}

fn c_step(s: &Doc) -> DocUpdate {
    where_(&format!("{} child", s.topic));
    Doc::update().log(vec!["child".into()])
}

graph! {
    pub SyncChild for Doc {
        start -> c_step;
        c_step -> end;
    }
}

fn p_step(s: &Doc) -> DocUpdate {
    where_(&format!("{} parent", s.topic));
    Doc::update().log(vec!["parent".into()])
}

graph! {
    pub Host for Doc {
        start -> p_step;
        p_step -> kid;
        kid -> end;
        subgraph kid = SyncChild;
    }
}

fn threads_of(topic: &str) -> Vec<(String, std::thread::ThreadId)> {
    THREADS.lock().unwrap().iter().filter(|(name, _)| name.starts_with(&format!("{topic} "))).cloned().collect()
}

#[tokio::test]
async fn sync_nodes_run_on_the_blocking_pool_or_inline_and_so_do_a_childs() {
    // A current-thread runtime: inline means on this thread.
    let here = std::thread::current().id();
    let inline = Host::builder().sync_nodes_inline(true).checkpointer(MemoryStore::new()).build();
    assert_eq!(inline.invoke_async(doc("inline")).await.unwrap().done().unwrap().log, ["parent", "child"]);
    let seen = threads_of("inline");
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|(_, id)| *id == here), "every sync node ran inline: {seen:?}");
    let bare = Host::builder().sync_nodes_inline(true).build();
    assert_eq!(bare.invoke_async(doc("bare")).await.unwrap().log, ["parent", "child"]);
    assert!(threads_of("bare").iter().all(|(_, id)| *id == here));

    let pooled = Host::builder().checkpointer(MemoryStore::new()).build();
    assert_eq!(pooled.invoke_async(doc("pooled")).await.unwrap().done().unwrap().log, ["parent", "child"]);
    let seen = threads_of("pooled");
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|(_, id)| *id != here), "every sync node ran on the blocking pool: {seen:?}");
}

#[test]
fn sync_children_keep_the_blocking_api() {
    let app = Host::builder().checkpointer(MemoryStore::new()).build();
    assert_eq!(app.invoke(doc("blocking")).unwrap().done().unwrap().log, ["parent", "child"]);
    let here = std::thread::current().id();
    assert!(threads_of("blocking").iter().all(|(_, id)| *id == here));
}
