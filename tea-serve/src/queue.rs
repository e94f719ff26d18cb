//! The queue of runs, kept in the store so that a run outlives the replica that took it: each
//! run that has not ended has a claim under a graph name of its own ([`GRAPH`], one store
//! thread per run id) saying which replica holds it and until when, with what it needs to be
//! run elsewhere (its thread, agent and request, whether it started, and the checkpoint it
//! started from). Every change is the store's compare-and-swap on the claim ([`swap`]), so the
//! same code is correct on every store (memory, sled, a directory, PostgreSQL): of replicas
//! that race for a claim, one gets it.
//!
//! A run's claim is written before the run touches its thread and deleted once its end is
//! recorded — each in one call for the run's own replica, which knows the claim's head (a new
//! run's claim cannot exist yet). While the run goes, its replica looks every [`Worker::every`]
//! (a quarter of the lease) and renews the claim once it is half a lease old. Each replica's
//! worker, on the same beat, lists the queue when a claim may have lapsed since it last looked
//! ([`Worker::due`]: at the earliest lease's end it saw, a lease after its last listing at the
//! latest, since a claim made after it lapses no sooner), reading only the claims of other
//! replicas' runs; it takes every claim whose lease has lapsed (its replica died, or was cut
//! off) and finishes the run here
//! (`runs::take_over`): from its request when it had not changed its thread yet, else by the
//! engine's `recover`, which goes on from the thread's last checkpoint without running a
//! recorded node again — and which refuses while the engine's own lease on the thread, renewed
//! as the run advances, shows the old run alive (the claim is then put back for later). A
//! replica that finds its claim taken stops recording its run: the taker records it.
//!
//! A server from before the queue wrote run records but no claims: a run it left `pending` when
//! it died would hold its thread busy for good. Each worker, on its first tick, gives such a run
//! a claim held by nobody ([`adopt`], a compare-and-swap on a claim that does not exist), which
//! lapses a lease later and is then taken over as any other.

use crate::error::ApiError;
use crate::records::{decode_in, swap, swap_at};
use crate::time::now_ms;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tea_runtime::{AppendOutcome, Checkpointer, ThreadId};

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

/// Writes the claim of run `id` (a new run's, held by this replica): one append, as no claim
/// of a new run id can exist. Returns the claim's head.
pub(crate) fn put(store: &dyn Checkpointer, id: &str, claim: &Claim) -> Result<u64, ApiError> {
    let (head, _) =
        swap_at(store, GRAPH, &ThreadId::from(id), Some((None, None)), |_: Option<Claim>| Ok(Some(claim.clone())))?;
    Ok(head.unwrap_or(0))
}

/// Writes the claim of run `id`, a run of a server from before the queue whose record says it
/// has not ended, unless the run has a claim: whether this call made it. Of replicas that race
/// to adopt one run, one does.
pub(crate) fn adopt(store: &dyn Checkpointer, id: &str, claim: &Claim) -> Result<bool, ApiError> {
    let bytes = serde_json::to_vec(claim).map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(store.append(GRAPH, &ThreadId::from(id), None, 1, &bytes, true)? == AppendOutcome::Written)
}

/// Renews `replica`'s claim of run `id` until `until`: the claim's new head, or `None` when
/// the replica no longer holds it.
pub(crate) fn renew(store: &dyn Checkpointer, id: &str, replica: &str, until: u64) -> Result<Option<u64>, ApiError> {
    let mut held = false;
    let (head, _) = swap_at(store, GRAPH, &ThreadId::from(id), None, |current: Option<Claim>| {
        held = current.as_ref().is_some_and(|c| c.holder == replica);
        Ok(current.filter(|c| c.holder == replica).map(|c| Claim { until, ..c }))
    })?;
    Ok(head.filter(|_| held))
}

/// Notes that run `id` (held by `replica`) began on its thread, whose head was `from`: the
/// claim's new head, or `None` when the replica no longer holds it.
pub(crate) fn started(
    store: &dyn Checkpointer,
    id: &str,
    replica: &str,
    from: Option<u64>,
) -> Result<Option<u64>, ApiError> {
    let mut held = false;
    let (head, _) = swap_at(store, GRAPH, &ThreadId::from(id), None, |current: Option<Claim>| {
        held = current.as_ref().is_some_and(|c| c.holder == replica);
        Ok(current.filter(|c| c.holder == replica).map(|c| Claim { started: true, from, ..c }))
    })?;
    Ok(head.filter(|_| held))
}

