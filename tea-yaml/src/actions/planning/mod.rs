//! The Edge Agent's planning actions over `llm.call`: `plan.decompose` (a goal into subtasks
//! with dependencies, a DAG), `plan.execute` (each subtask in dependency order, sequentially
//! or in waves, by an action), `plan.replan` (a new plan after a failure, keeping what was
//! done) and `plan.status` (counts and progress; no LLM).
//!
//! Prompts, plan dictionaries, error strings and trace steps are its Python engine's. Where
//! tea differs (each documented in the guide): `plan.decompose` reads the options of a
//! `planner:` mapping (the corpus's files write them there), its `prompt_template` is a
//! template that sees `goal`; `plan.execute` renders its `subtask_executor`'s `with:` for each
//! subtask, with `subtask` and `subtask_results` in scope; a plan given as `plan.decompose`'s
//! whole result (`{plan: {…}, …}`) is read as its `plan`.
//!
//! The Edge Agent's `plan.decompose`, `plan.execute`, `plan.replan`, `plan.status`: plans as its
//! dictionaries (a DAG of subtasks, Kahn's order by id), each subtask run by an action through
//! `actions::call`; `load.rs` keeps `prompt_template` and `subtask_executor.with` apart to
//! render when they are used.

use crate::actions::{self, Action, Call, Composer};
use crate::lang::template::Tree;
use crate::state::State;
use serde_json::{json, Map, Value};
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tea_runtime::{BoxError, NodeName};

/// Which action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PlanKind {
    Decompose,
    Execute,
    Replan,
    Status,
}

impl PlanKind {
    pub(crate) fn named(name: &str) -> Option<PlanKind> {
        Some(match name.strip_prefix("actions.").map_or(name, |n| n) {
            "plan.decompose" | "plan_decompose" => PlanKind::Decompose,
            "plan.execute" | "plan_execute" => PlanKind::Execute,
            "plan.replan" | "plan_replan" => PlanKind::Replan,
            "plan.status" | "plan_status" => PlanKind::Status,
            _ => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            PlanKind::Decompose => "plan.decompose",
            PlanKind::Execute => "plan.execute",
            PlanKind::Replan => "plan.replan",
            PlanKind::Status => "plan.status",
        }
    }

    /// The action's own keys; the rest of `with:` goes to `llm.call` (decompose and replan).
    pub(crate) fn keys(self) -> &'static [&'static str] {
        match self {
            PlanKind::Decompose => {
                &["goal", "model", "strategy", "max_depth", "max_subtasks", "prompt_template", "temperature", "planner"]
            }
            PlanKind::Execute => &[
                "plan",
                "parallel",
                "max_concurrent",
                "subtask_executor",
                "on_subtask_failure",
                "max_retries",
                "retry_delay",
                "max_replans",
                "model",
            ],
            PlanKind::Replan => &["plan", "model", "temperature", "context", "preserve_completed", "max_replans"],
            PlanKind::Status => &["plan", "include_completed", "include_details"],
        }
    }
}

/// The keys of `planner:` (`plan.decompose`'s options, as the corpus writes them).
pub(crate) const PLANNER_KEYS: &[&str] =
    &["model", "strategy", "max_depth", "max_subtasks", "prompt_template", "temperature"];
/// The strategies of `plan.decompose` and the failure strategies of `plan.execute`.
pub(crate) const STRATEGIES: &[&str] = &["flat", "hierarchical", "iterative"];
pub(crate) const ON_FAILURE: &[&str] = &["replan", "retry", "skip", "abort"];

/// A planning action, compiled.
pub(crate) struct Plan {
    pub(crate) kind: PlanKind,
    /// The node's `with:` (without `subtask_executor` and `prompt_template`), rendered when
    /// the node runs.
    pub(crate) args: Tree,
    /// `plan.decompose`'s `prompt_template` (its own or its `planner`'s): rendered with `goal`.
    pub(crate) prompt_template: Option<Tree>,
    /// `plan.execute`'s `subtask_executor`: the action and its `with:`, rendered per subtask.
    pub(crate) executor: Option<(String, Action, Tree)>,
    /// `llm.call` (`None` for `plan.status`, and for `plan.execute` with an executor of its
    /// own: they ask no model).
    pub(crate) llm: Option<Action>,
}

const FLAT: &str = r#"You are a planning assistant. Decompose the given goal into a flat list of sequential subtasks.

Your response MUST be valid JSON in this exact format:
{{
  "subtasks": [
    {{"id": "subtask_1", "description": "First step to accomplish", "dependencies": []}},
    {{"id": "subtask_2", "description": "Second step that depends on first", "dependencies": ["subtask_1"]}},
    ...
  ]
}}

Rules:
1. Each subtask should be atomic and clearly defined
2. Dependencies must reference existing subtask IDs
3. Use descriptive IDs like "search_sources", "analyze_data", etc.
4. Ensure dependencies form a DAG (no cycles)
5. Return 3-10 subtasks for typical goals"#;

const HIERARCHICAL: &str = r#"You are a planning assistant. Decompose the given goal into a hierarchical tree of subtasks.

