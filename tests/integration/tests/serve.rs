//! `tea::serve` over loopback with a real HTTP client: the Agent Protocol's agents, threads and
//! runs on MemoryStore, SledStore and PostgreSQL (two replicas on one database), answers to
//! pauses exactly once, access by token, and every response checked against the protocol's
//! schemas (`tea-serve/openapi.json`). The browser test drives the inbox in headless Chromium.

#[path = "../../postgres_support/mod.rs"]
mod postgres_support;

mod browser_support;

use futures::future::join_all;
use reqwest::{Client, Method, StatusCode};
use serde_json::{json, Value};
use std::sync::Arc;
use tea::prelude::*;
use tea::serve::{Access, Right, Serve};

// ---- the protocol's schemas ----

/// The vendored `openapi.json`: each response is checked against its operation's schema.
struct Spec {
    doc: Value,
}

impl Spec {
    fn load() -> Spec {
        Spec { doc: serde_json::from_str(include_str!("../../../tea-serve/openapi.json")).unwrap() }
    }

    /// The operation of the spec a request path stands for (`/threads/ab12…` → `/threads/{thread_id}`;
    /// LangGraph's `/threads/{id}/runs/wait` → the protocol's `/runs/wait`).
    fn operation(path: &str) -> String {
        let parts: Vec<&str> = path.split('?').next().unwrap().trim_start_matches('/').split('/').collect();
        let templated: Vec<String> = parts
            .iter()
            .enumerate()
            .map(|(i, p)| match (i, parts[0]) {
                (1, "threads") if !matches!(*p, "search") => "{thread_id}".to_owned(),
                (1, "runs") if !matches!(*p, "wait" | "stream" | "search") => "{run_id}".to_owned(),
                (1, "agents") if *p != "search" => "{agent_id}".to_owned(),
                _ => (*p).to_owned(),
            })
            .collect();
        let joined = format!("/{}", templated.join("/"));
        match joined.strip_prefix("/threads/{thread_id}/runs") {
            Some(rest) => format!("/runs{rest}"),
            None => joined,
        }
    }

    /// Checks `body`, the answer `status` to `method path`, against the spec's schema for it.
    fn check(&self, method: &Method, path: &str, status: StatusCode, body: &Value) {
        let operation = Spec::operation(path);
        let responses = &self.doc["paths"][&operation][method.as_str().to_ascii_lowercase()]["responses"];
        assert!(responses.is_object(), "{method} {operation} is not in the spec");
        let response = &responses[status.as_str()];
        assert!(response.is_object(), "{method} {path}: the spec lists no {status} for {operation}: {body}");
        let Some(schema) = response.pointer("/content/application~1json/schema") else { return };
        let mut schema = schema.clone();
        schema["components"] = self.doc["components"].clone();
        let validator = jsonschema::options().should_validate_formats(true).build(&schema).unwrap();
        let errors: Vec<String> =
            validator.iter_errors(body).map(|e| format!("{e} at {}", e.instance_path())).collect();
        assert!(
            errors.is_empty(),
            "{method} {path} -> {status}: {body:#}\ndoes not fit {operation}'s schema: {errors:#?}"
        );
    }
}

/// An HTTP client of one server, which checks every JSON answer against the spec.
#[derive(Clone)]
struct Api {
    base: String,
    http: Client,
    spec: Arc<Spec>,
    token: Option<String>,
}

impl Api {
    fn new(base: String) -> Api {
        // Idle connections are dropped well before the server's own 30 s header-read timeout
        // closes them: reusing one just as the server closes it fails with `IncompleteMessage`.
        let http = Client::builder().pool_idle_timeout(std::time::Duration::from_secs(5)).build().unwrap();
        Api { base, http, spec: Arc::new(Spec::load()), token: None }
    }

    fn with_token(&self, token: &str) -> Api {
        Api { token: Some(token.to_owned()), ..self.clone() }
    }

    async fn raw(&self, method: Method, path: &str, body: Option<Vec<u8>>) -> (StatusCode, String) {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.header("content-type", "application/json").body(body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        if std::env::var_os("TEA_SERVE_TEST_TRACE").is_some() {
            eprintln!("{path}: {status}");
        }
        (status, response.text().await.unwrap())
    }

    /// The text of the event stream at `path`, reopened with `Last-Event-ID: after`.
    async fn sse_after(&self, path: &str, after: usize) -> String {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .header("last-event-id", after.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        response.text().await.unwrap()
    }

    /// `method path` with `body`: the status and the JSON answer (`null` for none), checked.
    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let (status, text) = self.raw(method.clone(), path, body.map(|b| b.to_string().into_bytes())).await;
        assert_ne!(status, StatusCode::INTERNAL_SERVER_ERROR, "{method} {path}: {text}");
        let value: Value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {text}"))
        };
        if status.is_client_error() {
            assert!(value["message"].as_str().is_some_and(|m| !m.is_empty()), "{method} {path}: no message: {value}");
            assert!(value["code"].is_string(), "{method} {path}: no code: {value}");
        }
        if status != StatusCode::UNAUTHORIZED
            && status != StatusCode::FORBIDDEN
            && status != StatusCode::PAYLOAD_TOO_LARGE
            && status != StatusCode::BAD_REQUEST
        {
            self.spec.check(&method, path, status, &value);
        }
        (status, value)
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.call(Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::POST, path, Some(body)).await
    }

    async fn ok(&self, method: Method, path: &str, body: Option<Value>) -> Value {
        let (status, value) = self.call(method.clone(), path, body).await;
        assert!(status.is_success(), "{method} {path}: {status} {value}");
        value
    }

