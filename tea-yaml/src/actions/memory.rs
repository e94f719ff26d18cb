//! The agent's key-value memory (`memory.store`, `memory.retrieve`, `memory.delete`,
//! `memory.clear`): namespaced keys held as long as the loaded agent, in this process, outside
//! the state, with limits on keys and bytes; DSPy's, TextGrad's and mem0's fallbacks keep what
//! they keep in it.

use serde_json::{json, Value};
use tea_runtime::BoxError;

/// One of the `memory.*` actions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MemoryOp {
    Store,
    Retrieve,
    Delete,
    Clear,
}

/// How many keys an agent's memory holds at most: a `memory.store` beyond it fails (in its
/// result, as The Edge Agent's store failures).
pub(crate) const MAX_MEMORY_KEYS: usize = 100_000;
/// How many bytes (as JSON text) an agent's memory holds at most, over all its values.
pub(crate) const MAX_MEMORY_BYTES: usize = 64 << 20;

/// An agent's key-value memory (The Edge Agent's `memory.store`/`retrieve` on its in-memory
/// backend): values by namespace and key, each with an optional expiry. It lives as long as
/// the loaded agent, in this process, outside the state (so outside checkpoints).
#[derive(Debug, Default)]
pub(crate) struct Memory {
    entries: std::sync::Mutex<std::collections::HashMap<Slot, Entry>>,
}

/// A memory value's namespace and key.
type Slot = (String, String);
/// A memory value, when it expires, and its size as JSON text.
type Entry = (Value, Option<std::time::Instant>, usize);

impl Memory {
    /// Runs `op` with the rendered `args`: `key`, `value`, `ttl` (seconds), `default`,
    /// `namespace` (`default`). Results as The Edge Agent's: `{stored, key, namespace}`,
    /// `{value, found, key}`, `{deleted, key}`, `{cleared}`.
    pub(super) fn call(&self, op: MemoryOp, args: &Value) -> Result<Value, BoxError> {
        let what = match op {
            MemoryOp::Store => "memory.store",
            MemoryOp::Retrieve => "memory.retrieve",
            MemoryOp::Delete => "memory.delete",
            MemoryOp::Clear => "memory.clear",
        };
        let namespace = match args.get("namespace") {
            None | Some(Value::Null) => "default".to_owned(),
            Some(Value::String(n)) => n.clone(),
            Some(other) => other.to_string(),
        };
        let key = match args.get("key") {
            Some(Value::String(k)) if !k.is_empty() => Some(k.clone()),
            None | Some(Value::Null) => None,
            Some(Value::String(_)) => None,
            Some(other) => Some(other.to_string()),
        };
        let now = std::time::Instant::now();
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|_, (_, expires, _)| expires.is_none_or(|at| at > now));
        Ok(match op {
            MemoryOp::Clear => {
                entries.retain(|(ns, _), _| *ns != namespace);
                json!({ "cleared": true, "namespace": namespace })
            }
            _ => {
                let Some(key) = key else { return Err(format!("{what} needs `with: {{ key: … }}`").into()) };
                let slot = (namespace.clone(), key.clone());
                match op {
                    MemoryOp::Store => {
                        let Some(value) = args.get("value") else {
                            return Err(format!("{what} needs `value`").into());
                        };
                        let ttl =
                            match args.get("ttl") {
                                None | Some(Value::Null) => None,
                                Some(t) => Some(t.as_f64().filter(|t| *t > 0.0 && t.is_finite()).ok_or_else(|| {
                                    format!("{what}: `ttl` is a positive number of seconds, not {t}")
                                })?),
                            };
                        let size = serde_json::to_vec(value).map_or(0, |v| v.len()) + key.len() + namespace.len();
                        let held: usize = entries.iter().filter(|(s, _)| **s != slot).map(|(_, (_, _, n))| *n).sum();
                        let full = if entries.len() >= MAX_MEMORY_KEYS && !entries.contains_key(&slot) {
                            Some(format!("the agent's memory holds {MAX_MEMORY_KEYS} keys, its limit"))
                        } else if held + size > MAX_MEMORY_BYTES {
                            Some(format!("the agent's memory would hold more than {MAX_MEMORY_BYTES} bytes, its limit"))
                        } else {
                            None
                        };
                        if let Some(error) = full {
                            return Ok(json!({ "stored": false, "key": key, "error": error }));
                        }
                        let expires = ttl
                            .and_then(|t| std::time::Duration::try_from_secs_f64(t).ok())
                            .and_then(|d| now.checked_add(d));
                        entries.insert(slot, (value.clone(), expires, size));
                        json!({ "stored": true, "key": key, "namespace": namespace })
                    }
                    MemoryOp::Retrieve => match entries.get(&slot) {
                        Some((value, _, _)) => json!({ "value": value, "found": true, "key": key }),
                        None => json!({
                            "value": args.get("default").cloned().unwrap_or(Value::Null),
                            "found": false,
                            "key": key,
                        }),
                    },
                    MemoryOp::Delete => json!({ "deleted": entries.remove(&slot).is_some(), "key": key }),
                    MemoryOp::Clear => json!({ "cleared": true }),
                }
            }
        })
    }
}

/// DSPy's, TextGrad's and mem0's fallbacks keep what they keep in the agent's memory.
impl crate::actions::fallback::Keep for Memory {
    fn kept(&self, namespace: &str, key: &str) -> Result<Option<Value>, BoxError> {
        let found = self.call(MemoryOp::Retrieve, &json!({ "namespace": namespace, "key": key }))?;
        Ok(match found.get("found") {
            Some(Value::Bool(true)) => found.get("value").cloned(),
            _ => None,
        })
    }

    fn keep(&self, namespace: &str, key: &str, value: &Value) -> Result<Value, BoxError> {
        self.call(MemoryOp::Store, &json!({ "namespace": namespace, "key": key, "value": value }))
    }
}
