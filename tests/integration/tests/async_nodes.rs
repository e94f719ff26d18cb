//! Async nodes in `graph!` (`async a, b;`): every node form awaits through `Graph::run_async`,
//! is marked by `Graph::is_async`, and is refused by the sync `Graph::run`. Most tests drive the
//! generated `Graph` hooks directly on a current-thread tokio runtime, one node at a time;
//! `end_to_end` runs the same graph with `invoke_async` and `resume_async`.

use serde::{Deserialize, Serialize};
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use tea::prelude::*;
use tea::{BoxError, Graph, Pause};

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
pub struct Job {
    topic: String,
    #[reducer(append)]
    log: Vec<String>,
    answer: String,
}

/// Gives the runtime back once, so every async node below really suspends before it finishes.
async fn io() {
    tokio::task::yield_now().await;
}

async fn fetch(job: &Job) -> JobUpdate {
    io().await;
    Job::update().log(vec![format!("fetch:{}", job.topic)])
}

async fn with_ctx(_: &Job, ctx: &Ctx<Job>) -> JobUpdate {
    io().await;
    Job::update().log(vec![format!("{}@{}", ctx.node(), ctx.step())])
}

async fn unit(_: &Job) {
    io().await;
}

/// Not an `async fn`: a plain function returning a `Send` future that borrows the state.
#[allow(clippy::manual_async_fn, reason = "the form under test is a `fn` returning a future")]
fn plain_future(job: &Job) -> impl Future<Output = JobUpdate> + Send + '_ {
    async move {
        io().await;
        Job::update().log(vec![format!("plain:{}", job.topic.len())])
    }
}

async fn merge(_: &Job, ctx: &Ctx<Job>) -> JobUpdate {
    io().await;
    Job::update().log(vec![format!("merged {}", ctx.branches().len())])
}

async fn fallible(job: &Job) -> Result<JobUpdate, String> {
    io().await;
    if job.topic.is_empty() {
        return Err("no topic".to_string());
    }
    Ok(Job::update().log(vec!["checked".into()]))
}

async fn route(job: &Job) -> Command<FlowNode> {
    io().await;
    if job.topic == "ask" {
        Command::goto(FlowNode::Ask)
    } else {
        Command::goto(FlowNode::Tidy).update(Job::update().log(vec!["routed".into()]))
    }
}

async fn route_res(job: &Job, _: &Ctx<Job>) -> Result<Command<FlowNode>, BoxError> {
    io().await;
    match job.answer.as_str() {
        "" => Err("no answer yet".into()),
        "more" => Ok(Command::goto(FlowNode::AskCtx)),
        _ => Ok(Command::end()),
    }
}

async fn ask(job: &Job, hitl: &mut Hitl) -> Result<JobUpdate, Pause> {
    io().await;
    let answer: String = hitl.interrupt(format!("About {}?", job.topic))?;
    io().await;
    Ok(Job::update().answer(answer))
}

async fn ask_ctx(_: &Job, ctx: &Ctx<Job>, hitl: &mut Hitl) -> Result<Command<FlowNode>, Pause> {
    io().await;
    let go_on: bool = hitl.interrupt(format!("Go on after {}?", ctx.node()))?;
    Ok(if go_on { Command::goto(FlowNode::Tidy) } else { Command::end() })
}

fn tidy(_: &Job) -> JobUpdate {
    Job::update().log(vec!["tidy".into()])
}

