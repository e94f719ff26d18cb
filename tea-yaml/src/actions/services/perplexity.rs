//! `web.search` over Perplexity's chat completions: the answer, and its citations as `results`.

use super::*;

pub(super) struct Search {
    key: Option<String>,
    url: String,
    query: String,
    num_results: usize,
    model: String,
    timeout: Duration,
}

pub(super) fn search_request(args: &Args<'_>) -> Result<Search, String> {
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

pub(super) async fn web_search(request: Search) -> Result<Value, String> {
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
