//! `type: dynamic_parallel` (The Edge Agent's fan-out over a list known at run time): one send
//! per item on the engine's `SendTo` fan-out, merged in item order at the `fan_in` node, pauses
//! inside items answered by id, and a load error per bad field. The second half ports The Edge
//! Agent's own tests (`python/tests/test_yaml_dynamic_parallel.py`): its `parallel_results`
//! (`branch`, `success`, `state`, `error`, `timing_ms`), failing items collected rather than
//! failing the run, `fail_fast`, `max_concurrency`, and the `subgraph:` mode.

use serde_json::{json, Value};
use std::error::Error as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tea::{MemoryStore, ThreadId};
use tea_yaml::{Engine, LoadError};

const MAP: &str = r#"
name: map
state:
  log: { type: list, reducer: append }
  total: { type: number, reducer: sum }
nodes:
  - name: setup
    run: return { log = { "setup" } }
  - name: each
    type: dynamic_parallel
    items: "{{ state.words }}"
    item_var: word
    index_var: i
    fan_in: collect
    steps:
      - name: shout
        run: return { shouted = string.upper(state.word) }
      - name: count
        run: return { total = string.len(state.word), log = { state.i .. ":" .. state.shouted } }
  - name: collect
    fan_in: true
    run: |
      local out = {}
      for k, r in ipairs(state.parallel_results) do out[k] = r.state.shouted end
      return { joined = table.concat(out, ",") }
"#;

#[test]
fn each_item_runs_its_steps_and_the_results_meet_in_item_order() {
    let agent = Engine::new().load_str(MAP).unwrap();
    let words = ["alpha", "be", "gamma", "d", "epsilon", "zeta", "eta", "theta"];
    let done = agent.invoke(json!({ "words": words })).unwrap().done().unwrap();
    // Item order, whatever order the branches finished in.
    let upper: Vec<String> = words.iter().map(|w| w.to_uppercase()).collect();
    assert_eq!(done["joined"], json!(upper.join(",")));
    let mut log = vec![json!("setup")];
    log.extend(words.iter().enumerate().map(|(i, w)| json!(format!("{i}:{}", w.to_uppercase()))));
    assert_eq!(done["log"], Value::Array(log));
    assert_eq!(done["total"], json!(words.iter().map(|w| w.len()).sum::<usize>()));
    // Each item's own keys stay in its branch: they reach the fan-in as `parallel_results`.
    assert!(done.get("shouted").is_none() && done.get("word").is_none());
    assert_eq!(done["parallel_results"][2]["state"]["word"], json!("gamma"));
    assert_eq!(done["parallel_results"][2]["state"]["i"], json!(2));
    assert_eq!(done["parallel_results"][2]["branch"], json!("each[2]"));
    assert!(done["parallel_results"][2]["state"].get("__tea_item").is_none(), "the item's record is taken out");
}

#[test]
fn no_items_go_straight_to_the_fan_in_and_a_non_list_fails_the_node() {
    let agent = Engine::new().load_str(MAP).unwrap();
    let done = agent.invoke(json!({ "words": [] })).unwrap().done().unwrap();
    assert_eq!(done["log"], json!(["setup"]));
    assert_eq!(done["joined"], json!(""));
    let err = agent.invoke(json!({ "words": "alpha" })).unwrap_err();
    assert!(
        matches!(&err, tea::Error::NodeFailed { node, source } if node.as_str() == "each"
            && source.to_string().contains("`items` of node `each` must give a list, not a string")),
        "{err:?}"
    );
}

#[test]
fn action_mode_runs_one_action_per_item() {
    let agent = Engine::new()
        .action("test.len", |_: &tea_yaml::State, args: &Value| Ok(json!(args["text"].as_str().unwrap_or("").len())))
        .load_str(
            r#"
state:
  sizes: { type: list, reducer: append }
nodes:
  - name: measure
    type: dynamic_parallel
    items: "{{ state.texts }}"
    fan_in: done
    action:
      uses: test.len
      with: { text: "{{ state.item }}" }
      output: { sizes: "{{ state.index ~ ':' ~ result }}" }
  - name: done
    fan_in: true
"#,
        )
        .unwrap();
    let done = agent.invoke(json!({ "texts": ["a", "bbb", "cc"] })).unwrap().done().unwrap();
    assert_eq!(done["sizes"], json!(["0:1", "1:3", "2:2"]));
}

