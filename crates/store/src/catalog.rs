//! Catalog records and the [`Catalog`] trait.
//!
//! Why: the catalog is what survives between runs besides the blocks themselves: for each object
//! its placement seed and epoch (Yima §2.2: the seed is all placement needs), its per-block GSN and
//! time index (so a seek or a retransmission finds its block without reading any), its seek points
//! and stream descriptions; for the store its disks and the SCADDAR operation log. The trait has
//! an embedded implementation (redb, in `isochron-diskio`) and an etcd one for clusters
//! (`isochron-etcd`); both store the same bytes.
//!
//! The records are a **versioned wire format**: [`ObjectRecord::encode`] and
//! [`StoreMeta::encode`] write one format-version byte followed by a postcard encoding of a private
//! mirror struct made of plain integers and strings. The public types are free to grow methods and
//! change representation; the mirror is what is pinned. A reader refuses a newer version with a
//! clear error instead of misreading it. Decoding validates what the rest of the system relies on
//! (sorted block index, contiguous GSNs, a valid name, a consistent placement log).
//!
//! This module does no IO: implementations of [`Catalog`] do.

use std::error::Error as StdError;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use isochron_base::{
    BitRate, BlockIndex, Bytes, DiskId, Gsn, MAX_REPLICAS, MediaTime, ObjectId, Replicas,
};
use serde::{Deserialize, Serialize};

use crate::block::BlockHeader;
use crate::placement::{Epoch, PlacementError, PlacementLog, PlacementVariant, ScaleOp};

/// Version byte of [`ObjectRecord`] encodings written by this build: 1 for MPEG-TS objects
/// (unchanged), 2 for objects with native tracks ([`ObjectRecord::media`]).
pub const OBJECT_RECORD_VERSION: u8 = 2;
/// Version byte of [`StoreMeta`] encodings written by this build.
pub const STORE_META_VERSION: u8 = 4;
/// The store layout version this build writes into [`StoreMeta::format_version`].
pub const STORE_FORMAT_VERSION: u32 = 1;
/// Longest object name.
pub const MAX_NAME_LEN: usize = 128;

/// Errors of the catalog: decoding records, validating them, and the backends' failures.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// An encoded record is empty.
    #[error("{what}: empty record")]
    Empty {
        /// Which kind of record.
        what: &'static str,
    },
    /// An encoded record was written by a newer isochron.
    #[error(
        "{what}: format version {found} is newer than this build supports ({supported}); upgrade isochron"
    )]
    UnsupportedVersion {
        /// Which kind of record.
        what: &'static str,
        /// The version byte found.
        found: u8,
        /// The newest version this build reads.
        supported: u8,
    },
    /// An encoded record is truncated or malformed.
    #[error("{what}: cannot decode: {source}")]
    Decode {
        /// Which kind of record.
        what: &'static str,
        /// The decoder's error.
        source: postcard::Error,
    },
    /// An encoded record has bytes after its end.
    #[error("{what}: {count} unexpected bytes after the record")]
    TrailingBytes {
        /// Which kind of record.
        what: &'static str,
        /// How many.
        count: usize,
    },
    /// A record decodes but breaks an invariant.
    #[error("{what}: {reason}")]
    Invalid {
        /// Which record (object name, "store metadata").
        what: String,
        /// The broken invariant.
        reason: String,
    },
    /// The placement log in the store metadata is invalid.
    #[error("store metadata: invalid placement log: {0}")]
    Placement(#[from] PlacementError),
    /// An object name is not acceptable.
    #[error("invalid object name {name:?}: {reason}")]
    InvalidName {
        /// The rejected name.
        name: String,
        /// Why.
        reason: String,
    },
    /// An object of that name already exists.
    #[error("an object named {name:?} already exists")]
    NameExists {
        /// The name.
        name: String,
    },
    /// An object id was not handed out by [`Catalog::allocate_object_id`].
    #[error("object {name:?} has id {id}, which was never allocated")]
    UnallocatedId {
        /// The object's name.
        name: String,
        /// The id.
        id: ObjectId,
    },
    /// The catalog has no store metadata (it was never initialised).
    #[error("the catalog at {path} has no store metadata")]
    NoMeta {
        /// The catalog's location.
        path: PathBuf,
    },
    /// Another process holds the catalog.
    #[error("the store at {path} is in use by another process (a running `isochron serve`?)")]
    Locked {
        /// The catalog's location.
        path: PathBuf,
    },
    /// A catalog was to be created where one exists.
    #[error("a catalog already exists at {path}")]
    AlreadyExists {
        /// The catalog's location.
        path: PathBuf,
    },
    /// There is no catalog where one was to be opened.
    #[error("no catalog at {path}")]
    Missing {
        /// The expected location.
        path: PathBuf,
    },
    /// An optimistic update lost to concurrent writers too many times in a row.
    #[error(
        "catalog {path}: {op}: still conflicting with concurrent writers after {attempts} attempts"
    )]
    Contended {
        /// The catalog's location.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// How many attempts were made.
        attempts: u32,
    },
    /// The backend failed.
    #[error("catalog {path}: {op}: {source}")]
    Backend {
        /// The catalog's location.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The backend's error.
        source: Box<dyn StdError + Send + Sync>,
    },
}

/// The catalog's view of one block of an object: its GSN range, time and integrity data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockEntry {
    /// GSN of the block's first packet.
    pub first_gsn: Gsn,
    /// Send time of the block's first packet.
    pub first_send_time: MediaTime,
    /// Number of packets in the block.
    pub packets: u32,
    /// Bytes of payload in the block.
    pub payload_bytes: u32,
    /// Encoded length of the block (unpadded).
    pub encoded_len: u32,
    /// The block's checksum (as in its header).
    pub checksum: u64,
}

impl From<&BlockHeader> for BlockEntry {
    /// The catalog entry of a block, from its header (what ingest records after building it).
    fn from(h: &BlockHeader) -> Self {
        Self {
            first_gsn: h.first_gsn,
            first_send_time: h.first_send_time,
            packets: h.packet_count,
            payload_bytes: h.payload_len,
            encoded_len: h.encoded_len,
            checksum: h.checksum,
        }
    }
}

/// A place where playback can start: a random-access point.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SeekPoint {
    /// The point's send time.
    pub time: MediaTime,
    /// The GSN of the packet that starts there.
    pub gsn: Gsn,
}

/// One elementary stream of an object, for SDP and `isochron ls`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamDesc {
    /// The MPEG-TS PID.
    pub pid: u16,
    /// `video`, `audio` or `other`.
    pub kind: String,
    /// The codec's name (`h264`, `aac`, …).
    pub codec: String,
}

/// One track of an object stored as native RTP payloads (from MP4 or Matroska): what SDP and
/// the muxers need.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrackDesc {
    /// `video` or `audio`.
    pub kind: String,
    /// The codec, as ffmpeg names it (`h264`, `hevc`, `aac`, `opus`, `ac3`, `mp3`).
    pub codec: String,
    /// The `rtpmap` encoding name (`H264`, `H265`, `mpeg4-generic`, `opus`, `AC3`, `MPA`).
    pub encoding: String,
    /// The RTP clock rate, Hz.
    pub clock_rate: u32,
    /// The `rtpmap` encoding parameters (audio channels); 0 for none.
    pub channels: u8,
    /// The RTP payload type (dynamic 96.., or a static one such as 14 for MPA).
    pub payload_type: u8,
    /// The SDP `fmtp` parameters, without the payload type; empty for none.
    pub fmtp: String,
    /// The codec's configuration record as the container had it (avcC, hvcC,
    /// AudioSpecificConfig, OpusHead), for muxing the track again.
    pub config: Vec<u8>,
    /// The track's RTP packets.
    pub packets: u64,
    /// Video width and height in pixels; 0 for audio.
    pub width: u16,
    /// See `width`.
    pub height: u16,
    /// The language tag, if the container gave one.
    pub language: String,
}

/// What an object stored as native RTP payloads adds to its record: its container and tracks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NativeMedia {
    /// The container it was ingested from (`mp4`, `matroska`).
    pub container: String,
    /// Its tracks, in index order (a packet's `track` indexes this).
    pub tracks: Vec<TrackDesc>,
    /// For seek point `i` and track `t`, at `i × tracks + t`: the `track_seq` of the track's first
    /// packet at or after the seek point (its count of packets before it), so that a run starting
    /// there knows each track's next RTP sequence number without reading a block.
    pub seek_track_seqs: Vec<u32>,
    /// How many of the object's blocks, at the end, hold the source file's bytes (version-3
    /// blocks, not streamed): what HTTP serves as the object.
    pub source_blocks: u32,
    /// The source file's length in bytes.
    pub source_bytes: u64,
    /// The source file's media type (`video/mp4`, `video/x-matroska`, `video/webm`).
    pub source_type: String,
}

impl NativeMedia {
    /// Each track's next `track_seq` at seek point `i`, or `None` past the seek points.
    #[must_use]
    pub fn track_seqs_at(&self, i: usize) -> Option<&[u32]> {
        let n = self.tracks.len();
        self.seek_track_seqs.get(i * n..(i + 1) * n)
    }
}

/// Everything the catalog keeps about one stored object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectRecord {
    /// The object's id, from [`Catalog::allocate_object_id`].
    pub id: ObjectId,
    /// The object's name (see [`validate_name`]).
    pub name: String,
    /// The placement seed.
    pub seed: u64,
    /// The placement epoch the object was written in.
    pub first_epoch: Epoch,
    /// The block size the object was cut with.
    pub block_size: Bytes,
    /// One entry per block, in block order.
    pub blocks: Vec<BlockEntry>,
    /// Total number of packets.
    pub packets: u64,
    /// Total bytes of transport stream (the sum of payloads).
    pub ts_bytes: Bytes,
    /// Send time of the last packet.
    pub duration: MediaTime,
    /// Average bit rate.
    pub avg_bitrate: BitRate,
    /// Peak bit rate (over the measurement window ingest uses).
    pub peak_bitrate: BitRate,
    /// Random-access points sorted by time; the first is at GSN 0.
    pub seek_points: Vec<SeekPoint>,
    /// The elementary streams.
    pub streams: Vec<StreamDesc>,
    /// The file the object was ingested from.
    pub source_file: String,
    /// When the object was ingested, in seconds since the Unix epoch.
    pub created_unix_s: u64,
    /// Native tracks (an object ingested from MP4 or Matroska, stored in version-2 blocks);
    /// `None` for an MPEG-TS object (one MP2T stream, version-1 blocks).
    pub media: Option<NativeMedia>,
}

impl ObjectRecord {
    /// The index of the seek point [`ObjectRecord::seek`] picks for `t`.
    #[must_use]
    pub fn seek_index(&self, t: MediaTime) -> usize {
        match self.seek_points.partition_point(|s| s.time <= t) {
            0 => 0,
            i => {
                let time = self.seek_points[i - 1].time;
                self.seek_points[..i].partition_point(|s| s.time < time)
            }
        }
    }

    /// The blocks that hold packets, in order: every block of an MPEG-TS object; a native
    /// object's blocks before its source blocks.
    #[must_use]
    pub fn media_blocks(&self) -> &[BlockEntry] {
        let source = self.media.as_ref().map_or(0, |m| m.source_blocks as usize);
        &self.blocks[..self.blocks.len().saturating_sub(source)]
    }

