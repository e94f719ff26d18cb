//! Parallel branches: both edge forms, `parallel_results` at the fan-in, merges of declared
//! keys in declared order, undeclared writes kept in their branch, conflicts, pauses in a branch.

use serde_json::{json, Value};
use tea::Error;
use tea_yaml::Engine;

const RESEARCH: &str = r#"
state:
  sources: { type: list, reducer: append }
  hits: { type: int, reducer: sum }
nodes:
  - name: plan
    run: return { topic = "rust" }
  - name: web
    run: return { sources = { "web:" .. state.topic }, hits = 2, result = "web done" }
  - name: papers
    run: return { sources = { "papers:" .. state.topic }, hits = 3, result = "papers done" }
  - name: merge
    run: |
      local seen = {}
      for i, r in ipairs(state.parallel_results) do seen[i] = r.result end
      return { summary = table.concat(seen, ", ") }
edges:
  - { from: plan, to: web, type: parallel, fan_in: merge }
  - { from: plan, to: papers, type: parallel, fan_in: merge }
  - { from: merge, to: __end__ }
"#;

#[test]
fn branches_merge_declared_keys_in_order_and_the_fan_in_sees_every_branch() {
    let out = Engine::new().load_str(RESEARCH).unwrap().invoke(json!({})).unwrap().done().unwrap();
    assert_eq!(out["sources"], json!(["web:rust", "papers:rust"]));
    assert_eq!(out["hits"], 5);
    // Both branches wrote the undeclared `result`: no conflict, it stayed in each branch.
    assert_eq!(out.get("result"), None);
    assert_eq!(out["summary"], "web done, papers done");
    let results = out["parallel_results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["result"], "web done");
    assert_eq!(results[1]["sources"], json!(["papers:rust"]), "a branch's own state");
}

#[test]
fn the_list_form_finds_its_fan_in_and_branches_may_run_several_nodes() {
    let yaml = r#"
state:
  log: { type: list, reducer: append }
nodes:
  - name: plan
    run: return { log = { "plan" } }
  - name: a1
    run: return { log = { "a1" } }
  - name: a2
    run: return { log = { "a2" } }
  - name: b
    run: return { log = { "b" } }
  - name: join
    run: |
      return { log = { "join saw " .. #state.parallel_results } }
edges:
  - { from: plan, parallel: [a1, b] }
  - { from: a1, to: a2 }
  - { from: a2, to: join }
  - { from: b, to: join }
"#;
    let out = Engine::new().load_str(yaml).unwrap().invoke(json!({})).unwrap().done().unwrap();
    assert_eq!(out["log"], json!(["plan", "a1", "a2", "b", "join saw 2"]));
}

#[test]
fn an_edge_to_a_list_with_parallel_true_fans_out_to_each() {
    // The Edge Agent's `to: [a, b, c]` with `parallel: true` (its stream_broadcast example).
    let yaml = r#"
state:
  log: { type: list, reducer: append }
nodes:
  - name: source
    run: return { log = { "source" } }
  - name: a
    run: return { log = { "a" } }
  - name: b
    run: return { log = { "b" } }
  - name: join
    run: |
      return { log = { "join saw " .. #state.parallel_results } }
edges:
  - from: __start__
    to: source
  - from: source
    to: [a, b]
    parallel: true
    fan_in: join
  - from: join
    to: __end__
"#;
    let out = Engine::new().load_str(yaml).unwrap().invoke(json!({})).unwrap().done().unwrap();
    assert_eq!(out["log"], json!(["source", "a", "b", "join saw 2"]));
    let err = Engine::new().load_str(&yaml.replace("[a, b]", "[a, bb]")).unwrap_err().to_string();
    assert!(err.contains("a parallel branch names `bb`, which is not a node"), "{err}");
}

#[test]
fn two_branches_replacing_a_declared_key_conflict() {
    let yaml = r#"
state:
  owner: str
nodes:
  - name: plan
    run: return {}
  - name: left
    run: return { owner = "left" }
  - name: right
    run: return { owner = "right" }
  - name: join
    run: return {}
edges:
  - { from: plan, parallel: [left, right], fan_in: join }
"#;
    match Engine::new().load_str(yaml).unwrap().invoke(json!({})).unwrap_err() {
        Error::ConflictingWrites { field, branches } => {
            assert_eq!(field, "owner");
            assert_eq!(branches, ["left", "right"]);
        }
        other => panic!("expected ConflictingWrites, got {other:?}"),
    }
}

#[test]
fn a_branch_that_fails_fails_the_run_with_its_node() {
    let yaml = r#"
nodes:
  - name: plan
    run: return {}
  - name: ok
    run: return {}
  - name: bad
    run: error("no luck")
  - name: join
    run: return {}
edges:
  - { from: plan, parallel: [ok, bad], fan_in: join }
"#;
    match Engine::new().load_str(yaml).unwrap().invoke(json!({})).unwrap_err() {
        Error::NodeFailed { node, source } => {
            assert_eq!(node, "bad");
            assert!(source.to_string().contains("no luck"), "{source}");
        }
        other => panic!("expected NodeFailed, got {other:?}"),
    }
}

#[test]
fn pauses_in_branches_are_answered_by_id_and_finished_branches_do_not_run_again() {
    let yaml = r#"
state:
  log: { type: list, reducer: append }
config: { checkpointer: memory }
nodes:
  - name: plan
    run: return {}
  - name: ask_a
    type: interrupt
    message: "A?"
    resume_key: a
  - name: ask_b
    type: interrupt
    message: "B?"
    resume_key: b
  - name: quick
    run: return { log = { "quick" } }
  - name: join
    run: |
      local answers = {}
      for i, r in ipairs(state.parallel_results) do answers[i] = tostring(r.a or r.b or "-") end
      return { log = { "join " .. table.concat(answers, ",") } }
edges:
  - { from: plan, parallel: [ask_a, ask_b, quick], fan_in: join }
"#;
    let agent = Engine::new().load_str(yaml).unwrap();
    let (_, resume) = agent.invoke(json!({})).unwrap().interrupted().unwrap();
    let ids: Vec<(String, Value)> =
        resume.interrupts().iter().map(|i| (i.id().to_owned(), i.value().clone())).collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert_eq!(ids[0].1, "A?");
    let (id_a, id_b) = (ids[0].0.clone(), ids[1].0.clone());
    let (_, resume) = agent.resume(resume.answer_to(id_a, "yes")).unwrap().interrupted().unwrap();
    let done = agent.resume(resume.answer_to(id_b, "no")).unwrap().done().unwrap();
    assert_eq!(done["log"], json!(["quick", "join yes,no,-"]));
}

#[test]
fn a_breakpoint_before_the_fan_in_shows_parallel_results_in_the_paused_state() {
    // As The Edge Agent's engines show it (and tea did): paused before the fan-in, the state
    // holds the branches' results the fan-in will read.
    let check = |agent: &tea_yaml::Agent| {
        let thread = tea::ThreadId::from("fan-in-pause");
        let (state, resume) =
            agent.start(json!({})).and_then(|call| agent.run(call.on(thread.clone()))).unwrap().interrupted().unwrap();
        assert_eq!(resume.node().as_str(), "merge");
        let results = state["parallel_results"].as_array().unwrap_or_else(|| panic!("no parallel_results: {state:?}"));
        assert_eq!(results.len(), 2);
        assert_eq!(results[0]["result"], "web done");
        assert_eq!(results[1]["sources"], json!(["papers:rust"]), "a branch's own state");
        // Declared keys merged already; undeclared branch writes only in the results.
        assert_eq!(state["sources"], json!(["web:rust", "papers:rust"]));
        assert_eq!(state.get("result"), None);
        // The thread's snapshot shows the same.
        let snapshot = agent.state(&thread).unwrap().unwrap();
        assert_eq!(snapshot.state["parallel_results"], state["parallel_results"]);
        // So does a stream's pause event.
        let paused = agent
            .run_stream(agent.start(json!({})).unwrap().on("fan-in-stream"))
            .filter_map(Result::ok)
            .find_map(|event| match event {
                tea::Event::Interrupted { state, .. } => Some(state),
                _ => None,
            })
            .unwrap();
        assert_eq!(paused["parallel_results"], state["parallel_results"]);
        // The fan-in then runs on the same results, once.
        let done = agent.resume(resume).unwrap().done().unwrap();
        assert_eq!(done["summary"], "web done, papers done");
        assert_eq!(done["parallel_results"], state["parallel_results"]);
        assert_eq!(done["sources"], json!(["web:rust", "papers:rust"]));
    };
    let in_file =
        RESEARCH.replacen("nodes:", "config:\n  checkpointer: memory\n  interrupt_before: [merge]\nnodes:", 1);
    check(&Engine::new().load_str(&in_file).unwrap());
    let by_engine = RESEARCH.replacen("nodes:", "config:\n  checkpointer: memory\nnodes:", 1);
    check(&Engine::new().interrupt_before(["merge"]).load_str(&by_engine).unwrap());
}

#[test]
fn a_breakpoint_before_a_dynamic_parallel_fan_in_shows_its_results() {
    let yaml = r#"
state:
  log: { type: list, reducer: append }
config:
  checkpointer: memory
  interrupt_before: [collect]
nodes:
  - name: each
    type: dynamic_parallel
    items: "{{ state.words }}"
    item_var: word
    fan_in: collect
    output: shouts
    steps:
      - name: shout
        run: return { shouted = string.upper(state.word), log = { state.word } }
  - name: collect
    fan_in: true
    run: |
      local out = {}
      for k, r in ipairs(state.parallel_results) do out[k] = r.state.shouted end
      return { joined = table.concat(out, ",") }
"#;
    let agent = Engine::new().load_str(yaml).unwrap();
    let (state, resume) = agent.invoke(json!({ "words": ["a", "b"] })).unwrap().interrupted().unwrap();
    assert_eq!(resume.node().as_str(), "collect");
    let results = state["parallel_results"].as_array().unwrap_or_else(|| panic!("no parallel_results: {state:?}"));
    assert_eq!(results.len(), 2);
    assert_eq!(results[1]["state"]["shouted"], "B");
    assert_eq!(results[1]["branch"], "each[1]");
    assert_eq!(state["shouts"], state["parallel_results"], "the node's output: key holds them too");
    assert_eq!(state["log"], json!(["a", "b"]));
    let done = agent.resume(resume).unwrap().done().unwrap();
    assert_eq!(done["joined"], "A,B");
    assert_eq!(done["parallel_results"], state["parallel_results"]);
}

/// `RESEARCH` whose branches work a little (a few milliseconds of Lua): past a fan-out's first
/// 100 µs, whose finished branches are left to its end with or without a group commit.
fn slow_research() -> String {
    RESEARCH
        .replace(
            "run: return { sources = { \"web:\"",
            "run: |\n      for i = 1, 200000 do end\n      return { sources = { \"web:\"",
        )
        .replace(
            "run: return { sources = { \"papers:\"",
            "run: |\n      for i = 1, 200000 do end\n      return { sources = { \"papers:\"",
        )
}

#[test]
fn a_group_commit_given_before_the_store_writes_cheap_branches_with_the_join() {
    // `tea serve` gives the window first, then the store: both orders keep it.
    let research = slow_research();
    assert_ne!(research, RESEARCH);
    let history = |agent: tea_yaml::Agent, thread: &str| {
        let call = agent.start(json!({})).unwrap().on(thread);
        let out = agent.run(call).unwrap().done().unwrap();
        assert_eq!(out["summary"], "web done, papers done");
        agent.history(&tea::ThreadId::from(thread)).unwrap()
    };
    let each = history(Engine::new().load_str(&research).unwrap().with_checkpointer(tea::MemoryStore::new()), "each");
    let agent = Engine::new()
        .load_str(&research)
        .unwrap()
        .with_group_commit(std::time::Duration::from_secs(60))
        .with_checkpointer(tea::MemoryStore::new())
        .with_lease(std::time::Duration::from_secs(30));
    let grouped = history(agent, "grouped");
    // Without a window each branch's end is written before the join's step (the two in one
    // write, when the second ends before the first is written); with one, neither is.
    let finished =
        |h: &[tea::Snapshot<tea_yaml::State>]| h.iter().filter(|s| s.branches.iter().any(|b| b.done)).count();
    assert!(matches!(finished(&each), 1 | 2), "{each:#?}");
    assert_eq!(finished(&grouped), 0, "{grouped:#?}");
    assert_eq!(grouped.len() + finished(&each), each.len());
}
