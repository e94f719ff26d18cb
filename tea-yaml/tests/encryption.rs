//! `Engine::encrypt_with` (feature `encryption`): the file's own store is sealed, its pause files
//! hold sealed records and still resume once, and an engine without the key reads nothing.

use serde_json::json;
use tea::{Error, KeyRing, SealFailure, ThreadId};
use tea_yaml::Engine;

const ASKS: &str = r#"
name: asks
config: { checkpoint_dir: ./threads }
nodes:
  - name: greet
    run: return { greeting = "hello from a sealed thread" }
  - name: ask
    type: interrupt
    message: "name?"
    resume_key: name
"#;

#[test]
fn a_sealed_engine_s_dir_store_holds_no_clear_state_and_its_pause_files_resume_once() {
    let dir = std::env::temp_dir().join(format!("tea-yaml-encryption-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("asks.yaml");
    std::fs::write(&file, ASKS).unwrap();

    let engine = Engine::new().encrypt_with(KeyRing::new(5, [0x42; 32]));
    let agent = engine.load_file(&file).unwrap();
    let (state, resume) =
        agent.start(json!({})).and_then(|call| agent.run(call.on("t-1"))).unwrap().interrupted().unwrap();
    assert_eq!(state["greeting"], "hello from a sealed thread");
    let pause_file = agent.checkpoint_path(&resume).expect("a DirStore names each pause's file");
    let bytes = std::fs::read(&pause_file).unwrap();
    assert!(bytes.starts_with(b"TEAs"), "the pause file is sealed");
    assert!(!bytes.windows(6).any(|w| w == b"sealed"), "the state shows in clear");

    // An engine without the keys, and one with another key, cannot read the thread.
    let thread = ThreadId::from("t-1");
    match Engine::new().load_file(&file).unwrap().state(&thread) {
        Err(Error::CorruptCheckpoint { thread: t, reason, .. }) => {
            assert_eq!(t, thread);
            assert!(reason.contains("sealed record"), "{reason}");
        }
        other => panic!("expected CorruptCheckpoint, got {other:?}"),
    }
    let other = Engine::new().encrypt_with(KeyRing::new(6, [0x43; 32])).load_file(&file).unwrap();
    match other.state(&thread) {
        Err(error @ Error::Unsealable { key: Some(5), reason: SealFailure::UnknownKey, .. }) => {
            assert!(error.to_string().contains("t-1"), "{error}")
        }
        other => panic!("expected UnknownKey, got {other:?}"),
    }

    // The pause file resumes its thread, once.
    let done = agent
        .checkpoint_call(&pause_file, Some(json!({ "name": "Ada" })))
        .and_then(|call| agent.run(call))
        .unwrap()
        .done()
        .unwrap();
    assert_eq!(done["name"], "Ada");
    match agent.checkpoint_call(&pause_file, None).and_then(|call| agent.run(call)) {
        Err(Error::StaleResume { thread: t }) => assert_eq!(t, thread),
        other => panic!("expected StaleResume, got {other:?}"),
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_engine_s_own_checkpointer_is_sealed_too() {
    let store = tea::MemoryStore::new();
    let engine = Engine::new().checkpointer(store.clone()).encrypt_with(KeyRing::new(1, [7; 32]));
    let text = ASKS.replace("config: { checkpoint_dir: ./threads }\n", "");
    let agent = engine.load_str(&text).unwrap();
    let (_, resume) = agent.start(json!({})).and_then(|call| agent.run(call.on("t-2"))).unwrap().interrupted().unwrap();
    let thread = ThreadId::from("t-2");
    let (_, raw) = tea::Checkpointer::head(&store, "asks", &thread).unwrap().unwrap();
    assert!(raw.starts_with(b"TEAs") && !raw.windows(6).any(|w| w == b"sealed"));
    assert_eq!(agent.resume(resume.answer(json!("Bo"))).unwrap().done().unwrap()["name"], "Bo");
}
