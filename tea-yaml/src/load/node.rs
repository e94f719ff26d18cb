//! The loader's nodes: each kind (`run:`, `uses:`, interrupt, `type: subgraph`,
//! `type: dynamic_parallel`), their templates and conditions, and how each hands over (`goto`,
//! breakpoints).

use super::*;

impl Loader<'_> {
    pub(crate) fn node<'n>(&mut self, item: &'n Node) -> Option<Draft<'n>> {
        self.node_or(item, None)
    }

    /// A node; `unnamed`: the name of a node written without one (a step of a
    /// `dynamic_parallel` node, `step_{k}` as in The Edge Agent), else that is a problem.
    pub(crate) fn node_or<'n>(&mut self, item: &'n Node, unnamed: Option<String>) -> Option<Draft<'n>> {
        let known: Vec<&str> = NODE_KEYS.iter().chain(EDGE_AGENT_NODE_KEYS.iter().map(|(k, _)| k)).copied().collect();
        let mut fields = self.fields(item, "a node", &known)?;
        // `action: NAME` with `params:`, as The Edge Agent's documentation writes a node: the
        // arguments the author meant (its engines drop them and run the action with none).
        // Its articles write them under `config:` too.
        let runs_action = fields.contains_key("uses") || fields.contains_key("action");
        for key in ["params", "config"] {
            if let (Some(args), true, false) = (fields.get(key).copied(), runs_action, fields.contains_key("with")) {
                fields.remove(key);
                fields.insert("with", args);
                self.warn(
                    args.pos,
                    &format!("{key} as with"),
                    format!(
                        "node key `{key}` (The Edge Agent's documentation) is read as the action's `with:`; its \
                         engines ignore it and run the action without arguments"
                    ),
                );
            }
        }
        for (key, instead) in EDGE_AGENT_NODE_KEYS {
            if let Some(node) = fields.remove(key) {
                self.warn(node.pos, key, format!("node key `{key}` (The Edge Agent's) is ignored: {instead}"));
            }
        }
        // `condition` outside a `type: while_loop` node: both of The Edge Agent's engines ignore it.
        if fields.get("type").and_then(|t| t.as_str()) != Some("while_loop") {
            if let Some(node) = fields.remove("condition") {
                self.warn(
                    node.pos,
                    "condition",
                    "`condition` on a node that is not a `type: while_loop` is ignored, as by The Edge Agent: to \
                     route on a condition, use `goto:` rules or an edge's `when:`",
                );
            }
        }
        let name = match fields.get("name") {
            None if unnamed.is_some() => unnamed.unwrap_or_default(),
            None => {
                self.problem(item.pos, "a node without a `name`");
                return None;
            }
            Some(n) => match n.scalar_text() {
                Some(name) if name.is_empty() => {
                    self.problem(n.pos, "a node's name must not be empty");
                    return None;
                }
                Some(name) if START.contains(&name.as_str()) || END.contains(&name.as_str()) => {
                    self.problem(
                        n.pos,
                        format!("`{name}` is reserved for the entry and the exit; name the node otherwise"),
                    );
                    return None;
                }
                Some(name) => name,
                None => {
                    self.problem(n.pos, format!("a node's name must be a string, not {}", n.what()));
                    return None;
                }
            },
        };
        let pos = fields.get("name").map_or(item.pos, |n| n.pos);
        let what = |key: &str| format!("`{key}` of node `{name}`");
        if let Some(d) = fields.get("description") {
            self.string(d, &what("description"));
        }
        let is_dynamic = fields.get("type").and_then(|t| t.as_str()) == Some("dynamic_parallel");
        if let (Some(f), false) = (fields.get("fan_in"), is_dynamic) {
            if !matches!(f.kind, Kind::Bool(_)) {
                self.problem(f.pos, format!("{} must be true or false", what("fan_in")));
            }
        }

        // The execution form: one of run, uses/action, type: interrupt.
        let run = fields.get("run").or_else(|| fields.get("script")).copied();
        let uses = fields.get("uses").or_else(|| fields.get("action")).copied();
        if fields.get("type").and_then(|t| t.as_str()) == Some("subgraph") {
            let exec = self.subgraph(&fields, &name, pos);
            let dynamic = None;
            let Flow { interrupt_before, interrupt_after, goto, marked_fan_in } = self.flow(&fields, &name);
            return Some(Draft {
                name,
                pos,
                exec,
                policy: None,
                goto,
                interrupt_before,
                interrupt_after,
                marked_fan_in,
                dynamic,
                after: None,
                item_of: None,
            });
        }
        if fields.get("type").and_then(|t| t.as_str()) == Some("while_loop") {
            let exec = self.while_loop(&fields, &name, pos);
            let Flow { interrupt_before, interrupt_after, goto, marked_fan_in } = self.flow(&fields, &name);
            return Some(Draft {
                name,
                pos,
                exec,
                policy: None,
                goto,
                interrupt_before,
                interrupt_after,
                marked_fan_in,
                dynamic: None,
                after: None,
                item_of: None,
            });
        }
        for key in ["max_iterations", "body"] {
            if let Some(n) = fields.get(key) {
                self.problem(
                    n.pos,
                    format!(
                        "`{key}` belongs to `type: while_loop` nodes; node `{name}` is not one (to route on a \
                         condition, use `goto:` rules or an edge's `when:`)"
                    ),
                );
            }
        }
        if is_dynamic {
            let (exec, dynamic) = self.dynamic(&fields, &name, pos);
            let marked_fan_in = None;
            return Some(Draft {
                name,
                pos,
                exec,
                policy: None,
                goto: None,
                interrupt_before: false,
                interrupt_after: false,
                marked_fan_in,
                dynamic,
                after: None,
                item_of: None,
            });
        }
        for key in ["file", "input"] {
            if let Some(n) = fields.get(key) {
                self.problem(n.pos, format!("`{key}` belongs to `type: subgraph` nodes; node `{name}` is not one"));
            }
        }
        for key in ["items", "item_var", "index_var", "max_concurrency", "fail_fast", "parallel_config", "subgraph"] {
            if let Some(n) = fields.get(key) {
                self.problem(
                    n.pos,
                    format!("`{key}` belongs to `type: dynamic_parallel` nodes; node `{name}` is not one"),
                );
            }
        }
        let is_interrupt = match fields.get("type") {
            None => false,
            Some(t) => match t.as_str() {
                Some("interrupt") => true,
                Some(other) => {
                    self.problem(
                        t.pos,
                        format!("node type `{other}` is not supported here; tea runs `type: interrupt`, `type: while_loop`, `type: subgraph` and `type: dynamic_parallel` nodes, `run:` blocks and `uses:` actions"),
                    );
                    false
                }
                None => {
                    self.problem(t.pos, format!("{} must be a string", what("type")));
                    false
                }
            },
        };
        let forms: Vec<&str> = [
            (fields.contains_key("run"), "run"),
            (fields.contains_key("script"), "script"),
            (fields.contains_key("uses"), "uses"),
            (fields.contains_key("action"), "action"),
            (is_interrupt, "type: interrupt"),
        ]
        .into_iter()
        .filter_map(|(on, f)| on.then_some(f))
        .collect();
        if forms.len() > 1 {
            self.problem(pos, format!("node `{name}` has two ways to run ({}); keep one", forms.join(", ")));
        }
        for key in ["message", "state_key", "resume_key"] {
            if let (Some(n), false) = (fields.get(key), is_interrupt) {
                self.problem(n.pos, format!("`{key}` belongs to `type: interrupt` nodes; node `{name}` is not one"));
            }
        }
        for key in ["with", "output"] {
            if let (Some(n), None, false) = (fields.get(key), uses, key == "output" && run.is_some()) {
                if run.is_none() && key == "with" && steps_absent(&fields) && !is_interrupt {
                    // A node with nothing to run and arguments (an overlay's fragment, a node
                    // whose action another file gives): The Edge Agent's engines ignore them.
                    self.warn(
                        n.pos,
                        "with without uses",
                        format!(
                            "`with` of node `{name}` is ignored: the node runs no action (`uses:`), so it does nothing"
                        ),
                    );
                } else {
                    self.problem(n.pos, format!("`{key}` goes with `uses:` (an action); node `{name}` has none"));
                }
            }
        }
        let (mut python, mut prolog) = (self.steps_language, false);
        if let Some(l) = fields.get("language") {
            match l.as_str() {
                Some("lua") => python = Some(false),
                Some("python") => python = Some(true),
                Some("prolog") => prolog = true,
                Some(other) => {
                    self.problem(l.pos, format!("unknown language `{other}`; `lua`, `python` and `prolog` run here"))
                }
                None => self.problem(l.pos, format!("{} must be a string", what("language"))),
            }
        }

        let steps = fields.get("steps").copied();
        if let (Some(n), false) = (steps, forms.is_empty()) {
            self.problem(n.pos, format!("node `{name}` has `steps` and `{}`: keep one way to run", forms.join("`, `")));
        }
        let exec = if let Some(list) = steps {
            // The Edge Agent's steps of a plain node: run in order within it, each step's keys
            // replacing those of the node's working copy of the state.
            match list.as_seq() {
                Some([]) => {
                    self.problem(list.pos, format!("`steps` of node `{name}` is empty"));
                    Exec::Noop
                }
                Some(items) => {
                    // The node's `language:` is its steps' own unless they name one.
                    let outer = std::mem::replace(&mut self.steps_language, python);
                    let body = self.inline_nodes(items, &name, "steps");
                    self.steps_language = outer;
                    Exec::Steps(body)
                }
                None => {
                    self.problem(
                        list.pos,
                        format!("`steps` of node `{name}` must be a list of nodes, not {}", list.what()),
                    );
                    Exec::Noop
                }
            }
        } else if is_interrupt {
            self.interrupt(&fields, &name)
        } else if let (Some(run), true) = (run, prolog) {
            self.prolog_run(run, &name, fields.get("output").copied())
        } else if let Some(run) = run {
            self.run(run, &name, fields.get("output").copied(), python)
        } else if let Some(uses) = uses {
            self.action(uses, &fields, &name)
        } else {
            Exec::Noop
        };

        let Flow { interrupt_before, interrupt_after, goto, marked_fan_in } = self.flow(&fields, &name);
        let dynamic = None;
        let policy = if is_interrupt { None } else { self.policy(&fields, &name) };
        Some(Draft {
            name,
            pos,
            exec,
            policy,
            goto,
            interrupt_before,
            interrupt_after,
            marked_fan_in,
            dynamic,
            after: None,
            item_of: None,
        })
    }

    /// A `type: subgraph` node: `file:` (a YAML agent, relative to this file), `input:` (the
    /// child's keys, templates over this state; absent: the child starts on a copy of this
    /// state) and `output:` (this state's keys, templates over the child's final state as
    /// `result`; absent: what the child's final state changed of this state is written key by
    /// key, see `Schema::changes`).
    pub(crate) fn subgraph(&mut self, fields: &HashMap<&str, &Node>, name: &str, pos: Pos) -> Exec {
        for key in
            ["run", "script", "uses", "action", "with", "message", "state_key", "resume_key", "timeout", "language"]
        {
            if let Some(n) = fields.get(key) {
                self.problem(
                    n.pos,
                    format!("`{key}` does not go on a `type: subgraph` node (`{name}`): the child file runs"),
                );
            }
        }
        let mapping = |this: &mut Self, key: &str| -> Option<Vec<(String, Tree)>> {
            let node = fields.get(key)?;
            match &node.kind {
                Kind::Map(entries) => {
                    Some(entries.iter().map(|(k, v)| (k.scalar_text().unwrap_or_default(), this.tree(v))).collect())
                }
                _ => {
                    this.problem(
                        node.pos,
                        format!("`{key}` of node `{name}` must be a mapping of keys to templates, not {}", node.what()),
                    );
                    None
                }
            }
        };
        let input = mapping(self, "input");
        let output = mapping(self, "output");
        let Some(file) = fields.get("file") else {
            self.problem(pos, format!("`type: subgraph` node `{name}` needs `file:` (the child agent's YAML file)"));
            return Exec::Noop;
        };
        let Some(path) = self.string(file, &format!("`file` of node `{name}`")) else { return Exec::Noop };
        let path = crate::actions::resolve(&self.env.base_dir, path);
        if let Err(e) = self.grants.confine_path(&path, crate::grants::Access::Read) {
            self.problem(file.pos, format!("`file` of node `{name}`: {e}"));
            return Exec::Noop;
        }
        let canonical = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        if self.env.parents.contains(&canonical) {
            self.problem(
                file.pos,
                format!("node `{name}`: `{}` is a subgraph of itself (a cycle of files)", path.display()),
            );
            return Exec::Noop;
        }
        if self.env.parents.len() >= MAX_SUBGRAPH_DEPTH {
            self.problem(
                file.pos,
                format!(
                    "node `{name}`: `{}` would nest subgraph files more than {MAX_SUBGRAPH_DEPTH} deep (the limit)",
                    path.display()
                ),
            );
            return Exec::Noop;
        }
        // A file named again (by this file or another of the load) is loaded once.
        let cached = self.env.children.borrow().get(&canonical).cloned();
        let loaded = match cached {
            Some(loaded) => loaded,
            None => {
                let loaded = self.load_child(&path, canonical.clone());
                self.env.children.borrow_mut().insert(canonical, loaded.clone());
                loaded
            }
        };
        let shown = match &loaded {
            Ok(_) => path.display().to_string(),
            Err(e) => e.file().to_owned(),
        };
        let loaded = match loaded {
            Ok(loaded) => loaded,
            Err(e) if e.file() == READ_FAILED => {
                let why = e.problems().first().map(|p| p.message().to_owned()).unwrap_or_default();
                self.problem(file.pos, format!("node `{name}`: `{}`: {why}", path.display()));
                return Exec::Noop;
            }
            Err(e) => {
                for p in e.problems() {
                    self.problem(
                        file.pos,
                        format!("subgraph `{name}`: {}:{}:{}: {}", e.file(), p.line(), p.column(), p.message()),
                    );
                }
                return Exec::Noop;
            }
        };
        if loaded.store.is_some() || loaded.checkpoint_dir.is_some() || loaded.checkpoint.is_some() {
            self.problem(
                file.pos,
                format!(
                    "subgraph `{name}`: `{shown}` names a store or checkpoint in `config`; a subgraph runs on its parent's store"
                ),
            );
            return Exec::Noop;
        }
        if loaded.recursion_limit.is_some() {
            self.problem(
                file.pos,
                format!(
                    "subgraph `{name}`: `{shown}` sets `config.recursion_limit`; a subgraph runs under its parent's"
                ),
            );
        }
        Exec::Subgraph { child: loaded.graph, input, output }
    }

    /// Reads and loads subgraph file `path` (`canonical`: its canonical path). A file that
    /// cannot be read is an error whose file is [`READ_FAILED`].
    pub(crate) fn load_child(&self, path: &std::path::Path, canonical: PathBuf) -> Result<Loaded, LoadError> {
        let (text, shown, base_dir) = crate::grants::files::read_agent_file(path)
            .map_err(|e| LoadError { file: READ_FAILED.to_owned(), problems: e.problems })?;
        let mut parents = self.env.parents.clone();
        parents.push(canonical);
        let env = Env {
            file: shown,
            base_dir,
            actions: self.env.actions,
            secrets: self.env.secrets,
            has_checkpointer: true,
            limits: self.env.limits,
            parents,
            children: self.env.children.clone(),
            trust_code: self.env.trust_code,
            strict: self.env.strict,
            grants: self.env.grants.clone(),
            folders: self.grants.folders(),
            own_folder: true,
        };
        load(&text, &env)
    }

    /// A `type: while_loop` node (The Edge Agent's loop inside one node): `condition` (an
    /// expression, checked before each pass), `max_iterations` (1 to 1000: the loop stops
    /// there, as The Edge Agent's Python engine stops, without an error) and `body` (nodes run
    /// in order on each pass: `run:` blocks, expressions and actions).
    pub(crate) fn while_loop(&mut self, fields: &HashMap<&str, &Node>, name: &str, pos: Pos) -> Exec {
        for key in [
            "run",
            "script",
            "uses",
            "action",
            "with",
            "output",
            "language",
            "message",
            "state_key",
            "resume_key",
            "timeout",
            "items",
            "item_var",
            "index_var",
            "steps",
            "max_concurrency",
            "fail_fast",
            "file",
            "input",
            "parallel_config",
            "subgraph",
        ] {
            if let Some(n) = fields.get(key) {
                self.problem(
                    n.pos,
                    format!("`{key}` does not go on a `type: while_loop` node (`{name}`): its `body:` nodes run"),
                );
            }
        }
        let cond = match fields.get("condition") {
            Some(c) => Some(self.cond(c, true)),
            None => {
                self.problem(
                    pos,
                    format!("`while_loop` node `{name}` needs `condition` (an expression, checked before each pass)"),
                );
                None
            }
        };
        let max = match fields.get("max_iterations") {
            Some(n) => match n.kind {
                Kind::Int(v) if (1..=MAX_LOOP_ITERATIONS).contains(&v) => Some(v as usize),
                _ => {
                    self.problem(
                        n.pos,
                        format!(
                            "`max_iterations` of node `{name}` must be an integer from 1 to {MAX_LOOP_ITERATIONS}, not {}",
                            n.scalar_text().map_or_else(|| n.what().to_owned(), |t| format!("`{t}`"))
                        ),
                    );
                    None
                }
            },
            None => {
                self.problem(
                    pos,
                    format!("`while_loop` node `{name}` needs `max_iterations` (1 to {MAX_LOOP_ITERATIONS}, a bound on its passes)"),
                );
                None
            }
        };
        let mut body = Vec::new();
        match fields.get("body") {
            None => self.problem(pos, format!("`while_loop` node `{name}` needs `body:` (the nodes each pass runs)")),
            Some(list) => match list.as_seq() {
                Some([]) => {
                    self.problem(list.pos, format!("`body` of node `{name}` is empty: a loop needs a node to run"))
                }
                Some(items) => body = self.inline_nodes(items, name, "body"),
                None => self
                    .problem(list.pos, format!("`body` of node `{name}` must be a list of nodes, not {}", list.what())),
            },
        }
        match (cond, max) {
            (Some(cond), Some(max)) if !body.is_empty() => Exec::Loop { cond, max, body },
            _ => Exec::Noop,
        }
    }

    /// The nodes a node runs within itself, in order (a `while_loop`'s `body`, a node's
    /// `steps`; `what` is that key): `run:` blocks, expressions and actions, each named by its
    /// `name` or `{what}_{k}`.
    pub(crate) fn inline_nodes(&mut self, items: &[Node], name: &str, what: &str) -> Vec<(NodeName, Exec)> {
        let mut out = Vec::new();
        for (k, item) in items.iter().enumerate() {
            let nested = item
                .as_map()
                .and_then(|m| m.iter().find(|(k, _)| k.as_str() == Some("type")))
                .and_then(|(_, v)| v.as_str().map(|t| (v.pos, t.to_owned())));
            if let Some((at, kind)) = nested.filter(|(_, t)| t != "interrupt") {
                self.problem(
                    at,
                    format!("node `{name}`: its `{what}` runs `run:` blocks and actions, not `type: {kind}` nodes"),
                );
                continue;
            }
            let Some(step) = self.node_or(item, Some(format!("{what}_{k}"))) else { continue };
            if matches!(step.exec, Exec::Interrupt { .. }) || step.interrupt_before || step.interrupt_after {
                self.problem(
                    step.pos,
                    format!("`{what}` node `{}` of node `{name}` cannot pause: it runs within one node", step.name),
                );
                continue;
            }
            if step.goto.is_some() || step.marked_fan_in.is_some() {
                self.problem(
                    step.pos,
                    format!("`{what}` node `{}` of node `{name}` runs in order: no `goto`, no `fan_in`", step.name),
                );
                continue;
            }
            out.push((NodeName::from(step.name), step.exec));
        }
        out
    }

    /// A `type: dynamic_parallel` node (The Edge Agent's fan-out over a list known at run
    /// time): `items`, `item_var`, `index_var`, `fan_in: NODE`, and per item either `steps:`
    /// (nodes, run in order) or `action:` (`uses`/`with`/`output`).
    pub(crate) fn dynamic<'n>(
        &mut self,
        fields: &HashMap<&str, &'n Node>,
        name: &str,
        pos: Pos,
    ) -> (Exec, Option<Dynamic<'n>>) {
        let what = |key: &str| format!("`{key}` of node `{name}`");
        // `max_concurrency` and `fail_fast`, on the node or in `parallel_config:` (the node's
        // own win, as in The Edge Agent).
        let nested = match fields.get("parallel_config") {
            Some(c) => self.fields(c, &what("parallel_config"), PARALLEL_CONFIG_KEYS).unwrap_or_default(),
            None => HashMap::new(),
        };
        let setting = |key: &str| fields.get(key).or_else(|| nested.get(key)).copied();
        let limit = setting("max_concurrency").and_then(|n| match &n.kind {
            Kind::Int(v) if *v >= 1 => Some(Limit::Fixed(*v as usize)),
            Kind::Str { text, .. } if text.contains("{{") => match self.expr_at(n.pos, strip_braces(text.trim())) {
                Ok(id) => Some(Limit::Expr(id)),
                Err(e) => {
                    self.problem(n.pos, format!("{}: `{text}` does not parse: {e}", what("max_concurrency")));
                    None
                }
            },
            _ => {
                self.problem(
                    n.pos,
                    format!(
                        "{} must be a positive integer (or a `{{{{ expression }}}}` giving one), not {}",
                        what("max_concurrency"),
                        n.scalar_text().map_or_else(|| n.what().to_owned(), |t| format!("`{t}`"))
                    ),
                );
                None
            }
        });
        let fail_fast = match setting("fail_fast") {
            None => false,
            Some(n) => match n.kind {
                Kind::Bool(b) => b,
                _ => {
                    self.problem(n.pos, format!("{} must be true or false, not {}", what("fail_fast"), n.what()));
                    false
                }
            },
        };
        for key in ["run", "script", "uses", "with", "message", "state_key", "resume_key", "timeout", "goto", "file"] {
            if let Some(n) = fields.get(key) {
                self.problem(
                    n.pos,
                    format!("`{key}` does not go on a `dynamic_parallel` node (`{name}`): each item runs its `steps:` or `action:`"),
                );
            }
        }
        // `output: KEY`: the fan-in also finds the items' results under KEY (The Edge Agent's
        // files write it so; its Python engine leaves them in `parallel_results` only).
        let output = match fields.get("output") {
            None => None,
            Some(o) => match o.as_str() {
                Some(key) if is_reserved(key) || key == "parallel_results" => {
                    self.problem(o.pos, format!("{} names `{key}`, a key the engine writes itself", what("output")));
                    None
                }
                Some(key) if !key.is_empty() => Some(key.to_owned()),
                _ => {
                    self.problem(
                        o.pos,
                        format!("{} is the state key the items' results go to, not {}", what("output"), o.what()),
                    );
                    None
                }
            },
        };
        let items = match fields.get("items") {
            None => {
                self.problem(
                    pos,
                    format!("`dynamic_parallel` node `{name}` needs `items` (an expression giving a list)"),
                );
                None
            }
            Some(n) => match n.as_str() {
                Some(text) => {
                    let source = strip_braces(text.trim());
                    match self.expr_at(n.pos, source) {
                        Ok(id) => Some(id),
                        Err(e) => {
                            self.problem(n.pos, format!("{}: `{text}` does not parse: {e}", what("items")));
                            None
                        }
                    }
                }
                None => {
                    self.problem(
                        n.pos,
                        format!(
                            "{} must be an expression such as `{{{{ state.list }}}}`, not {}",
                            what("items"),
                            n.what()
                        ),
                    );
                    None
                }
            },
        };
        let var = |this: &mut Self, key: &str, default: &str| match fields.get(key) {
            None => default.to_owned(),
            Some(n) => match n.as_str() {
                Some(v) if is_reserved(v) => {
                    this.problem(n.pos, format!("{} names `{v}`, {RESERVED}", what(key)));
                    default.to_owned()
                }
                Some(v) if is_identifier(v) => v.to_owned(),
                Some(v) => {
                    this.problem(n.pos, format!("{} must be a name (letters, digits, `_`), not `{v}`", what(key)));
                    default.to_owned()
                }
                None => {
                    this.problem(n.pos, format!("{} must be a name, not {}", what(key), n.what()));
                    default.to_owned()
                }
            },
        };
        let item_var = var(self, "item_var", "item");
        let index_var = var(self, "index_var", "index");
        if item_var == index_var {
            let at = fields.get("index_var").or(fields.get("item_var")).map_or(pos, |n| n.pos);
            self.problem(at, format!("node `{name}`: `item_var` and `index_var` are both `{item_var}`"));
        }
        let fan_in = match fields.get("fan_in") {
            Some(f) if f.as_str().is_some() => Some(*f),
            Some(f) => {
                self.problem(
                    f.pos,
                    format!("{} names the node where the items meet, not {}", what("fan_in"), f.what()),
                );
                None
            }
            None => {
                self.problem(
                    pos,
                    format!("`dynamic_parallel` node `{name}` needs `fan_in: NODE` (where the items meet)"),
                );
                None
            }
        };
        let mut steps = Vec::new();
        let modes: Vec<(&str, &Node)> =
            ["steps", "action", "subgraph"].into_iter().filter_map(|k| fields.get(k).map(|n| (k, *n))).collect();
        if let (Some(i), false) = (fields.get("input"), modes.iter().any(|(k, _)| *k == "subgraph")) {
            self.problem(i.pos, format!("{} goes with `subgraph:` (the child's starting keys)", what("input")));
        }
        match modes.as_slice() {
            [] => {
                self.problem(
                    pos,
                    format!("`dynamic_parallel` node `{name}` needs one of `steps:`, `action:` or `subgraph:` (what each item runs)"),
                );
            }
            [_, second, ..] => {
                let keys: Vec<String> = modes.iter().map(|(k, _)| format!("`{k}`")).collect();
                self.problem(
                    second.1.pos,
                    format!("node `{name}` has {}: what each item runs is one of them; keep one", keys.join(" and ")),
                );
            }
            [("subgraph", file)] => {
                let mut child = HashMap::new();
                child.insert("file", *file);
                if let Some(input) = fields.get("input") {
                    child.insert("input", *input);
                }
                let mut exec = self.subgraph(&child, name, file.pos);
                // The Edge Agent starts the child on `input` alone: without it, on nothing.
                if let Exec::Subgraph { input: input @ None, .. } = &mut exec {
                    *input = Some(Vec::new());
                }
                steps.push(Draft {
                    name: format!("{name}.subgraph"),
                    pos: file.pos,
                    exec,
                    policy: None,
                    goto: None,
                    interrupt_before: false,
                    interrupt_after: false,
                    marked_fan_in: None,
                    dynamic: None,
                    after: None,
                    item_of: None,
                });
            }
            [("steps", list)] => match list.as_seq() {
                Some([]) => self.problem(list.pos, format!("{} is empty", what("steps"))),
                Some(items) => {
                    for (k, item) in items.iter().enumerate() {
                        if let Some(mut step) = self.node_or(item, Some(format!("step_{k}"))) {
                            if step.goto.is_some() || step.dynamic.is_some() {
                                self.problem(step.pos, format!("step `{}` of node `{name}` runs in order: no `goto`, no nested `dynamic_parallel`", step.name));
                                step.goto = None;
                                step.dynamic = None;
                            }
                            if let Some(at) = step.marked_fan_in {
                                self.problem(at, format!("step `{}` of node `{name}` cannot be a fan-in", step.name));
                            }
                            step.name = format!("{name}.{}", step.name);
                            steps.push(step);
                        }
                    }
                }
                None => {
                    self.problem(list.pos, format!("{} must be a list of nodes, not {}", what("steps"), list.what()))
                }
            },
            [(_, action)] => {
                if let Some(f) = self.fields(action, &what("action"), ITEM_ACTION_KEYS) {
                    match f.get("uses") {
                        Some(uses) => {
                            let exec = self.action(uses, &f, name);
                            steps.push(Draft {
                                name: format!("{name}.action"),
                                pos: action.pos,
                                exec,
                                policy: None,
                                goto: None,
                                interrupt_before: false,
                                interrupt_after: false,
                                marked_fan_in: None,
                                dynamic: None,
                                after: None,
                                item_of: None,
                            });
                        }
                        None => self.problem(action.pos, format!("{} needs `uses`", what("action"))),
                    }
                }
            }
        }
        let exec = match items {
            Some(items) => Exec::Send { items, item_var, index_var, fail_fast, limit, output },
            None => Exec::Noop,
        };
        let dynamic = fan_in.filter(|_| !steps.is_empty()).map(|fan_in| Dynamic { fan_in, steps });
        (exec, dynamic)
    }

    /// The file's column of column `column` of a line of the `run:` block `run`: a block scalar's
    /// lines sit at the indentation of its first line; a one-line scalar starts at its position
    /// (after its opening quote, if quoted).
    pub(crate) fn block_column(&self, run: &Node, block: bool, column: usize) -> usize {
        let line = self.source.lines().nth(run.pos.line.saturating_sub(1)).unwrap_or_default();
        if block {
            return line.chars().take_while(|c| *c == ' ').count() + column;
        }
        let quoted = line.chars().nth(run.pos.column.saturating_sub(1)).is_some_and(|c| c == '"' || c == '\'');
        run.pos.column + column - 1 + usize::from(quoted)
    }

    /// `python`: the node's `language:` (`Some(true)` for Python, `Some(false)` for Lua).
    pub(crate) fn run(&mut self, run: &Node, name: &str, output: Option<&Node>, python: Option<bool>) -> Exec {
        match &run.kind {
            Kind::Str { text, block } => {
                if let Some(o) = output {
                    self.warn(
                        o.pos,
                        "output of run",
                        format!(
                            "`output` of node `{name}` is ignored, as by The Edge Agent: a `run:` block writes the keys \
                             of the table it returns"
                        ),
                    );
                }
                // A block scalar's position is its first content line, like a plain one's.
                let first_line = run.pos.line;
                // A Lua syntax error: its line, its column in the file, its message.
                let mut lua_at: Option<(usize, usize, String)> = None;
                let block = match python {
                    Some(true) => self.python.block(name, first_line, text),
                    _ => match self.lua.add(&self.env.file, first_line, text) {
                        Ok(id) => return Exec::Lua(id),
                        Err((line, column, message)) if python.is_some() => {
                            lua_at = Some((line, self.block_column(run, *block, column), message.clone()));
                            Err(vec![(line, format!("node `{name}`: {message}"))])
                        }
                        Err((line, column, message)) => {
                            lua_at = Some((line, self.block_column(run, *block, column), message.clone()));
                            let lua = format!("node `{name}`: {message}");
                            // The Edge Agent takes a block that looks like Prolog for Prolog.
                            match self.prolog_guess(name, first_line, text) {
                                Some(Ok(exec)) => return exec,
                                Some(Err(prolog)) => match self.python.guess(name, first_line, text, line, lua) {
                                    Ok(block) => Ok(block),
                                    Err(other) => {
                                        let prolog = prolog.into_iter().next().map(|(_, m)| m).unwrap_or_default();
                                        Err(other
                                            .into_iter()
                                            .map(|(line, m)| {
                                                (line, format!("{m} (nor does it read as Prolog: {prolog})"))
                                            })
                                            .collect())
                                    }
                                },
                                None => self.python.guess(name, first_line, text, line, lua),
                            }
                        }
                    },
                };
                match block {
                    Ok(block) => Exec::Python(block),
                    Err(problems) => {
                        for (line, message) in problems {
                            // The Lua error (perhaps with more said after it) is placed at the
                            // token Lua names; the rest at their line.
                            let column = match &lua_at {
                                Some((at, column, lua)) if *at == line && message.contains(lua.as_str()) => *column,
                                _ => 1,
                            };
                            self.problem(Pos { line, column }, message);
                        }
                        Exec::Noop
                    }
                }
            }
            Kind::Map(_) => {
                if let Some(exec) = self.prolog_map(run, name) {
                    return exec;
                }
                if let Some(o) = output {
                    self.problem(
                        o.pos,
                        format!(
                            "node `{name}`: an expression names its key with `output_key`; `output` is for actions"
                        ),
                    );
                }
                let Some(f) = self.fields(run, &format!("`run` of node `{name}`"), &["type", "value", "output_key"])
                else {
                    return Exec::Noop;
                };
                match f.get("type").and_then(|t| t.as_str()) {
                    Some("expression") => {}
                    _ => {
                        self.problem(
                            run.pos,
                            format!("`run` of node `{name}` as a mapping is `{{ type: expression, value: EXPR }}`"),
                        );
                        return Exec::Noop;
                    }
                }
                let key = match f.get("output_key") {
                    Some(k) => self.string(k, "`output_key`").unwrap_or("result").to_owned(),
                    None => "result".to_owned(),
                };
                if is_reserved(&key) {
                    let at = f.get("output_key").map_or(run.pos, |k| k.pos);
                    self.problem(at, format!("`output_key` of node `{name}` names `{key}`, {RESERVED}"));
                }
                let Some(value) = f.get("value") else {
                    self.problem(run.pos, format!("`run` of node `{name}` needs `value: EXPR`"));
                    return Exec::Noop;
                };
                let Some(source) = value.scalar_text() else {
                    self.problem(value.pos, "`value` must be an expression");
                    return Exec::Noop;
                };
                match self.expr_at(value.pos, strip_braces(&source)) {
                    Ok(expr) => Exec::Expr { expr, key },
                    Err(e) => {
                        self.problem(value.pos, format!("the expression `{source}` does not parse: {e}"));
                        Exec::Noop
                    }
                }
            }
            _ => {
                self.problem(
                    run.pos,
                    format!("`run` of node `{name}` must be a Lua block or `{{ type: expression, value: EXPR }}`"),
                );
                Exec::Noop
            }
        }
    }

    pub(crate) fn action(&mut self, uses: &Node, fields: &HashMap<&str, &Node>, name: &str) -> Exec {
        let Some(action_name) = self.string(uses, &format!("`uses` of node `{name}`")) else { return Exec::Noop };
        if !self.env.actions.contains_key(action_name) && crate::actions::compose::load::COMPOSED.contains(&action_name)
        {
            return self.composed(action_name, fields, uses, name);
        }
        let action = if action_name == "ratelimit.wrap" && !self.env.actions.contains_key(action_name) {
            self.rate_limit(fields, name, uses)
        } else {
            self.resolve_action(action_name, uses.pos, &format!("node `{name}`"))
        };
        let Some(action) = action else { return Exec::Noop };
        self.literal_path(&action, action_name, fields.get("with").copied(), name);
        let with = match fields.get("with") {
            Some(w) => self.action_tree(w, &action),
            None => Tree::Literal(Value::Object(Map::new())),
        };
        #[cfg(feature = "net")]
        if let Action::Net(net) = &action {
            self.net_with(*net, fields.get("with").copied(), uses, name);
        }
        if let Action::Fallback(fallback) = &action {
            let what = fallback.name();
            self.warn(
                uses.pos,
                fallback.library(),
                format!("`{what}` (node `{name}`): tea embeds no {}, so {}", fallback.library(), fallback.instead()),
            );
            let with = fields.get("with").copied();
            self.checked_with(what, fallback.keys(), fallback.required(), with, uses, name);
        }
        if let Action::Builtin(crate::actions::builtins::Builtin::SchemaMerge) = &action {
            let with = fields.get("with").copied();
            self.checked_with("schema.merge", crate::actions::schema_merge::KEYS, 1, with, uses, name);
        }
        let action = match action {
            Action::CodeExecute { trusted } => {
                let with = fields.get("with").copied();
                self.checked_with("code.execute", crate::lang::python::CODE_EXECUTE_KEYS, 1, with, uses, name);
                Action::CodeExecute { trusted }
            }
            Action::A2a { op, .. } => {
                let with = fields.get("with").copied();
                self.checked_with(op.name(), op.keys(), op.required(), with, uses, name);
                let fallback = self.a2a_fallback(op, with, name);
                Action::A2a { op, fallback }
            }
            other => other,
        };
        #[cfg(feature = "net")]
        if let Action::Service(service) = &action {
            if service.is_llamaindex() {
                self.warn(
                    uses.pos,
                    "llamaindex",
                    format!(
                        "`{}` (node `{name}`): tea embeds no LlamaIndex, so `rag.llamaindex.query` (and `router` over a \
                         vector index) query the agent's vector store (`vector.query`) and the others report LlamaIndex \
                         missing (`success: false`), as The Edge Agent does where LlamaIndex is not installed",
                        service.name()
                    ),
                );
            }
            let with = fields.get("with").copied();
            self.checked_with(service.name(), service.keys(), service.required(), with, uses, name);
        }
        let output = self.output(fields, name);
        Exec::Action { name: action_name.to_owned(), action, with, output }
    }

    /// The action named `action_name` (written at `pos`; `context` says where) if there is one:
    /// registered with the engine, else built in; `None`, and no problem, otherwise. Every
    /// position an action can take in a file resolves it here — a node's `uses:`, a step, a
    /// tool, the action `ratelimit.wrap` wraps, an `a2a.delegate` fallback — so what a file may
    /// run is settled once: `code.execute` runs Python only when the engine trusts the file
    /// (`Engine::trust_code`), wherever it is written, and answers "Code execution is disabled"
    /// everywhere else (with a warning at its line).
    pub(crate) fn known_action(&mut self, action_name: &str, pos: Pos, context: &str) -> Option<Action> {
        if let Some(a) = self.env.actions.get(action_name) {
            return Some(a.clone());
        }
        let action = actions::built_in(action_name)?;
        if let Action::CodeExecute { .. } = action {
            if !self.env.trust_code {
                self.warn(
                    pos,
                    "code.execute",
                    format!(
                        "`code.execute` ({context}) runs Python, which tea cannot sandbox: in a file it does not \
                         trust it answers \"Code execution is disabled\" (as The Edge Agent unless its host enables \
                         it); trust the file with `tea run --trust` or `Engine::trust_code(true)`"
                    ),
                );
            }
            return Some(Action::CodeExecute { trusted: self.env.trust_code });
        }
        Some(action)
    }

    /// A file action's `with.path` when the file writes it out (no template): confined at load
    /// (a path the operator did not grant is a problem naming the grant). Behind
    /// `ratelimit.wrap`, its `args.path`.
    pub(crate) fn literal_path(&mut self, action: &Action, action_name: &str, with: Option<&Node>, name: &str) {
        use crate::actions::builtins::Builtin;
        use crate::grants::Access;
        let (action, action_name, with) = match action {
            Action::RateLimit { inner, name: inner_name, .. } => {
                let args = with.and_then(Node::as_map).and_then(|m| m.iter().find(|(k, _)| k.as_str() == Some("args")));
                (&**inner, inner_name.as_str(), args.map(|(_, v)| v))
            }
            other => (other, action_name, with),
        };
        let access = match action {
            Action::FileRead | Action::CheckpointLoad | Action::Builtin(Builtin::FileExists | Builtin::FileList) => {
                Access::Read
            }
            Action::FileWrite | Action::CheckpointSave | Action::Builtin(Builtin::FileDelete) => Access::Write,
            _ => return,
        };
        let Some(path) = with.and_then(Node::as_map).and_then(|m| m.iter().find(|(k, _)| k.as_str() == Some("path")))
        else {
            return;
        };
        let Some(text) = path.1.as_str().filter(|t| !t.is_empty() && !t.contains("{{") && !t.contains("{%")) else {
            return;
        };
        let text = text.to_owned();
        self.confined(path.1.pos, &format!("`{action_name}` (node `{name}`)"), &text, access);
    }

    /// The action named `action_name` (written at `pos`; `context` says where, as "node `x`"):
    /// registered with the engine, else built in. Else a problem: one that needs the feature
    /// `net`, one of The Edge Agent's that tea lacks, or an unknown one with "did you mean".
    pub(crate) fn resolve_action(&mut self, action_name: &str, pos: Pos, context: &str) -> Option<Action> {
        if let Some(a) = self.known_action(action_name, pos, context) {
            return Some(a);
        }
        if actions::NET_NAMES.contains(&action_name) {
            self.problem(
                pos,
                format!(
                    "action `{action_name}` ({context}) reaches the network, which this build leaves out: it needs \
                     tea-yaml's cargo feature `net` (the `tea` command has it)"
                ),
            );
            return None;
        }
        let known: Vec<&str> = self.env.actions.keys().map(String::as_str).chain(BUILT_IN_NAMES).collect();
        let hint = suggest(action_name, known.iter().copied());
        // One of The Edge Agent's that tea lacks is said to be so; anything else is unknown (a
        // misspelling, with "did you mean").
        match actions::edge_agent_only(action_name) {
            Some(why) => self.problem(
                pos,
                format!("action {why} ({context}); an action of the same name registered with `Engine::action` runs"),
            ),
            None => self.problem(pos, format!("unknown action `{action_name}` ({context}){hint}")),
        }
        None
    }

    /// An action node's `output:`: a key, a mapping of keys to templates, or (absent) the
    /// result spread into the state.
    pub(crate) fn output(&mut self, fields: &HashMap<&str, &Node>, name: &str) -> Output {
        match fields.get("output") {
            None => Output::Spread,
            Some(o) => match &o.kind {
                Kind::Str { text, .. } if is_reserved(text) => {
                    self.problem(o.pos, format!("`output` of node `{name}` names `{text}`, {RESERVED}"));
                    Output::Spread
                }
                Kind::Str { text, .. } => Output::Key(text.clone()),
                Kind::Map(entries) => Output::Map(
                    entries.iter().map(|(k, v)| (k.scalar_text().unwrap_or_default(), self.tree(v))).collect(),
                ),
                _ => {
                    self.problem(o.pos, "`output` must be a key name or a mapping of keys to templates");
                    Output::Spread
                }
            },
        }
    }

    /// `uses: ratelimit.wrap` (The Edge Agent's): `with: { action: NAME, limiter: NAME, args,
    /// rpm | rps, timeout }`. The action and the limiter are names written in the file; the
    /// limiter's rate is `rpm`/`rps` here, else `settings.rate_limiters`, else one call a second
    /// (the first use of a limiter in the process fixes its rate).
    pub(crate) fn rate_limit(&mut self, fields: &HashMap<&str, &Node>, name: &str, uses: &Node) -> Option<Action> {
        let what = format!("`ratelimit.wrap` (node `{name}`)");
        let Some(with) = fields.get("with") else {
            self.problem(uses.pos, format!("{what} needs `with: {{ action, limiter, args }}`"));
            return None;
        };
        let f =
            self.fields(with, &format!("`with` of {what}"), &["action", "limiter", "args", "rpm", "rps", "timeout"])?;
        let literal = |this: &mut Self, key: &str| -> Option<String> {
            match f.get(key) {
                None => {
                    this.problem(with.pos, format!("{what} needs `{key}`"));
                    None
                }
                Some(n) => match n.as_str() {
                    Some(text) if !text.contains("{{") && !text.is_empty() => Some(text.to_owned()),
                    _ => {
                        this.problem(n.pos, format!("`{key}` of {what} is a name written in the file"));
                        None
                    }
                },
            }
        };
        let limiter = literal(self, "limiter");
        let inner_name = literal(self, "action")?;
        let at = f.get("action").map_or(with.pos, |n| n.pos);
        let inner = match self.known_action(&inner_name, at, &format!("wrapped by {what}")) {
            Some(a) => a,
            None => {
                let why = actions::edge_agent_only(&inner_name).map_or_else(
                    || format!("`{inner_name}`, which is not an action here"),
                    |why| format!("action {why}"),
                );
                self.problem(at, format!("{what} wraps {why}"));
                return None;
            }
        };
        let limiter = limiter?;
        let rate = |k: &str| {
            f.get(k).and_then(|n| match n.kind {
                Kind::Int(v) if v > 0 => Some(v as f64),
                Kind::Float(v) if v > 0.0 && v.is_finite() => Some(v),
                _ => None,
            })
        };
        for k in ["rpm", "rps"] {
            if let (Some(n), None) = (f.get(k), rate(k)) {
                self.problem(n.pos, format!("`{k}` of {what} must be a positive number"));
            }
        }
        let interval = match (rate("rpm"), rate("rps")) {
            (None, None) => {
                self.rate_limiters.get(&limiter).copied().unwrap_or_else(|| actions::limiter_interval(None, None))
            }
            (rpm, rps) => actions::limiter_interval(rpm, rps),
        };
        Some(Action::RateLimit { inner: Box::new(inner), name: inner_name, limiter, interval })
    }

    /// The `with:` of action `what` (node `name`), when written as a mapping: each key one of
    /// `keys`, the first `required` of them given. (Rendered arguments are checked again when
    /// the node runs.)
    pub(crate) fn checked_with(
        &mut self,
        what: &str,
        keys: &[&str],
        required: usize,
        with: Option<&Node>,
        uses: &Node,
        name: &str,
    ) {
        let given: Vec<&str> = match with {
            None => Vec::new(),
            Some(w) => match w.as_map() {
                Some(entries) => entries.iter().filter_map(|(k, _)| k.as_str()).collect(),
                // A whole `with:` from one expression: checked when it runs.
                None => return,
            },
        };
        // A misspelt key is one mistake: its "did you mean" stands for the missing key too.
        let mut meant = Vec::new();
        if let Some(entries) = with.and_then(Node::as_map) {
            for (key, _) in entries {
                let Some(k) = key.as_str() else { continue };
                if !keys.contains(&k) {
                    let hint = suggest(k, keys.iter().copied());
                    meant.extend(keys.iter().filter(|key| hint.contains(&format!("`{key}`"))));
                    let takes = if keys.is_empty() { "nothing".to_owned() } else { keys.join(", ") };
                    self.problem(
                        key.pos,
                        format!("unknown argument `{k}` of `{what}` (node `{name}`){hint}; it takes {takes}"),
                    );
                }
            }
        }
        for needed in &keys[..required.min(keys.len())] {
            if !given.contains(needed) && !meant.contains(&needed) {
                self.problem(
                    with.map_or(uses.pos, |w| w.pos),
                    format!("`{what}` (node `{name}`) needs `{needed}` in its `with:`"),
                );
            }
        }
    }

    /// `a2a.delegate`'s `fallback: { action: NAME, with }` (for `on_timeout: fallback_local`):
    /// the action, resolved now (its name is written in the file).
    pub(crate) fn a2a_fallback(
        &mut self,
        op: crate::actions::a2a::A2a,
        with: Option<&Node>,
        name: &str,
    ) -> Option<Box<Action>> {
        let fallback = with?.as_map()?.iter().find(|(k, _)| k.as_str() == Some("fallback")).map(|(_, v)| v)?;
        if op != crate::actions::a2a::A2a::Delegate {
            return None;
        }
        let action = fallback.as_map()?.iter().find(|(k, _)| k.as_str() == Some("action")).map(|(_, v)| v)?;
        match action.as_str() {
            Some(text) if !text.contains("{{") => {
                let context = format!("the `fallback` of `a2a.delegate` (node `{name}`)");
                if crate::actions::compose::load::COMPOSED.contains(&text) && !self.env.actions.contains_key(text) {
                    self.problem(
                        action.pos,
                        format!("{context} cannot be `{text}`: an action that runs steps of its own is not a fallback"),
                    );
                    return None;
                }
                self.resolve_action(text, action.pos, &context).map(Box::new)
            }
            _ => {
                self.problem(
                    action.pos,
                    format!(
                        "`fallback.action` of `a2a.delegate` (node `{name}`) is an action name written in the file"
                    ),
                );
                None
            }
        }
    }

    /// A network action's `with:`, when written as a mapping: its keys, and the ones it needs
    /// that neither it nor the file's `settings` give. (Rendered arguments are checked again
    /// when the node runs.)
    #[cfg(feature = "net")]
    pub(crate) fn net_with(
        &mut self,
        action: crate::actions::net::NetAction,
        with: Option<&Node>,
        uses: &Node,
        name: &str,
    ) {
        use crate::actions::net::{NetAction, Section};
        let what = action.name();
        let keys: Vec<String> = match with {
            Some(w) => match w.as_map() {
                Some(entries) => {
                    let mut keys = Vec::new();
                    for (key, _) in entries {
                        let Some(k) = key.as_str() else { continue };
                        if !action.keys().contains(&k) {
                            let hint = suggest(k, action.keys().iter().copied());
                            self.problem(
                                key.pos,
                                format!(
                                    "unknown argument `{k}` of `{what}` (node `{name}`){hint}; it takes {}",
                                    action.keys().join(", ")
                                ),
                            );
                        }
                        keys.push(k.to_owned());
                    }
                    keys
                }
                // A whole `with:` from one expression: checked when it runs.
                None => return,
            },
            None => Vec::new(),
        };
        let defaults: Vec<String> = match action.section() {
            Some(Section::Llm) => self.settings_keys[0].clone(),
            Some(Section::Notify) => self.settings_keys[1].clone(),
            None => Vec::new(),
        };
        // A URL written in the file: its host must be granted (checked again when it runs).
        for (key, node) in with.and_then(Node::as_map).into_iter().flatten() {
            let Some(k @ ("url" | "base_url" | "api_base")) = key.as_str() else { continue };
            let Some(text) = node.as_str().filter(|t| !t.contains("{{") && !t.contains("{%")) else { continue };
            let Ok(url) = reqwest::Url::parse(text) else { continue };
            let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else { continue };
            if let Err(e) = self.grants.check_host(host, port) {
                self.problem(node.pos, format!("`{k}` of `{what}` (node `{name}`): {e}"));
            }
        }
        let given = |k: &str| keys.iter().any(|g| g == k) || defaults.iter().any(|g| g == k);
        let at = with.map_or(uses.pos, |w| w.pos);
        match action {
            NetAction::LlmCall | NetAction::LlmChat => {
                // `messages` or `prompt` is checked when the call runs, as The Edge Agent's engines
                // do (a file may take them from `settings.llm` or leave the node for an overlay).
                self.llm_provider(with, name, what);
            }
            NetAction::LlmEmbed => {
                // `settings.llm` is not `llm.embed`'s: only its own `provider:` counts.
                let saved = std::mem::take(&mut self.settings_llm);
                self.llm_provider(with, name, what);
                self.settings_llm = saved;
            }
            NetAction::HttpGet | NetAction::HttpPost => {
                if !given("url") {
                    self.problem(at, format!("`{what}` (node `{name}`) needs a `url`"));
                }
            }
            NetAction::Notify => {}
        }
    }

    /// An LLM action's `provider:` and `shell_provider:` when written in the file (a template
    /// is checked when it runs): a provider tea knows; a shell provider that is configured, in a
    /// file the engine trusts (it runs a program).
    #[cfg(feature = "net")]
    pub(crate) fn llm_provider(&mut self, with: Option<&Node>, name: &str, what: &str) {
        use crate::actions::net::llm::Provider;
        let entries = with.and_then(Node::as_map).unwrap_or_default();
        let get = |key: &str| entries.iter().find(|(k, _)| k.as_str() == Some(key)).map(|(_, v)| v);
        let literal = |n: &Node| n.as_str().filter(|t| !t.contains("{{") && !t.contains("{%")).map(str::to_owned);
        let provider = match get("provider").or(self.settings_llm[0].as_ref()) {
            None => None,
            Some(node) => match literal(node).map(|t| Provider::named(&t)) {
                None => return,
                Some(Ok(p)) => Some(p),
                Some(Err(e)) => {
                    self.problem(node.pos, format!("`provider` of `{what}` (node `{name}`): {e}"));
                    return;
                }
            },
        };
        if provider != Some(Provider::Shell) {
            return;
        }
        let at = get("provider").map_or_else(|| with.map_or(Pos::default(), |w| w.pos), |n| n.pos);
        if !self.env.trust_code {
            self.problem(
                at,
                format!(
                    "`{what}` (node `{name}`) runs a command line (`provider: shell`): tea runs it only in a file it \
                     trusts (`tea run --trust`, `Engine::trust_code(true)`)"
                ),
            );
        }
        let shell = get("shell_provider").or(self.settings_llm[1].as_ref());
        match shell.map(|n| (n, literal(n))) {
            None => self.problem(
                at,
                format!(
                    "`{what}` (node `{name}`): `provider: shell` needs `shell_provider`, the command line to run ({})",
                    crate::actions::net::llm::built_in_shells().collect::<Vec<_>>().join(", ")
                ),
            ),
            Some((n, Some(shell))) => {
                let known =
                    crate::actions::net::llm::built_in_shells().any(|b| b == shell) || self.shells.contains_key(&shell);
                if !known {
                    let mut names: Vec<String> =
                        crate::actions::net::llm::built_in_shells().map(str::to_owned).collect();
                    names.extend(self.shells.keys().cloned());
                    let hint = suggest(&shell, names.iter().map(String::as_str));
                    self.problem(
                        n.pos,
                        format!(
                            "shell provider `{shell}` (node `{name}`) is not configured{hint}; add it to \
                             `settings.shell_providers` (known: {})",
                            names.join(", ")
                        ),
                    );
                }
            }
            Some((_, None)) => {}
        }
    }

    pub(crate) fn interrupt(&mut self, fields: &HashMap<&str, &Node>, name: &str) -> Exec {
        let message = fields.get("message").map(|m| self.tree(m));
        let key = |this: &mut Self, k: &str, default: &str| match fields.get(k) {
            Some(n) => this.string(n, &format!("`{k}` of node `{name}`")).unwrap_or(default).to_owned(),
            None => default.to_owned(),
        };
        let state_key = key(self, "state_key", "interrupt_message");
        let resume_key = key(self, "resume_key", "user_input");
        for (k, v) in [("state_key", &state_key), ("resume_key", &resume_key)] {
            if is_reserved(v) {
                let at = fields.get(k).map_or(Pos::default(), |n| n.pos);
                self.problem(at, format!("`{k}` of node `{name}` names `{v}`, {RESERVED}"));
            }
        }
        let timeout = match fields.get("timeout") {
            None => None,
            Some(t) => match t.kind {
                Kind::Int(n) if n > 0 => Some(n as u64),
                _ => {
                    self.problem(t.pos, format!("`timeout` of node `{name}` must be a positive number of seconds"));
                    None
                }
            },
        };
        Exec::Interrupt { message, state_key, resume_key, timeout }
    }

    /// What a node declares besides how it runs: `retry:` (The Edge Agent's `max_retries`,
    /// `base_delay_ms`, `max_delay_ms`, `backoff_multiplier`, `jitter`), `timeout:` (seconds)
    /// and `cache:` (`true`, or `ttl` in seconds and `store: true`).
    pub(crate) fn policy(&mut self, fields: &HashMap<&str, &Node>, name: &str) -> Option<NodePolicy> {
        let mut policy = NodePolicy::NONE;
        let mut any = false;
        let seconds = |this: &mut Self, n: &Node, what: String| -> Option<Duration> {
            let secs = match n.kind {
                Kind::Int(i) if i > 0 => i as f64,
                Kind::Float(f) if f > 0.0 && f.is_finite() => f,
                _ => {
                    this.problem(n.pos, format!("{what} must be a positive number of seconds, not {}", n.what()));
                    return None;
                }
            };
            Duration::try_from_secs_f64(secs).ok()
        };
        if let Some(t) = fields.get("timeout") {
            if let Some(limit) = seconds(self, t, format!("`timeout` of node `{name}`")) {
                policy = policy.timeout(limit);
                any = true;
            }
        }
        if let Some(r) = fields.get("retry") {
            const RETRY_KEYS: &[&str] =
                &["max_retries", "base_delay_ms", "max_delay_ms", "backoff_multiplier", "jitter"];
            let what = format!("`retry` of node `{name}`");
            if let Some(keys) = self.fields(r, &what, RETRY_KEYS) {
                let count = |this: &mut Self, key: &str, default: u64| -> u64 {
                    match keys.get(key).map(|n| (n, &n.kind)) {
                        None => default,
                        Some((_, Kind::Int(i))) if *i >= 0 => *i as u64,
                        Some((n, _)) => {
                            this.problem(n.pos, format!("`{key}` of {what} must be a whole number, not {}", n.what()));
                            default
                        }
                    }
                };
                // The Edge Agent's defaults: 3 retries, 1 s doubling up to 30 s, with jitter.
                let most = u64::from(RetryPolicy::MAX_ATTEMPTS - 1);
                let over = keys.get("max_retries").and_then(|n| match n.kind {
                    Kind::Int(i) if i > most as i64 => Some((n.pos, i)),
                    _ => None,
                });
                let retries = match over {
                    Some((pos, i)) => {
                        let message = format!(
                            "`max_retries` of {what} is at most {most} (each retry is a step of the run's `config.recursion_limit` too), not {i}"
                        );
                        self.problem(pos, message);
                        most
                    }
                    _ => count(self, "max_retries", 3).min(most),
                } as u32;
                let mut retry = RetryPolicy::attempts(retries + 1)
                    .backoff(Duration::from_millis(count(self, "base_delay_ms", 1_000)))
                    .max_backoff(Duration::from_millis(count(self, "max_delay_ms", 30_000)));
                if let Some(m) = keys.get("backoff_multiplier") {
                    match m.kind {
                        Kind::Int(i) if i > 0 => retry = retry.factor(i as f64),
                        Kind::Float(f) if f > 0.0 && f.is_finite() => retry = retry.factor(f),
                        _ => self.problem(m.pos, format!("`backoff_multiplier` of {what} must be a positive number")),
                    }
                }
                if let Some(j) = keys.get("jitter") {
                    match j.kind {
                        Kind::Bool(on) => retry = retry.jitter(if on { 0.25 } else { 0.0 }),
                        _ => self.problem(j.pos, format!("`jitter` of {what} must be true or false")),
                    }
                }
                policy = policy.retry(retry);
                any = true;
            }
        }
        if let Some(c) = fields.get("cache") {
            let what = format!("`cache` of node `{name}`");
            match &c.kind {
                Kind::Bool(false) => {}
                Kind::Bool(true) => {
                    policy = policy.cache(CachePolicy::memory());
                    any = true;
                }
                Kind::Map(_) => {
                    if let Some(keys) = self.fields(c, &what, &["ttl", "store", "reads"]) {
                        let mut cache = CachePolicy::memory();
                        if let Some(s) = keys.get("store") {
                            match s.kind {
                                Kind::Bool(true) => cache = CachePolicy::store(),
                                Kind::Bool(false) => {}
                                _ => self.problem(s.pos, format!("`store` of {what} must be true or false")),
                            }
                        }
                        if let Some(t) = keys.get("ttl") {
                            if let Some(ttl) = seconds(self, t, format!("`ttl` of {what}")) {
                                cache = cache.ttl(ttl);
                            }
                        }
                        if let Some(r) = keys.get("reads") {
                            cache = cache.reads(self.cache_reads(r, &what));
                        }
                        policy = policy.cache(cache);
                        any = true;
                    }
                }
                _ => self.problem(
                    c.pos,
                    format!(
                        "{what} is `true`, or a mapping with `ttl` (seconds), `store` (true: in the store) and `reads` (the state keys its result depends on), not {}",
                        c.what()
                    ),
                ),
            }
        }
        any.then_some(policy)
    }

    /// The state keys a cached node's result depends on (`cache: { reads: [...] }`): each a key
    /// the state declares, when it declares any.
    pub(crate) fn cache_reads(&mut self, list: &Node, what: &str) -> &'static [&'static str] {
        let items: Vec<&Node> = match &list.kind {
            Kind::Seq(items) => items.iter().collect(),
            Kind::Str { .. } => vec![list],
            _ => {
                self.problem(list.pos, format!("`reads` of {what} must be a list of state keys, not {}", list.what()));
                return &[];
            }
        };
        let mut names = Vec::with_capacity(items.len());
        for item in items {
            let Some(name) = self.string(item, &format!("an entry of `reads` of {what}")) else { continue };
            if !self.state_keys.is_empty() && !self.state_keys.iter().any(|key| key == name) {
                let hint = suggest(name, self.state_keys.iter().map(String::as_str));
                self.problem(
                    item.pos,
                    format!("`reads` of {what} names `{name}`, which the state does not declare{hint}"),
                );
                continue;
            }
            names.push(name.to_owned());
        }
        crate::lang::scope::static_names(names)
    }

    /// A value with templates in it.
    pub(crate) fn tree(&mut self, node: &Node) -> Tree {
        match &node.kind {
            Kind::Str { text, .. } => self.text(node.pos, text),
            Kind::Seq(items) => Tree::List(items.iter().map(|i| self.tree(i)).collect()),
            Kind::Map(entries) => {
                Tree::Map(entries.iter().map(|(k, v)| (k.scalar_text().unwrap_or_default(), self.tree(v))).collect())
            }
            _ => Tree::Literal(node.to_json()),
        }
    }

    /// A string: literal, a single `{{ expr }}` (keeps its type), or a template.
    pub(crate) fn text(&mut self, pos: Pos, text: &str) -> Tree {
        if !text.contains("{{") && !text.contains("{%") {
            return Tree::Literal(Value::String(text.to_owned()));
        }
        let trimmed = text.trim();
        if let Some(inner) = single_expression(trimmed) {
            return match self.expr_at(pos, inner) {
                Ok(id) => Tree::Expr(id),
                Err(e) => {
                    self.problem(pos, format!("the template `{text}` does not parse: {e}"));
                    Tree::Literal(Value::Null)
                }
            };
        }
        match self.template_at(pos, text) {
            Ok(id) => Tree::Template(id),
            Err(e) => {
                self.problem(pos, format!("the template `{text}` does not parse: {e}"));
                Tree::Literal(Value::Null)
            }
        }
    }

    /// A condition: an expression, a bare state key, `!key`, or a literal.
    pub(crate) fn cond(&mut self, node: &Node, expect: bool) -> Cond {
        match &node.kind {
            Kind::Bool(b) => Cond::Const(*b == expect),
            Kind::Str { text, .. } => {
                let source = strip_braces(text.trim());
                let expr = match source {
                    "true" | "True" => return Cond::Const(expect),
                    "false" | "False" => return Cond::Const(!expect),
                    s if is_identifier(s) => format!("state.{s}"),
                    s if s.starts_with('!') && is_identifier(s[1..].trim()) => format!("not state.{}", s[1..].trim()),
                    s => s.to_owned(),
                };
                match self.expr_at(node.pos, &expr) {
                    Ok(id) => Cond::Expr { expr: id, expect, source: Arc::from(text.as_str()) },
                    Err(e) => {
                        self.problem(node.pos, format!("the condition `{text}` does not parse: {e}"));
                        Cond::Const(false)
                    }
                }
            }
            _ => {
                self.problem(node.pos, format!("a condition must be an expression or true/false, not {}", node.what()));
                Cond::Const(false)
            }
        }
    }

    /// A node's `interrupt:`, `goto:` and `fan_in: true` marker.
    pub(crate) fn flow<'n>(&mut self, fields: &HashMap<&str, &'n Node>, name: &str) -> Flow<'n> {
        let (mut interrupt_before, mut interrupt_after) = (false, false);
        if let Some(i) = fields.get("interrupt") {
            match i.as_str() {
                Some("before") => interrupt_before = true,
                Some("after") => interrupt_after = true,
                _ => self.problem(i.pos, format!("`interrupt` of node `{name}` must be `before` or `after`")),
            }
        }
        let goto = fields.get("goto").map(|g| self.goto(g, name));
        let marked_fan_in = fields.get("fan_in").filter(|f| matches!(f.kind, Kind::Bool(true))).map(|f| f.pos);
        Flow { interrupt_before, interrupt_after, goto, marked_fan_in }
    }

    pub(crate) fn goto<'n>(&mut self, node: &'n Node, name: &str) -> Vec<(Cond, &'n Node)> {
        match &node.kind {
            Kind::Str { .. } => vec![(Cond::Always, node)],
            Kind::Seq(rules) => {
                let mut out = Vec::new();
                for rule in rules {
                    let Some(f) = self.fields(rule, &format!("a `goto` rule of node `{name}`"), &["if", "to"]) else {
                        continue;
                    };
                    let Some(to) = f.get("to") else {
                        self.problem(rule.pos, format!("a `goto` rule of node `{name}` without `to`"));
                        continue;
                    };
                    let cond = match f.get("if") {
                        Some(c) => self.cond(c, true),
                        None => Cond::Always,
                    };
                    out.push((cond, *to));
                }
                out
            }
            _ => {
                self.problem(
                    node.pos,
                    format!("`goto` of node `{name}` must be a node name or a list of `{{ if, to }}` rules"),
                );
                Vec::new()
            }
        }
    }
}

/// Whether a node's fields have no `steps:`.
pub(crate) fn steps_absent(fields: &HashMap<&str, &Node>) -> bool {
    !fields.contains_key("steps")
}
