use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

// The guard `is_approved` is not in scope.
fn write(_: &Review) -> ReviewUpdate {
    Review::update().draft("draft".into())
}
fn publish(_: &Review) {}

graph! {
    Flow for Review {
        start -> write;
        write -> publish if is_approved;
        write -> end;
        publish -> end;
    }
}

fn main() {}
