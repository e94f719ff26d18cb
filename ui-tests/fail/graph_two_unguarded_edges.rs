use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

// Two unguarded edges out of one node: the second is never taken.
fn review(_: &Review) {}
fn publish(_: &Review) {}
fn archive(_: &Review) {}

graph! {
    Flow for Review {
        start -> review;
        review -> publish;
        review -> archive;
        publish -> end;
        archive -> end;
    }
}

fn main() {}
