//! Fragmented MP4 (ISO/IEC 14496-12 §8.8, CMAF-style) for HLS of native objects (sans-IO).
//!
//! Why: an object ingested from MP4 or Matroska is stored as RTP payloads. HLS (RFC 8216 §3.3)
//! carries such elementary streams as fragmented MP4: one initialization segment (`ftyp` +
//! `moov` with each track's sample entry — `avc1`/`avcC`, `hvc1`/`hvcC`, `mp4a`/`esds`,
//! `Opus`/`dOps` — and `mvex`) named by `EXT-X-MAP`, then media segments of `moof` + `mdat`,
//! one per segment, cut at key frames. This module turns the stored packets back into samples
//! ([`Reassembler`]: the RTP depacketizers of [`isochron_rtp::payload`], decode times from the
//! packets' send times, presentation times from their RTP timestamps) and writes the boxes.
//!
//! Not here: which packets make a segment (the HTTP layer cuts at the catalog's seek points),
//! reading blocks. AC-3 and MP3 tracks are left out of HLS (hls.js plays neither in fMP4).

use isochron_rtp::payload::{
    AacDepacketizer, Depacketizer, H264Depacketizer, H265Depacketizer, OpusDepacketizer,
    unescape_prefix,
};

/// A track's codec as fMP4 describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fmp4Codec {
    /// H.264: its AVCDecoderConfigurationRecord (rewritten to 4-byte NAL lengths).
    H264 {
        /// The `avcC` record.
        avcc: Vec<u8>,
    },
    /// H.265: its parameter sets.
    H265 {
        /// Video parameter sets.
        vps: Vec<Vec<u8>>,
        /// Sequence parameter sets.
        sps: Vec<Vec<u8>>,
        /// Picture parameter sets.
        pps: Vec<Vec<u8>>,
    },
    /// AAC: its AudioSpecificConfig.
    Aac {
        /// The AudioSpecificConfig.
        asc: Vec<u8>,
    },
    /// Opus: its identification header.
    Opus {
        /// The OpusHead (RFC 7845 §5.1).
        head: Vec<u8>,
    },
}

/// One track of a fragmented MP4.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fmp4Track {
    /// The codec and its configuration.
    pub codec: Fmp4Codec,
    /// Ticks per second of its times (the RTP clock: 90 kHz video, the sample rate, 48 kHz
    /// Opus).
    pub timescale: u32,
    /// Video size; 0 for audio.
    pub width: u16,
    /// See `width`.
    pub height: u16,
    /// Audio channels and sample rate; 0 for video.
    pub channels: u8,
    /// See `channels`.
    pub sample_rate: u32,
}

impl Fmp4Track {
    /// Whether it is a video track (H.264, H.265).
    #[must_use]
    pub fn is_video(&self) -> bool {
        matches!(self.codec, Fmp4Codec::H264 { .. } | Fmp4Codec::H265 { .. })
    }

    /// The `CODECS` attribute value of an HLS playlist (RFC 8216 §4.3.4.2, RFC 6381).
    #[must_use]
    pub fn rfc6381(&self) -> String {
        match &self.codec {
            Fmp4Codec::H264 { avcc } => {
                let b = |i: usize| avcc.get(i).copied().unwrap_or(0);
                format!("avc1.{:02x}{:02x}{:02x}", b(1), b(2), b(3))
            }
            Fmp4Codec::H265 { .. } => "hvc1.1.6.L93.B0".to_owned(),
            Fmp4Codec::Aac { asc } => {
                let object_type = asc.first().map_or(2, |b| b >> 3);
                format!("mp4a.40.{object_type}")
            }
            Fmp4Codec::Opus { .. } => "opus".to_owned(),
        }
    }
}

/// One sample of a fragment: its data and times in the track's timescale.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fmp4Sample {
    /// Decode time.
    pub dts: i64,
    /// Presentation time.
    pub pts: i64,
    /// A sync sample.
    pub key: bool,
    /// The sample's bytes (video: 4-byte length-prefixed NAL units).
    pub data: Vec<u8>,
}

