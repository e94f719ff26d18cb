//! A run's tenure of its thread: the one owner of what a run holds of its thread — the store
//! the thread is kept in, the thread, its head as the run last saw it, the lease its checkpoints
//! carry — and the only thing that claims the thread, writes to it, renews the lease (its own
//! run's, and its ancestors' for a subgraph node's child run) and lets it go (a pause put back,
//! a checkpoint written again without its lease).
//!
//! Below the model (a node's `Ctx` carries its run's [`Tenure`], which a subgraph node lends
//! the run of its child graph) and above the store and the checkpoint format it writes with.
//! It is sans-IO in two ways: it reads the time and draws its lease owner from the [`Clock`]
//! its app hands it, never from the system; and it waits for nothing itself — every write goes
//! through the run's driver ([`Appends`], the store half of the machine's `Driver`), so a run
//! on tokio never makes a blocking store call.
//!
//! With a store, a run writes checkpoints by compare-and-swap on the thread's head: one when it
//! starts (its claim of a new thread, or of an existing one on resume or recover), one per step
//! unless `Durability::OnPause` (flushed with `EveryStep`), one durable checkpoint when it pauses
//! (before the API makes its token) and one durable checkpoint when it finishes (before
//! `invoke`/`resume`/`recover` returns). While it runs, its checkpoints carry a *lease* (an owner
//! and an expiry, renewed as it advances), so `recover` can tell a live run from a crashed one.
//! A resumed run that fails before any node after the one it paused at completed writes its
//! pause back, so the same token works again; any other run that fails (a resumed one too, once
//! a node after its pause completed and was written) writes its last checkpoint again without
//! its lease, so `recover` can continue it at once without running again what completed.

use crate::format::checkpoint::{self, AtRef, CheckpointRef, Identity, Lease, Position};
use crate::format::delta;
use crate::format::token::SigningKey;
use crate::store::{AppendOutcome, Checkpointer};
use crate::vocab::clock::Clock;
use crate::vocab::error::Error;
use crate::vocab::name::{CheckpointId, NodeName, ThreadId};
use crate::vocab::options::{
    Durability, DEFAULT_GROUP_COMMIT, DEFAULT_LEASE, DEFAULT_MAX_PARALLEL_BRANCHES, DEFAULT_RECURSION_LIMIT,
};
use crate::vocab::state::GraphState;
#[cfg(feature = "tracing")]
use crate::vocab::trace;
use crate::vocab::trace::traced;
use std::any::TypeId;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
#[cfg(feature = "tracing")]
use std::time::Instant;

/// What a tenure asks of the code that drives its run to write to the store: the store half of
/// the machine's `Driver` (which extends it), so that a write is made the driver's way.
pub(crate) trait Appends: Sync {
    /// [`Checkpointer::append`].
    #[allow(clippy::too_many_arguments)]
    fn append<'a>(
        &'a self,
        store: &'a dyn Checkpointer,
        graph: &'a str,
        thread: &'a ThreadId,
        expected: Option<CheckpointId>,
        id: CheckpointId,
        bytes: &'a [u8],
        durable: bool,
    ) -> impl Future<Output = Result<AppendOutcome, Error>> + Send + 'a;

    /// [`Checkpointer::append_over`].
    #[allow(clippy::too_many_arguments)]
    fn append_over<'a>(
        &'a self,
        store: &'a dyn Checkpointer,
        graph: &'a str,
        thread: &'a ThreadId,
        head: (CheckpointId, &'a [u8]),
        id: CheckpointId,
        bytes: &'a [u8],
        durable: bool,
    ) -> impl Future<Output = Result<AppendOutcome, Error>> + Send + 'a;
}

/// A run's tenure of its thread: its store, its thread, the thread's head as the run last saw
/// it, and its lease; with what it lends the child runs of its subgraph nodes (the store and
/// its app's options), which keep its lease alive.
///
/// One per run with a store (made by `App::tenure`, held by the run, reached by nodes through
/// `Ctx::tenure`). While a subgraph node runs, the run writes nothing, so its lease would expire
/// after `lease` however short each node of the child is. The child's run (whose app carries
/// this tenure as its `parent`) therefore renews it whenever it writes its own lease and half
/// of this one is gone ([`keep_alive`](Self::keep_alive)): it writes this run's last checkpoint
/// again with a new expiry, by compare-and-swap on the head this run last saw, and records it
/// here, so that this run's next write follows on from it.
pub(crate) struct Tenure {
    /// The store the thread is kept in.
    pub(crate) store: Arc<dyn Checkpointer>,
    /// The run's thread.
    pub(crate) thread: ThreadId,
    /// The identity of the run's graph, which its checkpoints carry: its name, and its
    /// fingerprints.
    pub(crate) graph: String,
    graph_fingerprint: u64,
    schema_fingerprint: u64,
    /// When the run writes checkpoints.
    pub(crate) durability: Durability,
    /// How much finished branch work a fan-out of the run holds unwritten
    /// ([`Builder::group_commit`](crate::Builder::group_commit)).
    pub(crate) group_commit: Duration,
    /// How long the run's lease lasts without news from it.
    pub(crate) lease: Duration,
    /// The run's lease owner (drawn from `clock`).
    pub(crate) owner: u64,
    /// Where the run reads the time and draws random numbers (its pauses' nonces).
    pub(crate) clock: Clock,
    /// The key the tokens of the run's pauses are signed with.
    pub(crate) key: Option<SigningKey>,
    /// The app's recursion limit and most parallel branches, lent to child runs.
    pub(crate) limit: usize,
    pub(crate) max_branches: usize,
    /// The run is a child graph's (an app made by `App::for_child`): the node type of the
    /// parent graph whose subgraph node runs it.
    pub(crate) parent_node: Option<TypeId>,
    /// The run recovers the thread: losing the race for its claim means another run owns it.
    pub(crate) recovering: bool,
    /// The run resumes a pause its app wrote and remembered, without having read the thread's
    /// head: its claim compares the head's bytes with the pause's (`Held::rollback`) in the
    /// store's compare-and-swap ([`Checkpointer::append_over`]).
    unread: AtomicBool,
    /// That claim found another head: nothing was written, and the app reads the head and
    /// resumes again ([`missed_unread`](Self::missed_unread)).
    missed: AtomicBool,
    /// Whether the run's first checkpoint (claiming the thread) is still to be written.
    claim: AtomicBool,
    /// Until when (milliseconds since the Unix epoch) the run's last checkpoint holds its lease;
    /// 0 when it holds none (not claimed yet, paused, finished, abandoned). Written only with
    /// `held` locked; read without it.
    until: AtomicU64,
    /// The thread as the run last wrote it; locked for a renewal's whole compare-and-swap.
    held: Mutex<Held>,
    /// The tenure of the run whose subgraph node runs this one (this is a child's run): kept
    /// alive by this run's progress, and its own parent by it.
    pub(crate) parent: Option<Arc<Tenure>>,
}

