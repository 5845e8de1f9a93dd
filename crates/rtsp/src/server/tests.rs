//! Tests of the session core: the table-driven client dialogs in `testdata/` (format in
//! `testdata/README.md`) and unit tests of what dialogs cannot express.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use isochron_base::{BitRate, Gsn, Instant, MediaTime, ObjectId, Pace, StreamId, TrackSeqs};
use rtsp_types::headers::CONTENT_LENGTH;
use rtsp_types::{HeaderName, Method, Request, Response, Url, Version};

use super::*;
use crate::codec::{self, Decoded, Frame, Limits};

const SECOND: u64 = 1_000_000_000;

struct FakeLibrary;

impl Library for FakeLibrary {
    fn lookup(&self, name: &str) -> Option<Presentation> {
        if name == "movie.mp4" {
            let track = |kind: &str, pt, encoding: &str, clock_rate| MediaTrack {
                kind: kind.into(),
                payload_type: pt,
                encoding: encoding.into(),
                clock_rate,
                channels: 0,
                fmtp: String::new(),
            };
            return Some(Presentation {
                object: ObjectId(9),
                name: name.to_owned(),
                duration: MediaTime::from_nanos(60 * SECOND),
                avg_bitrate: BitRate(3_000_000),
                tracks: vec![
                    track("video", 96, "H264", 90_000),
                    track("audio", 97, "mpeg4-generic", 48_000),
                ],
                ladder: Vec::new(),
                live: false,
            });
        }
        let (object, secs_ms, bps) = match name {
            "test.ts" => (7, 10_000, 2_000_000),
            // A rendition of `test.ts`, as `?rendition=360p` names it.
            "test.ts~360p" => (17, 10_000, 800_000),
            "movie.ts" => (8, 5_400_120, 4_000_000),
            _ => return None,
        };
        Some(Presentation {
            object: ObjectId(object),
            name: name.to_owned(),
            duration: MediaTime::from_nanos(secs_ms * 1_000_000),
            avg_bitrate: BitRate(bps),
            tracks: Vec::new(),
            ladder: Vec::new(),
            live: false,
        })
    }
}

/// A position at 100 packets per second.
fn pos(t: MediaTime) -> Position {
    Position::at(Gsn(t.as_nanos() / (SECOND / 100)), t)
}

/// The fake data plane: seeks to the whole second at or before the target, sends in real
/// (virtual) time, and stops at the end.
#[derive(Default)]
struct FakeGlue {
    /// Per stream: when it started, the first position, the end.
    playing: HashMap<StreamId, (Instant, Position, MediaTime)>,
    /// The first position of the last successful PLAY per session.
    first: HashMap<SessionId, Position>,
    /// The outcome to force on the next PLAY.
    next: Option<PlayOutcome>,
}

impl FakeGlue {
    fn play(&mut self, now: Instant, core: &ServerCore, action: &PlayAction) -> PlayOutcome {
        if let Some(forced) = self.next.take() {
            return forced;
        }
        let duration = core
            .session(&action.session)
            .map(|s| s.name())
            .and_then(|n| FakeLibrary.lookup(n))
            .unwrap()
            .duration;
        let first = match action.start {
            PlayStart::Seek(t) => pos(MediaTime::from_nanos(t.as_nanos() / SECOND * SECOND)),
            PlayStart::Resume(p) => p,
            PlayStart::Beginning => Position::START,
        };
        let end = action.end.unwrap_or(duration);
        self.playing.insert(action.stream, (now, first, end));
        self.first.insert(action.session.clone(), first);
        // Like the server: an open range unless the client asked to stop early; the sequence
        // offset unchanged.
        let seq_offset = core.session(&action.session).unwrap().seq_offset();
        PlayOutcome::Started {
            first,
            end: action.end.filter(|e| *e < duration),
            seq_offsets: vec![seq_offset],
            rates: Rates::NORMAL,
        }
    }

    fn pause(&mut self, now: Instant, action: &PauseAction) -> Position {
        let (since, first, end) =
            self.playing.remove(&action.stream).expect("pause of a stream never played");
        let elapsed = u64::try_from((now - since).as_nanos()).unwrap();
        let t = (first.time.as_nanos() + elapsed).min(end.as_nanos());
        pos(MediaTime::from_nanos(t / 1_000_000 * 1_000_000))
    }

    fn end_of_stream(&mut self, stream: StreamId) -> Position {
        let (_, _, end) = self.playing.remove(&stream).expect("eos of a stream never played");
        pos(end)
    }
}

struct Dialog {
    file: String,
    line: usize,
    core: ServerCore,
    glue: FakeGlue,
    now: Instant,
    vars: HashMap<String, String>,
    last: Option<Response<Vec<u8>>>,
    last_cseq: Option<String>,
    events: Vec<Event>,
}

fn conn(n: u64) -> ConnInfo {
    ConnInfo {
        id: ConnId(n),
        peer: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 40_000 + n as u16),
        local: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 8554),
        secure: false,
        user: None,
    }
}

/// Seconds with a decimal fraction, exactly.
fn parse_secs(s: &str) -> Duration {
    let (w, f) = s.split_once('.').unwrap_or((s, ""));
    let mut nanos = w.parse::<u64>().unwrap() * SECOND;
    for (i, d) in f.bytes().enumerate() {
        nanos += u64::from(d - b'0') * 10u64.pow(8 - i as u32);
    }
    Duration::from_nanos(nanos)
}

impl Dialog {
    fn at(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }

    fn subst(&self, s: &str) -> String {
        let mut out = s.to_owned();
        while let Some(i) = out.find("${") {
            let j = out[i..]
                .find('}')
                .map(|j| i + j)
                .unwrap_or_else(|| panic!("{}: unclosed ${{", self.at()));
            let (var, field) = out[i + 2..j].split_once('.').unwrap();
            let view = self.view(var);
            let value = match field {
                "ssrc" => format!("{:08X}", view.ssrc()),
                "stream" => view.stream().0.to_string(),
                other => panic!("{}: unknown field {other}", self.at()),
            };
            out.replace_range(i..=j, &value);
        }
        let mut names: Vec<&String> = self.vars.keys().collect();
        names.sort_by_key(|n| std::cmp::Reverse(n.len()));
        for name in names {
            out = out.replace(&format!("${name}"), &self.vars[name]);
        }
        out
    }

