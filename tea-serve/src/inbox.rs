//! The inbox: HTML pages served by the same router, for the person who answers pauses. The
//! paused threads, each with its pause message and a form typed by the answer its node
//! expects; a thread's page with its timeline and graph; live updates by polling. Assets are
//! embedded in the binary (the CSS and the polling script in `tea-serve/assets/`); nothing is
//! fetched from elsewhere.

use crate::access::{self, check_form, Granted, Right, CSRF_COOKIE, SESSION_COOKIE};
use crate::api::{self, checkpoint_uuid, Id, Located, RunCommand, RunRequest};
use crate::draw::escape;
use crate::error::ApiError;
use crate::records::Entry;
use crate::runs::End;
use crate::served::AnswerKind;
use crate::time::rfc3339;
use crate::Shared;
use axum::extract::{Extension, Form, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

const CSS: &str = include_str!("../assets/inbox.css");
const JS: &str = include_str!("../assets/inbox.js");

pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/inbox") }))
        .route("/inbox", get(inbox))
        .route("/inbox/live", get(inbox_live))
        .route("/inbox/start", post(start))
        .route("/inbox/threads/{thread_id}", get(thread_page))
        .route("/inbox/threads/{thread_id}/live", get(thread_live))
        .route("/inbox/threads/{thread_id}/answer", post(answer))
        .route("/inbox/login", get(login_page).post(login))
        .route("/inbox/logout", post(logout))
        .route("/inbox/assets/inbox.css", get(|| async { ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], CSS) }))
        .route(
            "/inbox/assets/inbox.js",
            get(|| async { ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], JS) }),
        )
}

/// The session's CSRF token: the cookie's, or a new one the response sets.
fn csrf(headers: &HeaderMap) -> (String, Option<HeaderValue>) {
    match access::cookie(headers, CSRF_COOKIE).filter(|v| v.len() >= 32) {
        Some(token) => (token.to_owned(), None),
        None => {
            let token = format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
            let cookie = format!("{CSRF_COOKIE}={token}; Path=/inbox; SameSite=Strict; HttpOnly");
            (token, HeaderValue::from_str(&cookie).ok())
        }
    }
}

fn page(title: &str, body: &str, set_cookie: Option<HeaderValue>, status: StatusCode) -> Response {
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · tea inbox</title><link rel=\"stylesheet\" href=\"/inbox/assets/inbox.css\"></head>\
         <body><header><a class=\"brand\" href=\"/inbox\">tea inbox</a>\
         <form method=\"post\" action=\"/inbox/logout\" class=\"logout\"><button type=\"submit\">Sign out</button></form></header>\
         <main>{body}</main><script src=\"/inbox/assets/inbox.js\"></script></body></html>",
        escape(title)
    );
    let mut response = (status, Html(html)).into_response();
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
        .headers_mut()
        .insert("content-security-policy", HeaderValue::from_static("default-src 'self'; frame-ancestors 'none'"));
    if let Some(cookie) = set_cookie {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
    response
}

fn error_page(error: &ApiError, back: &str) -> Response {
    let body = format!(
        "<section class=\"error\" id=\"error\"><h1>{}</h1><p>{}</p><p><a href=\"{}\">Back</a></p></section>",
        error.status.canonical_reason().unwrap_or("Error"),
        escape(&error.message),
        escape(back)
    );
    page("Error", &body, None, error.status)
}

fn status_badge(status: &str) -> String {
    format!("<span class=\"status {status}\" data-status=\"{status}\">{status}</span>")
}

