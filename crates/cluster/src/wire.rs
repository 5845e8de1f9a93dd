//! The control connection's wire format: length-prefixed frames of versioned messages.
//!
//! A frame is a 4-byte big-endian length followed by that many bytes: one format-version byte
//! ([`WIRE_VERSION`]) and a postcard encoding of a private mirror of [`Message`] made of plain
//! integers, strings and socket addresses. The mirror is what is pinned (golden bytes in the
//! tests); the typed [`Message`] may change representation freely. A reader refuses a version it
//! does not know, a frame over [`MAX_FRAME`], and trailing bytes, each with an error that says so
//! (a node talking to a node of another build learns why at once instead of misreading).
//!
//! Versions: 1 is every message of the first cluster build. 2 adds one variant, a reserve that
//! names members lost before the session opened ([`Message::Reserve`]'s `lost`). 3 adds runs of
//! objects with native tracks: a start with several tracks ([`RunSpec::tracks`]) and reports
//! whose positions carry each track's next packet. 4 adds the origin's word that a member is
//! lost to a run ([`Message::Lost`]) and that it is back ([`Message::Rejoin`]). 5 adds a
//! heartbeat that carries how far the sender's senders had got ([`Message::Ping`]'s
//! `sent_through_unix_ns`). 6 adds a member's word on its share after a takeover
//! ([`Message::Status`]). 7 adds a stop just before a packet ([`Message::Stop`]'s `before`: a
//! switch of rendition). 8 numbers a session's opens ([`Message::Reserve`]'s and
//! [`Message::Reserved`]'s `open`: a session reopened at another rendition tells a late answer
//! to its earlier open from the answer to this one). A frame is written at the lowest version that
//! expresses its message, so a version-1 node still reads everything but a degraded open and
//! native tracks, which it refuses by version.
//!
//! [`FrameReader`] reassembles frames from a byte stream in any chunking (sans-IO: the glue feeds
//! it what its socket read).

use std::collections::BTreeSet;
use std::net::SocketAddr;

use isochron_base::{
    BitRate, DiskId, Epoch, Gsn, MediaTime, NodeId, ObjectId, Pace, Position, RunId, StreamId,
    TrackSeqs,
};
use serde::{Deserialize, Serialize};

use crate::message::{
    Dest, Message, Refusal, Role, RunSpec, RunTracks, ShareKey, ShareReport, TrackSpec, WallAnchor,
};

/// The format version this build writes and the newest it reads.
pub const WIRE_VERSION: u8 = 8;

/// The largest frame body accepted (control messages are tens of bytes; a refusal's text is
/// the largest part).
pub const MAX_FRAME: usize = 64 * 1024;

/// Why bytes are not a message.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    /// The frame is empty (no version byte).
    #[error("empty control frame")]
    Empty,
    /// A version this build cannot read.
    #[error("control message version {found}, this build reads up to {WIRE_VERSION}")]
    Version {
        /// The version found.
        found: u8,
    },
    /// The body does not decode.
    #[error("control message does not decode: {0}")]
    Decode(String),
    /// Bytes after the message.
    #[error("{0} bytes after the control message")]
    Trailing(usize),
    /// A frame longer than [`MAX_FRAME`].
    #[error("control frame of {0} bytes (most {MAX_FRAME})")]
    TooLong(usize),
}

/// Encodes one message as a frame (length prefix included).
#[must_use]
pub fn encode_frame(msg: &Message) -> Vec<u8> {
    let w = W::from(msg);
    let version = w.version();
    let mut out = vec![0, 0, 0, 0, version];
    // Serialising plain structs into a growable Vec cannot fail (postcard fails only on buffer
    // exhaustion and unsupported types).
    out = postcard::to_extend(&w, out).expect("postcard into a Vec is infallible");
    let len = u32::try_from(out.len() - 4).unwrap_or(u32::MAX);
    out[..4].copy_from_slice(&len.to_be_bytes());
    out
}

/// Decodes a frame body (without its length prefix).
pub fn decode_body(body: &[u8]) -> Result<Message, WireError> {
    let (&version, rest) = body.split_first().ok_or(WireError::Empty)?;
    if version == 0 || version > WIRE_VERSION {
        return Err(WireError::Version { found: version });
    }
    let (w, trailing): (W, _) =
        postcard::take_from_bytes(rest).map_err(|e| WireError::Decode(e.to_string()))?;
    if version < w.version() {
        return Err(WireError::Decode(format!(
            "a version-{} message in a version-{version} frame",
            w.version()
        )));
    }
    if !trailing.is_empty() {
        return Err(WireError::Trailing(trailing.len()));
    }
    Ok(w.into())
}

/// Reassembles frames from a byte stream.
#[derive(Debug, Default)]
pub struct FrameReader {
    buf: Vec<u8>,
}

