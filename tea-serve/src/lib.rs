//! tea's HTTP service: agents behind LangChain's [Agent Protocol], with an inbox page where a
//! person answers their pauses in the browser. Re-exported by the `tea` crate as `tea::serve`
//! (feature `serve`).
//!
//! [`router`] serves a `graph!` app, [`router_for`] YAML agents (feature `yaml`), [`Serve`]
//! several of either with options (tokens, body limit, a drawing of the graph). The router
//! answers the protocol's agents, threads and runs endpoints:
//!
//! | route | what |
//! |---|---|
//! | `POST /agents/search`, `GET /agents/{id}`, `GET /agents/{id}/schemas` | the served graphs |
//! | `POST /threads`, `POST /threads/search`, `GET/PATCH/DELETE /threads/{id}` | threads: status `idle`, `busy`, `interrupted`, `error`; search by status, metadata and values |
//! | `GET /threads/{id}/history`, `POST /threads/{id}/copy` | a thread's checkpoints; a copy under a new id |
//! | `POST /runs/wait`, `POST /runs/stream`, `POST /runs` (also under `/threads/{id}/runs…`) | a run, waited for, streamed as server-sent events, or in the background |
//! | `POST /runs/search`, `GET /runs/{id}`, `GET /runs/{id}/wait`, `GET /runs/{id}/stream`, `POST /runs/{id}/cancel`, `DELETE /runs/{id}` | runs: this server's, and (from their records and stored events) those of other replicas and earlier processes; a stream resumes after `Last-Event-ID` |
//! | `PUT/GET/DELETE /store/items`, `POST /store/items/search`, `POST /store/namespaces` | the store: JSON items by namespace and key, shared by every thread (kept in the first agent's store) |
//! | `POST /threads/{id}/stream`, `POST /threads/{id}/commands`, `GET /threads/{id}/stream` (WebSocket) | a thread's events by channel (every run's, on any replica; replayed after `since` or `Last-Event-ID`); `run.start`, `input.respond`, `state.get`, `state.listCheckpoints`; over the WebSocket, both, with `subscription.subscribe`/`unsubscribe`/`reconnect` |
//! | `GET /inbox`, `GET /inbox/threads/{id}` | the inbox: paused threads with a form each; a thread's timeline and graph |
//!
//! Beside the protocol, LangGraph Platform's routes that its SDKs call (one implementation under
//! both): `POST /assistants/search`, `POST /assistants/count`, `GET /assistants/{id}` (`/graph`,
//! `/schemas`, `/subgraphs`) — an assistant per agent, its id the agent's name; `GET` and `POST
//! /threads/{id}/state` (an update as a node), `GET /threads/{id}/state/{checkpoint_id}`, `POST
//! /threads/{id}/history`; `GET /threads/{id}/runs`, `GET`/`DELETE /threads/{id}/runs/{run_id}`,
//! its `/join`, `/stream` and `/cancel`. A run request naming `assistant_id` is answered as
//! LangGraph answers it (`runs.wait`: the state, with `__interrupt__` at a pause); `stream_mode`
//! chooses the streamed events (`values`, `updates`, `custom`, `debug`, `messages-tuple`,
//! `messages`); `x-api-key` carries a token as the bearer header does.
//!
//! A pause is answered by a run with `command: {resume: ANSWER}` (LangGraph Server's
//! convention), `{resume: {INTERRUPT_ID: ANSWER, …}}` when several pauses are pending, and an
//! optional `command.update` merged into the state first. Of several answers to one pause —
//! from one process or several on one database — exactly one runs; the others get `409` with
//! the engine's reason. A run on a thread that is running gets `409` (the protocol's `reject`
//! multitask strategy), or waits its turn with `multitask_strategy: enqueue`. Errors are the
//! protocol's `ErrorResponse` (`{code, message}`).
//!
//! Besides the agents' checkpoints, the first agent's store keeps what the protocol knows of
//! threads (metadata, timeline), of runs (each run's outcome, its events, and while it lasts
//! its claim) and the store's items, each under a graph name of its own (`tea-serve#threads`,
//! `tea-serve#runs`, `tea-serve#events`, `tea-serve#queue`, `tea-serve#store`): on one
//! PostgreSQL database, every replica serves the same threads, runs and items.
//!
//! **Runs survive their replica.** A run's claim — which server holds it, until when, its
//! request — is in the store before the run touches its thread, renewed while it runs
//! ([`Serve::lease`]). Each router's worker takes over the runs whose claims lapsed (their
//! server died or restarted) and finishes them: from the request when the thread is untouched
//! (an answer still waiting at its pause is applied then, once), else by the engine's
//! `recover`, from the last checkpoint, with no recorded node run again; the engine's own lease
//! keeps a live run from being taken. A run's events are stored as they come, so its stream on
//! any replica follows it live, and `Last-Event-ID` resumes there.
//!
//! ```no_run
//! # use tea_runtime as tea;
//! async fn serve_app<G: tea::Graph>(app: tea::App<G, tea::MemoryStore>) -> std::io::Result<()> {
//!     let router = tea_serve::router(app);
//!     let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//!     tea_serve::serve(listener, router, tea_serve::shutdown_signal()).await
//! }
//! ```
//!
//! **Access.** Every route wants `Authorization: Bearer TOKEN` with a token of [`Access`]
//! (read rights for reads, answer rights for runs and changes), except from a loopback peer
//! when the access is [`Access::insecure_local`] (what [`router`] and [`router_for`] use). A
//! request without the right token gets `401` (or `403` for a read-only token that writes)
//! before any thread is looked at, so it learns nothing about which threads exist. The inbox
//! signs in with a token once (a `SameSite=Strict` cookie) and its forms carry a per-session
//! CSRF token and are refused from other origins.
//!
//! **What a web page can send.** A state-changing request of the JSON API with a body must be
//! `Content-Type: application/json` (`415` otherwise: a page's `no-cors` request can only send
//! `text/plain`, form or multipart bodies). A request let in without a token, as a loopback
//! peer, must also name a loopback host (`Host: localhost`, `127.0.0.1`, `[::1]`, or a host of
//! [`Serve::allowed_host`]; `421` otherwise, which stops DNS rebinding) and, when it has an
//! `Origin`, come from the server's own or a loopback origin (`403` otherwise). A page of a
//! loopback origin (another port of this machine: a dev server, a UI on LangGraph's JS SDK) or
//! of an allowed host may call the JSON API from the browser: its CORS preflight is granted and
//! its responses name its origin (`Access-Control-Allow-Origin`); no other origin's is, and
//! credentials (cookies) never are, so it still needs a token unless the access is
//! `insecure_local`. Each connection
//! has [`HEADER_READ_TIMEOUT`] for a request's headers ([`serve`]), each body
//! [`Serve::body_read_timeout`] (`408`).
//!
//! [Agent Protocol]: https://github.com/langchain-ai/agent-protocol
#![deny(missing_docs, missing_debug_implementations)]

