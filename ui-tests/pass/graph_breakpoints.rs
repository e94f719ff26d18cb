use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Ticket {
    #[reducer(append)]
    pub log: Vec<String>,
    pub approved: bool,
}

fn triage(_: &Ticket) -> TicketUpdate {
    Ticket::update().log(vec!["triage".into()])
}
fn approve(s: &Ticket) -> TicketUpdate {
    Ticket::update().log(vec![format!("approve {}", s.approved)])
}

graph! {
    pub Approval for Ticket {
        start -> triage;
        triage -> approve;
        approve -> end;
        interrupt_before approve;
    }
}

fn main() -> Result<(), tea::Error> {
    let app: App<Approval, MemoryStore> = Approval::builder().checkpointer(MemoryStore::new()).build();
    let outcome: Outcome<Ticket> = app.invoke(Ticket::default())?;
    let Outcome::Interrupted { state, resume } = outcome else { panic!("expected a pause") };
    assert_eq!(state.log, ["triage"]);
    assert_eq!(*resume.node(), "approve");

    let token: String = resume.to_string();
    let resume: Resume<Ticket> = token.parse()?;
    let done = app.resume(resume.update(Ticket::update().approved(true)))?;
    let state = done.done().expect("the run finishes");
    assert_eq!(state.log, ["triage", "approve true"]);

    // Drawings mark breakpoints in lines of their own, after the edges.
    assert!(Approval::MERMAID.ends_with("    approve --> __end__\n    classDef interrupt_before stroke-width:4px\n    class approve interrupt_before\n"), "{}", Approval::MERMAID);
    assert!(Approval::DOT.contains("    \"approve\" [label=\"approve\"];\n"), "{}", Approval::DOT);
    assert!(Approval::DOT.ends_with("    \"approve\" [xlabel=\"interrupt_before\", penwidth=3];\n}\n"), "{}", Approval::DOT);
    Ok(())
}
