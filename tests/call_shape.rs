//! The one call shape at its edges: a call that names the wrong thread, a thread that is not
//! there, a node the graph does not have, per-call limits and context, a recover carried out as
//! a stream, and a store-less app asked for what only a store keeps. Each refusal writes nothing:
//! the token or thread stays as it was.

use serde::{Deserialize, Serialize};
use tea::prelude::*;
use tea::Call;

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Memo {
    #[reducer(append)]
    trail: Vec<String>,
}

fn write(_: &Memo) -> MemoUpdate {
    Memo::update().trail(vec!["write".into()])
}
fn review(_: &Memo) -> MemoUpdate {
    Memo::update().trail(vec!["review".into()])
}
fn again(s: &Memo) -> bool {
    s.trail.len() < 50
}

graph! {
    pub Review for Memo { start -> write; write -> review; review -> end; interrupt_before review; }
}

graph! {
    pub Loop for Memo { start -> write; write -> write if again; write -> end; }
}

struct User(&'static str);

fn greet(_: &Memo, ctx: &Ctx<Memo>) -> Result<MemoUpdate, tea::BoxError> {
    Ok(Memo::update().trail(vec![ctx.context::<User>()?.0.to_owned()]))
}

graph! {
    pub Greet for Memo { context User; start -> greet; greet -> end; }
}

#[test]
fn a_resume_naming_another_thread_is_refused_and_the_token_still_works() {
    let app = Review::builder().checkpointer(MemoryStore::new()).build();
    let paused = app.run(Call::start(Memo::default()).on("doc-1")).unwrap();
    let (_, resume) = paused.interrupted().expect("paused before review");
    let token = resume.to_string();
    let wrong = app.run(Call::resume(token.parse().unwrap()).on("doc-2"));
    assert!(matches!(wrong, Err(Error::InvalidToken { .. })), "{wrong:?}");
    assert!(app.state(&ThreadId::from("doc-2")).unwrap().is_none(), "nothing was written on doc-2");
    // Naming the token's own thread is the same call as naming none.
    let done = app.run(Call::resume(token.parse().unwrap()).on("doc-1")).unwrap();
    assert_eq!(done.done().unwrap().trail, ["write", "review"]);
}

#[test]
fn calls_on_threads_and_nodes_that_are_not_there_are_refused() {
    let app = Review::builder().checkpointer(MemoryStore::new()).build();
    let missing = app.run(Call::recover("nobody"));
    assert!(matches!(missing, Err(Error::CheckpointNotFound { ref thread }) if thread.as_str() == "nobody"));
    let empty = app.run(Call::start(Memo::default()).on(""));
    assert!(matches!(empty, Err(Error::InvalidThreadId { .. })), "{empty:?}");
    let nowhere = app.run(Call::start_at("publish", Memo::default()).on("t"));
    assert!(matches!(nowhere, Err(Error::NoRoute { .. })), "{nowhere:?}");
    assert!(app.threads().unwrap().is_empty(), "no refused call wrote a thread");
    // A thread that exists already is not started again.
    app.run(Call::start(Memo::default()).on("once")).unwrap();
    let twice = app.run(Call::start(Memo::default()).on("once"));
    assert!(matches!(twice, Err(Error::ThreadExists { .. })), "{twice:?}");
}

#[test]
fn a_recover_streamed_on_a_finished_or_paused_thread_yields_its_one_event() {
    let app = Review::builder().checkpointer(MemoryStore::new()).build();
    app.run(Call::start(Memo::default()).on("p")).unwrap();
    let events: Vec<_> = app.run_stream(Call::recover("p")).collect::<Result<_, _>>().unwrap();
    assert!(matches!(events.as_slice(), [Event::Interrupted { .. }]), "{events:?}");
    let Some(Event::Interrupted { resume, .. }) = events.into_iter().next() else { unreachable!() };
    app.resume(resume).unwrap();
    let events: Vec<_> = app.run_stream(Call::recover("p")).collect::<Result<_, _>>().unwrap();
    assert!(matches!(events.as_slice(), [Event::Done(state)] if state.trail == ["write", "review"]), "{events:?}");
}

#[test]
fn a_calls_recursion_limit_and_context_hold_for_that_call_only() {
    let app = Loop::builder().build();
    let limited = app.run(Call::start(Memo::default()).recursion_limit(10));
    assert!(matches!(limited, Err(Error::RecursionLimit { .. })), "{limited:?}");
    assert_eq!(app.invoke(Memo::default()).unwrap().trail.len(), 50, "the app's own limit is untouched");

    let greeter = Greet::builder().build();
    let refused = greeter.invoke(Memo::default());
    assert!(matches!(refused, Err(Error::MissingContext { .. })), "{refused:?}");
    let out = greeter.run(Call::start(Memo::default()).context(User("ada"))).unwrap();
    assert_eq!(out.trail, ["ada"]);
    // The app-wide context is overridden by the call's.
    let out = greeter.with_context(User("bob")).run(Call::start(Memo::default()).context(User("cy"))).unwrap();
    assert_eq!(out.trail, ["cy"]);
}

#[test]
fn a_store_less_app_refuses_what_only_a_store_keeps() {
    let app = Loop::builder().build();
    let recover = app.run(Call::recover("t"));
    assert!(matches!(recover, Err(Error::CheckpointNotFound { .. })), "{recover:?}");
    let mut stream = app.run_stream(Call::recover("t"));
    assert!(matches!(stream.next(), Some(Err(Error::CheckpointNotFound { .. }))));
    assert!(stream.next().is_none());
    // A start at a node runs from there.
    let from = app.run(Call::start_at("write", Memo { trail: vec!["x".into(); 48] })).unwrap();
    assert_eq!(from.trail.len(), 50);
}
