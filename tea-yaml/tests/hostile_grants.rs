//! Agent files written as an attacker would, against the grants (`Engine::allow_read`,
//! `allow_write`, `allow_net`, `allow_env`, `secret_host`): each attack ends in a clear error
//! (a load error naming the line and the flag when the path or URL is written in the file, else
//! the node's error), with no file read or written outside the grants, no request sent to a
//! host not granted, no secret sent to a host it is not bound to, and no environment value in
//! the state or the error.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use tea::error_chain;
use tea_yaml::Engine;

/// A fresh folder for one test: `agent/` (the agent's folder) and `outside/` with a file.
fn sandbox(name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("tea-hostile-grants-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let agent = dir.join("agent");
    let outside = dir.join("outside");
    std::fs::create_dir_all(&agent).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "outside secret").unwrap();
    (dir, agent, outside)
}

/// Writes `text` as `agent/agent.yaml` and loads it with `engine`.
fn load_in(engine: &Engine, agent_dir: &Path, text: &str) -> Result<tea_yaml::Agent, tea_yaml::LoadError> {
    let file = agent_dir.join("agent.yaml");
    std::fs::write(&file, text).unwrap();
    engine.load_file(&file)
}

/// The error of a run that must fail, as text.
fn run_error(agent: &tea_yaml::Agent, input: Value) -> String {
    let error = agent.invoke(input).expect_err("the run must fail");
    error_chain(&error)
}

const READ_ANY: &str = "nodes:\n  - { name: r, uses: file.read, with: { path: \"{{ state.p }}\" }, output: got }\n";
const WRITE_ANY: &str =
    "nodes:\n  - { name: w, uses: file.write, with: { path: \"{{ state.p }}\", content: pwned }, output: got }\n";

