//! Retention: [`App::sweep`] deletes what an app's [`Retention`] no longer keeps — old
//! checkpoints past the last K, finished threads past their time, and paused threads past
//! theirs only when asked — and reports it ([`SweepReport`]); [`App::sweep_every`] runs it on a
//! thread of its own until its [`Sweeper`] is dropped. A thread's own setting
//! ([`App::set_retention`]) is a record in the app's store, beside the thread, so every process
//! on the store sees it.
//!
//! A sweep reads each thread's head without decoding its state (`format::checkpoint::standing`)
//! and expires a thread with [`Checkpointer::delete_at`], which deletes nothing if the thread
//! moved on since. A store that keeps [`RestMarks`] (PostgreSQL) is read only for the heads
//! written since its last sweep, and expires in one statement. Checkpoints past the last K go
//! through [`App::prune`], the one prune of the engine.

use crate::api::app::App;
use crate::format::checkpoint::standing;
use crate::model::graph::Graph;
use crate::store::{AppendOutcome, Checkpointer, Expiry, Rest, RestMark};
use crate::vocab::error::Error;
use crate::vocab::name::{CheckpointId, ThreadId};
use crate::vocab::retention::{show_duration, Retention};
use crate::vocab::trace::{self, traced};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

/// The graph name a thread's own retention is stored under: the app's graph name and this.
pub(crate) const RETENTION_SUFFIX: &str = "#retention";
/// Compare-and-swap attempts of [`App::set_retention`] before it gives up.
const ATTEMPTS: usize = 64;

/// What a sweep did ([`App::sweep`]).
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct SweepReport {
    /// How many threads the sweep looked at.
    pub threads: usize,
    /// The threads it deleted, sorted by id: finished (or, when asked, paused) past their time.
    pub expired: Vec<ExpiredThread>,
    /// How many old checkpoints it deleted to keep each thread's last K.
    pub pruned: usize,
    /// The paused threads it kept although they have waited longer than a finished thread is
    /// kept: a paused thread is never expired unless its retention asks for it, and never
    /// silently. Sorted by id.
    pub kept_paused: Vec<KeptPaused>,
    /// The threads whose head (or retention record) did not read, each with why: kept as they
    /// are.
    pub unreadable: Vec<(ThreadId, Error)>,
    /// How many items of the app's long-term memory ([`App::memory`]) it deleted because their
    /// time to live had passed.
    pub memory_expired: usize,
}

/// A thread a sweep deleted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpiredThread {
    /// The thread.
    pub thread: ThreadId,
    /// How it rested: [`Rest::Finished`], or [`Rest::Paused`] when paused threads expire.
    pub rest: Rest,
    /// How long since its last checkpoint was written.
    pub idle: Duration,
}

/// A paused thread a sweep kept, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeptPaused {
    /// The thread.
    pub thread: ThreadId,
    /// How long it has waited since its pause was written.
    pub idle: Duration,
    /// Why it was kept.
    pub because: KeptBecause,
}

/// Why a sweep kept a paused thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeptBecause {
    /// Its retention does not expire paused threads
    /// ([`Retention::expire_paused_after`] was not asked).
    PausedNotExpired,
    /// Its retention expires paused threads after `ttl`, which has not passed.
    NotIdleLongEnough {
        /// The paused threads' time.
        ttl: Duration,
    },
}

impl fmt::Display for KeptPaused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let idle = show_duration(Duration::from_secs(self.idle.as_secs()));
        match self.because {
            KeptBecause::PausedNotExpired => {
                write!(f, "thread `{}` kept: paused for {idle}, and paused threads do not expire", self.thread)
            }
            KeptBecause::NotIdleLongEnough { ttl } => write!(
                f,
                "thread `{}` kept: paused for {idle}, paused threads expire after {}",
                self.thread,
                show_duration(ttl)
            ),
        }
    }
}

impl<G: Graph, C: Checkpointer> App<G, C> {
    /// The app's retention ([`Builder::retention`](crate::Builder::retention)).
    pub fn retention(&self) -> Retention {
        self.retention
    }

