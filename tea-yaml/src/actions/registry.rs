//! The registry of actions (`uses:`): [`Action`], what a node can use — the ones an
//! [`Engine`](crate::Engine) registers and the built-ins by name ([`built_in`]) — and calling
//! one ([`call`]) with what it sees of the agent it runs in ([`RunningAgent`], [`Composer`]).
//! The built-ins of the agent's own are here too: `checkpoint.save`, `checkpoint.load`,
//! `file.read`, `file.write`, `code.execute` (Python in a child process, in a trusted file) and
//! `ratelimit.wrap` (another action behind a process-wide rate limiter, `ratelimit.rs`); the
//! others are dispatched to their family's module (`memory.rs`, `builtins.rs`, `fallback.rs`,
//! `a2a.rs`, and with the feature `net` `net/` and `services/`).
//!
//! Registered actions and the built-ins (`checkpoint.save/load` use the engine's
//! `encode_checkpoint`/`decode_checkpoint`; `ratelimit.wrap` and its process-wide limiters), and
//! the names of The Edge Agent's actions tea lacks, which the loader refuses as such.

use super::memory::{Memory, MemoryOp};
use super::ratelimit::limiter_named;
use crate::grants::Access;
use crate::state::State;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tea_runtime::{BoxError, Error, NodeName};

/// An action registered with [`Engine::action`](crate::Engine::action): it gets the state and
/// the node's rendered `with:` arguments, and returns its result.
pub type ActionFn = dyn Fn(&State, &Value) -> Result<Value, BoxError> + Send + Sync;

/// An action a node can use.
#[derive(Clone)]
pub(crate) enum Action {
    User(Arc<ActionFn>),
    CheckpointSave,
    CheckpointLoad,
    FileRead,
    FileWrite,
    /// `memory.*` and `ltm.*`: the agent's memory, on its store when it has one.
    Memory(MemoryOp),
    /// `ratelimit.wrap`: `inner` (named `name`) run once the limiter `limiter` lets it, at
    /// most one call per `interval` across the process (The Edge Agent's global limiters).
    RateLimit {
        inner: Box<Action>,
        name: String,
        limiter: String,
        interval: std::time::Duration,
    },
    /// `json.parse`, `json.stringify`, `file.exists`, `file.delete`, `file.list`.
    Builtin(crate::actions::builtins::Builtin),
    /// DSPy's, TextGrad's and mem0's actions as The Edge Agent runs them without the library.
    Fallback(crate::actions::fallback::Fallback),
    /// `code.execute`: Python run in a child process, killed at its timeout, when the engine
    /// trusts the file (`trusted`, settled where the loader resolves every action), else The
    /// Edge Agent's "disabled" result.
    CodeExecute {
        trusted: bool,
    },
    /// `a2a.*`: messages, delegation, shared state and discovery between the agents of this
    /// process (`a2a.rs`); `fallback` is `a2a.delegate`'s `fallback.action`, resolved at load.
    A2a {
        op: crate::actions::a2a::A2a,
        fallback: Option<Box<Action>>,
    },
    /// `llm.call`, `http.get`, `http.post`, `actions.notify`: requests that run async.
    #[cfg(feature = "net")]
    Net(crate::actions::net::NetAction),
    /// `web.*`, `llamaextract.*`, `text.insert_citations`, `embedding.create`, `vector.*`,
    /// `rag.llamaindex.*`: hosted services' REST APIs, requests that run async.
    #[cfg(feature = "net")]
    Service(crate::actions::services::Service),
}

/// The built-in action named `name`.
pub(crate) fn built_in(name: &str) -> Option<Action> {
    Some(match name {
        "checkpoint.save" => Action::CheckpointSave,
        "checkpoint.load" => Action::CheckpointLoad,
        "file.read" => Action::FileRead,
        "file.write" => Action::FileWrite,
        other if MemoryOp::named(other).is_some() => Action::Memory(MemoryOp::named(other)?),
        other if crate::actions::builtins::Builtin::named(other).is_some() => {
            Action::Builtin(crate::actions::builtins::Builtin::named(other)?)
        }
        other if crate::actions::fallback::Fallback::named(other).is_some() => {
            Action::Fallback(crate::actions::fallback::Fallback::named(other)?)
        }
        "code.execute" => Action::CodeExecute { trusted: false },
        other if crate::actions::a2a::A2a::named(other).is_some() => {
            Action::A2a { op: crate::actions::a2a::A2a::named(other)?, fallback: None }
        }
        #[cfg(feature = "net")]
        other if crate::actions::services::Service::named(other).is_some() => {
            Action::Service(crate::actions::services::Service::named(other)?)
        }
        #[cfg(feature = "net")]
        other => Action::Net(crate::actions::net::NetAction::named(other)?),
        #[cfg(not(feature = "net"))]
        _ => return None,
    })
}

