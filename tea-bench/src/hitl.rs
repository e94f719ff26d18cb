//! `hitl_cycle_memory` / `hitl_cycle_durable` / `hitl_cycle_durable_postgres`: `prepare -> ask ->
//! finish`, paused at `ask` and resumed with the answer "yes"; plus the size of a paused
//! checkpoint and the memory of many paused threads.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use tea::prelude::*;
use tea::{AppendOutcome, CheckpointId, Graph, SyncGraph};

/// The script's `Hitl` state.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
pub struct Ticket {
    pub question: String,
    pub answer: String,
    #[reducer(append)]
    pub log: Vec<String>,
}

fn prepare(_: &Ticket) -> TicketUpdate {
    Ticket::update().question("approve?".into()).log(vec!["prepare".into()])
}
fn finish(_: &Ticket) -> TicketUpdate {
    Ticket::update().log(vec!["finish".into()])
}

/// The form the JSON numbers use: `ask` is an interrupt node, with no function, that pauses with
/// `question` and writes the answer into `answer`. Having no function, it logs nothing.
mod node {
    use super::*;

    graph! {
        pub AskNode for Ticket {
            start -> prepare;
            prepare -> ask;
            ask -> finish;
            finish -> end;
            interrupt ask(question => answer);
        }
    }
}

/// The script's own form: `ask` calls `interrupt(question)` from inside and runs again, from its
/// start, on resume.
mod interruptible {
    use super::*;
    use tea::{Hitl, Pause};

    fn ask(s: &Ticket, hitl: &mut Hitl) -> Result<TicketUpdate, Pause> {
        let answer: String = hitl.interrupt(&s.question)?;
        Ok(Ticket::update().answer(answer).log(vec!["ask".into()]))
    }

    graph! {
        pub AskInterruptible for Ticket {
            start -> prepare;
            prepare -> ask;
            ask -> finish;
            finish -> end;
            interruptible ask;
        }
    }
}

/// A static breakpoint before a plain `ask` node; the answer comes as a resume update.
mod before {
    use super::*;

    fn ask(_: &Ticket) -> TicketUpdate {
        Ticket::update().log(vec!["ask".into()])
    }

    graph! {
        pub AskBefore for Ticket {
            start -> prepare;
            prepare -> ask;
            ask -> finish;
            finish -> end;
            interrupt_before ask;
        }
    }
}

/// A way to pause at `ask`: the graph, how the answer is given, and the log it ends with.
pub trait Form: SyncGraph<State = Ticket> + Sized {
    const NAME: &'static str;
    const LOG: &'static [&'static str];
    fn builder() -> tea::Builder<Self, tea::NoCheckpointer>;
    fn answer(resume: Resume<Ticket>) -> Resume<Ticket>;
}

pub use before::AskBefore as Before;
pub use interruptible::AskInterruptible as Interruptible;
pub use node::AskNode as Node;

impl Form for Node {
    const NAME: &'static str = "interrupt ask(question => answer); resume.answer(\"yes\")";
    const LOG: &'static [&'static str] = &["prepare", "finish"];
    fn builder() -> tea::Builder<Self, tea::NoCheckpointer> {
        Node::builder()
    }
    fn answer(resume: Resume<Ticket>) -> Resume<Ticket> {
        resume.answer("yes")
    }
}

impl Form for Interruptible {
    const NAME: &'static str = "interruptible ask; hitl.interrupt(question)?; resume.answer(\"yes\")";
    const LOG: &'static [&'static str] = &["prepare", "ask", "finish"];
    fn builder() -> tea::Builder<Self, tea::NoCheckpointer> {
        Interruptible::builder()
    }
    fn answer(resume: Resume<Ticket>) -> Resume<Ticket> {
        resume.answer("yes")
    }
}

impl Form for Before {
    const NAME: &'static str = "interrupt_before ask; resume.update(answer = \"yes\")";
    const LOG: &'static [&'static str] = &["prepare", "ask", "finish"];
    fn builder() -> tea::Builder<Self, tea::NoCheckpointer> {
        Before::builder()
    }
    fn answer(resume: Resume<Ticket>) -> Resume<Ticket> {
        resume.update(Ticket::update().answer("yes".into()))
    }
}

/// Runs to the pause at `ask`.
fn pause<G: Form, C: Checkpointer>(app: &App<G, C>) -> Resume<Ticket> {
    let outcome = app.invoke(Ticket::default()).expect("the hitl run starts");
    let (state, resume) = outcome.interrupted().expect("the hitl run pauses at ask");
    assert_eq!(state.log, ["prepare"]);
    assert_eq!(resume.node().as_str(), "ask");
    resume
}

/// One cycle: invoke, pause, resume with "yes", done.
fn cycle<G: Form, C: Checkpointer>(app: &App<G, C>) {
    let resume = pause(app);
    let outcome = app.resume(G::answer(resume)).expect("the hitl run resumes");
    let done = outcome.done().expect("the resumed run finishes");
    assert_eq!(done.answer, "yes");
    assert_eq!(done.log, G::LOG);
}

