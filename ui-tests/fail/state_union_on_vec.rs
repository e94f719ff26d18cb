use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Notes {
    #[reducer(union)]
    tags: Vec<String>,
    #[reducer(merge)]
    pairs: Vec<(String, String)>,
}

fn main() {}
