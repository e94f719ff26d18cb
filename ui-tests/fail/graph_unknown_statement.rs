use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

// `frobnicate` is no statement of `graph!`.
fn write(_: &Review) {}

graph! {
    Flow for Review {
        start -> write;
        frobnicate write;
        write -> end;
    }
}

fn main() {}
