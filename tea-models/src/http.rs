//! The one HTTP path both providers send through: a request built, shown to the request hook,
//! sent; an error status read into [`ModelError::Status`]; a body read whole (at most 16 MiB)
//! or as Server-Sent Events, one event at a time.

use crate::error::ModelError;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// The largest answer read: 16 MiB.
pub(crate) const MAX_BODY: usize = 16 << 20;

/// A check every request passes before it is sent, able to change it (a timeout) or refuse it
/// (`Err` with why): a sandbox's network grants, a secret that may go only to one host.
pub type RequestHook = Arc<dyn Fn(&mut reqwest::Request) -> Result<(), String> + Send + Sync>;

/// The HTTP client of a provider and its request hook.
#[derive(Clone, Default)]
pub(crate) struct Http {
    client: Option<reqwest::Client>,
    pub(crate) hook: Option<RequestHook>,
}

impl std::fmt::Debug for Http {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Http").field("own_client", &self.client.is_some()).field("hook", &self.hook.is_some()).finish()
    }
}

impl Http {
    pub(crate) fn set_client(&mut self, client: reqwest::Client) {
        self.client = Some(client);
    }

    fn client(&self) -> reqwest::Client {
        self.client.clone().unwrap_or_else(shared_client)
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
pub(crate) struct Target<'a> {
    pub(crate) model: &'a str,
    pub(crate) endpoint: String,
    pub(crate) key: Option<&'a str>,
}

impl Target<'_> {
    /// `text` with the key replaced by `***`.
    pub(crate) fn hide(&self, text: String) -> String {
        match self.key {
            Some(key) if key.len() >= 4 => text.replace(key, "***"),
            _ => text,
        }
    }

    pub(crate) fn decode(&self, status: u16, expected: &'static str, why: String, body: &[u8]) -> ModelError {
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

/// `POST url` with `body` and `headers`: the hook sees the request first; an error status
/// becomes [`ModelError::Status`] with the provider's message.
pub(crate) async fn post(
    http: &Http,
    target: &Target<'_>,
    url: reqwest::Url,
    headers: &[(&str, String)],
    body: &Value,
) -> Result<reqwest::Response, ModelError> {
    let client = http.client();
    let mut builder = client.post(url).json(body);
    for (name, value) in headers {
        builder = builder.header(*name, value);
    }
    let mut request = builder.build().map_err(|e| target.transport(e))?;
    if let Some(hook) = &http.hook {
        hook(&mut request).map_err(|why| ModelError::Refused {
            model: target.model.to_owned(),
            endpoint: target.endpoint.clone(),
            why: target.hide(why),
        })?;
    }
    let response = client.execute(request).await.map_err(|e| target.transport(e))?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let body = read_all(target, response).await?;
    Err(ModelError::Status {
        model: target.model.to_owned(),
        endpoint: target.endpoint.clone(),
        status: status.as_u16(),
        message: target.hide(provider_message(&body)),
        retry_after,
    })
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
pub(crate) async fn read_all(target: &Target<'_>, mut response: reqwest::Response) -> Result<Vec<u8>, ModelError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| target.transport(e))? {
        if body.len() + chunk.len() > MAX_BODY {
            return Err(target.too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The start of a body, for an error message.
pub(crate) fn excerpt(body: &[u8]) -> String {
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
pub(crate) struct Event {
    pub(crate) name: Option<String>,
    pub(crate) data: String,
}

/// Reads a streamed body as Server-Sent Events.
pub(crate) struct Events {
    response: reqwest::Response,
    buffer: Vec<u8>,
    read: usize,
    ended: bool,
}

impl Events {
    pub(crate) fn new(response: reqwest::Response) -> Events {
        Events { response, buffer: Vec::new(), read: 0, ended: false }
    }

    /// The next event; `None` at the end of the body.
    pub(crate) async fn next(&mut self, target: &Target<'_>) -> Result<Option<Event>, ModelError> {
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
pub(crate) fn shown(url: &reqwest::Url) -> String {
    let mut url = url.clone();
    url.set_query(None);
    url.set_fragment(None);
    let _ = url.set_username("");
    let _ = url.set_password(None);
    format!("POST {url}")
}

/// `text` as a URL (http or https).
pub(crate) fn parse_url(model: &str, text: &str) -> Result<reqwest::Url, ModelError> {
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
