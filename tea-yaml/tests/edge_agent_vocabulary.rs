//! The Edge Agent's vocabulary beyond tea's first dialect, as its own engines run it:
//! `type: while_loop` nodes, … Each test runs an agent the way The Edge Agent's tests do and
//! checks the final state they expect; refused keys name the file, the line and the key.

use serde_json::json;
use tea_yaml::Engine;

/// The message of every problem of a file that must not load.
fn problems(yaml: &str) -> Vec<String> {
    let error = Engine::new().load_str(yaml).expect_err("the file must not load");
    error.problems().iter().map(|p| format!("{}: {}", p.line(), p.message())).collect()
}

// --- type: while_loop ---------------------------------------------------------------------

/// The Edge Agent's `examples/while-loop-parity-test.yaml` (and its Rust tests' loop agents).
const LOOP: &str = r#"
name: while-loop-parity-test
nodes:
  - name: counter_loop
    type: while_loop
    condition: "state.count < 5"
    max_iterations: 10
    body:
      - name: increment
        language: lua
        run: |
          local count = state.count or 0
          local sum = state.sum or 0
          return { count = count + 1, sum = sum + count + 1 }
  - name: after
    run: return { final_count = state.count }
"#;

#[test]
fn a_while_loop_runs_its_body_while_its_condition_holds() {
    let agent = Engine::new().load_str(LOOP).unwrap();
    let out = agent.invoke(json!({ "count": 0 })).unwrap().done().unwrap();
    assert_eq!(out.to_json(), json!({ "count": 5, "sum": 15, "final_count": 5 }));
    // A condition false at once: the body never runs.
    let out = agent.invoke(json!({ "count": 7 })).unwrap().done().unwrap();
    assert_eq!(out.to_json(), json!({ "count": 7, "final_count": 7 }));
}

#[test]
fn a_while_loop_stops_at_max_iterations_without_an_error() {
    let agent = Engine::new()
        .load_str(
            r#"
nodes:
  - name: spin
    type: while_loop
    condition: "true"
    max_iterations: 4
    body:
      - name: a
        run: return { n = (state.n or 0) + 1 }
      - name: b
        run:
          type: expression
          value: "state.n * 10"
          output_key: tens
"#,
        )
        .unwrap();
    let out = agent.invoke(json!({})).unwrap().done().unwrap();
    assert_eq!(out.to_json(), json!({ "n": 4, "tens": 40 }));
}

#[test]
fn a_failing_body_node_fails_the_loop_naming_it_and_the_pass() {
    let agent = Engine::new()
        .load_str(
            r#"
nodes:
  - name: loop
    type: while_loop
    condition: "state.n < 3"
    max_iterations: 10
    body:
      - name: step
        run: |
          if state.n == 2 then error("two") end
          return { n = state.n + 1 }
"#,
        )
        .unwrap();
    let error = tea::error_chain(&agent.invoke(json!({ "n": 0 })).unwrap_err());
    assert!(error.contains("loop `loop`, body node `step`, pass 2"), "{error}");
}

#[test]
fn a_while_loop_without_its_keys_or_with_a_bad_bound_does_not_load() {
    let missing = problems("nodes:\n  - name: l\n    type: while_loop\n");
    assert!(missing.iter().any(|p| p.contains("needs `condition`")), "{missing:?}");
    assert!(missing.iter().any(|p| p.contains("needs `max_iterations`")), "{missing:?}");
    assert!(missing.iter().any(|p| p.contains("needs `body:`")), "{missing:?}");
    for bound in ["0", "1001", "ten"] {
        let yaml = format!(
            "nodes:\n  - name: l\n    type: while_loop\n    condition: \"true\"\n    max_iterations: {bound}\n    body:\n      - name: b\n        run: return {{}}\n"
        );
        let found = problems(&yaml);
        assert_eq!(
            found,
            [format!("5: `max_iterations` of node `l` must be an integer from 1 to 1000, not `{bound}`")]
        );
    }
    let empty = problems(
        "nodes:\n  - name: l\n    type: while_loop\n    condition: \"true\"\n    max_iterations: 3\n    body: []\n",
    );
    assert_eq!(empty, ["6: `body` of node `l` is empty: a loop needs a node to run"]);
    let nested = problems(
        "nodes:\n  - name: l\n    type: while_loop\n    condition: \"true\"\n    max_iterations: 3\n    body:\n      - name: inner\n        type: while_loop\n",
    );
    assert!(nested[0].starts_with("8: node `l`: its `body` runs `run:` blocks and actions"), "{nested:?}");
}

