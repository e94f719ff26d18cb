use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

// The unguarded fallback comes first, so the guarded edge after it is never taken.
fn review(_: &Review) {}
fn approved(s: &Review) -> bool {
    s.approved
}
fn publish(_: &Review) {}

graph! {
    Flow for Review {
        start -> review;
        review -> end;
        review -> publish if approved;
        publish -> end;
    }
}

fn main() {}