    /// The blocks whose payloads, in order, are the bytes HTTP serves as the object (the file
    /// it was ingested from): every block of an MPEG-TS object (its packets are the file's TS
    /// packets); a native object's source blocks. Their indices start at the returned offset.
    #[must_use]
    pub fn source_blocks(&self) -> (usize, &[BlockEntry]) {
        let first = self.media_blocks().len();
        match &self.media {
            Some(_) => (first, &self.blocks[first..]),
            None => (0, &self.blocks),
        }
    }

    /// The number of RTP streams a session of this object carries: its native tracks, or the
    /// one MP2T stream.
    #[must_use]
    pub fn track_count(&self) -> usize {
        self.media.as_ref().map_or(1, |m| m.tracks.len())
    }

    /// The block holding packet `gsn`, or `None` past the end.
    #[must_use]
    pub fn block_of(&self, gsn: Gsn) -> Option<BlockIndex> {
        if gsn.0 >= self.packets {
            return None;
        }
        let i = self.blocks.partition_point(|b| b.first_gsn <= gsn).checked_sub(1)?;
        // `validate` bounds the block count by `u32::MAX + 1`.
        Some(BlockIndex(i as u32))
    }

    /// The seek point to start at for `t`: the latest send time at or before `t`, and among seek
    /// points sharing that send time the earliest packet (units sent at the same instant all
    /// belong to the start: at time 0, ffmpeg's SDT precedes the PAT). The first one if `t`
    /// precedes all; the start of the object if there is none.
    #[must_use]
    pub fn seek(&self, t: MediaTime) -> SeekPoint {
        self.seek_points.get(self.seek_index(t)).copied().unwrap_or_default()
    }

    /// The number of blocks, as the type block indices use.
    #[must_use]
    pub fn block_count(&self) -> u32 {
        // `validate` bounds the block count; saturate rather than wrap for unvalidated records.
        u32::try_from(self.blocks.len()).unwrap_or(u32::MAX)
    }

    /// Checks the invariants readers rely on: a valid name, blocks whose GSN ranges tile
    /// `0..packets`, seek points sorted by time starting at GSN 0 and inside the object.
    pub fn validate(&self) -> Result<(), CatalogError> {
        validate_name(&self.name)?;
        let invalid = |reason: String| CatalogError::Invalid {
            what: format!("object {:?} (id {})", self.name, self.id),
            reason,
        };
        if self.blocks.len() > 1 << 32 {
            return Err(invalid(format!("{} blocks exceed the index range", self.blocks.len())));
        }
        let mut next = 0u64;
        for (i, b) in self.blocks.iter().enumerate() {
            if b.first_gsn.0 != next {
                return Err(invalid(format!(
                    "block {i} starts at GSN {} where {next} was expected",
                    b.first_gsn
                )));
            }
            next += u64::from(b.packets);
        }
        if next != self.packets {
            return Err(invalid(format!(
                "blocks hold {next} packets, the record says {}",
                self.packets
            )));
        }
        if let Some(first) = self.seek_points.first()
            && first.gsn != Gsn(0)
        {
            return Err(invalid(format!("first seek point is at GSN {}, not 0", first.gsn)));
        }
        for (i, w) in self.seek_points.windows(2).enumerate() {
            if w[1].time < w[0].time {
                return Err(invalid(format!(
                    "seek point {} is earlier than the one before",
                    i + 1
                )));
            }
        }
        if let Some(s) = self.seek_points.iter().find(|s| s.gsn.0 >= self.packets.max(1)) {
            return Err(invalid(format!("seek point at GSN {} is past the end", s.gsn)));
        }
        if let Some(m) = &self.media {
            if m.tracks.is_empty() || m.tracks.len() > crate::block::MAX_TRACKS {
                return Err(invalid(format!(
                    "{} tracks (1 to {} are allowed)",
                    m.tracks.len(),
                    crate::block::MAX_TRACKS
                )));
            }
            if m.seek_track_seqs.len() != self.seek_points.len() * m.tracks.len() {
                return Err(invalid(format!(
                    "{} seek track positions for {} seek points of {} tracks",
                    m.seek_track_seqs.len(),
                    self.seek_points.len(),
                    m.tracks.len()
                )));
            }
            let total: u64 = m.tracks.iter().map(|t| t.packets).sum();
            if total != self.packets {
                return Err(invalid(format!(
                    "tracks hold {total} packets, the record says {}",
                    self.packets
                )));
            }
            let source = m.source_blocks as usize;
            if source > self.blocks.len() {
                return Err(invalid(format!(
                    "{source} source blocks, {} blocks in all",
                    self.blocks.len()
                )));
            }
            let tail = &self.blocks[self.blocks.len() - source..];
            if let Some(i) = tail.iter().position(|b| b.packets != 0) {
                return Err(invalid(format!("source block {i} holds packets")));
            }
            let bytes: u64 = tail.iter().map(|b| u64::from(b.payload_bytes)).sum();
            if bytes != m.source_bytes {
                return Err(invalid(format!(
                    "source blocks hold {bytes} bytes, the record says {}",
                    m.source_bytes
                )));
            }
        }
        Ok(())
    }

    /// The versioned encoding: [`OBJECT_RECORD_VERSION`] then postcard.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        match &self.media {
            // MPEG-TS objects keep the version-1 encoding, byte for byte.
            None => encode_versioned(1, &wire::ObjectRecordV1::from(self)),
            Some(_) => encode_versioned(OBJECT_RECORD_VERSION, &wire::ObjectRecordV2::from(self)),
        }
    }

    /// Decodes and validates an encoding from [`ObjectRecord::encode`] (any version up to this
    /// build's).
    pub fn decode(bytes: &[u8]) -> Result<Self, CatalogError> {
        const WHAT: &str = "object record";
        let (version, body) = split_version(WHAT, OBJECT_RECORD_VERSION, bytes)?;
        let rec = match version {
            1 => Self::from(decode_exact::<wire::ObjectRecordV1>(WHAT, body)?),
            _ => Self::from(decode_exact::<wire::ObjectRecordV2>(WHAT, body)?),
        };
        rec.validate()?;
        Ok(rec)
    }

    /// Decodes the record a catalog keeps under `name` ([`ObjectRecord::decode`]) and checks
    /// that it is named so. Errors name the object.
    pub fn decode_stored(name: &str, bytes: &[u8]) -> Result<Self, CatalogError> {
        let what = || format!("object {name:?}");
        let rec = Self::decode(bytes)
            .map_err(|e| CatalogError::Invalid { what: what(), reason: e.to_string() })?;
        if rec.name != name {
            return Err(CatalogError::Invalid {
                what: what(),
                reason: format!("record is named {:?}", rec.name),
            });
        }
        Ok(rec)
    }
}

/// What separates a title from a rung in a rendition's object name: `TITLE~RUNG`. `~` is
/// unreserved in URLs (RFC 3986 §2.3) and in file names, and no title may contain it
/// ([`validate_title`]), so a rendition's name never collides with a title's.
pub const RENDITION_SEP: char = '~';

/// The object name of `title`'s rendition `rung` (`movie~720p`).
#[must_use]
pub fn rendition_name(title: &str, rung: &str) -> String {
    format!("{title}{RENDITION_SEP}{rung}")
}

/// The title and rung of a rendition's object name, `None` for a title's.
#[must_use]
pub fn split_rendition(name: &str) -> Option<(&str, &str)> {
    name.split_once(RENDITION_SEP)
}

/// The title an object belongs to: a rendition's `TITLE`, or a title's own name.
#[must_use]
pub fn title_of(name: &str) -> &str {
    split_rendition(name).map_or(name, |(title, _)| title)
}

/// Whether `name` is one of `title`'s renditions (`TITLE~RUNG`).
#[must_use]
pub fn is_rendition_of(name: &str, title: &str) -> bool {
    split_rendition(name).is_some_and(|(t, _)| t == title)
}

/// Checks an object name: a title ([`validate_title`]), or a rendition's `TITLE~RUNG` with a
/// valid title and a rung of 1 to 16 characters from `a-z 0-9`. At most 128 bytes in all.
pub fn validate_name(name: &str) -> Result<(), CatalogError> {
    let Some((title, rung)) = split_rendition(name) else {
        return validate_title(name);
    };
    let bad = |reason: String| Err(CatalogError::InvalidName { name: name.to_owned(), reason });
    if name.len() > MAX_NAME_LEN {
        return bad(format!("{} bytes long, the limit is {MAX_NAME_LEN}", name.len()));
    }
    validate_title(title)?;
    if rung.is_empty()
        || rung.len() > 16
        || !rung.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    {
        return bad(format!("rendition {rung:?} is not 1 to 16 of a-z and 0-9"));
    }
    Ok(())
}

/// Checks a title's (or a node's) name: 1 to 128 characters from `A-Z a-z 0-9 . _ -`, and not
/// `.` or `..`. Names become file and URL path components, hence the conservative set.
pub fn validate_title(name: &str) -> Result<(), CatalogError> {
    let bad = |reason: String| Err(CatalogError::InvalidName { name: name.to_owned(), reason });
    if name.contains(RENDITION_SEP) {
        return bad(format!(
            "'{RENDITION_SEP}' is kept for renditions (TITLE{RENDITION_SEP}RUNG), which the server makes"
        ));
    }
    if name.is_empty() {
        return bad("names must not be empty".into());
    }
    if name.len() > MAX_NAME_LEN {
        return bad(format!("{} bytes long, the limit is {MAX_NAME_LEN}", name.len()));
    }
    if name == "." || name == ".." {
        return bad("\".\" and \"..\" are reserved".into());
    }
    if let Some((i, c)) =
        name.char_indices().find(|&(_, c)| !(c.is_ascii_alphanumeric() || "._-".contains(c)))
    {
        return bad(format!(
            "character {c:?} at byte {i} is not allowed (use letters, digits, '.', '_' and '-')"
        ));
    }
    Ok(())
}

/// The life cycle of a disk in the store. A disk's state follows from the placement log and the
/// active epoch (checked by [`StoreMeta::validate`]): in both the active and the pending epoch
/// it is `Active`, only in the pending one `Joining`, only in the active one `Draining`, in
/// neither `Retired`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DiskState {
    /// In the active placement epoch (and the pending one, if any), serving reads.
    Active,
    /// Added by the pending operation; blocks are being copied onto it (SCADDAR epoch pending).
    Joining,
    /// Removed by the pending operation; its blocks are being copied off it but it is still read
    /// until the epoch flips.
    Draining,
    /// Removed; no longer opened or read. Its id is never reused.
    Retired,
}

/// A disk emulation model (Gennart, Messerli, Hersch, "Performances of multiprocessor multidisk
/// architectures for continuous media storage", §3.2 "Disk modeling"): every block IO costs a
/// latency drawn from the density `S(t) = 2/(3m)·(1 − t/(3m))` on `[0, 3m]` (mean `m`, standard
/// deviation `m/√2`) plus a transfer time linear in its length.
///
/// `isochron-diskio` makes an emulated disk's IO thread sleep until the model's time has passed,
/// so a directory on a fast SSD behaves like a slower disk, reproducibly (the latency generator
/// is seeded from the disk id). This type only describes and samples the model.
///
/// The spec form ([`DiskModel::parse_spec`], [`fmt::Display`]) is `seek_ms=M,rate_mib_s=R`;
/// either key may be left out (no latency; unlimited rate).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DiskModel {
    /// Mean latency `m` (seek plus rotation) per block IO.
    pub mean_seek: Duration,
    /// Transfer rate, bytes per second; [`DiskModel::UNLIMITED_RATE`] for none.
    pub rate: u64,
}

