//! `SledStore`: checkpoints in an embedded [sled](https://docs.rs/sled/0.34) database on disk.
//!
//! # Key layout
//!
//! Each graph has its own sled tree, named `tea/v2/graph/` followed by the graph's name (UTF-8).
//! In that tree every record of a thread starts with the thread's *prefix*: the length of the
//! thread id in bytes as a big-endian `u64`, then the id's UTF-8 bytes. The length comes first so
//! that no thread's prefix is the start of another's: the records of `"a"` and `"ab"` never mix.
//! One tag byte follows the prefix:
//!
//! | key                                        | value                                           |
//! |--------------------------------------------|-------------------------------------------------|
//! | prefix, `0x00`                             | the head: its id as a big-endian `u64` (never 0), then its bytes |
//! | prefix, `0x01`, the id as big-endian `u64` | an older checkpoint `id`: the bytes given to `append`, unchanged |
//!
//! The head record carries the newest checkpoint itself; a checkpoint gets its own record when a
//! newer one replaces it as the head. Big-endian ids sort like the numbers they encode, so a
//! thread's older checkpoints lie side by side in id order and its history is the head plus one
//! prefix scan, read backwards. Records of ids at or past the head (left by an append that lost
//! its race, or cut short by a crash) are never read.
//!
//! Layout 1 (tea before this layout: trees named `tea/graph/…`, the head record holding only an
//! id) is not read: `SledStore::open` refuses such a database with an error saying so.
//!
//! # Atomicity, crashes and flushes
//!
//! `append` reads the head record; if it holds the expected head, it writes that checkpoint's
//! record (the same bytes whoever writes them) and then moves the head with one
//! `compare_and_swap` from the record it read to the new one. Of several writers expecting the
//! same head exactly one swap succeeds; the others report a conflict and changed nothing that
//! anyone reads. A durable append then calls sled's `flush()` once: one flush per durable write
//! (no transaction, whose commit costs more). sled recovers a prefix of its log, so after a crash
//! the head is one that was written whole, and every older checkpoint's record was logged
//! before the head moved past it.
//!
//! `delete` and `prune` apply one sled batch (atomic on recovery), while holding an in-process
//! lock that keeps appends and reads out (sled opens a database in one process at a time).

use super::{AppendOutcome, CheckpointId, Checkpointer};
use crate::error::Error;
use crate::name::ThreadId;
use ::sled::{Batch, CompareAndSwapError, IVec};
use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// The start of each graph's tree name; the graph's name follows.
const TREE_PREFIX: &[u8] = b"tea/v2/graph/";
/// The tree names of layout 1, which this store does not read.
const LAYOUT_1_PREFIX: &[u8] = b"tea/graph/";
/// The tag after a thread's prefix that marks its head record.
const HEAD_TAG: u8 = 0x00;
/// The tag after a thread's prefix that marks one of its older checkpoints.
const CHECKPOINT_TAG: u8 = 0x01;
/// Bytes in an encoded checkpoint id.
const ID_LEN: usize = 8;

