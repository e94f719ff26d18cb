//! The loader's composed actions (`mod.rs`): a node's `with:` compiled into its steps,
//! each checked where it is written (an unknown action, a block that does not compile, a
//! schema that is no schema), its templates left to render at each step.

use crate::actions::compose::{Composed, Evaluator, OnFailure, Reason, ReasonKind, Reflection, Step, THINKING_FORMATS};
use crate::load::*;

/// The actions the loader compiles into a [`Composed`] (unless the engine registers one of
/// the same name).
pub(crate) const COMPOSED: &[&str] = &[
    "reflection.loop",
    "reason.cot",
    "reason.react",
    "reason.self_correct",
    "reason.decompose",
    "reason.dspy.cot",
    "reason.dspy.react",
    "retry.loop",
    "validate.extraction",
    "agent.dispatch",
    "agent.parallel",
    "agent.sequential",
    "agent.coordinate",
    "plan.decompose",
    "plan.execute",
    "plan.replan",
    "plan.status",
    "lua.eval",
    "return",
];

/// The keys of `reflection.loop`'s `with:`.
const REFLECTION_KEYS: &[&str] = &["generator", "evaluator", "corrector", "max_iterations", "on_failure"];
/// The most passes of a `reflection.loop`.
const MAX_REFLECTION_ITERATIONS: i64 = 100;

