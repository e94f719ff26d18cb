//! The Edge Agent's `ltm.*` and `memory.*` actions: on the agent's store when it has one (the
//! engine's long-term memory, `tea::Memory`, durable across engines and shared with Rust code
//! and `tea serve`), in the process without one.

use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tea_runtime::{Checkpointer, DirStore, Memory, MemoryStore, SearchQuery};
use tea_yaml::Engine;

const REMEMBER: &str = r#"
name: remember
nodes:
  - name: store
    uses: ltm.store
    with:
      key: "{{ state.user }}"
      value: { likes: "{{ state.likes }}" }
      metadata: { source: chat, user: "{{ state.user }}" }
    output: stored
  - name: note
    uses: memory.store
    with: { namespace: "notes.{{ state.user }}", key: last, value: "{{ state.likes }}" }
    output: noted
"#;

const RECALL: &str = r#"
name: recall
nodes:
  - name: fetch
    uses: ltm.retrieve
    with: { key: "{{ state.user }}", default: nothing }
    output: recalled
  - name: note
    uses: memory.retrieve
    with: { namespace: "notes.{{ state.user }}", key: last }
    output: noted
  - name: search
    uses: ltm.search
    with: { query: "green tea", metadata_filter: { source: chat }, limit: 5 }
    output: found
"#;

