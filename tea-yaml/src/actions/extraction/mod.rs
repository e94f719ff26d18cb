//! The Edge Agent's `validate.extraction` and `retry.loop`: checking entities and
//! relationships an LLM extracted, and running a correction node of the graph until they pass.
//!
//! `validate.extraction` checks in three layers, stopping at the first that finds errors, as
//! The Edge Agent's Python engine does:
//!
//! 1. the file's `extraction_schema` (required fields, relationship types, fields a type
//!    requires);
//! 2. its `validation_constraints`: Prolog rules over `entity/2,3` and `relationship/3..6`
//!    facts made from the extraction, each `validation_error(Type, Context)` an error
//!    (feature `prolog`);
//! 3. its `semantic_probes`: a yes/no question to the LLM per entity or relationship.
//!
//! Its result is `{valid, errors, validated_at}`. The loader (`load.rs`) reads the
//! schema, rules and probes at load (the rules compile there, a probe's template and `where`
//! too); `validation_logging` appends each failure to a JSON-lines file.
//!
//! `retry.loop` runs a validating action; while it says `valid: false`, it runs the node named
//! by `correct:` (a node of the graph, with `_retry_count` and `_retry_errors` in its state)
//! and validates again, at most `max_retries` times.
//!
//! The Edge Agent's `validate.extraction` (schema, Prolog constraints over facts made from the
//! extraction, LLM probes, the JSON-lines failure log) and `retry.loop` (validate, run the
//! correction node through `Composer::run_node`, validate again). The loader (`load.rs`)
//! reads the file's `extraction_schema`, `validation_constraints`, `semantic_probes` and
//! `validation_logging` at load (rules compiled, probes' templates and `where` conditions too), and
//! checks each `correct:` node once every node is known; the graph checks count the correction node
//! as reached through its `retry.loop` node (a `tea_check::Node::jumps` entry).

use crate::actions::{self, Action, Call, Composer};
use crate::lang::template::{ExprId, Tree};
use crate::state::State;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use tea_runtime::{BoxError, NodeName};

/// The most corrections a `retry.loop` may run (as a `while_loop`'s passes).
pub(crate) const MAX_RETRIES: u64 = 1000;

/// `validate.extraction`, compiled: the file's (or the node's) schema, rules and probes.
pub(crate) struct Extraction {
    pub(crate) config: Config,
    /// `llm.call`, which the probes ask (`None`: no probes).
    pub(crate) llm: Option<Action>,
    /// The node's `with:` (`entities`, `relationships`, `source_text`, `agent_name`).
    pub(crate) args: Tree,
    /// The agent's file, for Prolog errors.
    pub(crate) file: String,
}

/// What the file's top-level keys (or a node's `with:`) configure, compiled.
#[derive(Clone, Default)]
pub(crate) struct Config {
    pub(crate) schema: Option<Schema>,
    /// The Prolog rules of `validation_constraints`, with the line they start on.
    pub(crate) rules: Option<(String, usize)>,
    pub(crate) probes: Vec<Probe>,
    /// `validation_logging`: the file failures are appended to (`${VAR:-default}` expanded
    /// when written).
    pub(crate) log: Option<String>,
}

/// `extraction_schema`.
#[derive(Clone, Default)]
pub(crate) struct Schema {
    pub(crate) entity_fields: Vec<String>,
    pub(crate) entity_optional: Vec<String>,
    pub(crate) types: Vec<String>,
    pub(crate) relationship_fields: Vec<String>,
    pub(crate) type_requirements: Vec<(String, Vec<String>)>,
    pub(crate) confidence_tracking: bool,
}

/// One of `semantic_probes`.
#[derive(Clone)]
pub(crate) struct Probe {
    pub(crate) relationships: bool,
    pub(crate) filter: Option<ExprId>,
    pub(crate) question: Tree,
    /// The probe's template as written (errors show it).
    pub(crate) source: String,
    pub(crate) reject: bool,
}

