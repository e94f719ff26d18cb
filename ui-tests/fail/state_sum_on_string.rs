use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Notes {
    #[reducer(sum)]
    text: String,
}

fn main() {}
