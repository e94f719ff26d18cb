//! Actions (`uses:`): what a node calls, by family. Each family's running is here; its loading
//! (a node's `with:` checked and compiled) is the loader's, in `load/` under the same name,
//! since loading a family's `with:` loads the actions of its steps in turn.
//!
//! - `registry.rs` — [`Action`], the actions an [`Engine`](crate::Engine) registers and the
//!   built-in ones by name, what an action sees of its agent ([`RunningAgent`], [`Composer`]),
//!   and the built-ins of the agent's own (`checkpoint.*`, `file.read`/`write`, `code.execute`);
//! - `names.rs` — the tables of action names: tea's built-ins, the network ones, and The Edge
//!   Agent's that tea does not run;
//! - `memory.rs` — the agent's key-value memory (`memory.*`);
//! - `ratelimit.rs` — `ratelimit.wrap`'s process-wide rate limiters;
//! - `builtins.rs` and `schema_merge.rs` — the small built-ins over the state and the agent's
//!   files (`json.*`, `file.exists`/`delete`/`list`, `schema.merge`);
//! - `fallback.rs` — the actions over Python libraries tea does not embed, as their fallbacks;
//! - `a2a.rs` — agent-to-agent messages, delegation and shared state (`a2a.*`);
//! - `net/` — `llm.call`, `http.*`, `actions.notify` and the LLM providers (feature `net`);
//! - `services/` — hosted services over HTTP (`web.*`, `llamaextract.*`, citations, embeddings
//!   and vectors; feature `net`);
//! - `compose.rs` — actions made of steps (`reason.*`, `reflection.loop`, …);
//! - `extraction.rs` — `validate.extraction` and `retry.loop`;
//! - `planning.rs` — `plan.*`;
//! - `crew.rs` — `agent.*`, several LLM agents on one task.

pub(crate) mod a2a;
pub(crate) mod builtins;
pub(crate) mod compose;
pub(crate) mod crew;
pub(crate) mod extraction;
pub(crate) mod fallback;
mod memory;
mod names;
#[cfg(feature = "net")]
pub(crate) mod net;
pub(crate) mod planning;
mod ratelimit;
mod registry;
pub(crate) mod schema_merge;
#[cfg(feature = "net")]
pub(crate) mod services;

pub(crate) use memory::Memory;
pub(crate) use names::{edge_agent_only, BUILT_IN_NAMES, NET_NAMES};
pub(crate) use ratelimit::limiter_interval;
pub use registry::ActionFn;
pub(crate) use registry::*;
