//! [`Anthropic`]: Anthropic's Messages API — system messages as the top-level `system`, tool
//! calls as `tool_use` blocks and their results as `tool_result` blocks of a user turn,
//! `x-api-key` and `anthropic-version` headers — answered in one piece or streamed
//! (`content_block_delta` events: `text_delta`, and `input_json_delta` fragments of a tool's
//! input put together per block).

use crate::chat::{ChatModel, ChatRequest, ModelFuture, Reply, ToolChoice, Usage};
use crate::error::ModelError;
use crate::http::{endpoint_builders, Added, Assemble, Endpoint};
use serde_json::{json, Map, Value};
use tea_runtime::{Content, ContentPart, Message, ToolCall};

const EXPECTED: &str = "a Messages API answer";
/// The API version sent in `anthropic-version`.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
/// `max_tokens` when the options set none (the API requires one).
const DEFAULT_MAX_TOKENS: u32 = 4096;

/// A Claude model behind Anthropic's Messages API (`POST /v1/messages`).
///
/// ```
/// use tea_models::{Anthropic, ChatModel};
///
/// let claude = Anthropic::from_env("claude-sonnet-4-5"); // the key from ANTHROPIC_API_KEY
/// assert_eq!(claude.model(), "claude-sonnet-4-5");
/// let local = Anthropic::new("http://127.0.0.1:9000", "claude-haiku-4-5").api_key("test");
/// assert_eq!(local.messages_url(), "http://127.0.0.1:9000/v1/messages");
/// // A gateway that serves the Messages API at a path of its own.
/// let proxied = Anthropic::new("http://gateway", "claude").url("http://gateway/anthropic/messages");
/// assert_eq!(proxied.messages_url(), "http://gateway/anthropic/messages");
/// ```
#[derive(Clone)]
pub struct Anthropic {
    endpoint: Endpoint,
    version: String,
}

impl std::fmt::Debug for Anthropic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.endpoint.debug(f, "Anthropic")
    }
}

impl Anthropic {
    /// The Messages API at `base_url` (`https://api.anthropic.com`, or a compatible server's)
    /// for `model`, with no key yet.
    pub fn new(base_url: impl AsRef<str>, model: impl Into<String>) -> Anthropic {
        Anthropic {
            endpoint: Endpoint::new(format!("{}/v1/messages", base_url.as_ref().trim_end_matches('/')), model.into()),
            version: ANTHROPIC_VERSION.to_owned(),
        }
    }