const ASK: &str = r#"
name: ask_each
state:
  answers: { type: list, reducer: append }
nodes:
  - name: each
    type: dynamic_parallel
    items: "{{ state.questions }}"
    item_var: q
    fan_in: collect
    steps:
      - name: work
        uses: test.count
      - name: ask
        type: interrupt
        message: "{{ state.q }}?"
        resume_key: reply
      - name: keep
        run: return { answers = { state.q .. "=" .. state.reply } }
  - name: collect
    fan_in: true
"#;

#[test]
fn a_pause_inside_an_item_is_answered_by_id_and_finished_items_do_not_run_again() {
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let agent = Engine::new()
        .action("test.count", move |_: &tea_yaml::State, _: &Value| {
            counter.fetch_add(1, Ordering::SeqCst);
            Ok(Value::Null)
        })
        .checkpointer(MemoryStore::new())
        .load_str(ASK)
        .unwrap();
    let thread = ThreadId::from("t1");
    let (_, resume) = agent
        .start(json!({ "questions": ["x", "y", "z"] }))
        .and_then(|call| agent.run(call.on(thread.clone())))
        .unwrap()
        .interrupted()
        .unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    let asked: Vec<(String, Value)> =
        resume.interrupts().iter().map(|i| (i.id().to_owned(), i.value().clone())).collect();
    assert_eq!(asked.len(), 3, "{asked:?}");
    assert_eq!(asked.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>(), vec![json!("x?"), json!("y?"), json!("z?")]);
    // Answer the second item only: the others stay paused.
    let (_, resume) = agent.resume(resume.answer_to(&asked[1].0, "yes")).unwrap().interrupted().unwrap();
    assert_eq!(resume.interrupts().len(), 2);
    let (_, resume) = agent.resume(resume.answer_to(&asked[2].0, "maybe")).unwrap().interrupted().unwrap();
    let done = agent.resume(resume.answer_to(&asked[0].0, "no")).unwrap().done().unwrap();
    // Merged in item order, not answer order; no item's work ran twice.
    assert_eq!(done["answers"], json!(["x=no", "y=yes", "z=maybe"]));
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    assert!(agent.state(&thread).unwrap().unwrap().next.is_empty());
}

fn problems(yaml: &str) -> Vec<(usize, usize, String)> {
    let err: LoadError = Engine::new().allow_read(".").load_str(yaml).expect_err("the file should not load");
    err.problems().iter().map(|p| (p.line(), p.column(), p.message().to_owned())).collect()
}

fn has(problems: &[(usize, usize, String)], line: usize, text: &str) {
    assert!(
        problems.iter().any(|(l, _, m)| *l == line && m.contains(text)),
        "no problem at line {line} containing {text:?} in:\n{problems:#?}"
    );
}

/// A `dynamic_parallel` node (line 3) with `extra` inserted after its `type`, and a fan-in.
fn with(fields: &str) -> String {
    format!("nodes:\n  - name: each\n    type: dynamic_parallel\n{fields}  - name: collect\n    fan_in: true\n")
}

