//! ISO BMFF (MP4) demuxing: the box walk, the sample tables, fragments and edit lists.
//!
//! Why our own box parser: see `docs/design/containers.md` — the maintained crates either need
//! `Read + Seek`, decode the whole box tree recursively (a few thousand nested boxes overflow
//! the stack), or lack fragment support; the subset we need is small and fixed.
//!
//! The walk (ISO/IEC 14496-12 §4.2) asks for each top-level box header (16 bytes, for a 64-bit
//! `largesize`; size 0 means "to the end of the file"), reads `moov` and `moof` boxes whole,
//! and skips everything else — `mdat` in particular is never read. Nesting below `moov` and
//! `moof` follows the fixed paths we need (`trak/mdia/minf/stbl`, `mvex`, `traf`), so depth is
//! bounded by the code, not by the input.
//!
//! - Sample tables (§8.6, §8.7): `stsz`/`stz2` sizes, `stsc` + `stco`/`co64` chunk offsets,
//!   `stts` decode deltas, `ctts` composition offsets (both versions read as signed, as ffmpeg
//!   does), `stss` sync samples (all samples are sync without it). Where negative composition
//!   offsets put a pts before its dts, the track's decode times are shifted down until none is
//!   (§8.6.1.4, `compositionToDTSShift`), so dts ≤ pts always holds.
//! - Edit lists (§8.6.6), applied as ffmpeg does for the common cases: leading empty edits
//!   (`media_time` = -1) delay the track by their `segment_duration` (movie timescale, rescaled
//!   to the track's); the first non-empty edit's `media_time` is subtracted from every dts and
//!   pts. Later edits are ignored and no sample is dropped.
//! - Fragments (§8.8): `trex` defaults, `tfhd` (base-data-offset, default-base-is-moof,
//!   defaults), `tfdt`, `trun` (data offset, first-sample flags, per-sample fields). A sample is
//!   a sync sample unless `sample_is_non_sync_sample` (0x10000) is set in its flags.
//!
//! Not supported: several sample descriptions in one track (the track is skipped), external
//! data references (`dref` URLs: samples are assumed to be in this file), encrypted tracks
//! (skipped), `moof` before `moov` (an error).

use super::bytes::Cursor;
use super::config;
use super::index::{IndexBuilder, rescale};
use super::{
    Codec, CodecConfig, ContainerError, ContainerKind, MAX_BOX_SIZE, MediaIndex, SUPPORTED_CODECS,
    Sample, Step, Track, Window,
};
use crate::StreamKind;

/// `sample_is_non_sync_sample` in the sample flags (§8.8.3.1).
const NON_SYNC: u32 = 0x0001_0000;

/// How many bytes to ask for to read a top-level box header (a 64-bit size needs 16).
const HEADER_READ: u64 = 16;

/// A four-character code as text: ASCII if printable, else hex.
fn fourcc(kind: [u8; 4]) -> String {
    if kind.iter().all(|b| b.is_ascii_graphic() || *b == b' ') {
        kind.iter().map(|&b| char::from(b)).collect()
    } else {
        format!("0x{:08x}", u32::from_be_bytes(kind))
    }
}

fn malformed(kind: [u8; 4], offset: u64, detail: impl Into<String>) -> ContainerError {
    ContainerError::Malformed {
        what: format!("{} box", fourcc(kind)),
        offset,
        detail: detail.into(),
    }
}

/// A parsed box header: type, total size, header length.
#[derive(Clone, Copy, Debug)]
struct Header {
    kind: [u8; 4],
    size: u64,
    header_len: usize,
}

/// Parses a box header from `data`, where `avail` bytes remain in the parent (for size 0).
/// `Ok(None)` if `data` is too short for it.
fn header(data: &[u8], avail: u64, offset: u64) -> Result<Option<Header>, ContainerError> {
    let mut c = Cursor::new(data);
    let (Some(size32), Some(kind)) = (c.u32(), c.array::<4>()) else {
        return Ok(None);
    };
    let (size, header_len) = match size32 {
        0 => (avail, 8),
        1 => match c.u64() {
            Some(large) => (large, 16),
            None => return Ok(None),
        },
        n => (u64::from(n), 8),
    };
    if size < header_len as u64 {
        return Err(malformed(
            kind,
            offset,
            format!("box size {size} is smaller than its {header_len}-byte header"),
        ));
    }
    Ok(Some(Header { kind, size, header_len }))
}

/// One box inside a parent held in memory.
#[derive(Clone, Copy, Debug)]
struct BoxRef<'a> {
    kind: [u8; 4],
    /// File offset of the box header.
    offset: u64,
    header_len: usize,
    body: &'a [u8],
}

impl<'a> BoxRef<'a> {
    /// File offset of the body.
    fn body_offset(&self) -> u64 {
        self.offset + self.header_len as u64
    }

    /// The boxes inside this one, starting `skip` bytes into the body.
    fn children(&self, skip: usize) -> Boxes<'a> {
        Boxes {
            data: self.body.get(skip..).unwrap_or_default(),
            pos: 0,
            base: self.body_offset() + skip as u64,
            failed: false,
        }
    }

    /// The first child of type `kind` (children that do not parse end the search).
    fn child(&self, kind: &[u8; 4]) -> Option<Self> {
        self.children(0).map_while(Result::ok).find(|b| &b.kind == kind)
    }

    /// The body after the version and flags of a full box (§4.2).
    fn full(&self) -> Result<(u8, u32, Cursor<'a>), ContainerError> {
        let mut c = Cursor::new(self.body);
        let vf = c.u32().ok_or_else(|| self.short("no version and flags"))?;
        Ok(((vf >> 24) as u8, vf & 0x00FF_FFFF, c))
    }

    fn short(&self, detail: &str) -> ContainerError {
        malformed(self.kind, self.offset, format!("truncated: {detail}"))
    }
}

/// Iterates over the boxes in a parent's body held in memory.
struct Boxes<'a> {
    data: &'a [u8],
    pos: usize,
    /// File offset of `data[0]`.
    base: u64,
    failed: bool,
}

impl<'a> Iterator for Boxes<'a> {
    type Item = Result<BoxRef<'a>, ContainerError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let rest = self.data.get(self.pos..)?;
        if rest.len() < 8 {
            // Nothing, or padding such as QuickTime's 4-byte zero terminator.
            return None;
        }
        let offset = self.base + self.pos as u64;
        let result = match header(rest, rest.len() as u64, offset) {
            Ok(Some(h)) if h.size <= rest.len() as u64 => {
                let size = h.size as usize; // ≤ rest.len()
                self.pos += size;
                Ok(BoxRef {
                    kind: h.kind,
                    offset,
                    header_len: h.header_len,
                    body: rest.get(h.header_len..size).unwrap_or_default(),
                })
            }
            Ok(Some(h)) => Err(malformed(
                h.kind,
                offset,
                format!("box size {} exceeds the {} bytes left in its parent", h.size, rest.len()),
            )),
            Ok(None) => Err(ContainerError::Malformed {
                what: "box header".to_owned(),
                offset,
                detail: "truncated 64-bit box size".to_owned(),
            }),
            Err(e) => Err(e),
        };
        self.failed = result.is_err();
        Some(result)
    }
}

/// What a track needs from `trex` (§8.8.3) for its fragments.
#[derive(Clone, Copy, Debug, Default)]
struct Defaults {
    duration: u32,
    size: u32,
    flags: u32,
}

/// Per-track state kept after the `moov` for fragments and the edit list.
#[derive(Clone, Debug)]
struct TrackState {
    id: u32,
    /// Index in the builder, if the track is supported.
    index: Option<u16>,
    audio: bool,
    defaults: Defaults,
    /// The decode time after the last sample so far (media timescale, before the edit list).
    next_dts: i64,
    /// Added to every dts and pts at the end: the edit list.
    shift: i64,
}

/// The parts of the `moov` kept for fragments.
#[derive(Clone, Debug, Default)]
struct Movie {
    tracks: Vec<TrackState>,
}

