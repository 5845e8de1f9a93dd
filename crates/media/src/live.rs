//! A publisher's live feed as an object's native packets (sans-IO): what RTSP RECORD (RFC 2326
//! §10.11) brings in, made into the [`NativeUnit`]s an ingested MP4 is stored as.
//!
//! Why: isochron stores every object as the packets it sends (`docs/design/block-format.md`),
//! and a live recording is a write stream like any other (XTREAM §2.2): if the feed's packets
//! are stored as they came, with the timing every object carries, the recording plays, seeks
//! and replicates as any title does, while the feed is still running or after. So nothing is
//! decoded or packetized again: each RTP payload is kept as received.
//!
//! - **Tracks** ([`announced_track`]) come from the publisher's ANNOUNCE: each media section's
//!   encoding, clock and format parameters (RFC 8866 §6.6, §6.15). The decoder configuration
//!   every object keeps is rebuilt from them: H.264's `sprop-parameter-sets` (RFC 6184 §8.1) as
//!   an `avcC`, H.265's `sprop-vps`/`-sps`/`-pps` (RFC 7798 §7.1), AAC's `config=` (RFC 3640
//!   §4.1, mode AAC-hbr; or, for AAC in LATM, RFC 6416 §6.1, the AudioSpecificConfig inside
//!   its StreamMuxConfig), an OpusHead for Opus (RFC 7845 §5.1). The payload types are the
//!   object's own (96 + the track's index), as for any native object; the format parameters are
//!   the publisher's, which describe the payloads as they are stored.
//! - **Time** ([`LiveIngest`]). The object's zero is the first packet's arrival. A track's
//!   presentation time is its first packet's arrival plus its RTP timestamp's advance since,
//!   on its clock; the stored RTP timestamp is that time on the clock, so every track shares
//!   the zero and players keep them in sync. A packet's send time is its arrival: played back,
//!   the feed leaves as it came.
//! - **Order.** Packets are kept in arrival order. Each track's sequence number (extended, from
//!   its first) is its `track_seq`; a packet at or below the highest already taken (late, or a
//!   duplicate) is dropped, and the gaps it leaves are counted.
//! - **Random access.** The first packet of an access unit (the packets of one RTP timestamp)
//!   of the first video track that holds an IDR picture (H.264 NAL type 5, RFC 6184 §5.6–5.8;
//!   H.265 IRAP types 16–21, RFC 7798 §4.4) starts a seek point at the unit's presentation
//!   time. So packets of that track are held until its access unit is complete (the marker
//!   bit, or the next timestamp), and every packet after them in arrival order with them.
//!   Without video, the first audio track's packets at most one a second.
//! - **MPEG-TS.** A feed published as a transport stream (`MP2T/90000` over RTSP, RFC 2250; or
//!   SRT, whose messages the server wraps the same way) is one track of codec
//!   [`Codec::Mp2t`], payload type 33, each payload kept whole: the recording's payloads, in
//!   order, are the published stream byte for byte. Its seek points are the payloads holding a
//!   TS packet whose `random_access_indicator` is set ([`ts_random_access`]).
//!
//! Not here: sockets and RTSP (`isochron-rtsp`, the server), blocks, admission and placement
//! (`isochron-diskio`, the scheduler).

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use isochron_base::MediaTime;
use isochron_rtp::RtpHeader;
use isochron_rtp::payload::Codec as RtpCodec;

use crate::StreamKind;
use crate::container::Codec;
use crate::native::{FIRST_DYNAMIC_PT, HevcParameterSets, MAX_TRACKS, NativeTrack, NativeUnit};

/// Without video, a seek point at most this often.
const AUDIO_SEEK_SPACING: Duration = Duration::from_secs(1);

/// Most packets of one access unit held for its verdict (a larger one is released as it is,
/// not a seek point).
const MAX_HELD: usize = 4096;

/// RFC 3551's static payload type of MPEG-2 transport streams (RFC 2250).
pub const MP2T_PT: u8 = 33;

/// One media section of a publisher's description, as [`announced_track`] reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Announced<'a> {
    /// The `rtpmap` encoding name.
    pub encoding: &'a str,
    /// The RTP clock rate, Hz.
    pub clock_rate: u32,
    /// The `rtpmap` channel count; 0 for none.
    pub channels: u8,
    /// The `fmtp` parameters (what follows `a=fmtp:PT `).
    pub fmtp: &'a str,
}

/// Why a feed cannot be recorded. Messages name the track (0-based, in the description's
/// order).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LiveError {
    /// An encoding isochron does not store as a native track.
    #[error(
        "track {track}: encoding {encoding:?} is not supported (H264, H265, mpeg4-generic, \
         MP4A-LATM, opus, MP2T)"
    )]
    Unsupported {
        /// The track.
        track: usize,
        /// Its encoding name.
        encoding: String,
    },
    /// A format parameter is missing or cannot be read.
    #[error("track {track} ({encoding}): {problem}")]
    BadFormat {
        /// The track.
        track: usize,
        /// Its encoding name.
        encoding: String,
        /// What is wrong, naming the parameter.
        problem: String,
    },
    /// More tracks than an object can have.
    #[error("{count} tracks: at most {MAX_TRACKS} are supported")]
    TooManyTracks {
        /// How many the description has.
        count: usize,
    },
}

