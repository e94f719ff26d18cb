//! Chat models for [tea](https://docs.rs/tea): one [`ChatModel`] trait, and the providers that
//! speak the two APIs nearly every model is served through.
//!
//! - [`OpenAi`]: any OpenAI-compatible `chat/completions` endpoint — OpenAI, Azure OpenAI,
//!   Ollama, vLLM, llama.cpp's server, LiteLLM.
//! - [`Anthropic`]: Anthropic's Messages API.
//!
//! Both take tea's [`Message`](tea_runtime::Message)s and
//! [`ToolDefinition`](tea_runtime::ToolDefinition)s, return the assistant's message with its
//! [`ToolCall`](tea_runtime::ToolCall)s (several at once when the model calls tools in
//! parallel), and stream the answer's text to a [`TokenSink`] — a node's
//! [`Writer`](tea_runtime::Writer), so the tokens reach `stream()` and `tea serve` as they
//! arrive. A call makes one HTTP request through [reqwest]; retries, timeouts and caching are
//! the node's policies. YAML agents' `llm.call` sends through these same providers.
//!
//! ```no_run
//! use tea::prelude::*;
//! use tea::Message;
//! use tea_models::{ChatModel, ChatRequest, OpenAi};
//!
//! #[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
//! struct Chat {
//!     #[reducer(messages)]
//!     messages: Vec<Message>,
//! }
//!
//! struct Model(OpenAi);
//!
//! async fn answer(state: &Chat, ctx: &Ctx<Chat>) -> Result<ChatUpdate, tea::BoxError> {
//!     let model = &ctx.context::<Model>()?.0;
//!     let request = ChatRequest::new(&state.messages).stream_to(ctx.writer());
//!     let reply = model.chat(request).await?;
//!     Ok(Chat::update().messages(vec![reply.message]))
//! }
//! # fn main() {}
//! ```
//!
//! # Cargo features
//!
//! | feature | enables |
//! |---|---|
//! | `testing` | [`testing`]: a local OpenAI- and Anthropic-compatible server with scripted answers (axum) |
#![deny(missing_docs, missing_debug_implementations)]

// `react_agent`'s state derives `GraphState`, whose generated code names `::tea::__private::…`:
// here that is the engine's.
extern crate tea_runtime as tea;

mod agent;
mod anthropic;
mod chat;
mod error;
mod http;
mod openai;
#[cfg(feature = "testing")]
pub mod testing;

pub use anthropic::{Anthropic, ANTHROPIC_VERSION};
pub use chat::{ChatModel, ChatOptions, ChatRequest, JsonSchema, ModelFuture, Reply, TokenSink, ToolChoice, Usage};
pub use error::ModelError;
pub use http::{excerpt, RequestHook};
pub use openai::OpenAi;

pub use agent::react::{react_agent, AgentError, AgentNode, AgentState, AgentStateUpdate, ReactAgent};
pub use agent::scripted::{ScriptedModel, ScriptedRequest};
pub use agent::tool::{block_on, Tool, ToolArgument, ToolError, ToolExt, ToolFuture, WithApproval};
pub use agent::tool_node::{tool_message, tools_condition, Approval, ApprovalRequest, ToolNode, ToolsRoute};

/// What `#[tool]`'s generated code names, through the `tea` facade's `__private`.
#[doc(hidden)]
pub mod __private {
    pub use crate::agent::tool::{
        boxed_tool, tool_output, tool_param, tool_ready, tool_result, tool_without_memory, Tool, ToolArgs, ToolFuture,
        ToolParam, ToolSchema,
    };
    pub use schemars;
    pub use tea_runtime::Memory;
}
