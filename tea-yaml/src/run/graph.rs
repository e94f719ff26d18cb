//! A loaded agent as the engine sees it: [`YamlGraph`] implements `tea::Graph` over the
//! tables the loader built (nodes, routing rules, fan-outs), so a YAML agent runs on the same
//! executor, parallel branches, stores and tokens as a `graph!` graph.

use crate::actions::{self, Action, Call};
use crate::lua::{ChunkId, Chunks};
use crate::state::{Schema, State, Update};
pub(crate) use crate::template::Tree;
use crate::template::{self, ExprId, StateObject, Templates};
use minijinja::value::Value as Mj;
use serde_json::{Map, Value};
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use tea_runtime::__private::NodeStep;
use tea_runtime::{
    BoxError, BranchState, Ctx, Fork, Goto, Graph, Hitl, NodeFuture, NodeId, NodeName, PauseFree, SyncGraph,
};

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
    Python(crate::python::Block),
    /// A `run:` block in Prolog (feature `prolog`; uninhabited without it).
    Prolog(crate::prolog::Block),
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
        composed: Arc<crate::compose::Composed>,
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
            Exec::Subgraph { child, .. } => write!(f, "Subgraph({}:{:x})", child.0.name, child.0.fingerprint),
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
pub(crate) struct Inner {
    pub(crate) name: String,
    /// What the agent may reach: its folder (where relative paths in the file start) and the
    /// operator's grants.
    pub(crate) grants: Arc<crate::grants::AgentGrants>,
    /// `settings.a2a`: who the agent is among the process's agents.
    pub(crate) a2a: crate::a2a::A2aSettings,
    /// The agent's in-memory vector store (`vector.*`).
    #[cfg(feature = "net")]
    pub(crate) vectors: Arc<crate::vectors::Vectors>,
    pub(crate) nodes: Vec<NodeDef>,
    pub(crate) start: Vec<Rule>,
    pub(crate) schema: Schema,
    pub(crate) templates: Templates,
    pub(crate) lua: Chunks,
    pub(crate) variables: Mj,
    pub(crate) secrets: Mj,
    /// The secrets' names and values, looked for in every write and error (values of at least
    /// [`MIN_SECRET_LEN`] bytes).
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
    /// The agent's key-value memory (`memory.*` actions).
    pub(crate) memory: crate::actions::Memory,
    /// The Edge Agent's keys this file uses that tea accepts and ignores: one warning per key.
    pub(crate) warnings: Vec<crate::error::Problem>,
    /// The shell providers `llm.call` may run (`settings.shell_providers`), and whether it may.
    #[cfg(feature = "net")]
    pub(crate) shells: crate::llm::Shells,
}

/// Puts back what a node found on its thread, whatever happens to the node.
struct ContextGuard(Option<crate::scope::RunScope>);

impl Drop for ContextGuard {
    fn drop(&mut self) {
        if let Some(old) = self.0.take() {
            crate::scope::replace(old);
        }
    }
}

/// Makes a node's run context (if it is JSON) and its writer the thread's while the guard lives.
fn enter_context(ctx: &Ctx<State>) -> ContextGuard {
    let context = ctx.context::<Value>().ok().cloned();
    let writer = ctx.writer();
    let writer = writer.is_listened().then_some(writer);
    if context.is_none() && writer.is_none() {
        return ContextGuard(None);
    }
    ContextGuard(Some(crate::scope::replace((context.unwrap_or(Value::Null), writer))))
}

/// A node's future with its run's context entered at each poll (it may be polled on any of the
/// runtime's threads).
#[cfg(feature = "net")]
struct InContext<'a> {
    ctx: &'a Ctx<State>,
    inner: NodeFuture<'a, State, NodeIx>,
}

#[cfg(feature = "net")]
impl std::future::Future for InContext<'_> {
    type Output = Result<NodeStep<State, NodeIx>, BoxError>;
    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        let _entered = enter_context(self.ctx);
        self.inner.as_mut().poll(cx)
    }
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

/// What templates and conditions see: `state`, `variables`, `secrets` (in [`Tree::Sending`]
/// arguments only), `checkpoint` (`dir`,
/// `last`) and, in an `output:` mapping, `result`.
#[derive(Clone, Debug)]
struct Scope {
    graph: YamlGraph,
    state: Mj,
    result: Option<Mj>,
    /// Rendering an argument that sends secrets out ([`Tree::Sending`]): `secrets` is there.
    secrets: bool,
    /// Names of a composed action's own (a probe's item fields), after the agent's.
    locals: Option<Arc<Map<String, Value>>>,
}

impl minijinja::value::Object for Scope {
    fn repr(self: &Arc<Self>) -> minijinja::value::ObjectRepr {
        minijinja::value::ObjectRepr::Map
    }

    fn get_value(self: &Arc<Self>, key: &Mj) -> Option<Mj> {
        let inner = &self.graph.0;
        Some(match key.as_str()? {
            "state" => self.state.clone(),
            "variables" => inner.variables.clone(),
            "secrets" if self.secrets => inner.secrets.clone(),
            "checkpoint" => {
                let last = inner.last_checkpoint.lock().map(|l| l.clone()).unwrap_or_default();
                let dir = inner.checkpoint_dir.as_ref().map(|d| d.display().to_string()).unwrap_or_default();
                minijinja::context! { dir => dir, last => last }
            }
            "result" => self.result.clone()?,
            "context" => template::to_mj(&crate::scope::run_context()),
            other => template::to_mj(self.locals.as_ref()?.get(other)?),
        })
    }