/// The track `index` of an object recorded from the media section `a`.
///
/// # Errors
///
/// [`LiveError`] names the track and the encoding or parameter at fault.
pub fn announced_track(index: usize, a: &Announced<'_>) -> Result<NativeTrack, LiveError> {
    if index >= MAX_TRACKS {
        return Err(LiveError::TooManyTracks { count: index + 1 });
    }
    let bad = |problem: String| LiveError::BadFormat {
        track: index,
        encoding: a.encoding.to_string(),
        problem,
    };
    let params = Params(a.fmtp);
    // The picture's size, from the SPS (players size their decoder and the fMP4 sample entry
    // from it; a description carries none).
    let mut dimensions = (0, 0);
    let (codec, rtp, config) = match a.encoding.to_ascii_lowercase().as_str() {
        "h264" => {
            let sets = params.get("sprop-parameter-sets").ok_or_else(|| {
                bad("no sprop-parameter-sets: the parameter sets must be in the description".into())
            })?;
            let nals = base64_list(sets).map_err(|e| bad(format!("sprop-parameter-sets: {e}")))?;
            let (sps, pps): (Vec<_>, Vec<_>) =
                nals.into_iter().filter(|n| !n.is_empty()).partition(|n| n[0] & 0x1F == 7);
            let pps: Vec<Vec<u8>> = pps.into_iter().filter(|n| n[0] & 0x1F == 8).collect();
            if sps.is_empty() || pps.is_empty() {
                return Err(bad("sprop-parameter-sets: no SPS and PPS".into()));
            }
            dimensions = h264_dimensions(&sps[0])
                .map_err(|e| bad(format!("sprop-parameter-sets: the SPS does not parse: {e}")))?;
            (Codec::H264, RtpCodec::H264, crate::native::avcc(4, &sps, &pps))
        }
        "h265" => {
            let mut sets = HevcParameterSets { nal_length_size: 4, ..Default::default() };
            for (name, list) in [
                ("sprop-vps", &mut sets.vps),
                ("sprop-sps", &mut sets.sps),
                ("sprop-pps", &mut sets.pps),
            ] {
                let value = params.get(name).ok_or_else(|| bad(format!("no {name}")))?;
                *list = base64_list(value).map_err(|e| bad(format!("{name}: {e}")))?;
            }
            let sps = sets.sps.first().ok_or_else(|| bad("sprop-sps: no SPS".into()))?;
            dimensions = h265_dimensions(sps)
                .map_err(|e| bad(format!("sprop-sps: the SPS does not parse: {e}")))?;
            (Codec::H265, RtpCodec::H265, sets.encode())
        }
        "mpeg4-generic" => {
            let mode = params.get("mode").unwrap_or_default();
            let hbr = mode.eq_ignore_ascii_case("AAC-hbr")
                && params.get("sizelength") == Some("13")
                && params.get("indexlength") == Some("3")
                && params.get("indexdeltalength") == Some("3");
            if !hbr {
                return Err(bad(format!(
                    "mode={mode:?}: only mode=AAC-hbr with sizelength=13, indexlength=3 and \
                     indexdeltalength=3 is supported"
                )));
            }
            let hex = params.get("config").ok_or_else(|| bad("no config".into()))?;
            let asc = hex_bytes(hex).ok_or_else(|| bad(format!("config={hex:?} is not hex")))?;
            if asc.len() < 2 {
                return Err(bad(format!("config={hex:?}: too short for an AudioSpecificConfig")));
            }
            let codec = RtpCodec::Aac { sample_rate: a.clock_rate, channels: a.channels.max(1) };
            (Codec::Aac, codec, asc)
        }
        "mp4a-latm" => {
            // Stored as it came, so the description's clock and channels are the track's.
            if params.get("cpresent").is_some_and(|c| c != "0") {
                return Err(bad("cpresent=1: the configuration must be in the description, \
                                cpresent=0"
                    .into()));
            }
            let hex = params.get("config").ok_or_else(|| bad("no config".into()))?;
            let mux = hex_bytes(hex).ok_or_else(|| bad(format!("config={hex:?} is not hex")))?;
            let asc = latm_audio_specific_config(&mux)
                .map_err(|e| bad(format!("config={hex:?}: {e}")))?;
            return Ok(NativeTrack {
                codec: Codec::Aac,
                kind: Codec::Aac.kind(),
                encoding: "MP4A-LATM",
                clock_rate: a.clock_rate,
                channels: a.channels,
                payload_type: FIRST_DYNAMIC_PT + index as u8,
                fmtp: a.fmtp.trim().to_string(),
                config: asc,
                width: 0,
                height: 0,
                language: None,
                container_id: index as u64,
            });
        }
        "mp2t" => {
            // A transport stream, stored as it came: RFC 2250's static payload type.
            if a.clock_rate != 90_000 {
                return Err(bad(format!("clock {} Hz, where MP2T runs at 90000", a.clock_rate)));
            }
            return Ok(NativeTrack {
                codec: Codec::Mp2t,
                kind: Codec::Mp2t.kind(),
                encoding: "MP2T",
                clock_rate: 90_000,
                channels: 0,
                payload_type: MP2T_PT,
                fmtp: String::new(),
                config: Vec::new(),
                width: 0,
                height: 0,
                language: None,
                container_id: index as u64,
            });
        }
        "opus" => {
            let stereo = params.get("sprop-stereo") == Some("1") || a.channels == 2;
            (Codec::Opus, RtpCodec::Opus, opus_head(if stereo { 2 } else { 1 }))
        }
        _ => {
            return Err(LiveError::Unsupported { track: index, encoding: a.encoding.to_string() });
        }
    };
    let (encoding, clock_rate, channels) = rtp.rtpmap();
    if clock_rate != a.clock_rate {
        return Err(bad(format!(
            "clock {} Hz, where {encoding} runs at {clock_rate}",
            a.clock_rate
        )));
    }
    Ok(NativeTrack {
        codec,
        kind: codec.kind(),
        encoding,
        clock_rate,
        channels: channels.unwrap_or(0),
        // Tracks are at most MAX_TRACKS (8): the dynamic types stay in 96..=103.
        payload_type: FIRST_DYNAMIC_PT + index as u8,
        fmtp: a.fmtp.trim().to_string(),
        config,
        width: dimensions.0,
        height: dimensions.1,
        language: None,
        container_id: index as u64,
    })
}

/// The width and height in pixels of the pictures an H.264 SPS NAL unit describes, cropped
/// (ITU-T H.264 §7.4.2.1.1); larger than a track can say (65,535) is an error.
fn h264_dimensions(sps: &[u8]) -> Result<(u16, u16), String> {
    use h264_reader::nal::sps::SeqParameterSet;
    use h264_reader::rbsp::{BitReader, decode_nal};
    let rbsp = decode_nal(sps).map_err(|e| e.to_string())?;
    let sps =
        SeqParameterSet::from_bits(BitReader::new(&rbsp[..])).map_err(|e| format!("{e:?}"))?;
    let (w, h) = sps.pixel_dimensions().map_err(|e| format!("{e:?}"))?;
    let fit = |v: u32| u16::try_from(v).map_err(|_| format!("{w}x{h} pixels: too large"));
    Ok((fit(w)?, fit(h)?))
}

