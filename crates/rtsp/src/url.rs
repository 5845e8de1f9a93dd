//! Lenient request-URI handling (RFC 2326 §3.2, §C.1.1, §C.3; RFC 3986 §5.2).
//!
//! Clients build control URLs differently: ffmpeg and live555 concatenate `Content-Base` and
//! the relative `a=control`, GStreamer resolves per RFC 3986, Debian's VLC (SAT>IP module)
//! invents `rtsp://host/stream=N`, and with query strings ffmpeg and GStreamer put the control
//! on opposite sides of the `?`. This module maps all of those onto one [`Target`]. It looks
//! only at the path and query, never at the host: the server answers for whatever name the
//! client used to reach it.
//!
//! Object names are a single path segment of `[A-Za-z0-9._-]+`. Percent-encoding is not
//! decoded; since `%` is not a name character, any escape (notably `%2F`, a smuggled slash) is
//! refused. In-session requests are routed by their `Session` header, not by this target; this
//! module does not know about sessions.

use rtsp_types::Url;

/// What a request-URI names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// A presentation's aggregate URL: `rtsp://h/NAME` or `rtsp://h/NAME/`, with or without a
    /// query.
    Presentation(String),
    /// A track of a presentation: `rtsp://h/NAME/trackID=N`, `rtsp://h/NAME/stream=N`
    /// (gst-rtsp-server style), `rtsp://h/NAME?q/trackID=N` (ffmpeg with a query) or
    /// `rtsp://h/NAME/trackID=N?q` (GStreamer with a query).
    Track(String, u32),
    /// The SAT>IP form `rtsp://h/stream=N` that Debian's VLC sends after a SETUP without
    /// `Content-Base`.
    SatIpStream(u32),
    /// `*` (RFC 2326 §10.1, OPTIONS).
    Star,
    /// The server root, `rtsp://h/`.
    Root,
}

impl Target {
    /// The presentation name, if the target names one.
    #[must_use]
    pub fn name(&self) -> Option<&str> {
        match self {
            Self::Presentation(n) | Self::Track(n, _) => Some(n),
            _ => None,
        }
    }
}

/// Why a request-URI names nothing we can serve (answered with 404).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    /// The path or query contains `%2F`: a percent-encoded slash is never part of a name.
    #[error("percent-encoded slash in {0:?}")]
    EncodedSlash(String),
    /// A path segment is not a valid object name (`[A-Za-z0-9._-]+`, not all dots).
    #[error("invalid object name {0:?}")]
    BadName(String),
    /// The path has a shape we do not serve (nested directories, a bare `trackID=N`, ...).
    #[error("unrecognised request path {0:?}")]
    UnknownForm(String),
}

/// Maps a request-URI (`None` is `*`) onto a [`Target`].
///
/// # Errors
///
/// [`UrlError`] when the path names no presentation, track or SAT>IP stream.
pub fn parse_target(uri: Option<&Url>) -> Result<Target, UrlError> {
    let Some(url) = uri else { return Ok(Target::Star) };
    let path = url.path();
    let query = url.query().unwrap_or_default();
    if contains_encoded_slash(path) || contains_encoded_slash(query) {
        return Err(UrlError::EncodedSlash(url.as_str().to_owned()));
    }
    // ffmpeg appends `/trackID=N` to a Content-Base that carries a query: `?x=1/trackID=0`.
    let query_control = query.rsplit_once('/').and_then(|(_, tail)| parse_control(tail));
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let unknown = || UrlError::UnknownForm(url.as_str().to_owned());
    match segments.as_slice() {
        [] => match query_control {
            Some(Control::Stream(n)) => Ok(Target::SatIpStream(n)),
            _ => Ok(Target::Root),
        },
        [only] => match parse_control(only) {
            Some(Control::Stream(n)) => Ok(Target::SatIpStream(n)),
            Some(Control::Track(_)) => Err(unknown()),
            None => {
                let name = valid_name(only)?;
                Ok(match query_control {
                    Some(c) => Target::Track(name, c.index()),
                    None => Target::Presentation(name),
                })
            }
        },
        [name, control] => match parse_control(control) {
            Some(c) => Ok(Target::Track(valid_name(name)?, c.index())),
            None => Err(unknown()),
        },
        _ => Err(unknown()),
    }
}

/// The aggregate URL of presentation `name` as reached through `url`, with exactly one
/// trailing slash and no query or credentials: `rtsp://host:port/NAME/`. This is the
/// `Content-Base` we send (RFC 2326 §12.11): against it ffmpeg, GStreamer and live555 all resolve
/// `trackID=0` to the same `rtsp://host:port/NAME/trackID=0`.
#[must_use]
pub fn presentation_base(url: &Url, name: &str) -> String {
    let host = url.host_str().unwrap_or_default();
    match url.port() {
        Some(port) => format!("{}://{host}:{port}/{name}/", url.scheme()),
        None => format!("{}://{host}/{name}/", url.scheme()),
    }
}

/// Whether `name` is a valid object name: `[A-Za-z0-9._~-]+` (`~` joins a title to one of its
/// renditions: `movie~720p`) and not only dots.
#[must_use]
pub fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._~-".contains(&b))
        && !name.bytes().all(|b| b == b'.')
}

