//! The Edge Agent's actions that compose steps of their own, each step a registered or
//! built-in action (rendered against the action's working state) or a `run:` block:
//!
//! - `reflection.loop` — generate → evaluate → correct until the output passes or the
//!   iterations run out. Evaluators: a JSON Schema (draft 7, with The Edge Agent's coercion of
//!   strings to the schema's scalar types), an LLM judge (`llm.call` with its system prompt and
//!   few-shot `examples`), or a `run:` block whose value is `true`/`false`, a score, or
//!   `{valid, score, errors, suggestions}`.
//!
//! The loader (`load/compose.rs`) compiles a node's `with:` into a [`Composed`] (templates
//! stay unrendered: they are rendered at each step, against the working state, where
//! `state.reflection_output` and its kin are the loop's); the graph runs it through
//! [`run`], reaching what only it has (templates, Lua) through the [`Composer`] trait.

use crate::actions::{self, Action, Call, Host};
use crate::lua::ChunkId;
use crate::state::State;
use crate::template::Tree;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use tea_runtime::{BoxError, NodeName};

/// What a composed action needs of the agent it runs in, beyond [`Host`] (the graph
/// implements it).
pub(crate) trait Composer: Host {
    /// `tree` rendered with `state` as the templates' `state`.
    fn render_on(&self, tree: &Tree, state: &State) -> Result<Value, String>;
    /// Runs Lua chunk `chunk` on `state`: the table it returned.
    fn run_lua(&self, chunk: ChunkId, state: &State) -> Result<Option<Map<String, Value>>, String>;
    /// This agent as the [`Host`] of the actions a step calls.
    fn host(&self) -> &dyn Host;
}

/// A composed action, compiled from its node's `with:`.
pub(crate) enum Composed {
    Reflection(Reflection),
}

/// `reflection.loop`.
pub(crate) struct Reflection {
    pub(crate) generator: Step,
    pub(crate) evaluator: Evaluator,
    pub(crate) corrector: Option<Step>,
    pub(crate) max_iterations: usize,
    pub(crate) on_failure: OnFailure,
}

/// What `reflection.loop` gives when no output passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnFailure {
    /// The output with the highest score.
    ReturnBest,
    /// The last output.
    ReturnLast,
    /// The node fails, its error naming each attempt.
    Raise,
}

/// One step of a composed action: an action with its arguments, or a block.
pub(crate) enum Step {
    Action { name: String, action: Action, args: Tree },
    Lua(ChunkId),
    Python(crate::python::Block),
}

/// How `reflection.loop` judges an output.
pub(crate) enum Evaluator {
    /// A JSON Schema, compiled at load (with the schema, for coercion).
    Schema(Box<jsonschema::Validator>, Arc<Value>),
    /// An LLM judge: `llm.call` with `args` (its model and options), the system prompt, the
    /// few-shot `examples` (input, output) and `prompt`, rendered at each evaluation.
    Llm { call: Action, args: Tree, prompt: Tree, examples: Vec<(String, String)> },
    /// A block whose value is the verdict.
    Code(Step),
}

/// Runs `composed` for node `node` on `state`: the action's result.
pub(crate) fn run(composed: &Composed, host: &dyn Composer, node: &NodeName, state: &State) -> Result<Value, BoxError> {
    match composed {
        Composed::Reflection(reflection) => reflection.run(host, node, state),
    }
}

/// The system prompt of an LLM evaluator (The Edge Agent's).
const JUDGE: &str = "You are an evaluation assistant. Evaluate the given output and respond with JSON:
{
  \"valid\": true/false,
  \"score\": 0.0-1.0,
  \"reason\": \"explanation\",
  \"suggestions\": [\"suggestion1\", \"suggestion2\"]
}
Only respond with valid JSON, no other text.";

/// An evaluation: whether the output passed, its score, and why not.
struct Verdict {
    valid: bool,
    score: f64,
    errors: Vec<Value>,
}

