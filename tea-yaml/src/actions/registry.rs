//! Actions (`uses:`): the ones an [`Engine`](crate::Engine) registers, and the built-ins
//! `checkpoint.save`, `checkpoint.load`, `file.read`, `file.write`, `memory.store`/`retrieve`/
//! `delete`/`clear` (the agent's key-value memory), `ratelimit.wrap` (another action behind a
//! process-wide rate limiter), `code.execute` (Python in a child process, in a trusted file),
//! the small ones of `builtins.rs`, DSPy's, TextGrad's and mem0's as The Edge Agent runs them
//! without the library (`fallback.rs`), `a2a.*` (`a2a.rs`), and with the feature `net`
//! `llm.call`, `http.get`, `http.post`, `actions.notify` (in `net.rs`) and the hosted
//! services' (`services.rs`).

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
    /// `memory.store`, `memory.retrieve`, `memory.delete`, `memory.clear`: the agent's
    /// key-value memory.
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
    Builtin(crate::builtins::Builtin),
    /// DSPy's, TextGrad's and mem0's actions as The Edge Agent runs them without the library.
    Fallback(crate::fallback::Fallback),
    /// `code.execute`: Python run in a child process, killed at its timeout, when the engine
    /// trusts the file (`trusted`, settled where the loader resolves every action), else The
    /// Edge Agent's "disabled" result.
    CodeExecute {
        trusted: bool,
    },
    /// `a2a.*`: messages, delegation, shared state and discovery between the agents of this
    /// process (`a2a.rs`); `fallback` is `a2a.delegate`'s `fallback.action`, resolved at load.
    A2a {
        op: crate::a2a::A2a,
        fallback: Option<Box<Action>>,
    },
    /// `llm.call`, `http.get`, `http.post`, `actions.notify`: requests that run async.
    #[cfg(feature = "net")]
    Net(crate::net::NetAction),
    /// `web.*`, `llamaextract.*`, `text.insert_citations`, `embedding.create`, `vector.*`,
    /// `rag.llamaindex.*`: hosted services' REST APIs, requests that run async.
    #[cfg(feature = "net")]
    Service(crate::services::Service),
}

/// The built-in actions' names.
pub(crate) const BUILT_IN_NAMES: [&str; 25] = [
    "json.parse",
    "json.stringify",
    "file.exists",
    "file.delete",
    "file.list",
    "ratelimit.wrap",
    "memory.store",
    "memory.retrieve",
    "memory.delete",
    "memory.clear",
    "checkpoint.save",
    "checkpoint.load",
    "file.read",
    "file.write",
    "llm.call",
    "llm.chat",
    "llm.embed",
    "http.get",
    "http.post",
    "actions.notify",
    "reflection.loop",
    "reason.cot",
    "reason.react",
    "reason.self_correct",
    "reason.decompose",
];

/// The built-ins that reach the network, which need the feature `net`.
pub(crate) const NET_NAMES: [&str; 24] = [
    "llm.call",
    "llm.chat",
    "llm.embed",
    "http.get",
    "http.post",
    "actions.notify",
    "web.search",
    "web.scrape",
    "web.crawl",
    "web.ai_scrape",
    "llamaextract.extract",
    "llamaextract.submit_job",
    "llamaextract.poll_status",
    "llamaextract.get_result",
    "text.insert_citations",
    "embedding.create",
    "vector.store",
    "vector.query",
    "rag.llamaindex.query",
    "rag.llamaindex.router",
    "rag.llamaindex.subquestion",
    "rag.llamaindex.create_index",
    "rag.llamaindex.load_index",
    "rag.llamaindex.add_documents",
];

