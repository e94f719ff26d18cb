//! [`Engine`] (what agents load with: actions, secrets, a default store, Lua limits) and
//! [`Agent`] (a loaded file, run on tea's engine).

use crate::actions::{Action, ActionFn};
use crate::error::LoadError;
use crate::ir::YamlGraph;
use crate::lang::lua::Limits;
use crate::load::{self, Env, StoreSpec};
use crate::state::{State, Update};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tea_runtime::{
    App, BoxError, Builder, Call, Checkpointer, DirStore, Error, Event, Graph, Interrupt, MemoryStore, NoCheckpointer,
    NodeName, Outcome, Resume, Retention, Snapshot, Stream, SweepReport, Sweeper, ThreadId,
};

/// The default memory limit of a thread's Lua VM: 64 MiB.
pub const DEFAULT_LUA_MEMORY_LIMIT: usize = 64 << 20;
/// The default instruction limit of one `run:` block: 100 million.
pub const DEFAULT_LUA_INSTRUCTION_LIMIT: u64 = 100_000_000;
/// The default time limit of one `run:` block: 10 seconds.
pub const DEFAULT_LUA_TIME_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Loads YAML agents: holds the actions they may use, the secrets their templates see, what
/// they may reach (the grants: [`Engine::allow_read`], [`Engine::allow_write`],
/// [`Engine::allow_net`], [`Engine::allow_env`], [`Engine::secret_host`]), a checkpointer for
/// files that name none, and the Lua limits.
///
/// ```
/// use serde_json::json;
/// use tea_yaml::{Engine, State};
///
/// let engine = Engine::new().action("text.shout", |_: &State, args: &serde_json::Value| {
///     Ok(json!({ "shouted": args["text"].as_str().unwrap_or("").to_uppercase() }))
/// });
/// let agent = engine.load_str(r#"
/// nodes:
///   - name: shout
///     uses: text.shout
///     with: { text: "{{ state.name }}" }
/// "#)?;
/// let out = agent.invoke(json!({ "name": "ada" }))?.done().unwrap();
/// assert_eq!(out["shouted"], "ADA");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Engine {
    actions: HashMap<String, Action>,
    secrets: Map<String, Value>,
    checkpointer: Option<Arc<dyn Checkpointer>>,
    limits: Limits,
    trust_code: bool,
    strict: bool,
    /// What the operator grants the files: folders, hosts, environment variables, the hosts
    /// of secrets ([`Engine::allow_read`] and its kin).
    grants: crate::grants::Grants,
    /// Breakpoints added at load ([`Engine::interrupt_before`], [`Engine::interrupt_after`]):
    /// node name, and whether the run stops after it (else before).
    breakpoints: Vec<(String, bool)>,
    /// [`Engine::encrypt_with`]: every agent's store is sealed with these keys.
    #[cfg(feature = "encryption")]
    keys: Option<tea_runtime::KeyRing>,
    /// [`Engine::retention`]: what the agents' sweeps keep.
    retention: Retention,
}

impl Default for Engine {
    fn default() -> Self {
        Engine::new()
    }
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut actions: Vec<&String> = self.actions.keys().collect();
        actions.sort();
        f.debug_struct("Engine")
            .field("actions", &actions)
            .field("secrets", &self.secrets.len())
            .field("checkpointer", &self.checkpointer.is_some())
            .field("limits", &self.limits)
            .field("trust_code", &self.trust_code)
            .field("strict", &self.strict)
            .field("grants", &self.grants)
            .field("breakpoints", &self.breakpoints)
            .field("retention", &self.retention)
            .finish()
    }
}

impl Engine {
    /// An engine with the built-in actions (`checkpoint.save`, `checkpoint.load`,
    /// `file.read`, `file.write`), no secrets, no checkpointer, and the default Lua limits.
    pub fn new() -> Self {
        #[allow(unused_mut)]
        let mut actions = HashMap::new();
        // The Edge Agent's `prolog.query` (feature `prolog`), as an action a file may replace.
        #[cfg(feature = "prolog")]
        actions.insert("prolog.query".to_owned(), Action::User(crate::actions::prolog_query()));
        Engine {
            actions,
            secrets: Map::new(),
            checkpointer: None,
            limits: Limits {
                memory: DEFAULT_LUA_MEMORY_LIMIT,
                instructions: DEFAULT_LUA_INSTRUCTION_LIMIT,
                time: DEFAULT_LUA_TIME_LIMIT,
            },
            trust_code: false,
            strict: false,
            grants: crate::grants::Grants::default(),
            breakpoints: Vec::new(),
            #[cfg(feature = "encryption")]
            keys: None,
            retention: Retention::new(),
        }
    }

    /// What the loaded agents' sweeps ([`Agent::sweep`], [`Agent::sweep_every`]) keep of their
    /// threads: the engine's retention (`tea_runtime::Builder::retention`), for every agent
    /// this engine loads (default: everything, for ever). `tea prune` and `tea serve` set it from
    /// their flags.
    pub fn retention(mut self, retention: Retention) -> Self {
        self.retention = retention;
        self
    }

    /// Whether files may run code tea cannot sandbox: `run:` blocks in Python (feature
    /// `python`). Off by default: a file with a Python block then does not load, and its error
    /// names the file, the node's line and this method (the CLI's `tea run --trust`).
    ///
    /// Python runs with the rights of the process — files, network, other processes — and no
    /// memory or time limit, so trust only files you would run as a program. Lua blocks stay
    /// sandboxed either way. Python blocks never see `secrets`.
    pub fn trust_code(mut self, trust: bool) -> Self {
        self.trust_code = trust;
        self
    }

    /// Lets the files this engine loads read under folder `dir` (and its subfolders), besides
    /// their own folder (`tea run --allow-read DIR`). Every file action (`file.read`,
    /// `file.exists`, `file.list`, `checkpoint.load`, `schema.merge`'s files, a subgraph's
    /// file, …) reads only under a granted folder: symbolic links are followed before the
    /// check, and `/proc`, `/sys`, `/dev`, FIFOs, sockets and devices are refused whatever is
    /// granted. [`trust_code`](Self::trust_code) does not lift it.
    ///
    /// A refused path written in the file is a load error naming its line and this grant; one
    /// a template computes fails its node.
    ///
    /// ```
    /// let error = tea_yaml::Engine::new()
    ///     .load_str("nodes:\n  - { name: r, uses: file.read, with: { path: /etc/hostname } }\n")
    ///     .unwrap_err();
    /// assert_eq!(error.problems()[0].line(), 2);
    /// assert!(error.to_string().contains("--allow-read /etc"), "{error}");
    /// assert!(tea_yaml::Engine::new()
    ///     .allow_read("/etc")
    ///     .load_str("nodes:\n  - { name: r, uses: file.read, with: { path: /etc/hostname } }\n")
    ///     .is_ok());
    /// ```
    pub fn allow_read(mut self, dir: impl Into<PathBuf>) -> Self {
        self.grants.read.push(dir.into());
        self
    }

    /// Lets the files this engine loads write (create, replace, delete) under folder `dir`,
    /// besides their own folder (`--allow-write DIR`): `file.write`, `file.delete`,
    /// `checkpoint.save`, `config.checkpoint_dir`, trace files. As
    /// [`allow_read`](Self::allow_read), for writing; a write grant is not a read grant.
    pub fn allow_write(mut self, dir: impl Into<PathBuf>) -> Self {
        self.grants.write.push(dir.into());
        self
    }

    /// Lets the files this engine loads send requests to `host` (`--allow-net HOST`): a name
    /// or address, with a port or without (any port), or `*` for every host. Without a grant
    /// no network action (`http.*`, `llm.*`, `actions.notify`, the hosted services) reaches
    /// anything: a URL written in the file is checked at load, one a template computes before
    /// the request is sent. A redirect is followed only to the same host and port.
    ///
    /// A host that does not parse (see [`HostGrant::parse`](crate::HostGrant::parse)) makes
    /// every load fail, naming it.
    pub fn allow_net(mut self, host: impl AsRef<str>) -> Self {
        match crate::grants::HostGrant::parse(host.as_ref()) {
            Ok(grant) => self.grants.net.push(grant),
            Err(e) => self.grants.invalid.push(format!("`Engine::allow_net` (`--allow-net`): {e}")),
        }
        self
    }

    /// Whether the hosts a file's own `settings` name (`settings.llm.base_url`, a webhook in
    /// `settings.notify`, …) may be reached without [`allow_net`](Self::allow_net)
    /// (`--allow-net-from-file`). Off by default: the file's author chose those hosts. It
    /// never binds a secret to them.
    pub fn allow_net_from_settings(mut self, allow: bool) -> Self {
        self.grants.net_from_settings = allow;
        self
    }