/// The thread as its run last wrote it, behind the tenure's lock.
#[derive(Default)]
struct Held {
    /// The thread's head as the run last saw it.
    head: Option<CheckpointId>,
    /// The payload of the last checkpoint the run wrote (or a child wrote for it), which its
    /// next record is a delta of.
    chain: Option<Chain>,
    /// The paused checkpoint a resumed run resumed from, written back if the run fails (until a
    /// node after the one it paused at completed).
    rollback: Option<Vec<u8>>,
    /// For a resumed run, the node its pause stood before, until it completes.
    paused_node: Option<NodeName>,
    /// A renewal lost its compare-and-swap: another run took the thread over.
    lost: bool,
    /// The store's error for a write of this run that it answered with an error (its message):
    /// such a write may have been stored all the same, and moved the head from under the
    /// run's next write. A compare-and-swap lost after one is reported with this error (see
    /// [`Tenure::lost`]), not as a takeover.
    failed: Option<String>,
    /// A renewal is being written (the lock is not held across the store call).
    renewing: bool,
    /// Writes of a fan-out's progress under way (`machine::journal`).
    writing: usize,
    /// The run's last record was full: the chain's head holds its bytes as written.
    whole: bool,
    /// The run's last checkpoint is a fan-out's, with its branches (the run's own record of
    /// it, or its journal's last write): the next one is full (it drops the branches and holds
    /// what they merged, so comparing the two texts costs more than the delta saves).
    at_fork: bool,
}

/// What the run's next record folds onto (`format::delta`): the payload of the thread's head
/// as the run last wrote it, and how far the deltas since the last full record have grown.
///
/// A record is written as a delta of the record before it when that is at most half the size
/// of the last full record (else a delta saves too little to be worth folding on a read: small
/// states are written full, as before delta records) and the deltas since the last full
/// record, this one included, stay within its size; else, and always at a pause and at the
/// end, it is written full. So the bytes a thread stores stay within about twice what changed,
/// and a head is read from at most its full record and as many bytes of deltas (four times as
/// many after a fan-out's progress, see [`Chain::worth_patch`]).
/// A pause is full because its record stands alone: a failed resume writes it back as the head
/// (after other records), a directory store's pause file is read on its own (`resume_from`), and
/// a paused thread's head is read at once. The end is full for the last reason: a finished
/// thread's head is what is read of it, by `state` and by whoever reads the store itself.
///
/// The head is kept as the text it was encoded to, with the patches written after it (a
/// fan-out's progress, a lease renewed) kept as their texts, unapplied: they are applied (the
/// head made a JSON value) only when the head is needed whole, which a fan-out's writes never
/// need (see `machine::journal`), so a branch's write costs the encoding of its own part. A
/// step of the main line encodes its checkpoint once, compares its text with the head's field
/// by field ([`delta::diff_text`]), and writes a small state whole without comparing at all;
/// after unapplied patches it writes a full record (what a fan-out's join writes after its
/// branches' progress), which reads nothing of the head.
pub(crate) struct Chain {
    /// The payload of the head, before `patches`.
    head: Head,
    /// The patches (JSON texts, [`delta`]) written after `head`, oldest first, not applied to
    /// it yet: each the delta record written, and where its patch starts in it.
    patches: Vec<(Vec<u8>, usize)>,
    /// The full record the head folds from.
    full: CheckpointId,
    /// The size of that full record.
    full_len: usize,
    /// The size of the deltas written since.
    since_full: usize,
}

/// The payload of a chain's head, as text or as a JSON value (whichever it was last made as).
enum Head {
    /// `bytes` from `at` on: a full record's envelope (made here), or, at 0, the bare JSON.
    Text {
        bytes: Vec<u8>,
        at: usize,
    },
    Value(serde_json::Value),
    /// Its patches did not apply (or did not read back exactly): the run knows the head no
    /// more, and its next record is full.
    Lost,
}

impl Chain {
    /// A chain whose head is full record `id` (`bytes`).
    fn full(id: CheckpointId, bytes: Vec<u8>) -> Self {
        let len = bytes.len();
        let at = len - checkpoint::payload(&bytes).len();
        Chain { head: Head::Text { bytes, at }, patches: Vec::new(), full: id, full_len: len, since_full: 0 }
    }

