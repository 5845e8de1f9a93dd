//! Framing RTSP on a TCP byte stream (RFC 2326 §4, §9.1, §10.12).
//!
//! One connection carries RTSP requests (pipelined, RFC 2326 §9.1), the odd response, and
//! interleaved binary frames (`$`, channel, 16-bit length, payload; RFC 2326 §10.12) in any
//! order: ffmpeg sends keep-alives between RTP frames and GStreamer sends RTCP on the odd
//! channel. [`decode`] takes the unconsumed bytes of the connection and returns
//! one [`Frame`] with the number of bytes it used, [`Decoded::Incomplete`] ("read more"), or
//! [`Decoded::Invalid`] for bytes that can never become a message (the caller answers with
//! [`ParseError::status`], usually 400, and closes).
//!
//! Message syntax is rtsp-types' parser; this module adds what a server needs around it:
//! interleaved frames parsed directly, leading empty lines skipped (RFC 2326 §4 / HTTP
//! robustness), a size limit so that `Incomplete` can never wait forever, an early refusal of a
//! `Content-Length` that cannot fit, and a diagnosis with a byte position and the request's
//! `CSeq` when rtsp-types only says "error". A request whose version is RTSP/2.0 is returned as
//! a normal frame so that the session core can answer 505 (GStreamer then retries with 1.0);
//! other versions are `Invalid` with [`ParseErrorKind::UnsupportedVersion`] (status 505). Lines
//! must end in CRLF as RFC 2326 §4 requires; ffmpeg, GStreamer, VLC and live555 all do so.
//!
//! It does no IO and keeps no state: the caller owns the buffer and drops the consumed prefix.

use rtsp_types::{Message, Method, Request, Response, StatusCode, Url};

/// The largest interleaved frame: `$`, channel, 2-byte length and 65535 bytes of payload.
pub const MAX_DATA_FRAME_BYTES: usize = 4 + u16::MAX as usize;

/// Limits that bound what [`decode`] may wait for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest RTSP message (start line, headers and body, plus any empty lines before it),
    /// in bytes. Larger messages are [`ParseErrorKind::TooLarge`]. Default 64 KiB.
    pub max_message_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self { max_message_bytes: 64 * 1024 }
    }
}

impl Limits {
    /// [`decode`] returns `Incomplete` only for buffers shorter than this: the larger of
    /// `max_message_bytes` and [`MAX_DATA_FRAME_BYTES`]. A reader never needs to buffer more.
    #[must_use]
    pub fn incomplete_bound(&self) -> usize {
        self.max_message_bytes.max(MAX_DATA_FRAME_BYTES)
    }
}

/// One unit read from an RTSP connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// An RTSP request.
    Request(Request<Vec<u8>>),
    /// An RTSP response (a server only sees these from clients answering its own requests,
    /// which we never send; the glue may drop them).
    Response(Response<Vec<u8>>),
    /// An interleaved binary frame (RFC 2326 §10.12).
    Data {
        /// The channel id.
        channel: u8,
        /// The payload, an RTP or RTCP packet.
        payload: Vec<u8>,
    },
}

/// The result of [`decode`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// A frame, and the number of bytes of the buffer it used (always at least 1).
    Frame(Frame, usize),
    /// The buffer holds the start of a frame; read more and call again with all unconsumed
    /// bytes. Only returned while the buffer is shorter than [`Limits::incomplete_bound`].
    Incomplete,
    /// The buffer can never be parsed. Answer with [`ParseError::status`] and close.
    Invalid(ParseError),
}

/// Why bytes on a connection are not an RTSP message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid RTSP message at byte {position}: {kind}")]
pub struct ParseError {
    /// Offset in the buffer passed to [`decode`] where the fault was found.
    pub position: usize,
    /// What is wrong.
    pub kind: ParseErrorKind,
    /// The request's `CSeq`, if one could be read, so the error response can echo it.
    pub cseq: Option<String>,
}

