//! The `Checkpointer` contract, checked against every store tea provides.
//!
//! `contract` is generic over the store: a new store passes it before anything else (add a
//! `#[test]` calling `contract(&store)` for it, as the stores below do). Each case uses its own
//! graph name, so the cases can share one store, which must start empty.

#[cfg(feature = "postgres")]
#[path = "../../tests/postgres_support/mod.rs"]
mod postgres_support;

use std::sync::Barrier;
use tea_runtime::{AppendOutcome, CheckpointId, Checkpointer, MemoryStore, ThreadId};

/// Every case of the contract, run on `store`.
fn contract<C: Checkpointer>(store: &C) {
    empty_thread(store);
    first_append(store);
    stale_expected_head_conflicts(store);
    history_is_newest_first(store);
    graphs_and_threads_are_independent(store);
    payloads_round_trip(store);
    racing_appends_have_one_winner(store);
    threads_are_listed_by_id(store);
    delete_removes_one_thread(store);
    delete_at_deletes_only_at_the_head_it_names(store);
    append_over_compares_the_heads_bytes(store);
    prune_keeps_the_newest(store);
    delete_and_prune_racing_appends_leave_whole_threads(store);
}

fn thread(id: &str) -> ThreadId {
    ThreadId::from(id)
}

/// `head`, `history` and every `get` of `id`s 0..=`last + 1` agree with `expected`, oldest first.
fn assert_thread<C: Checkpointer>(store: &C, graph: &str, id: &str, expected: &[&[u8]]) {
    let thread = thread(id);
    let stored: Vec<(CheckpointId, Vec<u8>)> = (1..).zip(expected.iter().map(|bytes| bytes.to_vec())).collect();
    let newest_first: Vec<_> = stored.iter().rev().cloned().collect();
    assert_eq!(store.head(graph, &thread).unwrap(), stored.last().cloned(), "head of {graph}/{id}");
    assert_eq!(store.history(graph, &thread).unwrap(), newest_first, "history of {graph}/{id}");
    assert_eq!(store.get(graph, &thread, 0).unwrap(), None);
    for (checkpoint, bytes) in &stored {
        assert_eq!(
            store.get(graph, &thread, *checkpoint).unwrap().as_ref(),
            Some(bytes),
            "checkpoint {checkpoint} of {graph}/{id}"
        );
    }
    let past_head = stored.len() as CheckpointId + 1;
    assert_eq!(store.get(graph, &thread, past_head).unwrap(), None);
    // `range` reads a run of ids at once, oldest first, as `get` reads them one by one.
    for from in 0..=past_head {
        for to in [from.saturating_sub(1), from, from + 1, past_head] {
            let expected: Vec<_> = stored.iter().filter(|(id, _)| (from..=to).contains(id)).cloned().collect();
            assert_eq!(store.range(graph, &thread, from, to).unwrap(), expected, "range {from}..={to} of {graph}/{id}");
        }
    }
}

/// Appends `payloads` as checkpoints 1, 2, … of a new thread, each expecting the one before.
fn append_all<C: Checkpointer>(store: &C, graph: &str, id: &str, payloads: &[&[u8]]) {
    let thread = thread(id);
    for (checkpoint, bytes) in (1..).zip(payloads) {
        let expected = Some(checkpoint - 1).filter(|&head| head > 0);
        let outcome = store.append(graph, &thread, expected, checkpoint, bytes, false).unwrap();
        assert_eq!(outcome, AppendOutcome::Written, "checkpoint {checkpoint} of {graph}/{id}");
    }
}

fn empty_thread<C: Checkpointer>(store: &C) {
    let thread = thread("nobody");
    assert_eq!(store.head("empty", &thread).unwrap(), None);
    assert_eq!(store.history("empty", &thread).unwrap(), vec![]);
    assert_eq!(store.get("empty", &thread, 1).unwrap(), None);
}

fn first_append<C: Checkpointer>(store: &C) {
    let t = thread("t");
    let outcome = store.append("first", &t, None, 1, b"one", true).unwrap();
    assert_eq!(outcome, AppendOutcome::Written);
    assert_eq!(store.head("first", &t).unwrap(), Some((1, b"one".to_vec())));
    assert_thread(store, "first", "t", &[b"one"]);
}

fn stale_expected_head_conflicts<C: Checkpointer>(store: &C) {
    let t = thread("t");
    // Expecting a head on an empty thread: the store has none, and stores nothing.
    let outcome = store.append("stale", &t, Some(1), 2, b"two", true).unwrap();
    assert_eq!(outcome, AppendOutcome::Conflict { head: None });
    assert_thread(store, "stale", "t", &[]);

    append_all(store, "stale", "t", &[b"one", b"two"]);
    // An empty thread, an older head and a newer head than the real one all conflict.
    for (expected, id) in [(None, 1), (Some(1), 2), (Some(3), 4)] {
        let outcome = store.append("stale", &t, expected, id, b"late", true).unwrap();
        assert_eq!(outcome, AppendOutcome::Conflict { head: Some(2) }, "expected {expected:?}");
    }
    assert_thread(store, "stale", "t", &[b"one", b"two"]);
    // The real head still works.
    let outcome = store.append("stale", &t, Some(2), 3, b"three", false).unwrap();
    assert_eq!(outcome, AppendOutcome::Written);
    assert_thread(store, "stale", "t", &[b"one", b"two", b"three"]);
}

