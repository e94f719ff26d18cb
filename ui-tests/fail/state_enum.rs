use tea::prelude::*;

#[derive(GraphState, Clone, Debug, serde::Serialize, serde::Deserialize)]
enum Phase {
    Draft,
    Review,
}

fn main() {}
