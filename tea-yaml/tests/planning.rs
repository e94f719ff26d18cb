//! The Edge Agent's planning actions (`plan.decompose`, `plan.execute`, `plan.replan`,
//! `plan.status`) against the mock server, and their load errors.

#[cfg(feature = "net")]
use serde_json::{json, Value};
use tea_yaml::Engine;

#[cfg(feature = "net")]
mod support;

fn problems(text: &str) -> Vec<String> {
    match Engine::new().allow_net("127.0.0.1").load_str(text) {
        Ok(_) => panic!("loaded:\n{text}"),
        Err(e) => e.problems().iter().map(|p| format!("{}: {}", p.line(), p.message())).collect(),
    }
}

/// The mock's `echo` model answers `echo: Goal: {goal}`: a goal holding a JSON plan makes the
/// planner's reply (read from its first `{` to its last `}`).
#[cfg(feature = "net")]
const GOAL: &str = r#"{"subtasks": [{"id": "b_write", "description": "Write", "dependencies": ["a_find"]}, {"id": "a_find", "description": "Find sources"}, {"id": "c_check", "description": "Check", "dependencies": ["a_find"]}]}"#;

#[cfg(feature = "net")]
fn planner(mock: &support::mock::Mock, nodes: &str) -> tea_yaml::Agent {
    let text = format!(
        "settings:\n  llm: {{ api_base: \"{}\", api_key: sk-test, model: echo, max_retries: 0 }}\nnodes:\n{nodes}",
        mock.v1()
    );
    Engine::new().allow_net("127.0.0.1").load_str(&text).unwrap_or_else(|e| panic!("{e}"))
}

#[cfg(feature = "net")]
#[test]
fn decompose_then_execute_in_dependency_order_then_status() {
    let mock = support::mock::Mock::start();
    let agent = planner(
        &mock,
        r#"
  - name: decompose
    action: plan.decompose
    params:
      goal: "{{ state.goal }}"
      planner: { strategy: hierarchical, max_depth: 2 }
    output: planned
  - name: execute
    uses: plan.execute
    with:
      plan: "{{ state.planned }}"
      subtask_executor:
        action: llm.call
        with:
          messages:
            - { role: user, content: "Do {{ subtask.description }} after {{ subtask_results | length }} ({{ goal | length > 0 }})" }
    output: executed
  - name: status
    uses: plan.status
    with: { plan: "{{ state.executed.plan }}", include_details: true, include_completed: false }
    output: status
"#,
    );
    let out = agent.invoke(json!({ "goal": GOAL })).unwrap().done().unwrap();
    let planned = &out["planned"];
    assert_eq!(planned["success"], true, "{planned}");
    assert_eq!(planned["subtask_count"], 3);
    let plan = &planned["plan"];
    assert!(plan["id"].as_str().unwrap().starts_with("plan_") && plan["id"].as_str().unwrap().len() == 13);
    assert_eq!(plan["strategy"], "hierarchical");
    assert_eq!(plan["subtasks"][0]["status"], "pending");
    assert_eq!(plan["subtasks"][1]["dependencies"], json!([]));
    assert_eq!(plan["metadata"]["replan_count"], 0);
    let steps: Vec<&str> =
        planned["planning_trace"].as_array().unwrap().iter().map(|s| s["step"].as_str().unwrap()).collect();
    assert_eq!(steps, ["decompose_start", "decompose_complete"]);
    let hits = mock.hits();
    // The hierarchical prompt, with its bounds.
    let system = hits[0].body["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("hierarchical tree of subtasks")
            && system.contains("5. Max depth: 2\n6. Limit total subtasks to 15")
    );

    let executed = &out["executed"];
    assert_eq!(executed["success"], true, "{executed}");
    // The decompose result was given whole: its `plan` is read. Dependencies first, then ids.
    assert_eq!(executed["subtask_results"]["a_find"], "echo: Do Find sources after 0 (True)");
    assert_eq!(executed["subtask_results"]["b_write"], "echo: Do Write after 1 (True)");
    assert_eq!(executed["subtask_results"]["c_check"], "echo: Do Check after 2 (True)");
    assert_eq!(
        executed["plan_status"],
        json!({ "pending": 0, "in_progress": 0, "completed": 3, "failed": 0, "skipped": 0, "total": 3 })
    );
    assert_eq!(executed["plan"]["subtasks"][1]["result"], "echo: Do Find sources after 0 (True)");

    let status = &out["status"];
    assert_eq!(status["progress"], 1.0);
    assert_eq!(status["subtasks"], json!([]), "include_completed: false leaves them out");
    assert_eq!(status["goal"], GOAL);
}