graph! {
    /// Every async node form, beside one sync node.
    pub Flow for Job {
        start -> fetch;
        fetch -> with_ctx;
        parallel with_ctx => [unit, plain_future] -> merge;
        merge -> fallible;
        fallible -> route;
        route -> ask | tidy;
        ask -> route_res;
        route_res -> ask_ctx | end;
        ask_ctx -> tidy | end;
        tidy -> end;
        async fetch, with_ctx, unit, plain_future, merge, fallible, route;
        async ask, route_res, ask_ctx;
        interruptible ask, ask_ctx;
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().build().expect("a current-thread runtime")
}

/// What one node's `run_async` produced: its update applied to `job`, and its goto.
struct Ran {
    job: Job,
    goto: Option<Goto<FlowNode>>,
}

fn run_async(node: FlowNode, job: &Job, hitl: &mut Hitl) -> Result<Ran, BoxError> {
    let ctx = Ctx::detached(node.name());
    let step = runtime().block_on(Flow.run_async(node, job, &ctx, hitl))?;
    let mut job = job.clone();
    if let Some(update) = step.update {
        job.apply(update);
    }
    Ok(Ran { job, goto: step.goto })
}

fn job(topic: &str) -> Job {
    Job { topic: topic.into(), ..Job::default() }
}

#[test]
fn the_async_statement_marks_exactly_its_nodes() {
    for &node in FlowNode::ALL {
        assert_eq!(Flow.is_async(node), node != FlowNode::Tidy, "{node}");
    }
}

#[test]
fn every_plain_node_form_awaits() {
    let mut hitl = Hitl::default();
    assert_eq!(run_async(FlowNode::Fetch, &job("tea"), &mut hitl).unwrap().job.log, ["fetch:tea"]);
    assert_eq!(run_async(FlowNode::WithCtx, &job("tea"), &mut hitl).unwrap().job.log, ["with_ctx@0"]);
    let ran = run_async(FlowNode::Unit, &job("tea"), &mut hitl).unwrap();
    assert!(ran.job.log.is_empty() && ran.goto.is_none());
    assert_eq!(run_async(FlowNode::PlainFuture, &job("tea"), &mut hitl).unwrap().job.log, ["plain:3"]);
    assert_eq!(run_async(FlowNode::Merge, &job("tea"), &mut hitl).unwrap().job.log, ["merged 0"]);
    assert_eq!(run_async(FlowNode::Fallible, &job("tea"), &mut hitl).unwrap().job.log, ["checked"]);
    let error = run_async(FlowNode::Fallible, &job(""), &mut hitl).err().expect("an empty topic fails");
    assert_eq!(error.to_string(), "no topic");
    assert!(hitl.paused_with().is_none(), "no plain node touches the Hitl");
}

#[test]
fn async_routers_choose_with_a_command() {
    let mut hitl = Hitl::default();
    let ran = run_async(FlowNode::Route, &job("ask"), &mut hitl).unwrap();
    assert_eq!(ran.goto, Some(Goto::Node(FlowNode::Ask)));
    let ran = run_async(FlowNode::Route, &job("tea"), &mut hitl).unwrap();
    assert_eq!((ran.goto, ran.job.log), (Some(Goto::Node(FlowNode::Tidy)), vec!["routed".to_string()]));

    let answered = |answer: &str| Job { answer: answer.into(), ..job("tea") };
    let ran = run_async(FlowNode::RouteRes, &answered("more"), &mut hitl).unwrap();
    assert_eq!(ran.goto, Some(Goto::Node(FlowNode::AskCtx)));
    assert_eq!(run_async(FlowNode::RouteRes, &answered("done"), &mut hitl).unwrap().goto, Some(Goto::End));
    let error = run_async(FlowNode::RouteRes, &answered(""), &mut hitl).err().expect("no answer fails");
    assert_eq!(error.to_string(), "no answer yet");
}

#[test]
fn an_async_interruptible_node_pauses_through_its_hitl_and_takes_the_answer_on_its_rerun() {
    let mut first = Hitl::default();
    let error = run_async(FlowNode::Ask, &job("tea"), &mut first).err().expect("the first run pauses");
    assert!(error.downcast_ref::<Pause>().is_some(), "the node's error is the Pause: {error}");
    assert_eq!(first.paused_with(), Some(&serde_json::json!("About tea?")));

    let mut resumed = Hitl::answering([serde_json::json!("yes")]);
    let ran = run_async(FlowNode::Ask, &job("tea"), &mut resumed).unwrap();
    assert_eq!(ran.job.answer, "yes");
    assert_eq!(resumed.paused_with(), None);
}

#[test]
fn an_async_interruptible_router_pauses_then_routes() {
    let mut first = Hitl::default();
    assert!(run_async(FlowNode::AskCtx, &job("tea"), &mut first).is_err());
    assert_eq!(first.paused_with(), Some(&serde_json::json!("Go on after ask_ctx?")));

    let ran = run_async(FlowNode::AskCtx, &job("tea"), &mut Hitl::answering([serde_json::json!(true)])).unwrap();
    assert_eq!(ran.goto, Some(Goto::Node(FlowNode::Tidy)));
    let ran = run_async(FlowNode::AskCtx, &job("tea"), &mut Hitl::answering([serde_json::json!(false)])).unwrap();
    assert_eq!(ran.goto, Some(Goto::End));
}

#[test]
fn the_sync_run_of_an_async_node_is_an_error_and_a_sync_node_runs_either_way() {
    let ctx = Ctx::detached("fetch");
    let error = Flow.run(FlowNode::Fetch, &job("tea"), &ctx, &mut Hitl::default()).expect_err("refused");
    assert!(error.to_string().starts_with("node `fetch` is async"), "{error}");

    let ctx = Ctx::detached("tidy");
    let sync = Flow.run(FlowNode::Tidy, &job("tea"), &ctx, &mut Hitl::default()).unwrap();
    assert!(sync.update.is_some());
    assert_eq!(run_async(FlowNode::Tidy, &job("tea"), &mut Hitl::default()).unwrap().job.log, ["tidy"]);
}

#[test]
fn an_async_node_s_future_suspends_and_is_send() {
    fn send<T: Send>(value: T) -> T {
        value
    }
    let state = job("tea");
    let ctx = Ctx::detached("fetch");
    let mut hitl = Hitl::default();
    let rt = runtime();
    // Polled by hand inside the runtime (`yield_now` needs one): pending once, then ready.
    rt.block_on(async {
        let mut future = pin!(send(Flow.run_async(FlowNode::Fetch, &state, &ctx, &mut hitl)));
        let mut cx = Context::from_waker(Waker::noop());
        assert!(future.as_mut().poll(&mut cx).is_pending(), "the node awaited");
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(Ok(step)) => assert!(step.update.is_some()),
            Poll::Ready(Err(error)) => panic!("the node failed: {error}"),
            Poll::Pending => panic!("the node yielded once only"),
        }
    });
}

