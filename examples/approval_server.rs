//! An approval web service: a graph drafts a document, checks it and pauses for a reviewer; the
//! `Resume` token travels from one HTTP request to the next, through a restart of the server.
//!
//! ```text
//! TEA_TOKEN_KEY=some-long-secret cargo run --example approval_server -- --addr 127.0.0.1:3000 --db ./approvals.db
//! cargo run --example approval_server -- --dev      # a random key: tokens die with the process
//! RUST_LOG=tea=debug cargo run --example approval_server -- --dev   # each run's spans
//!
//! # Replicas sharing one PostgreSQL database (and one TEA_TOKEN_KEY): a pause taken by one is
//! # answered by any, and each token is used once across all of them.
//! TEA_TOKEN_KEY=some-long-secret cargo run --features postgres --example approval_server -- \
//!     --addr 127.0.0.1:3001 --db postgres://app@db.internal:5432/approvals
//! ```
//!
//! Routes (JSON in, JSON out):
//!
//! | route | does |
//! |---|---|
//! | `POST /documents` `{"text": …}` | drafts, checks, pauses: `202 {"status": "awaiting_review", "thread", "token", "draft", …}` |
//! | `GET /threads/{id}` | the thread's state and pending question; `404` if unknown |
//! | `POST /reviews` `{"token", "approved", "comment"}` | resumes: `200 {"status": "published", …}`, or `202` with a new token after a redraft |
//!
//! Errors are `{"error": CODE, "message": …}` with a stable code: see [`classify`].
//!
//! `tests/approval_server.rs` includes this file as a module and drives the server over loopback.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{Path as UrlPath, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use tea::prelude::*;

/// Drafts longer than this (in words) are flagged by the check.
pub const MAX_WORDS: usize = 200;
/// The longest reviewer comment taken.
pub const MAX_COMMENT_CHARS: usize = 2_000;

// ---------------------------------------------------------------------------------------------
// The graph
// ---------------------------------------------------------------------------------------------

/// One document on its way to publication.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
pub struct Document {
    /// The text the author submitted.
    pub text: String,
    /// The current draft.
    pub draft: String,
    /// Which draft this is (1 for the first).
    #[reducer(sum)]
    pub revision: u32,
    /// What the check found in the current draft.
    pub issues: Vec<String>,
    /// What the reviewer is asked: the payload of the `review` pause.
    pub request: ReviewRequest,
    /// The reviewer's answer to the current draft (`None` until it comes).
    pub decision: Option<Decision>,
    /// Every reviewer comment so far.
    #[reducer(append)]
    pub comments: Vec<String>,
    /// Set by `publish`.
    pub published: bool,
    /// What happened, in order.
    #[reducer(append)]
    pub log: Vec<String>,
}

/// The question the `review` pause asks.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReviewRequest {
    /// The draft to review.
    pub draft: String,
    /// Its revision number.
    pub revision: u32,
    /// What the automatic check found.
    pub issues: Vec<String>,
}

/// A reviewer's answer. It deserializes only from a valid answer (see [`DecisionForm`]), so a
/// bad one is refused by the engine as `Error::BadResumeValue` and the token stays usable.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "DecisionForm")]
pub struct Decision {
    /// Publish the draft?
    pub approved: bool,
    /// What to change (required when rejecting).
    pub comment: Option<String>,
}

/// A reviewer's answer as it comes in: `{"approved": bool, "comment": string?}`, nothing else.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionForm {
    approved: bool,
    #[serde(default)]
    comment: Option<String>,
}

impl TryFrom<DecisionForm> for Decision {
    type Error = String;

    fn try_from(form: DecisionForm) -> Result<Self, String> {
        let comment = form.comment.map(|c| c.trim().to_owned()).filter(|c| !c.is_empty());
        match &comment {
            None if !form.approved => Err("a rejection needs a `comment` saying what to change".into()),
            Some(c) if c.chars().count() > MAX_COMMENT_CHARS => {
                Err(format!("the comment is longer than {MAX_COMMENT_CHARS} characters"))
            }
            _ => Ok(Decision { approved: form.approved, comment }),
        }
    }
}

/// Collapses runs of whitespace, capitalizes the first letter and ends the text with a stop.
fn tidy(text: &str) -> String {
    let mut out = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if let Some(first) = out.chars().next() {
        out.replace_range(..first.len_utf8(), &first.to_uppercase().to_string());
    }
    if !out.ends_with(['.', '!', '?']) {
        out.push('.');
    }
    out
}

