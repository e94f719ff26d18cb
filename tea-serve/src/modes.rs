//! Stream modes: which of a run's events a stream sends (`stream_mode`, one name or a list,
//! as the protocol and LangGraph's SDKs send it), and which events the engine is asked for
//! (the run's `RunOptions::stream_modes`).
//!
//! A run's events are named by their mode — `values` (the state after each step, and at a pause
//! with `__interrupt__`), `updates` (`{node: update}`, `{"__interrupt__": [...]}` at a pause),
//! `custom` (what nodes emit), `debug` (`task` as a node starts, `task_result` as it ends),
//! `messages` (`[message, metadata]` for each message a node's update adds to the state's
//! `messages`: `messages-tuple`), `messages/complete` and `messages/metadata` (mode
//! `messages`) — besides `metadata`, `error` and `end`, which every stream sends. tea's
//! engine streams no model tokens, so the message modes send each message whole, when the
//! node that made it returns it, as LangGraph does for messages no model streamed.

use crate::error::ApiError;
use serde_json::Value;
use tea_runtime::StreamModes;

/// The modes a stream sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Modes {
    pub(crate) values: bool,
    pub(crate) updates: bool,
    pub(crate) custom: bool,
    pub(crate) debug: bool,
    /// `messages-tuple`: `messages` events.
    pub(crate) tuples: bool,
    /// `messages`: `messages/complete` and `messages/metadata` events.
    pub(crate) messages: bool,
}

/// The mode names a request may give.
const NAMES: [&str; 6] = ["values", "updates", "custom", "debug", "messages", "messages-tuple"];

impl Modes {
    /// What a stream sends when its request names no mode: `values`, `updates` and `custom`.
    pub(crate) const DEFAULT: Modes =
        Modes { values: true, updates: true, custom: true, debug: false, tuples: false, messages: false };

    const NONE: Modes =
        Modes { values: false, updates: false, custom: false, debug: false, tuples: false, messages: false };

    /// Reads `stream_mode` (a name or a list of names; `None`: [`Modes::DEFAULT`]).
    pub(crate) fn parse(given: Option<&Value>) -> Result<Modes, ApiError> {
        let names: Vec<&Value> = match given {
            None | Some(Value::Null) => return Ok(Modes::DEFAULT),
            Some(Value::Array(list)) => list.iter().collect(),
            Some(one) => vec![one],
        };
        let mut modes = Modes::NONE;
        for name in names {
            match name.as_str() {
                Some("values") => modes.values = true,
                Some("updates") => modes.updates = true,
                Some("custom") => modes.custom = true,
                Some("debug") => modes.debug = true,
                Some("messages-tuple") => modes.tuples = true,
                Some("messages") => modes.messages = true,
                _ => {
                    return Err(ApiError::unprocessable(
                        "bad_request",
                        format!("`stream_mode` {name} is not a mode this server streams ({})", NAMES.join(", ")),
                    ))
                }
            }
        }
        if modes == Modes::NONE {
            return Ok(Modes::DEFAULT);
        }
        Ok(modes)
    }

    /// The engine's modes for a run whose stream sends these: the state after each step and
    /// what nodes emit always (the run's values and timeline keep them), each node's update
    /// for `updates`, `debug` and the message modes, its start for `debug`.
    pub(crate) fn engine(self) -> StreamModes {
        let mut modes = StreamModes::VALUES | StreamModes::CUSTOM;
        if self.updates || self.debug || self.tuples || self.messages {
            modes = modes | StreamModes::UPDATES;
        }
        if self.debug {
            modes = modes | StreamModes::DEBUG;
        }
        modes
    }

    /// Whether a stream of these modes sends the event named `event`.
    pub(crate) fn sends(self, event: &str) -> bool {
        match event {
            "values" => self.values,
            "updates" => self.updates,
            "custom" => self.custom,
            "debug" => self.debug,
            "messages" => self.tuples,
            "messages/complete" | "messages/metadata" => self.messages,
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_and_lists_are_read_and_unknown_modes_refused() {
        assert_eq!(Modes::parse(None).unwrap(), Modes::DEFAULT);
        let values = Modes::parse(Some(&json!("values"))).unwrap();
        assert!(values.sends("values") && !values.sends("updates") && values.sends("end") && values.sends("metadata"));
        let several = Modes::parse(Some(&json!(["updates", "custom", "messages-tuple"]))).unwrap();
        assert!(several.sends("updates") && several.sends("custom") && several.sends("messages"));
        assert!(!several.sends("values") && !several.sends("messages/complete"));
        assert!(several.engine().contains(StreamModes::UPDATES) && !several.engine().contains(StreamModes::DEBUG));
        let error = Modes::parse(Some(&json!(["values", "tokens"]))).unwrap_err();
        assert!(error.message.contains("\"tokens\""), "{}", error.message);
    }
}
