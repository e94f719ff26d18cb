// Every async node form compiles, beside sync nodes, and `Graph::run_async` can be called on it.
use std::future::Future;
use tea::prelude::*;
use tea::{BoxError, Graph, Pause};

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Job {
    #[reducer(append)]
    log: Vec<String>,
}

fn note(what: &str) -> JobUpdate {
    Job::update().log(vec![what.to_owned()])
}

// Plain nodes: every output, with and without `&Ctx`.
async fn update(_: &Job) -> JobUpdate {
    note("update")
}
async fn unit(_: &Job) {}
async fn fallible(_: &Job) -> Result<JobUpdate, String> {
    Ok(note("fallible"))
}
async fn checked(_: &Job) -> Result<(), &'static str> {
    Ok(())
}
async fn boxed(_: &Job, ctx: &Ctx<Job>) -> Result<JobUpdate, BoxError> {
    Ok(note(ctx.node().as_str()))
}
async fn with_ctx(_: &Job, ctx: &Ctx<Job>) -> JobUpdate {
    note(&format!("{}", ctx.step()))
}
// Not an `async fn`: a `fn` returning a `Send` future that borrows the state.
fn returns_future(job: &Job) -> impl Future<Output = JobUpdate> + Send + '_ {
    async move { note(&job.log.len().to_string()) }
}
// Routers.
async fn route(_: &Job) -> Command<FormsNode> {
    Command::goto(FormsNode::Ask)
}
async fn route_fallible(_: &Job, _: &Ctx<Job>) -> Result<Command<FormsNode>, String> {
    Ok(Command::end())
}
// Interruptible: plain and router, with and without `&Ctx`.
async fn ask(_: &Job, hitl: &mut Hitl) -> Result<JobUpdate, Pause> {
    let answer: String = hitl.interrupt("?")?;
    Ok(note(&answer))
}
async fn ask_ctx(_: &Job, ctx: &Ctx<Job>, hitl: &mut Hitl) -> Result<(), Pause> {
    hitl.interrupt::<bool>(ctx.node().as_str())?;
    Ok(())
}
async fn ask_route(_: &Job, hitl: &mut Hitl) -> Result<Command<FormsNode>, BoxError> {
    let again: bool = hitl.interrupt("again?")?;
    Ok(if again { Command::goto(FormsNode::Update) } else { Command::goto(FormsNode::Join) })
}
// A join reading the branches.
async fn join(_: &Job, ctx: &Ctx<Job>) -> JobUpdate {
    note(&ctx.branches().len().to_string())
}
fn sync_node(_: &Job) {}

graph! {
    Forms for Job {
        start -> update;
        update -> unit;
        unit -> fallible;
        fallible -> checked;
        checked -> boxed;
        boxed -> with_ctx;
        with_ctx -> returns_future;
        returns_future -> route;
        route -> ask | end;
        ask -> ask_ctx;
        ask_ctx -> ask_route;
        ask_route -> update | join;
        join -> route_fallible;
        route_fallible -> sync_node | end;
        sync_node -> end;
        async update, unit, fallible, checked, boxed, with_ctx, returns_future;
        async route, route_fallible, ask, ask_ctx, ask_route, join;
        interruptible ask, ask_ctx, ask_route;
    }
}

// Every node async, one of them a join.
async fn fan(_: &Job) {}
async fn left(_: &Job) -> JobUpdate {
    note("left")
}
async fn right(_: &Job) -> JobUpdate {
    note("right")
}

graph! {
    AllAsync for Job {
        start -> fan;
        parallel fan => [left, right] -> join;
        join -> end;
        async fan, left, right, join;
    }
}

fn main() {
    let state = Job::default();
    let ctx = Ctx::detached("update");
    let mut hitl = Hitl::default();
    let future: tea::NodeFuture<'_, Job, FormsNode> = Forms.run_async(FormsNode::Update, &state, &ctx, &mut hitl);
    drop(future);
    let _ = AllAsync.run_async(AllAsyncNode::Join, &state, &ctx, &mut hitl);
    assert!(Forms.is_async(FormsNode::AskRoute) && !Forms.is_async(FormsNode::SyncNode));
    assert!(AllAsync.reads_branches(AllAsyncNode::Join));
}
