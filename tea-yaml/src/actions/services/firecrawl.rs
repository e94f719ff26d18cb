//! `web.scrape` and `web.crawl` over Firecrawl v1: one page, or a crawl job polled until it
//! completes.

use super::*;

pub(super) struct Scrape {
    key: Option<String>,
    url: String,
    page: String,
    body: Value,
    timeout: Duration,
    timeout_ms: u64,
}

/// Firecrawl's key, base and the failure when the key is missing.
pub(super) const FIRECRAWL_KEY: &str =
    "FIRECRAWL_API_KEY environment variable not set. Get your API key from https://firecrawl.dev";

pub(super) fn scrape_request(args: &Args<'_>) -> Result<Scrape, String> {
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
pub(super) fn firecrawl_failure(answer: &net::Answer) -> Option<Value> {
    match answer.status.as_u16() {
        429 => Some(failure("Rate limit exceeded. Please wait and try again.", "rate_limit")),
        402 => {
            Some(failure("Insufficient Firecrawl credits. Please top up at https://firecrawl.dev", "payment_required"))
        }
        s if s >= 400 => Some(failure(format!("Firecrawl API error: {}", body_text(answer)), "api_error")),
        _ => None,
    }
}

pub(super) async fn web_scrape(request: Scrape) -> Result<Value, String> {
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

pub(super) struct Crawl {
    key: Option<String>,
    base: String,
    body: Value,
    poll_interval: Duration,
    max_poll_time: f64,
}

pub(super) fn crawl_request(args: &Args<'_>) -> Result<Crawl, String> {
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

pub(super) async fn web_crawl(request: Crawl) -> Result<Value, String> {
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
