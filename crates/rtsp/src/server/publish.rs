//! Publishing: one connection's ANNOUNCE, SETUP `mode=record` and RECORD (RFC 2326 §10.3,
//! §10.4, §10.11), sans-IO.
//!
//! Why a core of its own: a publisher is not a viewer. It sends the description (ANNOUNCE), sets
//! up each of its tracks to *send* (`mode=record` in `Transport`, §12.39), and its media comes in
//! on the connection (interleaved, §10.12) instead of going out. None of the play session's
//! state (positions, RTP-Info, pacing) applies, and the play session table must not hold a
//! publisher. So each publishing connection has one [`Publish`], fed by the connection's glue
//! and answering with responses and [`PublishStep`]s; what the feed is recorded into is the
//! glue's (`isochron_media::live`, the server's recorder).
//!
//! The dialog, as ffmpeg (`-f rtsp`) and GStreamer (`rtspclientsink`) speak it:
//!
//! 1. `ANNOUNCE rtsp://host/NAME` with `Content-Type: application/sdp` → [`Publish::announce`]
//!    parses the name and the description ([`crate::sdp::parse::Presentation`]); the glue checks the
//!    tracks can be stored and the name is free, then [`Publish::accept`] answers 200 (or
//!    [`Publish::refuse`] with the reason).
//! 2. `SETUP` on each track's control URL (the description's `a=control`, resolved against the
//!    ANNOUNCE URL, RFC 2326 §C.1.1) with `RTP/AVP/TCP;interleaved=N-M;mode=record`: the track's
//!    channels; or with `RTP/AVP;unicast;client_port=A-B;mode=record` (UDP): then
//!    [`PublishStep::SetupUdp`], and the glue binds the track's server ports and answers with
//!    [`Publish::finish_setup_udp`]. The first SETUP makes the session
//!    ([`Publish::handle_request`] takes its id from the caller, which draws it). Multicast is
//!    `461`.
//! 3. `RECORD` → [`PublishStep::Record`]: the glue admits the feed (its rate from `b=AS`) and
//!    answers with [`Publish::finish_record`]: 200, or 453 with the reason.
//! 4. Media: a `$`-frame on a track's RTP channel is that track's packet
//!    ([`Publish::track_of_channel`]); its RTCP channel carries the publisher's sender reports.
//! 5. `TEARDOWN` → 200 and [`PublishStep::End`]; the connection closing ends the feed the same
//!    way (the glue's).
//!
//! OPTIONS, GET_PARAMETER and SET_PARAMETER (keep-alives) are answered 200. PAUSE while
//! recording halts the feed (§10.6; GStreamer pauses before its TEARDOWN) and RECORD resumes it;
//! PLAY, DESCRIBE, and PAUSE before RECORD are 455.

use rtsp_types::headers::{CONTENT_TYPE, PUBLIC, SESSION, TRANSPORT};
use rtsp_types::{Method, Request, Response, StatusCode, Url, Version};

use super::{cseq_of, response_builder};
use crate::headers::session::parse_session_id;
use crate::headers::transport::{Lower, parse_transports};
use crate::sdp::parse::Presentation;
use crate::status::Refusal;
use crate::url::{Target, parse_target};

/// What a publishing connection answers to OPTIONS.
pub const PUBLISH_METHODS: &str =
    "OPTIONS, ANNOUNCE, SETUP, RECORD, PAUSE, TEARDOWN, GET_PARAMETER, SET_PARAMETER";

/// The response to an ANNOUNCE refused before there is a [`Publish`] (its
/// [`Publish::announce`] failed): the refusal's status and the request's CSeq.
#[must_use]
pub fn refuse_announce(
    req: &Request<Vec<u8>>,
    refusal: &Refusal,
    server_name: &str,
) -> Response<Vec<u8>> {
    let cseq = cseq_of(req).unwrap_or_default();
    response_builder(refusal.status(), &cseq, server_name).build(Vec::new())
}

/// Where a publisher is in its dialog.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PublishState {
    /// ANNOUNCE parsed, not yet accepted by the glue.
    Announcing,
    /// Announced: tracks may be set up.
    Announced,
    /// RECORD asked, the glue admitting it.
    Starting,
    /// Media flows.
    Recording,
    /// PAUSE while recording (RFC 2326 §10.6: the feed halts; a RECORD resumes it, on the
    /// write stream it has).
    Paused,
    /// TEARDOWN (or a refusal of RECORD): nothing more comes.
    Ended,
}

