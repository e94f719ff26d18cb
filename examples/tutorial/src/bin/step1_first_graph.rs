// Tutorial, step 1: your first graph.
//
// A support desk: `triage` reads the customer's question, then either `draft` writes a reply
// or `escalate` hands the ticket to a person. Run it with
//
//     cargo run -p tea-tutorial --bin step1_first_graph

use tea::prelude::*;

// The state every node reads. `GraphState` gives it an update type, `TicketUpdate`, with one
// setter per field; `#[reducer(append)]` makes `log` grow instead of being replaced.
#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Ticket {
    question: String,
    urgent: bool,
    reply: String,
    #[reducer(append)]
    log: Vec<String>,
}

// A node is a plain function from the state to an update of some of its fields.
fn triage(ticket: &Ticket) -> TicketUpdate {
    let urgent = ticket.question.contains("refund");
    Ticket::update().urgent(urgent).log(vec![format!("triage: urgent = {urgent}")])
}

fn draft(ticket: &Ticket) -> TicketUpdate {
    Ticket::update()
        .reply(format!("Thanks for asking about {}. Here is what we can do …", ticket.question))
        .log(vec!["draft: wrote a reply".into()])
}

fn escalate(ticket: &Ticket) -> TicketUpdate {
    Ticket::update()
        .reply(format!("A person from our team will call you about {}.", ticket.question))
        .log(vec!["escalate: handed to a person".into()])
}

// A guard: edges marked `if is_urgent` are taken when it returns true.
fn is_urgent(ticket: &Ticket) -> bool {
    ticket.urgent
}

graph! {
    /// Triages a question, then drafts a reply or escalates it to a person.
    Support for Ticket {
        start -> triage;
        triage -> escalate if is_urgent; // guarded edges are tried in order,
        triage -> draft;                 // the unguarded one last
        draft -> end;
        escalate -> end;
    }
}

fn main() -> Result<(), tea::Error> {
    // This graph cannot pause, so it needs no checkpointer and `invoke` returns the final state.
    let app = Support::builder().build();
    for question in ["opening hours", "a refund"] {
        let ticket = app.invoke(Ticket { question: question.into(), ..Ticket::default() })?;
        println!("{question}: {}", ticket.reply);
        for line in &ticket.log {
            println!("  - {line}");
        }
    }
    Ok(())
}
