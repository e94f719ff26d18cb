//! The example agents that call a chat model, run through `tea run`/`tea resume` against the
//! OpenAI-compatible mock of tea-yaml's tests on 127.0.0.1 (the endpoint from OPENAI_BASE_URL):
//! a pause in one process resumed in another, three model calls in flight at once, secrets from
//! `--secrets` and `--secrets-env`, and the key never in a checkpoint, on stdout, or on stderr
//! (errors and `RUST_LOG=tea=trace` traces).

#[path = "../../tea-yaml/tests/support/mock.rs"]
mod mock;

use mock::Mock;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const KEY: &str = "sk-cli-mock-9876543210";
const PAUSED: i32 = 3;

/// A scratch directory with copies of the example agents; removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("tea-cli-net-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/agents");
        for name in ["summarize.yaml", "triage.yaml"] {
            std::fs::copy(examples.join(name), dir.join(name)).unwrap();
        }
        Scratch(dir)
    }

    /// Runs `tea` in the directory with the mock as its endpoint (granted: `--allow-net
    /// 127.0.0.1`) and `env` set.
    fn tea(&self, mock: &Mock, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut command = Command::new(env!("CARGO_BIN_EXE_tea"));
        command
            .args(args)
            .args(["--allow-net", "127.0.0.1"])
            .current_dir(&self.0)
            .env("OPENAI_BASE_URL", mock.v1())
            .env_remove("OPENAI_API_KEY")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null());
        for (k, v) in env {
            command.env(k, v);
        }
        command.output().unwrap()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json_out(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", stdout(out)))
}