    /// Lets the files this engine loads read environment variable `name` where The Edge
    /// Agent's keys expand `${NAME}` (`--allow-env NAME`; `*` for every one). Templates and
    /// `run:` blocks never see the environment. (The provider keys and endpoints the engine
    /// itself reads — `OPENAI_API_KEY`, `OPENAI_BASE_URL`, … — are the operator's settings,
    /// read without a grant, and sent only to their provider's host.)
    pub fn allow_env(mut self, name: impl Into<String>) -> Self {
        self.grants.env.insert(name.into());
        self
    }

    /// Binds secret `name` to `host` (`--secret-host NAME=HOST`): a request that carries the
    /// secret's value — in its URL, headers or body — is sent only to a host the secret is
    /// bound to, and refused (naming the secret, never its value) anywhere else, whatever the
    /// file says. Repeat to bind it to several hosts. By default a secret goes nowhere, but
    /// `llm_api_key` goes to the model providers' own endpoints (`api.openai.com`, and those
    /// `OPENAI_BASE_URL`, `AZURE_OPENAI_ENDPOINT` or `OLLAMA_API_BASE` name) and an API key
    /// the engine reads from the environment (`OPENAI_API_KEY`, `FIRECRAWL_API_KEY`, …) to its
    /// provider's host; `name` may be such a variable's name.
    ///
    /// The host must also be granted with [`allow_net`](Self::allow_net).
    pub fn secret_host(mut self, name: impl Into<String>, host: impl AsRef<str>) -> Self {
        let name = name.into();
        match crate::grants::HostGrant::parse(host.as_ref()) {
            Ok(grant) => self.grants.secret_hosts.entry(name).or_default().push(grant),
            Err(e) => self.grants.invalid.push(format!("`Engine::secret_host` for `{name}` (`--secret-host`): {e}")),
        }
        self
    }

    /// Whether a node no path reaches is a load error (`true`) or, as by default, a warning: the
    /// file loads and the node never runs, as in both of The Edge Agent's engines (`tea validate
    /// --strict`). Every other graph problem is an error either way.
    pub fn strict(mut self, strict: bool) -> Self {
        self.strict = strict;
        self
    }

    /// Registers action `name` for `uses: name`: it gets the state and the node's rendered
    /// `with:` arguments, and returns its result (an error fails the node).
    pub fn action<F>(mut self, name: impl Into<String>, action: F) -> Self
    where
        F: Fn(&State, &Value) -> Result<Value, BoxError> + Send + Sync + 'static,
    {
        let action: Arc<ActionFn> = Arc::new(action);
        self.actions.insert(name.into(), Action::User(action));
        self
    }

    /// A secret, read as `{{ secrets.name }}` by the arguments that send it out, and nowhere
    /// else: the `headers` and `query` of `http.get`/`http.post`, the `api_key` of `llm.call`,
    /// the `url` and `headers` of `actions.notify`, and those keys of `settings.llm` and
    /// `settings.notify`. Any other template or condition that reads `secrets` is a load error
    /// naming its line, so no value computed from a secret (reversed, upper-cased, sliced, as
    /// JSON…) reaches the state, a pause's message, a stream or a log; `run:` blocks do not see
    /// secrets at all.
    ///
    /// As a second guard, a write whose value contains a secret's value fails its node (and an
    /// input or a resume's update holding one is refused), and a secret's value in an error
    /// message (a server that quotes the key back) is replaced by `***`. Values shorter than 4
    /// bytes are not looked for (they cannot be told apart from ordinary text). `llm.call` uses
    /// secret `llm_api_key` as its API key when neither its `with:` nor `settings.llm` gives one.
    ///
    /// ```
    /// let error = tea_yaml::Engine::new().secret("token", "s3cret-token").load_str(r#"
    /// nodes:
    ///   - { name: leak, run: { type: expression, value: "secrets.token | reverse", output_key: copied } }
    /// "#).unwrap_err();
    /// assert_eq!(error.problems()[0].line(), 3);
    /// assert!(error.to_string().contains("reads `secrets`"), "{error}");
    /// ```
    pub fn secret(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.secrets.insert(name.into(), Value::String(value.into()));
        self
    }

    /// Every environment variable whose name starts with `prefix` as a secret: `PREFIX_NAME`
    /// becomes `{{ secrets.name }}` (the rest of the name, lower-cased). Variables whose value
    /// is not Unicode are skipped.
    pub fn secrets_from_env(mut self, prefix: &str) -> Self {
        for (name, value) in std::env::vars_os() {
            let (Some(name), Some(value)) = (name.to_str(), value.to_str()) else { continue };
            if let Some(rest) = name.strip_prefix(prefix).filter(|r| !r.is_empty()) {
                self.secrets.insert(rest.to_lowercase(), Value::String(value.to_owned()));
            }
        }
        self
    }

    /// The checkpointer of agents whose file names none (`config.checkpoint_dir`,
    /// `config.checkpointer`): with it, files that pause load.
    pub fn checkpointer(mut self, store: impl Checkpointer + 'static) -> Self {
        self.checkpointer = Some(Arc::new(store));
        self
    }

    /// Seals the checkpoints of every agent this engine loads — on the file's store
    /// (`config.checkpointer`, `config.checkpoint_dir`), the engine's
    /// [`checkpointer`](Self::checkpointer) or the store of [`load_file_on`](Self::load_file_on) —
    /// with `keys` (feature `encryption`; see `tea_runtime::Sealed`). Records are refused unless
    /// sealed: clear ones written before are an error naming their thread and checkpoint.
    #[cfg(feature = "encryption")]
    pub fn encrypt_with(mut self, keys: tea_runtime::KeyRing) -> Self {
        self.keys = Some(keys);
        self
    }

    /// `store` sealed with the keys of [`encrypt_with`](Self::encrypt_with), if any, and the
    /// store underneath when it is sealed (whose bytes are those of a pause's file).
    #[allow(clippy::type_complexity)]
    fn seal(
        &self,
        store: Option<Arc<dyn Checkpointer>>,
    ) -> (Option<Arc<dyn Checkpointer>>, Option<Arc<dyn Checkpointer>>) {
        #[cfg(feature = "encryption")]
        if let (Some(keys), Some(raw)) = (&self.keys, &store) {
            let sealed: Arc<dyn Checkpointer> = Arc::new(tea_runtime::Sealed::new(raw.clone(), keys.clone()));
            return (Some(sealed), store);
        }
        (store, None)
    }

    /// The memory a thread's Lua VM may use, in bytes (default
    /// [`DEFAULT_LUA_MEMORY_LIMIT`]). A block that needs more fails its node.
    pub fn lua_memory_limit(mut self, bytes: usize) -> Self {
        self.limits.memory = bytes;
        self
    }

    /// The instructions one `run:` block may execute (default
    /// [`DEFAULT_LUA_INSTRUCTION_LIMIT`]). A block that runs longer fails its node.
    pub fn lua_instruction_limit(mut self, instructions: u64) -> Self {
        self.limits.instructions = instructions;
        self
    }

    /// Breakpoints before `nodes`, added to every agent this engine loads beside the file's
    /// `config.interrupt_before`: the run pauses before each of them (the `tea` command line's
    /// `--interrupt-before`). They are a setting of the run, not part of the graph's shape: a
    /// thread paused at one resumes on an agent loaded with or without them.
    ///
    /// ```
    /// use tea::MemoryStore;
    /// let agent = tea_yaml::Engine::new()
    ///     .interrupt_before(["b"])
    ///     .checkpointer(MemoryStore::new())
    ///     .load_str("nodes:\n  - { name: a, run: 'return { x = 1 }' }\n  - { name: b, run: 'return { x = 2 }' }\n")?;
    /// let (state, paused) = agent.invoke(serde_json::json!({}))?.interrupted().unwrap();
    /// assert_eq!((paused.node().as_str(), &state["x"]), ("b", &serde_json::json!(1)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// A name that is not a node of the file is a [`LoadError`] of that file, and so is a
    /// breakpoint on an agent with no checkpointer (a pause is resumed from a checkpoint).
    pub fn interrupt_before<I, S>(mut self, nodes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.breakpoints.extend(nodes.into_iter().map(|n| (n.into(), false)));
        self
    }

