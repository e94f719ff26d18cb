//! The agents a router serves, seen as JSON: `graph!` apps and YAML agents behind one trait,
//! so the protocol's handlers and the inbox are written once.
//!
//! Reads (`state`, `history`, `threads`) are the engine's blocking calls, made from the
//! blocking pool; runs are the engine's async streams, driven by a task of their own that
//! forwards each event over a channel and stops (cancelling the run, which leaves the thread
//! resumable) as soon as nobody listens. A pause's answer kind (what the inbox's form asks
//! for) is probed with the engine's `Graph::check_answer`.

use crate::error::ApiError;
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::sync::Arc;
use tea_runtime::{
    App, Call, Checkpointer, Error, Event, Graph, GraphState, Interrupt, Outcome, Resume, RunOptions, Snapshot,
    ThreadId,
};
use tokio::sync::mpsc;

/// A checkpoint of a thread, with the state as JSON.
#[derive(Clone, Debug)]
pub(crate) struct JsonSnapshot {
    pub(crate) state: Value,
    pub(crate) next: Vec<String>,
    pub(crate) interrupts: Vec<Interrupt>,
    pub(crate) checkpoint: u64,
    pub(crate) step: u64,
    /// When the checkpoint was written, when it says.
    pub(crate) written_at: Option<std::time::SystemTime>,
}

impl JsonSnapshot {
    fn of<S: serde::Serialize>(snapshot: Snapshot<S>) -> Result<Self, ApiError> {
        Ok(JsonSnapshot {
            state: to_json(&snapshot.state)?,
            next: snapshot.next.iter().map(|n| n.as_str().to_owned()).collect(),
            interrupts: snapshot.interrupts,
            checkpoint: snapshot.checkpoint,
            step: snapshot.step,
            written_at: snapshot.written_at,
        })
    }

    /// Whether the thread waits on a pause.
    pub(crate) fn paused(&self) -> bool {
        !self.interrupts.is_empty()
    }

    /// Whether the thread reached the end of its graph.
    pub(crate) fn finished(&self) -> bool {
        self.interrupts.is_empty() && self.next.is_empty()
    }
}

/// One event of a run, with the state as JSON.
#[derive(Clone, Debug)]
pub(crate) enum JsonEvent {
    Step {
        node: String,
        branch: Option<String>,
        state: Value,
        duration_ms: f64,
    },
    Interrupted {
        state: Value,
        token: String,
        checkpoint: u64,
        interrupts: Vec<Interrupt>,
    },
    Done {
        state: Value,
    },
    /// What a node emitted ([`tea_runtime::Ctx::emit`]): the protocol's `custom` stream mode.
    Custom {
        node: String,
        value: Value,
    },
    /// A node's start, retry or cache hit: kept in the run's timeline.
    Note {
        kind: &'static str,
        node: String,
        data: Value,
    },
}

/// The answers a resume carries.
#[derive(Clone, Debug)]
pub(crate) enum Answer {
    /// A breakpoint: the run just continues.
    None,
    /// The one pending pause's answer.
    One(Value),
    /// Answers keyed by interrupt id.
    Keyed(Vec<(String, Value)>),
}

/// What form the inbox shows for a pause: what its node expects as the answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AnswerKind {
    /// A breakpoint: a "continue" button.
    Continue,
    YesNo,
    Text,
    Number {
        integer: bool,
    },
    Json,
}

impl AnswerKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            AnswerKind::Continue => "continue",
            AnswerKind::YesNo => "yes_no",
            AnswerKind::Text => "text",
            AnswerKind::Number { integer: true } => "integer",
            AnswerKind::Number { integer: false } => "number",
            AnswerKind::Json => "json",
        }
    }
}

/// The events of a run, as its driving task forwards them.
pub(crate) type Events = mpsc::Receiver<Result<JsonEvent, ApiError>>;

/// One run of a served agent, as the protocol gives it (JSON input, a token in text): the
/// engine's [`Call`] before it is typed by the agent's state. What it does, on which thread,
/// and how ([`RunOptions`], filled from a request's settings: durability, stream modes,
/// recursion limit; its `context`, JSON, is checked against the graph's context type when the
/// call is typed): a new run option is a field of `RunOptions`, carried through as is.
#[derive(Debug)]
pub(crate) struct JsonCall {
    what: JsonWhat,
    thread: Option<ThreadId>,
    options: RunOptions,
    context: Option<Value>,
}

