//! `tea serve` in tea-cli's tests: started on a free loopback port, asked over plain HTTP/1.1,
//! stopped with SIGTERM. Each test file that serves includes this module (`mod serve_support;`)
//! and uses what it needs of it.
#![allow(dead_code)]

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The `tea` binary of this build.
pub fn tea() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tea"))
}

/// Spawns `command` (a `tea serve … --bind 127.0.0.1:0`) and waits until it says where it
/// listens: the child and its address. What it writes to stderr, from its first line on, goes
/// to `rest`. An error when it exits before listening, with what it said.
pub fn listening(command: &mut Command, mut rest: impl Write + Send + 'static) -> Result<(Child, String), String> {
    let mut child = command.stderr(Stdio::piped()).spawn().map_err(|e| format!("tea serve did not start: {e}"))?;
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr is piped"));
    let mut seen = String::new();
    let address = loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap_or(0) == 0 {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("tea serve exited before listening: {seen}"));
        }
        seen.push_str(&line);
        if let Some(address) = line.split("http://").nth(1).and_then(|r| r.split_whitespace().next()) {
            break address.to_owned();
        }
    };
    let _ = rest.write_all(seen.as_bytes());
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut rest));
    Ok((child, address))
}

/// [`listening`], failing the test when the server does not start.
pub fn serve(command: &mut Command, rest: impl Write + Send + 'static) -> (Child, String) {
    listening(command, rest).unwrap_or_else(|error| panic!("{error}"))
}

/// `tea serve` of the LangGraph SDK checks' two agents (`tea-serve/tests/sdk/chat.yaml` and
/// `examples/agents/review.yaml`) on a memory store, run in `dir` with a token file granting
/// `token` answer rights, on a free loopback port: the child and its address.
pub fn sdk_server(dir: &Path, token: &str) -> (Child, String) {
    std::fs::write(dir.join("tokens"), format!("answer {token}\n")).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut command = tea();
    command
        .current_dir(dir)
        .arg("serve")
        .arg(root.join("tea-serve/tests/sdk/chat.yaml"))
        .arg(root.join("examples/agents/review.yaml"))
        .args(["--store", "memory", "--bind", "127.0.0.1:0", "--token-file", "tokens"]);
    serve(&mut command, std::io::stderr())
}

/// SIGTERM to `child`, then its exit status once it stops; `None` (and SIGKILL) when it has
/// not stopped within 20 s.
pub fn stop(mut child: Child) -> Option<ExitStatus> {
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let started = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A request over a fresh connection, with `token` as the bearer header; the status and the
/// body as JSON (`null` when it is not JSON).
pub fn call(address: &str, method: &str, path: &str, body: Option<Value>, token: Option<&str>) -> (u16, Value) {
    let mut stream = TcpStream::connect(address).unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status: u16 = response[9..12].parse().unwrap();
    let (_, payload) = response.split_once("\r\n\r\n").unwrap();
    (status, serde_json::from_str(payload).unwrap_or(Value::Null))
}
