//! Load errors: every problem of a file at once, each with its line and column.

use tea_yaml::{Engine, LoadError};

fn problems(yaml: &str) -> Vec<(usize, usize, String)> {
    let err: LoadError = Engine::new().load_str(yaml).expect_err("the file should not load");
    err.problems().iter().map(|p| (p.line(), p.column(), p.message().to_owned())).collect()
}

fn has(problems: &[(usize, usize, String)], line: usize, text: &str) {
    assert!(
        problems.iter().any(|(l, _, m)| *l == line && m.contains(text)),
        "no problem at line {line} containing {text:?} in:\n{problems:#?}"
    );
}

#[test]
fn every_problem_is_reported_with_its_line() {
    let yaml = r#"name: broken
confg: {}
state:
  count: integr
  log: { type: int, reducer: append }
nodes:
  - name: a
    run: return { x = }
    goto: nowhere
  - name: a
    run: return {}
  - name: b
    uses: text.shuot
  - name: c
    run: return {}
    uses: file.read
  - name: d
    run: return {}
    goto:
      - { if: "state.x >", to: a }
      - { if: "true" }
edges:
  - { from: missing, to: b }
  - { from: b, to: __end__, when: "state.y ==" }
"#;
    let p = problems(yaml);
    has(&p, 2, "unknown key `confg` in the agent file; did you mean `config`?");
    has(&p, 4, "unknown type `integr`");
    has(&p, 4, "did you mean `int`?");
    has(&p, 5, "reducer `append` does not work on type `int`");
    has(&p, 8, "Lua syntax error");
    has(&p, 9, "names `nowhere`, which is not a node");
    has(&p, 10, "duplicate node name `a` (first at line 7)");
    has(&p, 13, "unknown action `text.shuot`");
    has(&p, 14, "two ways to run (run, uses)");
    has(&p, 20, "the condition `state.x >` does not parse");
    has(&p, 21, "without `to`");
    has(&p, 23, "an edge leaves `missing`, which is not a node");
    has(&p, 24, "the condition `state.y ==` does not parse");
    // In file order, and the Display form is file:line:column: message.
    let lines: Vec<usize> = p.iter().map(|(l, _, _)| *l).collect();
    let mut sorted = lines.clone();
    sorted.sort();
    assert_eq!(lines, sorted);
    let text = Engine::new().load_str(yaml).unwrap_err().to_string();
    assert!(text.lines().any(|l| l.starts_with("<string>:2:1: unknown key `confg`")), "{text}");
}

#[test]
fn a_lua_syntax_error_is_marked_at_the_bad_token_not_at_column_1() {
    // A block scalar: the token's column in its line, plus the block's indentation.
    let block = "name: a\nnodes:\n  - name: one\n    run: |\n      local x = 1\n      return { x = = 2 }\n";
    let p = problems(block);
    assert_eq!(p.len(), 1, "{p:#?}");
    assert_eq!((p[0].0, p[0].1), (6, 20), "the second `=` of `      return {{ x = = 2 }}`: {p:#?}");
    assert!(p[0].2.contains("Lua syntax error") && p[0].2.contains("near '='"), "{p:#?}");
    // A one-line scalar, plain and quoted: counted from where the value starts.
    let plain = problems("name: a\nnodes:\n  - name: one\n    run: return { x = }\n");
    assert_eq!((plain[0].0, plain[0].1), (4, 23), "the `}}` of `    run: return {{ x = }}`: {plain:#?}");
    let quoted = problems("name: a\nnodes:\n  - name: one\n    run: \"return { x = }\"\n");
    assert_eq!((quoted[0].0, quoted[0].1), (4, 24), "{quoted:#?}");
    // The Display form points there too.
    let text = Engine::new().load_str(block).unwrap_err().to_string();
    assert!(text.starts_with("<string>:6:20: node `one`: Lua syntax error"), "{text}");
}

#[test]
fn yaml_syntax_errors_have_a_position() {
    let p = problems("nodes:\n  - name: a\n    run: [1, 2\n");
    assert_eq!(p.len(), 1);
    assert!(p[0].2.starts_with("YAML syntax"), "{p:?}");
    assert!(p[0].0 >= 3, "{p:?}");
}

#[test]
fn duplicate_keys_are_an_error_not_a_silent_overwrite() {
    let p = problems("nodes:\n  - name: a\n    run: return {}\n    run: return { x = 1 }\n");
    has(&p, 4, "duplicate key `run`");
}

#[test]
fn interrupts_need_a_checkpointer() {
    for yaml in [
        "config:\n  interrupt_before: [a]\nnodes:\n  - name: a\n    run: return {}\n",
        "nodes:\n  - name: a\n    interrupt: after\n    run: return {}\n",
        "nodes:\n  - name: a\n    type: interrupt\n    message: hi\n",
    ] {
        let p = problems(yaml);
        assert!(
            p.iter().any(|(_, _, m)| m.contains("a checkpointer is required")
                && m.contains("config.checkpoint_dir: DIR")
                && m.contains("config.checkpointer: memory")),
            "{p:?}"
        );
    }
    // With one from the engine, the same file loads.
    let engine = Engine::new().checkpointer(tea::MemoryStore::new());
    assert!(engine.load_str("nodes:\n  - name: a\n    type: interrupt\n    message: hi\n").is_ok());
}