mod access;
mod api;
mod draw;
mod error;
mod guard;
mod hub;
mod inbox;
mod journal;
mod langgraph;
mod modes;
mod plan;
mod queue;
mod records;
mod request;
mod routes;
mod runlog;
mod runs;
mod served;
mod store;
mod streaming;
mod time;

pub use access::{Access, AccessError, Right};

use axum::Router;
use served::Served;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tea_runtime::{App, Checkpointer, Graph};

/// The default largest request body: 1 MiB.
pub const DEFAULT_BODY_LIMIT: usize = 1 << 20;

/// How long [`serve`] waits for a request's headers (each request's, and the first byte of
/// the next on a kept-alive connection) before it closes the connection: 10 s.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The default time a request's body may take to arrive whole: 30 s; a slower one gets `408`
/// and its connection is closed ([`Serve::body_read_timeout`]).
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The router for one app: the protocol's routes and the inbox, open to loopback peers without
/// a token ([`Access::insecure_local`]). Serve it with [`serve`] (or with axum's
/// `into_make_service_with_connect_info::<SocketAddr>()`, so the router sees the peer).
pub fn router<G: Graph, C: Checkpointer>(app: App<G, C>) -> Router {
    Serve::new().app(app).router()
}

/// The router for YAML agents, all running on `store` (which also keeps the threads'
/// records): each agent is put on it with `with_checkpointer`. Open to loopback peers without
/// a token, as [`router`].
#[cfg(feature = "yaml")]
pub fn router_for(agents: impl IntoIterator<Item = tea_yaml::Agent>, store: impl Checkpointer) -> Router {
    let store: Arc<dyn Checkpointer> = Arc::new(store);
    agents.into_iter().fold(Serve::new(), |serve, agent| serve.yaml(agent, store.clone())).router()
}

