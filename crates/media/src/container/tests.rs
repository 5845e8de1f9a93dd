//! Tests over the committed fixtures (`crates/media/testdata`, made by `make.sh`).

use super::*;

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/testdata/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn dump() {
    for f in [
        "h264_aac_faststart.mp4",
        "h264_aac_moov_last.mp4",
        "h264_aac_fragmented.mp4",
        "hevc_aac.mp4",
        "h264_opus.mkv",
        "vp9_opus.webm",
        "mjpeg.mp4",
        "mp3_ac3.mp4",
        "mp3_ac3.mkv",
    ] {
        let r = demux_bytes(&fixture(f));
        match r {
            Err(e) => eprintln!("{f}: ERROR {e}"),
            Ok(ix) => {
                eprintln!(
                    "{f}: {} samples, dur {} ns, skipped {:?}",
                    ix.samples.len(),
                    ix.duration_ns,
                    ix.skipped
                );
                for (i, t) in ix.tracks.iter().enumerate() {
                    let n = ix.track_samples(i as u16).count();
                    let k = ix.track_samples(i as u16).filter(|s| s.keyframe).count();
                    let bytes: u64 = ix.track_samples(i as u16).map(|s| u64::from(s.size)).sum();
                    eprintln!(
                        "  track {i}: {:?} n={n} keys={k} bytes={bytes}",
                        (
                            t.id,
                            t.codec,
                            t.timescale,
                            t.width,
                            t.height,
                            t.sample_rate,
                            t.channels,
                            &t.language
                        )
                    );
                    eprintln!("     cfg {:02x?}", t.config);
                    for s in ix.track_samples(i as u16).take(4) {
                        eprintln!("     {s:?}");
                    }
                }
            }
        }
    }
}
