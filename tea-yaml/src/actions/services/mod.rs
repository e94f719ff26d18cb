//! The Edge Agent's actions over hosted services that answer HTTP (feature `net`), spoken
//! directly over their REST APIs with `actions/net`'s client, retries and timeouts:
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
//!
//! This file holds what the services share (the actions' names and keys, arguments, requests
//! and failures); each vendor is a file: `perplexity.rs`, `firecrawl.rs`, `scrapegraph.rs`,
//! `llamacloud.rs`, and `citations.rs`, `embeddings.rs` over the embeddings endpoints, with
//! `vectors.rs`, the agent's vector store.

mod citations;
mod embeddings;
mod firecrawl;
mod llamacloud;
mod perplexity;
mod scrapegraph;
pub(crate) mod vectors;

use citations::*;
use embeddings::*;
use firecrawl::*;
use llamacloud::*;
use perplexity::*;
use scrapegraph::*;

use crate::actions::net::{self, Call, Retry};
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
    vectors: &Arc<crate::actions::services::vectors::Vectors>,
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
