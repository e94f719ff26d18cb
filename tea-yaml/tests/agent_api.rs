//! What an `Agent` tells about itself and its threads: the questions a front end (the `tea`
//! command line) asks before choosing a store, answering a pause, or listing threads.

use serde_json::json;
use tea::{Call, Error, Event, MemoryStore, ThreadId};
use tea_yaml::Engine;

const ASKS: &str = r#"
name: asks
nodes:
  - name: greet
    run: return { greeting = "hello" }
  - name: ask
    type: interrupt
    message: "name?"
    resume_key: name
"#;

#[test]
fn an_agent_says_whether_it_can_pause_and_whether_its_file_names_a_store() {
    let engine = Engine::new().checkpointer(MemoryStore::new());
    let asks = engine.load_str(ASKS).unwrap();
    assert!(asks.can_pause());
    assert!(!asks.names_store(), "the engine's store is not the file's");
    assert!(!asks.with_checkpointer(MemoryStore::new()).names_store());

    let breakpoint = engine
        .load_str("config: { checkpointer: memory, interrupt_after: [a] }\nnodes:\n  - { name: a, run: 'return {}' }\n")
        .unwrap();
    assert!(breakpoint.can_pause());
    assert!(breakpoint.names_store());
    assert!(breakpoint.with_checkpointer(MemoryStore::new()).names_store(), "still what the file says");

    let straight =
        engine.load_str("nodes:\n  - { name: a, run: 'return {}' }\n  - { name: b, run: 'return {}' }\n").unwrap();
    assert!(!straight.can_pause());
    assert!(!straight.names_store());
    assert_eq!(straight.nodes(), ["a", "b"]);
}

#[test]
fn resume_key_names_the_key_an_interrupt_node_answers() {
    let agent = Engine::new().checkpointer(MemoryStore::new()).load_str(ASKS).unwrap();
    assert_eq!(agent.resume_key("ask"), Some("name"));
    assert_eq!(agent.resume_key("greet"), None, "not an interrupt node");
    assert_eq!(agent.resume_key("nope"), None, "no such node");
}

#[test]
fn threads_delete_and_prune_reach_the_store() {
    let agent = Engine::new().checkpointer(MemoryStore::new()).load_str(ASKS).unwrap();
    agent.start(json!({})).and_then(|call| agent.run(call.on("a"))).unwrap();
    agent.start(json!({})).and_then(|call| agent.run(call.on("b"))).unwrap();
    let mut threads = agent.threads().unwrap();
    threads.sort_by(|x, y| x.as_str().cmp(y.as_str()));
    assert_eq!(threads, [ThreadId::from("a"), ThreadId::from("b")]);

    let a = ThreadId::from("a");
    let before = agent.history(&a).unwrap().len();
    assert!(before > 1);
    assert_eq!(agent.prune(&a, 1).unwrap(), before - 1);
    assert_eq!(agent.history(&a).unwrap().len(), 1);
    assert!(agent.state(&a).unwrap().is_some_and(|s| !s.interrupts.is_empty()), "the pause stays");

    assert!(agent.delete(&a).unwrap());
    assert!(!agent.delete(&a).unwrap(), "gone already");
    assert_eq!(agent.threads().unwrap(), [ThreadId::from("b")]);

    let free = Engine::new().load_str("nodes:\n  - { name: a, run: 'return {}' }\n").unwrap();
    assert!(free.threads().unwrap().is_empty());
    assert!(!free.delete(&a).unwrap());
}

#[test]
fn an_agent_sweeps_under_the_engines_retention_and_keeps_paused_threads() {
    use std::time::Duration;
    use tea::{KeptBecause, Retention};
    // Finished threads expire at once; paused ones are kept (and reported) unless asked.
    let retention = Retention::new().keep_last(1).expire_finished_after(Duration::ZERO);
    let agent = Engine::new().checkpointer(MemoryStore::new()).retention(retention).load_str(ASKS).unwrap();
    assert_eq!(agent.retention(), retention);
    let paused = agent.start(json!({})).and_then(|call| agent.run(call.on("waits"))).unwrap();
    let (_, token) = paused.interrupted().unwrap();
    let finish = |thread: &str| {
        let outcome = agent.start(json!({})).and_then(|call| agent.run(call.on(thread))).unwrap();
        let (_, token) = outcome.interrupted().unwrap();
        assert!(agent.run(Call::resume(token.answer("Ada"))).unwrap().is_done());
    };
    finish("answered");
    agent.set_retention(&ThreadId::from("keeper"), Some(Retention::new().never_expire_finished())).unwrap();
    finish("keeper");

    let report = agent.sweep().unwrap();
    let expired: Vec<&str> = report.expired.iter().map(|e| e.thread.as_str()).collect();
    assert_eq!(expired, ["answered"], "{report:?}");
    assert_eq!(report.kept_paused.len(), 1, "{report:?}");
    assert_eq!(report.kept_paused[0].because, KeptBecause::PausedNotExpired);
    assert!(report.pruned > 0, "keep_last 1 trims the kept threads: {report:?}");
    assert_eq!(agent.threads().unwrap(), [ThreadId::from("keeper"), ThreadId::from("waits")]);
    assert!(agent.run(Call::resume(token.answer("Cy"))).unwrap().is_done(), "the paused thread still resumes");

    // Asked, paused threads expire too; an agent without a store has nothing to sweep.
    let both = agent.with_retention(retention.expire_paused_after(Duration::ZERO));
    both.start(json!({})).and_then(|call| both.run(call.on("later"))).unwrap();
    let report = both.sweep().unwrap();
    assert!(report.expired.iter().any(|e| e.thread.as_str() == "later" && e.rest == tea::Rest::Paused), "{report:?}");
    let free = Engine::new().load_str("nodes:\n  - { name: a, run: 'return {}' }\n").unwrap();
    assert_eq!(free.sweep().unwrap().threads, 0);
    assert!(free.sweep_every(Duration::from_secs(1), |_| {}).is_none());
    let refused = free.set_retention(&ThreadId::from("x"), None).unwrap_err();
    assert!(tea::error_chain(&refused).contains("no checkpointer"), "{refused:?}");
}

