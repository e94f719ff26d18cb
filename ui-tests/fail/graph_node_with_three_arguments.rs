use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

// A node takes `&State` and optionally `&Ctx<State>`, nothing more.
fn write(s: &Review, _: &Ctx<Review>, attempt: u32) -> ReviewUpdate {
    Review::update().draft(format!("{} #{attempt}", s.draft))
}

graph! {
    Flow for Review {
        start -> write;
        write -> end;
    }
}

fn main() {}
