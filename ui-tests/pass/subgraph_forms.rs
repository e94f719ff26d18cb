// Both subgraph forms, a child from another module, and a parent that builds without a
// checkpointer because its child cannot pause.
use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Doc {
    #[reducer(append)]
    log: Vec<String>,
}

mod team {
    use tea::prelude::*;

    #[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
    pub struct Notes {
        pub text: String,
    }

    fn note(_: &Notes) -> NotesUpdate {
        Notes::update().text("noted".into())
    }

    graph! {
        pub Team for Notes {
            start -> note;
            note -> end;
        }
    }
}

fn add(_: &Doc) -> DocUpdate {
    Doc::update().log(vec!["add".into()])
}

graph! {
    Adder for Doc {
        start -> add;
        add -> end;
    }
}

fn to_notes(_: &Doc) -> team::Notes {
    team::Notes::default()
}

fn from_notes(_: &Doc, notes: team::Notes) -> DocUpdate {
    Doc::update().log(vec![notes.text])
}

graph! {
    Parent for Doc {
        start -> same;
        same -> mapped;
        mapped -> end;
        subgraph same = Adder;
        subgraph mapped = team::Team(to_notes => from_notes);
    }
}

fn main() {
    let out = Parent::builder().build().invoke(Doc::default()).unwrap();
    assert_eq!(out.log, ["add", "noted"]);
}
