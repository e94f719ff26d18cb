use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    draft: String,
    approved: bool,
}

// Every problem is reported in one build.
fn write(_: &Review) {}
fn review(_: &Review) {}
fn approved(s: &Review) -> bool {
    s.approved
}
fn fetch_data(_: &Review) {}
#[allow(non_snake_case)]
fn fetchData(_: &Review) {}
fn publish(_: &Review) {}
fn archive(_: Review) {}
fn polish(_: &Review) {}
// `proofread` has no function, and `archive` takes the state by value.

graph! {
    Flow for Review {
        start -> write;
        write -> review;
        review -> publish if approved;
        review -> publish if approved;
        review -> fetch_data;
        fetch_data -> fetchData;
        fetchData -> end;
        publish -> proofread;
        proofread -> end;
        archive -> end;
        polish -> polish;
        interrupt_after reveiw;
    }
}

fn main() {}
