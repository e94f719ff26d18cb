//! The commands: loading the agent on its store, running and resuming it (once, streamed, or
//! interactively until done), and reading what a store holds.
//!
//! Loading is first `Engine::load_file_on(file, MemoryStore)`, which opens no store, so
//! `validate` and `draw` have no effects and a bad file stops before any store is opened; then
//! the store the command names: `--store`, else the file's `config`, else `sled:.tea/store` when
//! the agent can pause. Every argument is parsed before a store is opened. [`base_engine`] is
//! the one place an `Engine` is made (breakpoints and `--trust`).
//!
//! Each run is one `Call` carried out through the async API's event stream
//! (`Agent::run_stream_async`) on a multi-threaded tokio runtime of this module's own, so each
//! step is seen as it ends; `tea recover` is a `Call::recover`; a checkpoint file is read into
//! its call by `Agent::checkpoint_call`. A stop asked by Ctrl-C drops the stream after an
//! event, which abandons the run at that step boundary (its lease released, or a resumed pause
//! put back). Time travel (`tea update`, `tea fork`) is `Agent::update_state` and `Agent::fork`.

use crate::output;
use crate::store::{self, StoreSpec, DEFAULT_STORE};
use crate::watch::{self, Watch};
use crate::{
    BreakArgs, RecoverArgs, ResumeArgs, RunArgs, SecretArgs, StoreArg, TrustArg, EXIT_DONE, EXIT_ERROR, EXIT_PAUSED,
    EXIT_STOPPED,
};
use serde_json::{Map, Value};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tea_runtime::{Call, Error, Event, MemoryStore, Outcome, Resume, ThreadId};
use tea_yaml::{Agent, Engine, LoadError, State, Update};

/// Loads an agent file on a `MemoryStore`, without opening or connecting to the store its
/// `config` names: checking a file has no effect on disk or elsewhere.
pub fn load(file: &Path, trust: &TrustArg) -> Result<Agent, String> {
    checked(file, trust).map_err(|e| describe(&e))
}

/// [`load`], keeping the problems apart (for `tea validate` and `tea inspect`).
pub fn checked(file: &Path, trust: &TrustArg) -> Result<Agent, LoadError> {
    checked_with(base_engine(trust, &BreakArgs::default()), file)
}

/// [`checked`] with `engine`.
fn checked_with(engine: Engine, file: &Path) -> Result<Agent, LoadError> {
    let agent = engine.load_file_on(file, MemoryStore::new())?;
    print_warnings(file, &agent);
    Ok(agent)
}

/// The engine every command loads agents with, before secrets: the breakpoints of
/// `--interrupt-before`/`--interrupt-after`, `--trust`, and the grants (`--allow-read`,
/// `--allow-net`, …). The one place an `Engine` is made.
pub fn base_engine(trust: &TrustArg, breaks: &BreakArgs) -> Engine {
    let names = |list: &[String]| -> Vec<String> {
        list.iter().map(|n| n.trim()).filter(|n| !n.is_empty()).map(str::to_owned).collect()
    };
    let engine =
        Engine::new().interrupt_before(names(&breaks.interrupt_before)).interrupt_after(names(&breaks.interrupt_after));
    // `--trust` reaches the engine here, and only here (Python blocks, shell providers).
    granted(engine.trust_code(trust.trust), &trust.grants)
}

/// `engine` with the grants of the flags. A host that does not parse, or a `--secret-host`
/// without `=`, makes the load fail with a message naming it (as the engine reports them).
fn granted(mut engine: Engine, grants: &crate::GrantArgs) -> Engine {
    if grants.allow_all {
        engine = engine.allow_read("/").allow_write("/").allow_net("*").allow_env("*");
    }
    for dir in &grants.allow_read {
        engine = engine.allow_read(dir);
    }
    for dir in &grants.allow_write {
        engine = engine.allow_write(dir);
    }
    for host in grants.allow_net.iter().map(|h| h.trim()).filter(|h| !h.is_empty()) {
        engine = engine.allow_net(host);
    }
    for name in grants.allow_env.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        engine = engine.allow_env(name);
    }
    for binding in &grants.secret_host {
        // An empty host does not parse: the load names the flag.
        let (name, host) = binding.split_once('=').unwrap_or((binding, ""));
        engine = engine.secret_host(name.trim(), host.trim());
    }
    engine.allow_net_from_settings(grants.allow_net_from_file)
}

/// Prints the warnings of a file just loaded (The Edge Agent's keys that tea accepts and
/// ignores), one line per key, `tea: warning: FILE:LINE:COL: …`, unless `-q`.
pub fn print_warnings(file: &Path, agent: &Agent) {
    if !watch::chatty() {
        return;
    }
    for w in agent.warnings() {
        eprintln!("tea: warning: {}:{}:{}: {}", file.display(), w.line(), w.column(), w.message());
    }
}

