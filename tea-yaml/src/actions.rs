//! Actions (`uses:`): the ones an [`Engine`](crate::Engine) registers, and the built-ins
//! `checkpoint.save`, `checkpoint.load`, `file.read`, `file.write`, and with the feature `net`
//! `llm.call`, `http.get`, `http.post`, `actions.notify` (in `net.rs`).

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
    /// `llm.call`, `http.get`, `http.post`, `actions.notify`: requests that run async.
    #[cfg(feature = "net")]
    Net(crate::net::NetAction),
}

/// The built-in actions' names.
pub(crate) const BUILT_IN_NAMES: [&str; 8] = [
    "checkpoint.save",
    "checkpoint.load",
    "file.read",
    "file.write",
    "llm.call",
    "http.get",
    "http.post",
    "actions.notify",
];

/// The built-ins that reach the network, which need the feature `net`.
pub(crate) const NET_NAMES: [&str; 4] = ["llm.call", "http.get", "http.post", "actions.notify"];

/// The built-in action named `name`.
pub(crate) fn built_in(name: &str) -> Option<Action> {
    Some(match name {
        "checkpoint.save" => Action::CheckpointSave,
        "checkpoint.load" => Action::CheckpointLoad,
        "file.read" => Action::FileRead,
        "file.write" => Action::FileWrite,
        #[cfg(feature = "net")]
        other => Action::Net(crate::net::NetAction::named(other)?),
        #[cfg(not(feature = "net"))]
        _ => return None,
    })
}

/// What the built-in actions need of the agent they run in (the graph implements it, so this
/// module does not depend on the graph's).
pub(crate) trait Host {
    /// Where the agent file's relative paths start.
    fn base_dir(&self) -> &Path;
    /// The state at `node` as a checkpoint file of this agent.
    fn encode(&self, node: &NodeName, state: &State) -> Result<Vec<u8>, Error>;
    /// A checkpoint file of this agent (`source` names it in errors): its node and state.
    fn decode(&self, bytes: &[u8], source: &str) -> Result<(NodeName, State), Error>;
    /// Records the path `checkpoint.save` last wrote (`{{ checkpoint.last }}`).
    fn saved(&self, path: &str);
    /// A network action's call, from its rendered arguments.
    #[cfg(feature = "net")]
    fn prepare_net(
        &self,
        action: crate::net::NetAction,
        args: Value,
        state: &State,
    ) -> Result<crate::net::Call, BoxError>;
}

/// What an action call knows of its run.
pub(crate) struct Call<'a> {
    pub(crate) host: &'a dyn Host,
    pub(crate) node: &'a NodeName,
    pub(crate) state: &'a State,
}

pub(crate) fn call(action: &Action, call: &Call<'_>, args: &Value) -> Result<Value, BoxError> {
    match action {
        Action::User(f) => f(call.state, args),
        Action::CheckpointSave => Ok(checkpoint_save(call, args)),
        Action::CheckpointLoad => Ok(checkpoint_load(call, args)),
        Action::FileRead => {
            let path = path_arg(call, args, "file.read")?;
            let bytes = crate::files::read_regular(&path, crate::files::MAX_READ_FILE)
                .map_err(|e| format!("file.read: cannot read `{}`: {e}", path.display()))?;
            let content = String::from_utf8(bytes)
                .map_err(|e| format!("file.read: cannot read `{}`: it is not UTF-8: {e}", path.display()))?;
            Ok(json!({ "content": content }))
        }
        Action::FileWrite => {
            let path = path_arg(call, args, "file.write")?;
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
        Action::Net(action) => crate::net::block_on(call.host.prepare_net(*action, args.clone(), call.state)?),
    }
}

/// `with.path`, relative to the agent file's directory.
fn path_arg(call: &Call<'_>, args: &Value, action: &str) -> Result<PathBuf, BoxError> {
    match args.get("path") {
        Some(Value::String(path)) if !path.is_empty() => Ok(resolve(call.host.base_dir(), path)),
        _ => Err(format!("{action} needs `with: {{ path: … }}`, a non-empty string").into()),
    }
}

pub(crate) fn resolve(base: &Path, path: &str) -> PathBuf {
    let path = Path::new(path);
    let joined = if path.is_absolute() { path.to_path_buf() } else { base.join(path) };
    // `./checkpoints` is `checkpoints`: paths print the way a person would write them.
    joined.components().filter(|c| !matches!(c, std::path::Component::CurDir)).collect()
}

/// Writes the state and the node as a checkpoint file; never fails the node.
fn checkpoint_save(call: &Call<'_>, args: &Value) -> Value {
    let path = match path_arg(call, args, "checkpoint.save") {
        Ok(path) => path,
        Err(e) => return json!({ "saved": false, "error": e.to_string() }),
    };
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
    match written {
        Ok(()) => {
            call.host.saved(&shown);
            json!({ "checkpoint_path": shown, "saved": true })
        }
        Err(error) => json!({ "checkpoint_path": shown, "saved": false, "error": error }),
    }
}

/// A temporary path beside `path` that no other save (of this process) uses: `.NAME.tmp-PID-N`.
fn temporary(path: &Path) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = path.file_name().map_or_else(|| "checkpoint".into(), |n| n.to_string_lossy().into_owned());
    path.with_file_name(format!(".{name}.tmp-{}-{n}", std::process::id()))
}

/// Reads a checkpoint file of this agent: its state and node, or an error in the result.
fn checkpoint_load(call: &Call<'_>, args: &Value) -> Value {
    let path = match path_arg(call, args, "checkpoint.load") {
        Ok(path) => path,
        Err(e) => return json!({ "error": e.to_string() }),
    };
    let shown = path.display().to_string();
    let bytes = match crate::files::read_regular(&path, crate::files::MAX_CHECKPOINT_FILE) {
        Ok(bytes) => bytes,
        Err(e) => return json!({ "error": format!("cannot read `{shown}`: {e}") }),
    };
    match call.host.decode(&bytes, &shown) {
        Ok((node, state)) => json!({ "checkpoint_state": state.to_json(), "checkpoint_node": node.as_str() }),
        Err(e) => json!({ "error": e.to_string() }),
    }
}
