//! Agents on chat models: typed tools ([`tool`]), running a model's tool calls with approval
//! ([`tool_node`]), the prebuilt tool-calling agent ([`react`]), and a scripted model for tests
//! ([`scripted`]). Built on the `chat` module's [`ChatModel`](crate::ChatModel) and the
//! engine's graph, fan-outs and pauses.

pub mod react;
pub mod scripted;
pub mod tool;
pub mod tool_node;
