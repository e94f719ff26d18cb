//! Tools a model calls: the [`Tool`] trait `#[tool]` implements, its errors, and the helpers
//! the generated code names (decoding a call's JSON arguments one parameter at a time, and the
//! parameters' JSON Schema made with `schemars`).

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tea_runtime::{Memory, ToolDefinition};

/// What [`Tool::call`] returns: a boxed future of the tool's result as JSON.
pub type ToolFuture = Pin<Box<dyn Future<Output = Result<Value, ToolError>> + Send + 'static>>;

/// A tool a model can call: its name, description and parameters' JSON Schema (what the model
/// is shown), and the call itself, on the model's JSON arguments.
///
/// `#[tool]` implements it for a function; implement it by hand for a tool whose parameters
/// are known only at run time.
///
/// ```
/// use tea::models::{Tool, ToolError};
/// use tea::tool;
///
/// /// Adds two numbers.
/// #[tool]
/// fn add(
///     /// The first number.
///     a: i64,
///     /// The second number.
///     b: i64,
/// ) -> i64 {
///     a + b
/// }
///
/// assert_eq!(Add.name(), "add");
/// assert_eq!(Add.description(), "Adds two numbers.");
/// assert_eq!(Add.parameters()["required"], serde_json::json!(["a", "b"]));
/// let sum = tea::models::block_on(Add.call(serde_json::json!({"a": 2, "b": 3})));
/// assert_eq!(sum, Ok(serde_json::json!(5)));
/// // Bad arguments are an error the model can read and correct, never a panic.
/// let wrong = tea::models::block_on(Add.call(serde_json::json!({"a": "two"}))).unwrap_err();
/// assert!(matches!(wrong, ToolError::BadArguments { .. }));
/// assert!(wrong.to_string().contains("`a`"));
/// assert!(wrong.to_string().contains("`b` is missing"));
/// ```
pub trait Tool: Send + Sync + 'static {
    /// The tool's name, as the model calls it.
    fn name(&self) -> &str;

    /// What the tool does, for the model to decide when to call it.
    fn description(&self) -> &str;

    /// The JSON Schema of the tool's arguments: an object with one property per parameter.
    fn parameters(&self) -> Value;

    /// Whether each call waits for a person's [`Approval`](crate::Approval) before it runs
    /// (`#[tool(approval)]`, or [`ToolExt::with_approval`]).
    fn needs_approval(&self) -> bool {
        false
    }

    /// Runs the tool on `arguments`, the JSON the model wrote. Arguments that do not fit the
    /// parameters are [`ToolError::BadArguments`], whose text tells the model what to fix.
    fn call(&self, arguments: Value) -> ToolFuture;

    /// Whether the tool reads or writes the app's long-term [`Memory`] (a `#[tool]` function
    /// with a `&Memory` parameter): a [`ToolNode`](crate::ToolNode) then runs it with
    /// [`call_with_memory`](Self::call_with_memory), on the node's `ctx.store()`.
    fn uses_memory(&self) -> bool {
        false
    }

    /// [`call`](Self::call), with the app's memory at hand (by default the memory is not used).
    fn call_with_memory(&self, arguments: Value, memory: &Memory) -> ToolFuture {
        let _ = memory;
        self.call(arguments)
    }

    /// The tool as a model is shown it.
    fn definition(&self) -> ToolDefinition {
        ToolDefinition::new(self.name(), self.description(), self.parameters())
    }
}

impl<T: Tool + ?Sized> Tool for Arc<T> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn description(&self) -> &str {
        (**self).description()
    }
    fn parameters(&self) -> Value {
        (**self).parameters()
    }
    fn needs_approval(&self) -> bool {
        (**self).needs_approval()
    }
    fn call(&self, arguments: Value) -> ToolFuture {
        (**self).call(arguments)
    }
    fn uses_memory(&self) -> bool {
        (**self).uses_memory()
    }
    fn call_with_memory(&self, arguments: Value, memory: &Memory) -> ToolFuture {
        (**self).call_with_memory(arguments, memory)
    }
}

