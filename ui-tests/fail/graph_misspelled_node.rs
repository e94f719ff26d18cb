use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Library {
    title: String,
}

fn search(_: &Library) {}
fn book(_: &Library) {}

// `bok` is `book` misspelled: one error on it, with the name it most likely means — not
// "`book` is unreachable" and "`bok` has no outgoing edge", and no error where `main` uses the
// graph.
graph! {
    Flow for Library {
        start -> search;
        search -> bok;
        book -> end;
    }
}

fn main() {
    let out = Flow::builder().build().invoke(Library::default()).unwrap();
    println!("{} {} {}", out.title, Flow::MERMAID, FlowNode::Book);
}
