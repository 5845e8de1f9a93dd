//! The JSON API's errors: a status and `{"error": "…"}`.
//!
//! Why a module of its own: the API's handlers (`api`) and the snapshot they share
//! (`state::gather`, also behind `/metrics`) answer with the same error shape, and neither
//! should depend on the other for it. Media delivery (`media`) answers in plain text, as players
//! and tools expect, and does not use it.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Json, Response};
use isochron_base::{IoFailure, IoFailureKind};

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

impl From<isochron_server::reorg::ReorgError> for ApiError {
    /// `409` for an operation the store or a running reorganisation refuses (nothing changed),
    /// `500` for one that failed on the way.
    fn from(e: isochron_server::reorg::ReorgError) -> Self {
        use isochron_server::reorg::ReorgError;
        let status = match e {
            ReorgError::Busy | ReorgError::Refused(_) => StatusCode::CONFLICT,
            ReorgError::Attach { .. } | ReorgError::Lost(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Self(status, e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(serde_json::json!({ "error": self.1 }))).into_response()
    }
}

/// A failed block IO as a JSON error response, its status by kind: 404 for a copy that is not
/// here (missing, or its disk not on this node), 422 for bytes that are not the block, 503 for
/// work not done because a thread or stream stopped, 502 for another node's failure, 500 for
/// the operating system's.
pub(crate) fn io_error(e: &IoFailure) -> Response {
    let status = match e.kind() {
        IoFailureKind::Missing | IoFailureKind::Detached => StatusCode::NOT_FOUND,
        IoFailureKind::Corrupt => StatusCode::UNPROCESSABLE_ENTITY,
        IoFailureKind::Cancelled | IoFailureKind::Closed => StatusCode::SERVICE_UNAVAILABLE,
        IoFailureKind::Remote | IoFailureKind::Exhausted => StatusCode::BAD_GATEWAY,
        IoFailureKind::Os => StatusCode::INTERNAL_SERVER_ERROR,
    };
    error(status, e.to_string())
}

/// A JSON error response: `status` and `{"error": msg}` (the node-to-node calls' shape).
pub(crate) fn error(status: StatusCode, msg: impl Into<String>) -> Response {
    (status, Json(serde_json::json!({ "error": msg.into() }))).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_block_io_answers_with_the_status_of_its_kind() {
        let status = |kind| io_error(&IoFailure::new(kind, "block 1/2 on disk 0")).status();
        assert_eq!(status(IoFailureKind::Missing), StatusCode::NOT_FOUND);
        assert_eq!(status(IoFailureKind::Detached), StatusCode::NOT_FOUND);
        assert_eq!(status(IoFailureKind::Corrupt), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(status(IoFailureKind::Cancelled), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(status(IoFailureKind::Remote), StatusCode::BAD_GATEWAY);
        assert_eq!(status(IoFailureKind::Os), StatusCode::INTERNAL_SERVER_ERROR);
    }
}
