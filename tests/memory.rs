//! Long-term memory in nodes (`ctx.store()`): shared by threads, by an app's parallel branches
//! and its subgraph nodes' children, by apps on one store and across a restart; an app's memory
//! by default on its checkpointer, or given (`Builder::memory`), or none; expired by sweeps.

use serde::{Deserialize, Serialize};
use serde_json::json;
use std::time::{Duration, UNIX_EPOCH};
use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Chat {
    user: String,
    fact: String,
    recalled: String,
    #[reducer(append)]
    log: Vec<String>,
}

/// Remembers the user's fact when the input has one, and recalls what was remembered.
fn remember(state: &Chat, ctx: &Ctx<Chat>) -> Result<ChatUpdate, tea::BoxError> {
    let memory = ctx.store()?;
    let ns = ["users", state.user.as_str()];
    if !state.fact.is_empty() {
        memory.put(&ns, "fact", json!({ "text": state.fact, "thread": ctx.thread().map(ToString::to_string) }))?;
    }
    let recalled = memory.get(&ns, "fact")?.map(|item| item.value["text"].as_str().unwrap_or("").to_owned());
    Ok(Chat::update().recalled(recalled.unwrap_or_default()))
}

graph! {
    pub Bot for Chat {
        start -> remember;
        remember -> end;
    }
}

fn said(user: &str, fact: &str) -> Chat {
    Chat { user: user.into(), fact: fact.into(), ..Chat::default() }
}

#[test]
fn two_threads_share_the_apps_memory() {
    let app = Bot::builder().checkpointer(MemoryStore::new()).build();
    let first = app.run(Call::start(said("ada", "likes green tea")).on("monday")).unwrap().done().unwrap();
    assert_eq!(first.recalled, "likes green tea");
    // Another thread, nothing said: the fact is remembered.
    let second = app.run(Call::start(said("ada", "")).on("tuesday")).unwrap().done().unwrap();
    assert_eq!(second.recalled, "likes green tea");
    // Another user's namespace is another user's.
    let bob = app.run(Call::start(said("bob", "")).on("wednesday")).unwrap().done().unwrap();
    assert_eq!(bob.recalled, "");
    // The app's memory is the one its nodes used, on its checkpointer.
    let item = app.memory().unwrap().get(&["users", "ada"], "fact").unwrap().unwrap();
    assert_eq!(item.value["thread"], "monday");
}

