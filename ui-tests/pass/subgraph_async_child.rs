// A child graph with async nodes is a subgraph node of a parent that runs with the async API
// (the parent then has no blocking API, like a graph with an async node).
use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Doc {
    #[reducer(append)]
    log: Vec<String>,
}

async fn think(_: &Doc) -> DocUpdate {
    Doc::update().log(vec!["think".into()])
}

graph! {
    pub Thinker for Doc {
        start -> think;
        think -> end;
        async think;
    }
}

fn to_child(d: &Doc) -> Doc {
    d.clone()
}
fn from_child(_: &Doc, child: Doc) -> DocUpdate {
    Doc::update().log(child.log)
}

graph! {
    pub Desk for Doc {
        start -> thinker;
        thinker -> mapped;
        mapped -> end;
        subgraph thinker = Thinker;
        subgraph mapped = Thinker(to_child => from_child);
    }
}

fn main() {
    // `invoke_async` and its kin need tea's feature `tokio` (tests/subgraph_async.rs runs them).
    let _app = Desk::builder().build();
    let _stored = Desk::builder().checkpointer(MemoryStore::new()).build();
}