/// What a [`JsonCall`] does.
#[derive(Debug)]
enum JsonWhat {
    /// Starts a new thread on this input.
    Start(Value),
    /// Resumes with this token, these answers and an optional state update.
    Resume { token: String, answer: Answer, update: Option<Value> },
    /// Continues this thread from its last checkpoint (on a paused thread: runs nothing, hands
    /// out the pause's token).
    Recover(ThreadId),
}

impl JsonCall {
    /// Starts a new thread on `input`.
    pub(crate) fn start(input: Value) -> Self {
        JsonCall { what: JsonWhat::Start(input), thread: None, options: RunOptions::new(), context: None }
    }

    /// Resumes with `token`, `answer` and an optional state `update`.
    pub(crate) fn resume(token: String, answer: Answer, update: Option<Value>) -> Self {
        let what = JsonWhat::Resume { token, answer, update };
        JsonCall { what, thread: None, options: RunOptions::new(), context: None }
    }

    /// Continues `thread` from its last checkpoint.
    pub(crate) fn recover(thread: ThreadId) -> Self {
        JsonCall { what: JsonWhat::Recover(thread), thread: None, options: RunOptions::new(), context: None }
    }

    /// Runs with `options` (their `context` aside: see [`context`](Self::context)).
    pub(crate) fn options(mut self, options: RunOptions) -> Self {
        self.options = options;
        self
    }

    /// The run's nodes read `context` (JSON) with `Ctx::context`.
    pub(crate) fn context(mut self, context: Option<Value>) -> Self {
        self.context = context;
        self
    }

    /// Runs on `thread` (see [`Call::on`]).
    pub(crate) fn on(mut self, thread: ThreadId) -> Self {
        self.thread = Some(thread);
        self
    }

    /// This call typed by state `S`: `start` makes the call that starts a thread on an input,
    /// `update` reads a resume's state update.
    /// `context_type` is the graph's ([`Graph::context_type`]): a JSON context is given to a
    /// graph whose nodes read a `serde_json::Value`, or that names no type.
    fn typed<S: GraphState>(
        self,
        context_type: Option<(std::any::TypeId, &'static str)>,
        start: impl FnOnce(Value) -> Result<Call<S>, ApiError>,
        update: impl FnOnce(Value) -> Result<S::Update, ApiError>,
    ) -> Result<Call<S>, ApiError> {
        let mut options = self.options;
        if let Some(context) = self.context {
            if let Some((_, name)) = context_type.filter(|(id, _)| *id != std::any::TypeId::of::<Value>()) {
                return Err(ApiError::unprocessable(
                    "bad_context",
                    format!("this graph's nodes read a context of type `{name}`, which a request cannot give as JSON"),
                ));
            }
            options = options.context(context);
        }
        let call = match self.what {
            JsonWhat::Start(input) => start(input)?,
            JsonWhat::Resume { token, answer, update: changes } => {
                let resume: Resume<S> = token.parse()?;
                let mut resume = with_answers(resume, answer);
                if let Some(changes) = changes {
                    resume = resume.update(update(changes)?);
                }
                Call::resume(resume)
            }
            JsonWhat::Recover(thread) => Call::recover(thread),
        };
        let call = match self.thread {
            Some(thread) => call.on(thread),
            None => call,
        };
        Ok(call.options(options))
    }
}

/// A served agent. Object-safe: the router keeps `Arc<dyn Served>`s.
/// What a served agent's sweeper does with each report.
pub(crate) type SweepHandler = Box<dyn FnMut(Result<tea_runtime::SweepReport, tea_runtime::Error>) + Send>;

pub(crate) trait Served: Send + Sync + 'static {
    /// The agent's id in the protocol: its graph's name.
    fn name(&self) -> &str;
    /// The graph as a Mermaid flowchart, when known.
    fn drawing(&self) -> Option<&str>;
    /// The store the agent's checkpoints are in.
    fn store(&self) -> &dyn Checkpointer;
    /// What `interrupt`'s node expects as its answer.
    fn answer_kind(&self, interrupt: &Interrupt) -> AnswerKind;
    fn state(&self, thread: &ThreadId) -> Result<Option<JsonSnapshot>, ApiError>;
    fn history(&self, thread: &ThreadId) -> Result<Vec<JsonSnapshot>, ApiError>;
    fn threads(&self) -> Result<Vec<ThreadId>, ApiError>;
    fn delete(&self, thread: &ThreadId) -> Result<bool, ApiError>;
    /// Sweeps the agent's threads under its retention every `every` ([`crate::Serve::sweep_every`]).
    fn sweep_every(&self, every: std::time::Duration, on_report: SweepHandler) -> Option<tea_runtime::Sweeper>;
    /// The JSON Schema of the state (its declared keys and their types).
    fn state_schema(&self) -> Value;
    /// Writes `update` at the head of `thread` as if node `as_node` had produced it (the
    /// engine's `update_state`).
    fn update_state(&self, thread: &ThreadId, update: Value, as_node: &str) -> Result<JsonSnapshot, ApiError>;
    /// Carries out `call` as a stream of events, on a task of its own.
    fn run_stream(self: Arc<Self>, call: JsonCall) -> Events;
    /// Carries out `call` until its run finishes or pauses: its last event (`Interrupted` or
    /// `Done`).
    fn run(self: Arc<Self>, call: JsonCall) -> futures_util::future::BoxFuture<'static, Result<JsonEvent, ApiError>>;
}

