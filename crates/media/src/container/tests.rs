//! Tests over the committed fixtures (`crates/media/testdata`, made by `make.sh`): the index of
//! each file is compared with what ffprobe reads from it (`FILE.packets.csv`), the streaming
//! demuxer with the in-memory one, and damaged copies must fail cleanly.

use std::cmp::Ordering;

use proptest::prelude::*;

use super::index::cmp_time;
use super::*;
use crate::{StreamKind, TsScanner};

const MP4_FIXTURES: [&str; 8] = [
    "h264_aac_faststart.mp4",
    "h264_aac_negative_cts.mp4",
    "h264_aac_moov_last.mp4",
    "h264_aac_fragmented.mp4",
    "h264_aac_fragmented_edts.mp4",
    "hevc_aac.mp4",
    "mp3_ac3.mp4",
    "mjpeg.mp4",
];
const MKV_FIXTURES: [&str; 4] =
    ["h264_opus.mkv", "vp9_opus.webm", "mp3_ac3.mkv", "h264_aac_mkvmerge.mkv"];

/// The fixtures and ffprobe's packet lists, compiled in (the crate does no IO, even in tests).
const FIXTURES: &[(&str, &[u8])] = &[
    ("h264_aac_faststart.mp4", include_bytes!("../../testdata/h264_aac_faststart.mp4")),
    ("h264_aac_negative_cts.mp4", include_bytes!("../../testdata/h264_aac_negative_cts.mp4")),
    ("h264_aac_moov_last.mp4", include_bytes!("../../testdata/h264_aac_moov_last.mp4")),
    ("h264_aac_fragmented.mp4", include_bytes!("../../testdata/h264_aac_fragmented.mp4")),
    ("h264_aac_fragmented_edts.mp4", include_bytes!("../../testdata/h264_aac_fragmented_edts.mp4")),
    ("hevc_aac.mp4", include_bytes!("../../testdata/hevc_aac.mp4")),
    ("mp3_ac3.mp4", include_bytes!("../../testdata/mp3_ac3.mp4")),
    ("mjpeg.mp4", include_bytes!("../../testdata/mjpeg.mp4")),
    ("h264_opus.mkv", include_bytes!("../../testdata/h264_opus.mkv")),
    ("vp9_opus.webm", include_bytes!("../../testdata/vp9_opus.webm")),
    ("mp3_ac3.mkv", include_bytes!("../../testdata/mp3_ac3.mkv")),
    ("h264_aac_mkvmerge.mkv", include_bytes!("../../testdata/h264_aac_mkvmerge.mkv")),
    ("h264_aac.m2ts", include_bytes!("../../testdata/h264_aac.m2ts")),
    (
        "h264_aac_mkvmerge.mkv.packets.csv",
        include_bytes!("../../testdata/h264_aac_mkvmerge.mkv.packets.csv"),
    ),
    (
        "h264_aac_faststart.mp4.packets.csv",
        include_bytes!("../../testdata/h264_aac_faststart.mp4.packets.csv"),
    ),
    (
        "h264_aac_negative_cts.mp4.packets.csv",
        include_bytes!("../../testdata/h264_aac_negative_cts.mp4.packets.csv"),
    ),
    (
        "h264_aac_moov_last.mp4.packets.csv",
        include_bytes!("../../testdata/h264_aac_moov_last.mp4.packets.csv"),
    ),
    (
        "h264_aac_fragmented.mp4.packets.csv",
        include_bytes!("../../testdata/h264_aac_fragmented.mp4.packets.csv"),
    ),
    (
        "h264_aac_fragmented_edts.mp4.packets.csv",
        include_bytes!("../../testdata/h264_aac_fragmented_edts.mp4.packets.csv"),
    ),
    ("hevc_aac.mp4.packets.csv", include_bytes!("../../testdata/hevc_aac.mp4.packets.csv")),
    ("mp3_ac3.mp4.packets.csv", include_bytes!("../../testdata/mp3_ac3.mp4.packets.csv")),
    ("h264_opus.mkv.packets.csv", include_bytes!("../../testdata/h264_opus.mkv.packets.csv")),
    ("vp9_opus.webm.packets.csv", include_bytes!("../../testdata/vp9_opus.webm.packets.csv")),
    ("mp3_ac3.mkv.packets.csv", include_bytes!("../../testdata/mp3_ac3.mkv.packets.csv")),
];

