use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    #[reducer(append)]
    #[reducer(append)]
    log: Vec<String>,
}

fn main() {}