    fn view(&self, var: &str) -> SessionView<'_> {
        let id = self.vars.get(var).unwrap_or_else(|| panic!("{}: no variable {var}", self.at()));
        self.core
            .session(&SessionId::from_header(id))
            .unwrap_or_else(|| panic!("{}: session {var} is gone", self.at()))
    }

    fn drain_events(&mut self) {
        while let Some(e) = self.core.poll_event() {
            self.events.push(e);
        }
    }

    fn request(&mut self, conn_no: u64, text: &str) {
        let text = self.subst(text);
        let (head, body) = match text.split_once(" || ") {
            Some((h, b)) => (h, b.replace("\\r\\n", "\r\n")),
            None => (text.as_str(), String::new()),
        };
        let mut parts = head.split(" | ");
        let mut raw = format!("{}\r\n", parts.next().unwrap());
        for h in parts {
            raw.push_str(h);
            raw.push_str("\r\n");
        }
        if !body.is_empty() {
            raw.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        raw.push_str("\r\n");
        raw.push_str(&body);
        let req = match codec::decode(raw.as_bytes(), &Limits::default()) {
            Decoded::Frame(Frame::Request(req), n) if n == raw.len() => req,
            other => panic!("{}: request did not decode: {other:?}", self.at()),
        };
        self.last_cseq = req
            .header(&CSEQ)
            .map(|v| v.as_str().to_owned())
            .filter(|v| v.bytes().all(|b| b.is_ascii_digit()));
        let now = self.now;
        let resp = match self.core.handle_request(now, &conn(conn_no), &req, &FakeLibrary) {
            Handled::Respond(r) => r,
            Handled::Play(action) => {
                let outcome = self.glue.play(now, &self.core, &action);
                self.core.finish_play(now, action, outcome)
            }
            Handled::Pause(action) => {
                let at = self.glue.pause(now, &action);
                self.core.finish_pause(now, action, at)
            }
            Handled::Rate(action) => {
                let (pace, pacing) = (action.pace, action.pacing.unwrap_or(Pacing::Content));
                self.core.finish_rate(now, action, pace, pacing)
            }
        };
        self.check_invariants(&resp);
        self.last = Some(resp);
        self.drain_events();
    }

    /// Checks that hold for every response.
    fn check_invariants(&self, resp: &Response<Vec<u8>>) {
        let at = self.at();
        let get = |n: &HeaderName| resp.header(n).map(|v| v.as_str().to_owned());
        assert_eq!(resp.version(), Version::V1_0, "{at}");
        assert_eq!(get(&CSEQ), self.last_cseq, "{at}: CSeq echo");
        assert_eq!(get(&SERVER).as_deref(), Some("isochron/0.1"), "{at}");
        if let Some(s) = get(&SESSION) {
            let (id, timeout) = s.split_once(";timeout=").unwrap_or_else(|| panic!("{at}: {s}"));
            assert!(id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()), "{at}: {s}");
            assert!(timeout.parse::<u64>().is_ok(), "{at}: {s}");
        }
        if let Some(base) = get(&CONTENT_BASE) {
            assert!(base.ends_with('/') && !base.ends_with("//"), "{at}: {base}");
        }
        if !resp.body().is_empty() {
            assert_eq!(get(&CONTENT_LENGTH), Some(resp.body().len().to_string()), "{at}");
        }
        let mut wire = Vec::new();
        codec::encode_response(resp, &mut wire);
        match codec::decode(&wire, &Limits::default()) {
            Decoded::Frame(Frame::Response(back), n) => {
                assert_eq!(n, wire.len(), "{at}");
                assert_eq!(&back, resp, "{at}");
            }
            other => panic!("{at}: response does not round-trip: {other:?}"),
        }
    }

    fn expect(&mut self, spec: &str) {
        let at = self.at();
        let resp = self.last.clone().unwrap_or_else(|| panic!("{at}: no response to check"));
        let mut checks = spec.split(" | ");
        let code: u16 = checks.next().unwrap().trim().parse().unwrap();
        assert_eq!(u16::from(resp.status()), code, "{at}: status; response: {resp:?}");
        assert_eq!(resp.reason_phrase(), reason_phrase(resp.status()), "{at}");
        let checks: Vec<&str> = checks.map(str::trim).collect();
        let header = |name: &str| {
            let name = HeaderName::try_from(name.trim()).unwrap();
            resp.header(&name).map(|v| v.as_str().to_owned())
        };
        // captures first, so that later checks of the same line can use them
        for c in &checks {
            if let Some((name, var)) = c.split_once("=>") {
                let v = header(name).unwrap_or_else(|| panic!("{at}: no {name} to capture"));
                let v = v.split(';').next().unwrap().trim().to_owned();
                self.vars.insert(var.trim().to_owned(), v);
            }
        }
        for c in checks {
            if c.contains("=>") {
                continue;
            }
            let c = self.subst(c);
            if let Some(name) = c.strip_prefix('!') {
                assert_eq!(header(name), None, "{at}: {name} should be absent");
            } else if let Some(text) = c.strip_prefix("body~ ") {
                let body = String::from_utf8_lossy(resp.body());
                assert!(body.contains(text), "{at}: body lacks {text:?}:\n{body}");
            } else if let Some(url) = c.strip_prefix("RTP-Info@") {
                let id = SessionId::from_header(&header("Session").unwrap());
                let view = self.core.session(&id).unwrap();
                let first = self.glue.first[&id];
                let want = format!(
                    "url={url};seq={};rtptime={}",
                    rtp_seq(view.seq_offset(), first.gsn),
                    rtp_timestamp(view.rtp_ts_offset(), first.time)
                );
                assert_eq!(header("RTP-Info"), Some(want), "{at}");
            } else if let Some((name, text)) = c.split_once("~ ") {
                let v = header(name).unwrap_or_else(|| panic!("{at}: no {name}"));
                assert!(v.contains(text), "{at}: {name}: {v:?} lacks {text:?}");
            } else if let Some((name, value)) = c.split_once(": ") {
                assert_eq!(header(name).as_deref(), Some(value), "{at}: {name}");
            } else {
                panic!("{at}: bad check {c:?}");
            }
        }
    }

    fn input(&mut self, what: &str) {
        let now = self.now;
        let words: Vec<&str> = what.split_whitespace().collect();
        match words.as_slice() {
            ["timeout"] => {
                if let Some(t) = self.core.poll_timeout() {
                    assert!(t > Instant::ZERO);
                }
                self.core.handle_timeout(now);
                if let Some(t) = self.core.poll_timeout() {
                    assert!(t > now, "{}: poll_timeout {t:?} not after now", self.at());
                }
            }
            ["close", n] => self.core.handle_conn_closed(now, ConnId(n.parse().unwrap())),
            ["rtcp", var] => {
                let ssrc = self.view(var).ssrc();
                assert!(self.core.handle_rtcp(now, ssrc), "{}", self.at());
            }
            ["irtcp", n, ch] => {
                self.core.handle_interleaved_rtcp(
                    now,
                    ConnId(n.parse().unwrap()),
                    ch.parse().unwrap(),
                );
            }
            ["eos", var] => {
                let stream = self.view(var).stream();
                let at = self.glue.end_of_stream(stream);
                self.core.handle_end_of_stream(now, stream, at);
            }
            other => panic!("{}: bad input {other:?}", self.at()),
        }
        self.drain_events();
    }

    fn verify(&mut self, what: &str) {
        let at = self.at();
        let words: Vec<&str> = what.split_whitespace().collect();
        match words.as_slice() {
            ["closed", var, reason] => {
                let id = SessionId::from_header(&self.vars[*var]);
                let i = self
                    .events
                    .iter()
                    .position(|Event::Closed { session, .. }| *session == id)
                    .unwrap_or_else(|| {
                        panic!("{at}: no Closed event for {var}: {:?}", self.events)
                    });
                let Event::Closed { reason: got, stream, .. } = self.events.remove(i);
                assert_eq!(format!("{got:?}"), *reason, "{at}");
                assert!(self.core.session(&id).is_none(), "{at}");
                assert!(self.core.session_by_stream(stream).is_none(), "{at}");
            }
            ["none"] => assert!(self.events.is_empty(), "{at}: events {:?}", self.events),
            ["sessions", n] => {
                assert_eq!(self.core.session_count(), n.parse::<usize>().unwrap(), "{at}")
            }
            ["state", var, state] => {
                let view = self.view(var);
                assert_eq!(format!("{:?}", view.state()), *state, "{at}");
                assert_eq!(
                    self.core.session_by_stream(view.stream()).map(|v| v.id().clone()),
                    Some(view.id().clone()),
                    "{at}"
                );
            }
            ["udp", var, rtp, rtcp] => {
                let want = SessionTransport::Udp {
                    client_rtp: rtp.parse().unwrap(),
                    client_rtcp: rtcp.parse().unwrap(),
                    feedback: false,
                };
                assert_eq!(*self.view(var).transport(), want, "{at}");
            }
            other => panic!("{at}: bad verification {other:?}"),
        }
    }
}

fn run_dialog(file: &str, text: &str) {
    let file = file.to_owned();
    let mut config = ServerConfig::default();
    let mut d: Option<Dialog> = None;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (kind, rest) =
            line.split_once(": ").unwrap_or_else(|| panic!("{file}:{}: {line}", i + 1));
        if let Some(("K", _)) = Some((kind, ())) {
            assert!(d.is_none(), "{file}:{}: K: after the first step", i + 1);
            match rest.split_whitespace().collect::<Vec<_>>().as_slice() {
                ["max_sessions", n] => config.max_sessions = n.parse().unwrap(),
                ["timeout", s] => config.session_timeout = parse_secs(s),
                other => panic!("{file}:{}: bad config {other:?}", i + 1),
            }
            continue;
        }
        let d = d.get_or_insert_with(|| Dialog {
            file: file.clone(),
            line: 0,
            core: ServerCore::new(config.clone(), 42),
            glue: FakeGlue::default(),
            now: Instant::from_nanos(1_000 * SECOND),
            vars: HashMap::new(),
            last: None,
            last_cseq: None,
            events: Vec::new(),
        });
        d.line = i + 1;
        match kind {
            "C" => d.request(1, rest),
            c if c.starts_with('C') => d.request(c[1..].parse().unwrap(), rest),
            "S" => d.expect(rest),
            "T" => d.now = d.now + parse_secs(rest),
            "X" => d.input(rest),
            "V" => d.verify(rest),
            "G" => {
                let (what, reason) = rest.split_once(' ').unwrap();
                let reason = reason.to_owned();
                d.glue.next = Some(match what {
                    "reject" => PlayOutcome::Rejected { reason },
                    "fail" => PlayOutcome::Failed { reason },
                    other => panic!("{file}:{}: bad glue directive {other}", i + 1),
                });
            }
            other => panic!("{file}:{}: unknown line kind {other}", i + 1),
        }
    }
}

