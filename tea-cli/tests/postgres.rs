//! `--store postgres://…?schema=NAME`: a pause in one `tea` process resumed in another through
//! PostgreSQL (skipped when no server answers and `TEA_TEST_POSTGRES_URL` is not set).
#![cfg(feature = "postgres")]

#[path = "../../tests/postgres_support/mod.rs"]
mod postgres_support;

use postgres_support::TestSchema;
use serde_json::Value;
use std::process::Command;

fn tea(dir: &std::path::Path, args: &[&str]) -> (i32, Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tea")).args(args).current_dir(dir).output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    let json = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    (out.status.code().unwrap(), json, stderr)
}

#[test]
fn a_pause_kept_in_postgres_resumes_in_another_process() {
    let Some(schema) = TestSchema::new("cli_pause") else { return };
    let dir = std::env::temp_dir().join(format!("tea-cli-postgres-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("ask.yaml"),
        "name: ask\nnodes:\n  - { name: ask, type: interrupt, message: 'name?', resume_key: name }\n",
    )
    .unwrap();
    let store = format!("{}?schema={}", schema.url(), schema.name());

    let (status, pause, err) = tea(&dir, &["run", "ask.yaml", "--store", &store, "--thread", "pg-1"]);
    assert_eq!(status, 3, "{err}");
    let token = pause["token"].as_str().unwrap();
    let (status, threads, err) = tea(&dir, &["threads", "ask.yaml", "--store", &store]);
    assert_eq!((status, &threads[0]["thread"], &threads[0]["status"]), (0, &"pg-1".into(), &"paused".into()), "{err}");
    let (status, done, err) =
        tea(&dir, &["resume", "ask.yaml", "--store", &store, "--token", token, "--answer", "\"Ada\""]);
    assert_eq!(status, 0, "{err}");
    assert_eq!(done["name"], "Ada");
    assert!(!dir.join(".tea").exists(), "nothing on disk: the store is PostgreSQL");

    // A server that does not answer: one line naming the store, never the password.
    let (status, _, err) =
        tea(&dir, &["run", "ask.yaml", "--store", "postgres://someone:secret@127.0.0.1:1/db?schema=x"]);
    assert_eq!(status, 1);
    assert!(err.contains("cannot open the store `postgres://…@127.0.0.1:1/db (schema `x`)`"), "{err}");
    assert!(!err.contains("secret"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn prune_expires_finished_threads_on_postgres_and_keeps_paused_ones() {
    let Some(schema) = TestSchema::new("cli_prune") else { return };
    let dir = std::env::temp_dir().join(format!("tea-cli-postgres-prune-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("ask.yaml"),
        "name: ask\nnodes:\n  - { name: ask, type: interrupt, message: 'name?', resume_key: name }\n",
    )
    .unwrap();
    let store = format!("{}?schema={}", schema.url(), schema.name());
    let (status, _, err) = tea(&dir, &["run", "ask.yaml", "--store", &store, "--thread", "waits"]);
    assert_eq!(status, 3, "{err}");
    let (status, _, err) = tea(&dir, &["run", "ask.yaml", "--store", &store, "--thread", "answered"]);
    assert_eq!(status, 3, "{err}");
    let (status, _, err) =
        tea(&dir, &["resume", "ask.yaml", "--store", &store, "--thread", "answered", "--answer", "Ada"]);
    assert_eq!(status, 0, "{err}");

    let (status, report, err) = tea(&dir, &["prune", "ask.yaml", "--store", &store, "--older-than", "0s"]);
    assert_eq!(status, 0, "{err}");
    assert_eq!(report["expired"][0]["thread"], "answered", "{report}");
    assert_eq!(report["kept_paused"][0]["thread"], "waits", "{report}");
    let (_, threads, _) = tea(&dir, &["threads", "ask.yaml", "--store", &store]);
    assert_eq!(threads.as_array().unwrap().len(), 1, "{threads}");
    let (status, report, err) =
        tea(&dir, &["prune", "ask.yaml", "--store", &store, "--older-than", "0s", "--include-paused"]);
    assert_eq!(status, 0, "{err}");
    assert_eq!(report["expired"][0]["status"], "paused", "{report}");
    std::fs::remove_dir_all(&dir).unwrap();
}
