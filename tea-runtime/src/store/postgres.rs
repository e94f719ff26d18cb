//! `PostgresStore`: checkpoints in a PostgreSQL database, shared by every process that connects.
//!
//! # Tables
//!
//! In the store's schema (`public` unless the builder names another):
//!
//! | table                | columns                                                    | one row per |
//! |----------------------|------------------------------------------------------------|-------------|
//! | `tea_schema_version` | `version integer` (primary key), `applied_at timestamptz`  | migration applied |
//! | `tea_threads`        | `graph text`, `thread text` (primary key), `head bigint`, `rest text`, `rest_head bigint`, `rest_since bigint` | thread: its newest checkpoint's id, and its retention mark |
//! | `tea_checkpoints`    | `graph text`, `thread text`, `id bigint` (primary key), `bytes bytea` | checkpoint |
//!
//! A thread's retention mark (`RestMarks`, version 2) is how it rests at head `rest_head`
//! (`finished`, `paused`, `active`) and since when (`rest_since`, milliseconds since the Unix
//! epoch by the app's clock), written by a sweep that read that head; it counts only while
//! `rest_head = head`. A sweep then expires threads with one statement that deletes the marked
//! threads past their time, and their checkpoints, for the heads they were marked at.
//!
//! `connect` brings the tables up to date: in one transaction holding a transaction-scoped
//! advisory lock derived from the schema's name, it reads the highest version in
//! `tea_schema_version` and applies the migrations above it. Processes that start together wait
//! for each other on the lock, and a process that dies mid-migration rolls it back whole.
//!
//! # The compare-and-swap
//!
//! `append` is ONE statement, so one transaction: a data-modifying `WITH` moves the head
//! (`UPDATE … SET head = id WHERE head = expected`, or `INSERT … ON CONFLICT DO NOTHING` for a new
//! thread) and the outer `INSERT` stores the checkpoint only for the row it moved. Under
//! PostgreSQL's row locks a writer racing on the same head waits for the first to commit, then
//! re-checks `head = expected` on the committed row and moves nothing: of K writers expecting one
//! head, exactly one changes it, in any number of processes.
//!
//! # Durability
//!
//! A durable append commits on a connection with the server's `synchronous_commit` (`on` by
//! default): the commit returns once its WAL record is flushed. An append with `durable: false`
//! commits on a connection of a second pool whose sessions set `synchronous_commit = off`: it is
//! as atomic and as visible, but returns without waiting for the flush, so a crash *of the
//! server* may lose the last such commits — never part of one, and never one that a later durable
//! commit followed, since WAL is flushed in order.
//!
//! A resume of a pause its app wrote reads no head ([`Checkpointer::resumes_without_read`]):
//! its claim is `append_next` whose `UPDATE` also requires the head checkpoint's bytes to be
//! those of the pause (`append_over`), one statement, so a pause cycle is four round trips (the
//! new thread's claim, the pause, the resume's claim, the end) where it was five.
//!
//! # Sync and async
//!
//! The store owns a small tokio runtime (two worker threads) that drives the connection pool. A
//! blocking trait method hands its work to that runtime and waits on a channel, so it works from
//! plain threads and from inside any other async runtime alike (it blocks the calling thread, as
//! any synchronous call does). The `*_async` methods hand over the same work and await it
//! without blocking.
//!
//! # Lost connections and cancellation
//!
//! A statement whose connection is lost (the server restarted, or an administrator killed the
//! backend) is tried again on a fresh connection from the pool, a few times, a little later each
//! time. An append that may have committed before its connection went is idempotent on the
//! retry: a conflict whose checkpoint `id` holds exactly the bytes being written is the write
//! itself, so it is `Written`. So a run that fails still releases its lease at once, as on the
//! other stores.
//!
//! The future of [`append_async`](PostgresStore::append_async) can be dropped part-way (a run
//! whose future is dropped): the append goes on in the store's runtime regardless, so the drop
//! waits for it and, if it moved the head, moves the head back and deletes the checkpoint (only
//! if nothing moved the head since). The thread is then exactly as its writer last knew it, and
//! what the writer does next (an abandoned run puts back its pause or releases its lease) lands.

use super::{AppendOutcome, CheckpointId, Checkpointer, Expired, Expiry, Rest, RestMark, RestMarks};
use crate::error::Error;
use crate::name::ThreadId;
use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio_postgres::config::Host;
use tokio_postgres::error::SqlState;
use tokio_postgres::NoTls;

/// The connections a store opens at most, unless its builder says otherwise.
const DEFAULT_MAX_CONNECTIONS: usize = 16;
/// How long connecting to the server may take, unless the URL sets `connect_timeout`.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The schema of the tables, unless the builder names another.
const DEFAULT_SCHEMA: &str = "public";
/// How many times a statement is tried when its connection is lost.
const ATTEMPTS: u32 = 5;
/// The wait before the first retry on a fresh connection; it doubles for each next one.
const FIRST_RETRY: Duration = Duration::from_millis(10);

/// The migrations, in order: migration `i` (from 0) brings the tables to version `i + 1`. Each
/// runs in the transaction that records it. `{schema}` stands for the quoted schema name.
const MIGRATIONS: &[&str] = &[
    "
    CREATE TABLE {schema}.tea_threads (
        graph  text   NOT NULL,
        thread text   NOT NULL,
        head   bigint NOT NULL CHECK (head > 0),
        PRIMARY KEY (graph, thread)
    );
    CREATE TABLE {schema}.tea_checkpoints (
        graph  text   NOT NULL,
        thread text   NOT NULL,
        id     bigint NOT NULL CHECK (id > 0),
        bytes  bytea  NOT NULL,
        PRIMARY KEY (graph, thread, id)
    );
",
    "
    ALTER TABLE {schema}.tea_threads
        ADD COLUMN rest       text,
        ADD COLUMN rest_head  bigint,
        ADD COLUMN rest_since bigint;
    CREATE INDEX tea_threads_rest ON {schema}.tea_threads (graph, rest, rest_since);
",
];

/// Checkpoints in a [PostgreSQL](https://www.postgresql.org) database: many processes, on many
/// machines, share one space of threads. A pause taken in one process can be resumed in any
/// other, and of K processes resuming one token at once exactly one proceeds; the others get
/// [`Error::StaleResume`].
///
/// [`connect`](Self::connect) creates the tables on first use (see the
/// [`PostgresStoreBuilder`] for a schema of their own and the pool size). The handle is cheap to
/// clone; clones share one connection pool. It is usable from plain threads and from async code:
/// the [`Checkpointer`] methods block the calling thread without needing (or disturbing) a
/// runtime, and each has an `*_async` twin that awaits instead.
///
/// An append with `durable: true` returns once PostgreSQL has flushed its commit to the log; one
/// with `durable: false` (the engine's steps between pauses) commits just as atomically without
/// waiting for the flush.
///
/// ```no_run
/// use tea::{AppendOutcome, Checkpointer, PostgresStore, ThreadId};
///
/// let store = PostgresStore::connect("postgres://postgres@127.0.0.1:5432/test")?;
/// let thread = ThreadId::from("order-1234");
/// assert_eq!(store.append("orders", &thread, None, 1, b"first", true)?, AppendOutcome::Written);
/// // Another process expecting an empty thread loses, and nothing changes:
/// assert_eq!(store.append("orders", &thread, None, 1, b"other", true)?, AppendOutcome::Conflict { head: Some(1) });
/// # Ok::<(), tea::Error>(())
/// ```
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