#[test]
fn each_bad_field_of_a_dynamic_parallel_node_is_a_load_error_at_its_line() {
    let steps = "    steps:\n      - name: s\n        run: return {}\n";
    // No items, no fan_in, no work.
    let p = problems(&with(""));
    has(&p, 2, "needs `items`");
    has(&p, 2, "needs `fan_in: NODE`");
    has(&p, 2, "needs one of `steps:`, `action:` or `subgraph:`");
    // items: not a string; a template that does not parse.
    has(
        &problems(&with(&format!("    items: 3\n    fan_in: collect\n{steps}"))),
        4,
        "`items` of node `each` must be an expression",
    );
    has(
        &problems(&with(&format!("    items: \"{{{{ state.( }}}}\"\n    fan_in: collect\n{steps}"))),
        4,
        "does not parse",
    );
    // item_var / index_var: names, and not the same.
    has(
        &problems(&with(&format!("    items: x\n    item_var: a-b\n    fan_in: collect\n{steps}"))),
        5,
        "must be a name",
    );
    has(
        &problems(&with(&format!("    items: x\n    item_var: i\n    index_var: i\n    fan_in: collect\n{steps}"))),
        6,
        "are both `i`",
    );
    // fan_in: unknown, a step, not a string.
    has(
        &problems(&with(&format!("    items: x\n    fan_in: colect\n{steps}"))),
        5,
        "names `colect`, which is not a node",
    );
    has(
        &problems(&with(&format!("    items: x\n    fan_in: each.s\n{steps}"))),
        5,
        "a step of a `dynamic_parallel` node",
    );
    has(
        &problems(&with(&format!("    items: x\n    fan_in: true\n{steps}"))),
        5,
        "names the node where the items meet",
    );
    // steps and action together; an empty or non-list `steps`; a bad step; a bad action.
    has(
        &problems(&with(&format!("    items: x\n    fan_in: collect\n{steps}    action: {{ uses: data.set }}\n"))),
        9,
        "has `steps` and `action`: what each item runs is one of them",
    );
    has(
        &problems(&with("    items: x\n    fan_in: collect\n    action: { uses: data.set }\n    subgraph: a.yaml\n")),
        7,
        "has `action` and `subgraph`",
    );
    has(&problems(&with("    items: x\n    fan_in: collect\n    steps: []\n")), 6, "is empty");
    has(&problems(&with("    items: x\n    fan_in: collect\n    steps: 3\n")), 6, "must be a list of nodes");
    has(
        &problems(&with("    items: x\n    fan_in: collect\n    steps:\n      - name: s\n        run: return {}\n        goto: collect\n")),
        7,
        "runs in order",
    );
    has(&problems(&with("    items: x\n    fan_in: collect\n    action: { use: data.set }\n")), 6, "unknown key `use`");
    has(&problems(&with("    items: x\n    fan_in: collect\n    action: { with: {} }\n")), 6, "needs `uses`");
    has(
        &problems(&with("    items: x\n    fan_in: collect\n    action: { uses: nope.nope }\n")),
        6,
        "unknown action `nope.nope`",
    );
    // max_concurrency, fail_fast and parallel_config: their values.
    for (key, value, text) in [
        ("max_concurrency", "0", "`max_concurrency` of node `each` must be a positive integer"),
        ("max_concurrency", "-2", "must be a positive integer (or a `{{ expression }}` giving one), not `-2`"),
        ("max_concurrency", "two", "must be a positive integer"),
        ("max_concurrency", "\"{{ state.( }}\"", "does not parse"),
        ("fail_fast", "yes", "`fail_fast` of node `each` must be true or false"),
        ("parallel_config", "{ max_concurrency: 0 }", "must be a positive integer"),
        ("parallel_config", "{ fail_fast: 1 }", "must be true or false"),
        ("parallel_config", "{ max_concurency: 2 }", "unknown key `max_concurency`"),
        ("parallel_config", "3", "`parallel_config` of node `each`"),
        ("input", "{ a: 1 }", "`input` of node `each` goes with `subgraph:`"),
    ] {
        has(&problems(&with(&format!("    items: x\n    fan_in: collect\n    {key}: {value}\n{steps}"))), 6, text);
    }
    // Keys The Edge Agent does not take on it either, refused rather than ignored (and an
    // `output:` that would overwrite the results).
    for (key, value, text) in [
        ("output", "parallel_results", "a key the engine writes itself"),
        ("run", "return {}", "does not go on a `dynamic_parallel` node"),
        ("goto", "collect", "does not go on a `dynamic_parallel` node"),
        ("file", "a.yaml", "does not go on a `dynamic_parallel` node"),
        ("max_concurency", "2", "unknown key `max_concurency`"),
    ] {
        has(&problems(&with(&format!("    items: x\n    fan_in: collect\n    {key}: {value}\n{steps}"))), 6, text);
    }
    // subgraph: a file that cannot be read, at the line of `subgraph:`.
    has(
        &problems(&with("    items: x\n    fan_in: collect\n    subgraph: nowhere/child.yaml\n")),
        6,
        "cannot read the agent file",
    );
    // Its keys on another node.
    has(
        &problems("nodes:\n  - name: a\n    items: x\n    run: return {}\n"),
        3,
        "belongs to `type: dynamic_parallel` nodes",
    );
    for key in ["max_concurrency: 2", "fail_fast: true", "parallel_config: {}", "subgraph: a.yaml"] {
        has(
            &problems(&format!("nodes:\n  - name: a\n    {key}\n    run: return {{}}\n")),
            3,
            "belongs to `type: dynamic_parallel` nodes",
        );
    }
}

