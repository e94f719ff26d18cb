//! The actions that reach the network (feature `net`): `llm.call` (an OpenAI-compatible chat
//! model), `http.get`, `http.post` and `actions.notify` (a webhook, or a line on stderr).
//!
//! A call is prepared from the node's rendered `with:` (its keys checked, the file's
//! `settings:` merged in) into an owned future, which runs on tea-yaml's own tokio runtime:
//! the blocking API ([`block_on`]) waits for it on the calling thread, the async driver
//! ([`spawn`]) awaits it without holding a thread. All connections live on that one runtime,
//! so a caller's runtime that ends never strands a pooled connection.
//!
//! Transient failures — a refused connection, 429, 5xx — are retried with exponential backoff
//! (`retry: {max, base_ms}`, honouring `Retry-After`); `timeout` bounds each attempt. Errors
//! name the action, the method and the endpoint (without its query string) and the status,
//! never the API key: it is taken out of every message.
//!
//! `llm.call`, `llm.chat`, `llm.embed`, `http.get`, `http.post`, `actions.notify` (the LLM ones
//! through `actions/net/llm.rs`'s providers): `prepare` checks a node's rendered `with:` (the
//! file's `settings.llm`/`settings.notify` merged in by `YamlGraph::prepare_net`) into an owned
//! future; it runs on tea-yaml's own tokio runtime (one reqwest client, so connections never belong
//! to a caller's runtime), waited for by `block_on` (the blocking API) or awaited through `spawn`
//! (the async driver; dropping it aborts the request). Retries, timeouts, the body cap and errors
//! that name the endpoint live here. `YamlGraph { agent, asynchronous, cancel }`: only the graph
//! built for the async driver reports network nodes as `is_async`; the blocking API's graph runs
//! them with `run` (so it stays a `SyncGraph` and never meets `NeedsAsync`). `Agent` holds one
//! `App` of each (feature `tokio`: the `…_async` methods), on the same store.
//!
//! - `llm.rs` — the LLM providers of `llm.call`, `llm.chat` and `llm.embed`, and shell providers.

pub(crate) mod llm;

use crate::grants::AgentGrants;
use serde_json::{json, Map, Value};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;
use tea_runtime::BoxError;

/// The largest response body an action reads: 16 MiB.
pub(crate) const MAX_BODY: usize = 16 << 20;
/// `retry:` when a call sets none: two more attempts, 500 ms then 1 s apart.
const DEFAULT_RETRY: Retry = Retry { max: 2, base_ms: 500 };
/// No wait between attempts is longer than this, whatever the backoff or `Retry-After` says.
const MAX_WAIT: Duration = Duration::from_secs(30);

/// One of the network actions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NetAction {
    LlmCall,
    /// `llm.chat`: `llm.call` whose result also says `backend: api` (The Edge Agent's chat
    /// action, whose local models tea does not run).
    LlmChat,
    /// `llm.embed`: an embedding from an OpenAI-compatible `/embeddings` endpoint.
    LlmEmbed,
    HttpGet,
    HttpPost,
    Notify,
}

impl NetAction {
    /// The action named `name`.
    pub(crate) fn named(name: &str) -> Option<NetAction> {
        Some(match name {
            "llm.call" => NetAction::LlmCall,
            "llm.chat" => NetAction::LlmChat,
            "llm.embed" => NetAction::LlmEmbed,
            "http.get" => NetAction::HttpGet,
            "http.post" => NetAction::HttpPost,
            "actions.notify" => NetAction::Notify,
            _ => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            NetAction::LlmCall => "llm.call",
            NetAction::LlmChat => "llm.chat",
            NetAction::LlmEmbed => "llm.embed",
            NetAction::HttpGet => "http.get",
            NetAction::HttpPost => "http.post",
            NetAction::Notify => "actions.notify",
        }
    }

    /// The keys its `with:` may hold.
    pub(crate) fn keys(self) -> &'static [&'static str] {
        match self {
            NetAction::LlmCall | NetAction::LlmChat => &[
                "model",
                "messages",
                "prompt",
                "system",
                "base_url",
                "api_base",
                "api_key",
                "provider",
                "deployment",
                "shell_provider",
                "shell_providers",
                "temperature",
                "max_tokens",
                "top_p",
                "stop",
                "seed",
                "response_format",
                "extra_body",
                "backend",
                "timeout",
                "retry",
                "max_retries",
            ],
            NetAction::LlmEmbed => &[
                "text",
                "model",
                "provider",
                "base_url",
                "api_base",
                "api_key",
                "deployment",
                "backend",
                "timeout",
                "retry",
                "max_retries",
            ],
            NetAction::HttpGet => &["url", "headers", "query", "timeout", "retry", "fail_on_status"],
            NetAction::HttpPost => &["url", "headers", "query", "json", "body", "timeout", "retry", "fail_on_status"],
            NetAction::Notify => &["title", "message", "channel", "url", "headers", "timeout", "retry"],
        }
    }

    /// The arguments that send a secret out, so the only ones whose templates may read
    /// `secrets`: an API key, request headers and query, a webhook's address and headers.
    pub(crate) fn sending_keys(self) -> &'static [&'static str] {
        match self {
            NetAction::LlmCall | NetAction::LlmChat | NetAction::LlmEmbed => &["api_key"],
            NetAction::HttpGet | NetAction::HttpPost => &["headers", "query"],
            NetAction::Notify => &["url", "headers"],
        }
    }

    /// The `settings:` section whose keys are its defaults.
    pub(crate) fn section(self) -> Option<Section> {
        match self {
            NetAction::LlmCall | NetAction::LlmChat => Some(Section::Llm),
            NetAction::Notify => Some(Section::Notify),
            NetAction::HttpGet | NetAction::HttpPost | NetAction::LlmEmbed => None,
        }
    }
}

/// A section of the file's `settings:`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Section {
    Llm,
    Notify,
}

/// `retry: {max, base_ms}`: `max` more attempts after the first, waiting `base_ms`, then twice
/// that, and so on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Retry {
    pub(crate) max: u32,
    pub(crate) base_ms: u64,
}

