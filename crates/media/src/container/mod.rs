//! Container demuxing: MP4 (ISO BMFF) and Matroska/WebM files indexed into tracks and samples.
//!
//! Why: isochron serves files that are not MPEG-TS — the MP4s and MKVs people actually have — by
//! packetizing their elementary streams itself (RFC 6184 for H.264, RFC 7798 for H.265,
//! RFC 3640 for AAC, RFC 7587 for Opus, …). The packetizers need, for every track, the codec and
//! its out-of-band configuration (SPS/PPS, AudioSpecificConfig, OpusHead), and for every sample
//! its file offset, size, decode and presentation time and whether it is a sync sample. That is
//! what a [`MediaIndex`] holds. Our own code keeps the packetization and the timing; this module
//! only reads the container's tables.
//!
//! - **MP4** (ISO/IEC 14496-12): progressive files with `moov` before or after `mdat`
//!   (§8.2, §8.6 sample tables, §8.6.6 edit lists) and fragmented files (`mvex`/`trex` in the
//!   `moov`, then `moof`/`mdat` pairs, §8.8). Sample entries per ISO/IEC 14496-15 (`avcC`,
//!   `hvcC`) and 14496-14/-3 (`esds`, AudioSpecificConfig); Opus per the Opus-in-ISOBMFF
//!   mapping (`dOps`, converted to an OpusHead, RFC 7845 §5.1).
//! - **Matroska/WebM** (RFC 9559; EBML, RFC 8794): `Info`, `Tracks`, and `Cluster`s of
//!   `SimpleBlock`s and `BlockGroup`s, with lacing and unknown-size `Segment`/`Cluster`.
//!
//! The demuxer is sans-IO: [`Demuxer`] says which byte range it wants next
//! ([`Demuxer::poll_need`]) and the caller reads it from wherever the file lives. It reads box
//! and element headers, the `moov`/`moof` boxes and the Matroska `Info`/`Tracks` elements, and
//! the headers of blocks; it never reads sample payloads (except laced Matroska blocks, whose
//! lace sizes sit in front of the frames). [`demux_bytes`] runs it over a file held in memory.
//!
//! What it does not do: MPEG-TS (see [`TsScanner`](crate::TsScanner); [`M2tsToTs`] turns
//! 192-byte M2TS into the 188-byte packets it takes), decoding, encrypted or compressed tracks
//! (skipped), codecs other than H.264, H.265, AAC, Opus, AC-3 and MP3 (skipped, see
//! [`MediaIndex::skipped`]). The rules for timestamps — edit lists, Matroska's missing decode
//! times — are in `docs/design/containers.md`.
//!
//! Any input, however malformed, gives an index or a [`ContainerError`], never a panic, and the
//! memory used is bounded by the file size (see [`MAX_BOX_SIZE`], [`MAX_SAMPLES`]).
//!
//! ```
//! # fn read_at(_file: &(), _offset: u64, _len: u64) -> Vec<u8> { Vec::new() }
//! # fn demux(file: &(), file_len: u64, head: &[u8]) -> Result<(), isochron_media::ContainerError> {
//! use isochron_media::{ContainerError, Demuxer, sniff};
//!
//! let kind = sniff(head).ok_or(ContainerError::Unrecognised)?;
//! let mut demuxer = Demuxer::new(kind, file_len);
//! while let Some(need) = demuxer.poll_need() {
//!     let bytes = read_at(file, need.offset, need.len);
//!     demuxer.handle_data(need.offset, &bytes)?;
//! }
//! let index = demuxer.finish()?;
//! for sample in &index.samples {
//!     let _ns = index.time_ns(sample.track, sample.pts);
//! }
//! # Ok(())
//! # }
//! ```

mod bytes;
mod config;
mod error;
mod index;
mod m2ts;
mod mkv;
mod mp4;

use std::fmt;

pub use error::ContainerError;
pub use m2ts::{M2TS_PACKET_SIZE, M2tsToTs};

use crate::StreamKind;

/// The largest box or element the demuxer reads into memory whole (`moov`, `moof`, Matroska
/// `Tracks`, a laced block): 256 MiB.
pub const MAX_BOX_SIZE: u64 = 256 << 20;

/// The most samples an index may hold, whatever the file size. A file may also hold at most one
/// sample per 8 bytes of its length (plus 1024), which no real audio or video track comes near.
pub const MAX_SAMPLES: u64 = 50_000_000;

/// Nanoseconds per second: the unit of [`MediaIndex::time_ns`] and the Matroska track timescale.
pub const NANOS_PER_SECOND: u32 = 1_000_000_000;

