//! Native RTP payload formats: one codec's access units in, RTP payloads out, and back.
//!
//! isochron's own streams are MPEG-2 TS over RTP (RFC 2250 §2), but players and cameras also
//! speak the codecs' native payload formats, which carry no TS overhead and need no TS demuxer
//! at the receiver. This module turns one access unit (AU) of a container track — a length-prefixed
//! H.264/H.265 picture as MP4 and Matroska store it, a raw AAC frame, an Opus packet, an AC-3
//! or MPEG audio frame — into the payloads of its RTP packets, and reassembles AUs from received
//! payloads:
//!
//! | codec | RFC | packetizer | depacketizer |
//! |---|---|---|---|
//! | H.264 | RFC 6184 (packetization-mode=1) | Single NAL unit, FU-A | + STAP-A |
//! | H.265 | RFC 7798 (no DONL) | Single NAL unit, FU | + AP |
//! | AAC | RFC 3640 `mpeg4-generic` AAC-hbr | one AU a packet, fragmented if larger | several AUs a packet |
//! | Opus | RFC 7587 | one packet a payload | the same |
//! | AC-3 | RFC 4184 | one frame a packet, fragmented if larger | several frames a packet |
//! | MPEG audio | RFC 2250 §3.5 (PT 14) | one frame a packet, fragmented if larger | several frames a packet |
//!
//! It also writes what the SDP says about each format: the `a=rtpmap` encoding name, clock rate
//! and channels ([`Codec::rtpmap`]) and the `a=fmtp` parameters ([`h264_fmtp`], [`h265_fmtp`],
//! [`aac_fmtp`], [`opus_fmtp`]).
//!
//! What it does not do: RTP headers, sequence numbers, timestamps, pacing or sockets. Every
//! payload a packetizer produces for one AU is sent with that AU's RTP timestamp; the caller
//! writes the headers ([`crate::RtpHeader`]) with the [`Payload::marker`] bit given here. The
//! depacketizers take payloads of one track in sequence order; detecting a gap (and calling
//! `lost()`) or a timestamp change without a marker (and calling `flush()`) is the caller's job.
//!
//! Every function here is total: malformed input gives a [`PayloadError`], never a panic, and a
//! depacketizer never buffers more than [`MAX_ACCESS_UNIT_BYTES`] of one AU.
//!
//! H.264 and H.265 share one NAL unit packetizer and depacketizer (`nal`), and AAC, AC-3 and
//! MPEG audio their fragmentation and reassembly (`frame` and `fragment`); each format's module
//! keeps its own headers and rules, and the macros here and there write the public types'
//! forwarding methods and trait impls once for all.

pub mod aac;
pub mod ac3;
mod frame;
pub mod h264;
pub mod h265;
pub mod mpa;
mod nal;
pub mod opus;
#[cfg(test)]
mod testutil;

use thiserror::Error;

pub use aac::{AacDepacketizer, AacPacketizer, AscInfo, aac_asc_info, aac_fmtp};
pub use ac3::{Ac3Depacketizer, Ac3Packetizer, ac3_frame_len};
pub use h264::{H264Depacketizer, H264Packetizer, h264_fmtp, h264_profile_level_id};
pub use h265::{H265Depacketizer, H265Packetizer, H265Profile, h265_fmtp, h265_profile};
pub use mpa::{MpaDepacketizer, MpaPacketizer, PT_MPA, mpa_frame_len};
pub use opus::{OpusDepacketizer, OpusPacketizer, opus_fmtp};

/// The most bytes a depacketizer buffers for one access unit; a longer AU is refused with
/// [`PayloadError::TooLarge`] (a sender that never sets the marker bit cannot grow memory
/// without bound).
pub const MAX_ACCESS_UNIT_BYTES: usize = 32 << 20;

/// The payload size isochron uses when nothing else is said: 7 × 188 bytes, as for MP2T
/// (RFC 2250 §2), which fits an Ethernet MTU with the IP, UDP, RTP and header-extension headers.
pub const DEFAULT_MAX_PAYLOAD: usize = 1316;

/// One RTP payload produced by a packetizer: the bytes after the RTP header, and the marker bit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Payload {
    /// The payload bytes (payload header, if the format has one, then the media data).
    pub bytes: Vec<u8>,
    /// The RTP marker bit for this packet, as the payload format defines it.
    pub marker: bool,
}

