//! Matroska and WebM demuxing: a sans-IO EBML walker (RFC 8794, RFC 9559).
//!
//! Why our own walker: the Rust Matroska crates read through `Read + Seek` and hand out frame
//! payloads; we want the opposite — element headers only, frame offsets recorded, payloads
//! skipped — and the subset we need is small (RFC 9559 §5.1).
//!
//! The walk asks for element headers (with a few KiB of read-ahead, so runs of small blocks come
//! in one read), reads the EBML header, `Info` and `Tracks` whole, enters `Segment`, `Cluster`
//! and `BlockGroup`, and skips everything else (`Cues`, `Tags`, `SeekHead`, `Void`, …). An
//! element of unknown size (live recordings leave `Segment` and `Cluster` sizes unknown,
//! RFC 9559 §6.2) ends where an element that cannot be its child begins, or at the end of the
//! file. Only the first `Segment` is read.
//!
//! - Blocks (§10): `SimpleBlock` (keyframe flag) and `BlockGroup` (`Block`; a
//!   `ReferenceBlock` means not a keyframe; `BlockDuration`). Laced blocks (Xiph, EBML and
//!   fixed-size lacing, §10.4) are read whole to find the frame sizes; each frame becomes its
//!   own sample at its own offset, timed `block time + i × frame duration` (the block duration
//!   split evenly, else `DefaultDuration`, else the gap to the track's next block split
//!   evenly, or for the last block the frame duration before it).
//! - Times are nanoseconds: `(Cluster Timestamp + block offset) × TimestampScale`, minus the
//!   track's `CodecDelay` (§5.1.4.1.15: it "MUST be subtracted from each frame timestamp").
//!   Matroska has no decode times: audio gets dts = pts; video gets the track's presentation
//!   times sorted ascending, shifted down by the least amount that keeps dts ≤ pts for every
//!   frame (so a track without B-frames keeps dts = pts).
//! - Durations: `BlockDuration`, else `DefaultDuration`; an audio frame with neither gets the
//!   gap to its track's next frame (the last frame repeats the one before). Video frames
//!   without either keep duration 0.
//!
//! Not supported: tracks with `ContentEncoding` (header stripping, compression, encryption:
//! skipped), `TrackTimestampScale` other than 1, `EncryptedBlock`, and `Cluster`s before
//! `Tracks` (an error).

use super::bytes::Cursor;
use super::config;
use super::index::IndexBuilder;
use super::{
    Codec, CodecConfig, ContainerError, ContainerKind, MAX_BOX_SIZE, MediaIndex, NANOS_PER_SECOND,
    SUPPORTED_CODECS, Sample, Step, Track, Window,
};
use crate::StreamKind;

/// Bytes to read at each element header: runs of small blocks then take one read.
const READ_AHEAD: u64 = 4096;
/// The longest element header: a 4-byte ID and an 8-byte size.
const MAX_HEADER: u64 = 12;
/// The largest EBML header we read.
const MAX_EBML_HEADER: u64 = 64 << 10;

const EBML: u32 = 0x1A45_DFA3;
const DOC_TYPE: u32 = 0x4282;
const SEGMENT: u32 = 0x1853_8067;
const SEEK_HEAD: u32 = 0x114D_9B74;
const INFO: u32 = 0x1549_A966;
const TIMESTAMP_SCALE: u32 = 0x2A_D7B1;
const TRACKS: u32 = 0x1654_AE6B;
const TRACK_ENTRY: u32 = 0xAE;
const TRACK_NUMBER: u32 = 0xD7;
const CODEC_ID: u32 = 0x86;
const CODEC_PRIVATE: u32 = 0x63A2;
const DEFAULT_DURATION: u32 = 0x23_E383;
const CODEC_DELAY: u32 = 0x56AA;
const LANGUAGE: u32 = 0x22_B59C;
const LANGUAGE_BCP47: u32 = 0x22_B59D;
const VIDEO: u32 = 0xE0;
const PIXEL_WIDTH: u32 = 0xB0;
const PIXEL_HEIGHT: u32 = 0xBA;
const AUDIO: u32 = 0xE1;
const SAMPLING_FREQUENCY: u32 = 0xB5;
const OUTPUT_SAMPLING_FREQUENCY: u32 = 0x78B5;
const CHANNELS: u32 = 0x9F;
const CONTENT_ENCODINGS: u32 = 0x6D80;
const CLUSTER: u32 = 0x1F43_B675;
const TIMESTAMP: u32 = 0xE7;
const SIMPLE_BLOCK: u32 = 0xA3;
const BLOCK_GROUP: u32 = 0xA0;
const BLOCK: u32 = 0xA1;
const BLOCK_DURATION: u32 = 0x9B;
const REFERENCE_BLOCK: u32 = 0xFB;
const CUES: u32 = 0x1C53_BB6B;
const CHAPTERS: u32 = 0x1043_A770;
const TAGS: u32 = 0x1254_C367;
const ATTACHMENTS: u32 = 0x1941_A469;
const VOID: u32 = 0xEC;
const CRC32: u32 = 0xBF;

/// The children a `Segment` may have (RFC 9559 §5.1), to end an unknown-size one.
const SEGMENT_CHILDREN: [u32; 8] =
    [SEEK_HEAD, INFO, TRACKS, CLUSTER, CUES, CHAPTERS, TAGS, ATTACHMENTS];
/// The children a `Cluster` may have (§5.1.3): Timestamp, SilentTracks, Position, PrevSize,
/// SimpleBlock, BlockGroup, EncryptedBlock.
const CLUSTER_CHILDREN: [u32; 7] = [TIMESTAMP, 0x5854, 0xA7, 0xAB, SIMPLE_BLOCK, BLOCK_GROUP, 0xAF];
/// The children a `BlockGroup` may have (§5.1.3.5).
const BLOCK_GROUP_CHILDREN: [u32; 10] =
    [BLOCK, 0xA2, 0x75A1, BLOCK_DURATION, 0xFA, REFERENCE_BLOCK, 0xFD, 0xA4, 0x75A2, 0x8E];

/// An element's name for messages.
fn name(id: u32) -> String {
    let known = match id {
        EBML => "EBML",
        SEGMENT => "Segment",
        SEEK_HEAD => "SeekHead",
        INFO => "Info",
        TIMESTAMP_SCALE => "TimestampScale",
        TRACKS => "Tracks",
        TRACK_ENTRY => "TrackEntry",
        TRACK_NUMBER => "TrackNumber",
        CODEC_ID => "CodecID",
        CODEC_PRIVATE => "CodecPrivate",
        CLUSTER => "Cluster",
        TIMESTAMP => "Timestamp",
        SIMPLE_BLOCK => "SimpleBlock",
        BLOCK_GROUP => "BlockGroup",
        BLOCK => "Block",
        BLOCK_DURATION => "BlockDuration",
        CUES => "Cues",
        TAGS => "Tags",
        VOID => "Void",
        _ => return format!("element 0x{id:X}"),
    };
    format!("{known} element")
}

fn malformed(id: u32, offset: u64, detail: impl Into<String>) -> ContainerError {
    ContainerError::Malformed { what: name(id), offset, detail: detail.into() }
}

