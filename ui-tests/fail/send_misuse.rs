// A node that sends (`parallel plan => worker* -> join;`) returns a `Command` of its graph, and
// only to its own graph's nodes; the statement needs the `*`; a pause after it would lose its
// sends.
use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Job {
    item: String,
    #[reducer(append)]
    done: Vec<String>,
}

fn plan(_: &Job) -> JobUpdate {
    Job::update()
}
fn worker(_: &Job) {}
fn join(_: &Job) {}

graph! {
    PlainUpdate for Job {
        start -> plan;
        parallel plan => worker* -> join;
        join -> end;
    }
}

fn send_elsewhere(_: &Job) -> Command<PlainUpdateNode> {
    Command::send([tea::SendTo::new(PlainUpdateNode::Nowhere, Job::update())])
}

graph! {
    NoStar for Job {
        start -> plan;
        parallel plan => worker -> join;
        join -> end;
    }
}

fn plan2(_: &Job) -> Command<PausedNode> {
    Command::send([])
}

graph! {
    Paused for Job {
        start -> plan2;
        parallel plan2 => worker* -> join;
        join -> end;
        interrupt_after plan2;
    }
}

fn main() {}
