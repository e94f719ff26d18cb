//! Checkpoints sealed at rest (feature `encryption`): the shared scenarios (`tests/store_scenarios`)
//! through a `Sealed` memory store, then, on memory, sled and dir stores: a paused run resumed
//! through a sealed store ends as in clear, no state value is readable at rest, keys rotate, and
//! a tampered, moved, clear or unknown-key record is an `Error::Unsealable` naming where it is.

#[macro_use]
mod store_scenarios;

use std::path::PathBuf;
use store_scenarios::{done, paused, thread, Doc, StopBefore};
use tea::prelude::*;
use tea::{CheckpointId, KeyRing, SealFailure, Sealed};

const KEY_A: [u8; 32] = [0xA1; 32];
const KEY_B: [u8; 32] = [0xB2; 32];

fn ring_a() -> KeyRing {
    KeyRing::new(7, KEY_A)
}

/// A fresh sealed `MemoryStore` per call, for the shared scenarios.
struct SealedMemory;

impl SealedMemory {
    fn new(_test: &str) -> Self {
        SealedMemory
    }

    fn store(&self) -> Sealed<MemoryStore> {
        Sealed::new(MemoryStore::new(), ring_a())
    }
}

store_tests!(SealedMemory);

/// A temporary directory, removed when dropped.
struct Tmp(PathBuf);

