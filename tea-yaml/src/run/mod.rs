//! The interpreter: how the engine runs a loaded agent ([`YamlGraph`](crate::YamlGraph)
//! implements `tea::Graph` over the graph of `ir/`).
//!
//! - `graph.rs` — `tea::Graph` for [`YamlGraph`](crate::YamlGraph): running a node of each kind
//!   (blocks, actions, loops, child agents, fan-outs), routing, fan-ins, and the agent as the
//!   actions see it;
//! - `template_scope.rs` — what templates and conditions see (`state`, `variables`, `secrets`,
//!   `checkpoint`, `result`), and rendering with it;
//! - `secrets.rs` — secrets kept out of the state and redacted from errors;
//! - `items.rs` — the items of a `type: dynamic_parallel` node (fail-fast, concurrency,
//!   results at the fan-in).

mod graph;
pub(crate) mod items;
pub(crate) mod secrets;
mod template_scope;