impl Reflection {
    fn run(&self, host: &dyn Composer, node: &NodeName, state: &State) -> Result<Value, BoxError> {
        let mut work = state.as_map().clone();
        let mut history: Vec<Value> = Vec::new();
        let mut best: (Value, f64) = (Value::Null, -1.0);
        let mut iteration = 0;
        while iteration < self.max_iterations {
            iteration += 1;
            work.insert("reflection_iteration".into(), json!(iteration));
            work.insert("reflection_history".into(), Value::Array(history.clone()));
            let output = match self.generator.run(host, node, &work, &Map::new()) {
                Ok(output) => output,
                Err(e) => {
                    // A failing generator is an attempt that failed: the loop goes on.
                    let errors = json!([{ "message": format!("Generator failed: {e}") }]);
                    history.push(json!({
                        "iteration": iteration, "output": null, "score": 0.0, "valid": false, "errors": errors,
                    }));
                    work.insert("reflection_errors".into(), errors);
                    continue;
                }
            };
            work.insert("reflection_output".into(), output.clone());
            let verdict = self.evaluate(host, node, &work, &output)?;
            history.push(json!({
                "iteration": iteration,
                "output": output,
                "score": verdict.score,
                "valid": verdict.valid,
                "errors": verdict.errors,
            }));
            if verdict.score > best.1 {
                best = (output.clone(), verdict.score);
            }
            work.insert("reflection_best".into(), best.0.clone());
            work.insert("reflection_best_score".into(), json!(best.1));
            work.insert("reflection_errors".into(), Value::Array(verdict.errors.clone()));
            if verdict.valid {
                let mut result = json!({
                    "reflection_iteration": iteration,
                    "reflection_output": output,
                    "reflection_errors": [],
                    "reflection_history": history,
                    "reflection_best": output,
                    "reflection_best_score": verdict.score,
                    "success": true,
                    "valid": true,
                });
                spread(&mut result, &output);
                return Ok(result);
            }
            if iteration < self.max_iterations {
                if let Some(corrector) = &self.corrector {
                    match corrector.run(host, node, &work, &Map::new()) {
                        // The corrector's keys go into the working state the next attempt sees.
                        Ok(Value::Object(keys)) => work.extend(keys),
                        Ok(_) => {}
                        Err(e) => {
                            if let Some(Value::Array(errors)) = work.get_mut("reflection_errors") {
                                errors.push(
                                    json!({ "message": format!("Corrector failed: {e}"), "type": "corrector_error" }),
                                );
                            }
                        }
                    }
                }
            }
        }
        let output = match self.on_failure {
            OnFailure::ReturnBest => best.0.clone(),
            OnFailure::ReturnLast => history.last().map_or(Value::Null, |h| h["output"].clone()),
            OnFailure::Raise => {
                let attempts: Vec<String> = history
                    .iter()
                    .map(|h| {
                        let why: Vec<&str> = h["errors"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|e| e["message"].as_str())
                            .collect();
                        format!("attempt {}: {}", h["iteration"], why.join("; "))
                    })
                    .collect();
                return Err(format!(
                    "no output passed its evaluator after {} iterations (`on_failure: raise`): {}",
                    self.max_iterations,
                    attempts.join(" | ")
                )
                .into());
            }
        };
        let mut result = json!({
            "reflection_iteration": iteration,
            "reflection_output": output,
            "reflection_errors": history.last().map_or(json!([]), |h| h["errors"].clone()),
            "reflection_history": history,
            "reflection_best": best.0,
            "reflection_best_score": best.1,
            "success": false,
            "valid": false,
            "exhausted": true,
        });
        spread(&mut result, &output);
        Ok(result)
    }

    fn evaluate(
        &self,
        host: &dyn Composer,
        node: &NodeName,
        work: &Map<String, Value>,
        output: &Value,
    ) -> Result<Verdict, BoxError> {
        Ok(match &self.evaluator {
            Evaluator::Schema(validator, schema) => {
                let output = coerce(output, schema);
                let errors: Vec<Value> = validator
                    .iter_errors(&output)
                    .map(|e| {
                        let path: Vec<String> = e.instance_path().iter().map(|p| p.to_string()).collect();
                        json!({
                            "path": path.join("."),
                            "message": e.to_string(),
                            "schema_path": e.schema_path().to_string(),
                        })
                    })
                    .collect();
                let valid = errors.is_empty();
                Verdict { valid, score: if valid { 1.0 } else { 0.0 }, errors }
            }
            Evaluator::Llm { call, args, prompt, examples } => {
                let mut seen = work.clone();
                seen.insert("output_to_evaluate".into(), output.clone());
                let seen = State::from_map(seen);
                let judged = (|| -> Result<Value, BoxError> {
                    let prompt = match host.render_on(prompt, &seen)? {
                        Value::String(s) => s,
                        other => other.to_string(),
                    };
                    let mut messages = vec![json!({ "role": "system", "content": JUDGE })];
                    for (input, answer) in examples {
                        messages.push(json!({ "role": "user", "content": input }));
                        messages.push(json!({ "role": "assistant", "content": answer }));
                    }
                    messages.push(json!({ "role": "user", "content": prompt }));
                    let mut args = host.render_on(args, &seen)?;
                    if let Value::Object(map) = &mut args {
                        map.insert("messages".into(), Value::Array(messages));
                    }
                    actions::call(call, &Call { host: host.host(), node, state: &seen }, &args)
                })();
                match judged {
                    Ok(answer) => judge(answer["content"].as_str().unwrap_or_default()),
                    Err(e) => Verdict {
                        valid: false,
                        score: 0.0,
                        errors: vec![json!({ "message": format!("LLM evaluation failed: {e}") })],
                    },
                }
            }
            Evaluator::Code(step) => {
                let mut extra = Map::new();
                extra.insert("output".into(), output.clone());
                let mut seen = work.clone();
                seen.insert("output".into(), output.clone());
                match step.run(host, node, &seen, &extra) {
                    Ok(value) => verdict(&value),
                    Err(e) => Verdict {
                        valid: false,
                        score: 0.0,
                        errors: vec![json!({ "message": format!("Custom evaluator error: {e}") })],
                    },
                }
            }
        })
    }
}

