//! The compile-time behaviour of tea's `graph!` and `#[derive(GraphState)]`: the cases in `pass/`
//! must compile, the cases in `fail/` must fail with the error in their `.stderr` snapshot. The
//! driver is `tests/ui.rs`; `TRYBUILD=overwrite cargo test -p tea-ui-tests` rewrites the
//! snapshots (read each diff before committing it).
