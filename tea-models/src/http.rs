//! The one HTTP path both providers send through: an [`Endpoint`] (URL, model, key, headers,
//! client, request hook, and the builder methods that set them) sends a request, shown to the
//! request hook first; an error status is read into [`ModelError::Status`]; an [`Answer`] is
//! read whole (at most 16 MiB) or as Server-Sent Events put together by the provider's
//! [`Assemble`], each piece of text handed to the request's token sink.

use crate::chat::{Reply, TokenSink};
use crate::error::ModelError;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// The largest answer read: 16 MiB.
pub(crate) const MAX_BODY: usize = 16 << 20;

/// A check every request passes before it is sent, able to change it (a timeout) or refuse it
/// (`Err` with why): a sandbox's network grants, a secret that may go only to one host.
pub type RequestHook = Arc<dyn Fn(&mut reqwest::Request) -> Result<(), String> + Send + Sync>;

/// Where a provider sends its requests, shared by both: the URL, the model, the key, the
/// headers of every request, and the HTTP client with its request hook.
#[derive(Clone)]
pub(crate) struct Endpoint {
    pub(crate) url: String,
    pub(crate) model: String,
    pub(crate) key: Option<String>,
    pub(crate) headers: Vec<(String, String)>,
    client: Option<reqwest::Client>,
    hook: Option<RequestHook>,
}

impl Endpoint {
    pub(crate) fn new(url: String, model: String) -> Endpoint {
        Endpoint { url, model, key: None, headers: Vec::new(), client: None, hook: None }
    }

    /// The provider's `Debug`: its URL and model, the key as `***`.
    pub(crate) fn debug(&self, f: &mut std::fmt::Formatter<'_>, name: &str) -> std::fmt::Result {
        f.debug_struct(name)
            .field("url", &self.url)
            .field("model", &self.model)
            .field("key", &self.key.as_ref().map(|_| "***"))
            .field("own_client", &self.client.is_some())
            .field("hook", &self.hook.is_some())
            .finish_non_exhaustive()
    }

    /// The key; an empty one is none.
    pub(crate) fn set_key(&mut self, key: String) {
        self.key = Some(key).filter(|k| !k.is_empty());
    }

    pub(crate) fn set_client(&mut self, client: reqwest::Client) {
        self.client = Some(client);
    }

    pub(crate) fn set_hook(&mut self, hook: RequestHook) {
        self.hook = Some(hook);
    }

    fn client(&self) -> reqwest::Client {
        self.client.clone().unwrap_or_else(shared_client)
    }

    /// `POST`s `body` to the URL with the endpoint's headers and `auth` (the provider's way of
    /// sending the key): the hook sees the request first; an error status becomes
    /// [`ModelError::Status`] with the provider's message. The answer, to read whole or as
    /// events; `expected` names what it should be, for errors.
    pub(crate) async fn send(
        &self,
        auth: &[(&str, String)],
        body: &Value,
        expected: &'static str,
    ) -> Result<Answer<'_>, ModelError> {
        let url = parse_url(&self.model, &self.url)?;
        let target = Target { model: &self.model, endpoint: shown(&url), key: self.key.as_deref() };
        let client = self.client();
        let mut builder = client.post(url).json(body);
        for (name, value) in self.headers.iter().map(|(k, v)| (k.as_str(), v)).chain(auth.iter().map(|(k, v)| (*k, v)))
        {
            builder = builder.header(name, value);
        }
        let mut request = builder.build().map_err(|e| target.transport(e))?;
        if let Some(hook) = &self.hook {
            hook(&mut request).map_err(|why| ModelError::Refused {
                model: target.model.to_owned(),
                endpoint: target.endpoint.clone(),
                why: target.hide(why),
            })?;
        }
        let response = client.execute(request).await.map_err(|e| target.transport(e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(Answer { target, status: status.as_u16(), expected, response });
        }
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let body = read_all(&target, response).await?;
        Err(ModelError::Status {
            model: target.model.to_owned(),
            endpoint: target.endpoint.clone(),
            status: status.as_u16(),
            message: target.hide(provider_message(&body)),
            retry_after,
        })
    }
}

