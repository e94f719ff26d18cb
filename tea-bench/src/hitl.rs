//! `hitl_cycle_memory` / `hitl_cycle_durable`: `prepare -> ask -> finish`, paused at `ask` and
//! resumed with the answer "yes"; plus the size of a paused checkpoint and the memory of many
//! paused threads.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use tea::prelude::*;
use tea::{Append, CheckpointId, Graph};

/// The script's `Hitl` state.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
pub struct Ticket {
    pub question: String,
    pub answer: String,
    #[reducer(append)]
    pub log: Vec<String>,
}

/// How the run pauses at `ask`, for the record.
pub const FORM: &str = "interrupt_before ask + resume.update(answer)";

fn prepare(_: &Ticket) -> TicketUpdate {
    Ticket::update().question("approve?".into()).log(vec!["prepare".into()])
}
fn ask(_: &Ticket) -> TicketUpdate {
    Ticket::update().log(vec!["ask".into()])
}
fn finish(_: &Ticket) -> TicketUpdate {
    Ticket::update().log(vec!["finish".into()])
}

graph! {
    /// Prepares a question, pauses for a human before `ask`, finishes.
    pub Approval for Ticket {
        start -> prepare;
        prepare -> ask;
        ask -> finish;
        finish -> end;
        interrupt_before ask;
    }
}

/// Runs to the pause at `ask`.
fn pause<C: Checkpointer>(app: &App<Approval, C>) -> Resume<Ticket> {
    let outcome = app.invoke(Ticket::default()).expect("the hitl run starts");
    let (state, resume) = outcome.interrupted().expect("the hitl run pauses at ask");
    assert_eq!(state.log, ["prepare"]);
    assert_eq!(resume.node().as_str(), "ask");
    resume
}

/// One cycle: invoke, pause, resume with "yes", done.
fn cycle<C: Checkpointer>(app: &App<Approval, C>) {
    let resume = pause(app);
    let outcome = app.resume(resume.update(Ticket::update().answer("yes".into()))).expect("the hitl run resumes");
    let done = outcome.done().expect("the resumed run finishes");
    assert_eq!(done.answer, "yes");
    assert_eq!(done.log, ["prepare", "ask", "finish"]);
}

pub fn cycle_memory() -> impl FnMut() {
    let app = Approval::builder().checkpointer(MemoryStore::new()).build();
    move || cycle(&app)
}

/// A fresh directory under the system's temporary directory.
fn temp_dir(tag: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    std::env::temp_dir().join(format!("tea-bench-{tag}-{}-{nanos}", std::process::id()))
}

/// The cycle on a `SledStore` in a fresh temporary directory, removed when the run is dropped.
pub fn cycle_durable() -> impl FnMut() {
    struct Durable {
        app: Option<App<Approval, SledStore>>,
        dir: PathBuf,
    }
    impl Drop for Durable {
        fn drop(&mut self) {
            drop(self.app.take());
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
    let dir = temp_dir("sled");
    let store = SledStore::open(dir.join("ck.db")).expect("open the sled store");
    let durable = Durable { app: Some(Approval::builder().checkpointer(store).build()), dir };
    move || cycle(durable.app.as_ref().expect("open until dropped"))
}

/// A store that remembers the size of the last checkpoint appended with `durable: true`.
struct Recording<C> {
    inner: C,
    last_durable: AtomicUsize,
}

impl<C: Checkpointer> Checkpointer for Recording<C> {
    fn append(
        &self,
        graph: &str,
        thread: &ThreadId,
        expected: Option<CheckpointId>,
        id: CheckpointId,
        bytes: &[u8],
        durable: bool,
    ) -> Result<Append, Error> {
        if durable {
            self.last_durable.store(bytes.len(), Ordering::Relaxed);
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
}

/// Bytes of the durable checkpoint a hitl run writes when it pauses (envelope included).
pub fn checkpoint_bytes() -> usize {
    let store = Recording { inner: MemoryStore::new(), last_durable: AtomicUsize::new(0) };
    let app = Approval::builder().checkpointer(store).build();
    let resume = pause(&app);
    let bytes = app.checkpointer().last_durable.load(Ordering::Relaxed);
    assert!(bytes > 0, "the pause was written durably");
    let (_, head) = app.checkpointer().head(app.graph().name(), resume.thread()).expect("read").expect("a head");
    assert_eq!(head.len(), bytes, "the paused checkpoint is the thread's head");
    bytes
}

/// Pauses `threads` hitl threads in one `MemoryStore` and reports the peak RSS.
pub fn rss_paused_threads(threads: usize, json: bool) {
    let app = Approval::builder().checkpointer(MemoryStore::new()).build();
    let before = crate::proc_status_bytes("VmRSS");
    for _ in 0..threads {
        drop(pause(&app));
    }
    let peak = crate::proc_status_bytes("VmHWM");
    assert_eq!(app.checkpointer().threads(), threads);
    let per_thread = peak.saturating_sub(before) / threads.max(1) as u64;
    if json {
        println!(
            "{}",
            serde_json::json!({
                "paused_threads": threads,
                "rss_before_bytes": before,
                "peak_rss_bytes": peak,
                "bytes_per_paused_thread": per_thread,
            })
        );
    } else {
        println!("paused threads            {threads}");
        println!("RSS before                {:.1} MiB", before as f64 / (1 << 20) as f64);
        println!("peak RSS (VmHWM)          {:.1} MiB", peak as f64 / (1 << 20) as f64);
        println!("bytes per paused thread   {per_thread}  ((peak - before) / threads)");
    }
}