/// Neither output stream holds the key.
fn no_key(out: &Output) {
    assert!(!stdout(out).contains(KEY), "stdout holds the key: {}", stdout(out));
    assert!(!stderr(out).contains(KEY), "stderr holds the key: {}", stderr(out));
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn summarize_reads_asks_the_model_pauses_and_writes_once_approved() {
    let mock = Mock::start();
    let scratch = Scratch::new("summarize");
    std::fs::write(scratch.0.join("notes.txt"), "Tea is an agent runtime.\nIt pauses for people.\n").unwrap();
    let secrets = json!({ "llm_api_key": KEY }).to_string();
    let run = scratch.tea(
        &mock,
        &[
            "run",
            "summarize.yaml",
            "--input",
            r#"{"path": "notes.txt", "model": "echo:0:summarize"}"#,
            "--secrets",
            &secrets,
            "--store",
            "dir:ckpts",
        ],
        &[],
    );
    assert_eq!(run.status.code(), Some(PAUSED), "{}", stderr(&run));
    no_key(&run);
    let pause = json_out(&run);
    let question = pause["interrupts"][0]["value"].as_str().unwrap();
    assert!(question.starts_with("Write this summary to notes.txt.summary.md? (true/false)"), "{question}");
    assert!(question.contains("echo: Summarize this document:\n\nTea is an agent runtime."), "{question}");
    let hit = &mock.hits_of("echo:0:summarize")[0];
    assert_eq!(hit.authorization.as_deref(), Some(format!("Bearer {KEY}").as_str()));
    assert_eq!(hit.body["messages"][0]["content"], "You summarize documents in at most 80 words, in plain prose.");
    assert_eq!(hit.body["temperature"], json!(0.2));

    // The checkpoints the pause left hold the summary, never the key.
    let written = files(&scratch.0.join("ckpts"));
    assert!(!written.is_empty());
    for path in &written {
        let bytes = std::fs::read(path).unwrap();
        assert!(!bytes.windows(KEY.len()).any(|w| w == KEY.as_bytes()), "{} holds the key", path.display());
    }

    // Another process approves; the summary is written.
    let token = pause["token"].as_str().unwrap();
    let resume = scratch.tea(
        &mock,
        &["resume", "summarize.yaml", "--token", token, "--answer", "true", "--store", "dir:ckpts"],
        &[],
    );
    assert_eq!(resume.status.code(), Some(0), "{}", stderr(&resume));
    let done = json_out(&resume);
    assert_eq!(done["approved"], true);
    assert!(done["tokens"].as_u64().is_some_and(|n| n > 10), "usage.total_tokens: {}", done["tokens"]);
    let summary = std::fs::read_to_string(scratch.0.join("notes.txt.summary.md")).unwrap();
    assert!(summary.starts_with("echo: Summarize this document:"), "{summary}");
    assert_eq!(mock.hits_of("echo:0:summarize").len(), 1, "resuming does not call the model again");
}

#[test]
fn triage_sends_three_calls_at_once_and_picks_one() {
    let mock = Mock::start();
    let scratch = Scratch::new("triage");
    let run = scratch.tea(
        &mock,
        &[
            "run",
            "triage.yaml",
            "--input",
            r#"{"ticket": "Export does nothing", "model": "slow:400:triage"}"#,
            "--secrets-env",
            "TEA_TEST_SECRET_",
        ],
        &[("TEA_TEST_SECRET_LLM_API_KEY", KEY)],
    );
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    no_key(&run);
    let done = json_out(&run);
    let from: Vec<&str> = done["proposals"].as_array().unwrap().iter().map(|p| p["from"].as_str().unwrap()).collect();
    assert_eq!(from, ["support", "product", "qa"], "merged in declared order");
    assert_eq!(done["picked"], "qa", "the shortest answer");
    assert_eq!(done["answer"], "echo: Ticket for QA: Export does nothing");
    assert_eq!(done["label"], "echo");
    let hits = mock.hits_of("slow:400:triage");
    assert_eq!(hits.len(), 3);
    assert!(hits.iter().all(|h| h.authorization.as_deref() == Some(format!("Bearer {KEY}").as_str())));
    let last_start = hits.iter().map(|h| h.started).max().unwrap();
    let first_end = hits.iter().map(|h| h.ended).min().unwrap();
    assert!(last_start < first_end, "the three requests overlap in time at the server");
}

#[test]
fn a_failing_call_is_one_line_naming_the_endpoint_and_status_without_the_key() {
    let mock = Mock::start();
    let scratch = Scratch::new("deny");
    std::fs::write(scratch.0.join("secrets.json"), json!({ "llm_api_key": KEY }).to_string()).unwrap();
    let args = ["run", "triage.yaml", "--input", r#"{"ticket": "x", "model": "deny"}"#, "--secrets", "@secrets.json"];
    let run = scratch.tea(&mock, &args, &[("RUST_LOG", "tea=trace"), ("NO_COLOR", "1")]);
    assert_eq!(run.status.code(), Some(1));
    no_key(&run);
    let err = stderr(&run);
    assert!(err.contains(&format!("POST {}/chat/completions answered 401 Unauthorized", mock.v1())), "{err}");
    assert!(err.contains("Bearer ***"), "{err}");
    assert!(err.contains("tea: failed error=\"NodeFailed\""), "the trace is on stderr too: {err}");
    // `tea run` drives the async API's event stream (each step seen as it ends).
    assert!(err.contains("call=\"stream"), "tea run drives the async stream: {err}");
}

#[test]
fn bad_secrets_arguments_are_refused_without_showing_them() {
    let mock = Mock::start();
    let scratch = Scratch::new("badsecrets");
    let input = r#"{"ticket": "x"}"#;
    let run =
        scratch.tea(&mock, &["run", "triage.yaml", "--input", input, "--secrets", "{\"k\": sk-oops-unquoted}"], &[]);
    assert_eq!(run.status.code(), Some(1));
    assert!(stderr(&run).contains("--secrets is not JSON"), "{}", stderr(&run));
    assert!(!stderr(&run).contains("sk-oops"), "{}", stderr(&run));
    let run = scratch.tea(&mock, &["run", "triage.yaml", "--input", input, "--secrets", r#"{"k": 12345678}"#], &[]);
    assert_eq!(run.status.code(), Some(1));
    assert!(stderr(&run).contains("secret `k` must be a string"), "{}", stderr(&run));
    assert!(!stderr(&run).contains("12345678"));
    assert!(mock.hits().is_empty(), "nothing ran");
}
