//! What a run request means: the thread it names (located among the served agents and the
//! records), the agent that runs it, and the plan — start it on an input, answer its pauses, or
//! (`enqueue`) wait for the run that holds the thread.

use crate::error::ApiError;
use crate::modes::Modes;
use crate::records::{self, Entry, ThreadRecord};
use crate::request::{blocking, one_of, valid_thread_id};
use crate::served::{Answer, JsonSnapshot, Served};
use crate::Shared;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::sync::Arc;
use tea_runtime::{Durability, Interrupt, RunOptions, ThreadId};

type ApiResult<T> = Result<T, ApiError>;

/// What a run does.
pub(crate) enum Plan {
    Start {
        input: Value,
    },
    Resume {
        token: String,
        answer: Answer,
        update: Option<Value>,
        entry: Entry,
    },
    /// Continues the thread from where it stands (a run without input on a thread that an
    /// update moved, or whose run stopped part-way): the engine's recover, which refuses a
    /// thread a live run holds.
    Recover,
    /// Waits for the run that holds the thread (the protocol's `enqueue` multitask strategy),
    /// then is planned again, from this request, as if it came then.
    Queued(Box<RunRequest>),
}

/// How a run goes, from its request: the engine's options (durability, recursion limit, the
/// stream modes its events need), its JSON context, and the modes its streams send.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) options: RunOptions,
    pub(crate) context: Option<Value>,
    pub(crate) modes: Modes,
}

impl Settings {
    /// The settings of `request`: `stream_mode`; `durability` (LangGraph's `sync`, `async`,
    /// `exit`: the engine's `EveryStep`, `Buffered`, `OnPause`; `checkpoint_during: false` is
    /// `exit`); `config.recursion_limit`; `context` (also `config.configurable`, LangGraph's
    /// older place for it).
    pub(crate) fn of(request: &RunRequest) -> ApiResult<Settings> {
        let modes = Modes::parse(request.stream_mode.as_ref())?;
        let mut options = RunOptions::new().stream_modes(modes.engine());
        let durability = match (request.durability.as_deref(), request.checkpoint_during) {
            (Some("sync"), _) => Some(Durability::EveryStep),
            (Some("async"), _) => Some(Durability::Buffered),
            (Some("exit"), _) | (None, Some(false)) => Some(Durability::OnPause),
            (Some(other), _) => {
                return Err(ApiError::unprocessable(
                    "bad_request",
                    format!("`durability` must be one of sync, async, exit, not `{other}`"),
                ))
            }
            (None, _) => None,
        };
        if let Some(durability) = durability {
            options = options.durability(durability);
        }
        let config = request.config.as_ref().filter(|c| !c.is_null());
        if let Some(config) = config {
            if !config.is_object() {
                return Err(ApiError::unprocessable(
                    "bad_request",
                    format!("`config` must be an object, not {config}"),
                ));
            }
        }
        if let Some(limit) = config.and_then(|c| c.get("recursion_limit")).filter(|l| !l.is_null()) {
            match limit.as_u64().filter(|l| *l >= 1) {
                Some(limit) => options = options.recursion_limit(usize::try_from(limit).unwrap_or(usize::MAX)),
                None => {
                    return Err(ApiError::unprocessable(
                        "bad_request",
                        format!("`config.recursion_limit` must be a whole number of steps, at least 1, not {limit}"),
                    ))
                }
            }
        }
        let configurable = config
            .and_then(|c| c.get("configurable"))
            .filter(|c| c.as_object().is_some_and(|m| m.keys().any(|k| !k.starts_with("__") && k != "thread_id")));
        let context = request.context.clone().filter(|c| !c.is_null()).or_else(|| configurable.cloned());
        Ok(Settings { options, context, modes })
    }
}

/// A thread as the served agents and the records know it.
pub(crate) struct Located {
    pub(crate) thread: ThreadId,
    pub(crate) agent: Option<Arc<dyn Served>>,
    pub(crate) record: Option<ThreadRecord>,
    pub(crate) snapshot: Option<JsonSnapshot>,
}