fn fixture(name: &str) -> Vec<u8> {
    let found = FIXTURES.iter().find(|(n, _)| *n == name);
    found.unwrap_or_else(|| panic!("no fixture {name}")).1.to_vec()
}

fn all_fixtures() -> impl Iterator<Item = &'static str> {
    MP4_FIXTURES.into_iter().chain(MKV_FIXTURES)
}

fn demux(name: &str) -> MediaIndex {
    demux_bytes(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// One line of `FILE.packets.csv`.
#[derive(Clone, Debug)]
struct Packet {
    stream: usize,
    pts: Option<i64>,
    dts: Option<i64>,
    duration: Option<i64>,
    size: u32,
    pos: u64,
    key: bool,
}

fn packets(name: &str, stream: usize) -> Vec<Packet> {
    let text = String::from_utf8(fixture(&format!("{name}.packets.csv"))).unwrap();
    let num = |s: &str| s.parse::<i64>().ok();
    text.lines()
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            Packet {
                stream: f[0].parse().unwrap(),
                pts: num(f[1]),
                dts: num(f[2]),
                duration: num(f[3]),
                size: f[4].parse().unwrap(),
                pos: f[5].parse().unwrap(),
                key: f[6].contains('K'),
            }
        })
        .filter(|p| p.stream == stream)
        .collect()
}

fn track(ix: &MediaIndex, t: u16) -> Vec<Sample> {
    ix.track_samples(t).copied().collect()
}

fn assert_decode_order(name: &str, ix: &MediaIndex) {
    for w in ix.samples.windows(2) {
        let (a, b) = (w[0], w[1]);
        let ta = ix.tracks[usize::from(a.track)].timescale;
        let tb = ix.tracks[usize::from(b.track)].timescale;
        let ord = cmp_time(a.dts, ta, b.dts, tb);
        assert!(
            ord == Ordering::Less || (ord == Ordering::Equal && a.track <= b.track),
            "{name}: {a:?} before {b:?}"
        );
    }
}

/// Drives a [`Demuxer`] over `file`, handing over at most `chunk` bytes per read (or, with
/// `chunk == 0`, everything from the asked offset to the end of the file).
fn stream_demux(file: &[u8], chunk: usize) -> Result<MediaIndex, ContainerError> {
    let kind = sniff(file).ok_or(ContainerError::Unrecognised)?;
    let mut d = Demuxer::new(kind, file.len() as u64);
    let mut reads = 0;
    while let Some(need) = d.poll_need() {
        assert!(need.len > 0 && need.offset + need.len <= file.len() as u64, "{need:?}");
        let start = need.offset as usize;
        let end = if chunk == 0 { file.len() } else { start + (need.len as usize).min(chunk) };
        d.handle_data(need.offset, &file[start..end])?;
        reads += 1;
        assert!(reads < 10_000_000, "the demuxer does not make progress");
    }
    d.finish()
}

#[test]
fn sniffs_every_fixture() {
    for name in MP4_FIXTURES {
        assert_eq!(sniff(&fixture(name)), Some(ContainerKind::Mp4), "{name}");
    }
    for name in MKV_FIXTURES {
        assert_eq!(sniff(&fixture(name)), Some(ContainerKind::Matroska), "{name}");
    }
    let m2ts = fixture("h264_aac.m2ts");
    assert_eq!(sniff(&m2ts), Some(ContainerKind::M2ts));
    let mut ts = Vec::new();
    M2tsToTs::new().push(&m2ts, &mut ts);
    assert_eq!(sniff(&ts), Some(ContainerKind::MpegTs));
    assert_eq!(sniff(&ts[..188]), None, "TS needs two sync bytes");
    assert_eq!(sniff(b"\0\0\0\x20ftyp"), Some(ContainerKind::Mp4));
    assert_eq!(sniff(b"\0\0\0\x20fty"), None);
    assert_eq!(sniff(b"RIFF\0\0\0\0WAVEfmt "), None);
    assert_eq!(sniff(&[]), None);
}