/// Checkpoints in an embedded [sled](https://docs.rs/sled/0.34) database: they survive a restart
/// of the process, and an `append` with `durable: true` survives a crash.
///
/// The handle is cheap to clone, and every clone works on the same database. A database
/// directory can be open in one process at a time (sled locks it: a second `open`, here or in
/// another process, fails with sled's "could not acquire lock"); open it once and share the
/// handle.
///
/// # On disk
/// Each graph has a sled tree named `tea/v2/graph/<graph name>`. In it each thread has a head
/// record (the newest checkpoint's id and bytes) and a record per older checkpoint, keyed by the
/// thread id (prefixed with its length) and the checkpoint id as a big-endian `u64`, so they sort
/// by id. `append` moves the head with one compare-and-swap, and a durable `append` flushes
/// sled's log once ([`flushes`](Self::flushes) counts them). Databases written by tea's first
/// layout (trees `tea/graph/…`) are refused by [`open`](Self::open).
///
/// # Damaged files
/// sled checks its log with checksums when it opens a database, and its recovery keeps the log
/// up to the first damaged record and silently drops everything after it. So a damaged database
/// may open without an error and read as an *older* state: recent checkpoints (durable ones too),
/// or whole threads, may be gone rather than reported (`tea-runtime/tests/store_contract.rs`
/// damages a log and shows it). Damage inside a record this store reads (a head record too
/// short to hold an id, a key that does not follow the layout) is an [`Error::Store`]; damaged
/// checkpoint bytes fail the engine's checks as [`Error::CorruptCheckpoint`].
///
/// ```
/// use tea::{AppendOutcome, Checkpointer, SledStore, ThreadId};
///
/// # let dir = std::env::temp_dir().join(format!("tea-sled-doc-{}", std::process::id()));
/// let store = SledStore::open(dir.join("checkpoints"))?;
/// let thread = ThreadId::from("order-1234");
///
/// let first = store.append("orders", &thread, None, 1, b"first", true)?;
/// assert_eq!(first, AppendOutcome::Written);
/// assert_eq!(store.flushes(), 1, "one flush per durable append");
/// // A writer that still expects an empty thread loses, and nothing changes:
/// let late = store.append("orders", &thread, None, 1, b"other", true)?;
/// assert_eq!(late, AppendOutcome::Conflict { head: Some(1) });
/// assert_eq!(store.head("orders", &thread)?, Some((1, b"first".to_vec())));
/// # drop(store);
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), tea::Error>(())
/// ```
#[derive(Clone)]
pub struct SledStore {
    db: ::sled::Db,
    /// Held shared by reads and appends (which the head's compare-and-swap orders among
    /// themselves) and exclusively by `delete` and `prune`, so no read sees a thread half removed
    /// or checkpoints of two lives of one thread id. In memory only: sled lets one process at a
    /// time open a database.
    removal: Arc<RwLock<()>>,
    /// Calls of sled's `flush()`, over every clone of the handle.
    flushes: Arc<AtomicU64>,
    /// Where the database lives, for `Debug`; `None` for a database opened elsewhere (tests).
    path: Option<Arc<Path>>,
}

impl SledStore {
    /// Opens the database in directory `path`, creating it if needed.
    ///
    /// # Errors
    /// [`Error::Store`], with sled's error as its source and in its message, if the database
    /// cannot be opened: the path is a file or cannot be created, the database is open in another
    /// process (or through another `SledStore::open` of the same path in this one: "could not
    /// acquire lock"), its files are damaged beyond sled's recovery, or it holds checkpoints in
    /// tea's first layout.
    ///
    /// ```
    /// use tea::{Error, SledStore};
    ///
    /// # let dir = std::env::temp_dir().join(format!("tea-sled-open-doc-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir).unwrap();
    /// let file = dir.join("not-a-directory");
    /// std::fs::write(&file, b"")?;
    /// assert!(matches!(SledStore::open(&file), Err(Error::Store { .. })));
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// A store of the same path dropped a moment ago in this process may still be closing
    /// (sled's background threads finish their writes first): `open` waits up to
    /// [`OPEN_WAIT`](Self::OPEN_WAIT) for its lock before it fails.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let started = std::time::Instant::now();
        let db = loop {
            match ::sled::open(path) {
                Ok(db) => break db,
                Err(error) if is_locked(&error) && started.elapsed() < Self::OPEN_WAIT => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Err(error) => return Err(Error::store(error)),
            }
        };
        if db.tree_names().iter().any(|name| name.starts_with(LAYOUT_1_PREFIX)) {
            return Err(Error::store(Fault::Layout1 { path: path.display().to_string() }));
        }
        Ok(Self::with_db(db, Some(path.into())))
    }

    /// How long [`open`](Self::open) waits for a database whose lock is held (a store of the
    /// same path being closed in this process, or open in another) before it fails.
    pub const OPEN_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

    fn with_db(db: ::sled::Db, path: Option<Arc<Path>>) -> Self {
        SledStore { db, removal: Arc::default(), flushes: Arc::default(), path }
    }

    /// A store over a database opened elsewhere, such as a temporary one in tests.
    #[cfg(test)]
    fn from_db(db: ::sled::Db) -> Self {
        Self::with_db(db, None)
    }

    /// How many times this store (all clones of the handle) flushed sled's log to disk since it
    /// was opened: once per durable `append` that wrote, never for the others. For measuring the
    /// cost of durability. (sled also flushes by itself in the background, every 500 ms by
    /// default; those are not counted.)
    pub fn flushes(&self) -> u64 {
        self.flushes.load(Ordering::Relaxed)
    }

    fn shared(&self) -> RwLockReadGuard<'_, ()> {
        // The lock guards no data, so a panic while it was held left nothing inconsistent.
        self.removal.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn exclusive(&self) -> RwLockWriteGuard<'_, ()> {
        self.removal.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Deletes `thread` in one batch, with no append under way, if its head is `head` (any
    /// head: `None`).
    fn delete_if(&self, graph: &str, thread: &ThreadId, head: Option<CheckpointId>) -> Result<bool, Error> {
        let _exclusive = self.exclusive();
        let tree = self.tree(graph)?;
        let head_key = head_key(thread);
        let Some(_) = tree.get(&head_key).map_err(Error::store)? else {
            return Ok(false);
        };
        if let Some(head) = head {
            if self.read_head(&tree, graph, thread)?.map(|(id, _)| id) != Some(head) {
                return Ok(false);
            }
        }
        // Every record of the thread, including any at or past the head, in one atomic batch.
        let mut batch = Batch::default();
        batch.remove(head_key);
        for key in tree.scan_prefix(checkpoints_prefix(thread)).keys() {
            batch.remove(key.map_err(Error::store)?);
        }
        tree.apply_batch(batch).map_err(Error::store)?;
        Ok(true)
    }

    /// The tree holding the threads of `graph`; sled creates it on first use.
    fn tree(&self, graph: &str) -> Result<::sled::Tree, Error> {
        let mut name = Vec::with_capacity(TREE_PREFIX.len() + graph.len());
        name.extend_from_slice(TREE_PREFIX);
        name.extend_from_slice(graph.as_bytes());
        self.db.open_tree(name).map_err(Error::store)
    }
}

