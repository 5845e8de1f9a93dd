//! Guaranteed-rate recording through `PUT /api/v1/record/NAME?rate=…` (XTREAM's write streams):
//! a real HTTP client (curl) pushes MPEG-TS, the server paces it to the declared rate, writes its
//! blocks through the cycle scheduler and commits an object that plays at once, byte-exact, and
//! is stored exactly as `isochron ingest` stores the same file. Refusals (admission, bad input)
//! are clear and leave playing streams untouched.

#![allow(clippy::print_stderr)] // tests report measurements on stderr

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use isochron_diskio::Store;
use isochron_loadgen::Transport;
use isochron_store::catalog::ObjectRecord;

/// The store's default block size: the recorder's token bucket lets one block through at once.
const BLOCK: u64 = 1 << 20;

/// What a PUT answered.
struct Put {
    code: u16,
    body: String,
    wall: Duration,
    /// How many bytes of the body curl sent.
    uploaded: u64,
}

impl Put {
    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// `curl -T file` to `/api/v1/record/{target}` (`NAME?rate=…`), with extra curl arguments.
fn put(server: &Server, target: &str, file: &Path, extra: &[&str]) -> Put {
    let url = format!("http://{}/api/v1/record/{target}", server.http);
    let t = Instant::now();
    let out = run(
        Command::new("curl")
            .args(["-sS", "-o", "-", "-w", "\n%{size_upload} %{http_code}", "-T"])
            .arg(file)
            .args(extra)
            .arg(&url),
        200,
    );
    let wall = t.elapsed();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, tail) = text.rsplit_once('\n').unwrap_or(("", &text));
    let (uploaded, code) = tail.trim().split_once(' ').unwrap_or(("0", "0"));
    Put {
        code: code.parse().unwrap_or(0),
        body: body.to_string(),
        wall,
        uploaded: uploaded.parse().unwrap_or(0),
    }
}

/// Fetches `url` over interleaved TCP with the loadgen client: the payloads of every packet.
fn fetch(url: &str) -> Vec<u8> {
    let url = url.to_string();
    runtime().block_on(async move {
        let (mut c, _) = start_play(&url, Transport::Tcp).await;
        let got = c.collect(Duration::from_secs(5), Duration::from_secs(120)).await.unwrap();
        let _ = c.teardown().await;
        got.payload()
    })
}