/// A router with options: which agents, who may call it, how large a body may be.
///
/// ```no_run
/// # use tea_runtime as tea;
/// use tea_serve::{Access, Right, Serve};
/// fn router<G: tea::Graph>(app: tea::App<G, tea::MemoryStore>, drawing: &str) -> axum::Router {
///     let access = Access::tokens([("s3cret-reviewer-1234", Right::Answer), ("s3cret-auditor-1234", Right::Read)]);
///     Serve::new().access(access).body_limit(64 * 1024).app_drawn(app, drawing).router()
/// }
/// ```
pub struct Serve {
    agents: Vec<Arc<dyn Served>>,
    access: Access,
    body_limit: usize,
    body_read_timeout: Duration,
    allowed_hosts: Vec<String>,
    /// [`Serve::sweep_every`].
    sweep_every: Option<Duration>,
    /// What `/store` serves ([`Serve::memory`]; else the first agent's).
    memory: Option<tea_runtime::Memory>,
    /// Whether `memory` was given rather than taken from the first agent.
    memory_given: bool,
    /// [`Serve::lease`].
    lease: Duration,
}

impl fmt::Debug for Serve {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Serve")
            .field("agents", &self.agents.iter().map(|a| a.name().to_owned()).collect::<Vec<_>>())
            .field("access", &self.access)
            .field("body_limit", &self.body_limit)
            .field("body_read_timeout", &self.body_read_timeout)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("sweep_every", &self.sweep_every)
            .field("memory", &self.memory)
            .field("lease", &self.lease)
            .finish()
    }
}

impl Default for Serve {
    fn default() -> Self {
        Serve::new()
    }
}

impl Serve {
    /// No agents yet; [`Access::insecure_local`]; bodies up to [`DEFAULT_BODY_LIMIT`], read
    /// within [`DEFAULT_BODY_READ_TIMEOUT`]; no host besides the loopback names.
    pub fn new() -> Self {
        Serve {
            agents: Vec::new(),
            access: Access::insecure_local(),
            body_limit: DEFAULT_BODY_LIMIT,
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            allowed_hosts: Vec::new(),
            sweep_every: None,
            memory: None,
            memory_given: false,
            lease: tea_runtime::DEFAULT_LEASE,
        }
    }

    /// Serves `app` (agent id: its graph's name). The first agent's store also keeps the
    /// threads' records (metadata, timeline), so replicas share them when it is shared.
    pub fn app<G: Graph, C: Checkpointer>(mut self, app: App<G, C>) -> Self {
        self.take_memory(app.memory());
        self.agents.push(Arc::new(served::GraphServed { app, drawing: None }));
        self
    }

    /// Serves `app` with its drawing (`Flow::MERMAID`), which the thread page shows with the
    /// current node marked.
    pub fn app_drawn<G: Graph, C: Checkpointer>(mut self, app: App<G, C>, mermaid: &str) -> Self {
        self.take_memory(app.memory());
        self.agents.push(Arc::new(served::GraphServed { app, drawing: Some(mermaid.to_owned()) }));
        self
    }

    /// Serves the YAML agent `agent`, put on `store` (see [`router_for`]).
    #[cfg(feature = "yaml")]
    pub fn yaml(mut self, agent: tea_yaml::Agent, store: Arc<dyn Checkpointer>) -> Self {
        let agent = agent.with_checkpointer(store.clone());
        // The agent's `ltm.*` and `memory.*` actions keep their items in this memory too.
        self.take_memory(Some(&tea_runtime::Memory::on(store.clone())));
        let drawing = agent.mermaid();
        self.agents.push(Arc::new(served::YamlServed { agent, store, drawing }));
        self
    }

    /// The long-term memory the `/store` routes serve (default: the first agent's,
    /// `App::memory`, which its nodes reach with `ctx.store()`; a YAML agent's is on its
    /// store). Give one with an embedder (`Memory::embedder`) for searches with a `query`.
    pub fn memory(mut self, memory: tea_runtime::Memory) -> Self {
        self.memory = Some(memory);
        self.memory_given = true;
        self
    }

    /// The first agent's memory, unless one was given or taken already.
    fn take_memory(&mut self, memory: Option<&tea_runtime::Memory>) {
        if !self.memory_given && self.agents.is_empty() {
            self.memory = memory.cloned();
        }
    }

    /// Who may call the router.
    pub fn access(mut self, access: Access) -> Self {
        self.access = access;
        self
    }

    /// The largest request body accepted, in bytes; a larger one gets `413`.
    pub fn body_limit(mut self, bytes: usize) -> Self {
        self.body_limit = bytes;
        self
    }

    /// How long a request's body may take to arrive whole (default
    /// [`DEFAULT_BODY_READ_TIMEOUT`]); a slower one gets `408` and its connection is closed.
    pub fn body_read_timeout(mut self, limit: Duration) -> Self {
        self.body_read_timeout = limit;
        self
    }

