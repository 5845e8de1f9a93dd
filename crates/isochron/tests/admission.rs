//! Admission control end to end (issue 4, XTREAM Eq. 1–3): a store on one emulated slow disk,
//! whose model is its profile, served with `admission = "aggressive-avg"`. PLAYs are admitted
//! until the disk's real-time share is full; the next one — from the loadgen client and from
//! ffmpeg — gets `453 Not Enough Bandwidth`, the reason is logged and counted, every admitted
//! stream plays to the end byte-exact with no missed deadline, and a TEARDOWN frees room again.

#![allow(clippy::print_stderr)] // the measured numbers are reported on stderr

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use isochron_loadgen::{Client, Transport};

/// DESCRIBE + SETUP (TCP), then a raw PLAY; returns the client, the PLAY status, and when the
/// PLAY was sent.
async fn try_play(url: &str) -> (Client, u16, Instant) {
    let mut c = Client::connect(url).await.unwrap();
    c.describe().await.unwrap();
    let r = c.setup(Transport::Tcp).await.unwrap();
    assert_eq!(u16::from(r.status()), 200, "SETUP");
    let at = Instant::now();
    let url = c.aggregate_url();
    let r = c.request("PLAY", &url, &[]).await.unwrap();
    (c, u16::from(r.status()), at)
}

/// The demo on one emulated slow disk whose model is its profile, served with
/// `admission = "aggressive-avg"`: 1 MiB blocks taking 20 ms + 1 s each, so the demo (1.1 Mb/s)
/// costs about 0.13 s of disk time per second and a handful of streams fill the 80 % real-time
/// share.
fn slow_disk_server() -> (tempfile::TempDir, Server) {
    let dir = tempdir();
    let data = dir.path().join("store");
    let disk = format!("{},seek_ms=20,rate_mib_s=1", dir.path().join("d0").display());
    demo_store_on(&data, &disk);
    let config = "[sched]\nadmission = \"aggressive-avg\"\n";
    let server =
        Server::start(&data, ServeOptions { config: Some(config), ..ServeOptions::default() });
    (dir, server)
}

#[test]
fn plays_past_the_disk_profile_get_453_and_the_admitted_ones_play_clean() {
    require("ffmpeg");
    let (_dir, server) = slow_disk_server();
    let url = server.url("demo");
    let src = std::fs::read(demo()).unwrap();
    let rt = runtime();

    // Admit until the first 453.
    let (admitted, mut rejected) = rt.block_on(async {
        let mut admitted = Vec::new();
        for _ in 0..64 {
            let (c, status, at) = try_play(&url).await;
            match status {
                200 => admitted.push((c, at)),
                453 => return (admitted, c),
                s => panic!("PLAY answered {s}; log:\n{}", server.log()),
            }
        }
        panic!("64 streams admitted on a disk that holds a handful; log:\n{}", server.log())
    });
    let n = admitted.len();
    eprintln!("admitted {n} streams; the next PLAY got 453");
    assert!(n >= 2, "only {n} streams admitted");
    assert!(
        server.log().contains("admission: rejected"),
        "the rejection and its reason are logged:\n{}",
        server.log()
    );

    // A real player is refused too, with the status in its error.
    let out = run(
        Command::new("ffmpeg")
            .args(["-nostdin", "-v", "error", "-rtsp_transport", "tcp", "-i", &url])
            .args(["-t", "1", "-f", "null", "-"]),
        30,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("453"), "ffmpeg was not refused: {err}");

    // The sessions API reports each stream's scheduler counters.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let v: serde_json::Value =
            serde_json::from_str(&server.http_get("/api/v1/sessions")).expect("sessions JSON");
        let list = v.as_array().expect("a list of sessions");
        let playing: Vec<_> = list.iter().filter(|s| s["state"] == "playing").collect();
        assert_eq!(playing.len(), n, "playing sessions: {v}");
        assert!(playing.iter().all(|s| s["missed_deadlines"] == 0), "{v}");
        if playing.iter().all(|s| s["blocks_delivered"].as_u64() >= Some(1)) {
            break;
        }
        assert!(Instant::now() < deadline, "no blocks delivered: {v}");
        std::thread::sleep(Duration::from_millis(200));
    }

    // Every admitted stream plays to the end, byte-exact.
    let results = rt.block_on(async {
        let tasks: Vec<_> = admitted
            .into_iter()
            .map(|(mut c, at)| {
                tokio::spawn(async move {
                    let got = c.collect(Duration::from_secs(5), Duration::from_secs(60)).await;
                    let _ = c.teardown().await;
                    (got, at)
                })
            })
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    });
    let mut first_packet_ms = Vec::new();
    for (i, (got, at)) in results.into_iter().enumerate() {
        let got = got.unwrap_or_else(|e| panic!("stream {i}: {e}"));
        assert!(got.bye, "stream {i}: no BYE");
        assert_same_bytes(&got.payload(), &src, &format!("admitted stream {i}"));
        first_packet_ms.push(got.packets[0].at.duration_since(at).as_secs_f64() * 1e3);
    }
    eprintln!("PLAY → first RTP packet, ms, in admission order: {first_packet_ms:.0?}");
    assert_eq!(server.metric("isochron_missed_deadlines_total"), 0.0);
    assert!(server.metric("isochron_admission_rejects_total") >= 2.0);
    assert_eq!(server.metric("isochron_admission_accepts_total"), n as f64);

    // The admitted streams are gone: the refused client's PLAY now succeeds.
    rt.block_on(async {
        let url = rejected.aggregate_url();
        let r = rejected.request("PLAY", &url, &[]).await.unwrap();
        assert_eq!(u16::from(r.status()), 200, "PLAY after the others left");
        let got = rejected.collect(Duration::from_secs(5), Duration::from_secs(60)).await.unwrap();
        assert_same_bytes(&got.payload(), &src, "stream admitted after the others left");
        rejected.teardown().await.unwrap();
    });
}

