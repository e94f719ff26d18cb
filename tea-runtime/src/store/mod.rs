//! Checkpoint stores: the [`Checkpointer`] trait and the stores tea provides; and, on any of
//! them, [`Memory`], long-term memory across threads (`items.rs`).
//!
//! A store keeps, per graph and thread, a history of checkpoints (opaque bytes: the engine's
//! envelope, see `envelope`) numbered 1, 2, 3, … and a *head*, the newest. Every write is a
//! compare-and-swap on the head, which is what makes a `Resume` token single-use: of two resumes
//! of one token, exactly one moves the head.

use crate::error::Error;
use crate::name::ThreadId;

/// The async methods of a [`Checkpointer`] that writes and reads a local disk (`SledStore`,
/// `DirStore`): [`append_async`](Checkpointer::append_async) and
/// [`head_async`](Checkpointer::head_async) call the blocking [`append`](Checkpointer::append)
/// and [`head`](Checkpointer::head) through [`blocking`], so a durable write that waits on the
/// disk hands the runtime's thread over while it does, and return their result as a ready future.
/// Used inside an `impl Checkpointer for …` block; defined before the store modules so they see it.
macro_rules! disk_async_methods {
    () => {
        fn append_async<'a>(
            &'a self,
            graph: &'a str,
            thread: &'a $crate::name::ThreadId,
            expected: Option<$crate::store::CheckpointId>,
            id: $crate::store::CheckpointId,
            bytes: &'a [u8],
            durable: bool,
        ) -> $crate::store::StoreFuture<'a, $crate::store::AppendOutcome> {
            // A durable write waits on the disk: hand the runtime's thread over while it does.
            let written = $crate::store::blocking(|| self.append(graph, thread, expected, id, bytes, durable));
            Box::pin(std::future::ready(written))
        }

        fn head_async<'a>(
            &'a self,
            graph: &'a str,
            thread: &'a $crate::name::ThreadId,
        ) -> $crate::store::StoreFuture<'a, Option<($crate::store::CheckpointId, Vec<u8>)>> {
            Box::pin(std::future::ready($crate::store::blocking(|| self.head(graph, thread))))
        }
    };
}

mod dir;
pub(crate) mod fold;
pub(crate) mod items;
mod memory;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "encryption")]
mod sealed;
#[cfg(feature = "sled")]
mod sled;

#[cfg(feature = "postgres")]
pub use self::postgres::{PostgresStore, PostgresStoreBuilder};
#[cfg(feature = "encryption")]
pub use self::sealed::{KeyRing, KeyRingError, Sealed};
#[cfg(feature = "sled")]
pub use self::sled::SledStore;
pub use dir::DirStore;
pub use items::{Embedder, Item, Memory, SearchQuery};
pub use memory::MemoryStore;

/// Defined with the names and ids (`vocab`), which every layer reads.
pub use crate::name::CheckpointId;

/// What [`Checkpointer::append`] did: the checkpoint became the head, or the compare-and-swap
/// found another head and stored nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppendOutcome {
    /// The checkpoint was stored and is the thread's new head.
    Written,
    /// The head was not the expected one (another writer moved it); nothing was stored.
    Conflict {
        /// The head the store holds.
        head: Option<CheckpointId>,
    },
}

