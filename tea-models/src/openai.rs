//! [`OpenAi`]: every OpenAI-compatible chat-completions endpoint — OpenAI, Azure OpenAI
//! (a deployment's URL with `api-version`, the key in an `api-key` header), Ollama, vLLM,
//! llama.cpp's server, LiteLLM — answered in one piece or streamed (`data:` chunks whose
//! `delta.tool_calls[i]` fragments are put together by index).

use crate::chat::{ChatModel, ChatRequest, ModelFuture, Reply, ToolChoice, Usage};
use crate::error::ModelError;
use crate::http::{endpoint_builders, Added, Assemble, Endpoint};
use serde_json::{json, Map, Value};
use tea_runtime::{Content, Message, ToolCall};

const EXPECTED: &str = "a chat completion";

/// A chat model behind an OpenAI-compatible `chat/completions` endpoint.
///
/// ```
/// use tea_models::{ChatModel, OpenAi};
///
/// // OpenAI itself (the key from OPENAI_API_KEY, the base from OPENAI_BASE_URL when set).
/// let openai = OpenAi::from_env("gpt-4o-mini");
/// // Any OpenAI-compatible server: vLLM, llama.cpp's `llama-server`, LiteLLM.
/// let vllm = OpenAi::compatible("http://localhost:8000/v1", "Qwen/Qwen2.5-7B-Instruct");
/// // A local Ollama.
/// let ollama = OpenAi::ollama("llama3.2");
/// // An Azure OpenAI deployment.
/// let azure = OpenAi::azure("https://my-resource.openai.azure.com", "gpt-4o", "2024-10-21").api_key("…");
/// assert_eq!(azure.chat_url(), "https://my-resource.openai.azure.com/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21");
/// assert_eq!(ollama.model(), "llama3.2");
/// ```
#[derive(Clone)]
pub struct OpenAi {
    endpoint: Endpoint,
    /// Azure: the key goes in an `api-key` header, not `Authorization: Bearer`.
    api_key_header: bool,
    stream_usage: bool,
}

impl std::fmt::Debug for OpenAi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.endpoint.debug(f, "OpenAi")
    }
}

impl OpenAi {
    /// OpenAI's API (`https://api.openai.com/v1`) for `model`, with no key yet.
    pub fn new(model: impl Into<String>) -> OpenAi {
        OpenAi::compatible("https://api.openai.com/v1", model)
    }

    /// OpenAI for `model`: the key from `OPENAI_API_KEY`, the base URL from `OPENAI_BASE_URL`
    /// when it is set.
    pub fn from_env(model: impl Into<String>) -> OpenAi {
        let base = env("OPENAI_BASE_URL").unwrap_or_else(|| "https://api.openai.com/v1".to_owned());
        let model = OpenAi::compatible(base, model);
        match env("OPENAI_API_KEY") {
            Some(key) => model.api_key(key),
            None => model,
        }
    }

    /// Any OpenAI-compatible server whose API is at `base_url` (ending in `/v1` for most:
    /// vLLM's `http://localhost:8000/v1`, llama.cpp's `http://localhost:8080/v1`, a LiteLLM
    /// proxy's `http://localhost:4000/v1`).
    pub fn compatible(base_url: impl AsRef<str>, model: impl Into<String>) -> OpenAi {
        OpenAi {
            endpoint: Endpoint::new(
                format!("{}/chat/completions", base_url.as_ref().trim_end_matches('/')),
                model.into(),
            ),
            api_key_header: false,
            stream_usage: true,
        }
    }

    /// A local Ollama's OpenAI-compatible API (`OLLAMA_API_BASE`, else
    /// `http://localhost:11434/v1`).
    pub fn ollama(model: impl Into<String>) -> OpenAi {
        OpenAi::compatible(env("OLLAMA_API_BASE").unwrap_or_else(|| "http://localhost:11434/v1".to_owned()), model)
    }

    /// An Azure OpenAI deployment: `endpoint` is the resource's
    /// (`https://NAME.openai.azure.com`), `deployment` the model's deployment, `api_version`
    /// the API's (`2024-10-21`). Give the key with [`api_key`](Self::api_key): it goes in an
    /// `api-key` header. Usage in streamed answers is not asked for (older API versions
    /// refuse `stream_options`).
    pub fn azure(endpoint: impl AsRef<str>, deployment: impl Into<String>, api_version: impl AsRef<str>) -> OpenAi {
        let deployment = deployment.into();
        let url = format!(
            "{}/openai/deployments/{deployment}/chat/completions?api-version={}",
            endpoint.as_ref().trim_end_matches('/'),
            api_version.as_ref()
        );
        OpenAi { endpoint: Endpoint::new(url, deployment), api_key_header: true, stream_usage: false }
    }

