//! A supervisor with two sub-agent graphs: `SendTo` maps a researcher sub-agent over a list of
//! questions (each run with its own question, in parallel), then a writer sub-agent drafts the
//! report and pauses for a human to approve it. A researcher that finds a question ambiguous
//! pauses inside its own graph to ask the human too.
//!
//! ```text
//! cargo run --example research_team
//! ```
//!
//! The human's answers are given in code here; in a service they arrive in later requests with
//! the token (see `examples/approval-server`).

use serde::{Deserialize, Serialize};
use tea::prelude::*;

// ---------------------------------------------------------------------------------------------
// The researcher sub-agent: its own state, one question.

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
pub struct Inquiry {
    question: String,
    #[reducer(append)]
    notes: Vec<String>,
}

fn search(q: &Inquiry) -> InquiryUpdate {
    // A stand-in for a search tool or an LLM call.
    Inquiry::update().notes(vec![format!("sources on \"{}\"", q.question)])
}

/// Asks the human when the question is ambiguous; the answer is how to read it.
fn clarify(q: &Inquiry, hitl: &mut Hitl) -> Result<InquiryUpdate, Pause> {
    if !q.question.contains("which") {
        return Ok(Inquiry::update().notes(vec!["clear as asked".into()]));
    }
    let reading: String = hitl.interrupt(format!("\"{}\" is ambiguous: which reading?", q.question))?;
    Ok(Inquiry::update().notes(vec![format!("read as: {reading}")]))
}

graph! {
    /// One researcher: searches, then makes sure it understood the question.
    pub Researcher for Inquiry {
        start -> search;
        search -> clarify;
        clarify -> end;
        interruptible clarify;
    }
}

// ---------------------------------------------------------------------------------------------
// The supervisor's state, which the writer sub-agent shares.

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
pub struct Report {
    questions: Vec<String>,
    /// The question of one send (each researcher run gets its own).
    question: String,
    #[reducer(append)]
    findings: Vec<String>,
    draft: String,
    verdict: String,
}

fn outline(r: &Report) -> ReportUpdate {
    Report::update().draft(format!("Report on {} questions", r.findings.len()))
}

fn write(r: &Report) -> ReportUpdate {
    Report::update().draft(format!("{}:\n  - {}", r.draft, r.findings.join("\n  - ")))
}

graph! {
    /// The writer: outlines, writes, and waits for a human's verdict (an interrupt node).
    pub Writer for Report {
        start -> outline;
        outline -> write;
        write -> approve;
        approve -> end;
        interrupt approve(draft => verdict);
    }
}

// ---------------------------------------------------------------------------------------------
// The supervisor.

/// One researcher per question, each with its own input.
fn plan(r: &Report) -> Command<SupervisorNode> {
    Command::send(
        r.questions.iter().map(|q| tea::SendTo::new(SupervisorNode::Research, Report::update().question(q.clone()))),
    )
}

fn to_inquiry(r: &Report) -> Inquiry {
    Inquiry { question: r.question.clone(), ..Inquiry::default() }
}

fn from_inquiry(_: &Report, q: Inquiry) -> ReportUpdate {
    Report::update().findings(vec![format!("{}: {}", q.question, q.notes.join("; "))])
}

graph! {
    /// Plans, researches every question at once, writes.
    pub Supervisor for Report {
        start -> plan;
        parallel plan => research* -> write_up;
        write_up -> end;
        subgraph research = Researcher(to_inquiry => from_inquiry);
        subgraph write_up = Writer;
    }
}

fn main() -> Result<(), tea::Error> {
    println!("{}", Supervisor::MERMAID);
    let app = Supervisor::builder().checkpointer(MemoryStore::new()).build();
    let questions = ["why is tea green", "which tea is best", "how hot should the water be"];
    let input = Report { questions: questions.iter().map(|q| (*q).to_owned()).collect(), ..Report::default() };

    let mut outcome = app.run(Call::start(input).on("report-1"))?;
    loop {
        let resume = match outcome {
            Outcome::Done(report) => {
                println!("done: {}\n{}", report.verdict, report.draft);
                return Ok(());
            }
            Outcome::Interrupted { resume, .. } => resume,
        };
        // A pause inside a sub-agent is listed with its path: `research/clarify#0@research#1`
        // is the researcher of send 1 asking; `write_up/approve#0` is the writer's approval.
        let snapshot = app.state(resume.thread())?.expect("the thread is stored");
        for child in &snapshot.subgraphs {
            println!("paused inside {} ({}), child thread {}", child.node, child.graph, child.thread);
        }
        // The token is a string between requests (answers are given to the parsed token).
        let mut token: Resume<Report> = resume.to_string().parse()?;
        for pause in resume.interrupts() {
            println!("{} asks: {}", pause.id(), pause.text());
            let answer = if pause.id().starts_with("research/") { "the best for green tea" } else { "approved" };
            token = token.answer_to(pause.id(), answer);
        }
        outcome = app.resume(token)?;
    }
}
