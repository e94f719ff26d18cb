//! Layer 7, the API: the typestate `Builder`, `App` (blocking and async), resume and recover,
//! the event stream and snapshots. Issues and verifies tokens; drives runs through `drive`.

pub(crate) mod app;
#[cfg(feature = "tokio")]
pub(crate) mod async_app;
pub(crate) mod call;
pub(crate) mod pauses;
pub(crate) mod resume;
pub(crate) mod retention;
pub(crate) mod snapshot;
pub(crate) mod stream;
pub(crate) mod timetravel;
pub(crate) mod token;