/// How a set-up track's packets come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Carried {
    /// On the connection, `$`-framed on these RTP and RTCP channels.
    Interleaved(u8, u8),
    /// Over UDP from the client's ports to the server's (RTP, RTCP each).
    Udp {
        /// The publisher's ports.
        client: (u16, u16),
        /// Ours.
        server: (u16, u16),
    },
}

/// The transport a SETUP asks for, of those served.
enum Wanted {
    Interleaved((u8, u8)),
    Udp((u16, u16)),
}

/// What the glue must do after a request.
#[derive(Debug)]
pub enum PublishStep {
    /// Send this response.
    Respond(Response<Vec<u8>>),
    /// RECORD: admit the feed, then call [`Publish::finish_record`] (which gives the response).
    Record,
    /// TEARDOWN: send this response; the feed has ended.
    End(Response<Vec<u8>>),
    /// SETUP of `track` over UDP from the client's `client_ports`: bind the server's ports for
    /// it, then call [`Publish::finish_setup_udp`] (which gives the response).
    SetupUdp {
        /// The track.
        track: usize,
        /// The publisher's RTP and RTCP ports.
        client_ports: (u16, u16),
    },
}

/// One publishing connection (see the module docs).
#[derive(Debug)]
pub struct Publish {
    server_name: String,
    /// The object name published to.
    name: String,
    /// The ANNOUNCE URL, against which the controls resolve.
    base: Url,
    presentation: Presentation,
    /// Per track: how its packets come, once set up.
    channels: Vec<Option<Carried>>,
    /// A UDP SETUP awaiting its server ports: the track, the client's ports, and the id the
    /// session takes if it is the first.
    pending_udp: Option<(usize, (u16, u16), String)>,
    session: Option<String>,
    state: PublishState,
    /// The CSeq of the request awaiting the glue (ANNOUNCE or RECORD).
    pending_cseq: String,
}

impl Publish {
    /// An ANNOUNCE (RFC 2326 §10.3) from a connection: the publisher of `NAME` with its
    /// description. `server_name` goes in every response's `Server`.
    ///
    /// # Errors
    ///
    /// A [`Refusal`]: no `CSeq` (400); a URL that names no object (404); a body that is not
    /// `application/sdp` or does not parse (400, naming the line).
    pub fn announce(req: &Request<Vec<u8>>, server_name: &str) -> Result<Self, Refusal> {
        let cseq = cseq_of(req).ok_or(Refusal::BadCSeq)?;
        let url = req.request_uri().ok_or_else(|| Refusal::BadRequest("ANNOUNCE *".into()))?;
        let Ok(Target::Presentation(name)) = parse_target(Some(url)) else {
            return Err(Refusal::NotFound(url.as_str().to_owned()));
        };
        let content_type =
            req.header(&CONTENT_TYPE).map(|v| v.as_str().trim().to_ascii_lowercase());
        if content_type.as_deref().is_none_or(|t| !t.starts_with("application/sdp")) {
            return Err(Refusal::BadRequest(format!(
                "ANNOUNCE of {name}: the body must be application/sdp, not {content_type:?}"
            )));
        }
        let text = std::str::from_utf8(req.body())
            .map_err(|_| Refusal::BadRequest(format!("ANNOUNCE of {name}: SDP is not UTF-8")))?;
        let presentation = Presentation::parse(text)
            .map_err(|e| Refusal::BadRequest(format!("ANNOUNCE of {name}: {e}")))?;
        Ok(Self {
            server_name: server_name.to_owned(),
            name,
            base: url.clone(),
            channels: vec![None; presentation.media.len()],
            pending_udp: None,
            presentation,
            session: None,
            state: PublishState::Announcing,
            pending_cseq: cseq,
        })
    }

    /// The object name published to.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The publisher's description.
    #[must_use]
    pub fn presentation(&self) -> &Presentation {
        &self.presentation
    }

    /// Where the dialog is.
    #[must_use]
    pub fn state(&self) -> PublishState {
        self.state
    }

    /// The session id, once a track is set up.
    #[must_use]
    pub fn session(&self) -> Option<&str> {
        self.session.as_deref()
    }