Your response MUST be valid JSON in this exact format:
{
  "subtasks": [
    {"id": "phase_1", "description": "First major phase", "dependencies": []},
    {"id": "phase_1_1", "description": "Sub-step of phase 1", "dependencies": ["phase_1"]},
    {"id": "phase_1_2", "description": "Another sub-step of phase 1", "dependencies": ["phase_1"]},
    {"id": "phase_2", "description": "Second phase (after phase 1 subtasks)", "dependencies": ["phase_1_1", "phase_1_2"]},
    ...
  ]
}

Rules:
1. Organize subtasks into phases/stages
2. Each phase can have sub-subtasks that depend on it
3. Use hierarchical IDs like "phase_1", "phase_1_1", "phase_2_3", etc.
4. Dependencies must form a tree/DAG structure
5. Max depth: {max_depth}
6. Limit total subtasks to {max_subtasks}"#;

const ITERATIVE: &str = r#"You are a planning assistant. Given the current state and goal, determine the next 1-3 subtasks to work on.

Current completed subtasks:
{completed_subtasks}

Your response MUST be valid JSON in this exact format:
{
  "subtasks": [
    {"id": "next_1", "description": "Next step based on current progress", "dependencies": []},
    ...
  ],
  "planning_complete": false
}

Set "planning_complete" to true when the goal can be achieved with the returned subtasks.

Rules:
1. Return only the immediately actionable next steps (1-3 subtasks)
2. Consider what has already been completed
3. Use descriptive IDs that indicate the subtask purpose"#;

const EXECUTOR_SYSTEM: &str =
    "You are executing a subtask as part of a larger plan. Complete the subtask and return a useful result.";

/// The most subtasks a plan may hold, and the most retries and replans.
const MAX_SUBTASKS: u64 = 1000;
const MAX_ROUNDS: u64 = 100;

fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// `prefix` and eight hexadecimal digits, fresh each call.
fn fresh_id(prefix: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    h.write_u128(SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    format!("{prefix}{:08x}", h.finish() as u32)
}

fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "None".to_owned(),
        other => other.to_string(),
    }
}

