//! `forward!`: the [`Checkpointer`](tea::Checkpointer) methods a test's wrapping store (one that
//! counts, fails or waits on some calls) passes on unchanged to the store it wraps, written once.
//!
//! Shared (via `#[path]`) by the tests of the root package and of tests/integration.

/// Writes, inside an `impl Checkpointer for Wrapper`, each named method as the same call on the
/// wrapped store `self.<field>`:
///
/// ```ignore
/// impl Checkpointer for Counting {
///     fn append(/* … */) -> Result<AppendOutcome, Error> { /* counts, then self.inner.append(…) */ }
///     forward!(inner: head, get, history, range, threads, delete, prune);
/// }
/// ```
///
/// A method not named keeps the trait's default (for `range`, `delete_at` and `append_over`:
/// built on the required methods, so on the wrapper's own).
macro_rules! forward {
    ($inner:tt: $($method:ident),+ $(,)?) => { $( forward!(@ $inner $method); )+ };
    (@ $inner:tt head) => {
        fn head(
            &self,
            graph: &str,
            thread: &::tea::ThreadId,
        ) -> ::core::result::Result<Option<(::tea::CheckpointId, Vec<u8>)>, ::tea::Error> {
            self.$inner.head(graph, thread)
        }
    };
    (@ $inner:tt get) => {
        fn get(
            &self,
            graph: &str,
            thread: &::tea::ThreadId,
            id: ::tea::CheckpointId,
        ) -> ::core::result::Result<Option<Vec<u8>>, ::tea::Error> {
            self.$inner.get(graph, thread, id)
        }
    };
    (@ $inner:tt history) => {
        fn history(
            &self,
            graph: &str,
            thread: &::tea::ThreadId,
        ) -> ::core::result::Result<Vec<(::tea::CheckpointId, Vec<u8>)>, ::tea::Error> {
            self.$inner.history(graph, thread)
        }
    };
    (@ $inner:tt range) => {
        fn range(
            &self,
            graph: &str,
            thread: &::tea::ThreadId,
            from: ::tea::CheckpointId,
            to: ::tea::CheckpointId,
        ) -> ::core::result::Result<Vec<(::tea::CheckpointId, Vec<u8>)>, ::tea::Error> {
            self.$inner.range(graph, thread, from, to)
        }
    };
    (@ $inner:tt threads) => {
        fn threads(&self, graph: &str) -> ::core::result::Result<Vec<::tea::ThreadId>, ::tea::Error> {
            self.$inner.threads(graph)
        }
    };
    (@ $inner:tt delete) => {
        fn delete(&self, graph: &str, thread: &::tea::ThreadId) -> ::core::result::Result<bool, ::tea::Error> {
            self.$inner.delete(graph, thread)
        }
    };
    (@ $inner:tt prune) => {
        fn prune(
            &self,
            graph: &str,
            thread: &::tea::ThreadId,
            keep_last: usize,
        ) -> ::core::result::Result<usize, ::tea::Error> {
            self.$inner.prune(graph, thread, keep_last)
        }
    };
    (@ $inner:tt delete_at) => {
        fn delete_at(
            &self,
            graph: &str,
            thread: &::tea::ThreadId,
            head: ::tea::CheckpointId,
        ) -> ::core::result::Result<bool, ::tea::Error> {
            self.$inner.delete_at(graph, thread, head)
        }
    };
}

pub(crate) use forward;
