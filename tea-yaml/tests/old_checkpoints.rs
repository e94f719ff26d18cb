//! Checkpoints written before delta records (every record a full snapshot, envelope version 1)
//! still read, resume, fork and continue: `fixtures/v1_checkpoints/store` is the directory
//! store the `tea` command of that version wrote for `fixtures/v1_checkpoints/agent.yaml`
//! (a fan-out, then a pause before `review`), kept as bytes.

use serde_json::json;
use std::path::{Path, PathBuf};
use tea::{Call, ThreadId};
use tea_yaml::{Engine, Update};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1_checkpoints")
}

/// A copy of the fixture (its agent and store) in a fresh directory, so the test may write.
fn copy_of_fixture(name: &str) -> PathBuf {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), &target).unwrap();
            }
        }
    }
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let dir = std::env::temp_dir().join(format!("tea-v1-{name}-{}-{nanos}", std::process::id()));
    copy(&fixture(), &dir);
    dir
}

const BEFORE_REVIEW: [&str; 4] = ["planned", "web:rust", "papers:rust", "merged"];

#[test]
fn the_fixture_is_full_records_of_format_version_1() {
    let thread_dir = fixture().join("store/v1_review/v1-thread");
    let mut records = 0;
    for entry in std::fs::read_dir(thread_dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "ckpt") {
            let bytes = std::fs::read(&path).unwrap();
            assert_eq!(&bytes[0..4], b"TEAc", "{}", path.display());
            assert_eq!(u16::from_le_bytes([bytes[4], bytes[5]]), 1, "{}", path.display());
            records += 1;
        }
    }
    assert!(records >= 7, "{records} records");
}

#[test]
fn old_checkpoints_read_resume_and_continue_as_new_ones() {
    let dir = copy_of_fixture("resume");
    let agent = Engine::new().load_file(dir.join("agent.yaml")).unwrap();
    let t = ThreadId::from("v1-thread");
    // Read as they were written.
    let history = agent.history(&t).unwrap();
    assert_eq!(history.len(), 7);
    assert_eq!(history.last().unwrap().checkpoint, 1);
    let head = agent.state(&t).unwrap().unwrap();
    assert_eq!(head.state["log"], json!(BEFORE_REVIEW));
    assert_eq!(head.state["hits"], json!(5));
    assert_eq!(head.next, ["review"]);
    assert_eq!(head.interrupts.len(), 1);
    // A fan-out's checkpoint of that version reads with its branches.
    assert!(history.iter().any(|s| s.branches.len() == 2), "a checkpoint inside the fan-out");
    // A fork of an old checkpoint, and the paused thread resumed (its token from a recover).
    let fork = agent.fork(&t, 7, "v1-fork").unwrap();
    assert_eq!(fork.state["log"], json!(BEFORE_REVIEW));
    let (_, resume) = agent.run(Call::recover(t.clone())).unwrap().interrupted().unwrap();
    // Not approved: round the loop once (new records after the old), then approve.
    let (state, resume) =
        agent.resume(resume.update(Update::from(json!({ "approved": false })))).unwrap().interrupted().unwrap();
    assert_eq!(state["log"], json!(["planned", "web:rust", "papers:rust", "merged", "reviewed", "merged"]));
    let done = agent.resume(resume.update(Update::from(json!({ "approved": true })))).unwrap().done().unwrap();
    assert_eq!(
        done["log"],
        json!(["planned", "web:rust", "papers:rust", "merged", "reviewed", "merged", "reviewed", "published"])
    );
    // Old and new records read together, newest first.
    let history = agent.history(&t).unwrap();
    assert!(history.len() > 7);
    assert_eq!(history[0].state, done);
    assert_eq!(history.last().unwrap().checkpoint, 1);
    assert_eq!(history.iter().find(|s| s.checkpoint == 7).unwrap().state["log"], json!(BEFORE_REVIEW));
    // The fork continues on its own.
    let (_, resume) = agent.run(Call::recover("v1-fork")).unwrap().interrupted().unwrap();
    let forked = agent.resume(resume.update(Update::from(json!({ "approved": true })))).unwrap().done().unwrap();
    assert_eq!(forked["log"], json!(["planned", "web:rust", "papers:rust", "merged", "reviewed", "published"]));
    let _ = std::fs::remove_dir_all(dir);
}
