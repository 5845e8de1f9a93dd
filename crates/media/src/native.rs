//! The RTP packet stream of an object ingested from MP4 or Matroska (sans-IO).
//!
//! Why: isochron stores every object as the packets it sends, each with its send time, so that
//! any node paces its own blocks without help (`docs/design/block-format.md`). For MPEG-TS those
//! packets are runs of TS packets timed by the PCR ([`crate::TsIndex::units`]). For a file of
//! elementary streams they are the native RTP payloads of each track — H.264 (RFC 6184), H.265
//! (RFC 7798), AAC (RFC 3640), Opus (RFC 7587), AC-3 (RFC 4184), MPEG audio (RFC 2250 §3.5) — cut
//! once at ingest by [`isochron_rtp::payload`]'s packetizers, and this module decides their timing
//! and order:
//!
//! - **Zero.** The object's timeline starts at the earliest decode time of any sample (B-frame
//!   delay and audio priming make some times negative in the container); every time below is
//!   relative to it, in nanoseconds.
//! - **Send time** from the decode time (DTS): an audio frame's packets at its DTS; a video
//!   frame's packets spread evenly over its duration from its DTS, so that a large key frame
//!   leaves as a steady stream rather than a burst (the rate smoothing Yima §2.5 asks of the
//!   server side too).
//! - **Order.** Packets of all tracks are merged by send time (ties: the order they were made):
//!   samples come in decode order, and a packet is released once no later sample can produce an
//!   earlier one.
//! - **RTP timestamp** from the presentation time (PTS) on the track's clock (90 kHz for video
//!   and MPEG audio, the sample rate for AAC and AC-3, 48 kHz for Opus), as the packet's stored
//!   `rtp_time`; the session adds its random offset. Every track uses the same zero, so the RTCP
//!   sender reports of all tracks, taken at one media time, keep players in lip sync.
//! - **Sequence.** Each track's packets are numbered 0, 1, 2 … (`track_seq`); the session adds
//!   its offset.
//! - **Random access.** The first packet of each key frame of the first video track (with H.264
//!   and H.265 the in-band parameter sets the packetizer puts before it) starts a seek point,
//!   whose time is the key frame's presentation time; without video, the first audio track's
//!   packets at most one a second.
//!
//! Not here: reading the file (the caller feeds each sample's bytes, in the index's decode
//! order), blocks and placement (`isochron-diskio`).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::fmt;

use isochron_base::MediaTime;
use isochron_rtp::payload::{
    AacPacketizer, Ac3Packetizer, Codec as RtpCodec, H264Packetizer, H265Packetizer, MpaPacketizer,
    OpusPacketizer, Packetizer, Payload, PayloadError, aac_fmtp, h264_fmtp, h265_fmtp, opus_fmtp,
};

use crate::StreamKind;
use crate::container::{Codec, CodecConfig, MediaIndex, Sample};

/// The most tracks a native object has (a packet's track index is below it).
pub const MAX_TRACKS: usize = isochron_base::MAX_TRACKS;

/// The first dynamic RTP payload type; track `i` gets `96 + i` (MPEG audio its static 14).
pub const FIRST_DYNAMIC_PT: u8 = 96;

/// Without video, a seek point at most this often (ns).
const AUDIO_SEEK_SPACING_NS: u64 = 1_000_000_000;

/// One track as it is sent: what SDP, the catalog and the muxers need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NativeTrack {
    /// The codec.
    pub codec: Codec,
    /// Video or audio.
    pub kind: StreamKind,
    /// The `rtpmap` encoding name.
    pub encoding: &'static str,
    /// The RTP clock rate, Hz.
    pub clock_rate: u32,
    /// The `rtpmap` encoding parameters (channels), 0 for none.
    pub channels: u8,
    /// The RTP payload type.
    pub payload_type: u8,
    /// The SDP `fmtp` parameters (empty for none).
    pub fmtp: String,
    /// The decoder configuration record: `avcC`, the HEVC parameter sets as an `hvcC`-like
    /// list, the AudioSpecificConfig, or the OpusHead.
    pub config: Vec<u8>,
    /// Video width and height; 0 for audio.
    pub width: u16,
    /// See `width`.
    pub height: u16,
    /// The language tag, if any.
    pub language: Option<String>,
    /// The container's id for it (for messages).
    pub container_id: u64,
}