/// The MP4 side of [`Demuxer`](super::Demuxer).
#[derive(Debug)]
pub(crate) struct Mp4Parser {
    file_len: u64,
    /// The next top-level box.
    pos: u64,
    movie: Option<Movie>,
    builder: IndexBuilder,
}

impl Mp4Parser {
    pub(crate) fn new(file_len: u64) -> Self {
        Self { file_len, pos: 0, movie: None, builder: IndexBuilder::new(file_len) }
    }

    /// Walks top-level boxes until it needs bytes it does not have.
    pub(crate) fn run(&mut self, w: Window<'_>) -> Result<Step, ContainerError> {
        loop {
            let remaining = self.file_len.saturating_sub(self.pos);
            if remaining < 8 {
                // End of file, or trailing bytes too short to be a box: ignored.
                self.pos = self.file_len;
                return Ok(Step::Done);
            }
            let want = remaining.min(HEADER_READ);
            let Some(data) = w.from(self.pos, want) else {
                return Ok(Step::Need { pos: self.pos, min: want, want });
            };
            let Some(h) = header(data, remaining, self.pos)? else {
                return Err(ContainerError::Truncated {
                    what: "box header".to_owned(),
                    offset: self.pos,
                    needed: 16,
                    file_len: self.file_len,
                });
            };
            let whole = matches!(&h.kind, b"moov" | b"moof");
            if h.size > remaining {
                if whole {
                    return Err(ContainerError::Truncated {
                        what: format!("{} box", fourcc(h.kind)),
                        offset: self.pos,
                        needed: h.size,
                        file_len: self.file_len,
                    });
                }
                // A truncated mdat (or other box) at the end: samples past the end of the file
                // are reported when they are indexed.
                self.pos = self.file_len;
                continue;
            }
            if whole {
                if h.size > MAX_BOX_SIZE {
                    return Err(ContainerError::TooLarge {
                        what: format!("{} box", fourcc(h.kind)),
                        offset: self.pos,
                        size: h.size,
                        limit: MAX_BOX_SIZE,
                    });
                }
                let Some(bytes) = w.exact(self.pos, h.size) else {
                    return Ok(Step::Need { pos: self.pos, min: h.size, want: h.size });
                };
                let b = BoxRef {
                    kind: h.kind,
                    offset: self.pos,
                    header_len: h.header_len,
                    body: bytes.get(h.header_len..).unwrap_or_default(),
                };
                if &h.kind == b"moov" {
                    self.moov(&b)?;
                } else {
                    self.moof(&b)?;
                }
            }
            self.pos += h.size;
        }
    }

    /// Applies the edit lists and sorts the samples.
    pub(crate) fn finish(mut self) -> Result<MediaIndex, ContainerError> {
        let Some(movie) = self.movie else {
            return Err(ContainerError::Missing {
                what: "moov box",
                detail: "an MP4 file needs a movie box listing its tracks",
            });
        };
        for t in &movie.tracks {
            let Some(list) = t.index.and_then(|i| self.builder.samples.get_mut(usize::from(i)))
            else {
                continue;
            };
            // Negative composition offsets (ctts/trun version 1) can put a pts before its dts:
            // shift the track's decode times down until none is after its pts (the
            // compositionToDTSShift of §8.6.1.4; ffmpeg does the same).
            let dts_shift =
                list.iter().map(|s| s.dts.saturating_sub(s.pts)).max().unwrap_or(0).max(0);
            if t.shift != 0 || dts_shift != 0 {
                for s in list {
                    s.dts = s.dts.saturating_add(t.shift).saturating_sub(dts_shift);
                    s.pts = s.pts.saturating_add(t.shift);
                }
            }
        }
        self.builder.finish(ContainerKind::Mp4)
    }

    /// The movie box: `mvhd`, `mvex/trex` and each `trak`.
    fn moov(&mut self, moov: &BoxRef<'_>) -> Result<(), ContainerError> {
        if self.movie.is_some() {
            return Err(malformed(moov.kind, moov.offset, "a second moov box"));
        }
        let mut movie_timescale = 0;
        let mut traks = Vec::new();
        let mut trex = Vec::new();
        for b in moov.children(0) {
            let b = b?;
            match &b.kind {
                b"mvhd" => {
                    let (version, _, mut c) = b.full()?;
                    let skip = if version == 1 { 16 } else { 8 };
                    movie_timescale = c
                        .skip(skip)
                        .and_then(|()| c.u32())
                        .ok_or_else(|| b.short("no timescale"))?;
                }
                b"mvex" => {
                    for t in b.children(0) {
                        let t = t?;
                        if &t.kind == b"trex" {
                            let (_, _, mut c) = t.full()?;
                            let fields =
                                (|| Some((c.u32()?, c.u32()?, c.u32()?, c.u32()?, c.u32()?)))();
                            let (id, _, duration, size, flags) =
                                fields.ok_or_else(|| t.short("trex is shorter than 24 bytes"))?;
                            trex.push((id, Defaults { duration, size, flags }));
                        }
                    }
                }
                b"trak" => traks.push(b),
                _ => {}
            }
        }
        let mut movie = Movie::default();
        for trak in traks {
            let mut state = self.trak(&trak, movie_timescale)?;
            if movie.tracks.iter().any(|t| t.id == state.id) {
                return Err(malformed(
                    trak.kind,
                    trak.offset,
                    format!("track id {} repeats", state.id),
                ));
            }
            if let Some((_, d)) = trex.iter().find(|(id, _)| *id == state.id) {
                state.defaults = *d;
            }
            movie.tracks.push(state);
        }
        self.movie = Some(movie);
        Ok(())
    }

    /// One track: its header, media header, handler, sample description and sample tables.
    fn trak(
        &mut self,
        trak: &BoxRef<'_>,
        movie_timescale: u32,
    ) -> Result<TrackState, ContainerError> {
        let tkhd =
            trak.child(b"tkhd").ok_or_else(|| malformed(trak.kind, trak.offset, "no tkhd box"))?;
        let (version, _, mut c) = tkhd.full()?;
        let id = c
            .skip(if version == 1 { 16 } else { 8 })
            .and_then(|()| c.u32())
            .ok_or_else(|| tkhd.short("no track_ID"))?;
        let no =
            |what: &str| malformed(trak.kind, trak.offset, format!("track {id}: no {what} box"));

        let mdia = trak.child(b"mdia").ok_or_else(|| no("mdia"))?;
        let mdhd = mdia.child(b"mdhd").ok_or_else(|| no("mdia/mdhd"))?;
        let (version, _, mut c) = mdhd.full()?;
        let (skip, dur) = if version == 1 { (16, 8) } else { (8, 4) };
        let fields = (|| {
            c.skip(skip)?;
            let timescale = c.u32()?;
            c.skip(dur)?;
            Some((timescale, c.u16()?))
        })();
        let (timescale, lang) = fields.ok_or_else(|| mdhd.short("no timescale or language"))?;
        if timescale == 0 {
            return Err(malformed(mdhd.kind, mdhd.offset, format!("track {id}: timescale 0")));
        }
        let stbl = mdia
            .child(b"minf")
            .and_then(|m| m.child(b"stbl"))
            .ok_or_else(|| no("mdia/minf/stbl"))?;
        let mut tables = Tables::default();
        for b in stbl.children(0) {
            let b = b?;
            match &b.kind {
                b"stsd" => tables.stsd = Some(b),
                b"stts" => tables.stts = Some(b),
                b"ctts" => tables.ctts = Some(b),
                b"stsc" => tables.stsc = Some(b),
                b"stsz" | b"stz2" => tables.stsz = Some(b),
                b"stco" | b"co64" => tables.stco = Some(b),
                b"stss" => tables.stss = Some(b),
                _ => {}
            }
        }
        let stsd = tables.stsd.ok_or_else(|| no("stbl/stsd"))?;
        let shift = edit_shift(trak, timescale, movie_timescale)?;
        let mut state = TrackState {
            id,
            index: None,
            audio: false,
            defaults: Defaults::default(),
            next_dts: 0,
            shift,
        };

        let entry = match sample_entry(&stsd, &tables, id)? {
            Entry::Supported(e) => e,
            Entry::Unsupported { codec, reason } => {
                self.builder.skip(u64::from(id), codec, reason);
                return Ok(state);
            }
        };
        let kind = entry.codec.kind();
        state.audio = kind == StreamKind::Audio;
        let index = self.builder.add_track(Track {
            id: u64::from(id),
            codec: entry.codec,
            kind,
            config: entry.config,
            timescale,
            width: entry.width,
            height: entry.height,
            sample_rate: entry.sample_rate,
            channels: entry.channels,
            language: language(lang),
        })?;
        state.index = Some(index);
        // The sample entry decides the kind, not the handler (`hdlr`).
        state.next_dts = self.expand(&tables, &state)?;
        Ok(state)
    }

