use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    #[reducer(with)]
    summary: String,
    #[reducer(with =)]
    title: String,
    #[reducer(append = keep_longer)]
    log: Vec<String>,
}

fn main() {}
