//! A chatbot: a model, tools (saving a note needs your approval), memory across
//! conversations, the answer's tokens printed as they come.
//! `cargo run --example chatbot --features models-testing` (`/new` starts a new conversation).
//!
//! The model is OpenAI's (or any compatible server's) when `OPENAI_API_KEY` is set
//! (`OPENAI_BASE_URL`, `OPENAI_MODEL`), a local Ollama's when one listens (`OLLAMA_MODEL`), and
//! otherwise tea's test server, answering from a script.

use std::io::{BufRead, Write};
use tea::models::testing::{Scripted, TestServer};
use tea::models::{react_agent, AgentState, Approval, ApprovalRequest, OpenAi, ToolNode};
use tea::{tool, Call, Memory, MemoryStore, Message, Outcome, SearchQuery};

/// Tells the weather in a city.
#[tool]
fn weather(city: String) -> String {
    format!("18 °C and sunny in {city}")
}

/// Saves a note for the person, kept for later conversations.
#[tool(approval)]
fn save_note(text: String, memory: &Memory) -> Result<String, tea::Error> {
    memory.put(&["notes"], &text, serde_json::json!({ "text": text }))?;
    Ok(format!("saved the note {text:?}"))
}

/// Lists the notes the person saved, in this conversation or an earlier one.
#[tool]
fn notes(memory: &Memory) -> Result<Vec<serde_json::Value>, tea::Error> {
    Ok(memory.search(&SearchQuery::under(&["notes"]))?.into_iter().map(|note| note.value["text"].clone()).collect())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (model, _server) = model();
    let app = react_agent(model, ToolNode::new().with(Weather).with(SaveNote).with(Notes))
        .system_prompt("You are a friendly assistant. Use the tools when they help.")
        .on_token(|token| print!("{token}"))
        .builder()
        .checkpointer(MemoryStore::new())
        .build();
    let mut chat = AgentState::default();
    let mut lines = std::io::stdin().lock().lines();
    while let Some(line) = prompt("you> ", &mut lines) {
        if line == "/new" {
            chat = AgentState::default(); // a new conversation; the notes stay in memory
            continue;
        }
        chat.messages.push(Message::user(line));
        let mut call = Call::start(chat.clone());
        print!("bot> ");
        chat = loop {
            match app.run(call)? {
                Outcome::Done(state) => break state,
                Outcome::Interrupted { resume, .. } => {
                    let asked: ApprovalRequest = serde_json::from_value(resume.interrupts()[0].value().clone())?;
                    let question = format!("\n[approve {}({})? y/n] ", asked.tool, asked.arguments);
                    let yes = prompt(&question, &mut lines).is_some_and(|answer| answer.trim() == "y");
                    call = Call::resume(resume.answer(if yes { Approval::Approve } else { Approval::reject("no") }));
                }
            }
        };
        println!();
    }
    Ok(())
}

fn prompt(text: &str, lines: &mut impl Iterator<Item = std::io::Result<String>>) -> Option<String> {
    print!("{text}");
    std::io::stdout().flush().ok()?;
    lines.next()?.ok()
}

/// OpenAI (or compatible) with a key, else a local Ollama, else the test server and its script.
fn model() -> (OpenAi, Option<TestServer>) {
    let env = |key: &str, default: &str| std::env::var(key).unwrap_or_else(|_| default.to_owned());
    if std::env::var_os("OPENAI_API_KEY").is_some() {
        return (OpenAi::from_env(env("OPENAI_MODEL", "gpt-4o-mini")), None);
    }
    let ollama = "127.0.0.1:11434".parse().expect("an address");
    if std::net::TcpStream::connect_timeout(&ollama, std::time::Duration::from_millis(300)).is_ok() {
        return (OpenAi::ollama(env("OLLAMA_MODEL", "llama3.2")), None);
    }
    let server = TestServer::start();
    server.script([
        Scripted::tool_calls([("weather", serde_json::json!({"city": "Oslo"}))]),
        Scripted::text("It is 18 °C and sunny in Oslo."),
        Scripted::tool_calls([("save_note", serde_json::json!({"text": "take sunglasses"}))]),
        Scripted::text("Done: your note is saved (if you approved it)."),
        Scripted::tool_calls([("notes", serde_json::json!({}))]),
        Scripted::text("You noted: take sunglasses."),
    ]);
    (server.openai("test-model"), Some(server))
}
