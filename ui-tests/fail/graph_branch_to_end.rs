use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

// A node of branch `draft` ends the run instead of reaching the join.
fn plan(_: &Review) {}
fn draft(_: &Review) {}
fn polish(_: &Review) {}
fn outline(_: &Review) {}
fn combine(_: &Review) {}

graph! {
    Flow for Review {
        start -> plan;
        parallel plan => [draft, outline] -> combine;
        draft -> polish;
        polish -> end;
        combine -> end;
    }
}

fn main() {}