/// Gives a segment's video samples (in decode order) decode times spaced as their
/// presentation times are: the `k`-th decodes at the `k`-th smallest presentation time, less
/// the largest reordering in the segment, so that none decodes after it is shown (a negative
/// decode time is raised to 0: the first frames of a timeline that starts at its first
/// presentation). Each sample's duration (the step to the next decode time) is then the
/// spacing of the pictures shown, so no picture's presentation interval overlaps the next
/// one's: a Media Source Extensions buffer removes a frame a later one overlaps, and the
/// frames that depend on it (W3C MSE §3.5.8), which send times taken from arrival (a live
/// feed's) would make happen.
pub fn decode_times_from_presentation(samples: &mut [Fmp4Sample]) {
    let mut shown: Vec<i64> = samples.iter().map(|s| s.pts).collect();
    shown.sort_unstable();
    let reorder = samples.iter().zip(&shown).map(|(s, p)| p - s.pts).max().unwrap_or(0).max(0);
    for (s, p) in samples.iter_mut().zip(&shown) {
        s.dts = (p - reorder).max(0);
    }
}

/// The initialization segment of `tracks` (track ids 1, 2, …).
#[must_use]
pub fn init_segment(tracks: &[Fmp4Track]) -> Vec<u8> {
    let mut out = Vec::new();
    boxed(&mut out, b"ftyp", |b| {
        b.extend_from_slice(b"iso6");
        b.extend_from_slice(&0u32.to_be_bytes());
        for brand in [b"iso6", b"cmfc", b"mp41", b"dash"] {
            b.extend_from_slice(brand);
        }
    });
    boxed(&mut out, b"moov", |m| {
        full(m, b"mvhd", 0, 0, |b| {
            b.extend_from_slice(&[0; 8]); // creation, modification
            b.extend_from_slice(&1000u32.to_be_bytes());
            b.extend_from_slice(&0u32.to_be_bytes()); // duration: fragmented
            b.extend_from_slice(&0x0001_0000u32.to_be_bytes()); // rate 1.0
            b.extend_from_slice(&0x0100u16.to_be_bytes()); // volume 1.0
            b.extend_from_slice(&[0; 10]);
            matrix(b);
            b.extend_from_slice(&[0; 24]);
            b.extend_from_slice(&(tracks.len() as u32 + 1).to_be_bytes());
        });
        for (i, t) in tracks.iter().enumerate() {
            trak(m, i as u32 + 1, t);
        }
        boxed(m, b"mvex", |x| {
            for i in 0..tracks.len() {
                full(x, b"trex", 0, 0, |b| {
                    b.extend_from_slice(&(i as u32 + 1).to_be_bytes());
                    b.extend_from_slice(&1u32.to_be_bytes()); // sample description index
                    b.extend_from_slice(&[0; 12]); // default duration, size, flags
                });
            }
        });
    });
    out
}