/// ffprobe's duration of `input` (a file or an `rtsp://` URL, read over TCP).
fn ffprobe_duration(input: &str) -> f64 {
    let out = run(
        Command::new("ffprobe")
            .args(["-v", "error", "-rtsp_transport", "tcp", "-show_entries", "format=duration"])
            .args(["-of", "csv=p=0"])
            .arg(input),
        60,
    );
    assert!(out.status.success(), "ffprobe {input}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().parse().expect("a duration")
}

fn cli(args: &[&str], data: &Path) -> std::process::Output {
    let out = run(Command::new(bin()).args(args).arg("--data").arg(data), 120);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

fn record_of(data: &Path, name: &str) -> ObjectRecord {
    let store = Store::open(data).unwrap();
    store.catalog().object(name).unwrap().unwrap_or_else(|| panic!("no object {name}"))
}

/// Everything of a record that follows from the bytes: block boundaries, units, timing, seek
/// points, streams (not the id, seed, name, source or date).
fn layout(r: &ObjectRecord) -> impl PartialEq + std::fmt::Debug {
    let blocks: Vec<_> = r
        .blocks
        .iter()
        .map(|b| (b.first_gsn, b.first_send_time, b.packets, b.payload_bytes, b.encoded_len))
        .collect();
    let seeks: Vec<_> = r.seek_points.iter().map(|s| (s.time, s.gsn)).collect();
    let streams: Vec<_> =
        r.streams.iter().map(|s| (s.pid, s.kind.clone(), s.codec.clone())).collect();
    (
        blocks,
        seeks,
        streams,
        (r.packets, r.ts_bytes, r.duration, r.avg_bitrate, r.peak_bitrate, r.block_size),
    )
}

#[test]
fn a_clip_pushed_at_its_rate_plays_at_once_and_is_stored_as_ingest_stores_it() {
    let _load = load(weight::PLAYER);
    require("curl");
    require("ffprobe");
    let vbr = fixture("vbr20");
    let idx = ts_index(&vbr);
    let src = std::fs::read(&vbr).unwrap();
    let dir = tempdir();
    let data = dir.path().join("store");
    let server = Server::start(&data, ServeOptions::default());

    let rate = idx.avg_bitrate().0;
    let put =
        put(&server, &format!("rec?rate={rate}"), &vbr, &["--limit-rate", &(rate / 8).to_string()]);
    eprintln!(
        "recorded {} bytes ({:.1} s at {:.2} Mb/s) in {:.1} s",
        src.len(),
        idx.duration().as_secs_f64(),
        rate as f64 / 1e6,
        put.wall.as_secs_f64()
    );
    assert_eq!(put.code, 201, "{}", put.body);
    let report = put.json();
    assert_eq!(report["name"], "rec");
    assert_eq!(report["bytes"], src.len() as u64);
    assert!((report["duration_s"].as_f64().unwrap() - idx.duration().as_secs_f64()).abs() < 1e-6);
    // Paced: the clip took about its duration (less the one-block burst) to arrive.
    let length = Duration::from_secs_f64(idx.duration().as_secs_f64());
    let floor = length.saturating_sub(Duration::from_secs(4));
    assert!(put.wall >= floor, "took only {:?} for {length:?}", put.wall);

    // Playable at once, with the source's duration.
    let (got, want) =
        (ffprobe_duration(&server.url("rec")), ffprobe_duration(vbr.to_str().unwrap()));
    assert!((got - want).abs() < 0.05, "duration over RTSP {got} vs source {want}");
    let listed = server.http_get("/api/v1/objects");
    assert!(listed.contains("\"name\":\"rec\""), "{listed}");
    assert_eq!(server.metric("isochron_recordings_committed_total"), 1.0);
    assert!(server.metric("isochron_recorded_bytes_total") >= src.len() as f64);
    assert!(server.metric("isochron_writes_total") >= report["blocks"].as_f64().unwrap());
    server.stop();

    // Byte-exact read-back from the disks.
    let out = dir.path().join("rec.ts");
    cli(&["cat", "rec", "-o", out.to_str().unwrap()], &data);
    assert_same_bytes(&std::fs::read(&out).unwrap(), &src, "isochron cat rec");

    // The same blocks, units and timing as an ingest of the same file.
    let other = dir.path().join("ingested");
    cli(&["ingest", vbr.to_str().unwrap()], &other);
    let (recorded, ingested) = (record_of(&data, "rec"), record_of(&other, "vbr20"));
    assert_eq!(recorded.blocks.len(), report["blocks"].as_u64().unwrap() as usize);
    assert_eq!(layout(&recorded), layout(&ingested));
}

#[test]
fn a_client_pushing_faster_than_declared_is_paced_by_the_server() {
    let _load = load(weight::PLAYER);
    require("curl");
    let clip = fixture("rate5m");
    let idx = ts_index(&clip);
    let src = std::fs::read(&clip).unwrap();
    let dir = tempdir();
    let server = Server::start(&dir.path().join("store"), ServeOptions::default());

    // No client-side limit: the server reads at the declared rate, after one block of burst.
    let rate = idx.avg_bitrate().0;
    let put = put(&server, &format!("fast?rate={rate}"), &clip, &[]);
    let expected = (src.len() as u64 - BLOCK) as f64 * 8.0 / rate as f64;
    eprintln!(
        "{} bytes at {:.2} Mb/s declared, pushed unthrottled: {:.1} s (expected {expected:.1} s, \
         clip {:.1} s)",
        src.len(),
        rate as f64 / 1e6,
        put.wall.as_secs_f64(),
        idx.duration().as_secs_f64()
    );
    assert_eq!(put.code, 201, "{}", put.body);
    let wall = put.wall.as_secs_f64();
    assert!(wall >= expected * 0.95 && wall < expected + 10.0, "took {wall} s");

    // Played straight away over RTSP, byte for byte.
    let got = fetch(&server.url("fast"));
    assert_same_bytes(&got, &src, "recorded object over RTSP/TCP");
}

#[test]
fn refused_and_broken_recordings_leave_playing_streams_alone() {
    let _load = load(weight::PLAYER);
    require("curl");
    let dir = tempdir();
    let data = dir.path().join("store");
    // One slow emulated disk: 2 MiB/s, 10 ms seeks.
    let disk = format!("{},seek_ms=10,rate_mib_s=2", dir.path().join("d0").display());
    demo_store_on(&data, &disk);
    let server = Server::start(
        &data,
        ServeOptions {
            config: Some("[sched]\nadmission = \"aggressive-avg\"\n"),
            ..ServeOptions::default()
        },
    );
    let demo_bytes = std::fs::read(demo()).unwrap();

    // A client plays the demo over TCP throughout.
    let player = {
        let url = server.url("demo");
        std::thread::spawn(move || fetch(&url))
    };
    std::thread::sleep(Duration::from_millis(500));

    // A recording that is paced slowly by its client, to be in progress meanwhile.
    let slow = {
        let (http, demo) = (server.http, demo());
        std::thread::spawn(move || {
            let url = format!("http://{http}/api/v1/record/dup?rate=2M");
            let out = run(
                Command::new("curl")
                    .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "--limit-rate", "300k"])
                    .arg("-T")
                    .arg(&demo)
                    .arg(&url),
                60,
            );
            String::from_utf8_lossy(&out.stdout).into_owned()
        })
    };
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(server.metric("isochron_recordings"), 1.0);

    let d = demo();
    let text = dir.path().join("notes.ts");
    std::fs::write(&text, "not a transport stream\n".repeat(100)).unwrap();
    // The demo corrupted after its first block: that block is written, then removed.
    let corrupt = dir.path().join("corrupt.ts");
    let cut = 1_200_000;
    let mut bytes = demo_bytes.clone();
    bytes[cut..cut + 1000].fill(0xff);
    std::fs::write(&corrupt, &bytes).unwrap();
    let bad_offset = cut.next_multiple_of(188);

    let rejects = server.metric("isochron_admission_rejects_total");
    for (target, file, code, needle) in [
        ("big?rate=40M", &d, 503, "not admitted: not enough disk bandwidth"),
        ("norate", &d, 400, "`rate`"),
        ("badrate?rate=fast", &d, 400, "`rate`"),
        ("badpeak?rate=4M&peak=1M", &d, 400, "`peak`"),
        ("bad%20name?rate=1M", &d, 400, "invalid object name"),
        ("demo?rate=1M", &d, 409, "already exists"),
        ("dup?rate=1M", &d, 409, "in progress"),
        ("text?rate=1M", &text, 422, "at offset 0 is not the MPEG-TS sync byte"),
        ("corrupt?rate=8M", &corrupt, 422, &format!("at offset {bad_offset} ")),
    ] {
        let put = put(&server, target, file, &[]);
        assert_eq!(put.code, code, "{target}: {}", put.body);
        let error = put.json()["error"].as_str().unwrap().to_string();
        assert!(error.contains(needle), "{target}: {error}");
        if code == 400 || code == 409 {
            // Refused before the body was read: the answer to `Expect: 100-continue`.
            assert_eq!(put.uploaded, 0, "{target}: the body was sent before its refusal");
        }
        eprintln!("{target} -> {code} {error} ({} bytes sent)", put.uploaded);
    }
    assert_eq!(server.metric("isochron_admission_rejects_total"), rejects + 1.0);

    // A client that goes away mid-body: nothing is committed, the bandwidth comes back.
    let gone = put(&server, "gone?rate=1M", &d, &["--limit-rate", "100k", "--max-time", "2"]);
    // curl reports the last status it saw: none, or 100 Continue.
    assert!(gone.code == 0 || gone.code == 100, "curl should have given up: {}", gone.body);

    assert_eq!(slow.join().unwrap(), "201");
    let got = player.join().unwrap();
    assert_same_bytes(&got, &demo_bytes, "demo played during the refused recordings");

    let deadline = Instant::now() + Duration::from_secs(10);
    while server.metric("isochron_recordings") != 0.0 {
        assert!(Instant::now() < deadline, "a recording is still in progress");
        std::thread::sleep(Duration::from_millis(100));
    }
    let objects: serde_json::Value =
        serde_json::from_str(&server.http_get("/api/v1/objects")).unwrap();
    let names: Vec<&str> =
        objects.as_array().unwrap().iter().map(|o| o["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["demo", "dup"]);
    assert!(server.metric("isochron_recordings_failed_total") >= 3.0);
    server.stop();

    // No block of a failed recording is left behind.
    let fsck = cli(&["fsck"], &data);
    let report = String::from_utf8_lossy(&fsck.stdout);
    assert!(report.contains("clean"), "{report}");
    let dup = dir.path().join("dup.ts");
    cli(&["cat", "dup", "-o", dup.to_str().unwrap()], &data);
    assert_same_bytes(&std::fs::read(&dup).unwrap(), &demo_bytes, "isochron cat dup");
}