fn draft(doc: &Document) -> DocumentUpdate {
    Document::update().draft(tidy(&doc.text)).revision(1).log(vec!["drafted revision 1".into()])
}

fn check(doc: &Document) -> DocumentUpdate {
    let mut issues = Vec::new();
    let words = doc.draft.split_whitespace().count();
    if words > MAX_WORDS {
        issues.push(format!("{words} words; the limit is {MAX_WORDS}"));
    }
    if doc.draft.contains("TODO") {
        issues.push("contains a TODO".to_owned());
    }
    let request = ReviewRequest { draft: doc.draft.clone(), revision: doc.revision, issues: issues.clone() };
    let note = format!("checked revision {}: {} issue(s)", doc.revision, issues.len());
    Document::update().issues(issues).request(request).log(vec![note])
}

fn approved(doc: &Document) -> bool {
    doc.decision.as_ref().is_some_and(|d| d.approved)
}

/// The sentences of `text` that the check does not flag.
fn unflagged_sentences(text: &str) -> String {
    let kept: Vec<&str> = text.split_inclusive(['.', '!', '?']).filter(|s| !s.contains("TODO")).collect();
    kept.concat().trim().to_owned()
}

/// Stands in for a writer (or a model) that reworks the draft after a rejection: drops the
/// flagged sentences and takes the reviewer's comment in.
fn redraft(doc: &Document) -> DocumentUpdate {
    let comment = doc.decision.as_ref().and_then(|d| d.comment.clone()).unwrap_or_default();
    let revision = doc.revision + 1;
    let kept = unflagged_sentences(&doc.draft);
    Document::update()
        .draft(format!("{kept} [Revision {revision}: {comment}]").trim_start().to_owned())
        .revision(1)
        .comments(vec![comment.clone()])
        .decision(None)
        .log(vec![format!("rejected ({comment}); drafted revision {revision}")])
}

fn publish(doc: &Document) -> DocumentUpdate {
    let comment = doc.decision.as_ref().and_then(|d| d.comment.clone());
    let note = match &comment {
        Some(comment) => format!("published revision {} ({comment})", doc.revision),
        None => format!("published revision {}", doc.revision),
    };
    Document::update().published(true).comments(comment.into_iter().collect()).log(vec![note])
}

graph! {
    /// Drafts a document, checks it and waits for a reviewer: approved, it is published;
    /// rejected, it is redrafted with the reviewer's comment, checked and reviewed again.
    pub Approval for Document {
        start -> draft;
        draft -> check;
        check -> review;
        review -> publish if approved;
        review -> redraft;
        redraft -> check;
        publish -> end;
        // A review that comes more than a week later is refused: `410 expired`.
        interrupt review(request => decision, timeout = 604800);
    }
}

/// The app the server shares between its handlers. The store is chosen at start-up (`--db`).
pub type ApprovalApp = App<Approval, Arc<dyn Checkpointer>>;

/// Where the checkpoints live.
#[derive(Clone, Debug)]
pub enum Db {
    /// A sled database directory: one server process at a time.
    Sled(PathBuf),
    /// A PostgreSQL database (`postgres://…`), shared by every replica; its tables go in
    /// `schema` (`public` if `None`). Needs the feature `postgres`.
    Postgres {
        /// The connection URL.
        url: String,
        /// The schema of the tables.
        schema: Option<String>,
    },
}

impl Db {
    /// A `postgres://` or `postgresql://` URL is a PostgreSQL database; anything else a sled path.
    pub fn parse(arg: &str) -> Db {
        if arg.starts_with("postgres://") || arg.starts_with("postgresql://") {
            Db::Postgres { url: arg.to_owned(), schema: None }
        } else {
            Db::Sled(PathBuf::from(arg))
        }
    }

    /// What to call the database in messages: never the URL, which may hold a password.
    fn describe(&self) -> String {
        match self {
            Db::Sled(path) => format!("the sled database {}", path.display()),
            Db::Postgres { .. } => "the PostgreSQL database".to_owned(),
        }
    }
}

impl From<&Path> for Db {
    fn from(path: &Path) -> Db {
        Db::Sled(path.to_owned())
    }
}