#[test]
fn mp4_samples_match_ffprobe() {
    // (file, [(ffprobe stream, our track)], compare durations)
    type Case = (&'static str, &'static [(usize, u16)], bool);
    let cases: [Case; 7] = [
        ("h264_aac_faststart.mp4", &[(0, 0), (1, 1)], true),
        ("h264_aac_negative_cts.mp4", &[(0, 0), (1, 1)], true),
        ("h264_aac_moov_last.mp4", &[(0, 0), (1, 1)], true),
        // ffmpeg reports the first (stretched) audio sample as 1024 long, the trun says 6400.
        ("h264_aac_fragmented.mp4", &[(0, 0), (1, 1)], false),
        // The last trun entry says 768 (the muxer trimmed it), ffmpeg reports 1024.
        ("h264_aac_fragmented_edts.mp4", &[(0, 0), (1, 1)], false),
        ("hevc_aac.mp4", &[(0, 0), (1, 1)], true),
        ("mp3_ac3.mp4", &[(0, 0), (1, 1)], true),
    ];
    for (name, map, durations) in cases {
        let ix = demux(name);
        assert_eq!(ix.kind, ContainerKind::Mp4);
        assert!(ix.skipped.is_empty(), "{name}: {:?}", ix.skipped);
        for &(stream, t) in map {
            let theirs = packets(name, stream);
            let ours = track(&ix, t);
            assert_eq!(ours.len(), theirs.len(), "{name} track {t}: sample count");
            for (i, (s, p)) in ours.iter().zip(&theirs).enumerate() {
                let at = format!("{name} track {t} sample {i}: {s:?} vs {p:?}");
                assert_eq!(Some(s.pts), p.pts, "{at}");
                assert_eq!(Some(s.dts), p.dts, "{at}");
                assert_eq!(s.size, p.size, "{at}");
                assert_eq!(s.offset, p.pos, "{at}");
                assert_eq!(s.keyframe, p.key, "{at}");
                if durations {
                    assert_eq!(Some(i64::from(s.duration)), p.duration, "{at}");
                }
            }
        }
        assert_decode_order(name, &ix);
    }
}

#[test]
fn h264_aac_tracks() {
    let ix = demux("h264_aac_faststart.mp4");
    assert_eq!(ix.tracks.len(), 2);
    let v = &ix.tracks[0];
    assert_eq!((v.id, v.codec, v.kind), (1, Codec::H264, StreamKind::Video));
    assert_eq!(
        (v.timescale, v.width, v.height, v.sample_rate, v.channels),
        (15360, 160, 120, 0, 0)
    );
    assert_eq!(v.language, None);
    let CodecConfig::Avc { nal_length_size, sps, pps } = &v.config else {
        panic!("{:?}", v.config)
    };
    assert_eq!(*nal_length_size, 4);
    assert_eq!((sps.len(), pps.len()), (1, 1));
    assert_eq!(sps[0][0] & 0x1F, 7);
    assert_eq!(pps[0][0] & 0x1F, 8);
    assert_eq!(sps[0][1], 0x64, "High profile");
    let a = &ix.tracks[1];
    assert_eq!((a.id, a.codec, a.kind), (2, Codec::Aac, StreamKind::Audio));
    assert_eq!((a.timescale, a.sample_rate, a.channels), (48000, 48000, 2));
    let CodecConfig::Aac { audio_specific_config } = &a.config else { panic!("{:?}", a.config) };
    assert_eq!(audio_specific_config[..2], [0x11, 0x90], "AAC LC, 48 kHz, stereo");

    assert_eq!(ix.track_samples(0).filter(|s| s.keyframe).count(), 3);
    assert_eq!(ix.track_samples(0).map(|s| u64::from(s.size)).sum::<u64>(), 10550);
    assert_eq!(ix.track_samples(1).map(|s| u64::from(s.size)).sum::<u64>(), 8056);
    // B-frames and the edit list: the first frame is presented at 0 but decoded two frames
    // earlier; AAC priming (1024 samples) is presented before 0.
    let first_v = ix.track_samples(0).next().unwrap();
    assert_eq!((first_v.dts, first_v.pts), (-2048, 0));
    let first_a = ix.track_samples(1).next().unwrap();
    assert_eq!((first_a.dts, first_a.pts), (-1024, -1024));
    assert_eq!(ix.time_ns(1, first_a.pts), -21_333_333);
    assert_eq!(ix.time_ns(0, 15360), 1_000_000_000);
    assert_eq!(ix.time_ns(7, 15360), 0);
    assert_eq!(ix.duration_ns, 2_000_000_000);
}

