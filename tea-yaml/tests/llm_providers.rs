//! The Edge Agent's LLM providers for `llm.call` (feature `net`): `openai` (The Edge Agent's
//! `api_base` and default model), `azure` (a deployment's endpoint, the key in `api-key`),
//! `ollama` (its OpenAI-compatible endpoint from `OLLAMA_API_BASE`), `litellm`, and `shell`
//! (a command line, here `sh`, with the prompt on standard input or in its arguments, under a
//! timeout); `anthropic` (Anthropic's Messages API, against tea-models' test server);
//! `llm.chat` and `llm.embed`. Every request goes to a server on 127.0.0.1.

mod support;

use serde_json::json;
use support::mock::Mock;
use tea::Error;
use tea_models::testing::{Scripted, TestServer};
use tea_yaml::Engine;

fn failure(error: Error) -> String {
    match &error {
        Error::NodeFailed { source, .. } => source.to_string(),
        other => panic!("expected NodeFailed, got {other:?}"),
    }
}

#[test]
fn openai_takes_api_base_and_sends_the_default_model_when_none_is_named() {
    let mock = Mock::start();
    let agent = Engine::new().allow_net("127.0.0.1")
        .load_str(&format!(
            "nodes:\n  - name: ask\n    uses: llm.call\n    with:\n      provider: openai\n      api_base: \"{}\"\n      api_key: sk-test-1234\n      prompt: \"hi\"\n      extra_body: {{ seed: 7 }}\n      max_retries: 0\n    output: answer\n",
            mock.v1()
        ))
        .unwrap();
    let out = agent.invoke(json!({})).unwrap().done().unwrap();
    assert_eq!(out["answer"]["content"], "echo: hi");
    let hits = mock.hits();
    assert_eq!(hits.len(), 1);
    // The Edge Agent's Rust engine's default model; `extra_body` goes into the request's body.
    assert_eq!(hits[0].model, "gpt-3.5-turbo");
    assert_eq!(hits[0].body["seed"], 7);
    assert_eq!(hits[0].authorization.as_deref(), Some("Bearer sk-test-1234"));
}

#[test]
fn azure_calls_the_deployment_with_an_api_key_header() {
    let mock = Mock::start();
    let agent = Engine::new().allow_net("127.0.0.1")
        .load_str(&format!(
            "settings:\n  llm:\n    provider: azure\n    api_base: \"{}/azure\"\n    deployment: gpt4o-prod\n    api_key: az-key-5678\nnodes:\n  - name: ask\n    uses: llm.call\n    with:\n      messages: [{{ role: user, content: \"hello\" }}]\n",
            mock.base
        ))
        .unwrap();
    let out = agent.invoke(json!({})).unwrap().done().unwrap();
    assert_eq!(out["content"], "echo: hello");
    let hit = &mock.hits()[0];
    assert_eq!(hit.path, "/azure/gpt4o-prod");
    assert_eq!(hit.api_key.as_deref(), Some("az-key-5678"));
    assert_eq!(hit.authorization, None);
    assert!(hit.query.as_deref().is_some_and(|q| q.starts_with("api-version=")), "{:?}", hit.query);
}

#[test]
fn ollama_reads_its_endpoint_from_ollama_api_base_and_litellm_takes_base_url() {
    let mock = Mock::start();
    // The only test of this file that reads OLLAMA_API_BASE.
    std::env::set_var("OLLAMA_API_BASE", mock.v1());
    let agent = Engine::new().allow_net("127.0.0.1")
        .load_str(
            "nodes:\n  - name: ask\n    uses: llm.call\n    with: { provider: ollama, model: \"gemma3:4b\", prompt: \"hey\", timeout: 30 }\n",
        )
        .unwrap();
    let out = agent.invoke(json!({})).unwrap().done().unwrap();
    assert_eq!(out["content"], "echo: hey");
    assert_eq!(mock.hits_of("gemma3:4b").len(), 1);
    // No key goes to Ollama, whatever OPENAI_API_KEY holds.
    assert_eq!(mock.hits_of("gemma3:4b")[0].authorization, None);

    let agent = Engine::new().allow_net("127.0.0.1")
        .load_str(&format!(
            "nodes:\n  - name: ask\n    uses: llm.call\n    with: {{ provider: litellm, base_url: \"{}\", model: \"anthropic/claude-3\", prompt: \"yo\" }}\n",
            mock.v1()
        ))
        .unwrap();
    assert_eq!(agent.invoke(json!({})).unwrap().done().unwrap()["content"], "echo: yo");
    assert_eq!(mock.hits_of("anthropic/claude-3").len(), 1);
}