impl Retry {
    fn wait(self, attempt: u32) -> Duration {
        let ms = self.base_ms.saturating_mul(1u64 << attempt.min(20));
        Duration::from_millis(ms).min(MAX_WAIT)
    }
}

/// A prepared call: everything it needs, owned.
pub(crate) type Call = Pin<Box<dyn Future<Output = Result<Value, String>> + Send + 'static>>;

/// Checks `args` (the rendered `with:` with the settings merged in) and prepares the call.
/// `key` is the API key to use when `args` names none (the LLM actions only); `shells` are the
/// shell providers the agent may run.
pub(crate) fn prepare(
    action: NetAction,
    args: Value,
    key: Option<String>,
    shells: &crate::actions::net::llm::Shells,
) -> Result<Call, String> {
    let what = action.name();
    let Value::Object(args) = args else {
        return Err(format!("{what}: `with:` must be a mapping of arguments, not {}", crate::state::describe(&args)));
    };
    if let Some(unknown) = args.keys().find(|k| !action.keys().contains(&k.as_str())) {
        let hint = crate::error::suggest(unknown, action.keys().iter().copied());
        return Err(format!("{what}: unknown argument `{unknown}`{hint}; it takes {}", action.keys().join(", ")));
    }
    let retry = retry_arg(what, &args)?;
    Ok(match action {
        NetAction::LlmCall | NetAction::LlmChat => {
            let what = action.name();
            let backend = text_arg(what, &args, "backend")?;
            if let Some(b) = backend.as_deref().filter(|b| !matches!(*b, "api" | "auto")) {
                return Err(format!(
                    "{what}: `backend: {b}`: tea runs no local model; it calls the provider's API (`backend: api`)"
                ));
            }
            let provider =
                crate::actions::net::llm::Provider::of(what, &args, crate::actions::net::llm::Provider::OpenAi)?;
            if provider == crate::actions::net::llm::Provider::Shell {
                let messages = messages_arg(what, &args)?;
                let call = crate::actions::net::llm::shell_call(
                    what,
                    &args,
                    messages.as_array().map_or(&[], Vec::as_slice),
                    shells,
                )?;
                let chat = action == NetAction::LlmChat;
                return Ok(Box::pin(async move {
                    let mut answer = call.run(what).await?;
                    if chat {
                        answer["backend"] = json!("shell");
                    }
                    Ok(answer)
                }));
            }
            let request = LlmRequest::new(what, provider, &args, key)?;
            if action == NetAction::LlmChat {
                Box::pin(async move {
                    let mut answer = llm_call(request, retry).await?;
                    answer["backend"] = json!("api");
                    Ok(answer)
                })
            } else {
                Box::pin(llm_call(request, retry))
            }
        }
        NetAction::LlmEmbed => Box::pin(embed(EmbedRequest::new(&args, key)?, retry)),
        NetAction::HttpGet | NetAction::HttpPost => Box::pin(http(HttpRequest::new(action, &args)?, retry)),
        NetAction::Notify => {
            let title = text_arg(what, &args, "title")?.unwrap_or_default();
            let message = text_arg(what, &args, "message")?.unwrap_or_default();
            // The Edge Agent's `channel` (`slack`, `email`, …) names where its integrations
            // send; tea has one webhook, and passes the channel along in its body.
            let channel = text_arg(what, &args, "channel")?;
            if args.get("url").is_none_or(Value::is_null) {
                for key in ["headers", "timeout", "retry"] {
                    if args.contains_key(key) {
                        return Err(format!("{what}: `{key}` goes with `url` (a webhook), and there is none"));
                    }
                }
                // No webhook: a line for the person at the terminal.
                eprintln!("tea: notify: {title}: {message}");
                return Ok(Box::pin(std::future::ready(Ok(json!({ "sent": false, "via": "stderr" })))));
            }
            let mut post = args.clone();
            post.remove("title");
            post.remove("message");
            post.remove("channel");
            let mut body = json!({ "title": title, "message": message });
            if let Some(channel) = channel {
                body["channel"] = json!(channel);
            }
            post.insert("json".to_owned(), body);
            let request = HttpRequest::new(NetAction::Notify, &post)?;
            Box::pin(async move {
                let answer = http(request, retry).await?;
                Ok(json!({ "sent": true, "status": answer["status"] }))
            })
        }
    })
}

tokio::task_local! {
    /// The grants of the agent whose call runs on this task: [`send`] checks every request
    /// against them, and refuses any request made outside such a task.
    static GRANTS: Arc<AgentGrants>;
}

/// Runs `call` on tea-yaml's runtime, under `grants`, and waits for it on this thread (the
/// blocking API).
pub(crate) fn block_on(call: Call, grants: &Arc<AgentGrants>) -> Result<Value, BoxError> {
    let net = net()?;
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    net.runtime.spawn(GRANTS.scope(grants.clone(), async move {
        let _ = tx.send(call.await);
    }));
    rx.recv().map_err(|_| BoxError::from("the request's task ended without an answer"))?.map_err(BoxError::from)
}

/// Runs `call` on tea-yaml's runtime, under `grants`; the returned future waits for it
/// without holding a thread, and dropping it cancels the call.
pub(crate) fn spawn(call: Call, grants: &Arc<AgentGrants>) -> Result<Spawned, BoxError> {
    Ok(Spawned(net()?.runtime.spawn(GRANTS.scope(grants.clone(), call))))
}

/// A call running on tea-yaml's runtime, cancelled when dropped.
pub(crate) struct Spawned(tokio::task::JoinHandle<Result<Value, String>>);

impl Future for Spawned {
    type Output = Result<Value, BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx).map(|joined| match joined {
            Ok(result) => result.map_err(BoxError::from),
            Err(e) => Err(format!("the request's task failed: {e}").into()),
        })
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// tea-yaml's runtime and the HTTP client whose connections live on it.
struct Net {
    runtime: tokio::runtime::Runtime,
    client: reqwest::Client,
}

