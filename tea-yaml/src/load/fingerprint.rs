//! The graph's fingerprint text: what every checkpoint of the agent is checked against.

use crate::ir::{Cond, Exec, NodeDef, NodeIx, Rule};
use tea_runtime::Goto;

/// What a node runs, as its fingerprint spells it. Written out here, not taken from a `Debug`
/// implementation: the text is stored (hashed) in every checkpoint, so it must not change when
/// someone edits how a value prints. (It spells each kind as the first fingerprints did.)
fn exec_text(out: &mut String, exec: &Exec) {
    use std::fmt::Write;
    let _ = match exec {
        Exec::Noop => write!(out, "Noop"),
        Exec::Lua(id) => write!(out, "Lua(ChunkId({}))", id.index()),
        Exec::Python(_) => write!(out, "Python"),
        Exec::Prolog(_) => write!(out, "Prolog"),
        Exec::Expr { key, .. } => write!(out, "Expr(-> {key})"),
        // A composed action is an action in the file: `uses: NAME`.
        Exec::Action { name, .. } | Exec::Composed { name, .. } => write!(out, "Action({name})"),
        Exec::Interrupt { state_key, resume_key, .. } => write!(out, "Interrupt({state_key} => {resume_key})"),
        Exec::Send { item_var, index_var, .. } => write!(out, "Send({item_var}, {index_var})"),
        Exec::Subgraph { child, .. } => write!(out, "Subgraph({}:{:x})", child.agent.name, child.agent.fingerprint),
        Exec::Steps(body) => {
            let _ = write!(out, "Steps(");
            for (name, exec) in body {
                let _ = write!(out, "{name}:");
                exec_text(out, exec);
                let _ = write!(out, ", ");
            }
            write!(out, ")")
        }
        Exec::Loop { cond, max, body } => {
            let _ = write!(out, "Loop({}, {max}", cond_text(cond));
            for (name, exec) in body {
                let _ = write!(out, ", {name}:");
                exec_text(out, exec);
            }
            write!(out, ")")
        }
    };
}

/// A condition as the fingerprint spells it.
fn cond_text(cond: &Cond) -> String {
    match cond {
        Cond::Always => "*".to_owned(),
        Cond::Const(b) => b.to_string(),
        Cond::Expr { source, expect, .. } => format!("{source}={expect}"),
    }
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
            let _ = write!(out, "[{}->{}]", cond_text(&r.cond), target(&r.to));
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
