use tea::prelude::*;

const KEEP: u32 = 1;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    #[reducer(with = KEEP)]
    summary: String,
}

fn main() {}