/// Why an access unit could not be packetized, or a payload not depacketized.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum PayloadError {
    /// The NAL length size is not one that avcC or hvcC allows.
    #[error("NAL length size {0}: must be 1, 2 or 4 (lengthSizeMinusOne + 1)")]
    NalLengthSize(u8),
    /// The largest payload allowed cannot hold even the smallest fragment.
    #[error("max_payload {max_payload} is below the {min} bytes a {format} fragment needs")]
    MaxPayloadTooSmall {
        /// The payload format.
        format: &'static str,
        /// The limit given.
        max_payload: usize,
        /// The smallest limit that works.
        min: usize,
    },
    /// A parameter set given to a packetizer is not a NAL unit of the expected type.
    #[error("{format} {kind} number {index} is unusable: {reason}")]
    ParameterSet {
        /// The payload format.
        format: &'static str,
        /// Which kind of parameter set ("SPS", "PPS", "VPS").
        kind: &'static str,
        /// Its position in the list given.
        index: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// An access unit ends inside a NAL length prefix.
    #[error(
        "access unit truncated at byte {offset}: a {len_size}-byte NAL length prefix, \
         {remaining} bytes left"
    )]
    TruncatedLength {
        /// Offset of the prefix in the access unit.
        offset: usize,
        /// The prefix size.
        len_size: usize,
        /// Bytes left from `offset`.
        remaining: usize,
    },
    /// A NAL length prefix announces more bytes than the access unit has.
    #[error(
        "NAL length prefix at byte {offset} announces {len} bytes, only {remaining} follow \
         in the access unit"
    )]
    NalPastEnd {
        /// Offset of the prefix in the access unit.
        offset: usize,
        /// The length announced.
        len: usize,
        /// Bytes after the prefix.
        remaining: usize,
    },
    /// A NAL length prefix of zero.
    #[error("zero-length NAL unit at byte {offset} of the access unit")]
    EmptyNal {
        /// Offset of the prefix in the access unit.
        offset: usize,
    },
    /// A NAL unit shorter than its own header.
    #[error(
        "{format} NAL unit at byte {offset} is {len} bytes, shorter than its {need}-byte header"
    )]
    NalTooShort {
        /// The payload format.
        format: &'static str,
        /// Offset of the NAL unit (in the access unit, or in the payload).
        offset: usize,
        /// Its length.
        len: usize,
        /// The header length.
        need: usize,
    },
    /// A NAL unit whose forbidden_zero_bit is set (H.264 §7.4.1, H.265 §7.4.2.2).
    #[error("NAL unit at byte {offset} of the access unit has its forbidden_zero_bit set")]
    ForbiddenBit {
        /// Offset of the NAL unit's first byte in the access unit.
        offset: usize,
    },
    /// An access unit or frame is larger than the format can carry or a depacketizer buffers.
    #[error("{format} access unit of {len} bytes exceeds the {max}-byte limit")]
    TooLarge {
        /// The payload format.
        format: &'static str,
        /// Its size (for a depacketizer: what the buffered AU would have grown to).
        len: usize,
        /// The limit.
        max: usize,
    },
    /// An empty frame or payload where the format needs at least one byte.
    #[error("empty {format} {what}")]
    Empty {
        /// The payload format.
        format: &'static str,
        /// "frame", "packet" or "payload".
        what: &'static str,
    },
    /// A payload too short for a header it announces.
    #[error("{format} payload of {len} bytes is too short for {what} ({need} bytes)")]
    Truncated {
        /// The payload format.
        format: &'static str,
        /// What did not fit.
        what: &'static str,
        /// The payload length.
        len: usize,
        /// The bytes needed.
        need: usize,
    },
    /// A packet type this implementation does not take.
    #[error("{format} packet type {packet_type} is not supported: {why}")]
    Unsupported {
        /// The payload format.
        format: &'static str,
        /// The packet (NAL unit) type, or frame type.
        packet_type: u8,
        /// Why not.
        why: &'static str,
    },
    /// A feature of the payload format this implementation does not take.
    #[error("{format}: {what} is not supported")]
    UnsupportedFeature {
        /// The payload format.
        format: &'static str,
        /// The feature.
        what: &'static str,
    },
    /// Settings that the payload format does not allow.
    #[error("{format} configuration: {what}")]
    InvalidConfig {
        /// The payload format.
        format: &'static str,
        /// What is wrong.
        what: &'static str,
    },
    /// Fragments that do not make up a whole access unit.
    #[error("{format} fragment: {what}")]
    Fragment {
        /// The payload format.
        format: &'static str,
        /// What was inconsistent.
        what: &'static str,
    },
    /// A malformed aggregation packet (STAP-A, AP) or multi-frame payload.
    #[error("{format} payload malformed at byte {offset}: {what}")]
    Malformed {
        /// The payload format.
        format: &'static str,
        /// Offset in the payload.
        offset: usize,
        /// What was wrong there.
        what: &'static str,
    },
}