/// An agent whose `llm.call` runs shell provider `fake` (`command`, `args`, `stdin_mode` and
/// `timeout` as given) with `extra` more lines in its `with:`.
fn shell_agent(config: &str, extra: &str) -> String {
    format!(
        "settings:\n  shell_providers:\n    fake: {config}\nnodes:\n  - name: ask\n    uses: llm.call\n    with:\n      provider: shell\n      shell_provider: fake\n      messages:\n        - {{ role: system, content: \"Be brief.\" }}\n        - {{ role: user, content: \"{{{{ state.q }}}}\" }}\n{extra}    output: answer\n"
    )
}

#[test]
fn a_shell_provider_gets_the_prompt_on_stdin_or_in_its_arguments() {
    let engine = Engine::new().allow_net("127.0.0.1").trust_code(true);
    let piped =
        engine.load_str(&shell_agent("{ command: sh, args: [\"-c\", \"cat; printf ' [done]'\"] }", "")).unwrap();
    let out = piped.invoke(json!({ "q": "What is 2+2?" })).unwrap().done().unwrap();
    assert_eq!(
        out["answer"],
        json!({
            "content": "System: Be brief.\n\nWhat is 2+2? [done]",
            "response": "System: Be brief.\n\nWhat is 2+2? [done]",
            "usage": {},
            "provider": "shell",
            "shell_provider": "fake",
        })
    );
    let in_args = engine
        .load_str(&shell_agent(
            "{ command: sh, args: [\"-c\", \"printf 'arg=%s' \\\"$0\\\"\", \"{prompt}\"], env: { X: \"1\" } }",
            "",
        ))
        .unwrap();
    let out = in_args.invoke(json!({ "q": "hi" })).unwrap().done().unwrap();
    assert_eq!(out["answer"]["content"], "arg=System: Be brief.\n\nhi");
}

