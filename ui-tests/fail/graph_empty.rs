use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

// A graph with no statement.
graph! {
    Flow for Review {}
}

fn main() {}
