//! The [`ChatModel`] trait and what a call carries: [`ChatRequest`] (messages, tools,
//! [`ChatOptions`], where tokens go), [`Reply`] (the assistant's [`Message`], usage, why it
//! stopped), [`TokenSink`] (a node's [`Writer`], or any closure), and the blocking form's
//! runtime.

use crate::error::ModelError;
use serde_json::{Map, Value};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use tea_runtime::{Message, ToolDefinition, Writer};

/// The future a [`ChatModel`] returns: the reply, or why there is none.
pub type ModelFuture<'a> = Pin<Box<dyn Future<Output = Result<Reply, ModelError>> + Send + 'a>>;

/// A chat model: messages and tools in, the assistant's message out.
///
/// Async first ([`chat`](Self::chat)); [`chat_blocking`](Self::chat_blocking) is the same call
/// for a blocking node. When the request has a [`TokenSink`] that listens (a node's
/// [`Writer`] while the run is streamed), the provider asks for a streamed answer and hands
/// each piece of text to the sink as it arrives; the reply is the same message either way.
///
/// The trait is object safe: keep a model as `Arc<dyn ChatModel>` to choose the provider at
/// run time. Retries, timeouts and caching are the node's policies (`NodePolicy`), not the
/// model's: a call makes one request.
///
/// ```no_run
/// use tea_models::{ChatModel, ChatRequest, OpenAi};
/// use tea::Message;
///
/// let model = OpenAi::from_env("gpt-4o-mini");
/// let reply = model.chat_blocking(ChatRequest::new(&[Message::user("Say hi")]))?;
/// println!("{}", reply.message.text());
/// # Ok::<(), tea_models::ModelError>(())
/// ```
pub trait ChatModel: Send + Sync {
    /// The model's name as the provider knows it (`gpt-4o-mini`, `claude-sonnet-4-5`).
    fn model(&self) -> &str;

    /// Sends `request` and returns the assistant's reply.
    fn chat<'a>(&'a self, request: ChatRequest<'a>) -> ModelFuture<'a>;

    /// [`chat`](Self::chat), waited for on this thread: for blocking nodes. It runs on a
    /// runtime of this crate's own, so it may be called from inside a tokio runtime too.
    fn chat_blocking(&self, request: ChatRequest<'_>) -> Result<Reply, ModelError> {
        block_on(self.chat(request))
    }
}

impl<M: ChatModel + ?Sized> ChatModel for Arc<M> {
    fn model(&self) -> &str {
        (**self).model()
    }
    fn chat<'a>(&'a self, request: ChatRequest<'a>) -> ModelFuture<'a> {
        (**self).chat(request)
    }
}

impl<M: ChatModel + ?Sized> ChatModel for Box<M> {
    fn model(&self) -> &str {
        (**self).model()
    }
    fn chat<'a>(&'a self, request: ChatRequest<'a>) -> ModelFuture<'a> {
        (**self).chat(request)
    }
}

impl<M: ChatModel + ?Sized> ChatModel for &M {
    fn model(&self) -> &str {
        (**self).model()
    }
    fn chat<'a>(&'a self, request: ChatRequest<'a>) -> ModelFuture<'a> {
        (**self).chat(request)
    }
}

/// One call of a chat model: the conversation, the tools it may call, options, and where
/// streamed tokens go.
///
/// ```
/// use tea_models::{ChatOptions, ChatRequest, ToolChoice};
/// use tea::{Message, ToolDefinition};
/// use serde_json::json;
///
/// let messages = [Message::system("Be brief."), Message::user("What is 6 × 7?")];
/// let tools = [ToolDefinition::new("multiply", "Multiplies two numbers", json!({
///     "type": "object",
///     "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
///     "required": ["a", "b"],
/// }))];
/// let request = ChatRequest::new(&messages)
///     .tools(&tools)
///     .options(ChatOptions::new().temperature(0.0).tool_choice(ToolChoice::Auto));
/// assert_eq!(request.tools.len(), 1);
/// ```
#[derive(Clone)]
pub struct ChatRequest<'a> {
    /// The conversation so far.
    pub messages: &'a [Message],
    /// The tools the model may call.
    pub tools: &'a [ToolDefinition],
    /// Sampling, limits, tool choice, structured output, provider-specific fields.
    pub options: ChatOptions,
    /// Where streamed text goes as it arrives; `None`: the answer comes in one piece.
    pub tokens: Option<Arc<dyn TokenSink>>,
}

