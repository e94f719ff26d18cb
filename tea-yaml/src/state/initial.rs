//! The Edge Agent's top-level `initial_state:` (the keys a new run starts with, under its
//! input: the input's keys win, as both of The Edge Agent's engines merge them) and
//! `version:` (the file's own version, accepted and not interpreted).
//!
//! `initial_state:` (read and type-checked at load, kept in `LoadedAgent`, merged under the input
//! by `Agent::input`) and `version:`.

use crate::state::Schema;
use crate::syntax::yaml::{Kind, Node, Pos};
use serde_json::{Map, Value};

/// `initial_state:` as a map of JSON values, each checked against the declared types, and the
/// problems of both keys.
pub(crate) fn read(
    initial_state: Option<&&Node>,
    version: Option<&&Node>,
    schema: &Schema,
) -> (Map<String, Value>, Vec<(Pos, String)>) {
    let mut problems = Vec::new();
    if let Some(v) = version {
        if !matches!(v.kind, Kind::Str { .. } | Kind::Int(_) | Kind::Float(_)) {
            problems.push((v.pos, format!("`version` must be a string or a number, not {}", v.what())));
        }
    }
    let mut out = Map::new();
    match initial_state.map(|n| (n, &n.kind)) {
        None | Some((_, Kind::Null)) => {}
        Some((_, Kind::Map(entries))) => {
            for (key, value) in entries {
                let Some(name) = key.scalar_text() else {
                    problems.push((key.pos, format!("the keys of `initial_state` are state keys, not {}", key.what())));
                    continue;
                };
                let json = value.to_json();
                match schema.check(&name, &json) {
                    Ok(()) => {
                        out.insert(name, json);
                    }
                    Err(reason) => problems.push((value.pos, format!("`initial_state`: {reason}"))),
                }
            }
        }
        Some((n, _)) => {
            problems.push((n.pos, format!("`initial_state` must be a mapping of state keys, not {}", n.what())))
        }
    }
    (out, problems)
}

/// Puts the keys of `initial` that `input` lacks into `input`.
pub(crate) fn merge(initial: &Map<String, Value>, input: &mut Map<String, Value>) {
    for (key, value) in initial {
        if !input.contains_key(key) {
            input.insert(key.clone(), value.clone());
        }
    }
}
