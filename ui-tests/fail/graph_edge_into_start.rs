use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

// `start` is only ever a source.
fn write(_: &Review) {}
fn review(_: &Review) {}
fn approved(s: &Review) -> bool {
    s.approved
}

graph! {
    Flow for Review {
        start -> write;
        write -> review;
        review -> end if approved;
        review -> start;
    }
}

fn main() {}
