//! The Edge Agent's actions that compose steps of their own, each step a registered or
//! built-in action (rendered against the action's working state) or a `run:` block:
//!
//! - `reason.cot`, `reason.react`, `reason.self_correct`, `reason.decompose` — The Edge Agent's
//!   reasoning patterns: its prompts, a few `llm.call`s each, its results (a failed call is
//!   `{error, success: false}` in the result, as there); `reason.react` calls its `tools`.
//! - `reflection.loop` — generate → evaluate → correct until the output passes or the
//!   iterations run out. Evaluators: a JSON Schema (draft 7, with The Edge Agent's coercion of
//!   strings to the schema's scalar types), an LLM judge (`llm.call` with its system prompt and
//!   few-shot `examples`), or a `run:` block whose value is `true`/`false`, a score, or
//!   `{valid, score, errors, suggestions}`.
//!
//! The loader (`load.rs`) compiles a node's `with:` into a [`Composed`] (templates
//! stay unrendered: they are rendered at each step, against the working state, where
//! `state.reflection_output` and its kin are the loop's); the graph runs it through
//! [`run`], reaching what only it has (templates, Lua) through the [`Composer`] trait (`registry.rs`).
//!
//! The Edge Agent's actions that run steps of their own (`reflection.loop`: generate → evaluate →
//! correct; `reason.cot`, `reason.react`, `reason.self_correct`, `reason.decompose`: its reasoning
//! prompts over `llm.call`). The loader (`load.rs`) compiles the node's `with:` into
//! `Exec::Composed`: each step an action with its arguments as an unrendered `Tree` or a Lua/Python
//! block, the evaluator a JSON Schema compiled at load (`jsonschema`, draft 7; `$ref` files read at
//! load), an LLM judge or a block. `compose::run` renders each step against the loop's working
//! state (`reflection_output`, `reflection_errors`, …) through the `Composer` trait and calls the
//! step's action with `actions::call`, so an inner `llm.call` is the built-in one (settings,
//! providers, retries).

use crate::actions::{self, Action, Call, Composer};
use crate::lang::lua::ChunkId;
use crate::lang::template::Tree;
use crate::state::State;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use tea_runtime::{BoxError, NodeName};

/// A composed action, compiled from its node's `with:`.
pub(crate) enum Composed {
    Reflection(Box<Reflection>),
    Reason(Reason),
    /// `retry.loop`.
    Retry(Box<crate::actions::extraction::Retry>),
    /// `validate.extraction`.
    Extraction(Arc<crate::actions::extraction::Extraction>),
    /// `agent.dispatch`, `agent.parallel`, `agent.sequential`, `agent.coordinate`.
    Crew(crate::actions::crew::Crew),
    /// `plan.decompose`, `plan.execute`, `plan.replan`, `plan.status`.
    Plan(crate::actions::planning::Plan),
    /// The Edge Agent's browser build's `lua.eval`: `with.code`, compiled at load; the table
    /// it returns is the result.
    LuaEval(ChunkId),
    /// Its browser build's `return`: `with.value` (else the whole `with:`), rendered.
    Return(Tree),
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
    Python(crate::lang::python::Block),
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
        Composed::Reason(reason) => Ok(reason.run(host, node, state)),
        Composed::Retry(retry) => retry.run(host, node, state),
        Composed::Extraction(extraction) => extraction.run(host, node, state),
        Composed::Crew(crew) => crew.run(host, node, state),
        Composed::Plan(plan) => plan.run(host, node, state),
        Composed::LuaEval(chunk) => Ok(host.run_lua(*chunk, state)?.map_or(Value::Null, Value::Object)),
        Composed::Return(tree) => {
            let with = host.render_on(tree, state)?;
            Ok(match with {
                Value::Object(mut map) if map.contains_key("value") => map.remove("value").unwrap_or(Value::Null),
                other => other,
            })
        }
    }
}

