//! Drives the built `tea` binary as a process: every command, every exit status, a pause in one
//! process resumed in another, the interactive loop on piped stdin, `--stream` line by line.

use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

const DONE: i32 = 0;
const ERROR: i32 = 1;
const USAGE: i32 = 2;
const PAUSED: i32 = 3;

/// A scratch directory holding copies of the example agents; commands run in it, so the
/// default store (`.tea/store`) and `checkpoint_dir`s land inside it. Removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tea-cli-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/agents");
        for name in ["review.yaml", "research.yaml", "checkpoints.yaml"] {
            std::fs::copy(examples.join(name), dir.join(name)).unwrap();
        }
        Scratch(dir)
    }

    fn write(&self, name: &str, text: &str) {
        std::fs::write(self.0.join(name), text).unwrap();
    }

    fn tea(&self, args: &[&str]) -> Run {
        self.tea_with_stdin(args, None)
    }

    fn tea_with_stdin(&self, args: &[&str], stdin: Option<&str>) -> Run {
        self.tea_logged(args, stdin, None)
    }

    /// Runs `tea` with `RUST_LOG` set to `log` (unset when `None`, whatever the test's own).
    fn tea_logged(&self, args: &[&str], stdin: Option<&str>, log: Option<&str>) -> Run {
        let mut command = Command::new(env!("CARGO_BIN_EXE_tea"));
        match log {
            Some(log) => command.env("RUST_LOG", log).env("NO_COLOR", "1"),
            None => command.env_remove("RUST_LOG"),
        };
        let mut child = command
            .args(args)
            .current_dir(&self.0)
            .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        if let Some(text) = stdin {
            child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        }
        Run(child.wait_with_output().unwrap())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Run(Output);

impl Run {
    fn status(&self) -> i32 {
        self.0.status.code().expect("tea was killed by a signal")
    }
    fn stdout(&self) -> String {
        String::from_utf8(self.0.stdout.clone()).unwrap()
    }
    fn stderr(&self) -> String {
        String::from_utf8(self.0.stderr.clone()).unwrap()
    }
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout()).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:?}"))
    }
    /// Asserts the exit status, showing both streams when it differs.
    fn expect(self, status: i32) -> Run {
        assert_eq!(self.status(), status, "{self:?}");
        self
    }
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "status {:?}\n--- stdout\n{}\n--- stderr\n{}", self.0.status, self.stdout(), self.stderr())
    }
}

/// An agent with an interrupt node and no store in its `config`: it runs on the default store.
const ASK: &str = r#"
name: ask
nodes:
  - name: greet
    run: return { greeting = "hello" }
  - name: ask_name
    type: interrupt
    message: "What is your name?"
    resume_key: name
  - name: answer
    run: return { reply = state.greeting .. ", " .. state.name }
"#;

/// Two questions asked at once, in parallel branches.
const TWO: &str = r#"
name: two
nodes:
  - name: plan
    run: return { topic = "x" }
  - name: ask_a
    type: interrupt
    message: "A?"
    resume_key: a
  - name: ask_b
    type: interrupt
    message: "B?"
    resume_key: b
  - name: merge
    run: |
      local got = {}
      for i, branch in ipairs(state.parallel_results) do got[i] = tostring(branch.a or branch.b) end
      return { answers = table.concat(got, ",") }
edges:
  - { from: plan, to: ask_a, type: parallel, fan_in: merge }
  - { from: plan, to: ask_b, type: parallel, fan_in: merge }
  - { from: merge, to: __end__ }
"#;

#[test]
fn validate_prints_ok_or_every_problem_with_its_place() {
    let s = Scratch::new();
    let ok = s.tea(&["validate", "review.yaml", "research.yaml"]).expect(DONE);
    assert_eq!(ok.stdout(), "ok: review.yaml (5 nodes)\nok: research.yaml (4 nodes)\n");
    assert!(!s.0.join("checkpoints").exists(), "validate does not open the file's checkpoint_dir");
    s.tea(&["draw", "review.yaml"]).expect(DONE);
    s.tea(&["run", "review.yaml", "--store", "memory"]).expect(PAUSED);
    assert!(!s.0.join("checkpoints").exists(), "draw and --store leave the file's store alone");

    let typo = std::fs::read_to_string(s.0.join("review.yaml")).unwrap().replace("to: publish }", "to: pubish }");
    s.write("typo.yaml", &typo);
    s.write("two.yaml", "nodes:\n  - name: a\n    rnu: x\n  - name: a\n");
    let bad = s.tea(&["validate", "review.yaml", "typo.yaml", "two.yaml", "missing.yaml"]).expect(ERROR);
    let out = bad.stdout();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "ok: review.yaml (5 nodes)");
    assert!(
        lines.iter().any(|l| l.starts_with("typo.yaml:") && l.contains("pubish") && l.contains("publish")),
        "{bad:?}"
    );
    let two: Vec<_> = lines.iter().filter(|l| l.starts_with("two.yaml:")).collect();
    assert!(two.len() >= 2, "every problem of two.yaml is listed: {bad:?}");
    // Each problem's first line; the source line and its caret follow it (see below).
    for line in lines.iter().filter(|l| ["typo.yaml:", "two.yaml:", "missing.yaml:"].iter().any(|f| l.starts_with(f))) {
        let mut parts = line.splitn(4, ':');
        let (_file, row, col) = (parts.next(), parts.next().unwrap(), parts.next().unwrap());
        assert!(row.parse::<usize>().is_ok() && col.parse::<usize>().is_ok(), "not file:line:column: {line}");
    }
    assert!(lines.iter().any(|l| l.starts_with("missing.yaml:1:1: cannot read")), "{bad:?}");
}

#[test]
fn a_run_prints_the_final_state() {
    let s = Scratch::new();
    let run = s.tea(&["run", "research.yaml", "--input", r#"{"topic": "tea"}"#]).expect(DONE);
    assert_eq!(run.json()["summary"], "3 pages and 2 papers about tea");
    assert_eq!(run.stderr(), "", "nothing on stderr when it is not a terminal");

    // `config.checkpoint` continues from a file, which a named thread or a stream would not.
    s.write(
        "saved.yaml",
        "config: { checkpointer: memory, checkpoint: job.ckpt }\nnodes:\n  - { name: a, run: 'return {}' }\n",
    );
    for flag in [&["--thread", "t"][..], &["--stream"]] {
        let run = s.tea(&[&["run", "saved.yaml"][..], flag].concat()).expect(ERROR);
        assert!(run.stderr().contains("config.checkpoint") && run.stderr().contains(flag[0]), "{run:?}");
    }

    s.write("input.json", r#"{"topic": "graphs"}"#);
    let run = s.tea(&["run", "research.yaml", "--input", "@input.json"]).expect(DONE);
    assert_eq!(run.json()["summary"], "3 pages and 2 papers about graphs");
}

/// The checkpoint files a `dir:` store under `dir` holds, in every graph and thread.
fn checkpoint_files(dir: &Path) -> usize {
    let mut count = 0;
    let mut todo = vec![dir.to_path_buf()];
    while let Some(at) = todo.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "ckpt") {
                count += 1;
            }
        }
    }
    count
}

#[test]
fn group_commit_writes_a_parallel_steps_cheap_branches_together() {
    let s = Scratch::new();
    let branches = 20;
    let mut file = String::from("name: wide\nnodes:\n  - { name: plan, run: 'return {}' }\n");
    for i in 0..branches {
        file.push_str(&format!("  - {{ name: b{i}, run: 'return {{ v{i} = {i} }}' }}\n"));
    }
    file.push_str("  - { name: merge, run: 'return { done = true }' }\nedges:\n");
    for i in 0..branches {
        file.push_str(&format!("  - {{ from: plan, to: b{i}, type: parallel, fan_in: merge }}\n"));
    }
    file.push_str("  - { from: merge, to: __end__ }\n");
    s.write("wide.yaml", &file);
    let one_by_one = s.tea(&["run", "wide.yaml", "--store", "dir:each", "--thread", "t"]).expect(DONE);
    let grouped =
        s.tea(&["run", "wide.yaml", "--store", "dir:grouped", "--thread", "t", "--group-commit", "1m"]).expect(DONE);
    assert_eq!(one_by_one.json(), grouped.json(), "the same final state");
    assert_eq!(grouped.json()["done"], true);
    let (each, together) = (checkpoint_files(&s.0.join("each")), checkpoint_files(&s.0.join("grouped")));
    // Without a window the branches' ends are written as they come (a write behind them takes
    // what finished meanwhile, so there may be fewer writes than branches); with one, the
    // join's checkpoint holds them all: the run writes its start, the fan-out, the join and
    // the end.
    assert_eq!(together, 4, "the branches written with the join ({each} files without a window)");
    assert!(together < each, "the branches written with the join: {together} files against {each}");
    // A window is a duration in tea's syntax.
    let bad = s.tea(&["run", "wide.yaml", "--store", "dir:bad", "--group-commit", "soon"]).expect(USAGE);
    assert!(bad.stderr().contains("`soon` is not a duration"), "{bad:?}");
}

