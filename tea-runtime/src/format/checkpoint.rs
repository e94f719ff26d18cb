//! What a checkpoint holds and how it is framed on disk.
//!
//! A checkpoint is an *envelope* — magic, format version, lengths, graph name, graph and schema
//! fingerprints, a CRC-32 — around a serde_json *payload*: the state, where the run stands, and
//! the pauses it waits on. The envelope is checked in full before a byte of payload is decoded,
//! and every length in it is bounded, so stored bytes can never cause a panic or an unbounded
//! allocation.

use crate::format::interrupt::Interrupt;
use crate::vocab::error::Error;
use crate::vocab::name::CheckpointId;
use crate::vocab::name::{NodeName, ThreadId};
use crate::vocab::state::GraphState;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The magic of a full record: the whole payload (what every version of tea writes and reads).
const MAGIC: [u8; 4] = *b"TEAc";
/// The magic of a delta record ([`delta`](super::delta)): its payload is the id of the full
/// record it folds from (8 bytes, little-endian), then its patch as JSON. Same envelope
/// otherwise; a tea that predates delta records refuses it as not a checkpoint.
const DELTA_MAGIC: [u8; 4] = *b"TEAd";
const FORMAT_VERSION: u16 = 1;
const HEADER_LEN: usize = 32;
/// The longest graph name an envelope carries.
const MAX_NAME_LEN: usize = 1024;
/// The largest payload read back from a store.
pub(crate) const MAX_PAYLOAD_LEN: usize = 256 << 20;

/// Where a run stands, as a checkpoint records it.
#[derive(Serialize, Deserialize)]
#[serde(bound = "", rename_all = "snake_case")]
pub(crate) enum Position<S: GraphState> {
    /// Nothing has run yet.
    Start,
    /// `node` runs next.
    Before(NodeName),
    /// `node` ran; routing from it comes next (`goto`: what a router chose).
    After {
        node: NodeName,
        /// Absent rather than `null`: a payload with no `null` is not decoded again to check it
        /// reads back (`check_reads_back`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        goto: Option<Target>,
    },
    /// The fan-out after `source` is under way; `branches` is empty before it starts.
    Fork { source: NodeName, branches: Vec<BranchProgress<S>> },
    /// The run reached `end`.
    Done,
}

/// A routing target by name.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Target {
    Node(NodeName),
    End,
}

/// One branch of a fan-out under way: where it stands, and what it wrote so far.
///
/// Its own state is the fan-out's state (the checkpoint's `state`, or the outer branch's at a
/// nested fan-out) with `input` and then `updates` applied, so checkpoints do not store it: a
/// fan-out of many branches writes each branch's updates, not a copy of the state per branch.
#[derive(Serialize, Deserialize)]
#[serde(bound = "")]
pub(crate) struct BranchProgress<S: GraphState> {
    pub(crate) head: NodeName,
    /// The branch's own state, when it is at hand (in memory, or read from a checkpoint of an
    /// earlier version of tea, which stored it): never written.
    #[serde(default, skip_serializing)]
    pub(crate) state: Option<Box<S>>,
    /// A send's input, applied to the fan-out's state before the branch's first node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) input: Option<S::Update>,
    pub(crate) updates: Vec<S::Update>,
    /// The node that wrote each of `updates` (a panicking reducer is reported on it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) origins: Vec<NodeName>,
    pub(crate) steps: u64,
    pub(crate) at: BranchAt,
    /// The answers to the earlier pauses of the node the branch stopped at.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) answers: Vec<serde_json::Value>,
    /// The pause the branch waits on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) pending: Option<Box<Interrupt>>,
    /// The further pauses the branch waits on: a subgraph node's child that paused on several.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) more_pending: Vec<Interrupt>,
    /// The branch continues on this resume (its pause was answered, or is a breakpoint).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) resume: bool,
    /// At a fan-out inside the branch (`at` is [`BranchAt::Fork`]): its branches' progress.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) branches: Vec<BranchProgress<S>>,
    /// The branch (in a child graph) ended with `Command::parent`: where it routes the parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) jump: Option<Box<ParentJump>>,
}

impl<S: GraphState> BranchProgress<S> {
    /// A branch that has not started: it runs from `head` (its breakpoints still stop it).
    pub(crate) fn fresh(head: NodeName) -> Self {
        BranchProgress {
            at: BranchAt::Start(head.clone()),
            head,
            state: None,
            input: None,
            updates: Vec::new(),
            origins: Vec::new(),
            steps: 0,
            answers: Vec::new(),
            pending: None,
            more_pending: Vec::new(),
            resume: true,
            branches: Vec::new(),
            jump: None,
        }
    }

    /// A copy, with its own state only if `with_state`.
    pub(crate) fn copy(&self, with_state: bool) -> Self {
        BranchProgress {
            head: self.head.clone(),
            state: if with_state { self.state.clone() } else { None },
            input: self.input.clone(),
            updates: self.updates.clone(),
            origins: self.origins.clone(),
            steps: self.steps,
            at: self.at.clone(),
            answers: self.answers.clone(),
            pending: self.pending.clone(),
            more_pending: self.more_pending.clone(),
            resume: self.resume,
            branches: self.branches.iter().map(|b| b.copy(with_state)).collect(),
            jump: self.jump.clone(),
        }
    }
}

impl<S: GraphState> BranchProgress<S> {
    /// Writes the progress as JSON to `out`, as [`ProgressRef::write_json`] does.
    pub(crate) fn write_json(&self, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
        ProgressRef {
            head: &self.head,
            input: self.input.as_ref(),
            updates: &self.updates,
            origins: &self.origins,
            steps: self.steps,
            at: &self.at,
            answers: &self.answers,
            pending: self.pending.as_deref(),
            more_pending: &self.more_pending,
            resume: self.resume,
            branches: &self.branches,
            jump: self.jump.as_deref(),
        }
        .write_json(out)
    }
}

/// A [`BranchProgress`] by reference (without its state): what a branch records of itself is
/// written from what it holds, with nothing copied.
pub(crate) struct ProgressRef<'a, S: GraphState> {
    pub(crate) head: &'a NodeName,
    pub(crate) input: Option<&'a S::Update>,
    pub(crate) updates: &'a [S::Update],
    pub(crate) origins: &'a [NodeName],
    pub(crate) steps: u64,
    pub(crate) at: &'a BranchAt,
    pub(crate) answers: &'a [serde_json::Value],
    pub(crate) pending: Option<&'a Interrupt>,
    pub(crate) more_pending: &'a [Interrupt],
    pub(crate) resume: bool,
    pub(crate) branches: &'a [BranchProgress<S>],
    pub(crate) jump: Option<&'a ParentJump>,
}

