//! The Edge Agent's multi-agent actions (`agent.dispatch`, `agent.parallel`,
//! `agent.sequential`, `agent.coordinate`) over `llm.call`, against the mock server, and their
//! load errors.

#[cfg(feature = "net")]
use serde_json::json;
use tea_yaml::Engine;

#[cfg(feature = "net")]
mod support;

fn problems(text: &str) -> Vec<String> {
    match Engine::new().allow_net("127.0.0.1").load_str(text) {
        Ok(_) => panic!("loaded:\n{text}"),
        Err(e) => e.problems().iter().map(|p| format!("{}: {}", p.line(), p.message())).collect(),
    }
}

/// A file with three agents against the mock (`echo` answers each call with its last message).
#[cfg(feature = "net")]
fn team(mock: &support::mock::Mock, nodes: &str) -> tea_yaml::Agent {
    let text = format!(
        r#"
settings:
  llm: {{ api_base: "{}", api_key: sk-test, model: echo, max_retries: 0 }}
  agents:
    researcher: {{ system_prompt: "You research.", temperature: 0.3 }}
    writer: {{ system_prompt: "You write.", model: "echo", max_tokens: 50 }}
    critic: {{ temperature: 0.1, retry: {{ max_attempts: 2, backoff: 1.0 }} }}
nodes:
{nodes}
"#,
        mock.v1()
    );
    Engine::new().allow_net("127.0.0.1").load_str(&text).unwrap_or_else(|e| panic!("{e}"))
}

#[cfg(feature = "net")]
#[test]
fn dispatch_asks_one_agent_with_its_system_prompt_and_settings() {
    let mock = support::mock::Mock::start();
    let agent = team(
        &mock,
        r#"
  - name: research
    action: agent.dispatch
    params:
      agent: researcher
      task: "Research {{ topic }} ({{ state.topic }})"
    output: research
"#,
    );
    let out = agent.invoke(json!({ "topic": "tea" })).unwrap().done().unwrap();
    let r = &out["research"];
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(r["response"], "echo: Research tea (tea)");
    assert_eq!(r["content"], r["response"]);
    assert_eq!((r["agent"].clone(), r["attempts"].clone()), (json!("researcher"), json!(1)));
    assert!(r["elapsed_ms"].as_f64().is_some());
    let hits = mock.hits();
    assert_eq!(hits.len(), 1);
    let body = &hits[0].body;
    assert_eq!(
        body["messages"],
        json!([
            { "role": "system", "content": "You research." },
            { "role": "user", "content": "Research tea (tea)" },
        ])
    );
    assert_eq!(body["temperature"], 0.3);
    // The agent names no model: `settings.llm`'s.
    assert_eq!(body["model"], "echo");
    assert!(agent
        .warnings()
        .iter()
        .any(|w| w.message().contains("`params` (The Edge Agent's documentation) is read as")));
}

#[cfg(feature = "net")]
#[test]
fn parallel_asks_each_agent_and_aggregates() {
    let mock = support::mock::Mock::start();
    let agent = team(
        &mock,
        r#"
  - name: review
    uses: agent.parallel
    with:
      agents: [researcher, writer, critic]
      task: "Review {{ state.code }}"
    output: reviews
  - name: vote
    uses: agent.parallel
    with: { agents: [researcher, critic], task: "Same question", aggregation: vote }
    output: votes
"#,
    );
    let out = agent.invoke(json!({ "code": "x = 1" })).unwrap().done().unwrap();
    let r = &out["reviews"];
    assert_eq!(r["aggregation"], "collect");
    assert_eq!(r["count"], 3);
    assert_eq!(r["responses"], json!(["echo: Review x = 1", "echo: Review x = 1", "echo: Review x = 1"]));
    assert_eq!(r["agents_called"], json!(["researcher", "writer", "critic"]));
    assert_eq!(r["raw_results"][1]["agent"], "writer");
    assert_eq!(r["success"], true);
    let v = &out["votes"];
    assert_eq!(v["result"], "echo: Same question");
    assert_eq!((v["unanimous"].clone(), v["total_votes"].clone()), (json!(true), json!(2)));
    assert_eq!(v["votes"]["echo: Same question"], 2);
    let hits = mock.hits();
    assert_eq!(hits.len(), 5);
    assert_eq!(hits[1].body["max_tokens"], 50);
}

#[cfg(feature = "net")]
#[test]
fn sequential_passes_each_answer_to_the_next_agent() {
    let mock = support::mock::Mock::start();
    let agent = team(
        &mock,
        r#"
  - name: chain
    uses: agent.sequential
    with:
      agents: [researcher, writer]
      task: "{{ 'Start: ' ~ state.raw if chain_index == 0 else 'Improve (' ~ chain_index ~ '/' ~ chain_length ~ '): ' ~ previous_response }}"
      transform: "{{ current_response | upper }}"
      output_key: final
    output: chain
"#,
    );
    let out = agent.invoke(json!({ "raw": "data" })).unwrap().done().unwrap();
    let c = &out["chain"];
    assert_eq!(c["success"], true, "{c}");
    assert_eq!(c["chain"][0]["response"], "echo: Start: data");
    assert_eq!(c["chain"][1]["response"], "echo: Improve (1/2): ECHO: START: DATA");
    assert_eq!(c["result"], "ECHO: IMPROVE (1/2): ECHO: START: DATA");
    assert_eq!(c["final"], c["result"]);
    assert_eq!(c["agents_called"], json!(["researcher", "writer"]));
}

