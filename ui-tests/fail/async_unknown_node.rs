use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Page {
    body: String,
    answer: String,
}

async fn fetch(_: &Page) -> PageUpdate {
    Page::update()
}

graph! {
    Crawl for Page {
        start -> fetch;
        fetch -> confirm;
        confirm -> end;
        interrupt confirm(body => answer);
        async fecth, start, fetch, fetch, confirm;
    }
}

fn main() {}
