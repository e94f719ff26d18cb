//! Chat messages as models read and write them, and the `messages` reducer.
//!
//! [`Message`] serialises exactly as OpenAI's chat format reads and writes a message
//! (`{"role": "user", "content": "…"}`, an assistant's `tool_calls`, a tool result's
//! `tool_call_id`), plus an optional `id` the reducer keys on; [`ToolCall`] is a call the model
//! asks for (its arguments decoded as JSON), [`ToolDefinition`] a tool as the model sees it.
//! [`add_messages`] merges messages with LangGraph's `add_messages` rules; `#[reducer(messages)]`
//! names it on a `Vec<Message>` field of a `GraphState`, and a YAML agent's `state:` names it as
//! `messages`. Serde only: sending messages to a model is the `tea-models` crate's.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// One message of a conversation with a chat model.
///
/// It reads and writes the JSON of OpenAI's chat format, so a conversation kept in a state, a
/// checkpoint or a YAML agent's `messages` key is what any OpenAI-compatible API takes:
///
/// ```
/// use tea::Message;
/// use serde_json::json;
///
/// let question = Message::user("What is 2 + 2?");
/// assert_eq!(serde_json::to_value(&question)?, json!({"role": "user", "content": "What is 2 + 2?"}));
///
/// // An assistant's answer that calls a tool, as the API writes it.
/// let answer: Message = serde_json::from_value(json!({
///     "role": "assistant",
///     "content": null,
///     "tool_calls": [{"id": "call_1", "type": "function",
///                     "function": {"name": "add", "arguments": "{\"a\": 2, \"b\": 2}"}}]
/// }))?;
/// assert_eq!(answer.tool_calls()[0].arguments, json!({"a": 2, "b": 2}));
/// # Ok::<(), serde_json::Error>(())
/// ```
///
/// `id` is not part of OpenAI's format (a provider leaves it out of a request): it is how the
/// [`add_messages`] reducer recognises a message to replace or remove. [`Message::Remove`] is no
/// message at all but that reducer's removal marker.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum Message {
    /// Instructions for the model (`"role": "system"`; OpenAI's `developer` role reads as this).
    #[serde(alias = "developer")]
    System {
        /// The instructions.
        content: Content,
        /// A name telling participants of the same role apart.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// The message's id (see [`add_messages`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
    },
    /// What the person said (`"role": "user"`): text, or parts such as images.
    User {
        /// What was said.
        content: Content,
        /// A name telling participants of the same role apart.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// The message's id (see [`add_messages`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
    },
    /// The model's answer (`"role": "assistant"`): text, tool calls, or both.
    Assistant {
        /// The answer's text; `None` (JSON `null`) when the model only calls tools.
        #[serde(default)]
        content: Option<Content>,
        /// The tools the model asks to have called, in its order (several at once when it calls
        /// tools in parallel); left out of the JSON when empty.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
        /// A name telling participants of the same role apart.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// The message's id (see [`add_messages`]); a provider sets it to its response's id.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
    },
    /// A tool's result (`"role": "tool"`), answering the call `tool_call_id`.
    Tool {
        /// What the tool returned (or why it failed, for the model to correct its call).
        content: Content,
        /// The [`ToolCall::id`] this answers.
        tool_call_id: String,
        /// The message's id (see [`add_messages`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
    },
    /// Not a message: the [`add_messages`] reducer's marker that removes the message with this
    /// id ([`REMOVE_ALL_MESSAGES`] removes every message). It never reaches a model.
    Remove {
        /// The id of the message to remove.
        id: String,
    },
}

/// The id that makes [`Message::remove`] remove every message before it (LangGraph's
/// `REMOVE_ALL_MESSAGES`).
pub const REMOVE_ALL_MESSAGES: &str = "__remove_all__";

impl Message {
    /// A system message.
    pub fn system(content: impl Into<Content>) -> Message {
        Message::System { content: content.into(), name: None, id: None }
    }

    /// A user message.
    pub fn user(content: impl Into<Content>) -> Message {
        Message::User { content: content.into(), name: None, id: None }
    }

