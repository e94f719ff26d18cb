use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

// A statement without its `;`.
fn write(_: &Review) {}
fn review(_: &Review) {}

graph! {
    Flow for Review {
        start -> write;
        write -> review
        review -> end;
    }
}

fn main() {}
