//! Running agents: Lua and expression nodes, actions and templates, goto and edges (The Edge
//! Agent's scenarios), declared types and reducers.

use serde_json::{json, Value};
use tea::{Error, MemoryStore};
use tea_yaml::{Engine, State};

fn run(yaml: &str, input: Value) -> Result<State, Error> {
    let agent = Engine::new().load_str(yaml).unwrap_or_else(|e| panic!("load failed:\n{e}"));
    agent.invoke(input).map(|out| out.done().expect("the agent finished"))
}

#[test]
fn nodes_chain_in_file_order_and_lua_reads_state_and_variables() {
    let out = run(
        r#"
variables: { step: 5 }
nodes:
  - name: first
    run: return { count = (state.count or 0) + variables.step }
  - name: second
    run: |
      local total = state.count * 2
      return { total = total, words = { "a", "b" }, meta = { ok = true } }
"#,
        json!({ "count": 1 }),
    )
    .unwrap();
    assert_eq!(out.to_json(), json!({ "count": 6, "total": 12, "words": ["a", "b"], "meta": { "ok": true } }));
    assert_eq!(out.get("missing"), None);
    assert_eq!(out["missing"], Value::Null);
}

#[test]
fn a_conditional_goto_loops_until_its_condition_fails() {
    let out = run(
        r#"
nodes:
  - name: step
    run: return { count = (state.count or 0) + 1 }
    goto:
      - if: "state.count < 5"
        to: step
      - to: __end__
"#,
        json!({}),
    )
    .unwrap();
    assert_eq!(out["count"], 5);
}

#[test]
fn goto_wins_over_edges_and_a_string_goto_is_unconditional() {
    let out = run(
        r#"
nodes:
  - name: a
    run: return { path = "a" }
    goto: c
  - name: b
    run: return { path = state.path .. "b" }
  - name: c
    run: return { path = state.path .. "c" }
    goto: __end__
edges:
  - { from: __start__, to: b, when: "state.skip" }
  - { from: __start__, to: a }
  - { from: a, to: b }
"#,
        json!({}),
    )
    .unwrap();
    assert_eq!(out["path"], "ac");
}

/// The Edge Agent Python makes a conditional edge to `__end__` unconditional; here it is
/// conditional.
#[test]
fn a_conditional_edge_to_the_end_is_conditional() {
    let yaml = r#"
nodes:
  - name: check
    run: return {}
  - name: more
    run: return { more = true }
edges:
  - { from: __start__, to: check }
  - { from: check, to: __end__, when: "state.stop" }
  - { from: check, to: more }
  - { from: more, to: __end__ }
"#;
    assert_eq!(run(yaml, json!({ "stop": true })).unwrap().get("more"), None);
    assert_eq!(run(yaml, json!({ "stop": false })).unwrap()["more"], true);
}

#[test]
fn when_condition_and_if_share_jinja_truthiness() {
    let yaml = r#"
nodes:
  - name: check
    run: return {}
  - name: high
    run: return { went = "high" }
    goto: __end__
  - name: low
    run: return { went = "low" }
    goto: __end__
edges:
  - { from: check, to: high, condition: { type: expression, value: 'state["value"] > 10' } }
  - { from: check, to: low, condition: { type: expression, value: "state.value > 10" }, when: false }
"#;
    assert_eq!(run(yaml, json!({ "value": 11 })).unwrap()["went"], "high");
    assert_eq!(run(yaml, json!({ "value": 3 })).unwrap()["went"], "low");
    // Jinja truth: an empty list, 0, "" and a missing key are false; a bare key is the state's.
    let truth = r#"
nodes:
  - name: check
    run: return {}
    goto:
      - { if: items, to: yes }
      - { if: "!items", to: no }
  - name: yes
    run: return { went = "yes" }
    goto: __end__
  - name: no
    run: return { went = "no" }
    goto: __end__
"#;
    for (items, went) in
        [(json!([]), "no"), (json!([1]), "yes"), (json!(0), "no"), (json!(""), "no"), (json!("x"), "yes")]
    {
        assert_eq!(run(truth, json!({ "items": items })).unwrap()["went"], went, "items = {items}");
    }
    assert_eq!(run(truth, json!({})).unwrap()["went"], "no");
}

