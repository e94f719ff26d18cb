//! Running a model's tool calls: [`ToolNode`], approval ([`Approval`], [`ApprovalRequest`]),
//! and the routing helper [`tools_condition`].
//!
//! A call runs as one node run: in [`react_agent`](crate::react_agent), each call of an
//! assistant message is a send of the engine's fan-out (`parallel agent => tools* -> agent;`
//! in `graph!` terms), so several calls run at once, each branch durable like any branch: a
//! recover after a crash runs only the calls that had not finished, and a resume after an
//! approval pause runs only the call it answers.

use crate::agent::tool::{Tool, ToolError};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use std::sync::Arc;
use tea_runtime::{BoxError, Ctx, Hitl, Message, Pause, ToolCall, ToolDefinition};

/// The tools a model may call, run one call at a time by [`call`](Self::call).
///
/// ```
/// use tea::models::{ToolNode, Approval};
/// use tea::{tool, Ctx, Hitl, Message, MessagesState, ToolCall};
///
/// /// Deletes a file.
/// #[tool(approval)]
/// fn delete(path: String) -> String {
///     format!("deleted {path}")
/// }
///
/// let tools = ToolNode::new().with(Delete);
/// let call = ToolCall::new("call_1", "delete", serde_json::json!({"path": "notes.txt"}));
/// // In a node, `ctx` is the node's; here, one outside a run.
/// let ctx = Ctx::<MessagesState>::detached("tools");
/// // The first run pauses with the call, for a person to answer.
/// let mut first = Hitl::default();
/// assert!(tools.call_blocking(&call, &ctx, &mut first).is_err());
/// assert_eq!(first.paused_with().unwrap()["tool"], "delete");
/// // Resumed with an edit, the tool runs once, on the edited arguments.
/// let edit = serde_json::to_value(Approval::edit(serde_json::json!({"path": "old.txt"})))?;
/// let reply = tools.call_blocking(&call, &ctx, &mut Hitl::answering([edit]))?;
/// assert_eq!(reply, Message::tool("call_1", "deleted old.txt"));
/// # Ok::<(), tea::BoxError>(())
/// ```
#[derive(Clone, Default)]
pub struct ToolNode {
    tools: Vec<Arc<dyn Tool>>,
}

impl fmt::Debug for ToolNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.tools.iter().map(|tool| tool.name())).finish()
    }
}

impl ToolNode {
    /// No tools yet.
    pub fn new() -> Self {
        ToolNode { tools: Vec::new() }
    }

    /// These tools and `tool`. A tool of the same name as one already given replaces it.
    #[must_use]
    pub fn with(mut self, tool: impl Tool) -> Self {
        self.push(Arc::new(tool));
        self
    }

    /// Adds `tool` (replacing a tool of the same name).
    pub fn push(&mut self, tool: Arc<dyn Tool>) {
        match self.tools.iter_mut().find(|known| known.name() == tool.name()) {
            Some(known) => *known = tool,
            None => self.tools.push(tool),
        }
    }

    /// The tools, in the order given.
    pub fn tools(&self) -> &[Arc<dyn Tool>] {
        &self.tools
    }

