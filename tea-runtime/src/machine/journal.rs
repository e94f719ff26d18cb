//! Pending writes: a fan-out's branches made durable as they run.
//!
//! While the branches of a fan-out run, the run writes no checkpoint of its own; without more, a
//! crash, a dropped future or a failed branch would lose what the other branches finished, and
//! `recover` would run it again. So each branch, as a node of it completes (and as it stops at a
//! pause or reaches its join), records its progress here — where it stands and the updates it
//! wrote — and the progress of every branch is written as the thread's next checkpoint, at
//! [`Position::Fork`](crate::format::checkpoint::Position::Fork): the fan-out's state once, and
//! per branch only its updates. `recover` and `resume` continue each branch from there, so only
//! work that had not completed runs again. Fan-outs inside branches record theirs in their outer
//! branch's progress, at any depth.
//!
//! A branch goes on to its next node only once its progress is in the store, as the main line
//! does. A branch that *finished* (reached its join, or stopped at a pause) whose work, with
//! that of the finished branches held so far, fits in the app's group commit window
//! ([`Builder::group_commit`](crate::Builder::group_commit)) is not recorded at all: the
//! checkpoint that ends the fan-out holds it ([`Journal::hold`]), so a fan-out of cheap branches
//! costs the journal nothing and a crash runs at most the window of finished work again. Once
//! the window is full, a finished branch is recorded and written, but does not wait for its
//! write when a sibling is writing (that sibling writes it before it stops); on the thread
//! driver it does not wait at all: the journal's writer writes it on a thread of its own while
//! the next branch runs, and the fan-out's end waits for that writer ([`Journal::settle`]).
//! A branch that finishes before the fan-out has run [`WRITE_BEHIND_AFTER`] (100 µs) is not
//! recorded at all, as under a group commit window: the checkpoint that ends the fan-out holds
//! it. A fan-out that ends sooner — a
//! hundred cheap branches — is written once, with its end, since recording each branch and two
//! threads sharing the journal cost such a fan-out more than its branches did; one whose
//! branches cannot merge writes them before it fails, as if they had been written behind them.
//! Writes are grouped: each write holds every branch's progress as recorded when it began
//! (by compare-and-swap on the run's head, with the run's lease renewed), so a branch whose
//! record a sibling's write already carried does not write again, and a fan-out of many short
//! branches writes fewer checkpoints than it runs nodes. With
//! [`Durability::EveryStep`](crate::Durability::EveryStep) each write is flushed; with
//! `Buffered` it is not; with `OnPause` the journal is not kept.
//!
//! Order is what makes this safe where LangGraph's `put_writes` is not: a branch's progress is
//! part of the one checkpoint chain of its thread, written after the fan-out's own checkpoint
//! and before the join's, so no write can land against a checkpoint it does not belong to, and
//! a stale writer loses its compare-and-swap.

use crate::format::checkpoint::{self, BranchAt, BranchProgress, ForkAt, ForkCheckpoint, ParentJump, ProgressRef};
use crate::format::interrupt::Interrupt;
use crate::machine::driver::{now_or_never, Driver};
use crate::model::graph::Graph;
use crate::tenure::{Chain, Planned, Tenure, Wrote};
use crate::vocab::error::Error;
use crate::vocab::name::NodeName;
use crate::vocab::state::GraphState;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// How long a journal's writer behind its branches (see [`Journal::flush`]) waits for another
/// record once it has written everything, before its thread goes back to its pool: records of
/// cheap branches come every few microseconds, and a writer that stays saves a wake-up each.
const LINGER: Duration = Duration::from_micros(50);

/// How many times a branch's record tries the journal's lock before it waits on it (see
/// `Journal::ledger_for_record`).
const RECORD_SPINS: u32 = 256;

/// How long after a fan-out began its finished branches are written behind them (see
/// [`Journal::hold`]): one that finishes sooner is left to the fan-out's end, where writing
/// behind it cost two cores contending for the journal and a record per branch or two. What a
/// crash runs again is at most this much of the fan-out's finished work.
const WRITE_BEHIND_AFTER: Duration = Duration::from_micros(100);

/// The progress of a fan-out's branches, written as they run.
pub(crate) struct Journal<'a, S: GraphState> {
    /// The run's tenure of its thread, which every write goes through.
    tenure: &'a Tenure,
    node: NodeName,
    /// Flushed writes (`Durability::EveryStep`).
    durable: bool,
    /// How much finished branch work the journal may hold unwritten
    /// ([`Builder::group_commit`](crate::Builder::group_commit)).
    window: Duration,
    /// The run's step when the fan-out began.
    step: u64,
    /// The state at the fan-out.
    base: &'a S,
    /// The node the fan-out follows.
    source: NodeName,
    ledger: Mutex<Ledger<S>>,
    /// Whether finished branches' writes may be made behind them, by a writer of the journal's
    /// own (more than one branch may run at once, and the driver writes behind).
    behind_ok: bool,
    /// The writer behind: its jobs, made at the first.
    behind: OnceLock<Arc<Behind>>,
    /// The fan-out is over (or the journal going): no writer is started any more, and one
    /// running stops once it has written what was recorded.
    closing: AtomicBool,
    /// `Ledger::generation`, read by the writer behind without the lock.
    recorded: AtomicU64,
    /// When the fan-out began: a branch that finishes within [`WRITE_BEHIND_AFTER`] of it is
    /// held ([`Journal::hold`]).
    started: Instant,
    /// A finished branch was left to the checkpoint that ends the fan-out ([`Journal::hold`]).
    held_any: AtomicBool,
    /// One was because the fan-out was younger than [`WRITE_BEHIND_AFTER`] (see
    /// [`Journal::hold`]).
    held_young: AtomicBool,
}