/// The first bytes of every key of `thread`, followed by `tag`, with room for `extra` more bytes.
/// Whether sled refused to open a database because its lock is held (sled reports it only as
/// an I/O error whose message says so, over the OS's `WouldBlock`).
fn is_locked(error: &::sled::Error) -> bool {
    match error {
        ::sled::Error::Io(io) => {
            io.kind() == std::io::ErrorKind::WouldBlock || io.to_string().contains("could not acquire lock")
        }
        _ => false,
    }
}

fn thread_key(thread: &ThreadId, tag: u8, extra: usize) -> Vec<u8> {
    let id = thread.as_str().as_bytes();
    let mut key = Vec::with_capacity(ID_LEN + id.len() + 1 + extra);
    key.extend_from_slice(&(id.len() as u64).to_be_bytes());
    key.extend_from_slice(id);
    key.push(tag);
    key
}

/// The key of `thread`'s head record.
fn head_key(thread: &ThreadId) -> Vec<u8> {
    thread_key(thread, HEAD_TAG, 0)
}

/// The prefix shared by the keys of all of `thread`'s older checkpoints.
fn checkpoints_prefix(thread: &ThreadId) -> Vec<u8> {
    thread_key(thread, CHECKPOINT_TAG, ID_LEN)
}

/// The key of checkpoint `id` of `thread`.
fn checkpoint_key(thread: &ThreadId, id: CheckpointId) -> Vec<u8> {
    let mut key = checkpoints_prefix(thread);
    key.extend_from_slice(&id.to_be_bytes());
    key
}

/// Decodes an 8-byte big-endian id; `None` for any other length.
fn decode_id(bytes: &[u8]) -> Option<CheckpointId> {
    <[u8; ID_LEN]>::try_from(bytes).ok().map(CheckpointId::from_be_bytes)
}

/// A head record: the id (8 bytes, big-endian, never 0), then the checkpoint's bytes.
fn head_record(id: CheckpointId, bytes: &[u8]) -> Vec<u8> {
    let mut record = Vec::with_capacity(ID_LEN + bytes.len());
    record.extend_from_slice(&id.to_be_bytes());
    record.extend_from_slice(bytes);
    record
}

