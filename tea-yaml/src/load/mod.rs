//! The loader: YAML text to a [`YamlGraph`], reporting every problem at once with its line and
//! column.
//!
//! It walks the position-carrying tree of `syntax/yaml.rs` by hand (not through serde), so one
//! mistake does not hide the next: unknown keys (with "did you mean"), missing or duplicate
//! names, targets that name no node, conditions and templates that do not parse, Lua that does
//! not compile, unknown actions, interrupts without a checkpointer.
//!
//! - `mod.rs` — the file and its sections (`config`, `settings`, `state`, secrets, variables);
//! - `node.rs` — each kind of node, its templates, conditions and action;
//! - `routing.rs` — edges and targets into each node's rules, then the graph checks of tea-check
//!   on the graph's shape (`ir/shape.rs`);
//! - `fingerprint.rs` — the text every checkpoint of the agent is checked against;
//!
//! Each action family's `with:` is loaded next to where it runs, in its folder's `load.rs`
//! (`actions/{compose, extraction, planning, crew}/load.rs`, `lang/prolog/load.rs` for Prolog
//! blocks and `prolog.query`'s code): those files are methods of this module's `Loader` and
//! belong to the loading layer, so one feature's change touches one folder.
//!
//! The loader walks the tree by hand and collects every problem (unknown keys with "did you mean", names, targets, conditions and templates that
//! do not parse, Lua that does not compile, actions, interrupts without a checkpointer; The Edge
//! Agent's keys tea accepts and ignores become `Loader::warn`ings, one per key, kept in
//! `LoadedAgent::warnings` for `Agent::warnings` and printed by the CLI), then resolves routing —
//! `goto`, `edges`, fan-outs, implicit chaining, `targets:` edges (a rule per value) — into ordered
//! rules per node; a fan-out from `__start__` starts at a no-op node of the engine's own,
//! `__tea_start`. A `type: dynamic_parallel` node becomes a node whose `Exec::Send` evaluates
//! `items`, a fan-out (`Graph::sends` holds for it) whose one head is the first of its per-item
//! nodes (appended after the file's own nodes, chained in order, the last routed to its `fan_in`),
//! and its fan-in: each item is one send, so the engine's `Send` machinery runs, checkpoints,
//! pauses and merges them. Its steps carry `NodeDef::item_of`; `run/items.rs` holds what The Edge
//! Agent's item semantics need beyond the engine's: each send starts its item with a record under
//! the undeclared state key `__tea_item` (a random fan-out id, the node, the index,
//! `max_concurrency`), `run/graph.rs` runs each step through `run_item_step` (skip once the item
//! failed; a permit of the fan-out's `max_concurrency`; `fail_fast` cancellation at the first step;
//! an item's own failure written into its record instead of failing the run), and the fan-in turns
//! the branches' states into The Edge Agent's `parallel_results` (`branch`, `success`, `state`,
//! `error`, `timing_ms`). The cancellation flag and permits live in a process-wide registry keyed
//! by fan-out id, dropped at the fan-in. A `type: subgraph` node loads its child file with the same
//! loader (the chain of parent files rejects cycles; the child's problems are re-reported at the
//! parent's `file:` naming the child's file:line:col) into `Exec::Subgraph`, which `run/graph.rs`
//! runs through `run_subgraph_mapped` (input rendered before the call, output rendered over the
//! child's final state), so the child's thread, its pauses and resumes are the engine's, as for
//! `graph!` subgraphs.

// What the loader's files share, the action families' `load.rs` files included.
pub(crate) use crate::actions::{self, Action, BUILT_IN_NAMES};
pub(crate) use crate::error::{suggest, LoadError, Problem};
pub(crate) use crate::ir::{Cond, Exec, Limit, LoadedAgent, NodeDef, NodeIx, Output, Rule, Tree, YamlGraph};
pub(crate) use crate::lang::lua::{Chunks, Limits};
pub(crate) use crate::lang::template::{self, Builder as Templates};
pub(crate) use crate::state::{Decl, Reducer, Schema, Type};
pub(crate) use crate::syntax::yaml::{self, Kind, Node, Pos};
pub(crate) use serde_json::{Map, Value};
pub(crate) use std::cell::RefCell;
pub(crate) use std::collections::HashMap;
pub(crate) use std::path::PathBuf;
pub(crate) use std::rc::Rc;
pub(crate) use std::sync::{Arc, Mutex};
pub(crate) use std::time::Duration;
pub(crate) use tea_runtime::{CachePolicy, Goto, NodeName, NodePolicy, RetryPolicy};

mod fingerprint;
mod node;
mod routing;

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
    /// Python blocks may load (`Engine::trust_code`).
    pub(crate) trust_code: bool,
    /// A node no path reaches is an error, not a warning (`Engine::strict`).
    pub(crate) strict: bool,
    /// What the operator grants (`Engine::allow_read` and its kin).
    pub(crate) grants: Arc<crate::grants::Grants>,
    /// The folders of the files loading this one as a subgraph: it may use them too.
    pub(crate) folders: Vec<PathBuf>,
    /// `base_dir` is the agent's own folder (it was loaded from a file, not a string).
    pub(crate) own_folder: bool,
}

/// The subgraph files of one load, by canonical path.
pub(crate) type Children = Rc<RefCell<HashMap<PathBuf, Result<Loaded, LoadError>>>>;

/// How many nodes one file may declare.
pub(crate) const MAX_NODES: usize = 4_096;
/// How deep `type: subgraph` files may nest (a file, its child, the child's child …).
pub(crate) const MAX_SUBGRAPH_DEPTH: usize = 16;
/// How many candidate names "did you mean" compares, over a whole file: beyond it, problems
/// come without a suggestion (so a file of thousands of misspelled targets loads in linear
/// time).
pub(crate) const MAX_SUGGESTION_WORK: usize = 200_000;