/// A journal's writer behind its branches: how many of its jobs are posted and not started (at
/// most one) or running, shared with the jobs, so that the journal, before it goes, takes back a
/// job that has not started and waits for one that has.
#[derive(Default)]
struct Behind {
    jobs: Mutex<Jobs>,
    stopped: Condvar,
}

#[derive(Default)]
struct Jobs {
    posted: usize,
    running: usize,
}

impl Behind {
    fn jobs(&self) -> MutexGuard<'_, Jobs> {
        self.jobs.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What the journal records, behind its lock: every branch's progress, and how much of it the
/// store holds.
struct Ledger<S: GraphState> {
    /// Every branch's progress, without its state; for a branch that `texts` holds, as it was
    /// before (its head and input, which never change, are still right).
    branches: Vec<BranchProgress<S>>,
    /// The progress of each branch (by index) as JSON, when its last record was one of the
    /// branch itself outside a fan-out of its own: written as the branch recorded it, outside
    /// the lock, from what the branch holds — no copy of its updates is kept, and the journal's
    /// writes copy the text (see `Journal::record`).
    texts: Vec<Option<Vec<u8>>>,
    /// How many records were made.
    generation: u64,
    /// How many of them the store holds.
    written: u64,
    /// Branches writing now.
    writers: usize,
    /// The branches of this fan-out whose progress changed since the store's head recorded it:
    /// each one's index, and the generation of its newest record, sorted by index (a few
    /// entries at a time: a list that keeps its capacity, where a map allocated a node for the
    /// first entry of each write and freed it when the write emptied it).
    dirty: Vec<(usize, u64)>,
    /// The same for branches of fan-outs nested in them: each one's path (two indices or more).
    dirty_nested: BTreeMap<Vec<usize>, u64>,
    /// Whether the store's head records this fan-out's branches (a write of the journal was
    /// stored, or the run's own record of the fan-out is the head): a write is then a delta
    /// naming the branches in `dirty` and `dirty_nested` alone.
    based: bool,
    /// The time and lease expiry (milliseconds) of the journal's last write the store holds: a
    /// delta written in the same millisecond, with no other record since, leaves both as the
    /// head has them.
    stamp: Option<(u64, u64)>,
    /// The work of the finished branches left to the checkpoint that ends the fan-out (see
    /// [`Journal::hold`]).
    held: Duration,
    /// A writer behind the branches is posted or running, and writes what they record until it
    /// stops (see [`Journal::flush`]).
    behind: bool,
    /// What the writer behind failed with, for the fan-out's end ([`Journal::settle`]).
    failed: Option<Error>,
    /// The panic the writer behind caught (a store's), raised again at the fan-out's end.
    panicked: Option<Box<dyn std::any::Any + Send>>,
}

/// What a branch records of itself.
pub(crate) struct Record<'r, S: GraphState> {
    /// The branch's head and input, as the fan-out gave them (they never change).
    pub(crate) head: &'r NodeName,
    pub(crate) input: Option<&'r S::Update>,
    pub(crate) updates: &'r [S::Update],
    pub(crate) origins: &'r [NodeName],
    pub(crate) steps: u64,
    pub(crate) at: BranchAt,
    pub(crate) answers: &'r [serde_json::Value],
    pub(crate) pending: Option<&'r Interrupt>,
    pub(crate) more_pending: &'r [Interrupt],
    /// The branch ended with `Command::parent`.
    pub(crate) jump: Option<&'r ParentJump>,
}

