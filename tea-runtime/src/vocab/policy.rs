//! What a graph may declare of a node besides its function: how often it is retried, how long
//! it may run, and whether its result is reused ([`NodePolicy`]); and which events a streamed
//! run yields ([`StreamModes`]). Plain data, read by the executor (`machine::policy`).

use crate::vocab::error::Error;
use std::time::Duration;

/// Everything a graph declares of one node besides its function: `graph!`'s `retry`, `timeout`
/// and `cache` statements, a YAML node's `retry:`, `timeout:` and `cache:` keys.
///
/// A graph returns it from [`Graph::policy`](crate::Graph::policy); a node without one runs as
/// it always did, at no cost.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NodePolicy {
    /// How a failed run of the node is tried again; `None`: a failure fails the run.
    pub retry: Option<RetryPolicy>,
    /// How long one run of the node may take; `None`: no limit. A run that takes longer fails
    /// with [`Error::NodeTimedOut`] (and is retried if `retry` says so).
    pub timeout: Option<Duration>,
    /// Whether the node's result is reused for the same input; `None`: never.
    pub cache: Option<CachePolicy>,
}

impl NodePolicy {
    /// No retry, no timeout, no cache.
    pub const NONE: NodePolicy = NodePolicy { retry: None, timeout: None, cache: None };

    /// This policy with `retry`.
    pub const fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = Some(retry);
        self
    }

    /// This policy with a time limit per run.
    pub const fn timeout(mut self, limit: Duration) -> Self {
        self.timeout = Some(limit);
        self
    }

    /// This policy with `cache`.
    pub const fn cache(mut self, cache: CachePolicy) -> Self {
        self.cache = Some(cache);
        self
    }
}

/// How a node that failed is tried again: up to `attempts` runs in all (at most
/// [`MAX_ATTEMPTS`](Self::MAX_ATTEMPTS)), waiting `backoff` before
/// the second, then `backoff × factor` each time, at most `max_backoff`, each wait shortened by
/// up to `jitter` of itself at random (so that many runs failing together do not retry in step).
///
/// Only failures retry: a node's error ([`Error::NodeFailed`]), panic ([`Error::NodePanicked`])
/// or timeout ([`Error::NodeTimedOut`]) — by default all three (see [`retry_on`](Self::retry_on)).
/// A pause is not a failure and is never retried; a wrong answer to a pause
/// ([`Error::BadResumeValue`]), an unstorable state, a store or routing error never retry.
///
/// Each retry is a node run: it counts against the run's recursion limit
/// ([`Builder::recursion_limit`](crate::Builder::recursion_limit)) as a step does, and a run
/// out of steps fails with [`Error::RecursionLimit`] instead of retrying. So a node that always
/// fails ends, whatever its policy: after `attempts` runs, or when the run's steps are spent.
///
/// ```
/// use std::time::Duration;
/// use tea::RetryPolicy;
///
/// let policy = RetryPolicy::attempts(3).backoff(Duration::from_millis(200));
/// assert_eq!(policy.wait_before(2, 0.0), Duration::from_millis(200));
/// assert_eq!(policy.wait_before(3, 0.0), Duration::from_millis(400));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryPolicy {
    /// Runs in all, the first included (at least 1; the engine runs a node at most
    /// [`MAX_ATTEMPTS`](Self::MAX_ATTEMPTS) times whatever this says).
    pub attempts: u32,
    /// The wait before the second run.
    pub backoff: Duration,
    /// What each wait is multiplied by for the next.
    pub factor: f64,
    /// The longest wait.
    pub max_backoff: Duration,
    /// The share of each wait (0.0 to 1.0) that is taken off at random.
    pub jitter: f64,
    /// Which failures retry.
    pub on: RetryOn,
}

/// Which failures a [`RetryPolicy`] retries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RetryOn {
    /// A node's error, panic or timeout (the default).
    Failures,
    /// A node's error or timeout, not a panic (a panic is a bug: retrying hides it).
    ErrorsAndTimeouts,
    /// A timeout only.
    Timeouts,
}

impl RetryPolicy {
    /// The most runs of one node, the first included, that a policy may ask for: 1 000 retries.
    /// [`attempts`](Self::attempts) clamps to it, the engine never runs a node more often, the
    /// `graph!` macro refuses more at compile time and a YAML file's `max_retries` above
    /// 1 000 is a load error.
    pub const MAX_ATTEMPTS: u32 = 1_001;

