use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Page {
    body: String,
}

async fn fetch(_: &Page) -> PageUpdate {
    Page::update().body("<html>".into())
}

graph! {
    Crawl for Page {
        start -> fetch;
        fetch -> end;
        async fetch;
    }
}

fn main() {
    // A graph with async nodes runs with the async API: the blocking `invoke` does not compile.
    let _ = Crawl::builder().build().invoke(Page::default());
}
