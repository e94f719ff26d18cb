//! Checkpoints, breakpoints and resumes on a `MemoryStore`: the shared scenarios
//! (`tests/store_scenarios`), then what needs a store of our own making: hand-crafted envelopes and
//! the durability of each write.

#[macro_use]
mod store_scenarios;

use std::sync::{Arc, Mutex};
use store_scenarios::{done, forward, paused, runs, thread, Corrupting, Doc, Fan, StopBefore, TwoStops};
use tea::prelude::*;

/// A fresh `MemoryStore` per call.
struct Memory;

impl Memory {
    fn new(_test: &str) -> Self {
        Memory
    }

    fn store(&self) -> MemoryStore {
        MemoryStore::new()
    }
}

store_tests!(Memory);

// ---------------------------------------------------------------------------------------------
// Envelopes with a valid checksum around something else: the checks after the checksum.

/// CRC-32 (IEEE), as the envelope uses it.
fn crc32(parts: &[&[u8]]) -> u32 {
    let mut crc = !0u32;
    for byte in parts.iter().flat_map(|p| p.iter()) {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

/// The parts of an envelope: header fields, graph name, payload.
struct Envelope {
    version: u16,
    graph_fingerprint: u64,
    schema_fingerprint: u64,
    name: Vec<u8>,
    payload: Vec<u8>,
}

impl Envelope {
    fn parse(bytes: &[u8]) -> Self {
        assert_eq!(&bytes[..4], b"TEAc");
        let name_len = u16::from_le_bytes([bytes[6], bytes[7]]) as usize;
        Envelope {
            version: u16::from_le_bytes([bytes[4], bytes[5]]),
            graph_fingerprint: u64::from_le_bytes(bytes[8..16].try_into().unwrap()),
            schema_fingerprint: u64::from_le_bytes(bytes[16..24].try_into().unwrap()),
            name: bytes[32..32 + name_len].to_vec(),
            payload: bytes[32 + name_len..].to_vec(),
        }
    }

    /// The bytes, with lengths and checksum computed.
    fn encode(&self) -> Vec<u8> {
        let mut out = b"TEAc".to_vec();
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.name.len() as u16).to_le_bytes());
        out.extend_from_slice(&self.graph_fingerprint.to_le_bytes());
        out.extend_from_slice(&self.schema_fingerprint.to_le_bytes());
        out.extend_from_slice(&(self.payload.len() as u32).to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&self.name);
        out.extend_from_slice(&self.payload);
        let checksum = crc32(&[&out[..28], &out[32..]]);
        out[28..32].copy_from_slice(&checksum.to_le_bytes());
        out
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.payload).unwrap()
    }
}

#[test]
fn the_envelope_is_as_documented() {
    let store = MemoryStore::new();
    let app = StopBefore::builder().checkpointer(store.clone()).build();
    let t = thread("envelope");
    paused(app.run(Call::start(Doc::default()).on(t.clone())));
    let (_, bytes) = store.head(StopBefore::NAME, &t).unwrap().unwrap();
    let envelope = Envelope::parse(&bytes);
    assert_eq!(envelope.version, 1);
    assert_eq!(envelope.name, b"StopBefore");
    assert_eq!(envelope.encode(), bytes, "our encoder reproduces the stored bytes, checksum included");
    let json = envelope.json();
    assert_eq!(json["state"]["trail"], serde_json::json!(["a"]));
    assert_eq!(json["at"], serde_json::json!({ "before": "b" }));
}

