//! The graph fingerprint of a YAML agent, stored in every checkpoint: pinned, so a change that
//! would orphan stored checkpoints fails here.

use tea::Graph;

/// One node of every kind the fingerprint describes, and each kind of routing.
const EVERY_KIND: &str = r#"
name: every
config: { checkpointer: memory, interrupt_after: [lua] }
nodes:
  - { name: noop }
  - { name: lua, run: "return {}" }
  - { name: expr, run: { type: expression, value: "1 + 1", output_key: two } }
  - { name: act, uses: file.read, with: { path: x } }
  - { name: ask, type: interrupt, state_key: q, resume_key: a }
  - name: fan
    type: dynamic_parallel
    items: "{{ state.items }}"
    item_var: it
    index_var: ix
    fan_in: join
    steps:
      - run: return {}
  - { name: join, run: "return {}", goto: [{ if: "state.again", to: lua }, { to: child }] }
  - { name: child, type: subgraph, file: CHILD }
  - { name: left, run: "return {}" }
  - { name: right, run: "return {}" }
  - { name: meet, run: "return {}" }
edges:
  - { from: child, parallel: [left, right], fan_in: meet }
  - { from: meet, to: __end__ }
"#;

/// The fingerprint is stored in every checkpoint: a change orphans them all. It is built
/// from the graph's own parts (not from any `Debug` output), and this value is the one
/// checkpoints written since the fingerprint was introduced carry.
#[test]
fn the_graph_fingerprint_is_stable() {
    let dir = std::env::temp_dir().join(format!("tea-yaml-fingerprint-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let child = dir.join("child.yaml");
    std::fs::write(&child, "name: kid\nnodes:\n  - { name: only, run: 'return {}' }\n").unwrap();
    let text = EVERY_KIND.replace("CHILD", &child.display().to_string());
    let agent = tea_yaml::Engine::new().allow_read(&dir).allow_read(".").load_str(&text).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(agent.graph().fingerprint(), 0xdede_4ec2_084c_d32e, "{:x}", agent.graph().fingerprint());
}