#[test]
fn a_join_that_takes_ctx_reads_the_branches_and_drawings_mark_async_nodes() {
    assert!(Flow.reads_branches(FlowNode::Merge));
    assert!(Flow::MERMAID.contains("fetch[/fetch/]"), "{}", Flow::MERMAID);
    assert!(Flow::MERMAID.contains("tidy[tidy]"), "{}", Flow::MERMAID);
    assert!(Flow::DOT.contains("\"ask\" [label=\"ask\", shape=parallelogram];"), "{}", Flow::DOT);
}

/// The same graph end to end through the async API (`invoke_async`, `resume_async` on a
/// `MemoryStore`): async nodes of every form, a sync node, a fan-out of async branches into an
/// async join reading the branches, and two async interruptible nodes that pause and resume.
mod end_to_end {
    use super::*;

    fn paused(outcome: Outcome<Job>) -> (Job, Resume<Job>) {
        match outcome {
            Outcome::Interrupted { state, resume } => (state, resume),
            Outcome::Done(state) => panic!("expected a pause, the run finished with {state:?}"),
        }
    }

    #[tokio::test]
    async fn a_run_through_every_async_form_pauses_twice_and_finishes() {
        let app = Flow::builder().checkpointer(MemoryStore::new()).build();
        let (state, resume) = paused(app.invoke_async(job("ask")).await.unwrap());
        assert_eq!(resume.interrupts()[0].id(), "ask#0");
        assert_eq!(resume.interrupts()[0].value(), "About ask?");
        assert_eq!(state.log, ["fetch:ask", "with_ctx@2", "plain:3", "merged 2", "checked"]);

        let (state, resume) = paused(app.resume_async(resume.answer("more")).await.unwrap());
        assert_eq!(state.answer, "more");
        assert_eq!(resume.interrupts()[0].value(), "Go on after ask_ctx?");

        let done = app.resume_async(resume.answer(true)).await.unwrap();
        let Outcome::Done(job) = done else { panic!("expected the end, got {done:?}") };
        assert_eq!(job.log, ["fetch:ask", "with_ctx@2", "plain:3", "merged 2", "checked", "tidy"]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_router_s_update_and_a_failing_async_node_through_the_async_api() {
        let app = Flow::builder().checkpointer(MemoryStore::new()).build();
        let done = app.invoke_async(job("tea")).await.unwrap();
        let Outcome::Done(job) = done else { panic!("expected the end, got {done:?}") };
        assert_eq!(job.log, ["fetch:tea", "with_ctx@2", "plain:3", "merged 2", "checked", "routed", "tidy"]);

        let error = app.invoke_async(super::job("")).await.expect_err("an empty topic fails at `fallible`");
        assert!(matches!(&error, Error::NodeFailed { node, .. } if node == "fallible"), "{error:?}");
    }
}
