//! RTSP 1.0 (RFC 2326) messages, headers, SDP and the sans-IO server session core for isochron