pub(crate) fn locate_now(shared: &Shared, thread: &ThreadId) -> ApiResult<Option<Located>> {
    let Some(store) = shared.records() else { return Ok(None) };
    let record = records::read(store, thread)?;
    let named = record.as_ref().and_then(|r| r.agent.as_deref()).and_then(|n| shared.agent(n));
    if let Some(agent) = named {
        let snapshot = agent.state(thread)?;
        return Ok(Some(Located { thread: thread.clone(), agent: Some(agent), record, snapshot }));
    }
    for agent in &shared.agents {
        if let Some(snapshot) = agent.state(thread)? {
            return Ok(Some(Located {
                thread: thread.clone(),
                agent: Some(agent.clone()),
                record,
                snapshot: Some(snapshot),
            }));
        }
    }
    Ok(record.map(|record| Located { thread: thread.clone(), agent: None, record: Some(record), snapshot: None }))
}

/// The thread `id`, or `404`.
pub(crate) async fn locate(shared: &Arc<Shared>, id: &str) -> ApiResult<Located> {
    let thread = ThreadId::from(id);
    let shared2 = shared.clone();
    let t = thread.clone();
    blocking(move || locate_now(&shared2, &t))
        .await?
        .ok_or_else(|| ApiError::not_found(format!("thread `{thread}` not found")))
}

/// A thread's status: `busy` while a run holds it, `interrupted` when it waits on a pause,
/// `idle` when it has not started or has finished (or stands where a state update put it),
/// `error` when its last run failed.
pub(crate) fn status(shared: &Shared, located: &Located) -> &'static str {
    if shared.runs.running(&located.thread) {
        return "busy";
    }
    let failed = located.record.as_ref().is_some_and(|r| r.error.is_some());
    match &located.snapshot {
        None if failed => "error",
        None => "idle",
        Some(s) if s.paused() => "interrupted",
        Some(s) if s.finished() => "idle",
        Some(_) if failed => "error",
        Some(s) if stands(located, s) => "idle",
        Some(_) => "busy",
    }
}

/// Whether the thread stands at `snapshot` because a state update put it there (no run holds it).
fn stands(located: &Located, snapshot: &JsonSnapshot) -> bool {
    located.record.as_ref().and_then(|r| r.updated_to) == Some(snapshot.checkpoint)
}

/// A checkpoint number as the protocol's `checkpoint_id` (a UUID): the number in its last
/// 16 hex digits.
pub(crate) fn checkpoint_uuid(n: u64) -> String {
    format!("00000000-0000-0000-{:04x}-{:012x}", n >> 48, n & 0xffff_ffff_ffff)
}

/// A `checkpoint_id` back to its number (also accepts the bare number).
pub(crate) fn checkpoint_number(id: &str) -> Option<u64> {
    if let Ok(n) = id.parse() {
        return Some(n);
    }
    let rest = id.strip_prefix("00000000-0000-0000-")?;
    let (hi, lo) = rest.split_once('-')?;
    Some(u64::from_str_radix(hi, 16).ok()? << 48 | u64::from_str_radix(lo, 16).ok()?)
}

pub(crate) fn agent_named(shared: &Shared, id: &str) -> ApiResult<Arc<dyn Served>> {
    shared.agent(id).ok_or_else(|| ApiError::not_found(format!("agent `{id}` not found")))
}

/// The agent a run request names: by `agent_id` (the protocol) or `assistant_id` (LangGraph,
/// whose assistant ids here are the graphs' names); `404` for one not served, `422` when the
/// two name different agents.
fn named_agent(shared: &Shared, request: &RunRequest) -> ApiResult<Option<Arc<dyn Served>>> {
    match (request.agent_id.as_deref(), request.assistant_id.as_deref()) {
        (Some(a), Some(b)) if a != b => Err(ApiError::unprocessable(
            "bad_request",
            format!("`agent_id` `{a}` and `assistant_id` `{b}` name different agents: name one"),
        )),
        (Some(id), _) => agent_named(shared, id).map(Some),
        (None, Some(id)) => {
            shared.agent(id).map(Some).ok_or_else(|| ApiError::not_found(format!("assistant `{id}` not found")))
        }
        (None, None) => Ok(None),
    }
}

