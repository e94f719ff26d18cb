//! Watching a run: the progress line (the running node and the time), `-v`'s line per node,
//! the `--trace` timeline, and Ctrl-C (the first stops the run at the next step boundary, a
//! second exits at once). All of it from the engine's event stream: a step event arrives when
//! its node has run and its checkpoint is written, and carries the node's duration. The progress
//! line names the node that runs next from `Graph::try_route`, asked while the run is idle
//! between events.

use serde_json::{json, Value};
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tea_runtime::{Goto, Graph, NodeName, Resume};
use tea_yaml::{State, YamlGraph};

/// How much goes to stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verbosity {
    /// `-q`: errors only.
    Quiet = 0,
    /// The default: the progress line on a terminal, notes and hints.
    Normal = 1,
    /// `-v` and more: also a line per node as it ends.
    Verbose = 2,
}

impl Verbosity {
    /// The verbosity of `count` `-v` flags.
    pub fn from_count(count: u8) -> Verbosity {
        if count == 0 {
            Verbosity::Normal
        } else {
            Verbosity::Verbose
        }
    }
}

static VERBOSITY: AtomicU8 = AtomicU8::new(Verbosity::Normal as u8);

/// Sets the verbosity for the process (from `-q`/`-v`).
pub fn set_verbosity(verbosity: Verbosity) {
    VERBOSITY.store(verbosity as u8, Ordering::Relaxed);
}

/// Whether notes and hints go to stderr (not under `-q`).
pub fn chatty() -> bool {
    VERBOSITY.load(Ordering::Relaxed) >= Verbosity::Normal as u8
}

/// Whether `-v` was given.
pub fn verbose() -> bool {
    VERBOSITY.load(Ordering::Relaxed) >= Verbosity::Verbose as u8
}

/// A note on stderr, unless `-q`.
pub fn note(text: &str) {
    if chatty() {
        eprintln!("tea: {text}");
    }
}

// ---------------------------------------------------------------------------------------------
// Ctrl-C.

/// How many times Ctrl-C was pressed.
static INTERRUPTS: AtomicUsize = AtomicUsize::new(0);
/// Whether the current run stops at step boundaries (else the first Ctrl-C cancels it).
static STEPPED: AtomicBool = AtomicBool::new(true);

/// Takes over Ctrl-C on `runtime`: the first asks the run to stop (see [`stop_requested`]), a
/// second exits at once with status 130.
pub fn handle_ctrl_c(runtime: &tokio::runtime::Runtime) {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        // Listening starts here, before the run begins: a Ctrl-C from now on is seen however
        // late the task below first runs (`tokio::signal::ctrl_c()` listens only from its first
        // poll, and a Ctrl-C before that would end the process with no step boundary).
        let listening = {
            let _context = runtime.enter();
            listen_for_ctrl_c()
        };
        let mut ctrl_c = match listening {
            Ok(ctrl_c) => ctrl_c,
            Err(error) => {
                note(&format!("cannot listen for Ctrl-C ({error}): Ctrl-C ends the run at once"));
                return;
            }
        };
        runtime.spawn(async move {
            while ctrl_c.recv().await.is_some() {
                if INTERRUPTS.fetch_add(1, Ordering::SeqCst) == 0 {
                    let how =
                        if STEPPED.load(Ordering::Relaxed) { "stopping at the next step boundary" } else { "stopping" };
                    eprintln!("\r\x1b[2Ktea: Ctrl-C: {how} (Ctrl-C again to exit at once)");
                } else {
                    eprintln!("\r\x1b[2Ktea: Ctrl-C again: exiting now; the thread keeps its lease until it expires");
                    std::process::exit(i32::from(crate::EXIT_STOPPED));
                }
            }
        });
    });
}

/// Starts listening for Ctrl-C (SIGINT); must be called inside the runtime's context.
#[cfg(unix)]
fn listen_for_ctrl_c() -> std::io::Result<tokio::signal::unix::Signal> {
    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
}