/// A recording that stalls gives its reservation back at once (`recorder::STALL`), so a PLAY
/// it crowded out is admitted meanwhile; when its data comes again it asks anew, and with the
/// room taken it ends with 503 rather than overload the disk.
#[test]
fn a_stalled_recording_gives_its_room_back_and_asks_again() {
    use std::io::{Read as _, Write as _};
    // A 6 Mb/s recording takes about 0.73 s of the disk's 0.8 s real-time share per second,
    // and the demo's 0.13 s no longer fits beside it.
    let (_dir, server) = slow_disk_server();
    let url = server.url("demo");
    let src = std::fs::read(demo()).unwrap();
    let mut up = std::net::TcpStream::connect(server.http).unwrap();
    let head = "PUT /api/v1/record/stalled?rate=6M HTTP/1.1\r\nHost: x\r\n\
                Transfer-Encoding: chunked\r\n\r\n";
    up.write_all(head.as_bytes()).unwrap();
    let chunk = |up: &mut std::net::TcpStream, bytes: &[u8]| {
        up.write_all(format!("{:x}\r\n", bytes.len()).as_bytes()).unwrap();
        up.write_all(bytes).unwrap();
        up.write_all(b"\r\n").unwrap();
    };
    let half = src.len() / 2 / 188 * 188;
    chunk(&mut up, &src[..half]);
    let rt = runtime();
    // Recording: no room for the play.
    std::thread::sleep(Duration::from_millis(500));
    let (_c, status, _) = rt.block_on(try_play(&url));
    assert_eq!(status, 453, "the recording holds the disk; log:\n{}", server.log());
    // Stalled for longer than STALL: its room is free, the play is admitted and plays.
    std::thread::sleep(Duration::from_secs(4));
    assert!(server.log().contains("recording stalled; reservation released"), "{}", server.log());
    let (player, status, _) = rt.block_on(try_play(&url));
    assert_eq!(status, 200, "log:\n{}", server.log());
    // The recording's data comes again: no room any more, so it ends with 503 and leaves
    // nothing behind.
    chunk(&mut up, &src[half..]);
    up.write_all(b"0\r\n\r\n").unwrap();
    up.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut resp = String::new();
    let _ = up.read_to_string(&mut resp);
    assert!(resp.starts_with("HTTP/1.1 503"), "{resp}");
    assert!(!server.http_get("/api/v1/objects").contains("\"stalled\""));
    drop(player);
}