fn cut(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// The Edge Agent's reading of a planner's reply: the whole reply, a fenced block, or the
/// first `{` to the last `}`.
fn parse_json(content: &str) -> Result<Value, String> {
    if content.is_empty() {
        return Err("Empty response from LLM".to_owned());
    }
    if let Ok(v) = serde_json::from_str(content) {
        return Ok(v);
    }
    if let Some(start) = content.find("```") {
        let rest = &content[start + 3..];
        let rest = rest.strip_prefix("json").unwrap_or(rest);
        if let Some(end) = rest.find("```") {
            if let Ok(v) = serde_json::from_str(rest[..end].trim()) {
                return Ok(v);
            }
        }
    }
    if let (Some(a), Some(b)) = (content.find('{'), content.rfind('}')) {
        if a < b {
            if let Ok(v) = serde_json::from_str(&content[a..=b]) {
                return Ok(v);
            }
        }
    }
    Err(format!("Could not parse JSON from response: {}...", cut(content, 200)))
}

/// A subtask as The Edge Agent's `Subtask.to_dict` writes it.
type Subtask = Map<String, Value>;

/// A plan as The Edge Agent's `Plan.to_dict` writes it.
struct PlanData {
    id: String,
    goal: Value,
    strategy: String,
    subtasks: Vec<Map<String, Value>>,
    metadata: Map<String, Value>,
}

const STATUSES: &[&str] = &["pending", "in_progress", "completed", "failed", "skipped"];

impl PlanData {
    fn new(
        goal: Value,
        strategy: &str,
        subtasks: Vec<Map<String, Value>>,
        metadata: Map<String, Value>,
        prefix: &str,
    ) -> Self {
        let mut plan = PlanData { id: fresh_id(prefix), goal, strategy: strategy.to_owned(), subtasks, metadata };
        plan.defaults();
        plan
    }

    fn defaults(&mut self) {
        let m = &mut self.metadata;
        m.entry("created_at").or_insert(json!(now()));
        m.entry("replan_count").or_insert(json!(0));
        m.entry("max_replans").or_insert(json!(3));
    }

    fn subtask(id: &str, description: Value, dependencies: Value) -> Map<String, Value> {
        let mut s = Map::new();
        s.insert("id".into(), json!(id));
        s.insert("description".into(), description);
        s.insert("dependencies".into(), dependencies);
        for (k, v) in [("status", json!("pending")), ("result", Value::Null), ("error", Value::Null)] {
            s.insert(k.into(), v);
        }
        s.insert("retry_count".into(), json!(0));
        s.insert("started_at".into(), Value::Null);
        s.insert("completed_at".into(), Value::Null);
        s
    }

    /// A plan dictionary, or `decompose`'s whole result holding one under `plan`.
    fn from_value(value: &Value) -> Result<PlanData, String> {
        let value = match value {
            Value::Object(m) if !m.contains_key("id") && m.get("plan").is_some_and(Value::is_object) => &m["plan"],
            other => other,
        };
        let Value::Object(m) = value else {
            return Err(format!("Invalid plan type: {}", crate::state::describe(value)));
        };
        let id = m.get("id").ok_or("'id'")?.clone();
        let goal = m.get("goal").ok_or("'goal'")?.clone();
        let strategy = m.get("strategy").map_or_else(|| "flat".to_owned(), text);
        if !STRATEGIES.contains(&strategy.as_str()) {
            return Err(format!("'{strategy}' is not a valid PlanningStrategy"));
        }
        let given = m.get("subtasks").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        if given.len() as u64 > MAX_SUBTASKS {
            return Err(format!("the plan has {} subtasks, more than the {MAX_SUBTASKS} tea runs", given.len()));
        }
        let mut subtasks = Vec::new();
        for s in given {
            let Value::Object(s) = s else { return Err(format!("a subtask must be a mapping, not {s}")) };
            let sid = text(s.get("id").ok_or("'id'")?);
            let mut sub = PlanData::subtask(&sid, s.get("description").ok_or("'description'")?.clone(), json!([]));
            for (k, v) in s {
                if k != "id" {
                    sub.insert(k.clone(), v.clone());
                }
            }
            let status = text(&sub["status"]);
            if !STATUSES.contains(&status.as_str()) {
                return Err(format!("'{status}' is not a valid SubtaskStatus"));
            }
            subtasks.push(sub);
        }
        let metadata = m.get("metadata").and_then(Value::as_object).cloned().unwrap_or_default();
        let mut plan = PlanData { id: text(&id), goal, strategy, subtasks, metadata };
        plan.defaults();
        Ok(plan)
    }

    fn to_value(&self) -> Value {
        json!({
            "id": self.id,
            "goal": self.goal,
            "strategy": self.strategy,
            "subtasks": self.subtasks,
            "metadata": self.metadata,
        })
    }

    fn ids(&self) -> Vec<String> {
        self.subtasks.iter().map(|s| text(&s["id"])).collect()
    }

    fn deps(s: &Map<String, Value>) -> Vec<String> {
        s.get("dependencies").and_then(Value::as_array).map(|d| d.iter().map(text).collect()).unwrap_or_default()
    }

    /// The Edge Agent's `validate_dag`.
    fn validate(&self) -> Result<(), String> {
        let ids = self.ids();
        for s in &self.subtasks {
            for dep in PlanData::deps(s) {
                if !ids.contains(&dep) {
                    return Err(format!("Subtask '{}' depends on unknown subtask '{dep}'", text(&s["id"])));
                }
            }
        }
        // Depth-first over dependency → dependent, roots in list order.
        let dependents = |id: &str| -> Vec<String> {
            self.subtasks.iter().filter(|s| PlanData::deps(s).iter().any(|d| d == id)).map(|s| text(&s["id"])).collect()
        };
        let mut color: std::collections::HashMap<String, u8> = ids.iter().map(|i| (i.clone(), 0)).collect();
        fn visit(
            node: &str,
            path: &mut Vec<String>,
            color: &mut std::collections::HashMap<String, u8>,
            dependents: &dyn Fn(&str) -> Vec<String>,
        ) -> Result<(), String> {
            color.insert(node.to_owned(), 1);
            path.push(node.to_owned());
            for next in dependents(node) {
                match color.get(&next).copied().unwrap_or(0) {
                    1 => {
                        let from = path.iter().position(|p| *p == next).unwrap_or(0);
                        return Err(format!("Cycle detected: {} -> {next}", path[from..].join(" -> ")));
                    }
                    0 => visit(&next, path, color, dependents)?,
                    _ => {}
                }
            }
            path.pop();
            color.insert(node.to_owned(), 2);
            Ok(())
        }
        for id in &ids {
            if color.get(id) == Some(&0) {
                visit(id, &mut Vec::new(), &mut color, &dependents)?;
            }
        }
        Ok(())
    }

    /// Kahn's order, the smallest ready id first.
    fn order(&self) -> Result<Vec<String>, String> {
        self.validate().map_err(|e| format!("Cannot compute topological order: {e}"))?;
        let mut indegree: Vec<(String, usize)> =
            self.subtasks.iter().map(|s| (text(&s["id"]), PlanData::deps(s).len())).collect();
        let mut queue: Vec<String> = indegree.iter().filter(|(_, n)| *n == 0).map(|(i, _)| i.clone()).collect();
        let mut out = Vec::new();
        while !queue.is_empty() {
            queue.sort();
            let id = queue.remove(0);
            for s in &self.subtasks {
                if PlanData::deps(s).contains(&id) {
                    let sid = text(&s["id"]);
                    if let Some((_, n)) = indegree.iter_mut().find(|(i, _)| *i == sid) {
                        *n -= 1;
                        if *n == 0 {
                            queue.push(sid);
                        }
                    }
                }
            }
            out.push(id);
        }
        Ok(out)
    }

    fn status_of(&self, id: &str) -> Option<String> {
        self.subtasks.iter().find(|s| text(&s["id"]) == id).map(|s| text(&s["status"]))
    }

    fn get_mut(&mut self, id: &str) -> Option<&mut Map<String, Value>> {
        self.subtasks.iter_mut().find(|s| text(&s["id"]) == id)
    }

    fn ready(&self) -> Vec<String> {
        self.subtasks
            .iter()
            .filter(|s| s["status"] == "pending")
            .filter(|s| {
                PlanData::deps(s).iter().all(|d| matches!(self.status_of(d).as_deref(), Some("completed" | "skipped")))
            })
            .map(|s| text(&s["id"]))
            .collect()
    }

    fn counts(&self) -> Value {
        let count = |st: &str| self.subtasks.iter().filter(|s| s["status"] == st).count();
        json!({
            "pending": count("pending"),
            "in_progress": count("in_progress"),
            "completed": count("completed"),
            "failed": count("failed"),
            "skipped": count("skipped"),
            "total": self.subtasks.len(),
        })
    }
}

fn step(name: &str, extra: Value) -> Value {
    let mut s = json!({ "step": name, "timestamp": now() });
    if let (Value::Object(s), Value::Object(extra)) = (&mut s, extra) {
        s.extend(extra);
    }
    s
}

/// What a run of `plan.execute` carries from subtask to subtask.
struct Run<'a> {
    plan: PlanData,
    results: Map<String, Value>,
    trace: Vec<Value>,
    replans: u64,
    args: &'a Map<String, Value>,
}

