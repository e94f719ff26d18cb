//! `DirStore`: checkpoints as files in a directory, one file per checkpoint.
//!
//! # Layout
//!
//! ```text
//! DIR/
//!   GRAPH/                        one directory per graph (its name escaped, see below)
//!     THREAD/                     one directory per thread (its id escaped)
//!       LOCK                      empty; locked (an OS file lock) by every write to the thread
//!       HEAD                      the head's id in decimal, then a newline: `3\n`
//!       000001.ckpt               checkpoint 1: exactly the bytes given to `append`
//!       000002.ckpt               (the id in decimal, at least 6 digits)
//!       000003.ckpt
//!       review_THREAD_000003.ckpt a pause's file for node `review` (`DirStore::link_pause`)
//! ```
//!
//! A checkpoint file holds nothing but the bytes the engine gave the store, which are the §6
//! envelope; so a file a `DirStore` wrote and a file saved any other way are one format.
//!
//! **Names.** Graph names, thread ids and node names become file names by keeping `a`–`z`,
//! `0`–`9`, `-` and `_` and writing every other byte as `%` and two upper-case hex digits (so
//! `Order 7` is `%4Frder%207`: upper-case letters are escaped too, which keeps two ids apart on a
//! case-insensitive file system). The empty name is `@`. A name whose escaped form is longer than
//! [`MAX_ESCAPED`] bytes is stored as `#` and the SHA-256 of the name in hex, with the name itself
//! in a file `NAME` inside the directory (file names are limited to 255 bytes). The docs of
//! [`DirStore`] repeat this for users.
//!
//! # Writes
//!
//! `append` takes the thread's `LOCK` (an exclusive OS file lock, so several processes sharing
//! the directory agree, as do threads of one process), reads `HEAD` and, only if it is the
//! expected head, writes the checkpoint to a temporary file and renames it to its name, then
//! replaces `HEAD` the same way. Renames are atomic, so a reader sees a whole file or none, and
//! `HEAD` only ever names a checkpoint that is already in place. With `durable: true` the
//! checkpoint file and `HEAD` are synced before their renames and the thread's directory after
//! them, so the head survives a crash of the machine: three syncs ([`DirStore::flushes`]) per
//! durable append, none for the others. The first durable append of a thread through a handle
//! also syncs the graph's directory (and the store's, for the graph's first), so the thread's
//! directory entry is durable too, even if a non-durable append created it.
//!
//! `delete` removes `HEAD` first (the thread is then empty to every reader) and then the rest of
//! the thread's files, keeping its directory and `LOCK`: removing a lock file another process is
//! waiting on would let two writers in. `prune` removes the oldest checkpoint files and their
//! pause files, never the head. A crash in the middle of either leaves a readable thread: the
//! files left behind are either still listed (prune) or beyond the head and overwritten when the
//! thread reaches their ids again (delete).
//!
//! Readers (`head`, `get`, `history`) take the same lock shared, so they never see a thread
//! half deleted or half pruned, nor files of two lives of one thread id; a `HEAD` that names a
//! missing checkpoint is then damage, an [`Error::Store`] naming the path. `threads` reads each
//! `HEAD` without the lock.

use super::{AppendOutcome, CheckpointId, Checkpointer};
use crate::error::Error;
use crate::name::ThreadId;
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// The longest escaped name used as a file name as it is; longer ones are hashed.
const MAX_ESCAPED: usize = 160;
/// The thread's lock file.
const LOCK: &str = "LOCK";
/// The thread's head file.
const HEAD: &str = "HEAD";
/// The original name of a directory whose name is a hash.
const NAME: &str = "NAME";
/// The extension of checkpoint and pause files.
const EXT: &str = ".ckpt";
/// The start of temporary file names.
const TMP: &str = ".tmp-";
/// The longest `HEAD` file read: 20 digits and a newline, with room to spare.
const HEAD_MAX: u64 = 32;