    /// Turns the sample tables into samples; returns the decode time after the last one.
    fn expand<'a>(&mut self, t: &Tables<'a>, st: &TrackState) -> Result<i64, ContainerError> {
        let id = u64::from(st.id);
        let Some(index) = st.index else { return Ok(0) };
        let sizes = match t.stsz {
            Some(b) => Sizes::parse(&b, id)?,
            None => Sizes::Fixed { size: 0, count: 0 },
        };
        let n = sizes.count();
        if n == 0 {
            return Ok(0);
        }
        self.builder.reserve(u64::from(n))?;
        let table = |name: &'static str, b: Option<BoxRef<'a>>| {
            b.ok_or_else(|| ContainerError::SampleTable {
                track: id,
                table: name,
                detail: format!("missing, with {n} samples in stsz"),
            })
        };
        let stts = Entries::parse(&table("stts", t.stts)?, 8, id)?;
        let stsc = Entries::parse(&table("stsc", t.stsc)?, 12, id)?;
        let stco_box = table("stco", t.stco)?;
        let stco = Entries::parse(&stco_box, if &stco_box.kind == b"co64" { 8 } else { 4 }, id)?;
        let ctts = t.ctts.map(|b| Entries::parse(&b, 8, id)).transpose()?;
        let mut sync = match (t.stss, st.audio) {
            (Some(b), false) => {
                let e = Entries::parse(&b, 4, id)?;
                let mut v: Vec<u32> = (0..e.count).filter_map(|i| e.u32(i, 0)).collect();
                v.sort_unstable();
                Some(v)
            }
            _ => None,
        }
        .map(|v| v.into_iter().peekable());

        let inconsistent = |table: &'static str, detail: String| ContainerError::SampleTable {
            track: id,
            table,
            detail,
        };
        // stsc: validate the runs of chunks.
        let mut prev_first = 0;
        for i in 0..stsc.count {
            let first = stsc.u32(i, 0).unwrap_or(0);
            if first <= prev_first {
                return Err(inconsistent(
                    "stsc",
                    format!("entry {i} starts at chunk {first}, not after chunk {prev_first}"),
                ));
            }
            prev_first = first;
        }

        let (mut stsc_i, mut chunk, mut left_in_chunk, mut offset) = (0u32, 0u32, 0u32, 0u64);
        let (mut stts_i, mut stts_left, mut delta, mut dts) = (0u32, 0u32, 0u32, 0i64);
        let (mut ctts_i, mut ctts_left, mut cto) = (0u32, 0u32, 0i32);
        for i in 0..n {
            let size = sizes.get(i);
            while left_in_chunk == 0 {
                chunk =
                    if chunk == 0 { stsc.u32(0, 0).unwrap_or(1) } else { chunk.saturating_add(1) };
                if chunk > stco.count || chunk == 0 {
                    return Err(inconsistent(
                        "stsc/stco",
                        format!("the {} chunks hold only {i} of the {n} samples", stco.count),
                    ));
                }
                while stsc_i + 1 < stsc.count && stsc.u32(stsc_i + 1, 0).is_some_and(|f| f <= chunk)
                {
                    stsc_i += 1;
                }
                left_in_chunk = stsc.u32(stsc_i, 4).unwrap_or(0);
                offset = if stco.width == 8 {
                    stco.u64(chunk - 1).unwrap_or(0)
                } else {
                    u64::from(stco.u32(chunk - 1, 0).unwrap_or(0))
                };
            }
            while stts_left == 0 {
                if stts_i >= stts.count {
                    return Err(inconsistent(
                        "stts",
                        format!("covers only {i} of the {n} samples"),
                    ));
                }
                stts_left = stts.u32(stts_i, 0).unwrap_or(0);
                delta = stts.u32(stts_i, 4).unwrap_or(0);
                stts_i += 1;
            }
            if let Some(ctts) = &ctts {
                while ctts_left == 0 && ctts_i < ctts.count {
                    ctts_left = ctts.u32(ctts_i, 0).unwrap_or(0);
                    // Version 0 is unsigned, but muxers write negative offsets there too.
                    cto = ctts.u32(ctts_i, 4).unwrap_or(0) as i32;
                    ctts_i += 1;
                }
                if ctts_left == 0 {
                    cto = 0; // fewer entries than samples: the rest have no offset
                } else {
                    ctts_left -= 1;
                }
            }
            let keyframe = match &mut sync {
                None => true,
                Some(s) => {
                    while s.next_if(|&k| k < i + 1).is_some() {}
                    s.peek() == Some(&(i + 1))
                }
            };
            self.builder.push(Sample {
                track: index,
                dts,
                pts: dts.saturating_add(i64::from(cto)),
                duration: delta,
                keyframe,
                offset,
                size,
            })?;
            offset = offset.saturating_add(u64::from(size));
            left_in_chunk -= 1;
            stts_left -= 1;
            dts = dts.saturating_add(i64::from(delta));
        }
        Ok(dts)
    }

    /// A movie fragment: each `traf`'s runs of samples (§8.8.4–8.8.8).
    fn moof(&mut self, moof: &BoxRef<'_>) -> Result<(), ContainerError> {
        let Some(movie) = self.movie.as_mut() else {
            return Err(malformed(moof.kind, moof.offset, "movie fragment before the moov box"));
        };
        // The default base of a traf without one is the end of the previous traf's data.
        let mut prev_end = moof.offset;
        for traf in moof.children(0) {
            let traf = traf?;
            if &traf.kind != b"traf" {
                continue;
            }
            let mut tfhd = None;
            let mut tfdt = None;
            let mut truns = Vec::new();
            for b in traf.children(0) {
                let b = b?;
                match &b.kind {
                    b"tfhd" => tfhd = tfhd.or(Some(b)),
                    b"tfdt" => tfdt = tfdt.or(Some(b)),
                    b"trun" => truns.push(b),
                    _ => {}
                }
            }
            let tfhd = tfhd.ok_or_else(|| malformed(traf.kind, traf.offset, "no tfhd box"))?;
            let (_, flags, mut c) = tfhd.full()?;
            let id = c.u32().ok_or_else(|| tfhd.short("no track_ID"))?;
            let mut opt = |flag: u32, bytes: usize| -> Result<Option<u64>, ContainerError> {
                if flags & flag == 0 {
                    return Ok(None);
                }
                let v = if bytes == 8 { c.u64() } else { c.u32().map(u64::from) };
                v.map(Some).ok_or_else(|| tfhd.short("an optional field is missing"))
            };
            let base_offset = opt(0x01, 8)?;
            let _description = opt(0x02, 4)?;
            let def_duration = opt(0x08, 4)?.map(|v| v as u32);
            let def_size = opt(0x10, 4)?.map(|v| v as u32);
            let def_flags = opt(0x20, 4)?.map(|v| v as u32);
            let base = match base_offset {
                Some(b) => b,
                None if flags & 0x02_0000 != 0 => moof.offset,
                None => prev_end,
            };
            let track = movie.tracks.iter_mut().find(|t| t.id == id);
            let (defaults, index, audio, next_dts) = match &track {
                Some(t) => (t.defaults, t.index, t.audio, t.next_dts),
                None => (Defaults::default(), None, false, 0),
            };
            let mut dts = match tfdt {
                Some(b) => {
                    let (version, _, mut c) = b.full()?;
                    let t = if version == 1 { c.u64() } else { c.u32().map(u64::from) };
                    let t = t.ok_or_else(|| b.short("no baseMediaDecodeTime"))?;
                    i64::try_from(t).map_err(|_| {
                        malformed(b.kind, b.offset, format!("baseMediaDecodeTime {t} is too large"))
                    })?
                }
                None => next_dts,
            };
            let mut data = base;
            for (n, trun) in truns.iter().enumerate() {
                let (_, tflags, mut c) = trun.full()?;
                let count = c.u32().ok_or_else(|| trun.short("no sample_count"))?;
                if tflags & 0x01 != 0 {
                    let off = c.i32().ok_or_else(|| trun.short("no data_offset"))?;
                    data = base.checked_add_signed(i64::from(off)).ok_or_else(|| {
                        malformed(
                            trun.kind,
                            trun.offset,
                            format!("data_offset {off} points before the file"),
                        )
                    })?;
                } else if n == 0 {
                    data = base;
                }
                let first_flags = if tflags & 0x04 != 0 {
                    Some(c.u32().ok_or_else(|| trun.short("no first_sample_flags"))?)
                } else {
                    None
                };
                let per_sample = 4 * (tflags & 0xF00).count_ones() as usize;
                if (count as usize).saturating_mul(per_sample) > c.remaining() {
                    return Err(malformed(
                        trun.kind,
                        trun.offset,
                        format!(
                            "sample_count {count} needs {} bytes of entries, the box has {}",
                            u64::from(count) * per_sample as u64,
                            c.remaining()
                        ),
                    ));
                }
                if index.is_none() && per_sample == 0 {
                    // A skipped track's run with only default fields: no need to walk it.
                    let size = def_size.unwrap_or(defaults.size);
                    let duration = def_duration.unwrap_or(defaults.duration);
                    data = data.saturating_add(u64::from(count).saturating_mul(u64::from(size)));
                    dts = dts.saturating_add(i64::from(count).saturating_mul(i64::from(duration)));
                    continue;
                }
                if index.is_some() {
                    self.builder.reserve(u64::from(count))?;
                }
                for i in 0..count {
                    let mut field = |flag: u32| if tflags & flag != 0 { c.u32() } else { None };
                    let duration = field(0x100).or(def_duration).unwrap_or(defaults.duration);
                    let size = field(0x200).or(def_size).unwrap_or(defaults.size);
                    let sflags = field(0x400);
                    let sflags = match (i, first_flags) {
                        (0, Some(f)) => f,
                        _ => sflags.or(def_flags).unwrap_or(defaults.flags),
                    };
                    // Version 0 offsets are unsigned, but read as signed like ffmpeg does.
                    let cto = field(0x800).map_or(0, |v| v as i32);
                    if let Some(index) = index {
                        self.builder.push(Sample {
                            track: index,
                            dts,
                            pts: dts.saturating_add(i64::from(cto)),
                            duration,
                            keyframe: audio || sflags & NON_SYNC == 0,
                            offset: data,
                            size,
                        })?;
                    }
                    data = data.saturating_add(u64::from(size));
                    dts = dts.saturating_add(i64::from(duration));
                }
            }
            prev_end = data;
            if let Some(t) = track {
                t.next_dts = dts;
            }
        }
        Ok(())
    }
}

