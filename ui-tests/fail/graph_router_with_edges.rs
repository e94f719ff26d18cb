use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

// A router chooses its next node itself: it has no plain edges (in either order).
fn triage(_: &Review) -> Command<FlowNode> {
    Command::end()
}
fn review(_: &Review) -> Command<FlowNode> {
    Command::end()
}
fn publish(_: &Review) {}

graph! {
    Flow for Review {
        start -> triage;
        triage -> review | end;
        triage -> publish;
        review -> publish;
        review -> publish | end;
        publish -> end;
    }
}

fn main() {}