/// The dialogs, compiled in (the core's tests do no IO).
const DIALOGS: &[(&str, &str)] = &[
    ("ffmpeg_tcp.dialog", include_str!("testdata/ffmpeg_tcp.dialog")),
    ("ffmpeg_udp.dialog", include_str!("testdata/ffmpeg_udp.dialog")),
    ("ffmpeg_fallback.dialog", include_str!("testdata/ffmpeg_fallback.dialog")),
    ("ffmpeg_satip.dialog", include_str!("testdata/ffmpeg_satip.dialog")),
    ("gstreamer.dialog", include_str!("testdata/gstreamer.dialog")),
    ("vlc_satip.dialog", include_str!("testdata/vlc_satip.dialog")),
    ("live555_proxy.dialog", include_str!("testdata/live555_proxy.dialog")),
    ("query_urls.dialog", include_str!("testdata/query_urls.dialog")),
    ("errors.dialog", include_str!("testdata/errors.dialog")),
    ("limits.dialog", include_str!("testdata/limits.dialog")),
];

#[test]
fn client_dialogs() {
    for (file, text) in DIALOGS {
        run_dialog(file, text);
    }
}

// ---- unit tests of what dialogs do not express ----

fn request(method: Method, uri: Option<&str>, headers: &[(&str, &str)]) -> Request<Vec<u8>> {
    let mut b = Request::builder(method, Version::V1_0);
    if let Some(u) = uri {
        b = b.request_uri(Url::parse(u).unwrap());
    }
    for (n, v) in headers {
        b = b.header(HeaderName::try_from(*n).unwrap(), *v);
    }
    b.build(Vec::new())
}

fn respond(h: Handled) -> Response<Vec<u8>> {
    match h {
        Handled::Respond(r) => r,
        other => panic!("expected a response, got {other:?}"),
    }
}

fn setup(core: &mut ServerCore, now: Instant, c: u64, transport: &str) -> SessionId {
    let req = request(
        Method::Setup,
        Some("rtsp://127.0.0.1:8554/test.ts/trackID=0"),
        &[("CSeq", "1"), ("Transport", transport)],
    );
    let resp = respond(core.handle_request(now, &conn(c), &req, &FakeLibrary));
    assert_eq!(resp.status(), StatusCode::Ok);
    SessionId::from_header(resp.header(&SESSION).unwrap().as_str())
}

/// A presentation of two native tracks: one `m=` each, a SETUP per track into one session
/// (each its own SSRC), `RTP-Info` for every set-up track from its own offsets, per-track
/// positions and clocks; no third track; one transport kind per session.
#[test]
fn native_tracks_are_set_up_and_played_together() {
    let mut core = ServerCore::new(ServerConfig::default(), 11);
    let now = Instant::from_nanos(SECOND);
    let base = "rtsp://127.0.0.1:8554/movie.mp4";
    let req = request(Method::Describe, Some(base), &[("CSeq", "1")]);
    let resp = respond(core.handle_request(now, &conn(1), &req, &FakeLibrary));
    let sdp = String::from_utf8(resp.body().clone()).unwrap();
    assert!(sdp.contains("m=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\n"), "{sdp}");
    assert!(sdp.contains("m=audio 0 RTP/AVP 97\r\na=rtpmap:97 mpeg4-generic/48000\r\n"));
    assert!(sdp.contains("a=control:trackID=1\r\n"));

    let setup_track = |core: &mut ServerCore, n: u32, session: Option<&str>, t: &str| {
        let url = format!("{base}/trackID={n}");
        let mut headers = vec![("CSeq", "2"), ("Transport", t)];
        if let Some(s) = session {
            headers.push(("Session", s));
        }
        respond(core.handle_request(
            now,
            &conn(1),
            &request(Method::Setup, Some(&url), &headers),
            &FakeLibrary,
        ))
    };
    let resp = setup_track(&mut core, 0, None, "RTP/AVP;unicast;client_port=6000-6001");
    assert_eq!(resp.status(), StatusCode::Ok);
    let id = SessionId::from_header(resp.header(&SESSION).unwrap().as_str());
    let resp =
        setup_track(&mut core, 2, Some(id.as_str()), "RTP/AVP;unicast;client_port=6002-6003");
    assert_eq!(resp.status(), StatusCode::NotFound, "there is no third track");
    let resp = setup_track(&mut core, 1, Some(id.as_str()), "RTP/AVP/TCP;interleaved=2-3");
    assert_eq!(resp.status(), StatusCode::UnsupportedTransport, "one transport kind a session");
    let resp =
        setup_track(&mut core, 1, Some(id.as_str()), "RTP/AVP;unicast;client_port=6002-6003");
    assert_eq!(resp.status(), StatusCode::Ok);
    let view = core.session(&id).unwrap();
    let tracks: Vec<_> = view.tracks().map(|t| (t.index(), t.ssrc(), *t.transport())).collect();
    assert_eq!(tracks.len(), 2);
    assert_ne!(tracks[0].1, tracks[1].1, "an SSRC per track");
    assert!(
        matches!(tracks[1].2, SessionTransport::Udp { client_rtp, .. } if client_rtp.port() == 6002)
    );
    let (ts0, ts1) = {
        let v: Vec<_> = view.tracks().map(|t| t.rtp_ts_offset()).collect();
        (v[0], v[1])
    };
    let (ssrc0, ssrc1) = (tracks[0].1, tracks[1].1);

    let req = request(Method::Play, Some(base), &[("CSeq", "3"), ("Session", id.as_str())]);
    let Handled::Play(a) = core.handle_request(now, &conn(1), &req, &FakeLibrary) else {
        panic!("PLAY not handed to the glue")
    };
    let first = Position {
        gsn: Gsn(500),
        time: MediaTime::from_nanos(2 * SECOND),
        tracks: TrackSeqs::new(&[300, 200]),
    };
    let outcome = PlayOutcome::Started {
        first,
        end: None,
        seq_offsets: vec![10, 65_535],
        rates: Rates::NORMAL,
    };
    let resp = core.finish_play(now, a, outcome);
    let info = resp.header(&RTP_INFO).unwrap().as_str().to_owned();
    let expect = format!(
        "url={base}/trackID=0;seq=310;rtptime={},url={base}/trackID=1;seq=199;rtptime={}",
        ts0.wrapping_add(180_000),
        ts1.wrapping_add(96_000)
    );
    assert_eq!(info, expect);
    assert_eq!(
        core.session(&id).unwrap().tracks().map(|t| t.seq_offset()).collect::<Vec<_>>(),
        [10, 65_535]
    );
    // RTCP naming either track's SSRC is a sign of life; a TEARDOWN forgets both.
    assert!(core.handle_rtcp(now, ssrc1));
    let req = request(Method::Teardown, Some(base), &[("CSeq", "4"), ("Session", id.as_str())]);
    respond(core.handle_request(now, &conn(1), &req, &FakeLibrary));
    assert!(!core.handle_rtcp(now, ssrc0) && !core.handle_rtcp(now, ssrc1));
}

/// Interleaved channels may not collide between the tracks of one session either.
#[test]
fn native_tracks_need_their_own_channels() {
    let mut core = ServerCore::new(ServerConfig::default(), 12);
    let now = Instant::from_nanos(SECOND);
    let setup = |core: &mut ServerCore, n: u32, session: Option<&SessionId>, t: &str| {
        let url = format!("rtsp://h/movie.mp4/trackID={n}");
        let mut headers = vec![("CSeq", "2"), ("Transport", t)];
        let sid = session.map(|s| s.as_str().to_owned());
        if let Some(s) = &sid {
            headers.push(("Session", s));
        }
        respond(core.handle_request(
            now,
            &conn(1),
            &request(Method::Setup, Some(&url), &headers),
            &FakeLibrary,
        ))
    };
    let resp = setup(&mut core, 0, None, "RTP/AVP/TCP;interleaved=0-1");
    let id = SessionId::from_header(resp.header(&SESSION).unwrap().as_str());
    let resp = setup(&mut core, 1, Some(&id), "RTP/AVP/TCP;interleaved=0-1");
    assert_eq!(resp.status(), StatusCode::UnsupportedTransport);
    let resp = setup(&mut core, 1, Some(&id), "RTP/AVP/TCP;interleaved=2-3");
    assert_eq!(resp.status(), StatusCode::Ok);
    // A re-SETUP of track 0 keeps its own channels.
    let resp = setup(&mut core, 0, Some(&id), "RTP/AVP/TCP;interleaved=0-1");
    assert_eq!(resp.status(), StatusCode::Ok);
    assert_eq!(core.session(&id).unwrap().tracks().count(), 2);
}

