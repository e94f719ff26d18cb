use std::rc::Rc;
use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Page {
    body: String,
}

async fn pause() {}

// The `Rc` lives across the `.await`, so the node's future is not `Send`.
async fn fetch(page: &Page) -> PageUpdate {
    let shared = Rc::new(page.body.clone());
    pause().await;
    Page::update().body(shared.to_string())
}

graph! {
    Crawl for Page {
        start -> fetch;
        fetch -> end;
        async fetch;
    }
}

fn main() {}
