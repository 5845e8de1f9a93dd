//! Decoder configuration records, shared by the MP4 and Matroska parsers.
//!
//! Why: both containers carry the same records — MP4 in `avcC`/`hvcC`/`esds`/`dOps` boxes,
//! Matroska in `CodecPrivate` — and the packetizers need their contents (parameter sets for
//! `sprop-parameter-sets`, the AudioSpecificConfig for `config=`, the OpusHead):
//!
//! - AVCDecoderConfigurationRecord, ISO/IEC 14496-15 §5.3.3.1;
//! - HEVCDecoderConfigurationRecord, ISO/IEC 14496-15 §8.3.3.1;
//! - ES_Descriptor / DecoderConfigDescriptor / DecoderSpecificInfo, ISO/IEC 14496-1 §7.2.6;
//! - AudioSpecificConfig, ISO/IEC 14496-3 §1.6.2.1 (sampling-frequency table 1.18);
//! - OpusHead, RFC 7845 §5.1, and its ISO BMFF form `dOps` (Opus in ISOBMFF §4.3.2).
//!
//! Errors are plain descriptions; the caller names the box or element and its offset.

use super::CodecConfig;
use super::bytes::{BitReader, Cursor};

/// Parses an AVCDecoderConfigurationRecord.
pub(crate) fn parse_avcc(data: &[u8]) -> Result<CodecConfig, String> {
    let mut c = Cursor::new(data);
    let short = || "AVCDecoderConfigurationRecord is truncated".to_owned();
    let version = c.u8().ok_or_else(short)?;
    if version != 1 {
        return Err(format!("configurationVersion {version} (expected 1)"));
    }
    c.skip(3).ok_or_else(short)?; // profile, compatibility, level
    let nal_length_size = (c.u8().ok_or_else(short)? & 0x03) + 1;
    if nal_length_size == 3 {
        return Err("lengthSizeMinusOne of 2 (NAL lengths must be 1, 2 or 4 bytes)".to_owned());
    }
    let n_sps = c.u8().ok_or_else(short)? & 0x1F;
    let mut sps = Vec::new();
    for _ in 0..n_sps {
        let len = c.u16().ok_or_else(short)?;
        sps.push(c.take(usize::from(len)).ok_or_else(short)?.to_vec());
    }
    let n_pps = c.u8().ok_or_else(short)?;
    let mut pps = Vec::new();
    for _ in 0..n_pps {
        let len = c.u16().ok_or_else(short)?;
        pps.push(c.take(usize::from(len)).ok_or_else(short)?.to_vec());
    }
    // High-profile extensions (chroma format, SPS extensions) may follow; not needed.
    Ok(CodecConfig::Avc { nal_length_size, sps, pps })
}

/// Parses an HEVCDecoderConfigurationRecord, keeping the VPS, SPS and PPS arrays.
pub(crate) fn parse_hvcc(data: &[u8]) -> Result<CodecConfig, String> {
    let mut c = Cursor::new(data);
    let short = || "HEVCDecoderConfigurationRecord is truncated".to_owned();
    let version = c.u8().ok_or_else(short)?;
    if version != 1 {
        return Err(format!("configurationVersion {version} (expected 1)"));
    }
    c.skip(20).ok_or_else(short)?; // profile, tier, level, … constantFrameRate etc.
    let nal_length_size = (c.u8().ok_or_else(short)? & 0x03) + 1;
    if nal_length_size == 3 {
        return Err("lengthSizeMinusOne of 2 (NAL lengths must be 1, 2 or 4 bytes)".to_owned());
    }
    let arrays = c.u8().ok_or_else(short)?;
    let (mut vps, mut sps, mut pps) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..arrays {
        let nal_type = c.u8().ok_or_else(short)? & 0x3F;
        let n = c.u16().ok_or_else(short)?;
        for _ in 0..n {
            let len = c.u16().ok_or_else(short)?;
            let nal = c.take(usize::from(len)).ok_or_else(short)?.to_vec();
            match nal_type {
                32 => vps.push(nal),
                33 => sps.push(nal),
                34 => pps.push(nal),
                _ => {} // SEI and others: in-band is fine
            }
        }
    }
    Ok(CodecConfig::Hevc { nal_length_size, vps, sps, pps })
}