impl Plan {
    /// Runs the action for node `node` on `state`: its result.
    pub(crate) fn run(&self, host: &dyn Composer, node: &NodeName, state: &State) -> Result<Value, BoxError> {
        let Value::Object(args) = host.render_on(&self.args, state)? else {
            return Err(format!("`with:` of `{}` must give a mapping", self.kind.name()).into());
        };
        Ok(match self.kind {
            PlanKind::Decompose => self.decompose(host, node, state, &args),
            PlanKind::Execute => self.execute(host, node, state, &args)?,
            PlanKind::Replan => {
                let plan = args.get("plan").filter(|p| !p.is_null()).or_else(|| state.shared().get("plan")).cloned();
                let map = state.shared();
                let failed = map.get("failed_subtask").cloned().unwrap_or(Value::Null);
                let reason = map.get("failure_reason").cloned().unwrap_or(json!("Unknown"));
                self.replan(host, node, state, &args, plan, failed, reason)
            }
            PlanKind::Status => status(&args, state),
        })
    }

    /// The options beside the action's own keys: `llm.call`'s.
    fn options(&self, args: &Map<String, Value>) -> Map<String, Value> {
        let own = self.kind.keys();
        args.iter().filter(|(k, _)| !own.contains(&k.as_str())).map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    /// One `llm.call`: its result (an error as `Err`).
    fn ask(
        &self,
        host: &dyn Composer,
        node: &NodeName,
        state: &State,
        args: &Map<String, Value>,
        (model, temperature): (Option<&Value>, Option<&Value>),
        (system, user): (String, String),
    ) -> Result<String, String> {
        let mut call = self.options(args);
        if let Some(m) = model {
            call.insert("model".into(), m.clone());
        }
        if let Some(t) = temperature {
            call.insert("temperature".into(), t.clone());
        }
        call.insert(
            "messages".into(),
            json!([{ "role": "system", "content": system }, { "role": "user", "content": user }]),
        );
        let llm = self.llm.as_ref().ok_or("`llm.call` is not available")?;
        let reply = actions::call(llm, &Call { host: host.host(), node, state }, &Value::Object(call))
            .map_err(|e| tea_runtime::error_chain(&*e))?;
        Ok(reply
            .get("content")
            .map(|c| if let Value::String(s) = c { s.clone() } else { c.to_string() })
            .unwrap_or_default())
    }

    fn decompose(&self, host: &dyn Composer, node: &NodeName, state: &State, args: &Map<String, Value>) -> Value {
        // `planner:`'s options, under the node's own.
        let planner = args.get("planner").and_then(Value::as_object);
        let opt = |k: &str| args.get(k).filter(|v| !v.is_null()).or_else(|| planner.and_then(|p| p.get(k)));
        let goal = opt("goal").cloned().unwrap_or(Value::Null);
        let strategy = opt("strategy").map_or_else(|| "flat".to_owned(), text);
        if !STRATEGIES.contains(&strategy.as_str()) {
            return json!({
                "error": format!("Unknown strategy: {strategy}. Use 'flat', 'hierarchical', or 'iterative'"),
                "success": false,
            });
        }
        let start = Instant::now();
        let model = opt("model").cloned();
        let mut trace = vec![step(
            "decompose_start",
            json!({ "goal": goal, "strategy": strategy, "model": model.clone().unwrap_or(Value::Null) }),
        )];
        let number =
            |k: &str, default: u64| opt(k).and_then(|v| v.as_u64().or_else(|| text(v).parse().ok())).unwrap_or(default);
        let max_subtasks = number("max_subtasks", 15).min(MAX_SUBTASKS) as usize;
        let system = match &self.prompt_template {
            Some(tree) => {
                let mut locals = state.shared().as_ref().clone();
                locals.insert("goal".into(), goal.clone());
                match host.render_with(tree, state, &locals) {
                    Ok(v) => text(&v),
                    Err(e) => {
                        return json!({ "error": format!("Plan decomposition failed: `prompt_template`: {e}"), "success": false, "planning_trace": trace })
                    }
                }
            }
            None => match strategy.as_str() {
                "hierarchical" => HIERARCHICAL
                    .replace("{max_depth}", &number("max_depth", 3).to_string())
                    .replace("{max_subtasks}", &max_subtasks.to_string()),
                "iterative" => {
                    let done: Vec<String> = state
                        .shared()
                        .get("subtask_results")
                        .and_then(Value::as_object)
                        .map(|m| m.iter().map(|(k, v)| format!("- {k}: {}", cut(&text(v), 100))).collect())
                        .unwrap_or_default();
                    let done = if done.is_empty() { "None".to_owned() } else { done.join("\n") };
                    ITERATIVE.replace("{completed_subtasks}", &done)
                }
                _ => FLAT.to_owned(),
            },
        };
        let fail = |trace: Vec<Value>, e: String| json!({ "error": e, "success": false, "planning_trace": trace });
        let reply = match self.ask(
            host,
            node,
            state,
            args,
            (model.as_ref(), opt("temperature")),
            (system, format!("Goal: {}", text(&goal))),
        ) {
            Ok(r) => r,
            Err(e) => return fail(trace, e),
        };
        let parsed = match parse_json(&reply) {
            Ok(p) => p,
            Err(e) => return fail(trace, format!("Failed to parse plan: {e}")),
        };
        let items = parsed.get("subtasks").and_then(Value::as_array).cloned().unwrap_or_default();
        if items.is_empty() {
            return fail(trace, "No subtasks returned from LLM".to_owned());
        }
        let mut items = items;
        if items.len() > max_subtasks {
            trace.push(step(
                "subtasks_truncated",
                json!({ "original_count": items.len(), "truncated_to": max_subtasks }),
            ));
            items.truncate(max_subtasks);
        }
        let mut subtasks = Vec::new();
        for item in &items {
            let id = item.get("id").map_or_else(|| format!("subtask_{}", subtasks.len() + 1), text);
            let description = item.get("description").cloned().unwrap_or(json!(""));
            let deps = item.get("dependencies").cloned().unwrap_or(json!([]));
            subtasks.push(PlanData::subtask(&id, description, deps));
        }
        let plan = PlanData::new(goal, &strategy, subtasks, Map::new(), "plan_");
        if let Err(e) = plan.validate() {
            return fail(trace, format!("Invalid plan structure: {e}"));
        }
        trace.push(step(
            "decompose_complete",
            json!({ "elapsed_seconds": start.elapsed().as_secs_f64(), "subtask_count": plan.subtasks.len(), "plan_id": plan.id }),
        ));
        json!({
            "plan": plan.to_value(),
            "planning_trace": trace,
            "success": true,
            "plan_id": plan.id,
            "subtask_count": plan.subtasks.len(),
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn replan(
        &self,
        host: &dyn Composer,
        node: &NodeName,
        state: &State,
        args: &Map<String, Value>,
        plan: Option<Value>,
        failed: Value,
        reason: Value,
    ) -> Value {
        let Some(plan) = plan.filter(|p| !p.is_null()) else {
            return json!({ "error": "No plan to replan", "success": false });
        };
        let plan = match PlanData::from_value(&plan) {
            Ok(p) => p,
            Err(e) => return json!({ "error": format!("Replan failed: {e}"), "success": false }),
        };
        let replans = plan.metadata.get("replan_count").and_then(Value::as_u64).unwrap_or(0);
        if let Some(max) = args.get("max_replans").and_then(Value::as_u64) {
            if replans >= max {
                return json!({
                    "error": format!("Maximum replans ({max}) exceeded. Consider adjusting max_replans or reviewing the goal."),
                    "success": false,
                });
            }
        }
        let start = Instant::now();
        let mut trace = vec![step(
            "replan_start",
            json!({ "plan_id": plan.id, "failed_subtask": failed, "failure_reason": reason }),
        )];
        let keep = args.get("preserve_completed").is_none_or(|v| v != &Value::Bool(false));
        let (completed, remaining): (Vec<&Subtask>, Vec<&Subtask>) =
            plan.subtasks.iter().partition(|s| s["status"] == "completed");
        let lines = |items: &[&Subtask], result: bool| -> String {
            let l: Vec<String> = items
                .iter()
                .map(|s| {
                    let base = format!("- {}: {}", text(&s["id"]), text(&s["description"]));
                    if result {
                        format!("{base} (Result: {})", cut(&text(&s["result"]), 100))
                    } else {
                        base
                    }
                })
                .collect();
            if l.is_empty() {
                "None".to_owned()
            } else {
                l.join("\n")
            }
        };
        let completed_ids: Vec<String> = completed.iter().map(|s| format!("'{}'", text(&s["id"]))).collect();
        let mut user = format!(
            "You are re-planning after a subtask failure.\n\nOriginal goal: {}\n\nCOMPLETED subtasks (keep these):\n{}\n\n\
             REMAINING subtasks (may need adjustment):\n{}\n\nFailed subtask: {}\nFailure reason: {}\n",
            text(&plan.goal),
            lines(&completed, true),
            lines(&remaining, false),
            text(&failed),
            text(&reason),
        );
        if let Some(context) = args.get("context").filter(|c| !c.is_null()) {
            user.push_str(&format!("\nContext:\n{}\n", text(context)));
        }
        user.push_str(&format!(
            "\nCreate a NEW plan for the remaining work. You may:\n1. Retry the failed subtask with different approach\n\
             2. Add alternative subtasks\n3. Remove blocked subtasks\n4. Adjust dependencies\n\nCompleted subtask IDs: [{}]\n\n\
             Your response MUST be valid JSON:\n{{\n  \"subtasks\": [\n    {{\"id\": \"new_subtask_1\", \"description\": \"...\", \
             \"dependencies\": [...]}},\n    ...\n  ],\n  \"adjustment_rationale\": \"Why you made these changes\"\n}}",
            completed_ids.join(", ")
        ));
        let system = "You are a planning assistant helping to recover from a failed subtask.".to_owned();
        let fail = |trace: Vec<Value>, e: String| json!({ "error": e, "success": false, "planning_trace": trace });
        let reply =
            match self.ask(host, node, state, args, (args.get("model"), args.get("temperature")), (system, user)) {
                Ok(r) => r,
                Err(e) => return fail(trace, e),
            };
        let parsed = match parse_json(&reply) {
            Ok(p) => p,
            Err(e) => return fail(trace, format!("Failed to parse replan: {e}")),
        };
        let mut new = Vec::new();
        for item in parsed.get("subtasks").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
            let id = item.get("id").map_or_else(|| format!("replan_subtask_{}", new.len() + 1), text);
            let description = item.get("description").cloned().unwrap_or(json!(""));
            let deps = item.get("dependencies").cloned().unwrap_or(json!([]));
            new.push(PlanData::subtask(&id, description, deps));
        }
        let new_count = new.len();
        let kept: Vec<Map<String, Value>> = if keep { completed.into_iter().cloned().collect() } else { Vec::new() };
        let preserved = kept.len();
        let mut metadata = plan.metadata.clone();
        metadata.insert("replan_count".into(), json!(replans + 1));
        metadata.insert("replanned_at".into(), json!(now()));
        metadata.insert("replan_reason".into(), reason);
        let next = PlanData::new(
            plan.goal.clone(),
            &plan.strategy,
            kept.into_iter().chain(new).collect(),
            metadata,
            "replan_",
        );
        if let Err(e) = next.validate() {
            return fail(trace, format!("Replanned structure invalid: {e}"));
        }
        trace.push(step(
            "replan_complete",
            json!({
                "elapsed_seconds": start.elapsed().as_secs_f64(),
                "preserved_subtasks": preserved,
                "new_subtasks": new_count,
                "rationale": parsed.get("adjustment_rationale").cloned().unwrap_or(json!("")),
            }),
        ));
        json!({
            "plan": next.to_value(),
            "preserved_subtasks": preserved,
            "new_subtasks": new_count,
            "planning_trace": trace,
            "success": true,
        })
    }

    fn execute(
        &self,
        host: &dyn Composer,
        node: &NodeName,
        state: &State,
        args: &Map<String, Value>,
    ) -> Result<Value, BoxError> {
        let map = state.shared();
        let Some(given) =
            args.get("plan").filter(|p| !p.is_null()).or_else(|| map.get("plan").filter(|p| !p.is_null()))
        else {
            return Ok(
                json!({ "error": "No plan provided. Use plan.decompose first or provide plan parameter.", "success": false }),
            );
        };
        let plan = match PlanData::from_value(given) {
            Ok(p) => p,
            Err(e) if e.starts_with("Invalid plan type") => return Ok(json!({ "error": e, "success": false })),
            Err(e) => return Ok(json!({ "error": format!("Plan execution failed: {e}"), "success": false })),
        };
        let on_failure = args.get("on_subtask_failure").map_or_else(|| "abort".to_owned(), text);
        if !ON_FAILURE.contains(&on_failure.as_str()) {
            return Ok(json!({
                "error": format!("Unknown failure strategy: {on_failure}. Use 'replan', 'retry', 'skip', or 'abort'"),
                "success": false,
            }));
        }
        let parallel = args.get("parallel") == Some(&Value::Bool(true));
        let max_concurrent =
            args.get("max_concurrent").and_then(Value::as_u64).unwrap_or(3).clamp(1, MAX_SUBTASKS) as usize;
        let start = Instant::now();
        let mut run = Run {
            trace: vec![step(
                "execute_start",
                json!({ "plan_id": plan.id, "parallel": parallel, "max_concurrent": max_concurrent, "failure_strategy": on_failure }),
            )],
            plan,
            results: map.get("subtask_results").and_then(Value::as_object).cloned().unwrap_or_default(),
            replans: map.get("replan_count").and_then(Value::as_u64).unwrap_or(0),
            args,
        };
        let order = match run.plan.order() {
            Ok(o) => o,
            Err(e) => return Ok(json!({ "error": e, "success": false, "planning_trace": run.trace })),
        };
        let outcome = if parallel {
            self.waves(host, node, state, &mut run, &on_failure, max_concurrent)?
        } else {
            let mut outcome = None;
            for id in order {
                match run.plan.status_of(&id).as_deref() {
                    None | Some("completed" | "skipped") => continue,
                    _ => {}
                }
                if let Some(abort) = self.subtask(host, node, state, &mut run, &id, &on_failure)? {
                    outcome = Some(abort);
                    break;
                }
            }
            outcome
        };
        if let Some(error) = outcome {
            return Ok(json!({
                "error": error,
                "success": false,
                "plan": run.plan.to_value(),
                "subtask_results": run.results,
                "planning_trace": run.trace,
            }));
        }
        let counts = run.plan.counts();
        run.trace.push(step(
            "execute_complete",
            json!({ "elapsed_seconds": start.elapsed().as_secs_f64(), "status_counts": counts }),
        ));
        let success = counts["failed"] == 0 && counts["pending"] == 0;
        Ok(json!({
            "plan": run.plan.to_value(),
            "subtask_results": run.results,
            "plan_status": counts,
            "replan_count": run.replans,
            "planning_trace": run.trace,
            "success": success,
        }))
    }

    /// `parallel: true`: the ready subtasks in waves of `max_concurrent` (each wave's in the
    /// plan's order). `Some(error)` when the run aborts.
    fn waves(
        &self,
        host: &dyn Composer,
        node: &NodeName,
        state: &State,
        run: &mut Run<'_>,
        on_failure: &str,
        max_concurrent: usize,
    ) -> Result<Option<String>, BoxError> {
        loop {
            let ready = run.plan.ready();
            if ready.is_empty() {
                let pending = run.plan.subtasks.iter().any(|s| s["status"] == "pending");
                let failed = run.plan.subtasks.iter().any(|s| s["status"] == "failed");
                if !pending || failed {
                    return Ok(None);
                }
                return Ok(Some("Execution stuck - no ready subtasks but pending remain".to_owned()));
            }
            for id in ready.into_iter().take(max_concurrent) {
                if let Some(abort) = self.subtask(host, node, state, run, &id, on_failure)? {
                    return Ok(Some(abort));
                }
            }
        }
    }

    /// Runs subtask `id` (with the failure strategy): `Some(error)` when the run aborts.
    fn subtask(
        &self,
        host: &dyn Composer,
        node: &NodeName,
        state: &State,
        run: &mut Run<'_>,
        id: &str,
        on_failure: &str,
    ) -> Result<Option<String>, BoxError> {
        if let Some(s) = run.plan.get_mut(id) {
            s.insert("status".into(), json!("in_progress"));
            s.insert("started_at".into(), json!(now()));
        }
        let number = |k: &str, default: f64| run.args.get(k).and_then(Value::as_f64).unwrap_or(default);
        let max_retries = (number("max_retries", 2.0).max(0.0) as u64).min(MAX_ROUNDS);
        let retry_delay = number("retry_delay", 1.0).clamp(0.0, 3600.0);
        let max_replans = (number("max_replans", 2.0).max(0.0) as u64).min(MAX_ROUNDS);
        let mut attempt = self.one(host, node, state, run, id)?;
        loop {
            let error = match attempt {
                Ok(result) => {
                    let s = run.plan.get_mut(id).expect("the subtask is in the plan");
                    s.insert("status".into(), json!("completed"));
                    s.insert("completed_at".into(), json!(now()));
                    s.insert("result".into(), result.clone());
                    let started = s["started_at"].as_f64().unwrap_or_else(now);
                    run.results.insert(id.to_owned(), result);
                    run.trace.push(step(&format!("subtask_{id}_complete"), json!({ "duration": now() - started })));
                    return Ok(None);
                }
                Err(e) => e,
            };
            let mark = |run: &mut Run<'_>, status: &str, error: &str| {
                if let Some(s) = run.plan.get_mut(id) {
                    s.insert("status".into(), json!(status));
                    s.insert("error".into(), json!(error));
                    s.insert("completed_at".into(), json!(now()));
                }
            };
            match on_failure {
                "skip" => {
                    mark(run, "skipped", &error);
                    run.trace.push(step(&format!("subtask_{id}_skipped"), json!({ "error": error })));
                    return Ok(None);
                }
                "retry" => {
                    let tries = run.plan.get_mut(id).and_then(|s| s["retry_count"].as_u64()).unwrap_or(0);
                    if tries >= max_retries {
                        let message = format!("Max retries ({max_retries}) exceeded: {error}");
                        mark(run, "failed", &message);
                        run.trace.push(step(&format!("subtask_{id}_max_retries"), json!({})));
                        return Ok(Some(message));
                    }
                    let delay = retry_delay * 2f64.powi(tries as i32);
                    if let Some(s) = run.plan.get_mut(id) {
                        s.insert("retry_count".into(), json!(tries + 1));
                    }
                    run.trace.push(step(&format!("subtask_{id}_retry_{}", tries + 1), json!({ "delay": delay })));
                    std::thread::sleep(std::time::Duration::from_secs_f64(delay.min(3600.0)));
                    attempt = self.one(host, node, state, run, id)?;
                }
                "replan" => {
                    if run.replans >= max_replans {
                        let message = format!("Max replans ({max_replans}) exceeded: {error}");
                        mark(run, "failed", &message);
                        run.trace.push(step(&format!("subtask_{id}_max_replans"), json!({})));
                        return Ok(Some(message));
                    }
                    run.trace.push(step(
                        "triggering_replan",
                        json!({ "failed_subtask": id, "replan_count": run.replans + 1 }),
                    ));
                    let replanned =
                        self.replan(host, node, state, run.args, Some(run.plan.to_value()), json!(id), json!(error));
                    if replanned["success"] != true {
                        let message = format!("Replan failed: {}", text(&replanned["error"]));
                        mark(run, "failed", &message);
                        return Ok(Some(message));
                    }
                    run.plan = PlanData::from_value(&replanned["plan"]).map_err(|e| format!("the new plan: {e}"))?;
                    run.replans += 1;
                    // The new plan's subtasks run in its order, from where the old one stopped.
                    let order = run.plan.order().map_err(|e| format!("the new plan: {e}"))?;
                    for next in order {
                        if run.plan.status_of(&next).as_deref() != Some("pending") {
                            continue;
                        }
                        if let Some(abort) = self.subtask(host, node, state, run, &next, on_failure)? {
                            return Ok(Some(abort));
                        }
                    }
                    return Ok(None);
                }
                _ => {
                    mark(run, "failed", &error);
                    run.trace.push(step(&format!("subtask_{id}_failed_abort"), json!({ "error": error })));
                    return Ok(Some(error));
                }
            }
        }
    }

    /// One run of subtask `id` by the executor: its result (`content` of an `llm.call`), or
    /// the error.
    fn one(
        &self,
        host: &dyn Composer,
        node: &NodeName,
        state: &State,
        run: &Run<'_>,
        id: &str,
    ) -> Result<Result<Value, String>, BoxError> {
        let subtask = run.plan.subtasks.iter().find(|s| text(&s["id"]) == id).cloned().unwrap_or_default();
        let mut work = state.shared().as_ref().clone();
        work.insert("current_subtask".into(), Value::Object(subtask.clone()));
        work.insert("subtask_results".into(), Value::Object(run.results.clone()));
        let mut locals = work.clone();
        locals.insert("subtask".into(), Value::Object(subtask.clone()));
        locals.insert("goal".into(), run.plan.goal.clone());
        let work_state = State::from_map(work);
        let (name, action, with) = match &self.executor {
            Some((name, action, with)) => (name.as_str(), action, Some(with)),
            None => match &self.llm {
                Some(llm) => ("llm.call", llm, None),
                None => return Ok(Err("`llm.call` is not available".to_owned())),
            },
        };
        let mut params = match with.map(|w| host.render_with(w, &work_state, &locals)).transpose() {
            Ok(Some(Value::Object(p))) => p,
            Ok(_) => Map::new(),
            Err(e) => return Ok(Err(format!("`subtask_executor.with`: {e}"))),
        };
        if name == "llm.call" {
            if with.is_none() {
                if let Some(model) = run.args.get("model") {
                    params.insert("model".into(), model.clone());
                }
            }
            let empty = params.get("messages").is_none_or(|m| m.as_array().is_none_or(Vec::is_empty));
            if empty && !params.contains_key("prompt") {
                let mut context = String::new();
                for dep in PlanData::deps(&subtask) {
                    if let Some(r) = run.results.get(&dep) {
                        context.push_str(&format!("\nResult from '{dep}': {}", cut(&text(r), 500)));
                    }
                }
                let description = text(subtask.get("description").unwrap_or(&Value::Null));
                params.insert(
                    "messages".into(),
                    json!([
                        { "role": "system", "content": EXECUTOR_SYSTEM },
                        { "role": "user", "content": format!("Subtask: {description}{context}") },
                    ]),
                );
            }
        }
        let call = Call { host: host.host(), node, state: &work_state };
        Ok(match actions::call(action, &call, &Value::Object(params)) {
            Ok(result) => match result.get("error").filter(|e| !e.is_null() && **e != Value::Bool(false)) {
                Some(e) => Err(text(e)),
                None => Ok(result.get("content").cloned().unwrap_or(result)),
            },
            Err(e) => Err(tea_runtime::error_chain(&*e)),
        })
    }
}

/// `plan.status`.
fn status(args: &Map<String, Value>, state: &State) -> Value {
    let map = state.shared();
    let Some(given) = args.get("plan").filter(|p| !p.is_null()).or_else(|| map.get("plan").filter(|p| !p.is_null()))
    else {
        return json!({ "error": "No plan found", "success": false });
    };
    let plan = match PlanData::from_value(given) {
        Ok(p) => p,
        Err(e) => return json!({ "error": format!("Status check failed: {e}"), "success": false }),
    };
    let counts = plan.counts();
    let total = plan.subtasks.len();
    let done = counts["completed"].as_u64().unwrap_or(0) + counts["skipped"].as_u64().unwrap_or(0);
    let progress = if total == 0 { 1.0 } else { done as f64 / total as f64 };
    let mut out =
        json!({ "status": counts, "progress": progress, "plan_id": plan.id, "goal": plan.goal, "success": true });
    if args.get("include_details") == Some(&Value::Bool(true)) {
        let keep_completed = args.get("include_completed") != Some(&Value::Bool(false));
        let subtasks: Vec<&Map<String, Value>> =
            plan.subtasks.iter().filter(|s| keep_completed || s["status"] != "completed").collect();
        out["subtasks"] = json!(subtasks);
    }
    out
}

/// Loading its `with:` (part of the loading layer, `crate::load`).
pub(crate) mod load;
