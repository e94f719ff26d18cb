//! `Resume<S>`: the token that continues a paused thread, and the pauses it answers.
//!
//! A token names the thread, the paused checkpoint, the graph (by name hash and fingerprints)
//! and the pending pauses; never the state. As a string it is URL-safe base64 of a small binary
//! record and its CRC-32 (so a mistyped, truncated or corrupted token is refused rather than
//! read as another thread's), followed by an HMAC-SHA256 signature when the app signs tokens.
//! The checksum catches accidents; only a signature resists deliberate forgery.

use crate::format::checkpoint::{Checkpoint, Identity};
use crate::format::interrupt::{Interrupt, PauseKind};
use crate::vocab::error::Error;
use crate::vocab::name::{CheckpointId, NodeName, ThreadId, START};
use crate::vocab::state::{fingerprint, GraphState};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde::Serialize;
use sha2::Sha256;
use std::fmt;
use std::str::FromStr;

/// Version 2 adds the record's CRC-32.
const TOKEN_VERSION: u8 = 2;
const CHECKSUM_LEN: usize = 4;
const SIGNED: u8 = 1;
const SIGNATURE_LEN: usize = 32;
/// The longest token string accepted.
const MAX_TOKEN_LEN: usize = 64 * 1024;
const MAX_INTERRUPTS: usize = 4096;

/// The token that continues a paused thread: hand it to `app.resume(…)`.
///
/// It travels between request handlers as a string (`Display` / `FromStr`):
///
/// ```
/// # use tea::prelude::*;
/// # #[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
/// # struct Doc { text: String, approved: bool }
/// # fn draft(_: &Doc) -> DocUpdate { Doc::update().text("draft".into()) }
/// # fn publish(_: &Doc) {}
/// # graph! { Review for Doc { start -> draft; draft -> publish; publish -> end; interrupt_before publish; } }
/// let app = Review::builder().checkpointer(MemoryStore::new()).build();
/// let paused = app.invoke(Doc::default())?;
/// let Outcome::Interrupted { resume, .. } = paused else { unreachable!() };
///
/// let token: String = resume.to_string();            // into a response body …
/// let resume: Resume<Doc> = token.parse()?;          // … back from the next request
/// let done = app.resume(resume.update(Doc::update().approved(true)))?;
/// assert!(done.done().unwrap().approved);
/// # Ok::<(), tea::Error>(())
/// ```
pub struct Resume<S: GraphState> {
    pub(crate) token: Token,
    pub(crate) signature: Option<[u8; SIGNATURE_LEN]>,
    pub(crate) update: Option<S::Update>,
    pub(crate) answers: Vec<(Option<String>, serde_json::Value)>,
    pub(crate) answer_error: Option<String>,
}

/// The ids a token carries.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Token {
    pub(crate) graph: u64,
    pub(crate) graph_fingerprint: u64,
    pub(crate) schema_fingerprint: u64,
    pub(crate) pause: CheckpointId,
    pub(crate) thread: ThreadId,
    pub(crate) node: NodeName,
    pub(crate) interrupts: Vec<Interrupt>,
    /// The paused checkpoint's random nonce: a thread deleted and started again under the same
    /// id may pause at the same checkpoint number, but not with the same nonce.
    pub(crate) nonce: u64,
}

/// A signing key (`.sign_tokens(key)`).
#[derive(Clone)]
pub(crate) struct SigningKey(pub(crate) Vec<u8>);

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SigningKey(…)")
    }
}

impl SigningKey {
    fn mac(&self, body: &[u8]) -> Result<Hmac<Sha256>, Error> {
        if self.0.is_empty() {
            return Err(Error::InvalidToken {
                reason: "the app's token signing key is empty; give `.sign_tokens` a non-empty key",
            });
        }
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0)
            .map_err(|_| Error::InvalidToken { reason: "the app's token signing key is unusable" })?;
        mac.update(body);
        Ok(mac)
    }
}

/// A graph name as a token carries it.
pub(crate) fn graph_id(name: &str) -> u64 {
    fingerprint(name.as_bytes())
}

impl<S: GraphState> Resume<S> {
    pub(crate) fn issue(token: Token, key: Option<&SigningKey>) -> Result<Self, Error> {
        let signature = match key {
            Some(key) => Some(key.mac(&token.encode(true))?.finalize().into_bytes().into()),
            None => None,
        };
        Ok(Resume { token, signature, update: None, answers: Vec::new(), answer_error: None })
    }