    /// This app, sharing its graph, store, options and node cache, with `retention` in place of
    /// its own ([`Builder::retention`](crate::Builder::retention)): what a front end that loads
    /// the app elsewhere (a YAML agent, `tea serve`) sweeps with. Cheap: a few reference counts.
    pub fn with_retention(&self, retention: Retention) -> App<G, C> {
        App { retention, ..self.copy() }
    }

    /// Gives `thread` a retention of its own, over the app's (`None`: removes it, so the app's
    /// holds again). It is a record in the app's store beside the thread, so it holds in every
    /// process on the store, across restarts, until the thread is deleted or expired. The thread
    /// need not exist yet.
    ///
    /// ```
    /// # use tea::prelude::*;
    /// # use std::time::Duration;
    /// # #[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
    /// # struct Doc { text: String }
    /// # fn draft(_: &Doc) {}
    /// # graph! { Drafts for Doc { start -> draft; draft -> end; } }
    /// let app = Drafts::builder()
    ///     .checkpointer(tea::MemoryStore::new())
    ///     .retention(tea::Retention::new().expire_finished_after(Duration::from_secs(86_400)))
    ///     .build();
    /// let audit = ThreadId::from("audit-7");
    /// app.set_retention(&audit, Some(tea::Retention::new().never_expire_finished()))?;
    /// assert_eq!(app.thread_retention(&audit)?.unwrap().finished_ttl(), None);
    /// # Ok::<(), tea::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Store`] when the store fails, or when other writers keep changing the record.
    pub fn set_retention(&self, thread: &ThreadId, retention: Option<Retention>) -> Result<(), Error> {
        let side = self.retention_graph();
        let store = &*self.checkpointer;
        let Some(retention) = retention else {
            trace::store_call("delete", &side, Some(thread), || store.delete(&side, thread))?;
            return Ok(());
        };
        let bytes = serde_json::to_vec(&retention).map_err(Error::store)?;
        for _ in 0..ATTEMPTS {
            let head = trace::store_call("head", &side, Some(thread), || store.head(&side, thread))?.map(|(id, _)| id);
            let id = head.map_or(1, |id| id + 1);
            let written = trace::store_call("append", &side, Some(thread), || {
                store.append(&side, thread, head, id, &bytes, true)
            })?;
            if written == AppendOutcome::Written {
                trace::store_call("prune", &side, Some(thread), || store.prune(&side, thread, 1))?;
                return Ok(());
            }
        }
        Err(Error::store(format!(
            "the retention record of thread `{thread}` changed {ATTEMPTS} times while it was being written"
        )))
    }

    /// The retention `thread` has of its own ([`set_retention`](Self::set_retention)), if any.
    ///
    /// # Errors
    /// [`Error::Store`] when the store fails; [`Error::CorruptCheckpoint`] for a record that
    /// does not decode.
    pub fn thread_retention(&self, thread: &ThreadId) -> Result<Option<Retention>, Error> {
        let side = self.retention_graph();
        let head = trace::store_call("head", &side, Some(thread), || self.checkpointer.head(&side, thread))?;
        head.map(|(id, bytes)| decode_retention(thread, id, &bytes)).transpose()
    }

    /// Applies the app's retention ([`Builder::retention`](crate::Builder::retention)) once:
    /// see [`sweep_with`](Self::sweep_with).
    ///
    /// # Errors
    /// As [`sweep_with`](Self::sweep_with).
    pub fn sweep(&self) -> Result<SweepReport, Error> {
        self.sweep_with(self.retention)
    }