    /// The tool named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.iter().find(|tool| tool.name() == name)
    }

    /// The tools as the model is shown them.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.tools.iter().map(|tool| tool.definition()).collect()
    }

    /// Runs `call` and returns its tool message: the tool's result, or the error text the model
    /// reads to correct its call (bad arguments, an unknown tool, a failure, a rejection).
    ///
    /// A tool that [needs approval](Tool::needs_approval) pauses the run first, through `hitl`,
    /// with an [`ApprovalRequest`] as the pause's value; the resume's answer is an
    /// [`Approval`], and the tool runs on the approved or edited arguments, or not at all. A tool
    /// that [uses memory](Tool::uses_memory) (a `#[tool]` with a `&Memory` parameter) runs with
    /// the node's [`ctx.store()`](Ctx::store): the app's long-term memory, shared by its threads.
    ///
    /// # Errors
    /// [`Pause`] when the run pauses for approval (propagate it with `?`);
    /// [`Error::NoMemory`](tea_runtime::Error::NoMemory) when the tool uses memory and the app
    /// has neither a checkpointer nor a memory.
    pub async fn call<S>(&self, call: &ToolCall, ctx: &Ctx<S>, hitl: &mut Hitl) -> Result<Message, BoxError> {
        let result = match self.arguments(call, hitl)? {
            Ok((tool, arguments)) if tool.uses_memory() => tool.call_with_memory(arguments, ctx.store()?).await,
            Ok((tool, arguments)) => tool.call(arguments).await,
            Err(error) => Err(error),
        };
        Ok(tool_message(call, result))
    }

    /// [`call`](Self::call) on the calling thread: for sync tools (an async tool is polled to its
    /// end, which a tool needing tokio's reactor cannot be: run those under the async API).
    ///
    /// # Errors
    /// As [`call`](Self::call).
    pub fn call_blocking<S>(&self, call: &ToolCall, ctx: &Ctx<S>, hitl: &mut Hitl) -> Result<Message, BoxError> {
        crate::agent::tool::block_on(self.call(call, ctx, hitl))
    }

    /// The tool to run and its arguments, once approved; or the error that stands for its result.
    fn arguments(&self, call: &ToolCall, hitl: &mut Hitl) -> Result<Approved, Pause> {
        let Some(tool) = self.get(&call.name) else {
            let known = self.tools.iter().map(|tool| tool.name().to_owned()).collect();
            return Ok(Err(ToolError::UnknownTool { tool: call.name.clone(), known }));
        };
        if !tool.needs_approval() {
            return Ok(Ok((tool.clone(), call.arguments.clone())));
        }
        let request = ApprovalRequest {
            tool_call_id: call.id.clone(),
            tool: call.name.clone(),
            arguments: call.arguments.clone(),
            description: tool.description().to_owned(),
        };
        Ok(match hitl.interrupt::<Approval>(&request)? {
            Approval::Approve => Ok((tool.clone(), call.arguments.clone())),
            Approval::Edit { arguments } => Ok((tool.clone(), arguments)),
            Approval::Reject { reason } => Err(ToolError::Rejected { tool: call.name.clone(), reason }),
        })
    }
}

/// The tool to run and its arguments once approved, or the error that stands for its result.
type Approved = Result<(Arc<dyn Tool>, Value), ToolError>;

/// A tool message answering `call` with `result`: the result's text (a JSON string as itself,
/// any other value as JSON), or the error's.
pub fn tool_message(call: &ToolCall, result: Result<Value, ToolError>) -> Message {
    let content = match result {
        Ok(Value::String(text)) => text,
        Ok(value) => value.to_string(),
        Err(error) => error.to_string(),
    };
    Message::tool(call.id.clone(), content)
}

/// The value of an approval pause: the call waiting for a person.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    /// The call's id.
    pub tool_call_id: String,
    /// The tool's name.
    pub tool: String,
    /// The arguments the model wrote.
    pub arguments: Value,
    /// What the tool does.
    pub description: String,
}

/// A person's answer to an [`ApprovalRequest`], given as the resume's answer:
/// `resume.answer(Approval::Approve)` (or `answer_to(id, …)` when several calls wait).
///
/// As JSON: `{"decision": "approve"}`, `{"decision": "edit", "arguments": {…}}`,
/// `{"decision": "reject", "reason": "…"}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "lowercase", deny_unknown_fields)]
pub enum Approval {
    /// Run the call as the model wrote it.
    Approve,
    /// Run the call on these arguments instead.
    Edit {
        /// The arguments to run the tool on.
        arguments: Value,
    },
    /// Do not run the call; the model is told so (and why, if a reason is given).
    Reject {
        /// Why, for the model.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

impl Approval {
    /// Run the call on `arguments` instead.
    pub fn edit(arguments: impl Into<Value>) -> Self {
        Approval::Edit { arguments: arguments.into() }
    }

    /// Do not run the call, telling the model `reason`.
    pub fn reject(reason: impl Into<String>) -> Self {
        Approval::Reject { reason: Some(reason.into()) }
    }
}

/// Where a conversation goes after the model's turn: [`tools_condition`]'s answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolsRoute {
    /// The last message is an assistant message that calls tools: run them.
    Tools,
    /// It is not: the conversation's turn is over.
    End,
}

/// Whether the last message calls tools (LangGraph's `tools_condition`): use it in a guard or
/// a router of your own graph, `agent -> tools if wants_tools; agent -> end;`.
///
/// ```
/// use tea::models::{tools_condition, ToolsRoute};
/// use tea::{Message, ToolCall};
///
/// let call = ToolCall::new("call_1", "add", serde_json::json!({"a": 1, "b": 2}));
/// assert_eq!(tools_condition(&[Message::tool_calls_of(vec![call])]), ToolsRoute::Tools);
/// assert_eq!(tools_condition(&[Message::assistant("3")]), ToolsRoute::End);
/// ```
pub fn tools_condition(messages: &[Message]) -> ToolsRoute {
    match messages.last() {
        Some(last @ Message::Assistant { .. }) if !last.tool_calls().is_empty() => ToolsRoute::Tools,
        _ => ToolsRoute::End,
    }
}
