use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

// `triage` returns a `Command` but the graph gives it plain edges: it must be a router.
fn triage(s: &Review) -> Command<FlowNode> {
    if s.approved {
        Command::goto(FlowNode::Publish)
    } else {
        Command::end()
    }
}
fn publish(_: &Review) {}

graph! {
    Flow for Review {
        start -> triage;
        triage -> publish;
        publish -> end;
    }
}

fn main() {}