    /// The API key (`Authorization: Bearer …`; Azure's `api-key` header).
    #[must_use]
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.endpoint.set_key(key.into());
        self
    }

    /// The full URL the requests go to, for a server whose path is not `…/chat/completions`.
    #[must_use]
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.endpoint.url = url.into();
        self
    }

    /// Whether the key goes in an `api-key` header (Azure's way) rather than in
    /// `Authorization: Bearer …`.
    #[must_use]
    pub fn api_key_header(mut self, yes: bool) -> Self {
        self.api_key_header = yes;
        self
    }

    /// Whether a streamed request asks for usage in its last chunk (`stream_options:
    /// {include_usage: true}`); on by default but for Azure.
    #[must_use]
    pub fn stream_usage(mut self, ask: bool) -> Self {
        self.stream_usage = ask;
        self
    }

    endpoint_builders!();

    /// The URL the requests go to.
    pub fn chat_url(&self) -> &str {
        &self.endpoint.url
    }

    /// The JSON body of `request` as the chat-completions API takes it (`stream` for a
    /// streamed answer).
    pub fn request_body(&self, request: &ChatRequest<'_>, stream: bool) -> Result<Value, ModelError> {
        let refuse = |why: String| ModelError::Request { model: self.endpoint.model.clone(), why };
        let mut messages = Vec::with_capacity(request.messages.len());
        for (i, message) in request.messages.iter().enumerate() {
            if let Message::Remove { id } = message {
                return Err(refuse(format!("messages[{i}] is a removal marker (of `{id}`), not a message to send")));
            }
            let mut value = serde_json::to_value(message).map_err(|e| refuse(format!("messages[{i}]: {e}")))?;
            // The id is tea's, not part of the API's message.
            if let Value::Object(map) = &mut value {
                map.remove("id");
            }
            messages.push(value);
        }
        let mut body = Map::new();
        body.insert("model".to_owned(), json!(self.endpoint.model));
        body.insert("messages".to_owned(), Value::Array(messages));
        if !request.tools.is_empty() {
            let tools = request
                .tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.parameters,
                    }})
                })
                .collect();
            body.insert("tools".to_owned(), Value::Array(tools));
        }
        let options = &request.options;
        if let Some(choice) = &options.tool_choice {
            let choice = match choice {
                ToolChoice::Auto => json!("auto"),
                ToolChoice::None => json!("none"),
                ToolChoice::Required => json!("required"),
                ToolChoice::Tool(name) => json!({"type": "function", "function": {"name": name}}),
            };
            body.insert("tool_choice".to_owned(), choice);
        }
        if let Some(parallel) = options.parallel_tool_calls {
            body.insert("parallel_tool_calls".to_owned(), json!(parallel));
        }
        if let Some(t) = options.temperature {
            body.insert("temperature".to_owned(), json!(t));
        }
        if let Some(p) = options.top_p {
            body.insert("top_p".to_owned(), json!(p));
        }
        if let Some(n) = options.max_tokens {
            body.insert("max_tokens".to_owned(), json!(n));
        }
        if !options.stop.is_empty() {
            body.insert("stop".to_owned(), json!(options.stop));
        }
        if let Some(seed) = options.seed {
            body.insert("seed".to_owned(), json!(seed));
        }
        if let Some(schema) = &options.json_schema {
            body.insert(
                "response_format".to_owned(),
                json!({"type": "json_schema", "json_schema": {
                    "name": schema.name, "schema": schema.schema, "strict": schema.strict,
                }}),
            );
        }
        if stream {
            body.insert("stream".to_owned(), json!(true));
            if self.stream_usage {
                body.insert("stream_options".to_owned(), json!({"include_usage": true}));
            }
        }
        for (key, value) in &options.extra {
            body.insert(key.clone(), value.clone());
        }
        Ok(Value::Object(body))
    }

    /// The key's header: `Authorization: Bearer …`, or Azure's `api-key`.
    fn auth(&self) -> Option<(&'static str, String)> {
        let key = self.endpoint.key.as_ref()?;
        Some(if self.api_key_header { ("api-key", key.clone()) } else { ("authorization", format!("Bearer {key}")) })
    }

    async fn call(&self, request: ChatRequest<'_>) -> Result<Reply, ModelError> {
        let stream = request.streams();
        let body = self.request_body(&request, stream)?;
        let answer = self.endpoint.send(self.auth().as_slice(), &body, EXPECTED).await?;
        if stream {
            answer.stream(request.tokens.as_ref(), Assembly::default()).await
        } else {
            answer.whole(parse_completion).await
        }
    }
}

