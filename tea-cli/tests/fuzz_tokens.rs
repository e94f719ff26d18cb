//! Property tests: tokens and checkpoint files as `tea` and the API see them — random strings and
//! bytes, and mutations (flipped, dropped, inserted, truncated) of real ones — never panic: each
//! parses, or is refused with a typed error. A mutation that still parses and resumes runs
//! nothing twice: the pause resumes at most once whatever is presented.
//!
//! Bounded for CI: a few hundred cases per property (`PROPTEST_CASES` raises it), and a few dozen
//! runs of the `tea` binary.

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use serde_json::json;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use tea_runtime::{DirStore, Error, MemoryStore, Outcome, Resume};
use tea_yaml::{Agent, Engine, State};

const ASK: &str = "name: ask\nnodes:\n  - { name: greet, run: 'return { greeting = \"hello\" }' }\n  - { name: ask_name, type: interrupt, message: 'name?', resume_key: name }\n  - { name: answer, run: 'return { reply = state.greeting .. \", \" .. state.name }' }\n";

/// A scratch directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tea-fuzz-{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The agent on a memory store, and the token of its pause.
fn paused() -> (Agent, Resume<State>) {
    let agent = Engine::new().checkpointer(MemoryStore::new()).load_str(ASK).unwrap();
    match agent.invoke(json!({})) {
        Ok(Outcome::Interrupted { resume, .. }) => (agent, resume),
        other => panic!("expected a pause, got {other:?}"),
    }
}

/// The bytes of a real pause's checkpoint file (a directory store's).
fn checkpoint_file() -> (Agent, Vec<u8>) {
    let dir = Scratch::new("ckpt");
    let agent = Engine::new()
        .checkpointer(MemoryStore::new())
        .load_str(ASK)
        .unwrap()
        .with_checkpointer(DirStore::open(&dir.0).unwrap());
    let Ok(Outcome::Interrupted { resume, .. }) = agent.invoke(json!({})) else { panic!("expected a pause") };
    let path = agent.checkpoint_path(&resume).expect("a directory store names the pause's file");
    (agent, std::fs::read(path).unwrap())
}

/// A mutation of a string or byte string.
#[derive(Clone, Debug)]
enum Mutation {
    Flip { at: usize, bit: u8 },
    Drop { at: usize },
    Insert { at: usize, byte: u8 },
    Truncate { at: usize },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        any::<usize>().prop_map(|at| Mutation::Drop { at }),
        (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Insert { at, byte }),
        any::<usize>().prop_map(|at| Mutation::Truncate { at }),
    ]
}

fn mutate(bytes: &mut Vec<u8>, mutation: &Mutation) {
    let len = bytes.len().max(1);
    match *mutation {
        Mutation::Flip { at, bit } if !bytes.is_empty() => bytes[at % len] ^= 1 << bit,
        Mutation::Drop { at } if !bytes.is_empty() => {
            bytes.remove(at % len);
        }
        Mutation::Insert { at, byte } => bytes.insert(at % (bytes.len() + 1), byte),
        Mutation::Truncate { at } => bytes.truncate(at % len),
        _ => {}
    }
}

