//! [`react_agent`]: a model calling tools in a loop, as an ordinary tea graph.
//!
//! Three nodes: `agent` asks the model (with the tools' definitions, the system prompt, and the
//! answer's JSON Schema when one is asked for) and routes to `dispatch` when its reply calls
//! tools, to itself when a structured answer must be tried again, or to the end; `dispatch`
//! sends each call of the reply to `tools`, the branches of a fan-out whose join is `agent`
//! again (`parallel dispatch => tools* -> agent;` in `graph!` terms). Each `tools` branch runs
//! one call through a [`ToolNode`], pausing first for a tool that needs approval. It is a hand-written
//! [`Graph`] over these two nodes, so the engine's fan-outs, pauses, checkpoints, tokens and
//! recover serve it as they serve any graph.

use crate::agent::tool_node::ToolNode;
use crate::chat::{ChatModel, ChatOptions, ChatRequest, TokenSink};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use std::sync::Arc;
use tea_runtime::__private::NodeStep;
use tea_runtime::{
    BoxError, Builder, Ctx, Fork, Goto, Graph, GraphState, Hitl, Message, NodeFuture, NodeId, NodeName, SyncGraph,
    ToolCall, ToolDefinition,
};

/// The state of a [`react_agent`]: the conversation, and the final answer decoded when the
/// agent was asked for one ([`ReactAgent::output`]).
#[derive(tea_macros::GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentState {
    /// The conversation, merged by the `messages` reducer (append; a known id replaces).
    #[reducer(messages)]
    pub messages: Vec<Message>,
    /// The final answer as JSON, checked against the output type, when the agent was built
    /// with [`ReactAgent::output`]; read it typed with [`AgentState::structured`].
    pub structured_response: Option<Value>,
    /// In a `tools` branch, the call that branch runs (the send's input, never merged into the
    /// conversation's state).
    pub call: Option<ToolCall>,
}

impl AgentState {
    /// A conversation that starts with the person saying `text`.
    pub fn user(text: impl Into<String>) -> Self {
        AgentState { messages: vec![Message::user(text.into())], ..AgentState::default() }
    }

    /// The last message's text (the model's final answer, once the agent is done).
    pub fn last_text(&self) -> String {
        self.messages.last().map(Message::text).unwrap_or_default()
    }

    /// The final answer decoded as `T` (the type given to [`ReactAgent::output`]).
    ///
    /// # Errors
    /// [`AgentError::NoOutput`] when there is none, [`AgentError::OutputMismatch`] when it is
    /// not a `T`.
    pub fn structured<T: DeserializeOwned>(&self) -> Result<T, AgentError> {
        let value = self.structured_response.clone().ok_or(AgentError::NoOutput)?;
        serde_json::from_value(value).map_err(|error| AgentError::OutputMismatch { reason: error.to_string() })
    }
}

/// Why a [`react_agent`]'s node failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum AgentError {
    /// The model took `steps` turns since the person last spoke without finishing.
    #[error("the agent stopped after {steps} model calls without a final answer (its step limit); raise it with `max_steps`")]
    StepLimit {
        /// The limit reached.
        steps: u32,
    },
    /// A `tools` node ran without a call: it runs only as a send of the `agent` node.
    #[error("the `tools` node ran without a tool call: it runs only as one of the `agent` node's sends")]
    NoCall,
    /// The state holds no final answer: the agent was built without an output type, or has not
    /// finished.
    #[error("the state holds no structured answer: build the agent with `.output::<T>()` and let it finish")]
    NoOutput,
    /// The final answer is not of the type asked for.
    #[error("the structured answer does not match its type: {reason}")]
    OutputMismatch {
        /// serde's reason.
        reason: String,
    },
}

/// The nodes of a [`ReactAgent`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AgentNode {
    /// Asks the model, and routes to `dispatch`, to itself (a structured answer tried again) or
    /// to the end.
    Agent,
    /// Sends each tool call of the model's reply to `tools`.
    Dispatch,
    /// Runs one tool call (one branch of the agent's fan-out per call).
    Tools,
}

impl NodeId for AgentNode {
    type State = AgentState;

    fn node_str(self) -> Option<&'static str> {
        Some(match self {
            AgentNode::Agent => "agent",
            AgentNode::Dispatch => "dispatch",
            AgentNode::Tools => "tools",
        })
    }

    fn from_node_str(name: &str) -> Option<Self> {
        match name {
            "agent" => Some(AgentNode::Agent),
            "dispatch" => Some(AgentNode::Dispatch),
            "tools" => Some(AgentNode::Tools),
            _ => None,
        }
    }
}