/// What the clones of a store share.
struct Inner {
    /// Reads and durable appends.
    pool: Pool,
    /// Appends that need not be durable: sessions with `synchronous_commit = off`.
    fast_pool: Pool,
    sql: Sql,
    /// `user@host:port/database`, for errors and `Debug`: never the password.
    target: Arc<str>,
    schema: String,
    /// `Some` until dropped; see `Drop`.
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.pool.close();
        self.fast_pool.close();
        // A runtime dropped the ordinary way waits for its threads, which panics when the last
        // handle goes inside another runtime's task; this returns at once.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Options for [`PostgresStore`], from [`PostgresStore::builder`].
///
/// ```no_run
/// use tea::PostgresStore;
///
/// let store = PostgresStore::builder("postgres://postgres@127.0.0.1:5432/test")
///     .schema("orders_service")
///     .max_connections(4)
///     .connect()?;
/// # Ok::<(), tea::Error>(())
/// ```
#[derive(Clone)]
pub struct PostgresStoreBuilder {
    url: String,
    schema: String,
    max_connections: usize,
}

impl fmt::Debug for PostgresStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not the URL: it may hold a password.
        f.debug_struct("PostgresStoreBuilder")
            .field("schema", &self.schema)
            .field("max_connections", &self.max_connections)
            .finish_non_exhaustive()
    }
}

impl PostgresStoreBuilder {
    /// The schema that holds the store's tables (default `public`), created if missing. Stores
    /// in different schemas of one database share nothing. The name is a plain SQL identifier:
    /// ASCII letters, digits and `_`, not starting with a digit, at most 63 bytes.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// The most connections the store opens at once for reads and durable appends (default 16,
    /// at least 1), and as many again for appends that need not be durable. They open as needed;
    /// a call that finds them all busy waits for one.
    pub fn max_connections(mut self, max: usize) -> Self {
        self.max_connections = max;
        self
    }

    /// Connects, and creates or upgrades the tables. See [`PostgresStore::connect`].
    ///
    /// # Errors
    /// [`Error::Store`] for a URL that does not parse, a bad schema name, a server that does not
    /// answer, refused credentials, a missing database, or tables of a newer version of tea.
    pub fn connect(self) -> Result<PostgresStore, Error> {
        PostgresStore::open(self)
    }

    /// [`connect`](Self::connect) for async code: awaits the connection without blocking.
    pub async fn connect_async(self) -> Result<PostgresStore, Error> {
        // Building the runtime and pool does not block; only the first connection waits.
        let store = PostgresStore::prepare(self)?;
        let inner = Arc::clone(&store.inner);
        store.spawn(async move { migrate_schema(&inner).await }).await?;
        Ok(store)
    }
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/database`, the
    /// libpq URL and `key=value` forms both work), with the default options, and creates or
    /// upgrades the tables in schema `public`.
    ///
    /// # Errors
    /// [`Error::Store`], with the server's or the network's message and the `user@host:port/database`
    /// it concerns (never the password): a URL that does not parse, a server that does not
    /// answer, refused credentials, a missing database, or tables of a newer version of tea.
    ///
    /// ```
    /// use tea::{Error, PostgresStore};
    ///
    /// // Nothing listens on port 1.
    /// let error = PostgresStore::connect("postgres://someone:secret@127.0.0.1:1/db").unwrap_err();
    /// let message = std::error::Error::source(&error).unwrap().to_string();
    /// assert!(message.contains("someone@127.0.0.1:1/db"), "{message}");
    /// assert!(!message.contains("secret"));
    /// ```
    pub fn connect(url: &str) -> Result<PostgresStore, Error> {
        Self::builder(url).connect()
    }

    /// [`connect`](Self::connect) for async code: awaits the connection without blocking.
    pub async fn connect_async(url: &str) -> Result<PostgresStore, Error> {
        Self::builder(url).connect_async().await
    }

    /// Options beyond the URL: the schema, the pool size.
    pub fn builder(url: &str) -> PostgresStoreBuilder {
        PostgresStoreBuilder {
            url: url.to_owned(),
            schema: DEFAULT_SCHEMA.to_owned(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }

    /// The schema that holds the tables.
    pub fn schema(&self) -> &str {
        &self.inner.schema
    }

    fn open(options: PostgresStoreBuilder) -> Result<PostgresStore, Error> {
        let store = Self::prepare(options)?;
        let inner = Arc::clone(&store.inner);
        store.block(async move { migrate_schema(&inner).await })?;
        Ok(store)
    }

    /// The store, before it has talked to the server.
    fn prepare(options: PostgresStoreBuilder) -> Result<PostgresStore, Error> {
        let mut config = tokio_postgres::Config::from_str(&options.url)
            .map_err(|e| Error::store(Fault::Url { message: describe(&e) }))?;
        let target: Arc<str> = describe_target(&config).into();
        let schema = options.schema;
        if !is_identifier(&schema) {
            return Err(Error::store(Fault::SchemaName { schema }));
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(DEFAULT_CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("tea");
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("tea-postgres")
            .enable_all()
            .build()
            .map_err(|e| Error::store(Fault::Runtime { message: e.to_string() }))?;
        let mut fast_config = config.clone();
        fast_config.options(with_async_commit(config.get_options()));
        // Building a pool spawns nothing, but it needs to see the runtime it will use.
        let pool = |config| {
            let _entered = runtime.enter();
            let manager =
                Manager::from_config(config, NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
            Pool::builder(manager)
                .max_size(options.max_connections.max(1))
                .runtime(deadpool_postgres::Runtime::Tokio1)
                .build()
                .map_err(|e| Error::store(Fault::Runtime { message: e.to_string() }))
        };
        let (pool, fast_pool) = (pool(config)?, pool(fast_config)?);
        let sql = Sql::new(&quote(&schema));
        let inner = Inner { pool, fast_pool, sql, target, schema, runtime: Some(runtime) };
        Ok(PostgresStore { inner: Arc::new(inner) })
    }

    fn runtime(&self) -> &tokio::runtime::Runtime {
        self.inner.runtime.as_ref().expect("the runtime lives as long as the store")
    }

    /// Runs `work` on the store's runtime and waits for it, blocking this thread (which may be
    /// a plain thread or one of another runtime's).
    fn block<T: Send + 'static>(
        &self,
        work: impl Future<Output = Result<T, Error>> + Send + 'static,
    ) -> Result<T, Error> {
        block(&self.inner, work)
    }

    /// Runs `work` on the store's runtime; the returned future awaits it on any executor.
    fn spawn<T: Send + 'static>(
        &self,
        work: impl Future<Output = Result<T, Error>> + Send + 'static,
    ) -> impl Future<Output = Result<T, Error>> + Send + 'static {
        let handle = self.runtime().spawn(work);
        let target = Arc::clone(&self.inner.target);
        async move {
            match handle.await {
                Ok(result) => result,
                Err(_) => Err(Error::store(Located { target, fault: Fault::Stopped })),
            }
        }
    }

    /// [`Checkpointer::append`] for async code.
    ///
    /// Dropping the future before it completes leaves the thread as it was: the drop waits for
    /// the append (which runs on regardless) and takes it back if it landed, unless the head
    /// has moved on since.
    pub fn append_async(
        &self,
        graph: &str,
        thread: &ThreadId,
        expected: Option<CheckpointId>,
        id: CheckpointId,
        bytes: &[u8],
        durable: bool,
    ) -> impl Future<Output = Result<AppendOutcome, Error>> + Send + 'static {
        self.landing(graph, thread, expected, None, id, bytes, durable)
    }

    /// The append of `bytes` as checkpoint `id` after head `expected` (whose bytes must be
    /// `over`, if given) on the store's runtime, awaited by the returned future, which takes it
    /// back if dropped before it completes.
    #[allow(clippy::too_many_arguments)]
    fn landing(
        &self,
        graph: &str,
        thread: &ThreadId,
        expected: Option<CheckpointId>,
        over: Option<&[u8]>,
        id: CheckpointId,
        bytes: &[u8],
        durable: bool,
    ) -> Landing {
        let (graph, thread, inner) = (graph.to_owned(), thread.clone(), Arc::clone(&self.inner));
        let (over, bytes) = (over.map(<[u8]>::to_vec), bytes.to_vec());
        let work = append_checked(inner, graph.clone(), thread.clone(), expected, over, id, bytes, durable);
        Landing {
            task: Some(self.runtime().spawn(work)),
            inner: Arc::clone(&self.inner),
            undo: Some(Undo { graph, thread, expected, id }),
        }
    }

    /// [`Checkpointer::head`] for async code.
    pub async fn head_async(&self, graph: &str, thread: &ThreadId) -> Result<Option<(CheckpointId, Vec<u8>)>, Error> {
        self.spawn(head(Arc::clone(&self.inner), graph.to_owned(), thread.clone())).await
    }

    /// [`Checkpointer::get`] for async code.
    pub async fn get_async(&self, graph: &str, thread: &ThreadId, id: CheckpointId) -> Result<Option<Vec<u8>>, Error> {
        self.spawn(get(Arc::clone(&self.inner), graph.to_owned(), thread.clone(), id)).await
    }

    /// [`Checkpointer::history`] for async code.
    pub async fn history_async(&self, graph: &str, thread: &ThreadId) -> Result<Vec<(CheckpointId, Vec<u8>)>, Error> {
        self.spawn(history(Arc::clone(&self.inner), graph.to_owned(), thread.clone())).await
    }

    /// [`Checkpointer::threads`] for async code.
    pub async fn threads_async(&self, graph: &str) -> Result<Vec<ThreadId>, Error> {
        self.spawn(threads(Arc::clone(&self.inner), graph.to_owned())).await
    }

    /// [`Checkpointer::delete`] for async code. An append racing with the delete either
    /// lands before it (and is deleted) or finds no head.
    pub async fn delete_async(&self, graph: &str, thread: &ThreadId) -> Result<bool, Error> {
        self.spawn(delete(Arc::clone(&self.inner), graph.to_owned(), thread.clone())).await
    }

    /// [`Checkpointer::prune`] for async code.
    pub async fn prune_async(&self, graph: &str, thread: &ThreadId, keep_last: usize) -> Result<usize, Error> {
        self.spawn(prune(Arc::clone(&self.inner), graph.to_owned(), thread.clone(), keep_last)).await
    }
}

impl Checkpointer for PostgresStore {
    fn append(
        &self,
        graph: &str,
        thread: &ThreadId,
        expected: Option<CheckpointId>,
        id: CheckpointId,
        bytes: &[u8],
        durable: bool,
    ) -> Result<AppendOutcome, Error> {
        let work =
            append(Arc::clone(&self.inner), graph.to_owned(), thread.clone(), expected, id, bytes.to_vec(), durable);
        self.block(work)
    }

