//! How long a thread's checkpoints are kept: [`Retention`] (the last K checkpoints, finished
//! threads after a time, idle paused threads after a time only when asked) and the duration
//! syntax the front ends share ([`parse_duration`]: `30d`, `12h`, `15m`).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// What a sweep ([`App::sweep`](crate::App::sweep)) keeps of an app's threads: the last
/// `keep_last` checkpoints of each thread, finished threads until a time after they finished,
/// and — only when asked — paused threads until a time after they paused. Running threads and
/// threads whose run stopped part-way (`recover` continues them) are never expired.
///
/// Given to an app with [`Builder::retention`](crate::Builder::retention), and per thread,
/// over the app's, with [`App::set_retention`](crate::App::set_retention) (kept in the store,
/// so it holds in every process that opens it). A setting left out is the app's; a thread can
/// also say "never" ([`never_expire_finished`](Self::never_expire_finished)) or keep every
/// checkpoint ([`keep_all`](Self::keep_all)) against the app's setting.
///
/// ```
/// use std::time::Duration;
/// let retention = tea::Retention::new()
///     .keep_last(20)
///     .expire_finished_after(Duration::from_secs(30 * 24 * 3600))
///     .expire_paused_after(tea::parse_duration("90d")?);
/// assert_eq!(retention.to_string(), "keep the last 20 checkpoints, finished threads 30d, paused threads 90d");
/// # Ok::<(), tea::DurationError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retention {
    /// How many checkpoints of a thread a sweep keeps (`None`: the app's, or all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    keep_last: Option<Keep>,
    /// How long after it finished a thread is expired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    finished: Option<Expiry>,
    /// How long after it paused (its last write) a paused thread is expired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    paused: Option<Expiry>,
}

/// A count of checkpoints to keep, or all of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Keep {
    All,
    Last(usize),
}

/// An expiry time, or never.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Expiry {
    Never,
    AfterMs(u64),
}

impl Expiry {
    fn after(duration: Duration) -> Expiry {
        Expiry::AfterMs(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
    }

    fn duration(self) -> Option<Duration> {
        match self {
            Expiry::Never => None,
            Expiry::AfterMs(ms) => Some(Duration::from_millis(ms)),
        }
    }
}

impl Retention {
    /// Keeps everything (nothing set): the default.
    pub const fn new() -> Self {
        Retention { keep_last: None, finished: None, paused: None }
    }

    /// A sweep keeps the newest `k` checkpoints of each thread (never fewer than one: the head
    /// stays, as [`App::prune`](crate::App::prune) keeps it).
    pub fn keep_last(mut self, k: usize) -> Self {
        self.keep_last = Some(Keep::Last(k.max(1)));
        self
    }

    /// A sweep keeps every checkpoint (over an app's `keep_last`, for one thread).
    pub fn keep_all(mut self) -> Self {
        self.keep_last = Some(Keep::All);
        self
    }

    /// A sweep deletes a finished thread (its run reached `end`) once `ttl` has passed since
    /// its last checkpoint was written.
    pub fn expire_finished_after(mut self, ttl: Duration) -> Self {
        self.finished = Some(Expiry::after(ttl));
        self
    }

    /// Finished threads are never expired (over an app's setting, for one thread).
    pub fn never_expire_finished(mut self) -> Self {
        self.finished = Some(Expiry::Never);
        self
    }

    /// A sweep deletes a paused thread once `ttl` has passed since its pause was written (the
    /// pause's token then fails with [`Error::CheckpointNotFound`](crate::Error::CheckpointNotFound)).
    /// Without this, paused threads are kept however old: a sweep lists them in
    /// [`SweepReport::kept_paused`](crate::SweepReport::kept_paused) and never expires one
    /// silently.
    pub fn expire_paused_after(mut self, ttl: Duration) -> Self {
        self.paused = Some(Expiry::after(ttl));
        self
    }

    /// Paused threads are never expired (over an app's setting, for one thread).
    pub fn never_expire_paused(mut self) -> Self {
        self.paused = Some(Expiry::Never);
        self
    }

    /// This thread's settings where it has them, `app`'s elsewhere.
    pub fn over(self, app: Retention) -> Retention {
        Retention {
            keep_last: self.keep_last.or(app.keep_last),
            finished: self.finished.or(app.finished),
            paused: self.paused.or(app.paused),
        }
    }

    /// How many checkpoints a sweep keeps per thread (`None`: all).
    pub fn kept_checkpoints(&self) -> Option<usize> {
        match self.keep_last {
            Some(Keep::Last(k)) => Some(k),
            Some(Keep::All) | None => None,
        }
    }

    /// How long a finished thread is kept (`None`: for ever).
    pub fn finished_ttl(&self) -> Option<Duration> {
        self.finished.and_then(Expiry::duration)
    }

    /// How long an idle paused thread is kept (`None`: for ever, the default).
    pub fn paused_ttl(&self) -> Option<Duration> {
        self.paused.and_then(Expiry::duration)
    }