impl<S: GraphState> ProgressRef<'_, S> {
    /// Writes the progress as JSON to `out`: the bytes [`BranchProgress`]'s `Serialize`
    /// writes (serde_json, compact), with its own keys, node names and numbers written
    /// directly. A fan-out writes every branch's progress in its records and each branch's in
    /// its patches; serde_json escapes each key byte by byte through a map serializer per
    /// field, which cost a branch's progress more than its updates did. The updates, input,
    /// answers, pauses and parent jump are still serde_json's.
    pub(crate) fn write_json(&self, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
        out.extend_from_slice(b"{\"head\":");
        push_name(out, self.head)?;
        if let Some(input) = self.input {
            out.extend_from_slice(b",\"input\":");
            serde_json::to_writer(&mut *out, input)?;
        }
        out.extend_from_slice(b",\"updates\":");
        serde_json::to_writer(&mut *out, self.updates)?;
        if !self.origins.is_empty() {
            out.extend_from_slice(b",\"origins\":[");
            for (i, origin) in self.origins.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                push_name(out, origin)?;
            }
            out.push(b']');
        }
        out.extend_from_slice(b",\"steps\":");
        push_u64(out, self.steps);
        out.extend_from_slice(b",\"at\":");
        self.at.write_json(out)?;
        if !self.answers.is_empty() {
            out.extend_from_slice(b",\"answers\":");
            serde_json::to_writer(&mut *out, self.answers)?;
        }
        if let Some(pending) = self.pending {
            out.extend_from_slice(b",\"pending\":");
            serde_json::to_writer(&mut *out, pending)?;
        }
        if !self.more_pending.is_empty() {
            out.extend_from_slice(b",\"more_pending\":");
            serde_json::to_writer(&mut *out, self.more_pending)?;
        }
        if self.resume {
            out.extend_from_slice(b",\"resume\":true");
        }
        if !self.branches.is_empty() {
            out.extend_from_slice(b",\"branches\":");
            write_branches(out, self.branches, &[])?;
        }
        if let Some(jump) = self.jump {
            out.extend_from_slice(b",\"jump\":");
            serde_json::to_writer(&mut *out, jump)?;
        }
        out.push(b'}');
        Ok(())
    }
}

/// Writes `branches` as a JSON array of their progress ([`BranchProgress::write_json`]); a
/// branch whose progress `texts` holds (by index: its JSON, written as the branch recorded it,
/// see `machine::journal`) is written from that.
pub(crate) fn write_branches<S: GraphState>(
    out: &mut Vec<u8>,
    branches: &[BranchProgress<S>],
    texts: &[Option<Vec<u8>>],
) -> Result<(), serde_json::Error> {
    out.push(b'[');
    for (i, branch) in branches.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        match texts.get(i) {
            Some(Some(text)) => out.extend_from_slice(text),
            _ => branch.write_json(out)?,
        }
    }
    out.push(b']');
    Ok(())
}

/// Writes `name` as a JSON string, as serde_json does: directly when nothing in it needs an
/// escape (a node name, almost always), else through serde_json.
fn push_name(out: &mut Vec<u8>, name: &NodeName) -> Result<(), serde_json::Error> {
    let name = name.as_str();
    if name.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.reserve(name.len() + 2);
        out.push(b'"');
        out.extend_from_slice(name.as_bytes());
        out.push(b'"');
        Ok(())
    } else {
        serde_json::to_writer(&mut *out, name)
    }
}

impl BranchAt {
    /// Writes where the branch stands as JSON to `out`, the bytes its `Serialize` writes.
    fn write_json(&self, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
        match self {
            BranchAt::Joined => out.extend_from_slice(b"\"joined\""),
            BranchAt::Start(node) => {
                out.extend_from_slice(b"{\"start\":");
                push_name(out, node)?;
                out.push(b'}');
            }
            BranchAt::Before(node) => {
                out.extend_from_slice(b"{\"before\":");
                push_name(out, node)?;
                out.push(b'}');
            }
            BranchAt::After { node, goto } => {
                out.extend_from_slice(b"{\"after\":{\"node\":");
                push_name(out, node)?;
                if let Some(goto) = goto {
                    out.extend_from_slice(b",\"goto\":");
                    serde_json::to_writer(&mut *out, goto)?;
                }
                out.extend_from_slice(b"}}");
            }
            BranchAt::Fork { source } => {
                out.extend_from_slice(b"{\"fork\":{\"source\":");
                push_name(out, source)?;
                out.extend_from_slice(b"}}");
            }
        }
        Ok(())
    }
}

/// Where a branch stands.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum BranchAt {
    /// The branch reached its join.
    Joined,
    /// The branch (a send) has not started; `node` runs first, its breakpoints stopping it.
    Start(NodeName),
    /// The branch stopped before `node`.
    Before(NodeName),
    /// The branch stopped after `node` ran.
    After {
        node: NodeName,
        /// Absent rather than `null`: a payload with no `null` is not decoded again to check it
        /// reads back (`check_reads_back`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        goto: Option<Target>,
    },
    /// The fan-out after `source`, inside the branch, is under way (its branches are the
    /// progress's `branches`).
    Fork { source: NodeName },
}

/// A checkpoint's payload.
#[derive(Serialize, Deserialize)]
#[serde(bound = "")]
pub(crate) struct Checkpoint<S: GraphState> {
    /// Node runs so far.
    pub(crate) step: u64,
    pub(crate) state: S,
    pub(crate) at: Position<S>,
    /// The pauses this checkpoint waits on; empty unless the run is paused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) pending: Vec<Interrupt>,
    /// For a paused checkpoint, the id of the checkpoint where the pause was first written (a
    /// failed resume writes the pause again under a new id, keeping this one): tokens name it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) pause: Option<CheckpointId>,
    /// The run was resumed past the pause recorded at its position (a resume claimed the
    /// thread): continuing from here does not stop at that pause again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) resumed: bool,
    /// The answers to the earlier pauses of the node at `at` (an interruptible node is run again
    /// with them, its calls matched in order).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) answers: Vec<serde_json::Value>,
    /// When the pause began, in seconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) paused_at: Option<u64>,
    /// A random number drawn when the pause was first written; tokens carry it, so a token of a
    /// deleted thread never resumes a new thread of the same id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) nonce: Option<u64>,
    /// The branches' own states, for a join about to run that reads them (`ctx.branches()`):
    /// kept so that the join sees them after a pause before it, a pause inside it, or a recover.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) joined: Vec<BranchState<S>>,
    /// A child graph's run that ended with `Command::parent`: where it routes its parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) parent: Option<ParentJump>,
    /// The run that owns the thread while it runs, and until when: see [`Lease`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) lease: Option<Lease>,
    /// When the checkpoint was written, in milliseconds since the Unix epoch (absent in
    /// checkpoints of earlier versions of tea).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) written_at: Option<u64>,
}