/// Opens (or creates) the checkpoint database `db` and builds the app, signing tokens with
/// `key`. The error says which database and why.
pub fn open(db: impl Into<Db>, key: &[u8]) -> Result<ApprovalApp, String> {
    let db = db.into();
    let store: Result<Arc<dyn Checkpointer>, tea::Error> = match &db {
        Db::Sled(path) => SledStore::open(path).map(|store| Arc::new(store) as Arc<dyn Checkpointer>),
        #[cfg(feature = "postgres")]
        Db::Postgres { url, schema } => {
            let builder = tea::PostgresStore::builder(url);
            let builder = match schema {
                Some(schema) => builder.schema(schema),
                None => builder,
            };
            builder.connect().map(|store| Arc::new(store) as Arc<dyn Checkpointer>)
        }
        #[cfg(not(feature = "postgres"))]
        Db::Postgres { .. } => {
            return Err("this build has no PostgreSQL support: build it with `--features postgres`".to_owned())
        }
    };
    // `tea::Error::Store`'s message includes the store's own.
    let store = store.map_err(|e| format!("cannot open {}: {e}", db.describe()))?;
    Ok(Approval::builder().checkpointer(store).sign_tokens(key).build())
}

// ---------------------------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------------------------

type Shared = Arc<ApprovalApp>;

/// The routes, sharing `app`.
pub fn router(app: Shared) -> Router {
    Router::new()
        .route("/documents", post(submit))
        .route("/threads/{id}", get(thread))
        .route("/reviews", post(review))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", "this route takes another method")
        })
        .with_state(app)
}

/// Serves `app` on `listener` until `shutdown` completes, then lets the requests in flight
/// finish.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: ApprovalApp,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(Arc::new(app))).with_graceful_shutdown(shutdown).await
}

/// A JSON error response: `{"error": code, "message": …}`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError { status, code, message: message.into() }
    }

    fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    fn internal(what: impl std::fmt::Display) -> Self {
        eprintln!("approval_server: internal error: {what}");
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "the server failed; its log says why")
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(json!({ "error": self.code, "message": self.message }))).into_response()
    }
}

/// The status and stable error code for each `tea::Error`. Whatever a client can cause is a
/// 4xx; only failures of the server itself (its store, its graph's nodes) are a 500.
pub fn classify(err: &tea::Error) -> (StatusCode, &'static str) {
    use tea::Error as E;
    match err {
        E::InvalidToken { .. } => (StatusCode::BAD_REQUEST, "bad_token"),
        E::GraphMismatch { .. } => (StatusCode::BAD_REQUEST, "wrong_graph"),
        E::StaleResume { .. } => (StatusCode::CONFLICT, "already_resumed"),
        E::SchemaMismatch { .. } => (StatusCode::CONFLICT, "schema_changed"),
        E::ThreadExists { .. } => (StatusCode::CONFLICT, "thread_exists"),
        E::Expired { .. } => (StatusCode::GONE, "expired"),
        E::BadResumeValue { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "bad_answer"),
        E::CheckpointNotFound { .. } => (StatusCode::NOT_FOUND, "not_found"),
        // NodeFailed, NodePanicked, NoRoute, RecursionLimit, ConflictingWrites,
        // CorruptCheckpoint, Store, and whatever variant comes next.
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
    }
}

impl From<tea::Error> for ApiError {
    fn from(err: tea::Error) -> Self {
        match classify(&err) {
            (status, _) if status.is_server_error() => {
                let mut what = err.to_string();
                let mut source = std::error::Error::source(&err);
                while let Some(cause) = source {
                    what.push_str(&format!(": {cause}"));
                    source = cause.source();
                }
                ApiError::internal(what)
            }
            (status, code) => {
                let message = match &err {
                    // The engine's wording names the Rust type; the reason is what a client needs.
                    tea::Error::BadResumeValue { reason, .. } => format!("the review does not fit: {reason}"),
                    other => other.to_string(),
                };
                ApiError::new(status, code, message)
            }
        }
    }
}

/// The body as JSON of type `T`; anything else is `400 bad_request` (`413 too_large` past
/// axum's body limit).
fn parse_body<T: serde::de::DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let body = body.map_err(|rejection| match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => {
            ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", rejection.body_text())
        }
        _ => ApiError::bad_request(rejection.body_text()),
    })?;
    serde_json::from_slice(&body).map_err(|e| ApiError::bad_request(format!("the body is not the JSON expected: {e}")))
}

