use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Chat {
    #[reducer(messages)]
    history: Vec<String>,
}

fn main() {}
