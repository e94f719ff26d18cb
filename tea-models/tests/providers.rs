//! Both providers against the local test server: request bodies and headers as the APIs
//! document them (messages, tools, tool results, system), parallel tool calls, streamed
//! answers put together, error statuses as typed errors, the request hook, and a graph node
//! whose model's tokens reach the run's stream.

use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use tea::prelude::*;
use tea::{Message, ToolDefinition};
use tea_models::testing::{Scripted, TestServer};
use tea_models::{ChatModel, ChatOptions, ChatRequest, ModelError, Reply};

fn tools() -> Vec<ToolDefinition> {
    let city = json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
    vec![
        ToolDefinition::new("weather", "The weather in a city", city.clone()),
        ToolDefinition::new("time", "The time in a city", city),
    ]
}

/// Two turns: the model calls two tools at once, then answers; `stream` streams both turns.
fn two_turns(model: &dyn ChatModel, stream: bool) -> (Vec<Message>, Vec<String>) {
    let tools = tools();
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let mut chat = vec![Message::system("Be brief."), Message::user("Weather and time in Oslo?")];
    let ask = |chat: &[Message]| -> Reply {
        let mut request = ChatRequest::new(chat).tools(&tools);
        if stream {
            let tokens = tokens.clone();
            request = request.stream_to(move |t: &str| tokens.lock().unwrap().push(t.to_owned()));
        }
        model.chat_blocking(request).unwrap()
    };
    let reply = ask(&chat);
    assert_eq!(reply.message.tool_calls().len(), 2, "two calls at once");
    chat.push(reply.message.clone());
    for call in reply.message.tool_calls() {
        let result = if call.name == "weather" { "rain" } else { "12:00" };
        chat.push(Message::tool(call.id.clone(), result));
    }
    let reply = ask(&chat);
    chat.push(reply.message);
    let tokens = tokens.lock().unwrap().clone();
    (chat, tokens)
}

fn script(server: &TestServer) {
    server.script([
        Scripted::tool_calls([("weather", json!({"city": "Oslo"})), ("time", json!({"city": "Oslo"}))]),
        Scripted::text("Rainy, and it is noon."),
    ]);
}

#[test]
fn openai_requests_carry_messages_tools_and_tool_results_as_the_api_reads_them() {
    let server = TestServer::start();
    script(&server);
    let (chat, _) = two_turns(&server.openai("gpt-test"), false);
    assert_eq!(chat.last().unwrap().text(), "Rainy, and it is noon.");
    assert_eq!(chat.last().unwrap().id(), Some("chatcmpl-2"), "the reply's id is the response's");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].path, "/v1/chat/completions");
    assert_eq!(requests[0].header("authorization"), Some("Bearer test-key"));
    let first = &requests[0].body;
    assert_eq!(first["model"], "gpt-test");
    assert_eq!(
        first["messages"],
        json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather and time in Oslo?"}])
    );
    assert_eq!(first["tools"][0]["type"], "function");
    assert_eq!(first["tools"][1]["function"]["name"], "time");
    assert_eq!(first["tools"][0]["function"]["parameters"]["required"], json!(["city"]));
    assert!(first.get("stream").is_none(), "not streamed without a sink");
    let second = &requests[1].body["messages"];
    assert_eq!(second[2]["role"], "assistant");
    assert_eq!(second[2]["content"], Value::Null);
    assert_eq!(second[2]["tool_calls"][0]["function"]["arguments"], "{\"city\":\"Oslo\"}");
    assert_eq!(second[3], json!({"role": "tool", "content": "rain", "tool_call_id": "call_1_0"}));
    assert_eq!(second[4], json!({"role": "tool", "content": "12:00", "tool_call_id": "call_1_1"}));
}

