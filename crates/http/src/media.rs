//! HTTP delivery: whole objects with byte ranges, HLS for MPEG-TS, and a browser player page.
//!
//! Why: RTSP needs a player that speaks it; every browser and most tools speak HTTP. The same
//! stored objects are offered three ways on the HTTP port:
//!
//! - `GET`/`HEAD /objects/{name}`: the object's original bytes (what `isochron cat` writes:
//!   for MPEG-TS the payloads of its blocks in order, `video/mp2t`; for an object ingested from
//!   MP4 or Matroska the file itself, kept in its source blocks, `video/mp4`,
//!   `video/x-matroska` or `video/webm`, so `<video src>` and progressive download work), with a strong `ETag` and byte ranges
//!   (RFC 9110 §14: [`crate::range`]): one range is a `206` with `Content-Range` (§14.4),
//!   several a `multipart/byteranges` body (§14.6), an unsatisfiable set a `416` with
//!   `Content-Range: bytes */LEN` (§15.5.17). `If-Range` (§13.1.5) is honoured with the ETag;
//!   `If-None-Match` gets `304`.
//! - `GET /hls/{name}/index.m3u8` and `/hls/{name}/{n}.ts`: a VOD media playlist (RFC 8216
//!   §4.3) whose segments are runs of the original transport stream (ISO/IEC 13818-1) cut at the
//!   object's seek points. Ingest records a seek point per random-access point (a video PES
//!   start with `random_access_indicator`, `isochron_media::units`): the unit at the last PAT
//!   before the keyframe when there is one since the previous keyframe, else the keyframe's
//!   own packet. Seek points are grouped into segments of about `http.hls_segment_s` seconds of
//!   send time (PCR-derived, the same clock RTSP paces by). Segment 0 starts at byte 0 and each
//!   segment ends where the next begins, so the segments concatenated are the source byte for
//!   byte; every later segment starts with its PAT and PMT (RFC 8216 §3.2; hls.js needs them).
//!   When a source carries no PAT between two keyframes (a file with one PAT at its head), the
//!   segment starting at the second keyframe is served with copies of the last PAT and PMT
//!   before it prepended (their continuity counters repeat the originals'; demuxers accept the
//!   duplicate). Only such segments differ from a plain cut; `EXTINF` is the segment's send-time
//!   span, `EXT-X-TARGETDURATION` the largest rounded to an integer (§4.3.3.1).
//! - A native object whose live feed still runs (its recording, committed as it grows): an
//!   event playlist (RFC 8216 §6.2.1) of the segments that can no longer change, each dated by
//!   `EXT-X-PROGRAM-DATE-TIME` (§4.3.2.6) from when the feed's first packet arrived, without
//!   `EXT-X-ENDLIST` until the feed ends (`docs/design/live.md`, step 5).
//! - `GET /hls/{name}/t{k}/index.m3u8`, `init.mp4`, `{n}.m4s`: track `k` of a native object
//!   alone (the same cut), the per-track CMAF segments DASH's manifest names (`crate::dash`).
//! - `GET /watch/{name}`: a page that plays the playlist with the vendored hls.js
//!   (`/assets/vendor/hls.light.min.js`), or with `?player=dash` the DASH manifest with the
//!   vendored dash.js, autoplaying muted; `?report=URL` makes it POST one
//!   line of JSON to `URL` once five seconds have played (`{"ok":true,"time":…}`) or on a
//!   fatal error (`{"ok":false,"error":…}`), for tests and monitoring.
//!
//! # How HTTP reads are scheduled
//!
//! HTTP traffic never reads the store directly. Each block goes through the scheduler thread
//! as [`SchedCommand::HttpRead`] with a one-shot reply channel: the thread answers at once from
//! its block cache when an RTSP stream holds the block, and otherwise hands the disk's IO thread
//! a non-real-time read ([`IoCommand::NrtRead`](isochron_diskio::IoCommand::NrtRead)) with a tag
//! from its own sequence. The IO thread serves such reads only within the non-real-time share of
//! its time (`sched.nrt_share_percent`, which admission keeps free of streams: XTREAM's reserved
//! share) and after every queued real-time read; the completion is routed back to the scheduler
//! thread by its tag and sent to the request's channel. A response keeps at most
//! [`READ_AHEAD`] blocks in flight and streams each block's bytes as it arrives (the body is
//! never held whole), so a download's memory is bounded and its pace is that of the share: it
//! slows down when the disks are busy instead of delaying a stream. In a cluster, a block on
//! another node's disk is read by that node, in the same share (`GET /api/v1/cluster/moves/…`).

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes as BodyBytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use isochron_base::mix::hash_words;
use isochron_base::{BlockIndex, BlockKey, Bytes, Gsn, IoFailure, MediaTime};
use isochron_dataplane::sender::SharedBlock;
use isochron_media::TS_PACKET_SIZE;
use isochron_media::fmp4::{Fmp4Codec, Fmp4Track, Reassembler, init_segment, media_segment};
use isochron_server::library::ObjectEntry;
use isochron_store::catalog::ObjectRecord;
use tokio::sync::{mpsc, oneshot};
use tracing::warn;

use crate::range::{ByteRange, RangeError};
use crate::state::ApiState;

/// Blocks a response keeps in flight ahead of the one it is sending.
pub(crate) const READ_AHEAD: usize = 2;

/// The player page (`GET /watch/{name}`).
const WATCH_HTML: &str = include_str!("../assets/watch.html");
/// hls.js 1.7.4, light build (Apache-2.0; `assets/vendor/hls.js-1.7.4/LICENSE`).
const HLS_JS: &[u8] = include_bytes!("../assets/vendor/hls.js-1.7.4/hls.light.min.js");
/// dash.js's media player, vendored (`assets/vendor/README.md`).
const DASH_JS: &[u8] = include_bytes!("../assets/vendor/dash.js-4.7.4/dash.mediaplayer.min.js");

const TS_TYPE: &str = "video/mp2t";
const PACKET: usize = TS_PACKET_SIZE;

// ---------------------------------------------------------------------------------------------
// Objects and their blocks, read through the scheduler.

/// An object as HTTP delivery sees it: its record and where each block's payload starts.
struct Obj {
    entry: Arc<ObjectEntry>,
    /// The index of the first block whose payload is served (a native object's first source
    /// block; 0 for MPEG-TS).
    first: usize,
    /// `offsets[i]`: the byte of the object where block `first + i`'s payload starts; one
    /// more entry for the end.
    offsets: Vec<u64>,
    etag: String,
    /// The served bytes' media type.
    content_type: String,
}