    /// The ANNOUNCE is accepted (the tracks can be stored, the name is the publisher's): 200.
    pub fn accept(&mut self) -> Response<Vec<u8>> {
        self.state = PublishState::Announced;
        let cseq = std::mem::take(&mut self.pending_cseq);
        self.builder(StatusCode::Ok, &cseq).build(Vec::new())
    }

    /// The ANNOUNCE or RECORD awaiting the glue is refused with `refusal` (ANNOUNCE: the
    /// publisher's dialog is over; RECORD: the feed ends).
    pub fn refuse(&mut self, refusal: &Refusal) -> Response<Vec<u8>> {
        self.state = PublishState::Ended;
        let cseq = std::mem::take(&mut self.pending_cseq);
        self.refusal(&cseq, refusal)
    }

    /// The glue admitted the RECORD (`Ok`) or not (`Err`, answered as [`Publish::refuse`]).
    pub fn finish_record(&mut self, admitted: Result<(), Refusal>) -> Response<Vec<u8>> {
        match admitted {
            Ok(()) => {
                self.state = PublishState::Recording;
                let cseq = std::mem::take(&mut self.pending_cseq);
                self.with_session(self.builder(StatusCode::Ok, &cseq)).build(Vec::new())
            }
            Err(r) => self.refuse(&r),
        }
    }

    /// The glue bound `server_ports` (RTP, RTCP) for the UDP SETUP awaiting them (`Err`: it
    /// could not; the SETUP is refused and the dialog goes on).
    pub fn finish_setup_udp(
        &mut self,
        server_ports: Result<(u16, u16), Refusal>,
    ) -> Response<Vec<u8>> {
        let cseq = std::mem::take(&mut self.pending_cseq);
        let Some((track, client, session)) = self.pending_udp.take() else {
            return self.refusal(&cseq, &Refusal::Internal("no UDP SETUP awaits ports".into()));
        };
        let server = match server_ports {
            Ok(p) => p,
            Err(r) => return self.refusal(&cseq, &r),
        };
        self.channels[track] = Some(Carried::Udp { client, server });
        self.session.get_or_insert(session);
        let reply = format!(
            "RTP/AVP/UDP;unicast;client_port={}-{};server_port={}-{};mode=record",
            client.0, client.1, server.0, server.1
        );
        self.with_session(self.builder(StatusCode::Ok, &cseq))
            .header(TRANSPORT, reply)
            .build(Vec::new())
    }

    /// How each track's packets come, by index (`None`: not set up).
    #[must_use]
    pub fn carried(&self) -> &[Option<Carried>] {
        &self.channels
    }

    /// The track whose RTP comes on interleaved channel `channel`, while recording.
    #[must_use]
    pub fn track_of_channel(&self, channel: u8) -> Option<usize> {
        if self.state != PublishState::Recording {
            return None;
        }
        self.channels
            .iter()
            .position(|c| matches!(c, Some(Carried::Interleaved(rtp, _)) if *rtp == channel))
    }

    /// The tracks set up, by index (a publisher may set up only some of those it announced).
    #[must_use]
    pub fn tracks_set_up(&self) -> Vec<usize> {
        (0..self.channels.len()).filter(|&i| self.channels[i].is_some()).collect()
    }

    /// A request after the ANNOUNCE; `new_session` is the id a first SETUP gives the session.
    pub fn handle_request(&mut self, req: &Request<Vec<u8>>, new_session: &str) -> PublishStep {
        let Some(cseq) = cseq_of(req) else {
            return PublishStep::Respond(self.refusal("", &Refusal::BadCSeq));
        };
        match self.dispatch(req, &cseq, new_session) {
            Ok(step) => step,
            Err(r) => PublishStep::Respond(self.refusal(&cseq, &r)),
        }
    }

