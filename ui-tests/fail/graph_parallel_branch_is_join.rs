use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

// The join cannot also be a branch.
fn plan(_: &Review) {}
fn draft(_: &Review) {}
fn combine(_: &Review) {}

graph! {
    Flow for Review {
        start -> plan;
        parallel plan => [draft, combine] -> combine;
        combine -> end;
    }
}

fn main() {}
