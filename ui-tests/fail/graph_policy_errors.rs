use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Job {
    query: String,
}

fn fetch(_: &Job) {}

// Each mistake in a policy statement is reported on its token, and the rest still read.
graph! {
    Flow for Job {
        start -> fetch;
        fetch -> end;
        retry fetch(attempts = 0);
        retry fetch(backof = 1s);
        timeout fetch(30);
        timeout fetch(3 days);
        cache fetch(ttl = 5w);
        retry fetsh(attempts = 2);
        retry end(attempts = 2);
    }
}

fn main() {}