/// The codecs a track may carry, for messages.
pub(crate) const SUPPORTED_CODECS: &str = "H.264, H.265, AAC, Opus, AC-3, MP3";

/// What a file is, from its first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ContainerKind {
    /// MPEG-TS with 188-byte packets (ISO/IEC 13818-1).
    MpegTs,
    /// MPEG-TS with 192-byte packets: a 4-byte `TP_extra_header` before each (Blu-ray BDAV).
    M2ts,
    /// ISO BMFF: MP4, M4A, MOV (ISO/IEC 14496-12).
    Mp4,
    /// Matroska or WebM (RFC 9559).
    Matroska,
}

impl fmt::Display for ContainerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::MpegTs => "MPEG-TS",
            Self::M2ts => "M2TS",
            Self::Mp4 => "MP4",
            Self::Matroska => "Matroska",
        })
    }
}

/// Box types that may open an ISO BMFF file (ISO/IEC 14496-12 §4.3, §8.16.2, §8.1.1-2).
const MP4_FIRST_BOXES: [&[u8; 4]; 8] =
    [b"ftyp", b"moov", b"moof", b"styp", b"free", b"mdat", b"skip", b"wide"];

/// What a file is, from its first bytes; `None` if it is none of the [`ContainerKind`]s.
///
/// MP4 needs at least 8 bytes (a box type at offset 4, one of `ftyp`, `moov`, `moof`, `styp`,
/// `free`, `skip`, `wide`, `mdat`); Matroska the EBML magic `1A 45 DF A3`; MPEG-TS the sync byte
/// 0x47 at offsets 0 and 188 (so 189 bytes), M2TS at offsets 4 and 196 (197 bytes).
pub fn sniff(head: &[u8]) -> Option<ContainerKind> {
    if head.starts_with(&[0x1A, 0x45, 0xDF, 0xA3]) {
        return Some(ContainerKind::Matroska);
    }
    if let Some(kind) = head.get(4..8)
        && MP4_FIRST_BOXES.iter().any(|b| &b[..] == kind)
    {
        return Some(ContainerKind::Mp4);
    }
    let sync = |at: usize| head.get(at) == Some(&0x47);
    if sync(0) && sync(188) {
        return Some(ContainerKind::MpegTs);
    }
    if sync(4) && sync(196) {
        return Some(ContainerKind::M2ts);
    }
    None
}

/// A codec the packetizers support.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Codec {
    /// H.264 / AVC (ITU-T H.264), length-prefixed NAL units.
    H264,
    /// H.265 / HEVC (ITU-T H.265), length-prefixed NAL units.
    H265,
    /// AAC (ISO/IEC 14496-3), raw access units without ADTS headers.
    Aac,
    /// Opus (RFC 6716) packets.
    Opus,
    /// AC-3 (ATSC A/52) frames.
    Ac3,
    /// MPEG-1/2 Audio Layer III frames.
    Mp3,
    /// An MPEG-2 transport stream (ISO/IEC 13818-1) carried whole, whole 188-byte packets to a
    /// payload (RFC 2250 §2): a live feed published as MPEG-TS (SRT, or `MP2T` over RTSP),
    /// stored as it came.
    Mp2t,
}

impl Codec {
    /// The codec's name as ffmpeg spells it: `"h264"`, `"hevc"`, `"aac"`, `"opus"`, `"ac3"`,
    /// `"mp3"`, `"mpegts"`.
    pub fn name(self) -> &'static str {
        match self {
            Self::H264 => "h264",
            Self::H265 => "hevc",
            Self::Aac => "aac",
            Self::Opus => "opus",
            Self::Ac3 => "ac3",
            Self::Mp3 => "mp3",
            Self::Mp2t => "mpegts",
        }
    }

    /// Video or audio (a transport stream is listed as video: `m=video` in SDP, RFC 2250).
    pub fn kind(self) -> StreamKind {
        match self {
            Self::H264 | Self::H265 | Self::Mp2t => StreamKind::Video,
            Self::Aac | Self::Opus | Self::Ac3 | Self::Mp3 => StreamKind::Audio,
        }
    }
}

