use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    #[reducer]
    log: Vec<String>,
    #[reducer()]
    tags: Vec<String>,
    #[reducer = "append"]
    notes: Vec<String>,
}

fn main() {}
