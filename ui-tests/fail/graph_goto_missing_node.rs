use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

// `Missing` is not a node of `Flow`, so the goto does not compile.
fn triage(s: &Review) -> Command<FlowNode> {
    if s.approved {
        Command::goto(FlowNode::Missing)
    } else {
        Command::goto(FlowNode::Publish)
    }
}
fn publish(_: &Review) {}

graph! {
    Flow for Review {
        start -> triage;
        triage -> publish | end;
        publish -> end;
    }
}

fn main() {}