fn history_is_newest_first<C: Checkpointer>(store: &C) {
    let payloads: Vec<Vec<u8>> = (1..=5).map(|i| format!("checkpoint {i}").into_bytes()).collect();
    let payloads: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
    append_all(store, "five", "t", &payloads);
    let history = store.history("five", &thread("t")).unwrap();
    let ids: Vec<CheckpointId> = history.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, [5, 4, 3, 2, 1]);
    assert_eq!(history[0].1, b"checkpoint 5");
    assert_eq!(history[4].1, b"checkpoint 1");
    assert_thread(store, "five", "t", &payloads);
}

fn graphs_and_threads_are_independent<C: Checkpointer>(store: &C) {
    // The same thread id under two graphs, and ids where one is the start of another
    // (including the empty id), must not see each other's checkpoints.
    append_all(store, "graph-a", "t", &[b"a/t 1", b"a/t 2"]);
    append_all(store, "graph-b", "t", &[b"b/t 1"]);
    append_all(store, "graph-a", "t1", &[b"a/t1 1", b"a/t1 2", b"a/t1 3"]);
    append_all(store, "graph-a", "", &[b"a/- 1"]);
    append_all(store, "graph-a/t", "", &[b"a/t/- 1"]);

    assert_thread(store, "graph-a", "t", &[b"a/t 1", b"a/t 2"]);
    assert_thread(store, "graph-b", "t", &[b"b/t 1"]);
    assert_thread(store, "graph-a", "t1", &[b"a/t1 1", b"a/t1 2", b"a/t1 3"]);
    assert_thread(store, "graph-a", "", &[b"a/- 1"]);
    assert_thread(store, "graph-a/t", "", &[b"a/t/- 1"]);
    assert_thread(store, "graph-b", "t1", &[]);
    assert_thread(store, "graph-c", "t", &[]);

    // A head in one graph is no head in the other.
    let outcome = store.append("graph-b", &thread("t"), Some(2), 3, b"x", false).unwrap();
    assert_eq!(outcome, AppendOutcome::Conflict { head: Some(1) });
}

fn payloads_round_trip<C: Checkpointer>(store: &C) {
    let large: Vec<u8> = (0..1 << 20).map(|i: u32| (i * 31 % 251) as u8).collect();
    let every_byte: Vec<u8> = (0..=255).collect();
    append_all(store, "payloads", "t", &[b"", &large, &every_byte]);
    assert_thread(store, "payloads", "t", &[b"", &large, &every_byte]);
    assert_eq!(store.get("payloads", &thread("t"), 2).unwrap().unwrap().len(), 1 << 20);
}

fn racing_appends_have_one_winner<C: Checkpointer>(store: &C) {
    const RACERS: usize = 8;
    const ROUNDS: CheckpointId = 10;
    let t = thread("contended");
    let barrier = Barrier::new(RACERS);
    for round in 0..ROUNDS {
        let expected = Some(round).filter(|&head| head > 0);
        let id = round + 1;
        let outcomes: Vec<(String, AppendOutcome)> = std::thread::scope(|scope| {
            let racers: Vec<_> = (0..RACERS)
                .map(|racer| {
                    let (barrier, t) = (&barrier, &t);
                    scope.spawn(move || {
                        let name = format!("round {round} racer {racer}");
                        barrier.wait();
                        let durable = round % 2 == 0;
                        let outcome = store.append("race", t, expected, id, name.as_bytes(), durable).unwrap();
                        (name, outcome)
                    })
                })
                .collect();
            racers.into_iter().map(|r| r.join().unwrap()).collect()
        });
        let winners: Vec<&String> =
            outcomes.iter().filter(|(_, outcome)| *outcome == AppendOutcome::Written).map(|(name, _)| name).collect();
        assert_eq!(winners.len(), 1, "round {round}: {outcomes:?}");
        for (_, outcome) in &outcomes {
            if *outcome != AppendOutcome::Written {
                assert_eq!(*outcome, AppendOutcome::Conflict { head: Some(id) }, "round {round}");
            }
        }
        assert_eq!(store.head("race", &t).unwrap(), Some((id, winners[0].clone().into_bytes())), "round {round}");
    }
    let ids: Vec<CheckpointId> = store.history("race", &t).unwrap().iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, (1..=ROUNDS).rev().collect::<Vec<_>>());
}

fn ids_of<C: Checkpointer>(store: &C, graph: &str, id: &str) -> Vec<CheckpointId> {
    store.history(graph, &thread(id)).unwrap().iter().map(|(id, _)| *id).collect()
}

fn threads_are_listed_by_id<C: Checkpointer>(store: &C) {
    assert_eq!(store.threads("listing").unwrap(), vec![]);
    for id in ["b", "ab", "a", "a/b", "", "é", "B"] {
        append_all(store, "listing", id, &[b"one"]);
    }
    assert_eq!(store.append("listing", &thread("b"), Some(1), 2, b"two", false).unwrap(), AppendOutcome::Written);
    append_all(store, "listing-other", "c", &[b"one"]);
    // A conflict on an unknown thread stores nothing, so it lists nothing.
    let outcome = store.append("listing", &thread("ghost"), Some(4), 5, b"x", false).unwrap();
    assert_eq!(outcome, AppendOutcome::Conflict { head: None });
    let expected: Vec<ThreadId> = ["", "B", "a", "a/b", "ab", "b", "é"].into_iter().map(thread).collect();
    assert_eq!(store.threads("listing").unwrap(), expected);
    assert_eq!(store.threads("listing-other").unwrap(), vec![thread("c")]);
    assert_eq!(store.threads("listing-none").unwrap(), vec![]);
}