    /// Whether patches were written after the head and not applied to it yet.
    fn patched(&self) -> bool {
        !self.patches.is_empty()
    }

    /// The head's payload as JSON text (`None`: it does not encode, or its patches do not
    /// apply).
    fn text(&mut self) -> Option<&str> {
        if self.patched() {
            self.value()?;
        }
        if let Head::Value(value) = &self.head {
            self.head = Head::Text { bytes: serde_json::to_vec(value).ok()?, at: 0 };
        }
        match &self.head {
            Head::Text { bytes, at } => std::str::from_utf8(bytes.get(*at..)?).ok(),
            Head::Value(_) | Head::Lost => None,
        }
    }

    /// The head's payload as a JSON value, its patches applied (`None`: its text does not read
    /// back exactly as one, e.g. an integer beyond 64 bits, which a JSON value holds only as an
    /// inexact float, or a patch does not apply).
    fn value(&mut self) -> Option<&mut serde_json::Value> {
        if let Head::Text { bytes, at } = &self.head {
            let value = bytes.get(*at..).and_then(|text| serde_json::from_slice::<serde_json::Value>(text).ok());
            self.head = match value {
                Some(value) if exact(&value) => Head::Value(value),
                _ => Head::Lost,
            };
        }
        if self.patched() {
            let patches = std::mem::take(&mut self.patches);
            if let Head::Value(value) = &mut self.head {
                let applied = patches.iter().all(|(record, at)| {
                    let patch = record.get(*at..).unwrap_or_default();
                    serde_json::from_slice::<serde_json::Value>(patch)
                        .is_ok_and(|patch| exact(&patch) && delta::apply(value, patch).is_ok())
                });
                if !applied {
                    self.head = Head::Lost;
                }
            }
        }
        match &mut self.head {
            Head::Value(value) => Some(value),
            Head::Text { .. } | Head::Lost => None,
        }
    }

    /// Whether a delta record of `len` bytes is written rather than a full record (see
    /// [`Chain`]).
    fn worth(&self, len: usize) -> bool {
        len.saturating_mul(2) <= self.full_len && self.since_full.saturating_add(len) <= self.full_len
    }

    /// Whether a delta record of `len` bytes that patches the head ([`Tenure::plan_delta`]: a
    /// fan-out's progress, a lease) is written rather than a full record: as [`worth`](Self::worth),
    /// but the deltas since the last full record may grow to [`PATCH_ALLOWANCE`] times its size.
    /// A fan-out's deltas each write a branch's progress, which the head they fold to holds,
    /// so folding them costs about what that head does; and a full record of a fan-out
    /// encodes every branch, which a write of one branch's progress should not pay for often.
    fn worth_patch(&self, len: usize) -> bool {
        len.saturating_mul(2) <= self.full_len
            && self.since_full.saturating_add(len) <= self.full_len.saturating_mul(PATCH_ALLOWANCE)
    }
}

/// How many times the size of the last full record the patches since it (a fan-out's
/// progress) may take before a full record is written again (see [`Chain::worth_patch`]).
const PATCH_ALLOWANCE: usize = 4;

/// Whether `value` (read from JSON text) holds no float that may stand for an integer beyond 64
/// bits (which serde_json reads inexactly, as a float).
fn exact(value: &serde_json::Value) -> bool {
    match value {
        serde_json::Value::Number(n) => n.as_f64().is_none_or(|f| !n.is_f64() || f.fract() != 0.0 || f.abs() < 9.2e18),
        serde_json::Value::Array(items) => items.iter().all(exact),
        serde_json::Value::Object(map) => map.values().all(exact),
        _ => true,
    }
}

/// A record planned for the store ([`Tenure::plan_whole`], [`Tenure::plan_patch`]): its bytes,
/// and what the run's [`Chain`] becomes once it is the head.
pub(crate) struct Planned {
    pub(crate) bytes: Vec<u8>,
    next: Next,
}

/// What a [`Planned`] record makes of the chain.
enum Next {
    /// A full record (the planned bytes).
    Full,
    /// A full record of this payload.
    FullValue(serde_json::Value),
    /// A delta whose payload, folded, is that of this full record.
    Delta(Vec<u8>),
    /// A delta whose patch (its JSON text) is the planned bytes from this offset on, to apply
    /// to the chain's payload.
    Patch(usize),
}

/// What the store answered to a write of a fan-out's progress ([`Tenure::end_write`]).
pub(crate) enum Wrote {
    /// It is the thread's head.
    Head,
    /// Another write of this run moved the head first: write again after it.
    Again,
}

/// A renewal of a run's lease, planned by [`Tenure::plan_renewal`]: checkpoint `id` (`bytes`,
/// the run's last checkpoint with a lease until `until`) to append after `head`.
struct Renewal {
    head: CheckpointId,
    id: CheckpointId,
    planned: Planned,
    until: u64,
}

/// A checkpoint encoded for the store: its record, the head it replaces, and its id.
struct Encoded {
    planned: Planned,
    head: Option<CheckpointId>,
    id: CheckpointId,
    /// The checkpoint is a fan-out's, with its branches (see `Held::at_fork`).
    at_fork: bool,
}

