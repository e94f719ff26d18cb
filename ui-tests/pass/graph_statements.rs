// Every statement that runs without pausing: edges, guards (plain, negated, by path), a router
// listing `end`, and `parallel` with a chained branch and a nested fan-out.
use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
    reject: bool,
    skip_research: bool,
    #[reducer(append)]
    log: Vec<String>,
    #[reducer(sum)]
    revisions: u32,
}

fn note(what: &str) -> ReviewUpdate {
    Review::update().log(vec![what.to_owned()])
}

mod guards {
    pub fn approved(s: &super::Review) -> bool {
        s.approved
    }
}

fn too_long(s: &Review) -> bool {
    s.revisions >= 5
}

fn write(s: &Review) -> ReviewUpdate {
    note("write").draft(format!("{}+", s.draft)).revisions(1)
}
fn review(s: &Review) -> ReviewUpdate {
    note("review").approved(s.revisions >= 2 && !s.reject)
}
fn triage(s: &Review) -> Command<FlowNode> {
    if s.skip_research {
        Command::end()
    } else {
        Command::goto(FlowNode::Research).update(note("triage"))
    }
}
fn research(_: &Review) -> ReviewUpdate {
    note("research")
}
fn check_facts(_: &Review) -> ReviewUpdate {
    note("check_facts")
}
fn cite(_: &Review) -> ReviewUpdate {
    note("cite")
}
fn check_style(_: &Review) -> ReviewUpdate {
    note("check_style")
}
fn translate(_: &Review) -> ReviewUpdate {
    note("translate")
}
fn to_french(_: &Review) -> ReviewUpdate {
    note("to_french")
}
fn to_german(_: &Review) -> ReviewUpdate {
    note("to_german")
}
fn translated(_: &Review) -> ReviewUpdate {
    note("translated")
}
fn merge(_: &Review) -> ReviewUpdate {
    note("merge")
}

graph! {
    /// Writes until approved, then researches in parallel.
    Flow for Review {
        start -> write;
        write -> review;
        review -> triage if guards::approved;
        review -> write if !too_long;
        review -> end;
        triage -> research | end;
        parallel research => [check_facts, check_style, translate] -> merge;
        check_facts -> cite;
        cite -> merge;
        parallel translate => [to_french, to_german] -> translated;
        translated -> merge;
        merge -> end;
    }
}

fn main() {
    let app = Flow::builder().build();

    let out = app.invoke(Review::default()).unwrap();
    assert_eq!(out.draft, "++");
    assert_eq!(out.revisions, 2);
    assert_eq!(
        out.log,
        [
            "write",
            "review",
            "write",
            "review",
            "triage",
            "research",
            "check_facts",
            "cite",
            "check_style",
            "translate",
            "to_french",
            "to_german",
            "translated",
            "merge",
        ]
    );

    let out = app.invoke(Review { skip_research: true, ..Review::default() }).unwrap();
    assert_eq!(out.log, ["write", "review", "write", "review"], "the router ended the run");

    // Never approved: `!too_long` sends it back to `write` until the unguarded fallback applies.
    let out = app.invoke(Review { reject: true, ..Review::default() }).unwrap();
    assert_eq!(out.revisions, 5);
    assert_eq!(out.log.len(), 10);
    assert_eq!(out.log.last().map(String::as_str), Some("review"));

    assert!(Flow::MERMAID.contains("review -->|\"guards::approved\"| triage"), "{}", Flow::MERMAID);
    assert!(Flow::MERMAID.contains("review -->|\"!too_long\"| write"), "{}", Flow::MERMAID);
    assert!(Flow::MERMAID.contains("triage -.-> __end__"), "{}", Flow::MERMAID);
    assert!(Flow::MERMAID.contains("translate ==> to_german"), "{}", Flow::MERMAID);
    assert_eq!(FlowNode::ALL.len(), 12);
}
