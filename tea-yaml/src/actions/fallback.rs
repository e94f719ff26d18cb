//! The Edge Agent's actions over Python libraries tea does not embed — DSPy's
//! `reason.dspy.compile`/`optimize`/`list_compiled`/`export`/`import`, TextGrad's
//! `learn.textgrad.*` and mem0's `memory.mem0.*` — run as The Edge Agent's Python engine runs
//! them where the library is not installed (its documented fallback), which is always the case
//! here:
//!
//! - DSPy's compile and optimize report `success: false` with its "DSPy not installed"
//!   error; its registry of compiled modules is empty. (`reason.dspy.cot` and
//!   `reason.dspy.react` run tea's `reason.cot`/`reason.react`: `compose.rs`.)
//! - TextGrad's prompt variables are kept (in the agent's memory, namespace `textgrad`: the
//!   first definition of a name wins, as there); `feedback` scores an output with its
//!   heuristic (word count, unsafe words); `optimize_prompt` and `reflection_corrector` leave
//!   the prompt as it is.
//! - mem0's `add` keeps the messages in the agent's memory (namespace `mem0_fallback`, key
//!   `mem0_fallback_{user_id}`, the last messages replacing the earlier ones) and answers as
//!   `memory.store`; `get_all` gives them back; `search` reports that semantic search needs
//!   mem0 (`success: false`, no results); `get`, `update`, `delete` and `test` report mem0
//!   missing.
//!
//! The loader warns once per file that the library is not there.
//!
//! The Edge Agent's DSPy (`reason.dspy.compile`, `optimize`, `list_compiled`, `export`, `import`),
//! TextGrad (`learn.textgrad.*`) and mem0 (`memory.mem0.*`) actions as its Python engine runs them
//! where the library is not installed: DSPy reported missing, TextGrad's variables and mem0's
//! messages kept (in the agent's memory, through the `fallback::Keep` trait `actions/registry.rs`
//! implements), TextGrad's heuristic feedback, mem0's search reported missing.
//! `reason.dspy.cot`/`react` are `actions/compose/`'s `reason.cot`/`react` marked `dspy_module:
//! native_fallback`.

use crate::state::State;
use serde_json::{json, Map, Value};
use tea_runtime::BoxError;

/// One of the fallback actions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fallback {
    DspyCompile,
    DspyOptimize,
    DspyListCompiled,
    DspyExport,
    DspyImport,
    TextgradVariable,
    TextgradFeedback,
    TextgradOptimize,
    TextgradCorrector,
    Mem0Add,
    Mem0Search,
    Mem0GetAll,
    Mem0Get,
    Mem0Update,
    Mem0Delete,
    Mem0Test,
}

/// The error The Edge Agent's DSPy actions give without DSPy.
const NO_DSPY: &str = "DSPy not installed. Install with: pip install the_edge_agent[dspy]";

/// Where these actions keep what they keep: the agent's key-value memory (`memory.rs`).
pub(crate) trait Keep {
    /// The value under `key` of `namespace`, if any.
    fn kept(&self, namespace: &str, key: &str) -> Result<Option<Value>, BoxError>;
    /// Keeps `value` under `key` of `namespace`: `memory.store`'s result (`{stored, key,
    /// namespace}`, or `stored: false` with its `error`).
    fn keep(&self, namespace: &str, key: &str, value: &Value) -> Result<Value, BoxError>;
}

/// The memory namespace TextGrad's prompt variables live in.
const VARIABLES: &str = "textgrad";
/// The memory namespace mem0's fallback keeps messages in (The Edge Agent's).
const MEM0: &str = "mem0_fallback";

impl Fallback {
    /// The action named `name` (TextGrad's also answer to `textgrad.NAME`, as there).
    pub(crate) fn named(name: &str) -> Option<Fallback> {
        let textgrad = name.strip_prefix("learn.textgrad.").or_else(|| name.strip_prefix("textgrad."));
        Some(match (name, textgrad) {
            ("reason.dspy.compile", _) => Fallback::DspyCompile,
            ("reason.dspy.optimize", _) => Fallback::DspyOptimize,
            ("reason.dspy.list_compiled", _) => Fallback::DspyListCompiled,
            ("reason.dspy.export", _) => Fallback::DspyExport,
            ("reason.dspy.import", _) => Fallback::DspyImport,
            (_, Some("variable")) => Fallback::TextgradVariable,
            (_, Some("feedback")) => Fallback::TextgradFeedback,
            (_, Some("optimize_prompt")) => Fallback::TextgradOptimize,
            (_, Some("reflection_corrector")) => Fallback::TextgradCorrector,
            ("memory.mem0.add", _) => Fallback::Mem0Add,
            ("memory.mem0.search", _) => Fallback::Mem0Search,
            ("memory.mem0.get_all", _) => Fallback::Mem0GetAll,
            ("memory.mem0.get", _) => Fallback::Mem0Get,
            ("memory.mem0.update", _) => Fallback::Mem0Update,
            ("memory.mem0.delete", _) => Fallback::Mem0Delete,
            ("memory.mem0.test", _) => Fallback::Mem0Test,
            _ => return None,
        })
    }