/// A store of checkpoints. Implement it to keep checkpoints somewhere tea does not provide.
///
/// Checkpoints are opaque bytes to a store; the engine checks their integrity itself. `graph` is
/// the graph's name: one store can hold the threads of many graphs, and a thread id only needs
/// to be unique within its graph.
///
/// # Contract
/// - [`append`](Self::append) is atomic: either the checkpoint is stored *and* becomes the head,
///   or nothing changes. It succeeds only if the current head equals `expected` (`None`: the
///   thread has no checkpoint yet), and `id` is always `expected + 1` (or 1).
/// - With `durable: true`, `append` returns only once the checkpoint survives a crash of the
///   process (flushed to disk, for a disk store). The engine asks for it before it hands out a
///   `Resume` token.
/// - Reads return what was appended, byte for byte, until [`delete`](Self::delete) or
///   [`prune`](Self::prune) removes it.
/// - [`prune`](Self::prune) never removes the head, so a thread keeps its place; after
///   [`delete`](Self::delete) the thread has no checkpoint and starts again from id 1.
/// - Errors of the backing store are [`Error::Store`].
///
/// A store is `'static` (it owns its handles): an app shares it with the child graphs of its
/// subgraph nodes.
pub trait Checkpointer: Send + Sync + 'static {
    /// Stores checkpoint `id` of `thread` and makes it the head, if the head is `expected`.
    fn append(
        &self,
        graph: &str,
        thread: &ThreadId,
        expected: Option<CheckpointId>,
        id: CheckpointId,
        bytes: &[u8],
        durable: bool,
    ) -> Result<AppendOutcome, Error>;

    /// The head of `thread` and its bytes, or `None` if the thread has no checkpoint.
    fn head(&self, graph: &str, thread: &ThreadId) -> Result<Option<(CheckpointId, Vec<u8>)>, Error>;

    /// Checkpoint `id` of `thread`, if stored.
    fn get(&self, graph: &str, thread: &ThreadId, id: CheckpointId) -> Result<Option<Vec<u8>>, Error>;

    /// Every checkpoint of `thread`, newest first.
    fn history(&self, graph: &str, thread: &ThreadId) -> Result<Vec<(CheckpointId, Vec<u8>)>, Error>;

    /// The threads of `graph` that have at least one checkpoint, sorted by id (empty for a graph
    /// the store has never seen).
    fn threads(&self, graph: &str) -> Result<Vec<ThreadId>, Error>;

    /// Deletes every checkpoint of `thread` (its head too). `Ok(false)` if it had none.
    fn delete(&self, graph: &str, thread: &ThreadId) -> Result<bool, Error>;

    /// Deletes the oldest checkpoints of `thread`, keeping the newest `keep_last` (at least the
    /// head is always kept, so `keep_last == 0` is treated as 1). Returns how many were deleted.
    fn prune(&self, graph: &str, thread: &ThreadId, keep_last: usize) -> Result<usize, Error>;

    /// The stored checkpoints of `thread` with ids `from` to `to` (both included), oldest
    /// first: what reading a delta record needs (the records back to the full record it folds
    /// from, see `format::delta`). The default calls [`get`](Self::get) for each id, which is
    /// correct for any store; tea's stores override it with one read.
    fn range(
        &self,
        graph: &str,
        thread: &ThreadId,
        from: CheckpointId,
        to: CheckpointId,
    ) -> Result<Vec<(CheckpointId, Vec<u8>)>, Error> {
        let mut found = Vec::new();
        for id in from..=to {
            if let Some(bytes) = self.get(graph, thread, id)? {
                found.push((id, bytes));
            }
        }
        Ok(found)
    }

    /// [`append`](Self::append) for the async driver (`App::invoke_async` and its kin): the
    /// returned future must not block the runtime's thread for long. The default calls
    /// `append`, which suits a store whose writes do not wait (such as [`MemoryStore`]); a store
    /// that waits on a disk or a network overrides it (tea's own stores do).
    #[allow(clippy::too_many_arguments)]
    fn append_async<'a>(
        &'a self,
        graph: &'a str,
        thread: &'a ThreadId,
        expected: Option<CheckpointId>,
        id: CheckpointId,
        bytes: &'a [u8],
        durable: bool,
    ) -> StoreFuture<'a, AppendOutcome> {
        Box::pin(std::future::ready(self.append(graph, thread, expected, id, bytes, durable)))
    }

    /// [`head`](Self::head) for the async driver; see [`append_async`](Self::append_async).
    fn head_async<'a>(
        &'a self,
        graph: &'a str,
        thread: &'a ThreadId,
    ) -> StoreFuture<'a, Option<(CheckpointId, Vec<u8>)>> {
        Box::pin(std::future::ready(self.head(graph, thread)))
    }

    // -----------------------------------------------------------------------------------------
    // A resume without a read: all three defaulted, so a store written before them reads the head.

    /// Stores checkpoint `id` of `thread` and makes it the head, if the head is checkpoint
    /// `head` holding exactly `head_bytes`: [`append`](Self::append) whose compare-and-swap
    /// compares the head's bytes too, so that a thread deleted and started again, whose head
    /// came back to the same id, does not pass for the one whose bytes the writer holds.
    ///
    /// A resume of a pause its app wrote itself, on a store that
    /// [`resumes_without_read`](Self::resumes_without_read), claims the thread with it instead of
    /// reading the head first. The default reads the head, compares, and appends: two calls,
    /// as a resume that reads the head makes (the append's compare-and-swap on `head` still
    /// refuses any write that moved the head between them).
    #[allow(clippy::too_many_arguments)]
    fn append_over(
        &self,
        graph: &str,
        thread: &ThreadId,
        head: CheckpointId,
        head_bytes: &[u8],
        id: CheckpointId,
        bytes: &[u8],
        durable: bool,
    ) -> Result<AppendOutcome, Error> {
        match self.head(graph, thread)? {
            Some((found, stored)) if found == head && stored == head_bytes => {
                self.append(graph, thread, Some(head), id, bytes, durable)
            }
            found => Ok(AppendOutcome::Conflict { head: found.map(|(found, _)| found) }),
        }
    }

    /// [`append_over`](Self::append_over) for the async driver; see
    /// [`append_async`](Self::append_async). The default calls `append_over`.
    #[allow(clippy::too_many_arguments)]
    fn append_over_async<'a>(
        &'a self,
        graph: &'a str,
        thread: &'a ThreadId,
        head: CheckpointId,
        head_bytes: &'a [u8],
        id: CheckpointId,
        bytes: &'a [u8],
        durable: bool,
    ) -> StoreFuture<'a, AppendOutcome> {
        Box::pin(std::future::ready(self.append_over(graph, thread, head, head_bytes, id, bytes, durable)))
    }

    /// Whether an app resuming a pause it wrote itself skips reading the thread's head and
    /// claims it with [`append_over`](Self::append_over) (the pause's bytes, kept by the app,
    /// compared in the claim's compare-and-swap): worth it where a read is a round trip to a
    /// server, as on `PostgresStore`, which says `true`. `false` (the default): every resume
    /// reads the head first.
    fn resumes_without_read(&self) -> bool {
        false
    }

    // -----------------------------------------------------------------------------------------
    // Retention (`App::sweep`): both defaulted, so a store written before them stays correct.

    /// Deletes every checkpoint of `thread` if its head is still `head` (a sweep expiring a
    /// thread it found finished or paused there): `Ok(false)`, deleting nothing, if the thread
    /// moved on meanwhile or has no checkpoint.
    ///
    /// The default reads the head and then calls [`delete`](Self::delete), which a write landing
    /// between the two would escape; tea's stores do both under one lock or in one statement.
    fn delete_at(&self, graph: &str, thread: &ThreadId, head: CheckpointId) -> Result<bool, Error> {
        match self.head(graph, thread)? {
            Some((id, _)) if id == head => self.delete(graph, thread),
            _ => Ok(false),
        }
    }

    /// The store's own bookkeeping for retention, if it keeps one ([`RestMarks`]): then a sweep
    /// reads only the heads written since the last sweep and expires threads in bulk (one
    /// statement on `PostgresStore`). `None` (the default): a sweep reads every head.
    fn rest_marks(&self) -> Option<&dyn RestMarks> {
        None
    }
}

