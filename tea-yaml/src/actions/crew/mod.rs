//! The Edge Agent's multi-agent actions over `llm.call`: `agent.dispatch` (one agent),
//! `agent.parallel` (several on one task, their answers aggregated), `agent.sequential` (a
//! chain, each answer the next one's `previous_response`) and `agent.coordinate` (a leader
//! splits the task among workers and aggregates their answers).
//!
//! The agents are the file's `settings.agents` (read at load: `model`, `system_prompt`,
//! `temperature`, `max_tokens`, `timeout`, `retry`); what an agent leaves out is
//! `settings.llm`'s, as for any `llm.call`. Each call is `llm.call` with the agent's system
//! prompt and the task as the user's message, so providers, retries and secrets are the
//! built-in action's. Results have The Edge Agent's Python engine's shapes. The agents of one
//! node are asked one after another (a node is one step; fan out with a parallel edge to ask
//! them at once).
//!
//! The Edge Agent's multi-agent actions (`agent.dispatch`, `agent.parallel`, `agent.sequential`,
//! `agent.coordinate`): each agent of `settings.agents` (read by `load.rs`) asked through
//! `llm.call` with its system prompt; results as its Python engine's.

use crate::actions::{self, Action, Call, Composer};
use crate::lang::template::Tree;
use crate::state::State;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::Instant;
use tea_runtime::{BoxError, NodeName};

/// An agent of `settings.agents`.
#[derive(Clone, Debug, Default)]
pub(crate) struct AgentDef {
    pub(crate) model: Option<Value>,
    pub(crate) system_prompt: Option<String>,
    pub(crate) temperature: Option<Value>,
    pub(crate) max_tokens: Option<Value>,
    pub(crate) timeout: Option<Value>,
    /// `retry.max_attempts` (calls in all) and `retry.backoff` (the delay's factor): `agent.dispatch`'s.
    pub(crate) attempts: u64,
    pub(crate) backoff: f64,
}

/// Which action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CrewKind {
    Dispatch,
    Parallel,
    Sequential,
    Coordinate,
}

impl CrewKind {
    pub(crate) fn named(name: &str) -> Option<CrewKind> {
        Some(match name {
            "agent.dispatch" => CrewKind::Dispatch,
            "agent.parallel" => CrewKind::Parallel,
            "agent.sequential" => CrewKind::Sequential,
            "agent.coordinate" => CrewKind::Coordinate,
            _ => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            CrewKind::Dispatch => "agent.dispatch",
            CrewKind::Parallel => "agent.parallel",
            CrewKind::Sequential => "agent.sequential",
            CrewKind::Coordinate => "agent.coordinate",
        }
    }

    /// The action's own keys (the first required); the rest of `with:` goes to `llm.call`.
    pub(crate) fn keys(self) -> &'static [&'static str] {
        match self {
            CrewKind::Dispatch => &["agent", "task", "timeout", "max_retries"],
            CrewKind::Parallel => &[
                "agents",
                "task",
                "aggregation",
                "max_concurrent",
                "timeout",
                "consensus_threshold",
                "consensus_max_rounds",
            ],
            CrewKind::Sequential => &["agents", "task", "tasks", "transform", "early_exit_on_failure", "output_key"],
            CrewKind::Coordinate => {
                &["leader", "workers", "task", "validation_prompt", "max_rounds", "parallel_workers"]
            }
        }
    }
}

/// The aggregations of `agent.parallel`.
pub(crate) const AGGREGATIONS: &[&str] = &["collect", "vote", "first", "consensus"];

/// An `agent.*` action, compiled.
pub(crate) struct Crew {
    pub(crate) kind: CrewKind,
    /// The node's `with:`, key by key (rendered when used: `task` of `agent.sequential` once per
    /// agent, with `previous_response` and its kin).
    pub(crate) args: Vec<(String, Tree)>,
    pub(crate) agents: Arc<Vec<(String, AgentDef)>>,
    /// `llm.call`.
    pub(crate) llm: Action,
}

fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn elapsed(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1000.0
}

/// One rendering of the arguments: the values, and the working state they were rendered on.
struct Args<'a> {
    crew: &'a Crew,
    host: &'a dyn Composer,
    values: Map<String, Value>,
}

