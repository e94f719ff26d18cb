//! `text.insert_citations`: each reference cited at the sentence whose embedding is closest,
//! renumbered, with a `## References` section.

use super::*;

pub(super) struct Citations {
    text: String,
    references: Vec<String>,
    provider: crate::actions::net::llm::Provider,
    /// `model`, `base_url`, `api_key`, `deployment`, for the embeddings' endpoint.
    endpoint: Map<String, Value>,
    key: Option<String>,
}

/// The embedding model when none is named (The Edge Agent's).
pub(super) const CITATION_MODEL: &str = "text-embedding-3-large";

pub(super) fn citations_request(args: &Args<'_>) -> Result<Citations, String> {
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
            crate::actions::net::llm::Provider::Azure
        }
        None | Some("auto") => crate::actions::net::llm::Provider::OpenAi,
        Some(name) => crate::actions::net::llm::Provider::named(name).map_err(|e| format!("{what}: {e}"))?,
    };
    if provider == crate::actions::net::llm::Provider::Shell {
        return Err(format!("{what}: a shell provider gives no embeddings"));
    }
    let mut endpoint = Map::new();
    for key in ["model", "api_key", "base_url", "deployment"] {
        if let Some(v) = args.get(key) {
            endpoint.insert(key.to_owned(), v.clone());
        }
    }
    if provider == crate::actions::net::llm::Provider::Azure && !endpoint.contains_key("deployment") {
        if let Ok(d) = std::env::var("AZURE_OPENAI_EMBEDDING_DEPLOYMENT") {
            endpoint.insert("deployment".to_owned(), json!(d));
        }
    }
    Ok(Citations { text, references, provider, endpoint, key: std::env::var("OPENAI_API_KEY").ok() })
}

/// `## References` and its numbered list, each reference as `shown` gives it.
pub(super) fn references_section<'a>(refs: impl Iterator<Item = &'a String>, shown: impl Fn(&str) -> String) -> String {
    let mut lines = vec!["## References".to_owned(), String::new()];
    lines.extend(refs.enumerate().map(|(i, r)| format!("{}. {}", i + 1, shown(r))));
    lines.join("\n")
}

/// The result without citations: the text as it is, the references appended in their order.
pub(super) fn uncited(text: &str, references: &[String], error: Option<String>) -> Value {
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
pub(super) fn find_ascii_ci(hay: &str, needle: &str) -> Option<usize> {
    hay.to_ascii_lowercase().find(&needle.to_ascii_lowercase())
}

/// The sentences a paper's citations may go to (The Edge Agent's `_get_sentences`): the
/// abstract's section dropped, headings and images left out, each sentence's last line.
pub(super) fn sentences(text: &str) -> Vec<String> {
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

pub(super) async fn insert_citations(request: Citations) -> Result<Value, String> {
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