/// A [`Checkpoint`] to write, with what the run holds borrowed rather than copied (its state,
/// its answers, its join's branch states): what a run writes at each step, a claim and a pause.
/// Serializes exactly as a `Checkpoint` of the same values (the same fields, in the same order,
/// left out when empty in the same way).
#[derive(Serialize)]
#[serde(bound = "")]
pub(crate) struct CheckpointRef<'a, S: GraphState> {
    pub(crate) step: u64,
    pub(crate) state: &'a S,
    pub(crate) at: AtRef<'a, S>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) pending: Vec<Interrupt>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) pause: Option<CheckpointId>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) resumed: bool,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub(crate) answers: &'a [serde_json::Value],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) paused_at: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) nonce: Option<u64>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub(crate) joined: &'a [BranchState<S>],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) parent: Option<&'a ParentJump>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) lease: Option<Lease>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) written_at: Option<u64>,
}

/// A live run's claim on its thread: `recover` of a thread whose lease has not expired is
/// `Error::ThreadBusy`. Renewed as the run advances; released (absent) at pauses, at the end
/// and when the run fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Lease {
    /// The owner: random per run.
    pub(crate) owner: u64,
    /// Milliseconds since the Unix epoch after which the owner counts as gone.
    pub(crate) until: u64,
}

impl Lease {
    /// Writes the lease as JSON to `out`: the bytes its `Serialize` writes.
    pub(crate) fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"owner\":");
        push_u64(out, self.owner);
        out.extend_from_slice(b",\"until\":");
        push_u64(out, self.until);
        out.push(b'}');
    }
}

/// What identifies the graph a checkpoint belongs to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Identity<'a> {
    pub(crate) graph: &'a str,
    pub(crate) graph_fingerprint: u64,
    pub(crate) schema_fingerprint: u64,
}

/// Where a run stands, as a step's checkpoint writes it ([`CheckpointRef`]): a fan-out's
/// branches borrowed from the run rather than copied to be written.
pub(crate) enum AtRef<'a, S: GraphState> {
    /// Anything else (small, owned).
    Position(Position<S>),
    /// A fan-out under way, written as [`Position::Fork`] is.
    Fork { source: NodeName, branches: &'a [BranchProgress<S>] },
}

impl<S: GraphState> AtRef<'_, S> {
    /// The fan-out's branches, when the run stands at one.
    pub(crate) fn branches(&self) -> Option<&[BranchProgress<S>]> {
        match self {
            AtRef::Fork { branches, .. } => Some(branches),
            AtRef::Position(Position::Fork { branches, .. }) => Some(branches),
            AtRef::Position(_) => None,
        }
    }
}

impl<S: GraphState> Serialize for AtRef<'_, S> {
    fn serialize<Z: serde::Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
        match self {
            AtRef::Position(position) => position.serialize(serializer),
            AtRef::Fork { source, branches } => ForkAt::Fork { source, branches, texts: &[] }.serialize(serializer),
        }
    }
}

/// A checkpoint of a fan-out under way, as its branches' progress is written while they run
/// (`machine::journal`): a [`Checkpoint`] at [`Position::Fork`] by reference, so that writing it
/// copies neither the state nor the branches.
#[derive(Serialize)]
#[serde(bound = "")]
pub(crate) struct ForkCheckpoint<'a, S: GraphState> {
    pub(crate) step: u64,
    pub(crate) state: &'a S,
    pub(crate) at: ForkAt<'a, S>,
    pub(crate) lease: Option<Lease>,
    pub(crate) written_at: Option<u64>,
}

/// [`Position::Fork`] by reference.
#[derive(Serialize)]
#[serde(bound = "", rename_all = "snake_case")]
pub(crate) enum ForkAt<'a, S: GraphState> {
    Fork {
        source: &'a NodeName,
        branches: &'a [BranchProgress<S>],
        /// The progress of branches already written as JSON, by index: a branch with one is
        /// written from it (what its entry in `branches` holds is older). Not serialized:
        /// `Serialize` writes what `branches` holds.
        #[serde(skip)]
        texts: &'a [Option<Vec<u8>>],
    },
}

/// Frames `payload` in an envelope, serializing it straight into the output buffer.
pub(crate) fn encode<S: GraphState>(identity: &Identity, payload: &Checkpoint<S>) -> Result<Vec<u8>, Error> {
    encode_payload(identity, payload)
}

/// Frames the checkpoint `payload` borrows in an envelope, as [`encode`] frames a
/// [`Checkpoint`] (the same bytes).
pub(crate) fn encode_ref<S: GraphState>(identity: &Identity, payload: &CheckpointRef<'_, S>) -> Result<Vec<u8>, Error> {
    let branches = payload.at.branches().map_or(0, <[_]>::len);
    frame_with(identity, MAGIC, &[], BRANCH_BYTES * branches, |out| payload.write_json(out))
}

/// About how many bytes a branch's progress takes in a record: what a fan-out's record reserves
/// per branch, so that its buffer is not grown and copied over and over as it is written.
pub(crate) const BRANCH_BYTES: usize = 96;

impl<S: GraphState> CheckpointRef<'_, S> {
    /// Writes the payload as JSON to `out`: the bytes its `Serialize` writes (as serde_json
    /// writes them, compact), with the envelope's own keys and numbers written directly. What
    /// a run writes at every step: serde_json escapes each key of a struct byte by byte and
    /// goes through a map serializer per field, which cost a small checkpoint about a third of
    /// its encoding; the state, position, pauses, answers and parent jump are still serde_json's.
    fn write_json(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        fn json<T: Serialize + ?Sized>(out: &mut Vec<u8>, key: &[u8], value: &T) -> Result<(), Error> {
            out.extend_from_slice(key);
            serde_json::to_writer(&mut *out, value).map_err(Error::store)
        }
        fn number(out: &mut Vec<u8>, key: &[u8], value: u64) {
            out.extend_from_slice(key);
            push_u64(out, value);
        }
        number(out, b"{\"step\":", self.step);
        json(out, b",\"state\":", self.state)?;
        let fork = match &self.at {
            AtRef::Fork { source, branches } => Some((source, *branches)),
            AtRef::Position(Position::Fork { source, branches }) => Some((source, branches.as_slice())),
            AtRef::Position(_) => None,
        };
        match fork {
            Some((source, branches)) => {
                out.extend_from_slice(b",\"at\":{\"fork\":{\"source\":");
                push_name(out, source).map_err(Error::store)?;
                out.extend_from_slice(b",\"branches\":");
                write_branches(out, branches, &[]).map_err(Error::store)?;
                out.extend_from_slice(b"}}");
            }
            None => json(out, b",\"at\":", &self.at)?,
        }
        if !self.pending.is_empty() {
            json(out, b",\"pending\":", &self.pending)?;
        }
        if let Some(pause) = self.pause {
            number(out, b",\"pause\":", pause);
        }
        if self.resumed {
            out.extend_from_slice(b",\"resumed\":true");
        }
        if !self.answers.is_empty() {
            json(out, b",\"answers\":", self.answers)?;
        }
        if let Some(paused_at) = self.paused_at {
            number(out, b",\"paused_at\":", paused_at);
        }
        if let Some(nonce) = self.nonce {
            number(out, b",\"nonce\":", nonce);
        }
        if !self.joined.is_empty() {
            json(out, b",\"joined\":", self.joined)?;
        }
        if let Some(parent) = self.parent {
            json(out, b",\"parent\":", parent)?;
        }
        if let Some(Lease { owner, until }) = self.lease {
            number(out, b",\"lease\":{\"owner\":", owner);
            number(out, b",\"until\":", until);
            out.push(b'}');
        }
        if let Some(written_at) = self.written_at {
            number(out, b",\"written_at\":", written_at);
        }
        out.push(b'}');
        Ok(())
    }
}