#[test]
fn hevc_track() {
    let ix = demux("hevc_aac.mp4");
    let v = &ix.tracks[0];
    assert_eq!((v.codec, v.width, v.height), (Codec::H265, 160, 120));
    assert_eq!(v.codec.name(), "hevc");
    let CodecConfig::Hevc { nal_length_size, vps, sps, pps } = &v.config else {
        panic!("{:?}", v.config)
    };
    assert_eq!(*nal_length_size, 4);
    let nal_type = |n: &Vec<u8>| (n[0] >> 1) & 0x3F;
    assert_eq!(vps.iter().map(nal_type).collect::<Vec<_>>(), [32]);
    assert_eq!(sps.iter().map(nal_type).collect::<Vec<_>>(), [33]);
    assert_eq!(pps.iter().map(nal_type).collect::<Vec<_>>(), [34]);
    assert_eq!(ix.track_samples(0).filter(|s| s.keyframe).count(), 3);
}

#[test]
fn moov_first_and_last_give_the_same_index() {
    let first = demux("h264_aac_faststart.mp4");
    let last = demux("h264_aac_moov_last.mp4");
    assert_eq!(first.tracks, last.tracks);
    assert_eq!(first.duration_ns, last.duration_ns);
    assert_eq!(first.samples.len(), last.samples.len());
    let shift = first.samples[0].offset as i64 - last.samples[0].offset as i64;
    assert!(shift > 0, "faststart moves the mdat after the moov");
    for (a, b) in first.samples.iter().zip(&last.samples) {
        assert_eq!(Sample { offset: b.offset, ..*a }, *b);
        assert_eq!(a.offset as i64 - b.offset as i64, shift);
    }
}

#[test]
fn fragments_give_the_progressive_samples() {
    let key = |s: &Sample| (s.dts, s.pts, s.size, s.keyframe);
    let progressive = demux("h264_aac_moov_last.mp4");
    // With the edit lists in the fragmented file's moov, every time is the same.
    let edts = demux("h264_aac_fragmented_edts.mp4");
    assert_eq!(progressive.tracks, edts.tracks);
    for t in 0..2 {
        let a: Vec<_> = progressive.track_samples(t).map(key).collect();
        let b: Vec<_> = edts.track_samples(t).map(key).collect();
        assert_eq!(a, b, "track {t}");
    }
    // Without them (empty_moov), ffmpeg starts each track at 0: video times move by the
    // B-frame delay (2048), audio by 6400 from the second sample on (the first is stretched).
    let frag = demux("h264_aac_fragmented.mp4");
    for (t, shift, skip) in [(0u16, 2048, 0), (1, 6400, 1)] {
        let a: Vec<_> = progressive.track_samples(t).skip(skip).map(key).collect();
        let b: Vec<_> = frag
            .track_samples(t)
            .skip(skip)
            .map(|s| (s.dts - shift, s.pts - shift, s.size, s.keyframe))
            .collect();
        assert_eq!(a, b, "track {t}");
    }
}

#[test]
fn mp3_and_ac3_in_mp4() {
    let ix = demux("mp3_ac3.mp4");
    let codecs: Vec<_> = ix.tracks.iter().map(|t| (t.codec, t.config.clone())).collect();
    assert_eq!(codecs, [(Codec::Mp3, CodecConfig::Mp3), (Codec::Ac3, CodecConfig::Ac3)]);
    // AC-3's channel count comes from dac3 (mono); MP3's sample entry says 2 (the template).
    assert_eq!((ix.tracks[1].sample_rate, ix.tracks[1].channels), (48000, 1));
    assert_eq!(ix.tracks[0].sample_rate, 48000);
}

