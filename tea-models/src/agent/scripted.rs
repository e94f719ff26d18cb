//! [`ScriptedModel`]: a chat model that answers from a script, for tests of agents.

use crate::chat::{ChatModel, ChatRequest, ModelFuture, Reply, Usage};
use crate::error::ModelError;
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use tea_runtime::Message;

/// A chat model that answers each request with the next message of its script, and records
/// what it was asked: deterministic, with no network, for testing agents. A streamed request
/// gets the reply's text as tokens, a word at a time. Clones share the script and the record.
///
/// ```
/// use tea::models::{ChatModel, ChatRequest, ScriptedModel};
/// use tea::Message;
///
/// let model = ScriptedModel::new([Message::assistant("Hello")]);
/// let reply = model.chat_blocking(ChatRequest::new(&[Message::user("Hi")]))?;
/// assert_eq!(reply.message.text(), "Hello");
/// assert_eq!(model.requests()[0].messages, [Message::user("Hi")]);
/// assert!(model.chat_blocking(ChatRequest::new(&[])).is_err()); // the script is spent
/// # Ok::<(), tea::models::ModelError>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct ScriptedModel {
    inner: Arc<Mutex<Script>>,
}

#[derive(Debug, Default)]
struct Script {
    replies: VecDeque<Message>,
    requests: Vec<ScriptedRequest>,
}

/// A request a [`ScriptedModel`] received.
#[derive(Clone, Debug, PartialEq)]
pub struct ScriptedRequest {
    /// The messages sent.
    pub messages: Vec<Message>,
    /// The names of the tools offered.
    pub tools: Vec<String>,
    /// The JSON Schema the answer was asked to match, if any.
    pub json_schema: Option<Value>,
}

impl ScriptedModel {
    /// A model that answers with `replies`, in order.
    pub fn new(replies: impl IntoIterator<Item = Message>) -> Self {
        let script = Script { replies: replies.into_iter().collect(), requests: Vec::new() };
        ScriptedModel { inner: Arc::new(Mutex::new(script)) }
    }

    /// Adds `reply` at the end of the script.
    pub fn push(&self, reply: Message) {
        self.lock().replies.push_back(reply);
    }

    /// The requests received so far.
    pub fn requests(&self) -> Vec<ScriptedRequest> {
        self.lock().requests.clone()
    }

    /// How many replies are left.
    pub fn remaining(&self) -> usize {
        self.lock().replies.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Script> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn answer(&self, request: &ChatRequest<'_>) -> Result<Reply, ModelError> {
        let reply = {
            let mut script = self.lock();
            script.requests.push(ScriptedRequest {
                messages: request.messages.to_vec(),
                tools: request.tools.iter().map(|tool| tool.name.clone()).collect(),
                json_schema: request.options.json_schema.as_ref().map(|format| format.schema.clone()),
            });
            script.replies.pop_front()
        };
        let message = reply.ok_or_else(|| ModelError::Request {
            model: "scripted".to_owned(),
            why: "the script has no more replies".to_owned(),
        })?;
        if let Some(tokens) = request.tokens.as_ref().filter(|tokens| tokens.is_listened()) {
            for piece in message.text().split_inclusive(' ') {
                tokens.token(piece);
            }
        }
        Ok(Reply { message, usage: Usage::default(), finish_reason: None, model: Some("scripted".to_owned()) })
    }
}

impl ChatModel for ScriptedModel {
    fn model(&self) -> &str {
        "scripted"
    }

    fn chat<'a>(&'a self, request: ChatRequest<'a>) -> ModelFuture<'a> {
        Box::pin(std::future::ready(self.answer(&request)))
    }

    fn chat_blocking(&self, request: ChatRequest<'_>) -> Result<Reply, ModelError> {
        self.answer(&request)
    }
}
