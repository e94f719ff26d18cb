//! A YAML node's `retry:` (The Edge Agent's keys), `timeout:` and `cache:`; a run's context
//! (`{{ context.x }}`, `context.x` in Lua, `Agent::with_context`); `emit(…)` from a `run:` block.

use serde_json::{json, Value};
use tea::{Error, Event};
use tea_yaml::{Agent, Engine, State};

fn agent(yaml: &str) -> Agent {
    Engine::new().load_str(yaml).unwrap_or_else(|e| panic!("load failed:\n{e}"))
}

fn names(events: impl Iterator<Item = Result<Event<State>, Error>>) -> Vec<String> {
    events
        .map(|event| match event {
            Ok(Event::Retry { node, attempt, .. }) => format!("retry {node} {attempt}"),
            Ok(Event::CacheHit { node, .. }) => format!("cache hit {node}"),
            Ok(Event::Custom { node, value }) => format!("custom {node} {value}"),
            Ok(Event::Step { node, .. }) => format!("step {node}"),
            Ok(Event::Done(_)) => "done".to_owned(),
            Ok(other) => format!("{other:?}"),
            Err(error) => format!("error {error}"),
        })
        .collect()
}

#[test]
fn a_failing_node_is_retried_as_its_retry_key_says() {
    let agent = agent(
        r#"
nodes:
  - name: flaky
    run: error("down")
    retry: { max_retries: 2, base_delay_ms: 1, jitter: false }
"#,
    );
    let seen = names(agent.stream(json!({})));
    assert_eq!(seen[..2], ["retry flaky 1", "retry flaky 2"]);
    assert!(seen[2].starts_with("error node `flaky` failed"), "{seen:?}");
    assert_eq!(seen.len(), 3);
}

