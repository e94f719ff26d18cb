//! The run's writes through its link to the store (`Persist`, in `run`): the claim of its thread, its lease and
//! the ancestors' it keeps alive, the checkpoint of each step, its pause, and what it writes
//! back when it is abandoned. Every write is a compare-and-swap on the thread's head through
//! the run's driver.
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

use crate::format::checkpoint::{self, Checkpoint, Lease};
use crate::format::interrupt::Interrupt;
use crate::format::token::PauseRecord;
use crate::lease::Host;
use crate::machine::driver::Driver;
use crate::machine::line::Cursor;
use crate::machine::run::{Persist, Progress, Run};
use crate::machine::validate::identity;
use crate::model::graph::Graph;
use crate::store::AppendOutcome;
use crate::vocab::clock::{now, now_ms, random_u64};
use crate::vocab::error::Error;
use crate::vocab::name::CheckpointId;
use crate::vocab::options::Durability;
#[cfg(feature = "tracing")]
use crate::vocab::state::GraphState;
#[cfg(feature = "tracing")]
use crate::vocab::trace;
use crate::vocab::trace::traced;
use std::sync::Arc;
#[cfg(feature = "tracing")]
use std::time::Instant;

/// A checkpoint encoded for the store: its bytes, the head it replaces, and its id.
pub(crate) struct Encoded {
    pub(crate) bytes: Vec<u8>,
    pub(crate) head: Option<CheckpointId>,
    pub(crate) id: CheckpointId,
}

