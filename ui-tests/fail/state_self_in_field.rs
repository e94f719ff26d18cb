use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Thread {
    replies: Vec<Box<Self>>,
}

fn main() {}