#[test]
fn a_pause_inside_an_item_needs_a_checkpointer() {
    let err =
        Engine::new().action("test.count", |_: &tea_yaml::State, _: &Value| Ok(Value::Null)).load_str(ASK).unwrap_err();
    assert!(err.to_string().contains("a checkpointer is required"), "{err}");
}

// ---- The Edge Agent's own cases (python/tests/test_yaml_dynamic_parallel.py), ported. ----

/// An agent of one `dynamic_parallel` node `process` (its other fields `fields`, indented by
/// four) and a fan-in `collect` that keeps `parallel_results`, as The Edge Agent's tests write.
fn tea_case(fields: &str) -> String {
    format!(
        "nodes:\n  - name: process\n    type: dynamic_parallel\n    fan_in: collect\n{fields}  - name: collect\n    fan_in: true\n    run: return {{}}\nedges:\n  - {{ from: __start__, to: process }}\n  - {{ from: collect, to: __end__ }}\n"
    )
}

fn results(done: &tea_yaml::State) -> &Vec<Value> {
    done["parallel_results"].as_array().expect("parallel_results is a list")
}

fn successes(done: &tea_yaml::State, key: &str) -> Vec<Value> {
    results(done).iter().filter(|r| r["success"] == json!(true)).map(|r| r["state"][key].clone()).collect()
}

#[test]
fn items_give_one_result_each_and_none_or_empty_give_none() {
    let agent = Engine::new()
        .load_str(&tea_case(
            "    items: \"{{ state.my_items }}\"\n    steps:\n      - run: return { processed = state.item }\n",
        ))
        .unwrap();
    let done = agent.invoke(json!({ "my_items": ["a", "b", "c"] })).unwrap().done().unwrap();
    assert_eq!(results(&done).len(), 3);
    assert_eq!(successes(&done, "processed"), vec![json!("a"), json!("b"), json!("c")]);
    for empty in [json!([]), Value::Null] {
        let done = agent.invoke(json!({ "my_items": empty })).unwrap().done().unwrap();
        assert_eq!(done["parallel_results"], json!([]), "{empty}");
    }
    // A number or a string is not a list of items: the node fails (The Edge Agent: an error
    // event "must return an iterable").
    for bad in [json!(42), json!("not a list")] {
        let err = agent.invoke(json!({ "my_items": bad })).unwrap_err();
        assert!(err.source().unwrap().to_string().contains("must give a list"), "{err:?}");
    }
}