    /// Its name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Fallback::DspyCompile => "reason.dspy.compile",
            Fallback::DspyOptimize => "reason.dspy.optimize",
            Fallback::DspyListCompiled => "reason.dspy.list_compiled",
            Fallback::DspyExport => "reason.dspy.export",
            Fallback::DspyImport => "reason.dspy.import",
            Fallback::TextgradVariable => "learn.textgrad.variable",
            Fallback::TextgradFeedback => "learn.textgrad.feedback",
            Fallback::TextgradOptimize => "learn.textgrad.optimize_prompt",
            Fallback::TextgradCorrector => "learn.textgrad.reflection_corrector",
            Fallback::Mem0Add => "memory.mem0.add",
            Fallback::Mem0Search => "memory.mem0.search",
            Fallback::Mem0GetAll => "memory.mem0.get_all",
            Fallback::Mem0Get => "memory.mem0.get",
            Fallback::Mem0Update => "memory.mem0.update",
            Fallback::Mem0Delete => "memory.mem0.delete",
            Fallback::Mem0Test => "memory.mem0.test",
        }
    }

    /// The library it stands in for.
    pub(crate) fn library(self) -> &'static str {
        match self {
            Fallback::DspyCompile
            | Fallback::DspyOptimize
            | Fallback::DspyListCompiled
            | Fallback::DspyExport
            | Fallback::DspyImport => "DSPy",
            Fallback::TextgradVariable
            | Fallback::TextgradFeedback
            | Fallback::TextgradOptimize
            | Fallback::TextgradCorrector => "TextGrad",
            _ => "mem0",
        }
    }

    /// What it does here, for the loader's warning.
    pub(crate) fn instead(self) -> &'static str {
        match self.library() {
            "DSPy" => "it reports DSPy missing (`success: false`), as The Edge Agent does where DSPy is not installed",
            "mem0" => {
                "`memory.mem0.add` keeps the messages in the agent's memory, `get_all` returns them, and `search`, \
                 `get`, `update` and `delete` report mem0 missing (`success: false`), as The Edge Agent does where \
                 mem0 is not installed"
            }
            _ => {
                "it keeps prompt variables, scores feedback with The Edge Agent's heuristic and leaves prompts \
                 unoptimised, as The Edge Agent does where TextGrad is not installed"
            }
        }
    }

    /// The arguments it takes (its `with:` keys); the required ones first, `required()` of them.
    pub(crate) fn keys(self) -> &'static [&'static str] {
        match self {
            Fallback::DspyCompile => &[
                "module_type",
                "signature",
                "training_data",
                "trainset",
                "teleprompter",
                "teleprompter_config",
                "model",
                "metric",
                "output_key",
            ],
            Fallback::DspyOptimize => {
                &["module_key", "module_type", "signature", "training_data", "validation_data", "metric", "model"]
            }
            Fallback::DspyListCompiled | Fallback::DspyExport => &[],
            Fallback::DspyImport => &["prompts"],
            Fallback::TextgradVariable => {
                &["name", "initial_value", "role_description", "constraints", "requires_grad"]
            }
            Fallback::TextgradFeedback => &["output", "evaluation_criteria", "aspects", "context"],
            Fallback::TextgradOptimize => &["variable", "loss_fn", "iterations", "constraints", "context"],
            Fallback::TextgradCorrector => &["variable", "trigger_threshold", "optimization_iterations", "context"],
            Fallback::Mem0Add => &["messages", "user_id", "session_id", "agent_id", "metadata"],
            Fallback::Mem0Search => &["query", "user_id", "session_id", "agent_id", "limit", "include_relations"],
            Fallback::Mem0GetAll => &["user_id", "session_id", "agent_id", "limit", "offset"],
            Fallback::Mem0Get => &["memory_id"],
            Fallback::Mem0Update => &["memory_id", "text", "metadata"],
            Fallback::Mem0Delete => &["memory_id", "user_id", "session_id", "agent_id", "delete_all"],
            Fallback::Mem0Test => &[],
        }
    }

    /// How many of `keys()` (the first ones) are required.
    pub(crate) fn required(self) -> usize {
        match self {
            Fallback::TextgradVariable | Fallback::TextgradFeedback | Fallback::TextgradOptimize => 2,
            Fallback::TextgradCorrector => 1,
            _ => 0,
        }
    }

    /// Runs it with the rendered `args`; TextGrad's variables live in `memory`.
    pub(crate) fn call(self, memory: &dyn Keep, state: &State, args: &Value) -> Result<Value, BoxError> {
        let what = self.name();
        let arg = |key: &str| args.get(key).filter(|v| !v.is_null());
        let needs = |key: &str| arg(key).ok_or_else(|| BoxError::from(format!("{what} needs `{key}`")));
        Ok(match self {
            Fallback::DspyCompile => {
                json!({ "error": NO_DSPY, "success": false, "compiled": false, "dspy_available": false })
            }
            Fallback::DspyOptimize => json!({ "error": NO_DSPY, "success": false, "dspy_available": false }),
            Fallback::DspyListCompiled => json!({ "modules": [], "details": {}, "dspy_available": false }),
            Fallback::DspyExport => json!({ "prompts": {}, "count": 0, "dspy_available": false }),
            Fallback::DspyImport => json!({ "imported": 0, "keys": [], "dspy_available": false }),
            Fallback::TextgradVariable => {
                let name = text(needs("name")?);
                let initial = text(needs("initial_value")?);
                if let Some(existing) = memory.kept(VARIABLES, &name)? {
                    let version = existing.get("version").cloned().unwrap_or(json!(1));
                    return Ok(json!({
                        "variable": existing,
                        "variable_name": name,
                        "textgrad_enabled": false,
                        "version": version,
                    }));
                }
                let constraints = match arg("constraints") {
                    None => json!([]),
                    Some(Value::Array(list)) => Value::Array(list.clone()),
                    Some(other) => return Err(format!("{what}: `constraints` is a list, not {other}").into()),
                };
                let now = humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string();
                let defined = json!({
                    "name": name,
                    "current_value": initial,
                    "initial_value": initial,
                    "role_description": arg("role_description").cloned().unwrap_or(Value::Null),
                    "constraints": constraints,
                    "version": 1,
                    "versions": [{ "version": 1, "value": initial, "timestamp": now, "change_reason": "initial" }],
                });
                let stored = memory.keep(VARIABLES, &name, &defined)?;
                if stored.get("stored") != Some(&Value::Bool(true)) {
                    let why = stored.get("error").and_then(Value::as_str).unwrap_or("the memory refused it");
                    return Err(format!("{what}: cannot keep variable `{name}`: {why}").into());
                }
                json!({ "variable": defined, "variable_name": name, "textgrad_enabled": false, "version": 1 })
            }
            Fallback::TextgradFeedback => {
                let aspects: Vec<String> = match arg("aspects") {
                    None => vec!["quality".to_owned()],
                    Some(Value::Array(list)) if list.is_empty() => vec!["quality".to_owned()],
                    Some(Value::Array(list)) => list.iter().map(text).collect(),
                    Some(other) => return Err(format!("{what}: `aspects` is a list, not {other}").into()),
                };
                let criteria = match needs("evaluation_criteria")? {
                    Value::Array(list) => list.iter().map(text).collect::<Vec<_>>(),
                    other => return Err(format!("{what}: `evaluation_criteria` is a list, not {other}").into()),
                };
                let output = match needs("output")? {
                    Value::String(s) => s.clone(),
                    other => {
                        // The Edge Agent's heuristic splits a string; anything else is its error.
                        let kind = match other {
                            Value::Object(_) => "dict",
                            Value::Array(_) => "list",
                            Value::Bool(_) => "bool",
                            _ => "number",
                        };
                        return Ok(json!({
                            "valid": false,
                            "feedback": format!("Error: '{kind}' object has no attribute 'split'"),
                            "scores": {},
                            "gradient_text": "",
                            "suggestions": [],
                            "aspects_evaluated": aspects,
                        }));
                    }
                };
                heuristic_feedback(&output, &criteria, &aspects)
            }
            Fallback::TextgradOptimize => {
                let name = text(needs("variable")?);
                needs("loss_fn")?;
                let Some(var) = memory.kept(VARIABLES, &name)? else {
                    return Err(
                        format!("Variable '{name}' not found. Define it first with learn.textgrad.variable").into()
                    );
                };
                let value = var.get("current_value").cloned().unwrap_or(Value::Null);
                json!({
                    "optimized_value": value,
                    "initial_value": value,
                    "variable_name": name,
                    "iterations_completed": 0,
                    "improvement_trace": [],
                    "converged": false,
                    "version": var.get("version").cloned().unwrap_or(json!(1)),
                    "textgrad_enabled": false,
                })
            }
            Fallback::TextgradCorrector => {
                let name = text(needs("variable")?);
                let threshold = match arg("trigger_threshold") {
                    None => 2,
                    Some(v) => whole(v).ok_or_else(|| format!("{what}: `trigger_threshold` is a number, not {v}"))?,
                };
                let field = |key: &str| state.get(key).filter(|v| !v.is_null());
                let iteration = match field("reflection_iteration") {
                    None => 0,
                    Some(v) => whole(v).unwrap_or(0),
                };
                let used = field("reflection_history").and_then(Value::as_array).is_some_and(|h| !h.is_empty());
                let mut result = Map::new();
                result.insert("corrected_output".into(), field("reflection_output").cloned().unwrap_or(json!("")));
                result.insert("optimization_triggered".into(), json!(false));
                result.insert("new_prompt".into(), Value::Null);
                result.insert("reflection_context_used".into(), json!(used));
                result.insert("reflection_iteration".into(), json!(iteration));
                if iteration >= threshold {
                    if let Some(var) = memory.kept(VARIABLES, &name)? {
                        // Optimising without TextGrad leaves the prompt as it is.
                        result.insert("optimization_triggered".into(), json!(true));
                        result.insert("new_prompt".into(), var.get("current_value").cloned().unwrap_or(Value::Null));
                    }
                }
                Value::Object(result)
            }
            // The Edge Agent's key: `user_id` as Python prints it (`None` when absent).
            Fallback::Mem0Add => {
                let key = format!("mem0_fallback_{}", arg("user_id").map_or_else(|| "None".to_owned(), text));
                let messages = arg("messages").cloned().unwrap_or(json!([]));
                memory.keep(MEM0, &key, &json!({ "messages": messages }))?
            }
            Fallback::Mem0Search => json!({
                "success": false,
                "error": "Semantic search requires Mem0. Install with: pip install mem0ai",
                "results": [],
                "fallback": true,
            }),
            Fallback::Mem0GetAll => {
                let key = format!("mem0_fallback_{}", arg("user_id").map_or_else(|| "None".to_owned(), text));
                let found = memory.kept(MEM0, &key)?;
                json!({
                    "success": found.is_some(),
                    "memories": found.map_or_else(Vec::new, |v| vec![v]),
                    "fallback": true,
                })
            }
            Fallback::Mem0Get | Fallback::Mem0Update | Fallback::Mem0Delete => {
                json!({ "success": false, "error": "Mem0 not available" })
            }
            Fallback::Mem0Test => json!({
                "success": false,
                "error": "Mem0 library not installed",
                "message": "Install with: pip install mem0ai",
            }),
        })
    }
}

