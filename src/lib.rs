#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

/// The `graph!` language: the guide's chapter *Graphs* follows.
#[doc(inline)]
#[cfg_attr(not(doctest), doc = include_str!("../docs/src/graphs.md"))]
pub use tea_macros::graph;
/// `#[tool]`: a function becomes a tool a model calls (cargo feature `models`); see
/// [`models::Tool`] and the guide's tutorial "A chatbot".
#[cfg(feature = "models")]
pub use tea_macros::tool;
/// The `#[derive(GraphState)]` reference: the guide's chapter *State* follows.
#[doc(inline)]
#[cfg_attr(not(doctest), doc = include_str!("../docs/src/state.md"))]
pub use tea_macros::GraphState;
// The crate root holds what users write: the macros above, the app and its runs, node return
// values, stores, errors and options. What only generated code names (the node-form traits,
// `Field`, `Reducer`, `Write`, …) is under `__private`, and `tea_runtime`'s root keeps both for
// the workspace's front ends.
pub use tea_runtime::{
    add_messages, Content, ContentPart, ImageUrl, Message, ToolCall, ToolDefinition, REMOVE_ALL_MESSAGES,
};
pub use tea_runtime::{
    checkpoint_holds_pause, decode_checkpoint, encode_checkpoint, error_chain, read_foreign_checkpoint, reducers, App,
    AppendOutcome, BoxError, BranchSnapshot, BranchState, Builder, CachePolicy, CacheScope, Call, CheckpointId,
    Checkpointer, Clock, Command, Ctx, DirStore, Durability, Error, Event, ForeignCheckpoint, Fork, Goto, Graph,
    GraphState, Hitl, Interrupt, MemoryStore, NoCheckpointer, NodeFuture, NodeId, NodeName, NodePolicy, Outcome,
    ParentCommand, Pause, PauseFree, Resume, RetryOn, RetryPolicy, RunContext, RunOptions, SealFailure, SendTo,
    Snapshot, StateUpdate, StoreFuture, Stream, StreamModes, SubgraphSnapshot, SyncGraph, ThreadId, Writer,
    DEFAULT_GROUP_COMMIT, DEFAULT_LEASE, DEFAULT_MAX_PARALLEL_BRANCHES, DEFAULT_RECURSION_LIMIT,
};
// Long-term memory across threads: items under namespaces, kept in any store.
pub use tea_runtime::{Embedder, Item, Memory, MemoryProblem, SearchQuery};
// Retention: what a sweep keeps, what it did, and what a store may do in bulk for it.
pub use tea_runtime::{
    parse_duration, DurationError, Expired, ExpiredThread, Expiry, KeptBecause, KeptPaused, Rest, RestMark, RestMarks,
    Retention, SweepReport, Sweeper,
};
// `SledStore` (feature `sled`), `KeyRing`, `KeyRingError`, `Sealed` (`encryption`),
// `PostgresStore`, `PostgresStoreBuilder` (`postgres`): present whenever the engine is built with
// the feature, whichever crate of the build asked for it.
pub use tea_runtime::__feature_stores::*;

/// What generated code names: reached as `::tea::__private::…`, never by users.
#[doc(hidden)]
pub mod __private {
    pub use tea_runtime::__private::*;
    // `#[tool]`'s: the `Tool` trait, its argument decoding and schemas, and `schemars`.
    #[cfg(feature = "models")]
    pub use tea_models::__private::*;
}

/// Agents written as YAML files, run on this engine (cargo feature `yaml`): see the guide's
/// chapter "The YAML language" (`docs/src/yaml.md`).
#[cfg(feature = "yaml")]
#[doc(inline)]
pub use tea_yaml as yaml;

/// Agents as an HTTP service (cargo feature `serve`): the Agent Protocol's routes and an inbox
/// page for pauses; see the guide's chapter "Serving agents over HTTP" (`docs/src/serving.md`).
#[cfg(feature = "serve")]
#[doc(inline)]
pub use tea_serve as serve;

/// Chat models (cargo feature `models`): the `ChatModel` trait, OpenAI-compatible endpoints and
/// Anthropic's Messages API, tokens streamed into a node's stream; see the guide's chapter
/// "Messages and models" (`docs/src/models.md`).
#[cfg(feature = "models")]
#[doc(inline)]
pub use tea_models as models;

// `MessagesState` is derived here, where the derive's `::tea::…` paths name this crate.
extern crate self as tea;

/// A state that is a conversation: one `messages` field merged by
/// [`add_messages`] (`#[reducer(messages)]`), LangGraph's `MessagesState`.
/// A graph of chat nodes can run on it as it is; a state with more fields declares its own
/// `#[reducer(messages)] messages: Vec<Message>`.
///
/// ```
/// use tea::prelude::*;
/// use tea::{Message, MessagesState};
///
/// fn echo(state: &MessagesState) -> tea::MessagesStateUpdate {
///     let last = state.messages.last().map(Message::text).unwrap_or_default();
///     MessagesState::update().messages(vec![Message::assistant(format!("you said: {last}"))])
/// }
/// graph! { Echo for MessagesState { start -> echo; echo -> end; } }
///
/// let out = Echo::builder().build().invoke(MessagesState { messages: vec![Message::user("hi")] })?;
/// assert_eq!(out.messages[1].text(), "you said: hi");
/// assert_eq!(out.messages[1].id(), Some("msg-2"));
/// # Ok::<(), tea::Error>(())
/// ```
#[derive(
    GraphState,
    Clone,
    Debug,
    Default,
    PartialEq,
    tea_runtime::__private::serde::Serialize,
    tea_runtime::__private::serde::Deserialize,
)]
#[serde(crate = "tea_runtime::__private::serde")]
pub struct MessagesState {
    /// The conversation, merged by [`add_messages`].
    #[reducer(messages)]
    pub messages: Vec<Message>,
}

/// `use tea::prelude::*;` brings in what a graph author writes every day.
pub mod prelude {
    #[cfg(feature = "postgres")]
    pub use crate::PostgresStore;
    #[cfg(feature = "sled")]
    pub use crate::SledStore;
    pub use crate::{
        graph, App, Call, Checkpointer, Command, Ctx, DirStore, Durability, Error, Event, Goto, GraphState, Hitl,
        Interrupt, MemoryStore, Message, MessagesState, NodeName, Outcome, Pause, Resume, SendTo, Snapshot,
        StateUpdate, ThreadId,
    };
}