/// The builder methods both providers share: `header`, `client`, `request_hook`, each setting
/// the provider's `endpoint`.
macro_rules! endpoint_builders {
    () => {
        /// A header sent with every request (OpenAI's `OpenAI-Organization`, Anthropic's
        /// `anthropic-beta`, a proxy's own).
        #[must_use]
        pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
            self.endpoint.headers.push((name.into(), value.into()));
            self
        }

        /// The HTTP client the requests go through (its timeouts, proxy, redirect policy).
        #[must_use]
        pub fn client(mut self, client: reqwest::Client) -> Self {
            self.endpoint.set_client(client);
            self
        }

        /// A check every request passes before it is sent ([`RequestHook`](crate::RequestHook)).
        #[must_use]
        pub fn request_hook(
            mut self,
            hook: impl Fn(&mut reqwest::Request) -> Result<(), String> + Send + Sync + 'static,
        ) -> Self {
            self.endpoint.set_hook(std::sync::Arc::new(hook));
            self
        }
    };
}
pub(crate) use endpoint_builders;

/// A successful answer, not read yet.
pub(crate) struct Answer<'a> {
    target: Target<'a>,
    status: u16,
    expected: &'static str,
    response: reqwest::Response,
}

/// What a streamed event added to the answer.
pub(crate) enum Added {
    /// Nothing to show.
    Nothing,
    /// A piece of the answer's text.
    Text(String),
    /// The answer is complete.
    End,
}

/// A streamed answer put together event by event, as a provider's API sends it.
pub(crate) trait Assemble {
    /// Adds one event: its `event:` name, if any, and its data read as JSON. An `Err` says
    /// what is wrong with it (an error event: `the stream ended with an error: …`).
    fn add(&mut self, name: Option<&str>, data: &Value) -> Result<Added, String>;

    /// The reply, once the events ended.
    fn finish(self, model: &str) -> Result<Reply, String>;
}

impl Answer<'_> {
    /// The body read whole (at most [`MAX_BODY`]) and made a reply by `parse`.
    pub(crate) async fn whole(self, parse: impl FnOnce(&[u8]) -> Result<Reply, String>) -> Result<Reply, ModelError> {
        let bytes = read_all(&self.target, self.response).await?;
        parse(&bytes).map_err(|why| self.target.decode(self.status, self.expected, why, &bytes))
    }

    /// The body read as Server-Sent Events, each event's data JSON (OpenAI's closing `[DONE]`
    /// ends it), put together by `assembly`, each piece of text handed to `sink` as it comes.
    pub(crate) async fn stream(
        self,
        sink: Option<&Arc<dyn TokenSink>>,
        mut assembly: impl Assemble,
    ) -> Result<Reply, ModelError> {
        let Answer { target, status, expected, response } = self;
        let mut events = Events::new(response);
        while let Some(event) = events.next(&target).await? {
            if event.data == "[DONE]" {
                break;
            }
            let bad = |why: String| target.decode(status, expected, why, event.data.as_bytes());
            let data: Value =
                serde_json::from_str(&event.data).map_err(|e| bad(format!("a streamed event is not JSON ({e})")))?;
            match assembly.add(event.name.as_deref(), &data).map_err(bad)? {
                Added::Nothing => {}
                Added::Text(text) => {
                    if let Some(sink) = sink {
                        sink.token(&text);
                    }
                }
                Added::End => break,
            }
        }
        assembly.finish(target.model).map_err(|why| target.decode(status, expected, why, b""))
    }
}

/// The client of providers given none: one per process, so connections are pooled.
fn shared_client() -> reqwest::Client {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    CLIENT
        .get_or_init(|| {
            reqwest::Client::builder()
                .user_agent(concat!("tea-models/", env!("CARGO_PKG_VERSION")))
                .build()
                .unwrap_or_default()
        })
        .clone()
}

/// Who a request is for: the model (for errors), the key (taken out of every message).
struct Target<'a> {
    model: &'a str,
    endpoint: String,
    key: Option<&'a str>,
}

impl Target<'_> {
    /// `text` with the key replaced by `***`.
    fn hide(&self, text: String) -> String {
        match self.key {
            Some(key) if key.len() >= 4 => text.replace(key, "***"),
            _ => text,
        }
    }

    fn decode(&self, status: u16, expected: &'static str, why: String, body: &[u8]) -> ModelError {
        ModelError::Decode {
            model: self.model.to_owned(),
            endpoint: self.endpoint.clone(),
            status,
            expected,
            why: self.hide(why),
            excerpt: self.hide(excerpt(body)),
        }
    }

    fn transport(&self, source: reqwest::Error) -> ModelError {
        ModelError::Transport {
            model: self.model.to_owned(),
            endpoint: self.endpoint.clone(),
            source: source.without_url(),
        }
    }

    fn too_large(&self) -> ModelError {
        ModelError::TooLarge { model: self.model.to_owned(), endpoint: self.endpoint.clone(), limit: MAX_BODY }
    }
}

