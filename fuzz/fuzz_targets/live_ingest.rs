//! Fuzzes live ingest (`isochron_media::live`): any text as an announced track's format
//! parameters yields a track or an error naming it, never a panic; and any bytes, cut into
//! packets of two tracks (H.264 video, AAC audio), become units in arrival order: each taken
//! packet comes out once, each track's numbers rise, and a random-access unit is always the
//! seek track's.
#![no_main]

use isochron_base::MediaTime;
use isochron_media::live::{Announced, LiveIngest, announced_track};

const H264: &str = "packetization-mode=1;sprop-parameter-sets=Z2QAH6w=,aO48gA==";
const AAC: &str = "mode=AAC-hbr;sizelength=13;indexlength=3;indexdeltalength=3;config=1190";

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        for encoding in ["H264", "H265", "mpeg4-generic", "opus", "x"] {
            let a = Announced { encoding, clock_rate: 90_000, channels: 2, fmtp: text };
            let _ = announced_track(0, &a);
        }
    }
    let video = Announced { encoding: "H264", clock_rate: 90_000, channels: 0, fmtp: H264 };
    let audio = Announced { encoding: "mpeg4-generic", clock_rate: 48_000, channels: 2, fmtp: AAC };
    let tracks = vec![announced_track(0, &video).unwrap(), announced_track(1, &audio).unwrap()];
    let mut f = LiveIngest::new(tracks, vec![96, 97]);
    // Records: a control byte (bit 0 the track, bit 1: finish after), a length, the packet.
    let (mut rest, mut at, mut out) = (data, 0u64, Vec::new());
    while let [control, len, tail @ ..] = rest {
        let n = usize::from(*len).min(tail.len());
        at += 1_000_000;
        f.handle_rtp(MediaTime::from_nanos(at), usize::from(control & 1), &tail[..n]);
        if control & 2 != 0 {
            f.finish();
        }
        while let Some(u) = f.poll_unit() {
            out.push(u);
        }
        rest = &tail[n..];
    }
    f.finish();
    while let Some(u) = f.poll_unit() {
        out.push(u);
    }
    assert_eq!(out.len() as u64, f.stats().packets);
    for t in 0..2u8 {
        let seqs: Vec<u32> = out.iter().filter(|u| u.track == t).map(|u| u.track_seq).collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "track {t}: {seqs:?}");
    }
    assert!(out.iter().all(|u| !u.random_access || u.track == 0));
    assert!(out.windows(2).all(|w| w[0].send_time <= w[1].send_time));
});
