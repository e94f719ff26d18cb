//! What a run's nodes share besides the state: the app's [`GraphAndCache`] (its graph, for
//! nodes run on a thread of their own, and its node cache), the run's context, and the
//! [`Emitter`] that carries what nodes emit to the run's stream. Each is reached through a
//! node's `Ctx`, and none is ever written to a checkpoint.

use crate::store::Checkpointer;
use crate::vocab::error::Error;
use crate::vocab::name::{NodeName, ThreadId};
use crate::vocab::policy::{CachePolicy, CacheScope, StreamModes};
use crate::vocab::state::fingerprint;
use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Waker;
use std::time::{Duration, SystemTime};

/// The part of an app its runs share, its graph and its in-memory node cache: made once when
/// the app is built. (Results a node keeps in the store are under [`cache_graph`], through the
/// run's own store.)
pub(crate) struct GraphAndCache {
    /// The app's graph (an `Arc<G>`, erased: `Ctx` knows only the state), for a node with a
    /// timeout that the thread driver runs on a thread of its own.
    pub(crate) graph: Arc<dyn Any + Send + Sync>,
    /// Results of cached nodes kept in memory ([`CacheScope::Memory`], and [`CacheScope::Store`]
    /// for an app without a store), by key.
    memory: Arc<Mutex<Memory>>,
}

/// The in-memory node cache: entries by key, with when each stops being valid. Expired entries
/// are dropped whenever the cache has doubled since the last sweep, so a node cached with a TTL
/// over ever new inputs holds at most about twice what is still valid.
#[derive(Default)]
struct Memory {
    entries: HashMap<u64, (Vec<u8>, Option<u64>)>,
    /// The number of entries at which the next sweep runs.
    sweep_at: usize,
}

impl Memory {
    /// Entries are not swept below this many.
    const FEWEST_SWEPT: usize = 64;

    /// Keeps `bytes` under `hash` at `now` (milliseconds since the Unix epoch), valid for `ttl`.
    fn insert(&mut self, hash: u64, bytes: Vec<u8>, ttl: Option<Duration>, now: u64) {
        if self.entries.len() >= self.sweep_at.max(Self::FEWEST_SWEPT) {
            self.entries.retain(|_, (_, expires)| expires.is_none_or(|at| at > now));
            self.sweep_at = self.entries.len().saturating_mul(2);
        }
        let expires = ttl.map(|ttl| now.saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)));
        self.entries.insert(hash, (bytes, expires));
    }
}

impl GraphAndCache {
    pub(crate) fn new(graph: Arc<dyn Any + Send + Sync>) -> Self {
        GraphAndCache { graph, memory: Arc::new(Mutex::new(Memory::default())) }
    }

    /// The same node cache for another graph (equal to this one's, with other per-run
    /// settings).
    pub(crate) fn with_graph(&self, graph: Arc<dyn Any + Send + Sync>) -> Self {
        GraphAndCache { graph, memory: self.memory.clone() }
    }

    /// The bytes kept in memory for `key`.
    pub(crate) fn remembered(&self, key: &CacheKey) -> Option<Vec<u8>> {
        let memory = self.memory.lock().unwrap_or_else(PoisonError::into_inner);
        memory.entries.get(&key.hash).map(|(bytes, _)| bytes.clone())
    }

    /// Keeps `bytes` in memory for `key` at `now` (milliseconds since the Unix epoch, on the
    /// run's clock), valid for `ttl` (dropped some time after).
    pub(crate) fn remember(&self, key: &CacheKey, bytes: Vec<u8>, ttl: Option<Duration>, now: u64) {
        self.memory.lock().unwrap_or_else(PoisonError::into_inner).insert(key.hash, bytes, ttl, now);
    }

    /// How many results the in-memory cache holds (for tests).
    #[cfg(test)]
    pub(crate) fn remembered_count(&self) -> usize {
        self.memory.lock().unwrap_or_else(PoisonError::into_inner).entries.len()
    }
}

/// The result in `bytes` (a cache entry of [`entry_bytes`]), if it is `key`'s and not older
/// than the policy's `ttl` at `now` (milliseconds since the Unix epoch, on the run's clock). An
/// entry that does not read (written by another version) is a miss.
pub(crate) fn read_entry(bytes: &[u8], policy: &CachePolicy, key: &CacheKey, now: u64) -> Option<Cached> {
    let entry = serde_json::from_slice::<Entry>(bytes).ok()?;
    if entry.input != key.input {
        return None;
    }
    if let Some(ttl) = policy.ttl {
        let age = now.saturating_sub(entry.at);
        if u128::from(age) >= ttl.as_millis() {
            return None;
        }
    }
    Some(Cached { update: entry.update, goto: entry.goto })
}

