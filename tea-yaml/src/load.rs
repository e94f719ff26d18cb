//! The loader: YAML text to a [`YamlGraph`], reporting every problem at once with its line and
//! column.
//!
//! It walks the position-carrying tree of `yaml.rs` by hand (not through serde), so one
//! mistake does not hide the next: unknown keys (with "did you mean"), missing or duplicate
//! names, targets that name no node, conditions and templates that do not parse, Lua that does
//! not compile, unknown actions, interrupts without a checkpointer.

use crate::actions::{self, Action, BUILT_IN_NAMES};
use crate::error::{suggest, LoadError, Problem};
use crate::graph::{Cond, Exec, Inner, Limit, NodeDef, NodeIx, Output, Rule, Tree, YamlGraph};
use crate::lua::{Chunks, Limits};
use crate::state::{Decl, Reducer, Schema, Type};
use crate::template::{self, Builder as Templates};
use crate::yaml::{self, Kind, Node, Pos};
use serde_json::{Map, Value};
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use tea_runtime::{Goto, NodeName};

/// What the engine brings to a load.
pub(crate) struct Env<'a> {
    pub(crate) file: String,
    pub(crate) base_dir: PathBuf,
    pub(crate) actions: &'a HashMap<String, Action>,
    pub(crate) secrets: &'a Map<String, Value>,
    pub(crate) has_checkpointer: bool,
    pub(crate) limits: Limits,
    /// The files of the `type: subgraph` nodes this file is loaded for, outermost first (a
    /// file among them is a cycle).
    pub(crate) parents: Vec<PathBuf>,
    /// The subgraph files loaded so far in this load, by canonical path: a file named many
    /// times is read and loaded once.
    pub(crate) children: Children,
}

/// The subgraph files of one load, by canonical path.
pub(crate) type Children = Rc<RefCell<HashMap<PathBuf, Result<Loaded, LoadError>>>>;

/// How deep `type: subgraph` files may nest (a file, its child, the child's child …).
pub(crate) const MAX_SUBGRAPH_DEPTH: usize = 16;
/// How many candidate names "did you mean" compares, over a whole file: beyond it, problems
/// come without a suggestion (so a file of thousands of misspelled targets loads in linear
/// time).
const MAX_SUGGESTION_WORK: usize = 200_000;

/// The store a file's `config:` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum StoreSpec {
    Memory,
    Sled(PathBuf),
    Postgres(String),
}

/// A loaded file: its graph and the `config:` the agent applies.
#[derive(Clone)]
pub(crate) struct Loaded {
    pub(crate) graph: YamlGraph,
    pub(crate) store: Option<StoreSpec>,
    pub(crate) checkpoint_dir: Option<PathBuf>,
    pub(crate) checkpoint: Option<PathBuf>,
    pub(crate) recursion_limit: Option<usize>,
}

const TOP_KEYS: &[&str] =
    &["name", "description", "state", "state_schema", "variables", "settings", "config", "nodes", "edges"];
/// `settings:` sections, and the keys of each (defaults of the network actions).
const SETTINGS: [(&str, &[&str]); 2] = [
    ("llm", &["base_url", "api_key", "model", "temperature", "max_tokens", "timeout", "retry"]),
    ("notify", &["url", "headers", "timeout", "retry"]),
];
const CONFIG_KEYS: &[&str] = &[
    "interrupt_before",
    "interrupt_after",
    "checkpoint_dir",
    "checkpointer",
    "checkpoint",
    "recursion_limit",
    "raise_exceptions",
];
const NODE_KEYS: &[&str] = &[
    "name",
    "description",
    "run",
    "script",
    "language",
    "uses",
    "action",
    "with",
    "output",
    "type",
    "message",
    "state_key",
    "resume_key",
    "timeout",
    "goto",
    "interrupt",
    "fan_in",
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
];
/// The keys of `settings.llm` and `settings.notify` whose values may read `secrets` (they are
/// sent out: an API key, a webhook's address and headers).
const SETTINGS_SENDING: [&[&str]; 2] = [&["api_key"], &["url", "headers"]];

/// The arguments of `action` whose values may read `secrets`: those it sends out.
fn sending_keys(action: &Action) -> &'static [&'static str] {
    match action {
        #[cfg(feature = "net")]
        Action::Net(net) => net.sending_keys(),
        _ => &[],
    }
}

/// The keys of a `dynamic_parallel` node's `parallel_config:` (The Edge Agent's nested form).
const PARALLEL_CONFIG_KEYS: &[&str] = &["max_concurrency", "fail_fast"];
/// The keys of a `dynamic_parallel` node's `action:` (The Edge Agent's action mode).
const ITEM_ACTION_KEYS: &[&str] = &["uses", "with", "output"];
const EDGE_KEYS: &[&str] = &["from", "to", "when", "condition", "type", "parallel", "fan_in"];
const START: [&str; 2] = ["__start__", "START"];
/// The file name of the cached load of a subgraph file that could not be read.
const READ_FAILED: &str = "\0unreadable";
const END: [&str; 2] = ["__end__", "END"];

struct Loader<'a> {
    env: &'a Env<'a>,
    problems: Vec<Problem>,
    templates: Templates,
    lua: Chunks,
    /// The keys `settings.llm` and `settings.notify` give (defaults of the network actions).
    settings_keys: [Vec<String>; 2],
    /// Candidate names "did you mean" may still compare (see [`MAX_SUGGESTION_WORK`]).
    suggestion_work: usize,
    /// Templates read now are arguments that send secrets out: they may read `secrets`.
    sending: bool,
}

/// A node as read, before routing is resolved.
/// How a node hands over: its breakpoints, its `goto:`, its `fan_in: true` marker.
struct Flow<'n> {
    interrupt_before: bool,
    interrupt_after: bool,
    goto: Option<Vec<(Cond, &'n Node)>>,
    marked_fan_in: Option<Pos>,
}

struct Draft<'n> {
    name: String,
    pos: Pos,
    exec: Exec,
    goto: Option<Vec<(Cond, &'n Node)>>,
    interrupt_before: bool,
    interrupt_after: bool,
    /// `fan_in: true` (The Edge Agent's marker): where it is written.
    marked_fan_in: Option<Pos>,
    /// A `type: dynamic_parallel` node: its `fan_in` and the nodes each item runs.
    dynamic: Option<Dynamic<'n>>,
    /// A node a `dynamic_parallel` node runs per item: where it goes next.
    after: Option<After>,
    /// A node a `dynamic_parallel` node runs per item: that node (by index among the drafts),
    /// and whether this is the item's first step.
    item_of: Option<(usize, bool)>,
}

/// What a `type: dynamic_parallel` node runs per item, and where the items meet.
struct Dynamic<'n> {
    fan_in: &'n Node,
    /// The item's nodes in order (`steps:`, or the one node of `action:`).
    steps: Vec<Draft<'n>>,
}

/// Where a per-item node of a `dynamic_parallel` node goes: its next step (by index among the
/// drafts), or the fan-in of the `dynamic_parallel` node (by index).
#[derive(Clone, Copy)]
enum After {
    Node(usize),
    Join(usize),
}

/// A fan-out as read: its heads, its fan-in if named, where it is declared.
type ForkDraft = (Vec<NodeIx>, Option<NodeIx>, Pos);