/// A media segment: `moof` (sequence number `seq`) and `mdat` with the samples of each track
/// (`samples[i]` for track `i + 1`; an empty list leaves the track out). Each sample's duration
/// is the gap to the next one's decode time; the last one's is the gap before it (or
/// `fallback[i]` if it is alone).
#[must_use]
pub fn media_segment(seq: u32, samples: &[Vec<Fmp4Sample>], fallback: &[u32]) -> Vec<u8> {
    // The moof is written twice: once to learn its size (every data_offset depends on it).
    let write_moof = |data_start: u32| {
        let mut moof = Vec::new();
        boxed(&mut moof, b"moof", |m| {
            full(m, b"mfhd", 0, 0, |b| b.extend_from_slice(&seq.to_be_bytes()));
            let mut offset = data_start;
            for (i, list) in samples.iter().enumerate() {
                let Some(first) = list.first() else { continue };
                boxed(m, b"traf", |t| {
                    // default-base-is-moof.
                    full(t, b"tfhd", 0, 0x02_0000, |b| {
                        b.extend_from_slice(&(i as u32 + 1).to_be_bytes());
                    });
                    full(t, b"tfdt", 1, 0, |b| {
                        b.extend_from_slice(&(first.dts.max(0) as u64).to_be_bytes());
                    });
                    // data-offset, duration, size, flags, composition offset (signed, v1).
                    full(t, b"trun", 1, 0x0F01, |b| {
                        b.extend_from_slice(&(list.len() as u32).to_be_bytes());
                        b.extend_from_slice(&offset.to_be_bytes());
                        for (k, s) in list.iter().enumerate() {
                            let dur = match (list.get(k + 1), k.checked_sub(1)) {
                                (Some(n), _) => n.dts - s.dts,
                                (None, Some(p)) => s.dts - list[p].dts,
                                (None, None) => i64::from(fallback.get(i).copied().unwrap_or(0)),
                            };
                            b.extend_from_slice(
                                &(dur.clamp(0, i64::from(u32::MAX)) as u32).to_be_bytes(),
                            );
                            b.extend_from_slice(&(s.data.len() as u32).to_be_bytes());
                            // sample_depends_on 2 (sync) / 1, sample_is_non_sync_sample.
                            let flags: u32 = if s.key { 0x0200_0000 } else { 0x0101_0000 };
                            b.extend_from_slice(&flags.to_be_bytes());
                            let cto =
                                (s.pts - s.dts).clamp(i64::from(i32::MIN), i64::from(i32::MAX));
                            b.extend_from_slice(&(cto as i32).to_be_bytes());
                        }
                    });
                });
                offset += list.iter().map(|s| s.data.len() as u32).sum::<u32>();
            }
        });
        moof
    };
    let moof_len = write_moof(0).len() as u32;
    let mut out = write_moof(moof_len + 8);
    let data: usize = samples.iter().flatten().map(|s| s.data.len()).sum();
    out.extend_from_slice(&((data + 8) as u32).to_be_bytes());
    out.extend_from_slice(b"mdat");
    for s in samples.iter().flatten() {
        out.extend_from_slice(&s.data);
    }
    out
}

/// Turns one track's stored packets back into samples (see the module docs).
pub struct Reassembler {
    depacketizer: Box<dyn Depacketizer + Send>,
    h265: bool,
    video: bool,
    clock: u32,
    /// The decode time (ns, object timeline) of the access unit being assembled.
    dts_ns: Option<u64>,
    last_rtp: Option<u32>,
    /// The object's timeline in RTP ticks: the unwrapped timestamp of the first packet.
    unwrapped: Option<i64>,
    /// The duration of one access unit where a packet may carry several (AAC: 1,024 samples
    /// at the track's clock, its sample rate); 0 where each is its own packet.
    au_ticks: i64,
    out: Vec<Vec<u8>>,
}

impl std::fmt::Debug for Reassembler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reassembler").field("clock", &self.clock).finish_non_exhaustive()
    }
}

impl Reassembler {
    /// A reassembler for `track`, or `None` for a codec HLS leaves out.
    #[must_use]
    pub fn new(track: &Fmp4Track) -> Option<Self> {
        let (depacketizer, h265): (Box<dyn Depacketizer + Send>, bool) = match track.codec {
            Fmp4Codec::H264 { .. } => (Box::new(H264Depacketizer::new()), false),
            Fmp4Codec::H265 { .. } => (Box::new(H265Depacketizer::new()), true),
            Fmp4Codec::Aac { .. } => (Box::new(AacDepacketizer::new()), false),
            Fmp4Codec::Opus { .. } => (Box::new(OpusDepacketizer::new()), false),
        };
        Some(Self {
            depacketizer,
            h265,
            video: track.is_video(),
            clock: track.timescale,
            dts_ns: None,
            last_rtp: None,
            unwrapped: None,
            au_ticks: if matches!(track.codec, Fmp4Codec::Aac { .. }) { 1024 } else { 0 },
            out: Vec::new(),
        })
    }

