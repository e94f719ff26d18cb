use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

// A guard says yes or no: it returns `bool`.
fn write(_: &Review) -> ReviewUpdate {
    Review::update().draft("draft".into())
}
fn approved(s: &Review) -> String {
    s.approved.to_string()
}
fn publish(_: &Review) {}

graph! {
    Flow for Review {
        start -> write;
        write -> publish if approved;
        write -> end;
        publish -> end;
    }
}

fn main() {}