/// Takes run `id` for `replica` until `until` if its holder's lease lapsed before `now`: the
/// claim as taken and its head, or `None` when it is held (or gone).
pub(crate) fn take(
    store: &dyn Checkpointer,
    id: &str,
    replica: &str,
    now: u64,
    until: u64,
) -> Result<Option<(Claim, u64)>, ApiError> {
    let mut taken = false;
    let (head, claim) = swap_at(store, GRAPH, &ThreadId::from(id), None, |current: Option<Claim>| {
        taken = current.as_ref().is_some_and(|c| c.until < now);
        Ok(current.filter(|c| c.until < now).map(|c| Claim {
            holder: replica.to_owned(),
            until,
            takeovers: c.takeovers + 1,
            ..c
        }))
    })?;
    Ok(claim.zip(head).filter(|_| taken))
}

/// Puts `replica`'s claim of run `id` back, for any replica to take after `until`.
pub(crate) fn put_back(store: &dyn Checkpointer, id: &str, replica: &str, until: u64) -> Result<(), ApiError> {
    swap(store, GRAPH, &ThreadId::from(id), |current: Option<Claim>| {
        Ok(current.filter(|c| c.holder == replica).map(|c| Claim { until, holder: String::new(), ..c }))
    })
    .map(drop)
}

