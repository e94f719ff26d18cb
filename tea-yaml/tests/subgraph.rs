//! `type: subgraph`: a child agent file run as a node on the engine's subgraph hook — its
//! `input`/`output` mappings, a pause inside the child pausing the parent and resumed by id
//! without re-running the child's finished nodes, and the child's load errors with its
//! file:line:column.

use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tea::{MemoryStore, ThreadId};
use tea_yaml::{Engine, State};

fn dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tea-yaml-subgraph-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("agents")).unwrap();
    dir
}

const CHILD: &str = r#"
name: child
nodes:
  - name: work
    uses: test.count
    output: counted
  - name: ask
    type: interrupt
    message: "ok {{ state.topic }}?"
    resume_key: reply
  - name: finish
    run: return { summary = state.topic .. "/" .. tostring(state.reply) }
"#;

const PARENT: &str = r#"
name: parent
state:
  log: { type: list, reducer: append }
nodes:
  - name: before
    run: return { log = { "before" } }
  - name: research
    type: subgraph
    file: agents/child.yaml
    input:
      topic: "{{ state.subject }}"
    output:
      log: "{{ [result.summary] }}"
      answer: "{{ result.reply }}"
  - name: after
    run: return { log = { "after " .. tostring(state.answer) } }
"#;

fn engine(runs: &Arc<AtomicUsize>) -> Engine {
    engine_on(runs, MemoryStore::new())
}

fn engine_on(runs: &Arc<AtomicUsize>, store: MemoryStore) -> Engine {
    let counter = runs.clone();
    Engine::new()
        .checkpointer(store)
        .action("test.count", move |_: &State, _: &Value| Ok(json!(counter.fetch_add(1, Ordering::SeqCst) + 1)))
}

