//! A subgraph node's child steps in an async stream (feature `tokio`): `run_stream_async` shows
//! them before the node's own step, named by their path, as `stream` does on the blocking API
//! (`tests/subgraphs.rs` at the root, whose `Desk` and `Reviewer` graphs these are).
#![cfg(feature = "tokio")]

use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Doc {
    draft: String,
    #[reducer(append)]
    log: Vec<String>,
    #[reducer(sum)]
    edits: u32,
    verdict: String,
}

fn check(s: &Doc) -> DocUpdate {
    Doc::update().log(vec![format!("check {}", s.draft)]).edits(1)
}
fn polish(_: &Doc) -> DocUpdate {
    Doc::update().log(vec!["polish".into()]).edits(2)
}
fn judge(s: &Doc, hitl: &mut Hitl) -> Result<DocUpdate, Pause> {
    let verdict: String = hitl.interrupt(format!("verdict on {}?", s.draft))?;
    Ok(Doc::update().verdict(verdict).log(vec!["judge".into()]))
}

graph! {
    /// The child: checks, polishes, asks a human for a verdict.
    pub Reviewer for Doc {
        start -> check;
        check -> polish;
        polish -> judge;
        judge -> end;
        interruptible judge;
    }
}

fn write(_: &Doc) -> DocUpdate {
    Doc::update().draft("d1".into()).log(vec!["write".into()])
}
fn publish(s: &Doc) -> DocUpdate {
    Doc::update().log(vec![format!("publish ({})", s.verdict)])
}

graph! {
    /// The parent: writes, has the draft reviewed by the child graph, publishes.
    pub Desk for Doc {
        start -> write;
        write -> review;
        review -> publish;
        publish -> end;
        subgraph review = Reviewer;
    }
}

/// The events of a stream as `node` names (`Interrupted`, `Done`).
fn names_of(events: Vec<Result<Event<Doc>, Error>>) -> Vec<String> {
    events
        .into_iter()
        .map(|event| match event.unwrap() {
            Event::Step { node, .. } => node.to_string(),
            Event::Interrupted { .. } => "Interrupted".to_owned(),
            Event::Done(_) => "Done".to_owned(),
            other => panic!("unexpected event {other:?}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_stream_shows_the_childs_steps_too() {
    let app = Desk::builder().checkpointer(MemoryStore::new()).build();
    let events: Vec<_> = app.run_stream_async(Call::start(Doc::default()).on("desk-async")).collect().await;
    assert_eq!(names_of(events), ["write", "review/check", "review/polish", "Interrupted"]);
}
