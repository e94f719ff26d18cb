//! Runs each step of the tutorial as a process, as a reader would, and checks what it prints:
//! step 1's output exactly as the chapter shows it, the others by the lines that matter.

use std::path::Path;
use std::process::Command;

/// Runs the program `exe` with `args`; its standard output, or a panic with both streams.
fn run(exe: &str, args: &[&str]) -> String {
    let output = Command::new(exe).args(args).output().unwrap_or_else(|e| panic!("{exe}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{exe} {args:?}: {}\n--- stdout:\n{stdout}\n--- stderr:\n{stderr}", output.status);
    stdout
}

fn has(stdout: &str, line: &str) {
    assert!(stdout.lines().any(|l| l == line), "no line {line:?} in:\n{stdout}");
}

const DONE: &str = "triage: urgent = false, draft: wrote a reply, send: reply sent";

#[test]
fn step1_prints_what_its_chapter_shows() {
    let stdout = run(env!("CARGO_BIN_EXE_step1_first_graph"), &[]);
    let chapter = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/src/tutorial-first-graph.md");
    let text = std::fs::read_to_string(&chapter).unwrap();
    let mark = text.find("<!-- output: step1 ").expect("the chapter marks step 1's output");
    let start = mark + text[mark..].find("```text\n").expect("a text block") + "```text\n".len();
    let end = start + text[start..].find("```\n").expect("the block closes");
    assert_eq!(stdout, &text[start..end], "step 1's output differs from {}", chapter.display());
}

#[test]
fn step2_pauses_hands_out_a_token_and_refuses_it_twice() {
    let stdout = run(env!("CARGO_BIN_EXE_step2_approval"), &[]);
    has(&stdout, "paused at `review` after: triage: urgent = false, draft: wrote a reply");
    // The question as text: no JSON quotes around it.
    has(
        &stdout,
        "the reviewer is asked: Send this reply? Thanks for asking about opening hours. Here is what we can do …",
    );
    has(&stdout, &format!("done: {DONE}"));
    has(&stdout, "the same token again: refused, the pause was answered");
}

#[test]
fn step3_resumes_in_another_process() {
    let stdout = run(env!("CARGO_BIN_EXE_step3_on_disk"), &[]);
    let pid = |line: &str| line.strip_prefix("process ").and_then(|r| r.split(':').next()).map(str::to_owned);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert!(lines[0].ends_with("paused at `review`"), "{stdout}");
    assert!(lines[1].contains(": the reviewer is asked: Send this reply?"), "{stdout}");
    assert!(lines[2].ends_with(&format!(": done: {DONE}")), "{stdout}");
    assert_ne!(pid(lines[0]), pid(lines[2]), "the pause is answered by another process: {stdout}");
    assert_eq!(pid(lines[1]), pid(lines[2]), "{stdout}");

    // By hand, in two commands, on a directory of the test's.
    let dir = std::env::temp_dir().join(format!("tea-tutorial-test-step3-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let dir_arg = dir.to_str().unwrap();
    let asked = run(env!("CARGO_BIN_EXE_step3_on_disk"), &["ask", dir_arg]);
    let token = asked.lines().find_map(|l| l.strip_prefix("token: ")).expect("the token is printed");
    let answered = run(env!("CARGO_BIN_EXE_step3_on_disk"), &["answer", dir_arg, token]);
    assert!(answered.ends_with(&format!(": done: {DONE}\n")), "{answered}");
    let again = Command::new(env!("CARGO_BIN_EXE_step3_on_disk")).args(["answer", dir_arg, token]).output().unwrap();
    assert!(!again.status.success(), "a spent token is refused");
    assert!(String::from_utf8_lossy(&again.stderr).contains("StaleResume"), "{again:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn step4_serves_a_pause_and_its_answer_over_http() {
    let stdout = run(env!("CARGO_BIN_EXE_step4_serve"), &[]);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{stdout}");
    assert!(lines[0].starts_with("serving on http://127.0.0.1:"), "{stdout}");
    assert!(lines[1].starts_with("POST /runs/wait: 200, run interrupted, thread "), "{stdout}");
    assert_eq!(
        lines[2],
        "  the reviewer is asked: Send this reply? Thanks for asking about opening hours. Here is what we can do …"
    );
    assert!(lines[3].starts_with("POST /threads/") && lines[3].ends_with("/runs/wait: 200, run success"), "{stdout}");
    assert_eq!(lines[4], format!("  done: {DONE}"));
}

#[test]
fn step5_runs_the_yaml_agent_as_step2_runs_the_graph() {
    let stdout = run(env!("CARGO_BIN_EXE_step5_yaml"), &[]);
    has(&stdout, "agent `support`: nodes triage, draft, review, send, discard, escalate");
    has(
        &stdout,
        "paused at `review`; the reviewer is asked: Send this reply? Thanks for asking about opening hours. Here is what we can do …",
    );
    has(&stdout, &format!("done: {DONE}"));
}
