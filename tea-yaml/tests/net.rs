//! The network actions (feature `net`) against a local OpenAI-compatible mock server: answers,
//! retries on 429 and 500, refused connections, timeouts, malformed bodies, three calls of a
//! fan-out in flight at once, `http.get`/`http.post`, `actions.notify`, and secrets that never
//! reach a checkpoint, a stream or an error. Nothing goes beyond 127.0.0.1.

mod support;

use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::mock::{refused, Mock};
use tea::{DirStore, Error};
use tea_yaml::{Agent, Engine};

const KEY: &str = "sk-mock-0123456789abcdef";

fn load(engine: &Engine, text: &str) -> Agent {
    engine.load_str(text).unwrap_or_else(|e| panic!("{e}"))
}

/// An agent with one `llm.call` node pointed at `base`, with `extra` lines in its `with:`.
fn one_call(base: &str, model: &str, extra: &str) -> String {
    format!(
        r#"
settings:
  llm: {{ base_url: "{base}", api_key: "{{{{ secrets.key }}}}" }}
nodes:
  - name: ask
    uses: llm.call
    with:
      model: "{model}"
      messages:
        - {{ role: system, content: "Be brief." }}
        - {{ role: user, content: "Summarize {{{{ state.topic }}}}" }}
{extra}
"#
    )
}

fn engine() -> Engine {
    Engine::new().allow_net("127.0.0.1").secret("key", KEY).secret_host("key", "127.0.0.1")
}

/// An error and its sources, as `tea` prints them.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text = format!("{text}: {cause}");
        source = cause.source();
    }
    text
}

fn failure(error: Error) -> (String, String) {
    match &error {
        Error::NodeFailed { node, source } => (node.to_string(), source.to_string()),
        other => panic!("expected NodeFailed, got {other:?}"),
    }
}