#[cfg(feature = "net")]
#[test]
fn coordinate_splits_the_task_and_aggregates_the_workers_answers() {
    let mock = support::mock::Mock::start();
    let agent = team(
        &mock,
        r#"
  - name: lead
    uses: agent.coordinate
    with: { leader: critic, workers: [researcher, writer], task: "Write about {{ state.topic }}" }
    output: lead
"#,
    );
    let out = agent.invoke(json!({ "topic": "tea" })).unwrap().done().unwrap();
    let l = &out["lead"];
    assert_eq!(l["success"], true, "{l}");
    assert_eq!(l["rounds"], 1);
    assert_eq!(l["workers"], json!(["researcher", "writer"]));
    let hits = mock.hits();
    // Split, two workers, aggregate.
    assert_eq!(hits.len(), 4);
    let split = hits[0].body["messages"][0]["content"].as_str().unwrap().to_owned();
    assert!(split.starts_with("You are a coordinator. Break down this task into subtasks for 2 workers."), "{split}");
    // The echo is no JSON list of subtasks: each worker gets the whole task.
    assert_eq!(hits[1].body["messages"][1]["content"], "Write about tea");
    let aggregate = hits[3].body["messages"][0]["content"].as_str().unwrap().to_owned();
    assert!(aggregate.contains("- Worker 1: echo: Write about tea\n- Worker 2: echo: Write about tea"), "{aggregate}");
    assert!(l["result"].as_str().unwrap().starts_with("echo: You are a coordinator. Aggregate"));
}

#[cfg(feature = "net")]
#[test]
fn dispatch_retries_as_the_agent_says_and_reports_a_failure() {
    let mock = support::mock::Mock::start();
    let agent = team(
        &mock,
        r#"
  - name: flaky
    uses: agent.dispatch
    with: { agent: critic, task: "hello", model: "down:1" }
    output: flaky
  - name: broken
    uses: agent.dispatch
    with: { agent: critic, task: "hello", model: "down:5", max_retries: 1 }
    output: broken
"#,
    );
    let out = agent.invoke(json!({})).unwrap().done().unwrap();
    assert_eq!(out["flaky"]["success"], true, "{:?}", out["flaky"]);
    assert_eq!(out["flaky"]["attempts"], 2);
    let b = &out["broken"];
    assert_eq!((b["success"].clone(), b["attempts"].clone()), (json!(false), json!(1)));
    assert!(b["error"].as_str().unwrap().contains("500"), "{b}");
}

#[test]
fn multi_agent_mistakes_are_load_errors_at_their_lines() {
    let p = problems(
        r#"
settings:
  agents:
    researcher: { system_prompt: "x", temprature: 0.3 }
    writer: { temperature: 3 }
nodes:
  - name: one
    uses: agent.dispatch
    with: { agent: reseacher, task: "t" }
  - name: many
    uses: agent.parallel
    with: { agents: [writer, ghost], task: "t", aggregation: majority }
  - name: chain
    uses: agent.sequential
    with: { agents: [writer], initial_task: "t" }
  - name: lead
    uses: agent.coordinate
    with: { coordinator: writer, workers: [writer] }
"#,
    );
    let has = |line: usize, text: &str| {
        assert!(p.iter().any(|m| m.starts_with(&format!("{line}: ")) && m.contains(text)), "{line}: {text} in {p:#?}");
    };
    if cfg!(not(feature = "net")) {
        has(9, "needs tea-yaml's cargo feature `net`");
        return;
    }
    has(4, "unknown key `temprature` in agent `researcher` of `settings.agents`; did you mean `temperature`?");
    has(5, "`temperature` of agent `writer`");
    has(9, "names agent `reseacher`, which `settings.agents` does not declare; did you mean `researcher`?");
    has(12, "names agent `ghost`");
    has(12, "`aggregation` of `with` of `agent.parallel` (node `many`) is `collect`, `vote`, `first` or `consensus`, not `majority`");
    has(15, "unknown key `initial_task`");
    has(18, "unknown key `coordinator`");
    has(18, "needs `leader`");
}

/// `agents` belongs to `settings`, not to `settings.llm`: there it is an unknown key, and
/// nothing of `settings.llm` is read as an agent.
#[test]
fn agents_under_settings_llm_are_an_unknown_key() {
    let p =
        problems("settings:\n  llm:\n    model: m\n    agents: { a: {} }\nnodes:\n  - name: n\n    run: return {}\n");
    assert_eq!(p.len(), 1, "{p:#?}");
    assert!(p[0].starts_with("4: unknown key `agents` in `settings.llm`"), "{p:#?}");
}