/// The agent an action runs in, as the built-in actions see it (the graph implements it, so this
/// module does not depend on the graph's).
pub(crate) trait RunningAgent {
    /// What the agent may reach (its folder, the operator's grants): every path an action
    /// opens is confined by it, every request checked.
    fn grants(&self) -> &Arc<crate::grants::AgentGrants>;
    /// The state at `node` as a checkpoint file of this agent.
    fn encode(&self, node: &NodeName, state: &State) -> Result<Vec<u8>, Error>;
    /// A checkpoint file of this agent (`source` names it in errors): its node and state.
    fn decode(&self, bytes: &[u8], source: &str) -> Result<(NodeName, State), Error>;
    /// Records the path `checkpoint.save` last wrote (`{{ checkpoint.last }}`).
    fn saved(&self, path: &str);
    /// The agent's key-value memory (`memory.*`).
    fn memory(&self) -> &Memory;
    /// Who the agent is among the process's agents (`settings.a2a`).
    fn a2a(&self) -> &crate::actions::a2a::A2aSettings;
    /// The agent's in-memory vector store (`vector.*`).
    #[cfg(feature = "net")]
    fn vectors(&self) -> &Arc<crate::actions::services::vectors::Vectors>;
    /// A network action's call, from its rendered arguments.
    #[cfg(feature = "net")]
    fn prepare_net(
        &self,
        action: crate::actions::net::NetAction,
        args: Value,
        state: &State,
    ) -> Result<crate::actions::net::Call, BoxError>;
}

/// What an action call knows of its run.
pub(crate) struct Call<'a> {
    pub(crate) host: &'a dyn RunningAgent,
    pub(crate) node: &'a NodeName,
    pub(crate) state: &'a State,
}

pub(crate) fn call(action: &Action, call: &Call<'_>, args: &Value) -> Result<Value, BoxError> {
    call_action(action, call, args)
}

fn call_action(action: &Action, call: &Call<'_>, args: &Value) -> Result<Value, BoxError> {
    match action {
        Action::User(f) => f(call.state, args),
        Action::Memory(op) => call.host.memory().call(*op, args),
        Action::Builtin(builtin) => builtin.call(call.host.grants(), args),
        Action::Fallback(fallback) => fallback.call(call.host.memory(), call.state, args),
        Action::CodeExecute { trusted: true } => Ok(crate::lang::python::code_execute(args, call.state.as_map())?),
        Action::CodeExecute { trusted: false } => Ok(crate::lang::python::code_not_run(
            "Code execution is disabled: tea runs `code.execute` (Python, which it cannot sandbox) only in a file \
             it trusts (`tea run --trust`, `Engine::trust_code(true)`)",
        )),
        Action::A2a { op, fallback } => {
            let mut result = crate::actions::a2a::call(*op, args, call.state.as_map(), call.host.a2a())?;
            // A delegation that timed out with `on_timeout: fallback_local` runs its action
            // here, with its rendered `with:`.
            if let Some((name, with)) = crate::actions::a2a::take_fallback(&mut result) {
                let Some(action) = fallback else {
                    return Err(
                        format!("a2a.delegate: its fallback `{name}` was not resolved when the file loaded").into()
                    );
                };
                let output = call_action(action, call, &with)?;
                crate::actions::a2a::fallback_done(&mut result, output);
            }
            Ok(result)
        }
        Action::RateLimit { inner, name, limiter, interval } => {
            let timeout = match args.get("timeout") {
                None | Some(Value::Null) => None,
                Some(t) => Some(
                    t.as_u64()
                        .ok_or_else(|| format!("ratelimit.wrap: `timeout` is a number of milliseconds, not {t}"))?,
                ),
            };
            let waited = limiter_named(limiter, *interval).wait(timeout).map_err(|estimated| {
                format!(
                    "ratelimit.wrap: limiter `{limiter}` would make `{name}` wait {estimated} ms, more than its \
                     `timeout` of {} ms",
                    timeout.unwrap_or_default()
                )
            })?;
            let inner_args = match args.get("args") {
                None | Some(Value::Null) => json!({}),
                Some(a @ Value::Object(_)) => a.clone(),
                Some(other) => {
                    return Err(format!("ratelimit.wrap: `args` of `{name}` is a mapping, not {other}").into())
                }
            };
            let mut result = call_action(inner, call, &inner_args)?;
            if let Value::Object(map) = &mut result {
                map.insert("_ratelimit_waited_ms".to_owned(), json!(waited));
                map.insert("_ratelimit_limiter".to_owned(), json!(limiter));
            }
            Ok(result)
        }
        Action::CheckpointSave => checkpoint_save(call, args),
        Action::CheckpointLoad => checkpoint_load(call, args),
        Action::FileRead => {
            let path = path_arg(call, args, "file.read", Access::Read)?;
            let bytes = crate::grants::files::read_regular(&path, crate::grants::files::MAX_READ_FILE)
                .map_err(|e| format!("file.read: cannot read `{}`: {e}", path.display()))?;
            let content = String::from_utf8(bytes)
                .map_err(|e| format!("file.read: cannot read `{}`: it is not UTF-8: {e}", path.display()))?;
            Ok(json!({ "content": content }))
        }
        Action::FileWrite => {
            let path = path_arg(call, args, "file.write", Access::Write)?;
            let content = match &args["content"] {
                Value::String(s) => s.clone(),
                Value::Null => return Err("file.write needs `with: { path, content }`; `content` is missing".into()),
                other => other.to_string(),
            };
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent)
                    .map_err(|e| format!("file.write: cannot create directory `{}`: {e}", parent.display()))?;
            }
            std::fs::write(&path, content.as_bytes())
                .map_err(|e| format!("file.write: cannot write `{}`: {e}", path.display()))?;
            Ok(json!({ "path": path.display().to_string(), "bytes": content.len() }))
        }
        // The blocking API: the request runs on tea-yaml's runtime while this thread waits.
        #[cfg(feature = "net")]
        Action::Net(action) => {
            crate::actions::net::block_on(call.host.prepare_net(*action, args.clone(), call.state)?, call.host.grants())
        }
        #[cfg(feature = "net")]
        Action::Service(service) => {
            let host = call.host;
            let call = crate::actions::services::prepare(*service, args.clone(), host.grants(), host.vectors())?;
            crate::actions::net::block_on(call, host.grants())
        }
    }
}

