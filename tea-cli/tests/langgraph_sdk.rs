//! LangGraph's Python SDK against `tea serve`, unchanged: `tea-serve/tests/sdk/langgraph_sdk_check.py`
//! makes every SDK call tea serves and checks each result, against `tea serve` with two agents
//! and a token file (the SDK sends its key as `x-api-key`).
//!
//! The script runs with the Python named by `TEA_TEST_LANGGRAPH_SDK_PYTHON`, one with the pinned
//! `langgraph-sdk` installed (`.ci/run` makes it:
//! `python3 -m venv V && V/bin/pip install langgraph-sdk==0.4.14`). Without it the test says
//! that it skipped.

mod serve_support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

const TOKEN: &str = "sdk-check-token-0123456789";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `tea serve` of the SDK's test agents in `dir`, on a free loopback port; it and its address.
fn start(dir: &Path) -> (Child, String) {
    serve_support::sdk_server(dir, TOKEN)
}

fn stop(child: Child) {
    serve_support::stop(child);
}

#[test]
fn langgraph_python_sdk_calls_work_unchanged() {
    let Some(python) = std::env::var_os("TEA_TEST_LANGGRAPH_SDK_PYTHON") else {
        eprintln!(
            "skipped: LangGraph's Python SDK check needs TEA_TEST_LANGGRAPH_SDK_PYTHON, a Python with \
             langgraph-sdk installed (python3 -m venv V && V/bin/pip install langgraph-sdk==0.4.14)"
        );
        return;
    };
    let dir = std::env::temp_dir().join(format!("tea-cli-langgraph-sdk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (server, address) = start(&dir);
    let output = Command::new(python)
        .arg(root().join("tea-serve/tests/sdk/langgraph_sdk_check.py"))
        .env("TEA_URL", format!("http://{address}"))
        .env("TEA_KEY", TOKEN)
        .output()
        .unwrap();
    stop(server);
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the SDK check failed:\n{stdout}\n{stderr}");
    // Every call of the script was made and checked.
    assert!(stdout.lines().last().is_some_and(|l| l.ends_with("checks passed")), "{stdout}");
    println!("{stdout}");
}