/// What an `esds` box says about the stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EsInfo {
    /// `objectTypeIndication` (ISO/IEC 14496-1 table 5; 0x40 MPEG-4 audio, 0x6B MP3, …).
    pub(crate) object_type: u8,
    /// The DecoderSpecificInfo bytes (for AAC the AudioSpecificConfig), empty if absent.
    pub(crate) specific: Vec<u8>,
}

/// Reads a descriptor header (tag and expandable size, ISO/IEC 14496-1 §8.3.3).
fn descriptor<'a>(c: &mut Cursor<'a>) -> Option<(u8, Cursor<'a>)> {
    let tag = c.u8()?;
    let mut size = 0usize;
    for _ in 0..4 {
        let b = c.u8()?;
        size = (size << 7) | usize::from(b & 0x7F);
        if b & 0x80 == 0 {
            break;
        }
    }
    // Some muxers write a size larger than what is left; clamp like ffmpeg does.
    let body = c.take(size.min(c.remaining()))?;
    Some((tag, Cursor::new(body)))
}

/// Parses the body of an `esds` full box after its version and flags: an ES_Descriptor (tag 3)
/// holding a DecoderConfigDescriptor (tag 4) holding a DecoderSpecificInfo (tag 5).
pub(crate) fn parse_esds(data: &[u8]) -> Result<EsInfo, String> {
    let mut c = Cursor::new(data);
    let (tag, mut body) = descriptor(&mut c).ok_or("no ES_Descriptor")?;
    let mut config = if tag == 0x03 {
        let short = || "ES_Descriptor is truncated".to_owned();
        body.skip(2).ok_or_else(short)?; // ES_ID
        let flags = body.u8().ok_or_else(short)?;
        if flags & 0x80 != 0 {
            body.skip(2).ok_or_else(short)?; // dependsOn_ES_ID
        }
        if flags & 0x40 != 0 {
            let len = body.u8().ok_or_else(short)?;
            body.skip(usize::from(len)).ok_or_else(short)?; // URL
        }
        if flags & 0x20 != 0 {
            body.skip(2).ok_or_else(short)?; // OCR_ES_Id
        }
        loop {
            let (tag, inner) = descriptor(&mut body).ok_or("no DecoderConfigDescriptor")?;
            if tag == 0x04 {
                break inner;
            }
        }
    } else if tag == 0x04 {
        body
    } else {
        return Err(format!("descriptor tag {tag:#04x} where an ES_Descriptor (0x03) belongs"));
    };
    let object_type = config.u8().ok_or("DecoderConfigDescriptor is truncated")?;
    config.skip(12).ok_or("DecoderConfigDescriptor is truncated")?;
    let mut specific = Vec::new();
    while config.remaining() > 0 {
        let Some((tag, inner)) = descriptor(&mut config) else { break };
        if tag == 0x05 {
            specific = inner.rest().to_vec();
            break;
        }
    }
    Ok(EsInfo { object_type, specific })
}

/// Sampling frequencies by `samplingFrequencyIndex` (ISO/IEC 14496-3 table 1.18).
const AAC_RATES: [u32; 13] =
    [96000, 88200, 64000, 48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025, 8000, 7350];

/// What an AudioSpecificConfig says: the output sample rate and the channel configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AscInfo {
    /// `audioObjectType` (2 = AAC LC, 5 = SBR, 29 = PS, …).
    pub(crate) object_type: u8,
    /// The sample rate after SBR, if the config signals SBR explicitly.
    pub(crate) sample_rate: u32,
    /// `channelConfiguration` (0: defined in the program config element).
    pub(crate) channels: u8,
}

