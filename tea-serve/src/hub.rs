//! A thread's runs in the order they held it, as the store keeps them, so that the thread's
//! event stream (`streaming.rs`) can be read on any replica: each run that begins on a thread
//! appends its id to the thread's list under a graph name of its own
//! ([`records::THREAD_RUNS`](crate::records::THREAD_RUNS)), entry `n` the `n`th run (from 1). The
//! events themselves are each run's own, as the run stores them (`journal.rs`); a thread event's
//! sequence number is its run's entry and its place among the run's events ([`seq`]), the same
//! on every replica. A thread keeps its last [`ENTRIES_KEPT`] entries and loses them with its
//! record.
//!
//! This process's [`Hub`] of a thread wakes the thread's streams here when a run of this
//! process begins on it (others' runs are found by reading the list every [`POLL`]), and keeps
//! the list's head as this process last wrote it, so that the next run's entry is one append.

use crate::error::ApiError;
use crate::records::{decode_in, THREAD_RUNS};
use crate::time::now_ms;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tea_runtime::{AppendOutcome, Checkpointer, ThreadId};
use tokio::sync::watch;

/// How many entries a thread's list keeps (older ones go as new ones are written).
const ENTRIES_KEPT: usize = 128;
/// Compare-and-swap attempts before an entry gives up.
const ATTEMPTS: usize = 32;
/// How many of the last entries a run taken over looks through for its own.
const LOOK_BACK: u64 = 8;
/// How often a stream of a thread looks for a run of another replica that began on it.
pub(crate) const POLL: Duration = Duration::from_millis(100);

/// One entry of a thread's list of runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Entry {
    run: String,
}

/// The sequence number of the event at `place` among the events of the thread's `entry`th run:
/// the entry in the high 32 bits (from 0), the place in the low ones (from 1), so that the
/// numbers grow along the thread's events and `0` is before all of them.
pub(crate) fn seq(entry: u64, place: usize) -> u64 {
    (entry.saturating_sub(1) << 32) | (u64::try_from(place).unwrap_or(u64::MAX) + 1).min(0xffff_ffff)
}

/// Where the events after sequence number `since` start: the entry of their run (from 1) and
/// the place of the last event of that run already seen (`None`: none of it).
pub(crate) fn start_after(since: u64) -> (u64, Option<usize>) {
    let place = since & 0xffff_ffff;
    ((since >> 32) + 1, usize::try_from(place).ok().and_then(|p| p.checked_sub(1)))
}

/// Adds run `run` to the end of `thread`'s list; `guess`: the list's head as this process last
/// knew it (0: not known). A run taken over (`again`) is not added twice: it looks for its id
/// among the last entries first. Returns the list's new head.
pub(crate) fn note(
    store: &dyn Checkpointer,
    thread: &ThreadId,
    run: &str,
    guess: u64,
    again: bool,
) -> Result<u64, ApiError> {
    if again {
        if let Some((head, _)) = store.head(THREAD_RUNS, thread)? {
            if entries(store, thread, head.saturating_sub(LOOK_BACK - 1).max(1))?.iter().any(|(_, r)| r == run) {
                return Ok(head);
            }
        }
    }
    let bytes = serde_json::to_vec(&Entry { run: run.to_owned() }).map_err(|e| ApiError::internal(e.to_string()))?;
    let mut expected = (guess > 0).then_some(guess);
    for _ in 0..ATTEMPTS {
        let n = expected.map_or(1, |n| n + 1);
        match store.append(THREAD_RUNS, thread, expected, n, &bytes, false)? {
            AppendOutcome::Written => {
                if n.is_multiple_of(64) {
                    store.prune(THREAD_RUNS, thread, ENTRIES_KEPT)?;
                }
                return Ok(n);
            }
            AppendOutcome::Conflict { head } => expected = head,
        }
    }
    Err(ApiError::conflict(
        "busy",
        format!("the list of runs of thread `{thread}` changed {ATTEMPTS} times while run `{run}` was added to it"),
    ))
}