#[test]
fn matroska_samples_match_ffprobe() {
    // (file, [(ffprobe stream, our track, CodecDelay in ns)])
    type Case = (&'static str, &'static [(usize, u16, i64)]);
    let cases: [Case; 4] = [
        ("h264_opus.mkv", &[(0, 0, 0), (1, 1, 6_500_000)]),
        ("vp9_opus.webm", &[(1, 0, 6_500_000)]),
        ("mp3_ac3.mkv", &[(0, 0, 0), (1, 1, 0)]),
        // mkvmerge laces AAC: 8 frames per block (EBML lacing).
        ("h264_aac_mkvmerge.mkv", &[(0, 0, 0), (1, 1, 0)]),
    ];
    const MS: i64 = 1_000_000;
    for (name, map) in cases {
        let ix = demux(name);
        assert_eq!(ix.kind, ContainerKind::Matroska);
        for &(stream, t, delay) in map {
            let theirs = packets(name, stream);
            let ours = track(&ix, t);
            assert_eq!(ours.len(), theirs.len(), "{name} track {t}: sample count");
            let audio = ix.tracks[usize::from(t)].kind == StreamKind::Audio;
            for (i, (s, p)) in ours.iter().zip(&theirs).enumerate() {
                let at = format!("{name} track {t} sample {i}: {s:?} vs {p:?}");
                // ffprobe's pos is the block's body; every frame of a laced block has it.
                let same_block = |j: usize| theirs.get(j).is_some_and(|q| q.pos == p.pos);
                let laced = (i > 0 && same_block(i - 1)) || same_block(i + 1);
                if !laced {
                    // The frame follows a 4-byte block header.
                    assert_eq!(s.offset, p.pos + 4, "{at}");
                } else if i > 0 && same_block(i - 1) {
                    // Laced frames follow each other.
                    assert_eq!(s.offset, ours[i - 1].offset + u64::from(ours[i - 1].size), "{at}");
                } else {
                    // The first laced frame follows the block header and the lace sizes.
                    assert!((p.pos + 5..p.pos + 64).contains(&s.offset), "{at}");
                }
                assert_eq!(s.size, p.size, "{at}");
                assert_eq!(s.keyframe, p.key, "{at}");
                // ffmpeg rounds CodecDelay to the 1 ms timestamp unit before subtracting it,
                // and laced frames' times to the millisecond.
                let rounded = (delay + MS / 2) / MS * MS;
                let ms = (s.pts + delay - rounded).div_euclid(MS);
                let slack = if laced { 1 } else { 0 };
                assert!(p.pts.is_some_and(|p| (p - ms).abs() <= slack), "{at}");
                assert!(s.dts <= s.pts, "{at}");
                if audio {
                    assert_eq!(s.dts, s.pts, "{at}");
                    // The gap to the next frame, from timestamps rounded to 1 ms.
                    if i + 1 < ours.len() {
                        let ms = i64::from(s.duration) / MS;
                        assert!(p.duration.is_some_and(|d| (d - ms).abs() <= 1), "{at}");
                    }
                }
            }
        }
        assert_decode_order(name, &ix);
    }
}

