//! Long-term memory (`tea::Memory`) on every store tea provides: put, get, delete, namespaces,
//! filter and embedding search, TTL with a manual clock, sweeps, racing writers, and the layout
//! `tea serve` wrote before `Memory` existed. `behaviour` is generic over the store, as the
//! `Checkpointer` contract is (`store_contract.rs`).

#[cfg(feature = "postgres")]
#[path = "../../tests/postgres_support/mod.rs"]
mod postgres_support;

use serde_json::json;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tea_runtime::{
    AppendOutcome, Checkpointer, Clock, DirStore, Error, Memory, MemoryProblem, MemoryStore, SearchQuery, ThreadId,
};

/// Every case, run on `store` (which must start empty).
fn behaviour(store: Arc<dyn Checkpointer>) {
    put_get_delete(&store);
    namespaces_and_filters(&store);
    ttl_expires_on_read_and_in_sweeps(&store);
    embedding_search(&store);
    bad_calls_are_typed_errors(&store);
    racing_puts_all_land(&store);
    reads_what_tea_serve_wrote(&store);
}

fn clock() -> Clock {
    Clock::manual(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
}

fn put_get_delete(store: &Arc<dyn Checkpointer>) {
    let clock = clock();
    let memory = Memory::on(store.clone()).clock(clock.clone());
    assert_eq!(memory.get(&["pgd", "ada"], "prefs").unwrap(), None);
    memory.put(&["pgd", "ada"], "prefs", json!({ "theme": "dark" })).unwrap();
    let first = memory.get(&["pgd", "ada"], "prefs").unwrap().expect("put");
    assert_eq!(first.namespace, ["pgd", "ada"]);
    assert_eq!(first.key, "prefs");
    assert_eq!(first.value["theme"], "dark");
    assert_eq!(first.created_at_ms, 1_700_000_000_000);
    assert_eq!((first.expires_at_ms, first.score), (None, None));

    // A put replaces the value and keeps the creation time; another memory on the store (another
    // process) reads it.
    clock.advance(Duration::from_secs(5));
    memory.put(&["pgd", "ada"], "prefs", json!({ "theme": "light" })).unwrap();
    let other = Memory::on(store.clone()).clock(clock.clone());
    let second = other.get(&["pgd", "ada"], "prefs").unwrap().unwrap();
    assert_eq!(second.value["theme"], "light");
    assert_eq!(second.created_at_ms, first.created_at_ms);
    assert_eq!(second.updated_at_ms, first.created_at_ms + 5_000);

    // Many puts of one item keep its history short (pruned as it goes).
    for n in 0..40 {
        memory.put(&["pgd", "ada"], "counter", json!({ "n": n })).unwrap();
    }
    assert_eq!(memory.get(&["pgd", "ada"], "counter").unwrap().unwrap().value["n"], 39);
    let id = ThreadId::from(r#"["pgd","ada","counter"]"#);
    assert!(store.history("tea-serve#store", &id).unwrap().len() <= 16, "older versions are pruned");

    assert!(memory.delete(&["pgd", "ada"], "prefs").unwrap());
    assert!(!other.delete(&["pgd", "ada"], "prefs").unwrap(), "deleted once");
    assert_eq!(other.get(&["pgd", "ada"], "prefs").unwrap(), None);
    assert!(memory.delete(&["pgd", "ada"], "counter").unwrap());
}

fn namespaces_and_filters(store: &Arc<dyn Checkpointer>) {
    let clock = clock();
    let memory = Memory::on(store.clone()).clock(clock.clone());
    for (ns, key, value) in [
        (vec!["nf", "users", "bob"], "prefs", json!({ "theme": "light", "age": 30 })),
        (vec!["nf", "users", "ada", "notes"], "n1", json!({ "text": "hi" })),
        (vec!["nf", "teams"], "core", json!({ "lead": "ada" })),
        (vec!["nf", "users", "ada"], "prefs", json!({ "theme": "dark", "age": 40 })),
    ] {
        clock.advance(Duration::from_millis(10));
        memory.put(&ns, key, value).unwrap();
    }
    let keys = |query: SearchQuery| -> Vec<(Vec<String>, String)> {
        memory.search(&query).unwrap().into_iter().map(|i| (i.namespace, i.key)).collect()
    };
    let ns = |labels: &[&str]| labels.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    // The most recently updated first.
    assert_eq!(
        keys(SearchQuery::under(&["nf", "users"])),
        [
            (ns(&["nf", "users", "ada"]), "prefs".to_owned()),
            (ns(&["nf", "users", "ada", "notes"]), "n1".to_owned()),
            (ns(&["nf", "users", "bob"]), "prefs".to_owned()),
        ]
    );
    assert_eq!(
        keys(SearchQuery::under(&["nf"]).filter("theme", "light")),
        [(ns(&["nf", "users", "bob"]), "prefs".into())]
    );
    assert_eq!(
        keys(SearchQuery::under(&["nf"]).filter("age", json!({ "$gt": 35 }))),
        [(ns(&["nf", "users", "ada"]), "prefs".into())]
    );
    assert_eq!(keys(SearchQuery::under(&["nf"]).limit(2).offset(3)).len(), 1, "four items in all");
    assert!(keys(SearchQuery::under(&["nf", "nobody"])).is_empty());

    let none: &[&str] = &[];
    assert_eq!(
        memory.namespaces(&["nf"], none, None).unwrap(),
        [
            ns(&["nf", "teams"]),
            ns(&["nf", "users", "ada"]),
            ns(&["nf", "users", "ada", "notes"]),
            ns(&["nf", "users", "bob"])
        ]
    );
    assert_eq!(
        memory.namespaces(&["nf", "users"], none, Some(3)).unwrap(),
        [ns(&["nf", "users", "ada"]), ns(&["nf", "users", "bob"])]
    );
    assert_eq!(memory.namespaces(&["nf"], &["notes"], None).unwrap(), [ns(&["nf", "users", "ada", "notes"])]);
    for item in memory.search(&SearchQuery::under(&["nf"]).limit(100)).unwrap() {
        assert!(memory.delete(&item.namespace, &item.key).unwrap());
    }
}

fn ttl_expires_on_read_and_in_sweeps(store: &Arc<dyn Checkpointer>) {
    let clock = clock();
    let memory = Memory::on(store.clone()).clock(clock.clone());
    memory.put_with_ttl(&["ttl"], "soon", json!({ "v": 1 }), Some(Duration::from_secs(60))).unwrap();
    memory.put(&["ttl"], "kept", json!({ "v": 2 })).unwrap();
    let defaulted = memory.clone().default_ttl(Duration::from_secs(120));
    defaulted.put(&["ttl"], "later", json!({ "v": 3 })).unwrap();
    assert_eq!(memory.get(&["ttl"], "soon").unwrap().unwrap().expires_at_ms, Some(1_700_000_060_000));
    assert_eq!(memory.sweep().unwrap(), 0, "nothing has expired yet");

    clock.advance(Duration::from_secs(61));
    // Expired: absent to reads, searches and listings at once, before any sweep.
    assert_eq!(memory.get(&["ttl"], "soon").unwrap(), None);
    let found: Vec<String> = memory.search(&SearchQuery::under(&["ttl"])).unwrap().into_iter().map(|i| i.key).collect();
    assert_eq!(found, ["kept", "later"], "put at one time: by key");
    assert!(store.head("tea-serve#store", &ThreadId::from(r#"["ttl","soon"]"#)).unwrap().is_some(), "still stored");
    assert_eq!(memory.sweep().unwrap(), 1);
    assert!(store.head("tea-serve#store", &ThreadId::from(r#"["ttl","soon"]"#)).unwrap().is_none(), "swept");

    // A put renews an item's time; an expired item put again is a new one.
    clock.advance(Duration::from_secs(100));
    defaulted.put(&["ttl"], "later", json!({ "v": 4 })).unwrap();
    clock.advance(Duration::from_secs(100));
    assert_eq!(memory.get(&["ttl"], "later").unwrap().unwrap().value["v"], 4);
    clock.advance(Duration::from_secs(30));
    assert_eq!(memory.get(&["ttl"], "later").unwrap(), None);
    assert!(!memory.delete(&["ttl"], "later").unwrap(), "an expired item is not there to delete");
    memory.put(&["ttl"], "later", json!({ "v": 5 })).unwrap();
    let again = memory.get(&["ttl"], "later").unwrap().unwrap();
    assert_eq!(again.created_at_ms, again.updated_at_ms);
    assert_eq!(again.expires_at_ms, None);
    let none: &[&str] = &[];
    assert_eq!(memory.namespaces(&["ttl"], none, None).unwrap(), [vec!["ttl".to_owned()]]);
    assert_eq!(memory.sweep().unwrap(), 0);
    assert!(memory.delete(&["ttl"], "kept").unwrap());
    assert!(memory.delete(&["ttl"], "later").unwrap());
}

/// A deterministic toy embedder: how often each of a few words occurs.
fn toy_embedding(text: &str) -> Vec<f32> {
    let text = text.to_lowercase();
    ["cat", "dog", "pizza", "pasta"].iter().map(|w| text.matches(w).count() as f32).collect()
}

fn embedding_search(store: &Arc<dyn Checkpointer>) {
    let plain = Memory::on(store.clone()).clock(clock());
    // Put before the embedder was set: embedded when a search meets it.
    plain.put(&["emb"], "old", json!({ "text": "pasta and more pasta" })).unwrap();
    let memory = plain.clone().embedder(toy_embedding).index_fields(&["text"]);
    memory.put(&["emb"], "pets", json!({ "text": "my cat and my dog", "other": "pizza pizza pizza" })).unwrap();
    memory.put(&["emb"], "food", json!({ "text": "pizza tonight" })).unwrap();
    memory.put(&["emb"], "cats", json!({ "text": "a cat, another cat" })).unwrap();

    let search = |text: &str| -> Vec<(String, f64)> {
        memory
            .search(&SearchQuery::under(&["emb"]).text(text))
            .unwrap()
            .into_iter()
            .map(|i| (i.key, i.score.expect("a similarity search scores its items")))
            .collect()
    };
    let found = search("cat");
    assert_eq!(found.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(), ["cats", "pets", "food", "old"]);
    assert!((found[0].1 - 1.0).abs() < 1e-6, "{found:?}");
    assert!((found[1].1 - 0.5f64.sqrt()).abs() < 1e-6, "only the indexed field counts: {found:?}");
    assert_eq!(search("pasta")[0].0, "old");
    // With a filter and a page.
    let found = memory.search(&SearchQuery::under(&["emb"]).text("pizza").filter("text", "pizza tonight")).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].key, "food");
    assert_eq!(memory.search(&SearchQuery::under(&["emb"]).text("dog").limit(1)).unwrap()[0].key, "pets");

    // Without an embedder, a text search is refused as such.
    match plain.search(&SearchQuery::under(&["emb"]).text("cat")) {
        Err(Error::Memory { problem: MemoryProblem::NoEmbedder, .. }) => {}
        other => panic!("expected NoEmbedder, got {other:?}"),
    }
    // An embedder that fails or panics fails the call, naming the item.
    let failing = plain.clone().embedder(|_: &str| -> Vec<f32> { panic!("model down") });
    match failing.put(&["emb"], "x", json!({ "text": "t" })) {
        Err(Error::Memory { key: Some(key), problem: MemoryProblem::Embedder { source }, .. }) => {
            assert_eq!(key, "x");
            assert!(source.to_string().contains("model down"), "{source}");
        }
        other => panic!("expected an embedder error, got {other:?}"),
    }
    assert_eq!(plain.get(&["emb"], "x").unwrap(), None, "nothing was written");
    for key in ["old", "pets", "food", "cats"] {
        assert!(plain.delete(&["emb"], key).unwrap());
    }
}

fn bad_calls_are_typed_errors(store: &Arc<dyn Checkpointer>) {
    let memory = Memory::on(store.clone());
    let problem = |result: Result<(), Error>| match result {
        Err(Error::Memory { problem, .. }) => problem,
        other => panic!("expected Error::Memory, got {other:?}"),
    };
    let none: &[&str] = &[];
    assert!(matches!(problem(memory.put(none, "k", json!({}))), MemoryProblem::BadNamespace { .. }));
    assert!(
        matches!(problem(memory.put(&["a.b"], "k", json!({}))), MemoryProblem::BadNamespace { label } if label == "a.b")
    );
    assert!(matches!(problem(memory.put(&[""], "k", json!({}))), MemoryProblem::BadNamespace { .. }));
    assert!(matches!(problem(memory.put(&["bad"], "", json!({}))), MemoryProblem::BadKey));
    assert!(matches!(problem(memory.put(&["bad"], "a\nb", json!({}))), MemoryProblem::BadKey));
    assert!(matches!(problem(memory.put(&["bad"], &"k".repeat(2000), json!({}))), MemoryProblem::TooLong { .. }));
    assert!(matches!(problem(memory.put(&["bad"], "k", json!([1, 2]))), MemoryProblem::NotAnObject { .. }));
    assert!(matches!(
        problem(memory.search(&SearchQuery::under(&["a.b"])).map(drop)),
        MemoryProblem::BadNamespace { .. }
    ));
    let message = memory.put(&["bad"], "k", json!("text")).unwrap_err().to_string();
    assert!(message.contains("\"k\"") && message.contains("[\"bad\"]"), "names the item: {message}");

    // A damaged item is an error naming it on read, and skipped by searches and sweeps.
    let id = ThreadId::from(r#"["bad","damaged"]"#);
    assert_eq!(store.append("tea-serve#store", &id, None, 1, b"{not json", true).unwrap(), AppendOutcome::Written);
    assert!(matches!(
        memory.get(&["bad"], "damaged"),
        Err(Error::Memory { problem: MemoryProblem::Damaged { .. }, .. })
    ));
    assert!(memory.search(&SearchQuery::under(&["bad"])).unwrap().is_empty());
    assert_eq!(memory.sweep().unwrap(), 0);
    assert!(memory.delete(&["bad"], "damaged").unwrap());
}

fn racing_puts_all_land(store: &Arc<dyn Checkpointer>) {
    let writers = 8;
    let barrier = Arc::new(Barrier::new(writers));
    let handles: Vec<_> = (0..writers)
        .map(|n| {
            let (memory, barrier) = (Memory::on(store.clone()), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                for round in 0..5 {
                    memory.put(&["race"], "shared", json!({ "writer": n, "round": round })).unwrap();
                    memory.put(&["race", "own"], &format!("w{n}"), json!({ "round": round })).unwrap();
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    let memory = Memory::on(store.clone());
    let shared = memory.get(&["race"], "shared").unwrap().unwrap();
    assert_eq!(shared.value["round"], 4, "some writer's last put is the item");
    let own = memory.search(&SearchQuery::under(&["race", "own"]).limit(100)).unwrap();
    assert_eq!(own.len(), writers);
    assert!(own.iter().all(|i| i.value["round"] == 4));
    for item in memory.search(&SearchQuery::under(&["race"]).limit(100)).unwrap() {
        memory.delete(&item.namespace, &item.key).unwrap();
    }
}

/// An item as `tea serve` wrote it before `Memory` existed (no expiry, no embedding) reads, and
/// what `Memory` writes without a TTL or embedder has the same fields.
fn reads_what_tea_serve_wrote(store: &Arc<dyn Checkpointer>) {
    let id = ThreadId::from(r#"["served","ada"]"#);
    let old = br#"{"namespace":["served"],"key":"ada","value":{"theme":"dark"},"created_at":1000,"updated_at":2000}"#;
    assert_eq!(store.append("tea-serve#store", &id, None, 1, old, true).unwrap(), AppendOutcome::Written);
    let memory = Memory::on(store.clone());
    let item = memory.get(&["served"], "ada").unwrap().unwrap();
    assert_eq!((item.value["theme"].as_str(), item.created_at_ms, item.updated_at_ms), (Some("dark"), 1000, 2000));
    memory.put(&["served"], "bob", json!({ "theme": "light" })).unwrap();
    let written = store.head("tea-serve#store", &ThreadId::from(r#"["served","bob"]"#)).unwrap().unwrap().1;
    let written: serde_json::Value = serde_json::from_slice(&written).unwrap();
    let mut fields: Vec<&str> = written.as_object().unwrap().keys().map(String::as_str).collect();
    fields.sort_unstable();
    assert_eq!(fields, ["created_at", "key", "namespace", "updated_at", "value"]);
    assert!(memory.delete(&["served"], "ada").unwrap());
    assert!(memory.delete(&["served"], "bob").unwrap());
}

/// A directory of its own for one test, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(test: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!("tea-memory-{}-{test}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let path = std::env::temp_dir().join(name);
        let _ = std::fs::remove_dir_all(&path);
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn memory_on_a_memory_store() {
    behaviour(Arc::new(MemoryStore::new()));
}

#[test]
fn memory_on_a_dir_store() {
    let dir = TempDir::new("dir");
    behaviour(Arc::new(DirStore::open(&dir.0).unwrap()));
}

#[cfg(feature = "sled")]
#[test]
fn memory_on_a_sled_store() {
    let dir = TempDir::new("sled");
    behaviour(Arc::new(tea_runtime::SledStore::open(&dir.0).unwrap()));
}

/// On a sealed store the items are sealed: what is stored underneath is not their text.
#[cfg(feature = "encryption")]
#[test]
fn memory_on_a_sealed_store() {
    let raw = MemoryStore::new();
    let sealed = tea_runtime::Sealed::new(raw.clone(), tea_runtime::KeyRing::new(1, [0x42; 32]));
    // The layout case writes clear records below `Memory`, which a sealed store refuses to read:
    // the other cases run on it.
    let store: Arc<dyn Checkpointer> = Arc::new(sealed);
    put_get_delete(&store);
    namespaces_and_filters(&store);
    ttl_expires_on_read_and_in_sweeps(&store);
    embedding_search(&store);
    bad_calls_are_typed_errors(&store);
    racing_puts_all_land(&store);
    let memory = Memory::on(store);
    memory.put(&["secret"], "k", json!({ "text": "the launch code" })).unwrap();
    let bytes = raw.head("tea-serve#store", &ThreadId::from(r#"["secret","k"]"#)).unwrap().unwrap().1;
    assert!(!bytes.windows(11).any(|w| w == b"launch code"), "the item is stored in clear");
    assert_eq!(memory.get(&["secret"], "k").unwrap().unwrap().value["text"], "the launch code");
}

/// Skipped, with a message, when no PostgreSQL server answers (see `tests/postgres_support`).
#[cfg(feature = "postgres")]
#[test]
fn memory_on_a_postgres_store() {
    let Some(db) = postgres_support::TestSchema::new("memory") else { return };
    behaviour(Arc::new(db.store()));
    // Two pools on one schema, as two processes: one's items are the other's.
    let (a, b) = (Memory::new(db.store()), Memory::new(db.store()));
    a.put(&["shared"], "fact", json!({ "likes": "tea" })).unwrap();
    assert_eq!(b.get(&["shared"], "fact").unwrap().unwrap().value["likes"], "tea");
}

#[test]
fn system_clock_times_are_now() {
    let memory = Memory::new(MemoryStore::new());
    let before = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    memory.put(&["now"], "k", json!({})).unwrap();
    let item = memory.get(&["now"], "k").unwrap().unwrap();
    assert!(item.created_at_ms >= before && item.created_at_ms < before + 60_000);
}