/// The engine the run commands load with: [`base_engine`], then the secrets of
/// `--secrets-env`, then `--secrets`. Messages name the secrets, never their values.
fn engine(args: &SecretArgs, trust: &TrustArg, breaks: &BreakArgs) -> Result<Engine, String> {
    let mut engine = base_engine(trust, breaks);
    for prefix in &args.secrets_env {
        if prefix.is_empty() {
            return Err("--secrets-env needs a prefix (as in `--secrets-env TEA_SECRET_`)".to_owned());
        }
        engine = engine.secrets_from_env(prefix);
    }
    let Some(text) = &args.secrets else { return Ok(engine) };
    let (body, from) = match text.strip_prefix('@') {
        Some(path) => (
            std::fs::read_to_string(path).map_err(|e| format!("cannot read the --secrets file `{path}`: {e}"))?,
            format!("the --secrets file `{path}`"),
        ),
        None => (text.clone(), "--secrets".to_owned()),
    };
    // serde_json's messages give a line and column, never the text: nothing secret is shown.
    let value: Value = serde_json::from_str(&body).map_err(|e| format!("{from} is not JSON: {e}"))?;
    let Value::Object(map) = value else {
        return Err(format!("{from} must be a JSON object of secret names to strings"));
    };
    // A secret is a string, or `{"value": "…", "hosts": ["api.example.com"]}`: the hosts it
    // is bound to (as `--secret-host NAME=HOST`).
    let shape = |name: &str| {
        format!("{from}: secret `{name}` must be a string, or {{\"value\": STRING, \"hosts\": [HOST, …]}}")
    };
    for (name, value) in map {
        match value {
            Value::String(value) => engine = engine.secret(name, value),
            Value::Object(mut bound) => {
                let Some(Value::String(value)) = bound.remove("value") else { return Err(shape(&name)) };
                let hosts = match bound.remove("hosts") {
                    None => Vec::new(),
                    Some(Value::Array(hosts)) => hosts,
                    Some(_) => return Err(shape(&name)),
                };
                if let Some(other) = bound.keys().next() {
                    return Err(format!("{}; `{other}` is not one of its keys", shape(&name)));
                }
                for host in hosts {
                    let Value::String(host) = host else { return Err(shape(&name)) };
                    engine = engine.secret_host(name.clone(), host);
                }
                engine = engine.secret(name, value);
            }
            _ => return Err(shape(&name)),
        }
    }
    Ok(engine)
}

/// The agent on the store the command runs it on, and that store's name for messages (empty
/// for an agent that keeps no threads). The file is checked before any store is opened.
fn open(file: &Path, store: &StoreArg, trust: &TrustArg) -> Result<(Agent, String), String> {
    open_with(file, store, &base_engine(trust, &BreakArgs::default()))
}

/// [`open`], loading with `engine` (its secrets).
fn open_with(file: &Path, store: &StoreArg, engine: &Engine) -> Result<(Agent, String), String> {
    let keys = store.encryption.keys()?;
    let agent = engine.load_file_on(file, MemoryStore::new()).map_err(|e| describe(&e))?;
    print_warnings(file, &agent);
    let (agent, shown) = match &store.spec() {
        Some(spec) => (store::attach(spec, agent, keys)?, store::shown(spec)),
        None if agent.names_store() => {
            let engine = match keys {
                Some(keys) => engine.clone().encrypt_with(keys),
                None => engine.clone(),
            };
            let agent = engine.load_file(file).map_err(|e| describe(&e))?;
            (agent, "the file's `config` store".to_owned())
        }
        None if agent.can_pause() => {
            let spec = store::parse(DEFAULT_STORE)?;
            (store::attach(&spec, agent, keys)?, store::shown(&spec))
        }
        None => (agent, String::new()),
    };
    Ok((store.group_commit.apply(agent), shown))
}

/// The agent with the run context `--context` gives, if any.
fn with_context(agent: Agent, args: &SecretArgs) -> Result<Agent, String> {
    match &args.context {
        None => Ok(agent),
        Some(text) => match json_arg("--context", text)? {
            context @ Value::Object(_) => Ok(agent.with_context(context)),
            other => Err(format!("--context must be a JSON object, not `{other}`")),
        },
    }
}

/// A JSON argument, or `@FILE` to read one from a file.
fn json_arg(flag: &str, text: &str) -> Result<Value, String> {
    if let Some(path) = text.strip_prefix('@') {
        let body = std::fs::read_to_string(path).map_err(|e| format!("cannot read the {flag} file `{path}`: {e}"))?;
        return serde_json::from_str(&body).map_err(|e| format!("the {flag} file `{path}` is not JSON: {e}"));
    }
    serde_json::from_str(text).map_err(|e| format!("{flag} is not JSON ({e}): `{text}`"))
}

/// `--answer`: JSON when it parses (`true`, `3`, `{"a": 1}`, `"text"`), `@FILE` for JSON from
/// a file, else the text itself as a string (`--answer Ada`), as the interactive prompt takes
/// it. A pause that wants something else than a string refuses the text with its own error.
fn answer_arg(flag: &str, text: &str) -> Result<Value, String> {
    if text.starts_with('@') {
        return json_arg(flag, text);
    }
    Ok(serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned())))
}

