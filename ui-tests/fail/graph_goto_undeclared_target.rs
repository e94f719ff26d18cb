use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

fn draft(_: &Review) {}
// `triage` declares `publish | end`: `draft` is a node of the graph, but not one of its
// targets, so the typed goto has no method for it. (`Command::goto(FlowNode::Draft)` would
// compile and fail at run time with `Error::NoRoute`.)
fn triage(s: &Review) -> Command<FlowNode> {
    if s.approved {
        Flow::TRIAGE.publish()
    } else {
        Flow::TRIAGE.draft()
    }
}
fn publish(_: &Review) {}

graph! {
    Flow for Review {
        start -> draft;
        draft -> triage;
        triage -> publish | end;
        publish -> end;
    }
}

fn main() {}
