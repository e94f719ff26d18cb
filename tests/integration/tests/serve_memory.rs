//! `tea serve`'s `/store` routes are the app's long-term memory (`tea::Memory`): what a node
//! keeps with `ctx.store()` is an item of the routes, a put's `ttl` expires it at the memory's
//! clock, and a search's `query` ranks items by the memory's embedder (`422` without one).

use reqwest::{Client, Method, StatusCode};
use serde_json::{json, Value};
use std::time::{Duration, UNIX_EPOCH};
use tea::prelude::*;
use tea::serve::Serve;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
struct Note {
    user: String,
    fact: String,
}

fn note(state: &Note, ctx: &Ctx<Note>) -> Result<NoteUpdate, tea::BoxError> {
    ctx.store()?.put(&["users", state.user.as_str()], "fact", json!({ "text": state.fact }))?;
    Ok(Note::update())
}

graph! {
    Noter for Note {
        start -> note;
        note -> end;
    }
}

/// A deterministic toy embedder: how often each of two words occurs.
fn toy(text: &str) -> Vec<f32> {
    vec![text.matches("tea").count() as f32, text.matches("code").count() as f32]
}

async fn spawn(router: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(tea::serve::serve(listener, router, std::future::pending()));
    format!("http://{address}")
}

async fn call(base: &str, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    let mut request = Client::new().request(method, format!("{base}{path}"));
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    (status, if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap() })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_routes_serve_the_apps_memory() {
    let clock = tea::Clock::manual(UNIX_EPOCH + Duration::from_secs(1_700_000_000));
    let store = MemoryStore::new();
    let memory = tea::Memory::new(store.clone()).clock(clock.clone()).embedder(toy).index_fields(&["text"]);
    let app = Noter::builder().checkpointer(store).memory(memory.clone()).build();
    let base = spawn(Serve::new().app(app).router()).await;

    // A run's node keeps a fact with `ctx.store()`: the routes read it.
    let input = json!({ "agent_id": "Noter", "input": { "user": "ada", "fact": "drinks green tea" } });
    let (status, body) = call(&base, Method::POST, "/runs/wait", Some(input)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, item) = call(&base, Method::GET, "/store/items?namespace=users.ada&key=fact", None).await;
    assert_eq!(status, StatusCode::OK, "{item}");
    assert_eq!(item["value"], json!({ "text": "drinks green tea" }));
    assert_eq!(item["created_at"], "2023-11-14T22:13:20.000Z", "at the memory's clock");

    // A put through the routes is an item of the memory.
    let put = json!({ "namespace": ["users", "bob"], "key": "fact", "value": { "text": "writes code" } });
    assert_eq!(call(&base, Method::PUT, "/store/items", Some(put)).await.0, StatusCode::NO_CONTENT);
    assert_eq!(memory.get(&["users", "bob"], "fact").unwrap().unwrap().value["text"], "writes code");

    // A semantic search: the most similar first, each with its score.
    let search = json!({ "namespace_prefix": ["users"], "query": "code review" });
    let (status, found) = call(&base, Method::POST, "/store/items/search", Some(search)).await;
    assert_eq!(status, StatusCode::OK, "{found}");
    let items = found["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(items[0]["namespace"], json!(["users", "bob"]));
    assert!((items[0]["score"].as_f64().unwrap() - 1.0).abs() < 1e-6, "{found}");
    assert_eq!(items[1]["score"].as_f64().unwrap(), 0.0);

    // A put's `ttl` (minutes, LangGraph's) expires the item at the memory's clock.
    let put = json!({ "namespace": ["tmp"], "key": "k", "value": { "n": 1 }, "ttl": 1 });
    assert_eq!(call(&base, Method::PUT, "/store/items", Some(put)).await.0, StatusCode::NO_CONTENT);
    assert_eq!(call(&base, Method::GET, "/store/items?namespace=tmp&key=k", None).await.0, StatusCode::OK);
    clock.advance(Duration::from_secs(61));
    assert_eq!(call(&base, Method::GET, "/store/items?namespace=tmp&key=k", None).await.0, StatusCode::NOT_FOUND);
    let (status, body) = call(&base, Method::POST, "/store/namespaces", Some(json!({}))).await;
    assert_eq!((status, body), (StatusCode::OK, json!([["users", "ada"], ["users", "bob"]])), "expired: not listed");
    let bad = json!({ "namespace": ["tmp"], "key": "k", "value": {}, "ttl": -1 });
    let (status, body) = call(&base, Method::PUT, "/store/items", Some(bad)).await;
    assert_eq!((status, body["code"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("bad_request")), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_without_an_embedder_is_refused() {
    let app = Noter::builder().checkpointer(MemoryStore::new()).build();
    let base = spawn(Serve::new().app(app).router()).await;
    let search = json!({ "namespace_prefix": ["users"], "query": "tea" });
    let (status, body) = call(&base, Method::POST, "/store/items/search", Some(search)).await;
    assert_eq!((status, body["code"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("unsupported")), "{body}");
    assert!(body["message"].as_str().unwrap().contains("embedder"), "{body}");
    // Given to the server, a memory with an embedder answers it.
    let memory = tea::Memory::new(MemoryStore::new()).embedder(toy);
    memory.put(&["users"], "k", json!({ "text": "tea" })).unwrap();
    let app = Noter::builder().checkpointer(MemoryStore::new()).build();
    let base = spawn(Serve::new().app(app).memory(memory).router()).await;
    let search = json!({ "namespace_prefix": ["users"], "query": "tea" });
    let (status, body) = call(&base, Method::POST, "/store/items/search", Some(search)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["items"][0]["key"], "k");
}