    fn enumerate(self: &Arc<Self>) -> minijinja::value::Enumerator {
        if self.secrets {
            return minijinja::value::Enumerator::Str(&[
                "state",
                "variables",
                "secrets",
                "checkpoint",
                "result",
                "context",
            ]);
        }
        minijinja::value::Enumerator::Str(&["state", "variables", "checkpoint", "result", "context"])
    }
}

/// Secrets shorter than this are not looked for in writes and errors: so short a value cannot
/// be told apart from ordinary text.
pub(crate) const MIN_SECRET_LEN: usize = 4;

/// A YAML agent's graph: the engine's view of a loaded file. Cheap to clone (shared).
///
/// A node whose action reaches the network (`llm.call`, `http.get`, `http.post`,
/// `actions.notify`; feature `net`) is an async node of the graph the async driver runs
/// ([`is_async`](Graph::is_async) holds for it there, and [`run_async`](Graph::run_async)
/// renders its arguments, then awaits the request without holding a thread); the graph the
/// blocking API runs runs it with [`run`](Graph::run), which waits for the request on
/// tea-yaml's own runtime.
///
/// A graph made for one async run also carries that run's cancel flag: when the caller drops
/// the run, a `run:` block under way stops at its next instruction count.
#[derive(Clone)]
pub struct YamlGraph(pub(crate) Arc<Inner>, pub(crate) bool, pub(crate) Option<Arc<AtomicBool>>);

impl fmt::Debug for YamlGraph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("YamlGraph").field("name", &self.0.name).field("nodes", &self.0.nodes.len()).finish()
    }
}

impl YamlGraph {
    pub(crate) fn inner(&self) -> &Inner {
        &self.0
    }

    /// The same graph for the async driver (`asynchronous`: its network nodes are async) or
    /// for the blocking API.
    #[cfg(feature = "tokio")]
    pub(crate) fn driven(&self, asynchronous: bool) -> YamlGraph {
        YamlGraph(self.0.clone(), asynchronous, None)
    }

    /// The same graph, whose `run:` blocks stop when `cancel` is set.
    #[cfg(feature = "tokio")]
    pub(crate) fn cancelled_by(&self, cancel: Arc<AtomicBool>) -> YamlGraph {
        YamlGraph(self.0.clone(), self.1, Some(cancel))
    }

    /// The name of the first secret whose value `value` holds somewhere.
    fn secret_in(&self, value: &Value) -> Option<&str> {
        let secrets = &self.0.secret_values;
        if secrets.is_empty() {
            return None;
        }
        match value {
            Value::String(text) => secrets.iter().find(|(_, v)| text.contains(v.as_str())).map(|(n, _)| n.as_str()),
            Value::Array(items) => items.iter().find_map(|v| self.secret_in(v)),
            Value::Object(map) => map.iter().find_map(|(k, v)| {
                self.secret_in(v)
                    .or_else(|| secrets.iter().find(|(_, s)| k.contains(s.as_str())).map(|(n, _)| n.as_str()))
            }),
            _ => None,
        }
    }

    /// Refuses writes that would put a secret in the state (and so in checkpoints, tokens and
    /// streams).
    pub(crate) fn refuse_secrets(&self, values: &Map<String, Value>) -> Result<(), String> {
        if self.0.secret_values.is_empty() {
            return Ok(());
        }
        for (key, value) in values {
            if let Some(name) = self.secret_in(value) {
                return Err(format!(
                    "state key `{key}` would hold the value of secret `{name}`; secrets never go into the state \
                     (checkpoints and streams would keep them): use `{{{{ secrets.{name} }}}}` where it is needed"
                ));
            }
        }
        Ok(())
    }

    /// `error` with every secret's value replaced by `***` (unchanged when it holds none).
    pub(crate) fn redact(&self, error: BoxError) -> BoxError {
        let secrets = &self.0.secret_values;
        if secrets.is_empty() {
            return error;
        }
        let mut text = tea_runtime::error_chain(&*error);
        if !secrets.iter().any(|(_, v)| text.contains(v.as_str())) {
            return error;
        }
        for (_, value) in secrets {
            text = text.replace(value.as_str(), "***");
        }
        text.into()
    }

    /// A network action's call: its rendered `with:` with the file's settings as defaults,
    /// checked, and the API key to fall back on.
    #[cfg(feature = "net")]
    pub(crate) fn prepare_net(
        &self,
        action: crate::net::NetAction,
        args: Value,
        state: &State,
    ) -> Result<crate::net::Call, BoxError> {
        use crate::net::Section;
        let mut args = args;
        let settings = match action.section() {
            Some(Section::Llm) => self.0.settings_llm.as_ref().map(|t| ("llm", t)),
            Some(Section::Notify) => self.0.settings_notify.as_ref().map(|t| ("notify", t)),
            None => None,
        };
        if let (Some((section, tree)), Value::Object(map)) = (settings, &mut args) {
            let defaults =
                self.render(tree, &self.context(state, None)).map_err(|e| format!("`settings.{section}`: {e}"))?;
            if let Value::Object(defaults) = defaults {
                for (key, value) in defaults {
                    map.entry(key).or_insert(value);
                }
            }
        }
        let key = match action {
            crate::net::NetAction::LlmCall | crate::net::NetAction::LlmChat | crate::net::NetAction::LlmEmbed => self
                .0
                .secret_values
                .iter()
                .find(|(n, _)| n == "llm_api_key")
                .map(|(_, v)| v.clone())
                .or_else(|| std::env::var("OPENAI_API_KEY").ok()),
            _ => None,
        };
        Ok(crate::net::prepare(action, args, key, &self.0.shells)?)
    }

