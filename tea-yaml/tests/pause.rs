//! Pauses: breakpoints from `config` and on nodes, YamlGraph's `type: interrupt` node, resumes
//! with answers and state updates, single-use tokens, timeouts, checkpoint files.

use serde_json::{json, Value};
use tea::{Call, Error, Event, MemoryStore, Resume};
use tea_yaml::{Engine, State, Update};

const REVIEW: &str = r#"
name: review
state:
  log: { type: list, reducer: append }
  approved: bool
config:
  checkpointer: memory
  interrupt_before: [review]
nodes:
  - name: draft
    run: return { draft = "v" .. ((state.revisions or 0) + 1), log = { "drafted" } }
  - name: review
    run: return { log = { "reviewed" } }
    goto:
      - { if: approved, to: publish }
      - { to: revise }
  - name: revise
    run: return { revisions = (state.revisions or 0) + 1, log = { "revised" } }
    goto: draft
  - name: publish
    run: return { log = { "published " .. state.draft } }
"#;

#[test]
fn interrupt_before_stops_and_a_resume_update_steers_the_route() {
    let agent = Engine::new().load_str(REVIEW).unwrap();
    let (state, resume) = agent.invoke(json!({})).unwrap().interrupted().unwrap();
    assert_eq!(state["log"], json!(["drafted"]));
    assert_eq!(resume.node().as_str(), "review");
    // Not approved: back to revise and draft, and a new pause before review.
    let (state, resume) =
        agent.resume(resume.update(Update::from(json!({ "approved": false })))).unwrap().interrupted().unwrap();
    assert_eq!(state["log"], json!(["drafted", "reviewed", "revised", "drafted"]));
    // The token travels as a string.
    let token = resume.to_string();
    let resume: Resume<State> = token.parse().unwrap();
    let done = agent.resume(resume.clone().update(Update::from(json!({ "approved": true })))).unwrap().done().unwrap();
    assert_eq!(done["log"].as_array().unwrap().last().unwrap(), "published v2");
    // Single use.
    assert!(matches!(agent.resume(resume), Err(Error::StaleResume { .. })));
}

#[test]
fn a_resume_update_of_the_wrong_type_is_a_bad_resume_value_and_the_token_stays_good() {
    let agent = Engine::new().load_str(REVIEW).unwrap();
    let (_, resume) = agent.invoke(json!({})).unwrap().interrupted().unwrap();
    let err = agent.resume(resume.clone().update(Update::from(json!({ "approved": "yes" })))).unwrap_err();
    assert!(matches!(&err, Error::BadResumeValue { reason, .. } if reason.contains("`approved`")), "{err:?}");
    let err = agent.resume(resume.clone().update(Update::from(json!(["not", "an", "object"])))).unwrap_err();
    assert!(matches!(&err, Error::BadResumeValue { reason, .. } if reason.contains("JSON object")), "{err:?}");
    assert!(agent.resume(resume.update(Update::from(json!({ "approved": true })))).unwrap().is_done());
}

#[test]
fn interrupt_after_pauses_after_the_node_and_routes_at_resume_time() {
    let agent = Engine::new()
        .load_str(
            r#"
config: { checkpointer: memory }
nodes:
  - name: score
    interrupt: after
    run: return { score = 3 }
    goto:
      - { if: "state.score > 5", to: high }
      - { to: low }
  - name: high
    run: return { band = "high" }
    goto: __end__
  - name: low
    run: return { band = "low" }
    goto: __end__
"#,
        )
        .unwrap();
    let (state, resume) = agent.invoke(json!({})).unwrap().interrupted().unwrap();
    assert_eq!(state["score"], 3);
    let done = agent.resume(resume.update(Update::from(json!({ "score": 9 })))).unwrap().done().unwrap();
    assert_eq!(done["band"], "high");
}