/// The body of `POST /documents`.
#[derive(Deserialize)]
struct Submission {
    text: String,
}

async fn submit(State(app): State<Shared>, body: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let Submission { text } = parse_body(body)?;
    if text.trim().is_empty() {
        return Err(ApiError::bad_request("`text` is empty"));
    }
    let thread = ThreadId::random();
    let input = Document { text, ..Document::default() };
    // The async API: the run's sync nodes go to tokio's blocking pool, its checkpoints through
    // the store's async calls; this handler's task never blocks the runtime.
    let outcome = app.invoke_on_async(thread.clone(), input).await?;
    Ok(outcome_response(&thread, outcome))
}

async fn review(State(app): State<Shared>, body: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    // `{"token": …, "approved": …, "comment": …}`: the token picks the thread, the rest is the
    // answer, which the graph's `Decision` checks (a bad one is a 422 from the engine).
    let mut fields: serde_json::Map<String, Value> = parse_body(body)?;
    let token = match fields.remove("token") {
        Some(Value::String(token)) => token,
        Some(_) => return Err(ApiError::bad_request("`token` is not a string")),
        None => return Err(ApiError::bad_request("`token` is missing")),
    };
    let resume: Resume<Document> = token.parse()?;
    let thread = resume.thread().clone();
    let outcome = app.resume_async(resume.answer(Value::Object(fields))).await?;
    Ok(outcome_response(&thread, outcome))
}

/// `202 awaiting_review` with the new token, or `200 published`.
fn outcome_response(thread: &ThreadId, outcome: Outcome<Document>) -> Response {
    match outcome {
        Outcome::Interrupted { state, resume } => {
            let body = json!({
                "status": "awaiting_review",
                "thread": thread.to_string(),
                "token": resume.to_string(),
                "draft": state.draft,
                "revision": state.revision,
                "issues": state.issues,
            });
            let location = format!("/threads/{thread}");
            (StatusCode::ACCEPTED, [(header::LOCATION, location)], Json(body)).into_response()
        }
        Outcome::Done(state) => {
            let body = json!({
                "status": "published",
                "thread": thread.to_string(),
                "document": state.draft,
                "revision": state.revision,
                "comments": state.comments,
                "log": state.log,
            });
            (StatusCode::OK, Json(body)).into_response()
        }
    }
}