/// The answer type asked for: its name and JSON Schema, sent to the model, and its check.
#[derive(Clone)]
struct Output {
    name: String,
    schema: Value,
    check: fn(&Value) -> Result<(), String>,
}

/// A model calling tools in a loop until it answers (LangGraph's `create_react_agent`): the
/// graph [`react_agent`] makes. Set it up with its builder methods, then run it as any graph:
/// `agent.builder().checkpointer(store).build()`.
///
/// ```
/// use tea::models::{react_agent, AgentState, ScriptedModel, ToolNode};
/// use tea::{tool, Message, MemoryStore, ToolCall};
///
/// /// Adds two numbers.
/// #[tool]
/// fn add(a: i64, b: i64) -> i64 {
///     a + b
/// }
///
/// // A model that calls `add` once, then answers with the tool's result.
/// let model = ScriptedModel::new([
///     Message::tool_calls_of(vec![ToolCall::new("call_1", "add", serde_json::json!({"a": 2, "b": 3}))]),
///     Message::assistant("2 + 3 = 5"),
/// ]);
/// let app = react_agent(model, ToolNode::new().with(Add))
///     .system_prompt("You add numbers.")
///     .builder()
///     .checkpointer(MemoryStore::new())
///     .build();
/// let done = app.invoke(AgentState::user("What is 2 + 3?"))?.done().unwrap();
/// assert_eq!(done.messages[2].text(), "5"); // the tool's message
/// assert_eq!(done.structured_response, None);
/// assert_eq!(done.last_text(), "2 + 3 = 5");
/// # Ok::<(), tea::Error>(())
/// ```
pub struct ReactAgent {
    name: String,
    model: Arc<dyn ChatModel>,
    tools: ToolNode,
    definitions: Vec<ToolDefinition>,
    system: Option<String>,
    max_steps: u32,
    output: Option<Output>,
    options: ChatOptions,
    on_token: Option<OnToken>,
}

/// The agent's token callback ([`ReactAgent::on_token`]).
type OnToken = Arc<dyn Fn(&str) + Send + Sync>;

/// Where the model's tokens go: the node's stream, and the agent's `on_token` callback.
struct Tokens {
    writer: tea_runtime::Writer,
    callback: Option<OnToken>,
}

impl TokenSink for Tokens {
    fn token(&self, text: &str) {
        self.writer.token(text);
        if let Some(callback) = &self.callback {
            callback(text);
        }
    }

    fn is_listened(&self) -> bool {
        self.callback.is_some() || self.writer.is_listened()
    }
}

impl fmt::Debug for ReactAgent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReactAgent")
            .field("name", &self.name)
            .field("model", &self.model.model())
            .field("tools", &self.tools)
            .field("max_steps", &self.max_steps)
            .field("output", &self.output.as_ref().map(|o| &o.name))
            .finish_non_exhaustive()
    }
}

/// A model calling `tools` in a loop until it answers: see [`ReactAgent`].
pub fn react_agent(model: impl ChatModel + 'static, tools: impl Into<ToolNode>) -> ReactAgent {
    let tools = tools.into();
    ReactAgent {
        name: "react_agent".to_owned(),
        model: Arc::new(model),
        definitions: tools.definitions(),
        tools,
        system: None,
        max_steps: ReactAgent::DEFAULT_MAX_STEPS,
        output: None,
        options: ChatOptions::default(),
        on_token: None,
    }
}

impl ReactAgent {
    /// How many times the model is asked per turn of the person's, unless
    /// [`max_steps`](Self::max_steps) says otherwise.
    pub const DEFAULT_MAX_STEPS: u32 = 25;