#[test]
fn misplaced_or_unknown_node_keys_and_forms() {
    let yaml = r#"
config: { checkpointer: memory, interrupt_after: [ghost] }
nodes:
  - name: a
    run: return {}
    message: "only for interrupts"
  - name: b
    language: python
    run: "return {}"
  - name: c
    type: for_each
  - name: d
    run: return {}
    interupt: before
  - name: __end__
    run: return {}
  - run: return {}
"#;
    let p = problems(yaml);
    has(&p, 2, "`config.interrupt_after` names `ghost`, which is not a node");
    has(&p, 6, "`message` belongs to `type: interrupt` nodes");
    has(&p, 9, "node `b` is Python");
    has(&p, 11, "node type `for_each` is not supported");
    has(&p, 14, "unknown key `interupt` in a node; did you mean `interrupt`?");
    has(&p, 15, "`__end__` is reserved");
    has(&p, 17, "a node without a `name`");
}

#[test]
fn parallel_edges_need_a_fan_in_they_can_find() {
    let yaml = r#"
nodes:
  - name: plan
    run: return {}
  - name: web
    run: return {}
  - name: papers
    run: return {}
  - name: merge
    run: return {}
edges:
  - { from: plan, parallel: [web, papers] }
  - { from: web, to: merge, type: parallel, fan_in: nowhere }
"#;
    let p = problems(yaml);
    has(&p, 12, "no single node where they meet; name it with `fan_in: NODE`");
    has(&p, 13, "`fan_in` names `nowhere`, which is not a node");
}

#[test]
fn an_unknown_config_store_and_bad_limits_are_reported() {
    let p = problems(
        "config:\n  checkpointer: redis\n  recursion_limit: -1\n  raise_exceptions: maybe\nnodes:\n  - name: a\n",
    );
    has(&p, 2, "`config.checkpointer` must be `memory`");
    has(&p, 3, "positive integer");
    has(&p, 4, "true or false");
}

#[test]
fn the_graph_checks_of_graph_macro_run_on_yaml_too() {
    let yaml = r#"
nodes:
  - name: start_here
    run: return {}
    goto:
      - { if: "state.a", to: loop }
      - { to: __end__ }
      - { to: orphan }
  - name: loop
    run: return {}
    goto: loop
  - name: orphan
    run: return {}
"#;
    let p = problems(yaml);
    has(&p, 8, "never taken");
    // With the shadowed rule gone, the paths are checked.
    let yaml = r#"
nodes:
  - name: start_here
    run: return {}
    goto:
      - { if: "state.a", to: spin }
      - { to: __end__ }
  - name: spin
    run: return {}
    goto: spin
  - name: orphan
    run: return {}
"#;
    let p = problems(yaml);
    has(&p, 8, "node `spin` never reaches `__end__`");
    // A node nothing reaches is a warning (it never runs, as in The Edge Agent's engines), an
    // error when the engine is strict.
    assert!(!p.iter().any(|(_, _, m)| m.contains("`orphan` is unreachable")), "{p:?}");
    let err = Engine::new().strict(true).load_str(yaml).expect_err("strict");
    assert!(
        err.problems().iter().any(|q| q.line() == 11 && q.message().contains("node `orphan` is unreachable")),
        "{err}"
    );
    let loose = Engine::new()
        .load_str("nodes:\n  - name: a\n    run: return {}\n    goto: __end__\n  - name: orphan\n    run: return {}\n")
        .unwrap();
    let warned: Vec<String> = loose.warnings().iter().map(|w| format!("{}: {}", w.line(), w.message())).collect();
    assert_eq!(
        warned,
        ["5: node `orphan` is unreachable: no path from `__start__` leads to it; add an edge to it or remove it; it \
          never runs (`tea validate --strict`, `Engine::strict`, refuse it)"]
    );
}

#[test]
fn the_benchmark_agents_load_and_run() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tea-bench/yaml");
    let looped = Engine::new().load_file(dir.join("loop.yaml")).unwrap_or_else(|e| panic!("{e}"));
    let out = looped.invoke(serde_json::json!({ "count": 0 })).unwrap().done().unwrap();
    assert_eq!(out["count"], 1000);
    let pipeline = Engine::new().load_file(dir.join("pipeline.yaml")).unwrap_or_else(|e| panic!("{e}"));
    let out = pipeline.invoke(serde_json::json!({})).unwrap().done().unwrap();
    assert_eq!(out["done"], true);
    assert_eq!(out["log"].as_array().unwrap().len(), 10);
}

#[test]
fn a_node_marked_fan_in_must_be_one() {
    let p = problems("nodes:\n  - name: a\n    run: return {}\n  - name: b\n    fan_in: true\n    run: return {}\n");
    has(&p, 5, "marked `fan_in: true`, but no parallel edge meets there");
}

/// Without the feature `net`, the actions that reach the network are load problems that say
/// which feature they need (not "unknown action").
#[cfg(not(feature = "net"))]
#[test]
fn network_actions_without_the_net_feature_name_the_feature() {
    let p = problems("nodes:\n  - name: ask\n    uses: llm.call\n    with: { model: m, prompt: hi }\n");
    has(&p, 3, "action `llm.call` (node `ask`) reaches the network, which this build leaves out: it needs tea-yaml's cargo feature `net`");
}

#[test]
fn settings_sections_and_keys_are_checked() {
    let p = problems("settings:\n  lmm: {}\n  llm: { base: x }\nnodes:\n  - { name: a, run: 'return {}' }\n");
    has(&p, 2, "unknown key `lmm` in `settings`");
    has(&p, 3, "unknown key `base` in `settings.llm`");
}