/// Appends `value` in decimal, as serde_json writes a `u64` (with `itoa`, as it does).
pub(crate) fn push_u64(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

/// Frames a whole payload, as a JSON value, in an envelope: a full record.
pub(crate) fn encode_value(identity: &Identity, payload: &serde_json::Value) -> Result<Vec<u8>, Error> {
    encode_payload(identity, payload)
}

#[cfg(test)]
/// Frames `patch` ([`delta`](super::delta)) as a delta record that folds from full record
/// `from`.
pub(crate) fn encode_delta(
    identity: &Identity,
    from: CheckpointId,
    patch: &serde_json::Value,
) -> Result<Vec<u8>, Error> {
    frame(identity, DELTA_MAGIC, &from.to_le_bytes(), patch)
}

/// Frames a patch that `write` writes (as JSON, see [`delta::diff_text`](super::delta::diff_text))
/// as a delta record that folds from full record `from`.
pub(crate) fn encode_delta_with(
    identity: &Identity,
    from: CheckpointId,
    write: impl FnOnce(&mut Vec<u8>) -> Result<(), Error>,
) -> Result<Vec<u8>, Error> {
    frame_with(identity, DELTA_MAGIC, &from.to_le_bytes(), 0, write)
}

/// Frames a fan-out's checkpoint under way in an envelope: a full record.
pub(crate) fn encode_fork<S: GraphState>(
    identity: &Identity,
    payload: &ForkCheckpoint<'_, S>,
) -> Result<Vec<u8>, Error> {
    let ForkAt::Fork { branches, .. } = &payload.at;
    frame_with(identity, MAGIC, &[], BRANCH_BYTES * branches.len(), |out| payload.write_json(out).map_err(Error::store))
}

impl<S: GraphState> ForkCheckpoint<'_, S> {
    /// Writes the payload as JSON to `out`: the bytes its `Serialize` writes, the branches
    /// through [`write_branches`].
    fn write_json(&self, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
        out.extend_from_slice(b"{\"step\":");
        push_u64(out, self.step);
        out.extend_from_slice(b",\"state\":");
        serde_json::to_writer(&mut *out, self.state)?;
        let ForkAt::Fork { source, branches, texts } = &self.at;
        out.extend_from_slice(b",\"at\":{\"fork\":{\"source\":");
        push_name(out, source)?;
        out.extend_from_slice(b",\"branches\":");
        write_branches(out, branches, texts)?;
        out.extend_from_slice(b"}},\"lease\":");
        match self.lease {
            Some(lease) => lease.write_json(out),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"written_at\":");
        match self.written_at {
            Some(at) => push_u64(out, at),
            None => out.extend_from_slice(b"null"),
        }
        out.push(b'}');
        Ok(())
    }
}

/// The payload of a full record this process framed (its JSON).
pub(crate) fn payload(envelope: &[u8]) -> &[u8] {
    let name_len = envelope.get(6..8).map_or(0, |len| u16::from_le_bytes([len[0], len[1]]) as usize);
    envelope.get(HEADER_LEN + name_len.min(MAX_NAME_LEN)..).unwrap_or_default()
}

/// The bytes a delta record of graph `identity` takes besides its patch.
pub(crate) fn delta_overhead(identity: &Identity) -> usize {
    HEADER_LEN + identity.graph.len().min(MAX_NAME_LEN) + 8
}

fn encode_payload<P: Serialize>(identity: &Identity, payload: &P) -> Result<Vec<u8>, Error> {
    frame(identity, MAGIC, &[], payload)
}

/// An envelope of kind `magic` around `prefix` then `payload` as JSON.
fn frame<P: Serialize>(identity: &Identity, magic: [u8; 4], prefix: &[u8], payload: &P) -> Result<Vec<u8>, Error> {
    frame_with(identity, magic, prefix, 0, |out| serde_json::to_writer(out, payload).map_err(Error::store))
}

/// An envelope of kind `magic` around `prefix` then what `write` writes (`extra`: how many
/// bytes beyond a small payload to reserve for it).
fn frame_with(
    identity: &Identity,
    magic: [u8; 4],
    prefix: &[u8],
    extra: usize,
    write: impl FnOnce(&mut Vec<u8>) -> Result<(), Error>,
) -> Result<Vec<u8>, Error> {
    let name = identity.graph.as_bytes();
    let mut out = Vec::with_capacity(HEADER_LEN + name.len() + 256 + extra);
    out.extend_from_slice(&magic);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(name.len().min(MAX_NAME_LEN) as u16).to_le_bytes());
    out.extend_from_slice(&identity.graph_fingerprint.to_le_bytes());
    out.extend_from_slice(&identity.schema_fingerprint.to_le_bytes());
    out.extend_from_slice(&[0; 8]); // payload length and checksum, filled in below
    out.extend_from_slice(&name[..name.len().min(MAX_NAME_LEN)]);
    let start = out.len();
    out.extend_from_slice(prefix);
    write(&mut out)?;
    let payload_len = out.len() - start;
    if payload_len > MAX_PAYLOAD_LEN {
        return Err(Error::store(format!(
            "a checkpoint of graph `{}` would be {payload_len} bytes, over the {MAX_PAYLOAD_LEN}-byte limit",
            identity.graph
        )));
    }
    out[24..28].copy_from_slice(&(payload_len as u32).to_le_bytes());
    let checksum = checksum(&out);
    out[28..32].copy_from_slice(&checksum.to_le_bytes());
    Ok(out)
}

