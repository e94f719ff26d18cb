//! The Edge Agent's actions over hosted services that answer HTTP (feature `net`), spoken
//! directly over their REST APIs with `net.rs`'s client, retries and timeouts:
//!
//! - `web.search` — Perplexity's chat completions (`PERPLEXITY_API_KEY`): the answer, and its
//!   citations as `results`.
//! - `web.scrape`, `web.crawl` — Firecrawl v1 (`FIRECRAWL_API_KEY`): one page, or a crawl job
//!   polled until it completes.
//! - `web.ai_scrape` — ScrapeGraphAI's smart scraper (`SCRAPEGRAPH_API_KEY`, sent as
//!   `SGAI-APIKEY`): what its `output_schema` asks for, under `data` (the API's `result`, out
//!   of its envelope, which is what The Edge Agent's examples read).
//! - `llamaextract.extract`, `submit_job`, `poll_status`, `get_result` — LlamaCloud's
//!   extraction API (`LLAMAEXTRACT_API_KEY`, else `LLAMAPARSE_API_KEY`): the file (a path, a
//!   URL or a `data:` URI) sent inline as base64 with the schema or an agent id; a pending
//!   job polled. tea always speaks REST here, as The Edge Agent with `use_rest: true`: its
//!   SDK-only paths (`agent_name`, the agent-management actions) are not available.
//!
//! - `text.insert_citations` — The Edge Agent's citation placer (from Kiroku): each reference
//!   cited at the sentence whose embedding (OpenAI's or Azure's `/embeddings`) is closest,
//!   references renumbered by first citation, markers (` [1,2]`) before the sentence's final
//!   punctuation, a `## References` section. Sentences are split at Unicode sentence
//!   boundaries (UAX #29), where The Edge Agent uses NLTK's Punkt model.
//!
//! - `embedding.create`, `vector.store`, `vector.query` — embeddings from OpenAI's (default,
//!   `text-embedding-3-small`) or another provider's OpenAI-compatible `/embeddings`, kept in
//!   and searched from the agent's in-memory vector store (`vectors.rs`), as The Edge Agent's
//!   default backend.
//! - `rag.llamaindex.*` — as The Edge Agent runs them where LlamaIndex is not installed (tea
//!   embeds none): `query`, and `router` when one of its engines is a vector index, are
//!   `vector.query`; `create_index`, `load_index`, `add_documents` and `subquestion` report
//!   LlamaIndex missing (`success: false`). The loader warns so.
//!
//! As The Edge Agent's, a service's failure is the action's result — `{success: false, error,
//! error_type}` with its messages and types (`configuration`, `rate_limit`, `api_error`,
//! `timeout`, `connection`, …) — so an agent can route on it; a malformed argument fails the
//! node. Each also takes `api_key` and `base_url` (tea's: the key of the file's secrets, a
//! proxy or a test server); the base URL else comes from `PERPLEXITY_API_BASE`,
//! `FIRECRAWL_API_BASE`, `SCRAPEGRAPH_API_BASE` or `LLAMA_CLOUD_BASE_URL`.

use crate::net::{self, Call, Retry};
use base64::Engine as _;
use serde_json::{json, Map, Value};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One of the service actions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Service {
    WebSearch,
    WebScrape,
    WebCrawl,
    WebAiScrape,
    Extract,
    SubmitJob,
    PollStatus,
    GetResult,
    InsertCitations,
    EmbeddingCreate,
    VectorStore,
    VectorQuery,
    LlamaQuery,
    LlamaRouter,
    LlamaSubquestion,
    LlamaCreateIndex,
    LlamaLoadIndex,
    LlamaAddDocuments,
}

/// LlamaExtract's extraction modes.
const MODES: [&str; 4] = ["BALANCED", "MULTIMODAL", "PREMIUM", "FAST"];
/// The longest a service action polls or waits, whatever its arguments say: a day.
const MAX_WAIT_SECS: f64 = 86_400.0;

impl Service {
    /// The action named `name`.
    pub(crate) fn named(name: &str) -> Option<Service> {
        Some(match name {
            "web.search" => Service::WebSearch,
            "web.scrape" => Service::WebScrape,
            "web.crawl" => Service::WebCrawl,
            "web.ai_scrape" => Service::WebAiScrape,
            "llamaextract.extract" => Service::Extract,
            "llamaextract.submit_job" => Service::SubmitJob,
            "llamaextract.poll_status" => Service::PollStatus,
            "llamaextract.get_result" => Service::GetResult,
            "text.insert_citations" => Service::InsertCitations,
            "embedding.create" => Service::EmbeddingCreate,
            "vector.store" => Service::VectorStore,
            "vector.query" => Service::VectorQuery,
            "rag.llamaindex.query" => Service::LlamaQuery,
            "rag.llamaindex.router" => Service::LlamaRouter,
            "rag.llamaindex.subquestion" => Service::LlamaSubquestion,
            "rag.llamaindex.create_index" => Service::LlamaCreateIndex,
            "rag.llamaindex.load_index" => Service::LlamaLoadIndex,
            "rag.llamaindex.add_documents" => Service::LlamaAddDocuments,
            _ => return None,
        })
    }

    /// Its name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Service::WebSearch => "web.search",
            Service::WebScrape => "web.scrape",
            Service::WebCrawl => "web.crawl",
            Service::WebAiScrape => "web.ai_scrape",
            Service::Extract => "llamaextract.extract",
            Service::SubmitJob => "llamaextract.submit_job",
            Service::PollStatus => "llamaextract.poll_status",
            Service::GetResult => "llamaextract.get_result",
            Service::InsertCitations => "text.insert_citations",
            Service::EmbeddingCreate => "embedding.create",
            Service::VectorStore => "vector.store",
            Service::VectorQuery => "vector.query",
            Service::LlamaQuery => "rag.llamaindex.query",
            Service::LlamaRouter => "rag.llamaindex.router",
            Service::LlamaSubquestion => "rag.llamaindex.subquestion",
            Service::LlamaCreateIndex => "rag.llamaindex.create_index",
            Service::LlamaLoadIndex => "rag.llamaindex.load_index",
            Service::LlamaAddDocuments => "rag.llamaindex.add_documents",
        }
    }

    /// Whether it stands in for LlamaIndex (for the loader's warning).
    pub(crate) fn is_llamaindex(self) -> bool {
        matches!(
            self,
            Service::LlamaQuery
                | Service::LlamaRouter
                | Service::LlamaSubquestion
                | Service::LlamaCreateIndex
                | Service::LlamaLoadIndex
                | Service::LlamaAddDocuments
        )
    }

    /// The keys of its `with:`; the first [`Service::required`] of them are required.
    pub(crate) fn keys(self) -> &'static [&'static str] {
        match self {
            Service::WebSearch => &["query", "num_results", "model", "timeout", "api_key", "base_url"],
            Service::WebScrape => &[
                "url",
                "formats",
                "only_main_content",
                "wait_for",
                "timeout",
                "actions",
                "extract_schema",
                "extract_prompt",
                "mobile",
                "include_tags",
                "exclude_tags",
                "api_key",
                "base_url",
            ],
            Service::WebCrawl => &[
                "url",
                "max_depth",
                "limit",
                "formats",
                "only_main_content",
                "include_paths",
                "exclude_paths",
                "allow_external_links",
                "poll_interval",
                "max_poll_time",
                "api_key",
                "base_url",
            ],
            Service::WebAiScrape => {
                &["url", "prompt", "output_schema", "schema", "timeout", "max_retries", "cache", "api_key", "base_url"]
            }
            Service::Extract => &[
                "file",
                "schema",
                "agent_id",
                "agent_name",
                "mode",
                "timeout",
                "max_retries",
                "use_rest",
                "async_mode",
                "polling_interval",
                "max_poll_attempts",
                "api_key",
                "base_url",
            ],
            Service::SubmitJob => &["file", "schema", "agent_id", "mode", "max_retries", "api_key", "base_url"],
            Service::PollStatus => &["job_id", "timeout", "max_retries", "api_key", "base_url"],
            Service::GetResult => &["job_id", "timeout", "api_key", "base_url"],
            Service::InsertCitations => {
                &["text", "references", "model", "provider", "api_key", "base_url", "deployment"]
            }
            Service::EmbeddingCreate => {
                &["text", "batch", "dimensions", "provider", "model", "base_url", "api_key", "timeout"]
            }
            Service::VectorStore => &[
                "texts",
                "embeddings",
                "ids",
                "metadata",
                "collection",
                "dimensions",
                "provider",
                "model",
                "base_url",
                "api_key",
                "timeout",
            ],
            Service::VectorQuery => &[
                "query",
                "k",
                "collection",
                "filter",
                "include_embeddings",
                "dimensions",
                "provider",
                "model",
                "base_url",
                "api_key",
                "timeout",
            ],
            Service::LlamaQuery => &[
                "query",
                "index_path",
                "similarity_top_k",
                "response_mode",
                "collection",
                "filter",
                "include_embeddings",
                "embedding_model",
                "llm_model",
                "provider",
                "model",
                "base_url",
                "api_key",
                "timeout",
            ],
            Service::LlamaRouter => &[
                "query",
                "engines",
                "verbose",
                "collection",
                "filter",
                "include_embeddings",
                "embedding_model",
                "llm_model",
                "provider",
                "model",
                "base_url",
                "api_key",
                "timeout",
            ],
            Service::LlamaSubquestion => &[
                "query",
                "engines",
                "index_path",
                "parallel",
                "synthesis_prompt",
                "verbose",
                "embedding_model",
                "llm_model",
                "api_key",
            ],
            Service::LlamaCreateIndex => {
                &["documents", "directory", "persist_path", "embedding_model", "llm_model", "api_key"]
            }
            Service::LlamaLoadIndex => &["index_path", "force_reload", "embedding_model", "llm_model", "api_key"],
            Service::LlamaAddDocuments => &["documents", "index_path", "embedding_model", "llm_model", "api_key"],
        }
    }

    /// How many of [`Service::keys`] (the first ones) it needs.
    pub(crate) fn required(self) -> usize {
        match self {
            Service::WebAiScrape => 2,
            Service::InsertCitations | Service::LlamaCreateIndex => 0,
            Service::LlamaRouter => 2,
            _ => 1,
        }
    }

    /// The arguments that send a secret out (so the only ones whose templates may read
    /// `secrets`).
    pub(crate) fn sending_keys(self) -> &'static [&'static str] {
        &["api_key"]
    }
}

