//! `tea::Error`: every way a run can fail, each variant naming the node, field or limit it
//! concerns, in one `#[non_exhaustive]` enum.
//!
//! Also here: [`error_chain`] (an error and its sources on one line), the helpers that turn a
//! caught panic's payload into a message, and `Passthrough`, the wrapper a subgraph node's
//! child errors travel in when the parent's run reports them as its own rather than as the
//! node's failure.

use crate::vocab::name::CheckpointId;
use crate::vocab::name::{NodeName, ThreadId};
use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The error type a node may return, boxed: anything that converts into it works
/// (`String`, `&'static str`, any `std::error::Error + Send + Sync`, `anyhow::Error`).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A node returned an error; `source` is that error, unchanged.
    #[error("node `{node}` failed")]
    NodeFailed {
        /// The node that failed.
        node: NodeName,
        /// The node's own error.
        #[source]
        source: BoxError,
    },

    /// A node (or a guard or reducer while routing from it) panicked. The panic was caught and
    /// the app stays usable.
    #[error("node `{node}` panicked: {message}")]
    NodePanicked {
        /// The node that panicked.
        node: NodeName,
        /// The panic message.
        message: String,
    },

    /// A run of `node` took longer than its timeout (`graph!`'s `timeout node(…);`, a YAML node's
    /// `timeout:`). An async node was cancelled; a blocking node's thread was left to finish on
    /// its own and its result dropped. Retried if the node's retry policy says so.
    #[error("node `{node}` timed out after {} ms", after.as_millis())]
    NodeTimedOut {
        /// The node.
        node: NodeName,
        /// Its time limit.
        after: std::time::Duration,
    },

    /// The graph declares a run context (`graph!`'s `context T;`), and this call supplied none,
    /// or one of another type: give it with [`App::with_context`](crate::App::with_context). A context is never checkpointed, so a
    /// resume supplies it again. Also a node's [`Ctx::context`](crate::Ctx::context) asking for
    /// a type the run was not given.
    #[error("{}, and {}; give it with `app.with_context(…)`", match node { Some(node) => format!("node `{node}` reads a run context of type `{expected}`"), None => format!("graph `{graph}` runs with a context of type `{expected}`") }, match found { Some(found) => format!("this run was given a `{found}`"), None => String::from("this run was given none") })]
    MissingContext {
        /// The graph.
        graph: String,
        /// The node that asked for it ([`Ctx::context`](crate::Ctx::context)); `None` when the
        /// run was refused before it started.
        node: Option<NodeName>,
        /// The context type the graph declares (or the node asked for).
        expected: &'static str,
        /// The type of the context this run has, if any.
        found: Option<&'static str>,
    },

    /// No edge out of `node` applied: none of its guards held, or its `Command` went to a node
    /// (`goto`) that its `node -> a | b;` declaration does not list.
    #[error("no route out of node `{node}`{}", match goto { Some(target) => format!(": it chose `{target}`, which its `->` declaration does not list"), None => String::from(": no guard held and it has no unguarded edge") })]
    NoRoute {
        /// The node the run could not leave.
        node: NodeName,
        /// The undeclared node a router chose, if that was the cause.
        goto: Option<NodeName>,
    },

    /// The run took more steps than the app's recursion limit (`.recursion_limit(n)`, 10 000 by
    /// default): most often a loop whose exit condition never holds.
    #[error("the run took more than {limit} steps without reaching `end` (raise it with `.recursion_limit(n)` if the graph needs more)")]
    RecursionLimit {
        /// The limit in force.
        limit: usize,
    },

    /// The sync driver (`invoke`, `resume`, `recover`, `stream`) met an async node, which only
    /// the async driver (`invoke_async` and its kin, feature `tokio`) can run. For a graph known
    /// at compile time this does not compile instead ([`SyncGraph`](crate::SyncGraph)); a graph
    /// built at run time reports it before the node runs, and the thread stays as it was at its
    /// last checkpoint.
    #[error("node `{node}` of graph `{graph}` is async: run the graph with the async API (`invoke_async` and its kin, feature `tokio`)")]
    NeedsAsync {
        /// The graph.
        graph: String,
        /// The async node.
        node: NodeName,
    },

    /// An async call (`invoke_async`, `resume_async`, …) was polled outside a tokio runtime,
    /// which the async driver runs nodes and branches on. Nothing ran and nothing was written.
    #[error(
        "`{call}` was polled outside a tokio runtime: await it inside one (`#[tokio::main]`, `Runtime::block_on`)"
    )]
    NoRuntime {
        /// The async call.
        call: &'static str,
    },

    /// A run paused where its app has no checkpointer to keep the pause in. A graph known at
    /// compile time that can pause does not build without one ([`PauseFree`](crate::PauseFree));
    /// a graph built at run time that pauses anyway (a node that asks through its `Hitl`
    /// although the graph claimed it cannot pause, or a subgraph node's child that pauses
    /// inside a parent run without a store) stops with this error, and nothing was written.
    #[error("graph `{graph}` paused at node `{node}`, but its app has no checkpointer to keep the pause in (build it with `.checkpointer(…)`)")]
    PausedWithoutCheckpointer {
        /// The graph that paused.
        graph: String,
        /// The node it paused at.
        node: NodeName,
    },

    /// `recover` found the thread owned by a live run: its lease (renewed as that run advances)
    /// has not expired. A run that crashed is taken over once its lease expires
    /// ([`Builder::lease`](crate::Builder::lease)); one that failed releases its lease at once.
    #[error("thread `{thread}` is being run elsewhere (its run's lease expires in {} ms); recover it once that run has stopped", expires_in.as_millis())]
    ThreadBusy {
        /// The thread.
        thread: ThreadId,
        /// How long the owner's lease still runs.
        expires_in: std::time::Duration,
    },

    /// A subgraph node's child run found that the run of its parent graph (or of an ancestor)
    /// no longer owns its thread: the parent's lease expired and another run recovered the
    /// thread meanwhile. The child's run stops rather than go on for a parent that is gone; its
    /// completed nodes are checkpointed, and the run that took the thread over finds them.
    /// (When the store answered an earlier write of the run with an error — a write it may
    /// have stored nonetheless, which moves the head as a takeover would — the run stops with
    /// that [`Error::Store`] instead.)
    #[error("thread `{thread}` was taken over by another run while a subgraph node of it ran (its lease had expired); this run stopped")]
    LeaseLost {
        /// The thread that was taken over.
        thread: ThreadId,
    },

    /// The state cannot be stored faithfully: it would not read back from its checkpoint (a
    /// float that is NaN or infinite, which JSON cannot hold, or a `Serialize` impl that its
    /// `Deserialize` does not accept). Refused before anything was written, so no token is
    /// ever handed out for a checkpoint that does not decode.
    #[error("the state after node `{node}` cannot be stored in thread `{thread}`: at `{path}`, {reason}")]
    StateNotStorable {
        /// The node that ran last (`start` for the input).
        node: NodeName,
        /// The thread.
        thread: ThreadId,
        /// Where in the checkpoint the value is, e.g. `state.score`.
        path: String,
        /// What does not read back.
        reason: String,
    },

    /// Two parallel branches replaced the same field; the merge at the join cannot choose.
    #[error("parallel branches {} all write field `{field}`, whose reducer is `replace`; give it a reducer or let one branch write it", join_names(branches))]
    ConflictingWrites {
        /// The field written by several branches.
        field: String,
        /// The heads of the branches that wrote it, in declared order.
        branches: Vec<NodeName>,
    },

    /// A call that starts a thread (`Call::start(…).on(thread)`) named one that already has
    /// checkpoints.
    #[error("thread `{thread}` already exists; resume it, recover it, or start a new thread")]
    ThreadExists {
        /// The thread.
        thread: ThreadId,
    },

    /// A call that starts a thread named a thread id that cannot be used: empty, or longer than
    /// [`ThreadId::MAX_LEN`] bytes (tokens carry the id).
    #[error("thread id {thread:?} cannot be used: {reason}")]
    InvalidThreadId {
        /// The id.
        thread: ThreadId,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// The token's thread has moved on since the token was issued: it was resumed already (of
    /// two resumes of one token exactly one proceeds), or recovered.
    #[error("thread `{thread}` has moved on since this token was issued (it was already resumed)")]
    StaleResume {
        /// The thread.
        thread: ThreadId,
    },

    /// The token or checkpoint belongs to another graph.
    #[error("this belongs to {}, not to graph `{expected}`", match found { Some(found) => format!("graph `{found}`"), None => String::from("another graph") })]
    GraphMismatch {
        /// The graph of the app.
        expected: String,
        /// The graph the token or checkpoint belongs to, when known.
        found: Option<String>,
    },

    /// The token or checkpoint was written by another shape of this graph or of its state
    /// struct (nodes, edges, fields, types or reducers changed since).
    #[error("thread `{thread}` was checkpointed by another version of graph `{graph}` (its {what} changed since)")]
    SchemaMismatch {
        /// The graph.
        graph: String,
        /// The thread.
        thread: ThreadId,
        /// What changed: `"graph"` or `"state struct"`.
        what: &'static str,
    },

    /// The token is not one this app can accept: not a token, truncated, altered, or unsigned or
    /// signed with another key where the app signs tokens.
    #[error("invalid resume token: {reason}")]
    InvalidToken {
        /// What is wrong with it.
        reason: &'static str,
    },

    /// A resume's answer does not fit the pause it answers (it does not deserialize as the node
    /// expects, names no pending pause, or is missing); the token stays valid.
    #[error("the answer to node `{node}` does not fit (expected {expected}): {reason}")]
    BadResumeValue {
        /// The paused node.
        node: NodeName,
        /// What the node expects: the Rust type it deserializes the answer as, or a description.
        expected: String,
        /// What does not fit.
        reason: String,
    },

    /// The pause's timeout (`interrupt ask(…, timeout = SECS)`) passed before the resume; the
    /// thread's state stays readable.
    #[error("the pause of node `{node}` on thread `{thread}` expired")]
    Expired {
        /// The thread.
        thread: ThreadId,
        /// The paused node.
        node: NodeName,
    },

    /// The thread has no checkpoint.
    #[error("thread `{thread}` has no checkpoint")]
    CheckpointNotFound {
        /// The thread.
        thread: ThreadId,
    },

    /// `fork` named a checkpoint the thread's history does not hold (never written, or
    /// removed by `prune`).
    #[error("thread `{thread}` has no checkpoint {checkpoint}")]
    NoSuchCheckpoint {
        /// The thread.
        thread: ThreadId,
        /// The checkpoint asked for.
        checkpoint: CheckpointId,
    },

    /// `update_state` named a node the graph does not have.
    #[error("graph `{graph}` has no node `{node}`")]
    UnknownNode {
        /// The graph.
        graph: String,
        /// The name given.
        node: NodeName,
    },

    /// `update_state` on a thread that stands inside a fan-out (its branches under way or paused):
    /// which branch the update would come from, and where each would go on, is ambiguous.
    /// Resume or recover the thread past its join first.
    #[error("thread `{thread}` stands inside the fan-out after node `{node}` (checkpoint {checkpoint}): an update as one node is ambiguous there; resume or recover it past the join first")]
    InsideFanOut {
        /// The thread.
        thread: ThreadId,
        /// The node whose fan-out is under way.
        node: NodeName,
        /// The thread's head.
        checkpoint: CheckpointId,
    },

    /// A stored checkpoint's bytes are damaged or not a checkpoint; nothing was decoded.
    #[error("checkpoint {checkpoint} of thread `{thread}` is corrupt: {reason}")]
    CorruptCheckpoint {
        /// The thread.
        thread: ThreadId,
        /// The checkpoint's id in the thread's history.
        checkpoint: CheckpointId,
        /// What is wrong with it.
        reason: String,
    },

    /// A sealed store's record does not open (feature `encryption`, `Sealed`): its key is not in
    /// the ring, it was tampered with or moved to another thread or checkpoint, or it is clear
    /// while clear reads are off. Nothing was decoded.
    #[error("checkpoint {checkpoint} of thread `{thread}` (graph `{graph}`) does not open{}: {reason}", key.map(|k| format!(" with key id {k}")).unwrap_or_default())]
    Unsealable {
        /// The graph.
        graph: String,
        /// The thread.
        thread: ThreadId,
        /// The checkpoint's id in the thread's history.
        checkpoint: CheckpointId,
        /// The key id the record names, if it names one.
        key: Option<u32>,
        /// Why it does not open.
        reason: SealFailure,
    },

    /// A node asked for its app's long-term memory ([`Ctx::store`](crate::Ctx::store)), and the
    /// app has none: it has no checkpointer and was given no
    /// [`Builder::memory`](crate::Builder::memory).
    #[error("node `{node}` asked for the app's memory (`ctx.store()`), and the app has none: give it a checkpointer or a `Builder::memory`")]
    NoMemory {
        /// The node.
        node: NodeName,
    },

    /// A call to long-term memory ([`Memory`](crate::Memory)) could not be carried out: a
    /// namespace or key that cannot be used, a value that is not a JSON object, a semantic
    /// search without an embedder, an embedder that failed, a damaged item.
    #[error("memory item {key:?} in namespace {namespace:?}: {problem}")]
    Memory {
        /// The namespace the call named (for a search, its prefix).
        namespace: Vec<String>,
        /// The key the call named (`None`: a search or a listing).
        key: Option<String>,
        /// What went wrong.
        #[source]
        problem: MemoryProblem,
    },

    /// The checkpoint store failed (I/O, a lock, a full disk …); `source` is its error, and its
    /// message is part of this one's.
    #[error("the checkpoint store failed: {source}")]
    Store {
        /// The store's own error.
        #[source]
        source: BoxError,
    },
}