/// CRC-32 of an envelope, its checksum field excluded.
fn checksum(envelope: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&envelope[..28]);
    hasher.update(&envelope[32..]);
    hasher.finalize()
}

/// An envelope checked for integrity (magic, version, lengths, checksum), not yet against a
/// graph: its graph name, fingerprints and payload.
struct Opened<'b> {
    /// A delta record: the id of the full record it folds from (its payload is its patch).
    from: Option<CheckpointId>,
    name: &'b [u8],
    graph_fingerprint: u64,
    schema_fingerprint: u64,
    payload: &'b [u8],
}

/// Checks the integrity of the envelope of checkpoint `id` of `thread`.
fn open<'b>(bytes: &'b [u8], thread: &ThreadId, id: CheckpointId) -> Result<Opened<'b>, Error> {
    let corrupt = |reason: String| Error::CorruptCheckpoint { thread: thread.clone(), checkpoint: id, reason };
    if bytes.len() < HEADER_LEN {
        return Err(corrupt(format!("{} bytes is shorter than a checkpoint header", bytes.len())));
    }
    if bytes[0..4] == *b"TEAs" {
        return Err(corrupt(
            "the bytes are a sealed record: open the store with its key ring (`Sealed::new` in Rust, \
             `Engine::encrypt_with` for a YAML agent, `--encryption-keys FILE` or TEA_ENCRYPTION_KEYS for `tea`)"
                .into(),
        ));
    }
    let is_delta = bytes[0..4] == DELTA_MAGIC;
    if bytes[0..4] != MAGIC && !is_delta {
        return Err(corrupt("the bytes are not a tea checkpoint (bad magic)".into()));
    }
    let version = u16::from_le_bytes([bytes[4], bytes[5]]);
    if version != FORMAT_VERSION {
        return Err(corrupt(format!(
            "checkpoint format version {version} is not supported (this tea reads {FORMAT_VERSION})"
        )));
    }
    let name_len = u16::from_le_bytes([bytes[6], bytes[7]]) as usize;
    let payload_len = u32::from_le_bytes([bytes[24], bytes[25], bytes[26], bytes[27]]) as usize;
    if name_len > MAX_NAME_LEN || payload_len > MAX_PAYLOAD_LEN {
        return Err(corrupt("the header announces more bytes than a checkpoint may hold".into()));
    }
    if bytes.len() != HEADER_LEN + name_len + payload_len {
        return Err(corrupt(format!(
            "the checkpoint is {} bytes but its header announces {}",
            bytes.len(),
            HEADER_LEN + name_len + payload_len
        )));
    }
    let stored = u32::from_le_bytes([bytes[28], bytes[29], bytes[30], bytes[31]]);
    if checksum(bytes) != stored {
        return Err(corrupt("checksum mismatch: the bytes were altered".into()));
    }
    let name = &bytes[HEADER_LEN..HEADER_LEN + name_len];
    let graph_fingerprint = u64::from_le_bytes(bytes[8..16].try_into().unwrap_or_default());
    let schema_fingerprint = u64::from_le_bytes(bytes[16..24].try_into().unwrap_or_default());
    let mut payload = &bytes[HEADER_LEN + name_len..];
    let mut from = None;
    if is_delta {
        let Some((base, patch)) = payload.split_first_chunk::<8>() else {
            return Err(corrupt("a delta record is shorter than its header".into()));
        };
        let base = u64::from_le_bytes(*base);
        if base == 0 || (id != 0 && base >= id) {
            return Err(corrupt(format!("a delta record folds from checkpoint {base}, which is not before it")));
        }
        from = Some(base);
        payload = patch;
    }
    Ok(Opened { from, name, graph_fingerprint, schema_fingerprint, payload })
}

/// Opens a full record: a delta's payload is a patch, which reads only folded onto the records
/// before it (`store::fold`).
fn open_full<'b>(bytes: &'b [u8], thread: &ThreadId, id: CheckpointId) -> Result<Opened<'b>, Error> {
    let opened = open(bytes, thread, id)?;
    if let Some(from) = opened.from {
        return Err(Error::CorruptCheckpoint {
            thread: thread.clone(),
            checkpoint: id,
            reason: format!(
                "it is a delta record (what changed since the record before it, folding from checkpoint {from}): \
                 read it through its store, not alone"
            ),
        });
    }
    Ok(opened)
}

/// The full record a record folds from, if `bytes` are a sound delta record (`None` for a
/// full record, and for bytes that are no record, which the decoders then report).
pub(crate) fn delta_base(bytes: &[u8], thread: &ThreadId, id: CheckpointId) -> Option<CheckpointId> {
    if bytes.len() < HEADER_LEN || bytes[0..4] != DELTA_MAGIC {
        return None;
    }
    open(bytes, thread, id).ok().and_then(|opened| opened.from)
}

/// Checkpoint `records` (ascending ids, each one after the other) folded: a full record first,
/// then delta records, each applied to what the records before it hold. The last record as a
/// full record, in an envelope of the same graph and fingerprints.
///
/// # Errors
/// [`Error::CorruptCheckpoint`] naming the record that does not fold: damaged, of another
/// graph or fingerprints than the first, a gap in the ids, a patch that does not fit.
pub(crate) fn fold(records: &[(CheckpointId, Vec<u8>)], thread: &ThreadId) -> Result<Vec<u8>, Error> {
    let mut folder = Folder::default();
    let mut last = None;
    for (id, bytes) in records {
        last = Some(folder.next(*id, bytes, thread)?);
    }
    last.ok_or_else(|| Error::CheckpointNotFound { thread: thread.clone() })
}

/// Folds a thread's records one after the other, oldest first ([`fold`]).
#[derive(Default)]
pub(crate) struct Folder {
    /// The id, envelope header fields and payload of the record before.
    before: Option<(CheckpointId, String, u64, u64, serde_json::Value)>,
}