impl<'a, S: GraphState> Journal<'a, S> {
    /// The journal of the fan-out after `source`, from `branches` (each branch where it starts
    /// or continues), for a run holding its thread by `tenure` at `step` whose state is `base`.
    /// `based`: the thread's head is the run's own checkpoint of this fan-out, with `branches`
    /// and nothing more (what [`ForkCheckpoint`] holds, lease and time aside), so the first write
    /// is a delta of the branches that moved, as later ones are, not the fan-out's checkpoint
    /// whole (compared with the head, which holds the same: a send's fan-out, a resumed one).
    /// `behind_ok`: finished branches may be written behind them (more than one branch may run
    /// at once; see [`flush`](Self::flush)).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        tenure: &'a Tenure,
        durable: bool,
        step: u64,
        base: &'a S,
        source: NodeName,
        branches: Vec<BranchProgress<S>>,
        based: bool,
        behind_ok: bool,
    ) -> Self {
        Journal {
            tenure,
            node: source.clone(),
            durable,
            window: tenure.group_commit,
            step,
            base,
            source,
            ledger: Mutex::new(Ledger {
                texts: branches.iter().map(|_| None).collect(),
                branches,
                generation: 0,
                written: 0,
                writers: 0,
                dirty: Vec::new(),
                dirty_nested: BTreeMap::new(),
                based,
                stamp: None,
                held: Duration::ZERO,
                behind: false,
                failed: None,
                panicked: None,
            }),
            behind_ok,
            behind: OnceLock::new(),
            closing: AtomicBool::new(false),
            recorded: AtomicU64::new(0),
            started: Instant::now(),
            held_any: AtomicBool::new(false),
            held_young: AtomicBool::new(false),
        }
    }

    fn ledger(&self) -> MutexGuard<'_, Ledger<S>> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The journal's lock for a branch's record, spinning for it a little longer than the
    /// lock itself does before it sleeps: the writer behind holds it only to plan a write (a
    /// few hundred nanoseconds), and a calling thread put to sleep and woken again for it
    /// paid microseconds per record.
    fn ledger_for_record(&self) -> MutexGuard<'_, Ledger<S>> {
        for _ in 0..RECORD_SPINS {
            match self.ledger.try_lock() {
                Ok(ledger) => return ledger,
                Err(std::sync::TryLockError::Poisoned(poisoned)) => return poisoned.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => std::hint::spin_loop(),
            }
        }
        self.ledger()
    }

    /// The progress of the branch at `path` (its index among the fan-out's branches, then
    /// among those of each nested fan-out on the way), as last recorded (`None` for a path the journal
    /// does not hold).
    pub(crate) fn progress(&self, path: &[usize]) -> Option<BranchProgress<S>> {
        let ledger = self.ledger();
        if let [index] = path {
            if let Some(Some(text)) = ledger.texts.get(*index) {
                // What the branch recorded, read back (it was checked to read back when written).
                return serde_json::from_slice(text).ok();
            }
        }
        slot(&ledger.branches, path).map(|b| b.copy(false))
    }

    /// Records where the branch at `path` stands; the record's generation, for
    /// [`flush`](Self::flush).
    ///
    /// A branch of this fan-out (not of one nested in a branch) that does not stand at a fan-out
    /// of its own is recorded as text, written here from what the branch holds before the
    /// journal's lock is taken: branches on other threads write theirs meanwhile, and the
    /// journal keeps no copy of the branch's updates.
    pub(crate) fn record(&self, path: &[usize], record: Record<'_, S>) -> u64 {
        if let ([index], false) = (path, matches!(record.at, BranchAt::Fork { .. })) {
            // Room for a branch's progress with a few updates, grown once at most.
            let mut text = Vec::with_capacity(2 * checkpoint::BRANCH_BYTES);
            let written = ProgressRef::<S> {
                head: record.head,
                input: record.input,
                updates: record.updates,
                origins: record.origins,
                steps: record.steps,
                at: &record.at,
                answers: record.answers,
                pending: record.pending,
                more_pending: record.more_pending,
                resume: record.pending.is_none(),
                branches: &[],
                jump: record.jump,
            }
            .write_json(&mut text);
            // A value that does not serialize is recorded typed: the write reports it.
            if written.is_ok() {
                let mut ledger = self.ledger_for_record();
                debug_assert!(
                    ledger.branches.get(*index).is_none_or(|b| b.head == *record.head),
                    "a branch records under its own head"
                );
                let generation = set_text(&mut ledger, *index, text);
                self.recorded.store(generation, Ordering::Release);
                return generation;
            }
        }
        let mut ledger = self.ledger();
        let generation = set(&mut ledger, path, record, None);
        self.recorded.store(generation, Ordering::Release);
        generation
    }

    /// How many records were made so far (what the next [`flush`](Self::flush) with `wait`
    /// must cover for all of them to be in the store).
    pub(crate) fn generation(&self) -> u64 {
        self.ledger().generation
    }

    /// Records that the branch at `path` reached the fan-out after `source` inside it, whose
    /// branches start from `heads`; the record's generation, for [`flush`](Self::flush).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn nested(
        &self,
        path: &[usize],
        (head, input): (&NodeName, Option<&S::Update>),
        source: NodeName,
        steps: u64,
        updates: &[S::Update],
        origins: &[NodeName],
        heads: Vec<BranchProgress<S>>,
    ) -> u64 {
        let record = Record {
            head,
            input,
            updates,
            origins,
            steps,
            at: BranchAt::Fork { source },
            answers: &[],
            pending: None,
            more_pending: &[],
            jump: None,
        };
        let mut ledger = self.ledger();
        let generation = set(&mut ledger, path, record, Some(heads));
        self.recorded.store(generation, Ordering::Release);
        generation
    }

    /// Whether the journal holds finished branches for the checkpoint that ends the fan-out at
    /// all (the app has a group commit window, see [`hold`](Self::hold)).
    pub(crate) fn groups(&self) -> bool {
        !self.window.is_zero()
    }

    /// Whether a branch that finished (at its join, or at a pause: nothing of it runs next),
    /// having worked `worked` since its last write (`None` without a group commit window), is
    /// left to the checkpoint that ends the fan-out instead of being recorded and written now.
    ///
    /// It is while the work of the finished branches so left, this one's included, stays under
    /// the window ([`Builder::group_commit`](crate::Builder::group_commit)): the checkpoint of
    /// the fan-out's join, of its pause or of its failure holds the branch, from what it
    /// returns; a crash before that runs its work again — never more than the window of
    /// finished work per fan-out, nested fan-outs included. A branch held is not recorded at
    /// all (no copy of its progress is made), so a fan-out of cheap branches costs the journal
    /// nothing; once the window is full, each finished branch is recorded and written as
    /// before ([`flush`](Self::flush) without `wait`).
    ///
    /// It also is, whatever the window, on a driver whose finished branches are written behind
    /// them (`behind`: the thread driver, more than one branch at once) while the fan-out is
    /// younger than [`WRITE_BEHIND_AFTER`]: a fan-out that ends sooner — most fan-outs of
    /// cheap branches — writes its branches once, with its end, without having recorded each
    /// or shared its journal with a writer on another core. A crash before
    /// the fan-out's end runs those branches again — at most the fan-out's first 100 µs of
    /// finished work, as a window would; the writer behind used to write them once the
    /// fan-out had run 100 µs, so a long fan-out's crash ran them again only in that time.
    pub(crate) fn hold(&self, worked: Option<Duration>, behind: bool) -> bool {
        if behind && self.behind_ok && self.started.elapsed() < WRITE_BEHIND_AFTER {
            self.held_young.store(true, Ordering::Relaxed);
            self.held_any.store(true, Ordering::Relaxed);
            return true;
        }
        let Some(worked) = worked.filter(|_| self.groups()) else { return false };
        let mut ledger = self.ledger();
        let held = ledger.held.saturating_add(worked);
        if held < self.window {
            ledger.held = held;
            self.held_any.store(true, Ordering::Relaxed);
            return true;
        }
        false
    }

    /// Records `progress` as where the branch at `path` stands, when the fan-out it finished in
    /// failed while branches were held ([`hold`](Self::hold)): a failed fan-out nested in a
    /// branch is written as part of that branch's progress, from what the journal records.
    pub(crate) fn restore(&self, path: &[usize], progress: &BranchProgress<S>) {
        let record = Record {
            head: &progress.head,
            input: progress.input.as_ref(),
            updates: &progress.updates,
            origins: &progress.origins,
            steps: progress.steps,
            at: progress.at.clone(),
            answers: &progress.answers,
            pending: progress.pending.as_deref(),
            more_pending: &progress.more_pending,
            jump: progress.jump.as_deref(),
        };
        let mut ledger = self.ledger();
        let generation = set(&mut ledger, path, record, None);
        self.recorded.store(generation, Ordering::Release);
    }

    /// Whether a finished branch was left to the checkpoint that ends the fan-out
    /// ([`hold`](Self::hold)): the fan-out completed work that the store holds only once that
    /// checkpoint is written.
    pub(crate) fn held_any(&self) -> bool {
        self.held_any.load(Ordering::Relaxed)
    }

    /// Whether a finished branch was left to the fan-out's end because the fan-out was young
    /// ([`hold`](Self::hold)), not by the app's group commit: such a fan-out whose branches
    /// cannot merge writes them before it reports it (see `fork_branches`), as it would have
    /// had they been written behind them.
    pub(crate) fn held_young(&self) -> bool {
        self.held_young.load(Ordering::Relaxed)
    }

    /// Writes what was recorded up to `generation` (what [`record`](Self::record) returned).
    ///
    /// With `wait`, returns once it is in the store: the branch's next node starts only then,
    /// as a node on the main line starts only once the step before it is written (a sibling's
    /// write that began after the record counts). Without (a branch that reached its join:
    /// nothing of it runs next), returns at once when another branch is writing — that writer,
    /// before it stops, writes whatever was recorded meanwhile — and else writes; on a driver
    /// that writes behind ([`Driver::WRITES_BEHIND`]: the thread driver) with more than one
    /// branch allowed at once, it starts the journal's writer instead, on a thread of its own,
    /// and returns: the next branch runs while this one's progress is written, as it would on
    /// another thread of the branch pool (and as a tokio run's branches go on while a write
    /// waits). No branch is written behind before the fan-out has run [`WRITE_BEHIND_AFTER`]
    /// (one that finishes sooner is held, see [`hold`](Self::hold)); the writer writes what the
    /// branches record until it finds nothing more for a moment ([`LINGER`]);
    /// the fan-out's end waits for it ([`settle`](Self::settle)). With
    /// one branch at a time (`Builder::max_parallel_branches(1)`), the next branch starts only
    /// once this one is written.
    ///
    /// # Errors
    /// The store's, [`Error::LeaseLost`] when another run took the thread over, and
    /// [`Error::StateNotStorable`] when a branch's update does not read back.
    pub(crate) async fn flush<G: Graph<State = S>, D: Driver<G>>(
        &self,
        driver: &D,
        generation: u64,
        wait: bool,
    ) -> Result<(), Error> {
        // Whether this branch counts among the writers (it does from its first write on, until
        // it finds nothing left to write: under the lock, so a record made meanwhile is seen).
        let mut writing = false;
        let result = loop {
            let (head, planned, until, covers) = {
                let mut ledger = self.ledger();
                if writing {
                    ledger.writers -= 1;
                    writing = false;
                }
                let mine = wait && ledger.written < generation;
                // The last writer writes what was recorded while others wrote (the writer
                // behind, while it runs, is the last).
                let left = ledger.written < ledger.generation && ledger.writers == 0 && !ledger.behind;
                if !mine && !left {
                    break Ok(());
                }
                if !mine && D::READY && D::WRITES_BEHIND && self.behind_ok && !self.closing.load(Ordering::Acquire) {
                    ledger.behind = true;
                    drop(ledger);
                    self.start_writer(driver);
                    break Ok(());
                }
                let now = self.tenure.clock.now_ms();
                let lease = self.tenure.lease_from(now);
                let until = lease.until;
                let planned = self.tenure.begin_write(|chain| self.plan(&ledger, chain, lease, now));
                match planned {
                    Ok((head, planned)) => {
                        ledger.writers += 1;
                        writing = true;
                        (head, planned, (now, until), ledger.generation)
                    }
                    Err(error) => break Err(error),
                }
            };
            let (now, until) = until;
            let id = head.map_or(1, |h| h + 1);
            let tenure = self.tenure;
            let bytes = &planned.bytes;
            let appended =
                driver.append(&*tenure.store, &tenure.graph, &tenure.thread, head, id, bytes, self.durable).await;
            match self.tenure.end_write(head, id, planned, until, appended) {
                Ok(Wrote::Head) => {
                    let mut ledger = self.ledger();
                    ledger.written = ledger.written.max(covers);
                    ledger.based = true;
                    ledger.stamp = Some((now, until));
                    ledger.dirty.retain(|&(_, generation)| generation > covers);
                    ledger.dirty_nested.retain(|_, generation| *generation > covers);
                }
                Ok(Wrote::Again) => {}
                Err(error) => break Err(error),
            }
        };
        if writing {
            self.ledger().writers -= 1;
        }
        result
    }
}