/// Splits a head record into its id and the checkpoint's bytes.
fn decode_head<'r>(graph: &str, thread: &ThreadId, record: &'r [u8]) -> Result<(CheckpointId, &'r [u8]), Fault> {
    let fault = || Fault::Head { graph: graph.to_owned(), thread: thread.clone(), len: record.len() };
    let (id, bytes) = record.split_at_checked(ID_LEN).ok_or_else(fault)?;
    let id = decode_id(id).filter(|&id| id != 0).ok_or_else(fault)?;
    Ok((id, bytes))
}

/// What a `SledStore` found wrong, reported as the source of an [`Error::Store`].
#[derive(Debug, thiserror::Error)]
enum Fault {
    #[error("the head record of thread `{thread}` of graph `{graph}` is corrupt: {len} bytes where a checkpoint id (8 bytes, not 0) and the checkpoint belong")]
    Head { graph: String, thread: ThreadId, len: usize },
    #[error("a checkpoint key of thread `{thread}` of graph `{graph}` does not end in an 8-byte checkpoint id")]
    Key { graph: String, thread: ThreadId },
    #[error("a key in the tree of graph `{graph}` does not follow the layout (a thread id's length and UTF-8 bytes, then tag 0x00 or 0x01)")]
    Unreadable { graph: String },
    #[error("checkpoint {id} cannot follow head {}: the next checkpoint is the head + 1 (1 for an empty thread)", match expected { Some(head) => head.to_string(), None => String::from("none") })]
    OutOfSequence { expected: Option<CheckpointId>, id: CheckpointId },
    #[error("the database at `{path}` holds checkpoints in the layout of an earlier tea (trees `tea/graph/…`), which this version does not read; move it aside and start a new one")]
    Layout1 { path: String },
}

impl SledStore {
    /// The head record of `thread` and the id in it.
    fn read_head(
        &self,
        tree: &::sled::Tree,
        graph: &str,
        thread: &ThreadId,
    ) -> Result<Option<(CheckpointId, IVec)>, Error> {
        let Some(record) = tree.get(head_key(thread)).map_err(Error::store)? else {
            return Ok(None);
        };
        let (id, _) = decode_head(graph, thread, &record).map_err(Error::store)?;
        Ok(Some((id, record)))
    }

    /// The older checkpoints of `thread` below `below`, newest first, with their keys.
    fn older(
        &self,
        tree: &::sled::Tree,
        graph: &str,
        thread: &ThreadId,
        below: CheckpointId,
    ) -> Result<Vec<(IVec, CheckpointId, IVec)>, Error> {
        let prefix = checkpoints_prefix(thread);
        let mut start = prefix.clone();
        start.extend_from_slice(&0u64.to_be_bytes());
        tree.range(start..checkpoint_key(thread, below))
            .rev()
            .map(|entry| {
                let (key, bytes) = entry.map_err(Error::store)?;
                let id = key
                    .get(prefix.len()..)
                    .and_then(decode_id)
                    .ok_or_else(|| Error::store(Fault::Key { graph: graph.to_owned(), thread: thread.clone() }))?;
                Ok((key, id, bytes))
            })
            .collect()
    }
}