/// Checkpoints as files in a directory: readable with ordinary tools, shared by every process
/// that opens the same directory (on one machine, or on a file system with working locks).
///
/// The handle is cheap to clone; every clone works on the same directory.
///
/// # On disk
/// ```text
/// DIR/GRAPH/THREAD/LOCK                       locked (an OS file lock) by every write
/// DIR/GRAPH/THREAD/HEAD                       the head's id in decimal and a newline: `3\n`
/// DIR/GRAPH/THREAD/000003.ckpt                checkpoint 3, exactly the bytes of the checkpoint
/// DIR/GRAPH/THREAD/review_THREAD_000003.ckpt  the same checkpoint, named for its paused node
/// ```
/// A checkpoint file is the checkpoint envelope and nothing else, the same format as a checkpoint
/// saved any other way. Graph, thread and node names are escaped into file names: `a`–`z`,
/// `0`–`9`, `-` and `_` stay, every other byte is `%` and two upper-case hex digits (`Order 7` is
/// `%4Frder%207`; escaping upper case keeps ids apart on case-insensitive file systems); the empty
/// name is `@`; a name longer than 160 bytes once escaped is `#` and its SHA-256 in hex, with the
/// name in a file `NAME` beside. [`checkpoint_path`](Self::checkpoint_path) computes a
/// checkpoint's path; [`link_pause`](Self::link_pause) names a pause's file after its node.
///
/// Every write to a thread holds its `LOCK`, so processes sharing the directory agree on its
/// head; files are written under a temporary name and renamed, so a reader sees a whole file or
/// none. With `durable: true`, `append` syncs the checkpoint file, `HEAD` and the directory
/// (three syncs, see [`flushes`](Self::flushes)). Damaged files are errors naming their path: a
/// `HEAD` that is not an id, or names a missing file, is [`Error::Store`]; a checkpoint file that
/// is cut short or altered fails the engine's checks as [`Error::CorruptCheckpoint`].
/// `delete` keeps the thread's (then empty) directory and `LOCK`, which another process may be
/// waiting on.
///
/// ```
/// use tea::{AppendOutcome, Checkpointer, DirStore, ThreadId};
///
/// # let dir = std::env::temp_dir().join(format!("tea-dir-doc-{}", std::process::id()));
/// let store = DirStore::open(&dir)?;
/// let thread = ThreadId::from("order-1234");
/// assert_eq!(store.append("orders", &thread, None, 1, b"first", true)?, AppendOutcome::Written);
/// // A writer that still expects an empty thread loses, and nothing changes:
/// assert_eq!(store.append("orders", &thread, None, 1, b"other", true)?, AppendOutcome::Conflict { head: Some(1) });
///
/// let file = store.checkpoint_path("orders", &thread, 1);
/// assert!(file.ends_with("orders/order-1234/000001.ckpt"));
/// assert_eq!(std::fs::read(&file)?, b"first");
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct DirStore {
    inner: Arc<Inner>,
}

struct Inner {
    root: PathBuf,
    flushes: AtomicU64,
    /// Graph and thread directories whose entries this handle has synced into their parents,
    /// so only the first durable append of a thread pays for it.
    synced: Mutex<HashSet<PathBuf>>,
}

impl DirStore {
    /// Opens the store in directory `dir`, creating it (and its parents) if needed.
    ///
    /// # Errors
    /// [`Error::Store`] naming the path if it cannot be created or is not a directory.
    ///
    /// ```
    /// use tea::{DirStore, Error};
    ///
    /// # let dir = std::env::temp_dir().join(format!("tea-dir-open-doc-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir).unwrap();
    /// let file = dir.join("not-a-directory");
    /// std::fs::write(&file, b"")?;
    /// let error = DirStore::open(&file).unwrap_err();
    /// assert!(matches!(error, Error::Store { .. }));
    /// assert!(error.to_string().contains("not-a-directory"), "{error}");
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, Error> {
        let root = dir.as_ref().to_path_buf();
        fs::create_dir_all(&root).map_err(|e| io_fault("create the directory", &root, e))?;
        let meta = fs::metadata(&root).map_err(|e| io_fault("read", &root, e))?;
        if !meta.is_dir() {
            let e = io::Error::other("not a directory");
            return Err(io_fault("open the store directory", &root, e));
        }
        Ok(DirStore { inner: Arc::new(Inner { root, flushes: AtomicU64::new(0), synced: Mutex::default() }) })
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.inner.root
    }

    /// How many times this store (all clones of the handle) synced a file or directory to disk
    /// since it was opened: three per durable `append` (checkpoint, `HEAD`, directory), one or
    /// two more for the first durable append of each thread through this handle (the graph's
    /// directory, and the store's for a graph's first thread), and one per
    /// [`link_pause`](Self::link_pause). For measuring the cost of durability.
    pub fn flushes(&self) -> u64 {
        self.inner.flushes.load(Ordering::Relaxed)
    }

