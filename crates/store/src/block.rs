//! The on-disk block format (`docs/design/block-format.md`).
//!
//! Why: a block is the unit of placement, IO and caching. It carries whole RTP payload units
//! ("packets": runs of 1..=7 MPEG-TS packets) of one object plus everything needed to send them —
//! each packet's send time, its global sequence number (implied by the block's first GSN) and its
//! flags — so any node holding a block can stream it with no help from the catalog or the other
//! nodes (Yima's bipartite fan-out). Concatenating the payloads of all blocks of an object in order
//! gives the original file byte for byte. A checksum is verified on every read: a flipped bit on
//! a disk becomes a clear error naming the block instead of garbage on the wire.
//!
//! This module only encodes and decodes bytes; reading and writing files is `isochron-diskio`'s.
//!
//! # Layout (version 1, all integers little-endian)
//!
//! ```text
//! offset size  field
//!  0     8     magic          "ISOCHBLK"
//!  8     2     version        1
//! 10     2     header_len     64   (readers accept larger and skip the rest)
//! 12     2     entry_len      16   (readers accept larger and skip the rest)
//! 14     2     flags          0    (no flags defined; readers reject unknown bits)
//! 16     8     object         ObjectId
//! 24     4     index          BlockIndex
//! 28     4     packet_count   number of entries
//! 32     8     first_gsn      Gsn of entry 0
//! 40     8     first_send_ns  send time of entry 0 (0 when the block is empty)
//! 48     4     payload_len    bytes of payload
//! 52     4     encoded_len    header_len + packet_count*entry_len + payload_len (unpadded)
//! 56     8     checksum       xxh3-64 of bytes [0, encoded_len) with this field zeroed
//! 64           entries        packet_count × entry_len bytes:
//!                               0 u64 send_ns      absolute MediaTime of the packet
//!                               8 u32 payload_off  offset in the payload
//!                              12 u8  ts_packets   1..=7
//!                              13 u8  flags        bit0 random_access, bit1 discontinuity
//!                              14 u16 reserved     0
//! ...          payload        packets' bytes, back to back, in entry order
//! encoded_len  padding        zeros up to a multiple of BLOCK_ALIGN (not checksummed)
//! ```
//!
//! Payloads are contiguous: entry 0 starts at offset 0 and each entry starts where the previous
//! one ends, so `payload_len` is the sum of the packets' sizes. The parser checks this once, after
//! which [`Block::packet`] is O(1) and cannot go out of bounds.
//!
//! # Version 2: native RTP payloads of several tracks
//!
//! An object ingested from MP4 or Matroska is stored as the RTP payloads of its tracks (H.264
//! RFC 6184, H.265 RFC 7798, AAC RFC 3640, Opus RFC 7587), interleaved in send order. Such a
//! block is written as version 2: the same header (`version` 2, `entry_len` 24), and entries that
//! say which track a packet belongs to, its RTP timestamp and its place in its track:
//!
//! ```text
//!  0 u64 send_ns      absolute MediaTime of the packet
//!  8 u32 payload_off  offset in the payload
//! 12 u16 payload_len  the packet's bytes (1..=65535)
//! 14 u8  track        the track's index in the object (0..MAX_TRACKS)
//! 15 u8  flags        bit0 random_access, bit1 discontinuity, bit2 marker
//! 16 u32 rtp_time     RTP timestamp on the track's clock, before the session's offset
//! 20 u32 track_seq    the packet's index among its track's packets (mod 2^32)
//! ```
//!
//! # Version 3: the source file's bytes
//!
//! An object ingested from MP4 or Matroska also keeps the file it came from, byte for byte, so
//! that HTTP serves the original (`<video src>`, progressive download with byte ranges). Those
//! bytes go in version-3 blocks after the object's packet blocks: the same header with no
//! entries (`packet_count` 0, `entry_len` 24) and the bytes as the payload. They are placed,
//! replicated, checked and moved like any block, and never streamed.
//!
//! Version-1 blocks (MPEG-TS objects) keep being written and read as they were: their packets are
//! track 0, their `track_seq` is the GSN, their RTP timestamp derives from the send time (RFC 2250
//! §2) and their marker is the discontinuity flag.

use std::fmt;

use isochron_base::{BlockIndex, BlockKey, Bytes, Gsn, MediaTime, ObjectId};
use xxhash_rust::xxh3::Xxh3Default;

/// Alignment of encoded blocks (and of the block size): the O_DIRECT alignment.
pub const BLOCK_ALIGN: usize = 4096;
/// The block file magic.
pub const BLOCK_MAGIC: [u8; 8] = *b"ISOCHBLK";
/// The version of the layout written by [`BlockBuilder::new`] (MPEG-TS packets).
pub const BLOCK_FORMAT_VERSION: u16 = 1;
/// The version of the layout written by [`BlockBuilder::new_native`] (RTP payloads of tracks).
pub const BLOCK_FORMAT_VERSION_NATIVE: u16 = 2;
/// The version of the layout written by [`BlockBuilder::new_raw`] (a source file's bytes).
pub const BLOCK_FORMAT_VERSION_RAW: u16 = 3;
/// Length of a version-2 packet entry.
pub const ENTRY_LEN_NATIVE: usize = 24;
/// The most tracks an object may have (a track index is below it).
pub use isochron_base::MAX_TRACKS;
/// Length of the version-1 header.
pub const HEADER_LEN: usize = 64;
/// Length of a version-1 packet entry.
pub const ENTRY_LEN: usize = 16;
/// Size of one MPEG-TS packet.
pub const TS_PACKET_LEN: usize = 188;
/// Most TS packets in one RTP payload unit (RFC 2250 practice: 7 × 188 = 1316 bytes).
pub const MAX_TS_PER_PACKET: u8 = 7;
/// Smallest block size: one alignment unit.
pub const MIN_BLOCK_SIZE: Bytes = Bytes(BLOCK_ALIGN as u64);
/// Largest block size: lengths are stored as `u32`, so 2 GiB is a round bound below that.
pub const MAX_BLOCK_SIZE: Bytes = Bytes(1 << 31);

