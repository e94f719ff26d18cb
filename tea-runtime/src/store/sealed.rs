//! `Sealed`: checkpoints sealed at rest with XChaCha20-Poly1305 over any [`Checkpointer`], and the
//! `KeyRing` its keys come from (feature `encryption`).
//!
//! A sealed record is `TEAs` (magic), a format version (1), the key id (`u32`, big-endian), a
//! 24-byte nonce and the ciphertext with its 16-byte tag. A store's nonces are a random 16-byte
//! prefix drawn from the OS once per store (shared by its clones) and a counter: never repeated
//! under a key, without a system call per record. The associated data binds the
//! record to its graph, thread and checkpoint id, so a record copied to another thread or another
//! place in the history does not open.

use super::{AppendOutcome, CheckpointId, Checkpointer, StoreFuture};
use crate::error::{Error, SealFailure};
use crate::name::ThreadId;
use base64::Engine as _;
use chacha20poly1305::aead::rand_core::RngCore;
use chacha20poly1305::aead::{Aead, AeadInPlace, KeyInit, OsRng, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const MAGIC: [u8; 4] = *b"TEAs";
const VERSION: u8 = 1;
const NONCE_LEN: usize = 24;
const HEADER_LEN: usize = 4 + 1 + 4 + NONCE_LEN;
const TAG_LEN: usize = 16;

/// Why a key ring's text did not load: the source (a file's path or an environment variable's
/// name), the line (1-based, 0 for the whole text) and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{source_name}:{line}: {reason}")]
pub struct KeyRingError {
    /// The file or environment variable the text came from.
    pub source_name: String,
    /// The line at fault (1-based); 0 when the text as a whole is at fault.
    pub line: usize,
    /// What is wrong.
    pub reason: String,
}

/// The keys of a [`Sealed`] store: one current key, which seals every new record, and older keys,
/// which only open records sealed with them. Each key has an id, written into every record it
/// seals, so keys rotate: put the new key first and keep the old ones after it until no record
/// needs them.
///
/// `Debug` shows the key ids, never the keys.
#[derive(Clone)]
pub struct KeyRing {
    /// Current key first.
    keys: Vec<(u32, XChaCha20Poly1305)>,
}

impl fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyRing").field("current", &self.current_id()).field("ids", &self.ids()).finish()
    }
}

impl KeyRing {
    /// A ring with one key, `id`, current.
    pub fn new(id: u32, key: [u8; 32]) -> Self {
        KeyRing { keys: vec![(id, XChaCha20Poly1305::new(&key.into()))] }
    }

    /// Adds an older key, which opens records sealed with it but seals none. A key of an id the
    /// ring already holds replaces that key (the current one stays current).
    pub fn with_old_key(mut self, id: u32, key: [u8; 32]) -> Self {
        let cipher = XChaCha20Poly1305::new(&key.into());
        match self.keys.iter_mut().find(|(have, _)| *have == id) {
            Some(slot) => slot.1 = cipher,
            None => self.keys.push((id, cipher)),
        }
        self
    }

    /// The id of the key that seals new records.
    pub fn current_id(&self) -> u32 {
        self.keys[0].0
    }

    /// Every key id of the ring, current first.
    pub fn ids(&self) -> Vec<u32> {
        self.keys.iter().map(|(id, _)| *id).collect()
    }

    /// Parses a ring from text: one key a line, `ID:KEY`, where `ID` is a decimal `u32` and
    /// `KEY` 32 bytes as 64 hex digits or as standard base64; the first key is the current one.
    /// Blank lines and lines starting with `#` are skipped. `source_name` names the text in errors.
    pub fn parse(text: &str, source_name: &str) -> Result<Self, KeyRingError> {
        let fail = |line: usize, reason: String| KeyRingError { source_name: source_name.to_owned(), line, reason };
        let mut ring: Option<KeyRing> = None;
        for (index, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let number = index + 1;
            let (id, key) = line.split_once(':').ok_or_else(|| {
                fail(number, "expected `ID:KEY` (a decimal id, a colon, 32 bytes in hex or base64)".into())
            })?;
            let id: u32 = id.trim().parse().map_err(|_| {
                fail(number, format!("key id `{}` is not a decimal number up to {}", id.trim(), u32::MAX))
            })?;
            let key = decode_key(key.trim()).map_err(|reason| fail(number, format!("key {id}: {reason}")))?;
            ring = Some(match ring {
                None => KeyRing::new(id, key),
                Some(ring) if ring.keys.iter().any(|(have, _)| *have == id) => {
                    return Err(fail(number, format!("key id {id} appears twice")));
                }
                Some(ring) => ring.with_old_key(id, key),
            });
        }
        ring.ok_or_else(|| fail(0, "no key (expected lines `ID:KEY`, the current key first)".into()))
    }