#[derive(Serialize, Deserialize, Default, Clone)]
pub(crate) struct RunCommand {
    #[serde(default)]
    pub(crate) resume: Option<Value>,
    #[serde(default)]
    pub(crate) update: Option<Value>,
    #[serde(default)]
    pub(crate) goto: Option<Value>,
}

/// The body of a run request: the protocol's `RunCreate` / `RunStream`, with LangGraph
/// Server's `command` (answers to pauses) and `checkpoint_id` (the pause being answered).
#[derive(Serialize, Deserialize, Default, Clone)]
pub(crate) struct RunRequest {
    pub(crate) thread_id: Option<String>,
    pub(crate) agent_id: Option<String>,
    /// LangGraph's name for the agent: its assistant, whose id here is the graph's name.
    pub(crate) assistant_id: Option<String>,
    /// LangGraph's run context (what nodes read with `Ctx::context`).
    pub(crate) context: Option<Value>,
    /// LangGraph's durability: `sync`, `async`, `exit`.
    pub(crate) durability: Option<String>,
    /// LangGraph's older form of `durability: exit` (`false`).
    pub(crate) checkpoint_during: Option<bool>,
    /// LangGraph's breakpoints of one run: tea's breakpoints are the graph's own.
    pub(crate) interrupt_before: Option<Value>,
    pub(crate) interrupt_after: Option<Value>,
    /// LangGraph's delayed start.
    pub(crate) after_seconds: Option<f64>,
    /// LangGraph's subgraph streaming (tea streams a child graph's steps under their path).
    pub(crate) stream_subgraphs: Option<bool>,
    /// LangGraph's resumable streams: every stream here is (events carry ids).
    pub(crate) stream_resumable: Option<bool>,
    /// LangGraph's resume checks: tea's are always strict.
    pub(crate) strict_resume: Option<bool>,
    /// LangGraph's per-run tracing, and its feedback keys: LangSmith's, not served here.
    pub(crate) langsmith_tracer: Option<Value>,
    pub(crate) feedback_keys: Option<Value>,
    pub(crate) input: Option<Value>,
    pub(crate) metadata: Option<Map<String, Value>>,
    pub(crate) config: Option<Value>,
    pub(crate) on_completion: Option<String>,
    pub(crate) on_disconnect: Option<String>,
    pub(crate) if_not_exists: Option<String>,
    pub(crate) stream_mode: Option<Value>,
    pub(crate) webhook: Option<String>,
    pub(crate) multitask_strategy: Option<String>,
    pub(crate) command: Option<RunCommand>,
    pub(crate) checkpoint_id: Option<String>,
    pub(crate) checkpoint: Option<Value>,
}

