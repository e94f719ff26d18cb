use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

// `fetch_data` and `fetchData` would both be `FlowNode::FetchData`.
fn fetch_data(_: &Review) {}
#[allow(non_snake_case)]
fn fetchData(_: &Review) {}

graph! {
    Flow for Review {
        start -> fetch_data;
        fetch_data -> fetchData;
        fetchData -> end;
    }
}

fn main() {}