/// Parses the start of an AudioSpecificConfig (ISO/IEC 14496-3 §1.6.2.1).
pub(crate) fn parse_asc(asc: &[u8]) -> Option<AscInfo> {
    let mut r = BitReader::new(asc);
    let object_type = |r: &mut BitReader<'_>| -> Option<u32> {
        let t = r.bits(5)?;
        if t == 31 { Some(32 + r.bits(6)?) } else { Some(t) }
    };
    let rate = |r: &mut BitReader<'_>| -> Option<u32> {
        let i = r.bits(4)?;
        if i == 15 { r.bits(24) } else { AAC_RATES.get(usize::try_from(i).ok()?).copied() }
    };
    let mut aot = object_type(&mut r)?;
    let mut sample_rate = rate(&mut r)?;
    let channels = u8::try_from(r.bits(4)?).ok()?;
    if aot == 5 || aot == 29 {
        // Explicit hierarchical SBR signalling: the extension rate is the output rate.
        sample_rate = rate(&mut r)?;
        aot = object_type(&mut r)?;
    } else if (1..=4).contains(&aot) && channels != 0 {
        // Backward-compatible signalling (§1.6.5.2): after the GASpecificConfig, the sync word
        // 0x2B7, extensionAudioObjectType 5 and sbrPresentFlag, then the output rate.
        let sbr = (|| {
            let _frame_length = r.bits(1)?;
            if r.bits(1)? == 1 {
                r.bits(14)?; // coreCoderDelay
            }
            let _extension = r.bits(1)?;
            if r.bits(11)? != 0x2B7 || object_type(&mut r)? != 5 || r.bits(1)? != 1 {
                return None;
            }
            rate(&mut r)
        })();
        if let Some(rate) = sbr {
            sample_rate = rate;
        }
    }
    Some(AscInfo { object_type: u8::try_from(aot).ok()?, sample_rate, channels })
}

/// Builds an AudioSpecificConfig for a Matroska `A_AAC/…` track without `CodecPrivate`:
/// `object_type` (1 Main, 2 LC, 3 SSR, 4 LTP) at `sample_rate` with `channels`, plus the
/// backward-compatible SBR extension (sync word 0x2B7, §1.6.5.2) if `sbr_rate` is given.
pub(crate) fn build_asc(
    object_type: u8,
    sample_rate: u32,
    channels: u8,
    sbr_rate: Option<u32>,
) -> Vec<u8> {
    let mut bits: Vec<(u32, u32)> = vec![(u32::from(object_type), 5)];
    let push_rate =
        |bits: &mut Vec<(u32, u32)>, rate: u32| match AAC_RATES.iter().position(|&r| r == rate) {
            Some(i) => bits.push((i as u32, 4)),
            None => {
                bits.push((15, 4));
                bits.push((rate & 0x00FF_FFFF, 24));
            }
        };
    push_rate(&mut bits, sample_rate);
    bits.push((u32::from(channels & 0x0F), 4));
    bits.push((0, 3)); // GASpecificConfig: frameLengthFlag, dependsOnCoreCoder, extensionFlag
    if let Some(sbr) = sbr_rate {
        bits.push((0x2B7, 11));
        bits.push((5, 5)); // extensionAudioObjectType = SBR
        bits.push((1, 1)); // sbrPresentFlag
        push_rate(&mut bits, sbr);
    }
    let mut out = Vec::new();
    let (mut acc, mut n) = (0u64, 0u32);
    for (v, len) in bits {
        acc = (acc << len) | u64::from(v);
        n += len;
        while n >= 8 {
            out.push((acc >> (n - 8)) as u8);
            n -= 8;
        }
    }
    if n > 0 {
        out.push((acc << (8 - n)) as u8);
    }
    out
}