impl Tenure {
    /// The tenure of a run of graph `graph` (its identity) on `thread` in `store`, which the
    /// run found at `head` (`None`: a new thread), reading the time from `clock` (which draws
    /// its lease owner); with the default options, which its app then sets. Its first write
    /// claims the thread.
    pub(crate) fn new(
        store: Arc<dyn Checkpointer>,
        thread: ThreadId,
        head: Option<CheckpointId>,
        graph: &Identity<'_>,
        clock: Clock,
    ) -> Self {
        Tenure {
            store,
            thread,
            graph: graph.graph.to_owned(),
            graph_fingerprint: graph.graph_fingerprint,
            schema_fingerprint: graph.schema_fingerprint,
            durability: Durability::EveryStep,
            group_commit: DEFAULT_GROUP_COMMIT,
            lease: DEFAULT_LEASE,
            owner: clock.random_u64(),
            clock,
            key: None,
            limit: DEFAULT_RECURSION_LIMIT,
            max_branches: DEFAULT_MAX_PARALLEL_BRANCHES,
            parent_node: None,
            recovering: false,
            unread: AtomicBool::new(false),
            missed: AtomicBool::new(false),
            claim: AtomicBool::new(true),
            until: AtomicU64::new(0),
            held: Mutex::new(Held { head, ..Held::default() }),
            parent: None,
        }
    }

    /// Makes a resumed run's tenure put `paused` (the checkpoint it resumed from) back if the
    /// run fails before a node after `before` (the node the pause stood before) completed.
    pub(crate) fn put_back_on_failure(&mut self, paused: Vec<u8>, before: Option<NodeName>) {
        let held = self.held.get_mut().unwrap_or_else(PoisonError::into_inner);
        held.rollback = Some(paused);
        held.paused_node = before;
    }

    /// The thread's head as this run wrote it, when its last record was full (a pause always
    /// is): its id and bytes, as the store holds them.
    pub(crate) fn head_record(&self) -> Option<(CheckpointId, Vec<u8>)> {
        let held = self.held();
        match (held.whole, held.head, held.chain.as_ref().map(|chain| &chain.head)) {
            (true, Some(id), Some(Head::Text { bytes, at })) if *at > 0 => Some((id, bytes.clone())),
            _ => None,
        }
    }

    /// Makes the run's claim compare the head's bytes with those of the pause it resumes: its
    /// app did not read the head, but remembered the pause it wrote (see `api::pauses`).
    pub(crate) fn claim_unread(&self) {
        self.unread.store(true, Ordering::Release);
    }

    /// Whether the run's claim, made without reading the head
    /// ([`claim_unread`](Self::claim_unread)), found another head than the pause its app
    /// remembered: the run wrote nothing.
    pub(crate) fn missed_unread(&self) -> bool {
        self.missed.load(Ordering::Acquire)
    }

    /// The thread as the run last wrote it. Never held across an await.
    fn held(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The identity of the run's graph, which its checkpoints carry.
    pub(crate) fn identity(&self) -> Identity<'_> {
        Identity {
            graph: &self.graph,
            graph_fingerprint: self.graph_fingerprint,
            schema_fingerprint: self.schema_fingerprint,
        }
    }

    /// The lease's length in milliseconds (at least one).
    pub(crate) fn lease_ms(&self) -> u64 {
        u64::try_from(self.lease.as_millis()).unwrap_or(u64::MAX).max(1)
    }

    /// The lease a checkpoint written at `now` (milliseconds since the Unix epoch) carries.
    pub(crate) fn lease_from(&self, now: u64) -> Lease {
        Lease { owner: self.owner, until: now.saturating_add(self.lease_ms()) }
    }

    /// The thread's head as the run last saw it.
    pub(crate) fn head(&self) -> Option<CheckpointId> {
        self.held().head
    }

    /// The id of the checkpoint the run writes next.
    pub(crate) fn next_id(&self) -> CheckpointId {
        self.head().map_or(1, |h| h + 1)
    }

    /// Whether the run has yet to claim its thread ([`claim`](Self::claim)).
    #[inline]
    pub(crate) fn claim_pending(&self) -> bool {
        self.claim.load(Ordering::Acquire)
    }

    /// Until when the run's last checkpoint holds its lease (0: it holds none).
    fn until(&self) -> u64 {
        self.until.load(Ordering::Acquire)
    }

    /// Until when the run's last checkpoint holds its lease (0: it holds none): what a write
    /// of a fan-out's progress compares its own lease with.
    pub(crate) fn lease_until(&self) -> u64 {
        self.until()
    }

    /// Records that the run wrote checkpoint `id` (`planned`), holding its lease until `until`
    /// (0: released).
    fn record(&self, held: &mut Held, id: CheckpointId, planned: Planned, until: u64) {
        held.head = Some(id);
        held.whole = matches!(planned.next, Next::Full);
        let len = planned.bytes.len();
        held.chain = match (planned.next, held.chain.take()) {
            (Next::Full, _) => Some(Chain::full(id, planned.bytes)),
            (Next::FullValue(value), _) => {
                Some(Chain { head: Head::Value(value), patches: Vec::new(), full: id, full_len: len, since_full: 0 })
            }
            (Next::Delta(bytes), Some(chain)) => {
                let at = bytes.len() - checkpoint::payload(&bytes).len();
                Some(Chain {
                    head: Head::Text { bytes, at },
                    patches: Vec::new(),
                    since_full: chain.since_full + len,
                    ..chain
                })
            }
            (Next::Patch(at), Some(mut chain)) => {
                chain.patches.push((planned.bytes, at));
                Some(Chain { since_full: chain.since_full + len, ..chain })
            }
            (Next::Delta(_) | Next::Patch(_), _) => None,
        };
        self.until.store(until, Ordering::Release);
    }

    /// Records that the run wrote checkpoint `id` (`bytes`, a full record), holding its lease
    /// until `until`: for a test that writes a run's checkpoint itself.
    #[cfg(test)]
    pub(crate) fn wrote_for_test(&self, id: CheckpointId, bytes: Vec<u8>, until: u64) {
        let known = checkpoint::decode_raw(&bytes, &self.thread, id).is_ok();
        let mut held = self.held();
        self.record(&mut held, id, Planned { bytes, next: Next::Full }, until);
        if !known {
            held.chain = None;
        }
    }