/// Reads an EBML variable-size integer (RFC 8794 §4): `(value without marker, length, all
/// value bits set)`. `Ok(None)` if `data` is too short; `Err` if the length exceeds 8.
fn vint(data: &[u8]) -> Result<Option<(u64, usize, bool)>, ()> {
    let Some(&first) = data.first() else { return Ok(None) };
    if first == 0 {
        return Err(());
    }
    let len = first.leading_zeros() as usize + 1;
    let Some(bytes) = data.get(..len) else { return Ok(None) };
    let mut v = u64::from(first) & (0xFF >> len);
    for &b in &bytes[1..] {
        v = (v << 8) | u64::from(b);
    }
    let all_ones = v == (1u64 << (7 * len)) - 1;
    Ok(Some((v, len, all_ones)))
}

/// An element header: ID (with its marker bits, as the spec writes IDs), size (`None` if
/// unknown), header length.
#[derive(Clone, Copy, Debug)]
struct Header {
    id: u32,
    size: Option<u64>,
    len: usize,
}

/// Parses an element header. `Ok(None)` if `data` is too short.
fn header(data: &[u8], offset: u64) -> Result<Option<Header>, ContainerError> {
    let bad = |detail: &str| ContainerError::Malformed {
        what: "EBML element header".to_owned(),
        offset,
        detail: detail.to_owned(),
    };
    let Some(&first) = data.first() else { return Ok(None) };
    if first == 0 || first.leading_zeros() >= 4 {
        return Err(bad("element ID longer than 4 bytes"));
    }
    let id_len = first.leading_zeros() as usize + 1;
    let Some(id_bytes) = data.get(..id_len) else { return Ok(None) };
    let id = id_bytes.iter().fold(0u32, |a, &b| (a << 8) | u32::from(b));
    let Some((size, size_len, unknown)) =
        vint(&data[id_len..]).map_err(|()| bad("element size longer than 8 bytes"))?
    else {
        return Ok(None);
    };
    Ok(Some(Header { id, size: (!unknown).then_some(size), len: id_len + size_len }))
}

/// One child element inside a parent held in memory.
#[derive(Clone, Copy, Debug)]
struct Element<'a> {
    id: u32,
    /// File offset of the element's header.
    offset: u64,
    /// File offset of the body.
    body_offset: u64,
    body: &'a [u8],
}

impl<'a> Element<'a> {
    /// The elements inside this one.
    fn children(&self) -> Elements<'a> {
        Elements { data: self.body, pos: 0, base: self.body_offset, failed: false }
    }

    /// The body as an unsigned integer (RFC 8794 §7.2).
    fn uint(&self) -> Result<u64, ContainerError> {
        if self.body.len() > 8 {
            return Err(malformed(self.id, self.offset, "unsigned integer longer than 8 bytes"));
        }
        Ok(self.body.iter().fold(0u64, |a, &b| (a << 8) | u64::from(b)))
    }

    /// The body as a float (RFC 8794 §7.3: 0, 4 or 8 bytes).
    fn float(&self) -> Result<f64, ContainerError> {
        match self.body.len() {
            0 => Ok(0.0),
            4 => Ok(f64::from(f32::from_be_bytes(self.body.try_into().unwrap_or_default()))),
            8 => Ok(f64::from_be_bytes(self.body.try_into().unwrap_or_default())),
            n => Err(malformed(self.id, self.offset, format!("float of {n} bytes"))),
        }
    }

    /// The body as a string, up to the first NUL (RFC 8794 §7.4-7.5).
    fn string(&self) -> String {
        let end = self.body.iter().position(|&b| b == 0).unwrap_or(self.body.len());
        String::from_utf8_lossy(&self.body[..end]).into_owned()
    }
}

/// Iterates over the elements in a parent's body held in memory.
struct Elements<'a> {
    data: &'a [u8],
    pos: usize,
    base: u64,
    failed: bool,
}

impl<'a> Iterator for Elements<'a> {
    type Item = Result<Element<'a>, ContainerError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let rest = self.data.get(self.pos..).filter(|r| !r.is_empty())?;
        let offset = self.base + self.pos as u64;
        let result = match header(rest, offset) {
            Ok(Some(Header { id, size: Some(size), len })) if size <= (rest.len() - len) as u64 => {
                let end = len + size as usize; // ≤ rest.len()
                self.pos += end;
                Ok(Element { id, offset, body_offset: offset + len as u64, body: &rest[len..end] })
            }
            Ok(Some(Header { id, size: Some(size), len })) => Err(malformed(
                id,
                offset,
                format!("size {size} exceeds the {} bytes left in its parent", rest.len() - len),
            )),
            Ok(Some(Header { id, size: None, .. })) => {
                Err(malformed(id, offset, "unknown size inside an element read whole"))
            }
            Ok(None) => Err(ContainerError::Malformed {
                what: "EBML element header".to_owned(),
                offset,
                detail: "truncated at the end of its parent".to_owned(),
            }),
            Err(e) => Err(e),
        };
        self.failed = result.is_err();
        Some(result)
    }
}

/// A master element the walk is inside.
#[derive(Clone, Copy, Debug)]
struct Open {
    id: u32,
    /// File offset of the first byte after it; `None` for an unknown size.
    end: Option<u64>,
}

/// What the walk keeps about a track.
#[derive(Clone, Debug)]
struct MkvTrack {
    number: u64,
    /// Index in the builder, if supported.
    index: Option<u16>,
    audio: bool,
    /// `DefaultDuration` in nanoseconds.
    default_duration: Option<u64>,
    /// `CodecDelay` in nanoseconds.
    codec_delay: u64,
}

/// A block read but not yet turned into samples.
#[derive(Clone, Debug)]
struct Pending {
    index: u16,
    audio: bool,
    default_duration: Option<u64>,
    /// Presentation time of the first frame, ns.
    pts: i64,
    keyframe: bool,
    /// `(file offset, size)` of each frame.
    frames: Vec<(u64, u32)>,
}

/// A `BlockGroup` being read.
#[derive(Clone, Debug, Default)]
struct Group {
    block: Option<Pending>,
    /// `BlockDuration`, in segment ticks.
    duration: Option<u64>,
    reference: bool,
}

/// Laced frames whose duration is known only once the track's next block is seen.
#[derive(Clone, Copy, Debug)]
struct LaceFix {
    index: u16,
    /// Position of the first frame in the track's sample list.
    first: usize,
    count: usize,
}

/// The Matroska side of [`Demuxer`](super::Demuxer).
#[derive(Debug)]
pub(crate) struct MkvParser {
    file_len: u64,
    pos: u64,
    stack: Vec<Open>,
    seen_header: bool,
    seen_segment: bool,
    done: bool,
    /// Nanoseconds per segment tick (`TimestampScale`).
    scale: u64,
    tracks: Option<Vec<MkvTrack>>,
    /// The current `Cluster Timestamp`, in ticks.
    cluster_time: i64,
    group: Option<Group>,
    laces: Vec<LaceFix>,
    builder: IndexBuilder,
}

impl MkvParser {
    pub(crate) fn new(file_len: u64) -> Self {
        Self {
            file_len,
            pos: 0,
            stack: Vec::new(),
            seen_header: false,
            seen_segment: false,
            done: false,
            scale: 1_000_000,
            tracks: None,
            cluster_time: 0,
            group: None,
            laces: Vec::new(),
            builder: IndexBuilder::new(file_len),
        }
    }