    /// An assistant message with text and no tool calls.
    pub fn assistant(content: impl Into<Content>) -> Message {
        Message::Assistant { content: Some(content.into()), tool_calls: Vec::new(), name: None, id: None }
    }

    /// An assistant message that calls tools (with no text).
    pub fn tool_calls_of(calls: Vec<ToolCall>) -> Message {
        Message::Assistant { content: None, tool_calls: calls, name: None, id: None }
    }

    /// A tool's result for the call `tool_call_id`.
    pub fn tool(tool_call_id: impl Into<String>, content: impl Into<Content>) -> Message {
        Message::Tool { content: content.into(), tool_call_id: tool_call_id.into(), id: None }
    }

    /// The marker that removes the message `id` when merged by [`add_messages`].
    pub fn remove(id: impl Into<String>) -> Message {
        Message::Remove { id: id.into() }
    }

    /// The marker that removes every message when merged by [`add_messages`].
    pub fn remove_all() -> Message {
        Message::Remove { id: REMOVE_ALL_MESSAGES.to_owned() }
    }

    /// This message with id `id`.
    #[must_use]
    pub fn with_id(mut self, id: impl Into<String>) -> Message {
        self.set_id(Some(id.into()));
        self
    }

    /// The role as the JSON names it: `system`, `user`, `assistant`, `tool` or `remove`.
    pub fn role(&self) -> &'static str {
        match self {
            Message::System { .. } => "system",
            Message::User { .. } => "user",
            Message::Assistant { .. } => "assistant",
            Message::Tool { .. } => "tool",
            Message::Remove { .. } => "remove",
        }
    }

    /// The message's id, if it has one.
    pub fn id(&self) -> Option<&str> {
        match self {
            Message::System { id, .. }
            | Message::User { id, .. }
            | Message::Assistant { id, .. }
            | Message::Tool { id, .. } => id.as_deref(),
            Message::Remove { id } => Some(id),
        }
    }

    /// Sets (or, with `None`, clears) the message's id; a removal marker always keeps one.
    pub fn set_id(&mut self, new: Option<String>) {
        match self {
            Message::System { id, .. }
            | Message::User { id, .. }
            | Message::Assistant { id, .. }
            | Message::Tool { id, .. } => *id = new,
            Message::Remove { id } => {
                if let Some(new) = new {
                    *id = new;
                }
            }
        }
    }

    /// The message's content, if it has any (an assistant's that only calls tools, and a
    /// removal marker, have none).
    pub fn content(&self) -> Option<&Content> {
        match self {
            Message::System { content, .. } | Message::User { content, .. } | Message::Tool { content, .. } => {
                Some(content)
            }
            Message::Assistant { content, .. } => content.as_ref(),
            Message::Remove { .. } => None,
        }
    }

    /// The message's text: its text content, or its text parts joined; `""` when it has none.
    pub fn text(&self) -> String {
        self.content().map(Content::text).unwrap_or_default()
    }

    /// The tool calls of an assistant message (none for any other).
    pub fn tool_calls(&self) -> &[ToolCall] {
        match self {
            Message::Assistant { tool_calls, .. } => tool_calls,
            _ => &[],
        }
    }
}

/// A message's content: a text, or a list of parts (text and images), as OpenAI's format
/// writes either.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// Plain text (a JSON string).
    Text(String),
    /// Parts (a JSON list of `{"type": "text", …}` and `{"type": "image_url", …}`).
    Parts(Vec<ContentPart>),
}

impl Content {
    /// The text: the string, or the text parts joined (other parts left out).
    pub fn text(&self) -> String {
        match self {
            Content::Text(text) => text.clone(),
            Content::Parts(parts) => parts
                .iter()
                .filter_map(|part| match part {
                    ContentPart::Text { text } => Some(text.as_str()),
                    ContentPart::ImageUrl { .. } => None,
                })
                .collect(),
        }
    }
}

impl From<String> for Content {
    fn from(text: String) -> Content {
        Content::Text(text)
    }
}

impl From<&str> for Content {
    fn from(text: &str) -> Content {
        Content::Text(text.to_owned())
    }
}