#[test]
fn the_item_and_its_index_are_state_keys_named_by_item_var_and_index_var() {
    let default = tea_case(
        "    items: \"{{ state.urls }}\"\n    steps:\n      - run: return { result = 'idx=' .. state.index .. ',val=' .. state.item }\n",
    );
    let done = Engine::new().load_str(&default).unwrap().invoke(json!({ "urls": ["url1", "url2"] })).unwrap();
    let done = done.done().unwrap();
    assert_eq!(successes(&done, "result"), vec![json!("idx=0,val=url1"), json!("idx=1,val=url2")]);
    let custom = tea_case(
        "    items: \"{{ state.docs }}\"\n    item_var: doc\n    index_var: doc_idx\n    steps:\n      - run: return { result = 'doc=' .. state.doc .. ',idx=' .. state.doc_idx }\n",
    );
    let done = Engine::new().load_str(&custom).unwrap().invoke(json!({ "docs": ["doc_a", "doc_b"] })).unwrap();
    let done = done.done().unwrap();
    assert_eq!(successes(&done, "result"), vec![json!("doc=doc_a,idx=0"), json!("doc=doc_b,idx=1")]);
    // The item is a state key, not a bare template variable (as in The Edge Agent).
    assert_eq!(results(&done)[1]["state"]["doc"], json!("doc_b"));
    assert!(done.get("doc").is_none(), "the item stays in its branch");
}

#[test]
fn action_mode_runs_per_item_with_its_with_and_output() {
    let agent = Engine::new()
        .action("test.process", |_: &tea_yaml::State, args: &Value| Ok(json!({ "processed": args["value"] })))
        .action("test.double", |state: &tea_yaml::State, _: &Value| Ok(json!(state["item"].as_i64().unwrap() * 2)))
        .load_str(&tea_case(
            "    items: \"{{ state.my_values }}\"\n    action:\n      uses: test.process\n      with: { value: \"value_{{ state.item }}_processed\" }\n",
        ))
        .unwrap();
    let done = agent.invoke(json!({ "my_values": [1, 2, 3] })).unwrap().done().unwrap();
    assert!(results(&done).iter().all(|r| r["success"] == json!(true)), "{done:?}");
    assert_eq!(
        successes(&done, "processed"),
        vec![json!("value_1_processed"), json!("value_2_processed"), json!("value_3_processed")]
    );
    let agent = Engine::new()
        .action("test.double", |state: &tea_yaml::State, _: &Value| Ok(json!(state["item"].as_i64().unwrap_or(0) * 2)))
        .load_str(&tea_case(
            "    items: \"{{ state.nums }}\"\n    action: { uses: test.double, with: {}, output: doubled }\n",
        ))
        .unwrap();
    let done = agent.invoke(json!({ "nums": [1, 2, 3] })).unwrap().done().unwrap();
    assert_eq!(successes(&done, "doubled"), vec![json!(2), json!(4), json!(6)]);
}

#[test]
fn steps_run_in_order_per_item_and_unnamed_steps_are_named_step_k() {
    let agent = Engine::new()
        .load_str(&tea_case(
            "    items: \"{{ state.nums }}\"\n    steps:\n      - run: return { doubled = state.item * 2 }\n      - name: add_ten\n        run: return { result = state.doubled + 10 }\n",
        ))
        .unwrap();
    let done = agent.invoke(json!({ "nums": [5, 10] })).unwrap().done().unwrap();
    assert_eq!(successes(&done, "result"), vec![json!(20), json!(30)]);
    let drawn = agent.mermaid();
    assert!(drawn.contains("[\"process.step_0\"]") && drawn.contains("[\"process.add_ten\"]"), "{drawn}");
}

#[test]
fn results_have_the_edge_agents_fields_in_item_order() {
    let agent = Engine::new()
        .action("test.process", |state: &tea_yaml::State, _: &Value| Ok(json!({ "value": state["item"] })))
        .load_str(&tea_case("    items: \"{{ state.my_items }}\"\n    action: { uses: test.process, with: {} }\n"))
        .unwrap();
    let done = agent.invoke(json!({ "my_items": ["first", "second", "third"] })).unwrap().done().unwrap();
    let branches: Vec<&Value> = results(&done).iter().map(|r| &r["branch"]).collect();
    assert_eq!(branches, [&json!("process[0]"), &json!("process[1]"), &json!("process[2]")]);
    for (i, r) in results(&done).iter().enumerate() {
        let keys: Vec<&String> = r.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["branch", "error", "state", "success", "timing_ms"], "{r}");
        assert_eq!(r["success"], json!(true));
        assert_eq!(r["error"], Value::Null);
        assert!(r["timing_ms"].is_u64(), "{r}");
        assert_eq!(r["state"]["index"], json!(i));
        assert_eq!(r["state"]["value"], r["state"]["item"]);
    }
}