impl<'a> ChatRequest<'a> {
    /// A request with `messages`, no tools and default options.
    pub fn new(messages: &'a [Message]) -> ChatRequest<'a> {
        ChatRequest { messages, tools: &[], options: ChatOptions::default(), tokens: None }
    }

    /// The tools the model may call.
    #[must_use]
    pub fn tools(mut self, tools: &'a [ToolDefinition]) -> Self {
        self.tools = tools;
        self
    }

    /// The options of the call.
    #[must_use]
    pub fn options(mut self, options: ChatOptions) -> Self {
        self.options = options;
        self
    }

    /// Streams the answer's text to `sink` as it arrives: a node's [`Writer`]
    /// (`ctx.writer()`) sends each piece to the run's stream as an `Event::Custom` of
    /// `{"type": "token", "text": …}`, so `stream()` and `tea serve` show it as it comes.
    #[must_use]
    pub fn stream_to(mut self, sink: impl TokenSink + 'static) -> Self {
        self.tokens = Some(Arc::new(sink));
        self
    }

    /// Whether the call streams: it has a sink, and the sink listens.
    pub fn streams(&self) -> bool {
        self.tokens.as_ref().is_some_and(|t| t.is_listened())
    }
}

impl std::fmt::Debug for ChatRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatRequest")
            .field("messages", &self.messages)
            .field("tools", &self.tools)
            .field("options", &self.options)
            .field("streams", &self.streams())
            .finish()
    }
}

/// Where a streamed answer's text goes, piece by piece.
pub trait TokenSink: Send + Sync {
    /// Called with each piece of the answer's text, in order.
    fn token(&self, text: &str);

    /// Whether anything listens; when not, the provider does not stream at all.
    fn is_listened(&self) -> bool {
        true
    }
}

/// A node's stream: each piece is an `Event::Custom` of `{"type": "token", "text": …}`; it
/// listens only while the run is streamed with custom events.
impl TokenSink for Writer {
    fn token(&self, text: &str) {
        let mut value = Map::new();
        value.insert("type".to_owned(), Value::from("token"));
        value.insert("text".to_owned(), Value::from(text));
        self.emit(Value::Object(value));
    }

    fn is_listened(&self) -> bool {
        Writer::is_listened(self)
    }
}

impl<F: Fn(&str) + Send + Sync> TokenSink for F {
    fn token(&self, text: &str) {
        self(text)
    }
}

/// Which tools the model may or must call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides (the APIs' default).
    Auto,
    /// No tool: the model answers in text.
    None,
    /// At least one tool (OpenAI's `required`, Anthropic's `any`).
    Required,
    /// This tool.
    Tool(String),
}

/// The options of a call; every one is left out of the request when unset, so the provider's
/// default holds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChatOptions {
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    pub top_p: Option<f64>,
    /// The most tokens the answer may have (Anthropic requires one: 4096 when unset).
    pub max_tokens: Option<u32>,
    /// Texts that end the answer.
    pub stop: Vec<String>,
    /// A seed for sampling (OpenAI-compatible servers).
    pub seed: Option<i64>,
    /// Which tools the model may or must call.
    pub tool_choice: Option<ToolChoice>,
    /// Whether the model may call several tools at once (both APIs allow it by default).
    pub parallel_tool_calls: Option<bool>,
    /// A final answer as JSON of this schema: OpenAI's `response_format` `json_schema`;
    /// on Anthropic, a tool of that schema the model must call, whose input becomes the
    /// answer's text.
    pub json_schema: Option<JsonSchema>,
    /// More fields of the request body, sent as they are (the OpenAI client's `extra_body`),
    /// written over the ones tea sets.
    pub extra: Map<String, Value>,
}