/// `--update`: a JSON object of keys to write.
fn update_arg(text: &str) -> Result<Map<String, Value>, String> {
    match json_arg("--update", text)? {
        Value::Object(map) => Ok(map),
        other => Err(format!("--update must be a JSON object of state keys, not `{other}`")),
    }
}

/// What a run starts from.
enum Start {
    New { thread: Option<String>, input: Value },
    Token(Box<Resume<State>>),
    Checkpoint { path: PathBuf, update: Option<Value> },
    Recover(ThreadId),
}

/// How an advance ended: where the run got to, or stopped by Ctrl-C.
#[allow(clippy::large_enum_variant)] // one per run, returned once
enum Ended {
    Outcome(Outcome<State>),
    Stopped,
}

/// `tea run`.
pub fn run(args: &RunArgs) -> Result<u8, String> {
    let input = match &args.input {
        Some(text) => json_arg("--input", text)?,
        None => Value::Object(Map::new()),
    };
    if !input.is_object() {
        return Err(format!("--input must be a JSON object of state keys, not `{input}`"));
    }
    let engine = engine(&args.secrets, &args.trust, &args.breaks)?;
    let (agent, store) = open_with(&args.file, &args.store, &engine)?;
    let agent = with_context(agent, &args.secrets)?;
    if let Some(saved) = agent.continues_from() {
        // `invoke` continues from the file; a named thread or a stream would start afresh.
        if args.thread.is_some() || args.stream {
            let flag = if args.thread.is_some() { "--thread" } else { "--stream" };
            return Err(format!(
                "agent `{}` continues from `config.checkpoint` `{}`, which {flag} would not; drop {flag}",
                agent.name(),
                saved.display()
            ));
        }
    }
    warn_if_memory(&agent, &args.store);
    watch::trace_to(args.trace.as_deref(), &agent, "run")?;
    // A thread kept in a store gets its id here, so that a run stopped by Ctrl-C can say which
    // thread `tea recover` continues.
    let thread = match &args.thread {
        None if !store.is_empty() && agent.continues_from().is_none() => Some(ThreadId::random().to_string()),
        thread => thread.clone(),
    };
    match advance(&agent, Start::New { thread: thread.clone(), input }, args.stream)? {
        Ended::Outcome(outcome) => finish(
            &agent,
            &args.file,
            &store,
            outcome,
            args.stream,
            Answering::of(args.interactive, args.auto_continue),
        ),
        Ended::Stopped => Ok(stopped_run(&args.file, &store, thread.as_deref())),
    }
}

/// `tea recover`.
pub fn recover(args: &RecoverArgs) -> Result<u8, String> {
    let engine = engine(&args.secrets, &args.trust, &args.breaks)?;
    let (agent, store) = open_with(&args.file, &args.store, &engine)?;
    let agent = with_context(agent, &args.secrets)?;
    if store.is_empty() {
        return Err(no_threads(&agent));
    }
    watch::trace_to(args.trace.as_deref(), &agent, "recover")?;
    match advance(&agent, Start::Recover(ThreadId::from(args.thread.as_str())), false)? {
        Ended::Outcome(outcome) => {
            finish(&agent, &args.file, &store, outcome, false, Answering::of(args.interactive, args.auto_continue))
        }
        Ended::Stopped => Ok(stopped_run(&args.file, &store, Some(&args.thread))),
    }
}

/// After Ctrl-C stopped a new run (or a recover): how to continue its thread.
fn stopped_run(file: &Path, store: &str, thread: Option<&str>) -> u8 {
    match thread {
        Some(thread) if !store.is_empty() => watch::note(&format!(
            "stopped; thread `{thread}` is kept in {store}: continue it with `{}`",
            command_line(&["recover".to_owned(), file.display().to_string(), "--thread".to_owned(), thread.to_owned()])
        )),
        _ => watch::note("stopped; the agent keeps no threads, so nothing is left to continue"),
    }
    EXIT_STOPPED
}

/// A `tea` command line: `args`, then the `--store`, secrets and grant flags this command was given
/// (as given, but `--secrets JSON` for secrets given inline), each word quoted for a POSIX
/// shell where it needs it.
fn command_line(args: &[String]) -> String {
    let mut words = vec!["tea".to_owned()];
    words.extend(args.iter().cloned());
    let given: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < given.len() {
        let word = &given[i];
        if matches!(word.as_str(), "--trust" | "--allow-all" | "--allow-net-from-file") {
            words.push(word.clone());
        }
        for flag in [
            "--store",
            "--checkpoint-dir",
            "-c",
            "--secrets",
            "--secrets-env",
            "--interrupt-before",
            "--interrupt-after",
            "--allow-read",
            "--allow-write",
            "--allow-net",
            "--allow-env",
            "--secret-host",
        ] {
            let value = if word == flag && i + 1 < given.len() {
                i += 1;
                given[i].clone()
            } else if let Some(value) = word.strip_prefix(&format!("{flag}=")) {
                value.to_owned()
            } else {
                continue;
            };
            // Secrets given inline are never shown: the command names them only.
            let value = if flag == "--secrets" && !value.starts_with('@') { "JSON".to_owned() } else { value };
            words.extend([flag.to_owned(), value]);
        }
        i += 1;
    }
    words.iter().map(|w| shell_quote(w)).collect::<Vec<_>>().join(" ")
}