    /// Breakpoints after `nodes`, as [`Engine::interrupt_before`] adds them before: the run
    /// pauses after each of them has run (`config.interrupt_after`, `--interrupt-after`).
    ///
    /// ```
    /// use tea::MemoryStore;
    /// let file = "nodes:\n  - { name: a, run: 'return {}' }\n  - { name: b, run: 'return {}' }\n";
    /// let paused = tea_yaml::Engine::new().interrupt_after(["a"]).checkpointer(MemoryStore::new()).load_str(file)?;
    /// assert_eq!(paused.invoke(serde_json::json!({}))?.interrupted().unwrap().1.node().as_str(), "a");
    /// // A name that is not a node, and a breakpoint with no checkpointer, are load errors.
    /// let typo = tea_yaml::Engine::new().interrupt_after(["bb"]).checkpointer(MemoryStore::new()).load_str(file);
    /// assert!(typo.unwrap_err().to_string().contains("`bb`, which is not a node of this file; did you mean `b`?"));
    /// let unkept = tea_yaml::Engine::new().interrupt_after(["a"]).load_str(file);
    /// assert!(unkept.unwrap_err().to_string().contains("a checkpointer is required"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn interrupt_after<I, S>(mut self, nodes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.breakpoints.extend(nodes.into_iter().map(|n| (n.into(), true)));
        self
    }

    /// Sets the engine's breakpoints on the graph just loaded, after its fingerprint was taken.
    fn add_breakpoints(&self, loaded: &mut load::Loaded, file: &str) -> Result<(), LoadError> {
        if self.breakpoints.is_empty() {
            return Ok(());
        }
        let stored = loaded.store.is_some() || loaded.checkpoint_dir.is_some() || self.checkpointer.is_some();
        let Some(inner) = Arc::get_mut(&mut loaded.graph.agent) else {
            return Err(LoadError::one(file, 1, 1, "breakpoints cannot be added: the graph is already shared"));
        };
        let mut problems = Vec::new();
        for (name, after) in &self.breakpoints {
            let key = if *after { "interrupt_after" } else { "interrupt_before" };
            match inner.nodes.iter_mut().find(|n| n.name.as_str() == name) {
                Some(node) if *after => node.interrupt_after = true,
                Some(node) => node.interrupt_before = true,
                None => {
                    let hint = crate::error::suggest(name, inner.nodes.iter().map(|n| n.name.as_str()));
                    problems.push(crate::error::Problem {
                        message: format!("breakpoint `{key}` names `{name}`, which is not a node of this file{hint}"),
                        line: 1,
                        column: 1,
                    });
                }
            }
        }
        if problems.is_empty() && !stored {
            problems.push(crate::error::Problem {
                message: "a checkpointer is required: breakpoints pause the run, and a pause is resumed from a \
                          checkpoint; add `config.checkpoint_dir: DIR` or `config.checkpointer: memory` (or give the \
                          Engine a checkpointer)"
                    .to_owned(),
                line: 1,
                column: 1,
            });
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(LoadError { file: file.to_owned(), problems })
        }
    }

    /// How long one `run:` block may run, by the wall clock (default
    /// [`DEFAULT_LUA_TIME_LIMIT`]): a block still running then fails its node, whatever
    /// instructions it has left (a block waiting in a library function, say).
    pub fn lua_time_limit(mut self, limit: std::time::Duration) -> Self {
        self.limits.time = limit;
        self
    }

    /// Loads an agent from YAML text; relative paths in it start at the current directory.
    /// Text has no folder of its own: its file actions reach only the folders granted with
    /// [`allow_read`](Self::allow_read) and [`allow_write`](Self::allow_write) (`allow_read(".")`
    /// for the current directory).
    ///
    /// # Errors
    /// A [`LoadError`] listing every problem found, each with its line and column.
    pub fn load_str(&self, text: &str) -> Result<Agent, LoadError> {
        self.load_as(text, "<string>".to_owned(), PathBuf::from("."), None, false)
    }

    /// Loads an agent from a file; relative paths in it start at the file's directory, the
    /// folder its file actions read and write without a grant.
    ///
    /// # Errors
    /// A [`LoadError`]: the file cannot be read, or every problem found in it.
    pub fn load_file(&self, path: impl AsRef<Path>) -> Result<Agent, LoadError> {
        let (text, shown, base) = crate::grants::files::read_agent_file(path.as_ref())?;
        self.load_as(&text, shown, base, None, true)
    }

    /// Loads an agent from a file onto `store`, whatever the file's `config` names: the file's
    /// own store (`checkpointer:`, `checkpoint_dir:`) is not opened or connected to, so this
    /// also checks a file without touching its store. [`Agent::names_store`] still tells
    /// whether the file names one.
    ///
    /// ```
    /// use tea::MemoryStore;
    /// # let dir = std::env::temp_dir().join(format!("tea-yaml-load-on-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir)?;
    /// let file = dir.join("agent.yaml");
    /// std::fs::write(&file, "config: { checkpoint_dir: ./never }\nnodes:\n  - { name: a, interrupt: before, run: 'return {}' }\n")?;
    /// let agent = tea_yaml::Engine::new().load_file_on(&file, MemoryStore::new())?;
    /// assert!(agent.names_store() && agent.can_pause());
    /// assert!(!dir.join("never").exists());
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// A [`LoadError`]: the file cannot be read, or every problem found in it.
    pub fn load_file_on<C: Checkpointer + 'static>(
        &self,
        path: impl AsRef<Path>,
        store: C,
    ) -> Result<Agent, LoadError> {
        let dir = (&store as &dyn std::any::Any).downcast_ref::<DirStore>().cloned();
        let engine = Engine { checkpointer: Some(Arc::new(store)), ..self.clone() };
        let path = path.as_ref();
        let (text, shown, base) = crate::grants::files::read_agent_file(path)?;
        engine.load_as(&text, shown, base, Some(dir), true)
    }

    /// `on`: load onto the engine's checkpointer (a `DirStore` when `Some(Some(_))`), not the
    /// file's store. `own_folder`: `base_dir` is the agent's folder (a file's, not a string's).
    fn load_as(
        &self,
        text: &str,
        file: String,
        base_dir: PathBuf,
        on: Option<Option<DirStore>>,
        own_folder: bool,
    ) -> Result<Agent, LoadError> {
        let env = Env {
            file: file.clone(),
            base_dir,
            actions: &self.actions,
            secrets: &self.secrets,
            has_checkpointer: self.checkpointer.is_some(),
            limits: self.limits,
            parents: Vec::new(),
            trust_code: self.trust_code,
            strict: self.strict,
            grants: Arc::new(self.grants.clone()),
            folders: Vec::new(),
            own_folder,
            children: Default::default(),
        };
        let mut loaded = load::load(text, &env)?;
        self.add_breakpoints(&mut loaded, &file)?;
        let names_store = loaded.store.is_some() || loaded.checkpoint_dir.is_some();
        if let Some(dir) = on {
            let limit = loaded.recursion_limit.unwrap_or(tea_runtime::DEFAULT_RECURSION_LIMIT);
            let (store, raw) = self.seal(self.checkpointer.clone());
            let mut agent = Agent::build(loaded.graph, store, dir, limit, loaded.checkpoint, Tuning::default());
            agent.names_store = names_store;
            agent.raw_store = raw;
            agent.retention = self.retention;
            return Ok(agent);
        }
        let mut dir = None;
        let store: Option<Arc<dyn Checkpointer>> = match (&loaded.store, &loaded.checkpoint_dir) {
            (Some(StoreSpec::Memory), _) => Some(Arc::new(MemoryStore::new())),
            #[cfg(feature = "sled")]
            (Some(StoreSpec::Sled(path)), _) => Some(Arc::new(tea_runtime::SledStore::open(path).map_err(|e| {
                LoadError::one(&file, 1, 1, format!("cannot open the sled store `{}`: {e}", path.display()))
            })?)),
            #[cfg(not(feature = "sled"))]
            (Some(StoreSpec::Sled(_)), _) => None,
            #[cfg(feature = "postgres")]
            (Some(StoreSpec::Postgres(url)), _) => Some(Arc::new(
                tea_runtime::PostgresStore::connect(url)
                    .map_err(|e| LoadError::one(&file, 1, 1, format!("cannot connect the postgres store: {e}")))?,
            )),
            #[cfg(not(feature = "postgres"))]
            (Some(StoreSpec::Postgres(_)), _) => None,
            (Some(StoreSpec::Dir(path)), _) | (None, Some(path)) => {
                let store = DirStore::open(path).map_err(|e| {
                    LoadError::one(
                        &file,
                        1,
                        1,
                        format!("cannot open `config.checkpoint_dir` `{}`: {e}", path.display()),
                    )
                })?;
                dir = Some(store.clone());
                Some(Arc::new(store))
            }
            (None, None) => self.checkpointer.clone(),
        };
        let limit = loaded.recursion_limit.unwrap_or(tea_runtime::DEFAULT_RECURSION_LIMIT);
        let (store, raw) = self.seal(store);
        let mut agent = Agent::build(loaded.graph, store, dir, limit, loaded.checkpoint, Tuning::default());
        agent.names_store = names_store;
        agent.raw_store = raw;
        agent.retention = self.retention;
        Ok(agent)
    }
}