/// An edge as read.
struct EdgeDraft<'n> {
    from: &'n Node,
    /// Where the edge is written.
    pos: Pos,
    kind: EdgeKind<'n>,
}

enum EdgeKind<'n> {
    Plain {
        to: &'n Node,
        cond: Cond,
    },
    /// One branch of a fan-out (`type: parallel` / `parallel: true`), or a list of them.
    Parallel {
        heads: Vec<&'n Node>,
        fan_in: Option<&'n Node>,
    },
}

pub(crate) fn load(text: &str, env: &Env<'_>) -> Result<Loaded, LoadError> {
    let (root, duplicates) =
        yaml::parse(text).map_err(|e| LoadError::one(&env.file, e.pos.line, e.pos.column, e.message))?;
    let variables =
        root.as_map().and_then(|m| m.iter().find(|(k, _)| k.as_str() == Some("variables"))).map(|(_, v)| v.to_json());
    let variables = match variables {
        Some(Value::Object(map)) => map,
        _ => Map::new(),
    };
    let mut loader = Loader {
        env,
        problems: Vec::new(),
        templates: Templates::new(),
        lua: Chunks::new(Arc::new(variables.clone()), env.limits),
        settings_keys: [Vec::new(), Vec::new()],
        suggestion_work: MAX_SUGGESTION_WORK,
        sending: false,
    };
    for d in duplicates {
        loader.problem(d.pos, d.message);
    }
    let loaded = loader.file(&root, variables);
    let mut problems = loader.problems;
    problems.sort_by_key(|p| (p.line, p.column));
    problems.dedup();
    match loaded {
        Some(loaded) if problems.is_empty() => Ok(loaded),
        _ => Err(LoadError { file: env.file.clone(), problems }),
    }
}

impl<'a> Loader<'a> {
    /// "did you mean" among the file's node names: within the file's budget of comparisons.
    fn hint_node(&mut self, word: &str, index: &HashMap<String, usize>) -> String {
        if index.len() > self.suggestion_work {
            self.suggestion_work = 0;
            return String::new();
        }
        self.suggestion_work -= index.len();
        suggest(word, index.keys().map(String::as_str))
    }

    /// Compiles expression `source` (written at `pos`); one that reads `secrets` where they
    /// are not sent out is a problem.
    fn expr_at(&mut self, pos: Pos, source: &str) -> Result<template::ExprId, String> {
        let id = self.templates.expr(source)?;
        self.secrets_at(pos, source);
        Ok(id)
    }

    /// Compiles template `source` (written at `pos`), as [`expr_at`](Self::expr_at).
    fn template_at(&mut self, pos: Pos, source: &str) -> Result<template::TplId, String> {
        let id = self.templates.template(source)?;
        self.secrets_at(pos, source);
        Ok(id)
    }

    fn secrets_at(&mut self, pos: Pos, source: &str) {
        if self.templates.take_reads_secrets() && !self.sending {
            self.problem(
                pos,
                format!(
                    "`{}` reads `secrets`, which only the arguments that send them out may read: the `headers` \
                     and `query` of `http.get`/`http.post`, the `api_key` of `llm.call`, the `url` and `headers` \
                     of `actions.notify`, and the same keys of `settings.llm`/`settings.notify`; nothing made \
                     from a secret may reach the state, a message or a log",
                    source.trim()
                ),
            );
        }
    }

    /// `with:` (or a `settings:` section) as a tree: the values of `sending` keys, the
    /// arguments that carry secrets out, may read `secrets` (rendered with them); nothing else.
    fn sending_tree(&mut self, node: &Node, sending: &[&str]) -> Tree {
        let Kind::Map(entries) = &node.kind else { return self.tree(node) };
        let mut out = Vec::with_capacity(entries.len());
        for (k, v) in entries {
            let key = k.scalar_text().unwrap_or_default();
            if sending.contains(&key.as_str()) {
                self.sending = true;
                let tree = self.tree(v);
                self.sending = false;
                out.push((key, Tree::Sending(Box::new(tree))));
            } else {
                out.push((key, self.tree(v)));
            }
        }
        Tree::Map(out)
    }

    fn problem(&mut self, pos: Pos, message: impl Into<String>) {
        self.problems.push(Problem { message: message.into(), line: pos.line.max(1), column: pos.column.max(1) });
    }

