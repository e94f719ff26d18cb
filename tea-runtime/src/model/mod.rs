//! Layer 4, the model: what a graph is to the engine — the [`Graph`](graph::Graph) trait, node
//! forms, `Command`/`SendTo`/`Ctx`, `Hitl`, events and outcomes — and running one node
//! (`produce`). Nothing here routes, applies or writes.

pub(crate) mod draw;
pub(crate) mod event;
#[cfg(test)]
pub(crate) mod fixture;
pub(crate) mod graph;
pub(crate) mod hitl;
pub(crate) mod id;
pub(crate) mod node;
pub(crate) mod outcome;
pub(crate) mod produce;
pub(crate) mod scope;
pub(crate) mod send;