impl Args<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.values.get(key).filter(|v| !v.is_null())
    }

    /// `key` rendered again on `work` (a template seeing `previous_response` and its kin).
    fn render_on(&self, key: &str, work: &Map<String, Value>) -> Result<Option<Value>, BoxError> {
        let Some((_, tree)) = self.crew.args.iter().find(|(k, _)| k == key) else { return Ok(None) };
        let state = State::from_map(work.clone());
        Ok(Some(self.host.render_with(tree, &state, work).map_err(|e| format!("`{key}`: {e}"))?))
    }

    fn names(&self, key: &str) -> Result<Vec<String>, BoxError> {
        match self.get(key) {
            Some(Value::Array(items)) => Ok(items.iter().map(text).collect()),
            Some(Value::String(one)) => Ok(vec![one.clone()]),
            Some(other) => Err(format!("`{key}` must be a list of agent names, not {other}").into()),
            None => Err(format!("`{key}` is missing").into()),
        }
    }

    fn number(&self, key: &str) -> Result<Option<f64>, BoxError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Number(n)) => Ok(n.as_f64()),
            Some(Value::String(s)) => {
                s.trim().parse().map(Some).map_err(|_| format!("`{key}` must be a number, not `{s}`").into())
            }
            Some(other) => Err(format!("`{key}` must be a number, not {other}").into()),
        }
    }
}

impl Crew {
    fn agent(&self, name: &str) -> Option<&AgentDef> {
        self.agents.iter().find(|(n, _)| n == name).map(|(_, a)| a)
    }

    fn not_found(&self, name: &str) -> String {
        let names: Vec<&str> = self.agents.iter().map(|(n, _)| n.as_str()).collect();
        let available = if names.is_empty() { "(none)".to_owned() } else { names.join(", ") };
        format!("Agent '{name}' not found. Available agents: {available}")
    }

    /// Runs the action for node `node` on `state`: its result.
    pub(crate) fn run(&self, host: &dyn Composer, node: &NodeName, state: &State) -> Result<Value, BoxError> {
        // The Edge Agent renders an agent's task with the state's keys as names of their own.
        let locals = state.shared().as_ref().clone();
        let mut values = Map::new();
        for (key, tree) in &self.args {
            let value = host.render_with(tree, state, &locals).map_err(|e| format!("`{key}`: {e}"))?;
            values.insert(key.clone(), value);
        }
        let args = Args { crew: self, host, values };
        let start = Instant::now();
        match self.kind {
            CrewKind::Dispatch => self.dispatch(&args, node, state, start),
            CrewKind::Parallel => self.parallel(&args, node, state, start),
            CrewKind::Sequential => self.sequential(&args, node, state, start),
            CrewKind::Coordinate => self.coordinate(&args, node, state, start),
        }
    }

