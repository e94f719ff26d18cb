use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

// A node fans out once: one `parallel` statement lists all its branches.
fn plan(_: &Review) {}
fn draft(_: &Review) {}
fn outline(_: &Review) {}
fn cite(_: &Review) {}
fn combine(_: &Review) {}

graph! {
    Flow for Review {
        start -> plan;
        parallel plan => [draft, outline] -> combine;
        parallel plan => [cite] -> combine;
        combine -> end;
    }
}

fn main() {}