/// One RTP payload of the object, in send order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NativeUnit {
    /// Its track's index.
    pub track: u8,
    /// When it is due on the wire.
    pub send_time: MediaTime,
    /// Its RTP timestamp on the track's clock, before the session's offset.
    pub rtp_time: u32,
    /// Its index among its track's packets.
    pub track_seq: u32,
    /// The RTP marker bit.
    pub marker: bool,
    /// It starts a seek point.
    pub random_access: bool,
    /// The presentation time of its access unit (a seek point's time).
    pub npt: MediaTime,
    /// The payload.
    pub payload: Vec<u8>,
}

/// Why a file's samples cannot be made into packets. Messages name the track and sample.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NativeError {
    /// More tracks than an object can have.
    #[error("{count} tracks: at most {MAX_TRACKS} are supported")]
    TooManyTracks {
        /// How many the file has.
        count: usize,
    },
    /// A track's decoder configuration cannot be sent.
    #[error("track {id} ({codec}): {source}")]
    Config {
        /// The container's track id.
        id: u64,
        /// Its codec.
        codec: Codec,
        /// The packetizer's reason.
        source: PayloadError,
    },
    /// A sample cannot be packetized.
    #[error("track {id} ({codec}), sample at byte {offset}: {source}")]
    Sample {
        /// The container's track id.
        id: u64,
        /// Its codec.
        codec: Codec,
        /// The sample's file offset.
        offset: u64,
        /// The packetizer's reason.
        source: PayloadError,
    },
    /// A sample names a track the index does not have (a caller bug, or a corrupt index).
    #[error("sample at byte {offset} names track {track}, which does not exist")]
    NoTrack {
        /// The sample's file offset.
        offset: u64,
        /// The track index.
        track: u16,
    },
}

/// Makes the packet stream of an object from its samples (see the module docs).
pub struct NativeAssembler {
    tracks: Vec<NativeTrack>,
    packetizers: Vec<Box<dyn Packetizer + Send>>,
    timescales: Vec<u32>,
    /// The object's zero: the earliest decode time, in ns.
    zero_ns: i128,
    next_seq: Vec<u32>,
    /// The track whose key frames are seek points.
    seek_track: Option<u16>,
    video: bool,
    last_seek_ns: Option<u64>,
    /// Packets made but not released, by (send time, order made).
    pending: BinaryHeap<Reverse<(u64, u64)>>,
    units: BTreeMap<u64, NativeUnit>,
    made: u64,
    /// Packets of decode time below this are released.
    horizon: u64,
    scratch: Vec<Payload>,
    finished: bool,
}

impl fmt::Debug for NativeAssembler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NativeAssembler")
            .field("tracks", &self.tracks)
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

