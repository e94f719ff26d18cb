use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

fn write(_: &Review) {}
fn triage(s: &Review) -> Command<FlowNode> {
    if s.approved {
        Flow::TRIAGE.publish()
    } else {
        Command::goto(FlowNode::Write)
    }
}
fn publish(_: &Review) {}

// The duplicate edge is the only error: the graph type, its builder, drawings, node enum and
// typed gotos are still declared, so the code below compiles as far as they go.
graph! {
    Flow for Review {
        start -> write;
        write -> triage;
        write -> triage;
        triage -> publish | write;
        publish -> end;
    }
}

fn main() {
    let out = Flow::builder().build().invoke(Review::default()).unwrap();
    println!("{} {} {} {}", out.draft, Flow::NAME, Flow::MERMAID, Flow::DOT);
    assert_eq!(FlowNode::ALL.len(), 3);
    assert_eq!(FlowNode::Publish.name(), "publish");
}