impl<T: Tool + ?Sized> Tool for Box<T> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn description(&self) -> &str {
        (**self).description()
    }
    fn parameters(&self) -> Value {
        (**self).parameters()
    }
    fn needs_approval(&self) -> bool {
        (**self).needs_approval()
    }
    fn call(&self, arguments: Value) -> ToolFuture {
        (**self).call(arguments)
    }
    fn uses_memory(&self) -> bool {
        (**self).uses_memory()
    }
    fn call_with_memory(&self, arguments: Value, memory: &Memory) -> ToolFuture {
        (**self).call_with_memory(arguments, memory)
    }
}

/// What every [`Tool`] can be turned into.
pub trait ToolExt: Tool + Sized {
    /// This tool, with each call waiting for a person's [`Approval`](crate::Approval).
    fn with_approval(self) -> WithApproval<Self> {
        WithApproval(self)
    }
}

impl<T: Tool> ToolExt for T {}

/// A tool whose every call waits for a person's approval ([`ToolExt::with_approval`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct WithApproval<T>(pub T);

impl<T: Tool> Tool for WithApproval<T> {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn description(&self) -> &str {
        self.0.description()
    }
    fn parameters(&self) -> Value {
        self.0.parameters()
    }
    fn needs_approval(&self) -> bool {
        true
    }
    fn call(&self, arguments: Value) -> ToolFuture {
        self.0.call(arguments)
    }
    fn uses_memory(&self) -> bool {
        self.0.uses_memory()
    }
    fn call_with_memory(&self, arguments: Value, memory: &Memory) -> ToolFuture {
        self.0.call_with_memory(arguments, memory)
    }
}

/// Why a tool call gave no result. Its text (`Display`) is what the model reads in the tool
/// message, so that it can correct its call.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ToolError {
    /// The arguments do not fit the tool's parameters.
    BadArguments {
        /// The tool called.
        tool: String,
        /// Each problem, naming its argument.
        problems: Vec<String>,
    },
    /// The tool ran and returned an error (its `Err`'s text).
    Failed {
        /// The tool called.
        tool: String,
        /// The error's text.
        message: String,
    },
    /// The model called a tool it was not given.
    UnknownTool {
        /// The name the model wrote.
        tool: String,
        /// The tools it has.
        known: Vec<String>,
    },
    /// A person rejected the call.
    Rejected {
        /// The tool called.
        tool: String,
        /// What the person said, if anything.
        reason: Option<String>,
    },
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolError::BadArguments { tool, problems } => write!(
                f,
                "error: the arguments of `{tool}` do not fit its parameters: {}. Call `{tool}` again with arguments that match its JSON Schema.",
                problems.join("; ")
            ),
            ToolError::Failed { tool, message } => write!(f, "error: `{tool}` failed: {message}"),
            ToolError::UnknownTool { tool, known } => write!(
                f,
                "error: there is no tool `{tool}`; the tools are: {}",
                known.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
            ),
            ToolError::Rejected { tool, reason: None } => {
                write!(f, "the person rejected this call of `{tool}`: it did not run")
            }
            ToolError::Rejected { tool, reason: Some(reason) } => {
                write!(f, "the person rejected this call of `{tool}`: it did not run. They said: {reason}")
            }
        }
    }
}

impl std::error::Error for ToolError {}