/// The answer form of a paused thread: a field per pending pause, typed by what its node
/// expects.
fn answer_form(located: &Located, csrf: &str) -> String {
    let (Some(agent), Some(snapshot)) = (&located.agent, &located.snapshot) else { return String::new() };
    let thread = escape(located.thread.as_str());
    let mut fields = String::new();
    let mut only_continue = true;
    for (i, interrupt) in snapshot.interrupts.iter().enumerate() {
        let kind = agent.answer_kind(interrupt);
        only_continue &= kind == AnswerKind::Continue;
        let message = escape(&crate::runs::pause_message(interrupt));
        let input = match kind {
            AnswerKind::Continue => String::new(),
            AnswerKind::YesNo => format!(
                "<span class=\"yesno\"><label><input type=\"radio\" name=\"answer.{i}\" value=\"true\" required> Yes</label>\
                 <label><input type=\"radio\" name=\"answer.{i}\" value=\"false\"> No</label></span>"
            ),
            AnswerKind::Text => format!("<textarea name=\"answer.{i}\" rows=\"3\" required></textarea>"),
            AnswerKind::Number { integer } => format!(
                "<input type=\"number\" name=\"answer.{i}\" step=\"{}\" required>",
                if integer { "1" } else { "any" }
            ),
            AnswerKind::Json => format!("<textarea name=\"answer.{i}\" rows=\"4\" class=\"json\" placeholder=\"JSON\" required></textarea>"),
        };
        fields.push_str(&format!(
            "<fieldset class=\"pause\" data-kind=\"{kind}\"><legend>{node} <code>{id}</code></legend><p class=\"message\">{message}</p>{input}\
             <input type=\"hidden\" name=\"id.{i}\" value=\"{id}\"><input type=\"hidden\" name=\"kind.{i}\" value=\"{kind}\"></fieldset>",
            kind = kind.as_str(),
            node = escape(interrupt.node().as_str()),
            id = escape(interrupt.id()),
        ));
    }
    format!(
        "<form method=\"post\" action=\"/inbox/threads/{thread}/answer\" class=\"answer\" data-thread=\"{thread}\">{fields}\
         <details><summary>State update (optional JSON)</summary><textarea name=\"update\" rows=\"3\" class=\"json\" placeholder='{{\"key\": \"value\"}}'></textarea></details>\
         <input type=\"hidden\" name=\"checkpoint\" value=\"{checkpoint}\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
         <button type=\"submit\">{button}</button></form>",
        checkpoint = checkpoint_uuid(snapshot.checkpoint),
        csrf = escape(csrf),
        button = if only_continue { "Continue" } else { "Answer" },
    )
}

async fn inbox(
    State(shared): State<Arc<Shared>>,
    Extension(Granted(right)): Extension<Granted>,
    headers: HeaderMap,
) -> Response {
    let (token, cookie) = csrf(&headers);
    let threads = match api::all_threads(&shared).await {
        Ok(threads) => threads,
        Err(e) => return error_page(&e, "/inbox"),
    };
    let mut paused: Vec<&Located> =
        threads.iter().filter(|l| l.snapshot.as_ref().is_some_and(|s| s.paused())).collect();
    paused.sort_by_key(|l| std::cmp::Reverse(l.record.as_ref().map_or(0, |r| r.updated_at)));
    let mut body =
        format!("<h1>Waiting for you <span class=\"count\" id=\"paused-count\">{}</span></h1>", paused.len());
    if paused.is_empty() {
        body.push_str("<p class=\"empty\" id=\"empty\">No thread is waiting for an answer.</p>");
    }
    body.push_str("<ul class=\"inbox\" id=\"paused\">");
    for located in &paused {
        let id = escape(located.thread.as_str());
        let agent = located.agent.as_ref().map_or(String::new(), |a| escape(a.name()));
        let since = located.record.as_ref().map_or(String::new(), |r| rfc3339(r.updated_at));
        let form = if right >= Right::Answer {
            answer_form(located, &token)
        } else {
            String::from("<p class=\"readonly\">Read-only access: you cannot answer.</p>")
        };
        body.push_str(&format!(
            "<li class=\"thread\" data-thread=\"{id}\"><div class=\"meta\"><a href=\"/inbox/threads/{id}\">{id}</a> · {agent} · <time>{since}</time></div>{form}</li>"
        ));
    }
    body.push_str("</ul>");
    let others: Vec<&Located> = threads.iter().filter(|l| !l.snapshot.as_ref().is_some_and(|s| s.paused())).collect();
    if !others.is_empty() {
        body.push_str("<h2>Other threads</h2><ul class=\"others\">");
        for located in others.iter().take(50) {
            let id = escape(located.thread.as_str());
            body.push_str(&format!(
                "<li><a href=\"/inbox/threads/{id}\">{id}</a> {}</li>",
                status_badge(api::status(&shared, located))
            ));
        }
        body.push_str("</ul>");
    }
    if right >= Right::Answer {
        let options: String = shared.agents.iter().map(|a| format!("<option>{}</option>", escape(a.name()))).collect();
        body.push_str(&format!(
            "<h2>Start a run</h2><form method=\"post\" action=\"/inbox/start\" class=\"start\"><label>Agent <select name=\"agent\">{options}</select></label>\
             <label>Input (JSON) <textarea name=\"input\" rows=\"3\" class=\"json\">{{}}</textarea></label>\
             <input type=\"hidden\" name=\"csrf\" value=\"{}\"><button type=\"submit\">Start</button></form>",
            escape(&token)
        ));
    }
    body.push_str("<div id=\"live\" data-live=\"/inbox/live\" hidden></div>");
    page("Inbox", &body, cookie, StatusCode::OK)
}

/// What the inbox page shows, in one string: the page reloads when it changes.
async fn inbox_live(State(shared): State<Arc<Shared>>) -> Result<Json<Value>, ApiError> {
    let threads = api::all_threads(&shared).await?;
    let version: Vec<String> = threads
        .iter()
        .map(|l| {
            format!("{}:{}:{}", l.thread, api::status(&shared, l), l.snapshot.as_ref().map_or(0, |s| s.checkpoint))
        })
        .collect();
    Ok(Json(json!({ "version": version.join(",") })))
}

