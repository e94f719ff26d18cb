// Nodes and guards may be named like anything the expansion uses inside: `node`, `state`,
// `ctx`, `hitl`, `join`, `from`, `to`, `answer`.
use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct S {
    question: String,
    #[reducer(append)]
    answer: Vec<String>,
    #[reducer(append)]
    log: Vec<String>,
}

fn node(_: &S) -> SUpdate {
    S::update().question("why?".into()).log(vec!["node".into()])
}
fn state(_: &S) -> SUpdate {
    S::update().log(vec!["state".into()])
}
fn ctx(_: &S, ctx: &Ctx<S>) -> SUpdate {
    S::update().log(vec![format!("ctx in {}", ctx.branch().unwrap())])
}
fn hitl(_: &S, hitl: &mut Hitl) -> Result<SUpdate, Pause> {
    let word: String = hitl.interrupt("word?")?;
    Ok(S::update().log(vec![format!("hitl {word}")]))
}
fn join(_: &S, ctx: &Ctx<S>) -> SUpdate {
    S::update().log(vec![format!("join of {}", ctx.branches().len())])
}
fn from(s: &S) -> bool {
    s.answer.is_empty()
}
fn to(_: &S) -> SUpdate {
    S::update().log(vec!["to".into()])
}

graph! {
    Names for S {
        start -> node;
        parallel node => [state, ctx] -> join;
        join -> hitl;
        hitl -> answer if from;
        hitl -> to;
        answer -> to;
        to -> end;
        interruptible hitl;
        interrupt answer(question => answer);
    }
}

fn main() {
    let app = Names::builder().checkpointer(MemoryStore::new()).build();
    let (_, resume) = app.invoke(S::default()).unwrap().interrupted().unwrap();
    let (_, resume) = app.resume(resume.answer("hi")).unwrap().interrupted().unwrap();
    assert_eq!(resume.interrupts()[0].value(), "why?");
    let done = app.resume(resume.answer("because")).unwrap().done().unwrap();
    assert_eq!(done.answer, ["because"]);
    assert_eq!(done.log, ["node", "state", "ctx in ctx", "join of 2", "hitl hi", "to"]);
}