/// Why a disk spec (`PATH[,seek_ms=M][,rate_mib_s=R]`) was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DiskSpecError {
    /// The path part is empty.
    #[error("disk spec {spec:?}: the path is empty")]
    EmptyPath {
        /// The spec.
        spec: String,
    },
    /// A `key=value` part has no `=`.
    #[error("disk spec {spec:?}: {part:?} is not key=value (keys: seek_ms, rate_mib_s)")]
    NotKeyValue {
        /// The spec.
        spec: String,
        /// The part.
        part: String,
    },
    /// A key is not known.
    #[error("disk spec {spec:?}: unknown key {key:?} (keys: seek_ms, rate_mib_s)")]
    UnknownKey {
        /// The spec.
        spec: String,
        /// The key.
        key: String,
    },
    /// A key is given twice.
    #[error("disk spec {spec:?}: {key} is given twice")]
    DuplicateKey {
        /// The spec.
        spec: String,
        /// The key.
        key: &'static str,
    },
    /// A value is not a number in range.
    #[error("disk spec {spec:?}: {key}={value:?}: {reason}")]
    BadNumber {
        /// The spec.
        spec: String,
        /// The key.
        key: &'static str,
        /// The value.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

impl DiskModel {
    /// The `rate` that stands for "no transfer cost".
    pub const UNLIMITED_RATE: u64 = u64::MAX;
    /// Longest mean latency a spec may ask for.
    pub const MAX_MEAN_SEEK: Duration = Duration::from_secs(10);

    /// Parses `PATH`, `PATH,seek_ms=10`, `PATH,rate_mib_s=4` or `PATH,seek_ms=10,rate_mib_s=4`
    /// (values may have decimals): the disk directory and its model, or `None` for a plain path.
    /// The path is everything before the first comma, so a path containing a comma cannot be
    /// given in this form ([`DiskSpec`] takes any path).
    pub fn parse_spec(spec: &str) -> Result<(PathBuf, Option<Self>), DiskSpecError> {
        let mut parts = spec.split(',');
        let path = parts.next().unwrap_or_default();
        if path.is_empty() {
            return Err(DiskSpecError::EmptyPath { spec: spec.to_owned() });
        }
        let (mut seek, mut rate): (Option<Duration>, Option<u64>) = (None, None);
        let mut any = false;
        for part in parts {
            any = true;
            let Some((key, value)) = part.split_once('=') else {
                return Err(DiskSpecError::NotKeyValue {
                    spec: spec.to_owned(),
                    part: part.to_owned(),
                });
            };
            let bad = |key: &'static str, reason: &'static str| DiskSpecError::BadNumber {
                spec: spec.to_owned(),
                key,
                value: value.to_owned(),
                reason,
            };
            let number = |key: &'static str| {
                value
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite())
                    .ok_or_else(|| bad(key, "not a number"))
            };
            let dup =
                |key: &'static str| DiskSpecError::DuplicateKey { spec: spec.to_owned(), key };
            match key.trim() {
                "seek_ms" => {
                    let ms = number("seek_ms")?;
                    if !(0.0..=Self::MAX_MEAN_SEEK.as_secs_f64() * 1e3).contains(&ms) {
                        return Err(bad("seek_ms", "must be between 0 and 10000"));
                    }
                    let ns = (ms * 1e6).round() as u64;
                    if seek.replace(Duration::from_nanos(ns)).is_some() {
                        return Err(dup("seek_ms"));
                    }
                }
                "rate_mib_s" => {
                    let mib = number("rate_mib_s")?;
                    let bytes = (mib * f64::from(1u32 << 20)).round();
                    if !(1.0..1e18).contains(&bytes) {
                        return Err(bad("rate_mib_s", "must be positive (and below 10^12)"));
                    }
                    if rate.replace(bytes as u64).is_some() {
                        return Err(dup("rate_mib_s"));
                    }
                }
                other => {
                    return Err(DiskSpecError::UnknownKey {
                        spec: spec.to_owned(),
                        key: other.to_owned(),
                    });
                }
            }
        }
        let model = any.then(|| Self {
            mean_seek: seek.unwrap_or_default(),
            rate: rate.unwrap_or(Self::UNLIMITED_RATE),
        });
        Ok((PathBuf::from(path), model))
    }

    /// The latency for a uniform sample `u` in `[0, 1)`: the inverse CDF of `S(t)`,
    /// `t = 3m·(1 − √(1 − u))`.
    #[must_use]
    pub fn latency(&self, u: f64) -> Duration {
        let u = u.clamp(0.0, 1.0);
        self.mean_seek.mul_f64(3.0 * (1.0 - (1.0 - u).sqrt()))
    }

    /// The time to transfer `len` bytes at [`DiskModel::rate`] (zero when unlimited).
    #[must_use]
    pub fn transfer(&self, len: u64) -> Duration {
        if self.rate == Self::UNLIMITED_RATE || self.rate == 0 {
            return Duration::ZERO;
        }
        let nanos = u128::from(len) * 1_000_000_000 / u128::from(self.rate);
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// The modelled service time of one IO of `len` bytes for the uniform sample `u`.
    #[must_use]
    pub fn service_time(&self, len: u64, u: f64) -> Duration {
        self.latency(u) + self.transfer(len)
    }
}

impl fmt::Display for DiskModel {
    /// The spec form, `seek_ms=10,rate_mib_s=4`, leaving out a key at its default (and writing
    /// `seek_ms=0` for a model with neither).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let seek = !self.mean_seek.is_zero();
        let rate = self.rate != Self::UNLIMITED_RATE;
        if seek || !rate {
            write!(f, "seek_ms={}", self.mean_seek.as_nanos() as f64 / 1e6)?;
        }
        if rate {
            if seek {
                f.write_str(",")?;
            }
            write!(f, "rate_mib_s={}", self.rate as f64 / f64::from(1u32 << 20))?;
        }
        Ok(())
    }
}

/// A disk to create a store with or to add: its directory and, for an emulated disk, its model.
///
/// Parses from and displays as the spec form `PATH[,seek_ms=M][,rate_mib_s=R]`
/// ([`DiskModel::parse_spec`]); converts from a plain path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskSpec {
    /// The directory (a relative path is relative to the store root).
    pub path: PathBuf,
    /// The emulation model, if the disk is emulated.
    pub model: Option<DiskModel>,
}

impl std::str::FromStr for DiskSpec {
    type Err = DiskSpecError;

    fn from_str(s: &str) -> Result<Self, DiskSpecError> {
        let (path, model) = DiskModel::parse_spec(s)?;
        Ok(Self { path, model })
    }
}

impl fmt::Display for DiskSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        match &self.model {
            Some(m) => write!(f, ",{m}"),
            None => Ok(()),
        }
    }
}

impl From<PathBuf> for DiskSpec {
    fn from(path: PathBuf) -> Self {
        Self { path, model: None }
    }
}

impl From<&Path> for DiskSpec {
    fn from(path: &Path) -> Self {
        Self { path: path.to_owned(), model: None }
    }
}

impl From<&PathBuf> for DiskSpec {
    fn from(path: &PathBuf) -> Self {
        Self { path: path.clone(), model: None }
    }
}

impl From<&Self> for DiskSpec {
    fn from(spec: &Self) -> Self {
        spec.clone()
    }
}

impl From<(PathBuf, Option<DiskModel>)> for DiskSpec {
    fn from((path, model): (PathBuf, Option<DiskModel>)) -> Self {
        Self { path, model }
    }
}

/// One disk of the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskRecord {
    /// The disk's id.
    pub id: DiskId,
    /// The disk's directory, as configured (a relative path is relative to the store root).
    pub path: PathBuf,
    /// Where the disk is in its life cycle.
    pub state: DiskState,
    /// The emulation model, for an emulated disk.
    pub model: Option<DiskModel>,
    /// The cluster node that owns the disk (see [`validate_name`]); `None` in a single-node
    /// store.
    pub owner: Option<String>,
}

/// The store-wide metadata: identity, block size, disks, placement log, active epoch, id counter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreMeta {
    /// Random id of the store, also written into every disk's identity file.
    pub store_id: u64,
    /// The store layout version ([`STORE_FORMAT_VERSION`]).
    pub format_version: u32,
    /// The block size new objects are cut with.
    pub block_size: Bytes,
    /// Every disk the store has had, including retired ones.
    pub disks: Vec<DiskRecord>,
    /// The SCADDAR operation log.
    pub placement: PlacementLog,
    /// The epoch readers use. The log is at most one operation ahead of it while a reorganisation
    /// is pending (`docs/design/scaling.md`): blocks are being copied to where the pending epoch
    /// puts them, and the epoch flips (this field becomes the log's current epoch) when all are.
    pub active_epoch: Epoch,
    /// The next object id to hand out. Catalogs never let it go down.
    pub next_object_id: u64,
    /// How many copies of every block the store keeps (`store.replication`, K): 1 to
    /// [`MAX_REPLICAS`], fixed when the store is created. Where they are:
    /// [`StoreMeta::replicas_at`] (the `replica` module). A store written before replication
    /// (metadata version ≤ 3) has 1.
    pub replication: u8,
}

impl StoreMeta {
    /// The copies of block `index` of `rec` as of placement epoch `at` (clamped as
    /// [`PlacementLog::locate`] clamps it): replica 0 is the block's placement, the others
    /// distinct disks, on distinct nodes while there are enough
    /// ([`locate_replicas`](crate::replica::locate_replicas)).
    #[must_use]
    pub fn replicas_at(&self, rec: &ObjectRecord, index: BlockIndex, at: Epoch) -> Replicas {
        self.replicas_of(rec.seed, rec.first_epoch, index, at)
    }

    /// [`StoreMeta::replicas_at`] for a block known by its object's seed and first epoch.
    #[must_use]
    pub fn replicas_of(
        &self,
        seed: u64,
        first_epoch: Epoch,
        index: BlockIndex,
        at: Epoch,
    ) -> Replicas {
        let k = usize::from(self.replication);
        if k <= 1 {
            return Replicas::single(self.placement.locate(seed, first_epoch, index, at));
        }
        crate::replica::locate_replicas(&self.placement, seed, first_epoch, index, at, k, &|d| {
            self.node_of(d)
        })
    }

    /// A number naming the node that owns `disk`: equal for disks of the same node (every disk
    /// of a single-node store is on one node). Only compared, never stored.
    #[must_use]
    pub fn node_of(&self, disk: DiskId) -> u64 {
        let owner = self.disk(disk).and_then(|d| d.owner.as_deref());
        match owner {
            None => 0,
            Some(o) => {
                let first = self.disks.iter().position(|d| d.owner.as_deref() == Some(o));
                first.map_or(0, |i| i as u64 + 1)
            }
        }
    }

    /// How many distinct nodes own the disks of placement epoch `at`.
    #[must_use]
    pub fn nodes_in(&self, at: Epoch) -> usize {
        let mut nodes: Vec<u64> =
            self.placement.disks(at).iter().map(|&d| self.node_of(d)).collect();
        nodes.sort_unstable();
        nodes.dedup();
        nodes.len()
    }
    /// The record of disk `id`.
    #[must_use]
    pub fn disk(&self, id: DiskId) -> Option<&DiskRecord> {
        self.disks.iter().find(|d| d.id == id)
    }

    /// The pending reorganisation as `(active, pending)` epochs, if the placement log is one
    /// operation ahead of the active epoch.
    #[must_use]
    pub fn pending(&self) -> Option<(Epoch, Epoch)> {
        let current = self.placement.current_epoch();
        (current > self.active_epoch).then_some((self.active_epoch, current))
    }