/// The Edge Agent's families of actions that tea does not have, by the first part of their
/// name, and what each needs: an action of one of them is refused at load as The Edge Agent's
/// (not as a misspelling).
const EDGE_AGENT_FAMILIES: &[(&str, &str)] = &[
    ("a2a", "agent-to-agent messaging between processes"),
    ("academic", "searches of academic indexes"),
    ("agent", "multi-agent orchestration over its LLM providers"),
    ("auth", "request authentication"),
    ("bmad", "its BMad story files"),
    ("cache", "its cache backends"),
    ("catalog", "its data catalog backends"),
    ("code", "running generated code"),
    ("context", "its context assembly"),
    ("csv", "CSV parsing"),
    ("data", "its tabular data store"),
    ("error", "its error-handling state"),
    ("file", "file operations"),
    ("firestore", "Google Firestore"),
    ("git", "git operations"),
    ("github", "the GitHub API"),
    ("graph", "graph databases (Cozo, Kùzu, Neo4j)"),
    ("http", "HTTP methods beyond `http.get` and `http.post`, and its server's responses"),
    ("json", "JSON transforms"),
    ("learn", "TextGrad prompt optimisation"),
    ("llamaextract", "LlamaExtract, a hosted extraction service"),
    ("ltm", "its long-term memory backends"),
    ("markdown", "Markdown parsing"),
    ("memory", "its memory backends (mem0, key-value stores)"),
    ("neo4j", "Neo4j"),
    ("obs", "its observability event log"),
    ("opik", "Opik tracing"),
    ("plan", "LLM planning over its providers"),
    ("rag", "LlamaIndex retrieval"),
    ("ratelimit", "rate limiters shared between nodes"),
    ("reason", "LLM reasoning patterns and DSPy"),
    ("reflection", "LLM reflection loops"),
    ("retry", "retry loops around other actions"),
    ("schema", "JSON-schema merging"),
    ("secrets", "reading secrets into the state"),
    ("semtools", "semantic search over files"),
    ("session", "its session stores"),
    ("storage", "cloud object storage"),
    ("text", "citation formatting"),
    ("textgrad", "TextGrad prompt optimisation"),
    ("tools", "CrewAI, LangChain and MCP tools"),
    ("trace", "its trace spans"),
    ("validate", "LLM extraction validation"),
    ("vector", "indexing files into its vector stores"),
    ("web", "web scraping and search services"),
];