/// `word` as a POSIX shell reads it back.
fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// `tea resume`.
pub fn resume(args: &ResumeArgs) -> Result<u8, String> {
    // `tea resume CHECKPOINT --workflow FILE` is `tea resume FILE --checkpoint CHECKPOINT`.
    let (file, checkpoint) = match &args.workflow {
        Some(workflow) => (workflow.as_path(), Some(args.file.as_path())),
        None => (args.file.as_path(), args.checkpoint.as_deref()),
    };
    // Every argument is checked before the store is opened or anything runs.
    let answer = args.answer.as_deref().map(|a| answer_arg("--answer", a)).transpose()?;
    let mut answers_to = Vec::new();
    for pair in &args.answer_to {
        let (id, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("--answer-to `{pair}` is not ID=ANSWER (as in `--answer-to a1=true`)"))?;
        answers_to.push((id.to_owned(), answer_arg(&format!("--answer-to {id}"), value)?));
    }
    let update = args.update.as_deref().map(update_arg).transpose()?;
    let token =
        args.token.as_deref().map(|t| t.parse::<Resume<State>>().map_err(|e| format!("--token: {e}"))).transpose()?;
    let engine = engine(&args.secrets, &args.trust, &args.breaks)?;
    let unanswered = answer.is_none() && answers_to.is_empty();
    if let Some(pending) = token.as_ref().filter(|_| unanswered && !args.interactive) {
        // Refused before the store is opened.
        needs_no_answer(pending, "--token")?;
    }
    let (agent, store) = open_with(file, &args.store, &engine)?;
    let agent = with_context(agent, &args.secrets)?;
    watch::trace_to(args.trace.as_deref(), &agent, "resume")?;
    let token = match (token, &args.thread) {
        (None, Some(thread)) => {
            let pending = latest_pause(&agent, &store, thread)?;
            if unanswered && !args.interactive {
                needs_no_answer(&pending, &format!("--thread {thread}"))?;
            }
            Some(pending)
        }
        (token, _) => token,
    };
    if let Some(pending) = token.as_ref().filter(|_| unanswered && args.interactive) {
        if pending.interrupts().iter().any(|i| i.needs_answer()) {
            // Interactive: the question is asked first.
            let mut pending = pending.clone();
            if let Some(update) = update {
                pending = pending.update(Update::from(update));
            }
            return keep_answering(&agent, file, &store, pending, args.stream, Answering::Ask);
        }
    }
    let start = match (token, checkpoint) {
        (Some(mut resume), _) => {
            if let Some(answer) = answer {
                resume = resume.answer(answer);
            }
            for (id, value) in answers_to {
                resume = resume.answer_to(id, value);
            }
            if let Some(update) = update {
                resume = resume.update(Update::from(update));
            }
            Start::Token(Box::new(resume))
        }
        (None, Some(path)) => {
            let mut update = update;
            if let Some(answer) = answer {
                let key = checkpoint_answer_key(&agent, path)?;
                update.get_or_insert_with(Map::new).insert(key, answer);
            }
            Start::Checkpoint { path: path.to_path_buf(), update: update.map(Value::Object) }
        }
        (None, None) => return Err("give --token TOKEN, --thread ID or --checkpoint PATH".to_owned()),
    };
    let token = match &start {
        Start::Token(resume) => Some((**resume).clone()),
        _ => None,
    };
    match advance(&agent, start, args.stream)? {
        Ended::Outcome(outcome) => {
            finish(&agent, file, &store, outcome, args.stream, Answering::of(args.interactive, args.auto_continue))
        }
        Ended::Stopped => Ok(stopped_resume(&agent, file, &store, token.as_ref())),
    }
}

/// The error of resuming `pending` (from `flag`) without an answer when it waits for one.
fn needs_no_answer(pending: &Resume<State>, flag: &str) -> Result<(), String> {
    match pending.interrupts().iter().find(|i| i.needs_answer()) {
        Some(question) => Err(format!(
            "{flag}: the pause at `{}` waits for an answer; give --answer ANSWER (or --answer-to {}=ANSWER), or use --interactive",
            question.node(),
            question.id()
        )),
        None => Ok(()),
    }
}

/// The token of the pause thread `thread` waits on (`tea resume --thread`).
fn latest_pause(agent: &Agent, store: &str, thread: &str) -> Result<Resume<State>, String> {
    if store.is_empty() {
        return Err(no_threads(agent));
    }
    let id = ThreadId::from(thread);
    let snapshot = agent.state(&id).map_err(|e| describe(&e))?.ok_or_else(|| {
        format!("--thread: thread `{thread}` of agent `{}` has no checkpoints in {store}", agent.name())
    })?;
    if snapshot.interrupts.is_empty() {
        let at = if snapshot.next.is_empty() {
            "it has finished".to_owned()
        } else {
            let next: Vec<String> = snapshot.next.iter().map(|n| format!("`{n}`")).collect();
            format!("it stopped before {} (`tea recover` continues it)", next.join(", "))
        };
        return Err(format!("--thread: thread `{thread}` is not paused: {at}"));
    }
    // A paused thread's recover runs nothing: it reports the pause, with its token.
    match runtime().map_err(|e| describe(&e))?.block_on(agent.run_async(Call::recover(id))) {
        Ok(Outcome::Interrupted { resume, .. }) => Ok(resume),
        Ok(Outcome::Done(_)) => Err(format!("--thread: thread `{thread}` is not paused: it has finished")),
        Err(error) => Err(format!("--thread: {}", describe(&error))),
    }
}

