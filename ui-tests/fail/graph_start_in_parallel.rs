use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

// `start` cannot fan out: it has no function and is not a node.
fn draft(_: &Review) {}
fn outline(_: &Review) {}
fn combine(_: &Review) {}

graph! {
    Flow for Review {
        parallel start => [draft, outline] -> combine;
        combine -> end;
    }
}

fn main() {}
