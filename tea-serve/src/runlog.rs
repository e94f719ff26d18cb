//! Runs as the store keeps them, so that a run is known beyond the process that runs it: to
//! the other replicas on one database, and to this server after a restart. Each run's record
//! is the protocol's `RunWaitResponse` as it last stood (`run`, `values`, `interrupts`,
//! `error`), written when the run starts (`pending`) and when it ends, in the agents' own
//! `Checkpointer` under a graph name of its own ([`GRAPH`]), one store thread per run id.
//! Which replica holds a run that has not ended, and how another takes it over, is the run's
//! claim (`queue.rs`); its events as it goes are stored beside it (`journal.rs`).
//!
//! Another replica answers for a run from its record: its state, its end (waited for by
//! polling the record), and its cancel, which it asks for by setting the record's `cancel`,
//! which the replica running it polls (every [`CANCEL_POLL`]) while the run lasts.
//!
//! A thread keeps the records of its last [`KEPT_PER_THREAD`] runs (the thread's record lists
//! them; older ones are deleted as new ones end) and loses them with the thread.

use crate::error::ApiError;
use crate::records::{decode_in, swap, swap_at};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Duration;
use tea_runtime::{Checkpointer, ThreadId};

/// The graph name the run records are stored under.
pub(crate) const GRAPH: &str = "tea-serve#runs";
/// How many run records a thread keeps.
pub(crate) const KEPT_PER_THREAD: usize = 100;
/// How often a running run looks for a cancel asked by another replica.
pub(crate) const CANCEL_POLL: Duration = Duration::from_millis(500);

/// A run as stored.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct RunRecord {
    /// The protocol's `RunWaitResponse` as the run last stood.
    pub(crate) wait: Value,
    /// Asked to stop by a request to another replica than the one running it.
    #[serde(default)]
    pub(crate) cancel: bool,
}

impl RunRecord {
    /// The protocol's `Run`.
    pub(crate) fn run(&self) -> &Value {
        &self.wait["run"]
    }

    /// Whether the run had not ended when its record was last written.
    pub(crate) fn pending(&self) -> bool {
        self.run()["status"].as_str().is_none_or(|s| s == "pending")
    }
}

/// Writes the `pending` record of the new run `id`: one append, as no record of a new run id
/// can exist. Returns the record's head.
pub(crate) fn create(store: &dyn Checkpointer, id: &str, wait: Value) -> Result<u64, ApiError> {
    let (head, _) = swap_at(store, GRAPH, &ThreadId::from(id), Some((None, None)), |current: Option<RunRecord>| {
        Ok(Some(RunRecord { wait: wait.clone(), cancel: current.is_some_and(|c| c.cancel) }))
    })?;
    Ok(head.unwrap_or(0))
}

/// Writes the record of run `id` (`wait`: its `RunWaitResponse`), keeping a cancel asked for.
/// `known`: the head the run's own replica wrote, trusted for a first attempt of one append
/// (while nobody wrote the record since: no cancel was asked); `None`: the head is read.
pub(crate) fn write_after(store: &dyn Checkpointer, id: &str, known: Option<u64>, wait: Value) -> Result<(), ApiError> {
    let known = known.map(|head| (Some(head), Some(RunRecord { wait: Value::Null, cancel: false })));
    swap_at(store, GRAPH, &ThreadId::from(id), known, |current: Option<RunRecord>| {
        Ok(Some(RunRecord { wait: wait.clone(), cancel: current.is_some_and(|c| c.cancel) }))
    })
    .map(drop)
}

/// The record of run `id`, if there is one.
pub(crate) fn read(store: &dyn Checkpointer, id: &str) -> Result<Option<RunRecord>, ApiError> {
    let thread = ThreadId::from(id);
    match store.head(GRAPH, &thread)? {
        None => Ok(None),
        Some((_, bytes)) => decode_in(GRAPH, &thread, &bytes).map(Some),
    }
}

/// Asks the replica running run `id` to cancel it (when it is pending); the record as it is.
pub(crate) fn ask_cancel(store: &dyn Checkpointer, id: &str) -> Result<Option<RunRecord>, ApiError> {
    swap(store, GRAPH, &ThreadId::from(id), |current: Option<RunRecord>| {
        Ok(current.filter(|r| r.pending() && !r.cancel).map(|r| RunRecord { cancel: true, ..r }))
    })
}

/// Deletes the record of run `id`, and its stored events.
pub(crate) fn delete(store: &dyn Checkpointer, id: &str) -> Result<bool, ApiError> {
    crate::journal::delete(store, id)?;
    Ok(store.delete(GRAPH, &ThreadId::from(id))?)
}

/// Every run record, with its run id.
pub(crate) fn all(store: &dyn Checkpointer) -> Result<Vec<(String, RunRecord)>, ApiError> {
    let mut found = Vec::new();
    for id in store.threads(GRAPH)? {
        // A record deleted since the listing is skipped.
        if let Some(record) = read(store, id.as_str())? {
            found.push((id.as_str().to_owned(), record));
        }
    }
    Ok(found)
}
