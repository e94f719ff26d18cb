use tea::prelude::*;

fn keep_longer(current: &mut String, new: &str) {
    if new.len() > current.len() {
        *current = new.to_owned();
    }
}

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    #[reducer(with = keep_longer)]
    summary: String,
}

fn main() {}