/// `retry.loop`, compiled.
pub(crate) struct Retry {
    pub(crate) validate: Validator,
    pub(crate) validate_args: Tree,
    /// The node of the graph that corrects.
    pub(crate) correct: String,
    /// `max_retries` and `retry_delay` (templates allowed; checked when rendered).
    pub(crate) max_retries: Tree,
    pub(crate) retry_delay: Tree,
}

/// What `retry.loop` validates with.
pub(crate) enum Validator {
    Action { name: String, action: Action },
    Extraction(Arc<Extraction>),
}

/// The first error of each layer, for the log's `failure_type`.
#[derive(Clone, Copy)]
enum Layer {
    Schema,
    Prolog,
    Probe,
}

/// The time now as RFC 3339 in UTC, with microseconds (The Edge Agent's `validated_at`).
fn now() -> String {
    humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string()
}

/// A value as Python's `str()` shows it (the facts' text).
fn py_str(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "None".to_owned(),
        Value::Bool(true) => "True".to_owned(),
        Value::Bool(false) => "False".to_owned(),
        other => other.to_string(),
    }
}

/// A list of names as Python shows it: `['a', 'b']`.
fn py_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("'{s}'")).collect();
    format!("[{}]", quoted.join(", "))
}

/// A quoted Prolog atom of `value`'s text.
fn atom(value: &Value) -> String {
    format!("'{}'", py_str(value).replace('\\', "\\\\").replace('\'', "\\'"))
}

/// A number for a fact, as Python's `repr(float(x))`.
fn float(value: &Value) -> Option<String> {
    let x = match value {
        Value::Number(n) => n.as_f64()?,
        Value::String(s) => s.trim().parse().ok()?,
        _ => return None,
    };
    Some(format!("{x:?}"))
}

fn missing(item: &Value, field: &str) -> bool {
    item.get(field).is_none_or(Value::is_null)
}

impl Schema {
    /// The prompt The Edge Agent writes into `variables.extraction_prompt` when the file's
    /// `extraction_schema` says `guide_extraction: true` (`None` otherwise): read leniently
    /// from the file's JSON (the loader reports what is wrong with it).
    pub(crate) fn guide(file: &Map<String, Value>) -> Option<String> {
        let schema = file.get("extraction_schema")?;
        if schema.get("guide_extraction") != Some(&Value::Bool(true)) {
            return None;
        }
        let names = |v: Option<&Value>| -> Vec<String> {
            v.and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                .unwrap_or_default()
        };
        let e = schema.get("entities");
        let r = schema.get("relationships");
        let field = |v: Option<&Value>, k: &str| names(v.and_then(|v| v.get(k)));
        let requirements = r
            .and_then(|r| r.get("type_requirements"))
            .and_then(Value::as_object)
            .map(|m| m.iter().map(|(k, v)| (k.clone(), names(Some(v)))).collect())
            .unwrap_or_default();
        let this = Schema {
            entity_fields: field(e, "required_fields"),
            entity_optional: field(e, "optional_fields"),
            types: field(r, "types"),
            relationship_fields: field(r, "required_fields"),
            type_requirements: requirements,
            confidence_tracking: schema.get("confidence_tracking") == Some(&Value::Bool(true)),
        };
        let rules = file.get("validation_constraints").and_then(|c| c.get("rules")).and_then(Value::as_str);
        Some(this.prompt(rules))
    }

