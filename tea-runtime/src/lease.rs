//! A run's hold on its thread: what a run lends its subgraph nodes (its store and options) and
//! the lease its checkpoints carry, which the child runs of its subgraph nodes keep alive.
//!
//! Below the model (a node's `Ctx` carries a run's [`Host`]) and above the store and the
//! checkpoint format it writes with. A renewal is planned here ([`Host::plan_renewal`]) and
//! written by whoever drives the run, through its driver's `append`.

use crate::format::checkpoint::{Identity, Lease};
use crate::store::{AppendOutcome, Checkpointer};
use crate::vocab::clock::now_ms;
use crate::vocab::error::Error;
use crate::vocab::name::{CheckpointId, ThreadId};
use crate::vocab::options::Durability;
use crate::vocab::trace::traced;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// What a run lends its subgraph nodes: its store and its app's options, and its hold on its
/// thread, which the child runs of its subgraph nodes keep alive.
///
/// One per run with a store (made by `App::persist`, reached by nodes through `Ctx::host`). The
/// run writes its checkpoints through [`Held`]; while a subgraph node runs, the run writes
/// nothing, so its lease would expire after `lease` however short each node of the child is.
/// The child's run (whose app carries this host as its `parent`) therefore renews it whenever
/// it writes its own lease and half of this one is gone ([`Host::plan_renewal`], written by the
/// child run's driver): it
/// writes this run's last checkpoint again with a new expiry, by compare-and-swap on the head
/// this run last saw, and updates [`Held`] so that this run's next write follows on from it.
pub(crate) struct Host {
    pub(crate) store: Arc<dyn Checkpointer>,
    pub(crate) durability: Durability,
    pub(crate) lease: Duration,
    pub(crate) limit: usize,
    pub(crate) max_branches: usize,
    /// The run's thread.
    pub(crate) thread: ThreadId,
    /// The identity of the run's graph, which its checkpoints carry.
    pub(crate) graph: String,
    graph_fingerprint: u64,
    schema_fingerprint: u64,
    /// Writes a checkpoint of the run's graph again with another lease
    /// ([`checkpoint::relet`](crate::format::checkpoint::relet) for the graph's state).
    relet: Relet,
    /// The run's lease owner, and its lease's length in milliseconds.
    pub(crate) owner: u64,
    pub(crate) lease_ms: u64,
    /// Until when (milliseconds since the Unix epoch) the run's last checkpoint holds its lease;
    /// 0 when it holds none (not claimed yet, paused, finished, abandoned). Written only with
    /// `held` locked; read without it.
    until: AtomicU64,
    /// The thread as the run last wrote it; locked for a renewal's whole compare-and-swap.
    held: Mutex<Held>,
    /// The host of the run whose subgraph node runs this one (this is a child's run): kept
    /// alive by this run's progress, and its own parent by it.
    pub(crate) parent: Option<Arc<Host>>,
}