    /// The options beside the action's own keys: `llm.call`'s.
    fn options(&self, args: &Args<'_>) -> Map<String, Value> {
        let own = self.kind.keys();
        args.values.iter().filter(|(k, _)| !own.contains(&k.as_str())).map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    /// One call of agent `def` with `task`: `{content, …, agent, success: true}` or
    /// `{error, agent, success: false}`.
    fn call(
        &self,
        args: &Args<'_>,
        node: &NodeName,
        state: &State,
        (name, def): (&str, &AgentDef),
        task: &str,
        timeout: Option<&Value>,
    ) -> Value {
        let mut call = Map::new();
        if let Some(model) = &def.model {
            call.insert("model".into(), model.clone());
        }
        if let Some(t) = &def.temperature {
            call.insert("temperature".into(), t.clone());
        }
        if let Some(m) = &def.max_tokens {
            call.insert("max_tokens".into(), m.clone());
        }
        if let Some(t) = timeout.or(def.timeout.as_ref()) {
            call.insert("timeout".into(), t.clone());
        }
        let mut messages = Vec::new();
        if let Some(system) = &def.system_prompt {
            messages.push(json!({ "role": "system", "content": system }));
        }
        messages.push(json!({ "role": "user", "content": task }));
        call.insert("messages".into(), Value::Array(messages));
        call.extend(self.options(args));
        let host = args.host.host();
        match actions::call(&self.llm, &Call { host, node, state }, &Value::Object(call)) {
            Ok(Value::Object(mut reply)) => {
                reply.insert("agent".into(), json!(name));
                reply.insert("success".into(), json!(true));
                Value::Object(reply)
            }
            Ok(other) => json!({ "content": other, "agent": name, "success": true }),
            Err(e) => json!({ "error": tea_runtime::error_chain(&*e), "agent": name, "success": false }),
        }
    }

    fn dispatch(&self, args: &Args<'_>, node: &NodeName, state: &State, start: Instant) -> Result<Value, BoxError> {
        let name = text(args.get("agent").ok_or("`agent` is missing")?);
        let Some(def) = self.agent(&name) else {
            return Ok(
                json!({ "error": self.not_found(&name), "agent": name, "success": false, "elapsed_ms": elapsed(start) }),
            );
        };
        let task = text(args.get("task").ok_or("`task` is missing")?);
        let attempts = match args.number("max_retries")? {
            Some(n) if (1.0..=1000.0).contains(&n) => n as u64,
            Some(n) => return Err(format!("`max_retries` must be from 1 to 1000 (calls in all), not {n}").into()),
            None => def.attempts,
        };
        let mut delay = 1.0;
        let mut last = Value::Null;
        for attempt in 1..=attempts {
            let mut result = self.call(args, node, state, (&name, def), &task, args.get("timeout"));
            if result["success"] == true {
                let response = result.get("content").cloned().unwrap_or_else(|| json!(""));
                let map = result.as_object_mut().expect("a call's result is an object");
                map.insert("attempts".into(), json!(attempt));
                map.insert("elapsed_ms".into(), json!(elapsed(start)));
                map.insert("response".into(), response);
                return Ok(result);
            }
            last = result["error"].clone();
            if attempt < attempts {
                std::thread::sleep(std::time::Duration::from_secs_f64(delay));
                delay *= def.backoff;
            }
        }
        Ok(
            json!({ "error": last, "agent": name, "success": false, "attempts": attempts, "elapsed_ms": elapsed(start) }),
        )
    }

    fn parallel(&self, args: &Args<'_>, node: &NodeName, state: &State, start: Instant) -> Result<Value, BoxError> {
        let requested = args.names("agents")?;
        let valid: Vec<(&str, &AgentDef)> =
            requested.iter().filter_map(|n| self.agent(n).map(|d| (n.as_str(), d))).collect();
        if valid.is_empty() {
            return Ok(json!({ "error": "No valid agents found", "agents_requested": requested, "success": false }));
        }
        let task = text(args.get("task").ok_or("`task` is missing")?);
        let aggregation = args.get("aggregation").map_or_else(|| "collect".to_owned(), text);
        let ask = || -> Vec<Value> {
            valid.iter().map(|&agent| self.call(args, node, state, agent, &task, args.get("timeout"))).collect()
        };
        let content = |r: &Value| r.get("content").or_else(|| r.get("response")).cloned().unwrap_or(r.clone());
        let names: Vec<&str> = valid.iter().map(|(n, _)| *n).collect();
        // The most frequent answer among those that succeeded (the first on a tie), its count,
        // the counts, and how many succeeded.
        let tally = |results: &[Value]| {
            let mut counts: Vec<(String, u64)> = Vec::new();
            for r in results.iter().filter(|r| r["success"] == true) {
                let answer = text(&content(r));
                match counts.iter_mut().find(|(a, _)| *a == answer) {
                    Some((_, n)) => *n += 1,
                    None => counts.push((answer, 1)),
                }
            }
            let total: u64 = counts.iter().map(|(_, n)| n).sum();
            let mut top: Option<(String, u64)> = None;
            for (a, n) in &counts {
                if top.as_ref().is_none_or(|(_, best)| n > best) {
                    top = Some((a.clone(), *n));
                }
            }
            (top, counts, total)
        };
        let mut out = match aggregation.as_str() {
            "vote" => {
                let results = ask();
                let (top, counts, total) = tally(&results);
                let votes: Map<String, Value> = counts.iter().map(|(a, n)| (a.clone(), json!(n))).collect();
                let mut out = json!({
                    "result": top.map(|(a, _)| a),
                    "votes": votes,
                    "unanimous": counts.len() == 1,
                    "total_votes": total,
                    "aggregation": "vote",
                });
                out["raw_results"] = Value::Array(results);
                out
            }
            "first" => {
                let results = ask();
                let mut out = match results.iter().find(|r| r["success"] == true) {
                    Some(r) => json!({ "result": content(r), "agent": r["agent"], "aggregation": "first" }),
                    None => json!({ "result": null, "error": "No successful responses", "aggregation": "first" }),
                };
                out["raw_results"] = Value::Array(results);
                out
            }
            "consensus" => {
                let threshold = args.number("consensus_threshold")?.unwrap_or(0.5);
                let max_rounds = args.number("consensus_max_rounds")?.unwrap_or(3.0);
                if !(1.0..=100.0).contains(&max_rounds) {
                    return Err(format!("`consensus_max_rounds` must be from 1 to 100, not {max_rounds}").into());
                }
                let mut rounds = 0;
                loop {
                    rounds += 1;
                    let results = ask();
                    let (top, _, total) = tally(&results);
                    let agreement = match &top {
                        Some((_, n)) if total > 0 => *n as f64 / total as f64,
                        _ => 0.0,
                    };
                    let reached = top.is_some() && agreement >= threshold;
                    if reached || rounds as f64 >= max_rounds {
                        break json!({
                            "result": if reached { top.map(|(a, _)| Value::String(a)).unwrap_or(Value::Null) } else { Value::Null },
                            "agreement": agreement,
                            "consensus_reached": reached,
                            "threshold": threshold,
                            "aggregation": "consensus",
                            "rounds": rounds,
                        });
                    }
                }
            }
            _ => {
                let results = ask();
                let responses: Vec<Value> = results.iter().map(content).collect();
                json!({
                    "responses": responses,
                    "count": results.len(),
                    "aggregation": "collect",
                    "raw_results": results,
                })
            }
        };
        out["success"] = json!(true);
        out["elapsed_ms"] = json!(elapsed(start));
        out["agents_called"] = json!(names);
        Ok(out)
    }

    fn sequential(&self, args: &Args<'_>, node: &NodeName, state: &State, start: Instant) -> Result<Value, BoxError> {
        let requested = args.names("agents")?;
        let early_exit = args.get("early_exit_on_failure").is_none_or(|v| v != &Value::Bool(false));
        let mut valid = Vec::new();
        for name in &requested {
            match self.agent(name) {
                Some(def) => valid.push((name.as_str(), def)),
                None if early_exit => {
                    return Ok(json!({ "error": self.not_found(name), "success": false, "chain": [] }));
                }
                None => {}
            }
        }
        if valid.is_empty() {
            return Ok(json!({ "error": "No valid agents found", "success": false, "chain": [] }));
        }
        if let Some(Value::Array(tasks)) = args.get("tasks") {
            if tasks.len() != valid.len() {
                return Ok(json!({
                    "error": format!("Tasks count ({}) must match agents count ({})", tasks.len(), valid.len()),
                    "success": false,
                    "chain": [],
                }));
            }
        }
        let mut work = state.shared().as_ref().clone();
        let mut previous = String::new();
        let mut chain = Vec::new();
        let n = valid.len();
        for (i, &(name, def)) in valid.iter().enumerate() {
            work.insert("previous_response".into(), json!(previous));
            work.insert("chain_index".into(), json!(i));
            work.insert("chain_length".into(), json!(n));
            let task = if args.get("tasks").is_some() {
                match args.render_on("tasks", &work)? {
                    Some(Value::Array(tasks)) => tasks.get(i).map(text).unwrap_or_default(),
                    other => return Err(format!("`tasks` must be a list of tasks, not {other:?}").into()),
                }
            } else if args.get("task").is_some() {
                args.render_on("task", &work)?.as_ref().map(text).unwrap_or_default()
            } else if i == 0 {
                work.get("input").map(text).ok_or(
                    "`agent.sequential` needs `task` or `tasks` (or an `input` in the state for the first agent)",
                )?
            } else {
                previous.clone()
            };
            let result = self.call(args, node, &State::from_map(work.clone()), (name, def), &task, None);
            let ok = result["success"] == true;
            let content = text(result.get("content").unwrap_or(&Value::Null));
            chain.push(
                json!({ "agent": name, "response": if ok { content.clone() } else { String::new() }, "success": ok }),
            );
            if !ok {
                if early_exit {
                    return Ok(json!({
                        "error": result["error"],
                        "chain": chain,
                        "success": false,
                        "failed_at": i,
                        "elapsed_ms": elapsed(start),
                    }));
                }
                continue;
            }
            previous = content.clone();
            if args.get("transform").is_some() {
                work.insert("current_response".into(), json!(content));
                previous = args.render_on("transform", &work)?.as_ref().map(text).unwrap_or_default();
            }
        }
        let key = args.get("output_key").map_or_else(|| "sequential_result".to_owned(), text);
        let names: Vec<&str> = valid.iter().map(|(n, _)| *n).collect();
        let mut out = json!({ "result": previous });
        out[key.as_str()] = json!(previous);
        out["chain"] = Value::Array(chain);
        out["success"] = json!(true);
        out["agents_called"] = json!(names);
        out["elapsed_ms"] = json!(elapsed(start));
        Ok(out)
    }

    fn coordinate(&self, args: &Args<'_>, node: &NodeName, state: &State, start: Instant) -> Result<Value, BoxError> {
        let leader_name = text(args.get("leader").ok_or("`leader` is missing")?);
        let Some(leader) = self.agent(&leader_name) else {
            return Ok(json!({ "error": self.not_found(&leader_name), "success": false }));
        };
        let requested = args.names("workers")?;
        let workers: Vec<(&str, &AgentDef)> =
            requested.iter().filter_map(|n| self.agent(n).map(|d| (n.as_str(), d))).collect();
        if workers.is_empty() {
            return Ok(json!({ "error": "No valid workers found", "success": false }));
        }
        let task = text(args.get("task").ok_or("`task` is missing")?);
        let max_rounds = args.number("max_rounds")?.unwrap_or(3.0);
        if !(1.0..=100.0).contains(&max_rounds) {
            return Err(format!("`max_rounds` must be from 1 to 100, not {max_rounds}").into());
        }
        let n = workers.len();
        let mut rounds = 0;
        let mut all = Vec::new();
        let mut final_result = Value::Null;
        while (rounds as f64) < max_rounds {
            rounds += 1;
            let plan = format!(
                "You are a coordinator. Break down this task into subtasks for {n} workers.\n\nTask: {task}\n\n\
                 Respond with a JSON array of subtasks, one for each worker:\n[\"subtask 1\", \"subtask 2\", ...]"
            );
            let reply = self.call(args, node, state, (&leader_name, leader), &plan, None);
            if reply["success"] != true {
                continue;
            }
            let content = text(reply.get("content").unwrap_or(&Value::Null));
            let mut subtasks: Vec<String> = match (content.find('['), content.rfind(']')) {
                (Some(a), Some(b)) if a < b => match serde_json::from_str::<Value>(&content[a..=b]) {
                    Ok(Value::Array(items)) => items.iter().map(text).collect(),
                    _ => vec![task.clone(); n],
                },
                _ => vec![task.clone(); n],
            };
            let pad = subtasks.last().cloned().unwrap_or_else(|| task.clone());
            subtasks.resize(n, pad);
            let results: Vec<Value> = workers
                .iter()
                .zip(&subtasks)
                .map(|(&worker, subtask)| self.call(args, node, state, worker, subtask, None))
                .collect();
            let answers: Vec<String> = results
                .iter()
                .filter(|r| r["success"] == true)
                .map(|r| text(r.get("content").unwrap_or(&Value::Null)))
                .collect();
            all.push(Value::Array(results));
            if answers.is_empty() {
                continue;
            }
            let mut aggregate = format!(
                "You are a coordinator. Aggregate these worker responses into a final answer.\n\nOriginal task: \
                 {task}\n\nWorker responses:\n"
            );
            for (i, a) in answers.iter().enumerate() {
                aggregate.push_str(&format!("- Worker {}: {a}\n", i + 1));
            }
            aggregate.push_str("\nProvide the final aggregated result.");
            if let Some(v) = args.get("validation_prompt") {
                aggregate.push_str("\n\n");
                aggregate.push_str(&text(v));
            }
            let done = self.call(args, node, state, (&leader_name, leader), &aggregate, None);
            if done["success"] == true {
                final_result = done.get("content").cloned().unwrap_or(Value::Null);
                break;
            }
        }
        let names: Vec<&str> = workers.iter().map(|(n, _)| *n).collect();
        Ok(json!({
            "result": final_result,
            "rounds": rounds,
            "worker_results": all,
            "success": !final_result.is_null(),
            "leader": leader_name,
            "workers": names,
            "elapsed_ms": elapsed(start),
        }))
    }
}

/// Loading its `with:` (part of the loading layer, `crate::load`).
pub(crate) mod load;