const ENTRY_RANDOM_ACCESS: u8 = 1 << 0;
const ENTRY_DISCONTINUITY: u8 = 1 << 1;
const ENTRY_MARKER: u8 = 1 << 2;
const CHECKSUM_OFF: usize = 56;
/// Where the header keeps `encoded_len`.
const ENCODED_LEN_OFF: usize = 52;

/// Why a block size is unusable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("block size {size} ({} bytes) must be a multiple of {BLOCK_ALIGN} between {MIN_BLOCK_SIZE} and {MAX_BLOCK_SIZE}", size.0)]
pub struct BlockSizeError {
    /// The rejected size.
    pub size: Bytes,
}

/// Checks that `size` is a usable block size: a multiple of [`BLOCK_ALIGN`] within
/// [`MIN_BLOCK_SIZE`]..=[`MAX_BLOCK_SIZE`].
pub fn validate_block_size(size: Bytes) -> Result<(), BlockSizeError> {
    if size < MIN_BLOCK_SIZE || size > MAX_BLOCK_SIZE || !size.0.is_multiple_of(BLOCK_ALIGN as u64)
    {
        return Err(BlockSizeError { size });
    }
    Ok(())
}

/// What the ingest pipeline knows about one packet when it adds it to a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketMeta {
    /// When the packet is due on the wire, on the object's timeline.
    pub send_time: MediaTime,
    /// Number of 188-byte TS packets in the payload (1..=7).
    pub ts_packets: u8,
    /// The packet starts a random-access point (a seek can start here).
    pub random_access: bool,
    /// The packet follows a timing discontinuity.
    pub discontinuity: bool,
}

/// What the ingest pipeline knows about one native RTP payload (block version 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NativeMeta {
    /// When the packet is due on the wire, on the object's timeline.
    pub send_time: MediaTime,
    /// The track it belongs to (below [`MAX_TRACKS`]).
    pub track: u8,
    /// Its RTP timestamp on the track's clock, before the session's random offset.
    pub rtp_time: u32,
    /// Its index among its track's packets: the RTP sequence number before the session's offset.
    pub track_seq: u32,
    /// The RTP marker bit (the last packet of an access unit, for video).
    pub marker: bool,
    /// The packet starts a random-access point of the object (a seek can start here).
    pub random_access: bool,
}

/// Assembles one block from packets; [`BlockBuilder::finish`] gives the encoded, padded bytes.
#[derive(Clone, Debug)]
pub struct BlockBuilder {
    key: BlockKey,
    first_gsn: Gsn,
    block_size: usize,
    version: u16,
    entry_len: usize,
    first_send: MediaTime,
    entries: Vec<u8>,
    payload: Vec<u8>,
    count: u32,
}

impl BlockBuilder {
    /// An empty block `key` whose first packet has sequence number `first_gsn`, to be encoded in
    /// at most `block_size` bytes.
    ///
    /// # Panics
    ///
    /// If `block_size` fails [`validate_block_size`]; the store validates its block size when it
    /// is created, so this is a caller bug.
    #[must_use]
    pub fn new(key: BlockKey, first_gsn: Gsn, block_size: Bytes) -> Self {
        assert!(validate_block_size(block_size).is_ok(), "invalid block size {block_size:?}");
        Self {
            key,
            first_gsn,
            block_size: block_size.as_usize(),
            version: BLOCK_FORMAT_VERSION,
            entry_len: ENTRY_LEN,
            first_send: MediaTime::ZERO,
            entries: Vec::new(),
            payload: Vec::new(),
            count: 0,
        }
    }

    /// An empty version-2 block (native RTP payloads, [`BlockBuilder::push_native`]).
    ///
    /// # Panics
    ///
    /// As [`BlockBuilder::new`].
    #[must_use]
    pub fn new_native(key: BlockKey, first_gsn: Gsn, block_size: Bytes) -> Self {
        Self {
            version: BLOCK_FORMAT_VERSION_NATIVE,
            entry_len: ENTRY_LEN_NATIVE,
            ..Self::new(key, first_gsn, block_size)
        }
    }

    /// An empty version-3 block of raw bytes ([`BlockBuilder::push_raw`]). `first_gsn` is where
    /// the object's packets end (the block holds none, so the blocks' GSN ranges still tile).
    ///
    /// # Panics
    ///
    /// As [`BlockBuilder::new`].
    #[must_use]
    pub fn new_raw(key: BlockKey, first_gsn: Gsn, block_size: Bytes) -> Self {
        Self {
            version: BLOCK_FORMAT_VERSION_RAW,
            entry_len: ENTRY_LEN_NATIVE,
            ..Self::new(key, first_gsn, block_size)
        }
    }

    /// How many more raw bytes fit in a block made by [`BlockBuilder::new_raw`].
    #[must_use]
    pub fn raw_room(&self) -> usize {
        self.block_size.saturating_sub(self.encoded_len())
    }

    /// Appends raw bytes to a block made by [`BlockBuilder::new_raw`]; the caller keeps within
    /// [`BlockBuilder::raw_room`] (debug-asserted).
    pub fn push_raw(&mut self, bytes: &[u8]) {
        debug_assert_eq!(self.version, BLOCK_FORMAT_VERSION_RAW);
        debug_assert!(bytes.len() <= self.raw_room());
        self.payload.extend_from_slice(bytes);
    }

    /// Whether one more packet of `payload_len` bytes fits in the block.
    #[must_use]
    pub fn fits(&self, payload_len: usize) -> bool {
        self.encoded_len() + self.entry_len + payload_len <= self.block_size
    }

