//! An LLM-shaped agent on the async API: three async nodes ask an OpenAI-compatible
//! chat-completions endpoint for takes on a topic at the same time (a parallel fan-out of HTTP
//! calls with `reqwest`), then the run pauses for a human to pick one, and publishes it.
//!
//! ```text
//! OPENAI_API_KEY=sk-… cargo run -p tea-example-async-research -- "tea ceremonies"
//! # any OpenAI-compatible server: a local Ollama, vLLM, llama.cpp …
//! OPENAI_BASE_URL=http://127.0.0.1:11434/v1 TEA_MODEL=llama3.2 cargo run -p tea-example-async-research -- "tea ceremonies"
//! ```
//!
//! `tests/integration/tests/async_research.rs` includes this file and runs it against a mock endpoint on loopback
//! that answers after a delay: the three calls overlap, so the fan-out takes one delay, not three.

use serde::{Deserialize, Serialize};
use serde_json::json;
use std::sync::OnceLock;
use std::time::Duration;
use tea::prelude::*;

/// Where the model is, and how to call it.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// The API's base URL, up to `/v1` (`https://api.openai.com/v1`).
    pub base_url: String,
    /// The API key, sent as a bearer token; never stored in the state or a checkpoint.
    pub api_key: Option<String>,
    /// The model to ask.
    pub model: String,
}

static ENDPOINT: OnceLock<(Endpoint, reqwest::Client)> = OnceLock::new();

/// Sets the endpoint the nodes call (once per process: the first call wins).
pub fn configure(endpoint: Endpoint) {
    let client = reqwest::Client::builder().timeout(Duration::from_secs(120)).build().expect("an HTTP client");
    let _ = ENDPOINT.set((endpoint, client));
}

/// The research state: the topic, one take per angle, the human's pick, the report.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
pub struct Research {
    /// What to research.
    pub topic: String,
    /// The takes, one per angle, merged in declared branch order.
    #[reducer(append)]
    pub takes: Vec<Take>,
    /// What the human is asked: the takes to choose from.
    pub choices: Vec<String>,
    /// The angle the human picked.
    pub pick: Option<String>,
    /// The published report.
    pub report: String,
}

/// One angle's answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Take {
    /// The angle (`optimist`, `skeptic`, `historian`).
    pub angle: String,
    /// The model's answer.
    pub text: String,
}

/// Asks the model for `angle`'s take on `topic`.
async fn ask(angle: &str, persona: &str, topic: &str) -> Result<Take, String> {
    let (endpoint, client) = ENDPOINT.get().ok_or("no endpoint: call `configure` first")?;
    let url = format!("{}/chat/completions", endpoint.base_url.trim_end_matches('/'));
    let body = json!({
        "model": endpoint.model,
        "messages": [
            {"role": "system", "content": persona},
            {"role": "user", "content": format!("In three sentences: {topic}")},
        ],
    });
    let mut request = client.post(&url).json(&body);
    if let Some(key) = &endpoint.api_key {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.map_err(|e| format!("{url}: {e}"))?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("{url} answered {status}"));
    }
    let reply: serde_json::Value = response.json().await.map_err(|e| format!("{url}: the body is not JSON: {e}"))?;
    let text = reply["choices"][0]["message"]["content"]
        .as_str()
        .ok_or_else(|| format!("{url}: the reply has no `choices[0].message.content`"))?;
    Ok(Take { angle: angle.to_owned(), text: text.to_owned() })
}

fn plan(_: &Research) {}

async fn optimist(r: &Research) -> Result<ResearchUpdate, String> {
    let take = ask("optimist", "You see the best in every idea.", &r.topic).await?;
    Ok(Research::update().takes(vec![take]))
}

async fn skeptic(r: &Research) -> Result<ResearchUpdate, String> {
    let take = ask("skeptic", "You look for what could go wrong.", &r.topic).await?;
    Ok(Research::update().takes(vec![take]))
}

async fn historian(r: &Research) -> Result<ResearchUpdate, String> {
    let take = ask("historian", "You explain where ideas come from.", &r.topic).await?;
    Ok(Research::update().takes(vec![take]))
}

/// Lists the takes as the question the `choose` pause asks.
fn offer(r: &Research) -> ResearchUpdate {
    Research::update().choices(r.takes.iter().map(|t| format!("{}: {}", t.angle, t.text)).collect())
}

fn publish(r: &Research) -> Result<ResearchUpdate, String> {
    let pick = r.pick.as_deref().ok_or("nothing was picked")?;
    let take = r.takes.iter().find(|t| t.angle == pick).ok_or_else(|| format!("no take from `{pick}`"))?;
    Ok(Research::update().report(format!("# {}\n\n{}", r.topic, take.text)))
}

graph! {
    /// Three angles on a topic at once, a human picks one, it is published.
    pub Researcher for Research {
        start -> plan;
        parallel plan => [optimist, skeptic, historian] -> offer;
        offer -> choose;
        choose -> publish;
        publish -> end;
        async optimist, skeptic, historian;
        interrupt choose(choices => pick);
    }
}

/// The app: paused runs kept in `store`.
pub fn app<C: Checkpointer>(store: C) -> App<Researcher, C> {
    Researcher::builder().checkpointer(store).build()
}

#[allow(dead_code)] // the test includes this file and calls `app` itself
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let topic = std::env::args().nth(1).unwrap_or_else(|| "why people drink tea".to_owned());
    configure(Endpoint {
        base_url: std::env::var("OPENAI_BASE_URL").unwrap_or_else(|_| "https://api.openai.com/v1".to_owned()),
        api_key: std::env::var("OPENAI_API_KEY").ok(),
        model: std::env::var("TEA_MODEL").unwrap_or_else(|_| "gpt-4o-mini".to_owned()),
    });
    let app = app(MemoryStore::new());
    let started = std::time::Instant::now();
    let (state, resume) = match app.invoke_async(Research { topic, ..Research::default() }).await? {
        Outcome::Interrupted { state, resume } => (state, resume),
        Outcome::Done(state) => {
            println!("{}", state.report);
            return Ok(());
        }
    };
    println!("three takes in {:.1} s:\n", started.elapsed().as_secs_f64());
    for (i, take) in state.takes.iter().enumerate() {
        println!("{}. {} — {}\n", i + 1, take.angle, take.text);
    }
    println!("publish which? (1-{})", state.takes.len());
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    let index: usize = line.trim().parse().map_err(|_| format!("`{}` is not a number", line.trim()))?;
    let take = state.takes.get(index.wrapping_sub(1)).ok_or("no such take")?;
    let done = app.resume_async(resume.answer(Some(take.angle.clone()))).await?;
    println!("{}", done.done().map(|s| s.report).unwrap_or_default());
    Ok(())
}
