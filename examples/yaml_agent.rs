//! Runs a YAML agent (feature `yaml`):
//! `cargo run --features yaml --example yaml_agent -- examples/agents/review.yaml`.
//!
//! At each pause it prints the question (or the breakpoint) and the pause's checkpoint file,
//! reads an answer from standard input (a JSON value or plain text; with no input left it
//! answers `true`), and resumes — from the checkpoint file when the agent keeps one
//! (`config.checkpoint_dir`), else from the token. An optional second argument is the input
//! state as JSON.

use serde_json::{json, Value};
use std::io::BufRead;
use tea::yaml::{Agent, Engine, State};
use tea::Outcome;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: yaml_agent AGENT.yaml [INPUT_JSON]")?;
    let input: Value = match args.next() {
        Some(text) => serde_json::from_str(&text)?,
        None => json!({}),
    };
    let engine = Engine::new().action("text.format", |_: &State, args: &Value| {
        // "{name} likes {color}" with `values: { name, color }`.
        let mut text = args["template"].as_str().unwrap_or_default().to_owned();
        if let Some(values) = args["values"].as_object() {
            for (key, value) in values {
                let shown = value.as_str().map_or_else(|| value.to_string(), str::to_owned);
                text = text.replace(&format!("{{{key}}}"), &shown);
            }
        }
        Ok(Value::String(text))
    });
    let agent = match engine.load_file(&path) {
        Ok(agent) => agent,
        Err(problems) => {
            eprintln!("{problems}");
            std::process::exit(1);
        }
    };
    println!("agent `{}` loaded from {path}", agent.name());
    let mut outcome = agent.invoke(input)?;
    let mut answers = std::io::stdin().lock().lines();
    loop {
        let (state, resume) = match outcome {
            Outcome::Done(state) => {
                println!("done:\n{}", serde_json::to_string_pretty(&state.to_json())?);
                return Ok(());
            }
            Outcome::Interrupted { state, resume } => (state, resume),
        };
        let asks = resume.interrupts().iter().find(|i| i.needs_answer());
        match asks {
            Some(interrupt) => println!("paused at `{}`: {}", interrupt.node(), interrupt.text()),
            None => println!("paused before/after `{}` (a breakpoint)", resume.node()),
        }
        let answer = if asks.is_some() {
            let line = answers.next().transpose()?.unwrap_or_else(|| "true".to_owned());
            let answer = serde_json::from_str(&line).unwrap_or(Value::String(line));
            println!("answer: {answer}");
            Some(answer)
        } else {
            None
        };
        outcome = continue_run(&agent, &state, resume, answer)?;
    }
}

/// Resumes from the pause's checkpoint file when there is one, else from the token.
fn continue_run(
    agent: &Agent,
    state: &State,
    resume: tea::Resume<State>,
    answer: Option<Value>,
) -> Result<Outcome<State>, tea::Error> {
    let _ = state;
    match agent.checkpoint_path(&resume) {
        Some(file) => {
            println!("resuming from checkpoint file {}", file.display());
            let update = match (answer, agent.answer_key(&resume)) {
                (Some(answer), Some(key)) => Some(json!({ key: answer })),
                _ => None,
            };
            agent.checkpoint_call(&file, update).and_then(|call| agent.run(call))
        }
        None => agent.resume(match answer {
            Some(answer) => resume.answer(answer),
            None => resume,
        }),
    }
}