impl Folder {
    /// Record `id` (`bytes`, the one after the record before, unless it is a full record) as a
    /// full record. A full record is returned as it is.
    pub(crate) fn next(&mut self, id: CheckpointId, bytes: &[u8], thread: &ThreadId) -> Result<Vec<u8>, Error> {
        let corrupt = |reason: String| Error::CorruptCheckpoint { thread: thread.clone(), checkpoint: id, reason };
        let opened = open(bytes, thread, id)?;
        let name = String::from_utf8_lossy(opened.name).into_owned();
        let mut payload: serde_json::Value = match opened.from {
            Some(from) => {
                let Some((before, graph, graph_fingerprint, schema_fingerprint, mut value)) = self.before.take() else {
                    return Err(corrupt(format!(
                        "it is a delta record folding from checkpoint {from}, which is no longer stored (pruned)"
                    )));
                };
                if before + 1 != id {
                    return Err(corrupt(format!("it is a delta record, and checkpoint {} is missing", before + 1)));
                }
                if graph != name
                    || graph_fingerprint != opened.graph_fingerprint
                    || schema_fingerprint != opened.schema_fingerprint
                {
                    return Err(corrupt(
                        "it is a delta record of another graph or shape than the record before it".into(),
                    ));
                }
                let patch: serde_json::Value = serde_json::from_slice(opened.payload)
                    .map_err(|e| corrupt(format!("the delta's patch does not decode: {e}")))?;
                super::delta::apply(&mut value, patch).map_err(|e| corrupt(format!("the delta does not fold: {e}")))?;
                value
            }
            None => serde_json::from_slice(opened.payload)
                .map_err(|e| corrupt(format!("the payload does not decode: {e}")))?,
        };
        let identity = Identity {
            graph: &name,
            graph_fingerprint: opened.graph_fingerprint,
            schema_fingerprint: opened.schema_fingerprint,
        };
        let full = if opened.from.is_some() { encode_payload(&identity, &payload)? } else { bytes.to_vec() };
        let value = std::mem::take(&mut payload);
        self.before = Some((id, name, opened.graph_fingerprint, opened.schema_fingerprint, value));
        Ok(full)
    }

    /// Whether a record was folded: else the next must be a full record.
    pub(crate) fn started(&self) -> bool {
        self.before.is_some()
    }
}

/// Checks the envelope of checkpoint `id` of `thread` against `expected`, then decodes it.
pub(crate) fn decode<S: GraphState>(
    bytes: &[u8],
    expected: &Identity,
    thread: &ThreadId,
    id: CheckpointId,
) -> Result<Checkpoint<S>, Error> {
    let corrupt = |reason: String| Error::CorruptCheckpoint { thread: thread.clone(), checkpoint: id, reason };
    let Opened { name, graph_fingerprint, schema_fingerprint, payload, .. } = open_full(bytes, thread, id)?;
    if name != expected.graph.as_bytes() {
        return Err(Error::GraphMismatch {
            expected: expected.graph.to_owned(),
            found: Some(String::from_utf8_lossy(name).into_owned()),
        });
    }
    if graph_fingerprint != expected.graph_fingerprint || schema_fingerprint != expected.schema_fingerprint {
        return Err(Error::SchemaMismatch {
            graph: expected.graph.to_owned(),
            thread: thread.clone(),
            what: if schema_fingerprint != expected.schema_fingerprint { "state struct" } else { "graph" },
        });
    }
    // UTF-8 checked once for the whole payload: `from_slice` checks each string (every key
    // too) on its own, which cost more than the rest of reading them.
    let text = std::str::from_utf8(payload).map_err(|e| corrupt(format!("the payload does not decode: {e}")))?;
    serde_json::from_str(text).map_err(|e| corrupt(format!("the payload does not decode: {e}")))
}

/// Checkpoint `id` of `thread` read without its graph: the name of the graph that wrote it and
/// its payload as JSON (the envelope's integrity checked, not its graph or fingerprints).
pub(crate) fn decode_raw(
    bytes: &[u8],
    thread: &ThreadId,
    id: CheckpointId,
) -> Result<(String, serde_json::Value), Error> {
    let corrupt = |reason: String| Error::CorruptCheckpoint { thread: thread.clone(), checkpoint: id, reason };
    let opened = open_full(bytes, thread, id)?;
    let payload: serde_json::Value =
        serde_json::from_slice(opened.payload).map_err(|e| corrupt(format!("the payload does not decode: {e}")))?;
    Ok((String::from_utf8_lossy(opened.name).into_owned(), payload))
}

/// Where checkpoint `id` of `thread` leaves its thread, read without decoding its state: what a
/// retention sweep needs (`api::retention`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Standing {
    /// The run reached `end`.
    pub(crate) done: bool,
    /// The checkpoint waits on pauses.
    pub(crate) paused: bool,
    /// Until when a live run owns the thread (milliseconds since the Unix epoch).
    pub(crate) lease_until: Option<u64>,
    /// When the checkpoint was written (milliseconds since the Unix epoch).
    pub(crate) written_at: Option<u64>,
    /// When its pause began (seconds since the Unix epoch).
    pub(crate) paused_at: Option<u64>,
}

/// [`Standing`] of checkpoint `id` of `thread` (`bytes`, of graph `graph`): the envelope's
/// integrity and graph name are checked; of the payload only the position, the pauses, the
/// lease and the times are read.
pub(crate) fn standing(bytes: &[u8], graph: &str, thread: &ThreadId, id: CheckpointId) -> Result<Standing, Error> {
    use serde::de::IgnoredAny;
    // Only which variant it is matters: the fields are skipped unread.
    #[allow(dead_code)]
    #[derive(Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum At {
        Start,
        Before(IgnoredAny),
        After(IgnoredAny),
        Fork(IgnoredAny),
        Done,
    }
    #[derive(Deserialize)]
    struct Peek {
        at: At,
        #[serde(default)]
        pending: Vec<IgnoredAny>,
        #[serde(default)]
        lease: Option<Lease>,
        #[serde(default)]
        written_at: Option<u64>,
        #[serde(default)]
        paused_at: Option<u64>,
    }
    let opened = open(bytes, thread, id)?;
    if opened.name != graph.as_bytes() {
        return Err(Error::GraphMismatch {
            expected: graph.to_owned(),
            found: Some(String::from_utf8_lossy(opened.name).into_owned()),
        });
    }
    let peek: Peek = serde_json::from_slice(opened.payload).map_err(|e| Error::CorruptCheckpoint {
        thread: thread.clone(),
        checkpoint: id,
        reason: format!("the payload does not decode: {e}"),
    })?;
    Ok(Standing {
        done: matches!(peek.at, At::Done),
        paused: !peek.pending.is_empty(),
        lease_until: peek.lease.map(|lease| lease.until),
        written_at: peek.written_at,
        paused_at: peek.paused_at,
    })
}

/// A change to a checkpoint's payload, as a JSON object ([`edit_raw`]).
pub(crate) type PayloadEdit<'e> = dyn FnMut(&mut serde_json::Map<String, serde_json::Value>) -> Result<(), Error> + 'e;