/// Why a sealed record does not open ([`Error::Unsealable`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SealFailure {
    /// The record names a key id the ring does not hold (a key dropped too early, or another ring).
    #[error("the key ring has no key of this id")]
    UnknownKey,
    /// Authentication failed: the record was changed, or moved to another graph, thread or
    /// checkpoint id, or sealed with another key of the same id.
    #[error("authentication failed: the record was tampered with or moved from another thread or checkpoint")]
    Tampered,
    /// The record is clear (not sealed), and clear reads are not allowed.
    #[error("the record is not sealed (clear); allow clear reads to read records written before sealing")]
    NotSealed,
    /// The record is shorter than a sealed record's header.
    #[error("the record is truncated")]
    Truncated,
    /// The record's format version is not one this build reads.
    #[error("unknown sealed-record version {0}")]
    UnknownVersion(u8),
    /// The checkpoint is too large for the cipher to seal.
    #[error("the checkpoint is too large to seal")]
    TooLarge,
}

/// What went wrong with a call to long-term memory ([`Error::Memory`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryProblem {
    /// A namespace label is empty, holds a `.` (the separator of labels in dotted namespaces)
    /// or a control character; or a put named no label at all.
    #[error("namespace label {label:?} cannot be used: a namespace has at least one label, each non-empty, without `.` or control characters")]
    BadNamespace {
        /// The label (empty when the namespace has none).
        label: String,
    },
    /// The key is empty or holds a control character.
    #[error("the key must be non-empty, without control characters")]
    BadKey,
    /// The namespace and key together are longer than a store's thread id allows.
    #[error("the namespace and key are too long: at most {max} bytes together, as a JSON array")]
    TooLong {
        /// The most bytes allowed.
        max: usize,
    },
    /// An item's value is not a JSON object.
    #[error("an item's value must be a JSON object, not {found}")]
    NotAnObject {
        /// The value given, as JSON text (cut short).
        found: String,
    },
    /// A search asked for similarity to a text, and the memory has no embedder.
    #[error("semantic search needs an embedder (`Memory::embedder`); search by namespace and filter instead")]
    NoEmbedder,
    /// The embedder failed, or gave a wrong number of vectors.
    #[error("the embedder failed")]
    Embedder {
        /// Its error.
        #[source]
        source: BoxError,
    },
    /// A stored item does not read.
    #[error("the stored item is damaged: {reason}")]
    Damaged {
        /// Why it does not read.
        reason: String,
    },
    /// Other writers changed the item again and again while this call wrote it.
    #[error("the item changed {attempts} times while it was being written")]
    Busy {
        /// How many times the write was tried.
        attempts: usize,
    },
}