    /// Walks elements until it needs bytes it does not have.
    pub(crate) fn run(&mut self, w: Window<'_>) -> Result<Step, ContainerError> {
        loop {
            if self.done {
                return Ok(Step::Done);
            }
            if let Some(top) = self.stack.last().copied()
                && top.end.is_some_and(|end| self.pos >= end)
            {
                self.close()?;
                continue;
            }
            if self.pos >= self.file_len {
                while !self.stack.is_empty() {
                    self.close()?;
                }
                self.done = true;
                continue;
            }
            let remaining = self.file_len - self.pos;
            let min = remaining.min(MAX_HEADER);
            let Some(data) = w.from(self.pos, min) else {
                return Ok(Step::Need { pos: self.pos, min, want: remaining.min(READ_AHEAD) });
            };
            let Some(h) = header(data, self.pos)? else {
                return Err(ContainerError::Truncated {
                    what: "EBML element header".to_owned(),
                    offset: self.pos,
                    needed: MAX_HEADER.min(remaining + 1),
                    file_len: self.file_len,
                });
            };
            if let Some(step) = self.element(w, h)? {
                return Ok(step);
            }
        }
    }

    /// Handles the element whose header `h` is at `self.pos`; `Some` if it needs more bytes.
    fn element(&mut self, w: Window<'_>, h: Header) -> Result<Option<Step>, ContainerError> {
        let pos = self.pos;
        let data_pos = pos + h.len as u64;
        let parent = self.stack.last().copied();
        if let Some(p) = parent
            && p.end.is_none()
            && !may_contain(p.id, h.id)
        {
            // An element that cannot be inside an unknown-size parent ends it (§6.2).
            self.close()?;
            return Ok(None);
        }
        if !self.seen_header && h.id != EBML {
            return Err(malformed(h.id, pos, "the file does not start with an EBML header"));
        }
        let end = match h.size {
            Some(size) => {
                let end = data_pos.checked_add(size).filter(|&e| e <= self.file_len);
                let Some(end) = end else {
                    return Err(ContainerError::Truncated {
                        what: name(h.id),
                        offset: pos,
                        needed: size.saturating_add(h.len as u64),
                        file_len: self.file_len,
                    });
                };
                if let Some(pend) = parent.and_then(|p| p.end)
                    && end > pend
                {
                    return Err(malformed(
                        h.id,
                        pos,
                        format!("it ends at {end}, past the end of its parent at {pend}"),
                    ));
                }
                Some(end)
            }
            None if matches!(h.id, SEGMENT | CLUSTER | BLOCK_GROUP) => None,
            None => {
                return Err(malformed(
                    h.id,
                    pos,
                    "unknown size (only Segment, Cluster and BlockGroup may have one)",
                ));
            }
        };
        let parent_id = parent.map(|p| p.id);
        match (parent_id, h.id) {
            (None, EBML) => {
                let Some(body) = self.whole(w, h, MAX_EBML_HEADER)? else {
                    return Ok(Some(self.need_whole(h)));
                };
                self.ebml_header(body)?;
                self.seen_header = true;
            }
            (None, SEGMENT) => {
                if self.seen_segment {
                    // Only the first segment is read.
                    self.done = true;
                    return Ok(None);
                }
                self.seen_segment = true;
                self.stack.push(Open { id: SEGMENT, end });
                self.pos = data_pos;
                return Ok(None);
            }
            (Some(SEGMENT), INFO) => {
                let Some(body) = self.whole(w, h, MAX_BOX_SIZE)? else {
                    return Ok(Some(self.need_whole(h)));
                };
                self.info(body)?;
            }
            (Some(SEGMENT), TRACKS) => {
                let Some(body) = self.whole(w, h, MAX_BOX_SIZE)? else {
                    return Ok(Some(self.need_whole(h)));
                };
                if self.tracks.is_none() {
                    self.tracks_element(body)?;
                }
            }
            (Some(SEGMENT), CLUSTER) => {
                if self.tracks.is_none() {
                    return Err(malformed(h.id, pos, "Cluster before the Tracks element"));
                }
                self.cluster_time = 0;
                self.stack.push(Open { id: CLUSTER, end });
                self.pos = data_pos;
                return Ok(None);
            }
            (Some(CLUSTER), TIMESTAMP) => {
                let Some(body) = self.whole(w, h, 8)? else {
                    return Ok(Some(self.need_whole(h)));
                };
                let t = body.uint()?;
                self.cluster_time = i64::try_from(t).map_err(|_| {
                    malformed(h.id, pos, format!("cluster timestamp {t} is too large"))
                })?;
            }
            (Some(CLUSTER), SIMPLE_BLOCK) | (Some(BLOCK_GROUP), BLOCK) => {
                if let Some(step) = self.block(w, h)? {
                    return Ok(Some(step));
                }
            }
            (Some(CLUSTER), BLOCK_GROUP) => {
                self.group = Some(Group::default());
                self.stack.push(Open { id: BLOCK_GROUP, end });
                self.pos = data_pos;
                return Ok(None);
            }
            (Some(BLOCK_GROUP), BLOCK_DURATION) => {
                let Some(body) = self.whole(w, h, 8)? else {
                    return Ok(Some(self.need_whole(h)));
                };
                let d = body.uint()?;
                if let Some(g) = self.group.as_mut() {
                    g.duration = Some(d);
                }
            }
            (Some(BLOCK_GROUP), REFERENCE_BLOCK) => {
                if let Some(g) = self.group.as_mut() {
                    g.reference = true;
                }
            }
            (_, SEGMENT | CLUSTER | BLOCK_GROUP) if end.is_none() => {
                return Err(malformed(h.id, pos, "unknown size where it cannot be entered"));
            }
            _ => {} // skipped
        }
        // Every element not entered above has a known size.
        self.pos = end.unwrap_or(self.file_len);
        Ok(None)
    }

