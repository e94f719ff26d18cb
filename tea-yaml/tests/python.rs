//! `run:` blocks in Python (feature `python`): The Edge Agent's semantics, trust, errors at
//! load and at run time, Python values to JSON, fan-outs of Python nodes on both APIs.
#![cfg(feature = "python")]

use serde_json::{json, Value};
use tea::Error;
use tea_yaml::{Engine, LoadError, State};

fn trusted() -> Engine {
    Engine::new().trust_code(true)
}

fn run(yaml: &str, input: Value) -> Result<State, Error> {
    let agent = trusted().load_str(yaml).unwrap_or_else(|e| panic!("load failed:\n{e}"));
    agent.invoke(input).map(|out| out.done().expect("the agent finished"))
}

/// The reason a run failed, and the node it names.
fn failure(yaml: &str, input: Value) -> (String, String) {
    match run(yaml, input) {
        Err(Error::NodeFailed { node, source }) => (node.to_string(), source.to_string()),
        other => panic!("expected a failed node, got {other:?}"),
    }
}

fn problems(engine: &Engine, yaml: &str) -> Vec<(usize, String)> {
    let err: LoadError = engine.load_str(yaml).expect_err("the file should not load");
    err.problems().iter().map(|p| (p.line(), p.message().to_owned())).collect()
}

/// Ten Python nodes in a row, as The Edge Agent's examples write them.
fn pipeline(n: usize) -> String {
    let mut yaml = String::from("variables: { step: 2 }\nnodes:\n");
    for i in 0..n {
        yaml.push_str(&format!(
            "  - name: n{i}\n    run: |\n      total = state.get(\"total\", 0) + variables[\"step\"]\n      \
             return {{\"total\": total, \"trail\": state.get(\"trail\", []) + [\"n{i}\"]}}\n"
        ));
    }
    yaml
}

#[test]
fn a_pipeline_of_python_nodes_reads_state_and_variables_and_returns_updates() {
    let out = run(&pipeline(10), json!({ "total": 1 })).unwrap();
    assert_eq!(out["total"], 21);
    let trail: Vec<String> = (0..10).map(|i| format!("n{i}")).collect();
    assert_eq!(out["trail"], json!(trail));
}

#[test]
fn the_edge_agents_seed_example_runs_unchanged() {
    // YE.1's own example: a block with `return` is a function body; `json` is in scope.
    let out = run(
        r#"
nodes:
  - name: process
    run: |
      data = json.loads(state["payload"])
      return {"processed": True, "count": len(data), "node_was": node}
"#,
        json!({ "payload": "[1, 2, 3]" }),
    )
    .unwrap();
    assert_eq!(out["processed"], true);
    assert_eq!(out["count"], 3);
    assert_eq!(out["node_was"], "process");
}

#[test]
fn a_block_without_return_writes_the_names_it_assigns() {
    let out = run(
        r#"
nodes:
  - name: assign
    language: python
    run: |
      import math
      helper = lambda x: x
      class Kind:
          pass
      greeting = "hi " + state["who"]
      _private = 1
      root = math.sqrt(16)
"#,
        json!({ "who": "ada" }),
    )
    .unwrap();
    // The module, the function and the class are left out; `_private` too. (A block that says
    // `return` anywhere, even in a nested function, is a function body: see below.)
    assert_eq!(out.to_json(), json!({ "who": "ada", "greeting": "hi ada", "root": 4.0 }));
}

#[test]
fn state_is_a_copy_and_a_non_dict_result_goes_under_result() {
    let out = run(
        r#"
nodes:
  - name: mutate
    language: python
    run: |
      state["who"] = "changed"
      return 42
  - name: none
    run: |
      return None if state["who"] == "ada" else {"odd": True}
"#,
        json!({ "who": "ada" }),
    )
    .unwrap();
    // Writing into `state` changes nothing; the first node's 42 went under `result`, then
    // the second's None (The Edge Agent's rule for anything that is not a dict).
    assert_eq!(out.to_json(), json!({ "who": "ada", "result": null }));
}