/// Deletes the claim of run `id` (its run ended and its end is recorded), unless another
/// replica took it from `replica`. `known`: the head `replica` last wrote, which is deleted in
/// one call when nobody wrote the claim since (else the claim is read, and deleted if
/// `replica` still holds it).
pub(crate) fn release(store: &dyn Checkpointer, id: &str, replica: &str, known: Option<u64>) -> Result<(), ApiError> {
    let thread = ThreadId::from(id);
    if let Some(head) = known {
        if store.delete_at(GRAPH, &thread, head)? {
            return Ok(());
        }
    }
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

/// What [`lapsed`] finds: the lapsed claims with their run ids, and when the next one lapses.
pub(crate) type Lapsed = (Vec<(String, Claim)>, Option<u64>);

/// The claims whose lease lapsed before `now`, with their run ids, and the earliest time one
/// of the others lapses (`None`: there are none). The claims of the runs `mine` names (this
/// replica's, which it renews itself) are not read.
pub(crate) fn lapsed(store: &dyn Checkpointer, now: u64, mine: impl Fn(&str) -> bool) -> Result<Lapsed, ApiError> {
    let mut found = Vec::new();
    let mut next: Option<u64> = None;
    for id in store.threads(GRAPH)? {
        if mine(id.as_str()) {
            continue;
        }
        if let Some((_, bytes)) = store.head(GRAPH, &id)? {
            let claim: Claim = decode_in(GRAPH, &id, &bytes)?;
            if claim.until < now {
                found.push((id.as_str().to_owned(), claim));
            } else {
                next = Some(next.map_or(claim.until, |n| n.min(claim.until)));
            }
        }
    }
    Ok((found, next))
}

/// A replica's identity and lease, and its worker's beat.
#[derive(Clone, Debug)]
pub(crate) struct Worker {
    /// This replica's id (new for each router: a restarted process is another replica).
    pub(crate) replica: String,
    /// How long a claim lasts without renewal.
    pub(crate) lease: Duration,
    /// When (milliseconds since the Unix epoch) the worker next lists the queue: the earliest
    /// time a claim it saw lapses, or a lease after its last listing (a claim made since lapses
    /// no sooner), or sooner when a claim is put back ([`Worker::due_by`]).
    due: Arc<AtomicU64>,
}

impl Worker {
    /// The worker of replica `replica`, whose claims last `lease`; its first tick lists the
    /// queue.
    pub(crate) fn new(replica: String, lease: Duration) -> Self {
        Worker { replica, lease, due: Arc::new(AtomicU64::new(0)) }
    }

    /// Whether the queue is due to be listed at `now`.
    pub(crate) fn due(&self, now: u64) -> bool {
        now >= self.due.load(Ordering::SeqCst)
    }

    /// Sets the next listing a lease after `now` (before a listing: what it finds brings it
    /// forward with [`Worker::due_by`]).
    pub(crate) fn listed(&self, now: u64) {
        self.due.store(now.saturating_add(self.lease_ms()), Ordering::SeqCst);
    }

    /// Brings the next listing forward to `at` at the latest.
    pub(crate) fn due_by(&self, at: u64) {
        self.due.fetch_min(at, Ordering::SeqCst);
    }

    fn lease_ms(&self) -> u64 {
        u64::try_from(self.lease.as_millis()).unwrap_or(u64::MAX / 2)
    }

    /// How often claims are renewed and lapsed ones looked for: a quarter of the lease (at
    /// least 50 ms, at most 5 s).
    pub(crate) fn every(&self) -> Duration {
        (self.lease / 4).clamp(Duration::from_millis(50), Duration::from_secs(5))
    }

    /// The lease's end for a claim made or renewed now.
    pub(crate) fn until(&self) -> u64 {
        now_ms() + self.lease_ms()
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

    fn lapsed_ids(store: &dyn Checkpointer, now: u64) -> Vec<String> {
        lapsed(store, now, |_| false).unwrap().0.into_iter().map(|(id, _)| id).collect()
    }

    #[test]
    fn a_lapsed_claim_is_taken_once_and_a_forgotten_one_by_nobody() {
        let store = tea_runtime::MemoryStore::new();
        assert_eq!(put(&store, "run-1", &claim("dead", 10)).unwrap(), 1);
        put(&store, "run-2", &claim("dead", 10)).unwrap();
        assert_eq!(lapsed_ids(&store, 20).len(), 2);
        // Of two replicas that race for a lapsed claim, one gets it.
        assert_eq!(
            take(&store, "run-1", "b", 20, 1_000).unwrap().map(|(c, head)| (c.holder, head)),
            Some(("b".into(), 2))
        );
        assert!(take(&store, "run-1", "c", 20, 1_000).unwrap().is_none());
        // The thread of run 2 was deleted: its claim goes, whoever held it.
        forget(&store, "run-2").unwrap();
        assert!(lapsed_ids(&store, 2_000).iter().all(|id| id != "run-2"));
        assert!(take(&store, "run-2", "b", 2_000, 3_000).unwrap().is_none());
        // Releasing is the holder's only, with the head it wrote or without.
        release(&store, "run-1", "c", Some(1)).unwrap();
        release(&store, "run-1", "c", None).unwrap();
        assert_eq!(lapsed_ids(&store, 2_000).len(), 1);
        release(&store, "run-1", "b", Some(2)).unwrap();
        assert!(lapsed_ids(&store, 2_000).is_empty());
        // A stale head read first, the claim is still released by its holder.
        put(&store, "run-3", &claim("a", 10)).unwrap();
        assert_eq!(renew(&store, "run-3", "a", 50).unwrap(), Some(2));
        assert_eq!(renew(&store, "run-3", "z", 50).unwrap(), None);
        release(&store, "run-3", "a", Some(1)).unwrap();
        assert!(store.head(GRAPH, &ThreadId::from("run-3")).unwrap().is_none());
    }

    #[test]
    fn a_run_is_adopted_once_and_never_over_its_claim() {
        let store = tea_runtime::MemoryStore::new();
        put(&store, "run-1", &claim("live", 10)).unwrap();
        assert!(!adopt(&store, "run-1", &claim("", 10)).unwrap(), "a run with a claim is not adopted");
        assert!(adopt(&store, "run-2", &claim("", 10)).unwrap());
        assert!(!adopt(&store, "run-2", &claim("", 10)).unwrap(), "adopted once");
        assert_eq!(take(&store, "run-2", "b", 20, 1_000).unwrap().map(|(c, _)| c.takeovers), Some(1));
    }

    #[test]
    fn the_listing_skips_this_replicas_runs_and_tells_when_the_next_claim_lapses() {
        let store = tea_runtime::MemoryStore::new();
        put(&store, "mine", &claim("me", 5)).unwrap();
        put(&store, "old", &claim("dead", 5)).unwrap();
        put(&store, "live", &claim("other", 300)).unwrap();
        put(&store, "later", &claim("other", 900)).unwrap();
        let (found, next) = lapsed(&store, 100, |id| id == "mine").unwrap();
        assert_eq!(found.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(), ["old"]);
        assert_eq!(next, Some(300));
        let worker = Worker::new("me".into(), Duration::from_secs(1));
        worker.listed(100);
        assert!(!worker.due(1_099) && worker.due(1_100));
        worker.due_by(300);
        assert!(!worker.due(299) && worker.due(300));
    }
}
