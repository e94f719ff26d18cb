//! A child graph's run keeps its parent's lease alive through its own driver: on tokio, the
//! renewal is the store's async `append`, never a blocking call on the runtime's thread.

use crate::api::app::{App, Builder};
use crate::format::checkpoint::{self, Checkpoint, Lease, Position};
use crate::machine::validate::identity;
use crate::model::fixture::{Shop, Stop, Tally};
use crate::store::{AppendOutcome, Checkpointer, MemoryStore, StoreFuture};
use crate::vocab::clock::Clock;
use crate::vocab::error::Error;
use crate::vocab::name::{CheckpointId, NodeName, ThreadId};
use std::any::TypeId;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A memory store that counts the blocking `append`s made on the thread that made it, and the
/// async ones.
struct Watched {
    inner: MemoryStore,
    home: std::thread::ThreadId,
    blocking_at_home: AtomicUsize,
    async_appends: AtomicUsize,
}

impl Checkpointer for Watched {
    fn append(
        &self,
        graph: &str,
        thread: &ThreadId,
        expected: Option<CheckpointId>,
        id: CheckpointId,
        bytes: &[u8],
        durable: bool,
    ) -> Result<AppendOutcome, Error> {
        if std::thread::current().id() == self.home {
            self.blocking_at_home.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.append(graph, thread, expected, id, bytes, durable)
    }
    fn head(&self, graph: &str, thread: &ThreadId) -> Result<Option<(CheckpointId, Vec<u8>)>, Error> {
        self.inner.head(graph, thread)
    }
    fn get(&self, graph: &str, thread: &ThreadId, id: CheckpointId) -> Result<Option<Vec<u8>>, Error> {
        self.inner.get(graph, thread, id)
    }
    fn history(&self, graph: &str, thread: &ThreadId) -> Result<Vec<(CheckpointId, Vec<u8>)>, Error> {
        self.inner.history(graph, thread)
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
    fn append_async<'a>(
        &'a self,
        graph: &'a str,
        thread: &'a ThreadId,
        expected: Option<CheckpointId>,
        id: CheckpointId,
        bytes: &'a [u8],
        durable: bool,
    ) -> StoreFuture<'a, AppendOutcome> {
        self.async_appends.fetch_add(1, Ordering::SeqCst);
        Box::pin(std::future::ready(self.inner.append(graph, thread, expected, id, bytes, durable)))
    }
}

#[test]
fn a_child_on_tokio_renews_its_parents_lease_through_the_async_store() {
    let store = Arc::new(Watched {
        inner: MemoryStore::new(),
        home: std::thread::current().id(),
        blocking_at_home: AtomicUsize::new(0),
        async_appends: AtomicUsize::new(0),
    });
    let graph = Shop { goal: 2, ..Shop::default() };
    // The clock stands still: the parent's lease is as far gone as the test says.
    let clock = Clock::manual(std::time::UNIX_EPOCH + Duration::from_secs(1_000_000));
    let parent = Builder::new(graph.clone())
        .checkpointer(store.clone())
        .lease(Duration::from_millis(400))
        .clock(clock.clone())
        .build();
    let thread = ThreadId::from("p");
    let host = Arc::new(parent.tenure_as(thread.clone(), None, parent.durability));
    // The parent's run holds its thread by a checkpoint whose lease is more than half gone.
    let until = clock.now_ms() + 100;
    let ckpt = Checkpoint {
        step: 1,
        state: Tally::default(),
        at: Position::Before(NodeName::from_static("split")),
        pending: Vec::new(),
        pause: None,
        resumed: false,
        answers: Vec::new(),
        paused_at: None,
        nonce: None,
        joined: Vec::new(),
        parent: None,
        written_at: None,
        lease: Some(Lease { owner: host.owner, until }),
    };
    let bytes = checkpoint::encode(&identity(&graph), &ckpt).unwrap();
    assert_eq!(store.inner.append("Shop", &thread, None, 1, &bytes, true).unwrap(), AppendOutcome::Written);
    host.wrote_for_test(1, bytes, until);
    // A subgraph node's child on the parent's store, run on a tokio runtime on this thread.
    let child = App::for_child(graph.clone(), host.store.clone(), Some(&host), TypeId::of::<Stop>());
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let out = runtime.block_on(child.run_async(crate::Call::start(Tally::default()).on("p/sub@1"))).unwrap();
    assert_eq!(out.done().map(|t| t.n), Some(2));
    assert_eq!(store.blocking_at_home.load(Ordering::SeqCst), 0, "no blocking append on the runtime's thread");
    assert!(store.async_appends.load(Ordering::SeqCst) > 1);
    // The parent's lease was renewed (its last checkpoint written again, later), by the child.
    let (head, renewed) = crate::store::fold::head(&*store, "Shop", &thread).unwrap().unwrap();
    assert_eq!(head, 2);
    let renewed: Checkpoint<Tally> = checkpoint::decode(&renewed, &identity(&graph), &thread, head).unwrap();
    assert!(renewed.lease.is_some_and(|lease| lease.owner == host.owner && lease.until > until));
    assert_eq!(host.head(), Some(2), "the parent's run follows on from the renewal");
}