    /// Appends a native RTP payload to a block made by [`BlockBuilder::new_native`]. The caller
    /// checks [`BlockBuilder::fits`] first; `payload` is 1..=65535 bytes and `meta.track` below
    /// [`MAX_TRACKS`] (debug-asserted: the packetizers guarantee both).
    pub fn push_native(&mut self, meta: NativeMeta, payload: &[u8]) {
        debug_assert_eq!(self.version, BLOCK_FORMAT_VERSION_NATIVE);
        debug_assert!(self.fits(payload.len()), "packet of {} bytes does not fit", payload.len());
        debug_assert!((1..=usize::from(u16::MAX)).contains(&payload.len()));
        debug_assert!(usize::from(meta.track) < MAX_TRACKS);
        if self.count == 0 {
            self.first_send = meta.send_time;
        }
        let flags = if meta.random_access { ENTRY_RANDOM_ACCESS } else { 0 }
            | if meta.marker { ENTRY_MARKER } else { 0 };
        self.entries.extend_from_slice(&meta.send_time.as_nanos().to_le_bytes());
        // The block size bounds the payload below `MAX_BLOCK_SIZE` < 2^32.
        self.entries.extend_from_slice(&(self.payload.len() as u32).to_le_bytes());
        // Checked by the caller (debug-asserted above).
        self.entries.extend_from_slice(&(payload.len() as u16).to_le_bytes());
        self.entries.extend_from_slice(&[meta.track, flags]);
        self.entries.extend_from_slice(&meta.rtp_time.to_le_bytes());
        self.entries.extend_from_slice(&meta.track_seq.to_le_bytes());
        self.payload.extend_from_slice(payload);
        self.count += 1;
    }

    /// Appends a packet. The caller checks [`BlockBuilder::fits`] first.
    ///
    /// `payload` must be `meta.ts_packets` whole TS packets (debug-asserted).
    pub fn push(&mut self, meta: PacketMeta, payload: &[u8]) {
        debug_assert_eq!(self.version, BLOCK_FORMAT_VERSION);
        debug_assert!(self.fits(payload.len()), "packet of {} bytes does not fit", payload.len());
        debug_assert!((1..=MAX_TS_PER_PACKET).contains(&meta.ts_packets));
        debug_assert_eq!(payload.len(), usize::from(meta.ts_packets) * TS_PACKET_LEN);
        if self.count == 0 {
            self.first_send = meta.send_time;
        }
        let flags = if meta.random_access { ENTRY_RANDOM_ACCESS } else { 0 }
            | if meta.discontinuity { ENTRY_DISCONTINUITY } else { 0 };
        self.entries.extend_from_slice(&meta.send_time.as_nanos().to_le_bytes());
        // The block size bounds the payload below `MAX_BLOCK_SIZE` < 2^32.
        self.entries.extend_from_slice(&(self.payload.len() as u32).to_le_bytes());
        self.entries.extend_from_slice(&[meta.ts_packets, flags, 0, 0]);
        self.payload.extend_from_slice(payload);
        self.count += 1;
    }

    /// Number of packets pushed so far.
    #[must_use]
    pub fn packet_count(&self) -> u32 {
        self.count
    }

    /// Whether no packet (or, in a raw block, no byte) was pushed.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.count == 0 && self.payload.is_empty()
    }

    /// The encoded block: header, entries, payload, zero padding to a multiple of
    /// [`BLOCK_ALIGN`], with the checksum filled in.
    #[must_use]
    pub fn finish(self) -> Vec<u8> {
        let encoded_len = self.encoded_len();
        let padded = Bytes(encoded_len as u64).align_up(BLOCK_ALIGN as u64).as_usize();
        let mut out = Vec::with_capacity(padded);
        out.extend_from_slice(&BLOCK_MAGIC);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(HEADER_LEN as u16).to_le_bytes());
        out.extend_from_slice(&(self.entry_len as u16).to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&self.key.object.0.to_le_bytes());
        out.extend_from_slice(&self.key.index.0.to_le_bytes());
        out.extend_from_slice(&self.count.to_le_bytes());
        out.extend_from_slice(&self.first_gsn.0.to_le_bytes());
        out.extend_from_slice(&self.first_send.as_nanos().to_le_bytes());
        // Both lengths are below the block size, which is below 2^32.
        out.extend_from_slice(&(self.payload.len() as u32).to_le_bytes());
        out.extend_from_slice(&(encoded_len as u32).to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes());
        debug_assert_eq!(out.len(), HEADER_LEN);
        out.extend_from_slice(&self.entries);
        out.extend_from_slice(&self.payload);
        let sum = checksum(&out);
        out[CHECKSUM_OFF..CHECKSUM_OFF + 8].copy_from_slice(&sum.to_le_bytes());
        out.resize(padded, 0);
        out
    }

    fn encoded_len(&self) -> usize {
        HEADER_LEN + self.entries.len() + self.payload.len()
    }
}

/// The decoded header of a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockHeader {
    /// Which block this is.
    pub key: BlockKey,
    /// Sequence number of the first packet.
    pub first_gsn: Gsn,
    /// Send time of the first packet (zero for an empty block).
    pub first_send_time: MediaTime,
    /// Number of packets.
    pub packet_count: u32,
    /// Bytes of payload.
    pub payload_len: u32,
    /// Bytes of header, entries and payload (without the padding).
    pub encoded_len: u32,
    /// The stored xxh3-64 checksum.
    pub checksum: u64,
}