/// The Edge Agent's failure result.
fn failure(error: impl Into<String>, error_type: &str) -> Value {
    json!({ "success": false, "error": error.into(), "error_type": error_type })
}

/// A failure that also names its job.
fn job_failure(error: impl Into<String>, error_type: &str, job_id: &str) -> Value {
    let mut out = failure(error, error_type);
    out["job_id"] = json!(job_id);
    out
}

/// A request that got no answer, as The Edge Agent types it.
fn unanswered(error: String) -> Value {
    let kind = if error.contains("did not answer") || error.contains("did not finish") {
        "timeout"
    } else if error.contains("cannot connect") {
        "connection"
    } else {
        "api_error"
    };
    failure(error, kind)
}

/// What a service needs of its arguments: the action's name, its arguments, where relative
/// paths start.
struct Args<'a> {
    what: &'static str,
    map: &'a Map<String, Value>,
}

impl Args<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn text(&self, key: &str) -> Result<Option<String>, String> {
        net::text_arg(self.what, self.map, key)
    }

    /// A string argument it needs.
    fn needed(&self, key: &str) -> Result<String, String> {
        match self.text(key)? {
            Some(s) if !s.trim().is_empty() => Ok(s),
            _ => Err(format!("{} needs `{key}`", self.what)),
        }
    }

    fn flag(&self, key: &str, default: bool) -> Result<bool, String> {
        match self.get(key) {
            None => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(Value::String(s)) if matches!(s.as_str(), "true" | "True") => Ok(true),
            Some(Value::String(s)) if matches!(s.as_str(), "false" | "False") => Ok(false),
            Some(other) => Err(format!("{}: `{key}` must be true or false, not {other}", self.what)),
        }
    }

    /// A number argument (written as a number or a numeric string).
    fn number(&self, key: &str, default: f64) -> Result<f64, String> {
        let n = match self.get(key) {
            None => return Ok(default),
            Some(Value::Number(n)) => n.as_f64(),
            Some(Value::String(s)) => s.trim().parse().ok(),
            Some(_) => None,
        };
        n.filter(|n| n.is_finite() && *n >= 0.0).ok_or_else(|| {
            format!("{}: `{key}` must be a number, not {}", self.what, self.get(key).unwrap_or(&Value::Null))
        })
    }

    fn count(&self, key: &str, default: u64) -> Result<u64, String> {
        let n = self.number(key, default as f64)?;
        if n.fract() != 0.0 {
            return Err(format!("{}: `{key}` must be a whole number, not {n}", self.what));
        }
        Ok(n as u64)
    }

    /// `max_retries` as `net`'s retry: that many more attempts, 1 s apart and doubling.
    fn retry(&self, default: u64) -> Result<Retry, String> {
        let max = self.count("max_retries", default)?;
        if max > 20 {
            return Err(format!("{}: `max_retries` must be 0 to 20, not {max}", self.what));
        }
        Ok(Retry { max: max as u32, base_ms: 1_000 })
    }

    /// The API key: `api_key`, else the first of `vars` set.
    fn key(&self, vars: &[&str]) -> Result<Option<String>, String> {
        if let Some(key) = self.text("api_key")? {
            return Ok(Some(key));
        }
        Ok(vars.iter().find_map(|v| std::env::var(v).ok().filter(|k| !k.is_empty())))
    }

    /// The service's base URL: `base_url`, else `var`, else `default`; without a trailing `/`.
    fn base(&self, var: &str, default: &str) -> Result<String, String> {
        let text = match self.text("base_url")? {
            Some(url) => url,
            None => std::env::var(var).ok().filter(|u| !u.is_empty()).unwrap_or_else(|| default.to_owned()),
        };
        let url = net::endpoint_url(self.what, text)?;
        Ok(url.as_str().trim_end_matches('/').to_owned())
    }
}

/// Checks `args` and prepares the call; relative file paths start at the agent's folder, and
/// are confined by its `grants`.
pub(crate) fn prepare(
    service: Service,
    args: Value,
    grants: &crate::grants::AgentGrants,
    vectors: &Arc<crate::vectors::Vectors>,
) -> Result<Call, String> {
    let what = service.name();
    let Value::Object(map) = args else {
        return Err(format!("{what}: `with:` must be a mapping of arguments, not {}", crate::state::describe(&args)));
    };
    if let Some(unknown) = map.keys().find(|k| !service.keys().contains(&k.as_str())) {
        let hint = crate::error::suggest(unknown, service.keys().iter().copied());
        return Err(format!("{what}: unknown argument `{unknown}`{hint}; it takes {}", service.keys().join(", ")));
    }
    let args = Args { what, map: &map };
    Ok(match service {
        Service::WebSearch => Box::pin(web_search(search_request(&args)?)),
        Service::WebScrape => Box::pin(web_scrape(scrape_request(&args)?)),
        Service::WebCrawl => Box::pin(web_crawl(crawl_request(&args)?)),
        Service::WebAiScrape => Box::pin(ai_scrape(ai_scrape_request(&args)?)),
        Service::Extract | Service::SubmitJob => {
            let request = extract_request(service, &args, grants)?;
            Box::pin(async move {
                match request {
                    Ok(request) => Ok(extract(request).await),
                    Err(failed) => Ok(failed),
                }
            })
        }
        Service::PollStatus | Service::GetResult => Box::pin(job_call(service, job_request(service, &args)?)),
        Service::InsertCitations => Box::pin(insert_citations(citations_request(&args)?)),
        Service::EmbeddingCreate | Service::VectorStore | Service::VectorQuery | Service::LlamaQuery => {
            Box::pin(vector_call(service, vector_request(service, &args)?, vectors.clone()))
        }
        Service::LlamaRouter => {
            // Without LlamaIndex, The Edge Agent's router queries the vector store when one of
            // its engines is a vector index, and else reports LlamaIndex missing.
            let Some(Value::Array(engines)) = args.get("engines") else {
                return Err(format!("{what}: `engines` must be a list of {{name, type, index_path, description}}"));
            };
            let vector = engines.iter().any(|e| {
                e.get("type").and_then(Value::as_str) == Some("vector")
                    && e.get("index_path").is_some_and(|p| !p.is_null() && p != "" && p != &Value::Bool(false))
            });
            if vector {
                Box::pin(vector_call(service, vector_request(service, &args)?, vectors.clone()))
            } else {
                ready(json!({
                    "error": "LlamaIndex not available for router queries",
                    "success": false,
                    "fallback_attempted": false,
                }))
            }
        }
        Service::LlamaSubquestion => ready(json!({
            "error": "LlamaIndex not available for sub-question queries",
            "success": false,
            "fallback_attempted": false,
        })),
        Service::LlamaCreateIndex => {
            ready(json!({ "error": "LlamaIndex not available for index creation", "success": false }))
        }
        Service::LlamaLoadIndex => {
            args.needed("index_path")?;
            ready(json!({ "error": "LlamaIndex not available for index loading", "success": false }))
        }
        Service::LlamaAddDocuments => {
            ready(json!({ "error": "LlamaIndex not available for adding documents", "success": false }))
        }
    })
}

