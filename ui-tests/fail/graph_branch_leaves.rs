use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

// Branch `draft` jumps to `publish`, which runs after the join.
fn plan(_: &Review) {}
fn draft(_: &Review) {}
fn outline(_: &Review) {}
fn combine(_: &Review) {}
fn publish(_: &Review) {}

graph! {
    Flow for Review {
        start -> plan;
        parallel plan => [draft, outline] -> combine;
        draft -> publish;
        combine -> publish;
        publish -> end;
    }
}

fn main() {}