/// The keys of a composed action's `with:` that calls `llm.call`: its own, then `llm.call`'s
/// options (the model, the provider, …; not its messages), which go to each call.
pub(crate) fn with_llm_options(own: &[&'static str], llm: &Action) -> Vec<&'static str> {
    let llm_keys: &[&'static str] = match llm {
        #[cfg(feature = "net")]
        Action::Net(net) => net.keys(),
        _ => &[],
    };
    let _ = llm;
    own.iter().chain(llm_keys.iter().filter(|k| !matches!(**k, "messages" | "prompt" | "system"))).copied().collect()
}

impl Loader<'_> {
    /// Node `name`'s `uses: NAME` (one of [`COMPOSED`]) with its `with:`.
    pub(crate) fn composed(&mut self, action: &str, fields: &HashMap<&str, &Node>, uses: &Node, name: &str) -> Exec {
        if matches!(action, "lua.eval" | "return") {
            let composed = self.browser_action(action, fields.get("with").copied(), name, uses.pos);
            // As its browser build: without `output:`, the result goes under the node's name.
            let output = match fields.get("output") {
                Some(_) => self.output(fields, name),
                None => Output::Key(name.to_owned()),
            };
            return match composed {
                Some(composed) => Exec::Composed { name: action.to_owned(), composed: Arc::new(composed), output },
                None => Exec::Noop,
            };
        }
        if let Some(kind) = crate::actions::planning::PlanKind::named(action) {
            let composed = self.planning(kind, fields.get("with").copied(), name, uses.pos);
            let output = self.output(fields, name);
            return match composed {
                Some(composed) => Exec::Composed { name: action.to_owned(), composed: Arc::new(composed), output },
                None => Exec::Noop,
            };
        }
        if matches!(action, "retry.loop" | "validate.extraction") {
            let composed =
                crate::actions::extraction::load::composed(self, action, fields.get("with").copied(), name, uses.pos);
            let output = self.output(fields, name);
            return match composed {
                Some(composed) => Exec::Composed { name: action.to_owned(), composed: Arc::new(composed), output },
                None => Exec::Noop,
            };
        }
        let Some(with) = fields.get("with") else {
            let needs = match action {
                "reflection.loop" => "generator, evaluator",
                "reason.react" | "reason.dspy.react" => "goal",
                "reason.self_correct" => "task",
                "agent.dispatch" => "agent, task",
                "agent.parallel" => "agents, task",
                "agent.sequential" => "agents, task",
                "agent.coordinate" => "leader, workers, task",
                _ => "problem",
            };
            self.problem(uses.pos, format!("`{action}` (node `{name}`) needs `with: {{ {needs}, … }}`"));
            return Exec::Noop;
        };
        let composed = match action {
            _ if crate::actions::crew::CrewKind::named(action).is_some() => {
                crate::actions::crew::CrewKind::named(action).and_then(|kind| self.crew(kind, with, name))
            }
            "reflection.loop" => self.reflection(with, name).map(|r| Composed::Reflection(Box::new(r))),
            "reason.cot" => self.reason(ReasonKind::Cot, with, name, false).map(Composed::Reason),
            "reason.react" => self.reason(ReasonKind::React, with, name, false).map(Composed::Reason),
            "reason.self_correct" => self.reason(ReasonKind::SelfCorrect, with, name, false).map(Composed::Reason),
            "reason.decompose" => self.reason(ReasonKind::Decompose, with, name, false).map(Composed::Reason),
            "reason.dspy.cot" | "reason.dspy.react" => {
                let kind = if action == "reason.dspy.cot" { ReasonKind::Cot } else { ReasonKind::React };
                self.warn(
                    uses.pos,
                    "dspy",
                    format!(
                        "`{action}` (node `{name}`): tea embeds no DSPy, so it runs `{}`, as The Edge Agent does \
                         where DSPy is not installed (the result says `dspy_module: native_fallback`)",
                        kind.name()
                    ),
                );
                self.reason(kind, with, name, true).map(Composed::Reason)
            }
            _ => None,
        };
        let output = self.output(fields, name);
        match composed {
            Some(composed) => Exec::Composed { name: action.to_owned(), composed: Arc::new(composed), output },
            None => Exec::Noop,
        }
    }

    /// `lua.eval` (`with: { code }`, Lua compiled now) and `return` (`with: { value }`), of
    /// The Edge Agent's browser build.
    fn browser_action(&mut self, action: &str, with: Option<&Node>, name: &str, pos: Pos) -> Option<Composed> {
        let what = format!("`with` of `{action}` (node `{name}`)");
        let Some(with) = with else {
            let needs = if action == "lua.eval" { "code" } else { "value" };
            self.problem(pos, format!("`{action}` (node `{name}`) needs `with: {{ {needs}: … }}`"));
            return None;
        };
        if action == "return" {
            return Some(Composed::Return(self.tree(with)));
        }
        let f = self.fields(with, &what, &["code"])?;
        let Some(code) = f.get("code") else {
            self.problem(with.pos, format!("{what} needs `code` (a Lua chunk)"));
            return None;
        };
        match &code.kind {
            Kind::Str { text, .. } if text.contains("{{") || text.contains("{%") => {
                self.problem(
                    code.pos,
                    format!(
                        "`code` of {what} is a template: tea compiles Lua at load; read the state in the chunk instead"
                    ),
                );
                None
            }
            Kind::Str { .. } => {
                let before = self.problems.len();
                match self.run(code, name, None, Some(false)) {
                    Exec::Lua(chunk) => Some(Composed::LuaEval(chunk)),
                    _ if self.problems.len() > before => None,
                    _ => {
                        self.problem(code.pos, format!("`code` of {what} must be a Lua chunk"));
                        None
                    }
                }
            }
            _ => {
                self.problem(code.pos, format!("`code` of {what} must be Lua text, not {}", code.what()));
                None
            }
        }
    }

    /// `reason.*`: the pattern's own keys, and `llm.call`'s options beside them.
    fn reason(&mut self, kind: ReasonKind, with: &Node, name: &str, dspy: bool) -> Option<Reason> {
        let action = match (dspy, kind) {
            (true, ReasonKind::Cot) => "reason.dspy.cot",
            (true, _) => "reason.dspy.react",
            (false, _) => kind.name(),
        };
        let what = format!("`with` of `{action}` (node `{name}`)");
        let llm = self.step_action("llm.call", with.pos, &what)?;
        let mut allowed = with_llm_options(kind.keys(), &llm);
        if dspy {
            allowed.extend(kind.dspy_keys());
        }
        let f = self.fields(with, &what, &allowed)?;
        let required = kind.keys()[0];
        if !f.contains_key(required) {
            self.problem(with.pos, format!("{what} needs `{required}`"));
        }
        if let Some(format) = f.get("thinking_format") {
            if let Some(text) = format.as_str().filter(|t| !t.contains("{{")) {
                if !THINKING_FORMATS.iter().any(|(f, _)| *f == text) {
                    let hint = suggest(text, THINKING_FORMATS.iter().map(|(f, _)| *f));
                    self.problem(
                        format.pos,
                        format!(
                            "`thinking_format` of `{action}` (node `{name}`) is `step_by_step`, `pros_cons`, `tree` \
                             or `first_principles`, not `{text}`{hint}"
                        ),
                    );
                }
            }
        }
        let mut tools = Vec::new();
        if let Some(list) = f.get("tools") {
            let Some(items) = list.as_seq() else {
                self.problem(list.pos, format!("`tools` of `{action}` (node `{name}`) is a list of action names"));
                return None;
            };
            for item in items {
                let Some(tool) = self.string(item, &format!("a tool of `{action}` (node `{name}`)")) else { continue };
                let found = self.known_action(tool, item.pos, &format!("a tool of `{action}` (node `{name}`)"));
                match found {
                    Some(a) => tools.push((tool.to_owned(), Some(a))),
                    None if actions::edge_agent_only(tool).is_some() => {
                        self.warn(
                            item.pos,
                            &format!("tool {tool}"),
                            format!(
                                "tool `{tool}` of `{action}` (node `{name}`) is one of The Edge Agent's actions tea \
                                 lacks: the model is offered it, and a call observes that it is not there"
                            ),
                        );
                        tools.push((tool.to_owned(), None));
                    }
                    None => {
                        let known: Vec<&str> =
                            self.env.actions.keys().map(String::as_str).chain(BUILT_IN_NAMES).collect();
                        let hint = suggest(tool, known.iter().copied());
                        self.problem(
                            item.pos,
                            format!("unknown action `{tool}` among the tools of `{action}` (node `{name}`){hint}"),
                        );
                    }
                }
            }
        }
        let args = self.sending_tree(with, sending_keys(&llm));
        Some(Reason { kind, args, llm, tools, dspy })
    }

    fn reflection(&mut self, with: &Node, name: &str) -> Option<Reflection> {
        let what = format!("`with` of `reflection.loop` (node `{name}`)");
        let f = self.fields(with, &what, REFLECTION_KEYS)?;
        let Some(generator) = f.get("generator") else {
            self.problem(with.pos, format!("{what} needs `generator: {{ action: NAME, … }}` or `{{ run: BLOCK }}`"));
            return None;
        };
        let generator = self.step(generator, name, "generator");
        let evaluator = match f.get("evaluator") {
            Some(e) => self.evaluator(e, name),
            None => {
                self.problem(with.pos, format!("{what} needs `evaluator: {{ type: schema | llm | custom, … }}`"));
                None
            }
        };
        let corrector = f.get("corrector").map(|c| self.step(c, name, "corrector"));
        let max_iterations = match f.get("max_iterations") {
            None => 3,
            Some(n) => match n.kind {
                Kind::Int(i) if (1..=MAX_REFLECTION_ITERATIONS).contains(&i) => i as usize,
                _ => {
                    self.problem(
                        n.pos,
                        format!(
                            "`max_iterations` of `reflection.loop` (node `{name}`) is a number from 1 to \
                             {MAX_REFLECTION_ITERATIONS}, not {}",
                            n.scalar_text().unwrap_or_else(|| n.what().to_owned())
                        ),
                    );
                    3
                }
            },
        };
        let on_failure = match f.get("on_failure") {
            None => OnFailure::ReturnBest,
            Some(n) => match n.as_str() {
                Some("return_best") => OnFailure::ReturnBest,
                Some("return_last") => OnFailure::ReturnLast,
                Some("raise") => OnFailure::Raise,
                _ => {
                    let text = n.scalar_text().unwrap_or_else(|| n.what().to_owned());
                    let hint = suggest(&text, ["return_best", "return_last", "raise"]);
                    self.problem(
                        n.pos,
                        format!(
                            "`on_failure` of `reflection.loop` (node `{name}`) is `return_best`, `return_last` or \
                             `raise`, not `{text}`{hint}"
                        ),
                    );
                    OnFailure::ReturnBest
                }
            },
        };
        Some(Reflection {
            generator: generator?,
            evaluator: evaluator?,
            corrector: match corrector {
                Some(Some(step)) => Some(step),
                Some(None) => return None,
                None => None,
            },
            max_iterations,
            on_failure,
        })
    }

    /// A step: `{ action: NAME, ARGS… }` or `{ run: BLOCK, language }`.
    fn step(&mut self, node: &Node, name: &str, role: &str) -> Option<Step> {
        let what = format!("`{role}` of node `{name}`");
        let Some(entries) = node.as_map() else {
            self.problem(node.pos, format!("{what} must be a mapping (`action: NAME` with its arguments, or `run:`)"));
            return None;
        };
        let get = |key: &str| entries.iter().find(|(k, _)| k.as_str() == Some(key)).map(|(_, v)| v);
        if let Some(run) = get("run") {
            for (k, _) in entries {
                if !matches!(k.as_str(), Some("run" | "language")) {
                    let key = k.scalar_text().unwrap_or_default();
                    self.problem(k.pos, format!("unknown key `{key}` in {what}: a `run:` step takes `language`"));
                }
            }
            return self.block_step(run, get("language"), name, &what, false);
        }
        let Some(action) = get("action") else {
            self.problem(
                node.pos,
                format!("{what} needs `action: NAME` (with the action's arguments) or `run: BLOCK`"),
            );
            return None;
        };
        let action_name = self.string(action, &format!("`action` of {what}"))?.to_owned();
        let resolved = self.step_action(&action_name, action.pos, &what)?;
        let args = Node {
            pos: node.pos,
            kind: Kind::Map(entries.iter().filter(|(k, _)| k.as_str() != Some("action")).cloned().collect()),
        };
        #[cfg(feature = "net")]
        if let Action::Net(net) = &resolved {
            self.net_with(*net, Some(&args), action, name);
        }
        let args = self.action_tree(&args, &resolved);
        Some(Step::Action { name: action_name, action: resolved, args })
    }

    /// The action a step names: registered, else built in (not one that runs steps of its
    /// own).
    pub(crate) fn step_action(&mut self, action: &str, pos: Pos, what: &str) -> Option<Action> {
        if COMPOSED.contains(&action) && !self.env.actions.contains_key(action) {
            self.problem(
                pos,
                format!("{what} cannot be `{action}`: an action that runs steps of its own is not a step"),
            );
            return None;
        }
        self.resolve_action(action, pos, what)
    }

    /// A `run:` block of a step, in `language` (`lua`, `python`; else as a node's `run:`).
    /// `lua_output`: a Lua block sees the output under evaluation as `output`.
    fn block_step(
        &mut self,
        run: &Node,
        language: Option<&Node>,
        name: &str,
        what: &str,
        lua_output: bool,
    ) -> Option<Step> {
        let python = match language.map(|l| l.as_str()) {
            None => None,
            Some(Some("python")) => Some(true),
            Some(Some("lua")) => Some(false),
            Some(other) => {
                let text = other.unwrap_or_default();
                self.problem(
                    language.map_or(run.pos, |l| l.pos),
                    format!("`language` of {what} is `lua` or `python`, not `{text}` (tea runs no Prolog steps)"),
                );
                return None;
            }
        };
        let run = match (&run.kind, python) {
            // On the block's first line, so its lines stay the file's.
            (Kind::Str { text, block }, Some(false)) if lua_output => Node {
                pos: run.pos,
                kind: Kind::Str { text: format!("local output = state.output; {text}"), block: *block },
            },
            _ => run.clone(),
        };
        let before = self.problems.len();
        match self.run(&run, name, None, python) {
            Exec::Lua(chunk) => Some(Step::Lua(chunk)),
            Exec::Python(block) => Some(Step::Python(block)),
            Exec::Noop if self.problems.len() > before => None,
            _ => {
                self.problem(run.pos, format!("`run` of {what} is a Lua or Python block"));
                None
            }
        }
    }

    fn evaluator(&mut self, node: &Node, name: &str) -> Option<Evaluator> {
        let what = format!("`evaluator` of node `{name}`");
        let Some(entries) = node.as_map() else {
            self.problem(node.pos, format!("{what} must be a mapping (`type: schema | llm | custom`)"));
            return None;
        };
        let get = |key: &str| entries.iter().find(|(k, _)| k.as_str() == Some(key)).map(|(_, v)| v);
        let kind = match get("type") {
            None => "schema",
            Some(t) => self.string(t, &format!("`type` of {what}"))?,
        };
        let allowed: &[&str] = match kind {
            "schema" => &["type", "schema"],
            "llm" => &[
                "type",
                "prompt",
                "examples",
                "model",
                "provider",
                "temperature",
                "max_tokens",
                "timeout",
                "api_base",
                "base_url",
            ],
            "custom" => &["type", "run", "language"],
            other => {
                let hint = suggest(other, ["schema", "llm", "custom"]);
                self.problem(
                    get("type").map_or(node.pos, |t| t.pos),
                    format!("`type` of {what} is `schema`, `llm` or `custom`, not `{other}`{hint}"),
                );
                return None;
            }
        };
        let f = self.fields(node, &what, allowed)?;
        match kind {
            "schema" => {
                let Some(schema) = f.get("schema") else {
                    self.problem(node.pos, format!("{what} needs `schema:` (a JSON Schema)"));
                    return None;
                };
                let value = self.schema_value(schema, &what)?;
                match jsonschema::draft7::new(&value) {
                    Ok(validator) => Some(Evaluator::Schema(Box::new(validator), Arc::new(value))),
                    Err(e) => {
                        self.problem(schema.pos, format!("`schema` of {what} is not a JSON Schema: {e}"));
                        None
                    }
                }
            }
            "custom" => {
                let Some(run) = f.get("run") else {
                    self.problem(node.pos, format!("{what} needs `run:` (a block whose value is the verdict)"));
                    return None;
                };
                self.block_step(run, f.get("language").copied(), name, &what, true).map(Evaluator::Code)
            }
            _ => {
                let call = self.step_action("llm.call", node.pos, &what)?;
                let prompt = match f.get("prompt") {
                    Some(p) => self.tree(p),
                    None => Tree::Literal(Value::from("Evaluate if this output is valid and correct.")),
                };
                let mut examples = Vec::new();
                if let Some(list) = f.get("examples") {
                    match list.as_seq() {
                        Some(items) => {
                            for item in items {
                                let pair = item.as_map().and_then(|_| {
                                    let v = item.to_json();
                                    let text = |k: &str| match &v[k] {
                                        Value::String(s) => Some(s.clone()),
                                        Value::Null => None,
                                        other => Some(other.to_string()),
                                    };
                                    Some((text("input")?, text("output")?))
                                });
                                match pair {
                                    Some(pair) => examples.push(pair),
                                    None => {
                                        self.problem(item.pos, format!("an example of {what} is `{{ input, output }}`"))
                                    }
                                }
                            }
                        }
                        None => {
                            self.problem(list.pos, format!("`examples` of {what} is a list of `{{ input, output }}`"))
                        }
                    }
                }
                let args = Node {
                    pos: node.pos,
                    kind: Kind::Map(
                        entries
                            .iter()
                            .filter(|(k, _)| !matches!(k.as_str(), Some("type" | "prompt" | "examples")))
                            .cloned()
                            .collect(),
                    ),
                };
                let args = self.sending_tree(&args, sending_keys(&call));
                Some(Evaluator::Llm { call, args, prompt, examples })
            }
        }
    }

    /// A schema as JSON: written inline, or `{ $ref: FILE }` (JSON or YAML, relative to the
    /// agent's file), read at load.
    fn schema_value(&mut self, schema: &Node, what: &str) -> Option<Value> {
        let value = schema.to_json();
        let Some(file) = value.get("$ref").and_then(Value::as_str).filter(|r| !r.starts_with('#')) else {
            return Some(value);
        };
        let path = self.confined(schema.pos, &format!("`$ref` of {what}"), file, crate::grants::Access::Read)?;
        let text = match crate::grants::files::read_regular(&path, crate::grants::files::MAX_READ_FILE) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) => {
                self.problem(schema.pos, format!("`$ref` of {what}: cannot read `{file}`: {e}"));
                return None;
            }
        };
        match yaml::parse(&text) {
            Ok((tree, errors)) if errors.is_empty() => Some(tree.to_json()),
            Ok((_, errors)) => {
                let first = errors.first().map(|e| format!("{}:{}: {}", e.pos.line, e.pos.column, e.message));
                let first = first.unwrap_or_default();
                self.problem(schema.pos, format!("`$ref` of {what}: `{}` does not parse: {first}", path.display()));
                None
            }
            Err(e) => {
                let at = format!("{}:{}: {}", e.pos.line, e.pos.column, e.message);
                self.problem(schema.pos, format!("`$ref` of {what}: `{}` does not parse: {at}", path.display()));
                None
            }
        }
    }
}
