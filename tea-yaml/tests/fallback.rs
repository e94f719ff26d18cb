//! The Edge Agent's DSPy and TextGrad actions, which tea runs as The Edge Agent does where the
//! library is not installed: `reason.dspy.cot`/`react` as `reason.cot`/`react` marked
//! `native_fallback`, compile and optimize reporting DSPy missing, TextGrad's variables kept
//! and its feedback scored by The Edge Agent's heuristic, mem0's messages kept in the agent's
//! memory.

use serde_json::json;
use tea_yaml::Engine;

#[cfg(feature = "net")]
mod support;

fn load(text: &str) -> tea_yaml::Agent {
    Engine::new().allow_net("127.0.0.1").load_str(text).unwrap_or_else(|e| panic!("{e}"))
}

fn problems(text: &str) -> Vec<String> {
    match Engine::new().allow_net("127.0.0.1").load_str(text) {
        Ok(_) => panic!("loaded"),
        Err(e) => e.problems().iter().map(|p| format!("{}: {}", p.line(), p.message())).collect(),
    }
}

#[cfg(feature = "net")]
#[test]
fn dspy_chain_of_thought_runs_reason_cot_and_says_so() {
    let mock = support::mock::Mock::start();
    let agent = load(&format!(
        r#"
settings:
  llm: {{ api_base: "{}", api_key: sk-test, model: echo, max_retries: 0 }}
nodes:
  - name: solve
    uses: reason.dspy.cot
    with:
      problem: "{{{{ state.q }}}}"
      signature: "question -> thinking, answer"
      compiled_key: none_yet
      few_shot_examples: [{{ problem: "1+1", thinking: add, answer: "2" }}]
"#,
        mock.v1()
    ));
    let warned: Vec<String> = agent.warnings().iter().map(|w| w.message().to_owned()).collect();
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(warned[0].contains("tea embeds no DSPy, so it runs `reason.cot`"), "{warned:?}");
    let out =
        agent.invoke(json!({ "q": r#"{"thinking": "half of 80 is 40", "answer": 20}"# })).unwrap().done().unwrap();
    assert_eq!(out["answer"], 20);
    assert_eq!(out["thinking"], "half of 80 is 40");
    assert_eq!(out["dspy_module"], "native_fallback");
    assert_eq!(out["dspy_available"], false);
    let body = &mock.hits()[0].body;
    assert!(body.get("signature").is_none() && body.get("compiled_key").is_none(), "DSPy's own keys stay here: {body}");
    // A failed call is the result's error, still marked as the fallback.
    let failed = agent.invoke(json!({ "q": "no json" })).unwrap().done().unwrap();
    assert_eq!((failed["success"].clone(), failed["dspy_module"].clone()), (json!(false), json!("native_fallback")));
}

#[test]
fn dspy_compile_and_optimize_report_dspy_missing() {
    let agent = load(
        r#"
nodes:
  - name: compile
    uses: reason.dspy.compile
    with: { module_type: cot, training_data: "{{ state.data }}", teleprompter: BootstrapFewShot }
    output: compiled
  - name: optimize
    uses: reason.dspy.optimize
    with: { module_type: cot, metric: exact_match }
    output: optimized
  - name: listed
    uses: reason.dspy.list_compiled
    output: listed
"#,
    );
    let out = agent.invoke(json!({ "data": [{ "question": "q", "answer": "a" }] })).unwrap().done().unwrap();
    assert_eq!(
        out["compiled"],
        json!({
            "error": "DSPy not installed. Install with: pip install the_edge_agent[dspy]",
            "success": false,
            "compiled": false,
            "dspy_available": false
        })
    );
    assert_eq!(out["optimized"]["success"], false);
    assert!(out["optimized"].get("compiled").is_none());
    assert_eq!(out["listed"], json!({ "modules": [], "details": {}, "dspy_available": false }));
    assert!(agent.warnings()[0].message().contains("tea embeds no DSPy"), "{:?}", agent.warnings());
}

#[test]
fn textgrad_keeps_its_variables_scores_feedback_and_leaves_the_prompt() {
    let agent = load(
        r#"
nodes:
  - name: define
    uses: learn.textgrad.variable
    with: { name: system_prompt, initial_value: "{{ state.prompt }}", constraints: [be brief] }
    output: var
  - name: redefine
    uses: textgrad.variable
    with: { name: system_prompt, initial_value: "ignored: the first definition wins" }
    output: again
  - name: judge
    uses: learn.textgrad.feedback
    with: { output: "{{ state.answer }}", evaluation_criteria: [accurate], aspects: [clarity, safety] }
    output: feedback
  - name: optimize
    uses: learn.textgrad.optimize_prompt
    with: { variable: system_prompt, loss_fn: "Is it clear?" }
    output: optimized
  - name: correct
    uses: learn.textgrad.reflection_corrector
    with: { variable: system_prompt }
    output: corrected
"#,
    );
    let out = agent
        .invoke(json!({
            "prompt": "You are a helpful assistant.",
            "answer": "too short",
            "reflection_iteration": 2,
            "reflection_output": "draft",
        }))
        .unwrap()
        .done()
        .unwrap();
    assert_eq!(out["var"]["variable"]["current_value"], "You are a helpful assistant.");
    assert_eq!(out["var"]["variable"]["versions"][0]["change_reason"], "initial");
    assert_eq!(out["again"]["variable"]["initial_value"], "You are a helpful assistant.");
    assert_eq!(out["feedback"]["scores"], json!({ "accurate": 0.5, "aspect_clarity": 0.02, "aspect_safety": 1.0 }));
    assert_eq!(out["feedback"]["valid"], false, "two words are too few");
    assert_eq!(out["optimized"]["optimized_value"], "You are a helpful assistant.");
    assert_eq!(out["optimized"]["iterations_completed"], 0);
    assert_eq!(
        out["corrected"],
        json!({
            "corrected_output": "draft",
            "optimization_triggered": true,
            "new_prompt": "You are a helpful assistant.",
            "reflection_context_used": false,
            "reflection_iteration": 2
        })
    );

    // Optimising a variable never defined is the node's error, naming it.
    let lost = load(
        "nodes:\n  - name: optimize\n    uses: learn.textgrad.optimize_prompt\n    with: { variable: nowhere, loss_fn: x }\n",
    );
    let error = format!("{:?}", lost.invoke(json!({})));
    assert!(error.contains("Variable 'nowhere' not found"), "{error}");
}

#[test]
fn their_arguments_are_checked_at_load() {
    let found = problems(
        "nodes:\n  - name: judge\n    uses: learn.textgrad.feedback\n    with: { outptu: x, evaluation_criteria: [a] }\n",
    );
    assert_eq!(
        found,
        ["4: unknown argument `outptu` of `learn.textgrad.feedback` (node `judge`); did you mean `output`?; it \
             takes output, evaluation_criteria, aspects, context",]
    );
    let missing = problems("nodes:\n  - name: judge\n    uses: learn.textgrad.feedback\n    with: { output: x }\n");
    assert_eq!(missing, ["4: `learn.textgrad.feedback` (node `judge`) needs `evaluation_criteria` in its `with:`"]);
    let dspy = problems("nodes:\n  - name: s\n    uses: reason.dspy.cot\n    with: { question: q }\n");
    assert!(dspy.iter().any(|p| p.contains("unknown key `question` in `with` of `reason.dspy.cot`")), "{dspy:?}");
    assert!(dspy.iter().any(|p| p.contains("needs `problem`")), "{dspy:?}");
}

#[test]
fn mem0_keeps_the_last_messages_per_user_and_reports_search_missing() {
    let agent = load(
        r#"
settings:
  memory: { backend: mem0, api_key: "${MEM0_API_KEY:-}" }
nodes:
  - name: remember
    uses: memory.mem0.add
    with:
      messages: [{ role: user, content: "{{ state.message }}" }]
      user_id: "{{ state.user }}"
      metadata: { source: conversation }
    output: stored
  - name: recall
    uses: memory.mem0.get_all
    with: { user_id: "{{ state.user }}" }
    output: all
  - name: search
    uses: memory.mem0.search
    with: { query: "{{ state.message }}", user_id: "{{ state.user }}", limit: 5 }
    output: found
  - name: stranger
    uses: memory.mem0.get_all
    with: { user_id: nobody }
    output: none
"#,
    );
    assert!(agent.warnings().iter().any(|w| w.message().contains("tea embeds no mem0")), "{:?}", agent.warnings());
    let out = agent.invoke(json!({ "message": "I like tea", "user": "u1" })).unwrap().done().unwrap();
    assert_eq!(out["stored"], json!({ "stored": true, "key": "mem0_fallback_u1", "namespace": "mem0_fallback" }));
    assert_eq!(
        out["all"],
        json!({ "success": true, "memories": [{ "messages": [{ "role": "user", "content": "I like tea" }] }], "fallback": true })
    );
    assert_eq!(out["found"]["success"], false);
    assert_eq!(out["found"]["results"], json!([]));
    assert_eq!(out["none"], json!({ "success": false, "memories": [], "fallback": true }));
}