    /// Feeds the track's next packet: its payload, marker bit, stored RTP timestamp and send
    /// time (ns); completed samples are appended to `samples`.
    pub fn push(
        &mut self,
        payload: &[u8],
        marker: bool,
        rtp_time: u32,
        send_ns: u64,
        samples: &mut Vec<Fmp4Sample>,
    ) {
        if self.last_rtp.is_some_and(|t| t != rtp_time) {
            // A new access unit without a marker on the last one: finish that one.
            if let Some(au) = self.depacketizer.flush() {
                self.out.push(au);
            }
            self.emit(samples);
        }
        if self.dts_ns.is_none() || self.last_rtp != Some(rtp_time) {
            self.dts_ns = Some(send_ns);
        }
        self.last_rtp = Some(rtp_time);
        if self.depacketizer.push_into(payload, marker, &mut self.out).is_err() {
            self.out.clear();
        }
        if !self.out.is_empty() {
            self.emit(samples);
        }
    }

    /// Ends the track: a last access unit still open is emitted if whole.
    pub fn finish(&mut self, samples: &mut Vec<Fmp4Sample>) {
        if let Some(au) = self.depacketizer.flush() {
            self.out.push(au);
        }
        self.emit(samples);
    }

    fn emit(&mut self, samples: &mut Vec<Fmp4Sample>) {
        let (Some(rtp), Some(dts_ns)) = (self.last_rtp, self.dts_ns) else {
            self.out.clear();
            return;
        };
        // RTP timestamps wrap at 2^32: unwrap against the first one seen.
        let pts = match self.unwrapped {
            None => i64::from(rtp),
            Some(prev) => prev + i64::from(rtp.wrapping_sub(prev as u32) as i32),
        };
        self.unwrapped = Some(pts);
        let clock = i128::from(self.clock);
        let dts = if self.video {
            ((i128::from(dts_ns) * clock + 500_000_000) / 1_000_000_000) as i64
        } else {
            pts
        };
        // Several AAC frames in one packet (RFC 3640 §3.2.3.1, as ffmpeg publishes): the
        // packet's timestamp is the first's, each next one a frame of 1,024 samples later.
        for (i, au) in self.out.drain(..).enumerate() {
            let key = !self.video || is_key(&au, self.h265);
            let pts = pts + i as i64 * self.au_ticks;
            let dts = if self.video { dts } else { pts };
            samples.push(Fmp4Sample { dts: dts.min(pts), pts, key, data: au });
        }
        self.dts_ns = None;
    }
}

/// Whether an access unit (4-byte length-prefixed NAL units) holds an IDR (H.264 type 5) or an
/// IRAP picture (H.265 types 16–23).
fn is_key(au: &[u8], h265: bool) -> bool {
    let mut at = 0;
    while at + 4 < au.len() {
        let n = u32::from_be_bytes([au[at], au[at + 1], au[at + 2], au[at + 3]]) as usize;
        let b = au[at + 4];
        let key = if h265 { (16..=23).contains(&((b >> 1) & 0x3f)) } else { b & 0x1f == 5 };
        if key {
            return true;
        }
        at += 4 + n;
    }
    false
}