#[test]
fn python_values_convert_to_json_and_through_declared_types_and_reducers() {
    let out = run(
        r#"
state:
  log: { type: list, reducer: append }
  count: int
nodes:
  - name: values
    run: |
      return {
          "none": None, "yes": True, "no": False, "int": 7, "big": 2**62, "float": 1.5,
          "text": "é", "list": [1, "a", None], "tuple": (1, 2), "dict": {"k": {"n": [True]}},
          "log": ["first"], "count": 3,
      }
  - name: more
    run: |
      return {"log": ["second"], "count": state["count"] + 1}
"#,
        json!({}),
    )
    .unwrap();
    assert_eq!(out["none"], Value::Null);
    assert_eq!(out["yes"], true);
    assert_eq!(out["no"], false);
    assert_eq!(out["int"], 7);
    assert_eq!(out["big"], 1u64 << 62);
    assert_eq!(out["float"], 1.5);
    assert_eq!(out["text"], "é");
    assert_eq!(out["list"], json!([1, "a", null]));
    assert_eq!(out["tuple"], json!([1, 2]));
    assert_eq!(out["dict"], json!({ "k": { "n": [true] } }));
    assert_eq!(out["log"], json!(["first", "second"]), "the append reducer");
    assert_eq!(out["count"], 4);

    // A declared type is checked as for Lua's tables.
    let (node, reason) = failure(
        "state: { count: int }\nnodes:\n  - name: typed\n    run: |\n      return {\"count\": \"three\"}\n",
        json!({}),
    );
    assert_eq!(node, "typed");
    assert!(reason.contains("count"), "{reason}");
}

#[test]
fn values_json_cannot_hold_fail_the_node_naming_the_key_and_the_type() {
    for (code, key, words) in [
        ("return {\"s\": {1, 2}}", "s", "Python type `set`"),
        ("return {\"f\": lambda: 1}", "f", "Python type `function`"),
        ("return {\"n\": float(\"nan\")}", "n", "the float NaN"),
        ("return {\"i\": 2**70}", "i", "does not fit in 64 bits"),
        ("return {\"d\": {1: \"a\"}}", "d", "JSON keys are strings"),
        ("return {1: \"a\"}", "1", "the keys to write must be strings"),
        ("l = []\nl.append(l)\nreturn {\"l\": l}", "l", "nested deeper"),
    ] {
        let yaml = format!(
            "nodes:\n  - name: bad\n    language: python\n    run: |\n      {}\n",
            code.replace('\n', "\n      ")
        );
        let (node, reason) = failure(&yaml, json!({}));
        assert_eq!(node, "bad");
        assert!(reason.contains(key) && reason.contains(words), "{code}: {reason}");
    }
}

#[test]
fn an_exception_fails_the_node_with_its_type_message_and_line() {
    let yaml = r#"
nodes:
  - name: fine
    run: |
      return {"a": 1}
  - name: boom
    run: |
      x = state["a"]
      raise ValueError("bad value %d" % x)
"#;
    let (node, reason) = failure(yaml, json!({}));
    assert_eq!(node, "boom");
    assert!(reason.contains("ValueError: bad value 1"), "{reason}");
    assert!(reason.contains("<string>:9"), "the file's line: {reason}");

    let (node, reason) =
        failure("nodes:\n  - name: missing\n    run: |\n      return {\"x\": state[\"nope\"]}\n", json!({}));
    assert_eq!(node, "missing");
    assert!(reason.contains("KeyError: 'nope'") && reason.contains("<string>:4"), "{reason}");

    // `sys.exit` is an exception like any other: it fails the node, not the process.
    let (node, reason) =
        failure("nodes:\n  - name: quit\n    run: |\n      import sys\n      sys.exit(3)\n", json!({}));
    assert_eq!(node, "quit");
    assert!(reason.contains("SystemExit: 3"), "{reason}");
}