#[test]
fn a_failing_item_is_a_failed_result_and_the_others_still_run() {
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let agent = Engine::new()
        .action("test.failing", move |state: &tea_yaml::State, _: &Value| {
            counter.fetch_add(1, Ordering::SeqCst);
            if state["item"] == json!(1) {
                return Err("Simulated failure".into());
            }
            Ok(json!({ "processed": state["item"] }))
        })
        .load_str(&tea_case(
            "    items: \"{{ state.my_items }}\"\n    parallel_config: { fail_fast: false }\n    action: { uses: test.failing, with: {} }\n",
        ))
        .unwrap();
    let done = agent.invoke(json!({ "my_items": [0, 1, 2] })).unwrap().done().unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    let r = results(&done);
    assert_eq!(r.len(), 3);
    assert_eq!(successes(&done, "processed"), vec![json!(0), json!(2)]);
    assert_eq!(r[1]["success"], json!(false));
    let error = r[1]["error"].as_str().unwrap();
    assert!(error.contains("process.action") && error.contains("Simulated failure"), "{error}");
    // A failed item's state is its item and index only.
    assert_eq!(r[1]["state"], json!({ "item": 1, "index": 1 }));
}

#[test]
fn a_failing_step_skips_the_items_later_steps() {
    let agent = Engine::new()
        .load_str(&tea_case(
            "    items: \"{{ state.xs }}\"\n    steps:\n      - name: check\n        run: |\n          if state.item < 0 then error('negative ' .. state.item) end\n          return { checked = true }\n      - name: after\n        run: return { after = true }\n",
        ))
        .unwrap();
    let done = agent.invoke(json!({ "xs": [1, -1] })).unwrap().done().unwrap();
    let r = results(&done);
    assert_eq!(r[0]["state"]["after"], json!(true));
    assert_eq!(r[1]["success"], json!(false));
    assert!(r[1]["error"].as_str().unwrap().contains("negative -1"), "{}", r[1]);
    assert_eq!(r[1]["state"], json!({ "item": -1, "index": 1 }));
}

#[test]
fn fail_fast_cancels_the_items_that_have_not_started() {
    // One item at a time, every item failing: the first to run fails, and with `fail_fast` the
    // others are cancelled without running (top-level and `parallel_config` forms).
    for fields in [
        "    fail_fast: true\n    max_concurrency: 1\n",
        "    parallel_config: { fail_fast: true, max_concurrency: 1 }\n",
    ] {
        let runs = Arc::new(AtomicUsize::new(0));
        let counter = runs.clone();
        let agent = Engine::new()
            .action("test.boom", move |_: &tea_yaml::State, _: &Value| {
                counter.fetch_add(1, Ordering::SeqCst);
                Err("boom".into())
            })
            .load_str(&tea_case(&format!(
                "    items: \"{{{{ state.my_items }}}}\"\n{fields}    action: {{ uses: test.boom, with: {{}} }}\n"
            )))
            .unwrap();
        let done = agent.invoke(json!({ "my_items": [0, 1, 2, 3, 4] })).unwrap().done().unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 1, "{fields}");
        let r = results(&done);
        assert_eq!(r.len(), 5);
        assert!(r.iter().all(|r| r["success"] == json!(false)));
        let cancelled: Vec<&Value> = r.iter().filter(|r| r["error"] == json!("Cancelled due to fail_fast")).collect();
        assert_eq!(cancelled.len(), 4, "{done:?}");
        assert!(cancelled.iter().all(|r| r["state"] == json!({})));
    }
    // Without fail_fast every item runs.
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let agent = Engine::new()
        .action("test.boom", move |_: &tea_yaml::State, _: &Value| {
            counter.fetch_add(1, Ordering::SeqCst);
            Err("boom".into())
        })
        .load_str(&tea_case(
            "    items: \"{{ state.my_items }}\"\n    max_concurrency: 1\n    action: { uses: test.boom, with: {} }\n",
        ))
        .unwrap();
    let done = agent.invoke(json!({ "my_items": [0, 1, 2, 3, 4] })).unwrap().done().unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 5);
    assert!(results(&done).iter().all(|r| r["error"] == json!("node `process.action`: boom")), "{done:?}");
}