impl Obj {
    fn new(entry: Arc<ObjectEntry>) -> Self {
        // A feed published as MPEG-TS is its packets' payloads, in order: its blocks serve it.
        let ts_feed = is_ts_feed(&entry.record);
        let (first, blocks) =
            if ts_feed { (0, &entry.record.blocks[..]) } else { entry.record.source_blocks() };
        let mut offsets = Vec::with_capacity(blocks.len() + 1);
        let mut at = 0u64;
        offsets.push(0);
        for b in blocks {
            at += u64::from(b.payload_bytes);
            offsets.push(at);
        }
        // Strong: the object's id and every block's checksum, so a replaced object (same name,
        // new id) or different bytes never share a tag.
        let mut words: Vec<u64> = vec![entry.record.id.0, at];
        words.extend(blocks.iter().map(|b| b.checksum));
        let etag = format!("\"{:x}-{:016x}\"", entry.record.id.0, hash_words(&words));
        let content_type = match &entry.record.media {
            Some(m) if !ts_feed => m.source_type.as_str(),
            _ => TS_TYPE,
        }
        .to_owned();
        Self { entry, first, offsets, etag, content_type }
    }

    fn record(&self) -> &ObjectRecord {
        &self.entry.record
    }

    fn len(&self) -> Bytes {
        Bytes(*self.offsets.last().unwrap_or(&0))
    }

    /// The block holding byte `at` (`at` < len).
    fn block_at(&self, at: u64) -> usize {
        self.offsets.partition_point(|&o| o <= at).saturating_sub(1)
    }
}

/// Asks the scheduler thread for the `index`th block `obj` serves; the reply comes on the
/// receiver.
fn request_block(
    s: &ApiState,
    obj: &Obj,
    index: usize,
) -> Result<oneshot::Receiver<Result<SharedBlock, IoFailure>>, String> {
    request_block_at(s, obj, obj.first + index)
}

/// Asks the scheduler thread for block `index` of `obj`'s object (a packet block or a source
/// block).
fn request_block_at(
    s: &ApiState,
    obj: &Obj,
    index: usize,
) -> Result<oneshot::Receiver<Result<SharedBlock, IoFailure>>, String> {
    let name = &obj.record().name;
    // The current plan: a reorganisation may have moved the block since the request began.
    let entry = s
        .library
        .get(name)
        .filter(|e| e.record.id == obj.record().id)
        .ok_or_else(|| format!("object {name:?} was removed or replaced"))?;
    isochron_server::nrt::request_read(&s.store, &s.sched, &entry, index)
}

/// The block asked for, or why not, in the words of the HTTP response.
async fn await_block(
    rx: oneshot::Receiver<Result<SharedBlock, IoFailure>>,
) -> Result<SharedBlock, String> {
    match rx.await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err("the scheduler thread dropped the read".into()),
    }
}

async fn read_block(s: &ApiState, obj: &Obj, index: usize) -> Result<SharedBlock, String> {
    await_block(request_block(s, obj, index)?).await
}

/// Part of a response body.
enum Piece {
    /// Bytes made here (multipart headers, PSI copies).
    Static(BodyBytes),
    /// Bytes of the object.
    Object(ByteRange),
}

fn pieces_len(pieces: &[Piece]) -> u64 {
    pieces
        .iter()
        .map(|p| match p {
            Piece::Static(b) => b.len() as u64,
            Piece::Object(r) => r.len().0,
        })
        .sum()
}

/// A block's payload bytes `start..end`, shared without copying.
struct BlockSlice {
    block: SharedBlock,
    start: usize,
    end: usize,
}

impl AsRef<[u8]> for BlockSlice {
    fn as_ref(&self) -> &[u8] {
        &self.block.payload()[self.start..self.end]
    }
}

/// A streaming body made of `pieces`: a task reads the object's blocks through the scheduler,
/// [`READ_AHEAD`] at a time, and hands each block's bytes on as they come. `have` holds blocks
/// already read while planning the response.
fn stream_body(
    s: ApiState,
    obj: Arc<Obj>,
    pieces: Vec<Piece>,
    have: HashMap<usize, SharedBlock>,
) -> Body {
    let (tx, rx) = mpsc::channel::<Result<BodyBytes, std::io::Error>>(READ_AHEAD);
    tokio::spawn(async move {
        if let Err(e) = pump(&s, &obj, pieces, have, &tx).await {
            warn!(object = %obj.record().name, error = %e, "HTTP body aborted");
            let _ = tx.send(Err(std::io::Error::other(e))).await;
        }
    });
    Body::from_stream(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    }))
}

type Sink = mpsc::Sender<Result<BodyBytes, std::io::Error>>;

async fn pump(
    s: &ApiState,
    obj: &Obj,
    pieces: Vec<Piece>,
    mut have: HashMap<usize, SharedBlock>,
    tx: &Sink,
) -> Result<(), String> {
    for piece in pieces {
        let range = match piece {
            Piece::Static(b) => {
                if tx.send(Ok(b)).await.is_err() {
                    return Ok(()); // the client went away
                }
                continue;
            }
            Piece::Object(r) => r,
        };
        let (first, last) = (obj.block_at(range.start.0), obj.block_at(range.end.0 - 1));
        let mut in_flight = VecDeque::new();
        let mut next = first;
        for i in first..=last {
            while next <= last && next < i + READ_AHEAD {
                let pending = match have.remove(&next) {
                    Some(b) => Pending::Have(b),
                    None => Pending::Asked(request_block(s, obj, next)?),
                };
                in_flight.push_back(pending);
                next += 1;
            }
            let block = match in_flight.pop_front() {
                Some(Pending::Have(b)) => b,
                Some(Pending::Asked(rx)) => await_block(rx).await?,
                None => return Err("internal: no block in flight".into()),
            };
            let base = obj.offsets[i];
            let start = (range.start.0.max(base) - base) as usize;
            let end = (range.end.0.min(obj.offsets[i + 1]) - base) as usize;
            if end > block.payload().len() || start > end {
                return Err(format!(
                    "block {i} of {:?} holds {} payload bytes, the catalog says {}",
                    obj.record().name,
                    block.payload().len(),
                    obj.offsets[i + 1] - base
                ));
            }
            let bytes = BodyBytes::from_owner(BlockSlice { block, start, end });
            if tx.send(Ok(bytes)).await.is_err() {
                return Ok(());
            }
        }
    }
    Ok(())
}

