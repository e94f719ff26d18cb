use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

// `triage` is declared a router (`triage -> publish | end;`) but returns a plain update.
fn triage(s: &Review) -> ReviewUpdate {
    Review::update().approved(!s.draft.is_empty())
}
fn publish(_: &Review) {}

graph! {
    Flow for Review {
        start -> triage;
        triage -> publish | end;
        publish -> end;
    }
}

fn main() {}
