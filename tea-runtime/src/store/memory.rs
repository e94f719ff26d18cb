//! `MemoryStore`: checkpoints in this process's memory.

use super::{AppendOutcome, CheckpointId, Checkpointer};
use crate::error::Error;
use crate::name::ThreadId;
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Checkpoints kept in memory: fast, shared by every clone of the handle, gone with the process.
///
/// Use it for tests, for single-process services that can lose paused threads on restart, and as
/// the model of the [`Checkpointer`] contract. For checkpoints that survive a restart use
/// `SledStore`.
///
/// ```
/// use tea::MemoryStore;
/// let store = MemoryStore::new();
/// let same_store = store.clone(); // a handle: both see the same checkpoints
/// # let _ = same_store;
/// ```
#[derive(Clone, Default)]
pub struct MemoryStore {
    graphs: Arc<Mutex<Graphs>>,
}

/// Threads by graph name, hashed with [`Fnv`] (a graph's name comes from the program, and every
/// store call looks it up); a graph's threads by id, with std's keyed hash. A record is a
/// boxed slice: every read copies it out, so it needs no reference count (an `Arc`'s 16 bytes
/// made a record of ~180 bytes take a larger allocation, and a store that keeps every step's
/// record grows by them).
type Graphs = HashMap<String, HashMap<ThreadId, Vec<(CheckpointId, Box<[u8]>)>>, BuildHasherDefault<Fnv>>;

/// FNV-1a: a few instructions a byte for the short names of graphs, where std's SipHash (made to
/// resist keys chosen to collide, as thread ids from a client may be) cost each append more
/// than the rest of its lookup.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    fn write(&mut self, bytes: &[u8]) {
        let mut hash = self.0;
        for &byte in bytes {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = hash;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many threads the store holds, over all graphs. ([`Checkpointer::threads`] lists the
    /// threads of one graph.)
    pub fn thread_count(&self) -> usize {
        self.lock().values().map(HashMap::len).sum()
    }

    fn lock(&self) -> MutexGuard<'_, Graphs> {
        // No code that can panic runs under this lock; a poisoned lock still holds whole entries.
        self.graphs.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Checkpointer for MemoryStore {
    fn append(
        &self,
        graph: &str,
        thread: &ThreadId,
        expected: Option<CheckpointId>,
        id: CheckpointId,
        bytes: &[u8],
        _durable: bool,
    ) -> Result<AppendOutcome, Error> {
        let next = expected.map_or(1, |head| head + 1);
        if id != next {
            return Err(Error::store(format!(
                "checkpoint {id} of thread `{thread}` is out of sequence: after {expected:?} comes {next}"
            )));
        }
        let mut graphs = self.lock();
        let threads = match graphs.get_mut(graph) {
            Some(threads) => threads,
            None => graphs.entry(graph.to_owned()).or_default(),
        };
        let log = match threads.get_mut(thread) {
            Some(log) => log,
            None => threads.entry(thread.clone()).or_default(),
        };
        let head = log.last().map(|(id, _)| *id);
        if head != expected {
            return Ok(AppendOutcome::Conflict { head });
        }
        log.push((id, Box::from(bytes)));
        Ok(AppendOutcome::Written)
    }

    fn head(&self, graph: &str, thread: &ThreadId) -> Result<Option<(CheckpointId, Vec<u8>)>, Error> {
        let graphs = self.lock();
        let last = graphs.get(graph).and_then(|threads| threads.get(thread)).and_then(|log| log.last());
        Ok(last.map(|(id, bytes)| (*id, bytes.to_vec())))
    }

    fn get(&self, graph: &str, thread: &ThreadId, id: CheckpointId) -> Result<Option<Vec<u8>>, Error> {
        let graphs = self.lock();
        let log = graphs.get(graph).and_then(|threads| threads.get(thread));
        Ok(log.and_then(|log| log.iter().rev().find(|(i, _)| *i == id)).map(|(_, bytes)| bytes.to_vec()))
    }

    fn history(&self, graph: &str, thread: &ThreadId) -> Result<Vec<(CheckpointId, Vec<u8>)>, Error> {
        let graphs = self.lock();
        let log = graphs.get(graph).and_then(|threads| threads.get(thread));
        Ok(log.map(|log| log.iter().rev().map(|(id, bytes)| (*id, bytes.to_vec())).collect()).unwrap_or_default())
    }

    fn range(
        &self,
        graph: &str,
        thread: &ThreadId,
        from: CheckpointId,
        to: CheckpointId,
    ) -> Result<Vec<(CheckpointId, Vec<u8>)>, Error> {
        let graphs = self.lock();
        let log = graphs.get(graph).and_then(|threads| threads.get(thread));
        // Ids ascend along the log: find the first in range, then take while in range.
        let found = log.map(|log| {
            let start = log.partition_point(|(id, _)| *id < from);
            log[start..].iter().take_while(|(id, _)| *id <= to).map(|(id, bytes)| (*id, bytes.to_vec())).collect()
        });
        Ok(found.unwrap_or_default())
    }

    fn threads(&self, graph: &str) -> Result<Vec<ThreadId>, Error> {
        let graphs = self.lock();
        let mut threads: Vec<ThreadId> = graphs
            .get(graph)
            .map(|threads| threads.iter().filter(|(_, log)| !log.is_empty()).map(|(id, _)| id.clone()).collect())
            .unwrap_or_default();
        threads.sort_unstable();
        Ok(threads)
    }

    fn delete(&self, graph: &str, thread: &ThreadId) -> Result<bool, Error> {
        let mut graphs = self.lock();
        let removed = graphs.get_mut(graph).and_then(|threads| threads.remove(thread));
        if graphs.get(graph).is_some_and(HashMap::is_empty) {
            graphs.remove(graph);
        }
        Ok(removed.is_some_and(|log| !log.is_empty()))
    }

    fn delete_at(&self, graph: &str, thread: &ThreadId, head: CheckpointId) -> Result<bool, Error> {
        let mut graphs = self.lock();
        let at_head = graphs
            .get(graph)
            .and_then(|threads| threads.get(thread))
            .and_then(|log| log.last())
            .is_some_and(|(id, _)| *id == head);
        if !at_head {
            return Ok(false);
        }
        if let Some(threads) = graphs.get_mut(graph) {
            threads.remove(thread);
            if threads.is_empty() {
                graphs.remove(graph);
            }
        }
        Ok(true)
    }

    fn prune(&self, graph: &str, thread: &ThreadId, keep_last: usize) -> Result<usize, Error> {
        let mut graphs = self.lock();
        let Some(log) = graphs.get_mut(graph).and_then(|threads| threads.get_mut(thread)) else {
            return Ok(0);
        };
        let gone = log.len().saturating_sub(keep_last.max(1));
        log.drain(..gone);
        Ok(gone)
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore").field("threads", &self.thread_count()).finish()
    }
}
