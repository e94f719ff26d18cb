// An interrupt node reads and writes fields of the state: a misspelled field is an error on it.
use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Chat {
    question: String,
    answer: String,
}

graph! {
    Flow for Chat {
        start -> ask;
        ask -> end;
        interrupt ask(questoin => answr);
    }
}

fn main() {}
