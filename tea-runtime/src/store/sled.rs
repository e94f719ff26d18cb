//! `SledStore`: checkpoints in an embedded [sled](https://docs.rs/sled/0.34) database on disk.
//!
//! # Key layout
//!
//! Each graph has its own sled tree, named `tea/graph/` followed by the graph's name (UTF-8). In
//! that tree every record of a thread starts with the thread's *prefix*: the length of the thread
//! id in bytes as a big-endian `u64`, then the id's UTF-8 bytes. The length comes first so that
//! no thread's prefix is the start of another's: the records of `"a"` and `"ab"` never mix. One
//! tag byte follows the prefix:
//!
//! | key                                        | value                                           |
//! |--------------------------------------------|-------------------------------------------------|
//! | prefix, `0x00`                             | the head: the newest checkpoint's id, big-endian `u64` (8 bytes, never 0) |
//! | prefix, `0x01`, the id as big-endian `u64` | checkpoint `id`: the bytes given to `append`, unchanged |
//!
//! Big-endian ids sort like the numbers they encode, so a thread's checkpoints lie side by side in
//! id order and its history is one prefix scan, read backwards.
//!
//! # Atomicity and crashes
//!
//! `append` is one sled transaction over the head record and the new checkpoint: it reads the
//! head and, only if it is the expected one, writes both. sled runs transactions one at a time, so
//! of several writers expecting the same head exactly one moves it, and it logs a transaction's
//! writes as one batch that recovery restores whole or not at all: after a crash the head names a
//! stored checkpoint, or the thread is as it was. Checkpoints are never overwritten (only `delete` and `prune` remove them),
//! and `append` refuses an `id` other than the expected head + 1, so ids only grow. With
//! `durable: true` it flushes the database to disk before it returns.

use super::{Append, CheckpointId, Checkpointer};
use crate::error::Error;
use crate::name::ThreadId;
use ::sled::transaction::TransactionError;
use std::fmt;
use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// The start of each graph's tree name; the graph's name follows.
const TREE_PREFIX: &[u8] = b"tea/graph/";
/// The tag after a thread's prefix that marks its head record.
const HEAD_TAG: u8 = 0x00;
/// The tag after a thread's prefix that marks one of its checkpoints.
const CHECKPOINT_TAG: u8 = 0x01;
/// Bytes in an encoded checkpoint id.
const ID_LEN: usize = 8;

/// Checkpoints in an embedded [sled](https://docs.rs/sled/0.34) database: they survive a restart
/// of the process, and an `append` with `durable: true` survives a crash.
///
/// The handle is cheap to clone, and every clone works on the same database. A database
/// directory can be open in one process at a time; open it once and share the handle.
///
/// # On disk
/// Each graph has a sled tree named `tea/graph/<graph name>`. In it each thread has a head
/// record (the newest checkpoint's id) and its checkpoints, keyed by the thread id (prefixed with
/// its length) and the checkpoint id as a big-endian `u64`, so they sort by id. `append` writes a
/// checkpoint and the head in one sled transaction, so a crash never leaves a head without its
/// checkpoint.
///
/// ```
/// use tea::{Append, Checkpointer, SledStore, ThreadId};
///
/// # let dir = std::env::temp_dir().join(format!("tea-sled-doc-{}", std::process::id()));
/// let store = SledStore::open(dir.join("checkpoints"))?;
/// let thread = ThreadId::from("order-1234");
///
/// let first = store.append("orders", &thread, None, 1, b"first", true)?;
/// assert_eq!(first, Append::Written);
/// // A writer that still expects an empty thread loses, and nothing changes:
/// let late = store.append("orders", &thread, None, 1, b"other", true)?;
/// assert_eq!(late, Append::Conflict { head: Some(1) });
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
    /// Where the database lives, for `Debug`; `None` for a database opened elsewhere (tests).
    path: Option<Arc<Path>>,
}

impl SledStore {
    /// Opens the database in directory `path`, creating it if needed.
    ///
    /// # Errors
    /// [`Error::Store`], with sled's error as its source, if the database cannot be opened: the
    /// path is a file or cannot be created, the database is open in another process (or through
    /// another `SledStore::open` of the same path in this one), or its files are damaged.
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
    pub fn open(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let db = ::sled::open(path).map_err(Error::store)?;
        Ok(SledStore { db, removal: Arc::default(), path: Some(path.into()) })
    }

    /// A store over a database opened elsewhere, such as a temporary one in tests.
    #[cfg(test)]
    fn from_db(db: ::sled::Db) -> Self {
        SledStore { db, removal: Arc::default(), path: None }
    }