    /// A host name (`tea.lan`, or `tea.lan:8080` for that port only) that requests from a
    /// loopback peer without a token may be addressed to (their `Host`, and their `Origin` when
    /// they have one), besides `localhost`, `127.0.0.1` and `[::1]`: a name this machine is
    /// reached by through a proxy or `/etc/hosts`. Any other `Host` gets `421` under
    /// [`Access::insecure_local`], so that a web page cannot reach the server by pointing a
    /// name of its own at 127.0.0.1 (DNS rebinding). Requests with a token are not concerned.
    pub fn allowed_host(mut self, host: impl Into<String>) -> Self {
        self.allowed_hosts.push(host.into());
        self
    }

    /// Sweeps each agent's threads under its retention — a `graph!` app's
    /// (`Builder::retention`), a YAML agent's (`Engine::retention`) — when the router is made
    /// and then every `every`, each on a thread of its own (`App::sweep_every`), for as long as
    /// the router (or a clone of it) lives. Expired threads lose their records too; a paused
    /// thread kept past the finished threads' time, and a sweep that fails, are logged to
    /// stderr. `tea serve --sweep-every` sets it.
    pub fn sweep_every(mut self, every: Duration) -> Self {
        self.sweep_every = Some(every);
        self
    }

    /// How long this server's claim on a run it runs lasts without renewal (default
    /// [`tea_runtime::DEFAULT_LEASE`]): once a server that shares the store with others (or
    /// restarted on it) has not renewed a run's claim for that long — it died, or was cut off —
    /// another takes the run over and finishes it from the thread's last checkpoint. Give the
    /// agents' engine lease the same (`Builder::lease`, `tea_yaml::Agent::with_lease`): the
    /// engine refuses to recover a thread while its own lease shows the run alive, so the
    /// longer of the two decides. `tea serve --lease` sets both.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease.max(Duration::from_millis(200));
        self
    }

    /// The router. With no agent, every protocol route answers `404`. It starts the server's
    /// worker (on the tokio runtime it is made in, else on a thread of its own), which renews
    /// its runs' claims and takes over the runs of servers whose claims lapsed, for as long as
    /// the router (or a clone of it) lives.
    pub fn router(self) -> Router {
        let sweepers = match self.sweep_every {
            Some(every) => {
                let keeper = self.agents.first().cloned();
                self.agents.iter().filter_map(|agent| sweeper(agent, keeper.clone(), every)).collect()
            }
            None => Vec::new(),
        };
        let shared = Arc::new(Shared {
            agents: self.agents,
            access: self.access,
            runs: runs::Runs::default(),
            body_limit: self.body_limit,
            body_read_timeout: self.body_read_timeout,
            allowed_hosts: self.allowed_hosts,
            _sweepers: sweepers,
            started_at: time::now_ms(),
            memory: self.memory,
            worker: queue::Worker::new(uuid::Uuid::new_v4().to_string(), self.lease),
        });
        start_worker(Arc::downgrade(&shared));
        routes::routes()
            .merge(inbox::routes())
            // After the rights: a request refused them is answered before its body is read.
            .layer(axum::middleware::from_fn_with_state(shared.clone(), guard::guard))
            .layer(axum::middleware::from_fn_with_state(shared.clone(), access::authorize))
            // Outermost: a CORS preflight is answered before any token is asked for.
            .layer(axum::middleware::from_fn_with_state(shared.clone(), access::cors))
            .layer(axum::extract::DefaultBodyLimit::max(shared.body_limit))
            .with_state(shared)
    }
}

/// What every handler shares.
pub(crate) struct Shared {
    pub(crate) agents: Vec<Arc<dyn Served>>,
    pub(crate) access: Access,
    pub(crate) runs: runs::Runs,
    pub(crate) body_limit: usize,
    pub(crate) body_read_timeout: Duration,
    /// Hosts besides the loopback names that tokenless loopback requests may name.
    pub(crate) allowed_hosts: Vec<String>,
    /// The agents' sweepers ([`Serve::sweep_every`]): they stop when the router goes.
    _sweepers: Vec<tea_runtime::Sweeper>,
    /// When the router was made: its assistants' creation time.
    pub(crate) started_at: u64,
    /// What the `/store` routes serve ([`Serve::memory`]).
    pub(crate) memory: Option<tea_runtime::Memory>,
    /// This server as a replica: its id and lease (`queue.rs`).
    pub(crate) worker: queue::Worker,
}

