// An interruptible graph can pause, so it does not build without a checkpointer.
use tea::prelude::*;
use tea::{Hitl, Pause};

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Chat {
    name: String,
}

fn ask(_: &Chat, hitl: &mut Hitl) -> Result<ChatUpdate, Pause> {
    let name: String = hitl.interrupt("name?")?;
    Ok(Chat::update().name(name))
}

graph! {
    Flow for Chat {
        start -> ask;
        ask -> end;
        interruptible ask;
    }
}

fn main() {
    let _app = Flow::builder().build();
}
