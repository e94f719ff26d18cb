use tea::prelude::*;

#[derive(GraphState, Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Review(String, Vec<String>);

fn main() {}