    /// The graph's name (in checkpoints, tokens and traces); `react_agent` by default.
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Instructions sent first in every request (not stored in the conversation).
    #[must_use]
    pub fn system_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.system = Some(prompt.into());
        self
    }

    /// The model may be asked at most `steps` times after the person's last message; one more
    /// fails the run with [`AgentError::StepLimit`] (the thread keeps its checkpoints).
    #[must_use]
    pub fn max_steps(mut self, steps: u32) -> Self {
        self.max_steps = steps.max(1);
        self
    }

    /// Calls `callback` with each piece of the model's text as it arrives (the model is asked
    /// for a streamed answer), besides the run's stream (`Event::Custom` values
    /// `{"type": "token", "text": …}`): a terminal chat prints them from here under the blocking
    /// API, whose stream yields a node's tokens when the node is done.
    #[must_use]
    pub fn on_token(mut self, callback: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.on_token = Some(Arc::new(callback));
        self
    }

    /// Options for every request (temperature, token limit, …).
    #[must_use]
    pub fn options(mut self, options: ChatOptions) -> Self {
        self.options = options;
        self
    }

    /// The final answer is a `T`: its JSON Schema (schemars) is sent to the model as the
    /// answer's format, and the answer is checked on the way back; one that does not decode as
    /// a `T` is sent back to the model with serde's reason, for another try (within the step
    /// limit). The answer is then in [`AgentState::structured_response`], read typed with
    /// [`AgentState::structured`].
    #[must_use]
    pub fn output<T: DeserializeOwned + schemars::JsonSchema>(mut self) -> Self {
        fn check<T: DeserializeOwned>(value: &Value) -> Result<(), String> {
            T::deserialize(value).map(drop).map_err(|error| error.to_string())
        }
        let mut schema = schemars::generate::SchemaSettings::draft2020_12();
        schema.inline_subschemas = true;
        let schema = schema.into_generator().into_root_schema_for::<T>().to_value();
        let name: String =
            T::schema_name().chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
        self.output = Some(Output { name, schema, check: check::<T> });
        self
    }

    /// An app builder for this graph: add a checkpointer (the agent can pause for approvals)
    /// and build.
    pub fn builder(self) -> Builder<ReactAgent> {
        Builder::new(self)
    }

    /// The tools the agent calls.
    pub fn tools(&self) -> &ToolNode {
        &self.tools
    }

    /// The request's messages: the system prompt, then the conversation.
    fn conversation(&self, state: &AgentState) -> Vec<Message> {
        let mut messages = Vec::with_capacity(state.messages.len() + 1);
        if let Some(system) = &self.system {
            messages.push(Message::system(system.as_str()));
        }
        messages.extend(state.messages.iter().filter(|m| !matches!(m, Message::Remove { .. })).cloned());
        messages
    }

    /// The model's turns since the person last spoke.
    fn steps(state: &AgentState) -> u32 {
        let turn = state.messages.iter().rposition(|m| matches!(m, Message::User { .. })).map_or(0, |i| i + 1);
        let steps = state.messages[turn..].iter().filter(|m| matches!(m, Message::Assistant { .. })).count();
        u32::try_from(steps).unwrap_or(u32::MAX)
    }

    fn tokens(&self, ctx: &Ctx<AgentState>) -> Tokens {
        Tokens { writer: ctx.writer(), callback: self.on_token.clone() }
    }

    fn options_for_request(&self) -> ChatOptions {
        let mut options = self.options.clone();
        if let Some(output) = &self.output {
            options = options.json_schema(output.name.clone(), output.schema.clone());
        }
        options
    }

    fn check_steps(&self, state: &AgentState) -> Result<(), BoxError> {
        if Self::steps(state) >= self.max_steps {
            return Err(Box::new(AgentError::StepLimit { steps: self.max_steps }));
        }
        Ok(())
    }

    /// The agent node's step for the model's `reply`.
    fn after_reply(&self, reply: Message) -> NodeStep<AgentState, AgentNode> {
        if !reply.tool_calls().is_empty() {
            return NodeStep::new(
                Some(AgentState::update().messages(vec![reply])),
                Some(Goto::Node(AgentNode::Dispatch)),
            );
        }
        let Some(output) = &self.output else {
            return NodeStep::new(Some(AgentState::update().messages(vec![reply])), Some(Goto::End));
        };
        let text = reply.text();
        let checked = serde_json::from_str::<Value>(text.trim())
            .map_err(|error| format!("it is not JSON ({error})"))
            .and_then(|value| (output.check)(&value).map(|()| value));
        match checked {
            Ok(value) => NodeStep::new(
                Some(AgentState::update().messages(vec![reply]).structured_response(Some(value))),
                Some(Goto::End),
            ),
            Err(reason) => {
                let retry = Message::user(format!(
                    "Your answer does not match the required JSON Schema `{}`: {reason}. \
                     Answer again with only a JSON value that matches this schema: {}",
                    output.name, output.schema
                ));
                NodeStep::new(
                    Some(AgentState::update().messages(vec![reply, retry])),
                    Some(Goto::Node(AgentNode::Agent)),
                )
            }
        }
    }

    fn call_of(state: &AgentState) -> Result<&ToolCall, BoxError> {
        state.call.as_ref().ok_or_else(|| Box::new(AgentError::NoCall) as BoxError)
    }
}

/// The dispatch node's step: a send to `tools` for each call of the last message.
fn dispatch_step(state: &AgentState) -> NodeStep<AgentState, AgentNode> {
    let calls = state.messages.last().map(Message::tool_calls).unwrap_or_default();
    let sends = calls.iter().map(|call| (AgentNode::Tools, AgentState::update().call(Some(call.clone())))).collect();
    NodeStep::with_sends(None, sends)
}