#[test]
fn sender_contract_wraps() {
    assert_eq!(rtp_seq(0xFFFF, Gsn(1)), 0);
    assert_eq!(rtp_seq(10, Gsn(65_536 * 3 + 5)), 15);
    assert_eq!(rtp_timestamp(0, MediaTime::from_nanos(SECOND)), 90_000);
    assert_eq!(rtp_timestamp(u32::MAX, MediaTime::from_nanos(SECOND)), 89_999);
    // 2^32 ticks of 90 kHz later the timestamp is back where it started
    let wrap = MediaTime::from_90khz(1 << 32);
    assert_eq!(rtp_timestamp(12_345, wrap), 12_345);
    // exact for every time taken from the 90 kHz clock (as_90khz would lose ticks)
    for ticks in (0..1_000_000u64).chain([u64::from(u32::MAX), 1 << 40, (1 << 50) + 7]) {
        let want = 77u32.wrapping_add(ticks as u32);
        assert_eq!(rtp_timestamp(77, MediaTime::from_90khz(ticks)), want, "{ticks}");
    }
}

#[test]
fn same_seed_same_sessions() {
    let make = || {
        let mut core = ServerCore::new(ServerConfig::default(), 7);
        let id = setup(&mut core, Instant::ZERO, 1, "RTP/AVP;unicast;client_port=5000-5001");
        let v = core.session(&id).unwrap();
        (id.clone(), v.ssrc(), v.seq_offset(), v.rtp_ts_offset(), v.stream())
    };
    assert_eq!(make(), make());
    let mut other = ServerCore::new(ServerConfig::default(), 8);
    let id = setup(&mut other, Instant::ZERO, 1, "RTP/AVP;unicast;client_port=5000-5001");
    assert_ne!(id, make().0);
}

#[test]
fn sessions_get_distinct_ids_ssrcs_and_streams() {
    let mut core = ServerCore::new(ServerConfig::default(), 1);
    let mut seen = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..200 {
        let id = setup(&mut core, Instant::ZERO, i, "RTP/AVP/TCP;unicast;interleaved=0-1");
        let v = core.session(&id).unwrap();
        assert_ne!(v.ssrc(), 0);
        seen.0.push(id.clone());
        seen.1.push(v.ssrc());
        seen.2.push(v.stream());
        // Recordings take their stream ids from the same sequence.
        if i % 3 == 0 {
            let r = core.allocate_stream();
            assert!(core.session_by_stream(r).is_none());
            seen.2.push(r);
        }
    }
    seen.0.sort();
    seen.0.dedup();
    seen.1.sort_unstable();
    seen.1.dedup();
    seen.2.sort();
    seen.2.dedup();
    assert_eq!((seen.0.len(), seen.1.len(), seen.2.len()), (200, 200, 267));
}

#[test]
fn timeouts_follow_liveness() {
    let config =
        ServerConfig { session_timeout: Duration::from_secs(60), ..ServerConfig::default() };
    let mut core = ServerCore::new(config, 3);
    let t0 = Instant::from_nanos(5 * SECOND);
    assert_eq!(core.poll_timeout(), None);
    let udp = setup(&mut core, t0, 1, "RTP/AVP;unicast;client_port=5000-5001");
    let tcp = setup(&mut core, t0, 2, "RTP/AVP/TCP;unicast;interleaved=0-1");
    assert_eq!(core.poll_timeout(), Some(t0 + Duration::from_secs(60)));
    // RTCP naming the SSRC refreshes; an unknown SSRC is reported as such
    let ssrc = core.session(&udp).unwrap().ssrc();
    assert!(core.handle_rtcp(t0 + Duration::from_secs(30), ssrc));
    assert!(!core.handle_rtcp(t0, ssrc.wrapping_add(1)));
    assert_eq!(core.poll_timeout(), Some(t0 + Duration::from_secs(90)));
    // interleaved RTCP on another connection or channel does not touch anything
    core.handle_interleaved_rtcp(t0 + Duration::from_secs(40), ConnId(1), 1);
    core.handle_interleaved_rtcp(t0 + Duration::from_secs(40), ConnId(2), 7);
    assert_eq!(core.session(&tcp).unwrap().last_seen(), t0);
    core.handle_interleaved_rtcp(t0 + Duration::from_secs(40), ConnId(2), 1);
    assert_eq!(core.session(&tcp).unwrap().last_seen(), t0 + Duration::from_secs(40));
    // a request with the Session header refreshes, even one that is refused
    let req = request(
        Method::Play,
        Some("rtsp://h/test.ts/"),
        &[("CSeq", "2"), ("Session", udp.as_str()), ("Range", "npt=bad")],
    );
    let resp =
        respond(core.handle_request(t0 + Duration::from_secs(50), &conn(1), &req, &FakeLibrary));
    assert_eq!(resp.status(), StatusCode::InvalidRange);
    assert_eq!(core.poll_timeout(), Some(t0 + Duration::from_secs(110)));
    core.handle_timeout(t0 + Duration::from_secs(109));
    assert_eq!(core.poll_event(), None);
    core.handle_timeout(t0 + Duration::from_secs(110));
    assert!(
        matches!(core.poll_event(), Some(Event::Closed { session, reason: CloseReason::Timeout, .. }) if session == udp)
    );
    assert_eq!(core.poll_timeout(), None);
    // the TCP session outlives any timeout, and closes with its connection only
    core.handle_timeout(t0 + Duration::from_secs(100_000));
    core.handle_conn_closed(t0, ConnId(1));
    assert_eq!(core.poll_event(), None);
    core.handle_conn_closed(t0, ConnId(2));
    assert!(
        matches!(core.poll_event(), Some(Event::Closed { session, reason: CloseReason::ConnectionClosed, .. }) if session == tcp)
    );
    assert_eq!(core.session_count(), 0);
}

#[test]
fn paused_udp_sessions_live_longer() {
    let config = ServerConfig {
        session_timeout: Duration::from_secs(60),
        paused_session_timeout: Duration::from_secs(300),
        ..ServerConfig::default()
    };
    let mut core = ServerCore::new(config, 3);
    let t0 = Instant::from_nanos(5 * SECOND);
    let secs = |n: u64| t0 + Duration::from_secs(n);
    let udp = setup(&mut core, t0, 1, "RTP/AVP;unicast;client_port=5000-5001");
    let stream = core.session(&udp).unwrap().stream();
    let play = |core: &mut ServerCore, at: Instant, cseq: &str| {
        let req = request(
            Method::Play,
            Some("rtsp://h/test.ts/"),
            &[("CSeq", cseq), ("Session", udp.as_str())],
        );
        let Handled::Play(a) = core.handle_request(at, &conn(1), &req, &FakeLibrary) else {
            panic!("PLAY not handed to the glue")
        };
        let started = PlayOutcome::Started {
            first: Position::START,
            end: None,
            seq_offsets: vec![0],
            rates: Rates::NORMAL,
        };
        core.finish_play(at, a, started);
    };
    play(&mut core, t0, "3");
    assert_eq!(core.poll_timeout(), Some(secs(60)));
    // PAUSE: the longer timeout, counted from the PAUSE request.
    let req = request(
        Method::Pause,
        Some("rtsp://h/test.ts/"),
        &[("CSeq", "4"), ("Session", udp.as_str())],
    );
    let Handled::Pause(a) = core.handle_request(secs(10), &conn(1), &req, &FakeLibrary) else {
        panic!("PAUSE not handed to the glue")
    };
    core.finish_pause(secs(10), a, Position::START);
    assert_eq!(core.poll_timeout(), Some(secs(310)));
    core.handle_timeout(secs(200));
    assert_eq!(core.poll_event(), None, "a paused session outlives session_timeout");
    // Resuming returns to the playing timeout.
    play(&mut core, secs(250), "5");
    assert_eq!(core.poll_timeout(), Some(secs(310)));
    // The end of the media pauses the session: the longer timeout again, from the last sign
    // of life (the end itself is not one).
    core.handle_end_of_stream(secs(260), stream, Position::START);
    assert_eq!(core.poll_timeout(), Some(secs(550)));
    // Its client goes away (the RTSP connection closes): nobody will resume an ended stream,
    // so the session lives `session_timeout` from its last sign of life, not five minutes.
    core.handle_conn_closed(secs(270), ConnId(1));
    assert_eq!(core.poll_timeout(), Some(secs(310)));
    core.handle_timeout(secs(310));
    assert!(matches!(core.poll_event(), Some(Event::Closed { reason: CloseReason::Timeout, .. })));
    assert_eq!(core.session_count(), 0);
}

