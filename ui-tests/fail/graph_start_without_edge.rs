use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

// Nothing leaves `start`.
fn write(_: &Review) {}

graph! {
    Flow for Review {
        write -> end;
    }
}

fn main() {}
