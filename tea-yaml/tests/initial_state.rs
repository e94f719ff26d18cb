//! The Edge Agent's top-level `initial_state:` (under the input: the input's keys win) and
//! `version:` (accepted).

use serde_json::json;
use tea_yaml::Engine;

const AGENT: &str = r#"
name: defaults
version: "1.0"
state:
  count: int
initial_state:
  count: 1
  mode: draft
  tags: [a, b]
nodes:
  - name: bump
    run: return { count = state.count + 1, seen = state.mode }
"#;

#[test]
fn initial_state_fills_the_keys_the_input_does_not_give() {
    let agent = Engine::new().load_str(AGENT).unwrap();
    let out = agent.invoke(json!({})).unwrap().done().unwrap();
    assert_eq!(out.to_json(), json!({ "count": 2, "mode": "draft", "seen": "draft", "tags": ["a", "b"] }));
    // The input's keys win.
    let out = agent.invoke(json!({ "count": 10, "mode": "final" })).unwrap().done().unwrap();
    assert_eq!(out["count"], 11);
    assert_eq!(out["seen"], "final");
    assert_eq!(out["tags"], json!(["a", "b"]));
}

#[test]
fn a_version_is_a_string_or_a_number() {
    for version in ["1", "1.5", "\"2.0.1\""] {
        let yaml = format!("version: {version}\nnodes:\n  - name: a\n    run: return {{}}\n");
        assert!(Engine::new().load_str(&yaml).is_ok(), "{version}");
    }
}

#[test]
fn bad_initial_state_and_version_are_load_errors_at_their_lines() {
    let problems = |yaml: &str| -> Vec<(usize, String)> {
        let err = Engine::new().load_str(yaml).expect_err("the file should not load");
        err.problems().iter().map(|p| (p.line(), p.message().to_owned())).collect()
    };
    let p = problems("state: { count: int }\ninitial_state:\n  count: many\nversion: [1]\nnodes:\n  - name: a\n");
    assert!(p.iter().any(|(l, m)| *l == 3 && m.contains("`initial_state`") && m.contains("count")), "{p:#?}");
    assert!(p.iter().any(|(l, m)| *l == 4 && m.contains("`version` must be a string or a number")), "{p:#?}");
    let p = problems("initial_state: [1, 2]\nnodes:\n  - name: a\n");
    assert!(p.iter().any(|(l, m)| *l == 1 && m.contains("`initial_state` must be a mapping")), "{p:#?}");
}