/// Writes checkpoint `id` of a thread (its bytes) again with another lease.
pub(crate) type Relet = fn(&[u8], &Identity<'_>, &ThreadId, CheckpointId, Option<Lease>) -> Result<Vec<u8>, Error>;

/// A run's thread as the run last wrote it: what renewing its lease from elsewhere needs.
#[derive(Default)]
pub(crate) struct Held {
    /// The thread's head as the run last saw it.
    pub(crate) head: Option<CheckpointId>,
    /// The bytes of the last checkpoint the run wrote (or a child wrote for it).
    pub(crate) last: Option<Vec<u8>>,
    /// A renewal lost its compare-and-swap: another run took the thread over.
    lost: bool,
    /// The store's error for a write of this run that it answered with an error (its message):
    /// such a write may have been stored all the same, and moved the head from under the
    /// run's next write. A compare-and-swap lost after one is reported with this error (see
    /// [`Host::lost`]), not as a takeover.
    failed: Option<String>,
    /// A renewal is being written (the lock is not held across the store call).
    renewing: bool,
    /// Writes of a fan-out's progress under way (`machine::journal`).
    writing: usize,
}

/// What the store answered to a write of a fan-out's progress ([`Host::end_write`]).
pub(crate) enum Wrote {
    /// It is the thread's head.
    Head,
    /// Another write of this run moved the head first: write again after it.
    Again,
}

/// A renewal of a run's lease, planned by [`Host::plan_renewal`]: checkpoint `id` (`bytes`,
/// the run's last checkpoint with a lease until `until`) to append after `head`.
pub(crate) struct Renewal {
    pub(crate) head: CheckpointId,
    pub(crate) id: CheckpointId,
    pub(crate) bytes: Vec<u8>,
    until: u64,
}

/// What a run's [`Host`] is made of, besides its app's options.
pub(crate) struct Tenancy {
    pub(crate) thread: ThreadId,
    pub(crate) graph: String,
    pub(crate) graph_fingerprint: u64,
    pub(crate) schema_fingerprint: u64,
    pub(crate) relet: Relet,
    pub(crate) owner: u64,
    pub(crate) lease_ms: u64,
    pub(crate) head: Option<CheckpointId>,
    pub(crate) parent: Option<Arc<Host>>,
}

impl Host {
    /// The host of a run on `store` with these options, holding `tenancy.thread` at
    /// `tenancy.head`.
    pub(crate) fn new(
        store: Arc<dyn Checkpointer>,
        durability: Durability,
        lease: Duration,
        limit: usize,
        max_branches: usize,
        tenancy: Tenancy,
    ) -> Self {
        let Tenancy { thread, graph, graph_fingerprint, schema_fingerprint, relet, owner, lease_ms, head, parent } =
            tenancy;
        Host {
            store,
            durability,
            lease,
            limit,
            max_branches,
            thread,
            graph,
            graph_fingerprint,
            schema_fingerprint,
            relet,
            owner,
            lease_ms,
            until: AtomicU64::new(0),
            held: Mutex::new(Held { head, last: None, lost: false, failed: None, renewing: false, writing: 0 }),
            parent,
        }
    }

    /// The thread as the run last wrote it. Never held across an await.
    pub(crate) fn held(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The thread's head as the run last saw it.
    pub(crate) fn head(&self) -> Option<CheckpointId> {
        self.held().head
    }

    /// Until when the run's last checkpoint holds its lease (0: it holds none).
    pub(crate) fn until(&self) -> u64 {
        self.until.load(Ordering::Acquire)
    }

    /// Records that the run wrote checkpoint `id` (`bytes`), holding its lease until `until`
    /// (0: released).
    pub(crate) fn wrote(&self, held: &mut Held, id: CheckpointId, bytes: Vec<u8>, until: u64) {
        held.head = Some(id);
        held.last = Some(bytes);
        self.until.store(until, Ordering::Release);
    }

    /// Records that the run let its lease go (it paused, finished, or was abandoned): its
    /// children no longer renew it.
    pub(crate) fn released(&self) {
        let _held = self.held();
        self.until.store(0, Ordering::Release);
    }

    /// Whether the run holds a lease of which half is gone at `now`.
    fn half_gone(&self, now: u64) -> bool {
        let until = self.until();
        until != 0 && until <= now.saturating_add(self.lease_ms / 2)
    }

    /// Whether this run's lease, or an ancestor's, is half gone: a child's run then renews
    /// them before its next node ([`plan_renewal`](Self::plan_renewal)).
    pub(crate) fn due(&self) -> bool {
        let now = now_ms();
        let mut at = Some(self);
        while let Some(host) = at {
            if host.half_gone(now) {
                return true;
            }
            at = host.parent.as_deref();
        }
        false
    }

    /// What the store answered to a write: its error is kept (a write it failed may have been
    /// stored nonetheless) and returned.
    fn answered(held: &mut Held, appended: Result<AppendOutcome, Error>) -> Result<AppendOutcome, Error> {
        appended.inspect_err(|error| {
            held.failed.get_or_insert_with(|| crate::vocab::error::error_chain(error));
        })
    }

    /// The error of a run that lost its thread's compare-and-swap: [`Error::LeaseLost`], or,
    /// when a write of the run failed before (whose failure the store may have reported after
    /// storing it, which moves the head just as a takeover would), the store's error.
    fn lost(&self, held: &Held) -> Error {
        match &held.failed {
            None => Error::LeaseLost { thread: self.thread.clone() },
            Some(failed) => Error::store(format!(
                "{failed} (a write to thread `{}` failed with that error, and a later write found the thread's \
                 head moved: the failed write may have been stored nonetheless; the run stopped)",
                self.thread
            )),
        }
    }

    /// The renewal of this run's lease, if half of it is gone and no other renewal of it is
    /// under way: its last checkpoint again with a new expiry, to be appended by
    /// compare-and-swap on the head the run last saw (by the driver of the run that renews it,
    /// through its own `append`: a child run on tokio never makes a blocking store call), then
    /// handed to [`renewed`](Self::renewed).
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when an earlier renewal found the thread taken over, and the
    /// errors of re-encoding the checkpoint.
    pub(crate) fn plan_renewal(&self) -> Result<Option<Renewal>, Error> {
        if !self.half_gone(now_ms()) {
            return Ok(None);
        }
        let mut held = self.held();
        let now = now_ms();
        if held.lost {
            return Err(self.lost(&held));
        }
        // Checked again under the lock: a sibling branch's child may have renewed it meanwhile,
        // may be renewing it now, or the run released it.
        if held.renewing || held.writing > 0 || !self.half_gone(now) {
            return Ok(None);
        }
        let (Some(head), Some(last)) = (held.head, held.last.as_deref()) else { return Ok(None) };
        let identity = Identity {
            graph: &self.graph,
            graph_fingerprint: self.graph_fingerprint,
            schema_fingerprint: self.schema_fingerprint,
        };
        let until = now.saturating_add(self.lease_ms);
        let bytes = (self.relet)(last, &identity, &self.thread, head, Some(Lease { owner: self.owner, until }))?;
        let Some(id) = head.checked_add(1) else {
            return Err(Error::store(format!("thread `{}` has no checkpoint id after {head}", self.thread)));
        };
        held.renewing = true;
        Ok(Some(Renewal { head, id, bytes, until }))
    }

    /// Starts a write of the run's own while a fan-out's branches run (their progress, see
    /// `machine::journal`; several may be under way): the head to write after. Until
    /// [`end_write`](Self::end_write), no renewal is planned (the writes renew the lease).
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when an earlier write found the thread taken over.
    pub(crate) fn begin_write(&self) -> Result<Option<CheckpointId>, Error> {
        let mut held = self.held();
        if held.lost {
            return Err(self.lost(&held));
        }
        held.writing += 1;
        Ok(held.head)
    }

    /// Ends a write begun with [`begin_write`](Self::begin_write) that was not made.
    pub(crate) fn cancel_write(&self) {
        let mut held = self.held();
        held.writing = held.writing.saturating_sub(1);
    }

    /// Records what the store answered to a write begun with [`begin_write`](Self::begin_write)
    /// after head `expected`: checkpoint `id` (`bytes`, holding the lease until `until`). A
    /// compare-and-swap lost to another write of this run (a sibling branch's, a renewal) is
    /// [`Wrote::Again`]; lost to anyone else, the thread was taken over.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when another run took the thread over, and the store's own error.
    pub(crate) fn end_write(
        &self,
        expected: Option<CheckpointId>,
        id: CheckpointId,
        bytes: Vec<u8>,
        until: u64,
        appended: Result<AppendOutcome, Error>,
    ) -> Result<Wrote, Error> {
        let mut held = self.held();
        held.writing = held.writing.saturating_sub(1);
        match Self::answered(&mut held, appended)? {
            AppendOutcome::Written => {
                self.wrote(&mut held, id, bytes, until);
                Ok(Wrote::Head)
            }
            AppendOutcome::Conflict { .. } if held.head != expected || held.writing > 0 || held.renewing => {
                Ok(Wrote::Again)
            }
            AppendOutcome::Conflict { .. } => {
                held.lost = true;
                Err(self.lost(&held))
            }
        }
    }

    /// Records what the store answered to `renewal` ([`plan_renewal`](Self::plan_renewal)).
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when the compare-and-swap was lost (another run took the thread
    /// over), and the store's own error.
    pub(crate) fn renewed(&self, renewal: Renewal, appended: Result<AppendOutcome, Error>) -> Result<(), Error> {
        let mut held = self.held();
        held.renewing = false;
        match Self::answered(&mut held, appended)? {
            AppendOutcome::Written => {
                traced! {
                    tracing::debug!(target: "tea", thread = %self.thread, checkpoint = renewal.id, "lease renewed by a child");
                }
                self.wrote(&mut held, renewal.id, renewal.bytes, renewal.until);
                Ok(())
            }
            // This run wrote its fan-out's progress meanwhile (which renewed the lease).
            AppendOutcome::Conflict { .. } if held.head != Some(renewal.head) || held.writing > 0 => Ok(()),
            AppendOutcome::Conflict { .. } => {
                held.lost = true;
                Err(self.lost(&held))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::error::error_chain;

    fn host() -> Host {
        let relet: Relet = |bytes, _, _, _, _| Ok(bytes.to_vec());
        let tenancy = Tenancy {
            thread: ThreadId::from("t"),
            graph: "g".to_owned(),
            graph_fingerprint: 0,
            schema_fingerprint: 0,
            relet,
            owner: 1,
            lease_ms: 30_000,
            head: Some(1),
            parent: None,
        };
        let store: Arc<dyn Checkpointer> = Arc::new(crate::store::MemoryStore::new());
        Host::new(store, Durability::EveryStep, Duration::from_secs(30), 100, 4, tenancy)
    }

    #[test]
    fn a_swap_lost_after_a_write_the_store_failed_is_the_stores_error() {
        let host = host();
        let head = host.begin_write().unwrap();
        let failed = host.end_write(head, 2, Vec::new(), 0, Err(Error::store("EIO after the write")));
        assert!(matches!(failed, Err(Error::Store { .. })));
        // The failed write was stored: the next one finds the head moved.
        let head = host.begin_write().unwrap();
        let lost = host.end_write(head, 2, Vec::new(), 0, Ok(AppendOutcome::Conflict { head: Some(2) }));
        let Err(error) = lost else { panic!("a lost swap is an error") };
        assert!(matches!(error, Error::Store { .. }), "{error:?}");
        assert!(error_chain(&error).contains("EIO after the write"), "{error}");
        // And so is every later write of the run.
        let Err(later) = host.begin_write() else { panic!("a run that lost its thread writes no more") };
        assert!(error_chain(&later).contains("EIO after the write"), "{later}");
    }

    #[test]
    fn a_swap_lost_otherwise_is_a_takeover() {
        let host = host();
        let head = host.begin_write().unwrap();
        let lost = host.end_write(head, 2, Vec::new(), 0, Ok(AppendOutcome::Conflict { head: Some(2) }));
        assert!(matches!(lost, Err(Error::LeaseLost { .. })), "{:?}", lost.err());
    }
}
