use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

// No edge leads to `archive`.
fn write(_: &Review) {}
fn archive(_: &Review) {}

graph! {
    Flow for Review {
        start -> write;
        write -> end;
        archive -> end;
    }
}

fn main() {}