/// A cache entry keeping `result` for `key`, made at `now` (milliseconds since the Unix epoch).
pub(crate) fn entry_bytes(key: &CacheKey, result: Cached, now: u64) -> Result<Vec<u8>, Error> {
    let entry = Entry { input: key.input.clone(), update: result.update, goto: result.goto, at: now };
    serde_json::to_vec(&entry).map_err(|e| Error::Store { source: e.into() })
}

/// The store a node's results are kept in: the run's, when `policy` keeps them there (a run
/// without a store keeps them in memory).
pub(crate) fn cache_store<'a>(
    policy: &CachePolicy,
    tenure: Option<&'a crate::tenure::Tenure>,
) -> Option<&'a dyn Checkpointer> {
    match policy.scope {
        CacheScope::Store => tenure.map(|tenure| &*tenure.store),
        _ => None,
    }
}

/// The store's graph name under which a graph's cached results are kept: not a name a graph
/// can have (`graph!` names are identifiers, and the checkpoints of a thread are kept under
/// their graph's name).
pub(crate) fn cache_graph(graph: &str) -> String {
    format!("tea:cache:{graph}")
}

/// What a cached node's key is made of: its node, and the fields of the state it reads.
pub(crate) struct CacheKey {
    hash: u64,
    node: String,
    input: serde_json::Value,
}

impl CacheKey {
    /// The thread of the store's cache graph the key's entry is kept in.
    pub(crate) fn thread(&self) -> ThreadId {
        ThreadId::from(format!("{}.{:016x}", self.node, self.hash))
    }
}

/// The key of `node`'s result on `state`: the fields the policy names (or the whole state) with
/// the node's name and the state's schema.
pub(crate) fn cache_key<S: serde::Serialize>(
    node: &NodeName,
    schema: u64,
    state: &S,
    policy: &CachePolicy,
) -> Result<CacheKey, Error> {
    let whole = serde_json::to_value(state).map_err(|e| Error::NodeFailed {
        node: node.clone(),
        source: format!("its cache key cannot be made: the state does not serialize: {e}").into(),
    })?;
    let input = match (policy.reads.is_empty(), whole) {
        (false, serde_json::Value::Object(mut fields)) => {
            let mut read = serde_json::Map::new();
            for name in policy.reads {
                read.insert((*name).to_owned(), fields.remove(*name).unwrap_or(serde_json::Value::Null));
            }
            serde_json::Value::Object(read)
        }
        (_, whole) => whole,
    };
    let bytes = serde_json::to_vec(&(node.as_str(), schema, &input)).map_err(|e| Error::NodeFailed {
        node: node.clone(),
        source: format!("its cache key cannot be made: {e}").into(),
    })?;
    Ok(CacheKey { hash: fingerprint(&bytes), node: node.to_string(), input })
}

/// A node's result as the cache keeps it: its update, and a router's choice by name.
pub(crate) struct Cached {
    pub(crate) update: Option<serde_json::Value>,
    pub(crate) goto: Option<String>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Entry {
    input: serde_json::Value,
    update: Option<serde_json::Value>,
    goto: Option<String>,
    at: u64,
}

/// What happened while a node ran, for the run's stream: what it emitted
/// ([`Ctx::emit`](crate::Ctx::emit)), its start, a retry, a cache hit.
pub(crate) struct Emitted {
    pub(crate) node: NodeName,
    /// The head of the branch the node ran in; `None` on the main line.
    pub(crate) branch: Option<NodeName>,
    /// The node's step.
    pub(crate) step: u64,
    pub(crate) what: Emit,
}

/// What an [`Emitted`] says.
pub(crate) enum Emit {
    /// A value the node emitted.
    Custom(serde_json::Value),
    /// The node started, at this time.
    Started(SystemTime),
    /// A run of the node failed: its number, why, and the wait before the next.
    Retry { attempt: u32, error: String, wait: Duration },
    /// The node's result came from its cache.
    CacheHit,
}

impl Emitted {
    /// As the event a stream yields.
    pub(crate) fn into_event<S: crate::vocab::state::GraphState>(self) -> crate::model::event::Event<S> {
        use crate::model::event::Event;
        let Emitted { node, branch, what, step } = self;
        match what {
            Emit::Custom(value) => Event::Custom { node, value },
            Emit::Started(at) => Event::Started { node, branch, step, at },
            Emit::Retry { attempt, error, wait } => Event::Retry { node, branch, attempt, error, wait },
            Emit::CacheHit => Event::CacheHit { node, branch },
        }
    }
}

/// Where a streamed run's nodes put what they emit, until its stream yields it; the modes the
/// stream was asked for.
pub(crate) struct Emitter {
    pub(crate) modes: StreamModes,
    queue: Mutex<(Vec<Emitted>, Option<Waker>)>,
}

impl Emitter {
    pub(crate) fn new(modes: StreamModes) -> Self {
        Emitter { modes, queue: Mutex::new((Vec::new(), None)) }
    }