/// YamlGraph's interrupt node: `message` rendered once and stored in `state_key`, the answer
/// written to `resume_key`.
#[test]
fn interrupt_nodes_ask_store_their_question_and_take_the_answer() {
    let agent = Engine::new()
        .load_str(
            r#"
name: interview
config: { checkpointer: memory }
nodes:
  - name: ask_name
    type: interrupt
    message: "What is your name?"
    resume_key: name
  - name: ask_age
    type: interrupt
    message: "How old are you, {{ state.name }}?"
    state_key: question
    resume_key: age
  - name: greet
    run: return { greeting = "Hello " .. state.name .. " (" .. state.age .. ")" }
"#,
        )
        .unwrap();
    let (state, resume) = agent.invoke(json!({})).unwrap().interrupted().unwrap();
    assert_eq!(resume.interrupts()[0].value(), "What is your name?");
    assert_eq!(state["interrupt_message"], "What is your name?");
    let (state, resume) = agent.resume(resume.answer("Ada")).unwrap().interrupted().unwrap();
    assert_eq!(state["name"], "Ada");
    assert_eq!(state["question"], "How old are you, Ada?");
    assert_eq!(resume.interrupts()[0].value(), "How old are you, Ada?");
    let done = agent.resume(resume.answer(36)).unwrap().done().unwrap();
    assert_eq!(done["greeting"], "Hello Ada (36)");
    assert_eq!(done["user_input"], Value::Null, "the answer went to resume_key only");
}

#[test]
fn an_interrupt_node_without_a_message_asks_with_its_state_key() {
    let agent = Engine::new()
        .load_str(
            r#"
config: { checkpointer: memory }
nodes:
  - name: confirm
    type: interrupt
    state_key: question
"#,
        )
        .unwrap();
    let (_, resume) = agent.invoke(json!({ "question": "Sure?" })).unwrap().interrupted().unwrap();
    assert_eq!(resume.interrupts()[0].value(), "Sure?");
    assert_eq!(agent.resume(resume.answer("yes")).unwrap().done().unwrap()["user_input"], "yes");
}

#[test]
fn an_answer_that_does_not_fit_the_declared_type_is_refused_before_anything_runs() {
    let agent = Engine::new()
        .load_str(
            r#"
state: { age: int }
config: { checkpointer: memory }
nodes:
  - name: ask
    type: interrupt
    message: "Age?"
    resume_key: age
"#,
        )
        .unwrap();
    let (_, resume) = agent.invoke(json!({})).unwrap().interrupted().unwrap();
    let err = agent.resume(resume.clone().answer("old")).unwrap_err();
    assert!(matches!(&err, Error::BadResumeValue { node, .. } if *node == "ask"), "{err:?}");
    assert_eq!(agent.resume(resume.answer(7)).unwrap().done().unwrap()["age"], 7);
}

#[test]
fn an_interrupt_timeout_expires_the_pause() {
    let agent = Engine::new()
        .load_str(
            r#"
config: { checkpointer: memory }
nodes:
  - name: ask
    type: interrupt
    message: "Quick?"
    timeout: 1
"#,
        )
        .unwrap();
    let (_, resume) = agent.invoke(json!({})).unwrap().interrupted().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2100));
    assert!(matches!(agent.resume(resume.answer("late")), Err(Error::Expired { .. })));
}

#[test]
fn an_engine_checkpointer_serves_files_that_name_none_and_state_shows_the_pause() {
    let store = MemoryStore::new();
    let engine = Engine::new().checkpointer(store.clone());
    let agent = engine.load_str("nodes:\n  - name: a\n    interrupt: before\n    run: return { a = 1 }\n").unwrap();
    let (_, resume) = agent.start(json!({})).and_then(|call| agent.run(call.on("t-1"))).unwrap().interrupted().unwrap();
    let snapshot = agent.state(resume.thread()).unwrap().unwrap();
    assert_eq!(snapshot.next, ["a"]);
    assert_eq!(snapshot.interrupts.len(), 1);
    let events: Vec<Event<State>> = agent.run_stream(Call::resume(resume)).collect::<Result<_, _>>().unwrap();
    assert!(matches!(events.last(), Some(Event::Done(state)) if state["a"] == 1));
}