/// After Ctrl-C stopped a resumed run: its pause is back, and its token works again — unless a
/// node after the one it paused at completed, which the engine does not run again: the thread
/// then continues with `tea recover`.
fn stopped_resume(agent: &Agent, file: &Path, store: &str, resumed: Option<&Resume<State>>) -> u8 {
    let paused = resumed.map(|resume| {
        agent.state(resume.thread()).ok().flatten().is_some_and(|snapshot| !snapshot.interrupts.is_empty())
    });
    match resumed {
        Some(resume) if paused == Some(false) => {
            return stopped_run(file, store, Some(resume.thread().as_str()));
        }
        Some(resume) => watch::note(&format!(
            "stopped; thread `{}` is back at its pause at `{}`: continue it with `{}`",
            resume.thread(),
            resume.node(),
            continue_command(file, resume)
        )),
        None => watch::note("stopped"),
    }
    EXIT_STOPPED
}

/// The command that resumes pause `resume`.
fn continue_command(file: &Path, resume: &Resume<State>) -> String {
    let mut line =
        command_line(&["resume".to_owned(), file.display().to_string(), "--token".to_owned(), resume.to_string()]);
    match resume.interrupts().iter().filter(|i| i.needs_answer()).count() {
        0 => {}
        1 => line.push_str(" --answer ANSWER"),
        _ => line.push_str(" --answer-to ID=ANSWER (one for each pause)"),
    }
    line
}

/// The state key an answer to the pause in checkpoint file `path` goes to.
fn checkpoint_answer_key(agent: &Agent, path: &Path) -> Result<String, String> {
    let shown = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read checkpoint file `{shown}`: {e}"))?;
    let bytes = agent.checkpoint_file_bytes(bytes).map_err(|e| describe(&e))?;
    let (node, _) = tea_runtime::decode_checkpoint(agent.graph(), &bytes, &shown).map_err(|e| describe(&e))?;
    agent.resume_key(node.as_str()).map(str::to_owned).ok_or_else(|| {
        format!(
            "checkpoint file `{shown}` stopped at `{node}`, which is not an interrupt node, so --answer has \
             nothing to answer; use --update"
        )
    })
}

fn warn_if_memory(agent: &Agent, store: &StoreArg) {
    if store.spec() == Some(StoreSpec::Memory) && agent.can_pause() {
        watch::note("note: with --store memory a pause cannot be resumed by another `tea` process");
    }
}

/// Runs from `start` to the next pause or the end (or until Ctrl-C); with `stream`, prints
/// each event as it happens.
fn advance(agent: &Agent, start: Start, stream: bool) -> Result<Ended, String> {
    // Errors that say the token or file does not fit name the flag they came from.
    let context = match &start {
        Start::New { .. } | Start::Recover(_) => None,
        Start::Token(_) => Some("--token".to_owned()),
        Start::Checkpoint { path, .. } => Some(format!("--checkpoint `{}`", path.display())),
    };
    advance_from(agent, start, stream).map_err(|e| {
        let identifies = matches!(
            e,
            Error::StaleResume { .. }
                | Error::GraphMismatch { .. }
                | Error::SchemaMismatch { .. }
                | Error::InvalidToken { .. }
                | Error::CheckpointNotFound { .. }
                | Error::CorruptCheckpoint { .. }
                | Error::Expired { .. }
        );
        match context {
            Some(flag) if identifies => format!("{flag}: {}", describe(&e)),
            _ => describe(&e),
        }
    })
}

/// An error and its sources, as one line (a source whose text the message repeats is left out):
/// the engine's [`tea_runtime::error_chain`].
pub fn describe(error: &dyn std::error::Error) -> String {
    tea_runtime::error_chain(error)
}

/// The runtime `tea` drives the engine's async API on: multi-threaded, because the stores that
/// block (sled, directories) hand their thread over with `block_in_place`.
fn runtime() -> Result<&'static tokio::runtime::Runtime, Error> {
    static RUNTIME: std::sync::OnceLock<Result<tokio::runtime::Runtime, String>> = std::sync::OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .thread_name("tea")
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the async runtime: {e}"))
        })
        .as_ref()
        .map_err(|e| Error::store(e.clone()))
}