/// A call whose result is known now.
fn ready(result: Value) -> Call {
    Box::pin(std::future::ready(Ok(result)))
}

/// An authorized JSON request to `url`, as `net::send` wants it built.
fn post(url: &str, key: &str, header: Option<&'static str>, body: &Value) -> reqwest::RequestBuilder {
    let builder = match net::client() {
        Ok(client) => client.post(url),
        Err(_) => reqwest::Client::new().post(url),
    };
    authorize(builder, key, header).json(body)
}

fn get(url: &str, key: &str) -> reqwest::RequestBuilder {
    let builder = match net::client() {
        Ok(client) => client.get(url),
        Err(_) => reqwest::Client::new().get(url),
    };
    authorize(builder, key, None)
}

fn authorize(builder: reqwest::RequestBuilder, key: &str, header: Option<&'static str>) -> reqwest::RequestBuilder {
    match header {
        Some(name) => builder.header(name, key),
        None => builder.bearer_auth(key),
    }
}

/// The answer's body as JSON (`None` when it is not).
fn body_json(answer: &net::Answer) -> Option<Value> {
    serde_json::from_slice(&answer.body).ok()
}

/// The answer's body as text.
fn body_text(answer: &net::Answer) -> String {
    String::from_utf8_lossy(&answer.body).into_owned()
}

/// An endpoint as messages show it (no query, no credentials).
fn endpoint(method: &str, url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => format!("{method} {}", net::shown(&u)),
        Err(_) => format!("{method} {url}"),
    }
}

// ---------------------------------------------------------------------------------------------
// web.search: Perplexity.

struct Search {
    key: Option<String>,
    url: String,
    query: String,
    num_results: usize,
    model: String,
    timeout: Duration,
}

fn search_request(args: &Args<'_>) -> Result<Search, String> {
    let query = args.needed("query")?;
    let model = args.text("model")?.unwrap_or_else(|| "sonar".to_owned());
    let timeout = args.number("timeout", 60.0)?.clamp(1.0, MAX_WAIT_SECS);
    // As The Edge Agent's: at most 30 s, but for the deep-research model.
    let timeout = if model == "sonar-deep-research" { timeout } else { timeout.min(30.0) };
    Ok(Search {
        key: args.key(&["PERPLEXITY_API_KEY"])?,
        url: format!("{}/chat/completions", args.base("PERPLEXITY_API_BASE", "https://api.perplexity.ai")?),
        num_results: args.count("num_results", 10)? as usize,
        query,
        model,
        timeout: Duration::from_secs_f64(timeout),
    })
}

