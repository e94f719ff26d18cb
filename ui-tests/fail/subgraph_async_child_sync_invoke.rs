// A parent whose child graph has async nodes runs with the async API only: its blocking
// `invoke` names the child.
use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Doc {
    text: String,
}

async fn think(_: &Doc) {}

graph! {
    pub Thinker for Doc {
        start -> think;
        think -> end;
        async think;
    }
}

graph! {
    pub Desk for Doc {
        start -> thinker;
        thinker -> end;
        subgraph thinker = Thinker;
    }
}

fn main() {
    let _ = Desk::builder().build().invoke(Doc::default());
}