    fn dispatch(
        &mut self,
        req: &Request<Vec<u8>>,
        cseq: &str,
        new_session: &str,
    ) -> Result<PublishStep, Refusal> {
        let state = |s: PublishState| match s {
            PublishState::Announcing => "Announcing",
            PublishState::Announced => "Ready",
            PublishState::Starting => "Starting",
            PublishState::Recording => "Recording",
            PublishState::Paused => "Paused",
            PublishState::Ended => "Ended",
        };
        let invalid = |method: &str, s| Refusal::NotValidInState {
            method: method.to_owned(),
            state: state(s),
        };
        if req.version() != Version::V1_0 {
            return Err(Refusal::VersionNotSupported("RTSP/2.0".to_owned()));
        }
        match req.method() {
            Method::Options => Ok(PublishStep::Respond(
                self.with_session(self.builder(StatusCode::Ok, cseq))
                    .header(PUBLIC, PUBLISH_METHODS)
                    .build(Vec::new()),
            )),
            Method::GetParameter | Method::SetParameter => {
                self.check_session(req)?;
                Ok(PublishStep::Respond(
                    self.with_session(self.builder(StatusCode::Ok, cseq)).build(Vec::new()),
                ))
            }
            Method::Setup => {
                if self.state != PublishState::Announced {
                    return Err(invalid("SETUP", self.state));
                }
                if self.session.is_some() {
                    self.check_session(req)?;
                }
                let url = req.request_uri().ok_or_else(|| Refusal::BadRequest("SETUP *".into()))?;
                let track = self
                    .track_of_url(url)
                    .ok_or_else(|| Refusal::NotFound(url.as_str().to_owned()))?;
                let value = req
                    .header(&TRANSPORT)
                    .ok_or(Refusal::Transport(crate::headers::transport::TransportError::Missing))?
                    .as_str()
                    .to_owned();
                let wanted = parse_transports(&value).into_iter().find_map(|s| {
                    let record = s.mode.as_deref() == Some("record");
                    if !record || s.multicast || s.malformed {
                        return None;
                    }
                    match s.lower {
                        Some(Lower::Tcp { .. }) => {
                            Some(Wanted::Interleaved(s.interleaved.unwrap_or((0, 1))))
                        }
                        Some(Lower::Udp(_)) => s.client_port.map(Wanted::Udp),
                        None => None,
                    }
                });
                let channels = match wanted {
                    Some(Wanted::Interleaved(c)) => c,
                    Some(Wanted::Udp(client)) => {
                        cseq.clone_into(&mut self.pending_cseq);
                        self.pending_udp = Some((track, client, new_session.to_owned()));
                        return Ok(PublishStep::SetupUdp { track, client_ports: client });
                    }
                    None => {
                        return Err(Refusal::Transport(
                            crate::headers::transport::TransportError::Unsupported(value),
                        ));
                    }
                };
                let taken = self.channels.iter().enumerate().any(|(i, c)| {
                    i != track
                        && matches!(c, Some(Carried::Interleaved(a, b))
                            if [*a, *b].contains(&channels.0))
                });
                if taken {
                    return Err(Refusal::BadRequest(format!(
                        "interleaved channel {} is another track's",
                        channels.0
                    )));
                }
                self.channels[track] = Some(Carried::Interleaved(channels.0, channels.1));
                self.session.get_or_insert_with(|| new_session.to_owned());
                let reply = format!(
                    "RTP/AVP/TCP;unicast;interleaved={}-{};mode=record",
                    channels.0, channels.1
                );
                Ok(PublishStep::Respond(
                    self.with_session(self.builder(StatusCode::Ok, cseq))
                        .header(TRANSPORT, reply)
                        .build(Vec::new()),
                ))
            }
            Method::Record if self.state == PublishState::Paused => {
                // Resumed: the feed was admitted and its recording goes on.
                self.check_session(req)?;
                self.state = PublishState::Recording;
                Ok(PublishStep::Respond(
                    self.with_session(self.builder(StatusCode::Ok, cseq)).build(Vec::new()),
                ))
            }
            Method::Pause
                if matches!(self.state, PublishState::Recording | PublishState::Paused) =>
            {
                // GStreamer's rtspclientsink pauses at the end of its stream, before TEARDOWN.
                self.check_session(req)?;
                self.state = PublishState::Paused;
                Ok(PublishStep::Respond(
                    self.with_session(self.builder(StatusCode::Ok, cseq)).build(Vec::new()),
                ))
            }
            Method::Record => {
                if self.state != PublishState::Announced || self.session.is_none() {
                    return Err(invalid("RECORD", self.state));
                }
                self.check_session(req)?;
                self.state = PublishState::Starting;
                cseq.clone_into(&mut self.pending_cseq);
                Ok(PublishStep::Record)
            }
            Method::Teardown => {
                self.check_session(req)?;
                let b = self.with_session(self.builder(StatusCode::Ok, cseq));
                self.state = PublishState::Ended;
                Ok(PublishStep::End(b.build(Vec::new())))
            }
            Method::Announce => Err(invalid("ANNOUNCE", self.state)),
            Method::Play | Method::Pause | Method::Describe => {
                Err(invalid(<&str>::from(req.method()), self.state))
            }
            other => Err(Refusal::NotImplemented(<&str>::from(other).to_owned())),
        }
    }