    /// Waits until `GET path` answers with `status` (a thread `busy` once a run in the
    /// background has taken it): polls every 10 ms for up to 30 s, so a loaded machine makes the
    /// test slower, never wrong.
    async fn wait_for_status(&self, path: &str, status: &str) {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let now = self.ok(Method::GET, path, None).await;
            if now["status"] == status {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "`{path}` is still {} after 30 s, not {status}",
                now["status"]
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}

async fn spawn(router: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(tea::serve::serve(listener, router, std::future::pending()));
    format!("http://{address}")
}

// ---- the graphs served ----

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
struct Review {
    draft: String,
    approved: bool,
    #[reducer(append)]
    log: Vec<String>,
}

fn write(_: &Review) -> ReviewUpdate {
    Review::update().draft("Tea is served.".into()).log(vec!["write".into()])
}
fn publish(_: &Review) -> ReviewUpdate {
    Review::update().log(vec!["publish".into()])
}
fn approved(s: &Review) -> bool {
    s.approved
}

graph! {
    Approval for Review {
        start -> write;
        write -> ask;
        ask -> publish if approved;
        ask -> end;
        publish -> end;
        interrupt ask(draft => approved);
    }
}

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
struct Panel {
    #[reducer(append)]
    log: Vec<String>,
}

fn split(_: &Panel) -> PanelUpdate {
    Panel::update()
}
fn left(_: &Panel, hitl: &mut Hitl) -> Result<PanelUpdate, Pause> {
    let v: String = hitl.interrupt("left?")?;
    Ok(Panel::update().log(vec![format!("left:{v}")]))
}
fn right(_: &Panel, hitl: &mut Hitl) -> Result<PanelUpdate, Pause> {
    let v: String = hitl.interrupt("right?")?;
    Ok(Panel::update().log(vec![format!("right:{v}")]))
}
fn join(_: &Panel) -> PanelUpdate {
    Panel::update().log(vec!["join".into()])
}
fn nap(_: &Panel) -> PanelUpdate {
    std::thread::sleep(std::time::Duration::from_secs(3));
    Panel::update().log(vec!["nap".into()])
}

graph! {
    Pair for Panel {
        start -> split;
        parallel split => [left, right] -> join;
        join -> end;
        interruptible left, right;
    }
}

graph! {
    Sleepy for Panel {
        start -> nap;
        nap -> end;
        interrupt_before nap;
    }
}

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
struct Queue {
    question: String,
    answer: String,
    #[reducer(append)]
    log: Vec<String>,
}

fn slow(_: &Queue) -> QueueUpdate {
    std::thread::sleep(std::time::Duration::from_millis(1500));
    Queue::update().question("go?".into()).log(vec!["slow".into()])
}
fn settle(q: &Queue) -> QueueUpdate {
    Queue::update().log(vec![format!("answer:{}", q.answer)])
}

graph! {
    Queued for Queue {
        start -> slow;
        slow -> ask;
        ask -> settle;
        settle -> end;
        interrupt ask(question => answer);
    }
}

fn serve_on<C: Checkpointer + Clone>(store: C) -> Serve {
    Serve::new()
        .app_drawn(Approval::builder().checkpointer(store.clone()).build(), Approval::MERMAID)
        .app(Pair::builder().checkpointer(store.clone()).build())
        .app(Sleepy::builder().checkpointer(store.clone()).build())
        .app(Queued::builder().checkpointer(store).build())
}

// ---- the scenarios ----

/// Starts an Approval thread (created with `metadata`) and returns its id, paused at `ask`.
async fn paused_approval(api: &Api, metadata: Value) -> String {
    let thread = api.ok(Method::POST, "/threads", Some(json!({ "metadata": metadata }))).await;
    let id = thread["thread_id"].as_str().unwrap().to_owned();
    assert_eq!(thread["status"], "idle");
    let out = api
        .ok(Method::POST, &format!("/threads/{id}/runs/wait"), Some(json!({ "agent_id": "Approval", "input": {} })))
        .await;
    assert_eq!(out["run"]["status"], "interrupted", "{out}");
    assert_eq!(out["values"]["draft"], "Tea is served.");
    assert_eq!(out["interrupts"][0]["id"], "ask#0");
    id
}

async fn protocol(api: &Api) {
    // Agents.
    let agents = api.ok(Method::POST, "/agents/search", Some(json!({}))).await;
    let names: Vec<&str> = agents.as_array().unwrap().iter().map(|a| a["agent_id"].as_str().unwrap()).collect();
    assert_eq!(names, ["Approval", "Pair", "Sleepy", "Queued"]);
    api.ok(Method::GET, "/agents/Approval", None).await;
    let schemas = api.ok(Method::GET, "/agents/Approval/schemas", None).await;
    assert_eq!(schemas["state_schema"]["properties"]["approved"]["description"], "bool");
    let (status, error) = api.get("/agents/Nope").await;
    assert_eq!((status, error["message"].as_str().unwrap()), (StatusCode::NOT_FOUND, "agent `Nope` not found"));

    // A thread pauses at the interrupt node; its status, pause and answer kind show.
    let id = paused_approval(api, json!({ "owner": "ada" })).await;
    let thread = api.ok(Method::GET, &format!("/threads/{id}"), None).await;
    assert_eq!(thread["status"], "interrupted");
    assert_eq!(thread["metadata"]["owner"], "ada");
    assert_eq!(thread["interrupts"][0]["answer_kind"], "yes_no", "probed from the answer field's type: {thread}");
    assert_eq!(thread["interrupts"][0]["message"], "Tea is served.");

    // Search by status and metadata.
    let found = api
        .ok(Method::POST, "/threads/search", Some(json!({ "status": "interrupted", "metadata": { "owner": "ada" } })))
        .await;
    assert!(found.as_array().unwrap().iter().any(|t| t["thread_id"] == id.as_str()), "{found}");
    let found = api
        .ok(Method::POST, "/threads/search", Some(json!({ "status": "idle", "metadata": { "owner": "ada" } })))
        .await;
    assert!(!found.as_array().unwrap().iter().any(|t| t["thread_id"] == id.as_str()));

    // A wrong answer type is the engine's BadResumeValue, and the pause stays.
    let (status, error) =
        api.post(&format!("/threads/{id}/runs/wait"), json!({ "command": { "resume": "maybe" } })).await;
    assert_eq!(
        (status, error["code"].as_str().unwrap()),
        (StatusCode::UNPROCESSABLE_ENTITY, "bad_resume_value"),
        "{error}"
    );
    assert!(error["message"].as_str().unwrap().contains("node `ask`"), "{error}");
    // A run with an input on a paused thread is refused: the pause wants an answer.
    let (status, error) = api.post(&format!("/threads/{id}/runs/wait"), json!({ "input": {} })).await;
    assert_eq!((status, error["code"].as_str().unwrap()), (StatusCode::CONFLICT, "thread_paused"));
    // An answer pinned to another checkpoint is stale.
    let (status, error) = api
        .post(&format!("/threads/{id}/runs/wait"), json!({ "command": { "resume": true }, "checkpoint_id": "1" }))
        .await;
    assert_eq!((status, error["code"].as_str().unwrap()), (StatusCode::CONFLICT, "stale_resume"), "{error}");

    // The answer, with the protocol's body (`thread_id` in it), pinned to the pause's checkpoint.
    let history = api.ok(Method::GET, &format!("/threads/{id}/history"), None).await;
    let pause = history[0]["checkpoint"]["checkpoint_id"].as_str().unwrap().to_owned();
    let out = api
        .ok(
            Method::POST,
            "/runs/wait",
            Some(json!({ "thread_id": id, "command": { "resume": true }, "checkpoint": { "checkpoint_id": pause } })),
        )
        .await;
    assert_eq!(out["run"]["status"], "success", "{out}");
    assert_eq!(out["values"]["log"], json!(["write", "publish"]));
    // A second answer finds nothing to answer.
    let (status, error) = api.post(&format!("/threads/{id}/runs/wait"), json!({ "command": { "resume": true } })).await;
    assert_eq!((status, error["code"].as_str().unwrap()), (StatusCode::CONFLICT, "not_paused"), "{error}");
    let thread = api.ok(Method::GET, &format!("/threads/{id}"), None).await;
    assert_eq!(thread["status"], "idle");

    // History newest first, with the pause listed at its checkpoint.
    let history = api.ok(Method::GET, &format!("/threads/{id}/history?limit=100"), None).await;
    assert!(history.as_array().unwrap().len() >= 3, "{history}");
    assert_eq!(history[0]["values"]["log"], json!(["write", "publish"]));
    assert!(history.as_array().unwrap().iter().any(|s| s["metadata"]["interrupts"][0]["id"] == "ask#0"));

    // Copy and delete.
    let copy = api.ok(Method::POST, &format!("/threads/{id}/copy"), None).await;
    let copy_id = copy["thread_id"].as_str().unwrap().to_owned();
    assert_ne!(copy_id, id);
    assert_eq!(copy["values"]["log"], json!(["write", "publish"]));
    assert_eq!(copy["metadata"]["owner"], "ada");
    let (status, _) = api.call(Method::DELETE, &format!("/threads/{id}"), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, error) = api.get(&format!("/threads/{id}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{error}");
    api.ok(Method::GET, &format!("/threads/{copy_id}"), None).await;

    // Creating an existing thread: raise or do nothing.
    let (status, _) = api.post("/threads", json!({ "thread_id": copy_id })).await;
    assert_eq!(status, StatusCode::CONFLICT);
    api.ok(Method::POST, "/threads", Some(json!({ "thread_id": copy_id, "if_exists": "do_nothing" }))).await;
    let patched =
        api.ok(Method::PATCH, &format!("/threads/{copy_id}"), Some(json!({ "metadata": { "stage": "done" } }))).await;
    assert_eq!(
        (patched["metadata"]["owner"].as_str(), patched["metadata"]["stage"].as_str()),
        (Some("ada"), Some("done"))
    );

    // Several pauses at once: answers keyed by interrupt id.
    let out = api
        .ok(Method::POST, "/runs/wait", Some(json!({ "agent_id": "Pair", "input": {}, "on_completion": "keep" })))
        .await;
    let pair = out["run"]["thread_id"].as_str().unwrap().to_owned();
    let ids: Vec<&str> = out["interrupts"].as_array().unwrap().iter().map(|i| i["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["left#0@left", "right#0@right"]);
    let (status, error) =
        api.post(&format!("/threads/{pair}/runs/wait"), json!({ "command": { "resume": "both?" } })).await;
    assert_eq!((status, error["code"].as_str().unwrap()), (StatusCode::UNPROCESSABLE_ENTITY, "answer_ambiguous"));
    let out = api
        .ok(
            Method::POST,
            &format!("/threads/{pair}/runs/wait"),
            Some(json!({ "command": { "resume": { "left#0@left": "L", "right#0@right": "R" } } })),
        )
        .await;
    assert_eq!(out["values"]["log"], json!(["left:L", "right:R", "join"]), "{out}");

    // Streamed as server-sent events.
    let (status, text) = api
        .raw(
            Method::POST,
            "/runs/stream",
            Some(json!({ "agent_id": "Approval", "input": {}, "on_completion": "keep" }).to_string().into_bytes()),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let events: Vec<(&str, Value)> = text
        .split("\n\n")
        .filter(|block| !block.trim().is_empty() && !block.starts_with(':'))
        .map(|block| {
            let event = block.lines().find_map(|l| l.strip_prefix("event: ")).unwrap();
            let data = block.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
            (event, serde_json::from_str(data).unwrap())
        })
        .collect();
    let names: Vec<&str> = events.iter().map(|(e, _)| *e).collect();
    // Each node's update, the state after it; at the pause the pauses as an update (LangGraph's
    // `{"__interrupt__": [...]}`) and the state with them.
    assert_eq!(names, ["metadata", "updates", "values", "updates", "values", "end"], "{text}");
    assert_eq!(events[1].1, json!({ "write": { "draft": "Tea is served.", "log": ["write"] } }), "{text}");
    assert_eq!(events[3].1["__interrupt__"][0]["id"], "ask#0");
    assert_eq!(events[4].1["__interrupt__"][0]["id"], "ask#0");
    assert_eq!(events[5].1["status"], "interrupted");
    let streamed = events[0].1["thread_id"].as_str().unwrap().to_owned();
    assert_eq!(api.ok(Method::GET, &format!("/threads/{streamed}"), None).await["status"], "interrupted");

    // In the background: the run, its wait, the search; a thread that is running refuses a second run.
    let run = api
        .ok(
            Method::POST,
            "/runs",
            Some(json!({ "agent_id": "Sleepy", "input": {}, "on_completion": "keep", "metadata": { "batch": 7 } })),
        )
        .await;
    let run_id = run["run_id"].as_str().unwrap().to_owned();
    let out = api.ok(Method::GET, &format!("/runs/{run_id}/wait"), None).await;
    assert_eq!(out["run"]["status"], "interrupted");
    let sleepy = out["run"]["thread_id"].as_str().unwrap().to_owned();
    let found = api.ok(Method::POST, "/runs/search", Some(json!({ "metadata": { "batch": 7 } }))).await;
    assert_eq!(found.as_array().unwrap().len(), 1);
    let run =
        api.ok(Method::POST, &format!("/threads/{sleepy}/runs"), Some(json!({ "command": { "resume": null } }))).await;
    let run_id = run["run_id"].as_str().unwrap().to_owned();
    assert_eq!(run["status"], "pending");
    api.wait_for_status(&format!("/threads/{sleepy}"), "busy").await;
    let (status, error) = api.post(&format!("/threads/{sleepy}/runs/wait"), json!({ "command": {} })).await;
    assert_eq!((status, error["code"].as_str().unwrap()), (StatusCode::CONFLICT, "thread_busy"), "{error}");
    // Cancelled: the pause is put back, and answering it again works.
    let (status, _) = api.call(Method::POST, &format!("/runs/{run_id}/cancel"), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(api.ok(Method::GET, &format!("/runs/{run_id}"), None).await["status"], "error");
    assert_eq!(api.ok(Method::GET, &format!("/threads/{sleepy}"), None).await["status"], "interrupted");
    let out = api.ok(Method::POST, &format!("/threads/{sleepy}/runs/wait"), Some(json!({ "command": {} }))).await;
    assert_eq!(out["values"]["log"], json!(["nap"]));

    // Bad requests: never a 500.
    let (status, text) = api.raw(Method::POST, "/threads/search", Some(b"{not json".to_vec())).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    let (status, error) = api.post("/threads/search", json!({ "limit": "ten" })).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{error}");
    let (status, error) = api.post("/threads/search", json!({ "limit": 0 })).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{error}");
    let (status, error) = api.post("/threads/search", json!({ "status": "sleeping" })).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{error}");
    let (status, text) = api.raw(Method::POST, "/threads/search", Some(vec![b' '; 64 * 1024])).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{text}");
    let (status, error) = api.post("/runs/wait", json!({ "thread_id": uuid(), "command": { "resume": true } })).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{error}");
    let (status, error) =
        api.post("/runs/wait", json!({ "agent_id": "Approval", "input": { "approved": "yes" } })).await;
    assert_eq!((status, error["code"].as_str().unwrap()), (StatusCode::UNPROCESSABLE_ENTITY, "bad_input"), "{error}");
    let (status, error) = api.post("/runs/wait", json!({ "agent_id": "Approval", "input": [1, 2] })).await;
    assert_eq!((status, error["code"].as_str().unwrap()), (StatusCode::UNPROCESSABLE_ENTITY, "bad_input"), "{error}");
    let (status, error) = api.get(&format!("/threads/{pair}/history?limit=lots")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{error}");
    let (status, error) = api.post("/runs/wait", json!({ "input": {} })).await;
    assert_eq!((status, error["code"].as_str().unwrap()), (StatusCode::UNPROCESSABLE_ENTITY, "agent_missing"));
    let (status, error) = api.post("/runs/wait", json!({ "agent_id": "Approval", "on_disconnect": "shrug" })).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{error}");
    let (status, text) = api.raw(Method::PUT, "/threads/search", None).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap()["code"], "method_not_allowed");
    let (status, _) = api.get(&format!("/runs/{}", uuid())).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// The protocol's store through `api`, read back through `other` (another replica, or the same).
async fn store(api: &Api, other: &Api) {
    let put = |namespace: Value, key: &str, value: Value| {
        let api = api.clone();
        let body = json!({ "namespace": namespace, "key": key, "value": value });
        async move { api.call(Method::PUT, "/store/items", Some(body)).await }
    };
    for (namespace, key, value) in [
        (json!(["users", "bob"]), "prefs", json!({ "theme": "light" })),
        (json!(["users", "ada", "notes"]), "n1", json!({ "text": "hi" })),
        (json!(["teams"]), "core", json!({ "lead": "ada" })),
        (json!(["users", "ada"]), "prefs", json!({ "theme": "dark", "lang": "en" })),
    ] {
        let (status, body) = put(namespace, key, value).await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    }

    // Read back on the other replica, the namespace as the spec's array or LangGraph's dotted string.
    let item = other.ok(Method::GET, "/store/items?namespace=users&namespace=ada&key=prefs", None).await;
    assert_eq!((&item["namespace"], &item["key"]), (&json!(["users", "ada"]), &json!("prefs")));
    assert_eq!(item["value"], json!({ "theme": "dark", "lang": "en" }));
    assert_eq!(item["created_at"], item["updated_at"]);
    assert_eq!(other.ok(Method::GET, "/store/items?namespace=users.ada&key=prefs", None).await, item);

    // A put replaces the value and keeps the creation time.
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    put(json!(["users", "ada"]), "prefs", json!({ "theme": "light" })).await;
    let updated = other.ok(Method::GET, "/store/items?namespace=users.ada&key=prefs", None).await;
    assert_eq!(updated["value"], json!({ "theme": "light" }));
    assert_eq!(updated["created_at"], item["created_at"]);
    assert!(updated["updated_at"].as_str() > item["updated_at"].as_str(), "{updated}");

    // Search: under a prefix, by the value's fields, the most recently updated first; paged.
    let keys = |found: &Value| -> Vec<(Value, String)> {
        found["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| (i["namespace"].clone(), i["key"].as_str().unwrap().to_owned()))
            .collect()
    };
    let found = other.ok(Method::POST, "/store/items/search", Some(json!({ "namespace_prefix": ["users"] }))).await;
    assert_eq!(keys(&found).len(), 3, "{found}");
    assert_eq!(keys(&found)[0], (json!(["users", "ada"]), "prefs".to_owned()), "{found}");
    let found = other
        .ok(
            Method::POST,
            "/store/items/search",
            Some(json!({ "namespace_prefix": ["users"], "filter": { "theme": "light" } })),
        )
        .await;
    assert_eq!(
        keys(&found),
        [(json!(["users", "ada"]), "prefs".to_owned()), (json!(["users", "bob"]), "prefs".to_owned())]
    );
    let found = other.ok(Method::POST, "/store/items/search", Some(json!({ "limit": 2, "offset": 3 }))).await;
    assert_eq!(keys(&found).len(), 1, "four items in all: {found}");

    // Namespaces: sorted, cut to a depth, by prefix and suffix.
    let namespaces = other.ok(Method::POST, "/store/namespaces", Some(json!({}))).await;
    assert_eq!(namespaces, json!([["teams"], ["users", "ada"], ["users", "ada", "notes"], ["users", "bob"]]));
    let namespaces =
        other.ok(Method::POST, "/store/namespaces", Some(json!({ "prefix": ["users"], "max_depth": 2 }))).await;
    assert_eq!(namespaces, json!([["users", "ada"], ["users", "bob"]]));
    let namespaces = other.ok(Method::POST, "/store/namespaces", Some(json!({ "suffix": ["notes"] }))).await;
    assert_eq!(namespaces, json!([["users", "ada", "notes"]]));

    // Delete: once; then it is gone on both.
    let gone = json!({ "namespace": ["users", "bob"], "key": "prefs" });
    let (status, _) = api.call(Method::DELETE, "/store/items", Some(gone.clone())).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, error) = other.call(Method::DELETE, "/store/items", Some(gone)).await;
    assert_eq!((status, error["code"].as_str()), (StatusCode::NOT_FOUND, Some("not_found")), "{error}");
    let (status, _) = other.get("/store/items?namespace=users.bob&key=prefs").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Bad requests: 4xx with the protocol's ErrorResponse.
    for (namespace, key, value) in [
        (json!(["users"]), "k", json!([1, 2])),
        (json!([]), "k", json!({})),
        (json!(["a.b"]), "k", json!({})),
        (json!([""]), "k", json!({})),
        (json!(["users"]), "", json!({})),
        (json!(["users"]), &*"k".repeat(2000), json!({})),
    ] {
        let (status, error) = put(namespace, key, value).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{error}");
    }
    let (status, _) = api.raw(Method::PUT, "/store/items", Some(b"{\"namespace\": [\"x\"]".to_vec())).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = api.call(Method::PUT, "/store/items", Some(json!({ "namespace": ["x"], "key": "k" }))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "no value");
    for query in ["namespace=users", "namespace=users&key=a&key=b", "key=prefs&colour=red", "key=prefs&namespace=a..b"]
    {
        let (status, error) = api.get(&format!("/store/items?{query}")).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{query}: {error}");
    }
    let (status, _) = api.post("/store/items/search", json!({ "query": "dark themes" })).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, _) = api.post("/store/items/search", json!({ "limit": 0 })).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, _) = api.post("/store/namespaces", json!({ "max_depth": 0 })).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
}

fn uuid() -> String {
    tea::ThreadId::random().to_string()
}

/// `n` answers to one pause at once, spread over `apis`: exactly one runs.
async fn race(apis: &[Api], id: &str, n: usize) {
    let answers = (0..n).map(|i| {
        let api = apis[i % apis.len()].clone();
        let id = id.to_owned();
        async move { api.post(&format!("/threads/{id}/runs/wait"), json!({ "command": { "resume": true } })).await }
    });
    let results = join_all(answers).await;
    let won: Vec<&(StatusCode, Value)> = results.iter().filter(|(s, _)| *s == StatusCode::OK).collect();
    assert_eq!(won.len(), 1, "exactly one answer runs: {results:#?}");
    for (status, body) in &results {
        assert!(*status == StatusCode::OK || *status == StatusCode::CONFLICT, "{status} {body}");
        if *status == StatusCode::CONFLICT {
            let code = body["code"].as_str().unwrap();
            assert!(["stale_resume", "not_paused", "thread_busy"].contains(&code), "{body}");
        }
    }
    for api in apis {
        let thread = api.ok(Method::GET, &format!("/threads/{id}"), None).await;
        assert_eq!(thread["status"], "idle");
        assert_eq!(thread["values"]["log"], json!(["write", "publish"]), "published once");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_store() {
    let api = Api::new(spawn(serve_on(MemoryStore::new()).body_limit(16 * 1024).router()).await);
    protocol(&api).await;
    store(&api, &api).await;
    let id = paused_approval(&api, json!({})).await;
    race(&[api], &id, 32).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sled_store() {
    let dir = std::env::temp_dir().join(format!("tea-serve-sled-{}", std::process::id()));
    let store = SledStore::open(&dir).unwrap();
    let api = Api::new(spawn(serve_on(store).body_limit(16 * 1024).router()).await);
    protocol(&api).await;
    self::store(&api, &api).await;
    let id = paused_approval(&api, json!({})).await;
    race(&[api], &id, 32).await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn postgres_two_replicas() {
    // The schema is made and dropped outside the runtime (its helper blocks on its own).
    let Some(schema) = postgres_support::TestSchema::new("serve_replicas") else { return };
    let stores = (schema.store(), schema.store(), schema.store());
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap()
        .block_on(replicas(stores));
}

async fn replicas((one, two, third): (PostgresStore, PostgresStore, PostgresStore)) {
    let one = Api::new(spawn(serve_on(one).body_limit(16 * 1024).router()).await);
    let two = Api::new(spawn(serve_on(two).body_limit(16 * 1024).router()).await);
    protocol(&one).await;
    store(&one, &two).await;
    // A pause taken on one replica is seen, with its metadata, and answered on the other.
    let id = paused_approval(&one, json!({ "team": "pg" })).await;
    let seen = two.ok(Method::GET, &format!("/threads/{id}"), None).await;
    assert_eq!((seen["status"].as_str(), seen["metadata"]["team"].as_str()), (Some("interrupted"), Some("pg")));
    race(&[one.clone(), two.clone()], &id, 32).await;

    // A run is known on both replicas through its record: read, waited for, found and streamed
    // on the one that does not run it.
    let run = one
        .ok(
            Method::POST,
            "/runs",
            Some(json!({ "agent_id": "Approval", "input": {}, "on_completion": "keep", "metadata": { "on": "one" } })),
        )
        .await;
    let run_id = run["run_id"].as_str().unwrap().to_owned();
    let out = two.ok(Method::GET, &format!("/runs/{run_id}/wait"), None).await;
    assert_eq!(
        (out["run"]["status"].as_str(), &out["values"]["draft"]),
        (Some("interrupted"), &json!("Tea is served."))
    );
    assert_eq!(out["interrupts"][0]["id"], "ask#0");
    assert_eq!(two.ok(Method::GET, &format!("/runs/{run_id}"), None).await["status"], "interrupted");
    let found = two.ok(Method::POST, "/runs/search", Some(json!({ "metadata": { "on": "one" } }))).await;
    assert_eq!(found.as_array().unwrap().iter().map(|r| r["run_id"].clone()).collect::<Vec<_>>(), [json!(run_id)]);
    let (status, text) = two.raw(Method::GET, &format!("/runs/{run_id}/stream"), None).await;
    assert_eq!(status, StatusCode::OK);
    // Every event of the run, stored as it ran, with its id (its place in the run's events).
    let events: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("event: ")).collect();
    let ids: Vec<usize> = text.lines().filter_map(|l| l.strip_prefix("id: ")?.parse().ok()).collect();
    assert_eq!((events.first(), events.last()), (Some(&"metadata"), Some(&"end")), "{text}");
    assert!(events.contains(&"updates") && events.contains(&"values"), "{text}");
    assert!(ids.len() == events.len() && ids.windows(2).all(|w| w[0] < w[1]), "{text}");
    // Reopened after its second event: the rest.
    let resumed = two.sse_after(&format!("/runs/{run_id}/stream"), ids[1]).await;
    let resumed: Vec<usize> = resumed.lines().filter_map(|l| l.strip_prefix("id: ")?.parse().ok()).collect();
    assert_eq!(resumed, ids[2..].to_vec());
    // Cancelled through the other replica: the answer stops, and the pause is back.
    let out = one
        .ok(Method::POST, "/runs/wait", Some(json!({ "agent_id": "Sleepy", "input": {}, "on_completion": "keep" })))
        .await;
    let sleepy = out["run"]["thread_id"].as_str().unwrap().to_owned();
    let run = one.ok(Method::POST, &format!("/threads/{sleepy}/runs"), Some(json!({ "command": {} }))).await;
    let run_id = run["run_id"].as_str().unwrap().to_owned();
    two.wait_for_status(&format!("/threads/{sleepy}"), "busy").await;
    assert_eq!(two.ok(Method::GET, &format!("/runs/{run_id}"), None).await["status"], "pending");
    let (status, _) = two.call(Method::POST, &format!("/runs/{run_id}/cancel"), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(one.ok(Method::GET, &format!("/runs/{run_id}"), None).await["status"], "error");
    assert_eq!(two.ok(Method::GET, &format!("/runs/{run_id}"), None).await["status"], "error");
    assert_eq!(two.ok(Method::GET, &format!("/threads/{sleepy}"), None).await["status"], "interrupted");
    // enqueue across replicas: a run of one holds the thread (1.5 s to its pause); an answer sent
    // to the other is refused, or with `enqueue` waits for it and answers the pause.
    let thread = one.ok(Method::POST, "/threads", Some(json!({}))).await["thread_id"].as_str().unwrap().to_owned();
    one.ok(Method::POST, &format!("/threads/{thread}/runs"), Some(json!({ "agent_id": "Queued", "input": {} }))).await;
    two.wait_for_status(&format!("/threads/{thread}"), "busy").await;
    let answer = json!({ "command": { "resume": "yes" } });
    let (status, error) = two.post(&format!("/threads/{thread}/runs/wait"), answer.clone()).await;
    assert_eq!((status, error["code"].as_str()), (StatusCode::CONFLICT, Some("thread_busy")), "{error}");
    let queued = json!({ "command": { "resume": "yes" }, "multitask_strategy": "enqueue" });
    let out = two.ok(Method::POST, &format!("/threads/{thread}/runs/wait"), Some(queued)).await;
    assert_eq!(
        (out["run"]["status"].as_str(), &out["values"]["log"]),
        (Some("success"), &json!(["slow", "answer:yes"]))
    );

    // Deleting the thread deletes its runs' records.
    let (status, _) = two.call(Method::DELETE, &format!("/threads/{sleepy}"), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let fresh = Api::new(spawn(serve_on(third).router()).await);
    let (status, _) = fresh.get(&format!("/runs/{run_id}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // And one replica's answer to a pause the other took.
    let id = paused_approval(&two, json!({})).await;
    let out = one
        .ok(Method::POST, &format!("/threads/{id}/runs/wait"), Some(json!({ "command": { "resume": false } })))
        .await;
    assert_eq!(out["values"]["log"], json!(["write"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_guard_every_route_and_say_nothing_of_threads() {
    let access = Access::tokens([("answer-token-0123456789", Right::Answer), ("read-token-0123456789ab", Right::Read)]);
    let base = spawn(serve_on(MemoryStore::new()).access(access).router()).await;
    let anonymous = Api::new(base.clone());
    let writer = anonymous.with_token("answer-token-0123456789");
    let reader = anonymous.with_token("read-token-0123456789ab");
    let id = paused_approval(&writer, json!({})).await;

    // Without a token, a thread that exists and one that does not look the same.
    let known = anonymous.raw(Method::GET, &format!("/threads/{id}"), None).await;
    let unknown = anonymous.raw(Method::GET, &format!("/threads/{}", uuid()), None).await;
    assert_eq!(known.0, StatusCode::UNAUTHORIZED);
    assert_eq!(known, unknown);
    let wrong = anonymous.with_token("answer-token-0123456788");
    assert_eq!(wrong.raw(Method::GET, &format!("/threads/{id}"), None).await, unknown);
    assert_eq!(anonymous.raw(Method::POST, "/agents/search", Some(b"{}".to_vec())).await.0, StatusCode::UNAUTHORIZED);

    // Read rights read, and cannot answer (before the thread is looked at).
    assert_eq!(reader.ok(Method::GET, &format!("/threads/{id}"), None).await["status"], "interrupted");
    reader.ok(Method::POST, "/threads/search", Some(json!({}))).await;
    reader.ok(Method::POST, "/store/items/search", Some(json!({}))).await;
    reader.ok(Method::POST, "/store/namespaces", Some(json!({}))).await;
    let item = json!({ "namespace": ["n"], "key": "k", "value": {} }).to_string().into_bytes();
    assert_eq!(reader.raw(Method::PUT, "/store/items", Some(item.clone())).await.0, StatusCode::FORBIDDEN);
    assert_eq!(anonymous.raw(Method::PUT, "/store/items", Some(item.clone())).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(writer.raw(Method::PUT, "/store/items", Some(item)).await.0, StatusCode::NO_CONTENT);
    let answer = json!({ "command": { "resume": true } }).to_string().into_bytes();
    let refused = reader.raw(Method::POST, &format!("/threads/{id}/runs/wait"), Some(answer.clone())).await;
    let refused_unknown = reader.raw(Method::POST, &format!("/threads/{}/runs/wait", uuid()), Some(answer)).await;
    assert_eq!(refused.0, StatusCode::FORBIDDEN);
    assert_eq!(refused, refused_unknown);
    let out = writer
        .ok(Method::POST, &format!("/threads/{id}/runs/wait"), Some(json!({ "command": { "resume": true } })))
        .await;
    assert_eq!(out["run"]["status"], "success");

    // The inbox sends a browser without a session to the sign-in page.
    let no_redirects = Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let response = no_redirects.get(format!("{base}/inbox")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    assert_eq!(response.headers()["location"], "/inbox/login");
    // A form post from another origin is refused even with a session.
    let response = no_redirects
        .post(format!("{base}/inbox/threads/{id}/answer"))
        .header("cookie", "tea_session=answer-token-0123456789; tea_csrf=0123456789abcdef0123456789abcdef")
        .header("origin", "http://evil.example")
        .form(&[("csrf", "0123456789abcdef0123456789abcdef"), ("checkpoint", "1")])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    // And one without the session's CSRF token.
    let response = no_redirects
        .post(format!("{base}/inbox/threads/{id}/answer"))
        .header("cookie", "tea_session=answer-token-0123456789; tea_csrf=0123456789abcdef0123456789abcdef")
        .form(&[("csrf", "ffffffffffffffffffffffffffffffff"), ("checkpoint", "1")])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
}

const YAML_AGENT: &str = r#"
name: review
state:
  approved: bool
  amount: int
nodes:
  - name: draft
    run: |
      return { draft = "Refund order 1234?" }
  - name: approve
    type: interrupt
    message: "{{ state.draft }}"
    resume_key: approved
  - name: how_much
    type: interrupt
    message: "How much (in euros)?"
    resume_key: amount
  - name: done
    run: |
      return { result = "refunded " .. tostring(state.amount) }
config:
  checkpointer: memory
"#;

fn yaml_router() -> axum::Router {
    let agent = tea::yaml::Engine::new().load_str(YAML_AGENT).unwrap();
    tea::serve::router_for([agent], MemoryStore::new())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn yaml_agents_and_the_inbox_page() {
    let base = spawn(yaml_router()).await;
    let api = Api::new(base.clone());
    let out = api.ok(Method::POST, "/runs/wait", Some(json!({ "input": {}, "on_completion": "keep" }))).await;
    let id = out["run"]["thread_id"].as_str().unwrap().to_owned();
    let thread = api.ok(Method::GET, &format!("/threads/{id}"), None).await;
    assert_eq!(thread["interrupts"][0]["answer_kind"], "yes_no", "from the declared type of `approved`");
    assert_eq!(thread["interrupts"][0]["message"], "Refund order 1234?");

    // The inbox lists the pause with a yes/no form; the thread page draws the graph.
    let http = Client::new();
    let inbox = http.get(format!("{base}/inbox")).send().await.unwrap().text().await.unwrap();
    assert!(inbox.contains(&format!("data-thread=\"{id}\"")), "{inbox}");
    assert!(inbox.contains("Refund order 1234?"));
    assert!(inbox.contains("type=\"radio\" name=\"answer.0\" value=\"true\""), "{inbox}");
    let page = http.get(format!("{base}/inbox/threads/{id}")).send().await.unwrap().text().await.unwrap();
    assert!(page.contains("<li class=\"node current\" data-node=\"approve\">"), "{page}");
    assert!(page.contains("<tr class=\"pause\">"), "{page}");

    let (status, error) =
        api.post(&format!("/threads/{id}/runs/wait"), json!({ "command": { "resume": "yes" } })).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{error}");
    let out =
        api.ok(Method::POST, &format!("/threads/{id}/runs/wait"), Some(json!({ "command": { "resume": true } }))).await;
    assert_eq!(out["interrupts"][0]["id"], "how_much#0");
    let thread = api.ok(Method::GET, &format!("/threads/{id}"), None).await;
    assert_eq!(thread["interrupts"][0]["answer_kind"], "integer");
    let out =
        api.ok(Method::POST, &format!("/threads/{id}/runs/wait"), Some(json!({ "command": { "resume": 40 } }))).await;
    assert_eq!(out["values"]["result"], "refunded 40");
}

/// The protocol's multitask strategies on a thread that is running: `reject` (the default) is
/// `409`; `enqueue` waits for the run that holds the thread, then runs as if it came then — an
/// answer queued behind the run that pauses answers that pause; one queued behind the answer
/// finds nothing left to answer; a queued run that is cancelled never runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn runs_on_a_running_thread_are_refused_or_queued() {
    let router = Serve::new().app(Queued::builder().checkpointer(MemoryStore::new()).build()).router();
    let api = Api::new(spawn(router).await);
    let thread = api.ok(Method::POST, "/threads", Some(json!({}))).await["thread_id"].as_str().unwrap().to_owned();
    let runs = format!("/threads/{thread}/runs");

    // The first run takes 1.5 s to reach its pause.
    let first = api.ok(Method::POST, &runs, Some(json!({ "input": {} }))).await;
    let answer = |resume: &str, strategy: Option<&str>| {
        let mut body = json!({ "command": { "resume": resume } });
        if let Some(strategy) = strategy {
            body["multitask_strategy"] = json!(strategy);
        }
        body
    };
    let (status, error) = api.post(&format!("{runs}/wait"), answer("yes", None)).await;
    assert_eq!((status, error["code"].as_str()), (StatusCode::CONFLICT, Some("thread_busy")), "{error}");
    let (status, error) = api.post(&format!("{runs}/wait"), answer("yes", Some("reject"))).await;
    assert_eq!((status, error["code"].as_str()), (StatusCode::CONFLICT, Some("thread_busy")), "{error}");
    let (status, error) = api.post(&format!("{runs}/wait"), answer("yes", Some("rollback"))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{error}");

    // Queued: the answer waits for the pause; a second answer waits behind it.
    let second = api.ok(Method::POST, &runs, Some(answer("yes", Some("enqueue")))).await;
    assert_eq!(second["status"], "pending");
    let third = {
        let (api, runs) = (api.clone(), runs.clone());
        tokio::spawn(async move { api.post(&format!("{runs}/wait"), answer("no", Some("enqueue"))).await })
    };
    // The third answer is listed once its request has arrived: wait for it, not for a fixed time.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let listed =
            api.ok(Method::POST, "/runs/search", Some(json!({ "thread_id": thread, "status": "pending" }))).await;
        let pending = listed.as_array().unwrap().len();
        if pending == 3 {
            break;
        }
        assert!(pending < 3 && tokio::time::Instant::now() < deadline, "not 3 pending runs: {listed}");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(api.ok(Method::GET, &format!("/threads/{thread}"), None).await["status"], "busy");

    let out = api.ok(Method::GET, &format!("/runs/{}/wait", first["run_id"].as_str().unwrap()), None).await;
    assert_eq!(out["run"]["status"], "interrupted", "{out}");
    let out = api.ok(Method::GET, &format!("/runs/{}/wait", second["run_id"].as_str().unwrap()), None).await;
    assert_eq!(out["run"]["status"], "success", "{out}");
    assert_eq!(out["values"]["log"], json!(["slow", "answer:yes"]));
    let (status, error) = third.await.unwrap();
    assert_eq!((status, error["code"].as_str()), (StatusCode::CONFLICT, Some("not_paused")), "{error}");
    let done = api.ok(Method::GET, &format!("/threads/{thread}"), None).await;
    assert_eq!((done["status"].as_str(), &done["values"]["log"]), (Some("idle"), &json!(["slow", "answer:yes"])));

    // A queued run that is cancelled leaves the queue and never runs; the pause stays.
    let out = api.ok(Method::POST, "/runs", Some(json!({ "input": {}, "on_completion": "keep" }))).await;
    let (thread, first) = (out["thread_id"].as_str().unwrap().to_owned(), out["run_id"].as_str().unwrap().to_owned());
    let queued = api.ok(Method::POST, &format!("/threads/{thread}/runs"), Some(answer("late", Some("enqueue")))).await;
    let queued = queued["run_id"].as_str().unwrap().to_owned();
    let (status, _) = api.call(Method::POST, &format!("/runs/{queued}/cancel"), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(api.ok(Method::GET, &format!("/runs/{queued}"), None).await["status"], "error");
    let out = api.ok(Method::GET, &format!("/runs/{first}/wait"), None).await;
    assert_eq!(out["run"]["status"], "interrupted");
    let paused = api.ok(Method::GET, &format!("/threads/{thread}"), None).await;
    assert_eq!((paused["status"].as_str(), &paused["values"]["log"]), (Some("interrupted"), &json!(["slow"])));
}

// ---- the inbox in a real browser ----

use browser_support::Browser;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_in_a_browser() {
    let Some(browser) = Browser::start("serve-browser").await else { return };
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/agents/review.yaml");
    let agent = tea::yaml::Engine::new().load_file_on(&file, MemoryStore::new()).unwrap();
    let token = "inbox-browser-token-0123456789";
    let router = Serve::new()
        .access(Access::tokens([(token, Right::Answer)]))
        .yaml(agent, Arc::new(MemoryStore::new()))
        .router();
    let base = spawn(router).await;
    let api = Api::new(base.clone()).with_token(token);
    let out = api.ok(Method::POST, "/runs/wait", Some(json!({ "input": {}, "on_completion": "keep" }))).await;
    let id = out["run"]["thread_id"].as_str().unwrap().to_owned();

    // Signed out: the inbox sends to the sign-in page.
    browser.goto(&format!("{base}/inbox")).await;
    browser.find("form.login").await;
    browser.screenshot("1-sign-in").await;
    browser.type_into("input[name=token]", token).await;
    browser.click("form.login button[type=submit]").await;

    // The inbox lists the paused thread with its question and a yes/no form.
    let item = format!("li.thread[data-thread=\"{id}\"]");
    assert_eq!(browser.text(&format!("{item} .message")).await, "Approve \"Release notes, take 1\"? (true/false)");
    browser.screenshot("2-inbox").await;
    browser.click(&format!("{item} input[value=true]")).await;
    browser.click(&format!("{item} button[type=submit]")).await;

    // The thread page: paused again before `publish`, with a Continue button and the graph marked.
    browser.wait_text("h1 .status", "interrupted").await;
    assert_eq!(browser.text("ol.graph li.current .name").await, "publish");
    assert_eq!(browser.text("form.answer button[type=submit]").await, "Continue");
    browser.screenshot("3-thread-paused").await;
    browser.click("form.answer button[type=submit]").await;

    // It finishes: the status, the timeline and the state say so.
    browser.wait_text("h1 .status", "idle").await;
    browser.find("table.timeline tr.done").await;
    assert!(browser.text("#state").await.contains("\"published\": \"Release notes, take 1\""));
    browser.screenshot("4-thread-done").await;
    browser.quit().await;

    let thread = api.ok(Method::GET, &format!("/threads/{id}"), None).await;
    assert_eq!(thread["status"], "idle");
    assert_eq!(thread["values"]["published"], "Release notes, take 1");
}

// ---- load: start → pause → answer on two replicas ----

/// The load figure of `bench/README.md`: `TEA_SERVE_LOAD_WORKERS` clients (default 8) each run
/// `TEA_SERVE_LOAD_CYCLES` cycles (default 25) of start → pause (on one replica) → answer (on
/// the other), on PostgreSQL; then every thread is checked: published once, nothing lost.
/// `cargo test -p tea-integration-tests --features postgres --test serve -- --ignored --nocapture load`
#[test]
#[ignore = "a measurement, not a check: run it by name"]
fn load_two_replicas_postgres() {
    let Some(schema) = postgres_support::TestSchema::new("serve_load") else { return };
    let stores = (schema.store(), schema.store());
    tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap().block_on(load(stores));
}

async fn load((one, two): (PostgresStore, PostgresStore)) {
    let number = |name: &str, default: usize| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let (workers, cycles) = (number("TEA_SERVE_LOAD_WORKERS", 8), number("TEA_SERVE_LOAD_CYCLES", 25));
    let replicas = [Api::new(spawn(serve_on(one).router()).await), Api::new(spawn(serve_on(two).router()).await)];
    let started = std::time::Instant::now();
    let tasks = (0..workers).map(|w| {
        let replicas = replicas.clone();
        tokio::spawn(async move {
            let mut timings = Vec::new();
            for c in 0..cycles {
                let (first, second) = (&replicas[(w + c) % 2], &replicas[(w + c + 1) % 2]);
                let t0 = std::time::Instant::now();
                let out = first
                    .ok(
                        Method::POST,
                        "/runs/wait",
                        Some(json!({ "agent_id": "Approval", "input": {}, "on_completion": "keep" })),
                    )
                    .await;
                let t1 = std::time::Instant::now();
                let id = out["run"]["thread_id"].as_str().unwrap().to_owned();
                let done = second
                    .ok(
                        Method::POST,
                        &format!("/threads/{id}/runs/wait"),
                        Some(json!({ "command": { "resume": true } })),
                    )
                    .await;
                assert_eq!(done["run"]["status"], "success");
                let t2 = std::time::Instant::now();
                timings.push((id, t1 - t0, t2 - t1, t2 - t0));
            }
            timings
        })
    });
    let timings: Vec<_> = join_all(tasks).await.into_iter().flat_map(Result::unwrap).collect();
    let elapsed = started.elapsed();
    for (id, ..) in &timings {
        let thread = replicas[0].ok(Method::GET, &format!("/threads/{id}"), None).await;
        assert_eq!((thread["status"].as_str(), &thread["values"]["log"]), (Some("idle"), &json!(["write", "publish"])));
    }
    let percentile = |mut v: Vec<std::time::Duration>, p: f64| {
        v.sort();
        v[((v.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1000.0
    };
    let requests: Vec<_> = timings.iter().flat_map(|t| [t.1, t.2]).collect();
    let cycles_done = timings.len();
    eprintln!(
        "load: {workers} clients x {cycles} cycles, 2 replicas on PostgreSQL: {cycles_done} threads in {:.2} s = {:.1} requests/s ({:.1} cycles/s); \
         request p50 {:.1} ms p99 {:.1} ms; start->pause p50 {:.1} ms p99 {:.1} ms; answer p50 {:.1} ms p99 {:.1} ms; cycle p50 {:.1} ms p99 {:.1} ms; \
         every thread published once",
        elapsed.as_secs_f64(),
        (2 * cycles_done) as f64 / elapsed.as_secs_f64(),
        cycles_done as f64 / elapsed.as_secs_f64(),
        percentile(requests.clone(), 0.5),
        percentile(requests, 0.99),
        percentile(timings.iter().map(|t| t.1).collect(), 0.5),
        percentile(timings.iter().map(|t| t.1).collect(), 0.99),
        percentile(timings.iter().map(|t| t.2).collect(), 0.5),
        percentile(timings.iter().map(|t| t.2).collect(), 0.99),
        percentile(timings.iter().map(|t| t.3).collect(), 0.5),
        percentile(timings.iter().map(|t| t.3).collect(), 0.99),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_the_requests_in_flight_finish() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(tea::serve::serve(listener, serve_on(MemoryStore::new()).router(), async {
        let _ = stopped.await;
    }));
    let api = Api::new(base);
    let out = api
        .ok(Method::POST, "/runs/wait", Some(json!({ "agent_id": "Sleepy", "input": {}, "on_completion": "keep" })))
        .await;
    let id = out["run"]["thread_id"].as_str().unwrap().to_owned();
    // The answer runs `nap` (3 s); the server is told to stop while it does.
    let answering = {
        let api = api.clone();
        let id = id.clone();
        tokio::spawn(async move {
            api.ok(Method::POST, &format!("/threads/{id}/runs/wait"), Some(json!({ "command": {} }))).await
        })
    };
    api.wait_for_status(&format!("/threads/{id}"), "busy").await;
    stop.send(()).unwrap();
    let out = answering.await.unwrap();
    assert_eq!((out["run"]["status"].as_str(), &out["values"]["log"]), (Some("success"), &json!(["nap"])));
    server.await.unwrap().unwrap();
}

/// The next server-sent event of `response` whose name is `name` (its data as JSON), reading
/// chunks as they come (30 s at most).
async fn next_event(response: &mut reqwest::Response, buffer: &mut String, name: &str) -> Value {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let event = block.lines().find_map(|l| l.strip_prefix("event: "));
            let data = block.lines().find_map(|l| l.strip_prefix("data: "));
            if let (Some(event), Some(data)) = (event, data) {
                if event == name {
                    return serde_json::from_str(data).unwrap();
                }
            }
        }
        let chunk = tokio::time::timeout_at(deadline, response.chunk()).await;
        let chunk = chunk.unwrap_or_else(|_| panic!("no `{name}` event within 30 s: {buffer}")).unwrap();
        buffer.push_str(&String::from_utf8_lossy(&chunk.expect("the stream ended")));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn langgraph_routes_and_the_protocols_streaming_operations() {
    let api = Api::new(spawn(serve_on(MemoryStore::new()).router()).await);
    // A `graph!` state's schema: the JSON types of its fields' Rust types, for both dialects.
    let schemas = api.ok(Method::GET, "/agents/Approval/schemas", None).await;
    let (status, text) = api.raw(Method::GET, "/assistants/Approval/schemas", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap()["state_schema"], schemas["state_schema"]);
    let fields = &schemas["state_schema"]["properties"];
    assert_eq!((&fields["draft"]["type"], &fields["approved"]["type"]), (&json!("string"), &json!("boolean")));
    assert_eq!(fields["log"], json!({ "type": "array", "description": "Vec<String>" }));
    let (status, text) = api.raw(Method::GET, "/assistants/Nobody", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{text}");
    // A run naming an unknown assistant is refused; one naming a served one runs it.
    let (status, _) = api.post("/runs/wait", json!({ "assistant_id": "Nobody", "input": {} })).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // The thread's event stream, and its commands.
    let thread = api.ok(Method::POST, "/threads", Some(json!({}))).await;
    let id = thread["thread_id"].as_str().unwrap().to_owned();
    let mut stream = api
        .http
        .post(format!("{}/threads/{id}/stream", api.base))
        .header("content-type", "application/json")
        .body(json!({ "channels": ["lifecycle", "values", "input"] }).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    let mut buffer = String::new();
    let command = |id: u64, method: &str, params: Value| json!({ "id": id, "method": method, "params": params });
    let started = api
        .ok(
            Method::POST,
            &format!("/threads/{id}/commands"),
            Some(command(1, "run.start", json!({ "agent_id": "Approval", "input": {} }))),
        )
        .await;
    assert_eq!((&started["type"], &started["id"]), (&json!("success"), &json!(1)), "{started}");
    let asked = next_event(&mut stream, &mut buffer, "input.requested").await;
    assert_eq!(asked["params"]["data"]["interrupts"][0]["id"], "ask#0", "{asked}");
    assert_eq!(asked["params"]["run_id"], started["result"]["run_id"]);
    let answered = api
        .ok(
            Method::POST,
            &format!("/threads/{id}/commands"),
            Some(command(2, "input.respond", json!({ "response": true }))),
        )
        .await;
    assert_eq!(answered["type"], "success", "{answered}");
    loop {
        let event = next_event(&mut stream, &mut buffer, "lifecycle").await;
        if event["params"]["data"]["event"] == "completed" {
            break;
        }
    }
    let state =
        api.ok(Method::POST, &format!("/threads/{id}/commands"), Some(command(3, "state.get", json!({})))).await;
    assert_eq!(state["result"]["values"]["log"], json!(["write", "publish"]), "{state}");
    let listed = api
        .ok(Method::POST, &format!("/threads/{id}/commands"), Some(command(4, "state.listCheckpoints", json!({}))))
        .await;
    assert!(listed["result"]["checkpoints"].as_array().unwrap().len() >= 3, "{listed}");
    let again = api
        .ok(
            Method::POST,
            &format!("/threads/{id}/commands"),
            Some(command(5, "input.respond", json!({ "response": true }))),
        )
        .await;
    assert_eq!((&again["type"], &again["error"]), (&json!("error"), &json!("not_paused")), "{again}");
    let unknown =
        api.ok(Method::POST, &format!("/threads/{id}/commands"), Some(command(6, "state.fork", json!({})))).await;
    assert_eq!(unknown["error"], "unknown_method", "{unknown}");
    // Replayed from the start for a stream that comes later.
    let mut replay = api
        .http
        .post(format!("{}/threads/{id}/stream", api.base))
        .header("content-type", "application/json")
        .body(json!({ "channels": ["lifecycle"], "since": 0 }).to_string())
        .send()
        .await
        .unwrap();
    let mut buffer = String::new();
    let first = next_event(&mut replay, &mut buffer, "lifecycle").await;
    assert_eq!((&first["seq"], &first["params"]["data"]["event"]), (&json!(1), &json!("running")), "{first}");
    let second = next_event(&mut replay, &mut buffer, "lifecycle").await;
    assert_eq!(second["params"]["data"]["event"], "interrupted", "{second}");
    // A client that reconnects with `Last-Event-ID` goes on after the event it names.
    let mut resumed = api
        .http
        .post(format!("{}/threads/{id}/stream", api.base))
        .header("content-type", "application/json")
        .header("last-event-id", first["seq"].to_string())
        .body(json!({ "channels": ["lifecycle"] }).to_string())
        .send()
        .await
        .unwrap();
    let mut buffer = String::new();
    let next = next_event(&mut resumed, &mut buffer, "lifecycle").await;
    assert_eq!(next, second, "the event after the one named");
    let refused = api
        .http
        .post(format!("{}/threads/{id}/stream", api.base))
        .header("content-type", "application/json")
        .header("last-event-id", "x")
        .body(json!({ "channels": ["lifecycle"] }).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY, "an id this server never gave");
    let (status, _) = api.post(&format!("/threads/{id}/stream"), json!({ "channels": ["tokens"] })).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    // Without a WebSocket upgrade, the GET form says what it is.
    let (status, text) = api.raw(Method::GET, &format!("/threads/{id}/stream"), None).await;
    assert_eq!(status, StatusCode::UPGRADE_REQUIRED, "{text}");
}

/// A client answers a pause the moment the socket tells of it, again and again: the run that
/// paused may still be writing its records then, and the answer waits for it rather than being
/// refused as `thread_busy`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_sent_the_moment_a_pause_is_announced_is_taken() {
    use futures::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    let api = Api::new(spawn(serve_on(MemoryStore::new()).router()).await);
    for round in 0..30 {
        let thread = api.ok(Method::POST, "/threads", Some(json!({}))).await;
        let id = thread["thread_id"].as_str().unwrap().to_owned();
        let url = format!("{}/threads/{id}/stream", api.base.replacen("http://", "ws://", 1));
        let (mut socket, _) = tokio_tungstenite::connect_async(url.as_str()).await.expect("the WebSocket opens");
        let command = |id: u64, method: &str, params: Value| {
            Message::text(json!({ "id": id, "method": method, "params": params }).to_string())
        };
        socket.send(command(1, "subscription.subscribe", json!({ "channels": ["lifecycle", "input"] }))).await.unwrap();
        socket.send(command(2, "run.start", json!({ "agent_id": "Approval", "input": {} }))).await.unwrap();
        loop {
            let message = next_text(&mut socket).await;
            if message["method"] == "input.requested" {
                break;
            }
        }
        socket.send(command(3, "input.respond", json!({ "response": true }))).await.unwrap();
        let answered = loop {
            let message = next_text(&mut socket).await;
            if message["id"] == 3 {
                break message;
            }
        };
        assert_eq!(answered["type"], "success", "round {round}: {answered}");
    }
}

/// The next text message a WebSocket sends (answers and events, in order), as JSON.
async fn next_text(
    socket: &mut (impl futures::StreamExt<
        Item = Result<tokio_tungstenite::tungstenite::Message, tokio_tungstenite::tungstenite::Error>,
    > + Unpin),
) -> Value {
    loop {
        let message = tokio::time::timeout(std::time::Duration::from_secs(30), socket.next())
            .await
            .expect("the server sends within 30 s")
            .expect("the socket stays open")
            .unwrap();
        if let tokio_tungstenite::tungstenite::Message::Text(text) = message {
            return serde_json::from_str(text.as_str()).unwrap();
        }
    }
}

/// The Agent Protocol's WebSocket form of a thread's stream: commands in, their answers and the
/// events of the connection's subscriptions out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_threads_websocket_takes_commands_and_sends_its_subscriptions_events() {
    use futures::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    let api = Api::new(spawn(serve_on(MemoryStore::new()).router()).await);
    let thread = api.ok(Method::POST, "/threads", Some(json!({}))).await;
    let id = thread["thread_id"].as_str().unwrap().to_owned();
    let url = format!("{}/threads/{id}/stream", api.base.replacen("http://", "ws://", 1));
    let (mut socket, _) = tokio_tungstenite::connect_async(url.as_str()).await.expect("the WebSocket opens");
    let command = |id: u64, method: &str, params: Value| {
        Message::text(json!({ "id": id, "method": method, "params": params }).to_string())
    };
    socket.send(command(1, "subscription.subscribe", json!({ "channels": ["lifecycle", "input"] }))).await.unwrap();
    let subscribed = next_text(&mut socket).await;
    assert_eq!((&subscribed["type"], &subscribed["id"]), (&json!("success"), &json!(1)), "{subscribed}");
    let name = subscribed["result"]["subscription_id"].as_str().unwrap().to_owned();
    socket.send(command(2, "run.start", json!({ "agent_id": "Approval", "input": {} }))).await.unwrap();
    // The answer and the run's events, in the order the server sends them.
    let mut seen = Vec::new();
    let asked = loop {
        let message = next_text(&mut socket).await;
        if message["method"] == "input.requested" {
            break message;
        }
        seen.push(message);
    };
    let started = seen.iter().find(|m| m["id"] == 2).expect("run.start is answered");
    assert_eq!(started["type"], "success", "{started}");
    assert_eq!(asked["subscription_id"], name.as_str(), "{asked}");
    assert_eq!(asked["params"]["run_id"], started["result"]["run_id"], "{asked}");
    assert_eq!(asked["params"]["data"]["interrupts"][0]["id"], "ask#0", "{asked}");
    // An answer over the socket; the run completes.
    socket.send(command(3, "input.respond", json!({ "response": true }))).await.unwrap();
    loop {
        let message = next_text(&mut socket).await;
        if message["id"] == 3 {
            assert_eq!(message["type"], "success", "{message}");
        }
        if message["method"] == "lifecycle" && message["params"]["data"]["event"] == "completed" {
            break;
        }
    }
    socket.send(command(4, "state.get", json!({}))).await.unwrap();
    let state = loop {
        let message = next_text(&mut socket).await;
        if message["id"] == 4 {
            break message;
        }
    };
    assert_eq!(state["result"]["values"]["log"], json!(["write", "publish"]), "{state}");
    // A reconnect replays the subscription's events after `since`: from the first on.
    socket.send(command(5, "subscription.reconnect", json!({ "since": 0 }))).await.unwrap();
    let mut replayed = Vec::new();
    while replayed.len() < 2 {
        let message = next_text(&mut socket).await;
        if message["type"] == "event" {
            replayed.push(message);
        }
    }
    assert_eq!((&replayed[0]["seq"], &replayed[0]["params"]["data"]["event"]), (&json!(1), &json!("running")));
    assert_eq!(replayed[1]["method"], "input.requested", "{:?}", replayed);
    // Bad commands are answered, not dropped: an unknown subscription, an unknown method, a
    // frame that is no command.
    socket.send(command(6, "subscription.unsubscribe", json!({ "subscription_id": "nobody" }))).await.unwrap();
    socket.send(command(7, "state.fork", json!({}))).await.unwrap();
    socket.send(Message::text("{not json")).await.unwrap();
    socket.send(command(8, "subscription.unsubscribe", json!({ "subscription_id": name }))).await.unwrap();
    let mut answers = Vec::new();
    while answers.len() < 4 {
        let message = next_text(&mut socket).await;
        if message["type"] != "event" {
            answers.push(message);
        }
    }
    assert_eq!((&answers[0]["id"], &answers[0]["error"]), (&json!(6), &json!("not_found")), "{answers:?}");
    assert_eq!((&answers[1]["id"], &answers[1]["error"]), (&json!(7), &json!("unknown_method")), "{answers:?}");
    assert_eq!((&answers[2]["id"], &answers[2]["error"]), (&json!(null), &json!("bad_request")), "{answers:?}");
    assert_eq!((&answers[3]["id"], &answers[3]["type"]), (&json!(8), &json!("success")), "{answers:?}");
    // A connection holds at most 16 subscriptions: the 17th is refused, the others keep working.
    for n in 0..17u64 {
        socket.send(command(100 + n, "subscription.subscribe", json!({ "channels": ["values"] }))).await.unwrap();
    }
    let mut refused = Vec::new();
    let mut granted = 0;
    while granted + refused.len() < 17 {
        let message = next_text(&mut socket).await;
        match message["type"].as_str() {
            Some("success") => granted += 1,
            Some("error") => refused.push(message),
            _ => {}
        }
    }
    assert_eq!(granted, 16);
    assert_eq!((&refused[0]["id"], &refused[0]["error"]), (&json!(116), &json!("too_many_subscriptions")));
    socket.close(None).await.unwrap();

    // A read token's socket reads, and starts or answers nothing.
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let access = Access::tokens([("answer-token-0123456789", Right::Answer), ("read-token-0123456789ab", Right::Read)]);
    let guarded = Api::new(spawn(serve_on(MemoryStore::new()).access(access).router()).await);
    let writer = guarded.with_token("answer-token-0123456789");
    let id = writer.ok(Method::POST, "/threads", Some(json!({}))).await["thread_id"].as_str().unwrap().to_owned();
    let url = format!("{}/threads/{id}/stream", guarded.base.replacen("http://", "ws://", 1));
    let mut request = url.as_str().into_client_request().unwrap();
    request.headers_mut().insert("authorization", "Bearer read-token-0123456789ab".parse().unwrap());
    let (mut socket, _) = tokio_tungstenite::connect_async(request).await.expect("a read token opens the socket");
    socket.send(command(1, "run.start", json!({ "agent_id": "Approval", "input": {} }))).await.unwrap();
    socket.send(command(2, "input.respond", json!({ "response": true }))).await.unwrap();
    socket.send(command(3, "state.get", json!({}))).await.unwrap();
    let (refused, answered, read) =
        (next_text(&mut socket).await, next_text(&mut socket).await, next_text(&mut socket).await);
    assert_eq!((&refused["id"], &refused["error"]), (&json!(1), &json!("forbidden")), "{refused}");
    assert_eq!((&answered["id"], &answered["error"]), (&json!(2), &json!("forbidden")), "{answered}");
    assert_eq!((&read["id"], &read["type"]), (&json!(3), &json!("success")), "{read}");
    let unauthorized = tokio_tungstenite::connect_async(url.as_str()).await;
    assert!(unauthorized.is_err(), "no token, no socket");
}
