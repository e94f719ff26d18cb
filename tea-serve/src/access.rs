//! Who may call the router: bearer tokens with read or answer rights, or loopback peers when
//! the access is `insecure_local`; the inbox's sign-in cookie and its forms' CSRF checks.

use crate::error::ApiError;
use crate::Shared;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

/// What a token allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Right {
    /// Reading agents, threads, runs and the inbox.
    Read,
    /// Reading, and starting runs, answering pauses, creating, changing and deleting threads.
    Answer,
}

/// The tokens a router accepts, and whether loopback peers need one.
#[derive(Clone, Default)]
pub struct Access {
    tokens: Vec<(String, Right)>,
    insecure_local: bool,
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the tokens themselves.
        f.debug_struct("Access")
            .field("tokens", &self.tokens.len())
            .field("insecure_local", &self.insecure_local)
            .finish()
    }
}

/// A token file that cannot be used.
#[derive(Debug)]
pub struct AccessError {
    message: String,
}

impl fmt::Display for AccessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for AccessError {}

impl Access {
    /// Loopback peers (127.0.0.0/8, ::1) need no token and have every right; other peers
    /// need one of the tokens added with [`token`](Self::token). The router sees the peer only
    /// when served with connect info ([`serve`](crate::serve)); without it, every request
    /// needs a token.
    ///
    /// Since a web page the operator visits is a loopback peer too, a tokenless request must
    /// be addressed to a loopback name (`localhost`, `127.0.0.1`, `[::1]`) or to a host of
    /// [`Serve::allowed_host`](crate::Serve::allowed_host) (else `421`: DNS rebinding), and
    /// come from the server's own or a loopback origin when it has an `Origin` (else `403`);
    /// JSON API bodies must be `application/json` (else `415`), as with tokens.
    pub fn insecure_local() -> Self {
        Access { tokens: Vec::new(), insecure_local: true }
    }

    /// Only these tokens, for every peer.
    pub fn tokens<T: Into<String>>(tokens: impl IntoIterator<Item = (T, Right)>) -> Self {
        Access { tokens: tokens.into_iter().map(|(t, r)| (t.into(), r)).collect(), insecure_local: false }
    }

    /// Adds a token.
    pub fn token(mut self, token: impl Into<String>, right: Right) -> Self {
        self.tokens.push((token.into(), right));
        self
    }

