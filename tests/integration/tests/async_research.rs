//! `examples/async-research` against a mock OpenAI-compatible endpoint on loopback that answers
//! each chat completion after a delay. The three async branches call it at once: the mock's
//! timestamps show every request arrived before any was answered (the fan-out took one delay,
//! not three). Then the run pauses for the pick, and the resume publishes the picked take.

#[allow(dead_code)]
#[path = "../../../examples/async-research/src/main.rs"]
mod research;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use research::{Endpoint, Research};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tea::prelude::*;

const DELAY: Duration = Duration::from_millis(300);
const KEY: &str = "sk-test-4f1c0ffee";

/// When each request arrived and when it was answered.
#[derive(Default)]
struct Calls {
    spans: Mutex<Vec<(Instant, Instant)>>,
}

async fn complete(
    State(calls): State<Arc<Calls>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Result<Json<Value>, StatusCode> {
    let arrived = Instant::now();
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(&format!("Bearer {KEY}")) {
        return Err(StatusCode::UNAUTHORIZED);
    }
    let persona = body["messages"][0]["content"].as_str().unwrap_or_default().to_owned();
    let question = body["messages"][1]["content"].as_str().unwrap_or_default().to_owned();
    tokio::time::sleep(DELAY).await;
    calls.spans.lock().unwrap().push((arrived, Instant::now()));
    Ok(Json(json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": format!("{persona} | {question}")}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    })))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_model_calls_overlap_then_a_human_picks_one() {
    let calls = Arc::new(Calls::default());
    let router = Router::new().route("/v1/chat/completions", post(complete)).with_state(Arc::clone(&calls));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    research::configure(Endpoint {
        base_url: format!("http://{address}/v1"),
        api_key: Some(KEY.to_owned()),
        model: "mock-1".to_owned(),
    });

    let app = research::app(MemoryStore::new());
    let input = Research { topic: "green tea".to_owned(), ..Research::default() };
    let (state, resume) = app.invoke_async(input).await.unwrap().interrupted().expect("it pauses for the pick");

    // The takes come back in declared branch order, whatever order the calls finished in.
    let angles: Vec<&str> = state.takes.iter().map(|t| t.angle.as_str()).collect();
    assert_eq!(angles, ["optimist", "skeptic", "historian"]);
    assert_eq!(state.takes[1].text, "You look for what could go wrong. | In three sentences: green tea");
    assert_eq!(state.choices.len(), 3);
    assert_eq!(resume.interrupts()[0].value()[2], json!(format!("historian: {}", state.takes[2].text)));

    // Concurrency, by the mock's clock: all three requests arrived before the first was answered.
    let spans = calls.spans.lock().unwrap().clone();
    assert_eq!(spans.len(), 3);
    let last_arrival = spans.iter().map(|s| s.0).max().unwrap();
    let first_answer = spans.iter().map(|s| s.1).min().unwrap();
    assert!(
        last_arrival < first_answer,
        "a call started only after another was answered: the branches did not overlap"
    );

    // The key went in the requests' headers, never into a checkpoint.
    let history = app.checkpointer().history("Researcher", resume.thread()).unwrap();
    assert!(!history.is_empty());
    for (_, bytes) in &history {
        assert!(!String::from_utf8_lossy(bytes).contains(KEY), "a checkpoint holds the API key");
    }

    // The token travels as a string; the answer picks the skeptic's take.
    let token: Resume<Research> = resume.to_string().parse().unwrap();
    let done = app.resume_async(token.answer(Some("skeptic"))).await.unwrap().done().unwrap();
    assert_eq!(done.report, format!("# green tea\n\n{}", state.takes[1].text));
    assert_eq!(calls.spans.lock().unwrap().len(), 3, "the resume does not call the model again");
}
