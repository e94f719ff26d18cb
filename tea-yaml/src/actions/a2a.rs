//! The Edge Agent's agent-to-agent actions (`a2a.*`): messages, delegation, shared state and
//! discovery between agents running in the same process.
//!
//! # Transport
//!
//! One process-wide hub, as The Edge Agent's (both its engines keep one global bus, not one per
//! run), holds, under one lock with one condition variable that wakes every waiter when
//! something arrives:
//!
//! - an inbox per (namespace, agent id): a FIFO of at most 100 messages (The Edge Agent's Rust
//!   engine's channel capacity). Sending to a full inbox is an error naming the agent; a
//!   broadcast skips full inboxes and lists them in `a2a_broadcast_full`. Sending to an agent
//!   nobody registered queues the message for it, as in both engines. Messages with a `ttl`
//!   (seconds) are dropped once expired. The inbox `*` is shared: `a2a.send` to `*` queues a
//!   message that the first `a2a.receive` of that namespace to match takes (as in the Python
//!   engine);
//! - a shared key-value store per namespace: values with a version (1 on the first write, one
//!   more on each write), an optional time to live, compare-and-swap and delete;
//! - a discovery registry per namespace: agent id, capabilities, type, status, metadata,
//!   registration time and last heartbeat. `a2a.register` puts an agent there (again: replaces
//!   it) and makes it a broadcast recipient; `a2a.unregister` takes it out (its inbox stays).
//!
//! # Who is calling
//!
//! An action runs as agent `agent_id` of namespace `namespace`, each the first of: the action's
//! `with:` key; the state's `_a2a.agent_id` / `_a2a.namespace` (the Python engine's runtime
//! configuration); the state's `_agent_id` / `_namespace` (which `a2a.register` returns, so
//! they stick for the rest of a run, and which an invocation's input can set, so one file can
//! run as several agents); the file's `settings.a2a` ([`A2aSettings`], default `default-agent`
//! in `default` as the Python engine). Neither engine of The Edge Agent actually reads
//! `settings.a2a` (the Rust one needs `_settings` in `with:`, the Python one `settings` in the
//! state), so every agent there is the default one unless a node says otherwise; tea honours the
//! file's settings, which is what the files and the documentation mean. The Python engine puts
//! the configuration before the state keys; tea puts the state first, so that an
//! `a2a.register` with an `agent_id:` keeps acting as that agent.
//!
//! # Dialect
//!
//! The Edge Agent's two engines disagree on argument names and results; the corpus (and the
//! documentation) is written for the Python engine, so tea takes its contract: flat `a2a_*`
//! result keys to merge into the state (`a2a_messages`, `a2a_broadcast_count`, `a2a_agents`,
//! `a2a_delegation_result`, ...), `timeout` as a duration (a number of seconds, or `"30s"`,
//! `"500ms"`, `"5m"`, `"1h"`, `"1m 30s"`), `task`, `agent_type_filter`, `capability`, `ttl`,
//! `expected_version`. The Rust engine's names are accepted too where they add something:
//! `timeout_ms`, `request` (delegate), `agent_type` and `exclude_self` (broadcast),
//! `capabilities` and `mode` (discover), `ttl_seconds`, `max_retries`, and its
//! `a2a.state.cas` and `a2a.state.delete` (which the Python engine lacks); giving both names of
//! one thing (`timeout` and `timeout_ms`, `task` and `request`, ...) is an error. The results
//! of the Rust-only actions follow the Python style (`a2a_state_updated`,
//! `a2a_state_previous`, `a2a_state_version`, `a2a_state_deleted`). Every bad argument is an
//! error naming the action and the argument.
//!
//! # Differences from The Edge Agent
//!
//! - `a2a.receive` takes every waiting message of the caller (and of `*`) that passes its
//!   `from` (sender) and `type` filters, returning as soon as there is one, or `[]` when its
//!   `timeout` (default 0: no wait) runs out. Messages that do not match stay queued, as in the
//!   Python engine; the Rust engine consumes and drops them, and its `from` reads the listed
//!   agents' own inboxes instead of filtering by sender. With `require_all` and `from`, nothing
//!   is taken until a message of every listed sender is there; at the timeout the result is
//!   `a2a_messages: []`, `a2a_timeout: true` and `a2a_error`, and the messages that did come
//!   stay queued (the Python engine loses them).
//! - `a2a.broadcast` reaches the agents registered in the namespace (optionally of one type),
//!   except the sender unless `exclude_self: false`, and `a2a_broadcast_count` is how many
//!   inboxes really got it (the Rust engine reports the namespace's size less one).
//! - `a2a.delegate` sends the task (its `type` is the message type, its other keys the payload,
//!   as in the Python engine; a Rust-style `request` gives its `type` and its `payload` or
//!   itself) with a fresh correlation id, then waits up to `timeout` (default 60 s) for a
//!   message to the caller with that correlation id, from any sender; other messages stay
//!   queued (both engines drop them). A reply gives `a2a_delegation_result` (its payload) and
//!   `a2a_delegation_success: true`. If none comes, the request, if still unread, is withdrawn
//!   from the recipient's inbox (so requests to an absent agent do not pile up), and then, per
//!   `on_timeout`:
//!   - `raise` (default): an error, as the Rust engine and the strategy's name say (the
//!     Python engine returns `a2a_delegation_timeout: true` and `a2a_error` instead);
//!   - `retry`: the request is sent again, up to `max_retries` more times (default 0), each
//!     waiting the full timeout; then `a2a_delegation_timeout: true, a2a_should_retry: true`
//!     as in the Python engine, for the workflow to decide;
//!   - `fallback_local`: `fallback` is needed. If it is an action (`{action: NAME, with:
//!     {...}}`, as the Python engine's), this module cannot run it: the result is
//!     `a2a_delegation_result: null, a2a_delegation_success: false,
//!     a2a_delegation_fallback: true` plus [`FALLBACK_PENDING`]`: {action, with}`. The caller
//!     (the loader's node) must then take it out with [`take_fallback`], run that action on the
//!     current state with those `with:` arguments (already rendered with the delegate's, so not
//!     to be rendered again), and put its result in `a2a_delegation_result`
//!     ([`fallback_done`]); if the action fails, the node fails, as in the Python engine. Any
//!     other `fallback` value is the local result itself (the Rust engine's reading).
//!
//!   Any other `on_timeout` is an error before anything is sent.
//! - `a2a.discover`, as the Python engine, lists the registered agents that had a heartbeat (or
//!   registered) within the last 60 s, sorted by id, with `capability` (one) and
//!   `capabilities` (all of them), `agent_type`, `status` and `mode` (`static`, `dynamic`,
//!   `all`) filters.
//! - Waits are capped at one hour.
//!
//! The Edge Agent's `a2a.*` (send, receive, broadcast, delegate, shared state, discovery) between
//! the agents of one process: a process-wide hub of bounded inboxes per (namespace, agent), a
//! versioned key-value store and a registry per namespace, a condition variable for waits.
//! `settings.a2a` names the agent (`actions::RunningAgent::a2a`); a delegation that times out hands
//! its `fallback` action back to `actions/registry.rs`, which runs it (resolved at load).

use serde_json::{json, Map, Value};
use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt::Display;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tea_runtime::BoxError;

/// How many messages an inbox holds (The Edge Agent's Rust engine's channel capacity).
const INBOX_CAPACITY: usize = 100;
/// The longest a `receive` or `delegate` waits, whatever its `timeout`.
const MAX_WAIT: Duration = Duration::from_secs(3600);
/// How long after its last heartbeat an agent still shows in `a2a.discover` (as the Python engine).
const STALE_AFTER: Duration = Duration::from_secs(60);
/// The namespace-wide inbox (`a2a.send` to `*`), which every `a2a.receive` also reads.
const SHARED_INBOX: &str = "*";
/// The delegate's default wait.
const DELEGATE_TIMEOUT: Duration = Duration::from_secs(60);

/// The key of an `a2a.delegate` result asking its caller to run a fallback action:
/// `{action: NAME, with: {...}}` (see the module documentation, [`take_fallback`]).
pub(crate) const FALLBACK_PENDING: &str = "a2a_fallback_pending";

/// One of the `a2a.*` actions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum A2a {
    /// `a2a.send`: a message to one agent.
    Send,
    /// `a2a.receive`: the caller's waiting messages, filtered, waiting up to a timeout.
    Receive,
    /// `a2a.broadcast`: a message to every registered agent of the namespace.
    Broadcast,
    /// `a2a.delegate`: a request and a wait for its reply.
    Delegate,
    /// `a2a.state.get`: a value of the namespace's shared state.
    StateGet,
    /// `a2a.state.set`: sets a value of the shared state (optionally if its version is as expected).
    StateSet,
    /// `a2a.state.cas`: compare-and-swap on the shared state (The Edge Agent's Rust engine).
    StateCas,
    /// `a2a.state.delete`: deletes a key of the shared state (The Edge Agent's Rust engine).
    StateDelete,
    /// `a2a.discover`: the registered agents, filtered.
    Discover,
    /// `a2a.register`: registers the caller (or `agent_id`) for discovery and broadcasts.
    Register,
    /// `a2a.unregister`: takes an agent out of discovery and broadcasts.
    Unregister,
    /// `a2a.heartbeat`: refreshes an agent's last-seen time.
    Heartbeat,
}