impl<S: GraphState> Journal<'_, S> {
    /// Posts the journal's writer behind its branches ([`flush`](Self::flush)) to the driver,
    /// once `Ledger::behind` is set.
    fn start_writer<'j, G: Graph<State = S>, D: Driver<G>>(&'j self, driver: &D) {
        let behind = Arc::clone(self.behind.get_or_init(Arc::default));
        behind.jobs().posted += 1;
        // The writer's store calls belong to the branch that started it (its fan-out's span).
        #[cfg(feature = "tracing")]
        let span = tracing::Span::current();
        let job = {
            let behind = Arc::clone(&behind);
            move |driver: &D| {
                #[cfg(feature = "tracing")]
                let _entered = span.enter();
                {
                    let mut jobs = behind.jobs();
                    if jobs.posted == 0 {
                        // Taken back by the journal (`close`), which writes what is left.
                        return;
                    }
                    jobs.posted -= 1;
                    jobs.running += 1;
                }
                let wrote = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    now_or_never(std::pin::pin!(self.write_left(driver)));
                }));
                if let Err(panic) = wrote {
                    // A store that panicked: the panic is raised on the run's thread at the
                    // fan-out's end, as a branch's panic on a pool thread is.
                    let mut ledger = self.ledger();
                    ledger.behind = false;
                    ledger.panicked = Some(panic);
                }
                let mut jobs = behind.jobs();
                jobs.running -= 1;
                behind.stopped.notify_all();
            }
        };
        let job: Box<dyn FnOnce(&D) + Send + 'j> = Box::new(job);
        // SAFETY: the job reaches the journal (`self`) only between taking itself from `posted`
        // and leaving `running`, both under `Behind`'s lock, and the journal does not go before
        // it has taken back every job still posted and waited for every running one
        // (`close`, called by `settle` and by `Drop`, which also runs when a branch's panic
        // unwinds through the fan-out). A job taken back is dropped unrun, holding nothing but
        // references (which have no drop) and its `Arc`.
        let job: Box<dyn FnOnce(&D) + Send + 'static> =
            unsafe { std::mem::transmute::<Box<dyn FnOnce(&D) + Send + 'j>, Box<dyn FnOnce(&D) + Send>>(job) };
        driver.write_behind(job);
    }

    /// The writer behind the branches: writes what they record, until it finds nothing more to
    /// write for [`LINGER`] or the journal closes; then clears `Ledger::behind` (under the lock,
    /// having found nothing left), so that the next finished branch starts a writer again. A
    /// failed write stops it, for [`settle`](Self::settle) to report.
    async fn write_left<G: Graph<State = S>, D: Driver<G>>(&self, driver: &D) {
        let mut covered = 0;
        let mut idle = Instant::now();
        let mut spins = 0u32;
        loop {
            let recorded = self.recorded.load(Ordering::Acquire);
            if recorded > covered {
                if let Err(error) = self.flush(driver, recorded, true).await {
                    let mut ledger = self.ledger();
                    ledger.behind = false;
                    ledger.failed.get_or_insert(error);
                    return;
                }
                covered = recorded;
                idle = Instant::now();
                spins = 0;
                continue;
            }
            if self.closing.load(Ordering::Acquire) || idle.elapsed() >= LINGER {
                let mut ledger = self.ledger();
                if ledger.generation > covered {
                    continue;
                }
                ledger.behind = false;
                return;
            }
            // A record comes within microseconds while branches are cheap: spin a little,
            // then let the core go.
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Ends the journal's writing at the fan-out's end, before the run writes the checkpoint
    /// that ends it: stops the writer behind the branches (a job not started is taken back; a
    /// running one writes what was recorded and stops), then writes what is left, as the last
    /// finished branch's own write would have.
    ///
    /// # Errors
    /// What the writer behind failed with, else what [`flush`](Self::flush) returns.
    ///
    /// # Panics
    /// With the store's panic, when the store panicked under the writer behind.
    pub(crate) async fn settle<G: Graph<State = S>, D: Driver<G>>(&self, driver: &D) -> Result<(), Error> {
        if self.close() {
            self.ledger().behind = false;
        }
        let (failed, panicked) = {
            let mut ledger = self.ledger();
            (ledger.failed.take(), ledger.panicked.take())
        };
        if let Some(panic) = panicked {
            std::panic::resume_unwind(panic);
        }
        if let Some(error) = failed {
            return Err(error);
        }
        self.flush(driver, self.generation(), true).await
    }

    /// Stops the writer behind the branches: no writer starts any more, a job posted and not
    /// started is taken back (whether one was is returned), and a running one is waited for.
    fn close(&self) -> bool {
        self.closing.store(true, Ordering::Release);
        let Some(behind) = self.behind.get() else { return false };
        let mut jobs = behind.jobs();
        let taken = std::mem::take(&mut jobs.posted) > 0;
        while jobs.running > 0 {
            jobs = behind.stopped.wait(jobs).unwrap_or_else(PoisonError::into_inner);
        }
        taken
    }
}

impl<S: GraphState> Drop for Journal<'_, S> {
    /// A journal goes only once its writer behind is stopped: its job borrows it.
    fn drop(&mut self) {
        self.close();
        // A store's panic not raised (the fan-out ended otherwise): its payload's own drop
        // must not unwind from here.
        if let Some(panic) = self.ledger().panicked.take() {
            crate::vocab::error::drop_payload(panic);
        }
    }
}