/// `with.path`, relative to the agent file's directory, confined to what the agent may
/// `access` (the path to use).
fn path_arg(call: &Call<'_>, args: &Value, action: &str, access: Access) -> Result<PathBuf, BoxError> {
    match args.get("path") {
        Some(Value::String(path)) if !path.is_empty() => {
            Ok(call.host.grants().confine(path, access).map_err(|e| format!("{action}: {e}"))?)
        }
        _ => Err(format!("{action} needs `with: {{ path: … }}`, a non-empty string").into()),
    }
}

pub(crate) use crate::grants::files::resolve;

/// Writes the state and the node as a checkpoint file. Its failures are in its result, but
/// for a path the agent may not write, which fails the node.
fn checkpoint_save(call: &Call<'_>, args: &Value) -> Result<Value, BoxError> {
    if !matches!(args.get("path"), Some(Value::String(p)) if !p.is_empty()) {
        return Ok(json!({ "saved": false, "error": "checkpoint.save needs `with: { path: … }`, a non-empty string" }));
    }
    let path = path_arg(call, args, "checkpoint.save", Access::Write)?;
    let shown = path.display().to_string();
    let written = (|| -> Result<(), String> {
        let bytes = call.host.encode(call.node, call.state).map_err(|e| e.to_string())?;
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| format!("cannot create `{}`: {e}", parent.display()))?;
        }
        // Write beside, then rename: a reader never sees half a checkpoint. The temporary
        // name is the file's whole name and a number of its own, so saves to `ck.0` and `ck.1`
        // (or two saves to one path at once) never share one.
        let tmp = temporary(&path);
        let written = std::fs::write(&tmp, &bytes)
            .map_err(|e| format!("cannot write `{}`: {e}", tmp.display()))
            .and_then(|()| std::fs::rename(&tmp, &path).map_err(|e| format!("cannot rename to `{shown}`: {e}")));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written
    })();
    // An absolute path: `{{ checkpoint.last }}` is used again from other directories.
    let shown = path.canonicalize().map_or(shown, |p| p.display().to_string());
    Ok(match written {
        Ok(()) => {
            call.host.saved(&shown);
            json!({ "checkpoint_path": shown, "saved": true })
        }
        Err(error) => json!({ "checkpoint_path": shown, "saved": false, "error": error }),
    })
}

/// A temporary path beside `path` that no other save (of this process) uses: `.NAME.tmp-PID-N`.
fn temporary(path: &Path) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = path.file_name().map_or_else(|| "checkpoint".into(), |n| n.to_string_lossy().into_owned());
    path.with_file_name(format!(".{name}.tmp-{}-{n}", std::process::id()))
}