    /// The key an interrupt node named `node` writes its answer to.
    pub(crate) fn resume_key(&self, node: &NodeName) -> Option<&str> {
        let def = self.0.nodes.iter().find(|n| n.name == *node)?;
        match &def.exec {
            Exec::Interrupt { resume_key, .. } => Some(resume_key),
            _ => None,
        }
    }

    /// Whether a run can pause: a breakpoint, an interrupt node, or a child agent that can.
    pub(crate) fn can_pause(&self) -> bool {
        self.0.nodes.iter().any(|n| n.interrupt_before || n.interrupt_after || n.exec.can_pause())
    }

    /// A `type: subgraph` node: the child runs on the engine's subgraph hook (its own thread
    /// in the parent's store, a pause inside it pausing this run), from `input` rendered over
    /// `state`; `output` rendered over its final state is the node's update (without `output`:
    /// what the final state changed of `state`, `Schema::changes`).
    fn run_subgraph(
        &self,
        def: &NodeDef,
        state: &State,
        ctx: &Ctx<State>,
        hitl: &mut Hitl,
    ) -> Result<NodeStep<State, NodeIx>, BoxError> {
        let Exec::Subgraph { child, input, output } = &def.exec else {
            return Err(format!("node `{}` is not a subgraph", def.name).into());
        };
        let start = match input {
            None => state.clone(),
            Some(entries) => {
                let ctx = self.context(state, None);
                let mut map = Map::new();
                for (key, tree) in entries {
                    let value =
                        self.render(tree, &ctx).map_err(|e| format!("`input.{key}` of node `{}`: {e}", def.name))?;
                    map.insert(key.clone(), value);
                }
                State::from_map(map)
            }
        };
        let failed: Mutex<Option<String>> = Mutex::new(None);
        let out = |parent: &State, last: State| -> Update {
            let result = match output {
                // No mapping: what the child changed of the parent's state, not its whole
                // state written again through the parent's reducers (an `append` key would get
                // the entries the child started with a second time).
                None => Ok(Update::from_map(self.0.schema.changes(parent, last.as_map().clone()))),
                Some(entries) => {
                    let ctx = self.context(parent, Some(&last.to_json()));
                    entries
                        .iter()
                        .map(|(key, tree)| {
                            self.render(tree, &ctx)
                                .map(|v| (key.clone(), v))
                                .map_err(|e| format!("`output.{key}` of node `{}`: {e}", def.name))
                        })
                        .collect::<Result<Map<_, _>, String>>()
                        .map(Update::from_map)
                }
            };
            result.unwrap_or_else(|e| {
                if let Ok(mut slot) = failed.lock() {
                    *slot = Some(e);
                }
                Update::new()
            })
        };
        // The child's blocks stop with this run's.
        let child = YamlGraph(child.0.clone(), child.1, self.2.clone());
        let step =
            tea_runtime::__private::run_subgraph_mapped(child, &|_: &State| start.clone(), &out, state, ctx, hitl)?;
        if let Some(e) = failed.lock().ok().and_then(|mut slot| slot.take()) {
            return Err(e.into());
        }
        Ok(step)
    }

    /// A node that is neither a `dynamic_parallel` node nor one of its steps.
    fn run_plain(
        &self,
        node: NodeIx,
        state: &State,
        ctx: &Ctx<State>,
        hitl: &mut Hitl,
    ) -> Result<NodeStep<State, NodeIx>, BoxError> {
        if matches!(self.node(node).exec, Exec::Subgraph { .. }) {
            return self.run_subgraph(self.node(node), state, ctx, hitl).map_err(|e| self.redact(e));
        }
        let update = self.run_node(node, state, ctx, hitl).map_err(|e| self.redact(e))?;
        Ok(NodeStep::new(update, None))
    }