/// `reason.cot`, `reason.react`, `reason.self_correct`, `reason.decompose`: The Edge Agent's
/// reasoning patterns, each a few `llm.call`s with its prompts. `args` is the node's `with:`;
/// what is not the pattern's own goes to each `llm.call` (`provider`, `max_tokens`, …).
pub(crate) struct Reason {
    pub(crate) kind: ReasonKind,
    pub(crate) args: Tree,
    /// `llm.call`.
    pub(crate) llm: Action,
    /// `reason.react`'s tools: each name with its action (`None`: one tea lacks, which the
    /// agent is offered and, called, observes missing, as The Edge Agent's registry would say).
    pub(crate) tools: Vec<(String, Option<Action>)>,
    /// Written as `reason.dspy.cot` / `reason.dspy.react`: The Edge Agent's fallback when DSPy
    /// is not there, which tea always takes (it embeds no DSPy): the native pattern, its
    /// result marked `dspy_module: native_fallback`, `dspy_available: false`; the DSPy-only
    /// arguments (`signature`, `compiled_key`) are read and left aside.
    pub(crate) dspy: bool,
}

/// Which reasoning pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReasonKind {
    Cot,
    React,
    SelfCorrect,
    Decompose,
}

impl ReasonKind {
    /// The action's name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            ReasonKind::Cot => "reason.cot",
            ReasonKind::React => "reason.react",
            ReasonKind::SelfCorrect => "reason.self_correct",
            ReasonKind::Decompose => "reason.decompose",
        }
    }

    /// The pattern's own arguments (the rest go to `llm.call`); the first is required.
    pub(crate) fn keys(self) -> &'static [&'static str] {
        match self {
            ReasonKind::Cot => &["problem", "model", "thinking_format", "few_shot_examples", "temperature"],
            ReasonKind::React => &["goal", "model", "tools", "max_steps", "temperature"],
            ReasonKind::SelfCorrect => &[
                "task",
                "model",
                "generator_model",
                "critic_model",
                "improvement_rounds",
                "critic_prompt",
                "temperature",
            ],
            ReasonKind::Decompose => &["problem", "model", "max_depth", "synthesis_prompt", "temperature"],
        }
    }

    /// The arguments only the DSPy form (`reason.dspy.cot`, `reason.dspy.react`) adds.
    pub(crate) fn dspy_keys(self) -> &'static [&'static str] {
        match self {
            ReasonKind::Cot => &["signature", "compiled_key"],
            ReasonKind::React => &["signature"],
            ReasonKind::SelfCorrect | ReasonKind::Decompose => &[],
        }
    }

    /// Why a failure is reported, as The Edge Agent words it.
    fn failed(self) -> &'static str {
        match self {
            ReasonKind::Cot => "Chain-of-thought reasoning failed",
            ReasonKind::React => "ReAct reasoning failed",
            ReasonKind::SelfCorrect => "Self-correction failed",
            ReasonKind::Decompose => "Problem decomposition failed",
        }
    }
}

/// The most rounds a reasoning pattern runs (`max_steps`, `improvement_rounds`).
const MAX_ROUNDS: u64 = 1000;

/// `reason.cot`'s thinking formats.
pub(crate) const THINKING_FORMATS: &[(&str, &str)] = &[
    (
        "step_by_step",
        "Think through this step by step:\n1. First, identify the key components of the problem\n2. Work through each component systematically\n3. Show your reasoning at each step\n4. Arrive at a final answer",
    ),
    (
        "pros_cons",
        "Analyze this by considering pros and cons:\n1. List the positive aspects/arguments\n2. List the negative aspects/arguments\n3. Weigh the evidence\n4. Reach a balanced conclusion",
    ),
    (
        "tree",
        "Think through this using tree-structured reasoning:\n1. Identify the main branches of analysis\n2. Explore each branch systematically\n3. Combine insights from all branches\n4. Synthesize a final answer",
    ),
    (
        "first_principles",
        "Reason from first principles:\n1. Identify the fundamental truths or axioms\n2. Build up your reasoning from these foundations\n3. Question assumptions at each step\n4. Derive the answer logically",
    ),
];

const COT_SYSTEM: &str = "You are a careful reasoning assistant. When given a problem, you will think through it systematically before providing your answer.\n\nYour response MUST be valid JSON in this exact format:\n{\n  \"thinking\": \"Your detailed step-by-step reasoning here...\",\n  \"answer\": \"Your final answer here (can be a string, number, or structured data)\"\n}\n\n";