    /// The entries of mapping `node` (`what` names it in messages), each key checked against
    /// `allowed`. `None` if `node` is not a mapping.
    fn fields<'n>(&mut self, node: &'n Node, what: &str, allowed: &[&str]) -> Option<HashMap<&'n str, &'n Node>> {
        let Some(entries) = node.as_map() else {
            self.problem(node.pos, format!("{what} must be a mapping, not {}", node.what()));
            return None;
        };
        let mut out = HashMap::new();
        for (key, value) in entries {
            let Some(name) = key.as_str() else {
                self.problem(key.pos, format!("the keys of {what} are names, not {}", key.what()));
                continue;
            };
            if !allowed.contains(&name) {
                let hint = suggest(name, allowed.iter().copied());
                self.problem(key.pos, format!("unknown key `{name}` in {what}{hint}"));
                continue;
            }
            out.insert(name, value);
        }
        Some(out)
    }

    fn string<'n>(&mut self, node: &'n Node, what: &str) -> Option<&'n str> {
        match node.as_str() {
            Some(s) => Some(s),
            None => {
                self.problem(node.pos, format!("{what} must be a string, not {}", node.what()));
                None
            }
        }
    }

    fn file(&mut self, root: &Node, variables: Map<String, Value>) -> Option<Loaded> {
        let top = self.fields(root, "the agent file", TOP_KEYS)?;
        let name = match top.get("name") {
            Some(n) => self.string(n, "`name`").map(str::to_owned),
            None => None,
        };
        let name = name.unwrap_or_else(|| {
            let stem = std::path::Path::new(&self.env.file).file_stem().and_then(|s| s.to_str()).unwrap_or("agent");
            if stem.starts_with('<') {
                "agent".to_owned()
            } else {
                stem.to_owned()
            }
        });
        if let Some(d) = top.get("description") {
            self.string(d, "`description`");
        }
        if let Some(v) = top.get("variables") {
            if v.as_map().is_none() && !matches!(v.kind, Kind::Null) {
                self.problem(v.pos, format!("`variables` must be a mapping, not {}", v.what()));
            }
        }
        let schema = match (top.get("state"), top.get("state_schema")) {
            (Some(a), Some(_)) => {
                self.problem(a.pos, "`state` and `state_schema` declare the same thing; keep one");
                self.schema(a)
            }
            (Some(s), None) | (None, Some(s)) => self.schema(s),
            (None, None) => Schema::default(),
        };
        // Settings come before the nodes: their keys are the network actions' defaults.
        let [settings_llm, settings_notify] = match top.get("settings") {
            Some(node) => self.settings(node),
            None => [None, None],
        };
        let config = match top.get("config") {
            Some(c) if !matches!(c.kind, Kind::Null) => self.fields(c, "`config`", CONFIG_KEYS).unwrap_or_default(),
            _ => HashMap::new(),
        };

        // Nodes.
        let Some(nodes_node) = top.get("nodes") else {
            self.problem(root.pos, "the agent has no `nodes:` list");
            return None;
        };
        let Some(items) = nodes_node.as_seq() else {
            self.problem(nodes_node.pos, format!("`nodes` must be a list of nodes, not {}", nodes_node.what()));
            return None;
        };
        if items.is_empty() {
            self.problem(nodes_node.pos, "`nodes` is empty; an agent needs at least one node");
            return None;
        }
        let mut drafts: Vec<Draft<'_>> = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        for item in items {
            if let Some(draft) = self.node(item) {
                if let Some(&first) = index.get(&draft.name) {
                    let line = drafts[first].pos.line;
                    self.problem(draft.pos, format!("duplicate node name `{}` (first at line {line})", draft.name));
                    continue;
                }
                index.insert(draft.name.clone(), drafts.len());
                drafts.push(draft);
            }
        }
        if drafts.is_empty() {
            return None;
        }
        // The nodes `dynamic_parallel` nodes run per item come after the file's own nodes
        // (which keep their order for the implicit "next node" routing), each chain ending at
        // its fan-in.
        let declared = drafts.len();
        let mut dynamic_forks: Vec<(usize, usize, &Node)> = Vec::new();
        for d in 0..declared {
            let Some(dynamic) = drafts[d].dynamic.take() else { continue };
            let head = drafts.len();
            let count = dynamic.steps.len();
            for (k, mut step) in dynamic.steps.into_iter().enumerate() {
                step.after = Some(if k + 1 < count { After::Node(head + k + 1) } else { After::Join(d) });
                step.item_of = Some((d, k == 0));
                if let Some(&first) = index.get(&step.name) {
                    let line = drafts[first].pos.line;
                    self.problem(step.pos, format!("duplicate node name `{}` (first at line {line})", step.name));
                }
                index.insert(step.name.clone(), drafts.len());
                drafts.push(step);
            }
            dynamic_forks.push((d, head, dynamic.fan_in));
        }

        // Breakpoints from `config`.
        for (key, after) in [("interrupt_before", false), ("interrupt_after", true)] {
            let Some(list) = config.get(key) else { continue };
            let names: Vec<&Node> = match &list.kind {
                Kind::Seq(items) => items.iter().collect(),
                Kind::Str { .. } => vec![list],
                Kind::Null => Vec::new(),
                _ => {
                    self.problem(list.pos, format!("`config.{key}` must be a list of node names"));
                    continue;
                }
            };
            for n in names {
                let Some(name) = self.string(n, &format!("an entry of `config.{key}`")) else { continue };
                match index.get(name) {
                    Some(&i) if after => drafts[i].interrupt_after = true,
                    Some(&i) => drafts[i].interrupt_before = true,
                    None => {
                        let hint = self.hint_node(name, &index);
                        self.problem(n.pos, format!("`config.{key}` names `{name}`, which is not a node{hint}"));
                    }
                }
            }
        }

        // Edges.
        let edges = match top.get("edges") {
            Some(e) => self.edges(e),
            None => Vec::new(),
        };
        let (start, nodes) = self.routing(&drafts, declared, &index, &edges, &dynamic_forks);

        // Config: stores and limits.
        let mut store = None;
        let mut checkpoint_dir = None;
        let mut checkpoint = None;
        let mut recursion_limit = None;
        if let Some(dir) = config.get("checkpoint_dir") {
            if let Some(d) = self.string(dir, "`config.checkpoint_dir`") {
                checkpoint_dir = Some(crate::actions::resolve(&self.env.base_dir, d));
            }
        }
        if let Some(c) = config.get("checkpointer") {
            store = self.store(c);
        }
        if let Some(c) = config.get("checkpoint") {
            if let Some(p) = self.string(c, "`config.checkpoint`") {
                checkpoint = Some(crate::actions::resolve(&self.env.base_dir, p));
            }
        }
        if let Some(r) = config.get("recursion_limit") {
            match r.kind {
                Kind::Int(n) if n > 0 => recursion_limit = Some(n as usize),
                _ => self.problem(r.pos, "`config.recursion_limit` must be a positive integer"),
            }
        }
        if let Some(r) = config.get("raise_exceptions") {
            if !matches!(r.kind, Kind::Bool(_)) {
                self.problem(r.pos, "`config.raise_exceptions` must be true or false");
            }
        }
        let pauses = |d: &Draft<'_>| d.interrupt_before || d.interrupt_after || d.exec.can_pause();
        let can_pause = drafts.iter().any(pauses);
        if can_pause && store.is_none() && checkpoint_dir.is_none() && !self.env.has_checkpointer {
            let first = drafts.iter().find(|d| pauses(d)).map_or(root.pos, |d| d.pos);
            self.problem(
                first,
                "a checkpointer is required: this agent can pause (an interrupt), and a pause is resumed from a \
                 checkpoint; add `config.checkpoint_dir: DIR` or `config.checkpointer: memory` (or give the \
                 Engine a checkpointer)",
            );
        }

        let nodes = nodes?;
        let start = start?;
        let templates = match std::mem::replace(&mut self.templates, Templates::new()).finish() {
            Ok(t) => t,
            Err(e) => {
                self.problem(root.pos, format!("templates: {e}"));
                return None;
            }
        };
        let lua = std::mem::replace(&mut self.lua, Chunks::new(Arc::new(Map::new()), self.env.limits));
        let fingerprint = tea_runtime::__private::fingerprint(describe(&name, &nodes, &start).as_bytes());
        let schema_fingerprint = tea_runtime::__private::fingerprint(schema.describe().as_bytes());
        let inner = Inner {
            name,
            base_dir: self.env.base_dir.clone(),
            nodes,
            start,
            schema,
            templates,
            lua,
            variables: template::to_mj(&Value::Object(variables)),
            secrets: template::to_mj(&Value::Object(self.env.secrets.clone())),
            secret_values: self
                .env
                .secrets
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .filter(|(_, v)| v.len() >= crate::graph::MIN_SECRET_LEN)
                .collect(),
            settings_llm,
            settings_notify,
            checkpoint_dir: checkpoint_dir.clone(),
            last_checkpoint: Mutex::new(String::new()),
            fingerprint,
            schema_fingerprint,
        };
        Some(Loaded {
            graph: YamlGraph(Arc::new(inner), false, None),
            store,
            checkpoint_dir,
            checkpoint,
            recursion_limit,
        })
    }

    /// `settings: { llm: {…}, notify: {…} }`: each section's values may be templates.
    fn settings(&mut self, node: &Node) -> [Option<Tree>; 2] {
        let mut out = [None, None];
        if matches!(node.kind, Kind::Null) {
            return out;
        }
        let names: Vec<&str> = SETTINGS.iter().map(|(n, _)| *n).collect();
        let Some(sections) = self.fields(node, "`settings`", &names) else { return out };
        for (i, (section, keys)) in SETTINGS.iter().enumerate() {
            let Some(value) = sections.get(section) else { continue };
            if matches!(value.kind, Kind::Null) {
                continue;
            }
            let Some(fields) = self.fields(value, &format!("`settings.{section}`"), keys) else { continue };
            self.settings_keys[i] = fields.keys().map(|k| (*k).to_owned()).collect();
            out[i] = Some(self.sending_tree(value, SETTINGS_SENDING[i]));
        }
        out
    }

    fn schema(&mut self, node: &Node) -> Schema {
        if matches!(node.kind, Kind::Null) {
            return Schema::default();
        }
        let Some(entries) = node.as_map() else {
            self.problem(node.pos, format!("`state` must be a mapping of keys to types, not {}", node.what()));
            return Schema::default();
        };
        let mut decls = Vec::new();
        for (key, value) in entries {
            let Some(name) = key.scalar_text() else {
                self.problem(key.pos, "a state key must be a name");
                continue;
            };
            if is_reserved(&name) {
                self.problem(key.pos, format!("state key `{name}`: {RESERVED}"));
                continue;
            }
            let decl = match &value.kind {
                Kind::Str { text, .. } => self.type_name(value, text).map(|ty| Decl { ty, reducer: Reducer::Replace }),
                Kind::Null => Some(Decl { ty: Type::Any, reducer: Reducer::Replace }),
                Kind::Map(_) => {
                    let fields =
                        self.fields(value, &format!("the declaration of state key `{name}`"), &["type", "reducer"]);
                    fields.and_then(|f| {
                        let ty = match f.get("type") {
                            Some(t) => self.string(t, "`type`").and_then(|s| self.type_name(t, s))?,
                            None => Type::Any,
                        };
                        let reducer = match f.get("reducer") {
                            Some(r) => {
                                let text = self.string(r, "`reducer`")?;
                                match Reducer::parse(text) {
                                    Some(reducer) => {
                                        if !reducer.fits(ty) {
                                            self.problem(
                                                r.pos,
                                                format!(
                                                    "reducer `{text}` does not work on type `{}` (state key `{name}`)",
                                                    ty.name()
                                                ),
                                            );
                                        }
                                        reducer
                                    }
                                    None => {
                                        let hint = suggest(text, Reducer::NAMES);
                                        self.problem(
                                            r.pos,
                                            format!(
                                                "unknown reducer `{text}`; reducers are {}{hint}",
                                                Reducer::NAMES.join(", ")
                                            ),
                                        );
                                        return None;
                                    }
                                }
                            }
                            None => Reducer::Replace,
                        };
                        Some(Decl { ty, reducer })
                    })
                }
                _ => {
                    self.problem(value.pos, format!("state key `{name}`: write a type name or `{{ type, reducer }}`"));
                    None
                }
            };
            if let Some(decl) = decl {
                decls.push((name, decl));
            }
        }
        Schema::new(decls)
    }

    fn type_name(&mut self, node: &Node, text: &str) -> Option<Type> {
        match Type::parse(text) {
            Some(ty) => Some(ty),
            None => {
                let hint = suggest(text, Type::NAMES);
                self.problem(node.pos, format!("unknown type `{text}`; types are {}{hint}", Type::NAMES.join(", ")));
                None
            }
        }
    }

    fn store(&mut self, node: &Node) -> Option<StoreSpec> {
        if node.as_str() == Some("memory") {
            return Some(StoreSpec::Memory);
        }
        if let Some([(key, value)]) = node.as_map() {
            match key.as_str() {
                Some("memory") => return Some(StoreSpec::Memory),
                Some("sled") => {
                    let path = self.string(value, "`checkpointer.sled`")?;
                    if cfg!(feature = "sled") {
                        return Some(StoreSpec::Sled(crate::actions::resolve(&self.env.base_dir, path)));
                    }
                    self.problem(key.pos, "`sled` stores are not built in (cargo feature `sled` of tea-yaml)");
                    return None;
                }
                Some("postgres") => {
                    let url = self.string(value, "`checkpointer.postgres`")?;
                    if cfg!(feature = "postgres") {
                        return Some(StoreSpec::Postgres(url.to_owned()));
                    }
                    self.problem(key.pos, "`postgres` stores are not built in (cargo feature `postgres` of tea)");
                    return None;
                }
                _ => {}
            }
        }
        self.problem(node.pos, "`config.checkpointer` must be `memory`, `{ sled: PATH }` or `{ postgres: URL }`");
        None
    }

    fn node<'n>(&mut self, item: &'n Node) -> Option<Draft<'n>> {
        self.node_or(item, None)
    }

    /// A node; `unnamed`: the name of a node written without one (a step of a
    /// `dynamic_parallel` node, `step_{k}` as in The Edge Agent), else that is a problem.
    fn node_or<'n>(&mut self, item: &'n Node, unnamed: Option<String>) -> Option<Draft<'n>> {
        let fields = self.fields(item, "a node", NODE_KEYS)?;
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
                goto,
                interrupt_before,
                interrupt_after,
                marked_fan_in,
                dynamic,
                after: None,
                item_of: None,
            });
        }
        if is_dynamic {
            let (exec, dynamic) = self.dynamic(&fields, &name, pos);
            let marked_fan_in = None;
            return Some(Draft {
                name,
                pos,
                exec,
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
        for key in
            ["items", "item_var", "index_var", "steps", "max_concurrency", "fail_fast", "parallel_config", "subgraph"]
        {
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
                        format!("node type `{other}` is not supported here; tea runs `type: interrupt` and `type: dynamic_parallel` nodes, `run:` Lua blocks and `uses:` actions"),
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
        for key in ["message", "state_key", "resume_key", "timeout"] {
            if let (Some(n), false) = (fields.get(key), is_interrupt) {
                self.problem(n.pos, format!("`{key}` belongs to `type: interrupt` nodes; node `{name}` is not one"));
            }
        }
        for key in ["with", "output"] {
            if let (Some(n), None, false) = (fields.get(key), uses, key == "output" && run.is_some()) {
                self.problem(n.pos, format!("`{key}` goes with `uses:` (an action); node `{name}` has none"));
            }
        }
        if let Some(l) = fields.get("language") {
            match l.as_str() {
                Some("lua") => {}
                Some(lang @ ("python" | "prolog")) => self.problem(
                    l.pos,
                    format!(
                        "`language: {lang}`: only Lua runs here; port node `{name}`'s block to Lua (`language: lua`)"
                    ),
                ),
                Some(other) => self.problem(l.pos, format!("unknown language `{other}`; only `lua` runs here")),
                None => self.problem(l.pos, format!("{} must be a string", what("language"))),
            }
        }

        let exec = if is_interrupt {
            self.interrupt(&fields, &name)
        } else if let Some(run) = run {
            self.run(run, &name, fields.get("output").copied())
        } else if let Some(uses) = uses {
            self.action(uses, &fields, &name)
        } else {
            Exec::Noop
        };

        let Flow { interrupt_before, interrupt_after, goto, marked_fan_in } = self.flow(&fields, &name);
        let dynamic = None;
        Some(Draft {
            name,
            pos,
            exec,
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
    /// `result`; absent: the child's final state is written key by key).
    fn subgraph(&mut self, fields: &HashMap<&str, &Node>, name: &str, pos: Pos) -> Exec {
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
    fn load_child(&self, path: &std::path::Path, canonical: PathBuf) -> Result<Loaded, LoadError> {
        let (text, shown, base_dir) = crate::files::read_agent_file(path)
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
        };
        load(&text, &env)
    }

    /// A `type: dynamic_parallel` node (The Edge Agent's fan-out over a list known at run
    /// time): `items`, `item_var`, `index_var`, `fan_in: NODE`, and per item either `steps:`
    /// (nodes, run in order) or `action:` (`uses`/`with`/`output`).
    fn dynamic<'n>(&mut self, fields: &HashMap<&str, &'n Node>, name: &str, pos: Pos) -> (Exec, Option<Dynamic<'n>>) {
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
        if let Some(o) = fields.get("output") {
            self.problem(
                o.pos,
                format!(
                    "{}: the items' final states reach the `fan_in` node as `parallel_results` (in item order); \
                     write them to a key there",
                    what("output")
                ),
            );
        }
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
            Some(items) => Exec::Send { items, item_var, index_var, fail_fast, limit },
            None => Exec::Noop,
        };
        let dynamic = fan_in.filter(|_| !steps.is_empty()).map(|fan_in| Dynamic { fan_in, steps });
        (exec, dynamic)
    }

    fn run(&mut self, run: &Node, name: &str, output: Option<&Node>) -> Exec {
        match &run.kind {
            Kind::Str { text, block } => {
                if let Some(o) = output {
                    self.problem(o.pos, format!("node `{name}`: a Lua block writes the keys of the table it returns; `output` is for actions"));
                }
                // A block scalar's position is its first content line, like a plain one's.
                let _ = block;
                let first_line = run.pos.line;
                match self.lua.add(&self.env.file, first_line, text) {
                    Ok(id) => Exec::Lua(id),
                    Err((line, message)) => {
                        self.problem(Pos { line, column: 1 }, format!("node `{name}`: {message}"));
                        Exec::Noop
                    }
                }
            }
            Kind::Map(_) => {
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

    fn action(&mut self, uses: &Node, fields: &HashMap<&str, &Node>, name: &str) -> Exec {
        let Some(action_name) = self.string(uses, &format!("`uses` of node `{name}`")) else { return Exec::Noop };
        let action = match self.env.actions.get(action_name) {
            Some(a) => a.clone(),
            None => match actions::built_in(action_name) {
                Some(action) => action,
                None if actions::NET_NAMES.contains(&action_name) => {
                    self.problem(
                        uses.pos,
                        format!(
                            "action `{action_name}` (node `{name}`) reaches the network, which this build leaves \
                             out: it needs tea-yaml's cargo feature `net` (the `tea` command has it)"
                        ),
                    );
                    return Exec::Noop;
                }
                None => {
                    let known: Vec<&str> = self.env.actions.keys().map(String::as_str).chain(BUILT_IN_NAMES).collect();
                    let hint = suggest(action_name, known.iter().copied());
                    self.problem(uses.pos, format!("unknown action `{action_name}` (node `{name}`){hint}"));
                    return Exec::Noop;
                }
            },
        };
        let with = match fields.get("with") {
            Some(w) => self.sending_tree(w, sending_keys(&action)),
            None => Tree::Literal(Value::Object(Map::new())),
        };
        #[cfg(feature = "net")]
        if let Action::Net(net) = &action {
            self.net_with(*net, fields.get("with").copied(), uses, name);
        }
        let output = match fields.get("output") {
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
        };
        Exec::Action { name: action_name.to_owned(), action, with, output }
    }

    /// A network action's `with:`, when written as a mapping: its keys, and the ones it needs
    /// that neither it nor the file's `settings` give. (Rendered arguments are checked again
    /// when the node runs.)
    #[cfg(feature = "net")]
    fn net_with(&mut self, action: crate::net::NetAction, with: Option<&Node>, uses: &Node, name: &str) {
        use crate::net::{NetAction, Section};
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
        let given = |k: &str| keys.iter().any(|g| g == k) || defaults.iter().any(|g| g == k);
        let at = with.map_or(uses.pos, |w| w.pos);
        match action {
            NetAction::LlmCall => {
                if !given("model") {
                    self.problem(
                        at,
                        format!("`llm.call` (node `{name}`) needs a `model`: in `with:`, or `settings.llm.model`"),
                    );
                }
                if !given("messages") && !given("prompt") {
                    self.problem(
                        at,
                        format!("`llm.call` (node `{name}`) needs `messages: [{{role, content}}]` (or a `prompt`)"),
                    );
                }
            }
            NetAction::HttpGet | NetAction::HttpPost => {
                if !given("url") {
                    self.problem(at, format!("`{what}` (node `{name}`) needs a `url`"));
                }
            }
            NetAction::Notify => {}
        }
    }

    fn interrupt(&mut self, fields: &HashMap<&str, &Node>, name: &str) -> Exec {
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

    /// A value with templates in it.
    fn tree(&mut self, node: &Node) -> Tree {
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
    fn text(&mut self, pos: Pos, text: &str) -> Tree {
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
    fn cond(&mut self, node: &Node, expect: bool) -> Cond {
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
    fn flow<'n>(&mut self, fields: &HashMap<&str, &'n Node>, name: &str) -> Flow<'n> {
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

    fn goto<'n>(&mut self, node: &'n Node, name: &str) -> Vec<(Cond, &'n Node)> {
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

    fn edges<'n>(&mut self, node: &'n Node) -> Vec<EdgeDraft<'n>> {
        let Some(items) = node.as_seq() else {
            if !matches!(node.kind, Kind::Null) {
                self.problem(node.pos, format!("`edges` must be a list, not {}", node.what()));
            }
            return Vec::new();
        };
        let mut out = Vec::new();
        for item in items {
            let Some(f) = self.fields(item, "an edge", EDGE_KEYS) else { continue };
            let Some(from) = f.get("from").copied() else {
                self.problem(item.pos, "an edge without `from`");
                continue;
            };
            let parallel_type = match f.get("type") {
                None => false,
                Some(t) if t.as_str() == Some("parallel") => true,
                Some(t) => {
                    self.problem(t.pos, "an edge's `type` is `parallel` or absent");
                    false
                }
            };
            let fan_in = f.get("fan_in").copied();
            match f.get("parallel").map(|p| &p.kind) {
                Some(Kind::Seq(heads)) => {
                    if let Some(to) = f.get("to") {
                        self.problem(to.pos, "a `parallel: [...]` edge lists its branches; drop `to`");
                    }
                    out.push(EdgeDraft {
                        from,
                        pos: item.pos,
                        kind: EdgeKind::Parallel { heads: heads.iter().collect(), fan_in },
                    });
                    continue;
                }
                Some(Kind::Bool(true)) => {}
                Some(Kind::Bool(false)) | None if !parallel_type => {
                    if let Some(fi) = fan_in {
                        self.problem(fi.pos, "`fan_in` belongs to parallel edges");
                    }
                    let Some(to) = f.get("to").copied() else {
                        self.problem(item.pos, "an edge without `to`");
                        continue;
                    };
                    let cond = match (f.get("condition"), f.get("when")) {
                        (Some(c), when) => {
                            let expect = match when.map(|w| &w.kind) {
                                None => true,
                                Some(Kind::Bool(b)) => *b,
                                Some(_) => {
                                    self.problem(
                                        when.map_or(item.pos, |w| w.pos),
                                        "with `condition`, `when` is true or false: the truth the condition must have",
                                    );
                                    true
                                }
                            };
                            match &c.kind {
                                Kind::Map(_) => {
                                    let cf = self.fields(c, "`condition`", &["type", "value"]).unwrap_or_default();
                                    if cf.get("type").and_then(|t| t.as_str()).is_some_and(|t| t != "expression") {
                                        self.problem(c.pos, "`condition.type` must be `expression`");
                                    }
                                    match cf.get("value") {
                                        Some(v) => self.cond(v, expect),
                                        None => {
                                            self.problem(c.pos, "`condition` needs `value: EXPR`");
                                            Cond::Const(false)
                                        }
                                    }
                                }
                                _ => self.cond(c, expect),
                            }
                        }
                        (None, Some(w)) => self.cond(w, true),
                        (None, None) => Cond::Always,
                    };
                    out.push(EdgeDraft { from, pos: item.pos, kind: EdgeKind::Plain { to, cond } });
                    continue;
                }
                Some(Kind::Bool(false)) | None => {}
                Some(_) => {
                    self.problem(item.pos, "`parallel` is true or a list of branch heads");
                    continue;
                }
            }
            // `type: parallel` or `parallel: true`: one branch.
            let Some(to) = f.get("to").copied() else {
                self.problem(item.pos, "a parallel edge without `to`");
                continue;
            };
            for key in ["when", "condition"] {
                if let Some(c) = f.get(key) {
                    self.problem(c.pos, format!("a parallel edge always fans out; `{key}` does not apply"));
                }
            }
            out.push(EdgeDraft { from, pos: item.pos, kind: EdgeKind::Parallel { heads: vec![to], fan_in } });
        }
        out
    }

    /// A routing target by name: a node or the end.
    fn target(&mut self, index: &HashMap<String, usize>, node: &Node, what: &str) -> Option<Goto<NodeIx>> {
        let Some(name) = node.scalar_text() else {
            self.problem(node.pos, format!("{what} must be a node name"));
            return None;
        };
        if END.contains(&name.as_str()) {
            return Some(Goto::End);
        }
        if START.contains(&name.as_str()) {
            self.problem(node.pos, format!("{what} cannot be `{name}`: nothing goes back to the entry"));
            return None;
        }
        match index.get(&name) {
            Some(&i) => Some(Goto::Node(NodeIx(i as u32))),
            None => {
                let hint = self.hint_node(&name, index);
                self.problem(node.pos, format!("{what} names `{name}`, which is not a node{hint}"));
                None
            }
        }
    }

    /// Resolves every node's routing (goto, edges, fan-outs, the implicit next node) into
    /// rules; returns the start rules and the nodes.
    /// `drafts`: the file's `declared` nodes, then the per-item nodes of its `dynamic_parallel`
    /// nodes; `dynamic`: each `dynamic_parallel` node, its first per-item node and its `fan_in`.
    fn routing(
        &mut self,
        drafts: &[Draft<'_>],
        declared: usize,
        index: &HashMap<String, usize>,
        edges: &[EdgeDraft<'_>],
        dynamic: &[(usize, usize, &Node)],
    ) -> (Option<Vec<Rule>>, Option<Vec<NodeDef>>) {
        let n = drafts.len();
        let before = self.problems.len();
        let mut plain: Vec<Vec<(Rule, Pos)>> = vec![Vec::new(); n];
        let mut start_rules: Vec<(Rule, Pos)> = Vec::new();
        let mut forks: Vec<Option<ForkDraft>> = vec![None; n];
        for &(d, head, fan_in) in dynamic {
            let join = match self.target(index, fan_in, &format!("`fan_in` of node `{}`", drafts[d].name)) {
                Some(Goto::Node(ix)) if ix.index() < declared => Some(ix),
                Some(Goto::Node(ix)) => {
                    let name = &drafts[ix.index()].name;
                    self.problem(fan_in.pos, format!("`fan_in` names `{name}`, a step of a `dynamic_parallel` node"));
                    None
                }
                Some(Goto::End) => {
                    self.problem(fan_in.pos, "`fan_in` must be a node, not the end");
                    None
                }
                None => None,
            };
            forks[d] = Some((vec![NodeIx(head as u32)], join, drafts[d].pos));
        }
        let mut start_has_edges = false;
        for edge in edges {
            let from_name = edge.from.scalar_text().unwrap_or_default();
            let from = if START.contains(&from_name.as_str()) {
                None
            } else if END.contains(&from_name.as_str()) {
                self.problem(edge.from.pos, format!("an edge cannot leave `{from_name}`: the run is over there"));
                continue;
            } else {
                match index.get(&from_name) {
                    Some(&i) => Some(i),
                    None => {
                        let hint = self.hint_node(&from_name, index);
                        self.problem(edge.from.pos, format!("an edge leaves `{from_name}`, which is not a node{hint}"));
                        continue;
                    }
                }
            };
            match &edge.kind {
                EdgeKind::Plain { to, cond } => {
                    let Some(to) = self.target(index, to, "an edge's `to`") else { continue };
                    let rule = Rule { cond: cond.clone(), to };
                    match from {
                        None => {
                            start_has_edges = true;
                            start_rules.push((rule, edge.pos));
                        }
                        Some(i) => plain[i].push((rule, edge.pos)),
                    }
                }
                EdgeKind::Parallel { heads, fan_in } => {
                    let Some(i) = from else {
                        self.problem(edge.from.pos, "the entry cannot fan out; start with a node that fans out");
                        continue;
                    };
                    if drafts[i].after.is_some() || matches!(drafts[i].exec, Exec::Send { .. }) {
                        self.problem(
                            edge.pos,
                            format!("node `{from_name}` is a `dynamic_parallel` node or one of its steps: it has no parallel edges"),
                        );
                        continue;
                    }
                    let mut head_ix = Vec::new();
                    for h in heads {
                        match self.target(index, h, "a parallel branch") {
                            Some(Goto::Node(ix)) => head_ix.push(ix),
                            Some(Goto::End) => {
                                self.problem(h.pos, "a parallel branch must start at a node, not at the end");
                            }
                            None => {}
                        }
                    }
                    let join = match fan_in {
                        Some(f) => match self.target(index, f, "`fan_in`") {
                            Some(Goto::Node(ix)) => Some(ix),
                            Some(Goto::End) => {
                                self.problem(f.pos, "`fan_in` must be a node, not the end");
                                None
                            }
                            None => None,
                        },
                        None => None,
                    };
                    let entry = forks[i].get_or_insert_with(|| (Vec::new(), None, edge.from.pos));
                    for h in head_ix {
                        if entry.0.contains(&h) {
                            self.problem(
                                edge.from.pos,
                                format!("node `{from_name}` fans out to `{}` twice", drafts[h.index()].name),
                            );
                        } else {
                            entry.0.push(h);
                        }
                    }
                    match (entry.1, join) {
                        (Some(a), Some(b)) if a != b => {
                            self.problem(
                                fan_in.map_or(edge.from.pos, |f| f.pos),
                                format!(
                                    "the branches of `{from_name}` meet at one fan-in; `{}` and `{}` are both named",
                                    drafts[a.index()].name,
                                    drafts[b.index()].name
                                ),
                            );
                        }
                        (None, Some(b)) => entry.1 = Some(b),
                        _ => {}
                    }
                }
            }
        }

        // Resolve joins that were not named, and make each head's implicit route the join.
        let mut head_join: Vec<Option<NodeIx>> = vec![None; n];
        let mut fork_of: Vec<Option<(Vec<NodeIx>, NodeIx)>> = vec![None; n];
        for (i, fork) in forks.iter().enumerate() {
            let Some((heads, join, pos)) = fork else { continue };
            let join = match join {
                Some(j) => *j,
                None => match common_successor(drafts, heads, &plain, index) {
                    Some(j) => j,
                    None => {
                        self.problem(
                            *pos,
                            format!(
                                "the branches of `{}` have no single node where they meet; name it with `fan_in: NODE`",
                                drafts[i].name
                            ),
                        );
                        continue;
                    }
                },
            };
            if drafts[i].goto.is_some() || !plain[i].is_empty() {
                self.problem(
                    *pos,
                    format!("node `{}` fans out, so it cannot also have `goto` or other edges", drafts[i].name),
                );
            }
            for h in heads {
                head_join[h.index()] = Some(join);
            }
            fork_of[i] = Some((heads.clone(), join));
        }

        let mut nodes = Vec::with_capacity(n);
        let mut places = Places { nodes: Vec::new(), rules: Vec::new(), start: Vec::new(), forks: Vec::new() };
        for (i, draft) in drafts.iter().enumerate() {
            let always = |to| vec![(Rule { cond: Cond::Always, to }, draft.pos)];
            let rules: Vec<(Rule, Pos)> = if let Some(after) = draft.after {
                if !plain[i].is_empty() {
                    self.problem(
                        plain[i][0].1,
                        format!("node `{}` is a step of a `dynamic_parallel` node: its steps run in order, no edge leaves them", draft.name),
                    );
                }
                match after {
                    After::Node(next) => always(Goto::Node(NodeIx(next as u32))),
                    After::Join(d) => match forks[d].as_ref().and_then(|f| f.1) {
                        Some(join) => always(Goto::Node(join)),
                        None => Vec::new(),
                    },
                }
            } else if let Some(goto) = &draft.goto {
                let mut rules = Vec::new();
                for (cond, to) in goto {
                    if let Some(target) = self.target(index, to, &format!("`goto` of node `{}`", draft.name)) {
                        rules.push((Rule { cond: cond.clone(), to: target }, to.pos));
                    }
                }
                rules
            } else if !plain[i].is_empty() {
                std::mem::take(&mut plain[i])
            } else if fork_of[i].is_some() {
                Vec::new()
            } else if let Some(join) = head_join[i] {
                always(Goto::Node(join))
            } else if i + 1 < declared {
                always(Goto::Node(NodeIx(i as u32 + 1)))
            } else {
                always(Goto::End)
            };
            places.nodes.push(draft.pos);
            places.rules.push(rules.iter().map(|(_, p)| *p).collect());
            places.forks.push(forks[i].as_ref().map(|f| f.2));
            let rules = rules.into_iter().map(|(r, _)| r).collect();
            nodes.push(NodeDef {
                name: NodeName::from(draft.name.clone()),
                exec: draft.exec.clone(),
                rules,
                fork: fork_of[i].take(),
                interrupt_before: draft.interrupt_before,
                interrupt_after: draft.interrupt_after,
                fan_in: false,
                sends_fan_in: false,
                item_of: draft.item_of.map(|(d, head)| (NodeIx(d as u32), head)),
            });
        }
        let joins: Vec<(usize, bool)> = nodes
            .iter()
            .filter_map(|n| n.fork.as_ref().map(|(_, j)| (j.index(), matches!(n.exec, Exec::Send { .. }))))
            .collect();
        for (j, sends) in joins {
            nodes[j].fan_in = true;
            nodes[j].sends_fan_in |= sends;
        }
        for (node, draft) in nodes.iter().zip(drafts) {
            if let (Some(pos), false) = (draft.marked_fan_in, node.fan_in) {
                self.problem(
                    pos,
                    format!("node `{}` is marked `fan_in: true`, but no parallel edge meets there", draft.name),
                );
            }
        }
        if !start_has_edges {
            start_rules = vec![(Rule { cond: Cond::Always, to: Goto::Node(NodeIx(0)) }, drafts[0].pos)];
        }
        places.start = start_rules.iter().map(|(_, p)| *p).collect();
        let start_rules: Vec<Rule> = start_rules.into_iter().map(|(r, _)| r).collect();
        if self.problems.len() != before {
            return (None, None);
        }
        self.shape(&nodes, &start_rules, drafts, &places);
        if self.problems.len() != before {
            return (None, None);
        }
        (Some(start_rules), Some(nodes))
    }
}

/// Where the parts of the routing are written, for the shape checks' problems.
struct Places {
    nodes: Vec<Pos>,
    /// Per node, where each of its rules is written (an implicit rule: at the node).
    rules: Vec<Vec<Pos>>,
    start: Vec<Pos>,
    /// Per node, where its fan-out is declared.
    forks: Vec<Option<Pos>>,
}

impl Loader<'_> {
    /// The graph checks `graph!` runs (tea-check): reachability, a way to `__end__`, edges that
    /// are never taken or repeated, branches that leave their fan-out, pauses inside nested
    /// fan-outs. Each problem is placed at the node, rule or fan-out it is about.
    fn shape(&mut self, nodes: &[NodeDef], start: &[Rule], drafts: &[Draft<'_>], places: &Places) {
        let target = |g: &Goto<NodeIx>| match g {
            Goto::Node(n) => tea_check::Target::Node(n.index()),
            Goto::End => tea_check::Target::End,
        };
        let edges = |rules: &[Rule]| -> Vec<tea_check::Edge> {
            rules
                .iter()
                .map(|r| match &r.cond {
                    Cond::Always | Cond::Const(true) => tea_check::Edge::to(target(&r.to)),
                    Cond::Const(false) => tea_check::Edge::guarded(target(&r.to), "false"),
                    Cond::Expr { source, expect: true, .. } => {
                        tea_check::Edge::guarded(target(&r.to), source.to_string())
                    }
                    Cond::Expr { source, expect: false, .. } => {
                        tea_check::Edge::guarded(target(&r.to), format!("not ({source})"))
                    }
                })
                .collect()
        };
        let graph = tea_check::Graph {
            nodes: nodes
                .iter()
                .zip(drafts)
                .map(|(node, draft)| tea_check::Node {
                    name: draft.name.clone(),
                    routing: match &node.fork {
                        Some((heads, join)) => tea_check::Routing::Fork {
                            heads: heads.iter().map(|h| h.index()).collect(),
                            join: join.index(),
                        },
                        None => tea_check::Routing::Edges(edges(&node.rules)),
                    },
                    can_pause: node.interrupt_before || node.interrupt_after || node.exec.can_pause(),
                })
                .collect(),
            start: edges(start),
        };
        for problem in tea_check::check(&graph, tea_check::Spelling::Yaml) {
            let pos = match problem.at {
                tea_check::At::Node(i) => places.nodes.get(i).copied(),
                tea_check::At::Edge { from, to } => {
                    let first = nodes.get(from).and_then(|n| n.rules.iter().position(|r| target(&r.to) == to));
                    match first {
                        Some(k) => places.rules[from].get(k).copied(),
                        None => places.forks.get(from).copied().flatten().or(places.nodes.get(from).copied()),
                    }
                }
                tea_check::At::Listed { from: tea_check::Source::Start, index } => places.start.get(index).copied(),
                tea_check::At::Listed { from: tea_check::Source::Node(i), index } => {
                    places.rules.get(i).and_then(|r| r.get(index)).copied()
                }
                tea_check::At::Fork(i) | tea_check::At::Branch { fork: i, .. } => {
                    places.forks.get(i).copied().flatten().or(places.nodes.get(i).copied())
                }
                _ => places.start.first().copied(),
            };
            self.problem(pos.unwrap_or(Pos { line: 1, column: 1 }), problem.message);
        }
    }
}

/// For a fork without `fan_in`: the one node every branch reaches first by its explicit routing.
fn common_successor(
    drafts: &[Draft<'_>],
    heads: &[NodeIx],
    plain: &[Vec<(Rule, Pos)>],
    index: &HashMap<String, usize>,
) -> Option<NodeIx> {
    let successors = |i: usize| -> Vec<usize> {
        let mut out: Vec<usize> = plain[i]
            .iter()
            .filter_map(|(r, _)| match r.to {
                Goto::Node(n) => Some(n.index()),
                Goto::End => None,
            })
            .collect();
        if let Some(goto) = &drafts[i].goto {
            out.extend(goto.iter().filter_map(|(_, n)| n.scalar_text().and_then(|s| index.get(&s).copied())));
        }
        out
    };
    let reach = |head: usize| -> Vec<usize> {
        let mut seen = vec![head];
        let mut queue = vec![head];
        while let Some(i) = queue.pop() {
            for s in successors(i) {
                if !seen.contains(&s) {
                    seen.push(s);
                    queue.push(s);
                }
            }
        }
        seen
    };
    let sets: Vec<Vec<usize>> = heads.iter().map(|h| reach(h.index())).collect();
    let common: Vec<usize> = sets
        .first()?
        .iter()
        .copied()
        .filter(|c| !heads.iter().any(|h| h.index() == *c) && sets.iter().all(|s| s.contains(c)))
        .collect();
    // The common node reached before the others: none of the others leads to it... keep it
    // simple and unambiguous: exactly one common node, or the one all others follow.
    let firsts: Vec<usize> = common
        .iter()
        .copied()
        .filter(|c| !common.iter().any(|o| o != c && !reach(*o).contains(c) && reach(*c).contains(o)))
        .collect();
    match (common.as_slice(), firsts.as_slice()) {
        ([one], _) => Some(NodeIx(*one as u32)),
        (_, [one]) => Some(NodeIx(*one as u32)),
        _ => None,
    }
}

/// `{{ expr }}` → `expr`; anything else unchanged.
fn strip_braces(text: &str) -> &str {
    single_expression(text.trim()).unwrap_or(text)
}

/// The expression of a string that is exactly one `{{ expr }}`.
fn single_expression(text: &str) -> Option<&str> {
    let inner = text.strip_prefix("{{")?.strip_suffix("}}")?;
    if inner.contains("{{") || inner.contains("}}") || inner.contains("{%") {
        return None;
    }
    Some(inner.trim())
}

/// What a problem says of a reserved name.
const RESERVED: &str = "a name the engine keeps for itself (names starting with `__tea`, `__start__`, `__end__`)";

/// A state key the engine uses itself: `__tea…` (a `dynamic_parallel` item's record), the
/// entry and the exit.
fn is_reserved(name: &str) -> bool {
    name.starts_with("__tea") || name == START[0] || name == END[0]
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !matches!(s, "not" | "and" | "or" | "none" | "None")
}

/// What a node runs, as its fingerprint spells it. Written out here, not taken from a `Debug`
/// implementation: the text is stored (hashed) in every checkpoint, so it must not change when
/// someone edits how a value prints. (It spells each kind as the first fingerprints did.)
fn exec_text(out: &mut String, exec: &Exec) {
    use std::fmt::Write;
    let _ = match exec {
        Exec::Noop => write!(out, "Noop"),
        Exec::Lua(id) => write!(out, "Lua(ChunkId({}))", id.index()),
        Exec::Expr { key, .. } => write!(out, "Expr(-> {key})"),
        Exec::Action { name, .. } => write!(out, "Action({name})"),
        Exec::Interrupt { state_key, resume_key, .. } => write!(out, "Interrupt({state_key} => {resume_key})"),
        Exec::Send { item_var, index_var, .. } => write!(out, "Send({item_var}, {index_var})"),
        Exec::Subgraph { child, .. } => write!(out, "Subgraph({}:{:x})", child.0.name, child.0.fingerprint),
    };
}

/// The graph's shape as text, for its fingerprint: nodes, what runs, routing, fan-outs, pauses.
fn describe(name: &str, nodes: &[NodeDef], start: &[Rule]) -> String {
    use std::fmt::Write;
    let mut out = format!("{name}|");
    let target = |g: &Goto<NodeIx>| match g {
        Goto::Node(n) => nodes[n.index()].name.to_string(),
        Goto::End => "__end__".to_owned(),
    };
    let rules = |out: &mut String, rules: &[Rule]| {
        for r in rules {
            let cond = match &r.cond {
                Cond::Always => "*".to_owned(),
                Cond::Const(b) => b.to_string(),
                Cond::Expr { source, expect, .. } => format!("{source}={expect}"),
            };
            let _ = write!(out, "[{cond}->{}]", target(&r.to));
        }
    };
    rules(&mut out, start);
    for n in nodes {
        let _ = write!(out, "|{}:", n.name);
        exec_text(&mut out, &n.exec);
        let _ = write!(out, ":{}{}", n.interrupt_before, n.interrupt_after);
        rules(&mut out, &n.rules);
        if let Some((heads, join)) = &n.fork {
            out.push_str("fork[");
            for (i, h) in heads.iter().enumerate() {
                let sep = if i == 0 { "" } else { ", " };
                let _ = write!(out, "{sep}\"{}\"", nodes[h.index()].name.as_str().escape_debug());
            }
            let _ = write!(out, "]->{}", nodes[join.index()].name);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use tea_runtime::Graph;

    /// One node of every kind the fingerprint describes, and each kind of routing.
    const EVERY_KIND: &str = r#"
name: every
config: { checkpointer: memory, interrupt_after: [lua] }
nodes:
  - { name: noop }
  - { name: lua, run: "return {}" }
  - { name: expr, run: { type: expression, value: "1 + 1", output_key: two } }
  - { name: act, uses: file.read, with: { path: x } }
  - { name: ask, type: interrupt, state_key: q, resume_key: a }
  - name: fan
    type: dynamic_parallel
    items: "{{ state.items }}"
    item_var: it
    index_var: ix
    fan_in: join
    steps:
      - run: return {}
  - { name: join, run: "return {}", goto: [{ if: "state.again", to: lua }, { to: child }] }
  - { name: child, type: subgraph, file: CHILD }
  - { name: left, run: "return {}" }
  - { name: right, run: "return {}" }
  - { name: meet, run: "return {}" }
edges:
  - { from: child, parallel: [left, right], fan_in: meet }
  - { from: meet, to: __end__ }
"#;

    /// The fingerprint is stored in every checkpoint: a change orphans them all. It is built
    /// from the graph's own parts (not from any `Debug` output), and this value is the one
    /// checkpoints written since the fingerprint was introduced carry.
    #[test]
    fn the_graph_fingerprint_is_stable() {
        let dir = std::env::temp_dir().join(format!("tea-yaml-fingerprint-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let child = dir.join("child.yaml");
        std::fs::write(&child, "name: kid\nnodes:\n  - { name: only, run: 'return {}' }\n").unwrap();
        let text = EVERY_KIND.replace("CHILD", &child.display().to_string());
        let agent = crate::Engine::new().load_str(&text).unwrap();
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!(agent.graph().fingerprint(), 0xdede_4ec2_084c_d32e, "{:x}", agent.graph().fingerprint());
    }
}