    /// A step of an item of `dynamic_parallel` node `of` (`head`: its first), as The Edge
    /// Agent runs items: skipped once the item failed; with `fail_fast`, an item that has not
    /// started when another failed is cancelled; with `max_concurrency`, it waits for a permit;
    /// its own failure (not a pause, not the run's store or lease) is written into the item's
    /// record, which the fan-in turns into a failed result, instead of failing the run.
    fn run_item_step(
        &self,
        node: NodeIx,
        of: NodeIx,
        head: bool,
        state: &State,
        ctx: &Ctx<State>,
        hitl: &mut Hitl,
    ) -> Result<NodeStep<State, NodeIx>, BoxError> {
        use crate::items;
        let mut record = items::record(state.as_map());
        if record.contains_key("error") {
            return Ok(NodeStep::new(None, None));
        }
        let fail_fast = matches!(self.node(of).exec, Exec::Send { fail_fast: true, .. });
        let shared = record.get("fan_out").and_then(Value::as_u64).map(items::fan_out);
        let with = |record: Map<String, Value>| Update::new().set(items::ITEM_KEY, Value::Object(record));
        let limit = record.get("limit").and_then(Value::as_u64).map(|n| n.max(1) as usize);
        let began = std::time::Instant::now();
        let result = {
            // The permit first: an item waiting for one has not started, as an item waiting for
            // a worker of The Edge Agent's pool has not.
            let _permit = shared.as_ref().zip(limit).map(|(shared, limit)| shared.acquire(limit));
            if let (true, true, Some(shared)) = (head, fail_fast, &shared) {
                if shared.is_cancelled() {
                    record.insert("error".to_owned(), Value::from(items::CANCELLED));
                    return Ok(NodeStep::new(Some(with(record)), None));
                }
            }
            let result = self.run_plain(node, state, ctx, hitl);
            // Cancel before the permit goes, so that no item it lets start misses the failure.
            if let (Err(e), true, Some(shared)) = (&result, fail_fast, &shared) {
                if hitl.paused_with().is_none() && items::is_item_failure(e.as_ref()) {
                    shared.cancel();
                }
            }
            result
        };
        let ms = record.get("ms").and_then(Value::as_u64).unwrap_or(0) + began.elapsed().as_millis() as u64;
        record.insert("ms".to_owned(), Value::from(ms));
        match result {
            Ok(mut step) => {
                if hitl.paused_with().is_none() {
                    let update = step.update.take().unwrap_or_default();
                    step.update = Some(update.set(items::ITEM_KEY, Value::Object(record)));
                }
                Ok(step)
            }
            Err(e) if hitl.paused_with().is_none() && items::is_item_failure(e.as_ref()) => {
                let message = format!("node `{}`: {}", self.node(node).name, items::describe(e.as_ref()));
                record.insert("error".to_owned(), Value::from(message));
                Ok(NodeStep::new(Some(with(record)), None))
            }
            Err(e) => Err(e),
        }
    }

    fn node(&self, node: NodeIx) -> &NodeDef {
        &self.0.nodes[node.index()]
    }

    /// The template context: `state`, `variables`, `secrets`, `checkpoint`, and `result` in
    /// an `output:` mapping. An object that builds each of them when a template reads it.
    pub(crate) fn context(&self, state: &State, result: Option<&Value>) -> Mj {
        Mj::from_object(Scope {
            graph: self.clone(),
            state: Mj::from_object(StateObject(state.shared().clone())),
            result: result.map(template::to_mj),
            secrets: false,
            locals: None,
        })
    }

    /// Evaluates `tree` in `ctx`.
    pub(crate) fn render(&self, tree: &Tree, ctx: &Mj) -> Result<Value, String> {
        let templates = &self.0.templates;
        Ok(match tree {
            Tree::Literal(value) => value.clone(),
            Tree::Sending(tree) => match ctx.downcast_object_ref::<Scope>() {
                Some(scope) => self.render(tree, &Mj::from_object(Scope { secrets: true, ..scope.clone() }))?,
                None => self.render(tree, ctx)?,
            },
            Tree::Expr(id) => template::to_json(&templates.eval(*id, ctx)?)?,
            Tree::Template(id) => Value::String(templates.render(*id, ctx)?),
            Tree::List(items) => Value::Array(items.iter().map(|t| self.render(t, ctx)).collect::<Result<_, _>>()?),
            Tree::Map(entries) => Value::Object(
                entries
                    .iter()
                    .map(|(k, t)| Ok((k.clone(), self.render(t, ctx)?)))
                    .collect::<Result<Map<_, _>, String>>()?,
            ),
        })
    }

    /// The first rule of `rules` that holds on `state`.
    fn choose(&self, rules: &[Rule], state: &State, from: &str) -> Result<Option<Goto<NodeIx>>, BoxError> {
        let mut ctx = None;
        for rule in rules {
            let holds = match &rule.cond {
                Cond::Always => true,
                Cond::Const(b) => *b,
                Cond::Expr { expr, expect, source } => {
                    let ctx = ctx.get_or_insert_with(|| self.context(state, None));
                    let value = self
                        .0
                        .templates
                        .eval(*expr, ctx)
                        .map_err(|e| format!("the condition `{source}` on the way from `{from}` fails: {e}"))?;
                    value.is_true() == *expect
                }
            };
            if holds {
                return Ok(Some(rule.to));
            }
        }
        Ok(None)
    }

    fn run_node(
        &self,
        node: NodeIx,
        state: &State,
        ctx: &Ctx<State>,
        hitl: &mut Hitl,
    ) -> Result<Option<Update>, BoxError> {
        let def = self.node(node);
        if let Some((seen, results)) = self.fan_in(node, state, ctx) {
            let update = self.exec(def, &seen, hitl)?.unwrap_or_default();
            return Ok(Some(self.with_results(node, update, results)));
        }
        self.exec(def, state, hitl)
    }

    /// `update` of fan-in `node` with the branches' `results`: under `parallel_results`, and
    /// under the `output:` key of each `dynamic_parallel` node that meets there.
    fn with_results(&self, node: NodeIx, update: Update, results: Value) -> Update {
        let mut update = update;
        for def in &self.0.nodes {
            if let (Exec::Send { output: Some(key), .. }, Some((_, join))) = (&def.exec, &def.fork) {
                if *join == node {
                    update = update.set(key.clone(), results.clone());
                }
            }
        }
        update.set("parallel_results", results)
    }

