//! Instrumentation with [`tracing`](https://docs.rs/tracing) (feature `tracing`).
//!
//! Every span and event has the target `tea`, so `RUST_LOG=tea=debug` selects them. Their names
//! and fields are an interface (the guide's chapter "Progress and tracing" lists them): `run`, `fork`, `node`, `checkpoint` and
//! `store` spans; `started` (a node began, in its `node` span), `written` (a checkpoint is
//! stored, in its `checkpoint` span), `paused`, `resumed`, `done`, `conflict` and `failed`
//! events. A span's fields are each set once: a formatter that prints spans only as they close
//! (`FmtSpan::CLOSE`) still shows a node's start, as its `started` event.
//!
//! Without the feature, `traced! { … }` expands to nothing and `store_call` is the call it
//! wraps: no tracing code is compiled into the engine.
//!
//! The spans are opened where the work is: `run` when a run is made (entered by each advance),
//! `node` around a node's function on the main line (`machine::run`) and in a branch
//! (`machine::fork`), `fork` in `fork::run_fork` (each branch runs inside it, on whichever thread
//! takes it, so that branch spans keep their parent), `checkpoint` around each checkpoint write,
//! and `store` around each store call (`store_call` here).

/// The statements inside, compiled only with the feature `tracing`.
#[cfg(feature = "tracing")]
macro_rules! traced {
    ($($body:tt)*) => { $($body)* };
}

/// The statements inside, compiled only with the feature `tracing` (here: nothing).
#[cfg(not(feature = "tracing"))]
macro_rules! traced {
    ($($body:tt)*) => {};
}

pub(crate) use traced;

use crate::vocab::error::Error;
use crate::vocab::name::ThreadId;

/// The `store` span of a store call (`op` on `thread` of `graph`), its duration recorded when
/// the call returns.
#[cfg(feature = "tracing")]
fn store_span(op: &'static str, graph: &str, thread: Option<&ThreadId>) -> tracing::Span {
    tracing::trace_span!(
        target: "tea",
        "store",
        op,
        graph,
        thread = thread.map(ThreadId::as_str),
        duration_us = tracing::field::Empty,
    )
}

/// Calls the store (`op` on `thread` of `graph`) inside a `store` span.
#[cfg(feature = "tracing")]
pub(crate) fn store_call<T>(
    op: &'static str,
    graph: &str,
    thread: Option<&ThreadId>,
    call: impl FnOnce() -> Result<T, Error>,
) -> Result<T, Error> {
    let span = store_span(op, graph, thread);
    let _entered = span.enter();
    let started = std::time::Instant::now();
    let result = call();
    span.record("duration_us", micros(started.elapsed()));
    if let Err(error) = &result {
        tracing::warn!(target: "tea", error = error_kind(error), reason = %error, "store call failed");
    }
    result
}

/// Awaits a store call (`op` on `thread` of `graph`) inside a `store` span.
#[cfg(all(feature = "tokio", feature = "tracing"))]
pub(crate) async fn store_call_async<T>(
    op: &'static str,
    graph: &str,
    thread: Option<&ThreadId>,
    call: impl std::future::Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    use tracing::Instrument;
    let span = store_span(op, graph, thread);
    let started = std::time::Instant::now();
    let result = call.instrument(span.clone()).await;
    span.record("duration_us", micros(started.elapsed()));
    if let Err(error) = &result {
        span.in_scope(
            || tracing::warn!(target: "tea", error = error_kind(error), reason = %error, "store call failed"),
        );
    }
    result
}

/// Awaits a store call (here without a span: the feature `tracing` is off).
#[cfg(all(feature = "tokio", not(feature = "tracing")))]
#[inline(always)]
pub(crate) async fn store_call_async<T>(
    _op: &'static str,
    _graph: &str,
    _thread: Option<&ThreadId>,
    call: impl std::future::Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    call.await
}

/// Calls the store (here without a span: the feature `tracing` is off).
#[cfg(not(feature = "tracing"))]
#[inline(always)]
pub(crate) fn store_call<T>(
    _op: &'static str,
    _graph: &str,
    _thread: Option<&ThreadId>,
    call: impl FnOnce() -> Result<T, Error>,
) -> Result<T, Error> {
    call()
}

/// The `started` event of a node, in its `node` span `span`: a subscriber that shows spans
/// only when they close still sees when the node began.
#[cfg(feature = "tracing")]
pub(crate) fn started(span: &tracing::Span) {
    span.in_scope(|| tracing::debug!(target: "tea", "started"));
}

/// A duration in whole microseconds, as the `duration_us` fields record it.
#[cfg(feature = "tracing")]
pub(crate) fn micros(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// The name of an error's variant (the `error` field of `failed` events).
#[cfg(feature = "tracing")]
pub(crate) fn error_kind(error: &Error) -> &'static str {
    match error {
        Error::NodeFailed { .. } => "NodeFailed",
        Error::NodePanicked { .. } => "NodePanicked",
        Error::NodeTimedOut { .. } => "NodeTimedOut",
        Error::MissingContext { .. } => "MissingContext",
        Error::NoRoute { .. } => "NoRoute",
        Error::RecursionLimit { .. } => "RecursionLimit",
        Error::NeedsAsync { .. } => "NeedsAsync",
        Error::NoRuntime { .. } => "NoRuntime",
        Error::PausedWithoutCheckpointer { .. } => "PausedWithoutCheckpointer",
        Error::ThreadBusy { .. } => "ThreadBusy",
        Error::LeaseLost { .. } => "LeaseLost",
        Error::StateNotStorable { .. } => "StateNotStorable",
        Error::ConflictingWrites { .. } => "ConflictingWrites",
        Error::ThreadExists { .. } => "ThreadExists",
        Error::InvalidThreadId { .. } => "InvalidThreadId",
        Error::StaleResume { .. } => "StaleResume",
        Error::GraphMismatch { .. } => "GraphMismatch",
        Error::SchemaMismatch { .. } => "SchemaMismatch",
        Error::InvalidToken { .. } => "InvalidToken",
        Error::BadResumeValue { .. } => "BadResumeValue",
        Error::Expired { .. } => "Expired",
        Error::CheckpointNotFound { .. } => "CheckpointNotFound",
        Error::CorruptCheckpoint { .. } => "CorruptCheckpoint",
        Error::NoSuchCheckpoint { .. } => "NoSuchCheckpoint",
        Error::UnknownNode { .. } => "UnknownNode",
        Error::InsideFanOut { .. } => "InsideFanOut",
        Error::Unsealable { .. } => "Unsealable",
        Error::NoMemory { .. } => "NoMemory",
        Error::Memory { .. } => "Memory",
        Error::Store { .. } => "Store",
    }
}