async fn web_search(request: Search) -> Result<Value, String> {
    let Some(key) = request.key else {
        return Ok(failure(
            "PERPLEXITY_API_KEY environment variable not set. Get your API key from https://perplexity.ai",
            "configuration",
        ));
    };
    let body = json!({
        "model": request.model,
        "messages": [
            { "role": "system", "content": "You are a helpful search assistant. Provide concise, accurate search results." },
            { "role": "user", "content": request.query },
        ],
        "max_tokens": if request.model == "sonar-deep-research" { 4096 } else { 1024 },
        "return_citations": true,
        "return_related_questions": false,
    });
    let shown = endpoint("POST", &request.url);
    let no_retry = Retry { max: 0, base_ms: 0 };
    let answer = match net::send("web.search", &shown, no_retry, request.timeout, || {
        post(&request.url, &key, None, &body)
    })
    .await
    {
        Ok(answer) => answer,
        Err(e) => return Ok(unanswered(e)),
    };
    if answer.status.as_u16() == 429 {
        return Ok(failure("Rate limit exceeded. Please wait and try again.", "rate_limit"));
    }
    if !answer.status.is_success() {
        return Ok(failure(format!("Perplexity API error: {}", body_text(&answer)), "api_error"));
    }
    let Some(data) = body_json(&answer) else {
        return Ok(failure(format!("Unexpected error: {shown} answered no JSON"), "api_error"));
    };
    let text = data.pointer("/choices/0/message/content").and_then(Value::as_str).unwrap_or("");
    let citations = data.get("citations").and_then(Value::as_array).cloned().unwrap_or_default();
    let results: Vec<Value> = citations
        .iter()
        .take(request.num_results)
        .enumerate()
        .map(|(i, c)| match c {
            Value::Object(c) => {
                let url = c.get("url").cloned().unwrap_or(json!(""));
                json!({
                    "title": c.get("title").filter(|t| !t.is_null()).cloned().unwrap_or_else(|| url.clone()),
                    "url": url,
                    "snippet": c.get("snippet").or_else(|| c.get("text")).cloned().unwrap_or(json!("")),
                    "position": i + 1,
                })
            }
            other => {
                let url = match other {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                json!({ "title": url, "url": url, "snippet": "", "position": i + 1 })
            }
        })
        .collect();
    Ok(json!({
        "success": true,
        "total_results": results.len(),
        "results": results,
        "query": request.query,
        "answer": text,
        "model": request.model,
    }))
}

// ---------------------------------------------------------------------------------------------
// web.scrape and web.crawl: Firecrawl.

struct Scrape {
    key: Option<String>,
    url: String,
    page: String,
    body: Value,
    timeout: Duration,
    timeout_ms: u64,
}

/// Firecrawl's key, base and the failure when the key is missing.
const FIRECRAWL_KEY: &str =
    "FIRECRAWL_API_KEY environment variable not set. Get your API key from https://firecrawl.dev";

fn scrape_request(args: &Args<'_>) -> Result<Scrape, String> {
    let page = args.needed("url")?;
    let timeout_ms = args.count("timeout", 30_000)?.min(MAX_WAIT_SECS as u64 * 1000);
    let mut body = json!({
        "url": page,
        "onlyMainContent": args.flag("only_main_content", true)?,
        "timeout": timeout_ms,
    });
    for (key, field) in [
        ("formats", "formats"),
        ("wait_for", "waitFor"),
        ("actions", "actions"),
        ("include_tags", "includeTags"),
        ("exclude_tags", "excludeTags"),
    ] {
        if let Some(v) = args.get(key) {
            body[field] = v.clone();
        }
    }
    if args.flag("mobile", false)? {
        body["mobile"] = json!(true);
    }
    match (args.get("extract_schema"), args.get("extract_prompt")) {
        (Some(schema), _) => body["extract"] = json!({ "schema": schema }),
        (None, Some(prompt)) => body["extract"] = json!({ "prompt": prompt }),
        (None, None) => {}
    }
    Ok(Scrape {
        key: args.key(&["FIRECRAWL_API_KEY"])?,
        url: format!("{}/v1/scrape", args.base("FIRECRAWL_API_BASE", "https://api.firecrawl.dev")?),
        page,
        body,
        timeout: Duration::from_millis(timeout_ms + 5_000),
        timeout_ms,
    })
}

/// A Firecrawl answer that is not a success, as The Edge Agent reports it.
fn firecrawl_failure(answer: &net::Answer) -> Option<Value> {
    match answer.status.as_u16() {
        429 => Some(failure("Rate limit exceeded. Please wait and try again.", "rate_limit")),
        402 => {
            Some(failure("Insufficient Firecrawl credits. Please top up at https://firecrawl.dev", "payment_required"))
        }
        s if s >= 400 => Some(failure(format!("Firecrawl API error: {}", body_text(answer)), "api_error")),
        _ => None,
    }
}

async fn web_scrape(request: Scrape) -> Result<Value, String> {
    let Some(key) = request.key else { return Ok(failure(FIRECRAWL_KEY, "configuration")) };
    let shown = endpoint("POST", &request.url);
    let no_retry = Retry { max: 0, base_ms: 0 };
    let answer = match net::send("web.scrape", &shown, no_retry, request.timeout, || {
        post(&request.url, &key, None, &request.body)
    })
    .await
    {
        Ok(answer) => answer,
        Err(e) if e.contains("did not answer") => {
            return Ok(failure(format!("Request timed out after {}ms", request.timeout_ms), "timeout"))
        }
        Err(e) => return Ok(unanswered(e)),
    };
    if let Some(failed) = firecrawl_failure(&answer) {
        return Ok(failed);
    }
    let data = body_json(&answer).unwrap_or(Value::Null);
    if data.get("success") != Some(&Value::Bool(true)) {
        let error = data.get("error").and_then(Value::as_str).unwrap_or("Unknown error from Firecrawl");
        return Ok(failure(error, "api_error"));
    }
    let page = data.get("data").cloned().unwrap_or(json!({}));
    let mut out = json!({ "success": true, "url": request.page });
    for key in ["markdown", "html", "links", "screenshot", "extract"] {
        if let Some(v) = page.get(key) {
            out[key] = v.clone();
        }
    }
    out["metadata"] = page.get("metadata").cloned().unwrap_or(json!({}));
    Ok(out)
}

struct Crawl {
    key: Option<String>,
    base: String,
    body: Value,
    poll_interval: Duration,
    max_poll_time: f64,
}

fn crawl_request(args: &Args<'_>) -> Result<Crawl, String> {
    let page = args.needed("url")?;
    let mut options = json!({ "onlyMainContent": args.flag("only_main_content", true)? });
    if let Some(formats) = args.get("formats") {
        options["formats"] = formats.clone();
    }
    let mut body = json!({
        "url": page,
        "maxDepth": args.count("max_depth", 2)?,
        "limit": args.count("limit", 10)?,
        "scrapeOptions": options,
    });
    if let Some(paths) = args.get("include_paths") {
        body["includePaths"] = paths.clone();
    }
    if let Some(paths) = args.get("exclude_paths") {
        body["excludePaths"] = paths.clone();
    }
    if args.flag("allow_external_links", false)? {
        body["allowExternalLinks"] = json!(true);
    }
    let interval = args.number("poll_interval", 2.0)?.clamp(0.01, 3_600.0);
    Ok(Crawl {
        key: args.key(&["FIRECRAWL_API_KEY"])?,
        base: args.base("FIRECRAWL_API_BASE", "https://api.firecrawl.dev")?,
        body,
        poll_interval: Duration::from_secs_f64(interval),
        max_poll_time: args.number("max_poll_time", 300.0)?.min(MAX_WAIT_SECS),
    })
}

async fn web_crawl(request: Crawl) -> Result<Value, String> {
    let Some(key) = request.key else { return Ok(failure(FIRECRAWL_KEY, "configuration")) };
    let url = format!("{}/v1/crawl", request.base);
    let shown = endpoint("POST", &url);
    let no_retry = Retry { max: 0, base_ms: 0 };
    let thirty = Duration::from_secs(30);
    let answer = match net::send("web.crawl", &shown, no_retry, thirty, || post(&url, &key, None, &request.body)).await
    {
        Ok(answer) => answer,
        Err(e) => return Ok(unanswered(e)),
    };
    if let Some(failed) = firecrawl_failure(&answer) {
        return Ok(failed);
    }
    let started = body_json(&answer).unwrap_or(Value::Null);
    let Some(job) = started.get("id").and_then(Value::as_str).map(str::to_owned) else {
        return Ok(failure("No job ID returned from Firecrawl", "api_error"));
    };
    let status_url = format!("{}/v1/crawl/{job}", request.base);
    let shown = endpoint("GET", &status_url);
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < request.max_poll_time {
        let answer = match net::send("web.crawl", &shown, no_retry, thirty, || get(&status_url, &key)).await {
            Ok(answer) => answer,
            Err(e) => return Ok(unanswered(e)),
        };
        if let Some(failed) = firecrawl_failure(&answer) {
            return Ok(failed);
        }
        let status = body_json(&answer).unwrap_or(Value::Null);
        match status.get("status").and_then(Value::as_str) {
            Some("completed") => {
                let pages: Vec<Value> = status
                    .get("data")
                    .and_then(Value::as_array)
                    .map(|pages| {
                        pages
                            .iter()
                            .map(|p| {
                                let mut page = json!({
                                    "url": p.pointer("/metadata/sourceURL").cloned().unwrap_or(Value::Null),
                                    "markdown": p.get("markdown").cloned().unwrap_or(Value::Null),
                                    "metadata": p.get("metadata").cloned().unwrap_or(json!({})),
                                });
                                for key in ["html", "links"] {
                                    if let Some(v) = p.get(key) {
                                        page[key] = v.clone();
                                    }
                                }
                                page
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                return Ok(json!({ "success": true, "total_pages": pages.len(), "pages": pages, "job_id": job }));
            }
            Some("failed") => {
                let error = status.get("error").and_then(Value::as_str).unwrap_or("Crawl job failed");
                return Ok(job_failure(error, "api_error", &job));
            }
            _ => tokio::time::sleep(request.poll_interval).await,
        }
    }
    Ok(job_failure(format!("Crawl job timed out after {}s", request.max_poll_time), "timeout", &job))
}

// ---------------------------------------------------------------------------------------------
// web.ai_scrape: ScrapeGraphAI.

struct AiScrape {
    key: Option<String>,
    url: String,
    page: String,
    prompt: String,
    schema: Result<Value, Value>,
    timeout: Duration,
    retry: Retry,
}

fn ai_scrape_request(args: &Args<'_>) -> Result<AiScrape, String> {
    let what = args.what;
    let page = args.needed("url")?;
    if !(page.starts_with("http://") || page.starts_with("https://")) {
        return Err(format!("{what}: `url` must start with http:// or https://, not `{page}`"));
    }
    let prompt = args.needed("prompt")?;
    if let Some(cache) = args.get("cache") {
        if cache.get("enabled").is_some_and(|e| e.as_bool() == Some(true)) {
            return Err(format!(
                "{what}: `cache: {{ enabled: true }}` keeps results in The Edge Agent's long-term memory, which tea \
                 does not have; remove `cache` (or store the result with `memory.store`)"
            ));
        }
    }
    // The schema: `output_schema`, else `schema.inline`; `schema.uses` fetches a remote or
    // git reference, which tea does not.
    let schema = match (args.get("output_schema"), args.get("schema")) {
        (Some(s @ Value::Object(_)), _) => Ok(s.clone()),
        (Some(other), _) => return Err(format!("{what}: `output_schema` must be a JSON Schema mapping, not {other}")),
        (None, Some(Value::Object(spec))) => match (spec.get("inline"), spec.get("uses")) {
            (Some(inline @ Value::Object(_)), _) => Ok(inline.clone()),
            (_, Some(_)) => Err(failure(
                "Schema resolution failed: `schema.uses` (a remote or git reference) is not supported by tea; give \
                 `output_schema` or `schema.inline`",
                "schema_error",
            )),
            _ => Err(failure("No schema provided. Use output_schema or schema.uses", "schema_error")),
        },
        (None, Some(other)) => {
            return Err(format!("{what}: `schema` must be a mapping (`inline` or `uses`), not {other}"))
        }
        (None, None) => Err(failure("No schema provided. Use output_schema or schema.uses", "schema_error")),
    };
    Ok(AiScrape {
        key: args.key(&["SCRAPEGRAPH_API_KEY"])?,
        url: format!("{}/smartscraper", args.base("SCRAPEGRAPH_API_BASE", "https://api.scrapegraphai.com/v1")?),
        page,
        prompt,
        schema,
        timeout: Duration::from_secs_f64(args.number("timeout", 120.0)?.clamp(1.0, MAX_WAIT_SECS)),
        retry: args.retry(3)?,
    })
}

async fn ai_scrape(request: AiScrape) -> Result<Value, String> {
    let Some(key) = request.key else {
        return Ok(failure(
            "SCRAPEGRAPH_API_KEY environment variable not set. Get your API key from https://scrapegraphai.com",
            "configuration",
        ));
    };
    let schema = match request.schema {
        Ok(schema) => schema,
        Err(failed) => return Ok(failed),
    };
    let body = json!({
        "user_prompt": request.prompt,
        "website_url": request.page,
        "output_schema": schema,
        "mock": false,
        "plain_text": false,
        "render_heavy_js": false,
        "stealth": false,
    });
    let shown = endpoint("POST", &request.url);
    let answer = match net::send("web.ai_scrape", &shown, request.retry, request.timeout, || {
        post(&request.url, &key, Some("SGAI-APIKEY"), &body)
    })
    .await
    {
        Ok(answer) => answer,
        Err(e) if e.contains("did not answer") => return Ok(failure(format!("Request timeout: {e}"), "timeout")),
        Err(e) => return Ok(unanswered(e)),
    };
    let data = body_json(&answer);
    let status = answer.status.as_u16();
    if status >= 400 {
        let message = data
            .as_ref()
            .and_then(|d| d.get("error").or_else(|| d.get("detail")))
            .map(|m| match m {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .unwrap_or_else(|| format!("HTTP {status}: {}", body_text(&answer)));
        return Ok(match status {
            401 | 403 => failure(format!("Authentication failed: [{status}] {message}"), "authentication"),
            429 => failure("Rate limit exceeded after retries", "rate_limit"),
            500..=599 => failure(format!("Server error after retries: [{status}] {message}"), "api_error"),
            _ => failure(format!("ScrapeGraphAI error: [{status}] {message}"), "api_error"),
        });
    }
    let Some(data) = data else {
        return Ok(failure(format!("ScrapeGraphAI error: {shown} answered no JSON"), "api_error"));
    };
    // The API's envelope holds the extraction under `result`.
    let extracted = match data.get("result") {
        Some(result @ Value::Object(_)) => result.clone(),
        _ => data,
    };
    Ok(json!({ "success": true, "data": extracted, "url": request.page, "schema_used": schema }))
}

// ---------------------------------------------------------------------------------------------
// llamaextract.*: LlamaCloud's extraction API.

/// LlamaExtract's key and base, for every call.
struct Cloud {
    key: Option<String>,
    base: String,
}

fn cloud(args: &Args<'_>) -> Result<Cloud, String> {
    Ok(Cloud {
        key: args.key(&["LLAMAEXTRACT_API_KEY", "LLAMAPARSE_API_KEY"])?,
        base: args.base("LLAMA_CLOUD_BASE_URL", "https://api.cloud.llamaindex.ai")?,
    })
}

const NO_LLAMA_KEY: &str = "LLAMAEXTRACT_API_KEY or LLAMAPARSE_API_KEY environment variable not set";

/// Where the file to extract from is.
enum Source {
    Local(PathBuf),
    Remote(String),
    /// Base64 already, with its type.
    Inline {
        data: String,
        mime: String,
    },
}

struct Extraction {
    service: Service,
    cloud: Cloud,
    source: Source,
    /// `agent_id`, else `data_schema`.
    target: (&'static str, Value),
    mode: String,
    timeout: f64,
    retry: Retry,
    async_mode: bool,
    polling_interval: Duration,
    max_poll_attempts: Option<u64>,
}

/// `llamaextract.extract` and `submit_job`, checked: `Err` for a malformed argument, `Ok(Err)`
/// for what The Edge Agent reports as a `validation` failure.
fn extract_request(
    service: Service,
    args: &Args<'_>,
    grants: &crate::grants::AgentGrants,
) -> Result<Result<Extraction, Value>, String> {
    let what = args.what;
    let Some(file) = args.text("file")?.filter(|f| !f.is_empty()) else {
        return Ok(Err(failure("file parameter is required", "validation")));
    };
    if let Some(s) = args.get("schema").filter(|s| !s.is_object()) {
        return Err(format!("{what}: `schema` must be a JSON Schema mapping, not {s}"));
    }
    let agent_id = args.text("agent_id")?.filter(|a| !a.is_empty());
    let schema = args.get("schema").filter(|s| s.as_object().is_some_and(|m| !m.is_empty()));
    if service == Service::Extract {
        if args.text("agent_name")?.is_some() {
            return Ok(Err(failure(
                "`agent_name` looks an extraction agent up through LlamaCloud's SDK (llama-cloud-services), which \
                 tea does not embed; give `agent_id` or `schema`",
                "dependency",
            )));
        }
        if schema.is_none() && agent_id.is_none() {
            return Ok(Err(failure("Either schema, agent_id, or agent_name must be provided", "validation")));
        }
    } else if schema.is_none() && agent_id.is_none() {
        return Ok(Err(failure("Either schema or agent_id must be provided", "validation")));
    }
    let async_mode = args.flag("async_mode", false)?;
    // tea always speaks REST: `use_rest` is read (a flag) and changes nothing.
    args.flag("use_rest", false)?;
    let interval = args.number("polling_interval", 5.0)?;
    if interval <= 0.0 {
        return Ok(Err(failure(format!("polling_interval must be positive, got {interval}"), "validation")));
    }
    let max_poll_attempts = args.count("max_poll_attempts", 120)?;
    if max_poll_attempts == 0 {
        return Ok(Err(failure("max_poll_attempts must be positive, got 0", "validation")));
    }
    let mode = args.text("mode")?.unwrap_or_else(|| "BALANCED".to_owned()).to_uppercase();
    if !MODES.contains(&mode.as_str()) {
        return Ok(Err(failure(format!("Invalid extraction mode: {mode}. Valid modes: {MODES:?}"), "validation")));
    }
    let source = if file.starts_with("http://") || file.starts_with("https://") {
        Source::Remote(file)
    } else if let Some(at) = file.find(";base64,") {
        let mime = file.strip_prefix("data:").map_or("application/octet-stream", |rest| &rest[..at - 5]).to_owned();
        Source::Inline { data: file[at + ";base64,".len()..].to_owned(), mime }
    } else {
        let path = grants.confine(&file, crate::grants::Access::Read).map_err(|e| format!("{}: {e}", args.what))?;
        Source::Local(path)
    };
    Ok(Ok(Extraction {
        service,
        cloud: cloud(args)?,
        source,
        target: match agent_id {
            Some(id) => ("agent_id", json!(id)),
            None => ("data_schema", schema.cloned().unwrap_or(Value::Null)),
        },
        mode,
        timeout: args.number("timeout", 300.0)?.clamp(1.0, MAX_WAIT_SECS),
        retry: args.retry(3)?,
        async_mode,
        polling_interval: Duration::from_secs_f64(interval.min(3_600.0)),
        max_poll_attempts: async_mode.then_some(max_poll_attempts),
    }))
}

/// A file's type by its extension (The Edge Agent's table).
fn mime_of(name: &str) -> &'static str {
    let ext = name.rsplit('.').next().unwrap_or("").to_ascii_lowercase();
    match ext.as_str() {
        "pdf" => "application/pdf",
        "docx" => "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "doc" => "application/msword",
        "txt" => "text/plain",
        "csv" => "text/csv",
        "json" => "application/json",
        "html" | "htm" => "text/html",
        "md" => "text/markdown",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        _ => "application/octet-stream",
    }
}

/// The file as `{data, mime_type}` (base64), or the failure The Edge Agent reports.
async fn file_payload(source: &Source) -> Result<Value, Value> {
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    match source {
        Source::Inline { data, mime } => Ok(json!({ "data": data, "mime_type": mime })),
        Source::Local(path) => {
            if !path.exists() {
                return Err(failure(format!("File not found: {}", path.display()), "file_not_found"));
            }
            let bytes = crate::files::read_regular(path, crate::files::MAX_READ_FILE)
                .map_err(|e| failure(format!("Cannot read {}: {e}", path.display()), "file_not_found"))?;
            Ok(json!({ "data": b64(&bytes), "mime_type": mime_of(&path.to_string_lossy()) }))
        }
        Source::Remote(url) => {
            let shown = endpoint("GET", url);
            let no_retry = Retry { max: 0, base_ms: 0 };
            let fetch = || match net::client() {
                Ok(client) => client.get(url),
                Err(_) => reqwest::Client::new().get(url),
            };
            let answer = net::send("llamaextract.extract", &shown, no_retry, Duration::from_secs(60), fetch)
                .await
                .map_err(|e| failure(format!("Failed to download file from URL: {e}"), "file_download_error"))?;
            if !answer.status.is_success() {
                return Err(failure(
                    format!("Failed to download file from URL: {shown} answered {}", answer.status),
                    "file_download_error",
                ));
            }
            let mime = answer
                .headers
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(|t| t.split(';').next().unwrap_or(t).trim().to_owned())
                .filter(|t| !t.is_empty())
                .unwrap_or_else(|| mime_of(url.split('?').next().unwrap_or(url)).to_owned());
            Ok(json!({ "data": b64(&answer.body), "mime_type": mime }))
        }
    }
}

/// A failed LlamaCloud answer, as The Edge Agent reports it (`None`: a success).
fn cloud_failure(answer: &net::Answer, job: Option<&str>) -> Option<Value> {
    let status = answer.status.as_u16();
    if answer.status.is_success() {
        return None;
    }
    let text = body_text(answer);
    let detail = body_json(answer)
        .and_then(|d| d.get("detail").cloned())
        .map(|d| match d {
            Value::String(s) => s,
            other => other.to_string(),
        })
        .unwrap_or_else(|| text.clone());
    let mut out = match status {
        429 => failure("Rate limit exceeded", "rate_limit"),
        401 => failure("Authentication failed. Check API key.", "configuration"),
        400 => failure(format!("Bad request: {detail}"), "validation"),
        422 => failure(format!("Validation error: {detail}"), "validation"),
        s if s >= 500 => failure(format!("Server error: {s}"), "api_error"),
        s => failure(format!("HTTP {s}: {text}"), "api_error"),
    };
    out["status_code"] = json!(status);
    if let Some(job) = job {
        out["job_id"] = json!(job);
    }
    Some(out)
}

async fn extract(request: Extraction) -> Value {
    let Some(key) = request.cloud.key.clone() else { return failure(NO_LLAMA_KEY, "configuration") };
    let file = match file_payload(&request.source).await {
        Ok(file) => file,
        Err(failed) => return failed,
    };
    let mut body = json!({ "file": file, "config": { "extraction_mode": request.mode } });
    body[request.target.0] = request.target.1.clone();
    let to_jobs = request.service == Service::SubmitJob || request.async_mode;
    let url = format!("{}/api/v1/extraction/{}", request.cloud.base, if to_jobs { "jobs" } else { "run" });
    let shown = endpoint("POST", &url);
    let timeout = Duration::from_secs_f64(request.timeout.min(120.0));
    let answer =
        match net::send(request.service.name(), &shown, request.retry, timeout, || post(&url, &key, None, &body)).await
        {
            Ok(answer) => answer,
            Err(e) if e.contains("did not answer") => {
                return failure(format!("Request timed out after {}s", request.timeout), "timeout")
            }
            Err(e) => return failure(format!("Connection error: {e}"), "api_error"),
        };
    if let Some(failed) = cloud_failure(&answer, None) {
        return failed;
    }
    let data = body_json(&answer).unwrap_or(Value::Null);
    let id = data.get("id").and_then(Value::as_str).map(str::to_owned);
    if request.service == Service::SubmitJob {
        let Some(id) = id else { return failure("No job_id returned from async endpoint", "api_error") };
        let status = data.get("status").cloned().unwrap_or(json!("PENDING"));
        return json!({ "success": true, "job_id": id, "status": status });
    }
    if to_jobs || data.get("status").and_then(Value::as_str) == Some("PENDING") {
        let Some(id) = id else {
            if to_jobs {
                return failure("No job_id returned from async endpoint", "api_error");
            }
            return json!({ "success": true, "data": data.get("data").cloned().unwrap_or(data), "status": "completed" });
        };
        let (interval, cap) = if to_jobs {
            (request.polling_interval, request.max_poll_attempts)
        } else {
            (Duration::from_secs(5), None)
        };
        return poll(&request.cloud.base, &key, &id, request.timeout, interval, cap).await;
    }
    let extracted = data.get("data").cloned().unwrap_or(data);
    json!({ "success": true, "data": extracted, "status": "completed" })
}

/// Polls job `id` until it ends, `timeout` seconds pass, or `cap` polls found it pending.
async fn poll(base: &str, key: &str, id: &str, timeout: f64, interval: Duration, cap: Option<u64>) -> Value {
    let url = format!("{base}/api/v1/extraction/jobs/{id}");
    let shown = endpoint("GET", &url);
    let no_retry = Retry { max: 0, base_ms: 0 };
    let thirty = Duration::from_secs(30);
    let start = Instant::now();
    let mut attempts = 0u64;
    while start.elapsed().as_secs_f64() < timeout {
        let answer = match net::send("llamaextract.extract", &shown, no_retry, thirty, || get(&url, key)).await {
            Ok(answer) => answer,
            Err(e) => return job_failure(format!("Polling error: {e}"), "api_error", id),
        };
        if !answer.status.is_success() {
            return job_failure(format!("Failed to check job status: {}", body_text(&answer)), "api_error", id);
        }
        let status = body_json(&answer).unwrap_or(Value::Null);
        match status.get("status").and_then(Value::as_str).unwrap_or("") {
            done @ ("SUCCESS" | "PARTIAL_SUCCESS") => {
                let result_url = format!("{url}/result");
                let shown = endpoint("GET", &result_url);
                let answer = match net::send("llamaextract.extract", &shown, no_retry, thirty, || get(&result_url, key))
                    .await
                {
                    Ok(answer) if answer.status.is_success() => answer,
                    Ok(answer) => {
                        return job_failure(format!("Failed to get result: {}", body_text(&answer)), "api_error", id)
                    }
                    Err(e) => return job_failure(format!("Failed to get result: {e}"), "api_error", id),
                };
                let result = body_json(&answer).unwrap_or(Value::Null);
                let data = result.get("data").cloned().unwrap_or(result);
                let mut out = json!({ "success": true, "data": data, "status": "completed", "job_id": id });
                if done == "PARTIAL_SUCCESS" {
                    out["status"] = json!("partial");
                    out["warning"] = json!("Some pages may have failed extraction");
                }
                return out;
            }
            "ERROR" => {
                let error = status.get("error").and_then(Value::as_str).unwrap_or("Extraction failed");
                return job_failure(error, "extraction_error", id);
            }
            "PENDING" | "RUNNING" => {
                attempts += 1;
                if cap.is_some_and(|cap| attempts >= cap) {
                    let mut out = job_failure(
                        format!(
                            "Max poll attempts ({}) exceeded after {:.1}s",
                            cap.unwrap_or(attempts),
                            start.elapsed().as_secs_f64()
                        ),
                        "timeout",
                        id,
                    );
                    out["attempts"] = json!(attempts);
                    return out;
                }
                tokio::time::sleep(interval).await;
            }
            other => return job_failure(format!("Unknown job status: {other}"), "api_error", id),
        }
    }
    let mut out = job_failure(
        format!("Job timed out after {:.1}s ({attempts} attempts)", start.elapsed().as_secs_f64()),
        "timeout",
        id,
    );
    out["attempts"] = json!(attempts);
    out
}

struct Job {
    cloud: Cloud,
    id: Option<String>,
    timeout: f64,
    retry: Retry,
}

fn job_request(service: Service, args: &Args<'_>) -> Result<Job, String> {
    let default = if service == Service::PollStatus { 10.0 } else { 30.0 };
    Ok(Job {
        cloud: cloud(args)?,
        id: args.text("job_id")?.filter(|j| !j.is_empty()),
        timeout: args.number("timeout", default)?.clamp(1.0, MAX_WAIT_SECS),
        retry: if service == Service::PollStatus { args.retry(3)? } else { Retry { max: 0, base_ms: 0 } },
    })
}

async fn job_call(service: Service, job: Job) -> Result<Value, String> {
    let Some(id) = job.id else { return Ok(failure("job_id parameter is required", "validation")) };
    let Some(key) = job.cloud.key else { return Ok(failure(NO_LLAMA_KEY, "configuration")) };
    let mut url = format!("{}/api/v1/extraction/jobs/{id}", job.cloud.base);
    if service == Service::GetResult {
        url.push_str("/result");
    }
    let shown = endpoint("GET", &url);
    let timeout = Duration::from_secs_f64(job.timeout);
    let answer = match net::send(service.name(), &shown, job.retry, timeout, || get(&url, &key)).await {
        Ok(answer) => answer,
        Err(e) if e.contains("did not answer") => {
            return Ok(job_failure(format!("Request timed out after {}s", job.timeout), "timeout", &id))
        }
        Err(e) => return Ok(job_failure(format!("Connection error: {e}"), "api_error", &id)),
    };
    let status = answer.status.as_u16();
    if status == 404 {
        let error = match service {
            Service::PollStatus => format!("Job not found: {id}"),
            _ => format!("Result not found for job: {id}. Job may not be complete."),
        };
        return Ok(job_failure(error, "not_found", &id));
    }
    if service == Service::GetResult && status == 400 {
        let detail = body_json(&answer)
            .and_then(|d| d.get("detail").cloned())
            .map_or_else(|| body_text(&answer), |d| d.as_str().map_or_else(|| d.to_string(), str::to_owned));
        return Ok(job_failure(format!("Cannot get result: {detail}"), "job_incomplete", &id));
    }
    if let Some(failed) = cloud_failure(&answer, Some(&id)) {
        return Ok(failed);
    }
    let data = body_json(&answer).unwrap_or(Value::Null);
    Ok(match service {
        Service::PollStatus => {
            let state = data.get("status").cloned().unwrap_or(json!("UNKNOWN"));
            let mut out = json!({
                "success": true,
                "status": state,
                "progress": data.get("progress").cloned().unwrap_or(json!(0)),
                "job_id": id,
            });
            if state == "ERROR" {
                out["error"] = data.get("error").cloned().unwrap_or(json!("Extraction failed"));
            }
            out
        }
        _ => json!({ "success": true, "data": data.get("data").cloned().unwrap_or(data), "job_id": id }),
    })
}

// ---------------------------------------------------------------------------------------------
// text.insert_citations.

struct Citations {
    text: String,
    references: Vec<String>,
    provider: crate::llm::Provider,
    /// `model`, `base_url`, `api_key`, `deployment`, for the embeddings' endpoint.
    endpoint: Map<String, Value>,
    key: Option<String>,
}

/// The embedding model when none is named (The Edge Agent's).
const CITATION_MODEL: &str = "text-embedding-3-large";

fn citations_request(args: &Args<'_>) -> Result<Citations, String> {
    let what = args.what;
    let text = args.text("text")?.unwrap_or_default();
    let references = match args.get("references") {
        None => Vec::new(),
        Some(Value::Array(list)) => list
            .iter()
            .map(|r| match r {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect(),
        Some(other) => return Err(format!("{what}: `references` must be a list of strings, not {other}")),
    };
    let env_set = |k: &str| std::env::var(k).is_ok_and(|v| !v.is_empty());
    // The Edge Agent's `auto`: Azure when its key and endpoint are set, else OpenAI.
    let provider = match args.text("provider")?.as_deref() {
        None | Some("auto") if env_set("AZURE_OPENAI_API_KEY") && env_set("AZURE_OPENAI_ENDPOINT") => {
            crate::llm::Provider::Azure
        }
        None | Some("auto") => crate::llm::Provider::OpenAi,
        Some(name) => crate::llm::Provider::named(name).map_err(|e| format!("{what}: {e}"))?,
    };
    if provider == crate::llm::Provider::Shell {
        return Err(format!("{what}: a shell provider gives no embeddings"));
    }
    let mut endpoint = Map::new();
    for key in ["model", "api_key", "base_url", "deployment"] {
        if let Some(v) = args.get(key) {
            endpoint.insert(key.to_owned(), v.clone());
        }
    }
    if provider == crate::llm::Provider::Azure && !endpoint.contains_key("deployment") {
        if let Ok(d) = std::env::var("AZURE_OPENAI_EMBEDDING_DEPLOYMENT") {
            endpoint.insert("deployment".to_owned(), json!(d));
        }
    }
    Ok(Citations { text, references, provider, endpoint, key: std::env::var("OPENAI_API_KEY").ok() })
}

/// `## References` and its numbered list, each reference as `shown` gives it.
fn references_section<'a>(refs: impl Iterator<Item = &'a String>, shown: impl Fn(&str) -> String) -> String {
    let mut lines = vec!["## References".to_owned(), String::new()];
    lines.extend(refs.enumerate().map(|(i, r)| format!("{}. {}", i + 1, shown(r))));
    lines.join("\n")
}

/// The result without citations: the text as it is, the references appended in their order.
fn uncited(text: &str, references: &[String], error: Option<String>) -> Value {
    let section = references_section(references.iter(), str::to_owned);
    let map: Map<String, Value> = references.iter().enumerate().map(|(i, r)| ((i + 1).to_string(), json!(r))).collect();
    let mut out = json!({
        "cited_text": text,
        "references_section": section,
        "citation_map": map,
        "text": format!("{}\n\n{section}", text.trim()),
    });
    if let Some(error) = error {
        out["error"] = json!(error);
    }
    out
}

/// The byte offset of the first case-insensitive (ASCII) match of `needle` in `hay`.
fn find_ascii_ci(hay: &str, needle: &str) -> Option<usize> {
    hay.to_ascii_lowercase().find(&needle.to_ascii_lowercase())
}

/// The sentences a paper's citations may go to (The Edge Agent's `_get_sentences`): the
/// abstract's section dropped, headings and images left out, each sentence's last line.
fn sentences(text: &str) -> Vec<String> {
    use unicode_segmentation::UnicodeSegmentation;
    let mut text = text.to_owned();
    if let Some(l) = text.find("## Abstract") {
        // `## Abstract[^#]*`: up to the next `#`; its last character stays.
        let r = text[l + 2..].find('#').map_or(text.len(), |i| l + 2 + i);
        let last = text[..r].chars().last().map_or(0, char::len_utf8);
        text = format!("{}{}", &text[..l], &text[r - last..]);
    }
    let paragraphs: Vec<&str> =
        text.split('\n').filter(|p| !p.is_empty() && !p.starts_with('#') && !p.starts_with("![")).collect();
    let joined = paragraphs.join("\n");
    joined
        .split_sentence_bounds()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .map(|s| s.rsplit('\n').next().unwrap_or(s).to_owned())
        .collect()
}

async fn insert_citations(request: Citations) -> Result<Value, String> {
    const WHAT: &str = "text.insert_citations";
    let (text, references) = (&request.text, &request.references);
    if text.is_empty() {
        return Ok(json!({ "cited_text": "", "references_section": "", "citation_map": {}, "text": "" }));
    }
    if references.is_empty() {
        return Ok(json!({ "cited_text": text, "references_section": "", "citation_map": {}, "text": text }));
    }
    let mut paper = text.trim().to_owned();
    if let Some(l) = find_ascii_ci(&paper, "## References") {
        paper = paper[..l].trim().to_owned();
    }
    // Conclusions are not cited.
    let mut for_sentences = paper.as_str();
    if let Some(at) = find_ascii_ci(&paper, "## Conclusion") {
        let mut end = at + "## Conclusion".len();
        if paper[end..].starts_with(['s', 'S']) {
            end += 1;
        }
        if paper[end..].starts_with("\n\n") {
            for_sentences = &paper[..end + 2];
        }
    }
    let found = sentences(for_sentences);
    if found.is_empty() {
        return Ok(uncited(text, references, None));
    }
    let embed = |texts: Vec<String>| {
        let endpoint = request.endpoint.clone();
        let key = request.key.clone();
        async move { net::embed_texts(WHAT, request.provider, &endpoint, key, &texts, CITATION_MODEL).await }
    };
    let (sents, refs) = match (embed(found.clone()).await, embed(references.clone()).await) {
        (Ok(s), Ok(r)) => (s, r),
        (Err(e), _) | (_, Err(e)) => return Ok(uncited(text, references, Some(format!("OpenAI API error: {e}")))),
    };
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    // Each reference goes to its closest sentence (the first, on a tie); sentences in the order
    // their first reference comes.
    let mut cited: Vec<(usize, Vec<usize>)> = Vec::new();
    for (j, r) in refs.iter().enumerate() {
        let mut best = 0;
        for (i, s) in sents.iter().enumerate() {
            if dot(s, r) > dot(&sents[best], r) {
                best = i;
            }
        }
        match cited.iter_mut().find(|(i, _)| *i == best) {
            Some((_, list)) => list.push(j + 1),
            None => cited.push((best, vec![j + 1])),
        }
    }
    // Renumbered by where they are cited first.
    let mut order: Vec<usize> = (0..cited.len()).collect();
    order.sort_by_key(|&k| cited[k].0);
    let mut ordered = Vec::new();
    for k in order {
        for number in cited[k].1.iter_mut() {
            ordered.push(references[*number - 1].clone());
            *number = ordered.len();
        }
    }
    let mut out = paper.clone();
    for (i, numbers) in &cited {
        let sentence = &found[*i];
        let Some(pos) = out.find(sentence.as_str()) else { continue };
        let end = pos + sentence.len();
        let markers: Vec<String> = numbers.iter().map(usize::to_string).collect();
        let marker = format!(" [{}]", markers.join(","));
        let at = match out[..end].chars().last() {
            Some(c @ ('.' | '!' | '?')) => end - c.len_utf8(),
            _ => end,
        };
        out.insert_str(at, &marker);
    }
    let section = references_section(ordered.iter(), |r| r.trim().to_owned());
    let map: Map<String, Value> = ordered.iter().enumerate().map(|(i, r)| ((i + 1).to_string(), json!(r))).collect();
    Ok(json!({
        "cited_text": out,
        "references_section": section,
        "citation_map": map,
        "text": format!("{}\n\n{section}", out.trim()),
    }))
}

// ---------------------------------------------------------------------------------------------
// embedding.create, vector.store, vector.query (and rag.llamaindex.query, router).

struct VectorRequest {
    /// The embeddings' provider, with `model`, `base_url`, `api_key` for its endpoint.
    provider: crate::llm::Provider,
    endpoint: Map<String, Value>,
    key: Option<String>,
    default_model: &'static str,
    texts: Vec<String>,
    /// `embedding.create`'s `text` was a list or `batch` was asked.
    batch: bool,
    embeddings: Option<Vec<Vec<f64>>>,
    ids: Vec<String>,
    metadata: Vec<Value>,
    collection: String,
    k: usize,
    /// `None`: `filter` was given and is not a mapping (The Edge Agent's failure result).
    filter: Option<Map<String, Value>>,
    with_embeddings: bool,
}

fn vector_request(service: Service, args: &Args<'_>) -> Result<VectorRequest, String> {
    let what = args.what;
    let strings = |key: &str| -> Result<(Vec<String>, bool), String> {
        let bad = |v: &Value| format!("{what}: `{key}` must be a string or a list of strings, not {v}");
        match args.get(key) {
            None => Ok((Vec::new(), false)),
            Some(Value::String(s)) => Ok((vec![s.clone()], false)),
            Some(Value::Array(list)) => list
                .iter()
                .map(|v| v.as_str().map(str::to_owned).ok_or_else(|| bad(v)))
                .collect::<Result<Vec<_>, _>>()
                .map(|l| (l, true)),
            Some(other) => Err(bad(other)),
        }
    };
    let provider = crate::llm::Provider::of(what, args.map, crate::llm::Provider::OpenAi)?;
    if provider == crate::llm::Provider::Shell {
        return Err(format!("{what}: a shell provider gives no embeddings"));
    }
    let default_model = if provider == crate::llm::Provider::Ollama {
        crate::llm::DEFAULT_EMBED_MODEL
    } else {
        "text-embedding-3-small"
    };
    let mut endpoint = Map::new();
    for key in ["model", "base_url", "api_key"] {
        if let Some(v) = args.get(key) {
            endpoint.insert(key.to_owned(), v.clone());
        }
    }
    if let (None, Some(m)) = (args.get("model"), args.get("embedding_model")) {
        endpoint.insert("model".to_owned(), m.clone());
    }
    let (texts, listed) = match service {
        Service::EmbeddingCreate => strings("text")?,
        Service::VectorStore => strings("texts")?,
        _ => (vec![args.needed("query")?], false),
    };
    if texts.is_empty() {
        let key = if service == Service::VectorStore { "texts" } else { "text" };
        return Err(format!("{what} needs `{key}`"));
    }
    let embeddings = match args.get("embeddings") {
        None => None,
        Some(Value::Array(rows)) => Some(
            rows.iter()
                .map(|r| r.as_array().and_then(|r| r.iter().map(Value::as_f64).collect::<Option<Vec<f64>>>()))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| format!("{what}: `embeddings` must be a list of lists of numbers"))?,
        ),
        Some(other) => return Err(format!("{what}: `embeddings` must be a list of lists of numbers, not {other}")),
    };
    let (ids, _) = strings("ids")?;
    let metadata = match args.get("metadata") {
        None => vec![json!({}); texts.len()],
        Some(m @ Value::Object(_)) => vec![m.clone(); texts.len()],
        Some(Value::Array(list)) => list.clone(),
        Some(other) => return Err(format!("{what}: `metadata` must be a mapping or a list of mappings, not {other}")),
    };
    let filter = match args.get("filter") {
        None => Some(Map::new()),
        Some(Value::Object(f)) => Some(f.clone()),
        Some(_) => None,
    };
    let k_key = if service == Service::LlamaQuery { "similarity_top_k" } else { "k" };
    Ok(VectorRequest {
        provider,
        endpoint,
        key: std::env::var("OPENAI_API_KEY").ok(),
        default_model,
        texts,
        batch: listed || args.flag("batch", false)?,
        embeddings,
        ids,
        metadata,
        collection: args.text("collection")?.unwrap_or_else(|| "default".to_owned()),
        k: args.count(k_key, 5)?.min(crate::vectors::MAX_VECTORS as u64) as usize,
        filter,
        with_embeddings: args.flag("include_embeddings", false)?,
    })
}

async fn vector_call(
    service: Service,
    request: VectorRequest,
    vectors: Arc<crate::vectors::Vectors>,
) -> Result<Value, String> {
    let what = service.name();
    let prefix = match service {
        Service::EmbeddingCreate => "Embedding creation failed",
        Service::VectorStore => "Vector store failed",
        _ => "Vector query failed",
    };
    let failed = |e: String| json!({ "error": format!("{prefix}: {e}"), "success": false });
    let Some(filter) = request.filter.as_ref() else {
        return Ok(json!({ "error": "Filter must be a dictionary", "success": false }));
    };
    let n = request.texts.len();
    if service == Service::VectorStore {
        let mismatch = |what: &str, got: usize| json!({ "error": format!("Number of {what} ({got}) doesn't match texts ({n})"), "success": false });
        if !request.ids.is_empty() && request.ids.len() != n {
            return Ok(mismatch("IDs", request.ids.len()));
        }
        if let Some(e) = request.embeddings.as_ref().filter(|e| e.len() != n) {
            return Ok(mismatch("embeddings", e.len()));
        }
        if request.metadata.len() != n {
            return Ok(mismatch("metadata", request.metadata.len()));
        }
    }
    let embedded = match request.embeddings.clone().filter(|_| service == Service::VectorStore) {
        Some(given) => given,
        None => {
            let asked = net::embed_texts(
                what,
                request.provider,
                &request.endpoint,
                request.key.clone(),
                &request.texts,
                request.default_model,
            );
            match asked.await {
                Ok(e) => e,
                Err(e) => return Ok(failed(e)),
            }
        }
    };
    let model = request.endpoint.get("model").and_then(Value::as_str).unwrap_or(request.default_model).to_owned();
    Ok(match service {
        Service::EmbeddingCreate => {
            let dimensions = embedded.first().map_or(0, Vec::len);
            if request.batch || n > 1 {
                json!({ "embeddings": embedded, "model": model, "count": n, "dimensions": dimensions })
            } else {
                json!({ "embedding": embedded[0], "model": model, "dimensions": dimensions })
            }
        }
        Service::VectorStore => {
            let ids: Vec<String> = if request.ids.is_empty() {
                (0..n).map(|_| format!("{:016x}", crate::items::new_id())).collect()
            } else {
                request.ids.clone()
            };
            match vectors.add(&request.collection, &request.texts, embedded, &ids, &request.metadata) {
                Ok(()) => json!({ "stored": n, "collection": request.collection, "ids": ids }),
                Err(e) => failed(e),
            }
        }
        _ => {
            let found = vectors.query(&request.collection, &embedded[0], request.k, filter, request.with_embeddings);
            json!({ "results": found, "query": request.texts[0], "collection": request.collection, "k": request.k })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn prepared(service: Service, args: Value) -> Result<(), String> {
        let grants = crate::grants::AgentGrants::new(Arc::default(), Path::new(".").to_path_buf(), Vec::new());
        prepare(service, args, &grants, &Arc::default()).map(|_| ())
    }

    #[test]
    fn arguments_are_checked_by_name_and_type() {
        let err = |service, args| prepared(service, args).err().unwrap_or_default();
        assert!(err(Service::WebSearch, json!({ "querry": "x" })).contains("did you mean `query`?"));
        assert!(err(Service::WebSearch, json!({})).contains("web.search needs `query`"));
        assert!(err(Service::WebAiScrape, json!({ "url": "ftp://x", "prompt": "p" })).contains("http://"));
        assert!(err(Service::WebAiScrape, json!({ "url": "https://x", "prompt": "p", "cache": { "enabled": true } }))
            .contains("long-term memory"));
        assert!(err(Service::Extract, json!({ "file": "a.pdf", "schema": "nope" })).contains("`schema` must be"));
        assert!(err(Service::WebScrape, json!({ "url": "https://x", "mobile": "maybe" })).contains("true or false"));
        assert!(prepared(Service::WebCrawl, json!({ "url": "https://x", "limit": 5 })).is_ok());
    }

    #[test]
    fn file_types_follow_the_edge_agents_table() {
        assert_eq!(mime_of("paper.PDF"), "application/pdf");
        assert_eq!(mime_of("notes.md"), "text/markdown");
        assert_eq!(mime_of("blob"), "application/octet-stream");
    }
}