/// The `checkpoint` span of a write of `ckpt`, and when the write started.
#[cfg(feature = "tracing")]
pub(crate) fn checkpoint_span<S: GraphState>(ckpt: &Checkpoint<S>, durable: bool) -> (tracing::Span, Instant) {
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

/// Whether half of a run's own lease is gone (or it holds none yet).
pub(crate) fn own_lease_due(persist: &Persist<'_>) -> bool {
    let host = &persist.host;
    host.until() < now_ms().saturating_add(host.lease_ms / 2)
}

/// The error of a run that would write or pause without a checkpointer (the executor checks
/// for one first: this is the error, not a panic, should that ever not hold).
pub(crate) fn no_store<G: Graph>(graph: &G) -> Error {
    Error::store(format!("graph `{}` has no checkpointer to write to", graph.name()))
}

/// Renews the lease of `parent`'s run and of each of its ancestors where half of it is gone:
/// each renewal planned by its [`Host`], appended by compare-and-swap through `driver` (so a
/// run on tokio awaits the store's async call), and recorded by the host.
///
/// # Errors
/// [`Error::LeaseLost`] when one of them was taken over, and the store's errors.
pub(crate) async fn keep_alive<G: Graph, D: Driver<G>>(driver: &D, parent: &Host) -> Result<(), Error> {
    let mut at = Some(parent);
    while let Some(host) = at {
        if let Some(renewal) = host.plan_renewal()? {
            let appended = driver
                .append(&*host.store, &host.graph, &host.thread, Some(renewal.head), renewal.id, &renewal.bytes, false)
                .await;
            host.renewed(renewal, appended)?;
        }
        at = host.parent.as_deref();
    }
    Ok(())
}

impl<'g, G: Graph> Run<'g, G> {
    /// Whether the run writes its lease before the next node: it has not claimed its thread
    /// yet, or half its lease is gone (renewed, so that `recover` elsewhere does not take a live
    /// run over).
    ///
    /// A child graph's run (a subgraph node's) also renews its ancestors' leases before a node
    /// once half of one is gone: while the node runs, its run writes nothing, and a child that
    /// outlasts the lease must not let it expire.
    pub(crate) fn lease_due(&self) -> bool {
        self.persist
            .as_ref()
            .is_some_and(|p| !self.finished && (own_lease_due(p) || p.host.parent.as_deref().is_some_and(Host::due)))
    }
    /// Whether the run has yet to claim its thread ([`claim`](Self::claim)).
    #[inline]
    pub(crate) fn claim_pending(&self) -> bool {
        self.persist.as_ref().is_some_and(|p| p.claim)
    }
    /// Claims the run's thread before any node runs: its first checkpoint (with its lease),
    /// written by compare-and-swap on the head the run read — none for a new thread, the
    /// paused or stopped checkpoint for a resume or a recover — so that of two runs of one
    /// thread exactly one goes on ([`wrote`](Self::wrote) names the other's error:
    /// `ThreadExists`, `StaleResume`, `ThreadBusy`). One store call, the one the first step
    /// made before; nothing once claimed. The blocking API claims before the first step
    /// (`Run::claim_now`); a stream claims at its first step, so that one never polled writes
    /// nothing.
    pub(crate) async fn claim<D: Driver<G>>(&mut self, driver: &D) -> Result<(), Error> {
        if !self.claim_pending() {
            return Ok(());
        }
        self.save(driver, false).await?;
        if let Some(persist) = &mut self.persist {
            persist.claim = false;
        }
        Ok(())
    }
    /// [`claim`](Self::claim) as a step of its own: a lost claim abandons the run (which wrote
    /// nothing) and is traced as the run's failure, as a failed step is.
    pub(crate) async fn claim_step<D: Driver<G>>(&mut self, driver: &D) -> Result<(), Error> {
        let result = self.claim(driver).await.map(|()| Progress::Stepped);
        if result.is_err() {
            self.abandon_with(driver).await;
        }
        traced! { self.trace_progress(&result); }
        result.map(|_| ())
    }
    /// Writes the run's lease ([`lease_due`](Self::lease_due)), or only renews its ancestors'
    /// when its own is not due.
    pub(crate) async fn save_lease<D: Driver<G>>(&mut self, driver: &D) -> Result<(), Error> {
        let Some(persist) = &self.persist else { return Ok(()) };
        if !own_lease_due(persist) {
            if let Some(parent) = persist.host.parent.clone() {
                keep_alive::<G, D>(driver, &parent).await?;
            }
            return Ok(());
        }
        self.save(driver, false).await
    }
    pub(crate) async fn save_step<D: Driver<G>>(&mut self, driver: &D) -> Result<(), Error> {
        let Some(durable) = self.step_durability() else { return Ok(()) };
        // A step that routed to `end` writes the final checkpoint, which is always flushed.
        let done = matches!(self.line.cursor, Cursor::Done);
        self.save(driver, durable || done).await?;
        self.finished = done;
        self.progressed();
        Ok(())
    }
    /// A node of a resumed run completed and is in the store. The node the pause stood before
    /// runs again on any resume (a breakpoint's node, a node that asked, with its answers), so
    /// once it completes the pause may still go back if the run fails; once a node after it
    /// completed, the run is not rolled back to its pause (which would run that node again on
    /// the next resume) but left where it stands, for `recover`, and its token is spent.
    pub(crate) fn progressed(&mut self) {
        let node = &self.ctx.node;
        if let Some(persist) = &mut self.persist {
            if persist.rollback.is_some() && persist.paused_node.as_ref() == Some(node) {
                persist.paused_node = None;
                return;
            }
            persist.paused_node = None;
            persist.rollback = None;
        }
    }
    /// Whether a node's step is checkpointed, and flushed: `None` without a store or with
    /// [`Durability::OnPause`].
    pub(crate) fn step_durability(&self) -> Option<bool> {
        match self.persist.as_ref()?.durability {
            Durability::OnPause => None,
            Durability::Buffered => Some(false),
            Durability::EveryStep => Some(true),
        }
    }
    /// A checkpoint of where the run stands (no pause): with this run's lease, renewed, unless
    /// the run is over.
    pub(crate) fn checkpoint(&self) -> Checkpoint<G::State> {
        let lease = match &self.persist {
            Some(persist) if !matches!(self.line.cursor, Cursor::Done) => {
                let host = &persist.host;
                Some(Lease { owner: host.owner, until: now_ms().saturating_add(host.lease_ms) })
            }
            _ => None,
        };
        Checkpoint {
            step: self.ctx.step,
            state: self.state.clone(),
            at: self.position(),
            pending: Vec::new(),
            pause: None,
            paused_at: None,
            nonce: None,
            resumed: self.line.resuming,
            answers: self.line.answers.clone(),
            joined: self.ctx.branches.clone(),
            lease,
            parent: self.line.jump.clone(),
            written_at: Some(now_ms()),
        }
    }
    /// Writes a checkpoint of where the run stands ([`checkpoint`](Self::checkpoint)).
    pub(crate) async fn save<D: Driver<G>>(&mut self, driver: &D, durable: bool) -> Result<(), Error> {
        if self.persist.is_none() {
            return Ok(());
        }
        let ckpt = self.checkpoint();
        self.write(driver, &ckpt, durable).await.map(|_| ())
    }
    /// Writes `ckpt` as the thread's new head, by compare-and-swap on the head this run last saw.
    pub(crate) async fn write<D: Driver<G>>(
        &mut self,
        driver: &D,
        ckpt: &Checkpoint<G::State>,
        durable: bool,
    ) -> Result<CheckpointId, Error> {
        let graph = self.graph;
        if self.persist.is_none() {
            return Ok(0);
        }
        traced! { let (span, started) = checkpoint_span(ckpt, durable); }
        let encoded = {
            traced! { let _checkpoint = span.enter(); }
            self.encode_write(ckpt)?
        };
        traced! { span.record("bytes", encoded.bytes.len()); }
        let Some(persist) = &self.persist else { return Err(no_store(self.graph)) };
        let appended = {
            let future = driver.append(
                persist.store,
                graph.name(),
                &persist.thread,
                encoded.head,
                encoded.id,
                &encoded.bytes,
                durable,
            );
            #[cfg(feature = "tracing")]
            let future = tracing::Instrument::instrument(future, span.clone());
            future.await?
        };
        traced! { self.traced_write(&span, started, &encoded, &appended); }
        let id = self.wrote(ckpt, encoded, appended)?;
        if let Some(parent) = self.renews_ancestors(ckpt) {
            keep_alive::<G, D>(driver, &parent).await?;
        }
        Ok(id)
    }
    /// A child graph's run keeps its ancestors' leases alive as it renews its own: after a
    /// checkpoint `ckpt` with a lease, the host of the parent's run, whose lease (and its
    /// ancestors') [`keep_alive`] then renews where half of one is gone.
    pub(crate) fn renews_ancestors(&self, ckpt: &Checkpoint<G::State>) -> Option<Arc<Host>> {
        ckpt.lease?;
        self.persist.as_ref().and_then(|p| p.host.parent.clone())
    }
    /// Encodes `ckpt` for the store and checks that its state reads back; the head it is to
    /// replace and its id.
    pub(crate) fn encode_write(&self, ckpt: &Checkpoint<G::State>) -> Result<Encoded, Error> {
        let Some(persist) = &self.persist else { return Err(no_store(self.graph)) };
        let bytes = checkpoint::encode(&identity(self.graph), ckpt)?;
        if let Err((path, reason)) = checkpoint::check_reads_back::<G::State>(&bytes) {
            return Err(Error::StateNotStorable {
                node: self.ctx.node.clone(),
                thread: persist.thread.clone(),
                path,
                reason,
            });
        }
        // Read, not held: the lock is never held across an await. While this run writes, no
        // node of it runs, so no child of it renews its lease.
        let head = persist.host.head();
        Ok(Encoded { bytes, head, id: head.map_or(1, |h| h + 1) })
    }
    /// What the store's answer to writing `encoded` (of `ckpt`) means: the run's new head, or
    /// the error of a lost compare-and-swap.
    pub(crate) fn wrote(
        &mut self,
        ckpt: &Checkpoint<G::State>,
        encoded: Encoded,
        appended: AppendOutcome,
    ) -> Result<CheckpointId, Error> {
        let Some(persist) = &mut self.persist else { return Err(no_store(self.graph)) };
        match appended {
            AppendOutcome::Written => {
                let host = &persist.host;
                host.wrote(&mut host.held(), encoded.id, encoded.bytes, ckpt.lease.map_or(0, |lease| lease.until));
                Ok(encoded.id)
            }
            AppendOutcome::Conflict { .. } if encoded.head.is_none() => {
                Err(Error::ThreadExists { thread: persist.thread.clone() })
            }
            AppendOutcome::Conflict { .. } if persist.recovering && persist.claim => Err(Error::ThreadBusy {
                thread: persist.thread.clone(),
                expires_in: std::time::Duration::from_millis(persist.host.lease_ms),
            }),
            AppendOutcome::Conflict { .. } => Err(Error::StaleResume { thread: persist.thread.clone() }),
        }
    }
    /// Records a write's duration, and its `written` event or a lost compare-and-swap, in its
    /// `checkpoint` span.
    #[cfg(feature = "tracing")]
    pub(crate) fn traced_write(
        &self,
        span: &tracing::Span,
        started: Instant,
        encoded: &Encoded,
        appended: &AppendOutcome,
    ) {
        span.record("duration_us", trace::micros(started.elapsed()));
        if let AppendOutcome::Written = appended {
            // Its size and duration are the span's fields: not repeated.
            span.in_scope(|| tracing::debug!(target: "tea", id = %encoded.id, "written"));
        }
        if let (AppendOutcome::Conflict { head: found }, Some(persist)) = (appended, &self.persist) {
            let expected = encoded.head;
            tracing::info!(target: "tea", thread = %persist.thread, expected = ?expected, found = ?found, "conflict");
        }
    }
    /// Pauses on `pending`: writes the paused checkpoint durably and records the pause.
    pub(crate) async fn pause<D: Driver<G>>(&mut self, driver: &D, pending: Vec<Interrupt>) -> Result<Progress, Error> {
        let graph = self.graph;
        let Some(persist) = &self.persist else {
            let node = pending.first().map_or_else(|| self.ctx.node.clone(), |p| p.node().clone());
            return Err(Error::PausedWithoutCheckpointer { graph: graph.name().to_owned(), node });
        };
        let id = persist.host.head().map_or(1, |h| h + 1);
        let ckpt = Checkpoint {
            step: self.ctx.step,
            state: self.state.clone(),
            at: self.position(),
            pending,
            pause: Some(id),
            paused_at: Some(now()),
            nonce: Some(random_u64()),
            resumed: false,
            answers: self.line.answers.clone(),
            joined: self.ctx.branches.clone(),
            lease: None,
            parent: None,
            written_at: Some(now_ms()),
        };
        self.write(driver, &ckpt, true).await?;
        let Some(persist) = &mut self.persist else { return Err(no_store(self.graph)) };
        // The pause is durable: nothing is left to roll back to.
        persist.rollback = None;
        // The token is the API's to make (`api::token`), from what the checkpoint records.
        let record = PauseRecord { pause: id, nonce: ckpt.nonce.unwrap_or_default(), pending: ckpt.pending };
        Ok(Progress::Paused(Box::new(record)))
    }
    /// [`abandon`](Self::abandon) through driver `driver`.
    pub(crate) async fn abandon_with<D: Driver<G>>(&mut self, driver: &D) {
        let graph = self.graph;
        let Some(persist) = &mut self.persist else { return };
        let rollback = persist.rollback.take();
        let (head, last) = {
            let mut held = persist.host.held();
            (held.head, held.last.take())
        };
        // The run is over: its children (if any still run) no longer renew its lease.
        persist.host.released();
        if persist.claim || self.finished {
            return;
        }
        traced! { let rollback_pause = rollback.is_some(); }
        let bytes = match rollback {
            Some(bytes) => bytes,
            None => {
                let Some(last) = last else { return };
                let id = head.unwrap_or_default();
                let Ok(mut ckpt) = checkpoint::decode::<G::State>(&last, &identity(graph), &persist.thread, id) else {
                    return;
                };
                if ckpt.lease.is_none() {
                    return;
                }
                ckpt.lease = None;
                let Ok(bytes) = checkpoint::encode(&identity(graph), &ckpt) else { return };
                bytes
            }
        };
        let id = head.map_or(1, |h| h + 1);
        traced! {
            tracing::info!(target: "tea", thread = %persist.thread, put_back_pause = rollback_pause, "abandoned");
        }
        let appended = driver.append(persist.store, graph.name(), &persist.thread, head, id, &bytes, true).await;
        if let Ok(AppendOutcome::Written) = appended {
            persist.host.held().head = Some(id);
        }
    }
}