/// Starts listening for Ctrl-C; must be called inside the runtime's context.
#[cfg(windows)]
fn listen_for_ctrl_c() -> std::io::Result<tokio::signal::windows::CtrlC> {
    tokio::signal::windows::ctrl_c()
}

/// Whether Ctrl-C asked the run to stop.
pub fn stop_requested() -> bool {
    INTERRUPTS.load(Ordering::SeqCst) > 0
}

/// Says whether the run about to start stops at step boundaries (a stream) or is cancelled.
pub fn stops_at_steps(stepped: bool) {
    STEPPED.store(stepped, Ordering::Relaxed);
}

// ---------------------------------------------------------------------------------------------
// The trace file.

/// The open `--trace` file, and when it was opened (its records' times count from there).
struct TraceFile {
    file: std::io::BufWriter<std::fs::File>,
    opened: Instant,
}

static TRACE: Mutex<Option<TraceFile>> = Mutex::new(None);

/// Where a run's trace goes: the `--trace` file if given, else where the agent file asks
/// (The Edge Agent's `settings.auto_trace: true`: a `trace_file`, or the console, which shows a
/// line per step as `-v` does, unless `-q`).
pub fn trace_to(given: Option<&Path>, agent: &tea_yaml::Agent, command: &str) -> Result<(), String> {
    match (given, agent.auto_trace()) {
        (Some(path), _) => open_trace(path, command, agent.name()),
        (None, Some(tea_yaml::AutoTrace::File(path))) => open_trace(path, command, agent.name()),
        (None, Some(tea_yaml::AutoTrace::Console)) => {
            if chatty() {
                set_verbosity(Verbosity::Verbose);
            }
            Ok(())
        }
        (None, _) => Ok(()),
    }
}

/// Opens (truncates) the `--trace` file and writes its first record.
pub fn open_trace(path: &Path, command: &str, agent: &str) -> Result<(), String> {
    let file =
        std::fs::File::create(path).map_err(|e| format!("cannot write the --trace file `{}`: {e}", path.display()))?;
    let mut trace = TraceFile { file: std::io::BufWriter::new(file), opened: Instant::now() };
    let unix_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    let first = json!({ "event": "start", "at_ms": 0.0, "command": command, "agent": agent, "unix_ms": unix_ms });
    write_record(&mut trace, &first).map_err(|e| format!("cannot write the --trace file `{}`: {e}", path.display()))?;
    *TRACE.lock().unwrap_or_else(|e| e.into_inner()) = Some(trace);
    Ok(())
}

fn write_record(trace: &mut TraceFile, record: &Value) -> std::io::Result<()> {
    writeln!(trace.file, "{record}")?;
    trace.file.flush()
}

/// Milliseconds since the trace was opened, rounded to microseconds.
fn trace_ms(trace: &TraceFile, at: Instant) -> f64 {
    ms(at.saturating_duration_since(trace.opened))
}

fn ms(duration: Duration) -> f64 {
    (duration.as_micros() as f64) / 1000.0
}

/// Writes a record, if a trace is open; `fill` adds the times (given the trace's clock).
fn record(fill: impl FnOnce(&dyn Fn(Instant) -> f64) -> Value) {
    let mut guard = TRACE.lock().unwrap_or_else(|e| e.into_inner());
    let Some(trace) = guard.as_mut() else { return };
    let record = {
        let clock = |at: Instant| trace_ms(trace, at);
        fill(&clock)
    };
    if let Err(error) = write_record(trace, &record) {
        eprintln!("tea: cannot write the --trace file: {error}; tracing stops");
        *guard = None;
    }
}

/// Whether a trace is being written.
fn tracing() -> bool {
    TRACE.lock().unwrap_or_else(|e| e.into_inner()).is_some()
}

// ---------------------------------------------------------------------------------------------
// A run, watched.

/// What the progress line shows.
struct Status {
    /// The node(s) running, as shown.
    running: String,
    /// Since when.
    since: Instant,
    steps: u64,
}

