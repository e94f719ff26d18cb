// A subgraph's mappings are checked against both states where the graph names them: an output
// mapping that returns the child's update instead of the parent's is an error on its name, and
// so is a child over another state used without a mapping.
use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Parent {
    topic: String,
}

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Child {
    notes: String,
}

fn search(_: &Child) -> ChildUpdate {
    Child::update().notes("found".into())
}

graph! {
    Research for Child {
        start -> search;
        search -> end;
    }
}

fn to_child(p: &Parent) -> Child {
    Child { notes: p.topic.clone() }
}

// Wrong: returns the child's update, not the parent's.
fn from_child(_: &Parent, c: Child) -> ChildUpdate {
    Child::update().notes(c.notes)
}

graph! {
    Mapped for Parent {
        start -> research;
        research -> end;
        subgraph research = Research(to_child => from_child);
    }
}

graph! {
    Shared for Parent {
        start -> research;
        research -> end;
        subgraph research = Research;
    }
}

fn main() {}