    /// Tokens from a file, one per line: `TOKEN` or `answer TOKEN` (answer rights), `read
    /// TOKEN` (read rights); blank lines and lines starting with `#` are skipped.
    ///
    /// # Errors
    /// The file cannot be read, a line has an unknown right or a token shorter than 16
    /// characters, or the file has no token; the error names the file and line.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, AccessError> {
        let path = path.as_ref();
        let shown = path.display();
        let text = std::fs::read_to_string(path)
            .map_err(|e| AccessError { message: format!("cannot read token file `{shown}`: {e}") })?;
        let mut access = Access::default();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (right, token) = match line.split_once(char::is_whitespace) {
                None => (Right::Answer, line),
                Some(("answer", token)) => (Right::Answer, token.trim()),
                Some(("read", token)) => (Right::Read, token.trim()),
                Some((other, _)) => {
                    return Err(AccessError {
                        message: format!(
                            "{shown}:{}: unknown right `{other}` (write `read TOKEN`, `answer TOKEN` or just `TOKEN`)",
                            number + 1
                        ),
                    })
                }
            };
            if token.chars().count() < 16 || token.contains(char::is_whitespace) {
                return Err(AccessError {
                    message: format!("{shown}:{}: a token must be one word of at least 16 characters", number + 1),
                });
            }
            access.tokens.push((token.to_owned(), right));
        }
        if access.tokens.is_empty() {
            return Err(AccessError { message: format!("token file `{shown}` holds no token") });
        }
        Ok(access)
    }

    /// The same access, with loopback peers allowed without a token.
    pub fn allow_local(mut self) -> Self {
        self.insecure_local = true;
        self
    }

    /// Whether loopback peers need no token.
    pub fn is_insecure_local(&self) -> bool {
        self.insecure_local
    }

    /// Whether `presented` is one of the tokens.
    pub(crate) fn knows(&self, presented: &str) -> bool {
        self.right_of(presented).is_some()
    }

    /// The right `presented` carries, comparing in constant time against every token.
    fn right_of(&self, presented: &str) -> Option<Right> {
        let mut found = None;
        for (token, right) in &self.tokens {
            if constant_time_eq(token.as_bytes(), presented.as_bytes()) {
                found = found.max(Some(*right));
            }
        }
        found
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The inbox's sign-in cookie (holds the token), and its CSRF cookie.
pub(crate) const SESSION_COOKIE: &str = "tea_session";
pub(crate) const CSRF_COOKIE: &str = "tea_csrf";

/// The value of cookie `name`.
pub(crate) fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// The rights of a request, as the middleware found them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Granted(pub(crate) Right);

/// Whether an inbox path is open without rights (the sign-in page and the assets).
fn open_path(path: &str) -> bool {
    path == "/inbox/login" || path.starts_with("/inbox/assets/")
}

/// Whether a request only reads: `GET`/`HEAD`, and the protocol's searches and listings.
fn reads(method: &Method, path: &str) -> bool {
    method == Method::GET
        || method == Method::HEAD
        || (method == Method::POST
            && (matches!(
                path,
                "/agents/search"
                    | "/assistants/search"
                    | "/assistants/count"
                    | "/threads/search"
                    | "/runs/search"
                    | "/store/items/search"
                    | "/store/namespaces"
            ) || thread_read(path)))
}

/// Whether `path` is a thread's route that reads by `POST`: its history, its state at a
/// checkpoint, its event stream (`/threads/{id}/history`, `/threads/{id}/state/checkpoint`,
/// `/threads/{id}/stream`; not `/threads/{id}/runs/stream`, which starts a run).
fn thread_read(path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').collect();
    matches!(parts.as_slice(), ["", "threads", _, "history" | "stream"] | ["", "threads", _, "state", "checkpoint"])
}

/// The middleware: finds the request's rights before any route runs. Without the right
/// token, an API request gets `401` (`403` for a read-only token that writes) whatever the
/// path, so it learns nothing about which threads exist; an inbox page sends to the sign-in.
pub(crate) async fn authorize(State(shared): State<Arc<Shared>>, mut request: Request, next: Next) -> Response {
    let path = request.uri().path().to_owned();
    let inbox = path == "/" || path == "/inbox" || path.starts_with("/inbox/");
    if open_path(&path) {
        return next.run(request).await;
    }
    let headers = request.headers();
    // `x-api-key` is how LangGraph's SDKs send a key (`get_client(api_key=…)`).
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()))
        .map(str::trim);
    let mut right = bearer.and_then(|t| shared.access.right_of(t));
    if right.is_none() && inbox {
        right = cookie(headers, SESSION_COOKIE).and_then(|t| shared.access.right_of(t));
    }
    if right.is_none() && shared.access.insecure_local {
        let peer = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
        if peer.is_some_and(|p| p.ip().is_loopback()) {
            if let Err(refused) = local_only(headers, &shared.allowed_hosts) {
                return refused.into_response();
            }
            right = Some(Right::Answer);
        }
    }
    let Some(right) = right else {
        if inbox && request.method() == Method::GET {
            return Redirect::to("/inbox/login").into_response();
        }
        let mut response = ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "this server wants `Authorization: Bearer TOKEN` (or `x-api-key: TOKEN`) with a token it knows",
        )
        .into_response();
        response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return response;
    };
    if right < Right::Answer && !reads(request.method(), &path) && !(inbox && path == "/inbox/logout") {
        return ApiError::new(StatusCode::FORBIDDEN, "forbidden", "this token has read rights only").into_response();
    }
    request.extensions_mut().insert(Granted(right));
    next.run(request).await
}

