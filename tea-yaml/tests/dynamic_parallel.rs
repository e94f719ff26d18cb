//! `type: dynamic_parallel` (The Edge Agent's fan-out over a list known at run time): one send
//! per item on the engine's `Send` fan-out, merged in item order at the `fan_in` node, pauses
//! inside items answered by id, and a load error per bad field.

use serde_json::{json, Value};
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
      for k, r in ipairs(state.parallel_results) do out[k] = r.shouted end
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
    assert_eq!(done["parallel_results"][2]["word"], json!("gamma"));
    assert_eq!(done["parallel_results"][2]["i"], json!(2));
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
    let (_, resume) =
        agent.invoke_on(thread.clone(), json!({ "questions": ["x", "y", "z"] })).unwrap().interrupted().unwrap();
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
    let err: LoadError = Engine::new().load_str(yaml).expect_err("the file should not load");
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
    has(&p, 2, "needs `steps:` or `action:`");
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
        "both `steps` and `action`",
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
    // Keys tea does not take on it, refused rather than ignored.
    for (key, value, text) in [
        ("max_concurrency", "3", "no per-node `max_concurrency`"),
        ("fail_fast", "true", "no per-node `fail_fast`"),
        ("output", "results", "`parallel_results`"),
        ("run", "return {}", "does not go on a `dynamic_parallel` node"),
        ("goto", "collect", "does not go on a `dynamic_parallel` node"),
    ] {
        has(&problems(&with(&format!("    items: x\n    fan_in: collect\n    {key}: {value}\n{steps}"))), 6, text);
    }
    // Its keys on another node.
    has(
        &problems("nodes:\n  - name: a\n    items: x\n    run: return {}\n"),
        3,
        "belongs to `type: dynamic_parallel` nodes",
    );
}

#[test]
fn a_pause_inside_an_item_needs_a_checkpointer() {
    let err =
        Engine::new().action("test.count", |_: &tea_yaml::State, _: &Value| Ok(Value::Null)).load_str(ASK).unwrap_err();
    assert!(err.to_string().contains("a checkpointer is required"), "{err}");
}