enum Pending {
    Have(SharedBlock),
    Asked(oneshot::Receiver<Result<SharedBlock, IoFailure>>),
}

// ---------------------------------------------------------------------------------------------
// GET/HEAD /objects/{name}

pub(crate) fn not_found(name: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("no object named {name:?}\n"),
    )
        .into_response()
}

fn lookup(s: &ApiState, name: &str) -> Option<Arc<Obj>> {
    s.library.get(name).map(|e| Arc::new(Obj::new(e)))
}

pub(crate) fn text(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
}

/// Whether an `If-None-Match` / `If-Range` list names `etag` (strong comparison for If-Range,
/// weak for If-None-Match, RFC 9110 §8.8.3.2).
fn etag_listed(value: &str, etag: &str, weak_ok: bool) -> bool {
    value
        .split(',')
        .map(str::trim)
        .any(|t| (weak_ok && (t == "*" || t.strip_prefix("W/") == Some(etag))) || t == etag)
}

/// `GET`/`HEAD /objects/{name}`.
pub(crate) async fn object(
    State(s): State<ApiState>,
    method: Method,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    let Some(obj) = lookup(&s, &name) else { return not_found(&name) };
    let live = obj.record().media.as_ref().is_some_and(|m| m.source_blocks == 0);
    if live && !is_ts_feed(obj.record()) {
        return text(
            StatusCode::NOT_FOUND,
            format!(
                "{name:?} was recorded live: it has no source file to serve (play it over RTSP)\n"
            ),
        );
    }
    let len = obj.len();
    let etag = obj.etag.clone();
    let common = |resp: &mut Response| {
        let h = resp.headers_mut();
        h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
        if let Ok(v) = HeaderValue::from_str(&etag) {
            h.insert(header::ETAG, v);
        }
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        cors(h);
    };
    let header_str = |n: header::HeaderName| headers.get(n).and_then(|v| v.to_str().ok());
    if header_str(header::IF_NONE_MATCH).is_some_and(|v| etag_listed(v, &obj.etag, true)) {
        let mut r = StatusCode::NOT_MODIFIED.into_response();
        common(&mut r);
        return r;
    }
    // If-Range: a range request only against this very version (§13.1.5); a date never
    // matches (the ETag is the strong validator).
    let range = header_str(header::RANGE)
        .filter(|_| header_str(header::IF_RANGE).is_none_or(|v| etag_listed(v, &obj.etag, false)));
    let (status, pieces, extra): (StatusCode, Vec<Piece>, Vec<(header::HeaderName, String)>) =
        match range.map(crate::range::parse) {
            None | Some(Err(RangeError::UnknownUnit(_))) => (
                StatusCode::OK,
                if len.0 > 0 {
                    vec![Piece::Object(ByteRange { start: Bytes(0), end: len })]
                } else {
                    Vec::new()
                },
                vec![(header::CONTENT_TYPE, obj.content_type.clone())],
            ),
            Some(Err(e)) => {
                let mut r = text(
                    StatusCode::RANGE_NOT_SATISFIABLE,
                    format!("bad Range header for {name:?}: {e}\n"),
                );
                common(&mut r);
                set(&mut r, header::CONTENT_RANGE, &format!("bytes */{}", len.0));
                return r;
            }
            Some(Ok(specs)) => {
                let ranges = crate::range::resolve(&specs, len);
                match ranges.as_slice() {
                    [] => {
                        let mut r = text(
                            StatusCode::RANGE_NOT_SATISFIABLE,
                            format!(
                                "no range of {:?} lies within {name:?}, which has {} bytes\n",
                                range.unwrap_or_default(),
                                len.0
                            ),
                        );
                        common(&mut r);
                        set(&mut r, header::CONTENT_RANGE, &format!("bytes */{}", len.0));
                        return r;
                    }
                    [one] => (
                        StatusCode::PARTIAL_CONTENT,
                        vec![Piece::Object(*one)],
                        vec![
                            (header::CONTENT_TYPE, obj.content_type.clone()),
                            (header::CONTENT_RANGE, one.content_range(len)),
                        ],
                    ),
                    many => {
                        let boundary = format!("isochron-{}", obj.etag.trim_matches('"'));
                        let mut pieces = Vec::with_capacity(many.len() * 2 + 1);
                        for r in many {
                            let head = format!(
                                "\r\n--{boundary}\r\nContent-Type: {}\r\nContent-Range: {}\r\n\r\n",
                                obj.content_type,
                                r.content_range(len)
                            );
                            pieces.push(Piece::Static(head.into()));
                            pieces.push(Piece::Object(*r));
                        }
                        pieces.push(Piece::Static(format!("\r\n--{boundary}--\r\n").into()));
                        (
                            StatusCode::PARTIAL_CONTENT,
                            pieces,
                            vec![(
                                header::CONTENT_TYPE,
                                format!("multipart/byteranges; boundary={boundary}"),
                            )],
                        )
                    }
                }
            }
        };
    let body_len = pieces_len(&pieces);
    let body = if method == Method::HEAD || pieces.is_empty() {
        Body::empty()
    } else {
        stream_body(s, obj, pieces, HashMap::new())
    };
    let mut r = Response::new(body);
    *r.status_mut() = status;
    common(&mut r);
    for (k, v) in extra {
        set(&mut r, k, &v);
    }
    set(&mut r, header::CONTENT_LENGTH, &body_len.to_string());
    r
}

/// Lets players on other origins read media (hls.js in a page served elsewhere fetches the
/// playlist and segments cross-origin, with `Range`): these are public, read-only resources.
pub(crate) fn cors(h: &mut HeaderMap) {
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
    h.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("Content-Length, Content-Range, Accept-Ranges, ETag"),
    );
}

pub(crate) fn set(r: &mut Response, k: header::HeaderName, v: &str) {
    if let Ok(v) = HeaderValue::from_str(v) {
        r.headers_mut().insert(k, v);
    }
}

// ---------------------------------------------------------------------------------------------
// HLS

/// One HLS segment: the units from `start` to `end` (the next segment's start, or the end).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Segment {
    /// GSN of its first unit.
    pub(crate) start: Gsn,
    /// GSN of the next segment's first unit; `None` for the last segment.
    pub(crate) end: Option<Gsn>,
    /// Send time of its first packet.
    pub(crate) time: MediaTime,
    /// Its duration (send times).
    pub(crate) duration: Duration,
}