/// The sample-table boxes of one `stbl`.
#[derive(Clone, Copy, Debug, Default)]
struct Tables<'a> {
    stsd: Option<BoxRef<'a>>,
    stts: Option<BoxRef<'a>>,
    ctts: Option<BoxRef<'a>>,
    stsc: Option<BoxRef<'a>>,
    stsz: Option<BoxRef<'a>>,
    stco: Option<BoxRef<'a>>,
    stss: Option<BoxRef<'a>>,
}

/// A table of fixed-size entries after a full-box header and a 32-bit entry count.
#[derive(Clone, Copy, Debug)]
struct Entries<'a> {
    data: &'a [u8],
    count: u32,
    width: usize,
}

impl<'a> Entries<'a> {
    fn parse(b: &BoxRef<'a>, width: usize, track: u64) -> Result<Self, ContainerError> {
        let (_, _, mut c) = b.full()?;
        let count = c.u32().ok_or_else(|| b.short("no entry_count"))?;
        let data = c.rest();
        if (count as usize).saturating_mul(width) > data.len() {
            return Err(ContainerError::SampleTable {
                track,
                table: table_name(b.kind),
                detail: format!(
                    "{count} entries of {width} bytes do not fit in the box's {} bytes (at offset {})",
                    data.len(),
                    b.offset
                ),
            });
        }
        Ok(Self { data, count, width })
    }

    /// The 32-bit field at byte `at` of entry `i`.
    fn u32(&self, i: u32, at: usize) -> Option<u32> {
        let start = (i as usize).checked_mul(self.width)?.checked_add(at)?;
        let b = self.data.get(start..start + 4)?;
        Some(u32::from_be_bytes(b.try_into().ok()?))
    }

    /// The 64-bit entry `i` (`co64`).
    fn u64(&self, i: u32) -> Option<u64> {
        let start = (i as usize).checked_mul(8)?;
        let b = self.data.get(start..start + 8)?;
        Some(u64::from_be_bytes(b.try_into().ok()?))
    }
}

fn table_name(kind: [u8; 4]) -> &'static str {
    match &kind {
        b"stts" => "stts",
        b"ctts" => "ctts",
        b"stsc" => "stsc",
        b"stco" => "stco",
        b"co64" => "co64",
        b"stss" => "stss",
        b"stsz" => "stsz",
        b"stz2" => "stz2",
        _ => "sample table",
    }
}

/// Sample sizes from `stsz` or `stz2` (§8.7.3).
#[derive(Clone, Copy, Debug)]
enum Sizes<'a> {
    Fixed { size: u32, count: u32 },
    Table { data: &'a [u8], count: u32, bits: u8 },
}

impl<'a> Sizes<'a> {
    fn parse(b: &BoxRef<'a>, track: u64) -> Result<Self, ContainerError> {
        let (_, _, mut c) = b.full()?;
        let (bits, fixed) = if &b.kind == b"stz2" {
            let f = c.u32().ok_or_else(|| b.short("no field_size"))?;
            let bits = (f & 0xFF) as u8;
            if !matches!(bits, 4 | 8 | 16) {
                return Err(malformed(
                    b.kind,
                    b.offset,
                    format!("field_size {bits} (must be 4, 8 or 16)"),
                ));
            }
            (bits, 0)
        } else {
            (32, c.u32().ok_or_else(|| b.short("no sample_size"))?)
        };
        let count = c.u32().ok_or_else(|| b.short("no sample_count"))?;
        if fixed != 0 {
            return Ok(Self::Fixed { size: fixed, count });
        }
        let data = c.rest();
        let need = (u64::from(count) * u64::from(bits)).div_ceil(8);
        if need > data.len() as u64 {
            return Err(ContainerError::SampleTable {
                track,
                table: table_name(b.kind),
                detail: format!(
                    "{count} sizes of {bits} bits do not fit in the box's {} bytes (at offset {})",
                    data.len(),
                    b.offset
                ),
            });
        }
        Ok(Self::Table { data, count, bits })
    }

    fn count(&self) -> u32 {
        match self {
            Self::Fixed { count, .. } | Self::Table { count, .. } => *count,
        }
    }

    fn get(&self, i: u32) -> u32 {
        let i = i as usize;
        match *self {
            Self::Fixed { size, .. } => size,
            Self::Table { data, bits: 32, .. } => data
                .get(i * 4..i * 4 + 4)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u32::from_be_bytes),
            Self::Table { data, bits: 16, .. } => data
                .get(i * 2..i * 2 + 2)
                .and_then(|b| b.try_into().ok())
                .map_or(0, |b| u32::from(u16::from_be_bytes(b))),
            Self::Table { data, bits: 8, .. } => data.get(i).map_or(0, |&b| u32::from(b)),
            Self::Table { data, .. } => {
                let b = data.get(i / 2).copied().unwrap_or(0);
                u32::from(if i.is_multiple_of(2) { b >> 4 } else { b & 0x0F })
            }
        }
    }
}