/// Runs the replica's worker (`runs::work`) on the current tokio runtime, or on a thread of
/// its own when the router is made outside one.
fn start_worker(shared: std::sync::Weak<Shared>) {
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        handle.spawn(runs::work(shared));
        return;
    }
    let spawned = std::thread::Builder::new().name("tea-serve-worker".into()).spawn(move || {
        match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(runtime) => runtime.block_on(runs::work(shared)),
            Err(error) => eprintln!("tea serve: the worker's runtime: {error}"),
        }
    });
    if let Err(error) = spawned {
        eprintln!("tea serve: the worker's thread: {error}");
    }
}

/// `agent`'s sweeper: each report's expired threads lose their records (kept in `keeper`'s
/// store, the first agent's); what it kept paused, and its failures, go to stderr.
fn sweeper(agent: &Arc<dyn Served>, keeper: Option<Arc<dyn Served>>, every: Duration) -> Option<tea_runtime::Sweeper> {
    let name = agent.name().to_owned();
    let records = keeper.unwrap_or_else(|| Arc::clone(agent));
    agent.sweep_every(
        every,
        Box::new(move |report| match report {
            Ok(report) => {
                for expired in &report.expired {
                    if let Err(error) = records::delete(records.store(), &expired.thread) {
                        eprintln!(
                            "tea serve: agent `{name}`: the record of expired thread `{}`: {error:?}",
                            expired.thread
                        );
                    }
                }
                for kept in &report.kept_paused {
                    eprintln!("tea serve: agent `{name}`: {kept}");
                }
                for (thread, error) in &report.unreadable {
                    eprintln!(
                        "tea serve: agent `{name}`: thread `{thread}` kept, unreadable: {}",
                        tea_runtime::error_chain(error)
                    );
                }
            }
            Err(error) => {
                eprintln!("tea serve: agent `{name}`: the sweep failed: {}", tea_runtime::error_chain(&error))
            }
        }),
    )
}

impl Shared {
    /// The agent named `name`.
    pub(crate) fn agent(&self, name: &str) -> Option<Arc<dyn Served>> {
        self.agents.iter().find(|a| a.name() == name).cloned()
    }

    /// The store the threads' records are kept in: the first agent's.
    pub(crate) fn records(&self) -> Option<&dyn Checkpointer> {
        self.agents.first().map(|a| a.store())
    }
}

/// Serves `router` on `listener` until `shutdown` completes, then lets the requests in flight
/// finish (graceful shutdown). Runs still going when the process ends stop where they are: a
/// paused thread stays resumable, a running one can be recovered.
///
/// Each connection has [`HEADER_READ_TIMEOUT`] to send a request's headers (and, kept alive,
/// to start the next request), so connections that send slowly or nothing are closed; a body
/// has the router's [`Serve::body_read_timeout`]. The router sees each request's peer
/// (`ConnectInfo<SocketAddr>`), which [`Access::insecure_local`] needs.
///
/// # Errors
/// The listener's I/O errors.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with_header_timeout(listener, router, shutdown, HEADER_READ_TIMEOUT).await
}

/// [`serve`], with `header_read_timeout` for [`HEADER_READ_TIMEOUT`].
///
/// # Errors
/// The listener's I/O errors.
pub async fn serve_with_header_timeout(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    header_read_timeout: Duration,
) -> std::io::Result<()> {
    use axum::extract::ConnectInfo;
    use hyper_util::rt::{TokioIo, TokioTimer};
    // Connections watch `stop` to shut down gracefully; `open` is dropped by each one as it
    // ends, so that `serve` returns once none is left.
    let (stop, watched) = tokio::sync::watch::channel(());
    let (open, mut all_closed) = tokio::sync::mpsc::channel::<()>(1);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // A connection that failed as it was accepted is that connection's
                    // problem; out of descriptors, wait for some to be closed (as axum does).
                    if !matches!(
                        error.kind(),
                        std::io::ErrorKind::ConnectionAborted | std::io::ErrorKind::ConnectionReset
                    ) {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            tower_service::Service::call(&mut router.clone(), request)
        });
        let mut watched = watched.clone();
        let open = open.clone();
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(header_read_timeout);
            let connection = builder.serve_connection(TokioIo::new(stream), service).with_upgrades();
            let mut connection = std::pin::pin!(connection);
            tokio::select! {
                // A connection's errors (a client gone, a timeout) end only that connection.
                _ = connection.as_mut() => {}
                _ = watched.changed() => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
            drop(open);
        });
    }
    drop(listener);
    let _ = stop.send(());
    drop(open);
    // `None` once every connection's sender is dropped.
    let _ = all_closed.recv().await;
    Ok(())
}

/// Completes on SIGTERM or Ctrl-C (SIGINT): the usual `shutdown` for [`serve`].
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