impl A2a {
    /// Every action (the tests go through them all).
    #[cfg(test)]
    pub(crate) const ALL: [A2a; 12] = [
        A2a::Send,
        A2a::Receive,
        A2a::Broadcast,
        A2a::Delegate,
        A2a::StateGet,
        A2a::StateSet,
        A2a::StateCas,
        A2a::StateDelete,
        A2a::Discover,
        A2a::Register,
        A2a::Unregister,
        A2a::Heartbeat,
    ];

    /// The action named `name`: `a2a.send` and the like, or the `actions.a2a_send`-style alias
    /// The Edge Agent registers (the Python engine's; `a2a.state.cas` and `a2a.state.delete`,
    /// which only the Rust engine has, have none there either).
    pub(crate) fn named(name: &str) -> Option<A2a> {
        Some(match name {
            "a2a.send" | "actions.a2a_send" => A2a::Send,
            "a2a.receive" | "actions.a2a_receive" => A2a::Receive,
            "a2a.broadcast" | "actions.a2a_broadcast" => A2a::Broadcast,
            "a2a.delegate" | "actions.a2a_delegate" => A2a::Delegate,
            "a2a.state.get" | "actions.a2a_state_get" => A2a::StateGet,
            "a2a.state.set" | "actions.a2a_state_set" => A2a::StateSet,
            "a2a.state.cas" => A2a::StateCas,
            "a2a.state.delete" => A2a::StateDelete,
            "a2a.discover" | "actions.a2a_discover" => A2a::Discover,
            "a2a.register" | "actions.a2a_register" => A2a::Register,
            "a2a.unregister" | "actions.a2a_unregister" => A2a::Unregister,
            "a2a.heartbeat" | "actions.a2a_heartbeat" => A2a::Heartbeat,
            _ => return None,
        })
    }

    /// Its name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            A2a::Send => "a2a.send",
            A2a::Receive => "a2a.receive",
            A2a::Broadcast => "a2a.broadcast",
            A2a::Delegate => "a2a.delegate",
            A2a::StateGet => "a2a.state.get",
            A2a::StateSet => "a2a.state.set",
            A2a::StateCas => "a2a.state.cas",
            A2a::StateDelete => "a2a.state.delete",
            A2a::Discover => "a2a.discover",
            A2a::Register => "a2a.register",
            A2a::Unregister => "a2a.unregister",
            A2a::Heartbeat => "a2a.heartbeat",
        }
    }

    /// The arguments it takes (its `with:` keys: the Python engine's and the Rust engine's);
    /// the required ones first, `required()` of them.
    pub(crate) fn keys(self) -> &'static [&'static str] {
        match self {
            A2a::Send => &["to", "message", "confirm", "correlation_id", "ttl", "agent_id", "namespace"],
            A2a::Receive => {
                &["from", "from_agents", "type", "timeout", "timeout_ms", "require_all", "agent_id", "namespace"]
            }
            A2a::Broadcast => {
                &["message", "agent_type_filter", "agent_type", "exclude_self", "ttl", "agent_id", "namespace"]
            }
            A2a::Delegate => &[
                "to",
                "task",
                "request",
                "timeout",
                "timeout_ms",
                "on_timeout",
                "fallback",
                "max_retries",
                "agent_id",
                "namespace",
            ],
            A2a::StateGet => &["key", "default", "namespace"],
            A2a::StateSet => &["key", "value", "ttl", "ttl_seconds", "expected_version", "namespace"],
            A2a::StateCas => &["key", "new_value", "expected", "ttl", "ttl_seconds", "namespace"],
            A2a::StateDelete => &["key", "expected_version", "namespace"],
            A2a::Discover => &["capability", "capabilities", "agent_type", "status", "mode", "namespace"],
            A2a::Register => &["agent_id", "capabilities", "agent_type", "metadata", "mode", "namespace"],
            A2a::Unregister | A2a::Heartbeat => &["agent_id", "namespace"],
        }
    }

    /// How many of `keys()` (the first ones) are required. (`a2a.delegate` also needs one of
    /// `task` and `request`, which `call` checks.)
    pub(crate) fn required(self) -> usize {
        match self {
            A2a::Send | A2a::StateSet | A2a::StateCas => 2,
            A2a::Broadcast | A2a::Delegate | A2a::StateGet | A2a::StateDelete => 1,
            A2a::Receive | A2a::Discover | A2a::Register | A2a::Unregister | A2a::Heartbeat => 0,
        }
    }
}

/// The file's `settings.a2a`: who its agent is. An empty field means the default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct A2aSettings {
    /// `settings.a2a.agent_id` (default `default-agent`, as The Edge Agent's Python engine).
    pub(crate) agent_id: String,
    /// `settings.a2a.namespace` (default `default`).
    pub(crate) namespace: String,
}

impl Default for A2aSettings {
    fn default() -> Self {
        A2aSettings { agent_id: "default-agent".to_owned(), namespace: "default".to_owned() }
    }
}

/// Takes out of an `a2a.delegate` result the fallback action it asks its caller to run:
/// (action name, its `with:` arguments, already rendered). The caller runs it on the current
/// state and stores its result with [`fallback_done`]. `None` if the result asks for nothing.
pub(crate) fn take_fallback(result: &mut Value) -> Option<(String, Value)> {
    let pending = result.as_object_mut()?.remove(FALLBACK_PENDING)?;
    let action = pending.get("action")?.as_str()?.to_owned();
    let with = pending.get("with").cloned().unwrap_or_else(|| json!({}));
    Some((action, with))
}

/// Puts the fallback action's `output` into an `a2a.delegate` result (`a2a_delegation_result`).
pub(crate) fn fallback_done(result: &mut Value, output: Value) {
    if let Some(map) = result.as_object_mut() {
        map.insert("a2a_delegation_result".to_owned(), output);
    }
}

/// Runs action `op` with its rendered `args` (a mapping, or null for none) as the agent that
/// `state` and `settings` name (see the module documentation); the result is a mapping of
/// `a2a_*` keys to merge into the state.
pub(crate) fn call(
    op: A2a,
    args: &Value,
    state: &Map<String, Value>,
    settings: &A2aSettings,
) -> Result<Value, BoxError> {
    let w = With::new(op, args)?;
    match op {
        A2a::Send => send(&w, &caller(&w, state, settings)?),
        A2a::Receive => receive(&w, &caller(&w, state, settings)?),
        A2a::Broadcast => broadcast(&w, &caller(&w, state, settings)?),
        A2a::Delegate => delegate(&w, &caller(&w, state, settings)?),
        A2a::StateGet => state_get(&w, &namespace(&w, state, settings)?),
        A2a::StateSet => state_set(&w, &namespace(&w, state, settings)?),
        A2a::StateCas => state_cas(&w, &namespace(&w, state, settings)?),
        A2a::StateDelete => state_delete(&w, &namespace(&w, state, settings)?),
        A2a::Discover => discover(&w, &namespace(&w, state, settings)?),
        A2a::Register => register(&w, &caller(&w, state, settings)?),
        A2a::Unregister => unregister(&w, &caller(&w, state, settings)?),
        A2a::Heartbeat => heartbeat(&w, &caller(&w, state, settings)?),
    }
}

// ---------------------------------------------------------------------------------------------
// Arguments
// ---------------------------------------------------------------------------------------------

/// An action's `with:` arguments, read with errors that name the action and the argument.
struct With<'a> {
    op: A2a,
    map: Option<&'a Map<String, Value>>,
}

impl<'a> With<'a> {
    fn new(op: A2a, args: &'a Value) -> Result<Self, BoxError> {
        match args {
            Value::Null => Ok(With { op, map: None }),
            Value::Object(map) => Ok(With { op, map: Some(map) }),
            other => {
                Err(format!("{}: its arguments (`with:`) must be a mapping, not {}", op.name(), shown(other)).into())
            }
        }
    }