    /// [`parse`](Self::parse) of a file's text.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, KeyRingError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| KeyRingError {
            source_name: path.display().to_string(),
            line: 0,
            reason: format!("cannot read the key file: {e}"),
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// [`parse`](Self::parse) of an environment variable's value (the same text as a file).
    pub fn from_env(variable: &str) -> Result<Self, KeyRingError> {
        let text = std::env::var(variable).map_err(|e| KeyRingError {
            source_name: format!("${variable}"),
            line: 0,
            reason: format!("cannot read the variable: {e}"),
        })?;
        Self::parse(&text, &format!("${variable}"))
    }

    fn key(&self, id: u32) -> Option<&XChaCha20Poly1305> {
        self.keys.iter().find(|(have, _)| *have == id).map(|(_, cipher)| cipher)
    }
}

fn decode_key(text: &str) -> Result<[u8; 32], String> {
    let bytes = if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        (0..32).map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).expect("hex digits")).collect()
    } else {
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|e| format!("neither 64 hex digits nor base64 ({e})"))?
    };
    <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| format!("{} bytes, a key is 32", bytes.len()))
}

/// The associated data of a record: it binds the ciphertext to its graph, thread and id.
fn associated_data(graph: &str, thread: &ThreadId, id: CheckpointId) -> Vec<u8> {
    let thread = thread.as_str();
    let mut aad = Vec::with_capacity(16 + graph.len() + thread.len() + 8);
    aad.extend_from_slice(&MAGIC);
    aad.push(VERSION);
    aad.extend_from_slice(&(graph.len() as u64).to_be_bytes());
    aad.extend_from_slice(graph.as_bytes());
    aad.extend_from_slice(&(thread.len() as u64).to_be_bytes());
    aad.extend_from_slice(thread.as_bytes());
    aad.extend_from_slice(&id.to_be_bytes());
    aad
}

/// A [`Checkpointer`] that seals every checkpoint before `inner` stores it and opens it when read
/// back, with the keys of a [`KeyRing`]: XChaCha20-Poly1305 (RustCrypto), a unique nonce per record,
/// the graph, thread and checkpoint id as associated data. Works over any store (memory, sled,
/// dir, PostgreSQL, a store of your own); `threads`, `delete` and `prune` pass through.
///
/// A record that does not open is [`Error::Unsealable`], naming the graph, thread, checkpoint and
/// key id: an unknown key, a tampered or moved record, a clear (never sealed) record unless
/// [`allow_plaintext_reads`](Self::allow_plaintext_reads) is set.
pub struct Sealed<C> {
    inner: C,
    keys: KeyRing,
    allow_plaintext: bool,
    nonces: Arc<Nonces>,
}

/// Where a store's nonces come from: a random prefix drawn from the OS when the store is made,
/// then a counter. Two stores (or processes) draw different prefixes; one store's clones share
/// its counter. (A nonce drawn from the OS per record was a system call per checkpoint.)
struct Nonces {
    prefix: [u8; NONCE_LEN - 8],
    next: AtomicU64,
}

impl Nonces {
    fn new() -> Self {
        let mut prefix = [0; NONCE_LEN - 8];
        OsRng.fill_bytes(&mut prefix);
        Nonces { prefix, next: AtomicU64::new(0) }
    }

    /// A nonce no record sealed by this store (or its clones) had.
    fn next(&self) -> XNonce {
        let mut nonce = XNonce::default();
        nonce[..NONCE_LEN - 8].copy_from_slice(&self.prefix);
        nonce[NONCE_LEN - 8..].copy_from_slice(&self.next.fetch_add(1, Ordering::Relaxed).to_be_bytes());
        nonce
    }
}