/// How an agent's runs hold their threads and write their fan-outs: the builder options an
/// agent rebuilt on another store keeps (`None`: the runtime's default).
#[derive(Clone, Copy, Debug, Default)]
struct Tuning {
    /// `tea_runtime::Builder::lease` ([`Agent::with_lease`]).
    lease: Option<std::time::Duration>,
    /// `tea_runtime::Builder::group_commit` ([`Agent::with_group_commit`]).
    group_commit: Option<std::time::Duration>,
}

enum Runner {
    /// No store: runs return their final state; nothing pauses (checked at load).
    Free(App<YamlGraph, NoCheckpointer>),
    Stored(App<YamlGraph, Arc<dyn Checkpointer>>),
}

/// A loaded YAML agent, run on tea's engine: pauses, checkpoints, tokens and resumes work as
/// for `graph!` graphs (see the crate docs). `Send + Sync`: share it in an `Arc`.
pub struct Agent {
    graph: YamlGraph,
    runner: Runner,
    /// The same agent for the async driver: its network nodes are async nodes.
    #[cfg(feature = "tokio")]
    async_runner: Runner,
    /// The store: for the runner each async call makes with its own cancel flag, and to find
    /// the thread whose pending pause a checkpoint file is.
    store: Option<Arc<dyn Checkpointer>>,
    /// When `store` seals ([`Engine::encrypt_with`]): the store underneath, whose heads are what
    /// a pause's file holds.
    raw_store: Option<Arc<dyn Checkpointer>>,
    /// The store, when it is a directory: each pause gets a file named after its node.
    dir: Option<DirStore>,
    recursion_limit: usize,
    /// `config.checkpoint`: `invoke` continues from this file.
    checkpoint: Option<PathBuf>,
    /// The file's `config:` names a store (`checkpointer`, `checkpoint_dir`).
    names_store: bool,
    /// What its sweeps keep ([`Engine::retention`]).
    retention: Retention,
    /// Its runs' lease and group commit ([`Agent::with_lease`], [`Agent::with_group_commit`]).
    tuning: Tuning,
    /// Its runs' context ([`Agent::with_context`]), given again to an agent rebuilt from it.
    context: Option<Value>,
}

impl fmt::Debug for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Agent")
            .field("name", &self.graph.name())
            .field("nodes", &self.graph.inner().nodes.len())
            .field("checkpointer", &matches!(self.runner, Runner::Stored(_)))
            .finish()
    }
}

impl Agent {
    fn build(
        graph: YamlGraph,
        store: Option<Arc<dyn Checkpointer>>,
        dir: Option<DirStore>,
        limit: usize,
        checkpoint: Option<PathBuf>,
        tuning: Tuning,
    ) -> Agent {
        let runner_for = |graph: YamlGraph| {
            let builder = Builder::new(graph).recursion_limit(limit);
            match &store {
                Some(store) => {
                    let builder = builder.checkpointer(store.clone());
                    let builder = match tuning.lease {
                        Some(lease) => builder.lease(lease),
                        None => builder,
                    };
                    let builder = match tuning.group_commit {
                        Some(window) => builder.group_commit(window),
                        None => builder,
                    };
                    Runner::Stored(builder.build())
                }
                None => Runner::Free(builder.build()),
            }
        };
        Agent {
            runner: runner_for(graph.clone()),
            #[cfg(feature = "tokio")]
            async_runner: runner_for(graph.driven(true)),
            store: store.clone(),
            raw_store: None,
            graph,
            dir,
            recursion_limit: limit,
            checkpoint,
            names_store: false,
            retention: Retention::new(),
            tuning,
            context: None,
        }
    }

    /// `agent` (this one rebuilt on another store or lease) with what this one was given
    /// besides: whether its file names a store, its retention and its runs' context.
    fn carry_into(self, mut agent: Agent) -> Agent {
        agent.names_store = self.names_store;
        agent.retention = self.retention;
        match self.context {
            Some(context) => agent.with_context(context),
            None => agent,
        }
    }

    /// The same agent (sharing its graph, store and node caches) whose runs have `context`: a
    /// value that is not state — a user id, a model name — which templates read as
    /// `{{ context.x }}` and `run:` blocks as `context.x` (Lua, read-only) or `context["x"]`
    /// (Python). It is never written to a checkpoint: give it again to the agent that resumes.
    /// (`tea run --context JSON`.) Edge conditions (`when:`, `goto:` rules) do not see it.
    pub fn with_context(&self, context: Value) -> Agent {
        let runner = |runner: &Runner| match runner {
            Runner::Free(app) => Runner::Free(app.with_context(context.clone())),
            Runner::Stored(app) => Runner::Stored(app.with_context(context.clone())),
        };
        Agent {
            graph: self.graph.clone(),
            runner: runner(&self.runner),
            #[cfg(feature = "tokio")]
            async_runner: runner(&self.async_runner),
            store: self.store.clone(),
            raw_store: self.raw_store.clone(),
            dir: self.dir.clone(),
            recursion_limit: self.recursion_limit,
            checkpoint: self.checkpoint.clone(),
            names_store: self.names_store,
            retention: self.retention,
            tuning: self.tuning,
            context: Some(context),
        }
    }