impl fmt::Display for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A track's out-of-band decoder configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CodecConfig {
    /// From an AVCDecoderConfigurationRecord (ISO/IEC 14496-15 §5.3.3; `avcC` or Matroska
    /// `CodecPrivate`). For `avc3` the lists may be empty: parameter sets are then in-band.
    Avc {
        /// The size in bytes (1, 2 or 4) of the length before each NAL unit in a sample.
        nal_length_size: u8,
        /// Sequence parameter sets, each one NAL unit (type 7) without a length prefix.
        sps: Vec<Vec<u8>>,
        /// Picture parameter sets (NAL type 8).
        pps: Vec<Vec<u8>>,
    },
    /// From an HEVCDecoderConfigurationRecord (ISO/IEC 14496-15 §8.3.3; `hvcC` or
    /// `CodecPrivate`). For `hev1` the lists may be empty.
    Hevc {
        /// The size in bytes (1, 2 or 4) of the length before each NAL unit.
        nal_length_size: u8,
        /// Video parameter sets (NAL type 32).
        vps: Vec<Vec<u8>>,
        /// Sequence parameter sets (NAL type 33).
        sps: Vec<Vec<u8>>,
        /// Picture parameter sets (NAL type 34).
        pps: Vec<Vec<u8>>,
    },
    /// AAC.
    Aac {
        /// The AudioSpecificConfig (ISO/IEC 14496-3 §1.6.2.1): the `esds` DecoderSpecificInfo,
        /// the Matroska `CodecPrivate`, or built from the Matroska CodecID and audio settings.
        audio_specific_config: Vec<u8>,
    },
    /// Opus.
    Opus {
        /// Output channel count.
        channels: u8,
        /// Samples (at 48 kHz) to drop from the start of the decoded stream.
        pre_skip: u16,
        /// The original input sample rate (informational).
        input_sample_rate: u32,
        /// The OpusHead identification header (RFC 7845 §5.1): the Matroska `CodecPrivate`,
        /// or built from an MP4 `dOps` box.
        head: Vec<u8>,
    },
    /// AC-3: frames are self-describing.
    Ac3,
    /// MP3: frames are self-describing.
    Mp3,
}

/// One supported audio or video track.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Track {
    /// The container's id for the track: the MP4 `track_ID` or the Matroska `TrackNumber`
    /// (for messages; [`Sample::track`] is an index into [`MediaIndex::tracks`]).
    pub id: u64,
    /// The codec.
    pub codec: Codec,
    /// Video or audio.
    pub kind: StreamKind,
    /// The decoder configuration.
    pub config: CodecConfig,
    /// Ticks per second of this track's [`Sample`] times and durations: the MP4 `mdhd`
    /// timescale; for Matroska always [`NANOS_PER_SECOND`] (times are nanoseconds).
    pub timescale: u32,
    /// Video width in pixels (from the sample entry or `PixelWidth`); 0 for audio.
    pub width: u16,
    /// Video height in pixels; 0 for audio.
    pub height: u16,
    /// Audio sample rate in Hz (for AAC from the AudioSpecificConfig; 48000 for Opus); 0 for
    /// video.
    pub sample_rate: u32,
    /// Audio channel count; 0 for video.
    pub channels: u8,
    /// The track's language (ISO 639-2 or BCP 47), `None` if undetermined (`und`).
    pub language: Option<String>,
}

/// One access unit: a video frame or an audio frame (or, for AAC/Opus in MP4, whatever the
/// muxer put in one sample).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Sample {
    /// The track: an index into [`MediaIndex::tracks`].
    pub track: u16,
    /// Decode time in the track's timescale, edit list applied (may be negative).
    pub dts: i64,
    /// Presentation time in the track's timescale, edit list applied (may be negative: B-frame
    /// reordering delay is removed, audio priming is kept before 0).
    pub pts: i64,
    /// Duration in the track's timescale: from `stts`/`trun` (MP4), `BlockDuration` or
    /// `DefaultDuration` (Matroska; for audio without either, the gap to the next frame); 0 if
    /// unknown (saturated at `u32::MAX`).
    pub duration: u32,
    /// A sync sample: decoding can start here (always true for audio).
    pub keyframe: bool,
    /// The file offset of the sample's first byte.
    pub offset: u64,
    /// The sample's size in bytes.
    pub size: u32,
}

/// A track the index leaves out, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkippedTrack {
    /// The container's track id.
    pub id: u64,
    /// The codec as far as it was identified, e.g. `"mjpeg"`, `"vp9"`, `"tx3g"`,
    /// `"S_TEXT/UTF8"`.
    pub codec: String,
    /// Why it is skipped, e.g. `"codec vp9 is not supported (supported: …)"`.
    pub reason: String,
}

impl fmt::Display for SkippedTrack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "track {}: {}", self.id, self.reason)
    }
}