    /// Layer 1: the errors of the extraction against the schema.
    fn check(&self, entities: &[Value], relationships: &[Value]) -> Vec<Value> {
        let mut errors = Vec::new();
        // A required field missing from item `i` of `list` (`entities`: an `entity`).
        let required = |errors: &mut Vec<Value>, list: &str, i: usize, item: &Value, fields: &[String]| {
            let (key, label) = if list == "entities" { ("entity", "Entity") } else { ("relationship", "Relationship") };
            for f in fields.iter().filter(|f| missing(item, f)) {
                errors.push(json!({
                    "type": "missing_required_field",
                    "path": format!("{list}[{i}].{f}"),
                    key: item,
                    "expected": f,
                    "actual": null,
                    "message": format!("{label} missing required field '{f}'"),
                }));
            }
        };
        for (i, entity) in entities.iter().enumerate() {
            required(&mut errors, "entities", i, entity, &self.entity_fields);
        }
        for (i, rel) in relationships.iter().enumerate() {
            required(&mut errors, "relationships", i, rel, &self.relationship_fields);
            let kind = rel.get("type").cloned().unwrap_or(Value::Null);
            if !self.types.is_empty() && !kind.as_str().is_some_and(|k| self.types.iter().any(|t| t == k)) {
                errors.push(json!({
                    "type": "invalid_relationship_type",
                    "path": format!("relationships[{i}].type"),
                    "relationship": rel,
                    "expected": self.types,
                    "actual": kind,
                    "message": format!(
                        "Invalid relationship type '{}', expected one of {}",
                        py_str(&kind),
                        py_list(&self.types)
                    ),
                }));
            }
            let Some(kind) = kind.as_str() else { continue };
            for (t, fields) in &self.type_requirements {
                if t != kind {
                    continue;
                }
                for f in fields {
                    if missing(rel, f) {
                        errors.push(json!({
                            "type": "missing_type_specific_field",
                            "path": format!("relationships[{i}].{f}"),
                            "relationship": rel,
                            "expected": f,
                            "actual": null,
                            "message": format!("Relationship type '{kind}' requires field '{f}'"),
                        }));
                    }
                }
            }
        }
        errors
    }

    /// The prompt The Edge Agent's `guide_extraction` writes into `variables.extraction_prompt`.
    fn prompt(&self, rules: Option<&str>) -> String {
        let mut lines = vec!["You are extracting entities and relationships from text.".to_owned(), String::new()];
        lines.push("ONTOLOGY:".to_owned());
        if !self.entity_fields.is_empty() || !self.entity_optional.is_empty() {
            let fields: Vec<String> = self
                .entity_fields
                .iter()
                .map(|f| format!("{f} (required)"))
                .chain(self.entity_optional.iter().map(|f| format!("{f} (optional)")))
                .collect();
            lines.push(format!("- Entities must have: {}", fields.join(", ")));
        }
        if !self.types.is_empty() {
            lines.push(format!("- Valid relationship types: {}", self.types.join(", ")));
        }
        if !self.relationship_fields.is_empty() {
            let fields: Vec<String> = self.relationship_fields.iter().map(|f| format!("{f} (required)")).collect();
            lines.push(format!("- Relationships must have: {}", fields.join(", ")));
        }
        for (t, fields) in &self.type_requirements {
            lines.push(format!("- {t} relationships require: {}", fields.join(", ")));
        }
        let comments: Vec<&str> = rules
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().strip_prefix('%'))
            .map(str::trim)
            .filter(|c| !c.is_empty() && !c.starts_with('-'))
            .collect();
        if !comments.is_empty() {
            lines.push(String::new());
            lines.push("CONSTRAINTS TO SATISFY:".to_owned());
            lines.extend(comments.iter().map(|c| format!("- {c}")));
        }
        if self.confidence_tracking {
            lines.push(String::new());
            lines.push(
                "Include confidence scores (0.0-1.0) for each extraction. Add a 'confidence' field to each entity \
                 and relationship."
                    .to_owned(),
            );
        }
        lines.push(String::new());
        lines.push("Extract according to this schema.".to_owned());
        lines.join("\n")
    }
}