    /// Checks the signature against the app's key (`None`: the app does not sign tokens).
    pub(crate) fn verify(&self, key: Option<&SigningKey>) -> Result<(), Error> {
        let Some(key) = key else { return Ok(()) };
        let Some(signature) = &self.signature else {
            return Err(Error::InvalidToken { reason: "the token is not signed, and this app requires signed tokens" });
        };
        key.mac(&self.token.encode(true))?.verify_slice(signature).map_err(|_| Error::InvalidToken {
            reason: "the token's signature does not match: it was altered or signed with another key",
        })
    }

    /// The thread this token continues.
    pub fn thread(&self) -> &ThreadId {
        &self.token.thread
    }

    /// The checkpoint the thread paused at: its number in the thread's history, the head the
    /// store must still hold for this token to resume (for `DirStore::checkpoint_path` and
    /// `DirStore::link_pause`).
    pub fn checkpoint(&self) -> CheckpointId {
        self.token.pause
    }

    /// The node where the run paused (with several pauses, the first).
    pub fn node(&self) -> &NodeName {
        &self.token.node
    }

    /// Every pause the thread waits on.
    pub fn interrupts(&self) -> &[Interrupt] {
        &self.token.interrupts
    }

    /// Merges `update` into the state through the reducers before the run continues.
    pub fn update(mut self, update: S::Update) -> Self {
        self.update = Some(update);
        self
    }

    /// Answers the one pending pause with `value` (what the paused node receives).
    pub fn answer(mut self, value: impl Serialize) -> Self {
        self.push_answer(None, value);
        self
    }

    /// Answers the pause with id `id` (see [`Interrupt::id`]) with `value`.
    pub fn answer_to(mut self, id: impl Into<String>, value: impl Serialize) -> Self {
        self.push_answer(Some(id.into()), value);
        self
    }

    fn push_answer(&mut self, id: Option<String>, value: impl Serialize) {
        match serde_json::to_value(value) {
            Ok(value) => self.answers.push((id, value)),
            Err(error) => self.answer_error = Some(error.to_string()),
        }
    }
}

impl Token {
    /// The binary record; `for_signature` leaves out nothing but the signature itself.
    fn encode(&self, signed: bool) -> Vec<u8> {
        let mut out = Vec::with_capacity(96);
        out.push(TOKEN_VERSION);
        out.push(if signed { SIGNED } else { 0 });
        for n in [self.graph, self.graph_fingerprint, self.schema_fingerprint, self.pause] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        put_str(&mut out, self.thread.as_str());
        put_str(&mut out, self.node.as_str());
        out.extend_from_slice(&(self.interrupts.len().min(MAX_INTERRUPTS) as u16).to_le_bytes());
        for interrupt in self.interrupts.iter().take(MAX_INTERRUPTS) {
            out.push(match interrupt.kind {
                PauseKind::Before => 0,
                PauseKind::After => 1,
                PauseKind::Ask => 2,
            });
            put_str(&mut out, &interrupt.id);
            put_str(&mut out, interrupt.node.as_str());
        }
        out.extend_from_slice(&self.nonce.to_le_bytes());
        out
    }

    /// Parses a record, returning the token, whether it says it is signed, and the rest.
    fn decode(bytes: &[u8]) -> Result<(Token, bool, &[u8]), Error> {
        let mut reader = Reader(bytes);
        let version = reader.u8()?;
        if version != TOKEN_VERSION {
            return Err(Error::InvalidToken { reason: "the token is of an unknown version" });
        }
        let signed = match reader.u8()? {
            0 => false,
            SIGNED => true,
            _ => return Err(Error::InvalidToken { reason: "the token's flags are invalid" }),
        };
        let graph = reader.u64()?;
        let graph_fingerprint = reader.u64()?;
        let schema_fingerprint = reader.u64()?;
        let pause = reader.u64()?;
        let thread = ThreadId::from(reader.str()?);
        let node = NodeName::from(reader.str()?.to_owned());
        let count = reader.u16()? as usize;
        let mut interrupts = Vec::with_capacity(count.min(16));
        for _ in 0..count {
            let kind = match reader.u8()? {
                0 => PauseKind::Before,
                1 => PauseKind::After,
                2 => PauseKind::Ask,
                _ => return Err(Error::InvalidToken { reason: "the token names an unknown kind of pause" }),
            };
            let id = reader.str()?.to_owned();
            let node = NodeName::from(reader.str()?.to_owned());
            let mut interrupt = Interrupt::new(id, node, serde_json::Value::Null);
            interrupt.kind = kind;
            interrupts.push(interrupt);
        }
        let nonce = reader.u64()?;
        let token = Token { graph, graph_fingerprint, schema_fingerprint, pause, thread, node, interrupts, nonce };
        Ok((token, signed, reader.0))
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    let bytes = &s.as_bytes()[..s.len().min(u16::MAX as usize)];
    out.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
    out.extend_from_slice(bytes);
}

struct Reader<'a>(&'a [u8]);