fn trak(m: &mut Vec<u8>, id: u32, t: &Fmp4Track) {
    boxed(m, b"trak", |k| {
        // enabled | in movie | in preview
        full(k, b"tkhd", 0, 7, |b| {
            b.extend_from_slice(&[0; 8]);
            b.extend_from_slice(&id.to_be_bytes());
            b.extend_from_slice(&[0; 4]);
            b.extend_from_slice(&0u32.to_be_bytes()); // duration
            b.extend_from_slice(&[0; 8]);
            b.extend_from_slice(&[0; 4]); // layer, alternate group
            let volume: u16 = if t.is_video() { 0 } else { 0x0100 };
            b.extend_from_slice(&volume.to_be_bytes());
            b.extend_from_slice(&[0; 2]);
            matrix(b);
            b.extend_from_slice(&(u32::from(t.width) << 16).to_be_bytes());
            b.extend_from_slice(&(u32::from(t.height) << 16).to_be_bytes());
        });
        boxed(k, b"mdia", |d| {
            full(d, b"mdhd", 0, 0, |b| {
                b.extend_from_slice(&[0; 8]);
                b.extend_from_slice(&t.timescale.to_be_bytes());
                b.extend_from_slice(&0u32.to_be_bytes());
                b.extend_from_slice(&0x55C4u16.to_be_bytes()); // language "und"
                b.extend_from_slice(&[0; 2]);
            });
            full(d, b"hdlr", 0, 0, |b| {
                b.extend_from_slice(&[0; 4]);
                b.extend_from_slice(if t.is_video() { b"vide" } else { b"soun" });
                b.extend_from_slice(&[0; 12]);
                b.extend_from_slice(if t.is_video() { b"video\0" } else { b"audio\0" });
            });
            boxed(d, b"minf", |n| {
                if t.is_video() {
                    full(n, b"vmhd", 0, 1, |b| b.extend_from_slice(&[0; 8]));
                } else {
                    full(n, b"smhd", 0, 0, |b| b.extend_from_slice(&[0; 4]));
                }
                boxed(n, b"dinf", |i| {
                    full(i, b"dref", 0, 0, |b| {
                        b.extend_from_slice(&1u32.to_be_bytes());
                        full(b, b"url ", 0, 1, |_| {});
                    });
                });
                boxed(n, b"stbl", |s| {
                    full(s, b"stsd", 0, 0, |b| {
                        b.extend_from_slice(&1u32.to_be_bytes());
                        sample_entry(b, t);
                    });
                    for name in [b"stts", b"stsc", b"stco"] {
                        full(s, name, 0, 0, |b| b.extend_from_slice(&0u32.to_be_bytes()));
                    }
                    full(s, b"stsz", 0, 0, |b| b.extend_from_slice(&[0; 8]));
                });
            });
        });
    });
}

fn sample_entry(b: &mut Vec<u8>, t: &Fmp4Track) {
    let visual = |b: &mut Vec<u8>, name: &[u8; 4], config: &dyn Fn(&mut Vec<u8>)| {
        boxed(b, name, |e| {
            e.extend_from_slice(&[0; 6]);
            e.extend_from_slice(&1u16.to_be_bytes()); // data reference index
            e.extend_from_slice(&[0; 16]);
            e.extend_from_slice(&t.width.to_be_bytes());
            e.extend_from_slice(&t.height.to_be_bytes());
            e.extend_from_slice(&0x0048_0000u32.to_be_bytes());
            e.extend_from_slice(&0x0048_0000u32.to_be_bytes());
            e.extend_from_slice(&0u32.to_be_bytes());
            e.extend_from_slice(&1u16.to_be_bytes()); // frame count
            e.extend_from_slice(&[0; 32]); // compressor name
            e.extend_from_slice(&0x0018u16.to_be_bytes());
            e.extend_from_slice(&0xFFFFu16.to_be_bytes());
            config(e);
        });
    };
    let audio = |b: &mut Vec<u8>, name: &[u8; 4], rate: u32, config: &dyn Fn(&mut Vec<u8>)| {
        boxed(b, name, |e| {
            e.extend_from_slice(&[0; 6]);
            e.extend_from_slice(&1u16.to_be_bytes());
            e.extend_from_slice(&[0; 8]);
            e.extend_from_slice(&u16::from(t.channels.max(1)).to_be_bytes());
            e.extend_from_slice(&16u16.to_be_bytes());
            e.extend_from_slice(&[0; 4]);
            e.extend_from_slice(&((rate.min(0xFFFF)) << 16).to_be_bytes());
            config(e);
        });
    };
    match &t.codec {
        Fmp4Codec::H264 { avcc } => visual(b, b"avc1", &|e| {
            let mut rec = avcc.clone();
            if let Some(l) = rec.get_mut(4) {
                // The depacketizer writes 4-byte NAL lengths.
                *l = 0xFF;
            }
            boxed(e, b"avcC", |c| c.extend_from_slice(&rec));
        }),
        Fmp4Codec::H265 { vps, sps, pps } => {
            visual(b, b"hvc1", &|e| boxed(e, b"hvcC", |c| hvcc(c, vps, sps, pps)));
        }
        Fmp4Codec::Aac { asc } => audio(b, b"mp4a", t.sample_rate, &|e| {
            full(e, b"esds", 0, 0, |d| esds(d, asc));
        }),
        Fmp4Codec::Opus { head } => audio(b, b"Opus", 48_000, &|e| {
            // dOps (Opus in ISOBMFF §4.3.2): OpusHead's fields from byte 8 on, big-endian.
            boxed(e, b"dOps", |d| {
                let g = |i: usize| head.get(i).copied().unwrap_or(0);
                d.push(0); // version
                d.push(g(9).max(1)); // channels
                d.extend_from_slice(&u16::from_le_bytes([g(10), g(11)]).to_be_bytes());
                d.extend_from_slice(
                    &u32::from_le_bytes([g(12), g(13), g(14), g(15)]).to_be_bytes(),
                );
                d.extend_from_slice(&i16::from_le_bytes([g(16), g(17)]).to_be_bytes());
                d.push(g(18)); // channel mapping family
                if g(18) != 0 {
                    d.extend_from_slice(head.get(19..).unwrap_or_default());
                }
            });
        }),
    }
}