    /// At a fan-in: the state the node reads, with `parallel_results` (the branches' final
    /// states in declared order), and those results, which the node keeps in the state.
    fn fan_in(&self, node: NodeIx, state: &State, ctx: &Ctx<State>) -> Option<(State, Value)> {
        self.seen_at_fan_in(node, state, ctx.branches())
    }

    /// At a pause before fan-in `node` (a breakpoint), whose branches' own final states are
    /// `branches`: `state` as the node will read it, with `parallel_results` and each
    /// `dynamic_parallel` node's `output:` key that meets there, as The Edge Agent's engines
    /// show a paused fan-in. Other nodes' states are left as they are.
    pub(crate) fn show_fan_in(&self, node: &str, state: &mut State, branches: &[BranchState<State>]) {
        let Some(node) = self.node_named(node) else { return };
        if let Some((seen, _)) = self.seen_at_fan_in(node, state, branches) {
            *state = seen;
        }
    }

    /// [`fan_in`](Self::fan_in) with the branches' states given.
    fn seen_at_fan_in(&self, node: NodeIx, state: &State, branches: &[BranchState<State>]) -> Option<(State, Value)> {
        let def = self.node(node);
        if !def.fan_in || (branches.is_empty() && !def.sends_fan_in) {
            return None;
        }
        let states = branches.iter().map(|b| b.state().to_json());
        let results = if def.sends_fan_in {
            // The items of `dynamic_parallel` nodes: The Edge Agent's results.
            let vars = |node: &str| match self.0.nodes.iter().find(|n| n.name == *node).map(|n| &n.exec) {
                Some(Exec::Send { item_var, index_var, .. }) => Some((item_var.clone(), index_var.clone())),
                _ => None,
            };
            crate::items::results(states.collect(), &vars)
        } else {
            Value::Array(states.collect())
        };
        let mut seen = state.clone();
        for (key, value) in self.with_results(node, Update::new(), results.clone()).into_values().unwrap_or_default() {
            seen.map_mut().insert(key, value);
        }
        Some((seen, results))
    }

    /// Whether `node` runs a network action (`llm.call`, `http.*`, `actions.notify`, a hosted
    /// service's).
    pub(crate) fn is_net(&self, node: NodeIx) -> bool {
        #[cfg(feature = "net")]
        if let Exec::Action { action: Action::Net(_) | Action::Service(_), .. } = &self.node(node).exec {
            return true;
        }
        let _ = node;
        false
    }

    /// A network node, awaited: its arguments rendered, then the request awaited on tea-yaml's
    /// runtime (no thread waits for it).
    #[cfg(feature = "net")]
    async fn run_net(&self, node: NodeIx, state: &State, ctx: &Ctx<State>) -> Result<Option<Update>, BoxError> {
        let def = self.node(node);
        let Exec::Action { name, action: action @ (Action::Net(_) | Action::Service(_)), with, output } = &def.exec
        else {
            return Err(format!("node `{}` is not a network action", def.name).into());
        };
        let fan_in = self.fan_in(node, state, ctx);
        let seen = fan_in.as_ref().map_or(state, |(seen, _)| seen);
        let call = {
            let args = self.render(with, &self.context(seen, None)).map_err(|e| format!("`with:` of `{name}`: {e}"))?;
            match action {
                Action::Service(service) => crate::services::prepare(*service, args, &self.0.grants, &self.0.vectors)?,
                Action::Net(net) => self.prepare_net(*net, args, seen)?,
                _ => return Err(format!("node `{}` is not a network action", def.name).into()),
            }
        };
        let result = crate::net::spawn(call, &self.0.grants)?.await?;
        let update = self.output(output, result, seen)?;
        Ok(Some(match fan_in {
            Some((_, results)) => self.with_results(node, update, results),
            None => update,
        }))
    }

    /// A `dynamic_parallel` node's sends: one per item of its `items`, in order, each to the
    /// head of its fan-out with the item and its index as the branch's input.
    fn sends(&self, node: NodeIx, state: &State) -> Result<Vec<(NodeIx, Update)>, BoxError> {
        let def = self.node(node);
        let Exec::Send { items, item_var, index_var, limit, .. } = &def.exec else { return Ok(Vec::new()) };
        let Some(&head) = def.fork.as_ref().and_then(|(heads, _)| heads.first()) else {
            return Err(format!("`dynamic_parallel` node `{}` has no per-item node", def.name).into());
        };
        let ctx = self.context(state, None);
        let value = self.0.templates.eval(*items, &ctx).map_err(|e| format!("`items` of node `{}`: {e}", def.name))?;
        let list = match template::to_json(&value)? {
            Value::Array(list) => list,
            Value::Null => Vec::new(),
            other => {
                return Err(format!(
                    "`items` of node `{}` must give a list, not {}",
                    def.name,
                    crate::state::describe(&other)
                )
                .into())
            }
        };
        let limit = match limit {
            None => None,
            Some(Limit::Fixed(n)) => Some(*n),
            Some(Limit::Expr(expr)) => {
                let value = self
                    .0
                    .templates
                    .eval(*expr, &ctx)
                    .map_err(|e| format!("`max_concurrency` of node `{}`: {e}", def.name))?;
                match template::to_json(&value)? {
                    Value::Null => None,
                    Value::Number(n) if n.as_u64().is_some_and(|n| n >= 1) => n.as_u64().map(|n| n as usize),
                    Value::String(s) if s.trim().parse::<usize>().is_ok_and(|n| n >= 1) => s.trim().parse().ok(),
                    other => {
                        return Err(format!(
                            "`max_concurrency` of node `{}` must give a positive integer, not {other}",
                            def.name
                        )
                        .into())
                    }
                }
            }
        };
        let id = crate::items::new_id();
        let node = def.name.as_str();
        Ok(list
            .into_iter()
            .enumerate()
            .map(|(i, item)| {
                let update = Update::new()
                    .set(item_var.clone(), item)
                    .set(index_var.clone(), i as u64)
                    .set(crate::items::ITEM_KEY, crate::items::start(id, node, i, limit));
                (head, update)
            })
            .collect())
    }