#[test]
fn a_valid_envelope_around_something_else_is_refused_by_name_fingerprint_or_payload() {
    let store = Arc::new(Corrupting::new(MemoryStore::new()));
    let app = StopBefore::builder().checkpointer(store.clone()).build();
    let t = thread("crafted");
    let (_, resume) = paused(app.run(Call::start(Doc::default()).on(t.clone())));
    let (head, bytes) = store.inner.head(StopBefore::NAME, &t).unwrap().unwrap();
    let original = Envelope::parse(&bytes);
    let with = |change: &dyn Fn(&mut Envelope)| {
        let mut envelope = Envelope::parse(&bytes);
        change(&mut envelope);
        envelope.encode()
    };
    let payload = |json: serde_json::Value| serde_json::to_vec(&json).unwrap();

    type Check = fn(&Error) -> bool;
    let cases: Vec<(&str, Vec<u8>, Check)> = vec![
        (
            "another graph's name",
            with(&|e| e.name = b"SomeOtherGraph".to_vec()),
            |e| matches!(e, Error::GraphMismatch { expected, found: Some(found) } if expected == "StopBefore" && found == "SomeOtherGraph"),
        ),
        ("another state schema", with(&|e| e.schema_fingerprint ^= 1), |e| {
            matches!(e, Error::SchemaMismatch { what: "state struct", .. })
        }),
        ("another graph shape", with(&|e| e.graph_fingerprint = e.graph_fingerprint.wrapping_add(1)), |e| {
            matches!(e, Error::SchemaMismatch { what: "graph", .. })
        }),
        (
            "a newer format version",
            with(&|e| e.version = 2),
            |e| matches!(e, Error::CorruptCheckpoint { reason, .. } if reason.contains("version 2")),
        ),
        (
            "a payload that is not JSON",
            with(&|e| e.payload = b"\x00\xffnot json at all".to_vec()),
            |e| matches!(e, Error::CorruptCheckpoint { reason, .. } if reason.contains("does not decode")),
        ),
        (
            "a state of the wrong type",
            with(&|e| {
                let mut json = original.json();
                json["state"]["trail"] = serde_json::json!("not a list");
                e.payload = payload(json);
            }),
            |e| matches!(e, Error::CorruptCheckpoint { reason, .. } if reason.contains("does not decode")),
        ),
        ("deeply nested JSON", with(&|e| e.payload = [&[b'['; 100_000][..], &[b']'; 100_000][..]].concat()), |e| {
            matches!(e, Error::CorruptCheckpoint { .. })
        }),
        ("an empty payload", with(&|e| e.payload.clear()), |e| matches!(e, Error::CorruptCheckpoint { .. })),
    ];
    for (what, bytes, check) in &cases {
        store.replace_head(Some(bytes.clone()));
        let results = [
            ("state", app.state(&t).map(drop)),
            ("history", app.history(&t).map(drop)),
            ("recover", app.run(Call::recover(&t)).map(drop)),
            ("resume", app.resume(resume.clone()).map(drop)),
        ];
        for (call, result) in results {
            match result {
                Err(error) => assert!(check(&error), "{what}: {call} gave {error:?}"),
                Ok(()) => panic!("{what}: {call} succeeded"),
            }
        }
    }

    // A well-formed checkpoint that names a node the graph does not have: paused there (for
    // `resume`), or stopped there by a failure (for `recover`, which returns a pause as it is).
    let nowhere = |keep_pause: bool| {
        with(&|e| {
            let mut json = original.json();
            json["at"] = serde_json::json!({ "before": "nowhere" });
            if !keep_pause {
                let object = json.as_object_mut().unwrap();
                object.remove("pending");
                object.remove("pause");
                object.remove("paused_at");
            }
            e.payload = payload(json);
        })
    };
    store.replace_head(Some(nowhere(true)));
    let resumed = app.resume(resume.clone()).map(drop);
    store.replace_head(Some(nowhere(false)));
    let recovered = app.run(Call::recover(&t)).map(drop);
    for (call, result) in [("resume", resumed), ("recover", recovered)] {
        match result {
            Err(Error::CorruptCheckpoint { thread, checkpoint, reason }) => {
                assert_eq!(thread, t, "{call}");
                assert_eq!(checkpoint, head, "{call}: the error names the stored checkpoint");
                assert!(reason.contains("`nowhere`"), "{call}: {reason}");
            }
            other => panic!("{call}: expected CorruptCheckpoint, got {other:?}"),
        }
    }

    store.replace_head(None);
    assert_eq!(store.inner.head(StopBefore::NAME, &t).unwrap().unwrap().0, head, "nothing was written");
    assert_eq!(runs(&t, "b"), 0);
    assert_eq!(done(app.resume(resume)).trail, ["a", "b", "c"]);
}

// ---------------------------------------------------------------------------------------------
// Durability of each write.

/// A `MemoryStore` that records each append: (id, durable, paused).
#[derive(Clone, Default)]
struct Recording {
    inner: MemoryStore,
    appends: Arc<Mutex<Vec<(u64, bool)>>>,
}