/// Groups `record`'s seek points into segments of about `target`: each boundary is the seek
/// point whose time is nearest the previous boundary plus `target` (never the same instant), and
/// the last segment ends at the object's duration.
pub(crate) fn plan_segments(record: &ObjectRecord, target: Duration) -> Vec<Segment> {
    plan(record, target, false)
}

/// The segments of a growing object (a live feed's recording, committed as far as `record`
/// goes) that can no longer change: [`plan_segments`]'s, less the last, still open one. A
/// boundary is chosen between the first seek point at or past its goal and the one before, so
/// it is final once that first point is committed; the segments listed here are the finished
/// object's first ones, unchanged however far it grows.
pub(crate) fn closed_segments(record: &ObjectRecord, target: Duration) -> Vec<Segment> {
    plan(record, target, true)
}

fn plan(record: &ObjectRecord, target: Duration, growing: bool) -> Vec<Segment> {
    // Strictly increasing in GSN and in time; the first at GSN 0 and time 0.
    let mut points: Vec<(Gsn, MediaTime)> = vec![(Gsn(0), MediaTime::ZERO)];
    for p in &record.seek_points {
        let &(g, t) = points.last().unwrap_or(&(Gsn(0), MediaTime::ZERO));
        if p.gsn > g && p.time > t && p.gsn.0 < record.packets {
            points.push((p.gsn, p.time));
        }
    }
    let end_time = record.duration.max(points.last().map_or(MediaTime::ZERO, |p| p.1));
    let mut segments = Vec::new();
    let mut cur = 0usize;
    loop {
        let (start, time) = points[cur];
        let goal = time + target;
        let dist = |t: MediaTime| t.as_nanos().abs_diff(goal.as_nanos());
        // First later point at or after the goal, and the one before it.
        let j = cur + 1 + points[cur + 1..].partition_point(|p| p.1 < goal);
        if growing && j >= points.len() {
            return segments;
        }
        let mut best: Option<usize> = None;
        if j < points.len() {
            best = Some(j);
        }
        if j - 1 > cur && best.is_none_or(|b| dist(points[j - 1].1) <= dist(points[b].1)) {
            best = Some(j - 1);
        }
        // Past the last point: end the object here if the end is nearer the goal.
        if j >= points.len() && best.is_none_or(|b| dist(end_time) < dist(points[b].1)) {
            best = None;
        }
        match best {
            Some(b) => {
                let (next, t) = points[b];
                segments.push(Segment {
                    start,
                    end: Some(next),
                    time,
                    duration: t.saturating_duration_since(time),
                });
                cur = b;
            }
            None => {
                segments.push(Segment {
                    start,
                    end: None,
                    time,
                    duration: end_time.saturating_duration_since(time),
                });
                return segments;
            }
        }
    }
}

/// A recording whose feed still runs, as its playlist shows it.
#[derive(Clone, Copy, Debug)]
struct Live {
    /// The wall-clock time of its timeline's zero, Unix milliseconds.
    zero_unix_ms: u64,
    /// The segment duration aimed at (`http.hls_segment_s`).
    target: Duration,
}

/// A media playlist of segments named `N.{ext}`, with `EXT-X-MAP` naming `map` when the
/// segments need an initialization segment (fragmented MP4: version 7, RFC 8216 §4.3.2.5).
///
/// Of a recording whose feed runs (`live`), an event playlist (RFC 8216 §6.2.1,
/// `EXT-X-PLAYLIST-TYPE:EVENT`): segments are only ever added, so a player can go back to the
/// feed's start (the DVR window is the whole recording), and it ends with `EXT-X-ENDLIST` once
/// the feed does. Each segment carries its `EXT-X-PROGRAM-DATE-TIME` (§4.3.2.6): when the
/// server received its first packet, by which players show and measure how far behind live
/// they play. The target duration is the configured one unless a segment listed is longer, so
/// that it does not change from one reload to the next (§6.2.1) while the GOPs keep to it.
fn playlist_of(segments: &[Segment], ext: &str, map: Option<&str>, live: Option<Live>) -> String {
    let longest = segments.iter().map(|s| s.duration.as_secs_f64().round() as u64).max();
    let target = match live {
        Some(l) => longest.unwrap_or(0).max(l.target.as_secs_f64().ceil() as u64),
        None => longest.unwrap_or(1),
    }
    .max(1);
    let version = if map.is_some() { 7 } else { 3 };
    let kind = if live.is_some() { "EVENT" } else { "VOD" };
    let mut out = String::new();
    let _ = write!(
        out,
        "#EXTM3U\n#EXT-X-VERSION:{version}\n#EXT-X-TARGETDURATION:{target}\n#EXT-X-MEDIA-SEQUENCE:0\n\
         #EXT-X-PLAYLIST-TYPE:{kind}\n#EXT-X-INDEPENDENT-SEGMENTS\n"
    );
    if let Some(m) = map {
        let _ = writeln!(out, "#EXT-X-MAP:URI=\"{m}\"");
    }
    for (i, s) in segments.iter().enumerate() {
        if let Some(l) = live {
            let at = l.zero_unix_ms + (s.time.as_nanos() / 1_000_000);
            let _ = writeln!(out, "#EXT-X-PROGRAM-DATE-TIME:{}", iso8601_ms(at));
        }
        let _ = write!(out, "#EXTINF:{:.3},\n{i}.{ext}\n", s.duration.as_secs_f64());
    }
    if live.is_none() {
        out.push_str("#EXT-X-ENDLIST\n");
    }
    out
}

/// `unix_ms` as an ISO 8601 date and time in UTC with milliseconds
/// (`2026-12-03T08:50:01.250Z`), the form `EXT-X-PROGRAM-DATE-TIME` takes (RFC 8216 §4.3.2.6,
/// RFC 3339 §5.6). The civil date from the days since 1970 by the proleptic Gregorian rules, in
/// 400-year eras of 146,097 days.
fn iso8601_ms(unix_ms: u64) -> String {
    let (days, ms) = (unix_ms / 86_400_000, unix_ms % 86_400_000);
    // Days since 0000-03-01, so that a year's leap day is its last.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    let (h, m, s, milli) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1_000 % 60, ms % 1_000);
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{milli:03}Z")
}

fn is_ts(record: &ObjectRecord) -> bool {
    // A transport stream without elementary streams is not worth an HLS playlist.
    (record.media.is_none() && !record.streams.is_empty()) || is_ts_feed(record)
}