impl NativeAssembler {
    /// An assembler for the tracks of `index`, cutting payloads of at most `max_payload` bytes.
    pub fn new(index: &MediaIndex, max_payload: usize) -> Result<Self, NativeError> {
        if index.tracks.len() > MAX_TRACKS {
            return Err(NativeError::TooManyTracks { count: index.tracks.len() });
        }
        let mut tracks = Vec::with_capacity(index.tracks.len());
        let mut packetizers: Vec<Box<dyn Packetizer + Send>> = Vec::new();
        for (i, t) in index.tracks.iter().enumerate() {
            let err = |source| NativeError::Config { id: t.id, codec: t.codec, source };
            let (rtp, packetizer, fmtp, config): (RtpCodec, Box<dyn Packetizer + Send>, _, _) =
                match &t.config {
                    CodecConfig::Avc { nal_length_size, sps, pps } => {
                        let p = H264Packetizer::new(
                            *nal_length_size,
                            sps.clone(),
                            pps.clone(),
                            max_payload,
                        )
                        .map_err(err)?;
                        let fmtp = match sps.first() {
                            Some(s) => h264_fmtp(s, pps),
                            None => "packetization-mode=1".to_owned(),
                        };
                        (RtpCodec::H264, Box::new(p), fmtp, avcc(*nal_length_size, sps, pps))
                    }
                    CodecConfig::Hevc { nal_length_size, vps, sps, pps } => {
                        let p = H265Packetizer::new(
                            *nal_length_size,
                            vps.clone(),
                            sps.clone(),
                            pps.clone(),
                            max_payload,
                        )
                        .map_err(err)?;
                        let fmtp = match (vps.first(), sps.first(), pps.first()) {
                            (Some(v), Some(s), Some(p)) => h265_fmtp(v, s, p),
                            _ => String::new(),
                        };
                        let config = HevcParameterSets {
                            nal_length_size: *nal_length_size,
                            vps: vps.clone(),
                            sps: sps.clone(),
                            pps: pps.clone(),
                        }
                        .encode();
                        (RtpCodec::H265, Box::new(p), fmtp, config)
                    }
                    CodecConfig::Aac { audio_specific_config } => {
                        let p = AacPacketizer::new(max_payload).map_err(err)?;
                        let codec = RtpCodec::Aac {
                            sample_rate: t.sample_rate,
                            channels: t.channels.max(1),
                        };
                        let fmtp = aac_fmtp(audio_specific_config);
                        (codec, Box::new(p), fmtp, audio_specific_config.clone())
                    }
                    CodecConfig::Opus { channels, head, .. } => {
                        let p = OpusPacketizer::with_max_payload(max_payload);
                        (RtpCodec::Opus, Box::new(p), opus_fmtp(*channels), head.clone())
                    }
                    CodecConfig::Ac3 => {
                        let p = Ac3Packetizer::new(max_payload).map_err(err)?;
                        let codec = RtpCodec::Ac3 {
                            sample_rate: t.sample_rate,
                            channels: t.channels.max(1),
                        };
                        (codec, Box::new(p), String::new(), Vec::new())
                    }
                    CodecConfig::Mp3 => {
                        let p = MpaPacketizer::new(max_payload).map_err(err)?;
                        (RtpCodec::Mpa, Box::new(p), String::new(), Vec::new())
                    }
                };
            let (encoding, clock_rate, channels) = rtp.rtpmap();
            // Tracks are at most MAX_TRACKS (8), so the dynamic types stay in 96..=103.
            let payload_type = rtp.static_payload_type().unwrap_or(FIRST_DYNAMIC_PT + i as u8);
            tracks.push(NativeTrack {
                codec: t.codec,
                kind: t.kind,
                encoding,
                clock_rate,
                channels: channels.unwrap_or(0),
                payload_type,
                fmtp,
                config,
                width: t.width,
                height: t.height,
                language: t.language.clone(),
                container_id: t.id,
            });
            packetizers.push(packetizer);
        }
        let zero_ns = index.samples.iter().map(|s| dts_ns(index, s)).min().unwrap_or(0);
        let seek_track = index
            .tracks
            .iter()
            .position(|t| t.kind == StreamKind::Video)
            .or_else(|| (!index.tracks.is_empty()).then_some(0))
            .map(|i| i as u16);
        let video = index.tracks.iter().any(|t| t.kind == StreamKind::Video);
        Ok(Self {
            next_seq: vec![0; tracks.len()],
            timescales: index.tracks.iter().map(|t| t.timescale.max(1)).collect(),
            tracks,
            packetizers,
            zero_ns,
            seek_track,
            video,
            last_seek_ns: None,
            pending: BinaryHeap::new(),
            units: BTreeMap::new(),
            made: 0,
            horizon: 0,
            scratch: Vec::new(),
            finished: false,
        })
    }

    /// The tracks, by index.
    #[must_use]
    pub fn tracks(&self) -> &[NativeTrack] {
        &self.tracks
    }