impl Checkpointer for SledStore {
    fn append(
        &self,
        graph: &str,
        thread: &ThreadId,
        expected: Option<CheckpointId>,
        id: CheckpointId,
        bytes: &[u8],
        durable: bool,
    ) -> Result<AppendOutcome, Error> {
        // Keys sort by id, so an id out of sequence would break the order `history` relies on.
        if expected.map_or(Some(1), |head| head.checked_add(1)) != Some(id) {
            return Err(Error::store(Fault::OutOfSequence { expected, id }));
        }
        let _shared = self.shared();
        let tree = self.tree(graph)?;
        let head_key = head_key(thread);
        let current = self.read_head(&tree, graph, thread)?;
        let head = current.as_ref().map(|(head, _)| *head);
        if head != expected {
            return Ok(AppendOutcome::Conflict { head });
        }
        if let Some((head, record)) = &current {
            // The head is about to be replaced: its checkpoint gets a record of its own first.
            // Every writer that read this head writes the same bytes here, so losers harm nothing.
            let older = record.subslice(ID_LEN, record.len() - ID_LEN);
            tree.insert(checkpoint_key(thread, *head), older).map_err(Error::store)?;
        }
        let swapped = tree
            .compare_and_swap(&head_key, current.map(|(_, record)| record), Some(head_record(id, bytes)))
            .map_err(Error::store)?;
        match swapped {
            Ok(()) => {
                if durable {
                    self.db.flush().map_err(Error::store)?;
                    self.flushes.fetch_add(1, Ordering::Relaxed);
                }
                Ok(AppendOutcome::Written)
            }
            Err(CompareAndSwapError { current, .. }) => {
                let head = match current {
                    Some(record) => Some(decode_head(graph, thread, &record).map_err(Error::store)?.0),
                    None => None,
                };
                Ok(AppendOutcome::Conflict { head })
            }
        }
    }

    fn head(&self, graph: &str, thread: &ThreadId) -> Result<Option<(CheckpointId, Vec<u8>)>, Error> {
        let _shared = self.shared();
        let tree = self.tree(graph)?;
        let Some((id, record)) = self.read_head(&tree, graph, thread)? else {
            return Ok(None);
        };
        Ok(Some((id, record[ID_LEN..].to_vec())))
    }

    fn get(&self, graph: &str, thread: &ThreadId, id: CheckpointId) -> Result<Option<Vec<u8>>, Error> {
        let _shared = self.shared();
        let tree = self.tree(graph)?;
        let Some((head, record)) = self.read_head(&tree, graph, thread)? else {
            return Ok(None);
        };
        if id == head {
            return Ok(Some(record[ID_LEN..].to_vec()));
        }
        if id > head {
            return Ok(None);
        }
        // Below the head: its record was written before the head moved past it.
        let bytes = tree.get(checkpoint_key(thread, id)).map_err(Error::store)?;
        Ok(bytes.map(|bytes| bytes.to_vec()))
    }

    fn history(&self, graph: &str, thread: &ThreadId) -> Result<Vec<(CheckpointId, Vec<u8>)>, Error> {
        let _shared = self.shared();
        let tree = self.tree(graph)?;
        let Some((head, record)) = self.read_head(&tree, graph, thread)? else {
            return Ok(Vec::new());
        };
        let mut history = vec![(head, record[ID_LEN..].to_vec())];
        for (_, id, bytes) in self.older(&tree, graph, thread, head)? {
            history.push((id, bytes.to_vec()));
        }
        Ok(history)
    }

    fn range(
        &self,
        graph: &str,
        thread: &ThreadId,
        from: CheckpointId,
        to: CheckpointId,
    ) -> Result<Vec<(CheckpointId, Vec<u8>)>, Error> {
        let _shared = self.shared();
        let tree = self.tree(graph)?;
        let Some((head, record)) = self.read_head(&tree, graph, thread)? else {
            return Ok(Vec::new());
        };
        let mut found = Vec::new();
        // Below the head: records written before the head moved past them, in one scan.
        let below = to.min(head.saturating_sub(1));
        if from <= below {
            let prefix = checkpoints_prefix(thread);
            for entry in tree.range(checkpoint_key(thread, from)..=checkpoint_key(thread, below)) {
                let (key, bytes) = entry.map_err(Error::store)?;
                let id = key
                    .get(prefix.len()..)
                    .and_then(decode_id)
                    .ok_or_else(|| Error::store(Fault::Key { graph: graph.to_owned(), thread: thread.clone() }))?;
                found.push((id, bytes.to_vec()));
            }
        }
        if (from..=to).contains(&head) {
            found.push((head, record[ID_LEN..].to_vec()));
        }
        Ok(found)
    }