/// What is wrong with an invalid message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseErrorKind {
    /// The message is larger than [`Limits::max_message_bytes`] (or an interleaved frame plus
    /// preceding empty lines exceeds [`Limits::incomplete_bound`]).
    #[error("message exceeds {limit} bytes")]
    TooLarge {
        /// The limit that was exceeded.
        limit: usize,
    },
    /// The request or status line is not `METHOD SP URI SP RTSP/x.y` / `RTSP/x.y SP code SP
    /// reason`.
    #[error("malformed start line")]
    BadStartLine,
    /// A well-formed version other than RTSP/1.0 and RTSP/2.0.
    #[error("unsupported protocol version {0:?}")]
    UnsupportedVersion(String),
    /// The request-URI is neither `*` nor an absolute URL.
    #[error("request-URI is neither * nor an absolute URL")]
    BadRequestUri,
    /// A header line lacks a `:` or has a name that is not a token, or a value that is not
    /// UTF-8.
    #[error("malformed header line")]
    BadHeader,
    /// `Content-Length` is not a decimal number.
    #[error("invalid Content-Length")]
    BadContentLength,
    /// A line ends in a bare LF instead of CRLF.
    #[error("line ends in LF without CR")]
    BareLineFeed,
    /// Anything else rtsp-types refused.
    #[error("malformed message")]
    Malformed,
}

impl ParseError {
    /// The status to answer with before closing: 505 for an unsupported version, 413 for an
    /// oversized message, 400 otherwise (RFC 2326 §7.1.1).
    #[must_use]
    pub fn status(&self) -> StatusCode {
        match self.kind {
            ParseErrorKind::UnsupportedVersion(_) => StatusCode::RTSPVersionNotSupported,
            ParseErrorKind::TooLarge { .. } => StatusCode::RequestMessageBodyTooLarge,
            _ => StatusCode::BadRequest,
        }
    }
}

/// Decodes the first frame of `buf`, the unconsumed bytes of a connection. Never panics, and
/// every `Frame` consumes at least one byte, so a loop over `decode` always ends.
#[must_use]
pub fn decode(buf: &[u8], limits: &Limits) -> Decoded {
    let mut start = 0;
    while buf[start..].starts_with(b"\r\n") {
        start += 2;
    }
    let rest = &buf[start..];
    if rest.is_empty() || rest == b"\r" {
        return if buf.len() >= limits.max_message_bytes {
            too_large(start, limits.max_message_bytes)
        } else {
            Decoded::Incomplete
        };
    }
    if rest[0] == b'$' {
        decode_data(buf, start, limits.incomplete_bound())
    } else {
        decode_text(buf, start, limits.max_message_bytes)
    }
}

/// Serializes a response (status line, headers, empty line, body) onto `out`.
///
/// The `Content-Length` header is the caller's: rtsp-types' `build()` sets it for a non-empty
/// body, which is how the session core builds every response.
pub fn encode_response(resp: &Response<Vec<u8>>, out: &mut Vec<u8>) {
    // `Vec<u8>` as `io::Write` never fails, and rtsp-types' serializer has no other error.
    let written = resp.write(out);
    debug_assert!(written.is_ok(), "writing into a Vec cannot fail");
}

/// Serializes a request onto `out` (for our own client, `loadgen`).
pub fn encode_request(req: &Request<Vec<u8>>, out: &mut Vec<u8>) {
    // `Vec<u8>` as `io::Write` never fails, and rtsp-types' serializer has no other error.
    let written = req.write(out);
    debug_assert!(written.is_ok(), "writing into a Vec cannot fail");
}