#[test]
fn a_playing_session_whose_client_reported_then_fell_silent_stops_early() {
    let mut core = ServerCore::new(ServerConfig::default(), 3);
    let t0 = Instant::from_nanos(5 * SECOND);
    let secs = |n: u64| t0 + Duration::from_secs(n);
    let udp = setup(&mut core, t0, 1, "RTP/AVP;unicast;client_port=5000-5001");
    let ssrc = core.session(&udp).unwrap().ssrc();
    let req = request(
        Method::Play,
        Some("rtsp://h/test.ts/"),
        &[("CSeq", "3"), ("Session", udp.as_str())],
    );
    let Handled::Play(a) = core.handle_request(t0, &conn(1), &req, &FakeLibrary) else {
        panic!("PLAY not handed to the glue")
    };
    let started = PlayOutcome::Started {
        first: Position::START,
        end: None,
        seq_offsets: vec![0],
        rates: Rates::NORMAL,
    };
    core.finish_play(t0, a, started);
    // Never a report: the plain timeout (a client that only sends keep-alive requests).
    assert_eq!(core.poll_timeout(), Some(secs(60)));
    // It reports, then falls silent: its stream stops 20 s after the last report.
    assert!(core.handle_rtcp(secs(5), ssrc));
    assert_eq!(core.poll_timeout(), Some(secs(25)));
    assert!(core.handle_rtcp(secs(10), ssrc));
    core.handle_timeout(secs(29));
    assert_eq!(core.poll_event(), None);
    core.handle_timeout(secs(30));
    assert!(matches!(core.poll_event(), Some(Event::Closed { reason: CloseReason::Silence, .. })));
    assert_eq!(core.session_count(), 0);
}

#[test]
fn a_paused_session_whose_client_left_keeps_the_paused_timeout_until_its_stream_ended() {
    let mut core = ServerCore::new(ServerConfig::default(), 3);
    let t0 = Instant::from_nanos(5 * SECOND);
    let udp = setup(&mut core, t0, 1, "RTP/AVP;unicast;client_port=5000-5001");
    // Not played to the end: a closed connection changes nothing (UDP sessions outlive it).
    core.handle_conn_closed(t0, ConnId(1));
    assert_eq!(core.poll_timeout(), Some(t0 + Duration::from_secs(60)));
    assert!(core.session(&udp).is_some());
}

#[test]
fn udp_sessions_survive_their_connection() {
    let mut core = ServerCore::new(ServerConfig::default(), 3);
    let id = setup(&mut core, Instant::ZERO, 1, "RTP/AVP;unicast;client_port=5000-5001");
    core.handle_conn_closed(Instant::ZERO, ConnId(1));
    assert!(core.session(&id).is_some());
    assert_eq!(core.poll_event(), None);
}

#[test]
fn actions_on_vanished_sessions_answer_454() {
    let mut core = ServerCore::new(ServerConfig::default(), 3);
    let id = setup(&mut core, Instant::ZERO, 1, "RTP/AVP/TCP;unicast;interleaved=0-1");
    let play = request(
        Method::Play,
        Some("rtsp://h/test.ts/"),
        &[("CSeq", "2"), ("Session", id.as_str())],
    );
    let Handled::Play(action) = core.handle_request(Instant::ZERO, &conn(1), &play, &FakeLibrary)
    else {
        panic!("no play action");
    };
    assert_eq!(action.start, PlayStart::Beginning);
    assert_eq!(action.end, None);
    assert_eq!(action.object, ObjectId(7));
    core.handle_conn_closed(Instant::ZERO, ConnId(1));
    let outcome = PlayOutcome::Started {
        first: Position::START,
        end: None,
        seq_offsets: vec![0],
        rates: Rates::NORMAL,
    };
    let resp = core.finish_play(Instant::ZERO, action, outcome);
    assert_eq!(resp.status(), StatusCode::SessionNotFound);
    assert_eq!(resp.header(&CSEQ).unwrap().as_str(), "2");
    assert!(resp.header(&SESSION).is_none());
}

#[test]
fn pause_and_end_of_stream_save_the_position() {
    let mut core = ServerCore::new(ServerConfig::default(), 3);
    let lib = FakeLibrary;
    let id = setup(&mut core, Instant::ZERO, 1, "RTP/AVP/TCP;unicast;interleaved=0-1");
    let session = [("CSeq", "3"), ("Session", id.as_str())];
    let play = request(Method::Play, Some("rtsp://h/x"), &session);
    let Handled::Play(a) = core.handle_request(Instant::ZERO, &conn(1), &play, &lib) else {
        panic!()
    };
    let stream = a.stream;
    let end = MediaTime::from_nanos(10 * SECOND);
    let started = PlayOutcome::Started {
        first: Position::START,
        end: None,
        seq_offsets: vec![0],
        rates: Rates::NORMAL,
    };
    let r = core.finish_play(Instant::ZERO, a, started);
    assert_eq!(r.status(), StatusCode::Ok);
    let pause = request(Method::Pause, Some("rtsp://h/x"), &session);
    let Handled::Pause(p) = core.handle_request(Instant::ZERO, &conn(1), &pause, &lib) else {
        panic!()
    };
    assert_eq!(p.stream, stream);
    let at = pos(MediaTime::from_nanos(3 * SECOND));
    let r = core.finish_pause(Instant::ZERO, p, at);
    assert_eq!(r.status(), StatusCode::Ok);
    assert_eq!(core.session(&id).unwrap().position(), Some(at));
    let Handled::Play(a) = core.handle_request(Instant::ZERO, &conn(1), &play, &lib) else {
        panic!()
    };
    assert_eq!(a.start, PlayStart::Resume(at));
    core.finish_play(
        Instant::ZERO,
        a,
        PlayOutcome::Started { first: at, end: None, seq_offsets: vec![0], rates: Rates::NORMAL },
    );
    // end of stream: paused at the end; a PLAY without Range resumes there
    let last = pos(end);
    core.handle_end_of_stream(Instant::ZERO, stream, last);
    assert_eq!(core.session(&id).unwrap().state(), SessionState::Paused);
    let Handled::Play(a) = core.handle_request(Instant::ZERO, &conn(1), &play, &lib) else {
        panic!()
    };
    assert_eq!(a.start, PlayStart::Resume(last));
    // an end of stream for an unknown stream, or a paused one, changes nothing
    core.handle_end_of_stream(Instant::ZERO, StreamId(999), last);
    core.handle_end_of_stream(Instant::ZERO, stream, Position::START);
    assert_eq!(core.session(&id).unwrap().position(), Some(last));
}

#[test]
fn invalid_bytes_get_a_response_with_cseq() {
    let core = ServerCore::new(ServerConfig::default(), 0);
    let Decoded::Invalid(err) =
        codec::decode(b"OPTIONS * RTSP/1.1\r\nCSeq: 12\r\n\r\n", &Limits::default())
    else {
        panic!();
    };
    let resp = core.invalid_response(&err);
    assert_eq!(resp.status(), StatusCode::RTSPVersionNotSupported);
    assert_eq!(resp.header(&CSEQ).unwrap().as_str(), "12");
    assert_eq!(resp.header(&CONNECTION).unwrap().as_str(), "close");
    let Decoded::Invalid(err) = codec::decode(b"\x16\x03\x01 hello tls", &Limits::default()) else {
        panic!();
    };
    let resp = core.invalid_response(&err);
    assert_eq!(resp.status(), StatusCode::BadRequest);
    assert!(resp.header(&CSEQ).is_none());
}

#[test]
fn server_name_is_sanitised() {
    for bad in ["WMServer/9.1", "wmserver", "", "a\r\nX-Evil: 1"] {
        let core = ServerCore::new(
            ServerConfig { server_name: bad.to_owned(), ..ServerConfig::default() },
            0,
        );
        assert_eq!(core.config().server_name, "isochron/0.1", "{bad:?}");
    }
    let core = ServerCore::new(
        ServerConfig { server_name: "media/2".to_owned(), ..ServerConfig::default() },
        0,
    );
    assert_eq!(core.config().server_name, "media/2");
}