/// The names of The Edge Agent's actions that tea does not have (its Python and Rust engines'
/// registries at the corpus's commit; each also answers to `actions.NAME` there), sorted.
const EDGE_AGENT_NAMES: &[&str] = &[
    "academic.arxiv",
    "academic.crossref",
    "academic.pubmed",
    "agent.crewai_delegate",
    "auth.get_user",
    "auth.verify",
    "bmad.parse_story",
    "cache.get",
    "cache.invalidate",
    "cache.wrap",
    "catalog.create_snapshot",
    "catalog.get_changed_files",
    "catalog.get_file",
    "catalog.get_latest_snapshot",
    "catalog.get_table",
    "catalog.list_files",
    "catalog.list_snapshots",
    "catalog.list_tables",
    "catalog.register_table",
    "catalog.track_file",
    "code.sandbox",
    "context.assemble",
    "csv.parse",
    "csv.stringify",
    "data.consolidate",
    "data.create_table",
    "data.delete",
    "data.filter",
    "data.insert",
    "data.merge",
    "data.query",
    "data.update",
    "data.validate",
    "error.clear",
    "error.get",
    "error.has",
    "error.is_retryable",
    "error.respond",
    "error.retry",
    "error.type",
    "firestore.batch",
    "firestore.delete",
    "firestore.get",
    "firestore.query",
    "firestore.set",
    "git.current_branch",
    "git.status",
    "git.worktree_create",
    "git.worktree_list",
    "git.worktree_merge",
    "git.worktree_remove",
    "github.create_issue",
    "github.list_issues",
    "github.search_issues",
    "github.update_issue",
    "graph.add_labels",
    "graph.algorithm",
    "graph.check_vector_support",
    "graph.create",
    "graph.create_vector_index",
    "graph.delete_entities_batch",
    "graph.delete_entity",
    "graph.delete_relation",
    "graph.drop",
    "graph.drop_vector_index",
    "graph.list_graphs",
    "graph.list_vector_indexes",
    "graph.merge_entity",
    "graph.merge_relation",
    "graph.query",
    "graph.remove_labels",
    "graph.retrieve_context",
    "graph.shortest_path",
    "graph.store_entities_batch",
    "graph.store_entity",
    "graph.store_relation",
    "graph.store_relations_batch",
    "graph.update_entity",
    "graph.update_relation",
    "graph.vector_search",
    "http.delete",
    "http.put",
    "http.respond",
    "json.transform",
    "llamaextract.delete_agent",
    "llamaextract.get_agent",
    "llamaextract.list_agents",
    "llamaextract.upload_agent",
    "llm.complete",
    "llm.local.call",
    "llm.local.chat",
    "llm.local.embed",
    "llm.local.stream",
    "llm.retry",
    "llm.similarity",
    "llm.stream",
    "llm.tools",
    "ltm.delete",
    "ltm.retrieve",
    "ltm.search",
    "ltm.store",
    "markdown.extract_tasks",
    "markdown.extract_variables",
    "markdown.parse",
    "memory.backfill_embeddings",
    "memory.cloud_list",
    "memory.cloud_retrieve",
    "memory.cloud_store",
    "memory.embed",
    "memory.embed_batch",
    "memory.grep",
    "memory.manifest_search",
    "memory.manifest_update",
    "memory.search_content",
    "memory.sql_query",
    "memory.summarize",
    "memory.vector_build_index",
    "memory.vector_load_data",
    "memory.vector_search",
    "memory.vector_search_by_embedding",
    "memory.vector_stats",
    "neo4j.check_apoc",
    "neo4j.check_triggers",
    "neo4j.cleanup_triggers",
    "neo4j.gds_all_shortest_paths",
    "neo4j.gds_astar",
    "neo4j.gds_betweenness",
    "neo4j.gds_check_available",
    "neo4j.gds_closeness",
    "neo4j.gds_degree",
    "neo4j.gds_dijkstra",
    "neo4j.gds_drop_graph",
    "neo4j.gds_estimate_memory",
    "neo4j.gds_knn",
    "neo4j.gds_label_propagation",
    "neo4j.gds_list_graphs",
    "neo4j.gds_louvain",
    "neo4j.gds_node_similarity",
    "neo4j.gds_page_rank",
    "neo4j.gds_project_graph",
    "neo4j.gds_version",
    "neo4j.gds_wcc",
    "neo4j.get_apoc_version",
    "neo4j.list_triggers",
    "neo4j.pause_trigger",
    "neo4j.register_callback",
    "neo4j.register_state_update",
    "neo4j.register_trigger",
    "neo4j.resume_trigger",
    "neo4j.unregister_trigger",
    "obs.get_flow_log",
    "obs.log_event",
    "obs.query_events",
    "opik.healthcheck",
    "reflection.correct",
    "reflection.evaluate",
    "secrets.get",
    "secrets.has",
    "semtools.search",
    "session.archive",
    "session.archive_expired",
    "session.create",
    "session.delete",
    "session.end",
    "session.exists",
    "session.get",
    "session.list",
    "session.load",
    "session.restore",
    "session.save",
    "storage.copy",
    "storage.delete",
    "storage.exists",
    "storage.hash",
    "storage.info",
    "storage.list",
    "storage.mkdir",
    "storage.native",
    "tools.clear_cache",
    "tools.crewai",
    "tools.discover",
    "tools.langchain",
    "tools.list",
    "tools.mcp",
    "trace.end",
    "trace.log",
    "trace.start",
    "validate.generate_prompt",
    "validate.input",
    "validate.schema",
    "vector.index_files",
];

/// Why tea refuses action `name`, when it is one of The Edge Agent's that tea does not have.
pub(crate) fn edge_agent_only(name: &str) -> Option<String> {
    let name = name.strip_prefix("actions.").unwrap_or(name);
    EDGE_AGENT_NAMES.binary_search(&name).ok()?;
    if name.starts_with("llm.") || name.starts_with("embedding.") {
        return Some(format!(
            "`{name}` is not supported by tea (one of The Edge Agent's LLM actions over its local models and \
             streams): tea has `llm.call`, `llm.chat` and `llm.embed` on its providers"
        ));
    }
    let family = name.split('.').next().unwrap_or(name);
    let what = EDGE_AGENT_FAMILIES.iter().find(|(f, _)| *f == family).map_or("", |(_, w)| w);
    Some(format!("`{name}` is not supported by tea (one of The Edge Agent's `{family}.*` actions: {what})"))
}

