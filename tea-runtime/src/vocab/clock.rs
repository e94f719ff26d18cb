//! Time and chance: the clocks leases and pause timeouts read, and the random numbers of lease
//! owners and pause nonces.

/// Seconds since the Unix epoch.
pub(crate) fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Milliseconds since the Unix epoch (lease times).
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// A random 64-bit number: a run's lease owner, a pause's nonce.
pub(crate) fn random_u64() -> u64 {
    uuid::Uuid::new_v4().as_u64_pair().0
}