/// Appends an interleaved frame (RFC 2326 §10.12) for `channel` onto `out`.
///
/// # Errors
///
/// [`DataTooLarge`] if `payload` exceeds 65535 bytes; nothing is written then.
pub fn encode_data(channel: u8, payload: &[u8], out: &mut Vec<u8>) -> Result<(), DataTooLarge> {
    let len = u16::try_from(payload.len()).map_err(|_| DataTooLarge(payload.len()))?;
    out.reserve(4 + payload.len());
    out.push(b'$');
    out.push(channel);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(payload);
    Ok(())
}

/// An interleaved payload longer than the 16-bit length field allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("interleaved payload of {0} bytes exceeds 65535")]
pub struct DataTooLarge(pub usize);

fn too_large(position: usize, limit: usize) -> Decoded {
    Decoded::Invalid(ParseError { position, kind: ParseErrorKind::TooLarge { limit }, cseq: None })
}

fn decode_data(buf: &[u8], start: usize, bound: usize) -> Decoded {
    let rest = &buf[start..];
    if rest.len() < 4 {
        return if start + 4 > bound { too_large(start, bound) } else { Decoded::Incomplete };
    }
    let len = usize::from(u16::from_be_bytes([rest[2], rest[3]]));
    let total = start + 4 + len;
    if total > bound {
        return too_large(start, bound);
    }
    if buf.len() < total {
        return Decoded::Incomplete;
    }
    let payload = rest[4..4 + len].to_vec();
    Decoded::Frame(Frame::Data { channel: rest[1], payload }, total)
}

fn decode_text(buf: &[u8], start: usize, limit: usize) -> Decoded {
    let rest = &buf[start..];
    match Message::<Vec<u8>>::parse(rest) {
        Ok((msg, used)) => {
            let total = start + used;
            if total > limit {
                let mut err = diagnose(buf, start);
                err.kind = ParseErrorKind::TooLarge { limit };
                err.position = start;
                return Decoded::Invalid(err);
            }
            let frame = match msg {
                Message::Request(req) => {
                    if matches!(req.method(), Method::Extension(m) if m.is_empty()) {
                        return Decoded::Invalid(diagnose(buf, start));
                    }
                    Frame::Request(req)
                }
                Message::Response(resp) => Frame::Response(resp),
                Message::Data(data) => {
                    Frame::Data { channel: data.channel_id(), payload: data.into_body() }
                }
            };
            Decoded::Frame(frame, total)
        }
        Err(rtsp_types::ParseError::Incomplete(_)) => {
            if buf.len() >= limit {
                let mut err = diagnose(buf, start);
                err.kind = ParseErrorKind::TooLarge { limit };
                err.position = start;
                return Decoded::Invalid(err);
            }
            // The header block is complete: refuse now a body that can never fit.
            if let Some(head) = find(rest, b"\r\n\r\n") {
                let head_len = head + 4;
                let fits = content_length(&rest[..head_len])
                    .is_none_or(|cl| cl.saturating_add(start + head_len) <= limit);
                if !fits {
                    let mut err = diagnose(buf, start);
                    err.kind = ParseErrorKind::TooLarge { limit };
                    err.position = start;
                    return Decoded::Invalid(err);
                }
            }
            Decoded::Incomplete
        }
        Err(rtsp_types::ParseError::Error) => Decoded::Invalid(diagnose(buf, start)),
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The header lines of a message head (after the start line), without line terminators.
fn header_lines(head: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    let mut off = 0;
    let mut first = true;
    std::iter::from_fn(move || {
        loop {
            if off >= head.len() {
                return None;
            }
            let end = find(&head[off..], b"\r\n").map_or(head.len(), |e| off + e);
            let line = (off, &head[off..end]);
            off = end + 2;
            if first {
                first = false;
                continue;
            }
            if line.1.is_empty() {
                off = head.len();
                return None;
            }
            return Some(line);
        }
    })
}

fn header_value<'a>(line: &'a [u8], name: &str) -> Option<&'a str> {
    let colon = line.iter().position(|&b| b == b':')?;
    let (n, v) = (&line[..colon], &line[colon + 1..]);
    if !n.eq_ignore_ascii_case(name.as_bytes()) {
        return None;
    }
    std::str::from_utf8(v).ok().map(str::trim)
}