/// Why bytes are not a valid block.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BlockError {
    /// Shorter than a header.
    #[error("truncated: {len} bytes, shorter than the {HEADER_LEN}-byte header")]
    Truncated {
        /// Bytes available.
        len: usize,
    },
    /// Not a block file.
    #[error("bad magic {found:02x?} (not an isochron block)")]
    BadMagic {
        /// The first eight bytes.
        found: [u8; 8],
    },
    /// Written by a newer isochron.
    #[error(
        "unsupported block format version {version} (this build reads {BLOCK_FORMAT_VERSION} to {BLOCK_FORMAT_VERSION_RAW})"
    )]
    UnsupportedVersion {
        /// The version found.
        version: u16,
    },
    /// A header field is inconsistent.
    #[error("bad header: {field} = {value}")]
    BadHeader {
        /// Which field.
        field: &'static str,
        /// Its value.
        value: u64,
    },
    /// The lengths claimed by the header exceed the buffer or disagree with each other.
    #[error("out of bounds: {what}")]
    Bounds {
        /// What does not fit, with the numbers.
        what: String,
    },
    /// The stored checksum does not match the contents.
    #[error("checksum mismatch: stored {expected:#018x}, computed {actual:#018x}")]
    ChecksumMismatch {
        /// The checksum in the header.
        expected: u64,
        /// The checksum of the bytes read.
        actual: u64,
    },
    /// The block is intact but is not the block that was asked for.
    #[error("wrong block: expected {expected}, found {found}")]
    WrongKey {
        /// The key asked for.
        expected: BlockKey,
        /// The key in the header.
        found: BlockKey,
    },
    /// A packet entry is invalid.
    #[error("bad packet entry {entry}: {reason}")]
    BadEntry {
        /// The entry's index.
        entry: u32,
        /// What is wrong.
        reason: String,
    },
}

/// A parsed, verified block over a byte buffer.
#[derive(Clone)]
pub struct Block<B> {
    buf: B,
    header: BlockHeader,
    version: u16,
    entries_off: usize,
    entry_len: usize,
    payload_off: usize,
}

/// One packet of a [`Block`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketRef<'a> {
    /// The packet's global sequence number (its RTP sequence number, modulo 2^16).
    pub gsn: Gsn,
    /// When the packet is due on the wire.
    pub send_time: MediaTime,
    /// The packet starts a random-access point.
    pub random_access: bool,
    /// The packet follows a timing discontinuity.
    pub discontinuity: bool,
    /// The track it belongs to (0 in a version-1 block).
    pub track: u8,
    /// The RTP marker bit (version 1: the discontinuity flag, RFC 2250 §2).
    pub marker: bool,
    /// Its RTP timestamp before the session's offset (version 2); `None` in a version-1 block,
    /// whose timestamp is the send time on the 90 kHz clock.
    pub rtp_time: Option<u32>,
    /// Its index among its track's packets, the RTP sequence number before the session's
    /// offset: the GSN in a version-1 block.
    pub track_seq: u64,
    /// The packet's bytes (whole TS packets in version 1, one RTP payload in version 2).
    pub payload: &'a [u8],
}

impl<B: AsRef<[u8]>> Block<B> {
    /// Parses and verifies `buf`: magic, version, lengths, entry bounds, checksum and, if given,
    /// the expected key. Never panics, whatever the bytes. Bytes after `encoded_len` (padding)
    /// are ignored.
    pub fn parse(buf: B, expect: Option<BlockKey>) -> Result<Self, BlockError> {
        let bytes = buf.as_ref();
        if bytes.len() < HEADER_LEN {
            return Err(BlockError::Truncated { len: bytes.len() });
        }
        let magic: [u8; 8] = read_array(bytes, 0);
        if magic != BLOCK_MAGIC {
            return Err(BlockError::BadMagic { found: magic });
        }
        let version = u16::from_le_bytes(read_array(bytes, 8));
        if !matches!(
            version,
            BLOCK_FORMAT_VERSION | BLOCK_FORMAT_VERSION_NATIVE | BLOCK_FORMAT_VERSION_RAW
        ) {
            return Err(BlockError::UnsupportedVersion { version });
        }
        let min_entry = if version == BLOCK_FORMAT_VERSION { ENTRY_LEN } else { ENTRY_LEN_NATIVE };
        let header_len = usize::from(u16::from_le_bytes(read_array(bytes, 10)));
        let entry_len = usize::from(u16::from_le_bytes(read_array(bytes, 12)));
        let flags = u16::from_le_bytes(read_array(bytes, 14));
        let bad = |field, value: usize| BlockError::BadHeader { field, value: value as u64 };
        if header_len < HEADER_LEN {
            return Err(bad("header_len", header_len));
        }
        if entry_len < min_entry {
            return Err(bad("entry_len", entry_len));
        }
        if flags != 0 {
            return Err(bad("flags", usize::from(flags)));
        }
        let header = BlockHeader {
            key: BlockKey::new(
                ObjectId(u64::from_le_bytes(read_array(bytes, 16))),
                BlockIndex(u32::from_le_bytes(read_array(bytes, 24))),
            ),
            packet_count: u32::from_le_bytes(read_array(bytes, 28)),
            first_gsn: Gsn(u64::from_le_bytes(read_array(bytes, 32))),
            first_send_time: MediaTime::from_nanos(u64::from_le_bytes(read_array(bytes, 40))),
            payload_len: u32::from_le_bytes(read_array(bytes, 48)),
            encoded_len: u32::from_le_bytes(read_array(bytes, ENCODED_LEN_OFF)),
            checksum: u64::from_le_bytes(read_array(bytes, CHECKSUM_OFF)),
        };
        // All in u64: cannot overflow (2^16 + 2^32 * 2^16 + 2^32 < 2^64).
        let expected_len = header_len as u64
            + u64::from(header.packet_count) * entry_len as u64
            + u64::from(header.payload_len);
        if expected_len != u64::from(header.encoded_len) {
            return Err(BlockError::Bounds {
                what: format!(
                    "encoded_len {} != header {header_len} + {} entries × {entry_len} + payload {}",
                    header.encoded_len, header.packet_count, header.payload_len
                ),
            });
        }
        if header.first_gsn.0.checked_add(u64::from(header.packet_count)).is_none() {
            // Every packet's sequence number (first_gsn + i) must exist.
            return Err(BlockError::BadHeader { field: "first_gsn", value: header.first_gsn.0 });
        }
        let encoded_len = header.encoded_len as usize;
        if encoded_len > bytes.len() {
            return Err(BlockError::Bounds {
                what: format!("encoded_len {encoded_len} exceeds the {} bytes read", bytes.len()),
            });
        }
        let actual = checksum(&bytes[..encoded_len]);
        if actual != header.checksum {
            return Err(BlockError::ChecksumMismatch { expected: header.checksum, actual });
        }
        if let Some(expected) = expect.filter(|k| *k != header.key) {
            return Err(BlockError::WrongKey { expected, found: header.key });
        }
        let entries_off = header_len;
        let payload_off = encoded_len - header.payload_len as usize;
        let block = Self { buf, header, version, entries_off, entry_len, payload_off };
        block.check_entries()?;
        Ok(block)
    }