fn tool_step(message: Message) -> NodeStep<AgentState, AgentNode> {
    NodeStep::new(Some(AgentState::update().messages(vec![message])), None)
}

/// The graph's shape, for its fingerprint (FNV-1a): two nodes, a fan-out by sends whose join is
/// the agent, an edge to the end.
const SHAPE: &str =
    "react_agent: start -> agent; agent -> dispatch | agent | end; parallel dispatch => tools* -> agent;";

fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3))
}

const HEADS: &[AgentNode] = &[AgentNode::Tools];

impl Graph for ReactAgent {
    type State = AgentState;
    type Node = AgentNode;

    fn name(&self) -> &str {
        &self.name
    }

    fn fingerprint(&self) -> u64 {
        fnv(SHAPE) ^ AgentState::SCHEMA_FINGERPRINT
    }

    fn node_name(&self, node: AgentNode) -> NodeName {
        NodeName::from(node.node_str().unwrap_or("agent"))
    }

    fn start(&self, _: &AgentState) -> Option<Goto<AgentNode>> {
        Some(Goto::Node(AgentNode::Agent))
    }

    fn run(
        &self,
        node: AgentNode,
        state: &AgentState,
        ctx: &Ctx<AgentState>,
        hitl: &mut Hitl,
    ) -> Result<NodeStep<AgentState, AgentNode>, BoxError> {
        match node {
            AgentNode::Agent => {
                self.check_steps(state)?;
                let messages = self.conversation(state);
                let request = ChatRequest::new(&messages)
                    .tools(&self.definitions)
                    .options(self.options_for_request())
                    .stream_to(self.tokens(ctx));
                let reply = self.model.chat_blocking(request)?;
                Ok(self.after_reply(reply.message))
            }
            AgentNode::Dispatch => Ok(dispatch_step(state)),
            AgentNode::Tools => {
                let call = Self::call_of(state)?;
                Ok(tool_step(self.tools.call_blocking(call, ctx, hitl)?))
            }
        }
    }

    fn awaits(&self, node: AgentNode) -> bool {
        node != AgentNode::Dispatch
    }

    fn run_async<'a>(
        &'a self,
        node: AgentNode,
        state: &'a AgentState,
        ctx: &'a Ctx<AgentState>,
        hitl: &'a mut Hitl,
    ) -> NodeFuture<'a, AgentState, AgentNode> {
        Box::pin(async move {
            match node {
                AgentNode::Agent => {
                    self.check_steps(state)?;
                    let messages = self.conversation(state);
                    let request = ChatRequest::new(&messages)
                        .tools(&self.definitions)
                        .options(self.options_for_request())
                        .stream_to(self.tokens(ctx));
                    let reply = self.model.chat(request).await?;
                    Ok(self.after_reply(reply.message))
                }
                AgentNode::Dispatch => Ok(dispatch_step(state)),
                AgentNode::Tools => {
                    let call = Self::call_of(state)?;
                    Ok(tool_step(self.tools.call(call, ctx, hitl).await?))
                }
            }
        })
    }

    fn route(&self, node: AgentNode, _: &AgentState) -> Option<Goto<AgentNode>> {
        self.fixed_route(node)
    }

    fn fixed_route(&self, node: AgentNode) -> Option<Goto<AgentNode>> {
        match node {
            // The agent routes by its step, dispatch by its sends; a tools branch ends at its
            // join, the agent.
            AgentNode::Agent | AgentNode::Dispatch => None,
            AgentNode::Tools => Some(Goto::Node(AgentNode::Agent)),
        }
    }

    fn reads_branches(&self, _: AgentNode) -> bool {
        false
    }

    fn can_goto(&self, from: AgentNode, to: Goto<AgentNode>) -> bool {
        from == AgentNode::Agent && matches!(to, Goto::End | Goto::Node(AgentNode::Agent | AgentNode::Dispatch))
    }

    fn node_named(&self, name: &str) -> Option<AgentNode> {
        AgentNode::from_node_str(name)
    }

    fn sends(&self, node: AgentNode) -> bool {
        node == AgentNode::Dispatch
    }

    fn fork(&self, node: AgentNode) -> Option<Fork<'_, AgentNode>> {
        (node == AgentNode::Dispatch).then_some(Fork { heads: HEADS, join: AgentNode::Agent })
    }
}

impl SyncGraph for ReactAgent {}

impl From<Vec<Arc<dyn crate::agent::tool::Tool>>> for ToolNode {
    fn from(tools: Vec<Arc<dyn crate::agent::tool::Tool>>) -> Self {
        let mut node = ToolNode::new();
        for tool in tools {
            node.push(tool);
        }
        node
    }
}
