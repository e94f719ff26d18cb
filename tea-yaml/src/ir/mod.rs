//! The graph a loaded agent is made of (its intermediate form): nodes ([`NodeDef`], what each
//! does as an [`Exec`]), routing rules ([`Rule`], [`Cond`]), the whole agent ([`LoadedAgent`])
//! and [`YamlGraph`], the engine's handle on it. The loader (`load/`) builds it, the
//! interpreter (`run/`) runs it.
//!
//! - `shape.rs` — the graph as tea-check reads it, for the load checks and the drawings;
//! - `draw.rs` — the graph drawn as Mermaid and Graphviz DOT.

pub(crate) mod draw;
pub(crate) mod shape;

pub(crate) use shape::shape;

use crate::actions::Action;
use crate::lang::lua::{ChunkId, Chunks};
pub(crate) use crate::lang::template::Tree;
use crate::lang::template::{ExprId, Templates};
use crate::state::Schema;
use crate::state::State;
use minijinja::value::Value as Mj;
use serde_json::{Map, Value};
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use tea_runtime::{Goto, NodeId, NodeName};

/// A node of a YAML agent, by its index in the file's `nodes:` list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NodeIx(pub(crate) u32);

impl NodeId for NodeIx {
    type State = State;
}

impl NodeIx {
    pub(crate) fn index(self) -> usize {
        self.0 as usize
    }
}

/// A condition: `when`, `condition`, a goto rule's `if`.
#[derive(Clone, Debug)]
pub(crate) enum Cond {
    Always,
    Const(bool),
    /// Holds when the expression's Jinja truth equals `expect`.
    Expr {
        expr: ExprId,
        expect: bool,
        source: Arc<str>,
    },
}

/// One routing rule: the first whose condition holds wins.
#[derive(Clone, Debug)]
pub(crate) struct Rule {
    pub(crate) cond: Cond,
    pub(crate) to: Goto<NodeIx>,
}

/// Where a node's action result goes.
#[derive(Clone, Debug)]
pub(crate) enum Output {
    /// An object result key by key, anything else under `result`.
    Spread,
    Key(String),
    /// Each key rendered with `result` in the context.
    Map(Vec<(String, Tree)>),
}

/// What a node does.
#[derive(Clone)]
pub(crate) enum Exec {
    Noop,
    Lua(ChunkId),
    /// A `run:` block in Python (feature `python`; uninhabited without it).
    Python(crate::lang::python::Block),
    /// A `run:` block in Prolog (feature `prolog`; uninhabited without it).
    Prolog(crate::lang::prolog::Block),
    Expr {
        expr: ExprId,
        key: String,
    },
    Action {
        name: String,
        action: Action,
        with: Tree,
        output: Output,
    },
    /// One of The Edge Agent's actions that compose steps of their own (`reflection.loop`),
    /// compiled from its `with:`; its result goes where `output` says, as an action's.
    Composed {
        name: String,
        composed: Arc<crate::actions::compose::Composed>,
        output: Output,
    },
    Interrupt {
        message: Option<Tree>,
        state_key: String,
        resume_key: String,
        timeout: Option<u64>,
    },
    /// `type: dynamic_parallel`: one send per item of `items` to the node's fan-out, with the
    /// item under `item_var` and its position under `index_var`; `fail_fast` and `limit`
    /// (`max_concurrency`) as The Edge Agent's.
    Send {
        items: ExprId,
        item_var: String,
        index_var: String,
        fail_fast: bool,
        limit: Option<Limit>,
        /// `output: KEY`: the fan-in writes the items' results under KEY too.
        output: Option<String>,
    },
    /// `type: while_loop`: `body` run in order while `cond` holds, at most `max` passes, within
    /// the node (each body node's keys replace the loop's working copy of the state; the keys
    /// written make the node's update).
    Loop {
        cond: Cond,
        max: usize,
        body: Vec<(NodeName, Exec)>,
    },
    /// `steps:` of a plain node: run in order within the node, as one pass of a loop.
    Steps(Vec<(NodeName, Exec)>),
    /// `type: subgraph`: a child agent run through the engine's subgraph hook, its input and
    /// output mappings (`None`: the whole state in, what the child changed of it out).
    Subgraph {
        child: YamlGraph,
        input: Option<Vec<(String, Tree)>>,
        output: Option<Vec<(String, Tree)>>,
    },
}