/// The fields of an OpusHead (RFC 7845 §5.1) that the track needs.
pub(crate) fn parse_opus_head(head: &[u8]) -> Result<CodecConfig, String> {
    let mut c = Cursor::new(head);
    if c.take(8) != Some(b"OpusHead".as_slice()) {
        return Err("CodecPrivate does not start with \"OpusHead\"".to_owned());
    }
    let short = || "OpusHead is shorter than 19 bytes".to_owned();
    let version = c.u8().ok_or_else(short)?;
    if version >> 4 != 0 {
        return Err(format!("OpusHead version {version} is not supported (major version 0)"));
    }
    let channels = c.u8().ok_or_else(short)?;
    let pre_skip = u16::from_le_bytes(c.array().ok_or_else(short)?);
    let input_sample_rate = u32::from_le_bytes(c.array().ok_or_else(short)?);
    c.skip(3).ok_or_else(short)?; // output gain, mapping family
    if channels == 0 {
        return Err("OpusHead has 0 channels".to_owned());
    }
    Ok(CodecConfig::Opus { channels, pre_skip, input_sample_rate, head: head.to_vec() })
}

/// Converts a `dOps` box body (big-endian, Opus in ISOBMFF §4.3.2) into an OpusHead.
pub(crate) fn dops_to_opus_head(dops: &[u8]) -> Result<CodecConfig, String> {
    let mut c = Cursor::new(dops);
    let short = || "dOps is shorter than 11 bytes".to_owned();
    let version = c.u8().ok_or_else(short)?;
    if version != 0 {
        return Err(format!("dOps version {version} (expected 0)"));
    }
    let channels = c.u8().ok_or_else(short)?;
    let pre_skip = c.u16().ok_or_else(short)?;
    let input_sample_rate = c.u32().ok_or_else(short)?;
    let gain = c.u16().ok_or_else(short)?;
    let family = c.u8().ok_or_else(short)?;
    let mut head = Vec::with_capacity(19 + 2 + usize::from(channels));
    head.extend_from_slice(b"OpusHead");
    head.push(1);
    head.push(channels);
    head.extend_from_slice(&pre_skip.to_le_bytes());
    head.extend_from_slice(&input_sample_rate.to_le_bytes());
    head.extend_from_slice(&gain.to_le_bytes());
    head.push(family);
    if family != 0 {
        let table =
            c.take(2 + usize::from(channels)).ok_or("dOps channel mapping table is truncated")?;
        head.extend_from_slice(table);
    }
    if channels == 0 {
        return Err("dOps has 0 channels".to_owned());
    }
    Ok(CodecConfig::Opus { channels, pre_skip, input_sample_rate, head })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn avcc() {
        let rec = [1, 0x64, 0, 0x1E, 0xFF, 0xE1, 0, 3, 0x67, 1, 2, 1, 0, 2, 0x68, 9];
        assert_eq!(
            parse_avcc(&rec),
            Ok(CodecConfig::Avc {
                nal_length_size: 4,
                sps: vec![vec![0x67, 1, 2]],
                pps: vec![vec![0x68, 9]]
            })
        );
        // avc3 style: no parameter sets.
        assert_eq!(
            parse_avcc(&[1, 0x64, 0, 0x1E, 0xFD, 0xE0, 0]),
            Ok(CodecConfig::Avc { nal_length_size: 2, sps: vec![], pps: vec![] })
        );
        assert!(parse_avcc(&rec[..10]).unwrap_err().contains("truncated"));
        assert!(parse_avcc(&[0]).unwrap_err().contains("configurationVersion 0"));
        assert!(parse_avcc(&[1, 0, 0, 0, 0xFE, 0xE0, 0]).unwrap_err().contains("1, 2 or 4"));
    }

    #[test]
    fn hvcc() {
        let mut rec = vec![1u8];
        rec.extend_from_slice(&[0; 20]);
        rec.push(0xF3); // lengthSizeMinusOne = 3
        rec.push(4);
        for (t, nal) in [(32u8, [0x40u8, 1]), (33, [0x42, 1]), (34, [0x44, 1]), (39, [0x4E, 1])] {
            rec.extend_from_slice(&[0x80 | t, 0, 1, 0, 2]);
            rec.extend_from_slice(&nal);
        }
        assert_eq!(
            parse_hvcc(&rec),
            Ok(CodecConfig::Hevc {
                nal_length_size: 4,
                vps: vec![vec![0x40, 1]],
                sps: vec![vec![0x42, 1]],
                pps: vec![vec![0x44, 1]]
            })
        );
        assert!(parse_hvcc(&rec[..rec.len() - 1]).is_err());
    }

    #[test]
    fn esds_and_asc() {
        // ES_Descriptor(ES_ID 1) → DecoderConfig(0x40) → DecoderSpecificInfo(11 90), with the
        // 4-byte size form ffmpeg writes.
        let esds = [
            0x03, 0x80, 0x80, 0x80, 0x22, 0, 1, 0, //
            0x04, 0x80, 0x80, 0x80, 0x14, 0x40, 0x15, 0, 0, 0, 0, 0, 0x7D, 0, 0, 0, 0x7D,
            0, //
            0x05, 0x80, 0x80, 0x80, 0x02, 0x11, 0x90, //
            0x06, 0x80, 0x80, 0x80, 0x01, 0x02,
        ];
        assert_eq!(parse_esds(&esds), Ok(EsInfo { object_type: 0x40, specific: vec![0x11, 0x90] }));
        assert!(parse_esds(&[0x07, 0]).is_err());
        assert!(parse_esds(&[]).is_err());
        assert_eq!(
            parse_asc(&[0x11, 0x90]),
            Some(AscInfo { object_type: 2, sample_rate: 48000, channels: 2 })
        );
        // HE-AAC, explicit hierarchical: 24 kHz core, 48 kHz output.
        assert_eq!(
            parse_asc(&[0x2B, 0x11, 0x88, 0x00]).map(|a| (a.sample_rate, a.channels)),
            Some((48000, 2))
        );
        assert_eq!(parse_asc(&[0x11]), None);
    }

    #[test]
    fn asc_round_trips() {
        assert_eq!(build_asc(2, 48000, 2, None), vec![0x11, 0x90]);
        assert_eq!(build_asc(2, 44100, 2, None), vec![0x12, 0x10]);
        let asc = build_asc(2, 24000, 2, Some(48000));
        assert_eq!(asc, vec![0x13, 0x10, 0x56, 0xE5, 0x98]);
        assert_eq!(parse_asc(&asc).map(|a| (a.object_type, a.sample_rate)), Some((2, 48000)));
        // ffmpeg's sync extension with sbrPresentFlag 0: the core rate stands.
        assert_eq!(parse_asc(&[0x11, 0x90, 0x56, 0xE5, 0x00]).map(|a| a.sample_rate), Some(48000));
        let odd = build_asc(2, 50000, 1, None);
        assert_eq!(
            parse_asc(&odd),
            Some(AscInfo { object_type: 2, sample_rate: 50000, channels: 1 })
        );
    }

    #[test]
    fn opus() {
        let dops = [0, 2, 0x01, 0x38, 0, 0, 0xBB, 0x80, 0, 0, 0];
        let CodecConfig::Opus { channels, pre_skip, input_sample_rate, head } =
            dops_to_opus_head(&dops).unwrap()
        else {
            panic!("not opus")
        };
        assert_eq!((channels, pre_skip, input_sample_rate), (2, 312, 48000));
        assert_eq!(head, b"OpusHead\x01\x02\x38\x01\x80\xBB\x00\x00\x00\x00\x00");
        assert_eq!(
            parse_opus_head(&head),
            Ok(CodecConfig::Opus { channels, pre_skip, input_sample_rate, head: head.clone() })
        );
        assert!(parse_opus_head(b"OpusTags").is_err());
        assert!(parse_opus_head(&head[..12]).is_err());
        assert!(dops_to_opus_head(&dops[..5]).is_err());
        let mut family1 = dops.to_vec();
        family1[10] = 1;
        assert!(dops_to_opus_head(&family1).unwrap_err().contains("mapping"));
        family1.extend_from_slice(&[1, 1, 0, 1]);
        assert!(dops_to_opus_head(&family1).is_ok());
    }
}