/// A checkpoint store by name: what a file's `config.checkpointer` names, and what `tea --store`
/// takes (`memory`, `sled:PATH`, `dir:PATH`, `postgres://…`).
///
/// ```
/// use tea_yaml::StoreSpec;
///
/// assert_eq!(StoreSpec::parse("sled:.tea/store"), Ok(StoreSpec::Sled(".tea/store".into())));
/// assert_eq!(StoreSpec::parse("memory").unwrap().to_string(), "memory");
/// // A PostgreSQL URL is shown without its password.
/// let spec = StoreSpec::parse("postgres://me:secret@db.example/tea").unwrap();
/// assert_eq!(spec.to_string(), "postgres://…@db.example/tea");
/// assert!(StoreSpec::parse("redis://x").is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreSpec {
    /// `memory`: threads live as long as the process.
    Memory,
    /// `sled:PATH` (`{ sled: PATH }` in a `config`): the embedded on-disk store.
    Sled(PathBuf),
    /// `dir:PATH`: one file per checkpoint (a `config` names it as `checkpoint_dir`).
    Dir(PathBuf),
    /// `postgres://…` or `postgresql://…` (`{ postgres: URL }` in a `config`): PostgreSQL. The
    /// URL as given; a `tea --store` URL may end in `?schema=NAME`.
    Postgres(String),
}

impl StoreSpec {
    /// Parses a store name: `memory`, `sled:PATH`, `dir:PATH`, `postgres://…` or
    /// `postgresql://…`. The error says what is wrong and what is accepted.
    pub fn parse(text: &str) -> Result<StoreSpec, String> {
        let path = |rest: &str, kind: &str| {
            if rest.is_empty() {
                Err(format!("`{kind}:` needs a path, as in `{kind}:.tea/store`"))
            } else {
                Ok(PathBuf::from(rest))
            }
        };
        if text == "memory" {
            Ok(StoreSpec::Memory)
        } else if let Some(rest) = text.strip_prefix("sled:") {
            path(rest, "sled").map(StoreSpec::Sled)
        } else if let Some(rest) = text.strip_prefix("dir:") {
            path(rest, "dir").map(StoreSpec::Dir)
        } else if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            Ok(StoreSpec::Postgres(text.to_owned()))
        } else {
            Err(format!("unknown store `{text}`: use `memory`, `sled:PATH`, `dir:PATH` or `postgres://…`"))
        }
    }
}

impl std::fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreSpec::Memory => f.write_str("memory"),
            StoreSpec::Sled(path) => write!(f, "sled:{}", path.display()),
            StoreSpec::Dir(path) => write!(f, "dir:{}", path.display()),
            // The URL may carry a password: show only where it points.
            StoreSpec::Postgres(url) => {
                let rest = url.split_once("://").map_or(url.as_str(), |p| p.1);
                let host = rest.rsplit_once('@').map_or(rest, |p| p.1);
                write!(f, "postgres://…@{}", host.split_once('?').map_or(host, |p| p.0))
            }
        }
    }
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

pub(crate) const TOP_KEYS: &[&str] = &[
    "name",
    "description",
    "state",
    "state_schema",
    "variables",
    "settings",
    "config",
    "nodes",
    "edges",
    "initial_state",
    "version",
    "observability",
    // The Edge Agent's breakpoints at the top level, as `config.interrupt_before/after`.
    "interrupt_before",
    "interrupt_after",
    // What `validate.extraction` checks (actions/extraction/load.rs).
    "extraction_schema",
    "validation_constraints",
    "semantic_probes",
    "validation_logging",
];
/// The Edge Agent's top-level keys that tea accepts and ignores, with what tea does instead
/// (a warning says so).
pub(crate) const EDGE_AGENT_TOP_KEYS: &[(&str, &str)] = &[
    ("data", "tea's templates read `variables`; put reusable text there"),
    ("imports", "tea loads no action modules from a file; register actions with `Engine::action`"),
    ("input_schema", "tea checks the input against `state` instead"),
    ("output_schema", "tea checks updates against `state` instead"),
    ("error_policy", "a failing node fails the run; give it `retry:` (The Edge Agent's keys) to retry it"),
    ("allow_cycles", "tea always allows cycles, bounded by `config.recursion_limit`"),
    ("checkpoint", "tea checkpoints with `config.checkpoint_dir` or `config.checkpointer`"),
];
/// `settings:` sections, and the keys of each (defaults of the network actions).
pub(crate) const SETTINGS: [(&str, &[&str]); 2] = [
    (
        "llm",
        &[
            "base_url",
            "api_base",
            "api_key",
            "provider",
            "deployment",
            "shell_provider",
            "shell_providers",
            "model",
            "temperature",
            "max_tokens",
            "timeout",
            "retry",
            "max_retries",
        ],
    ),
    ("notify", &["url", "headers", "timeout", "retry"]),
];
/// The Edge Agent's trace settings: tea writes its trace as `tea run --trace` does.
pub(crate) const TRACE_SETTINGS: [&str; 3] = ["auto_trace", "trace_exporter", "trace_file"];
/// The Edge Agent's `settings:` keys that tea accepts and ignores (a warning says so), and
/// what each is.
pub(crate) const EDGE_AGENT_SETTINGS: &[(&str, &str)] = &[
    ("auth", "request authentication of its server"),
    ("cache", "its cache backends"),
    ("dspy", "DSPy"),
    ("execution", "its execution modes"),
    ("graph", "its graph databases"),
    ("interview", "its interactive interview prompts"),
    ("llamaindex", "LlamaIndex"),
    ("ltm", "its long-term memory backends"),
    ("memory", "its memory backends"),
    ("model", "an LLM default, read by its older actions; tea reads `settings.llm.model`"),
    ("opik", "Opik tracing"),
    ("parallel", "its parallel strategies (processes, remote hosts)"),
    ("progress", "its progress display"),
    ("prolog", "its Prolog runtime"),
    ("session", "its session stores"),
    ("temperature", "an LLM default, read by its older actions; tea reads `settings.llm.temperature`"),
    ("textgrad", "TextGrad"),
];
/// The Edge Agent's `settings.llm` keys that tea accepts and ignores (a warning says so), and
/// what each is.
pub(crate) const EDGE_AGENT_LLM_SETTINGS: &[(&str, &str)] = &[
    ("backend", "local models through llama.cpp"),
    ("chat_format", "local models' chat template"),
    ("default_model", "a default model of its older actions; tea's is `settings.llm.model`"),
    ("default_provider", "a default provider of its older actions; tea's is `settings.llm.provider`"),
    ("model_path", "local models through llama.cpp"),
    ("n_ctx", "local models through llama.cpp"),
    ("n_gpu_layers", "local models through llama.cpp"),
    ("n_threads", "local models through llama.cpp"),
];
pub(crate) const CONFIG_KEYS: &[&str] = &[
    "interrupt_before",
    "interrupt_after",
    "checkpoint_dir",
    "checkpointer",
    "checkpoint",
    "recursion_limit",
    "raise_exceptions",
    "max_execution_time",
];
pub(crate) const NODE_KEYS: &[&str] = &[
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
    "condition",
    "max_iterations",
    "body",
    "retry",
    "cache",
];
/// The Edge Agent's node keys that tea accepts and ignores (as its engines ignore most of them),
/// with what tea does instead: a warning says so, once per key.
pub(crate) const EDGE_AGENT_NODE_KEYS: &[(&str, &str)] = &[
    ("next", "tea routes by `goto:`, `edges`, or else to the next node of the list"),
    (
        "params",
        "an action's arguments are its `with:` (`params:` is read as `with:` on a node with an action and no `with:`)",
    ),
    (
        "config",
        "an action's arguments are its `with:` (`config:` is read as `with:` on a node with an action and no `with:`)",
    ),
    ("outputs", "an action's result goes to the state by `output:`"),
    ("inputs", "a node reads the whole state"),
    ("streams", "tea's parallel branches pass data through the state, not through pipes"),
    ("metadata", "tea keeps no node metadata"),
    ("fallback", "a node that fails fails the run (its error names the node); `retry:` retries it"),
    (
        "interrupt_after",
        "its engines read it only to refuse it on stream nodes; a breakpoint after a node is `interrupt: after` \
         or `config.interrupt_after`",
    ),
    (
        "interrupt_before",
        "its engines never read it; a breakpoint before a node is `interrupt: before` or `config.interrupt_before`",
    ),
    ("prompt", "its engines never read it; a prompt goes in `llm.call`'s `with: { messages }`"),
    (
        "_render_items",
        "a drawing hint its `tea from dot` writes for its renderer; `tea draw` draws the node as it runs",
    ),
];