/// A `dynamic_parallel` node's `max_concurrency`: a number, or an expression evaluated when
/// the node runs.
#[derive(Clone, Debug)]
pub(crate) enum Limit {
    Fixed(usize),
    Expr(ExprId),
}

impl Exec {
    /// Whether running it can pause the run: an interrupt node, or a child agent that can.
    pub(crate) fn can_pause(&self) -> bool {
        match self {
            Exec::Interrupt { .. } => true,
            Exec::Subgraph { child, .. } => child.can_pause(),
            _ => false,
        }
    }
}

impl fmt::Debug for Exec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exec::Noop => f.write_str("Noop"),
            Exec::Lua(id) => write!(f, "Lua({id:?})"),
            Exec::Python(block) => write!(f, "{block:?}"),
            Exec::Prolog(block) => write!(f, "{block:?}"),
            Exec::Expr { key, .. } => write!(f, "Expr(-> {key})"),
            Exec::Action { name, .. } | Exec::Composed { name, .. } => write!(f, "Action({name})"),
            Exec::Interrupt { state_key, resume_key, .. } => write!(f, "Interrupt({state_key} => {resume_key})"),
            Exec::Send { item_var, index_var, .. } => write!(f, "Send({item_var}, {index_var})"),
            Exec::Subgraph { child, .. } => write!(f, "Subgraph({}:{:x})", child.agent.name, child.agent.fingerprint),
            Exec::Loop { max, body, .. } => write!(f, "Loop({max}, {} nodes)", body.len()),
            Exec::Steps(body) => write!(f, "Steps({} nodes)", body.len()),
        }
    }
}

/// One node.
#[derive(Debug)]
pub(crate) struct NodeDef {
    pub(crate) name: NodeName,
    pub(crate) exec: Exec,
    pub(crate) rules: Vec<Rule>,
    pub(crate) fork: Option<(Vec<NodeIx>, NodeIx)>,
    pub(crate) interrupt_before: bool,
    pub(crate) interrupt_after: bool,
    /// The node is the fan-in of a fork: it sees `parallel_results`.
    pub(crate) fan_in: bool,
    /// The node is the fan-in of a `dynamic_parallel` node: reached with no branches (no
    /// items), it sees `parallel_results` empty.
    pub(crate) sends_fan_in: bool,
    /// A step of a `dynamic_parallel` node: that node, and whether this is the item's first step.
    pub(crate) item_of: Option<(NodeIx, bool)>,
    /// `retry:`, `timeout:`, `cache:`.
    pub(crate) policy: Option<tea_runtime::NodePolicy>,
}

/// Everything a loaded agent is made of.
pub(crate) struct LoadedAgent {
    pub(crate) name: String,
    /// What the agent may reach: its folder (where relative paths in the file start) and the
    /// operator's grants.
    pub(crate) grants: Arc<crate::grants::AgentGrants>,
    /// `settings.a2a`: who the agent is among the process's agents.
    pub(crate) a2a: crate::actions::a2a::A2aSettings,
    /// The agent's in-memory vector store (`vector.*`).
    #[cfg(feature = "net")]
    pub(crate) vectors: Arc<crate::actions::services::vectors::Vectors>,
    pub(crate) nodes: Vec<NodeDef>,
    pub(crate) start: Vec<Rule>,
    pub(crate) schema: Schema,
    pub(crate) templates: Templates,
    pub(crate) lua: Chunks,
    pub(crate) variables: Mj,
    pub(crate) secrets: Mj,
    /// The secrets' names and values, looked for in every write and error (values of at least
    /// [`MIN_SECRET_LEN`](crate::run::secrets::MIN_SECRET_LEN) bytes).
    pub(crate) secret_values: Vec<(String, String)>,
    /// `settings.llm` and `settings.notify`: defaults of `llm.call` and `actions.notify`.
    #[cfg_attr(not(feature = "net"), allow(dead_code))]
    pub(crate) settings_llm: Option<Tree>,
    #[cfg_attr(not(feature = "net"), allow(dead_code))]
    pub(crate) settings_notify: Option<Tree>,
    pub(crate) checkpoint_dir: Option<PathBuf>,
    /// The last path `checkpoint.save` wrote (`{{ checkpoint.last }}`).
    pub(crate) last_checkpoint: Mutex<String>,
    pub(crate) fingerprint: u64,
    pub(crate) schema_fingerprint: u64,
    /// `initial_state:`: the keys a new run starts with where its input has none.
    pub(crate) initial_state: Map<String, Value>,
    /// `settings.auto_trace: true`: where the file asks its runs' trace to go.
    pub(crate) auto_trace: Option<AutoTrace>,
    /// The ways into a node besides routing, (from, to): each `retry.loop` node runs its
    /// `correct` node. Checked at load and drawn as the rest of the graph ([`shape()`]).
    pub(crate) jumps: Vec<(usize, usize)>,
    /// The agent's key-value memory (`memory.*` actions).
    pub(crate) memory: crate::actions::Memory,
    /// The Edge Agent's keys this file uses that tea accepts and ignores: one warning per key.
    pub(crate) warnings: Vec<crate::error::Problem>,
    /// The shell providers `llm.call` may run (`settings.shell_providers`), and whether it may.
    #[cfg(feature = "net")]
    pub(crate) shells: crate::actions::net::llm::Shells,
}