#[test]
fn apps_on_one_store_share_memory_and_it_outlives_a_restart() {
    let dir = std::env::temp_dir().join(format!("tea-memory-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    {
        let app = Bot::builder().checkpointer(tea::SledStore::open(&dir).unwrap()).build();
        app.run(Call::start(said("ada", "has a cat")).on("t1")).unwrap();
    }
    // A new store handle and app, as after a restart of the process.
    let app = Bot::builder().checkpointer(tea::SledStore::open(&dir).unwrap()).build();
    assert_eq!(app.run(Call::start(said("ada", "")).on("t2")).unwrap().done().unwrap().recalled, "has a cat");
    drop(app);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_given_memory_comes_over_the_default_and_no_memory_is_a_typed_error() {
    // A store-less app with a memory of its own.
    let memory = tea::Memory::new(MemoryStore::new());
    let app = Bot::builder().memory(memory.clone()).build();
    assert_eq!(app.invoke(said("ada", "reads Rust")).unwrap().recalled, "reads Rust");
    assert_eq!(memory.get(&["users", "ada"], "fact").unwrap().unwrap().value["text"], "reads Rust");

    // With a checkpointer too, the given memory is used, not the checkpointer.
    let store = MemoryStore::new();
    let app = Bot::builder().checkpointer(store.clone()).memory(memory.clone()).build();
    app.run(Call::start(said("bob", "writes Go")).on("t")).unwrap();
    assert!(memory.get(&["users", "bob"], "fact").unwrap().is_some());
    assert!(tea::Memory::new(store).get(&["users", "bob"], "fact").unwrap().is_none());

    // Neither: the node fails with the engine's error, naming it.
    let app = Bot::builder().build();
    assert!(app.memory().is_none());
    match app.invoke(said("ada", "")) {
        Err(tea::Error::NodeFailed { node, source }) => {
            assert_eq!(node, "remember");
            match source.downcast_ref::<tea::Error>() {
                Some(tea::Error::NoMemory { node }) => assert_eq!(node, "remember"),
                other => panic!("expected NoMemory, got {other:?}"),
            }
        }
        other => panic!("expected NodeFailed, got {other:?}"),
    }

    // Outside a run, a detached `Ctx` is given one.
    let ctx = Ctx::detached("remember").with_store(memory.clone());
    let mut state = said("ada", "");
    state.apply(remember(&state, &ctx).unwrap());
    assert_eq!(state.recalled, "reads Rust");
}

// Parallel branches and a subgraph node's child share their run's memory.

fn left(_: &Chat, ctx: &Ctx<Chat>) -> Result<ChatUpdate, tea::BoxError> {
    ctx.store()?.put(&["branches"], "left", json!({ "from": "left" }))?;
    Ok(Chat::update().log(vec!["left".into()]))
}
fn right(_: &Chat, ctx: &Ctx<Chat>) -> Result<ChatUpdate, tea::BoxError> {
    ctx.store()?.put(&["branches"], "right", json!({ "from": "right" }))?;
    Ok(Chat::update().log(vec!["right".into()]))
}
fn split(_: &Chat) {}
fn join(_: &Chat, ctx: &Ctx<Chat>) -> Result<ChatUpdate, tea::BoxError> {
    let found = ctx.store()?.search(&tea::SearchQuery::under(&["branches"]))?;
    let mut keys: Vec<String> = found.into_iter().map(|item| item.key).collect();
    keys.sort();
    Ok(Chat::update().log(vec![format!("joined {}", keys.join("+"))]))
}

graph! {
    pub Child for Chat {
        start -> remember;
        remember -> end;
    }
}

graph! {
    pub Fan for Chat {
        start -> split;
        parallel split => [left, right] -> join;
        join -> child;
        child -> end;
        subgraph child = Child;
    }
}

#[test]
fn branches_and_subgraph_children_share_the_runs_memory() {
    let app = Fan::builder().checkpointer(MemoryStore::new()).build();
    app.memory().unwrap().put(&["users", "ada"], "fact", json!({ "text": "from the parent app" })).unwrap();
    let out = app.run(Call::start(said("ada", "")).on("fan")).unwrap().done().unwrap();
    assert!(out.log.contains(&"joined left+right".to_owned()), "{:?}", out.log);
    assert_eq!(out.recalled, "from the parent app", "the child read the parent's memory");

    // A store-less parent with a given memory hands it to its child too.
    let memory = tea::Memory::new(MemoryStore::new());
    memory.put(&["users", "bob"], "fact", json!({ "text": "given" })).unwrap();
    let out = Fan::builder().memory(memory).build().invoke(said("bob", "")).unwrap();
    assert_eq!(out.recalled, "given");
}

#[test]
fn sweeps_expire_the_apps_memory() {
    let clock = tea::Clock::manual(UNIX_EPOCH + Duration::from_secs(1_000_000));
    let app = Bot::builder().checkpointer(MemoryStore::new()).clock(clock.clone()).build();
    let memory = app.memory().unwrap().clone().default_ttl(Duration::from_secs(3_600));
    memory.put(&["session"], "draft", json!({ "text": "half written" })).unwrap();
    app.memory().unwrap().put(&["session"], "kept", json!({})).unwrap();
    assert_eq!(app.sweep().unwrap().memory_expired, 0);
    clock.advance(Duration::from_secs(3_601));
    assert_eq!(app.memory().unwrap().get(&["session"], "draft").unwrap(), None, "expired on read");
    assert_eq!(app.sweep().unwrap().memory_expired, 1);
    assert!(app.memory().unwrap().get(&["session"], "kept").unwrap().is_some());
}