impl<S: GraphState> Journal<'_, S> {
    /// The record of what `ledger` holds, after the run's head `chain`: once the store's head
    /// records this fan-out's branches, a delta of the branches that moved since (their new
    /// progress, by path), the lease and the time (unless the head has both: the journal's last
    /// write, in the same millisecond), written as text (neither the head nor the
    /// other branches are read or encoded); when such deltas would outgrow the last full
    /// record (see `tenure::Chain`), and before the store's head records the branches, the
    /// fan-out's checkpoint whole (the first time as a delta of the head before it, if that
    /// pays).
    fn plan(
        &self,
        ledger: &Ledger<S>,
        chain: Option<&mut Chain>,
        lease: checkpoint::Lease,
        now: u64,
    ) -> Result<Planned, Error> {
        let not_storable = |(path, reason)| Error::StateNotStorable {
            node: self.node.clone(),
            thread: self.tenure.thread.clone(),
            path,
            reason,
        };
        if let (Some(chain), true) = (chain.as_deref(), ledger.based) {
            // The patch is written into the delta record itself (see `Tenure::plan_delta`).
            let write = |patch: &mut Vec<u8>| -> Result<(), Error> {
                patch.extend_from_slice(br#"{"o":{"at":{"o":{"fork":{"o":{"branches":"#);
                let (branches, texts) = (&ledger.branches, &ledger.texts);
                if ledger.dirty_nested.is_empty() {
                    // The common case, without a list of paths to build.
                    patch.extend_from_slice(br#"{"a":["#);
                    let indices = ledger.dirty.iter().map(|&(index, _)| index).filter(|&index| index < branches.len());
                    for (n, index) in indices.enumerate() {
                        if n > 0 {
                            patch.push(b',');
                        }
                        write_entry(patch, branches, texts, index, "at.fork.branches", &not_storable)?;
                    }
                    end_patch(patch, branches.len());
                } else {
                    let mut paths: Vec<Vec<usize>> = ledger.dirty.iter().map(|&(index, _)| vec![index]).collect();
                    paths.extend(ledger.dirty_nested.keys().cloned());
                    // An outer branch before those inside it.
                    paths.sort_unstable();
                    let paths: Vec<&[usize]> = paths.iter().map(Vec::as_slice).collect();
                    branches_patch(patch, branches, texts, &paths, "at.fork.branches", &not_storable)?;
                }
                patch.extend_from_slice(b"}}}}");
                // A write in the same millisecond as the journal's last, with nothing written since
                // (a child's renewal of the lease), would set both to what the head has.
                let stamped = ledger.stamp == Some((now, lease.until)) && self.tenure.lease_until() == lease.until;
                if !stamped {
                    patch.extend_from_slice(br#","lease":{"v":"#);
                    lease.write_json(patch);
                    patch.extend_from_slice(br#"},"written_at":{"v":"#);
                    checkpoint::push_u64(patch, now);
                    patch.push(b'}');
                }
                patch.extend_from_slice(b"}}");
                Ok(())
            };
            if let Some(planned) = self.tenure.plan_delta(chain, write)? {
                return Ok(planned);
            }
        }
        let ckpt = ForkCheckpoint {
            step: self.step,
            state: self.base,
            at: ForkAt::Fork { source: &self.source, branches: &ledger.branches, texts: &ledger.texts },
            lease: Some(lease),
            written_at: Some(now),
        };
        let bytes = checkpoint::encode_fork(&self.tenure.identity(), &ckpt)?;
        checkpoint::check_reads_back::<S>(&bytes).map_err(not_storable)?;
        // Once the head records the branches, a delta of it saves too little to compare.
        self.tenure.plan_whole(chain, bytes, ledger.based)
    }
}

/// Writes to `out` the patch of a fan-out's `branches` ([`delta`]'s array form) that writes
/// the progress of the branches at `paths` (sorted, an outer branch before those inside it)
/// whole, each checked to read back (`at` names the branches in its errors); a branch whose
/// progress `texts` holds (by index) is written from that.
fn branches_patch<S: GraphState>(
    out: &mut Vec<u8>,
    branches: &[BranchProgress<S>],
    texts: &[Option<Vec<u8>>],
    paths: &[&[usize]],
    at: &str,
    not_storable: &dyn Fn((String, String)) -> Error,
) -> Result<(), Error> {
    out.extend_from_slice(br#"{"a":["#);
    let mut rest = paths;
    let mut first_entry = true;
    while let Some((&first, _)) = rest.first().and_then(|p| p.split_first()) {
        let end = rest.iter().position(|p| p.first() != Some(&first)).unwrap_or(rest.len());
        let (group, after) = rest.split_at(end);
        rest = after;
        let Some(branch) = branches.get(first) else { continue };
        if !first_entry {
            out.push(b',');
        }
        first_entry = false;
        if group.iter().any(|p| p.len() == 1) {
            write_entry(out, branches, texts, first, at, not_storable)?;
        } else {
            let inner: Vec<&[usize]> = group.iter().map(|p| &p[1..]).collect();
            out.push(b'[');
            checkpoint::push_u64(out, first as u64);
            out.extend_from_slice(br#",{"o":{"branches":"#);
            branches_patch(out, &branch.branches, &[], &inner, &format!("{at}[{first}].branches"), not_storable)?;
            out.extend_from_slice(b"}}]");
        }
    }
    end_patch(out, branches.len());
    Ok(())
}

/// Writes the entry of an array patch that writes the progress of branch `index` of
/// `branches` whole (from its text in `texts` if it has one), checked to read back.
fn write_entry<S: GraphState>(
    out: &mut Vec<u8>,
    branches: &[BranchProgress<S>],
    texts: &[Option<Vec<u8>>],
    index: usize,
    at: &str,
    not_storable: &dyn Fn((String, String)) -> Error,
) -> Result<(), Error> {
    let Some(branch) = branches.get(index) else { return Ok(()) };
    out.push(b'[');
    checkpoint::push_u64(out, index as u64);
    out.extend_from_slice(br#",{"v":"#);
    let start = out.len();
    match texts.get(index) {
        Some(Some(text)) => out.extend_from_slice(text),
        _ => branch.write_json(out).map_err(Error::store)?,
    }
    // A float that is NaN or infinite is written as null: check that what holds one reads back
    // (what `checkpoint::check_reads_back` does for a whole record).
    if holds_null(&out[start..]) {
        let value: Value = serde_json::from_slice(&out[start..]).map_err(Error::store)?;
        checkpoint::check_value_reads_back::<BranchProgress<S>>(&value)
            .map_err(|(path, reason)| not_storable((format!("{at}[{index}].{path}"), reason)))?;
    }
    out.extend_from_slice(b"}]");
    Ok(())
}

/// Ends an array patch of an array of `len` entries.
fn end_patch(out: &mut Vec<u8>, len: usize) {
    out.extend_from_slice(br#"],"n":"#);
    checkpoint::push_u64(out, len as u64);
    out.push(b'}');
}

/// Whether JSON text `json` may hold a `null` (it holds the word, in a string or not): a
/// branch's progress is short, so a scan for its first letter beats building a searcher.
fn holds_null(json: &[u8]) -> bool {
    memchr::memchr_iter(b'n', json).any(|at| json[at..].starts_with(b"null"))
}

/// Sets the progress of the branch at `path` from `record` (and, at a nested fan-out, its
/// branches from `nested`), under the journal's lock; the new generation.
fn set<S: GraphState>(
    ledger: &mut Ledger<S>,
    path: &[usize],
    record: Record<'_, S>,
    nested: Option<Vec<BranchProgress<S>>>,
) -> u64 {
    ledger.generation += 1;
    let generation = ledger.generation;
    if let Some(&first) = path.first() {
        if let Some(text) = ledger.texts.get_mut(first).and_then(Option::take) {
            if path.len() > 1 {
                // A record inside branch `first`, whose progress is its text: the typed copy
                // is brought up to date first. (Not reached: a branch's record at a fan-out of
                // its own, typed, comes before those of the branches inside it.)
                if let (Ok(progress), Some(branch)) =
                    (serde_json::from_slice::<BranchProgress<S>>(&text), ledger.branches.get_mut(first))
                {
                    *branch = progress;
                }
            }
        }
    }
    let Some(branch) = slot_mut(&mut ledger.branches, path) else { return generation };
    debug_assert!(path.len() > 1 || branch.head == *record.head, "a branch records under its own head");
    match path {
        [index] => mark_dirty(&mut ledger.dirty, *index, generation),
        _ => {
            ledger.dirty_nested.insert(path.to_vec(), generation);
        }
    }
    // Updates only grow while a branch runs: copy the new ones.
    if branch.updates.len() <= record.updates.len() {
        branch.updates.extend(record.updates[branch.updates.len()..].iter().cloned());
    } else {
        branch.updates = record.updates.to_vec();
    }
    if branch.origins.len() <= record.origins.len() {
        branch.origins.extend(record.origins[branch.origins.len()..].iter().cloned());
    } else {
        branch.origins = record.origins.to_vec();
    }
    branch.steps = record.steps;
    branch.at = record.at;
    branch.answers = record.answers.to_vec();
    branch.resume = record.pending.is_none();
    branch.pending = record.pending.cloned().map(Box::new);
    branch.more_pending = record.more_pending.to_vec();
    branch.jump = record.jump.cloned().map(Box::new);
    match nested {
        Some(heads) => branch.branches = heads,
        None if !matches!(branch.at, BranchAt::Fork { .. }) => branch.branches.clear(),
        None => {}
    }
    generation
}

/// Sets the progress of branch `index` to `text` (written from its record by
/// [`Journal::record`]), under the journal's lock; the new generation.
fn set_text<S: GraphState>(ledger: &mut Ledger<S>, index: usize, text: Vec<u8>) -> u64 {
    ledger.generation += 1;
    let generation = ledger.generation;
    let Some(slot) = ledger.texts.get_mut(index) else { return generation };
    *slot = Some(text);
    mark_dirty(&mut ledger.dirty, index, generation);
    generation
}

/// Marks branch `index` as changed at `generation` in `dirty` (sorted by index).
fn mark_dirty(dirty: &mut Vec<(usize, u64)>, index: usize, generation: u64) {
    match dirty.binary_search_by_key(&index, |&(i, _)| i) {
        Ok(at) => dirty[at].1 = generation,
        Err(at) => dirty.insert(at, (index, generation)),
    }
}

/// The branch at `path` among `branches`.
fn slot<'b, S: GraphState>(branches: &'b [BranchProgress<S>], path: &[usize]) -> Option<&'b BranchProgress<S>> {
    let (&first, rest) = path.split_first()?;
    let branch = branches.get(first)?;
    if rest.is_empty() {
        Some(branch)
    } else {
        slot(&branch.branches, rest)
    }
}

fn slot_mut<'b, S: GraphState>(
    branches: &'b mut [BranchProgress<S>],
    path: &[usize],
) -> Option<&'b mut BranchProgress<S>> {
    let (&first, rest) = path.split_first()?;
    let branch = branches.get_mut(first)?;
    if rest.is_empty() {
        Some(branch)
    } else {
        slot_mut(&mut branch.branches, rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::checkpoint::Identity;
    use crate::model::fixture::Tally;
    use crate::store::{Checkpointer, MemoryStore};
    use crate::vocab::clock::Clock;
    use crate::vocab::name::ThreadId;

    fn tenure(window: Duration) -> Tenure {
        let identity = Identity { graph: "g", graph_fingerprint: 0, schema_fingerprint: 0 };
        let store: Arc<dyn Checkpointer> = Arc::new(MemoryStore::new());
        let mut tenure = Tenure::new(store, ThreadId::from("t"), Some(1), &identity, Clock::system());
        tenure.group_commit = window;
        tenure
    }

    fn journal<'a>(tenure: &'a Tenure, base: &'a Tally, behind_ok: bool) -> Journal<'a, Tally> {
        let branches = vec![BranchProgress::fresh(NodeName::from("a")), BranchProgress::fresh(NodeName::from("b"))];
        Journal::new(tenure, true, 1, base, NodeName::from("split"), branches, false, behind_ok)
    }

    /// The journal as if its fan-out began `ago` ago (`None`: it begins a minute from now, so
    /// that it stays young however slowly the test runs).
    fn began(journal: &mut Journal<'_, Tally>, ago: Option<Duration>) {
        journal.started = match ago {
            Some(ago) => Instant::now().checked_sub(ago).expect("the clock reaches back a second"),
            None => Instant::now() + Duration::from_secs(60),
        };
    }

    #[test]
    fn a_young_fan_out_writing_behind_its_branches_holds_those_that_finish() {
        let (tenure, base) = (tenure(Duration::ZERO), Tally::default());
        let mut young = journal(&tenure, &base, true);
        began(&mut young, None);
        assert!(!young.held_any());
        assert!(young.hold(None, true), "a finished branch of a young fan-out is left to its end");
        assert!(young.held_any() && young.held_young());
        // Nothing was recorded: the fan-out's end holds it.
        assert_eq!(young.generation(), 0);
    }

    #[test]
    fn without_a_writer_behind_or_once_the_fan_out_is_old_a_finished_branch_is_recorded() {
        let (tenure, base) = (tenure(Duration::ZERO), Tally::default());
        // A driver that does not write behind (the async one), or one branch at a time.
        let mut not_behind = journal(&tenure, &base, true);
        began(&mut not_behind, None);
        assert!(!not_behind.hold(None, false));
        let mut one_at_a_time = journal(&tenure, &base, false);
        began(&mut one_at_a_time, None);
        assert!(!one_at_a_time.hold(None, true));
        // A fan-out past its first 100 µs.
        let mut old = journal(&tenure, &base, true);
        began(&mut old, Some(Duration::from_secs(1)));
        assert!(!old.hold(None, true));
        assert!(!old.held_any() && !not_behind.held_any() && !one_at_a_time.held_any());
    }

    #[test]
    fn a_group_commit_window_holds_finished_work_up_to_its_size_young_or_not() {
        let (tenure, base) = (tenure(Duration::from_millis(10)), Tally::default());
        let mut old = journal(&tenure, &base, true);
        began(&mut old, Some(Duration::from_secs(1)));
        assert!(old.hold(Some(Duration::from_millis(4)), true));
        assert!(old.hold(Some(Duration::from_millis(4)), false));
        assert!(!old.hold(Some(Duration::from_millis(4)), true), "the window is full");
        assert!(old.held_any() && !old.held_young());
    }
}
