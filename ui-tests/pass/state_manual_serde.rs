//! A state whose serde impls are written by hand compiles: in the same file the derive sees
//! them; in another file, `#[graph_state(manual_serde)]` says so.

use tea::prelude::*;

#[path = "support/manual_serde_impls.rs"]
mod impls;

#[derive(GraphState, Clone, Debug, Default)]
#[graph_state(manual_serde)]
pub struct Manual {
    #[reducer(sum)]
    count: u32,
}

#[derive(GraphState, Clone, Debug, Default, serde::Deserialize)]
pub struct SameFile {
    count: u32,
}

impl serde::Serialize for SameFile {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.count.serialize(serializer)
    }
}

fn add(_: &Manual) -> ManualUpdate {
    Manual::update().count(2)
}

fn set(_: &SameFile) -> SameFileUpdate {
    SameFile::update().count(3)
}

graph! {
    Adds for Manual {
        start -> add;
        add -> end;
    }
}

graph! {
    Sets for SameFile {
        start -> set;
        set -> end;
    }
}

fn main() {
    let out = Adds::builder().build().invoke(Manual::default()).unwrap();
    assert_eq!(out.count, 2);
    let out = Sets::builder().build().invoke(SameFile::default()).unwrap();
    assert_eq!(out.count, 3);
}