    /// [`with_checkpointer`](Self::with_checkpointer) with every checkpoint sealed by `keys`
    /// (feature `encryption`; see `tea_runtime::Sealed`); a [`DirStore`]'s pause files hold
    /// the sealed records and resume once, as [`Engine::encrypt_with`]'s do.
    #[cfg(feature = "encryption")]
    pub fn with_sealed_checkpointer<C: Checkpointer + 'static>(self, store: C, keys: tea_runtime::KeyRing) -> Agent {
        let dir = (&store as &dyn std::any::Any).downcast_ref::<DirStore>().cloned();
        let raw: Arc<dyn Checkpointer> = Arc::new(store);
        let sealed: Arc<dyn Checkpointer> = Arc::new(tea_runtime::Sealed::new(raw.clone(), keys));
        let mut agent = Agent::build(
            self.graph.clone(),
            Some(sealed),
            dir,
            self.recursion_limit,
            self.checkpoint.clone(),
            self.tuning,
        );
        agent.raw_store = Some(raw);
        self.carry_into(agent)
    }

    /// The same agent on `store` (any [`Checkpointer`]), whatever its file's `config:` names.
    /// A [`DirStore`] names each pause's file after its node, as `config.checkpoint_dir` does.
    pub fn with_checkpointer<C: Checkpointer + 'static>(self, store: C) -> Agent {
        let dir = (&store as &dyn std::any::Any).downcast_ref::<DirStore>().cloned();
        let store: Arc<dyn Checkpointer> = Arc::new(store);
        let agent = Agent::build(
            self.graph.clone(),
            Some(store),
            dir,
            self.recursion_limit,
            self.checkpoint.clone(),
            self.tuning,
        );
        self.carry_into(agent)
    }

    /// Whether the file's `config:` names a store (`checkpointer:` or `checkpoint_dir:`), as
    /// opposed to running on the [`Engine`]'s, on one given with
    /// [`with_checkpointer`](Self::with_checkpointer), or on none.
    pub fn names_store(&self) -> bool {
        self.names_store
    }

    /// The Edge Agent's keys the file uses that tea accepts without doing what they do there
    /// (a `settings.ltm`, a node's `params:`, …): one warning per key, at its first use, saying
    /// what tea does instead. The `tea` command prints them when it loads a file.
    ///
    /// ```
    /// let agent = tea_yaml::Engine::new().load_str(
    ///     "nodes:\n  - { name: a, run: 'return {}', params: { x: 1 } }\n  - { name: b, run: 'return {}', params: {} }\n",
    /// )?;
    /// assert_eq!(agent.warnings().len(), 1);
    /// assert!(agent.warnings()[0].message().contains("`params`"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn warnings(&self) -> &[crate::Problem] {
        &self.graph.inner().warnings
    }

    /// Whether a run of the agent can pause: it has an interrupt node, or a node in
    /// `interrupt_before`/`interrupt_after` (such an agent needs a checkpointer).
    pub fn can_pause(&self) -> bool {
        self.graph.can_pause()
    }

    /// The checkpoint file the file's `config.checkpoint` names: [`invoke`](Self::invoke)
    /// continues from it instead of starting at the first node ([`start`](Self::start) and the
    /// streams do not; [`checkpoint_call`](Self::checkpoint_call) makes the call that does).
    pub fn continues_from(&self) -> Option<&Path> {
        self.checkpoint.as_deref()
    }

    /// The state key interrupt node `node` writes its answer to (its `resume_key`); `None` for
    /// a node that is not an interrupt node, or no node of this agent.
    pub fn resume_key(&self, node: &str) -> Option<&str> {
        let node = self.graph.inner().nodes.iter().find(|n| n.name.as_str() == node)?;
        self.graph.resume_key(&node.name)
    }

    /// With a directory store, gives the pause of `outcome` its file named after its node.
    fn linked(&self, outcome: Result<Outcome<State>, Error>) -> Result<Outcome<State>, Error> {
        let Ok(Outcome::Interrupted { mut state, resume }) = outcome else { return outcome };
        self.link(&resume)?;
        self.show_paused(&mut state, &resume)?;
        Ok(Outcome::Interrupted { state, resume })
    }

    /// The state of the pause `resume` stands for, as the agent shows it: at a breakpoint before
    /// a fan-in node, with the branches' `parallel_results` that node will read (see
    /// [`fan_in_pause`](Self::fan_in_pause)), read from the pause's checkpoint.
    fn show_paused(&self, state: &mut State, resume: &Resume<State>) -> Result<(), Error> {
        let (Some(pause), Runner::Stored(app)) = (self.fan_in_pause(resume.interrupts()), &self.runner) else {
            return Ok(());
        };
        if let Some(snapshot) = app.state(resume.thread())? {
            if snapshot.interrupts.iter().any(|i| i.id() == pause.id()) {
                self.graph.show_fan_in(pause.node().as_str(), state, &snapshot.joined);
            }
        }
        Ok(())
    }

    /// Among a thread's pending pauses, a breakpoint before a fan-in node on the main line
    /// (`interrupt_before` of the node after parallel branches): there the paused state shows
    /// the branches' results under `parallel_results`, as The Edge Agent's engines show it,
    /// though the node has not run yet.
    fn fan_in_pause<'i>(&self, interrupts: &'i [Interrupt]) -> Option<&'i Interrupt> {
        interrupts.iter().find(|i| {
            !i.needs_answer()
                && i.id().strip_prefix("before:") == Some(i.node().as_str())
                && self.graph.inner().nodes.iter().any(|n| n.fan_in && &n.name == i.node())
        })
    }

    /// `snapshot` as the agent shows it: at a breakpoint before a fan-in node, its state holds
    /// `parallel_results` (see [`fan_in_pause`](Self::fan_in_pause)).
    fn shown(&self, mut snapshot: Snapshot<State>) -> Snapshot<State> {
        if let Some(pause) = self.fan_in_pause(&snapshot.interrupts) {
            let node = pause.node().clone();
            self.graph.show_fan_in(node.as_str(), &mut snapshot.state, &snapshot.joined);
        }
        snapshot
    }

    fn link(&self, resume: &Resume<State>) -> Result<Option<PathBuf>, Error> {
        let Some(dir) = &self.dir else { return Ok(None) };
        dir.link_pause(self.graph.name(), resume.thread(), resume.checkpoint(), resume.node().as_str()).map(Some)
    }

    /// Where the file asks each run's trace to go (`settings.auto_trace: true`), if it does.
    /// tea-yaml writes no trace itself; the `tea` command follows it.
    pub fn auto_trace(&self) -> Option<&crate::AutoTrace> {
        self.graph.inner().auto_trace.as_ref()
    }

    /// The agent's name (`name:` in the file, else the file's stem).
    pub fn name(&self) -> &str {
        self.graph.name()
    }

    /// The state's keys as a JSON Schema object (`state:` in the file): each declared key's JSON
    /// type (`str` is `string`, `int` `integer`, `float` `number`, `bool` `boolean`, `list`
    /// `array`, `dict` `object`, `any` no type; `null` fits each) with its type and reducer as its
    /// description. An agent that declares no key takes any (`additionalProperties: true`).
    ///
    /// ```
    /// let agent = tea_yaml::Engine::new().load_str(
    ///     "name: count\nstate:\n  n: { type: int, reducer: sum }\nnodes:\n  - name: add\n    run: return { n = 1 }\n    goto: __end__\n",
    /// )?;
    /// let schema = agent.state_schema();
    /// assert_eq!(schema["properties"]["n"]["type"], serde_json::json!(["integer", "null"]));
    /// assert_eq!(schema["additionalProperties"], false);
    /// # Ok::<(), tea_yaml::LoadError>(())
    /// ```
    pub fn state_schema(&self) -> Value {
        self.graph.inner().schema.json_schema(self.name())
    }

    /// The agent's nodes' names, in file order.
    pub fn nodes(&self) -> Vec<&str> {
        self.graph.inner().nodes.iter().map(|n| n.name.as_str()).collect()
    }

    /// The threads the agent's store holds (empty without a checkpointer).
    pub fn threads(&self) -> Result<Vec<ThreadId>, Error> {
        match &self.runner {
            Runner::Stored(app) => app.threads(),
            Runner::Free(_) => Ok(Vec::new()),
        }
    }

    /// Deletes every checkpoint of `thread` (see `App::delete`); `Ok(false)` if it had none.
    pub fn delete(&self, thread: &ThreadId) -> Result<bool, Error> {
        match &self.runner {
            Runner::Stored(app) => app.delete(thread),
            Runner::Free(_) => Ok(false),
        }
    }

    /// Deletes the oldest checkpoints of `thread`, keeping the last `keep_last` and the head
    /// (see `App::prune`); returns how many went.
    pub fn prune(&self, thread: &ThreadId, keep_last: usize) -> Result<usize, Error> {
        match &self.runner {
            Runner::Stored(app) => app.prune(thread, keep_last),
            Runner::Free(_) => Ok(0),
        }
    }

    /// What the agent's sweeps keep ([`Engine::retention`], [`with_retention`](Self::with_retention)).
    pub fn retention(&self) -> Retention {
        self.retention
    }

    /// The same agent (on the same store) whose runs hold their thread by a lease of `lease`
    /// (`tea_runtime::Builder::lease`; default `tea_runtime::DEFAULT_LEASE`): how long a run
    /// that stopped answering keeps its thread before `recover` may take it over. Kept by
    /// [`with_checkpointer`](Self::with_checkpointer); it keeps the agent's
    /// [`with_context`](Self::with_context) too, in either order.
    pub fn with_lease(self, lease: std::time::Duration) -> Agent {
        let tuning = Tuning { lease: Some(lease), ..self.tuning };
        self.retuned(tuning)
    }

    /// The same agent on the same store, built again with `tuning`.
    fn retuned(self, tuning: Tuning) -> Agent {
        let mut agent = Agent::build(
            self.graph.clone(),
            self.store.clone(),
            self.dir.clone(),
            self.recursion_limit,
            self.checkpoint.clone(),
            tuning,
        );
        agent.raw_store = self.raw_store.clone();
        self.carry_into(agent)
    }

    /// The same agent (on the same store) whose fan-outs leave finished branches within
    /// `window` of work to the checkpoint that ends the fan-out
    /// (`tea_runtime::Builder::group_commit`; default none: every finished branch is written
    /// before another starts). A crash then runs again at most `window` of finished branch
    /// work per fan-out; a fan-out of many cheap branches costs a few writes (on a `dir:` or
    /// `sled:` store, a few flushes) instead of one per branch. Kept by
    /// [`with_checkpointer`](Self::with_checkpointer) and [`with_lease`](Self::with_lease), in
    /// either order. (`tea run --group-commit 1ms`.)
    pub fn with_group_commit(self, window: std::time::Duration) -> Agent {
        let tuning = Tuning { group_commit: Some(window), ..self.tuning };
        self.retuned(tuning)
    }

    /// The same agent whose sweeps keep what `retention` says.
    pub fn with_retention(mut self, retention: Retention) -> Agent {
        self.retention = retention;
        self
    }

    /// Applies the agent's retention to its threads once (see `App::sweep_with`): finished
    /// threads past their time deleted, paused ones only when the retention asks for it (and
    /// reported when kept), each thread's last K checkpoints kept. Without a checkpointer,
    /// nothing to do.
    pub fn sweep(&self) -> Result<SweepReport, Error> {
        match &self.runner {
            Runner::Stored(app) => app.sweep_with(self.retention),
            Runner::Free(_) => Ok(SweepReport::default()),
        }
    }

    /// Sweeps the agent's threads now and then every `every` on a thread of its own (see
    /// `App::sweep_every`) until the [`Sweeper`] is dropped; `None` without a checkpointer.
    pub fn sweep_every<F>(&self, every: std::time::Duration, on_report: F) -> Option<Sweeper>
    where
        F: FnMut(Result<SweepReport, Error>) + Send + 'static,
    {
        match &self.runner {
            Runner::Stored(app) => Some(app.with_retention(self.retention).sweep_every(every, on_report)),
            Runner::Free(_) => None,
        }
    }

    /// Gives `thread` a retention of its own over the agent's (`None`: removes it); kept in
    /// the store (see `App::set_retention`). Without a checkpointer, nothing to keep it in:
    /// [`Error::Store`].
    pub fn set_retention(&self, thread: &ThreadId, retention: Option<Retention>) -> Result<(), Error> {
        match &self.runner {
            Runner::Stored(app) => app.set_retention(thread, retention),
            Runner::Free(_) => Err(Error::store(format!(
                "agent `{}` has no checkpointer, so thread `{thread}` has no store to keep a retention in",
                self.name()
            ))),
        }
    }

    /// The agent's graph, as the engine runs it.
    pub fn graph(&self) -> &YamlGraph {
        &self.graph
    }

    /// The call that starts a new thread on `input` (a JSON object of state keys), checked
    /// against the file's declared types and merged over its `initial_state`: refine it with
    /// [`Call::on`], [`Call::context`] (a JSON value templates read as `{{ context.x }}`),
    /// [`Call::durability`], [`Call::recursion_limit`] or [`Call::stream_modes`], and carry it
    /// out with [`run`](Self::run), [`run_async`](Self::run_async), [`run_stream`](Self::run_stream)
    /// or [`run_stream_async`](Self::run_stream_async). The other calls are the engine's own:
    /// `Call::resume(token)`, `Call::recover(thread)`, and [`checkpoint_call`](Self::checkpoint_call)
    /// for a checkpoint file.
    ///
    /// ```
    /// use serde_json::json;
    /// use tea::{Call, MemoryStore};
    /// let agent = tea_yaml::Engine::new()
    ///     .checkpointer(MemoryStore::new())
    ///     .load_str("nodes:\n  - { name: a, run: 'return { who = context.user }' }\n")?;
    /// let call = agent.start(json!({}))?.on("chat-1").context(json!({ "user": "ada" }));
    /// assert_eq!(agent.run(call)?.done().unwrap()["who"], "ada");
    /// // A finished thread recovers to its final state.
    /// assert_eq!(agent.run(Call::recover("chat-1"))?.done().unwrap()["who"], "ada");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::NodeFailed`] naming `__start__` for an input that is not an object or does not
    /// fit the declared types (or holds a secret's value).
    pub fn start(&self, input: Value) -> Result<Call<State>, Error> {
        Ok(Call::start(self.input(input)?))
    }

    /// Carries out `call` on the calling thread, until the run finishes or pauses (see
    /// `App::run`). A pause's file is named after its node in a checkpoint directory. An agent
    /// without a checkpointer keeps no threads: it refuses a resume or a recover, and runs a
    /// start to its end (a thread the call names is only a name).
    ///
    /// # Errors
    /// Those of `App::run`; [`Error::Store`] for a resume or recover on an agent without a
    /// checkpointer.
    pub fn run(&self, call: Call<State>) -> Result<Outcome<State>, Error> {
        match &self.runner {
            Runner::Stored(app) => self.linked(app.run(call)),
            Runner::Free(app) => app.run(self.unstored(call)?).map(Outcome::Done),
        }
    }

    /// Carries out `call` as a stream of events (see `App::run_stream`); each pause's file is
    /// named as [`run`](Self::run) names it.
    pub fn run_stream(&self, call: Call<State>) -> AgentStream<'_> {
        let stream = match &self.runner {
            Runner::Stored(app) => app.run_stream(call),
            Runner::Free(app) => match self.unstored(call) {
                Ok(call) => app.run_stream(call),
                Err(error) => return AgentStream::failed(error),
            },
        };
        AgentStream { agent: Some(self), state: StreamState::Running(Box::new(stream)) }
    }

    /// Runs the agent on `input` (a JSON object) in a new thread, until it finishes or pauses:
    /// `run(start(input)?)`. With `config.checkpoint`, it continues from that checkpoint file
    /// instead (the input's keys are written over the saved state): `run(checkpoint_call(file,
    /// input)?)`.
    ///
    /// # Errors
    /// [`Error::NodeFailed`] naming `__start__` for an input that is not an object or does not
    /// fit the declared types, and the errors of [`run`](Self::run).
    pub fn invoke(&self, input: Value) -> Result<Outcome<State>, Error> {
        if let Some(path) = &self.checkpoint {
            // Checked at load, and again now: the file named is read where the agent may read.
            let path = self
                .graph
                .inner()
                .grants
                .confine_path(path, crate::grants::Access::Read)
                .map_err(|e| Error::store(format!("`config.checkpoint`: {e}")))?;
            let update = Some(input).filter(|i| i.as_object().is_some_and(|m| !m.is_empty()));
            return self.run(self.checkpoint_call(&path, update)?);
        }
        self.run(self.start(input)?)
    }

    /// Continues the paused thread `resume` names: `run(Call::resume(resume))`.
    ///
    /// # Errors
    /// Those of [`run`](Self::run).
    pub fn resume(&self, resume: Resume<State>) -> Result<Outcome<State>, Error> {
        self.run(Call::resume(resume))
    }

    /// Runs the agent on `input`, as a stream of events: `run_stream(start(input)?)` (a stream
    /// never continues from `config.checkpoint`).
    pub fn stream(&self, input: Value) -> AgentStream<'_> {
        match self.start(input) {
            Ok(call) => self.run_stream(call),
            Err(error) => AgentStream::failed(error),
        }
    }

    /// `call` for an agent without a checkpointer, which keeps no threads: a start, never a
    /// resume or a recover.
    fn unstored(&self, call: Call<State>) -> Result<Call<State>, Error> {
        if matches!(call.kind(), "resume" | "recover") {
            let thread = call.thread().cloned().unwrap_or_else(ThreadId::random);
            return Err(no_store(self.name(), &thread));
        }
        Ok(call)
    }

    /// The file of the pause `resume` stands for, `{node}_{thread}_{checkpoint}.ckpt` in the
    /// thread's directory, when the agent keeps its checkpoints in a directory
    /// (`config.checkpoint_dir`, or a [`DirStore`]); `None` otherwise, or when the pause's
    /// checkpoint is gone (the thread was deleted or pruned).
    pub fn checkpoint_path(&self, resume: &Resume<State>) -> Option<PathBuf> {
        self.link(resume).ok().flatten()
    }

    /// The state key the pending interrupt node of `resume` writes its answer to (its
    /// `resume_key`); `None` when the pause is a breakpoint. With
    /// [`checkpoint_call`](Self::checkpoint_call), `{ key: answer }` in the update answers it.
    pub fn answer_key(&self, resume: &Resume<State>) -> Option<&str> {
        let interrupt = resume.interrupts().iter().find(|i| i.needs_answer())?;
        self.graph.resume_key(interrupt.node())
    }

    /// The call that continues from checkpoint file `path` with `update` (a JSON object of keys
    /// to write) applied first; carry it out with [`run`](Self::run) (or `run_async`).
    ///
    /// A pause's file in the agent's checkpoint directory ([`checkpoint_path`](Self::checkpoint_path))
    /// resumes its own thread, once, like its token (a `Call::resume`): the update is merged
    /// through the reducers, and for an interrupt node its `resume_key` in the update is the
    /// answer. Any other checkpoint file (written by `checkpoint.save`) starts a new thread at
    /// the node that saved it, with the saved state (a `Call::start_at`); it can be used many
    /// times, by an agent without a checkpointer too (its run then keeps no thread).
    ///
    /// Reads the file and the agent's store with blocking calls.
    ///
    /// # Errors
    /// [`Error::Store`] when the file cannot be read, [`Error::StaleResume`] for a pause resumed
    /// already, [`Error::CorruptCheckpoint`], [`Error::GraphMismatch`] or
    /// [`Error::SchemaMismatch`] for a file that is not this agent's, [`Error::BadResumeValue`]
    /// for an update that does not fit.
    pub fn checkpoint_call(&self, path: impl AsRef<Path>, update: Option<Value>) -> Result<Call<State>, Error> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        let bytes = crate::grants::files::read_regular(path, crate::grants::files::MAX_CHECKPOINT_FILE)
            .map_err(|e| Error::store(format!("cannot read checkpoint file `{shown}`: {e}")))?;
        // A pause resumes once, wherever its file sits (a copy included): it is the pending
        // pause of the thread whose head it is, or it was resumed already. (A pause inside a
        // fan-out stands at no single node: it is continued in its thread, never decoded here.)
        if let Some((thread, id)) = self.pending_pause(&bytes)? {
            return self.resume_pause_file(&thread, id, &shown, update).map(Call::resume);
        }
        if tea_runtime::checkpoint_holds_pause(&bytes) || bytes.starts_with(SEALED_MAGIC) {
            return Err(match self.pause_thread(path)?.or(self.thread_holding(&bytes)) {
                Some(thread) => Error::StaleResume { thread },
                None => Error::store(format!(
                    "checkpoint file `{shown}` holds a pause that is no thread's pending pause in agent `{}`'s \
                     store: it was resumed already, or belongs to another store (a pause resumes once)",
                    self.name()
                )),
            });
        }
        let (node, mut state) = tea_runtime::decode_checkpoint(&self.graph, &bytes, &shown)?;
        if let Some(update) = update {
            self.graph.apply(&mut state, Update::from(update)).map_err(|e| Error::BadResumeValue {
                node: node.clone(),
                expected: "an update that fits the state".to_owned(),
                reason: e.to_string(),
            })?;
        }
        // An agent without a store continues the file as The Edge Agent does, needing none: the
        // run cannot pause (checked at load).
        Ok(Call::start_at(node.as_str(), state))
    }

    /// The clear checkpoint that checkpoint file `bytes` stands for: the bytes themselves, or,
    /// for the pause file of a sealed store ([`Engine::encrypt_with`],
    /// [`with_sealed_checkpointer`](Self::with_sealed_checkpointer)) that is a thread's pending
    /// pause, that thread's head opened. A front end reads a pause file's node through it.
    ///
    /// # Errors
    /// The store's errors, and [`Error::Unsealable`] for a head that does not open.
    pub fn checkpoint_file_bytes(&self, bytes: Vec<u8>) -> Result<Vec<u8>, Error> {
        if self.raw_store.is_some() && bytes.starts_with(SEALED_MAGIC) {
            if let (Some((thread, _)), Some(store)) = (self.pending_pause(&bytes)?, &self.store) {
                if let Some((_, head)) = store.head(self.graph.name(), &thread)? {
                    return Ok(head);
                }
            }
        }
        Ok(bytes)
    }

    /// The thread whose head checkpoint is `bytes` (a pending pause), and the head's id.
    fn pending_pause(&self, bytes: &[u8]) -> Result<Option<(ThreadId, tea_runtime::CheckpointId)>, Error> {
        // A sealed store's pause files hold its sealed records: compare with those.
        let Some(store) = self.raw_store.as_ref().or(self.store.as_ref()) else { return Ok(None) };
        for thread in store.threads(self.graph.name())? {
            if let Some((id, head)) = store.head(self.graph.name(), &thread)? {
                if head == bytes {
                    return Ok(Some((thread, id)));
                }
            }
        }
        Ok(None)
    }

    /// With a directory store: the thread one of whose checkpoint files holds `bytes`.
    fn thread_holding(&self, bytes: &[u8]) -> Option<ThreadId> {
        let (Some(dir), Some(store)) = (&self.dir, &self.store) else { return None };
        for thread in store.threads(self.graph.name()).ok()? {
            let Ok(entries) = std::fs::read_dir(dir.thread_dir(self.graph.name(), &thread)) else { continue };
            for entry in entries.flatten() {
                let same_len = entry.metadata().is_ok_and(|m| m.is_file() && m.len() == bytes.len() as u64);
                if same_len && std::fs::read(entry.path()).is_ok_and(|b| b == bytes) {
                    return Some(thread);
                }
            }
        }
        None
    }

    /// The thread whose directory holds pause file `path`, if it is one of this agent's.
    fn pause_thread(&self, path: &Path) -> Result<Option<ThreadId>, Error> {
        let (Some(dir), Runner::Stored(app)) = (&self.dir, &self.runner) else { return Ok(None) };
        let Some(parent) = path.parent() else { return Ok(None) };
        let parent = parent.canonicalize().unwrap_or_else(|_| parent.to_path_buf());
        for thread in app.threads()? {
            let thread_dir = dir.thread_dir(self.graph.name(), &thread);
            if thread_dir.canonicalize().unwrap_or(thread_dir) == parent {
                return Ok(Some(thread));
            }
        }
        Ok(None)
    }

    /// The resume of the pause of `thread` at checkpoint `id` (a file `shown` holds), if it is
    /// still pending.
    fn resume_pause_file(
        &self,
        thread: &ThreadId,
        id: tea_runtime::CheckpointId,
        shown: &str,
        update: Option<Value>,
    ) -> Result<Resume<State>, Error> {
        let app = self.stored(thread)?;
        let pending = app.state(thread)?.is_some_and(|snapshot| !snapshot.interrupts.is_empty());
        if !pending {
            return Err(Error::StaleResume { thread: thread.clone() });
        }
        // A paused thread's recover runs nothing: it hands out the pause's token.
        let Outcome::Interrupted { resume, .. } = app.run(Call::recover(thread.clone()))? else {
            return Err(Error::StaleResume { thread: thread.clone() });
        };
        if id != resume.checkpoint() {
            // A later pause of the thread: this file's pause was resumed already.
            return Err(Error::StaleResume { thread: thread.clone() });
        }
        let mut resume = resume;
        if let Some(update) = update {
            let Value::Object(mut map) = update else {
                return Err(Error::BadResumeValue {
                    node: resume.node().clone(),
                    expected: "a JSON object of keys to write".to_owned(),
                    reason: format!("resuming from `{shown}`: the update is not an object"),
                });
            };
            let asks = resume.interrupts().iter().filter(|i| i.needs_answer()).count();
            if asks == 1 {
                if let Some(key) = self.graph.resume_key(resume.node()) {
                    if let Some(answer) = map.remove(key) {
                        resume = resume.answer(answer);
                    }
                }
            }
            if !map.is_empty() {
                resume = resume.update(Update::from(map));
            }
        }
        Ok(resume)
    }

    /// [`run`](Self::run) on the current tokio runtime (the engine's async driver): network
    /// nodes (`llm.call`, `http.*`, `actions.notify`) are awaited without holding a thread, so
    /// the branches of a fan-out wait for their requests together; Lua and the other nodes run
    /// on tokio's blocking pool. Dropping the future part-way stops the call's `run:` blocks
    /// and leaves the thread as `App::run_async` does: a resumed pause is put back, so the same
    /// token works again.
    ///
    /// # Errors
    /// Those of [`run`](Self::run); `Error::NoRuntime` outside a tokio runtime.
    #[cfg(feature = "tokio")]
    pub async fn run_async(&self, call: Call<State>) -> Result<Outcome<State>, Error> {
        let (runner, _cancel) = self.cancellable();
        match &runner {
            Runner::Stored(app) => self.linked(app.run_async(call).await),
            Runner::Free(app) => app.run_async(self.unstored(call)?).await.map(Outcome::Done),
        }
    }

    /// [`run_stream`](Self::run_stream) on the current tokio runtime: a `Send` stream of events.
    #[cfg(feature = "tokio")]
    pub fn run_stream_async(
        &self,
        call: Call<State>,
    ) -> impl futures_core::Stream<Item = Result<Event<State>, Error>> + Send + '_ {
        use futures_util::StreamExt;
        let events = match &self.async_runner {
            Runner::Stored(app) => app.run_stream_async(call).boxed(),
            Runner::Free(app) => match self.unstored(call) {
                Ok(call) => app.run_stream_async(call).boxed(),
                Err(error) => futures_util::stream::once(std::future::ready(Err(error))).boxed(),
            },
        };
        events.map(move |event| self.shown_event(event))
    }

    /// [`invoke`](Self::invoke) on the current tokio runtime: `run_async(start(input)?)`.
    ///
    /// `config.checkpoint` (continuing from a file `checkpoint.save` wrote) has no async form:
    /// use [`invoke`](Self::invoke) (from `spawn_blocking`) for such an agent.
    ///
    /// # Errors
    /// Those of [`invoke`](Self::invoke); `Error::NoRuntime` outside a tokio runtime;
    /// [`Error::Store`] for an agent with `config.checkpoint`.
    #[cfg(feature = "tokio")]
    pub async fn invoke_async(&self, input: Value) -> Result<Outcome<State>, Error> {
        if let Some(path) = &self.checkpoint {
            return Err(Error::store(format!(
                "agent `{}` continues from `config.checkpoint` `{}`, which only the blocking `invoke` does",
                self.name(),
                path.display()
            )));
        }
        self.run_async(self.start(input)?).await
    }

    /// [`resume`](Self::resume) on the current tokio runtime: `run_async(Call::resume(resume))`.
    /// Dropping the future part-way leaves the pause in place: the same token works again.
    ///
    /// # Errors
    /// Those of [`run_async`](Self::run_async).
    #[cfg(feature = "tokio")]
    pub async fn resume_async(&self, resume: Resume<State>) -> Result<Outcome<State>, Error> {
        self.run_async(Call::resume(resume)).await
    }

    /// [`stream`](Self::stream) on the current tokio runtime: `run_stream_async(start(input)?)`.
    #[cfg(feature = "tokio")]
    pub fn stream_async(
        &self,
        input: Value,
    ) -> impl futures_core::Stream<Item = Result<Event<State>, Error>> + Send + '_ {
        use futures_util::StreamExt;
        match self.start(input) {
            Ok(call) => self.run_stream_async(call).left_stream(),
            Err(error) => futures_util::stream::once(std::future::ready(Err(error))).right_stream(),
        }
    }

    /// A runner for one async call, whose `run:` blocks stop when the returned guard is
    /// dropped: with the call's future, if the caller drops it part-way.
    #[cfg(feature = "tokio")]
    fn cancellable(&self) -> (Runner, CancelOnDrop) {
        let flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let graph = self.graph.driven(true).cancelled_by(flag.clone());
        // The async runner's app with this call's graph: its store, context and node cache.
        let runner = match &self.async_runner {
            Runner::Stored(app) => Runner::Stored(app.with_graph(graph)),
            Runner::Free(app) => Runner::Free(app.with_graph(graph)),
        };
        (runner, CancelOnDrop(flag))
    }

    /// An event of a run as the agent shows it: a pause gets its file named after its node (with
    /// a directory store) and its fan-in state.
    fn shown_event(&self, mut event: Result<Event<State>, Error>) -> Result<Event<State>, Error> {
        if let Ok(Event::Interrupted { state, resume }) = &mut event {
            self.link(resume)?;
            self.show_paused(state, resume)?;
        }
        event
    }

    /// The thread's latest checkpoint (`None` without one, or without a checkpointer).
    ///
    /// At a breakpoint before a fan-in node, its state holds the branches' `parallel_results`
    /// that node will read, as the pause's state does.
    pub fn state(&self, thread: &ThreadId) -> Result<Option<Snapshot<State>>, Error> {
        match &self.runner {
            Runner::Stored(app) => Ok(app.state(thread)?.map(|snapshot| self.shown(snapshot))),
            Runner::Free(_) => Ok(None),
        }
    }

    /// Every checkpoint of the thread, newest first (each shown as [`state`](Self::state) shows
    /// the latest).
    pub fn history(&self, thread: &ThreadId) -> Result<Vec<Snapshot<State>>, Error> {
        match &self.runner {
            Runner::Stored(app) => Ok(app.history(thread)?.into_iter().map(|snapshot| self.shown(snapshot)).collect()),
            Runner::Free(_) => Ok(Vec::new()),
        }
    }

    /// Writes a checkpoint at the head of `thread` as if node `as_node` had run and returned
    /// `update` (a JSON object of state keys, applied through the declared types and reducers),
    /// routed from `as_node` on the new state; `Call::recover(thread)` continues from there.
    /// See `App::update_state`.
    ///
    /// # Errors
    /// Those of `App::update_state` (`UnknownNode`, `ThreadBusy`, `InsideFanOut`, `NoRoute`,
    /// `CheckpointNotFound`), and a refused update as `as_node`'s `NodeFailed`.
    pub fn update_state(&self, thread: &ThreadId, update: Value, as_node: &str) -> Result<Snapshot<State>, Error> {
        self.stored(thread)?.update_state(thread, Update::from(update), as_node)
    }

    /// Starts thread `new_thread` from checkpoint `checkpoint` of `thread`, which stays
    /// untouched; `Call::recover(new_thread)` continues from there (a paused
    /// checkpoint hands out the fork's own token). See `App::fork`.
    ///
    /// # Errors
    /// Those of `App::fork` (`NoSuchCheckpoint`, `ThreadExists`, `InvalidThreadId`).
    pub fn fork(
        &self,
        thread: &ThreadId,
        checkpoint: tea_runtime::CheckpointId,
        new_thread: impl Into<ThreadId>,
    ) -> Result<Snapshot<State>, Error> {
        self.stored(thread)?.fork(thread, checkpoint, new_thread)
    }

    /// The agent's graph as a Mermaid flowchart.
    pub fn mermaid(&self) -> String {
        crate::ir::draw::mermaid(&self.graph)
    }

    /// The agent's graph in Graphviz DOT.
    pub fn dot(&self) -> String {
        crate::ir::draw::dot(&self.graph)
    }

    fn stored(&self, thread: &ThreadId) -> Result<&App<YamlGraph, Arc<dyn Checkpointer>>, Error> {
        match &self.runner {
            Runner::Stored(app) => Ok(app),
            Runner::Free(_) => Err(no_store(self.name(), thread)),
        }
    }

    /// The input as a state: a JSON object whose declared keys fit their types.
    fn input(&self, input: Value) -> Result<State, Error> {
        let start = || NodeName::from_static("__start__");
        let Value::Object(mut map) = input else {
            return Err(Error::NodeFailed {
                node: start(),
                source: format!("the input must be a JSON object of state keys, not `{input}`").into(),
            });
        };
        crate::state::initial::merge(&self.graph.inner().initial_state, &mut map);
        // Secrets first: a type error would show the value.
        self.graph.refuse_secrets(&map).map_err(|reason| Error::NodeFailed {
            node: start(),
            source: format!("the input does not fit: {reason}").into(),
        })?;
        for (key, value) in &map {
            self.graph.inner().schema.check(key, value).map_err(|reason| Error::NodeFailed {
                node: start(),
                source: format!("the input does not fit: {reason}").into(),
            })?;
        }
        Ok(State::from_map(map))
    }
}