#[test]
fn a_shell_provider_that_fails_or_outlives_its_timeout_fails_the_node() {
    let engine = Engine::new().allow_net("127.0.0.1").trust_code(true);
    let failing =
        engine.load_str(&shell_agent("{ command: sh, args: [\"-c\", \"echo overloaded >&2; exit 3\"] }", "")).unwrap();
    let message = failure(failing.invoke(json!({ "q": "x" })).unwrap_err());
    assert!(message.contains("shell provider `fake`"), "{message}");
    assert!(message.contains("exited with status 3: overloaded"), "{message}");

    let slow = engine
        .load_str(&shell_agent("{ command: sh, args: [\"-c\", \"sleep 20\"], timeout: 600 }", "      timeout: 0.3\n"))
        .unwrap();
    let started = std::time::Instant::now();
    let message = failure(slow.invoke(json!({ "q": "x" })).unwrap_err());
    assert!(message.contains("no answer within 0.3 s; it was stopped"), "{message}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));

    let missing = engine.load_str(&shell_agent("{ command: tea-no-such-command-here, args: [] }", "")).unwrap();
    let message = failure(missing.invoke(json!({ "q": "x" })).unwrap_err());
    assert!(message.contains("the command `tea-no-such-command-here` is not found"), "{message}");
}

#[test]
fn a_shell_provider_runs_only_in_a_trusted_file_and_its_configuration_is_checked() {
    let text = shell_agent("{ command: sh, args: [\"-c\", \"cat\"] }", "");
    let error = Engine::new().allow_net("127.0.0.1").load_str(&text).unwrap_err();
    assert!(error.to_string().contains("runs a command line (`provider: shell`)"), "{error}");
    assert!(error.to_string().contains("--trust"), "{error}");
    let error = Engine::new()
        .allow_net("127.0.0.1")
        .trust_code(true)
        .load_str(&shell_agent("{ command: sh, argz: [] }", ""))
        .unwrap_err();
    assert!(
        error.to_string().contains("unknown key `argz` in `settings.shell_providers.fake`; did you mean `args`?"),
        "{error}"
    );
}

#[test]
fn llm_chat_says_its_backend_and_llm_embed_returns_the_vector() {
    let mock = Mock::start();
    let agent = Engine::new().allow_net("127.0.0.1")
        .load_str(&format!(
            "settings:\n  llm: {{ base_url: \"{v1}\", model: chat-model }}\nnodes:\n  - name: chat\n    uses: llm.chat\n    with: {{ prompt: \"hi\", system: \"sys\", backend: api }}\n    output: chat\n  - name: embed\n    uses: llm.embed\n    with: {{ provider: openai, base_url: \"{v1}\", text: \"four\" }}\n    output: vec\n",
            v1 = mock.v1()
        ))
        .unwrap();
    let out = agent.invoke(json!({})).unwrap().done().unwrap();
    assert_eq!(out["chat"]["content"], "echo: hi");
    assert_eq!(out["chat"]["backend"], "api");
    assert_eq!(out["vec"]["embedding"], json!([4.0, 1.0, 0.5]));
    assert_eq!(out["vec"]["dimensions"], 3);
    // The Edge Agent's default embedding model.
    assert_eq!(out["vec"]["model"], "nomic-embed-text");
    let error = Engine::new()
        .allow_net("127.0.0.1")
        .load_str("nodes:\n  - name: e\n    uses: llm.embed\n    with: { backend: local, text: x }\n")
        .unwrap();
    let message = failure(error.invoke(json!({})).unwrap_err());
    assert!(message.contains("`backend: local`: tea runs no local model"), "{message}");
}

/// An agent with one `llm.call` of `provider: anthropic` at `base`, with `with` more lines in
/// its `with:`.
fn anthropic_agent(base: &str, with: &str) -> String {
    format!(
        "nodes:\n  - name: ask\n    uses: llm.call\n    with:\n      provider: anthropic\n      base_url: \"{base}\"\n      api_key: sk-ant-test-1234\n      model: claude-sonnet-4-5\n      messages:\n        - {{ role: system, content: \"Be brief.\" }}\n        - {{ role: user, content: \"{{{{ state.q }}}}\" }}\n{with}    output: answer\n"
    )
}

#[test]
fn anthropic_sends_the_messages_api_and_returns_content_usage_and_stop_reason() {
    let server = TestServer::start();
    server.script([Scripted::text("Rain in Oslo.")]);
    let agent = Engine::new()
        .allow_net("127.0.0.1")
        .load_str(&anthropic_agent(
            server.base(),
            "      max_tokens: 64\n      temperature: 0.2\n      stop: [\"\\n\\n\"]\n      retry: { max: 0 }\n",
        ))
        .unwrap();
    let out = agent.invoke(json!({ "q": "Weather in Oslo?" })).unwrap().done().unwrap();
    let answer = &out["answer"];
    assert_eq!(answer["content"], "Rain in Oslo.");
    assert_eq!(answer["response"], "Rain in Oslo.");
    assert_eq!(answer["model"], "claude-sonnet-4-5");
    assert_eq!(answer["finish_reason"], "end_turn");
    assert_eq!(answer["usage"]["completion_tokens"], 3);
    let (input, total) = (answer["usage"]["prompt_tokens"].as_u64().unwrap(), answer["usage"]["total_tokens"].as_u64());
    assert!(input > 0);
    assert_eq!(total, Some(input + 3));

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let sent = &requests[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.header("x-api-key"), Some("sk-ant-test-1234"));
    assert_eq!(sent.header("anthropic-version"), Some(tea_models::ANTHROPIC_VERSION));
    assert_eq!(sent.header("authorization"), None);
    // The system message is the top-level `system`; the rest are content blocks.
    assert_eq!(sent.body["system"], "Be brief.");
    assert_eq!(
        sent.body["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "Weather in Oslo?"}]}])
    );
    assert_eq!(sent.body["model"], "claude-sonnet-4-5");
    assert_eq!(sent.body["max_tokens"], 64);
    assert_eq!(sent.body["temperature"], 0.2);
    assert_eq!(sent.body["stop_sequences"], json!(["\n\n"]));
    assert!(sent.body.get("stop").is_none() && sent.body.get("stream").is_none(), "{}", sent.body);
}

#[test]
fn anthropic_retries_an_overload_and_names_the_endpoint_and_status_of_a_refusal() {
    let server = TestServer::start();
    server.script([Scripted::error(529, "Overloaded"), Scripted::text("fine now")]);
    let engine = Engine::new().allow_net("127.0.0.1");
    let agent = engine.load_str(&anthropic_agent(server.base(), "      retry: { max: 1, base_ms: 10 }\n")).unwrap();
    let out = agent.invoke(json!({ "q": "hi" })).unwrap().done().unwrap();
    assert_eq!(out["answer"]["content"], "fine now");
    assert_eq!(server.requests().len(), 2);

    // The key the server repeats is taken out of the message.
    server.script([Scripted::error(401, "invalid x-api-key: sk-ant-test-1234")]);
    let message = failure(agent.invoke(json!({ "q": "hi" })).unwrap_err());
    let endpoint = format!("POST {}/v1/messages", server.base());
    assert!(
        message.contains(&format!("llm.call: {endpoint} answered 401 Unauthorized: invalid x-api-key: ***")),
        "{message}"
    );
    assert!(!message.contains("sk-ant-test-1234"), "{message}");

    // A `seed` Anthropic's API does not take, and a `stop` of the wrong type, fail the node by name.
    let seeded = engine.load_str(&anthropic_agent(server.base(), "      seed: 7\n")).unwrap();
    let message = failure(seeded.invoke(json!({ "q": "hi" })).unwrap_err());
    assert!(message.contains("`seed`: Anthropic's Messages API takes no seed"), "{message}");
    let stopped = engine.load_str(&anthropic_agent(server.base(), "      stop: 3\n")).unwrap();
    let message = failure(stopped.invoke(json!({ "q": "hi" })).unwrap_err());
    assert!(message.contains("`stop` must be a text or a list of texts"), "{message}");
    // No model named: there is no default Claude.
    let text = anthropic_agent(server.base(), "").replace("      model: claude-sonnet-4-5\n", "");
    let message = failure(engine.load_str(&text).unwrap().invoke(json!({ "q": "hi" })).unwrap_err());
    assert!(message.contains("`provider: anthropic` needs `model`"), "{message}");
    assert_eq!(server.requests().len(), 3, "nothing more was sent");
}

#[test]
fn anthropic_answers_in_the_schema_of_response_format_through_a_forced_tool() {
    let server = TestServer::start();
    server.script([Scripted::tool_calls([("forecast", json!({"city": "Oslo", "celsius": 4}))])]);
    let with = "      response_format:\n        type: json_schema\n        json_schema:\n          name: forecast\n          schema: { type: object, properties: { city: { type: string }, celsius: { type: number } }, required: [city, celsius] }\n";
    let agent = Engine::new().allow_net("127.0.0.1").load_str(&anthropic_agent(server.base(), with)).unwrap();
    let out = agent.invoke(json!({ "q": "Oslo?" })).unwrap().done().unwrap();
    let answer: serde_json::Value = serde_json::from_str(out["answer"]["content"].as_str().unwrap()).unwrap();
    assert_eq!(answer, json!({"city": "Oslo", "celsius": 4}));
    let body = &server.requests()[0].body;
    assert_eq!(body["tool_choice"], json!({"type": "tool", "name": "forecast"}));
    assert_eq!(body["tools"][0]["name"], "forecast");
    assert_eq!(body["tools"][0]["input_schema"]["required"], json!(["city", "celsius"]));
}

#[test]
fn litellm_anthropic_models_without_a_proxy_and_the_environment_key_go_to_anthropic_only() {
    let server = TestServer::start();
    // The only test of this file that reads ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY.
    std::env::set_var("ANTHROPIC_BASE_URL", server.base());
    std::env::set_var("ANTHROPIC_API_KEY", "sk-ant-env-5678");
    let engine = Engine::new().allow_net("127.0.0.1").allow_net("localhost");
    // The Edge Agent's LiteLLM form: `anthropic/MODEL`, no endpoint named.
    let agent = engine
        .load_str("nodes:\n  - name: ask\n    uses: llm.call\n    with: { provider: litellm, model: \"anthropic/claude-haiku-4-5\", prompt: \"yo\" }\n")
        .unwrap();
    assert_eq!(agent.invoke(json!({})).unwrap().done().unwrap()["content"], "echo: yo");
    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.body["model"], "claude-haiku-4-5");
    assert_eq!(sent.header("x-api-key"), Some("sk-ant-env-5678"));

    // The key from the environment goes only to Anthropic's host (here ANTHROPIC_BASE_URL's),
    // never to one the file names.
    let port = server.base().rsplit(':').next().unwrap();
    let elsewhere = engine
        .load_str(&format!(
            "nodes:\n  - name: ask\n    uses: llm.call\n    with: {{ provider: anthropic, base_url: \"http://localhost:{port}\", model: claude-haiku-4-5, prompt: \"yo\" }}\n"
        ))
        .unwrap();
    let message = failure(elsewhere.invoke(json!({})).unwrap_err());
    assert!(message.contains("environment variable `ANTHROPIC_API_KEY` is not sent to `localhost`"), "{message}");
    assert_eq!(server.requests().len(), 1);
}
