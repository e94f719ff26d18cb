//! The engine of [tea](https://docs.rs/tea): state traits, reducers, the executor, errors.
//!
//! Users depend on the `tea` facade, which re-exports what users write from here together with
//! the `#[derive(GraphState)]` and `graph!` macros (what only generated code names stays under
//! `tea::__private`); the examples below use it.
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

// The layers, bottom to top: a module imports only from its own layer and the layers below it
// (ARCHITECTURE.md, "The layers of tea-runtime"; `tests/layers.rs` at the workspace root holds
// the code to them and to that table).
//
//   0 vocab     names, ids, errors, state traits, reducers, options, clocks, tracing
//   1 format    the checkpoint envelope and payload, tokens, memos (data + encode/decode)
//   2 store     Checkpointer and its stores (bytes + compare-and-swap)
//   3 tenure    a run's tenure of its thread (store, head, lease), lent to its subgraph nodes
//   4 model     Graph, node forms, Command/Send/Ctx, Hitl, events, outcomes, running a node
//   5 machine   the run state machine, fan-outs, checkpoint validation, the Driver trait
//   6 drive     the thread driver, the branch pool, the tokio driver
//   7 api       Builder, App, resume/recover, streams, snapshots, tokens handed out
//   8 subgraph  running a child graph (an App of its own) as a node
mod api;
mod drive;
mod format;
mod machine;
mod model;
mod store;
mod subgraph;
mod tenure;
mod vocab;

// The stores (layer 2) name the vocabulary by these paths.
use vocab::{error, name};

pub use api::app::{App, Builder, NoCheckpointer};
pub use api::call::Call;
pub use api::retention::{ExpiredThread, KeptBecause, KeptPaused, SweepReport, Sweeper};
pub use api::snapshot::{
    checkpoint_holds_pause, decode_checkpoint, encode_checkpoint, read_foreign_checkpoint, ForeignCheckpoint,
};
pub use api::stream::Stream;
pub use format::checkpoint::BranchState;
pub use format::interrupt::Interrupt;
pub use format::token::Resume;
pub use model::event::Event;
pub use model::graph::{Fork, Graph, PauseFree, SyncGraph};
pub use model::hitl::{Hitl, Pause};
pub use model::node::NodeFuture;
pub use model::node::{
    AsyncInterruptibleFn, AsyncNodeFn, Command, Ctx, Goto, Guard, InterruptibleFn, NodeFn, NodeId, NodeOutput,
    ParentCommand, RouterOutput,
};
pub use model::outcome::{BranchSnapshot, Outcome, Snapshot, SubgraphSnapshot};
pub use model::scope::Writer;
pub use model::send::SendTo;
#[cfg(feature = "sled")]
pub use store::SledStore;
pub use store::{AppendOutcome, CheckpointId, Checkpointer, DirStore, MemoryStore, StoreFuture};
pub use store::{Embedder, Item, Memory, SearchQuery};
pub use store::{Expired, Expiry, Rest, RestMark, RestMarks};
#[cfg(feature = "encryption")]
pub use store::{KeyRing, KeyRingError, Sealed};
#[cfg(feature = "postgres")]
pub use store::{PostgresStore, PostgresStoreBuilder};
pub use vocab::clock::Clock;
pub use vocab::error::{error_chain, BoxError, Error, MemoryProblem, SealFailure};
pub use vocab::messages::{
    add_messages, try_add_messages, AddMessages, Content, ContentPart, ImageUrl, Message, ToolCall, ToolDefinition,
    REMOVE_ALL_MESSAGES,
};
pub use vocab::name::{NodeName, ThreadId};
pub use vocab::options::{
    Durability, RunContext, RunOptions, DEFAULT_GROUP_COMMIT, DEFAULT_LEASE, DEFAULT_MAX_PARALLEL_BRANCHES,
    DEFAULT_RECURSION_LIMIT,
};
pub use vocab::policy::{CachePolicy, CacheScope, NodePolicy, RetryOn, RetryPolicy, StreamModes};
pub use vocab::reducers;
pub use vocab::retention::{parse_duration, DurationError, Retention};
pub use vocab::state::{Field, GraphState, Reducer, StateUpdate, Write};

/// The stores behind cargo features, for the `tea` facade to re-export whenever this crate has
/// them (whichever crate of the build turned the feature on).
#[doc(hidden)]
pub mod __feature_stores {
    #[cfg(feature = "sled")]
    pub use crate::store::SledStore;
    #[cfg(feature = "encryption")]
    pub use crate::store::{KeyRing, KeyRingError, Sealed};
    #[cfg(feature = "postgres")]
    pub use crate::store::{PostgresStore, PostgresStoreBuilder};
}

/// What generated code names: reached as `::tea::__private::…`, never by users.
#[doc(hidden)]
pub mod __private {
    /// Compile-time drawings of graphs with subgraph nodes.
    pub mod draw {
        pub use crate::model::draw::{as_str, build, len, unmark, unmarked_len, Piece, MARK};
    }
    pub use crate::model::hitl::check_field_answer;
    pub use crate::model::node::{
        async_interruptible_takes_ctx, async_node_run_sync, async_takes_ctx, guard, interruptible_takes_ctx,
        ready_step, run_interrupt_node, run_interruptible, run_interruptible_async, run_interruptible_router,
        run_interruptible_router_async, run_node, run_node_async, run_router, run_router_async, takes_ctx, NodeStep,
    };
    pub use crate::subgraph::{
        run_subgraph_mapped, run_subgraph_mapped_async, run_subgraph_shared, run_subgraph_shared_async, subgraph_input,
        subgraph_output,
    };
    pub use crate::vocab::error::BoxError;
    pub use crate::vocab::messages::AddMessages;
    pub use crate::vocab::policy::{CachePolicy, CacheScope, NodePolicy, RetryOn, RetryPolicy};
    pub use crate::vocab::reducers::{Append, CustomReducer, Extremum, Merge, Sum, Union};
    pub use crate::vocab::state::{deserialize_some, fingerprint, has_field, Slot};
    pub use crate::{
        App, AsyncInterruptibleFn, AsyncNodeFn, Builder, Command, Ctx, Field, Fork, Goto, Graph, GraphState, Guard,
        Hitl, InterruptibleFn, NodeFn, NodeFuture, NodeId, NodeName, NodeOutput, PauseFree, Reducer, RouterOutput,
        StateUpdate, SyncGraph, Write,
    };
    /// `Option`, `Result` and friends, by absolute path.
    pub use ::core;
    /// `String`, by absolute path (generated code names nothing from `std` directly).
    pub use ::std::string::String;
    pub use serde;
    pub use serde_json;
}
