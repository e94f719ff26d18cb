use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Ticket {
    pub approved: bool,
}

fn triage(_: &Ticket) {}
fn approve(_: &Ticket) -> TicketUpdate {
    Ticket::update().approved(true)
}

graph! {
    pub Approval for Ticket {
        start -> triage;
        triage -> approve;
        approve -> end;
        interrupt_before approve;
    }
}

fn main() {
    let _app = Approval::builder().build();
}