/// Reads a checkpoint file: its state and node, or an error in the result. A file another agent
/// (or another version of this one) saved gives its state and node too, as in The Edge Agent:
/// the node is the other agent's.
fn checkpoint_load(call: &Call<'_>, args: &Value) -> Result<Value, BoxError> {
    if !matches!(args.get("path"), Some(Value::String(p)) if !p.is_empty()) {
        return Ok(json!({ "error": "checkpoint.load needs `with: { path: … }`, a non-empty string" }));
    }
    let path = path_arg(call, args, "checkpoint.load", Access::Read)?;
    let shown = path.display().to_string();
    let bytes = match crate::grants::files::read_regular(&path, crate::grants::files::MAX_CHECKPOINT_FILE) {
        Ok(bytes) => bytes,
        Err(e) => return Ok(json!({ "error": format!("cannot read `{shown}`: {e}") })),
    };
    Ok(match call.host.decode(&bytes, &shown) {
        Ok((node, state)) => json!({ "checkpoint_state": state.to_json(), "checkpoint_node": node.as_str() }),
        Err(Error::GraphMismatch { .. } | Error::SchemaMismatch { .. }) => {
            match tea_runtime::read_foreign_checkpoint(&bytes, &shown) {
                Ok(other) => json!({
                    "checkpoint_state": other.state,
                    "checkpoint_node": other.node.as_ref().map(NodeName::as_str),
                }),
                Err(e) => json!({ "error": e.to_string() }),
            }
        }
        Err(e) => json!({ "error": e.to_string() }),
    })
}

/// How deep nodes run by composed actions (`retry.loop`'s correction) may run one another on
/// a thread: a loop body's `retry.loop` may name the loop's own node.
const MAX_NODE_CALLS: usize = 16;

thread_local! {
    /// Node calls in progress on this thread, and whether one went too deep (then every call
    /// up the stack fails at once instead of correcting again, up to the graph's own node).
    static NODE_CALLS: std::cell::Cell<(usize, bool)> = const { std::cell::Cell::new((0, false)) };
}

/// A node call in progress ([`enter_node_call`]); its end is counted when it drops.
pub(crate) struct NodeCall(());

impl Drop for NodeCall {
    fn drop(&mut self) {
        NODE_CALLS.with(|c| {
            let (depth, over) = c.get();
            c.set((depth.saturating_sub(1), over));
        });
    }
}

/// Starts a call of node `name` from a composed action: an error when calls go more than
/// [`MAX_NODE_CALLS`] deep (or went, further down, during this call).
pub(crate) fn enter_node_call(name: &str) -> Result<NodeCall, String> {
    NODE_CALLS.with(|c| {
        let (depth, over) = c.get();
        // A call from the graph itself starts afresh.
        let over = over && depth > 0;
        if over || depth >= MAX_NODE_CALLS {
            c.set((depth, true));
            return Err(format!("node `{name}`: correction nodes run one another more than {MAX_NODE_CALLS} deep"));
        }
        c.set((depth + 1, false));
        Ok(NodeCall(()))
    })
}

/// Whether a node call on this thread went too deep: the callers give up rather than retry.
pub(crate) fn node_calls_overflowed() -> bool {
    NODE_CALLS.with(|c| c.get().1)
}

/// What a composed action (`actions/compose/`, `actions/extraction/`) needs of the agent it runs in,
/// beyond [`RunningAgent`] (the graph implements it).
pub(crate) trait Composer: RunningAgent {
    /// `tree` rendered with `state` as the templates' `state`.
    fn render_on(&self, tree: &crate::lang::template::Tree, state: &State) -> Result<Value, String>;
    /// Runs Lua chunk `chunk` on `state`: the table it returned.
    fn run_lua(
        &self,
        chunk: crate::lang::lua::ChunkId,
        state: &State,
    ) -> Result<Option<serde_json::Map<String, Value>>, String>;
    /// This agent as the [`RunningAgent`] of the actions a step calls.
    fn host(&self) -> &dyn RunningAgent;
    /// `tree` rendered with `state` as the templates' `state` and `locals` as names of their
    /// own (a probe's item fields; `state`, `variables` and the agent's other names win).
    fn render_with(
        &self,
        tree: &crate::lang::template::Tree,
        state: &State,
        locals: &serde_json::Map<String, Value>,
    ) -> Result<Value, String>;
    /// Runs node `name` of the graph on `state` (`retry.loop`'s correction): its update. No
    /// edge is followed; the loader made sure the node cannot pause.
    fn run_node(&self, name: &str, state: &State) -> Result<Option<serde_json::Map<String, Value>>, BoxError>;
}

/// The engine's `prolog.query` action: one for the process, so that the loader knows it (and
/// binds the `{{ }}` of its `code` as terms) from an action a host registers under its name.
#[cfg(feature = "prolog")]
pub(crate) fn prolog_query() -> std::sync::Arc<ActionFn> {
    static ACTION: std::sync::OnceLock<std::sync::Arc<ActionFn>> = std::sync::OnceLock::new();
    ACTION
        .get_or_init(|| {
            std::sync::Arc::new(|state: &crate::State, args: &serde_json::Value| {
                crate::lang::prolog::query(state.shared(), args).map_err(tea_runtime::BoxError::from)
            })
        })
        .clone()
}
