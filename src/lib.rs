#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub use tea_macros::{graph, GraphState};
pub use tea_runtime::*;

/// `use tea::prelude::*;` brings in what a graph author writes every day.
pub mod prelude {
    #[cfg(feature = "postgres")]
    pub use crate::PostgresStore;
    #[cfg(feature = "sled")]
    pub use crate::SledStore;
    pub use crate::{
        graph, App, Checkpointer, Command, Ctx, DirStore, Durability, Error, Event, Goto, GraphState, Hitl, Interrupt,
        MemoryStore, NodeName, Outcome, Pause, Resume, Snapshot, StateUpdate, ThreadId,
    };
}