    /// The directory of `thread` of `graph`.
    pub fn thread_dir(&self, graph: &str, thread: &ThreadId) -> PathBuf {
        self.inner.root.join(file_name(graph)).join(file_name(thread.as_str()))
    }

    /// The file that holds (or would hold) checkpoint `id` of `thread`: `DIR/GRAPH/THREAD/`
    /// and the id with at least six digits, `000042.ckpt`. The path is computed, not checked.
    pub fn checkpoint_path(&self, graph: &str, thread: &ThreadId, id: CheckpointId) -> PathBuf {
        self.thread_dir(graph, thread).join(checkpoint_file(id))
    }

    /// Gives checkpoint `id` of `thread` a second name that says which node paused there:
    /// `{node}_{thread}_{id:06}.ckpt` beside the checkpoint (a hard link, or a copy where the
    /// file system has none), and returns its path. The front ends call it for each pause they
    /// hand out so a person can find the pause's file by node; it holds the same bytes, is
    /// replaced if it exists, and goes with its checkpoint on `prune` and `delete`.
    ///
    /// # Errors
    /// [`Error::CheckpointNotFound`] if the thread has no checkpoint `id` (never written or
    /// pruned); [`Error::Store`] naming the path when the file system fails or the escaped names
    /// are too long for a file name.
    pub fn link_pause(&self, graph: &str, thread: &ThreadId, id: CheckpointId, node: &str) -> Result<PathBuf, Error> {
        let dir = self.thread_dir(graph, thread);
        let name = format!("{}_{}_{}", file_name(node), file_name(thread.as_str()), checkpoint_file(id));
        let link = dir.join(&name);
        if name.len() > 255 {
            let e = io::Error::new(io::ErrorKind::InvalidInput, "the node's and thread's names are too long");
            return Err(io_fault("name a pause file", &link, e));
        }
        let _lock = match self.lock_existing(&dir)? {
            Some(lock) => lock,
            None => return Err(Error::CheckpointNotFound { thread: thread.clone() }),
        };
        let target = dir.join(checkpoint_file(id));
        if self.read_head(&dir)?.is_none_or(|head| id > head) || !exists(&target)? {
            return Err(Error::CheckpointNotFound { thread: thread.clone() });
        }
        let tmp = self.temporary(&dir);
        if fs::hard_link(&target, &tmp).is_err() {
            fs::copy(&target, &tmp).map_err(|e| io_fault("copy", &target, e))?;
        }
        fs::rename(&tmp, &link).map_err(|e| io_fault("rename a temporary file to", &link, e))?;
        // Renaming a hard link over another link of the same file does nothing (POSIX): the
        // temporary name is still there when the pause's file existed already.
        let _ = fs::remove_file(&tmp);
        self.sync_dir(&dir)?;
        Ok(link)
    }

    /// Locks the thread in `dir` for writing, creating its directory if needed.
    fn lock(&self, dir: &Path) -> Result<File, Error> {
        if let Some(lock) = self.lock_existing(dir)? {
            return Ok(lock);
        }
        fs::create_dir_all(dir).map_err(|e| io_fault("create the directory", dir, e))?;
        self.lock_existing(dir)?.ok_or_else(|| {
            io_fault("lock", &dir.join(LOCK), io::Error::new(io::ErrorKind::NotFound, "the directory vanished"))
        })
    }

