//! A terminal questionnaire: the graph pauses at each question, the program reads the answer
//! from standard input and resumes the thread with it.
//!
//! ```text
//! cargo run --example interview
//! printf 'Ada\nblue\n' | cargo run --example interview
//! ```

use std::io::{self, BufRead, Write};
use tea::prelude::*;

const QUESTIONS: [&str; 2] = ["What is your name?", "What is your favourite colour?"];

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Interview {
    question: String,
    #[reducer(append)]
    answers: Vec<String>,
    summary: String,
}

fn next_question(interview: &Interview) -> InterviewUpdate {
    let index = interview.answers.len().min(QUESTIONS.len() - 1);
    Interview::update().question(QUESTIONS[index].to_owned())
}

fn more_questions(interview: &Interview) -> bool {
    interview.answers.len() < QUESTIONS.len()
}

fn summarize(interview: &Interview) -> InterviewUpdate {
    let (name, colour) = (&interview.answers[0], &interview.answers[1]);
    Interview::update().summary(format!("Thank you, {name}. {colour} is a fine colour."))
}

graph! {
    /// Asks each question in turn and sums up the answers.
    Questionnaire for Interview {
        start -> next_question;
        next_question -> listen;
        listen -> next_question if more_questions;
        listen -> summarize;
        summarize -> end;
        interrupt listen(question => answers);
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let app = Questionnaire::builder().checkpointer(MemoryStore::new()).build();
    let stdin = io::stdin();
    let mut lines = stdin.lock().lines();
    let mut outcome = app.invoke(Interview::default())?;
    loop {
        match outcome {
            Outcome::Done(interview) => {
                println!("{}", interview.summary);
                return Ok(());
            }
            Outcome::Interrupted { resume, .. } => {
                let question = resume.interrupts()[0].value().as_str().unwrap_or("?").to_owned();
                print!("{question} ");
                io::stdout().flush()?;
                let Some(line) = lines.next() else {
                    println!();
                    return Err(format!("no answer to {question:?}: standard input ended").into());
                };
                let answer = line?.trim().to_owned();
                if !io::IsTerminal::is_terminal(&io::stdin()) {
                    println!("{answer}");
                }
                outcome = app.resume(resume.answer(answer))?;
            }
        }
    }
}