    /// Packets made so far, per track.
    #[must_use]
    pub fn packets_per_track(&self) -> &[u32] {
        &self.next_seq
    }

    /// Adds the next sample (in the index's decode order) and its bytes.
    pub fn push(&mut self, sample: &Sample, bytes: &[u8]) -> Result<(), NativeError> {
        let t = usize::from(sample.track);
        let (Some(track), Some(&ts)) = (self.tracks.get(t), self.timescales.get(t)) else {
            return Err(NativeError::NoTrack { offset: sample.offset, track: sample.track });
        };
        let (id, codec, clock) = (track.container_id, track.codec, track.clock_rate);
        let video = track.kind == StreamKind::Video;
        self.scratch.clear();
        self.packetizers[t]
            .packetize(bytes, &mut self.scratch)
            .map_err(|source| NativeError::Sample { id, codec, offset: sample.offset, source })?;
        let rel = |ticks: i64| -> i128 {
            (i128::from(ticks) * 1_000_000_000 - self.zero_ns * i128::from(ts)) / i128::from(ts)
        };
        let dts = rel(sample.dts).max(0) as u64;
        self.horizon = self.horizon.max(dts);
        let dur = i128::from(sample.duration) * 1_000_000_000 / i128::from(ts);
        // The presentation time on the track's clock, rounded to the nearest tick (exact: one
        // division of the whole product).
        let num = (i128::from(sample.pts) * 1_000_000_000 - self.zero_ns * i128::from(ts))
            * i128::from(clock);
        let den = i128::from(ts) * 1_000_000_000;
        let rtp_time = div_round(num, den) as u32;
        let npt = rel(sample.pts).max(0) as u64;
        let seek = Some(sample.track) == self.seek_track
            && if self.video {
                sample.keyframe
            } else {
                self.last_seek_ns.is_none_or(|l| npt >= l + AUDIO_SEEK_SPACING_NS)
            };
        if seek {
            self.last_seek_ns = Some(npt);
        }
        let n = self.scratch.len() as i128;
        for (i, p) in self.scratch.drain(..).enumerate() {
            let spread = if video && n > 1 { dur.max(0) * i as i128 / n } else { 0 };
            let send = dts + spread as u64;
            let unit = NativeUnit {
                track: t as u8,
                send_time: MediaTime::from_nanos(send),
                rtp_time,
                track_seq: self.next_seq[t],
                marker: p.marker,
                random_access: seek && i == 0,
                npt: MediaTime::from_nanos(npt),
                payload: p.bytes,
            };
            self.next_seq[t] = self.next_seq[t].wrapping_add(1);
            self.pending.push(Reverse((send, self.made)));
            self.units.insert(self.made, unit);
            self.made += 1;
        }
        Ok(())
    }

    /// No more samples: every packet made can be released.
    pub fn finish(&mut self) {
        self.finished = true;
    }

    /// The next packet in send order, once no later sample can come before it.
    pub fn poll_unit(&mut self) -> Option<NativeUnit> {
        let &Reverse((send, order)) = self.pending.peek()?;
        if !self.finished && send >= self.horizon {
            return None;
        }
        self.pending.pop();
        self.units.remove(&order)
    }
}

fn dts_ns(index: &MediaIndex, s: &Sample) -> i128 {
    let ts = index.tracks.get(usize::from(s.track)).map_or(1, |t| t.timescale.max(1));
    i128::from(s.dts) * 1_000_000_000 / i128::from(ts)
}

/// `num / den` rounded to the nearest, halves away from zero (`den` > 0).
fn div_round(num: i128, den: i128) -> i128 {
    if num >= 0 { (num + den / 2) / den } else { -((-num + den / 2) / den) }
}