    /// The block's header.
    #[must_use]
    pub fn header(&self) -> &BlockHeader {
        &self.header
    }

    /// Number of packets.
    #[must_use]
    pub fn packet_count(&self) -> usize {
        self.header.packet_count as usize
    }

    /// Packet `i` (0-based within the block), in O(1).
    ///
    /// # Panics
    ///
    /// If `i >= self.packet_count()`, like slice indexing.
    #[must_use]
    pub fn packet(&self, i: usize) -> PacketRef<'_> {
        assert!(i < self.packet_count(), "packet {i} of a {}-packet block", self.packet_count());
        let e = self.raw_entry(i);
        let start = e.payload_off as usize;
        let end = start + e.len;
        let gsn = Gsn(self.header.first_gsn.0 + i as u64);
        let discontinuity = e.flags & ENTRY_DISCONTINUITY != 0;
        PacketRef {
            gsn,
            send_time: MediaTime::from_nanos(e.send_ns),
            random_access: e.flags & ENTRY_RANDOM_ACCESS != 0,
            discontinuity,
            track: e.track,
            marker: if e.native { e.flags & ENTRY_MARKER != 0 } else { discontinuity },
            rtp_time: e.native.then_some(e.rtp_time),
            track_seq: if e.native { u64::from(e.track_seq) } else { gsn.0 },
            // In bounds: `check_entries` verified every entry at parse time.
            payload: &self.payload()[start..end],
        }
    }

    /// The packets in order.
    pub fn packets(&self) -> impl ExactSizeIterator<Item = PacketRef<'_>> + '_ {
        (0..self.packet_count()).map(|i| self.packet(i))
    }

    /// The index within the block of the packet with sequence number `gsn`, if it is here.
    #[must_use]
    pub fn find_gsn(&self, gsn: Gsn) -> Option<usize> {
        let off = gsn.0.checked_sub(self.header.first_gsn.0)?;
        (off < u64::from(self.header.packet_count)).then_some(off as usize)
    }

    /// Whether the block holds native RTP payloads of tracks (version 2) rather than MPEG-TS.
    #[must_use]
    pub fn is_native(&self) -> bool {
        self.version == BLOCK_FORMAT_VERSION_NATIVE
    }

    /// Whether the block holds a source file's raw bytes (version 3): no packets, the bytes
    /// in [`Block::payload`].
    #[must_use]
    pub fn is_raw(&self) -> bool {
        self.version == BLOCK_FORMAT_VERSION_RAW
    }

    /// All packets' bytes, back to back.
    #[must_use]
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[self.payload_off..self.header.encoded_len as usize]
    }

    /// The whole buffer, padding included (what is stored on disk).
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        self.buf.as_ref()
    }

    /// The underlying buffer.
    #[must_use]
    pub fn into_inner(self) -> B {
        self.buf
    }

    fn raw_entry(&self, i: usize) -> RawEntry {
        let bytes = self.buf.as_ref();
        let off = self.entries_off + i * self.entry_len;
        let send_ns = u64::from_le_bytes(read_array(bytes, off));
        let payload_off = u32::from_le_bytes(read_array(bytes, off + 8));
        if self.version == BLOCK_FORMAT_VERSION {
            let ts_packets = bytes[off + 12];
            RawEntry {
                send_ns,
                payload_off,
                native: false,
                ts_packets,
                len: usize::from(ts_packets) * TS_PACKET_LEN,
                track: 0,
                flags: bytes[off + 13],
                rtp_time: 0,
                track_seq: 0,
            }
        } else {
            RawEntry {
                send_ns,
                payload_off,
                native: true,
                ts_packets: 0,
                len: usize::from(u16::from_le_bytes(read_array(bytes, off + 12))),
                track: bytes[off + 14],
                flags: bytes[off + 15],
                rtp_time: u32::from_le_bytes(read_array(bytes, off + 16)),
                track_seq: u32::from_le_bytes(read_array(bytes, off + 20)),
            }
        }
    }

    /// Checks that the entries tile the payload exactly, so that `packet` is infallible.
    fn check_entries(&self) -> Result<(), BlockError> {
        if self.version == BLOCK_FORMAT_VERSION_RAW {
            if self.header.packet_count != 0 {
                return Err(BlockError::BadHeader {
                    field: "packet_count",
                    value: u64::from(self.header.packet_count),
                });
            }
            return Ok(());
        }
        let mut expected_off = 0u64;
        for i in 0..self.header.packet_count {
            let e = self.raw_entry(i as usize);
            let bad = |reason: String| BlockError::BadEntry { entry: i, reason };
            if e.native {
                if e.len == 0 {
                    return Err(bad("empty payload".into()));
                }
                if usize::from(e.track) >= MAX_TRACKS {
                    return Err(bad(format!("track {} not below {MAX_TRACKS}", e.track)));
                }
                if e.flags & !(ENTRY_RANDOM_ACCESS | ENTRY_DISCONTINUITY | ENTRY_MARKER) != 0 {
                    return Err(bad(format!("unknown flags {:#04x}", e.flags)));
                }
            } else if !(1..=MAX_TS_PER_PACKET).contains(&e.ts_packets) {
                return Err(bad(format!("ts_packets {} not in 1..=7", e.ts_packets)));
            }
            if u64::from(e.payload_off) != expected_off {
                return Err(bad(format!(
                    "payload_off {} where {expected_off} was expected",
                    e.payload_off
                )));
            }
            if i == 0 && e.send_ns != self.header.first_send_time.as_nanos() {
                return Err(bad(format!(
                    "send_ns {} differs from the header's first_send_ns {}",
                    e.send_ns,
                    self.header.first_send_time.as_nanos()
                )));
            }
            expected_off += e.len as u64;
        }
        if expected_off != u64::from(self.header.payload_len) {
            return Err(BlockError::Bounds {
                what: format!(
                    "packets cover {expected_off} payload bytes, header says {}",
                    self.header.payload_len
                ),
            });
        }
        Ok(())
    }
}