    fn threads(&self, graph: &str) -> Result<Vec<ThreadId>, Error> {
        let tree = self.tree(graph)?;
        let unreadable = || Error::store(Fault::Unreadable { graph: graph.to_owned() });
        let mut threads = Vec::new();
        // One seek per thread: its head record, if it has one, is its first (tag 0x00), and its
        // other records are skipped by seeking past its prefix's tags.
        let mut from = Vec::new();
        while let Some(key) = tree.range(from.as_slice()..).keys().next() {
            let key = key.map_err(Error::store)?;
            let (thread, rest) = split_key(&key).ok_or_else(unreadable)?;
            let thread = ThreadId::from(thread);
            match rest.first() {
                Some(&HEAD_TAG) if rest.len() == 1 => threads.push(thread.clone()),
                Some(&CHECKPOINT_TAG) => {}
                _ => return Err(unreadable()),
            }
            from = thread_key(&thread, CHECKPOINT_TAG + 1, 0);
        }
        // Keys sort by the id's length first.
        threads.sort_unstable();
        Ok(threads)
    }

    fn delete(&self, graph: &str, thread: &ThreadId) -> Result<bool, Error> {
        self.delete_if(graph, thread, None)
    }

    fn delete_at(&self, graph: &str, thread: &ThreadId, head: CheckpointId) -> Result<bool, Error> {
        self.delete_if(graph, thread, Some(head))
    }

    fn prune(&self, graph: &str, thread: &ThreadId, keep_last: usize) -> Result<usize, Error> {
        let _exclusive = self.exclusive();
        let tree = self.tree(graph)?;
        let Some((head, _)) = self.read_head(&tree, graph, thread)? else {
            return Ok(0);
        };
        let keep = CheckpointId::try_from(keep_last.max(1)).unwrap_or(CheckpointId::MAX);
        let Some(last_gone) = head.checked_sub(keep).filter(|&id| id > 0) else {
            return Ok(0);
        };
        let gone = self.older(&tree, graph, thread, last_gone + 1)?;
        let mut batch = Batch::default();
        for (key, _, _) in &gone {
            batch.remove(key.clone());
        }
        tree.apply_batch(batch).map_err(Error::store)?;
        Ok(gone.len())
    }

    disk_async_methods!();
}

/// Splits a record's key into the thread id and what follows it (the tag and, for a
/// checkpoint, its id); `None` for a key that does not follow the layout.
fn split_key(key: &[u8]) -> Option<(&str, &[u8])> {
    let len = usize::try_from(decode_id(key.get(..ID_LEN)?)?).ok()?;
    let id = key.get(ID_LEN..ID_LEN.checked_add(len)?)?;
    let rest = &key[ID_LEN + len..];
    Some((std::str::from_utf8(id).ok()?, rest))
}