impl Step {
    /// Runs the step on the working state `work` (`extra`: more names for a Python block).
    fn run(
        &self,
        host: &dyn Composer,
        node: &NodeName,
        work: &Map<String, Value>,
        extra: &Map<String, Value>,
    ) -> Result<Value, BoxError> {
        let state = State::from_map(work.clone());
        match self {
            Step::Action { name, action, args } => {
                let args = host.render_on(args, &state)?;
                let result = actions::call(action, &Call { host: host.host(), node, state: &state }, &args)?;
                Ok(if name.starts_with("llm.") { reply(&result) } else { result })
            }
            Step::Lua(chunk) => Ok(match host.run_lua(*chunk, &state)? {
                Some(mut keys) => keys.remove("result").unwrap_or(Value::Object(keys)),
                None => Value::Null,
            }),
            Step::Python(block) => {
                let mut names = Map::new();
                for key in ["reflection_output", "reflection_errors", "reflection_iteration"] {
                    names.insert(key.into(), work.get(key).cloned().unwrap_or(Value::Null));
                }
                names.extend(extra.clone());
                Ok(block.value(state.shared(), &names)?)
            }
        }
    }
}

/// What an LLM step produced: its reply's text, read as JSON when it is JSON (inside a
/// Markdown code fence or not).
fn reply(result: &Value) -> Value {
    let Some(text) = result.get("content").and_then(Value::as_str) else { return result.clone() };
    let trimmed = text.trim();
    let unfenced = trimmed
        .strip_prefix("```")
        .map(|rest| rest.trim_start_matches(|c: char| c.is_ascii_alphanumeric()))
        .and_then(|rest| rest.trim_end().strip_suffix("```"))
        .unwrap_or(trimmed)
        .trim();
    match serde_json::from_str::<Value>(unfenced) {
        Ok(value @ (Value::Object(_) | Value::Array(_))) => value,
        _ => Value::String(text.to_owned()),
    }
}

/// An LLM judge's answer as a verdict: its JSON (or the first `{…}` in it); failing that, a
/// reply that says "valid" and not "invalid" passes (The Edge Agent's reading).
fn judge(text: &str) -> Verdict {
    let text = text.trim();
    let parsed = serde_json::from_str::<Value>(text).ok().or_else(|| {
        let (start, end) = (text.find('{')?, text.rfind('}')?);
        (start < end).then(|| serde_json::from_str(&text[start..=end]).ok()).flatten()
    });
    match parsed {
        Some(Value::Object(answer)) => {
            let valid = answer.get("valid").and_then(Value::as_bool).unwrap_or(false);
            let score = answer.get("score").and_then(Value::as_f64).unwrap_or(if valid { 1.0 } else { 0.0 });
            let errors = if valid {
                Vec::new()
            } else {
                vec![json!({ "message": answer.get("reason").and_then(Value::as_str).unwrap_or_default() })]
            };
            Verdict { valid, score, errors }
        }
        _ => {
            let lower = text.to_lowercase();
            let valid = lower.contains("valid") && !lower.contains("invalid");
            Verdict {
                valid,
                score: if valid { 1.0 } else { 0.0 },
                errors: if valid { Vec::new() } else { vec![json!({ "message": text })] },
            }
        }
    }
}