/// A token for paused `thread` (a recover, which runs nothing on a paused thread); `None` when
/// the thread has finished.
pub(crate) async fn token(agent: Arc<dyn Served>, thread: ThreadId) -> Result<Option<String>, ApiError> {
    match agent.run(JsonCall::recover(thread)).await? {
        JsonEvent::Interrupted { token, .. } => Ok(Some(token)),
        _ => Ok(None),
    }
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<Value, ApiError> {
    serde_json::to_value(value).map_err(|e| ApiError::internal(format!("the state does not serialize as JSON: {e}")))
}

fn json_event<S: GraphState>(event: Result<Event<S>, Error>) -> Result<JsonEvent, ApiError> {
    match event? {
        Event::Step { node, branch, state, duration } => Ok(JsonEvent::Step {
            node: node.as_str().to_owned(),
            branch: branch.map(|b| b.as_str().to_owned()),
            state: to_json(&state)?,
            duration_ms: duration.as_secs_f64() * 1000.0,
        }),
        Event::Interrupted { state, resume } => Ok(JsonEvent::Interrupted {
            state: to_json(&state)?,
            token: resume.to_string(),
            checkpoint: resume.checkpoint(),
            interrupts: resume.interrupts().to_vec(),
        }),
        Event::Done(state) => Ok(JsonEvent::Done { state: to_json(&state)? }),
        Event::Custom { node, value } => Ok(JsonEvent::Custom { node: node.as_str().to_owned(), value }),
        Event::Update { node, branch, update } => Ok(JsonEvent::Note {
            kind: "update",
            node: node.as_str().to_owned(),
            data: serde_json::json!({
                "branch": branch.map(|b| b.as_str().to_owned()),
                "update": plain_update::<S>(to_json(&update)?),
            }),
        }),
        Event::Started { node, branch, step, .. } => Ok(JsonEvent::Note {
            kind: "start",
            node: node.as_str().to_owned(),
            data: serde_json::json!({ "branch": branch.map(|b| b.as_str().to_owned()), "step": step }),
        }),
        Event::Retry { node, branch, attempt, error, wait } => Ok(JsonEvent::Note {
            kind: "retry",
            node: node.as_str().to_owned(),
            data: serde_json::json!({
                "branch": branch.map(|b| b.as_str().to_owned()),
                "attempt": attempt,
                "error": error,
                "wait_ms": wait.as_secs_f64() * 1000.0,
            }),
        }),
        Event::CacheHit { node, branch } => Ok(JsonEvent::Note {
            kind: "cache_hit",
            node: node.as_str().to_owned(),
            data: serde_json::json!({ "branch": branch.map(|b| b.as_str().to_owned()) }),
        }),
        // Events are a non-exhaustive list to this front end: one it does not know is noted.
        #[allow(unreachable_patterns)]
        _ => Ok(JsonEvent::Note { kind: "event", node: String::new(), data: Value::Null }),
    }
}

/// An update as a client reads it: each reducer field's value as the node gave it (`["write"]`),
/// not as the engine's `Slot` records how it merges (`{"reduce": ["write"]}`).
fn plain_update<S: GraphState>(mut update: Value) -> Value {
    for field in S::FIELDS.iter().filter(|f| f.reducer != tea_runtime::Reducer::Replace) {
        if let Some(slot) = update.get_mut(field.name) {
            let inner = match slot {
                Value::Object(map) if map.len() == 1 => map.remove("reduce").or_else(|| map.remove("overwrite")),
                _ => None,
            };
            if let Some(inner) = inner {
                *slot = inner;
            }
        }
    }
    update
}

/// Drives `events` on a task of its own, forwarding them until the run ends or the receiver
/// is dropped (then the stream is dropped, which cancels the run).
fn forward<T, F>(owner: T, events: F) -> Events
where
    T: Send + 'static,
    F: for<'a> FnOnce(&'a T) -> futures_util::stream::BoxStream<'a, Result<JsonEvent, ApiError>> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        let mut stream = events(&owner);
        loop {
            tokio::select! {
                () = tx.closed() => break,
                item = stream.next() => match item {
                    Some(item) => {
                        if tx.send(item).await.is_err() {
                            break;
                        }
                    }
                    None => break,
                },
            }
        }
    });
    rx
}