#[test]
fn a_path_written_in_the_file_outside_its_folder_is_a_load_error_naming_the_flag() {
    let (dir, agent, outside) = sandbox("literal");
    for path in ["../outside/secret.txt", "/etc/hostname", &outside.join("secret.txt").display().to_string()] {
        let text = format!("nodes:\n  - name: r\n    uses: file.read\n    with: {{ path: \"{path}\" }}\n");
        let error = load_in(&Engine::new(), &agent, &text).unwrap_err();
        assert_eq!(error.problems()[0].line(), 4, "{error}");
        let shown = error.to_string();
        assert!(shown.contains("--allow-read"), "{shown}");
        assert!(shown.contains("node `r`"), "{shown}");
    }
    let text = format!(
        "nodes:\n  - {{ name: w, uses: file.write, with: {{ path: \"{}\", content: x }} }}\n",
        outside.join("new.txt").display()
    );
    let error = load_in(&Engine::new(), &agent, &text).unwrap_err().to_string();
    assert!(error.contains(&format!("--allow-write {}", outside.canonicalize().unwrap().display())), "{error}");
    // Behind `ratelimit.wrap` too.
    let text = "nodes:\n  - name: w\n    uses: ratelimit.wrap\n    with: { action: file.write, limiter: hostile, args: { path: /tmp/tea-pwned, content: x } }\n";
    let error = load_in(&Engine::new(), &agent, text).unwrap_err().to_string();
    assert!(error.contains("--allow-write /tmp"), "{error}");
    // The operator's grant lets it load; `--trust` does not.
    let text = format!(
        "nodes:\n  - {{ name: r, uses: file.read, with: {{ path: \"{}\" }} }}\n",
        outside.join("secret.txt").display()
    );
    assert!(load_in(&Engine::new().trust_code(true), &agent, &text).is_err());
    assert!(load_in(&Engine::new().allow_read(&outside), &agent, &text).is_ok());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn text_loaded_from_a_string_has_no_folder_of_its_own() {
    let error = Engine::new()
        .load_str("nodes:\n  - { name: r, uses: file.read, with: { path: notes.txt } }\n")
        .unwrap_err()
        .to_string();
    assert!(error.contains("loaded from a string, it has no folder of its own"), "{error}");
    assert!(error.contains("--allow-read"), "{error}");
    let granted = Engine::new().allow_read(".").load_str(READ_ANY).unwrap();
    let error = run_error(&granted, json!({ "p": "/etc/passwd" }));
    assert!(error.contains("--allow-read /etc"), "{error}");
}

#[test]
fn computed_paths_out_of_the_folder_fail_the_node_and_read_nothing() {
    let (dir, agent_dir, outside) = sandbox("computed");
    std::fs::write(agent_dir.join("mine.txt"), "mine").unwrap();
    let agent = load_in(&Engine::new(), &agent_dir, READ_ANY).unwrap();
    // Its own folder reads.
    let out = agent.invoke(json!({ "p": "mine.txt" })).unwrap().done().unwrap();
    assert_eq!(out["got"]["content"], "mine");
    for path in [
        "../outside/secret.txt".to_owned(),
        outside.join("secret.txt").display().to_string(),
        "sub/../../outside/secret.txt".to_owned(),
        "/etc/passwd".to_owned(),
    ] {
        let error = run_error(&agent, json!({ "p": path }));
        assert!(error.contains("node `r`") || error.contains("`r`"), "{error}");
        assert!(error.contains("--allow-read") || error.contains("`..`"), "{path}: {error}");
        assert!(!error.contains("outside secret"), "{error}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(unix)]
#[test]
fn a_symbolic_link_out_of_the_folder_is_refused_for_reading_and_writing() {
    let (dir, agent_dir, outside) = sandbox("symlink");
    std::os::unix::fs::symlink(outside.join("secret.txt"), agent_dir.join("link.txt")).unwrap();
    std::os::unix::fs::symlink(&outside, agent_dir.join("linkdir")).unwrap();
    std::os::unix::fs::symlink(outside.join("created-through-link.txt"), agent_dir.join("dangling")).unwrap();
    let reader = load_in(&Engine::new(), &agent_dir, READ_ANY).unwrap();
    for path in ["link.txt", "linkdir/secret.txt"] {
        let error = run_error(&reader, json!({ "p": path }));
        assert!(error.contains("--allow-read"), "{error}");
        assert!(!error.contains("outside secret"), "{error}");
    }
    let writer = load_in(&Engine::new(), &agent_dir, WRITE_ANY).unwrap();
    for path in ["link.txt", "linkdir/new.txt", "dangling"] {
        let error = run_error(&writer, json!({ "p": path }));
        assert!(error.contains("--allow-write") || error.contains("points nowhere"), "{path}: {error}");
    }
    assert_eq!(std::fs::read_to_string(outside.join("secret.txt")).unwrap(), "outside secret");
    assert!(!outside.join("new.txt").exists());
    assert!(!outside.join("created-through-link.txt").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(target_os = "linux")]
#[test]
fn the_environment_and_devices_are_refused_whatever_is_granted() {
    let (dir, agent_dir, _) = sandbox("special");
    let path_value = std::env::var("PATH").unwrap_or_default();
    let engine = Engine::new().allow_read("/").allow_write("/").trust_code(true);
    let reader = load_in(&engine, &agent_dir, READ_ANY).unwrap();
    for path in ["/proc/self/environ", "/proc/self/cmdline", "/proc/1/environ", "/dev/zero", "/sys/kernel/hostname"] {
        let error = run_error(&reader, json!({ "p": path }));
        assert!(error.contains("no agent file may read"), "{path}: {error}");
        assert!(path_value.len() < 4 || !error.contains(&path_value), "{error}");
    }
    // Written in the file, it does not load.
    let text = "nodes:\n  - { name: r, uses: file.read, with: { path: /proc/self/environ } }\n";
    let error = load_in(&engine, &agent_dir, text).unwrap_err().to_string();
    assert!(error.contains("under `/proc`"), "{error}");
    // A FIFO in the agent's own folder: refused at once (not waited on).
    let fifo = agent_dir.join("pipe");
    if std::process::Command::new("mkfifo").arg(&fifo).status().is_ok_and(|s| s.success()) {
        let started = std::time::Instant::now();
        let error = run_error(&reader, json!({ "p": "pipe" }));
        assert!(error.contains("FIFO"), "{error}");
        let writer = load_in(&engine, &agent_dir, WRITE_ANY).unwrap();
        let error = run_error(&writer, json!({ "p": "pipe" }));
        assert!(error.contains("FIFO"), "{error}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }
    let writer = load_in(&engine, &agent_dir, WRITE_ANY).unwrap();
    let error = run_error(&writer, json!({ "p": "/dev/null" }));
    assert!(error.contains("under `/dev`"), "{error}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn nothing_is_written_deleted_or_saved_outside_the_grants() {
    let (dir, agent_dir, outside) = sandbox("writes");
    let writer = load_in(&Engine::new().trust_code(true), &agent_dir, WRITE_ANY).unwrap();
    let target = outside.join("new.txt");
    let error = run_error(&writer, json!({ "p": target.display().to_string() }));
    assert!(error.contains("--allow-write"), "{error}");
    assert!(!target.exists());
    // Its own folder is written.
    writer.invoke(json!({ "p": "out/ok.txt" })).unwrap().done().unwrap();
    assert_eq!(std::fs::read_to_string(agent_dir.join("out/ok.txt")).unwrap(), "pwned");
    // A granted folder is written; a read grant is not a write grant.
    let readonly = load_in(&Engine::new().allow_read(&outside), &agent_dir, WRITE_ANY).unwrap();
    assert!(run_error(&readonly, json!({ "p": target.display().to_string() })).contains("--allow-write"));
    let granted = load_in(&Engine::new().allow_write(&outside), &agent_dir, WRITE_ANY).unwrap();
    granted.invoke(json!({ "p": target.display().to_string() })).unwrap().done().unwrap();
    assert!(target.exists());
    std::fs::remove_file(&target).unwrap();

    let text = "nodes:\n  - { name: d, uses: file.delete, with: { path: \"{{ state.p }}\" } }\n";
    let deleter = load_in(&Engine::new(), &agent_dir, text).unwrap();
    let error = run_error(&deleter, json!({ "p": "../outside/secret.txt" }));
    assert!(error.contains("--allow-write"), "{error}");
    assert!(outside.join("secret.txt").exists());

    let text = "nodes:\n  - { name: s, uses: checkpoint.save, with: { path: \"{{ state.p }}\" }, output: saved }\n";
    let saver = load_in(&Engine::new(), &agent_dir, text).unwrap();
    let error = run_error(&saver, json!({ "p": "../outside/ck.ckpt" }));
    assert!(error.contains("--allow-write"), "{error}");
    assert!(!outside.join("ck.ckpt").exists());

    let text = "nodes:\n  - { name: l, uses: file.list, with: { path: \"{{ state.p }}\" }, output: listed }\n";
    let lister = load_in(&Engine::new(), &agent_dir, text).unwrap();
    assert!(run_error(&lister, json!({ "p": "/" })).contains("--allow-read /"));

    let text = "nodes:\n  - { name: e, uses: file.exists, with: { path: \"{{ state.p }}\" }, output: found }\n";
    let prober = load_in(&Engine::new(), &agent_dir, text).unwrap();
    assert!(run_error(&prober, json!({ "p": "/etc/shadow" })).contains("--allow-read /etc"));

    // A store the file names is written where it may write.
    let text = "config: { checkpoint_dir: /tmp/tea-hostile-store }\nnodes:\n  - { name: a, run: 'return {}' }\n";
    let error = load_in(&Engine::new(), &agent_dir, text).unwrap_err().to_string();
    assert!(error.contains("`config.checkpoint_dir`") && error.contains("--allow-write /tmp"), "{error}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn schema_and_subgraph_files_are_read_only_where_granted() {
    let (dir, agent_dir, outside) = sandbox("refs");
    std::fs::write(outside.join("child.yaml"), "nodes:\n  - { name: c, run: 'return {}' }\n").unwrap();
    let text = "nodes:\n  - name: sub\n    type: subgraph\n    file: ../outside/child.yaml\n";
    let error = load_in(&Engine::new(), &agent_dir, text).unwrap_err();
    assert_eq!(error.problems()[0].line(), 4, "{error}");
    assert!(error.to_string().contains("--allow-read"), "{error}");
    assert!(load_in(&Engine::new().allow_read(&outside), &agent_dir, text).is_ok());

    std::fs::write(outside.join("s.json"), r#"{"type": "object"}"#).unwrap();
    let text = "nodes:\n  - name: m\n    uses: schema.merge\n    with: { schemas: [{ path: \"{{ state.p }}\" }] }\n    output: merged\n";
    let merger = load_in(&Engine::new(), &agent_dir, text).unwrap();
    let out = merger.invoke(json!({ "p": "../outside/s.json" })).unwrap().done().unwrap();
    assert_eq!(out["merged"]["success"], false, "{:?}", out.to_json());
    assert!(out["merged"]["errors"][0].as_str().unwrap().contains("--allow-read"), "{:?}", out.to_json());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn environment_variables_are_read_by_name_only_where_granted() {
    let (dir, agent_dir, _) = sandbox("env");
    let text = "extraction_schema:\n  entities: { required_fields: [name] }\nvalidation_logging:\n  enabled: true\n  log_path: \"${HOME}/failures.jsonl\"\nnodes:\n  - { name: check, uses: validate.extraction }\n";
    let error = load_in(&Engine::new(), &agent_dir, text).unwrap_err();
    assert_eq!(error.problems()[0].line(), 5, "{error}");
    assert!(error.to_string().contains("--allow-env HOME"), "{error}");
    // Granted, the variable is read, and the path it gives is confined all the same.
    let agent = load_in(&Engine::new().allow_env("HOME"), &agent_dir, text).unwrap();
    if std::env::var("HOME").is_ok_and(|h| !h.is_empty() && !Path::new(&h).starts_with(&agent_dir)) {
        let error = run_error(&agent, json!({ "entities": [{ "type": "Person" }] }));
        assert!(error.contains("--allow-write"), "{error}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(feature = "net")]
mod net {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::{Arc, Mutex};

    /// A server on 127.0.0.1 recording each request's head; it answers with `answer(head)`.
    struct Server {
        port: u16,
        heads: Arc<Mutex<Vec<String>>>,
    }

    impl Server {
        fn start(answer: impl Fn(&str) -> String + Send + 'static) -> Server {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let port = listener.local_addr().unwrap().port();
            let heads = Arc::new(Mutex::new(Vec::new()));
            let seen = heads.clone();
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    let Ok(mut stream) = stream else { continue };
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
                        head.push(byte[0]);
                    }
                    let head = String::from_utf8_lossy(&head).into_owned();
                    let reply = answer(&head);
                    seen.lock().unwrap().push(head);
                    let _ = stream.write_all(reply.as_bytes());
                }
            });
            Server { port, heads }
        }

        fn ok() -> Server {
            Server::start(|_| {
                let body = r#"{"choices":[{"message":{"role":"assistant","content":"hi"}}],"ok":true}"#;
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                )
            })
        }

        fn requests(&self) -> Vec<String> {
            self.heads.lock().unwrap().clone()
        }
    }

    const SECRET: &str = "s3cret-token-value";

    #[test]
    fn a_host_not_granted_is_never_reached() {
        let (dir, agent_dir, _) = sandbox("net-host");
        let server = Server::ok();
        let url = format!("http://127.0.0.1:{}/x", server.port);
        // Written in the file: a load error naming the line and the flag.
        let text = format!("nodes:\n  - name: g\n    uses: http.get\n    with: {{ url: \"{url}\" }}\n");
        let error = load_in(&Engine::new(), &agent_dir, &text).unwrap_err();
        assert_eq!(error.problems()[0].line(), 4, "{error}");
        assert!(error.to_string().contains("--allow-net 127.0.0.1"), "{error}");
        // Computed: the node fails before anything is sent.
        let text = "nodes:\n  - { name: g, uses: http.get, with: { url: \"{{ state.url }}\" }, output: got }\n";
        let agent = load_in(&Engine::new().trust_code(true), &agent_dir, text).unwrap();
        let error = run_error(&agent, json!({ "url": url }));
        assert!(error.contains("--allow-net 127.0.0.1"), "{error}");
        // Another port of a granted host is another grant.
        let agent = load_in(&Engine::new().allow_net("127.0.0.1:1"), &agent_dir, text).unwrap();
        assert!(run_error(&agent, json!({ "url": url })).contains("not granted"));
        assert!(server.requests().is_empty(), "{:?}", server.requests());
        // Granted, it is reached.
        let agent = load_in(&Engine::new().allow_net(format!("127.0.0.1:{}", server.port)), &agent_dir, text).unwrap();
        let out = agent.invoke(json!({ "url": url })).unwrap().done().unwrap();
        assert_eq!(out["got"]["status"], 200, "{:?}", out.to_json());
        assert_eq!(server.requests().len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_llm_call_to_a_host_not_granted_is_never_reached() {
        // `llm.call` sends through tea-models' provider: its request hook holds the grants.
        let (dir, agent_dir, _) = sandbox("net-llm-host");
        let server = Server::ok();
        let base = format!("http://127.0.0.1:{}/v1", server.port);
        let text = "nodes:\n  - { name: ask, uses: llm.call, with: { base_url: \"{{ state.base }}\", prompt: hi }, output: answer }\n";
        let agent = load_in(&Engine::new().allow_net("127.0.0.1:1").trust_code(true), &agent_dir, text).unwrap();
        let error = run_error(&agent, json!({ "base": base }));
        assert!(error.contains("not granted") && error.contains("llm.call"), "{error}");
        assert!(server.requests().is_empty(), "{:?}", server.requests());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_redirect_to_another_host_is_not_followed() {
        let (dir, agent_dir, _) = sandbox("net-redirect");
        let target = Server::ok();
        let to = format!("http://localhost:{}/stolen", target.port);
        let redirector = Server::start(move |_| {
            format!("HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        });
        let text = "nodes:\n  - { name: g, uses: http.get, with: { url: \"{{ state.url }}\" }, output: got }\n";
        // Both hosts granted: still, a redirect goes only to the host the request was checked for.
        let engine = Engine::new().allow_net("127.0.0.1").allow_net("localhost");
        let agent = load_in(&engine, &agent_dir, text).unwrap();
        let url = format!("http://127.0.0.1:{}/start", redirector.port);
        let error = run_error(&agent, json!({ "url": url }));
        assert!(error.contains("redirect to another host"), "{error}");
        assert_eq!(redirector.requests().len(), 1);
        assert!(target.requests().is_empty(), "{:?}", target.requests());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_secret_goes_only_to_the_hosts_the_operator_binds_it_to() {
        let (dir, agent_dir, _) = sandbox("net-secret");
        let server = Server::ok();
        let url = format!("http://127.0.0.1:{}/x", server.port);
        let header = format!(
            "nodes:\n  - name: g\n    uses: http.get\n    with: {{ url: \"{url}\", headers: {{ Authorization: \"Bearer {{{{ secrets.token }}}}\" }} }}\n    output: got\n"
        );
        let query = format!(
            "nodes:\n  - name: g\n    uses: http.get\n    with: {{ url: \"{url}\", query: {{ k: \"{{{{ secrets.token }}}}\" }} }}\n    output: got\n"
        );
        let engine = Engine::new().allow_net("127.0.0.1").secret("token", SECRET);
        for text in [&header, &query] {
            let agent = load_in(&engine, &agent_dir, text).unwrap();
            let error = run_error(&agent, json!({}));
            assert!(error.contains("secret `token`"), "{error}");
            assert!(error.contains("--secret-host token=127.0.0.1"), "{error}");
            assert!(!error.contains(SECRET), "{error}");
        }
        // `llm_api_key` goes to the providers' own endpoints, not one the file names.
        let llm = format!(
            "nodes:\n  - {{ name: ask, uses: llm.call, with: {{ base_url: \"http://127.0.0.1:{}/v1\", prompt: hi }}, output: answer }}\n",
            server.port
        );
        let agent =
            load_in(&Engine::new().allow_net("127.0.0.1").secret("llm_api_key", SECRET), &agent_dir, &llm).unwrap();
        let error = run_error(&agent, json!({}));
        assert!(error.contains("secret `llm_api_key`"), "{error}");
        assert!(!error.contains(SECRET), "{error}");
        assert!(server.requests().is_empty(), "nothing was sent: {:?}", server.requests());

        // Bound by the operator, it is sent.
        let bound = engine.clone().secret_host("token", "127.0.0.1");
        let agent = load_in(&bound, &agent_dir, &header).unwrap();
        agent.invoke(json!({})).unwrap().done().unwrap();
        let sent = server.requests();
        assert_eq!(sent.len(), 1);
        assert!(sent[0].contains(SECRET), "{sent:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn hosts_the_file_s_settings_name_are_reached_only_when_the_operator_says_so() {
        let (dir, agent_dir, _) = sandbox("net-settings");
        let server = Server::ok();
        let text = format!(
            "settings:\n  llm: {{ base_url: \"http://127.0.0.1:{}/v1\" }}\nnodes:\n  - {{ name: ask, uses: llm.call, with: {{ prompt: hi }}, output: answer }}\n",
            server.port
        );
        let agent = load_in(&Engine::new(), &agent_dir, &text).unwrap();
        let error = run_error(&agent, json!({}));
        assert!(error.contains("--allow-net-from-file"), "{error}");
        assert!(server.requests().is_empty());
        let agent = load_in(&Engine::new().allow_net_from_settings(true), &agent_dir, &text).unwrap();
        let out = agent.invoke(json!({})).unwrap().done().unwrap();
        assert_eq!(out["answer"]["content"], "hi", "{:?}", out.to_json());
        assert_eq!(server.requests().len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_grant_that_does_not_parse_fails_every_load() {
        let error = Engine::new().allow_net("exa mple.com").load_str("nodes:\n  - { name: a, run: 'return {}' }\n");
        assert!(error.unwrap_err().to_string().contains("`exa mple.com` is not a host"));
    }
}
