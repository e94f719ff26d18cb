use tea::prelude::*;

// Every problem is reported in one build.
#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    #[reducer(apend)]
    log: Vec<String>,
    #[reducer(sum, max)]
    revisions: u32,
    #[reducer(with)]
    summary: String,
    #[reducer(union)]
    #[reducer(union)]
    tags: std::collections::BTreeSet<String>,
}

fn main() {}