#[test]
fn a_syntax_error_is_a_load_error_at_the_files_line() {
    let p = problems(
        &trusted(),
        r#"
nodes:
  - name: ok
    run: |
      return {"a": 1}
  - name: broken
    language: python
    run: |
      x = 1
      return {"a": (x}
"#,
    );
    assert!(
        p.iter().any(|(line, m)| *line == 10 && m.contains("node `broken`") && m.contains("SyntaxError")),
        "{p:#?}"
    );
    // Without `language:`, a block that is neither Lua nor Python: Python's error when it
    // does not look like Lua, Lua's when it does.
    let p = problems(&trusted(), "nodes:\n  - name: a\n    run: |\n      if x:\n      pass\n");
    assert!(
        p.iter().any(|(line, m)| *line == 5 && m.contains("IndentationError") && m.contains("nor is it Lua")),
        "{p:#?}"
    );
    let p = problems(&trusted(), "nodes:\n  - name: a\n    run: |\n      local x = \n");
    assert!(p.iter().any(|(_, m)| m.contains("Lua syntax error")), "{p:#?}");
}

#[test]
fn python_runs_only_in_trusted_files() {
    let yaml = "nodes:\n  - name: p\n    run: |\n      return {\"ran\": True}\n";
    let p = problems(&Engine::new(), yaml);
    assert_eq!(p.len(), 1, "{p:#?}");
    assert_eq!(p[0].0, 4, "the block's line");
    for words in ["node `p` is Python", "cannot sandbox", "<string>", "Engine::trust_code(true)", "tea run --trust"] {
        assert!(p[0].1.contains(words), "{words}: {}", p[0].1);
    }
    assert_eq!(run(yaml, json!({})).unwrap()["ran"], true);
    // Lua loads without trust.
    assert!(Engine::new().load_str("nodes:\n  - name: l\n    run: return { ran = true }\n").is_ok());
}

#[test]
fn secrets_are_not_in_scope_and_variables_substitute_at_load() {
    let engine = trusted().secret("token", "s3cret-token");
    let agent =
        engine.load_str("nodes:\n  - name: leak\n    run: |\n      return {\"copied\": secrets[\"token\"]}\n").unwrap();
    let reason = std::error::Error::source(&agent.invoke(json!({})).unwrap_err()).unwrap().to_string();
    assert!(reason.contains("NameError") && reason.contains("secrets"), "{reason}");

    let out = run(
        "variables: { limit: 0.8, who: ada }\nnodes:\n  - name: v\n    run: |\n      \
         return {\"over\": state[\"x\"] > ${limit}, \"who\": \"${who}\", \"other\": \"${nope}\"}\n",
        json!({ "x": 0.9 }),
    )
    .unwrap();
    assert_eq!(out["over"], true);
    assert_eq!(out["who"], "ada");
    assert_eq!(out["other"], "${nope}");
}

const FAN_OUT: &str = r#"
state:
  seen: { type: list, reducer: append }
nodes:
  - name: plan
    run: |
      return {"topic": "rust"}
  - name: a
    run: |
      import time
      time.sleep(0.05)
      return {"seen": ["a:" + state["topic"]], "result": "a"}
  - name: b
    run: |
      import time
      time.sleep(0.05)
      return {"seen": ["b:" + state["topic"]], "result": "b"}
  - name: c
    run: |
      return {"seen": ["c:" + state["topic"]], "result": "c"}
  - name: join
    run: |
      return {"summary": ",".join(r["result"] for r in parallel_results)}
edges:
  - { from: plan, to: a, type: parallel, fan_in: join }
  - { from: plan, to: b, type: parallel, fan_in: join }
  - { from: plan, to: c, type: parallel, fan_in: join }
  - { from: join, to: __end__ }
"#;

#[test]
fn a_fan_out_of_python_nodes_merges_in_order_on_the_blocking_api() {
    let agent = trusted().load_str(FAN_OUT).unwrap();
    // Several runs at once from several threads, each with its own fan-out: all wait for the
    // GIL in turn and none deadlocks.
    std::thread::scope(|s| {
        let runs: Vec<_> = (0..4).map(|_| s.spawn(|| agent.invoke(json!({})).unwrap().done().unwrap())).collect();
        for run in runs {
            let out = run.join().unwrap();
            assert_eq!(out["seen"], json!(["a:rust", "b:rust", "c:rust"]));
            assert_eq!(out["summary"], "a,b,c");
        }
    });
}

#[cfg(feature = "tokio")]
#[test]
fn a_fan_out_of_python_nodes_runs_on_the_async_api() {
    let agent = trusted().load_str(FAN_OUT).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let (a, b, c, d) = tokio::join!(
            agent.invoke_async(json!({})),
            agent.invoke_async(json!({})),
            agent.invoke_async(json!({})),
            agent.invoke_async(json!({}))
        );
        for out in [a, b, c, d] {
            let out = out.unwrap().done().unwrap();
            assert_eq!(out["seen"], json!(["a:rust", "b:rust", "c:rust"]));
            assert_eq!(out["summary"], "a,b,c");
        }
    });
}