    fn head(&self, graph: &str, thread: &ThreadId) -> Result<Option<(CheckpointId, Vec<u8>)>, Error> {
        self.block(head(Arc::clone(&self.inner), graph.to_owned(), thread.clone()))
    }

    /// One statement: the head's compare-and-swap compares its bytes too.
    fn append_over(
        &self,
        graph: &str,
        thread: &ThreadId,
        head: CheckpointId,
        head_bytes: &[u8],
        id: CheckpointId,
        bytes: &[u8],
        durable: bool,
    ) -> Result<AppendOutcome, Error> {
        let (graph, thread, over) = (graph.to_owned(), thread.clone(), Some(head_bytes.to_vec()));
        let work =
            append_checked(Arc::clone(&self.inner), graph, thread, Some(head), over, id, bytes.to_vec(), durable);
        self.block(work)
    }

    /// A read is a round trip to the server: a resume of a pause its app wrote claims the thread
    /// with [`append_over`](Checkpointer::append_over) instead.
    fn resumes_without_read(&self) -> bool {
        true
    }

    fn get(&self, graph: &str, thread: &ThreadId, id: CheckpointId) -> Result<Option<Vec<u8>>, Error> {
        self.block(get(Arc::clone(&self.inner), graph.to_owned(), thread.clone(), id))
    }

    fn range(
        &self,
        graph: &str,
        thread: &ThreadId,
        from: CheckpointId,
        to: CheckpointId,
    ) -> Result<Vec<(CheckpointId, Vec<u8>)>, Error> {
        self.block(range(Arc::clone(&self.inner), graph.to_owned(), thread.clone(), from, to))
    }

    fn history(&self, graph: &str, thread: &ThreadId) -> Result<Vec<(CheckpointId, Vec<u8>)>, Error> {
        self.block(history(Arc::clone(&self.inner), graph.to_owned(), thread.clone()))
    }

    fn threads(&self, graph: &str) -> Result<Vec<ThreadId>, Error> {
        self.block(threads(Arc::clone(&self.inner), graph.to_owned()))
    }

    fn delete(&self, graph: &str, thread: &ThreadId) -> Result<bool, Error> {
        self.block(delete(Arc::clone(&self.inner), graph.to_owned(), thread.clone()))
    }

    fn prune(&self, graph: &str, thread: &ThreadId, keep_last: usize) -> Result<usize, Error> {
        self.block(prune(Arc::clone(&self.inner), graph.to_owned(), thread.clone(), keep_last))
    }

    fn delete_at(&self, graph: &str, thread: &ThreadId, head: CheckpointId) -> Result<bool, Error> {
        self.block(delete_at(Arc::clone(&self.inner), graph.to_owned(), thread.clone(), head))
    }

    fn rest_marks(&self) -> Option<&dyn RestMarks> {
        Some(self)
    }

    fn append_async<'a>(
        &'a self,
        graph: &'a str,
        thread: &'a ThreadId,
        expected: Option<CheckpointId>,
        id: CheckpointId,
        bytes: &'a [u8],
        durable: bool,
    ) -> super::StoreFuture<'a, AppendOutcome> {
        Box::pin(PostgresStore::append_async(self, graph, thread, expected, id, bytes, durable))
    }

    /// Dropped before it completes, it leaves the thread as it was, as
    /// [`append_async`](PostgresStore::append_async) does.
    fn append_over_async<'a>(
        &'a self,
        graph: &'a str,
        thread: &'a ThreadId,
        head: CheckpointId,
        head_bytes: &'a [u8],
        id: CheckpointId,
        bytes: &'a [u8],
        durable: bool,
    ) -> super::StoreFuture<'a, AppendOutcome> {
        Box::pin(self.landing(graph, thread, Some(head), Some(head_bytes), id, bytes, durable))
    }

    fn head_async<'a>(
        &'a self,
        graph: &'a str,
        thread: &'a ThreadId,
    ) -> super::StoreFuture<'a, Option<(CheckpointId, Vec<u8>)>> {
        Box::pin(PostgresStore::head_async(self, graph, thread))
    }
}

/// Retention marks as columns of `tea_threads` (see the module docs): a sweep expires threads
/// with one statement.
impl RestMarks for PostgresStore {
    fn unmarked(&self, graph: &str) -> Result<Vec<ThreadId>, Error> {
        self.block(unmarked(Arc::clone(&self.inner), graph.to_owned()))
    }

    fn mark(&self, graph: &str, marks: &[RestMark]) -> Result<(), Error> {
        if marks.is_empty() {
            return Ok(());
        }
        self.block(mark(Arc::clone(&self.inner), graph.to_owned(), marks.to_vec()))
    }

