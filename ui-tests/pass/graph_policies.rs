// Every form of `retry`, `timeout`, `cache` and `context`, on sync and async nodes, with a
// node named like a policy keyword.
use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Job {
    query: String,
    lang: String,
}

struct Settings;

fn fetch(_: &Job) {}
async fn think(_: &Job) {}
fn cache(_: &Job) {}

graph! {
    Flow for Job {
        context Settings;
        start -> fetch;
        fetch -> think;
        think -> cache;
        cache -> end;
        async think;
        retry fetch(attempts = 5, backoff = 1.5s, max_backoff = 1m, factor = 3, jitter = 0.1, on = errors);
        retry think(attempts = 2);
        timeout fetch(250ms);
        timeout think(1h);
        cache fetch(ttl = 10m, reads = [query, lang], store);
        cache think;
    }
}

fn main() {
    let _ = Flow::builder().build();
}
