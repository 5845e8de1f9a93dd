//! Status codes and the one place that decides them (RFC 2326 §7.1.1, §11).
//!
//! Every refusal the session core can make is a [`Refusal`] variant, and [`Refusal::status`] is
//! the single mapping from "why" to "which code", so the status a client sees for a given fault
//! is decided here and nowhere else. [`reason_phrase`] gives the RFC 2326 reason phrase for a
//! code (rtsp-types' defaults follow RFC 7826 and print `Ok`, which some clients log oddly).
//!
//! This module does not build responses; `server` does, from a `Refusal`.

use rtsp_types::StatusCode;

use crate::headers::range::RangeError;
use crate::headers::transport::TransportError;

/// The RFC 2326 §7.1.1 reason phrase for `status` (the phrase is informative only; clients match
/// on the code).
#[must_use]
pub fn reason_phrase(status: StatusCode) -> &'static str {
    match u16::from(status) {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        250 => "Low on Storage Space",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Moved Temporarily",
        303 => "See Other",
        304 => "Not Modified",
        305 => "Use Proxy",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        407 => "Proxy Authentication Required",
        408 => "Request Time-out",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Request Entity Too Large",
        414 => "Request-URI Too Large",
        415 => "Unsupported Media Type",
        451 => "Parameter Not Understood",
        452 => "Conference Not Found",
        453 => "Not Enough Bandwidth",
        454 => "Session Not Found",
        455 => "Method Not Valid in This State",
        456 => "Header Field Not Valid for Resource",
        457 => "Invalid Range",
        458 => "Parameter Is Read-Only",
        459 => "Aggregate operation not allowed",
        460 => "Only aggregate operation allowed",
        461 => "Unsupported transport",
        462 => "Destination unreachable",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Time-out",
        505 => "RTSP Version not supported",
        551 => "Option not supported",
        _ => "Unknown",
    }
}

/// Why the session core refused a request. [`Refusal::status`] maps each variant to exactly one
/// status code; the `Display` text is for logs and never sent to the client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The request has no `CSeq`, or it is not `1*DIGIT` (RFC 2326 §12.17) → 400.
    #[error("missing or invalid CSeq")]
    BadCSeq,
    /// A header the method needs is missing or unparsable → 400.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The request line names a version other than RTSP/1.0 → 505.
    #[error("RTSP version {0} not supported")]
    VersionNotSupported(String),
    /// `Require:` lists feature tags we do not implement (RFC 2326 §12.32) → 551, with the tags
    /// echoed in `Unsupported:`.
    #[error("unsupported feature tags: {0}")]
    OptionNotSupported(String),
    /// A method we do not implement (ANNOUNCE, RECORD, REDIRECT, extensions) → 501, with
    /// `Public:` (RFC 2326 §10, §12.28).
    #[error("method {0} not implemented")]
    NotImplemented(String),
    /// The request-URI names no presentation or track we serve → 404.
    #[error("no presentation or track at {0}")]
    NotFound(String),
    /// The `Session` header names no live session (RFC 2326 §11.3.4) → 454.
    #[error("session {0} not found")]
    SessionNotFound(String),
    /// The method is not allowed in the session's state, e.g. PLAY before SETUP or SETUP while
    /// playing (RFC 2326 §11.3.5, Appendix A.1) → 455.
    #[error("{method} not valid in state {state}")]
    NotValidInState {
        /// The request's method.
        method: String,
        /// The state it arrived in (`Init` when there is no session).
        state: &'static str,
    },
    /// A SETUP with a `Session` names a different presentation than the session's (one
    /// aggregate per session, RFC 2326 §11.3.9) → 459.
    #[error("session is for {session}, SETUP names {requested}")]
    AggregateNotAllowed {
        /// The session's presentation.
        session: String,
        /// The presentation the SETUP named.
        requested: String,
    },
    /// The `Range` header is malformed, uses a unit we do not serve, or lies outside the
    /// presentation (RFC 2326 §11.3.7) → 457.
    #[error("invalid range: {0}")]
    InvalidRange(RangeError),
    /// No transport spec in `Transport:` is one we offer (RFC 2326 §11.3.11) → 461; a SETUP
    /// without `Transport:` at all → 400.
    #[error("transport: {0}")]
    Transport(TransportError),
    /// SET_PARAMETER with a body naming parameters we do not have (RFC 2326 §11.3.1) → 451.
    #[error("parameter not understood")]
    ParameterNotUnderstood,
    /// The session table is full (`ServerConfig::max_sessions`) → 503.
    #[error("session limit of {0} reached")]
    TooManySessions(usize),
    /// One client (an IP address) already holds `ServerConfig::max_sessions_per_client`
    /// sessions → 503 with `Retry-After`: a client cannot fill the table for everyone else.
    #[error("{client} already has {limit} sessions, the most one client may hold")]
    TooManyFromClient {
        /// The client's address.
        client: std::net::IpAddr,
        /// The limit.
        limit: usize,
    },
    /// A publisher's description holds a track that cannot be stored (RFC 2326 §10.3) → 415.
    #[error("unsupported media: {0}")]
    UnsupportedMedia(String),
    /// The request is understood and refused for a reason that is not authorization: a
    /// publisher's name is taken by an object or another feed → 403.
    #[error("refused: {0}")]
    Forbidden(String),
    /// The data plane refused to start the stream (admission control) → 453.
    #[error("not enough bandwidth: {0}")]
    NotEnoughBandwidth(String),
    /// The data plane failed to start the stream → 500.
    #[error("internal error: {0}")]
    Internal(String),
    /// The server cannot take new sessions for now (a cluster node that cannot reach etcd)
    /// → 503 with `Retry-After` (RFC 2326 §12.31).
    #[error("unavailable: {0}")]
    Unavailable(String),
}