    fn expire(&self, graph: &str, expiry: &Expiry) -> Result<Expired, Error> {
        self.block(expire(Arc::clone(&self.inner), graph.to_owned(), expiry.clone()))
    }
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("target", &self.inner.target)
            .field("schema", &self.inner.schema)
            .finish_non_exhaustive()
    }
}

// ---------------------------------------------------------------------------------------------
// The statements.

/// The statements of one schema, written once at connect.
struct Sql {
    /// Takes the migration lock, for the transaction: `$1` the lock's key.
    lock: String,
    create_schema: String,
    create_versions: String,
    version: String,
    record_version: String,
    /// Creates a thread with its first checkpoint: `$1` graph, `$2` thread, `$3` id, `$4` bytes.
    append_first: String,
    /// Moves the head from `$4` to `$3` and stores checkpoint `$3`'s bytes `$5`.
    append_next: String,
    /// `append_next` if the head's bytes are also `$6` (`Checkpointer::append_over`).
    append_over: String,
    head_id: String,
    head: String,
    get: String,
    /// The checkpoints of a thread with ids `$3` to `$4`, oldest first.
    range: String,
    history: String,
    threads: String,
    /// Locks a thread's head row for the transaction (waiting for an append in flight).
    lock_thread: String,
    delete_thread: String,
    delete_checkpoints: String,
    prune: String,
    /// Moves the head of `$1`/`$2` back to `$3` if it is `$4` (taking back a cancelled append).
    head_back: String,
    /// Removes thread `$1`/`$2` if its head is its first checkpoint (taking back a first append).
    unstart: String,
    /// Deletes checkpoint `$3` of `$1`/`$2`.
    delete_checkpoint: String,
    /// Deletes thread `$1`/`$2` and its checkpoints if its head is `$3`.
    delete_at: String,
    /// The threads of `$1` whose head has no mark.
    unmarked: String,
    /// Marks threads of `$1`: arrays of threads `$2`, rests `$3`, heads `$4`, times `$5`.
    mark: String,
    /// Expires threads of `$1` finished before `$2` or paused before `$3`, none of `$4`.
    expire: String,
}

impl Sql {
    fn new(schema: &str) -> Sql {
        let threads = format!("{schema}.tea_threads");
        let checkpoints = format!("{schema}.tea_checkpoints");
        Sql {
            lock: "SELECT pg_advisory_xact_lock($1)".to_owned(),
            create_schema: format!("CREATE SCHEMA IF NOT EXISTS {schema}"),
            create_versions: format!(
                "CREATE TABLE IF NOT EXISTS {schema}.tea_schema_version (
                     version    integer     PRIMARY KEY,
                     applied_at timestamptz NOT NULL DEFAULT now()
                 )"
            ),
            version: format!("SELECT coalesce(max(version), 0) FROM {schema}.tea_schema_version"),
            record_version: format!("INSERT INTO {schema}.tea_schema_version (version) VALUES ($1)"),
            append_first: format!(
                "WITH created AS (
                     INSERT INTO {threads} (graph, thread, head) VALUES ($1, $2, $3)
                     ON CONFLICT DO NOTHING
                     RETURNING graph, thread, head
                 )
                 INSERT INTO {checkpoints} (graph, thread, id, bytes)
                 SELECT graph, thread, head, $4 FROM created"
            ),
            append_next: format!(
                "WITH moved AS (
                     UPDATE {threads} SET head = $3
                     WHERE graph = $1 AND thread = $2 AND head = $4
                     RETURNING graph, thread, head
                 )
                 INSERT INTO {checkpoints} (graph, thread, id, bytes)
                 SELECT graph, thread, head, $5 FROM moved"
            ),
            append_over: format!(
                "WITH moved AS (
                     UPDATE {threads} t SET head = $3
                     WHERE t.graph = $1 AND t.thread = $2 AND t.head = $4
                       AND EXISTS (SELECT 1 FROM {checkpoints} c
                                   WHERE c.graph = $1 AND c.thread = $2 AND c.id = $4 AND c.bytes = $6)
                     RETURNING t.graph, t.thread, t.head
                 )
                 INSERT INTO {checkpoints} (graph, thread, id, bytes)
                 SELECT graph, thread, head, $5 FROM moved"
            ),
            head_id: format!("SELECT head FROM {threads} WHERE graph = $1 AND thread = $2"),
            head: format!(
                "SELECT t.head, c.bytes FROM {threads} t
                 LEFT JOIN {checkpoints} c ON c.graph = t.graph AND c.thread = t.thread AND c.id = t.head
                 WHERE t.graph = $1 AND t.thread = $2"
            ),
            get: format!("SELECT bytes FROM {checkpoints} WHERE graph = $1 AND thread = $2 AND id = $3"),
            range: format!(
                "SELECT id, bytes FROM {checkpoints} WHERE graph = $1 AND thread = $2 AND id >= $3 AND id <= $4 ORDER BY id"
            ),
            history: format!("SELECT id, bytes FROM {checkpoints} WHERE graph = $1 AND thread = $2 ORDER BY id DESC"),
            threads: format!("SELECT thread FROM {threads} WHERE graph = $1"),
            lock_thread: format!("SELECT head FROM {threads} WHERE graph = $1 AND thread = $2 FOR UPDATE"),
            delete_thread: format!("DELETE FROM {threads} WHERE graph = $1 AND thread = $2"),
            delete_checkpoints: format!("DELETE FROM {checkpoints} WHERE graph = $1 AND thread = $2"),
            head_back: format!("UPDATE {threads} SET head = $3 WHERE graph = $1 AND thread = $2 AND head = $4"),
            unstart: format!("DELETE FROM {threads} WHERE graph = $1 AND thread = $2 AND head = 1"),
            delete_checkpoint: format!("DELETE FROM {checkpoints} WHERE graph = $1 AND thread = $2 AND id = $3"),
            delete_at: format!(
                "WITH gone AS (
                     DELETE FROM {threads} WHERE graph = $1 AND thread = $2 AND head = $3
                     RETURNING graph, thread
                 ), removed AS (
                     DELETE FROM {checkpoints} c USING gone WHERE c.graph = gone.graph AND c.thread = gone.thread
                 )
                 SELECT count(*) FROM gone"
            ),
            unmarked: format!("SELECT thread FROM {threads} WHERE graph = $1 AND rest_head IS DISTINCT FROM head"),
            mark: format!(
                "UPDATE {threads} t SET rest = m.rest, rest_head = m.head, rest_since = m.since
                 FROM unnest($2::text[], $3::text[], $4::bigint[], $5::bigint[]) AS m(thread, rest, head, since)
                 WHERE t.graph = $1 AND t.thread = m.thread AND t.head = m.head"
            ),
            // A thread is deleted only while its head is the one it was marked at: an append
            // that moves the head first (it holds the row) keeps it; one that comes after finds
            // no thread. The second part lists the paused threads past the finished cutoff kept.
            expire: format!(
                "WITH gone AS (
                     DELETE FROM {threads} t
                     WHERE t.graph = $1 AND t.rest_head = t.head AND NOT (t.thread = ANY($4::text[]))
                       AND ((t.rest = 'finished' AND t.rest_since <= $2) OR (t.rest = 'paused' AND t.rest_since <= $3))
                     RETURNING t.graph, t.thread, t.rest, t.head, t.rest_since
                 ), removed AS (
                     DELETE FROM {checkpoints} c USING gone WHERE c.graph = gone.graph AND c.thread = gone.thread
                 )
                 SELECT thread, rest, head, rest_since, true FROM gone
                 UNION ALL
                 SELECT t.thread, t.rest, t.head, t.rest_since, false FROM {threads} t
                 WHERE t.graph = $1 AND t.rest = 'paused' AND t.rest_head = t.head AND t.rest_since <= $2
                   AND NOT (t.thread = ANY($4::text[]))
                   AND NOT EXISTS (SELECT 1 FROM gone WHERE gone.thread = t.thread)"
            ),
            prune: format!(
                "DELETE FROM {checkpoints} c USING {threads} t
                 WHERE t.graph = $1 AND t.thread = $2
                   AND c.graph = t.graph AND c.thread = t.thread AND c.id <= t.head - $3"
            ),
        }
    }
}

