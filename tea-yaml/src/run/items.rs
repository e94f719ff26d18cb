//! The items of a `type: dynamic_parallel` node, as The Edge Agent runs them: a failing item
//! does not fail the run but becomes a failed result at the fan-in; `fail_fast` stops the
//! items that have not started yet once one has failed; `max_concurrency` bounds how many
//! items run a step at once. The engine runs each item as one send; what the items share —
//! the fan-out's cancellation flag and its permits — lives here, found through a small record
//! each item carries in its own state under [`ITEM_KEY`] (the fan-out's id, the node, the
//! item's index, its time so far and its error). The record is undeclared, so it stays in the
//! item's branch, is checkpointed with it, and is taken out of the results the fan-in sees.

use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The key of an item's record in its branch's state.
pub(crate) const ITEM_KEY: &str = "__tea_item";

/// The error of the items that never started because an earlier one failed (`fail_fast`).
pub(crate) const CANCELLED: &str = "Cancelled due to fail_fast";

/// What the items of one fan-out share while they run in this process.
#[derive(Default)]
pub(crate) struct FanOut {
    cancelled: AtomicBool,
    running: Mutex<usize>,
    freed: Condvar,
}

/// A fan-out's entry, and when an item last asked for it.
struct Entry {
    fan_out: Arc<FanOut>,
    used: Instant,
}

/// How long an entry no item asked for is kept: a fan-out whose run failed or stopped before
/// its fan-in (which removes the entry) is forgotten after this (a resume later makes a fresh
/// entry, as a resume in another process does).
const IDLE: Duration = Duration::from_secs(3600);

/// The fan-outs of this process, by id.
fn registry() -> &'static Mutex<HashMap<u64, Entry>> {
    static FAN_OUTS: OnceLock<Mutex<HashMap<u64, Entry>>> = OnceLock::new();
    FAN_OUTS.get_or_init(Default::default)
}

/// A fresh fan-out id: random, so that ids read back from checkpoints written by other
/// processes do not meet this process's own.
pub(crate) fn new_id() -> u64 {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(COUNT.fetch_add(1, Ordering::Relaxed));
    hasher.finish()
}

/// The shared part of fan-out `id` (made on first use; making one forgets the entries idle for
/// [`IDLE`]).
pub(crate) fn fan_out(id: u64) -> Arc<FanOut> {
    fan_out_at(id, Instant::now(), IDLE)
}

fn fan_out_at(id: u64, now: Instant, idle: Duration) -> Arc<FanOut> {
    let mut map = registry().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(entry) = map.get_mut(&id) {
        entry.used = now;
        return entry.fan_out.clone();
    }
    map.retain(|_, entry| now.saturating_duration_since(entry.used) < idle);
    let fan_out = Arc::<FanOut>::default();
    map.insert(id, Entry { fan_out: fan_out.clone(), used: now });
    fan_out
}

/// Forgets fan-out `id` (its items have met at the fan-in).
pub(crate) fn forget(id: u64) {
    registry().lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
}

impl FanOut {
    pub(crate) fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// Waits until fewer than `limit` items run a step, and counts this one in until the
    /// permit drops.
    pub(crate) fn acquire(&self, limit: usize) -> Permit<'_> {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        while *running >= limit {
            running = self.freed.wait(running).unwrap_or_else(|e| e.into_inner());
        }
        *running += 1;
        Permit(self)
    }
}

/// One item's place among the `max_concurrency` running.
pub(crate) struct Permit<'a>(&'a FanOut);

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        let mut running = self.0.running.lock().unwrap_or_else(|e| e.into_inner());
        *running = running.saturating_sub(1);
        self.0.freed.notify_one();
    }
}

/// An item's record, as read from its state (an object; empty when absent).
pub(crate) fn record(state: &Map<String, Value>) -> Map<String, Value> {
    match state.get(ITEM_KEY) {
        Some(Value::Object(map)) => map.clone(),
        _ => Map::new(),
    }
}

/// The record a send starts its item with.
pub(crate) fn start(id: u64, node: &str, index: usize, limit: Option<usize>) -> Value {
    json!({ "fan_out": id, "node": node, "index": index, "limit": limit, "ms": 0 })
}

