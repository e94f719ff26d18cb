use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Review {
    draft: String,
    approved: bool,
    #[reducer(append)]
    log: Vec<String>,
    #[reducer(sum)]
    revisions: u32,
}

fn write(s: &Review) -> ReviewUpdate {
    Review::update()
        .draft(format!("draft #{}", s.revisions + 1))
        .revisions(1)
        .log(vec!["write".into()])
}

fn review(_: &Review) -> ReviewUpdate {
    Review::update().log(vec!["review".into()])
}

fn publish(s: &Review) -> ReviewUpdate {
    Review::update().log(vec![format!("publish {}", s.draft)])
}

fn approved(s: &Review) -> bool {
    s.approved
}

graph! {
    /// Drafts, waits for a human reviewer, publishes.
    pub ReviewFlow for Review {
        start -> write;
        write -> review;
        review -> publish if approved;   // guarded edges are tried in order
        review -> write;                 // the unguarded fallback comes last
        publish -> end;
        interrupt_before review;         // pause for a human before `review` runs
    }
}

fn main() -> Result<(), tea::Error> {
    let app = ReviewFlow::builder().checkpointer(MemoryStore::new()).build();

    // Request 1: run until the pause; hand the token to the client.
    let outcome = app.invoke(Review::default())?;
    let (state, resume) = outcome.interrupted().expect("the flow pauses before review");
    assert_eq!(state.draft, "draft #1");
    let token: String = resume.to_string();

    // Request 2: the reviewer approves; the token comes back as a string.
    let resume: Resume<Review> = token.parse()?;
    let done = app.resume(resume.update(Review::update().approved(true)))?;
    let review = done.done().expect("approved: the flow publishes and ends");
    assert_eq!(review.log, ["write", "review", "publish draft #1"]);

    // A token is single-use: the thread has moved on.
    assert!(matches!(app.resume(token.parse()?), Err(Error::StaleResume { .. })));
    println!("{:?}", review.log);
    Ok(())
}