/// The answers of `resume` for the pending `interrupts`.
pub(crate) fn answers(thread: &ThreadId, resume: Option<Value>, interrupts: &[Interrupt]) -> ApiResult<Answer> {
    let asks: Vec<&Interrupt> = interrupts.iter().filter(|i| i.needs_answer()).collect();
    let Some(resume) = resume.filter(|v| !v.is_null()) else {
        if asks.is_empty() {
            return Ok(Answer::None);
        }
        let ids: Vec<&str> = asks.iter().map(|i| i.id()).collect();
        return Err(ApiError::unprocessable(
            "answer_missing",
            format!("thread `{thread}` waits on an answer to {}: send it as `command.resume`", ids.join(", ")),
        ));
    };
    if let Value::Object(map) = &resume {
        if !map.is_empty() && map.keys().all(|k| interrupts.iter().any(|i| i.id() == k)) {
            return Ok(Answer::Keyed(map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()));
        }
        // Keyed by pause ids, one of which is not waiting (answered already, or never there):
        // refused, never taken whole as the answer to whatever pause waits now.
        if !map.is_empty() && map.keys().all(|k| looks_like_pause_id(k)) {
            let gone: Vec<&str> =
                map.keys().map(String::as_str).filter(|k| !interrupts.iter().any(|i| i.id() == *k)).collect();
            let waiting: Vec<&str> = asks.iter().map(|i| i.id()).collect();
            return Err(ApiError::conflict(
                "stale_resume",
                format!(
                    "thread `{thread}` has no pause {} waiting for an answer (waiting: {})",
                    gone.join(", "),
                    if waiting.is_empty() { String::from("none") } else { waiting.join(", ") }
                ),
            ));
        }
    }
    match asks.len() {
        0 => Ok(Answer::None),
        1 => Ok(Answer::One(resume)),
        _ => {
            let ids: Vec<&str> = asks.iter().map(|i| i.id()).collect();
            Err(ApiError::unprocessable(
                "answer_ambiguous",
                format!(
                    "thread `{thread}` waits on {} pauses ({}): key the answers by interrupt id in `command.resume`",
                    ids.len(),
                    ids.join(", ")
                ),
            ))
        }
    }
}

/// Whether `key` has the shape of a pause's id: a node's name (with its subgraph path), `#`,
/// the pause's number in that node, and for a pause in a parallel branch `@` and the branch
/// (`ask#0`, `research/ask#1`, `review#0@check#2`).
fn looks_like_pause_id(key: &str) -> bool {
    let own = key.split_once('@').map_or(key, |(own, _)| own);
    match own.rsplit_once('#') {
        Some((node, number)) => !node.is_empty() && !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()),
        None => false,
    }
}

/// A run ready to launch.
pub(crate) struct Prepared {
    pub(crate) agent: Arc<dyn Served>,
    pub(crate) thread: ThreadId,
    pub(crate) plan: Plan,
    pub(crate) delete_after: bool,
    /// The request's fields the protocol's `Run` echoes.
    pub(crate) echo: Map<String, Value>,
    pub(crate) cancel_on_disconnect: bool,
    pub(crate) settings: Settings,
    /// The request, kept with the run's claim (`queue.rs`) so that another replica can run it.
    pub(crate) request: Value,
    /// The thread's head when the run was planned.
    pub(crate) from: Option<u64>,
}

impl Prepared {
    /// Keeps the thread when the run finishes, even for a run that named no thread.
    pub(crate) fn keep(&mut self) {
        self.delete_after = false;
    }

    /// The agent, the plan and whether the thread goes when the run ends.
    pub(crate) fn parts(self) -> (Arc<dyn Served>, Plan, bool) {
        (self.agent, self.plan, self.delete_after)
    }
}

/// How long a request waits for the run that holds its thread to let it go, once that run has
/// stopped and is writing its records (milliseconds, as a rule).
const STOPPING_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Checks a run request against the thread it names and decides what the run does.
pub(crate) async fn prepare(
    shared: &Arc<Shared>,
    path_thread: Option<String>,
    request: RunRequest,
) -> ApiResult<Prepared> {
    prepare_run(shared, path_thread, request, false).await
}

/// [`prepare`] for a queued run whose turn has come: it holds `thread` already.
pub(crate) async fn prepare_held(shared: &Arc<Shared>, thread: String, request: RunRequest) -> ApiResult<Prepared> {
    prepare_run(shared, Some(thread), request, true).await
}