    fn exec(&self, def: &NodeDef, state: &State, hitl: &mut Hitl) -> Result<Option<Update>, BoxError> {
        self.exec_as(&def.name, &def.exec, state, hitl)
    }

    /// Whether `cond` holds on `state` (`what` names it in errors).
    fn holds(&self, cond: &Cond, state: &State, what: &str) -> Result<bool, BoxError> {
        Ok(match cond {
            Cond::Always => true,
            Cond::Const(b) => *b,
            Cond::Expr { expr, expect, source } => {
                let value = self
                    .0
                    .templates
                    .eval(*expr, &self.context(state, None))
                    .map_err(|e| format!("the condition `{source}` of {what} fails: {e}"))?;
                value.is_true() == *expect
            }
        })
    }

    /// A `type: while_loop` node named `name`: its body in order while `cond` holds, at most
    /// `max` passes (then it stops, as The Edge Agent's Python engine does); or (`steps`) a
    /// node's `steps:`, one pass. Each body node's
    /// update replaces keys of a working copy of the state (The Edge Agent's `dict.update`);
    /// the keys written, with their last values, are the node's update.
    fn run_loop(
        &self,
        name: &NodeName,
        (cond, max, body): (&Cond, usize, &[(NodeName, Exec)]),
        steps: bool,
        state: &State,
        hitl: &mut Hitl,
    ) -> Result<Option<Update>, BoxError> {
        let mut current = state.clone();
        let mut written: Vec<String> = Vec::new();
        let what = format!("loop `{name}`");
        for pass in 0..max {
            if !self.holds(cond, &current, &what)? {
                break;
            }
            for (step, exec) in body {
                let update = self.exec_as(step, exec, &current, hitl).map_err(|e| {
                    let chain = tea_runtime::error_chain(&*e);
                    if steps {
                        format!("step `{step}`: {chain}")
                    } else {
                        format!("loop `{name}`, body node `{step}`, pass {pass}: {chain}")
                    }
                })?;
                let Some(update) = update else { continue };
                let values = update.into_values()?;
                self.refuse_secrets(&values)?;
                let map = current.map_mut();
                for (key, value) in values {
                    if !written.contains(&key) {
                        written.push(key.clone());
                    }
                    map.insert(key, value);
                }
            }
        }
        if written.is_empty() {
            return Ok(None);
        }
        let mut out = Map::new();
        for key in written {
            let value = current.get(&key).cloned().unwrap_or(Value::Null);
            out.insert(key, value);
        }
        Ok(Some(Update::from_map(out)))
    }

    /// Runs `exec`, the work of node `name` (a node of the file, or a loop's body node).
    fn exec_as(
        &self,
        node: &NodeName,
        exec: &Exec,
        state: &State,
        hitl: &mut Hitl,
    ) -> Result<Option<Update>, BoxError> {
        let inner = &self.0;
        Ok(match exec {
            Exec::Noop | Exec::Send { .. } | Exec::Subgraph { .. } => None,
            Exec::Loop { cond, max, body } => self.run_loop(node, (cond, *max, body), false, state, hitl)?,
            Exec::Steps(body) => self.run_loop(node, (&Cond::Always, 1, body), true, state, hitl)?,
            Exec::Lua(chunk) => inner.lua.run(*chunk, state.shared(), self.2.as_ref())?.map(Update::from_map),
            Exec::Python(block) => block.run(state.shared())?.map(Update::from_map),
            Exec::Prolog(block) => block.run(state.shared())?.map(Update::from_map),
            Exec::Expr { expr, key } => {
                let ctx = self.context(state, None);
                let value = template::to_json(&inner.templates.eval(*expr, &ctx)?)?;
                Some(Update::new().set(key.clone(), value))
            }
            Exec::Action { name, action, with, output } => {
                let args =
                    self.render(with, &self.context(state, None)).map_err(|e| format!("`with:` of `{name}`: {e}"))?;
                let call = Call { host: self, node, state };
                let result = actions::call(action, &call, &args)?;
                Some(self.output(output, result, state)?)
            }
            Exec::Composed { name, composed, output } => {
                let result = crate::compose::run(composed, self, node, state)
                    .map_err(|e| format!("`{name}` (node `{node}`): {e}"))?;
                Some(self.output(output, result, state)?)
            }
            Exec::Interrupt { message, state_key, resume_key, .. } => {
                if hitl.answered() == 0 {
                    // First time here: the question is rendered, stored, and asked.
                    let payload = match message {
                        Some(message) => self.render(message, &self.context(state, None))?,
                        None => state[state_key.as_str()].clone(),
                    };
                    let _ = hitl.interrupt::<Value>(&payload);
                    return Ok(message.as_ref().map(|_| Update::new().set(state_key.clone(), payload)));
                }
                // Resumed: the question is in the state already; the answer comes back.
                let answer: Value = hitl.interrupt(&state[state_key.as_str()])?;
                Some(Update::new().set(resume_key.clone(), answer))
            }
        })
    }