    /// Applies `retention` (in place of the app's; each thread's own comes over it) to every
    /// thread of the app's graph, at the app's clock's time, and reports what it did:
    ///
    /// - a finished thread whose last checkpoint is older than the finished time is deleted;
    /// - a paused thread is deleted only if the retention expires paused threads and its pause
    ///   is older than that; otherwise one that has waited longer than the finished time is
    ///   listed in [`SweepReport::kept_paused`] with why;
    /// - a running thread, or one whose run stopped part-way, is never deleted;
    /// - every other thread keeps its last K checkpoints ([`App::prune`]);
    /// - the items of the app's memory ([`App::memory`]) whose time to live has passed are
    ///   deleted ([`Memory::sweep`](crate::Memory::sweep)).
    ///
    /// A thread that moves on while the sweep looks at it (a resume, a new step) is not
    /// deleted. A token of an expired paused thread fails with [`Error::CheckpointNotFound`].
    ///
    /// ```
    /// # use tea::prelude::*;
    /// # use std::time::{Duration, SystemTime};
    /// # #[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
    /// # struct Doc { text: String }
    /// # fn draft(_: &Doc) {}
    /// # graph! { Drafts for Doc { start -> draft; draft -> end; } }
    /// let clock = tea::Clock::manual(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000));
    /// let app = Drafts::builder()
    ///     .checkpointer(tea::MemoryStore::new())
    ///     .clock(clock.clone())
    ///     .retention(tea::Retention::new().expire_finished_after(tea::parse_duration("30d")?))
    ///     .build();
    /// app.run(Call::start(Doc::default()).on("d-1"))?;
    /// assert!(app.sweep()?.expired.is_empty());
    /// clock.advance(tea::parse_duration("31d")?);
    /// assert_eq!(app.sweep()?.expired[0].thread, ThreadId::from("d-1"));
    /// assert!(app.threads()?.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Store`] when the store fails. A thread whose head does not read is not an error
    /// of the sweep: it is kept, and listed in [`SweepReport::unreadable`].
    pub fn sweep_with(&self, retention: Retention) -> Result<SweepReport, Error> {
        let graph = self.graph.name();
        let store = &*self.checkpointer;
        let now = self.clock.now_ms();
        let mut report = SweepReport::default();
        let (own, unreadable) = self.thread_retentions()?;
        report.unreadable = unreadable;
        let skip: Vec<ThreadId> = report.unreadable.iter().map(|(thread, _)| thread.clone()).collect();
        let threads = self.threads()?;
        report.threads = threads.len();
        let mut gone = std::collections::BTreeSet::new();
        // Threads the engine judges one by one: all of them, or, on a store that keeps marks,
        // those with a retention of their own.
        let judged: Vec<ThreadId> = match store.rest_marks() {
            None => threads.iter().filter(|t| !skip.contains(*t)).cloned().collect(),
            Some(marks) => {
                let unmarked = trace::store_call("unmarked", graph, None, || marks.unmarked(graph))?;
                let mut fresh = Vec::with_capacity(unmarked.len());
                for thread in unmarked {
                    match self.standing_of(&thread, now) {
                        Ok(Some((head, rest, since_ms))) => fresh.push(RestMark { thread, head, rest, since_ms }),
                        Ok(None) => {}
                        Err(error) => report.unreadable.push((thread, error)),
                    }
                }
                trace::store_call("mark", graph, None, || marks.mark(graph, &fresh))?;
                let cutoff = |ttl: Option<Duration>| ttl.map(|ttl| now.saturating_sub(millis(ttl)));
                let mut except: Vec<ThreadId> = own.keys().cloned().collect();
                except.extend(report.unreadable.iter().map(|(thread, _)| thread.clone()));
                let expiry = Expiry {
                    finished_before: cutoff(retention.finished_ttl()),
                    paused_before: cutoff(retention.paused_ttl()),
                    except,
                };
                let expired = trace::store_call("expire", graph, None, || marks.expire(graph, &expiry))?;
                for mark in expired.expired {
                    let idle = Duration::from_millis(now.saturating_sub(mark.since_ms.unwrap_or(now)));
                    gone.insert(mark.thread.clone());
                    report.expired.push(ExpiredThread { thread: mark.thread, rest: mark.rest, idle });
                }
                for mark in expired.kept_paused {
                    let idle = Duration::from_millis(now.saturating_sub(mark.since_ms.unwrap_or(now)));
                    report.kept_paused.push(KeptPaused {
                        thread: mark.thread,
                        idle,
                        because: kept_because(&retention),
                    });
                }
                own.keys().filter(|t| threads.contains(*t)).cloned().collect()
            }
        };
        for thread in judged {
            let effective = own.get(&thread).map_or(retention, |own| own.over(retention));
            match self.judge(&thread, effective, now) {
                Ok(Judged::Expired(expired)) => {
                    gone.insert(thread);
                    report.expired.push(expired);
                }
                Ok(Judged::KeptPaused(kept)) => report.kept_paused.push(kept),
                Ok(Judged::Kept) => {}
                Err(error) => report.unreadable.push((thread, error)),
            }
        }
        for thread in &threads {
            if gone.contains(thread) || skip.contains(thread) {
                continue;
            }
            let effective = own.get(thread).map_or(retention, |own| own.over(retention));
            if let Some(keep) = effective.kept_checkpoints() {
                report.pruned += self.prune(thread, keep)?;
            }
        }
        for thread in &gone {
            if own.contains_key(thread) {
                self.set_retention(thread, None)?;
            }
        }
        if let Some(memory) = &self.memory {
            report.memory_expired = memory.sweep()?;
        }
        report.expired.sort_by(|a, b| a.thread.cmp(&b.thread));
        report.kept_paused.sort_by(|a, b| a.thread.cmp(&b.thread));
        report.unreadable.sort_by(|a, b| a.0.cmp(&b.0));
        traced! {
            for expired in report.expired.iter().filter(|e| e.rest == Rest::Paused) {
                tracing::warn!(target: "tea", graph, thread = expired.thread.as_str(), idle_s = expired.idle.as_secs(), "expired a paused thread");
            }
            tracing::info!(target: "tea", graph, threads = report.threads, expired = report.expired.len(),
                pruned = report.pruned, kept_paused = report.kept_paused.len(), "swept");
        }
        Ok(report)
    }

