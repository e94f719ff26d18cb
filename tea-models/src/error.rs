//! [`ModelError`]: why a model call gave no reply, naming the model and the endpoint.

use std::time::Duration;

/// Why a call of a [`ChatModel`](crate::ChatModel) gave no reply.
///
/// Each variant names the model and (but for [`Request`](Self::Request) and
/// [`Runtime`](Self::Runtime)) the endpoint, as `POST https://…/chat/completions` without its
/// query string; no message ever holds the API key (a provider that repeats it has it replaced
/// by `***`). A node returning `Result<_, ModelError>` (or `?` into a boxed error) fails with
/// it, and the node's `RetryPolicy` decides whether to try again:
/// [`is_transient`](Self::is_transient) tells the failures worth it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The provider answered with an error status.
    #[error("model `{model}`: {endpoint} answered {}: {message}", status_text(*status))]
    Status {
        /// The model asked.
        model: String,
        /// The method and URL.
        endpoint: String,
        /// The HTTP status.
        status: u16,
        /// The provider's message (its error's `message`, else the start of the body).
        message: String,
        /// How long the provider asked to wait (`Retry-After` in seconds), if it did.
        retry_after: Option<Duration>,
    },
    /// No answer: the connection failed or was refused, or the answer did not come in time.
    #[error("model `{model}`: {endpoint}: no answer")]
    Transport {
        /// The model asked.
        model: String,
        /// The method and URL.
        endpoint: String,
        /// What the HTTP client reported.
        #[source]
        source: reqwest::Error,
    },
    /// The answer is not what the API documents.
    #[error("model `{model}`: the answer of {endpoint} ({}) is not {expected}: {why}; it begins `{excerpt}`", status_text(*status))]
    Decode {
        /// The model asked.
        model: String,
        /// The method and URL.
        endpoint: String,
        /// The HTTP status of the answer.
        status: u16,
        /// What the answer should have been (`a chat completion`, `a Messages API answer`).
        expected: &'static str,
        /// What is wrong with it.
        why: String,
        /// The start of the body (or of the streamed event at fault).
        excerpt: String,
    },
    /// The answer is larger than the limit (16 MiB).
    #[error("model `{model}`: the answer of {endpoint} is larger than {} MiB", limit >> 20)]
    TooLarge {
        /// The model asked.
        model: String,
        /// The method and URL.
        endpoint: String,
        /// The limit, in bytes.
        limit: usize,
    },
    /// The request was refused before it was sent, by the provider's request hook (a
    /// sandbox's network grants).
    #[error("model `{model}`: {endpoint}: {why}")]
    Refused {
        /// The model asked.
        model: String,
        /// The method and URL.
        endpoint: String,
        /// Why the hook refused it.
        why: String,
    },
    /// The request cannot be made: a message or option the provider's API cannot carry, a
    /// URL that does not parse.
    #[error("model `{model}`: {why}")]
    Request {
        /// The model asked.
        model: String,
        /// What is wrong.
        why: String,
    },
    /// The runtime a blocking call runs on could not start.
    #[error("model calls cannot run: {why}")]
    Runtime {
        /// Why.
        why: String,
    },
}

impl ModelError {
    /// Whether trying again may succeed: a refused connection, a timeout, 408, 409, 429 or a
    /// 5xx status.
    pub fn is_transient(&self) -> bool {
        match self {
            ModelError::Status { status, .. } => matches!(status, 408 | 409 | 429) || *status >= 500,
            ModelError::Transport { source, .. } => source.is_connect() || source.is_timeout(),
            _ => false,
        }
    }

    /// Whether the answer did not come in time (a timeout set on the client or by a request
    /// hook).
    pub fn is_timeout(&self) -> bool {
        matches!(self, ModelError::Transport { source, .. } if source.is_timeout())
    }

    /// Whether no connection could be made.
    pub fn is_connect(&self) -> bool {
        matches!(self, ModelError::Transport { source, .. } if source.is_connect())
    }

    /// The HTTP status of an error answer.
    pub fn status(&self) -> Option<u16> {
        match self {
            ModelError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// How long the provider asked to wait before trying again.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ModelError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// `429 Too Many Requests`.
pub(crate) fn status_text(status: u16) -> String {
    match reqwest::StatusCode::from_u16(status).ok().and_then(|s| s.canonical_reason()) {
        Some(reason) => format!("{status} {reason}"),
        None => status.to_string(),
    }
}