    /// Queues `what` of the node `ctx` runs (if the stream's modes take it) and wakes the
    /// async stream waiting for it.
    pub(crate) fn emit(&self, node: &NodeName, branch: Option<&NodeName>, step: u64, what: Emit) {
        if self.wants(&what) {
            self.push(Emitted { node: node.clone(), branch: branch.cloned(), step, what });
        }
    }

    fn wants(&self, what: &Emit) -> bool {
        match what {
            Emit::Custom(_) => self.modes.contains(StreamModes::CUSTOM),
            Emit::Started(_) => self.modes.contains(StreamModes::DEBUG),
            Emit::Retry { .. } | Emit::CacheHit => true,
        }
    }

    fn push(&self, emitted: Emitted) {
        let waker = {
            let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
            queue.0.push(emitted);
            queue.1.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Takes what was emitted on the main line, or in the branch whose head is `branch` at
    /// step `step`, in the order it was emitted.
    pub(crate) fn take(&self, branch: Option<(&NodeName, u64)>) -> Vec<Emitted> {
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        if queue.0.is_empty() {
            return Vec::new();
        }
        let (taken, kept) = std::mem::take(&mut queue.0).into_iter().partition(|e| match branch {
            None => e.branch.is_none(),
            Some((head, step)) => e.branch.as_ref() == Some(head) && e.step == step,
        });
        queue.0 = kept;
        taken
    }

    /// Takes everything emitted so far, or registers `waker` to be woken by the next emit.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn take_or_wait(&self, waker: &Waker) -> Vec<Emitted> {
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        if queue.0.is_empty() {
            queue.1 = Some(waker.clone());
            return Vec::new();
        }
        std::mem::take(&mut queue.0)
    }
}

/// A handle that emits to a run's stream as the node it was taken from
/// ([`Ctx::writer`](crate::Ctx::writer)): cheap to clone, `Send`, `'static` — for a task or
/// thread the node starts, or a front end's own language (a YAML agent's `emit()`). Emits after
/// the node's step was yielded still reach the stream, before the next step's events.
#[derive(Clone)]
pub struct Writer {
    emitter: Option<Arc<Emitter>>,
    node: NodeName,
    branch: Option<NodeName>,
    step: u64,
}

impl Writer {
    pub(crate) fn new(emitter: Option<Arc<Emitter>>, node: NodeName, branch: Option<NodeName>, step: u64) -> Writer {
        Writer { emitter, node, branch, step }
    }

    /// Sends `value` to the stream as an [`Event::Custom`](crate::Event::Custom); see
    /// [`Ctx::emit`](crate::Ctx::emit).
    pub fn emit(&self, value: impl Into<serde_json::Value>) {
        if let Some(emitter) = &self.emitter {
            let what = Emit::Custom(value.into());
            if emitter.wants(&what) {
                emitter.push(Emitted { node: self.node.clone(), branch: self.branch.clone(), step: self.step, what });
            }
        }
    }

    /// Whether anything listens: the run streams with [`StreamModes::CUSTOM`].
    pub fn is_listened(&self) -> bool {
        self.emitter.as_ref().is_some_and(|e| e.modes.contains(StreamModes::CUSTOM))
    }
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").field("node", &self.node).field("listened", &self.is_listened()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache_many(policy: CachePolicy, pause_every: usize) -> GraphAndCache {
        let shared = GraphAndCache::new(Arc::new(()));
        // Time passes only where the test says so: 3 ms at every `pause_every`-th insert.
        let clock = crate::vocab::clock::Clock::manual(std::time::UNIX_EPOCH + Duration::from_secs(1_000));
        for input in 0..1000u32 {
            let key = cache_key(&NodeName::from("fetch"), 7, &input, &policy).unwrap();
            let bytes = entry_bytes(&key, Cached { update: None, goto: None }, clock.now_ms()).unwrap();
            shared.remember(&key, bytes, policy.ttl, clock.now_ms());
            if pause_every > 0 && (input as usize).is_multiple_of(pause_every) {
                clock.advance(Duration::from_millis(3));
            }
        }
        shared
    }

    #[test]
    fn expired_results_are_dropped_as_the_memory_cache_grows() {
        let short = CachePolicy { ttl: Some(Duration::from_millis(1)), reads: &[], scope: CacheScope::Memory };
        let shared = cache_many(short, 20);
        // Each sweep keeps what is still valid (at most the last 20 or so) and runs again when
        // the cache has doubled, or at 64 entries.
        let held = shared.remembered_count();
        assert!(held < 130, "1000 results of a 1 ms TTL, inserted over 150 ms, left {held} in memory");
    }

    #[test]
    fn results_still_valid_or_without_ttl_are_never_dropped() {
        let long = CachePolicy { ttl: Some(Duration::from_secs(3600)), reads: &[], scope: CacheScope::Memory };
        assert_eq!(cache_many(long, 0).remembered_count(), 1000);
        assert_eq!(cache_many(CachePolicy::memory(), 0).remembered_count(), 1000);
    }
}