impl<B> fmt::Debug for Block<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Block").field("header", &self.header).finish_non_exhaustive()
    }
}

struct RawEntry {
    send_ns: u64,
    payload_off: u32,
    native: bool,
    ts_packets: u8,
    /// The payload's length in bytes.
    len: usize,
    track: u8,
    flags: u8,
    rtp_time: u32,
    track_seq: u32,
}

/// Writes into `encoded`'s header the checksum of its first `encoded_len` bytes (as the header
/// says), when it is long enough to hold them: what a block writer does last. For tools that
/// make blocks by hand, and for fuzzing past the checksum into the checks behind it. Returns
/// whether it did.
pub fn reseal(encoded: &mut [u8]) -> bool {
    if encoded.len() < HEADER_LEN {
        return false;
    }
    let len = u32::from_le_bytes(read_array(encoded, ENCODED_LEN_OFF)) as usize;
    if !(HEADER_LEN..=encoded.len()).contains(&len) {
        return false;
    }
    let sum = checksum(&encoded[..len]);
    encoded[CHECKSUM_OFF..CHECKSUM_OFF + 8].copy_from_slice(&sum.to_le_bytes());
    true
}

/// xxh3-64 of `encoded` (at least a header long) with the checksum field zeroed.
fn checksum(encoded: &[u8]) -> u64 {
    let mut h = Xxh3Default::new();
    h.update(&encoded[..CHECKSUM_OFF]);
    h.update(&[0; 8]);
    h.update(&encoded[CHECKSUM_OFF + 8..]);
    h.digest()
}