    /// The element at `self.pos` whole, if the window holds it; fails above `limit` bytes.
    fn whole<'w>(
        &self,
        w: Window<'w>,
        h: Header,
        limit: u64,
    ) -> Result<Option<Element<'w>>, ContainerError> {
        let size = h.size.unwrap_or(0);
        if size > limit {
            return Err(ContainerError::TooLarge {
                what: name(h.id),
                offset: self.pos,
                size,
                limit,
            });
        }
        let total = size + h.len as u64;
        Ok(w.exact(self.pos, total).map(|bytes| Element {
            id: h.id,
            offset: self.pos,
            body_offset: self.pos + h.len as u64,
            body: &bytes[h.len..],
        }))
    }

    fn need_whole(&self, h: Header) -> Step {
        let total = h.size.unwrap_or(0) + h.len as u64;
        Step::Need {
            pos: self.pos,
            min: total,
            want: total.max(READ_AHEAD.min(self.file_len - self.pos)),
        }
    }

    /// Leaves the innermost open element.
    fn close(&mut self) -> Result<(), ContainerError> {
        let Some(open) = self.stack.pop() else { return Ok(()) };
        match open.id {
            BLOCK_GROUP => {
                if let Some(g) = self.group.take()
                    && let Some(block) = g.block
                {
                    let mut block = block;
                    block.keyframe = block.audio || !g.reference;
                    let duration = g.duration.map(|d| d.saturating_mul(self.scale));
                    self.emit(block, duration)?;
                }
            }
            SEGMENT => self.done = true,
            _ => {}
        }
        if let Some(end) = open.end {
            self.pos = self.pos.max(end);
        }
        Ok(())
    }

    /// The EBML header: the document type must be Matroska or WebM (RFC 9559 §4.1).
    fn ebml_header(&self, e: Element<'_>) -> Result<(), ContainerError> {
        for c in e.children() {
            let c = c?;
            if c.id == DOC_TYPE {
                let doc = c.string();
                if doc != "matroska" && doc != "webm" {
                    return Err(malformed(
                        e.id,
                        e.offset,
                        format!("DocType \"{doc}\" is neither matroska nor webm"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// `Info`: the `TimestampScale`.
    fn info(&mut self, e: Element<'_>) -> Result<(), ContainerError> {
        for c in e.children() {
            let c = c?;
            if c.id == TIMESTAMP_SCALE {
                let scale = c.uint()?;
                if scale == 0 {
                    return Err(malformed(c.id, c.offset, "TimestampScale 0"));
                }
                self.scale = scale;
            }
        }
        Ok(())
    }

    /// `Tracks`: every `TrackEntry`.
    fn tracks_element(&mut self, e: Element<'_>) -> Result<(), ContainerError> {
        let mut tracks = Vec::new();
        for entry in e.children() {
            let entry = entry?;
            if entry.id != TRACK_ENTRY {
                continue;
            }
            let t = TrackEntry::parse(entry)?;
            if tracks.iter().any(|x: &MkvTrack| x.number == t.number) {
                return Err(malformed(
                    entry.id,
                    entry.offset,
                    format!("TrackNumber {} repeats", t.number),
                ));
            }
            let mut state = MkvTrack {
                number: t.number,
                index: None,
                audio: false,
                default_duration: t.default_duration.filter(|&d| d > 0),
                codec_delay: t.codec_delay,
            };
            match t.track(entry)? {
                Ok(track) => {
                    state.audio = track.kind == StreamKind::Audio;
                    state.index = Some(self.builder.add_track(track)?);
                }
                Err((codec, reason)) => self.builder.skip(t.number, codec, reason),
            }
            tracks.push(state);
        }
        self.tracks = Some(tracks);
        Ok(())
    }

    /// A `SimpleBlock` or a `Block` (§10): its track, time, flags and frames.
    fn block(&mut self, w: Window<'_>, h: Header) -> Result<Option<Step>, ContainerError> {
        let pos = self.pos;
        let size = h.size.unwrap_or(0);
        let total = size + h.len as u64;
        let head_len = total.min(h.len as u64 + 12);
        let Some(bytes) = w.from(pos, head_len) else {
            let want = total.min(READ_AHEAD.min(self.file_len - pos)).max(head_len);
            return Ok(Some(Step::Need { pos, min: head_len, want }));
        };
        // Only the element's own bytes: the window may hold what follows it, or not.
        let body = bytes.get(h.len..).unwrap_or_default();
        let body = body.get(..usize::try_from(size).unwrap_or(usize::MAX)).unwrap_or(body);
        let bad = |detail: &str| malformed(h.id, pos, detail);
        let short = || bad("shorter than its block header");
        let (number, nlen, _) =
            vint(body).map_err(|()| bad("track number longer than 8 bytes"))?.ok_or_else(short)?;
        let mut c = Cursor::new(body.get(nlen..).ok_or_else(short)?);
        let rel = c.array::<2>().map(i16::from_be_bytes).ok_or_else(short)?;
        let flags = c.u8().ok_or_else(short)?;
        let header_len = nlen + 3;
        let Some(track) = self.tracks.as_ref().and_then(|t| t.iter().find(|t| t.number == number))
        else {
            return Ok(None); // a block for a track not in Tracks: ignored
        };
        let Some(index) = track.index else { return Ok(None) };
        let (audio, default_duration, codec_delay) =
            (track.audio, track.default_duration, track.codec_delay);
        let data_pos = pos + h.len as u64;
        let lacing = (flags >> 1) & 0x03;
        let frames = if lacing == 0 {
            let len = size.checked_sub(header_len as u64).ok_or_else(short)?;
            let len = u32::try_from(len).map_err(|_| bad("frame larger than 4 GiB"))?;
            vec![(data_pos + header_len as u64, len)]
        } else {
            if size > MAX_BOX_SIZE {
                return Err(ContainerError::TooLarge {
                    what: name(h.id),
                    offset: pos,
                    size,
                    limit: MAX_BOX_SIZE,
                });
            }
            let Some(all) = w.exact(pos, total) else {
                return Ok(Some(Step::Need { pos, min: total, want: total }));
            };
            let laced = all.get(h.len + header_len..).unwrap_or_default();
            let sizes = lace_sizes(lacing, laced).map_err(|d| bad(&d))?;
            let mut at = data_pos
                + header_len as u64
                + (laced.len() - sizes.iter().map(|&s| s as usize).sum::<usize>()) as u64;
            sizes
                .into_iter()
                .map(|s| {
                    let f = (at, s);
                    at += u64::from(s);
                    f
                })
                .collect()
        };
        let ticks = self.cluster_time.checked_add(i64::from(rel));
        let scale = i64::try_from(self.scale).unwrap_or(i64::MAX);
        let Some(ns) = ticks.and_then(|t| t.checked_mul(scale)) else {
            return Err(bad("timestamp overflows 64 bits of nanoseconds"));
        };
        let pending = Pending {
            index,
            audio,
            default_duration,
            pts: ns.saturating_sub(i64::try_from(codec_delay).unwrap_or(i64::MAX)),
            keyframe: audio || flags & 0x80 != 0,
            frames,
        };
        if h.id == SIMPLE_BLOCK {
            self.emit(pending, None)?;
        } else if let Some(g) = self.group.as_mut() {
            g.block = Some(pending);
        }
        self.pos = data_pos + size;
        Ok(None)
    }

    /// Turns a block into samples; `duration` is the whole block's, in ns, if known.
    fn emit(&mut self, b: Pending, duration: Option<u64>) -> Result<(), ContainerError> {
        let n = b.frames.len() as u64;
        let frame = match (duration, n) {
            (Some(d), n) if n > 0 => Some(d / n),
            _ => b.default_duration,
        };
        let first = self.builder.samples.get(usize::from(b.index)).map_or(0, Vec::len);
        if frame.is_none() && n > 1 {
            self.laces.push(LaceFix { index: b.index, first, count: b.frames.len() });
        }
        let step = i64::try_from(frame.unwrap_or(0)).unwrap_or(i64::MAX);
        for (i, &(offset, size)) in b.frames.iter().enumerate() {
            let pts = b.pts.saturating_add(step.saturating_mul(i as i64));
            self.builder.push(Sample {
                track: b.index,
                dts: pts,
                pts,
                duration: u32::try_from(frame.unwrap_or(0)).unwrap_or(u32::MAX),
                keyframe: b.keyframe,
                offset,
                size,
            })?;
        }
        Ok(())
    }

    /// Fixes laced frame times, derives video decode times, and sorts.
    pub(crate) fn finish(mut self) -> Result<MediaIndex, ContainerError> {
        if !self.seen_segment {
            return Err(ContainerError::Missing {
                what: "Segment element",
                detail: "a Matroska file keeps its tracks and clusters in a Segment",
            });
        }
        let Some(tracks) = self.tracks.take() else {
            return Err(ContainerError::Missing {
                what: "Tracks element",
                detail: "a Matroska segment needs a Tracks element listing its tracks",
            });
        };
        for fix in &self.laces {
            let Some(list) = self.builder.samples.get_mut(usize::from(fix.index)) else { continue };
            let Some(start) = list.get(fix.first).map(|s| s.pts) else { continue };
            // Split the gap to the track's next block; the last block repeats the frame
            // duration before it.
            let step = match list.get(fix.first + fix.count) {
                Some(next) => next.pts.saturating_sub(start).max(0) / fix.count.max(1) as i64,
                None => fix
                    .first
                    .checked_sub(1)
                    .and_then(|p| list.get(p))
                    .map_or(0, |p| i64::from(p.duration)),
            };
            for (i, s) in list.iter_mut().skip(fix.first).take(fix.count).enumerate() {
                s.pts = start.saturating_add(step.saturating_mul(i as i64));
                s.dts = s.pts;
                s.duration = u32::try_from(step).unwrap_or(u32::MAX);
            }
        }
        for t in &tracks {
            let Some(list) = t.index.and_then(|i| self.builder.samples.get_mut(usize::from(i)))
            else {
                continue;
            };
            if t.audio {
                fill_durations(list);
            } else {
                derive_dts(list);
            }
        }
        self.builder.finish(ContainerKind::Matroska)
    }
}

/// Sets each sample's dts to the track's presentation times in ascending order, shifted down
/// just enough that dts ≤ pts everywhere.
fn derive_dts(list: &mut [Sample]) {
    let mut sorted: Vec<i64> = list.iter().map(|s| s.pts).collect();
    sorted.sort_unstable();
    let shift =
        list.iter().zip(&sorted).map(|(s, &d)| d.saturating_sub(s.pts)).max().unwrap_or(0).max(0);
    for (s, d) in list.iter_mut().zip(sorted) {
        s.dts = d.saturating_sub(shift);
    }
}

/// Gives audio samples without a duration the gap to the track's next sample (the last one
/// the duration of the one before it).
fn fill_durations(list: &mut [Sample]) {
    let mut prev = 0;
    for i in 0..list.len() {
        if list[i].duration == 0 {
            let gap = match list.get(i + 1) {
                Some(next) => next.pts.saturating_sub(list[i].pts),
                None => i64::from(prev),
            };
            list[i].duration = u32::try_from(gap.max(0)).unwrap_or(u32::MAX);
        }
        prev = list[i].duration;
    }
}

/// Whether an element `child` may appear inside `parent` (for unknown-size parents).
fn may_contain(parent: u32, child: u32) -> bool {
    if child == VOID || child == CRC32 {
        return true;
    }
    match parent {
        SEGMENT => SEGMENT_CHILDREN.contains(&child),
        CLUSTER => CLUSTER_CHILDREN.contains(&child),
        BLOCK_GROUP => BLOCK_GROUP_CHILDREN.contains(&child),
        _ => true,
    }
}

/// The frame sizes of a laced block (§10.4), from the bytes after the flags: the frame-count
/// byte, the lace sizes, then the frames.
fn lace_sizes(lacing: u8, data: &[u8]) -> Result<Vec<u32>, String> {
    let mut c = Cursor::new(data);
    let n = usize::from(c.u8().ok_or("no lace count")?) + 1;
    let mut sizes: Vec<u64> = Vec::with_capacity(n);
    match lacing {
        1 => {
            // Xiph: each size as a run of 255s and a final byte below 255.
            for _ in 0..n - 1 {
                let mut size = 0u64;
                loop {
                    let b = c.u8().ok_or("Xiph lace sizes are truncated")?;
                    size += u64::from(b);
                    if b != 255 {
                        break;
                    }
                }
                sizes.push(size);
            }
        }
        3 => {
            // EBML: the first size as a vint, then signed differences.
            let mut prev = 0i64;
            for i in 0..n - 1 {
                let (v, len, _) = vint(c.rest())
                    .map_err(|()| "EBML lace size longer than 8 bytes".to_owned())?
                    .ok_or("EBML lace sizes are truncated")?;
                c.skip(len).ok_or("EBML lace sizes are truncated")?;
                let size = if i == 0 {
                    i64::try_from(v).map_err(|_| "EBML lace size too large".to_owned())?
                } else {
                    let bias = (1i64 << (7 * len - 1)) - 1;
                    prev.checked_add(v as i64 - bias).ok_or("EBML lace size overflows")?
                };
                if size < 0 {
                    return Err(format!("EBML lace {i} has a negative size"));
                }
                prev = size;
                sizes.push(size as u64);
            }
        }
        _ => {
            // Fixed-size lacing.
            let rest = c.remaining() as u64;
            if !rest.is_multiple_of(n as u64) {
                return Err(format!("{rest} bytes do not split into {n} equal frames"));
            }
            sizes.extend(std::iter::repeat_n(rest / n as u64, n - 1));
        }
    }
    let used: u64 = sizes.iter().sum();
    let rest = c.remaining() as u64;
    let last = rest
        .checked_sub(used)
        .ok_or_else(|| format!("lace sizes add up to {used} bytes but only {rest} follow"))?;
    sizes.push(last);
    sizes
        .into_iter()
        .map(|s| u32::try_from(s).map_err(|_| "frame larger than 4 GiB".to_owned()))
        .collect()
}

/// The fields of a `TrackEntry` (§5.1.4.1) the index needs.
#[derive(Clone, Debug, Default)]
struct TrackEntry {
    number: u64,
    codec_id: String,
    codec_private: Option<(u64, Vec<u8>)>,
    default_duration: Option<u64>,
    codec_delay: u64,
    language: Option<String>,
    language_bcp47: Option<String>,
    width: u64,
    height: u64,
    sampling_frequency: Option<f64>,
    output_sampling_frequency: Option<f64>,
    channels: Option<u64>,
    content_encodings: bool,
}

impl TrackEntry {
    fn parse(entry: Element<'_>) -> Result<Self, ContainerError> {
        let mut t = Self::default();
        for c in entry.children() {
            let c = c?;
            match c.id {
                TRACK_NUMBER => t.number = c.uint()?,
                CODEC_ID => t.codec_id = c.string(),
                CODEC_PRIVATE => t.codec_private = Some((c.offset, c.body.to_vec())),
                DEFAULT_DURATION => t.default_duration = Some(c.uint()?),
                CODEC_DELAY => t.codec_delay = c.uint()?,
                LANGUAGE => t.language = Some(c.string()),
                LANGUAGE_BCP47 => t.language_bcp47 = Some(c.string()),
                CONTENT_ENCODINGS => t.content_encodings = true,
                VIDEO => {
                    for v in c.children() {
                        let v = v?;
                        match v.id {
                            PIXEL_WIDTH => t.width = v.uint()?,
                            PIXEL_HEIGHT => t.height = v.uint()?,
                            _ => {}
                        }
                    }
                }
                AUDIO => {
                    for a in c.children() {
                        let a = a?;
                        match a.id {
                            SAMPLING_FREQUENCY => t.sampling_frequency = Some(a.float()?),
                            OUTPUT_SAMPLING_FREQUENCY => {
                                t.output_sampling_frequency = Some(a.float()?);
                            }
                            CHANNELS => t.channels = Some(a.uint()?),
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        if t.number == 0 {
            return Err(malformed(entry.id, entry.offset, "no TrackNumber (or TrackNumber 0)"));
        }
        Ok(t)
    }

    /// The track, or `(codec, reason)` if it is skipped.
    fn track(&self, entry: Element<'_>) -> Result<Result<Track, (String, String)>, ContainerError> {
        let id = self.number;
        let unsupported = |codec: &str| {
            Ok(Err((
                codec.to_owned(),
                format!("codec {codec} is not supported (supported: {SUPPORTED_CODECS})"),
            )))
        };
        let cid = self.codec_id.as_str();
        let codec = match cid {
            "V_MPEG4/ISO/AVC" => Codec::H264,
            "V_MPEGH/ISO/HEVC" => Codec::H265,
            "A_OPUS" => Codec::Opus,
            "A_AC3" => Codec::Ac3,
            "A_MPEG/L3" => Codec::Mp3,
            _ if cid == "A_AAC" || cid.starts_with("A_AAC/") => Codec::Aac,
            "V_VP8" => return unsupported("vp8"),
            "V_VP9" => return unsupported("vp9"),
            "V_AV1" => return unsupported("av1"),
            "V_MPEG4/ISO/ASP" | "V_MPEG4/ISO/SP" | "V_MPEG4/ISO/AP" => return unsupported("mpeg4"),
            "V_MPEG2" => return unsupported("mpeg2video"),
            "V_MPEG1" => return unsupported("mpeg1video"),
            "V_MJPEG" => return unsupported("mjpeg"),
            "A_VORBIS" => return unsupported("vorbis"),
            "A_FLAC" => return unsupported("flac"),
            "A_EAC3" => return unsupported("eac3"),
            "A_DTS" => return unsupported("dts"),
            "A_MPEG/L2" => return unsupported("mp2"),
            "" => return unsupported("(no CodecID)"),
            other => return unsupported(other),
        };
        if self.content_encodings {
            return Ok(Err((
                codec.name().to_owned(),
                format!(
                    "codec {} uses ContentEncoding (compression or encryption), which is not \
                     supported",
                    codec.name()
                ),
            )));
        }
        let private = self.codec_private.as_ref().filter(|(_, p)| !p.is_empty());
        let bad_private = |e: String| {
            let offset = private.map_or(entry.offset, |(o, _)| *o);
            malformed(CODEC_PRIVATE, offset, format!("track {id}: {e}"))
        };
        let missing = |what: &str| {
            Ok(Err((
                codec.name().to_owned(),
                format!("codec {} has no {what} in CodecPrivate", codec.name()),
            )))
        };
        let rate = self.sampling_frequency.unwrap_or(8000.0);
        let rate = if rate.is_finite() && rate > 0.0 && rate < f64::from(u32::MAX) {
            rate.round() as u32
        } else {
            0
        };
        let channels = u8::try_from(self.channels.unwrap_or(1)).unwrap_or(u8::MAX);
        let (config, sample_rate, channels) = match codec {
            Codec::H264 | Codec::H265 => {
                let Some((_, p)) = private else {
                    return missing("decoder configuration record");
                };
                let parsed = if codec == Codec::H264 {
                    config::parse_avcc(p)
                } else {
                    config::parse_hvcc(p)
                };
                (parsed.map_err(bad_private)?, 0, 0)
            }
            Codec::Aac => {
                let asc = match private {
                    Some((_, p)) => p.clone(),
                    None => {
                        let profile = cid.rsplit('/').next().unwrap_or("");
                        let sbr = cid.ends_with("/SBR");
                        let object_type = match cid {
                            _ if sbr => 2,
                            "A_AAC/MPEG2/MAIN" | "A_AAC/MPEG4/MAIN" => 1,
                            "A_AAC/MPEG2/LC" | "A_AAC/MPEG4/LC" => 2,
                            "A_AAC/MPEG2/SSR" | "A_AAC/MPEG4/SSR" => 3,
                            "A_AAC/MPEG4/LTP" => 4,
                            _ => {
                                let _ = profile;
                                return missing("AudioSpecificConfig");
                            }
                        };
                        let out = self
                            .output_sampling_frequency
                            .filter(|r| r.is_finite() && *r > 0.0 && *r < f64::from(u32::MAX))
                            .map_or_else(|| rate.saturating_mul(2), |r| r.round() as u32);
                        config::build_asc(object_type, rate, channels, sbr.then_some(out))
                    }
                };
                let (r, ch) = match config::parse_asc(&asc) {
                    Some(a) => (
                        if a.sample_rate != 0 { a.sample_rate } else { rate },
                        match a.channels {
                            0 => channels,
                            7 => 8,
                            n => n,
                        },
                    ),
                    None => (rate, channels),
                };
                (CodecConfig::Aac { audio_specific_config: asc }, r, ch)
            }
            Codec::Opus => {
                let Some((_, p)) = private else {
                    return missing("OpusHead");
                };
                let cfg = config::parse_opus_head(p).map_err(bad_private)?;
                let ch = match &cfg {
                    CodecConfig::Opus { channels, .. } => *channels,
                    _ => channels,
                };
                (cfg, 48_000, ch)
            }
            Codec::Ac3 => (CodecConfig::Ac3, rate, channels),
            Codec::Mp3 => (CodecConfig::Mp3, rate, channels),
            // No Matroska codec id maps to it (a transport stream is a live feed's).
            Codec::Mp2t => {
                return Ok(Err((codec.name().to_owned(), "not a Matroska codec".to_owned())));
            }
        };
        let kind = codec.kind();
        let video = kind == StreamKind::Video;
        let language = self
            .language_bcp47
            .clone()
            .or_else(|| self.language.clone())
            .unwrap_or_else(|| "eng".to_owned()); // the spec's default (§5.1.4.1.19)
        Ok(Ok(Track {
            id,
            codec,
            kind,
            config,
            timescale: NANOS_PER_SECOND,
            width: if video { u16::try_from(self.width).unwrap_or(u16::MAX) } else { 0 },
            height: if video { u16::try_from(self.height).unwrap_or(u16::MAX) } else { 0 },
            sample_rate: if video { 0 } else { sample_rate },
            channels: if video { 0 } else { channels },
            language: (!language.is_empty() && language != "und").then_some(language),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vints() {
        assert_eq!(vint(&[0x81]), Ok(Some((1, 1, false))));
        assert_eq!(vint(&[0xFF]), Ok(Some((127, 1, true))));
        assert_eq!(vint(&[0x40, 0x02]), Ok(Some((2, 2, false))));
        assert_eq!(
            vint(&[0x01, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]),
            Ok(Some(((1 << 56) - 1, 8, true)))
        );
        assert_eq!(vint(&[0x40]), Ok(None));
        assert_eq!(vint(&[]), Ok(None));
        assert_eq!(vint(&[0x00, 1]), Err(()));
    }

    #[test]
    fn headers() {
        let h = header(&[0x1A, 0x45, 0xDF, 0xA3, 0x9F], 0).unwrap().unwrap();
        assert_eq!((h.id, h.size, h.len), (EBML, Some(31), 5));
        let h =
            header(&[0x1F, 0x43, 0xB6, 0x75, 0x01, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF], 0)
                .unwrap()
                .unwrap();
        assert_eq!((h.id, h.size, h.len), (CLUSTER, None, 12));
        assert!(header(&[0x1A, 0x45], 0).unwrap().is_none());
        assert!(header(&[0x08, 0, 0, 0, 0x81], 7).unwrap_err().to_string().contains("offset 7"));
    }

    #[test]
    fn lacing() {
        // Xiph: 3 frames of 300, 2 and (rest) 4 bytes.
        let mut d = vec![2, 255, 45, 2];
        d.extend_from_slice(&[0; 306]);
        assert_eq!(lace_sizes(1, &d), Ok(vec![300, 2, 4]));
        // EBML: 3 frames: 300, 298 (-2), rest 2.
        let mut d = vec![2, 0x41, 0x2C, 0xBD]; // 300 as a 2-byte vint, then -2 as a 1-byte one
        d.extend_from_slice(&[0; 600]);
        assert_eq!(lace_sizes(3, &d), Ok(vec![300, 298, 2]));
        // Fixed: 4 frames of 5.
        let mut d = vec![3];
        d.extend_from_slice(&[0; 20]);
        assert_eq!(lace_sizes(2, &d), Ok(vec![5, 5, 5, 5]));
        assert!(lace_sizes(2, &d[..20]).is_err());
        assert!(lace_sizes(1, &[1, 255]).is_err());
        assert!(lace_sizes(1, &[1, 10, 0, 0]).unwrap_err().contains("add up"));
        assert!(lace_sizes(3, &[2, 0x81, 0x80]).unwrap_err().contains("negative"));
        assert!(lace_sizes(1, &[]).is_err());
    }

    #[test]
    fn decode_times_for_b_frames() {
        let mk = |pts: i64| Sample {
            track: 0,
            dts: pts,
            pts,
            duration: 0,
            keyframe: false,
            offset: 0,
            size: 0,
        };
        // I P B B P B in decode order, 10 ms apart in presentation.
        let mut list: Vec<Sample> = [0, 30, 10, 20, 50, 40].into_iter().map(mk).collect();
        derive_dts(&mut list);
        let dts: Vec<i64> = list.iter().map(|s| s.dts).collect();
        assert_eq!(dts, [-10, 0, 10, 20, 30, 40]);
        assert!(list.iter().all(|s| s.dts <= s.pts));
        // Monotonic: unchanged.
        let mut list: Vec<Sample> = [0, 10, 20].into_iter().map(mk).collect();
        derive_dts(&mut list);
        assert!(list.iter().all(|s| s.dts == s.pts));
    }

    // A small Matroska writer for synthetic files.

    fn id_bytes(id: u32) -> Vec<u8> {
        let b = id.to_be_bytes();
        let skip = b.iter().position(|&x| x != 0).unwrap_or(3);
        b[skip..].to_vec()
    }

    fn el(id: u32, parts: &[&[u8]]) -> Vec<u8> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let mut out = id_bytes(id);
        if len < 0x7F {
            out.push(0x80 | len as u8);
        } else {
            out.push(0x01);
            out.extend_from_slice(&(len as u64).to_be_bytes()[1..]);
        }
        for p in parts {
            out.extend_from_slice(p);
        }
        out
    }

    fn uint(id: u32, v: u64) -> Vec<u8> {
        let b = v.to_be_bytes();
        let skip = b.iter().position(|&x| x != 0).unwrap_or(7);
        el(id, &[&b[skip..]])
    }

    fn unknown_size(id: u32) -> Vec<u8> {
        let mut out = id_bytes(id);
        out.extend_from_slice(&[0x01, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]);
        out
    }

    fn ebml_header(doc: &[u8]) -> Vec<u8> {
        el(EBML, &[&el(DOC_TYPE, &[doc])])
    }

    /// A SimpleBlock for `track` at `ts` with `flags` and the lace header and frames in `rest`.
    fn simple(track: u8, ts: i16, flags: u8, rest: &[u8]) -> Vec<u8> {
        let mut body = vec![0x80 | track];
        body.extend_from_slice(&ts.to_be_bytes());
        body.push(flags);
        body.extend_from_slice(rest);
        el(SIMPLE_BLOCK, &[&body])
    }

    fn audio(rate: f32, channels: u64) -> Vec<u8> {
        el(AUDIO, &[&el(SAMPLING_FREQUENCY, &[&rate.to_be_bytes()]), &uint(CHANNELS, channels)])
    }

    fn demux(file: &[u8]) -> Result<MediaIndex, ContainerError> {
        let whole = super::super::demux_bytes(file);
        let mut d = super::super::Demuxer::new(ContainerKind::Matroska, file.len() as u64);
        while let Some(need) = d.poll_need() {
            let start = need.offset as usize;
            let end = start + (need.len as usize).min(3);
            if d.handle_data(need.offset, &file[start..end]).is_err() {
                break;
            }
        }
        assert_eq!(d.finish(), whole, "the streaming demuxer disagrees");
        whole
    }

    fn tracks() -> Vec<u8> {
        let avcc = [1, 0x42, 0, 0x1E, 0xFF, 0xE1, 0, 2, 0x67, 0x42, 1, 0, 2, 0x68, 0xCE];
        let aac = el(
            TRACK_ENTRY,
            &[
                &uint(TRACK_NUMBER, 1),
                &el(CODEC_ID, &[b"A_AAC/MPEG4/LC"]),
                &el(LANGUAGE, &[b"ger"]),
                &audio(48000.0, 2),
            ],
        );
        let avc = el(
            TRACK_ENTRY,
            &[
                &uint(TRACK_NUMBER, 2),
                &el(CODEC_ID, &[b"V_MPEG4/ISO/AVC"]),
                &el(CODEC_PRIVATE, &[&avcc]),
                &uint(DEFAULT_DURATION, 40_000_000),
                &el(LANGUAGE, &[b"eng"]),
                &el(LANGUAGE_BCP47, &[b"en-US"]),
                &el(VIDEO, &[&uint(PIXEL_WIDTH, 640), &uint(PIXEL_HEIGHT, 360)]),
            ],
        );
        let text = el(TRACK_ENTRY, &[&uint(TRACK_NUMBER, 3), &el(CODEC_ID, &[b"S_TEXT/UTF8"])]);
        let mut head = b"OpusHead\x01\x02\x38\x01\x80\xBB\x00\x00\x00\x00\x00".to_vec();
        head.truncate(19);
        let opus = el(
            TRACK_ENTRY,
            &[
                &uint(TRACK_NUMBER, 4),
                &el(CODEC_ID, &[b"A_OPUS"]),
                &el(CODEC_PRIVATE, &[&head]),
                &el(CONTENT_ENCODINGS, &[&el(0x6240, &[])]),
            ],
        );
        el(TRACKS, &[&aac, &avc, &text, &opus])
    }

    #[test]
    fn lacing_block_groups_and_unknown_sizes() {
        let mut file = ebml_header(b"matroska");
        file.extend(unknown_size(SEGMENT));
        file.extend(el(INFO, &[&uint(TIMESTAMP_SCALE, 1_000_000)]));
        file.extend(tracks());
        // Cluster 1, unknown size, at 1000 ms.
        file.extend(unknown_size(CLUSTER));
        file.extend(uint(TIMESTAMP, 1000));
        let v0 = file.len() as u64 + 2 + 4;
        file.extend(simple(2, 0, 0x80, &[0xAA; 10]));
        // Xiph lacing: 3 frames of 5, 6 and (the rest) 7 bytes.
        let a0 = file.len() as u64 + 2 + 4 + 3;
        file.extend(simple(1, 0, 0x02, &[[2, 5, 6].as_slice(), &[0xBB; 18]].concat()));
        // A BlockGroup: a B-frame shown at +80 ms, referencing another, lasting 40 ms.
        let v1 = file.len() as u64 + 2 + 2 + 4;
        let mut block = vec![0x82, 0, 80, 0];
        block.extend_from_slice(&[0xCC; 8]);
        file.extend(el(
            BLOCK_GROUP,
            &[&el(BLOCK, &[&block]), &el(REFERENCE_BLOCK, &[&[0xD8]]), &uint(BLOCK_DURATION, 40)],
        ));
        let v2 = file.len() as u64 + 2 + 4;
        file.extend(simple(2, 40, 0x00, &[0xDD; 6]));
        // EBML lacing: 2 frames of 4 and 3 bytes.
        let a1 = file.len() as u64 + 2 + 4 + 2;
        file.extend(simple(1, 64, 0x06, &[[1, 0x84].as_slice(), &[0xEE; 7]].concat()));
        // Cluster 2 (known size) ends cluster 1; fixed lacing: 2 frames of 4 bytes.
        let c2 = [
            uint(TIMESTAMP, 1200),
            el(VOID, &[&[0; 3]]),
            simple(1, 0, 0x04, &[[1].as_slice(), &[0xFF; 8]].concat()),
        ]
        .concat();
        let a2 = file.len() as u64 + 5 + c2.len() as u64 - 8;
        file.extend(el(CLUSTER, &[&c2]));
        file.extend(el(CUES, &[&[0; 4]]));
        let ix = demux(&file).unwrap();

        let t: Vec<_> =
            ix.tracks.iter().map(|t| (t.id, t.codec, t.language.clone(), t.sample_rate)).collect();
        assert_eq!(
            t,
            [
                (1, Codec::Aac, Some("ger".to_owned()), 48000),
                (2, Codec::H264, Some("en-US".to_owned()), 0),
            ]
        );
        assert_eq!(
            ix.tracks[0].config,
            CodecConfig::Aac { audio_specific_config: vec![0x11, 0x90] }
        );
        assert_eq!((ix.tracks[1].width, ix.tracks[1].height), (640, 360));
        let skipped: Vec<String> = ix.skipped.iter().map(ToString::to_string).collect();
        assert_eq!(
            skipped,
            [
                "track 3: codec S_TEXT/UTF8 is not supported (supported: H.264, H.265, AAC, Opus, AC-3, MP3)",
                "track 4: codec opus uses ContentEncoding (compression or encryption), which is not supported",
            ]
        );

        const MS: i64 = 1_000_000;
        let audio: Vec<_> =
            ix.track_samples(0).map(|s| (s.pts, s.duration, s.offset, s.size)).collect();
        let third = 64 * MS / 3;
        assert_eq!(
            audio,
            [
                (1000 * MS, third as u32, a0, 5),
                (1000 * MS + third, third as u32, a0 + 5, 6),
                (1000 * MS + 2 * third, third as u32, a0 + 11, 7),
                (1064 * MS, 68_000_000, a1, 4),
                (1132 * MS, 68_000_000, a1 + 4, 3),
                (1200 * MS, 68_000_000, a2, 4),
                (1268 * MS, 68_000_000, a2 + 4, 4),
            ]
        );
        assert!(ix.track_samples(0).all(|s| s.keyframe && s.dts == s.pts));
        let video: Vec<_> = ix
            .track_samples(1)
            .map(|s| (s.dts, s.pts, s.duration, s.keyframe, s.offset, s.size))
            .collect();
        assert_eq!(
            video,
            [
                (960 * MS, 1000 * MS, 40_000_000, true, v0, 10),
                (1000 * MS, 1080 * MS, 40_000_000, false, v1, 8),
                (1040 * MS, 1040 * MS, 40_000_000, false, v2, 6),
            ]
        );
        assert_eq!(ix.duration_ns, 1336 * 1_000_000);
    }

    #[test]
    fn aac_configs_are_built_from_the_codec_id() {
        let file = |codec: &[u8], out_rate: Option<f32>| {
            let mut a = vec![el(SAMPLING_FREQUENCY, &[&24000f32.to_be_bytes()]), uint(CHANNELS, 2)];
            if let Some(r) = out_rate {
                a.push(el(OUTPUT_SAMPLING_FREQUENCY, &[&r.to_be_bytes()]));
            }
            let a: Vec<&[u8]> = a.iter().map(Vec::as_slice).collect();
            let entry =
                el(TRACK_ENTRY, &[&uint(TRACK_NUMBER, 1), &el(CODEC_ID, &[codec]), &el(AUDIO, &a)]);
            let mut f = ebml_header(b"webm");
            f.extend(el(SEGMENT, &[&el(TRACKS, &[&entry])]));
            f
        };
        let config = |f: Vec<u8>| {
            demux(&f).map(|ix| (ix.tracks[0].config.clone(), ix.tracks[0].sample_rate))
        };
        assert_eq!(
            config(file(b"A_AAC/MPEG4/LC/SBR", Some(48000.0))),
            Ok((
                CodecConfig::Aac { audio_specific_config: vec![0x13, 0x10, 0x56, 0xE5, 0x98] },
                48000
            ))
        );
        assert_eq!(
            config(file(b"A_AAC/MPEG2/MAIN", None)),
            Ok((CodecConfig::Aac { audio_specific_config: vec![0x0B, 0x10] }, 24000))
        );
        let e = demux(&file(b"A_AAC", None)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "no supported track: track 1: codec aac has no AudioSpecificConfig in CodecPrivate"
        );
    }

    #[test]
    fn structural_errors() {
        let mut f = ebml_header(b"avi");
        f.extend(el(SEGMENT, &[]));
        assert_eq!(
            demux(&f).unwrap_err().to_string(),
            "malformed EBML element at offset 0: DocType \"avi\" is neither matroska nor webm"
        );
        let mut f = ebml_header(b"matroska");
        f.extend(el(SEGMENT, &[&el(CLUSTER, &[])]));
        assert_eq!(
            demux(&f).unwrap_err().to_string(),
            "malformed Cluster element at offset 21: Cluster before the Tracks element"
        );
        let mut f = ebml_header(b"matroska");
        f.extend(el(SEGMENT, &[&el(INFO, &[])]));
        assert_eq!(
            demux(&f).unwrap_err().to_string(),
            "no Tracks element: a Matroska segment needs a Tracks element listing its tracks"
        );
        // A child that runs past its parent.
        let mut f = ebml_header(b"matroska");
        let mut seg = el(SEGMENT, &[&el(INFO, &[&[0; 4]])]);
        seg[4] -= 2; // the Segment claims 2 bytes fewer than its Info needs
        f.extend(seg);
        f.extend([0, 0]);
        assert!(demux(&f).unwrap_err().to_string().contains("past the end of its parent"));
        // A laced block whose sizes do not add up.
        let mut f = ebml_header(b"matroska");
        let cluster = el(CLUSTER, &[&uint(TIMESTAMP, 0), &simple(1, 0, 0x02, &[1, 200, 0, 0])]);
        f.extend(el(SEGMENT, &[&tracks(), &cluster]));
        let e = demux(&f).unwrap_err().to_string();
        assert!(e.starts_with("malformed SimpleBlock element at offset "), "{e}");
        assert!(e.ends_with("lace sizes add up to 200 bytes but only 2 follow"), "{e}");
        // A block too short for its header, even though bytes follow it.
        let mut f = ebml_header(b"matroska");
        let cluster = el(
            CLUSTER,
            &[&uint(TIMESTAMP, 0), &el(SIMPLE_BLOCK, &[&[0x40]]), &el(VOID, &[&[0; 8]])],
        );
        f.extend(el(SEGMENT, &[&tracks(), &cluster]));
        let e = demux(&f).unwrap_err().to_string();
        assert!(e.ends_with("shorter than its block header"), "{e}");
        // Not EBML at all (after a valid magic, a bad header).
        assert!(demux(&[0x1A, 0x45, 0xDF, 0xA3, 0x00]).is_err());
        assert!(demux(&[0x1A, 0x45, 0xDF, 0xA3]).is_err());
    }
}