#[cfg(feature = "net")]
#[test]
fn a_failing_subtask_is_skipped_retried_or_aborts() {
    let mock = support::mock::Mock::start();
    let run = |strategy: &str, model: &str, parallel: bool| -> Value {
        let agent = planner(
            &mock,
            &format!(
                r#"
  - name: decompose
    uses: plan.decompose
    with: {{ goal: "{{{{ state.goal }}}}" }}
    output: planned
  - name: execute
    uses: plan.execute
    with:
      plan: "{{{{ state.planned.plan }}}}"
      parallel: {parallel}
      max_concurrent: 2
      on_subtask_failure: {strategy}
      retry_delay: 0
      subtask_executor:
        action: llm.call
        with: {{ model: "{{{{ '{model}' if subtask.id == 'a_find' else 'echo' }}}}", prompt: "{{{{ subtask.description }}}}" }}
    output: executed
"#
            ),
        );
        agent.invoke(json!({ "goal": GOAL })).unwrap().done().unwrap()["executed"].clone()
    };
    let skipped = run("skip", "deny", false);
    assert_eq!(skipped["success"], true, "{skipped}");
    assert_eq!(skipped["plan_status"]["skipped"], 1);
    // A skipped dependency counts as done: its dependents ran.
    assert_eq!(skipped["subtask_results"]["b_write"], "echo: Write");
    assert!(skipped["plan"]["subtasks"][1]["error"].as_str().unwrap().contains("401"));

    let retried = run("retry", "down:1", true);
    assert_eq!(retried["success"], true, "{retried}");
    assert_eq!(retried["subtask_results"]["a_find"], "echo: Find sources");
    let steps: Vec<&str> =
        retried["planning_trace"].as_array().unwrap().iter().map(|s| s["step"].as_str().unwrap()).collect();
    assert!(steps.contains(&"subtask_a_find_retry_1"), "{steps:?}");

    let aborted = run("abort", "deny", false);
    assert_eq!(aborted["success"], false);
    assert!(aborted["error"].as_str().unwrap().contains("401"), "{aborted}");
    assert_eq!(aborted["subtask_results"], json!({}));

    // A replan asks the planner again; the echo is no plan, so the replan fails and aborts.
    let replanned = run("replan", "deny", false);
    assert_eq!(replanned["success"], false);
    assert!(replanned["error"].as_str().unwrap().starts_with("Replan failed: Failed to parse replan"), "{replanned}");
}

#[cfg(feature = "net")]
#[test]
fn decompose_reports_what_the_planner_got_wrong() {
    let mock = support::mock::Mock::start();
    let agent = planner(
        &mock,
        r#"
  - name: decompose
    uses: plan.decompose
    with: { goal: "{{ state.goal }}", max_subtasks: 2 }
    output: planned
  - name: status
    uses: plan.status
    output: status
"#,
    );
    let planned = |goal: &str| agent.invoke(json!({ "goal": goal })).unwrap().done().unwrap();
    let out = planned("no plan here");
    assert_eq!(out["planned"]["success"], false);
    assert_eq!(
        out["planned"]["error"],
        "Failed to parse plan: Could not parse JSON from response: echo: Goal: no plan here..."
    );
    assert_eq!(out["status"], json!({ "error": "No plan found", "success": false }));
    let cycle = planned(r#"{"subtasks": [{"id": "a", "dependencies": ["b"]}, {"id": "b", "dependencies": ["a"]}]}"#);
    assert_eq!(cycle["planned"]["error"], "Invalid plan structure: Cycle detected: a -> b -> a");
    let truncated = planned(GOAL);
    assert_eq!(truncated["planned"]["subtask_count"], 2);
    assert_eq!(truncated["planned"]["planning_trace"][1]["step"], "subtasks_truncated");
    // `state.plan` is unset, so the node's own plan argument would be needed.
    assert_eq!(truncated["status"]["error"], "No plan found");
}

#[test]
fn planning_mistakes_are_load_errors_at_their_lines() {
    let p = problems(
        r#"
nodes:
  - name: decompose
    uses: plan.decompose
    with:
      planner: { strategy: flatt, depth: 2 }
  - name: execute
    uses: plan.execute
    with:
      on_subtask_failure: ignore
      subtask_executor: { action: llm.cal, with: {} }
      paralel: true
"#,
    );
    let has = |line: usize, text: &str| {
        assert!(p.iter().any(|m| m.starts_with(&format!("{line}: ")) && m.contains(text)), "{line}: {text} in {p:#?}");
    };
    if cfg!(not(feature = "net")) {
        has(4, "needs tea-yaml's cargo feature `net`");
        return;
    }
    has(6, "needs `goal`");
    has(6, "`strategy` of `planner` of `with` of `plan.decompose` (node `decompose`) is one of `flat`, `hierarchical`, `iterative`, not `flatt`; did you mean `flat`?");
    has(6, "unknown key `depth`");
    has(10, "`on_subtask_failure` of `with` of `plan.execute` (node `execute`) is one of `replan`, `retry`, `skip`, `abort`, not `ignore`");
    has(11, "unknown action `llm.cal`");
    has(12, "unknown key `paralel` in `with` of `plan.execute` (node `execute`); did you mean `parallel`?");
}

/// A plan handed in whole is bounded: more than 1000 subtasks is an error in the result, not a
/// run that never ends.
#[test]
fn a_plan_of_too_many_subtasks_is_refused() {
    let agent = Engine::new()
        .allow_net("127.0.0.1")
        .load_str("nodes:\n  - name: status\n    uses: plan.status\n    output: s\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let subtasks: Vec<serde_json::Value> =
        (0..1001).map(|i| serde_json::json!({ "id": format!("s{i}"), "description": "d" })).collect();
    let out = agent
        .invoke(serde_json::json!({ "plan": { "id": "p", "goal": "g", "subtasks": subtasks } }))
        .unwrap()
        .done()
        .unwrap();
    assert_eq!(out["s"]["error"], "Status check failed: the plan has 1001 subtasks, more than the 1000 tea runs");
}