    /// Locks the thread in `dir`, or `None` if the directory does not exist.
    fn lock_existing(&self, dir: &Path) -> Result<Option<File>, Error> {
        let path = dir.join(LOCK);
        let file = match OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_fault("open the lock file", &path, e)),
        };
        file.lock().map_err(|e| io_fault("lock", &path, e))?;
        Ok(Some(file))
    }

    /// Takes the shared lock of the thread in `dir` for reading, so no write is half done while
    /// it reads; `None` if the thread has never been written.
    fn lock_shared(&self, dir: &Path) -> Result<Option<File>, Error> {
        let path = dir.join(LOCK);
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_fault("open the lock file", &path, e)),
        };
        file.lock_shared().map_err(|e| io_fault("lock", &path, e))?;
        Ok(Some(file))
    }

    /// Deletes `thread` under its lock, if its head is `head` (any head: `None`).
    fn delete_if(&self, graph: &str, thread: &ThreadId, head: Option<CheckpointId>) -> Result<bool, Error> {
        let dir = self.thread_dir(graph, thread);
        let Some(_lock) = self.lock_existing(&dir)? else { return Ok(false) };
        if let Some(head) = head {
            if self.read_head(&dir)? != Some(head) {
                return Ok(false);
            }
        }
        let head_path = dir.join(HEAD);
        match fs::remove_file(&head_path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(io_fault("remove", &head_path, e)),
        }
        let entries = fs::read_dir(&dir).map_err(|e| io_fault("list", &dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| io_fault("list", &dir, e))?;
            let name = entry.file_name();
            if name == LOCK || name == NAME {
                continue;
            }
            let path = entry.path();
            remove_if_present(&path)?;
        }
        Ok(true)
    }

    /// The head recorded in `dir/HEAD`, `None` if there is none.
    fn read_head(&self, dir: &Path) -> Result<Option<CheckpointId>, Error> {
        let path = dir.join(HEAD);
        let text = match read_bounded(&path, HEAD_MAX) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_fault("read", &path, e)),
        };
        parse_head(&text).map(Some).ok_or_else(|| Error::store(Fault::Head { path, len: text.len() }))
    }

    /// A fresh temporary path in `dir`.
    fn temporary(&self, dir: &Path) -> PathBuf {
        // One counter for the process, so handles opened separately on one directory never
        // share a name.
        static TEMPORARIES: AtomicU64 = AtomicU64::new(0);
        let n = TEMPORARIES.fetch_add(1, Ordering::Relaxed);
        dir.join(format!("{TMP}{}-{n}", std::process::id()))
    }

    /// Writes `bytes` to `path` atomically: a temporary file, synced if `durable`, renamed.
    fn write_file(&self, dir: &Path, path: &Path, bytes: &[u8], durable: bool) -> Result<(), Error> {
        let tmp = self.temporary(dir);
        let result = (|| {
            let mut file = File::create(&tmp)?;
            file.write_all(bytes)?;
            if durable {
                file.sync_all()?;
                self.inner.flushes.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        })();
        if let Err(e) = result {
            let _ = fs::remove_file(&tmp);
            return Err(io_fault("write", &tmp, e));
        }
        fs::rename(&tmp, path).map_err(|e| {
            let _ = fs::remove_file(&tmp);
            io_fault("rename a temporary file to", path, e)
        })
    }

    /// For a directory named by a hash, writes the name it stands for into its `NAME` file
    /// (atomically, like a checkpoint), once.
    fn write_name_file(&self, dir: &Path, name: &str, durable: bool) -> Result<(), Error> {
        if !dir.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with('#')) {
            return Ok(());
        }
        let path = dir.join(NAME);
        if exists(&path)? {
            return Ok(());
        }
        self.write_file(dir, &path, name.as_bytes(), durable)
    }

    /// Before the first durable append of a thread through this handle: syncs the graph's
    /// directory (and, for the graph's first, the store's), so the thread's directory survives a
    /// crash along with the files in it, whoever created it and however.
    fn sync_parents_once(&self, graph_dir: &Path, dir: &Path) -> Result<(), Error> {
        let known = |path: &Path| self.synced().contains(path);
        if known(dir) {
            return Ok(());
        }
        if !known(graph_dir) {
            self.sync_dir(&self.inner.root)?;
            self.synced().insert(graph_dir.to_path_buf());
        }
        self.sync_dir(graph_dir)?;
        self.synced().insert(dir.to_path_buf());
        Ok(())
    }

    fn synced(&self) -> std::sync::MutexGuard<'_, HashSet<PathBuf>> {
        // A set of paths is whole after any panic.
        self.inner.synced.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Syncs directory `dir`, so the names created in it survive a crash.
    fn sync_dir(&self, dir: &Path) -> Result<(), Error> {
        sync_dir(dir).map_err(|e| io_fault("sync the directory", dir, e))?;
        self.inner.flushes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The checkpoints in `dir` up to `head`, as (id, file name), in no order; also pause files
    /// when `pauses`.
    fn listing(&self, dir: &Path, pauses: bool) -> Result<Vec<(CheckpointId, PathBuf)>, Error> {
        let entries = match fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_fault("list", dir, e)),
        };
        let mut found = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io_fault("list", dir, e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let id = if pauses { pause_file_id(name) } else { checkpoint_file_id(name) };
            if let Some(id) = id {
                found.push((id, entry.path()));
            }
        }
        Ok(found)
    }
}

