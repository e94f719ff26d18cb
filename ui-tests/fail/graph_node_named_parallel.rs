use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

// `parallel` is a statement keyword of `graph!`, not a node name.
fn write(_: &Review) {}
fn parallel(_: &Review) {}

graph! {
    Flow for Review {
        start -> write;
        write -> parallel;
        parallel -> end;
    }
}

fn main() {}