#[test]
fn matroska_tracks_and_decode_times() {
    let ix = demux("h264_opus.mkv");
    let v = &ix.tracks[0];
    assert_eq!(
        (v.id, v.codec, v.timescale, v.width, v.height),
        (1, Codec::H264, 1_000_000_000, 160, 120)
    );
    let CodecConfig::Avc { sps, pps, .. } = &v.config else { panic!("{:?}", v.config) };
    assert_eq!((sps[0][0] & 0x1F, pps[0][0] & 0x1F), (7, 8));
    let a = &ix.tracks[1];
    assert_eq!((a.id, a.codec, a.sample_rate, a.channels), (2, Codec::Opus, 48000, 2));
    let CodecConfig::Opus { channels, pre_skip, input_sample_rate, head } = &a.config else {
        panic!("{:?}", a.config)
    };
    assert_eq!((*channels, *pre_skip, *input_sample_rate), (2, 312, 48000));
    assert!(head.starts_with(b"OpusHead"));
    // The same x264 encode as the MP4s: the video dts are the sorted pts, delayed so that
    // none is after its pts (here by one frame and a bit: 66 + 67 ms).
    let video = track(&ix, 0);
    assert_eq!(video.len(), 30);
    assert_eq!(video.iter().filter(|s| s.keyframe).count(), 3);
    let mut pts: Vec<i64> = video.iter().map(|s| s.pts).collect();
    pts.sort_unstable();
    let shift = pts[0] - video[0].dts;
    assert_eq!(shift, 133_000_000);
    for (s, p) in video.iter().zip(&pts) {
        assert_eq!(s.dts, p - shift);
    }
    // Opus starts 6.5 ms early: its CodecDelay (the OpusHead pre-skip, 312 samples).
    assert_eq!(ix.track_samples(1).next().unwrap().pts, -6_500_000);
    // The last Opus frame starts at 1994.5 ms and lasts 20 ms.
    assert_eq!(ix.duration_ns, 2_014_500_000);
}

#[test]
fn webm_keeps_opus_and_skips_vp9() {
    let ix = demux("vp9_opus.webm");
    assert_eq!(ix.tracks.len(), 1);
    assert_eq!((ix.tracks[0].id, ix.tracks[0].codec), (2, Codec::Opus));
    assert_eq!(ix.skipped.len(), 1);
    assert_eq!(ix.skipped[0].id, 1);
    assert_eq!(ix.skipped[0].codec, "vp9");
    assert_eq!(
        ix.skipped[0].to_string(),
        "track 1: codec vp9 is not supported (supported: H.264, H.265, AAC, Opus, AC-3, MP3)"
    );
    assert_eq!(ix.samples.len(), 101);
}

#[test]
fn mp3_and_ac3_in_matroska() {
    let ix = demux("mp3_ac3.mkv");
    let got: Vec<_> = ix.tracks.iter().map(|t| (t.codec, t.sample_rate, t.channels)).collect();
    assert_eq!(got, [(Codec::Mp3, 48000, 1), (Codec::Ac3, 48000, 1)]);
    assert_eq!(ix.track_samples(0).count(), 43);
    assert_eq!(ix.track_samples(1).count(), 32);
}

#[test]
fn mjpeg_only_is_refused_with_the_codec_named() {
    let err = demux_bytes(&fixture("mjpeg.mp4")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "no supported track: track 1: codec mjpeg is not supported \
         (supported: H.264, H.265, AAC, Opus, AC-3, MP3)"
    );
}

#[test]
fn m2ts_goes_through_the_ts_path() {
    let m2ts = fixture("h264_aac.m2ts");
    let kind = sniff(&m2ts).unwrap();
    assert_eq!(
        demux_bytes(&m2ts).unwrap_err(),
        ContainerError::TransportStream { kind: ContainerKind::M2ts }
    );
    let d = Demuxer::new(kind, m2ts.len() as u64);
    assert_eq!(d.poll_need(), None);
    assert!(d.finish().unwrap_err().to_string().contains("TsScanner"));

    let mut adapter = M2tsToTs::new();
    let mut scanner = TsScanner::new();
    let mut out = Vec::new();
    for chunk in m2ts.chunks(1000) {
        out.clear();
        adapter.push(chunk, &mut out);
        scanner.push(&out).unwrap();
    }
    assert_eq!(adapter.packets(), m2ts.len() as u64 / 192);
    assert_eq!(adapter.finish(), 0);
    let index = scanner.finish().unwrap();
    assert_eq!(index.packet_count(), m2ts.len() as u64 / 192);
    // ffmpeg's M2TS mode marks AAC as private data (stream_type 6): only the video is named.
    let codecs: Vec<_> = index.streams().iter().map(|s| s.codec).collect();
    assert_eq!(codecs.len(), 2);
    assert_eq!(codecs[0], "h264");
}

#[test]
fn streaming_gives_the_in_memory_index() {
    for name in all_fixtures() {
        let file = fixture(name);
        let whole = demux_bytes(&file);
        for chunk in [1, 5, 16, 100, 4096, 0] {
            assert_eq!(stream_demux(&file, chunk), whole, "{name}, reads of {chunk}");
        }
    }
}

