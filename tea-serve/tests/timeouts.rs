//! A server that clients cannot hold: connections that send their headers or their body one
//! byte a second are cut off at the timeouts, while the server goes on answering others. Plain
//! HTTP/1.1 over loopback, written by hand.

use std::time::{Duration, Instant};
use tea_serve::Serve;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A server with no agent, a 1 s header timeout and a 1 s body timeout; its address.
async fn server() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let router = Serve::new().body_read_timeout(Duration::from_secs(1)).router();
    tokio::spawn(tea_serve::serve_with_header_timeout(
        listener,
        router,
        std::future::pending::<()>(),
        Duration::from_secs(1),
    ));
    address
}

/// Everything the server sends on `stream` until it closes it (at most `limit` to wait).
async fn until_closed(stream: &mut TcpStream, limit: Duration) -> Option<String> {
    let mut got = Vec::new();
    let read = tokio::time::timeout(limit, async {
        let mut buffer = [0u8; 1024];
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buffer[..n]),
            }
        }
    })
    .await;
    read.ok().map(|()| String::from_utf8_lossy(&got).into_owned())
}

/// A normal request: the agents (none), as JSON.
async fn agents(address: &str) -> String {
    let mut stream = TcpStream::connect(address).await.unwrap();
    let request = format!(
        "POST /agents/search HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    until_closed(&mut stream, Duration::from_secs(5)).await.expect("the server answers")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_trickle_their_headers_are_closed_and_others_are_served() {
    let address = server().await;
    let started = Instant::now();
    let mut trickling = Vec::new();
    for _ in 0..200 {
        let address = address.clone();
        trickling.push(tokio::spawn(async move {
            let stream = TcpStream::connect(&address).await.unwrap();
            let (mut reader, mut writer) = stream.into_split();
            let head = format!("GET /threads/x HTTP/1.1\r\nHost: {address}\r\nX-Slow: ");
            // One byte a second, for as long as the server listens.
            let writing = tokio::spawn(async move {
                for byte in head.bytes().chain(std::iter::repeat(b'a')) {
                    if writer.write_all(&[byte]).await.is_err() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            });
            let mut sink = Vec::new();
            let closed = tokio::time::timeout(Duration::from_secs(10), reader.read_to_end(&mut sink)).await;
            writing.abort();
            closed.is_ok()
        }));
    }
    // While they trickle, the server answers.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let answer = agents(&address).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("[]"), "{answer}");
    for connection in trickling {
        assert!(connection.await.unwrap(), "a trickling connection was still open after 10 s");
    }
    assert!(started.elapsed() < Duration::from_secs(8), "closed after {:?}", started.elapsed());
    // And after.
    assert!(agents(&address).await.starts_with("HTTP/1.1 200"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_trickles_gets_408_and_one_too_large_413() {
    let address = server().await;
    let mut stream = TcpStream::connect(&address).await.unwrap();
    let head = format!(
        "POST /threads/search HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let started = Instant::now();
    let (mut reader, mut writer) = stream.into_split();
    let writing = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if writer.write_all(b" ").await.is_err() {
                break;
            }
        }
    });
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), reader.read_to_end(&mut got)).await;
    writing.abort();
    let answer = String::from_utf8_lossy(&got);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"request_timeout\""), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());

    let mut stream = TcpStream::connect(&address).await.unwrap();
    let head = format!(
        "POST /threads/search HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        tea_serve::DEFAULT_BODY_LIMIT + 1
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let answer = until_closed(&mut stream, Duration::from_secs(5)).await.expect("an answer before the body");
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(agents(&address).await.starts_with("HTTP/1.1 200"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_connection_that_trickles_its_next_request_is_closed() {
    let address = server().await;
    let stream = TcpStream::connect(&address).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let request = format!(
        "POST /agents/search HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}"
    );
    writer.write_all(request.as_bytes()).await.unwrap();
    let mut first = [0u8; 512];
    let n = reader.read(&mut first).await.unwrap();
    assert!(first[..n].starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&first[..n]));
    let started = Instant::now();
    let writing = tokio::spawn(async move {
        for byte in b"GET /threads/x HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaa".iter() {
            if writer.write_all(&[*byte]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(10), reader.read_to_end(&mut rest)).await;
    writing.abort();
    assert!(closed.is_ok(), "the kept-alive connection was still open after 10 s");
    assert!(started.elapsed() < Duration::from_secs(5), "closed after {:?}", started.elapsed());
}
