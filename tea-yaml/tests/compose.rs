//! The Edge Agent's composed actions: `reflection.loop` (generate → evaluate → correct), its
//! results and its load errors.

use serde_json::json;
#[cfg(any(feature = "net", feature = "python"))]
use serde_json::Value;
use tea_yaml::Engine;

#[cfg(feature = "net")]
mod support;

fn load(text: &str) -> tea_yaml::Agent {
    Engine::new().allow_net("127.0.0.1").trust_code(true).load_str(text).unwrap_or_else(|e| panic!("{e}"))
}

fn problems(text: &str) -> Vec<String> {
    match Engine::new().allow_net("127.0.0.1").trust_code(true).load_str(text) {
        Ok(_) => panic!("loaded"),
        Err(e) => e.problems().iter().map(|p| format!("{}: {}", p.line(), p.message())).collect(),
    }
}

/// A Lua generator whose output grows each pass, judged by a schema (at least 3 items): the
/// third pass passes, and the corrector's key reaches the next pass.
const GROWING: &str = r#"
nodes:
  - name: write
    uses: reflection.loop
    with:
      generator:
        run: |
          local items = {}
          for i = 1, state.reflection_iteration do items[i] = "item " .. i end
          return { result = { items = items, hint = state.hint } }
      evaluator:
        type: schema
        schema:
          type: object
          required: [items]
          properties:
            items: { type: array, minItems: 3 }
      corrector:
        run: |
          return { hint = "longer, please (" .. #state.reflection_errors .. " errors)" }
      max_iterations: 4
    output: written
"#;

#[test]
fn a_reflection_loop_runs_until_its_output_passes() {
    let out = load(GROWING).invoke(json!({})).unwrap().done().unwrap();
    let w = &out["written"];
    assert_eq!(w["success"], true);
    assert_eq!(w["valid"], true);
    assert_eq!(w["reflection_iteration"], 3);
    assert_eq!(w["items"], json!(["item 1", "item 2", "item 3"]));
    // The corrector's key reached the passes after it.
    assert_eq!(w["hint"], "longer, please (1 errors)");
    let history = w["reflection_history"].as_array().unwrap();
    assert_eq!(history.len(), 3);
    assert_eq!(history[0]["valid"], false);
    assert_eq!(history[0]["score"], 0.0);
    assert_eq!(history[0]["errors"][0]["path"], "items");
    assert!(history[0]["errors"][0]["message"].as_str().unwrap().contains("has less than 3 items"), "{history:?}");
    assert_eq!(history[2]["valid"], true);
    assert_eq!(w["reflection_best_score"], 1.0);
}

#[test]
fn an_exhausted_loop_returns_its_best_or_last_output_or_fails() {
    let exhausted = |strategy: &str| {
        GROWING.replace("max_iterations: 4", &format!("max_iterations: 2\n      on_failure: {strategy}"))
    };
    let best = load(&exhausted("return_best")).invoke(json!({})).unwrap().done().unwrap();
    let w = &best["written"];
    assert_eq!((w["success"].clone(), w["exhausted"].clone()), (json!(false), json!(true)));
    assert_eq!(w["reflection_iteration"], 2);
    // Both scored 0: the first is the best.
    assert_eq!(w["reflection_best"]["items"], json!(["item 1"]));
    assert_eq!(w["items"], json!(["item 1"]));
    let last = load(&exhausted("return_last")).invoke(json!({})).unwrap().done().unwrap();
    assert_eq!(last["written"]["items"], json!(["item 1", "item 2"]));
    let error = load(&exhausted("raise")).invoke(json!({})).unwrap_err().to_string();
    let chain = format!("{error} {:?}", load(&exhausted("raise")).invoke(json!({})).unwrap_err());
    assert!(chain.contains("write"), "{chain}");
    assert!(chain.contains("no output passed its evaluator after 2 iterations"), "{chain}");
    assert!(chain.contains("attempt 1"), "{chain}");
}

#[test]
fn a_lua_evaluator_reads_the_output_and_gives_a_verdict() {
    let agent = load(
        r#"
nodes:
  - name: guess
    uses: reflection.loop
    with:
      generator:
        run: return { result = state.reflection_iteration * 10 }
      evaluator:
        type: custom
        language: lua
        run: |
          return { valid = output >= 30, score = output / 100, errors = { { message = "too small: " .. output } } }
      max_iterations: 5
"#,
    );
    let out = agent.invoke(json!({})).unwrap().done().unwrap();
    assert_eq!(out["result"], 30);
    assert_eq!(out["reflection_iteration"], 3);
    assert_eq!(out["reflection_history"][0]["errors"][0]["message"], "too small: 10");
    assert_eq!(out["reflection_history"][1]["score"], 0.2);
}

#[cfg(feature = "python")]
#[test]
fn python_steps_assign_result_and_see_output_as_the_edge_agents_do() {
    let agent = load(
        r#"
state:
  min_words: { type: int }
nodes:
  - name: generate_content
    uses: reflection.loop
    with:
      generator:
        run: |
          iteration = state.get("reflection_iteration", 1)
          result = {"content": "word " * (iteration * 2)}
      evaluator:
        type: custom
        language: python
        run: |
          count = len(output.get("content", "").split())
          result = {"valid": count >= state["min_words"], "score": min(count / state["min_words"], 1.0),
                    "errors": [] if count >= state["min_words"] else [{"message": f"{count} words"}]}
      max_iterations: 5
    output: generated
"#,
    );
    let out = agent.invoke(json!({ "min_words": 6 })).unwrap().done().unwrap();
    let g = &out["generated"];
    assert_eq!(g["success"], true);
    assert_eq!(g["reflection_iteration"], 3);
    assert_eq!(g["content"].as_str().unwrap().split_whitespace().count(), 6);
    assert_eq!(g["reflection_history"][0]["errors"][0]["message"], "2 words");
}

#[test]
fn a_schema_coerces_strings_and_may_live_in_a_file() {
    let dir = std::env::temp_dir().join(format!("tea-compose-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("person.yaml"),
        "type: object\nrequired: [age]\nproperties:\n  age: { type: integer, minimum: 18 }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("agent.yaml"),
        r#"
nodes:
  - name: check
    uses: reflection.loop
    with:
      generator:
        run: return { result = { age = tostring(17 + state.reflection_iteration) } }
      evaluator:
        type: schema
        schema: { $ref: person.yaml }
"#,
    )
    .unwrap();
    let agent = Engine::new().allow_net("127.0.0.1").load_file(dir.join("agent.yaml")).unwrap();
    let out = agent.invoke(json!({})).unwrap().done().unwrap();
    // "18" passes `type: integer` once coerced; the output itself is what the generator gave.
    assert_eq!(out["reflection_iteration"], 1);
    assert_eq!(out["age"], "18");
    std::fs::write(dir.join("agent.yaml"), "nodes:\n  - name: check\n    uses: reflection.loop\n    with:\n      generator: { run: 'return {}' }\n      evaluator: { schema: { $ref: missing.yaml } }\n").unwrap();
    let error = Engine::new().allow_net("127.0.0.1").load_file(dir.join("agent.yaml")).unwrap_err().to_string();
    assert!(error.contains("cannot read `missing.yaml`"), "{error}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_reflection_loops_mistakes_are_load_errors_at_their_lines() {
    let found = problems(
        r#"
nodes:
  - name: a
    uses: reflection.loop
    with:
      generator: { action: llm.cal, prompt: hi }
      evaluator: { type: schemaa }
      max_iterations: 0
      on_failure: return_bets
      retries: 2
"#,
    );
    let text = found.join("\n");
    assert!(text.contains("6: unknown action `llm.cal`") && text.contains("did you mean `llm.call`"), "{text}");
    assert!(text.contains("7: `type` of `evaluator` of node `a` is `schema`, `llm` or `custom`, not `schemaa`; did you mean `schema`?"), "{text}");
    assert!(
        text.contains("8: `max_iterations` of `reflection.loop` (node `a`) is a number from 1 to 100, not 0"),
        "{text}"
    );
    assert!(text.contains("9: `on_failure`") && text.contains("did you mean `return_best`"), "{text}");
    assert!(text.contains("10: unknown key `retries`"), "{text}");
    let nested = problems(
        "nodes:\n  - name: a\n    uses: reflection.loop\n    with:\n      generator: { action: reason.cot, problem: p }\n      evaluator: { type: custom, run: 'return true' }\n",
    );
    assert!(nested.join("\n").contains("5: `generator` of node `a` cannot be `reason.cot`"), "{nested:?}");
    let bare = problems("nodes:\n  - name: a\n    uses: reason.react\n");
    assert_eq!(bare, ["3: `reason.react` (node `a`) needs `with: { goal, … }`"]);
    let missing = problems("nodes:\n  - name: a\n    uses: reflection.loop\n    with: { evaluator: { type: custom, run: 'return true' } }\n");
    assert!(missing.join("\n").contains("needs `generator:"), "{missing:?}");
    let bad_schema = problems(
        "nodes:\n  - name: a\n    uses: reflection.loop\n    with:\n      generator: { run: 'return {}' }\n      evaluator: { schema: { type: 12 } }\n",
    );
    assert!(
        bad_schema.join("\n").contains("6: `schema` of `evaluator` of node `a` is not a JSON Schema"),
        "{bad_schema:?}"
    );
}

#[test]
fn an_action_registered_under_the_name_runs_instead() {
    let agent = Engine::new()
        .allow_net("127.0.0.1")
        .action("reflection.loop", |_, args| Ok(json!({ "mine": args["x"].clone() })))
        .load_str("nodes:\n  - name: a\n    uses: reflection.loop\n    with: { x: 1 }\n")
        .unwrap();
    assert_eq!(agent.invoke(json!({})).unwrap().done().unwrap()["mine"], 1);
}

#[cfg(feature = "net")]
#[test]
fn an_llm_generator_is_judged_by_an_llm_and_corrected() {
    use support::mock::Mock;
    let mock = Mock::start();
    let agent = load(&format!(
        r#"
settings:
  llm: {{ api_base: "{}", api_key: sk-test, model: echo, max_retries: 0 }}
nodes:
  - name: draft
    uses: reflection.loop
    with:
      generator:
        action: llm.call
        prompt: "{{{{ state.topic }}}} take {{{{ state.reflection_iteration }}}}"
      evaluator:
        type: llm
        prompt: "{{{{ 'valid' if state.reflection_iteration > 1 else 'invalid' }}}}: {{{{ state.reflection_output }}}}"
        examples:
          - {{ input: "good", output: '{{"valid": true, "score": 1.0}}' }}
      corrector:
        action: llm.call
        prompt: "fix {{{{ state.reflection_errors[0].message }}}}"
      max_iterations: 3
    output: draft
"#,
        mock.v1()
    ));
    let out = agent.invoke(json!({ "topic": "tea" })).unwrap().done().unwrap();
    let d = &out["draft"];
    assert_eq!(d["success"], true, "{d}");
    assert_eq!(d["reflection_iteration"], 2);
    // A reply that is not JSON is the output as text.
    assert_eq!(d["result"], "echo: tea take 2");
    let hits = mock.hits();
    // generate, judge, correct, generate, judge.
    assert_eq!(hits.len(), 5, "{hits:?}");
    let judge = &hits[1].body["messages"];
    assert!(judge[0]["content"].as_str().unwrap().starts_with("You are an evaluation assistant"));
    assert_eq!(judge[1], json!({ "role": "user", "content": "good" }));
    assert_eq!(judge[2]["role"], "assistant");
    assert_eq!(judge[3]["content"], "invalid: echo: tea take 1");
    // The corrector saw the judge's verdict (its reply, not JSON, is the error).
    let fix = hits[2].body["messages"].as_array().unwrap().last().unwrap()["content"].clone();
    assert_eq!(fix, Value::from("fix echo: invalid: echo: tea take 1"));
}

/// The Edge Agent's corpus (`../shared/edge-agent-corpus`), when it is here.
#[cfg(feature = "python")]
fn corpus() -> Option<std::path::PathBuf> {
    if let Some(dir) = std::env::var_os("TEA_EDGE_AGENT_CORPUS") {
        return Some(dir.into());
    }
    let beside = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/edge-agent-corpus");
    beside.is_dir().then_some(beside)
}

#[cfg(feature = "python")]
#[test]
fn the_edge_agents_reflection_examples_run_to_their_documented_ends() {
    let Some(root) = corpus() else {
        eprintln!("skipped: The Edge Agent's corpus is not here (set TEA_EDGE_AGENT_CORPUS)");
        return;
    };
    let engine = Engine::new().allow_net("127.0.0.1").trust_code(true);
    let article = engine.load_file(root.join("examples/reflection/reflection-loop-example.yaml")).unwrap();
    let out = article.invoke(json!({ "topic": "climate change" })).unwrap().done().unwrap();
    // The first attempt lacks `summary`; the second passes.
    assert_eq!(out["success"], true);
    assert_eq!(out["generation_attempts"], 2);
    assert_eq!(out["article"]["title"], "Understanding Climate Change");
    assert_eq!(out["message"], "Article generated in 2 iteration(s)");
    assert_eq!(out["correction_feedback"], Value::Null, "the corrector's keys stay inside the loop");

    let content = engine.load_file(root.join("examples/reflection/custom-evaluator-example.yaml")).unwrap();
    let out = content.invoke(json!({ "min_words": 50 })).unwrap().done().unwrap();
    // Pass k writes 5k copies of a four-word sentence: 20k words, 50 or more from the third.
    assert_eq!(out["iterations_needed"], 3);
    assert_eq!(out["word_count"], 60);
    assert_eq!(out["final_score"], 1.0);
}

/// An agent of one `reason.*` node against the mock, whose `echo` model answers each call with
/// its last message: a JSON object written in the input comes back as the model's JSON.
#[cfg(feature = "net")]
fn reasoning(mock: &support::mock::Mock, action: &str, with: &str) -> tea_yaml::Agent {
    load(&format!(
        "settings:\n  llm: {{ api_base: \"{}\", api_key: sk-test, model: echo, max_retries: 0 }}\nnodes:\n  - name: think\n    uses: {action}\n    with:\n{with}\n    output: r\n",
        mock.v1()
    ))
}

#[cfg(feature = "net")]
#[test]
fn reason_cot_asks_for_thinking_and_an_answer() {
    let mock = support::mock::Mock::start();
    let agent = reasoning(
        &mock,
        "reason.cot",
        "      problem: \"{{ state.q }}\"\n      thinking_format: pros_cons\n      few_shot_examples: [{ problem: '1+1', thinking: 'add', answer: '2' }]\n      max_tokens: 50",
    );
    let out = agent.invoke(json!({ "q": r#"{"thinking": "weigh it", "answer": 42}"# })).unwrap().done().unwrap();
    let r = &out["r"];
    assert_eq!((r["thinking"].clone(), r["answer"].clone()), (json!("weigh it"), json!(42)));
    assert_eq!(r["reasoning_answer"], 42);
    assert_eq!(r["thinking_format"], "pros_cons");
    let hit = &mock.hits()[0];
    let system = hit.body["messages"][0]["content"].as_str().unwrap();
    assert!(system.starts_with("You are a careful reasoning assistant"), "{system}");
    assert!(system.contains("considering pros and cons") && system.contains("Example 1:\nProblem: 1+1"), "{system}");
    assert_eq!(hit.body["max_tokens"], 50, "options beside the pattern's own go to llm.call");
    // A reply without JSON is the action's error, in its result (The Edge Agent's).
    let out = agent.invoke(json!({ "q": "no json here" })).unwrap().done().unwrap();
    assert_eq!(out["r"]["success"], false);
    assert!(out["r"]["error"].as_str().unwrap().starts_with("Chain-of-thought reasoning failed: Could not parse JSON"));
}

#[cfg(feature = "net")]
#[test]
fn reason_react_calls_its_tools_and_stops_at_a_final_answer_or_its_step_limit() {
    let mock = support::mock::Mock::start();
    let agent = reasoning(
        &mock,
        "reason.react",
        "      goal: \"{{ state.goal }}\"\n      tools: [memory.store, vector.index_files]\n      max_steps: \"3\"",
    );
    let done = agent
        .invoke(
            json!({ "goal": r#"{"thought": "known", "action": "final_answer", "action_input": {"answer": "42"}}"# }),
        )
        .unwrap()
        .done()
        .unwrap();
    assert_eq!(done["r"]["final_answer"], "42");
    assert_eq!(done["r"]["total_steps"], 1);
    let system = mock.hits()[0].body["messages"][0]["content"].as_str().unwrap().to_owned();
    assert!(system.contains("- memory.store: Execute the memory.store action\n- vector.index_files:"), "{system}");
    assert_eq!(agent.warnings().len(), 1, "vector.index_files is The Edge Agent's, which tea lacks: a warning");

    let looped = agent
        .invoke(json!({ "goal": r#"{"thought": "note it", "action": "memory.store", "action_input": {"key": "k", "value": 1}}"# }))
        .unwrap()
        .done()
        .unwrap();
    let r = &looped["r"];
    assert_eq!(r["steps"][0]["action"], "memory.store");
    assert!(r["steps"][0]["observation"].as_str().unwrap().contains("\"stored\":true"), "{r}");
    assert_eq!(r["total_steps"], 3);
    assert_eq!(r["final_answer"], Value::Null);
    assert_eq!(r["warning"], "Max steps (3) reached without achieving goal");
    // A bound from a template is bounded too.
    let capped = reasoning(&mock, "reason.react", "      goal: g\n      max_steps: \"{{ 5000 }}\"");
    let r = capped.invoke(json!({})).unwrap().done().unwrap()["r"].clone();
    assert_eq!(r["success"], false);
    assert!(r["error"].as_str().unwrap().contains("`max_steps` is 5000, more than the 1000"), "{r}");
}

#[cfg(feature = "net")]
#[test]
fn reason_self_correct_and_decompose_make_their_rounds() {
    let mock = support::mock::Mock::start();
    let agent = reasoning(
        &mock,
        "reason.self_correct",
        "      task: \"{{ state.task }}\"\n      improvement_rounds: 2\n      critic_model: echo:critic",
    );
    let out = agent.invoke(json!({ "task": r#"{"output": "v1", "confidence": 0.9}"# })).unwrap().done().unwrap();
    let r = &out["r"];
    assert_eq!(r["output"], "v1");
    assert_eq!(r["improvement_history"].as_array().unwrap().len(), 3);
    assert_eq!(r["rounds_completed"], 2);
    assert_eq!(mock.hits_of("echo:critic").len(), 2);

    let mock = support::mock::Mock::start();
    let agent = reasoning(&mock, "reason.decompose", "      problem: \"{{ state.p }}\"");
    let p = r#"{"sub_problems": [{"id": 1, "description": "a"}, {"id": 2, "description": "b", "dependencies": [1]}]}"#;
    let out = agent.invoke(json!({ "p": p })).unwrap().done().unwrap();
    let r = &out["r"];
    assert_eq!(r["sub_answers"][0]["answer"], "echo: Sub-problem: a");
    assert_eq!(r["sub_answers"][1]["answer"], "echo: Sub-problem: b\nSub-answer 1: echo: Sub-problem: a");
    assert!(r["final_answer"].as_str().unwrap().starts_with("echo: Problem: "), "{r}");
    assert_eq!(mock.hits().len(), 4);
}

#[cfg(feature = "net")]
#[test]
fn reasoning_mistakes_are_load_errors() {
    let found = problems(
        "nodes:\n  - name: t\n    uses: reason.cot\n    with:\n      thinking_format: pro_cons\n      max_token: 5\n  - name: u\n    uses: reason.react\n    with: { goal: g, tools: [memory.stor] }\n",
    );
    let text = found.join("\n");
    assert!(text.contains("needs `problem`"), "{text}");
    assert!(text.contains("5: `thinking_format`") && text.contains("did you mean `pros_cons`"), "{text}");
    assert!(text.contains("6: unknown key `max_token`") && text.contains("did you mean `max_tokens`"), "{text}");
    assert!(
        text.contains("unknown action `memory.stor` among the tools") && text.contains("did you mean `memory.store`"),
        "{text}"
    );
}

/// The Edge Agent's browser build's `lua.eval` and `return`: the chunk's table, and `value`,
/// under `output` or else the node's name.
#[test]
fn lua_eval_and_return_give_their_values() {
    let out = load(
        r#"
nodes:
  - name: count
    action: lua.eval
    with:
      code: |
        local n = 0
        for _ in string.gmatch(state.text, "%S+") do n = n + 1 end
        return { words = n, short = n < 3 }
    output: counted
  - name: format_answer
    action: return
    with:
      value: { answer: "{{ state.counted.words }} words" }
"#,
    )
    .invoke(json!({ "text": "one two three" }))
    .unwrap()
    .done()
    .unwrap();
    assert_eq!(out["counted"], json!({ "words": 3, "short": false }));
    assert_eq!(out["format_answer"], json!({ "answer": "3 words" }));
    let p = problems("nodes:\n  - name: a\n    action: lua.eval\n    with: { code: \"return {{ state.x }}\" }\n  - name: b\n    action: lua.eval\n    with:\n      code: \"return {\"\n");
    assert!(p.iter().any(|m| m.starts_with("4: ") && m.contains("is a template")), "{p:?}");
    assert!(p.iter().any(|m| m.starts_with("8: ") && m.contains("Lua")), "{p:?}");
}

/// `code.execute` in a `tools:` list runs in a trusted file and answers "disabled" elsewhere,
/// as in every other position (`tests/python.rs`).
#[cfg(all(feature = "net", feature = "python"))]
#[test]
fn code_execute_as_a_tool_is_trusted_only_with_the_file() {
    let mock = support::mock::Mock::start();
    let text = format!(
        "settings:\n  llm: {{ api_base: \"{}\", api_key: sk-test, model: echo, max_retries: 0 }}\nnodes:\n  - name: think\n    uses: reason.react\n    with:\n      goal: \"{{{{ state.goal }}}}\"\n      tools: [code.execute]\n      max_steps: 1\n    output: r\n",
        mock.v1()
    );
    let goal = r#"{"thought": "run it", "action": "code.execute", "action_input": {"code": "result = 5"}}"#;
    let observed = |agent: &tea_yaml::Agent| -> String {
        let out = agent.invoke(json!({ "goal": goal })).unwrap().done().unwrap();
        assert_eq!(out["r"]["steps"][0]["action"], "code.execute", "{}", out["r"]);
        out["r"]["steps"][0]["observation"].as_str().unwrap().to_owned()
    };
    let trusted = observed(&load(&text));
    assert!(trusted.contains("\"return_value\":5"), "{trusted}");
    let untrusted = Engine::new().allow_net("127.0.0.1").load_str(&text).unwrap();
    assert!(untrusted.warnings().iter().any(|w| w.message().contains("a tool of `reason.react`")));
    let disabled = observed(&untrusted);
    assert!(disabled.contains("Code execution is disabled"), "{disabled}");
}
