//! The root's `tests/alloc.rs` with the engine's spans compiled in (feature `tracing`, no
//! subscriber installed): the store-less engine still allocates nothing per step.
#![cfg(feature = "tracing")]

#[path = "../../alloc.rs"]
mod alloc;
