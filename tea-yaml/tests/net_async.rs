//! The network actions under the engine's async driver (features `net` and `tokio`): network
//! nodes are awaited, not run on a thread each, so three calls of a fan-out are in flight
//! together even when tokio may start only one blocking thread; pauses, resumes and streams
//! work as with the blocking API. Against the mock of `tests/support` on 127.0.0.1.

mod support;

use futures_util::StreamExt;
use serde_json::json;
use std::time::{Duration, Instant};
use support::mock::Mock;
use tea::{Call, Event, Graph, MemoryStore};
use tea_yaml::{Agent, Engine};

const KEY: &str = "sk-async-0123456789";

fn fan_out(base: &str, model: &str) -> String {
    format!(
        r#"
settings:
  llm: {{ base_url: "{base}", model: "{model}", api_key: "{{{{ secrets.key }}}}" }}
state:
  answers: {{ type: list, reducer: append }}
nodes:
  - {{ name: plan, run: "return {{}}" }}
  - {{ name: a, uses: llm.call, with: {{ prompt: "A" }}, output: {{ answers: "{{{{ [result.content] }}}}" }} }}
  - {{ name: b, uses: llm.call, with: {{ prompt: "B" }}, output: {{ answers: "{{{{ [result.content] }}}}" }} }}
  - {{ name: c, uses: llm.call, with: {{ prompt: "C" }}, output: {{ answers: "{{{{ [result.content] }}}}" }} }}
  - {{ name: join, run: "return {{ count = #state.answers }}" }}
  - {{ name: approve, type: interrupt, message: "Keep {{{{ state.count }}}} answers?" }}
edges:
  - {{ from: plan, parallel: [a, b, c], fan_in: join }}
  - {{ from: a, to: join }}
  - {{ from: b, to: join }}
  - {{ from: c, to: join }}
  - {{ from: join, to: approve }}
  - {{ from: approve, to: __end__ }}
"#
    )
}

fn agent(mock: &Mock, model: &str) -> Agent {
    Engine::new()
        .allow_net("127.0.0.1")
        .secret("key", KEY)
        .secret_host("key", "127.0.0.1")
        .checkpointer(MemoryStore::new())
        .load_str(&fan_out(&mock.v1(), model))
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A runtime whose blocking pool has one thread: sync nodes (Lua, the blocking API's network
/// nodes) could only run one at a time on it.
fn one_blocking_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().max_blocking_threads(1).build().unwrap()
}

#[test]
fn three_calls_are_awaited_together_without_a_thread_each() {
    let mock = Mock::start();
    let agent = agent(&mock, "slow:400:async");
    let started = Instant::now();
    let (state, resume) = one_blocking_thread().block_on(agent.invoke_async(json!({}))).unwrap().interrupted().unwrap();
    let took = started.elapsed();
    assert_eq!(state["answers"], json!(["echo: A", "echo: B", "echo: C"]), "merged in declared order");
    assert_eq!(resume.interrupts()[0].value(), "Keep 3 answers?");
    let hits = mock.hits_of("slow:400:async");
    assert_eq!(hits.len(), 3);
    let last_start = hits.iter().map(|h| h.started).max().unwrap();
    let first_end = hits.iter().map(|h| h.ended).min().unwrap();
    assert!(last_start < first_end, "the three requests overlap in time at the server");
    assert!(took < Duration::from_millis(1100), "three 400 ms calls on one blocking thread took {took:?}");

    // The async driver's resume continues the thread; the blocking API reads the same store.
    let done = one_blocking_thread().block_on(agent.resume_async(resume.answer(true))).unwrap().done().unwrap();
    assert_eq!(done["user_input"], true);
    assert_eq!(mock.hits_of("slow:400:async").len(), 3, "resuming does not call the model again");
}

#[test]
fn the_blocking_api_runs_the_same_file_and_only_the_async_graph_has_async_nodes() {
    let mock = Mock::start();
    let agent = agent(&mock, "echo:0:both");
    let graph = agent.graph();
    let a = graph.node_named("a").unwrap();
    assert!(!graph.is_async(a), "the blocking API's graph waits for requests itself");
    let (state, _) = agent.invoke(json!({})).unwrap().interrupted().unwrap();
    assert_eq!(state["count"], 3);
}

#[test]
fn a_stream_reports_each_call_and_a_failure_names_the_endpoint_without_the_key() {
    let mock = Mock::start();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let agent = agent(&mock, "echo:0:stream");
    let events: Vec<Event<tea_yaml::State>> =
        runtime.block_on(async { agent.stream_async(json!({})).map(|e| e.unwrap()).collect::<Vec<_>>().await });
    let steps: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            Event::Step { node, .. } => Some(node.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(steps, ["plan", "a", "b", "c", "join"]);
    assert!(matches!(events.last(), Some(Event::Interrupted { .. })));
    assert!(events.iter().all(|e| !format!("{e:?}").contains(KEY)));

    let failing = agent_with_retry(&mock);
    let error = runtime.block_on(failing.invoke_async(json!({}))).unwrap_err();
    let shown = format!("{error:?}");
    assert!(shown.contains(&format!("POST {}/chat/completions answered 401 Unauthorized", mock.v1())), "{shown}");
    assert!(shown.contains("Bearer ***") && !shown.contains(KEY), "{shown}");
}

fn agent_with_retry(mock: &Mock) -> Agent {
    Engine::new()
        .allow_net("127.0.0.1")
        .secret("key", KEY)
        .secret_host("key", "127.0.0.1")
        .checkpointer(MemoryStore::new())
        .load_str(&fan_out(&mock.v1(), "deny"))
        .unwrap()
}

#[test]
fn dropping_the_future_cancels_the_run_and_the_thread_stays_recoverable() {
    let mock = Mock::start();
    let agent = agent(&mock, "slow:700:drop");
    let runtime = one_blocking_thread();
    let thread = tea::ThreadId::from("cancelled");
    let run = agent.run_async(agent.start(json!({})).unwrap().on(thread.clone()));
    let cut = runtime.block_on(async { tokio::time::timeout(Duration::from_millis(200), run).await.is_err() });
    assert!(cut, "the run was still waiting for the model");
    // The dropped run released its thread: recover continues from its last checkpoint (before
    // the fan-out) and the calls run again.
    let (state, _) = runtime.block_on(agent.run_async(Call::recover(&thread))).unwrap().interrupted().unwrap();
    assert_eq!(state["answers"], json!(["echo: A", "echo: B", "echo: C"]));
}