impl From<Vec<ContentPart>> for Content {
    fn from(parts: Vec<ContentPart>) -> Content {
        Content::Parts(parts)
    }
}

/// One part of a message's content.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    /// `{"type": "text", "text": …}`.
    Text {
        /// The text.
        text: String,
    },
    /// `{"type": "image_url", "image_url": {"url": …}}`: an `https:` URL or a `data:` URL
    /// holding the image in base64.
    ImageUrl {
        /// Where the image is.
        image_url: ImageUrl,
    },
}

impl ContentPart {
    /// A text part.
    pub fn text(text: impl Into<String>) -> ContentPart {
        ContentPart::Text { text: text.into() }
    }

    /// An image part at `url` (`https:` or `data:image/png;base64,…`).
    pub fn image_url(url: impl Into<String>) -> ContentPart {
        ContentPart::ImageUrl { image_url: ImageUrl { url: url.into(), detail: None } }
    }
}

/// The image of a [`ContentPart::ImageUrl`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ImageUrl {
    /// An `https:` URL, or a `data:` URL with the image in base64.
    pub url: String,
    /// OpenAI's `detail`: `low`, `high` or `auto`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A call of a tool that a model asks for.
///
/// It reads and writes OpenAI's form, `{"id", "type": "function", "function": {"name",
/// "arguments"}}`, whose `arguments` is a JSON text: it is decoded here, so `arguments` holds
/// the JSON value the model wrote. Arguments that are not JSON (a model's mistake) are kept as
/// their text in a [`Value::String`], and written back as that text, for the tool to report the
/// mistake to the model.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    /// The call's id, which the tool's result names ([`Message::Tool`]'s `tool_call_id`).
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments, as JSON (an object, for a tool whose parameters are a JSON Schema
    /// object).
    pub arguments: Value,
}

impl ToolCall {
    /// A call of `name` with `arguments`.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> ToolCall {
        ToolCall { id: id.into(), name: name.into(), arguments }
    }

    /// The arguments as the JSON text OpenAI's format carries.
    pub fn arguments_text(&self) -> String {
        match &self.arguments {
            Value::String(raw) => raw.clone(),
            other => other.to_string(),
        }
    }

    /// The arguments read from the JSON text a model wrote: its JSON value, or the text itself
    /// when it is not JSON (an empty text is `{}`, as some servers send for a call without
    /// arguments).
    pub fn parse_arguments(text: &str) -> Value {
        if text.trim().is_empty() {
            return Value::Object(serde_json::Map::new());
        }
        serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
    }
}

#[derive(Serialize, Deserialize)]
struct WireCall {
    id: String,
    #[serde(rename = "type", default = "function_type")]
    kind: String,
    function: WireFunction,
}

#[derive(Serialize, Deserialize)]
struct WireFunction {
    name: String,
    #[serde(default)]
    arguments: Value,
}

fn function_type() -> String {
    "function".to_owned()
}

impl Serialize for ToolCall {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        WireCall {
            id: self.id.clone(),
            kind: function_type(),
            function: WireFunction { name: self.name.clone(), arguments: Value::String(self.arguments_text()) },
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ToolCall {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<ToolCall, D::Error> {
        let wire = WireCall::deserialize(deserializer)?;
        if wire.kind != "function" {
            return Err(D::Error::custom(format_args!(
                "tool call `{}` is of type `{}`; tea reads calls of type `function`",
                wire.id, wire.kind
            )));
        }
        let arguments = match wire.function.arguments {
            Value::String(text) => ToolCall::parse_arguments(&text),
            Value::Null => Value::Object(serde_json::Map::new()),
            // Some servers (Ollama's own API) write the arguments as an object.
            other => other,
        };
        Ok(ToolCall { id: wire.id, name: wire.function.name, arguments })
    }
}

/// A tool as a model sees it: its name, what it does, and its parameters as a JSON Schema.
///
/// Providers send it in their API's form (OpenAI's `{"type": "function", "function": …}`,
/// Anthropic's `input_schema`); serialised on its own it is this flat record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// The tool's name, as the model calls it.
    pub name: String,
    /// What the tool does, for the model to decide when to call it.
    #[serde(default)]
    pub description: String,
    /// The JSON Schema of the arguments (an object schema).
    pub parameters: Value,
}

impl ToolDefinition {
    /// A tool named `name` described by `description`, taking arguments of the JSON Schema
    /// `parameters`.
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> ToolDefinition {
        ToolDefinition { name: name.into(), description: description.into(), parameters }
    }
}

/// Fields that `#[reducer(messages)]` fits: a list of [`Message`]s merged by [`add_messages`].
#[diagnostic::on_unimplemented(
    message = "`#[reducer(messages)]` does not fit a field of type `{Self}`",
    label = "`messages` needs a `Vec<tea::Message>`",
    note = "`messages` merges chat messages by id; use `append` for other lists"
)]
pub trait AddMessages {
    /// Merges `new` into `self` by [`add_messages`]' rules.
    fn add_messages(&mut self, new: Self);
}

