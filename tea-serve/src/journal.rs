//! A run's events as the store keeps them, so that a stream of the run opened on any replica —
//! or reopened with `Last-Event-ID` after the replica that ran it died — sees them as they
//! come. The replica that runs a run appends its events in batches (what came within
//! [`COALESCE`] of each other) under a graph name of its own ([`GRAPH`]), one store thread per
//! run id, each batch one record numbered after the last; a stream elsewhere reads the records
//! after the last it read every [`POLL`]. Each event's place in the run's events (from 0) is
//! its SSE id, the same on every replica, and a replica that takes a run over goes on from the
//! last one stored. A run keeps its last [`BATCHES_KEPT`] batches and loses them with its record.

use crate::error::ApiError;
use crate::records::decode_in;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Duration;
use tea_runtime::{AppendOutcome, Checkpointer, ThreadId};

/// The graph name the events are stored under.
pub(crate) const GRAPH: &str = "tea-serve#events";
/// How many batches a run keeps (older ones go as new ones are written).
const BATCHES_KEPT: usize = 256;
/// How long the writer waits after an event for more to write with it.
pub(crate) const COALESCE: Duration = Duration::from_millis(20);
/// How often a stream of a run of another replica looks for new events.
pub(crate) const POLL: Duration = Duration::from_millis(100);
/// Compare-and-swap attempts before an append gives up.
const ATTEMPTS: usize = 16;

/// Events `first`, `first + 1`, … of a run, as stored: each its SSE event name and data, and
/// when it happened (milliseconds since the Unix epoch; batches of older servers have none).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Batch {
    pub(crate) first: usize,
    pub(crate) events: Vec<(String, Value)>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) at: Vec<u64>,
}

impl Batch {
    /// The place of the event after this batch's last.
    pub(crate) fn next(&self) -> usize {
        self.first + self.events.len()
    }
}

/// Appends `events` (from place `first` on; `at[k]`: when the `k`th happened) to run `id`'s
/// events; those of places already stored (written before by a replica that lost the run) are
/// not written again.
pub(crate) fn append(
    store: &dyn Checkpointer,
    id: &str,
    first: usize,
    events: &[(String, Value)],
    at: &[u64],
) -> Result<(), ApiError> {
    let thread = ThreadId::from(id);
    for _ in 0..ATTEMPTS {
        let head = store.head(GRAPH, &thread)?;
        let stored = match &head {
            Some((_, bytes)) => decode_in::<Batch>(GRAPH, &thread, bytes)?.next(),
            None => 0,
        };
        let skip = stored.saturating_sub(first);
        if skip >= events.len() {
            return Ok(());
        }
        let batch = Batch {
            first: first + skip,
            events: events[skip..].to_vec(),
            at: at.get(skip..).unwrap_or_default().to_vec(),
        };
        let bytes = serde_json::to_vec(&batch).map_err(|e| ApiError::internal(e.to_string()))?;
        let expected = head.map(|(n, _)| n);
        let n = expected.map_or(1, |n| n + 1);
        match store.append(GRAPH, &thread, expected, n, &bytes, false)? {
            AppendOutcome::Written => {
                if n % 64 == 0 {
                    store.prune(GRAPH, &thread, BATCHES_KEPT)?;
                }
                return Ok(());
            }
            AppendOutcome::Conflict { .. } => continue,
        }
    }
    Err(ApiError::conflict(
        "busy",
        format!("the events of run `{id}` changed {ATTEMPTS} times while they were being written"),
    ))
}

/// [`append`] by the writer that knows what is stored: `known` is the head after its own last
/// append (`None`: none yet) and the stored events end at `first`. One round trip (the append)
/// while nobody else wrote the run's events; the new head, or `None` when somebody did (the
/// events then went through [`append`], and the head is not known).
pub(crate) fn append_after(
    store: &dyn Checkpointer,
    id: &str,
    known: Option<u64>,
    first: usize,
    events: &[(String, Value)],
    at: &[u64],
) -> Result<Option<u64>, ApiError> {
    let batch = Batch { first, events: events.to_vec(), at: at.to_vec() };
    let bytes = serde_json::to_vec(&batch).map_err(|e| ApiError::internal(e.to_string()))?;
    let n = known.map_or(1, |n| n + 1);
    match store.append(GRAPH, &ThreadId::from(id), known, n, &bytes, false)? {
        AppendOutcome::Written => {
            if n.is_multiple_of(64) {
                store.prune(GRAPH, &ThreadId::from(id), BATCHES_KEPT)?;
            }
            Ok(Some(n))
        }
        AppendOutcome::Conflict { .. } => append(store, id, first, events, at).map(|()| None),
    }
}

/// The batches of run `id` after batch `after` (0: from the first kept), oldest first, with
/// their numbers.
pub(crate) fn after(store: &dyn Checkpointer, id: &str, after: u64) -> Result<Vec<(u64, Batch)>, ApiError> {
    let thread = ThreadId::from(id);
    let Some((head, bytes)) = store.head(GRAPH, &thread)? else { return Ok(Vec::new()) };
    if head <= after {
        return Ok(Vec::new());
    }
    if head == after + 1 {
        return Ok(vec![(head, decode_in(GRAPH, &thread, &bytes)?)]);
    }
    let mut found = Vec::new();
    for (n, bytes) in store.range(GRAPH, &thread, after + 1, head)? {
        found.push((n, decode_in(GRAPH, &thread, &bytes)?));
    }
    Ok(found)
}

/// How many events of run `id` are stored (the place of the next one).
pub(crate) fn stored(store: &dyn Checkpointer, id: &str) -> Result<usize, ApiError> {
    let thread = ThreadId::from(id);
    match store.head(GRAPH, &thread)? {
        Some((_, bytes)) => Ok(decode_in::<Batch>(GRAPH, &thread, &bytes)?.next()),
        None => Ok(0),
    }
}

/// Deletes run `id`'s events.
pub(crate) fn delete(store: &dyn Checkpointer, id: &str) -> Result<(), ApiError> {
    store.delete(GRAPH, &ThreadId::from(id))?;
    Ok(())
}