    /// The record of `bytes` (a full record, its state checked to read back) after the chain
    /// `chain` (`None`: the run knows no head it may write a delta of): a delta of what
    /// changed, unless `full` (a pause), the head is too small for a delta to pay, or the
    /// deltas since the last full record would outgrow it.
    ///
    /// # Errors
    /// The encoding's.
    pub(crate) fn plan_whole(&self, chain: Option<&mut Chain>, bytes: Vec<u8>, full: bool) -> Result<Planned, Error> {
        let identity = self.identity();
        // A delta's patch names at least the step, the time and the lease (about 100 bytes):
        // below twice that with its envelope, a delta never pays (see `Chain::worth`).
        let least = 2 * (checkpoint::delta_overhead(&identity) + 100);
        // After unapplied patches (a fan-out's progress), the record is full: comparing would
        // first apply them to the head, which costs more than the record saves.
        if let (Some(chain), false) = (chain, full) {
            if chain.full_len >= least && !chain.patched() {
                let new = std::str::from_utf8(checkpoint::payload(&bytes)).ok();
                let from = chain.full;
                if let (Some(old), Some(new)) = (chain.text(), new) {
                    let delta = checkpoint::encode_delta_with(&identity, from, |out| {
                        if !delta::diff_text(old, new, out).map_err(Error::store)? {
                            out.extend_from_slice(b"{}");
                        }
                        Ok(())
                    });
                    if let Ok(delta) = delta {
                        if chain.worth(delta.len()) {
                            return Ok(Planned { bytes: delta, next: Next::Delta(bytes) });
                        }
                    }
                }
            }
        }
        Ok(Planned { bytes, next: Next::Full })
    }

    /// The delta record of the patch `write` writes (its JSON text, [`delta`]) after the head
    /// `chain` holds, when a delta is written rather than a full record (see [`Chain`]); `None`
    /// when the deltas since the last full record would outgrow it. The patch is written into
    /// the record itself, which the chain keeps once it is stored (the patch is its tail).
    ///
    /// # Errors
    /// The encoding's, and `write`'s.
    pub(crate) fn plan_delta(
        &self,
        chain: &Chain,
        write: impl FnOnce(&mut Vec<u8>) -> Result<(), Error>,
    ) -> Result<Option<Planned>, Error> {
        let identity = self.identity();
        let bytes = checkpoint::encode_delta_with(&identity, chain.full, write)?;
        let at = checkpoint::delta_overhead(&identity);
        Ok(chain.worth_patch(bytes.len()).then_some(Planned { bytes, next: Next::Patch(at) }))
    }

    /// The record of `patch` applied to the head `chain` holds: a delta, or a full record when
    /// the deltas since the last would outgrow it; `None` when the head's payload is not at
    /// hand as a JSON value to patch (see [`Chain::value`]).
    ///
    /// # Errors
    /// The encoding's, and a patch that does not fit the head.
    fn plan_patch(&self, chain: &mut Chain, patch: serde_json::Value) -> Result<Option<Planned>, Error> {
        let text = |out: &mut Vec<u8>| serde_json::to_writer(out, &patch).map_err(Error::store);
        if let Some(planned) = self.plan_delta(chain, text)? {
            return Ok(Some(planned));
        }
        let Some(value) = chain.value() else { return Ok(None) };
        let mut value = value.clone();
        delta::apply(&mut value, patch)
            .map_err(|e| Error::store(format!("a checkpoint of thread `{}` does not fold: {e}", self.thread)))?;
        let bytes = checkpoint::encode_value(&self.identity(), &value)?;
        Ok(Some(Planned { bytes, next: Next::FullValue(value) }))
    }

    /// Records that the run let its lease go (it paused, finished, or was abandoned): its
    /// children no longer renew it.
    fn released(&self) {
        let _held = self.held();
        self.until.store(0, Ordering::Release);
    }

    /// Whether half of the run's own lease is gone (or it holds none yet).
    pub(crate) fn own_lease_due(&self) -> bool {
        self.until() < self.clock.now_ms().saturating_add(self.lease_ms() / 2)
    }

    /// Whether the run writes its lease before its next node: half of its own is gone (or it
    /// holds none yet), or half of an ancestor's (this is a child's run, which renews them
    /// while the subgraph node that runs it writes nothing, see [`keep_alive`](Self::keep_alive)).
    pub(crate) fn lease_due(&self) -> bool {
        self.own_lease_due() || self.parent.as_deref().is_some_and(Tenure::due)
    }

    /// Whether the run holds a lease of which half is gone at `now`.
    fn half_gone(&self, now: u64) -> bool {
        let until = self.until();
        until != 0 && until <= now.saturating_add(self.lease_ms() / 2)
    }

    /// Whether this run's lease, or an ancestor's, is half gone.
    fn due(&self) -> bool {
        let mut at = Some(self);
        while let Some(tenure) = at {
            if tenure.half_gone(tenure.clock.now_ms()) {
                return true;
            }
            at = tenure.parent.as_deref();
        }
        false
    }

    /// A node of a resumed run (`node`) completed and is in the store. The node the pause stood
    /// before runs again on any resume (a breakpoint's node, a node that asked, with its
    /// answers), so once it completes the pause may still go back if the run fails; once a
    /// node after it completed, the run is not rolled back to its pause (which would run that
    /// node again on the next resume) but left where it stands, for `recover`, and its token is
    /// spent.
    pub(crate) fn progressed(&self, node: &NodeName) {
        let mut held = self.held();
        if held.rollback.is_some() && held.paused_node.as_ref() == Some(node) {
            held.paused_node = None;
            return;
        }
        held.paused_node = None;
        held.rollback = None;
    }

