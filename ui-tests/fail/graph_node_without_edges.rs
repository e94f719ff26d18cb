use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

// `review` has no edge out of it.
fn write(_: &Review) {}
fn review(_: &Review) {}

graph! {
    Flow for Review {
        start -> write;
        write -> review;
    }
}

fn main() {}