    /// The state a disk must have given the placement log and the active epoch (see
    /// [`DiskState`]).
    #[must_use]
    pub fn expected_state(&self, id: DiskId) -> DiskState {
        let active = self.placement.disks(self.active_epoch).contains(&id);
        let pending = self.placement.disks(self.placement.current_epoch()).contains(&id);
        match (active, pending) {
            (true, true) => DiskState::Active,
            (false, true) => DiskState::Joining,
            (true, false) => DiskState::Draining,
            (false, false) => DiskState::Retired,
        }
    }

    /// The id a new disk gets: one more than any disk the store has ever had (ids are never
    /// reused), or `None` when the ids are exhausted.
    #[must_use]
    pub fn next_disk_id(&self) -> Option<DiskId> {
        let from_records = self.disks.iter().map(|d| d.id.0);
        let from_log = self.placement.initial().iter().map(|d| d.0).chain(
            self.placement.ops().iter().flat_map(|op| match op {
                ScaleOp::Add { disks } => disks.iter().map(|d| d.0).collect::<Vec<_>>(),
                ScaleOp::Remove { .. } => Vec::new(),
            }),
        );
        match from_records.chain(from_log).max() {
            None => Some(DiskId(0)),
            Some(max) => max.checked_add(1).map(DiskId),
        }
    }

    /// Checks that disk ids are unique; that the active epoch is the log's current epoch or the
    /// one before (at most one pending operation); that every disk of the active and pending
    /// epochs has a record; that every record's state is the one the placement implies
    /// ([`StoreMeta::expected_state`]); that models are sane; and that owners are valid node
    /// names ([`validate_name`]).
    pub fn validate(&self) -> Result<(), CatalogError> {
        let invalid =
            |reason: String| CatalogError::Invalid { what: "store metadata".into(), reason };
        for (i, d) in self.disks.iter().enumerate() {
            if self.disks[..i].iter().any(|e| e.id == d.id) {
                return Err(invalid(format!("disk {} is listed twice", d.id)));
            }
        }
        let current = self.placement.current_epoch();
        if self.active_epoch > current || current.0 - self.active_epoch.0 > 1 {
            return Err(invalid(format!(
                "active epoch {} with the placement log at epoch {current}: at most one \
                 operation may be pending",
                self.active_epoch
            )));
        }
        let active = self.placement.disks(self.active_epoch);
        let pending = self.placement.disks(current);
        for &id in active.iter().chain(pending) {
            if self.disk(id).is_none() {
                return Err(invalid(format!("placement uses disk {id}, which has no record")));
            }
        }
        for d in &self.disks {
            let expected = self.expected_state(d.id);
            if d.state != expected {
                return Err(invalid(format!(
                    "disk {} is {:?}, but the placement log makes it {expected:?}",
                    d.id, d.state
                )));
            }
            if let Some(m) = d.model
                && m.rate == 0
            {
                return Err(invalid(format!("disk {}: emulation model with rate 0", d.id)));
            }
            if let Some(owner) = &d.owner
                && let Err(CatalogError::InvalidName { reason, .. }) = validate_name(owner)
            {
                return Err(invalid(format!(
                    "disk {}: owner {owner:?} is not a valid node name: {reason}",
                    d.id
                )));
            }
        }
        if self.replication == 0 || usize::from(self.replication) > MAX_REPLICAS {
            return Err(invalid(format!(
                "replication {} is not between 1 and {MAX_REPLICAS} (config key store.replication)",
                self.replication
            )));
        }
        Ok(())
    }

    /// The versioned encoding: [`STORE_META_VERSION`] then postcard.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        encode_versioned(STORE_META_VERSION, &wire::StoreMetaV4::from(self))
    }

    /// Decodes and validates an encoding from [`StoreMeta::encode`] of this or an earlier build.
    /// A version-1 record (before online scaling) has no pending operation (its active epoch is
    /// the log's current one) and no disk models; a version-1 or version-2 record (before
    /// clusters) has no disk owners; a record of version 1 to 3 (before replication) keeps one
    /// copy of every block.
    pub fn decode(bytes: &[u8]) -> Result<Self, CatalogError> {
        const WHAT: &str = "store metadata";
        let (version, body) = split_version(WHAT, STORE_META_VERSION, bytes)?;
        let meta = match version {
            1 => Self::try_from(decode_exact::<wire::StoreMetaV1>(WHAT, body)?)?,
            2 => Self::try_from(wire::StoreMetaV3::from(decode_exact::<wire::StoreMetaV2>(
                WHAT, body,
            )?))?,
            3 => Self::try_from(decode_exact::<wire::StoreMetaV3>(WHAT, body)?)?,
            _ => Self::try_from(decode_exact::<wire::StoreMetaV4>(WHAT, body)?)?,
        };
        meta.validate()?;
        Ok(meta)
    }
}

/// The disk holding block `index` of `rec` for readers: the placement at the active epoch, or at
/// the object's first epoch if that is later (an object ingested while a reorganisation is
/// pending is written where the pending epoch puts it, and stays there when the epoch flips).
#[must_use]
pub fn locate_active(meta: &StoreMeta, rec: &ObjectRecord, index: BlockIndex) -> DiskId {
    // `locate` answers an epoch before `first_epoch` for `first_epoch`: max(active, first).
    meta.placement.locate(rec.seed, rec.first_epoch, index, meta.active_epoch)
}

/// Every copy of block `index` of `rec` for readers, replica 0 ([`locate_active`]) first: the
/// copies at the active epoch, or at the object's first epoch if that is later.
#[must_use]
pub fn replicas_active(meta: &StoreMeta, rec: &ObjectRecord, index: BlockIndex) -> Replicas {
    meta.replicas_at(rec, index, meta.active_epoch)
}

/// Where objects and store metadata are kept: the embedded redb file on one node, etcd in a
/// cluster. All methods are atomic on their own.
pub trait Catalog {
    /// The store metadata.
    fn meta(&self) -> Result<StoreMeta, CatalogError>;
    /// Replaces the store metadata. `next_object_id` is never lowered: the stored counter is kept
    /// if it is ahead of `meta`'s (so a stale copy cannot cause id reuse).
    fn put_meta(&self, meta: &StoreMeta) -> Result<(), CatalogError>;
    /// Writes the store metadata only if there is none yet; [`CatalogError::AlreadyExists`]
    /// otherwise (two cluster nodes creating the store at once: one wins). The default suits a
    /// catalog with one writer (the embedded one is locked per process); a shared catalog
    /// makes it one compare-and-swap.
    fn create_meta(&self, meta: &StoreMeta) -> Result<(), CatalogError> {
        match self.meta() {
            Err(CatalogError::NoMeta { .. }) => self.put_meta(meta),
            Ok(_) => Err(CatalogError::AlreadyExists { path: PathBuf::from("store metadata") }),
            Err(e) => Err(e),
        }
    }
    /// Atomically reads the store metadata, applies `f` and writes the result, which is
    /// validated first; returns what was written. Several writers (cluster nodes) may change the
    /// metadata concurrently: none loses another's change. `f` sees the metadata as
    /// [`Catalog::meta`] reports it and may be called more than once (an implementation with
    /// optimistic concurrency calls it again on the newer metadata after a conflict), so it must
    /// not have effects beyond its argument. An error from `f` aborts the update and is returned.
    /// `next_object_id` is never lowered, as in [`Catalog::put_meta`]. Fails with
    /// [`CatalogError::NoMeta`] if there is no metadata yet.
    fn update_meta(
        &self,
        f: &mut dyn FnMut(&mut StoreMeta) -> Result<(), CatalogError>,
    ) -> Result<StoreMeta, CatalogError>;
    /// The object named `name`, if any.
    fn object(&self, name: &str) -> Result<Option<ObjectRecord>, CatalogError>;
    /// All objects, sorted by name.
    fn objects(&self) -> Result<Vec<ObjectRecord>, CatalogError>;
    /// Atomically allocates nothing: the caller allocated `rec.id` via `allocate_object_id`;
    /// fails if the name exists. The record is validated first.
    fn insert_object(&self, rec: &ObjectRecord) -> Result<(), CatalogError>;
    /// Commits `rec`, a record of an object that grows while it is recorded (a live feed, its
    /// blocks committed as they are written): inserted as [`Catalog::insert_object`] does while
    /// the name is free, else it replaces the record of the same id under that name, which must
    /// have no more blocks than `rec` (the same object, a longer prefix). The replacement is one
    /// transaction: a crash keeps one record or the other, never neither. Anything else under
    /// the name is [`CatalogError::NameExists`].
    fn grow_object(&self, rec: &ObjectRecord) -> Result<(), CatalogError>;
    /// Hands out a fresh object id from a durable counter; ids are never reused.
    fn allocate_object_id(&self) -> Result<ObjectId, CatalogError>;
    /// Removes the object named `name` and returns its record, if it existed.
    fn remove_object(&self, name: &str) -> Result<Option<ObjectRecord>, CatalogError>;
}

fn encode_versioned<T: Serialize>(version: u8, value: &T) -> Vec<u8> {
    // Serialising plain structs of integers, strings and vectors into a growable Vec cannot fail:
    // postcard's only serialisation errors are buffer exhaustion and unsupported types.
    postcard::to_extend(value, vec![version]).expect("postcard encoding into a Vec is infallible")
}

/// The version byte and the body of an encoded record, refusing versions this build cannot read.
fn split_version<'a>(
    what: &'static str,
    supported: u8,
    bytes: &'a [u8],
) -> Result<(u8, &'a [u8]), CatalogError> {
    let (&version, body) = bytes.split_first().ok_or(CatalogError::Empty { what })?;
    if version == 0 || version > supported {
        return Err(CatalogError::UnsupportedVersion { what, found: version, supported });
    }
    Ok((version, body))
}

fn decode_exact<'a, T: Deserialize<'a>>(
    what: &'static str,
    body: &'a [u8],
) -> Result<T, CatalogError> {
    let (value, rest) =
        postcard::take_from_bytes(body).map_err(|source| CatalogError::Decode { what, source })?;
    if !rest.is_empty() {
        return Err(CatalogError::TrailingBytes { what, count: rest.len() });
    }
    Ok(value)
}

/// The pinned wire structs. Never change a field of a written version: add a new version instead.
mod wire {
    use super::*;

    #[derive(Serialize, Deserialize)]
    pub(super) struct ObjectRecordV1 {
        id: u64,
        name: String,
        seed: u64,
        first_epoch: u32,
        block_size: u64,
        blocks: Vec<BlockEntryV1>,
        packets: u64,
        ts_bytes: u64,
        duration_ns: u64,
        avg_bitrate: u64,
        peak_bitrate: u64,
        seek_points: Vec<SeekPointV1>,
        streams: Vec<StreamDescV1>,
        source_file: String,
        created_unix_s: u64,
    }

    /// Version 2 (native tracks): version 1 followed by the container and tracks.
    #[derive(Serialize, Deserialize)]
    pub(super) struct ObjectRecordV2 {
        v1: ObjectRecordV1,
        media: Option<NativeMediaV2>,
    }

    #[derive(Serialize, Deserialize)]
    struct NativeMediaV2 {
        container: String,
        tracks: Vec<TrackDescV2>,
        seek_track_seqs: Vec<u32>,
        source_blocks: u32,
        source_bytes: u64,
        source_type: String,
    }

    #[derive(Serialize, Deserialize)]
    struct TrackDescV2 {
        kind: String,
        codec: String,
        encoding: String,
        clock_rate: u32,
        channels: u8,
        payload_type: u8,
        fmtp: String,
        config: Vec<u8>,
        packets: u64,
        width: u16,
        height: u16,
        language: String,
    }