    /// The run paused durably or finished: nothing is left to put back if it fails.
    pub(crate) fn settled(&self) {
        self.held().rollback = None;
    }

    /// Claims the thread with the run's first checkpoint `ckpt` (with its lease), written by
    /// compare-and-swap on the head the run read — none for a new thread, the paused or stopped
    /// checkpoint for a resume or a recover — so that of two runs of one thread exactly one
    /// goes on: the other's claim is `ThreadExists` (a new thread), `ThreadBusy` (a recover)
    /// or `StaleResume` (a resume). `node`: the node the run stands at, named if the state
    /// does not store.
    ///
    /// # Errors
    /// Those, and the store's and the encoding's.
    pub(crate) async fn claim<S: GraphState, IO: Appends>(
        &self,
        io: &IO,
        ckpt: &CheckpointRef<'_, S>,
        node: &NodeName,
    ) -> Result<(), Error> {
        self.write(io, ckpt, false, node).await?;
        Ok(())
    }

    /// Writes `ckpt` as the thread's new head, by compare-and-swap on the head this run last
    /// saw, through `io`; then, if it carries a lease and this is a child's run, renews its
    /// ancestors' leases where half of one is gone ([`keep_alive`](Self::keep_alive)). `node`:
    /// the node the run stands at, named if the state does not store.
    ///
    /// # Errors
    /// A lost compare-and-swap (see [`claim`](Self::claim); `StaleResume` once claimed), the
    /// store's and the encoding's errors, [`Error::StateNotStorable`].
    pub(crate) async fn write<S: GraphState, IO: Appends>(
        &self,
        io: &IO,
        ckpt: &CheckpointRef<'_, S>,
        durable: bool,
        node: &NodeName,
    ) -> Result<CheckpointId, Error> {
        traced! { let (span, started) = checkpoint_span(ckpt, durable); }
        let encoded = {
            traced! { let _checkpoint = span.enter(); }
            self.encode(ckpt, node)?
        };
        traced! { span.record("bytes", encoded.planned.bytes.len()); }
        // A claim without a read of the head compares the bytes of the pause it resumes.
        let unread = if self.unread.load(Ordering::Acquire) && self.claim_pending() {
            self.held().rollback.clone()
        } else {
            None
        };
        let appended = {
            let bytes = &encoded.planned.bytes;
            match (encoded.head, unread.as_deref()) {
                (Some(head), Some(over)) => {
                    let (store, head) = (&*self.store, (head, over));
                    let future = io.append_over(store, &self.graph, &self.thread, head, encoded.id, bytes, durable);
                    #[cfg(feature = "tracing")]
                    let future = tracing::Instrument::instrument(future, span.clone());
                    future.await?
                }
                _ => {
                    let (store, head) = (&*self.store, encoded.head);
                    let future = io.append(store, &self.graph, &self.thread, head, encoded.id, bytes, durable);
                    #[cfg(feature = "tracing")]
                    let future = tracing::Instrument::instrument(future, span.clone());
                    future.await?
                }
            }
        };
        if unread.is_some() && matches!(appended, AppendOutcome::Conflict { .. }) {
            self.missed.store(true, Ordering::Release);
        }
        traced! { self.traced_write(&span, started, &encoded, &appended); }
        let id = self.wrote(ckpt.lease, encoded, appended)?;
        // Whichever write comes first claims the thread: the claim's own, or (a resume at an
        // interrupt node, which runs no user code) the checkpoint of the answered node's step.
        if self.claim.load(Ordering::Relaxed) {
            self.claim.store(false, Ordering::Release);
        }
        if ckpt.lease.is_some() {
            self.keep_ancestors_alive(io).await?;
        }
        Ok(id)
    }

    /// Encodes `ckpt` for the store (a delta of the run's last record, or a full record, see
    /// [`Chain`]) and checks that its state reads back; the head it is to replace and its id.
    fn encode<S: GraphState>(&self, ckpt: &CheckpointRef<'_, S>, node: &NodeName) -> Result<Encoded, Error> {
        let not_storable =
            |(path, reason)| Error::StateNotStorable { node: node.clone(), thread: self.thread.clone(), path, reason };
        // The lock is never held across an await. While this run writes, no node of it runs,
        // so no child of it renews its lease.
        let bytes = checkpoint::encode_ref(&self.identity(), ckpt)?;
        checkpoint::check_reads_back::<S>(&bytes).map_err(not_storable)?;
        // Pauses and the end are full records (see `Chain`), and so is the step after a
        // fan-out's own checkpoint (see `Held::at_fork`).
        let mut held = self.held();
        let full = !ckpt.pending.is_empty() || matches!(ckpt.at, AtRef::Position(Position::Done)) || held.at_fork;
        let planned = self.plan_whole(held.chain.as_mut(), bytes, full)?;
        let head = held.head;
        drop(held);
        let at_fork = ckpt.at.branches().is_some_and(|branches| !branches.is_empty());
        Ok(Encoded { planned, head, id: head.map_or(1, |h| h + 1), at_fork })
    }

