// Tutorial, step 5: the same agent written in YAML.
//
// `support.yaml` describes the graph of steps 2 to 4 — its state, its nodes in Lua, the
// interrupt node `review` — and `tea::yaml` (cargo feature `yaml`) loads it at run time onto the
// same engine: same pauses, tokens and stores. The `tea` command line runs the file as it is.
// Run it with
//
//     cargo run -p tea-tutorial --bin step5_yaml

use serde_json::json;
use tea::prelude::*;
use tea::yaml::{Engine, State};

/// The agent file, built into the program (`Engine::load_file` reads one at run time).
const AGENT: &str = include_str!("../../support.yaml");

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A mistake in the file is refused with every problem at once, each as
    // `file:line:column: message`.
    let agent = match Engine::new().checkpointer(MemoryStore::new()).load_str(AGENT) {
        Ok(agent) => agent,
        Err(problems) => {
            eprintln!("{problems}");
            std::process::exit(1);
        }
    };
    println!("agent `{}`: nodes {}", agent.name(), agent.nodes().join(", "));

    // The state is JSON: the input names the fields it sets.
    let outcome = agent.invoke(json!({ "question": "opening hours" }))?;
    let (_, resume) = outcome.interrupted().ok_or("the run pauses at `review`")?;
    println!("paused at `{}`; the reviewer is asked: {}", resume.node(), resume.interrupts()[0].text());

    // The token works as in Rust: a string now, parsed back later.
    let token = resume.to_string();
    let resume: Resume<State> = token.parse()?;
    let done = agent.resume(resume.answer(true))?.done().ok_or("an approved reply is sent")?;
    let log: Vec<&str> = done["log"].as_array().into_iter().flatten().filter_map(|l| l.as_str()).collect();
    println!("done: {}", log.join(", "));
    Ok(())
}