fn advance_from(agent: &Agent, start: Start, stream: bool) -> Result<Ended, Error> {
    let (call, first) = match &start {
        Start::New { input, .. } => ("run", watch::first_node(agent.graph(), input)),
        Start::Token(resume) => ("resume", format!("`{}`", resume.node())),
        Start::Checkpoint { .. } => ("resume", "from the checkpoint".to_owned()),
        Start::Recover(thread) => ("recover", format!("thread `{thread}`")),
    };
    // A resumed thread goes on counting its steps from where it paused (`tea: step 4: …`), as
    // `tea threads` and `tea state` count them; a thread the store cannot show starts from 0.
    let done_steps = match &start {
        Start::Token(resume) => agent.state(resume.thread()).ok().flatten().map_or(0, |snapshot| snapshot.step),
        _ => 0,
    };
    let mut watch = Watch::start(agent.graph(), agent.name(), call, &first, done_steps);
    let ended = drive(agent, start, stream, &mut watch);
    match &ended {
        Ok(Ended::Outcome(Outcome::Done(_))) => watch.done(),
        Ok(Ended::Outcome(Outcome::Interrupted { resume, .. })) => watch.paused(resume),
        Ok(Ended::Stopped) => watch.stopped(),
        Err(error) => watch.failed(&describe(error)),
    }
    if watch::verbose() {
        eprintln!("tea: {call} of `{}` took {:.1} ms", agent.name(), watch.elapsed().as_secs_f64() * 1000.0);
    }
    ended
}

/// [`advance_from`] under `watch`.
fn drive(agent: &Agent, start: Start, stream: bool, watch: &mut Watch<'_>) -> Result<Ended, Error> {
    let call = match start {
        // A checkpoint file (`--checkpoint`, `config.checkpoint`) is read with blocking calls,
        // and its run (which may start a new thread at the node that saved it) is carried out on
        // the blocking API: it waits for network nodes itself, and Ctrl-C ends the process as
        // usual. (clap refuses `--checkpoint` with `--stream`.)
        Start::Checkpoint { path, update } => {
            return agent.run(agent.checkpoint_call(path, update)?).map(Ended::Outcome)
        }
        Start::New { thread: None, input } if agent.continues_from().is_some() => {
            return agent.invoke(input).map(Ended::Outcome)
        }
        Start::Recover(thread) => {
            // No stream continues a thread: Ctrl-C cancels the recover, which leaves the thread
            // at its last checkpoint, released.
            let runtime = runtime()?;
            watch::handle_ctrl_c(runtime);
            watch::stops_at_steps(false);
            return runtime.block_on(async {
                tokio::select! {
                    outcome = agent.run_async(Call::recover(thread)) => outcome.map(Ended::Outcome),
                    () = stop() => Ok(Ended::Stopped),
                }
            });
        }
        Start::Token(resume) => Call::resume(*resume),
        Start::New { thread: Some(thread), input } => agent.start(input)?.on(thread),
        Start::New { thread: None, input } => agent.start(input)?,
    };
    // Everything else runs as a stream on the async driver: the network nodes of a fan-out are
    // awaited together, without a thread each, and each step is seen as it ends.
    let runtime = runtime()?;
    watch::handle_ctrl_c(runtime);
    watch::stops_at_steps(true);
    runtime.block_on(async move {
        use futures_util::StreamExt;
        let mut events = agent.run_stream_async(call).boxed();
        while let Some(event) = events.next().await {
            let event = event?;
            if stream {
                output::line(&output::event(agent, &event).to_string());
            }
            match event {
                Event::Step { node, branch, state, duration } => watch.step(&node, branch.as_ref(), duration, &state),
                Event::Interrupted { state, resume } => {
                    return Ok(Ended::Outcome(Outcome::Interrupted { state, resume }))
                }
                Event::Done(state) => return Ok(Ended::Outcome(Outcome::Done(state))),
                // What nodes emit, their retries and cache hits: shown by `--stream` above.
                _ => {}
            }
            if watch::stop_requested() {
                // Dropping the stream abandons the run at this step boundary: a new run's
                // checkpoint is released for `tea recover`, a resumed run's pause is put back
                // (unless a node after the one it paused at completed: then `tea recover`).
                drop(events);
                return Ok(Ended::Stopped);
            }
        }
        Err(Error::store(format!("the run of agent `{}` stopped without finishing or pausing", agent.name())))
    })
}

/// Resolves once Ctrl-C asked the run to stop.
async fn stop() {
    while !watch::stop_requested() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What happens at a pause: report it (and exit 3), ask on stderr (`--interactive`), or go on
/// past a breakpoint by itself (`--auto-continue`; a pause that waits for an answer is reported).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Answering {
    Report,
    Ask,
    Auto,
}

impl Answering {
    fn of(interactive: bool, auto_continue: bool) -> Answering {
        match (interactive, auto_continue) {
            (true, _) => Answering::Ask,
            (false, true) => Answering::Auto,
            (false, false) => Answering::Report,
        }
    }
}

/// Reports how a run ended; interactively, answers each pause from stdin and goes on.
fn finish(
    agent: &Agent,
    file: &Path,
    store: &str,
    outcome: Outcome<State>,
    stream: bool,
    answering: Answering,
) -> Result<u8, String> {
    match outcome {
        Outcome::Done(state) => Ok(done(&state, stream)),
        Outcome::Interrupted { resume, .. } => keep_answering(agent, file, store, resume, stream, answering),
    }
}