fn delete_removes_one_thread<C: Checkpointer>(store: &C) {
    append_all(store, "delete", "t", &[b"t 1", b"t 2", b"t 3"]);
    append_all(store, "delete", "t1", &[b"t1 1"]);
    append_all(store, "delete", "", &[b"- 1"]);
    append_all(store, "delete-other", "t", &[b"other t 1"]);

    assert!(!store.delete("delete", &thread("nobody")).unwrap());
    assert!(!store.delete("delete-never", &thread("t")).unwrap());
    assert!(store.delete("delete", &thread("t")).unwrap());
    assert_thread(store, "delete", "t", &[]);
    for id in 1..=4 {
        assert_eq!(store.get("delete", &thread("t"), id).unwrap(), None, "checkpoint {id}");
    }
    assert!(!store.delete("delete", &thread("t")).unwrap(), "deleted twice");
    assert_eq!(store.threads("delete").unwrap(), vec![thread(""), thread("t1")]);
    // Neighbours keep everything.
    assert_thread(store, "delete", "t1", &[b"t1 1"]);
    assert_thread(store, "delete", "", &[b"- 1"]);
    assert_thread(store, "delete-other", "t", &[b"other t 1"]);

    // A writer that still expects the old head loses; the thread starts again from 1.
    let outcome = store.append("delete", &thread("t"), Some(3), 4, b"late", true).unwrap();
    assert_eq!(outcome, AppendOutcome::Conflict { head: None });
    append_all(store, "delete", "t", &[b"again 1", b"again 2"]);
    assert_thread(store, "delete", "t", &[b"again 1", b"again 2"]);

    assert!(store.delete("delete", &thread("")).unwrap());
    assert!(store.delete("delete", &thread("t1")).unwrap());
    assert_eq!(store.threads("delete").unwrap(), vec![thread("t")]);
}

fn delete_at_deletes_only_at_the_head_it_names<C: Checkpointer>(store: &C) {
    append_all(store, "delete-at", "t", &[b"t 1", b"t 2"]);
    append_all(store, "delete-at", "u", &[b"u 1"]);
    assert!(!store.delete_at("delete-at", &thread("t"), 1).unwrap(), "the head moved on to 2");
    assert!(!store.delete_at("delete-at", &thread("t"), 3).unwrap(), "no such head");
    assert!(!store.delete_at("delete-at", &thread("nobody"), 1).unwrap());
    assert_thread(store, "delete-at", "t", &[b"t 1", b"t 2"]);
    assert!(store.delete_at("delete-at", &thread("t"), 2).unwrap());
    assert_thread(store, "delete-at", "t", &[]);
    assert_eq!(store.threads("delete-at").unwrap(), vec![thread("u")]);
    assert!(store.delete("delete-at", &thread("u")).unwrap());
}

/// `append_over` writes only over the head it names holding the bytes it names: another id,
/// other bytes under the same id (a thread deleted and started again) or no thread conflict and
/// store nothing.
fn append_over_compares_the_heads_bytes<C: Checkpointer>(store: &C) {
    append_all(store, "over", "t", &[b"t 1", b"t 2"]);
    let t = thread("t");
    let conflict = |head| AppendOutcome::Conflict { head };
    assert_eq!(store.append_over("over", &t, 2, b"t 2 again", 3, b"t 3", true).unwrap(), conflict(Some(2)));
    assert_eq!(store.append_over("over", &t, 1, b"t 1", 2, b"t 2", true).unwrap(), conflict(Some(2)));
    assert_eq!(store.append_over("over", &thread("nobody"), 1, b"t 1", 2, b"x", true).unwrap(), conflict(None));
    assert_thread(store, "over", "t", &[b"t 1", b"t 2"]);
    assert_eq!(store.append_over("over", &t, 2, b"t 2", 3, b"t 3", true).unwrap(), AppendOutcome::Written);
    assert_thread(store, "over", "t", &[b"t 1", b"t 2", b"t 3"]);
    assert!(store.delete("over", &t).unwrap());
}

fn prune_keeps_the_newest<C: Checkpointer>(store: &C) {
    let payloads: Vec<Vec<u8>> = (1..=6).map(|i| format!("prune {i}").into_bytes()).collect();
    let payloads: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
    append_all(store, "prune", "t", &payloads);
    append_all(store, "prune", "t1", &payloads[..2]);

    assert_eq!(store.prune("prune", &thread("nobody"), 1).unwrap(), 0);
    assert_eq!(store.prune("prune", &thread("t"), 6).unwrap(), 0);
    assert_eq!(store.prune("prune", &thread("t"), 100).unwrap(), 0);
    assert_eq!(store.prune("prune", &thread("t"), usize::MAX).unwrap(), 0);
    assert_eq!(ids_of(store, "prune", "t"), [6, 5, 4, 3, 2, 1]);

    assert_eq!(store.prune("prune", &thread("t"), 3).unwrap(), 3);
    assert_eq!(ids_of(store, "prune", "t"), [6, 5, 4]);
    for id in 1..=3 {
        assert_eq!(store.get("prune", &thread("t"), id).unwrap(), None, "pruned checkpoint {id}");
    }
    assert_eq!(store.get("prune", &thread("t"), 4).unwrap().as_deref(), Some(payloads[3]));
    let kept: Vec<(CheckpointId, Vec<u8>)> = (4..=6).map(|id| (id, payloads[id as usize - 1].to_vec())).collect();
    assert_eq!(store.range("prune", &thread("t"), 1, 6).unwrap(), kept, "range skips what was pruned");
    assert_eq!(store.head("prune", &thread("t")).unwrap(), Some((6, payloads[5].to_vec())));
    assert_eq!(store.prune("prune", &thread("t"), 3).unwrap(), 0, "nothing more to prune");

    // 0 keeps the head, like 1.
    assert_eq!(store.prune("prune", &thread("t"), 0).unwrap(), 2);
    assert_eq!(store.history("prune", &thread("t")).unwrap(), vec![(6, payloads[5].to_vec())]);
    assert_eq!(store.prune("prune", &thread("t"), 0).unwrap(), 0);

    // The thread goes on from its head; the other thread was not touched.
    let outcome = store.append("prune", &thread("t"), Some(6), 7, b"prune 7", true).unwrap();
    assert_eq!(outcome, AppendOutcome::Written);
    assert_eq!(ids_of(store, "prune", "t"), [7, 6]);
    assert_thread(store, "prune", "t1", &payloads[..2]);
    assert_eq!(store.threads("prune").unwrap(), vec![thread("t"), thread("t1")]);
}