/// The width and height in pixels of the pictures an H.265 SPS NAL unit describes, cut to its
/// conformance window (ITU-T H.265 §7.3.2.2.1, §7.3.3, and §7.4.3.2.1 for the window's units).
fn h265_dimensions(sps: &[u8]) -> Result<(u16, u16), String> {
    // The RBSP: the 2-byte header dropped, each emulation prevention byte (00 00 03) removed.
    let mut rbsp = Vec::with_capacity(sps.len());
    let mut zeros = 0;
    for &b in sps.get(2..).unwrap_or_default() {
        if zeros >= 2 && b == 3 {
            zeros = 0;
            continue;
        }
        zeros = if b == 0 { zeros + 1 } else { 0 };
        rbsp.push(b);
    }
    let mut r = Bits { data: &rbsp, at: 0 };
    r.skip(4)?; // sps_video_parameter_set_id
    let sub_layers = r.take(3)? as usize; // sps_max_sub_layers_minus1
    r.skip(1)?; // sps_temporal_id_nesting_flag
    // profile_tier_level(1, sub_layers): the general profile, flags and level (96 bits), each
    // sub-layer's two presence flags, their padding to 8 pairs, then what they say is present.
    r.skip(96)?;
    let mut present = Vec::with_capacity(sub_layers);
    for _ in 0..sub_layers {
        present.push((r.take(1)? == 1, r.take(1)? == 1));
    }
    if sub_layers > 0 {
        r.skip(2 * (8 - sub_layers))?;
    }
    for (profile, level) in present {
        r.skip(if profile { 88 } else { 0 } + if level { 8 } else { 0 })?;
    }
    r.ue()?; // sps_seq_parameter_set_id
    let chroma = r.ue()?;
    if chroma == 3 {
        r.skip(1)?; // separate_colour_plane_flag
    }
    let (mut width, mut height) = (r.ue()?, r.ue()?);
    if r.take(1)? == 1 {
        let (sub_w, sub_h) = match chroma {
            1 => (2, 2),
            2 => (2, 1),
            _ => (1, 1),
        };
        let (left, right, top, bottom) = (r.ue()?, r.ue()?, r.ue()?, r.ue()?);
        width = width.saturating_sub(sub_w * (left + right));
        height = height.saturating_sub(sub_h * (top + bottom));
    }
    let fit = |v: u64| u16::try_from(v).map_err(|_| format!("{width}x{height} pixels: too large"));
    Ok((fit(width)?, fit(height)?))
}

/// `a=fmtp` parameters: `key=value` pairs separated by `;` (keys case-insensitive).
struct Params<'a>(&'a str);

impl<'a> Params<'a> {
    fn get(&self, key: &str) -> Option<&'a str> {
        self.0.split(';').find_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            k.trim().eq_ignore_ascii_case(key).then(|| v.trim())
        })
    }
}

/// A comma-separated list of base64 NAL units.
fn base64_list(value: &str) -> Result<Vec<Vec<u8>>, String> {
    value
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| STANDARD.decode(s.trim()).map_err(|e| format!("{s:?} is not base64: {e}")))
        .collect()
}

fn hex_bytes(s: &str) -> Option<Vec<u8>> {
    let s = s.trim();
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

/// The AudioSpecificConfig inside an LATM `StreamMuxConfig` (RFC 6416 §6.1 `config=`; ISO/IEC
/// 14496-3 §1.7.3): version 0, one program of one layer, every frame its own length (frame
/// length type 0), as GStreamer's and ffmpeg's payloaders write it. The configuration starts at
/// bit 15, not on a byte; it is copied out bit for bit, as long as it reads (AAC and HE-AAC
/// object types, a channel configuration, the GA specific part).
fn latm_audio_specific_config(mux: &[u8]) -> Result<Vec<u8>, String> {
    let mut r = Bits { data: mux, at: 0 };
    if r.take(1)? != 0 {
        return Err("audioMuxVersion 1 is not supported".into());
    }
    let same_framing = r.take(1)?;
    let sub_frames = r.take(6)?;
    let programs = r.take(4)?;
    let layers = r.take(3)?;
    if same_framing != 1 || sub_frames != 0 || programs != 0 || layers != 0 {
        return Err(format!(
            "only one program of one layer, one frame per element is supported (same time \
             framing {same_framing}, {} subframes, {} programs, {} layers)",
            sub_frames + 1,
            programs + 1,
            layers + 1
        ));
    }
    let start = r.at;
    let object_type = |r: &mut Bits<'_>| -> Result<u32, String> {
        let t = r.take(5)?;
        Ok(if t == 31 { 32 + r.take(6)? } else { t })
    };
    let frequency = |r: &mut Bits<'_>| -> Result<(), String> {
        if r.take(4)? == 15 {
            r.take(24)?;
        }
        Ok(())
    };
    let mut aot = object_type(&mut r)?;
    frequency(&mut r)?;
    let channels = r.take(4)?;
    if aot == 5 || aot == 29 {
        // SBR, PS: the extension's rate, then the core's object type.
        frequency(&mut r)?;
        aot = object_type(&mut r)?;
    }
    if !matches!(aot, 1..=4 | 6 | 7) || channels == 0 {
        return Err(format!(
            "audio object type {aot} with channel configuration {channels}: only AAC (types 1 \
             to 4, 6, 7) with a channel configuration is supported"
        ));
    }
    // GASpecificConfig: frameLengthFlag, dependsOnCoreCoder (and its delay), extensionFlag.
    r.take(1)?;
    if r.take(1)? == 1 {
        r.take(14)?;
    }
    r.take(1)?;
    // Backward-compatible SBR signalling (§1.6.5.2): what ffmpeg's encoder writes after an
    // AAC-LC configuration, and GStreamer copies.
    if r.peek(11) == Some(0x2b7) {
        r.take(11)?;
        if object_type(&mut r)? == 5 && r.take(1)? == 1 {
            frequency(&mut r)?;
            if r.peek(11) == Some(0x548) {
                r.take(12)?;
            }
        }
    }
    let end = r.at;
    if r.take(3)? != 0 {
        return Err("frameLengthType other than 0 is not supported".into());
    }
    let mut copy = Bits { data: mux, at: start };
    let mut asc = vec![0u8; (end - start).div_ceil(8)];
    for i in 0..end - start {
        if copy.take(1)? == 1 {
            asc[i / 8] |= 0x80 >> (i % 8);
        }
    }
    Ok(asc)
}

