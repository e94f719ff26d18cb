//! `tea serve`: the review agent served over HTTP; SIGTERM stops the server cleanly and the
//! paused thread is answered by the next server on the same store.

mod serve_support;

use serde_json::{json, Value};
use serve_support::call;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn agent() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/agents/review.yaml")
}

/// `tea serve` on `store`, listening on a free loopback port; returns it and its address once it
/// says it listens.
fn start(store: &str, extra: &[&str]) -> (Child, String) {
    let mut command = serve_support::tea();
    command.args(["serve", agent().to_str().unwrap(), "--store", store, "--bind", "127.0.0.1:0"]).args(extra);
    serve_support::serve(&mut command, std::io::sink())
}

fn stop(child: Child) {
    let status = serve_support::stop(child).expect("tea serve did not stop on SIGTERM");
    assert!(status.success(), "tea serve exits cleanly on SIGTERM: {status}");
}

#[test]
fn a_pause_outlives_the_server_that_took_it() {
    let dir = std::env::temp_dir().join(format!("tea-cli-serve-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = format!("sled:{}", dir.join("store").display());

    let (server, address) = start(&store, &["--insecure-local"]);
    let (status, out) =
        call(&address, "POST", "/runs/wait", Some(json!({ "input": {}, "on_completion": "keep" })), None);
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["run"]["status"], "interrupted");
    let thread = out["run"]["thread_id"].as_str().unwrap().to_owned();
    assert_eq!(out["interrupts"][0]["id"], "review#0");
    stop(server);

    // The next server, on the same store and with a token, answers it.
    std::fs::write(dir.join("tokens"), "answer reviewer-token-0123456789\n").unwrap();
    let tokens = dir.join("tokens");
    let (server, address) = start(&store, &["--token-file", tokens.to_str().unwrap()]);
    let (status, _) = call(&address, "GET", &format!("/threads/{thread}"), None, None);
    assert_eq!(status, 401);
    let token = Some("reviewer-token-0123456789");
    let (status, seen) = call(&address, "GET", &format!("/threads/{thread}"), None, token);
    assert_eq!((status, seen["status"].as_str()), (200, Some("interrupted")), "{seen}");
    let path = format!("/threads/{thread}/runs/wait");
    let (status, out) = call(&address, "POST", &path, Some(json!({ "command": { "resume": true } })), token);
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["interrupts"][0]["id"], "before:publish", "the breakpoint before publishing: {out}");
    let (status, out) = call(&address, "POST", &path, Some(json!({ "command": {} })), token);
    assert_eq!((status, out["run"]["status"].as_str()), (200, Some("success")), "{out}");
    assert_eq!(out["values"]["published"], "Release notes, take 1");
    stop(server);

    // Usage errors: no access given; --insecure-local off loopback.
    let refused = Command::new(env!("CARGO_BIN_EXE_tea"))
        .args(["serve", agent().to_str().unwrap(), "--store", "memory"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("needs `--token-file FILE`"));
    let refused = Command::new(env!("CARGO_BIN_EXE_tea"))
        .args(["serve", agent().to_str().unwrap(), "--store", "memory", "--insecure-local", "--bind", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&refused.stderr).contains("needs a loopback `--bind`"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_store_the_threads_go_to_the_users_data_directory_not_the_current_one() {
    let root = std::env::temp_dir().join(format!("tea-cli-serve-default-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let (project, data) = (root.join("project"), root.join("data"));
    std::fs::create_dir_all(&project).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tea"))
        .args(["serve", agent().to_str().unwrap(), "--insecure-local", "--bind", "127.0.0.1:0"])
        .current_dir(&project)
        .env("XDG_DATA_HOME", &data)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    let store = data.join("tea").join("serve");
    assert!(line.contains(&format!("(store sled:{})", store.display())), "{line}");
    let address = line.split("http://").nth(1).and_then(|r| r.split_whitespace().next()).unwrap().to_owned();
    let (status, out) =
        call(&address, "POST", "/runs/wait", Some(json!({ "input": {}, "on_completion": "keep" })), None);
    assert_eq!((status, out["run"]["status"].as_str()), (200, Some("interrupted")), "{out}");
    stop(child);
    assert!(store.is_dir(), "the paused thread is kept in {}", store.display());
    let left: Vec<_> = std::fs::read_dir(&project).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "tea serve left {left:?} in the directory it ran in");

    let help = Command::new(env!("CARGO_BIN_EXE_tea")).args(["serve", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("sled:$XDG_DATA_HOME/tea/serve") && help.contains("~/.local/share/tea/serve"), "{help}");
    let _ = std::fs::remove_dir_all(&root);
}

/// A request over a fresh connection, written as given (`head` holds the request line and
/// headers, without the blank line); the status and the body as JSON.
fn raw(address: &str, head: &str, body: &str) -> (u16, Value) {
    let mut stream = TcpStream::connect(address).unwrap();
    write!(stream, "{head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status: u16 = response[9..12].parse().unwrap();
    let (_, payload) = response.split_once("\r\n\r\n").unwrap();
    (status, serde_json::from_str(payload).unwrap_or(Value::Null))
}

#[test]
fn insecure_local_refuses_what_a_web_page_can_send() {
    let (server, address) = start("memory", &["--insecure-local", "--allowed-host", "tea.lan"]);
    let (status, out) =
        call(&address, "POST", "/runs/wait", Some(json!({ "input": {}, "on_completion": "keep" })), None);
    assert_eq!((status, out["run"]["status"].as_str()), (200, Some("interrupted")), "{out}");
    let thread = out["run"]["thread_id"].as_str().unwrap().to_owned();
    let answer = json!({ "command": { "resume": true } }).to_string();
    let path = format!("/threads/{thread}/runs/wait");
    let pending = || {
        let (status, seen) = call(&address, "GET", &format!("/threads/{thread}"), None, None);
        assert_eq!((status, seen["status"].as_str()), (200, Some("interrupted")), "{seen}");
    };

    // A page's `fetch(url, {mode: "no-cors", method: "POST", body})` sends `text/plain`.
    let (status, error) =
        raw(&address, &format!("POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: text/plain"), &answer);
    assert_eq!((status, error["code"].as_str()), (415, Some("unsupported_media_type")), "{error}");
    pending();
    let (status, error) = raw(
        &address,
        &format!("POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/x-www-form-urlencoded"),
        "command=resume",
    );
    assert_eq!(status, 415, "{error}");
    pending();

    // A page of another origin, even sending JSON (which a browser would preflight first).
    let (status, error) = raw(
        &address,
        &format!(
            "POST {path} HTTP/1.1\r\nHost: {address}\r\nOrigin: http://evil.example\r\nContent-Type: application/json"
        ),
        &answer,
    );
    assert_eq!((status, error["code"].as_str()), (403, Some("origin_not_allowed")), "{error}");
    pending();

    // DNS rebinding: the page's own name, pointed at 127.0.0.1, lists and answers threads.
    let evil_port = address.rsplit(':').next().unwrap();
    for (head, body) in [
        (
            format!(
                "POST /threads/search HTTP/1.1\r\nHost: evil.example:{evil_port}\r\nContent-Type: application/json"
            ),
            "{}",
        ),
        (format!("GET /threads/{thread} HTTP/1.1\r\nHost: evil.example"), ""),
        (format!("GET /inbox HTTP/1.1\r\nHost: evil.example:{evil_port}"), ""),
        (format!("POST {path} HTTP/1.1\r\nHost: evil.example:{evil_port}\r\nContent-Type: application/json"), &answer),
    ] {
        let (status, error) = raw(&address, &head, body);
        assert_eq!((status, error["code"].as_str()), (421, Some("host_not_allowed")), "{head}: {error}");
    }
    pending();

    // What the operator allowed, and the server's own origin, are served.
    let (status, found) = raw(
        &address,
        &format!("POST /threads/search HTTP/1.1\r\nHost: tea.lan:{evil_port}\r\nContent-Type: application/json"),
        "{}",
    );
    assert_eq!((status, found.as_array().map(Vec::len)), (200, Some(1)), "{found}");
    let (status, out) = raw(
        &address,
        &format!(
            "POST {path} HTTP/1.1\r\nHost: {address}\r\nOrigin: http://{address}\r\nContent-Type: application/json; charset=utf-8"
        ),
        &answer,
    );
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["interrupts"][0]["id"], "before:publish", "{out}");
    stop(server);

    let refused = Command::new(env!("CARGO_BIN_EXE_tea"))
        .args(["serve", agent().to_str().unwrap(), "--insecure-local", "--allowed-host", "http://tea.lan/"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&refused.stderr).contains("is not a host name"), "{refused:?}");
}

#[test]
fn encryption_keys_seal_what_the_server_stores() {
    let dir = std::env::temp_dir().join(format!("tea-cli-serve-sealed-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let store = format!("dir:{}", dir.join("store").display());
    let keys = dir.join("keys");
    std::fs::write(&keys, format!("1:{}\n", "cd".repeat(32))).unwrap();
    let keys = keys.to_str().unwrap();

    let (server, address) = start(&store, &["--insecure-local", "--encryption-keys", keys]);
    let (status, out) =
        call(&address, "POST", "/runs/wait", Some(json!({ "input": {}, "on_completion": "keep" })), None);
    assert_eq!((status, out["run"]["status"].as_str()), (200, Some("interrupted")), "{out}");
    let thread = out["run"]["thread_id"].as_str().unwrap().to_owned();
    stop(server);

    // Every file the store wrote is sealed: no state text at rest.
    let mut files = vec![dir.join("store")];
    let mut checkpoints = 0;
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else if path.extension().is_some_and(|e| e == "ckpt") {
            let bytes = std::fs::read(&path).unwrap();
            assert!(bytes.starts_with(b"TEAs"), "{} is not sealed", path.display());
            assert!(!bytes.windows(13).any(|w| w == b"Release notes"), "{} holds state in clear", path.display());
            checkpoints += 1;
        }
    }
    assert!(checkpoints > 0, "no checkpoint file under {}", dir.display());

    // With the keys, the next server reads the thread.
    let (server, address) = start(&store, &["--insecure-local", "--encryption-keys", keys]);
    let (status, seen) = call(&address, "GET", &format!("/threads/{thread}"), None, None);
    assert_eq!((status, seen["status"].as_str()), (200, Some("interrupted")), "{seen}");
    stop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_servers_sweeper_expires_threads_under_its_flags() {
    let (server, address) =
        start("memory", &["--insecure-local", "--older-than", "0s", "--include-paused", "--sweep-every", "1s"]);
    let (status, out) =
        call(&address, "POST", "/runs/wait", Some(json!({ "input": {}, "on_completion": "keep" })), None);
    assert_eq!(status, 200, "{out}");
    let thread = out["run"]["thread_id"].as_str().unwrap().to_owned();
    // Paused threads expire at once under these flags: the next sweep (within a second or so)
    // deletes the thread and its record.
    let started = Instant::now();
    loop {
        let (status, _) = call(&address, "GET", &format!("/threads/{thread}"), None, None);
        if status == 404 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "the sweeper did not expire the thread");
        std::thread::sleep(Duration::from_millis(100));
    }
    stop(server);
}