/// The shift the edit list applies to a track's times (see the module docs).
fn edit_shift(
    trak: &BoxRef<'_>,
    timescale: u32,
    movie_timescale: u32,
) -> Result<i64, ContainerError> {
    let Some(elst) = trak.child(b"edts").and_then(|e| e.child(b"elst")) else {
        return Ok(0);
    };
    let (version, _, mut c) = elst.full()?;
    let count = c.u32().ok_or_else(|| elst.short("no entry_count"))?;
    let mut delay: u64 = 0;
    for _ in 0..count {
        let entry = if version == 1 {
            (|| Some((c.u64()?, c.i64()?, c.u32()?)))()
        } else {
            (|| Some((u64::from(c.u32()?), i64::from(c.i32()?), c.u32()?)))()
        };
        let (segment_duration, media_time, _rate) =
            entry.ok_or_else(|| elst.short("fewer entries than entry_count"))?;
        if media_time == -1 {
            delay = delay.saturating_add(segment_duration);
            continue;
        }
        if media_time < 0 {
            return Err(malformed(elst.kind, elst.offset, format!("media_time {media_time}")));
        }
        let delay = rescale(
            i64::try_from(delay).unwrap_or(i64::MAX),
            u64::from(timescale),
            u64::from(movie_timescale),
        );
        return Ok(delay.saturating_sub(media_time));
    }
    // Only empty edits: the track is delayed.
    Ok(rescale(
        i64::try_from(delay).unwrap_or(i64::MAX),
        u64::from(timescale),
        u64::from(movie_timescale),
    ))
}

/// The packed ISO 639-2/T code of `mdhd` (§8.4.2.3); `None` for `und` or QuickTime codes.
fn language(packed: u16) -> Option<String> {
    if packed < 0x400 || packed == 0x7FFF {
        return None;
    }
    let chars: String =
        [10, 5, 0].iter().map(|s| char::from(0x60 + ((packed >> s) & 0x1F) as u8)).collect();
    (chars.chars().all(|c| c.is_ascii_lowercase()) && chars != "und").then_some(chars)
}

/// A sample entry we can serve.
#[derive(Clone, Debug)]
struct Supported {
    codec: Codec,
    config: CodecConfig,
    width: u16,
    height: u16,
    sample_rate: u32,
    channels: u8,
}

#[derive(Clone, Debug)]
enum Entry {
    Supported(Supported),
    Unsupported { codec: String, reason: String },
}

fn unsupported(codec: impl Into<String>) -> Entry {
    let codec = codec.into();
    let reason = format!("codec {codec} is not supported (supported: {SUPPORTED_CODECS})");
    Entry::Unsupported { codec, reason }
}

/// The first sample entry of `stsd` (§8.5.2), with its configuration box.
fn sample_entry(stsd: &BoxRef<'_>, tables: &Tables<'_>, id: u32) -> Result<Entry, ContainerError> {
    let (_, _, mut c) = stsd.full()?;
    let count = c.u32().ok_or_else(|| stsd.short("no entry_count"))?;
    let Some(entry) = stsd.children(8).next().transpose()? else {
        return Err(malformed(stsd.kind, stsd.offset, format!("track {id}: no sample entry")));
    };
    if count > 1 {
        let stsc = tables.stsc.map(|b| Entries::parse(&b, 12, u64::from(id))).transpose()?;
        let others =
            stsc.is_some_and(|e| (0..e.count).any(|i| e.u32(i, 8).is_some_and(|d| d != 1)));
        if others {
            return Ok(Entry::Unsupported {
                codec: fourcc(entry.kind),
                reason: format!("{count} sample descriptions in one track (only one is supported)"),
            });
        }
    }
    let bad = |detail: String| malformed(entry.kind, entry.offset, format!("track {id}: {detail}"));
    match &entry.kind {
        b"avc1" | b"avc3" | b"hvc1" | b"hev1" => {
            let mut v = Cursor::new(entry.body);
            let dims = v.skip(24).and_then(|()| Some((v.u16()?, v.u16()?)));
            let (width, height) =
                dims.ok_or_else(|| bad("visual sample entry is truncated".into()))?;
            let (codec, config_kind) = if entry.kind.starts_with(b"avc") {
                (Codec::H264, b"avcC")
            } else {
                (Codec::H265, b"hvcC")
            };
            let cfg = entry
                .children(78)
                .map_while(Result::ok)
                .find(|b| &b.kind == config_kind)
                .ok_or_else(|| {
                    bad(format!("no {} box in the sample entry", fourcc(*config_kind)))
                })?;
            let parsed = if codec == Codec::H264 {
                config::parse_avcc(cfg.body)
            } else {
                config::parse_hvcc(cfg.body)
            };
            let config =
                parsed.map_err(|e| malformed(cfg.kind, cfg.offset, format!("track {id}: {e}")))?;
            Ok(Entry::Supported(Supported {
                codec,
                config,
                width,
                height,
                sample_rate: 0,
                channels: 0,
            }))
        }
        b"mp4a" | b"Opus" | b"ac-3" | b".mp3" => audio_entry(&entry, id),
        b"mp4v" => {
            let oti = entry
                .children(78)
                .map_while(Result::ok)
                .find(|b| &b.kind == b"esds")
                .and_then(|b| b.body.get(4..).and_then(|d| config::parse_esds(d).ok()))
                .map(|e| e.object_type);
            Ok(unsupported(match oti {
                Some(0x20) => "mpeg4",
                Some(0x60..=0x65) => "mpeg2video",
                Some(0x6A) => "mpeg1video",
                Some(0x6C) => "mjpeg",
                Some(0x6E) => "jpeg2000",
                _ => "mp4v",
            }))
        }
        b"encv" | b"enca" => Ok(Entry::Unsupported {
            codec: fourcc(entry.kind),
            reason: "encrypted track (encv/enca) is not supported".to_owned(),
        }),
        other => Ok(unsupported(match other {
            b"jpeg" | b"mjpa" | b"mjpb" => "mjpeg".to_owned(),
            b"vp08" => "vp8".to_owned(),
            b"vp09" => "vp9".to_owned(),
            b"av01" => "av1".to_owned(),
            b"ec-3" => "eac3".to_owned(),
            b"fLaC" => "flac".to_owned(),
            b"s263" | b"h263" => "h263".to_owned(),
            _ => fourcc(*other),
        })),
    }
}