/// Whether `record` is a feed published as MPEG-TS (SRT, or `MP2T` over RTSP): one native track
/// whose payloads are whole TS packets, so that it is served as a transport stream is, its
/// payloads in order being the stream the publisher sent.
pub(crate) fn is_ts_feed(record: &ObjectRecord) -> bool {
    record.media.as_ref().is_some_and(|m| m.tracks.len() == 1 && m.tracks[0].codec == "mpegts")
}

/// `GET /hls/{name}/{file}`: `master.m3u8` (the title's renditions: [`crate::master`]),
/// `index.m3u8` or a segment.
pub(crate) async fn hls(
    State(s): State<ApiState>,
    method: Method,
    Path((name, file)): Path<(String, String)>,
) -> Response {
    let Some(obj) = lookup(&s, &name) else { return not_found(&name) };
    if file == "master.m3u8" {
        let renditions = s.library.renditions(&name);
        let (variants, audio): (Vec<(&ObjectRecord, String)>, Option<String>) =
            if renditions.is_empty() {
                (vec![(obj.record(), "index.m3u8".to_owned())], None)
            } else {
                // By track (the segments DASH plays too) where each rendition has a video
                // track HLS carries and the highest an audio one; else each rendition whole.
                let audio = renditions.first().and_then(|e| {
                    let t = first_track(&e.record, "audio")?;
                    Some(format!("../{}/t{t}/index.m3u8", e.record.name))
                });
                let by_track: Option<Vec<_>> = renditions
                    .iter()
                    .map(|e| {
                        let t = first_track(&e.record, "video")?;
                        Some((&e.record, format!("../{}/t{t}/index.m3u8", e.record.name)))
                    })
                    .collect();
                match (by_track, audio) {
                    (Some(v), Some(a)) => (v, Some(a)),
                    _ => (
                        renditions
                            .iter()
                            .map(|e| (&e.record, format!("../{}/index.m3u8", e.record.name)))
                            .collect(),
                        None,
                    ),
                }
            };
        let mut r = crate::master::master_playlist(&variants, audio.as_deref()).into_response();
        set(&mut r, header::CONTENT_TYPE, "application/vnd.apple.mpegurl");
        set(&mut r, header::CACHE_CONTROL, "no-cache");
        cors(r.headers_mut());
        return r;
    }
    if obj.record().media.is_some() && !is_ts_feed(obj.record()) {
        return native_hls(&s, &obj, None, &file, method == Method::HEAD).await;
    }
    if !is_ts(obj.record()) {
        return text(
            StatusCode::NOT_FOUND,
            format!("object {name:?} has no elementary streams to play as HLS\n"),
        );
    }
    let live = running_feed(&s, &name);
    let segments = match live {
        Some(_) => closed_segments(obj.record(), s.media.hls_segment),
        None => plan_segments(obj.record(), s.media.hls_segment),
    };
    if file == "index.m3u8" {
        let mut r = playlist_of(&segments, "ts", None, live).into_response();
        set(&mut r, header::CONTENT_TYPE, "application/vnd.apple.mpegurl");
        set(&mut r, header::CACHE_CONTROL, "no-cache");
        cors(r.headers_mut());
        return r;
    }
    let Some(n) = file.strip_suffix(".ts").and_then(|n| n.parse::<usize>().ok()) else {
        return text(
            StatusCode::NOT_FOUND,
            format!("{file:?} is neither index.m3u8 nor a segment N.ts of {name:?}\n"),
        );
    };
    let Some(seg) = segments.get(n).copied() else {
        return text(
            StatusCode::NOT_FOUND,
            format!("{name:?} has {} HLS segments; there is no segment {n}\n", segments.len()),
        );
    };
    match segment_response(&s, &obj, n, seg, method == Method::HEAD).await {
        Ok(r) => r,
        Err(e) => {
            warn!(object = %name, segment = n, error = %e, "HLS segment failed");
            text(StatusCode::INTERNAL_SERVER_ERROR, format!("segment {n} of {name:?}: {e}\n"))
        }
    }
}

/// The feed recorded as `name`, if it still runs (published here, or in a cluster on another
/// node whose recording this node lists as it grows): its playlist is a live one.
fn running_feed(s: &ApiState, name: &str) -> Option<Live> {
    let here =
        s.recorders.live_feeds().into_iter().find(|f| f.name == name).map(|f| f.zero_unix_ms);
    let zero_unix_ms = here.or_else(|| {
        let f = s.library.remote_feed(name)?;
        Some(f.zero_unix_ms.load(std::sync::atomic::Ordering::Relaxed))
    })?;
    (zero_unix_ms > 0).then_some(Live { zero_unix_ms, target: s.media.hls_segment })
}

/// The index of `record`'s first track of `kind` (`video`, `audio`) that HLS carries.
pub(crate) fn first_track(record: &ObjectRecord, kind: &str) -> Option<usize> {
    let tracks = &record.media.as_ref()?.tracks;
    hls_tracks(record).into_iter().map(|(i, _)| i).find(|&i| tracks[i].kind == kind)
}

/// The fMP4 tracks of a native object's HLS (H.264, H.265, AAC, Opus; others, and AAC stored
/// as LATM, left out), each with its index in the object.
fn hls_tracks(record: &ObjectRecord) -> Vec<(usize, Fmp4Track)> {
    let Some(media) = &record.media else { return Vec::new() };
    let mut out = Vec::new();
    for (i, t) in media.tracks.iter().enumerate() {
        let codec = match t.codec.as_str() {
            "h264" => Fmp4Codec::H264 { avcc: t.config.clone() },
            "hevc" => {
                let p = isochron_media::HevcParameterSets::decode(&t.config);
                Fmp4Codec::H265 { vps: p.vps, sps: p.sps, pps: p.pps }
            }
            // AAC stored as RFC 6416 LATM payloads (a live feed's) has no depacketizer here.
            "aac" if t.encoding.eq_ignore_ascii_case("MP4A-LATM") => continue,
            "aac" => Fmp4Codec::Aac { asc: t.config.clone() },
            "opus" => Fmp4Codec::Opus { head: t.config.clone() },
            _ => continue,
        };
        let opus_channels = t.config.get(9).copied().unwrap_or(2);
        let channels = if t.codec == "opus" { opus_channels } else { t.channels };
        out.push((
            i,
            Fmp4Track {
                codec,
                timescale: t.clock_rate,
                width: t.width,
                height: t.height,
                channels,
                sample_rate: if t.kind == "audio" { t.clock_rate } else { 0 },
            },
        ));
    }
    out
}

