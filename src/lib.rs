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
        graph, App, Checkpointer, Command, Ctx, DirStore, Durability, Error, Event, Goto, GraphState, Hitl, Interrupt,
        MemoryStore, NodeName, Outcome, Pause, Resume, Snapshot, StateUpdate, ThreadId,
    };
}

/// The guide's chapters (`docs/src`), whose Rust examples run as doctests of this crate.
#[cfg(doctest)]
mod guide {
    #[doc = include_str!("../docs/src/concepts.md")]
    struct Concepts;
    #[doc = include_str!("../docs/src/graphs.md")]
    struct Graphs;
    #[doc = include_str!("../docs/src/state.md")]
    struct State;
    #[doc = include_str!("../docs/src/parallel.md")]
    struct Parallel;
    #[doc = include_str!("../docs/src/async.md")]
    struct Async;
    #[doc = include_str!("../docs/src/pauses.md")]
    struct Pauses;
    #[doc = include_str!("../docs/src/postgres.md")]
    struct Postgres;
    #[doc = include_str!("../docs/src/hitl.md")]
    struct Hitl;
    #[doc = include_str!("../docs/src/subgraphs.md")]
    struct Subgraphs;
    #[doc = include_str!("../docs/src/policies.md")]
    struct Policies;
    #[doc = include_str!("../docs/src/tracing.md")]
    struct Tracing;
    #[doc = include_str!("../docs/src/web.md")]
    struct Web;
    #[doc = include_str!("../docs/src/yaml.md")]
    struct Yaml;
    #[doc = include_str!("../docs/src/yaml-net.md")]
    struct YamlNet;
    #[doc = include_str!("../docs/src/yaml-python.md")]
    struct YamlPython;
    #[doc = include_str!("../docs/src/yaml-prolog.md")]
    struct YamlProlog;
    #[doc = include_str!("../docs/src/permissions.md")]
    struct Permissions;
    #[doc = include_str!("../docs/src/cli.md")]
    struct Cli;
    #[doc = include_str!("../docs/src/errors.md")]
    struct Errors;
    #[doc = include_str!("../docs/src/from-langgraph.md")]
    struct FromLanggraph;
    #[doc = include_str!("../docs/src/from-the-edge-agent.md")]
    struct FromTheEdgeAgent;
    #[doc = include_str!("../docs/src/introduction.md")]
    struct Introduction;
}