fn timeline_html(timeline: &[Entry]) -> String {
    let mut out = String::from("<table class=\"timeline\" id=\"timeline\"><thead><tr><th>time</th><th>what</th><th>node</th><th>took</th><th>detail</th></tr></thead><tbody>");
    for entry in timeline {
        let took = entry.duration_ms.map_or(String::new(), |ms| format!("{ms:.1} ms"));
        let detail = if entry.detail.is_null() { String::new() } else { entry.detail.to_string() };
        out.push_str(&format!(
            "<tr class=\"{kind}\"><td><time>{}</time></td><td>{kind}</td><td>{}</td><td>{took}</td><td><code>{}</code></td></tr>",
            rfc3339(entry.at),
            escape(entry.node.as_deref().unwrap_or("")),
            escape(&detail),
            kind = escape(&entry.kind),
        ));
    }
    out.push_str("</tbody></table>");
    out
}

async fn thread_page(
    State(shared): State<Arc<Shared>>,
    Extension(Granted(right)): Extension<Granted>,
    Id(id): Id,
    headers: HeaderMap,
) -> Response {
    let (token, cookie) = csrf(&headers);
    let located = match api::locate(&shared, &id).await {
        Ok(located) => located,
        Err(e) => return error_page(&e, "/inbox"),
    };
    let status = api::status(&shared, &located);
    let escaped = escape(&id);
    let agent = located.agent.as_ref().map_or(String::from("(no run yet)"), |a| escape(a.name()));
    let mut body =
        format!("<h1>Thread <code>{escaped}</code> {}</h1><p class=\"agent\">agent {agent}</p>", status_badge(status));
    if let Some(error) = located.record.as_ref().and_then(|r| r.error.as_ref()) {
        body.push_str(&format!("<p class=\"run-error\">Last run failed: {}</p>", escape(error)));
    }
    if located.snapshot.as_ref().is_some_and(|s| s.paused()) {
        body.push_str("<h2>Waiting for an answer</h2>");
        body.push_str(&if right >= Right::Answer {
            answer_form(&located, &token)
        } else {
            String::from("<p class=\"readonly\">Read-only access.</p>")
        });
    }
    let mut current = HashSet::new();
    match &located.snapshot {
        Some(s) if s.paused() => current.extend(s.interrupts.iter().map(|i| i.node().as_str().to_owned())),
        Some(s) if s.finished() => {
            current.insert("end".to_owned());
        }
        Some(s) => current.extend(s.next.iter().cloned()),
        None => {
            current.insert("start".to_owned());
        }
    }
    body.push_str("<div class=\"columns\"><section><h2>Graph</h2>");
    match located.agent.as_ref().and_then(|a| a.drawing().map(str::to_owned)) {
        Some(drawing) => body.push_str(&crate::draw::html(&drawing, &current)),
        None => body.push_str(&format!(
            "<p>No drawing given; current: {}</p>",
            escape(&current.iter().cloned().collect::<Vec<_>>().join(", "))
        )),
    }
    body.push_str("</section><section><h2>State</h2>");
    let state = located.snapshot.as_ref().map_or(json!({}), |s| s.state.clone());
    body.push_str(&format!(
        "<pre class=\"state\" id=\"state\">{}</pre></section></div>",
        escape(&serde_json::to_string_pretty(&state).unwrap_or_default())
    ));
    body.push_str("<h2>Timeline</h2>");
    body.push_str(&timeline_html(located.record.as_ref().map_or(&[][..], |r| &r.timeline)));
    body.push_str(&format!("<div id=\"live\" data-live=\"/inbox/threads/{escaped}/live\" hidden></div>"));
    page(&format!("Thread {id}"), &body, cookie, StatusCode::OK)
}

async fn thread_live(State(shared): State<Arc<Shared>>, Id(id): Id) -> Result<Json<Value>, ApiError> {
    let located = api::locate(&shared, &id).await?;
    let status = api::status(&shared, &located);
    let version = format!(
        "{status}:{}:{}",
        located.snapshot.as_ref().map_or(0, |s| s.checkpoint),
        located.record.as_ref().map_or(0, |r| r.timeline.len())
    );
    Ok(Json(json!({ "status": status, "version": version })))
}

/// One field of a form as the answer its kind expects.
fn typed(kind: &str, text: &str, id: &str) -> Result<Option<Value>, ApiError> {
    let bad = |what: &str| {
        ApiError::unprocessable("bad_resume_value", format!("the answer to `{id}` must be {what}, not {text:?}"))
    };
    Ok(Some(match kind {
        "continue" => return Ok(None),
        "yes_no" => match text {
            "true" | "yes" => Value::Bool(true),
            "false" | "no" => Value::Bool(false),
            _ => return Err(bad("yes or no")),
        },
        "integer" => json!(text.trim().parse::<i64>().map_err(|_| bad("a whole number"))?),
        "number" => json!(text.trim().parse::<f64>().map_err(|_| bad("a number"))?),
        "json" => serde_json::from_str(text).map_err(|e| bad(&format!("JSON ({e})")))?,
        _ => Value::String(text.to_owned()),
    }))
}

