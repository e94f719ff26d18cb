//! What the protocol keeps about a thread beyond its checkpoints — metadata, timestamps, the
//! timeline of steps, pauses and answers, the last pause's token, the last run's error — kept
//! as a record in the agents' own store, under a graph name of its own ([`NAMESPACE`]). Every
//! write is the store's compare-and-swap on the record's head, so replicas on one database
//! share the records and never lose each other's writes. That compare-and-swap, [`swap`], is
//! the one `runlog.rs` writes through too (the store's items are the engine's `Memory`'s).

use crate::error::ApiError;
use crate::time::now_ms;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tea_runtime::{AppendOutcome, Checkpointer, ThreadId};

/// The graph name the records are stored under.
pub(crate) const NAMESPACE: &str = "tea-serve#threads";
/// The graph name each thread's list of runs is stored under (`hub.rs`), which goes with the
/// thread's record.
pub(crate) const THREAD_RUNS: &str = "tea-serve#thread-runs";
/// The most timeline entries a record keeps (the oldest go first).
const TIMELINE_MAX: usize = 500;
/// Compare-and-swap attempts before a write gives up.
const ATTEMPTS: usize = 64;

/// One thing that happened on a thread.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct Entry {
    /// Milliseconds since the epoch.
    pub(crate) at: u64,
    /// `start`, `step`, `pause`, `answer`, `done`, `error`, `cancelled`.
    pub(crate) kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) node: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) duration_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub(crate) detail: Value,
}

impl Entry {
    pub(crate) fn new(kind: &str, node: Option<String>, detail: Value) -> Self {
        Entry { at: now_ms(), kind: kind.to_owned(), node, duration_ms: None, detail }
    }
}

/// The token of the thread's pending pause, as the run that paused handed it out.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct PauseToken {
    pub(crate) checkpoint: u64,
    pub(crate) token: String,
}

/// A thread as the protocol knows it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub(crate) struct ThreadRecord {
    /// The agent the thread runs, once a run started it.
    #[serde(default)]
    pub(crate) agent: Option<String>,
    #[serde(default)]
    pub(crate) metadata: Map<String, Value>,
    pub(crate) created_at: u64,
    pub(crate) updated_at: u64,
    /// The last run's error, when it failed.
    #[serde(default)]
    pub(crate) error: Option<String>,
    #[serde(default)]
    pub(crate) pause: Option<PauseToken>,
    #[serde(default)]
    pub(crate) timeline: Vec<Entry>,
    /// The ids of the thread's last runs (whose records `runlog.rs` keeps), oldest first.
    #[serde(default)]
    pub(crate) runs: Vec<String>,
    /// The checkpoint a state update wrote (`POST /threads/{id}/state`): while it is the head,
    /// no run holds the thread, and a run without input goes on from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) updated_to: Option<u64>,
}

impl ThreadRecord {
    pub(crate) fn new(agent: Option<String>, metadata: Map<String, Value>) -> Self {
        let now = now_ms();
        ThreadRecord { agent, metadata, created_at: now, updated_at: now, ..ThreadRecord::default() }
    }

    /// Appends `entries` to the timeline, dropping the oldest past the limit.
    pub(crate) fn record(&mut self, entries: impl IntoIterator<Item = Entry>) {
        self.timeline.extend(entries);
        if self.timeline.len() > TIMELINE_MAX {
            let extra = self.timeline.len() - TIMELINE_MAX;
            self.timeline.drain(..extra);
        }
        self.updated_at = now_ms();
    }
}

/// The record of `thread`, if it has one.
pub(crate) fn read(store: &dyn Checkpointer, thread: &ThreadId) -> Result<Option<ThreadRecord>, ApiError> {
    match store.head(NAMESPACE, thread)? {
        None => Ok(None),
        Some((_, bytes)) => decode(thread, &bytes).map(Some),
    }
}

fn decode(thread: &ThreadId, bytes: &[u8]) -> Result<ThreadRecord, ApiError> {
    decode_in(NAMESPACE, thread, bytes)
}

/// Reads, changes and writes back the record of `thread` as one compare-and-swap, retried
/// while another writer gets there first. `change` sees the current record (`None`: there is
/// none) and returns the new one (`None`: leave it as it is). Returns the record as written
/// (or as it is).
pub(crate) fn update(
    store: &dyn Checkpointer,
    thread: &ThreadId,
    change: impl FnMut(Option<ThreadRecord>) -> Result<Option<ThreadRecord>, ApiError>,
) -> Result<Option<ThreadRecord>, ApiError> {
    swap(store, NAMESPACE, thread, change)
}

/// Decodes the JSON record `bytes` of `id` under `graph`.
pub(crate) fn decode_in<T: DeserializeOwned>(graph: &str, id: &ThreadId, bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::internal(format!("the record `{id}` of `{graph}` is damaged: {e}")))
}

/// The compare-and-swap loop of [`update`] for any JSON record kept as the head of `id` under
/// the graph name `graph` (thread records, store items, runs): a reader sees either the old
/// record or the new one, and of two writers that raced, the second retries on what the first
/// wrote.
pub(crate) fn swap<T: Serialize + DeserializeOwned + Clone>(
    store: &dyn Checkpointer,
    graph: &str,
    id: &ThreadId,
    change: impl FnMut(Option<T>) -> Result<Option<T>, ApiError>,
) -> Result<Option<T>, ApiError> {
    swap_at(store, graph, id, None, change).map(|(_, record)| record)
}

/// [`swap`] that also returns the record's head as written (or as it is), and that trusts
/// `known` — a head and its record, as the caller last wrote or read them — for its first
/// attempt instead of reading the head: one round trip (the append) when nobody wrote since,
/// the read and a retry when somebody did.
pub(crate) fn swap_at<T: Serialize + DeserializeOwned + Clone>(
    store: &dyn Checkpointer,
    graph: &str,
    id: &ThreadId,
    mut known: Option<(Option<u64>, Option<T>)>,
    mut change: impl FnMut(Option<T>) -> Result<Option<T>, ApiError>,
) -> Result<(Option<u64>, Option<T>), ApiError> {
    for _ in 0..ATTEMPTS {
        let (expected, current) = match known.take() {
            Some(known) => known,
            None => match store.head(graph, id)? {
                None => (None, None),
                Some((n, bytes)) => (Some(n), Some(decode_in::<T>(graph, id, &bytes)?)),
            },
        };
        let Some(new) = change(current.clone())? else { return Ok((expected, current)) };
        let bytes = serde_json::to_vec(&new).map_err(|e| ApiError::internal(e.to_string()))?;
        let n = expected.map_or(1, |n| n + 1);
        match store.append(graph, id, expected, n, &bytes, true)? {
            AppendOutcome::Written => {
                if n % 16 == 0 {
                    store.prune(graph, id, 1)?;
                }
                return Ok((Some(n), Some(new)));
            }
            AppendOutcome::Conflict { .. } => continue,
        }
    }
    Err(ApiError::conflict(
        "busy",
        format!("the record `{id}` of `{graph}` changed {ATTEMPTS} times while it was being written"),
    ))
}

/// Deletes the record of `thread` and its list of runs; whether it had a record.
pub(crate) fn delete(store: &dyn Checkpointer, thread: &ThreadId) -> Result<bool, ApiError> {
    store.delete(THREAD_RUNS, thread)?;
    Ok(store.delete(NAMESPACE, thread)?)
}

/// The threads with a record.
pub(crate) fn threads(store: &dyn Checkpointer) -> Result<Vec<ThreadId>, ApiError> {
    Ok(store.threads(NAMESPACE)?)
}
