//! The queue of runs, kept in the store so that a run outlives the replica that took it: each
//! run that has not ended has a claim under a graph name of its own ([`GRAPH`], one store
//! thread per run id) saying which replica holds it and until when, with what it needs to be
//! run elsewhere (its thread, agent and request, whether it started, and the checkpoint it
//! started from). Every change is the store's compare-and-swap on the claim ([`swap`]), so the
//! same code is correct on every store (memory, sled, a directory, PostgreSQL): of replicas
//! that race for a claim, one gets it.
//!
//! A run's claim is written before the run touches its thread and deleted once its end is
//! recorded. While the run goes, its replica renews the claim every [`Worker::every`] (a
//! quarter of the lease). Each replica's worker, on the same beat, takes every claim whose
//! lease has lapsed (its replica died, or was cut off) and finishes the run here
//! (`runs::take_over`): from its request when it had not changed its thread yet, else by the
//! engine's `recover`, which goes on from the thread's last checkpoint without running a
//! recorded node again — and which refuses while the engine's own lease on the thread, renewed
//! as the run advances, shows the old run alive (the claim is then put back for later). A
//! replica that finds its claim taken stops recording its run: the taker records it.

use crate::error::ApiError;
use crate::records::{decode_in, swap};
use crate::time::now_ms;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Duration;
use tea_runtime::{Checkpointer, ThreadId};

/// The graph name the claims are stored under.
pub(crate) const GRAPH: &str = "tea-serve#queue";

/// A run's claim: who holds it, until when, and how to run it elsewhere.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Claim {
    pub(crate) thread: String,
    pub(crate) agent: String,
    /// The replica that holds the run.
    pub(crate) holder: String,
    /// Until when (milliseconds since the Unix epoch) the holder's lease runs.
    pub(crate) until: u64,
    /// The run's request (`RunRequest`).
    pub(crate) request: Value,
    /// Whether the run has begun on its thread (a queued run waits before it does).
    pub(crate) started: bool,
    /// The head of the thread when the run began: an answer whose thread still pauses there
    /// was not applied yet.
    #[serde(default)]
    pub(crate) from: Option<u64>,
    /// The thread goes when the run finishes (a stateless run's).
    pub(crate) delete_after: bool,
    /// How many times another replica took the run over.
    #[serde(default)]
    pub(crate) takeovers: u32,
    /// When the run was made (milliseconds since the Unix epoch).
    #[serde(default)]
    pub(crate) created_at: u64,
}

/// Writes the claim of run `id` (a new run's, held by this replica).
pub(crate) fn put(store: &dyn Checkpointer, id: &str, claim: &Claim) -> Result<(), ApiError> {
    swap(store, GRAPH, &ThreadId::from(id), |_: Option<Claim>| Ok(Some(claim.clone()))).map(drop)
}

/// Renews `replica`'s claim of run `id` until `until`; whether the replica still holds it.
pub(crate) fn renew(store: &dyn Checkpointer, id: &str, replica: &str, until: u64) -> Result<bool, ApiError> {
    let mut held = false;
    swap(store, GRAPH, &ThreadId::from(id), |current: Option<Claim>| {
        held = current.as_ref().is_some_and(|c| c.holder == replica);
        Ok(current.filter(|c| c.holder == replica).map(|c| Claim { until, ..c }))
    })?;
    Ok(held)
}

/// Notes that run `id` (held by `replica`) began on its thread, whose head was `from`.
pub(crate) fn started(store: &dyn Checkpointer, id: &str, replica: &str, from: Option<u64>) -> Result<(), ApiError> {
    swap(store, GRAPH, &ThreadId::from(id), |current: Option<Claim>| {
        Ok(current.filter(|c| c.holder == replica).map(|c| Claim { started: true, from, ..c }))
    })
    .map(drop)
}

/// Takes run `id` for `replica` until `until` if its holder's lease lapsed before `now`: the
/// claim as taken, or `None` when it is held (or gone).
pub(crate) fn take(
    store: &dyn Checkpointer,
    id: &str,
    replica: &str,
    now: u64,
    until: u64,
) -> Result<Option<Claim>, ApiError> {
    let mut taken = false;
    let claim = swap(store, GRAPH, &ThreadId::from(id), |current: Option<Claim>| {
        taken = current.as_ref().is_some_and(|c| c.until < now);
        Ok(current.filter(|c| c.until < now).map(|c| Claim {
            holder: replica.to_owned(),
            until,
            takeovers: c.takeovers + 1,
            ..c
        }))
    })?;
    Ok(claim.filter(|_| taken))
}