/// The most iterations a `type: while_loop` node may allow (The Edge Agent's bound).
pub(crate) const MAX_LOOP_ITERATIONS: i64 = 1_000;
/// The keys of `settings.llm` and `settings.notify` whose values may read `secrets` (they are
/// sent out: an API key, a webhook's address and headers).
pub(crate) const SETTINGS_SENDING: [&[&str]; 2] = [&["api_key"], &["url", "headers"]];

/// The arguments of `action` whose values may read `secrets`: those it sends out.
pub(crate) fn sending_keys(action: &Action) -> &'static [&'static str] {
    match action {
        #[cfg(feature = "net")]
        Action::Net(net) => net.sending_keys(),
        #[cfg(feature = "net")]
        Action::Service(service) => service.sending_keys(),
        _ => &[],
    }
}

/// The keys of a `dynamic_parallel` node's `parallel_config:` (The Edge Agent's nested form).
pub(crate) const PARALLEL_CONFIG_KEYS: &[&str] = &["max_concurrency", "fail_fast"];
/// The keys of a `dynamic_parallel` node's `action:` (The Edge Agent's action mode).
pub(crate) const ITEM_ACTION_KEYS: &[&str] = &["uses", "with", "output"];
pub(crate) const EDGE_KEYS: &[&str] = &["from", "to", "when", "condition", "type", "parallel", "fan_in", "targets"];
/// The Edge Agent's edge keys that tea accepts and ignores, with what tea does instead.
pub(crate) const EDGE_AGENT_EDGE_KEYS: &[(&str, &str)] = &[
    ("parallel_strategy", "tea runs a fan-out's branches as threads of this process"),
    ("stream_mode", "tea's branches pass data through the state, not through pipes"),
];
pub(crate) const START: [&str; 2] = ["__start__", "START"];
/// The node a fan-out from the entry starts at: it does nothing and fans out.
pub(crate) const START_FORK: &str = "__tea_start";
/// The file name of the cached load of a subgraph file that could not be read.
pub(crate) const READ_FAILED: &str = "\0unreadable";
pub(crate) const END: [&str; 2] = ["__end__", "END"];

pub(crate) struct Loader<'a> {
    pub(crate) env: &'a Env<'a>,
    /// The file's text, for columns inside `run:` blocks.
    pub(crate) source: &'a str,
    /// The grants of the agent being loaded: paths and hosts written in the file are checked
    /// against them at load.
    pub(crate) grants: crate::grants::AgentGrants,
    pub(crate) problems: Vec<Problem>,
    /// The Edge Agent's keys accepted with a warning, and the keys warned about (each once).
    pub(crate) warnings: Vec<Problem>,
    pub(crate) warned: std::collections::HashSet<String>,
    /// `settings.shell_providers` and `settings.llm.shell_providers` (the latter wins).
    #[cfg_attr(not(feature = "net"), allow(dead_code))]
    pub(crate) shells: Map<String, Value>,
    /// `settings.llm.provider` and `settings.llm.shell_provider`, as written.
    #[cfg_attr(not(feature = "net"), allow(dead_code))]
    pub(crate) settings_llm: [Option<Node>; 2],
    pub(crate) templates: Templates,
    pub(crate) lua: Chunks,
    pub(crate) python: crate::lang::python::Loader,
    /// The keys `settings.llm` and `settings.notify` give (defaults of the network actions).
    pub(crate) settings_keys: [Vec<String>; 2],
    /// `settings.auto_trace: true` with its exporter.
    pub(crate) auto_trace: Option<crate::ir::AutoTrace>,
    /// `settings.rate_limiters`: each limiter's time between calls.
    pub(crate) rate_limiters: HashMap<String, std::time::Duration>,
    /// `settings.a2a`: the agent's id and namespace among the process's agents.
    pub(crate) a2a: crate::actions::a2a::A2aSettings,
    /// The `language:` of the node whose `steps:` are read now (`Some(true)`: Python), the
    /// language of those that name none.
    pub(crate) steps_language: Option<bool>,
    /// Candidate names "did you mean" may still compare (see [`MAX_SUGGESTION_WORK`]).
    pub(crate) suggestion_work: usize,
    /// Templates read now are arguments that send secrets out: they may read `secrets`.
    pub(crate) sending: bool,
    /// The state's declared keys (empty: the agent declares none), which a node's
    /// `cache: { reads: [...] }` names.
    pub(crate) state_keys: Vec<String>,
    /// The file's `validate.extraction` keys, compiled.
    pub(crate) extraction: crate::actions::extraction::Config,
    /// `retry.loop`'s calls: where each `correct:` is written, its node, the node it names.
    pub(crate) calls: Vec<(Pos, String, String)>,
    /// The same calls resolved (caller, callee by index): ways into the callee for the graph
    /// checks.
    pub(crate) call_edges: Vec<(usize, usize)>,
    /// `settings.agents`, the agents of the `agent.*` actions.
    pub(crate) crew: Arc<Vec<(String, crate::actions::crew::AgentDef)>>,
}