    /// Up to `attempts` runs in all (the first included; 0 counts as 1, more than
    /// [`MAX_ATTEMPTS`](Self::MAX_ATTEMPTS) as that many), 100 ms before the second, doubling up
    /// to 10 s, with 25 % jitter, on any failure.
    pub const fn attempts(attempts: u32) -> Self {
        RetryPolicy {
            attempts: if attempts == 0 {
                1
            } else if attempts > Self::MAX_ATTEMPTS {
                Self::MAX_ATTEMPTS
            } else {
                attempts
            },
            backoff: Duration::from_millis(100),
            factor: 2.0,
            max_backoff: Duration::from_secs(10),
            jitter: 0.25,
            on: RetryOn::Failures,
        }
    }

    /// The wait before the second run.
    pub const fn backoff(mut self, backoff: Duration) -> Self {
        self.backoff = backoff;
        self
    }

    /// What each wait is multiplied by for the next (1.0: always `backoff`).
    pub const fn factor(mut self, factor: f64) -> Self {
        self.factor = factor;
        self
    }

    /// The longest wait.
    pub const fn max_backoff(mut self, max: Duration) -> Self {
        self.max_backoff = max;
        self
    }

    /// The share of each wait taken off at random, from 0.0 (none) to 1.0.
    pub const fn jitter(mut self, jitter: f64) -> Self {
        self.jitter = jitter;
        self
    }

    /// Which failures retry.
    pub const fn retry_on(mut self, on: RetryOn) -> Self {
        self.on = on;
        self
    }

    /// Whether `error`, a run of the node's failure, is retried.
    pub fn retries(&self, error: &Error) -> bool {
        matches!(
            (self.on, error),
            (_, Error::NodeTimedOut { .. })
                | (RetryOn::Failures, Error::NodeFailed { .. } | Error::NodePanicked { .. })
                | (RetryOn::ErrorsAndTimeouts, Error::NodeFailed { .. })
        )
    }

    /// The wait before run number `attempt` (2 for the first retry), given `random` in
    /// `0.0..1.0` for the jitter.
    pub fn wait_before(&self, attempt: u32, random: f64) -> Duration {
        let retries = attempt.saturating_sub(2).min(64) as i32;
        let factor = if self.factor.is_finite() && self.factor > 0.0 { self.factor } else { 1.0 };
        let base = self.backoff.as_secs_f64() * factor.powi(retries);
        let capped = base.min(self.max_backoff.as_secs_f64()).max(0.0);
        let jitter = self.jitter.clamp(0.0, 1.0) * random.clamp(0.0, 1.0);
        Duration::try_from_secs_f64(capped * (1.0 - jitter)).unwrap_or(self.max_backoff)
    }
}

/// Whether and where a node's result is reused: a node whose output depends only on its input
/// state runs once per distinct input (the fields it reads, or the whole state), and later runs
/// with the same input take the stored result (an [`Event::CacheHit`](crate::Event::CacheHit)
/// when streaming) until it is `ttl` old.
///
/// A node that pauses, fails or fans out by sends is never cached; a router's choice is cached
/// with its update.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CachePolicy {
    /// How long a result stays valid; `None`: as long as it is kept.
    pub ttl: Option<Duration>,
    /// The state's fields the key is made of; empty: the whole state.
    pub reads: &'static [&'static str],
    /// Where results are kept.
    pub scope: CacheScope,
}

/// Where a [`CachePolicy`] keeps results.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CacheScope {
    /// In the app, for its runs, while the process lives.
    Memory,
    /// In the app's checkpointer, shared by every process on that store and kept across
    /// restarts (in memory for an app without one).
    Store,
}

impl CachePolicy {
    /// Results kept in memory, keyed by the whole state, for as long as the app lives.
    pub const fn memory() -> Self {
        CachePolicy { ttl: None, reads: &[], scope: CacheScope::Memory }
    }

    /// Results kept in the app's checkpointer, keyed by the whole state.
    pub const fn store() -> Self {
        CachePolicy { ttl: None, reads: &[], scope: CacheScope::Store }
    }

    /// Results expire `ttl` after they were stored.
    pub const fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// The key is made of these fields of the state only.
    pub const fn reads(mut self, fields: &'static [&'static str]) -> Self {
        self.reads = fields;
        self
    }
}

