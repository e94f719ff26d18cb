use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

// `interrupt_before` names a node that is not in the graph.
fn write(_: &Review) {}
fn publish(_: &Review) {}

graph! {
    Flow for Review {
        start -> write;
        write -> publish;
        publish -> end;
        interrupt_before publsh;
    }
}

fn main() {}