/// A node as read, before routing is resolved.
/// How a node hands over: its breakpoints, its `goto:`, its `fan_in: true` marker.
pub(crate) struct Flow<'n> {
    pub(crate) interrupt_before: bool,
    pub(crate) interrupt_after: bool,
    pub(crate) goto: Option<Vec<(Cond, &'n Node)>>,
    pub(crate) marked_fan_in: Option<Pos>,
}

pub(crate) struct Draft<'n> {
    pub(crate) name: String,
    pub(crate) pos: Pos,
    pub(crate) exec: Exec,
    /// `retry:`, `timeout:`, `cache:`.
    pub(crate) policy: Option<NodePolicy>,
    pub(crate) goto: Option<Vec<(Cond, &'n Node)>>,
    pub(crate) interrupt_before: bool,
    pub(crate) interrupt_after: bool,
    /// `fan_in: true` (The Edge Agent's marker): where it is written.
    pub(crate) marked_fan_in: Option<Pos>,
    /// A `type: dynamic_parallel` node: its `fan_in` and the nodes each item runs.
    pub(crate) dynamic: Option<Dynamic<'n>>,
    /// A node a `dynamic_parallel` node runs per item: where it goes next.
    pub(crate) after: Option<After>,
    /// A node a `dynamic_parallel` node runs per item: that node (by index among the drafts),
    /// and whether this is the item's first step.
    pub(crate) item_of: Option<(usize, bool)>,
}

/// What a `type: dynamic_parallel` node runs per item, and where the items meet.
pub(crate) struct Dynamic<'n> {
    pub(crate) fan_in: &'n Node,
    /// The item's nodes in order (`steps:`, or the one node of `action:`).
    pub(crate) steps: Vec<Draft<'n>>,
}

/// Where a per-item node of a `dynamic_parallel` node goes: its next step (by index among the
/// drafts), or the fan-in of the `dynamic_parallel` node (by index).
#[derive(Clone, Copy)]
pub(crate) enum After {
    Node(usize),
    Join(usize),
}

/// A fan-out as read: its heads, its fan-in if named, where it is declared.
pub(crate) type ForkDraft = (Vec<NodeIx>, Option<NodeIx>, Pos);

/// An edge as read.
pub(crate) struct EdgeDraft<'n> {
    pub(crate) from: &'n Node,
    /// Where the edge is written.
    pub(crate) pos: Pos,
    pub(crate) kind: EdgeKind<'n>,
}