/// An AVCDecoderConfigurationRecord (ISO/IEC 14496-15 §5.3.3.1) from the parameter sets.
pub(crate) fn avcc(nal_length_size: u8, sps: &[Vec<u8>], pps: &[Vec<u8>]) -> Vec<u8> {
    let profile = sps.first().map_or([0x42, 0, 0x1e], |s| {
        [
            s.get(1).copied().unwrap_or(0),
            s.get(2).copied().unwrap_or(0),
            s.get(3).copied().unwrap_or(0),
        ]
    });
    let mut out = vec![1, profile[0], profile[1], profile[2]];
    out.push(0xFC | (nal_length_size.clamp(1, 4) - 1));
    out.push(0xE0 | (sps.len().min(31) as u8));
    for s in sps.iter().take(31) {
        out.extend_from_slice(&(s.len().min(0xFFFF) as u16).to_be_bytes());
        out.extend_from_slice(&s[..s.len().min(0xFFFF)]);
    }
    out.push(pps.len().min(255) as u8);
    for p in pps.iter().take(255) {
        out.extend_from_slice(&(p.len().min(0xFFFF) as u16).to_be_bytes());
        out.extend_from_slice(&p[..p.len().min(0xFFFF)]);
    }
    out
}

/// An H.265 track's parameter sets as the catalog keeps them ([`NativeTrack::config`]): the
/// NAL length size, then the VPS, SPS and PPS lists, each a count and 16-bit length-prefixed
/// NAL units (what an `hvcC` is rebuilt from).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HevcParameterSets {
    /// The size of the sample's NAL length prefixes.
    pub nal_length_size: u8,
    /// Video parameter sets.
    pub vps: Vec<Vec<u8>>,
    /// Sequence parameter sets.
    pub sps: Vec<Vec<u8>>,
    /// Picture parameter sets.
    pub pps: Vec<Vec<u8>>,
}

impl HevcParameterSets {
    /// The catalog's bytes.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![self.nal_length_size];
        for list in [&self.vps, &self.sps, &self.pps] {
            out.push(list.len().min(255) as u8);
            for n in list.iter().take(255) {
                out.extend_from_slice(&(n.len().min(0xFFFF) as u16).to_be_bytes());
                out.extend_from_slice(&n[..n.len().min(0xFFFF)]);
            }
        }
        out
    }

    /// Reads [`HevcParameterSets::encode`]'s bytes; what does not parse is left out.
    #[must_use]
    pub fn decode(b: &[u8]) -> Self {
        let mut lists = [Vec::new(), Vec::new(), Vec::new()];
        let mut at = 1;
        for list in &mut lists {
            let Some(&n) = b.get(at) else { break };
            at += 1;
            for _ in 0..n {
                let Some(l) = b.get(at..at + 2) else { break };
                let len = usize::from(u16::from_be_bytes([l[0], l[1]]));
                let Some(nal) = b.get(at + 2..at + 2 + len) else { break };
                list.push(nal.to_vec());
                at += 2 + len;
            }
        }
        let [vps, sps, pps] = lists;
        Self { nal_length_size: b.first().copied().unwrap_or(4), vps, sps, pps }
    }
}

#[cfg(test)]
mod tests {
    use isochron_rtp::payload::{
        AacDepacketizer, Depacketizer, H264Depacketizer, H265Depacketizer, OpusDepacketizer,
    };

    use super::*;
    use crate::container::demux_bytes;

    const FIXTURES: &[(&str, &[u8])] = &[
        ("h264_aac_faststart.mp4", include_bytes!("../testdata/h264_aac_faststart.mp4")),
        ("h264_aac_moov_last.mp4", include_bytes!("../testdata/h264_aac_moov_last.mp4")),
        ("h264_aac_fragmented.mp4", include_bytes!("../testdata/h264_aac_fragmented.mp4")),
        ("hevc_aac.mp4", include_bytes!("../testdata/hevc_aac.mp4")),
        ("h264_opus.mkv", include_bytes!("../testdata/h264_opus.mkv")),
        ("mp3_ac3.mp4", include_bytes!("../testdata/mp3_ac3.mp4")),
    ];

