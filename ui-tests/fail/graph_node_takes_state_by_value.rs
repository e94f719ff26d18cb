use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

// A node reads the state by reference, not by value.
fn write(s: Review) -> ReviewUpdate {
    Review::update().draft(s.draft)
}

graph! {
    Flow for Review {
        start -> write;
        write -> end;
    }
}

fn main() {}
