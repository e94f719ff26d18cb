// A subgraph node runs a child graph, not a function: it cannot be `interruptible` or a router,
// and its statement needs `= ChildGraph`.
use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Doc {
    text: String,
}

fn edit(_: &Doc) {}

graph! {
    Child for Doc {
        start -> edit;
        edit -> end;
    }
}

graph! {
    Parent for Doc {
        start -> review;
        review -> end;
        subgraph review = Child;
        interruptible review;
    }
}

graph! {
    Routed for Doc {
        start -> review;
        review -> edit | end;
        edit -> end;
        subgraph review = Child;
    }
}

graph! {
    Unnamed for Doc {
        start -> review;
        review -> end;
        subgraph review Child;
    }
}

fn main() {}