pub(crate) enum EdgeKind<'n> {
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
    let mut variables = match variables {
        Some(Value::Object(map)) => map,
        _ => Map::new(),
    };
    // `extraction_schema.guide_extraction: true`: The Edge Agent's extraction prompt, made
    // from the schema and the rules' comments, in `variables.extraction_prompt`.
    if let Value::Object(file) = root.to_json() {
        if let Some(prompt) = crate::actions::extraction::Schema::guide(&file) {
            variables.entry("extraction_prompt").or_insert(Value::String(prompt));
        }
    }
    let secret_pairs: Vec<(String, String)> =
        env.secrets.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect();
    let mut grants = crate::grants::AgentGrants::new(env.grants.clone(), env.base_dir.clone(), secret_pairs);
    grants.parents = env.folders.clone();
    if !env.own_folder {
        grants.drop_own_folder();
    }
    if let Some(settings) = root.as_map().and_then(|m| m.iter().find(|(k, _)| k.as_str() == Some("settings"))) {
        settings_hosts(&settings.1.to_json(), &mut grants.settings_hosts);
    }
    let mut loader = Loader {
        env,
        source: text,
        grants,
        problems: Vec::new(),
        warnings: Vec::new(),
        warned: Default::default(),
        shells: Map::new(),
        settings_llm: [None, None],
        templates: Templates::new(),
        lua: Chunks::new(Arc::new(variables.clone()), env.limits),
        python: crate::lang::python::Loader::new(&env.file, Arc::new(variables.clone()), env.trust_code),
        settings_keys: [Vec::new(), Vec::new()],
        auto_trace: None,
        steps_language: None,
        rate_limiters: HashMap::new(),
        a2a: Default::default(),
        suggestion_work: MAX_SUGGESTION_WORK,
        sending: false,
        state_keys: Vec::new(),
        extraction: Default::default(),
        calls: Vec::new(),
        call_edges: Vec::new(),
        crew: Arc::default(),
    };
    for d in duplicates {
        loader.problem(d.pos, d.message);
    }
    for invalid in &env.grants.invalid {
        loader.problem(Pos { line: 1, column: 1 }, format!("a grant of the engine does not parse: {invalid}"));
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

/// The hosts of the URLs a file's `settings` name (reached with
/// `Engine::allow_net_from_settings`).
pub(crate) fn settings_hosts(value: &Value, out: &mut Vec<crate::grants::HostGrant>) {
    match value {
        Value::String(s) if s.contains("://") && !s.contains("{{") => {
            if let Ok(host) = crate::grants::HostGrant::parse(s) {
                out.push(host);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| settings_hosts(v, out)),
        Value::Object(map) => map.values().for_each(|v| settings_hosts(v, out)),
        _ => {}
    }
}

impl<'a> Loader<'a> {
    /// A path written in the file (at `pos`, for `what`), checked against the agent's grants:
    /// the path as written under the agent's folder, or `None` with a problem naming the grant
    /// that would allow it. (What opens it confines it again then.)
    pub(crate) fn confined(
        &mut self,
        pos: Pos,
        what: &str,
        path: &str,
        access: crate::grants::Access,
    ) -> Option<PathBuf> {
        match self.grants.confine(path, access) {
            Ok(_) => Some(crate::grants::files::resolve(&self.env.base_dir, path)),
            Err(e) => {
                self.problem(pos, format!("{what}: {e}"));
                None
            }
        }
    }

    /// "did you mean" among the file's node names: within the file's budget of comparisons.
    pub(crate) fn hint_node(&mut self, word: &str, index: &HashMap<String, usize>) -> String {
        if index.len() > self.suggestion_work {
            self.suggestion_work = 0;
            return String::new();
        }
        self.suggestion_work -= index.len();
        suggest(word, index.keys().map(String::as_str))
    }

    /// Compiles expression `source` (written at `pos`); one that reads `secrets` where they
    /// are not sent out is a problem.
    pub(crate) fn expr_at(&mut self, pos: Pos, source: &str) -> Result<template::ExprId, String> {
        let id = self.templates.expr(source)?;
        self.secrets_at(pos, source);
        Ok(id)
    }

    /// Compiles template `source` (written at `pos`), as [`expr_at`](Self::expr_at).
    pub(crate) fn template_at(&mut self, pos: Pos, source: &str) -> Result<template::TplId, String> {
        let id = self.templates.template(source)?;
        self.secrets_at(pos, source);
        Ok(id)
    }

    pub(crate) fn secrets_at(&mut self, pos: Pos, source: &str) {
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
    pub(crate) fn sending_tree(&mut self, node: &Node, sending: &[&str]) -> Tree {
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

    pub(crate) fn problem(&mut self, pos: Pos, message: impl Into<String>) {
        self.problems.push(Problem { message: message.into(), line: pos.line.max(1), column: pos.column.max(1) });
    }

    /// Accepts one of The Edge Agent's keys, `key` (as `settings.ltm`, or `params` for a node
    /// key), with a warning that says what tea does instead: once per key in a file.
    pub(crate) fn warn(&mut self, pos: Pos, key: &str, message: impl Into<String>) {
        if self.warned.insert(key.to_owned()) {
            self.warnings.push(Problem { message: message.into(), line: pos.line.max(1), column: pos.column.max(1) });
        }
    }

    /// The entries of mapping `node` (`what` names it in messages), each key checked against
    /// `allowed`. `None` if `node` is not a mapping.
    pub(crate) fn fields<'n>(
        &mut self,
        node: &'n Node,
        what: &str,
        allowed: &[&str],
    ) -> Option<HashMap<&'n str, &'n Node>> {
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

    pub(crate) fn string<'n>(&mut self, node: &'n Node, what: &str) -> Option<&'n str> {
        match node.as_str() {
            Some(s) => Some(s),
            None => {
                self.problem(node.pos, format!("{what} must be a string, not {}", node.what()));
                None
            }
        }
    }

    pub(crate) fn file(&mut self, root: &Node, variables: Map<String, Value>) -> Option<Loaded> {
        let known: Vec<&str> = TOP_KEYS.iter().copied().chain(EDGE_AGENT_TOP_KEYS.iter().map(|(k, _)| *k)).collect();
        let mut top = self.fields(root, "the agent file", &known)?;
        for (key, instead) in EDGE_AGENT_TOP_KEYS {
            if let Some(node) = top.remove(key) {
                let at = root
                    .as_map()
                    .and_then(|m| m.iter().find(|(k, _)| k.as_str() == Some(key)))
                    .map_or(node.pos, |(k, _)| k.pos);
                self.warn(at, key, format!("top-level `{key}` (The Edge Agent's) is ignored: {instead}"));
            }
        }
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
        self.state_keys = schema.names().map(str::to_owned).collect();
        // Settings come before the nodes: their keys are the network actions' defaults.
        let (initial_state, found) = crate::state::initial::read(top.get("initial_state"), top.get("version"), &schema);
        for (pos, message) in found {
            self.problem(pos, message);
        }
        let [settings_llm, settings_notify] = match top.get("settings") {
            Some(node) => self.settings(node),
            None => [None, None],
        };
        if let Some(node) = top.get("observability") {
            self.observability(node);
        }
        self.extraction = self.extraction_top(&top);
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
        if items.len() > MAX_NODES {
            self.problem(
                items[MAX_NODES].pos,
                format!("the agent has more than {MAX_NODES} nodes (the limit); split it into subgraph files"),
            );
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
            let Some(list) = config.get(key).or_else(|| top.get(key)) else { continue };
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
        // A fan-out from the entry (The Edge Agent's `from: __start__` with `parallel:`): the
        // engine starts at one node, so a node of the engine's own, `__tea_start`, does nothing
        // and fans out.
        let start_fans_out = edges.iter().any(|e| {
            matches!(e.kind, EdgeKind::Parallel { .. })
                && e.from.scalar_text().is_some_and(|f| START.contains(&f.as_str()))
        });
        if start_fans_out {
            let pos = edges.iter().find(|e| matches!(e.kind, EdgeKind::Parallel { .. })).map_or(root.pos, |e| e.pos);
            if let Some(&i) = index.get(START_FORK) {
                self.problem(
                    drafts[i].pos,
                    format!("node name `{START_FORK}` is the engine's own (the entry's fan-out)"),
                );
            }
            index.insert(START_FORK.to_owned(), drafts.len());
            drafts.push(Draft {
                name: START_FORK.to_owned(),
                pos,
                exec: Exec::Noop,
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
        self.call_edges = self.check_calls(&drafts, &index);
        let (start, nodes) = self.routing(&drafts, declared, &index, &edges, &dynamic_forks);

        // Config: stores and limits.
        let mut store = None;
        let mut checkpoint_dir = None;
        let mut checkpoint = None;
        let mut recursion_limit = None;
        if let Some(dir) = config.get("checkpoint_dir") {
            if let Some(d) = self.string(dir, "`config.checkpoint_dir`") {
                let d = d.to_owned();
                checkpoint_dir = self.confined(dir.pos, "`config.checkpoint_dir`", &d, crate::grants::Access::Write);
            }
        }
        if let Some(c) = config.get("checkpointer") {
            store = self.store(c);
        }
        if let Some(c) = config.get("checkpoint") {
            if let Some(p) = self.string(c, "`config.checkpoint`") {
                let p = p.to_owned();
                checkpoint = self.confined(c.pos, "`config.checkpoint`", &p, crate::grants::Access::Read);
            }
        }
        if let Some(r) = config.get("recursion_limit") {
            match r.kind {
                Kind::Int(n) if n > 0 => recursion_limit = Some(n as usize),
                _ => self.problem(r.pos, "`config.recursion_limit` must be a positive integer"),
            }
        }
        if let Some(n) = config.get("max_execution_time") {
            self.warn(
                n.pos,
                "config.max_execution_time",
                "`config.max_execution_time` is ignored: tea bounds a run by `config.recursion_limit` (steps), and a \
                 caller stops it by dropping or cancelling the run",
            );
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
        let fingerprint = tea_runtime::__private::fingerprint(fingerprint::describe(&name, &nodes, &start).as_bytes());
        let schema_fingerprint = tea_runtime::__private::fingerprint(schema.describe().as_bytes());
        let inner = LoadedAgent {
            name,
            grants: Arc::new(self.grants.clone()),
            a2a: std::mem::take(&mut self.a2a),
            #[cfg(feature = "net")]
            vectors: Default::default(),
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
                .filter(|(_, v)| v.len() >= crate::run::secrets::MIN_SECRET_LEN)
                .collect(),
            settings_llm,
            settings_notify,
            checkpoint_dir: checkpoint_dir.clone(),
            last_checkpoint: Mutex::new(String::new()),
            fingerprint,
            schema_fingerprint,
            initial_state,
            auto_trace: self.auto_trace.take(),
            jumps: self.call_edges.clone(),
            memory: Default::default(),
            warnings: {
                let mut warnings = std::mem::take(&mut self.warnings);
                warnings.sort_by_key(|p| (p.line, p.column));
                warnings
            },
            #[cfg(feature = "net")]
            shells: crate::actions::net::llm::Shells {
                configured: std::mem::take(&mut self.shells),
                trusted: self.env.trust_code,
            },
        };
        Some(Loaded {
            graph: YamlGraph { agent: Arc::new(inner), asynchronous: false, cancel: None },
            store,
            checkpoint_dir,
            checkpoint,
            recursion_limit,
        })
    }

    /// `settings: { llm: {…}, notify: {…} }`: each section's values may be templates. The
    /// Edge Agent's other settings are refused by name, saying what they are.
    pub(crate) fn settings(&mut self, node: &Node) -> [Option<Tree>; 2] {
        let mut out = [None, None];
        if matches!(node.kind, Kind::Null) {
            return out;
        }
        let Some(entries) = node.as_map() else {
            self.problem(node.pos, format!("`settings` must be a mapping, not {}", node.what()));
            return out;
        };
        let mut sections: HashMap<&str, &Node> = HashMap::new();
        for (key, value) in entries {
            let Some(name) = key.as_str() else {
                self.problem(key.pos, format!("the keys of `settings` are names, not {}", key.what()));
                continue;
            };
            if SETTINGS.iter().any(|(n, _)| *n == name) || TRACE_SETTINGS.contains(&name) {
                sections.insert(name, value);
            } else if name == "rate_limiters" {
                self.rate_limiters(value);
            } else if name == "a2a" {
                self.a2a_settings(value);
            } else if name == "agents" {
                self.crew_agents(value);
            } else if name == "shell_providers" {
                self.shell_providers(value, "settings.shell_providers");
            } else if let Some((_, why)) = EDGE_AGENT_SETTINGS.iter().find(|(k, _)| *k == name) {
                self.warn(
                    key.pos,
                    &format!("settings.{name}"),
                    format!("`settings.{name}` ({why}) is The Edge Agent's and is ignored: tea has no such part"),
                );
            } else {
                let hint = suggest(name, SETTINGS.iter().map(|(n, _)| *n));
                self.problem(key.pos, format!("unknown key `{name}` in `settings`{hint}"));
            }
        }
        self.auto_trace = self.trace_settings(&sections);
        for (i, (section, keys)) in SETTINGS.iter().enumerate() {
            let Some(value) = sections.get(section) else { continue };
            if matches!(value.kind, Kind::Null) {
                continue;
            }
            if *section == "llm" {
                for (key, v) in value.as_map().unwrap_or_default() {
                    let Some(name) = key.as_str() else { continue };
                    if let Some((_, why)) = EDGE_AGENT_LLM_SETTINGS.iter().find(|(k, _)| *k == name) {
                        self.warn(
                            key.pos,
                            &format!("settings.llm.{name}"),
                            format!(
                                "`settings.llm.{name}` ({why}) is ignored: tea's LLM actions call the provider's \
                                 endpoint (`provider`, `base_url`, `model`)"
                            ),
                        );
                    } else if name == "shell_providers" {
                        self.shell_providers(v, "settings.llm.shell_providers");
                    } else if name == "provider" {
                        self.settings_llm[0] = Some(v.clone());
                    } else if name == "shell_provider" {
                        self.settings_llm[1] = Some(v.clone());
                    }
                }
            }
            let keys: Vec<&str> = if *section == "llm" {
                keys.iter().copied().chain(EDGE_AGENT_LLM_SETTINGS.iter().map(|(k, _)| *k)).collect()
            } else {
                keys.to_vec()
            };
            let Some(fields) = self.fields(value, &format!("`settings.{section}`"), &keys) else { continue };
            // Only tea's own keys are defaults of the actions (the ignored ones and the shell
            // providers, read above, are not arguments).
            let ignored = |k: &str| k == "shell_providers" || EDGE_AGENT_LLM_SETTINGS.iter().any(|(n, _)| *n == k);
            self.settings_keys[i] = fields.keys().filter(|k| !ignored(k)).map(|k| (*k).to_owned()).collect();
            let mut tree = self.sending_tree(value, SETTINGS_SENDING[i]);
            if let Tree::Map(entries) = &mut tree {
                entries.retain(|(k, _)| !ignored(k));
            }
            out[i] = Some(tree);
        }
        out
    }

    /// `observability:` (The Edge Agent's Rust engine): `enabled`, `level` (`debug` or `info`:
    /// tea's trace records every step), `handlers` (one: `console`, or `file` with `path`), which
    /// tea follows as it does `settings.auto_trace`; without a handler, the events are the run's
    /// stream, as there they are its API's. Its in-memory event log's `buffer_size` and a
    /// handler's `verbose` are refused.
    pub(crate) fn observability(&mut self, node: &Node) {
        use crate::ir::AutoTrace;
        if matches!(node.kind, Kind::Null) {
            return;
        }
        let Some(f) = self.fields(node, "`observability`", &["enabled", "level", "buffer_size", "handlers"]) else {
            return;
        };
        let enabled = match f.get("enabled").map(|n| (n, &n.kind)) {
            None => false,
            Some((_, Kind::Bool(b))) => *b,
            Some((n, _)) => {
                self.problem(n.pos, "`observability.enabled` must be true or false");
                false
            }
        };
        if let Some(n) = f.get("buffer_size") {
            self.warn(
                n.pos,
                "observability.buffer_size",
                "`observability.buffer_size` (the size of The Edge Agent's in-memory event log) is ignored: tea keeps \
                 no such log; a run's events are its stream (`Agent::stream`, `tea run --stream`) and its trace",
            );
        }
        if let Some(n) = f.get("level") {
            match n.as_str() {
                Some("debug" | "info") => {}
                _ => self.problem(
                    n.pos,
                    "`observability.level`: tea's trace records every step (`debug` or `info`); it has no `warn` or \
                     `error` filter",
                ),
            }
        }
        let mut chosen = None;
        if let Some(list) = f.get("handlers") {
            let Some(items) = list.as_seq() else {
                self.problem(
                    list.pos,
                    "`observability.handlers` is a list of `{ type: console }` or `{ type: file, path }`",
                );
                return;
            };
            if items.len() > 1 {
                self.problem(items[1].pos, "tea's trace goes to one place: one `observability` handler");
            }
            for item in items.iter().take(1) {
                let Some(h) = self.fields(item, "an `observability` handler", &["type", "path", "verbose"]) else {
                    continue;
                };
                if let Some(v) = h.get("verbose") {
                    self.warn(
                        v.pos,
                        "observability.handlers.verbose",
                        "`verbose` of an `observability` handler is ignored: tea's console trace is one line per step \
                         (as `tea run -v`)",
                    );
                }
                match (h.get("type").and_then(|t| t.as_str()), h.get("path")) {
                    (Some("console"), None) => chosen = Some(AutoTrace::Console),
                    (Some("file"), Some(p)) => match p.as_str() {
                        Some(path) if !path.is_empty() => {
                            let what = "`path` of a `file` handler";
                            chosen = self.confined(p.pos, what, path, crate::grants::Access::Write).map(AutoTrace::File)
                        }
                        _ => self.problem(p.pos, "`path` of a `file` handler is a file name"),
                    },
                    (Some("file"), None) => self.problem(item.pos, "a `file` handler needs `path`"),
                    (Some("console"), Some(p)) => self.problem(p.pos, "`path` goes with a `file` handler"),
                    _ => self.problem(
                        item.pos,
                        "an `observability` handler is `{ type: console }` or `{ type: file, path }`",
                    ),
                }
            }
        }
        if !enabled {
            return;
        }
        if self.auto_trace.is_some() {
            self.problem(node.pos, "`observability` and `settings.auto_trace` both say where the trace goes; keep one");
            return;
        }
        // Without a handler The Edge Agent keeps the events for its API only: tea's are the
        // run's stream.
        self.auto_trace = chosen;
    }

    /// `settings.shell_providers` (or `settings.llm.shell_providers`, `what`): command lines
    /// `llm.call` runs with `provider: shell`, by name, each `{ command, args, stdin_mode,
    /// timeout, env }`; a later one of the same name wins.
    pub(crate) fn shell_providers(&mut self, node: &Node, what: &str) {
        if matches!(node.kind, Kind::Null) {
            return;
        }
        let Some(entries) = node.as_map() else {
            self.problem(node.pos, format!("`{what}` maps names to `{{ command, args }}`, not {}", node.what()));
            return;
        };
        for (key, value) in entries {
            let Some(name) = key.scalar_text() else { continue };
            #[cfg(feature = "net")]
            if let Err(e) = crate::actions::net::llm::check_shell_config(&format!("`{what}.{name}`"), &value.to_json())
            {
                self.problem(value.pos, e);
                continue;
            }
            self.shells.insert(name, value.to_json());
        }
    }

    /// `settings.a2a: { agent_id, namespace, enabled }`: who the agent is among the process's
    /// agents (`a2a.*`). `enabled` is read and changes nothing: the `a2a.*` actions are always
    /// there.
    pub(crate) fn a2a_settings(&mut self, node: &Node) {
        if matches!(node.kind, Kind::Null) {
            return;
        }
        let Some(f) = self.fields(node, "`settings.a2a`", &["agent_id", "namespace", "enabled"]) else { return };
        for key in ["agent_id", "namespace"] {
            let Some(value) = f.get(key) else { continue };
            match value.as_str() {
                Some(text) if !text.is_empty() && !text.contains("{{") => {
                    if key == "agent_id" {
                        self.a2a.agent_id = text.to_owned();
                    } else {
                        self.a2a.namespace = text.to_owned();
                    }
                }
                _ => self.problem(value.pos, format!("`settings.a2a.{key}` is a name written in the file")),
            }
        }
        if let Some(enabled) = f.get("enabled") {
            if !matches!(enabled.kind, Kind::Bool(_)) {
                self.problem(enabled.pos, "`settings.a2a.enabled` must be true or false");
            }
        }
    }

    /// `settings.rate_limiters: { NAME: { rpm: N } | { rps: N } }`: the limiters
    /// `ratelimit.wrap` names.
    pub(crate) fn rate_limiters(&mut self, node: &Node) {
        if matches!(node.kind, Kind::Null) {
            return;
        }
        let Some(entries) = node.as_map() else {
            self.problem(
                node.pos,
                format!("`settings.rate_limiters` maps names to `{{ rpm: N }}` or `{{ rps: N }}`, not {}", node.what()),
            );
            return;
        };
        for (key, value) in entries {
            let Some(name) = key.scalar_text() else { continue };
            let what = format!("rate limiter `{name}`");
            let Some(fields) = self.fields(value, &what, &["rpm", "rps"]) else { continue };
            let mut rate = |k: &str| -> Option<f64> {
                let n = fields.get(k)?;
                match n.kind {
                    Kind::Int(v) if v > 0 => Some(v as f64),
                    Kind::Float(v) if v > 0.0 && v.is_finite() => Some(v),
                    _ => {
                        self.problem(n.pos, format!("`{k}` of {what} must be a positive number"));
                        None
                    }
                }
            };
            let (rpm, rps) = (rate("rpm"), rate("rps"));
            if rpm.is_none() && rps.is_none() && !fields.contains_key("rpm") && !fields.contains_key("rps") {
                self.problem(value.pos, format!("{what} needs `rpm` or `rps`"));
                continue;
            }
            self.rate_limiters.insert(name, crate::actions::limiter_interval(rpm, rps));
        }
    }

    /// `settings.auto_trace`, `trace_exporter` (`console`, the default, or `file`) and
    /// `trace_file` (relative to the agent file's directory): The Edge Agent's trace of each run.
    pub(crate) fn trace_settings(&mut self, sections: &HashMap<&str, &Node>) -> Option<crate::ir::AutoTrace> {
        use crate::ir::AutoTrace;
        let on = match sections.get("auto_trace") {
            None => false,
            Some(n) => match n.kind {
                Kind::Bool(b) => b,
                _ => {
                    self.problem(n.pos, format!("`settings.auto_trace` must be true or false, not {}", n.what()));
                    false
                }
            },
        };
        let file = sections.get("trace_file").and_then(|n| self.string(n, "`settings.trace_file`").map(|f| (n, f)));
        let exporter =
            sections.get("trace_exporter").and_then(|n| self.string(n, "`settings.trace_exporter`").map(|e| (n, e)));
        if !on {
            for (key, node) in [("trace_exporter", exporter.map(|e| e.0)), ("trace_file", file.map(|f| f.0))] {
                if let Some(node) = node {
                    self.problem(
                        node.pos,
                        format!("`settings.{key}` goes with `settings.auto_trace: true`, which this file does not set"),
                    );
                }
            }
            return None;
        }
        match exporter {
            None | Some((_, "console")) => {
                if let Some((n, _)) = file {
                    self.problem(n.pos, "`settings.trace_file` goes with `trace_exporter: file`");
                }
                Some(AutoTrace::Console)
            }
            Some((n, "file")) => match file {
                Some((at, path)) if !path.is_empty() => self
                    .confined(at.pos, "`settings.trace_file`", path, crate::grants::Access::Write)
                    .map(AutoTrace::File),
                _ => {
                    self.problem(n.pos, "`trace_exporter: file` needs `settings.trace_file: PATH`");
                    None
                }
            },
            Some((n, other)) => {
                self.problem(
                    n.pos,
                    format!("`trace_exporter: {other}` is not supported by tea: its trace goes to the `console` or to a `file`"),
                );
                None
            }
        }
    }

    pub(crate) fn schema(&mut self, node: &Node) -> Schema {
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
                    let fields = self.fields(
                        value,
                        &format!("the declaration of state key `{name}`"),
                        &["type", "reducer", "description", "default", "properties", "items", "required"],
                    );
                    fields.and_then(|f| {
                        // The Edge Agent's JSON-Schema-like shapes of a key: documentation there
                        // as here.
                        for shape in ["properties", "items", "required"] {
                            if let Some(at) = f.get(shape) {
                                self.warn(
                                    at.pos,
                                    &format!("state {shape}"),
                                    format!(
                                        "`{shape}` of state key `{name}` is not checked (nor by The Edge Agent): tea \
                                         checks the key's `type`"
                                    ),
                                );
                            }
                        }
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

    pub(crate) fn type_name(&mut self, node: &Node, text: &str) -> Option<Type> {
        match Type::parse(text) {
            Some(ty) => Some(ty),
            None => {
                let hint = suggest(text, Type::NAMES);
                self.problem(node.pos, format!("unknown type `{text}`; types are {}{hint}", Type::NAMES.join(", ")));
                None
            }
        }
    }

    pub(crate) fn store(&mut self, node: &Node) -> Option<StoreSpec> {
        if node.as_str() == Some("memory") {
            return Some(StoreSpec::Memory);
        }
        if let Some([(key, value)]) = node.as_map() {
            match key.as_str() {
                Some("memory") => return Some(StoreSpec::Memory),
                Some("sled") => {
                    let path = self.string(value, "`checkpointer.sled`")?;
                    if cfg!(feature = "sled") {
                        let path = path.to_owned();
                        return self
                            .confined(value.pos, "`checkpointer.sled`", &path, crate::grants::Access::Write)
                            .map(StoreSpec::Sled);
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
}

/// `{{ expr }}` → `expr`; anything else unchanged.
pub(crate) fn strip_braces(text: &str) -> &str {
    single_expression(text.trim()).unwrap_or(text)
}

/// The expression of a string that is exactly one `{{ expr }}`.
pub(crate) fn single_expression(text: &str) -> Option<&str> {
    let inner = text.strip_prefix("{{")?.strip_suffix("}}")?;
    if inner.contains("{{") || inner.contains("}}") || inner.contains("{%") {
        return None;
    }
    Some(inner.trim())
}

/// What a problem says of a reserved name.
pub(crate) const RESERVED: &str =
    "a name the engine keeps for itself (names starting with `__tea`, `__start__`, `__end__`)";

/// A state key the engine uses itself: `__tea…` (a `dynamic_parallel` item's record), the
/// entry and the exit.
pub(crate) fn is_reserved(name: &str) -> bool {
    name.starts_with("__tea") || name == START[0] || name == END[0]
}

pub(crate) fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !matches!(s, "not" | "and" | "or" | "none" | "None")
}