/// Runs `work` on the store's runtime and waits for it, blocking this thread (which may be a
/// plain thread or one of another runtime's).
fn block<T: Send + 'static>(
    inner: &Inner,
    work: impl Future<Output = Result<T, Error>> + Send + 'static,
) -> Result<T, Error> {
    let stopped = || Err(Error::store(Located { target: Arc::clone(&inner.target), fault: Fault::Stopped }));
    let Some(runtime) = inner.runtime.as_ref() else { return stopped() };
    let (sender, receiver) = mpsc::sync_channel(1);
    runtime.spawn(async move {
        // `work` (and the store handle it holds) is dropped before the caller wakes up, so the
        // last handle never goes on the store's own runtime.
        let result = work.await;
        let _ = sender.send(result);
    });
    receiver.recv().unwrap_or_else(|_| stopped())
}

/// A pooled connection, or the error of getting one.
async fn connection(inner: &Inner) -> Result<deadpool_postgres::Object, Error> {
    pooled(inner, &inner.pool).await
}

/// A connection of `pool`, or the error of getting one.
async fn pooled(inner: &Inner, pool: &Pool) -> Result<deadpool_postgres::Object, Error> {
    pool.get().await.map_err(|e| connect_error(inner, e))
}

fn connect_error(inner: &Inner, e: PoolError) -> Error {
    let message = match e {
        PoolError::Backend(e) => describe(&e),
        PoolError::Timeout(_) => "timed out waiting for a connection".to_owned(),
        PoolError::Closed => "the store is closed".to_owned(),
        PoolError::NoRuntimeSpecified => "the connection pool has no runtime".to_owned(),
        PoolError::PostCreateHook(e) => e.to_string(),
    };
    Error::store(Located { target: Arc::clone(&inner.target), fault: Fault::Connect { message } })
}

/// The error of statement `what`.
fn query_error(inner: &Inner, what: &'static str, e: tokio_postgres::Error) -> Error {
    Error::store(Located { target: Arc::clone(&inner.target), fault: Fault::Query { what, message: describe(&e) } })
}

/// A statement's failure, and whether its connection was lost (so it is worth trying again on a
/// fresh one).
struct Failed {
    error: Error,
    lost: bool,
}

impl Failed {
    /// The failure of statement `what` on `client`.
    fn query(inner: &Inner, what: &'static str, client: &tokio_postgres::Client, e: tokio_postgres::Error) -> Failed {
        let lost = client.is_closed() || is_lost(&e);
        Failed { error: query_error(inner, what, e), lost }
    }

    /// The failure of statement `what` in a transaction (the connection is checked by the error).
    fn in_transaction(inner: &Inner, what: &'static str, e: tokio_postgres::Error) -> Failed {
        let lost = is_lost(&e);
        Failed { error: query_error(inner, what, e), lost }
    }

    /// A failure that another connection would not mend.
    fn other(error: Error) -> Failed {
        Failed { error, lost: false }
    }
}

/// Whether `e` says the connection is gone: closed, killed by an administrator, or the server
/// shutting down or starting.
fn is_lost(e: &tokio_postgres::Error) -> bool {
    const GONE: [SqlState; 3] = [SqlState::ADMIN_SHUTDOWN, SqlState::CRASH_SHUTDOWN, SqlState::CANNOT_CONNECT_NOW];
    e.is_closed()
        || e.code().is_some_and(|code| GONE.contains(code))
        || std::error::Error::source(e).is_some_and(|source| source.is::<std::io::Error>())
}

/// Runs `once` on a connection of `pool` (its argument: the connection and the attempt, from 1);
/// while the connection is lost, or opening one is refused at once (a server restarting), again
/// on a fresh one, up to [`ATTEMPTS`] times, waiting [`FIRST_RETRY`] and then twice as long
/// each time.
async fn retrying<T, F, Fut>(inner: &Inner, pool: &Pool, mut once: F) -> Result<T, Error>
where
    F: FnMut(deadpool_postgres::Object, u32) -> Fut,
    Fut: Future<Output = Result<T, Failed>>,
{
    let mut wait = FIRST_RETRY;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let asked = std::time::Instant::now();
        let failed = match pool.get().await {
            Ok(client) => match once(client, attempt).await {
                Ok(value) => return Ok(value),
                Err(failed) => failed,
            },
            // A server restarting refuses at once: worth another try. One that does not answer
            // took the whole connect timeout, which is not tried again.
            Err(e @ PoolError::Backend(_)) => {
                Failed { error: connect_error(inner, e), lost: asked.elapsed() < Duration::from_secs(1) }
            }
            Err(e) => Failed::other(connect_error(inner, e)),
        };
        if !failed.lost || attempt >= ATTEMPTS {
            return Err(failed.error);
        }
        tokio::time::sleep(wait).await;
        wait *= 2;
    }
}

/// Runs the migrations the schema lacks, under the schema's advisory lock.
async fn migrate_schema(inner: &Inner) -> Result<(), Error> {
    let sql = &inner.sql;
    let mut client = connection(inner).await?;
    let failed = |what| move |e: tokio_postgres::Error| query_error(inner, what, e);
    let tx = client.transaction().await.map_err(failed("begin the migration"))?;
    tx.execute(&sql.lock, &[&lock_key(&inner.schema)]).await.map_err(failed("take the migration lock"))?;
    tx.batch_execute(&sql.create_schema).await.map_err(failed("create the schema"))?;
    tx.batch_execute(&sql.create_versions).await.map_err(failed("create tea_schema_version"))?;
    let current: i32 = tx.query_one(&sql.version, &[]).await.map_err(failed("read the schema version"))?.get(0);
    let known = MIGRATIONS.len() as i32;
    if current > known {
        return Err(Error::store(Located {
            target: Arc::clone(&inner.target),
            fault: Fault::NewerSchema { schema: inner.schema.clone(), version: current, known },
        }));
    }
    let quoted = quote(&inner.schema);
    for (version, migration) in (1..).zip(MIGRATIONS).skip(current as usize) {
        tx.batch_execute(&migration.replace("{schema}", &quoted)).await.map_err(failed("migrate the tables"))?;
        tx.execute(&sql.record_version, &[&version]).await.map_err(failed("record the schema version"))?;
    }
    tx.commit().await.map_err(failed("commit the migration"))
}

/// A checkpoint id as PostgreSQL's `bigint`.
fn to_sql_id(inner: &Inner, id: CheckpointId) -> Result<i64, Error> {
    i64::try_from(id)
        .map_err(|_| Error::store(Located { target: Arc::clone(&inner.target), fault: Fault::IdRange { id } }))
}

/// A `bigint` id read back; stored ids are checked positive by the tables.
fn from_sql_id(inner: &Inner, id: i64) -> Result<CheckpointId, Error> {
    CheckpointId::try_from(id)
        .ok()
        .filter(|&id| id > 0)
        .ok_or_else(|| Error::store(Located { target: Arc::clone(&inner.target), fault: Fault::StoredId { id } }))
}