/// A block evaluator's value as a verdict: a bool, a score (valid from 0.5 up), or an object
/// with `valid`, `score`, `errors`.
fn verdict(value: &Value) -> Verdict {
    match value {
        Value::Bool(valid) => Verdict {
            valid: *valid,
            score: if *valid { 1.0 } else { 0.0 },
            errors: if *valid { Vec::new() } else { vec![json!({ "message": "Validation failed" })] },
        },
        Value::Number(n) => {
            let score = n.as_f64().unwrap_or(0.0);
            let valid = score >= 0.5;
            Verdict {
                valid,
                score,
                errors: if valid { Vec::new() } else { vec![json!({ "message": format!("Score {score} below 0.5") })] },
            }
        }
        Value::Object(map) => {
            let valid = map.get("valid").is_some_and(|v| v.as_bool().unwrap_or(false));
            let score = map.get("score").and_then(Value::as_f64).unwrap_or(if valid { 1.0 } else { 0.0 });
            let errors = match map.get("errors") {
                Some(Value::Array(errors)) => errors.clone(),
                _ => Vec::new(),
            };
            Verdict { valid, score, errors }
        }
        other => {
            let valid = !matches!(other, Value::Null) && other.as_str() != Some("");
            Verdict {
                valid,
                score: if valid { 1.0 } else { 0.0 },
                errors: if valid { Vec::new() } else { vec![json!({ "message": "Validation failed" })] },
            }
        }
    }
}

/// `data` with strings turned into the scalar types `schema` asks for, through objects'
/// properties and arrays' items (The Edge Agent's coercion before validating).
fn coerce(data: &Value, schema: &Value) -> Value {
    let Some(kind) = schema.get("type").and_then(Value::as_str) else { return data.clone() };
    match (kind, data) {
        ("integer", Value::String(s)) => s.trim().parse::<i64>().map_or_else(|_| data.clone(), Value::from),
        ("number", Value::String(s)) => s
            .trim()
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map_or_else(|| data.clone(), Value::Number),
        ("boolean", Value::String(s)) => Value::Bool(matches!(s.to_lowercase().as_str(), "true" | "1" | "yes")),
        ("string", Value::String(_)) => data.clone(),
        ("string", Value::Null) => Value::String("None".into()),
        ("string", Value::Bool(b)) => Value::String(if *b { "True" } else { "False" }.into()),
        ("string", Value::Number(n)) => Value::String(n.to_string()),
        ("object", Value::Object(map)) => {
            let properties = schema.get("properties");
            Value::Object(
                map.iter()
                    .map(|(k, v)| match properties.and_then(|p| p.get(k)) {
                        Some(s) => (k.clone(), coerce(v, s)),
                        None => (k.clone(), v.clone()),
                    })
                    .collect(),
            )
        }
        ("array", Value::Array(items)) => {
            let item = schema.get("items").cloned().unwrap_or(Value::Null);
            Value::Array(items.iter().map(|v| coerce(v, &item)).collect())
        }
        _ => data.clone(),
    }
}

/// `output`'s keys into `result` (an object), or `output` under `result`.
fn spread(result: &mut Value, output: &Value) {
    let Value::Object(map) = result else { return };
    match output {
        Value::Object(keys) => {
            for (k, v) in keys {
                map.insert(k.clone(), v.clone());
            }
        }
        other => {
            map.insert("result".into(), other.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_llm_reply_is_read_as_json_when_it_is_json() {
        assert_eq!(reply(&json!({ "content": "```json\n{\"a\": 1}\n```" })), json!({ "a": 1 }));
        assert_eq!(reply(&json!({ "content": " {\"a\": 1} " })), json!({ "a": 1 }));
        assert_eq!(reply(&json!({ "content": "def f(): pass" })), json!("def f(): pass"));
        assert_eq!(reply(&json!({ "content": "42" })), json!("42"));
    }

    #[test]
    fn a_judges_answer_is_a_verdict() {
        let v = judge("Sure: {\"valid\": false, \"score\": 0.4, \"reason\": \"too short\"}");
        assert!(!v.valid);
        assert_eq!(v.score, 0.4);
        assert_eq!(v.errors, vec![json!({ "message": "too short" })]);
        assert!(judge("This is valid.").valid);
        assert!(!judge("This is invalid.").valid);
    }

    #[test]
    fn strings_are_coerced_to_the_schemas_types() {
        let schema = json!({
            "type": "object",
            "properties": { "age": { "type": "integer" }, "ok": { "type": "boolean" }, "tags": { "type": "array", "items": { "type": "number" } } }
        });
        let data = json!({ "age": "42", "ok": "yes", "tags": ["1.5", "x"], "other": "7" });
        assert_eq!(coerce(&data, &schema), json!({ "age": 42, "ok": true, "tags": [1.5, "x"], "other": "7" }));
    }

    #[test]
    fn a_blocks_value_is_a_verdict() {
        assert!(verdict(&json!(true)).valid);
        assert!(!verdict(&json!(0.2)).valid);
        let v = verdict(&json!({ "valid": false, "score": 0.5, "errors": [{ "message": "m" }] }));
        assert_eq!((v.valid, v.score, v.errors.len()), (false, 0.5, 1));
    }
}