async fn answer(
    State(shared): State<Arc<Shared>>,
    Id(id): Id,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let back = format!("/inbox/threads/{id}");
    let result = async {
        check_form(&headers, form.get("csrf").map_or("", String::as_str))?;
        let mut keyed = serde_json::Map::new();
        for i in 0.. {
            let (Some(pause), Some(kind)) = (form.get(&format!("id.{i}")), form.get(&format!("kind.{i}"))) else {
                break;
            };
            let text = form.get(&format!("answer.{i}")).map_or("", String::as_str);
            if let Some(value) = typed(kind, text, pause)? {
                keyed.insert(pause.clone(), value);
            }
        }
        let update = match form.get("update").map(|u| u.trim()).filter(|u| !u.is_empty()) {
            None => None,
            Some(text) => Some(
                serde_json::from_str(text)
                    .map_err(|e| ApiError::unprocessable("bad_update", format!("the state update is not JSON: {e}")))?,
            ),
        };
        let resume = if keyed.is_empty() { None } else { Some(Value::Object(keyed)) };
        let request = RunRequest {
            thread_id: Some(id.clone()),
            command: Some(RunCommand { resume, update, ..RunCommand::default() }),
            checkpoint_id: form.get("checkpoint").cloned(),
            ..RunRequest::default()
        };
        let prepared = api::prepare(&shared, None, request).await?;
        let run = api::start(&shared, prepared)?;
        // Show the outcome at once when the run is quick; else the thread page follows it live.
        let _ = tokio::time::timeout(Duration::from_secs(2), run.finished()).await;
        if let End::Refused(error) = &run.progress().end {
            return Err(error.clone());
        }
        Ok::<_, ApiError>(())
    }
    .await;
    match result {
        Ok(()) => Redirect::to(&back).into_response(),
        Err(error) => error_page(&error, &back),
    }
}

async fn start(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let result = async {
        check_form(&headers, form.get("csrf").map_or("", String::as_str))?;
        let input: Value = serde_json::from_str(form.get("input").map_or("{}", String::as_str))
            .map_err(|e| ApiError::unprocessable("bad_input", format!("the input is not JSON: {e}")))?;
        let request = RunRequest { agent_id: form.get("agent").cloned(), input: Some(input), ..RunRequest::default() };
        let mut prepared = api::prepare(&shared, None, request).await?;
        // A run started from the inbox is kept: it is there to be looked at and answered.
        prepared.keep();
        let run = api::start(&shared, prepared)?;
        let _ = tokio::time::timeout(Duration::from_secs(2), run.finished()).await;
        if let End::Refused(error) = &run.progress().end {
            return Err(error.clone());
        }
        Ok::<_, ApiError>(run.thread.to_string())
    }
    .await;
    match result {
        Ok(thread) => Redirect::to(&format!("/inbox/threads/{thread}")).into_response(),
        Err(error) => error_page(&error, "/inbox"),
    }
}

async fn login_page(headers: HeaderMap) -> Response {
    let (token, cookie) = csrf(&headers);
    let body = format!(
        "<h1>Sign in</h1><form method=\"post\" action=\"/inbox/login\" class=\"login\"><label>Access token <input type=\"password\" name=\"token\" autocomplete=\"current-password\" required></label>\
         <input type=\"hidden\" name=\"csrf\" value=\"{}\"><button type=\"submit\">Sign in</button></form>",
        escape(&token)
    );
    page("Sign in", &body, cookie, StatusCode::OK)
}

async fn login(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    if let Err(error) = check_form(&headers, form.get("csrf").map_or("", String::as_str)) {
        return error_page(&error, "/inbox/login");
    }
    let token = form.get("token").map_or("", |t| t.trim());
    if !shared.access.knows(token) {
        return error_page(
            &ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "this token is not known here"),
            "/inbox/login",
        );
    }
    let mut response = Redirect::to("/inbox").into_response();
    if let Ok(cookie) =
        HeaderValue::from_str(&format!("{SESSION_COOKIE}={token}; Path=/inbox; SameSite=Strict; HttpOnly"))
    {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
    response
}

async fn logout() -> Response {
    let mut response = Redirect::to("/inbox/login").into_response();
    response.headers_mut().append(
        header::SET_COOKIE,
        HeaderValue::from_static("tea_session=; Path=/inbox; Max-Age=0; SameSite=Strict; HttpOnly"),
    );
    response
}