    /// An action's result as an update, by the node's `output:`.
    fn output(&self, output: &Output, result: Value, state: &State) -> Result<Update, BoxError> {
        Ok(match output {
            Output::Key(key) => Update::new().set(key.clone(), result),
            Output::Spread => match result {
                Value::Object(map) => Update::from_map(map),
                Value::Null => Update::new(),
                other => Update::new().set("result", other),
            },
            Output::Map(entries) => {
                let ctx = self.context(state, Some(&result));
                let mut map = Map::new();
                for (key, tree) in entries {
                    map.insert(key.clone(), self.render(tree, &ctx).map_err(|e| format!("`output.{key}`: {e}"))?);
                }
                Update::from_map(map)
            }
        })
    }
}

impl Graph for YamlGraph {
    type State = State;
    type Node = NodeIx;

    fn name(&self) -> &str {
        &self.0.name
    }

    fn fingerprint(&self) -> u64 {
        self.0.fingerprint
    }

    fn schema_fingerprint(&self) -> u64 {
        self.0.schema_fingerprint
    }

    fn node_name(&self, node: NodeIx) -> NodeName {
        self.node(node).name.clone()
    }

    fn start(&self, state: &State) -> Option<Goto<NodeIx>> {
        self.try_start(state).ok().flatten()
    }

    fn try_start(&self, state: &State) -> Result<Option<Goto<NodeIx>>, BoxError> {
        self.choose(&self.0.start, state, "__start__")
    }

    fn run(
        &self,
        node: NodeIx,
        state: &State,
        ctx: &Ctx<State>,
        hitl: &mut Hitl,
    ) -> Result<NodeStep<State, NodeIx>, BoxError> {
        let _context = enter_context(ctx);
        if matches!(self.node(node).exec, Exec::Send { .. }) {
            let sends = self.sends(node, state).map_err(|e| self.redact(e))?;
            return Ok(NodeStep::with_sends(None, sends));
        }
        if let Some((of, head)) = self.node(node).item_of {
            return self.run_item_step(node, of, head, state, ctx, hitl);
        }
        self.run_plain(node, state, ctx, hitl)
    }

    fn is_async(&self, node: NodeIx) -> bool {
        // A step of a `dynamic_parallel` node runs through `run` (which waits for a network
        // action on tea-yaml's runtime), where its item's failures and permits are handled.
        self.1 && self.is_net(node) && self.node(node).item_of.is_none()
    }

    fn run_async<'a>(
        &'a self,
        node: NodeIx,
        state: &'a State,
        ctx: &'a Ctx<State>,
        hitl: &'a mut Hitl,
    ) -> NodeFuture<'a, State, NodeIx> {
        #[cfg(feature = "net")]
        if self.is_net(node) {
            let inner = Box::pin(async move {
                let update = self.run_net(node, state, ctx).await.map_err(|e| self.redact(e))?;
                Ok(NodeStep::new(update, None))
            });
            return Box::pin(InContext { ctx, inner });
        }
        let result = self.run(node, state, ctx, hitl);
        Box::pin(std::future::ready(result))
    }

    fn route(&self, node: NodeIx, state: &State) -> Option<Goto<NodeIx>> {
        self.try_route(node, state).ok().flatten()
    }

    fn try_route(&self, node: NodeIx, state: &State) -> Result<Option<Goto<NodeIx>>, BoxError> {
        let def = self.node(node);
        self.choose(&def.rules, state, def.name.as_str())
    }

    fn fixed_route(&self, node: NodeIx) -> Option<Goto<NodeIx>> {
        match self.node(node).rules.as_slice() {
            [Rule { cond: Cond::Always, to }] => Some(*to),
            _ => None,
        }
    }

    fn reads_branches(&self, join: NodeIx) -> bool {
        self.node(join).fan_in
    }

    fn can_goto(&self, _from: NodeIx, _to: Goto<NodeIx>) -> bool {
        // Routing is by rules (`route`); no node chooses with a command.
        false
    }

    fn node_named(&self, name: &str) -> Option<NodeIx> {
        self.0.nodes.iter().position(|n| n.name == *name).map(|i| NodeIx(i as u32))
    }

    fn interrupt_before(&self, node: NodeIx) -> bool {
        self.node(node).interrupt_before
    }

    fn interrupt_after(&self, node: NodeIx) -> bool {
        self.node(node).interrupt_after
    }

    fn check_answer(&self, node: NodeIx, answer: &Value) -> Result<(), (&'static str, String)> {
        if let Exec::Interrupt { resume_key, .. } = &self.node(node).exec {
            // Secrets first: a type error would show the value.
            let mut answer_map = Map::new();
            answer_map.insert(resume_key.clone(), answer.clone());
            self.refuse_secrets(&answer_map).map_err(|reason| ("an answer that holds no secret", reason))?;
            if let Some(decl) = self.0.schema.get(resume_key) {
                if decl.reducer == crate::state::Reducer::Replace {
                    self.0.schema.check(resume_key, answer).map_err(|reason| (decl.ty.name(), reason))?;
                }
            }
        }
        Ok(())
    }

    fn policy(&self, node: NodeIx) -> Option<&tea_runtime::NodePolicy> {
        self.node(node).policy.as_ref()
    }

    fn pause_timeout(&self, node: NodeIx) -> Option<u64> {
        match &self.node(node).exec {
            Exec::Interrupt { timeout, .. } => *timeout,
            _ => None,
        }
    }

    fn sends(&self, node: NodeIx) -> bool {
        matches!(self.node(node).exec, Exec::Send { .. })
    }

    fn fork(&self, node: NodeIx) -> Option<Fork<'_, NodeIx>> {
        self.node(node).fork.as_ref().map(|(heads, join)| Fork { heads, join: *join })
    }

    fn apply(&self, state: &mut State, update: Update) -> Result<(), BoxError> {
        self.refuse_secrets(update.values())?;
        self.0.schema.apply(state, update)
    }

    fn join_update(&self, _join: NodeIx, update: Update) -> Option<Update> {
        // Branch writes to keys declared with a reducer merge at the fan-in; the rest stay in
        // their branch (and reach the fan-in through `parallel_results`).
        let schema = &self.0.schema;
        let values = update.into_values().ok()?;
        let mut kept = Map::new();
        let mut replaced = Vec::new();
        for (key, value) in values {
            if let Some(decl) = schema.get(&key) {
                if decl.reducer == crate::state::Reducer::Replace {
                    replaced.push(key.clone());
                }
                kept.insert(key, value);
            }
        }
        if kept.is_empty() {
            return None;
        }
        Some(Update::from_map(kept).with_replaced(replaced))
    }

    fn keeps_update_on_pause(&self, node: NodeIx) -> bool {
        matches!(self.node(node).exec, Exec::Interrupt { .. })
    }
}