    /// Anthropic's API for `model`: the key from `ANTHROPIC_API_KEY`, the base URL from
    /// `ANTHROPIC_BASE_URL` when it is set.
    pub fn from_env(model: impl Into<String>) -> Anthropic {
        let base = std::env::var("ANTHROPIC_BASE_URL")
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| "https://api.anthropic.com".to_owned());
        let model = Anthropic::new(base, model);
        match std::env::var("ANTHROPIC_API_KEY").ok().filter(|v| !v.is_empty()) {
            Some(key) => model.api_key(key),
            None => model,
        }
    }

    /// The API key (the `x-api-key` header).
    #[must_use]
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.endpoint.set_key(key.into());
        self
    }

    /// The full URL the requests go to, for a server whose path is not `…/v1/messages`.
    #[must_use]
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.endpoint.url = url.into();
        self
    }

    /// The `anthropic-version` header (default [`ANTHROPIC_VERSION`]).
    #[must_use]
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = version.into();
        self
    }

    endpoint_builders!();

    /// The URL the requests go to.
    pub fn messages_url(&self) -> &str {
        &self.endpoint.url
    }

    /// The JSON body of `request` as the Messages API takes it (`stream` for a streamed
    /// answer).
    pub fn request_body(&self, request: &ChatRequest<'_>, stream: bool) -> Result<Value, ModelError> {
        let refuse = |why: String| ModelError::Request { model: self.endpoint.model.clone(), why };
        let mut system = Vec::new();
        let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
        for (i, message) in request.messages.iter().enumerate() {
            let (role, blocks) = match message {
                Message::System { content, .. } => {
                    system.push(content.text());
                    continue;
                }
                Message::User { content, .. } => {
                    ("user", blocks(content).map_err(|why| refuse(format!("messages[{i}]: {why}")))?)
                }
                Message::Assistant { content, tool_calls, .. } => {
                    let mut out = match content {
                        Some(content) => blocks(content).map_err(|why| refuse(format!("messages[{i}]: {why}")))?,
                        None => Vec::new(),
                    };
                    out.retain(|b| b.get("text").and_then(Value::as_str) != Some(""));
                    for call in tool_calls {
                        let input = match &call.arguments {
                            Value::Object(_) => call.arguments.clone(),
                            other => {
                                return Err(refuse(format!(
                                    "messages[{i}]: the arguments of tool call `{}` are not an object ({other}); \
                                     Anthropic's `tool_use` input must be one",
                                    call.id
                                )))
                            }
                        };
                        out.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}));
                    }
                    ("assistant", out)
                }
                Message::Tool { content, tool_call_id, .. } => {
                    let result = match content {
                        Content::Text(text) => json!(text),
                        Content::Parts(_) => {
                            Value::Array(blocks(content).map_err(|why| refuse(format!("messages[{i}]: {why}")))?)
                        }
                    };
                    ("user", vec![json!({"type": "tool_result", "tool_use_id": tool_call_id, "content": result})])
                }
                Message::Remove { id } => {
                    return Err(refuse(format!(
                        "messages[{i}] is a removal marker (of `{id}`), not a message to send"
                    )));
                }
            };
            // Turns alternate: the results of parallel tool calls (and any message of the same
            // role that follows) join one turn.
            match turns.last_mut() {
                Some((last, into)) if *last == role => into.extend(blocks),
                _ => turns.push((role, blocks)),
            }
        }
        let messages: Vec<Value> =
            turns.into_iter().map(|(role, content)| json!({"role": role, "content": content})).collect();
        let options = &request.options;
        let mut body = Map::new();
        body.insert("model".to_owned(), json!(self.endpoint.model));
        body.insert("max_tokens".to_owned(), json!(options.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)));
        if !system.is_empty() {
            body.insert("system".to_owned(), json!(system.join("\n\n")));
        }
        body.insert("messages".to_owned(), Value::Array(messages));
        let mut tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
            .collect();
        let mut choice = options.tool_choice.as_ref().map(|choice| match choice {
            ToolChoice::Auto => json!({"type": "auto"}),
            ToolChoice::None => json!({"type": "none"}),
            ToolChoice::Required => json!({"type": "any"}),
            ToolChoice::Tool(name) => json!({"type": "tool", "name": name}),
        });
        if let Some(schema) = &options.json_schema {
            // No JSON mode: a tool of the schema that the model must call; its input is the answer.
            tools.push(json!({
                "name": schema.name,
                "description": "Gives the final answer in the required structure.",
                "input_schema": schema.schema,
            }));
            choice = Some(json!({"type": "tool", "name": schema.name}));
        }
        if let Some(false) = options.parallel_tool_calls {
            let mut with = choice.unwrap_or_else(|| json!({"type": "auto"}));
            with["disable_parallel_tool_use"] = json!(true);
            choice = Some(with);
        }
        if !tools.is_empty() {
            body.insert("tools".to_owned(), Value::Array(tools));
        }
        if let Some(choice) = choice {
            body.insert("tool_choice".to_owned(), choice);
        }
        if let Some(t) = options.temperature {
            body.insert("temperature".to_owned(), json!(t));
        }
        if let Some(p) = options.top_p {
            body.insert("top_p".to_owned(), json!(p));
        }
        if !options.stop.is_empty() {
            body.insert("stop_sequences".to_owned(), json!(options.stop));
        }
        if stream {
            body.insert("stream".to_owned(), json!(true));
        }
        for (key, value) in &options.extra {
            body.insert(key.clone(), value.clone());
        }
        Ok(Value::Object(body))
    }

    /// The version header, and the key's (`x-api-key`).
    fn auth(&self) -> Vec<(&'static str, String)> {
        let mut headers = vec![("anthropic-version", self.version.clone())];
        if let Some(key) = &self.endpoint.key {
            headers.push(("x-api-key", key.clone()));
        }
        headers
    }

    async fn call(&self, request: ChatRequest<'_>) -> Result<Reply, ModelError> {
        let stream = request.streams();
        let body = self.request_body(&request, stream)?;
        let structured = request.options.json_schema.as_ref().map(|s| s.name.clone());
        let answer = self.endpoint.send(&self.auth(), &body, EXPECTED).await?;
        let reply = if stream {
            answer.stream(request.tokens.as_ref(), Assembly::default()).await?
        } else {
            answer.whole(parse_message).await?
        };
        Ok(match structured {
            Some(name) => structured_answer(reply, &name),
            None => reply,
        })
    }
}