/// The entries of `thread`'s list from entry `from` on (those still kept), oldest first: each
/// its number and its run's id.
pub(crate) fn entries(store: &dyn Checkpointer, thread: &ThreadId, from: u64) -> Result<Vec<(u64, String)>, ApiError> {
    let Some((head, bytes)) = store.head(THREAD_RUNS, thread)? else { return Ok(Vec::new()) };
    if head < from {
        return Ok(Vec::new());
    }
    if head == from {
        return Ok(vec![(head, decode_in::<Entry>(THREAD_RUNS, thread, &bytes)?.run)]);
    }
    let mut found = Vec::new();
    for (n, bytes) in store.range(THREAD_RUNS, thread, from, head)? {
        found.push((n, decode_in::<Entry>(THREAD_RUNS, thread, &bytes)?.run));
    }
    Ok(found)
}

/// One event of a thread: its sequence number, channel, method (its channel, or
/// `input.requested`) and data.
#[derive(Clone, Debug)]
pub(crate) struct ThreadEvent {
    pub(crate) seq: u64,
    pub(crate) channel: &'static str,
    pub(crate) method: &'static str,
    pub(crate) run_id: String,
    pub(crate) data: Value,
    pub(crate) at: u64,
}

impl ThreadEvent {
    /// Run `run_id`'s event `event` (a run stream's event name) with `data`, which happened at
    /// `at` (0: not known, now), as the thread's event `seq`, under the channel it belongs to;
    /// `None` for events no channel carries (`messages/…`, and the `end` a run that left this
    /// replica sends its own streams).
    pub(crate) fn of(seq: u64, run_id: &str, event: &str, data: &Value, at: u64) -> Option<ThreadEvent> {
        let (channel, method, data) = match event {
            "metadata" => ("lifecycle", "lifecycle", json!({ "event": "running" })),
            "end" if data.is_null() => return None,
            "end" => {
                let status = match data["status"].as_str() {
                    Some("interrupted") => "interrupted",
                    Some("success") => "completed",
                    _ => "failed",
                };
                ("lifecycle", "lifecycle", json!({ "event": status }))
            }
            "error" => ("lifecycle", "lifecycle", json!({ "event": "failed", "error": data })),
            "updates" if data.get("__interrupt__").is_some() => {
                ("input", "input.requested", json!({ "interrupts": data["__interrupt__"] }))
            }
            "values" => ("values", "values", data.clone()),
            "updates" => ("updates", "updates", data.clone()),
            "custom" => ("custom", "custom", data.clone()),
            "messages" => {
                ("messages", "messages", json!({ "event": "message", "message": data[0], "metadata": data[1] }))
            }
            "debug" => ("tasks", "tasks", data.clone()),
            _ => return None,
        };
        let at = if at == 0 { now_ms() } else { at };
        Some(ThreadEvent { seq, channel, method, run_id: run_id.to_owned(), data, at })
    }

    /// The protocol's `StreamingEvent`.
    pub(crate) fn json(&self) -> Value {
        json!({
            "type": "event",
            "eventId": self.seq.to_string(),
            "seq": self.seq,
            "method": self.method,
            "params": { "namespace": [], "timestamp": self.at, "run_id": self.run_id, "data": self.data },
        })
    }
}

/// This process's view of a thread's list of runs: its head as this process last wrote or read
/// it, and a signal to the thread's streams here when it grew.
#[derive(Debug)]
pub(crate) struct Hub {
    head: AtomicU64,
    grew: watch::Sender<u64>,
}

impl Default for Hub {
    fn default() -> Self {
        Hub { head: AtomicU64::new(0), grew: watch::channel(0).0 }
    }
}

impl Hub {
    /// The list's head as this process last knew it (0: not known).
    pub(crate) fn head(&self) -> u64 {
        self.head.load(Ordering::SeqCst)
    }

    /// The list's head is now `head` (a run of this process added itself): wakes the thread's
    /// streams here.
    pub(crate) fn grew(&self, head: u64) {
        self.head.fetch_max(head, Ordering::SeqCst);
        self.grew.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A receiver that sees [`Hub::grew`].
    pub(crate) fn watch(&self) -> watch::Receiver<u64> {
        self.grew.subscribe()
    }

    /// Whether a stream here watches the thread.
    pub(crate) fn listened(&self) -> bool {
        self.grew.receiver_count() > 0
    }
}