    impl From<&ObjectRecord> for ObjectRecordV2 {
        fn from(r: &ObjectRecord) -> Self {
            Self {
                v1: ObjectRecordV1::from(r),
                media: r.media.as_ref().map(|m| NativeMediaV2 {
                    container: m.container.clone(),
                    tracks: m
                        .tracks
                        .iter()
                        .map(|t| TrackDescV2 {
                            kind: t.kind.clone(),
                            codec: t.codec.clone(),
                            encoding: t.encoding.clone(),
                            clock_rate: t.clock_rate,
                            channels: t.channels,
                            payload_type: t.payload_type,
                            fmtp: t.fmtp.clone(),
                            config: t.config.clone(),
                            packets: t.packets,
                            width: t.width,
                            height: t.height,
                            language: t.language.clone(),
                        })
                        .collect(),
                    seek_track_seqs: m.seek_track_seqs.clone(),
                    source_blocks: m.source_blocks,
                    source_bytes: m.source_bytes,
                    source_type: m.source_type.clone(),
                }),
            }
        }
    }

    impl From<ObjectRecordV2> for ObjectRecord {
        fn from(w: ObjectRecordV2) -> Self {
            let mut r = Self::from(w.v1);
            r.media = w.media.map(|m| NativeMedia {
                container: m.container,
                tracks: m
                    .tracks
                    .into_iter()
                    .map(|t| TrackDesc {
                        kind: t.kind,
                        codec: t.codec,
                        encoding: t.encoding,
                        clock_rate: t.clock_rate,
                        channels: t.channels,
                        payload_type: t.payload_type,
                        fmtp: t.fmtp,
                        config: t.config,
                        packets: t.packets,
                        width: t.width,
                        height: t.height,
                        language: t.language,
                    })
                    .collect(),
                seek_track_seqs: m.seek_track_seqs,
                source_blocks: m.source_blocks,
                source_bytes: m.source_bytes,
                source_type: m.source_type,
            });
            r
        }
    }

    #[derive(Serialize, Deserialize)]
    struct BlockEntryV1 {
        first_gsn: u64,
        first_send_ns: u64,
        packets: u32,
        payload_bytes: u32,
        encoded_len: u32,
        checksum: u64,
    }

    #[derive(Serialize, Deserialize)]
    struct SeekPointV1 {
        time_ns: u64,
        gsn: u64,
    }

    #[derive(Serialize, Deserialize)]
    struct StreamDescV1 {
        pid: u16,
        kind: String,
        codec: String,
    }

    #[derive(Serialize, Deserialize)]
    pub(super) struct StoreMetaV1 {
        store_id: u64,
        format_version: u32,
        block_size: u64,
        disks: Vec<DiskRecordV1>,
        placement: PlacementLogV1,
        next_object_id: u64,
    }

    #[derive(Serialize, Deserialize)]
    struct DiskRecordV1 {
        id: u16,
        /// The path's bytes (Unix: the raw `OsStr` bytes; elsewhere UTF-8).
        path: Vec<u8>,
        state: DiskStateV1,
    }

    #[derive(Serialize, Deserialize)]
    enum DiskStateV1 {
        Active,
        Joining,
        Draining,
        Retired,
    }

    #[derive(Serialize, Deserialize)]
    struct PlacementLogV1 {
        variant: PlacementVariantV1,
        initial: Vec<u16>,
        ops: Vec<ScaleOpV1>,
    }

    #[derive(Serialize, Deserialize)]
    enum PlacementVariantV1 {
        Hashed,
    }

    #[derive(Serialize, Deserialize)]
    enum ScaleOpV1 {
        Add(Vec<u16>),
        Remove(Vec<u16>),
    }

    /// Version 2 (online scaling): the active epoch, disk models, the Faithful variant.
    #[derive(Serialize, Deserialize)]
    pub(super) struct StoreMetaV2 {
        store_id: u64,
        format_version: u32,
        block_size: u64,
        disks: Vec<DiskRecordV2>,
        placement: PlacementLogV2,
        active_epoch: u32,
        next_object_id: u64,
    }

    #[derive(Serialize, Deserialize)]
    struct DiskRecordV2 {
        id: u16,
        /// The path's bytes (Unix: the raw `OsStr` bytes; elsewhere UTF-8).
        path: Vec<u8>,
        state: DiskStateV1,
        model: Option<DiskModelV2>,
    }

    #[derive(Serialize, Deserialize)]
    struct DiskModelV2 {
        mean_seek_ns: u64,
        /// Bytes per second; `u64::MAX` for unlimited.
        rate: u64,
    }

    #[derive(Serialize, Deserialize)]
    struct PlacementLogV2 {
        variant: PlacementVariantV2,
        initial: Vec<u16>,
        ops: Vec<ScaleOpV1>,
    }

    #[derive(Serialize, Deserialize)]
    enum PlacementVariantV2 {
        Hashed,
        Faithful,
    }

    /// Version 3 (clusters): each disk's owner node.
    #[derive(Serialize, Deserialize)]
    pub(super) struct StoreMetaV3 {
        store_id: u64,
        format_version: u32,
        block_size: u64,
        disks: Vec<DiskRecordV3>,
        placement: PlacementLogV2,
        active_epoch: u32,
        next_object_id: u64,
    }

    #[derive(Serialize, Deserialize)]
    struct DiskRecordV3 {
        id: u16,
        /// The path's bytes (Unix: the raw `OsStr` bytes; elsewhere UTF-8).
        path: Vec<u8>,
        state: DiskStateV1,
        model: Option<DiskModelV2>,
        owner: Option<String>,
    }

    /// Version 4 (replication): version 3 followed by the number of copies of every block.
    /// (Postcard writes a nested struct's fields in place, so this is version 3's bytes and
    /// one more field.)
    #[derive(Serialize, Deserialize)]
    pub(super) struct StoreMetaV4 {
        v3: StoreMetaV3,
        replication: u8,
    }

    impl From<&StoreMeta> for StoreMetaV4 {
        fn from(m: &StoreMeta) -> Self {
            Self { v3: StoreMetaV3::from(m), replication: m.replication }
        }
    }

    impl TryFrom<StoreMetaV4> for StoreMeta {
        type Error = CatalogError;

        fn try_from(w: StoreMetaV4) -> Result<Self, CatalogError> {
            let mut meta = Self::try_from(w.v3)?;
            meta.replication = w.replication;
            Ok(meta)
        }
    }

    impl From<&ObjectRecord> for ObjectRecordV1 {
        fn from(r: &ObjectRecord) -> Self {
            Self {
                id: r.id.0,
                name: r.name.clone(),
                seed: r.seed,
                first_epoch: r.first_epoch.0,
                block_size: r.block_size.0,
                blocks: r
                    .blocks
                    .iter()
                    .map(|b| BlockEntryV1 {
                        first_gsn: b.first_gsn.0,
                        first_send_ns: b.first_send_time.as_nanos(),
                        packets: b.packets,
                        payload_bytes: b.payload_bytes,
                        encoded_len: b.encoded_len,
                        checksum: b.checksum,
                    })
                    .collect(),
                packets: r.packets,
                ts_bytes: r.ts_bytes.0,
                duration_ns: r.duration.as_nanos(),
                avg_bitrate: r.avg_bitrate.0,
                peak_bitrate: r.peak_bitrate.0,
                seek_points: r
                    .seek_points
                    .iter()
                    .map(|s| SeekPointV1 { time_ns: s.time.as_nanos(), gsn: s.gsn.0 })
                    .collect(),
                streams: r
                    .streams
                    .iter()
                    .map(|s| StreamDescV1 {
                        pid: s.pid,
                        kind: s.kind.clone(),
                        codec: s.codec.clone(),
                    })
                    .collect(),
                source_file: r.source_file.clone(),
                created_unix_s: r.created_unix_s,
            }
        }
    }

    impl From<ObjectRecordV1> for ObjectRecord {
        fn from(w: ObjectRecordV1) -> Self {
            Self {
                id: ObjectId(w.id),
                name: w.name,
                seed: w.seed,
                first_epoch: Epoch(w.first_epoch),
                block_size: Bytes(w.block_size),
                blocks: w
                    .blocks
                    .into_iter()
                    .map(|b| BlockEntry {
                        first_gsn: Gsn(b.first_gsn),
                        first_send_time: MediaTime::from_nanos(b.first_send_ns),
                        packets: b.packets,
                        payload_bytes: b.payload_bytes,
                        encoded_len: b.encoded_len,
                        checksum: b.checksum,
                    })
                    .collect(),
                packets: w.packets,
                ts_bytes: Bytes(w.ts_bytes),
                duration: MediaTime::from_nanos(w.duration_ns),
                avg_bitrate: BitRate(w.avg_bitrate),
                peak_bitrate: BitRate(w.peak_bitrate),
                seek_points: w
                    .seek_points
                    .into_iter()
                    .map(|s| SeekPoint { time: MediaTime::from_nanos(s.time_ns), gsn: Gsn(s.gsn) })
                    .collect(),
                streams: w
                    .streams
                    .into_iter()
                    .map(|s| StreamDesc { pid: s.pid, kind: s.kind, codec: s.codec })
                    .collect(),
                source_file: w.source_file,
                created_unix_s: w.created_unix_s,
                media: None,
            }
        }
    }

    fn state_to_wire(s: DiskState) -> DiskStateV1 {
        match s {
            DiskState::Active => DiskStateV1::Active,
            DiskState::Joining => DiskStateV1::Joining,
            DiskState::Draining => DiskStateV1::Draining,
            DiskState::Retired => DiskStateV1::Retired,
        }
    }

    fn state_from_wire(s: DiskStateV1) -> DiskState {
        match s {
            DiskStateV1::Active => DiskState::Active,
            DiskStateV1::Joining => DiskState::Joining,
            DiskStateV1::Draining => DiskState::Draining,
            DiskStateV1::Retired => DiskState::Retired,
        }
    }

    fn ids(v: &[DiskId]) -> Vec<u16> {
        v.iter().map(|d| d.0).collect()
    }

    fn ops_to_wire(log: &PlacementLog) -> Vec<ScaleOpV1> {
        log.ops()
            .iter()
            .map(|op| match op {
                ScaleOp::Add { disks } => ScaleOpV1::Add(ids(disks)),
                ScaleOp::Remove { disks } => ScaleOpV1::Remove(ids(disks)),
            })
            .collect()
    }

    /// Rebuilds a log; replaying it through `push` re-checks every operation (and the Faithful
    /// budget, which is exact and so accepts what it accepted before).
    fn log_from_wire(
        variant: PlacementVariant,
        initial: Vec<u16>,
        ops: Vec<ScaleOpV1>,
    ) -> Result<PlacementLog, CatalogError> {
        let disks = |v: Vec<u16>| v.into_iter().map(DiskId).collect();
        let mut placement = PlacementLog::with_variant(disks(initial), variant)?;
        for op in ops {
            placement.push(match op {
                ScaleOpV1::Add(d) => ScaleOp::Add { disks: disks(d) },
                ScaleOpV1::Remove(d) => ScaleOp::Remove { disks: disks(d) },
            })?;
        }
        Ok(placement)
    }