async fn append(
    inner: Arc<Inner>,
    graph: String,
    thread: ThreadId,
    expected: Option<CheckpointId>,
    id: CheckpointId,
    bytes: Vec<u8>,
    durable: bool,
) -> Result<AppendOutcome, Error> {
    append_checked(inner, graph, thread, expected, None, id, bytes, durable).await
}

/// [`append`], and with `over` (the bytes the head `expected` must hold) one statement that
/// compares them too (`Checkpointer::append_over`).
#[allow(clippy::too_many_arguments)]
async fn append_checked(
    inner: Arc<Inner>,
    graph: String,
    thread: ThreadId,
    expected: Option<CheckpointId>,
    over: Option<Vec<u8>>,
    id: CheckpointId,
    bytes: Vec<u8>,
    durable: bool,
) -> Result<AppendOutcome, Error> {
    if expected.map_or(Some(1), |head| head.checked_add(1)) != Some(id) {
        return Err(Error::store(Located {
            target: Arc::clone(&inner.target),
            fault: Fault::OutOfSequence { expected, id },
        }));
    }
    let sql_id = to_sql_id(&inner, id)?;
    let expected = expected.map(|head| to_sql_id(&inner, head)).transpose()?;
    let (inner, graph, thread, bytes, over) = (&*inner, &graph, thread.as_str(), &bytes, over.as_deref());
    let pool = if durable { &inner.pool } else { &inner.fast_pool };
    retrying(inner, pool, move |client, attempt| async move {
        let failed = |e| Failed::query(inner, "append a checkpoint", &client, e);
        let written = match expected {
            None => {
                let statement = client.prepare_cached(&inner.sql.append_first).await.map_err(failed)?;
                client.execute(&statement, &[graph, &thread, &sql_id, bytes]).await.map_err(failed)?
            }
            Some(expected) => match over {
                None => {
                    let statement = client.prepare_cached(&inner.sql.append_next).await.map_err(failed)?;
                    client.execute(&statement, &[graph, &thread, &sql_id, &expected, bytes]).await.map_err(failed)?
                }
                Some(over) => {
                    let statement = client.prepare_cached(&inner.sql.append_over).await.map_err(failed)?;
                    client
                        .execute(&statement, &[graph, &thread, &sql_id, &expected, bytes, &over])
                        .await
                        .map_err(failed)?
                }
            },
        };
        if written == 1 {
            return Ok(AppendOutcome::Written);
        }
        // The statement's snapshot predates the writer it lost to; a new statement sees its head.
        let statement = client.prepare_cached(&inner.sql.head_id).await.map_err(failed)?;
        let row = client.query_opt(&statement, &[graph, &thread]).await.map_err(failed)?;
        let head = match row {
            Some(row) => Some(from_sql_id(inner, row.get(0)).map_err(Failed::other)?),
            None => None,
        };
        if attempt > 1 && head.is_some_and(|head| head >= id) {
            // An earlier attempt lost its connection, perhaps after its commit: if checkpoint
            // `id` holds these very bytes, the head moved for this append.
            let statement = client.prepare_cached(&inner.sql.get).await.map_err(failed)?;
            let row = client.query_opt(&statement, &[graph, &thread, &sql_id]).await.map_err(failed)?;
            if row.is_some_and(|row| row.get::<_, &[u8]>(0) == bytes.as_slice()) {
                return Ok(AppendOutcome::Written);
            }
        }
        Ok(AppendOutcome::Conflict { head })
    })
    .await
}

/// What taking back an append needs: which one it was.
struct Undo {
    graph: String,
    thread: ThreadId,
    expected: Option<CheckpointId>,
    id: CheckpointId,
}

/// Takes back append `undo` that landed after its writer stopped waiting for it: moves the head
/// back to `expected` (removes the thread for a first checkpoint) and deletes checkpoint `id` —
/// only if the head is still `id`, so a writer that has moved on since keeps its checkpoints.
async fn take_back(inner: Arc<Inner>, undo: Undo) -> Result<(), Error> {
    let id = to_sql_id(&inner, undo.id)?;
    let expected = undo.expected.map(|head| to_sql_id(&inner, head)).transpose()?;
    let (inner, graph, thread) = (&*inner, &undo.graph, undo.thread.as_str());
    retrying(inner, &inner.pool, move |mut client, _| async move {
        let failed = |e| Failed::in_transaction(inner, "take back a cancelled append", e);
        let tx = client.transaction().await.map_err(failed)?;
        let moved = match expected {
            Some(expected) => {
                let statement = tx.prepare_cached(&inner.sql.head_back).await.map_err(failed)?;
                tx.execute(&statement, &[graph, &thread, &expected, &id]).await.map_err(failed)?
            }
            None => {
                let statement = tx.prepare_cached(&inner.sql.unstart).await.map_err(failed)?;
                tx.execute(&statement, &[graph, &thread]).await.map_err(failed)?
            }
        };
        if moved == 1 {
            let statement = tx.prepare_cached(&inner.sql.delete_checkpoint).await.map_err(failed)?;
            tx.execute(&statement, &[graph, &thread, &id]).await.map_err(failed)?;
        }
        tx.commit().await.map_err(failed)
    })
    .await
}

/// The future of [`PostgresStore::append_async`]: the append runs as a task of the store's
/// runtime. Dropped before it has the task's answer, it waits for the append and takes it back
/// if it landed, so the thread is as its writer last knew it.
struct Landing {
    task: Option<tokio::task::JoinHandle<Result<AppendOutcome, Error>>>,
    inner: Arc<Inner>,
    undo: Option<Undo>,
}

impl Future for Landing {
    type Output = Result<AppendOutcome, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let stopped =
            |inner: &Inner| Error::store(Located { target: Arc::clone(&inner.target), fault: Fault::Stopped });
        let Some(task) = this.task.as_mut() else { return Poll::Ready(Err(stopped(&this.inner))) };
        match Pin::new(task).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(joined) => {
                this.task = None;
                Poll::Ready(joined.unwrap_or_else(|_| Err(stopped(&this.inner))))
            }
        }
    }
}

impl Drop for Landing {
    fn drop(&mut self) {
        let (Some(task), Some(undo)) = (self.task.take(), self.undo.take()) else { return };
        let inner = Arc::clone(&self.inner);
        // Nothing is left to report an error to: a take-back that fails leaves the append, as
        // a crash of the writer would (its lease then expires).
        let _ = block(&self.inner, async move {
            match task.await {
                Ok(Ok(AppendOutcome::Written)) => take_back(inner, undo).await,
                _ => Ok(()),
            }
        });
    }
}

async fn head(inner: Arc<Inner>, graph: String, thread: ThreadId) -> Result<Option<(CheckpointId, Vec<u8>)>, Error> {
    let (inner, graph, thread) = (&*inner, &graph, &thread);
    let row = retrying(inner, &inner.pool, move |client, _| async move {
        let failed = |e| Failed::query(inner, "read a head", &client, e);
        let statement = client.prepare_cached(&inner.sql.head).await.map_err(failed)?;
        client.query_opt(&statement, &[graph, &thread.as_str()]).await.map_err(failed)
    })
    .await?;
    let Some(row) = row else { return Ok(None) };
    let id = from_sql_id(inner, row.get(0))?;
    match row.get::<_, Option<Vec<u8>>>(1) {
        Some(bytes) => Ok(Some((id, bytes))),
        None => Err(Error::store(Located {
            target: Arc::clone(&inner.target),
            fault: Fault::MissingHead { graph: graph.clone(), thread: thread.clone(), id },
        })),
    }
}