const TRUNCATED: Error = Error::InvalidToken { reason: "the token is truncated" };

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        if self.0.len() < n {
            return Err(TRUNCATED);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, Error> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, Error> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u64(&mut self) -> Result<u64, Error> {
        let mut b = [0; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }
    fn str(&mut self) -> Result<&'a str, Error> {
        let len = self.u16()? as usize;
        std::str::from_utf8(self.take(len)?).map_err(|_| Error::InvalidToken { reason: "the token holds invalid text" })
    }
}

impl<S: GraphState> fmt::Display for Resume<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut bytes = self.token.encode(self.signature.is_some());
        let checksum = crc32fast::hash(&bytes);
        bytes.extend_from_slice(&checksum.to_le_bytes());
        if let Some(signature) = &self.signature {
            bytes.extend_from_slice(signature);
        }
        f.write_str(&URL_SAFE_NO_PAD.encode(bytes))
    }
}

impl<S: GraphState> FromStr for Resume<S> {
    type Err = Error;

    /// Parses a token string. Only its form is checked here; `app.resume` checks the signature,
    /// the graph and the thread.
    fn from_str(s: &str) -> Result<Self, Error> {
        if s.len() > MAX_TOKEN_LEN {
            return Err(Error::InvalidToken { reason: "the token is too long" });
        }
        let bytes = URL_SAFE_NO_PAD
            .decode(s.trim())
            .map_err(|_| Error::InvalidToken { reason: "the token is not URL-safe base64" })?;
        let (token, signed, rest) = Token::decode(&bytes)?;
        if rest.len() < CHECKSUM_LEN {
            return Err(TRUNCATED);
        }
        let record_len = bytes.len() - rest.len();
        let (stored, rest) = rest.split_at(CHECKSUM_LEN);
        if crc32fast::hash(&bytes[..record_len]).to_le_bytes() != stored {
            return Err(Error::InvalidToken {
                reason: "the token's checksum does not match: it was mistyped, truncated or altered",
            });
        }
        let signature = match (signed, rest.len()) {
            (false, 0) => None,
            (true, SIGNATURE_LEN) => {
                let mut signature = [0; SIGNATURE_LEN];
                signature.copy_from_slice(rest);
                Some(signature)
            }
            (true, n) if n < SIGNATURE_LEN => return Err(TRUNCATED),
            _ => return Err(Error::InvalidToken { reason: "the token has trailing bytes" }),
        };
        Ok(Resume { token, signature, update: None, answers: Vec::new(), answer_error: None })
    }
}

impl<S: GraphState> Clone for Resume<S> {
    fn clone(&self) -> Self {
        Resume {
            token: self.token.clone(),
            signature: self.signature,
            update: self.update.clone(),
            answers: self.answers.clone(),
            answer_error: self.answer_error.clone(),
        }
    }
}

impl<S: GraphState> fmt::Debug for Resume<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Resume")
            .field("thread", &self.token.thread)
            .field("node", &self.token.node)
            .field("interrupts", &self.token.interrupts)
            .field("signed", &self.signature.is_some())
            .field("update", &self.update)
            .field("answers", &self.answers)
            .finish()
    }
}

/// What a token is made of besides the graph and the thread: the pause (the id of the
/// checkpoint where it was first written, and its nonce) and the pauses it waits on. The machine
/// records it when a run pauses, the API turns it into a [`Resume`] ([`issue`]).
#[derive(Debug)]
pub(crate) struct PauseRecord {
    pub(crate) pause: CheckpointId,
    pub(crate) nonce: u64,
    pub(crate) pending: Vec<Interrupt>,
}

impl PauseRecord {
    /// The pause `ckpt` records (a paused checkpoint read back).
    pub(crate) fn of<S: GraphState>(ckpt: &Checkpoint<S>) -> Self {
        PauseRecord {
            pause: ckpt.pause.unwrap_or_default(),
            nonce: ckpt.nonce.unwrap_or_default(),
            pending: ckpt.pending.clone(),
        }
    }
}

/// The token of pause `record` of `thread`, of the graph `identity` names, signed with `key`.
pub(crate) fn issue<S: GraphState>(
    identity: &Identity<'_>,
    thread: &ThreadId,
    record: &PauseRecord,
    key: Option<&SigningKey>,
) -> Result<Resume<S>, Error> {
    let token = Token {
        graph: graph_id(identity.graph),
        graph_fingerprint: identity.graph_fingerprint,
        schema_fingerprint: identity.schema_fingerprint,
        pause: record.pause,
        nonce: record.nonce,
        thread: thread.clone(),
        node: record.pending.first().map(|i| i.node().clone()).unwrap_or(START),
        interrupts: record.pending.clone(),
    };
    Resume::issue(token, key)
}