#[test]
fn anthropic_requests_put_system_on_top_and_tool_results_in_one_user_turn() {
    let server = TestServer::start();
    script(&server);
    let (chat, _) = two_turns(&server.anthropic("claude-test"), false);
    assert_eq!(chat.last().unwrap().text(), "Rainy, and it is noon.");
    let requests = server.requests();
    assert_eq!(requests[0].path, "/v1/messages");
    assert_eq!(requests[0].header("x-api-key"), Some("test-key"));
    assert_eq!(requests[0].header("anthropic-version"), Some("2023-06-01"));
    let first = &requests[0].body;
    assert_eq!(first["system"], "Be brief.");
    assert_eq!(first["max_tokens"], 4096);
    assert_eq!(first["tools"][0]["input_schema"]["required"], json!(["city"]));
    let second = &requests[1].body["messages"];
    assert_eq!(second.as_array().unwrap().len(), 3, "user, assistant, user: {second}");
    assert_eq!(second[1]["content"][0]["type"], "tool_use");
    assert_eq!(second[1]["content"][0]["input"], json!({"city": "Oslo"}));
    assert_eq!(
        second[2]["content"],
        json!([
            {"type": "tool_result", "tool_use_id": "toolu_1_0", "content": "rain"},
            {"type": "tool_result", "tool_use_id": "toolu_1_1", "content": "12:00"},
        ])
    );
}

#[test]
fn streamed_answers_come_together_as_the_same_messages_and_tokens_arrive_in_order() {
    for anthropic in [false, true] {
        let server = TestServer::start();
        script(&server);
        let whole =
            if anthropic { two_turns(&server.anthropic("c"), false) } else { two_turns(&server.openai("g"), false) };
        script(&server);
        let streamed =
            if anthropic { two_turns(&server.anthropic("c"), true) } else { two_turns(&server.openai("g"), true) };
        let strip = |chat: Vec<Message>| -> Vec<Message> {
            chat.into_iter().map(|m| if m.role() == "assistant" { m.with_id("x") } else { m }).collect()
        };
        let streamed_calls: Vec<_> =
            streamed.0[2].tool_calls().iter().map(|c| (c.name.clone(), c.arguments.clone())).collect();
        assert_eq!(
            streamed_calls,
            [("weather".to_owned(), json!({"city": "Oslo"})), ("time".to_owned(), json!({"city": "Oslo"}))],
            "anthropic: {anthropic}"
        );
        assert_eq!(strip(whole.0)[5], strip(streamed.0.clone())[5], "anthropic: {anthropic}");
        assert_eq!(streamed.1.concat(), "Rainy, and it is noon.");
        assert!(streamed.1.len() >= 4, "in pieces: {:?}", streamed.1);
        let body = &server.requests()[2].body;
        assert_eq!(body["stream"], true);
        if !anthropic {
            assert_eq!(body["stream_options"], json!({"include_usage": true}));
        }
    }
}

#[test]
fn streamed_usage_and_finish_reasons_are_kept() {
    let server = TestServer::start();
    server.script([Scripted::text("one two three")]);
    let reply =
        server.openai("g").chat_blocking(ChatRequest::new(&[Message::user("count")]).stream_to(|_: &str| {})).unwrap();
    assert_eq!(reply.usage.output_tokens, Some(3));
    assert_eq!(reply.finish_reason.as_deref(), Some("stop"));
    server.script([Scripted::tool_calls([("weather", json!({"city": "Oslo"}))])]);
    let reply =
        server.anthropic("c").chat_blocking(ChatRequest::new(&[Message::user("w")]).stream_to(|_: &str| {})).unwrap();
    assert_eq!(reply.finish_reason.as_deref(), Some("tool_use"));
    assert_eq!(reply.usage.output_tokens, Some(1));
    assert!(reply.usage.input_tokens.is_some());
}