/// A schema the answer must follow ([`ChatOptions::json_schema`]).
#[derive(Clone, Debug, PartialEq)]
pub struct JsonSchema {
    /// A name for the schema (`^[a-zA-Z0-9_-]+$`).
    pub name: String,
    /// The JSON Schema.
    pub schema: Value,
    /// OpenAI's `strict`: the answer follows the schema exactly (the schema must then list
    /// every property as required and forbid additional ones).
    pub strict: bool,
}

impl ChatOptions {
    /// No option set.
    pub fn new() -> ChatOptions {
        ChatOptions::default()
    }

    /// Sets [`temperature`](Self::temperature).
    #[must_use]
    pub fn temperature(mut self, t: f64) -> Self {
        self.temperature = Some(t);
        self
    }

    /// Sets [`max_tokens`](Self::max_tokens).
    #[must_use]
    pub fn max_tokens(mut self, n: u32) -> Self {
        self.max_tokens = Some(n);
        self
    }

    /// Sets [`tool_choice`](Self::tool_choice).
    #[must_use]
    pub fn tool_choice(mut self, choice: ToolChoice) -> Self {
        self.tool_choice = Some(choice);
        self
    }

    /// Sets [`parallel_tool_calls`](Self::parallel_tool_calls).
    #[must_use]
    pub fn parallel_tool_calls(mut self, allowed: bool) -> Self {
        self.parallel_tool_calls = Some(allowed);
        self
    }

    /// Asks for a final answer in JSON following `schema` ([`JsonSchema`], strict).
    #[must_use]
    pub fn json_schema(mut self, name: impl Into<String>, schema: Value) -> Self {
        self.json_schema = Some(JsonSchema { name: name.into(), schema, strict: true });
        self
    }

    /// Adds a field to the request body as it is.
    #[must_use]
    pub fn extra(mut self, key: impl Into<String>, value: Value) -> Self {
        self.extra.insert(key.into(), value);
        self
    }
}

/// What a model answered.
#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    /// The assistant's message: its text and tool calls, its id the provider's response id.
    pub message: Message,
    /// The tokens the call used, as the provider counted them.
    pub usage: Usage,
    /// Why the answer ended, as the provider says it (`stop`, `tool_calls`, `length`;
    /// Anthropic's `end_turn`, `tool_use`, `max_tokens`).
    pub finish_reason: Option<String>,
    /// The model that answered, as the provider names it.
    pub model: Option<String>,
}

/// Tokens a call used; `None` where the provider did not say.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Tokens of the request (OpenAI's `prompt_tokens`, Anthropic's `input_tokens`).
    pub input_tokens: Option<u64>,
    /// Tokens of the answer (`completion_tokens`, `output_tokens`).
    pub output_tokens: Option<u64>,
}

impl Usage {
    /// Both counts added, when both are known.
    pub fn total(&self) -> Option<u64> {
        Some(self.input_tokens? + self.output_tokens?)
    }
}

/// Waits for `future` on this thread, on this crate's runtime. Inside a tokio runtime (where a
/// runtime cannot block), it waits on a thread of its own for the time of the call.
pub(crate) fn block_on<T: Send>(
    future: Pin<Box<dyn Future<Output = Result<T, ModelError>> + Send + '_>>,
) -> Result<T, ModelError> {
    static RUNTIME: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    let runtime = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("tea-models")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    });
    let runtime = runtime.as_ref().map_err(|why| ModelError::Runtime { why: why.clone() })?;
    if tokio::runtime::Handle::try_current().is_err() {
        return runtime.block_on(future);
    }
    std::thread::scope(|scope| {
        scope
            .spawn(|| runtime.block_on(future))
            .join()
            .unwrap_or_else(|_| Err(ModelError::Runtime { why: "the call panicked".to_owned() }))
    })
}