/// Checkpoint `id` of `thread` (`bytes`, of graph `graph`) again, its payload changed by `edit`
/// as JSON, in an envelope of the same graph and fingerprints: how a fork copies the checkpoints
/// of a child graph whose state type the parent does not know. The envelope's integrity and
/// graph name are checked first; the payload must be a JSON object.
pub(crate) fn edit_raw(
    bytes: &[u8],
    graph: &str,
    thread: &ThreadId,
    id: CheckpointId,
    edit: &mut PayloadEdit<'_>,
) -> Result<Vec<u8>, Error> {
    let corrupt = |reason: String| Error::CorruptCheckpoint { thread: thread.clone(), checkpoint: id, reason };
    let opened = open_full(bytes, thread, id)?;
    if opened.name != graph.as_bytes() {
        return Err(Error::GraphMismatch {
            expected: graph.to_owned(),
            found: Some(String::from_utf8_lossy(opened.name).into_owned()),
        });
    }
    let mut payload: serde_json::Value =
        serde_json::from_slice(opened.payload).map_err(|e| corrupt(format!("the payload does not decode: {e}")))?;
    let Some(map) = payload.as_object_mut() else {
        return Err(corrupt("the payload is not a JSON object".into()));
    };
    edit(map)?;
    let identity =
        Identity { graph, graph_fingerprint: opened.graph_fingerprint, schema_fingerprint: opened.schema_fingerprint };
    encode_payload(&identity, &payload)
}

/// Whether the payload of `envelope` (just encoded) reads back as a checkpoint of `S`:
/// `Err((path, reason))` naming where it does not. JSON has no NaN or infinity, so serde_json
/// writes such a float as `null`, which an `f64` field then refuses to read: the only values
/// that write but do not read back are those that write `null` (or a custom `Serialize` that
/// its `Deserialize` refuses), so a payload without `null` is not decoded again.
pub(crate) fn check_reads_back<S: GraphState>(envelope: &[u8]) -> Result<(), (String, String)> {
    let name_len = u16::from_le_bytes([envelope[6], envelope[7]]) as usize;
    let payload = &envelope[HEADER_LEN + name_len.min(MAX_NAME_LEN)..];
    if !holds_null(payload) {
        return Ok(());
    }
    let mut deserializer = serde_json::Deserializer::from_slice(payload);
    serde_path_to_error::deserialize::<_, Checkpoint<S>>(&mut deserializer).map(drop).map_err(not_read_back)
}

/// Whether `payload` holds `null` anywhere. The searcher is built once: building one per call
/// (`memmem::find`) cost each checkpoint write more than the search itself.
fn holds_null(payload: &[u8]) -> bool {
    static NULL: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"null"));
    NULL.find(payload).is_some()
}

/// Whether `value` (a payload, or a part of one, as a JSON value) reads back as a `T`: what
/// [`check_reads_back`] checks of a delta record's whole payload, or of a branch's progress
/// a fan-out's delta writes.
pub(crate) fn check_value_reads_back<T: serde::de::DeserializeOwned>(
    value: &serde_json::Value,
) -> Result<(), (String, String)> {
    serde_path_to_error::deserialize::<_, T>(value).map(drop).map_err(not_read_back)
}

/// The path and reason of a payload that does not read back.
fn not_read_back(error: serde_path_to_error::Error<serde_json::Error>) -> (String, String) {
    let path = error.path().to_string();
    let inner = error.into_inner();
    let mut reason = inner.to_string();
    if reason.contains("null") {
        reason.push_str(" (a float that is NaN or infinite is written as null, which JSON cannot hold)");
    }
    (path, reason)
}

/// A node of a child graph routing its parent (`Command::parent`): the parent's node type (to
/// check it is the parent running the child), the target node's name and the parent's update,
/// by name and as JSON so that the child's final checkpoint records it (a recover of the parent
/// finds the child finished and routes the same way).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct ParentJump {
    /// The declared name of the parent graph ([`Graph::name`](crate::Graph::name)) whose
    /// subgraph node ran the child, recorded by the child's run as it takes the jump: stable
    /// across builds, compilers, renamed modules and refactors. `None` in memory until then (a
    /// jump of a child run without a store is never stored).
    #[serde(default, rename = "parent_graph", skip_serializing_if = "Option::is_none")]
    pub(crate) parent: Option<String>,
    /// What checkpoints of earlier versions of tea recorded instead: the parent's node type by
    /// `std::any::type_name`, which no compiler keeps stable. Read, never written: such a
    /// record is accepted only where the running parent's node type has that very name.
    #[serde(default, rename = "graph", skip_serializing)]
    pub(crate) legacy_type: Option<String>,
    /// The parent's node type the jump was made for, while it is in memory (never stored).
    #[serde(skip)]
    pub(crate) node_type: Option<std::any::TypeId>,
    pub(crate) target: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) update: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
}

/// The final state of one parallel branch, as the join sees it through
/// [`Ctx::branches`](crate::Ctx::branches).
#[derive(Clone, Serialize, Deserialize)]
pub struct BranchState<S> {
    pub(crate) head: NodeName,
    pub(crate) state: S,
}

impl<S> BranchState<S> {
    /// The branch's first node, which names the branch.
    pub fn head(&self) -> &NodeName {
        &self.head
    }

    /// The branch's own copy of the state when it reached the join: the state at the fan-out
    /// plus this branch's updates only.
    pub fn state(&self) -> &S {
        &self.state
    }
}

