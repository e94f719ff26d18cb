//! Layer 0, the vocabulary: names and ids, errors, the state traits and reducers, chat
//! messages, the options every layer reads, clocks, and tracing helpers. Imports nothing else of the crate.

pub(crate) mod clock;
pub(crate) mod error;
pub(crate) mod messages;
pub(crate) mod name;
pub(crate) mod options;
pub(crate) mod policy;
pub mod reducers;
pub(crate) mod state;
pub(crate) mod trace;