impl Error {
    /// An [`Error::Store`] from any error of a backing store.
    pub fn store(source: impl Into<BoxError>) -> Self {
        Error::Store { source: source.into() }
    }
}

fn join_names(names: &[NodeName]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    quoted.join(", ")
}

/// An error and its sources as one line — `error: cause: cause of the cause` — leaving out a
/// cause whose text the line already holds (many errors repeat their source in their message).
/// What the front ends print for an error; tea's own messages keep sources out of their text
/// (`#[source]`), so this is where they are joined.
///
/// ```
/// let error = tea::Error::NodeFailed { node: "fetch".into(), source: "timed out".into() };
/// assert_eq!(tea::error_chain(&error), "node `fetch` failed: timed out");
/// let store = tea::Error::store("disk full");
/// assert_eq!(tea::error_chain(&store), "the checkpoint store failed: disk full");
/// ```
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let shown = cause.to_string();
        if !text.contains(&shown) {
            text.push_str(": ");
            text.push_str(&shown);
        }
        source = cause.source();
    }
    text
}

/// The message of a caught panic (`panic!("…")` payloads are `&str` or `String`).
///
/// The payload is user data: its `Drop` may panic in turn (`panic_any(Bomb)`), so it is
/// dropped under `catch_unwind` too, and a payload whose drop panics again is leaked rather
/// than let unwind through tea.
pub(crate) fn panic_message(payload: Box<dyn Any + Send>) -> String {
    let message = if let Some(message) = payload.downcast_ref::<String>() {
        message.clone()
    } else if let Some(message) = payload.downcast_ref::<&'static str>() {
        (*message).to_owned()
    } else {
        String::from("(a panic without a message)")
    };
    drop_payload(payload);
    message
}

/// Drops a caught panic's payload without letting a panicking `Drop` escape.
pub(crate) fn drop_payload(payload: Box<dyn Any + Send>) {
    if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        // The drop panicked and left another payload: dropping that could panic forever.
        std::mem::forget(again);
    }
}

/// An error of a subgraph node's child that the parent's run reports as its own rather than as
/// the node's failure: the child's thread is owned by a live run ([`Error::ThreadBusy`]), or an
/// ancestor's thread was taken over ([`Error::LeaseLost`]). `model::produce::produced` unwraps it. (Also a pause under a store-less parent, [`Error::PausedWithoutCheckpointer`].)
#[derive(Debug)]
pub(crate) struct Passthrough(pub(crate) Error);

impl std::fmt::Display for Passthrough {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Passthrough {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}