#[test]
fn a_pause_in_one_process_resumes_in_another() {
    let s = Scratch::new();
    let pause = s.tea(&["run", "review.yaml", "--thread", "release-1"]).expect(PAUSED).json();
    assert_eq!(pause["status"], "interrupted");
    assert_eq!(pause["thread"], "release-1");
    assert_eq!(pause["interrupts"][0]["node"], "review");
    assert_eq!(pause["interrupts"][0]["value"], "Approve \"Release notes, take 1\"? (true/false)");
    let file = pause["checkpoint_path"].as_str().unwrap();
    assert!(s.0.join(file).exists() || Path::new(file).exists(), "{file}");
    let token = pause["token"].as_str().unwrap();

    // The answer goes through the checkpoint: the breakpoint before `publish` is next.
    let breakpoint = s.tea(&["resume", "review.yaml", "--token", token, "--answer", "true"]).expect(PAUSED).json();
    assert_eq!(breakpoint["interrupts"][0]["node"], "publish");
    assert_eq!(breakpoint["interrupts"][0]["id"], "before:publish");

    // A spent token is refused, and nothing runs.
    let spent = s.tea(&["resume", "review.yaml", "--token", token, "--answer", "true"]).expect(ERROR);
    assert!(spent.stderr().contains("--token") && spent.stderr().contains("already resumed"), "{spent:?}");
    assert_eq!(spent.stdout(), "");

    // The state update given on resume is kept.
    let last = breakpoint["token"].as_str().unwrap();
    let done = s
        .tea(&["resume", "review.yaml", "--token", last, "--update", r#"{"draft": "Edited notes"}"#])
        .expect(DONE)
        .json();
    assert_eq!(done["published"], "Edited notes");
    assert_eq!(done["log"], serde_json::json!(["drafted take 1", "published"]));
}

#[test]
fn a_pause_resumes_from_its_checkpoint_file() {
    let s = Scratch::new();
    let pause = s.tea(&["run", "review.yaml"]).expect(PAUSED).json();
    let file = pause["checkpoint_path"].as_str().unwrap().to_owned();
    // `false`: the draft is revised, and the reviewer is asked again.
    let again = s.tea(&["resume", "review.yaml", "--checkpoint", &file, "--answer", "false"]).expect(PAUSED).json();
    assert_eq!(again["interrupts"][0]["value"], "Approve \"Release notes, take 2\"? (true/false)");
    assert_eq!(again["thread"], pause["thread"]);
    // The file's pause is spent.
    let spent = s.tea(&["resume", "review.yaml", "--checkpoint", &file, "--answer", "true"]).expect(ERROR);
    assert!(spent.stderr().contains("--checkpoint"), "{spent:?}");
}

#[test]
fn bad_input_is_one_line_naming_the_thing_and_writes_nothing() {
    let s = Scratch::new();
    let cases: &[(&[&str], &str)] = &[
        (&["run", "nope.yaml"], "nope.yaml"),
        (&["run", "ask.yaml", "--input", "{not json"], "--input is not JSON"),
        (&["run", "ask.yaml", "--input", "@missing.json"], "missing.json"),
        (&["run", "ask.yaml", "--input", "[1]"], "must be a JSON object"),
        (&["resume", "ask.yaml", "--token", "not-a-token"], "--token"),
        (&["resume", "ask.yaml", "--token", "x", "--answer", "@missing.json"], "missing.json"),
        (&["resume", "ask.yaml", "--token", "x", "--answer-to", "noequals"], "ID=ANSWER"),
        (&["resume", "ask.yaml", "--token", "x", "--update", "[1]"], "--update must be a JSON object"),
        (&["run", "ask.yaml", "--store", "sled:ask.yaml"], "cannot open the store `sled:ask.yaml`"),
    ];
    s.write("ask.yaml", ASK);
    for (args, names) in cases {
        let run = s.tea(args).expect(ERROR);
        let err = run.stderr();
        assert!(err.contains(names), "{args:?} should name {names:?}: {run:?}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {run:?}");
        assert_eq!(run.stdout(), "", "{args:?}");
    }
    assert!(!s.0.join(".tea").exists(), "a refused command opened no store");

    // A token of another agent.
    let pause = s.tea(&["run", "review.yaml"]).expect(PAUSED).json();
    let other =
        s.tea(&["resume", "ask.yaml", "--token", pause["token"].as_str().unwrap(), "--answer", "1"]).expect(ERROR);
    assert!(other.stderr().contains("--token") && other.stderr().contains("graph"), "{other:?}");
}

#[test]
fn usage_errors_exit_2() {
    let s = Scratch::new();
    for args in [
        &["resume", "review.yaml"][..],
        &["resume", "review.yaml", "--token", "t", "--checkpoint", "c"],
        &["run", "review.yaml", "--store", "redis://x"],
        &["draw", "review.yaml", "--format", "png"],
        &["frobnicate"],
        &["resume", "c.ckpt", "--workflow", "review.yaml", "--token", "t"],
        &["run", "review.yaml", "--store", "memory", "--checkpoint-dir", "d"],
    ] {
        let run = s.tea(args).expect(USAGE);
        assert_eq!(run.stdout(), "", "{args:?}");
    }
    let help = s.tea(&["run", "--help"]).expect(DONE);
    assert!(help.stdout().contains("Examples:"), "{help:?}");
}

#[test]
fn interactive_runs_answer_from_stdin_until_done() {
    let s = Scratch::new();
    // `false` revises, `"maybe"` does not fit `approved: bool` and is asked again, `true`
    // approves; at the breakpoint a JSON object updates the state before continuing.
    let answers = "false\n\"maybe\"\ntrue\n{\"draft\": \"Final notes\"}\n";
    let run = s.tea_with_stdin(&["run", "review.yaml", "--interactive"], Some(answers)).expect(DONE);
    let done = run.json();
    assert_eq!(done["published"], "Final notes");
    assert_eq!(done["revisions"], 1);
    let err = run.stderr();
    assert!(err.contains("Approve \"Release notes, take 1\"?"), "{run:?}");
    assert!(err.contains("answer again"), "{run:?}");
    assert!(err.contains("paused at `publish` (a breakpoint)"), "{run:?}");
}

#[test]
fn the_end_of_input_leaves_the_thread_paused_and_resumable() {
    let s = Scratch::new();
    s.write("ask.yaml", ASK);
    let run = s.tea_with_stdin(&["run", "ask.yaml", "--interactive"], Some("")).expect(PAUSED);
    let pause = run.json();
    assert_eq!(pause["interrupts"][0]["value"], "What is your name?");
    assert!(run.stderr().contains("What is your name?"), "{run:?}");
    // Another process picks the thread up from the default store.
    let token = pause["token"].as_str().unwrap();
    let refused = s.tea(&["resume", "ask.yaml", "--token", token]).expect(ERROR);
    assert!(refused.stderr().contains("waits for an answer"), "{refused:?}");
    let done =
        s.tea_with_stdin(&["resume", "ask.yaml", "--token", token, "--interactive"], Some("Grace\n")).expect(DONE);
    assert_eq!(done.json()["reply"], "hello, Grace");

    // A plain-text line is a string answer; at a breakpoint `n` stops.
    let run = s.tea_with_stdin(&["run", "review.yaml", "--interactive"], Some("true\nn\n")).expect(PAUSED);
    assert_eq!(run.json()["interrupts"][0]["node"], "publish");
    let run = s.tea_with_stdin(&["run", "ask.yaml", "--interactive"], Some("Ada Lovelace\n")).expect(DONE);
    assert_eq!(run.json()["reply"], "hello, Ada Lovelace");
}

#[test]
fn stream_prints_one_event_per_line() {
    let s = Scratch::new();
    let run = s.tea(&["run", "research.yaml", "--stream", "--input", r#"{"topic": "tea"}"#]).expect(DONE);
    let events: Vec<Value> = run.stdout().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let steps: Vec<&str> =
        events.iter().filter(|e| e["event"] == "step").map(|e| e["node"].as_str().unwrap()).collect();
    assert_eq!(steps.first(), Some(&"plan"));
    assert!(steps.contains(&"web") && steps.contains(&"papers"), "{steps:?}");
    assert_eq!(steps.last(), Some(&"merge"));
    for step in events.iter().filter(|e| e["event"] == "step") {
        assert!(step["duration_us"].is_u64(), "each step says how long its node took: {step}");
    }
    let last = events.last().unwrap();
    assert_eq!(last["event"], "done");
    assert_eq!(last["state"]["summary"], "3 pages and 2 papers about tea");

    // A streamed pause ends with the pause as an event; the streamed resume continues it.
    s.write("ask.yaml", ASK);
    let run = s.tea(&["run", "ask.yaml", "--stream"]).expect(PAUSED);
    let last: Value = serde_json::from_str(run.stdout().lines().last().unwrap()).unwrap();
    assert_eq!(last["event"], "interrupted");
    let token = last["token"].as_str().unwrap();
    let run = s.tea(&["resume", "ask.yaml", "--stream", "--token", token, "--answer", "\"Ada\""]).expect(DONE);
    let lines: Vec<Value> = run.stdout().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines[0]["event"], "step");
    assert_eq!(lines[0]["node"], "ask_name");
    assert_eq!(lines.last().unwrap()["state"]["reply"], "hello, Ada");
}

#[test]
fn threads_and_state_read_the_store() {
    let s = Scratch::new();
    s.write("ask.yaml", ASK);
    s.tea(&["run", "ask.yaml", "--thread", "t1"]).expect(PAUSED);
    s.tea(&["run", "ask.yaml", "--thread", "t2"]).expect(PAUSED);
    assert!(s.0.join(".tea/store").exists(), "the default store is sled:.tea/store");
    let exists = s.tea(&["run", "ask.yaml", "--thread", "t1"]).expect(ERROR);
    assert!(exists.stderr().contains("`t1` already exists"), "{exists:?}");

    let listed = s.tea(&["threads", "ask.yaml"]).expect(DONE).json();
    let threads: Vec<&str> = listed.as_array().unwrap().iter().map(|t| t["thread"].as_str().unwrap()).collect();
    assert_eq!(threads, ["t1", "t2"]);
    // Each with its status, the node next, the pause's message and where it stands.
    assert_eq!(listed[0]["status"], "paused", "{listed}");
    assert_eq!(listed[0]["next"], serde_json::json!(["ask_name"]), "{listed}");
    assert_eq!(listed[0]["message"], "What is your name?", "{listed}");
    assert!(listed[0]["step"].as_u64().is_some() && listed[0]["checkpoint"].as_u64().is_some(), "{listed}");

    let state = s.tea(&["state", "ask.yaml", "t1"]).expect(DONE).json();
    assert_eq!(state["thread"], "t1");
    assert_eq!(state["state"]["greeting"], "hello");
    assert_eq!(state["interrupts"][0]["node"], "ask_name");
    let history = s.tea(&["state", "ask.yaml", "t1", "--history"]).expect(DONE).json();
    let history = history.as_array().unwrap();
    assert!(history.len() >= 2, "{history:?}");
    assert!(history[0]["checkpoint"].as_u64() > history[1]["checkpoint"].as_u64(), "newest first");
    // Each checkpoint says when it was written (RFC 3339, UTC), newest first.
    let times: Vec<&str> = history.iter().map(|c| c["written_at"].as_str().expect("a time")).collect();
    assert!(times.iter().all(|t| t.len() == 20 && t.ends_with('Z') && t.as_bytes()[10] == b'T'), "{times:?}");
    assert!(times.windows(2).all(|w| w[0] >= w[1]), "{times:?}");
    let listed = s.tea(&["threads", "ask.yaml"]).expect(DONE).json();
    let t1 = listed.as_array().unwrap().iter().find(|t| t["thread"] == "t1").unwrap();
    assert_eq!(t1["updated_at"].as_str(), Some(times[0]), "{listed}");

    let missing = s.tea(&["state", "ask.yaml", "t9"]).expect(ERROR);
    assert!(missing.stderr().contains("thread `t9`"), "{missing:?}");
    let none = s.tea(&["threads", "research.yaml"]).expect(ERROR);
    assert!(none.stderr().contains("--store"), "{none:?}");
}

#[test]
fn store_flags_choose_the_store() {
    let s = Scratch::new();
    s.write("ask.yaml", ASK);
    // dir: the pause gets a checkpoint file, and resumes from it.
    let pause = s.tea(&["run", "ask.yaml", "--store", "dir:ckpt"]).expect(PAUSED).json();
    let file = pause["checkpoint_path"].as_str().unwrap();
    assert!(file.starts_with("ckpt"), "{file}");
    let done =
        s.tea(&["resume", "ask.yaml", "--store", "dir:ckpt", "--checkpoint", file, "--answer", "\"Bo\""]).expect(DONE);
    assert_eq!(done.json()["reply"], "hello, Bo");
    let threads = s.tea(&["threads", "ask.yaml", "--store", "dir:ckpt"]).expect(DONE).json();
    assert_eq!(threads.as_array().unwrap().len(), 1, "{threads}");
    assert_eq!(threads[0]["thread"], pause["thread"]);
    assert_eq!(threads[0]["status"], "done");

    // sled: elsewhere than the default.
    let pause = s.tea(&["run", "ask.yaml", "--store", "sled:other"]).expect(PAUSED).json();
    assert!(s.0.join("other").exists() && !s.0.join(".tea").exists());
    let token = pause["token"].as_str().unwrap();
    let unknown = s.tea(&["resume", "ask.yaml", "--token", token]).expect(ERROR);
    assert!(unknown.stderr().contains("--token"), "not in the default store: {unknown:?}");
    s.tea(&["resume", "ask.yaml", "--store", "sled:other", "--token", token, "--answer", "1"]).expect(DONE);

    // memory: pauses, and says the pause ends with the process.
    let run = s.tea(&["run", "ask.yaml", "--store", "memory"]).expect(PAUSED);
    assert!(run.stderr().contains("memory"), "{run:?}");
}

#[test]
fn draw_prints_mermaid_or_dot() {
    let s = Scratch::new();
    let mermaid = s.tea(&["draw", "review.yaml"]).expect(DONE).stdout();
    assert!(mermaid.starts_with("flowchart") || mermaid.starts_with("graph"), "{mermaid}");
    assert!(mermaid.contains("publish"));
    let dot = s.tea(&["draw", "review.yaml", "--format", "dot"]).expect(DONE).stdout();
    assert!(dot.starts_with("digraph"), "{dot}");

    // A subgraph node is drawn with its child agent inside it, ids prefixed.
    s.write("child.yaml", "name: child\nnodes:\n  - name: inner_step\n    run: return {}\n");
    s.write("nest.yaml", "nodes:\n  - name: outer\n    type: subgraph\n    file: child.yaml\n");
    let mermaid = s.tea(&["draw", "nest.yaml"]).expect(DONE).stdout();
    assert!(
        mermaid
            .contains("    subgraph n0 [\"outer: child\"]\n    n0____start__([start])\n    n0__n0[\"inner_step\"]\n"),
        "{mermaid}"
    );
    assert!(mermaid.contains("    n0__n0 --> n0____end__\n    end\n"), "{mermaid}");
    let dot = s.tea(&["draw", "nest.yaml", "--format", "dot"]).expect(DONE).stdout();
    assert!(dot.contains("    subgraph \"cluster_n0\" {\n    label=\"outer: child\";\n"), "{dot}");
    assert!(dot.contains("    \"n0__n0\" [label=\"inner_step\"];\n"), "{dot}");
    // A child file that cannot be read: the error names the parent file and the `file:` line.
    s.write("lost.yaml", "nodes:\n  - name: outer\n    type: subgraph\n    file: nowhere.yaml\n");
    let lost = s.tea(&["draw", "lost.yaml"]).expect(ERROR);
    assert_eq!(lost.stdout(), "", "{lost:?}");
    assert!(
        lost.stderr().contains("lost.yaml:4:11: node `outer`: ") && lost.stderr().contains("nowhere.yaml"),
        "{lost:?}"
    );
}

#[test]
fn several_pauses_are_answered_by_id() {
    let s = Scratch::new();
    s.write("two.yaml", TWO);
    let pause = s.tea(&["run", "two.yaml"]).expect(PAUSED);
    assert!(pause.stderr().contains("--answer-to ID=ANSWER"), "{pause:?}");
    let pause = pause.json();
    let ids: Vec<&str> = pause["interrupts"].as_array().unwrap().iter().map(|i| i["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 2);
    let token = pause["token"].as_str().unwrap();
    let wrong = s.tea(&["resume", "two.yaml", "--token", token, "--answer-to", "nope=1"]).expect(ERROR);
    assert!(wrong.stderr().contains("nope"), "{wrong:?}");
    let (a, b) = (format!("{}=1", ids[0]), format!("{}=\"bee\"", ids[1]));
    let done = s.tea(&["resume", "two.yaml", "--token", token, "--answer-to", &a, "--answer-to", &b]).expect(DONE);
    assert_eq!(done.json()["answers"], "1,bee");

    let run = s.tea_with_stdin(&["run", "two.yaml", "--interactive"], Some("7\neight\n")).expect(DONE);
    assert_eq!(run.json()["answers"], "7,eight");
    assert!(run.stderr().contains("[ask_a] A?") && run.stderr().contains("[ask_b] B?"), "{run:?}");
}

/// Three blocks of about 60 million Lua instructions each (under the limit of 100 million per
/// block): a run that takes long enough for the spinner.
const SLOW: &str = r#"
name: slow
nodes:
  - { name: a, run: "local n = 0; for i = 1, 30000000 do n = n + 1 end; return { a = n }" }
  - { name: b, run: "local n = 0; for i = 1, 30000000 do n = n + 1 end; return { b = n }" }
  - { name: c, run: "local n = 0; for i = 1, 30000000 do n = n + 1 end; return { c = n }" }
"#;

#[test]
fn a_spinner_shows_on_a_terminal_and_nowhere_else() {
    let s = Scratch::new();
    s.write("slow.yaml", SLOW);
    let quiet = s.tea(&["run", "slow.yaml"]).expect(DONE);
    assert_eq!(quiet.stderr(), "", "stderr is a pipe: no spinner");
    assert_eq!(quiet.json()["c"], 30_000_000);

    // util-linux `script` gives the command a terminal for stdout and stderr.
    let command = format!("{} run slow.yaml", env!("CARGO_BIN_EXE_tea"));
    let script =
        Command::new("script").args(["-qec", &command, "/dev/null"]).env_remove("RUST_LOG").current_dir(&s.0).output();
    let Ok(out) = script else {
        eprintln!("skipped the terminal half: no `script` command");
        return;
    };
    let shown = String::from_utf8_lossy(&out.stdout);
    // The agent, the node running and for how long, the step, the run's time.
    assert!(shown.contains("slow: `a` ") || shown.contains("slow: `b` "), "{shown}");
    assert!(shown.contains("(step "), "{shown}");
    assert!(shown.contains("\r\x1b[2K"), "the spinner's line is cleared: {shown:?}");
    assert!(shown.contains("\"c\": 30000000"), "{shown}");
}

#[cfg(feature = "tracing")]
#[test]
fn rust_log_shows_the_run_on_stderr() {
    let s = Scratch::new();
    let args = ["run", "research.yaml", "--input", r#"{"topic": "tea"}"#];
    let run = s.tea_logged(&args, None, Some("tea=debug")).expect(DONE);
    assert_eq!(run.json()["summary"], "3 pages and 2 papers about tea", "stdout stays the final state");
    let log = run.stderr();
    assert!(log.contains("run{graph=\"research\""), "{log}");
    assert!(log.contains("node{node=plan step=1"), "{log}");
    assert!(log.contains("fork{join=merge branches=2}"), "{log}");
    assert!(log.contains("tea: done"), "{log}");
    let quiet = s.tea(&args).expect(DONE);
    assert!(!quiet.stderr().contains("run{"), "no RUST_LOG, no log: {quiet:?}");
}

#[test]
fn a_sled_store_open_in_another_process_is_a_clear_error() {
    use std::io::{BufRead, BufReader, Read};
    let s = Scratch::new();
    s.write("ask.yaml", ASK);
    // An interactive run waits for its answer with the default sled store open.
    let mut waiting = Command::new(env!("CARGO_BIN_EXE_tea"))
        .args(["run", "ask.yaml", "--interactive"])
        .current_dir(&s.0)
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut prompt = BufReader::new(waiting.stderr.take().unwrap());
    let mut line = String::new();
    prompt.read_line(&mut line).unwrap();
    assert!(line.contains("What is your name?"), "{line}");

    let busy = s.tea(&["threads", "ask.yaml"]).expect(ERROR);
    let err = busy.stderr();
    assert!(err.contains("sled:.tea/store") && err.contains("another process has it open"), "{busy:?}");
    assert_eq!(err.trim_end().lines().count(), 1, "{busy:?}");

    // The first process answers and finishes.
    waiting.stdin.take().unwrap().write_all(b"Ada\n").unwrap();
    let mut out = String::new();
    waiting.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    assert_eq!(waiting.wait().unwrap().code(), Some(DONE));
    assert!(out.contains("hello, Ada"), "{out}");
}

#[test]
fn a_file_checkpoint_save_wrote_starts_new_runs() {
    let s = Scratch::new();
    let first = s.tea(&["run", "checkpoints.yaml"]).expect(DONE).json();
    assert_eq!(first["saved"], true);
    let saved = "checkpoints/job.ckpt";
    for items in [7, 9] {
        let update = format!(r#"{{"items": {items}}}"#);
        let run = s.tea(&["resume", "checkpoints.yaml", "--checkpoint", saved, "--update", &update]).expect(DONE);
        assert_eq!(run.json()["steps"], serde_json::json!(["collected", format!("processed {items} items")]));
    }
    let answer = s.tea(&["resume", "checkpoints.yaml", "--checkpoint", saved, "--answer", "1"]).expect(ERROR);
    assert!(answer.stderr().contains("not an interrupt node"), "{answer:?}");
    let missing = s.tea(&["resume", "checkpoints.yaml", "--checkpoint", "nope.ckpt"]).expect(ERROR);
    assert!(missing.stderr().contains("nope.ckpt"), "{missing:?}");
}

/// Sends SIGINT to `child`, as Ctrl-C in a terminal does.
fn interrupt(child: &std::process::Child) {
    let sent = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(sent.success());
}

/// How long a Ctrl-C test waits for something it expects before failing (not a pace: every
/// wait ends as soon as what it waits for happens).
const PATIENCE: std::time::Duration = std::time::Duration::from_secs(120);

/// A `tea -v` process whose stderr the test reads line by line, to act when a line shows.
struct Watched {
    child: std::process::Child,
    err: std::io::BufReader<std::process::ChildStderr>,
    /// The stderr read so far.
    seen: String,
}

impl Watched {
    /// Starts `tea -v ARGS` in `s`.
    fn spawn(s: &Scratch, args: &[&str]) -> Watched {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tea"))
            .arg("-v")
            .args(args)
            .current_dir(&s.0)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let err = std::io::BufReader::new(child.stderr.take().unwrap());
        Watched { child, err, seen: String::new() }
    }

    /// Reads stderr up to a line containing `until`.
    fn read_until(&mut self, until: &str) {
        use std::io::BufRead;
        loop {
            let mut line = String::new();
            if self.err.read_line(&mut line).unwrap_or(0) == 0 {
                panic!("tea's stderr ended before `{until}`: {}", self.seen);
            }
            self.seen.push_str(&line);
            if line.contains(until) {
                return;
            }
        }
    }

    /// Reads the rest of stderr and waits for the exit; returns the status code and stdout.
    fn finish(mut self) -> (Option<i32>, String, String) {
        use std::io::Read;
        self.err.read_to_string(&mut self.seen).unwrap();
        let mut stdout = String::new();
        self.child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
        let status = self.child.wait().unwrap();
        (status.code(), stdout, std::mem::take(&mut self.seen))
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        // A failed assertion must not leave tea running.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A node the test holds in progress: an HTTP server on loopback that tells the test when a
/// request arrives and answers it only when the test says (`http.get` nodes wait for it), so a
/// Ctrl-C lands while that node runs, however slow the machine is.
struct Gate {
    url: String,
    arrived: std::sync::mpsc::Receiver<std::net::TcpStream>,
}

/// A request that arrived at a [`Gate`], unanswered until [`Held::release`].
struct Held(std::net::TcpStream);

impl Gate {
    fn open() -> Gate {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/gate", listener.local_addr().unwrap());
        let (send, arrived) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                // The request's head, read whole: the node is waiting for its answer now.
                let mut reader = std::io::BufReader::new(&stream);
                let mut line = String::new();
                while std::io::BufRead::read_line(&mut reader, &mut line).unwrap_or(0) > 0 && line != "\r\n" {
                    line.clear();
                }
                if send.send(stream).is_err() {
                    return;
                }
            }
        });
        Gate { url, arrived }
    }

    /// Waits for the next request: its node is in progress.
    fn next(&self) -> Held {
        Held(self.arrived.recv_timeout(PATIENCE).expect("no request reached the gate"))
    }
}

impl Held {
    /// Answers the request with `{"open": true}`: its node finishes.
    fn release(mut self) {
        let body = r#"{"open": true}"#;
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        self.0.write_all(head.as_bytes()).unwrap();
        self.0.write_all(body.as_bytes()).unwrap();
    }
}

/// Three nodes; `b` waits for `gate` (one attempt, no timeout that a slow machine could reach).
fn gated(gate: &Gate) -> String {
    format!(
        r#"
name: gated
variables: {{ gate: "{}" }}
nodes:
  - {{ name: a, run: "return {{ a = 1 }}" }}
  - {{ name: b, uses: http.get, with: {{ url: "{{{{ variables.gate }}}}", timeout: 3600, retry: {{ max: 0 }} }}, output: b }}
  - {{ name: c, run: "return {{ c = 3 }}" }}
"#,
        gate.url
    )
}

#[test]
fn ctrl_c_stops_at_the_next_step_and_recover_continues_the_thread() {
    let s = Scratch::new();
    let gate = Gate::open();
    s.write("gated.yaml", &gated(&gate));
    let mut tea =
        Watched::spawn(&s, &["run", "gated.yaml", "--thread", "c1", "--store", "dir:st", "--allow-net", "127.0.0.1"]);
    // `b` is running: the first Ctrl-C lets it finish, then the run stops.
    let b = gate.next();
    interrupt(&tea.child);
    tea.read_until("stopping at the next step boundary");
    assert!(tea.seen.contains("step 1: `a`") && !tea.seen.contains("step 2"), "{}", tea.seen);
    b.release();
    let (status, stdout, seen) = tea.finish();
    assert_eq!(status, Some(130), "{seen}");
    assert!(seen.contains("step 2: `b`") && !seen.contains("step 3"), "`b` finished, `c` never ran: {seen}");
    // The command to continue carries the grants of the run.
    assert!(
        seen.contains("continue it with `tea recover gated.yaml --thread c1 --store dir:st --allow-net 127.0.0.1`"),
        "{seen}"
    );
    assert_eq!(stdout, "", "no final state");

    // The thread stands before `c`, and recover runs `c` alone (no request reaches the gate).
    let listed = s.tea(&["threads", "gated.yaml", "--store", "dir:st"]).expect(DONE).json();
    assert_eq!(listed[0]["status"], "stopped", "{listed}");
    assert_eq!(listed[0]["next"], serde_json::json!(["c"]), "{listed}");
    let recovered = s.tea(&["recover", "gated.yaml", "--thread", "c1", "--store", "dir:st"]).expect(DONE).json();
    assert_eq!(
        (recovered["c"].as_u64(), recovered["b"]["json"]["open"].as_bool()),
        (Some(3), Some(true)),
        "{recovered}"
    );
    assert!(gate.arrived.try_recv().is_err(), "`b` ran again");
    let latest = s.tea(&["state", "gated.yaml", "c1", "--store", "dir:st"]).expect(DONE).json();
    assert_eq!(latest["step"], 3, "`a` and `b` did not run again: {latest}");
    // Recovering a finished thread reports its final state; an unknown one is an error naming it.
    assert_eq!(s.tea(&["recover", "gated.yaml", "--thread", "c1", "--store", "dir:st"]).expect(DONE).json()["c"], 3);
    let unknown = s.tea(&["recover", "gated.yaml", "--thread", "nope", "--store", "dir:st"]).expect(ERROR);
    assert!(unknown.stderr().contains("nope"), "{unknown:?}");
}

#[test]
fn a_second_ctrl_c_exits_at_once() {
    let s = Scratch::new();
    let gate = Gate::open();
    s.write("gated.yaml", &gated(&gate));
    let mut tea =
        Watched::spawn(&s, &["run", "gated.yaml", "--thread", "c2", "--store", "dir:st", "--allow-net", "127.0.0.1"]);
    let _b = gate.next();
    interrupt(&tea.child);
    // The first is taken (the run would stop after `b`); `b` is still waiting when the second comes.
    tea.read_until("stopping at the next step boundary");
    interrupt(&tea.child);
    let (status, _, seen) = tea.finish();
    assert_eq!(status, Some(130), "{seen}");
    assert!(seen.contains("exiting now") && !seen.contains("step 2"), "`b` was not waited for: {seen}");
}

#[test]
fn resume_by_thread_with_a_plain_text_answer() {
    let s = Scratch::new();
    s.write("ask.yaml", ASK);
    s.tea(&["run", "ask.yaml", "--thread", "t1"]).expect(PAUSED);
    let unanswered = s.tea(&["resume", "ask.yaml", "--thread", "t1"]).expect(ERROR);
    assert!(unanswered.stderr().contains("--thread t1: the pause at `ask_name` waits for an answer"), "{unanswered:?}");
    let done = s.tea(&["resume", "ask.yaml", "--thread", "t1", "--answer", "Ada"]).expect(DONE);
    assert_eq!(done.json()["reply"], "hello, Ada");
    let finished = s.tea(&["resume", "ask.yaml", "--thread", "t1", "--answer", "Bo"]).expect(ERROR);
    assert!(finished.stderr().contains("thread `t1` is not paused: it has finished"), "{finished:?}");
    // The hint repeats the store and secrets flags, never an inline secret.
    let hinted = s.tea(&["run", "ask.yaml", "--store", "dir:st", "--secrets", r#"{"k": "s3cret"}"#]).expect(PAUSED);
    assert!(hinted.stderr().contains("--store dir:st --secrets JSON --answer ANSWER`"), "{hinted:?}");
    assert!(!hinted.stderr().contains("s3cret"), "{hinted:?}");
    let missing = s.tea(&["resume", "ask.yaml", "--thread", "t9", "--answer", "Bo"]).expect(ERROR);
    assert!(missing.stderr().contains("thread `t9`"), "{missing:?}");
    // A pause that wants a boolean refuses text with its own error.
    let pause = s.tea(&["run", "review.yaml"]).expect(PAUSED).json();
    let thread = pause["thread"].as_str().unwrap();
    let refused = s.tea(&["resume", "review.yaml", "--thread", thread, "--answer", "maybe"]).expect(ERROR);
    assert!(refused.stderr().contains("review"), "{refused:?}");
}

#[test]
fn a_trace_file_records_the_timeline_and_tea_trace_shows_it() {
    let s = Scratch::new();
    s.write("ask.yaml", ASK);
    let pause = s.tea(&["run", "ask.yaml", "--trace", "run.jsonl"]).expect(PAUSED).json();
    let text = std::fs::read_to_string(s.0.join("run.jsonl")).unwrap();
    let records: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let events: Vec<&str> = records.iter().map(|r| r["event"].as_str().unwrap()).collect();
    assert_eq!(events.first(), Some(&"start"), "{text}");
    let greet = records.iter().find(|r| r["event"] == "node" && r["node"] == "greet").expect(&text);
    assert!(
        greet["end_ms"].as_f64() >= greet["start_ms"].as_f64() && greet["duration_ms"].as_f64().is_some(),
        "{text}"
    );
    let paused = records.iter().find(|r| r["event"] == "pause").expect(&text);
    assert_eq!(paused["thread"], pause["thread"]);
    assert_eq!(paused["interrupts"][0]["value"], "What is your name?");
    assert!(events.contains(&"checkpoint"), "{text}");

    let shown = s.tea(&["trace", "run.jsonl"]).expect(DONE).stdout();
    assert!(shown.contains("greet") && shown.contains("pause") && shown.contains("ms in nodes"), "{shown}");
    assert!(shown.lines().any(|l| l.contains("greet") && l.contains('#')), "a bar for `greet`: {shown}");
    let bad = s.tea(&["trace", "ask.yaml"]).expect(ERROR);
    assert!(bad.stderr().contains("ask.yaml:"), "{bad:?}");
}

#[test]
fn the_files_auto_trace_setting_is_followed_when_no_trace_is_given() {
    // The Edge Agent's `settings.auto_trace: true` with a file exporter (its fixture
    // `python/tests/fixtures/dx_001_2/file_exporter_with_path.yaml`).
    let s = Scratch::new();
    let agent = "name: traced\nsettings:\n  auto_trace: true\n  trace_exporter: file\n  trace_file: yaml.jsonl\nnodes:\n  - name: one\n    run: return { x = 1 }\n";
    s.write("traced.yaml", agent);
    s.tea(&["run", "traced.yaml"]).expect(DONE);
    let text = std::fs::read_to_string(s.0.join("yaml.jsonl")).unwrap();
    assert!(text.lines().any(|l| l.contains("\"node\":\"one\"")), "{text}");
    // `--trace` wins.
    s.tea(&["run", "traced.yaml", "--trace", "given.jsonl"]).expect(DONE);
    assert!(s.0.join("given.jsonl").exists());
    // The console exporter: a line per step on stderr, as `-v` gives.
    s.write("console.yaml", &agent.replace("  trace_exporter: file\n  trace_file: yaml.jsonl\n", ""));
    let run = s.tea(&["run", "console.yaml"]).expect(DONE);
    assert!(run.stderr().contains("one"), "{run:?}");
}

#[test]
fn draw_marks_breakpoints_and_interrupt_nodes() {
    let s = Scratch::new();
    // review.yaml: `review` is an interrupt node (n1), `publish` (n3) has a breakpoint before it.
    let mermaid = s.tea(&["draw", "review.yaml"]).expect(DONE).stdout();
    assert!(mermaid.contains("    %% breakpoint before: publish\n    class n3 breakpoint_before"), "{mermaid}");
    assert!(mermaid.contains("    %% interrupt: review\n    class n1 interrupt"), "{mermaid}");
    let dot = s.tea(&["draw", "review.yaml", "--format", "dot"]).expect(DONE).stdout();
    assert!(dot.contains("n3 [color=\"#dd3333\", penwidth=3, xlabel=\"breakpoint before\"];"), "{dot}");
    assert!(dot.trim_end().ends_with('}'), "{dot}");
}

#[test]
fn verbose_step_lines_count_on_across_a_resume() {
    let s = Scratch::new();
    s.write("ask.yaml", ASK);
    let run = s.tea(&["run", "ask.yaml", "-v"]).expect(PAUSED);
    assert!(run.stderr().contains("tea: step 1: `greet`"), "{run:?}");
    let token = run.json()["token"].as_str().unwrap().to_owned();
    let resumed = s.tea(&["resume", "ask.yaml", "--token", &token, "--answer", "Ada", "-v"]).expect(DONE);
    let stderr = resumed.stderr();
    let steps: Vec<&str> = stderr.lines().filter(|l| l.starts_with("tea: step ")).collect();
    assert_eq!(steps.len(), 2, "{resumed:?}");
    assert!(steps[0].starts_with("tea: step 2: `ask_name`"), "the thread had run 1 step: {steps:?}");
    assert!(steps[1].starts_with("tea: step 3: `answer`"), "{steps:?}");
    let thread = run.json()["thread"].as_str().unwrap().to_owned();
    let state = s.tea(&["state", "ask.yaml", &thread]).expect(DONE).json();
    assert_eq!(state["step"], 3, "the progress counts as `tea state` does: {state}");
}

#[test]
fn quiet_says_nothing_but_errors_and_completions_are_generated() {
    let s = Scratch::new();
    s.write("ask.yaml", ASK);
    let quiet = s.tea(&["-q", "run", "ask.yaml"]).expect(PAUSED);
    assert_eq!(quiet.stderr(), "", "{quiet:?}");
    let loud = s.tea(&["run", "ask.yaml", "-v"]).expect(PAUSED);
    assert!(loud.stderr().contains("step 1: `greet`") && loud.stderr().contains("continue it with"), "{loud:?}");
    let error = s.tea(&["-q", "run", "nope.yaml"]).expect(ERROR);
    assert!(error.stderr().contains("nope.yaml"), "{error:?}");
    for (shell, mark) in [("bash", "_tea()"), ("zsh", "#compdef tea"), ("fish", "complete -c tea")] {
        let script = s.tea(&["completions", shell]).expect(DONE).stdout();
        assert!(script.contains(mark) && script.contains("recover"), "{shell}: {script}");
    }
    s.tea(&["completions", "tcsh"]).expect(USAGE);
}

/// A question, then a node that waits for `gate`, then another.
fn gated_ask(gate: &Gate) -> String {
    format!(
        r#"
name: gated_ask
variables: {{ gate: "{}" }}
nodes:
  - {{ name: ask, type: interrupt, message: "go?", resume_key: go }}
  - {{ name: a, uses: http.get, with: {{ url: "{{{{ variables.gate }}}}", timeout: 3600, retry: {{ max: 0 }} }}, output: a }}
  - {{ name: b, run: "return {{ b = 2 }}" }}
"#,
        gate.url
    )
}

#[test]
fn ctrl_c_in_a_resume_keeps_what_completed_after_the_pause() {
    let s = Scratch::new();
    let gate = Gate::open();
    s.write("gated_ask.yaml", &gated_ask(&gate));
    s.tea(&["run", "gated_ask.yaml", "--thread", "r1"]).expect(PAUSED);
    let mut tea = Watched::spawn(
        &s,
        &["resume", "gated_ask.yaml", "--thread", "r1", "--answer", "yes", "--allow-net", "127.0.0.1"],
    );
    // `a` is running: the run stops after it. `a` completed after the pause's node, so the
    // pause is not put back (answering again would run `a` twice): the thread stops before `b`.
    let a = gate.next();
    interrupt(&tea.child);
    tea.read_until("stopping at the next step boundary");
    a.release();
    let (status, _, seen) = tea.finish();
    assert_eq!(status, Some(130), "{seen}");
    assert!(seen.contains("step 2: `a`") && !seen.contains("step 3"), "`a` finished, `b` never ran: {seen}");
    assert!(seen.contains("continue it with `tea recover gated_ask.yaml --thread r1"), "{seen}");
    let listed = s.tea(&["threads", "gated_ask.yaml"]).expect(DONE).json();
    assert_eq!(listed[0]["status"], "stopped", "{listed}");
    assert_eq!(listed[0]["next"][0], "b", "{listed}");
    // Recovered, it runs `b` only: `a` ran once, with the first answer.
    let done = s.tea(&["recover", "gated_ask.yaml", "--thread", "r1"]).expect(DONE).json();
    assert_eq!((done["go"].as_str(), done["b"].as_u64()), (Some("yes"), Some(2)), "{done}");
    drop(gate);
}

#[test]
fn validate_shows_the_source_line_with_a_caret_in_colour_only_on_a_terminal() {
    let s = Scratch::new();
    let typo = std::fs::read_to_string(s.0.join("review.yaml")).unwrap().replace("to: publish }", "to: pubish }");
    s.write("typo.yaml", &typo);
    let bad = s.tea(&["validate", "typo.yaml"]).expect(ERROR);
    let out = bad.stdout();
    let lines: Vec<&str> = out.lines().collect();
    // The first line stays `file:line:column: message`.
    let mut parts = lines[0].splitn(4, ':');
    assert_eq!(parts.next(), Some("typo.yaml"), "{bad:?}");
    let row: usize = parts.next().unwrap().parse().unwrap();
    let col: usize = parts.next().unwrap().parse().unwrap();
    assert!(lines[0].contains("`pubish`") && lines[0].contains("`publish`"), "{bad:?}");
    // Then the file's line, numbered, and a caret under the word at that column.
    let source = typo.lines().nth(row - 1).unwrap();
    assert!(source.contains("pubish"), "the problem is on the line that has it: {source}");
    let at = lines.iter().position(|l| l.ends_with(source)).unwrap_or_else(|| panic!("no source line: {bad:?}"));
    assert!(lines[at].trim_start().starts_with(&format!("{row} |")), "{bad:?}");
    let margin = lines[at].len() - source.len();
    let caret = lines[at + 1];
    assert_eq!(caret.find('^'), Some(margin + col - 1), "the caret is under column {col}: {bad:?}");
    assert_eq!(&caret[margin + col - 1..], "^^^^^^", "under the whole word `pubish`: {bad:?}");
    assert!(!out.contains('\x1b') && !bad.stderr().contains('\x1b'), "no colour in a pipe: {bad:?}");

    // On a terminal (util-linux `script`), in colour; with NO_COLOR, plain again.
    let command = format!("{} validate typo.yaml", env!("CARGO_BIN_EXE_tea"));
    let on_terminal = |no_color: bool| {
        let mut script = Command::new("script");
        script.args(["-qec", &command, "/dev/null"]).current_dir(&s.0).env_remove("NO_COLOR");
        if no_color {
            script.env("NO_COLOR", "1");
        }
        script.output().ok().map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let Some(coloured) = on_terminal(false) else {
        eprintln!("skipped the terminal half: no `script` command");
        return;
    };
    assert!(coloured.contains("\x1b[") && coloured.contains("pubish"), "{coloured:?}");
    let plain = on_terminal(true).unwrap();
    assert!(!plain.contains('\x1b') && plain.contains("^^^^^^"), "{plain:?}");
}

#[test]
fn the_edge_agent_s_run_flags_pause_at_run_time_breakpoints_in_a_checkpoint_dir() {
    let s = Scratch::new();
    // `-i`, `-c DIR` (`--checkpoint-dir`), `--interrupt-before` a comma-separated list.
    let args = ["run", "research.yaml", "-i", r#"{"topic": "tea"}"#, "-c", "kept", "--interrupt-before", "web, merge"];
    let pause = s.tea(&args).expect(PAUSED).json();
    assert_eq!(pause["interrupts"][0]["node"], "web");
    let checkpoint = pause["checkpoint_path"].as_str().unwrap().to_owned();
    assert!(checkpoint.starts_with("kept/research/") && s.0.join(&checkpoint).is_file(), "{pause}");
    assert!(!s.0.join(".tea").exists(), "--checkpoint-dir is the store, not the default one");

    // The Edge Agent's resume: the checkpoint, `--workflow FILE`, `--input` written as an update.
    let args = [
        "resume",
        &checkpoint,
        "--workflow",
        "research.yaml",
        "--input",
        r#"{"topic": "graphs"}"#,
        "--checkpoint-dir",
        "kept",
        "--interrupt-after",
        "papers",
        "--interrupt-before",
        "merge",
    ];
    let pause = s.tea(&args).expect(PAUSED).json();
    let nodes: Vec<&str> =
        pause["interrupts"].as_array().unwrap().iter().map(|i| i["node"].as_str().unwrap()).collect();
    assert!(nodes == ["merge"] || nodes.contains(&"papers"), "a breakpoint of this resume: {pause}");
    // The breakpoints were that run's: resumed without them, the thread runs to its end.
    let token = pause["token"].as_str().unwrap();
    let done = s.tea(&["resume", "research.yaml", "--token", token, "-c", "kept"]).expect(DONE).json();
    assert_eq!(done["summary"], "3 pages and 2 papers about graphs", "the update reached the state");
    // A checkpoint file resumes once: it has moved on.
    let again = s.tea(&["resume", &checkpoint, "--workflow", "research.yaml", "-c", "kept"]).expect(ERROR);
    assert!(again.stderr().contains("moved on"), "{again:?}");

    // `--interrupt-after`, repeated; `-I` is `--interactive` (Enter continues a breakpoint).
    let args = ["run", "research.yaml", "--interrupt-after", "plan", "--interrupt-after", "merge", "--store", "memory"];
    let pause = s.tea(&args).expect(PAUSED).json();
    assert_eq!(pause["interrupts"][0]["node"], "plan");
    let done = s.tea_with_stdin(&[&args[..], &["-I"]].concat(), Some("\n\n")).expect(DONE);
    assert_eq!(done.json()["summary"], "3 pages and 2 papers about state graphs", "{done:?}");
    assert_eq!(done.stderr().matches("a breakpoint").count(), 2, "{done:?}");

    // `--auto-continue` goes on past breakpoints; a question still pauses.
    let args = ["run", "research.yaml", "--interrupt-before", "web,merge", "--store", "memory", "--auto-continue"];
    let done = s.tea(&args).expect(DONE);
    assert_eq!(done.json()["summary"], "3 pages and 2 papers about state graphs", "{done:?}");
    assert!(done.stderr().contains("past the breakpoint at `merge`"), "{done:?}");
    let pause = s.tea(&["run", "review.yaml", "--thread", "a1", "--auto-continue"]).expect(PAUSED).json();
    let token = pause["token"].as_str().unwrap();
    let done = s.tea(&["resume", "review.yaml", "--token", token, "--answer", "true", "--auto-continue"]).expect(DONE);
    assert_eq!(done.json()["approved"], true, "past the breakpoint before `publish`: {done:?}");
    s.tea(&["run", "review.yaml", "--auto-continue", "--interactive"]).expect(USAGE);

    // A name that is not a node is a load error naming it, with a suggestion; nothing runs.
    let bad = s.tea(&["run", "research.yaml", "--interrupt-before", "mrege", "-c", "other"]).expect(ERROR);
    assert!(bad.stderr().contains("`mrege`") && bad.stderr().contains("did you mean `merge`"), "{bad:?}");
    assert!(!s.0.join("other").exists(), "{bad:?}");
}

#[test]
fn inspect_prints_nodes_edges_schema_and_settings_as_text_json_or_dot() {
    let s = Scratch::new();
    let text = s.tea(&["inspect", "review.yaml"]).expect(DONE).stdout();
    for expected in [
        "Workflow: review\n",
        "Description: Drafts a text",
        "Nodes (5):\n  draft (lua)\n  review (interrupt)\n",
        "  review -> publish [when: approved]\n",
        "  revise -> draft\n",
        "State schema:\n  approved: bool\n",
        "Variables:\n  max_revisions: 2\n",
        "Config:\n  checkpoint_dir: ./checkpoints\n",
        "Breakpoints:\n  before: publish\n",
        "Interrupt nodes: review",
    ] {
        assert!(text.contains(expected), "`{expected}` in:\n{text}");
    }
    let research = s.tea(&["inspect", "research.yaml"]).expect(DONE).stdout();
    assert!(research.contains("  plan => [web] (fan_in: merge)\n  plan => [papers] (fan_in: merge)\n"), "{research}");
    assert!(research.contains("sources: {\"reducer\":\"append\",\"type\":\"list\"}"), "{research}");

    let json = s.tea(&["inspect", "review.yaml", "--format", "json"]).expect(DONE).json();
    assert_eq!(json["name"], "review");
    assert_eq!(json["nodes"][1]["type"], "interrupt");
    assert_eq!(json["variables"]["max_revisions"], 2);
    assert_eq!(json["config"]["interrupt_before"][0], "publish");

    let dot = s.tea(&["inspect", "research.yaml", "-f", "dot"]).expect(DONE).stdout();
    assert!(dot.starts_with("digraph \"research\" {\n    rankdir=TB;\n    node [shape=box];\n"), "{dot}");
    assert!(dot.contains("label=\"merge\"") && dot.trim_end().ends_with('}'), "{dot}");
    assert!(!s.0.join("checkpoints").exists(), "inspect leaves the file's store alone");

    // A file tea cannot load is still described as written; its problems go to stderr.
    s.write(
        "far.yaml",
        "name: far\nnodes:\n  - name: ask\n    uses: somewhere.else\nedges:\n  - { from: __start__, to: ask }\n",
    );
    let far = s.tea(&["inspect", "far.yaml", "-f", "dot"]).expect(DONE);
    assert!(far.stdout().contains("\"ask\" [label=\"ask\\n[somewhere.else]\"];"), "{far:?}");
    assert!(far.stdout().contains("\"__start__\" -> \"ask\";"), "{far:?}");
    assert!(far.stderr().contains("does not load here") && far.stderr().contains("far.yaml:4:"), "{far:?}");
    s.write("broken.yaml", "nodes: [\n");
    let broken = s.tea(&["inspect", "broken.yaml"]).expect(ERROR);
    assert!(broken.stderr().contains("YAML syntax"), "{broken:?}");
    s.tea(&["inspect", "review.yaml", "--format", "png"]).expect(USAGE);
}

#[test]
fn validate_detailed_prints_the_inspect_text_first() {
    let s = Scratch::new();
    let run = s.tea(&["validate", "--detailed", "research.yaml"]).expect(DONE);
    let out = run.stdout();
    assert!(out.starts_with("Workflow: research\n\nNodes (4):\n"), "{run:?}");
    assert!(out.ends_with("ok: research.yaml (4 nodes)\n"), "{run:?}");
}

#[test]
fn trust_is_accepted_and_kept_in_the_printed_commands() {
    let s = Scratch::new();
    let pause = s.tea(&["run", "review.yaml", "--trust", "--thread", "t1"]).expect(PAUSED);
    assert!(pause.stderr().contains(" --trust --answer ANSWER`"), "the command to continue keeps --trust: {pause:?}");
    let token = pause.json()["token"].as_str().unwrap().to_owned();
    s.tea(&["-v", "resume", "review.yaml", "--token", &token, "--answer", "true", "--trust"]).expect(PAUSED);
    s.tea(&["recover", "review.yaml", "--thread", "t1", "--trust"]).expect(PAUSED);
    s.tea(&["validate", "review.yaml", "--trust"]).expect(DONE);
    s.tea(&["-v", "inspect", "review.yaml", "--trust"]).expect(DONE);
}

#[test]
fn the_edge_agents_ignored_keys_are_warned_about_once_per_key() {
    let s = Scratch::new();
    s.write(
        "edge.yaml",
        "settings:\n  ltm: { backend: sqlite }\nnodes:\n  - name: a\n    params: { x: 1 }\n    run: return { a = 1 }\n  - name: b\n    params: { y: 2 }\n    run: return { b = 2 }\n",
    );
    let run = s.tea(&["run", "edge.yaml"]).expect(DONE);
    let err = run.stderr();
    let warnings: Vec<&str> = err.lines().filter(|l| l.starts_with("tea: warning: ")).collect();
    assert_eq!(warnings.len(), 2, "{run:?}");
    assert!(warnings[0].starts_with("tea: warning: edge.yaml:2:3: `settings.ltm`"), "{run:?}");
    assert!(
        warnings[1].starts_with("tea: warning: edge.yaml:5:13: node key `params` (The Edge Agent's) is ignored"),
        "{run:?}"
    );
    assert_eq!(run.json()["b"], 2);
    // `-q` keeps them to itself; a key neither engine knows is still an error, with a hint.
    let quiet = s.tea(&["-q", "validate", "edge.yaml"]).expect(DONE);
    assert!(!quiet.stderr().contains("warning"), "{quiet:?}");
    s.write("typo.yaml", "nodes:\n  - name: a\n    rnu: return {}\n");
    let typo = s.tea(&["validate", "typo.yaml"]).expect(ERROR);
    assert!(typo.stdout().contains("unknown key `rnu` in a node; did you mean `run`?"), "{typo:?}");
}

/// With the feature `python`, `--trust` is what lets a file's Python blocks run.
#[cfg(feature = "python")]
#[test]
fn trust_lets_python_blocks_run() {
    let s = Scratch::new();
    s.write("py.yaml", "name: py\nnodes:\n  - name: double\n    language: python\n    run: |\n      return {\"n\": state.get(\"n\", 0) * 2}\n");
    let refused = s.tea(&["run", "py.yaml", "-i", r#"{"n": 21}"#]).expect(ERROR);
    assert!(refused.stderr().contains("--trust"), "the error says how to trust the file: {refused:?}");
    let done = s.tea(&["run", "py.yaml", "-i", r#"{"n": 21}"#, "--trust"]).expect(DONE);
    assert_eq!(done.json()["n"], 42, "{done:?}");
}

/// The Edge Agent's own CLI parity tests (its `rust/tests/test_cli_parity.rs`), on the agents
/// they write, copied into the corpus as `rust-tests-inline/test_cli_parity__<test>.yaml`.
/// Ported: those tea honours (12 of 17). Not ported: `--impl` (tea has one implementation),
/// `--actions-module`/`--actions-file` (Python only there too: three tests), and
/// `validate --detailed` on an agent whose `llm.call` has no model (tea needs one at load;
/// `inspect` describes such a file as written, so `test_inspect_dot` is kept).
#[test]
fn the_edge_agent_s_cli_parity_tests() {
    let Some(corpus) = corpus() else {
        eprintln!(
            "skipped: no edge-agent corpus (set TEA_EDGE_AGENT_CORPUS, or place it at ../shared/edge-agent-corpus)"
        );
        return;
    };
    let s = Scratch::new();
    let file =
        |test: &str| corpus.join(format!("rust-tests-inline/test_cli_parity__{test}.yaml")).display().to_string();
    let help = s.tea(&["--help"]).expect(DONE).stdout();
    for command in ["run", "resume", "validate", "inspect"] {
        assert!(help.contains(command), "{help}");
    }
    let help = s.tea(&["run", "--help"]).expect(DONE).stdout();
    for flag in [
        "--input",
        "--secrets",
        "--secrets-env",
        "--stream",
        "--interrupt-before",
        "--interrupt-after",
        "--verbose",
        "--quiet",
        "--auto-continue",
    ] {
        assert!(help.contains(flag), "{flag} in {help}");
    }
    // test_resume_help_shows_auto_continue, test_version_flag.
    assert!(s.tea(&["resume", "--help"]).expect(DONE).stdout().contains("--auto-continue"));
    assert!(s.tea(&["--version"]).expect(DONE).stdout().starts_with("tea "));
    // test_validate_command: it loads.
    let ok = s.tea(&["validate", &file("test_validate_command")]).expect(DONE);
    assert!(ok.stdout().starts_with("ok: "), "{ok:?}");
    // test_inspect_text, test_inspect_json, test_inspect_dot.
    let text = s.tea(&["inspect", &file("test_inspect_text")]).expect(DONE).stdout();
    assert!(text.contains("Workflow: test-workflow") && text.contains("Nodes"), "{text}");
    let json = s.tea(&["inspect", &file("test_inspect_json"), "--format", "json"]).expect(DONE).stdout();
    assert!(json.contains("\"name\": \"test-workflow\""), "{json}");
    let dot = s.tea(&["inspect", &file("test_inspect_dot"), "--format", "dot"]).expect(DONE).stdout();
    assert!(dot.contains("digraph") && dot.contains("rankdir=TB") && dot.contains("step1"), "{dot}");
    // test_no_language_defaults_to_lua, test_explicit_lua_language.
    let run = s.tea(&["run", &file("test_no_language_defaults_to_lua")]).expect(DONE);
    assert!(run.stdout().contains("default lua works"), "{run:?}");
    let run = s.tea(&["run", &file("test_explicit_lua_language")]).expect(DONE);
    assert!(run.stdout().contains("explicit lua works"), "{run:?}");
    // test_python_language_error: refused, naming the node (its wording is tea's own).
    let run = s.tea(&["run", &file("test_python_language_error")]).expect(ERROR);
    assert!(run.stderr().contains("python_node") && run.stderr().to_lowercase().contains("python"), "{run:?}");
}

/// The Edge Agent's agents, as tea-yaml's corpus test finds them.
fn corpus() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("TEA_EDGE_AGENT_CORPUS") {
        return Some(PathBuf::from(dir));
    }
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    ["../../shared/edge-agent-corpus", "../../../shared/edge-agent-corpus"]
        .into_iter()
        .map(|p| here.join(p))
        .find(|p| p.join("rust-tests-inline").is_dir())
}

#[test]
fn update_and_fork_travel_in_time() {
    let s = Scratch::new();
    s.write("ask.yaml", ASK);
    s.tea(&["run", "ask.yaml", "--thread", "t1"]).expect(PAUSED);
    let paused = s.tea(&["state", "ask.yaml", "t1"]).expect(DONE).json();
    let pause_checkpoint = paused["checkpoint"].as_u64().unwrap().to_string();

    // As if `ask_name` had answered: the run goes on at `answer`.
    let updated =
        s.tea(&["update", "ask.yaml", "t1", "--as-node", "ask_name", r#"{"name": "Ada"}"#]).expect(DONE).json();
    assert_eq!(updated["next"], serde_json::json!(["answer"]), "{updated}");
    let done = s.tea(&["recover", "ask.yaml", "--thread", "t1"]).expect(DONE);
    assert!(done.stdout().contains("hello, Ada"), "{done:?}");
    let unknown = s.tea(&["update", "ask.yaml", "t1", "--as-node", "nobody", "{}"]).expect(ERROR);
    assert!(unknown.stderr().contains("no node `nobody`"), "{unknown:?}");

    // Back to the pause, in a thread of its own; t1 stays finished.
    s.tea(&["fork", "ask.yaml", "t1", &pause_checkpoint, "--to", "t1b"]).expect(DONE);
    s.tea(&["recover", "ask.yaml", "--thread", "t1b"]).expect(PAUSED);
    let original = s.tea(&["state", "ask.yaml", "t1"]).expect(DONE).json();
    assert_eq!(original["state"]["reply"], "hello, Ada", "{original}");
    let at = s.tea(&["state", "ask.yaml", "t1", "--at", &pause_checkpoint]).expect(DONE).json();
    assert_eq!(at["interrupts"][0]["node"], "ask_name", "{at}");
    let none = s.tea(&["state", "ask.yaml", "t1", "--at", "999"]).expect(ERROR);
    assert!(none.stderr().contains("no checkpoint 999"), "{none:?}");
    let missing = s.tea(&["fork", "ask.yaml", "t1", "999"]).expect(ERROR);
    assert!(missing.stderr().contains("no checkpoint 999"), "{missing:?}");
}

#[test]
fn context_reaches_run_blocks_and_the_stream_shows_emits() {
    let s = Scratch::new();
    s.write(
        "ctx.yaml",
        "nodes:\n  - name: greet\n    run: |\n      emit(\"hello \" .. context.user)\n      return { greeting = \"hi \" .. context.user }\n",
    );
    let out = s.tea(&["run", "ctx.yaml", "--context", r#"{"user": "ada"}"#, "--stream"]).expect(DONE);
    let lines: Vec<serde_json::Value> =
        out.stdout().lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    assert_eq!(lines[0]["event"], "custom", "{lines:?}");
    assert_eq!(lines[0]["value"], "hello ada");
    assert_eq!(lines.last().unwrap()["state"]["greeting"], "hi ada", "{lines:?}");
    // Not an object: refused with what it must be.
    let bad = s.tea(&["run", "ctx.yaml", "--context", "[1]"]).expect(ERROR);
    assert!(bad.stderr().contains("--context must be a JSON object"), "{bad:?}");
}

#[test]
fn validate_warns_of_a_node_nothing_reaches_and_strict_refuses_it() {
    let s = Scratch::new();
    s.write(
        "orphan.yaml",
        "nodes:\n  - name: a\n    run: return {}\n    goto: __end__\n  - name: orphan\n    run: return {}\n",
    );
    let loose = s.tea(&["validate", "orphan.yaml"]).expect(DONE);
    assert!(loose.stdout().contains("ok: orphan.yaml (2 nodes)"), "{loose:?}");
    assert!(loose.stderr().contains("orphan.yaml:5:11: node `orphan` is unreachable"), "{loose:?}");
    let strict = s.tea(&["validate", "--strict", "orphan.yaml"]).expect(ERROR);
    assert!(strict.stdout().contains("orphan.yaml:5:11: node `orphan` is unreachable"), "{strict:?}");
}

#[test]
fn the_tutorials_yaml_agent_runs_as_its_chapter_shows() {
    // docs/src/tutorial-yaml.md: validate, run until the pause, resume from another process.
    let s = Scratch::new();
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/tutorial/support.yaml");
    let file = file.to_str().unwrap();
    let ok = s.tea(&["validate", file]).expect(DONE);
    assert!(ok.stdout().contains("(6 nodes)"), "{ok:?}");
    let store = format!("sled:{}", s.0.join("tickets").display());
    let input = r#"{"question": "opening hours"}"#;
    let pause = s.tea(&["run", file, "--store", &store, "--input", input]).expect(PAUSED).json();
    assert_eq!(
        pause["interrupts"][0]["value"],
        "Send this reply? Thanks for asking about opening hours. Here is what we can do …"
    );
    let token = pause["token"].as_str().unwrap();
    let done = s.tea(&["resume", file, "--store", &store, "--token", token, "--answer", "true"]).expect(DONE).json();
    assert_eq!(done["log"], serde_json::json!(["triage: urgent = false", "draft: wrote a reply", "send: reply sent"]));
}

/// A server on 127.0.0.1 that answers each request `200 {"ok": true}` and keeps its heads.
fn recording_server() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::Read;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let heads = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = heads.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
                head.push(byte[0]);
            }
            seen.lock().unwrap().push(String::from_utf8_lossy(&head).into_owned());
            let body = r#"{"ok": true}"#;
            let reply = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(reply.as_bytes());
        }
    });
    (port, heads)
}

#[test]
fn grant_flags_open_files_hosts_and_bind_secrets() {
    let s = Scratch::new();
    let outside = s.0.join("../").canonicalize().unwrap().join(format!("tea-cli-grants-{}", std::process::id()));
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("data.txt"), "outside").unwrap();
    let data = outside.join("data.txt").display().to_string();
    let input = format!(r#"{{"p": "{data}"}}"#);

    // Files: a computed path out of the agent's folder fails its node, naming the flag.
    s.write("read.yaml", "nodes:\n  - { name: r, uses: file.read, with: { path: \"{{ state.p }}\" }, output: got }\n");
    let refused = s.tea(&["run", "read.yaml", "--input", &input]).expect(ERROR);
    let flag = format!("--allow-read {}", outside.display());
    assert!(refused.stderr().contains(&flag), "{refused:?}");
    let dir = outside.display().to_string();
    // `--trust` lifts no grant; `--allow-read` does.
    s.tea(&["run", "read.yaml", "--input", &input, "--trust"]).expect(ERROR);
    let read = s.tea(&["run", "read.yaml", "--input", &input, "--allow-read", &dir]).expect(DONE).json();
    assert_eq!(read["got"]["content"], "outside");
    // Written in the file: `tea validate` says so with its line, and passes with the grant.
    s.write(
        "write.yaml",
        &format!("nodes:\n  - name: w\n    uses: file.write\n    with: {{ path: \"{}/new.txt\", content: x }}\n", dir),
    );
    let invalid = s.tea(&["validate", "write.yaml"]).expect(ERROR);
    assert!(invalid.stdout().contains("write.yaml:4:") && invalid.stdout().contains("--allow-write"), "{invalid:?}");
    s.tea(&["validate", "write.yaml", "--allow-write", &dir]).expect(DONE);
    s.tea(&["run", "write.yaml", "--allow-read", &dir]).expect(ERROR);
    assert!(!outside.join("new.txt").exists(), "a read grant wrote nothing");
    s.tea(&["run", "write.yaml", "--allow-write", &dir]).expect(DONE);
    assert!(outside.join("new.txt").exists());
    // The environment through /proc, even with everything granted.
    let environ =
        s.tea(&["run", "read.yaml", "--input", r#"{"p": "/proc/self/environ"}"#, "--allow-all"]).expect(ERROR);
    assert!(environ.stderr().contains("under `/proc`"), "{environ:?}");

    // Network: nothing reaches a host not granted; a secret only a host it is bound to.
    let (port, heads) = recording_server();
    let url = format!("http://127.0.0.1:{port}/x");
    s.write(
        "get.yaml",
        "nodes:\n  - name: g\n    uses: http.get\n    with: { url: \"{{ state.url }}\", headers: { x-token: \"{{ secrets.token }}\" }, retry: { max: 0 } }\n    output: got\n",
    );
    let input = format!(r#"{{"url": "{url}"}}"#);
    let secrets = r#"{"token": "tok-0123456789"}"#;
    let ungranted = s.tea(&["run", "get.yaml", "--input", &input, "--secrets", secrets]).expect(ERROR);
    assert!(ungranted.stderr().contains("--allow-net 127.0.0.1"), "{ungranted:?}");
    let unbound =
        s.tea(&["run", "get.yaml", "--input", &input, "--secrets", secrets, "--allow-net", "127.0.0.1"]).expect(ERROR);
    assert!(unbound.stderr().contains("--secret-host token=127.0.0.1"), "{unbound:?}");
    assert!(!unbound.stderr().contains("tok-0123456789"), "{unbound:?}");
    assert!(heads.lock().unwrap().is_empty(), "nothing was sent");
    let bound = [
        "run",
        "get.yaml",
        "--input",
        &input,
        "--secrets",
        secrets,
        "--allow-net",
        "127.0.0.1",
        "--secret-host",
        "token=127.0.0.1",
    ];
    assert_eq!(s.tea(&bound).expect(DONE).json()["got"]["status"], 200);
    // The hosts of a secret may be given in the --secrets file.
    s.write("secrets.json", r#"{"token": {"value": "tok-0123456789", "hosts": ["127.0.0.1"]}}"#);
    let from_file = ["run", "get.yaml", "--input", &input, "--secrets", "@secrets.json", "--allow-net", "127.0.0.1"];
    s.tea(&from_file).expect(DONE);
    let sent = heads.lock().unwrap().clone();
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(sent.iter().all(|h| h.contains("tok-0123456789")), "{sent:?}");
    // A grant that does not parse is an error naming it.
    let bad = s.tea(&["validate", "get.yaml", "--allow-net", "exa mple.com"]).expect(ERROR);
    assert!(bad.stdout().contains("`exa mple.com` is not a host"), "{bad:?}");
    let _ = std::fs::remove_dir_all(&outside);
}

#[test]
fn tea_serve_loads_its_agents_with_the_grant_flags() {
    use std::io::BufRead;
    let s = Scratch::new();
    let outside = s.0.join("../").canonicalize().unwrap().join(format!("tea-cli-serve-grants-{}", std::process::id()));
    std::fs::create_dir_all(&outside).unwrap();
    let dir = outside.display().to_string();
    s.write("lit.yaml", &format!("nodes:\n  - {{ name: r, uses: file.read, with: {{ path: \"{dir}/data.txt\" }} }}\n"));
    let serve = ["serve", "lit.yaml", "--insecure-local", "--bind", "127.0.0.1:0", "--store", "memory"];
    let refused = s.tea(&serve).expect(ERROR);
    assert!(refused.stderr().contains(&format!("--allow-read {dir}")), "{refused:?}");
    // Granted, it serves: its first line says where.
    let mut child = Command::new(env!("CARGO_BIN_EXE_tea"))
        .args(serve)
        .args(["--allow-read", &dir])
        .current_dir(&s.0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stderr.take().unwrap()).read_line(&mut line).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(line.contains("on http://127.0.0.1:"), "{line}");
    let _ = std::fs::remove_dir_all(&outside);
}

#[test]
fn encryption_keys_seal_the_store_and_are_needed_to_resume() {
    let s = Scratch::new();
    s.write("ask.yaml", ASK);
    s.write("keys.txt", &format!("# current first\n2:{}\n", "ab".repeat(32)));
    let pause =
        s.tea(&["run", "ask.yaml", "--store", "dir:sealed", "--encryption-keys", "keys.txt"]).expect(PAUSED).json();
    let file = pause["checkpoint_path"].as_str().unwrap();
    let bytes = std::fs::read(s.0.join(file)).unwrap();
    assert!(bytes.starts_with(b"TEAs") && !bytes.windows(5).any(|w| w == b"hello"), "the pause file is sealed");

    // Without the keys the thread does not read; a bad key file is one clear line.
    let without = s.tea(&["resume", "ask.yaml", "--store", "dir:sealed", "--checkpoint", file, "--answer", "\"Bo\""]);
    // It says what it is and how to open it.
    assert!(without.stderr().contains("sealed record"), "{without:?}");
    assert!(without.stderr().contains("--encryption-keys"), "{without:?}");
    assert!(without.status() != DONE, "{without:?}");
    s.write("bad.txt", "2:short\n");
    let bad = s.tea(&["threads", "ask.yaml", "--store", "dir:sealed", "--encryption-keys", "bad.txt"]);
    assert!(bad.stderr().contains("bad.txt:1") && bad.status() != DONE, "{bad:?}");

    // The variable holds the same text; the pause file resumes.
    let keys = std::fs::read_to_string(s.0.join("keys.txt")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tea"))
        .args(["resume", "ask.yaml", "--store", "dir:sealed", "--checkpoint", file, "--answer", "\"Bo\""])
        .env("TEA_ENCRYPTION_KEYS", keys)
        .env_remove("RUST_LOG")
        .current_dir(&s.0)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let done = Run(out).expect(DONE);
    assert_eq!(done.json()["reply"], "hello, Bo");
}

#[test]
fn prune_expires_finished_threads_keeps_paused_ones_and_trims_histories() {
    let s = Scratch::new();
    s.write("ask.yaml", ASK);
    s.write("keys.txt", &format!("1:{}\n", "cd".repeat(32)));
    for store in [&["--store", "sled:st"][..], &["--store", "dir:sealed", "--encryption-keys", "keys.txt"][..]] {
        let tea = |args: &[&str]| s.tea(&[args, store].concat());
        tea(&["run", "ask.yaml", "--thread", "waiting"]).expect(PAUSED);
        tea(&["run", "ask.yaml", "--thread", "answered"]).expect(PAUSED);
        tea(&["resume", "ask.yaml", "--thread", "answered", "--answer", "Ada"]).expect(DONE);
        let listed = |tea: &dyn Fn(&[&str]) -> Run| -> Vec<String> {
            let threads = tea(&["threads", "ask.yaml"]).expect(DONE).json();
            threads.as_array().unwrap().iter().map(|t| t["thread"].as_str().unwrap().to_owned()).collect()
        };

        // Nothing is a month old.
        let report = tea(&["prune", "ask.yaml", "--older-than", "30d"]).expect(DONE).json();
        assert_eq!(report["threads"], 2, "{report}");
        assert_eq!(report["expired"], serde_json::json!([]), "{report}");

        // Everything is at least zero seconds old: the finished thread goes, the paused one stays,
        // said on stderr and in the report.
        let run = tea(&["prune", "ask.yaml", "--older-than", "0s"]).expect(DONE);
        let report = run.json();
        assert_eq!(report["expired"][0]["thread"], "answered", "{report}");
        assert_eq!(report["expired"][0]["status"], "done", "{report}");
        assert_eq!(report["kept_paused"][0]["thread"], "waiting", "{report}");
        assert_eq!(report["kept_paused"][0]["reason"], "paused threads do not expire", "{report}");
        assert!(run.stderr().contains("thread `waiting` kept"), "{run:?}");
        assert_eq!(listed(&tea), ["waiting"]);

        // --keep-last trims the history to the head.
        let before = tea(&["state", "ask.yaml", "waiting", "--history"]).expect(DONE).json();
        assert!(before.as_array().unwrap().len() > 1, "{before}");
        let report = tea(&["prune", "ask.yaml", "--keep-last", "1"]).expect(DONE).json();
        assert_eq!(report["pruned"].as_u64().unwrap() as usize, before.as_array().unwrap().len() - 1, "{report}");
        let after = tea(&["state", "ask.yaml", "waiting", "--history"]).expect(DONE).json();
        assert_eq!(after.as_array().unwrap().len(), 1, "{after}");

        // Paused threads go only when asked.
        let report = tea(&["prune", "ask.yaml", "--older-than", "0s", "--include-paused"]).expect(DONE).json();
        assert_eq!(report["expired"][0]["thread"], "waiting", "{report}");
        assert_eq!(report["expired"][0]["status"], "paused", "{report}");
        assert!(listed(&tea).is_empty());
    }

    // Bad or missing flags are clear errors.
    let none = s.tea(&["prune", "ask.yaml"]).expect(ERROR);
    assert!(none.stderr().contains("nothing to prune"), "{none:?}");
    let bad = s.tea(&["prune", "ask.yaml", "--older-than", "3 days"]).expect(USAGE);
    assert!(bad.stderr().contains("`3 days` is not a duration"), "{bad:?}");
    let free = s.tea(&["prune", "research.yaml", "--keep-last", "2"]).expect(ERROR);
    assert!(free.stderr().contains("--store"), "{free:?}");
}