impl Checkpointer for Recording {
    fn append(
        &self,
        graph: &str,
        thread: &ThreadId,
        expected: Option<u64>,
        id: u64,
        bytes: &[u8],
        durable: bool,
    ) -> Result<tea::AppendOutcome, Error> {
        let result = self.inner.append(graph, thread, expected, id, bytes, durable)?;
        if result == tea::AppendOutcome::Written {
            self.appends.lock().unwrap().push((id, durable));
        }
        Ok(result)
    }
    forward!(inner: head, get, history, threads, delete, prune);
}

#[test]
fn pauses_and_the_end_are_flushed_in_every_mode_and_steps_with_every_step() {
    for durability in [Durability::EveryStep, Durability::Buffered, Durability::OnPause] {
        let store = Recording::default();
        let app = TwoStops::builder().checkpointer(store.clone()).durability(durability).build();
        let t = thread("durable");
        let mut outcome = app.run(Call::start(Doc::default()).on(t.clone())).unwrap();
        let mut pauses = Vec::new();
        while let Outcome::Interrupted { resume, .. } = outcome {
            // The token's checkpoint is the head, and was appended durably.
            let head = app.state(&t).unwrap().unwrap().checkpoint;
            let appends = store.appends.lock().unwrap().clone();
            assert_eq!(appends.last(), Some(&(head, true)), "{durability:?}: {appends:?}");
            pauses.push(head);
            outcome = app.resume(resume).unwrap();
        }
        let appends = store.appends.lock().unwrap().clone();
        let head = app.state(&t).unwrap().unwrap().checkpoint;
        // What `resume` reported (done) survives a crash: the final checkpoint is flushed.
        assert_eq!(appends.last(), Some(&(head, true)), "{durability:?}: the end is flushed");
        let durable: Vec<u64> = appends.iter().filter(|(_, durable)| *durable).map(|(id, _)| *id).collect();
        let ids: Vec<u64> = appends.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, (1..=head).collect::<Vec<_>>(), "{durability:?}: ids follow each other");
        // Claims are never flushed (no node has completed); with EveryStep every step is.
        let claims = [1].into_iter().chain(pauses.iter().map(|p| p + 1));
        match durability {
            Durability::EveryStep => {
                let expected: Vec<u64> = ids.iter().copied().filter(|id| !claims.clone().any(|c| c == *id)).collect();
                assert_eq!(durable, expected, "EveryStep flushes every step, pause and the end");
            }
            _ => {
                let mut expected = pauses.clone();
                expected.push(head);
                assert_eq!(durable, expected, "{durability:?}: pauses and the end are flushed");
            }
        }
        if durability == Durability::Buffered {
            let every_step = store.appends.lock().unwrap().len();
            assert!(every_step > 2 * pauses.len() + 1, "Buffered writes every step: {appends:?}");
        }
    }
}

#[test]
fn a_paused_fan_out_naming_an_unknown_branch_node_is_corrupt_and_nothing_is_written() {
    let store = Arc::new(Corrupting::new(MemoryStore::new()));
    let app = Fan::builder().checkpointer(store.clone()).build();
    let t = thread("crafted-fan");
    let (_, resume) = paused(app.run(Call::start(Doc::default()).on(t.clone())));
    let (head, bytes) = store.inner.head(Fan::NAME, &t).unwrap().unwrap();
    let mut envelope = Envelope::parse(&bytes);
    let mut json = envelope.json();
    let branches = &mut json["at"]["fork"]["branches"];
    assert_eq!(branches[1]["at"], serde_json::json!({ "before": "d" }), "{branches}");
    branches[1]["at"] = serde_json::json!({ "before": "nowhere" });
    envelope.payload = serde_json::to_vec(&json).unwrap();
    store.replace_head(Some(envelope.encode()));
    match app.resume(resume.clone()) {
        Err(Error::CorruptCheckpoint { checkpoint, reason, .. }) => {
            assert_eq!(checkpoint, head);
            assert!(reason.contains("`nowhere`"), "{reason}");
        }
        other => panic!("expected CorruptCheckpoint, got {other:?}"),
    }
    store.replace_head(None);
    assert_eq!(store.inner.head(Fan::NAME, &t).unwrap().unwrap().0, head, "the resume claimed nothing");
    assert_eq!(done(app.resume(resume)).trail, ["a", "b", "c", "d", "e", "h"]);
}