/// `GET /hls/{name}/t{K}/{file}`: track `K` of a native object alone, as [`native_hls`]
/// serves the whole object: the CMAF segments of one track that DASH (`crate::dash`) and the
/// master playlist's renditions share.
pub(crate) async fn hls_track(
    State(s): State<ApiState>,
    method: Method,
    Path((name, track, file)): Path<(String, String, String)>,
) -> Response {
    let Some(obj) = lookup(&s, &name) else { return not_found(&name) };
    let Some(k) = track.strip_prefix('t').and_then(|k| k.parse::<usize>().ok()) else {
        return text(
            StatusCode::NOT_FOUND,
            format!("{track:?} is not a track of {name:?} (tracks are t0, t1, …)\n"),
        );
    };
    if obj.record().media.is_none() {
        return text(
            StatusCode::NOT_FOUND,
            format!(
                "object {name:?} is MPEG-TS: its HLS is /hls/{name}/index.m3u8, not by track\n"
            ),
        );
    }
    native_hls(&s, &obj, Some(k), &file, method == Method::HEAD).await
}

/// HLS of a native object (RFC 8216 §3.3, fragmented MP4): `index.m3u8` with `EXT-X-MAP`,
/// `init.mp4`, and segments `N.m4s` cut at the object's seek points (its key frames); of its
/// track `only` alone when given.
async fn native_hls(
    s: &ApiState,
    obj: &Arc<Obj>,
    only: Option<usize>,
    file: &str,
    head: bool,
) -> Response {
    let name = &obj.record().name;
    let tracks: Vec<(usize, Fmp4Track)> = hls_tracks(obj.record())
        .into_iter()
        .filter(|(i, _)| only.is_none_or(|k| *i == k))
        .collect();
    if tracks.is_empty() {
        let what = only.map_or_else(|| "no track".to_owned(), |k| format!("no track t{k}"));
        return text(
            StatusCode::NOT_FOUND,
            format!("object {name:?} has {what} HLS can carry (H.264, H.265, AAC, Opus)\n"),
        );
    }
    // A recording whose feed runs lists its closed segments only, dated from the feed's start.
    let live = running_feed(s, name);
    let segments = match live {
        Some(_) => closed_segments(obj.record(), s.media.hls_segment),
        None => plan_segments(obj.record(), s.media.hls_segment),
    };
    let fmp4: Vec<Fmp4Track> = tracks.iter().map(|(_, t)| t.clone()).collect();
    let body = |bytes: Vec<u8>, kind: &str| {
        let len = bytes.len();
        let mut r = Response::new(if head { Body::empty() } else { Body::from(bytes) });
        set(&mut r, header::CONTENT_TYPE, kind);
        set(&mut r, header::CONTENT_LENGTH, &len.to_string());
        set(&mut r, header::CACHE_CONTROL, "no-cache");
        cors(r.headers_mut());
        r
    };
    if file == "index.m3u8" {
        let list = playlist_of(&segments, "m4s", Some("init.mp4"), live);
        return body(list.into_bytes(), "application/vnd.apple.mpegurl");
    }
    if file == "init.mp4" {
        return body(init_segment(&fmp4), "video/mp4");
    }
    let Some(n) = file.strip_suffix(".m4s").and_then(|n| n.parse::<usize>().ok()) else {
        return text(
            StatusCode::NOT_FOUND,
            format!("{file:?} is none of index.m3u8, init.mp4 or a segment N.m4s of {name:?}\n"),
        );
    };
    let Some(seg) = segments.get(n).copied() else {
        return text(
            StatusCode::NOT_FOUND,
            format!("{name:?} has {} HLS segments; there is no segment {n}\n", segments.len()),
        );
    };
    match native_segment(s, obj, &tracks, seg).await {
        Ok(samples) => {
            let fallback: Vec<u32> = fmp4.iter().map(|t| t.timescale / 25).collect();
            body(media_segment(n as u32 + 1, &samples, &fallback), "video/mp4")
        }
        Err(e) => {
            warn!(object = %name, segment = n, error = %e, "HLS segment failed");
            text(StatusCode::INTERNAL_SERVER_ERROR, format!("segment {n} of {name:?}: {e}\n"))
        }
    }
}

/// The samples of each HLS track in segment `seg`: its packets (GSNs `seg.start` up to
/// `seg.end`) read through the scheduler and reassembled.
async fn native_segment(
    s: &ApiState,
    obj: &Obj,
    tracks: &[(usize, Fmp4Track)],
    seg: Segment,
) -> Result<Vec<Vec<isochron_media::fmp4::Fmp4Sample>>, String> {
    let record = obj.record();
    let end = seg.end.unwrap_or(Gsn(record.packets));
    let mut samples = vec![Vec::new(); tracks.len()];
    let mut asm: Vec<Option<Reassembler>> =
        tracks.iter().map(|(_, t)| Reassembler::new(t)).collect();
    let slot = |track: u8| tracks.iter().position(|(i, _)| *i == usize::from(track));
    let (Some(first), Some(last)) =
        (record.block_of(seg.start), record.block_of(Gsn(end.0.saturating_sub(1))))
    else {
        return Ok(samples);
    };
    for i in first.0..=last.0 {
        let block = await_block(request_block_at(s, obj, i as usize)?).await?;
        for p in block.packets().filter(|p| p.gsn >= seg.start && p.gsn < end) {
            let (Some(k), Some(rtp)) = (slot(p.track), p.rtp_time) else { continue };
            if let Some(a) = asm[k].as_mut() {
                a.push(p.payload, p.marker, rtp, p.send_time.as_nanos(), &mut samples[k]);
            }
        }
    }
    for (k, a) in asm.iter_mut().enumerate() {
        if let Some(a) = a {
            a.finish(&mut samples[k]);
        }
        if tracks[k].1.is_video() {
            isochron_media::fmp4::decode_times_from_presentation(&mut samples[k]);
        }
    }
    Ok(samples)
}

/// The object byte where unit `gsn` starts, with the block read to find it.
async fn unit_offset(
    s: &ApiState,
    obj: &Obj,
    gsn: Gsn,
) -> Result<(u64, usize, SharedBlock), String> {
    let index = obj
        .record()
        .block_of(gsn)
        .ok_or_else(|| format!("unit {} is past the end of {:?}", gsn.0, obj.record().name))?;
    let i = index.0 as usize;
    let block = read_block(s, obj, i).await?;
    let k = block
        .find_gsn(gsn)
        .ok_or_else(|| format!("block {i} does not hold unit {} as the catalog says", gsn.0))?;
    let within: usize = (0..k).map(|j| block.packet(j).payload.len()).sum();
    Ok((obj.offsets[i] + within as u64, i, block))
}

