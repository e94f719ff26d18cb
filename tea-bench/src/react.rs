//! A tool-calling conversation against tea-models' test server: `react_agent` with the
//! `OpenAi` client, as LangGraph's `create_react_agent` with `ChatOpenAI` in
//! `bench/langgraph_react.py`, against the same server (`--model-server` serves it for the
//! script).
//!
//! One run is a conversation of [`TURNS`] turns. Each turn adds a user message (`look up item
//! N`) to the conversation so far and invokes the agent on a new thread of a `MemoryStore`
//! (LangGraph: `InMemorySaver`): the model calls `lookup(item = N)`, the tool answers, the
//! model answers in text; two HTTP requests a turn. The server answers from the request alone
//! ([`TestServer::answer_with`]), so any number of turns gets the same answers. The floor,
//! `model_only`, is the same two requests a turn sent by the client alone (no graph, no tool
//! node, no store); the framework's overhead per turn is the difference.

use serde_json::{json, Value};
use std::io::{BufRead, Write};
use tea::models::testing::{Scripted, TestServer};
use tea::models::{react_agent, AgentState, ChatModel, ChatRequest, OpenAi, ToolNode};
use tea::{tool, Call, MemoryStore, Message, Outcome, ToolCall};

/// Turns in one conversation.
pub(crate) const TURNS: usize = 10;

/// Looks an item up in the stock.
#[tool]
fn lookup(
    /// The item's number.
    item: u32,
) -> String {
    format!("item {item}: 3 in stock")
}

/// The server's answer to a request: a `lookup` call after a user message (of the turn's
/// item: the number of user messages so far), a text after a tool result.
fn answer(body: &Value) -> Scripted {
    let messages = body["messages"].as_array().map_or(&[][..], Vec::as_slice);
    match messages.last() {
        Some(last) if last["role"] == "tool" => {
            Scripted::text(format!("Done: {}.", last["content"].as_str().unwrap_or_default()))
        }
        _ => {
            let turn = messages.iter().filter(|m| m["role"] == "user").count();
            Scripted::tool_calls([("lookup", json!({ "item": turn }))])
        }
    }
}

/// The server both sides call: scripted by [`answer`], recording nothing.
fn server() -> TestServer {
    let server = TestServer::start();
    server.answer_with(answer);
    server.record(false);
    server
}

/// The text the agent must end turn `turn` (from 1) with.
fn expected(turn: usize) -> String {
    format!("Done: item {turn}: 3 in stock.")
}

/// One 10-turn conversation through `react_agent`, each turn asserted, each on a new thread
/// of the workload's store.
pub(crate) fn conversation() -> impl FnMut() {
    let server = server();
    let model = OpenAi::compatible(server.v1(), "bench-model").api_key("bench-key");
    let app = react_agent(model, ToolNode::new().with(Lookup))
        .system_prompt("You look items up.")
        .builder()
        .checkpointer(MemoryStore::new())
        .build();
    let mut conversations = 0u64;
    move || {
        let _server = &server;
        conversations += 1;
        let mut messages: Vec<Message> = Vec::new();
        for turn in 1..=TURNS {
            messages.push(Message::user(format!("look up item {turn}")));
            let call = Call::start(AgentState { messages: messages.clone(), ..AgentState::default() })
                .on(format!("c{conversations}-t{turn}"));
            let state = match app.run(call).expect("the turn runs") {
                Outcome::Done(state) => state,
                Outcome::Interrupted { .. } => panic!("the agent paused"),
            };
            assert_eq!(state.last_text(), expected(turn));
            // user, assistant (call), tool, assistant (text) a turn; no system message kept.
            assert_eq!(state.messages.len(), 4 * turn, "{:?}", state.messages);
            messages = state.messages;
        }
    }
}

/// The floor: the same two requests a turn, sent by the client alone.
pub(crate) fn model_only() -> impl FnMut() {
    let server = server();
    let model = OpenAi::compatible(server.v1(), "bench-model").api_key("bench-key");
    let tools = ToolNode::new().with(Lookup).definitions();
    move || {
        let _server = &server;
        let mut messages = vec![Message::system("You look items up.")];
        for turn in 1..=TURNS {
            messages.push(Message::user(format!("look up item {turn}")));
            let reply = model.chat_blocking(ChatRequest::new(&messages).tools(&tools)).expect("a tool call");
            let call: ToolCall = reply.message.tool_calls()[0].clone();
            assert_eq!(call.arguments, json!({ "item": turn }));
            messages.push(reply.message);
            messages.push(Message::tool(call.id, format!("item {turn}: 3 in stock")));
            let reply = model.chat_blocking(ChatRequest::new(&messages).tools(&tools)).expect("an answer");
            assert_eq!(reply.message.text(), expected(turn));
            messages.push(reply.message);
        }
    }
}

/// `--model-server`: serves the test server for `bench/langgraph_react.py`, printing
/// `BASE=http://127.0.0.1:PORT/v1`, until standard input closes.
pub(crate) fn serve() {
    let server = server();
    println!("BASE={}", server.v1());
    std::io::stdout().flush().expect("stdout");
    for line in std::io::stdin().lock().lines() {
        if line.is_err() {
            break;
        }
    }
}

/// `--react-agent [--json]`: the conversation and its floor, per turn (median of `reps`
/// conversations each, after a warm-up), and their difference.
pub(crate) fn report(reps: usize, json: bool) {
    let turns = TURNS as f64;
    let agent = crate::median(reps, conversation()) / turns;
    let floor = crate::median(reps, model_only()) / turns;
    if json {
        println!("{}", json!({ "react_agent_turn": agent, "model_only_turn": floor, "overhead_turn": agent - floor }));
    } else {
        println!("react_agent, {TURNS}-turn conversation, per turn: {}", crate::human(agent));
        println!("the same requests by the client alone, per turn: {}", crate::human(floor));
        println!("tea's overhead per turn: {}", crate::human(agent - floor));
    }
}