/// The built-in action named `name`.
pub(crate) fn built_in(name: &str) -> Option<Action> {
    Some(match name {
        "checkpoint.save" => Action::CheckpointSave,
        "checkpoint.load" => Action::CheckpointLoad,
        "file.read" => Action::FileRead,
        "file.write" => Action::FileWrite,
        "memory.store" => Action::Memory(MemoryOp::Store),
        "memory.retrieve" => Action::Memory(MemoryOp::Retrieve),
        "memory.delete" => Action::Memory(MemoryOp::Delete),
        "memory.clear" => Action::Memory(MemoryOp::Clear),
        other if crate::builtins::Builtin::named(other).is_some() => {
            Action::Builtin(crate::builtins::Builtin::named(other)?)
        }
        other if crate::fallback::Fallback::named(other).is_some() => {
            Action::Fallback(crate::fallback::Fallback::named(other)?)
        }
        "code.execute" => Action::CodeExecute { trusted: false },
        other if crate::a2a::A2a::named(other).is_some() => {
            Action::A2a { op: crate::a2a::A2a::named(other)?, fallback: None }
        }
        #[cfg(feature = "net")]
        other if crate::services::Service::named(other).is_some() => {
            Action::Service(crate::services::Service::named(other)?)
        }
        #[cfg(feature = "net")]
        other => Action::Net(crate::net::NetAction::named(other)?),
        #[cfg(not(feature = "net"))]
        _ => return None,
    })
}

/// What the built-in actions need of the agent they run in (the graph implements it, so this
/// module does not depend on the graph's).
pub(crate) trait Host {
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
    fn a2a(&self) -> &crate::a2a::A2aSettings;
    /// The agent's in-memory vector store (`vector.*`).
    #[cfg(feature = "net")]
    fn vectors(&self) -> &Arc<crate::vectors::Vectors>;
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
    call_action(action, call, args)
}

fn call_action(action: &Action, call: &Call<'_>, args: &Value) -> Result<Value, BoxError> {
    match action {
        Action::User(f) => f(call.state, args),
        Action::Memory(op) => call.host.memory().call(*op, args),
        Action::Builtin(builtin) => builtin.call(call.host.grants(), args),
        Action::Fallback(fallback) => fallback.call(call.host.memory(), call.state, args),
        Action::CodeExecute { trusted: true } => Ok(crate::python::code_execute(args, call.state.as_map())?),
        Action::CodeExecute { trusted: false } => Ok(crate::python::code_not_run(
            "Code execution is disabled: tea runs `code.execute` (Python, which it cannot sandbox) only in a file \
             it trusts (`tea run --trust`, `Engine::trust_code(true)`)",
        )),
        Action::A2a { op, fallback } => {
            let mut result = crate::a2a::call(*op, args, call.state.as_map(), call.host.a2a())?;
            // A delegation that timed out with `on_timeout: fallback_local` runs its action
            // here, with its rendered `with:`.
            if let Some((name, with)) = crate::a2a::take_fallback(&mut result) {
                let Some(action) = fallback else {
                    return Err(
                        format!("a2a.delegate: its fallback `{name}` was not resolved when the file loaded").into()
                    );
                };
                let output = call_action(action, call, &with)?;
                crate::a2a::fallback_done(&mut result, output);
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
            let bytes = crate::files::read_regular(&path, crate::files::MAX_READ_FILE)
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
            crate::net::block_on(call.host.prepare_net(*action, args.clone(), call.state)?, call.host.grants())
        }
        #[cfg(feature = "net")]
        Action::Service(service) => {
            let host = call.host;
            let call = crate::services::prepare(*service, args.clone(), host.grants(), host.vectors())?;
            crate::net::block_on(call, host.grants())
        }
    }
}

/// One of the `memory.*` actions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MemoryOp {
    Store,
    Retrieve,
    Delete,
    Clear,
}

/// How many keys an agent's memory holds at most: a `memory.store` beyond it fails (in its
/// result, as The Edge Agent's store failures).
pub(crate) const MAX_MEMORY_KEYS: usize = 100_000;
/// How many bytes (as JSON text) an agent's memory holds at most, over all its values.
pub(crate) const MAX_MEMORY_BYTES: usize = 64 << 20;

/// An agent's key-value memory (The Edge Agent's `memory.store`/`retrieve` on its in-memory
/// backend): values by namespace and key, each with an optional expiry. It lives as long as
/// the loaded agent, in this process, outside the state (so outside checkpoints).
#[derive(Debug, Default)]
pub(crate) struct Memory {
    entries: std::sync::Mutex<std::collections::HashMap<Slot, Entry>>,
}