/// What a `DirStore` found wrong, reported as the source of an [`Error::Store`].
#[derive(Debug, thiserror::Error)]
enum Fault {
    #[error("could not {action} `{}`: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("the head file `{}` is corrupt: {len} bytes where a checkpoint id (decimal, not 0, then a newline) belongs", path.display())]
    Head { path: PathBuf, len: usize },
    #[error("the head file `{}` names checkpoint {id}, but `{}` does not exist", head.display(), missing.display())]
    MissingHead { head: PathBuf, id: CheckpointId, missing: PathBuf },
    #[error("the directory `{}` is not named like an escaped graph or thread name", path.display())]
    Name { path: PathBuf },
    #[error("checkpoint {id} cannot follow head {}: the next checkpoint is the head + 1 (1 for an empty thread)", match expected { Some(head) => head.to_string(), None => String::from("none") })]
    OutOfSequence { expected: Option<CheckpointId>, id: CheckpointId },
}

fn io_fault(action: &'static str, path: &Path, source: io::Error) -> Error {
    Error::store(Fault::Io { action, path: path.to_path_buf(), source })
}

impl Checkpointer for DirStore {
    fn append(
        &self,
        graph: &str,
        thread: &ThreadId,
        expected: Option<CheckpointId>,
        id: CheckpointId,
        bytes: &[u8],
        durable: bool,
    ) -> Result<AppendOutcome, Error> {
        if expected.map_or(Some(1), |head| head.checked_add(1)) != Some(id) {
            return Err(Error::store(Fault::OutOfSequence { expected, id }));
        }
        let graph_dir = self.inner.root.join(file_name(graph));
        let dir = graph_dir.join(file_name(thread.as_str()));
        let _lock = if expected.is_none() {
            let lock = self.lock(&dir)?;
            self.write_name_file(&dir, thread.as_str(), durable)?;
            self.write_name_file(&graph_dir, graph, durable)?;
            lock
        } else {
            match self.lock_existing(&dir)? {
                Some(lock) => lock,
                None => return Ok(AppendOutcome::Conflict { head: None }),
            }
        };
        let head = self.read_head(&dir)?;
        if head != expected {
            return Ok(AppendOutcome::Conflict { head });
        }
        if durable {
            self.sync_parents_once(&graph_dir, &dir)?;
        }
        self.write_file(&dir, &dir.join(checkpoint_file(id)), bytes, durable)?;
        self.write_file(&dir, &dir.join(HEAD), format!("{id}\n").as_bytes(), durable)?;
        if durable {
            self.sync_dir(&dir)?;
        }
        Ok(AppendOutcome::Written)
    }

    fn head(&self, graph: &str, thread: &ThreadId) -> Result<Option<(CheckpointId, Vec<u8>)>, Error> {
        let dir = self.thread_dir(graph, thread);
        let Some(_lock) = self.lock_shared(&dir)? else { return Ok(None) };
        let Some(id) = self.read_head(&dir)? else { return Ok(None) };
        let path = dir.join(checkpoint_file(id));
        match fs::read(&path) {
            Ok(bytes) => Ok(Some((id, bytes))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                Err(Error::store(Fault::MissingHead { head: dir.join(HEAD), id, missing: path }))
            }
            Err(e) => Err(io_fault("read", &path, e)),
        }
    }