    fn shared(&self) -> RwLockReadGuard<'_, ()> {
        // The lock guards no data, so a panic while it was held left nothing inconsistent.
        self.removal.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn exclusive(&self) -> RwLockWriteGuard<'_, ()> {
        self.removal.write().unwrap_or_else(PoisonError::into_inner)
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

/// The prefix shared by the keys of all of `thread`'s checkpoints.
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

/// Decodes a head record: an 8-byte big-endian id, never 0.
fn decode_head(graph: &str, thread: &ThreadId, record: &[u8]) -> Result<CheckpointId, Fault> {
    decode_id(record).filter(|&id| id != 0).ok_or_else(|| Fault::Head {
        graph: graph.to_owned(),
        thread: thread.clone(),
        len: record.len(),
    })
}

/// What a `SledStore` found wrong, reported as the source of an [`Error::Store`].
#[derive(Debug, thiserror::Error)]
enum Fault {
    #[error("the head record of thread `{thread}` of graph `{graph}` is corrupt: {len} bytes where a checkpoint id (8 bytes, not 0) belongs")]
    Head { graph: String, thread: ThreadId, len: usize },
    #[error("the head of thread `{thread}` of graph `{graph}` is checkpoint {id}, which is not stored")]
    MissingHead { graph: String, thread: ThreadId, id: CheckpointId },
    #[error("a checkpoint key of thread `{thread}` of graph `{graph}` does not end in an 8-byte checkpoint id")]
    Key { graph: String, thread: ThreadId },
    #[error("a key in the tree of graph `{graph}` does not start with a thread id (its length, then UTF-8 bytes)")]
    Unreadable { graph: String },
    #[error("checkpoint {id} cannot follow head {}: the next checkpoint is the head + 1 (1 for an empty thread)", match expected { Some(head) => head.to_string(), None => String::from("none") })]
    OutOfSequence { expected: Option<CheckpointId>, id: CheckpointId },
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
    ) -> Result<Append, Error> {
        // Keys sort by id, so an id out of sequence would break the order `history` relies on,
        // or overwrite a stored checkpoint.
        if expected.map_or(Some(1), |head| head.checked_add(1)) != Some(id) {
            return Err(Error::store(Fault::OutOfSequence { expected, id }));
        }
        let _shared = self.shared();
        let tree = self.tree(graph)?;
        let head_key = head_key(thread);
        let checkpoint_key = checkpoint_key(thread, id);
        // Reads and writes inside the closure go through `tx`: plain tree calls there would wait
        // on the lock the transaction holds.
        let outcome = tree.transaction(|tx| {
            let head = match tx.get(&head_key)? {
                Some(record) => Some(
                    decode_head(graph, thread, &record)
                        .map_err(::sled::transaction::ConflictableTransactionError::Abort)?,
                ),
                None => None,
            };
            if head != expected {
                return Ok(Append::Conflict { head });
            }
            tx.insert(checkpoint_key.as_slice(), bytes)?;
            tx.insert(head_key.as_slice(), &id.to_be_bytes()[..])?;
            Ok(Append::Written)
        });
        let outcome = outcome.map_err(|e| match e {
            TransactionError::Abort(fault) => Error::store(fault),
            TransactionError::Storage(e) => Error::store(e),
        })?;
        if durable && outcome == Append::Written {
            self.db.flush().map_err(Error::store)?;
        }
        Ok(outcome)
    }

    fn head(&self, graph: &str, thread: &ThreadId) -> Result<Option<(CheckpointId, Vec<u8>)>, Error> {
        let _shared = self.shared();
        let tree = self.tree(graph)?;
        let head_key = head_key(thread);
        let mut record = tree.get(&head_key).map_err(Error::store)?;
        loop {
            let Some(current) = record else {
                return Ok(None);
            };
            let id = decode_head(graph, thread, &current).map_err(Error::store)?;
            if let Some(bytes) = tree.get(checkpoint_key(thread, id)).map_err(Error::store)? {
                return Ok(Some((id, bytes.to_vec())));
            }
            // Gone: either a `delete` or `prune` ran since the head was read, or the store is
            // damaged. Only an unchanged head is damage.
            record = tree.get(&head_key).map_err(Error::store)?;
            if record.as_ref() == Some(&current) {
                return Err(Error::store(Fault::MissingHead { graph: graph.to_owned(), thread: thread.clone(), id }));
            }
        }
    }

    fn get(&self, graph: &str, thread: &ThreadId, id: CheckpointId) -> Result<Option<Vec<u8>>, Error> {
        let _shared = self.shared();
        let tree = self.tree(graph)?;
        let bytes = tree.get(checkpoint_key(thread, id)).map_err(Error::store)?;
        Ok(bytes.map(|bytes| bytes.to_vec()))
    }

    fn history(&self, graph: &str, thread: &ThreadId) -> Result<Vec<(CheckpointId, Vec<u8>)>, Error> {
        let _shared = self.shared();
        let tree = self.tree(graph)?;
        let prefix = checkpoints_prefix(thread);
        tree.scan_prefix(&prefix)
            .rev()
            .map(|entry| {
                let (key, bytes) = entry.map_err(Error::store)?;
                let id = key
                    .get(prefix.len()..)
                    .and_then(decode_id)
                    .ok_or_else(|| Error::store(Fault::Key { graph: graph.to_owned(), thread: thread.clone() }))?;
                Ok((id, bytes.to_vec()))
            })
            .collect()
    }

