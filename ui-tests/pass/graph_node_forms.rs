// Every accepted node function form, plain and router, with and without `&Ctx`.
use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Job {
    fail_at: String,
    #[reducer(append)]
    log: Vec<String>,
}

fn note(what: &str) -> JobUpdate {
    Job::update().log(vec![what.to_owned()])
}

fn plain(_: &Job) -> JobUpdate {
    note("plain")
}
fn unit(_: &Job) {}
fn fallible(s: &Job) -> Result<JobUpdate, String> {
    if s.fail_at == "fallible" {
        Err("fallible failed".to_owned())
    } else {
        Ok(note("fallible"))
    }
}
fn check(s: &Job) -> Result<(), &'static str> {
    if s.fail_at == "check" {
        Err("check failed")
    } else {
        Ok(())
    }
}
fn boxed(s: &Job) -> Result<JobUpdate, Box<dyn std::error::Error + Send + Sync>> {
    let n: u8 = if s.fail_at == "boxed" { "x".parse()? } else { 1 };
    Ok(note(&format!("boxed {n}")))
}
fn with_ctx(_: &Job, ctx: &Ctx<Job>) -> JobUpdate {
    note(&format!("{} at step {}", ctx.node(), ctx.step()))
}
fn with_ctx_fallible(_: &Job, ctx: &Ctx<Job>) -> Result<(), String> {
    if ctx.thread().is_some() {
        Err("no store, so no thread".to_owned())
    } else {
        Ok(())
    }
}
fn route(s: &Job) -> Command<FormsNode> {
    if s.fail_at == "nowhere" {
        Command::end()
    } else {
        Command::goto(FormsNode::RouteFallible).update(note("route"))
    }
}
fn route_fallible(s: &Job) -> Result<Command<FormsNode>, String> {
    if s.fail_at == "route_fallible" {
        Err("no way".to_owned())
    } else {
        Ok(Command::goto(FormsNode::RouteWithCtx))
    }
}
fn route_with_ctx(_: &Job, ctx: &Ctx<Job>) -> Command<FormsNode> {
    Command::end().update(note(&format!("{} ends", ctx.node())))
}

graph! {
    Forms for Job {
        start -> plain;
        plain -> unit;
        unit -> fallible;
        fallible -> check;
        check -> boxed;
        boxed -> with_ctx;
        with_ctx -> with_ctx_fallible;
        with_ctx_fallible -> route;
        route -> route_fallible | end;
        route_fallible -> route_with_ctx | end;
        // A router may list targets it does not take today.
        route_with_ctx -> plain | end;
    }
}

fn failing_node(fail_at: &str) -> (String, String) {
    match Forms::builder().build().invoke(Job { fail_at: fail_at.to_owned(), ..Job::default() }) {
        Err(Error::NodeFailed { node, source }) => (node.to_string(), source.to_string()),
        other => panic!("expected {fail_at} to fail, got {other:?}"),
    }
}

fn main() {
    let out = Forms::builder().build().invoke(Job::default()).unwrap();
    assert_eq!(out.log, ["plain", "fallible", "boxed 1", "with_ctx at step 6", "route", "route_with_ctx ends"]);

    assert_eq!(failing_node("fallible"), ("fallible".to_owned(), "fallible failed".to_owned()));
    assert_eq!(failing_node("check"), ("check".to_owned(), "check failed".to_owned()));
    assert_eq!(failing_node("boxed").0, "boxed");
    assert_eq!(failing_node("route_fallible"), ("route_fallible".to_owned(), "no way".to_owned()));

    let out = Forms::builder().build().invoke(Job { fail_at: "nowhere".to_owned(), ..Job::default() }).unwrap();
    assert_eq!(out.log.last().map(String::as_str), Some("with_ctx at step 6"));
}