#[test]
fn a_stream_runs_on_the_thread_its_call_names() {
    let agent = Engine::new().checkpointer(MemoryStore::new()).load_str(ASKS).unwrap();
    let events: Vec<_> =
        agent.run_stream(agent.start(json!({})).unwrap().on("named")).collect::<Result<_, _>>().unwrap();
    let last = events.last().unwrap();
    let tea::Event::Interrupted { resume, .. } = last else { panic!("{last:?}") };
    assert_eq!(resume.thread().as_str(), "named");
    assert!(agent.state(&ThreadId::from("named")).unwrap().is_some());
    let again: Vec<_> = agent.run_stream(agent.start(json!({})).unwrap().on("named")).collect();
    assert!(again[0].as_ref().unwrap_err().to_string().contains("already exists"));
}

#[test]
fn load_file_on_runs_on_the_given_store_and_leaves_the_file_s_alone() {
    let dir = std::env::temp_dir().join(format!("tea-yaml-agent-api-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("asks.yaml");
    std::fs::write(&file, format!("config: {{ checkpointer: {{ sled: ./file-store }} }}\n{ASKS}")).unwrap();

    let store = tea::DirStore::open(dir.join("given")).unwrap();
    let agent = Engine::new().load_file_on(&file, store).unwrap();
    assert!(agent.names_store());
    assert!(!dir.join("file-store").exists(), "the file's sled store is not opened");
    let (_, resume) = agent.invoke(json!({})).unwrap().interrupted().unwrap();
    let pause_file = agent.checkpoint_path(&resume).expect("a DirStore names each pause's file");
    assert!(pause_file.starts_with(dir.join("given")), "{}", pause_file.display());
    let done = agent
        .checkpoint_call(&pause_file, Some(json!({ "name": "Ada" })))
        .and_then(|call| agent.run(call))
        .unwrap()
        .done()
        .unwrap();
    assert_eq!(done["name"], "Ada");

    assert!(Engine::new().load_file_on(dir.join("missing.yaml"), MemoryStore::new()).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn continues_from_names_the_file_s_config_checkpoint() {
    let engine = Engine::new().checkpointer(MemoryStore::new());
    assert_eq!(engine.load_str(ASKS).unwrap().continues_from(), None);
    // A string has no folder: reading one takes a grant.
    assert!(engine
        .load_str("config: { checkpoint: ./saved/job.ckpt }\nnodes:\n  - { name: a, run: 'return {}' }\n")
        .is_err());
    let agent = engine
        .clone()
        .allow_read(".")
        .load_str("config: { checkpoint: ./saved/job.ckpt }\nnodes:\n  - { name: a, run: 'return {}' }\n")
        .unwrap();
    assert!(agent.continues_from().is_some_and(|p| p.ends_with("saved/job.ckpt")), "{:?}", agent.continues_from());
}

const GREETS: &str =
    "nodes:\n  - { name: a, run: 'return { who = context.user }' }\n  - { name: b, run: 'return { seen = true }' }\n";

/// One call shape on an agent with a store and on one without: `start` checks the JSON input,
/// a call's options (context, recursion limit) reach the run, and an agent that keeps no
/// threads refuses to continue one.
#[test]
fn a_call_carries_its_input_thread_and_options_with_or_without_a_store() {
    let stored = Engine::new().checkpointer(MemoryStore::new()).load_str(GREETS).unwrap();
    let free = Engine::new().load_str(GREETS).unwrap();
    for agent in [&stored, &free] {
        let call = agent.start(json!({})).unwrap().on("t-1").context(json!({ "user": "ada" }));
        let done = agent.run(call).unwrap().done().unwrap();
        assert_eq!((&done["who"], &done["seen"]), (&json!("ada"), &json!(true)));
        let events: Vec<Event<_>> = agent
            .run_stream(agent.start(json!({})).unwrap().context(json!({ "user": "bo" })))
            .collect::<Result<_, _>>()
            .unwrap();
        let Some(Event::Done(state)) = events.last() else { panic!("the stream ended with {events:?}") };
        assert_eq!(state["who"], "bo");
        let limited = agent.run(agent.start(json!({})).unwrap().recursion_limit(1));
        assert!(matches!(limited, Err(Error::RecursionLimit { limit: 1 })), "{limited:?}");
        let bad = agent.start(json!(3));
        assert!(matches!(bad, Err(Error::NodeFailed { ref node, .. }) if node.as_str() == "__start__"), "{bad:?}");
    }
    // The stored agent kept its thread; the one without a store kept none, and refuses a recover.
    assert_eq!(stored.run(Call::recover("t-1")).unwrap().done().unwrap()["who"], "ada");
    assert!(free.threads().unwrap().is_empty());
    let refused = free.run(Call::recover("t-1"));
    assert!(matches!(&refused, Err(Error::Store { .. })), "{refused:?}");
    assert!(refused.unwrap_err().to_string().contains("has no checkpointer"));
}