/// One run (or resume, or recover) as it goes: the progress line, `-v` lines, trace records.
pub struct Watch<'a> {
    graph: &'a YamlGraph,
    status: Arc<Mutex<Status>>,
    started: Instant,
    /// When the last event (or the start) was seen.
    last: Instant,
    last_node: Option<NodeName>,
    done: Arc<AtomicBool>,
    ticker: Option<std::thread::JoinHandle<()>>,
}

impl<'a> Watch<'a> {
    /// Starts watching a run of `agent` that begins at `first` (a node's name, or what it does),
    /// on a thread that has run `steps` steps before (0 for a new one): its steps are counted
    /// on from there.
    pub fn start(graph: &'a YamlGraph, agent: &str, what: &str, first: &str, steps: u64) -> Watch<'a> {
        let now = Instant::now();
        let status = Arc::new(Mutex::new(Status { running: first.to_owned(), since: now, steps }));
        let done = Arc::new(AtomicBool::new(false));
        record(|clock| json!({ "event": "run", "call": what, "at_ms": clock(now), "agent": agent }));
        let ticker = (chatty() && std::io::stderr().is_terminal())
            .then(|| spinner(agent.to_owned(), Arc::clone(&status), Arc::clone(&done), now));
        Watch { graph, status, started: now, last: now, last_node: None, done, ticker }
    }

    /// A step event: node `node` (of branch `branch`) ran for `duration`; its checkpoint is
    /// written. `state` is the state after it.
    pub fn step(&mut self, node: &NodeName, branch: Option<&NodeName>, duration: Duration, state: &State) {
        let now = Instant::now();
        // The node started when the run went on after the last event (branches of a fan-out
        // all started then); what follows it until this event is its checkpoint's write.
        let start = self.last;
        let end = (start + duration).min(now);
        let steps = {
            let mut status = self.status.lock().unwrap_or_else(|e| e.into_inner());
            status.steps += 1;
            status.running = match branch {
                Some(_) => "branches".to_owned(),
                None => next_of(self.graph, node, state),
            };
            status.since = now;
            status.steps
        };
        if verbose() {
            let branch = branch.map(|b| format!(" (branch `{b}`)")).unwrap_or_default();
            self.clear_line();
            eprintln!("tea: step {steps}: `{node}`{branch} {:.1} ms", ms(duration));
        }
        if tracing() {
            record(|clock| {
                json!({
                    "event": "node", "node": node.as_str(), "branch": branch.map(NodeName::as_str),
                    "step": steps, "start_ms": clock(start), "end_ms": clock(end), "duration_ms": ms(duration),
                })
            });
            if branch.is_none() && now > end {
                record(|clock| {
                    json!({
                        "event": "checkpoint", "after": node.as_str(), "start_ms": clock(end),
                        "end_ms": clock(now), "duration_ms": ms(now - end),
                    })
                });
            }
        }
        self.last = now;
        self.last_node = Some(node.clone());
    }

    /// The run paused on `resume`.
    pub fn paused(&mut self, resume: &Resume<State>) {
        let interrupts: Vec<Value> = resume
            .interrupts()
            .iter()
            .map(|i| json!({ "id": i.id(), "node": i.node().as_str(), "value": i.value() }))
            .collect();
        let thread = resume.thread().as_str();
        let node = resume.node().as_str();
        record(|clock| {
            json!({
                "event": "pause", "at_ms": clock(Instant::now()), "thread": thread, "node": node,
                "interrupts": interrupts,
            })
        });
        self.finish();
    }

    /// The run finished.
    pub fn done(&mut self) {
        record(|clock| json!({ "event": "done", "at_ms": clock(Instant::now()) }));
        self.finish();
    }

    /// The run failed with `message`.
    pub fn failed(&mut self, message: &str) {
        record(|clock| json!({ "event": "error", "at_ms": clock(Instant::now()), "message": message }));
        self.finish();
    }

    /// Ctrl-C stopped the run.
    pub fn stopped(&mut self) {
        let after = self.last_node.as_ref().map(NodeName::as_str);
        record(|clock| json!({ "event": "stopped", "at_ms": clock(Instant::now()), "after": after }));
        self.finish();
    }

    /// How long the run has gone.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    fn clear_line(&self) {
        if self.ticker.is_some() {
            eprint!("\r\x1b[2K");
        }
    }