    /// Argument `key`, if given (null counts as not given).
    fn get(&self, key: &str) -> Option<&'a Value> {
        self.raw(key).filter(|v| !v.is_null())
    }

    /// Argument `key` as given, null included.
    fn raw(&self, key: &str) -> Option<&'a Value> {
        self.map.and_then(|m| m.get(key))
    }

    fn fail(&self, message: impl Display) -> BoxError {
        format!("{}: {message}", self.op.name()).into()
    }

    fn bad(&self, key: &str, want: &str, got: &Value) -> BoxError {
        self.fail(format_args!("`{key}` must be {want}, not {}", shown(got)))
    }

    fn missing(&self, key: &str) -> BoxError {
        self.fail(format_args!("`{key}` is required"))
    }

    /// A string argument.
    fn text(&self, key: &str) -> Result<Option<&'a str>, BoxError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(self.bad(key, "a string", other)),
        }
    }

    /// A non-empty string argument (an agent id, a key).
    fn id(&self, key: &str) -> Result<Option<&'a str>, BoxError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) if !s.is_empty() => Ok(Some(s)),
            Some(other) => Err(self.bad(key, "a non-empty string", other)),
        }
    }

    fn need_id(&self, key: &str) -> Result<&'a str, BoxError> {
        self.id(key)?.ok_or_else(|| self.missing(key))
    }

    /// A true/false argument (also `"true"`/`"false"`, as a template renders them).
    fn flag(&self, key: &str, default: bool) -> Result<bool, BoxError> {
        match self.get(key) {
            None => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(Value::String(s)) if s == "true" || s == "false" => Ok(s == "true"),
            Some(other) => Err(self.bad(key, "true or false", other)),
        }
    }

    /// A whole number ≥ 0 (also as a string of digits, as a template renders it).
    fn whole(&self, key: &str) -> Result<Option<u64>, BoxError> {
        let Some(value) = self.get(key) else { return Ok(None) };
        let n = match value {
            Value::Number(n) => n.as_u64().or_else(|| {
                n.as_f64().filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < u64::MAX as f64).map(|f| f as u64)
            }),
            Value::String(s) => s.trim().parse::<u64>().ok(),
            _ => None,
        };
        n.map(Some).ok_or_else(|| self.bad(key, "a whole number ≥ 0", value))
    }

    /// A mapping argument.
    fn object(&self, key: &str) -> Result<Option<&'a Map<String, Value>>, BoxError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Object(map)) => Ok(Some(map)),
            Some(other) => Err(self.bad(key, "a mapping", other)),
        }
    }

    /// One agent id or capability, or a list of them.
    fn names(&self, key: &str) -> Result<Option<Vec<String>>, BoxError> {
        let want = "a string or a list of strings";
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(vec![s.clone()])),
            Some(value @ Value::Array(list)) => list
                .iter()
                .map(|item| item.as_str().map(str::to_owned).ok_or_else(|| self.bad(key, want, value)))
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(other) => Err(self.bad(key, want, other)),
        }
    }

    /// A duration: a number of seconds, or a string such as `"30s"`, `"500ms"`, `"5m"`, `"1h"`.
    fn duration(&self, key: &str) -> Result<Option<Duration>, BoxError> {
        let Some(value) = self.get(key) else { return Ok(None) };
        let parsed = match value {
            Value::Number(n) => n.as_f64().and_then(|secs| Duration::try_from_secs_f64(secs).ok()),
            Value::String(s) => parse_duration(s),
            _ => None,
        };
        parsed.map(Some).ok_or_else(|| {
            self.bad(key, "a duration (a number of seconds, or a string such as \"30s\", \"500ms\", \"5m\")", value)
        })
    }

    /// Which of two names of one argument is given; both is an error.
    fn either(&self, first: &'static str, second: &'static str) -> Result<Option<&'static str>, BoxError> {
        match (self.get(first).is_some(), self.get(second).is_some()) {
            (true, true) => Err(self.fail(format_args!("give `{first}` or `{second}`, not both"))),
            (true, false) => Ok(Some(first)),
            (false, true) => Ok(Some(second)),
            (false, false) => Ok(None),
        }
    }

    /// The wait: `timeout` (a duration) or `timeout_ms`, capped at an hour.
    fn timeout(&self, default: Duration) -> Result<Duration, BoxError> {
        let wait = match self.either("timeout", "timeout_ms")? {
            Some("timeout_ms") => self.whole("timeout_ms")?.map(Duration::from_millis),
            Some(key) => self.duration(key)?,
            None => None,
        };
        Ok(wait.unwrap_or(default).min(MAX_WAIT))
    }

    /// A time to live: `ttl`, or `ttl_seconds` where the action takes it.
    fn ttl(&self) -> Result<Option<Duration>, BoxError> {
        let key =
            if self.op.keys().contains(&"ttl_seconds") { self.either("ttl", "ttl_seconds")? } else { Some("ttl") };
        match key {
            Some(key) => self.duration(key),
            None => Ok(None),
        }
    }

    /// A message argument (`message`): its type (default `default_type`) and payload (default `{}`).
    fn message(&self, key: &str, default_type: &str) -> Result<(String, Value), BoxError> {
        let message = self.object(key)?.ok_or_else(|| self.missing(key))?;
        let kind = match message.get("type") {
            None | Some(Value::Null) => default_type.to_owned(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => return Err(self.bad(&format!("{key}.type"), "a string", other)),
        };
        Ok((kind, message.get("payload").cloned().unwrap_or_else(|| json!({}))))
    }
}

/// `value` for an error message, cut short.
fn shown(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(80) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// A duration as The Edge Agent's Python engine reads it (`"30s"`, `"5m"`, `"1h"`, a bare
/// number of seconds), plus `"500ms"` and humantime's forms (`"1m 30s"`).
fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim().to_ascii_lowercase();
    let (number, scale) = if let Some(n) = text.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = text.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (text.as_str(), 1.0)
    };
    match number.trim().parse::<f64>() {
        Ok(n) => Duration::try_from_secs_f64(n * scale).ok(),
        Err(_) => humantime::parse_duration(&text).ok(),
    }
}

/// Who runs an action: agent id and namespace.
struct Caller {
    agent: String,
    namespace: String,
}

/// The calling agent (see the module documentation for the order).
fn caller(w: &With, state: &Map<String, Value>, settings: &A2aSettings) -> Result<Caller, BoxError> {
    let agent = match w.id("agent_id")? {
        Some(id) => id.to_owned(),
        None => from_state(state, "agent_id").unwrap_or(settings.agent_id.as_str()).to_owned(),
    };
    let agent = if agent.is_empty() { A2aSettings::default().agent_id } else { agent };
    Ok(Caller { agent, namespace: namespace(w, state, settings)? })
}

/// The namespace an action works in.
fn namespace(w: &With, state: &Map<String, Value>, settings: &A2aSettings) -> Result<String, BoxError> {
    let namespace = match w.id("namespace")? {
        Some(ns) => ns,
        None => from_state(state, "namespace").unwrap_or(settings.namespace.as_str()),
    };
    Ok(if namespace.is_empty() { A2aSettings::default().namespace } else { namespace.to_owned() })
}

/// `_a2a.FIELD`, else `_FIELD`, of the state, if a non-empty string.
fn from_state<'s>(state: &'s Map<String, Value>, field: &str) -> Option<&'s str> {
    let runtime = state.get("_a2a").and_then(|a2a| a2a.get(field)).and_then(Value::as_str);
    let plain = || state.get(&format!("_{field}")).and_then(Value::as_str);
    runtime.filter(|s| !s.is_empty()).or_else(|| plain().filter(|s| !s.is_empty()))
}

// ---------------------------------------------------------------------------------------------
// The hub
// ---------------------------------------------------------------------------------------------

/// A message in an inbox.
#[derive(Clone, Debug)]
struct Message {
    id: String,
    correlation_id: Option<String>,
    from: String,
    to: String,
    namespace: String,
    kind: String,
    payload: Value,
    timestamp: String,
    ttl: Option<Duration>,
    expires: Option<Instant>,
}

impl Message {
    fn new(caller: &Caller, to: &str, kind: String, payload: Value, ttl: Option<Duration>) -> Message {
        Message {
            id: fresh_id("msg"),
            correlation_id: None,
            from: caller.agent.clone(),
            to: to.to_owned(),
            namespace: caller.namespace.clone(),
            kind,
            payload,
            timestamp: humantime::format_rfc3339_micros(SystemTime::now()).to_string(),
            ttl,
            expires: ttl.and_then(|ttl| Instant::now().checked_add(ttl)),
        }
    }

    fn expired(&self, now: Instant) -> bool {
        self.expires.is_some_and(|at| now >= at)
    }

    /// As the Python engine's `Message.to_dict()`.
    fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "correlation_id": self.correlation_id,
            "from_agent": self.from,
            "to_agent": self.to,
            "namespace": self.namespace,
            "type": self.kind,
            "payload": self.payload,
            "timestamp": self.timestamp,
            "ttl": self.ttl.map(seconds),
        })
    }
}

/// A duration as a number of seconds (whole when it is).
fn seconds(d: Duration) -> Value {
    if d.subsec_nanos() == 0 {
        json!(d.as_secs())
    } else {
        json!(d.as_secs_f64())
    }
}

/// A registered agent.
#[derive(Clone, Debug)]
struct Agent {
    capabilities: Vec<String>,
    agent_type: Option<String>,
    status: String,
    metadata: Value,
    mode: &'static str,
    registered_at: f64,
    last_seen: f64,
    seen: Instant,
}

impl Agent {
    /// As the Python engine's `AgentInfo.to_dict()`, plus the Rust engine's `mode`.
    fn to_json(&self, id: &str, namespace: &str) -> Value {
        json!({
            "agent_id": id,
            "namespace": namespace,
            "capabilities": self.capabilities,
            "agent_type": self.agent_type,
            "status": self.status,
            "metadata": self.metadata,
            "mode": self.mode,
            "registered_at": self.registered_at,
            "last_seen": self.last_seen,
        })
    }
}