impl<C: Clone> Clone for Sealed<C> {
    fn clone(&self) -> Self {
        Sealed {
            inner: self.inner.clone(),
            keys: self.keys.clone(),
            allow_plaintext: self.allow_plaintext,
            nonces: self.nonces.clone(),
        }
    }
}

impl<C> fmt::Debug for Sealed<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sealed")
            .field("keys", &self.keys)
            .field("allow_plaintext_reads", &self.allow_plaintext)
            .finish_non_exhaustive()
    }
}

impl<C: Checkpointer> Sealed<C> {
    /// Seals `inner`'s checkpoints with `keys`' current key; opens them with any key of `keys`.
    pub fn new(inner: C, keys: KeyRing) -> Self {
        Sealed { inner, keys, allow_plaintext: false, nonces: Arc::new(Nonces::new()) }
    }

    /// Reads clear records (written before the store was sealed) as they are, instead of failing
    /// with [`SealFailure::NotSealed`]. New records are sealed either way. Off by default: with it
    /// on, whoever can write the store can slip in a clear record.
    pub fn allow_plaintext_reads(mut self, allow: bool) -> Self {
        self.allow_plaintext = allow;
        self
    }

    /// The store underneath, whose bytes are sealed records.
    pub fn inner(&self) -> &C {
        &self.inner
    }

    /// The ring the store seals and opens with.
    pub fn keys(&self) -> &KeyRing {
        &self.keys
    }

    fn seal(&self, graph: &str, thread: &ThreadId, id: CheckpointId, plain: &[u8]) -> Result<Vec<u8>, Error> {
        let (key_id, cipher) = &self.keys.keys[0];
        let nonce = self.nonces.next();
        let aad = associated_data(graph, thread, id);
        // Sealed in place in the record: one buffer, no copy of the ciphertext.
        let mut record = Vec::with_capacity(HEADER_LEN + plain.len() + TAG_LEN);
        record.extend_from_slice(&MAGIC);
        record.push(VERSION);
        record.extend_from_slice(&key_id.to_be_bytes());
        record.extend_from_slice(&nonce);
        record.extend_from_slice(plain);
        let tag = cipher.encrypt_in_place_detached(&nonce, &aad, &mut record[HEADER_LEN..]).map_err(|_| {
            Error::Unsealable {
                graph: graph.to_owned(),
                thread: thread.clone(),
                checkpoint: id,
                key: Some(*key_id),
                reason: SealFailure::TooLarge,
            }
        })?;
        record.extend_from_slice(&tag);
        Ok(record)
    }

    fn open(&self, graph: &str, thread: &ThreadId, id: CheckpointId, record: Vec<u8>) -> Result<Vec<u8>, Error> {
        let fail = |key: Option<u32>, reason: SealFailure| Error::Unsealable {
            graph: graph.to_owned(),
            thread: thread.clone(),
            checkpoint: id,
            key,
            reason,
        };
        if record.len() < 4 || record[0..4] != MAGIC {
            return if self.allow_plaintext { Ok(record) } else { Err(fail(None, SealFailure::NotSealed)) };
        }
        if record.len() < HEADER_LEN {
            return Err(fail(None, SealFailure::Truncated));
        }
        if record[4] != VERSION {
            return Err(fail(None, SealFailure::UnknownVersion(record[4])));
        }
        let key_id = u32::from_be_bytes(record[5..9].try_into().expect("4 bytes"));
        let cipher = self.keys.key(key_id).ok_or_else(|| fail(Some(key_id), SealFailure::UnknownKey))?;
        let nonce = XNonce::from_slice(&record[9..HEADER_LEN]);
        let aad = associated_data(graph, thread, id);
        cipher
            .decrypt(nonce, Payload { msg: &record[HEADER_LEN..], aad: &aad })
            .map_err(|_| fail(Some(key_id), SealFailure::Tampered))
    }
}

impl<C: Checkpointer> Checkpointer for Sealed<C> {
    fn append(
        &self,
        graph: &str,
        thread: &ThreadId,
        expected: Option<CheckpointId>,
        id: CheckpointId,
        bytes: &[u8],
        durable: bool,
    ) -> Result<AppendOutcome, Error> {
        let record = self.seal(graph, thread, id, bytes)?;
        self.inner.append(graph, thread, expected, id, &record, durable)
    }

