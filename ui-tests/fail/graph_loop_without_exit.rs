use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

// `write` and `review` send the run to each other forever: nothing leads to `end`.
fn write(_: &Review) {}
fn review(_: &Review) {}

graph! {
    Flow for Review {
        start -> write;
        write -> review;
        review -> write;
    }
}

fn main() {}
