//! Time and chance: the [`Clock`] an app's runs read leases, pause timeouts and cache ages
//! from, and draw the random numbers of lease owners and pause nonces from.
//!
//! The machine reads neither the system's clock nor its randomness itself: it asks the clock
//! its app (or, outside an app, its caller) hands it — the system's by default, or a
//! [`Clock::manual`] one that moves only when it is told to, with which a test expires a lease
//! by advancing the clock rather than by sleeping.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where an app's runs read the time (lease expiries, pause timeouts, cache ages, when a
/// checkpoint was written) and draw random numbers (lease owners, pause nonces).
///
/// The default is the system's clock ([`Clock::system`]). A [`Clock::manual`] clock stands
/// still until [`advance`](Clock::advance)d, so that a test can let a lease or a pause expire
/// at once; clones share one time. Give it to an app with
/// [`Builder::clock`](crate::Builder::clock):
///
/// ```
/// # use tea::prelude::*;
/// # use std::time::{Duration, SystemTime};
/// # #[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
/// # struct Doc { text: String }
/// # fn draft(_: &Doc) {}
/// # graph! { Drafts for Doc { start -> draft; draft -> end; } }
/// let clock = tea::Clock::manual(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000));
/// let app = Drafts::builder().checkpointer(tea::MemoryStore::new()).clock(clock.clone()).build();
/// app.invoke(Doc::default()).unwrap();
/// clock.advance(Duration::from_secs(60)); // a minute passes for the app, at once
/// ```
#[derive(Clone, Default)]
pub struct Clock(Option<Arc<Manual>>);

/// A clock's time in milliseconds since the Unix epoch, and how many random numbers it drew.
struct Manual {
    ms: AtomicU64,
    draws: AtomicU64,
}

impl Clock {
    /// The system's clock and randomness (the default).
    pub const fn system() -> Self {
        Clock(None)
    }

    /// A clock that reads `start` until [`advance`](Self::advance)d (for tests). Its random
    /// numbers are a fixed sequence: distinct from one another, the same for two clocks made
    /// with the same `start`.
    pub fn manual(start: SystemTime) -> Self {
        let ms = start.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Clock(Some(Arc::new(Manual { ms: AtomicU64::new(ms), draws: AtomicU64::new(ms) })))
    }

    /// Moves a [`manual`](Self::manual) clock (and its clones) on by `by`; the system's clock
    /// is not moved.
    pub fn advance(&self, by: Duration) {
        if let Some(manual) = &self.0 {
            manual.ms.fetch_add(u64::try_from(by.as_millis()).unwrap_or(u64::MAX), Ordering::AcqRel);
        }
    }

    /// Milliseconds since the Unix epoch (lease times, cache ages, when a checkpoint was written).
    pub(crate) fn now_ms(&self) -> u64 {
        match &self.0 {
            None => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            Some(manual) => manual.ms.load(Ordering::Acquire),
        }
    }

    /// The time of day (when a node started, as a stream reports it).
    pub(crate) fn time(&self) -> SystemTime {
        match &self.0 {
            None => SystemTime::now(),
            Some(manual) => UNIX_EPOCH + Duration::from_millis(manual.ms.load(Ordering::Acquire)),
        }
    }

    /// Seconds since the Unix epoch (pause timeouts).
    pub(crate) fn now(&self) -> u64 {
        self.now_ms() / 1000
    }

    /// A random 64-bit number: a run's lease owner, a pause's nonce.
    pub(crate) fn random_u64(&self) -> u64 {
        match &self.0 {
            None => system_random(),
            // splitmix64 over a counter: distinct numbers, not guessable ones.
            Some(manual) => {
                let mut z = manual.draws.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::AcqRel);
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                z ^ (z >> 31)
            }
        }
    }
}

/// A random 64-bit number from the system without a system call per draw: std's
/// [`RandomState`](std::collections::hash_map::RandomState) keys (drawn from the operating
/// system's generator once per thread, then stepped on every `new`) hashing a constant with
/// SipHash, a keyed pseudo-random function. A draw from the system's generator each time (a
/// `getrandom` call, as `Uuid::new_v4` makes) cost a run with a store several system calls:
/// its lease owner, its thread id, each pause's nonce.
pub(crate) fn system_random() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(0x7465_615f_7261_6e64_u64)
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            None => f.write_str("Clock::system()"),
            Some(manual) => write!(f, "Clock::manual(at {} ms)", manual.ms.load(Ordering::Acquire)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_advanced_and_its_clones_with_it() {
        let clock = Clock::manual(UNIX_EPOCH + Duration::from_secs(10));
        let copy = clock.clone();
        assert_eq!(clock.now_ms(), 10_000);
        clock.advance(Duration::from_millis(1_500));
        assert_eq!(copy.now_ms(), 11_500);
        assert_eq!(copy.now(), 11);
        assert_ne!(clock.random_u64(), copy.random_u64(), "draws are distinct");
    }

    #[test]
    fn the_system_clock_is_not_advanced() {
        let clock = Clock::system();
        let before = clock.now_ms();
        clock.advance(Duration::from_secs(3_600));
        assert!(clock.now_ms() < before + 3_600_000);
    }
}