impl ChatModel for OpenAi {
    fn model(&self) -> &str {
        &self.endpoint.model
    }

    fn chat<'a>(&'a self, request: ChatRequest<'a>) -> ModelFuture<'a> {
        Box::pin(self.call(request))
    }
}

fn env(key: &str) -> Option<String> {
    std::env::var(key).ok().filter(|v| !v.is_empty())
}

fn usage_of(value: Option<&Value>) -> Usage {
    let count = |key: &str| value.and_then(|u| u.get(key)).and_then(Value::as_u64);
    Usage { input_tokens: count("prompt_tokens"), output_tokens: count("completion_tokens") }
}

/// A whole chat completion's reply.
fn parse_completion(bytes: &[u8]) -> Result<Reply, String> {
    let body: Value = serde_json::from_slice(bytes).map_err(|e| format!("not JSON ({e})"))?;
    let choice = body.get("choices").and_then(|c| c.get(0)).ok_or("no `choices[0]`")?;
    let message = choice.get("message").ok_or("no `choices[0].message`")?;
    let mut message: Message =
        serde_json::from_value(message.clone()).map_err(|e| format!("`choices[0].message` does not read: {e}"))?;
    if !matches!(message, Message::Assistant { .. }) {
        return Err(format!("`choices[0].message` has role `{}`, not `assistant`", message.role()));
    }
    if let Some(id) = body.get("id").and_then(Value::as_str) {
        message.set_id(Some(id.to_owned()));
    }
    Ok(Reply {
        message,
        usage: usage_of(body.get("usage")),
        finish_reason: choice.get("finish_reason").and_then(Value::as_str).map(str::to_owned),
        model: body.get("model").and_then(Value::as_str).map(str::to_owned),
    })
}

/// A streamed answer put together chunk by chunk.
#[derive(Default)]
struct Assembly {
    id: Option<String>,
    model: Option<String>,
    text: Option<String>,
    /// Tool calls by their `index`: id, name, the arguments' text so far.
    calls: Vec<(usize, String, String, String)>,
    finish_reason: Option<String>,
    usage: Usage,
}

impl Assemble for Assembly {
    fn add(&mut self, _: Option<&str>, chunk: &Value) -> Result<Added, String> {
        if let Some(error) = chunk.get("error") {
            let message = error.get("message").and_then(Value::as_str).map_or_else(|| error.to_string(), str::to_owned);
            return Err(format!("the stream ended with an error: {message}"));
        }
        Ok(self.chunk(chunk).map_or(Added::Nothing, Added::Text))
    }

    fn finish(self, model: &str) -> Result<Reply, String> {
        self.reply(model)
    }
}

