//! Layer 6, the drivers: what carries the machine through a run. The thread driver answers on
//! the calling thread (branches on rayon's pool, see `share`); the tokio driver (feature
//! `tokio`) awaits async nodes and the store's async calls on a runtime.

pub(crate) mod share;
pub(crate) mod thread;
#[cfg(feature = "tokio")]
pub(crate) mod tokio;