    /// Whether nothing is set: a sweep under it keeps everything.
    pub fn is_empty(&self) -> bool {
        *self == Retention::new()
    }
}

impl fmt::Display for Retention {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        match self.keep_last {
            Some(Keep::Last(k)) => parts.push(format!("keep the last {k} checkpoints")),
            Some(Keep::All) => parts.push("keep every checkpoint".to_owned()),
            None => {}
        }
        let ttl = |what: &str, expiry: Option<Expiry>| match expiry {
            Some(Expiry::AfterMs(ms)) => Some(format!("{what} threads {}", show_duration(Duration::from_millis(ms)))),
            Some(Expiry::Never) => Some(format!("{what} threads for ever")),
            None => None,
        };
        parts.extend(ttl("finished", self.finished));
        parts.extend(ttl("paused", self.paused));
        if parts.is_empty() {
            f.write_str("keep everything")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

/// A duration that [`parse_duration`] refused: the text and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not a duration: {reason} (write a whole number and a unit: `30d`, `12h`, `15m`, `90s`)")]
pub struct DurationError {
    /// The text given.
    pub text: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// Reads a duration as the front ends write it (`tea prune --older-than 30d`, `tea serve`,
/// `tea run --group-commit 1ms`): a whole number and a unit, `ms`, `s`, `m`, `h`, `d` or `w`
/// (milliseconds, seconds, minutes, hours, days, weeks), or several such (`1d12h`).
///
/// ```
/// use std::time::Duration;
/// assert_eq!(tea::parse_duration("30d")?, Duration::from_secs(30 * 86_400));
/// assert_eq!(tea::parse_duration("1h30m")?, Duration::from_secs(5_400));
/// assert_eq!(tea::parse_duration("250ms")?, Duration::from_millis(250));
/// assert!(tea::parse_duration("30").unwrap_err().to_string().contains("has no unit"));
/// # Ok::<(), tea::DurationError>(())
/// ```
///
/// # Errors
/// [`DurationError`] for an empty text, a number without a unit, an unknown unit, or a
/// duration beyond `u64` milliseconds.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let refuse = |reason| DurationError { text: text.to_owned(), reason };
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(refuse("it is empty"));
    }
    let mut total: u64 = 0;
    let mut rest = trimmed;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(refuse("a unit must follow a number"));
        }
        let number: u64 = rest[..digits].parse().map_err(|_| refuse("the number is too large"))?;
        rest = &rest[digits..];
        if rest.starts_with(['.', ',']) {
            return Err(refuse("numbers are whole: write `90m` rather than `1.5h`"));
        }
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let millis = match &rest[..unit_len] {
            "" => return Err(refuse("the number has no unit")),
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 604_800_000,
            _ => return Err(refuse("the unit is not one of ms, s, m, h, d, w")),
        };
        rest = &rest[unit_len..];
        total = number
            .checked_mul(millis)
            .and_then(|ms| total.checked_add(ms))
            .ok_or_else(|| refuse("the duration is too large"))?;
    }
    Ok(Duration::from_millis(total))
}

/// `d` in the largest unit that writes it whole (`30d`, `36h`, `90s`, `250ms`).
pub(crate) fn show_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if !ms.is_multiple_of(1000) {
        return format!("{ms}ms");
    }
    let s = ms / 1000;
    for (unit, size) in [("w", 604_800), ("d", 86_400), ("h", 3_600), ("m", 60)] {
        if s >= size && s.is_multiple_of(size) {
            return format!("{}{unit}", s / size);
        }
    }
    format!("{s}s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_in_every_unit_and_refuse_the_rest_clearly() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_duration("12h"), Ok(Duration::from_secs(43_200)));
        assert_eq!(parse_duration(" 30d "), Ok(Duration::from_secs(2_592_000)));
        assert_eq!(parse_duration("2w"), Ok(Duration::from_secs(1_209_600)));
        assert_eq!(parse_duration("1d12h"), Ok(Duration::from_secs(129_600)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1s500ms"), Ok(Duration::from_millis(1_500)));
        for (bad, reason) in [
            ("", "it is empty"),
            ("30", "the number has no unit"),
            ("d", "a unit must follow a number"),
            ("30x", "the unit is not one of ms, s, m, h, d, w"),
            ("30us", "the unit is not one of ms, s, m, h, d, w"),
            ("3.5h", "numbers are whole: write `90m` rather than `1.5h`"),
            ("3 days", "the number has no unit"),
            ("-3d", "a unit must follow a number"),
            ("99999999999999999999d", "the number is too large"),
            ("999999999999999w", "the duration is too large"),
        ] {
            let error = parse_duration(bad).unwrap_err();
            assert_eq!(error.reason, reason, "{bad}");
            assert!(error.to_string().starts_with(&format!("`{bad}` is not a duration")), "{error}");
        }
    }

    #[test]
    fn durations_show_in_their_largest_whole_unit() {
        assert_eq!(show_duration(Duration::from_secs(30 * 86_400)), "30d");
        assert_eq!(show_duration(Duration::from_secs(36 * 3_600)), "36h");
        assert_eq!(show_duration(Duration::from_secs(90)), "90s");
        assert_eq!(show_duration(Duration::from_millis(250)), "250ms");
    }

    #[test]
    fn a_threads_settings_come_over_the_apps() {
        let app = Retention::new().keep_last(5).expire_finished_after(Duration::from_secs(60));
        let thread = Retention::new().never_expire_finished().expire_paused_after(Duration::from_secs(10));
        let both = thread.over(app);
        assert_eq!(both.kept_checkpoints(), Some(5));
        assert_eq!(both.finished_ttl(), None);
        assert_eq!(both.paused_ttl(), Some(Duration::from_secs(10)));
        assert_eq!(Retention::new().keep_all().over(app).kept_checkpoints(), None);
        assert_eq!(Retention::new().over(app), app);
        assert!(Retention::new().is_empty());
        assert_eq!(Retention::new().keep_last(0).kept_checkpoints(), Some(1));
    }
}