const REACT_SYSTEM: &str = "You are a ReAct agent. For each step, you will:\n1. THINK about what you need to do\n2. Decide on an ACTION to take (or conclude if you have the answer)\n3. Wait for the OBSERVATION from the action\n\nYou have access to these tools:\n{tools}\n\nYour response MUST be valid JSON in one of these formats:\n\nFor taking an action:\n{\n  \"thought\": \"Your reasoning about what to do next...\",\n  \"action\": \"tool_name\",\n  \"action_input\": {\"param1\": \"value1\", \"param2\": \"value2\"}\n}\n\nFor providing the final answer (when you have enough information):\n{\n  \"thought\": \"Your reasoning about why you can now answer...\",\n  \"action\": \"final_answer\",\n  \"action_input\": {\"answer\": \"Your final answer here\"}\n}\n\nThink carefully and only use the final_answer action when you truly have the answer.";

const SELF_CORRECT_SYSTEM: &str = "You are a self-improving assistant. You will generate an initial response, then critique and improve it.\n\nYour response MUST be valid JSON in this format:\n{\n  \"output\": \"Your response to the task\",\n  \"confidence\": 0.0 to 1.0,\n  \"potential_issues\": [\"Issue 1\", \"Issue 2\", ...]\n}";

const CRITIC_SYSTEM: &str = "You are a critical reviewer. Analyze the given output and identify improvements.\n\n{critic}\n\nYour response MUST be valid JSON in this format:\n{\n  \"issues\": [\"Issue 1\", \"Issue 2\", ...],\n  \"suggestions\": [\"Suggestion 1\", \"Suggestion 2\", ...],\n  \"improved_output\": \"The improved version of the output\",\n  \"improvement_score\": 0.0 to 1.0\n}";

const DECOMPOSE_SYSTEM: &str = "You are a problem decomposition expert. Break down complex problems into smaller, manageable sub-problems.\n\nYour response MUST be valid JSON in this format:\n{\n  \"analysis\": \"Brief analysis of the problem\",\n  \"sub_problems\": [\n    {\"id\": 1, \"description\": \"Sub-problem 1\", \"dependencies\": []},\n    {\"id\": 2, \"description\": \"Sub-problem 2\", \"dependencies\": [1]}\n  ],\n  \"synthesis_strategy\": \"How to combine the sub-answers\"\n}";

const SUB_PROBLEM_SYSTEM: &str = "You are solving a specific sub-problem as part of a larger problem.\n\nMain problem context: {problem}\n\nYour response MUST be valid JSON in this format:\n{\n  \"reasoning\": \"Your reasoning process\",\n  \"answer\": \"Your answer to this sub-problem\",\n  \"confidence\": 0.0 to 1.0\n}";

const SYNTHESIS_SYSTEM: &str = "You are synthesizing sub-answers into a final answer.\n\n{synthesis}\n\nYour response MUST be valid JSON in this format:\n{\n  \"reasoning\": \"How you combined the sub-answers\",\n  \"final_answer\": \"The synthesized final answer\",\n  \"confidence\": 0.0 to 1.0\n}";

/// `value` as a prompt's text: a string as it is, anything else as JSON.
fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The JSON object in an LLM's reply: the whole reply, a fenced block, or the outermost
/// braces (The Edge Agent's reading).
fn json_in(content: &str) -> Option<Map<String, Value>> {
    let object = |t: &str| match serde_json::from_str::<Value>(t.trim()) {
        Ok(Value::Object(map)) => Some(map),
        _ => None,
    };
    object(content)
        .or_else(|| {
            let start = content.find("```")? + 3;
            let rest = content[start..].strip_prefix("json").unwrap_or(&content[start..]);
            object(&rest[..rest.find("```")?])
        })
        .or_else(|| {
            let (start, end) = (content.find('{')?, content.rfind('}')?);
            (start < end).then(|| object(&content[start..=end])).flatten()
        })
}