/// How a thread rests at its head, as a sweep read it ([`RestMark`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rest {
    /// The run reached `end`.
    Finished,
    /// The thread waits on pauses.
    Paused,
    /// Neither: a run owns it, or it stopped part-way (`recover` continues it). Never expired.
    Active,
}

impl Rest {
    /// `finished`, `paused` or `active`: how [`RestMarks`] stores write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Rest::Finished => "finished",
            Rest::Paused => "paused",
            Rest::Active => "active",
        }
    }

    /// The rest [`as_str`](Self::as_str) wrote.
    pub fn parse(text: &str) -> Option<Rest> {
        match text {
            "finished" => Some(Rest::Finished),
            "paused" => Some(Rest::Paused),
            "active" => Some(Rest::Active),
            _ => None,
        }
    }
}

/// A thread's rest at head `head`, since `since_ms` (milliseconds since the Unix epoch, by the
/// app's [`Clock`](crate::Clock): when its head was written).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestMark {
    /// The thread.
    pub thread: ThreadId,
    /// The head the mark was read from: a mark counts only while the head is still this one.
    pub head: CheckpointId,
    /// How the thread rests there.
    pub rest: Rest,
    /// Since when (`None`: the checkpoint records no time; such a thread is never expired).
    pub since_ms: Option<u64>,
}

/// What [`RestMarks::expire`] deletes: the threads marked, at their current head, finished
/// since `finished_before` or earlier, or paused since `paused_before` or earlier (milliseconds
/// since the Unix epoch; `None`: none of that kind), but none of `except` (threads with
/// retention of their own, which the sweep judges itself).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Expiry {
    /// Finished threads marked before this expire.
    pub finished_before: Option<u64>,
    /// Paused threads marked before this expire.
    pub paused_before: Option<u64>,
    /// Threads left out.
    pub except: Vec<ThreadId>,
}

/// What [`RestMarks::expire`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Expired {
    /// The threads deleted, each with its mark.
    pub expired: Vec<RestMark>,
    /// The paused threads (not in `except`) marked at `finished_before` or earlier, and kept:
    /// what a sweep reports as paused threads it did not expire.
    pub kept_paused: Vec<RestMark>,
}

/// A store's bookkeeping of how each thread rests (finished, paused, active) and since when,
/// kept beside its checkpoints so that a sweep expires threads without reading them: the engine
/// reads a thread's head once after it changes and marks it; the store expires marked threads
/// in bulk. `PostgresStore` keeps them as columns of its threads' table (a mark is a status
/// and a time in clear, also under `Sealed`, which forwards to the store it seals).
pub trait RestMarks: Send + Sync {
    /// The threads of `graph` whose head has no mark for it (new or written since).
    fn unmarked(&self, graph: &str) -> Result<Vec<ThreadId>, Error>;

