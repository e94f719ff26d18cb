//! What a request that cannot be served gets: the Agent Protocol's `ErrorResponse`
//! (`{code, message, metadata?}`) with the right status, built from the engine's errors.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tea_runtime::Error;

/// A failed request: its status, a short code a client can match on, and a message that names
/// what it concerns (the thread, the node, the field).
#[derive(Clone, Debug)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) code: &'static str,
    pub(crate) message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError { status, code, message: message.into() }
    }

    pub(crate) fn not_found(what: impl Into<String>) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", what)
    }

    pub(crate) fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::CONFLICT, code, message)
    }

    pub(crate) fn unprocessable(code: &'static str, message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, code, message)
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    /// Whether the error stopped a run before it ran anything (a stale answer, a busy thread, a
    /// bad input or answer): the request fails with it, rather than the run.
    pub(crate) fn refuses_request(&self) -> bool {
        self.status.is_client_error()
    }

    /// The body, as the protocol's `ErrorResponse`.
    pub(crate) fn body(&self) -> Value {
        json!({ "code": self.code, "message": self.message })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body())).into_response()
    }
}

/// The message of `error` with its sources, so a node's own error is part of what the client
/// reads (`node `ask` failed: the model timed out`).
pub(crate) fn full_message(error: &Error) -> String {
    tea_runtime::error_chain(error)
}

impl From<Error> for ApiError {
    fn from(error: Error) -> Self {
        let message = full_message(&error);
        let (status, code) = match &error {
            Error::StaleResume { .. } => (StatusCode::CONFLICT, "stale_resume"),
            Error::ThreadBusy { .. } | Error::LeaseLost { .. } => (StatusCode::CONFLICT, "thread_busy"),
            Error::ThreadExists { .. } => (StatusCode::CONFLICT, "thread_exists"),
            Error::Expired { .. } => (StatusCode::CONFLICT, "expired"),
            Error::GraphMismatch { .. } | Error::SchemaMismatch { .. } => (StatusCode::CONFLICT, "graph_mismatch"),
            Error::BadResumeValue { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "bad_resume_value"),
            Error::InvalidThreadId { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_thread_id"),
            Error::InvalidToken { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_token"),
            Error::CheckpointNotFound { .. } => (StatusCode::NOT_FOUND, "not_found"),
            Error::NodeFailed { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "node_failed"),
            Error::NodePanicked { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "node_panicked"),
            Error::NodeTimedOut { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "node_timed_out"),
            Error::MissingContext { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "missing_context"),
            Error::Store { .. } => (StatusCode::SERVICE_UNAVAILABLE, "store"),
            Error::CorruptCheckpoint { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "corrupt_checkpoint"),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "run_failed"),
        };
        ApiError { status, code, message }
    }
}
