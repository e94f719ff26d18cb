//! `react_agent` through the OpenAI-compatible provider, against the local test server: the
//! tools' schemas in the request, parallel tool calls (streamed as `delta.tool_calls`
//! fragments) decoded and run, a bad argument corrected, tool results sent back as `tool`
//! messages, the answer's tokens in the run's stream, an approval resumed from a token's
//! bytes, and a structured answer asked for as `response_format`.

use serde_json::json;
use std::sync::{Arc, Mutex};
use tea::models::testing::{Scripted, TestServer};
use tea::models::{react_agent, AgentState, Approval, ToolNode};
use tea::{tool, Event, MemoryStore, Resume};

/// Adds two numbers.
#[tool]
fn add(a: i64, b: i64) -> i64 {
    a + b
}

/// Multiplies two numbers; asks first.
#[tool(approval)]
fn multiply(a: i64, b: i64) -> i64 {
    a * b
}

#[test]
fn parallel_calls_bad_arguments_and_streamed_tokens_through_the_openai_provider() {
    let server = TestServer::start();
    server.script([
        Scripted::tool_calls([("add", json!({"a": 1, "b": 2})), ("add", json!({"a": "x", "b": 4}))]),
        Scripted::tool_calls([("add", json!({"a": 3, "b": 4}))]),
        Scripted::text("1 + 2 = 3 and 3 + 4 = 7"),
    ]);
    let tokens = Arc::new(Mutex::new(String::new()));
    let seen = tokens.clone();
    let app = react_agent(server.openai("test-model"), ToolNode::new().with(Add))
        .system_prompt("You add.")
        .on_token(move |token| seen.lock().unwrap().push_str(token))
        .builder()
        .checkpointer(MemoryStore::new())
        .build();
    let mut streamed = String::new();
    let mut done = None;
    for event in app.stream(AgentState::user("1 + 2 and 3 + 4?")) {
        match event.unwrap() {
            Event::Custom { value, .. } if value["type"] == "token" => {
                streamed.push_str(value["text"].as_str().unwrap())
            }
            Event::Done(state) => done = Some(state),
            _ => {}
        }
    }
    let done = done.expect("the run finished");
    assert_eq!(done.last_text(), "1 + 2 = 3 and 3 + 4 = 7");
    assert_eq!(streamed, "1 + 2 = 3 and 3 + 4 = 7");
    assert_eq!(*tokens.lock().unwrap(), streamed);

    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let first = &requests[0].body;
    assert_eq!(first["messages"][0], json!({"role": "system", "content": "You add."}));
    assert_eq!(first["tools"][0]["type"], "function");
    assert_eq!(first["tools"][0]["function"]["name"], "add");
    assert_eq!(first["tools"][0]["function"]["parameters"]["required"], json!(["a", "b"]));
    // The second request carries both calls' results, in the calls' order, as tool messages.
    let second = requests[1].body["messages"].as_array().unwrap();
    let calls = second[2]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2);
    assert_eq!(second[3]["role"], "tool");
    assert_eq!(second[3]["tool_call_id"], calls[0]["id"]);
    assert_eq!(second[3]["content"], "3");
    assert_eq!(second[4]["tool_call_id"], calls[1]["id"]);
    let error = second[4]["content"].as_str().unwrap();
    assert!(error.contains("`a`: invalid type: string \"x\", expected i64"), "{error}");
    let third = requests[2].body["messages"].as_array().unwrap();
    assert_eq!(third.last().unwrap()["content"], "7");
}

#[test]
fn an_approval_resumed_from_bytes_runs_the_tool_once_through_the_provider() {
    let server = TestServer::start();
    server.script([Scripted::tool_calls([("multiply", json!({"a": 6, "b": 7}))]), Scripted::text("42")]);
    let store = MemoryStore::new();
    let app = react_agent(server.openai("test-model"), ToolNode::new().with(Multiply))
        .builder()
        .checkpointer(store.clone())
        .build();
    let (_, resume) = app.invoke(AgentState::user("6 × 7?")).unwrap().interrupted().unwrap();
    assert_eq!(resume.interrupts()[0].value()["arguments"], json!({"a": 6, "b": 7}));
    let bytes = resume.to_string().into_bytes();
    // Another app on the same store: the token from its bytes, the arguments edited.
    let again =
        react_agent(server.openai("test-model"), ToolNode::new().with(Multiply)).builder().checkpointer(store).build();
    let token: Resume<AgentState> = String::from_utf8(bytes).unwrap().parse().unwrap();
    let done = again.resume(token.answer(Approval::edit(json!({"a": 6, "b": 8})))).unwrap().done().unwrap();
    assert_eq!(done.messages[2].text(), "48");
    assert_eq!(server.requests().len(), 2);
    assert_eq!(server.requests()[1].body["messages"][2]["content"], "48");
}

#[derive(Debug, PartialEq, serde::Deserialize, schemars::JsonSchema)]
struct Sum {
    total: i64,
}

#[test]
fn a_structured_answer_is_asked_for_as_the_response_format() {
    let server = TestServer::start();
    server.script([Scripted::text(r#"{"total": 3}"#)]);
    let app = react_agent(server.openai("test-model"), ToolNode::new().with(Add))
        .output::<Sum>()
        .builder()
        .checkpointer(MemoryStore::new())
        .build();
    let done = app.invoke(AgentState::user("1 + 2?")).unwrap().done().unwrap();
    assert_eq!(done.structured::<Sum>().unwrap(), Sum { total: 3 });
    let format = &server.requests()[0].body["response_format"];
    assert_eq!(format["type"], "json_schema");
    assert_eq!(format["json_schema"]["schema"]["required"], json!(["total"]));
}
