#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

/// The `graph!` language: the guide's chapter *Graphs* follows.
#[doc(inline)]
#[cfg_attr(not(doctest), doc = include_str!("../docs/src/graphs.md"))]
pub use tea_macros::graph;
/// The `#[derive(GraphState)]` reference: the guide's chapter *State* follows.
#[doc(inline)]
#[cfg_attr(not(doctest), doc = include_str!("../docs/src/state.md"))]
pub use tea_macros::GraphState;
pub use tea_runtime::*;

/// Agents written as YAML files, run on this engine (cargo feature `yaml`): see the guide's
/// chapter "The YAML language" (`docs/src/yaml.md`).
#[cfg(feature = "yaml")]
#[doc(inline)]
pub use tea_yaml as yaml;

/// Agents as an HTTP service (cargo feature `serve`): the Agent Protocol's routes and an inbox
/// page for pauses; see the guide's chapter "Serving agents over HTTP" (`docs/src/serving.md`).
#[cfg(feature = "serve")]
#[doc(inline)]
pub use tea_serve as serve;

/// `use tea::prelude::*;` brings in what a graph author writes every day.
pub mod prelude {
    #[cfg(feature = "postgres")]
    pub use crate::PostgresStore;
    #[cfg(feature = "sled")]
    pub use crate::SledStore;
    pub use crate::{
        graph, App, Call, Checkpointer, Command, Ctx, DirStore, Durability, Error, Event, Goto, GraphState, Hitl,
        Interrupt, MemoryStore, NodeName, Outcome, Pause, Resume, Snapshot, StateUpdate, ThreadId,
    };
}