/// How a run ended, as its last event.
fn json_outcome<S: GraphState>(outcome: Result<Outcome<S>, Error>) -> Result<JsonEvent, ApiError> {
    json_event(outcome.map(|outcome| match outcome {
        Outcome::Interrupted { state, resume } => Event::Interrupted { state, resume },
        Outcome::Done(state) => Event::Done(state),
    }))
}

fn failed(error: ApiError) -> Events {
    let (tx, rx) = mpsc::channel(1);
    let _ = tx.try_send(Err(error));
    rx
}

/// What the graph's node `node` accepts as an answer, probed with its own check (interrupt
/// nodes check the answer field's type), else hinted by the pause's payload.
fn probe<G: Graph>(graph: &G, interrupt: &Interrupt) -> AnswerKind {
    if !interrupt.needs_answer() {
        return AnswerKind::Continue;
    }
    let Some(node) = graph.node_named(interrupt.node().as_str()) else { return hinted(interrupt.value()) };
    let accepts = |v: Value| graph.check_answer(node, &v).is_ok();
    let (b, i, f, s, o) =
        (accepts(json!(true)), accepts(json!(1)), accepts(json!(1.5)), accepts(json!("x")), accepts(json!({"k": 1})));
    // A struct read from a sequence also takes `true` (as `[true]`): a bool does not take `[true]`.
    let structured = || accepts(json!([true]));
    match (b, i, f, s, o) {
        (true, true, true, true, true) => hinted(interrupt.value()),
        (true, false, false, false, false) if !structured() => AnswerKind::YesNo,
        (false, true, float, false, false) => AnswerKind::Number { integer: !float },
        (false, false, false, true, false) => AnswerKind::Text,
        _ => AnswerKind::Json,
    }
}

/// The answer kind a pause's payload asks for: `{"expects": "yes_no" | "text" | "number" |
/// "integer" | "json", …}` (also under `answer`); text otherwise.
pub(crate) fn hinted(payload: &Value) -> AnswerKind {
    let hint = payload.get("expects").or_else(|| payload.get("answer")).and_then(Value::as_str);
    match hint.map(str::to_ascii_lowercase).as_deref() {
        Some("yes_no" | "yes/no" | "bool" | "boolean") => AnswerKind::YesNo,
        Some("number" | "float") => AnswerKind::Number { integer: false },
        Some("integer" | "int") => AnswerKind::Number { integer: true },
        Some("json" | "object") => AnswerKind::Json,
        _ => AnswerKind::Text,
    }
}

