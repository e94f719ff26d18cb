//! `ratelimit.wrap`'s rate limiters: one per name in the process (The Edge Agent's global
//! limiters, the first configuration winning), each letting one call start per interval.

use std::sync::Arc;

/// `rpm`/`rps` (a rate limiter's calls per minute or per second; `rps` wins) as the time
/// between two calls: one second when neither is given, as The Edge Agent's.
/// (At most a day: a slower rate is a day between calls.)
pub(crate) fn limiter_interval(rpm: Option<f64>, rps: Option<f64>) -> std::time::Duration {
    use std::time::Duration;
    const MAX: Duration = Duration::from_secs(86_400);
    let interval = match (rps.filter(|r| *r > 0.0), rpm.filter(|r| *r > 0.0)) {
        (Some(rps), _) => Duration::try_from_secs_f64(1.0 / rps).unwrap_or(MAX),
        (None, Some(rpm)) => Duration::try_from_secs_f64(60.0 / rpm).unwrap_or(MAX),
        (None, None) => Duration::from_secs(1),
    };
    interval.min(MAX)
}

/// A rate limiter: the earliest time its next call may start.
#[derive(Debug)]
pub(super) struct Limiter {
    interval: std::time::Duration,
    next: std::sync::Mutex<std::time::Instant>,
}

impl Limiter {
    /// Waits for this call's turn (milliseconds waited); `Err(ms)`, taking no turn, when the
    /// wait would be longer than `timeout` ms.
    pub(super) fn wait(&self, timeout: Option<u64>) -> Result<u64, u64> {
        let now = std::time::Instant::now();
        let start = {
            let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
            let start = (*next).max(now);
            let wait = start.saturating_duration_since(now).as_millis() as u64;
            if timeout.is_some_and(|t| wait > t) {
                return Err(wait);
            }
            *next = start.checked_add(self.interval).unwrap_or(start);
            start
        };
        let wait = start.saturating_duration_since(now);
        std::thread::sleep(wait);
        Ok(wait.as_millis() as u64)
    }
}

/// The process's limiter named `name`, made with `interval` by its first user (The Edge
/// Agent's registry: the first configuration wins).
pub(super) fn limiter_named(name: &str, interval: std::time::Duration) -> Arc<Limiter> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static LIMITERS: OnceLock<Mutex<HashMap<String, Arc<Limiter>>>> = OnceLock::new();
    let mut limiters = LIMITERS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    limiters
        .entry(name.to_owned())
        .or_insert_with(|| Arc::new(Limiter { interval, next: std::sync::Mutex::new(std::time::Instant::now()) }))
        .clone()
}
