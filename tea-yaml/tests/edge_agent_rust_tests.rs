//! The agents written inline in The Edge Agent's Rust tests (`rust-tests-inline/` of the
//! corpus), run here with the input each of its tests gives and checked against what that test
//! asserts of the final state: the same end on both engines. The table below was read off its
//! `rust/tests/*.rs` at the corpus's pinned commit; its load-error tests (a `while_loop`
//! without its keys, …) are in `edge_agent_vocabulary.rs`, its Prolog tests in `prolog.rs`.
//! The few runs of its Python tests that check a final state are here too (feature `python`).
//! On a machine without the corpus the test says it skipped.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use tea_yaml::Engine;

fn corpus() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("TEA_EDGE_AGENT_CORPUS") {
        return Some(PathBuf::from(dir));
    }
    let beside = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/edge-agent-corpus");
    beside.is_dir().then_some(beside)
}

/// What one of its tests asserts: the file, the input, the keys of the final state it checks
/// (exact values) and the keys it checks are absent.
struct Expect {
    file: &'static str,
    input: &'static str,
    state: &'static str,
    absent: &'static [&'static str],
}

const fn ends(file: &'static str, input: &'static str, state: &'static str) -> Expect {
    Expect { file, input, state, absent: &[] }
}

const EXPECTED: &[Expect] = &[
    ends(
        "test_goto_timing__test_goto_evaluates_after_state_merge_reproduction_case.yaml",
        "{}",
        r#"{"result": "processed"}"#,
    ),
    ends("test_goto_timing__test_goto_with_boolean_flag.yaml", "{}", r#"{"answer": "yes"}"#),
    ends("test_goto_timing__test_goto_with_false_flag.yaml", "{}", r#"{"answer": "no"}"#),
    ends("test_goto_timing__test_goto_with_string_comparison.yaml", "{}", r#"{"handled": "success"}"#),
    ends("test_goto_timing__test_chained_gotos.yaml", "{}", r#"{"step": 3, "done": true}"#),
    ends("test_goto_timing__test_goto_with_empty_return.yaml", r#"{"preexisting": true}"#, r#"{"answer": "yes"}"#),
    ends("test_goto_timing__test_goto_with_empty_return.yaml", "{}", r#"{"answer": "no"}"#),
    ends("test_goto_timing__test_goto_with_undefined_key.yaml", "{}", r#"{"result": "not_found"}"#),
    ends("test_goto_timing__test_goto_with_numeric_comparison.yaml", "{}", r#"{"grade": "B"}"#),
    Expect {
        file: "test_goto_timing__test_goto_to_end.yaml",
        input: "{}",
        state: r#"{"done": true}"#,
        absent: &["processed"],
    },
    ends("test_while_loop__test_while_loop_yaml_execution.yaml", r#"{"count": 0}"#, r#"{"count": 3}"#),
    ends(
        "test_while_loop__test_while_loop_with_lua_body.yaml",
        r#"{"count": 0, "sum": 0}"#,
        r#"{"count": 3, "sum": 6}"#,
    ),
    ends("test_yaml_engine__test_lua_works_without_prolog_feature.yaml", "{}", r#"{"result": 42}"#),
    ends(
        "test_yaml_engine__test_lua_multinode_state_preservation.yaml",
        "{}",
        r#"{"greeting": "Hello", "message": "Hello World!", "counter": 2, "saw_greeting": true, "final_message": "Hello World!"}"#,
    ),
    ends(
        "test_yaml_engine__test_lua_preserves_input_state.yaml",
        r#"{"value": 21, "name": "original", "config": {"nested": true}}"#,
        r#"{"value": 21, "name": "original", "config": {"nested": true}, "processed": true, "doubled": 42}"#,
    ),
    ends(
        "test_yaml_engine__test_lua_nil_return_preserves_state.yaml",
        r#"{"value": 42, "preserved": "yes"}"#,
        r#"{"value": 42, "preserved": "yes"}"#,
    ),
    ends(
        "test_yaml_engine__test_lua_empty_table_preserves_state.yaml",
        r#"{"value": 42, "preserved": "yes"}"#,
        r#"{"value": 42, "preserved": "yes"}"#,
    ),
    ends("test_experiments__create_test_agent_yaml.yaml", r#"{"input": "hello"}"#, r#"{"result": "world"}"#),
    ends("test_experiments__create_test_agent_yaml.yaml", r#"{"input": "double"}"#, r#"{"result": 4}"#),
    ends("test_experiments__create_test_agent_yaml.yaml", "{}", "{}"),
    ends("test_cli_parity__test_no_language_defaults_to_lua.yaml", "{}", r#"{"result": "default lua works"}"#),
    ends("test_cli_parity__test_explicit_lua_language.yaml", "{}", r#"{"result": "explicit lua works"}"#),
    ends("test_ratelimit__test_yaml_workflow_with_ratelimit.yaml", "{}", "{}"),
    ends("test_observability__test_yaml_engine_with_actions_and_observability.yaml", r#"{"input": "test"}"#, "{}"),
];

fn run(root: &Path, file: &str, input: &str) -> Result<Value, String> {
    let agent = Engine::new().load_file(root.join("rust-tests-inline").join(file)).map_err(|e| e.to_string())?;
    let input: Value = serde_json::from_str(input).unwrap();
    let out =
        agent.invoke(input).map_err(|e| format!("{e}: {:?}", std::error::Error::source(&e).map(|s| s.to_string())))?;
    Ok(out.done().ok_or("the agent paused")?.to_json())
}

#[test]
fn its_rust_tests_agents_end_as_its_tests_expect() {
    let Some(root) = corpus() else {
        eprintln!("skipped: The Edge Agent's corpus is not here (set TEA_EDGE_AGENT_CORPUS)");
        return;
    };
    let mut wrong = Vec::new();
    for e in EXPECTED {
        let end = match run(&root, e.file, e.input) {
            Ok(end) => end,
            Err(why) => {
                wrong.push(format!("{} with {}: {why}", e.file, e.input));
                continue;
            }
        };
        let expected: Value = serde_json::from_str(e.state).unwrap();
        for (key, value) in expected.as_object().unwrap() {
            if end.get(key) != Some(value) {
                wrong.push(format!(
                    "{} with {}: `{key}` is {:?}, its test expects {value}",
                    e.file,
                    e.input,
                    end.get(key)
                ));
            }
        }
        for key in e.absent {
            if end.get(*key).is_some() {
                wrong.push(format!("{} with {}: `{key}` is set, its test expects it absent", e.file, e.input));
            }
        }
    }
    assert!(wrong.is_empty(), "{} of {} runs differ:\n{}", wrong.len(), EXPECTED.len(), wrong.join("\n"));
}

#[test]
fn its_parallel_agents_keep_each_branch_to_itself() {
    let Some(root) = corpus() else { return };
    // test_parallel_branches_independent_lua_state: two branches, and branch b does not see
    // the Lua global branch a set.
    let end = run(&root, "test_stategraph__test_parallel_branches_independent_lua_state.yaml", "{}").unwrap();
    let results = end["parallel_results"].as_array().expect("parallel_results");
    assert_eq!(results.len(), 2);
    let b = results.iter().find(|r| r["branch"] == "b" || r["state"]["branch"] == "b").expect("branch b's result");
    let leaked = if b["state"].is_object() { &b["state"]["leaked"] } else { &b["leaked"] };
    assert_eq!(leaked, &json!(false), "{b}");
    // test_parallel_template_rendering: three runs, two branches each.
    for i in 0..3 {
        let input = format!(r#"{{"input": "test_{i}"}}"#);
        let end = run(&root, "test_stategraph__test_parallel_template_rendering.yaml", &input).unwrap();
        assert_eq!(end["parallel_results"].as_array().map(Vec::len), Some(2), "{end}");
    }
}

#[test]
fn where_its_rust_engine_and_tea_differ_on_purpose() {
    let Some(root) = corpus() else { return };
    // test_unconditional_goto: a node no path reaches. Its engine skips it, and so does tea
    // (with a warning; `Engine::strict` refuses the file).
    let end = run(&root, "test_goto_timing__test_unconditional_goto.yaml", "{}").unwrap();
    assert_eq!(end["step"], "jumped");
    let strict = Engine::new()
        .strict(true)
        .load_file(root.join("rust-tests-inline/test_goto_timing__test_unconditional_goto.yaml"));
    assert!(strict.err().is_some_and(|e| e.to_string().contains("node `skipped` is unreachable")));
    // test_python_language_error: its Rust engine has no Python; tea runs Python blocks in a
    // file it trusts, and says how when it does not.
    let err = run(&root, "test_cli_parity__test_python_language_error.yaml", "{}").unwrap_err();
    assert!(err.contains("Python"), "{err}");
}

/// Runs the corpus file `file` (a path under the corpus root) in a trusted engine.
#[cfg(feature = "python")]
fn run_file(root: &Path, file: &str, input: Value) -> Result<Value, String> {
    let agent = Engine::new().trust_code(true).load_file(root.join(file)).map_err(|e| e.to_string())?;
    let out =
        agent.invoke(input).map_err(|e| format!("{e}: {:?}", std::error::Error::source(&e).map(|s| s.to_string())))?;
    Ok(out.done().ok_or("the agent paused")?.to_json())
}

/// The runs of The Edge Agent's Python tests that check a final state (most of its Python
/// tests only load or validate its files): the same input, the same assertions.
#[cfg(feature = "python")]
#[test]
fn its_python_tests_agents_end_as_its_tests_expect() {
    let Some(root) = corpus() else { return };
    // test_lua_runtime.py::TestCrossRuntimeVerification::test_shared_fixture_yaml
    let input = json!({
        "input_value": 30, "input_string": "hello", "input_array": [1, 2, 3],
        "input_object": { "name": "test", "count": 5 },
    });
    let end = run_file(&root, "python/tests/fixtures/lua_test_agent.yaml", input).unwrap();
    assert_eq!(end["result_math"], 70);
    assert_eq!(end["result_string"], "HELLO!");
    assert_eq!(end["result_array"], json!([2, 4, 6]));
    assert_eq!(end["result_conditional"], "medium");
    let object = &end["result_object"];
    assert_eq!(
        (object["name"].clone(), object["count"].clone(), object["doubled"].clone()),
        (json!("test"), json!(6), json!(10))
    );
    // test_cli_heartbeat.py::test_int_008: node b raises, so the run fails (and c never runs).
    let err = run_file(&root, "python/tests/fixtures/heartbeat/failing_middle.yaml", json!({})).unwrap_err();
    assert!(err.contains("boom"), "{err}");
    // test_dx_001_2 test_int_012: it runs to an object.
    assert!(run_file(&root, "python/tests/fixtures/dx_001_2/simple.yaml", json!({})).unwrap().is_object());
}