/// The Prolog program of layer 2: the rules (first, so their lines are the file's), then the
/// facts of the extraction and The Edge Agent's declarations and query, so rules written for
/// it read the same facts.
pub(crate) fn program(entities: &[Value], relationships: &[Value], rules: &str, tracking: bool) -> String {
    let mut text = String::from(rules);
    text.push('\n');
    for decl in ["entity/2", "entity/3", "relationship/3", "relationship/4", "relationship/5", "relationship/6"] {
        text.push_str(&format!(":- dynamic({decl}).\n"));
    }
    text.push_str(":- dynamic(validation_error/2).\n");
    for e in entities {
        let get = |k: &str| e.get(k).cloned().unwrap_or_else(|| json!("unknown"));
        match e.get("confidence").filter(|_| tracking).and_then(float) {
            Some(c) => text.push_str(&format!("entity({}, {}, {c}).\n", atom(&get("name")), atom(&get("type")))),
            None => text.push_str(&format!("entity({}, {}).\n", atom(&get("name")), atom(&get("type")))),
        }
    }
    for r in relationships {
        let get = |k: &str| r.get(k).cloned().unwrap_or_else(|| json!("unknown"));
        let head = format!("{}, {}, {}", atom(&get("type")), atom(&get("subject")), atom(&get("object")));
        let date = |k: &str| r.get(k).filter(|v| !v.is_null());
        let conf = r.get("confidence").filter(|_| tracking).and_then(float);
        let fact = match (date("start_date"), date("end_date"), conf) {
            (Some(s), Some(e), Some(c)) => format!("relationship({head}, {}, {}, {c}).", atom(s), atom(e)),
            (Some(s), Some(e), None) => format!("relationship({head}, {}, {}).", atom(s), atom(e)),
            (_, _, Some(c)) => format!("relationship({head}, {c})."),
            _ => format!("relationship({head})."),
        };
        text.push_str(&fact);
        text.push('\n');
    }
    text.push_str(
        "tea_get_validation_errors(Errors) :-\n    findall([Type, Context], validation_error(Type, Context), \
         Errors).\ntea_get_validation_errors(Errors),\nreturn(errors, Errors).\n",
    );
    text
}

/// A list argument: the value given, else the state's key, else empty.
fn list_arg(
    args: &Map<String, Value>,
    state: &Map<String, Value>,
    key: &str,
    state_key: &str,
) -> Result<Vec<Value>, String> {
    match args.get(key).filter(|v| !v.is_null()).or_else(|| state.get(state_key).filter(|v| !v.is_null())) {
        None => Ok(Vec::new()),
        Some(Value::Array(items)) => Ok(items.clone()),
        Some(other) => Err(format!("`{key}` must be a list, not {}", crate::state::describe(other))),
    }
}

/// The Edge Agent's reading of a probe's answer: no, unless it says yes without saying no.
fn affirmed(reply: &str) -> bool {
    let r = reply.trim().to_lowercase();
    if ["no", "false", "incorrect", "negative", "not true", "not correct"].iter().any(|w| r.contains(w)) {
        return false;
    }
    ["yes", "true", "correct", "affirmative", "indeed"].iter().any(|w| r.contains(w))
}

/// Serialises appends to one log file across threads.
static LOG_LOCK: Mutex<()> = Mutex::new(());

