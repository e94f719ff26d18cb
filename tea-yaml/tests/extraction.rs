//! The Edge Agent's `validate.extraction` (schema, Prolog constraints, LLM probes, the failure
//! log) and `retry.loop` (validate, run the correction node, validate again).

use serde_json::{json, Value};
use tea_yaml::Engine;

#[cfg(feature = "net")]
mod support;

fn load(text: &str) -> tea_yaml::Agent {
    Engine::new().allow_net("127.0.0.1").trust_code(true).load_str(text).unwrap_or_else(|e| panic!("{e}"))
}

fn problems(text: &str) -> Vec<String> {
    match Engine::new().allow_net("127.0.0.1").trust_code(true).load_str(text) {
        Ok(_) => panic!("loaded:\n{text}"),
        Err(e) => e.problems().iter().map(|p| format!("{}: {}", p.line(), p.message())).collect(),
    }
}

/// An extraction that fails the schema until the correction node (reached only through
/// `retry.loop`) has run `fixes` times.
fn retrying(max_retries: u64, fixes: u64) -> String {
    format!(
        r#"
extraction_schema:
  entities:
    required_fields: [name, type]
  relationships:
    types: [knows, works_at]
    required_fields: [type, subject, object]
nodes:
  - name: extract
    run: |
      return {{
        entities = {{ {{ name = "Alice" }}, {{ name = "Bob" }} }},
        relationships = {{ {{ type = "friends", subject = "Alice", object = "Bob" }} }},
      }}
  - name: check
    uses: retry.loop
    with:
      validate: validate.extraction
      validate_args: {{}}
      correct: fix
      max_retries: {max_retries}
  - name: fix
    run: |
      local seen = state.seen or {{}}
      seen[#seen + 1] = state._retry_count .. ": " .. #state._retry_errors .. " errors"
      if #seen < {fixes} then return {{ seen = seen }} end
      return {{
        seen = seen,
        entities = {{ {{ name = "Alice", type = "Person" }}, {{ name = "Bob", type = "Person" }} }},
        relationships = {{ {{ type = "knows", subject = "Alice", object = "Bob" }} }},
      }}
  - name: done
    run: return {{ outcome = state.valid and "valid" or "exhausted" }}
edges:
  - {{ from: __start__, to: extract }}
  - {{ from: extract, to: check }}
  - {{ from: check, to: done }}
  - {{ from: done, to: __end__ }}
"#
    )
}

#[test]
fn a_retry_loop_corrects_until_the_extraction_validates() {
    let out = load(&retrying(3, 2)).invoke(json!({})).unwrap().done().unwrap();
    assert_eq!(out["valid"], true, "{out:?}");
    assert_eq!(out["outcome"], "valid");
    assert_eq!(out["_retry_count"], 2);
    assert_eq!(out["_retry_exhausted"], false);
    assert_eq!(out["_retry_errors"], json!([]));
    assert_eq!(out["errors"], json!([]));
    // The correction node saw the attempt and its errors: three, then one (the type).
    assert_eq!(out["seen"], json!(["0: 3 errors", "1: 3 errors"]));
    assert_eq!(out["relationships"][0]["type"], "knows");
    assert!(out["validated_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(out["_retry_result"]["valid"], true);
}

#[test]
fn an_exhausted_retry_loop_says_so_with_the_last_errors() {
    let out = load(&retrying(1, 5)).invoke(json!({})).unwrap().done().unwrap();
    assert_eq!(out["valid"], false);
    assert_eq!(out["outcome"], "exhausted");
    assert_eq!(out["_retry_count"], 1);
    assert_eq!(out["_retry_exhausted"], true);
    let errors = out["errors"].as_array().unwrap();
    let messages: Vec<&str> = errors.iter().map(|e| e["message"].as_str().unwrap()).collect();
    assert_eq!(
        messages,
        [
            "Entity missing required field 'type'",
            "Entity missing required field 'type'",
            "Invalid relationship type 'friends', expected one of ['knows', 'works_at']",
        ]
    );
    assert_eq!(errors[0]["path"], "entities[0].type");
    assert_eq!(errors[0]["entity"], json!({ "name": "Alice" }));
    assert_eq!(errors[2]["relationship"]["type"], "friends");
    assert_eq!(errors[2]["type"], "invalid_relationship_type");
    assert_eq!(out["_retry_errors"], out["errors"]);
    // No retries at all: validated once, never corrected.
    let once = load(&retrying(0, 1)).invoke(json!({})).unwrap().done().unwrap();
    assert_eq!((once["_retry_count"].clone(), once["_retry_exhausted"].clone()), (json!(0), json!(true)));
    assert_eq!(once["seen"], Value::Null);
}

#[test]
fn a_failing_correction_ends_the_loop_with_its_error() {
    let text = retrying(3, 2).replace("local seen = state.seen or {}", "error('no model today')");
    let out = load(&text).invoke(json!({})).unwrap().done().unwrap();
    assert_eq!(out["valid"], false);
    assert_eq!(out["_retry_exhausted"], false);
    let last = out["_retry_errors"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["type"], "correction_error");
    assert!(last["message"].as_str().unwrap().contains("Correction node 'fix' failed"), "{last}");
    assert!(last["message"].as_str().unwrap().contains("no model today"), "{last}");
}

#[test]
fn type_requirements_and_a_node_output_key() {
    let out = load(
        r#"
extraction_schema:
  relationships:
    types: [married]
    type_requirements:
      married: [start_date]
nodes:
  - name: check
    uses: validate.extraction
    with:
      relationships: "{{ state.rels }}"
    output: verdict
"#,
    )
    .invoke(json!({ "rels": [{ "type": "married", "subject": "A", "object": "B" }] }))
    .unwrap()
    .done()
    .unwrap();
    let v = &out["verdict"];
    assert_eq!(v["valid"], false);
    assert_eq!(v["errors"][0]["type"], "missing_type_specific_field");
    assert_eq!(v["errors"][0]["message"], "Relationship type 'married' requires field 'start_date'");
    // A state key that is not a list fails the node, naming the key.
    let text = "nodes:\n  - name: check\n    uses: validate.extraction\n";
    let err = format!("{:?}", load(text).invoke(json!({ "entities": "Alice" })).unwrap_err());
    assert!(err.contains("`entities` must be a list"), "{err}");
}

#[test]
fn failures_are_appended_to_the_validation_log() {
    let dir = std::env::temp_dir().join(format!("tea-extraction-log-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let log = dir.join("deep/failures.jsonl");
    let text = format!(
        r#"
name: logged
extraction_schema:
  entities: {{ required_fields: [name] }}
validation_logging:
  enabled: true
  log_path: "{}"
nodes:
  - name: check
    uses: validate.extraction
    with: {{ agent_name: extractor }}
"#,
        log.display()
    );
    let agent = Engine::new().allow_write(&dir).load_str(&text).unwrap_or_else(|e| panic!("{e}"));
    agent.invoke(json!({ "entities": [{ "type": "Person" }], "text": "Alice met Bob" })).unwrap().done().unwrap();
    agent.invoke(json!({ "entities": [{ "name": "Alice" }] })).unwrap().done().unwrap();
    let written = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<Value> = written.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 1, "only the failure is logged: {written}");
    assert_eq!(lines[0]["failure_type"], "schema");
    assert_eq!(lines[0]["agent_name"], "extractor");
    assert_eq!(lines[0]["input_hash"].as_str().unwrap().len(), 16);
    assert_eq!(lines[0]["extraction_attempt"]["entities"], json!([{ "type": "Person" }]));
    assert_eq!(lines[0]["context"]["errors"][0]["path"], "entities[0].name");
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(feature = "prolog")]
#[test]
fn guide_extraction_writes_the_extraction_prompt_into_variables() {
    let out = load(
        r#"
extraction_schema:
  entities: { required_fields: [name], optional_fields: [birth_date] }
  relationships: { types: [mother, father], required_fields: [type], type_requirements: { affair: [start_date] } }
  guide_extraction: true
  confidence_tracking: true
validation_constraints:
  language: prolog
  rules: |
    % A person cannot be their own parent
    validation_error(self_parent, P) :- relationship(_, P, P).
nodes:
  - name: show
    run: return { prompt = variables.extraction_prompt }
"#,
    )
    .invoke(json!({}))
    .unwrap()
    .done()
    .unwrap();
    let prompt = out["prompt"].as_str().unwrap();
    let expected = "You are extracting entities and relationships from text.\n\nONTOLOGY:\n\
        - Entities must have: name (required), birth_date (optional)\n\
        - Valid relationship types: mother, father\n\
        - Relationships must have: type (required)\n\
        - affair relationships require: start_date\n\n\
        CONSTRAINTS TO SATISFY:\n- A person cannot be their own parent\n\n\
        Include confidence scores (0.0-1.0) for each extraction. Add a 'confidence' field to each entity and \
        relationship.\n\nExtract according to this schema.";
    assert_eq!(prompt, expected);
}

#[cfg(feature = "prolog")]
#[test]
fn prolog_constraints_judge_the_facts_of_the_extraction() {
    let agent = load(
        r#"
extraction_schema:
  confidence_tracking: true
validation_constraints:
  language: prolog
  rules: |
    validation_error(self_parent, Person) :-
        relationship(Type, Person, Person),
        member(Type, ['mother', 'father']).
    validation_error(low_confidence, Rel) :-
        relationship(Type, Subj, Obj, Conf),
        Conf < 0.5,
        Rel = Type-Subj-Obj.
    validation_error(unknown_person, Name) :-
        relationship(_, Name, _),
        \+ entity(Name, _).
nodes:
  - name: check
    uses: validate.extraction
    output: v
"#,
    );
    let run = |rels: Value| {
        agent
            .invoke(json!({ "entities": [{ "name": "Ann", "type": "person" }], "relationships": rels }))
            .unwrap()
            .done()
            .unwrap()["v"]
            .clone()
    };
    let ok = run(json!([{ "type": "mother", "subject": "Ann", "object": "Bea" }]));
    assert_eq!(ok["valid"], true, "{ok}");
    let bad = run(json!([
        { "type": "mother", "subject": "Ann", "object": "Ann" },
        { "type": "knows", "subject": "Cy", "object": "Ann", "confidence": 0.2 },
    ]));
    assert_eq!(bad["valid"], false);
    let messages: Vec<&str> =
        bad["errors"].as_array().unwrap().iter().map(|e| e["message"].as_str().unwrap()).collect();
    assert!(messages.contains(&"Constraint violation: self_parent(Ann)"), "{messages:?}");
    assert!(messages.iter().any(|m| m.starts_with("Constraint violation: low_confidence(")), "{messages:?}");
    assert_eq!(bad["errors"][0]["type"], "prolog_constraint_violation");
    // With confidence tracking, a relationship with a confidence is relationship/4 only: the
    // unknown-person rule (over relationship/3) does not see Cy.
    assert!(!messages.iter().any(|m| m.contains("unknown_person")), "{messages:?}");
}

#[cfg(feature = "prolog")]
#[test]
fn a_rule_that_calls_an_undefined_predicate_is_a_prolog_error_in_the_result() {
    let out = load(
        r#"
validation_constraints:
  rules: |
    validation_error(bad_dates, P) :- relationship(affair, P, _), affair_dates(P, _, S, E), S @> E.
nodes:
  - name: check
    uses: validate.extraction
"#,
    )
    .invoke(json!({ "relationships": [{ "type": "affair", "subject": "A", "object": "B" }] }))
    .unwrap()
    .done()
    .unwrap();
    assert_eq!(out["valid"], false);
    assert_eq!(out["errors"][0]["type"], "prolog_error");
    assert!(out["errors"][0]["message"].as_str().unwrap().contains("affair_dates"), "{out:?}");
}

#[cfg(feature = "net")]
#[test]
fn semantic_probes_ask_the_llm_per_item_and_reject_or_warn() {
    let mock = support::mock::Mock::start();
    let agent = load(&format!(
        r#"
settings:
  llm: {{ api_base: "{}", api_key: sk-test, model: echo, max_retries: 0 }}
semantic_probes:
  - for_each: relationship
    where: "type == 'mother'"
    probe: "Answer yes if {{{{ subject }}}} is the mother of {{{{ object }}}} in: {{{{ text }}}}"
  - for_each: entity
    probe: "{{{{ name }}}} is {{{{ 'not ' if name == 'Cy' else '' }}}}a person"
    on_fail: warn
nodes:
  - name: check
    uses: validate.extraction
    output: v
"#,
        mock.v1()
    ));
    let entities = json!([{ "name": "Ann" }, { "name": "Cy" }, { "name": "Bea" }]);
    let rels = json!([
        { "type": "mother", "subject": "Ann", "object": "Bea" },
        { "type": "sister", "subject": "Bea", "object": "Cy" },
    ]);
    let out = agent
        .invoke(json!({ "entities": entities, "relationships": rels, "text": "Ann is Bea's mother" }))
        .unwrap()
        .done()
        .unwrap();
    let v = &out["v"];
    // The mother probe says yes; Cy is "not" a person, a warning that still fails; the others
    // say neither yes nor no (no).
    assert_eq!(v["valid"], false);
    let errors = v["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert!(errors.iter().all(|e| e["type"] == "semantic_probe_failed"));
    assert_eq!(errors[1]["question"], "Cy is not a person");
    assert_eq!(errors[1]["item"]["name"], "Cy");
    let hits = mock.hits();
    // One question for the mother (the sister is filtered out), three for the entities.
    assert_eq!(hits.len(), 4, "{hits:?}");
    assert_eq!(hits[0].body["max_tokens"], 10);
    assert_eq!(hits[0].body["messages"][0]["content"], "You are a fact-checker. Answer with ONLY 'yes' or 'no'.");
    assert_eq!(
        hits[0].body["messages"][1]["content"],
        "Answer yes if Ann is the mother of Bea in: Ann is Bea's mother"
    );
}

#[test]
fn extraction_and_retry_mistakes_are_load_errors_at_their_lines() {
    let p = problems(
        r#"
extraction_schema:
  entity_types: [Person]
  relationships: { typs: [knows] }
semantic_probes:
  - for_each: entities
    probe: "is {{ name }} real?"
  - for_each: entity
    on_fail: skip
    probe: "{{ name"
validation_logging: { enabled: maybe }
nodes:
  - name: check
    uses: retry.loop
    with:
      validate: validate.extractoin
      correct: fixer
      max_retries: -1
  - name: fix
    run: return {}
  - name: ask
    interrupt: before
    run: return {}
  - name: again
    uses: retry.loop
    with: { validate: validate.extraction, correct: ask, retry_dely: 1 }
config: { checkpointer: memory }
"#,
    );
    let has = |line: usize, text: &str| {
        assert!(p.iter().any(|m| m.starts_with(&format!("{line}: ")) && m.contains(text)), "{line}: {text} in {p:#?}");
    };
    has(3, "unknown key `entity_types` in `extraction_schema`");
    has(4, "unknown key `typs`");
    has(4, "did you mean `types`");
    has(6, "`for_each` of probe 0 of `semantic_probes` is `entity` or `relationship`, not `entities`");
    has(9, "`on_fail` of probe 1");
    has(10, "does not parse");
    has(11, "`enabled` of `validation_logging` must be true or false");
    has(16, "unknown action `validate.extractoin`");
    has(17, "`correct` of node `check` names `fixer`, which is not a node; did you mean `fix`?");
    has(18, "`max_retries`");
    has(26, "unknown key `retry_dely`");
    has(26, "`correct` of node `again` names `ask`, which has a breakpoint");
}

#[test]
fn a_correction_node_must_be_one_that_runs_without_pausing() {
    let p = problems(
        r#"
config: { checkpointer: memory }
nodes:
  - name: check
    uses: retry.loop
    with: { validate: validate.extraction, correct: ask }
  - name: ask
    interrupt: before
    run: return {}
"#,
    );
    assert!(p.iter().any(|m| m.starts_with("6: ") && m.contains("which has a breakpoint")), "{p:#?}");
}

#[test]
fn two_retry_loops_cannot_correct_with_each_other() {
    let p = problems(
        r#"
nodes:
  - name: one
    uses: retry.loop
    with: { validate: validate.extraction, correct: two }
  - name: two
    uses: retry.loop
    with: { validate: validate.extraction, correct: one }
"#,
    );
    assert!(p.iter().any(|m| m.starts_with("5: ") && m.contains("a `retry.loop` itself")), "{p:#?}");
    assert!(p.iter().any(|m| m.starts_with("8: ") && m.contains("a `retry.loop` itself")), "{p:#?}");
}

#[cfg(feature = "prolog")]
#[test]
fn a_constraint_that_does_not_read_is_a_load_error_at_its_line() {
    let p = problems(
        "validation_constraints:\n  language: prolog\n  rules: |\n    validation_error(a, X) :- entity(X, _).\n    validation_error(b, X) :- entity(X,, _).\nnodes:\n  - name: check\n    uses: validate.extraction\n",
    );
    assert!(p.iter().any(|m| m.starts_with("5: ") && m.contains("validation_constraints")), "{p:#?}");
}

/// The Edge Agent's corpus (`../shared/edge-agent-corpus`), when it is here.
#[cfg(feature = "python")]
fn corpus() -> Option<std::path::PathBuf> {
    if let Some(dir) = std::env::var_os("TEA_EDGE_AGENT_CORPUS") {
        return Some(dir.into());
    }
    let beside = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/edge-agent-corpus");
    beside.is_dir().then_some(beside)
}

/// Its `test-retry-learning.yaml` ends as its comments say: two corrections, then valid.
#[cfg(feature = "python")]
#[test]
fn the_edge_agents_retry_learning_example_runs_to_its_documented_end() {
    let Some(root) = corpus() else {
        eprintln!("skipped: The Edge Agent's corpus is not here (set TEA_EDGE_AGENT_CORPUS)");
        return;
    };
    let agent = Engine::new()
        .allow_net("127.0.0.1")
        .trust_code(true)
        .load_file(root.join("examples/prolog/neurosymbolic/test-retry-learning.yaml"))
        .unwrap_or_else(|e| panic!("{e}"));
    let out = agent.invoke(json!({ "text": "Alice knows Bob" })).unwrap().done().unwrap();
    assert_eq!(out["valid"], true, "{out:?}");
    assert_eq!(out["_retry_count"], 2);
    let history = out["_error_history"].as_array().unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(
        history[0]["errors"],
        json!([
            "Entity missing required field 'type'",
            "Entity missing required field 'type'",
            "Invalid relationship type 'friends', expected one of ['knows', 'works_at']",
        ])
    );
    assert_eq!(
        history[1]["errors"],
        json!(["Invalid relationship type 'buddies', expected one of ['knows', 'works_at']"])
    );
    assert!(out["result"].as_str().unwrap().starts_with("SUCCESS after 2 retries!"), "{out:?}");
}

#[test]
fn a_correction_that_runs_its_own_loop_stops_at_a_depth() {
    let out = load(
        r#"
extraction_schema:
  entities: { required_fields: [name] }
nodes:
  - name: outer
    type: while_loop
    condition: "true"
    max_iterations: 2
    body:
      - name: inner
        uses: retry.loop
        with: { validate: validate.extraction, correct: outer, max_retries: 3 }
"#,
    )
    .invoke(json!({ "entities": [{}] }));
    let err = format!("{:?}", out.map(|r| r.done().is_some()));
    assert!(err.contains("correction nodes run one another more than 16 deep"), "{err}");
}

/// Names written to hurt the Prolog program (quotes, backslashes, line breaks, a clause in a
/// name) stay data: each is one fact, and the rules see it as written.
#[cfg(feature = "prolog")]
#[test]
fn hostile_names_stay_atoms_in_the_facts() {
    let agent = load(
        r#"
validation_constraints:
  rules: |
    validation_error(seen, N) :- entity(N, _).
nodes:
  - name: check
    uses: validate.extraction
    output: v
"#,
    );
    let names = ["O'Brien", "back\\slash", "two\nlines", "x'). validation_error(hacked, 1). entity('y", "日本", ""];
    let entities: Vec<Value> = names.iter().map(|n| json!({ "name": n, "type": "person" })).collect();
    let out = agent.invoke(json!({ "entities": entities })).unwrap().done().unwrap();
    let errors = out["v"]["errors"].as_array().unwrap();
    let seen: Vec<&str> = errors.iter().map(|e| e["context"].as_str().unwrap_or("?")).collect();
    assert_eq!(seen.len(), names.len(), "{errors:?}");
    for name in names {
        assert!(seen.contains(&name), "{name:?} not among {seen:?}");
    }
    assert!(errors.iter().all(|e| e["error_type"] == "seen"), "{errors:?}");
}