fn content_length(head: &[u8]) -> Option<usize> {
    header_lines(head).find_map(|(_, l)| header_value(l, "Content-Length")?.parse().ok())
}

fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Finds out why rtsp-types refused the message at `buf[start..]`.
fn diagnose(buf: &[u8], start: usize) -> ParseError {
    let rest = &buf[start..];
    let head_end = find(rest, b"\r\n\r\n").map_or(rest.len(), |e| e + 4);
    let head = &rest[..head_end];
    let cseq = header_lines(head)
        .find_map(|(_, l)| header_value(l, "CSeq"))
        .filter(|v| !v.is_empty() && v.len() <= 19 && v.bytes().all(|b| b.is_ascii_digit()))
        .map(str::to_owned);
    let err = |off: usize, kind| ParseError { position: start + off, kind, cseq: cseq.clone() };

    if let Some(lf) =
        head.iter().enumerate().position(|(i, &b)| b == b'\n' && (i == 0 || head[i - 1] != b'\r'))
    {
        return err(lf, ParseErrorKind::BareLineFeed);
    }
    let line_end = find(head, b"\r\n").unwrap_or(head.len());
    let line = &head[..line_end];
    let mut parts = line.splitn(3, |&b| b == b' ');
    let (first, second, third) = (parts.next(), parts.next(), parts.next());
    if line.starts_with(b"RTSP/") {
        let version = first.unwrap_or_default();
        if !is_known_version(version) {
            return err(0, version_kind(version));
        }
        return err(0, ParseErrorKind::BadStartLine);
    }
    let (Some(method), Some(uri), Some(version)) = (first, second, third) else {
        return err(0, ParseErrorKind::BadStartLine);
    };
    if method.is_empty() || !method.iter().all(|&b| is_token(b)) {
        return err(0, ParseErrorKind::BadStartLine);
    }
    let version_at = method.len() + uri.len() + 2;
    if !is_known_version(version) {
        return err(version_at, version_kind(version));
    }
    if uri != b"*" {
        let ok = std::str::from_utf8(uri).is_ok_and(|u| Url::parse(u).is_ok());
        if !ok {
            return err(method.len() + 1, ParseErrorKind::BadRequestUri);
        }
    }
    for (off, line) in header_lines(head) {
        if line.starts_with(b" ") || line.starts_with(b"\t") {
            continue;
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return err(off, ParseErrorKind::BadHeader);
        };
        if !line[..colon].iter().all(|&b| is_token(b)) || std::str::from_utf8(line).is_err() {
            return err(off, ParseErrorKind::BadHeader);
        }
        if let Some(v) = header_value(line, "Content-Length")
            && v.parse::<usize>().is_err()
        {
            return err(off, ParseErrorKind::BadContentLength);
        }
    }
    err(0, ParseErrorKind::Malformed)
}

fn is_known_version(v: &[u8]) -> bool {
    v == b"RTSP/1.0" || v == b"RTSP/2.0"
}