impl ChatModel for Anthropic {
    fn model(&self) -> &str {
        &self.endpoint.model
    }

    fn chat<'a>(&'a self, request: ChatRequest<'a>) -> ModelFuture<'a> {
        Box::pin(self.call(request))
    }
}

/// A message's content as Messages API blocks.
fn blocks(content: &Content) -> Result<Vec<Value>, String> {
    match content {
        Content::Text(text) => Ok(vec![json!({"type": "text", "text": text})]),
        Content::Parts(parts) => parts
            .iter()
            .map(|part| match part {
                ContentPart::Text { text } => Ok(json!({"type": "text", "text": text})),
                ContentPart::ImageUrl { image_url } => {
                    let url = &image_url.url;
                    match url.strip_prefix("data:") {
                        Some(rest) => {
                            let (media, data) = rest
                                .split_once(";base64,")
                                .ok_or_else(|| "an image `data:` URL must be base64 (`data:image/png;base64,…`)".to_owned())?;
                            Ok(json!({"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}))
                        }
                        None => Ok(json!({"type": "image", "source": {"type": "url", "url": url}})),
                    }
                }
            })
            .collect(),
    }
}

fn usage_of(value: Option<&Value>, into: &mut Usage) {
    let count = |key: &str| value.and_then(|u| u.get(key)).and_then(Value::as_u64);
    if let Some(n) = count("input_tokens") {
        into.input_tokens = Some(n);
    }
    if let Some(n) = count("output_tokens") {
        into.output_tokens = Some(n);
    }
}

/// A whole Messages API answer's reply.
fn parse_message(bytes: &[u8]) -> Result<Reply, String> {
    let body: Value = serde_json::from_slice(bytes).map_err(|e| format!("not JSON ({e})"))?;
    let content = body.get("content").and_then(Value::as_array).ok_or("no `content` list")?;
    let mut text: Option<String> = None;
    let mut tool_calls = Vec::new();
    for (i, block) in content.iter().enumerate() {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                let piece = block.get("text").and_then(Value::as_str).ok_or(format!("`content[{i}]` has no `text`"))?;
                text.get_or_insert_with(String::new).push_str(piece);
            }
            Some("tool_use") => {
                let field = |key: &str| {
                    block
                        .get(key)
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                        .ok_or(format!("`content[{i}]` has no `{key}`"))
                };
                let input = block.get("input").cloned().unwrap_or_else(|| json!({}));
                tool_calls.push(ToolCall { id: field("id")?, name: field("name")?, arguments: input });
            }
            // Thinking and other blocks are the provider's own; the message keeps text and calls.
            _ => {}
        }
    }
    let mut usage = Usage::default();
    usage_of(body.get("usage"), &mut usage);
    Ok(Reply {
        message: Message::Assistant {
            content: text.map(Content::Text),
            tool_calls,
            name: None,
            id: body.get("id").and_then(Value::as_str).map(str::to_owned),
        },
        usage,
        finish_reason: body.get("stop_reason").and_then(Value::as_str).map(str::to_owned),
        model: body.get("model").and_then(Value::as_str).map(str::to_owned),
    })
}

/// A structured answer: the input of the forced tool `name` becomes the answer's JSON text.
fn structured_answer(mut reply: Reply, name: &str) -> Reply {
    if let Message::Assistant { content, tool_calls, .. } = &mut reply.message {
        if let Some(at) = tool_calls.iter().position(|c| c.name == name) {
            let call = tool_calls.remove(at);
            *content = Some(Content::Text(call.arguments.to_string()));
        }
    }
    reply
}

/// One content block of a streamed answer.
enum Block {
    Text(String),
    Tool { id: String, name: String, json: String, input: Value },
    Other,
}

/// A streamed answer put together event by event.
#[derive(Default)]
struct Assembly {
    id: Option<String>,
    model: Option<String>,
    blocks: Vec<(u64, Block)>,
    stop_reason: Option<String>,
    usage: Usage,
    stopped: bool,
}

impl Assemble for Assembly {
    fn add(&mut self, name: Option<&str>, data: &Value) -> Result<Added, String> {
        let kind = data.get("type").and_then(Value::as_str).or(name).unwrap_or_default();
        if kind == "error" {
            let message = data.pointer("/error/message").and_then(Value::as_str).unwrap_or("no message");
            return Err(format!("the stream ended with an error: {message}"));
        }
        Ok(match self.event(kind, data)? {
            Some(text) => Added::Text(text),
            None if kind == "message_stop" => Added::End,
            None => Added::Nothing,
        })
    }

    fn finish(self, _: &str) -> Result<Reply, String> {
        self.reply()
    }
}

impl Assembly {
    /// Adds one event; the text it adds, if any.
    fn event(&mut self, kind: &str, data: &Value) -> Result<Option<String>, String> {
        let index = data.get("index").and_then(Value::as_u64);
        match kind {
            "message_start" => {
                let message = data.get("message");
                self.id = message.and_then(|m| m.get("id")).and_then(Value::as_str).map(str::to_owned);
                self.model = message.and_then(|m| m.get("model")).and_then(Value::as_str).map(str::to_owned);
                usage_of(message.and_then(|m| m.get("usage")), &mut self.usage);
            }
            "content_block_start" => {
                let index = index.ok_or("`content_block_start` has no `index`")?;
                let block = data.get("content_block").ok_or("`content_block_start` has no `content_block`")?;
                let block = match block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        Block::Text(block.get("text").and_then(Value::as_str).unwrap_or_default().to_owned())
                    }
                    Some("tool_use") => Block::Tool {
                        id: block.get("id").and_then(Value::as_str).unwrap_or_default().to_owned(),
                        name: block.get("name").and_then(Value::as_str).unwrap_or_default().to_owned(),
                        json: String::new(),
                        input: block.get("input").cloned().unwrap_or_else(|| json!({})),
                    },
                    _ => Block::Other,
                };
                self.blocks.push((index, block));
            }
            "content_block_delta" => {
                let index = index.ok_or("`content_block_delta` has no `index`")?;
                let delta = data.get("delta").ok_or("`content_block_delta` has no `delta`")?;
                let block = self
                    .blocks
                    .iter_mut()
                    .find(|(i, _)| *i == index)
                    .map(|(_, b)| b)
                    .ok_or(format!("a delta of block {index}, which did not start"))?;
                match (delta.get("type").and_then(Value::as_str), block) {
                    (Some("text_delta"), Block::Text(text)) => {
                        let piece = delta.get("text").and_then(Value::as_str).unwrap_or_default();
                        text.push_str(piece);
                        if !piece.is_empty() {
                            return Ok(Some(piece.to_owned()));
                        }
                    }
                    (Some("input_json_delta"), Block::Tool { json, .. }) => {
                        json.push_str(delta.get("partial_json").and_then(Value::as_str).unwrap_or_default());
                    }
                    (Some("text_delta" | "input_json_delta"), _) => {
                        return Err(format!("block {index} got a delta of another kind"));
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = data.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(reason.to_owned());
                }
                usage_of(data.get("usage"), &mut self.usage);
            }
            "message_stop" => self.stopped = true,
            // `ping`, `content_block_stop` and events the API may add.
            _ => {}
        }
        Ok(None)
    }

    fn reply(mut self) -> Result<Reply, String> {
        if !self.stopped {
            return Err("the stream ended before `message_stop`".to_owned());
        }
        self.blocks.sort_by_key(|(i, _)| *i);
        let mut text: Option<String> = None;
        let mut tool_calls = Vec::new();
        for (_, block) in self.blocks {
            match block {
                Block::Text(piece) => text.get_or_insert_with(String::new).push_str(&piece),
                Block::Tool { id, name, json, input } => {
                    let arguments = if json.is_empty() { input } else { ToolCall::parse_arguments(&json) };
                    tool_calls.push(ToolCall { id, name, arguments });
                }
                Block::Other => {}
            }
        }
        Ok(Reply {
            message: Message::Assistant { content: text.map(Content::Text), tool_calls, name: None, id: self.id },
            usage: self.usage,
            finish_reason: self.stop_reason,
            model: self.model,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tea_runtime::ToolDefinition;

    #[test]
    fn system_goes_top_level_and_parallel_results_join_one_user_turn() {
        let model = Anthropic::new("http://x", "claude");
        let messages = [
            Message::system("Be brief."),
            Message::user("Weather and time in Oslo?"),
            Message::Assistant {
                content: Some("Checking.".into()),
                tool_calls: vec![
                    ToolCall::new("t1", "weather", json!({"city": "Oslo"})),
                    ToolCall::new("t2", "time", json!({"tz": "CET"})),
                ],
                name: None,
                id: None,
            },
            Message::tool("t1", "rain"),
            Message::tool("t2", "12:00"),
        ];
        let tools = [ToolDefinition::new("weather", "Weather", json!({"type": "object"}))];
        let body = model.request_body(&ChatRequest::new(&messages).tools(&tools), false).unwrap();
        assert_eq!(body["system"], "Be brief.");
        assert_eq!(body["max_tokens"], 4096);
        assert_eq!(
            body["tools"],
            json!([{"name": "weather", "description": "Weather", "input_schema": {"type": "object"}}])
        );
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": [{"type": "text", "text": "Weather and time in Oslo?"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Oslo"}},
                    {"type": "tool_use", "id": "t2", "name": "time", "input": {"tz": "CET"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "rain"},
                    {"type": "tool_result", "tool_use_id": "t2", "content": "12:00"}]},
            ])
        );
    }

    #[test]
    fn streamed_input_json_deltas_are_put_together_per_block() {
        let mut assembly = Assembly::default();
        let events = [
            ("message_start", json!({"message": {"id": "msg_1", "model": "claude", "usage": {"input_tokens": 9}}})),
            ("content_block_start", json!({"index": 0, "content_block": {"type": "text", "text": ""}})),
            ("content_block_delta", json!({"index": 0, "delta": {"type": "text_delta", "text": "On it"}})),
            (
                "content_block_start",
                json!({"index": 1, "content_block": {"type": "tool_use", "id": "t1", "name": "weather", "input": {}}}),
            ),
            (
                "content_block_delta",
                json!({"index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"city\": "}}),
            ),
            (
                "content_block_delta",
                json!({"index": 1, "delta": {"type": "input_json_delta", "partial_json": "\"Oslo\"}"}}),
            ),
            ("content_block_stop", json!({"index": 1})),
            ("message_delta", json!({"delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 4}})),
            ("message_stop", json!({})),
        ];
        let texts: Vec<_> = events.iter().filter_map(|(k, d)| assembly.event(k, d).unwrap()).collect();
        assert_eq!(texts, ["On it"]);
        let reply = assembly.reply().unwrap();
        assert_eq!(reply.message.tool_calls(), [ToolCall::new("t1", "weather", json!({"city": "Oslo"}))]);
        assert_eq!(reply.message.id(), Some("msg_1"));
        assert_eq!(reply.finish_reason.as_deref(), Some("tool_use"));
        assert_eq!(reply.usage.total(), Some(13));
    }
}
