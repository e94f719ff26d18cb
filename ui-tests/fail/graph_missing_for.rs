use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

// The state type is introduced by `for`.
fn write(_: &Review) {}

graph! {
    Flow Review {
        start -> write;
        write -> end;
    }
}

fn main() {}
