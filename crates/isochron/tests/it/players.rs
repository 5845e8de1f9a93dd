//! Real players against a real server: ffprobe, ffmpeg, GStreamer and VLC, over TCP and UDP.
//!
//! The checks: exact bytes through the three clients that can write the
//! transport stream untouched (GStreamer `rtpmp2tdepay ! filesink`, ffmpeg `satip_raw`, VLC's
//! demux dump), per-packet hashes through ffmpeg's normal (remuxing) path, and decoding.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::thread;

use common::*;

fn serve(extra: &[&Path]) -> (tempfile::TempDir, Server) {
    serve_fixtures(extra, None)
}

fn ffprobe(input: &str, extra: &[&str]) -> (f64, Vec<String>) {
    let out = run(
        Command::new("ffprobe")
            .args(["-v", "error"])
            .args(extra)
            .args(["-show_entries", "format=duration:stream=codec_name", "-of", "compact=p=0:nk=1"])
            .arg(input),
        60,
    );
    assert!(out.status.success(), "ffprobe {input}: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
    let duration: f64 = lines.pop().and_then(|l| l.parse().ok()).expect("duration line");
    let mut codecs: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
    codecs.sort();
    codecs.dedup();
    (duration, codecs)
}

#[test]
fn ffprobe_reports_the_source_duration_and_streams() {
    let _load = load(weight::LIGHT);
    require("ffprobe");
    let vbr = fixture("vbr20");
    let (_d, server) = serve(&[&vbr]);
    for (name, file) in [("demo", demo()), ("vbr20", vbr)] {
        let (want_d, want_c) = ffprobe(file.to_str().unwrap(), &[]);
        for transport in ["tcp", "udp"] {
            let (got_d, got_c) = ffprobe(&server.url(name), &["-rtsp_transport", transport]);
            assert_eq!(got_c, want_c, "{name} over {transport}: streams");
            // The file's duration counts the last frame's length; the SDP range ends at the last
            // packet's send time: equal to within one frame (40 ms at 25 fps).
            assert!(
                (got_d - want_d).abs() < 0.05,
                "{name} over {transport}: duration {got_d} vs source {want_d}"
            );
        }
    }
}

#[test]
fn ffmpeg_reads_to_the_end_over_tcp_and_udp_without_decode_errors() {
    let _load = load(weight::PLAYER);
    require("ffmpeg");
    let vbr = fixture("vbr20");
    let (dir, server) = serve(&[&vbr]);
    let mut jobs = Vec::new();
    for (name, file) in [("demo", demo()), ("vbr20", vbr)] {
        for transport in ["tcp", "udp"] {
            let url = server.url(name);
            let md5 = dir.path().join(format!("{name}-{transport}.md5"));
            let file = file.clone();
            jobs.push(thread::spawn(move || {
                // No -timeout: ffmpeg only ends on RTCP BYE, so finishing proves BYE. One input,
                // two outputs: packet hashes (-c copy) and a full decode (-f null).
                // Over UDP, filter_src drops RTP from any port but the advertised server_port.
                // Over UDP the receive buffer is ffmpeg's only slack when the decoder thread is
                // starved on a loaded 2-core CI machine: ask for 16 MiB (scripts/test.sh raises
                // net.core.rmem_max so the kernel grants it) rather than lose datagrams in the kernel.
                let flags = if transport == "udp" { "filter_src" } else { "prefer_tcp" };
                let out = run(
                    Command::new("ffmpeg")
                        .args(["-nostdin", "-v", "error", "-rtsp_transport", transport])
                        .args(["-buffer_size", "16777216"])
                        .args(["-rtsp_flags", flags, "-i", &url])
                        .args(["-map", "0", "-c", "copy", "-f", "framemd5", "-y"])
                        .arg(&md5)
                        .args(["-map", "0", "-f", "null", "-"]),
                    120,
                );
                let err = String::from_utf8_lossy(&out.stderr).into_owned();
                assert!(out.status.success(), "{name}/{transport}: exit {:?}: {err}", out.status);
                assert!(err.trim().is_empty(), "{name}/{transport}: ffmpeg reported errors: {err}");
                let got = framemd5_packets(&std::fs::read_to_string(&md5).unwrap());
                let want = source_framemd5(&file);
                // ffmpeg does not flush the last video PES at BYE: every other packet must
                // match, in order.
                if let Err(e) = check_ffmpeg_copy(&got, &want) {
                    panic!("{name}/{transport}: {e}");
                }
            }));
        }
    }
    for j in jobs {
        j.join().unwrap_or_else(|_| panic!("ffmpeg job failed; server log:\n{}", server.log()));
    }
}

#[test]
fn gstreamer_receives_the_exact_bytes_over_tcp_and_udp() {
    let _load = load(weight::PLAYER);
    require("gst-launch-1.0");
    let vbr = fixture("vbr20");
    let (dir, server) = serve(&[&vbr]);
    let mut jobs = Vec::new();
    for (name, file) in [("demo", demo()), ("vbr20", vbr)] {
        for transport in ["tcp", "udp"] {
            let url = server.url(name);
            let out_ts = dir.path().join(format!("{name}-{transport}.ts"));
            let file = file.clone();
            jobs.push(thread::spawn(move || {
                let (got, stderr) = gst_fetch(&url, &out_ts, transport);
                let want = std::fs::read(&file).unwrap();
                assert_same_bytes(&got, &want, &format!("{name} over {transport} ({stderr})"));
            }));
        }
    }
    for j in jobs {
        j.join().unwrap_or_else(|_| panic!("GStreamer job failed; server log:\n{}", server.log()));
    }
}

#[test]
fn gstreamer_decodes_the_stream_to_eos() {
    let _load = load(weight::PLAYER);
    require("gst-launch-1.0");
    let (_d, server) = serve(&[]);
    let url = server.url("demo");
    let out = run(
        Command::new("gst-launch-1.0").args([
            "-e",
            "rtspsrc",
            &format!("location={url}"),
            "protocols=tcp",
            "!",
            "rtpmp2tdepay",
            "!",
            "tsdemux",
            "name=d",
            "d.",
            "!",
            "queue",
            "!",
            "h264parse",
            "!",
            "avdec_h264",
            "!",
            "fakesink",
            "d.",
            "!",
            "queue",
            "!",
            "aacparse",
            "!",
            "avdec_aac",
            "!",
            "fakesink",
        ]),
        60,
    );
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("Got EOS"), "no EOS: {text}");
    // GStreamer's own shutdown race (a send cancelled while the pipeline is freed, after EOS)
    // is not a decode error; anything else is.
    assert!(!text.contains("ERROR") || gst_shutdown_race(&out), "decode error: {text}");
}

