//! `web.ai_scrape` over ScrapeGraphAI's smart scraper: what its `output_schema` asks for, under
//! `data`.

use super::*;

pub(super) struct AiScrape {
    key: Option<String>,
    url: String,
    page: String,
    prompt: String,
    schema: Result<Value, Value>,
    timeout: Duration,
    retry: Retry,
}

pub(super) fn ai_scrape_request(args: &Args<'_>) -> Result<AiScrape, String> {
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

pub(super) async fn ai_scrape(request: AiScrape) -> Result<Value, String> {
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