/// The Edge Agent's heuristic feedback without TextGrad: each criterion scores 0.5; aspect
/// `clarity` scores the word count over 100 (at most 1), `safety` 1.0 unless the output
/// holds an unsafe word (0.3), any other 0.5; valid when the output has more than 10 words
/// and every score is at least 0.3.
fn heuristic_feedback(output: &str, criteria: &[String], aspects: &[String]) -> Value {
    let words = output.split_whitespace().count();
    let mut scores = Map::new();
    for c in criteria {
        scores.insert(c.clone(), json!(0.5));
    }
    for a in aspects {
        match a.as_str() {
            "clarity" => {
                scores.insert("aspect_clarity".into(), json!((words as f64 / 100.0).min(1.0)));
            }
            "safety" => {
                let lower = output.to_lowercase();
                let safe = !["hack", "attack", "exploit", "harm"].iter().any(|w| lower.contains(w));
                scores.insert("aspect_safety".into(), json!(if safe { 1.0 } else { 0.3 }));
            }
            other => {
                scores.insert(format!("aspect_{other}"), json!(0.5));
            }
        }
    }
    let valid = words > 10 && scores.values().all(|s| s.as_f64().is_some_and(|s| s >= 0.3));
    json!({
        "valid": valid,
        "feedback": "TextGrad not available. Basic heuristic evaluation applied.",
        "scores": scores,
        "gradient_text": "",
        "suggestions": ["Enable TextGrad for detailed feedback and optimization"],
        "aspects_evaluated": aspects,
    })
}

/// A value as text: a string as it is, anything else as JSON.
fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A whole number, written as a number or a string.
fn whole(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64().or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64)),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heuristic_feedback_scores_as_the_edge_agent() {
        let criteria = vec!["A".to_owned(), "B".to_owned()];
        let aspects: Vec<String> = ["clarity", "accuracy", "safety"].iter().map(|s| s.to_string()).collect();
        let short = heuristic_feedback("short answer", &criteria, &aspects);
        assert_eq!(
            short["scores"],
            json!({ "A": 0.5, "B": 0.5, "aspect_clarity": 0.02, "aspect_accuracy": 0.5, "aspect_safety": 1.0 })
        );
        assert_eq!(short["valid"], json!(false));
        let long = format!("{} attack", "word ".repeat(50));
        let scored = heuristic_feedback(&long, &criteria[..1], &["clarity".into(), "safety".into()]);
        assert_eq!(scored["scores"], json!({ "A": 0.5, "aspect_clarity": 0.51, "aspect_safety": 0.3 }));
        assert_eq!(scored["valid"], json!(true));
    }
}