#[test]
fn sdp_origin_is_the_local_address_canonicalised() {
    let mut core = ServerCore::new(ServerConfig::default(), 0);
    let mut c = conn(1);
    c.local = "[::ffff:10.1.2.3]:8554".parse().unwrap();
    let req = request(Method::Describe, Some("rtsp://10.1.2.3:8554/test.ts"), &[("CSeq", "1")]);
    let resp = respond(core.handle_request(Instant::ZERO, &c, &req, &FakeLibrary));
    let body = String::from_utf8(resp.body().clone()).unwrap();
    assert!(body.contains("o=- 7 1 IN IP4 10.1.2.3\r\n"), "{body}");
    assert!(body.contains("s=test.ts\r\n"), "{body}");
}

#[test]
fn a_rendition_query_pins_one_rendition_whose_name_the_content_base_carries() {
    let mut core = ServerCore::new(ServerConfig::default(), 0);
    let req =
        request(Method::Describe, Some("rtsp://h:1/test.ts?rendition=360p"), &[("CSeq", "1")]);
    let resp = respond(core.handle_request(Instant::ZERO, &conn(1), &req, &FakeLibrary));
    assert_eq!(resp.status(), StatusCode::Ok);
    let base = resp.header(&CONTENT_BASE).map(|v| v.as_str().to_owned());
    assert_eq!(base.as_deref(), Some("rtsp://h:1/test.ts~360p/"));
    assert!(String::from_utf8_lossy(resp.body()).contains("o=- 17 1 "));
    // ffmpeg's SETUP under a query (`?q/trackID=0`) and an unknown rung.
    let req = request(
        Method::Describe,
        Some("rtsp://h:1/test.ts?rendition=360p/trackID=0"),
        &[("CSeq", "2")],
    );
    let resp = respond(core.handle_request(Instant::ZERO, &conn(1), &req, &FakeLibrary));
    assert_eq!(resp.status(), StatusCode::Ok);
    let req = request(Method::Describe, Some("rtsp://h:1/test.ts?rendition=99p"), &[("CSeq", "3")]);
    let resp = respond(core.handle_request(Instant::ZERO, &conn(1), &req, &FakeLibrary));
    assert_eq!(resp.status(), StatusCode::NotFound);
}

#[test]
fn options_and_describe_do_not_create_sessions() {
    let mut core = ServerCore::new(ServerConfig::default(), 0);
    for req in [
        request(Method::Options, None, &[("CSeq", "0")]),
        request(Method::Describe, Some("rtsp://h:1/test.ts"), &[("CSeq", "1")]),
        request(Method::GetParameter, Some("rtsp://h:1/test.ts"), &[("CSeq", "2")]),
    ] {
        let resp = respond(core.handle_request(Instant::ZERO, &conn(1), &req, &FakeLibrary));
        assert_eq!(resp.status(), StatusCode::Ok);
    }
    assert_eq!(core.session_count(), 0);
    assert_eq!(core.poll_timeout(), None);
}

mod random_dialogs {
    use proptest::prelude::*;

    use super::*;

    const METHODS: &[&str] = &[
        "OPTIONS",
        "DESCRIBE",
        "SETUP",
        "PLAY",
        "PAUSE",
        "TEARDOWN",
        "GET_PARAMETER",
        "SET_PARAMETER",
        "ANNOUNCE",
        "RECORD",
    ];
    const URLS: &[&str] = &[
        "*",
        "rtsp://127.0.0.1:8554/test.ts",
        "rtsp://127.0.0.1:8554/test.ts/",
        "rtsp://127.0.0.1:8554/test.ts/trackID=0",
        "rtsp://127.0.0.1:8554/test.ts/trackID=1",
        "rtsp://127.0.0.1:8554/stream=3",
        "rtsp://127.0.0.1:8554/movie.ts?x=1/trackID=0",
        "rtsp://127.0.0.1:8554/nope",
    ];
    const TRANSPORTS: &[&str] = &[
        "RTP/AVP;unicast;client_port=5000-5001",
        "RTP/AVP/UDP;unicast;client_port=6000",
        "RTP/AVP/TCP;unicast;interleaved=0-1",
        "RTP/AVP/TCP;unicast;interleaved=2",
        "RTP/AVP;multicast",
        "garbage",
    ];
    const RANGES: &[&str] =
        &["npt=0.000-", "npt=3-", "npt=0-9.991", "npt=now-", "npt=-2", "npt=11-", "smpte=1-", "x"];

    /// One step: a request (method, url, session choice, transport, range, cseq choice, body),
    /// a connection, and how far the clock moves first.
    type Step = (usize, usize, usize, usize, usize, u8, bool, u8, u8);

    fn step() -> impl Strategy<Value = Step> {
        (
            0..METHODS.len(),
            0..URLS.len(),
            0usize..6,
            0..TRANSPORTS.len() + 1,
            0..RANGES.len() + 1,
            0u8..4,
            any::<bool>(),
            0u8..3,
            0u8..90,
        )
    }

    fn run(steps: &[Step], seed: u64) {
        let config = ServerConfig { max_sessions: 3, ..ServerConfig::default() };
        let mut core = ServerCore::new(config, seed);
        let mut now = Instant::from_nanos(SECOND);
        let mut ids: Vec<SessionId> = Vec::new();
        let mut closed: Vec<SessionId> = Vec::new();
        for (n, &(m, u, s, t, r, c, body, conn_no, dt)) in steps.iter().enumerate() {
            now = now + Duration::from_secs(u64::from(dt));
            let mut b = Request::builder(Method::from(METHODS[m]), Version::V1_0);
            if u > 0 {
                b = b.request_uri(Url::parse(URLS[u]).unwrap());
            }
            let cseq = match c {
                0 => None,
                1 => Some("abc".to_owned()),
                _ => Some(n.to_string()),
            };
            if let Some(cseq) = &cseq {
                b = b.header(CSEQ, cseq.as_str());
            }
            match ids.get(s) {
                Some(id) => b = b.header(SESSION, id.as_str()),
                None if s == 5 => b = b.header(SESSION, "FFFFFFFFFFFFFFFF"),
                None => {}
            }
            if let Some(tr) = TRANSPORTS.get(t) {
                b = b.header(TRANSPORT, *tr);
            }
            if let Some(ra) = RANGES.get(r) {
                b = b.header(RANGE, *ra);
            }
            let req = b.build(if body { b"x: y\r\n".to_vec() } else { Vec::new() });
            let c = conn(u64::from(conn_no));
            let resp = match core.handle_request(now, &c, &req, &FakeLibrary) {
                Handled::Respond(r) => r,
                Handled::Play(a) => {
                    let first = match a.start {
                        PlayStart::Seek(t) => pos(t),
                        PlayStart::Resume(p) => p,
                        PlayStart::Beginning => Position::START,
                    };
                    let seq_offset = core.session(&a.session).map_or(0, |v| v.seq_offset());
                    let started = PlayOutcome::Started {
                        first,
                        end: a.end,
                        seq_offsets: vec![seq_offset],
                        rates: Rates::NORMAL,
                    };
                    core.finish_play(now, a, started)
                }
                Handled::Pause(a) => core.finish_pause(now, a, pos(MediaTime::ZERO)),
                Handled::Rate(a) => {
                    let pace = a.pace;
                    core.finish_rate(now, a, pace, Pacing::Content)
                }
            };
            let echoed = resp.header(&CSEQ).map(|v| v.as_str().to_owned());
            if cseq.as_deref().is_some_and(|c| c != "abc") {
                assert_eq!(echoed, cseq);
            } else {
                assert_eq!(u16::from(resp.status()), 400);
            }
            if resp.status() == StatusCode::Ok
                && let Some(v) = resp.header(&SESSION)
            {
                let id = SessionId::from_header(v.as_str());
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
            let mut wire = Vec::new();
            codec::encode_response(&resp, &mut wire);
            assert!(matches!(
                codec::decode(&wire, &Limits::default()),
                Decoded::Frame(Frame::Response(back), k) if k == wire.len() && back == resp
            ));
            core.handle_timeout(now);
            assert!(core.poll_timeout().is_none_or(|t| t > now));
            assert!(core.session_count() <= 3);
            while let Some(Event::Closed { session, .. }) = core.poll_event() {
                assert!(!closed.contains(&session), "closed twice");
                closed.push(session);
            }
        }
        for i in 0..3 {
            core.handle_conn_closed(now, ConnId(i));
        }
        core.handle_timeout(now + Duration::from_secs(61));
        while let Some(Event::Closed { session, .. }) = core.poll_event() {
            assert!(!closed.contains(&session), "closed twice");
            closed.push(session);
        }
        assert_eq!(core.session_count(), 0);
        closed.sort();
        ids.sort();
        assert_eq!(closed, ids, "every session created is closed exactly once");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        #[test]
        fn random_request_sequences_keep_the_invariants(
            steps in prop::collection::vec(step(), 1..40),
            seed in any::<u64>(),
        ) {
            run(&steps, seed);
        }
    }
}

#[test]
fn one_client_cannot_fill_the_session_table() {
    let config = ServerConfig { max_sessions_per_client: 2, ..ServerConfig::default() };
    let mut core = ServerCore::new(config, 3);
    let udp = "RTP/AVP;unicast;client_port=5000-5001";
    let req = request(
        Method::Setup,
        Some("rtsp://127.0.0.1:8554/test.ts/trackID=0"),
        &[("CSeq", "9"), ("Transport", udp)],
    );
    let from = |ip: [u8; 4], n: u64| ConnInfo {
        peer: SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), 40_000 + n as u16),
        ..conn(n)
    };
    let mut status =
        |c: ConnInfo| respond(core.handle_request(Instant::ZERO, &c, &req, &FakeLibrary));
    for n in 0..2 {
        assert_eq!(status(from([10, 0, 0, 1], n)).status(), StatusCode::Ok);
    }
    // The third SETUP from that address, on any connection, is refused.
    let resp = status(from([10, 0, 0, 1], 5));
    assert_eq!(resp.status(), StatusCode::ServiceUnavailable);
    assert!(resp.header(&RETRY_AFTER).is_some());
    // Another address is served, and loopback (local tools) is exempt.
    assert_eq!(status(from([10, 0, 0, 2], 6)).status(), StatusCode::Ok);
    for n in 10..15 {
        assert_eq!(status(from([127, 0, 0, 1], n)).status(), StatusCode::Ok);
    }
}