impl Tmp {
    fn new(test: &str) -> Self {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let dir = std::env::temp_dir().join(format!("tea-sealed-{}-{test}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Tmp(dir)
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `check` on a memory, a sled and a dir store (each new and empty).
fn on_every_store(test: &str, check: impl Fn(&str, std::sync::Arc<dyn Checkpointer>)) {
    check("memory", std::sync::Arc::new(MemoryStore::new()));
    let tmp = Tmp::new(test);
    check("sled", std::sync::Arc::new(SledStore::open(tmp.0.join("db")).unwrap()));
    check("dir", std::sync::Arc::new(DirStore::open(tmp.0.join("dir")).unwrap()));
}

const SECRET: &str = "the patient's secret note 4711";

#[track_caller]
fn unsealable(
    result: Result<impl std::fmt::Debug, Error>,
) -> (String, ThreadId, CheckpointId, Option<u32>, SealFailure, String) {
    match result {
        Err(error @ Error::Unsealable { .. }) => {
            let message = error.to_string();
            let Error::Unsealable { graph, thread, checkpoint, key, reason } = error else { unreachable!() };
            (graph, thread, checkpoint, key, reason, message)
        }
        other => panic!("expected Error::Unsealable, got {other:?}"),
    }
}

#[test]
fn a_sealed_run_ends_as_in_clear_and_nothing_is_readable_at_rest() {
    on_every_store("same", |name, raw| {
        let clear = StopBefore::builder().checkpointer(MemoryStore::new()).build();
        let (_, clear_resume) =
            paused(clear.run(Call::start(Doc { note: SECRET.into(), ..Doc::default() }).on(thread("clear"))));
        let mut expected = done(clear.resume(clear_resume));

        let app = StopBefore::builder().checkpointer(Sealed::new(raw.clone(), ring_a())).build();
        let t = thread("same");
        let (_, resume) = paused(app.run(Call::start(Doc { note: SECRET.into(), ..Doc::default() }).on(t.clone())));
        let token = resume.to_string();
        // Another app on the same sealed store resumes it, as another process would.
        let other = StopBefore::builder().checkpointer(Sealed::new(raw.clone(), ring_a())).build();
        let out = done(other.resume(token.parse().unwrap()));
        expected.total = out.total;
        assert_eq!(out, expected, "{name}");
        assert_eq!(out.total, 3, "{name}");
        assert_eq!(app.history(&t).unwrap().len(), raw.history(StopBefore::NAME, &t).unwrap().len(), "{name}");

        let stored = raw.history(StopBefore::NAME, &t).unwrap();
        assert!(stored.len() >= 2, "{name}");
        for (id, bytes) in stored {
            assert_eq!(&bytes[..4], b"TEAs", "{name} checkpoint {id}");
            assert_eq!(&bytes[5..9], &7u32.to_be_bytes(), "{name} checkpoint {id}: key id 7");
            let found = bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes());
            assert!(!found, "{name} checkpoint {id} holds the state's text in clear");
            assert!(!bytes.windows(4).any(|w| w == b"TEAc"), "{name} checkpoint {id}: the clear envelope shows");
        }
    });
}

/// A fan-out that pauses in one branch (`right`, before `right2`) after the other (`left`)
/// finished, so the paused checkpoint holds `left`'s writes as its pending progress; then a node
/// whose result is cached in the store.
mod fan_and_cache {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use store_scenarios::DocUpdate;

    /// How many times `left` and `lookup` ran.
    pub static LEFTS: AtomicUsize = AtomicUsize::new(0);
    pub static LOOKUPS: AtomicUsize = AtomicUsize::new(0);

    fn open(_: &Doc) -> DocUpdate {
        Doc::update().trail(vec!["open".into()])
    }
    fn left(s: &Doc) -> DocUpdate {
        LEFTS.fetch_add(1, Ordering::SeqCst);
        Doc::update().trail(vec![format!("left: {}", s.note)])
    }
    fn right(_: &Doc) -> DocUpdate {
        Doc::update().trail(vec!["right".into()])
    }
    fn right2(_: &Doc) -> DocUpdate {
        Doc::update().trail(vec!["right2".into()])
    }
    fn lookup(s: &Doc) -> DocUpdate {
        LOOKUPS.fetch_add(1, Ordering::SeqCst);
        Doc::update().trail(vec![format!("looked up {}", s.note)])
    }

    graph! {
        pub FanAndCache for Doc {
            start -> open;
            parallel open => [left, right] -> lookup;
            right -> right2;
            right2 -> lookup;
            lookup -> end;
            interrupt_before right2;
            cache lookup(reads = [note], store);
        }
    }
}

#[test]
fn a_fan_outs_pending_branch_writes_and_the_node_cache_are_sealed_too() {
    use fan_and_cache::{FanAndCache, LEFTS, LOOKUPS};
    use std::sync::atomic::Ordering;
    let cache_graph = format!("tea:cache:{}", FanAndCache::NAME);
    on_every_store("fan-cache", |name, raw| {
        let app = FanAndCache::builder().checkpointer(Sealed::new(raw.clone(), ring_a())).build();
        let note = format!("{SECRET} on {name}");
        let (lefts, lookups) = (LEFTS.load(Ordering::SeqCst), LOOKUPS.load(Ordering::SeqCst));
        let t = thread("fan-1");
        let (_, resume) = paused(app.run(Call::start(Doc { note: note.clone(), ..Doc::default() }).on(t.clone())));
        // The paused checkpoint holds left's finished writes, sealed; the resume reads them back
        // through the seal instead of running left again.
        let pause = raw.head(FanAndCache::NAME, &t).unwrap().unwrap();
        assert_eq!(&pause.1[..4], b"TEAs", "{name}: the paused checkpoint is not sealed");
        let first = done(app.resume(resume));
        let trail =
            ["open".to_owned(), format!("left: {note}"), "right".into(), "right2".into(), format!("looked up {note}")];
        assert_eq!(first.trail, trail, "{name}");
        assert_eq!(LEFTS.load(Ordering::SeqCst), lefts + 1, "{name}: left ran again after the pause");
        // The second thread takes the cached result, read back through the sealed store.
        let (_, resume) =
            paused(app.run(Call::start(Doc { note: note.clone(), ..Doc::default() }).on(thread("fan-2"))));
        assert_eq!(done(app.resume(resume)).trail, trail, "{name}");
        assert_eq!(LOOKUPS.load(Ordering::SeqCst), lookups + 1, "{name}: the second thread hit the cache");

        // Every record at rest — the steps', the pause with its pending branch writes, the
        // cached result — is sealed.
        let run = raw.history(FanAndCache::NAME, &t).unwrap();
        let cached: Vec<_> =
            raw.threads(&cache_graph).unwrap().iter().flat_map(|key| raw.history(&cache_graph, key).unwrap()).collect();
        assert!(!cached.is_empty(), "{name}: the cached result is in the store");
        for (what, (id, bytes)) in run.iter().map(|r| ("run", r)).chain(cached.iter().map(|r| ("cache", r))) {
            assert_eq!(&bytes[..4], b"TEAs", "{name}: {what} record {id} is not sealed");
            assert!(
                !bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
                "{name}: {what} record {id} holds the note in clear"
            );
        }
    });
}

#[test]
fn keys_rotate_old_records_read_new_ones_carry_the_new_id() {
    on_every_store("rotate", |name, raw| {
        let t = thread("rotate");
        let with_a = StopBefore::builder().checkpointer(Sealed::new(raw.clone(), ring_a())).build();
        let (_, resume) = paused(with_a.run(Call::start(Doc { note: SECRET.into(), ..Doc::default() }).on(t.clone())));
        let paused_at = resume.checkpoint();

        // Rotate: B seals, A still opens.
        let rotated = KeyRing::new(9, KEY_B).with_old_key(7, KEY_A);
        assert_eq!((rotated.current_id(), rotated.ids()), (9, vec![9, 7]));
        let with_b = StopBefore::builder().checkpointer(Sealed::new(raw.clone(), rotated)).build();
        assert_eq!(with_b.state(&t).unwrap().unwrap().state.note, SECRET, "{name}: an A record reads");
        let out = done(with_b.resume(resume));
        assert_eq!(out.trail, ["a", "b", "c"], "{name}");
        let key_of = |id: CheckpointId| {
            let bytes = raw.get(StopBefore::NAME, &t, id).unwrap().unwrap();
            u32::from_be_bytes(bytes[5..9].try_into().unwrap())
        };
        let head = raw.head(StopBefore::NAME, &t).unwrap().unwrap().0;
        assert_eq!(key_of(paused_at), 7, "{name}");
        assert_eq!(key_of(head), 9, "{name}: a new record carries B's id");

        // Drop A: the history's old records name key 7.
        let only_b = StopBefore::builder().checkpointer(Sealed::new(raw.clone(), KeyRing::new(9, KEY_B))).build();
        assert_eq!(only_b.state(&t).unwrap().unwrap().state.trail, ["a", "b", "c"], "{name}: the head is B's");
        let (graph, thread, checkpoint, key, reason, message) = unsealable(only_b.history(&t));
        assert_eq!(
            (graph.as_str(), &thread, key, reason),
            (StopBefore::NAME, &t, Some(7), SealFailure::UnknownKey),
            "{name}"
        );
        assert!(checkpoint <= paused_at, "{name}: {checkpoint}");
        assert!(message.contains("key id 7") && message.contains(t.as_str()), "{name}: {message}");
    });
}

#[test]
fn a_tampered_record_is_an_error_naming_thread_and_checkpoint() {
    on_every_store("tamper", |name, raw| {
        let t = thread("tamper");
        let sealed = Sealed::new(raw.clone(), ring_a());
        let app = StopBefore::builder().checkpointer(sealed.clone()).build();
        let (_, resume) = paused(app.run(Call::start(Doc::default()).on(t.clone())));
        let (head, record) = raw.head(StopBefore::NAME, &t).unwrap().unwrap();

        // Every byte flipped in turn, written back as the head's successor (the store appends only).
        let mut reasons = std::collections::BTreeSet::new();
        for byte in (0..record.len()).step_by(7).chain([record.len() - 1]) {
            let mut copy = record.clone();
            copy[byte] ^= 0x01;
            let store = MemoryStore::new();
            for id in 1..head {
                store.append(StopBefore::NAME, &t, (id > 1).then_some(id - 1), id, &[], false).unwrap();
            }
            store.append(StopBefore::NAME, &t, (head > 1).then_some(head - 1), head, &copy, false).unwrap();
            let (_, thread, checkpoint, _, reason, message) =
                unsealable(Sealed::new(store, ring_a()).head(StopBefore::NAME, &t));
            assert_eq!((&thread, checkpoint), (&t, head), "{name}: byte {byte}");
            assert!(message.contains(&format!("checkpoint {head}")) && message.contains(t.as_str()), "{message}");
            reasons.insert(format!("{reason:?}"));
        }
        assert!(reasons.contains("Tampered"), "{name}: {reasons:?}");
        // The app reports it too, never panics.
        let store = MemoryStore::new();
        let mut copy = record.clone();
        let last = copy.len() - 1;
        copy[last] ^= 0x80;
        store.append(StopBefore::NAME, &t, None, 1, &copy, false).unwrap();
        let damaged = StopBefore::builder().checkpointer(Sealed::new(store, ring_a())).build();
        let (_, _, checkpoint, key, reason, _) = unsealable(damaged.state(&t));
        assert_eq!((checkpoint, key, reason), (1, Some(7), SealFailure::Tampered), "{name}");
        drop(resume);
    });
}

#[test]
fn a_record_moved_to_another_thread_or_checkpoint_does_not_open() {
    on_every_store("moved", |name, raw| {
        let t = thread("moved");
        let app = StopBefore::builder().checkpointer(Sealed::new(raw.clone(), ring_a())).build();
        let _ = paused(app.run(Call::start(Doc { note: SECRET.into(), ..Doc::default() }).on(t.clone())));
        let (head, record) = raw.head(StopBefore::NAME, &t).unwrap().unwrap();
        let sealed = Sealed::new(raw.clone(), ring_a());

        let other = thread("other");
        for id in 1..=head {
            let bytes = if id == head { record.clone() } else { raw.get(StopBefore::NAME, &t, id).unwrap().unwrap() };
            raw.append(StopBefore::NAME, &other, (id > 1).then_some(id - 1), id, &bytes, false).unwrap();
        }
        let (_, thread, checkpoint, key, reason, _) = unsealable(sealed.head(StopBefore::NAME, &other));
        assert_eq!((thread, checkpoint, key, reason), (other.clone(), head, Some(7), SealFailure::Tampered), "{name}");
        // Another graph name: the same.
        raw.append("Elsewhere", &t, None, 1, &raw.get(StopBefore::NAME, &t, 1).unwrap().unwrap(), false).unwrap();
        assert_eq!(unsealable(sealed.get("Elsewhere", &t, 1)).4, SealFailure::Tampered, "{name}");
        // Another place in the same thread's history: record 1 as checkpoint `head + 1`.
        let first = raw.get(StopBefore::NAME, &t, 1).unwrap().unwrap();
        raw.append(StopBefore::NAME, &t, Some(head), head + 1, &first, false).unwrap();
        assert_eq!(unsealable(sealed.head(StopBefore::NAME, &t)).2, head + 1, "{name}");
    });
}

#[test]
fn clear_records_are_refused_unless_clear_reads_are_allowed() {
    on_every_store("clear", |name, raw| {
        let t = thread("clear");
        let clear = StopBefore::builder().checkpointer(raw.clone()).build();
        let (_, resume) = paused(clear.run(Call::start(Doc { note: SECRET.into(), ..Doc::default() }).on(t.clone())));

        let strict = StopBefore::builder().checkpointer(Sealed::new(raw.clone(), ring_a())).build();
        let (_, thread, _, key, reason, _) = unsealable(strict.state(&t));
        assert_eq!((thread, key, reason), (t.clone(), None, SealFailure::NotSealed), "{name}");

        let lenient =
            StopBefore::builder().checkpointer(Sealed::new(raw.clone(), ring_a()).allow_plaintext_reads(true)).build();
        assert_eq!(done(lenient.resume(resume)).note, SECRET, "{name}");
        let head = raw.head(StopBefore::NAME, &t).unwrap().unwrap().1;
        assert_eq!(&head[..4], b"TEAs", "{name}: new records are sealed");
    });
}

#[test]
fn key_rings_parse_from_text_files_and_variables_with_clear_errors() {
    let hex_b: String = KEY_B.iter().map(|b| format!("{b:02x}")).collect();
    let text = format!("# current first\n9:{hex_b}\n\n7:oaGhoaGhoaGhoaGhoaGhoaGhoaGhoaGhoaGhoaGhoaE=\n");
    let ring = KeyRing::parse(&text, "keys.txt").unwrap();
    assert_eq!((ring.current_id(), ring.ids()), (9, vec![9, 7]));
    // It opens what the ring built in code seals, and the reverse.
    let store = std::sync::Arc::new(MemoryStore::new());
    let t = ThreadId::from("parse");
    Sealed::new(store.clone(), KeyRing::new(7, KEY_A)).append("G", &t, None, 1, b"x", false).unwrap();
    assert_eq!(Sealed::new(store, ring.clone()).get("G", &t, 1).unwrap().unwrap(), b"x");
    assert!(!format!("{ring:?}").contains("a1"), "Debug shows no key: {ring:?}");

    let tmp = Tmp::new("parse");
    let file = tmp.0.join("keys");
    std::fs::write(&file, &text).unwrap();
    assert_eq!(KeyRing::from_file(&file).unwrap().ids(), vec![9, 7]);

    for (bad, line, needle) in [
        ("", 0, "no key"),
        ("7 deadbeef", 1, "ID:KEY"),
        ("x:00", 1, "key id `x`"),
        ("\n7:abcd", 2, "key 7"),
        (&format!("1:{hex_b}\n1:{hex_b}"), 2, "appears twice"),
    ] {
        let error = KeyRing::parse(bad, "keys.txt").unwrap_err();
        assert_eq!((error.line, error.source_name.as_str()), (line, "keys.txt"), "{bad:?}: {error}");
        assert!(error.to_string().contains(needle), "{bad:?}: {error}");
    }
    let missing = KeyRing::from_file(tmp.0.join("absent")).unwrap_err();
    assert!(missing.to_string().contains("absent"), "{missing}");
    let unset = KeyRing::from_env("TEA_TEST_SEALED_KEYS_NEVER_SET").unwrap_err();
    assert!(unset.to_string().contains("$TEA_TEST_SEALED_KEYS_NEVER_SET"), "{unset}");
}