/// Puts `replica`'s claim of run `id` back, for any replica to take after `until`.
pub(crate) fn put_back(store: &dyn Checkpointer, id: &str, replica: &str, until: u64) -> Result<(), ApiError> {
    swap(store, GRAPH, &ThreadId::from(id), |current: Option<Claim>| {
        Ok(current.filter(|c| c.holder == replica).map(|c| Claim { until, holder: String::new(), ..c }))
    })
    .map(drop)
}

/// Deletes the claim of run `id` (its run ended and its end is recorded), unless another
/// replica took it from `replica`.
pub(crate) fn release(store: &dyn Checkpointer, id: &str, replica: &str) -> Result<(), ApiError> {
    let thread = ThreadId::from(id);
    let Some((head, bytes)) = store.head(GRAPH, &thread)? else { return Ok(()) };
    let claim: Claim = decode_in(GRAPH, &thread, &bytes)?;
    if claim.holder == replica {
        store.delete_at(GRAPH, &thread, head)?;
    }
    Ok(())
}

/// Deletes the claim of run `id` whoever holds it: its thread was deleted, so no replica may
/// take the run over (which would make the thread again from the run's request).
pub(crate) fn forget(store: &dyn Checkpointer, id: &str) -> Result<(), ApiError> {
    let thread = ThreadId::from(id);
    while let Some((head, _)) = store.head(GRAPH, &thread)? {
        if store.delete_at(GRAPH, &thread, head)? {
            break;
        }
    }
    Ok(())
}

/// The claims whose lease lapsed before `now`, with their run ids.
pub(crate) fn lapsed(store: &dyn Checkpointer, now: u64) -> Result<Vec<(String, Claim)>, ApiError> {
    let mut found = Vec::new();
    for id in store.threads(GRAPH)? {
        if let Some((_, bytes)) = store.head(GRAPH, &id)? {
            let claim: Claim = decode_in(GRAPH, &id, &bytes)?;
            if claim.until < now {
                found.push((id.as_str().to_owned(), claim));
            }
        }
    }
    Ok(found)
}

/// A replica's identity and lease, and its worker's beat.
#[derive(Clone, Debug)]
pub(crate) struct Worker {
    /// This replica's id (new for each router: a restarted process is another replica).
    pub(crate) replica: String,
    /// How long a claim lasts without renewal.
    pub(crate) lease: Duration,
}

impl Worker {
    /// How often claims are renewed and lapsed ones looked for: a quarter of the lease (at
    /// least 50 ms, at most 5 s).
    pub(crate) fn every(&self) -> Duration {
        (self.lease / 4).clamp(Duration::from_millis(50), Duration::from_secs(5))
    }

    /// The lease's end for a claim made or renewed now.
    pub(crate) fn until(&self) -> u64 {
        now_ms() + u64::try_from(self.lease.as_millis()).unwrap_or(u64::MAX / 2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(holder: &str, until: u64) -> Claim {
        Claim {
            thread: "t".into(),
            agent: "a".into(),
            holder: holder.into(),
            until,
            request: Value::Null,
            started: true,
            from: None,
            delete_after: false,
            takeovers: 0,
            created_at: 0,
        }
    }

    #[test]
    fn a_lapsed_claim_is_taken_once_and_a_forgotten_one_by_nobody() {
        let store = tea_runtime::MemoryStore::new();
        put(&store, "run-1", &claim("dead", 10)).unwrap();
        put(&store, "run-2", &claim("dead", 10)).unwrap();
        assert_eq!(lapsed(&store, 20).unwrap().len(), 2);
        // Of two replicas that race for a lapsed claim, one gets it.
        assert!(take(&store, "run-1", "b", 20, 1_000).unwrap().is_some());
        assert!(take(&store, "run-1", "c", 20, 1_000).unwrap().is_none());
        // The thread of run 2 was deleted: its claim goes, whoever held it.
        forget(&store, "run-2").unwrap();
        assert!(lapsed(&store, 2_000).unwrap().iter().all(|(id, _)| id != "run-2"));
        assert!(take(&store, "run-2", "b", 2_000, 3_000).unwrap().is_none());
        // Releasing is the holder's only.
        release(&store, "run-1", "c").unwrap();
        assert_eq!(lapsed(&store, 2_000).unwrap().len(), 1);
        release(&store, "run-1", "b").unwrap();
        assert!(lapsed(&store, 2_000).unwrap().is_empty());
    }
}