/// The JSON Schema of a state field of Rust type `ty` (as `#[derive(GraphState)]` writes it):
/// the JSON type where the Rust type says it, the Rust type as its description either way.
fn rust_type_schema(ty: &str) -> Value {
    let compact: String = ty.chars().filter(|c| !c.is_whitespace()).collect();
    let base = compact.rsplit("::").next().unwrap_or(&compact).to_owned();
    let head = compact.split('<').next().unwrap_or("").rsplit("::").next().unwrap_or("");
    let json_type = match (base.as_str(), head) {
        ("String" | "str" | "&str" | "char", _) => Some("string"),
        ("bool", _) => Some("boolean"),
        ("u8" | "u16" | "u32" | "u64" | "u128" | "usize" | "i8" | "i16" | "i32" | "i64" | "i128" | "isize", _) => {
            Some("integer")
        }
        ("f32" | "f64", _) => Some("number"),
        (_, "Vec" | "VecDeque" | "HashSet" | "BTreeSet") => Some("array"),
        (_, "HashMap" | "BTreeMap" | "Map") => Some("object"),
        _ => None,
    };
    match (json_type, head) {
        (_, "Option") => {
            let inner = compact.strip_prefix("Option<").or_else(|| compact.split_once("Option<").map(|(_, r)| r));
            let inner = inner.and_then(|i| i.strip_suffix('>')).unwrap_or("");
            let mut schema = rust_type_schema(inner);
            if let Some(t) = schema.get("type").and_then(Value::as_str).map(str::to_owned) {
                schema["type"] = json!([t, "null"]);
            }
            schema["description"] = json!(ty);
            schema
        }
        (Some(t), _) => json!({ "type": t, "description": ty }),
        (None, _) => json!({ "description": ty }),
    }
}

fn with_answers<S: GraphState>(mut resume: Resume<S>, answer: Answer) -> Resume<S> {
    match answer {
        Answer::None => resume,
        Answer::One(value) => resume.answer(value),
        Answer::Keyed(answers) => {
            for (id, value) in answers {
                resume = resume.answer_to(id, value);
            }
            resume
        }
    }
}

/// A `graph!` app (or any [`Graph`]) served as JSON.
pub(crate) struct GraphServed<G: Graph, C: Checkpointer> {
    pub(crate) app: App<G, C>,
    pub(crate) drawing: Option<String>,
}

impl<G: Graph, C: Checkpointer> Served for GraphServed<G, C> {
    fn name(&self) -> &str {
        self.app.graph().name()
    }

    fn drawing(&self) -> Option<&str> {
        self.drawing.as_deref()
    }

    fn store(&self) -> &dyn Checkpointer {
        self.app.checkpointer()
    }

    fn answer_kind(&self, interrupt: &Interrupt) -> AnswerKind {
        probe(self.app.graph(), interrupt)
    }

    fn state(&self, thread: &ThreadId) -> Result<Option<JsonSnapshot>, ApiError> {
        self.app.state(thread)?.map(JsonSnapshot::of).transpose()
    }

    fn history(&self, thread: &ThreadId) -> Result<Vec<JsonSnapshot>, ApiError> {
        self.app.history(thread)?.into_iter().map(JsonSnapshot::of).collect()
    }

    fn threads(&self) -> Result<Vec<ThreadId>, ApiError> {
        Ok(self.app.threads()?)
    }

    fn delete(&self, thread: &ThreadId) -> Result<bool, ApiError> {
        Ok(self.app.delete(thread)?)
    }

    fn sweep_every(&self, every: std::time::Duration, on_report: SweepHandler) -> Option<tea_runtime::Sweeper> {
        Some(self.app.sweep_every(every, on_report))
    }

    fn state_schema(&self) -> Value {
        let properties: serde_json::Map<String, Value> =
            G::State::FIELDS.iter().map(|f| (f.name.to_owned(), rust_type_schema(f.ty))).collect();
        json!({ "title": self.name(), "type": "object", "properties": properties })
    }

    fn update_state(&self, thread: &ThreadId, update: Value, as_node: &str) -> Result<JsonSnapshot, ApiError> {
        let name = self.app.graph().name();
        let update = serde_json::from_value(update).map_err(|e| {
            ApiError::unprocessable("bad_update", format!("the values do not fit the state of graph `{name}`: {e}"))
        })?;
        JsonSnapshot::of(self.app.update_state(thread, update, as_node)?)
    }

    fn run_stream(self: Arc<Self>, call: JsonCall) -> Events {
        match self.typed(call) {
            Ok(call) => forward(self, move |me| me.app.run_stream_async(call).map(json_event).boxed()),
            Err(error) => failed(error),
        }
    }

    fn run(self: Arc<Self>, call: JsonCall) -> futures_util::future::BoxFuture<'static, Result<JsonEvent, ApiError>> {
        Box::pin(async move {
            let call = self.typed(call)?;
            json_outcome(self.app.run_async(call).await)
        })
    }
}