/// What a request that has its rights from a loopback peer alone (no token) must be, since a
/// web page the operator visits can send one too: addressed to a loopback name or to an
/// allowed host (else `421`: a DNS-rebinding page's requests name the page's own host), and,
/// when it says where it comes from (`Origin`), from the server's own origin or a loopback or
/// allowed one (else `403`).
fn local_only(headers: &HeaderMap, allowed: &[String]) -> Result<(), ApiError> {
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !host_allowed(host, allowed) {
        return Err(ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            "host_not_allowed",
            format!(
                "without a token this server answers requests to `localhost`, `127.0.0.1` or `[::1]` (or to a host \
                 it was given with `--allowed-host`), not to `{host}`"
            ),
        ));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        if !origin_allowed(origin, host, allowed) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "origin_not_allowed",
                format!(
                    "without a token this server answers pages of its own origin or of a loopback one, not `{origin}`"
                ),
            ));
        }
    }
    Ok(())
}

/// `host` (a `Host` header, or an origin's host) without its port: `[::1]:8080` → `[::1]`.
fn without_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').map_or(host, |end| &host[..=end]);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

/// Whether `host` names this machine's loopback (`localhost`, an IPv4 loopback address,
/// `[::1]`, with any port) or one of `allowed` (a name alone allows it with any port; a name
/// with a port, that port only). Case does not matter.
pub(crate) fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let host = host.trim().to_ascii_lowercase();
    let name = without_port(&host);
    if name.is_empty() {
        return false;
    }
    let loopback = name == "localhost"
        || name
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    loopback
        || allowed.iter().any(|a| {
            let a = a.trim().to_ascii_lowercase();
            a == host || a == name
        })
}

/// Whether `origin` (an `Origin` header: `http://host:port`, or `null`) is the server's own
/// (`host`, the request's `Host`), a loopback one, or an allowed host's.
fn origin_allowed(origin: &str, host: &str, allowed: &[String]) -> bool {
    let Some(rest) = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://")) else {
        return false;
    };
    !rest.contains('/') && (rest.eq_ignore_ascii_case(host) || host_allowed(rest, allowed))
}

/// The methods a page of another origin may use ([`cors`]): the JSON API's.
const CORS_METHODS: &str = "GET, POST, PUT, PATCH, DELETE";

/// The response headers such a page may read: where a run is (LangGraph's SDKs read a run's
/// id from `Content-Location`), and a listing's next page.
const CORS_EXPOSED: &str = "Content-Location, Location, X-Pagination-Next";

/// The middleware, outermost: CORS for the JSON API, so that a web page served from another
/// port of this machine (a dev server, a UI on LangGraph's SDK) or from an allowed host
/// ([`Serve::allowed_host`](crate::Serve::allowed_host)) can call it from the browser. A
/// request whose `Origin` is loopback or allowed (what [`local_only`] lets in) is answered
/// with `Access-Control-Allow-Origin` naming that origin; its preflight (`OPTIONS` with
/// `Access-Control-Request-Method`) gets `204` with the API's methods and the headers it
/// asked for, before any token is asked for (a preflight carries none). No other origin gets
/// a CORS header, so its page's JSON requests never leave the browser; credentials (the
/// inbox's cookie) are never allowed, and the inbox's own pages get no CORS header. A page
/// let in this way still needs a token unless the access is `insecure_local`, which already
/// trusts these origins.
pub(crate) async fn cors(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let origin = headers.get(header::ORIGIN).filter(|origin| {
        let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
        origin.to_str().is_ok_and(|o| origin_allowed(o, host, &shared.allowed_hosts))
    });
    let Some(origin) = origin.filter(|_| !crate::guard::inbox_path(request.uri().path())).cloned() else {
        return next.run(request).await;
    };
    let mut response = if request.method() == Method::OPTIONS
        && headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
    {
        let mut preflight = StatusCode::NO_CONTENT.into_response();
        let out = preflight.headers_mut();
        out.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static(CORS_METHODS));
        if let Some(asked) = headers.get(header::ACCESS_CONTROL_REQUEST_HEADERS) {
            out.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, asked.clone());
        }
        out.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("600"));
        out.append(
            header::VARY,
            HeaderValue::from_static("Access-Control-Request-Method, Access-Control-Request-Headers"),
        );
        preflight
    } else {
        let mut response = next.run(request).await;
        response.headers_mut().insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, HeaderValue::from_static(CORS_EXPOSED));
        response
    };
    response.headers_mut().insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    response.headers_mut().append(header::VARY, HeaderValue::from_static("Origin"));
    response
}