    /// Sweeps the app's threads ([`sweep`](Self::sweep)) now and then every `every`, on a
    /// thread of its own, handing each report to `on_report`, until the returned [`Sweeper`] is
    /// dropped or stopped. `every` is real time; what expires is judged by the app's clock.
    ///
    /// ```
    /// # use tea::prelude::*;
    /// # use std::time::Duration;
    /// # #[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
    /// # struct Doc { text: String }
    /// # fn draft(_: &Doc) {}
    /// # graph! { Drafts for Doc { start -> draft; draft -> end; } }
    /// let app = Drafts::builder()
    ///     .checkpointer(tea::MemoryStore::new())
    ///     .retention(tea::Retention::new().keep_last(10).expire_finished_after(Duration::from_secs(7 * 86_400)))
    ///     .build();
    /// let sweeper = app.sweep_every(Duration::from_secs(600), |report| {
    ///     if let Err(error) = report {
    ///         eprintln!("sweep failed: {error}");
    ///     }
    /// });
    /// // … serve requests …
    /// sweeper.stop(); // or drop it
    /// ```
    pub fn sweep_every<F>(&self, every: Duration, mut on_report: F) -> Sweeper
    where
        F: FnMut(Result<SweepReport, Error>) + Send + 'static,
        G: 'static,
    {
        let app = self.copy();
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let signal = stop.clone();
        let spawned = std::thread::Builder::new().name("tea-sweeper".into()).spawn(move || {
            let (stopped, wake) = &*signal;
            loop {
                on_report(app.sweep());
                let guard = stopped.lock().unwrap_or_else(PoisonError::into_inner);
                let (guard, _) =
                    wake.wait_timeout_while(guard, every, |stopped| !*stopped).unwrap_or_else(PoisonError::into_inner);
                if *guard {
                    return;
                }
            }
        });
        Sweeper { stop, thread: spawned.ok() }
    }

    /// Where the threads' own retention records are kept: the graph's name and `#retention`.
    fn retention_graph(&self) -> String {
        format!("{}{RETENTION_SUFFIX}", self.graph.name())
    }

    /// Every thread's own retention, and the records that did not read.
    #[allow(clippy::type_complexity)]
    fn thread_retentions(&self) -> Result<(BTreeMap<ThreadId, Retention>, Vec<(ThreadId, Error)>), Error> {
        let side = self.retention_graph();
        let store = &*self.checkpointer;
        let mut own = BTreeMap::new();
        let mut unreadable = Vec::new();
        for thread in trace::store_call("threads", &side, None, || store.threads(&side))? {
            let head = trace::store_call("head", &side, Some(&thread), || store.head(&side, &thread));
            match head.and_then(|head| head.map(|(id, bytes)| decode_retention(&thread, id, &bytes)).transpose()) {
                Ok(Some(retention)) => {
                    own.insert(thread, retention);
                }
                Ok(None) => {}
                Err(error) => unreadable.push((thread, error)),
            }
        }
        Ok((own, unreadable))
    }