/// One writer appends without pause (starting over whenever the thread vanishes) while others
/// delete and prune it: every read sees a head whose checkpoint is stored and a history that runs
/// without gaps from the head down.
fn delete_and_prune_racing_appends_leave_whole_threads<C: Checkpointer>(store: &C) {
    const APPENDS: CheckpointId = 300;
    let t = thread("raced");
    let writing = std::sync::atomic::AtomicBool::new(true);
    let check = |store: &C| {
        let history = store.history("raced", &t).unwrap();
        let ids: Vec<CheckpointId> = history.iter().map(|(id, _)| *id).collect();
        assert!(ids.windows(2).all(|w| w[0] == w[1] + 1), "a gap in {ids:?}");
        for (id, bytes) in &history {
            assert_eq!(bytes, format!("raced {id}").as_bytes());
        }
        if let Some((id, bytes)) = store.head("raced", &t).unwrap() {
            assert_eq!(bytes, format!("raced {id}").into_bytes());
        }
    };
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut head = None;
            let mut written = 0;
            while written < APPENDS {
                let id = head.map_or(1, |h| h + 1);
                match store.append("raced", &t, head, id, format!("raced {id}").as_bytes(), written % 50 == 0).unwrap()
                {
                    AppendOutcome::Written => {
                        head = Some(id);
                        written += 1;
                    }
                    AppendOutcome::Conflict { head: now } => head = now,
                }
            }
            writing.store(false, std::sync::atomic::Ordering::Relaxed);
        });
        scope.spawn(|| {
            let mut round = 0usize;
            while writing.load(std::sync::atomic::Ordering::Relaxed) {
                if round.is_multiple_of(4) {
                    store.delete("raced", &t).unwrap();
                } else {
                    store.prune("raced", &t, round % 3).unwrap();
                }
                check(store);
                round += 1;
                std::thread::yield_now();
            }
        });
        scope.spawn(|| {
            while writing.load(std::sync::atomic::Ordering::Relaxed) {
                check(store);
                std::thread::yield_now();
            }
        });
    });
    check(store);
    // The last delete may have come after the last append.
    let head = store.head("raced", &t).unwrap().map(|(id, _)| id);
    assert_eq!(ids_of(store, "raced", "raced").first().copied(), head);
}

#[test]
fn memory_store_meets_the_contract() {
    contract(&MemoryStore::new());
}

/// The keys of the sealed stores' contract runs (feature `encryption`).
#[cfg(feature = "encryption")]
fn test_keys() -> tea_runtime::KeyRing {
    tea_runtime::KeyRing::new(3, [0x5c; 32])
}

/// `Sealed` over a store meets the contract (reads return what was appended, byte for byte), and
/// what the store underneath holds is a sealed record, not the bytes appended.
#[cfg(feature = "encryption")]
fn sealed_contract<C: Checkpointer + Clone>(store: C) {
    contract(&tea_runtime::Sealed::new(store.clone(), test_keys()));
    let sealed = tea_runtime::Sealed::new(store.clone(), test_keys());
    let t = thread("sealed-raw");
    assert_eq!(sealed.append("sealed-raw", &t, None, 1, b"clear text", true).unwrap(), AppendOutcome::Written);
    let raw = store.head("sealed-raw", &t).unwrap().unwrap().1;
    assert_eq!(&raw[..4], b"TEAs");
    assert!(!raw.windows(10).any(|w| w == b"clear text"), "the record holds the bytes in clear");
    // A tampered record is an error naming the thread and checkpoint, on this store too.
    let mut damaged = raw.clone();
    damaged[20] ^= 0x10;
    store.append("sealed-raw", &t, Some(1), 2, &damaged, true).unwrap();
    match sealed.head("sealed-raw", &t) {
        Err(tea_runtime::Error::Unsealable {
            thread,
            checkpoint: 2,
            reason: tea_runtime::SealFailure::Tampered,
            ..
        }) => {
            assert_eq!(thread, t)
        }
        other => panic!("expected Unsealable, got {other:?}"),
    }
    // Key rotation: a ring whose current key is another still opens record 1 with key 3.
    let rotated = tea_runtime::Sealed::new(store, tea_runtime::KeyRing::new(4, [0x77; 32]).with_old_key(3, [0x5c; 32]));
    assert_eq!(rotated.get("sealed-raw", &t, 1).unwrap().unwrap(), b"clear text");
}

#[cfg(feature = "encryption")]
#[test]
fn sealed_memory_store_meets_the_contract() {
    sealed_contract(MemoryStore::new());
}

#[test]
fn memory_store_clones_share_checkpoints() {
    let store = MemoryStore::new();
    append_all(&store.clone(), "g", "t", &[b"one"]);
    assert_thread(&store, "g", "t", &[b"one"]);
}

mod dir_store {
    use super::*;
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tea_runtime::{DirStore, Error};

