//! The languages a node's code and its templates are written in, each compiled or checked at
//! load and run on a state:
//!
//! - `lua.rs` — `run:` blocks in Lua 5.4, sandboxed, one VM per thread;
//! - `template.rs` — minijinja templates and conditions (`{{ … }}`, `when`, `goto`'s `if`);
//! - `python.rs` — `run:` blocks in Python, embedded CPython (feature `python`);
//! - `prolog/` (`mod.rs` with `prolog.pl`, its support predicates) — `run:` blocks in Prolog and
//!   `prolog.query`, Scryer Prolog (feature `prolog`);
//! - `scope.rs` — what a node's run brings the languages besides the state (its context and
//!   the writer of its `emit(…)` calls).

pub(crate) mod lua;
pub(crate) mod prolog;
pub(crate) mod python;
pub(crate) mod scope;
pub(crate) mod template;