impl AddMessages for Vec<Message> {
    fn add_messages(&mut self, new: Self) {
        add_messages(self, new)
    }
}

/// The prefix of the ids [`add_messages`] gives messages that have none.
const AUTO_ID: &str = "msg-";

/// Merges `new` into `current` with LangGraph's `add_messages` rules, in order:
/// - a message whose id is already in `current` replaces that message, in its place;
/// - any other message is appended; one without an id gets one first (`msg-1`, `msg-2`, …:
///   one more than the highest such id in `current`, so the same conversation always gets the
///   same ids, whatever the clock);
/// - a [`Message::Remove`] removes the message with its id ([`Message::remove_all`]: every
///   message so far) and is not kept.
///
/// ```
/// use tea::{add_messages, Message};
///
/// let mut chat = vec![Message::user("Hi")];
/// add_messages(&mut chat, vec![Message::assistant("Hello!")]);
/// assert_eq!(chat[1].id(), Some("msg-2"));
/// // Same id: replaced in place.
/// add_messages(&mut chat, vec![Message::assistant("Hello, how can I help?").with_id("msg-2")]);
/// assert_eq!(chat[1].text(), "Hello, how can I help?");
/// // A removal marker deletes.
/// add_messages(&mut chat, vec![Message::remove("msg-1")]);
/// assert_eq!(chat.len(), 1);
/// ```
///
/// # Panics
/// When a removal marker names an id that no message has (as LangGraph refuses it); in a
/// run, the engine reports the panic as `Error::NodePanicked` naming the node.
pub fn add_messages(current: &mut Vec<Message>, new: Vec<Message>) {
    if let Err(why) = try_add_messages(current, new) {
        panic!("add_messages: {why}");
    }
}

/// [`add_messages`], with a removal of an unknown id an error (`Err` with why) rather than a
/// panic: the messages before it are merged, the ones after it are not. For front ends that
/// report it their own way (a YAML agent's `messages` reducer).
pub fn try_add_messages(current: &mut Vec<Message>, new: Vec<Message>) -> Result<(), String> {
    // Messages that came in without the reducer (a run's input, an `overwrite_…`) get ids first.
    assign_missing(current);
    for mut message in new {
        if let Message::Remove { id } = &message {
            if id == REMOVE_ALL_MESSAGES {
                current.clear();
                continue;
            }
            match current.iter().position(|m| m.id() == Some(id.as_str())) {
                Some(at) => {
                    current.remove(at);
                }
                None => return Err(format!("no message has id `{id}`, so none can be removed")),
            }
            continue;
        }
        match message.id().and_then(|id| current.iter().position(|m| m.id() == Some(id))) {
            Some(at) => current[at] = message,
            None => {
                if message.id().is_none() {
                    message.set_id(Some(next_id(current)));
                }
                current.push(message);
            }
        }
    }
    Ok(())
}

/// Gives every message of `messages` without an id one, in order.
fn assign_missing(messages: &mut [Message]) {
    if messages.iter().all(|m| m.id().is_some()) {
        return;
    }
    let first = highest_auto_id(messages) + 1;
    for (n, message) in (first..).zip(messages.iter_mut().filter(|m| m.id().is_none())) {
        message.set_id(Some(format!("{AUTO_ID}{n}")));
    }
}

