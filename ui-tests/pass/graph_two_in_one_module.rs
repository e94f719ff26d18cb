// Two graphs in one module, sharing node functions; each gets its own node enum.
use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Doc {
    #[reducer(append)]
    log: Vec<String>,
}

fn write(_: &Doc) -> DocUpdate {
    Doc::update().log(vec!["write".into()])
}
fn review(_: &Doc) -> DocUpdate {
    Doc::update().log(vec!["review".into()])
}

graph! {
    Quick for Doc {
        start -> write;
        write -> end;
    }
}

graph! {
    Careful for Doc {
        start -> write;
        write -> review;
        review -> end;
    }
}

fn main() {
    assert_eq!(Quick::builder().build().invoke(Doc::default()).unwrap().log, ["write"]);
    assert_eq!(Careful::builder().build().invoke(Doc::default()).unwrap().log, ["write", "review"]);
    assert_eq!(QuickNode::ALL, [QuickNode::Write]);
    assert_eq!(CarefulNode::ALL, [CarefulNode::Write, CarefulNode::Review]);
}