/// A directory of its own for one test, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(test: &str) -> Self {
        let path = std::env::temp_dir().join(format!("tea-yaml-memory-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run(engine: &Engine, text: &str, input: Value) -> tea_yaml::State {
    let agent = engine.load_str(text).unwrap();
    agent.invoke(input).unwrap().done().unwrap()
}

/// `ltm.store` in one engine, `ltm.retrieve` in another on the same store, as after a restart.
fn durable_across_engines(open: impl Fn() -> Box<dyn Fn() -> Engine>) {
    let first = open();
    let out = run(&first(), REMEMBER, json!({ "user": "ada", "likes": "green tea" }));
    assert_eq!(out["stored"], json!({ "success": true, "stored": true, "key": "ada", "created": true }));
    assert_eq!(out["noted"]["stored"], true);
    let out = run(&first(), REMEMBER, json!({ "user": "bob", "likes": "coffee" }));
    assert_eq!(out["stored"]["created"], true);
    drop(first);

    let second = open();
    let out = run(&second(), RECALL, json!({ "user": "ada" }));
    assert_eq!(out["recalled"]["found"], true, "{out:?}");
    assert_eq!(out["recalled"]["value"], json!({ "likes": "green tea" }));
    assert_eq!(out["recalled"]["metadata"], json!({ "source": "chat", "user": "ada" }));
    assert_eq!(out["noted"], json!({ "value": "green tea", "found": true, "key": "last" }));
    // The search's words are found in ada's value only.
    assert_eq!(out["found"]["count"], 1, "{out:?}");
    assert_eq!(out["found"]["results"][0]["key"], "ada");
    assert_eq!(out["found"]["results"][0]["score"], 1.0);
    let out = run(&second(), RECALL, json!({ "user": "carol" }));
    assert_eq!(out["recalled"], json!({ "success": true, "value": "nothing", "found": false, "metadata": null }));
}

#[test]
fn ltm_and_memory_are_durable_on_a_dir_store() {
    let dir = TempDir::new("dir");
    let path = dir.0.clone();
    durable_across_engines(move || {
        let path = path.clone();
        Box::new(move || Engine::new().checkpointer(DirStore::open(&path).unwrap()))
    });
}

#[cfg(feature = "sled")]
#[test]
fn ltm_and_memory_are_durable_on_a_sled_store() {
    let dir = TempDir::new("sled");
    let path = dir.0.clone();
    durable_across_engines(move || {
        // One sled handle per "process": sled locks its directory.
        let store = tea_runtime::SledStore::open(&path).unwrap();
        Box::new(move || Engine::new().checkpointer(store.clone()))
    });
}

/// What a YAML agent keeps is the engine's memory: Rust code reads and writes the same items.
#[test]
fn yaml_and_rust_share_one_memory() {
    let store = MemoryStore::new();
    let engine = Engine::new().checkpointer(store.clone());
    run(&engine, REMEMBER, json!({ "user": "ada", "likes": "green tea" }));
    let memory = Memory::new(store.clone());
    let item = memory.get(&["ltm"], "ada").unwrap().expect("ltm.store kept it in the store's memory");
    assert_eq!(item.value["value"], json!({ "likes": "green tea" }));
    assert_eq!(memory.get(&["notes", "ada"], "last").unwrap().unwrap().value["value"], "green tea");
    // Rust puts, YAML reads.
    memory.put(&["notes", "bob"], "last", json!({ "value": "tea, black" })).unwrap();
    let out = run(&engine, RECALL, json!({ "user": "bob" }));
    assert_eq!(out["noted"]["value"], "tea, black");

    // ltm.delete and memory.clear remove them from the store.
    let forget = r#"
nodes:
  - name: forget
    uses: ltm.delete
    with: { key: ada }
    output: gone
  - name: clear
    uses: memory.clear
    with: { namespace: notes.ada }
    output: cleared
"#;
    let out = run(&engine, forget, json!({}));
    assert_eq!(out["gone"], json!({ "success": true, "deleted": true, "key": "ada" }));
    assert_eq!(out["cleared"], json!({ "cleared": true, "namespace": "notes.ada" }));
    assert!(memory.get(&["ltm"], "ada").unwrap().is_none());
    assert!(memory.search(&SearchQuery::under(&["notes", "ada"])).unwrap().is_empty());
    assert!(memory.get(&["notes", "bob"], "last").unwrap().is_some(), "another namespace is kept");
}

#[test]
fn ttl_expires_stored_values() {
    let store = MemoryStore::new();
    let engine = Engine::new().checkpointer(store.clone());
    run(&engine, "nodes:\n  - name: put\n    uses: ltm.store\n    with: { key: k, value: 1, ttl: 0.05 }\n", json!({}));
    let expiry = Memory::new(store.clone()).get(&["ltm"], "k").unwrap().unwrap().expires_at_ms;
    assert!(expiry.is_some(), "the item records its expiry");
    let get = "nodes:\n  - name: get\n    uses: ltm.retrieve\n    with: { key: k }\n";
    let deadline = Instant::now() + Duration::from_secs(10);
    while run(&engine, get, json!({}))["found"] == true {
        assert!(Instant::now() < deadline, "the value never expired");
        std::thread::yield_now();
    }
    assert!(Memory::new(store).get(&["ltm"], "k").unwrap().is_none());
}

#[test]
fn without_a_store_they_keep_values_in_the_process() {
    let engine = Engine::new();
    let agent = engine.load_str(REMEMBER).unwrap();
    agent.invoke(json!({ "user": "ada", "likes": "green tea" })).unwrap();
    // The same loaded agent remembers; ltm.search finds by metadata alone too.
    let both = format!("{REMEMBER}  - name: fetch\n    uses: ltm.retrieve\n    with: {{ key: ada }}\n    output: recalled\n  - name: search\n    uses: ltm.search\n    with: {{ metadata_filter: {{ user: ada }} }}\n    output: found\n");
    let agent = engine.load_str(&both).unwrap();
    let out = agent.invoke(json!({ "user": "ada", "likes": "oolong" })).unwrap().done().unwrap();
    assert_eq!(out["stored"]["created"], true, "another loaded agent has its own memory");
    assert_eq!(out["recalled"]["value"], json!({ "likes": "oolong" }));
    assert_eq!(out["found"]["count"], 1);
    let out = agent.invoke(json!({ "user": "ada", "likes": "sencha" })).unwrap().done().unwrap();
    assert_eq!(out["stored"]["created"], false);
}

#[test]
fn bad_arguments_are_answered_or_fail_the_node() {
    let engine = Engine::new().checkpointer(MemoryStore::new());
    // As The Edge Agent: a missing key is a result, not a failure.
    let out =
        run(&engine, "nodes:\n  - name: a\n    uses: ltm.store\n    with: { value: 1 }\n    output: r\n", json!({}));
    assert_eq!(out["r"], json!({ "success": false, "error": "Key is required", "error_type": "validation_error" }));
    // A namespace the store cannot hold fails the node, naming it.
    let agent = engine
        .load_str("nodes:\n  - name: a\n    uses: memory.store\n    with: { namespace: 'a..b', key: k, value: 1 }\n")
        .unwrap();
    let error = agent.invoke(json!({})).unwrap_err();
    let text = tea_runtime::error_chain(&error);
    assert!(text.contains("node `a`") && text.contains("namespace label"), "{text}");
    let agent = engine.load_str("nodes:\n  - name: a\n    uses: ltm.search\n    with: { limit: -1 }\n").unwrap();
    let text = tea_runtime::error_chain(&agent.invoke(json!({})).unwrap_err());
    assert!(text.contains("`limit` is a positive whole number"), "{text}");
}

#[test]
fn a_store_holds_items_under_the_servers_graph_name() {
    let store = MemoryStore::new();
    run(&Engine::new().checkpointer(store.clone()), REMEMBER, json!({ "user": "ada", "likes": "tea" }));
    let threads = store.threads("tea-serve#store").unwrap();
    let ids: Vec<&str> = threads.iter().map(|t| t.as_str()).collect();
    assert_eq!(ids, [r#"["ltm","ada"]"#, r#"["notes","ada","last"]"#]);
}