async fn prepare_run(
    shared: &Arc<Shared>,
    path_thread: Option<String>,
    request: RunRequest,
    holding: bool,
) -> ApiResult<Prepared> {
    one_of("on_completion", &request.on_completion, &["delete", "keep"])?;
    one_of("on_disconnect", &request.on_disconnect, &["cancel", "continue"])?;
    one_of("if_not_exists", &request.if_not_exists, &["create", "reject"])?;
    one_of("multitask_strategy", &request.multitask_strategy, &["reject", "enqueue"])?;
    let settings = Settings::of(&request)?;
    let kept = serde_json::to_value(&request).map_err(|e| ApiError::internal(e.to_string()))?;
    let unsupported = |what: &str| Err(ApiError::unprocessable("unsupported", what.to_owned()));
    let given = |v: &Option<Value>| v.as_ref().is_some_and(|v| !v.is_null() && v != &json!([]));
    if given(&request.interrupt_before) || given(&request.interrupt_after) {
        return unsupported(
            "`interrupt_before` / `interrupt_after` per run are not supported: a graph's breakpoints are its own (`interrupt_before:` in YAML)",
        );
    }
    if request.after_seconds.is_some_and(|s| s > 0.0) {
        return unsupported("`after_seconds` is not supported: runs start at once");
    }
    if given(&request.langsmith_tracer) || given(&request.feedback_keys) {
        return unsupported("LangSmith tracing and feedback keys are not supported by this server");
    }
    // Accepted as they are: every stream here is resumable, a child graph's steps stream under
    // their path, and every resume is checked strictly.
    let _ = (request.stream_subgraphs, request.stream_resumable, request.strict_resume);
    // Kept whole for a run that may wait its turn: it is planned again when the turn comes.
    let queueable = (request.multitask_strategy.as_deref() == Some("enqueue")).then(|| request.clone());
    if request.webhook.is_some() {
        return Err(ApiError::unprocessable("unsupported", "webhooks are not supported by this server"));
    }
    if request.command.as_ref().is_some_and(|c| c.goto.is_some()) {
        return Err(ApiError::unprocessable(
            "unsupported",
            "`command.goto` is not supported: a node routes with its graph's edges",
        ));
    }
    let mut echo = Map::new();
    for (key, value) in [
        ("input", request.input.clone()),
        ("metadata", request.metadata.clone().map(Value::Object)),
        ("config", request.config.clone()),
        ("on_completion", request.on_completion.clone().map(Value::String)),
        ("on_disconnect", request.on_disconnect.clone().map(Value::String)),
        ("if_not_exists", request.if_not_exists.clone().map(Value::String)),
        ("stream_mode", request.stream_mode.clone()),
        ("multitask_strategy", request.multitask_strategy.clone().map(Value::String)),
    ] {
        if let Some(value) = value {
            echo.insert(key.into(), value);
        }
    }
    let named = path_thread.or(request.thread_id.clone());
    let stateless = named.is_none();
    let thread = match &named {
        Some(id) => valid_thread_id(id)?,
        None => ThreadId::random(),
    };
    let wanted = named_agent(shared, &request)?;
    if !holding && !stateless {
        // The run holding the thread has stopped (it announced its pause, or its end) and only
        // writes its records before it lets the thread go: a client that answers the moment it
        // hears of the pause waits for that, rather than being told the thread is busy.
        if let Some(run) = shared.runs.stopping(&thread) {
            let _ = tokio::time::timeout(STOPPING_WAIT, run.finished()).await;
        }
    }
    let located = if stateless {
        None
    } else {
        let s = shared.clone();
        let t = thread.clone();
        blocking(move || locate_now(&s, &t)).await?
    };
    if located.is_none() && !stateless && request.if_not_exists.as_deref() != Some("create") {
        return Err(ApiError::not_found(format!(
            "thread `{thread}` not found (create it, or send `if_not_exists: create`)"
        )));
    }
    let owner = located.as_ref().and_then(|l| l.agent.clone());
    let agent = match (owner, wanted) {
        (Some(owner), Some(wanted)) if owner.name() != wanted.name() => {
            return Err(ApiError::conflict(
                "agent_mismatch",
                format!("thread `{thread}` runs agent `{}`, not `{}`", owner.name(), wanted.name()),
            ))
        }
        (Some(agent), _) | (None, Some(agent)) => agent,
        (None, None) if shared.agents.len() == 1 => shared.agents[0].clone(),
        (None, None) if shared.agents.is_empty() => return Err(ApiError::not_found("this server serves no agent")),
        (None, None) => {
            return Err(ApiError::unprocessable(
                "agent_missing",
                "this server serves several agents: name one with `agent_id`",
            ))
        }
    };
    let cancel_on_disconnect = request.on_disconnect.as_deref() != Some("continue");
    let delete_after = match request.on_completion.as_deref() {
        Some("delete") => true,
        Some(_) => false,
        None => stateless,
    };
    if !holding && shared.runs.held(&thread) {
        if let Some(request) = queueable {
            let plan = Plan::Queued(Box::new(request));
            return Ok(Prepared {
                agent,
                thread,
                plan,
                delete_after,
                echo,
                cancel_on_disconnect,
                settings,
                request: kept,
                from: None,
            });
        }
        return Err(ApiError::conflict(
            "thread_busy",
            format!(
                "thread `{thread}` is running; a thread takes one run at a time (send `multitask_strategy: enqueue` to wait)"
            ),
        ));
    }
    // Mid-run without a failed run, nor an update that put it there: a run of another replica
    // (or one that crashed) holds it.
    let failed = located.as_ref().and_then(|l| l.record.as_ref()).is_some_and(|r| r.error.is_some());
    let standing = located.as_ref().is_some_and(|l| l.snapshot.as_ref().is_some_and(|s| stands(l, s)));
    let elsewhere = !failed
        && !standing
        && located.as_ref().and_then(|l| l.snapshot.as_ref()).is_some_and(|s| !s.paused() && !s.finished());
    if elsewhere {
        if let (false, Some(request)) = (holding, queueable) {
            let plan = Plan::Queued(Box::new(request));
            return Ok(Prepared {
                agent,
                thread,
                plan,
                delete_after,
                echo,
                cancel_on_disconnect,
                settings,
                request: kept,
                from: None,
            });
        }
        return Err(ApiError::conflict(
            "thread_busy",
            format!("thread `{thread}` is running on another server; a thread takes one run at a time"),
        ));
    }
    let snapshot = located.as_ref().and_then(|l| l.snapshot.clone());
    let from = snapshot.as_ref().map(|s| s.checkpoint);
    let status = located.as_ref().map_or("idle", |l| status(shared, l));
    let plan = if let Some(command) = request.command {
        let Some(snapshot) = snapshot.filter(JsonSnapshot::paused) else {
            return Err(ApiError::conflict(
                "not_paused",
                format!("thread `{thread}` is not paused (it is {status}): there is nothing to answer"),
            ));
        };
        let pinned = request.checkpoint_id.clone().or_else(|| {
            request.checkpoint.as_ref().and_then(|c| c.get("checkpoint_id")).and_then(Value::as_str).map(str::to_owned)
        });
        if let Some(pinned) = pinned {
            let number = checkpoint_number(&pinned).ok_or_else(|| {
                ApiError::unprocessable("bad_request", format!("`checkpoint_id` is not a checkpoint id: {pinned}"))
            })?;
            if number != snapshot.checkpoint {
                return Err(ApiError::conflict(
                    "stale_resume",
                    format!(
                        "thread `{thread}` has moved on since checkpoint {number} (it is at checkpoint {}): that pause was answered already",
                        snapshot.checkpoint
                    ),
                ));
            }
        }
        let answer = answers(&thread, command.resume.clone(), &snapshot.interrupts)?;
        let recorded = located.as_ref().and_then(|l| l.record.as_ref()).and_then(|r| r.pause.clone());
        let token = match recorded.filter(|p| p.checkpoint == snapshot.checkpoint) {
            Some(pause) => pause.token,
            None => crate::served::token(agent.clone(), thread.clone()).await?.ok_or_else(|| {
                ApiError::conflict("not_paused", format!("thread `{thread}` has finished: there is nothing to answer"))
            })?,
        };
        let node = snapshot.interrupts.first().map(|i| i.node().as_str().to_owned());
        let entry = Entry::new("answer", node, json!({ "resume": command.resume, "update": command.update }));
        Plan::Resume { token, answer, update: command.update, entry }
    } else {
        // A run from a past checkpoint (LangGraph's replay) is a fork here: refused, not ignored.
        let pinned = request.checkpoint_id.clone().or_else(|| {
            request.checkpoint.as_ref().and_then(|c| c.get("checkpoint_id")).and_then(Value::as_str).map(str::to_owned)
        });
        if let Some(pinned) = pinned {
            let head = snapshot.as_ref().map(|s| s.checkpoint);
            if checkpoint_number(&pinned).is_none_or(|n| Some(n) != head) {
                return Err(ApiError::unprocessable(
                    "unsupported",
                    format!(
                        "a run from checkpoint `{pinned}` of thread `{thread}` is not supported: a run goes on from the thread's head"
                    ),
                ));
            }
        }
        match &snapshot {
            None => {}
            Some(s) if s.paused() => {
                let ids: Vec<&str> = s.interrupts.iter().map(|i| i.id()).collect();
                return Err(ApiError::conflict(
                    "thread_paused",
                    format!("thread `{thread}` waits on {}: answer it with `command.resume`", ids.join(", ")),
                ));
            }
            Some(s) if s.finished() => {
                return Err(ApiError::conflict(
                    "thread_finished",
                    format!("thread `{thread}` has finished; a thread runs its graph once: start a new thread"),
                ))
            }
            // Standing where an update (or a failed run) left it: a run without input goes on.
            Some(s) if standing || failed => {
                let empty = request.input.as_ref().is_none_or(|i| i.is_null() || i == &json!({}));
                if !empty {
                    return Err(ApiError::conflict(
                        "thread_started",
                        format!(
                            "thread `{thread}` stands before {}: send a run without `input` to go on from there",
                            s.next.join(", ")
                        ),
                    ));
                }
                return Ok(Prepared {
                    agent,
                    thread,
                    plan: Plan::Recover,
                    delete_after,
                    echo,
                    cancel_on_disconnect,
                    settings,
                    request: kept,
                    from,
                });
            }
            Some(_) => {
                return Err(ApiError::conflict(
                    "thread_busy",
                    format!("thread `{thread}` is {status}: a thread takes one run at a time"),
                ))
            }
        }
        let input = request.input.clone().unwrap_or_else(|| json!({}));
        if !input.is_object() {
            return Err(ApiError::unprocessable(
                "bad_input",
                format!("the input of agent `{}` must be a JSON object of state keys, not {input}", agent.name()),
            ));
        }
        Plan::Start { input }
    };
    Ok(Prepared { agent, thread, plan, delete_after, echo, cancel_on_disconnect, settings, request: kept, from })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pause_ids_are_told_from_other_keys() {
        for id in ["ask#0", "research/ask#12", "review#0@check#2"] {
            assert!(looks_like_pause_id(id), "{id}");
        }
        for key in ["approved", "#0", "ask#", "ask#x", "note#1a", ""] {
            assert!(!looks_like_pause_id(key), "{key}");
        }
    }

    #[test]
    fn an_answer_keyed_to_a_pause_that_is_not_waiting_is_refused_not_given_to_another() {
        let thread = ThreadId::from("t");
        let waiting: Interrupt =
            serde_json::from_value(json!({"id": "ask2#0", "node": "ask2", "kind": "ask"})).unwrap();
        let refused = answers(&thread, Some(json!({"ask1#0": "yes"})), std::slice::from_ref(&waiting)).unwrap_err();
        assert_eq!((refused.status, refused.code), (axum::http::StatusCode::CONFLICT, "stale_resume"));
        assert!(refused.message.contains("ask1#0") && refused.message.contains("ask2#0"), "{}", refused.message);
        // Keyed to the waiting pause: its answer; a plain object: the answer to the one pause.
        assert!(matches!(
            answers(&thread, Some(json!({"ask2#0": "yes"})), std::slice::from_ref(&waiting)),
            Ok(Answer::Keyed(_))
        ));
        assert!(matches!(
            answers(&thread, Some(json!({"approved": true})), std::slice::from_ref(&waiting)),
            Ok(Answer::One(_))
        ));
    }
}