async fn segment_response(
    s: &ApiState,
    obj: &Arc<Obj>,
    n: usize,
    seg: Segment,
    head: bool,
) -> Result<Response, String> {
    let (start, start_block, first) = unit_offset(s, obj, seg.start).await?;
    let mut have = HashMap::from([(start_block, Arc::clone(&first))]);
    let end = match seg.end {
        Some(g) => {
            let (end, i, b) = unit_offset(s, obj, g).await?;
            have.insert(i, b);
            end
        }
        None => obj.len().0,
    };
    let mut pieces = Vec::new();
    let within = (start - obj.offsets[start_block]) as usize;
    let starts_with_pat = first.payload().get(within..within + PACKET).is_some_and(|p| pid(p) == 0);
    if n > 0 && !starts_with_pat {
        match last_psi(s, obj, start_block, within, &first).await? {
            Some(psi) => pieces.push(Piece::Static(psi.into())),
            None => warn!(
                object = %obj.record().name,
                segment = n,
                "no PAT before the segment: served without one"
            ),
        }
    }
    if end > start {
        pieces.push(Piece::Object(ByteRange { start: Bytes(start), end: Bytes(end) }));
    }
    let len = pieces_len(&pieces);
    let body =
        if head { Body::empty() } else { stream_body(s.clone(), Arc::clone(obj), pieces, have) };
    let mut r = Response::new(body);
    set(&mut r, header::CONTENT_TYPE, TS_TYPE);
    set(&mut r, header::CONTENT_LENGTH, &len.to_string());
    set(&mut r, header::CACHE_CONTROL, "no-cache");
    cors(r.headers_mut());
    Ok(r)
}

fn pid(p: &[u8]) -> u16 {
    (u16::from(p[1] & 0x1f) << 8) | u16::from(p[2])
}

fn pusi(p: &[u8]) -> bool {
    p[1] & 0x40 != 0
}

/// The PMT PIDs a PAT packet lists (ISO/IEC 13818-1 §2.4.4.3; program 0 is the network PID).
fn pat_pmt_pids(p: &[u8]) -> Vec<u16> {
    let afc = (p[3] >> 4) & 3;
    let mut at = 4;
    if afc & 2 != 0 {
        at += 1 + usize::from(p[4]);
    }
    if afc & 1 == 0 || at >= PACKET {
        return Vec::new();
    }
    at += 1 + usize::from(p[at]); // pointer_field
    let Some(sec) = p.get(at..) else { return Vec::new() };
    if sec.len() < 8 || sec[0] != 0 {
        return Vec::new();
    }
    let section_len = usize::from(u16::from(sec[1] & 0x0f) << 8 | u16::from(sec[2]));
    let end = (3 + section_len).saturating_sub(4).min(sec.len()); // less the CRC
    sec.get(8..end)
        .unwrap_or_default()
        .chunks_exact(4)
        .filter(|e| (u16::from(e[0]) << 8 | u16::from(e[1])) != 0)
        .map(|e| (u16::from(e[2] & 0x1f) << 8) | u16::from(e[3]))
        .collect()
}

/// Copies of the last PAT and the PMT after it that precede byte `within` of block `b`
/// (ISO/IEC 13818-1 §2.4.4), looking back block by block; `None` if the object has no PAT
/// before that point.
async fn last_psi(
    s: &ApiState,
    obj: &Obj,
    b: usize,
    within: usize,
    first: &SharedBlock,
) -> Result<Option<Vec<u8>>, String> {
    let object = obj.record().id;
    let key = |i: usize| BlockKey { object, index: BlockIndex(i as u32) };
    // Find the PAT: the last PID-0 packet with a section start.
    let mut found: Option<(usize, SharedBlock, usize)> = None;
    for i in (0..=b).rev() {
        if i != b && s.media.no_pat().contains(&key(i)) {
            continue;
        }
        let block = if i == b { Arc::clone(first) } else { read_block(s, obj, i).await? };
        let limit = if i == b { within } else { block.payload().len() };
        let at =
            block.payload()[..limit].chunks_exact(PACKET).rposition(|p| pid(p) == 0 && pusi(p));
        match at {
            Some(k) => {
                found = Some((i, block, k * PACKET));
                break;
            }
            None if i != b => {
                s.media.no_pat().insert(key(i));
            }
            None => {}
        }
    }
    let Some((mut i, mut block, pat_at)) = found else { return Ok(None) };
    let pat = &block.payload()[pat_at..pat_at + PACKET];
    let pmts = pat_pmt_pids(pat);
    let mut psi = pat.to_vec();
    // Then the first PMT section start after it, and its continuation packets.
    let mut at = pat_at + PACKET;
    let mut in_pmt: Option<u16> = None;
    loop {
        let limit = if i == b { within } else { block.payload().len() };
        while at + PACKET <= limit {
            let p = &block.payload()[at..at + PACKET];
            match in_pmt {
                None if pmts.contains(&pid(p)) && pusi(p) => {
                    in_pmt = Some(pid(p));
                    psi.extend_from_slice(p);
                }
                Some(q) if pid(p) == q && !pusi(p) => psi.extend_from_slice(p),
                Some(_) => return Ok(Some(psi)),
                None => {}
            }
            at += PACKET;
        }
        if i >= b {
            return Ok(Some(psi));
        }
        i += 1;
        at = 0;
        block = if i == b { Arc::clone(first) } else { read_block(s, obj, i).await? };
    }
}

// ---------------------------------------------------------------------------------------------
// The player page and its script.

/// `GET /watch/{name}`: the HLS player page.
pub(crate) async fn watch(State(s): State<ApiState>, Path(name): Path<String>) -> Response {
    if !s.library.contains(&name) {
        return not_found(&name);
    }
    let mut r = WATCH_HTML.into_response();
    set(&mut r, header::CONTENT_TYPE, "text/html; charset=utf-8");
    set(&mut r, header::CACHE_CONTROL, "no-cache");
    r
}

/// `GET /assets/vendor/hls.light.min.js`: the vendored hls.js.
pub(crate) async fn hls_js() -> Response {
    script(HLS_JS)
}

