use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Page {
    body: String,
}

// Takes the state by value.
async fn by_value(page: Page) -> PageUpdate {
    Page::update().body(page.body)
}

// Listed `async`, but a sync function.
fn not_async(_: &Page) -> PageUpdate {
    Page::update()
}

// An `async fn` not listed in the `async` statement.
async fn unlisted(_: &Page) -> PageUpdate {
    Page::update()
}

// Takes `&mut Hitl` but is not declared `interruptible`.
async fn asks(_: &Page, hitl: &mut Hitl) -> Result<PageUpdate, Pause> {
    hitl.interrupt::<String>("?")?;
    Ok(Page::update())
}

graph! {
    Crawl for Page {
        start -> by_value;
        by_value -> not_async;
        not_async -> unlisted;
        unlisted -> asks;
        asks -> end;
        async by_value, not_async, asks;
    }
}

fn main() {}
