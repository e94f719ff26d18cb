use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

// The same guarded edge twice.
fn review(_: &Review) {}
fn approved(s: &Review) -> bool {
    s.approved
}
fn publish(_: &Review) {}

graph! {
    Flow for Review {
        start -> review;
        review -> publish if approved;
        review -> publish if approved;
        review -> end;
        publish -> end;
    }
}

fn main() {}
