//! LangGraph's JS SDK against `tea serve`, unchanged: `tea-serve/tests/sdk/langgraph_sdk_check.mjs`
//! makes every SDK call tea serves and checks each result, against `tea serve` with two agents
//! and a token file (the SDK sends its key as `x-api-key`) — the Python SDK's check
//! (`langgraph_sdk.rs`) in the SDK people build web UIs on.
//!
//! The script runs under Node beside the modules `npm ci` installed from
//! `tea-serve/tests/sdk/package.json` and its lock file (`@langchain/langgraph-sdk`, pinned), in
//! the folder named by `TEA_TEST_LANGGRAPH_JS_DIR` (`.ci/run` makes it:
//! `cp tea-serve/tests/sdk/package*.json DIR && cd DIR && npm ci`). Without it, or without
//! `node`, the test says that it skipped.

mod serve_support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Instant;

const TOKEN: &str = "js-sdk-check-token-0123456789";

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

/// The folder with the SDK's modules installed, or why the test cannot run.
fn modules() -> Result<PathBuf, String> {
    let how = "cp tea-serve/tests/sdk/package*.json DIR && (cd DIR && npm ci), then TEA_TEST_LANGGRAPH_JS_DIR=DIR";
    let Some(dir) = std::env::var_os("TEA_TEST_LANGGRAPH_JS_DIR") else {
        return Err(format!(
            "LangGraph's JS SDK check needs TEA_TEST_LANGGRAPH_JS_DIR, a folder with the SDK installed ({how})"
        ));
    };
    let dir = PathBuf::from(dir);
    if !dir.join("node_modules/@langchain/langgraph-sdk/package.json").is_file() {
        return Err(format!("no @langchain/langgraph-sdk in {}/node_modules ({how})", dir.display()));
    }
    if Command::new("node").arg("--version").output().map_or(true, |o| !o.status.success()) {
        return Err("LangGraph's JS SDK check needs Node (`node`) on PATH".to_owned());
    }
    Ok(dir)
}

#[test]
fn langgraph_js_sdk_calls_work_unchanged() {
    let installed = match modules() {
        Ok(dir) => dir,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    // The script from the source tree, beside the installed modules (Node resolves an ES
    // module's imports from the script's own folder).
    let dir = std::env::temp_dir().join(format!("tea-cli-langgraph-js-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(root().join("tea-serve/tests/sdk/langgraph_sdk_check.mjs"), dir.join("check.mjs")).unwrap();
    link(&installed.join("node_modules"), &dir.join("node_modules"));
    let (server, address) = start(&dir);
    let started = Instant::now();
    let output = Command::new("node")
        .arg(dir.join("check.mjs"))
        .env("TEA_URL", format!("http://{address}"))
        .env("TEA_KEY", TOKEN)
        .output()
        .unwrap();
    let took = started.elapsed();
    stop(server);
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the JS SDK check failed:\n{stdout}\n{stderr}");
    // Every call of the script was made and checked.
    assert!(stdout.lines().last().is_some_and(|l| l.ends_with("checks passed")), "{stdout}");
    println!("{stdout}(in {:.1} s)", took.as_secs_f64());
}

#[cfg(unix)]
fn link(target: &Path, link: &Path) {
    std::os::unix::fs::symlink(target, link).unwrap();
}

#[cfg(windows)]
fn link(target: &Path, link: &Path) {
    std::os::windows::fs::symlink_dir(target, link).unwrap();
}
