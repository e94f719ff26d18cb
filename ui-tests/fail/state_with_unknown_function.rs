use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    #[reducer(with = keep_longest)]
    summary: String,
}

fn main() {}
