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

/// The publisher of `name` ended well (`out`), the recording was committed with the duration of
/// `src` (`seconds` long, within a second), and it plays as `src` does.
fn recorded_as_published(
    server: &Server,
    (name, out): (&str, &Output),
    (src, seconds): (&Path, f64),
    dir: &Path,
) {
    assert!(
        out.status.success(),
        "publishing {name}: {}{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        server.log()
    );
    let v = await_object(server, name, Duration::from_secs(15));
    let duration = v["duration_s"].as_f64().unwrap();
    assert!((duration - seconds).abs() < 1.0, "{name}: {seconds} s recorded as {duration} s: {v}");
    plays_as_its_source(server, name, src, dir);
}

/// ffmpeg publishes an MP4 clip (H.264 with B-frames, AAC) over RTSP RECORD twice at once:
/// interleaved on its TCP connection, and over UDP to the ports the server gave each track.
/// Each recording, committed when its feed ends, plays over RTSP to ffmpeg frame for frame
/// against the source: every decoded video frame and every audio packet. It is a native object
/// with no source file (`/objects/NAME` says so). While they run both feeds are listed in
/// `/api/v1/live`, and another feed of the same name is refused.
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
    let (url, udp_url) = (server.url("cam"), server.url("ucam"));
    let (feed, udp_feed) = std::thread::scope(|s| {
        let feed = s.spawn(|| publish(Command::new("ffmpeg"), &src, &url, "tcp"));
        let udp_feed = s.spawn(|| publish(Command::new("ffmpeg"), &src, &udp_url, "udp"));
        // A second publisher of the name while the feed runs: refused, and the feed goes on.
        std::thread::sleep(Duration::from_secs(3));
        // Both feeds are listed while they run, with what they brought so far.
        let body = server.http_get("/api/v1/live");
        let live: Vec<serde_json::Value> = serde_json::from_str(&body).expect(&body);
        let names: Vec<&str> = live.iter().filter_map(|f| f["name"].as_str()).collect();
        assert_eq!(names, ["cam", "ucam"], "{body}");
        for (f, transport) in live.iter().zip(["tcp", "udp"]) {
            assert_eq!(f["transport"], transport, "{body}");
            assert_eq!(f["tracks"], serde_json::json!(["H264", "mpeg4-generic"]), "{body}");
            assert!(f["publisher"].as_str().unwrap().starts_with("127.0.0.1:"), "{body}");
            let recorded = f["recorded_s"].as_f64().unwrap();
            assert!(recorded > 1.0 && f["bytes"].as_u64().unwrap() > 100_000, "{body}");
            assert!(f["admitted_bps"].as_u64().unwrap() > 0, "{body}");
        }
        let second = publish(Command::new("ffmpeg"), &src, &url, "tcp");
        let err = String::from_utf8_lossy(&second.stderr);
        assert!(!second.status.success() && err.contains("403"), "a second publisher: {err}");
        (feed.join().unwrap(), udp_feed.join().unwrap())
    });
    for (name, out) in [("cam", feed), ("ucam", udp_feed)] {
        recorded_as_published(&server, (name, &out), (&src, 10.0), dir.path());
    }
    let log = server.log();
    assert!(log.contains("SETUP of a published track over UDP"), "{log}");
    assert_eq!(server.http_get("/api/v1/live").trim(), "[]", "ended feeds are not listed");

    let resp = server.http_get("/objects/cam");
    assert!(resp.contains("recorded live"), "{resp}");
    server.stop();
}

