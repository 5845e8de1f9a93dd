//! The `Session` header (RFC 2326 §12.37).
//!
//! We write `Session: <id>;timeout=<secs>` with no space before `;timeout=`: ffmpeg matches that
//! string literally, live555 accepts it with or without spaces. Reading a request's `Session`
//! strips any parameters and whitespace. The id itself is made by the session core; this module
//! only formats and splits.

/// The `Session` value we send: `"{id};timeout={timeout_secs}"`.
#[must_use]
pub fn format_session(id: &str, timeout_secs: u64) -> String {
    format!("{id};timeout={timeout_secs}")
}

/// The session id of a request's `Session` value: everything before the first `;`, trimmed
/// (RFC 2326 §12.37 allows `;timeout=` in requests too, and clients echo it back).
#[must_use]
pub fn parse_session_id(value: &str) -> &str {
    value.split(';').next().unwrap_or_default().trim()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_has_no_space_before_timeout() {
        assert_eq!(format_session("4F2A9C1E77D0B3A5", 60), "4F2A9C1E77D0B3A5;timeout=60");
    }

    #[test]
    fn parse_strips_parameters() {
        assert_eq!(parse_session_id("4F2A9C1E77D0B3A5"), "4F2A9C1E77D0B3A5");
        assert_eq!(parse_session_id(" 4F2A9C1E77D0B3A5 ;timeout=60"), "4F2A9C1E77D0B3A5");
        assert_eq!(parse_session_id("abc; timeout = 60"), "abc");
        assert_eq!(parse_session_id(""), "");
    }
}