async fn get(inner: Arc<Inner>, graph: String, thread: ThreadId, id: CheckpointId) -> Result<Option<Vec<u8>>, Error> {
    // No stored id is beyond `bigint`.
    let Ok(id) = i64::try_from(id) else { return Ok(None) };
    let (inner, graph, thread) = (&*inner, &graph, thread.as_str());
    retrying(inner, &inner.pool, move |client, _| async move {
        let failed = |e| Failed::query(inner, "read a checkpoint", &client, e);
        let statement = client.prepare_cached(&inner.sql.get).await.map_err(failed)?;
        let row = client.query_opt(&statement, &[graph, &thread, &id]).await.map_err(failed)?;
        Ok(row.map(|row| row.get(0)))
    })
    .await
}

async fn range(
    inner: Arc<Inner>,
    graph: String,
    thread: ThreadId,
    from: CheckpointId,
    to: CheckpointId,
) -> Result<Vec<(CheckpointId, Vec<u8>)>, Error> {
    // No stored id is beyond `bigint`.
    let from = i64::try_from(from).unwrap_or(i64::MAX);
    let to = i64::try_from(to).unwrap_or(i64::MAX);
    let (inner, graph, thread) = (&*inner, &graph, thread.as_str());
    let rows = retrying(inner, &inner.pool, move |client, _| async move {
        let failed = |e| Failed::query(inner, "read checkpoints", &client, e);
        let statement = client.prepare_cached(&inner.sql.range).await.map_err(failed)?;
        client.query(&statement, &[graph, &thread, &from, &to]).await.map_err(failed)
    })
    .await?;
    rows.iter().map(|row| Ok((from_sql_id(inner, row.get(0))?, row.get(1)))).collect()
}

async fn history(inner: Arc<Inner>, graph: String, thread: ThreadId) -> Result<Vec<(CheckpointId, Vec<u8>)>, Error> {
    let (inner, graph, thread) = (&*inner, &graph, thread.as_str());
    let rows = retrying(inner, &inner.pool, move |client, _| async move {
        let failed = |e| Failed::query(inner, "read a history", &client, e);
        let statement = client.prepare_cached(&inner.sql.history).await.map_err(failed)?;
        client.query(&statement, &[graph, &thread]).await.map_err(failed)
    })
    .await?;
    rows.iter().map(|row| Ok((from_sql_id(inner, row.get(0))?, row.get(1)))).collect()
}

async fn threads(inner: Arc<Inner>, graph: String) -> Result<Vec<ThreadId>, Error> {
    let (inner, graph) = (&*inner, &graph);
    let rows = retrying(inner, &inner.pool, move |client, _| async move {
        let failed = |e| Failed::query(inner, "list threads", &client, e);
        let statement = client.prepare_cached(&inner.sql.threads).await.map_err(failed)?;
        client.query(&statement, &[graph]).await.map_err(failed)
    })
    .await?;
    // Sorted here, not by the server, whose order depends on the database's collation.
    let mut threads: Vec<ThreadId> = rows.iter().map(|row| ThreadId::from(row.get::<_, String>(0))).collect();
    threads.sort();
    Ok(threads)
}

async fn delete(inner: Arc<Inner>, graph: String, thread: ThreadId) -> Result<bool, Error> {
    let (inner, graph, thread) = (&*inner, &graph, thread.as_str());
    retrying(inner, &inner.pool, move |mut client, _| async move {
        let failed = |e| Failed::in_transaction(inner, "delete a thread", e);
        let tx = client.transaction().await.map_err(failed)?;
        // Lock the head row first: that waits for an append in flight, and no append can move
        // the head or start the thread again until this commits, so the checkpoints deleted next
        // (by a later statement, which sees what that append stored) are exactly this thread's.
        // A thread created by an append not yet committed is not seen: that append comes after
        // the delete.
        let statement = tx.prepare_cached(&inner.sql.lock_thread).await.map_err(failed)?;
        if tx.query_opt(&statement, &[graph, &thread]).await.map_err(failed)?.is_none() {
            return Ok(false);
        }
        let statement = tx.prepare_cached(&inner.sql.delete_checkpoints).await.map_err(failed)?;
        tx.execute(&statement, &[graph, &thread]).await.map_err(failed)?;
        let statement = tx.prepare_cached(&inner.sql.delete_thread).await.map_err(failed)?;
        let deleted = tx.execute(&statement, &[graph, &thread]).await.map_err(failed)?;
        tx.commit().await.map_err(failed)?;
        Ok(deleted > 0)
    })
    .await
}

async fn prune(inner: Arc<Inner>, graph: String, thread: ThreadId, keep_last: usize) -> Result<usize, Error> {
    let keep = i64::try_from(keep_last.max(1)).unwrap_or(i64::MAX);
    let (inner, graph, thread) = (&*inner, &graph, thread.as_str());
    retrying(inner, &inner.pool, move |client, _| async move {
        let failed = |e| Failed::query(inner, "prune a thread", &client, e);
        let statement = client.prepare_cached(&inner.sql.prune).await.map_err(failed)?;
        let deleted = client.execute(&statement, &[graph, &thread, &keep]).await.map_err(failed)?;
        Ok(deleted as usize)
    })
    .await
}

async fn delete_at(inner: Arc<Inner>, graph: String, thread: ThreadId, head: CheckpointId) -> Result<bool, Error> {
    let Ok(head) = i64::try_from(head) else { return Ok(false) };
    let (inner, graph, thread) = (&*inner, &graph, thread.as_str());
    retrying(inner, &inner.pool, move |client, _| async move {
        let failed = |e| Failed::query(inner, "delete a thread at its head", &client, e);
        let statement = client.prepare_cached(&inner.sql.delete_at).await.map_err(failed)?;
        let row = client.query_one(&statement, &[graph, &thread, &head]).await.map_err(failed)?;
        Ok(row.get::<_, i64>(0) > 0)
    })
    .await
}

async fn unmarked(inner: Arc<Inner>, graph: String) -> Result<Vec<ThreadId>, Error> {
    let (inner, graph) = (&*inner, &graph);
    let rows = retrying(inner, &inner.pool, move |client, _| async move {
        let failed = |e| Failed::query(inner, "list unmarked threads", &client, e);
        let statement = client.prepare_cached(&inner.sql.unmarked).await.map_err(failed)?;
        client.query(&statement, &[graph]).await.map_err(failed)
    })
    .await?;
    let mut threads: Vec<ThreadId> = rows.iter().map(|row| ThreadId::from(row.get::<_, String>(0))).collect();
    threads.sort();
    Ok(threads)
}

async fn mark(inner: Arc<Inner>, graph: String, marks: Vec<RestMark>) -> Result<(), Error> {
    let threads: Vec<&str> = marks.iter().map(|m| m.thread.as_str()).collect();
    let rests: Vec<&str> = marks.iter().map(|m| m.rest.as_str()).collect();
    let heads = marks.iter().map(|m| to_sql_id(&inner, m.head)).collect::<Result<Vec<i64>, Error>>()?;
    let since: Vec<Option<i64>> = marks.iter().map(|m| m.since_ms.and_then(|ms| i64::try_from(ms).ok())).collect();
    let (inner, graph, threads, rests, heads, since) = (&*inner, &graph, &threads, &rests, &heads, &since);
    retrying(inner, &inner.pool, move |client, _| async move {
        let failed = |e| Failed::query(inner, "mark threads", &client, e);
        let statement = client.prepare_cached(&inner.sql.mark).await.map_err(failed)?;
        client.execute(&statement, &[graph, threads, rests, heads, since]).await.map_err(failed)?;
        Ok(())
    })
    .await
}