#[test]
fn no_rule_that_holds_is_no_route() {
    let err = run(
        r#"
nodes:
  - name: a
    run: return {}
    goto:
      - { if: "state.x == 1", to: __end__ }
"#,
        json!({}),
    )
    .unwrap_err();
    assert!(matches!(&err, Error::NoRoute { node, .. } if *node == "a"), "{err:?}");
}

#[test]
fn actions_render_with_and_output_keeps_types() {
    let engine = Engine::new()
        .action("text.shout", |_: &State, args: &Value| {
            Ok(json!({ "shouted": args["text"].as_str().unwrap_or("").to_uppercase(), "n": args["n"] }))
        })
        .action("math.double", |_: &State, args: &Value| Ok(json!(args["x"].as_i64().unwrap_or(0) * 2)))
        .secret("api_key", "s3cret");
    let agent = engine
        .load_str(
            r#"
variables: { greeting: Hello }
nodes:
  - name: shout
    uses: text.shout
    with: { text: "{{ variables.greeting }} {{ state.name }}", n: "{{ state.n }}" }
  - name: double
    action: math.double
    with: { x: "{{ state.n }}" }
    output: doubled
  - name: shape
    uses: math.double
    with: { x: 21 }
    output: { answer: "{{ result }}", label: "got {{ result }}" }
  - name: expr
    run: { type: expression, value: "state.n * 10", output_key: tens }
"#,
        )
        .unwrap();
    let out = agent.invoke(json!({ "name": "ada", "n": 4 })).unwrap().done().unwrap();
    assert_eq!(out["shouted"], "HELLO ADA");
    assert_eq!(out["n"], 4, "a single {{{{ expr }}}} keeps the number a number");
    assert_eq!(out["doubled"], 8);
    assert_eq!(out["answer"], 42);
    // Only the arguments that send secrets out read them (tests/hostile_run.rs).
    assert_eq!(out["label"], "got 42");
    assert_eq!(out["tens"], 40);
}

#[test]
fn a_template_reading_through_a_missing_key_fails_its_node() {
    let err = run(
        r#"
nodes:
  - name: greet
    run: { type: expression, value: "state.user.name" }
"#,
        json!({}),
    )
    .unwrap_err();
    match &err {
        Error::NodeFailed { node, source } => {
            assert_eq!(*node, "greet");
            assert!(source.to_string().contains("undefined"), "{source}");
        }
        other => panic!("expected NodeFailed, got {other:?}"),
    }
    // A missing key itself is null, and `default` works.
    let out = run(
        r#"
nodes:
  - name: greet
    run: { type: expression, value: "state.user | default('nobody')" }
"#,
        json!({}),
    )
    .unwrap();
    assert_eq!(out["result"], "nobody");
}

#[test]
fn a_condition_that_fails_to_evaluate_fails_the_node_it_routes_from() {
    let err = run(
        r#"
nodes:
  - name: a
    run: return {}
    goto:
      - { if: "state.user.name == 'x'", to: __end__ }
      - { to: __end__ }
"#,
        json!({}),
    )
    .unwrap_err();
    match &err {
        Error::NodeFailed { node, source } => {
            assert_eq!(*node, "a");
            assert!(source.to_string().contains("state.user.name"), "{source}");
        }
        other => panic!("expected NodeFailed, got {other:?}"),
    }
}