    fn get(&self, graph: &str, thread: &ThreadId, id: CheckpointId) -> Result<Option<Vec<u8>>, Error> {
        let dir = self.thread_dir(graph, thread);
        let Some(_lock) = self.lock_shared(&dir)? else { return Ok(None) };
        // Files beyond the head are left over from a deleted thread (or an append cut short).
        if self.read_head(&dir)?.is_none_or(|head| id > head) || id == 0 {
            return Ok(None);
        }
        let path = dir.join(checkpoint_file(id));
        match fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_fault("read", &path, e)),
        }
    }

    fn range(
        &self,
        graph: &str,
        thread: &ThreadId,
        from: CheckpointId,
        to: CheckpointId,
    ) -> Result<Vec<(CheckpointId, Vec<u8>)>, Error> {
        let dir = self.thread_dir(graph, thread);
        let Some(_lock) = self.lock_shared(&dir)? else { return Ok(Vec::new()) };
        // Files beyond the head are left over from a deleted thread (or an append cut short).
        let Some(head) = self.read_head(&dir)? else { return Ok(Vec::new()) };
        let mut found = Vec::new();
        for id in from.max(1)..=to.min(head) {
            let path = dir.join(checkpoint_file(id));
            match fs::read(&path) {
                Ok(bytes) => found.push((id, bytes)),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_fault("read", &path, e)),
            }
        }
        Ok(found)
    }

    fn history(&self, graph: &str, thread: &ThreadId) -> Result<Vec<(CheckpointId, Vec<u8>)>, Error> {
        let dir = self.thread_dir(graph, thread);
        let Some(_lock) = self.lock_shared(&dir)? else { return Ok(Vec::new()) };
        let Some(head) = self.read_head(&dir)? else { return Ok(Vec::new()) };
        let mut files = self.listing(&dir, false)?;
        files.retain(|(id, _)| *id <= head);
        files.sort_unstable_by_key(|(id, _)| std::cmp::Reverse(*id));
        let mut history = Vec::with_capacity(files.len());
        for (id, path) in files {
            history.push((id, fs::read(&path).map_err(|e| io_fault("read", &path, e))?));
        }
        Ok(history)
    }

    fn threads(&self, graph: &str) -> Result<Vec<ThreadId>, Error> {
        let graph_dir = self.inner.root.join(file_name(graph));
        let entries = match fs::read_dir(&graph_dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_fault("list", &graph_dir, e)),
        };
        let mut threads = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io_fault("list", &graph_dir, e))?;
            let path = entry.path();
            if !entry.file_type().map_err(|e| io_fault("read", &path, e))?.is_dir() {
                continue; // the graph's NAME file, or something a person put there
            }
            // A directory without a head is a deleted thread. (No lock: `HEAD` is replaced by
            // renames, and a thread deleted or started meanwhile may be listed or not.)
            if self.read_head(&path)?.is_none() {
                continue;
            }
            threads.push(ThreadId::from(original_name(&path)?));
        }
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
        let dir = self.thread_dir(graph, thread);
        let Some(_lock) = self.lock_existing(&dir)? else { return Ok(0) };
        let Some(head) = self.read_head(&dir)? else { return Ok(0) };
        let keep = CheckpointId::try_from(keep_last.max(1)).unwrap_or(CheckpointId::MAX);
        let Some(last_gone) = head.checked_sub(keep).filter(|&id| id > 0) else { return Ok(0) };
        let mut gone = 0;
        for (id, path) in self.listing(&dir, false)? {
            if id <= last_gone && remove_if_present(&path)? {
                gone += 1;
            }
        }
        for (id, path) in self.listing(&dir, true)? {
            if id <= last_gone {
                remove_if_present(&path)?;
            }
        }
        Ok(gone)
    }

    disk_async_methods!();
}

impl fmt::Debug for DirStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirStore").field("dir", &self.inner.root).field("flushes", &self.flushes()).finish()
    }
}

/// `{id:06}.ckpt`.
fn checkpoint_file(id: CheckpointId) -> String {
    format!("{id:06}{EXT}")
}

/// The id of a checkpoint file's name: digits only, then `.ckpt`.
fn checkpoint_file_id(name: &str) -> Option<CheckpointId> {
    let digits = name.strip_suffix(EXT)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|&id| id > 0)
}

/// The id of a pause file's name: `…_` and a checkpoint file's name.
fn pause_file_id(name: &str) -> Option<CheckpointId> {
    let (_, last) = name.rsplit_once('_')?;
    checkpoint_file_id(last)
}

/// A `HEAD` file's id: decimal digits, not 0, then a newline.
fn parse_head(text: &[u8]) -> Option<CheckpointId> {
    let digits = text.strip_suffix(b"\n")?;
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok().filter(|&id| id > 0)
}

