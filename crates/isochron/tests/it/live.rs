//! Live publishing (RFC 2326 §10.3 ANNOUNCE, §10.11 RECORD): ffmpeg publishes a clip as a live
//! feed, the server records it as it arrives on an admitted write stream, and once the feed
//! ends the recording plays like any title. The oracle is ffmpeg's own reading of the source
//! file (decoded video frames, audio packets), never isochron's.

use crate::common;
use crate::native::{assert_frames, audio_packets, decoded_video, ffmpeg_record};

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::*;

/// `ffmpeg -re -i SRC -c copy -f rtsp` to `url` over `transport`, run by `cmd` (ffmpeg, or a
/// wrapper that runs it elsewhere).
fn publish(mut cmd: Command, src: &Path, url: &str, transport: &str) -> Output {
    cmd.args(["-nostdin", "-v", "error", "-re", "-i"]).arg(src).args([
        "-map",
        "0",
        "-c",
        "copy",
        "-f",
        "rtsp",
        "-rtsp_transport",
        transport,
        url,
    ]);
    run(&mut cmd, 60)
}

/// Waits until object `name` is listed by the API (the recording committed).
fn await_object(server: &Server, name: &str, within: Duration) -> serde_json::Value {
    let deadline = Instant::now() + within;
    loop {
        let body = server.http_get("/api/v1/objects");
        let list: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap_or_default();
        if let Some(v) = list.into_iter().find(|v| v["name"] == name) {
            return v;
        }
        assert!(Instant::now() < deadline, "{name} not committed: {body}\n{}", server.log());
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The recording `name` played over RTSP/TCP by ffmpeg (`-c copy` to MP4) has every decoded
/// video frame and every audio packet of `src`.
fn plays_as_its_source(server: &Server, name: &str, src: &Path, dir: &Path) {
    let out = dir.join(format!("{name}-played.mp4"));
    ffmpeg_record(&server.url(name), "tcp", &out);
    assert_frames(&decoded_video(&out), &decoded_video(src), &format!("{name}'s video"));
    assert_frames(&audio_packets(&out), &audio_packets(src), &format!("{name}'s audio"));
}

/// ffmpeg publishes an MP4 clip (H.264 with B-frames, AAC) over RTSP RECORD, interleaved on
/// its TCP connection. The recording, committed when the feed ends, plays over RTSP to ffmpeg
/// frame for frame against the source: every decoded video frame and every audio packet. It is
/// a native object with no source file (`/objects/NAME` says so), and another feed of the same
/// name is refused while the first runs.
#[test]
fn ffmpeg_publishes_over_rtsp_record_and_the_recording_plays_frame_for_frame() {
    let _load = load(weight::PLAYER);
    require("ffmpeg");
    let src = media_fixture("h264_aac.mp4");
    let dir = tempdir();
    let server = Server::start(
        &dir.path().join("store"),
        ServeOptions { no_demo: true, ..Default::default() },
    );
    let url = server.url("cam");
    let feed = std::thread::scope(|s| {
        let feed = s.spawn(|| publish(Command::new("ffmpeg"), &src, &url, "tcp"));
        // A second publisher of the name while the feed runs: refused, and the feed goes on.
        std::thread::sleep(Duration::from_secs(3));
        let second = publish(Command::new("ffmpeg"), &src, &url, "tcp");
        let err = String::from_utf8_lossy(&second.stderr);
        assert!(!second.status.success() && err.contains("403"), "a second publisher: {err}");
        feed.join().unwrap()
    });
    assert!(
        feed.status.success(),
        "ffmpeg publishing: {}\n{}",
        String::from_utf8_lossy(&feed.stderr),
        server.log()
    );
    let v = await_object(&server, "cam", Duration::from_secs(15));
    let duration = v["duration_s"].as_f64().unwrap();
    assert!((9.0..11.5).contains(&duration), "a 10 s clip recorded as {duration} s: {v}");
    let log = server.log();
    assert!(log.contains("live feed ended"), "{log}");

    plays_as_its_source(&server, "cam", &src, dir.path());

    let resp = server.http_get("/objects/cam");
    assert!(resp.contains("recorded live"), "{resp}");
    server.stop();
}

/// GStreamer publishes a Matroska clip (H.264 and Opus) with `rtspclientsink` over TCP: its
/// dialog differs from ffmpeg's (controls `stream=N`, a PAUSE before its TEARDOWN), and the
/// recording plays frame for frame against the source. (Its default AAC payloader sends
/// `MP4A-LATM`, which is refused with 415 naming the encoding: not stored yet.)
#[test]
fn gstreamer_publishes_with_rtspclientsink_and_the_recording_plays_frame_for_frame() {
    let _load = load(weight::PLAYER);
    require("gst-launch-1.0");
    let src = media_fixture("h264_opus.mkv");
    let dir = tempdir();
    let server = Server::start(
        &dir.path().join("store"),
        ServeOptions { no_demo: true, ..Default::default() },
    );
    let mut gst = Command::new("gst-launch-1.0");
    gst.args(["-q", "filesrc"])
        .arg(format!("location={}", src.display()))
        .args(["!", "matroskademux", "name=d", "d.video_0", "!", "queue", "!", "h264parse"])
        .args(["!", "s.sink_0", "d.audio_0", "!", "queue", "!", "opusparse", "!", "s.sink_1"])
        .args(["rtspclientsink", "name=s", "protocols=tcp"])
        .arg(format!("location={}", server.url("gcam")));
    let out = run(&mut gst, 60);
    assert!(
        out.status.success(),
        "rtspclientsink: {}{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        server.log()
    );
    let v = await_object(&server, "gcam", Duration::from_secs(15));
    let duration = v["duration_s"].as_f64().unwrap();
    assert!((7.0..9.5).contains(&duration), "an 8 s clip recorded as {duration} s: {v}");
    plays_as_its_source(&server, "gcam", &src, dir.path());
    server.stop();
}

/// Publishing is refused with a clear status and changes nothing: when the disks cannot take
/// the feed's rate (453, the reason in the log), and without the `record` (`publish`)
/// permission from another host (401).
#[test]
fn publishing_is_refused_beyond_the_disks_and_without_credentials() {
    use isochron_loadgen::testbed::Testbed;
    let _load = load(weight::PLAYER);
    require("ffmpeg");
    let src = media_fixture("h264_aac.mp4");
    let dir = tempdir();
    // One slow emulated disk, 0.1 MiB/s: less than the clip's rate.
    let disk = format!("{},seek_ms=10,rate_mib_s=0.1", dir.path().join("d0").display());
    let config = format!("[store]\ndisks = [\"{disk}\"]\n");
    let server = Server::start(
        &dir.path().join("store"),
        ServeOptions { no_demo: true, ..ServeOptions::everywhere(Some(&config)) },
    );
    let local = format!("rtsp://127.0.0.1:{}/cam", server.rtsp.port());
    let out = publish(Command::new("ffmpeg"), &src, &local, "tcp");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("453"), "a feed beyond the disks: {err}");
    let log = server.log();
    assert!(log.contains("RECORD refused") && log.contains("not enough"), "{log}");
    let objects = server.http_get("/api/v1/objects");
    assert!(!objects.contains("\"cam\""), "a refused feed left an object: {objects}");
    assert_eq!(server.metric("isochron_recordings"), 0.0);

    if namespaces_or_skip("publishing from another host") {
        let bed = Testbed::new("live401").expect("testbed");
        let host = bed.add_host("cam").expect("host");
        let url = format!("rtsp://{}:{}/cam", bed.host_ip(), server.rtsp.port());
        let out = publish(host.command("ffmpeg"), &src, &url, "tcp");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("401"), "publishing from elsewhere: {err}");
    }
    server.stop();
}