/// GStreamer publishes with `rtspclientsink`, three feeds at once: a Matroska clip (H.264 and
/// Opus) over TCP and over UDP, and an MP4 clip (H.264 and AAC) whose AAC it sends as
/// `MP4A-LATM` (RFC 6416), its default. Its dialog differs from ffmpeg's (controls `stream=N`, a
/// PAUSE before its TEARDOWN), and each recording plays frame for frame against its source.
#[test]
fn gstreamer_publishes_with_rtspclientsink_and_the_recording_plays_frame_for_frame() {
    let _load = load(weight::PLAYER);
    require("gst-launch-1.0");
    let (mkv, mp4) = (media_fixture("h264_opus.mkv"), media_fixture("h264_aac.mp4"));
    let dir = tempdir();
    let server = Server::start(
        &dir.path().join("store"),
        ServeOptions { no_demo: true, ..Default::default() },
    );
    let script = repo().join("crates/isochron/tests/tools/gst_publish.py");
    let feeds = [("gcam", "tcp", &mkv), ("gucam", "udp", &mkv), ("latm", "tcp", &mp4)];
    let outs: Vec<Output> = std::thread::scope(|s| {
        // All at once: each runs in real time.
        let mut runs = Vec::new();
        for (name, transport, src) in &feeds {
            let (script, url) = (&script, server.url(name));
            runs.push(s.spawn(move || {
                let mut cmd = Command::new("/usr/bin/python3");
                run(cmd.arg(script).arg(src).arg(url).arg(transport), 60)
            }));
        }
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    for ((name, _, src), out) in feeds.iter().zip(outs) {
        let seconds = if *src == &mp4 { 10.0 } else { 8.0 };
        recorded_as_published(&server, (name, &out), (src, seconds), dir.path());
    }
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

/// A publisher on another host, with credentials (a user with `publish` for `cam-*`), sends
/// over UDP; another host fires forged RTP at the ports the server gave the feed's video track
/// meanwhile. Those datagrams are dropped (logged), and the recording still plays frame for
/// frame. The same user publishing a name outside its globs gets 403.
#[test]
fn a_publisher_elsewhere_with_credentials_publishes_over_udp_and_strangers_cannot_inject() {
    use isochron_loadgen::testbed::Testbed;
    if !namespaces_or_skip("publishing from another host") {
        return;
    }
    let _load = load(weight::PLAYER);
    require("ffmpeg");
    let src = media_fixture("h264_aac.mp4");
    let dir = tempdir();
    let config = "[[auth.users]]\nname = \"cam\"\npassword = \"cam-secret\"\n\
                  permissions = [\"publish\"]\nobjects = [\"cam-*\"]\n";
    let server = Server::start(
        &dir.path().join("store"),
        ServeOptions { no_demo: true, ..ServeOptions::everywhere(Some(config)) },
    );
    let bed = Testbed::new("livinj").expect("testbed");
    let (publisher, intruder) = (bed.add_host("pub").unwrap(), bed.add_host("evil").unwrap());
    let url = |name: &str| {
        format!("rtsp://cam:cam-secret@{}:{}/{name}", bed.host_ip(), server.rtsp.port())
    };
    let out = publish(publisher.command("ffmpeg"), &src, &url("other"), "tcp");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("403"), "a name outside the globs: {err}");

    let feed = std::thread::scope(|s| {
        let feed = s.spawn(|| publish(publisher.command("ffmpeg"), &src, &url("cam-1"), "udp"));
        // The video track's server ports, from the log, once it is set up.
        let deadline = Instant::now() + Duration::from_secs(10);
        let port = loop {
            let log = server.log();
            let setup = log.lines().find(|l| {
                l.contains("SETUP of a published track over UDP") && l.contains("track=0")
            });
            if let Some(p) = setup
                .and_then(|l| l.split("server=(").nth(1))
                .and_then(|t| t.split(',').next())
                .and_then(|p| p.parse::<u16>().ok())
            {
                break p;
            }
            assert!(Instant::now() < deadline, "no UDP SETUP: {log}");
            std::thread::sleep(Duration::from_millis(100));
        };
        // Forged packets of the video's payload type, numbered ahead of the feed's.
        let forge = format!(
            "import socket,struct,time\n\
             s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
             for i in range(300):\n\
             \x20s.sendto(bytes([0x80,0x60])+struct.pack('>HII',30000+i,i*3000,7)+bytes([0x65])*200,\
             ('{}',{port}))\n\
             \x20time.sleep(0.005)\n",
            bed.host_ip()
        );
        let sent = run(intruder.command("/usr/bin/python3").args(["-c", &forge]), 30);
        assert!(sent.status.success(), "forging: {}", String::from_utf8_lossy(&sent.stderr));
        feed.join().unwrap()
    });
    recorded_as_published(&server, ("cam-1", &feed), (&src, 10.0), dir.path());
    let log = server.log();
    assert!(log.contains("from another address; dropped"), "{log}");
    server.stop();
}