#[test]
fn a_pause_inside_the_child_pauses_the_parent_and_resumes_inside_it() {
    let dir = dir("pause");
    std::fs::write(dir.join("agents/child.yaml"), CHILD).unwrap();
    std::fs::write(dir.join("parent.yaml"), PARENT).unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let agent = engine(&runs).load_file(dir.join("parent.yaml")).unwrap();
    assert!(agent.can_pause());
    let thread = ThreadId::from("p1");
    let (state, resume) = agent
        .start(json!({ "subject": "rust" }))
        .and_then(|call| agent.run(call.on(thread.clone())))
        .unwrap()
        .interrupted()
        .unwrap();
    assert_eq!(state["log"], json!(["before"]));
    assert_eq!(resume.interrupts().len(), 1);
    let pause = &resume.interrupts()[0];
    assert!(pause.id().starts_with("research/"), "{}", pause.id());
    assert_eq!(pause.value(), &json!("ok rust?"));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let id = pause.id().to_owned();
    let done = agent.resume(resume.answer_to(&id, "yes")).unwrap().done().unwrap();
    assert_eq!(done["log"], json!(["before", "rust/yes", "after yes"]));
    // The child's finished node did not run again on resume.
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // Only the mapped keys reach the parent.
    assert!(done.get("topic").is_none() && done.get("summary").is_none());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_mappings_the_child_starts_on_the_parent_state_and_writes_its_final_state_back() {
    let dir = dir("plain");
    std::fs::write(dir.join("agents/double.yaml"), "nodes:\n  - name: d\n    run: return { n = state.n * 2 }\n")
        .unwrap();
    std::fs::write(
        dir.join("main.yaml"),
        "nodes:\n  - name: twice\n    type: subgraph\n    file: ./agents/double.yaml\n  - name: again\n    type: subgraph\n    file: agents/double.yaml\n",
    )
    .unwrap();
    let agent = Engine::new().load_file(dir.join("main.yaml")).unwrap();
    assert!(!agent.can_pause());
    let done = agent.invoke(json!({ "n": 3 })).unwrap().done().unwrap();
    assert_eq!(done["n"], json!(12));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_an_output_mapping_the_parent_merges_only_what_the_child_wrote() {
    // The child starts on the parent's state (its `log` already holds "pre"): written back whole
    // through the parent's reducers, "pre" was appended a second time and `total` summed twice.
    // As `graph!`'s subgraph over its parent's state: only the child's own writes reach the parent.
    let dir = dir("append");
    let child = r#"
state:
  log: { type: list, reducer: append }
  total: { type: int, reducer: sum }
nodes:
  - name: c1
    run: return { log = { "c1" }, total = 10, note = "child" }
"#;
    std::fs::write(dir.join("agents/child.yaml"), child).unwrap();
    let parent = r#"
state:
  log: { type: list, reducer: append }
  total: { type: int, reducer: sum }
nodes:
  - name: pre
    run: return { log = { "pre" }, total = 1 }
  - name: sub
    type: subgraph
    file: agents/child.yaml
  - name: post
    run: return { log = { "post" }, total = 100 }
"#;
    std::fs::write(dir.join("main.yaml"), parent).unwrap();
    let agent = Engine::new().load_file(dir.join("main.yaml")).unwrap();
    let done = agent.invoke(json!({ "kept": "as is" })).unwrap().done().unwrap();
    assert_eq!(done["log"], json!(["pre", "c1", "post"]));
    assert_eq!(done["total"], json!(111));
    assert_eq!(done["note"], json!("child"), "a key the child wrote reaches the parent");
    assert_eq!(done["kept"], json!("as is"));
    // With an input mapping and no output mapping, the child's final state is written back the
    // same way: the list passed in is not appended again, the child's other keys arrive.
    let mapped = parent.replace(
        "    file: agents/child.yaml\n",
        "    file: agents/child.yaml\n    input:\n      log: \"{{ state.log }}\"\n      total: \"{{ state.total }}\"\n      topic: rust\n",
    );
    std::fs::write(dir.join("mapped.yaml"), mapped).unwrap();
    let agent = Engine::new().load_file(dir.join("mapped.yaml")).unwrap();
    let done = agent.invoke(json!({})).unwrap().done().unwrap();
    assert_eq!(done["log"], json!(["pre", "c1", "post"]));
    assert_eq!(done["total"], json!(111));
    assert_eq!(done["topic"], json!("rust"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_fresh_load_on_the_same_store_resumes_the_child_from_the_token_text() {
    let dir = dir("token");
    std::fs::write(dir.join("agents/child.yaml"), CHILD).unwrap();
    std::fs::write(dir.join("parent.yaml"), PARENT).unwrap();
    let store = MemoryStore::new();
    let runs = Arc::new(AtomicUsize::new(0));
    let first = engine_on(&runs, store.clone()).load_file(dir.join("parent.yaml")).unwrap();
    let (_, resume) = first.invoke(json!({ "subject": "tea" })).unwrap().interrupted().unwrap();
    let id = resume.interrupts()[0].id().to_owned();
    let token = resume.to_string();
    drop(first);
    // As another process would: the file loaded again, the token read from text.
    let second = engine_on(&runs, store).load_file(dir.join("parent.yaml")).unwrap();
    let resume: tea::Resume<State> = token.parse().unwrap();
    let done = second.resume(resume.answer_to(&id, "fine")).unwrap().done().unwrap();
    assert_eq!(done["log"], json!(["before", "tea/fine", "after fine"]));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn each_item_of_a_dynamic_parallel_node_can_run_a_subgraph_that_pauses() {
    let dir = dir("items");
    std::fs::write(dir.join("agents/child.yaml"), CHILD).unwrap();
    std::fs::write(
        dir.join("map.yaml"),
        r#"
state:
  log: { type: list, reducer: append }
nodes:
  - name: each
    type: dynamic_parallel
    items: "{{ state.subjects }}"
    item_var: subject
    fan_in: done
    steps:
      - name: research
        type: subgraph
        file: agents/child.yaml
        input: { topic: "{{ state.subject }}" }
        output: { log: "{{ [result.summary] }}" }
  - name: done
    fan_in: true
"#,
    )
    .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let agent = engine(&runs).load_file(dir.join("map.yaml")).unwrap();
    let (_, resume) = agent.invoke(json!({ "subjects": ["a", "b"] })).unwrap().interrupted().unwrap();
    let asked: Vec<(String, Value)> =
        resume.interrupts().iter().map(|i| (i.id().to_owned(), i.value().clone())).collect();
    assert_eq!(asked.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>(), vec![json!("ok a?"), json!("ok b?")]);
    let (_, resume) = agent.resume(resume.answer_to(&asked[1].0, "2")).unwrap().interrupted().unwrap();
    let done = agent.resume(resume.answer_to(&asked[0].0, "1")).unwrap().done().unwrap();
    assert_eq!(done["log"], json!(["a/1", "b/2"]));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    let _ = std::fs::remove_dir_all(&dir);
}

fn problems(file: &std::path::Path) -> Vec<String> {
    let err = Engine::new().checkpointer(MemoryStore::new()).load_file(file).expect_err("should not load");
    err.to_string().lines().map(str::to_owned).collect()
}

#[test]
fn bad_fields_and_a_bad_child_are_load_errors_naming_the_child_file_line_and_column() {
    let dir = dir("errors");
    let main = dir.join("main.yaml");
    let write = |text: &str| std::fs::write(&main, text).unwrap();
    let has = |lines: &[String], text: &str| {
        assert!(lines.iter().any(|l| l.contains(text)), "no line containing {text:?} in:\n{lines:#?}");
    };
    // No file; a missing file; a mapping that is not one; a key that does not go there.
    write("nodes:\n  - name: s\n    type: subgraph\n");
    has(&problems(&main), "main.yaml:2:11: `type: subgraph` node `s` needs `file:`");
    write("nodes:\n  - name: s\n    type: subgraph\n    file: agents/nope.yaml\n");
    has(&problems(&main), "main.yaml:4:11: node `s`: `");
    has(&problems(&main), "cannot read the agent file");
    std::fs::write(dir.join("agents/ok.yaml"), "nodes:\n  - name: a\n    run: return {}\n").unwrap();
    write("nodes:\n  - name: s\n    type: subgraph\n    file: agents/ok.yaml\n    input: 3\n");
    has(&problems(&main), "main.yaml:5:12: `input` of node `s` must be a mapping");
    write("nodes:\n  - name: s\n    type: subgraph\n    file: agents/ok.yaml\n    run: return {}\n");
    has(&problems(&main), "main.yaml:5:10: `run` does not go on a `type: subgraph` node");
    write("nodes:\n  - name: s\n    file: agents/ok.yaml\n    run: return {}\n");
    has(&problems(&main), "main.yaml:3:11: `file` belongs to `type: subgraph` nodes");
    // A child with a problem: its own file, line and column.
    std::fs::write(dir.join("agents/bad.yaml"), "nodes:\n  - name: a\n    run: return {}\n    gotoo: b\n").unwrap();
    write("nodes:\n  - name: s\n    type: subgraph\n    file: agents/bad.yaml\n");
    let lines = problems(&main);
    has(&lines, "main.yaml:4:11: subgraph `s`: ");
    has(&lines, "bad.yaml:4:5: unknown key `gotoo`");
    // A child naming its own store; a cycle of files.
    std::fs::write(dir.join("agents/store.yaml"), "config: { checkpointer: memory }\nnodes:\n  - { name: a }\n")
        .unwrap();
    write("nodes:\n  - name: s\n    type: subgraph\n    file: agents/store.yaml\n");
    has(&problems(&main), "a subgraph runs on its parent's store");
    std::fs::write(dir.join("agents/loop.yaml"), "nodes:\n  - name: s\n    type: subgraph\n    file: ../main.yaml\n")
        .unwrap();
    write("nodes:\n  - name: s\n    type: subgraph\n    file: agents/loop.yaml\n");
    has(&problems(&main), "is a subgraph of itself");
    // A child that can pause makes its parent need a checkpointer.
    std::fs::write(dir.join("agents/asks.yaml"), "nodes:\n  - { name: q, type: interrupt }\n").unwrap();
    write("nodes:\n  - name: s\n    type: subgraph\n    file: agents/asks.yaml\n");
    let err = Engine::new().load_file(&main).unwrap_err();
    assert!(err.to_string().contains("a checkpointer is required"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn drawings_nest_the_child_agent_inside_its_node_recursively() {
    let dir = dir("draw");
    std::fs::write(
        dir.join("agents/leaf.yaml"),
        "name: leaf\nnodes:\n  - name: look\n    run: return {}\n  - name: \"say \\\"hi\\\"\"\n    run: return {}\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("agents/mid.yaml"),
        "name: mid\nnodes:\n  - name: prep\n    run: return {}\n  - name: deep\n    type: subgraph\n    file: leaf.yaml\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("main.yaml"),
        "name: top\nnodes:\n  - name: before\n    run: return {}\n  - name: research\n    type: subgraph\n    file: agents/mid.yaml\n  - name: after\n    run: return {}\n",
    )
    .unwrap();
    let agent = Engine::new().load_file(dir.join("main.yaml")).unwrap();

    let m = agent.mermaid();
    // The parent's own nodes keep their ids; the subgraph node is a block holding the child.
    assert!(m.starts_with("flowchart TD\n    __start__([start])\n    n0[\"before\"]\n"), "{m}");
    let block = "    subgraph n1 [\"research: mid\"]\n    n1____start__([start])\n    n1__n0[\"prep\"]\n";
    assert!(m.contains(block), "{m}");
    // The grandchild, inside the child's block, with the whole path as prefix.
    let inner = "    subgraph n1__n1 [\"deep: leaf\"]\n    n1__n1____start__([start])\n    n1__n1__n0[\"look\"]\n    n1__n1__n1[\"say #quot;hi#quot;\"]\n";
    assert!(m.contains(inner), "{m}");
    assert!(m.contains("    n1__n1__n0 --> n1__n1__n1\n    n1__n1__n1 --> n1__n1____end__\n    end\n"), "{m}");
    assert!(m.contains("    n1__n0 --> n1__n1\n    n1__n1 --> n1____end__\n    end\n"), "{m}");
    // The parent's edges reach the block; the parent's own end is not the child's.
    assert!(m.contains("    n0 --> n1\n    n1 --> n2\n    n2 --> __end__\n"), "{m}");
    assert_eq!(m.matches("subgraph ").count(), 2, "{m}");
    assert_eq!(m.matches("    end\n").count(), 2, "{m}");

    let d = agent.dot();
    assert!(d.starts_with("digraph \"top\" {\n") && d.ends_with("}\n"), "{d}");
    let cluster = "    subgraph \"cluster_n1\" {\n    label=\"research: mid\";\n    \"n1\" [label=\"research: mid\", shape=box3d];\n    \"n1____start__\" [label=\"start\", shape=circle];\n";
    assert!(d.contains(cluster), "{d}");
    assert!(d.contains("    subgraph \"cluster_n1__n1\" {\n    label=\"deep: leaf\";\n"), "{d}");
    assert!(d.contains("    \"n1__n1__n1\" [label=\"say \\\"hi\\\"\"];\n"), "{d}");
    assert!(d.contains("    \"n1__n1__n0\" -> \"n1__n1__n1\";\n"), "{d}");
    assert!(d.contains("    \"n0\" -> \"n1\";\n    \"n1\" -> \"n2\";\n"), "{d}");
    assert_eq!(d.matches('{').count(), d.matches('}').count(), "balanced braces: {d}");

    // A child that cannot be read is a load error naming the `file:` key's line and column, so
    // nothing is drawn.
    std::fs::write(
        dir.join("agents/mid.yaml"),
        "name: mid\nnodes:\n  - name: deep\n    type: subgraph\n    file: gone.yaml\n",
    )
    .unwrap();
    let lines = problems(&dir.join("main.yaml"));
    assert!(
        lines.iter().any(|l| l.contains("main.yaml:7:11: subgraph `research`: ") && l.contains("mid.yaml:5:11")),
        "{lines:#?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