/// Reports the pause `pending`; interactively, answers it and every later one from stdin; with
/// `--auto-continue`, resumes each breakpoint as it comes.
fn keep_answering(
    agent: &Agent,
    file: &Path,
    store: &str,
    mut pending: Resume<State>,
    stream: bool,
    answering: Answering,
) -> Result<u8, String> {
    let mut stdin = std::io::stdin().lock();
    loop {
        let answered = match answering {
            Answering::Ask => ask(&mut stdin, &pending)?,
            Answering::Auto if !pending.interrupts().iter().any(|i| i.needs_answer()) => {
                watch::note(&format!("continuing past the breakpoint at `{}` (--auto-continue)", pending.node()));
                Some(pending.clone())
            }
            Answering::Auto | Answering::Report => None,
        };
        let Some(answered) = answered else { return Ok(paused(agent, file, store, &pending, stream)) };
        match advance_from(agent, Start::Token(Box::new(answered)), stream) {
            Ok(Ended::Outcome(Outcome::Done(state))) => return Ok(done(&state, stream)),
            Ok(Ended::Outcome(Outcome::Interrupted { resume, .. })) => pending = resume,
            Ok(Ended::Stopped) => return Ok(stopped_resume(agent, file, store, Some(&pending))),
            // The thread stays at the same pause: ask again.
            Err(error @ Error::BadResumeValue { .. }) => eprintln!("tea: {}; answer again", describe(&error)),
            Err(error) => return Err(describe(&error)),
        }
    }
}

fn done(state: &State, stream: bool) -> u8 {
    if !stream {
        output::pretty(&state.to_json());
    }
    EXIT_DONE
}

/// Prints the pause (unless `--stream` printed it as an event) and how to continue it.
fn paused(agent: &Agent, file: &Path, store: &str, resume: &Resume<State>, stream: bool) -> u8 {
    let pause = output::pause(agent, resume);
    if !stream {
        output::pretty(&pause);
    }
    let kept = if store.is_empty() { String::new() } else { format!(" in {store}") };
    watch::note(&format!(
        "thread `{}` paused at `{}`{kept}; continue it with `{}`",
        resume.thread(),
        resume.node(),
        continue_command(file, resume)
    ));
    EXIT_PAUSED
}

/// Asks on stderr about the pause and reads the answer from stdin: `Some` to resume with,
/// `None` to leave the thread paused (end of input, or "n" at a breakpoint).
fn ask(stdin: &mut impl BufRead, resume: &Resume<State>) -> Result<Option<Resume<State>>, String> {
    let questions: Vec<_> = resume.interrupts().iter().filter(|i| i.needs_answer()).collect();
    let mut answered = resume.clone();
    if questions.is_empty() {
        loop {
            prompt(&format!(
                "paused at `{}` (a breakpoint). Continue? [Enter/y: continue, n: stop, or a JSON object of state keys to write first] ",
                resume.node()
            ));
            let Some(line) = read_line(stdin)? else { return Ok(None) };
            if watch::stop_requested() {
                return Ok(None);
            }
            match line.as_str() {
                "" | "y" | "yes" => return Ok(Some(answered)),
                "n" | "no" | "q" | "quit" => return Ok(None),
                text => match serde_json::from_str::<Value>(text) {
                    Ok(Value::Object(map)) => return Ok(Some(answered.update(Update::from(map)))),
                    _ => eprintln!("tea: `{text}` is not y, n or a JSON object; try again"),
                },
            }
        }
    }
    let several = questions.len() > 1;
    for question in questions {
        let shown = match question.value() {
            Value::String(text) => text.clone(),
            Value::Null => format!("`{}` waits for an answer", question.node()),
            other => other.to_string(),
        };
        prompt(&format!("[{}] {shown}\n> ", question.node()));
        let Some(line) = read_line(stdin)? else { return Ok(None) };
        if watch::stop_requested() {
            return Ok(None);
        }
        // JSON when it parses (`true`, `3`, `{"a": 1}`), else the line as text.
        let answer = serde_json::from_str::<Value>(&line).unwrap_or(Value::String(line));
        answered = if several { answered.answer_to(question.id(), answer) } else { answered.answer(answer) };
    }
    Ok(Some(answered))
}

fn prompt(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "{text}").and_then(|()| err.flush());
}

/// A line of stdin without its line ending; `None` at the end of input.
fn read_line(stdin: &mut impl BufRead) -> Result<Option<String>, String> {
    let mut line = String::new();
    match stdin.read_line(&mut line) {
        Ok(0) => {
            eprintln!();
            Ok(None)
        }
        Ok(_) => Ok(Some(line.trim_end_matches(['\n', '\r']).trim().to_owned())),
        Err(e) => Err(format!("cannot read the answer from stdin: {e}")),
    }
}