/// A memory value's namespace and key.
type Slot = (String, String);
/// A memory value, when it expires, and its size as JSON text.
type Entry = (Value, Option<std::time::Instant>, usize);

impl Memory {
    /// Runs `op` with the rendered `args`: `key`, `value`, `ttl` (seconds), `default`,
    /// `namespace` (`default`). Results as The Edge Agent's: `{stored, key, namespace}`,
    /// `{value, found, key}`, `{deleted, key}`, `{cleared}`.
    fn call(&self, op: MemoryOp, args: &Value) -> Result<Value, BoxError> {
        let what = match op {
            MemoryOp::Store => "memory.store",
            MemoryOp::Retrieve => "memory.retrieve",
            MemoryOp::Delete => "memory.delete",
            MemoryOp::Clear => "memory.clear",
        };
        let namespace = match args.get("namespace") {
            None | Some(Value::Null) => "default".to_owned(),
            Some(Value::String(n)) => n.clone(),
            Some(other) => other.to_string(),
        };
        let key = match args.get("key") {
            Some(Value::String(k)) if !k.is_empty() => Some(k.clone()),
            None | Some(Value::Null) => None,
            Some(Value::String(_)) => None,
            Some(other) => Some(other.to_string()),
        };
        let now = std::time::Instant::now();
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|_, (_, expires, _)| expires.is_none_or(|at| at > now));
        Ok(match op {
            MemoryOp::Clear => {
                entries.retain(|(ns, _), _| *ns != namespace);
                json!({ "cleared": true, "namespace": namespace })
            }
            _ => {
                let Some(key) = key else { return Err(format!("{what} needs `with: {{ key: … }}`").into()) };
                let slot = (namespace.clone(), key.clone());
                match op {
                    MemoryOp::Store => {
                        let Some(value) = args.get("value") else {
                            return Err(format!("{what} needs `value`").into());
                        };
                        let ttl =
                            match args.get("ttl") {
                                None | Some(Value::Null) => None,
                                Some(t) => Some(t.as_f64().filter(|t| *t > 0.0 && t.is_finite()).ok_or_else(|| {
                                    format!("{what}: `ttl` is a positive number of seconds, not {t}")
                                })?),
                            };
                        let size = serde_json::to_vec(value).map_or(0, |v| v.len()) + key.len() + namespace.len();
                        let held: usize = entries.iter().filter(|(s, _)| **s != slot).map(|(_, (_, _, n))| *n).sum();
                        let full = if entries.len() >= MAX_MEMORY_KEYS && !entries.contains_key(&slot) {
                            Some(format!("the agent's memory holds {MAX_MEMORY_KEYS} keys, its limit"))
                        } else if held + size > MAX_MEMORY_BYTES {
                            Some(format!("the agent's memory would hold more than {MAX_MEMORY_BYTES} bytes, its limit"))
                        } else {
                            None
                        };
                        if let Some(error) = full {
                            return Ok(json!({ "stored": false, "key": key, "error": error }));
                        }
                        let expires = ttl
                            .and_then(|t| std::time::Duration::try_from_secs_f64(t).ok())
                            .and_then(|d| now.checked_add(d));
                        entries.insert(slot, (value.clone(), expires, size));
                        json!({ "stored": true, "key": key, "namespace": namespace })
                    }
                    MemoryOp::Retrieve => match entries.get(&slot) {
                        Some((value, _, _)) => json!({ "value": value, "found": true, "key": key }),
                        None => json!({
                            "value": args.get("default").cloned().unwrap_or(Value::Null),
                            "found": false,
                            "key": key,
                        }),
                    },
                    MemoryOp::Delete => json!({ "deleted": entries.remove(&slot).is_some(), "key": key }),
                    MemoryOp::Clear => json!({ "cleared": true }),
                }
            }
        })
    }
}

/// DSPy's, TextGrad's and mem0's fallbacks keep what they keep in the agent's memory.
impl crate::fallback::Keep for Memory {
    fn kept(&self, namespace: &str, key: &str) -> Result<Option<Value>, BoxError> {
        let found = self.call(MemoryOp::Retrieve, &json!({ "namespace": namespace, "key": key }))?;
        Ok(match found.get("found") {
            Some(Value::Bool(true)) => found.get("value").cloned(),
            _ => None,
        })
    }