/// `${VAR}` and `${VAR:-default}` in a log path, from the environment: only the variables
/// the operator grants (`--allow-env`); else why not.
pub(crate) fn expand(path: &str, grants: &crate::grants::AgentGrants) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = path;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let Some(end) = rest[start..].find('}') else {
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        let inner = &rest[start + 2..start + end];
        let (name, default) = match inner.split_once(":-") {
            Some((n, d)) => (n, d),
            None => (inner, ""),
        };
        out.push_str(&grants.env(name)?.unwrap_or_else(|| default.to_owned()));
        rest = &rest[start + end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

impl Extraction {
    /// Runs `validate.extraction` for node `node`: the node's `with:` rendered on `state`.
    pub(crate) fn run(&self, host: &dyn Composer, node: &NodeName, state: &State) -> Result<Value, BoxError> {
        let Value::Object(args) = host.render_on(&self.args, state)? else {
            return Err("`with:` of `validate.extraction` must give a mapping".into());
        };
        self.validate(host, node, state, &args)
    }

    /// Validates the extraction `args` name (else the state's `entities`, `relationships`,
    /// `text`): `{valid, errors, validated_at}`.
    pub(crate) fn validate(
        &self,
        host: &dyn Composer,
        node: &NodeName,
        state: &State,
        args: &Map<String, Value>,
    ) -> Result<Value, BoxError> {
        let map = state.shared();
        let entities = list_arg(args, map, "entities", "entities")?;
        let relationships = list_arg(args, map, "relationships", "relationships")?;
        let source_text = match args.get("source_text").filter(|v| !v.is_null()).or_else(|| map.get("text")) {
            Some(v) => py_str(v),
            None => String::new(),
        };
        let (layer, errors) = self.layers(host, node, state, &entities, &relationships, &source_text)?;
        if let (Some(layer), Some(path)) = (layer, &self.config.log) {
            let agent = args.get("agent_name").map_or_else(|| "unknown".to_owned(), py_str);
            let grants = host.grants();
            let path = expand(path, grants).map_err(|e| format!("`validation_logging`: {e}"))?;
            let path = grants
                .confine(&path, crate::grants::Access::Write)
                .map_err(|e| format!("`validation_logging`: {e}"))?;
            self.append(&path, layer, &agent, &source_text, map, &errors, &entities, &relationships)
                .map_err(|e| format!("`validation_logging`: cannot append to `{}`: {e}", path.display()))?;
        }
        Ok(json!({ "valid": errors.is_empty(), "errors": errors, "validated_at": now() }))
    }

    fn layers(
        &self,
        host: &dyn Composer,
        node: &NodeName,
        state: &State,
        entities: &[Value],
        relationships: &[Value],
        source_text: &str,
    ) -> Result<(Option<Layer>, Vec<Value>), BoxError> {
        if let Some(schema) = &self.config.schema {
            let errors = schema.check(entities, relationships);
            if !errors.is_empty() {
                return Ok((Some(Layer::Schema), errors));
            }
        }
        if let Some((rules, line)) = &self.config.rules {
            let tracking = self.config.schema.as_ref().is_some_and(|s| s.confidence_tracking);
            let text = program(entities, relationships, rules, tracking);
            let errors = match self.constraints(node, &text, *line) {
                Ok(errors) => errors,
                Err(message) => vec![json!({ "type": "prolog_error", "message": message })],
            };
            if !errors.is_empty() {
                return Ok((Some(Layer::Prolog), errors));
            }
        }
        let mut errors = Vec::new();
        for probe in &self.config.probes {
            let items = if probe.relationships { relationships } else { entities };
            for item in items {
                let mut locals = item.as_object().cloned().unwrap_or_default();
                locals.insert("text".into(), Value::String(source_text.to_owned()));
                if let Some(filter) = probe.filter {
                    // As there, a filter that fails to evaluate leaves the item out.
                    let holds = host.render_with(&Tree::Expr(filter), state, &locals).map(|v| crate::state::truthy(&v));
                    if !holds.unwrap_or(false) {
                        continue;
                    }
                }
                let error = match host.render_with(&probe.question, state, &locals) {
                    Err(e) => Some(json!({
                        "type": "probe_render_error",
                        "message": format!("Error rendering probe template: {e}"),
                        "probe": probe.source,
                        "item": item,
                    })),
                    Ok(question) => {
                        let question = py_str(&question);
                        match self.ask(host, node, state, &question) {
                            Ok(reply) if affirmed(&reply) => None,
                            Ok(reply) => Some(json!({
                                "type": "semantic_probe_failed",
                                "probe": probe.source,
                                "question": question,
                                "response": reply,
                                "item": item,
                                "message": format!("LLM probe failed: {question}"),
                            })),
                            Err(e) => Some(json!({
                                "type": "probe_execution_error",
                                "message": format!("Error executing probe: {e}"),
                                "probe": probe.source,
                                "question": question,
                                "item": item,
                            })),
                        }
                    }
                };
                if let Some(error) = error {
                    errors.push(error);
                    if probe.reject {
                        return Ok((Some(Layer::Probe), errors));
                    }
                }
            }
        }
        let layer = (!errors.is_empty()).then_some(Layer::Probe);
        Ok((layer, errors))
    }

    /// Layer 2: runs the program; each `validation_error(Type, Context)` is an error.
    fn constraints(&self, node: &NodeName, text: &str, line: usize) -> Result<Vec<Value>, String> {
        let block = crate::lang::prolog::Loader::new(&self.file)
            .block(node.as_str(), line, text)
            .map_err(|problems| problems.into_iter().map(|(_, m)| m).collect::<Vec<_>>().join("; "))?;
        let out = block.run(&Arc::new(Map::new()))?.unwrap_or_default();
        let found = match out.get("errors") {
            Some(Value::Array(found)) => found.clone(),
            _ => Vec::new(),
        };
        Ok(found
            .into_iter()
            .map(|pair| {
                let (kind, context) = match &pair {
                    Value::Array(p) if p.len() == 2 => (p[0].clone(), p[1].clone()),
                    other => (other.clone(), Value::Null),
                };
                let message = format!("Constraint violation: {}({})", py_str(&kind), py_str(&context));
                json!({
                    "type": "prolog_constraint_violation",
                    "error_type": kind,
                    "context": context,
                    "message": message,
                })
            })
            .collect())
    }

    /// A probe's question to the LLM: its reply's text.
    fn ask(&self, host: &dyn Composer, node: &NodeName, state: &State, question: &str) -> Result<String, BoxError> {
        let llm = self.llm.as_ref().ok_or("the probes ask `llm.call`, which this build leaves out")?;
        let mut args = Map::new();
        if let Some(model) = state.shared().get("llm_model").filter(|m| !m.is_null()) {
            args.insert("model".into(), model.clone());
        }
        args.insert("max_tokens".into(), json!(10));
        args.insert(
            "messages".into(),
            json!([
                { "role": "system", "content": "You are a fact-checker. Answer with ONLY 'yes' or 'no'." },
                { "role": "user", "content": question },
            ]),
        );
        let reply = actions::call(llm, &Call { host: host.host(), node, state }, &Value::Object(args))?;
        Ok(reply.get("content").map(py_str).unwrap_or_default())
    }

    /// Appends one failure to the log (The Edge Agent's JSON-lines record).
    #[allow(clippy::too_many_arguments)]
    fn append(
        &self,
        path: &Path,
        layer: Layer,
        agent: &str,
        source_text: &str,
        state: &Map<String, Value>,
        errors: &[Value],
        entities: &[Value],
        relationships: &[Value],
    ) -> std::io::Result<()> {
        let hashed =
            if source_text.is_empty() { Value::Object(state.clone()).to_string() } else { source_text.to_owned() };
        let digest = Sha256::digest(hashed.as_bytes());
        let hash: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
        let record = json!({
            "timestamp": now(),
            "agent_name": agent,
            "input_hash": hash,
            "failure_type": match layer { Layer::Schema => "schema", Layer::Prolog => "prolog", Layer::Probe => "probe" },
            "context": { "errors": errors },
            "extraction_attempt": { "entities": entities, "relationships": relationships },
        });
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let _guard = LOG_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        writeln!(file, "{record}")
    }
}

/// A whole number of `retry.loop`'s arguments.
fn count(value: &Value, key: &str, max: u64) -> Result<u64, BoxError> {
    let n = match value {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    };
    match n {
        Some(n) if n <= max => Ok(n),
        Some(n) => Err(format!("`{key}` of `retry.loop` is {n}, more than the {max} it may run").into()),
        None => Err(format!("`{key}` of `retry.loop` must be a non-negative whole number, not {value}").into()),
    }
}

impl Retry {
    /// Runs the loop for node `node`: the keys the corrections wrote, `_retry_count`,
    /// `_retry_errors`, `_retry_result`, `_retry_exhausted`, and the last validation's keys.
    pub(crate) fn run(&self, host: &dyn Composer, node: &NodeName, state: &State) -> Result<Value, BoxError> {
        let max_retries = count(&host.render_on(&self.max_retries, state)?, "max_retries", MAX_RETRIES)?;
        let delay = match host.render_on(&self.retry_delay, state)? {
            Value::Null => 0.0,
            Value::Number(n) => n.as_f64().unwrap_or(0.0),
            Value::String(s) => s.trim().parse().map_err(|_| format!("`retry_delay` must be seconds, not `{s}`"))?,
            other => return Err(format!("`retry_delay` must be seconds, not {other}").into()),
        };
        if !(0.0..=3600.0).contains(&delay) {
            return Err(format!("`retry_delay` must be from 0 to 3600 seconds, not {delay}").into());
        }
        let mut work = state.shared().as_ref().clone();
        let mut written: Vec<String> = Vec::new();
        let mut retry_count = 0;
        loop {
            work.insert("_retry_count".into(), json!(retry_count));
            let current = State::from_map(work.clone());
            let args = match host.render_on(&self.validate_args, &current)? {
                Value::Object(args) => args,
                Value::Null => Map::new(),
                other => return Err(format!("`validate_args` must give a mapping, not {other}").into()),
            };
            let verdict = match self.validate(host, node, &current, &args) {
                Ok(Value::Object(v)) => v,
                Ok(other) => {
                    let name = match &self.validate {
                        Validator::Action { name, .. } => name.as_str(),
                        Validator::Extraction(_) => "validate.extraction",
                    };
                    return Err(format!("`{name}` gave {other}, not a mapping with `valid` and `errors`").into());
                }
                Err(e) => Map::from_iter([
                    ("valid".to_owned(), json!(false)),
                    (
                        "errors".to_owned(),
                        json!([{ "message": tea_runtime::error_chain(&*e), "type": "validation_error" }]),
                    ),
                ]),
            };
            let errors = verdict.get("errors").cloned().unwrap_or_else(|| json!([]));
            let valid = verdict.get("valid").is_some_and(crate::state::truthy);
            let finish = |work: &Map<String, Value>, written: &[String], extra: Value| {
                let mut out = Map::new();
                for key in written {
                    out.insert(key.clone(), work.get(key).cloned().unwrap_or(Value::Null));
                }
                if let Value::Object(extra) = extra {
                    out.extend(extra);
                }
                out
            };
            if valid || retry_count >= max_retries {
                let mut out = finish(
                    &work,
                    &written,
                    json!({
                        "_retry_count": retry_count,
                        "_retry_errors": if valid { json!([]) } else { errors.clone() },
                        "_retry_result": verdict,
                        "_retry_exhausted": !valid,
                    }),
                );
                out.extend(verdict);
                return Ok(Value::Object(out));
            }
            work.insert("_retry_errors".into(), errors.clone());
            for key in ["_retry_count", "_retry_errors"] {
                if !written.iter().any(|k| k == key) {
                    written.push(key.to_owned());
                }
            }
            match host.run_node(&self.correct, &State::from_map(work.clone())) {
                Ok(update) => {
                    for (key, value) in update.unwrap_or_default() {
                        if !written.contains(&key) {
                            written.push(key.clone());
                        }
                        work.insert(key, value);
                    }
                }
                Err(e) if actions::node_calls_overflowed() => return Err(e),
                Err(e) => {
                    let message =
                        format!("Correction node '{}' failed: {}", self.correct, tea_runtime::error_chain(&*e));
                    let mut all = errors.as_array().cloned().unwrap_or_default();
                    all.push(json!({ "message": message, "type": "correction_error" }));
                    let out = finish(
                        &work,
                        &written,
                        json!({
                            "_retry_count": retry_count,
                            "_retry_errors": all,
                            "_retry_result": { "valid": false, "errors": errors, "correction_error": message },
                            "_retry_exhausted": false,
                            "valid": false,
                        }),
                    );
                    return Ok(Value::Object(out));
                }
            }
            if delay > 0.0 {
                std::thread::sleep(std::time::Duration::from_secs_f64(delay));
            }
            retry_count += 1;
        }
    }

    fn validate(
        &self,
        host: &dyn Composer,
        node: &NodeName,
        state: &State,
        args: &Map<String, Value>,
    ) -> Result<Value, BoxError> {
        match &self.validate {
            Validator::Extraction(extraction) => extraction.validate(host, node, state, args),
            Validator::Action { action, .. } => {
                actions::call(action, &Call { host: host.host(), node, state }, &Value::Object(args.clone()))
            }
        }
    }
}

/// Loading its `with:` (part of the loading layer, `crate::load`).
pub(crate) mod load;
