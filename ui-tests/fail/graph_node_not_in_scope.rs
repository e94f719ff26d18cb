use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

// `publish` has no function: the compiler says so on the node's name.
fn write(_: &Review) -> ReviewUpdate {
    Review::update().draft("draft".into())
}

graph! {
    Flow for Review {
        start -> write;
        write -> publish;
        publish -> end;
    }
}

fn main() {}