/// Whether `error` is one a bad token or file may give (typed, naming what is wrong).
fn is_refusal(error: &Error) -> bool {
    matches!(
        error,
        Error::InvalidToken { .. }
            | Error::StaleResume { .. }
            | Error::GraphMismatch { .. }
            | Error::SchemaMismatch { .. }
            | Error::CheckpointNotFound { .. }
            | Error::CorruptCheckpoint { .. }
            | Error::BadResumeValue { .. }
            | Error::Expired { .. }
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_string_parses_or_is_an_invalid_token(text in ".{0,300}") {
        match text.parse::<Resume<State>>() {
            Ok(_) => {}
            Err(error) => prop_assert!(matches!(error, Error::InvalidToken { .. }), "{error:?}"),
        }
    }

    #[test]
    fn a_mutated_token_is_refused_or_resumes_once(mutations in proptest::collection::vec(mutation(), 1..4)) {
        let (agent, resume) = paused();
        let mut bytes = resume.to_string().into_bytes();
        for m in &mutations {
            mutate(&mut bytes, m);
        }
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let Ok(token) = text.parse::<Resume<State>>() else { return Ok(()) };
        let first = agent.resume(token.clone().answer("Ada"));
        match &first {
            Ok(_) => {
                // It resumed: the real token is now spent, and so is the mutant.
                let again = agent.resume(resume.answer("Bo"));
                prop_assert!(matches!(again, Err(Error::StaleResume { .. })), "{again:?}");
            }
            Err(error) => prop_assert!(is_refusal(error), "{error:?}"),
        }
    }

    #[test]
    fn random_bytes_are_not_a_checkpoint(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let (agent, _) = paused();
        let decoded = tea_runtime::decode_checkpoint(agent.graph(), &bytes, "random.ckpt");
        match decoded {
            Ok(_) => {}
            Err(error) => prop_assert!(is_refusal(&error), "{error:?}"),
        }
    }

    #[test]
    fn a_mutated_checkpoint_file_decodes_or_is_refused(mutations in proptest::collection::vec(mutation(), 1..4)) {
        let (agent, mut bytes) = checkpoint_file();
        for m in &mutations {
            mutate(&mut bytes, m);
        }
        match tea_runtime::decode_checkpoint(agent.graph(), &bytes, "mutated.ckpt") {
            Ok((node, _)) => prop_assert!(agent.nodes().contains(&node.as_str()), "{node}"),
            Err(error) => prop_assert!(is_refusal(&error), "{error:?}"),
        }
    }
}

/// The `tea` binary, given mutated tokens and checkpoint files: exit 0, 1 or 3 with one line on
/// stderr — never a panic (101) or a signal.
#[test]
fn the_cli_refuses_mutated_tokens_and_files_with_one_line() {
    let dir = Scratch::new("cli");
    std::fs::write(dir.0.join("ask.yaml"), ASK).unwrap();
    let tea = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_tea")).args(args).current_dir(&dir.0).env_remove("RUST_LOG").output().unwrap()
    };
    let paused = tea(&["run", "ask.yaml", "--store", "dir:st"]);
    assert_eq!(paused.status.code(), Some(3));
    let pause: serde_json::Value = serde_json::from_slice(&paused.stdout).unwrap();
    let token = pause["token"].as_str().unwrap().to_owned();
    let file = pause["checkpoint_path"].as_str().unwrap().to_owned();
    let original = std::fs::read(dir.0.join(&file)).unwrap();
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mutations = proptest::collection::vec(mutation(), 1..3);
    for case in 0..24 {
        let chosen = mutations.new_tree(&mut runner).unwrap().current();
        let (args, shown) = if case % 2 == 0 {
            let mut bytes = token.clone().into_bytes();
            chosen.iter().for_each(|m| mutate(&mut bytes, m));
            let text = String::from_utf8_lossy(&bytes).into_owned();
            (
                vec![
                    "resume".to_owned(),
                    "ask.yaml".into(),
                    "--store".into(),
                    "dir:st".into(),
                    "--token".into(),
                    text.clone(),
                    "--answer".into(),
                    "Ada".into(),
                ],
                text,
            )
        } else {
            let mut bytes = original.clone();
            chosen.iter().for_each(|m| mutate(&mut bytes, m));
            let path = dir.0.join(format!("mutant-{case}.ckpt"));
            std::fs::write(&path, &bytes).unwrap();
            let path = path.display().to_string();
            (
                vec![
                    "resume".to_owned(),
                    "ask.yaml".into(),
                    "--checkpoint".into(),
                    path.clone(),
                    "--answer".into(),
                    "\"Ada\"".into(),
                ],
                path,
            )
        };
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = tea(&args);
        let status = out.status.code();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(matches!(status, Some(0 | 1 | 3)), "{shown:?}: status {status:?}: {err}");
        if status == Some(1) {
            assert_eq!(err.trim_end().lines().count(), 1, "{shown:?}: {err}");
            assert!(!err.contains("panicked"), "{shown:?}: {err}");
        }
    }
}