    fn threads(&self, graph: &str) -> Result<Vec<ThreadId>, Error> {
        let tree = self.tree(graph)?;
        let mut threads = Vec::new();
        for key in tree.iter().keys() {
            let key = key.map_err(Error::store)?;
            let (thread, tag) =
                split_key(&key).ok_or_else(|| Error::store(Fault::Unreadable { graph: graph.to_owned() }))?;
            if tag == [HEAD_TAG] {
                threads.push(ThreadId::from(thread));
            }
        }
        // Keys sort by the id's length first.
        threads.sort_unstable();
        Ok(threads)
    }

    fn delete(&self, graph: &str, thread: &ThreadId) -> Result<bool, Error> {
        let _exclusive = self.exclusive();
        let tree = self.tree(graph)?;
        let head_key = head_key(thread);
        loop {
            let Some(head) = tree.get(&head_key).map_err(Error::store)? else {
                return Ok(false);
            };
            let keys: Vec<::sled::IVec> =
                tree.scan_prefix(checkpoints_prefix(thread)).keys().collect::<Result<_, _>>().map_err(Error::store)?;
            // One transaction, and only if no append moved the head since the keys were listed:
            // a concurrent append's checkpoint is never left without its head, nor removed with it.
            let outcome = tree.transaction(|tx| {
                if tx.get(&head_key)?.as_ref() != Some(&head) {
                    return Ok(false);
                }
                for key in &keys {
                    tx.remove(key)?;
                }
                tx.remove(head_key.as_slice())?;
                Ok(true)
            });
            let removed: bool = outcome.map_err(|e: TransactionError<Fault>| match e {
                TransactionError::Abort(fault) => Error::store(fault),
                TransactionError::Storage(e) => Error::store(e),
            })?;
            if removed {
                return Ok(true);
            }
        }
    }

    fn prune(&self, graph: &str, thread: &ThreadId, keep_last: usize) -> Result<usize, Error> {
        let _exclusive = self.exclusive();
        let tree = self.tree(graph)?;
        let Some(record) = tree.get(head_key(thread)).map_err(Error::store)? else {
            return Ok(0);
        };
        let head = decode_head(graph, thread, &record).map_err(Error::store)?;
        let keep = CheckpointId::try_from(keep_last.max(1)).unwrap_or(CheckpointId::MAX);
        let Some(last_gone) = head.checked_sub(keep).filter(|&id| id > 0) else {
            return Ok(0);
        };
        // Appends only add checkpoints after the head, so the range below it is settled.
        let keys: Vec<::sled::IVec> = tree
            .range(checkpoint_key(thread, 0)..=checkpoint_key(thread, last_gone))
            .keys()
            .collect::<Result<_, _>>()
            .map_err(Error::store)?;
        let mut gone = 0;
        for key in keys {
            if tree.remove(key).map_err(Error::store)?.is_some() {
                gone += 1;
            }
        }
        Ok(gone)
    }
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
    fn the_graph_tree_is_named_after_the_graph() {
        let store = temporary();
        let thread = ThreadId::from("t");
        store.append("g", &thread, None, 1, b"x", false).unwrap();
        let names = store.db.tree_names();
        assert!(names.iter().any(|name| name == b"tea/graph/g"), "{names:?}");
        let raw = store.db.open_tree(b"tea/graph/g").unwrap();
        assert_eq!(raw.get(head_key(&thread)).unwrap().unwrap(), 1u64.to_be_bytes());
        assert_eq!(raw.get(checkpoint_key(&thread, 1)).unwrap().unwrap(), b"x");
    }

    #[test]
    fn a_corrupt_head_record_is_a_store_error() {
        let store = temporary();
        let thread = ThreadId::from("t");
        store.append("g", &thread, None, 1, b"one", false).unwrap();
        for bad in [&b""[..], b"\x01", &[0; 8], &[0xff; 4096]] {
            poke(&store, "g", head_key(&thread), bad);
            let message = store_error_message(store.head("g", &thread));
            assert!(message.contains("head record"), "{message}");
            assert!(message.contains(&format!("{} bytes", bad.len())), "{message}");
            let message = store_error_message(store.append("g", &thread, Some(1), 2, b"two", false));
            assert!(message.contains("head record"), "{message}");
            assert_eq!(store.get("g", &thread, 2).unwrap(), None);
        }
        // What was stored is still readable.
        assert_eq!(store.history("g", &thread).unwrap(), vec![(1, b"one".to_vec())]);
    }

    #[test]
    fn a_head_without_its_checkpoint_is_a_store_error() {
        let store = temporary();
        let thread = ThreadId::from("t");
        poke(&store, "g", head_key(&thread), &7u64.to_be_bytes());
        let message = store_error_message(store.head("g", &thread));
        assert!(message.contains("checkpoint 7, which is not stored"), "{message}");
    }

    #[test]
    fn a_malformed_checkpoint_key_is_a_store_error() {
        let store = temporary();
        let thread = ThreadId::from("t");
        let mut key = checkpoints_prefix(&thread);
        key.extend_from_slice(b"xyz");
        poke(&store, "g", key, b"?");
        let message = store_error_message(store.history("g", &thread));
        assert!(message.contains("8-byte checkpoint id"), "{message}");
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