impl Refusal {
    /// The status code this refusal is answered with. The only place that decides it.
    #[must_use]
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadCSeq | Self::BadRequest(_) => StatusCode::BadRequest,
            Self::VersionNotSupported(_) => StatusCode::RTSPVersionNotSupported,
            Self::OptionNotSupported(_) => StatusCode::OptionNotSupported,
            Self::NotImplemented(_) => StatusCode::NotImplemented,
            Self::NotFound(_) => StatusCode::NotFound,
            Self::SessionNotFound(_) => StatusCode::SessionNotFound,
            Self::NotValidInState { .. } => StatusCode::MethodNotValidInThisState,
            Self::AggregateNotAllowed { .. } => StatusCode::AggregateOperationNotAllowed,
            Self::InvalidRange(_) => StatusCode::InvalidRange,
            Self::Transport(TransportError::Missing) => StatusCode::BadRequest,
            Self::Transport(_) => StatusCode::UnsupportedTransport,
            Self::ParameterNotUnderstood => StatusCode::ParameterNotUnderstood,
            Self::TooManySessions(_) | Self::TooManyFromClient { .. } => {
                StatusCode::ServiceUnavailable
            }
            Self::UnsupportedMedia(_) => StatusCode::UnsupportedMediaType,
            Self::Forbidden(_) => StatusCode::Forbidden,
            Self::NotEnoughBandwidth(_) => StatusCode::NotEnoughBandwidth,
            Self::Internal(_) => StatusCode::InternalServerError,
            Self::Unavailable(_) => StatusCode::ServiceUnavailable,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phrases_follow_rfc_2326() {
        assert_eq!(reason_phrase(StatusCode::Ok), "OK");
        assert_eq!(reason_phrase(StatusCode::OptionNotSupported), "Option not supported");
        assert_eq!(
            reason_phrase(StatusCode::RTSPVersionNotSupported),
            "RTSP Version not supported"
        );
        assert_eq!(reason_phrase(StatusCode::Extension(599)), "Unknown");
    }

    #[test]
    fn refusals_map_to_codes() {
        let cases: [(Refusal, u16); 10] = [
            (Refusal::BadCSeq, 400),
            (Refusal::VersionNotSupported("RTSP/2.0".into()), 505),
            (Refusal::OptionNotSupported("x".into()), 551),
            (Refusal::SessionNotFound("x".into()), 454),
            (Refusal::Transport(TransportError::Missing), 400),
            (Refusal::Transport(TransportError::Unsupported("RTP/AVP;multicast".into())), 461),
            (Refusal::TooManySessions(1), 503),
            (Refusal::TooManyFromClient { client: [10, 0, 0, 1].into(), limit: 2 }, 503),
            (Refusal::NotEnoughBandwidth("disk".into()), 453),
            (Refusal::Unavailable("etcd".into()), 503),
        ];
        for (refusal, code) in cases {
            assert_eq!(u16::from(refusal.status()), code, "{refusal}");
        }
    }
}
