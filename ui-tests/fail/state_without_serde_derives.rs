//! Forgetting the serde derives on a state is one error, on its name: not one at the impl,
//! at every `graph!` over it and at every `Chat::update()`.

use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default)]
struct Chat {
    #[reducer(append)]
    messages: Vec<String>,
}

fn greet(_: &Chat) -> ChatUpdate {
    Chat::update().messages(vec!["hi".into()])
}

fn again(_: &Chat) -> ChatUpdate {
    Chat::update().messages(vec!["again".into()])
}

graph! {
    Hello for Chat {
        start -> greet;
        greet -> again;
        again -> end;
    }
}

fn main() -> Result<(), tea::Error> {
    let out = Hello::builder().build().invoke(Chat::default())?;
    println!("{out:?}");
    Ok(())
}
