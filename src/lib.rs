#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub use tea_macros::{graph, GraphState};
pub use tea_runtime::*;

/// `use tea::prelude::*;` brings in what a graph author writes every day.
pub mod prelude {
    pub use crate::{graph, App, Command, Ctx, Error, Event, Goto, GraphState, NodeName, StateUpdate, ThreadId};
}