pub fn cycle_memory<G: Form>() -> impl FnMut() {
    let app = G::builder().checkpointer(MemoryStore::new()).build();
    move || cycle(&app)
}

/// The cycle in a `MemoryStore` sealed at rest (`Sealed`, XChaCha20-Poly1305).
pub fn cycle_memory_sealed<G: Form>() -> impl FnMut() {
    let app = G::builder().checkpointer(crate::sealed(MemoryStore::new())).build();
    move || cycle(&app)
}

/// The durable cycle on a `SledStore` sealed at rest.
pub fn cycle_durable_sealed<G: Form>() -> impl FnMut() {
    struct Durable<G: Form> {
        app: Option<App<G, tea::Sealed<SledStore>>>,
        dir: PathBuf,
    }
    impl<G: Form> Drop for Durable<G> {
        fn drop(&mut self) {
            drop(self.app.take());
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
    let dir = temp_dir("sled-sealed");
    let store = crate::sealed(SledStore::open(dir.join("ck.db")).expect("open the sled store"));
    let durable = Durable { app: Some(G::builder().checkpointer(store).build()), dir };
    move || cycle(durable.app.as_ref().expect("open until dropped"))
}

/// A fresh directory under the system's temporary directory.
fn temp_dir(tag: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    std::env::temp_dir().join(format!("tea-bench-{tag}-{}-{nanos}", std::process::id()))
}

/// The cycle on a `SledStore` in a fresh temporary directory, removed when the run is dropped.
pub fn cycle_durable<G: Form>() -> impl FnMut() {
    cycle_durable_with::<G>(Durability::EveryStep)
}

/// The durable cycle with checkpoints only at start, pause and end.
pub fn cycle_durable_on_pause<G: Form>() -> impl FnMut() {
    cycle_durable_with::<G>(Durability::OnPause)
}

/// The durable cycle with every step written and only pauses and the end flushed.
pub fn cycle_durable_buffered<G: Form>() -> impl FnMut() {
    cycle_durable_with::<G>(Durability::Buffered)
}

/// How many times `SledStore` flushed its log in one durable cycle under `durability` (the
/// median of five cycles on a fresh store): what each mode pays in fsyncs.
pub fn flushes_per_cycle<G: Form>(durability: Durability) -> u64 {
    let dir = temp_dir("sled-flushes");
    let store = SledStore::open(dir.join("ck.db")).expect("open the sled store");
    let app = G::builder().checkpointer(store).durability(durability).build();
    let mut counts: Vec<u64> = (0..5)
        .map(|_| {
            let before = app.checkpointer().flushes();
            cycle(&app);
            app.checkpointer().flushes() - before
        })
        .collect();
    counts.sort_unstable();
    drop(app);
    let _ = std::fs::remove_dir_all(&dir);
    counts[counts.len() / 2]
}

fn cycle_durable_with<G: Form>(durability: Durability) -> impl FnMut() {
    struct Durable<G: Form> {
        app: Option<App<G, SledStore>>,
        dir: PathBuf,
    }
    impl<G: Form> Drop for Durable<G> {
        fn drop(&mut self) {
            drop(self.app.take());
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
    let dir = temp_dir("sled");
    let store = SledStore::open(dir.join("ck.db")).expect("open the sled store");
    let durable = Durable { app: Some(G::builder().checkpointer(store).durability(durability).build()), dir };
    move || cycle(durable.app.as_ref().expect("open until dropped"))
}

/// The server of `hitl_cycle_durable_postgres`: `TEA_BENCH_POSTGRES_URL`, else the local default.
pub fn postgres_url() -> String {
    std::env::var("TEA_BENCH_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// The cycle on a `PostgresStore` (schema `tea_bench`), or `None`, with the reason on stderr, when
/// the server does not answer. The threads it made are deleted when the run is dropped.
pub fn cycle_durable_postgres<G: Form>() -> Option<impl FnMut()> {
    struct Durable<G: Form> {
        app: App<G, tea::PostgresStore>,
    }
    impl<G: Form> Drop for Durable<G> {
        fn drop(&mut self) {
            for thread in self.app.threads().unwrap_or_default() {
                let _ = self.app.delete(&thread);
            }
        }
    }
    let store = match tea::PostgresStore::builder(&postgres_url()).schema("tea_bench").max_connections(2).connect() {
        Ok(store) => store,
        Err(error) => {
            eprintln!("\nhitl_cycle_durable_postgres skipped: {error}");
            return None;
        }
    };
    let durable = Durable { app: G::builder().checkpointer(store).build() };
    Some(move || cycle(&durable.app))
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
    ) -> Result<AppendOutcome, Error> {
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
    fn threads(&self, graph: &str) -> Result<Vec<ThreadId>, Error> {
        self.inner.threads(graph)
    }

    fn delete(&self, graph: &str, thread: &ThreadId) -> Result<bool, Error> {
        self.inner.delete(graph, thread)
    }

    fn prune(&self, graph: &str, thread: &ThreadId, keep_last: usize) -> Result<usize, Error> {
        self.inner.prune(graph, thread, keep_last)
    }
}

/// Bytes of the durable checkpoint a hitl run writes when it pauses (envelope included).
pub fn checkpoint_bytes() -> usize {
    let store = Recording { inner: MemoryStore::new(), last_durable: AtomicUsize::new(0) };
    let app = Node::builder().checkpointer(store).build();
    let resume = pause(&app);
    let bytes = app.checkpointer().last_durable.load(Ordering::Relaxed);
    assert!(bytes > 0, "the pause was written durably");
    let (_, head) = app.checkpointer().head(app.graph().name(), resume.thread()).expect("read").expect("a head");
    assert_eq!(head.len(), bytes, "the paused checkpoint is the thread's head");
    bytes
}

/// Pauses `threads` hitl threads in one `MemoryStore` and reports the peak RSS.
pub fn rss_paused_threads(threads: usize, json: bool) {
    let app = Node::builder().checkpointer(MemoryStore::new()).build();
    let before = crate::proc_status_bytes("VmRSS");
    let mut last = None;
    for _ in 0..threads {
        last = Some(pause(&app));
    }
    let peak = crate::proc_status_bytes("VmHWM");
    assert_eq!(app.checkpointer().thread_count(), threads);
    // What the store keeps of one paused thread: its whole history, not only the pause.
    let history = last.map_or(Vec::new(), |resume| {
        let thread = resume.thread().clone();
        app.checkpointer().history(app.graph().name(), &thread).expect("read the history")
    });
    let kept: usize = history.iter().map(|(_, bytes)| bytes.len()).sum();
    let per_thread = peak.saturating_sub(before) / threads.max(1) as u64;
    if json {
        println!(
            "{}",
            serde_json::json!({
                "paused_threads": threads,
                "rss_before_bytes": before,
                "peak_rss_bytes": peak,
                "bytes_per_paused_thread": per_thread,
                "checkpoints_per_paused_thread": history.len(),
                "checkpoint_bytes_per_paused_thread": kept,
            })
        );
    } else {
        println!("paused threads            {threads}");
        println!("RSS before                {:.1} MiB", before as f64 / (1 << 20) as f64);
        println!("peak RSS (VmHWM)          {:.1} MiB", peak as f64 / (1 << 20) as f64);
        println!("bytes per paused thread   {per_thread}  ((peak - before) / threads)");
        println!("each thread's history     {} checkpoints, {kept} bytes", history.len());
    }
}

/// `hitl_cycle_durable/sync_floor`: four synced writes of a paused checkpoint's size to a log file
/// in a fresh temporary directory, without tea or sled — the floor under a durable cycle that
/// flushes four times. Each write is what one `SledStore` flush costs the disk: a `pwrite` at the
/// log's end, then `sync_file_range(WAIT_BEFORE | WRITE | WAIT_AFTER)` over it (sled's sync on
/// Linux; elsewhere `fdatasync`). The file is removed when the run is dropped.
pub fn sync_floor(syncs: usize) -> impl FnMut() {
    floor(syncs, synced_write)
}

/// `hitl_cycle_durable/fsync_floor`: as [`sync_floor`], each write followed by `fdatasync`
/// (`File::sync_data`): the "four fsyncs" the issue measures the durable cycle against.
pub fn fsync_floor(syncs: usize) -> impl FnMut() {
    floor(syncs, |file, bytes, offset| {
        use std::os::unix::fs::FileExt;
        file.write_all_at(bytes, offset).expect("write the floor's log");
        file.sync_data().expect("sync the floor's log");
    })
}

/// Four (`syncs`) writes of a paused checkpoint's size to a log in a fresh temporary directory,
/// each made durable by `sync`.
fn floor(syncs: usize, sync: fn(&std::fs::File, &[u8], u64)) -> impl FnMut() {
    struct Log {
        file: std::fs::File,
        dir: PathBuf,
        offset: u64,
        record: Vec<u8>,
    }
    impl Drop for Log {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
    let dir = temp_dir("sync-floor");
    std::fs::create_dir_all(&dir).expect("create the floor's directory");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(dir.join("log"))
        .expect("open the floor's log");
    // A log record: the checkpoint and about the bytes sled frames it with (key, headers).
    let record = vec![0x5a; checkpoint_bytes() + 64];
    let mut log = Log { file, dir, offset: 0, record };
    move || {
        for _ in 0..syncs {
            sync(&log.file, &log.record, log.offset);
            log.offset += log.record.len() as u64;
        }
    }
}

/// Writes `bytes` at `offset` of `file` and waits until they are on the disk, as sled does.
fn synced_write(file: &std::fs::File, bytes: &[u8], offset: u64) {
    use std::os::unix::fs::FileExt;
    file.write_all_at(bytes, offset).expect("write the floor's log");
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER;
        let (start, len) = (offset as libc::off64_t, bytes.len() as libc::off64_t);
        // SAFETY: a plain system call on an open descriptor, with no memory handed over.
        let synced = unsafe { libc::sync_file_range(file.as_raw_fd(), start, len, flags) };
        assert_eq!(synced, 0, "sync_file_range: {}", std::io::Error::last_os_error());
    }
    #[cfg(not(target_os = "linux"))]
    file.sync_data().expect("sync the floor's log");
}
