//! The quick start: a support desk that drafts a reply, pauses for a human to approve it, and
//! sends or discards it when resumed.
//!
//! ```text
//! cargo run --example quickstart
//! ```
//!
//! The pause hands out a `Resume` token: a short string a web handler can return to a client and
//! take back in a later request, even in another process (with `SledStore`).

use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Ticket {
    question: String,
    draft: String,
    approved: bool,
    #[reducer(append)]
    log: Vec<String>,
}

fn draft(ticket: &Ticket) -> TicketUpdate {
    Ticket::update()
        .draft(format!("Thanks for asking about {}. Here is what we can do …", ticket.question))
        .log(vec!["drafted a reply".into()])
}

fn send(ticket: &Ticket) -> TicketUpdate {
    Ticket::update().log(vec![format!("sent: {:?}", ticket.draft)])
}

fn discard(_: &Ticket) -> TicketUpdate {
    Ticket::update().log(vec!["discarded the draft".into()])
}

fn approved(ticket: &Ticket) -> bool {
    ticket.approved
}

graph! {
    /// Drafts a reply, waits for a human, then sends it or discards it.
    Support for Ticket {
        start -> draft;
        draft -> send if approved;
        draft -> discard;
        send -> end;
        discard -> end;
        interrupt_after draft;
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A graph that can pause does not compile without a checkpointer.
    let app = Support::builder().checkpointer(MemoryStore::new()).build();

    // First request: run until the pause.
    let outcome = app.invoke(Ticket { question: "refunds".into(), ..Ticket::default() })?;
    let (state, resume) = outcome.interrupted().ok_or("`Support` pauses after `draft`")?;
    println!("paused after `{}` on thread {}", resume.node(), resume.thread());
    println!("draft for review: {}", state.draft);
    let token = resume.to_string();
    println!("resume token ({} chars): {token}", token.len());

    // A later request: the reviewer approves; the token comes back as a string.
    let resume: Resume<Ticket> = token.parse()?;
    let outcome = app.resume(resume.update(Ticket::update().approved(true)))?;
    let ticket = outcome.done().ok_or("`Support` finishes after `send`")?;
    println!("done:");
    for line in &ticket.log {
        println!("  - {line}");
    }

    // The same token cannot be used twice.
    let again: Resume<Ticket> = token.parse()?;
    match app.resume(again) {
        Err(Error::StaleResume { thread }) => println!("a second resume of the token is refused (thread {thread})"),
        other => println!("unexpected: {other:?}"),
    }
    Ok(())
}