    /// The track a SETUP URL names: the media section whose control, resolved against the
    /// ANNOUNCE URL, is that URL (trailing slashes aside), or whose control is its last segment.
    fn track_of_url(&self, url: &Url) -> Option<usize> {
        let trim = |s: &str| s.trim_end_matches('/').to_owned();
        let want = trim(url.as_str());
        let mut base = self.base.clone();
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        self.presentation.media.iter().position(|m| {
            let Some(control) = m.control.as_deref() else { return false };
            let resolved = base.join(control).map(|u| trim(u.as_str()));
            resolved.is_ok_and(|r| r == want)
                || url.path().trim_end_matches('/').rsplit('/').next() == Some(control)
        })
    }

    /// A request in the session must name it (once there is one): 454 otherwise.
    fn check_session(&self, req: &Request<Vec<u8>>) -> Result<(), Refusal> {
        let Some(ours) = &self.session else { return Ok(()) };
        match req.header(&SESSION).map(|v| parse_session_id(v.as_str())) {
            Some(t) if t == ours => Ok(()),
            Some(t) => Err(Refusal::SessionNotFound(t.to_owned())),
            None => Err(Refusal::SessionNotFound(String::new())),
        }
    }

    fn builder(&self, status: StatusCode, cseq: &str) -> rtsp_types::ResponseBuilder {
        response_builder(status, cseq, &self.server_name)
    }

    fn with_session(&self, b: rtsp_types::ResponseBuilder) -> rtsp_types::ResponseBuilder {
        match &self.session {
            Some(s) => b.header(SESSION, s.as_str()),
            None => b,
        }
    }