/// `name` escaped as a file name (see the module docs).
fn file_name(name: &str) -> String {
    if name.is_empty() {
        return String::from("@");
    }
    let mut escaped = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-' || byte == b'_' {
            escaped.push(char::from(byte));
        } else {
            escaped.push_str(&format!("%{byte:02X}"));
        }
    }
    if escaped.len() <= MAX_ESCAPED {
        return escaped;
    }
    let digest = Sha256::digest(name.as_bytes());
    let mut hashed = String::from("#");
    for byte in digest {
        hashed.push_str(&format!("{byte:02x}"));
    }
    hashed
}

/// The inverse of [`file_name`] for a name that is not hashed.
fn unescape(name: &str) -> Option<String> {
    if name == "@" {
        return Some(String::new());
    }
    let mut bytes = Vec::with_capacity(name.len());
    let mut rest = name.as_bytes();
    while let Some((&first, tail)) = rest.split_first() {
        if first == b'%' {
            let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else if first.is_ascii_lowercase() || first.is_ascii_digit() || first == b'-' || first == b'_' {
            bytes.push(first);
            rest = tail;
        } else {
            return None;
        }
    }
    String::from_utf8(bytes).ok().filter(|s| !s.is_empty())
}

/// The graph or thread name a directory stands for.
fn original_name(dir: &Path) -> Result<String, Error> {
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if name.starts_with('#') {
        let path = dir.join(NAME);
        let bytes = read_bounded(&path, 64 << 10).map_err(|e| io_fault("read", &path, e))?;
        return String::from_utf8(bytes).map_err(|_| Error::store(Fault::Name { path }));
    }
    unescape(name).ok_or_else(|| Error::store(Fault::Name { path: dir.to_path_buf() }))
}

/// Reads at most `limit` bytes of `path` (a longer file reads as `limit + 1` bytes).
fn read_bounded(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    File::open(path)?.take(limit + 1).read_to_end(&mut bytes)?;
    Ok(bytes)
}

fn exists(path: &Path) -> Result<bool, Error> {
    path.try_exists().map_err(|e| io_fault("look for", path, e))
}

/// Removes `path`; `false` if it was not there.
fn remove_if_present(path: &Path) -> Result<bool, Error> {
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_fault("remove", path, e)),
    }
}

#[cfg(unix)]
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Directories cannot be opened as files here; renames are durable once the files are synced.
#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_escape_to_safe_file_names_and_back() {
        for (name, file) in [
            ("order-1234", "order-1234"),
            ("Order 7", "%4Frder%207"),
            ("", "@"),
            ("a/b", "a%2Fb"),
            ("..", "%2E%2E"),
            ("50%", "50%25"),
            ("é", "%C3%A9"),
            ("snake_case", "snake_case"),
        ] {
            assert_eq!(file_name(name), file, "{name:?}");
            assert_eq!(unescape(file).as_deref(), Some(name), "{file:?}");
        }
        for bad in ["A", "%4", "%ZZ", "a.b", "%FF", "#ab"] {
            assert_eq!(unescape(bad), None, "{bad:?}");
        }
        let long = "x/".repeat(200);
        let hashed = file_name(&long);
        assert!(hashed.starts_with('#') && hashed.len() == 65, "{hashed}");
        assert_ne!(hashed, file_name(&"y/".repeat(200)));
        assert_eq!(file_name(&"x".repeat(MAX_ESCAPED)), "x".repeat(MAX_ESCAPED));
    }

    #[test]
    fn file_names_parse_strictly() {
        assert_eq!(checkpoint_file(7), "000007.ckpt");
        assert_eq!(checkpoint_file(1_234_567), "1234567.ckpt");
        assert_eq!(checkpoint_file_id("000007.ckpt"), Some(7));
        assert_eq!(checkpoint_file_id("1234567.ckpt"), Some(1_234_567));
        for bad in ["000000.ckpt", ".ckpt", "7.tmp", "+7.ckpt", "review_t_000007.ckpt", "99999999999999999999999.ckpt"]
        {
            assert_eq!(checkpoint_file_id(bad), None, "{bad}");
        }
        assert_eq!(pause_file_id("review_order-1_000007.ckpt"), Some(7));
        assert_eq!(pause_file_id("000007.ckpt"), None);
        assert_eq!(parse_head(b"12\n"), Some(12));
        for bad in [&b""[..], b"12", b"0\n", b"-1\n", b" 1\n", b"1\n\n", b"99999999999999999999999\n"] {
            assert_eq!(parse_head(bad), None, "{bad:?}");
        }
    }
}