#[test]
fn a_ten_node_python_pipeline_costs_this_much_per_run() {
    // Not a benchmark (debug build): prints what a run costs, so the docs' number can be
    // checked, and holds it under a generous bound.
    let agent = trusted().load_str(&pipeline(10)).unwrap();
    agent.invoke(json!({})).unwrap();
    let runs = 50;
    let start = std::time::Instant::now();
    for _ in 0..runs {
        assert_eq!(agent.invoke(json!({})).unwrap().done().unwrap()["total"], 20);
    }
    let per_run = start.elapsed() / runs;
    println!("a 10-node Python pipeline: {per_run:?} per run ({:?} per node)", per_run / 10);
    assert!(per_run < std::time::Duration::from_millis(200), "{per_run:?} per run");
}

#[test]
fn a_subgraph_with_python_is_trusted_with_its_parent_and_only_then() {
    let dir = std::env::temp_dir().join(format!("tea-yaml-python-subgraph-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let child = "nodes:\n  - name: double\n    run: |\n      return {\"n\": state[\"n\"] * 2}\n";
    std::fs::write(dir.join("child.yaml"), child).unwrap();
    let parent = dir.join("parent.yaml");
    std::fs::write(&parent, "nodes:\n  - name: sub\n    type: subgraph\n    file: child.yaml\n").unwrap();

    let out = trusted().load_file(&parent).unwrap().invoke(json!({ "n": 21 })).unwrap().done().unwrap();
    assert_eq!(out["n"], 42);
    let err = Engine::new().load_file(&parent).expect_err("an untrusted parent");
    let message = err.problems()[0].message();
    assert!(message.contains("child.yaml") && message.contains("Engine::trust_code(true)"), "{message}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn fan_in_blocks_read_results_as_attributes_as_the_edge_agent_s() {
    // `examples/yaml/dynamic_parallel_steps_mode.yaml` reads `result.state`, and The Edge
    // Agent's heartbeat fixture `r.state if hasattr(r, "state") else r`.
    let out = run(
        r#"
nodes:
  - name: each
    type: dynamic_parallel
    items: "{{ state.words }}"
    fan_in: gather
    output: found
    steps:
      - name: size
        language: python
        run: |
          return {"n": len(state["item"])}
  - name: gather
    language: python
    run: |
      sizes = [r.state["n"] for r in parallel_results if r.success]
      also = [r.state["n"] for r in state["found"]]
      missing = hasattr(parallel_results[0], "nothing")
      return {"sizes": sizes, "also": also, "missing": missing}
"#,
        json!({ "words": ["a", "bb"] }),
    )
    .unwrap();
    assert_eq!(out["sizes"], json!([1, 2]));
    assert_eq!(out["also"], json!([1, 2]));
    assert_eq!(out["missing"], false);
}

#[test]
fn code_execute_runs_python_in_a_trusted_file_and_is_disabled_elsewhere() {
    let yaml = r#"
nodes:
  - name: show
    uses: code.execute
    with:
      language: python
      code: |
        print("items:", len(state["items"]))
        result = sum(state["items"])
    output: summary
"#;
    let out = run(yaml, json!({ "items": [1, 2, 3] })).unwrap();
    let summary = &out["summary"];
    assert_eq!(summary["success"], true, "{summary}");
    assert_eq!(summary["stdout"], "items: 3\n");
    assert_eq!(summary["return_value"], 6);
    assert!(summary["execution_time_ms"].as_f64().is_some());

    // An error and a timeout are the result's, as The Edge Agent's.
    let failing = run(
        "nodes:\n  - name: a\n    uses: code.execute\n    with: { code: \"raise ValueError('boom')\" }\n    output: r\n",
        json!({}),
    )
    .unwrap();
    assert_eq!((failing["r"]["success"].clone(), failing["r"]["error"].clone()), (json!(false), json!("boom")));
    let slow = run(
        "nodes:\n  - name: a\n    uses: code.execute\n    with: { code: \"while True: pass\", timeout: 0.2 }\n    output: r\n",
        json!({}),
    )
    .unwrap();
    assert_eq!(slow["r"]["error"], "Execution timed out after 0.2 seconds");

    // In a file the engine does not trust: The Edge Agent's "disabled" result, and a warning.
    let untrusted = Engine::new().load_str(yaml).unwrap();
    assert!(untrusted.warnings()[0].message().contains("`code.execute` (node `show`) runs Python"));
    let out = untrusted.invoke(json!({ "items": [1] })).unwrap().done().unwrap();
    assert_eq!(out["summary"]["success"], false);
    assert!(out["summary"]["error"].as_str().unwrap().starts_with("Code execution is disabled"));
}

#[test]
fn code_execute_as_a_step_runs_in_a_trusted_file_too() {
    let out = run(
        r#"
nodes:
  - name: write
    uses: reflection.loop
    with:
      generator: { action: code.execute, code: "result = {'n': 3}" }
      evaluator: { type: custom, run: "return true" }
      max_iterations: 1
    output: r
"#,
        json!({}),
    )
    .unwrap();
    assert_eq!(out["r"]["success"], true, "{}", out["r"]);
    assert_eq!(out["r"]["reflection_output"]["return_value"], json!({ "n": 3 }), "{}", out["r"]);
}

/// A node running `code` by `code.execute` with a time limit of 1 s.
fn timed(code: &str) -> String {
    let code = serde_json::to_string(code).unwrap();
    format!("nodes:\n  - name: a\n    uses: code.execute\n    with: {{ timeout: 1, code: {code} }}\n    output: r\n")
}

#[test]
fn a_timed_out_code_execute_ends_whatever_the_code_does() {
    for (what, code) in [
        (
            "catches BaseException",
            "import time\nwhile True:\n    try:\n        time.sleep(100)\n    except BaseException:\n        pass\n",
        ),
        ("sleeps", "import time\ntime.sleep(100)\n"),
        ("blocks in C", "import select, socket\na, b = socket.socketpair()\nselect.select([a], [], [])\na.recv(1)\n"),
        ("starts a process that sleeps", "import subprocess\nsubprocess.run(['sleep', '100'])\n"),
    ] {
        let started = std::time::Instant::now();
        let out = run(&timed(code), json!({})).unwrap();
        let took = started.elapsed();
        assert!(took < std::time::Duration::from_secs(2), "the code that {what} ran {took:?}");
        assert_eq!(out["r"]["success"], false, "{what}: {}", out["r"]);
        assert_eq!(out["r"]["error"], "Execution timed out after 1 seconds", "{what}: {}", out["r"]);
    }
    // The process serves the next run.
    let out = run(&timed("print('again')\nresult = {'n': 7}"), json!({})).unwrap();
    assert_eq!((out["r"]["return_value"].clone(), out["r"]["stdout"].clone()), (json!({ "n": 7 }), json!("again\n")));
}

#[test]
fn code_execute_that_exits_or_gives_no_json_reports_it_in_its_result() {
    let out = run(&timed("import os\nos._exit(3)"), json!({})).unwrap();
    assert_eq!(out["r"]["success"], false, "{}", out["r"]);
    assert!(out["r"]["error"].as_str().unwrap().contains("before it gave a result"), "{}", out["r"]);
    let out = run(&timed("raise SystemExit(2)"), json!({})).unwrap();
    assert_eq!((out["r"]["success"].clone(), out["r"]["error"].clone()), (json!(false), json!("2")));
    let out = run(&timed("result = {1, 2}"), json!({})).unwrap();
    assert_eq!(out["r"]["return_value"], "{1, 2}", "a value JSON cannot hold is shown as Python prints it");
    let out =
        run(&timed("import sys\nsys.stderr.write('careful')\nresult = state['x'] * 2"), json!({ "x": 21 })).unwrap();
    assert_eq!((out["r"]["return_value"].clone(), out["r"]["stderr"].clone()), (json!(42), json!("careful")));
}

/// `code.execute` in every position an action can take: a node behind `ratelimit.wrap`, a
/// step of a composed action, an `a2a.delegate` fallback.
fn code_execute_everywhere(name: &str) -> String {
    format!(
        r#"
settings:
  a2a: {{ namespace: trust-{name}, agent_id: asker }}
nodes:
  - name: wrapped
    uses: ratelimit.wrap
    with: {{ action: code.execute, limiter: trust-{name}, rps: 1000, args: {{ code: "result = 1" }} }}
    output: wrapped
  - name: step
    uses: reflection.loop
    with:
      generator: {{ action: code.execute, code: "result = 2" }}
      evaluator: {{ type: custom, run: "return true" }}
      max_iterations: 1
    output: step
  - name: fallback
    uses: a2a.delegate
    with:
      to: nobody-home
      task: {{ type: t }}
      timeout: 20ms
      on_timeout: fallback_local
      fallback: {{ action: code.execute, with: {{ code: "result = 3" }} }}
"#
    )
}

#[test]
fn code_execute_is_trusted_in_every_position_with_trust_and_in_none_without() {
    let out = run(&code_execute_everywhere("on"), json!({})).unwrap();
    assert_eq!(out["wrapped"]["return_value"], 1, "{}", out["wrapped"]);
    assert_eq!(out["step"]["reflection_output"]["return_value"], 2, "{}", out["step"]);
    assert_eq!(out["a2a_delegation_result"]["return_value"], 3, "{}", out["a2a_delegation_result"]);

    let untrusted = Engine::new().load_str(&code_execute_everywhere("off")).unwrap();
    let warned: Vec<&str> = untrusted.warnings().iter().map(|w| w.message()).collect();
    assert!(warned.iter().any(|w| w.contains("`code.execute` (wrapped by `ratelimit.wrap`")), "{warned:?}");
    let out = untrusted.invoke(json!({})).unwrap().done().unwrap();
    let disabled =
        |result: &Value| result["error"].as_str().is_some_and(|e| e.starts_with("Code execution is disabled"));
    assert!(disabled(&out["wrapped"]), "{}", out["wrapped"]);
    assert!(disabled(&out["step"]["reflection_output"]), "{}", out["step"]);
    assert!(disabled(&out["a2a_delegation_result"]), "{}", out["a2a_delegation_result"]);
}