/// Refuses a form post that comes from another site: its `Origin` (or `Sec-Fetch-Site`) must
/// be this server's, and its `csrf` field must match the session's CSRF cookie.
pub(crate) fn check_form(headers: &HeaderMap, csrf: &str) -> Result<(), ApiError> {
    let refused = |why: &str| ApiError::new(StatusCode::FORBIDDEN, "csrf", format!("form refused: {why}"));
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        if site != "same-origin" && site != "none" {
            return Err(refused("it was sent from another site"));
        }
    }
    if let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) {
        let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
        let bare = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://")).unwrap_or("");
        if bare != host {
            return Err(refused("it was sent from another origin"));
        }
    }
    match cookie(headers, CSRF_COOKIE) {
        Some(expected) if !csrf.is_empty() && constant_time_eq(expected.as_bytes(), csrf.as_bytes()) => Ok(()),
        _ => Err(refused("its CSRF token does not match this session; reload the page")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_and_origins_a_loopback_request_may_name() {
        let allowed = vec!["tea.lan".to_owned(), "box.lan:8080".to_owned()];
        for host in ["localhost", "LOCALHOST:8080", "127.0.0.1", "127.0.0.1:9", "127.1.2.3:80", "[::1]", "[::1]:8080"] {
            assert!(host_allowed(host, &[]), "{host}");
        }
        for host in
            ["", "evil.example", "evil.example:8080", "localhost.evil.example", "0x7f.0.0.1", "[::2]:80", "tea.lan"]
        {
            assert!(!host_allowed(host, &[]), "{host}");
        }
        assert!(host_allowed("tea.lan:3000", &allowed) && host_allowed("TEA.lan", &allowed));
        assert!(host_allowed("box.lan:8080", &allowed) && !host_allowed("box.lan:9090", &allowed));
        assert!(origin_allowed("http://127.0.0.1:8080", "127.0.0.1:8080", &[]));
        assert!(origin_allowed("http://localhost:3000", "127.0.0.1:8080", &[]));
        assert!(origin_allowed("https://tea.lan", "tea.lan", &allowed));
        for origin in ["null", "http://evil.example", "http://evil.example:8080", "file://", "http://127.0.0.1:8080/x"]
        {
            assert!(!origin_allowed(origin, "127.0.0.1:8080", &[]), "{origin}");
        }
    }

    #[test]
    fn a_read_token_reads_by_post_but_never_starts_a_run() {
        for path in ["/threads/t/history", "/threads/t/state/checkpoint", "/threads/t/stream", "/assistants/search"] {
            assert!(reads(&Method::POST, path), "{path}");
        }
        for path in
            ["/threads/t/runs/stream", "/threads/t/runs", "/threads/t/state", "/threads/t/commands", "/runs/stream"]
        {
            assert!(!reads(&Method::POST, path), "{path}");
        }
    }

    /// The router's answer to `request` (no peer: every request needs the token).
    async fn answer(request: axum::http::Request<axum::body::Body>) -> Response {
        let mut router =
            crate::Serve::new().access(Access::tokens([("cors-test-token-0123456789", Right::Answer)])).router();
        match tower_service::Service::call(&mut router, request).await {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }

    fn request(
        method: Method,
        path: &str,
        origin: &str,
        extra: &[(&str, &str)],
    ) -> axum::http::Request<axum::body::Body> {
        let mut builder = axum::http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "127.0.0.1:2024")
            .header("origin", origin);
        for (name, value) in extra {
            builder = builder.header(*name, *value);
        }
        builder.body(axum::body::Body::empty()).unwrap()
    }

    fn allowed_origin(response: &Response) -> Option<&str> {
        response.headers().get(header::ACCESS_CONTROL_ALLOW_ORIGIN).and_then(|v| v.to_str().ok())
    }

    #[tokio::test]
    async fn cors_lets_loopback_pages_call_the_api_and_no_other() {
        let asked =
            [("access-control-request-method", "POST"), ("access-control-request-headers", "content-type,x-api-key")];
        // A page on another loopback port: its preflight is granted without a token.
        let preflight = answer(request(Method::OPTIONS, "/threads", "http://localhost:5173", &asked)).await;
        assert_eq!(preflight.status(), StatusCode::NO_CONTENT);
        assert_eq!(allowed_origin(&preflight), Some("http://localhost:5173"));
        let allowed = |name| preflight.headers().get(name).and_then(|v: &HeaderValue| v.to_str().ok());
        assert_eq!(allowed(header::ACCESS_CONTROL_ALLOW_HEADERS), Some("content-type,x-api-key"));
        assert!(
            allowed(header::ACCESS_CONTROL_ALLOW_METHODS).is_some_and(|m| m.contains("POST") && m.contains("DELETE"))
        );
        assert!(preflight.headers().get(header::ACCESS_CONTROL_ALLOW_CREDENTIALS).is_none());
        // Its requests are answered with its origin, and still need the token.
        let key = [("x-api-key", "cors-test-token-0123456789")];
        let read = answer(request(Method::GET, "/assistants/nobody", "http://127.0.0.1:5173", &key)).await;
        assert_eq!((read.status(), allowed_origin(&read)), (StatusCode::NOT_FOUND, Some("http://127.0.0.1:5173")));
        assert!(read
            .headers()
            .get(header::ACCESS_CONTROL_EXPOSE_HEADERS)
            .is_some_and(|v| v.to_str().unwrap().contains("Content-Location")));
        let refused = answer(request(Method::GET, "/assistants/nobody", "http://[::1]:5173", &[])).await;
        assert_eq!((refused.status(), allowed_origin(&refused)), (StatusCode::UNAUTHORIZED, Some("http://[::1]:5173")));
        // Another site's page gets no CORS header: its preflight meets the token check.
        let other = answer(request(Method::OPTIONS, "/threads", "http://evil.example", &asked)).await;
        assert_eq!((other.status(), allowed_origin(&other)), (StatusCode::UNAUTHORIZED, None));
        let other =
            answer(request(Method::GET, "/assistants/nobody", "http://localhost.evil.example:5173", &key)).await;
        assert_eq!(allowed_origin(&other), None);
        // Nor do the inbox's pages, whoever asks.
        let inbox = answer(request(Method::OPTIONS, "/inbox/login", "http://localhost:5173", &asked)).await;
        assert_eq!(allowed_origin(&inbox), None);
    }

    #[test]
    fn token_files_name_the_bad_line() {
        let dir = std::env::temp_dir().join(format!("tea-serve-tokens-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("tokens");
        std::fs::write(
            &file,
            "# reviewers\nanswer 0123456789abcdef0123\nread fedcba9876543210fedc\nplainplainplainplain\n",
        )
        .unwrap();
        let access = Access::from_file(&file).unwrap();
        assert_eq!(access.right_of("0123456789abcdef0123"), Some(Right::Answer));
        assert_eq!(access.right_of("fedcba9876543210fedc"), Some(Right::Read));
        assert_eq!(access.right_of("plainplainplainplain"), Some(Right::Answer));
        assert_eq!(access.right_of("0123456789abcdef012"), None);
        std::fs::write(&file, "\nwrite 0123456789abcdef0123\n").unwrap();
        let error = Access::from_file(&file).unwrap_err().to_string();
        assert!(
            error.ends_with(":2: unknown right `write` (write `read TOKEN`, `answer TOKEN` or just `TOKEN`)"),
            "{error}"
        );
        std::fs::write(&file, "short\n").unwrap();
        assert!(Access::from_file(&file).unwrap_err().to_string().contains(":1: a token must be one word"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
