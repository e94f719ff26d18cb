use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Job {
    query: String,
}

fn fetch(_: &Job) {}

// A cache key read from a field the state does not have.
graph! {
    Flow for Job {
        start -> fetch;
        fetch -> end;
        cache fetch(reads = [qeury]);
    }
}

fn main() {}