#[test]
fn loop_keys_on_another_node_are_refused_by_name() {
    let found = problems("nodes:\n  - name: a\n    max_iterations: 3\n    run: return {}\n");
    assert_eq!(found.len(), 1);
    assert!(
        found[0].starts_with("3: `max_iterations` belongs to `type: while_loop` nodes; node `a` is not one"),
        "{found:?}"
    );
    // `condition` elsewhere is ignored by both of The Edge Agent's engines: a warning says so.
    let agent =
        Engine::new().load_str("nodes:\n  - name: a\n    condition: \"state.x\"\n    run: return {}\n").unwrap();
    assert_eq!(agent.warnings().len(), 1);
    assert!(agent.warnings()[0]
        .message()
        .contains("`condition` on a node that is not a `type: while_loop` is ignored"));
}

// --- dynamic_parallel: `output:` and the edge to its own fan-in -----------------------------

/// As `examples/yaml/dynamic_parallel_action_mode.yaml` writes it: `output:` on the node, and an
/// edge from the node to its own fan-in.
const FAN_OUT: &str = r#"
name: fan-out
nodes:
  - name: setup
    run: return { words = { "a", "bb", "ccc" } }
  - name: each
    type: dynamic_parallel
    items: "{{ state.words }}"
    item_var: word
    fan_in: gather
    steps:
      - name: measure
        run: return { size = string.len(state.word) }
    output: sizes
  - name: gather
    run: |
      local out = {}
      for i, r in ipairs(state.sizes) do out[i] = r.state.size end
      return { total = #state.parallel_results, found = out }
edges:
  - from: __start__
    to: setup
  - from: setup
    to: each
  - from: each
    to: gather
  - from: gather
    to: __end__
"#;

#[test]
fn a_dynamic_parallel_output_key_holds_the_results_at_its_fan_in() {
    let agent = Engine::new().load_str(FAN_OUT).unwrap();
    let out = agent.invoke(json!({})).unwrap().done().unwrap();
    assert_eq!(out["found"], json!([1, 2, 3]));
    assert_eq!(out["total"], 3);
    assert_eq!(out["sizes"], out["parallel_results"]);
}

#[test]
fn a_dynamic_parallel_node_has_no_other_edge_than_to_its_fan_in() {
    let other = FAN_OUT.replace("  - from: each\n    to: gather\n", "  - from: each\n    to: setup\n");
    let found = problems(&other);
    assert!(
        found.iter().any(|p| p.contains("node `each` fans out, so it cannot also have `goto` or other edges")),
        "{found:?}"
    );
    let reserved = problems(&FAN_OUT.replace("output: sizes", "output: parallel_results"));
    assert_eq!(reserved, ["14: `output` of node `each` names `parallel_results`, a key the engine writes itself"]);
}

// --- Lua: a writable copy of the state --------------------------------------------------------

#[test]
fn a_lua_block_writes_its_copy_of_the_state_and_returns_it() {
    // As The Edge Agent's Rust tests write blocks: assign to `state`, return it.
    let agent = Engine::new()
        .load_str(
            r#"
state:
  log: { type: list, reducer: append }
nodes:
  - name: a
    run: |
      state.count = (state.count or 0) + 1
      state.seen = state.count
      local items = state.items
      table.insert(items, "c")
      return state
  - name: b
    run: |
      state.count = 100
      return { other = state.count }
  - name: c
    run: |
      state.log = { "x" }
      state.gone = nil
      local n = 0
      for _ in pairs(state) do n = n + 1 end
      return { keys = n, gone = state.gone == nil, log = { "y" } }
"#,
        )
        .unwrap();
    let out = agent.invoke(json!({ "count": 1, "items": ["a", "b"], "log": [], "gone": 1 })).unwrap().done().unwrap();
    // `return state` wrote what the block changed (the list changed in place too); a block that
    // returns its own table writes only that table; `nil` hides a key from the block itself.
    assert_eq!(out["count"], 2);
    assert_eq!(out["seen"], 2);
    assert_eq!(out["items"], json!(["a", "b", "c"]));
    assert_eq!(out["other"], 100);
    assert_eq!(out["gone"], true);
    assert_eq!(out["log"], json!(["y"]));
    assert_eq!(out["keys"], 5); // count, items, log, seen, other: not `gone`
}

#[test]
fn variables_stay_read_only_and_an_unchanged_state_writes_nothing() {
    let agent = Engine::new()
        .load_str(
            "variables:\n  v: 1\nnodes:\n  - name: a\n    run: return state\n  - name: b\n    run: variables.v = 2\n",
        )
        .unwrap();
    let error = tea::error_chain(&agent.invoke(json!({ "k": 1 })).unwrap_err());
    assert!(error.contains("`variables` is read-only"), "{error}");
    let agent = Engine::new().load_str("nodes:\n  - name: a\n    run: return state\n").unwrap();
    assert_eq!(agent.invoke(json!({ "k": 1 })).unwrap().done().unwrap().to_json(), json!({ "k": 1 }));
}

// --- a fan-out from the entry --------------------------------------------------------------

#[test]
fn the_entry_fans_out_through_a_node_of_the_engines_own() {
    // The Edge Agent's Rust test `test_parallel_branches_independent_lua_state`.
    let agent = Engine::new()
        .load_str(
            r#"
name: lua-isolation-test
state_schema:
  input: str
nodes:
  - name: branch_a
    run: |
      global_marker = "from_branch_a"
      return { branch = "a", marker = global_marker }
  - name: branch_b
    run: |
      local leaked = global_marker ~= nil
      global_marker = "from_branch_b"
      return { branch = "b", marker = global_marker, leaked = leaked }
  - name: collect
    run: |
      return state
edges:
  - from: __start__
    parallel:
      - branch_a
      - branch_b
  - from: branch_a
    to: collect
  - from: branch_b
    to: collect
  - from: collect
    to: __end__
"#,
        )
        .unwrap();
    let out = agent.invoke(json!({})).unwrap().done().unwrap();
    let results = out["parallel_results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["branch"], "a");
    assert_eq!(results[1]["branch"], "b");
    assert_eq!(results[1]["leaked"], false);
    assert_eq!(agent.nodes(), ["branch_a", "branch_b", "collect", "__tea_start"]);
    // The name is the engine's.
    let taken = problems(
        "nodes:\n  - name: __tea_start\n    run: return {}\n  - name: b\n    run: return {}\nedges:\n  - from: __start__\n    parallel: [b]\n    fan_in: b\n",
    );
    assert!(taken.iter().any(|p| p.contains("node name `__tea_start` is the engine's own")), "{taken:?}");
}

// --- json.* and file.* ---------------------------------------------------------------------

#[test]
fn json_and_file_actions_return_what_the_edge_agent_returns() {
    let dir = std::env::temp_dir().join(format!("tea-yaml-vocab-files-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("b.txt"), "b").unwrap();
    std::fs::write(dir.join("a.txt"), "a").unwrap();
    std::fs::write(dir.join("c.log"), "c").unwrap();
    let text = format!(
        r#"
nodes:
  - name: parse
    uses: json.parse
    with: {{ text: '{{"n": [1, 2]}}' }}
    output: parsed
  - name: bad
    uses: json.parse
    with: {{ text: "{{oops" }}
    output: bad
  - name: text
    uses: json.stringify
    with: {{ data: "{{{{ state.parsed.data }}}}" }}
    output: text
  - name: exists
    uses: file.exists
    with: {{ path: "{dir}/a.txt" }}
    output: exists
  - name: list
    uses: file.list
    with: {{ path: "{dir}", pattern: ".txt" }}
    output: listed
  - name: delete
    uses: file.delete
    with: {{ path: "{dir}/a.txt" }}
    output: deleted
"#,
        dir = dir.display()
    );
    let agent = Engine::new().allow_read(&dir).allow_write(&dir).load_str(&text).unwrap_or_else(|e| panic!("{e}"));
    let out = agent.invoke(json!({})).unwrap().done().unwrap();
    assert_eq!(out["parsed"], json!({ "data": { "n": [1, 2] }, "success": true }));
    assert_eq!(out["bad"]["success"], false);
    assert_eq!(out["bad"]["error_type"], "parse");
    assert_eq!(out["text"], json!({ "text": "{\"n\":[1,2]}", "success": true }));
    assert_eq!(out["exists"], json!({ "exists": true, "is_file": true, "is_dir": false }));
    let names: Vec<&str> =
        out["listed"]["files"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["a.txt", "b.txt"]);
    assert_eq!(out["deleted"], json!({ "deleted": true }));
    assert!(!dir.join("a.txt").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

// --- what tea refuses, by name -------------------------------------------------------------

#[test]
fn the_edge_agents_actions_that_tea_lacks_are_refused_as_its_own() {
    let found = problems(
        "nodes:\n  - name: a\n    uses: memory.cloud_store\n  - name: b\n    uses: llm.stream\n  - name: c\n    uses: vector.index_files\n  - name: d\n    uses: lmm.call\n",
    );
    assert!(
        found[0].starts_with(
            "3: action `memory.cloud_store` is not supported by tea (one of The Edge Agent's `memory.*` actions"
        ),
        "{found:?}"
    );
    assert!(found[1].starts_with("5: action `llm.stream` is not supported by tea"), "{found:?}");
    assert!(found[2].contains("`vector.*` actions: indexing files into its vector stores"), "{found:?}");
    // Not one of its names: a misspelling.
    assert!(found[3].starts_with("9: unknown action `lmm.call` (node `d`)"), "{found:?}");
    // A registered action of the same name runs.
    let engine = Engine::new()
        .action("memory.cloud_store", |_: &tea_yaml::State, _: &serde_json::Value| Ok(json!({ "ok": true })));
    let agent = engine.load_str("nodes:\n  - name: a\n    uses: memory.cloud_store\n").unwrap();
    assert_eq!(agent.invoke(json!({})).unwrap().done().unwrap()["ok"], true);
}

#[test]
fn the_edge_agents_settings_that_tea_lacks_are_refused_by_name() {
    let found = problems(
        "settings:\n  ltm:\n    backend: sqlite\n  auto_trace: yes please\n  llm:\n    provider: ollama\n    model: m\n  colour: red\nnodes:\n  - name: a\n    run: return {}\n",
    );
    // `settings.ltm` is accepted with a warning; a value of the wrong type and a key neither
    // engine knows are problems.
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].contains("`settings.auto_trace` must be true or false"), "{found:?}");
    assert!(found[1].starts_with("8: unknown key `colour` in `settings`"), "{found:?}");
    let agent = Engine::new()
        .load_str("settings:\n  ltm:\n    backend: sqlite\n  llm:\n    provider: ollama\nnodes:\n  - name: a\n    run: return {}\n")
        .unwrap();
    let warnings: Vec<String> = agent.warnings().iter().map(|w| format!("{}: {}", w.line(), w.message())).collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("2: `settings.ltm` (its long-term memory backends) is The Edge Agent's and is ignored")
    );
    assert!(Engine::new()
        .load_str("settings:\n  auto_trace: false\nnodes:\n  - name: a\n    run: return {}\n")
        .is_ok());
}

#[test]
fn auto_trace_says_where_the_trace_goes() {
    use tea_yaml::AutoTrace;
    let load = |settings: &str| {
        Engine::new()
            .allow_write(".")
            .load_str(&format!("settings:\n{settings}nodes:\n  - name: a\n    run: return {{}}\n"))
    };
    assert_eq!(load("  auto_trace: false\n").unwrap().auto_trace(), None);
    assert_eq!(load("  auto_trace: true\n").unwrap().auto_trace(), Some(&AutoTrace::Console));
    let file = load("  auto_trace: true\n  trace_exporter: file\n  trace_file: out/run.jsonl\n").unwrap();
    assert_eq!(file.auto_trace(), Some(&AutoTrace::File("out/run.jsonl".into())));
    let problems = |settings: &str| -> Vec<String> {
        load(settings).unwrap_err().problems().iter().map(|p| format!("{}: {}", p.line(), p.message())).collect()
    };
    assert_eq!(
        problems("  trace_file: x.jsonl\n"),
        ["2: `settings.trace_file` goes with `settings.auto_trace: true`, which this file does not set"]
    );
    assert_eq!(
        problems("  auto_trace: true\n  trace_exporter: file\n"),
        ["3: `trace_exporter: file` needs `settings.trace_file: PATH`"]
    );
    assert!(problems("  auto_trace: true\n  trace_exporter: opik\n")[0]
        .starts_with("3: `trace_exporter: opik` is not supported by tea"));
}

// --- steps: on a plain node ----------------------------------------------------------------

#[test]
fn a_nodes_steps_run_in_order_within_it() {
    // As `examples/yaml_perplexity_example.yaml` writes a node: `steps:`, each a block.
    let agent = Engine::new()
        .load_str(
            r##"
nodes:
  - name: report
    language: lua
    steps:
      - name: header
        run: return { header = "# " .. state.query }
      - name: body
        run: return { report = state.header .. "\n" .. state.found }
      - run:
          type: expression
          value: "state.report | length"
          output_key: size
  - name: after
    run: return { seen = state.size }
"##,
        )
        .unwrap();
    let out = agent.invoke(json!({ "query": "q", "found": "x" })).unwrap().done().unwrap();
    assert_eq!(out["report"], "# q\nx");
    assert_eq!(out["size"], 5);
    assert_eq!(out["seen"], 5);
    let failing = Engine::new()
        .load_str("nodes:\n  - name: n\n    steps:\n      - name: bad\n        run: error('no')\n")
        .unwrap();
    let error = tea::error_chain(&failing.invoke(json!({})).unwrap_err());
    assert!(error.contains("step `bad`"), "{error}");
    let both = problems("nodes:\n  - name: n\n    run: return {}\n    steps:\n      - run: return {}\n");
    assert_eq!(both, ["5: node `n` has `steps` and `run`: keep one way to run"]);
}

// --- targets: edges ------------------------------------------------------------------------

#[test]
fn an_edge_with_targets_routes_by_the_value_of_its_expression() {
    // The Edge Agent's Rust test `test_yaml_conditional_workflow_mermaid`.
    let yaml = r#"
name: conditional-workflow
nodes:
  - name: check
    run: return { status = state.want }
  - name: on_success
    run: return { went = "success" }
  - name: on_failure
    run: return { went = "failure" }
edges:
  - from: __start__
    to: check
  - from: check
    when: "state.status"
    targets:
      success: on_success
      failure: on_failure
      true: on_success
  - from: on_success
    to: __end__
  - from: on_failure
    to: __end__
"#;
    let agent = Engine::new().load_str(yaml).unwrap();
    for (want, went) in [(json!("success"), "success"), (json!("failure"), "failure"), (json!(true), "success")] {
        let out = agent.invoke(json!({ "want": want.clone() })).unwrap().done().unwrap();
        assert_eq!(out["went"], went, "{want}");
    }
    // No value matches: no route, as for `goto` rules.
    assert!(agent.invoke(json!({ "want": "other" })).is_err());
    let found =
        problems(&yaml.replace("    when: \"state.status\"\n", "    when: \"state.status\"\n    to: on_success\n"));
    assert!(found[0].contains("an edge with `targets` routes by value; `to` does not go with it"), "{found:?}");
}

// --- settings.rate_limiters and ratelimit.wrap ------------------------------------------------

#[test]
fn ratelimit_wrap_spaces_the_calls_of_one_limiter() {
    // The Edge Agent's Rust test `test_yaml_workflow_with_ratelimit`, on an action of tea's.
    let engine = Engine::new()
        .action("test.echo", |_: &tea_yaml::State, args: &serde_json::Value| Ok(json!({ "echo": args["value"] })));
    let agent = engine
        .load_str(
            r#"
name: ratelimit-workflow
settings:
  rate_limiters:
    vocabulary_test_api:
      rps: 20
nodes:
  - name: first
    uses: ratelimit.wrap
    with:
      action: test.echo
      limiter: vocabulary_test_api
      args:
        value: "{{ state.v }}"
    output: one
  - name: second
    uses: ratelimit.wrap
    with:
      action: test.echo
      limiter: vocabulary_test_api
      args: { value: 2 }
"#,
        )
        .unwrap();
    let began = std::time::Instant::now();
    let out = agent.invoke(json!({ "v": 1 })).unwrap().done().unwrap();
    // 20 a second: the second call waits for the first's 50 ms.
    assert!(began.elapsed() >= std::time::Duration::from_millis(45), "{:?}", began.elapsed());
    assert_eq!(out["one"]["echo"], 1);
    assert_eq!(out["one"]["_ratelimit_limiter"], "vocabulary_test_api");
    assert_eq!(out["echo"], 2);
    assert!(out["_ratelimit_waited_ms"].as_u64().is_some());
}

#[test]
fn ratelimit_wrap_refuses_what_it_cannot_run_and_a_wait_beyond_its_timeout() {
    let found = problems(
        "settings:\n  rate_limiters:\n    a: { rpm: 0 }\n    b: { per_hour: 3 }\nnodes:\n  - name: n\n    uses: ratelimit.wrap\n    with:\n      action: memory.cloud_store\n      limiter: \"{{ state.l }}\"\n",
    );
    assert!(found.iter().any(|p| p.starts_with("3: `rpm` of rate limiter `a` must be a positive number")), "{found:?}");
    assert!(found.iter().any(|p| p.starts_with("4: unknown key `per_hour` in rate limiter `b`")), "{found:?}");
    assert!(
        found
            .iter()
            .any(|p| p.contains("wraps action `memory.cloud_store` is not supported by tea (one of The Edge Agent's")),
        "{found:?}"
    );
    assert!(
        found.iter().any(|p| p.contains("`limiter` of `ratelimit.wrap` (node `n`) is a name written in the file")),
        "{found:?}"
    );
    // One call a minute: the second would wait a minute, beyond its timeout of 10 ms.
    let dir = std::env::temp_dir().join(format!("tea-yaml-vocab-ratelimit-{}", std::process::id()));
    let out = dir.join("out.txt").display().to_string();
    let agent = Engine::new()
        .allow_write(&dir)
        .load_str(&format!("nodes:\n  - name: a\n    uses: ratelimit.wrap\n    with: {{ action: file.write, limiter: vocabulary_slow, rpm: 1, args: {{ path: \"{out}\", content: x }} }}\n  - name: b\n    uses: ratelimit.wrap\n    with: {{ action: file.write, limiter: vocabulary_slow, timeout: 10, args: {{ path: \"{out}\", content: x }} }}\n"))
        .unwrap();
    let error = tea::error_chain(&agent.invoke(json!({})).unwrap_err());
    assert!(error.contains("limiter `vocabulary_slow` would make `file.write` wait"), "{error}");
    let _ = std::fs::remove_dir_all(&dir);
}

// --- observability: (The Edge Agent's Rust engine) ---------------------------------------------

#[test]
fn observability_handlers_say_where_the_trace_goes() {
    use tea_yaml::AutoTrace;
    let load = |observability: &str| {
        Engine::new()
            .allow_write("/tmp")
            .load_str(&format!("observability:\n{observability}nodes:\n  - name: a\n    run: return {{}}\n"))
    };
    // Its test `test_yaml_observability_with_file_handler`.
    let file =
        load("  enabled: true\n  level: info\n  handlers:\n    - type: file\n      path: /tmp/flow.jsonl\n").unwrap();
    assert_eq!(file.auto_trace(), Some(&AutoTrace::File("/tmp/flow.jsonl".into())));
    let console = load("  enabled: true\n  handlers:\n    - type: console\n").unwrap();
    assert_eq!(console.auto_trace(), Some(&AutoTrace::Console));
    assert_eq!(load("  enabled: false\n  handlers:\n    - type: console\n").unwrap().auto_trace(), None);
    assert_eq!(load("  enabled: true\n").unwrap().auto_trace(), None);
    let refused = load(
        "  enabled: true\n  level: warn\n  buffer_size: 100\n  handlers:\n    - type: console\n      verbose: true\n",
    )
    .unwrap_err();
    let found: Vec<String> = refused.problems().iter().map(|p| format!("{}: {}", p.line(), p.message())).collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("3: `observability.level`"), "{found:?}");
    // The size of its event log and a handler's `verbose` are accepted with a warning each.
    let warned =
        load("  enabled: true\n  buffer_size: 100\n  handlers:\n    - type: console\n      verbose: true\n").unwrap();
    let found: Vec<String> = warned.warnings().iter().map(|p| format!("{}: {}", p.line(), p.message())).collect();
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].starts_with("3: `observability.buffer_size` (the size of The Edge Agent's"), "{found:?}");
    assert!(found[1].starts_with("6: `verbose` of an `observability` handler is ignored"), "{found:?}");
}

