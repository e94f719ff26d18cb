// A node only a child graph routes to (`Command::parent`) must be declared on the subgraph node
// (`parent -> …`), or it is unreachable; the declaration names nodes, each once.
use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Doc {
    text: String,
}

fn sort(_: &Doc) -> Command<SorterNode> {
    Command::parent(WardNode::Quarantine).into()
}
fn tidy(_: &Doc) {}
fn quarantine(_: &Doc) {}
fn close(_: &Doc) {}

graph! {
    Sorter for Doc {
        start -> sort;
        sort -> tidy | end;
        tidy -> end;
    }
}

graph! {
    Ward for Doc {
        start -> sorter;
        sorter -> close;
        quarantine -> close;
        close -> end;
        subgraph sorter = Sorter;
    }
}

graph! {
    Twice for Doc {
        start -> sorter;
        sorter -> close;
        quarantine -> close;
        close -> end;
        subgraph sorter = Sorter, parent -> quarantine | quarantine | end;
    }
}

graph! {
    Misspelled for Doc {
        start -> sorter;
        sorter -> close;
        close -> end;
        subgraph sorter = Sorter, parent => close;
    }
}

fn main() {}