    /// How `thread` rests at its head: the head, the rest (a thread a live run's lease holds
    /// is active) and since when (`None`: the thread has no checkpoint).
    fn standing_of(&self, thread: &ThreadId, now: u64) -> Result<Option<(CheckpointId, Rest, Option<u64>)>, Error> {
        let graph = self.graph.name();
        let Some((head, bytes)) = trace::store_call("head", graph, Some(thread), || {
            crate::store::fold::head(&*self.checkpointer, graph, thread)
        })?
        else {
            return Ok(None);
        };
        let standing = standing(&bytes, graph, thread, head)?;
        let rest = if standing.lease_until.is_some_and(|until| until > now) {
            Rest::Active
        } else if standing.done {
            Rest::Finished
        } else if standing.paused {
            Rest::Paused
        } else {
            Rest::Active
        };
        let since = standing.written_at.or(standing.paused_at.map(|s| s.saturating_mul(1000)));
        Ok(Some((head, rest, since)))
    }

    /// What `retention` does with `thread` now: expires it (deleting it if it has not moved on),
    /// or keeps it.
    fn judge(&self, thread: &ThreadId, retention: Retention, now: u64) -> Result<Judged, Error> {
        let Some((head, rest, since)) = self.standing_of(thread, now)? else { return Ok(Judged::Kept) };
        let Some(since) = since else { return Ok(Judged::Kept) };
        let idle = Duration::from_millis(now.saturating_sub(since));
        let ttl = match rest {
            Rest::Finished => retention.finished_ttl(),
            Rest::Paused => retention.paused_ttl(),
            Rest::Active => None,
        };
        if ttl.is_some_and(|ttl| idle >= ttl) {
            let graph = self.graph.name();
            let deleted =
                trace::store_call("delete", graph, Some(thread), || self.checkpointer.delete_at(graph, thread, head))?;
            if deleted {
                return Ok(Judged::Expired(ExpiredThread { thread: thread.clone(), rest, idle }));
            }
            return Ok(Judged::Kept);
        }
        if rest == Rest::Paused && retention.finished_ttl().is_some_and(|ttl| idle >= ttl) {
            return Ok(Judged::KeptPaused(KeptPaused {
                thread: thread.clone(),
                idle,
                because: kept_because(&retention),
            }));
        }
        Ok(Judged::Kept)
    }
}

/// What a sweep did with one thread.
enum Judged {
    Expired(ExpiredThread),
    KeptPaused(KeptPaused),
    Kept,
}

/// Why `retention` keeps a paused thread past the finished threads' time.
fn kept_because(retention: &Retention) -> KeptBecause {
    match retention.paused_ttl() {
        None => KeptBecause::PausedNotExpired,
        Some(ttl) => KeptBecause::NotIdleLongEnough { ttl },
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A thread's retention record (`id` of `thread`).
fn decode_retention(thread: &ThreadId, id: CheckpointId, bytes: &[u8]) -> Result<Retention, Error> {
    serde_json::from_slice(bytes).map_err(|e| Error::CorruptCheckpoint {
        thread: thread.clone(),
        checkpoint: id,
        reason: format!("its retention record does not decode: {e}"),
    })
}

/// A sweeper running on a thread of its own ([`App::sweep_every`]): dropping it (or
/// [`stop`](Self::stop)) stops it, waiting for a sweep under way to finish.
#[derive(Debug)]
pub struct Sweeper {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sweeper {
    /// Stops the sweeper; returns once it has stopped.
    pub fn stop(self) {
        drop(self);
    }

    /// Whether its thread is still sweeping (false if it could not start, or a report handler
    /// panicked).
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|thread| !thread.is_finished())
    }
}

impl Drop for Sweeper {
    fn drop(&mut self) {
        let (stopped, wake) = &*self.stop;
        *stopped.lock().unwrap_or_else(PoisonError::into_inner) = true;
        wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