    fn refusal(&self, cseq: &str, refusal: &Refusal) -> Response<Vec<u8>> {
        let mut b = self.builder(refusal.status(), cseq);
        if matches!(refusal, Refusal::NotImplemented(_)) {
            b = b.header(PUBLIC, PUBLISH_METHODS);
        }
        self.with_session(b).build(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use rtsp_types::headers::CSEQ;

    use super::*;

    /// ffmpeg 5.1's ANNOUNCE of `-c copy` from an MP4 with H.264 and AAC.
    const SDP: &str = "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=No Name\r\nc=IN IP4 127.0.0.1\r\n\
        t=0 0\r\na=tool:libavformat 59.27.100\r\nm=video 0 RTP/AVP 96\r\nb=AS:1500\r\n\
        a=rtpmap:96 H264/90000\r\na=fmtp:96 packetization-mode=1; \
        sprop-parameter-sets=Z2QAH6w=,aO48gA==; profile-level-id=64001F\r\n\
        a=control:streamid=0\r\nm=audio 0 RTP/AVP 97\r\nb=AS:128\r\n\
        a=rtpmap:97 MPEG4-GENERIC/48000/2\r\na=fmtp:97 profile-level-id=1;mode=AAC-hbr;\
        sizelength=13;indexlength=3;indexdeltalength=3; config=1190\r\n\
        a=control:streamid=1\r\n";

    fn request(
        method: Method,
        url: &str,
        cseq: u32,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Request<Vec<u8>> {
        let mut b = Request::builder(method, Version::V1_0)
            .request_uri(Url::parse(url).unwrap())
            .header(CSEQ, cseq.to_string());
        for (k, v) in headers {
            b = b.header(rtsp_types::HeaderName::try_from(*k).unwrap(), *v);
        }
        b.build(body.as_bytes().to_vec())
    }

    fn status(r: &Response<Vec<u8>>) -> u16 {
        r.status().into()
    }

    fn respond(step: PublishStep) -> Response<Vec<u8>> {
        match step {
            PublishStep::Respond(r) | PublishStep::End(r) => r,
            other => panic!("{other:?}"),
        }
    }

    /// ffmpeg's dialog: ANNOUNCE, SETUP of each track (interleaved), RECORD, media, TEARDOWN.
    #[test]
    fn ffmpegs_dialog_announces_sets_up_records_and_ends() {
        let url = "rtsp://127.0.0.1:8554/cam";
        let ann = request(Method::Announce, url, 2, &[("Content-Type", "application/sdp")], SDP);
        let mut p = Publish::announce(&ann, "isochron").unwrap();
        assert_eq!((p.name(), p.state()), ("cam", PublishState::Announcing));
        assert_eq!(p.presentation().bandwidth_kbps, Some(1628));
        assert_eq!(p.presentation().encodings(), "H264, MPEG4-GENERIC");
        let ok = p.accept();
        assert_eq!((status(&ok), ok.header(&CSEQ).unwrap().as_str()), (200, "2"));

        let setup = |track, cseq, session: Option<&str>, transport| {
            let mut h = vec![("Transport", transport)];
            if let Some(s) = session {
                h.push(("Session", s));
            }
            request(Method::Setup, &format!("{url}/streamid={track}"), cseq, &h, "")
        };
        let tcp0 = "RTP/AVP/TCP;unicast;interleaved=0-1;mode=record";
        let r = respond(p.handle_request(&setup(0, 3, None, tcp0), "S1"));
        assert_eq!(status(&r), 200);
        assert_eq!(r.header(&TRANSPORT).unwrap().as_str(), tcp0);
        assert_eq!(r.header(&SESSION).unwrap().as_str(), "S1");
        let tcp2 = "RTP/AVP/TCP;unicast;interleaved=2-3;mode=record";
        let r = respond(p.handle_request(&setup(1, 4, Some("S1"), tcp2), "S2"));
        assert_eq!((status(&r), r.header(&SESSION).unwrap().as_str()), (200, "S1"));
        assert_eq!(p.tracks_set_up(), [0, 1]);
        assert_eq!(p.track_of_channel(2), None, "not before RECORD");

        let rec =
            request(Method::Record, url, 5, &[("Session", "S1"), ("Range", "npt=0.000-")], "");
        assert!(matches!(p.handle_request(&rec, "x"), PublishStep::Record));
        assert_eq!(p.state(), PublishState::Starting);
        let r = p.finish_record(Ok(()));
        assert_eq!((status(&r), r.header(&CSEQ).unwrap().as_str()), (200, "5"));
        assert_eq!(
            (p.track_of_channel(0), p.track_of_channel(2), p.track_of_channel(1)),
            (Some(0), Some(1), None)
        );

        let keep = request(Method::GetParameter, url, 6, &[("Session", "S1")], "");
        assert_eq!(status(&respond(p.handle_request(&keep, "x"))), 200);
        // GStreamer pauses before its TEARDOWN; a RECORD resumes without another admission.
        let pause = request(Method::Pause, url, 8, &[("Session", "S1")], "");
        assert_eq!(status(&respond(p.handle_request(&pause, "x"))), 200);
        assert_eq!((p.state(), p.track_of_channel(0)), (PublishState::Paused, None));
        let rec = request(Method::Record, url, 9, &[("Session", "S1")], "");
        assert_eq!(status(&respond(p.handle_request(&rec, "x"))), 200);
        assert_eq!((p.state(), p.track_of_channel(0)), (PublishState::Recording, Some(0)));
        let td = request(Method::Teardown, url, 7, &[("Session", "S1")], "");
        assert!(matches!(p.handle_request(&td, "x"), PublishStep::End(r) if status(&r) == 200));
        assert_eq!(p.state(), PublishState::Ended);
    }

    #[test]
    fn a_track_set_up_over_udp_gets_the_ports_the_glue_bound() {
        let url = "rtsp://127.0.0.1:8554/cam";
        let ann = request(Method::Announce, url, 1, &[("Content-Type", "application/sdp")], SDP);
        let mut p = Publish::announce(&ann, "isochron").unwrap();
        p.accept();
        let udp = "RTP/AVP/UDP;unicast;client_port=5000-5001;mode=record";
        let setup =
            request(Method::Setup, &format!("{url}/streamid=0"), 2, &[("Transport", udp)], "");
        let step = p.handle_request(&setup, "S1");
        assert!(
            matches!(step, PublishStep::SetupUdp { track: 0, client_ports: (5000, 5001) }),
            "{step:?}"
        );
        // Ports that could not be bound: refused, and the dialog goes on.
        let r = p.finish_setup_udp(Err(Refusal::Unavailable("no port".into())));
        assert_eq!((status(&r), p.session()), (503, None));
        assert!(matches!(p.handle_request(&setup, "S1"), PublishStep::SetupUdp { .. }));
        let r = p.finish_setup_udp(Ok((7000, 7001)));
        assert_eq!((status(&r), r.header(&CSEQ).unwrap().as_str()), (200, "2"));
        assert_eq!(
            r.header(&TRANSPORT).unwrap().as_str(),
            "RTP/AVP/UDP;unicast;client_port=5000-5001;server_port=7000-7001;mode=record"
        );
        assert_eq!(p.session(), Some("S1"));
        assert_eq!(
            p.carried()[0],
            Some(Carried::Udp { client: (5000, 5001), server: (7000, 7001) })
        );
        assert_eq!(p.tracks_set_up(), [0]);
        // Its packets do not come on the connection.
        let rec = request(Method::Record, url, 3, &[("Session", "S1")], "");
        assert!(matches!(p.handle_request(&rec, "x"), PublishStep::Record));
        p.finish_record(Ok(()));
        assert_eq!(p.track_of_channel(0), None);
    }

    #[test]
    fn what_a_publisher_gets_wrong_is_refused_with_the_rfcs_status() {
        let url = "rtsp://h/cam";
        let sdp = [("Content-Type", "application/sdp")];
        // Not SDP; SDP that does not parse; a URL that names no object.
        let plain = request(Method::Announce, url, 1, &[("Content-Type", "text/plain")], SDP);
        assert_eq!(Publish::announce(&plain, "i").unwrap_err().status(), StatusCode::BadRequest);
        let bad = request(Method::Announce, url, 1, &sdp, "v=0\r\nm=video\r\n");
        let err = Publish::announce(&bad, "i").unwrap_err();
        assert!(err.to_string().contains("SDP line 2"), "{err}");
        let nested = request(Method::Announce, "rtsp://h/a/b/c", 1, &sdp, SDP);
        assert_eq!(Publish::announce(&nested, "i").unwrap_err().status(), StatusCode::NotFound);

        let mut p = Publish::announce(&request(Method::Announce, url, 1, &sdp, SDP), "i").unwrap();
        let early = request(
            Method::Setup,
            &format!("{url}/streamid=0"),
            2,
            &[("Transport", "RTP/AVP/TCP;interleaved=0-1;mode=record")],
            "",
        );
        assert_eq!(
            status(&respond(p.handle_request(&early, "S"))),
            455,
            "before the ANNOUNCE is accepted"
        );
        p.accept();
        // Playing transport, UDP without ports, multicast, and a track that was not announced.
        for (u, t, want) in [
            ("streamid=0", "RTP/AVP/TCP;interleaved=0-1", 461),
            ("streamid=0", "RTP/AVP;unicast;mode=record", 461),
            ("streamid=0", "RTP/AVP;multicast;client_port=5000-5001;mode=record", 461),
            ("streamid=9", "RTP/AVP/TCP;interleaved=0-1;mode=record", 404),
        ] {
            let r = request(Method::Setup, &format!("{url}/{u}"), 3, &[("Transport", t)], "");
            assert_eq!(status(&respond(p.handle_request(&r, "S"))), want, "{u} {t}");
        }
        let ok = request(
            Method::Setup,
            &format!("{url}/streamid=0"),
            4,
            &[("Transport", "RTP/AVP/TCP;interleaved=0-1;mode=record")],
            "",
        );
        assert_eq!(status(&respond(p.handle_request(&ok, "S"))), 200);
        // The other track on the same channels; RECORD on another session; PLAY.
        let clash = request(
            Method::Setup,
            &format!("{url}/streamid=1"),
            5,
            &[("Transport", "RTP/AVP/TCP;interleaved=0-1;mode=record"), ("Session", "S")],
            "",
        );
        assert_eq!(status(&respond(p.handle_request(&clash, "S"))), 400);
        let stranger = request(Method::Record, url, 6, &[("Session", "T")], "");
        assert_eq!(status(&respond(p.handle_request(&stranger, "S"))), 454);
        let play = request(Method::Play, url, 7, &[("Session", "S")], "");
        assert_eq!(status(&respond(p.handle_request(&play, "S"))), 455);
        // RECORD refused by admission: 453, and the feed is over.
        let rec = request(Method::Record, url, 8, &[("Session", "S")], "");
        assert!(matches!(p.handle_request(&rec, "S"), PublishStep::Record));
        let r = p.finish_record(Err(Refusal::NotEnoughBandwidth("disk 0 full".into())));
        assert_eq!((status(&r), p.state()), (453, PublishState::Ended));
    }
}