// --- memory.store / retrieve / delete / clear ---------------------------------------------------

#[test]
fn memory_actions_keep_values_for_the_agent_outside_the_state() {
    // The Edge Agent's Rust test `test_yaml_workflow_with_ratelimit` wraps `memory.store`.
    let agent = Engine::new()
        .load_str(
            r#"
name: ratelimit-workflow
settings:
  rate_limiters:
    vocabulary_memory_api:
      rpm: 120
nodes:
  - name: rate_limited_call
    uses: ratelimit.wrap
    with:
      action: memory.store
      limiter: vocabulary_memory_api
      args:
        key: test_key
        value: test_value
    output: stored
  - name: get
    uses: memory.retrieve
    with: { key: test_key }
    output: got
  - name: other_namespace
    uses: memory.retrieve
    with: { key: test_key, namespace: elsewhere, default: none }
    output: missing
  - name: forget
    uses: memory.delete
    with: { key: test_key }
    output: deleted
"#,
        )
        .unwrap();
    let out = agent.invoke(json!({})).unwrap().done().unwrap();
    assert_eq!(out["stored"]["stored"], true);
    assert_eq!(out["stored"]["namespace"], "default");
    assert_eq!(out["got"], json!({ "value": "test_value", "found": true, "key": "test_key" }));
    assert_eq!(out["missing"], json!({ "value": "none", "found": false, "key": "test_key" }));
    assert_eq!(out["deleted"], json!({ "deleted": true, "key": "test_key" }));
    // A value with a time to live is gone once it has passed; another agent has its own memory.
    let agent = Engine::new()
        .load_str("nodes:\n  - name: put\n    uses: memory.store\n    with: { key: k, value: 1, ttl: 0.05 }\n")
        .unwrap();
    agent.invoke(json!({})).unwrap();
    let get = "nodes:\n  - name: get\n    uses: memory.retrieve\n    with: { key: k }\n";
    assert_eq!(Engine::new().load_str(get).unwrap().invoke(json!({})).unwrap().done().unwrap()["found"], false);
}

