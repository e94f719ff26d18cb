use tea::prelude::*;

#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Opaque;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Scores {
    #[reducer(max)]
    best: Opaque,
}

fn main() {}