/// `tea validate`: prints `ok: FILE (N nodes)` (after the file's `tea inspect` text when
/// `detailed`) or every problem with its source line; 1 when any file has one.
pub fn validate(files: &[PathBuf], detailed: bool, strict: bool, trust: &TrustArg) -> u8 {
    let mut status = EXIT_DONE;
    for file in files {
        match checked_with(base_engine(trust, &BreakArgs::default()).strict(strict), file) {
            Ok(agent) => {
                if detailed {
                    match crate::inspect::text(file, &agent) {
                        Ok(text) => output::line(&text),
                        Err(message) => eprintln!("tea: {message}"),
                    }
                }
                output::line(&format!("ok: {} ({} nodes)", file.display(), agent.nodes().len()));
            }
            Err(problems) => {
                output::line(crate::diagnostics::render(&problems).trim_end());
                status = EXIT_ERROR;
            }
        }
    }
    status
}

/// `tea threads`: the threads the store holds for the agent.
pub fn threads(file: &Path, store: &StoreArg, trust: &TrustArg) -> Result<u8, String> {
    let (agent, name) = open(file, store, trust)?;
    if name.is_empty() {
        return Err(no_threads(&agent));
    }
    let threads = agent.threads().map_err(|e| describe(&e))?;
    let mut listed = Vec::with_capacity(threads.len());
    for thread in &threads {
        let latest = agent.state(thread).map_err(|e| describe(&e))?;
        listed.push(output::thread_summary(thread, latest.as_ref()));
    }
    output::pretty(&Value::Array(listed));
    Ok(EXIT_DONE)
}

/// `tea prune`: one sweep of the agent's threads under the flags' retention; the report as JSON.
pub fn prune(args: &crate::PruneArgs) -> Result<u8, String> {
    let retention = args.retention.retention();
    if retention.is_empty() {
        return Err("nothing to prune: give --keep-last K, --older-than AGE or --paused-older-than AGE".to_owned());
    }
    let (agent, name) = open(&args.file, &args.store, &args.trust)?;
    if name.is_empty() {
        return Err(no_threads(&agent));
    }
    let report = agent.with_retention(retention).sweep().map_err(|e| describe(&e))?;
    for kept in &report.kept_paused {
        eprintln!("tea: {kept}");
    }
    output::pretty(&output::sweep_report(&report));
    Ok(EXIT_DONE)
}

/// `tea state`: the thread's latest checkpoint, or its history.
pub fn state(
    file: &Path,
    thread: &str,
    history: bool,
    at: Option<u64>,
    store: &StoreArg,
    trust: &TrustArg,
) -> Result<u8, String> {
    let (agent, name) = open(file, store, trust)?;
    if name.is_empty() {
        return Err(no_threads(&agent));
    }
    let thread = ThreadId::from(thread);
    let missing = || format!("thread `{thread}` of agent `{}` has no checkpoints in {name}", agent.name());
    if let Some(at) = at {
        let all = agent.history(&thread).map_err(|e| describe(&e))?;
        if all.is_empty() {
            return Err(missing());
        }
        let one = all
            .iter()
            .find(|s| s.checkpoint == at)
            .ok_or_else(|| format!("thread `{thread}` has no checkpoint {at} (see `tea state --history`)"))?;
        output::pretty(&output::snapshot(&thread, one));
    } else if history {
        let all = agent.history(&thread).map_err(|e| describe(&e))?;
        if all.is_empty() {
            return Err(missing());
        }
        output::pretty(&Value::Array(all.iter().map(|s| output::snapshot(&thread, s)).collect()));
    } else {
        let latest = agent.state(&thread).map_err(|e| describe(&e))?.ok_or_else(missing)?;
        output::pretty(&output::snapshot(&thread, &latest));
    }
    Ok(EXIT_DONE)
}

/// `tea update`: a checkpoint at the thread's head as if `as_node` had produced `update`.
pub fn update(
    file: &Path,
    thread: &str,
    update: &str,
    as_node: &str,
    store: &StoreArg,
    trust: &TrustArg,
) -> Result<u8, String> {
    let update = json_arg("the update", update)?;
    if !update.is_object() {
        return Err(format!("the update must be a JSON object of state keys, not `{update}`"));
    }
    let (agent, name) = open(file, store, trust)?;
    if name.is_empty() {
        return Err(no_threads(&agent));
    }
    let thread = ThreadId::from(thread);
    let snapshot = agent.update_state(&thread, update, as_node).map_err(|e| describe(&e))?;
    output::pretty(&output::snapshot(&thread, &snapshot));
    Ok(EXIT_DONE)
}

/// `tea fork`: a new thread from checkpoint `checkpoint` of `thread`.
pub fn fork(
    file: &Path,
    thread: &str,
    checkpoint: u64,
    to: Option<&str>,
    store: &StoreArg,
    trust: &TrustArg,
) -> Result<u8, String> {
    let (agent, name) = open(file, store, trust)?;
    if name.is_empty() {
        return Err(no_threads(&agent));
    }
    let thread = ThreadId::from(thread);
    let new_thread = to.map_or_else(ThreadId::random, ThreadId::from);
    let snapshot = agent.fork(&thread, checkpoint, new_thread.clone()).map_err(|e| describe(&e))?;
    output::pretty(&output::snapshot(&new_thread, &snapshot));
    Ok(EXIT_DONE)
}

fn no_threads(agent: &Agent) -> String {
    format!(
        "agent `{}` names no store in its `config` and cannot pause, so it keeps no threads; name one with --store",
        agent.name()
    )
}