/// `Scale` above 1 and `Speed` are handed to the data plane and answered with what it applied;
/// a reverse scale asks for nothing and is answered `Scale: 1`; a bad value is a 400.
#[test]
fn scale_and_speed_are_asked_of_the_data_plane_and_answered() {
    let mut core = ServerCore::new(ServerConfig::default(), 21);
    let now = Instant::from_nanos(SECOND);
    let udp = setup(&mut core, now, 1, "RTP/AVP;unicast;client_port=5000-5001");
    let play = |core: &mut ServerCore, headers: &[(&str, &str)]| {
        let mut h = vec![("CSeq", "3"), ("Session", udp.as_str())];
        h.extend_from_slice(headers);
        let req = request(Method::Play, Some("rtsp://h/test.ts/"), &h);
        core.handle_request(now, &conn(1), &req, &FakeLibrary)
    };
    let Handled::Play(a) = play(&mut core, &[("Scale", "2.0"), ("Range", "npt=1-")]) else {
        panic!("PLAY not handed to the glue")
    };
    assert_eq!((a.scale, a.speed), (Pace::from_multiplier(2.0), None));
    let rates = Rates { scale: a.scale, speed: None };
    let resp = core.finish_play(
        now,
        a,
        PlayOutcome::Started { first: Position::START, end: None, seq_offsets: vec![0], rates },
    );
    assert_eq!(resp.header(&SCALE).unwrap().as_str(), "2");
    assert!(resp.header(&SPEED).is_none());
    let Handled::Play(a) =
        play(&mut core, &[("Scale", "-4"), ("Speed", "1.5"), ("Range", "npt=0-")])
    else {
        panic!("PLAY not handed to the glue")
    };
    assert_eq!((a.scale, a.speed), (None, Pace::from_multiplier(1.5)));
    let rates = Rates { scale: None, speed: a.speed };
    let resp = core.finish_play(
        now,
        a,
        PlayOutcome::Started { first: Position::START, end: None, seq_offsets: vec![0], rates },
    );
    assert_eq!(resp.header(&SCALE).unwrap().as_str(), "1");
    assert_eq!(resp.header(&SPEED).unwrap().as_str(), "1.5");
    let Handled::Respond(resp) = play(&mut core, &[("Scale", "fast")]) else {
        panic!("a bad Scale is answered at once")
    };
    assert_eq!(resp.status(), StatusCode::BadRequest);
}

/// A request naming someone else's session (TEARDOWN, PAUSE, PLAY, SET_PARAMETER, a
/// keep-alive) from another address, another connection for an interleaved session, or another
/// user is 454 and leaves the session as it was, its liveness included; its owner still acts on it.
#[test]
fn a_session_answers_only_its_owner() {
    let config =
        ServerConfig { session_timeout: Duration::from_secs(60), ..ServerConfig::default() };
    let mut core = ServerCore::new(config, 11).with_id_key([7; 32]);
    let t0 = Instant::from_nanos(5 * SECOND);
    let user = |name: &str| Some(std::sync::Arc::<str>::from(name));
    let at = |ip: [u8; 4], n: u64, who: Option<std::sync::Arc<str>>| ConnInfo {
        peer: SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), 40_000 + n as u16),
        user: who,
        ..conn(n)
    };
    let setup_as = |core: &mut ServerCore, c: &ConnInfo, transport: &str| {
        let req = request(
            Method::Setup,
            Some("rtsp://h/test.ts/trackID=0"),
            &[("CSeq", "1"), ("Transport", transport)],
        );
        let resp = respond(core.handle_request(t0, c, &req, &FakeLibrary));
        assert_eq!(resp.status(), StatusCode::Ok);
        SessionId::from_header(resp.header(&SESSION).unwrap().as_str())
    };
    let udp_owner = at([10, 0, 0, 1], 1, None);
    let tcp_owner = at([10, 0, 0, 1], 2, None);
    let admin = at([10, 0, 0, 3], 3, user("admin"));
    let udp = setup_as(&mut core, &udp_owner, "RTP/AVP;unicast;client_port=5000-5001");
    let tcp = setup_as(&mut core, &tcp_owner, "RTP/AVP/TCP;unicast;interleaved=0-1");
    let admins = setup_as(&mut core, &admin, "RTP/AVP;unicast;client_port=5002-5003");
    let attempts = |id: &SessionId| {
        let with = |method, extra: &[(&str, &str)], body: &str| {
            let mut b = Request::builder(method, Version::V1_0)
                .request_uri(Url::parse("rtsp://h/test.ts/").unwrap())
                .header(CSEQ, "3")
                .header(SESSION, id.as_str());
            for (n, v) in extra {
                b = b.header(HeaderName::try_from(*n).unwrap(), *v);
            }
            b.build(body.as_bytes().to_vec())
        };
        [
            with(Method::Play, &[("Range", "npt=5-")], ""),
            with(Method::Pause, &[], ""),
            with(
                Method::SetParameter,
                &[("Content-Type", "text/parameters")],
                &format!("{RATE_PARAMETER}: 10\r\n"),
            ),
            with(Method::GetParameter, &[], ""),
            with(Method::Teardown, &[], ""),
        ]
    };
    let later = t0 + Duration::from_secs(30);
    let strangers = [
        (&udp, at([10, 0, 0, 2], 4, None)),
        (&udp, at([10, 0, 0, 1], 5, user("someone"))),
        (&tcp, at([10, 0, 0, 1], 6, None)),
        (&admins, at([10, 0, 0, 3], 7, user("reader"))),
        (&admins, at([10, 0, 0, 4], 8, user("admin"))),
    ];
    for (id, stranger) in &strangers {
        for req in attempts(id) {
            let resp = respond(core.handle_request(later, stranger, &req, &FakeLibrary));
            assert_eq!(
                resp.status(),
                StatusCode::SessionNotFound,
                "{} on {id} from {stranger:?}",
                <&str>::from(req.method())
            );
            assert!(resp.header(&SESSION).is_none(), "a refusal does not confirm the id");
        }
        let s = core.session(id).expect("the session is still there");
        assert_eq!(s.state(), SessionState::Ready);
        assert_eq!(s.last_seen(), t0, "a stranger's request does not keep it alive");
    }
    assert_eq!(core.poll_event(), None);
    // The owners still can: the address (any connection) for UDP, the connection for TCP, the
    // user for a user's session.
    for (id, owner) in [(&udp, at([10, 0, 0, 1], 9, None)), (&tcp, tcp_owner), (&admins, admin)] {
        let keepalive = request(
            Method::GetParameter,
            Some("rtsp://h/test.ts/"),
            &[("CSeq", "4"), ("Session", id.as_str())],
        );
        let resp = respond(core.handle_request(later, &owner, &keepalive, &FakeLibrary));
        assert_eq!(resp.status(), StatusCode::Ok, "{id}");
        assert_eq!(core.session(id).unwrap().last_seen(), later);
    }
}