#[test]
fn node_breakpoint_flags_and_prompts_its_engines_never_read_load_with_a_warning() {
    let agent = Engine::new()
        .load_str(
            "nodes:\n  - name: a\n    interrupt_after: true\n    prompt: Say hello\n    run: return { ran = true }\n",
        )
        .unwrap();
    let warnings: Vec<String> = agent.warnings().iter().map(|w| format!("{}: {}", w.line(), w.message())).collect();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings[0].starts_with("3: node key `interrupt_after` (The Edge Agent's) is ignored"), "{warnings:?}");
    assert!(warnings[0].contains("`interrupt: after`"), "{warnings:?}");
    assert!(warnings[1].starts_with("4: node key `prompt` (The Edge Agent's) is ignored"), "{warnings:?}");
    // As in The Edge Agent, the node runs straight through: no breakpoint.
    assert_eq!(agent.invoke(json!({})).unwrap().done().unwrap()["ran"], true);
}

#[test]
fn a_state_keys_json_schema_shape_loads_with_a_warning() {
    let agent = Engine::new()
        .load_str(
            "state:\n  detection:\n    type: object\n    properties:\n      label: str\n  n: { type: int, proprties: 1 }\nnodes:\n  - name: a\n    run: return {}\n",
        )
        .map(|_| ())
        .unwrap_err();
    // A misspelled key of a declaration stays an error, with "did you mean".
    assert!(
        agent.to_string().contains("unknown key `proprties`")
            && agent.to_string().contains("did you mean `properties`"),
        "{agent}"
    );
    let agent = Engine::new()
        .load_str("state:\n  detection:\n    type: object\n    properties:\n      label: str\nnodes:\n  - name: a\n    run: return { detection = { label = 1 } }\n")
        .unwrap();
    let warnings: Vec<String> = agent.warnings().iter().map(|w| format!("{}: {}", w.line(), w.message())).collect();
    assert_eq!(warnings, ["5: `properties` of state key `detection` is not checked (nor by The Edge Agent): tea checks the key's `type`"]);
    // Its type is checked: a dict.
    assert_eq!(agent.invoke(json!({})).unwrap().done().unwrap()["detection"], json!({ "label": 1 }));
}