/// A value of the shared state.
#[derive(Clone, Debug)]
struct Entry {
    value: Value,
    version: u64,
    expires: Option<Instant>,
}

/// What the hub's lock guards: the inboxes, the agents and the shared state of every namespace.
#[derive(Debug, Default)]
struct HubTables {
    /// (namespace, agent id) → its messages, oldest first.
    inboxes: HashMap<(String, String), VecDeque<Message>>,
    /// namespace → agent id → agent.
    agents: HashMap<String, BTreeMap<String, Agent>>,
    /// namespace → key → value.
    shared: HashMap<String, HashMap<String, Entry>>,
}

/// The process-wide transport.
#[derive(Debug, Default)]
struct Hub {
    inner: Mutex<HubTables>,
    /// Notified (all) whenever a message is queued.
    arrived: Condvar,
}

static HUB: OnceLock<Hub> = OnceLock::new();

fn hub() -> &'static Hub {
    HUB.get_or_init(Hub::default)
}

impl Hub {
    fn lock(&self) -> MutexGuard<'_, HubTables> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until `ready` gives something or `wait` has passed (`None` then).
    fn wait_for<T>(&self, wait: Duration, mut ready: impl FnMut(&mut HubTables) -> Option<T>) -> Option<T> {
        let deadline = Instant::now() + wait.min(MAX_WAIT);
        let mut inner = self.lock();
        loop {
            if let Some(found) = ready(&mut inner) {
                return Some(found);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            inner = self.arrived.wait_timeout(inner, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}

impl HubTables {
    /// Queues `message` in its recipient's inbox; the error names a full one.
    fn deliver(&mut self, message: Message) -> Result<(), String> {
        let now = Instant::now();
        let inbox = self.inboxes.entry((message.namespace.clone(), message.to.clone())).or_default();
        inbox.retain(|m| !m.expired(now));
        if inbox.len() >= INBOX_CAPACITY {
            return Err(format!(
                "the inbox of agent `{}` in namespace `{}` is full ({INBOX_CAPACITY} messages)",
                message.to, message.namespace
            ));
        }
        inbox.push_back(message);
        Ok(())
    }

    /// The unexpired messages of inbox (`namespace`, `agent`) passing `keep`.
    fn peek<'s>(
        &'s mut self,
        namespace: &str,
        agent: &str,
        keep: impl Fn(&Message) -> bool + 's,
    ) -> impl Iterator<Item = &'s Message> + 's {
        let now = Instant::now();
        let key = (namespace.to_owned(), agent.to_owned());
        let inbox = self.inboxes.get_mut(&key);
        let inbox = inbox.map(|inbox| {
            inbox.retain(|m| !m.expired(now));
            &*inbox
        });
        inbox.into_iter().flatten().filter(move |m| keep(m))
    }

    /// Takes out of inbox (`namespace`, `agent`) the messages passing `take` (at most `limit`).
    fn take(&mut self, namespace: &str, agent: &str, limit: usize, take: impl Fn(&Message) -> bool) -> Vec<Message> {
        let key = (namespace.to_owned(), agent.to_owned());
        let Some(inbox) = self.inboxes.get_mut(&key) else { return Vec::new() };
        let now = Instant::now();
        let mut taken = Vec::new();
        let mut kept = VecDeque::with_capacity(inbox.len());
        for message in inbox.drain(..) {
            if message.expired(now) {
                continue;
            }
            if taken.len() < limit && take(&message) {
                taken.push(message);
            } else {
                kept.push_back(message);
            }
        }
        if kept.is_empty() {
            self.inboxes.remove(&key);
        } else {
            *inbox = kept;
        }
        taken
    }

    /// The live value of `key` in `namespace` (an expired one is removed).
    fn entry(&mut self, namespace: &str, key: &str) -> Option<&mut Entry> {
        let values = self.shared.get_mut(namespace)?;
        if values.get(key).is_some_and(|e| e.expires.is_some_and(|at| Instant::now() >= at)) {
            values.remove(key);
            return None;
        }
        values.get_mut(key)
    }

    fn store(&mut self, namespace: &str, key: &str, value: Value, version: u64, ttl: Option<Duration>) {
        let expires = ttl.and_then(|ttl| Instant::now().checked_add(ttl));
        self.shared.entry(namespace.to_owned()).or_default().insert(key.to_owned(), Entry { value, version, expires });
    }

    fn remove(&mut self, namespace: &str, key: &str) {
        if let Some(values) = self.shared.get_mut(namespace) {
            values.remove(key);
            if values.is_empty() {
                self.shared.remove(namespace);
            }
        }
    }
}

/// A fresh id: `PREFIX_` and 12 hex digits, as The Edge Agent's Python engine.
fn fresh_id(prefix: &str) -> String {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(COUNT.fetch_add(1, Ordering::Relaxed));
    hasher.write_u128(SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    format!("{prefix}_{:012x}", hasher.finish() & 0xffff_ffff_ffff)
}

/// Now, in seconds since the Unix epoch (the Python engine's `time.time()`).
fn epoch_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

// ---------------------------------------------------------------------------------------------
// Messages
// ---------------------------------------------------------------------------------------------

/// `a2a.send`: `{a2a_message_sent: true}`, plus `a2a_message_id` with `confirm`.
fn send(w: &With, me: &Caller) -> Result<Value, BoxError> {
    let to = w.need_id("to")?;
    let (kind, payload) = w.message("message", "message")?;
    let confirm = w.flag("confirm", false)?;
    let correlation_id = w.text("correlation_id")?;
    let ttl = w.ttl()?;
    let mut message = Message::new(me, to, kind, payload, ttl);
    message.correlation_id = correlation_id.map(str::to_owned);
    let id = message.id.clone();
    let hub = hub();
    hub.lock().deliver(message).map_err(|e| w.fail(e))?;
    hub.arrived.notify_all();
    let mut result = json!({ "a2a_message_sent": true });
    if confirm {
        result["a2a_message_id"] = json!(id);
    }
    Ok(result)
}

/// `a2a.receive`: `{a2a_messages: [...]}` (see the module documentation).
fn receive(w: &With, me: &Caller) -> Result<Value, BoxError> {
    // An empty list filters nothing, as in the Python engine.
    let from = match w.either("from", "from_agents")? {
        Some(key) => w.names(key)?.filter(|f| !f.is_empty()),
        None => None,
    };
    let kind = w.text("type")?.filter(|t| !t.is_empty()).map(str::to_owned);
    let require_all = w.flag("require_all", false)?;
    let wait = w.timeout(Duration::ZERO)?;
    let required: Option<BTreeSet<String>> =
        if require_all { from.clone().map(|f| f.into_iter().collect()) } else { None };
    let matches = move |m: &Message| {
        from.as_ref().is_none_or(|f| f.contains(&m.from)) && kind.as_ref().is_none_or(|k| *k == m.kind)
    };
    let inboxes: Vec<&str> =
        if me.agent == SHARED_INBOX { vec![SHARED_INBOX] } else { vec![me.agent.as_str(), SHARED_INBOX] };
    let senders = |inner: &mut HubTables| {
        let mut seen = BTreeSet::new();
        for inbox in &inboxes {
            seen.extend(inner.peek(&me.namespace, inbox, &matches).map(|m| m.from.clone()));
        }
        seen
    };
    let taken = hub().wait_for(wait, |inner| {
        let seen = senders(inner);
        let ready = match &required {
            Some(required) => required.is_subset(&seen),
            None => !seen.is_empty(),
        };
        ready.then(|| {
            let mut taken = Vec::new();
            for inbox in &inboxes {
                taken.extend(inner.take(&me.namespace, inbox, usize::MAX, &matches));
            }
            taken
        })
    });
    match (taken, required) {
        (Some(taken), _) => Ok(json!({ "a2a_messages": taken.iter().map(Message::to_json).collect::<Vec<_>>() })),
        (None, Some(required)) => {
            let seen = senders(&mut hub().lock());
            let missing: Vec<&String> = required.iter().filter(|a| !seen.contains(*a)).collect();
            Ok(json!({
                "a2a_messages": [],
                "a2a_timeout": true,
                "a2a_error": format!("Timeout waiting for messages from agents: {}", json!(missing)),
            }))
        }
        (None, None) => Ok(json!({ "a2a_messages": [] })),
    }
}

/// `a2a.broadcast`: `{a2a_broadcast_count: n}`, plus `a2a_broadcast_full: [ids]` if some inboxes were full.
fn broadcast(w: &With, me: &Caller) -> Result<Value, BoxError> {
    let (kind, payload) = w.message("message", "broadcast")?;
    let only = match w.either("agent_type_filter", "agent_type")? {
        Some(key) => w.text(key)?.filter(|t| !t.is_empty()),
        None => None,
    };
    let exclude_self = w.flag("exclude_self", true)?;
    let ttl = w.ttl()?;
    let template = Message::new(me, SHARED_INBOX, kind, payload, ttl);
    let hub = hub();
    let mut inner = hub.lock();
    let recipients: Vec<String> = inner
        .agents
        .get(&me.namespace)
        .into_iter()
        .flatten()
        .filter(|(id, agent)| {
            !(exclude_self && **id == me.agent) && only.is_none_or(|t| agent.agent_type.as_deref() == Some(t))
        })
        .map(|(id, _)| id.clone())
        .collect();
    let (mut count, mut full) = (0, Vec::new());
    for to in recipients {
        let message = Message { id: fresh_id("msg"), to: to.clone(), ..template.clone() };
        match inner.deliver(message) {
            Ok(()) => count += 1,
            Err(_) => full.push(to),
        }
    }
    drop(inner);
    hub.arrived.notify_all();
    let mut result = json!({ "a2a_broadcast_count": count });
    if !full.is_empty() {
        result["a2a_broadcast_full"] = json!(full);
    }
    Ok(result)
}

/// What `a2a.delegate` does when no reply comes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OnTimeout {
    Raise,
    Retry,
    FallbackLocal,
}

/// `a2a.delegate` (see the module documentation).
fn delegate(w: &With, me: &Caller) -> Result<Value, BoxError> {
    let to = w.need_id("to")?;
    let (kind, payload) = match w.either("task", "request")? {
        Some("task") => {
            // The Python engine: its `type` is the message type, the rest the payload.
            let task = w.object("task")?.ok_or_else(|| w.missing("task"))?;
            let kind = match task.get("type") {
                None | Some(Value::Null) => "task".to_owned(),
                Some(Value::String(s)) => s.clone(),
                Some(other) => return Err(w.bad("task.type", "a string", other)),
            };
            let rest: Map<String, Value> =
                task.iter().filter(|(k, _)| *k != "type").map(|(k, v)| (k.clone(), v.clone())).collect();
            (kind, Value::Object(rest))
        }
        Some(_) => {
            // The Rust engine: `request.type`, and `request.payload` or the request itself.
            let request = w.get("request").cloned().unwrap_or(Value::Null);
            let kind = match request.get("type") {
                None | Some(Value::Null) => "request".to_owned(),
                Some(Value::String(s)) => s.clone(),
                Some(other) => return Err(w.bad("request.type", "a string", other)),
            };
            let payload = request.get("payload").cloned().unwrap_or(request);
            (kind, payload)
        }
        None => return Err(w.fail("`task` (or `request`) is required")),
    };
    let wait = w.timeout(DELEGATE_TIMEOUT)?;
    let on_timeout = match w.get("on_timeout") {
        None => OnTimeout::Raise,
        Some(Value::String(s)) if s == "raise" => OnTimeout::Raise,
        Some(Value::String(s)) if s == "retry" => OnTimeout::Retry,
        Some(Value::String(s)) if s == "fallback_local" => OnTimeout::FallbackLocal,
        Some(other) => return Err(w.bad("on_timeout", "\"raise\", \"retry\" or \"fallback_local\"", other)),
    };
    let fallback = w.get("fallback");
    if let Some(Value::Object(spec)) = fallback {
        if let Some(action) = spec.get("action") {
            if !action.is_string() {
                return Err(w.bad("fallback.action", "an action name", action));
            }
            match spec.get("with") {
                None | Some(Value::Null) | Some(Value::Object(_)) => {}
                Some(other) => return Err(w.bad("fallback.with", "a mapping", other)),
            }
        }
    }
    if on_timeout == OnTimeout::FallbackLocal && fallback.is_none() {
        return Err(w.fail("`on_timeout: fallback_local` needs `fallback`"));
    }
    let retries = w.whole("max_retries")?.unwrap_or(0);
    let attempts = if on_timeout == OnTimeout::Retry { retries.saturating_add(1) } else { 1 };

    let correlation_id = fresh_id("req");
    let mut request = Message::new(me, to, kind, payload, None);
    request.correlation_id = Some(correlation_id.clone());
    let request_id = request.id.clone();
    let hub = hub();
    let is_reply = |m: &Message| m.correlation_id.as_deref() == Some(&correlation_id) && m.id != request_id;
    for _ in 0..attempts {
        hub.lock().deliver(request.clone()).map_err(|e| w.fail(e))?;
        hub.arrived.notify_all();
        let reply = hub.wait_for(wait, |inner| inner.take(&me.namespace, &me.agent, 1, is_reply).pop());
        if let Some(reply) = reply {
            return Ok(json!({ "a2a_delegation_result": reply.payload, "a2a_delegation_success": true }));
        }
        // Nobody took it: withdraw it, rather than leave it for an agent that is not there.
        hub.lock().take(&me.namespace, to, 1, |m| m.id == request_id);
    }
    match on_timeout {
        OnTimeout::Raise => Err(w.fail(format_args!(
            "no reply from `{to}` (namespace `{}`) within {}",
            me.namespace,
            humantime::format_duration(wait)
        ))),
        OnTimeout::Retry => Ok(json!({
            "a2a_delegation_result": null,
            "a2a_delegation_success": false,
            "a2a_delegation_timeout": true,
            "a2a_should_retry": true,
        })),
        OnTimeout::FallbackLocal => {
            let fallback = fallback.cloned().unwrap_or(Value::Null);
            match fallback.get("action").and_then(Value::as_str) {
                Some(action) => Ok(json!({
                    "a2a_delegation_result": null,
                    "a2a_delegation_success": false,
                    "a2a_delegation_fallback": true,
                    FALLBACK_PENDING: {
                        "action": action,
                        "with": fallback.get("with").filter(|v| !v.is_null()).cloned().unwrap_or_else(|| json!({})),
                    },
                })),
                None => Ok(json!({
                    "a2a_delegation_result": fallback,
                    "a2a_delegation_success": false,
                    "a2a_delegation_fallback": true,
                })),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Shared state
// ---------------------------------------------------------------------------------------------

/// `a2a.state.get`: `{a2a_shared_state: value (or default), a2a_state_version: n (0 if none)}`.
fn state_get(w: &With, namespace: &str) -> Result<Value, BoxError> {
    let key = w.need_id("key")?;
    let default = w.get("default").cloned().unwrap_or(Value::Null);
    let mut inner = hub().lock();
    Ok(match inner.entry(namespace, key) {
        Some(entry) => json!({ "a2a_shared_state": entry.value, "a2a_state_version": entry.version }),
        None => json!({ "a2a_shared_state": default, "a2a_state_version": 0 }),
    })
}

/// The Python engine's optimistic-lock conflict result.
fn conflict(key: &str, expected: u64, actual: u64) -> Value {
    json!({
        "a2a_state_updated": false,
        "a2a_state_conflict": true,
        "a2a_error": format!("Optimistic lock conflict on key '{key}': expected version {expected}, found {actual}"),
        "a2a_state_expected_version": expected,
        "a2a_state_actual_version": actual,
    })
}

/// `a2a.state.set`: `{a2a_state_version, a2a_state_updated: true}`, or a conflict.
fn state_set(w: &With, namespace: &str) -> Result<Value, BoxError> {
    let key = w.need_id("key")?;
    let value = w.raw("value").cloned().ok_or_else(|| w.missing("value"))?;
    let ttl = w.ttl()?;
    let expected = w.whole("expected_version")?;
    let mut inner = hub().lock();
    let current = inner.entry(namespace, key).map_or(0, |e| e.version);
    if let Some(expected) = expected.filter(|e| *e != current) {
        return Ok(conflict(key, expected, current));
    }
    inner.store(namespace, key, value, current + 1, ttl);
    Ok(json!({ "a2a_state_version": current + 1, "a2a_state_updated": true }))
}

/// `a2a.state.cas`: sets `key` to `new_value` if it is `expected` (null or missing: if it is
/// absent), atomically. `{a2a_state_updated, a2a_state_previous, a2a_state_version}`.
fn state_cas(w: &With, namespace: &str) -> Result<Value, BoxError> {
    let key = w.need_id("key")?;
    let new_value = w.raw("new_value").cloned().ok_or_else(|| w.missing("new_value"))?;
    let expected = w.get("expected");
    let ttl = w.ttl()?;
    let mut inner = hub().lock();
    let current = inner.entry(namespace, key).map(|e| (e.value.clone(), e.version));
    let swap = match (&current, expected) {
        (None, None) => true,
        (Some((value, _)), Some(expected)) => same(value, expected),
        _ => false,
    };
    let (previous, version) = current.unwrap_or((Value::Null, 0));
    if !swap {
        return Ok(json!({ "a2a_state_updated": false, "a2a_state_previous": previous, "a2a_state_version": version }));
    }
    inner.store(namespace, key, new_value, version + 1, ttl);
    Ok(json!({ "a2a_state_updated": true, "a2a_state_previous": previous, "a2a_state_version": version + 1 }))
}

/// `a2a.state.delete`: `{a2a_state_deleted: bool}`, or a conflict with `expected_version`.
fn state_delete(w: &With, namespace: &str) -> Result<Value, BoxError> {
    let key = w.need_id("key")?;
    let expected = w.whole("expected_version")?;
    let mut inner = hub().lock();
    let Some(version) = inner.entry(namespace, key).map(|e| e.version) else {
        return Ok(json!({ "a2a_state_deleted": false }));
    };
    if let Some(expected) = expected.filter(|e| *e != version) {
        return Ok(conflict(key, expected, version));
    }
    inner.remove(namespace, key);
    Ok(json!({ "a2a_state_deleted": true }))
}

/// JSON equality where `1` and `1.0` are the same number.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

// ---------------------------------------------------------------------------------------------
// Discovery
// ---------------------------------------------------------------------------------------------

/// `a2a.discover`: `{a2a_agents: [...]}`.
fn discover(w: &With, namespace: &str) -> Result<Value, BoxError> {
    let mut wanted = w.text("capability")?.map(|c| vec![c.to_owned()]).unwrap_or_default();
    wanted.extend(w.names("capabilities")?.unwrap_or_default());
    let agent_type = w.text("agent_type")?;
    let status = w.text("status")?;
    let mode = match w.get("mode") {
        None => None,
        Some(Value::String(s)) if s == "all" => None,
        Some(Value::String(s)) if s == "static" => Some("static"),
        Some(Value::String(s)) if s == "dynamic" => Some("dynamic"),
        Some(other) => return Err(w.bad("mode", "\"static\", \"dynamic\" or \"all\"", other)),
    };
    let inner = hub().lock();
    let now = Instant::now();
    let agents: Vec<Value> = inner
        .agents
        .get(namespace)
        .into_iter()
        .flatten()
        .filter(|(_, a)| now.duration_since(a.seen) <= STALE_AFTER)
        .filter(|(_, a)| wanted.iter().all(|c| a.capabilities.contains(c)))
        .filter(|(_, a)| agent_type.is_none_or(|t| a.agent_type.as_deref() == Some(t)))
        .filter(|(_, a)| status.is_none_or(|s| a.status == s))
        .filter(|(_, a)| mode.is_none_or(|m| a.mode == m))
        .map(|(id, a)| a.to_json(id, namespace))
        .collect();
    Ok(json!({ "a2a_agents": agents }))
}

/// `a2a.register`: `{a2a_registered: true, a2a_agent_info, _agent_id, _namespace}`.
fn register(w: &With, me: &Caller) -> Result<Value, BoxError> {
    let capabilities = w.names("capabilities")?.unwrap_or_default();
    let agent_type = w.text("agent_type")?.map(str::to_owned);
    let metadata = w.object("metadata")?.cloned().unwrap_or_default();
    let mode = match w.get("mode") {
        None => "dynamic",
        Some(Value::String(s)) if s == "dynamic" => "dynamic",
        Some(Value::String(s)) if s == "static" => "static",
        Some(other) => return Err(w.bad("mode", "\"static\" or \"dynamic\"", other)),
    };
    let now = epoch_now();
    let agent = Agent {
        capabilities,
        agent_type,
        status: "online".to_owned(),
        metadata: Value::Object(metadata),
        mode,
        registered_at: now,
        last_seen: now,
        seen: Instant::now(),
    };
    let info = agent.to_json(&me.agent, &me.namespace);
    hub().lock().agents.entry(me.namespace.clone()).or_default().insert(me.agent.clone(), agent);
    Ok(json!({
        "a2a_registered": true,
        "a2a_agent_info": info,
        "_agent_id": me.agent,
        "_namespace": me.namespace,
    }))
}

/// `a2a.unregister`: `{a2a_unregistered: true}` (its inbox stays).
fn unregister(_w: &With, me: &Caller) -> Result<Value, BoxError> {
    let mut inner = hub().lock();
    if let Some(agents) = inner.agents.get_mut(&me.namespace) {
        agents.remove(&me.agent);
        if agents.is_empty() {
            inner.agents.remove(&me.namespace);
        }
    }
    Ok(json!({ "a2a_unregistered": true }))
}

/// `a2a.heartbeat`: `{a2a_heartbeat: last seen (seconds since the epoch), a2a_status}`, or
/// `{a2a_heartbeat: null, a2a_error}` for an agent not registered (as the Python engine).
fn heartbeat(_w: &With, me: &Caller) -> Result<Value, BoxError> {
    let mut inner = hub().lock();
    match inner.agents.get_mut(&me.namespace).and_then(|agents| agents.get_mut(&me.agent)) {
        Some(agent) => {
            agent.last_seen = epoch_now();
            agent.seen = Instant::now();
            Ok(json!({ "a2a_heartbeat": agent.last_seen, "a2a_status": agent.status }))
        }
        None => Ok(json!({ "a2a_heartbeat": null, "a2a_error": "Agent not registered" })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread;

    /// A namespace no other test uses.
    fn room(name: &str) -> String {
        format!("test-{name}-{}", fresh_id("ns"))
    }

    /// Runs action `name` with `args` as agent `me` of namespace `ns`.
    fn run(name: &str, args: Value, me: &str, ns: &str) -> Result<Value, BoxError> {
        let op = A2a::named(name).expect("an a2a action");
        let settings = A2aSettings { agent_id: me.to_owned(), namespace: ns.to_owned() };
        call(op, &args, &Map::new(), &settings)
    }

    fn ok(name: &str, args: Value, me: &str, ns: &str) -> Value {
        run(name, args, me, ns).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    fn err(name: &str, args: Value) -> String {
        match run(name, args, "someone", "test-errors") {
            Ok(v) => panic!("{name} should fail, gave {v}"),
            Err(e) => e.to_string(),
        }
    }

    fn messages(result: &Value) -> Vec<Value> {
        result["a2a_messages"].as_array().cloned().unwrap_or_default()
    }

    #[test]
    fn names_keys_and_aliases() {
        for op in A2a::ALL {
            assert_eq!(A2a::named(op.name()), Some(op));
            assert!(op.required() <= op.keys().len());
            let alias = format!("actions.{}", op.name().replace('.', "_"));
            if !matches!(op, A2a::StateCas | A2a::StateDelete) {
                assert_eq!(A2a::named(&alias), Some(op), "{alias}");
            }
        }
        assert_eq!(A2a::named("a2a.nope"), None);
        assert_eq!(&A2a::Send.keys()[..A2a::Send.required()], ["to", "message"]);
    }

    #[test]
    fn send_and_receive() {
        let ns = room("send");
        let sent =
            ok("a2a.send", json!({ "to": "bob", "message": { "type": "hi", "payload": { "n": 1 } } }), "alice", &ns);
        assert_eq!(sent, json!({ "a2a_message_sent": true }));
        let sent = ok("a2a.send", json!({ "to": "bob", "message": { "payload": 2 }, "confirm": true }), "alice", &ns);
        assert!(sent["a2a_message_id"].as_str().is_some_and(|id| id.starts_with("msg_")));
        // Not for alice, and not in another namespace.
        assert!(messages(&ok("a2a.receive", json!({}), "alice", &ns)).is_empty());
        assert!(messages(&ok("a2a.receive", json!({}), "bob", &room("other"))).is_empty());
        let got = messages(&ok("a2a.receive", json!({ "timeout": 1 }), "bob", &ns));
        assert_eq!(got.len(), 2);
        assert_eq!(got[0]["from_agent"], "alice");
        assert_eq!(got[0]["to_agent"], "bob");
        assert_eq!(got[0]["namespace"], json!(ns));
        assert_eq!(got[0]["type"], "hi");
        assert_eq!(got[0]["payload"], json!({ "n": 1 }));
        assert_eq!(got[1]["type"], "message");
        assert_eq!(got[1]["payload"], 2);
        assert!(messages(&ok("a2a.receive", json!(null), "bob", &ns)).is_empty());
    }

    #[test]
    fn receive_waits_for_a_message() {
        let ns = room("wait");
        let ns2 = ns.clone();
        let sender = thread::spawn(move || {
            thread::sleep(Duration::from_millis(50));
            ok("a2a.send", json!({ "to": "bob", "message": { "type": "late" } }), "alice", &ns2);
        });
        let start = Instant::now();
        let got = messages(&ok("a2a.receive", json!({ "timeout": "5s" }), "bob", &ns));
        assert_eq!(got.len(), 1);
        assert!(start.elapsed() < Duration::from_secs(2));
        sender.join().unwrap();
    }

    #[test]
    fn receive_times_out_empty() {
        let ns = room("timeout");
        let start = Instant::now();
        assert_eq!(ok("a2a.receive", json!({ "timeout": "100ms" }), "bob", &ns), json!({ "a2a_messages": [] }));
        let waited = start.elapsed();
        assert!(waited >= Duration::from_millis(100) && waited < Duration::from_millis(600), "{waited:?}");
        let start = Instant::now();
        assert!(messages(&ok("a2a.receive", json!({ "timeout_ms": 0 }), "bob", &ns)).is_empty());
        assert!(start.elapsed() < Duration::from_millis(50));
    }

    #[test]
    fn filters_leave_other_messages_queued() {
        let ns = room("filters");
        ok("a2a.send", json!({ "to": "bob", "message": { "type": "a" } }), "alice", &ns);
        ok("a2a.send", json!({ "to": "bob", "message": { "type": "b" } }), "carol", &ns);
        ok("a2a.send", json!({ "to": "bob", "message": { "type": "b" } }), "alice", &ns);
        let b = messages(&ok("a2a.receive", json!({ "type": "b", "from": "carol" }), "bob", &ns));
        assert_eq!(b.len(), 1);
        assert_eq!(b[0]["from_agent"], "carol");
        ok("a2a.send", json!({ "to": "bob", "message": { "type": "c" } }), "carol", &ns);
        let c = messages(&ok("a2a.receive", json!({ "from": [], "type": "c" }), "bob", &ns));
        assert_eq!(c.len(), 1);
        let alice = messages(&ok("a2a.receive", json!({ "from_agents": ["alice", "dave"] }), "bob", &ns));
        assert_eq!(alice.iter().map(|m| m["type"].clone()).collect::<Vec<_>>(), [json!("a"), json!("b")]);
        assert!(messages(&ok("a2a.receive", json!({}), "bob", &ns)).is_empty());
    }

    #[test]
    fn require_all_keeps_partial_messages() {
        let ns = room("all");
        ok("a2a.send", json!({ "to": "boss", "message": { "type": "done" } }), "w1", &ns);
        let args = json!({ "from": ["w1", "w2"], "require_all": true, "timeout": "50ms" });
        let timed_out = ok("a2a.receive", args.clone(), "boss", &ns);
        assert_eq!(timed_out["a2a_timeout"], true);
        assert!(messages(&timed_out).is_empty());
        assert!(timed_out["a2a_error"].as_str().unwrap().contains("w2"));
        ok("a2a.send", json!({ "to": "boss", "message": { "type": "done" } }), "w2", &ns);
        assert_eq!(messages(&ok("a2a.receive", args, "boss", &ns)).len(), 2);
    }

    #[test]
    fn shared_inbox_and_ttl() {
        let ns = room("star");
        ok("a2a.send", json!({ "to": "*", "message": { "type": "anyone" } }), "alice", &ns);
        ok("a2a.send", json!({ "to": "bob", "message": {}, "ttl": "30ms" }), "alice", &ns);
        thread::sleep(Duration::from_millis(60));
        let got = messages(&ok("a2a.receive", json!({}), "bob", &ns));
        assert_eq!(got.len(), 1);
        assert_eq!(got[0]["to_agent"], "*");
        assert!(messages(&ok("a2a.receive", json!({}), "carol", &ns)).is_empty());
    }

    #[test]
    fn full_inbox_is_an_error_naming_the_agent() {
        let ns = room("full");
        for _ in 0..INBOX_CAPACITY {
            ok("a2a.send", json!({ "to": "slow", "message": {} }), "alice", &ns);
        }
        let e = run("a2a.send", json!({ "to": "slow", "message": {} }), "alice", &ns).unwrap_err().to_string();
        assert!(e.starts_with("a2a.send: ") && e.contains("`slow`") && e.contains("full"), "{e}");
        assert_eq!(messages(&ok("a2a.receive", json!({}), "slow", &ns)).len(), INBOX_CAPACITY);
    }

    #[test]
    fn broadcast_reaches_registered_agents() {
        let ns = room("vote");
        assert_eq!(ok("a2a.broadcast", json!({ "message": {} }), "proposer", &ns), json!({ "a2a_broadcast_count": 0 }));
        let reg = ok("a2a.register", json!({ "capabilities": ["propose"], "agent_type": "proposer" }), "proposer", &ns);
        assert_eq!(reg["_agent_id"], "proposer");
        assert_eq!(reg["_namespace"], json!(ns));
        for voter in ["v1", "v2"] {
            ok("a2a.register", json!({ "agent_type": "voter" }), voter, &ns);
        }
        ok("a2a.register", json!({ "agent_id": "watcher" }), "proposer", &ns);
        let message = json!({ "type": "proposal", "payload": { "id": 7 } });
        let only_voters = json!({ "message": message, "agent_type_filter": "voter" });
        assert_eq!(ok("a2a.broadcast", only_voters, "proposer", &ns)["a2a_broadcast_count"], 2);
        assert_eq!(ok("a2a.broadcast", json!({ "message": message }), "proposer", &ns)["a2a_broadcast_count"], 3);
        let with_self = json!({ "message": message, "exclude_self": false, "agent_type": "proposer" });
        assert_eq!(ok("a2a.broadcast", with_self, "proposer", &ns)["a2a_broadcast_count"], 1);
        let v1 = messages(&ok("a2a.receive", json!({ "type": "proposal" }), "v1", &ns));
        assert_eq!(v1.len(), 2);
        assert_eq!(v1[0]["payload"], json!({ "id": 7 }));
        assert_eq!(v1[0]["to_agent"], "v1");
        assert_ne!(v1[0]["id"], v1[1]["id"]);
        ok("a2a.unregister", json!({}), "v2", &ns);
        assert_eq!(ok("a2a.broadcast", json!({ "message": message }), "proposer", &ns)["a2a_broadcast_count"], 2);
    }

    #[test]
    fn shared_state() {
        let ns = room("state");
        let get = |args: Value| ok("a2a.state.get", args, "a", &ns);
        let set = |args: Value| ok("a2a.state.set", args, "a", &ns);
        assert_eq!(get(json!({ "key": "k", "default": 5 })), json!({ "a2a_shared_state": 5, "a2a_state_version": 0 }));
        assert_eq!(
            set(json!({ "key": "k", "value": { "x": 1 } })),
            json!({ "a2a_state_version": 1, "a2a_state_updated": true })
        );
        assert_eq!(get(json!({ "key": "k" })), json!({ "a2a_shared_state": { "x": 1 }, "a2a_state_version": 1 }));
        // Another agent of the namespace sees it; another namespace does not.
        assert_eq!(ok("a2a.state.get", json!({ "key": "k" }), "b", &ns)["a2a_state_version"], 1);
        assert_eq!(ok("a2a.state.get", json!({ "key": "k" }), "a", &room("elsewhere"))["a2a_state_version"], 0);
        let conflict = set(json!({ "key": "k", "value": 2, "expected_version": 0 }));
        assert_eq!(conflict["a2a_state_conflict"], true);
        assert_eq!(conflict["a2a_state_actual_version"], 1);
        assert_eq!(set(json!({ "key": "k", "value": 2, "expected_version": "1" }))["a2a_state_version"], 2);

        let cas = |args: Value| ok("a2a.state.cas", args, "a", &ns);
        let refused = cas(json!({ "key": "k", "new_value": 3 }));
        assert_eq!(refused, json!({ "a2a_state_updated": false, "a2a_state_previous": 2, "a2a_state_version": 2 }));
        let swapped = cas(json!({ "key": "k", "expected": 2.0, "new_value": 3 }));
        assert_eq!(swapped, json!({ "a2a_state_updated": true, "a2a_state_previous": 2, "a2a_state_version": 3 }));
        assert_eq!(cas(json!({ "key": "new", "expected": null, "new_value": 1 }))["a2a_state_updated"], true);

        let delete = |args: Value| ok("a2a.state.delete", args, "a", &ns);
        assert_eq!(delete(json!({ "key": "k", "expected_version": 1 }))["a2a_state_conflict"], true);
        assert_eq!(delete(json!({ "key": "k" })), json!({ "a2a_state_deleted": true }));
        assert_eq!(delete(json!({ "key": "k" })), json!({ "a2a_state_deleted": false }));
        assert_eq!(get(json!({ "key": "k" }))["a2a_state_version"], 0);

        set(json!({ "key": "short", "value": 1, "ttl": "30ms" }));
        set(json!({ "key": "long", "value": 1, "ttl_seconds": 3600 }));
        thread::sleep(Duration::from_millis(60));
        assert_eq!(get(json!({ "key": "short" }))["a2a_shared_state"], Value::Null);
        assert_eq!(get(json!({ "key": "long" }))["a2a_shared_state"], 1);
    }

    #[test]
    fn delegate_gets_the_reply() {
        let ns = room("delegate");
        let ns2 = ns.clone();
        let worker = thread::spawn(move || {
            let got = messages(&ok("a2a.receive", json!({ "type": "search", "timeout": "3s" }), "worker", &ns2));
            let task = &got[0];
            assert_eq!(task["payload"], json!({ "query": "fusion" }));
            // An unrelated message first: it must stay queued for the boss.
            ok("a2a.send", json!({ "to": "boss", "message": { "type": "noise" } }), "worker", &ns2);
            let reply = json!({
                "to": task["from_agent"],
                "message": { "type": "result", "payload": { "answer": 42 } },
                "correlation_id": task["correlation_id"],
            });
            ok("a2a.send", reply, "worker", &ns2);
        });
        let args = json!({ "to": "worker", "task": { "type": "search", "query": "fusion" }, "timeout": "3s" });
        let result = ok("a2a.delegate", args, "boss", &ns);
        assert_eq!(result, json!({ "a2a_delegation_result": { "answer": 42 }, "a2a_delegation_success": true }));
        worker.join().unwrap();
        let left = messages(&ok("a2a.receive", json!({}), "boss", &ns));
        assert_eq!(left.len(), 1);
        assert_eq!(left[0]["type"], "noise");
    }

    #[test]
    fn delegate_times_out() {
        let ns = room("late");
        let task = json!({ "type": "search", "query": "q" });
        let start = Instant::now();
        let e = run("a2a.delegate", json!({ "to": "absent", "task": task, "timeout": "50ms" }), "boss", &ns)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("a2a.delegate: ") && e.contains("`absent`"), "{e}");
        assert!(start.elapsed() < Duration::from_millis(500));
        // The unanswered request was withdrawn.
        assert!(messages(&ok("a2a.receive", json!({}), "absent", &ns)).is_empty());

        let fallback = json!({ "action": "llm.call", "with": { "model": "m", "messages": [] } });
        let args = json!({ "to": "absent", "task": task, "timeout": 0.05, "on_timeout": "fallback_local", "fallback": fallback });
        let mut result = ok("a2a.delegate", args, "boss", &ns);
        assert_eq!(result["a2a_delegation_success"], false);
        assert_eq!(result["a2a_delegation_fallback"], true);
        assert_eq!(result["a2a_delegation_result"], Value::Null);
        let (action, with) = take_fallback(&mut result).expect("a pending fallback");
        assert_eq!((action.as_str(), with), ("llm.call", json!({ "model": "m", "messages": [] })));
        assert!(result.get(FALLBACK_PENDING).is_none());
        fallback_done(&mut result, json!({ "content": "local" }));
        assert_eq!(result["a2a_delegation_result"], json!({ "content": "local" }));

        let args = json!({ "to": "absent", "request": { "q": 1 }, "timeout_ms": 30, "on_timeout": "fallback_local", "fallback": "cached" });
        let mut result = ok("a2a.delegate", args, "boss", &ns);
        assert_eq!(result["a2a_delegation_result"], "cached");
        assert!(take_fallback(&mut result).is_none());

        let args = json!({ "to": "absent", "task": task, "timeout": "30ms", "on_timeout": "retry", "max_retries": 1 });
        let start = Instant::now();
        let result = ok("a2a.delegate", args, "boss", &ns);
        assert!(start.elapsed() >= Duration::from_millis(60));
        assert_eq!(result["a2a_should_retry"], true);
        assert_eq!(result["a2a_delegation_timeout"], true);
        assert!(messages(&ok("a2a.receive", json!({}), "absent", &ns)).is_empty());
    }

    #[test]
    fn discovery_by_capability() {
        let ns = room("discover");
        ok("a2a.register", json!({ "capabilities": ["search", "summarize"], "agent_type": "worker" }), "w1", &ns);
        ok("a2a.register", json!({ "capabilities": "write", "agent_type": "worker", "mode": "static" }), "w2", &ns);
        ok("a2a.register", json!({ "capabilities": ["coordinate"], "agent_type": "coordinator" }), "boss", &ns);
        let ids = |args: Value| -> Vec<Value> {
            let found = ok("a2a.discover", args, "boss", &ns);
            found["a2a_agents"].as_array().unwrap().iter().map(|a| a["agent_id"].clone()).collect()
        };
        assert_eq!(ids(json!({})), [json!("boss"), json!("w1"), json!("w2")]);
        assert_eq!(ids(json!({ "capability": "search", "agent_type": "worker" })), [json!("w1")]);
        assert_eq!(ids(json!({ "capabilities": ["search", "write"] })), Vec::<Value>::new());
        assert_eq!(ids(json!({ "agent_type": "worker", "mode": "static" })), [json!("w2")]);
        assert_eq!(ids(json!({ "status": "online", "capability": "coordinate" })), [json!("boss")]);
        let found = ok("a2a.discover", json!({ "capability": "search" }), "x", &ns);
        let w1 = &found["a2a_agents"][0];
        assert_eq!(w1["capabilities"], json!(["search", "summarize"]));
        assert_eq!(w1["namespace"], json!(ns));
        assert!(w1["last_seen"].as_f64().is_some());
        assert_eq!(ok("a2a.heartbeat", json!({}), "w1", &ns)["a2a_status"], "online");
        assert_eq!(ok("a2a.heartbeat", json!({}), "nobody", &ns)["a2a_heartbeat"], Value::Null);
    }

    #[test]
    fn caller_comes_from_with_then_state_then_settings() {
        let ns = room("who");
        let settings = A2aSettings { agent_id: "from-settings".to_owned(), namespace: ns.clone() };
        let send = |state: &Map<String, Value>, with: Value| {
            call(A2a::Send, &with, state, &settings).unwrap();
        };
        let mut state = Map::new();
        send(&state, json!({ "to": "bob", "message": {} }));
        state.insert("_agent_id".to_owned(), json!("from-state"));
        send(&state, json!({ "to": "bob", "message": {} }));
        send(&state, json!({ "to": "bob", "message": {}, "agent_id": "from-with" }));
        let got = messages(&ok("a2a.receive", json!({}), "bob", &ns));
        let from: Vec<_> = got.iter().map(|m| m["from_agent"].clone()).collect();
        assert_eq!(from, [json!("from-settings"), json!("from-state"), json!("from-with")]);
        let defaults = call(A2a::Register, &json!({}), &Map::new(), &A2aSettings::default()).unwrap();
        assert_eq!((&defaults["_agent_id"], &defaults["_namespace"]), (&json!("default-agent"), &json!("default")));
    }

    #[test]
    fn bad_arguments_are_errors() {
        let cases = [
            ("a2a.send", json!({ "to": 3, "message": {} }), "a2a.send: `to` must be a non-empty string, not 3"),
            ("a2a.send", json!({ "to": "b" }), "a2a.send: `message` is required"),
            ("a2a.send", json!({ "to": "b", "message": "hi" }), "a2a.send: `message` must be a mapping, not \"hi\""),
            ("a2a.send", json!({ "to": "b", "message": { "type": 1 } }), "`message.type` must be a string"),
            ("a2a.send", json!({ "to": "b", "message": {}, "ttl": -1 }), "a2a.send: `ttl` must be a duration"),
            ("a2a.send", json!([1]), "a2a.send: its arguments (`with:`) must be a mapping"),
            ("a2a.receive", json!({ "timeout": "soon" }), "a2a.receive: `timeout` must be a duration"),
            ("a2a.receive", json!({ "timeout": 1, "timeout_ms": 1 }), "give `timeout` or `timeout_ms`, not both"),
            ("a2a.receive", json!({ "from": [1] }), "a2a.receive: `from` must be a string or a list of strings"),
            ("a2a.receive", json!({ "require_all": "yes" }), "`require_all` must be true or false"),
            ("a2a.broadcast", json!({}), "a2a.broadcast: `message` is required"),
            ("a2a.delegate", json!({ "to": "w" }), "a2a.delegate: `task` (or `request`) is required"),
            ("a2a.delegate", json!({ "to": "w", "task": {}, "on_timeout": "panic" }), "`on_timeout` must be"),
            (
                "a2a.delegate",
                json!({ "to": "w", "task": {}, "on_timeout": "fallback_local" }),
                "`on_timeout: fallback_local` needs `fallback`",
            ),
            ("a2a.delegate", json!({ "to": "w", "task": {}, "fallback": { "action": 1 } }), "`fallback.action`"),
            ("a2a.delegate", json!({ "to": "w", "task": {}, "request": {} }), "give `task` or `request`, not both"),
            ("a2a.state.get", json!({}), "a2a.state.get: `key` is required"),
            ("a2a.state.set", json!({ "key": "k" }), "a2a.state.set: `value` is required"),
            (
                "a2a.state.set",
                json!({ "key": "k", "value": 1, "expected_version": -2 }),
                "`expected_version` must be a whole number",
            ),
            ("a2a.state.cas", json!({ "key": "k" }), "a2a.state.cas: `new_value` is required"),
            ("a2a.discover", json!({ "mode": "everything" }), "a2a.discover: `mode` must be"),
            ("a2a.register", json!({ "metadata": [] }), "a2a.register: `metadata` must be a mapping"),
            ("a2a.heartbeat", json!({ "agent_id": "" }), "a2a.heartbeat: `agent_id` must be a non-empty string"),
        ];
        for (name, args, expected) in cases {
            let e = err(name, args);
            assert!(e.contains(expected), "{name}: {e:?} lacks {expected:?}");
        }
        // Nothing was sent by a delegate that failed on its arguments.
        assert!(messages(&ok("a2a.receive", json!({}), "w", "test-errors")).is_empty());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration(" 5M "), Some(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("1m 30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("-1s"), None);
        assert_eq!(parse_duration("soon"), None);
    }
}