/// An HEVCDecoderConfigurationRecord (ISO/IEC 14496-15 §8.3.3.1) from the parameter sets:
/// the profile, tier and level copied from the SPS, 4:2:0 8-bit assumed for the informative
/// fields, 4-byte NAL lengths.
fn hvcc(c: &mut Vec<u8>, vps: &[Vec<u8>], sps: &[Vec<u8>], pps: &[Vec<u8>]) {
    // profile_tier_level: 12 bytes after the 2-byte NAL header and one byte of SPS fields,
    // emulation prevention removed.
    let mut ptl = [0u8; 12];
    if let Some(s) = sps.first() {
        let rbsp = unescape_prefix(s.get(2..).unwrap_or_default(), 13);
        for (i, b) in rbsp.iter().skip(1).take(12).enumerate() {
            ptl[i] = *b;
        }
    }
    c.push(1);
    c.extend_from_slice(&ptl[..1 + 4 + 6]);
    c.push(ptl[11]); // level
    c.extend_from_slice(&0xF000u16.to_be_bytes()); // min_spatial_segmentation
    c.push(0xFC); // parallelism
    c.push(0xFD); // chroma 4:2:0
    c.push(0xF8); // luma 8-bit
    c.push(0xF8); // chroma 8-bit
    c.extend_from_slice(&0u16.to_be_bytes()); // avg frame rate
    c.push(0x0F); // constant rate 0, 1 temporal layer, nested, length size 4
    let arrays: Vec<(u8, &[Vec<u8>])> =
        [(32u8, vps), (33, sps), (34, pps)].into_iter().filter(|(_, l)| !l.is_empty()).collect();
    c.push(arrays.len() as u8);
    for (kind, list) in arrays {
        c.push(0x80 | kind);
        c.extend_from_slice(&(list.len() as u16).to_be_bytes());
        for nal in list {
            c.extend_from_slice(&(nal.len() as u16).to_be_bytes());
            c.extend_from_slice(nal);
        }
    }
}

/// The ES_Descriptor of an `esds` box (ISO/IEC 14496-1 §7.2.6.5) for AAC with `asc`.
fn esds(d: &mut Vec<u8>, asc: &[u8]) {
    let descr = |tag: u8, body: &[u8], out: &mut Vec<u8>| {
        out.push(tag);
        out.push(body.len() as u8);
        out.extend_from_slice(body);
    };
    let mut dsi = Vec::new();
    descr(0x05, asc, &mut dsi);
    let mut dcd = vec![0x40, 0x15, 0, 0, 0]; // AAC, audio stream, buffer size
    dcd.extend_from_slice(&0u32.to_be_bytes()); // max bitrate
    dcd.extend_from_slice(&0u32.to_be_bytes()); // avg bitrate
    dcd.extend_from_slice(&dsi);
    let mut es = vec![0, 1, 0]; // ES_ID 1, no flags
    descr(0x04, &dcd, &mut es);
    descr(0x06, &[0x02], &mut es); // SLConfig predefined 2
    descr(0x03, &es, d);
}

