//! Secrets kept where they belong: a write that would put a secret's value in the state (and so
//! in checkpoints, tokens and streams) is refused, and an error that holds one is redacted.
//!
//! `YamlGraph::apply` refuses an update holding a secret's value (so none reaches a checkpoint,
//! token or stream), `Agent::input` an input holding one, and `YamlGraph::redact` takes them out of
//! node errors (and so of traces).

use crate::ir::YamlGraph;
use serde_json::{Map, Value};
use tea_runtime::BoxError;

/// Secrets shorter than this are not looked for in writes and errors: so short a value cannot
/// be told apart from ordinary text.
pub(crate) const MIN_SECRET_LEN: usize = 4;

impl YamlGraph {
    /// The name of the first secret whose value `value` holds somewhere.
    fn secret_in(&self, value: &Value) -> Option<&str> {
        let secrets = &self.agent.secret_values;
        if secrets.is_empty() {
            return None;
        }
        match value {
            Value::String(text) => secrets.iter().find(|(_, v)| text.contains(v.as_str())).map(|(n, _)| n.as_str()),
            Value::Array(items) => items.iter().find_map(|v| self.secret_in(v)),
            Value::Object(map) => map.iter().find_map(|(k, v)| {
                self.secret_in(v)
                    .or_else(|| secrets.iter().find(|(_, s)| k.contains(s.as_str())).map(|(n, _)| n.as_str()))
            }),
            _ => None,
        }
    }

    /// Refuses writes that would put a secret in the state (and so in checkpoints, tokens and
    /// streams).
    pub(crate) fn refuse_secrets(&self, values: &Map<String, Value>) -> Result<(), String> {
        if self.agent.secret_values.is_empty() {
            return Ok(());
        }
        for (key, value) in values {
            if let Some(name) = self.secret_in(value) {
                return Err(format!(
                    "state key `{key}` would hold the value of secret `{name}`; secrets never go into the state \
                     (checkpoints and streams would keep them): use `{{{{ secrets.{name} }}}}` where it is needed"
                ));
            }
        }
        Ok(())
    }

    /// `error` with every secret's value replaced by `***` (unchanged when it holds none).
    pub(crate) fn redact(&self, error: BoxError) -> BoxError {
        let secrets = &self.agent.secret_values;
        if secrets.is_empty() {
            return error;
        }
        let mut text = tea_runtime::error_chain(&*error);
        if !secrets.iter().any(|(_, v)| text.contains(v.as_str())) {
            return error;
        }
        for (_, value) in secrets {
            text = text.replace(value.as_str(), "***");
        }
        text.into()
    }
}