    fn head(&self, graph: &str, thread: &ThreadId) -> Result<Option<(CheckpointId, Vec<u8>)>, Error> {
        match self.inner.head(graph, thread)? {
            Some((id, record)) => Ok(Some((id, self.open(graph, thread, id, record)?))),
            None => Ok(None),
        }
    }

    fn get(&self, graph: &str, thread: &ThreadId, id: CheckpointId) -> Result<Option<Vec<u8>>, Error> {
        self.inner.get(graph, thread, id)?.map(|record| self.open(graph, thread, id, record)).transpose()
    }

    fn history(&self, graph: &str, thread: &ThreadId) -> Result<Vec<(CheckpointId, Vec<u8>)>, Error> {
        self.inner
            .history(graph, thread)?
            .into_iter()
            .map(|(id, record)| Ok((id, self.open(graph, thread, id, record)?)))
            .collect()
    }

    fn range(
        &self,
        graph: &str,
        thread: &ThreadId,
        from: CheckpointId,
        to: CheckpointId,
    ) -> Result<Vec<(CheckpointId, Vec<u8>)>, Error> {
        self.inner
            .range(graph, thread, from, to)?
            .into_iter()
            .map(|(id, record)| Ok((id, self.open(graph, thread, id, record)?)))
            .collect()
    }

    fn threads(&self, graph: &str) -> Result<Vec<ThreadId>, Error> {
        self.inner.threads(graph)
    }

    fn delete(&self, graph: &str, thread: &ThreadId) -> Result<bool, Error> {
        self.inner.delete(graph, thread)
    }

    fn prune(&self, graph: &str, thread: &ThreadId, keep_last: usize) -> Result<usize, Error> {
        self.inner.prune(graph, thread, keep_last)
    }

    fn delete_at(&self, graph: &str, thread: &ThreadId, head: CheckpointId) -> Result<bool, Error> {
        self.inner.delete_at(graph, thread, head)
    }

    /// The sealed store's own marks: a thread's rest and its time are kept in clear there.
    fn rest_marks(&self) -> Option<&dyn super::RestMarks> {
        self.inner.rest_marks()
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
        Box::pin(async move {
            let record = self.seal(graph, thread, id, bytes)?;
            self.inner.append_async(graph, thread, expected, id, &record, durable).await
        })
    }

    fn head_async<'a>(
        &'a self,
        graph: &'a str,
        thread: &'a ThreadId,
    ) -> StoreFuture<'a, Option<(CheckpointId, Vec<u8>)>> {
        Box::pin(async move {
            match self.inner.head_async(graph, thread).await? {
                Some((id, record)) => Ok(Some((id, self.open(graph, thread, id, record)?))),
                None => Ok(None),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    /// The nonce of record `id` of thread `t` as `store` keeps it.
    fn nonce(store: &MemoryStore, id: CheckpointId) -> Vec<u8> {
        let record = store.get("g", &ThreadId::from("t"), id).unwrap().unwrap();
        record[9..HEADER_LEN].to_vec()
    }

    #[test]
    fn no_two_records_share_a_nonce_across_clones_and_stores() {
        let (inner, other_inner) = (MemoryStore::new(), MemoryStore::new());
        let keys = KeyRing::new(1, [7; 32]);
        let (store, other) = (Sealed::new(inner.clone(), keys.clone()), Sealed::new(other_inner.clone(), keys));
        let copy = store.clone();
        let t = ThreadId::from("t");
        store.append("g", &t, None, 1, b"one", false).unwrap();
        copy.append("g", &t, Some(1), 2, b"two", false).unwrap();
        other.append("g", &t, None, 1, b"one", false).unwrap();
        let nonces = [nonce(&inner, 1), nonce(&inner, 2), nonce(&other_inner, 1)];
        assert_ne!(nonces[0], nonces[1], "a clone shares its store's counter");
        assert_ne!(nonces[0][..16], nonces[2][..16], "each store draws its own prefix");
        assert_eq!(store.get("g", &t, 2).unwrap().as_deref(), Some(&b"two"[..]));
        assert_eq!(other.head("g", &t).unwrap().map(|(_, bytes)| bytes).as_deref(), Some(&b"one"[..]));
    }
}