#[test]
fn demuxer_checks_its_caller() {
    let file = fixture("h264_aac_moov_last.mp4");
    let mut d = Demuxer::new(ContainerKind::Mp4, file.len() as u64);
    let need = d.poll_need().unwrap();
    assert_eq!(need, Need { offset: 0, len: 16 });
    assert_eq!(
        d.handle_data(5, &file[5..9]),
        Err(ContainerError::UnexpectedData { expected: Some(0), got: 5 })
    );
    d.handle_data(0, &file[..4]).unwrap();
    assert_eq!(d.poll_need(), Some(Need { offset: 4, len: 12 }));
    // The file turns out shorter than announced.
    let err = d.handle_data(4, &[]).unwrap_err();
    assert_eq!(err, ContainerError::ShortRead { offset: 4, file_len: file.len() as u64 });
    assert_eq!(d.poll_need(), None);
    assert_eq!(d.finish(), Err(err));

    let d = Demuxer::new(ContainerKind::Matroska, 1000);
    assert!(matches!(d.finish(), Err(ContainerError::Unfinished { offset: 0 })));
    let mut d = Demuxer::new(ContainerKind::Mp4, 0);
    assert_eq!(d.poll_need(), None);
    assert!(matches!(d.handle_data(0, b"x"), Err(ContainerError::UnexpectedData { .. })));
    assert!(matches!(d.finish(), Err(ContainerError::Missing { what: "moov box", .. })));
}

#[test]
fn truncated_files_fail_cleanly() {
    for name in all_fixtures() {
        let file = fixture(name);
        let full = demux_bytes(&file).map(|ix| ix.samples.len());
        for cut in (0..file.len()).step_by(61).chain([file.len() - 1, file.len() - 8]) {
            match demux_bytes(&file[..cut]) {
                Ok(ix) => {
                    assert!(ix.samples.len() <= *full.as_ref().unwrap(), "{name} cut at {cut}")
                }
                Err(e) => assert!(!e.to_string().is_empty()),
            }
        }
    }
    let cut = |name: &str, by: usize| {
        let file = fixture(name);
        demux_bytes(&file[..file.len() - by]).unwrap_err()
    };
    // moov first, mdat cut: the samples past the end are named.
    let e = cut("h264_aac_faststart.mp4", 100);
    assert!(matches!(e, ContainerError::SampleOutsideFile { .. }), "{e}");
    assert!(e.to_string().starts_with("track "), "{e}");
    // moov last and cut.
    let e = cut("h264_aac_moov_last.mp4", 100);
    assert!(e.to_string().starts_with("file truncated: moov box at offset 18654"), "{e}");
    // Matroska cut inside a cluster.
    let e = cut("h264_opus.mkv", 5000);
    assert!(matches!(e, ContainerError::Truncated { .. }), "{e}");
}

