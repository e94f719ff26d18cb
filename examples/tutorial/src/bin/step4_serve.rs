// Tutorial, step 4: the threads served over HTTP.
//
// The app of step 3 behind `tea::serve` (cargo feature `serve`): the Agent Protocol's routes for
// programs and an inbox page at `/inbox` where a person answers pauses in the browser. The
// server listens on a free loopback port; this program then plays the client and makes two
// requests — one that runs a ticket until it pauses, one that answers the pause. Run it with
//
//     cargo run -p tea-tutorial --bin step4_serve

use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use tea::prelude::*;

// `serde(default)`: a run's `input` names only the fields it sets.
#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
struct Ticket {
    question: String,
    urgent: bool,
    reply: String,
    ask: String,
    approved: bool,
    #[reducer(append)]
    log: Vec<String>,
}

fn triage(ticket: &Ticket) -> TicketUpdate {
    let urgent = ticket.question.contains("refund");
    Ticket::update().urgent(urgent).log(vec![format!("triage: urgent = {urgent}")])
}

fn draft(ticket: &Ticket) -> TicketUpdate {
    let reply = format!("Thanks for asking about {}. Here is what we can do …", ticket.question);
    Ticket::update().ask(format!("Send this reply? {reply}")).reply(reply).log(vec!["draft: wrote a reply".into()])
}

fn escalate(ticket: &Ticket) -> TicketUpdate {
    Ticket::update()
        .reply(format!("A person from our team will call you about {}.", ticket.question))
        .log(vec!["escalate: handed to a person".into()])
}

fn send(_: &Ticket) -> TicketUpdate {
    Ticket::update().log(vec!["send: reply sent".into()])
}

fn discard(_: &Ticket) -> TicketUpdate {
    Ticket::update().log(vec!["discard: reply dropped".into()])
}

fn is_urgent(ticket: &Ticket) -> bool {
    ticket.urgent
}

fn approved(ticket: &Ticket) -> bool {
    ticket.approved
}

graph! {
    /// Triages a question, drafts a reply and sends it once a person approves it.
    Support for Ticket {
        start -> triage;
        triage -> escalate if is_urgent;
        triage -> draft;
        draft -> review;
        review -> send if approved;
        review -> discard;
        send -> end;
        discard -> end;
        escalate -> end;
        interrupt review(ask => approved);
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("tea-tutorial-step4-{}", std::process::id()));
    let app = Support::builder().checkpointer(SledStore::open(&dir)?).build();
    // The router (an axum `Router`): the protocol's routes and the inbox, with the graph drawn
    // on each thread's page. Open to loopback clients without a token.
    let router = tea::serve::Serve::new().app_drawn(app, Support::MERMAID).router();

    let runtime = tokio::runtime::Runtime::new()?;
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let address = listener.local_addr()?;
    // A service of its own would block here instead, until Ctrl-C or SIGTERM:
    //     runtime.block_on(tea::serve::serve(listener, router, tea::serve::shutdown_signal()))?;
    runtime.spawn(tea::serve::serve(listener, router, std::future::pending::<()>()));
    println!("serving on http://{address}; the inbox is http://{address}/inbox");

    // Request 1: a run on a new thread, waited for until it ends or pauses.
    let input = json!({ "input": { "question": "opening hours" }, "on_completion": "keep" });
    let (status, paused) = post(address, "/runs/wait", &input)?;
    let thread = paused["run"]["thread_id"].as_str().ok_or("the run names its thread")?.to_owned();
    println!(
        "POST /runs/wait: {status}, run {}, thread {thread}",
        paused["run"]["status"].as_str().unwrap_or_default()
    );
    println!("  the reviewer is asked: {}", paused["interrupts"][0]["value"].as_str().unwrap_or_default());

    // Request 2: the answer. The server keeps the pause's `Resume` token in the thread's record,
    // so the client needs only the thread's id.
    let answer = json!({ "command": { "resume": true } });
    let (status, done) = post(address, &format!("/threads/{thread}/runs/wait"), &answer)?;
    println!("POST /threads/{thread}/runs/wait: {status}, run {}", done["run"]["status"].as_str().unwrap_or_default());
    let log: Vec<&str> = done["values"]["log"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    println!("  done: {}", log.join(", "));

    drop(runtime); // stops the server and closes the database
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

/// A POST with a JSON body over a fresh connection: the response's status and JSON body. (Any
/// HTTP client does; this one needs nothing but std.)
fn post(address: SocketAddr, path: &str, body: &Value) -> Result<(u16, Value), Box<dyn std::error::Error>> {
    let mut stream = TcpStream::connect(address)?;
    let body = body.to_string();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response.split_once("\r\n\r\n").ok_or("an HTTP response")?;
    let status = head.split(' ').nth(1).ok_or("an HTTP status")?.parse()?;
    Ok((status, serde_json::from_str(body)?))
}
