// Tutorial, step 2: a human approves each reply before it is sent.
//
// The graph of step 1 gains an interrupt node, `review`: the run pauses there and hands out a
// `Resume` token; a later call answers the pause with the token and the run goes on. Run it with
//
//     cargo run -p tea-tutorial --bin step2_approval

use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Ticket {
    question: String,
    urgent: bool,
    reply: String,
    // What the reviewer is asked (the pause's payload) and what they answer.
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
        // `review` has no function: it pauses with `ask` as its question and writes the
        // answer into `approved`.
        interrupt review(ask => approved);
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A graph that can pause does not compile without a checkpointer: the pause is kept there.
    let app = Support::builder().checkpointer(MemoryStore::new()).build();

    // First call: the run stops at `review`. `invoke` now returns an `Outcome`.
    let outcome = app.invoke(Ticket { question: "opening hours".into(), ..Ticket::default() })?;
    let (ticket, resume) = outcome.interrupted().ok_or("the run pauses at `review`")?;
    println!("paused at `{}` after: {}", resume.node(), ticket.log.join(", "));
    println!("the reviewer is asked: {}", resume.interrupts()[0].text());

    // The token is a short string: hand it to whoever answers (a web page, a chat message …).
    let token = resume.to_string();
    println!("resume token: {} characters", token.len());

    // Later, perhaps in another request: the answer comes back with the token.
    let resume: Resume<Ticket> = token.parse()?;
    let ticket = app.resume(resume.answer(true))?.done().ok_or("an approved reply is sent")?;
    println!("done: {}", ticket.log.join(", "));

    // A token answers its pause once: the thread has moved on.
    match app.resume(token.parse::<Resume<Ticket>>()?.answer(true)) {
        Err(Error::StaleResume { .. }) => println!("the same token again: refused, the pause was answered"),
        other => return Err(format!("a spent token should be refused, got {other:?}").into()),
    }
    Ok(())
}
