// Tutorial, step 3: threads kept on disk, so a pause outlives the process that took it.
//
// The graph of step 2 on a `SledStore` (an embedded database in a directory) instead of a
// `MemoryStore`. One process runs a ticket until it pauses and prints the token; another
// process — a later run of this same program — answers it. Run both halves yourself:
//
//     cargo run -p tea-tutorial --bin step3_on_disk -- ask ./tickets.db
//     cargo run -p tea-tutorial --bin step3_on_disk -- answer ./tickets.db TOKEN
//
// or, with no arguments, the program does both: it asks, then runs itself again to answer.

use std::path::Path;
use std::process::Command;
use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
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

/// The app on the sled database in `dir` (created if missing). A sled database is open in one
/// process at a time: it is closed when the app is dropped.
fn open(dir: &Path) -> Result<App<Support, SledStore>, tea::Error> {
    Ok(Support::builder().checkpointer(SledStore::open(dir)?).build())
}

/// Runs a new ticket until it pauses at `review`; returns the pause's token.
fn ask(dir: &Path) -> Result<String, Box<dyn std::error::Error>> {
    let app = open(dir)?;
    let outcome = app.invoke(Ticket { question: "opening hours".into(), ..Ticket::default() })?;
    let (_, resume) = outcome.interrupted().ok_or("the run pauses at `review`")?;
    println!("process {}: thread {} paused at `{}`", std::process::id(), resume.thread(), resume.node());
    Ok(resume.to_string())
}

/// Answers the pause `token` stands for, from the checkpoint on disk.
fn answer(dir: &Path, token: &str) -> Result<(), Box<dyn std::error::Error>> {
    let app = open(dir)?;
    let resume: Resume<Ticket> = token.parse()?;
    // A token holds ids, not the state: what the reviewer is asked is read from the store.
    let paused = app.state(resume.thread())?.ok_or("the token's thread is not in this store")?;
    if let Some(pause) = paused.interrupts.first() {
        println!("process {}: the reviewer is asked: {}", std::process::id(), pause.text());
    }
    // A token that was used already is refused here with `Error::StaleResume`.
    let ticket = app.resume(resume.answer(true))?.done().ok_or("an approved reply is sent")?;
    println!("process {}: done: {}", std::process::id(), ticket.log.join(", "));
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [command, dir] if command == "ask" => {
            let token = ask(Path::new(dir))?;
            println!("token: {token}");
            Ok(())
        }
        [command, dir, token] if command == "answer" => answer(Path::new(dir), token),
        [] => {
            let dir = std::env::temp_dir().join(format!("tea-tutorial-step3-{}", std::process::id()));
            let token = ask(&dir)?; // the app is dropped: the database is closed
                                    // Another process answers: this program again, given the directory and the token.
            let status = Command::new(std::env::current_exe()?).arg("answer").arg(&dir).arg(&token).status()?;
            std::fs::remove_dir_all(&dir)?;
            if !status.success() {
                return Err(format!("the answering process failed: {status}").into());
            }
            Ok(())
        }
        _ => Err("usage: step3_on_disk [ask DIR | answer DIR TOKEN]".into()),
    }
}