    /// A directory of its own for one test, removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(test: &str) -> Self {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let name =
                format!("tea-dir-contract-{}-{test}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
            let path = std::env::temp_dir().join(name);
            let _ = std::fs::remove_dir_all(&path);
            TempDir(path)
        }

        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn store_message<T: std::fmt::Debug>(result: Result<T, Error>) -> String {
        match result {
            Err(error @ Error::Store { .. }) => error.to_string(),
            other => panic!("expected Error::Store, got {other:?}"),
        }
    }

    #[test]
    fn dir_store_meets_the_contract() {
        let dir = TempDir::new("contract");
        contract(&DirStore::open(dir.path()).unwrap());
    }

    #[cfg(feature = "encryption")]
    #[test]
    fn sealed_dir_store_meets_the_contract() {
        let dir = TempDir::new("sealed-contract");
        super::sealed_contract(DirStore::open(dir.path()).unwrap());
    }

    #[test]
    fn two_handles_on_one_directory_share_checkpoints_and_heads() {
        let dir = TempDir::new("handles");
        let (one, two) = (DirStore::open(dir.path()).unwrap(), DirStore::open(dir.path()).unwrap());
        append_all(&one, "g", "t", &[b"one"]);
        assert_thread(&two, "g", "t", &[b"one"]);
        assert_eq!(
            one.append("g", &thread("t"), None, 1, b"x", true).unwrap(),
            AppendOutcome::Conflict { head: Some(1) }
        );
        assert_eq!(two.append("g", &thread("t"), Some(1), 2, b"two", true).unwrap(), AppendOutcome::Written);
        assert_thread(&one.clone(), "g", "t", &[b"one", b"two"]);
        // Racing appends from handles that share nothing in memory still have one winner.
        racing_appends_have_one_winner(&RoundRobin { stores: vec![one, two], next: AtomicUsize::new(0) });
    }

    /// Each call goes to the next of several handles.
    struct RoundRobin {
        stores: Vec<DirStore>,
        next: AtomicUsize,
    }

    impl RoundRobin {
        fn pick(&self) -> &DirStore {
            &self.stores[self.next.fetch_add(1, Ordering::Relaxed) % self.stores.len()]
        }
    }

    impl Checkpointer for RoundRobin {
        fn append(
            &self,
            graph: &str,
            thread: &ThreadId,
            expected: Option<CheckpointId>,
            id: CheckpointId,
            bytes: &[u8],
            durable: bool,
        ) -> Result<AppendOutcome, Error> {
            self.pick().append(graph, thread, expected, id, bytes, durable)
        }
        fn head(&self, graph: &str, thread: &ThreadId) -> Result<Option<(CheckpointId, Vec<u8>)>, Error> {
            self.pick().head(graph, thread)
        }
        fn get(&self, graph: &str, thread: &ThreadId, id: CheckpointId) -> Result<Option<Vec<u8>>, Error> {
            self.pick().get(graph, thread, id)
        }
        fn history(&self, graph: &str, thread: &ThreadId) -> Result<Vec<(CheckpointId, Vec<u8>)>, Error> {
            self.pick().history(graph, thread)
        }
        fn threads(&self, graph: &str) -> Result<Vec<ThreadId>, Error> {
            self.pick().threads(graph)
        }
        fn delete(&self, graph: &str, thread: &ThreadId) -> Result<bool, Error> {
            self.pick().delete(graph, thread)
        }
        fn prune(&self, graph: &str, thread: &ThreadId, keep_last: usize) -> Result<usize, Error> {
            self.pick().prune(graph, thread, keep_last)
        }
    }