/// Reads bits, most significant first.
struct Bits<'a> {
    data: &'a [u8],
    at: usize,
}

impl Bits<'_> {
    /// The next `n` bits, if there are as many, without taking them.
    fn peek(&self, n: usize) -> Option<u32> {
        Bits { data: self.data, at: self.at }.take(n).ok()
    }

    fn take(&mut self, n: usize) -> Result<u32, String> {
        let mut v = 0u32;
        for _ in 0..n {
            let byte = self.data.get(self.at / 8).ok_or("too short")?;
            v = (v << 1) | u32::from((byte >> (7 - self.at % 8)) & 1);
            self.at += 1;
        }
        Ok(v)
    }

    fn skip(&mut self, n: usize) -> Result<(), String> {
        if self.at + n > self.data.len() * 8 {
            return Err("too short".into());
        }
        self.at += n;
        Ok(())
    }

    /// An unsigned Exp-Golomb code (ITU-T H.265 §9.2).
    fn ue(&mut self) -> Result<u64, String> {
        let mut zeros = 0;
        while self.take(1)? == 0 {
            zeros += 1;
            if zeros > 31 {
                return Err("an Exp-Golomb code longer than 32 bits".into());
            }
        }
        Ok((1u64 << zeros) - 1 + u64::from(self.take(zeros)?))
    }
}

/// An OpusHead (RFC 7845 §5.1) for `channels` (1 or 2, mapping family 0, no pre-skip known).
fn opus_head(channels: u8) -> Vec<u8> {
    let mut h = b"OpusHead".to_vec();
    h.extend_from_slice(&[1, channels]);
    h.extend_from_slice(&0u16.to_le_bytes());
    h.extend_from_slice(&48_000u32.to_le_bytes());
    h.extend_from_slice(&0i16.to_le_bytes());
    h.push(0);
    h
}

/// Whether `payload` (RFC 6184 for H.264, RFC 7798 for H.265) carries a random-access picture
/// or its start: an IDR or IRAP NAL unit alone, in an aggregation packet, or a fragment's
/// first.
#[must_use]
pub fn starts_random_access(codec: Codec, payload: &[u8]) -> bool {
    match codec {
        Codec::H264 => {
            let Some(&b0) = payload.first() else { return false };
            match b0 & 0x1F {
                5 => true,
                // STAP-A: 16-bit sizes, then each NAL unit.
                24 => nal_units(&payload[1..]).any(|n| n.first().is_some_and(|b| b & 0x1F == 5)),
                // FU-A: the start bit and the fragmented type.
                28 => payload.get(1).is_some_and(|h| h & 0x80 != 0 && h & 0x1F == 5),
                _ => false,
            }
        }
        Codec::H265 => {
            let irap = |t: u8| (16..=21).contains(&t);
            let Some(&b0) = payload.first() else { return false };
            match (b0 >> 1) & 0x3F {
                // Aggregation packet: a 2-byte header, then 16-bit sizes and NAL units.
                48 => payload.get(2..).is_some_and(|p| {
                    nal_units(p).any(|n| n.first().is_some_and(|b| irap((b >> 1) & 0x3F)))
                }),
                // Fragmentation unit: the start bit and the fragmented type.
                49 => payload.get(2).is_some_and(|h| h & 0x80 != 0 && irap(h & 0x3F)),
                t => irap(t),
            }
        }
        _ => false,
    }
}

/// Whether a payload of whole 188-byte TS packets holds one whose adaptation field sets
/// `random_access_indicator` (ISO/IEC 13818-1 §2.4.3.5; muxers set it on a video key frame's
/// first packet).
#[must_use]
pub fn ts_random_access(payload: &[u8]) -> bool {
    payload
        .chunks_exact(188)
        .any(|p| p[0] == 0x47 && p[3] & 0x20 != 0 && p[4] > 0 && p[5] & 0x40 != 0)
}

/// The NAL units of an aggregation packet's body (each after a 16-bit size).
fn nal_units(mut b: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        let size = usize::from(u16::from_be_bytes([*b.first()?, *b.get(1)?]));
        let nal = b.get(2..2 + size)?;
        b = &b[2 + size..];
        Some(nal)
    })
}

/// What a feed brought so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveStats {
    /// Packets taken (made into units).
    pub packets: u64,
    /// Payload bytes taken.
    pub bytes: u64,
    /// Packets at or below a number already taken: late or duplicated, dropped.
    pub dropped: u64,
    /// Numbers skipped between packets taken: lost on the way (or reordered past).
    pub gaps: u64,
    /// Packets not RTP, or of another payload type than their track's.
    pub foreign: u64,
}

#[derive(Clone, Copy, Debug)]
struct TrackClock {
    /// The first packet's arrival.
    arrival: MediaTime,
    /// Its timestamp, extended, and the last one, extended.
    first_ts: i64,
    last_ts: i64,
    /// The highest sequence number taken, extended.
    highest_seq: i64,
    first_seq: i64,
}

/// Extends a 16- or 32-bit counter `n` (modulo `modulus`) to the value nearest `last`.
fn extend(last: i64, n: u32, modulus: i64) -> i64 {
    let half = modulus / 2;
    let low = last.rem_euclid(modulus);
    let mut d = i64::from(n) - low;
    if d > half {
        d -= modulus;
    } else if d < -half {
        d += modulus;
    }
    last + d
}

/// The units of one live feed, made as its packets arrive (see the module docs).
#[derive(Debug)]
pub struct LiveIngest {
    tracks: Vec<NativeTrack>,
    /// The RTP payload type each track's packets carry (the publisher's).
    payload_types: Vec<u8>,
    clocks: Vec<Option<TrackClock>>,
    /// The track whose key frames are seek points.
    seek_track: Option<usize>,
    video: bool,
    last_seek: Option<MediaTime>,
    /// Units made, in arrival order; the first `released` of them may go.
    queue: VecDeque<NativeUnit>,
    released: usize,
    /// The seek track's open access unit: its timestamp, the queue index of its first packet,
    /// and whether it holds a random-access picture.
    open: Option<(i64, usize, bool)>,
    /// After [`LiveIngest::rejoin`], each track's next `track_seq` (its numbers go on from it).
    resume: Vec<i64>,
    stats: LiveStats,
}