impl<G: Graph, C: Checkpointer> GraphServed<G, C> {
    /// `call` typed by the graph's state: its input and update read from JSON.
    fn typed(&self, call: JsonCall) -> Result<Call<G::State>, ApiError> {
        let graph = self.app.graph();
        let name = graph.name();
        call.typed(
            graph.context_type(),
            |input| {
                serde_json::from_value(input).map(Call::start).map_err(|e| {
                    ApiError::unprocessable(
                        "bad_input",
                        format!("the input does not fit the state of graph `{name}`: {e}"),
                    )
                })
            },
            |update| {
                serde_json::from_value(update).map_err(|e| {
                    ApiError::unprocessable(
                        "bad_update",
                        format!("the state update does not fit the state of graph `{name}`: {e}"),
                    )
                })
            },
        )
    }
}

/// A YAML agent served as JSON, with the store it runs on.
#[cfg(feature = "yaml")]
pub(crate) struct YamlServed {
    pub(crate) agent: tea_yaml::Agent,
    pub(crate) store: Arc<dyn Checkpointer>,
    pub(crate) drawing: String,
}

#[cfg(feature = "yaml")]
impl Served for YamlServed {
    fn name(&self) -> &str {
        self.agent.name()
    }

    fn drawing(&self) -> Option<&str> {
        Some(&self.drawing)
    }

    fn store(&self) -> &dyn Checkpointer {
        &*self.store
    }

    fn answer_kind(&self, interrupt: &Interrupt) -> AnswerKind {
        probe(self.agent.graph(), interrupt)
    }

    fn state(&self, thread: &ThreadId) -> Result<Option<JsonSnapshot>, ApiError> {
        self.agent.state(thread)?.map(JsonSnapshot::of).transpose()
    }

    fn history(&self, thread: &ThreadId) -> Result<Vec<JsonSnapshot>, ApiError> {
        self.agent.history(thread)?.into_iter().map(JsonSnapshot::of).collect()
    }

    fn threads(&self) -> Result<Vec<ThreadId>, ApiError> {
        Ok(self.agent.threads()?)
    }

    fn delete(&self, thread: &ThreadId) -> Result<bool, ApiError> {
        Ok(self.agent.delete(thread)?)
    }

    fn sweep_every(&self, every: std::time::Duration, on_report: SweepHandler) -> Option<tea_runtime::Sweeper> {
        self.agent.sweep_every(every, on_report)
    }

    fn state_schema(&self) -> Value {
        self.agent.state_schema()
    }

    fn update_state(&self, thread: &ThreadId, update: Value, as_node: &str) -> Result<JsonSnapshot, ApiError> {
        if !update.is_object() {
            return Err(ApiError::unprocessable(
                "bad_update",
                format!("the values of agent `{}` are a JSON object of state keys, not {update}", self.name()),
            ));
        }
        JsonSnapshot::of(self.agent.update_state(thread, update, as_node)?)
    }

    fn run_stream(self: Arc<Self>, call: JsonCall) -> Events {
        match self.typed(call) {
            Ok(call) => forward(self, move |me| me.agent.run_stream_async(call).map(json_event).boxed()),
            Err(error) => failed(error),
        }
    }

    fn run(self: Arc<Self>, call: JsonCall) -> futures_util::future::BoxFuture<'static, Result<JsonEvent, ApiError>> {
        Box::pin(async move {
            let call = self.typed(call)?;
            json_outcome(self.agent.run_async(call).await)
        })
    }
}

#[cfg(feature = "yaml")]
impl YamlServed {
    /// `call` typed by the agent's state: its input checked against the file's declared types.
    fn typed(&self, call: JsonCall) -> Result<Call<tea_yaml::State>, ApiError> {
        call.typed(
            self.agent.graph().context_type(),
            |input| Ok(self.agent.start(input)?),
            |update| Ok(tea_yaml::Update::from(update)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::rust_type_schema;
    use serde_json::json;

    #[test]
    fn a_state_fields_rust_type_gives_its_json_type() {
        assert_eq!(rust_type_schema("String"), json!({ "type": "string", "description": "String" }));
        assert_eq!(rust_type_schema("u32")["type"], "integer");
        assert_eq!(rust_type_schema("f64")["type"], "number");
        assert_eq!(rust_type_schema("Vec < String >")["type"], "array");
        assert_eq!(rust_type_schema("std::collections::BTreeMap<String, u8>")["type"], "object");
        assert_eq!(rust_type_schema("Option<bool>")["type"], json!(["boolean", "null"]));
        assert_eq!(rust_type_schema("Draft"), json!({ "description": "Draft" }));
    }
}