    fn keep(&self, namespace: &str, key: &str, value: &Value) -> Result<Value, BoxError> {
        self.call(MemoryOp::Store, &json!({ "namespace": namespace, "key": key, "value": value }))
    }
}

/// `rpm`/`rps` (a rate limiter's calls per minute or per second; `rps` wins) as the time
/// between two calls: one second when neither is given, as The Edge Agent's.
/// (At most a day: a slower rate is a day between calls.)
pub(crate) fn limiter_interval(rpm: Option<f64>, rps: Option<f64>) -> std::time::Duration {
    use std::time::Duration;
    const MAX: Duration = Duration::from_secs(86_400);
    let interval = match (rps.filter(|r| *r > 0.0), rpm.filter(|r| *r > 0.0)) {
        (Some(rps), _) => Duration::try_from_secs_f64(1.0 / rps).unwrap_or(MAX),
        (None, Some(rpm)) => Duration::try_from_secs_f64(60.0 / rpm).unwrap_or(MAX),
        (None, None) => Duration::from_secs(1),
    };
    interval.min(MAX)
}

/// A rate limiter: the earliest time its next call may start.
#[derive(Debug)]
struct Limiter {
    interval: std::time::Duration,
    next: std::sync::Mutex<std::time::Instant>,
}

impl Limiter {
    /// Waits for this call's turn (milliseconds waited); `Err(ms)`, taking no turn, when the
    /// wait would be longer than `timeout` ms.
    fn wait(&self, timeout: Option<u64>) -> Result<u64, u64> {
        let now = std::time::Instant::now();
        let start = {
            let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
            let start = (*next).max(now);
            let wait = start.saturating_duration_since(now).as_millis() as u64;
            if timeout.is_some_and(|t| wait > t) {
                return Err(wait);
            }
            *next = start.checked_add(self.interval).unwrap_or(start);
            start
        };
        let wait = start.saturating_duration_since(now);
        std::thread::sleep(wait);
        Ok(wait.as_millis() as u64)
    }
}

/// The process's limiter named `name`, made with `interval` by its first user (The Edge
/// Agent's registry: the first configuration wins).
fn limiter_named(name: &str, interval: std::time::Duration) -> Arc<Limiter> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static LIMITERS: OnceLock<Mutex<HashMap<String, Arc<Limiter>>>> = OnceLock::new();
    let mut limiters = LIMITERS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    limiters
        .entry(name.to_owned())
        .or_insert_with(|| Arc::new(Limiter { interval, next: std::sync::Mutex::new(std::time::Instant::now()) }))
        .clone()
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

pub(crate) use crate::files::resolve;

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
    let bytes = match crate::files::read_regular(&path, crate::files::MAX_CHECKPOINT_FILE) {
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

/// What a composed action (`compose.rs`, `extraction.rs`) needs of the agent it runs in,
/// beyond [`Host`] (the graph implements it).
pub(crate) trait Composer: Host {
    /// `tree` rendered with `state` as the templates' `state`.
    fn render_on(&self, tree: &crate::template::Tree, state: &State) -> Result<Value, String>;
    /// Runs Lua chunk `chunk` on `state`: the table it returned.
    fn run_lua(
        &self,
        chunk: crate::lua::ChunkId,
        state: &State,
    ) -> Result<Option<serde_json::Map<String, Value>>, String>;
    /// This agent as the [`Host`] of the actions a step calls.
    fn host(&self) -> &dyn Host;
    /// `tree` rendered with `state` as the templates' `state` and `locals` as names of their
    /// own (a probe's item fields; `state`, `variables` and the agent's other names win).
    fn render_with(
        &self,
        tree: &crate::template::Tree,
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
                crate::prolog::query(state.shared(), args).map_err(tea_runtime::BoxError::from)
            })
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_edge_agents_names_are_sorted_and_none_is_tea_s() {
        assert!(EDGE_AGENT_NAMES.windows(2).all(|w| w[0] < w[1]), "sorted, no name twice (binary search)");
        assert!(EDGE_AGENT_NAMES.iter().all(|n| !BUILT_IN_NAMES.contains(n)));
        assert!(edge_agent_only("actions.vector.index_files").is_some());
        assert!(edge_agent_only("vector.index_file").is_none());
        assert!(edge_agent_only("llm.call").is_none());
    }
}
