// Typed gotos: `Flow::TRIAGE.publish()` is `Command::goto(FlowNode::Publish)`, checked against
// the router's declared targets at compile time; `Command::goto` keeps working.
use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    #[reducer(append)]
    log: Vec<String>,
    approved: bool,
}

fn draft(s: &Review) -> ReviewUpdate {
    Review::update().log(vec!["draft".into()]).approved(s.log.len() > 1)
}
fn triage(s: &Review) -> Command<FlowNode> {
    match (s.approved, s.log.len()) {
        (true, _) => Flow::TRIAGE.publish().update(Review::update().log(vec!["approved".into()])),
        (false, n) if n > 4 => Flow::TRIAGE.end(),
        (false, _) => Flow::TRIAGE.draft(),
    }
}
fn publish(_: &Review) -> ReviewUpdate {
    Review::update().log(vec!["publish".into()])
}
fn r#type(_: &Review) -> Command<RawNode> {
    Raw::TYPE.r#match()
}
fn r#match(_: &Review) {}

graph! {
    Flow for Review {
        start -> draft;
        draft -> triage;
        triage -> publish | draft | end;
        publish -> end;
    }
}

graph! {
    Raw for Review {
        start -> r#type;
        r#type -> r#match | end;
        r#match -> end;
    }
}

fn main() {
    let out = Flow::builder().build().invoke(Review::default()).unwrap();
    assert_eq!(out.log, ["draft", "draft", "draft", "approved", "publish"]);
    let goto: Command<FlowNode> = Flow::TRIAGE.draft();
    assert_eq!(goto.target(), tea::Goto::Node(FlowNode::Draft));
    assert_eq!(Flow::TRIAGE.end().target(), tea::Goto::End);
    let out = Raw::builder().build().invoke(Review::default()).unwrap();
    assert!(out.log.is_empty());
}