#[test]
fn declared_types_and_reducers_hold_at_every_write() {
    let yaml = r#"
state:
  log: { type: list, reducer: append }
  count: { type: int, reducer: sum }
  best: { type: float, reducer: max }
  meta: { type: dict, reducer: merge }
  approved: bool
nodes:
  - name: one
    run: return { log = { "one" }, count = 2, best = 1.5, meta = { a = 1 } }
  - name: two
    run: return { log = "two", count = 3, best = 0.5, meta = { b = 2 }, approved = true }
"#;
    let out = run(yaml, json!({ "count": 1 })).unwrap();
    assert_eq!(out["log"], json!(["one", "two"]));
    assert_eq!(out["count"], 6);
    assert_eq!(out["best"], 1.5);
    assert_eq!(out["meta"], json!({ "a": 1, "b": 2 }));
    assert_eq!(out["approved"], true);

    let bad = r#"
state:
  approved: bool
nodes:
  - name: set
    run: return { approved = "yes" }
"#;
    match run(bad, json!({})).unwrap_err() {
        Error::NodeFailed { node, source } => {
            assert_eq!(node, "set");
            let message = source.to_string();
            assert!(message.contains("`approved`") && message.contains("`bool`"), "{message}");
        }
        other => panic!("expected NodeFailed, got {other:?}"),
    }
    // The input is checked too.
    match run(bad, json!({ "approved": 3 })).unwrap_err() {
        Error::NodeFailed { node, source } => {
            assert_eq!(node, "__start__");
            assert!(source.to_string().contains("`approved`"), "{source}");
        }
        other => panic!("expected NodeFailed, got {other:?}"),
    }
    assert!(matches!(run(bad, json!([1])), Err(Error::NodeFailed { .. })));
}

#[test]
fn a_lua_block_returning_something_else_than_a_table_fails_its_node() {
    let err = run("nodes:\n  - name: odd\n    run: return 42\n", json!({})).unwrap_err();
    match err {
        Error::NodeFailed { node, source } => {
            assert_eq!(node, "odd");
            assert!(source.to_string().contains("must return a table"), "{source}");
        }
        other => panic!("expected NodeFailed, got {other:?}"),
    }
}

#[test]
fn lua_runtime_errors_name_the_file_line() {
    let err =
        run("nodes:\n  - name: boom\n    run: |\n      local t = nil\n      return t.x\n", json!({})).unwrap_err();
    match err {
        Error::NodeFailed { node, source } => {
            assert_eq!(node, "boom");
            assert!(source.to_string().contains("<string>:5:"), "{source}");
        }
        other => panic!("expected NodeFailed, got {other:?}"),
    }
}

#[test]
fn lua_limits_fail_the_node_with_a_message_that_says_so() {
    let engine = Engine::new().lua_instruction_limit(10_000);
    let agent = engine.load_str("nodes:\n  - name: spin\n    run: while true do end\n").unwrap();
    match agent.invoke(json!({})).unwrap_err() {
        Error::NodeFailed { node, source } => {
            assert_eq!(node, "spin");
            assert!(source.to_string().contains("instruction limit of 10000"), "{source}");
        }
        other => panic!("expected NodeFailed, got {other:?}"),
    }
    let engine = Engine::new().lua_memory_limit(2 << 20).lua_instruction_limit(u64::MAX / 2);
    let agent = engine
        .load_str("nodes:\n  - name: hog\n    run: |\n      local t = {}\n      for i = 1, 1e9 do t[i] = string.rep('x', 64) .. i end\n")
        .unwrap();
    match agent.invoke(json!({})).unwrap_err() {
        Error::NodeFailed { node, source } => {
            assert_eq!(node, "hog");
            assert!(source.to_string().contains("out of memory"), "{source}");
        }
        other => panic!("expected NodeFailed, got {other:?}"),
    }
    // The thread's VM works again for the next agent.
    let ok = Engine::new().load_str("nodes:\n  - name: fine\n    run: return { ok = true }\n").unwrap();
    assert_eq!(ok.invoke(json!({})).unwrap().done().unwrap()["ok"], true);
}