impl actions::Host for YamlGraph {
    fn grants(&self) -> &Arc<crate::grants::AgentGrants> {
        &self.0.grants
    }

    fn a2a(&self) -> &crate::a2a::A2aSettings {
        &self.0.a2a
    }

    #[cfg(feature = "net")]
    fn vectors(&self) -> &Arc<crate::vectors::Vectors> {
        &self.0.vectors
    }

    fn encode(&self, node: &NodeName, state: &State) -> Result<Vec<u8>, tea_runtime::Error> {
        tea_runtime::encode_checkpoint(self, node, state)
    }

    fn decode(&self, bytes: &[u8], source: &str) -> Result<(NodeName, State), tea_runtime::Error> {
        tea_runtime::decode_checkpoint(self, bytes, source)
    }

    fn memory(&self) -> &crate::actions::Memory {
        &self.0.memory
    }

    fn saved(&self, path: &str) {
        if let Ok(mut last) = self.0.last_checkpoint.lock() {
            *last = path.to_owned();
        }
    }

    #[cfg(feature = "net")]
    fn prepare_net(
        &self,
        action: crate::net::NetAction,
        args: Value,
        state: &State,
    ) -> Result<crate::net::Call, BoxError> {
        YamlGraph::prepare_net(self, action, args, state)
    }
}

impl crate::actions::Composer for YamlGraph {
    fn render_on(&self, tree: &Tree, state: &State) -> Result<Value, String> {
        self.render(tree, &self.context(state, None))
    }

    fn run_lua(&self, chunk: ChunkId, state: &State) -> Result<Option<Map<String, Value>>, String> {
        self.0.lua.run(chunk, state.shared(), self.2.as_ref())
    }

    fn host(&self) -> &dyn actions::Host {
        self
    }

    fn render_with(&self, tree: &Tree, state: &State, locals: &Map<String, Value>) -> Result<Value, String> {
        let ctx = Mj::from_object(Scope {
            graph: self.clone(),
            state: Mj::from_object(StateObject(state.shared().clone())),
            result: None,
            secrets: false,
            locals: Some(Arc::new(locals.clone())),
        });
        self.render(tree, &ctx)
    }

    fn run_node(&self, name: &str, state: &State) -> Result<Option<Map<String, Value>>, BoxError> {
        let _depth = actions::enter_node_call(name)?;
        let def = self.0.nodes.iter().find(|n| n.name == *name).ok_or_else(|| format!("no node `{name}`"))?;
        let mut hitl = Hitl::default();
        let update = self.exec_as(&def.name, &def.exec, state, &mut hitl).map_err(|e| {
            let chain = tea_runtime::error_chain(&*e);
            format!("node `{name}`: {chain}")
        })?;
        match update {
            None => Ok(None),
            Some(update) => {
                let values = update.into_values()?;
                self.refuse_secrets(&values)?;
                Ok(Some(values))
            }
        }
    }
}

/// A YAML agent that pauses is refused at load without a checkpointer, so every agent that
/// runs without one cannot pause.
impl PauseFree for YamlGraph {}

/// A YAML agent runs with the blocking API too: the graph it runs there has no async node (its
/// network nodes wait for their requests on tea-yaml's runtime).
impl SyncGraph for YamlGraph {}
