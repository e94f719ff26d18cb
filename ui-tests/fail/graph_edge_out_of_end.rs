use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

// `end` is only ever a target.
fn write(_: &Review) {}
fn review(_: &Review) {}

graph! {
    Flow for Review {
        start -> write;
        write -> end;
        end -> review;
        review -> end;
    }
}

fn main() {}
