//! The graph's fingerprint text: what every checkpoint of the agent is checked against.

use super::*;

/// What a node runs, as its fingerprint spells it. Written out here, not taken from a `Debug`
/// implementation: the text is stored (hashed) in every checkpoint, so it must not change when
/// someone edits how a value prints. (It spells each kind as the first fingerprints did.)
fn exec_text(out: &mut String, exec: &Exec) {
    use std::fmt::Write;
    let _ = match exec {
        Exec::Noop => write!(out, "Noop"),
        Exec::Lua(id) => write!(out, "Lua(ChunkId({}))", id.index()),
        Exec::Python(_) => write!(out, "Python"),
        Exec::Expr { key, .. } => write!(out, "Expr(-> {key})"),
        Exec::Action { name, .. } => write!(out, "Action({name})"),
        Exec::Interrupt { state_key, resume_key, .. } => write!(out, "Interrupt({state_key} => {resume_key})"),
        Exec::Send { item_var, index_var, .. } => write!(out, "Send({item_var}, {index_var})"),
        Exec::Subgraph { child, .. } => write!(out, "Subgraph({}:{:x})", child.0.name, child.0.fingerprint),
    };
}

/// The graph's shape as text, for its fingerprint: nodes, what runs, routing, fan-outs, pauses.
pub(super) fn describe(name: &str, nodes: &[NodeDef], start: &[Rule]) -> String {
    use std::fmt::Write;
    let mut out = format!("{name}|");
    let target = |g: &Goto<NodeIx>| match g {
        Goto::Node(n) => nodes[n.index()].name.to_string(),
        Goto::End => "__end__".to_owned(),
    };
    let rules = |out: &mut String, rules: &[Rule]| {
        for r in rules {
            let cond = match &r.cond {
                Cond::Always => "*".to_owned(),
                Cond::Const(b) => b.to_string(),
                Cond::Expr { source, expect, .. } => format!("{source}={expect}"),
            };
            let _ = write!(out, "[{cond}->{}]", target(&r.to));
        }
    };
    rules(&mut out, start);
    for n in nodes {
        let _ = write!(out, "|{}:", n.name);
        exec_text(&mut out, &n.exec);
        let _ = write!(out, ":{}{}", n.interrupt_before, n.interrupt_after);
        rules(&mut out, &n.rules);
        if let Some((heads, join)) = &n.fork {
            out.push_str("fork[");
            for (i, h) in heads.iter().enumerate() {
                let sep = if i == 0 { "" } else { ", " };
                let _ = write!(out, "{sep}\"{}\"", nodes[h.index()].name.as_str().escape_debug());
            }
            let _ = write!(out, "]->{}", nodes[join.index()].name);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use tea_runtime::Graph;

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
        let agent = crate::Engine::new().load_str(&text).unwrap();
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!(agent.graph().fingerprint(), 0xdede_4ec2_084c_d32e, "{:x}", agent.graph().fingerprint());
    }
}
