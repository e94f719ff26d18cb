use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

// A branch is listed once.
fn plan(_: &Review) {}
fn draft(_: &Review) {}
fn outline(_: &Review) {}
fn combine(_: &Review) {}

graph! {
    Flow for Review {
        start -> plan;
        parallel plan => [draft, outline, draft] -> combine;
        combine -> end;
    }
}

fn main() {}
