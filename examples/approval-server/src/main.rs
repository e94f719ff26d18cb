//! An approval service: a graph drafts a document, checks it and pauses for a reviewer, served
//! over HTTP by `tea::serve` — LangChain's Agent Protocol for programs, and an inbox page at
//! `/inbox` where a person reads the draft and answers in the browser.
//!
//! ```text
//! cargo run -p tea-example-approval-server -- --db ./approvals.db
//! #   open http://127.0.0.1:3000/inbox (loopback needs no token)
//! curl -s 127.0.0.1:3000/runs/wait -H 'content-type: application/json' \
//!      -d '{"input": {"text": "tea ships today"}, "on_completion": "keep"}'
//! curl -s 127.0.0.1:3000/threads/$THREAD/runs/wait -H 'content-type: application/json' \
//!      -d '{"command": {"resume": {"approved": true, "comment": "ship it"}}}'
//!
//! # Replicas on one PostgreSQL database, each behind a token: a pause taken by one is
//! # answered through any, exactly once across all of them.
//! TEA_SERVE_TOKEN=some-long-secret cargo run -p tea-example-approval-server --features postgres -- \
//!     --addr 0.0.0.0:3001 --db postgres://app@db.internal:5432/approvals
//! ```
//!
//! The pause's `Resume` token never leaves the server: the run that pauses keeps it in the
//! thread's record in the store, and the run that answers (on this process, after a restart, or
//! on another replica) takes it from there; the engine's compare-and-swap on the thread lets
//! exactly one answer through. `tests/integration/tests/approval_server.rs` includes this file
//! as a module and drives it over loopback.

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use tea::prelude::*;
use tea::serve::{Access, Right, Serve};

/// Drafts longer than this (in words) are flagged by the check.
pub const MAX_WORDS: usize = 200;
/// The longest reviewer comment taken.
pub const MAX_COMMENT_CHARS: usize = 2_000;

/// One document on its way to publication. A run's `input` names only `text`.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
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
/// bad one is refused by the engine as `Error::BadResumeValue` (`422`) and the pause stays.
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
        // A review that comes more than a week later is refused: `409 expired`.
        interrupt review(request => decision, timeout = 604800);
    }
}

/// The app the server runs. The store is chosen at start-up (`--db`).
pub type ApprovalApp = App<Approval, Arc<dyn Checkpointer>>;

/// Where the checkpoints (and the threads' records) live.
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
}

impl From<&Path> for Db {
    fn from(path: &Path) -> Db {
        Db::Sled(path.to_owned())
    }
}

/// Opens (or creates) the database and builds the app on it. The error says which database
/// and why (never the URL, which may hold a password).
pub fn open(db: impl Into<Db>) -> Result<ApprovalApp, String> {
    let store: Arc<dyn Checkpointer> = match db.into() {
        Db::Sled(path) => Arc::new(
            SledStore::open(&path).map_err(|e| format!("cannot open the sled database {}: {e}", path.display()))?,
        ),
        #[cfg(feature = "postgres")]
        Db::Postgres { url, schema } => {
            let builder = tea::PostgresStore::builder(&url);
            let builder = match schema {
                Some(schema) => builder.schema(&schema),
                None => builder,
            };
            Arc::new(builder.connect().map_err(|e| format!("cannot open the PostgreSQL database: {e}"))?)
        }
        #[cfg(not(feature = "postgres"))]
        Db::Postgres { .. } => {
            return Err("this build has no PostgreSQL support: build it with `--features postgres`".into())
        }
    };
    Ok(Approval::builder().checkpointer(store).build())
}

/// The HTTP service: the Agent Protocol's routes and the inbox, for `app`, open to `access`.
pub fn router(app: ApprovalApp, access: Access) -> axum::Router {
    Serve::new().access(access).body_limit(64 * 1024).app_drawn(app, Approval::MERMAID).router()
}

/// Who may call the service: with `TEA_SERVE_TOKEN` set, whoever sends it (as a bearer token, or
/// once in the inbox's sign-in form); without it, only this machine (loopback peers).
fn access() -> Access {
    match std::env::var("TEA_SERVE_TOKEN") {
        Ok(token) if !token.is_empty() => Access::tokens([(token.as_str(), Right::Answer)]),
        _ => Access::insecure_local(),
    }
}

const USAGE: &str = "usage: approval_server [--addr HOST:PORT] [--db PATH | --db postgres://…] [--schema NAME]

  --addr HOST:PORT  where to listen (default 127.0.0.1:3000)
  --db PATH         the sled database (default ./approvals.db)
  --db postgres://USER[:PASSWORD]@HOST:PORT/DATABASE
                    a PostgreSQL database shared by every replica (feature `postgres`)
  --schema NAME     the PostgreSQL schema of the tables (default public)

Every request needs `Authorization: Bearer $TEA_SERVE_TOKEN` when TEA_SERVE_TOKEN is set;
without it, only loopback peers are served.";

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<(String, Db), String> {
    let (mut addr, mut db, mut schema) = ("127.0.0.1:3000".to_owned(), Db::Sled("approvals.db".into()), None);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--addr" => addr = args.next().ok_or("--addr needs a value")?,
            "--db" => db = Db::parse(&args.next().ok_or("--db needs a value")?),
            "--schema" => schema = Some(args.next().ok_or("--schema needs a value")?),
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    match (&mut db, schema) {
        (Db::Postgres { schema, .. }, Some(name)) => *schema = Some(name),
        (Db::Sled(_), Some(_)) => return Err("--schema goes with a postgres:// --db".into()),
        (_, None) => {}
    }
    Ok((addr, db))
}

fn run(addr: String, db: Db) -> Result<(), String> {
    let app = open(db)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let listener =
            tokio::net::TcpListener::bind(&addr).await.map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        let bound: SocketAddr = listener.local_addr().map_err(|e| e.to_string())?;
        println!("listening on {bound}; the inbox is http://{bound}/inbox");
        tea::serve::serve(listener, router(app, access()), tea::serve::shutdown_signal())
            .await
            .map_err(|e| e.to_string())
    })
}

/// Logs through `tracing-subscriber` to standard error, filtered by `RUST_LOG` (nothing when it
/// is unset): `RUST_LOG=tea=debug` shows each run, node and checkpoint. (This package's examples
/// are built with tea's spans compiled in; a service of your own turns them on with tea's
/// feature `tracing`.)
fn install_logging() {
    let Ok(directives) = std::env::var("RUST_LOG") else { return };
    match tracing_subscriber::EnvFilter::try_new(&directives) {
        Ok(filter) => {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_writer(std::io::stderr)
                .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
                .try_init();
        }
        Err(error) => eprintln!("approval_server: RUST_LOG={directives:?} is not a filter ({error}); logging nothing"),
    }
}

fn main() -> ExitCode {
    install_logging();
    let (addr, db) = match parse_args(std::env::args().skip(1)) {
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
    match run(addr, db) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("approval_server: {message}");
            ExitCode::FAILURE
        }
    }
}