#[test]
fn a_drawing_hint_of_its_dot_conversion_loads_with_a_warning() {
    let agent = Engine::new()
        .load_str("nodes:\n  - name: a\n    run: return { done = true }\n    _render_items: [TEA-1, TEA-2]\n")
        .unwrap();
    let warnings: Vec<String> = agent.warnings().iter().map(|w| format!("{}: {}", w.line(), w.message())).collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].starts_with("4: ") && warnings[0].contains("`_render_items`"), "{warnings:?}");
    assert_eq!(agent.invoke(json!({})).unwrap().done().unwrap()["done"], true);
}

// --- params: and config: ------------------------------------------------------------------

/// An action node written as The Edge Agent's documentation writes it (`action:` with
/// `params:`, or `config:` in its articles) gets those arguments, with a warning; beside a
/// `with:`, or on a node without an action, the key is only warned about.
#[test]
fn params_and_config_beside_an_action_are_its_arguments() {
    let agent = Engine::new()
        .load_str(
            r#"
nodes:
  - name: a
    action: json.parse
    params: { text: '{"x": 1}' }
    output: a
  - name: b
    uses: json.parse
    config: { text: '[2]' }
    output: b
  - name: c
    uses: json.parse
    with: { text: '3' }
    params: { text: '4' }
    output: c
"#,
        )
        .unwrap();
    let out = agent.invoke(json!({})).unwrap().done().unwrap();
    assert_eq!(out["a"]["data"], json!({ "x": 1 }));
    assert_eq!(out["b"]["data"], json!([2]));
    assert_eq!(out["c"]["data"], 3, "`with:` wins; `params:` is ignored");
    let warnings: Vec<String> = agent.warnings().iter().map(|w| format!("{}: {}", w.line(), w.message())).collect();
    assert!(
        warnings.iter().any(|w| w.starts_with("5: node key `params`") && w.contains("read as the action's `with:`")),
        "{warnings:?}"
    );
    assert!(
        warnings.iter().any(|w| w.starts_with("9: node key `config`") && w.contains("read as the action's `with:`")),
        "{warnings:?}"
    );
    assert!(
        warnings.iter().any(|w| w.starts_with("14: node key `params` (The Edge Agent's) is ignored")),
        "{warnings:?}"
    );
}