#[test]
fn error_statuses_are_typed_errors_naming_the_model_and_hiding_the_key() {
    let server = TestServer::start();
    server.script([
        Scripted::error(429, "slow down"),
        Scripted::error(401, "Incorrect API key provided: test-key"),
        Scripted::error(529, "Overloaded"),
    ]);
    let ask = [Message::user("hi")];
    let error = server.openai("g").chat_blocking(ChatRequest::new(&ask)).unwrap_err();
    assert!(
        matches!(&error, ModelError::Status { status: 429, message, model, .. } if message == "slow down" && model == "g"),
        "{error:?}"
    );
    assert!(error.is_transient());
    let shown = error.to_string();
    assert!(
        shown.contains(&format!("POST {}/chat/completions answered 429 Too Many Requests: slow down", server.v1())),
        "{shown}"
    );

    let error = server.openai("g").chat_blocking(ChatRequest::new(&ask)).unwrap_err();
    assert_eq!(error.status(), Some(401));
    assert!(!error.is_transient());
    assert!(!format!("{error} {error:?}").contains("test-key"), "{error:?}");
    assert!(error.to_string().contains("Incorrect API key provided: ***"), "{error}");

    let error = server.anthropic("c").chat_blocking(ChatRequest::new(&ask)).unwrap_err();
    assert!(matches!(&error, ModelError::Status { status: 529, message, .. } if message == "Overloaded"), "{error:?}");
    assert!(error.is_transient());

    // A request the API refuses: a tool result that answers no call.
    let error = server
        .openai("g")
        .chat_blocking(ChatRequest::new(&[Message::user("x"), Message::tool("nope", "1")]))
        .unwrap_err();
    assert_eq!(error.status(), Some(400));
    assert!(error.to_string().contains("must be a response to a preceding message with 'tool_calls'"), "{error}");
}

#[test]
fn a_refused_connection_and_a_refusing_hook_are_typed_too() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let closed = tea_models::OpenAi::compatible(format!("http://127.0.0.1:{port}/v1"), "g");
    let error = closed.chat_blocking(ChatRequest::new(&[Message::user("hi")])).unwrap_err();
    assert!(error.is_connect() && error.is_transient(), "{error:?}");

    let server = TestServer::start();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let model = server.anthropic("c").request_hook(move |request| {
        log.lock().unwrap().push(request.url().to_string());
        Err("host not granted".to_owned())
    });
    let error = model.chat_blocking(ChatRequest::new(&[Message::user("hi")])).unwrap_err();
    assert!(matches!(&error, ModelError::Refused { why, .. } if why == "host not granted"), "{error:?}");
    assert_eq!(seen.lock().unwrap().len(), 1);
    assert!(server.requests().is_empty(), "nothing was sent");
}

#[test]
fn azure_deployments_get_the_api_version_and_an_api_key_header() {
    let server = TestServer::start();
    let azure = tea_models::OpenAi::azure(server.base(), "gpt4o-prod", "2024-10-21").api_key("az-key");
    let reply = azure.chat_blocking(ChatRequest::new(&[Message::user("hi")]).stream_to(|_: &str| {})).unwrap();
    assert_eq!(reply.message.text(), "echo: hi");
    let request = &server.requests()[0];
    assert_eq!(request.path, "/openai/deployments/gpt4o-prod/chat/completions?api-version=2024-10-21");
    assert_eq!(request.header("api-key"), Some("az-key"));
    assert_eq!(request.header("authorization"), None);
    assert!(request.body.get("stream_options").is_none());
}

