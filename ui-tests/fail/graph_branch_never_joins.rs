use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

// Branch `draft` loops between `draft` and `revise` and never reaches `combine`.
fn plan(_: &Review) {}
fn draft(_: &Review) {}
fn revise(_: &Review) {}
fn outline(_: &Review) {}
fn combine(_: &Review) {}

graph! {
    Flow for Review {
        start -> plan;
        parallel plan => [draft, outline] -> combine;
        draft -> revise;
        revise -> draft;
        combine -> end;
    }
}

fn main() {}