/// The message of an error body: OpenAI's and Anthropic's `error.message`, a bare `message`
/// or `error` string, else the start of the body.
fn provider_message(body: &[u8]) -> String {
    if let Ok(value) = serde_json::from_slice::<Value>(body) {
        let found = value
            .pointer("/error/message")
            .or_else(|| value.get("message"))
            .or_else(|| value.get("error").filter(|e| e.is_string()))
            .and_then(Value::as_str);
        if let Some(message) = found {
            return message.to_owned();
        }
    }
    excerpt(body)
}

/// The whole body, at most [`MAX_BODY`].
async fn read_all(target: &Target<'_>, mut response: reqwest::Response) -> Result<Vec<u8>, ModelError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| target.transport(e))? {
        if body.len() + chunk.len() > MAX_BODY {
            return Err(target.too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The start of an HTTP body as error messages show it: trimmed, at most 200 characters (then
/// `…`), `(empty body)` when there is nothing. tea's YAML actions show bodies the same way.
///
/// ```
/// assert_eq!(tea_models::excerpt(b"  oops \n"), "oops");
/// assert_eq!(tea_models::excerpt(b""), "(empty body)");
/// assert_eq!(tea_models::excerpt("x".repeat(300).as_bytes()).chars().count(), 201);
/// ```
pub fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return "(empty body)".to_owned();
    }
    let mut cut: String = text.chars().take(200).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    cut
}

/// One Server-Sent Event: its `event:` name, if any, and its `data:` lines joined.
#[derive(Debug, PartialEq)]
struct Event {
    name: Option<String>,
    data: String,
}

/// Reads a streamed body as Server-Sent Events.
struct Events {
    response: reqwest::Response,
    buffer: Vec<u8>,
    read: usize,
    ended: bool,
}

impl Events {
    fn new(response: reqwest::Response) -> Events {
        Events { response, buffer: Vec::new(), read: 0, ended: false }
    }

    /// The next event; `None` at the end of the body.
    async fn next(&mut self, target: &Target<'_>) -> Result<Option<Event>, ModelError> {
        let mut name = None;
        let mut data: Option<String> = None;
        loop {
            let Some(line) = self.line(target).await? else {
                // The end: an event not closed by a blank line still counts.
                return Ok(data.map(|data| Event { name, data }));
            };
            if line.is_empty() {
                if let Some(data) = data.take() {
                    return Ok(Some(Event { name, data }));
                }
                name = None;
                continue;
            }
            let (field, value) = match line.find(':') {
                Some(0) => continue, // a comment
                Some(at) => (&line[..at], line[at + 1..].strip_prefix(' ').unwrap_or(&line[at + 1..])),
                None => (line.as_str(), ""),
            };
            match field {
                "data" => match &mut data {
                    Some(data) => {
                        data.push('\n');
                        data.push_str(value);
                    }
                    None => data = Some(value.to_owned()),
                },
                "event" => name = Some(value.to_owned()),
                _ => {}
            }
        }
    }

    /// The next line (without its `\n` or `\r\n`); `None` at the end.
    async fn line(&mut self, target: &Target<'_>) -> Result<Option<String>, ModelError> {
        loop {
            if let Some(at) = self.buffer.iter().position(|b| *b == b'\n') {
                let mut line: Vec<u8> = self.buffer.drain(..=at).collect();
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Ok(Some(String::from_utf8_lossy(&line).into_owned()));
            }
            if self.ended {
                if self.buffer.is_empty() {
                    return Ok(None);
                }
                let line = String::from_utf8_lossy(&std::mem::take(&mut self.buffer)).into_owned();
                return Ok(Some(line));
            }
            match self.response.chunk().await.map_err(|e| target.transport(e))? {
                Some(chunk) => {
                    self.read += chunk.len();
                    if self.read > MAX_BODY {
                        return Err(target.too_large());
                    }
                    self.buffer.extend_from_slice(&chunk);
                }
                None => self.ended = true,
            }
        }
    }
}

/// An endpoint as messages show it: the method and the URL without query, user or password.
fn shown(url: &reqwest::Url) -> String {
    let mut url = url.clone();
    url.set_query(None);
    url.set_fragment(None);
    let _ = url.set_username("");
    let _ = url.set_password(None);
    format!("POST {url}")
}

/// `text` as a URL (http or https).
fn parse_url(model: &str, text: &str) -> Result<reqwest::Url, ModelError> {
    let url = reqwest::Url::parse(text)
        .map_err(|e| ModelError::Request { model: model.to_owned(), why: format!("`{text}` is not a URL ({e})") })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ModelError::Request {
            model: model.to_owned(),
            why: format!("`{text}` must be an http:// or https:// URL"),
        });
    }
    Ok(url)
}