/// `RTSP/<digits>.<digits>` is a version we do not speak; anything else is a bad start line.
fn version_kind(v: &[u8]) -> ParseErrorKind {
    let well_formed = v.strip_prefix(b"RTSP/").and_then(|n| {
        let dot = n.iter().position(|&b| b == b'.')?;
        let (maj, min) = (&n[..dot], &n[dot + 1..]);
        let digits = |s: &[u8]| !s.is_empty() && s.len() <= 3 && s.iter().all(u8::is_ascii_digit);
        (digits(maj) && digits(min)).then_some(())
    });
    match well_formed {
        Some(()) => ParseErrorKind::UnsupportedVersion(String::from_utf8_lossy(v).into_owned()),
        None => ParseErrorKind::BadStartLine,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use rtsp_types::Version;

    use super::*;

    const OPTIONS: &[u8] = b"OPTIONS rtsp://127.0.0.1:8554/test.ts RTSP/1.0\r\nCSeq: 1\r\nUser-Agent: Lavf59.27.100\r\n\r\n";
    const SET_PARAMETER: &[u8] = b"SET_PARAMETER rtsp://127.0.0.1:8554/test.ts/ RTSP/1.0\r\nCSeq: 0\r\nSession: 4F2A9C1E77D0B3A5\r\nContent-Length: 10\r\n\r\nfoo: bar\r\n";

    fn data_frame() -> Vec<u8> {
        let mut v = Vec::new();
        encode_data(1, &[0x80, 0xC9, 0, 1, 0xDE, 0xAD, 0xBE, 0xEF], &mut v).unwrap();
        v
    }

    /// Feeds `chunks` one after the other as a reader would, decoding after each.
    fn stream(chunks: &[&[u8]], limits: &Limits) -> (Vec<Frame>, Option<ParseError>, usize) {
        let mut buf: Vec<u8> = Vec::new();
        let mut frames = Vec::new();
        for chunk in chunks {
            buf.extend_from_slice(chunk);
            loop {
                match decode(&buf, limits) {
                    Decoded::Frame(f, used) => {
                        assert!(used >= 1 && used <= buf.len());
                        frames.push(f);
                        buf.drain(..used);
                    }
                    Decoded::Incomplete => {
                        assert!(buf.len() < limits.incomplete_bound());
                        break;
                    }
                    Decoded::Invalid(e) => return (frames, Some(e), buf.len()),
                }
            }
        }
        (frames, None, buf.len())
    }

    #[test]
    fn every_split_point_gives_the_same_frames() {
        let mut input = Vec::new();
        input.extend_from_slice(OPTIONS);
        input.extend_from_slice(&data_frame());
        input.extend_from_slice(b"\r\n"); // stray empty line between messages
        input.extend_from_slice(SET_PARAMETER);
        let limits = Limits::default();
        let (whole, err, left) = stream(&[&input], &limits);
        assert!(err.is_none());
        assert_eq!(left, 0);
        assert_eq!(whole.len(), 3);
        match &whole[0] {
            Frame::Request(r) => {
                assert_eq!(r.method(), &Method::Options);
                assert_eq!(r.version(), Version::V1_0);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(&whole[1], Frame::Data { channel: 1, payload } if payload.len() == 8));
        match &whole[2] {
            Frame::Request(r) => {
                assert_eq!(r.body().as_slice(), b"foo: bar\r\n");
                assert_eq!(r.header(&rtsp_types::headers::CSEQ).unwrap().as_str(), "0");
            }
            other => panic!("{other:?}"),
        }
        for split in 0..=input.len() {
            let (frames, err, left) = stream(&[&input[..split], &input[split..]], &limits);
            assert!(err.is_none(), "split {split}: {err:?}");
            assert_eq!(left, 0, "split {split}");
            assert_eq!(frames, whole, "split {split}");
        }
        // and byte by byte
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(stream(&bytes, &limits).0, whole);
    }

    #[test]
    fn rtsp_2_0_is_surfaced_for_505() {
        let req = b"OPTIONS * RTSP/2.0\r\nCSeq: 1\r\n\r\n";
        match decode(req, &Limits::default()) {
            Decoded::Frame(Frame::Request(r), n) => {
                assert_eq!(n, req.len());
                assert_eq!(r.version(), Version::V2_0);
                assert!(r.request_uri().is_none());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn invalid_inputs_are_diagnosed() {
        let limits = Limits::default();
        let cases: &[(&[u8], usize, ParseErrorKind, Option<&str>)] = &[
            (
                b"OPTIONS * RTSP/1.1\r\nCSeq: 4\r\n\r\n",
                10,
                ParseErrorKind::UnsupportedVersion("RTSP/1.1".into()),
                Some("4"),
            ),
            (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 6, ParseErrorKind::BadStartLine, None),
            (
                b"OPTIONS /relative RTSP/1.0\r\nCSeq: 2\r\n\r\n",
                8,
                ParseErrorKind::BadRequestUri,
                Some("2"),
            ),
            (
                b"OPTIONS * RTSP/1.0\r\nCSeq: 3\r\nno colon here\r\n\r\n",
                29,
                ParseErrorKind::BadHeader,
                Some("3"),
            ),
            (
                b"OPTIONS * RTSP/1.0\r\nCSeq: 3\r\nContent-Length: lots\r\n\r\n",
                29,
                ParseErrorKind::BadContentLength,
                Some("3"),
            ),
            (b"OPTIONS * RTSP/1.0\nCSeq: 1\n\n", 18, ParseErrorKind::BareLineFeed, None),
            (b"\x00\x01\x02\x03", 0, ParseErrorKind::BadStartLine, None),
            (b"\r\n\r\n\xff\xfe garbage\r\n", 4, ParseErrorKind::BadStartLine, None),
            (b" * RTSP/1.0\r\nCSeq: 1\r\n\r\n", 0, ParseErrorKind::BadStartLine, Some("1")),
        ];
        for (input, pos, kind, cseq) in cases {
            match decode(input, &limits) {
                Decoded::Invalid(e) => {
                    assert_eq!(&e.kind, kind, "{}", String::from_utf8_lossy(input));
                    assert_eq!(e.position, *pos, "{}", String::from_utf8_lossy(input));
                    assert_eq!(e.cseq.as_deref(), *cseq, "{}", String::from_utf8_lossy(input));
                }
                other => panic!("{}: {other:?}", String::from_utf8_lossy(input)),
            }
        }
        let e = ParseError {
            position: 0,
            kind: ParseErrorKind::UnsupportedVersion("RTSP/1.1".into()),
            cseq: None,
        };
        assert_eq!(e.status(), StatusCode::RTSPVersionNotSupported);
    }

    #[test]
    fn oversized_messages_are_refused_early() {
        let limits = Limits { max_message_bytes: 200 };
        // Content-Length that cannot fit: refused as soon as the head is complete.
        let req = b"SET_PARAMETER * RTSP/1.0\r\nCSeq: 9\r\nContent-Length: 100000\r\n\r\n";
        match decode(req, &limits) {
            Decoded::Invalid(e) => {
                assert_eq!(e.kind, ParseErrorKind::TooLarge { limit: 200 });
                assert_eq!(e.cseq.as_deref(), Some("9"));
                assert_eq!(e.status(), StatusCode::RequestMessageBodyTooLarge);
            }
            other => panic!("{other:?}"),
        }
        // A head that never ends.
        let mut endless = b"OPTIONS * RTSP/1.0\r\n".to_vec();
        while endless.len() < 199 {
            endless.extend_from_slice(b"X: y\r\n");
        }
        endless.truncate(199);
        assert_eq!(decode(&endless, &limits), Decoded::Incomplete);
        endless.push(b'x');
        assert!(matches!(decode(&endless, &limits), Decoded::Invalid(_)));
        // Interleaved frames are bounded by their own length field, not the message limit.
        let mut big = Vec::new();
        encode_data(0, &vec![0u8; 60_000], &mut big).unwrap();
        assert_eq!(decode(&big[..1000], &limits), Decoded::Incomplete);
        assert!(
            matches!(decode(&big, &limits), Decoded::Frame(Frame::Data { .. }, n) if n == big.len())
        );
        assert_eq!(encode_data(0, &vec![0u8; 70_000], &mut big), Err(DataTooLarge(70_000)));
        // Only empty lines.
        assert_eq!(decode(b"\r\n\r\n\r", &limits), Decoded::Incomplete);
        assert!(matches!(decode(&b"\r\n".repeat(100), &limits), Decoded::Invalid(_)));
    }

    #[test]
    fn responses_and_requests_round_trip() {
        let resp = Response::builder(Version::V1_0, StatusCode::Ok)
            .reason_phrase("OK")
            .header(rtsp_types::headers::CSEQ, "7")
            .build(b"v=0\r\n".to_vec());
        let mut out = Vec::new();
        encode_response(&resp, &mut out);
        assert!(out.starts_with(b"RTSP/1.0 200 OK\r\n"));
        match decode(&out, &Limits::default()) {
            Decoded::Frame(Frame::Response(r), n) => {
                assert_eq!(n, out.len());
                assert_eq!(r, resp);
            }
            other => panic!("{other:?}"),
        }
        let req = Request::builder(Method::Play, Version::V1_0)
            .request_uri(Url::parse("rtsp://h/a.ts/").unwrap())
            .header(rtsp_types::headers::CSEQ, "4")
            .header(rtsp_types::headers::RANGE, "npt=0.000-")
            .build(Vec::new());
        let mut out = Vec::new();
        encode_request(&req, &mut out);
        match decode(&out, &Limits::default()) {
            Decoded::Frame(Frame::Request(r), n) => {
                assert_eq!(n, out.len());
                assert_eq!(r, req);
            }
            other => panic!("{other:?}"),
        }
    }

    /// Decodes `input` to the end, checking the contract on every step.
    fn check_contract(input: &[u8], limits: &Limits) {
        let mut off = 0;
        let mut steps = 0;
        while off < input.len() {
            steps += 1;
            assert!(steps <= input.len() + 1, "decode loop does not progress");
            match decode(&input[off..], limits) {
                Decoded::Frame(_, used) => {
                    assert!(used >= 1 && off + used <= input.len());
                    off += used;
                }
                Decoded::Incomplete => {
                    assert!(input.len() - off < limits.incomplete_bound());
                    break;
                }
                Decoded::Invalid(e) => {
                    assert!(e.position <= input.len() - off);
                    break;
                }
            }
        }
    }

    fn message_fragments() -> impl Strategy<Value = Vec<u8>> {
        let pieces = prop::sample::select(vec![
            &b"OPTIONS * RTSP/1.0\r\n"[..],
            b"PLAY rtsp://h/a.ts/ RTSP/1.0\r\n",
            b"DESCRIBE rtsp://h/a?x=1 RTSP/2.0\r\n",
            b"RTSP/1.0 200 OK\r\n",
            b"CSeq: 1\r\n",
            b"CSeq: 0\r\n",
            b"Content-Length: 5\r\n",
            b"Content-Length: 99999999999999999999999\r\n",
            b"Session: 1234;timeout=60\r\n",
            b"X-Fold: a\r\n b\r\n",
            b"\r\n",
            b"\n",
            b"\r",
            b"$\x00\x00\x04abcd",
            b"$\x01\xff\xff",
            b"hello",
            b" ",
            b":",
            b"\xc3\x28",
        ]);
        prop::collection::vec(pieces, 0..24).prop_map(|v| v.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        #[test]
        fn random_bytes_never_panic(input in prop::collection::vec(any::<u8>(), 0..2048)) {
            check_contract(&input, &Limits::default());
            check_contract(&input, &Limits { max_message_bytes: 64 });
        }

        #[test]
        fn malformed_messages_never_panic(input in message_fragments()) {
            check_contract(&input, &Limits::default());
            check_contract(&input, &Limits { max_message_bytes: 100 });
        }

        #[test]
        fn mutated_valid_messages_never_panic(
            pos in 0usize..256,
            byte in any::<u8>(),
            cut in 0usize..256,
        ) {
            let mut input = [OPTIONS, SET_PARAMETER].concat();
            let pos = pos % input.len();
            input[pos] = byte;
            input.truncate(input.len() - cut % input.len());
            check_contract(&input, &Limits::default());
        }
    }
}