#[test]
fn huge_boxes_are_refused_before_reading() {
    let mut file = fixture("h264_aac_faststart.mp4")[..32].to_vec(); // ftyp
    file.extend_from_slice(&[0xFF, 0xFF, 0xFF, 0xF0]);
    file.extend_from_slice(b"moov");
    file.extend_from_slice(&[0; 64]);
    let e = demux_bytes(&file).unwrap_err();
    assert!(
        e.to_string().starts_with("file truncated: moov box at offset 32 needs 4294967280"),
        "{e}"
    );

    // 64-bit size.
    let mut large = file[..32].to_vec();
    large.extend_from_slice(&[0, 0, 0, 1]);
    large.extend_from_slice(b"moov");
    large.extend_from_slice(&u64::MAX.to_be_bytes());
    assert!(matches!(demux_bytes(&large), Err(ContainerError::Truncated { .. })));

    // In a (claimed) huge file, a 300 MiB moov is refused rather than read.
    let mut d = Demuxer::new(ContainerKind::Mp4, 1 << 40);
    d.handle_data(0, &file[..16]).unwrap();
    let mut header = ((300u32 << 20).to_be_bytes()).to_vec();
    header.extend_from_slice(b"moov");
    header.extend_from_slice(&[0; 8]);
    let need = d.poll_need().unwrap();
    assert_eq!(need.offset, 32);
    let e = d.handle_data(32, &header).unwrap_err();
    assert_eq!(
        e.to_string(),
        "moov box at offset 32 is 314572800 bytes, over the limit of 268435456 bytes"
    );

    // Matroska: a Tracks element of 2^40 bytes.
    let mkv = fixture("h264_opus.mkv");
    let mut d = Demuxer::new(ContainerKind::Matroska, 1 << 50);
    let mut fake = mkv[..40].to_vec(); // the EBML header
    fake.extend_from_slice(&[
        0x18, 0x53, 0x80, 0x67, 0x01, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
    ]);
    fake.extend_from_slice(&[0x16, 0x54, 0xAE, 0x6B, 0x01, 0, 0x01, 0, 0, 0, 0, 0]);
    let mut e = None;
    while let Some(need) = d.poll_need() {
        let start = need.offset as usize;
        let end = (start + need.len as usize).min(fake.len());
        if let Err(err) = d.handle_data(need.offset, &fake[start..end]) {
            e = Some(err);
            break;
        }
    }
    let e = e.unwrap();
    assert!(e.to_string().starts_with("Tracks element at offset 52"), "{e}");
    assert!(matches!(e, ContainerError::TooLarge { size: 0x100_0000_0000, .. }), "{e}");
}

#[test]
fn random_bytes_fail_cleanly() {
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let prefixes: [&[u8]; 4] = [
        b"",
        b"\0\0\0\x18ftypisom",
        b"\x1A\x45\xDF\xA3",
        b"\x1A\x45\xDF\xA3\x9F\x42\x82\x88matroska",
    ];
    for i in 0..4000 {
        let mut data = prefixes[i % prefixes.len()].to_vec();
        let len = (next() % 2048) as usize;
        data.extend((0..len).map(|_| next() as u8));
        let _ = demux_bytes(&data);
        if let Some(kind) = sniff(&data) {
            let _ = stream_demux(&data, 64);
            let _ = kind;
        }
    }
}

/// Applies `edits` (position, new byte) and a truncation to a fixture.
fn mutate(file: &[u8], edits: &[(usize, u8)], keep: usize) -> Vec<u8> {
    let mut f = file.to_vec();
    for &(at, b) in edits {
        let len = f.len();
        if len > 0 {
            f[at % len] = b;
        }
    }
    f.truncate(keep);
    f
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Mutated fixtures never panic, and the streaming demuxer agrees with the in-memory one.
    #[test]
    fn mutations_never_panic(
        which in 0usize..12,
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..24),
        keep in any::<usize>(),
        chunk in 1usize..5000,
    ) {
        let name = all_fixtures().nth(which).unwrap();
        let file = fixture(name);
        let keep = if keep % 4 == 0 { keep % (file.len() + 1) } else { file.len() };
        let data = mutate(&file, &edits, keep);
        let whole = demux_bytes(&data);
        if sniff(&data).is_some_and(|k| matches!(k, ContainerKind::Mp4 | ContainerKind::Matroska)) {
            prop_assert_eq!(stream_demux(&data, chunk), whole);
        }
    }

    /// Mutations aimed at the moov (MP4) or the first few KiB (Matroska), where the tables are.
    #[test]
    fn header_mutations_never_panic(
        which in 0usize..12,
        edits in proptest::collection::vec((0usize..4096, any::<u8>()), 1..8),
    ) {
        let name = all_fixtures().nth(which).unwrap();
        let file = fixture(name);
        // The moov of the moov-last file sits at the end: aim there.
        let base = if name == "h264_aac_moov_last.mp4" { 18_654 } else { 0 };
        let edits: Vec<_> = edits.into_iter().map(|(at, b)| (base + at, b)).collect();
        let data = mutate(&file, &edits, file.len());
        if let Ok(ix) = demux_bytes(&data) {
            for s in &ix.samples {
                prop_assert!(s.offset + u64::from(s.size) <= data.len() as u64);
                prop_assert!(usize::from(s.track) < ix.tracks.len());
            }
        }
    }
}