/// Ids come from the id key: the same key gives the same ids (replay), another key others, and
/// the seed alone does not give them.
#[test]
fn session_ids_follow_the_id_key_not_the_seed() {
    let first = |core: ServerCore| {
        let mut core = core;
        setup(&mut core, Instant::ZERO, 1, "RTP/AVP;unicast;client_port=5000-5001")
    };
    let config = ServerConfig::default;
    let a = first(ServerCore::new(config(), 1).with_id_key([1; 32]));
    assert_eq!(a, first(ServerCore::new(config(), 2).with_id_key([1; 32])));
    assert_ne!(a, first(ServerCore::new(config(), 1).with_id_key([2; 32])));
    assert_ne!(a, first(ServerCore::new(config(), 1)));
}

/// A session set up and never played ends at `setup_timeout`, over UDP or TCP; a played one
/// does not.
#[test]
fn a_session_never_played_ends_at_the_setup_timeout() {
    let config =
        ServerConfig { setup_timeout: Some(Duration::from_secs(20)), ..ServerConfig::default() };
    let mut core = ServerCore::new(config, 5);
    let t0 = Instant::from_nanos(SECOND);
    let udp = setup(&mut core, t0, 1, "RTP/AVP;unicast;client_port=5000-5001");
    let tcp = setup(&mut core, t0, 2, "RTP/AVP/TCP;unicast;interleaved=0-1");
    let played = setup(&mut core, t0, 3, "RTP/AVP/TCP;unicast;interleaved=0-1");
    let play = request(
        Method::Play,
        Some("rtsp://h/test.ts/"),
        &[("CSeq", "2"), ("Session", played.as_str())],
    );
    let Handled::Play(action) = core.handle_request(t0, &conn(3), &play, &FakeLibrary) else {
        panic!("a play action")
    };
    let mut glue = FakeGlue::default();
    let outcome = glue.play(t0, &core, &action);
    assert_eq!(core.finish_play(t0, action, outcome).status(), StatusCode::Ok);
    assert_eq!(core.poll_timeout(), Some(t0 + Duration::from_secs(20)));
    core.handle_timeout(t0 + Duration::from_secs(19));
    assert_eq!(core.session_count(), 3);
    core.handle_timeout(t0 + Duration::from_secs(20));
    let mut closed: Vec<SessionId> = std::iter::from_fn(|| core.poll_event())
        .map(|e| match e {
            Event::Closed { session, reason: CloseReason::Timeout, .. } => session,
            other => panic!("{other:?}"),
        })
        .collect();
    closed.sort();
    let mut want = vec![udp, tcp];
    want.sort();
    assert_eq!(closed, want);
    assert!(core.session(&played).is_some());
}

/// Sessions count against `max_sessions_per_client` by network (an IPv6 /64 here), and a
/// session whose stream ended counts no more.
#[test]
fn sessions_count_by_network_until_their_stream_ends() {
    let config = ServerConfig {
        max_sessions_per_client: 2,
        client_prefix: (24, 64),
        ..ServerConfig::default()
    };
    let mut core = ServerCore::new(config, 6);
    let at = |ip: IpAddr, n: u64| ConnInfo { peer: SocketAddr::new(ip, 40_000), ..conn(n) };
    let req = request(
        Method::Setup,
        Some("rtsp://h/test.ts/trackID=0"),
        &[("CSeq", "1"), ("Transport", "RTP/AVP;unicast;client_port=5000-5001")],
    );
    let setup_from = |core: &mut ServerCore, ip: &str, n: u64| {
        let resp = respond(core.handle_request(
            Instant::ZERO,
            &at(ip.parse().unwrap(), n),
            &req,
            &FakeLibrary,
        ));
        (resp.status(), resp.header(&SESSION).map(|v| SessionId::from_header(v.as_str())))
    };
    // Two addresses of one /64, then a third: refused; another /64 is not.
    let (ok, first) = setup_from(&mut core, "2001:db8:0:1::1", 1);
    assert_eq!(ok, StatusCode::Ok);
    assert_eq!(setup_from(&mut core, "2001:db8:0:1::2", 2).0, StatusCode::Ok);
    assert_eq!(setup_from(&mut core, "2001:db8:0:1:ffff::3", 3).0, StatusCode::ServiceUnavailable);
    assert_eq!(setup_from(&mut core, "2001:db8:0:2::1", 4).0, StatusCode::Ok);
    // The same for IPv4 at /24.
    assert_eq!(setup_from(&mut core, "10.1.2.3", 5).0, StatusCode::Ok);
    assert_eq!(setup_from(&mut core, "10.1.2.4", 6).0, StatusCode::Ok);
    assert_eq!(setup_from(&mut core, "10.1.2.5", 7).0, StatusCode::ServiceUnavailable);
    assert_eq!(setup_from(&mut core, "10.1.3.5", 8).0, StatusCode::Ok);
    // The first /64 session plays to its end: its slot is free at once.
    let first = first.unwrap();
    let play = request(
        Method::Play,
        Some("rtsp://h/test.ts/"),
        &[("CSeq", "2"), ("Session", first.as_str())],
    );
    let owner = at("2001:db8:0:1::1".parse().unwrap(), 1);
    let Handled::Play(action) = core.handle_request(Instant::ZERO, &owner, &play, &FakeLibrary)
    else {
        panic!("a play action")
    };
    let stream = action.stream;
    let mut glue = FakeGlue::default();
    let outcome = glue.play(Instant::ZERO, &core, &action);
    assert_eq!(core.finish_play(Instant::ZERO, action, outcome).status(), StatusCode::Ok);
    let end = glue.end_of_stream(stream);
    core.handle_end_of_stream(Instant::from_nanos(10 * SECOND), stream, end);
    assert_eq!(setup_from(&mut core, "2001:db8:0:1::9", 9).0, StatusCode::Ok);
}

/// The last `reserved_sessions` slots are for authenticated users and loopback clients: an
/// anonymous crowd fills the table up to them and no further.
#[test]
fn the_reserved_sessions_are_for_authenticated_and_local_clients() {
    let config = ServerConfig { max_sessions: 4, reserved_sessions: 2, ..ServerConfig::default() };
    let mut core = ServerCore::new(config, 7);
    let req = request(
        Method::Setup,
        Some("rtsp://h/test.ts/trackID=0"),
        &[("CSeq", "1"), ("Transport", "RTP/AVP;unicast;client_port=5000-5001")],
    );
    let mut setup = |ip: &str, user: Option<&str>, n: u64| {
        let c = ConnInfo {
            peer: SocketAddr::new(ip.parse().unwrap(), 40_000),
            user: user.map(std::sync::Arc::from),
            ..conn(n)
        };
        respond(core.handle_request(Instant::ZERO, &c, &req, &FakeLibrary)).status()
    };
    assert_eq!(setup("10.0.0.1", None, 1), StatusCode::Ok);
    assert_eq!(setup("10.0.0.2", None, 2), StatusCode::Ok);
    assert_eq!(setup("10.0.0.3", None, 3), StatusCode::ServiceUnavailable, "the reserve");
    assert_eq!(setup("10.0.0.3", Some("ops"), 4), StatusCode::Ok);
    assert_eq!(setup("127.0.0.1", None, 5), StatusCode::Ok);
    assert_eq!(setup("10.0.0.4", Some("ops"), 6), StatusCode::ServiceUnavailable, "full");
}

#[test]
fn client_networks_clear_the_host_bits() {
    let net = |ip: &str, p| client_network(ip.parse().unwrap(), p).to_string();
    assert_eq!(net("10.1.2.3", (24, 64)), "10.1.2.0");
    assert_eq!(net("10.1.2.3", (32, 64)), "10.1.2.3");
    assert_eq!(net("10.1.2.3", (0, 64)), "0.0.0.0");
    assert_eq!(net("::ffff:10.1.2.3", (24, 64)), "10.1.2.0");
    assert_eq!(net("2001:db8:1:2:3:4:5:6", (32, 64)), "2001:db8:1:2::");
    assert_eq!(net("2001:db8:1:2:3:4:5:6", (32, 128)), "2001:db8:1:2:3:4:5:6");
}