    /// What the store's answer to writing `encoded` (with `lease`) means: the run's new head,
    /// or the error of a lost compare-and-swap.
    fn wrote(&self, lease: Option<Lease>, encoded: Encoded, appended: AppendOutcome) -> Result<CheckpointId, Error> {
        match appended {
            AppendOutcome::Written => {
                let mut held = self.held();
                held.at_fork = encoded.at_fork;
                self.record(&mut held, encoded.id, encoded.planned, lease.map_or(0, |lease| lease.until));
                Ok(encoded.id)
            }
            AppendOutcome::Conflict { .. } if encoded.head.is_none() => {
                Err(Error::ThreadExists { thread: self.thread.clone() })
            }
            AppendOutcome::Conflict { .. } if self.recovering && self.claim_pending() => Err(Error::ThreadBusy {
                thread: self.thread.clone(),
                expires_in: Duration::from_millis(self.lease_ms()),
            }),
            AppendOutcome::Conflict { .. } => Err(Error::StaleResume { thread: self.thread.clone() }),
        }
    }

    /// Records a write's duration, and its `written` event or a lost compare-and-swap, in its
    /// `checkpoint` span.
    #[cfg(feature = "tracing")]
    fn traced_write(&self, span: &tracing::Span, started: Instant, encoded: &Encoded, appended: &AppendOutcome) {
        span.record("duration_us", trace::micros(started.elapsed()));
        if let AppendOutcome::Written = appended {
            // Its size and duration are the span's fields: not repeated.
            span.in_scope(|| tracing::debug!(target: "tea", id = %encoded.id, "written"));
        }
        if let AppendOutcome::Conflict { head: found } = appended {
            let expected = encoded.head;
            tracing::info!(target: "tea", thread = %self.thread, expected = ?expected, found = ?found, "conflict");
        }
    }

    /// Renews the leases of this run's ancestors (this is a child's run) where half of one is
    /// gone: what a child's run does before a node when its own lease is not due.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when one of them was taken over, and the store's errors.
    pub(crate) async fn keep_ancestors_alive<IO: Appends>(&self, io: &IO) -> Result<(), Error> {
        match &self.parent {
            Some(parent) => parent.keep_alive(io).await,
            None => Ok(()),
        }
    }

    /// Renews this run's lease and each of its ancestors' where half of it is gone: each renewal
    /// planned by its tenure, appended by compare-and-swap through `io` (so a run on tokio awaits
    /// the store's async call), and recorded by the tenure.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when one of them was taken over, and the store's errors.
    pub(crate) async fn keep_alive<IO: Appends>(&self, io: &IO) -> Result<(), Error> {
        let mut at = Some(self);
        while let Some(tenure) = at {
            if let Some(renewal) = tenure.plan_renewal()? {
                let appended = io
                    .append(
                        &*tenure.store,
                        &tenure.graph,
                        &tenure.thread,
                        Some(renewal.head),
                        renewal.id,
                        &renewal.planned.bytes,
                        false,
                    )
                    .await;
                tenure.renewed(renewal, appended)?;
            }
            at = tenure.parent.as_deref();
        }
        Ok(())
    }