/// The id the next message without one gets after `messages`.
fn next_id(messages: &[Message]) -> String {
    format!("{AUTO_ID}{}", highest_auto_id(messages) + 1)
}

/// The highest `n` of the ids `msg-n` in `messages` (0 without any).
fn highest_auto_id(messages: &[Message]) -> u64 {
    messages.iter().filter_map(|m| m.id()?.strip_prefix(AUTO_ID)?.parse::<u64>().ok()).max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_read_and_write_openai_json() {
        let cases = [
            json!({"role": "system", "content": "Be brief."}),
            json!({"role": "user", "content": [{"type": "text", "text": "What is this?"},
                   {"type": "image_url", "image_url": {"url": "https://x/cat.png", "detail": "low"}}]}),
            json!({"role": "assistant", "content": "Hi"}),
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{\"a\":1}"}},
                {"id": "c2", "type": "function", "function": {"name": "mul", "arguments": "{\"b\":2}"}}]}),
            json!({"role": "tool", "content": "3", "tool_call_id": "c1"}),
            json!({"role": "user", "content": "Hi", "name": "ada", "id": "u1"}),
        ];
        for case in cases {
            let message: Message = serde_json::from_value(case.clone()).unwrap();
            assert_eq!(serde_json::to_value(&message).unwrap(), case);
        }
        let developer: Message = serde_json::from_value(json!({"role": "developer", "content": "x"})).unwrap();
        assert_eq!(developer, Message::system("x"));
    }

    #[test]
    fn tool_call_arguments_are_decoded_and_bad_ones_kept_as_text() {
        let call: ToolCall = serde_json::from_value(
            json!({"id": "c", "type": "function", "function": {"name": "f", "arguments": "{\"a\": [1, 2]}"}}),
        )
        .unwrap();
        assert_eq!(call.arguments, json!({"a": [1, 2]}));
        let bad: ToolCall =
            serde_json::from_value(json!({"id": "c", "function": {"name": "f", "arguments": "{\"a\": "}})).unwrap();
        assert_eq!(bad.arguments, json!("{\"a\": "));
        assert_eq!(serde_json::to_value(&bad).unwrap()["function"]["arguments"], "{\"a\": ");
        let other = serde_json::from_value::<ToolCall>(json!({"id": "c", "type": "custom", "function": {"name": "f"}}));
        assert!(other.unwrap_err().to_string().contains("of type `custom`"));
    }

    #[test]
    fn add_messages_appends_replaces_and_removes() {
        let mut chat = vec![Message::system("s")];
        add_messages(&mut chat, vec![Message::user("a"), Message::assistant("b")]);
        let ids: Vec<_> = chat.iter().map(|m| m.id().unwrap().to_owned()).collect();
        assert_eq!(ids, ["msg-1", "msg-2", "msg-3"]);
        add_messages(&mut chat, vec![Message::assistant("B").with_id("msg-3"), Message::remove("msg-2")]);
        assert_eq!(chat.iter().map(Message::text).collect::<Vec<_>>(), ["s", "B"]);
        add_messages(&mut chat, vec![Message::user("c")]);
        assert_eq!(chat[2].id(), Some("msg-4"), "ids are never reused while a higher one is kept");
        add_messages(&mut chat, vec![Message::user("x").with_id("own"), Message::user("x2").with_id("own")]);
        assert_eq!(chat.len(), 4);
        assert_eq!(chat[3].text(), "x2");
        add_messages(&mut chat, vec![Message::user("gone"), Message::remove_all(), Message::user("fresh")]);
        assert_eq!(chat.iter().map(Message::text).collect::<Vec<_>>(), ["fresh"]);
    }

    #[test]
    #[should_panic(expected = "no message has id `nope`")]
    fn removing_an_unknown_id_is_refused() {
        add_messages(&mut vec![Message::user("a")], vec![Message::remove("nope")]);
    }
}