/// Runs `future` to its end on the calling thread (a sync tool's future is ready at once; an
/// async one is polled, the thread parked between its wake-ups). For the blocking API and for
/// tests; a tool that needs a tokio runtime must run under the async API.
pub fn block_on<F: Future>(future: F) -> F::Output {
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut context = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        match future.as_mut().poll(&mut context) {
            Poll::Ready(output) => return output,
            Poll::Pending => std::thread::park(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// What `#[tool]`'s generated code names (through `tea::__private`).

/// The types a tool's parameter may have: decoded from JSON, described by a JSON Schema.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be the type of a tool's parameter",
    label = "a tool's parameter is decoded from the model's JSON and described to it by a JSON Schema",
    note = "its type needs `serde::Deserialize` and `schemars::JsonSchema`: derive both, `#[derive(serde::Deserialize, schemars::JsonSchema)]`"
)]
pub trait ToolArgument: DeserializeOwned + schemars::JsonSchema {}

impl<T: DeserializeOwned + schemars::JsonSchema> ToolArgument for T {}

/// A parameter's schema and decoder, made once per parameter where its type is checked.
#[doc(hidden)]
#[allow(missing_debug_implementations)]
pub struct ToolParam<T> {
    /// The parameter's JSON Schema.
    pub schema: fn(&mut schemars::SchemaGenerator) -> schemars::Schema,
    /// Decodes the parameter from its JSON value.
    pub decode: fn(Value) -> Result<T, serde_json::Error>,
}

/// The schema and decoder of a parameter of type `T`.
#[doc(hidden)]
pub const fn tool_param<T: ToolArgument>() -> ToolParam<T> {
    fn schema<T: ToolArgument>(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        generator.subschema_for::<T>()
    }
    fn decode<T: ToolArgument>(value: Value) -> Result<T, serde_json::Error> {
        serde_json::from_value(value)
    }
    ToolParam { schema: schema::<T>, decode: decode::<T> }
}

/// A tool's parameters' JSON Schema, one property at a time.
#[doc(hidden)]
#[derive(Debug)]
pub struct ToolSchema {
    generator: schemars::SchemaGenerator,
    properties: Map<String, Value>,
    required: Vec<Value>,
}

impl Default for ToolSchema {
    fn default() -> Self {
        Self::new()
    }
}

impl ToolSchema {
    /// An object schema with no properties yet; subschemas are written inline (models read
    /// them better than `$ref`s).
    pub fn new() -> Self {
        let mut settings = schemars::generate::SchemaSettings::draft2020_12();
        settings.inline_subschemas = true;
        ToolSchema { generator: settings.into_generator(), properties: Map::new(), required: Vec::new() }
    }

    /// Adds the property `key`, described by `doc` (if not empty), required unless `optional`.
    pub fn param(
        &mut self,
        key: &str,
        doc: &str,
        optional: bool,
        schema: fn(&mut schemars::SchemaGenerator) -> schemars::Schema,
    ) {
        let mut property = schema(&mut self.generator).to_value();
        if !doc.is_empty() {
            if let Value::Object(object) = &mut property {
                object.insert("description".into(), Value::String(doc.to_owned()));
            } else {
                property = serde_json::json!({ "description": doc, "allOf": [property] });
            }
        }
        self.properties.insert(key.to_owned(), property);
        if !optional {
            self.required.push(Value::String(key.to_owned()));
        }
    }

    /// The schema: `{"type": "object", "properties": …, "required": …}`, with the definitions
    /// of recursive types under `$defs`.
    pub fn finish(mut self) -> Value {
        let mut schema = Map::new();
        schema.insert("type".into(), "object".into());
        schema.insert("properties".into(), Value::Object(std::mem::take(&mut self.properties)));
        schema.insert("required".into(), Value::Array(std::mem::take(&mut self.required)));
        schema.insert("additionalProperties".into(), Value::Bool(false));
        let definitions = self.generator.take_definitions(true);
        if !definitions.is_empty() {
            schema.insert("$defs".into(), Value::Object(definitions));
        }
        Value::Object(schema)
    }
}

/// A call's arguments, taken one parameter at a time; every problem is collected, so the
/// model hears of all of them at once.
#[doc(hidden)]
#[derive(Debug)]
pub struct ToolArgs {
    tool: &'static str,
    arguments: Map<String, Value>,
    problems: Vec<String>,
}

impl ToolArgs {
    /// The arguments of a call of `tool`, which must be a JSON object whose keys are among
    /// `keys` (`null` reads as no arguments).
    pub fn new(tool: &'static str, arguments: Value, keys: &[&str]) -> Result<ToolArgs, ToolError> {
        let arguments = match arguments {
            Value::Object(object) => object,
            Value::Null => Map::new(),
            Value::String(text) => {
                return Err(ToolError::BadArguments {
                    tool: tool.to_owned(),
                    problems: vec![format!("the arguments are not a JSON object but the text {text:?}")],
                })
            }
            other => {
                return Err(ToolError::BadArguments {
                    tool: tool.to_owned(),
                    problems: vec![format!("the arguments are not a JSON object but {other}")],
                })
            }
        };
        let unknown: Vec<String> =
            arguments.keys().filter(|key| !keys.contains(&key.as_str())).map(|key| format!("`{key}`")).collect();
        let mut problems = Vec::new();
        if !unknown.is_empty() {
            let expected = if keys.is_empty() {
                "it takes no arguments".to_owned()
            } else {
                format!("its parameters are {}", keys.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", "))
            };
            problems.push(format!("unknown argument {} ({expected})", unknown.join(", ")));
        }
        if keys.is_empty() && !problems.is_empty() {
            return Err(ToolError::BadArguments { tool: tool.to_owned(), problems });
        }
        Ok(ToolArgs { tool, arguments, problems })
    }

    /// The argument `key` decoded by `decode`; a missing optional argument is decoded from
    /// `null`. `None` after recording the problem.
    pub fn take<T>(
        &mut self,
        key: &str,
        optional: bool,
        decode: fn(Value) -> Result<T, serde_json::Error>,
    ) -> Option<T> {
        let value = match self.arguments.remove(key) {
            Some(value) => value,
            None if optional => Value::Null,
            None => {
                self.problems.push(format!("`{key}` is missing"));
                return None;
            }
        };
        match decode(value) {
            Ok(value) if self.problems.is_empty() => Some(value),
            Ok(_) => None,
            Err(error) => {
                self.problems.push(format!("`{key}`: {error}"));
                None
            }
        }
    }

    /// The problems found, as the call's error.
    pub fn into_error(self) -> ToolError {
        let mut problems = self.problems;
        if problems.is_empty() {
            problems.push("they could not be read".to_owned());
        }
        ToolError::BadArguments { tool: self.tool.to_owned(), problems }
    }
}