    impl From<&StoreMeta> for StoreMetaV3 {
        fn from(m: &StoreMeta) -> Self {
            Self {
                store_id: m.store_id,
                format_version: m.format_version,
                block_size: m.block_size.0,
                disks: m
                    .disks
                    .iter()
                    .map(|d| DiskRecordV3 {
                        id: d.id.0,
                        path: path_to_bytes(&d.path),
                        state: state_to_wire(d.state),
                        model: d.model.map(|m| DiskModelV2 {
                            mean_seek_ns: u64::try_from(m.mean_seek.as_nanos()).unwrap_or(u64::MAX),
                            rate: m.rate,
                        }),
                        owner: d.owner.clone(),
                    })
                    .collect(),
                placement: PlacementLogV2 {
                    variant: match m.placement.variant() {
                        PlacementVariant::Hashed => PlacementVariantV2::Hashed,
                        PlacementVariant::Faithful => PlacementVariantV2::Faithful,
                    },
                    initial: ids(m.placement.initial()),
                    ops: ops_to_wire(&m.placement),
                },
                active_epoch: m.active_epoch.0,
                next_object_id: m.next_object_id,
            }
        }
    }

    impl TryFrom<StoreMetaV3> for StoreMeta {
        type Error = CatalogError;

        fn try_from(w: StoreMetaV3) -> Result<Self, CatalogError> {
            let variant = match w.placement.variant {
                PlacementVariantV2::Hashed => PlacementVariant::Hashed,
                PlacementVariantV2::Faithful => PlacementVariant::Faithful,
            };
            let placement = log_from_wire(variant, w.placement.initial, w.placement.ops)?;
            let mut disks = Vec::with_capacity(w.disks.len());
            for d in w.disks {
                disks.push(DiskRecord {
                    id: DiskId(d.id),
                    path: path_from_bytes(d.path)?,
                    state: state_from_wire(d.state),
                    model: d.model.map(|m| DiskModel {
                        mean_seek: Duration::from_nanos(m.mean_seek_ns),
                        rate: m.rate,
                    }),
                    owner: d.owner,
                });
            }
            Ok(Self {
                store_id: w.store_id,
                format_version: w.format_version,
                block_size: Bytes(w.block_size),
                disks,
                placement,
                active_epoch: Epoch(w.active_epoch),
                next_object_id: w.next_object_id,
                replication: 1,
            })
        }
    }

    /// A version-2 record is a version-3 one whose disks have no owner.
    impl From<StoreMetaV2> for StoreMetaV3 {
        fn from(w: StoreMetaV2) -> Self {
            Self {
                store_id: w.store_id,
                format_version: w.format_version,
                block_size: w.block_size,
                disks: w
                    .disks
                    .into_iter()
                    .map(|d| DiskRecordV3 {
                        id: d.id,
                        path: d.path,
                        state: d.state,
                        model: d.model,
                        owner: None,
                    })
                    .collect(),
                placement: w.placement,
                active_epoch: w.active_epoch,
                next_object_id: w.next_object_id,
            }
        }
    }

    /// The version-2 encoder, kept for the upgrade tests (this build writes version 3 only):
    /// version 3 without the owners.
    #[cfg(test)]
    impl From<&StoreMeta> for StoreMetaV2 {
        fn from(m: &StoreMeta) -> Self {
            let v3 = StoreMetaV3::from(m);
            Self {
                store_id: v3.store_id,
                format_version: v3.format_version,
                block_size: v3.block_size,
                disks: v3
                    .disks
                    .into_iter()
                    .map(|d| {
                        assert_eq!(d.owner, None, "v2 has no owners");
                        DiskRecordV2 { id: d.id, path: d.path, state: d.state, model: d.model }
                    })
                    .collect(),
                placement: v3.placement,
                active_epoch: v3.active_epoch,
                next_object_id: v3.next_object_id,
            }
        }
    }

    /// The version-1 encoder, kept for the upgrade tests (this build writes version 2 only).
    #[cfg(test)]
    impl From<&StoreMeta> for StoreMetaV1 {
        fn from(m: &StoreMeta) -> Self {
            assert_eq!(m.placement.variant(), PlacementVariant::Hashed, "v1 has only Hashed");
            Self {
                store_id: m.store_id,
                format_version: m.format_version,
                block_size: m.block_size.0,
                disks: m
                    .disks
                    .iter()
                    .map(|d| DiskRecordV1 {
                        id: d.id.0,
                        path: path_to_bytes(&d.path),
                        state: state_to_wire(d.state),
                    })
                    .collect(),
                placement: PlacementLogV1 {
                    variant: PlacementVariantV1::Hashed,
                    initial: ids(m.placement.initial()),
                    ops: ops_to_wire(&m.placement),
                },
                next_object_id: m.next_object_id,
            }
        }
    }

    impl TryFrom<StoreMetaV1> for StoreMeta {
        type Error = CatalogError;

        /// A version-1 record: no pending operation, no models.
        fn try_from(w: StoreMetaV1) -> Result<Self, CatalogError> {
            let variant = match w.placement.variant {
                PlacementVariantV1::Hashed => PlacementVariant::Hashed,
            };
            let placement = log_from_wire(variant, w.placement.initial, w.placement.ops)?;
            let mut disks = Vec::with_capacity(w.disks.len());
            for d in w.disks {
                disks.push(DiskRecord {
                    id: DiskId(d.id),
                    path: path_from_bytes(d.path)?,
                    state: state_from_wire(d.state),
                    model: None,
                    owner: None,
                });
            }
            Ok(Self {
                store_id: w.store_id,
                format_version: w.format_version,
                block_size: Bytes(w.block_size),
                disks,
                active_epoch: placement.current_epoch(),
                placement,
                next_object_id: w.next_object_id,
                replication: 1,
            })
        }
    }

    #[cfg(unix)]
    fn path_to_bytes(p: &Path) -> Vec<u8> {
        use std::os::unix::ffi::OsStrExt;
        p.as_os_str().as_bytes().to_vec()
    }

    #[cfg(unix)]
    fn path_from_bytes(b: Vec<u8>) -> Result<PathBuf, CatalogError> {
        use std::os::unix::ffi::OsStringExt;
        Ok(PathBuf::from(std::ffi::OsString::from_vec(b)))
    }

    #[cfg(not(unix))]
    fn path_to_bytes(p: &Path) -> Vec<u8> {
        p.to_string_lossy().into_owned().into_bytes()
    }

