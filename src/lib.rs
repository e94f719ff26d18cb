#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub use tea_macros::{graph, GraphState};
pub use tea_runtime::*;

/// Agents written as YAML files, run on this engine (cargo feature `yaml`): see the README's
/// "Agents in YAML".
#[cfg(feature = "yaml")]
pub use tea_yaml as yaml;

/// Agents as an HTTP service (cargo feature `serve`): the Agent Protocol's routes and an inbox
/// page for pauses; see the README's "Serving agents".
#[cfg(feature = "serve")]
pub use tea_serve as serve;

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
