use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Counter {
    #[reducer(append)]
    count: u32,
}

fn main() {}