impl<S: fmt::Debug> fmt::Debug for BranchState<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BranchState").field("head", &self.head).field("state", &self.state).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn identity(graph: &str) -> Identity<'_> {
        Identity { graph, graph_fingerprint: 7, schema_fingerprint: 9 }
    }

    fn payload(bytes: &[u8]) -> serde_json::Value {
        decode_raw(bytes, &ThreadId::from("t"), 0).unwrap().1
    }

    fn reason(result: Result<Vec<u8>, Error>) -> String {
        match result {
            Err(Error::CorruptCheckpoint { reason, .. }) => reason,
            other => panic!("expected CorruptCheckpoint, got {other:?}"),
        }
    }

    #[test]
    fn deltas_fold_onto_the_full_record_and_refuse_what_does_not_fit() {
        let t = ThreadId::from("t");
        let (one, two, three) = (json!({"n": 1, "big": "x"}), json!({"n": 2, "big": "x"}), json!({"n": 3, "big": "x"}));
        let full = encode_value(&identity("g"), &one).unwrap();
        let d2 = encode_delta(&identity("g"), 1, &super::super::delta::diff(&one, &two).unwrap()).unwrap();
        let d3 = encode_delta(&identity("g"), 1, &super::super::delta::diff(&two, &three).unwrap()).unwrap();
        assert_eq!(delta_base(&full, &t, 1), None);
        assert_eq!(delta_base(&d3, &t, 3), Some(1));
        let folded = fold(&[(1, full.clone()), (2, d2.clone()), (3, d3.clone())], &t).unwrap();
        assert_eq!(payload(&folded), three);
        // A gap, a missing full record, another graph's delta, a delta read alone.
        assert!(reason(fold(&[(1, full.clone()), (3, d3.clone())], &t)).contains("checkpoint 2 is missing"));
        assert!(reason(fold(&[(2, d2.clone()), (3, d3.clone())], &t)).contains("pruned"));
        let other = encode_delta(&identity("h"), 1, &super::super::delta::diff(&one, &two).unwrap()).unwrap();
        assert!(reason(fold(&[(1, full.clone()), (2, other)], &t)).contains("another graph"));
        assert!(reason(decode_raw(&d2, &t, 2).map(|_| Vec::new())).contains("delta record"));
        // A delta naming a full record at or after itself, and a newer version of the envelope.
        let bad = encode_delta(&identity("g"), 5, &json!({})).unwrap();
        assert!(reason(fold(&[(1, full.clone()), (2, bad)], &t)).contains("not before it"));
        let mut newer = d2.clone();
        newer[4] = 2;
        assert!(reason(fold(&[(1, full), (2, newer)], &t)).contains("version 2"));
    }

    /// A state for the writer's tests (the format layer sees no graph or fixture).
    #[derive(Clone, Debug, Default, Serialize, Deserialize)]
    struct Tally {
        n: u64,
        log: Vec<String>,
        owner: String,
    }

    #[derive(Clone, Debug, Default, Serialize, Deserialize)]
    struct TallyUpdate {
        #[serde(skip_serializing_if = "Option::is_none")]
        n: Option<u64>,
        log: Option<Vec<String>>,
        owner: Option<String>,
    }

    impl TallyUpdate {
        fn n(mut self, n: u64) -> Self {
            self.n = Some(n);
            self
        }
        fn log(mut self, line: &str) -> Self {
            self.log = Some(vec![line.to_owned()]);
            self
        }
        fn owner(mut self, owner: &str) -> Self {
            self.owner = Some(owner.to_owned());
            self
        }
    }

    impl crate::vocab::state::StateUpdate for TallyUpdate {
        type State = Tally;
        fn writes(&self, _: usize) -> Option<crate::vocab::state::Write> {
            None
        }
    }

    impl GraphState for Tally {
        type Update = TallyUpdate;
        const FIELDS: &'static [crate::vocab::state::Field] = &[];
        const SCHEMA_FINGERPRINT: u64 = 1;
        fn apply(&mut self, _: TallyUpdate) {}
    }

    /// Branches in every form a fan-out writes: fresh, a send's with its input, part-way with
    /// updates and origins, paused with answers, at a nested fan-out, joined, after a router's
    /// choice, with a parent jump, and with names that need escapes.
    fn branch_forms() -> Vec<BranchProgress<Tally>> {
        let mut forms = vec![BranchProgress::<Tally>::fresh(NodeName::from("b0".to_owned()))];
        let mut sent = BranchProgress::<Tally>::fresh(NodeName::from("worker".to_owned()));
        sent.input = Some(TallyUpdate::default().n(3).log("in"));
        forms.push(sent.copy(false));
        sent.updates = vec![TallyUpdate::default().log("a"), TallyUpdate::default().owner("q\"uote")];
        sent.origins = vec![NodeName::from("worker".to_owned()), NodeName::from("tab\there".to_owned())];
        sent.steps = 2;
        sent.at = BranchAt::Before(NodeName::from("next".to_owned()));
        sent.resume = false;
        forms.push(sent.copy(false));
        sent.answers = vec![json!("yes"), json!({"n": 1})];
        sent.pending = Some(Box::new(Interrupt::new("ask#1".into(), NodeName::from("ask".to_owned()), json!("why?"))));
        sent.more_pending = vec![Interrupt::new("x#0".into(), NodeName::from("x".to_owned()), json!(null))];
        forms.push(sent.copy(false));
        let mut nested = BranchProgress::<Tally>::fresh(NodeName::from("outer".to_owned()));
        nested.at = BranchAt::Fork { source: NodeName::from("split".to_owned()) };
        nested.branches = forms.iter().map(|b| b.copy(false)).collect();
        forms.push(nested);
        let mut joined = BranchProgress::<Tally>::fresh(NodeName::from("j".to_owned()));
        joined.at = BranchAt::Joined;
        joined.jump = Some(Box::new(ParentJump {
            parent: Some("parent".into()),
            legacy_type: None,
            node_type: None,
            target: "review".into(),
            update: Some(json!({"n": 2})),
            error: None,
        }));
        forms.push(joined);
        for goto in [None, Some(Target::End), Some(Target::Node(NodeName::from("z".to_owned())))] {
            let mut after = BranchProgress::<Tally>::fresh(NodeName::from("a".to_owned()));
            after.at = BranchAt::After { node: NodeName::from("a\\b".to_owned()), goto };
            forms.push(after);
        }
        forms
    }

    #[test]
    fn a_branchs_progress_writes_the_bytes_its_serialize_writes() {
        for branch in branch_forms() {
            let mut fast = Vec::new();
            branch.write_json(&mut fast).unwrap();
            assert_eq!(String::from_utf8(fast).unwrap(), serde_json::to_string(&branch).unwrap());
        }
        let branches = branch_forms();
        let state = Tally { n: 4, log: vec!["x".into()], owner: String::new() };
        let source = NodeName::from("split".to_owned());
        let fork = ForkCheckpoint {
            step: 7,
            state: &state,
            at: ForkAt::Fork { source: &source, branches: &branches, texts: &[] },
            lease: Some(Lease { owner: 1, until: 2 }),
            written_at: Some(3),
        };
        let mut fast = Vec::new();
        fork.write_json(&mut fast).unwrap();
        assert_eq!(String::from_utf8(fast).unwrap(), serde_json::to_string(&fork).unwrap());
        let bare = ForkCheckpoint { lease: None, written_at: None, ..fork };
        let mut fast = Vec::new();
        bare.write_json(&mut fast).unwrap();
        assert_eq!(String::from_utf8(fast).unwrap(), serde_json::to_string(&bare).unwrap());
        // A step's checkpoint at a fan-out: its branches through the same writer.
        let at = AtRef::Fork { source: source.clone(), branches: &branches };
        let ckpt = CheckpointRef {
            step: 7,
            state: &state,
            at,
            pending: Vec::new(),
            pause: None,
            paused_at: None,
            nonce: None,
            resumed: false,
            answers: &[],
            joined: &[],
            lease: Some(Lease { owner: 1, until: 2 }),
            parent: None,
            written_at: Some(3),
        };
        let mut fast = Vec::new();
        ckpt.write_json(&mut fast).unwrap();
        assert_eq!(String::from_utf8(fast).unwrap(), serde_json::to_string(&ckpt).unwrap());
    }
}