/// A packetizer: one access unit in, its RTP payloads out.
///
/// All payloads of one AU carry the AU's RTP timestamp. On an error nothing is appended to
/// `out`.
pub trait Packetizer {
    /// Appends the payloads of access unit `au`, in order, to `out`.
    fn packetize(&mut self, au: &[u8], out: &mut Vec<Payload>) -> Result<(), PayloadError>;
}

/// A depacketizer: payloads of one track in sequence order in, whole access units out.
///
/// After an error the AU being assembled is dropped; the depacketizer carries on with the next
/// payload.
pub trait Depacketizer {
    /// Feeds one payload with its RTP marker bit and appends every access unit it completes to
    /// `out` (in the container form each format documents).
    fn push_into(
        &mut self,
        payload: &[u8],
        marker: bool,
        out: &mut Vec<Vec<u8>>,
    ) -> Result<(), PayloadError>;
    /// Tells the depacketizer that packets were lost (a sequence-number gap) before the next
    /// payload: whatever was being assembled is dropped, and so are the rest of the damaged AU.
    fn lost(&mut self);
    /// Ends the AU being assembled without a marker bit (the caller saw the RTP timestamp
    /// change) and returns it if it is whole.
    fn flush(&mut self) -> Option<Vec<u8>>;
}

/// Writes a format's packetizer's `packetize`, with the docs given and its argument named as
/// given, over the type's own `payloads` (of the same arguments), and its [`Packetizer`] impl.
///
/// Like the other macros of the formats, it names the crate's items (here [`Packetizer`],
/// [`Payload`], [`PayloadError`]) as the module that invokes it imports them.
macro_rules! impl_packetizer {
    (
        $ty:ty;
        $(#[$doc:meta])*
        fn packetize($arg:ident);
    ) => {
        impl $ty {
            $(#[$doc])*
            pub fn packetize(
                &mut self,
                $arg: &[u8],
                out: &mut Vec<Payload>,
            ) -> Result<(), PayloadError> {
                self.payloads($arg, out)
            }
        }

        impl Packetizer for $ty {
            fn packetize(&mut self, au: &[u8], out: &mut Vec<Payload>) -> Result<(), PayloadError> {
                Self::packetize(self, au, out)
            }
        }
    };
}
use impl_packetizer;

/// Implements [`Depacketizer`] for a format's depacketizer from its inherent methods: `push`
/// gives what a payload completes (an `Option` or a `Vec` of access units), which `push_into`
/// appends; `lost` and `flush` are the type's own (`$ty: push, lost, flush`), or do nothing for
/// a format that keeps nothing between payloads (`$ty: push`). It names [`Depacketizer`] and
/// [`PayloadError`] as the invoking module imports them.
macro_rules! impl_depacketizer {
    ($ty:ty: push, lost, flush) => {
        $crate::payload::impl_depacketizer!(@impl $ty, forward);
    };
    ($ty:ty: push) => {
        $crate::payload::impl_depacketizer!(@impl $ty, stateless);
    };
    (@impl $ty:ty, $kind:ident) => {
        impl Depacketizer for $ty {
            fn push_into(
                &mut self,
                payload: &[u8],
                marker: bool,
                out: &mut Vec<Vec<u8>>,
            ) -> Result<(), PayloadError> {
                out.extend(Self::push(self, payload, marker)?);
                Ok(())
            }

            $crate::payload::impl_depacketizer!(@$kind);
        }
    };
    (@forward) => {
        fn lost(&mut self) {
            Self::lost(self);
        }

        fn flush(&mut self) -> Option<Vec<u8>> {
            Self::flush(self)
        }
    };
    (@stateless) => {
        fn lost(&mut self) {}

        fn flush(&mut self) -> Option<Vec<u8>> {
            None
        }
    };
}
use impl_depacketizer;

/// Writes a public depacketizer over a private state (in a field `inner`, of a type with
/// methods `push`, `lost` and `flush` of its own), with the docs given: the type; `new`, which
/// starts from `$init`, and `Default`; `push` returning `$out` (at most one access unit, or all
/// it completes), `push_into` too if named, `lost` and `flush`; and its [`Depacketizer`] impl.
/// It names [`Depacketizer`], [`PayloadError`] and `impl_depacketizer` as the invoking module
/// imports them.
macro_rules! depacketizer {
    (
        $(#[$doc:meta])*
        pub struct $ty:ident($state:ty) -> $out:ty $(, $push_into:ident)?;
        $(#[$new_doc:meta])*
        pub const fn new() = $init:expr;
        $(#[$push_doc:meta])*
        fn push;
        $(#[$lost_doc:meta])*
        fn lost;
        $(#[$flush_doc:meta])*
        fn flush;
    ) => {
        $(#[$doc])*
        #[derive(Clone, Debug)]
        pub struct $ty {
            inner: $state,
        }

        impl Default for $ty {
            fn default() -> Self {
                Self::new()
            }
        }

        impl $ty {
            $(#[$new_doc])*
            #[must_use]
            pub const fn new() -> Self {
                Self { inner: $init }
            }

            $(#[$push_doc])*
            pub fn push(&mut self, payload: &[u8], marker: bool) -> Result<$out, PayloadError> {
                self.inner.push(payload, marker)
            }

            $(
                /// [`Self::push`] appending to `out`.
                pub fn $push_into(
                    &mut self,
                    payload: &[u8],
                    marker: bool,
                    out: &mut Vec<Vec<u8>>,
                ) -> Result<(), PayloadError> {
                    Depacketizer::push_into(self, payload, marker, out)
                }
            )?

            $(#[$lost_doc])*
            pub fn lost(&mut self) {
                self.inner.lost();
            }

            $(#[$flush_doc])*
            pub fn flush(&mut self) -> Option<Vec<u8>> {
                self.inner.flush()
            }
        }

        impl_depacketizer!($ty: push, lost, flush);
    };
}
use depacketizer;

/// A codec as the SDP names it, for [`Codec::rtpmap`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Codec {
    /// H.264 (RFC 6184), 90 kHz.
    H264,
    /// H.265 (RFC 7798), 90 kHz.
    H265,
    /// AAC in `mpeg4-generic` (RFC 3640), clocked at its sample rate.
    Aac {
        /// The sampling rate, which is the RTP clock rate.
        sample_rate: u32,
        /// The channel count.
        channels: u8,
    },
    /// Opus (RFC 7587): always `opus/48000/2` whatever the stream's channels (§7).
    Opus,
    /// AC-3 (RFC 4184), clocked at its sample rate.
    Ac3 {
        /// The sampling rate, which is the RTP clock rate.
        sample_rate: u32,
        /// The channel count (including LFE).
        channels: u8,
    },
    /// MPEG-1/2 audio (RFC 2250 §3.5, static payload type 14), 90 kHz.
    Mpa,
}

impl Codec {
    /// The `a=rtpmap` encoding name, clock rate and (for audio) channel count:
    /// `("H264", 90000, None)`, `("mpeg4-generic", 48000, Some(2))`, `("opus", 48000, Some(2))`.
    #[must_use]
    pub fn rtpmap(self) -> (&'static str, u32, Option<u8>) {
        match self {
            Self::H264 => ("H264", 90_000, None),
            Self::H265 => ("H265", 90_000, None),
            Self::Aac { sample_rate, channels } => ("mpeg4-generic", sample_rate, Some(channels)),
            Self::Opus => ("opus", 48_000, Some(2)),
            Self::Ac3 { sample_rate, channels } => ("ac3", sample_rate, Some(channels)),
            Self::Mpa => ("MPA", 90_000, None),
        }
    }

    /// What follows `a=rtpmap:<pt> `: `H264/90000`, `mpeg4-generic/44100/2`, `opus/48000/2`.
    #[must_use]
    pub fn rtpmap_value(self) -> String {
        match self.rtpmap() {
            (name, rate, Some(ch)) => format!("{name}/{rate}/{ch}"),
            (name, rate, None) => format!("{name}/{rate}"),
        }
    }

    /// The static payload type (RFC 3551 §6), if the codec has one: 14 for MPEG audio. The
    /// others use a dynamic type (96–127) that the SDP binds.
    #[must_use]
    pub fn static_payload_type(self) -> Option<u8> {
        match self {
            Self::Mpa => Some(PT_MPA),
            _ => None,
        }
    }
}

/// Free function form of [`Codec::rtpmap`].
#[must_use]
pub fn rtpmap(codec: Codec) -> (&'static str, u32, Option<u8>) {
    codec.rtpmap()
}

/// `max_payload` if it is at least `min`, the smallest payload in which `format` carries a byte
/// of media; else [`PayloadError::MaxPayloadTooSmall`].
fn check_max_payload(
    format: &'static str,
    max_payload: usize,
    min: usize,
) -> Result<usize, PayloadError> {
    if max_payload < min {
        return Err(PayloadError::MaxPayloadTooSmall { format, max_payload, min });
    }
    Ok(max_payload)
}

/// `bytes`, or [`PayloadError::Empty`] naming `what` they are if there are none.
fn non_empty<'a>(
    format: &'static str,
    what: &'static str,
    bytes: &'a [u8],
) -> Result<&'a [u8], PayloadError> {
    if bytes.is_empty() {
        return Err(PayloadError::Empty { format, what });
    }
    Ok(bytes)
}

/// Splits the `N`-byte header named `what` off `payload`, or says the payload is too short.
fn split_header<'a, const N: usize>(
    format: &'static str,
    what: &'static str,
    payload: &'a [u8],
) -> Result<(&'a [u8; N], &'a [u8]), PayloadError> {
    payload.split_first_chunk::<N>().ok_or(PayloadError::Truncated {
        format,
        what,
        len: payload.len(),
        need: N,
    })
}

/// Appends `data` to `out` cut into pieces of `chunk` bytes (the last may be shorter), each
/// after the `N`-byte payload header that `header(i, n)` gives for piece `i` of `n`: payloads of
/// at most `N + chunk` bytes. The marker bit is set on the last payload if `mark_last`, else on
/// none.
fn fragment<const N: usize>(
    out: &mut Vec<Payload>,
    data: &[u8],
    chunk: usize,
    mark_last: bool,
    header: impl Fn(usize, usize) -> [u8; N],
) {
    // The packetizers' constructors leave room for a byte; `chunks` would panic on 0.
    let chunk = chunk.max(1);
    let n = data.len().div_ceil(chunk);
    for (i, piece) in data.chunks(chunk).enumerate() {
        let mut bytes = Vec::with_capacity(N + piece.len());
        bytes.extend_from_slice(&header(i, n));
        bytes.extend_from_slice(piece);
        out.push(Payload { bytes, marker: mark_last && i + 1 == n });
    }
}

/// Standard base64 with padding (RFC 4648 §4), as `sprop-*` parameters use it.
fn base64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Lower-case hexadecimal.
fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::with_capacity(2 * bytes.len()), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// The first `n` bytes of a NAL unit's payload with emulation prevention bytes removed
/// (H.264 §7.4.1, H.265 §7.4.2: a 0x03 after two zero bytes), or fewer if it is shorter.
#[must_use]
pub fn unescape_prefix(nal: &[u8], n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n);
    let mut zeros = 0;
    for &b in nal {
        if out.len() == n {
            break;
        }
        if zeros >= 2 && b == 0x03 {
            zeros = 0;
            continue;
        }
        zeros = if b == 0 { zeros + 1 } else { 0 };
        out.push(b);
    }
    out
}

#[cfg(test)]
mod tests {
    use proptest::collection::vec;
    use proptest::prelude::*;

    use super::testutil::avcc;
    use super::*;

    /// One depacketizer of each kind.
    fn depacketizers() -> Vec<Box<dyn Depacketizer>> {
        vec![
            Box::new(H264Depacketizer::new()),
            Box::new(H265Depacketizer::new()),
            Box::new(AacDepacketizer::new()),
            Box::new(AacDepacketizer::with_lengths(6, 2, 2).unwrap()),
            Box::new(OpusDepacketizer::new()),
            Box::new(Ac3Depacketizer::new()),
            Box::new(MpaDepacketizer::new()),
        ]
    }

    /// Packetizes `au` and checks the payload sizes and marker bits; `None` if refused.
    fn packetize(
        p: &mut dyn Packetizer,
        au: &[u8],
        max: usize,
        marker: bool,
    ) -> Option<Vec<Payload>> {
        let mut out = vec![Payload { bytes: vec![], marker: false }];
        if p.packetize(au, &mut out).is_err() {
            assert_eq!(out.len(), 1, "nothing appended on an error");
            return None;
        }
        out.remove(0);
        for (i, pl) in out.iter().enumerate() {
            assert!(pl.bytes.len() <= max, "payload of {} bytes over {max}", pl.bytes.len());
            assert_eq!(pl.marker, marker && i + 1 == out.len());
        }
        Some(out)
    }

    /// Feeds payloads to a depacketizer, collecting what it returns.
    fn depacketize(d: &mut dyn Depacketizer, payloads: &[Payload]) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        for pl in payloads {
            d.push_into(&pl.bytes, pl.marker, &mut got).unwrap();
        }
        got
    }

    /// The NAL units of H.264 (`h265` false) or H.265 access unit `au` that the packetizer
    /// sends, with 4-byte lengths, if it is a valid AU.
    fn sent_nals(au: &[u8], len_size: usize, h265: bool) -> Option<Vec<u8>> {
        let syntax = if h265 { nal::Syntax::H265 } else { nal::Syntax::H264 };
        let nals = nal::split_au(syntax, au, len_size).ok()?;
        let kept: Vec<&[u8]> = nals
            .into_iter()
            .filter(|n| {
                let t = syntax.nal_type(n[0]);
                !if h265 { matches!(t, 35 | 38 | 48..) } else { matches!(t, 0 | 9 | 12 | 24..) }
            })
            .collect();
        Some(avcc(4, &kept))
    }

    /// Checks one AU through the H.264 and H.265 packetizers (without parameter sets) and
    /// depacketizers.
    fn video_round_trip(au: &[u8], len_size: u8, max: usize) {
        for h265 in [false, true] {
            let p: Result<Box<dyn Packetizer>, _> = if h265 {
                H265Packetizer::new(len_size, vec![], vec![], vec![], max).map(|p| Box::new(p) as _)
            } else {
                H264Packetizer::new(len_size, vec![], vec![], max).map(|p| Box::new(p) as _)
            };
            let Ok(mut p) = p else {
                assert!(max < 4 || len_size == 3);
                continue;
            };
            let payloads = packetize(p.as_mut(), au, max, true);
            let want = sent_nals(au, usize::from(len_size), h265);
            assert_eq!(payloads.is_some(), want.is_some());
            let (Some(payloads), Some(want)) = (payloads, want) else { continue };
            let mut d: Box<dyn Depacketizer> = if h265 {
                Box::new(H265Depacketizer::new())
            } else {
                Box::new(H264Depacketizer::new())
            };
            let got = depacketize(d.as_mut(), &payloads);
            if want.is_empty() {
                assert!(got.is_empty());
            } else {
                assert_eq!(got, [want]);
            }
        }
    }

    proptest! {
        /// Any payloads, markers, losses and flushes: no depacketizer panics.
        #[test]
        fn depacketizers_never_panic(
            packets in vec((vec(any::<u8>(), 0..400), any::<bool>(), 0u8..10), 0..40),
        ) {
            for mut d in depacketizers() {
                let mut out = Vec::new();
                for (payload, marker, action) in &packets {
                    match action {
                        0 => d.lost(),
                        1 => out.extend(d.flush()),
                        _ => {}
                    }
                    let _ = d.push_into(payload, *marker, &mut out);
                }
            }
        }

        /// Depacketizers given payloads whose first bytes are the interesting ones (FU, STAP,
        /// AP and FU headers with S/E bits, AAC headers, AC-3 frame types) do not panic either.
        #[test]
        fn depacketizers_never_panic_on_likely_headers(
            packets in vec((
                prop::sample::select(vec![
                    0x7c, 0x1c, 0x78, 0x18, 0x65, 0x62, 0x60, 0x26, 0x64, 0x00, 0x01, 0x02, 0x03,
                ]),
                prop::sample::select(vec![0x80, 0x40, 0xc0, 0x00, 0x85, 0x45, 0x05, 0x10, 0x01]),
                vec(any::<u8>(), 0..64),
                any::<bool>(),
            ), 0..60),
        ) {
            for mut d in depacketizers() {
                let mut out = Vec::new();
                for (a, b, rest, marker) in &packets {
                    let mut payload = vec![*a, *b];
                    payload.extend_from_slice(rest);
                    let _ = d.push_into(&payload, *marker, &mut out);
                }
            }
        }

        /// Any bytes as an access unit: every packetizer refuses it or sends payloads that fit,
        /// with the right marker bits, that its depacketizer turns back into it.
        #[test]
        fn packetizers_never_panic_and_round_trip(
            au in vec(any::<u8>(), 0..3000),
            max in 0usize..1500,
            len_size in prop::sample::select(vec![1u8, 2, 3, 4]),
        ) {
            video_round_trip(&au, len_size, max);
            let want = std::slice::from_ref(&au);
            if let Ok(mut p) = AacPacketizer::new(max)
                && let Some(payloads) = packetize(&mut p, &au, max, true)
            {
                prop_assert_eq!(depacketize(&mut AacDepacketizer::new(), &payloads), want);
            }
            let mut p = OpusPacketizer::with_max_payload(max);
            if let Some(payloads) = packetize(&mut p, &au, max, false) {
                prop_assert_eq!(depacketize(&mut OpusDepacketizer::new(), &payloads), want);
            }
            if let Ok(mut p) = Ac3Packetizer::new(max)
                && let Some(payloads) = packetize(&mut p, &au, max, true)
            {
                prop_assert_eq!(depacketize(&mut Ac3Depacketizer::new(), &payloads), want);
            }
            // MPEG audio splits payloads by frame headers, which random bytes are not.
            if let Ok(mut p) = MpaPacketizer::new(max) {
                let _ = packetize(&mut p, &au, max, false);
            }
        }

        /// Access units of well-formed NAL units of every type round trip through the H.264
        /// and H.265 formats at any payload size.
        #[test]
        fn nal_units_round_trip(
            nals in vec((any::<u8>(), vec(any::<u8>(), 1..3000)), 0..6),
            max in 4usize..1500,
        ) {
            let nals: Vec<Vec<u8>> = nals
                .into_iter()
                .map(|(h, mut body)| {
                    // forbidden_zero_bit clear; for H.265 the second header byte is body[0].
                    body.insert(0, h & 0x7f);
                    body
                })
                .collect();
            let refs: Vec<&[u8]> = nals.iter().map(Vec::as_slice).collect();
            let longest = refs.iter().map(|n| n.len()).max().unwrap_or(0);
            for len_size in [1u8, 2, 4] {
                if longest < 1 << (8 * u32::from(len_size)).min(31) {
                    video_round_trip(&avcc(len_size, &refs), len_size, max);
                }
            }
        }
    }

    #[test]
    fn rtpmap_values() {
        assert_eq!(Codec::H264.rtpmap(), ("H264", 90_000, None));
        assert_eq!(Codec::H264.rtpmap_value(), "H264/90000");
        assert_eq!(Codec::H265.rtpmap_value(), "H265/90000");
        assert_eq!(
            rtpmap(Codec::Aac { sample_rate: 44_100, channels: 2 }),
            ("mpeg4-generic", 44_100, Some(2))
        );
        assert_eq!(
            Codec::Aac { sample_rate: 48_000, channels: 1 }.rtpmap_value(),
            "mpeg4-generic/48000/1"
        );
        assert_eq!(Codec::Opus.rtpmap_value(), "opus/48000/2");
        assert_eq!(Codec::Ac3 { sample_rate: 48_000, channels: 6 }.rtpmap_value(), "ac3/48000/6");
        assert_eq!(Codec::Mpa.rtpmap_value(), "MPA/90000");
        assert_eq!(Codec::Mpa.static_payload_type(), Some(14));
        assert_eq!(Codec::H264.static_payload_type(), None);
    }

    #[test]
    fn unescaping_drops_emulation_prevention_bytes() {
        assert_eq!(unescape_prefix(&[1, 0, 0, 3, 0, 0, 3, 1, 2], 9), [1, 0, 0, 0, 0, 1, 2]);
        assert_eq!(unescape_prefix(&[0, 0, 3, 3], 9), [0, 0, 3]);
        assert_eq!(unescape_prefix(&[0, 0, 3, 0, 7], 2), [0, 0]);
        assert_eq!(unescape_prefix(&[], 4), Vec::<u8>::new());
    }

    #[test]
    fn hex_and_base64() {
        assert_eq!(hex(&[0x11, 0x90, 0x0a]), "11900a");
        assert_eq!(base64(&[0x68, 0xcb, 0x83, 0xcb, 0x20]), "aMuDyyA=");
    }
}