impl Assembly {
    /// Adds one chunk; the text it adds, if any.
    fn chunk(&mut self, chunk: &Value) -> Option<String> {
        if let Some(id) = chunk.get("id").and_then(Value::as_str).filter(|s| !s.is_empty()) {
            self.id.get_or_insert_with(|| id.to_owned());
        }
        if let Some(model) = chunk.get("model").and_then(Value::as_str).filter(|s| !s.is_empty()) {
            self.model.get_or_insert_with(|| model.to_owned());
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = usage_of(Some(usage));
        }
        // The last chunk with usage has no choices; other servers send `choices: []` on the way.
        let choice = chunk.get("choices").and_then(|c| c.get(0))?;
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_owned());
        }
        let delta = choice.get("delta")?;
        for call in delta.get("tool_calls").and_then(Value::as_array).map_or(&[][..], Vec::as_slice) {
            let index = match call.get("index").and_then(Value::as_u64) {
                Some(i) => i as usize,
                // Servers that send whole calls without an index: each is a new one.
                None => self.calls.len(),
            };
            let at = match self.calls.iter().position(|c| c.0 == index) {
                Some(at) => at,
                None => {
                    self.calls.push((index, String::new(), String::new(), String::new()));
                    self.calls.len() - 1
                }
            };
            let entry = &mut self.calls[at];
            if let Some(id) = call.get("id").and_then(Value::as_str).filter(|s| !s.is_empty()) {
                entry.1 = id.to_owned();
            }
            if let Some(function) = call.get("function") {
                if let Some(name) = function.get("name").and_then(Value::as_str) {
                    entry.2.push_str(name);
                }
                match function.get("arguments") {
                    Some(Value::String(piece)) => entry.3.push_str(piece),
                    Some(Value::Null) | None => {}
                    Some(other) => entry.3.push_str(&other.to_string()),
                }
            }
        }
        match delta.get("content") {
            Some(Value::String(piece)) if !piece.is_empty() => {
                self.text.get_or_insert_with(String::new).push_str(piece);
                Some(piece.clone())
            }
            _ => None,
        }
    }

    fn reply(mut self, model: &str) -> Result<Reply, String> {
        self.calls.sort_by_key(|c| c.0);
        let mut tool_calls = Vec::with_capacity(self.calls.len());
        for (index, id, name, arguments) in self.calls {
            if name.is_empty() {
                return Err(format!("streamed tool call {index} has no function name"));
            }
            let id = if id.is_empty() { format!("call_{index}") } else { id };
            tool_calls.push(ToolCall { id, name, arguments: ToolCall::parse_arguments(&arguments) });
        }
        if self.text.is_none() && tool_calls.is_empty() && self.finish_reason.is_none() {
            return Err(format!("the stream of `{model}` ended with no answer"));
        }
        Ok(Reply {
            message: Message::Assistant { content: self.text.map(Content::Text), tool_calls, name: None, id: self.id },
            usage: self.usage,
            finish_reason: self.finish_reason,
            model: self.model,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tea_runtime::ToolDefinition;

    #[test]
    fn bodies_leave_ids_out_and_carry_tools_and_options() {
        let model = OpenAi::compatible("http://x/v1/", "m");
        let messages = [
            Message::user("hi").with_id("u1"),
            Message::tool_calls_of(vec![ToolCall::new("c1", "add", json!({"a": 1}))]),
            Message::tool("c1", "2"),
        ];
        let tools = [ToolDefinition::new("add", "Adds", json!({"type": "object"}))];
        let request = ChatRequest::new(&messages)
            .tools(&tools)
            .options(crate::ChatOptions::new().tool_choice(ToolChoice::Tool("add".into())).extra("user", json!("u")));
        let body = model.request_body(&request, true).unwrap();
        assert_eq!(model.chat_url(), "http://x/v1/chat/completions");
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{\"a\":1}"}}]},
                {"role": "tool", "content": "2", "tool_call_id": "c1"},
            ])
        );
        assert_eq!(body["tools"][0]["function"]["name"], "add");
        assert_eq!(body["tool_choice"], json!({"type": "function", "function": {"name": "add"}}));
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"], json!({"include_usage": true}));
        assert_eq!(body["user"], "u");
        let refused = model.request_body(&ChatRequest::new(&[Message::remove("u1")]), false).unwrap_err();
        assert!(refused.to_string().contains("messages[0] is a removal marker"), "{refused}");
    }

    #[test]
    fn streamed_tool_call_fragments_are_put_together_by_index() {
        let mut assembly = Assembly::default();
        let chunks = [
            json!({"id": "r1", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Let me "}}]}),
            json!({"id": "r1", "choices": [{"index": 0, "delta": {"content": "check."}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"index": 1, "id": "b", "type": "function", "function": {"name": "time", "arguments": ""}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "a", "type": "function", "function": {"name": "weather", "arguments": "{\"ci"}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "ty\": \"Oslo\"}"}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"index": 1, "function": {"arguments": "{\"tz\": \"CET\"}"}}]}}]}),
            json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 7}}),
        ];
        let texts: Vec<_> = chunks.iter().filter_map(|c| assembly.chunk(c)).collect();
        assert_eq!(texts, ["Let me ", "check."]);
        let reply = assembly.reply("m").unwrap();
        assert_eq!(reply.message.text(), "Let me check.");
        assert_eq!(
            reply.message.tool_calls(),
            [ToolCall::new("a", "weather", json!({"city": "Oslo"})), ToolCall::new("b", "time", json!({"tz": "CET"}))]
        );
        assert_eq!(reply.message.id(), Some("r1"));
        assert_eq!(reply.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(reply.usage.total(), Some(12));
    }
}
