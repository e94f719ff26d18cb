// A node that takes `&mut Hitl` must be declared `interruptible`.
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
    }
}

fn main() {}