impl LiveIngest {
    /// A feed of `tracks`, whose packets carry payload types `payload_types` (the publisher's,
    /// by track).
    #[must_use]
    pub fn new(tracks: Vec<NativeTrack>, payload_types: Vec<u8>) -> Self {
        let tracks_len = tracks.len();
        let seek_track = tracks
            .iter()
            .position(|t| t.kind == StreamKind::Video)
            .or_else(|| (!tracks.is_empty()).then_some(0));
        let video = tracks.iter().any(|t| t.kind == StreamKind::Video);
        Self {
            clocks: vec![None; tracks.len()],
            tracks,
            payload_types,
            seek_track,
            video,
            last_seek: None,
            queue: VecDeque::new(),
            released: 0,
            open: None,
            resume: vec![0; tracks_len],
            stats: LiveStats::default(),
        }
    }

    /// The tracks, by index.
    #[must_use]
    pub fn tracks(&self) -> &[NativeTrack] {
        &self.tracks
    }

    /// Counters so far.
    #[must_use]
    pub fn stats(&self) -> LiveStats {
        self.stats
    }

    /// An RTP packet (header included) of track `track` arrived `arrival` after the feed began
    /// (the caller's clock, nondecreasing). What is not RTP of the track's payload type is
    /// counted and ignored.
    pub fn handle_rtp(&mut self, arrival: MediaTime, track: usize, packet: &[u8]) {
        let Ok((h, range)) = RtpHeader::parse(packet) else {
            self.stats.foreign += 1;
            return;
        };
        let (Some(t), Some(&pt)) = (self.tracks.get(track), self.payload_types.get(track)) else {
            self.stats.foreign += 1;
            return;
        };
        if h.payload_type != pt || range.is_empty() {
            self.stats.foreign += 1;
            return;
        }
        let (clock_rate, codec) = (t.clock_rate.max(1), t.codec);
        let resume = self.resume[track];
        let c = self.clocks[track].get_or_insert_with(|| TrackClock {
            arrival,
            first_ts: i64::from(h.timestamp),
            last_ts: i64::from(h.timestamp),
            highest_seq: i64::from(h.sequence) - 1,
            first_seq: i64::from(h.sequence) - resume,
        });
        let seq = extend(c.highest_seq, u32::from(h.sequence), 1 << 16);
        if seq <= c.highest_seq {
            self.stats.dropped += 1;
            return;
        }
        self.stats.gaps += (seq - c.highest_seq - 1) as u64;
        c.highest_seq = seq;
        let ts = extend(c.last_ts, h.timestamp, 1 << 32);
        c.last_ts = ts;
        // Presentation time: the track's first arrival plus its clock's advance (a B-frame's
        // may be a little before the first's: held at zero).
        let offset_ns = i128::from(ts - c.first_ts) * 1_000_000_000 / i128::from(clock_rate);
        let npt_ns = (i128::from(c.arrival.as_nanos()) + offset_ns).max(0);
        let npt = MediaTime::from_nanos(u64::try_from(npt_ns).unwrap_or(u64::MAX));
        let rtp_time = (npt_ns * i128::from(clock_rate) / 1_000_000_000) as u32;
        let track_seq = (seq - c.first_seq) as u32;
        let payload = packet[range].to_vec();
        self.stats.packets += 1;
        self.stats.bytes += payload.len() as u64;
        let mut unit = NativeUnit {
            track: track as u8,
            send_time: arrival,
            rtp_time,
            track_seq,
            marker: h.marker,
            random_access: false,
            npt,
            payload,
        };
        if codec == Codec::Mp2t {
            // Each payload is whole TS packets: a seek point where one says a random access
            // starts (ISO/IEC 13818-1 §2.4.3.5, the adaptation field's indicator).
            unit.random_access = Some(track) == self.seek_track && ts_random_access(&unit.payload);
            self.queue.push_back(unit);
            self.release_upto_open();
            return;
        }
        if Some(track) != self.seek_track {
            self.queue.push_back(unit);
            self.release_upto_open();
            return;
        }
        if !self.video {
            let seek = self.last_seek.is_none_or(|l| npt >= l + AUDIO_SEEK_SPACING);
            if seek {
                self.last_seek = Some(npt);
                unit.random_access = true;
            }
            self.queue.push_back(unit);
            self.release_upto_open();
            return;
        }
        // The seek track's access units: one timestamp's packets.
        if self.open.is_some_and(|(open_ts, _, _)| open_ts != ts) {
            self.close_unit();
        }
        let random = starts_random_access(codec, &unit.payload);
        let index = self.queue.len();
        self.queue.push_back(unit);
        let open = self.open.get_or_insert((ts, index, false));
        open.2 |= random;
        if h.marker || self.queue.len() - open.1 > MAX_HELD {
            self.close_unit();
        }
        self.release_upto_open();
    }

    /// The seek track's access unit is complete: its first packet starts a seek point if it
    /// holds a random-access picture.
    fn close_unit(&mut self) {
        let Some((_, first, random)) = self.open.take() else { return };
        if random && let Some(u) = self.queue.get_mut(first) {
            u.random_access = true;
        }
    }

    fn release_upto_open(&mut self) {
        self.released = self.open.map_or(self.queue.len(), |(_, first, _)| first);
    }

    /// The publisher came back (a new connection: new RTP numbers and timestamps): each track
    /// starts its clock again at its next packet's arrival, and its `track_seq` goes on from
    /// where it stopped. What was held may go.
    pub fn rejoin(&mut self) {
        self.finish();
        for (t, c) in self.clocks.iter_mut().enumerate() {
            if let Some(c) = c.take() {
                self.resume[t] = c.highest_seq - c.first_seq + 1;
            }
        }
    }

    /// The feed ended: every unit held may go.
    pub fn finish(&mut self) {
        self.close_unit();
        self.release_upto_open();
    }