impl FrameReader {
    /// Appends bytes read from the stream.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete message, `Ok(None)` if more bytes are needed. An error is final: the
    /// stream is out of step and the connection must be dropped.
    pub fn next_message(&mut self) -> Result<Option<Message>, WireError> {
        let Some(prefix) = self.buf.get(..4) else { return Ok(None) };
        let len = u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]) as usize;
        if len > MAX_FRAME {
            return Err(WireError::TooLong(len));
        }
        if self.buf.len() < 4 + len {
            return Ok(None);
        }
        let msg = decode_body(&self.buf[4..4 + len]);
        self.buf.drain(..4 + len);
        msg.map(Some)
    }
}

/// A refusal as the wire carries it.
fn into_w(r: &Refusal) -> WRefusal {
    WRefusal { node: r.node.clone(), disk: r.disk.map(|d| d.0), reason: r.reason.clone() }
}

/// A refusal from the wire.
fn from_w(r: WRefusal) -> Result<(), Refusal> {
    Err(Refusal { node: r.node, disk: r.disk.map(DiskId), reason: r.reason })
}

// The pinned mirror. Never change a variant or field of a written version: add a version.

#[derive(Serialize, Deserialize)]
enum W {
    Hello { node: u16, name: String, incarnation: u64 },
    Ping { seq: u64, sent: u64 },
    Pong { seq: u64, ping_sent: u64, received: u64, sent: u64 },
    Reserve { key: WKey, object: u64, epoch: u32, avg: u64, peak: u64 },
    Reserved { key: WKey, refusal: Option<WRefusal> },
    Start { key: WKey, run: u64, spec: WSpec },
    Stop { key: WKey, run: u64, cutoff_ns: Option<u64> },
    Stopped { key: WKey, run: u64, report: WReport },
    Pace { key: WKey, run: u64, anchor: WAnchor, pace_ppm: u32 },
    Ended { key: WKey, run: u64, report: WReport },
    Failed { key: WKey, run: u64, error: String },
    Close { key: WKey },
    // Version 2.
    ReserveLost { key: WKey, object: u64, epoch: u32, avg: u64, peak: u64, lost: Vec<u16> },
    // Version 3.
    StartTracks { key: WKey, run: u64, spec: WSpec3 },
    StoppedTracks { key: WKey, run: u64, report: WReport3 },
    EndedTracks { key: WKey, run: u64, report: WReport3 },
    // Version 4.
    Lost { key: WKey, run: u64, node: u16, from_ns: u64 },
    Rejoin { key: WKey, run: u64, node: u16, at_ns: u64 },
    // Version 5.
    PingProgress { seq: u64, sent: u64, through: u64 },
    // Version 6.
    Status { key: WKey, run: u64, ended: Option<WReport3> },
    // Version 7.
    StopBefore { key: WKey, run: u64, cutoff_ns: Option<u64>, gsn: u64 },
    // Version 8.
    ReserveOpen { key: WKey, open: u32, obj: u64, ep: u32, avg: u64, peak: u64, lost: Vec<u16> },
    ReservedOpen { key: WKey, open: u32, refusal: Option<WRefusal> },
}

impl W {
    /// The first version with this variant.
    fn version(&self) -> u8 {
        match self {
            Self::ReserveLost { .. } => 2,
            Self::StartTracks { .. } | Self::StoppedTracks { .. } | Self::EndedTracks { .. } => 3,
            Self::Lost { .. } | Self::Rejoin { .. } => 4,
            Self::PingProgress { .. } => 5,
            Self::Status { .. } => 6,
            Self::StopBefore { .. } => 7,
            Self::ReserveOpen { .. } | Self::ReservedOpen { .. } => 8,
            _ => 1,
        }
    }
}

#[derive(Serialize, Deserialize, Clone)]
struct WPos3 {
    gsn: u64,
    time_ns: u64,
    tracks: Vec<u32>,
}

#[derive(Serialize, Deserialize)]
struct WReport3 {
    next: Option<WPos3>,
    last_sent: Option<WPos3>,
}

#[derive(Serialize, Deserialize)]
struct WTrack {
    ssrc: u32,
    seq_offset: u16,
    rtp_ts_offset: u32,
    clock_rate: u32,
    payload_type: u8,
    dest: WDest,
    enabled: bool,
}

#[derive(Serialize, Deserialize)]
struct WSpec3 {
    object: u64,
    epoch: u32,
    start: WPos3,
    end_ns: Option<u64>,
    anchor: Option<WAnchor>,
    pace_ppm: u32,
    tracks: Vec<WTrack>,
    trick_ppm: Option<u32>,
    role: WRole,
    lsn: bool,
}

