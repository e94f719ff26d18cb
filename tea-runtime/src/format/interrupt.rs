//! One pause a paused thread waits on ([`Interrupt`]), as checkpoints record it and tokens
//! carry it.

use crate::vocab::name::NodeName;
use serde::{Deserialize, Serialize};

/// One pause a paused thread waits on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Interrupt {
    pub(crate) id: String,
    pub(crate) node: NodeName,
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub(crate) value: serde_json::Value,
    #[serde(default)]
    pub(crate) kind: PauseKind,
    /// When the pause expires, in seconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) expires_at: Option<u64>,
    /// For a pause inside a subgraph node, the pause's id in the child graph (`ask#0` for the
    /// parent's `research/ask#0`): what the child's own resume answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) child: Option<String>,
}

/// What kind of pause an [`Interrupt`] is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum PauseKind {
    /// `interrupt_before`: continues without an answer.
    #[default]
    Before,
    /// `interrupt_after`: continues without an answer.
    After,
    /// `hitl.interrupt(…)` or an interrupt node: needs an answer.
    Ask,
}

impl Interrupt {
    pub(crate) fn new(id: String, node: NodeName, value: serde_json::Value) -> Self {
        Interrupt { id, node, value, kind: PauseKind::Ask, expires_at: None, child: None }
    }

    /// This pause of a child graph as its parent lists it: under id `id` at the parent's
    /// subgraph node `node`, remembering its own id for the child's resume.
    pub(crate) fn nested(&self, id: String, node: NodeName) -> Self {
        Interrupt {
            id,
            node,
            value: self.value.clone(),
            kind: self.kind,
            expires_at: self.expires_at,
            child: Some(self.id.clone()),
        }
    }

    /// A breakpoint's pause (`before:node`, `after:node`, with `@head` inside a branch).
    pub(crate) fn breakpoint(kind: PauseKind, node: NodeName, branch: Option<&NodeName>) -> Self {
        let word = if kind == PauseKind::After { "after" } else { "before" };
        let id = match branch {
            Some(head) => format!("{word}:{node}@{head}"),
            None => format!("{word}:{node}"),
        };
        Interrupt { id, node, value: serde_json::Value::Null, kind, expires_at: None, child: None }
    }

    /// A stable id, unique among the pauses of one token: `ask#0` for the first pause of node
    /// `ask` (`ask#1` for its second), `before:review` / `after:review` for breakpoints; inside a
    /// parallel branch, followed by `@head`.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The node that paused.
    pub fn node(&self) -> &NodeName {
        &self.node
    }

    /// Whether the pause waits for an answer (`hitl.interrupt` or an interrupt node), rather than
    /// being a breakpoint.
    pub fn needs_answer(&self) -> bool {
        self.kind == PauseKind::Ask
    }

    /// The pause's payload: what the node asks (`null` for a breakpoint). A token parsed from a
    /// string carries ids only, so there it is `null` too; read payloads from `app.state(thread)`.
    pub fn value(&self) -> &serde_json::Value {
        &self.value
    }

    /// The payload as a person reads it: a string payload as it is (`What is your name?`, where
    /// `value()`'s `Display` writes JSON, `"What is your name?"`), any other payload as compact
    /// JSON, and the empty string for a breakpoint or a token parsed from a string (`null`).
    ///
    /// ```
    /// # use tea_runtime as tea;
    /// # fn show(resume: &tea::Resume<impl tea::GraphState>) {
    /// for pause in resume.interrupts() {
    ///     println!("{} asks: {}", pause.node(), pause.text());
    /// }
    /// # }
    /// ```
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        match &self.value {
            serde_json::Value::String(text) => std::borrow::Cow::Borrowed(text),
            serde_json::Value::Null => std::borrow::Cow::Borrowed(""),
            other => std::borrow::Cow::Owned(other.to_string()),
        }
    }
}

/// The ids and kinds of pending pauses, for `paused` events.
#[cfg(feature = "tracing")]
pub(crate) fn pauses(interrupts: &[Interrupt]) -> (Vec<&str>, Vec<&'static str>) {
    use PauseKind;
    let ids = interrupts.iter().map(|i| i.id()).collect();
    let kinds = interrupts
        .iter()
        .map(|i| match i.kind {
            PauseKind::Before => "before",
            PauseKind::After => "after",
            PauseKind::Ask => "ask",
        })
        .collect();
    (ids, kinds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_is_a_string_payload_without_json_quotes() {
        let ask = |value| Interrupt::new("ask#0".into(), NodeName::from("ask"), value);
        assert_eq!(ask(json!("What is your name?")).value().to_string(), "\"What is your name?\"");
        assert_eq!(ask(json!("What is your name?")).text(), "What is your name?");
        assert_eq!(ask(json!({"draft": "v1", "n": 2})).text(), r#"{"draft":"v1","n":2}"#);
        assert_eq!(ask(json!(3)).text(), "3");
        let breakpoint = Interrupt::breakpoint(PauseKind::Before, NodeName::from("ask"), None);
        assert_eq!(breakpoint.text(), "");
    }
}