    /// The next unit in arrival order, once it may go.
    pub fn poll_unit(&mut self) -> Option<NativeUnit> {
        if self.released == 0 {
            return None;
        }
        self.released -= 1;
        if let Some((_, first, _)) = &mut self.open {
            *first -= 1;
        }
        self.queue.pop_front()
    }
}

impl fmt::Display for LiveStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} packets ({} bytes), {} dropped late or twice, {} missing, {} not of the feed",
            self.packets, self.bytes, self.dropped, self.gaps, self.foreign
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ffmpeg's parameter sets of a 640x360 High-profile clip.
    const SPS: &[u8] = &[
        0x67, 0x64, 0x00, 0x1e, 0xac, 0xd9, 0x40, 0xa0, 0x2f, 0xf9, 0x70, 0x11, 0x00, 0x00, 0x03,
        0x00, 0x01, 0x00, 0x00, 0x03, 0x00, 0x32, 0x0f, 0x16, 0x2d, 0x96,
    ];
    const PPS: &[u8] = &[0x68, 0xef, 0x8f, 0xcb];

    fn h264_fmtp() -> String {
        format!(
            "packetization-mode=1; profile-level-id=64001F; sprop-parameter-sets={},{}",
            STANDARD.encode(SPS),
            STANDARD.encode(PPS)
        )
    }

    fn rtp(pt: u8, seq: u16, ts: u32, marker: bool, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0x80, pt | if marker { 0x80 } else { 0 }];
        p.extend_from_slice(&seq.to_be_bytes());
        p.extend_from_slice(&ts.to_be_bytes());
        p.extend_from_slice(&7u32.to_be_bytes());
        p.extend_from_slice(payload);
        p
    }

    fn ms(n: u64) -> MediaTime {
        MediaTime::from_nanos(n * 1_000_000)
    }

    #[test]
    fn announced_tracks_keep_the_publishers_parameters_and_rebuild_the_configuration() {
        let fmtp = h264_fmtp();
        let v = Announced { encoding: "H264", clock_rate: 90_000, channels: 0, fmtp: &fmtp };
        let t = announced_track(0, &v).unwrap();
        assert_eq!(
            (t.codec, t.encoding, t.payload_type, t.fmtp.as_str()),
            (Codec::H264, "H264", 96, fmtp.as_str())
        );
        assert_eq!(t.config, crate::native::avcc(4, &[SPS.to_vec()], &[PPS.to_vec()]));
        assert_eq!((t.width, t.height), (640, 360), "from the SPS");
        let aac = "streamtype=5;profile-level-id=1;mode=AAC-hbr;sizelength=13;indexlength=3;indexdeltalength=3;config=1190";
        let a = Announced { encoding: "MPEG4-GENERIC", clock_rate: 48_000, channels: 2, fmtp: aac };
        let t = announced_track(1, &a).unwrap();
        assert_eq!(
            (t.codec, t.encoding, t.channels, t.payload_type),
            (Codec::Aac, "mpeg4-generic", 2, 97)
        );
        assert_eq!(t.config, vec![0x11, 0x90]);
        let o = Announced { encoding: "opus", clock_rate: 48_000, channels: 2, fmtp: "" };
        let t = announced_track(1, &o).unwrap();
        assert_eq!(&t.config[..10], b"OpusHead\x01\x02");
        // GStreamer's rtpmp4apay, 48 kHz stereo AAC-LC: the AudioSpecificConfig (0x1190) sits
        // at bit 15 of the StreamMuxConfig.
        let latm = "cpresent=0;config=400023203fc0";
        let l = Announced { encoding: "MP4A-LATM", clock_rate: 48_000, channels: 2, fmtp: latm };
        let t = announced_track(1, &l).unwrap();
        assert_eq!(
            (t.codec, t.encoding, t.clock_rate, t.channels, t.payload_type, t.fmtp.as_str()),
            (Codec::Aac, "MP4A-LATM", 48_000, 2, 97, latm)
        );
        assert_eq!(t.config, vec![0x11, 0x90]);
        // GStreamer's, of ffmpeg's AAC-LC: the configuration with its SBR signalling (0x2b7,
        // object type 5, no SBR).
        let gst = "cpresent=0;config=40002320adca00";
        let l = Announced { encoding: "MP4A-LATM", clock_rate: 48_000, channels: 2, fmtp: gst };
        assert_eq!(announced_track(0, &l).unwrap().config, vec![0x11, 0x90, 0x56, 0xe5, 0x00]);
        // HE-AAC (SBR, type 5) at 24 kHz core / 48 kHz: the config runs 4 + 5 bits longer.
        let he = "config=40005623101fe0;cpresent=0";
        let l = Announced { encoding: "MP4A-LATM", clock_rate: 24_000, channels: 2, fmtp: he };
        assert_eq!(announced_track(0, &l).unwrap().config, vec![0x2b, 0x11, 0x88, 0x00]);
    }

    #[test]
    fn latm_configurations_other_than_one_program_of_one_layer_are_refused() {
        fn err(fmtp: &str) -> String {
            let a = Announced { encoding: "MP4A-LATM", clock_rate: 48_000, channels: 2, fmtp };
            announced_track(0, &a).unwrap_err().to_string()
        }
        assert!(err("cpresent=1").contains("cpresent=1"));
        assert!(err("cpresent=0").contains("no config"));
        // audioMuxVersion 1; two subframes; cut short.
        assert!(err("config=c00023203fc0").contains("audioMuxVersion 1"));
        assert!(err("config=410023203fc0").contains("2 subframes"));
        assert!(err("config=4000").contains("too short"));
    }

    #[test]
    fn a_description_that_cannot_be_stored_is_refused_naming_the_track_and_parameter() {
        fn err(encoding: &str, clock_rate: u32, fmtp: &str) -> String {
            let a = Announced { encoding, clock_rate, channels: 0, fmtp };
            announced_track(1, &a).unwrap_err().to_string()
        }
        assert_eq!(
            err("VP8", 90_000, ""),
            "track 1: encoding \"VP8\" is not supported (H264, H265, mpeg4-generic, MP4A-LATM, \
             opus, MP2T)"
        );
        assert!(err("H264", 90_000, "packetization-mode=1").contains("no sprop-parameter-sets"));
        assert!(err("H264", 90_000, "sprop-parameter-sets=!!").contains("not base64"));
        assert!(err("H264", 48_000, &h264_fmtp()).contains("clock 48000 Hz"));
        let cut = format!("sprop-parameter-sets=Z2QAHqzZ,{}", STANDARD.encode(PPS));
        assert!(
            err("H264", 90_000, &cut).contains("the SPS does not parse"),
            "{}",
            err("H264", 90_000, &cut)
        );
        let lbr = "mode=AAC-lbr;sizelength=6;indexlength=2;indexdeltalength=2;config=1190";
        assert!(err("mpeg4-generic", 48_000, lbr).contains("only mode=AAC-hbr"));
        let nohex = "mode=AAC-hbr;sizelength=13;indexlength=3;indexdeltalength=3;config=xyz1";
        assert!(err("mpeg4-generic", 48_000, nohex).contains("is not hex"));
        assert!(err("H265", 90_000, "sprop-vps=QAE=").contains("no sprop-sps"));
    }

    /// ffmpeg's parameter sets of a 640x360 H.265 clip: the track's size is the SPS's; an SPS
    /// cut short is refused by name.
    #[test]
    fn an_h265_track_is_sized_from_its_sps() {
        let vps = "sprop-vps=QAEMAf//AWAAAAMAkAAAAwAAAwA/lZQJ";
        let pps = "sprop-pps=RAHAc8GJ";
        let sps = "sprop-sps=QgEBAWAAAAMAkAAAAwAAAwA/oAUCAXHy5ZWVKTC8BaAgAAADACAAAAMDIQ==";
        let fmtp = format!("{vps}; {sps}; {pps}");
        let a = Announced { encoding: "H265", clock_rate: 90_000, channels: 0, fmtp: &fmtp };
        let t = announced_track(0, &a).unwrap();
        assert_eq!((t.width, t.height), (640, 360));
        let cut = format!("{vps}; sprop-sps=QgEBAWAAAAMAkAAAAwAAAwA/oA==; {pps}");
        let a = Announced { encoding: "H265", clock_rate: 90_000, channels: 0, fmtp: &cut };
        let e = announced_track(0, &a).unwrap_err().to_string();
        assert!(e.contains("sprop-sps: the SPS does not parse: too short"), "{e}");
    }

    #[test]
    fn random_access_pictures_are_found_alone_aggregated_and_fragmented() {
        assert!(starts_random_access(Codec::H264, &[0x65, 1, 2]));
        assert!(!starts_random_access(Codec::H264, &[0x41, 1, 2]));
        // STAP-A with SPS, PPS, IDR.
        let stap = [&[0x78u8, 0, 2, 0x67, 0, 0, 2, 0x68, 0, 0, 2][..], &[0x65, 0]].concat();
        assert!(starts_random_access(Codec::H264, &stap));
        assert!(!starts_random_access(Codec::H264, &[0x78, 0, 9, 0x65]), "truncated");
        // FU-A: start of an IDR, and its middle.
        assert!(starts_random_access(Codec::H264, &[0x7c, 0x85, 1]));
        assert!(!starts_random_access(Codec::H264, &[0x7c, 0x05, 1]));
        // H.265: IDR_W_RADL (19) alone, in an FU's start; TRAIL_R (1) not.
        assert!(starts_random_access(Codec::H265, &[19 << 1, 1, 0]));
        assert!(starts_random_access(Codec::H265, &[49 << 1, 1, 0x80 | 19, 0]));
        assert!(!starts_random_access(Codec::H265, &[1 << 1, 1, 0]));
        assert!(!starts_random_access(Codec::Aac, &[0x65]));
    }

    /// Video (H.264, type 96) and audio (AAC at 48 kHz, type 97): the units come in arrival
    /// order with their tracks on one clock; a key frame's first packet starts a seek point
    /// once its access unit is complete, and the audio that arrived meanwhile waits behind it.
    #[test]
    fn a_transport_stream_is_kept_whole_with_seek_points_where_random_access_starts() {
        let a = Announced { encoding: "MP2T", clock_rate: 90_000, channels: 0, fmtp: "" };
        let t = announced_track(0, &a).unwrap();
        assert_eq!((t.codec, t.encoding, t.payload_type), (Codec::Mp2t, "MP2T", MP2T_PT));
        let bad = Announced { clock_rate: 8_000, ..a };
        assert!(announced_track(0, &bad).unwrap_err().to_string().contains("runs at 90000"));
        let ts = |rai: bool| {
            let mut p = vec![0u8; 188 * 2];
            p[0] = 0x47;
            p[188] = 0x47;
            if rai {
                p[188 + 3] = 0x30;
                p[188 + 4] = 7;
                p[188 + 5] = 0x40;
            }
            p
        };
        let mut f = LiveIngest::new(vec![t], vec![MP2T_PT]);
        f.handle_rtp(ms(0), 0, &rtp(MP2T_PT, 9, 0, false, &ts(false)));
        f.handle_rtp(ms(5), 0, &rtp(MP2T_PT, 10, 450, false, &ts(true)));
        let (first, second) = (f.poll_unit().unwrap(), f.poll_unit().unwrap());
        assert_eq!((first.random_access, first.payload), (false, ts(false)));
        assert_eq!((second.random_access, second.track_seq, second.npt), (true, 1, ms(5)));
        assert_eq!(f.poll_unit(), None, "nothing is held: each payload is its own unit");
    }

    #[test]
    fn a_publisher_that_comes_back_goes_on_with_the_same_numbers_from_its_arrival() {
        let a = Announced { encoding: "opus", clock_rate: 48_000, channels: 2, fmtp: "" };
        let mut f = LiveIngest::new(vec![announced_track(0, &a).unwrap()], vec![111]);
        f.handle_rtp(ms(0), 0, &rtp(111, 500, 9000, true, &[1]));
        f.handle_rtp(ms(20), 0, &rtp(111, 501, 9960, true, &[2]));
        f.rejoin();
        // New numbers and timestamps: the track goes on at 2, timed from the arrival.
        f.handle_rtp(ms(3000), 0, &rtp(111, 7, 123, true, &[3]));
        let units: Vec<NativeUnit> = std::iter::from_fn(|| f.poll_unit()).collect();
        let got: Vec<(u32, MediaTime)> = units.iter().map(|u| (u.track_seq, u.npt)).collect();
        assert_eq!(got, vec![(0, ms(0)), (1, ms(20)), (2, ms(3000))]);
        assert_eq!(f.stats().gaps, 0);
    }

    #[test]
    fn a_feed_becomes_units_in_arrival_order_with_seek_points_at_key_frames() {
        let fmtp = h264_fmtp();
        let aac = "mode=AAC-hbr;sizelength=13;indexlength=3;indexdeltalength=3;config=1190";
        let tracks = vec![
            announced_track(
                0,
                &Announced { encoding: "H264", clock_rate: 90_000, channels: 0, fmtp: &fmtp },
            )
            .unwrap(),
            announced_track(
                1,
                &Announced {
                    encoding: "mpeg4-generic",
                    clock_rate: 48_000,
                    channels: 2,
                    fmtp: aac,
                },
            )
            .unwrap(),
        ];
        let mut f = LiveIngest::new(tracks, vec![96, 97]);
        // A key frame in two FU-A fragments with audio between, then a P frame 40 ms later.
        f.handle_rtp(ms(0), 0, &rtp(96, 1000, 5000, false, &[0x7c, 0x85, 1]));
        f.handle_rtp(ms(1), 1, &rtp(97, 7, 1_000_000, true, &[0, 16, 1]));
        assert_eq!(f.poll_unit(), None, "the key frame's access unit is open");
        f.handle_rtp(ms(2), 0, &rtp(96, 1001, 5000, true, &[0x7c, 0x45, 2]));
        let key = f.poll_unit().unwrap();
        assert!(key.random_access && key.track == 0 && key.track_seq == 0);
        assert_eq!((key.npt, key.send_time, key.rtp_time), (ms(0), ms(0), 0));
        let audio = f.poll_unit().unwrap();
        assert_eq!(
            (audio.track, audio.npt, audio.rtp_time, audio.random_access),
            (1, ms(1), 48, false)
        );
        assert!(!f.poll_unit().unwrap().random_access);
        // The P frame (3600 ticks on): 40 ms; a duplicate and a late packet are dropped; a gap
        // is counted.
        f.handle_rtp(ms(40), 0, &rtp(96, 1003, 8600, true, &[0x41, 3]));
        f.handle_rtp(ms(41), 0, &rtp(96, 1003, 8600, true, &[0x41, 3]));
        f.handle_rtp(ms(42), 0, &rtp(96, 1002, 8600, true, &[0x41, 3]));
        f.handle_rtp(ms(43), 1, b"not rtp");
        let p = f.poll_unit().unwrap();
        assert_eq!((p.npt, p.rtp_time, p.track_seq, p.random_access), (ms(40), 3600, 3, false));
        assert_eq!(f.poll_unit(), None);
        let s = f.stats();
        assert_eq!((s.packets, s.dropped, s.gaps, s.foreign), (4, 2, 1, 1));
        // A unit still open goes at the end.
        f.handle_rtp(ms(80), 0, &rtp(96, 1004, 12_200, false, &[0x65, 4]));
        assert_eq!(f.poll_unit(), None);
        f.finish();
        assert!(f.poll_unit().unwrap().random_access);
    }

    /// Sequence numbers and timestamps wrap: the units' numbers and times go on.
    #[test]
    fn numbers_and_timestamps_that_wrap_go_on() {
        let o = Announced { encoding: "opus", clock_rate: 48_000, channels: 2, fmtp: "" };
        let mut f = LiveIngest::new(vec![announced_track(0, &o).unwrap()], vec![111]);
        f.handle_rtp(ms(0), 0, &rtp(111, 65_535, u32::MAX - 479, true, &[1]));
        f.handle_rtp(ms(20), 0, &rtp(111, 0, 480, true, &[2]));
        let a = f.poll_unit().unwrap();
        let b = f.poll_unit().unwrap();
        assert!(a.random_access && !b.random_access, "audio alone: one a second");
        assert_eq!((b.track_seq, b.npt, b.rtp_time), (1, ms(20), 960));
    }

    proptest::proptest! {
        /// Any packets, of either track, in any order: every packet taken comes out once, in
        /// arrival order, each track's numbers rising, seek points only on the video track.
        #[test]
        fn any_packets_come_out_once_in_order(
            packets in proptest::collection::vec(
                (0usize..2, proptest::prelude::any::<u16>(), 0u32..100_000, proptest::prelude::any::<bool>(),
                 proptest::collection::vec(proptest::prelude::any::<u8>(), 1..6)),
                0..60,
            )
        ) {
            let fmtp = h264_fmtp();
            let aac = "mode=AAC-hbr;sizelength=13;indexlength=3;indexdeltalength=3;config=1190";
            let v = Announced { encoding: "H264", clock_rate: 90_000, channels: 0, fmtp: &fmtp };
            let a = Announced { encoding: "mpeg4-generic", clock_rate: 48_000, channels: 2, fmtp: aac };
            let tracks = vec![announced_track(0, &v).unwrap(), announced_track(1, &a).unwrap()];
            let mut f = LiveIngest::new(tracks, vec![96, 97]);
            let mut out = Vec::new();
            for (i, (track, seq, ts, marker, payload)) in packets.iter().enumerate() {
                let pt = 96 + *track as u8;
                f.handle_rtp(ms(i as u64), *track, &rtp(pt, *seq % 64, *ts, *marker, payload));
                while let Some(u) = f.poll_unit() {
                    out.push(u);
                }
            }
            f.finish();
            while let Some(u) = f.poll_unit() {
                out.push(u);
            }
            proptest::prop_assert_eq!(out.len() as u64, f.stats().packets);
            for t in 0..2u8 {
                let seqs: Vec<u32> = out.iter().filter(|u| u.track == t).map(|u| u.track_seq).collect();
                proptest::prop_assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{:?}", seqs);
            }
            proptest::prop_assert!(out.iter().all(|u| !u.random_access || u.track == 0));
            proptest::prop_assert!(out.windows(2).all(|w| w[0].send_time <= w[1].send_time));
        }
    }
}