/// Where an agent file asks each run's trace to go (The Edge Agent's `settings.auto_trace:
/// true`, with `trace_exporter` and `trace_file`). tea-yaml writes no trace itself: the `tea`
/// command writes its `--trace` timeline there when not given one, or with `Console` shows each
/// step on standard error (as `-v` does).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AutoTrace {
    /// `trace_exporter: console` (the default): each step on standard error.
    Console,
    /// `trace_exporter: file`: JSON lines to `trace_file` (relative to the agent file's
    /// directory).
    File(PathBuf),
}

/// A YAML agent's graph: the engine's view of a loaded file. Cheap to clone (shared).
///
/// A node whose action reaches the network (`llm.call`, `http.get`, `http.post`,
/// `actions.notify`; feature `net`) is an async node of the graph the async driver runs
/// ([`is_async`](tea_runtime::Graph::is_async) holds for it there, and
/// [`run_async`](tea_runtime::Graph::run_async) renders its arguments, then awaits the request
/// without holding a thread); the graph the blocking API runs runs it with
/// [`run`](tea_runtime::Graph::run), which waits for the request on tea-yaml's own runtime.
///
/// A graph made for one async run also carries that run's cancel flag: when the caller drops
/// the run, a `run:` block under way stops at its next instruction count.
#[derive(Clone)]
pub struct YamlGraph {
    /// The loaded agent, shared by every clone.
    pub(crate) agent: Arc<LoadedAgent>,
    /// Made for the async driver: its network nodes are async nodes.
    pub(crate) asynchronous: bool,
    /// The cancel flag of the async run this graph was made for.
    pub(crate) cancel: Option<Arc<AtomicBool>>,
}

impl fmt::Debug for YamlGraph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("YamlGraph").field("name", &self.agent.name).field("nodes", &self.agent.nodes.len()).finish()
    }
}

impl YamlGraph {
    /// The loaded agent.
    pub(crate) fn inner(&self) -> &LoadedAgent {
        &self.agent
    }

    /// The same graph for the async driver (`asynchronous`: its network nodes are async) or
    /// for the blocking API.
    #[cfg(feature = "tokio")]
    pub(crate) fn driven(&self, asynchronous: bool) -> YamlGraph {
        YamlGraph { agent: self.agent.clone(), asynchronous, cancel: None }
    }

    /// The same graph, whose `run:` blocks stop when `cancel` is set.
    #[cfg(feature = "tokio")]
    pub(crate) fn cancelled_by(&self, cancel: Arc<AtomicBool>) -> YamlGraph {
        YamlGraph { agent: self.agent.clone(), asynchronous: self.asynchronous, cancel: Some(cancel) }
    }

    /// The key an interrupt node named `node` writes its answer to.
    pub(crate) fn resume_key(&self, node: &NodeName) -> Option<&str> {
        let def = self.agent.nodes.iter().find(|n| n.name == *node)?;
        match &def.exec {
            Exec::Interrupt { resume_key, .. } => Some(resume_key),
            _ => None,
        }
    }

    /// Whether a run can pause: a breakpoint, an interrupt node, or a child agent that can.
    pub(crate) fn can_pause(&self) -> bool {
        self.agent.nodes.iter().any(|n| n.interrupt_before || n.interrupt_after || n.exec.can_pause())
    }
}