/// An audio sample entry (§12.2.3, with QuickTime's version 1 and 2 extensions).
fn audio_entry(entry: &BoxRef<'_>, id: u32) -> Result<Entry, ContainerError> {
    let bad = |detail: String| malformed(entry.kind, entry.offset, format!("track {id}: {detail}"));
    let mut c = Cursor::new(entry.body);
    let fields = (|| {
        c.skip(8)?;
        let version = c.u16()?;
        c.skip(6)?;
        let channels = c.u16()?;
        c.skip(6)?;
        let rate = c.u32()? >> 16;
        Some((version, channels, rate))
    })();
    let (version, mut channels, mut rate) =
        fields.ok_or_else(|| bad("audio sample entry is truncated".into()))?;
    let skip = match version {
        0 => 28,
        1 => 28 + 16,
        2 => {
            // QuickTime sound description v2: a float64 rate and a 32-bit channel count.
            let v2 = (|| Some((f64::from_bits(c.skip(4).and_then(|()| c.u64())?), c.u32()?)))();
            if let Some((r, ch)) = v2 {
                rate =
                    if r.is_finite() && r >= 0.0 && r < f64::from(u32::MAX) { r as u32 } else { 0 };
                channels = u16::try_from(ch).unwrap_or(u16::MAX);
            }
            28 + 36
        }
        v => return Err(bad(format!("sound sample entry version {v}"))),
    };
    let channels = u8::try_from(channels).unwrap_or(u8::MAX);
    let child = |kind: &[u8; 4]| -> Option<BoxRef<'_>> {
        let direct = entry.children(skip).map_while(Result::ok).find(|b| &b.kind == kind);
        // QuickTime puts the esds inside a `wave` box.
        direct.or_else(|| {
            entry
                .children(skip)
                .map_while(Result::ok)
                .find(|b| &b.kind == b"wave")
                .and_then(|w| w.child(kind))
        })
    };
    let supported = |codec, config, sample_rate, channels| {
        Ok(Entry::Supported(Supported {
            codec,
            config,
            width: 0,
            height: 0,
            sample_rate,
            channels,
        }))
    };
    match &entry.kind {
        b"mp4a" => {
            let Some(esds) = child(b"esds") else {
                return Ok(Entry::Unsupported {
                    codec: "mp4a".to_owned(),
                    reason: "mp4a sample entry without an esds box".to_owned(),
                });
            };
            let es = esds
                .body
                .get(4..)
                .ok_or_else(|| "no version and flags".to_owned())
                .and_then(config::parse_esds)
                .map_err(|e| malformed(esds.kind, esds.offset, format!("track {id}: {e}")))?;
            match es.object_type {
                0x40 | 0x66 | 0x67 | 0x68 => {
                    if es.specific.is_empty() {
                        return Ok(Entry::Unsupported {
                            codec: "aac".to_owned(),
                            reason: "AAC track without an AudioSpecificConfig".to_owned(),
                        });
                    }
                    let (r, ch) = match config::parse_asc(&es.specific) {
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
                    let config = CodecConfig::Aac { audio_specific_config: es.specific };
                    supported(Codec::Aac, config, r, ch)
                }
                0x69 | 0x6B => supported(Codec::Mp3, CodecConfig::Mp3, rate, channels),
                0xA5 => supported(Codec::Ac3, CodecConfig::Ac3, rate, channels),
                other => Ok(unsupported(match other {
                    0xA6 => "eac3".to_owned(),
                    0xA9 => "dts".to_owned(),
                    0xDD => "vorbis".to_owned(),
                    _ => format!("mp4a (objectTypeIndication {other:#04x})"),
                })),
            }
        }
        b"Opus" => {
            let dops =
                child(b"dOps").ok_or_else(|| bad("no dOps box in the Opus sample entry".into()))?;
            let config = config::dops_to_opus_head(dops.body)
                .map_err(|e| malformed(dops.kind, dops.offset, format!("track {id}: {e}")))?;
            let ch = match &config {
                CodecConfig::Opus { channels, .. } => *channels,
                _ => channels,
            };
            supported(Codec::Opus, config, 48_000, ch)
        }
        b"ac-3" => {
            // dac3 (ETSI TS 102 366 §F.4): fscod(2) bsid(5) bsmod(3) acmod(3) lfeon(1) …
            let (r, ch) =
                child(b"dac3").and_then(|d| d.body.get(..2)).map_or((rate, channels), |b| {
                    let fscod = b[0] >> 6;
                    let acmod = (b[1] >> 3) & 0x07;
                    let lfe = (b[1] >> 2) & 0x01;
                    let r =
                        [48_000, 44_100, 32_000].get(usize::from(fscod)).copied().unwrap_or(rate);
                    (r, [2, 1, 2, 3, 3, 4, 4, 5][usize::from(acmod)] + lfe)
                });
            supported(Codec::Ac3, CodecConfig::Ac3, r, ch)
        }
        _ => supported(Codec::Mp3, CodecConfig::Mp3, rate, channels),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn languages() {
        // "eng" = 5,14,7 → 0b00101_01110_00111
        assert_eq!(language(0x15C7).as_deref(), Some("eng"));
        assert_eq!(language(0x55C4), None); // und
        assert_eq!(language(0), None);
        assert_eq!(language(0x7FFF), None);
    }

    #[test]
    fn fourcc_is_printable() {
        assert_eq!(fourcc(*b"moov"), "moov");
        assert_eq!(fourcc([0, 1, 2, 3]), "0x00010203");
    }

    #[test]
    fn box_iteration_rejects_overlong_children() {
        let parent = BoxRef {
            kind: *b"moov",
            offset: 100,
            header_len: 8,
            body: &[0, 0, 0, 20, b't', b'r', b'a', b'k', 0, 0, 0, 0],
        };
        let err = parent.children(0).next().unwrap().unwrap_err();
        assert_eq!(
            err.to_string(),
            "malformed trak box at offset 108: box size 20 exceeds the 12 bytes left in its parent"
        );
        let small = BoxRef { body: &[0, 0, 0, 4, b't', b'r', b'a', b'k'], ..parent };
        assert!(
            small
                .children(0)
                .next()
                .unwrap()
                .unwrap_err()
                .to_string()
                .contains("smaller than its 8-byte header")
        );
        let padding = BoxRef { body: &[0, 0, 0, 0], ..parent };
        assert!(padding.children(0).next().is_none());
    }

    // A small MP4 writer for synthetic files.

    fn bx(kind: &[u8; 4], parts: &[&[u8]]) -> Vec<u8> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let mut out = u32::try_from(8 + len).unwrap().to_be_bytes().to_vec();
        out.extend_from_slice(kind);
        for p in parts {
            out.extend_from_slice(p);
        }
        out
    }

    fn full(kind: &[u8; 4], version: u8, flags: u32, body: &[u8]) -> Vec<u8> {
        let vf = (u32::from(version) << 24 | flags).to_be_bytes();
        bx(kind, &[&vf, body])
    }

    fn be(values: &[u32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_be_bytes()).collect()
    }

    /// A table box: entry count, then the entries' 32-bit fields.
    fn table(kind: &[u8; 4], version: u8, entries: &[&[u32]]) -> Vec<u8> {
        let mut body = be(&[entries.len() as u32]);
        for e in entries {
            body.extend(be(e));
        }
        full(kind, version, 0, &body)
    }

    fn avcc() -> Vec<u8> {
        bx(b"avcC", &[&[1, 0x42, 0, 0x1E, 0xFF, 0xE1, 0, 2, 0x67, 0x42, 1, 0, 2, 0x68, 0xCE]])
    }

    fn visual(kind: &[u8; 4], config: &[u8]) -> Vec<u8> {
        let mut body = vec![0u8; 78];
        body[7] = 1; // data_reference_index
        body[24..26].copy_from_slice(&320u16.to_be_bytes());
        body[26..28].copy_from_slice(&240u16.to_be_bytes());
        bx(kind, &[&body, config])
    }

    fn mp4a(asc: &[u8]) -> Vec<u8> {
        let mut body = vec![0u8; 28];
        body[7] = 1;
        body[17] = 2; // channels
        body[19] = 16;
        body[24..26].copy_from_slice(&44100u16.to_be_bytes());
        let mut es = vec![0x03, 23 + asc.len() as u8, 0, 2, 0];
        es.extend_from_slice(&[
            0x04,
            15 + asc.len() as u8,
            0x40,
            0x15,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
        ]);
        es.extend_from_slice(&[0x05, asc.len() as u8]);
        es.extend_from_slice(asc);
        es.extend_from_slice(&[0x06, 1, 2]);
        bx(b"mp4a", &[&body, &full(b"esds", 0, 0, &es)])
    }

    fn stsd(entries: &[&[u8]]) -> Vec<u8> {
        let mut body = be(&[entries.len() as u32]);
        for e in entries {
            body.extend_from_slice(e);
        }
        full(b"stsd", 0, 0, &body)
    }

    fn trak(id: u32, timescale: u32, edts: Option<Vec<u8>>, stbl: &[Vec<u8>]) -> Vec<u8> {
        let mut tkhd = vec![0u8; 80];
        tkhd[8..12].copy_from_slice(&id.to_be_bytes());
        let mut mdhd = be(&[0, 0, timescale, 0]);
        mdhd.extend_from_slice(&0x15C7u16.to_be_bytes()); // eng
        mdhd.extend_from_slice(&[0, 0]);
        let stbl: Vec<&[u8]> = stbl.iter().map(Vec::as_slice).collect();
        let minf = bx(b"minf", &[&bx(b"stbl", &stbl)]);
        let mdia = bx(b"mdia", &[&full(b"mdhd", 0, 0, &mdhd), &minf]);
        let edts = edts.map(|e| bx(b"edts", &[&e])).unwrap_or_default();
        bx(b"trak", &[&full(b"tkhd", 0, 3, &tkhd), &edts, &mdia])
    }

    fn moov(movie_timescale: u32, traks: &[Vec<u8>], mvex: Option<Vec<u8>>) -> Vec<u8> {
        let mut mvhd = be(&[0, 0, movie_timescale, 0]);
        mvhd.extend_from_slice(&[0; 80]);
        let mut parts = vec![full(b"mvhd", 0, 0, &mvhd)];
        parts.extend(traks.iter().cloned());
        parts.extend(mvex);
        let parts: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        bx(b"moov", &parts)
    }

    fn ftyp() -> Vec<u8> {
        bx(b"ftyp", &[b"isom\0\0\x02\0isomiso6mp41avc1"])
    }

    fn demux(file: &[u8]) -> MediaIndex {
        let whole = super::super::demux_bytes(file);
        // The streaming demuxer, fed 7 bytes at a time, agrees.
        let mut d = super::super::Demuxer::new(ContainerKind::Mp4, file.len() as u64);
        while let Some(need) = d.poll_need() {
            let start = need.offset as usize;
            let end = start + (need.len as usize).min(7);
            if d.handle_data(need.offset, &file[start..end]).is_err() {
                break;
            }
        }
        assert_eq!(d.finish(), whole);
        whole.unwrap()
    }

    fn times(ix: &MediaIndex, t: u16) -> Vec<(i64, i64, u32, bool, u64, u32)> {
        ix.track_samples(t)
            .map(|s| (s.dts, s.pts, s.duration, s.keyframe, s.offset, s.size))
            .collect()
    }

    #[test]
    fn edit_list_with_an_empty_edit_and_signed_composition_offsets() {
        let mdat_at = 32 + 8; // after ftyp (32) and the mdat header
        let stbl = vec![
            stsd(&[&visual(b"avc1", &avcc())]),
            table(b"stts", 0, &[&[3, 3000]]),
            // Version 1: signed offsets.
            table(b"ctts", 1, &[&[1, 3000], &[1, 6000_u32], &[1, (-3000_i32) as u32]]),
            table(b"stss", 0, &[&[1]]),
            table(b"stsc", 0, &[&[1, 3, 1]]),
            full(b"stsz", 0, 0, &be(&[0, 3, 10, 20, 30])),
            table(b"stco", 0, &[&[mdat_at]]),
        ];
        // Movie timescale 1000: an empty edit of 0.5 s, then media from 3000 (90 kHz).
        let elst = full(b"elst", 0, 0, &be(&[2, 500, u32::MAX, 0x1_0000, 1000, 3000, 0x1_0000]));
        let mut file = ftyp();
        file.extend(bx(b"mdat", &[&[0u8; 60]]));
        file.extend(moov(1000, &[trak(1, 90_000, Some(elst), &stbl)], None));
        let ix = demux(&file);
        let t = &ix.tracks[0];
        assert_eq!((t.codec, t.width, t.height, t.timescale), (Codec::H264, 320, 240, 90_000));
        assert_eq!(t.language.as_deref(), Some("eng"));
        // The edit list moves both times; the -3000 offset puts the third pts 3000 before its
        // dts, so the decode times move down 3000 more.
        let d = 45_000 - 3000;
        let m = u64::from(mdat_at);
        assert_eq!(
            times(&ix, 0),
            [
                (d - 3000, d + 3000, 3000, true, m, 10),
                (d, d + 9000, 3000, false, m + 10, 20),
                (d + 3000, d + 3000, 3000, false, m + 30, 30),
            ]
        );
        assert_eq!(ix.duration_ns, 1_000_000_000 * (d as u64 + 9000 + 3000) / 90_000);
    }

    #[test]
    fn compact_sizes_64_bit_chunk_offsets_and_runs_of_chunks() {
        // stz2 with 4-bit sizes 3, 5, 7, 9; a chunk of 2, then 1 sample per chunk.
        let stbl = vec![
            stsd(&[&mp4a(&[0x12, 0x10])]),
            table(b"stts", 0, &[&[4, 1024]]),
            table(b"stsc", 0, &[&[1, 2, 1], &[2, 1, 1]]),
            full(b"stz2", 0, 0, &[0, 0, 0, 4, 0, 0, 0, 4, 0x35, 0x79]),
            full(
                b"co64",
                0,
                0,
                &[
                    be(&[4]),
                    vec![
                        0, 0, 0, 0, 0, 0, 0, 40, 0, 0, 0, 0, 0, 0, 0, 60, 0, 0, 0, 0, 0, 0, 0, 80,
                        0, 0, 0, 0, 0, 0, 0, 90,
                    ],
                ]
                .concat(),
            ),
        ];
        let mut file = ftyp();
        file.extend(bx(b"mdat", &[&[0u8; 60]]));
        file.extend(moov(1000, &[trak(7, 44_100, None, &stbl)], None));
        let ix = demux(&file);
        let t = &ix.tracks[0];
        assert_eq!((t.id, t.codec, t.sample_rate, t.channels), (7, Codec::Aac, 44_100, 2));
        let got: Vec<(u64, u32)> = ix.samples.iter().map(|s| (s.offset, s.size)).collect();
        assert_eq!(got, [(40, 3), (43, 5), (60, 7), (80, 9)]);
        assert!(ix.samples.iter().all(|s| s.keyframe));
    }

    #[test]
    fn inconsistent_tables_name_the_track_and_table() {
        let base = |stts: Vec<u8>, stco: Vec<u8>| {
            let stbl = vec![
                stsd(&[&mp4a(&[0x12, 0x10])]),
                stts,
                table(b"stsc", 0, &[&[1, 1, 1]]),
                full(b"stsz", 0, 0, &be(&[4, 3])),
                stco,
            ];
            let mut file = ftyp();
            file.extend(bx(b"mdat", &[&[0u8; 60]]));
            file.extend(moov(1000, &[trak(3, 44_100, None, &stbl)], None));
            super::super::demux_bytes(&file).unwrap_err().to_string()
        };
        let chunks = table(b"stco", 0, &[&[40], &[44], &[48]]);
        assert_eq!(
            base(table(b"stts", 0, &[&[2, 1024]]), chunks.clone()),
            "track 3: inconsistent sample table (stts): covers only 2 of the 3 samples"
        );
        assert_eq!(
            base(table(b"stts", 0, &[&[3, 1024]]), table(b"stco", 0, &[&[40], &[44]])),
            "track 3: inconsistent sample table (stsc/stco): the 2 chunks hold only 2 of the 3 samples"
        );
        assert!(
            base(table(b"stts", 0, &[&[3, 1024]]), table(b"stco", 0, &[&[40], &[44], &[1000]]))
                .starts_with(
                    "track 3: sample 2 at offset 1000 (4 bytes) lies beyond the end of the file ("
                )
        );
        let mut short = table(b"stts", 0, &[&[3, 1024]]);
        short[15] = 9; // entry_count 9
        assert!(base(short, chunks).contains("(stts): 9 entries of 8 bytes do not fit"));
    }

    #[test]
    fn unsupported_entries_are_skipped_and_named() {
        let tables = || {
            vec![
                table(b"stts", 0, &[&[1, 1024]]),
                table(b"stsc", 0, &[&[1, 1, 2]]),
                full(b"stsz", 0, 0, &be(&[4, 1])),
                table(b"stco", 0, &[&[40]]),
            ]
        };
        let with = |entry: Vec<u8>, extra: Option<Vec<u8>>| {
            let mut stbl = vec![match extra {
                Some(e) => stsd(&[&entry, &e]),
                None => stsd(&[&entry]),
            }];
            stbl.extend(tables());
            stbl
        };
        let traks = [
            trak(1, 1000, None, &with(visual(b"vp09", &[]), None)),
            trak(2, 1000, None, &with(visual(b"encv", &[]), None)),
            trak(3, 1000, None, &with(mp4a(&[0x12, 0x10]), Some(mp4a(&[0x12, 0x10])))),
            trak(
                4,
                1000,
                None,
                &with(visual(b"avc3", &bx(b"avcC", &[&[1, 0x42, 0, 0x1E, 0xFF, 0xE0, 0]])), None),
            ),
        ];
        let mut file = ftyp();
        file.extend(bx(b"mdat", &[&[0u8; 8]]));
        file.extend(moov(1000, &traks, None));
        let ix = demux(&file);
        let skipped: Vec<String> = ix.skipped.iter().map(ToString::to_string).collect();
        assert_eq!(
            skipped,
            [
                "track 1: codec vp9 is not supported (supported: H.264, H.265, AAC, Opus, AC-3, MP3)",
                "track 2: encrypted track (encv/enca) is not supported",
                "track 3: 2 sample descriptions in one track (only one is supported)",
            ]
        );
        // avc3 with in-band parameter sets only.
        assert_eq!(ix.tracks.len(), 1);
        assert_eq!(
            ix.tracks[0].config,
            CodecConfig::Avc { nal_length_size: 4, sps: vec![], pps: vec![] }
        );
    }

    #[test]
    fn fragments_with_every_kind_of_base_offset() {
        let empty = |entry: Vec<u8>| {
            vec![
                stsd(&[&entry]),
                table(b"stts", 0, &[]),
                table(b"stsc", 0, &[]),
                full(b"stsz", 0, 0, &be(&[0, 0])),
                table(b"stco", 0, &[]),
            ]
        };
        // trex: video defaults 100 ticks, 10 bytes, non-sync; audio 1024 ticks, 4 bytes.
        let mvex = bx(
            b"mvex",
            &[
                &full(b"trex", 0, 0, &be(&[1, 1, 100, 10, NON_SYNC])),
                &full(b"trex", 0, 0, &be(&[2, 1, 1024, 4, 0])),
            ],
        );
        let mut file = ftyp();
        file.extend(moov(
            1000,
            &[
                trak(1, 1000, None, &empty(visual(b"avc1", &avcc()))),
                trak(2, 48_000, None, &empty(mp4a(&[0x11, 0x90]))),
            ],
            Some(mvex),
        ));
        file.extend(bx(b"styp", &[b"msdh\0\0\0\0msdh"]));
        file.extend(full(b"sidx", 1, 0, &[0; 32]));
        // Fragment 1: no default-base-is-moof. Track 1: base = moof start, data_offset to the
        // mdat, first sample a sync sample, tfdt 0. Track 2: base = end of track 1's data,
        // sizes per sample, no data_offset, tfdt 500.
        let moof1_at = file.len() as u64;
        let build_moof1 = |data_offset: u32| {
            let traf1 = bx(
                b"traf",
                &[
                    &full(b"tfhd", 0, 0, &be(&[1])),
                    &full(b"tfdt", 0, 0, &be(&[0])),
                    &full(b"trun", 0, 0x05, &be(&[3, data_offset, 0])),
                ],
            );
            let traf2 = bx(
                b"traf",
                &[
                    &full(b"tfhd", 0, 0, &be(&[2])),
                    &full(b"tfdt", 1, 0, &[0, 0, 0, 0, 0, 0, 0x01, 0xF4]),
                    &full(b"trun", 0, 0x200, &be(&[2, 5, 6])),
                ],
            );
            bx(b"moof", &[&full(b"mfhd", 0, 0, &be(&[1])), &traf1, &traf2])
        };
        let len1 = build_moof1(0).len() as u32;
        file.extend(build_moof1(len1 + 8));
        file.extend(bx(b"mdat", &[&[0u8; 30 + 11]]));
        // Fragment 2: an explicit base-data-offset for track 1 (pointing into this mdat via a
        // 64-bit size header), no tfdt (continues at 300), per-sample durations and
        // composition offsets (version 1, negative).
        let moof2_at = file.len() as u64;
        let traf = |base: u64| {
            let mut tfhd = be(&[1]);
            tfhd.extend_from_slice(&base.to_be_bytes());
            bx(
                b"traf",
                &[
                    &full(b"tfhd", 0, 0x01, &tfhd),
                    &full(b"trun", 1, 0x901, &be(&[2, 0, 50, (-20_i32) as u32, 70, 40])),
                ],
            )
        };
        let moof2_len = bx(b"moof", &[&traf(0)]).len() as u64;
        let mdat2_data = moof2_at + moof2_len + 16;
        file.extend(bx(b"moof", &[&traf(mdat2_data)]));
        file.extend([0, 0, 0, 1]);
        file.extend(b"mdat");
        file.extend((16u64 + 20).to_be_bytes());
        file.extend([0u8; 20]);
        file.extend(full(b"mfra", 0, 0, &[0; 8]));
        let ix = demux(&file);
        let m1 = moof1_at + u64::from(len1) + 8;
        // The -20 composition offset moves the track's decode times down by 20.
        assert_eq!(
            times(&ix, 0),
            [
                (-20, 0, 100, true, m1, 10),
                (80, 100, 100, false, m1 + 10, 10),
                (180, 200, 100, false, m1 + 20, 10),
                (280, 280, 50, false, mdat2_data, 10),
                (330, 390, 70, false, mdat2_data + 10, 10),
            ]
        );
        assert_eq!(
            times(&ix, 1),
            [(500, 500, 1024, true, m1 + 30, 5), (1524, 1524, 1024, true, m1 + 35, 6)]
        );
        // Decode order across tracks: 500/48000 s comes after -20/1000 s and before 80/1000 s.
        let order: Vec<(u16, i64)> = ix.samples.iter().map(|s| (s.track, s.dts)).collect();
        assert_eq!(order[..4], [(0, -20), (1, 500), (1, 1524), (0, 80)]);
        let _ = moof1_at;
    }

    #[test]
    fn structural_errors() {
        let mut file = ftyp();
        file.extend(bx(b"moof", &[&full(b"mfhd", 0, 0, &be(&[1]))]));
        assert_eq!(
            super::super::demux_bytes(&file).unwrap_err().to_string(),
            "malformed moof box at offset 32: movie fragment before the moov box"
        );
        let mut file = ftyp();
        file.extend(bx(b"free", &[]));
        assert_eq!(
            super::super::demux_bytes(&file).unwrap_err().to_string(),
            "no moov box: an MP4 file needs a movie box listing its tracks"
        );
        let mut file = ftyp();
        file.extend([0, 0, 0, 4]);
        file.extend(b"free");
        assert_eq!(
            super::super::demux_bytes(&file).unwrap_err().to_string(),
            "malformed free box at offset 32: box size 4 is smaller than its 8-byte header"
        );
        // More samples than a file this size may hold.
        let stbl = vec![
            stsd(&[&mp4a(&[0x12, 0x10])]),
            table(b"stts", 0, &[&[u32::MAX, 1]]),
            table(b"stsc", 0, &[&[1, u32::MAX, 1]]),
            full(b"stsz", 0, 0, &be(&[1, u32::MAX])),
            table(b"stco", 0, &[&[0]]),
        ];
        let mut file = ftyp();
        file.extend(moov(1000, &[trak(1, 1000, None, &stbl)], None));
        let e = super::super::demux_bytes(&file).unwrap_err();
        assert!(matches!(e, ContainerError::TooManySamples { .. }), "{e}");
        // A track with no stsd.
        let mut file = ftyp();
        file.extend(moov(1000, &[trak(9, 1000, None, &[table(b"stts", 0, &[])])], None));
        assert!(
            super::super::demux_bytes(&file)
                .unwrap_err()
                .to_string()
                .contains("track 9: no stbl/stsd box")
        );
    }
}
