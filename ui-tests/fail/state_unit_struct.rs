use tea::prelude::*;

#[derive(GraphState, Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Nothing;

fn main() {}
