//! The JSON API's errors: a status and `{"error": "…"}`.
//!
//! Why a module of its own: the API's handlers (`api`) and the snapshot they share
//! (`state::gather`, also behind `/metrics`) answer with the same error shape, and neither
//! should depend on the other for it. Media delivery (`media`) answers in plain text, as players
//! and tools expect, and does not use it.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Json, Response};

/// An API error: a status and `{"error": "…"}`.
#[derive(Debug)]
pub(crate) struct ApiError(pub(crate) StatusCode, pub(crate) String);

impl ApiError {
    /// `503`: an owner of the state has stopped (the server is shutting down).
    pub(crate) fn unavailable() -> Self {
        Self(StatusCode::SERVICE_UNAVAILABLE, "the server is shutting down".into())
    }

    /// `400` with `msg`.
    pub(crate) fn bad_request(msg: impl Into<String>) -> Self {
        Self(StatusCode::BAD_REQUEST, msg.into())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(serde_json::json!({ "error": self.1 }))).into_response()
    }
}

/// A JSON error response: `status` and `{"error": msg}` (the node-to-node calls' shape).
pub(crate) fn error(status: StatusCode, msg: impl Into<String>) -> Response {
    (status, Json(serde_json::json!({ "error": msg.into() }))).into_response()
}
