// A parent's `MERMAID`/`DOT` hold its children's drawings and stay `&'static str` constants,
// usable in const contexts, with the child in another module and the parent in a function body.
use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Doc {
    #[reducer(append)]
    log: Vec<String>,
}

mod agents {
    use super::{Doc, DocUpdate};
    use tea::prelude::*;

    pub fn check(_: &Doc) -> DocUpdate {
        Doc::update().log(vec!["check".into()])
    }

    graph! {
        pub Checker for Doc { start -> check; check -> end; }
    }

    graph! {
        pub Middle for Doc { start -> inner; inner -> end; subgraph inner = Checker; }
    }
}

const CHILD_LEN: usize = agents::Checker::MERMAID.len();

fn main() {
    graph! {
        Top for Doc { start -> outer; outer -> end; subgraph outer = agents::Middle; }
    }
    const DRAWING: &str = Top::MERMAID;
    const DOT: &str = Top::DOT;
    assert!(DRAWING.len() > CHILD_LEN);
    assert!(DRAWING.contains("subgraph outer__inner [\"inner: Checker\"]"));
    assert!(DRAWING.contains("outer__inner__check[check]"));
    assert!(DOT.contains("subgraph \"cluster_outer\""));
}