#[test]
fn a_file_that_cannot_pause_runs_without_a_store_and_with_one() {
    let yaml = "nodes:\n  - name: a\n    run: return { a = 1 }\n";
    let agent = Engine::new().load_str(yaml).unwrap();
    assert_eq!(agent.invoke(json!({})).unwrap().done().unwrap()["a"], 1);
    let events: Vec<_> = agent.stream(json!({})).collect::<Result<_, _>>().unwrap();
    assert_eq!(events.len(), 2);
    let stored = agent.with_checkpointer(MemoryStore::new());
    let out = stored.start(json!({})).and_then(|call| stored.run(call.on("t1"))).unwrap().done().unwrap();
    assert_eq!(out["a"], 1);
    let snapshot = stored.state(&"t1".into()).unwrap().unwrap();
    assert_eq!(snapshot.state["a"], 1);
    assert!(!stored.history(&"t1".into()).unwrap().is_empty());
    assert!(matches!(
        stored.start(json!({})).and_then(|call| stored.run(call.on("t1"))),
        Err(Error::ThreadExists { .. })
    ));
}

#[test]
fn mermaid_and_dot_draw_the_routing() {
    let agent = Engine::new()
        .load_str(
            r#"
config: { checkpointer: memory }
nodes:
  - name: check
    run: return {}
    goto:
      - { if: "state.x > 1", to: ask }
      - { to: __end__ }
  - name: ask
    type: interrupt
    message: "ok?"
"#,
        )
        .unwrap();
    let m = agent.mermaid();
    assert!(m.starts_with("flowchart TD"), "{m}");
    assert!(m.contains("n0 -->|\"state.x > 1\"| n1"), "{m}");
    assert!(m.contains("n0 --> __end__"), "{m}");
    assert!(m.contains("n1{{\"ask\"}}"), "{m}");
    let d = agent.dot();
    assert!(d.contains("\"n1\" [label=\"ask\", shape=hexagon]"), "{d}");
}

#[test]
fn agents_are_send_and_sync_and_states_serialize() {
    fn send_sync<T: Send + Sync + 'static>() {}
    fn state_like<T: Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned>() {}
    send_sync::<tea_yaml::Agent>();
    send_sync::<tea_yaml::Engine>();
    state_like::<State>();
    let agent = std::sync::Arc::new(
        Engine::new().load_str("nodes:\n  - name: a\n    run: return { n = (state.n or 0) + 1 }\n").unwrap(),
    );
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let agent = agent.clone();
            std::thread::spawn(move || agent.invoke(json!({ "n": i })).unwrap().done().unwrap()["n"].as_i64().unwrap())
        })
        .collect();
    let mut got: Vec<i64> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    got.sort();
    assert_eq!(got, [1, 2, 3, 4]);
    let state: State = serde_json::from_value(json!({ "a": 1 })).unwrap();
    assert_eq!(serde_json::to_value(&state).unwrap(), json!({ "a": 1 }));
}

#[test]
fn an_agent_lists_its_nodes_and_threads_and_deletes_them() {
    let agent = Engine::new()
        .load_str("config: { checkpointer: memory }\nnodes:\n  - name: first\n    run: return {}\n  - name: second\n    run: return {}\n")
        .unwrap();
    assert_eq!(agent.nodes(), ["first", "second"]);
    agent.start(json!({})).and_then(|call| agent.run(call.on("t-a"))).unwrap();
    agent.start(json!({})).and_then(|call| agent.run(call.on("t-b"))).unwrap();
    let mut threads: Vec<String> = agent.threads().unwrap().iter().map(|t| t.to_string()).collect();
    threads.sort();
    assert_eq!(threads, ["t-a", "t-b"]);
    assert!(agent.prune(&"t-a".into(), 1).unwrap() > 0);
    assert!(agent.delete(&"t-a".into()).unwrap());
    assert_eq!(agent.threads().unwrap().len(), 1);
}

#[test]
fn an_error_inside_a_callback_names_the_blocks_line() {
    let err =
        run("nodes:\n  - name: bad\n    run: |\n      local x = 1\n      variables.x = 2\n", json!({})).unwrap_err();
    match err {
        Error::NodeFailed { node, source } => {
            assert_eq!(node, "bad");
            let message = source.to_string();
            assert!(message.contains("read-only") && message.contains("<string>:5"), "{message}");
        }
        other => panic!("expected NodeFailed, got {other:?}"),
    }
}
