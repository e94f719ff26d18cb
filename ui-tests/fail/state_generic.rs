use tea::prelude::*;

#[derive(GraphState, Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Review<T> {
    draft: T,
}

#[derive(GraphState, Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Bounded
where
    String: Clone,
{
    draft: String,
}

fn main() {}