#[test]
fn a_node_over_its_timeout_fails_with_node_timed_out() {
    let agent = Engine::new()
        .lua_time_limit(std::time::Duration::from_secs(5))
        .load_str(
            r#"
nodes:
  - name: spin
    run: |
      while true do end
    timeout: 0.2
"#,
        )
        .unwrap();
    let started = std::time::Instant::now();
    let error = agent.invoke(json!({})).unwrap_err();
    assert!(matches!(&error, Error::NodeTimedOut { node, .. } if node == "spin"), "{error:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(3), "{:?}", started.elapsed());
}

#[test]
fn a_cached_node_is_taken_from_its_cache_on_a_second_run() {
    let agent = agent(
        r#"
nodes:
  - name: lookup
    run: return { found = "tea for " .. state.query }
    cache: { ttl: 60 }
"#,
    );
    assert_eq!(names(agent.stream(json!({ "query": "ada" }))), ["step lookup", "done"]);
    assert_eq!(names(agent.stream(json!({ "query": "ada" }))), ["cache hit lookup", "step lookup", "done"]);
    assert_eq!(names(agent.stream(json!({ "query": "bob" }))), ["step lookup", "done"]);
    let out = agent.invoke(json!({ "query": "ada" })).unwrap().done().unwrap();
    assert_eq!(out["found"], "tea for ada");
}

#[test]
fn a_cache_keyed_by_the_keys_it_reads_ignores_the_others() {
    let agent = agent(
        r#"
state:
  query: str
  page: int
  found: str
nodes:
  - name: lookup
    run: return { found = "tea for " .. state.query }
    cache: { reads: [query] }
"#,
    );
    assert_eq!(names(agent.stream(json!({ "query": "ada", "page": 1 }))), ["step lookup", "done"]);
    // Another page: the key reads only `query`, so the result is taken from the cache.
    assert_eq!(names(agent.stream(json!({ "query": "ada", "page": 2 }))), ["cache hit lookup", "step lookup", "done"]);
    assert_eq!(names(agent.stream(json!({ "query": "bob", "page": 2 }))), ["step lookup", "done"]);
}

#[test]
fn the_run_context_reaches_templates_and_lua() {
    let path = std::env::temp_dir().join(format!("tea-yaml-context-{}.txt", std::process::id()));
    let yaml = format!(
        r#"
nodes:
  - name: greet
    run: return {{ greeting = "hi " .. context.user }}
  - name: write
    uses: file.write
    with: {{ path: "{}", content: "model {{{{ context.model }}}}" }}
"#,
        path.display()
    );
    let agent = Engine::new()
        .allow_write(std::env::temp_dir())
        .load_str(&yaml)
        .unwrap_or_else(|e| panic!("{e}"))
        .with_context(json!({ "user": "ada", "model": "small" }));
    let out = agent.invoke(json!({})).unwrap().done().unwrap();
    assert_eq!(out["greeting"], "hi ada");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "model small");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn the_run_context_outlives_a_new_store_or_lease_given_after_it() {
    let agent = Engine::new()
        .load_str("nodes:\n  - name: greet\n    run: return { greeting = \"hi \" .. (context.user or \"nobody\") }\n")
        .unwrap()
        .with_context(json!({ "user": "ada" }))
        .with_lease(std::time::Duration::from_secs(5))
        .with_checkpointer(tea::MemoryStore::new());
    let out = agent.invoke(json!({})).unwrap().done().unwrap();
    assert_eq!(out["greeting"], "hi ada");
}

#[test]
fn the_run_context_is_not_checkpointed() {
    let agent = Engine::new()
        .load_str(
            r#"
nodes:
  - name: ask
    run: return { }
  - name: greet
    run: return { greeting = "hi " .. (context.user or "nobody") }
config: { interrupt_before: [greet], checkpointer: memory }
"#,
        )
        .unwrap();
    let (state, resume) =
        agent.with_context(json!({ "user": "ada" })).invoke(json!({})).unwrap().interrupted().unwrap();
    assert!(!state.to_json().to_string().contains("ada"));
    let out = agent.with_context(json!({ "user": "bob" })).resume(resume).unwrap().done().unwrap();
    assert_eq!(out["greeting"], "hi bob");
}

#[test]
fn emit_in_a_run_block_is_a_custom_event() {
    let agent = agent(
        r#"
nodes:
  - name: speak
    run: |
      emit("Hel")
      emit({ token = "lo" })
      return { said = true }
"#,
    );
    assert_eq!(
        names(agent.stream(json!({}))),
        ["custom speak \"Hel\"", "custom speak {\"token\":\"lo\"}", "step speak", "done"]
    );
    // Outside a stream, emit does nothing.
    assert_eq!(agent.invoke(json!({})).unwrap().done().unwrap()["said"], true);
}

#[test]
fn a_node_that_always_fails_ends_on_the_step_limit_its_retries_count_against() {
    let agent = agent(
        r#"
config: { recursion_limit: 10 }
nodes:
  - name: flaky
    run: error("down")
    retry: { max_retries: 1000, base_delay_ms: 0, jitter: false }
"#,
    );
    let started = std::time::Instant::now();
    let events: Vec<_> = agent.stream(json!({})).collect();
    let retries = events.iter().filter(|e| matches!(e, Ok(Event::Retry { .. }))).count();
    assert_eq!(retries, 9, "the first run and 9 retries are the 10 steps");
    let last = events.last().unwrap();
    assert!(matches!(last, Err(Error::RecursionLimit { limit: 10 })), "{last:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "{:?}", started.elapsed());
}

#[test]
fn max_retries_beyond_the_cap_is_a_load_error_naming_its_line() {
    let yaml = "nodes:\n  - name: flaky\n    run: error('down')\n    retry: { max_retries: 4294967295 }\n";
    let error = Engine::new().load_str(yaml).unwrap_err().to_string();
    assert!(error.contains("`max_retries` of `retry` of node `flaky` is at most 1000"), "{error}");
    assert!(error.contains(":4:"), "the error names line 4: {error}");
}

#[test]
fn bad_policy_keys_are_load_errors() {
    for (yaml, expected) in [
        (
            "nodes:\n  - name: a\n    run: return {}\n    timeout: -1\n",
            "`timeout` of node `a` must be a positive number of seconds",
        ),
        ("nodes:\n  - name: a\n    run: return {}\n    retry: { max_retrys: 2 }\n", "max_retrys"),
        ("nodes:\n  - name: a\n    run: return {}\n    cache: yes please\n", "`cache` of node `a` is `true`"),
        (
            "state:\n  query: str\nnodes:\n  - name: a\n    run: return {}\n    cache: { reads: [qeury] }\n",
            "`reads` of `cache` of node `a` names `qeury`, which the state does not declare; did you mean `query`?",
        ),
        ("nodes:\n  - name: a\n    run: return {}\n    cache: { reads: 3 }\n", "must be a list of state keys"),
    ] {
        let error = Engine::new().load_str(yaml).unwrap_err().to_string();
        assert!(error.contains(expected), "{error}");
    }
}

#[test]
fn value_is_json() {
    // The context of a run is any JSON object; a missing key reads as nil/empty.
    let agent = agent("nodes:\n  - name: a\n    run: return { seen = context.missing == nil }\n");
    let out = agent.with_context(Value::Object(Default::default())).invoke(json!({})).unwrap().done().unwrap();
    assert_eq!(out["seen"], true);
}

#[test]
fn an_overwrite_replaces_a_reducer_keys_value() {
    let agent = agent(
        r#"
state:
  log: { type: list, reducer: append }
  total: { type: int, reducer: sum }
nodes:
  - name: add
    run: return { log = { "a", "b" }, total = 5 }
  - name: reset
    run: return { log = { __overwrite__ = { "fresh" } }, total = { __overwrite__ = 1 } }
  - name: empty
    run: |
      if state.total == 1 then return { log = { __overwrite__ = {} } } end
      return {}
"#,
    );
    let out = agent.invoke(json!({ "log": ["start"], "total": 1 })).unwrap().done().unwrap();
    assert_eq!(out["log"], json!([]));
    assert_eq!(out["total"], 1);
    let bad = Engine::new()
        .load_str("state:\n  total: { type: int, reducer: sum }\nnodes:\n  - name: a\n    run: return { total = { __overwrite__ = \"x\" } }\n")
        .unwrap()
        .invoke(json!({}))
        .unwrap_err();
    // A replacement must fit the key's type.
    assert!(bad.to_string().contains("node `a` failed"), "{bad}");
}
