use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    #[reducer(append)]
    log: Vec<String>,
    overwrite_log: bool,
}

fn main() {}
