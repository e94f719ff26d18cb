//! The Edge Agent's actions over hosted services, spoken over their REST APIs (against the
//! mock server): `web.search` (Perplexity), `web.scrape`/`web.crawl` (Firecrawl),
//! `web.ai_scrape` (ScrapeGraphAI), `llamaextract.*` (LlamaCloud), and `schema.merge`, which
//! builds their schemas from files.
#![cfg(feature = "net")]

use serde_json::{json, Value};
use tea_yaml::Engine;

mod support;
use support::mock::Mock;

/// Runs a one-node agent using `action` with `with` (YAML, indented under `with:`), the result
/// under `r`, from a file in a fresh directory holding `files`.
fn run(action: &str, with: &str, files: &[(&str, &str)]) -> Value {
    let dir = std::env::temp_dir().join(format!("tea-services-{}-{}", std::process::id(), unique()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let file = dir.join("agent.yaml");
    std::fs::write(&file, format!("nodes:\n  - name: call\n    uses: {action}\n    with:\n{with}\n    output: r\n"))
        .unwrap();
    let agent = Engine::new().allow_net("127.0.0.1").load_file(&file).unwrap_or_else(|e| panic!("{e}"));
    let out = agent.invoke(json!({})).unwrap().done().unwrap();
    std::fs::remove_dir_all(&dir).ok();
    out["r"].clone()
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn problems(text: &str) -> Vec<String> {
    match Engine::new().allow_net("127.0.0.1").load_str(text) {
        Ok(_) => panic!("loaded"),
        Err(e) => e.problems().iter().map(|p| format!("{}: {}", p.line(), p.message())).collect(),
    }
}

#[test]
fn web_search_asks_perplexity_and_lists_its_citations() {
    let mock = Mock::start();
    let r = run(
        "web.search",
        &format!(
            "      query: rust agents\n      num_results: 2\n      api_key: pplx-test\n      base_url: \"{}\"",
            mock.v1()
        ),
        &[],
    );
    assert_eq!(r["success"], true);
    assert_eq!(r["answer"], "echo: rust agents");
    assert_eq!(r["model"], "sonar");
    assert_eq!(r["total_results"], 2);
    assert_eq!(
        r["results"],
        json!([
            { "title": "https://a.example/one", "url": "https://a.example/one", "snippet": "", "position": 1 },
            { "title": "Two", "url": "https://b.example/two", "snippet": "the second", "position": 2 },
        ])
    );
    let hit = &mock.hits()[0];
    assert_eq!(hit.authorization.as_deref(), Some("Bearer pplx-test"));
    assert_eq!((hit.body["return_citations"].clone(), hit.body["max_tokens"].clone()), (json!(true), json!(1024)));

    // No key anywhere: The Edge Agent's configuration failure, in the result.
    if std::env::var_os("PERPLEXITY_API_KEY").is_none() {
        let r = run("web.search", &format!("      query: q\n      base_url: \"{}\"", mock.v1()), &[]);
        assert_eq!(r["error_type"], "configuration");
        assert!(r["error"].as_str().unwrap().starts_with("PERPLEXITY_API_KEY environment variable not set"));
    }
}

#[test]
fn web_ai_scrape_sends_the_schema_and_returns_what_it_extracted() {
    let mock = Mock::start();
    let with = |prompt: &str| {
        format!(
            "      url: https://books.example\n      prompt: {prompt}\n      api_key: sgai-test\n      base_url: \"{}\"\n      \
             output_schema: {{ type: object, properties: {{ books: {{ type: array }}, page: {{ type: string }} }} }}",
            mock.v1()
        )
    };
    let r = run("web.ai_scrape", &with("list the books"), &[]);
    assert_eq!(r["success"], true);
    assert_eq!(
        r["data"],
        json!({ "prompt": "list the books", "properties": ["books", "page"] }),
        "out of its envelope"
    );
    assert_eq!(r["schema_used"]["properties"]["page"], json!({ "type": "string" }));
    let hit = &mock.hits()[0];
    assert_eq!(hit.api_key.as_deref(), Some("sgai-test"), "ScrapeGraphAI's key header");
    assert_eq!(hit.body["website_url"], "https://books.example");

    let denied = run("web.ai_scrape", &with("deny"), &[]);
    assert_eq!(denied["error_type"], "authentication");
    assert!(denied["error"].as_str().unwrap().contains("Invalid API key"), "{denied}");

    let schemaless = run(
        "web.ai_scrape",
        &format!("      url: https://x.example\n      prompt: p\n      api_key: k\n      base_url: \"{}\"", mock.v1()),
        &[],
    );
    assert_eq!(schemaless["error"], "No schema provided. Use output_schema or schema.uses");
}

#[test]
fn web_scrape_and_crawl_speak_firecrawl() {
    let mock = Mock::start();
    let scraped = run(
        "web.scrape",
        &format!(
            "      url: https://site.example\n      formats: [markdown]\n      api_key: fc\n      base_url: \"{}\"",
            mock.base
        ),
        &[],
    );
    assert_eq!(scraped["markdown"], "# https://site.example");
    assert_eq!(scraped["metadata"]["sourceURL"], "https://site.example");
    let sent = &mock.hits()[0].body;
    assert_eq!((sent["formats"].clone(), sent["onlyMainContent"].clone()), (json!(["markdown"]), json!(true)));

    let crawled = run(
        "web.crawl",
        &format!(
            "      url: https://site.example\n      limit: 2\n      poll_interval: 0.05\n      api_key: fc\n      base_url: \"{}\"",
            mock.base
        ),
        &[],
    );
    assert_eq!(crawled["success"], true, "{crawled}");
    assert_eq!(crawled["total_pages"], 2);
    assert_eq!(crawled["pages"][1]["url"], "https://site.example/two");
    assert_eq!(crawled["pages"][1]["html"], "<h1>two</h1>");
    assert_eq!(crawled["job_id"], "crawl-1");
}

#[test]
fn llamaextract_sends_the_file_inline_and_polls_a_pending_job() {
    let mock = Mock::start();
    let with = |mode: &str, extra: &str| {
        format!(
            "      file: notes.txt\n      schema: {{ type: object, properties: {{ title: {{ type: string }} }} }}\n      \
             mode: {mode}\n      use_rest: true\n      api_key: llx-test\n      base_url: \"{}\"{extra}",
            mock.base
        )
    };
    let files = [("notes.txt", "hello")];
    let r = run("llamaextract.extract", &with("balanced", ""), &files);
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(r["status"], "completed");
    assert_eq!(r["data"]["mime_type"], "text/plain");
    assert_eq!(r["data"]["base64"], "aGVsbG8=", "the file, relative to the agent, as base64");
    assert_eq!(r["data"]["schema"]["properties"]["title"]["type"], "string");
    assert_eq!(mock.hits()[0].authorization.as_deref(), Some("Bearer llx-test"));

    // A run that answers a pending job is polled until it succeeds.
    let polled = run("llamaextract.extract", &with("FAST", ""), &files);
    assert_eq!(polled["data"]["title"], "Attention Is All You Need", "{polled}");
    assert_eq!(polled["job_id"], "job-1");

    let missing = run("llamaextract.extract", &with("BALANCED", "").replace("notes.txt", "gone.pdf"), &files);
    assert_eq!(missing["error_type"], "file_not_found");
    let bad_mode = run("llamaextract.extract", &with("TURBO", ""), &files);
    assert_eq!(bad_mode["error_type"], "validation");
    assert!(bad_mode["error"].as_str().unwrap().starts_with("Invalid extraction mode: TURBO"));
}

#[test]
fn llamaextract_jobs_are_submitted_polled_and_read() {
    let mock = Mock::start();
    let auth = format!("      api_key: k\n      base_url: \"{}\"", mock.base);
    let submitted = run(
        "llamaextract.submit_job",
        &format!("      file: notes.txt\n      agent_id: agent-7\n{auth}"),
        &[("notes.txt", "hello")],
    );
    assert_eq!(submitted, json!({ "success": true, "job_id": "job-1", "status": "PENDING" }));
    let status = run("llamaextract.poll_status", &format!("      job_id: job-1\n{auth}"), &[]);
    assert_eq!((status["status"].clone(), status["progress"].clone()), (json!("PENDING"), json!(50)));
    let result = run("llamaextract.get_result", &format!("      job_id: job-1\n{auth}"), &[]);
    assert_eq!(result["data"]["title"], "Attention Is All You Need");
    let lost = run("llamaextract.poll_status", &format!("      job_id: job-404\n{auth}"), &[]);
    assert_eq!(lost["error"], "Job not found: job-404");
    assert_eq!(lost["error_type"], "not_found");
}

#[test]
fn schema_merge_builds_a_schema_from_files_and_inline_parts() {
    let r = run(
        "schema.merge",
        "      schemas:\n        - path: base.yaml\n        - inline: { properties: { total: { type: number } }, required: [total] }\n      \
         validate: true\n      output_key: extraction_schema",
        &[("base.yaml", "type: object\nproperties:\n  id: { type: string }\nrequired: [id]\n")],
    );
    assert_eq!(r["success"], true, "{r}");
    let merged = &r["extraction_schema"];
    assert_eq!(merged["properties"], json!({ "id": { "type": "string" }, "total": { "type": "number" } }));
    assert_eq!(merged["required"], json!(["total"]), "arrays are replaced, as The Edge Agent's merge does");
    assert_eq!(r["validation"]["valid"], true);
}

#[test]
fn insert_citations_cites_each_reference_at_its_closest_sentence() {
    let mock = Mock::start();
    // The mock's embedding of a text is [its length, 1, 0.5]: every reference is closest to the
    // longest sentence.
    let r = run(
        "text.insert_citations",
        &format!(
            "      text: \"# Title\\n\\n## Abstract\\nSkipped here.\\n\\n## Intro\\nShort one. This sentence is the longest of them all by far. Tiny!\\n\\n## References\\nold\"\n      \
             references: [\"Smith 2020 \", \"Jones 2021\"]\n      provider: openai\n      api_key: sk-test\n      base_url: \"{}\"",
            mock.v1()
        ),
        &[],
    );
    assert_eq!(
        r["cited_text"],
        "# Title\n\n## Abstract\nSkipped here.\n\n## Intro\nShort one. This sentence is the longest of them all by far [1,2]. Tiny!"
    );
    assert_eq!(r["references_section"], "## References\n\n1. Smith 2020\n2. Jones 2021");
    assert_eq!(r["citation_map"], json!({ "1": "Smith 2020 ", "2": "Jones 2021" }));
    let hit = &mock.hits()[0];
    assert_eq!(hit.body["model"], "text-embedding-3-large");
    assert_eq!(
        hit.body["input"],
        json!(["Short one.", "This sentence is the longest of them all by far.", "Tiny!"]),
        "the abstract is not cited"
    );

    // Embeddings that fail leave the text uncited, the references appended, and say why.
    let failed = run(
        "text.insert_citations",
        &format!("      text: A claim.\n      references: [R]\n      provider: openai\n      api_key: k\n      base_url: \"{}\"", support::mock::refused()),
        &[],
    );
    assert_eq!(failed["text"], "A claim.\n\n## References\n\n1. R");
    assert!(failed["error"].as_str().unwrap().starts_with("OpenAI API error: "), "{failed}");
}

#[test]
fn vectors_are_embedded_stored_and_queried_in_the_agents_store() {
    let mock = Mock::start();
    let dir = std::env::temp_dir().join(format!("tea-vectors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("agent.yaml");
    // The mock's embedding of a text is [its length, 1, 0.5].
    std::fs::write(
        &file,
        format!(
            r#"
nodes:
  - name: keep
    uses: vector.store
    with:
      texts: [a, bbbbbbbbbb, ccc]
      ids: [one, ten, three]
      metadata: [{{ t: 1 }}, {{ t: 2 }}, {{ t: 3 }}]
      collection: docs
      api_key: sk-test
      base_url: "{v1}"
    output: kept
  - name: ask
    uses: vector.query
    with: {{ query: xyz, k: 2, collection: docs, api_key: sk-test, base_url: "{v1}" }}
    output: found
  - name: ask_filtered
    uses: vector.query
    with: {{ query: xyz, collection: docs, filter: {{ t_lt: 3 }}, api_key: sk-test, base_url: "{v1}" }}
    output: filtered
  - name: llama
    uses: rag.llamaindex.query
    with: {{ query: xyz, index_path: /tmp/nowhere, similarity_top_k: 1, collection: docs, api_key: sk-test, base_url: "{v1}" }}
    output: llama
  - name: index
    uses: rag.llamaindex.create_index
    with: {{ documents: [{{ text: t }}], persist_path: /tmp/index }}
    output: index
  - name: one
    uses: embedding.create
    with: {{ text: abcd, api_key: sk-test, base_url: "{v1}" }}
    output: embedded
"#,
            v1 = mock.v1()
        ),
    )
    .unwrap();
    let agent = Engine::new().allow_net("127.0.0.1").load_file(&file).unwrap();
    assert!(
        agent.warnings().iter().any(|w| w.message().contains("tea embeds no LlamaIndex")),
        "{:?}",
        agent.warnings()
    );
    let out = agent.invoke(json!({})).unwrap().done().unwrap();
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(out["kept"], json!({ "stored": 3, "collection": "docs", "ids": ["one", "ten", "three"] }));
    let ids = |v: &Value| v["results"].as_array().unwrap().iter().map(|r| r["id"].clone()).collect::<Vec<_>>();
    assert_eq!(ids(&out["found"]), [json!("three"), json!("ten")]);
    assert_eq!(out["found"]["results"][0]["score"], 1.0);
    assert_eq!(ids(&out["filtered"]), [json!("ten"), json!("one")]);
    assert_eq!(ids(&out["llama"]), [json!("three")], "LlamaIndex's query is the vector store's");
    assert_eq!(out["index"], json!({ "error": "LlamaIndex not available for index creation", "success": false }));
    assert_eq!(
        out["embedded"],
        json!({ "embedding": [4.0, 1.0, 0.5], "model": "text-embedding-3-small", "dimensions": 3 })
    );
}

#[test]
fn their_arguments_are_checked_at_load() {
    let found = problems("nodes:\n  - name: s\n    uses: web.search\n    with: { querry: rust }\n");
    assert_eq!(
        found,
        ["4: unknown argument `querry` of `web.search` (node `s`); did you mean `query`?; it takes query, num_results, \
          model, timeout, api_key, base_url"]
    );
    let missing = problems("nodes:\n  - name: s\n    uses: web.ai_scrape\n    with: { url: https://x.example }\n");
    assert_eq!(missing, ["4: `web.ai_scrape` (node `s`) needs `prompt` in its `with:`"]);
    let merge = problems("nodes:\n  - name: m\n    uses: schema.merge\n    with: { schema: [] }\n");
    assert!(merge[0].contains("unknown argument `schema` of `schema.merge`"), "{merge:?}");
}