/// The tracks and samples of a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MediaIndex {
    /// The container.
    pub kind: ContainerKind,
    /// The supported tracks, in container order.
    pub tracks: Vec<Track>,
    /// Every sample of every track, in decode order across tracks: sorted by
    /// `dts / timescale` (compared exactly), ties by track index, then by order in the track.
    pub samples: Vec<Sample>,
    /// The tracks left out.
    pub skipped: Vec<SkippedTrack>,
    /// The presentation duration: the latest `pts + duration` of any sample, in nanoseconds
    /// from time 0 (0 if every sample ends before 0).
    pub duration_ns: u64,
}

impl MediaIndex {
    /// `t` in the timescale of track `track`, in nanoseconds, rounded to the nearest (halves
    /// away from zero) and saturated to the `i64` range. 0 for a track index out of range.
    pub fn time_ns(&self, track: u16, t: i64) -> i64 {
        self.tracks.get(usize::from(track)).map_or(0, |tr| index::ticks_to_ns(t, tr.timescale))
    }

    /// The samples of one track, in decode order.
    pub fn track_samples(&self, track: u16) -> impl Iterator<Item = &Sample> + '_ {
        self.samples.iter().filter(move |s| s.track == track)
    }
}

/// A byte range the [`Demuxer`] wants to read next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Need {
    /// The file offset of the first byte.
    pub offset: u64,
    /// How many bytes; never past the end of the file. The caller may hand over fewer (it is
    /// then asked for the rest) or more (they may save a later read).
    pub len: u64,
}

/// The bytes a parser can see: `data` is the file from offset `start`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Window<'a> {
    pub(crate) start: u64,
    pub(crate) data: &'a [u8],
}

impl<'a> Window<'a> {
    /// The bytes from `pos` to the end of the window, if there are at least `min` of them.
    pub(crate) fn from(&self, pos: u64, min: u64) -> Option<&'a [u8]> {
        let skip = usize::try_from(pos.checked_sub(self.start)?).ok()?;
        let rest = self.data.get(skip..)?;
        (rest.len() as u64 >= min).then_some(rest)
    }

    /// Exactly the bytes `[pos, pos + len)`, if the window holds them all.
    pub(crate) fn exact(&self, pos: u64, len: u64) -> Option<&'a [u8]> {
        let rest = self.from(pos, len)?;
        rest.get(..usize::try_from(len).ok()?)
    }
}

/// What a parser wants after it has used the bytes it could see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// At least `min` bytes from `pos` (at most to the end of the file), preferably `want`.
    Need { pos: u64, min: u64, want: u64 },
    /// The whole file has been walked.
    Done,
}

#[derive(Debug)]
enum Parser {
    Mp4(mp4::Mp4Parser),
    Mkv(mkv::MkvParser),
}

impl Parser {
    fn new(kind: ContainerKind, file_len: u64) -> Result<Self, ContainerError> {
        match kind {
            ContainerKind::Mp4 => Ok(Self::Mp4(mp4::Mp4Parser::new(file_len))),
            ContainerKind::Matroska => Ok(Self::Mkv(mkv::MkvParser::new(file_len))),
            ContainerKind::MpegTs | ContainerKind::M2ts => {
                Err(ContainerError::TransportStream { kind })
            }
        }
    }

    fn run(&mut self, w: Window<'_>) -> Result<Step, ContainerError> {
        match self {
            Self::Mp4(p) => p.run(w),
            Self::Mkv(p) => p.run(w),
        }
    }

    fn finish(self) -> Result<MediaIndex, ContainerError> {
        match self {
            Self::Mp4(p) => p.finish(),
            Self::Mkv(p) => p.finish(),
        }
    }
}

/// The sans-IO demuxer: asks for byte ranges, is handed them, and finally yields a
/// [`MediaIndex`].
///
/// Drive it with [`poll_need`](Self::poll_need) and [`handle_data`](Self::handle_data) until
/// `poll_need` returns `None`, then call [`finish`](Self::finish). The first error is sticky:
/// later calls repeat it. MPEG-TS and M2TS are refused
/// ([`ContainerError::TransportStream`]): use [`TsScanner`](crate::TsScanner).
#[derive(Debug)]
pub struct Demuxer {
    file_len: u64,
    parser: Option<Parser>,
    /// Bytes read so far for the current need: the file from `buf_start`.
    buf_start: u64,
    buf: Vec<u8>,
    /// What the parser waits for: at least `min` bytes from `pos`, preferably `want`.
    need: Option<(u64, u64, u64)>,
    error: Option<ContainerError>,
}