fn valid_name(name: &str) -> Result<String, UrlError> {
    if is_valid_name(name) { Ok(name.to_owned()) } else { Err(UrlError::BadName(name.to_owned())) }
}

fn contains_encoded_slash(s: &str) -> bool {
    s.as_bytes().windows(3).any(|w| w[0] == b'%' && w[1] == b'2' && (w[2] | 0x20) == b'f')
}

#[derive(Clone, Copy)]
enum Control {
    Track(u32),
    Stream(u32),
}

impl Control {
    fn index(self) -> u32 {
        match self {
            Self::Track(n) | Self::Stream(n) => n,
        }
    }
}

/// `trackID=N` (our SDP) or `stream=N` (gst-rtsp-server and SAT>IP).
fn parse_control(segment: &str) -> Option<Control> {
    let (key, value) = segment.split_once('=')?;
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u32 = value.parse().ok()?;
    if key.eq_ignore_ascii_case("trackID") {
        Some(Control::Track(n))
    } else if key.eq_ignore_ascii_case("stream") {
        Some(Control::Stream(n))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(s: &str) -> Result<Target, UrlError> {
        parse_target(Some(&Url::parse(s).unwrap()))
    }

    fn p(n: &str) -> Target {
        Target::Presentation(n.to_owned())
    }

    fn t(n: &str, i: u32) -> Target {
        Target::Track(n.to_owned(), i)
    }

    #[test]
    fn target_table() {
        let cases: &[(&str, Target)] = &[
            ("rtsp://127.0.0.1:8554/test.ts", p("test.ts")),
            ("rtsp://127.0.0.1:8554/test.ts/", p("test.ts")),
            ("rtsp://h/test.ts/trackID=0", t("test.ts", 0)),
            ("rtsp://h/test.ts/trackid=3", t("test.ts", 3)),
            ("rtsp://h/test/stream=0", t("test", 0)),
            ("rtsp://h/stream=0", Target::SatIpStream(0)),
            ("rtsp://h/stream=12", Target::SatIpStream(12)),
            ("rtsp://h/", Target::Root),
            ("rtsp://h", Target::Root),
            // query forms: ffmpeg appends after the query, GStreamer resolves before it
            ("rtsp://h/p?x=1", p("p")),
            ("rtsp://h/p/?x=1", p("p")),
            ("rtsp://h/p?x=1/trackID=0", t("p", 0)),
            ("rtsp://h/p/?x=1/trackID=0", t("p", 0)),
            ("rtsp://h/p/trackID=0?x=1", t("p", 0)),
            ("rtsp://h/p?a=b/c=d", p("p")),
            // other schemes (ffmpeg satip://) and odd slashes
            ("satip://h:8554/test.ts", p("test.ts")),
            ("rtsp://h//test.ts//", p("test.ts")),
            ("rtsp://user:pw@h/a-b_c.1", p("a-b_c.1")),
            // dot segments are removed by the URL parser (RFC 3986 §5.2.4), escaped or not
            ("rtsp://h/x/../a.ts", p("a.ts")),
            ("rtsp://h/%2e%2e", Target::Root),
        ];
        for (url, want) in cases {
            assert_eq!(target(url).as_ref(), Ok(want), "{url}");
        }
        assert_eq!(parse_target(None), Ok(Target::Star));
    }

    #[test]
    fn refused_forms() {
        for url in [
            "rtsp://h/a%2Fb",
            "rtsp://h/a%2fb/trackID=0",
            "rtsp://h/p?x=%2F",
            "rtsp://h/a%20b",
            "rtsp://h/a b",
            "rtsp://h/dir/sub/name",
            "rtsp://h/name/other",
            "rtsp://h/trackID=0",
            "rtsp://h/.../trackID=x",
            "rtsp://h/name/trackID=99999999999",
        ] {
            assert!(target(url).is_err(), "{url}: {:?}", target(url));
        }
        assert!(matches!(target("rtsp://h/a%2Fb"), Err(UrlError::EncodedSlash(_))));
        assert!(matches!(target("rtsp://h/caf%C3%A9"), Err(UrlError::BadName(_))));
    }

    #[test]
    fn base_has_one_trailing_slash_and_no_query() {
        let base = |s: &str, n: &str| presentation_base(&Url::parse(s).unwrap(), n);
        assert_eq!(base("rtsp://127.0.0.1:8554/test", "test"), "rtsp://127.0.0.1:8554/test/");
        assert_eq!(base("rtsp://127.0.0.1:8554/test///", "test"), "rtsp://127.0.0.1:8554/test/");
        assert_eq!(base("rtsp://h/p?x=1", "p"), "rtsp://h/p/");
        assert_eq!(base("rtsp://u:pw@[::1]:554/p", "p"), "rtsp://[::1]:554/p/");
    }

    #[test]
    fn names() {
        assert!(is_valid_name("a.ts"));
        assert!(is_valid_name("...a"));
        assert!(!is_valid_name(".."));
        assert!(!is_valid_name(""));
        assert!(!is_valid_name("a/b"));
    }
}