impl From<Position> for WPos3 {
    fn from(p: Position) -> Self {
        Self { gsn: p.gsn.0, time_ns: p.time.as_nanos(), tracks: p.tracks.as_slice().to_vec() }
    }
}

impl From<WPos3> for Position {
    fn from(p: WPos3) -> Self {
        Self {
            gsn: Gsn(p.gsn),
            time: MediaTime::from_nanos(p.time_ns),
            tracks: TrackSeqs::new(&p.tracks),
        }
    }
}

impl From<ShareReport> for WReport3 {
    fn from(r: ShareReport) -> Self {
        Self { next: r.next.map(Into::into), last_sent: r.last_sent.map(Into::into) }
    }
}

impl From<WReport3> for ShareReport {
    fn from(r: WReport3) -> Self {
        Self { next: r.next.map(Into::into), last_sent: r.last_sent.map(Into::into) }
    }
}

fn dest_to_wire(d: Dest) -> WDest {
    match d {
        Dest::Udp { rtp, rtcp } => WDest::Udp { rtp, rtcp },
        Dest::Origin => WDest::Origin,
    }
}

fn dest_from_wire(d: WDest) -> Dest {
    match d {
        WDest::Udp { rtp, rtcp } => Dest::Udp { rtp, rtcp },
        WDest::Origin => Dest::Origin,
    }
}

fn role_to_wire(r: Role) -> WRole {
    match r {
        Role::Whole => WRole::Whole,
        Role::Share { rtcp } => WRole::Share { rtcp },
        Role::Feeder => WRole::Feeder,
    }
}

fn role_from_wire(r: WRole) -> Role {
    match r {
        WRole::Whole => Role::Whole,
        WRole::Share { rtcp } => Role::Share { rtcp },
        WRole::Feeder => Role::Feeder,
    }
}

/// Whether version 1's single-track spec says all of `s`: one MP2T track, no track positions,
/// no trick play.
fn fits_v1(s: &RunSpec) -> bool {
    matches!(s.tracks.as_slice(), [t] if t.is_mp2t())
        && s.start.tracks.is_empty()
        && s.trick.is_none()
}

/// Whether version 1's report says all of `r`: no track positions.
fn report_fits_v1(r: &ShareReport) -> bool {
    [r.next, r.last_sent].iter().flatten().all(|p| p.tracks.is_empty())
}

impl From<&RunSpec> for WSpec3 {
    fn from(s: &RunSpec) -> Self {
        Self {
            object: s.object.0,
            epoch: s.epoch.0,
            start: s.start.into(),
            end_ns: s.end.map(MediaTime::as_nanos),
            anchor: s.anchor.map(Into::into),
            pace_ppm: s.pace.ppm(),
            tracks: s
                .tracks
                .as_slice()
                .iter()
                .map(|t| WTrack {
                    ssrc: t.ssrc,
                    seq_offset: t.seq_offset,
                    rtp_ts_offset: t.rtp_ts_offset,
                    clock_rate: t.clock_rate,
                    payload_type: t.payload_type,
                    dest: dest_to_wire(t.dest),
                    enabled: t.enabled,
                })
                .collect(),
            trick_ppm: s.trick.map(Pace::ppm),
            role: role_to_wire(s.role),
            lsn: s.lsn,
        }
    }
}

