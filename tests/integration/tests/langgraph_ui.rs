//! A UI built on LangGraph's SDK, unchanged, against `tea serve` in a real browser: the page of
//! `tea-serve/tests/sdk/ui` (React with the SDK's `useStream`, bundled by esbuild) served on one
//! loopback port, `tea::serve` on another (so every call is cross-origin: CORS), driven in
//! headless Chromium — a message sent, its answer and the run's events streamed onto the page,
//! the pause shown and approved from the page (`submit` with `command.resume`), the final state.
//!
//! The bundle is built by `.ci/run` into `TEA_TEST_LANGGRAPH_JS_DIR/ui` (with the modules of
//! `tea-serve/tests/sdk/package.json`, pinned); without it, or without Chromium and
//! chromedriver, the test says that it skipped. Screenshots: `target/langgraph-ui/`.

mod browser_support;

use browser_support::Browser;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tea::prelude::*;
use tea::serve::Serve;

/// The built page (`index.html`, `app.js`), or why the test cannot run.
fn bundle() -> Result<PathBuf, String> {
    let how = "bash .ci/run builds it: npm ci in DIR with tea-serve/tests/sdk/package*.json, then esbuild \
               tea-serve/tests/sdk/ui/app.jsx into DIR/ui";
    let Some(dir) = std::env::var_os("TEA_TEST_LANGGRAPH_JS_DIR") else {
        return Err(format!(
            "the useStream page needs TEA_TEST_LANGGRAPH_JS_DIR, a folder with the page built ({how})"
        ));
    };
    let ui = Path::new(&dir).join("ui");
    if !ui.join("app.js").is_file() || !ui.join("index.html").is_file() {
        return Err(format!("no useStream page in {} ({how})", ui.display()));
    }
    Ok(ui)
}

/// Serves the page's two files on a free loopback port; its address.
async fn serve_page(ui: &Path) -> String {
    let html = std::fs::read_to_string(ui.join("index.html")).unwrap();
    let script = std::fs::read_to_string(ui.join("app.js")).unwrap();
    let router =
        axum::Router::new().route("/", axum::routing::get(move || async move { axum::response::Html(html) })).route(
            "/app.js",
            axum::routing::get(move || async move { ([("content-type", "text/javascript; charset=utf-8")], script) }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{address}")
}

/// `tea::serve` of `tea-serve/tests/sdk/chat.yaml` on a free loopback port, open to loopback
/// peers without a token (`tea serve`'s default on loopback); its address.
async fn serve_agent() -> String {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tea-serve/tests/sdk/chat.yaml");
    let agent = tea::yaml::Engine::new().load_file_on(&file, MemoryStore::new()).unwrap();
    let router = Serve::new().yaml(agent, Arc::new(MemoryStore::new())).router();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(tea::serve::serve(listener, router, std::future::pending()));
    format!("http://{address}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn use_stream_page_sends_streams_and_approves_a_pause() {
    let ui = match bundle() {
        Ok(ui) => ui,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let Some(browser) = Browser::start("langgraph-ui").await else { return };
    let started = std::time::Instant::now();
    let page = serve_page(&ui).await;
    let api = serve_agent().await;
    browser.goto(&format!("{page}/?api={api}&assistant=chat")).await;
    browser.wait_text("#status", "idle").await;
    browser.screenshot("1-empty").await;

    // A message: the thread is made, the answer and the run's events stream in, and the run
    // pauses before `review` with its question.
    browser.type_into("#message", "hi").await;
    browser.click("#send").await;
    browser.wait_text("#messages li[data-type=ai]", "Hello Ada, you said: hi").await;
    assert_eq!(browser.text("#messages li[data-type=human]").await, "hi");
    browser.wait_contains("#events", "custom: {\"progress\":\"answering\"}").await;
    browser.wait_contains("#events", "updates: answer").await;
    browser.wait_text("#question", "Send the answer?").await;
    browser.wait_text("#status", "idle").await;
    let thread = browser.text("#thread").await;
    assert_ne!(thread, "none");
    assert_eq!(browser.text("#sent").await, "0");
    browser.screenshot("2-paused").await;

    // Approved from the page: the answer runs `send`, and the page shows the final state.
    browser.click("#approve").await;
    browser.wait_text("#sent", "1").await;
    browser.wait_text("#approved", "true").await;
    browser.wait_text("#status", "idle").await;
    // The answer's run streamed its own updates: `review` took the answer, `send` ran.
    browser.wait_contains("#events", "updates: review\nupdates: send").await;
    let events = browser.text("#events").await;
    assert!(!events.contains("error"), "{events}");
    browser.screenshot("3-done").await;
    let pauses = browser.client.find_all(fantoccini::Locator::Css("#interrupt")).await.unwrap();
    assert!(pauses.is_empty(), "the pause is still shown after its answer");
    browser.quit().await;

    // The server agrees: one thread, finished, sent once.
    let state: serde_json::Value =
        reqwest::get(format!("{api}/threads/{thread}/state")).await.unwrap().json().await.unwrap();
    assert_eq!(
        (&state["values"]["sent"], &state["values"]["approved"], &state["next"]),
        (&1.into(), &true.into(), &serde_json::json!([])),
        "{state}"
    );
    println!("the useStream page: sent, streamed, paused, approved in {:.1} s", started.elapsed().as_secs_f64());
}