#[test]
fn a_checkpoint_file_saved_by_a_node_starts_new_threads_at_that_node() {
    let dir = std::env::temp_dir().join(format!("tea-yaml-save-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let yaml = format!(
        r#"
state:
  log: {{ type: list, reducer: append }}
config: {{ checkpointer: memory }}
nodes:
  - name: prepare
    run: return {{ log = {{ "prepared" }} }}
  - name: save
    uses: checkpoint.save
    with: {{ path: "{dir}/saved/{{{{ state.name }}}}.ckpt" }}
  - name: after
    run: return {{ log = {{ "after " .. tostring(state.saved) .. " " .. (state.approved and "approved" or "-") }} }}
  - name: where
    run: {{ type: expression, value: "checkpoint.last" }}
  - name: load
    uses: checkpoint.load
    with: {{ path: "{{{{ checkpoint.last }}}}" }}
    output: {{ loaded_node: "{{{{ result.checkpoint_node }}}}", loaded_log: "{{{{ result.checkpoint_state.log }}}}" }}
"#,
        dir = dir.display()
    );
    let agent = Engine::new().allow_read(&dir).allow_write(&dir).load_str(&yaml).unwrap_or_else(|e| panic!("{e}"));
    let out = agent.invoke(json!({ "name": "ada" })).unwrap().done().unwrap();
    let path = dir.join("saved/ada.ckpt");
    assert_eq!(out["checkpoint_path"], path.display().to_string());
    assert_eq!(out["saved"], true);
    assert_eq!(out["result"], path.display().to_string(), "checkpoint.last");
    assert_eq!(out["log"], json!(["prepared", "after true -"]));
    assert_eq!(out["loaded_node"], "save");
    assert_eq!(out["loaded_log"], json!(["prepared"]));
    // Resuming from the file re-runs the saving node with the saved state, in a new thread,
    // as often as wanted.
    for _ in 0..2 {
        let again = agent
            .checkpoint_call(&path, Some(json!({ "approved": true })))
            .and_then(|call| agent.run(call))
            .unwrap()
            .done()
            .unwrap();
        assert_eq!(again["log"], json!(["prepared", "after true approved"]));
    }
    // Another agent's file is refused.
    let other = Engine::new()
        .load_str("name: other\nconfig: { checkpointer: memory }\nnodes:\n  - name: x\n    run: return {}\n")
        .unwrap();
    assert!(matches!(
        other.checkpoint_call(&path, None).and_then(|call| other.run(call)),
        Err(Error::GraphMismatch { .. })
    ));
    // So is one of another shape of this agent (same name, other nodes).
    let changed =
        Engine::new().load_str("config: { checkpointer: memory }\nnodes:\n  - name: x\n    run: return {}\n").unwrap();
    assert!(matches!(
        changed.checkpoint_call(&path, None).and_then(|call| changed.run(call)),
        Err(Error::SchemaMismatch { .. })
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

/// YE.1's contract, as The Edge Agent: `checkpoint.load` of a file another agent saved gives its
/// state and node; a file `checkpoint.save` wrote continues through `checkpoint_call` in an agent that
/// declares no checkpointer.
#[test]
fn another_agents_checkpoint_loads_and_a_saved_file_continues_without_a_checkpointer() {
    let dir = std::env::temp_dir().join(format!("tea-yaml-foreign-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let saver = Engine::new()
        .allow_write(&dir)
        .load_str(&format!(
            "name: saver\nnodes:\n  - name: work\n    run: return {{ count = (state.count or 0) + 1 }}\n  - name: save\n    uses: checkpoint.save\n    with: {{ path: \"{}/s.ckpt\" }}\n  - name: after\n    run: return {{ count = state.count + 10 }}\n",
            dir.display()
        ))
        .unwrap();
    assert!(!saver.can_pause());
    let out = saver.invoke(json!({ "count": 1 })).unwrap().done().unwrap();
    assert_eq!(out["count"], 12);
    let path = dir.join("s.ckpt");
    // Continued by the agent that saved it, which has no checkpointer: `save` runs again, then
    // `after`, from the saved state.
    let again = saver
        .checkpoint_call(&path, Some(json!({ "count": 5 })))
        .and_then(|call| saver.run(call))
        .unwrap()
        .done()
        .unwrap();
    assert_eq!(again["count"], 15);
    // Loaded by another agent: the saver's state and node (as `save` wrote it again just now).
    let loader = Engine::new()
        .allow_read(&dir)
        .load_str(&format!(
            "name: loader\nnodes:\n  - name: load\n    uses: checkpoint.load\n    with: {{ path: \"{}\" }}\n    output: loaded\n",
            path.display()
        ))
        .unwrap();
    let out = loader.invoke(json!({})).unwrap().done().unwrap();
    assert_eq!(out["loaded"]["checkpoint_node"], "save");
    assert_eq!(out["loaded"]["checkpoint_state"]["count"], 5);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn config_checkpoint_makes_invoke_continue_from_the_file() {
    let dir = std::env::temp_dir().join(format!("tea-yaml-config-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let body = r#"
nodes:
  - name: count
    run: return { count = (state.count or 0) + 1 }
  - name: save
    uses: checkpoint.save
    with: { path: "state.ckpt" }
    output: save_result
"#;
    let file = dir.join("agent.yaml");
    std::fs::write(&file, format!("name: counter\nconfig: {{ checkpointer: memory }}\n{body}")).unwrap();
    let first = Engine::new().load_file(&file).unwrap();
    assert_eq!(first.invoke(json!({ "count": 10 })).unwrap().done().unwrap()["count"], 11);
    assert!(dir.join("state.ckpt").exists(), "relative paths start at the file's directory");
    // The same agent with `config.checkpoint`: invoke resumes at `save` with count 11.
    std::fs::write(&file, format!("name: counter\nconfig: {{ checkpointer: memory, checkpoint: state.ckpt }}\n{body}"))
        .unwrap();
    let resumed = Engine::new().load_file(&file).unwrap();
    let out = resumed.invoke(json!({})).unwrap().done().unwrap();
    assert_eq!(out["count"], 11);
    assert_eq!(out["save_result"]["saved"], true);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The Edge Agent's `config.checkpoint_dir`: each pause leaves a file named after its node,
/// which resumes the thread once; a second use is stale, like a second use of the token.
#[test]
fn a_checkpoint_dir_names_each_pause_file_and_resume_from_continues_it_once() {
    let dir = std::env::temp_dir().join(format!("tea-yaml-dir-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("review.yaml");
    std::fs::write(
        &file,
        r#"
name: review
state:
  log: { type: list, reducer: append }
config:
  checkpoint_dir: ./checkpoints
  interrupt_before: [publish]
nodes:
  - name: draft
    run: return { log = { "drafted" } }
  - name: ask
    type: interrupt
    message: "Approve?"
    resume_key: approved
  - name: publish
    run: |
      return { log = { state.approved and "published" or "shelved" }, where = "{{ checkpoint.dir }}" }
  - name: where
    run: { type: expression, value: "checkpoint.dir", output_key: dir }
"#,
    )
    .unwrap();
    let agent = Engine::new().load_file(&file).unwrap_or_else(|e| panic!("{e}"));
    let (_, resume) = agent.invoke(json!({})).unwrap().interrupted().unwrap();
    let path = agent.checkpoint_path(&resume).expect("a pause file");
    let name = path.file_name().unwrap().to_str().unwrap().to_owned();
    assert!(name.starts_with("ask_"), "{name}");
    assert!(path.starts_with(dir.join("checkpoints")), "{}", path.display());
    // The interrupt node's answer comes through its resume_key in the update.
    let (state, resume) = agent
        .checkpoint_call(&path, Some(json!({ "approved": true })))
        .and_then(|call| agent.run(call))
        .unwrap()
        .interrupted()
        .unwrap();
    assert_eq!(state["approved"], true);
    assert!(matches!(
        agent.checkpoint_call(&path, Some(json!({ "approved": true }))).and_then(|call| agent.run(call)),
        Err(Error::StaleResume { .. })
    ));
    // The breakpoint before publish: its file, with a plain update.
    let before = agent.checkpoint_path(&resume).unwrap();
    assert!(before.file_name().unwrap().to_str().unwrap().starts_with("publish_"));
    let done = agent
        .checkpoint_call(&before, Some(json!({ "log": ["reviewed"] })))
        .and_then(|call| agent.run(call))
        .unwrap()
        .done()
        .unwrap();
    assert_eq!(done["log"], json!(["drafted", "reviewed", "published"]));
    assert_eq!(done["where"], "{{ checkpoint.dir }}", "Lua strings are not templates");
    assert_eq!(done["dir"], dir.join("checkpoints").display().to_string());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `config.checkpointer: { postgres: URL }`, when a server answers at `TEA_TEST_POSTGRES_URL`
/// (CI sets it when its PostgreSQL answers; elsewhere the test says it skipped).
#[cfg(feature = "postgres")]
#[test]
fn a_postgres_checkpointer_from_config_pauses_and_resumes() {
    let Ok(url) = std::env::var("TEA_TEST_POSTGRES_URL") else {
        eprintln!("skipped: TEA_TEST_POSTGRES_URL is not set");
        return;
    };
    let yaml = format!(
        "name: yaml-postgres-{}\nconfig:\n  checkpointer: {{ postgres: \"{url}\" }}\nnodes:\n  - name: ask\n    type: interrupt\n    message: \"ok?\"\n",
        std::process::id()
    );
    let agent = Engine::new().load_str(&yaml).unwrap_or_else(|e| panic!("{e}"));
    let (_, resume) = agent.invoke(json!({})).unwrap().interrupted().unwrap();
    let token: Resume<State> = resume.to_string().parse().unwrap();
    assert_eq!(agent.resume(token.answer("yes")).unwrap().done().unwrap()["user_input"], "yes");
}