/// Runs 6 items of 50 ms each under `fields`; the most that ran at once.
fn most_at_once(fields: &str, input: Value) -> Result<usize, tea::Error> {
    let now = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let (n, m) = (now.clone(), most.clone());
    let agent = Engine::new()
        .action("test.concurrent", move |state: &tea_yaml::State, _: &Value| {
            let running = n.fetch_add(1, Ordering::SeqCst) + 1;
            m.fetch_max(running, Ordering::SeqCst);
            std::thread::sleep(std::time::Duration::from_millis(50));
            n.fetch_sub(1, Ordering::SeqCst);
            Ok(json!({ "processed": state["item"] }))
        })
        .load_str(&tea_case(&format!(
            "    items: \"{{{{ state.my_items }}}}\"\n{fields}    action: {{ uses: test.concurrent, with: {{}} }}\n"
        )))
        .unwrap();
    let done = agent.invoke(input)?.done().unwrap();
    assert_eq!(successes(&done, "processed").len(), 6);
    Ok(most.load(Ordering::SeqCst))
}

#[test]
fn max_concurrency_bounds_the_items_running_at_once() {
    let items = json!({ "my_items": [0, 1, 2, 3, 4, 5], "limit": 1 });
    // Without a limit, items that block run side by side (the engine gives them threads).
    assert!(most_at_once("", items.clone()).unwrap() > 2);
    assert!(most_at_once("    parallel_config: { max_concurrency: 2 }\n", items.clone()).unwrap() <= 2);
    assert!(most_at_once("    max_concurrency: 2\n", items.clone()).unwrap() <= 2);
    // The node's own key wins over `parallel_config`'s.
    assert_eq!(
        most_at_once("    max_concurrency: 1\n    parallel_config: { max_concurrency: 4 }\n", items.clone()).unwrap(),
        1
    );
    // A template, evaluated when the node runs; a value that is not a positive integer fails it.
    assert_eq!(most_at_once("    max_concurrency: \"{{ state.limit }}\"\n", items.clone()).unwrap(), 1);
    let bad = json!({ "my_items": [0, 1, 2, 3, 4, 5], "limit": 0 });
    let err = most_at_once("    max_concurrency: \"{{ state.limit }}\"\n", bad).unwrap_err();
    assert!(err.source().unwrap().to_string().contains("must give a positive integer, not 0"), "{err:?}");
}