/// An error and its causes, as one line ([`tea_runtime::error_chain`]).
pub(crate) fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    tea_runtime::error_chain(error)
}

/// Whether an item's error is the item's own failure (a node, an action, a child agent that
/// failed), which becomes a failed result, rather than the run's (its store, its lease, an
/// answer of the wrong type), which still fails the run.
pub(crate) fn is_item_failure(error: &(dyn std::error::Error + 'static)) -> bool {
    use tea_runtime::Error as E;
    match error.downcast_ref::<E>() {
        None => !error.is::<tea_runtime::Pause>(),
        Some(e) => matches!(
            e,
            E::NodeFailed { .. }
                | E::NodePanicked { .. }
                | E::NodeTimedOut { .. }
                | E::NoRoute { .. }
                | E::RecursionLimit { .. }
                | E::ConflictingWrites { .. }
        ),
    }
}

/// The results a `dynamic_parallel` node's fan-in reads in `parallel_results`, one per item in
/// item order, as The Edge Agent's `ParallelFlowResult`: `branch` (`node[i]`), `success`,
/// `state` (the item's final state; for a failed item only its item and index, for a cancelled
/// one `{}`), `error` and `timing_ms`. `vars` gives each node's `item_var` and `index_var`.
pub(crate) fn results(states: Vec<Value>, vars: &dyn Fn(&str) -> Option<(String, String)>) -> Value {
    let mut seen_ids = Vec::new();
    let out = states
        .into_iter()
        .enumerate()
        .map(|(i, state)| {
            let Value::Object(mut state) = state else {
                return json!({ "branch": format!("[{i}]"), "success": true, "state": state, "error": null, "timing_ms": 0 });
            };
            let record = match state.remove(ITEM_KEY) {
                Some(Value::Object(map)) => map,
                _ => Map::new(),
            };
            if let Some(id) = record.get("fan_out").and_then(Value::as_u64) {
                if !seen_ids.contains(&id) {
                    seen_ids.push(id);
                }
            }
            let node = record.get("node").and_then(Value::as_str).unwrap_or_default().to_owned();
            let index = record.get("index").and_then(Value::as_u64).unwrap_or(i as u64);
            let ms = record.get("ms").and_then(Value::as_u64).unwrap_or(0);
            let error = record.get("error").and_then(Value::as_str).map(str::to_owned);
            let state = match (&error, vars(&node)) {
                (None, _) => Value::Object(state),
                (Some(e), _) if e == CANCELLED => json!({}),
                (Some(_), Some((item_var, index_var))) => {
                    let mut kept = Map::new();
                    for key in [item_var, index_var] {
                        if let Some(v) = state.remove(&key) {
                            kept.insert(key, v);
                        }
                    }
                    Value::Object(kept)
                }
                (Some(_), None) => json!({}),
            };
            json!({
                "branch": format!("{node}[{index}]"),
                "success": error.is_none(),
                "state": state,
                "error": error,
                "timing_ms": ms,
            })
        })
        .collect();
    for id in seen_ids {
        forget(id);
    }
    Value::Array(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(id: u64) -> bool {
        registry().lock().unwrap_or_else(|e| e.into_inner()).contains_key(&id)
    }

    #[test]
    fn fan_outs_left_idle_are_forgotten_when_a_new_one_starts() {
        let hour = Duration::from_secs(3600);
        let t0 = Instant::now();
        let (left, busy, fresh) = (new_id(), new_id(), new_id());
        fan_out_at(left, t0, hour).cancel();
        fan_out_at(busy, t0, hour);
        // `busy`'s items keep asking for it; `left`'s run failed before its fan-in. (The times
        // are ahead of the clock: no other unit test of this crate runs a fan-out to be pruned.)
        assert!(fan_out_at(left, t0, hour).is_cancelled(), "the same fan-out while it is known");
        fan_out_at(busy, t0 + hour / 2, hour);
        fan_out_at(fresh, t0 + hour + hour / 4, hour);
        assert!(!known(left), "idle for over an hour: forgotten");
        assert!(known(busy) && known(fresh), "asked for within the hour: kept");
        forget(busy);
        forget(fresh);
        assert!(!known(busy) && !known(fresh));
    }
}
