// A node declared `interruptible` takes `&mut Hitl`.
use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Chat {
    name: String,
}

fn ask(_: &Chat) -> ChatUpdate {
    Chat::update().name("x".into())
}

graph! {
    Flow for Chat {
        start -> ask;
        ask -> end;
        interruptible ask;
    }
}

fn main() {}