async fn thread(State(app): State<Shared>, id: Result<UrlPath<String>, PathRejection>) -> Result<Response, ApiError> {
    let UrlPath(id) = id.map_err(|rejection| ApiError::bad_request(rejection.body_text()))?;
    let thread = ThreadId::from(id);
    let snapshot = app.state_async(&thread).await?;
    let Some(snapshot) = snapshot else {
        return Err(ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no thread `{thread}`")));
    };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let mut expired = false;
    let pending: Vec<Value> = snapshot
        .interrupts
        .iter()
        .map(|interrupt| {
            // `Interrupt` keeps its deadline private; its serialized form carries it.
            let expires_at =
                serde_json::to_value(interrupt).ok().and_then(|v| v.get("expires_at").and_then(Value::as_u64));
            expired |= expires_at.is_some_and(|at| at < now);
            json!({
                "id": interrupt.id(),
                "node": interrupt.node().as_str(),
                "question": interrupt.value(),
                "expires_at": expires_at,
            })
        })
        .collect();
    let status = match (pending.is_empty(), expired, snapshot.state.published) {
        (false, true, _) => "expired",
        (false, false, _) => "awaiting_review",
        (true, _, true) => "published",
        (true, _, false) => "in_progress",
    };
    let next: Vec<&str> = snapshot.next.iter().map(|n| n.as_str()).collect();
    Ok(Json(json!({
        "thread": thread.to_string(),
        "status": status,
        "pending": pending,
        "next": next,
        "state": snapshot.state,
    }))
    .into_response())
}

// ---------------------------------------------------------------------------------------------
// The program
// ---------------------------------------------------------------------------------------------

/// Command-line options.
#[derive(Debug)]
pub struct Options {
    addr: String,
    db: Db,
    dev: bool,
}

const USAGE: &str = "usage: approval_server [--addr HOST:PORT] [--db PATH | --db postgres://…] [--schema NAME] [--dev]

  --addr HOST:PORT  where to listen (default 127.0.0.1:3000)
  --db PATH         the sled checkpoint database (default ./approvals.db)
  --db postgres://USER[:PASSWORD]@HOST:PORT/DATABASE
                    a PostgreSQL database shared by every replica (feature `postgres`)
  --schema NAME     the PostgreSQL schema of the tables (default public)
  --dev             sign tokens with a random key when TEA_TOKEN_KEY is not set

Tokens are signed with the key in the environment variable TEA_TOKEN_KEY; replicas on one
database need the same key.";

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Options, String> {
    let mut options = Options { addr: "127.0.0.1:3000".into(), db: Db::Sled("approvals.db".into()), dev: false };
    let mut schema = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--addr" => options.addr = args.next().ok_or("--addr needs a value")?,
            "--db" => options.db = Db::parse(&args.next().ok_or("--db needs a value")?),
            "--schema" => schema = Some(args.next().ok_or("--schema needs a value")?),
            "--dev" => options.dev = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    match (&mut options.db, schema) {
        (Db::Postgres { schema, .. }, Some(name)) => *schema = Some(name),
        (Db::Sled(_), Some(_)) => return Err("--schema goes with a postgres:// --db".into()),
        (_, None) => {}
    }
    Ok(options)
}

/// The signing key: `TEA_TOKEN_KEY`, or with `--dev` a random one.
fn signing_key(dev: bool) -> Result<Vec<u8>, String> {
    match std::env::var_os("TEA_TOKEN_KEY") {
        Some(key) if !key.is_empty() => {
            if dev {
                eprintln!("approval_server: --dev: TEA_TOKEN_KEY is set, so tokens are signed with it");
            }
            Ok(key.into_encoded_bytes())
        }
        _ if dev => {
            let mut key = vec![0; 32];
            getrandom::fill(&mut key).map_err(|e| format!("no random key for --dev: {e}"))?;
            eprintln!("approval_server: ************************************************************");
            eprintln!("approval_server: --dev: TEA_TOKEN_KEY is not set; signing tokens with a RANDOM key.");
            eprintln!("approval_server: Tokens handed out now stop working when this process exits.");
            eprintln!("approval_server: Set TEA_TOKEN_KEY to a secret for anything but a try-out.");
            eprintln!("approval_server: ************************************************************");
            Ok(key)
        }
        _ => Err("TEA_TOKEN_KEY is not set (or empty): set it to a secret that signs the resume tokens, \
                  or pass --dev to use a random key for a try-out"
            .into()),
    }
}

/// Completes on Ctrl-C or (on Unix) SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}

fn run(options: Options) -> Result<(), String> {
    let key = signing_key(options.dev)?;
    let app = open(options.db, &key)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(&options.addr)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", options.addr))?;
        let addr: SocketAddr = listener.local_addr().map_err(|e| e.to_string())?;
        println!("listening on {addr}");
        serve(listener, app, shutdown_signal()).await.map_err(|e| e.to_string())?;
        eprintln!("approval_server: shut down");
        Ok(())
    })
}

/// Logs through `tracing-subscriber` to standard error, filtered by `RUST_LOG` (`EnvFilter`
/// syntax; nothing when it is unset). `RUST_LOG=tea=debug` shows each run, node, fan-out and
/// checkpoint; `tea=trace` adds the store calls. (This package's examples are built with tea's
/// spans compiled in; a service of your own turns them on with tea's feature `tracing`.)
fn install_logging() {
    use tracing_subscriber::EnvFilter;
    let Ok(directives) = std::env::var("RUST_LOG") else { return };
    let filter = match EnvFilter::try_new(&directives) {
        Ok(filter) => filter,
        Err(error) => {
            eprintln!("approval_server: RUST_LOG={directives:?} is not a filter ({error}); logging nothing");
            return;
        }
    };
    let installed = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .try_init();
    if let Err(error) = installed {
        eprintln!("approval_server: no logging: {error}");
    }
}

fn main() -> ExitCode {
    install_logging();
    let options = match parse_args(std::env::args().skip(1)) {
        Ok(options) => options,
        Err(message) if message.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("approval_server: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("approval_server: {message}");
            ExitCode::FAILURE
        }
    }
}