fn net() -> Result<&'static Net, BoxError> {
    static NET: OnceLock<Result<Net, String>> = OnceLock::new();
    let net = NET.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("tea-yaml-net")
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the runtime of the network actions: {e}"))?;
        let client = reqwest::Client::builder()
            .user_agent(concat!("tea-yaml/", env!("CARGO_PKG_VERSION")))
            // A redirect is followed only to the same host and port: a request's grant, and the
            // secrets it carries, are for the host it was checked against.
            .redirect(reqwest::redirect::Policy::custom(|attempt| {
                let to = (attempt.url().host_str().map(str::to_owned), attempt.url().port_or_known_default());
                let from =
                    attempt.previous().first().map(|u| (u.host_str().map(str::to_owned), u.port_or_known_default()));
                if attempt.previous().len() > 10 {
                    attempt.error("more than 10 redirects")
                } else if from.is_some_and(|from| from == to) {
                    attempt.follow()
                } else {
                    let host = to.0.unwrap_or_default();
                    attempt.error(format!(
                        "a redirect to another host (`{host}`) is not followed: a request goes only to the host it was \
                         granted for"
                    ))
                }
            }))
            .build()
            .map_err(|e| format!("cannot build the HTTP client of the network actions: {e}"))?;
        Ok(Net { runtime, client })
    });
    net.as_ref().map_err(|e| BoxError::from(e.clone()))
}

pub(crate) fn client() -> Result<reqwest::Client, String> {
    net().map(|n| n.client.clone()).map_err(|e| e.to_string())
}

// ---------------------------------------------------------------------------------------------
// Arguments.

pub(crate) fn text_arg(what: &str, args: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(format!("{what}: `{key}` must be a string, not {}", crate::state::describe(other))),
    }
}

/// `timeout`: seconds (a positive number).
pub(crate) fn timeout_arg(what: &str, args: &Map<String, Value>, default: Duration) -> Result<Duration, String> {
    match args.get("timeout") {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Number(n)) if n.as_f64().is_some_and(|s| s > 0.0 && s <= 86_400.0) => {
            Ok(Duration::from_secs_f64(n.as_f64().unwrap_or(1.0)))
        }
        Some(other) => Err(format!(
            "{what}: `timeout` must be a number of seconds between 0 and 86400, not {}",
            crate::state::describe(other)
        )),
    }
}

fn retry_arg(what: &str, args: &Map<String, Value>) -> Result<Retry, String> {
    // The Edge Agent's `max_retries` (its LLM actions'): that many more attempts, 1 s apart
    // and doubling.
    let max_retries = args.get("max_retries").filter(|v| !v.is_null());
    if let Some(n) = max_retries {
        if args.get("retry").is_some_and(|v| !v.is_null()) {
            return Err(format!("{what}: `retry` and `max_retries` say the same thing; give one"));
        }
        return match n.as_u64() {
            Some(n) if n <= 20 => Ok(Retry { max: n as u32, base_ms: 1_000 }),
            _ => Err(format!(
                "{what}: `max_retries` must be a whole number of attempts (0 to 20), not {}",
                crate::state::describe(n)
            )),
        };
    }
    let Some(value) = args.get("retry").filter(|v| !v.is_null()) else { return Ok(DEFAULT_RETRY) };
    let Value::Object(map) = value else {
        return Err(format!("{what}: `retry` must be `{{max, base_ms}}`, not {}", crate::state::describe(value)));
    };
    let mut retry = DEFAULT_RETRY;
    for (key, v) in map {
        let n = v.as_u64();
        match (key.as_str(), n) {
            ("max", Some(n)) if n <= 20 => retry.max = n as u32,
            ("base_ms", Some(n)) if n <= 60_000 => retry.base_ms = n,
            ("max" | "base_ms", _) => {
                return Err(format!(
                    "{what}: `retry.{key}` must be a whole number ({}), not {}",
                    if key == "max" { "0 to 20 attempts" } else { "0 to 60000 ms" },
                    crate::state::describe(v)
                ))
            }
            (other, _) => {
                return Err(format!("{what}: unknown key `retry.{other}`; `retry` takes `max` and `base_ms`"));
            }
        }
    }
    Ok(retry)
}

/// A URL argument: http or https, shown without its query string.
pub(crate) fn url_arg(what: &str, args: &Map<String, Value>, key: &str) -> Result<reqwest::Url, String> {
    let text = text_arg(what, args, key)?.ok_or_else(|| format!("{what} needs `{key}`"))?;
    let url = reqwest::Url::parse(&text).map_err(|e| format!("{what}: `{key}` is not a URL ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("{what}: `{key}` must be an http:// or https:// URL, not a `{}:` one", url.scheme()));
    }
    Ok(url)
}

/// An endpoint as messages show it: no query string, no user or password.
pub(crate) fn shown(url: &reqwest::Url) -> String {
    let mut url = url.clone();
    url.set_query(None);
    url.set_fragment(None);
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.to_string()
}

fn headers_arg(what: &str, args: &Map<String, Value>) -> Result<reqwest::header::HeaderMap, String> {
    let mut headers = reqwest::header::HeaderMap::new();
    let Some(value) = args.get("headers").filter(|v| !v.is_null()) else { return Ok(headers) };
    let Value::Object(map) = value else {
        return Err(format!("{what}: `headers` must be a mapping of names to values"));
    };
    for (name, value) in map {
        let text = match value {
            Value::String(s) => s.clone(),
            Value::Number(_) | Value::Bool(_) => value.to_string(),
            other => {
                return Err(format!("{what}: header `{name}` must be a string, not {}", crate::state::describe(other)))
            }
        };
        let name_ok = reqwest::header::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("{what}: `{name}` is not a header name"))?;
        // The value is not shown: it is often a credential.
        let value_ok = reqwest::header::HeaderValue::from_str(&text)
            .map_err(|_| format!("{what}: the value of header `{name}` is not a valid header value"))?;
        headers.insert(name_ok, value_ok);
    }
    Ok(headers)
}

// ---------------------------------------------------------------------------------------------
// Sending, with retries.