/// `N` bytes at `off`; callers have checked that they are in bounds.
fn read_array<const N: usize>(bytes: &[u8], off: usize) -> [u8; N] {
    let mut out = [0; N];
    out.copy_from_slice(&bytes[off..off + N]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> BlockKey {
        BlockKey::new(ObjectId(7), BlockIndex(12))
    }

    fn ts(n: u8, fill: u8) -> Vec<u8> {
        let mut v = vec![fill; usize::from(n) * TS_PACKET_LEN];
        for p in v.chunks_mut(TS_PACKET_LEN) {
            p[0] = 0x47;
        }
        v
    }

    fn sample() -> (Vec<u8>, Vec<Vec<u8>>) {
        let mut b = BlockBuilder::new(key(), Gsn(100), Bytes::kib(8));
        let mut payloads = Vec::new();
        for i in 0..5u8 {
            let p = ts(1 + i % 7, i);
            assert!(b.fits(p.len()));
            let meta = PacketMeta {
                send_time: MediaTime::from_nanos(1_000 + u64::from(i) * 10),
                ts_packets: 1 + i % 7,
                random_access: i == 0,
                discontinuity: i == 3,
            };
            b.push(meta, &p);
            payloads.push(p);
        }
        assert_eq!(b.packet_count(), 5);
        (b.finish(), payloads)
    }

    #[test]
    fn round_trip() {
        let (bytes, payloads) = sample();
        assert_eq!(bytes.len() % BLOCK_ALIGN, 0);
        let block = Block::parse(&bytes[..], Some(key())).unwrap();
        let h = block.header();
        assert_eq!(h.key, key());
        assert_eq!(h.first_gsn, Gsn(100));
        assert_eq!(h.first_send_time, MediaTime::from_nanos(1_000));
        assert_eq!(h.packet_count, 5);
        assert_eq!(h.payload_len as usize, payloads.iter().map(Vec::len).sum::<usize>());
        assert_eq!(block.payload(), payloads.concat());
        for (i, p) in block.packets().enumerate() {
            assert_eq!(p.gsn, Gsn(100 + i as u64));
            assert_eq!(p.payload, payloads[i]);
            assert_eq!(p.send_time, MediaTime::from_nanos(1_000 + i as u64 * 10));
            assert_eq!(p.random_access, i == 0);
            assert_eq!(p.discontinuity, i == 3);
        }
        assert_eq!(block.find_gsn(Gsn(99)), None);
        assert_eq!(block.find_gsn(Gsn(100)), Some(0));
        assert_eq!(block.find_gsn(Gsn(104)), Some(4));
        assert_eq!(block.find_gsn(Gsn(105)), None);
        assert_eq!(block.as_bytes(), &bytes[..]);
        // Padding is not part of the format: a trimmed buffer parses too.
        let trimmed = &bytes[..h.encoded_len as usize];
        assert!(Block::parse(trimmed, None).is_ok());
        assert_eq!(Block::parse(bytes.clone(), None).unwrap().into_inner(), bytes);
    }

    #[test]
    fn fills_up_to_block_size() {
        let size = Bytes::kib(64);
        let mut b = BlockBuilder::new(key(), Gsn(0), size);
        let p = ts(7, 1);
        let meta = |i: u64| PacketMeta {
            send_time: MediaTime::from_nanos(i),
            ts_packets: 7,
            random_access: false,
            discontinuity: false,
        };
        let mut n = 0;
        while b.fits(p.len()) {
            b.push(meta(n), &p);
            n += 1;
        }
        assert_eq!(n as usize, (size.as_usize() - HEADER_LEN) / (ENTRY_LEN + p.len()));
        let bytes = b.finish();
        assert_eq!(bytes.len(), size.as_usize());
        let block = Block::parse(bytes, None).unwrap();
        assert_eq!(block.packet_count(), n as usize);
    }

    #[test]
    fn empty_block() {
        let b = BlockBuilder::new(key(), Gsn(5), MIN_BLOCK_SIZE);
        assert!(b.is_empty());
        let bytes = b.finish();
        assert_eq!(bytes.len(), BLOCK_ALIGN);
        let block = Block::parse(bytes, Some(key())).unwrap();
        assert_eq!(block.packet_count(), 0);
        assert_eq!(block.payload(), b"");
        assert_eq!(block.find_gsn(Gsn(5)), None);
    }

    #[test]
    fn detects_corruption() {
        let (bytes, _) = sample();
        let encoded = Block::parse(&bytes[..], None).unwrap().header().encoded_len as usize;
        // Every byte of the encoded region is covered by some check.
        for i in 0..encoded {
            let mut bad = bytes.clone();
            bad[i] ^= 0x01;
            assert!(Block::parse(&bad[..], None).is_err(), "flip at {i} went unnoticed");
        }
        let mut bad = bytes.clone();
        bad[HEADER_LEN + 20] ^= 0xff;
        assert!(matches!(Block::parse(&bad[..], None), Err(BlockError::ChecksumMismatch { .. })));
        // Padding is outside the checksum.
        let mut padded = bytes;
        *padded.last_mut().unwrap() = 1;
        assert!(Block::parse(&padded[..], None).is_ok());
    }

    #[test]
    fn precise_errors() {
        let (bytes, _) = sample();
        assert_eq!(
            Block::parse(&bytes[..10], None).unwrap_err(),
            BlockError::Truncated { len: 10 }
        );
        let mut bad = bytes.clone();
        bad[0] = b'X';
        assert!(matches!(Block::parse(&bad[..], None), Err(BlockError::BadMagic { .. })));
        let mut newer = bytes.clone();
        newer[8] = 4;
        assert_eq!(
            Block::parse(&newer[..], None).unwrap_err(),
            BlockError::UnsupportedVersion { version: 4 }
        );
        let other = BlockKey::new(ObjectId(7), BlockIndex(13));
        assert_eq!(
            Block::parse(&bytes[..], Some(other)).unwrap_err(),
            BlockError::WrongKey { expected: other, found: key() }
        );
        let short = &bytes[..HEADER_LEN + 10];
        assert!(matches!(Block::parse(short, None), Err(BlockError::Bounds { .. })));
        let msg = Block::parse(&bad[..], None).unwrap_err().to_string();
        assert!(msg.contains("bad magic"), "{msg}");
    }

    /// A re-checksummed block with an entry that lies about its payload is still refused.
    #[test]
    fn rejects_inconsistent_entries_with_valid_checksum() {
        let (mut bytes, _) = sample();
        let encoded = Block::parse(&bytes[..], None).unwrap().header().encoded_len as usize;
        bytes[HEADER_LEN + ENTRY_LEN + 8] ^= 4; // entry 1's payload_off
        assert!(matches!(Block::parse(&bytes[..], None), Err(BlockError::ChecksumMismatch { .. })));
        assert!(reseal(&mut bytes));
        let sum = checksum(&bytes[..encoded]);
        assert_eq!(bytes[CHECKSUM_OFF..CHECKSUM_OFF + 8], sum.to_le_bytes());
        assert!(!reseal(&mut bytes[..encoded - 1]), "shorter than its encoded_len");
        assert!(matches!(
            Block::parse(&bytes[..], None),
            Err(BlockError::BadEntry { entry: 1, .. })
        ));
    }

    /// Found by fuzzing: a first sequence number so large that the last packet's would not
    /// exist (it overflowed when the packet was read).
    #[test]
    fn rejects_sequence_numbers_past_the_largest() {
        let (mut bytes, _) = sample();
        bytes[32..40].copy_from_slice(&(u64::MAX - 1).to_le_bytes());
        assert!(reseal(&mut bytes));
        assert!(matches!(
            Block::parse(&bytes[..], None),
            Err(BlockError::BadHeader { field: "first_gsn", .. })
        ));
    }

    #[test]
    fn never_panics_on_garbage() {
        let mut rng = isochron_base::mix::SplitMix64::new(3);
        let (good, _) = sample();
        for round in 0..2_000 {
            let len = (rng.next_u64() % 300) as usize;
            let mut buf: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            if round % 2 == 0 && len >= HEADER_LEN {
                // Keep a valid prefix so parsing gets past the magic and version.
                buf[..16].copy_from_slice(&good[..16]);
            }
            let _ = Block::parse(&buf[..], None);
        }
        // Mutations with a fixed-up checksum reach the length and entry checks.
        let encoded = Block::parse(&good[..], None).unwrap().header().encoded_len as usize;
        for _ in 0..5_000 {
            let mut buf = good.clone();
            for _ in 0..1 + rng.next_u64() % 3 {
                let at = (rng.next_u64() % encoded as u64) as usize;
                buf[at] = rng.next_u64() as u8;
            }
            reseal(&mut buf);
            if let Ok(block) = Block::parse(&buf[..], None) {
                let total: usize = block.packets().map(|p| p.payload.len()).sum();
                assert_eq!(total, block.payload().len());
            }
        }
    }

    fn native_sample() -> (Vec<u8>, Vec<(NativeMeta, Vec<u8>)>) {
        let mut b = BlockBuilder::new_native(key(), Gsn(40), Bytes::kib(8));
        let mut packets = Vec::new();
        for i in 0..6u32 {
            let payload: Vec<u8> = (0..(1 + i * 97) % 1400).map(|j| (j + i) as u8).collect();
            let payload = if payload.is_empty() { vec![9] } else { payload };
            let meta = NativeMeta {
                send_time: MediaTime::from_nanos(5_000 + u64::from(i) * 7),
                track: (i % 2) as u8,
                rtp_time: 90_000 * i + 3,
                track_seq: u32::MAX - 2 + i / 2,
                marker: i % 3 == 2,
                random_access: i == 0,
            };
            assert!(b.fits(payload.len()));
            b.push_native(meta, &payload);
            packets.push((meta, payload));
        }
        (b.finish(), packets)
    }

    #[test]
    fn native_round_trip() {
        let (bytes, packets) = native_sample();
        assert_eq!(u16::from_le_bytes(read_array(&bytes, 8)), BLOCK_FORMAT_VERSION_NATIVE);
        let block = Block::parse(&bytes[..], Some(key())).unwrap();
        assert!(block.is_native());
        assert_eq!(block.header().first_gsn, Gsn(40));
        assert_eq!(block.header().first_send_time, MediaTime::from_nanos(5_000));
        for (i, p) in block.packets().enumerate() {
            let (meta, payload) = &packets[i];
            assert_eq!(p.gsn, Gsn(40 + i as u64));
            assert_eq!(p.payload, &payload[..]);
            assert_eq!(p.send_time, meta.send_time);
            assert_eq!(p.track, meta.track);
            assert_eq!(p.rtp_time, Some(meta.rtp_time));
            assert_eq!(p.track_seq, u64::from(meta.track_seq));
            assert_eq!(p.marker, meta.marker);
            assert_eq!(p.random_access, meta.random_access);
            assert!(!p.discontinuity);
        }
        // Every byte of the encoded region is covered by some check.
        let encoded = block.header().encoded_len as usize;
        for i in 0..encoded {
            let mut bad = bytes.clone();
            bad[i] ^= 0x01;
            assert!(Block::parse(&bad[..], None).is_err(), "flip at {i} went unnoticed");
        }
    }

    /// A version-1 block reads as one track numbered by GSN, timed by its send time.
    #[test]
    fn version_1_packets_are_track_0() {
        let (bytes, _) = sample();
        let block = Block::parse(&bytes[..], None).unwrap();
        assert!(!block.is_native());
        for p in block.packets() {
            assert_eq!((p.track, p.rtp_time, p.track_seq), (0, None, p.gsn.0));
            assert_eq!(p.marker, p.discontinuity);
        }
    }

    /// Re-checksummed native entries that break the format are refused by name.
    #[test]
    fn native_entries_are_checked() {
        let (good, _) = native_sample();
        let encoded = Block::parse(&good[..], None).unwrap().header().encoded_len as usize;
        let resum = |b: &mut Vec<u8>| {
            let sum = checksum(&b[..encoded]);
            b[CHECKSUM_OFF..CHECKSUM_OFF + 8].copy_from_slice(&sum.to_le_bytes());
        };
        let entry = |i: usize| HEADER_LEN + i * ENTRY_LEN_NATIVE;
        let mut bad = good.clone();
        bad[entry(1) + 14] = MAX_TRACKS as u8;
        resum(&mut bad);
        let err = Block::parse(&bad[..], None).unwrap_err();
        assert!(matches!(err, BlockError::BadEntry { entry: 1, .. }), "{err}");
        let mut bad = good.clone();
        bad[entry(2) + 15] |= 0x80;
        resum(&mut bad);
        assert!(err_entry(&bad, 2));
        let mut bad = good.clone();
        bad[entry(3) + 12] ^= 1;
        resum(&mut bad);
        assert!(Block::parse(&bad[..], None).is_err());
        let mut rng = isochron_base::mix::SplitMix64::new(9);
        for _ in 0..5_000 {
            let mut buf = good.clone();
            for _ in 0..1 + rng.next_u64() % 3 {
                let at = (rng.next_u64() % encoded as u64) as usize;
                buf[at] = rng.next_u64() as u8;
            }
            resum(&mut buf);
            if let Ok(block) = Block::parse(&buf[..], None) {
                let total: usize = block.packets().map(|p| p.payload.len()).sum();
                assert_eq!(total, block.payload().len());
            }
        }
    }

    /// A raw block holds bytes and no packet; a raw header claiming packets is refused.
    #[test]
    fn raw_round_trip() {
        let mut b = BlockBuilder::new_raw(key(), Gsn(9), Bytes::kib(8));
        assert_eq!(b.raw_room(), 8192 - HEADER_LEN);
        let data: Vec<u8> = (0..b.raw_room()).map(|i| (i * 7) as u8).collect();
        b.push_raw(&data);
        assert_eq!(b.raw_room(), 0);
        let bytes = b.finish();
        assert_eq!(bytes.len(), 8192);
        let block = Block::parse(&bytes[..], Some(key())).unwrap();
        assert!(block.is_raw() && !block.is_native());
        assert_eq!(block.packet_count(), 0);
        assert_eq!(block.payload(), &data[..]);
        let mut bad = bytes.clone();
        bad[28] = 1; // packet_count
        let sum = checksum(&bad[..8192]);
        bad[CHECKSUM_OFF..CHECKSUM_OFF + 8].copy_from_slice(&sum.to_le_bytes());
        assert!(Block::parse(&bad[..], None).is_err());
    }

    fn err_entry(bytes: &[u8], n: u32) -> bool {
        matches!(Block::parse(bytes, None), Err(BlockError::BadEntry { entry, .. }) if entry == n)
    }

    #[test]
    fn block_size_validation() {
        assert!(validate_block_size(Bytes::mib(1)).is_ok());
        assert!(validate_block_size(MIN_BLOCK_SIZE).is_ok());
        assert!(validate_block_size(MAX_BLOCK_SIZE).is_ok());
        assert!(validate_block_size(Bytes(0)).is_err());
        assert!(validate_block_size(Bytes(5000)).is_err());
        assert!(validate_block_size(Bytes(MAX_BLOCK_SIZE.0 + 4096)).is_err());
    }
}