async fn expire(inner: Arc<Inner>, graph: String, expiry: Expiry) -> Result<Expired, Error> {
    let cutoff = |ms: Option<u64>| ms.map(|ms| i64::try_from(ms).unwrap_or(i64::MAX));
    let (finished, paused) = (cutoff(expiry.finished_before), cutoff(expiry.paused_before));
    let except: Vec<&str> = expiry.except.iter().map(ThreadId::as_str).collect();
    let (inner_ref, graph_ref, except) = (&*inner, &graph, &except);
    let rows = retrying(inner_ref, &inner_ref.pool, move |client, _| async move {
        let failed = |e| Failed::query(inner_ref, "expire threads", &client, e);
        let statement = client.prepare_cached(&inner_ref.sql.expire).await.map_err(failed)?;
        client.query(&statement, &[graph_ref, &finished, &paused, except]).await.map_err(failed)
    })
    .await?;
    let mut outcome = Expired::default();
    for row in rows {
        let rest: Option<String> = row.get(1);
        let mark = RestMark {
            thread: ThreadId::from(row.get::<_, String>(0)),
            head: from_sql_id(&inner, row.get(2))?,
            rest: rest.as_deref().and_then(Rest::parse).unwrap_or(Rest::Active),
            since_ms: row.get::<_, Option<i64>>(3).and_then(|ms| u64::try_from(ms).ok()),
        };
        if row.get::<_, bool>(4) {
            outcome.expired.push(mark);
        } else {
            outcome.kept_paused.push(mark);
        }
    }
    outcome.expired.sort_by(|a, b| a.thread.cmp(&b.thread));
    outcome.kept_paused.sort_by(|a, b| a.thread.cmp(&b.thread));
    Ok(outcome)
}

// ---------------------------------------------------------------------------------------------
// Names and errors.

/// The session options of the pool for appends that need not be durable: the URL's own
/// `options`, then `synchronous_commit` off (the last setting of a key wins).
fn with_async_commit(given: Option<&str>) -> String {
    match given {
        Some(given) if !given.trim().is_empty() => format!("{given} -c synchronous_commit=off"),
        _ => "-c synchronous_commit=off".to_owned(),
    }
}

/// Whether `name` is a plain SQL identifier, safe to quote into statements.
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    first_ok && name.len() <= 63 && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `name` as a quoted identifier (it is checked to hold no quotes).
fn quote(name: &str) -> String {
    format!("\"{name}\"")
}

/// The advisory lock key of `schema`'s migrations: FNV-1a of a fixed prefix and the name, so
/// every process computes the same key and stores in other schemas do not wait on it.
fn lock_key(schema: &str) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in b"tea migrations ".iter().chain(schema.as_bytes()) {
        hash = (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3);
    }
    hash as i64
}

/// `user@host:port/database` of a connection string, without the password.
fn describe_target(config: &tokio_postgres::Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let port = config.get_ports().get(i).or(config.get_ports().first()).copied().unwrap_or(5432);
            match host {
                Host::Tcp(name) => format!("{name}:{port}"),
                #[cfg(unix)]
                Host::Unix(path) => format!("{}:{port}", path.display()),
            }
        })
        .collect();
    let hosts = if hosts.is_empty() { "localhost:5432".to_owned() } else { hosts.join(",") };
    let user = config.get_user().unwrap_or("(default user)");
    let database = config.get_dbname().unwrap_or(user);
    format!("{user}@{hosts}/{database}")
}

/// A client error with its causes, and the server's message for a database error.
fn describe(error: &tokio_postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        let mut message = format!("{} {}: {}", db.severity(), db.code().code(), db.message());
        if let Some(detail) = db.detail() {
            message.push_str(&format!(" ({detail})"));
        }
        return message;
    }
    crate::vocab::error::error_chain(error)
}

/// What went wrong, and with which database.
#[derive(Debug, thiserror::Error)]
#[error("PostgreSQL {target}: {fault}")]
struct Located {
    target: Arc<str>,
    fault: Fault,
}

/// What a `PostgresStore` found wrong, reported as the source of an [`Error::Store`].
#[derive(Debug, thiserror::Error)]
enum Fault {
    #[error("invalid connection URL: {message}")]
    Url { message: String },
    #[error("invalid schema name `{schema}`: use ASCII letters, digits and `_`, not starting with a digit, at most 63 bytes")]
    SchemaName { schema: String },
    #[error("cannot start the store's runtime: {message}")]
    Runtime { message: String },
    #[error("cannot connect: {message}")]
    Connect { message: String },
    #[error("cannot {what}: {message}")]
    Query { what: &'static str, message: String },
    #[error(
        "the tables in schema `{schema}` are at version {version}, newer than this tea knows ({known}); upgrade tea"
    )]
    NewerSchema { schema: String, version: i32, known: i32 },
    #[error("the head of thread `{thread}` of graph `{graph}` is checkpoint {id}, which is not stored")]
    MissingHead { graph: String, thread: ThreadId, id: CheckpointId },
    #[error("stored checkpoint id {id} is not a checkpoint id (1 or more)")]
    StoredId { id: i64 },
    #[error("checkpoint id {id} does not fit PostgreSQL's bigint")]
    IdRange { id: CheckpointId },
    #[error("checkpoint {id} cannot follow head {}: the next checkpoint is the head + 1 (1 for an empty thread)", match expected { Some(head) => head.to_string(), None => String::from("none") })]
    OutOfSequence { expected: Option<CheckpointId>, id: CheckpointId },
    #[error("the store's runtime stopped before the operation finished")]
    Stopped,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_plain() {
        for good in ["tea", "_x", "Tea_2", &"a".repeat(63)] {
            assert!(is_identifier(good), "{good}");
        }
        for bad in ["", "1tea", "te-a", "te\"a", "a b", "é", &"a".repeat(64)] {
            assert!(!is_identifier(bad), "{bad}");
        }
    }

    #[test]
    fn the_target_names_user_host_port_and_database_but_not_the_password() {
        let config = tokio_postgres::Config::from_str("postgres://alice:hunter2@db.example:6543/orders").unwrap();
        assert_eq!(describe_target(&config), "alice@db.example:6543/orders");
        let config = tokio_postgres::Config::from_str("host=h user=bob password=pw").unwrap();
        assert_eq!(describe_target(&config), "bob@h:5432/bob");
    }

    #[test]
    fn the_fast_pool_keeps_the_urls_options_and_turns_off_synchronous_commit() {
        assert_eq!(with_async_commit(None), "-c synchronous_commit=off");
        assert_eq!(with_async_commit(Some(" ")), "-c synchronous_commit=off");
        let config = tokio_postgres::Config::from_str("postgres://u@h/db?options=-c%20search_path%3Dx").unwrap();
        assert_eq!(with_async_commit(config.get_options()), "-c search_path=x -c synchronous_commit=off");
    }

    #[test]
    fn lock_keys_differ_per_schema() {
        assert_eq!(lock_key("tea"), lock_key("tea"));
        assert_ne!(lock_key("tea"), lock_key("public"));
    }

    #[test]
    fn a_bad_url_or_schema_is_a_store_error_before_any_connection() {
        let error = PostgresStore::connect("postgres://u:pw@host:notaport/db").unwrap_err();
        let message = std::error::Error::source(&error).unwrap().to_string();
        assert!(message.contains("invalid connection URL"), "{message}");
        assert!(!message.contains("pw"), "{message}");
        let error = PostgresStore::builder("postgres://u@127.0.0.1:1/db").schema("no; drop").connect().unwrap_err();
        let message = std::error::Error::source(&error).unwrap().to_string();
        assert!(message.contains("invalid schema name `no; drop`"), "{message}");
    }
}