/// A sync tool's result as a ready [`ToolFuture`].
#[doc(hidden)]
pub fn tool_ready(result: Result<Value, ToolError>) -> ToolFuture {
    Box::pin(std::future::ready(result))
}

/// An async tool's future, boxed.
#[doc(hidden)]
pub fn boxed_tool<F: Future<Output = Result<Value, ToolError>> + Send + 'static>(future: F) -> ToolFuture {
    Box::pin(future)
}

/// What a tool returned, as JSON (a value that does not serialize is the tool's failure).
#[doc(hidden)]
pub fn tool_output<T: Serialize>(tool: &str, output: T) -> Result<Value, ToolError> {
    serde_json::to_value(output).map_err(|error| ToolError::Failed {
        tool: tool.to_owned(),
        message: format!("its result does not serialize as JSON: {error}"),
    })
}

/// What a tool returning `Result` returned: its `Ok` as JSON, its `Err`'s text as the failure.
#[doc(hidden)]
pub fn tool_result<T: Serialize, E: fmt::Display>(tool: &str, output: Result<T, E>) -> Result<Value, ToolError> {
    match output {
        Ok(value) => tool_output(tool, value),
        Err(error) => Err(ToolError::Failed { tool: tool.to_owned(), message: error.to_string() }),
    }
}

/// The failure of a call of a tool that uses the app's memory, made without one (through
/// [`Tool::call`] rather than a [`ToolNode`](crate::ToolNode) in a run).
#[doc(hidden)]
pub fn tool_without_memory(tool: &str) -> ToolFuture {
    tool_ready(Err(ToolError::Failed {
        tool: tool.to_owned(),
        message: "it uses the app's memory (`tea::Memory`) and was called without one: call it with \
                  `Tool::call_with_memory`, or run it through a `ToolNode` in an app that has a checkpointer"
            .to_owned(),
    }))
}
