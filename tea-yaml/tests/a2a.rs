//! The Edge Agent's `a2a.*` actions between agents loaded in one process: `settings.a2a` names
//! each agent, messages go from one to the other, a delegation that times out runs its fallback
//! action, and the shared state is the namespace's.

use serde_json::json;
use tea_yaml::Engine;

fn load(text: &str) -> tea_yaml::Agent {
    Engine::new().load_str(text).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn two_agents_of_one_namespace_talk() {
    let sender = load(
        r#"
settings:
  a2a: { enabled: true, namespace: tests-talk, agent_id: sender }
nodes:
  - name: tell
    uses: a2a.send
    with: { to: listener, message: { type: greeting, payload: { text: "{{ state.text }}" } } }
"#,
    );
    let listener = load(
        r#"
settings:
  a2a: { namespace: tests-talk, agent_id: listener }
nodes:
  - name: listen
    uses: a2a.receive
    with: { from: [sender], type: greeting, timeout: 5s }
  - name: keep
    uses: a2a.state.set
    with: { key: last, value: "{{ state.a2a_messages[0].payload.text }}" }
  - name: read
    uses: a2a.state.get
    with: { key: last }
"#,
    );
    let listening = std::thread::spawn(move || listener.invoke(json!({})).unwrap().done().unwrap());
    sender.invoke(json!({ "text": "hello" })).unwrap().done().unwrap();
    let heard = listening.join().unwrap();
    let message = &heard["a2a_messages"][0];
    assert_eq!((message["from_agent"].clone(), message["payload"]["text"].clone()), (json!("sender"), json!("hello")));
    assert_eq!(heard["a2a_shared_state"], "hello", "{heard:?}");
}

#[test]
fn a_delegation_nobody_answers_runs_its_fallback_action() {
    let engine = Engine::new().action("local.search", |_, args| Ok(json!({ "found": args["query"].clone() })));
    let agent = engine
        .load_str(
            r#"
settings:
  a2a: { namespace: tests-delegate, agent_id: researcher }
nodes:
  - name: ask
    uses: a2a.delegate
    with:
      to: nobody-home
      task: { type: web_search, query: "{{ state.q }}" }
      timeout: 50ms
      on_timeout: fallback_local
      fallback:
        action: local.search
        with: { query: "{{ state.q }}" }
"#,
        )
        .unwrap();
    let out = agent.invoke(json!({ "q": "fusion" })).unwrap().done().unwrap();
    assert_eq!(out["a2a_delegation_result"], json!({ "found": "fusion" }));
    assert_eq!(
        (out["a2a_delegation_success"].clone(), out["a2a_delegation_fallback"].clone()),
        (json!(false), json!(true))
    );

    // By default a delegation that times out fails its node, naming the agent it waited for.
    let strict = load(
        "settings:\n  a2a: { namespace: tests-delegate }\nnodes:\n  - name: ask\n    uses: a2a.delegate\n    with: { to: nobody-home, task: { type: t }, timeout: 20ms }\n",
    );
    let failed = format!("{:?}", strict.invoke(json!({})));
    assert!(failed.contains("nobody-home"), "{failed}");
}

#[test]
fn their_arguments_and_fallbacks_are_checked_at_load() {
    let problems = |text: &str| match Engine::new().load_str(text) {
        Ok(_) => panic!("loaded"),
        Err(e) => e.problems().iter().map(|p| format!("{}: {}", p.line(), p.message())).collect::<Vec<_>>(),
    };
    let unknown = problems("nodes:\n  - name: s\n    uses: a2a.send\n    with: { too: x, message: {} }\n");
    assert!(unknown[0].contains("unknown argument `too` of `a2a.send` (node `s`); did you mean `to`?"), "{unknown:?}");
    let fallback = problems(
        "nodes:\n  - name: d\n    uses: a2a.delegate\n    with: { to: x, task: {}, on_timeout: fallback_local, fallback: { action: llm.cal } }\n",
    );
    assert!(
        fallback[0].contains("unknown action `llm.cal` (the `fallback` of `a2a.delegate` (node `d`))"),
        "{fallback:?}"
    );
    let settings = problems("settings:\n  a2a: { agent: x }\nnodes:\n  - name: r\n    uses: a2a.receive\n");
    assert!(settings[0].contains("unknown key `agent` in `settings.a2a`"), "{settings:?}");
}