impl Reason {
    /// Runs the pattern: its result, or (as The Edge Agent's) `{error, success: false,
    /// reasoning_trace}` when a call fails.
    fn run(&self, host: &dyn Composer, node: &NodeName, state: &State) -> Value {
        let mut trace = Vec::new();
        let mut result = match self.attempt(host, node, state, &mut trace) {
            Ok(result) => result,
            Err(e) => json!({
                "error": format!("{}: {e}", self.kind.failed()),
                "success": false,
                "reasoning_trace": trace,
            }),
        };
        if self.dspy {
            if let Value::Object(map) = &mut result {
                map.insert("dspy_module".to_owned(), json!("native_fallback"));
                map.insert("dspy_available".to_owned(), json!(false));
            }
        }
        result
    }

    fn attempt(
        &self,
        host: &dyn Composer,
        node: &NodeName,
        state: &State,
        trace: &mut Vec<Value>,
    ) -> Result<Value, BoxError> {
        let Value::Object(args) = host.render_on(&self.args, state)? else {
            return Err(format!("`with:` of `{}` must give a mapping", self.kind.name()).into());
        };
        let own = self.kind.keys();
        let dspy_own = if self.dspy { self.kind.dspy_keys() } else { &[] };
        let options: Map<String, Value> = args
            .iter()
            .filter(|(k, _)| !own.contains(&k.as_str()) && !dspy_own.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let arg = |key: &str| args.get(key).filter(|v| !v.is_null());
        let model = arg("model").cloned();
        // A bound on the pattern's calls: at most MAX_ROUNDS, as a `while_loop`'s passes.
        let count = |key: &str, default: u64| -> Result<u64, BoxError> {
            let n: Result<u64, BoxError> = match arg(key) {
                None => Ok(default),
                Some(Value::Number(n)) => {
                    n.as_u64().ok_or_else(|| format!("`{key}` must be a whole number, not {n}").into())
                }
                Some(Value::String(s)) => {
                    s.trim().parse().map_err(|_| format!("`{key}` must be a whole number, not `{s}`").into())
                }
                Some(other) => Err(format!("`{key}` must be a whole number, not {other}").into()),
            };
            let n = n?;
            if n > MAX_ROUNDS {
                return Err(format!("`{key}` is {n}, more than the {MAX_ROUNDS} a pattern may run").into());
            }
            Ok(n)
        };
        // One chat call: the reply's text.
        let ask = |model: Option<&Value>, system: String, user: String| -> Result<String, BoxError> {
            self.chat(
                host,
                node,
                state,
                &options,
                args.get("temperature"),
                model,
                vec![json!({ "role": "system", "content": system }), json!({ "role": "user", "content": user })],
            )
        };
        let shown_model = model.clone().unwrap_or(Value::Null);
        match self.kind {
            ReasonKind::Cot => {
                let problem = text(arg("problem").ok_or("`problem` is missing")?);
                let format = arg("thinking_format").and_then(Value::as_str).unwrap_or("step_by_step").to_owned();
                let how = THINKING_FORMATS.iter().find(|(f, _)| *f == format).unwrap_or(&THINKING_FORMATS[0]).1;
                let mut system = format!("{COT_SYSTEM}{how}");
                if let Some(Value::Array(examples)) = arg("few_shot_examples") {
                    system.push_str("\n\nHere are some examples:\n");
                    for (i, ex) in examples.iter().enumerate() {
                        let field = |k: &str| text(ex.get(k).unwrap_or(&Value::Null));
                        system.push_str(&format!(
                            "\nExample {}:\nProblem: {}\nThinking: {}\nAnswer: {}",
                            i + 1,
                            field("problem"),
                            field("thinking"),
                            field("answer")
                        ));
                    }
                }
                trace.push(json!({ "step": "cot_request", "problem": problem, "thinking_format": format, "model": shown_model }));
                let reply = ask(model.as_ref(), system, format!("Problem: {problem}"))?;
                let parsed =
                    json_in(&reply).ok_or_else(|| format!("Could not parse JSON from response: {}", prefix(&reply)))?;
                let thinking = parsed.get("thinking").cloned().unwrap_or(json!(""));
                let answer = parsed.get("answer").cloned().unwrap_or(json!(""));
                trace.push(json!({ "step": "cot_response", "thinking": thinking, "answer": answer }));
                Ok(json!({
                    "thinking": thinking,
                    "answer": answer,
                    "reasoning_trace": trace,
                    "model": shown_model,
                    "thinking_format": format,
                    "reasoning_thinking": thinking,
                    "reasoning_answer": answer,
                }))
            }
            ReasonKind::React => {
                let goal = text(arg("goal").ok_or("`goal` is missing")?);
                let max_steps = count("max_steps", 10)?;
                let mut tools: Vec<String> =
                    self.tools.iter().map(|(name, _)| format!("- {name}: Execute the {name} action")).collect();
                tools.push("- final_answer: Use this when you have the final answer to the goal".to_owned());
                let names: Vec<&str> = self.tools.iter().map(|(n, _)| n.as_str()).collect();
                let mut messages = vec![
                    json!({ "role": "system", "content": REACT_SYSTEM.replace("{tools}", &tools.join("\n")) }),
                    json!({ "role": "user", "content": format!("Goal: {goal}") }),
                ];
                trace.push(json!({ "step": "react_start", "goal": goal, "tools": names, "max_steps": max_steps, "model": shown_model }));
                let mut steps = Vec::new();
                for step in 1..=max_steps {
                    let reply = self.chat(
                        host,
                        node,
                        state,
                        &options,
                        args.get("temperature"),
                        model.as_ref(),
                        messages.clone(),
                    )?;
                    let Some(parsed) = json_in(&reply) else {
                        trace
                            .push(json!({ "step": format!("step_{step}_parse_error"), "raw_content": prefix(&reply) }));
                        messages.push(json!({ "role": "assistant", "content": reply }));
                        messages.push(json!({ "role": "user", "content": "Your response was not valid JSON. Please respond with valid JSON." }));
                        continue;
                    };
                    let action = parsed.get("action").and_then(Value::as_str).unwrap_or_default().to_owned();
                    let input = parsed.get("action_input").cloned().unwrap_or(json!({}));
                    let mut record = json!({
                        "step": step,
                        "thought": parsed.get("thought").cloned().unwrap_or(json!("")),
                        "action": action,
                        "action_input": input,
                    });
                    if action == "final_answer" {
                        let answer = input.get("answer").cloned().unwrap_or(input.clone());
                        record["observation"] = json!("Goal achieved.");
                        steps.push(record);
                        trace.push(json!({ "step": "react_complete", "total_steps": step, "final_answer": answer }));
                        return Ok(json!({
                            "steps": steps,
                            "final_answer": answer,
                            "reasoning_trace": trace,
                            "react_steps": steps,
                            "reasoning_answer": answer,
                            "model": shown_model,
                            "total_steps": step,
                        }));
                    }
                    let observation = match self.tools.iter().find(|(n, _)| *n == action) {
                        Some((_, Some(tool))) => {
                            let input = if input.is_object() { input.clone() } else { json!({ "input": input }) };
                            match actions::call(tool, &Call { host: host.host(), node, state }, &input) {
                                Ok(result) => result.to_string(),
                                Err(e) => format!("Error executing {action}: {e}"),
                            }
                        }
                        Some((_, None)) => format!("Action {action} not found in registry"),
                        None => format!("Unknown action: {action}. Available: {names:?}"),
                    };
                    record["observation"] = json!(observation);
                    trace.push(json!({ "step": format!("step_{step}"), "action": action, "observation": observation }));
                    steps.push(record);
                    messages.push(json!({ "role": "assistant", "content": reply }));
                    messages.push(json!({ "role": "user", "content": format!("Observation: {observation}") }));
                }
                trace.push(json!({ "step": "react_max_steps", "total_steps": max_steps }));
                Ok(json!({
                    "steps": steps,
                    "final_answer": null,
                    "reasoning_trace": trace,
                    "react_steps": steps,
                    "model": shown_model,
                    "total_steps": max_steps,
                    "warning": format!("Max steps ({max_steps}) reached without achieving goal"),
                }))
            }
            ReasonKind::SelfCorrect => {
                let task = text(arg("task").ok_or("`task` is missing")?);
                let rounds = count("improvement_rounds", 2)?;
                let generator = arg("generator_model").or(model.as_ref()).cloned();
                let critic_model = arg("critic_model").or(model.as_ref()).cloned();
                let reply = ask(generator.as_ref(), SELF_CORRECT_SYSTEM.to_owned(), format!("Task: {task}"))?;
                let (mut output, confidence, issues) = match json_in(&reply) {
                    Some(p) => (
                        p.get("output").cloned().unwrap_or(json!(reply)),
                        p.get("confidence").cloned().unwrap_or(json!(0.5)),
                        p.get("potential_issues").cloned().unwrap_or(json!([])),
                    ),
                    None => (json!(reply), json!(0.5), json!([])),
                };
                let mut history = vec![json!({
                    "round": 0, "type": "initial", "output": output, "confidence": confidence, "potential_issues": issues,
                })];
                trace.push(json!({ "step": "initial_generation", "confidence": confidence }));
                let critic = arg("critic_prompt").map(text).unwrap_or_else(|| {
                    "Identify any issues with correctness, clarity, completeness, and style.".to_owned()
                });
                for round in 1..=rounds {
                    let reply = match ask(
                        critic_model.as_ref(),
                        CRITIC_SYSTEM.replace("{critic}", &critic),
                        format!("Task: {task}\n\nCurrent output:\n{}", text(&output)),
                    ) {
                        Ok(reply) => reply,
                        Err(e) => {
                            trace.push(
                                json!({ "step": format!("critique_round_{round}_error"), "error": e.to_string() }),
                            );
                            continue;
                        }
                    };
                    let Some(p) = json_in(&reply) else {
                        trace.push(json!({ "step": format!("critique_round_{round}_parse_error"), "raw_content": prefix(&reply) }));
                        continue;
                    };
                    let improved = p.get("improved_output").cloned().unwrap_or(output.clone());
                    let score = p.get("improvement_score").cloned().unwrap_or(json!(0.5));
                    let found = p.get("issues").cloned().unwrap_or(json!([]));
                    history.push(json!({
                        "round": round,
                        "type": "improvement",
                        "issues_found": found,
                        "suggestions": p.get("suggestions").cloned().unwrap_or(json!([])),
                        "output": improved,
                        "improvement_score": score,
                    }));
                    trace.push(json!({ "step": format!("improvement_round_{round}"), "issues_count": found.as_array().map_or(0, Vec::len), "improvement_score": score }));
                    output = improved;
                }
                Ok(json!({
                    "output": output,
                    "improvement_history": history,
                    "reasoning_trace": trace,
                    "reasoning_answer": output,
                    "model": shown_model,
                    "generator_model": generator,
                    "critic_model": critic_model,
                    "rounds_completed": rounds,
                }))
            }
            ReasonKind::Decompose => {
                let problem = text(arg("problem").ok_or("`problem` is missing")?);
                trace.push(json!({ "step": "decompose_start", "problem": problem, "model": shown_model }));
                let reply = ask(model.as_ref(), DECOMPOSE_SYSTEM.to_owned(), format!("Problem: {problem}"))?;
                let parsed =
                    json_in(&reply).ok_or_else(|| format!("Could not parse JSON from response: {}", prefix(&reply)))?;
                let sub_problems = parsed.get("sub_problems").and_then(Value::as_array).cloned().unwrap_or_default();
                let strategy =
                    parsed.get("synthesis_strategy").map(text).unwrap_or_else(|| "Combine sub-answers".to_owned());
                trace.push(json!({ "step": "decomposition", "analysis": parsed.get("analysis").cloned().unwrap_or(json!("")), "sub_problems": sub_problems.len() }));
                let mut answers: Vec<Value> = Vec::new();
                for sub in &sub_problems {
                    let id = sub.get("id").cloned().unwrap_or(json!(answers.len() + 1));
                    let description = sub.get("description").map(text).unwrap_or_else(|| sub.to_string());
                    let mut context = String::new();
                    for dep in sub.get("dependencies").and_then(Value::as_array).into_iter().flatten() {
                        for answer in answers.iter().filter(|a| a.get("id") == Some(dep)) {
                            context.push_str(&format!("\nSub-answer {}: {}", text(dep), text(&answer["answer"])));
                        }
                    }
                    let answer = match ask(
                        model.as_ref(),
                        SUB_PROBLEM_SYSTEM.replace("{problem}", &problem),
                        format!("Sub-problem: {description}{context}"),
                    ) {
                        Err(e) => {
                            json!({ "id": id, "description": description, "error": e.to_string(), "answer": null })
                        }
                        Ok(reply) => match json_in(&reply) {
                            Some(p) => json!({
                                "id": id,
                                "description": description,
                                "reasoning": p.get("reasoning").cloned().unwrap_or(json!("")),
                                "answer": p.get("answer").cloned().unwrap_or(json!(reply)),
                                "confidence": p.get("confidence").cloned().unwrap_or(json!(0.5)),
                            }),
                            None => {
                                json!({ "id": id, "description": description, "reasoning": "", "answer": reply, "confidence": 0.5 })
                            }
                        },
                    };
                    trace.push(json!({ "step": format!("sub_problem_{}", text(&id)), "description": description }));
                    answers.push(answer);
                }
                let synthesis = arg("synthesis_prompt").map(text).unwrap_or(strategy);
                let listed = serde_json::to_string_pretty(&answers).unwrap_or_default();
                let reply = ask(
                    model.as_ref(),
                    SYNTHESIS_SYSTEM.replace("{synthesis}", &synthesis),
                    format!("Problem: {problem}\n\nSub-answers:\n{listed}"),
                )?;
                let (final_answer, reasoning) = match json_in(&reply) {
                    Some(p) => (
                        p.get("final_answer").cloned().unwrap_or(json!(reply)),
                        p.get("reasoning").cloned().unwrap_or(json!("")),
                    ),
                    None => (json!(reply), json!("")),
                };
                trace.push(
                    json!({ "step": "decompose_complete", "sub_problems_solved": answers.len(), "depth_used": 0 }),
                );
                Ok(json!({
                    "sub_problems": sub_problems,
                    "sub_answers": answers,
                    "final_answer": final_answer,
                    "synthesis_reasoning": reasoning,
                    "reasoning_trace": trace,
                    "reasoning_answer": final_answer,
                    "model": shown_model,
                    "depth_used": 0,
                }))
            }
        }
    }

    /// One `llm.call` with `messages`: the reply's text.
    #[allow(clippy::too_many_arguments)]
    fn chat(
        &self,
        host: &dyn Composer,
        node: &NodeName,
        state: &State,
        options: &Map<String, Value>,
        temperature: Option<&Value>,
        model: Option<&Value>,
        messages: Vec<Value>,
    ) -> Result<String, BoxError> {
        let mut args = options.clone();
        if let Some(model) = model {
            args.insert("model".into(), model.clone());
        }
        if let Some(t) = temperature.filter(|t| !t.is_null()) {
            args.insert("temperature".into(), t.clone());
        }
        args.insert("messages".into(), Value::Array(messages));
        let reply = actions::call(&self.llm, &Call { host: host.host(), node, state }, &Value::Object(args))?;
        Ok(reply.get("content").map(text).unwrap_or_default())
    }
}

/// The first 200 characters of `text`, for messages.
fn prefix(text: &str) -> String {
    let cut: String = text.chars().take(200).collect();
    if cut.len() < text.len() {
        format!("{cut}...")
    } else {
        cut
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
    fn json_is_found_in_a_reply_or_not_at_all() {
        assert_eq!(json_in("sure: {\"a\": 1} done"), Some(Map::from_iter([("a".into(), json!(1))])));
        assert_eq!(json_in("```json\n{\"b\": 2}\n```"), Some(Map::from_iter([("b".into(), json!(2))])));
        // Braces the wrong way round, an open fence, nothing: no JSON, and no panic.
        for reply in ["} {", "```json {", "{", "}", "", "```"] {
            assert_eq!(json_in(reply), None, "{reply}");
        }
        assert!(!judge("} {").valid);
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

/// Loading its `with:` (part of the loading layer, `crate::load`).
pub(crate) mod load;
