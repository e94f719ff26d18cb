//! Layer 5, the machine: the run state machine. It decides what runs next, applies what nodes
//! produced (declared-order merges, conflicts), routes, plans fan-outs and sends, validates
//! decoded checkpoints, and says which checkpoint to write; what can wait (running a node,
//! the store, the branches) it asks of a [`Driver`](driver::Driver), whose trait it defines.

pub(crate) mod driver;
pub(crate) mod fork;
pub(crate) mod journal;
pub(crate) mod line;
pub(crate) mod policy;
pub(crate) mod run;
pub(crate) mod send;
pub(crate) mod step;
#[cfg(test)]
mod tests;
pub(crate) mod validate;