#[test]
fn llm_call_returns_content_usage_and_model_and_sends_the_rendered_messages() {
    let mock = Mock::start();
    let agent = load(&engine(), &one_call(&mock.v1(), "echo:0:a", "      temperature: 0.2\n      max_tokens: 50"));
    let out = agent.invoke(json!({ "topic": "tea" })).unwrap().done().unwrap();
    assert_eq!(out["content"], "echo: Summarize tea");
    assert_eq!(out["response"], "echo: Summarize tea");
    assert_eq!(out["model"], "echo:0:a");
    assert_eq!(out["finish_reason"], "stop");
    assert_eq!(out["usage"], json!({ "prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7 }));
    let hits = mock.hits_of("echo:0:a");
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].authorization.as_deref(), Some(format!("Bearer {KEY}").as_str()));
    assert_eq!(hits[0].body["messages"][1], json!({ "role": "user", "content": "Summarize tea" }));
    assert_eq!(hits[0].body["temperature"], json!(0.2));
    assert_eq!(hits[0].body["max_tokens"], json!(50));
}

#[test]
fn settings_give_the_model_and_secret_llm_api_key_the_key_and_output_picks_keys() {
    let mock = Mock::start();
    let text = format!(
        r#"
settings:
  llm: {{ base_url: "{}", model: "echo:0:b" }}
nodes:
  - name: ask
    uses: llm.call
    with: {{ prompt: "Hi {{{{ state.name }}}}", system: "Be kind." }}
    output: {{ answer: "{{{{ result.content }}}}", tokens: "{{{{ result.usage.total_tokens }}}}" }}
"#,
        mock.v1()
    );
    let agent = load(
        &Engine::new().allow_net("127.0.0.1").secret("llm_api_key", KEY).secret_host("llm_api_key", "127.0.0.1"),
        &text,
    );
    let out = agent.invoke(json!({ "name": "Ada" })).unwrap().done().unwrap();
    assert_eq!(out.to_json(), json!({ "name": "Ada", "answer": "echo: Hi Ada", "tokens": 7 }));
    let hit = &mock.hits_of("echo:0:b")[0];
    assert_eq!(hit.authorization.as_deref(), Some(format!("Bearer {KEY}").as_str()));
    assert_eq!(hit.body["messages"][0], json!({ "role": "system", "content": "Be kind." }));
}

#[test]
fn statuses_429_and_500_are_retried_with_backoff_until_an_answer() {
    let mock = Mock::start();
    let retry = "      retry: { max: 3, base_ms: 20 }";
    for model in ["busy:2:c", "down:3:c"] {
        let agent = load(&engine(), &one_call(&mock.v1(), model, retry));
        let out = agent.invoke(json!({ "topic": "x" })).unwrap().done().unwrap();
        assert_eq!(out["content"], "echo: Summarize x");
        let hits = mock.hits_of(model);
        let statuses: Vec<u16> = hits.iter().map(|h| h.status).collect();
        let failing = if model.starts_with("busy") { vec![429, 429] } else { vec![500, 500, 500] };
        assert_eq!(statuses, [failing, vec![200]].concat(), "{model}");
        // Backoff: 20 ms, then 40 ms, then 80 ms between attempts (429s say `Retry-After: 0`).
        let gap = hits[2].started.duration_since(hits[1].ended);
        assert!(gap >= Duration::from_millis(35), "{model}: second wait {gap:?}");
    }
}

#[test]
fn retries_run_out_naming_the_endpoint_the_status_and_the_attempts() {
    let mock = Mock::start();
    let agent = load(&engine(), &one_call(&mock.v1(), "busy:9:d", "      retry: { max: 1, base_ms: 1 }"));
    let (node, message) = failure(agent.invoke(json!({ "topic": "x" })).unwrap_err());
    assert_eq!(node, "ask");
    let endpoint = format!("POST {}/chat/completions", mock.v1());
    assert!(message.contains(&endpoint), "{message}");
    assert!(message.contains("answered 429 Too Many Requests (after 2 attempts): slow down"), "{message}");
    assert_eq!(mock.hits_of("busy:9:d").len(), 2);

    let agent = load(&engine(), &one_call(&mock.v1(), "down:9:d", "      retry: { max: 0 }"));
    let (_, message) = failure(agent.invoke(json!({ "topic": "x" })).unwrap_err());
    assert!(message.contains("answered 500 Internal Server Error: upstream fell over"), "{message}");
    assert_eq!(mock.hits_of("down:9:d").len(), 1);
}

#[test]
fn a_refused_connection_is_retried_then_fails_naming_the_endpoint() {
    let base = refused();
    let agent = load(&engine(), &one_call(&base, "echo", "      retry: { max: 2, base_ms: 30 }"));
    let started = Instant::now();
    let (node, message) = failure(agent.invoke(json!({ "topic": "x" })).unwrap_err());
    assert_eq!(node, "ask");
    assert!(
        message.contains(&format!("cannot connect to POST {base}/chat/completions (after 3 attempts)")),
        "{message}"
    );
    assert!(started.elapsed() >= Duration::from_millis(90), "waited 30 + 60 ms between attempts");
}

#[test]
fn a_slow_answer_times_out() {
    let mock = Mock::start();
    let agent = load(&engine(), &one_call(&mock.v1(), "slow:3000:e", "      timeout: 0.3\n      retry: { max: 0 }"));
    let started = Instant::now();
    let (_, message) = failure(agent.invoke(json!({ "topic": "x" })).unwrap_err());
    assert!(message.contains("did not answer within 0.3 s"), "{message}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn bodies_that_are_not_chat_completions_fail_the_node() {
    let mock = Mock::start();
    for (model, why) in [("garbage", "not JSON"), ("shapeless", "no `choices[0]`")] {
        let agent = load(&engine(), &one_call(&mock.v1(), model, ""));
        let (_, message) = failure(agent.invoke(json!({ "topic": "x" })).unwrap_err());
        assert!(message.contains("is not a chat completion"), "{message}");
        assert!(message.contains(why), "{message}");
        assert!(message.contains(&format!("POST {}/chat/completions (200 OK)", mock.v1())), "{message}");
    }
}

#[test]
fn the_key_never_appears_in_an_error_even_when_the_server_repeats_it() {
    let mock = Mock::start();
    let agent = load(&engine(), &one_call(&mock.v1(), "deny", ""));
    let error = agent.invoke(json!({ "topic": "x" })).unwrap_err();
    let shown = format!("{} {error:?}", chain(&error));
    assert!(!shown.contains(KEY), "{shown}");
    assert!(shown.contains("401 Unauthorized"), "{shown}");
    assert!(shown.contains("Incorrect API key provided: Bearer ***"), "{shown}");

    // A key given in the file (not a secret) is taken out of messages too.
    let text = one_call(&mock.v1(), "deny", "      api_key: sk-literal-key-in-the-file");
    let error = chain(&load(&Engine::new().allow_net("127.0.0.1"), &text).invoke(json!({ "topic": "x" })).unwrap_err());
    assert!(!error.contains("sk-literal-key-in-the-file") && error.contains("Bearer ***"), "{error}");
}

/// Every file under `dir`, read.
fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files(&path));
        } else {
            let bytes = std::fs::read(&path).unwrap();
            out.push((path, bytes));
        }
    }
    out
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn the_key_never_appears_in_a_checkpoint_a_token_or_a_stream() {
    let mock = Mock::start();
    let dir = std::env::temp_dir().join(format!("tea-yaml-net-ckpt-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let text = format!(
        "{}\n  - {{ name: approve, type: interrupt, message: \"{{{{ state.content }}}}\" }}\n",
        one_call(&mock.v1(), "echo:0:f", "").trim_end()
    );
    let agent = load(&engine().checkpointer(DirStore::open(&dir).unwrap()), &text);
    let (state, resume) = agent.invoke(json!({ "topic": "keys" })).unwrap().interrupted().unwrap();
    assert_eq!(state["content"], "echo: Summarize keys");
    assert_eq!(mock.hits_of("echo:0:f")[0].authorization.as_deref(), Some(format!("Bearer {KEY}").as_str()));
    let written = files(&dir);
    assert!(!written.is_empty());
    for (path, bytes) in &written {
        assert!(!contains(bytes, KEY), "{} holds the key", path.display());
    }
    assert!(!resume.to_string().contains(KEY));
    let events: Vec<String> =
        agent.stream(json!({ "topic": "again" })).map(|e| format!("{:?}", e.unwrap())).collect::<Vec<_>>();
    assert!(events.len() >= 2);
    assert!(events.iter().all(|e| !e.contains(KEY)));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_write_holding_a_secret_fails_its_node_and_an_update_holding_one_is_refused() {
    let text = r#"
config: { checkpointer: memory }
nodes:
  - { name: ask, type: interrupt, message: "Go?" }
  - name: copy
    uses: http.get
    with: { url: "http://127.0.0.1:9/unused" }
    output: { status: "{{ result.status }}" }
"#;
    let agent = load(&engine(), text);
    let (_, resume) = agent.invoke(json!({})).unwrap().interrupted().unwrap();
    let error =
        agent.resume(resume.clone().answer("yes").update(tea_yaml::Update::from(json!({ "x": KEY })))).unwrap_err();
    assert!(matches!(error, Error::BadResumeValue { .. }), "{error:?}");
    assert!(!chain(&error).contains(KEY), "{error}");
    let error = agent.resume(resume.clone().answer(json!({ "key": KEY }))).unwrap_err();
    assert!(matches!(error, Error::BadResumeValue { .. }), "{error:?}");
    assert!(!chain(&error).contains(KEY) && chain(&error).contains("secret `key`"), "{error}");
    let error = chain(&agent.invoke(json!({ "pasted": format!("my key is {KEY}") })).unwrap_err());
    assert!(error.contains("state key `pasted` would hold the value of secret `key`"), "{error}");
    assert!(!error.contains(KEY));
}

#[test]
fn three_parallel_calls_are_in_flight_at_once() {
    let mock = Mock::start();
    let text = format!(
        r#"
settings:
  llm: {{ base_url: "{}", model: "slow:400:g" }}
state:
  answers: {{ type: list, reducer: append }}
nodes:
  - {{ name: plan, run: "return {{}}" }}
  - {{ name: a, uses: llm.call, with: {{ prompt: "A" }}, output: {{ answers: "{{{{ [result.content] }}}}" }} }}
  - {{ name: b, uses: llm.call, with: {{ prompt: "B" }}, output: {{ answers: "{{{{ [result.content] }}}}" }} }}
  - {{ name: c, uses: llm.call, with: {{ prompt: "C" }}, output: {{ answers: "{{{{ [result.content] }}}}" }} }}
  - {{ name: join, run: "return {{ count = #state.answers }}" }}
edges:
  - {{ from: plan, parallel: [a, b, c], fan_in: join }}
  - {{ from: a, to: join }}
  - {{ from: b, to: join }}
  - {{ from: c, to: join }}
  - {{ from: join, to: __end__ }}
"#,
        mock.v1()
    );
    let agent = load(&Engine::new().allow_net("127.0.0.1"), &text);
    let started = Instant::now();
    let out = agent.invoke(json!({})).unwrap().done().unwrap();
    let took = started.elapsed();
    assert_eq!(out["answers"], json!(["echo: A", "echo: B", "echo: C"]), "merged in declared order");
    assert_eq!(out["count"], 3);
    let hits = mock.hits_of("slow:400:g");
    assert_eq!(hits.len(), 3);
    let last_start = hits.iter().map(|h| h.started).max().unwrap();
    let first_end = hits.iter().map(|h| h.ended).min().unwrap();
    assert!(last_start < first_end, "the three requests overlap in time at the server");
    assert!(took < Duration::from_millis(1100), "three 400 ms calls took {took:?}");
}

#[test]
fn http_get_and_post_return_status_headers_and_json_or_text() {
    let mock = Mock::start();
    let text = format!(
        r#"
nodes:
  - name: get
    uses: http.get
    with: {{ url: "{base}/json", query: {{ q: "a b" }}, headers: {{ x-token: "{{{{ secrets.key }}}}" }} }}
    output: page
  - name: post
    uses: http.post
    with: {{ url: "{base}/echo", json: {{ n: "{{{{ state.n }}}}" }} }}
    output: posted
  - name: text
    uses: http.post
    with: {{ url: "{base}/echo", body: "plain {{{{ state.n }}}}" }}
    output: sent_text
  - name: missing
    uses: http.get
    with: {{ url: "{base}/status/404" }}
    output: missing
"#,
        base = mock.base
    );
    let out = load(&engine(), &text).invoke(json!({ "n": 7 })).unwrap().done().unwrap();
    assert_eq!(out["page"]["status"], 200);
    assert_eq!(out["page"]["json"], json!({ "hello": "world" }));
    assert_eq!(out["page"]["headers"]["x-mock"], "yes");
    assert_eq!(out["posted"]["json"]["received"], r#"{"n":7}"#);
    assert_eq!(out["posted"]["json"]["content_type"], "application/json");
    assert_eq!(out["sent_text"]["json"]["received"], "plain 7");
    assert_eq!(out["missing"]["status"], 404);
    assert_eq!(out["missing"]["text"], "status 404");
    assert!(out["missing"].get("json").is_none());

    let failing = format!(
        "nodes:\n  - {{ name: strict, uses: http.get, with: {{ url: \"{}/status/503?token={KEY}\", fail_on_status: true, retry: {{ max: 1, base_ms: 1 }} }} }}\n",
        mock.base
    );
    let (node, message) = failure(load(&engine(), &failing).invoke(json!({})).unwrap_err());
    assert_eq!(node, "strict");
    assert!(
        message.contains(&format!("GET {}/status/503 answered 503 Service Unavailable (after 2 attempts)", mock.base)),
        "{message}"
    );
    assert!(!message.contains(KEY));
}

#[test]
fn an_answer_larger_than_16_mib_fails_the_node() {
    let mock = Mock::start();
    let text = format!("nodes:\n  - {{ name: big, uses: http.get, with: {{ url: \"{}/big\" }} }}\n", mock.base);
    let (node, message) = failure(load(&Engine::new().allow_net("127.0.0.1"), &text).invoke(json!({})).unwrap_err());
    assert_eq!(node, "big");
    assert!(message.contains(&format!("the answer of GET {}/big is larger than 16 MiB", mock.base)), "{message}");
}

#[test]
fn notify_posts_to_the_configured_webhook_or_writes_a_line() {
    let mock = Mock::start();
    let text = format!(
        r#"
settings:
  notify: {{ url: "{}/hook" }}
nodes:
  - {{ name: tell, uses: actions.notify, with: {{ title: "Waiting", message: "{{{{ state.what }}}} needs you" }} }}
"#,
        mock.base
    );
    let out =
        load(&Engine::new().allow_net("127.0.0.1"), &text).invoke(json!({ "what": "review" })).unwrap().done().unwrap();
    assert_eq!(out["sent"], true);
    assert_eq!(out["status"], 204);
    let hook = mock.hits().into_iter().find(|h| h.path == "/hook").unwrap();
    assert_eq!(hook.body, json!({ "title": "Waiting", "message": "review needs you" }));

    let text = "nodes:\n  - { name: tell, uses: actions.notify, with: { title: T, message: M } }\n";
    let out = load(&Engine::new().allow_net("127.0.0.1"), text).invoke(json!({})).unwrap().done().unwrap();
    assert_eq!(out["sent"], false);
    assert_eq!(out["via"], "stderr");
}

#[test]
fn bad_arguments_are_load_problems_or_node_failures_naming_the_key() {
    let text = r#"
settings:
  llm: { base_url: "http://127.0.0.1:9/v1", modle: x }
nodes:
  - name: ask
    uses: llm.call
    with: { promt: "hi" }
  - name: get
    uses: http.get
    with: { headers: {} }
"#;
    let error = Engine::new().allow_net("127.0.0.1").load_str(text).unwrap_err();
    let messages: Vec<(usize, &str)> = error.problems().iter().map(|p| (p.line(), p.message())).collect();
    assert!(
        messages
            .iter()
            .any(|(l, m)| *l == 3 && m.contains("unknown key `modle` in `settings.llm`; did you mean `model`?")),
        "{error}"
    );
    assert!(
        messages.iter().any(|(l, m)| *l == 7
            && m.contains("unknown argument `promt` of `llm.call` (node `ask`); did you mean `prompt`?")),
        "{error}"
    );
    assert!(messages.iter().any(|(_, m)| m.contains("`http.get` (node `get`) needs a `url`")), "{error}");

    // Arguments rendered at run time are checked when the node runs.
    let text = "nodes:\n  - { name: ask, uses: llm.call, with: \"{{ state.args }}\" }\n";
    let agent = load(&Engine::new().allow_net("127.0.0.1"), text);
    let args = json!({ "model": "m", "prompt": "p", "temprature": 1 });
    let (node, message) = failure(agent.invoke(json!({ "args": args })).unwrap_err());
    assert_eq!(node, "ask");
    assert!(message.contains("unknown argument `temprature`; did you mean `temperature`?"), "{message}");
}

#[test]
fn llm_call_shell_providers_need_trust_and_a_known_name() {
    let error = Engine::new().allow_net("127.0.0.1")
        .load_str("nodes:\n  - name: ask\n    uses: llm.call\n    with:\n      provider: shell\n      shell_provider: claud\n      prompt: hi\n")
        .unwrap_err();
    let found: Vec<String> = error.problems().iter().map(|p| format!("{}: {}", p.line(), p.message())).collect();
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].starts_with("5: `llm.call` (node `ask`) runs a command line (`provider: shell`)"), "{found:?}");
    assert!(found[0].contains("--trust"), "{found:?}");
    assert!(
        found[1].starts_with("6: shell provider `claud` (node `ask`) is not configured; did you mean `claude`?"),
        "{found:?}"
    );
    let error = Engine::new()
        .allow_net("127.0.0.1")
        .load_str("nodes:\n  - name: ask\n    uses: llm.call\n    with: { provider: antropic, prompt: hi }\n")
        .unwrap_err();
    assert!(error.to_string().contains("unknown provider `antropic`"), "{error}");
}
