//! The engine of [tea](https://docs.rs/tea): state traits, reducers, the executor, errors.
//!
//! Users depend on the `tea` facade, which re-exports everything here together with the
//! `#[derive(GraphState)]` and `graph!` macros; the examples below use it.
//!
//! The engine is generic over the [`Graph`] trait, which `graph!` implements with generated
//! `match` code and a run-time front end can implement over tables: execution logic lives here,
//! never in generated code.
//!
//! ```
//! use tea::prelude::*;
//!
//! #[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
//! pub struct Doc {
//!     draft: String,
//!     approved: bool,
//! }
//!
//! fn write(_: &Doc) -> DocUpdate {
//!     Doc::update().draft("v1".into())
//! }
//! fn publish(_: &Doc) -> DocUpdate {
//!     Doc::update()
//! }
//!
//! graph! {
//!     pub Review for Doc {
//!         start -> write;
//!         write -> publish;
//!         publish -> end;
//!         interrupt_before publish;
//!     }
//! }
//!
//! let app = Review::builder().checkpointer(MemoryStore::new()).build();
//! let (state, resume) = app.invoke(Doc::default())?.interrupted().expect("paused before publish");
//! assert_eq!(state.draft, "v1");
//! // The token is a string: hand it to another request, process or machine.
//! let token: Resume<Doc> = resume.to_string().parse()?;
//! let done = app.resume(token.update(Doc::update().approved(true)))?.done().unwrap();
//! assert!(done.approved);
//! # Ok::<(), tea::Error>(())
//! ```
//!
//! # Cargo features
//!
//! | feature | default | enables |
//! |---|---|---|
//! | `sled` | on | `SledStore`, the embedded on-disk checkpoint store (sled 0.34) |
//! | `postgres` | off | `PostgresStore`: checkpoints in PostgreSQL shared by many processes |
//! | `tracing` | off | spans and events (target `tea`) of runs, nodes, fan-outs, checkpoint writes and store calls; without it no tracing code is compiled in |
//!
//! YAML agents (the `tea` facade's feature `yaml`) live in the `tea-yaml` crate, on this engine.
#![deny(missing_docs, missing_debug_implementations)]

mod app;
mod checkpoint;
mod compose;
mod draw;
mod drive;
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
mod send;
mod share;
mod state;
mod store;
#[cfg(feature = "tokio")]
mod tokio_driver;
mod trace;

pub use app::{
    decode_checkpoint, encode_checkpoint, App, Builder, NoCheckpointer, DEFAULT_LEASE, DEFAULT_MAX_PARALLEL_BRANCHES,
    DEFAULT_RECURSION_LIMIT,
};
pub use error::{BoxError, Error};
pub use event::Event;
pub use exec::Stream;
pub use graph::{Fork, Graph, NodeFuture, PauseFree, SyncGraph};
pub use hitl::{Hitl, Pause};
pub use name::{NodeName, ThreadId};
pub use node::{
    AsyncInterruptibleFn, AsyncNodeFn, Command, Ctx, Goto, Guard, InterruptibleFn, NodeFn, NodeId, NodeOutput,
    ParentCommand, RouterOutput,
};
pub use outcome::{Durability, Outcome, Snapshot, SubgraphSnapshot};
pub use parallel::BranchState;
pub use resume::{Interrupt, Resume};
pub use send::Send;
pub use state::{Field, GraphState, Reducer, StateUpdate, Write};
#[cfg(feature = "sled")]
pub use store::SledStore;
pub use store::{Append, CheckpointId, Checkpointer, DirStore, MemoryStore, StoreFuture};
#[cfg(feature = "postgres")]
pub use store::{PostgresStore, PostgresStoreBuilder};

/// What generated code names: reached as `::tea::__private::…`, never by users.
#[doc(hidden)]
pub mod __private {
    /// Compile-time drawings of graphs with subgraph nodes.
    pub mod draw {
        pub use crate::draw::{as_str, build, len, unmark, unmarked_len, Piece, MARK};
    }
    pub use crate::compose::{run_subgraph_mapped, run_subgraph_shared, subgraph_input, subgraph_output};
    pub use crate::error::BoxError;
    pub use crate::hitl::check_field_answer;
    pub use crate::node::{
        async_interruptible_takes_ctx, async_node_run_sync, async_takes_ctx, guard, interruptible_takes_ctx,
        ready_step, run_interrupt_node, run_interruptible, run_interruptible_async, run_interruptible_router,
        run_interruptible_router_async, run_node, run_node_async, run_router, run_router_async, takes_ctx, NodeStep,
    };
    pub use crate::reducers::{Append, CustomReducer, Extremum, Merge, Sum, Union};
    pub use crate::state::{deserialize_some, fingerprint, Slot};
    pub use crate::{
        App, Builder, Command, Ctx, Field, Fork, Goto, Graph, GraphState, Hitl, NodeFuture, NodeId, NodeName,
        NodeOutput, PauseFree, Reducer, RouterOutput, StateUpdate, SyncGraph, Write,
    };
    /// `Option`, `Result` and friends, by absolute path.
    pub use ::core;
    /// `String`, by absolute path (generated code names nothing from `std` directly).
    pub use ::std::string::String;
    pub use serde;
    pub use serde_json;
}
