//! A thread's events, as its runs in this process publish them (`runs.rs`) and its event
//! streams read them (`streaming.rs`): each under its channel, with the thread's next
//! sequence number; the last [`KEPT`] are kept for a stream that replays them (`since`).

use crate::time::now_ms;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::Mutex;
use tokio::sync::broadcast;

/// How many events a thread's hub keeps for `since`.
const KEPT: usize = 1000;

/// One event of a thread: its sequence number, method (its channel, or `input.requested`) and data.
#[derive(Clone, Debug)]
pub(crate) struct ThreadEvent {
    pub(crate) seq: u64,
    pub(crate) channel: &'static str,
    pub(crate) method: &'static str,
    pub(crate) run_id: String,
    pub(crate) data: Value,
    pub(crate) at: u64,
}

impl ThreadEvent {
    /// The protocol's `StreamingEvent`.
    pub(crate) fn json(&self) -> Value {
        json!({
            "type": "event",
            "eventId": self.seq.to_string(),
            "seq": self.seq,
            "method": self.method,
            "params": { "namespace": [], "timestamp": self.at, "run_id": self.run_id, "data": self.data },
        })
    }
}

/// A thread's events: the last ones kept, the live ones broadcast.
#[derive(Debug)]
pub(crate) struct Hub {
    kept: Mutex<(u64, VecDeque<ThreadEvent>)>,
    live: broadcast::Sender<ThreadEvent>,
}

impl Default for Hub {
    fn default() -> Self {
        Hub { kept: Mutex::new((0, VecDeque::new())), live: broadcast::channel(1024).0 }
    }
}

impl Hub {
    /// Publishes run `run_id`'s event `event` (a run stream's event name) with `data`, under
    /// the channel it belongs to; events no channel carries (`messages/…`) are not published.
    pub(crate) fn publish(&self, run_id: &str, event: &str, data: &Value) {
        let (channel, method, data) = match event {
            "metadata" => ("lifecycle", "lifecycle", json!({ "event": "running" })),
            "end" => {
                let status = match data["status"].as_str() {
                    Some("interrupted") => "interrupted",
                    Some("success") => "completed",
                    _ => "failed",
                };
                ("lifecycle", "lifecycle", json!({ "event": status }))
            }
            "error" => ("lifecycle", "lifecycle", json!({ "event": "failed", "error": data })),
            "updates" if data.get("__interrupt__").is_some() => {
                ("input", "input.requested", json!({ "interrupts": data["__interrupt__"] }))
            }
            "values" => ("values", "values", data.clone()),
            "updates" => ("updates", "updates", data.clone()),
            "custom" => ("custom", "custom", data.clone()),
            "messages" => {
                ("messages", "messages", json!({ "event": "message", "message": data[0], "metadata": data[1] }))
            }
            "debug" => ("tasks", "tasks", data.clone()),
            _ => return,
        };
        let mut kept = self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        kept.0 += 1;
        let event = ThreadEvent { seq: kept.0, channel, method, run_id: run_id.to_owned(), data, at: now_ms() };
        kept.1.push_back(event.clone());
        if kept.1.len() > KEPT {
            kept.1.pop_front();
        }
        let _ = self.live.send(event);
    }

    /// Whether a stream listens.
    pub(crate) fn listened(&self) -> bool {
        self.live.receiver_count() > 0
    }

    /// The kept events after `since` and a receiver of the next ones.
    pub(crate) fn subscribe(&self, since: u64) -> (Vec<ThreadEvent>, broadcast::Receiver<ThreadEvent>) {
        let kept = self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        (kept.1.iter().filter(|e| e.seq > since).cloned().collect(), self.live.subscribe())
    }
}
