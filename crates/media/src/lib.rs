//! Media parsing for isochron: MPEG-TS analysis (packets, PCR timing, RTP payload units,
//! random-access points) and, in [`container`], MP4 and Matroska demuxing.
//!
//! Why this crate exists: isochron stores a media file as a stream of ready-to-send RTP payload
//! units, each with its send time, so that any node can pace its blocks with no help from the
//! others (`docs/design/block-format.md`). For MPEG-TS that means reading the file once at
//! ingest and deriving
//!
//! - each TS packet's **send time** from the program clock reference, interpolated linearly
//!   between PCRs (ISO/IEC 13818-1 §2.4.2.2, §2.4.3.5), with wrap-around and discontinuities
//!   handled so that times never go backwards ([`TsIndex::send_time`]);
//! - the cut of the packet stream into **payload units** of at most seven TS packets
//!   (RFC 2250 §2: 7 × 188 = 1316 bytes), never spanning a PAT or a timing discontinuity
//!   ([`TsIndex::units`]);
//! - the **seek points** for RTSP `Range: npt=X-`: units that start at the PAT before a video
//!   random-access point ([`Unit::random_access`], [`TsIndex::seek`]);
//! - the elementary streams from PAT and PMT (§2.4.4), for the catalog and the SDP
//!   ([`TsIndex::streams`]).
//!
//! Files in other containers — MP4, MKV/WebM — are indexed by [`container`] into tracks and
//! samples (codec configuration, offsets, decode and presentation times) that isochron's own
//! packetizers turn into payload units; see that module.
//!
//! The crate is sans-IO: callers push byte chunks into a [`TsScanner`] and get a [`TsIndex`]
//! back. It does not read files, decode PES payloads, or remultiplex; it accepts only 188-byte
//! packets (192-byte M2TS goes through [`M2tsToTs`] first; there is no 204-byte FEC variant).
//! Any input, however malformed, gives an index or a [`TsError`], never a panic
//! (`fuzz/fuzz_targets/ts_scan.rs` checks this).
//!
//! ```
//! # fn ingest(file_chunks: &[&[u8]]) -> Result<(), isochron_media::TsError> {
//! use isochron_media::TsScanner;
//!
//! let mut scanner = TsScanner::new();
//! for chunk in file_chunks {
//!     scanner.push(chunk)?;
//! }
//! let index = scanner.finish()?;
//! for unit in index.units() {
//!     // Store bytes [unit.byte_offset(), + unit.byte_len()) with unit.send_time.
//!     let _ = (unit.byte_offset(), unit.byte_len(), unit.send_time);
//! }
//! # Ok(())
//! # }
//! ```

pub mod container;
pub mod error;
pub mod fmp4;
pub mod live;
pub mod native;
pub mod packet;
pub mod psi;
pub mod scan;
pub mod stream;
pub mod timing;
pub mod units;

#[cfg(test)]
mod testutil;

pub use container::{
    Codec, CodecConfig, ContainerError, ContainerKind, Demuxer, M2tsToTs, MediaIndex, Need, Sample,
    SkippedTrack, Track, demux_bytes, sniff,
};
pub use error::TsError;
pub use native::{HevcParameterSets, NativeAssembler, NativeError, NativeTrack, NativeUnit};
pub use psi::{StreamInfo, StreamKind};
pub use scan::{TsIndex, TsScanner};
pub use stream::{StreamUnit, UnitStream};
pub use units::{MAX_UNRESOLVED_RANDOM_ACCESS, RANDOM_ACCESS_HORIZON_TICKS, Unit, Units};

/// The size of an MPEG-TS packet (ISO/IEC 13818-1 §2.4.3.2).
pub const TS_PACKET_SIZE: usize = 188;

/// The most TS packets in one RTP payload unit: 7 × 188 = 1316 bytes (RFC 2250 §2).
pub const MAX_TS_PER_UNIT: u8 = 7;