    #[cfg(not(unix))]
    fn path_from_bytes(b: Vec<u8>) -> Result<PathBuf, CatalogError> {
        String::from_utf8(b).map(PathBuf::from).map_err(|e| CatalogError::Invalid {
            what: "store metadata".into(),
            reason: format!("disk path is not UTF-8: {e}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_record() -> ObjectRecord {
        let blocks = (0..4u32)
            .map(|i| BlockEntry {
                first_gsn: Gsn(u64::from(i) * 700),
                first_send_time: MediaTime::from_nanos(u64::from(i) * 1_000_000_000),
                packets: 700,
                payload_bytes: 700 * 1316,
                encoded_len: 64 + 700 * (16 + 1316),
                checksum: 0x1234_5678 ^ u64::from(i),
            })
            .collect();
        ObjectRecord {
            id: ObjectId(42),
            name: "big_buck-bunny.ts".into(),
            seed: 0xFEED_FACE_CAFE_BEEF,
            first_epoch: Epoch(2),
            block_size: Bytes::mib(1),
            blocks,
            packets: 2800,
            ts_bytes: Bytes(2800 * 1316),
            duration: MediaTime::from_secs_f64(3.99),
            avg_bitrate: BitRate(5_300_000),
            peak_bitrate: BitRate(8_000_000),
            seek_points: vec![
                SeekPoint { time: MediaTime::ZERO, gsn: Gsn(0) },
                SeekPoint { time: MediaTime::from_secs_f64(1.0), gsn: Gsn(690) },
                SeekPoint { time: MediaTime::from_secs_f64(2.0), gsn: Gsn(1400) },
            ],
            streams: vec![
                StreamDesc { pid: 256, kind: "video".into(), codec: "h264".into() },
                StreamDesc { pid: 257, kind: "audio".into(), codec: "aac".into() },
            ],
            source_file: "/media/bbb.ts".into(),
            created_unix_s: 1_700_000_000,
            media: None,
        }
    }

    fn disk(id: u16, path: &str, state: DiskState) -> DiskRecord {
        DiskRecord { id: DiskId(id), path: path.into(), state, model: None, owner: None }
    }

    /// Disks 0, 1; +2; −0: disk 0 retired, 1 and 2 active; disk 2 emulated.
    fn sample_meta() -> StoreMeta {
        let mut placement = PlacementLog::new(vec![DiskId(0), DiskId(1)]).unwrap();
        placement.push(ScaleOp::Add { disks: vec![DiskId(2)] }).unwrap();
        placement.push(ScaleOp::Remove { disks: vec![DiskId(0)] }).unwrap();
        let mut d2 = disk(2, "rel/d2", DiskState::Active);
        d2.model = Some(DiskModel { mean_seek: Duration::from_micros(8_500), rate: 4 << 20 });
        StoreMeta {
            store_id: 0xABCD,
            format_version: STORE_FORMAT_VERSION,
            block_size: Bytes::mib(1),
            disks: vec![
                disk(0, "disk-0", DiskState::Retired),
                disk(1, "/mnt/d1", DiskState::Active),
                d2,
            ],
            placement,
            active_epoch: Epoch(2),
            next_object_id: 17,
            replication: 1,
        }
    }

    /// The same store with the removal of disk 0 still pending.
    fn pending_meta() -> StoreMeta {
        let mut meta = sample_meta();
        meta.active_epoch = Epoch(1);
        meta.disks[0].state = DiskState::Draining;
        meta
    }

    #[test]
    fn object_round_trip() {
        let rec = sample_record();
        let bytes = rec.encode();
        assert_eq!(bytes[0], 1, "MPEG-TS objects keep the version-1 encoding");
        assert_eq!(ObjectRecord::decode(&bytes).unwrap(), rec);
    }

    fn native_record() -> ObjectRecord {
        let mut rec = sample_record();
        let track = |kind: &str, codec: &str, packets| TrackDesc {
            kind: kind.into(),
            codec: codec.into(),
            encoding: "H264".into(),
            clock_rate: 90_000,
            channels: 0,
            payload_type: 96,
            fmtp: "packetization-mode=1".into(),
            config: vec![1, 0x64, 0, 0x1f],
            packets,
            width: 1920,
            height: 1080,
            language: "und".into(),
        };
        rec.media = Some(NativeMedia {
            container: "mp4".into(),
            tracks: vec![track("video", "h264", 2000), track("audio", "aac", 800)],
            seek_track_seqs: vec![0, 0, 500, 190, 1000, 400],
            source_blocks: 1,
            source_bytes: 1000,
            source_type: "video/mp4".into(),
        });
        // The source's block after the packets' (which tile GSNs 0..2800).
        rec.blocks.push(BlockEntry {
            first_gsn: Gsn(2800),
            first_send_time: MediaTime::ZERO,
            packets: 0,
            payload_bytes: 1000,
            encoded_len: 1064,
            checksum: 7,
        });
        rec
    }

    /// A native object's record (version 2) round-trips, begins with version 1's fields, and
    /// refuses track tables that do not fit its packets and seek points.
    #[test]
    fn native_record_round_trip_and_validation() {
        let rec = native_record();
        let bytes = rec.encode();
        assert_eq!(bytes[0], 2);
        let v1 = ObjectRecord { media: None, ..native_record() };
        let v1 = encode_versioned(1, &wire::ObjectRecordV1::from(&v1));
        assert_eq!(&bytes[1..v1.len()], &v1[1..], "version 1's fields come first");
        let back = ObjectRecord::decode(&bytes).unwrap();
        assert_eq!(back, rec);
        assert_eq!(back.track_count(), 2);
        assert_eq!(back.media.as_ref().unwrap().track_seqs_at(1), Some(&[500, 190][..]));
        assert_eq!(back.media.as_ref().unwrap().track_seqs_at(3), None);
        assert_eq!(sample_record().track_count(), 1);
        assert_eq!(back.media_blocks().len(), 4);
        assert_eq!(back.source_blocks(), (4, &back.blocks[4..]));
        assert_eq!(sample_record().source_blocks(), (0, &sample_record().blocks[..]));
        let mut bad = native_record();
        bad.media.as_mut().unwrap().source_bytes = 999;
        let err = ObjectRecord::decode(&bad.encode()).unwrap_err().to_string();
        assert!(err.contains("source blocks hold 1000 bytes"), "{err}");

        let mut bad = native_record();
        bad.media.as_mut().unwrap().seek_track_seqs.pop();
        let err = ObjectRecord::decode(&bad.encode()).unwrap_err().to_string();
        assert!(err.contains("seek track positions"), "{err}");
        let mut bad = native_record();
        bad.media.as_mut().unwrap().tracks[0].packets += 1;
        let err = ObjectRecord::decode(&bad.encode()).unwrap_err().to_string();
        assert!(err.contains("tracks hold 2801 packets"), "{err}");
        let mut bad = native_record();
        bad.media.as_mut().unwrap().tracks.clear();
        bad.media.as_mut().unwrap().seek_track_seqs.clear();
        assert!(ObjectRecord::decode(&bad.encode()).is_err());
    }

    #[test]
    fn meta_round_trip() {
        for meta in [sample_meta(), pending_meta()] {
            let bytes = meta.encode();
            assert_eq!(bytes[0], STORE_META_VERSION);
            assert_eq!(bytes[0], 4);
            let back = StoreMeta::decode(&bytes).unwrap();
            assert_eq!(back, meta);
            assert_eq!(back.placement.current_epoch(), Epoch(2));
            assert_eq!(back.disk(DiskId(1)).unwrap().path, PathBuf::from("/mnt/d1"));
            assert_eq!(back.disk(DiskId(2)).unwrap().model, meta.disks[2].model);
        }
        // The Faithful variant round-trips too.
        let mut meta = sample_meta();
        let mut log =
            PlacementLog::with_variant(vec![DiskId(0), DiskId(1)], PlacementVariant::Faithful)
                .unwrap();
        for op in meta.placement.ops() {
            log.push(op.clone()).unwrap();
        }
        meta.placement = log;
        let back = StoreMeta::decode(&meta.encode()).unwrap();
        assert_eq!(back.placement.variant(), PlacementVariant::Faithful);
        assert_eq!(back, meta);
    }

    /// A record written before online scaling (version 1) decodes: no pending operation, no
    /// models, no owners; re-encoding writes version 3.
    #[test]
    fn meta_v1_upgrades() {
        let mut meta = sample_meta();
        meta.disks[2].model = None;
        let v1 = encode_versioned(1, &wire::StoreMetaV1::from(&meta));
        assert_eq!(v1[0], 1);
        let back = StoreMeta::decode(&v1).unwrap();
        assert_eq!(back, meta);
        assert_eq!(back.active_epoch, back.placement.current_epoch());
        assert_eq!(back.pending(), None);
        assert!(back.disks.iter().all(|d| d.model.is_none()));
        let v4 = back.encode();
        assert_eq!(v4[0], 4);
        assert_eq!(StoreMeta::decode(&v4).unwrap(), meta);
        // The bytes of version 1 are pinned: a store written before online scaling.
        let golden: &[u8] = &[
            1, 205, 215, 2, 1, 128, 128, 64, 3, 0, 6, 100, 105, 115, 107, 45, 48, 3, 1, 7, 47, 109,
            110, 116, 47, 100, 49, 0, 2, 6, 114, 101, 108, 47, 100, 50, 0, 0, 2, 0, 1, 2, 0, 1, 2,
            1, 1, 0, 17,
        ];
        assert_eq!(v1, golden, "{v1:?}");
    }

    /// A record written before clusters (version 2) decodes with no owners; re-encoding writes
    /// version 3.
    #[test]
    fn meta_v2_upgrades() {
        for meta in [sample_meta(), pending_meta()] {
            let v2 = encode_versioned(2, &wire::StoreMetaV2::from(&meta));
            let back = StoreMeta::decode(&v2).unwrap();
            assert_eq!(back, meta);
            assert!(back.disks.iter().all(|d| d.owner.is_none()));
            assert_eq!(back.encode()[0], 4);
        }
        // The bytes of version 2 are pinned: a store written before clusters.
        let golden: &[u8] = &[
            2, 205, 215, 2, 1, 128, 128, 64, 3, 0, 6, 100, 105, 115, 107, 45, 48, 3, 0, 1, 7, 47,
            109, 110, 116, 47, 100, 49, 0, 0, 2, 6, 114, 101, 108, 47, 100, 50, 0, 1, 160, 230,
            134, 4, 128, 128, 128, 2, 0, 2, 0, 1, 2, 0, 1, 2, 1, 1, 0, 2, 17,
        ];
        assert_eq!(encode_versioned(2, &wire::StoreMetaV2::from(&sample_meta())), golden);
        assert_eq!(StoreMeta::decode(golden).unwrap(), sample_meta());
    }

    /// Version 3 keeps each disk's owner; an owner must be a valid node name.
    #[test]
    fn meta_owners() {
        let mut meta = sample_meta();
        meta.disks[1].owner = Some("node-a".into());
        meta.disks[2].owner = Some("node.b_2".into());
        let bytes = meta.encode();
        assert_eq!(bytes[0], 4);
        let back = StoreMeta::decode(&bytes).unwrap();
        assert_eq!(back, meta);
        assert_eq!(back.disks[2].owner.as_deref(), Some("node.b_2"));
        assert_eq!(back.disks[0].owner, None);
        for bad in ["", "a/b", "..", "node a"] {
            meta.disks[1].owner = Some(bad.into());
            let err = meta.validate().unwrap_err().to_string();
            assert!(err.contains("is not a valid node name"), "{bad:?}: {err}");
            assert!(StoreMeta::decode(&meta.encode()).is_err(), "{bad:?}");
        }
    }

    /// A record written before replication (version 3) decodes with one copy per block; version
    /// 4 is version 3's bytes followed by the replication.
    #[test]
    fn meta_v3_upgrades_to_one_copy() {
        let mut meta = sample_meta();
        meta.disks[1].owner = Some("node-a".into());
        let v3 = encode_versioned(3, &wire::StoreMetaV3::from(&meta));
        let back = StoreMeta::decode(&v3).unwrap();
        assert_eq!(back.replication, 1);
        assert_eq!(back, meta);
        let v4 = back.encode();
        assert_eq!(v4[0], 4);
        assert_eq!(&v4[1..v4.len() - 1], &v3[1..], "version 3's fields, then one byte");
        assert_eq!(v4[v4.len() - 1], 1);
    }

    /// The replication round-trips; 0 and more than `MAX_REPLICAS` are refused, naming the key.
    #[test]
    fn meta_replication() {
        let mut meta = sample_meta();
        meta.replication = 2;
        let back = StoreMeta::decode(&meta.encode()).unwrap();
        assert_eq!(back.replication, 2);
        assert_eq!(back, meta);
        for bad in [0, MAX_REPLICAS as u8 + 1] {
            meta.replication = bad;
            let err = meta.validate().unwrap_err().to_string();
            assert!(err.contains("store.replication"), "{err}");
            assert!(StoreMeta::decode(&meta.encode()).is_err());
        }
    }

    /// Replica 0 is `locate_active`; K copies on distinct disks; disks of one owner are one
    /// node, and with two owners the two copies are on both.
    #[test]
    fn replicas_follow_placement_and_owners() {
        let mut meta = sample_meta();
        let rec = sample_record();
        assert_eq!(
            replicas_active(&meta, &rec, BlockIndex(0)),
            Replicas::single(locate_active(&meta, &rec, BlockIndex(0)))
        );
        meta.replication = 2;
        for i in 0..100 {
            let i = BlockIndex(i);
            let r = replicas_active(&meta, &rec, i);
            assert_eq!(r.primary(), locate_active(&meta, &rec, i));
            assert_eq!(r.len(), 2);
            // Active epoch 2: disks 1 and 2, so both hold every block.
            assert!(r.contains(DiskId(1)) && r.contains(DiskId(2)), "{r:?}");
        }
        assert_eq!(meta.nodes_in(Epoch(2)), 1);
        meta.disks[1].owner = Some("a".into());
        meta.disks[2].owner = Some("b".into());
        assert_ne!(meta.node_of(DiskId(1)), meta.node_of(DiskId(2)));
        assert_eq!(meta.nodes_in(Epoch(2)), 2);
    }

    #[test]
    fn pending_and_states() {
        let meta = sample_meta();
        assert_eq!(meta.pending(), None);
        let pending = pending_meta();
        assert_eq!(pending.pending(), Some((Epoch(1), Epoch(2))));
        assert_eq!(pending.expected_state(DiskId(0)), DiskState::Draining);
        assert_eq!(pending.expected_state(DiskId(2)), DiskState::Active);
        assert_eq!(meta.expected_state(DiskId(0)), DiskState::Retired);
        assert_eq!(meta.expected_state(DiskId(9)), DiskState::Retired);
        assert_eq!(meta.next_disk_id(), Some(DiskId(3)));
        // A pending addition: the new disk is joining.
        let mut add = sample_meta();
        add.placement.push(ScaleOp::Add { disks: vec![DiskId(3)] }).unwrap();
        add.disks.push(disk(3, "d3", DiskState::Joining));
        add.validate().unwrap();
        assert_eq!(add.pending(), Some((Epoch(2), Epoch(3))));
        assert_eq!(add.next_disk_id(), Some(DiskId(4)));
        // Two operations ahead is refused.
        let mut two = add.clone();
        two.active_epoch = Epoch(1);
        let err = two.validate().unwrap_err();
        assert!(err.to_string().contains("at most one operation may be pending"), "{err}");
        // A state that contradicts the log is refused.
        let mut wrong = add;
        wrong.disks[3].state = DiskState::Active;
        let err = wrong.validate().unwrap_err();
        assert!(
            err.to_string().contains("disk 3 is Active, but the placement log makes it Joining"),
            "{err}"
        );
        // Active epoch beyond the log.
        let mut ahead = sample_meta();
        ahead.active_epoch = Epoch(3);
        assert!(ahead.validate().is_err());
    }

    #[test]
    fn locate_active_uses_the_later_of_active_and_first_epoch() {
        let meta = pending_meta();
        let mut rec = sample_record();
        for first in 0..=2 {
            rec.first_epoch = Epoch(first);
            for i in 0..200 {
                let i = BlockIndex(i);
                let want = meta.placement.locate(rec.seed, rec.first_epoch, i, Epoch(first.max(1)));
                assert_eq!(locate_active(&meta, &rec, i), want);
            }
        }
        // With the operation pending, blocks of old objects are still found on disk 0.
        rec.first_epoch = Epoch(0);
        assert!((0..200).any(|i| locate_active(&meta, &rec, BlockIndex(i)) == DiskId(0)));
        let flipped = sample_meta();
        assert!((0..200).all(|i| locate_active(&flipped, &rec, BlockIndex(i)) != DiskId(0)));
    }

    #[test]
    fn disk_specs() {
        let parse = DiskModel::parse_spec;
        assert_eq!(parse("/mnt/a").unwrap(), (PathBuf::from("/mnt/a"), None));
        let (path, model) = parse("/mnt/a,seek_ms=10,rate_mib_s=4").unwrap();
        assert_eq!(path, PathBuf::from("/mnt/a"));
        let m = model.unwrap();
        assert_eq!(m, DiskModel { mean_seek: Duration::from_millis(10), rate: 4 << 20 });
        assert_eq!(m.to_string(), "seek_ms=10,rate_mib_s=4");
        let (_, m) = parse("d,rate_mib_s=60").unwrap();
        let m = m.unwrap();
        assert_eq!((m.mean_seek, m.rate), (Duration::ZERO, 60 << 20));
        assert_eq!(m.to_string(), "rate_mib_s=60");
        let (_, m) = parse("d, seek_ms = 2.5").unwrap();
        let m = m.unwrap();
        assert_eq!((m.mean_seek, m.rate), (Duration::from_micros(2500), DiskModel::UNLIMITED_RATE));
        assert_eq!(m.to_string(), "seek_ms=2.5");
        let spec: DiskSpec = "rel/x,seek_ms=0.25,rate_mib_s=1.5".parse().unwrap();
        assert_eq!(spec.to_string(), "rel/x,seek_ms=0.25,rate_mib_s=1.5");
        assert_eq!(DiskSpec::from(PathBuf::from("p")).to_string(), "p");
        let zero = DiskModel { mean_seek: Duration::ZERO, rate: DiskModel::UNLIMITED_RATE };
        assert_eq!(zero.to_string(), "seek_ms=0");

        let err = |s: &str| parse(s).unwrap_err().to_string();
        assert!(err("").contains("the path is empty"));
        assert!(err(",seek_ms=1").contains("the path is empty"));
        assert!(err("d,speed=3").contains("unknown key \"speed\""), "{}", err("d,speed=3"));
        assert!(err("d,seek_ms=fast").contains("seek_ms=\"fast\": not a number"));
        assert!(err("d,seek_ms=-1").contains("seek_ms=\"-1\""));
        assert!(err("d,seek_ms=NaN").contains("not a number"));
        assert!(err("d,rate_mib_s=0").contains("rate_mib_s=\"0\": must be positive"));
        assert!(err("d,rate_mib_s=inf").contains("not a number"));
        assert!(err("d,seek_ms=1,seek_ms=2").contains("seek_ms is given twice"));
        assert!(err("d,").contains("is not key=value"));
        assert!(err("d,seek_ms").contains("\"seek_ms\" is not key=value"));
    }

    proptest::proptest! {
        /// Display gives back a spec that parses to the same model.
        #[test]
        fn disk_model_display_round_trips(ns in 0u64..10_000_000_000, rate in 1u64..(1 << 40), seek: bool, limited: bool) {
            let m = DiskModel {
                mean_seek: if seek { Duration::from_nanos(ns) } else { Duration::ZERO },
                rate: if limited { rate } else { DiskModel::UNLIMITED_RATE },
            };
            let spec = format!("p,{m}");
            let (_, back) = DiskModel::parse_spec(&spec).unwrap();
            proptest::prop_assert_eq!(back, Some(m), "{}", spec);
        }
    }

    /// The latency density of Gennart et al.: mean m, standard deviation m/√2, support [0, 3m].
    #[test]
    fn disk_model_latency_distribution() {
        let m = DiskModel { mean_seek: Duration::from_millis(10), rate: 4 << 20 };
        let mut rng = isochron_base::mix::SplitMix64::new(1);
        let n = 200_000;
        let (mut sum, mut sum2, mut max) = (0.0, 0.0, 0.0f64);
        for _ in 0..n {
            let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
            let t = m.latency(u).as_secs_f64() * 1e3;
            sum += t;
            sum2 += t * t;
            max = max.max(t);
        }
        let mean = sum / f64::from(n);
        let sd = (sum2 / f64::from(n) - mean * mean).sqrt();
        assert!((mean - 10.0).abs() < 0.1, "mean {mean}");
        assert!((sd - 10.0 / 2f64.sqrt()).abs() < 0.1, "sd {sd}");
        assert!(max <= 30.0);
        assert_eq!(m.latency(0.0), Duration::ZERO);
        assert_eq!(m.latency(1.0), Duration::from_millis(30));
        assert_eq!(m.transfer(4 << 20), Duration::from_secs(1));
        assert_eq!(m.service_time(2 << 20, 0.0), Duration::from_millis(500));
        let fast = DiskModel { mean_seek: Duration::ZERO, rate: DiskModel::UNLIMITED_RATE };
        assert_eq!(fast.transfer(u64::MAX), Duration::ZERO);
    }

    #[test]
    fn decode_rejects_bad_bytes_cleanly() {
        let bytes = sample_record().encode();
        assert!(matches!(ObjectRecord::decode(&[]), Err(CatalogError::Empty { .. })));
        for cut in 1..bytes.len() {
            assert!(ObjectRecord::decode(&bytes[..cut]).is_err(), "truncated at {cut}");
        }
        let mut newer = bytes.clone();
        newer[0] = OBJECT_RECORD_VERSION + 1;
        let err = ObjectRecord::decode(&newer).unwrap_err();
        assert!(matches!(err, CatalogError::UnsupportedVersion { found: 3, supported: 2, .. }));
        assert!(err.to_string().contains("upgrade"), "{err}");
        let mut trailing = bytes;
        trailing.push(0);
        assert!(matches!(
            ObjectRecord::decode(&trailing),
            Err(CatalogError::TrailingBytes { count: 1, .. })
        ));
        let mut rng = isochron_base::mix::SplitMix64::new(9);
        for _ in 0..2_000 {
            let len = (rng.next_u64() % 200) as usize;
            let garbage: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            let _ = ObjectRecord::decode(&garbage);
            let _ = StoreMeta::decode(&garbage);
        }
        let meta = sample_meta().encode();
        for cut in 0..meta.len() {
            assert!(StoreMeta::decode(&meta[..cut]).is_err(), "truncated at {cut}");
        }
    }

    #[test]
    fn decode_stored_checks_the_name() {
        let bytes = sample_record().encode();
        assert_eq!(
            ObjectRecord::decode_stored("big_buck-bunny.ts", &bytes).unwrap(),
            sample_record()
        );
        let err = ObjectRecord::decode_stored("other.ts", &bytes).unwrap_err().to_string();
        assert!(
            err.contains("object \"other.ts\": record is named \"big_buck-bunny.ts\""),
            "{err}"
        );
        let err = ObjectRecord::decode_stored("x.ts", &bytes[..9]).unwrap_err().to_string();
        assert!(err.starts_with("object \"x.ts\": object record: cannot decode"), "{err}");
    }

    #[test]
    fn decode_validates() {
        let mut rec = sample_record();
        rec.blocks[2].first_gsn = Gsn(1401);
        let err = ObjectRecord::decode(&rec.encode()).unwrap_err();
        assert!(err.to_string().contains("block 2 starts at GSN 1401"), "{err}");
        let mut rec = sample_record();
        rec.name = "../etc".into();
        assert!(matches!(
            ObjectRecord::decode(&rec.encode()),
            Err(CatalogError::InvalidName { .. })
        ));
        let mut meta = sample_meta();
        meta.disks.remove(1);
        let err = StoreMeta::decode(&meta.encode()).unwrap_err();
        assert!(err.to_string().contains("disk 1, which has no record"), "{err}");
        let mut meta = sample_meta();
        meta.disks[2].state = DiskState::Draining;
        let err = StoreMeta::decode(&meta.encode()).unwrap_err();
        assert!(err.to_string().contains("disk 2 is Draining"), "{err}");
    }

    #[test]
    fn entry_from_header() {
        let h = BlockHeader {
            key: isochron_base::BlockKey::new(ObjectId(1), BlockIndex(2)),
            first_gsn: Gsn(3),
            first_send_time: MediaTime::from_nanos(4),
            packet_count: 5,
            payload_len: 6,
            encoded_len: 7,
            checksum: 8,
        };
        let e = BlockEntry::from(&h);
        assert_eq!((e.first_gsn, e.first_send_time), (Gsn(3), MediaTime::from_nanos(4)));
        assert_eq!((e.packets, e.payload_bytes, e.encoded_len, e.checksum), (5, 6, 7, 8));
    }

    #[test]
    fn block_of_and_seek() {
        let rec = sample_record();
        assert_eq!(rec.block_of(Gsn(0)), Some(BlockIndex(0)));
        assert_eq!(rec.block_of(Gsn(699)), Some(BlockIndex(0)));
        assert_eq!(rec.block_of(Gsn(700)), Some(BlockIndex(1)));
        assert_eq!(rec.block_of(Gsn(2799)), Some(BlockIndex(3)));
        assert_eq!(rec.block_of(Gsn(2800)), None);
        assert_eq!(rec.block_count(), 4);
        assert_eq!(rec.seek(MediaTime::ZERO).gsn, Gsn(0));
        assert_eq!(rec.seek(MediaTime::from_secs_f64(0.99)).gsn, Gsn(0));
        assert_eq!(rec.seek(MediaTime::from_secs_f64(1.0)).gsn, Gsn(690));
        assert_eq!(rec.seek(MediaTime::from_secs_f64(99.0)).gsn, Gsn(1400));
        // Units sent at the same instant: the earliest starts (ffmpeg's SDT before the PAT).
        let mut same = rec.clone();
        same.seek_points.insert(1, SeekPoint { time: MediaTime::ZERO, gsn: Gsn(1) });
        same.seek_points.insert(3, SeekPoint { time: same.seek_points[2].time, gsn: Gsn(691) });
        assert_eq!(same.seek(MediaTime::ZERO).gsn, Gsn(0));
        assert_eq!(same.seek(MediaTime::from_secs_f64(0.5)).gsn, Gsn(0));
        assert_eq!(same.seek(MediaTime::from_secs_f64(1.5)).gsn, Gsn(690));
        let mut late = rec;
        late.seek_points.remove(0);
        assert_eq!(late.seek(MediaTime::ZERO).gsn, Gsn(690), "t before all seek points");
        late.seek_points.clear();
        assert_eq!(late.seek(MediaTime::from_secs_f64(5.0)), SeekPoint::default());
    }

    #[test]
    fn names() {
        for ok in ["a", "movie.ts", "A-b_c.9", &"x".repeat(128), "..."] {
            assert!(validate_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", ".", "..", "a b", "a/b", "é", &"x".repeat(129), "a\0"] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
        let msg = validate_name("my movie").unwrap_err().to_string();
        assert!(msg.contains("' ' at byte 2"), "{msg}");
        for ok in ["movie~720p", "a.b~240p"] {
            assert!(validate_name(ok).is_ok(), "{ok}");
            assert!(validate_title(ok).is_err(), "{ok}");
        }
        for bad in ["~720p", "movie~", "movie~72 0p", "movie~720P", "a~b~c", "..~720p"] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
        assert_eq!(split_rendition("movie~720p"), Some(("movie", "720p")));
        assert_eq!(split_rendition("movie"), None);
        assert_eq!(rendition_name("movie", "720p"), "movie~720p");
        assert_eq!((title_of("movie~720p"), title_of("movie")), ("movie", "movie"));
        assert!(is_rendition_of("movie~720p", "movie") && !is_rendition_of("movie", "movie"));
        assert!(!is_rendition_of("movie.v2~720p", "movie"));
    }
}