impl From<WSpec3> for RunSpec {
    fn from(s: WSpec3) -> Self {
        let tracks: Vec<TrackSpec> = s
            .tracks
            .into_iter()
            .map(|t| TrackSpec {
                ssrc: t.ssrc,
                seq_offset: t.seq_offset,
                rtp_ts_offset: t.rtp_ts_offset,
                clock_rate: t.clock_rate,
                payload_type: t.payload_type,
                dest: dest_from_wire(t.dest),
                enabled: t.enabled,
            })
            .collect();
        Self {
            object: ObjectId(s.object),
            epoch: Epoch(s.epoch),
            start: s.start.into(),
            end: s.end_ns.map(MediaTime::from_nanos),
            anchor: s.anchor.map(Into::into),
            pace: Pace::from_ppm(s.pace_ppm),
            tracks: RunTracks::new(&tracks),
            trick: s.trick_ppm.map(Pace::from_ppm),
            role: role_from_wire(s.role),
            lsn: s.lsn,
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Copy)]
struct WKey {
    origin: u16,
    stream: u64,
}

#[derive(Serialize, Deserialize)]
struct WRefusal {
    node: String,
    disk: Option<u16>,
    reason: String,
}

#[derive(Serialize, Deserialize, Clone, Copy)]
struct WAnchor {
    unix_ns: u64,
    media_ns: u64,
}

#[derive(Serialize, Deserialize, Clone, Copy)]
struct WPos {
    gsn: u64,
    time_ns: u64,
}

#[derive(Serialize, Deserialize)]
struct WReport {
    next: Option<WPos>,
    last_sent: Option<WPos>,
}

#[derive(Serialize, Deserialize)]
enum WDest {
    Udp { rtp: SocketAddr, rtcp: SocketAddr },
    Origin,
}

#[derive(Serialize, Deserialize)]
enum WRole {
    Whole,
    Share { rtcp: bool },
    Feeder,
}

#[derive(Serialize, Deserialize)]
struct WSpec {
    object: u64,
    epoch: u32,
    start: WPos,
    end_ns: Option<u64>,
    anchor: Option<WAnchor>,
    pace_ppm: u32,
    seq_offset: u16,
    rtp_ts_offset: u32,
    ssrc: u32,
    dest: WDest,
    role: WRole,
    lsn: bool,
}

impl From<ShareKey> for WKey {
    fn from(k: ShareKey) -> Self {
        Self { origin: k.origin.0, stream: k.stream.0 }
    }
}

impl From<WKey> for ShareKey {
    fn from(k: WKey) -> Self {
        Self { origin: NodeId(k.origin), stream: StreamId(k.stream) }
    }
}

impl From<WallAnchor> for WAnchor {
    fn from(a: WallAnchor) -> Self {
        Self { unix_ns: a.unix_ns, media_ns: a.media.as_nanos() }
    }
}

impl From<WAnchor> for WallAnchor {
    fn from(a: WAnchor) -> Self {
        Self { unix_ns: a.unix_ns, media: MediaTime::from_nanos(a.media_ns) }
    }
}

impl From<Position> for WPos {
    fn from(p: Position) -> Self {
        Self { gsn: p.gsn.0, time_ns: p.time.as_nanos() }
    }
}

impl From<WPos> for Position {
    fn from(p: WPos) -> Self {
        Self::at(Gsn(p.gsn), MediaTime::from_nanos(p.time_ns))
    }
}

impl From<ShareReport> for WReport {
    fn from(r: ShareReport) -> Self {
        Self { next: r.next.map(Into::into), last_sent: r.last_sent.map(Into::into) }
    }
}

impl From<WReport> for ShareReport {
    fn from(r: WReport) -> Self {
        Self { next: r.next.map(Into::into), last_sent: r.last_sent.map(Into::into) }
    }
}

impl From<&RunSpec> for WSpec {
    fn from(s: &RunSpec) -> Self {
        Self {
            object: s.object.0,
            epoch: s.epoch.0,
            start: s.start.into(),
            end_ns: s.end.map(MediaTime::as_nanos),
            anchor: s.anchor.map(Into::into),
            pace_ppm: s.pace.ppm(),
            seq_offset: s.tracks.first().seq_offset,
            rtp_ts_offset: s.tracks.first().rtp_ts_offset,
            ssrc: s.tracks.first().ssrc,
            dest: dest_to_wire(s.tracks.first().dest),
            role: role_to_wire(s.role),
            lsn: s.lsn,
        }
    }
}

impl From<WSpec> for RunSpec {
    fn from(s: WSpec) -> Self {
        Self {
            object: ObjectId(s.object),
            epoch: Epoch(s.epoch),
            start: s.start.into(),
            end: s.end_ns.map(MediaTime::from_nanos),
            anchor: s.anchor.map(Into::into),
            pace: Pace::from_ppm(s.pace_ppm),
            tracks: RunTracks::one(TrackSpec::mp2t(
                s.ssrc,
                s.seq_offset,
                s.rtp_ts_offset,
                dest_from_wire(s.dest),
            )),
            trick: None,
            role: role_from_wire(s.role),
            lsn: s.lsn,
        }
    }
}

impl From<&Message> for W {
    fn from(m: &Message) -> Self {
        match m {
            Message::Hello { node, name, incarnation } => {
                Self::Hello { node: node.0, name: name.clone(), incarnation: *incarnation }
            }
            Message::Ping { seq, sent_unix_ns, sent_through_unix_ns: None } => {
                Self::Ping { seq: *seq, sent: *sent_unix_ns }
            }
            Message::Ping { seq, sent_unix_ns, sent_through_unix_ns: Some(through) } => {
                Self::PingProgress { seq: *seq, sent: *sent_unix_ns, through: *through }
            }
            Message::Pong { seq, ping_sent_unix_ns, received_unix_ns, sent_unix_ns } => {
                Self::Pong {
                    seq: *seq,
                    ping_sent: *ping_sent_unix_ns,
                    received: *received_unix_ns,
                    sent: *sent_unix_ns,
                }
            }
            Message::Reserve { key, open, object, epoch, avg_bitrate, peak_bitrate, lost }
                if *open != 0 =>
            {
                Self::ReserveOpen {
                    key: (*key).into(),
                    open: *open,
                    obj: object.0,
                    ep: epoch.0,
                    avg: avg_bitrate.0,
                    peak: peak_bitrate.0,
                    lost: lost.iter().map(|n| n.0).collect(),
                }
            }
            Message::Reserve { key, object, epoch, avg_bitrate, peak_bitrate, lost, .. }
                if lost.is_empty() =>
            {
                Self::Reserve {
                    key: (*key).into(),
                    object: object.0,
                    epoch: epoch.0,
                    avg: avg_bitrate.0,
                    peak: peak_bitrate.0,
                }
            }
            Message::Reserve { key, object, epoch, avg_bitrate, peak_bitrate, lost, .. } => {
                Self::ReserveLost {
                    key: (*key).into(),
                    object: object.0,
                    epoch: epoch.0,
                    avg: avg_bitrate.0,
                    peak: peak_bitrate.0,
                    lost: lost.iter().map(|n| n.0).collect(),
                }
            }
            Message::Reserved { key, open: 0, result } => {
                Self::Reserved { key: (*key).into(), refusal: result.as_ref().err().map(into_w) }
            }
            Message::Reserved { key, open, result } => Self::ReservedOpen {
                key: (*key).into(),
                open: *open,
                refusal: result.as_ref().err().map(into_w),
            },
            Message::Start { key, run, spec } if fits_v1(spec) => {
                Self::Start { key: (*key).into(), run: run.0, spec: spec.into() }
            }
            Message::Start { key, run, spec } => {
                Self::StartTracks { key: (*key).into(), run: run.0, spec: spec.into() }
            }
            Message::Stop { key, run, cutoff, before: None } => Self::Stop {
                key: (*key).into(),
                run: run.0,
                cutoff_ns: cutoff.map(MediaTime::as_nanos),
            },
            Message::Stop { key, run, cutoff, before: Some(gsn) } => Self::StopBefore {
                key: (*key).into(),
                run: run.0,
                cutoff_ns: cutoff.map(MediaTime::as_nanos),
                gsn: gsn.0,
            },
            Message::Stopped { key, run, report } if report_fits_v1(report) => {
                Self::Stopped { key: (*key).into(), run: run.0, report: (*report).into() }
            }
            Message::Stopped { key, run, report } => {
                Self::StoppedTracks { key: (*key).into(), run: run.0, report: (*report).into() }
            }
            Message::Pace { key, run, anchor, pace } => Self::Pace {
                key: (*key).into(),
                run: run.0,
                anchor: (*anchor).into(),
                pace_ppm: pace.ppm(),
            },
            Message::Ended { key, run, report } if report_fits_v1(report) => {
                Self::Ended { key: (*key).into(), run: run.0, report: (*report).into() }
            }
            Message::Ended { key, run, report } => {
                Self::EndedTracks { key: (*key).into(), run: run.0, report: (*report).into() }
            }
            Message::Failed { key, run, error } => {
                Self::Failed { key: (*key).into(), run: run.0, error: error.clone() }
            }
            Message::Lost { key, run, node, from } => Self::Lost {
                key: (*key).into(),
                run: run.0,
                node: node.0,
                from_ns: from.as_nanos(),
            },
            Message::Rejoin { key, run, node, at } => {
                Self::Rejoin { key: (*key).into(), run: run.0, node: node.0, at_ns: at.as_nanos() }
            }
            Message::Status { key, run, ended } => {
                Self::Status { key: (*key).into(), run: run.0, ended: ended.map(WReport3::from) }
            }
            Message::Close { key } => Self::Close { key: (*key).into() },
        }
    }
}

impl From<W> for Message {
    fn from(w: W) -> Self {
        match w {
            W::Hello { node, name, incarnation } => {
                Self::Hello { node: NodeId(node), name, incarnation }
            }
            W::Ping { seq, sent } => {
                Self::Ping { seq, sent_unix_ns: sent, sent_through_unix_ns: None }
            }
            W::PingProgress { seq, sent, through } => {
                Self::Ping { seq, sent_unix_ns: sent, sent_through_unix_ns: Some(through) }
            }
            W::Pong { seq, ping_sent, received, sent } => Self::Pong {
                seq,
                ping_sent_unix_ns: ping_sent,
                received_unix_ns: received,
                sent_unix_ns: sent,
            },
            W::Reserve { key, object, epoch, avg, peak } => Self::Reserve {
                key: key.into(),
                open: 0,
                object: ObjectId(object),
                epoch: Epoch(epoch),
                avg_bitrate: BitRate(avg),
                peak_bitrate: BitRate(peak),
                lost: BTreeSet::new(),
            },
            W::ReserveLost { key, object, epoch, avg, peak, lost } => Self::Reserve {
                key: key.into(),
                open: 0,
                object: ObjectId(object),
                epoch: Epoch(epoch),
                avg_bitrate: BitRate(avg),
                peak_bitrate: BitRate(peak),
                lost: lost.into_iter().map(NodeId).collect(),
            },
            W::ReserveOpen { key, open, obj, ep, avg, peak, lost } => Self::Reserve {
                key: key.into(),
                open,
                object: ObjectId(obj),
                epoch: Epoch(ep),
                avg_bitrate: BitRate(avg),
                peak_bitrate: BitRate(peak),
                lost: lost.into_iter().map(NodeId).collect(),
            },
            W::Reserved { key, refusal } => {
                Self::Reserved { key: key.into(), open: 0, result: refusal.map_or(Ok(()), from_w) }
            }
            W::ReservedOpen { key, open, refusal } => {
                Self::Reserved { key: key.into(), open, result: refusal.map_or(Ok(()), from_w) }
            }
            W::Start { key, run, spec } => {
                Self::Start { key: key.into(), run: RunId(run), spec: spec.into() }
            }
            W::StartTracks { key, run, spec } => {
                Self::Start { key: key.into(), run: RunId(run), spec: spec.into() }
            }
            W::StoppedTracks { key, run, report } => {
                Self::Stopped { key: key.into(), run: RunId(run), report: report.into() }
            }
            W::EndedTracks { key, run, report } => {
                Self::Ended { key: key.into(), run: RunId(run), report: report.into() }
            }
            W::Stop { key, run, cutoff_ns } => Self::Stop {
                key: key.into(),
                run: RunId(run),
                cutoff: cutoff_ns.map(MediaTime::from_nanos),
                before: None,
            },
            W::StopBefore { key, run, cutoff_ns, gsn } => Self::Stop {
                key: key.into(),
                run: RunId(run),
                cutoff: cutoff_ns.map(MediaTime::from_nanos),
                before: Some(Gsn(gsn)),
            },
            W::Stopped { key, run, report } => {
                Self::Stopped { key: key.into(), run: RunId(run), report: report.into() }
            }
            W::Pace { key, run, anchor, pace_ppm } => Self::Pace {
                key: key.into(),
                run: RunId(run),
                anchor: anchor.into(),
                pace: Pace::from_ppm(pace_ppm),
            },
            W::Ended { key, run, report } => {
                Self::Ended { key: key.into(), run: RunId(run), report: report.into() }
            }
            W::Failed { key, run, error } => {
                Self::Failed { key: key.into(), run: RunId(run), error }
            }
            W::Lost { key, run, node, from_ns } => Self::Lost {
                key: key.into(),
                run: RunId(run),
                node: NodeId(node),
                from: MediaTime::from_nanos(from_ns),
            },
            W::Rejoin { key, run, node, at_ns } => Self::Rejoin {
                key: key.into(),
                run: RunId(run),
                node: NodeId(node),
                at: MediaTime::from_nanos(at_ns),
            },
            W::Status { key, run, ended } => {
                Self::Status { key: key.into(), run: RunId(run), ended: ended.map(Into::into) }
            }
            W::Close { key } => Self::Close { key: key.into() },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> ShareKey {
        ShareKey { origin: NodeId(2), stream: StreamId(77) }
    }

    fn spec() -> RunSpec {
        RunSpec {
            object: ObjectId(5),
            epoch: Epoch(3),
            start: Position::at(Gsn(1000), MediaTime::from_nanos(2_000_000_000)),
            end: Some(MediaTime::from_nanos(9_000_000_000)),
            anchor: Some(WallAnchor {
                unix_ns: 1_700_000_000_000_000_000,
                media: MediaTime::from_nanos(2_000_000_000),
            }),
            pace: Pace::from_ppm(1_050_000),
            tracks: RunTracks::one(TrackSpec::mp2t(
                0x1234_5678,
                4242,
                0xdead_beef,
                Dest::Udp {
                    rtp: "10.0.0.9:5000".parse().unwrap(),
                    rtcp: "10.0.0.9:5001".parse().unwrap(),
                },
            )),
            trick: None,
            role: Role::Share { rtcp: true },
            lsn: true,
        }
    }

    /// A run of an object with two native tracks, the second not set up.
    fn native_spec() -> RunSpec {
        let video = TrackSpec {
            ssrc: 7,
            seq_offset: 1,
            rtp_ts_offset: 2,
            clock_rate: 90_000,
            payload_type: 96,
            dest: Dest::Origin,
            enabled: true,
        };
        let audio =
            TrackSpec { ssrc: 8, clock_rate: 48_000, payload_type: 97, enabled: false, ..video };
        RunSpec {
            start: Position {
                tracks: TrackSeqs::new(&[40, 17]),
                ..Position::at(Gsn(60), MediaTime::from_nanos(9))
            },
            tracks: RunTracks::new(&[video, audio]),
            trick: Some(Pace::from_ppm(4_000_000)),
            ..spec()
        }
    }

    fn native_report() -> ShareReport {
        let at = |g: u64| Position {
            tracks: TrackSeqs::new(&[5, 6]),
            ..Position::at(Gsn(g), MediaTime::from_nanos(g))
        };
        ShareReport { next: Some(at(11)), last_sent: Some(at(10)) }
    }

    /// The pinned tests' reserve, naming `lost`.
    fn reserve(lost: BTreeSet<NodeId>) -> Message {
        Message::Reserve {
            key: key(),
            open: 0,
            object: ObjectId(5),
            epoch: Epoch(1),
            avg_bitrate: BitRate(1000),
            peak_bitrate: BitRate(2000),
            lost,
        }
    }

    fn every_message() -> Vec<Message> {
        let report = ShareReport {
            next: Some(Position::at(Gsn(9), MediaTime::from_nanos(5))),
            last_sent: Some(Position::at(Gsn(8), MediaTime::from_nanos(4))),
        };
        vec![
            Message::Hello { node: NodeId(1), name: "n1".into(), incarnation: 99 },
            Message::Ping { seq: 1, sent_unix_ns: 2, sent_through_unix_ns: None },
            Message::Ping { seq: 1, sent_unix_ns: 2, sent_through_unix_ns: Some(1) },
            Message::Pong { seq: 1, ping_sent_unix_ns: 2, received_unix_ns: 3, sent_unix_ns: 4 },
            Message::Reserve {
                key: key(),
                open: 0,
                object: ObjectId(5),
                epoch: Epoch(1),
                avg_bitrate: BitRate(5_600_000),
                peak_bitrate: BitRate(8_000_000),
                lost: BTreeSet::new(),
            },
            Message::Reserve {
                key: key(),
                open: 0,
                object: ObjectId(5),
                epoch: Epoch(1),
                avg_bitrate: BitRate(5_600_000),
                peak_bitrate: BitRate(8_000_000),
                lost: [NodeId(3), NodeId(9)].into(),
            },
            Message::Reserve {
                key: key(),
                open: 7,
                object: ObjectId(5),
                epoch: Epoch(1),
                avg_bitrate: BitRate(5_600_000),
                peak_bitrate: BitRate(8_000_000),
                lost: [NodeId(3)].into(),
            },
            Message::Reserved { key: key(), open: 0, result: Ok(()) },
            Message::Reserved { key: key(), open: 7, result: Ok(()) },
            Message::Reserved {
                key: key(),
                open: 7,
                result: Err(Refusal {
                    node: "n3".into(),
                    disk: Some(DiskId(4)),
                    reason: "disk 4 would be 104 % busy".into(),
                }),
            },
            Message::Start { key: key(), run: RunId(3), spec: spec() },
            Message::Start {
                key: key(),
                run: RunId(4),
                spec: RunSpec {
                    anchor: None,
                    end: None,
                    tracks: spec().tracks.with_dest(Dest::Origin),
                    role: Role::Feeder,
                    ..spec()
                },
            },
            Message::Start { key: key(), run: RunId(5), spec: native_spec() },
            Message::Stopped { key: key(), run: RunId(5), report: native_report() },
            Message::Ended { key: key(), run: RunId(5), report: native_report() },
            Message::Stop {
                key: key(),
                run: RunId(3),
                cutoff: Some(MediaTime::from_nanos(7)),
                before: None,
            },
            Message::Stop { key: key(), run: RunId(3), cutoff: None, before: None },
            Message::Stop {
                key: key(),
                run: RunId(3),
                cutoff: Some(MediaTime::from_nanos(9)),
                before: Some(Gsn(42)),
            },
            Message::Stopped { key: key(), run: RunId(3), report },
            Message::Pace {
                key: key(),
                run: RunId(3),
                anchor: WallAnchor { unix_ns: 5, media: MediaTime::from_nanos(6) },
                pace: Pace::from_ppm(900_000),
            },
            Message::Ended { key: key(), run: RunId(3), report: ShareReport::default() },
            Message::Failed { key: key(), run: RunId(3), error: "block 5/3: checksum".into() },
            Message::Lost {
                key: key(),
                run: RunId(3),
                node: NodeId(4),
                from: MediaTime::from_nanos(1_500_000_000),
            },
            Message::Rejoin {
                key: key(),
                run: RunId(3),
                node: NodeId(4),
                at: MediaTime::from_nanos(2_500_000_000),
            },
            Message::Status { key: key(), run: RunId(3), ended: None },
            Message::Status { key: key(), run: RunId(3), ended: Some(native_report()) },
            Message::Close { key: key() },
        ]
    }

    #[test]
    fn every_message_round_trips_in_any_chunking() {
        let msgs = every_message();
        let stream: Vec<u8> = msgs.iter().flat_map(encode_frame).collect();
        for chunk in [1, 2, 3, 7, 64, stream.len()] {
            let mut r = FrameReader::default();
            let mut out = Vec::new();
            for c in stream.chunks(chunk) {
                r.feed(c);
                while let Some(m) = r.next_message().unwrap() {
                    out.push(m);
                }
            }
            assert_eq!(out, msgs, "chunk size {chunk}");
        }
    }

    #[test]
    fn the_encoding_is_pinned() {
        // Version 1 of the wire format: change only by adding a version.
        let f = encode_frame(&reserve(BTreeSet::new()));
        assert_eq!(f, [0, 0, 0, 10, 1, 3, 2, 77, 5, 1, 232, 7, 208, 15]);
        let f = encode_frame(&Message::Close { key: key() });
        assert_eq!(f, [0, 0, 0, 4, 1, 11, 2, 77]);
        // Version 2: a reserve naming lost members; everything else is still written as 1.
        let f = encode_frame(&reserve([NodeId(3)].into()));
        assert_eq!(f, [0, 0, 0, 12, 2, 12, 2, 77, 5, 1, 232, 7, 208, 15, 1, 3]);
        // Version 3: runs of native tracks and reports of track positions; an MP2T run and its
        // reports are still written as 1.
        let v = |m: &Message| encode_frame(m)[4];
        assert_eq!(v(&Message::Start { key: key(), run: RunId(1), spec: native_spec() }), 3);
        assert_eq!(v(&Message::Ended { key: key(), run: RunId(1), report: native_report() }), 3);
        assert_eq!(v(&Message::Start { key: key(), run: RunId(1), spec: spec() }), 1);
        assert_eq!(
            v(&Message::Ended { key: key(), run: RunId(1), report: ShareReport::default() }),
            1
        );
        // Version 4: the origin's word that a member is lost.
        let lost =
            Message::Lost { key: key(), run: RunId(1), node: NodeId(3), from: MediaTime::ZERO };
        assert_eq!(encode_frame(&lost), [0, 0, 0, 7, 4, 16, 2, 77, 1, 3, 0]);
        // Version 5: a heartbeat that carries the sender's progress; one without is still 1.
        let ping =
            |through| Message::Ping { seq: 1, sent_unix_ns: 2, sent_through_unix_ns: through };
        assert_eq!(encode_frame(&ping(Some(1))), [0, 0, 0, 5, 5, 18, 1, 2, 1]);
        assert_eq!(encode_frame(&ping(None)), [0, 0, 0, 4, 1, 1, 1, 2]);
        // Version 6: a member's word on its share after a takeover.
        let status = Message::Status { key: key(), run: RunId(1), ended: None };
        assert_eq!(encode_frame(&status), [0, 0, 0, 6, 6, 19, 2, 77, 1, 0]);
        // Version 8: numbered opens and their answers; an unnumbered one is still 1.
        let reserved = |open| Message::Reserved { key: key(), open, result: Ok(()) };
        assert_eq!(encode_frame(&reserved(3)), [0, 0, 0, 6, 8, 22, 2, 77, 3, 0]);
        assert_eq!(encode_frame(&reserved(0)), [0, 0, 0, 5, 1, 4, 2, 77, 0]);
        // A version-3 message in a frame that says 2 is refused.
        let mut f =
            encode_frame(&Message::Start { key: key(), run: RunId(1), spec: native_spec() });
        f[4] = 2;
        assert!(matches!(decode_body(&f[4..]), Err(WireError::Decode(_))));
    }

    #[test]
    fn bad_frames_are_named() {
        assert_eq!(decode_body(&[]), Err(WireError::Empty));
        assert_eq!(decode_body(&[9, 0]), Err(WireError::Version { found: 9 }));
        // A version-2 variant in a version-1 frame.
        let f = encode_frame(&reserve([NodeId(3)].into()));
        let mut v1 = f[4..].to_vec();
        v1[0] = 1;
        assert!(matches!(decode_body(&v1), Err(WireError::Decode(_))));
        assert_eq!(decode_body(&[0]), Err(WireError::Version { found: 0 }));
        assert!(matches!(decode_body(&[1, 200]), Err(WireError::Decode(_))));
        let mut f = encode_frame(&Message::Close { key: key() });
        f.push(0);
        assert_eq!(decode_body(&f[4..]), Err(WireError::Trailing(1)));
        let mut r = FrameReader::default();
        r.feed(&(MAX_FRAME as u32 + 1).to_be_bytes());
        assert_eq!(r.next_message(), Err(WireError::TooLong(MAX_FRAME + 1)));
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(0u8..=255, 0..64)) {
            let _ = decode_body(&bytes);
            let mut r = FrameReader::default();
            r.feed(&bytes);
            while let Ok(Some(_)) = r.next_message() {}
        }
    }
}
