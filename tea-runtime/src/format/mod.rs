//! Layer 1, the formats: what is written down and read back — the checkpoint envelope and its
//! payload (positions, branch progress, branch states, parent jumps, leases), resume tokens,
//! and the memo a paused subgraph node keeps. Data and encode/decode, no behaviour.

pub(crate) mod checkpoint;
pub(crate) mod delta;
pub(crate) mod interrupt;
pub(crate) mod memo;
pub(crate) mod token;