#[test]
fn vlc_plays_to_the_end() {
    let _load = load(weight::PLAYER);
    require("cvlc");
    require("runuser");
    let (_d, server) = serve(&[]);
    // Debian's VLC refuses to run as root and has no live555: rtsp:// goes through its SAT>IP
    // module. It needs a writable HOME and output directory.
    let home = tempfile::Builder::new().prefix("isochron-vlc-").tempdir().unwrap();
    let _ = Command::new("chmod").arg("777").arg(home.path()).status();
    let dump = home.path().join("vlc.ts");
    let out = run(
        Command::new("runuser")
            .args(["-u", "nobody", "--", "env"])
            .arg(format!("HOME={}", home.path().display()))
            .args(["cvlc", "-I", "dummy", "--play-and-exit", "--demux", "dump", "--demuxdump-file"])
            .arg(&dump)
            .arg(server.url("demo")),
        60,
    );
    assert!(out.status.success(), "vlc: {:?} {}", out.status, String::from_utf8_lossy(&out.stderr));
    let got = std::fs::read(&dump).unwrap_or_default();
    assert_same_bytes(&got, &std::fs::read(demo()).unwrap(), "VLC dump of demo");
}

#[test]
fn ffmpeg_satip_raw_is_byte_exact() {
    let _load = load(weight::PLAYER);
    require("ffmpeg");
    let (dir, server) = serve(&[]);
    let out_ts = dir.path().join("sat.ts");
    // SETUP straight on the presentation URL, no DESCRIBE (RFC 2326 §C.3 single-stream case).
    let url = format!("satip://{}/demo", server.rtsp);
    let out = run(
        Command::new("ffmpeg")
            .args(["-nostdin", "-v", "error", "-rtsp_transport", "tcp", "-rtsp_flags", "satip_raw"])
            .args(["-i", &url, "-map", "0", "-c", "copy", "-f", "data", "-y"])
            .arg(&out_ts),
        60,
    );
    assert!(out.status.success(), "ffmpeg satip: {}", String::from_utf8_lossy(&out.stderr));
    assert_same_bytes(
        &std::fs::read(&out_ts).unwrap(),
        &std::fs::read(demo()).unwrap(),
        "satip raw",
    );
}

#[test]
fn gstreamer_seeks_with_pause_and_a_play_range() {
    let _load = load(weight::PLAYER);
    require("gst-launch-1.0");
    let (dir, server) = serve(&[]);
    let out_ts = dir.path().join("seek.ts");
    let target = 8.0;
    // rtspsrc turns a seek into PAUSE + PLAY Range: npt=8-.
    let script = repo().join("crates/isochron/tests/tools/gst_seek.py");
    let out = run(
        Command::new("/usr/bin/python3")
            .arg(script)
            .arg(server.url("demo"))
            .args(["2", &target.to_string()])
            .arg(&out_ts),
        90,
    );
    assert!(out.status.success(), "seek: {}", String::from_utf8_lossy(&out.stderr));
    let src = std::fs::read(demo()).unwrap();
    let got = std::fs::read(&out_ts).unwrap();
    // The flushing seek restarts the file at the seek point: find it in the source.
    let n = got.len() / 188;
    let join =
        (0..n).find(|&i| got[i * 188..(i + 1) * 188] != src[i * 188..(i + 1) * 188]).unwrap_or(n);
    let tail = &got[join * 188..];
    assert!(tail.len() > 188 * 64, "nothing received after the seek");
    let start = (0..src.len() / 188)
        .find(|&i| src[i * 188..].starts_with(&tail[..188 * 64]))
        .expect("the stream after the seek is a run of source packets");
    assert_same_bytes(tail, &src[start * 188..], "after the seek, to the end");
    let mut s = isochron_media::TsScanner::new();
    s.push(&src).unwrap();
    let t = s.finish().unwrap().send_time(start as u64).as_secs_f64();
    assert!((t - target).abs() <= 1.0, "seek to {target} s started at {t:.3} s");
    let log = server.log();
    assert!(log.contains("npt=") && log.matches("play").count() >= 2, "no second PLAY logged");
}