impl fmt::Debug for SledStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not sled's own `Debug`, which prints the database's pages.
        f.debug_struct("SledStore").field("path", &self.path).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_reopens_right_after_it_is_dropped() {
        let dir = std::env::temp_dir().join(format!("tea-sled-reopen-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let thread = ThreadId::from("t");
        for id in 1..=20u64 {
            let store = SledStore::open(&dir).expect("the previous store released its lock");
            let head = store.head("g", &thread).unwrap().map(|(id, _)| id);
            assert_eq!(head, (id > 1).then(|| id - 1), "every earlier write is there");
            store.append("g", &thread, head, id, b"{}", true).unwrap();
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_store_open_elsewhere_is_refused_after_the_wait() {
        let dir = std::env::temp_dir().join(format!("tea-sled-locked-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let held = SledStore::open(&dir).unwrap();
        let started = std::time::Instant::now();
        let message = store_error_message(SledStore::open(&dir));
        assert!(message.contains("lock"), "{message}");
        assert!(started.elapsed() >= SledStore::OPEN_WAIT);
        drop(held);
        std::fs::remove_dir_all(&dir).ok();
    }

    fn temporary() -> SledStore {
        let db = ::sled::Config::new().temporary(true).open().unwrap();
        SledStore::from_db(db)
    }

    /// Writes a raw record into `graph`'s tree, bypassing `append`.
    fn poke(store: &SledStore, graph: &str, key: Vec<u8>, value: &[u8]) {
        store.tree(graph).unwrap().insert(key, value).unwrap();
    }

    fn store_error_message(result: Result<impl fmt::Debug, Error>) -> String {
        match result {
            Err(Error::Store { source }) => source.to_string(),
            other => panic!("expected Error::Store, got {other:?}"),
        }
    }

    #[test]
    fn keys_follow_the_documented_layout() {
        let thread = ThreadId::from("ab");
        assert_eq!(head_key(&thread), b"\0\0\0\0\0\0\0\x02ab\x00");
        assert_eq!(checkpoints_prefix(&thread), b"\0\0\0\0\0\0\0\x02ab\x01");
        assert_eq!(checkpoint_key(&thread, 0x0102), b"\0\0\0\0\0\0\0\x02ab\x01\0\0\0\0\0\0\x01\x02");
        // A shorter id's prefix is never the start of a longer id's keys.
        let a = checkpoints_prefix(&ThreadId::from("a"));
        assert!(!checkpoint_key(&thread, 1).starts_with(&a));
    }

    #[test]
    fn records_follow_the_documented_layout() {
        let store = temporary();
        let thread = ThreadId::from("t");
        store.append("g", &thread, None, 1, b"x", false).unwrap();
        let names = store.db.tree_names();
        assert!(names.iter().any(|name| name == b"tea/v2/graph/g"), "{names:?}");
        let raw = store.db.open_tree(b"tea/v2/graph/g").unwrap();
        assert_eq!(raw.get(head_key(&thread)).unwrap().unwrap(), b"\0\0\0\0\0\0\0\x01x");
        assert_eq!(raw.get(checkpoint_key(&thread, 1)).unwrap(), None, "the head is in its record alone");
        // Replaced as the head, a checkpoint gets its own record.
        store.append("g", &thread, Some(1), 2, b"yz", false).unwrap();
        assert_eq!(raw.get(head_key(&thread)).unwrap().unwrap(), b"\0\0\0\0\0\0\0\x02yz");
        assert_eq!(raw.get(checkpoint_key(&thread, 1)).unwrap().unwrap(), b"x");
        assert_eq!(raw.len(), 2);
    }

    #[test]
    fn one_flush_per_durable_append_and_none_for_others_or_conflicts() {
        let store = temporary();
        let thread = ThreadId::from("t");
        store.append("g", &thread, None, 1, b"one", false).unwrap();
        assert_eq!(store.flushes(), 0);
        for id in 2..=5 {
            store.append("g", &thread, Some(id - 1), id, b"more", true).unwrap();
            assert_eq!(store.flushes(), id - 1);
        }
        assert_eq!(
            store.append("g", &thread, Some(1), 2, b"late", true).unwrap(),
            AppendOutcome::Conflict { head: Some(5) }
        );
        assert_eq!(store.clone().flushes(), 4, "clones share the count; a conflict does not flush");
    }

    #[test]
    fn a_corrupt_head_record_is_a_store_error() {
        let store = temporary();
        let thread = ThreadId::from("t");
        store.append("g", &thread, None, 1, b"one", false).unwrap();
        store.append("g", &thread, Some(1), 2, b"two", false).unwrap();
        for bad in [&b""[..], b"\x01", &[0; 7], &[0; 8], &[0; 4096]] {
            poke(&store, "g", head_key(&thread), bad);
            for message in [
                store_error_message(store.head("g", &thread)),
                store_error_message(store.history("g", &thread)),
                store_error_message(store.get("g", &thread, 1)),
                store_error_message(store.append("g", &thread, Some(2), 3, b"three", false)),
                store_error_message(store.prune("g", &thread, 1)),
            ] {
                assert!(message.contains("head record of thread `t` of graph `g` is corrupt"), "{message}");
                assert!(message.contains(&format!("{} bytes", bad.len())), "{message}");
            }
        }
        // The older checkpoint's record is untouched, and the thread can be deleted.
        let raw = store.tree("g").unwrap();
        assert_eq!(raw.get(checkpoint_key(&thread, 1)).unwrap().unwrap(), b"one");
        assert!(store.delete("g", &thread).unwrap());
        assert_eq!(store.head("g", &thread).unwrap(), None);
    }

    #[test]
    fn records_at_or_past_the_head_are_never_read() {
        let store = temporary();
        let thread = ThreadId::from("t");
        store.append("g", &thread, None, 1, b"one", false).unwrap();
        store.append("g", &thread, Some(1), 2, b"two", false).unwrap();
        // As left by a crash between writing a record and moving the head, or by a deleted
        // thread's records before the batch that removed them.
        poke(&store, "g", checkpoint_key(&thread, 2), b"stale two");
        poke(&store, "g", checkpoint_key(&thread, 3), b"stale three");
        assert_eq!(store.history("g", &thread).unwrap(), vec![(2, b"two".to_vec()), (1, b"one".to_vec())]);
        assert_eq!(store.get("g", &thread, 2).unwrap().unwrap(), b"two");
        assert_eq!(store.get("g", &thread, 3).unwrap(), None);
        // Moving on overwrites them.
        store.append("g", &thread, Some(2), 3, b"three", false).unwrap();
        store.append("g", &thread, Some(3), 4, b"four", false).unwrap();
        assert_eq!(store.get("g", &thread, 2).unwrap().unwrap(), b"two");
        assert_eq!(store.get("g", &thread, 3).unwrap().unwrap(), b"three");
        assert!(store.delete("g", &thread).unwrap());
        assert_eq!(store.tree("g").unwrap().len(), 0, "delete removes every record");
    }

    #[test]
    fn a_malformed_checkpoint_key_is_a_store_error() {
        let store = temporary();
        let thread = ThreadId::from("t");
        store.append("g", &thread, None, 1, b"one", false).unwrap();
        store.append("g", &thread, Some(1), 2, b"two", false).unwrap();
        let mut key = checkpoints_prefix(&thread);
        key.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 9]);
        poke(&store, "g", key, b"?");
        let message = store_error_message(store.history("g", &thread));
        assert!(message.contains("8-byte checkpoint id"), "{message}");
        poke(&store, "g", b"\xff\xff".to_vec(), b"?");
        let message = store_error_message(store.threads("g"));
        assert!(message.contains("does not follow the layout"), "{message}");
    }

    #[test]
    fn threads_lists_heads_only_and_refuses_unknown_tags() {
        let store = temporary();
        for (thread, appends) in [("b", 3), ("a", 1), ("ab", 2)] {
            let thread = ThreadId::from(thread);
            for id in 1..=appends {
                store.append("g", &thread, Some(id - 1).filter(|&h| h > 0), id, b"x", false).unwrap();
            }
        }
        // Records of a thread without a head (as a crash could leave them) list nothing.
        poke(&store, "g", checkpoint_key(&ThreadId::from("aa"), 4), b"orphan");
        let listed = store.threads("g").unwrap();
        assert_eq!(listed, ["a", "ab", "b"].map(ThreadId::from));
        poke(&store, "g", thread_key(&ThreadId::from("c"), 0x07, 0), b"?");
        let message = store_error_message(store.threads("g"));
        assert!(message.contains("does not follow the layout"), "{message}");
    }

    #[test]
    fn a_database_in_the_first_layout_is_refused() {
        let dir = std::env::temp_dir().join(format!("tea-sled-layout1-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        {
            let db = ::sled::open(&dir).unwrap();
            db.open_tree(b"tea/graph/g").unwrap().insert(b"k", b"v").unwrap();
            db.flush().unwrap();
        }
        let message = store_error_message(SledStore::open(&dir));
        assert!(message.contains("layout of an earlier tea"), "{message}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_id_out_of_sequence_is_refused_and_nothing_is_stored() {
        let store = temporary();
        let thread = ThreadId::from("t");
        for (expected, id) in [(None, 2), (None, 0), (Some(1), 1), (Some(u64::MAX), 0)] {
            let message = store_error_message(store.append("g", &thread, expected, id, b"x", false));
            assert!(message.contains(&format!("checkpoint {id} cannot follow")), "{message}");
        }
        assert_eq!(store.head("g", &thread).unwrap(), None);
        assert_eq!(store.history("g", &thread).unwrap(), vec![]);
    }

    #[test]
    fn debug_names_the_path_not_the_pages() {
        let store = temporary();
        store.append("g", &ThreadId::from("t"), None, 1, b"x", false).unwrap();
        assert_eq!(format!("{store:?}"), "SledStore { path: None, .. }");
    }
}
