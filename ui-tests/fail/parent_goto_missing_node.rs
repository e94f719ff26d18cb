// `Command::parent` names a node of the parent graph by the parent's node enum: a node the
// parent lacks does not compile, and neither does an update of the child's state.
use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Doc {
    text: String,
}

fn check(_: &Doc) -> Command<ChildNode> {
    Command::parent(ParentNode::Publish).update(Doc::update())
}

fn escalate(_: &Doc) -> Command<ChildNode> {
    Command::parent(ParentNode::Review).update(Other::update())
}

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Other {
    n: u32,
}

graph! {
    Child for Doc {
        start -> check;
        check -> escalate | end;
        escalate -> check | end;
    }
}

fn review(_: &Doc) {}

graph! {
    Parent for Doc {
        start -> child;
        child -> review;
        review -> end;
        subgraph child = Child;
    }
}

fn main() {}