#[test]
fn structured_output_asks_for_the_schema_on_both_apis() {
    let server = TestServer::start();
    let schema = json!({"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]});
    let options = ChatOptions::new().json_schema("result", schema.clone());
    server.script([Scripted::text("{\"answer\": 4}")]);
    let reply =
        server.openai("g").chat_blocking(ChatRequest::new(&[Message::user("2+2")]).options(options.clone())).unwrap();
    assert_eq!(serde_json::from_str::<Value>(&reply.message.text()).unwrap(), json!({"answer": 4}));
    assert_eq!(server.requests()[0].body["response_format"]["json_schema"]["schema"], schema);

    server.script([Scripted::tool_calls([("result", json!({"answer": 4}))])]);
    let reply =
        server.anthropic("c").chat_blocking(ChatRequest::new(&[Message::user("2+2")]).options(options)).unwrap();
    assert_eq!(serde_json::from_str::<Value>(&reply.message.text()).unwrap(), json!({"answer": 4}));
    assert!(reply.message.tool_calls().is_empty());
    let body = &server.requests()[1].body;
    assert_eq!(body["tool_choice"], json!({"type": "tool", "name": "result"}));
}

// A graph whose node asks the model: its tokens reach the run's stream as they arrive.

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Chat {
    #[reducer(messages)]
    messages: Vec<Message>,
}

struct Model(Arc<dyn ChatModel>);

fn answer(state: &Chat, ctx: &Ctx<Chat>) -> Result<ChatUpdate, tea::BoxError> {
    let model = &ctx.context::<Model>()?.0;
    let reply = model.chat_blocking(ChatRequest::new(&state.messages).stream_to(ctx.writer()))?;
    Ok(Chat::update().messages(vec![reply.message]))
}

async fn answer_async(state: &Chat, ctx: &Ctx<Chat>) -> Result<ChatUpdate, tea::BoxError> {
    let model = &ctx.context::<Model>()?.0;
    let reply = model.chat(ChatRequest::new(&state.messages).stream_to(ctx.writer())).await?;
    Ok(Chat::update().messages(vec![reply.message]))
}

graph! { Bot for Chat { context Model; start -> answer; answer -> end; } }
graph! { AsyncBot for Chat { context Model; async answer_async; start -> answer_async; answer_async -> end; } }

fn tokens_of(values: Vec<Value>) -> String {
    values
        .iter()
        .map(|v| {
            assert_eq!(v["type"], "token", "{v}");
            v["text"].as_str().unwrap().to_owned()
        })
        .collect()
}

#[test]
fn a_node_streams_its_model_tokens_into_the_run_stream() {
    let server = TestServer::start();
    for anthropic in [false, true] {
        server.script([Scripted::text("Hello there, Ada.")]);
        let model: Arc<dyn ChatModel> =
            if anthropic { Arc::new(server.anthropic("c")) } else { Arc::new(server.openai("g")) };
        let app = Bot::builder().build();
        let input = Chat { messages: vec![Message::user("Hi, I am Ada")] };
        let mut custom = Vec::new();
        let mut done = None;
        for event in app.with_context(Model(model.clone())).stream(input.clone()) {
            match event.unwrap() {
                Event::Custom { node, value } => {
                    assert_eq!(node, "answer");
                    assert!(done.is_none(), "tokens come before the end");
                    custom.push(value);
                }
                Event::Done(state) => done = Some(state),
                _ => {}
            }
        }
        assert_eq!(tokens_of(custom), "Hello there, Ada.");
        let done = done.unwrap();
        assert_eq!(done.messages.len(), 2);
        assert_eq!(done.messages[1].text(), "Hello there, Ada.");
        assert_eq!(done.messages[0].id(), Some("msg-1"));

        // Not streamed: no tokens asked for, the same answer.
        server.script([Scripted::text("Hello there, Ada.")]);
        let out = app.with_context(Model(model)).invoke(input).unwrap();
        assert_eq!(out.messages[1].text(), "Hello there, Ada.");
        let last = server.requests().pop().unwrap();
        assert!(last.body.get("stream").is_none(), "invoke does not stream");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_node_streams_its_model_tokens_into_the_async_stream() {
    use futures::StreamExt;
    let server = TestServer::start();
    server.script([Scripted::text("Streaming from an async node.")]);
    let app = AsyncBot::builder().build().with_context(Model(Arc::new(server.openai("g"))));
    let mut stream = std::pin::pin!(app.stream_async(Chat { messages: vec![Message::user("go")] }));
    let mut custom = Vec::new();
    while let Some(event) = stream.next().await {
        if let Event::Custom { value, .. } = event.unwrap() {
            custom.push(value);
        }
    }
    assert_eq!(tokens_of(custom), "Streaming from an async node.");
}

#[tokio::test]
async fn the_blocking_form_works_inside_a_runtime_too() {
    // A sync node of an async run calls `chat_blocking` on a thread with a runtime: it must
    // neither panic ("cannot start a runtime from within a runtime") nor deadlock.
    let server = TestServer::start();
    server.script([Scripted::text("fine")]);
    let reply = server.anthropic("c").chat_blocking(ChatRequest::new(&[Message::user("ok?")])).unwrap();
    assert_eq!(reply.message.text(), "fine");
}