/// What came back: status, headers, body.
pub(crate) struct Answer {
    /// How many requests were sent.
    pub(crate) attempts: u32,
    pub(crate) status: reqwest::StatusCode,
    pub(crate) headers: reqwest::header::HeaderMap,
    pub(crate) body: Vec<u8>,
}

/// Sends the request `build` makes, retrying refused connections, 429s and 5xx as `retry`
/// says. The last answer is returned whatever its status; `Err` when no answer came.
pub(crate) async fn send(
    what: &str,
    endpoint: &str,
    retry: Retry,
    timeout: Duration,
    build: impl Fn() -> reqwest::RequestBuilder,
) -> Result<Answer, String> {
    let mut attempt = 0u32;
    loop {
        let attempts = attempt + 1;
        let tried = after(attempts);
        // Sent by tea-yaml's client whatever client built it: its redirect policy holds.
        let (_, request) = build().timeout(timeout).build_split();
        let client = client()?;
        let request = request.map_err(|e| format!("{what}: {endpoint}: {}", chain(&e.without_url())))?;
        granted(&request).map_err(|e| format!("{what}: {endpoint}: {e}"))?;
        match client.execute(request).await {
            Err(e) if e.is_connect() && attempt < retry.max => {}
            Err(e) if e.is_timeout() => {
                return Err(format!("{what}: {endpoint} did not answer within {}{tried}", seconds(timeout)));
            }
            Err(e) if e.is_connect() => {
                return Err(format!("{what}: cannot connect to {endpoint}{tried}: {}", chain(&e.without_url())));
            }
            Err(e) => return Err(format!("{what}: {endpoint}: {}", chain(&e.without_url()))),
            Ok(response) => {
                let status = response.status();
                let transient = status == reqwest::StatusCode::TOO_MANY_REQUESTS || status.is_server_error();
                if transient && attempt < retry.max {
                    let later = retry_after(response.headers());
                    drop(response);
                    tokio::time::sleep(retry.wait(attempt).max(later.unwrap_or_default()).min(MAX_WAIT)).await;
                    attempt += 1;
                    continue;
                }
                let headers = response.headers().clone();
                let body = read_body(what, endpoint, response, timeout).await?;
                return Ok(Answer { attempts, status, headers, body });
            }
        }
        tokio::time::sleep(retry.wait(attempt)).await;
        attempt += 1;
    }
}

/// Whether `request` may be sent: its host granted, every secret it carries bound to that
/// host (the grants of the task's agent). Refused outside an agent's task.
fn granted(request: &reqwest::Request) -> Result<(), String> {
    let url = request.url();
    let host = url.host_str().unwrap_or_default();
    let port = url.port_or_known_default().unwrap_or(0);
    let decoded = percent_decoded(url.as_str());
    let body = request.body().and_then(reqwest::Body::as_bytes).unwrap_or_default();
    let carried = |value: &str| {
        let escaped = serde_json::to_string(value).unwrap_or_default();
        let escaped = escaped.trim_matches('"');
        let forms = [value.as_bytes(), escaped.as_bytes()];
        decoded.contains(value)
            || url.query_pairs().any(|(k, v)| k.contains(value) || v.contains(value))
            || request.headers().values().any(|v| contains(v.as_bytes(), value.as_bytes()))
            || forms.iter().any(|f| contains(body, f))
    };
    GRANTS
        .try_with(|grants| grants.check_request(host, port, &carried))
        .unwrap_or_else(|_| Err("a request made outside an agent's run is refused (it has no grants)".to_owned()))
}

/// Whether `needle` occurs in `haystack`.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// `text` with its `%XX` escapes decoded (lossily, as UTF-8).
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b'+', _, _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// ` (after N attempts)` when there was more than one.
fn after(attempts: u32) -> String {
    if attempts > 1 {
        format!(" (after {attempts} attempts)")
    } else {
        String::new()
    }
}

/// `Retry-After` in seconds, when an answer gives it so.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let text = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    text.trim().parse::<u64>().ok().map(Duration::from_secs)
}

async fn read_body(
    what: &str,
    endpoint: &str,
    mut response: reqwest::Response,
    timeout: Duration,
) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > MAX_BODY {
                    return Err(format!("{what}: the answer of {endpoint} is larger than {} MiB", MAX_BODY >> 20));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body),
            Err(e) if e.is_timeout() => {
                return Err(format!("{what}: {endpoint} did not finish its answer within {}", seconds(timeout)));
            }
            Err(e) => {
                return Err(format!("{what}: reading the answer of {endpoint}: {}", chain(&e.without_url())));
            }
        }
    }
}

fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0} s")
    } else {
        format!("{s} s")
    }
}

/// An error and its causes on one line ([`tea_runtime::error_chain`]).
fn chain(error: &dyn std::error::Error) -> String {
    tea_runtime::error_chain(error)
}

/// The start of a body, for an error message: as tea-models' errors show one.
pub(crate) use tea_models::excerpt;

