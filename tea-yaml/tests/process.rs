//! A YAML agent paused in one process and resumed in another: from its checkpoint file, and
//! from its token. The test binary runs itself as those processes, with an environment variable
//! selecting the role.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use tea::{Outcome, Resume};
use tea_yaml::{Agent, Engine, State};

const TEST: &str = "a_yaml_agent_paused_in_one_process_resumes_in_another";
const ROLE: &str = "TEA_YAML_PROCESS_ROLE";
const FILE: &str = "TEA_YAML_PROCESS_FILE";
const ARG: &str = "TEA_YAML_PROCESS_ARG";

const AGENT: &str = r#"
name: approval
state:
  trail: { type: list, reducer: append }
config:
  checkpoint_dir: ./checkpoints
nodes:
  - name: receive
    uses: process.mark
    with: { step: receive }
  - name: ask
    type: interrupt
    message: "Approve order {{ state.order }}?"
    resume_key: approved_by
  - name: ship
    uses: process.mark
    with: { step: "ship (approved by {{ state.approved_by }})" }
"#;

/// Each step notes the process it ran in.
fn agent(file: &Path) -> Agent {
    Engine::new()
        .action("process.mark", |_: &State, args: &Value| {
            Ok(json!({ "trail": [format!("{} in {}", args["step"].as_str().unwrap_or("?"), std::process::id())] }))
        })
        .load_file(file)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Runs this test binary as `role` with `arg`; returns its standard output.
fn child(role: &str, file: &Path, arg: &str) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env(FILE, file)
        .env(ARG, arg)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "child {role} failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

fn field<'a>(stdout: &'a str, key: &str) -> &'a str {
    stdout
        .lines()
        // The harness may print `test … ` before the child's line.
        .find_map(|l| l.split_once(key).map(|(_, rest)| rest))
        .unwrap_or_else(|| panic!("no {key} in the child's output:\n{stdout}"))
}

/// The roles a child plays.
fn play(role: &str, file: &Path, arg: &str) {
    let agent = agent(file);
    match role {
        "pause" => {
            let (_, resume) = agent.invoke(json!({ "order": arg })).unwrap().interrupted().unwrap();
            println!("TOKEN={resume}");
            println!("PAUSE_FILE={}", agent.checkpoint_path(&resume).unwrap().display());
        }
        "resume-file" => {
            let out = agent
                .checkpoint_call(arg, Some(json!({ "approved_by": "Ada" })))
                .and_then(|call| agent.run(call))
                .unwrap();
            println!("DONE={}", out.done().unwrap().to_json());
        }
        "resume-token" => {
            let resume: Resume<State> = arg.parse().unwrap();
            let out = agent.resume(resume.answer("Grace")).unwrap();
            let Outcome::Done(state) = out else { panic!("not done") };
            println!("DONE={}", state.to_json());
        }
        other => panic!("unknown role {other}"),
    }
}

#[test]
fn a_yaml_agent_paused_in_one_process_resumes_in_another() {
    if let Ok(role) = std::env::var(ROLE) {
        let file = PathBuf::from(std::env::var(FILE).unwrap());
        play(&role, &file, &std::env::var(ARG).unwrap_or_default());
        return;
    }
    let dir = std::env::temp_dir().join(format!("tea-yaml-process-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("approval.yaml");
    std::fs::write(&file, AGENT).unwrap();

    // From the checkpoint file.
    let paused = child("pause", &file, "A-1");
    let pause_file = field(&paused, "PAUSE_FILE=").to_owned();
    assert!(Path::new(&pause_file).exists());
    let done = child("resume-file", &file, &pause_file);
    let state: Value = serde_json::from_str(field(&done, "DONE=")).unwrap();
    let trail: Vec<&str> = state["trail"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(trail.len(), 2, "{trail:?}");
    assert!(trail[0].starts_with("receive in "));
    assert!(trail[1].starts_with("ship (approved by Ada) in "));
    assert_ne!(trail[0].rsplit(' ').next(), trail[1].rsplit(' ').next(), "two processes");
    // The file's pause was used: a third process cannot use it again.
    let again = Command::new(std::env::current_exe().unwrap())
        .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE, "resume-file")
        .env(FILE, &file)
        .env(ARG, &pause_file)
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("StaleResume"));

    // From the token string.
    let paused = child("pause", &file, "B-2");
    let token = field(&paused, "TOKEN=").to_owned();
    let done = child("resume-token", &file, &token);
    let state: Value = serde_json::from_str(field(&done, "DONE=")).unwrap();
    assert_eq!(state["order"], "B-2");
    assert!(state["trail"][1].as_str().unwrap().starts_with("ship (approved by Grace)"));
    let _ = std::fs::remove_dir_all(&dir);
}
