//! What a node's run brings besides the state, for the languages and actions to read: the
//! run's context (`{{ context.x }}`, `context.x` in `run:` blocks), the writer its `emit(…)`
//! calls send through, and the app's long-term memory (`ltm.*`, `memory.*`). Set by the graph (`run/graph.rs`) on the thread that runs a node, for as long as it runs
//! (and at each poll of a network node's future).

use serde_json::Value;
use std::cell::RefCell;
use tea_runtime::{Memory, Writer};

/// A node's run context, its writer and its app's memory.
pub(crate) type RunScope = (Value, Option<Writer>, Option<Memory>);

thread_local! {
    static RUN_SCOPE: RefCell<RunScope> = const { RefCell::new((Value::Null, None, None)) };
}

/// The long-term memory of the app whose node this thread runs (`ctx.store()`): the agent's
/// store's, when it has one.
pub(crate) fn run_memory() -> Option<Memory> {
    RUN_SCOPE.with(|c| c.borrow().2.clone())
}

/// The run context of the node this thread runs (`null` without one).
pub(crate) fn run_context() -> Value {
    RUN_SCOPE.with(|c| c.borrow().0.clone())
}

/// Emits `value` to the stream of the run whose node this thread runs (`emit(…)` in a `run:`
/// block); nothing outside a streamed run.
pub(crate) fn emit(value: Value) {
    RUN_SCOPE.with(|c| {
        if let Some(writer) = &c.borrow().1 {
            writer.emit(value);
        }
    });
}

/// Makes `scope` this thread's, returning the one it replaces.
pub(crate) fn replace(scope: RunScope) -> RunScope {
    RUN_SCOPE.with(|c| c.replace(scope))
}

/// `names` as a list that lives as long as the process, for a cached node's
/// [`CachePolicy::reads`](tea_runtime::CachePolicy) (a `graph!`'s are written in the code). Each
/// distinct list is kept once however many times agents naming it are loaded.
pub(crate) fn static_names(names: Vec<String>) -> &'static [&'static str] {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock, PoisonError};
    type Kept = HashMap<Vec<String>, &'static [&'static str]>;
    static LISTS: OnceLock<Mutex<Kept>> = OnceLock::new();
    if names.is_empty() {
        return &[];
    }
    let mut lists = LISTS.get_or_init(Default::default).lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(kept) = lists.get(&names) {
        return kept;
    }
    let kept: Vec<&'static str> = names.iter().map(|name| &*String::leak(name.clone())).collect();
    let kept: &'static [&'static str] = Vec::leak(kept);
    lists.insert(names, kept);
    kept
}
