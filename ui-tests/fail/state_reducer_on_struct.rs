use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
#[reducer(append)]
struct Review {
    log: Vec<String>,
}

fn main() {}
