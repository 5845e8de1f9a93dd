//! Live publishing (RFC 2326 §10.3 ANNOUNCE, §10.11 RECORD): ffmpeg publishes a clip as a live
//! feed, the server records it as it arrives on an admitted write stream, players watch it
//! live meanwhile, and once the feed ends the recording plays like any title. The oracle is
//! ffmpeg's own reading of the source file (decoded video frames, audio packets), never
//! isochron's; live latency is measured from outside the server (`live_probe`).

use crate::common;
use crate::live_probe::{LiveReceipt, Sighting, Tap, payload_hash, retina_live};
use crate::native::{assert_frames, audio_packets, decoded_video, ffmpeg_record};

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::*;

/// `ffmpeg -re -i SRC -c copy -f rtsp` to `url` over `transport`, run by `cmd` (ffmpeg, or a
/// wrapper that runs it elsewhere).
fn publish(cmd: Command, src: &Path, url: &str, transport: &str) -> Output {
    publish_looped(cmd, src, 1, url, transport)
}

/// [`publish`] with the source played `times` times in a row (`-stream_loop`).
pub(crate) fn publish_looped(
    mut cmd: Command,
    src: &Path,
    times: u32,
    url: &str,
    transport: &str,
) -> Output {
    cmd.args(["-nostdin", "-v", "error", "-re", "-stream_loop"]).arg((times - 1).to_string());
    cmd.arg("-i").arg(src).args([
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
    run(&mut cmd, 90 + 15 * u64::from(times))
}

/// Waits until object `name` is listed by the API and no feed of it runs (the recording
/// committed whole: while its feed runs, a growing recording is listed as far as committed).
fn await_object(server: &Server, name: &str, within: Duration) -> serde_json::Value {
    let deadline = Instant::now() + within;
    loop {
        let live = server.http_get("/api/v1/live");
        let body = server.http_get("/api/v1/objects");
        let list: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap_or_default();
        let running = live.contains(&format!("\"name\":\"{name}\""));
        if let Some(v) = list.into_iter().find(|v| v["name"] == name)
            && !running
        {
            return v;
        }
        assert!(Instant::now() < deadline, "{name} not committed: {body}\n{}", server.log());
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until the recording `name` is committed whole and checks it lasts `seconds`, within
/// a second.
fn committed_with(server: &Server, name: &str, seconds: f64) {
    let v = await_object(server, name, Duration::from_secs(15));
    let duration = v["duration_s"].as_f64().unwrap();
    assert!((duration - seconds).abs() < 1.0, "{name}: {seconds} s recorded as {duration} s: {v}");
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
    committed_with(server, name, seconds);
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
/// the feed's rate (453, the reason in the log; over SRT, reject code 2402 at the handshake),
/// and without the `record` (`publish`) permission from another host (401; over SRT, 2401).
#[test]
fn publishing_is_refused_beyond_the_disks_and_without_credentials() {
    use isochron_loadgen::testbed::Testbed;
    let _load = load(weight::PLAYER);
    require("ffmpeg");
    let src = media_fixture("h264_aac.mp4");
    let dir = tempdir();
    // One slow emulated disk, 0.1 MiB/s: less than the clip's rate.
    let disk = format!("{},seek_ms=10,rate_mib_s=0.1", dir.path().join("d0").display());
    let config = format!("[store]\ndisks = [\"{disk}\"]\n[live]\nsrt_listen = \"0.0.0.0:0\"\n");
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
    // Over SRT the same feed is refused at the handshake (2402), naming the disks in the log.
    let srt_port = server.srt.expect("SRT address").port();
    let srt_publish = |mut cmd: Command, host: &str, name: &str| {
        let url = format!("srt://{host}:{srt_port}?streamid=publish:{name}&pkt_size=1316");
        cmd.args(["-nostdin", "-v", "error", "-re", "-i"]).arg(&src);
        run(cmd.args(["-map", "0", "-c", "copy", "-f", "mpegts", &url]), 60)
    };
    let out = srt_publish(Command::new("ffmpeg"), "127.0.0.1", "srt-cam");
    assert!(!out.status.success(), "an SRT feed beyond the disks was taken");
    let log = server.log();
    let refused = log.lines().find(|l| l.contains("SRT caller refused")).unwrap_or_default();
    assert!(refused.contains("code=2402") && refused.contains("not enough"), "{log}");
    assert!(!server.http_get("/api/v1/objects").contains("srt-cam"));
    assert_eq!(server.metric("isochron_recordings"), 0.0);

    if namespaces_or_skip("publishing from another host") {
        let bed = Testbed::new("live401").expect("testbed");
        let host = bed.add_host("cam").expect("host");
        let url = format!("rtsp://{}:{}/cam", bed.host_ip(), server.rtsp.port());
        let out = publish(host.command("ffmpeg"), &src, &url, "tcp");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("401"), "publishing from elsewhere: {err}");
        let out = srt_publish(host.command("ffmpeg"), &bed.host_ip().to_string(), "srt-far");
        assert!(!out.status.success(), "an SRT feed from elsewhere was taken without credentials");
        let log = server.log();
        assert!(log.contains("code=2401") && log.contains("srt-far"), "{log}");
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

/// Waits until feed `name` is listed by the API (published and admitted).
fn await_feed(server: &Server, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let body = server.http_get("/api/v1/live");
        if body.contains(&format!("\"name\":\"{name}\"")) {
            return;
        }
        assert!(Instant::now() < deadline, "{name} not published: {body}\n{}", server.log());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `got` (a viewer's decoded frames) is a run of consecutive frames of `want` (the feed's):
/// nothing missing, nothing out of place, from wherever the viewer joined. With `to_end`, the
/// run reaches the feed's end (less the last two frames, which ffmpeg may drop at the BYE).
pub(crate) fn a_run_of(got: &[String], want: &[String], to_end: bool, what: &str) {
    assert!(!got.is_empty() && got.len() <= want.len(), "{what}: {} frames", got.len());
    let at = want.windows(got.len()).position(|w| w == got);
    let Some(at) = at else {
        let first = want.iter().position(|f| *f == got[0]);
        let bad = first.and_then(|f| got.iter().zip(&want[f..]).position(|(a, b)| a != b));
        panic!(
            "{what}: {} frames, not a run of the feed's (from {first:?}, first difference at {bad:?})",
            got.len()
        );
    };
    if to_end {
        let missing = want.len() - at - got.len();
        assert!(missing <= 2, "{what}: stopped {missing} frames before the feed's end");
    }
}

/// GStreamer (`gst-launch-1.0 rtspsrc`) watches `url` over `transport` for `frames` H.264
/// access units, through `decoder` if given, within `secs`.
fn gst_watch(url: &str, transport: &str, decoder: Option<&str>, frames: u32, secs: u64) -> Output {
    let mut pipeline = vec![
        format!("location={url}"),
        format!("protocols={transport}"),
        "!".into(),
        "rtph264depay".into(),
        "!".into(),
        "h264parse".into(),
    ];
    if let Some(d) = decoder {
        pipeline.extend(["!".into(), d.into()]);
    }
    pipeline.extend(
        ["!", "identity", &format!("eos-after={frames}"), "!", "fakesink"].map(String::from),
    );
    // Not quiet: "Got EOS from element" tells GStreamer's own shutdown race after EOS from a
    // failure (`common::gst_ended_cleanly`).
    run(Command::new("gst-launch-1.0").arg("rtspsrc").args(pipeline), secs)
}

/// Fails unless GStreamer (`what`, [`gst_watch`]) ran to a clean end: exit 0, or its own
/// shutdown race after EOS and nothing else (`common::gst_ended_cleanly`, docs/design/closing.md:
/// it failed these tests now and then on a busy machine). A failure shows what the server
/// logged of warnings and closed connections and sessions.
fn assert_watched(o: &Output, what: &str, server: &Server) {
    let Err(e) = gst_ended_cleanly(o) else { return };
    let log = server.log();
    let notable = log
        .lines()
        .filter(|l| [" WARN ", " ERROR ", "closing", "closed"].iter().any(|k| l.contains(k)));
    let notable = notable.collect::<Vec<_>>().join("\n");
    panic!("{what}: {e}\nthe server's warnings and closes:\n{notable}");
}

/// The summary `isochron play --json` printed: its tracks' losses and the seconds it played.
fn play_summary(out: &Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!("isochron play: {e}: {text}{}", String::from_utf8_lossy(&out.stderr))
    })
}

/// Step 2 of `docs/design/live.md`: while ffmpeg publishes a 30 s feed (the 10 s clip three
/// times) over RTSP RECORD, players nobody here wrote watch it live, over TCP and UDP:
///
/// - ffmpeg over TCP from its join to the feed's end (the server's BYE ends it) and over UDP
///   for 8 s: every decoded video frame is the feed's, consecutive, none missing;
/// - GStreamer (`rtspsrc`) over TCP and UDP decodes 100 frames;
/// - `isochron play` over UDP to the end: nothing lost, ended by the BYE;
/// - retina over TCP and UDP for 10 s, each packet's latency measured from outside: the
///   publisher reaches the server through a TCP tap that notes when each RTP payload passed,
///   retina notes when it received the same payload (the server forwards payloads unchanged).
///   p99 ≤ 500 ms, not counting what the publisher sent before the viewer's PLAY was answered
///   (the viewer's start at the newest key frame, sent at once).
///
/// The recording is committed at the feed's end with its 30 s.
#[test]
fn players_watch_a_feed_live_while_it_is_published_and_recorded() {
    let _load = load(weight::HEAVY);
    require("ffmpeg");
    require("gst-launch-1.0");
    let src = media_fixture("h264_aac.mp4");
    let dir = tempdir();
    let server = Server::start(
        &dir.path().join("store"),
        ServeOptions { no_demo: true, ..Default::default() },
    );
    let tap = Tap::start(server.rtsp);
    let published = format!("rtsp://127.0.0.1:{}/cam", tap.port());
    let url = server.url("cam");
    let gst = |transport: &str| gst_watch(&url, transport, Some("avdec_h264"), 100, 30);
    let (tcp_to_end, udp_8s) = (dir.path().join("tcp.mp4"), dir.path().join("udp.mp4"));
    let (feed, receipts, play) = std::thread::scope(|s| {
        let feed = s.spawn(|| publish_looped(Command::new("ffmpeg"), &src, 3, &published, "tcp"));
        await_feed(&server, "cam");
        std::thread::sleep(Duration::from_secs(2));
        let to_end = s.spawn(|| ffmpeg_record(&url, "tcp", &tcp_to_end));
        let udp = s.spawn(|| {
            let o = run(
                Command::new("timeout")
                    .args(["-k", "5", "30", "ffmpeg", "-nostdin", "-v", "error"])
                    .args(["-rtsp_transport", "udp", "-i", &url, "-t", "8", "-map", "0"])
                    .args(["-c", "copy", "-y"])
                    .arg(&udp_8s),
                40,
            );
            assert!(o.status.success(), "ffmpeg (udp): {}", String::from_utf8_lossy(&o.stderr));
        });
        let play = s.spawn(|| {
            run(Command::new(bin()).args(["play", &url, "--json", "--timeout", "60"]), 70)
        });
        let (sent, retina_url) = (tap.sent(), url.clone());
        let receipts = s.spawn(move || {
            let rt = runtime();
            let for_ = Duration::from_secs(10);
            rt.block_on(async {
                let tcp = retina_live(&retina_url, "tcp", for_, sent.clone());
                let udp = retina_live(&retina_url, "udp", for_, sent);
                tokio::join!(tcp, udp)
            })
        });
        // The API counts the viewers playing (two ffmpeg, isochron play, two retina), once
        // each has started (a busy machine starts processes slowly): all five together within
        // the 8 s the shortest plays.
        let deadline = Instant::now() + Duration::from_secs(8);
        loop {
            let body = server.http_get("/api/v1/live");
            let live: Vec<serde_json::Value> = serde_json::from_str(&body).expect(&body);
            if live[0]["viewers"] == 5 {
                break;
            }
            assert!(Instant::now() < deadline, "not 5 viewers: {body}");
            std::thread::sleep(Duration::from_millis(100));
        }
        for transport in ["tcp", "udp"] {
            assert_watched(&gst(transport), &format!("GStreamer ({transport})"), &server);
        }
        udp.join().unwrap();
        let receipts = receipts.join().unwrap();
        to_end.join().unwrap();
        (feed.join().unwrap(), receipts, play.join().unwrap())
    });
    assert!(feed.status.success(), "publishing: {}", String::from_utf8_lossy(&feed.stderr));

    // Every frame each ffmpeg viewer decoded is the feed's, in order, none missing.
    let one = decoded_video(&src);
    let want: Vec<String> = one.iter().chain(&one).chain(&one).cloned().collect();
    let got = decoded_video(&tcp_to_end);
    a_run_of(&got, &want, true, "ffmpeg over TCP to the end");
    assert!(got.len() > 20 * 25, "ffmpeg over TCP: {} frames", got.len());
    let got = decoded_video(&udp_8s);
    a_run_of(&got, &want, false, "ffmpeg over UDP");
    assert!(got.len() >= 7 * 25, "ffmpeg over UDP: {} frames", got.len());

    let summary = play_summary(&play);
    assert!(play.status.success(), "isochron play: {summary}");
    for t in summary["tracks"].as_array().unwrap() {
        assert_eq!(t["lost"], 0, "isochron play: {summary}");
    }

    let (tcp, udp): (LiveReceipt, LiveReceipt) = receipts;
    for (r, transport) in [(&tcp, "tcp"), (&udp, "udp")] {
        let (p50, p99) = (r.quantile(0.5), r.quantile(0.99));
        eprintln!(
            "live latency ({transport}): p50 {p50:?}, p99 {p99:?}, max {:?}; {} packets measured, {} from before the PLAY, {} ambiguous, {} unmatched, {} missing",
            r.quantile(1.0),
            r.matched,
            r.before_play,
            r.ambiguous,
            r.unmatched,
            r.gaps
        );
        assert!(r.matched > 500, "{transport}: {} packets measured", r.matched);
        assert_eq!((r.unmatched, r.gaps), (0, 0), "{transport}: nothing altered or missing");
        assert!(p99 <= Duration::from_millis(500), "{transport}: p99 {p99:?}");
    }

    committed_with(&server, "cam", 30.0);
    server.stop();
}

/// Step 3 of `docs/design/live.md`, the growing object: a live recording commits what its
/// disks have written every two seconds. ffmpeg publishes a 30 s feed while a player watches
/// it live; after 9 s the server is killed (SIGKILL). Restarted, the recording is listed with
/// what was committed (a few seconds, less than was sent), `isochron fsck` finds the store
/// clean, and the recording plays frame for frame from the feed's first frame to its last
/// committed one.
#[test]
fn a_server_killed_mid_feed_keeps_the_recording_as_committed() {
    let _load = load(weight::PLAYER);
    require("ffmpeg");
    let src = media_fixture("h264_aac.mp4");
    let dir = tempdir();
    let data = dir.path().join("store");
    let opts = || ServeOptions { no_demo: true, ..Default::default() };
    let mut server = Server::start(&data, opts());
    let url = server.url("cam");
    let viewer_out = dir.path().join("viewer.mp4");
    std::thread::scope(|s| {
        let feed = s.spawn(|| publish_looped(Command::new("ffmpeg"), &src, 3, &url, "tcp"));
        await_feed(&server, "cam");
        let viewer = s.spawn(|| {
            let mut cmd = Command::new("timeout");
            cmd.args(["-k", "5", "30", "ffmpeg", "-nostdin", "-v", "error", "-rtsp_transport"]);
            cmd.args(["tcp", "-i", &url, "-map", "0", "-c", "copy", "-y"]).arg(&viewer_out);
            run(&mut cmd, 40)
        });
        std::thread::sleep(Duration::from_secs(9));
        // Committed so far: listed while the feed runs.
        let body = server.http_get("/api/v1/objects");
        assert!(body.contains("\"name\":\"cam\""), "the growing recording is listed: {body}");
        server.kill();
        let feed = feed.join().unwrap();
        assert!(!feed.status.success(), "the publisher sees the server go");
        let _ = viewer.join().unwrap();
    });
    // The viewer had the feed live up to the kill (its last frames aside: cut short by it, or
    // B-frames whose next P-frame never came).
    let one = decoded_video(&src);
    let want: Vec<String> = one.iter().chain(&one).chain(&one).cloned().collect();
    let watched = decoded_video(&viewer_out);
    a_run_of(&watched[..watched.len().saturating_sub(4)], &want, false, "the live viewer");
    assert!(watched.len() > 5 * 25, "the live viewer: {} frames", watched.len());

    // A restart recovers the store; what was committed is listed, and fsck finds it clean.
    let server = Server::start(&data, opts());
    let v = await_object(&server, "cam", Duration::from_secs(5));
    let duration = v["duration_s"].as_f64().unwrap();
    assert!((3.0..9.0).contains(&duration), "committed before the kill: {duration} s: {v}");
    server.stop();
    let fsck = run(Command::new(bin()).arg("fsck").arg("--data").arg(&data), 120);
    assert!(
        fsck.status.success(),
        "fsck after the kill and a restart: {}{}",
        String::from_utf8_lossy(&fsck.stdout),
        String::from_utf8_lossy(&fsck.stderr)
    );
    // It plays from the feed's first frame to its last committed one, none missing.
    let server = Server::start(&data, opts());
    let out = dir.path().join("committed.mp4");
    ffmpeg_record(&server.url("cam"), "tcp", &out);
    let got = decoded_video(&out);
    // ffmpeg's `-c copy` over RTSP may drop the very first frame (it has no timestamp yet). The
    // recording ends where a commit did, in decode order: the B-frames shown before the last
    // P-frame it holds are not in it (x264 puts up to 3 in a row), so its last few frames in
    // display order are not the feed's next ones.
    let tail = got.len().saturating_sub(4);
    let at = (0..=1).find(|&i| want[i..].starts_with(&got[..tail]));
    assert!(at.is_some(), "the committed recording ({} frames) is the feed's start", got.len());
    let at = at.unwrap_or(0);
    for f in &got[tail..] {
        assert!(want[at + tail..at + tail + 8].contains(f), "its last frames are the feed's next");
    }
    let expected = (duration * 25.0) as usize;
    assert!(got.len() + 3 >= expected, "{} frames for {duration} s", got.len());
    server.stop();
}

/// How long after the tap saw each packet of `packets` on its way to the server it was received,
/// for the packets the publisher sent after `since` and whose payload identifies them.
fn lags(
    packets: &[isochron_loadgen::client::RtpPacket],
    tap: &Tap,
    since: Instant,
) -> (Vec<Duration>, usize) {
    let sent = tap.sent();
    let sent = sent.lock().unwrap();
    let mut unmatched = 0;
    let mut lags = Vec::new();
    for p in packets {
        match sent.get(&payload_hash(&p.payload)) {
            Some(Sighting { at, count: 1 }) if *at >= since => lags.push(p.at.duration_since(*at)),
            Some(_) => {}
            None => unmatched += 1,
        }
    }
    (lags, unmatched)
}

/// Where a time-shifted PLAY (answered `back`) was answered from: its `Range` start, seconds.
fn answered_from(back: &isochron_loadgen::client::PlayInfo) -> f64 {
    let range = back.range.clone().unwrap_or_default();
    range.trim_start_matches("npt=").trim_end_matches('-').parse().expect(&range)
}

/// `got`, what a PLAY answered `back` brought, is the publisher's own packets (as `tap` saw
/// them), consecutive from RTP-Info's, each received `behind` (give or take, in that range)
/// after it was published: the least and the most.
fn played_behind(
    got: &[isochron_loadgen::client::RtpPacket],
    back: &isochron_loadgen::client::PlayInfo,
    tap: &Tap,
    behind: std::ops::Range<Duration>,
) -> (Duration, Duration) {
    assert!(got.len() > 50, "{} packets", got.len());
    assert_eq!(Some(got[0].header.sequence), back.seq, "from RTP-Info's packet");
    for w in got.windows(2) {
        assert_eq!(w[1].header.sequence, w[0].header.sequence.wrapping_add(1), "consecutive");
    }
    let (lag, unmatched) = lags(got, tap, Instant::now() - Duration::from_secs(120));
    assert_eq!(unmatched, 0, "every packet is the publisher's");
    assert!(lag.len() > 20, "{} packets identified", lag.len());
    let (lo, hi) = (*lag.iter().min().unwrap(), *lag.iter().max().unwrap());
    assert!(behind.contains(&lo) && behind.contains(&hi), "{behind:?} behind: {lo:?}..{hi:?}");
    (lo, hi)
}

/// `got`, what a PLAY of `npt=now-` at `since` brought, is at the live edge: the packets
/// published since arrive within half a second. Returns the most any took.
fn at_the_edge(got: &[isochron_loadgen::client::RtpPacket], tap: &Tap, since: Instant) -> Duration {
    let (lag, unmatched) = lags(got, tap, since);
    assert_eq!(unmatched, 0);
    assert!(lag.len() > 10, "{} packets published since", lag.len());
    let worst = *lag.iter().max().unwrap();
    assert!(worst < Duration::from_millis(500), "caught up: {worst:?} behind");
    worst
}

/// Time-shift, step 3 of `docs/design/live.md`: 36 s into a 45 s feed (every frame different),
/// a player asks for `Range: npt=6-`, 30 s back. It is answered with the seek point at or before
/// 6 s, and receives the publisher's own packets, consecutive, each about 30 s after it was
/// published (measured through the tap). A PLAY of `npt=now-` (RFC 2326 §3.6) then brings it back
/// to the live edge: the packets published after it arrive within half a second.
#[test]
fn a_viewer_goes_back_30_s_into_a_running_feed_and_catches_up() {
    use isochron_loadgen::client::{Client, Incoming, Transport};
    let _load = load(weight::PLAYER);
    require("ffmpeg");
    let src = media_fixture("h264_clock_45s.mp4");
    let dir = tempdir();
    let server = Server::start(
        &dir.path().join("store"),
        ServeOptions { no_demo: true, ..Default::default() },
    );
    let tap = Tap::start(server.rtsp);
    let published = format!("rtsp://127.0.0.1:{}/clock", tap.port());
    let url = server.url("clock");
    std::thread::scope(|s| {
        let feed = s.spawn(|| publish(Command::new("ffmpeg"), &src, &published, "tcp"));
        await_feed(&server, "clock");
        std::thread::sleep(Duration::from_secs(36));
        let rt = runtime();
        let collect = |c: &mut Client, secs: u64| {
            let mut got = Vec::new();
            let until = Instant::now() + Duration::from_secs(secs);
            while Instant::now() < until {
                if let Some(Incoming::Rtp(p)) = rt.block_on(c.next(Duration::from_millis(500))) {
                    got.push(p);
                }
            }
            got
        };
        let mut c = rt.block_on(Client::connect(&url)).unwrap();
        // The feed's one track (H.264), its RTP as it comes (the client plays no H.264).
        rt.block_on(c.describe_presentation()).unwrap();
        rt.block_on(c.setup(Transport::Tcp)).unwrap();
        let back = rt.block_on(c.play(Some("npt=6-"))).unwrap();
        let start = answered_from(&back);
        assert!((4.9..=6.0).contains(&start), "answered from the seek point before 6 s: {back:?}");
        let shifted = collect(&mut c, 4);
        let behind = Duration::from_secs(29)..Duration::from_secs(33);
        let (lo, hi) = played_behind(&shifted, &back, &tap, behind);

        // Back to the live edge.
        let live_at = Instant::now();
        rt.block_on(c.play(Some("npt=now-"))).unwrap();
        let caught_up = collect(&mut c, 3);
        let worst = at_the_edge(&caught_up, &tap, live_at);
        eprintln!("time-shift: 30 s behind ({lo:?}..{hi:?}), then live, at most {worst:?}");
        rt.block_on(c.teardown()).unwrap();
        let feed = feed.join().unwrap();
        assert!(feed.status.success(), "{}", String::from_utf8_lossy(&feed.stderr));
    });
    server.stop();
}

/// Time-shift further back than the edge keeps (`live.window_s` = 5 s here): the recording is
/// played from disk, and on as it grows. A 26 s feed (every frame different, through a tap) has
/// two viewers, both from 14 s in:
/// - A asks for `npt=3-`: answered from the seek point at or before 3 s, it receives
///   the publisher's own packets, consecutive, each about 11 s after it was published (more than
///   the window: from disk), on past what was committed when it asked (about 12 s of it) to the
///   feed's last packet, and then its BYE;
/// - B asks for `npt=2-` (from disk too, 12 s behind), then for `npt=now-`: the
///   packets published after that arrive within half a second. In between it pauses for a
///   second and resumes where it stopped, 13 s behind.
#[test]
fn a_viewer_goes_back_further_than_the_window_and_plays_the_recording_as_it_grows() {
    use isochron_loadgen::client::{Client, Incoming, PlayInfo, Transport};
    let _load = load(weight::PLAYER);
    require("ffmpeg");
    let src = media_fixture("h264_clock_45s.mp4");
    let dir = tempdir();
    let config = "[live]\nwindow_s = 5\n";
    let server = Server::start(
        &dir.path().join("store"),
        ServeOptions { no_demo: true, config: Some(config), ..Default::default() },
    );
    let tap = Tap::start(server.rtsp);
    let published = format!("rtsp://127.0.0.1:{}/clock", tap.port());
    let url = server.url("clock");
    // A client that has set up the feed's one track (H.264, its RTP as it comes) over TCP.
    let viewer = |rt: &tokio::runtime::Runtime| {
        let mut c = rt.block_on(Client::connect(&url)).unwrap();
        rt.block_on(c.describe_presentation()).unwrap();
        rt.block_on(c.setup(Transport::Tcp)).unwrap();
        c
    };
    // Packets until `until` or the BYE (whether it came).
    let collect = |rt: &tokio::runtime::Runtime, c: &mut Client, until: Instant| {
        let mut got = Vec::new();
        while Instant::now() < until {
            match rt.block_on(c.next(Duration::from_millis(500))) {
                Some(Incoming::Rtp(p)) => got.push(p),
                Some(Incoming::Rtcp { bye: true, .. }) => return (got, true),
                _ => {}
            }
        }
        (got, false)
    };
    std::thread::scope(|s| {
        let feed = s.spawn(|| {
            run(
                Command::new("ffmpeg")
                    .args(["-nostdin", "-v", "error", "-re", "-i"])
                    .arg(&src)
                    .args(["-t", "26", "-map", "0", "-c", "copy", "-f", "rtsp"])
                    .args(["-rtsp_transport", "tcp", &published]),
                60,
            )
        });
        await_feed(&server, "clock");
        let started = Instant::now();
        let a = s.spawn(move || {
            let rt = runtime();
            let mut c = viewer(&rt);
            std::thread::sleep(Duration::from_secs(14).saturating_sub(started.elapsed()));
            let back = rt.block_on(c.play(Some("npt=3-"))).unwrap();
            let start = answered_from(&back);
            assert!((1.9..=3.0).contains(&start), "A from the seek point before 3 s: {back:?}");
            let (got, bye) = collect(&rt, &mut c, Instant::now() + Duration::from_secs(30));
            (back, got, bye)
        });
        let b = s.spawn(move || {
            let rt = runtime();
            let mut c = viewer(&rt);
            std::thread::sleep(Duration::from_secs(14).saturating_sub(started.elapsed()));
            let back = rt.block_on(c.play(Some("npt=2-"))).unwrap();
            let start = answered_from(&back);
            assert!((0.9..=2.0).contains(&start), "B from the seek point before 2 s: {back:?}");
            let (mut shifted, _) = collect(&rt, &mut c, Instant::now() + Duration::from_secs(3));
            // Paused for a second, it resumes where it stopped, from disk (a second further
            // behind).
            rt.block_on(c.pause()).unwrap();
            let paused = shifted.len();
            shifted.extend(collect(&rt, &mut c, Instant::now() + Duration::from_secs(1)).0);
            rt.block_on(c.play(None)).unwrap();
            let (resumed, _) = collect(&rt, &mut c, Instant::now() + Duration::from_secs(3));
            let live_at = Instant::now();
            rt.block_on(c.play(Some("npt=now-"))).unwrap();
            let (caught_up, _) = collect(&rt, &mut c, Instant::now() + Duration::from_secs(3));
            rt.block_on(c.teardown()).unwrap();
            (back, (shifted, paused, resumed), live_at, caught_up)
        });
        let (a_back, a_got, a_bye) = a.join().unwrap();
        let (b_back, shifted, live_at, caught_up) = b.join().unwrap();
        let feed = feed.join().unwrap();
        assert!(feed.status.success(), "{}", String::from_utf8_lossy(&feed.stderr));

        let behind = |s: u64| Duration::from_secs(s - 1)..Duration::from_secs(s + 2);
        let a_lag = played_behind(&a_got, &a_back, &tap, behind(11));
        assert!(a_bye, "A's BYE after the feed's last packet");
        // The tap dates the packets of one read alike: A's last is among the last read.
        let (last_sent, a_last) = {
            let sent = tap.sent();
            let sent = sent.lock().unwrap();
            let last = sent.values().map(|v| v.at).max().unwrap();
            let a_last = a_got.last().and_then(|p| sent.get(&payload_hash(&p.payload)));
            (last, a_last.map(|v| v.at))
        };
        assert_eq!(a_last, Some(last_sent), "A played on to the feed's last packet");
        let (shifted, paused, resumed) = shifted;
        let b_lag = played_behind(&shifted, &b_back, &tap, behind(12));
        assert!(shifted.len() - paused < 10, "{} packets after the PAUSE", shifted.len() - paused);
        let next = shifted.last().unwrap().header.sequence.wrapping_add(1);
        assert_eq!(
            resumed.first().map(|p| p.header.sequence),
            Some(next),
            "resumed where it paused"
        );
        let r_back = PlayInfo { seq: Some(next), ..b_back };
        let r_lag = played_behind(&resumed, &r_back, &tap, behind(13));
        let worst = at_the_edge(&caught_up, &tap, live_at);
        eprintln!(
            "from disk: A {} packets {a_lag:?} behind to the end; B {b_lag:?}, paused, \
             {r_lag:?}, then live, at most {worst:?}",
            a_got.len(),
        );
    });
    let log = server.log();
    assert!(log.contains("the recording's viewers read on"), "{log}");
    server.stop();
}

/// A finished feed is a title like any other: with `transcode.ladder` set, its recording gets
/// the server's ladder once the feed ends, made from the recording's own HLS (a live recording
/// keeps no source file). ffmpeg publishes the 10 s clip (640×360); the job for `cam~240p`
/// (1080p, taller than the feed, left out) runs to its end, and the rendition, fetched over
/// HTTP, is 240 lines and every frame of the feed.
#[test]
fn a_finished_feed_gets_the_servers_ladder_from_its_recording() {
    require("ffmpeg");
    require("ffprobe");
    let _load = load(weight::PLAYER);
    let src = media_fixture("h264_aac.mp4");
    let dir = tempdir();
    let config = "[transcode]\nladder = \"1080p,240p:300k\"\n";
    let server = Server::start(
        &dir.path().join("store"),
        ServeOptions { no_demo: true, config: Some(config), ..Default::default() },
    );
    let feed = publish(Command::new("ffmpeg"), &src, &server.url("cam"), "tcp");
    assert!(feed.status.success(), "{}", String::from_utf8_lossy(&feed.stderr));
    // The jobs run in the idle scheduling class: on a machine busy with other tests, slowly.
    let deadline = Instant::now() + Duration::from_secs(240);
    let job = loop {
        let jobs: serde_json::Value =
            serde_json::from_str(&server.http_get("/api/v1/transcode")).unwrap();
        let job = jobs["jobs"].as_array().and_then(|j| j.first()).cloned();
        if let Some(j) = job.filter(|j| j["state"] == "done" || j["state"] == "failed") {
            break j;
        }
        assert!(
            Instant::now() < deadline,
            "no ladder job done within 240 s: {jobs}\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(
        (&job["title"], &job["state"]),
        (&"cam".into(), &"done".into()),
        "{job}\n{}",
        server.log()
    );
    assert_eq!(job["rungs"], serde_json::json!(["240p"]), "{job}");
    let rendition = dir.path().join("cam-240p.mp4");
    std::fs::write(&rendition, server.http_get_bytes("/objects/cam~240p")).unwrap();
    assert_eq!(crate::renditions::height(&rendition), 240);
    let (got, want) = (decoded_video(&rendition).len(), decoded_video(&src).len());
    assert!(got + 2 >= want && got <= want, "{got} frames of the feed's {want}");
    server.stop();
}

/// HLS of a running feed (RFC 8216 §6.2.1): its playlist is an event playlist of the
/// recording's closed segments, each dated by `EXT-X-PROGRAM-DATE-TIME` from when the server
/// received the feed's first packet (the API's `zero_unix_ms`: within 100 ms of when a tap
/// between publisher and server passed it, by this test's clock). ffmpeg reads it from its first segment while the feed
/// runs and on to the `EXT-X-ENDLIST` the finished recording's playlist carries: every frame
/// of the 30 s feed, in order. hls.js in Chromium plays it at the live edge: how far behind the
/// wall clock each frame it shows was dated (its `playingDate`) stays within three segment
/// durations, with no jump over a gap.
#[test]
fn hls_players_watch_a_running_feed_from_its_start_and_at_its_edge() {
    let _load = load(weight::HEAVY);
    require("ffmpeg");
    require("chromium");
    let src = media_fixture("h264_aac.mp4");
    let dir = tempdir();
    let server = Server::start(
        &dir.path().join("store"),
        ServeOptions { no_demo: true, ..Default::default() },
    );
    let tap = Tap::start(server.rtsp);
    let published = format!("rtsp://127.0.0.1:{}/cam", tap.port());
    let list_url = format!("http://{}/hls/cam/index.m3u8", server.http);
    let from_start = dir.path().join("hls.mkv");
    let (feed, read, report) = std::thread::scope(|s| {
        let feed = s.spawn(|| publish_looped(Command::new("ffmpeg"), &src, 3, &published, "tcp"));
        await_feed(&server, "cam");
        // A segment is listed once the key frame closing it is recorded and committed: two of
        // them (hls.js starts a target and a half behind the last).
        let deadline = Instant::now() + Duration::from_secs(20);
        let list = loop {
            let list = server.http_get("/hls/cam/index.m3u8");
            if list.contains("1.m4s") {
                break list;
            }
            assert!(Instant::now() < deadline, "no segment listed: {list}");
            std::thread::sleep(Duration::from_millis(200));
        };
        assert!(list.contains("#EXT-X-PLAYLIST-TYPE:EVENT"), "{list}");
        assert!(!list.contains("#EXT-X-ENDLIST"), "{list}");
        assert!(list.contains("#EXT-X-PROGRAM-DATE-TIME:"), "{list}");
        let body = server.http_get("/api/v1/live");
        let live: Vec<serde_json::Value> = serde_json::from_str(&body).expect(&body);
        let zero = live[0]["zero_unix_ms"].as_u64().unwrap();
        let first = tap.sent().lock().unwrap().values().map(|v| v.at).min().expect("a packet");
        let wall = std::time::SystemTime::now() - first.elapsed();
        let tapped = wall.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
        assert!(zero.abs_diff(tapped) <= 100, "the first packet at {tapped}, dated {zero}");
        let read = s.spawn(|| {
            run(
                Command::new("ffmpeg")
                    .args(["-nostdin", "-v", "error", "-live_start_index", "0", "-i", &list_url])
                    .args(["-map", "0", "-c", "copy", "-y"])
                    .arg(&from_start),
                90,
            )
        });
        let beacon = Beacon::new();
        let page = format!("http://{}/watch/cam?report={}&until=8", server.http, beacon.url());
        let (report, console) = watch_report(None, &page, &beacon, Duration::from_secs(40));
        for line in console.lines().filter(|l| l.contains("isochron: ")) {
            eprintln!("{line}");
        }
        (feed.join().unwrap(), read.join().unwrap(), (report, list))
    });
    assert!(feed.status.success(), "publishing: {}", String::from_utf8_lossy(&feed.stderr));
    assert!(read.status.success(), "ffmpeg reading HLS: {}", String::from_utf8_lossy(&read.stderr));

    let one = decoded_video(&src);
    let want: Vec<String> = one.iter().chain(&one).chain(&one).cloned().collect();
    let got = decoded_video(&from_start);
    assert_eq!(got.first(), want.first(), "HLS from the start: its first frame");
    a_run_of(&got, &want, true, "HLS from the start");

    let (v, list) = report;
    let target: f64 = list
        .lines()
        .find_map(|l| l.strip_prefix("#EXT-X-TARGETDURATION:"))
        .and_then(|t| t.parse().ok())
        .expect("a target duration");
    eprintln!("hls.js at the live edge: {v}; target duration {target} s");
    assert_eq!(v["jumps"].as_array().map(Vec::len), Some(0), "{v}");
    let latency = &v["latency_ms"];
    let (p50, max) = (latency["p50"].as_f64().unwrap(), latency["max"].as_f64().unwrap());
    assert!(latency["n"].as_u64().unwrap() > 10, "{v}");
    assert!(max <= 3.0 * target * 1000.0, "latency p50 {p50} ms, max {max} ms: {v}");

    // The feed ended: the playlist is the finished recording's, whole.
    await_object(&server, "cam", Duration::from_secs(15));
    let list = server.http_get("/hls/cam/index.m3u8");
    assert!(list.ends_with("#EXT-X-ENDLIST\n") && !list.contains("EVENT"), "{list}");
    server.stop();
}

/// The crowd: ffmpeg publishes a 60 s feed (the 10 s clip six times) over RTSP RECORD
/// and thirty players of four kinds watch it live at once, each from wherever it joined:
///
/// - twelve ffmpeg (`-c copy` to MP4), six over TCP and six over UDP, to the feed's end: every
///   decoded video frame is the feed's, consecutive, none missing, up to its end;
/// - seven GStreamer (`rtspsrc`, TCP and UDP) for 750 video frames each (30 s);
/// - ten `isochron play` over UDP and TCP to the end: nothing lost, ended by the BYE;
/// - hls.js in Chromium at the live edge for 20 s, with no jump over a gap.
///
/// The API counts the 29 RTSP viewers together, and the dashboard lists the feed with its
/// viewers. The recording, committed when the feed ends,
/// is the feed frame for frame: 60 s, each decoded frame the clip's in turn.
#[test]
fn thirty_players_of_four_kinds_watch_a_60_s_feed_live() {
    let _load = load(weight::HEAVY);
    require("ffmpeg");
    require("gst-launch-1.0");
    require("chromium");
    let src = media_fixture("h264_aac.mp4");
    let dir = tempdir();
    let server = Server::start(
        &dir.path().join("store"),
        ServeOptions { no_demo: true, ..Default::default() },
    );
    let url = server.url("crowd");
    let transport = |i: usize| if i.is_multiple_of(2) { "tcp" } else { "udp" };
    let recordings: Vec<_> =
        (0..12).map(|i| (transport(i), dir.path().join(format!("ffmpeg{i}.mp4")))).collect();
    let gst = |transport: &str| gst_watch(&url, transport, None, 750, 80);
    let (feed, gsts, plays, hls) = std::thread::scope(|s| {
        let feed = s.spawn(|| publish_looped(Command::new("ffmpeg"), &src, 6, &url, "tcp"));
        await_feed(&server, "crowd");
        std::thread::sleep(Duration::from_secs(2));
        let records: Vec<_> = recordings
            .iter()
            .map(|(transport, out)| s.spawn(|| ffmpeg_record(&url, transport, out)))
            .collect();
        let gsts: Vec<_> = (0..7).map(|i| s.spawn(move || gst(transport(i)))).collect();
        let plays: Vec<_> = (0..10)
            .map(|i| {
                let url = &url;
                s.spawn(move || {
                    run(
                        Command::new(bin())
                            .args(["play", url, "--json", "--timeout", "90"])
                            .args(["--transport", transport(i)]),
                        100,
                    )
                })
            })
            .collect();
        let hls = s.spawn(|| {
            // Opened once two segments are listed (hls.js starts a target and a half behind
            // the last).
            let deadline = Instant::now() + Duration::from_secs(20);
            while !server.http_get("/hls/crowd/index.m3u8").contains("1.m4s") {
                assert!(Instant::now() < deadline, "no segment listed");
                std::thread::sleep(Duration::from_millis(200));
            }
            let beacon = Beacon::new();
            let page =
                format!("http://{}/watch/crowd?report={}&until=20", server.http, beacon.url());
            watch_report(None, &page, &beacon, Duration::from_secs(60)).0
        });
        // The 29 RTSP viewers together (a busy machine starts processes slowly).
        let deadline = Instant::now() + Duration::from_secs(25);
        loop {
            let body = server.http_get("/api/v1/live");
            let live: Vec<serde_json::Value> = serde_json::from_str(&body).expect(&body);
            if live[0]["viewers"] == 29 {
                break;
            }
            assert!(Instant::now() < deadline, "not 29 viewers: {body}");
            std::thread::sleep(Duration::from_millis(100));
        }
        // The dashboard lists the feed with its viewers (some may have left by the time it
        // polls).
        let dom = {
            let page = format!("http://{}/", server.http);
            let child = chromium(&page, &["--dump-dom", "--virtual-time-budget=3000"], 60);
            let out = child.wait_with_output().expect("chromium");
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let viewers: usize = dom
            .split("<tr data-feed=\"crowd\" data-viewers=\"")
            .nth(1)
            .and_then(|v| v.split('"').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("the dashboard shows no row for the feed: {dom}"));
        assert!((1..=29).contains(&viewers), "the dashboard's feed row: {viewers} viewers");
        let (mut gst_outs, mut play_outs) = (Vec::new(), Vec::new());
        for g in gsts {
            gst_outs.push(g.join().unwrap());
        }
        for p in plays {
            play_outs.push(p.join().unwrap());
        }
        for r in records {
            r.join().unwrap();
        }
        (feed.join().unwrap(), gst_outs, play_outs, hls.join().unwrap())
    });
    assert!(feed.status.success(), "publishing: {}", String::from_utf8_lossy(&feed.stderr));

    let one = decoded_video(&src);
    let want: Vec<String> = (0..6).flat_map(|_| one.iter().cloned()).collect();
    for (transport, out) in &recordings {
        let got = decoded_video(out);
        a_run_of(&got, &want, true, &format!("ffmpeg over {transport}"));
        assert!(got.len() > 45 * 25, "ffmpeg over {transport}: {} frames", got.len());
    }
    for (i, o) in gsts.iter().enumerate() {
        assert_watched(o, &format!("GStreamer ({})", transport(i)), &server);
    }
    for play in &plays {
        let summary = play_summary(play);
        assert!(play.status.success(), "isochron play: {summary}");
        for t in summary["tracks"].as_array().unwrap() {
            assert_eq!(t["lost"], 0, "isochron play: {summary}");
            assert_eq!(t["ended"], true, "isochron play: {summary}");
        }
    }
    eprintln!("hls.js at the live edge: {hls}");
    assert_eq!(hls["jumps"].as_array().map(Vec::len), Some(0), "{hls}");

    // The recording is the feed, frame for frame.
    committed_with(&server, "crowd", 60.0);
    // Read through its HLS playlist, as fast as ffmpeg reads (over RTSP it would take the
    // feed's 60 s again).
    let played = dir.path().join("crowd-played.mkv");
    let list = format!("http://{}/hls/crowd/index.m3u8", server.http);
    let read = run(
        Command::new("ffmpeg")
            .args(["-nostdin", "-v", "error", "-i", &list, "-map", "0", "-c", "copy", "-y"])
            .arg(&played),
        60,
    );
    assert!(read.status.success(), "ffmpeg reading HLS: {}", String::from_utf8_lossy(&read.stderr));
    let got = decoded_video(&played);
    assert_eq!(got, want, "the recording's video, frame for frame");
    server.stop();
}

/// `src` remuxed by ffmpeg to MPEG-TS (`-c copy`), and the same with a second of null packets
/// after it: what GStreamer publishes. (`tsparse` holds back the packets after the stream's
/// last PCR until more come, and fills its last buffer with null packets: the padding lets the
/// stream's own packets all go.)
fn transport_stream_of(src: &Path, dir: &Path) -> (Vec<u8>, std::path::PathBuf) {
    let ts = dir.join("clip.ts");
    let o = run(
        Command::new("ffmpeg")
            .args(["-nostdin", "-v", "error", "-i"])
            .arg(src)
            .args(["-map", "0", "-c", "copy", "-f", "mpegts", "-y"])
            .arg(&ts),
        60,
    );
    assert!(o.status.success(), "ffmpeg to MPEG-TS: {}", String::from_utf8_lossy(&o.stderr));
    let bytes = std::fs::read(&ts).expect("clip.ts");
    let mut padded = bytes.clone();
    let mut null = vec![0xFF; 188];
    null[..4].copy_from_slice(&[0x47, 0x1F, 0xFF, 0x10]);
    for _ in 0..(1_500_000 / 8 / 188) {
        padded.extend_from_slice(&null);
    }
    let path = dir.join("padded.ts");
    std::fs::write(&path, padded).expect("padded.ts");
    (bytes, path)
}

/// The TS packets of `bytes` but its null packets (PID 0x1FFF: stuffing, which any
/// multiplexer on the way may add or drop, ISO/IEC 13818-1 §2.4.3.3).
pub(crate) fn without_nulls(bytes: &[u8]) -> Vec<&[u8]> {
    bytes.chunks(188).filter(|p| p.len() < 3 || !(p[1] & 0x1F == 0x1F && p[2] == 0xFF)).collect()
}

/// GStreamer sends the transport stream `ts` at its own pace (`tsparse` times its packets by
/// their PCR) over SRT to `url` (`srtsink`).
fn gst_publish_srt(ts: &Path, url: &str) -> Output {
    run(&mut gst_publish_srt_cmd(Command::new("gst-launch-1.0"), ts, url), 60)
}

/// The command of [`gst_publish_srt`], from `cmd` (`gst-launch-1.0`, on the host it runs on).
pub(crate) fn gst_publish_srt_cmd(mut cmd: Command, ts: &Path, url: &str) -> Command {
    cmd.args(["-q", "filesrc"]).arg(format!("location={}", ts.display()));
    cmd.args(["!", "tsparse", "set-timestamps=true", "alignment=7", "!", "clocksync", "!"]);
    cmd.args(["srtsink", &format!("uri={url}")]);
    cmd
}

/// Step 4's MPEG-TS feeds: at once, GStreamer publishes a transport stream over SRT
/// (`srtsink`, `streamid=publish:NAME`) and over RTSP RECORD as `MP2T/90000`
/// (`rtspclientsink`), and ffmpeg remuxes an MP4 clip (twice over) to MPEG-TS over SRT. While
/// they run, ffmpeg watches the ffmpeg feed over RTSP/TCP (a consecutive run of the clip's
/// decoded frames from where it joined), GStreamer the SRT one from GStreamer over UDP (100
/// decoded frames), and `isochron play` the RTSP one to its BYE with nothing lost; the API
/// lists the SRT feeds as `srt` with one `MP2T` track. Once they end, GStreamer's two
/// recordings are the published stream byte for byte but null packets, as `/objects/NAME`
/// serves them; ffmpeg's decodes to every frame of the clip twice, and so do its HLS segments.
/// A caller whose stream id asks to read is refused, and nothing is created.
#[test]
fn mpeg_ts_feeds_over_srt_and_rtsp_are_watched_live_and_recorded_as_sent() {
    let _load = load(weight::HEAVY);
    require("ffmpeg");
    require("gst-launch-1.0");
    let src = media_fixture("h264_aac.mp4");
    let dir = tempdir();
    let (ts, padded) = transport_stream_of(&src, dir.path());
    let server = Server::start(
        &dir.path().join("store"),
        ServeOptions {
            no_demo: true,
            // rtspclientsink's TEARDOWN is now and then lost at its own shutdown (as
            // rtspsrc's is: docs/design/closing.md), which the server takes for a publisher
            // that dropped: its feed ends once the grace period is over. A short one ends it
            // well before `isochron play` gives up after 10 s without a packet.
            config: Some("[live]\nsrt_listen = \"127.0.0.1:0\"\ngrace_s = 2\n"),
            ..Default::default()
        },
    );
    let srt = server.srt.expect("the SRT listener's address");
    let srt_url = |name: &str| format!("srt://{srt}?streamid=publish:{name}");
    let watched = dir.path().join("watched.ts");
    let (gst_srt, gst_rtsp, ff, play) = std::thread::scope(|s| {
        let gst_srt = s.spawn(|| gst_publish_srt(&padded, &srt_url("srt-gst")));
        let gst_rtsp = s.spawn(|| {
            let script = repo().join("crates/isochron/tests/tools/gst_publish.py");
            let mut cmd = Command::new("/usr/bin/python3");
            run(cmd.arg(script).arg(&padded).arg(server.url("rtsp-ts")).arg("tcp"), 60)
        });
        let ff = s.spawn(|| {
            let url = format!("{}&pkt_size=1316", srt_url("srt-ff"));
            let mut cmd = Command::new("ffmpeg");
            cmd.args(["-nostdin", "-v", "error", "-re", "-stream_loop", "1", "-i"]).arg(&src);
            run(cmd.args(["-map", "0", "-c", "copy", "-f", "mpegts", &url]), 60)
        });
        for name in ["srt-ff", "srt-gst", "rtsp-ts"] {
            await_feed(&server, name);
        }
        let live = server.http_get("/api/v1/live");
        let feeds: Vec<serde_json::Value> = serde_json::from_str(&live).expect(&live);
        for f in feeds.iter().filter(|f| f["name"] != "rtsp-ts") {
            assert_eq!(
                (&f["transport"], &f["tracks"]),
                (&"srt".into(), &serde_json::json!(["MP2T"]))
            );
        }
        let view = s.spawn(|| {
            run(
                Command::new("timeout")
                    .args(["-k", "5", "25", "ffmpeg", "-nostdin", "-v", "error"])
                    .args(["-rtsp_transport", "tcp", "-i", &server.url("srt-ff"), "-t", "5"])
                    .args(["-map", "0", "-c", "copy", "-f", "mpegts", "-y"])
                    .arg(&watched),
                30,
            )
        });
        let gst_view = s.spawn(|| {
            let location = format!("location={}", server.url("srt-gst"));
            let pipeline = [
                "rtspsrc",
                &location,
                "protocols=udp",
                "!",
                "rtpmp2tdepay",
                "!",
                "tsdemux",
                "!",
                "h264parse",
                "!",
                "avdec_h264",
                "!",
                "identity",
                "eos-after=100",
                "!",
                "fakesink",
            ];
            // Not quiet: for `assert_watched` (GStreamer's shutdown race).
            run(Command::new("gst-launch-1.0").args(pipeline), 30)
        });
        let play = s.spawn(|| {
            let url = server.url("rtsp-ts");
            run(Command::new(bin()).args(["play", &url, "--json", "--timeout", "40"]), 50)
        });
        let o = view.join().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "ffmpeg watching: {err}\n{}", server.log());
        assert_watched(&gst_view.join().unwrap(), "GStreamer watching", &server);
        (
            gst_srt.join().unwrap(),
            gst_rtsp.join().unwrap(),
            ff.join().unwrap(),
            play.join().unwrap(),
        )
    });
    for (what, o) in [("srtsink", &gst_srt), ("rtspclientsink", &gst_rtsp), ("ffmpeg", &ff)] {
        assert!(
            o.status.success(),
            "{what} publishing: {}{}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
            server.log()
        );
    }
    let summary = play_summary(&play);
    let whole = summary["lost"] == 0 && summary["ended"] == "bye";
    assert!(
        play.status.success() && whole,
        "isochron play: {summary}\n{}\n{}",
        String::from_utf8_lossy(&play.stderr),
        server.log()
    );

    let one = decoded_video(&src);
    let twice: Vec<String> = one.iter().chain(&one).cloned().collect();
    // Less the last two frames: `-t` cuts the stream in decode order, and a B-frame's later
    // reference may be past the cut.
    let got = decoded_video(&watched);
    let got = &got[..got.len().saturating_sub(2)];
    a_run_of(got, &twice, false, "ffmpeg watching the SRT feed");
    assert!(got.len() >= 4 * 25, "ffmpeg watching: {} frames\n{}", got.len(), server.log());

    for name in ["srt-gst", "rtsp-ts"] {
        committed_with(&server, name, 10.0);
        let recorded = server.http_get_bytes(&format!("/objects/{name}"));
        let (got, want) = (without_nulls(&recorded), without_nulls(&ts));
        // Where they part, if they do: a missing tail (the publisher's last packets) reads
        // differently from a hole in the middle (packets lost on the way).
        let first_difference = got.iter().zip(&want).position(|(a, b)| a != b);
        assert!(
            got == want,
            "{name}: {} TS packets recorded (not null), {} published, the first difference at \
             packet {first_difference:?}\n{}",
            got.len(),
            want.len(),
            server.log()
        );
    }
    committed_with(&server, "srt-ff", 20.0);
    let recorded = dir.path().join("srt-ff.ts");
    std::fs::write(&recorded, server.http_get_bytes("/objects/srt-ff")).unwrap();
    assert_frames(&decoded_video(&recorded), &twice, "srt-ff as recorded");
    let hls = format!("http://{}/hls/srt-ff/index.m3u8", server.http);
    let out = run(
        Command::new("ffmpeg")
            .args(["-nostdin", "-v", "error", "-i", &hls, "-map", "0:v:0", "-f", "framemd5", "-"]),
        60,
    );
    let frames: Vec<String> =
        framemd5_packets(&String::from_utf8_lossy(&out.stdout)).into_iter().map(|p| p.2).collect();
    assert_frames(&frames, &twice, "srt-ff over HLS");

    // A caller asking to read is refused at the handshake; nothing is created.
    let url = format!("srt://{srt}?streamid=read:srt-ff2");
    let o = run(
        Command::new("timeout")
            .args(["-k", "5", "20", "ffmpeg", "-nostdin", "-v", "error", "-re"])
            .arg("-i")
            .arg(&src)
            .args(["-map", "0", "-c", "copy", "-f", "mpegts", &url]),
        30,
    );
    assert!(!o.status.success(), "a reader over SRT was let in");
    let log = server.log();
    assert!(log.contains("SRT caller refused") && log.contains("expected publish:NAME"), "{log}");
    assert!(!server.http_get("/api/v1/objects").contains("srt-ff2"));
    server.stop();
}

/// Step 4's grace period: ffmpeg publishes a feed over RTSP and is killed (SIGKILL: no
/// TEARDOWN) 6 s in, while `isochron play` watches over TCP. The feed waits for its publisher
/// (`live.grace_s`, 8 s here): it is still listed, and the viewer stays. Three seconds later
/// ffmpeg publishes the same name again and plays the clip to its end: the feed goes on as
/// one recording, numbered on without a gap, and the viewer gets both parts and one BYE, at
/// the end. The recording's last frames are the whole clip the second publisher sent, after a
/// run of the first's from the feed's start.
#[test]
fn a_publisher_that_drops_and_comes_back_within_the_grace_period_goes_on_with_the_feed() {
    let _load = load(weight::PLAYER);
    require("ffmpeg");
    let src = media_fixture("h264_aac.mp4");
    let dir = tempdir();
    let server = Server::start(
        &dir.path().join("store"),
        ServeOptions { no_demo: true, config: Some("[live]\ngrace_s = 8\n"), ..Default::default() },
    );
    let url = server.url("relay");
    let play = std::thread::scope(|s| {
        let first = s.spawn(|| {
            let mut cmd = Command::new("timeout");
            cmd.args(["-s", "KILL", "6", "ffmpeg"]);
            publish_looped(cmd, &src, 3, &url, "tcp")
        });
        await_feed(&server, "relay");
        let play = s.spawn(|| {
            let args = ["play", &url, "--transport", "tcp", "--json", "--timeout", "60"];
            run(Command::new(bin()).args(args), 70)
        });
        assert!(!first.join().unwrap().status.success(), "the first publisher was killed");
        std::thread::sleep(Duration::from_secs(3));
        let live = server.http_get("/api/v1/live");
        assert!(live.contains("\"name\":\"relay\""), "the feed waits for its publisher: {live}");
        assert!(server.log().contains("waiting for it to come back"), "{}", server.log());
        let second = publish(Command::new("ffmpeg"), &src, &url, "tcp");
        assert!(
            second.status.success(),
            "publishing again: {}",
            String::from_utf8_lossy(&second.stderr)
        );
        play.join().unwrap()
    });
    let summary = play_summary(&play);
    let tracks = summary["tracks"].as_array().unwrap();
    let whole = tracks.iter().all(|t| t["lost"] == 0 && t["ended"] == true);
    assert!(play.status.success() && whole, "isochron play across the drop: {summary}");
    let log = server.log();
    assert!(log.contains("a publisher came back to its feed"), "{log}");
    // 6 s, about 3 s away, and 10 s: one recording.
    let v = await_object(&server, "relay", Duration::from_secs(15));
    let duration = v["duration_s"].as_f64().unwrap();
    assert!((17.0..22.0).contains(&duration), "the recording lasts {duration} s: {v}");
    let out = dir.path().join("relay.mp4");
    ffmpeg_record(&server.url("relay"), "tcp", &out);
    let got = decoded_video(&out);
    let one = decoded_video(&src);
    assert!(got.len() > one.len() + 4 * 25, "{} frames recorded", got.len());
    assert_frames(&got[got.len() - one.len()..], &one, "the second publisher's clip");
    let looped: Vec<String> = one.iter().chain(&one).cloned().collect();
    // (ffmpeg's `-c copy` over RTSP may drop the very first frame: it has no timestamp yet.)
    let first = (0..=1).any(|i| looped[i..].starts_with(&got[..4 * 25]));
    assert!(first, "the first publisher's frames start the recording");
    server.stop();
}