/// Sets its flag when dropped: the `run:` blocks of the call it belongs to stop (a block still
/// running when the call is done or dropped is not wanted any more).
#[cfg(feature = "tokio")]
struct CancelOnDrop(Arc<std::sync::atomic::AtomicBool>);

#[cfg(feature = "tokio")]
impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The first bytes of a record sealed by `tea_runtime::Sealed` ([`Engine::encrypt_with`]).
const SEALED_MAGIC: &[u8] = b"TEAs";

fn no_store(agent: &str, thread: &ThreadId) -> Error {
    Error::store(format!(
        "agent `{agent}` has no checkpointer, so it keeps no threads (thread `{thread}`); add `config.checkpointer: memory`"
    ))
}

/// The events of an agent's run: a [`Stream`] of the engine, or the one error that kept the run
/// from starting (an input that does not fit).
pub struct AgentStream<'a> {
    agent: Option<&'a Agent>,
    state: StreamState<'a>,
}

enum StreamState<'a> {
    Running(Box<Stream<'a, YamlGraph>>),
    Failed(Option<Error>),
}

impl AgentStream<'_> {
    fn failed(error: Error) -> Self {
        AgentStream { agent: None, state: StreamState::Failed(Some(error)) }
    }
}

impl Iterator for AgentStream<'_> {
    type Item = Result<Event<State>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.state {
            StreamState::Running(stream) => {
                let event = stream.next()?;
                Some(match self.agent {
                    Some(agent) => agent.shown_event(event),
                    None => event,
                })
            }
            StreamState::Failed(error) => error.take().map(Err),
        }
    }
}

impl fmt::Debug for AgentStream<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.state {
            StreamState::Running(stream) => stream.fmt(f),
            StreamState::Failed(error) => f.debug_tuple("AgentStream").field(error).finish(),
        }
    }
}
