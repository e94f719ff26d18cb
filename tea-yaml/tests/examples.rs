//! The example agents in `examples/agents/` load and run as their comments say (each copied to
//! a temporary directory, so their checkpoint files land there).

use serde_json::{json, Value};
use std::path::PathBuf;
use tea::Outcome;
use tea_yaml::{Agent, Engine, State};

/// A copy of example `name` in a directory of its own for test `test`.
fn copy(name: &str, test: &str) -> (PathBuf, PathBuf) {
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/agents").join(name);
    let dir = std::env::temp_dir().join(format!("tea-yaml-example-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(name);
    std::fs::copy(&source, &file).unwrap();
    (dir, file)
}

fn engine() -> Engine {
    Engine::new().action("text.format", |_: &State, args: &Value| {
        let mut text = args["template"].as_str().unwrap_or_default().to_owned();
        for (key, value) in args["values"].as_object().into_iter().flatten() {
            let shown = value.as_str().map_or_else(|| value.to_string(), str::to_owned);
            text = text.replace(&format!("{{{key}}}"), &shown);
        }
        Ok(Value::String(text))
    })
}

fn load(file: &PathBuf) -> Agent {
    engine().load_file(file).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn review_pauses_for_approval_and_before_publishing_and_resumes_from_its_files() {
    let (dir, file) = copy("review.yaml", "t1");
    let agent = load(&file);
    let (_, resume) = agent.invoke(json!({})).unwrap().interrupted().unwrap();
    assert_eq!(resume.interrupts()[0].value(), "Approve \"Release notes, take 1\"? (true/false)");
    let path = agent.checkpoint_path(&resume).unwrap();
    assert!(path.starts_with(dir.join("checkpoints")));
    let key = agent.answer_key(&resume).unwrap();
    assert_eq!(key, "approved");
    // Rejected once: revised and asked again.
    let (_, resume) = agent
        .checkpoint_call(&path, Some(json!({ key: false })))
        .and_then(|call| agent.run(call))
        .unwrap()
        .interrupted()
        .unwrap();
    assert_eq!(resume.interrupts()[0].value(), "Approve \"Release notes, take 2\"? (true/false)");
    let (_, resume) = agent.resume(resume.answer(true)).unwrap().interrupted().unwrap();
    assert_eq!(resume.node().as_str(), "publish");
    let done = agent
        .checkpoint_call(agent.checkpoint_path(&resume).unwrap(), None)
        .and_then(|call| agent.run(call))
        .unwrap()
        .done()
        .unwrap();
    assert_eq!(done["published"], "Release notes, take 2");
    assert_eq!(done["log"], json!(["drafted take 1", "revised", "drafted take 2", "published"]));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn review_gives_up_after_its_revisions() {
    let (dir, file) = copy("review.yaml", "t2");
    let agent = load(&file);
    let mut outcome = agent.invoke(json!({})).unwrap();
    while let Outcome::Interrupted { resume, .. } = outcome {
        outcome = agent.resume(resume.answer(false)).unwrap();
    }
    let done = outcome.done().unwrap();
    assert_eq!(done["log"].as_array().unwrap().last().unwrap(), "gave up after 2 revisions");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn interview_asks_each_question_with_the_answers_so_far() {
    let (dir, file) = copy("interview.yaml", "t3");
    let agent = load(&file);
    let (_, r) = agent.invoke(json!({})).unwrap().interrupted().unwrap();
    let (_, r) = agent.resume(r.answer("Ada")).unwrap().interrupted().unwrap();
    assert_eq!(r.interrupts()[0].value(), "How old are you, Ada?");
    assert!(matches!(agent.resume(r.clone().answer("old")), Err(tea::Error::BadResumeValue { .. })));
    let (_, r) = agent.resume(r.answer(36)).unwrap().interrupted().unwrap();
    let done = agent.resume(r.answer("blue")).unwrap().done().unwrap();
    assert_eq!(done["summary"], "Ada (36) likes blue");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn research_fans_out_and_merges() {
    let (dir, file) = copy("research.yaml", "t4");
    let done = load(&file).invoke(json!({ "topic": "rust" })).unwrap().done().unwrap();
    assert_eq!(done["sources"], json!(["web: rust", "papers: rust"]));
    assert_eq!(done["hits"], 5);
    assert_eq!(done["summary"], "3 pages and 2 papers about rust");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn checkpoints_saves_and_reloads_and_the_file_restarts_the_run() {
    let (dir, file) = copy("checkpoints.yaml", "t5");
    let agent = load(&file);
    let done = agent.invoke(json!({ "job": "nightly" })).unwrap().done().unwrap();
    assert_eq!(done["saved"], true);
    assert_eq!(done["reloaded_node"], "save");
    assert_eq!(done["reloaded_steps"], json!(["collected"]));
    let saved = PathBuf::from(done["saved_to"].as_str().unwrap());
    assert!(saved.starts_with(dir.canonicalize().unwrap()));
    let again = agent
        .checkpoint_call(&saved, Some(json!({ "items": 5 })))
        .and_then(|call| agent.run(call))
        .unwrap()
        .done()
        .unwrap();
    assert_eq!(again["steps"], json!(["collected", "processed 5 items"]));
    let _ = std::fs::remove_dir_all(&dir);
}