impl Demuxer {
    /// A demuxer for a file of kind `kind` and `file_len` bytes.
    pub fn new(kind: ContainerKind, file_len: u64) -> Self {
        let mut d =
            Self { file_len, parser: None, buf_start: 0, buf: Vec::new(), need: None, error: None };
        match Parser::new(kind, file_len) {
            Ok(p) => {
                d.parser = Some(p);
                d.advance();
            }
            Err(e) => d.error = Some(e),
        }
        d
    }

    /// The byte range to read next, or `None` when the demuxer is done (or failed): call
    /// [`finish`](Self::finish).
    pub fn poll_need(&self) -> Option<Need> {
        if self.error.is_some() {
            return None;
        }
        let (pos, _, want) = self.need?;
        let from = self.next_offset(pos);
        let end = pos.saturating_add(want).min(self.file_len).max(from);
        Some(Need { offset: from, len: end - from })
    }

    /// Hands over `data`, the file's bytes from `offset`, which must be the offset of the last
    /// [`poll_need`](Self::poll_need). `data` may be shorter than asked (it is then asked for
    /// the rest) but not empty: an empty read means the file is shorter than announced.
    pub fn handle_data(&mut self, offset: u64, data: &[u8]) -> Result<(), ContainerError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let Some((pos, min, _)) = self.need else {
            return Err(ContainerError::UnexpectedData { expected: None, got: offset });
        };
        let expected = self.next_offset(pos);
        if offset != expected {
            return Err(ContainerError::UnexpectedData { expected: Some(expected), got: offset });
        }
        if data.is_empty() {
            let e = ContainerError::ShortRead { offset, file_len: self.file_len };
            self.error = Some(e.clone());
            return Err(e);
        }
        if !self.covers(pos) {
            self.buf.clear();
            self.buf_start = pos;
        }
        let room = usize::try_from(self.file_len.saturating_sub(offset)).unwrap_or(usize::MAX);
        self.buf.extend_from_slice(&data[..data.len().min(room)]);
        let have = self.buf_start + self.buf.len() as u64;
        if have >= pos.saturating_add(min).min(self.file_len) {
            self.advance();
        }
        match &self.error {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// The index, once [`poll_need`](Self::poll_need) returns `None`.
    pub fn finish(self) -> Result<MediaIndex, ContainerError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if let Some((pos, _, _)) = self.need {
            return Err(ContainerError::Unfinished { offset: self.next_offset(pos) });
        }
        match self.parser {
            Some(p) => p.finish(),
            None => Err(ContainerError::Unfinished { offset: 0 }),
        }
    }

    /// Whether the buffer holds `pos` or ends right at it.
    fn covers(&self, pos: u64) -> bool {
        pos >= self.buf_start && pos <= self.buf_start + self.buf.len() as u64
    }

    /// Where the next read for a need at `pos` starts: the end of what is buffered.
    fn next_offset(&self, pos: u64) -> u64 {
        if self.covers(pos) { self.buf_start + self.buf.len() as u64 } else { pos }
    }

    /// Runs the parser over the buffer until it needs bytes it does not have, or is done.
    fn advance(&mut self) {
        let Some(parser) = self.parser.as_mut() else {
            return;
        };
        let w = Window { start: self.buf_start, data: &self.buf };
        match parser.run(w) {
            Ok(Step::Need { pos, min, want }) => {
                self.need = Some((pos, min, want.max(min)));
                // Keep only the buffered bytes the next step can use.
                if self.covers(pos) {
                    let drop = usize::try_from(pos - self.buf_start).unwrap_or(usize::MAX);
                    self.buf.drain(..drop.min(self.buf.len()));
                    self.buf_start = pos;
                } else {
                    self.buf = Vec::new();
                    self.buf_start = pos;
                }
            }
            Ok(Step::Done) => {
                self.need = None;
                self.buf = Vec::new();
            }
            Err(e) => {
                self.need = None;
                self.buf = Vec::new();
                self.error = Some(e);
            }
        }
    }
}

/// Indexes a whole file held in memory: [`sniff`], then a [`Demuxer`] that never has to wait.
pub fn demux_bytes(file: &[u8]) -> Result<MediaIndex, ContainerError> {
    let kind = sniff(file).ok_or(ContainerError::Unrecognised)?;
    let mut parser = Parser::new(kind, file.len() as u64)?;
    let w = Window { start: 0, data: file };
    match parser.run(w)? {
        Step::Done => parser.finish(),
        // Unreachable with the whole file in view; reported rather than trusted.
        Step::Need { pos, .. } => Err(ContainerError::Unfinished { offset: pos }),
    }
}

#[cfg(test)]
mod tests;