    fn finish(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(ticker) = self.ticker.take() {
            let _ = ticker.join();
        }
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        self.finish();
    }
}

/// What runs after `node`, as the progress line names it: the branches' first nodes after a
/// fan-out, else the node its routing picks for `state` (the run is idle between events, so
/// routing is asked here without racing it).
fn next_of(graph: &YamlGraph, node: &NodeName, state: &State) -> String {
    let Some(ix) = graph.node_named(node.as_str()) else { return format!("after `{node}`") };
    if let Some(fork) = graph.fork(ix) {
        // A fan-out: its branches run together.
        let heads: Vec<String> = fork.heads.iter().map(|&head| format!("`{}`", graph.node_name(head))).collect();
        return heads.join(", ");
    }
    match graph.try_route(ix, state) {
        Ok(Some(Goto::Node(next))) => format!("`{}`", graph.node_name(next)),
        Ok(Some(Goto::End)) => "finishing".to_owned(),
        _ => format!("after `{node}`"),
    }
}

/// The node a new run starts at for `input`, as the progress line names it.
pub fn first_node(graph: &YamlGraph, input: &Value) -> String {
    let Ok(state) = serde_json::from_value::<State>(input.clone()) else { return "starting".to_owned() };
    match graph.try_start(&state) {
        Ok(Some(Goto::Node(node))) => format!("`{}`", graph.node_name(node)),
        _ => "starting".to_owned(),
    }
}

/// The progress line on stderr: the agent, the running node and for how long, the steps and
/// the run's time. Quiet for short runs: it shows after half a second.
fn spinner(
    agent: String,
    status: Arc<Mutex<Status>>,
    done: Arc<AtomicBool>,
    started: Instant,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        const FRAMES: [char; 4] = ['|', '/', '-', '\\'];
        let mut frame = 0;
        while !done.load(Ordering::Relaxed) {
            let elapsed = started.elapsed();
            if elapsed > Duration::from_millis(500) {
                let (running, since, steps) = {
                    let status = status.lock().unwrap_or_else(|e| e.into_inner());
                    (status.running.clone(), status.since, status.steps)
                };
                eprint!(
                    "\r\x1b[2K{} {agent}: {running} {:.1}s (step {}, {:.1}s in all)",
                    FRAMES[frame % 4],
                    since.elapsed().as_secs_f32(),
                    steps + 1,
                    elapsed.as_secs_f32()
                );
                frame += 1;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if frame > 0 {
            // Clears the progress line.
            eprint!("\r\x1b[2K");
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_progress_line_names_the_node_next_or_the_branches() {
        let text = r#"
name: fan
nodes:
  - { name: plan, run: "return { x = 1 }" }
  - { name: left, run: "return { l = 1 }" }
  - { name: right, run: "return { r = 1 }" }
  - { name: merge, run: "return { m = 1 }" }
  - { name: last, run: "return { z = 1 }" }
edges:
  - { from: plan, to: left, type: parallel, fan_in: merge }
  - { from: plan, to: right, type: parallel, fan_in: merge }
  - { from: merge, to: last }
  - { from: last, to: __end__ }
"#;
        let agent = tea_yaml::Engine::new().load_str(text).unwrap();
        let graph = agent.graph();
        let state = State::new();
        assert_eq!(next_of(graph, &NodeName::from("plan"), &state), "`left`, `right`");
        assert_eq!(next_of(graph, &NodeName::from("merge"), &state), "`last`");
        assert_eq!(next_of(graph, &NodeName::from("last"), &state), "finishing");
        assert_eq!(next_of(graph, &NodeName::from("child_node"), &state), "after `child_node`");
        assert_eq!(first_node(graph, &serde_json::json!({})), "`plan`");
    }
}