    /// Records `marks`; a mark whose head is no longer the thread's is dropped.
    fn mark(&self, graph: &str, marks: &[RestMark]) -> Result<(), Error>;

    /// Deletes, atomically per thread, every thread of `graph` that `expiry` names whose mark is
    /// for its current head, with its checkpoints.
    fn expire(&self, graph: &str, expiry: &Expiry) -> Result<Expired, Error>;
}

/// What the async methods of a [`Checkpointer`] return: a boxed `Send` future of the result.
pub type StoreFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, Error>> + Send + 'a>>;

/// Runs `work`, which blocks on a disk, from async code: on a multi-threaded tokio runtime the
/// thread is handed over first (`block_in_place`), so the runtime's other tasks move on; on a
/// single-threaded one, or outside tokio, it runs as it is.
#[allow(dead_code)]
pub(crate) fn blocking<T>(work: impl FnOnce() -> T) -> T {
    #[cfg(feature = "tokio")]
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread {
            return tokio::task::block_in_place(work);
        }
    }
    work()
}

impl<C: Checkpointer + ?Sized> Checkpointer for std::sync::Arc<C> {
    fn append(
        &self,
        graph: &str,
        thread: &ThreadId,
        expected: Option<CheckpointId>,
        id: CheckpointId,
        bytes: &[u8],
        durable: bool,
    ) -> Result<AppendOutcome, Error> {
        (**self).append(graph, thread, expected, id, bytes, durable)
    }

    fn head(&self, graph: &str, thread: &ThreadId) -> Result<Option<(CheckpointId, Vec<u8>)>, Error> {
        (**self).head(graph, thread)
    }

    fn get(&self, graph: &str, thread: &ThreadId, id: CheckpointId) -> Result<Option<Vec<u8>>, Error> {
        (**self).get(graph, thread, id)
    }

    fn history(&self, graph: &str, thread: &ThreadId) -> Result<Vec<(CheckpointId, Vec<u8>)>, Error> {
        (**self).history(graph, thread)
    }

    fn range(
        &self,
        graph: &str,
        thread: &ThreadId,
        from: CheckpointId,
        to: CheckpointId,
    ) -> Result<Vec<(CheckpointId, Vec<u8>)>, Error> {
        (**self).range(graph, thread, from, to)
    }

    fn threads(&self, graph: &str) -> Result<Vec<ThreadId>, Error> {
        (**self).threads(graph)
    }

    fn delete(&self, graph: &str, thread: &ThreadId) -> Result<bool, Error> {
        (**self).delete(graph, thread)
    }

    fn prune(&self, graph: &str, thread: &ThreadId, keep_last: usize) -> Result<usize, Error> {
        (**self).prune(graph, thread, keep_last)
    }

    fn append_async<'a>(
        &'a self,
        graph: &'a str,
        thread: &'a ThreadId,
        expected: Option<CheckpointId>,
        id: CheckpointId,
        bytes: &'a [u8],
        durable: bool,
    ) -> StoreFuture<'a, AppendOutcome> {
        (**self).append_async(graph, thread, expected, id, bytes, durable)
    }

    fn head_async<'a>(
        &'a self,
        graph: &'a str,
        thread: &'a ThreadId,
    ) -> StoreFuture<'a, Option<(CheckpointId, Vec<u8>)>> {
        (**self).head_async(graph, thread)
    }
    fn append_over(
        &self,
        graph: &str,
        thread: &ThreadId,
        head: CheckpointId,
        head_bytes: &[u8],
        id: CheckpointId,
        bytes: &[u8],
        durable: bool,
    ) -> Result<AppendOutcome, Error> {
        (**self).append_over(graph, thread, head, head_bytes, id, bytes, durable)
    }

    fn append_over_async<'a>(
        &'a self,
        graph: &'a str,
        thread: &'a ThreadId,
        head: CheckpointId,
        head_bytes: &'a [u8],
        id: CheckpointId,
        bytes: &'a [u8],
        durable: bool,
    ) -> StoreFuture<'a, AppendOutcome> {
        (**self).append_over_async(graph, thread, head, head_bytes, id, bytes, durable)
    }

    fn resumes_without_read(&self) -> bool {
        (**self).resumes_without_read()
    }

    fn delete_at(&self, graph: &str, thread: &ThreadId, head: CheckpointId) -> Result<bool, Error> {
        (**self).delete_at(graph, thread, head)
    }

    fn rest_marks(&self) -> Option<&dyn RestMarks> {
        (**self).rest_marks()
    }
}