    fn assemble(file: &[u8]) -> (MediaIndex, Vec<NativeTrack>, Vec<NativeUnit>) {
        let index = demux_bytes(file).unwrap();
        let mut a = NativeAssembler::new(&index, 1316).unwrap();
        let mut units = Vec::new();
        for s in &index.samples {
            let bytes = &file[s.offset as usize..s.offset as usize + s.size as usize];
            a.push(s, bytes).unwrap();
            units.extend(std::iter::from_fn(|| a.poll_unit()));
        }
        a.finish();
        units.extend(std::iter::from_fn(|| a.poll_unit()));
        (index, a.tracks().to_vec(), units)
    }

    /// The NAL units of an AVCC access unit with `len`-byte lengths, leaving out parameter sets
    /// and delimiters (which the packetizer adds or drops).
    fn slices(au: &[u8], len: usize, h265: bool) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut at = 0;
        while at + len <= au.len() {
            let n = au[at..at + len].iter().fold(0usize, |v, b| (v << 8) | usize::from(*b));
            let nal = &au[at + len..at + len + n];
            let skip = if h265 {
                matches!((nal[0] >> 1) & 0x3f, 32..=35)
            } else {
                matches!(nal[0] & 0x1f, 7..=9)
            };
            if !skip {
                out.push(nal.to_vec());
            }
            at += len + n;
        }
        out
    }

    /// Every fixture becomes one packet stream in send order, each track numbered from 0 with
    /// no gap, whose payloads depacketize to the file's samples (parameter sets aside), with RTP
    /// timestamps at each sample's presentation time on the track's clock.
    #[test]
    fn packets_carry_every_sample_in_send_order() {
        for (name, file) in FIXTURES {
            let (index, tracks, units) = assemble(file);
            assert!(units.windows(2).all(|w| w[0].send_time <= w[1].send_time), "{name}: order");
            let zero = index.samples.iter().map(|s| dts_ns(&index, s)).min().unwrap();
            for (t, track) in tracks.iter().enumerate() {
                let mine: Vec<&NativeUnit> =
                    units.iter().filter(|u| usize::from(u.track) == t).collect();
                let seqs: Vec<u32> = mine.iter().map(|u| u.track_seq).collect();
                assert_eq!(seqs, (0..mine.len() as u32).collect::<Vec<_>>(), "{name} track {t}");
                let samples: Vec<&Sample> = index.track_samples(t as u16).collect();
                // Reassemble the access units.
                let mut aus: Vec<(u32, Vec<u8>)> = Vec::new();
                let (h264, h265) = (track.codec == Codec::H264, track.codec == Codec::H265);
                let mut dep: Box<dyn Depacketizer> = match track.codec {
                    Codec::H264 => Box::new(H264Depacketizer::new()),
                    Codec::H265 => Box::new(H265Depacketizer::new()),
                    Codec::Aac => Box::new(AacDepacketizer::new()),
                    Codec::Opus => Box::new(OpusDepacketizer::new()),
                    _ => continue,
                };
                for u in &mine {
                    let mut out = Vec::new();
                    dep.push_into(&u.payload, u.marker, &mut out).unwrap();
                    aus.extend(out.into_iter().map(|a| (u.rtp_time, a)));
                }
                assert_eq!(aus.len(), samples.len(), "{name} track {t}: access units");
                let ts = i128::from(index.tracks[t].timescale);
                for (i, ((rtp, au), s)) in aus.iter().zip(&samples).enumerate() {
                    let src = &file[s.offset as usize..s.offset as usize + s.size as usize];
                    if h264 || h265 {
                        let (CodecConfig::Avc { nal_length_size: len, .. }
                        | CodecConfig::Hevc { nal_length_size: len, .. }) = index.tracks[t].config
                        else {
                            unreachable!()
                        };
                        assert_eq!(
                            slices(au, 4, h265),
                            slices(src, usize::from(len), h265),
                            "{name} track {t} AU {i}"
                        );
                    } else {
                        assert_eq!(au, src, "{name} track {t} AU {i}");
                    }
                    let pts = (i128::from(s.pts) * 1_000_000_000 - zero * ts)
                        * i128::from(track.clock_rate);
                    let want = div_round(pts, ts * 1_000_000_000) as u32;
                    assert_eq!(*rtp, want, "{name} track {t} AU {i}: timestamp");
                }
            }
        }
    }

    /// Seek points are the first video track's key frames, each at its presentation time and
    /// on the first packet of the frame (the in-band parameter sets); video markers end frames.
    #[test]
    fn key_frames_start_seek_points() {
        let (index, tracks, units) = assemble(FIXTURES[0].1);
        assert_eq!(tracks[0].codec, Codec::H264);
        assert_eq!(
            (tracks[0].encoding, tracks[0].clock_rate, tracks[0].payload_type),
            ("H264", 90_000, 96)
        );
        assert_eq!((tracks[1].encoding, tracks[1].payload_type), ("mpeg4-generic", 97));
        assert!(tracks[0].fmtp.starts_with("packetization-mode=1;profile-level-id="));
        assert!(tracks[1].fmtp.contains("mode=AAC-hbr"));
        let keys = index.track_samples(0).filter(|s| s.keyframe).count();
        let raps: Vec<&NativeUnit> = units.iter().filter(|u| u.random_access).collect();
        assert_eq!(raps.len(), keys);
        for r in &raps {
            assert_eq!(r.track, 0);
            assert_eq!(r.payload[0] & 0x1f, 7, "an SPS leads each key frame");
        }
        assert!(raps.windows(2).all(|w| w[0].npt < w[1].npt));
        let frames = index.track_samples(0).count();
        let markers = units.iter().filter(|u| u.track == 0 && u.marker).count();
        assert_eq!(markers, frames);
    }

    /// A big frame's packets are spread over its duration, never sent before its decode time.
    #[test]
    fn a_frame_is_spread_over_its_duration() {
        let (index, _, units) = assemble(FIXTURES[0].1);
        let first: Vec<&NativeUnit> =
            units.iter().filter(|u| u.track == 0 && u.rtp_time == units[0].rtp_time).collect();
        let s = index.track_samples(0).next().unwrap();
        let dur = index.time_ns(0, i64::from(s.duration));
        if first.len() > 1 {
            let span = first.last().unwrap().send_time.as_nanos() - first[0].send_time.as_nanos();
            assert!(span > 0 && span < dur as u64, "span {span} of {dur}");
        }
    }

    #[test]
    fn hevc_parameter_sets_round_trip() {
        let p = HevcParameterSets {
            nal_length_size: 4,
            vps: vec![vec![0x40, 1, 2]],
            sps: vec![vec![0x42, 1], vec![0x42, 2, 3]],
            pps: vec![],
        };
        assert_eq!(HevcParameterSets::decode(&p.encode()), p);
        assert_eq!(HevcParameterSets::decode(&[]).vps.len(), 0);
        let (_, tracks, _) = assemble(FIXTURES[3].1);
        let h = HevcParameterSets::decode(&tracks[0].config);
        assert_eq!((h.vps.len(), h.sps.len(), h.pps.len()), (1, 1, 1));
        assert_eq!((h.sps[0][0] >> 1) & 0x3f, 33);
    }

    #[test]
    fn too_many_tracks_and_bad_samples_are_named() {
        let file = FIXTURES[0].1;
        let mut index = demux_bytes(file).unwrap();
        let mut a = NativeAssembler::new(&index, 1316).unwrap();
        let s = index.samples.iter().find(|s| s.track == 0).copied().unwrap();
        let err = a.push(&s, &[0, 0, 0, 9, 0x65]).unwrap_err().to_string();
        assert!(err.contains("track 1 (h264), sample at byte"), "{err}");
        let bogus = Sample { track: 7, ..s };
        assert!(matches!(a.push(&bogus, &[]), Err(NativeError::NoTrack { track: 7, .. })));
        let t = index.tracks[0].clone();
        index.tracks = vec![t; 9];
        assert!(matches!(
            NativeAssembler::new(&index, 1316),
            Err(NativeError::TooManyTracks { count: 9 })
        ));
    }
}