fn matrix(b: &mut Vec<u8>) {
    for v in [0x0001_0000u32, 0, 0, 0, 0x0001_0000, 0, 0, 0, 0x4000_0000] {
        b.extend_from_slice(&v.to_be_bytes());
    }
}

/// Appends a box: size, type, then what `body` writes.
fn boxed(out: &mut Vec<u8>, name: &[u8; 4], body: impl FnOnce(&mut Vec<u8>)) {
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(name);
    body(out);
    let len = (out.len() - at) as u32;
    out[at..at + 4].copy_from_slice(&len.to_be_bytes());
}

/// Appends a full box (version and flags first).
fn full(
    out: &mut Vec<u8>,
    name: &[u8; 4],
    version: u8,
    flags: u32,
    body: impl FnOnce(&mut Vec<u8>),
) {
    boxed(out, name, |b| {
        b.push(version);
        b.extend_from_slice(&flags.to_be_bytes()[1..]);
        body(b);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container::{Codec, CodecConfig, demux_bytes};
    use crate::native::NativeAssembler;

    /// A fixture's packets back into a fragmented MP4 (two segments), which the container
    /// demuxer reads as the fixture's tracks and samples: every H.264 access unit's slices and
    /// every AAC frame, with their presentation times.
    #[test]
    fn packets_become_a_fragmented_mp4_of_the_same_samples() {
        let file: &[u8] = include_bytes!("../testdata/h264_aac_faststart.mp4");
        let index = demux_bytes(file).unwrap();
        let mut asm = NativeAssembler::new(&index, 1316).unwrap();
        let mut units = Vec::new();
        for s in &index.samples {
            asm.push(s, &file[s.offset as usize..s.offset as usize + s.size as usize]).unwrap();
            units.extend(std::iter::from_fn(|| asm.poll_unit()));
        }
        asm.finish();
        units.extend(std::iter::from_fn(|| asm.poll_unit()));
        let tracks: Vec<Fmp4Track> = asm
            .tracks()
            .iter()
            .map(|t| Fmp4Track {
                codec: match t.codec {
                    Codec::H264 => Fmp4Codec::H264 { avcc: t.config.clone() },
                    _ => Fmp4Codec::Aac { asc: t.config.clone() },
                },
                timescale: t.clock_rate,
                width: t.width,
                height: t.height,
                channels: t.channels,
                sample_rate: if t.width == 0 { t.clock_rate } else { 0 },
            })
            .collect();
        // Two segments, cut at the second seek point.
        let cut = units.iter().enumerate().filter(|(_, u)| u.random_access).nth(1).unwrap().0;
        let mut out = init_segment(&tracks);
        for (n, part) in [&units[..cut], &units[cut..]].into_iter().enumerate() {
            let mut asms: Vec<Reassembler> =
                tracks.iter().map(|t| Reassembler::new(t).unwrap()).collect();
            let mut samples = vec![Vec::new(); tracks.len()];
            for u in part {
                let t = usize::from(u.track);
                asms[t].push(
                    &u.payload,
                    u.marker,
                    u.rtp_time,
                    u.send_time.as_nanos(),
                    &mut samples[t],
                );
            }
            for (t, a) in asms.iter_mut().enumerate() {
                a.finish(&mut samples[t]);
            }
            out.extend(media_segment(n as u32 + 1, &samples, &[3600, 1024]));
        }
        let back = demux_bytes(&out).unwrap();
        assert_eq!(back.tracks.len(), 2);
        assert!(matches!(back.tracks[0].config, CodecConfig::Avc { nal_length_size: 4, .. }));
        assert_eq!(back.tracks[1].codec, Codec::Aac);
        for t in 0..2u16 {
            let want: Vec<&crate::container::Sample> = index.track_samples(t).collect();
            let got: Vec<&crate::container::Sample> = back.track_samples(t).collect();
            assert_eq!(got.len(), want.len(), "track {t}");
            let ts = i128::from(index.tracks[usize::from(t)].timescale);
            let clock = i128::from(back.tracks[usize::from(t)].timescale);
            let first = (i128::from(want[0].pts) * clock / ts, i128::from(got[0].pts));
            for (w, g) in want.iter().zip(&got) {
                // Presentation times agree up to the one shift of the object's zero.
                let wp = i128::from(w.pts) * clock / ts - first.0;
                let gp = i128::from(g.pts) - first.1;
                assert!((wp - gp).abs() <= 1, "track {t}: pts {wp} vs {gp}");
                let src = &file[w.offset as usize..w.offset as usize + w.size as usize];
                let data = &out[g.offset as usize..g.offset as usize + g.size as usize];
                if t == 0 {
                    // The stored AU carries in-band parameter sets before key frames.
                    assert_eq!(slices(data), slices(src), "track 0 sample");
                    assert_eq!(g.keyframe, w.keyframe, "key flags");
                } else {
                    assert_eq!(data, src, "AAC frame");
                }
            }
        }
    }

    /// One packet of three AAC frames (RFC 3640 AAC-hbr: three 16-bit AU headers, size and
    /// index) becomes three samples a frame apart, not three at the packet's time.
    #[test]
    fn aac_frames_sharing_a_packet_are_a_frame_apart() {
        let track = Fmp4Track {
            codec: Fmp4Codec::Aac { asc: vec![0x11, 0x90] },
            timescale: 48_000,
            width: 0,
            height: 0,
            channels: 2,
            sample_rate: 48_000,
        };
        let frames: [&[u8]; 3] = [&[1, 2, 3], &[4, 5], &[6, 7, 8, 9]];
        let mut payload = vec![0, 48];
        for f in frames {
            payload.extend_from_slice(&((f.len() as u16) << 3).to_be_bytes());
        }
        for f in frames {
            payload.extend_from_slice(f);
        }
        let mut r = Reassembler::new(&track).unwrap();
        let mut samples = Vec::new();
        r.push(&payload, true, 5_000, 0, &mut samples);
        r.finish(&mut samples);
        let got: Vec<(i64, i64, &[u8])> =
            samples.iter().map(|s| (s.pts, s.dts, s.data.as_slice())).collect();
        assert_eq!(
            got,
            [(5_000, 5_000, frames[0]), (6_024, 6_024, frames[1]), (7_048, 7_048, frames[2])]
        );
    }

    /// Video decode times taken from a burst of arrivals (all near 0) become the pictures'
    /// spacing, shifted by the reordering so that none decodes after it is shown.
    #[test]
    fn decode_times_follow_the_pictures_shown() {
        // I P B B P B B in decode order, a picture every 3,600 ticks, shown from 7,200.
        let shown = [7_200, 18_000, 10_800, 14_400, 28_800, 21_600, 25_200];
        let mut samples: Vec<Fmp4Sample> = shown
            .iter()
            .enumerate()
            .map(|(i, &pts)| Fmp4Sample { dts: i as i64, pts, key: i == 0, data: Vec::new() })
            .collect();
        decode_times_from_presentation(&mut samples);
        let dts: Vec<i64> = samples.iter().map(|s| s.dts).collect();
        assert_eq!(dts, [3_600, 7_200, 10_800, 14_400, 18_000, 21_600, 25_200]);
        assert!(samples.iter().all(|s| s.dts <= s.pts));
    }

    /// The NAL units of a 4-byte length-prefixed access unit, parameter sets and delimiters
    /// left out.
    fn slices(au: &[u8]) -> Vec<&[u8]> {
        let mut out = Vec::new();
        let mut at = 0;
        while at + 4 <= au.len() {
            let n = u32::from_be_bytes([au[at], au[at + 1], au[at + 2], au[at + 3]]) as usize;
            let nal = &au[at + 4..(at + 4 + n).min(au.len())];
            if nal.first().is_some_and(|b| !matches!(b & 0x1f, 7..=9)) {
                out.push(nal);
            }
            at += 4 + n;
        }
        out
    }
}
