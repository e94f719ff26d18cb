//! `llamaextract.*` over LlamaCloud's extraction API: the file sent inline with the schema or an
//! agent id, and jobs submitted, polled and read.

use super::*;

/// LlamaExtract's key and base, for every call.
pub(super) struct Cloud {
    key: Option<String>,
    base: String,
}

pub(super) fn cloud(args: &Args<'_>) -> Result<Cloud, String> {
    Ok(Cloud {
        key: args.key(&["LLAMAEXTRACT_API_KEY", "LLAMAPARSE_API_KEY"])?,
        base: args.base("LLAMA_CLOUD_BASE_URL", "https://api.cloud.llamaindex.ai")?,
    })
}

pub(super) const NO_LLAMA_KEY: &str = "LLAMAEXTRACT_API_KEY or LLAMAPARSE_API_KEY environment variable not set";

/// Where the file to extract from is.
pub(super) enum Source {
    Local(PathBuf),
    Remote(String),
    /// Base64 already, with its type.
    Inline {
        data: String,
        mime: String,
    },
}

pub(super) struct Extraction {
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
pub(super) fn extract_request(
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
pub(super) fn mime_of(name: &str) -> &'static str {
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
pub(super) async fn file_payload(source: &Source) -> Result<Value, Value> {
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    match source {
        Source::Inline { data, mime } => Ok(json!({ "data": data, "mime_type": mime })),
        Source::Local(path) => {
            if !path.exists() {
                return Err(failure(format!("File not found: {}", path.display()), "file_not_found"));
            }
            let bytes = crate::grants::files::read_regular(path, crate::grants::files::MAX_READ_FILE)
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
pub(super) fn cloud_failure(answer: &net::Answer, job: Option<&str>) -> Option<Value> {
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

pub(super) async fn extract(request: Extraction) -> Value {
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
pub(super) async fn poll(base: &str, key: &str, id: &str, timeout: f64, interval: Duration, cap: Option<u64>) -> Value {
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

pub(super) struct Job {
    cloud: Cloud,
    id: Option<String>,
    timeout: f64,
    retry: Retry,
}

pub(super) fn job_request(service: Service, args: &Args<'_>) -> Result<Job, String> {
    let default = if service == Service::PollStatus { 10.0 } else { 30.0 };
    Ok(Job {
        cloud: cloud(args)?,
        id: args.text("job_id")?.filter(|j| !j.is_empty()),
        timeout: args.number("timeout", default)?.clamp(1.0, MAX_WAIT_SECS),
        retry: if service == Service::PollStatus { args.retry(3)? } else { Retry { max: 0, base_ms: 0 } },
    })
}

pub(super) async fn job_call(service: Service, job: Job) -> Result<Value, String> {
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
