//! The engine of [tea](https://docs.rs/tea): state traits, reducers, the executor, errors.
//!
//! Users depend on the `tea` facade, which re-exports everything here together with the
//! `#[derive(GraphState)]` and `graph!` macros; the examples below use it.
//!
//! The engine is generic over the [`Graph`] trait, which `graph!` implements with generated
//! `match` code and a run-time front end can implement over tables: execution logic lives here,
//! never in generated code.
#![deny(missing_docs, missing_debug_implementations)]

mod app;
mod checkpoint;
mod error;
mod event;
mod exec;
mod graph;
mod hitl;
mod name;
mod node;
mod outcome;
mod parallel;
pub mod reducers;
mod resume;
mod share;
mod state;
mod store;
mod trace;

pub use app::{
    decode_checkpoint, encode_checkpoint, App, Builder, NoCheckpointer, DEFAULT_LEASE, DEFAULT_MAX_PARALLEL_BRANCHES,
    DEFAULT_RECURSION_LIMIT,
};
pub use error::{BoxError, Error};
pub use event::Event;
pub use exec::Stream;
pub use graph::{Fork, Graph, PauseFree};
pub use hitl::{Hitl, Pause};
pub use name::{NodeName, ThreadId};
pub use node::{Command, Ctx, Goto, Guard, InterruptibleFn, NodeFn, NodeId, NodeOutput, RouterOutput};
pub use outcome::{Durability, Outcome, Snapshot};
pub use parallel::BranchState;
pub use resume::{Interrupt, Resume};
pub use state::{Field, GraphState, Reducer, StateUpdate, Write};
#[cfg(feature = "sled")]
pub use store::SledStore;
pub use store::{Append, CheckpointId, Checkpointer, DirStore, MemoryStore};
#[cfg(feature = "postgres")]
pub use store::{PostgresStore, PostgresStoreBuilder};

/// What generated code names: reached as `::tea::__private::…`, never by users.
#[doc(hidden)]
pub mod __private {
    pub use crate::error::BoxError;
    pub use crate::hitl::check_field_answer;
    pub use crate::node::{
        guard, interruptible_takes_ctx, run_interrupt_node, run_interruptible, run_interruptible_router, run_node,
        run_router, takes_ctx, NodeStep,
    };
    pub use crate::reducers::{Append, CustomReducer, Extremum, Merge, Sum, Union};
    pub use crate::state::{deserialize_some, fingerprint, Slot};
    pub use crate::{
        App, Builder, Command, Ctx, Field, Fork, Goto, Graph, GraphState, Hitl, NodeId, NodeName, NodeOutput,
        PauseFree, Reducer, RouterOutput, StateUpdate, Write,
    };
    /// `Option`, `Result` and friends, by absolute path.
    pub use ::core;
    /// `String`, by absolute path (generated code names nothing from `std` directly).
    pub use ::std::string::String;
    pub use serde;
    pub use serde_json;
}