/// `GET /assets/vendor/dash.mediaplayer.min.js`: the vendored dash.js (`/watch/NAME?player=dash`).
pub(crate) async fn dash_js() -> Response {
    script(DASH_JS)
}

fn script(bytes: &'static [u8]) -> Response {
    let mut r = bytes.into_response();
    set(&mut r, header::CONTENT_TYPE, "text/javascript; charset=utf-8");
    // Versioned by the server build: a day is safe.
    set(&mut r, header::CACHE_CONTROL, "public, max-age=86400");
    r
}

#[cfg(test)]
mod tests {
    use isochron_base::ObjectId;
    use isochron_store::catalog::SeekPoint;

    use super::*;

    fn record(points: &[(u64, f64)], packets: u64, duration: f64) -> ObjectRecord {
        ObjectRecord {
            id: ObjectId(1),
            name: "x".into(),
            seed: 0,
            first_epoch: Default::default(),
            block_size: Bytes::mib(1),
            blocks: Vec::new(),
            packets,
            ts_bytes: Bytes(0),
            duration: MediaTime::from_secs_f64(duration),
            avg_bitrate: Default::default(),
            peak_bitrate: Default::default(),
            seek_points: points
                .iter()
                .map(|&(g, t)| SeekPoint { gsn: Gsn(g), time: MediaTime::from_secs_f64(t) })
                .collect(),
            streams: Vec::new(),
            source_file: String::new(),
            created_unix_s: 0,
            media: None,
        }
    }

    fn secs(v: &[Segment]) -> Vec<f64> {
        v.iter().map(|s| (s.duration.as_secs_f64() * 100.0).round() / 100.0).collect()
    }

    #[test]
    fn segments_group_seek_points_near_the_target() {
        // A keyframe a second, PATs a little before it.
        let pts: Vec<(u64, f64)> =
            (0..12).map(|i| (i * 100, if i == 0 { 0.0 } else { i as f64 - 0.04 })).collect();
        let segs = plan_segments(&record(&pts, 1200, 11.9), Duration::from_secs(4));
        assert_eq!(secs(&segs), [3.96, 4.0, 3.94]);
        assert_eq!(segs[0].start, Gsn(0));
        assert_eq!(segs[0].end, Some(Gsn(400)));
        assert_eq!(segs[1].start, Gsn(400));
        assert_eq!(segs[2].end, None);
        let text = playlist_of(&segs, "ts", None, None);
        assert!(text.starts_with("#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:4\n"), "{text}");
        assert!(
            text.contains("#EXTINF:3.960,\n0.ts\n") && text.ends_with("2.ts\n#EXT-X-ENDLIST\n")
        );
    }

    #[test]
    fn duplicates_and_long_gops() {
        // Seek points at the same instant collapse; a 10 s GOP makes one long segment.
        let pts = [(0, 0.0), (1, 0.0), (50, 10.0), (60, 10.0), (90, 12.0)];
        let segs = plan_segments(&record(&pts, 100, 13.0), Duration::from_secs(4));
        assert_eq!(secs(&segs), [10.0, 3.0]);
        assert_eq!(segs[1].start, Gsn(50));
        // No seek point but the first: one segment.
        let segs = plan_segments(&record(&[(0, 0.0)], 10, 2.5), Duration::from_secs(4));
        assert_eq!(secs(&segs), [2.5]);
        assert_eq!(
            playlist_of(&segs, "ts", None, None).lines().nth(2),
            Some("#EXT-X-TARGETDURATION:3")
        );
    }

    #[test]
    fn a_growing_recording_lists_only_segments_that_cannot_change() {
        // A key frame a second; the finished object is 12 s long.
        let pts: Vec<(u64, f64)> = (0..12).map(|i| (i * 100, i as f64)).collect();
        let whole = plan_segments(&record(&pts, 1200, 12.0), Duration::from_secs(4));
        for committed in 1..=12 {
            let prefix = record(&pts[..committed], committed as u64 * 100, committed as f64);
            let closed = closed_segments(&prefix, Duration::from_secs(4));
            assert!(whole.starts_with(&closed), "{committed} s: {closed:?} of {whole:?}");
            // A segment is closed once the first key frame at or past its goal is committed.
            assert_eq!(closed.len(), committed.saturating_sub(1) / 4, "{committed} s");
        }
        let prefix = record(&pts[..9], 900, 9.0);
        let live = Live { zero_unix_ms: 1_764_751_800_250, target: Duration::from_secs(4) };
        let text = playlist_of(&closed_segments(&prefix, live.target), "m4s", None, Some(live));
        assert!(text.contains("#EXT-X-TARGETDURATION:4\n"), "{text}");
        assert!(text.contains("#EXT-X-PLAYLIST-TYPE:EVENT\n"), "{text}");
        assert!(!text.contains("ENDLIST"), "{text}");
        assert!(
            text.ends_with(
                "#EXT-X-PROGRAM-DATE-TIME:2025-12-03T08:50:00.250Z\n#EXTINF:4.000,\n0.m4s\n\
                 #EXT-X-PROGRAM-DATE-TIME:2025-12-03T08:50:04.250Z\n#EXTINF:4.000,\n1.m4s\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn dates_are_iso_8601_in_utc() {
        assert_eq!(iso8601_ms(0), "1970-01-01T00:00:00.000Z");
        // The leap day of a year divisible by 400, and the day after.
        assert_eq!(iso8601_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(iso8601_ms(951_868_799_999), "2000-02-29T23:59:59.999Z");
        assert_eq!(iso8601_ms(951_868_800_000), "2000-03-01T00:00:00.000Z");
        assert_eq!(iso8601_ms(4_107_542_400_001), "2100-03-01T00:00:00.001Z");
    }

    #[test]
    fn pat_lists_pmt_pids() {
        // PAT: program 0 (NIT on 0x10) and program 1 on PMT PID 0x1000.
        let mut p = vec![0xffu8; PACKET];
        p[..4].copy_from_slice(&[0x47, 0x40, 0x00, 0x10]);
        let sec =
            [0x00, 0x00, 0xb0, 0x11, 0, 1, 0xc1, 0, 0, 0, 0, 0xe0, 0x10, 0, 1, 0xf0, 0, 1, 2, 3, 4];
        p[4..4 + sec.len()].copy_from_slice(&sec);
        assert_eq!(pat_pmt_pids(&p), [0x1000]);
        assert!(etag_listed("\"a\", W/\"b\"", "\"b\"", true));
        assert!(!etag_listed("W/\"b\"", "\"b\"", false));
    }
}