/// `429 Too Many Requests`.
fn status_text(status: reqwest::StatusCode) -> String {
    match status.canonical_reason() {
        Some(reason) => format!("{} {reason}", status.as_u16()),
        None => status.as_u16().to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// llm.call

/// `messages` (or `prompt` with `system`) of an LLM call, checked: a list of `{role, content}`.
fn messages_arg(what: &str, args: &Map<String, Value>) -> Result<Value, String> {
    Ok(match (args.get("messages").filter(|v| !v.is_null()), text_arg(what, args, "prompt")?) {
        (Some(_), Some(_)) => return Err(format!("{what}: give `messages` or `prompt`, not both")),
        (None, None) => return Err(format!("{what} needs `messages: [{{role, content}}]` (or a `prompt`)")),
        (None, Some(prompt)) => {
            let mut list = Vec::new();
            if let Some(system) = text_arg(what, args, "system")? {
                list.push(json!({ "role": "system", "content": system }));
            }
            list.push(json!({ "role": "user", "content": prompt }));
            Value::Array(list)
        }
        (Some(messages), None) => {
            if args.contains_key("system") {
                return Err(format!(
                    "{what}: `system` goes with `prompt`; with `messages`, add a message of role `system`"
                ));
            }
            let Value::Array(items) = messages else {
                return Err(format!(
                    "{what}: `messages` must be a list of {{role, content}}, not {}",
                    crate::state::describe(messages)
                ));
            };
            if items.is_empty() {
                return Err(format!("{what}: `messages` is empty"));
            }
            for (i, m) in items.iter().enumerate() {
                let ok = m.get("role").is_some_and(Value::is_string) && m.get("content").is_some();
                if !ok {
                    return Err(format!(
                        "{what}: `messages[{i}]` must be a mapping with `role` (a string) and `content`"
                    ));
                }
            }
            messages.clone()
        }
    })
}

/// A provider's endpoint as a URL, checked.
pub(crate) fn endpoint_url(what: &str, url: String) -> Result<reqwest::Url, String> {
    let mut with_url = Map::new();
    with_url.insert("base_url".to_owned(), Value::String(url));
    url_arg(what, &with_url, "base_url")
}

/// A chat request, checked: sent by tea-models' OpenAI-compatible or Anthropic provider, the
/// ones Rust agents use, through tea-yaml's client and under the agent's grants.
struct LlmRequest {
    what: &'static str,
    api: crate::actions::net::llm::Api,
    url: reqwest::Url,
    key: Option<String>,
    /// The key goes in an `api-key` header (Azure).
    api_key_header: bool,
    model: String,
    messages: Vec<tea_runtime::Message>,
    options: tea_models::ChatOptions,
    timeout: Duration,
}

impl LlmRequest {
    fn new(
        what: &'static str,
        provider: crate::actions::net::llm::Provider,
        args: &Map<String, Value>,
        fallback_key: Option<String>,
    ) -> Result<LlmRequest, String> {
        let messages = messages_arg(what, args)?;
        let messages: Vec<tea_runtime::Message> = match messages {
            Value::Array(items) => items
                .into_iter()
                .enumerate()
                .map(|(i, m)| {
                    serde_json::from_value(m).map_err(|e| format!("{what}: `messages[{i}]` is not a chat message: {e}"))
                })
                .collect::<Result<_, _>>()?,
            _ => return Err(format!("{what}: `messages` must be a list of {{role, content}}")),
        };
        let endpoint = crate::actions::net::llm::endpoint(
            what,
            provider,
            args,
            fallback_key,
            crate::actions::net::llm::CHAT_PATH,
            crate::actions::net::llm::DEFAULT_CHAT_MODEL,
        )?;
        let anthropic = endpoint.api == crate::actions::net::llm::Api::Anthropic;
        let url = endpoint_url(what, endpoint.url)?;
        let mut options = tea_models::ChatOptions::new();
        for key in ["temperature", "top_p"] {
            match args.get(key) {
                None | Some(Value::Null) => {}
                Some(Value::Number(n)) => {
                    let n = n.as_f64();
                    if key == "temperature" {
                        options.temperature = n;
                    } else {
                        options.top_p = n;
                    }
                }
                Some(other) => {
                    return Err(format!("{what}: `{key}` must be a number, not {}", crate::state::describe(other)))
                }
            }
        }
        match args.get("max_tokens") {
            None | Some(Value::Null) => {}
            Some(v) if v.as_u64().is_some_and(|n| n > 0 && n <= u64::from(u32::MAX)) => {
                options.max_tokens = v.as_u64().and_then(|n| u32::try_from(n).ok());
            }
            Some(other) => {
                return Err(format!(
                    "{what}: `max_tokens` must be a positive whole number, not {}",
                    crate::state::describe(other)
                ))
            }
        }
        if anthropic {
            anthropic_options(what, args, &mut options)?;
        } else {
            // Sent as they are written: `stop` may be a text or a list, `response_format` any
            // form the server takes.
            for key in ["stop", "seed", "response_format"] {
                if let Some(v) = args.get(key).filter(|v| !v.is_null()) {
                    options.extra.insert(key.to_owned(), v.clone());
                }
            }
        }
        // The OpenAI client's `extra_body`: more fields of the request's body.
        match args.get("extra_body") {
            None | Some(Value::Null) => {}
            Some(Value::Object(extra)) => {
                for (k, v) in extra {
                    options.extra.insert(k.clone(), v.clone());
                }
            }
            Some(other) => {
                return Err(format!("{what}: `extra_body` must be a mapping, not {}", crate::state::describe(other)))
            }
        }
        let timeout = timeout_arg(what, args, Duration::from_secs(120))?;
        Ok(LlmRequest {
            what,
            api: endpoint.api,
            url,
            key: endpoint.key,
            api_key_header: endpoint.api_key_header,
            model: endpoint.model,
            messages,
            options,
            timeout,
        })
    }

    /// The provider that sends it: tea-yaml's client (its redirect policy), each request
    /// checked against the agent's grants (`granted`) and bounded by the call's timeout.
    fn provider(&self) -> Result<Box<dyn tea_models::ChatModel>, String> {
        let timeout = self.timeout;
        let hook = move |request: &mut reqwest::Request| {
            *request.timeout_mut() = Some(timeout);
            granted(request)
        };
        let key = self.key.clone().unwrap_or_default();
        Ok(match self.api {
            crate::actions::net::llm::Api::OpenAi => Box::new(
                tea_models::OpenAi::compatible(self.url.as_str(), self.model.clone())
                    .url(self.url.as_str())
                    .api_key_header(self.api_key_header)
                    .api_key(key)
                    .client(client()?)
                    .request_hook(hook),
            ),
            crate::actions::net::llm::Api::Anthropic => Box::new(
                tea_models::Anthropic::new(self.url.as_str(), self.model.clone())
                    .url(self.url.as_str())
                    .api_key(key)
                    .client(client()?)
                    .request_hook(hook),
            ),
        })
    }
}

/// The options of a call to Anthropic's Messages API that are not OpenAI's: `stop` (a text or
/// a list) becomes `stop_sequences`; `response_format` of OpenAI's `json_schema` form a schema
/// the answer follows (tea-models asks for it as a tool the model must call); `seed`, which the
/// API does not take, is refused.
fn anthropic_options(
    what: &str,
    args: &Map<String, Value>,
    options: &mut tea_models::ChatOptions,
) -> Result<(), String> {
    match args.get("stop") {
        None | Some(Value::Null) => {}
        Some(Value::String(stop)) => options.stop = vec![stop.clone()],
        Some(Value::Array(list)) if list.iter().all(Value::is_string) => {
            options.stop = list.iter().filter_map(Value::as_str).map(str::to_owned).collect();
        }
        Some(other) => {
            return Err(format!(
                "{what}: `stop` must be a text or a list of texts, not {}",
                crate::state::describe(other)
            ))
        }
    }
    if args.get("seed").is_some_and(|v| !v.is_null()) {
        return Err(format!("{what}: `seed`: Anthropic's Messages API takes no seed (`provider: anthropic`)"));
    }
    if let Some(format) = args.get("response_format").filter(|v| !v.is_null()) {
        let schema =
            format.get("json_schema").filter(|_| format.get("type").and_then(Value::as_str) == Some("json_schema"));
        let Some(schema) = schema else {
            return Err(format!(
                "{what}: `response_format` with `provider: anthropic` must be `{{type: json_schema, json_schema: \
                 {{name, schema}}}}`, not {}",
                crate::state::describe(format)
            ));
        };
        let name = schema.get("name").and_then(Value::as_str).unwrap_or("answer").to_owned();
        let Some(body) = schema.get("schema").filter(|s| s.is_object()) else {
            return Err(format!("{what}: `response_format.json_schema.schema` must be a JSON Schema (a mapping)"));
        };
        options.json_schema = Some(tea_models::JsonSchema { name, schema: body.clone(), strict: false });
    }
    Ok(())
}

/// The request `builder` with the API key in its header (`llm.embed`'s).
fn authorized(builder: reqwest::RequestBuilder, key: Option<&String>, api_key_header: bool) -> reqwest::RequestBuilder {
    match key {
        Some(key) if api_key_header => builder.header("api-key", key),
        Some(key) => builder.bearer_auth(key),
        None => builder,
    }
}

/// Whether `llm.call` tries again after `error`: a refused connection, 429, or a 5xx status.
fn retried(error: &tea_models::ModelError) -> bool {
    error.is_connect() || error.status().is_some_and(|s| s == 429 || s >= 500)
}

async fn llm_call(request: LlmRequest, retry: Retry) -> Result<Value, String> {
    use tea_models::{ChatModel, ModelError};
    let what = request.what;
    let endpoint = format!("POST {}", shown(&request.url));
    // The key is taken out of whatever the server said back.
    let hide = |text: String| match &request.key {
        Some(key) if key.len() >= 4 => text.replace(key.as_str(), "***"),
        _ => text,
    };
    let model = request.provider().map_err(hide)?;
    let chat = tea_models::ChatRequest::new(&request.messages).options(request.options.clone());
    let mut attempt = 0u32;
    let reply = loop {
        let tried = after(attempt + 1);
        let error = match model.chat(chat.clone()).await {
            Ok(reply) => break reply,
            Err(error) if retried(&error) && attempt < retry.max => {
                let later = error.retry_after().unwrap_or_default();
                tokio::time::sleep(retry.wait(attempt).max(later).min(MAX_WAIT)).await;
                attempt += 1;
                continue;
            }
            Err(error) => error,
        };
        return Err(hide(match error {
            ModelError::Status { status, message, .. } => {
                let status = reqwest::StatusCode::from_u16(status).map_or_else(|_| status.to_string(), status_text);
                format!("{what}: {endpoint} answered {status}{tried}: {message}")
            }
            ModelError::Transport { source, .. } if source.is_timeout() => {
                format!("{what}: {endpoint} did not answer within {}{tried}", seconds(request.timeout))
            }
            ModelError::Transport { source, .. } if source.is_connect() => {
                format!("{what}: cannot connect to {endpoint}{tried}: {}", chain(&source))
            }
            ModelError::Transport { source, .. } => format!("{what}: {endpoint}: {}", chain(&source)),
            ModelError::Decode { status, expected, why, excerpt, .. } => {
                let status = reqwest::StatusCode::from_u16(status).map_or_else(|_| status.to_string(), status_text);
                format!("{what}: the answer of {endpoint} ({status}) is not {expected}: {why}; it begins `{excerpt}`")
            }
            ModelError::TooLarge { limit, .. } => {
                format!("{what}: the answer of {endpoint} is larger than {} MiB", limit >> 20)
            }
            ModelError::Refused { why, .. } => format!("{what}: {endpoint}: {why}"),
            other => format!("{what}: {}", chain(&other)),
        }));
    };
    let content = match reply.message.content() {
        Some(tea_runtime::Content::Text(text)) => text.clone(),
        Some(parts) => parts.text(),
        None => {
            let (expected, field) = match request.api {
                crate::actions::net::llm::Api::OpenAi => ("a chat completion", "`choices[0].message.content`"),
                crate::actions::net::llm::Api::Anthropic => ("a Messages API answer", "its `content` blocks"),
            };
            return Err(hide(format!(
                "{what}: the answer of {endpoint} (200 OK) is not {expected}: no text in {field}"
            )));
        }
    };
    let count = |n: Option<u64>| n.map_or(Value::Null, Value::from);
    Ok(json!({
        "content": content,
        "response": content,
        "model": reply.model.unwrap_or_else(|| request.model.clone()),
        "finish_reason": reply.finish_reason.map_or(Value::Null, Value::from),
        "usage": {
            "prompt_tokens": count(reply.usage.input_tokens),
            "completion_tokens": count(reply.usage.output_tokens),
            "total_tokens": count(reply.usage.total()),
        },
    }))
}

// ---------------------------------------------------------------------------------------------
// llm.embed

/// An embeddings request, checked.
struct EmbedRequest {
    url: reqwest::Url,
    key: Option<String>,
    api_key_header: bool,
    body: Value,
    timeout: Duration,
}

impl EmbedRequest {
    /// `text` and `model` (The Edge Agent's default provider `ollama` and model
    /// `nomic-embed-text`), sent to the provider's OpenAI-compatible `/embeddings`.
    fn new(args: &Map<String, Value>, fallback_key: Option<String>) -> Result<EmbedRequest, String> {
        const WHAT: &str = "llm.embed";
        if let Some(b) = text_arg(WHAT, args, "backend")?.filter(|b| !matches!(b.as_str(), "api" | "auto")) {
            return Err(format!("{WHAT}: `backend: {b}`: tea runs no local model; it calls the provider's API"));
        }
        let text = text_arg(WHAT, args, "text")?.ok_or("llm.embed needs `text`, the text to embed")?;
        let provider = crate::actions::net::llm::Provider::of(WHAT, args, crate::actions::net::llm::Provider::Ollama)?;
        if provider == crate::actions::net::llm::Provider::Shell {
            return Err("llm.embed: a shell provider gives no embeddings".to_owned());
        }
        let endpoint = crate::actions::net::llm::endpoint(
            WHAT,
            provider,
            args,
            fallback_key,
            "embeddings",
            crate::actions::net::llm::DEFAULT_EMBED_MODEL,
        )?;
        let url = endpoint_url(WHAT, endpoint.url)?;
        let timeout = timeout_arg(WHAT, args, Duration::from_secs(120))?;
        Ok(EmbedRequest {
            url,
            key: endpoint.key,
            api_key_header: endpoint.api_key_header,
            body: json!({ "model": endpoint.model, "input": text }),
            timeout,
        })
    }
}

/// The embeddings of `texts`, in order, from one request to `provider`'s OpenAI-compatible
/// `/embeddings` (`args`: `model`, `base_url`/`api_base`, `api_key`, `deployment`; `key` when
/// they name none). For actions that embed many texts (`text.insert_citations`).
pub(crate) async fn embed_texts(
    what: &'static str,
    provider: crate::actions::net::llm::Provider,
    args: &Map<String, Value>,
    key: Option<String>,
    texts: &[String],
    default_model: &str,
) -> Result<Vec<Vec<f64>>, String> {
    let endpoint = crate::actions::net::llm::endpoint(what, provider, args, key, "embeddings", default_model)?;
    let url = endpoint_url(what, endpoint.url)?;
    let shown_url = format!("POST {}", shown(&url));
    let body = json!({ "model": endpoint.model, "input": texts });
    let client = client()?;
    let hide = |text: String| match &endpoint.key {
        Some(k) if k.len() >= 4 => text.replace(k.as_str(), "***"),
        _ => text,
    };
    let answer = send(what, &shown_url, DEFAULT_RETRY, Duration::from_secs(30), || {
        authorized(client.post(url.clone()).json(&body), endpoint.key.as_ref(), endpoint.api_key_header)
    })
    .await
    .map_err(hide)?;
    if !answer.status.is_success() {
        return Err(hide(format!("{shown_url} answered {}: {}", status_text(answer.status), excerpt(&answer.body))));
    }
    let parsed: Value =
        serde_json::from_slice(&answer.body).map_err(|e| format!("the answer of {shown_url} is not JSON ({e})"))?;
    let mut rows: Vec<(u64, Vec<f64>)> = Vec::new();
    for (i, row) in parsed.get("data").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let index = row.get("index").and_then(Value::as_u64).unwrap_or(i as u64);
        let vector = row
            .get("embedding")
            .and_then(Value::as_array)
            .and_then(|v| v.iter().map(Value::as_f64).collect::<Option<Vec<f64>>>())
            .ok_or_else(|| format!("the answer of {shown_url} has an item without a list of numbers as `embedding`"))?;
        rows.push((index, vector));
    }
    rows.sort_by_key(|(i, _)| *i);
    if rows.len() != texts.len() {
        return Err(format!("{shown_url} gave {} embeddings for {} texts", rows.len(), texts.len()));
    }
    Ok(rows.into_iter().map(|(_, v)| v).collect())
}

/// `{embedding, model, dimensions}` (The Edge Agent's result) from `data[0].embedding`.
async fn embed(request: EmbedRequest, retry: Retry) -> Result<Value, String> {
    const WHAT: &str = "llm.embed";
    let endpoint = format!("POST {}", shown(&request.url));
    let client = client()?;
    let hide = |text: String| match &request.key {
        Some(key) if key.len() >= 4 => text.replace(key.as_str(), "***"),
        _ => text,
    };
    let answer = send(WHAT, &endpoint, retry, request.timeout, || {
        authorized(client.post(request.url.clone()).json(&request.body), request.key.as_ref(), request.api_key_header)
    })
    .await
    .map_err(hide)?;
    if !answer.status.is_success() {
        return Err(hide(format!(
            "{WHAT}: {endpoint} answered {}{}: {}",
            status_text(answer.status),
            after(answer.attempts),
            excerpt(&answer.body)
        )));
    }
    let not_embedding = |why: &str| {
        hide(format!(
            "{WHAT}: the answer of {endpoint} is not an embedding: {why}; it begins `{}`",
            excerpt(&answer.body)
        ))
    };
    let body: Value = serde_json::from_slice(&answer.body).map_err(|e| not_embedding(&format!("not JSON ({e})")))?;
    let vector = body
        .get("data")
        .and_then(|d| d.get(0))
        .and_then(|d| d.get("embedding"))
        .or_else(|| body.get("embedding"))
        .and_then(Value::as_array)
        .filter(|v| v.iter().all(Value::is_number))
        .ok_or_else(|| not_embedding("no list of numbers in `data[0].embedding`"))?;
    let mut out = json!({
        "embedding": vector,
        "model": body.get("model").filter(|m| m.is_string()).cloned().unwrap_or_else(|| request.body["model"].clone()),
        "dimensions": vector.len(),
    });
    if let Some(tokens) = body.get("usage").and_then(|u| u.get("prompt_tokens")).filter(|t| t.is_u64()) {
        out["tokens_used"] = tokens.clone();
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// http.get, http.post (and the webhook of actions.notify)

enum Payload {
    None,
    Json(Value),
    Text(String),
}

struct HttpRequest {
    action: NetAction,
    url: reqwest::Url,
    headers: reqwest::header::HeaderMap,
    payload: Payload,
    timeout: Duration,
    fail_on_status: bool,
}

impl HttpRequest {
    fn new(action: NetAction, args: &Map<String, Value>) -> Result<HttpRequest, String> {
        let what = action.name();
        let mut url = url_arg(what, args, "url")?;
        if let Some(query) = args.get("query").filter(|v| !v.is_null()) {
            let Value::Object(pairs) = query else {
                return Err(format!("{what}: `query` must be a mapping of names to values"));
            };
            let mut out = url.query_pairs_mut();
            for (name, value) in pairs {
                let text = value.as_str().map_or_else(|| value.to_string(), str::to_owned);
                out.append_pair(name, &text);
            }
        }
        let headers = headers_arg(what, args)?;
        let payload = match (args.get("json"), args.get("body")) {
            (Some(_), Some(_)) => return Err(format!("{what}: give `json` or `body`, not both")),
            (Some(json), None) => Payload::Json(json.clone()),
            (None, Some(Value::String(text))) => Payload::Text(text.clone()),
            (None, Some(other)) => {
                return Err(format!(
                    "{what}: `body` is sent as text and must be a string, not {} (use `json` for JSON)",
                    crate::state::describe(other)
                ))
            }
            (None, None) => Payload::None,
        };
        let fail_on_status = match args.get("fail_on_status") {
            None | Some(Value::Null) => action == NetAction::Notify,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                return Err(format!(
                    "{what}: `fail_on_status` must be true or false, not {}",
                    crate::state::describe(other)
                ))
            }
        };
        let timeout = timeout_arg(what, args, Duration::from_secs(30))?;
        Ok(HttpRequest { action, url, headers, payload, timeout, fail_on_status })
    }
}

async fn http(request: HttpRequest, retry: Retry) -> Result<Value, String> {
    let what = request.action.name();
    let method = if request.action == NetAction::HttpGet { reqwest::Method::GET } else { reqwest::Method::POST };
    let endpoint = format!("{method} {}", shown(&request.url));
    let client = client()?;
    let answer = send(what, &endpoint, retry, request.timeout, || {
        let builder = client.request(method.clone(), request.url.clone()).headers(request.headers.clone());
        match &request.payload {
            Payload::None => builder,
            Payload::Json(json) => builder.json(json),
            Payload::Text(text) => builder.body(text.clone()),
        }
    })
    .await?;
    if request.fail_on_status && !answer.status.is_success() {
        return Err(format!(
            "{what}: {endpoint} answered {}{}: {}",
            status_text(answer.status),
            after(answer.attempts),
            excerpt(&answer.body)
        ));
    }
    let mut headers = Map::new();
    for (name, value) in &answer.headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        match headers.get_mut(name.as_str()) {
            Some(Value::String(seen)) => {
                seen.push_str(", ");
                seen.push_str(&value);
            }
            _ => {
                headers.insert(name.as_str().to_owned(), Value::String(value));
            }
        }
    }
    let is_json = answer
        .headers
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.contains("json"));
    let mut out = Map::new();
    out.insert("status".to_owned(), json!(answer.status.as_u16()));
    out.insert("headers".to_owned(), Value::Object(headers));
    match serde_json::from_slice::<Value>(&answer.body).ok().filter(|_| is_json) {
        Some(json) => out.insert("json".to_owned(), json),
        None => out.insert("text".to_owned(), Value::String(String::from_utf8_lossy(&answer.body).into_owned())),
    };
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn arguments_are_checked_by_name() {
        let err =
            |action, value| prepare(action, value, None, &crate::actions::net::llm::Shells::default()).err().unwrap();
        assert!(err(NetAction::LlmCall, json!({"model": "m", "promt": "x"}))
            .contains("unknown argument `promt`; did you mean `prompt`?"));
        assert!(err(NetAction::LlmCall, json!({"prompt": "x", "provider": "antropic"})).contains("unknown provider"));
        assert!(err(NetAction::LlmCall, json!({"model": "m"})).contains("needs `messages"));
        assert!(
            err(NetAction::LlmCall, json!({"model": "m", "messages": [{"content": "x"}]})).contains("`messages[0]`")
        );
        assert!(err(NetAction::LlmCall, json!({"model": "m", "prompt": "x", "temperature": "hot"}))
            .contains("`temperature` must be a number"));
        assert!(err(NetAction::HttpGet, json!({"url": "ftp://x"})).contains("http:// or https://"));
        assert!(err(NetAction::HttpGet, json!({"url": "http://x", "json": {}})).contains("unknown argument `json`"));
        assert!(err(NetAction::HttpPost, json!({"url": "http://x", "json": {}, "body": "b"})).contains("not both"));
        assert!(err(NetAction::HttpGet, json!({"url": "http://x", "retry": {"max": 1, "tries": 2}}))
            .contains("retry.tries"));
        assert!(err(NetAction::HttpGet, json!({"url": "http://x", "timeout": -1})).contains("`timeout`"));
    }

    #[test]
    fn retries_back_off_and_stop() {
        let retry = retry_arg("t", &args(json!({"retry": {"max": 3, "base_ms": 100}}))).unwrap();
        assert_eq!(retry, Retry { max: 3, base_ms: 100 });
        assert_eq!(retry.wait(0), Duration::from_millis(100));
        assert_eq!(retry.wait(2), Duration::from_millis(400));
        assert_eq!(Retry { max: 20, base_ms: 60_000 }.wait(19), MAX_WAIT);
    }

    #[test]
    fn endpoints_are_shown_without_credentials() {
        let url = reqwest::Url::parse("https://user:pw@example.com/hook?token=abc#x").unwrap();
        assert_eq!(shown(&url), "https://example.com/hook");
    }
}