    /// Lets the thread go after a failure, or when a run is dropped part-way: a resumed run
    /// writes its pause back as the head, so that the token that resumed it works again; any
    /// other run writes its last checkpoint again without its lease, so that `recover` may
    /// continue it at once. A run that has not claimed its thread yet wrote nothing, and writes
    /// nothing; nor does one that `finished`. Its children (if any still run) no longer renew
    /// its lease.
    pub(crate) async fn abandon<IO: Appends>(&self, io: &IO, finished: bool) {
        let (rollback, head, chain) = {
            let mut held = self.held();
            (held.rollback.take(), held.head, held.chain.take())
        };
        self.released();
        if self.claim_pending() || finished {
            return;
        }
        traced! { let rollback_pause = rollback.is_some(); }
        let bytes = match rollback {
            Some(bytes) => bytes,
            None => {
                let Some(mut chain) = chain else { return };
                if chain.value().is_none_or(|value| value.get("lease").is_none_or(serde_json::Value::is_null)) {
                    return;
                }
                let Ok(Some(planned)) =
                    self.plan_patch(&mut chain, delta::object_patch(Default::default(), &["lease"]))
                else {
                    return;
                };
                planned.bytes
            }
        };
        let id = head.map_or(1, |h| h + 1);
        traced! {
            tracing::info!(target: "tea", thread = %self.thread, put_back_pause = rollback_pause, "abandoned");
        }
        let appended = io.append(&*self.store, &self.graph, &self.thread, head, id, &bytes, true).await;
        if let Ok(AppendOutcome::Written) = appended {
            self.held().head = Some(id);
        }
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
    /// through its own `append`), then handed to [`renewed`](Self::renewed).
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when an earlier renewal found the thread taken over, and the
    /// errors of re-encoding the checkpoint.
    fn plan_renewal(&self) -> Result<Option<Renewal>, Error> {
        if !self.half_gone(self.clock.now_ms()) {
            return Ok(None);
        }
        let mut held = self.held();
        let now = self.clock.now_ms();
        if held.lost {
            return Err(self.lost(&held));
        }
        // Checked again under the lock: a sibling branch's child may have renewed it meanwhile,
        // may be renewing it now, or the run released it.
        if held.renewing || held.writing > 0 || !self.half_gone(now) {
            return Ok(None);
        }
        let Some(head) = held.head else { return Ok(None) };
        let Some(chain) = held.chain.as_mut() else { return Ok(None) };
        let until = now.saturating_add(self.lease_ms());
        let lease = serde_json::to_value(Lease { owner: self.owner, until }).map_err(Error::store)?;
        let mut changed = serde_json::Map::new();
        changed.insert("lease".to_owned(), delta::set(lease));
        let Some(planned) = self.plan_patch(chain, delta::object_patch(changed, &[]))? else { return Ok(None) };
        let Some(id) = head.checked_add(1) else {
            return Err(Error::store(format!("thread `{}` has no checkpoint id after {head}", self.thread)));
        };
        held.renewing = true;
        Ok(Some(Renewal { head, id, planned, until }))
    }

    /// Records what the store answered to `renewal` ([`plan_renewal`](Self::plan_renewal)).
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when the compare-and-swap was lost (another run took the thread
    /// over), and the store's own error.
    fn renewed(&self, renewal: Renewal, appended: Result<AppendOutcome, Error>) -> Result<(), Error> {
        let mut held = self.held();
        held.renewing = false;
        match Self::answered(&mut held, appended)? {
            AppendOutcome::Written => {
                traced! {
                    tracing::debug!(target: "tea", thread = %self.thread, checkpoint = renewal.id, "lease renewed by a child");
                }
                self.record(&mut held, renewal.id, renewal.planned, renewal.until);
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

    /// Starts a write of the run's own while a fan-out's branches run (their progress, see
    /// `machine::journal`; several may be under way): the head to write after, and the record
    /// `plan` makes of the run's [`Chain`] at that head (`None`: the run knows none, write a
    /// full record). Until [`end_write`](Self::end_write), no renewal is planned (the writes
    /// renew the lease).
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when an earlier write found the thread taken over, and `plan`'s.
    pub(crate) fn begin_write(
        &self,
        plan: impl FnOnce(Option<&mut Chain>) -> Result<Planned, Error>,
    ) -> Result<(Option<CheckpointId>, Planned), Error> {
        // A run claims its thread with `write` before any fan-out of it writes: so a claim over
        // a remembered pause always compares its bytes.
        debug_assert!(
            !(self.unread.load(Ordering::Acquire) && self.claim_pending()),
            "a fan-out's write claimed a thread whose head the run did not read"
        );
        let mut held = self.held();
        if held.lost {
            return Err(self.lost(&held));
        }
        let planned = plan(held.chain.as_mut())?;
        held.writing += 1;
        Ok((held.head, planned))
    }

    /// Records what the store answered to a write begun with [`begin_write`](Self::begin_write)
    /// after head `expected`: checkpoint `id` (`planned`, holding the lease until `until`). A
    /// compare-and-swap lost to another write of this run (a sibling branch's, a renewal) is
    /// [`Wrote::Again`]; lost to anyone else, the thread was taken over.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when another run took the thread over, and the store's own error.
    pub(crate) fn end_write(
        &self,
        expected: Option<CheckpointId>,
        id: CheckpointId,
        planned: Planned,
        until: u64,
        appended: Result<AppendOutcome, Error>,
    ) -> Result<Wrote, Error> {
        let mut held = self.held();
        held.writing = held.writing.saturating_sub(1);
        match Self::answered(&mut held, appended)? {
            AppendOutcome::Written => {
                // A journal's write is the fan-out's checkpoint, with its branches.
                held.at_fork = true;
                self.record(&mut held, id, planned, until);
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
}

/// The `checkpoint` span of a write of `ckpt`, and when the write started.
#[cfg(feature = "tracing")]
fn checkpoint_span<S: GraphState>(ckpt: &CheckpointRef<'_, S>, durable: bool) -> (tracing::Span, Instant) {
    let span = tracing::debug_span!(
        target: "tea",
        "checkpoint",
        step = ckpt.step,
        pause = ckpt.pause.is_some(),
        durable,
        bytes = tracing::field::Empty,
        duration_us = tracing::field::Empty,
    );
    (span, Instant::now())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::error::error_chain;

    fn nothing(_: Option<&mut Chain>) -> Result<Planned, Error> {
        Ok(Planned { bytes: Vec::new(), next: Next::Full })
    }

    fn host() -> Tenure {
        let identity = Identity { graph: "g", graph_fingerprint: 0, schema_fingerprint: 0 };
        let store: Arc<dyn Checkpointer> = Arc::new(crate::store::MemoryStore::new());
        let mut tenure = Tenure::new(store, ThreadId::from("t"), Some(1), &identity, Clock::system());
        tenure.lease = Duration::from_secs(30);
        tenure
    }

    #[test]
    fn a_swap_lost_after_a_write_the_store_failed_is_the_stores_error() {
        let host = host();
        let (head, planned) = host.begin_write(nothing).unwrap();
        let failed = host.end_write(head, 2, planned, 0, Err(Error::store("EIO after the write")));
        assert!(matches!(failed, Err(Error::Store { .. })));
        // The failed write was stored: the next one finds the head moved.
        let (head, planned) = host.begin_write(nothing).unwrap();
        let lost = host.end_write(head, 2, planned, 0, Ok(AppendOutcome::Conflict { head: Some(2) }));
        let Err(error) = lost else { panic!("a lost swap is an error") };
        assert!(matches!(error, Error::Store { .. }), "{error:?}");
        assert!(error_chain(&error).contains("EIO after the write"), "{error}");
        // And so is every later write of the run.
        let Err(later) = host.begin_write(nothing) else { panic!("a run that lost its thread writes no more") };
        assert!(error_chain(&later).contains("EIO after the write"), "{later}");
    }

    #[test]
    fn a_swap_lost_otherwise_is_a_takeover() {
        let host = host();
        let (head, planned) = host.begin_write(nothing).unwrap();
        let lost = host.end_write(head, 2, planned, 0, Ok(AppendOutcome::Conflict { head: Some(2) }));
        assert!(matches!(lost, Err(Error::LeaseLost { .. })), "{:?}", lost.err());
    }
}