/// Which events a streamed run yields ([`RunOptions::stream_modes`](crate::RunOptions::stream_modes)),
/// combined with `|`. [`Event::Interrupted`](crate::Event::Interrupted) and
/// [`Event::Done`](crate::Event::Done) always come, and so do
/// [`Event::Retry`](crate::Event::Retry) and [`Event::CacheHit`](crate::Event::CacheHit).
///
/// | mode | yields |
/// |---|---|
/// | `VALUES` | [`Event::Step`](crate::Event::Step) after each node, with the whole state |
/// | `UPDATES` | [`Event::Update`](crate::Event::Update) after each node, with only its update |
/// | `CUSTOM` | [`Event::Custom`](crate::Event::Custom): what nodes emit ([`Ctx::emit`](crate::Ctx::emit)) |
/// | `DEBUG` | [`Event::Started`](crate::Event::Started) when each node starts, with its time |
///
/// The default is `VALUES | CUSTOM`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StreamModes(u8);

impl StreamModes {
    /// [`Event::Step`](crate::Event::Step): the whole state after each node.
    pub const VALUES: StreamModes = StreamModes(1);
    /// [`Event::Update`](crate::Event::Update): each node's update.
    pub const UPDATES: StreamModes = StreamModes(2);
    /// [`Event::Custom`](crate::Event::Custom): what nodes emit while they run.
    pub const CUSTOM: StreamModes = StreamModes(4);
    /// [`Event::Started`](crate::Event::Started): each node's start, with its time.
    pub const DEBUG: StreamModes = StreamModes(8);
    /// Every mode.
    pub const ALL: StreamModes = StreamModes(15);

    /// Whether every mode of `other` is in this set.
    pub const fn contains(self, other: StreamModes) -> bool {
        self.0 & other.0 == other.0
    }
}

impl Default for StreamModes {
    fn default() -> Self {
        StreamModes(StreamModes::VALUES.0 | StreamModes::CUSTOM.0)
    }
}

impl std::ops::BitOr for StreamModes {
    type Output = StreamModes;
    fn bitor(self, other: StreamModes) -> StreamModes {
        StreamModes(self.0 | other.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_grow_and_are_capped() {
        let policy = RetryPolicy::attempts(10).backoff(Duration::from_secs(1)).max_backoff(Duration::from_secs(5));
        assert_eq!(policy.wait_before(2, 0.0), Duration::from_secs(1));
        assert_eq!(policy.wait_before(4, 0.0), Duration::from_secs(4));
        assert_eq!(policy.wait_before(9, 0.0), Duration::from_secs(5));
        // 25 % jitter at most.
        assert_eq!(policy.wait_before(2, 1.0), Duration::from_millis(750));
        assert_eq!(RetryPolicy::attempts(0).attempts, 1);
        assert_eq!(RetryPolicy::attempts(u32::MAX).attempts, RetryPolicy::MAX_ATTEMPTS);
    }

    #[test]
    fn what_retries() {
        let failed = Error::NodeFailed { node: "n".into(), source: "boom".into() };
        let panicked = Error::NodePanicked { node: "n".into(), message: "boom".into() };
        let timed_out = Error::NodeTimedOut { node: "n".into(), after: Duration::from_secs(1) };
        let bad = Error::BadResumeValue { node: "n".into(), expected: "bool".into(), reason: "no".into() };
        let all = RetryPolicy::attempts(2);
        assert!(all.retries(&failed) && all.retries(&panicked) && all.retries(&timed_out));
        assert!(!all.retries(&bad));
        let errors = all.retry_on(RetryOn::ErrorsAndTimeouts);
        assert!(errors.retries(&failed) && !errors.retries(&panicked) && errors.retries(&timed_out));
        let timeouts = all.retry_on(RetryOn::Timeouts);
        assert!(!timeouts.retries(&failed) && timeouts.retries(&timed_out));
    }

    #[test]
    fn modes_combine() {
        let modes = StreamModes::VALUES | StreamModes::DEBUG;
        assert!(modes.contains(StreamModes::VALUES) && modes.contains(StreamModes::DEBUG));
        assert!(!modes.contains(StreamModes::CUSTOM));
        assert!(StreamModes::default().contains(StreamModes::CUSTOM));
    }
}