#[test]
fn the_fan_in_aggregates_results_in_lua() {
    let agent = Engine::new()
        .load_str(
            r#"
nodes:
  - name: transform_all
    type: dynamic_parallel
    items: "{{ state.numbers }}"
    fan_in: aggregate
    steps:
      - name: double
        run: return { doubled = state.item * 2 }
      - name: stringify
        run: |
          return { result = "Number: " .. state.doubled }
  - name: aggregate
    fan_in: true
    run: |
      local out = {}
      for _, r in ipairs(state.parallel_results) do
        if r.success then out[#out + 1] = r.state.result end
      end
      return { all_results = out }
"#,
        )
        .unwrap();
    let done = agent.invoke(json!({ "numbers": [1, 2, 3, 4, 5] })).unwrap().done().unwrap();
    let all: Vec<String> = (1..=5).map(|n| format!("Number: {}", n * 2)).collect();
    assert_eq!(done["all_results"], json!(all));
}

#[test]
fn items_may_be_objects_and_each_branch_has_its_own_state() {
    let agent = Engine::new()
        .load_str(&tea_case(
            "    items: \"{{ state.users }}\"\n    steps:\n      - run: |\n          local user = state.item\n          return { greeting = 'Hello, ' .. user.name .. '! You are ' .. user.age .. ' years old.', modified = user.age * 10 }\n",
        ))
        .unwrap();
    let users = json!([{ "name": "Alice", "age": 30 }, { "name": "Bob", "age": 25 }]);
    let done = agent.invoke(json!({ "users": users })).unwrap().done().unwrap();
    assert_eq!(
        successes(&done, "greeting"),
        vec![json!("Hello, Alice! You are 30 years old."), json!("Hello, Bob! You are 25 years old.")]
    );
    assert_eq!(successes(&done, "modified"), vec![json!(300), json!(250)]);
    assert!(done.get("modified").is_none());
}

#[test]
fn subgraph_mode_runs_the_child_file_per_item_from_its_input_mapping() {
    let dir = std::env::temp_dir().join(format!("tea-yaml-dynamic-subgraph-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("researcher.yaml"),
        "name: source-researcher\nnodes:\n  - name: analyze\n    run: |\n      return { analysis = state.name .. ': ' .. state.url }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("main.yaml"),
        tea_case("    items: \"{{ state.sources }}\"\n    subgraph: researcher.yaml\n    input:\n      url: \"{{ state.item.url }}\"\n      name: \"{{ state.item.name }}\"\n"),
    )
    .unwrap();
    let agent = Engine::new().load_file(dir.join("main.yaml")).unwrap();
    let sources = json!([
        { "name": "Wikipedia", "url": "https://wikipedia.org" },
        { "name": "Google", "url": "https://google.com" }
    ]);
    let done = agent.invoke(json!({ "sources": sources })).unwrap().done().unwrap();
    assert_eq!(
        successes(&done, "analysis"),
        vec![json!("Wikipedia: https://wikipedia.org"), json!("Google: https://google.com")]
    );
    // Without `input:` the child starts on an empty state (The Edge Agent's `input` defaults
    // to `{}`), not on the item's.
    std::fs::write(
        dir.join("blank.yaml"),
        "nodes:\n  - name: look\n    run: return { had_item = state.item ~= nil }\n",
    )
    .unwrap();
    std::fs::write(dir.join("blank_main.yaml"), tea_case("    items: \"{{ state.xs }}\"\n    subgraph: blank.yaml\n"))
        .unwrap();
    let blank = Engine::new().load_file(dir.join("blank_main.yaml")).unwrap();
    let done = blank.invoke(json!({ "xs": [1, 2] })).unwrap().done().unwrap();
    assert_eq!(successes(&done, "had_item"), vec![json!(false), json!(false)]);
    // A child that fails is its item's failure.
    let err = agent.invoke(json!({ "sources": [{ "url": "x" }] })).unwrap().done().unwrap();
    assert_eq!(results(&err)[0]["success"], json!(false), "{err:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_failed_item_stays_failed_across_a_pause_of_another_item() {
    let agent = Engine::new()
        .checkpointer(MemoryStore::new())
        .load_str(&tea_case(
            "    items: \"{{ state.qs }}\"\n    steps:\n      - name: check\n        run: |\n          if state.item == 'bad' then error('refused ' .. state.item) end\n          return {}\n      - name: ask\n        type: interrupt\n        message: \"{{ state.item }}?\"\n        resume_key: reply\n",
        ))
        .unwrap();
    let (_, resume) = agent
        .start(json!({ "qs": ["good", "bad"] }))
        .and_then(|call| agent.run(call.on(ThreadId::from("t"))))
        .unwrap()
        .interrupted()
        .unwrap();
    // The failed item skipped its question: only the good one asks.
    let asked: Vec<Value> = resume.interrupts().iter().map(|i| i.value().clone()).collect();
    assert_eq!(asked, [json!("good?")]);
    let done = agent.resume(resume.answer("yes")).unwrap().done().unwrap();
    let r = results(&done);
    assert_eq!(r[0]["state"]["reply"], json!("yes"));
    assert_eq!(r[1]["success"], json!(false));
    assert!(r[1]["error"].as_str().unwrap().contains("refused bad"), "{done:?}");
}