    #[test]
    fn files_follow_the_documented_layout() {
        let dir = TempDir::new("layout");
        let store = DirStore::open(dir.path()).unwrap();
        let t = thread("Order 7");
        append_all(&store, "Flow", "Order 7", &[b"one", b"two"]);
        let thread_dir = dir.path().join("%46low").join("%4Frder%207");
        assert_eq!(store.thread_dir("Flow", &t), thread_dir);
        assert_eq!(store.checkpoint_path("Flow", &t, 2), thread_dir.join("000002.ckpt"));
        assert_eq!(std::fs::read(thread_dir.join("000001.ckpt")).unwrap(), b"one");
        assert_eq!(std::fs::read(thread_dir.join("000002.ckpt")).unwrap(), b"two");
        assert_eq!(std::fs::read(thread_dir.join("HEAD")).unwrap(), b"2\n");
        let mut names: Vec<String> =
            std::fs::read_dir(&thread_dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        names.sort();
        assert_eq!(names, ["000001.ckpt", "000002.ckpt", "HEAD", "LOCK"], "no temporary file is left");

        // A pause's file, named for its node; it goes with its checkpoint.
        let link = store.link_pause("Flow", &t, 1, "review").unwrap();
        assert_eq!(link, thread_dir.join("review_%4Frder%207_000001.ckpt"));
        assert_eq!(std::fs::read(&link).unwrap(), b"one");
        assert_eq!(store.link_pause("Flow", &t, 1, "review").unwrap(), link, "replaced");
        assert!(matches!(store.link_pause("Flow", &t, 3, "review"), Err(Error::CheckpointNotFound { .. })));
        assert!(matches!(
            store.link_pause("Flow", &thread("nobody"), 1, "review"),
            Err(Error::CheckpointNotFound { .. })
        ));
        assert_eq!(store.prune("Flow", &t, 1).unwrap(), 1);
        assert!(!link.exists());
        assert_eq!(store.threads("Flow").unwrap(), vec![t.clone()]);

        // Deleting keeps the directory and its lock, nothing else.
        assert!(store.delete("Flow", &t).unwrap());
        let names: Vec<String> =
            std::fs::read_dir(&thread_dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        assert_eq!(names, ["LOCK"]);
        assert_eq!(store.threads("Flow").unwrap(), vec![]);
    }

    #[test]
    fn long_ids_are_hashed_and_still_listed() {
        let dir = TempDir::new("long");
        let store = DirStore::open(dir.path()).unwrap();
        let long = "Ü/".repeat(512);
        let graph = "G".repeat(300);
        append_all(&store, &graph, &long, &[b"one"]);
        append_all(&store, &graph, "short", &[b"one"]);
        assert_thread(&store, &graph, &long, &[b"one"]);
        let name = store.thread_dir(&graph, &thread(&long)).file_name().unwrap().to_str().unwrap().to_owned();
        assert!(name.starts_with('#') && name.len() == 65, "{name}");
        assert_eq!(store.threads(&graph).unwrap(), vec![thread("short"), thread(&long)]);
        let link = store.link_pause(&graph, &thread(&long), 1, "review").unwrap();
        assert_eq!(std::fs::read(link).unwrap(), b"one");
    }

    #[test]
    fn durable_appends_sync_three_times_and_others_never() {
        let dir = TempDir::new("flushes");
        let store = DirStore::open(dir.path()).unwrap();
        let t = thread("t");
        store.append("g", &t, None, 1, b"one", false).unwrap();
        assert_eq!(store.flushes(), 0);
        // The first durable append of a thread also syncs the directories above its own.
        store.append("g", &t, Some(1), 2, b"two", true).unwrap();
        assert_eq!(store.flushes(), 2 + 3, "store and graph directories; checkpoint, HEAD, thread directory");
        store.append("g", &t, Some(2), 3, b"three", false).unwrap();
        assert_eq!(store.flushes(), 5);
        store.append("g", &t, Some(3), 4, b"four", true).unwrap();
        assert_eq!(store.flushes(), 5 + 3);
        // Another thread of the same graph: the graph's directory, once.
        store.append("g", &thread("new"), None, 1, b"one", true).unwrap();
        assert_eq!(store.flushes(), 8 + 1 + 3);
        store.append("g", &thread("new"), Some(1), 2, b"two", true).unwrap();
        assert_eq!(store.clone().flushes(), 12 + 3, "clones share the count");
    }

    #[test]
    fn damaged_files_are_store_errors_naming_the_path() {
        let dir = TempDir::new("damaged");
        let store = DirStore::open(dir.path()).unwrap();
        let t = thread("t");
        append_all(&store, "g", "t", &[b"one", b"two"]);
        let head = store.thread_dir("g", &t).join("HEAD");
        for bad in [&b""[..], b"2", b"0\n", b"two\n", &[b'9'; 4096]] {
            std::fs::write(&head, bad).unwrap();
            for message in [
                store_message(store.head("g", &t)),
                store_message(store.history("g", &t)),
                store_message(store.get("g", &t, 1)),
                store_message(store.append("g", &t, Some(2), 3, b"three", false)),
                store_message(store.threads("g")),
                store_message(store.prune("g", &t, 1)),
            ] {
                assert!(message.contains(&head.display().to_string()), "{message}");
                assert!(message.contains("is corrupt"), "{message}");
            }
        }
        assert!(!store.checkpoint_path("g", &t, 3).exists(), "nothing was written");

        // A head whose file is missing.
        std::fs::write(&head, b"2\n").unwrap();
        std::fs::remove_file(store.checkpoint_path("g", &t, 2)).unwrap();
        let message = store_message(store.head("g", &t));
        assert!(message.contains("000002.ckpt") && message.contains("does not exist"), "{message}");
        // The rest is still readable, and the thread can be deleted.
        assert_eq!(store.history("g", &t).unwrap(), vec![(1, b"one".to_vec())]);
        assert!(store.delete("g", &t).unwrap());
        assert_eq!(store.head("g", &t).unwrap(), None);

        // A directory whose name is not an escaped id.
        std::fs::create_dir_all(dir.path().join("g").join("Not Escaped")).unwrap();
        std::fs::write(dir.path().join("g").join("Not Escaped").join("HEAD"), b"1\n").unwrap();
        let message = store_message(store.threads("g"));
        assert!(message.contains("Not Escaped"), "{message}");
    }

    #[test]
    fn opening_a_file_is_a_store_error_naming_it() {
        let dir = TempDir::new("file");
        std::fs::create_dir_all(dir.path()).unwrap();
        let file = dir.path().join("plain");
        std::fs::write(&file, b"plain file").unwrap();
        let message = store_message(DirStore::open(&file));
        assert!(message.contains(&file.display().to_string()), "{message}");
        assert_eq!(std::fs::read(&file).unwrap(), b"plain file");
    }
}

#[cfg(feature = "sled")]
mod sled_store {
    use super::*;
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tea_runtime::{Error, SledStore};

    /// A directory of its own for one test, removed when dropped.
    pub(crate) struct TempDir(PathBuf);

    impl TempDir {
        pub(crate) fn new(test: &str) -> Self {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let name =
                format!("tea-store-contract-{}-{test}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
            let path = std::env::temp_dir().join(name);
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir_all(&path).unwrap();
            TempDir(path)
        }

        pub(crate) fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn sled_store_meets_the_contract() {
        let dir = TempDir::new("contract");
        let store = SledStore::open(dir.path().join("db")).unwrap();
        contract(&store);
    }

    #[cfg(feature = "encryption")]
    #[test]
    fn sealed_sled_store_meets_the_contract() {
        let dir = TempDir::new("sealed-contract");
        super::sealed_contract(SledStore::open(dir.path().join("db")).unwrap());
    }

    #[test]
    fn sled_store_clones_share_checkpoints() {
        let dir = TempDir::new("clones");
        let store = SledStore::open(dir.path().join("db")).unwrap();
        append_all(&store.clone(), "g", "t", &[b"one"]);
        assert_thread(&store, "g", "t", &[b"one"]);
    }

    #[test]
    fn checkpoints_survive_closing_and_reopening() {
        let dir = TempDir::new("reopen");
        let path = dir.path().join("db");
        let store = SledStore::open(&path).unwrap();
        let clone = store.clone();
        let t = thread("t");
        assert_eq!(store.append("g", &t, None, 1, b"one", true).unwrap(), AppendOutcome::Written);
        assert_eq!(clone.append("g", &t, Some(1), 2, b"two", true).unwrap(), AppendOutcome::Written);
        // Not flushed by `append`; closing the database still keeps it.
        assert_eq!(store.append("other", &t, None, 1, b"other one", false).unwrap(), AppendOutcome::Written);
        drop(store);
        drop(clone);

        let store = SledStore::open(&path).unwrap();
        assert_thread(&store, "g", "t", &[b"one", b"two"]);
        assert_thread(&store, "other", "t", &[b"other one"]);
        // The reopened head still guards appends.
        assert_eq!(
            store.append("g", &t, Some(1), 2, b"late", true).unwrap(),
            AppendOutcome::Conflict { head: Some(2) }
        );
        assert_eq!(store.append("g", &t, Some(2), 3, b"three", true).unwrap(), AppendOutcome::Written);
        drop(store);

        let store = SledStore::open(&path).unwrap();
        assert_thread(&store, "g", "t", &[b"one", b"two", b"three"]);
    }

    fn assert_store_error(result: Result<SledStore, Error>) {
        match result {
            Err(Error::Store { source }) => assert!(!source.to_string().is_empty()),
            other => panic!("expected Error::Store, got {other:?}"),
        }
    }

    /// What `SledStore`'s docs say of damaged files: sled's recovery keeps its log up to the
    /// first damaged record and drops the rest without an error, so threads written after the
    /// damage vanish. (If sled starts reporting damage instead, this test and those docs change.)
    #[test]
    fn a_damaged_log_opens_and_loses_the_threads_after_the_damage() {
        let dir = TempDir::new("damaged-log");
        let path = dir.path().join("db");
        let written: Vec<String> = (0..20).map(|t| format!("t{t:02}")).collect();
        {
            let store = SledStore::open(&path).unwrap();
            for (n, t) in written.iter().enumerate() {
                append_all(&store, "g", t, &[&[n as u8; 2000], &[n as u8; 2000], &[n as u8; 2000]]);
                store.append("g", &thread(t), Some(3), 4, &[n as u8; 2000], true).unwrap();
            }
        }
        let log = path.join("db");
        let mut bytes = std::fs::read(&log).unwrap();
        let middle = bytes.len() / 2;
        for byte in &mut bytes[middle..middle + 16] {
            *byte ^= 0xff;
        }
        std::fs::write(&log, bytes).unwrap();

        let store = SledStore::open(&path).expect("sled opens a damaged log without an error");
        let kept = store.threads("g").unwrap();
        assert!(kept.len() < written.len(), "nothing was lost: {kept:?}");
        // What is kept is the threads written before the damage; the last of them may have lost
        // its newest checkpoints (durable ones too) and reads as an older, whole state.
        let expected: Vec<ThreadId> = written[..kept.len()].iter().map(|t| thread(t)).collect();
        assert_eq!(kept, expected);
        for (n, t) in written[..kept.len()].iter().enumerate() {
            let history = store.history("g", &thread(t)).unwrap();
            let ids: Vec<CheckpointId> = history.iter().map(|(id, _)| *id).collect();
            let whole = (1..=ids.len() as CheckpointId).rev().collect::<Vec<_>>();
            assert!(ids == whole && !ids.is_empty(), "{t}: {ids:?}");
            assert!(history.iter().all(|(_, bytes)| bytes[..] == [n as u8; 2000]), "{t}: damaged bytes");
            if n + 1 < kept.len() {
                assert_eq!(ids.len(), 4, "{t}, written before the last kept thread, is whole");
            }
        }
    }

    #[test]
    fn opening_a_regular_file_is_a_store_error() {
        let dir = TempDir::new("file");
        let file = dir.path().join("not-a-directory");
        std::fs::write(&file, b"plain file").unwrap();
        assert_store_error(SledStore::open(&file));
        // The file is left alone.
        assert_eq!(std::fs::read(&file).unwrap(), b"plain file");
    }

    /// Set in a child process: the database path it tries to open.
    const SECOND_OPENER_ENV: &str = "TEA_STORE_CONTRACT_SECOND_OPENER";

    #[test]
    fn opening_a_database_that_is_already_open_is_a_store_error() {
        if let Ok(path) = std::env::var(SECOND_OPENER_ENV) {
            // The child: report what opening the parent's database says.
            match SledStore::open(path) {
                Ok(_) => println!("opened"),
                Err(error) => println!("error: {error}"),
            }
            return;
        }
        let dir = TempDir::new("locked");
        let path = dir.path().join("db");
        let store = SledStore::open(&path).unwrap();
        // In this process: sled refuses, and the message says why.
        let message = SledStore::open(&path).unwrap_err().to_string();
        assert!(message.starts_with("the checkpoint store failed: "), "{message}");
        assert!(message.contains("could not acquire lock"), "{message}");
        assert!(message.contains(&path.display().to_string()), "{message}");
        // In another process.
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["sled_store::opening_a_database_that_is_already_open_is_a_store_error", "--exact", "--nocapture"])
            .env(SECOND_OPENER_ENV, &path)
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            text.contains("error: the checkpoint store failed: ") && text.contains("could not acquire lock"),
            "{text}"
        );
        // The first handle is unaffected.
        append_all(&store, "g", "t", &[b"one"]);
        assert_thread(&store, "g", "t", &[b"one"]);
    }
}

/// A writer process killed mid-append (SIGKILL) leaves a thread whose head has its checkpoint,
/// whose history is whole, and which keeps every append that returned after a durable flush.
#[cfg(unix)]
mod crash {
    use super::*;
    use std::io::{BufRead, BufReader, Write};
    use std::path::Path;
    use std::process::{Command, Stdio};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// Set in the child process: the store's kind and path, as `kind|path`.
    const WRITER_ENV: &str = "TEA_STORE_CONTRACT_CRASH_WRITER";
    /// Durable appends the parent waits for before it kills the writer.
    const ACKED_BEFORE_KILL: CheckpointId = 40;

    fn open(kind: &str, path: &Path) -> Arc<dyn Checkpointer> {
        match kind {
            #[cfg(feature = "sled")]
            "sled" => Arc::new(tea_runtime::SledStore::open(path).unwrap()),
            "dir" => Arc::new(tea_runtime::DirStore::open(path).unwrap()),
            other => panic!("no store kind {other}"),
        }
    }

    /// Checkpoint `id`'s bytes: up to 48 KiB, so appends span several of sled's log buffers.
    fn payload(id: CheckpointId) -> Vec<u8> {
        let len = (id as usize * 7919) % (48 << 10);
        (0..len).map(|i| (i as u64 ^ id) as u8).collect()
    }

    /// The child: appends checkpoints until it is killed, reporting each durable one on stdout.
    /// Bounded in count and time, so it stops by itself should the parent die first.
    fn write_until_killed(store: &dyn Checkpointer) {
        let t = thread("t");
        let started = Instant::now();
        let mut out = std::io::stdout().lock();
        for id in 1..=100_000 {
            let expected = Some(id - 1).filter(|&head| head > 0);
            let durable = id % 3 == 0;
            let outcome = store.append("crash", &t, expected, id, &payload(id), durable).unwrap();
            assert_eq!(outcome, AppendOutcome::Written);
            if durable {
                writeln!(out, "durable {id}").unwrap();
                out.flush().unwrap();
            }
            if started.elapsed() > Duration::from_secs(60) {
                break;
            }
        }
    }

    /// Runs the writer in a child process running `test`, kills it, and checks what is left.
    fn killed_writer(kind: &str, test: &str) {
        if let Ok(spec) = std::env::var(WRITER_ENV) {
            let (kind, path) = spec.split_once('|').unwrap();
            write_until_killed(&*open(kind, Path::new(path)));
            return;
        }
        let dir = std::env::temp_dir().join(format!("tea-store-contract-crash-{kind}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("store");
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([test, "--exact", "--nocapture", "--test-threads=1"])
            .env(WRITER_ENV, format!("{kind}|{}", path.display()))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut acked = 0;
        for line in BufReader::new(child.stdout.take().unwrap()).lines() {
            // The test harness prints the test's name on the first line.
            if let Some((_, id)) = line.unwrap().split_once("durable ") {
                acked = id.parse().unwrap();
                if acked >= ACKED_BEFORE_KILL {
                    break;
                }
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(acked >= ACKED_BEFORE_KILL, "the writer stopped after {acked}");

        let store = open(kind, &path);
        let t = thread("t");
        let (head, bytes) = store.head("crash", &t).unwrap().expect("a head");
        assert!(head >= acked, "head {head} lost durable checkpoint {acked}");
        assert_eq!(bytes, payload(head));
        let history = store.history("crash", &t).unwrap();
        let ids: Vec<CheckpointId> = history.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, (1..=head).rev().collect::<Vec<_>>());
        for (id, bytes) in &history {
            assert!(*bytes == payload(*id), "checkpoint {id} is damaged");
        }
        // The thread goes on from its head.
        let next = store.append("crash", &t, Some(head), head + 1, b"after", true).unwrap();
        assert_eq!(next, AppendOutcome::Written);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(feature = "sled")]
    #[test]
    fn a_killed_sled_writer_leaves_a_whole_thread() {
        killed_writer("sled", "crash::a_killed_sled_writer_leaves_a_whole_thread");
    }

    #[test]
    fn a_killed_dir_writer_leaves_a_whole_thread() {
        killed_writer("dir", "crash::a_killed_dir_writer_leaves_a_whole_thread");
    }
}

/// Skipped, with a message, when no PostgreSQL server answers (see `tests/postgres_support`).
#[cfg(feature = "postgres")]
#[test]
fn postgres_store_meets_the_contract() {
    let Some(db) = postgres_support::TestSchema::new("contract") else { return };
    contract(&db.store());
}

/// Skipped, with a message, when no PostgreSQL server answers.
#[cfg(all(feature = "postgres", feature = "encryption"))]
#[test]
fn sealed_postgres_store_meets_the_contract() {
    let Some(db) = postgres_support::TestSchema::new("sealed_contract") else { return };
    sealed_contract(db.store());
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_store_clones_share_checkpoints() {
    let Some(db) = postgres_support::TestSchema::new("clones") else { return };
    let store = db.store();
    append_all(&store.clone(), "g", "t", &[b"one"]);
    assert_thread(&store, "g", "t", &[b"one"]);
    // So does another pool on the same schema, as another process would.
    assert_thread(&db.store(), "g", "t", &[b"one"]);
}
