//! Protocol behaviour seen from the wire, with isochron's own RTSP/RTP client as an independent
//! oracle (`isochron_loadgen::Client`): seek accuracy, pause/resume continuity, pacing, RTCP,
//! concurrency, hostile input and session lifetimes.

#![allow(clippy::print_stderr)] // tests report measurements on stderr

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use isochron_loadgen::{Client, Collected, Transport};

fn serve(extra: &[&Path], config: Option<&str>) -> (tempfile::TempDir, Server) {
    serve_fixtures(extra, config)
}

/// The 27 MHz PCR of a TS packet, if it carries one (ISO/IEC 13818-1 §2.4.3.4).
fn pcr(pkt: &[u8]) -> Option<u64> {
    let has_af = pkt[3] & 0x20 != 0;
    if !has_af || pkt[4] < 7 || pkt[5] & 0x10 == 0 {
        return None;
    }
    let b = &pkt[6..12];
    let base = (u64::from(b[0]) << 25)
        | (u64::from(b[1]) << 17)
        | (u64::from(b[2]) << 9)
        | (u64::from(b[3]) << 1)
        | (u64::from(b[4]) >> 7);
    let ext = (u64::from(b[4] & 1) << 8) | u64::from(b[5]);
    Some(base * 300 + ext)
}

fn first_pcr(ts: &[u8]) -> Option<u64> {
    ts.chunks_exact(188).find_map(pcr)
}

async fn play(
    url: &str,
    transport: Transport,
    range: Option<&str>,
) -> (Client, isochron_loadgen::PlayInfo) {
    play_with(url, transport, range, true).await
}

/// Plays `url`; without `rtcp` the client sends no RTCP receiver reports.
async fn play_with(
    url: &str,
    transport: Transport,
    range: Option<&str>,
    rtcp: bool,
) -> (Client, isochron_loadgen::PlayInfo) {
    let mut c = Client::connect(url).await.unwrap();
    if !rtcp {
        c.without_rtcp();
    }
    c.describe().await.unwrap();
    let r = c.setup(transport).await.unwrap();
    assert_eq!(u16::from(r.status()), 200, "SETUP");
    let info = c.play(range).await.unwrap();
    (c, info)
}

#[test]
fn seek_starts_within_a_second_of_the_requested_time() {
    let _load = load(weight::PLAYER);
    let vbr = fixture("vbr20");
    let (_d, server) = serve(&[&vbr], None);
    let src = std::fs::read(&vbr).unwrap();
    let src_pcr0 = first_pcr(&src).unwrap();
    let rt = runtime();
    for (x, transport) in [(3.0, Transport::Tcp), (7.3, Transport::Udp), (14.7, Transport::Tcp)] {
        let url = server.url("vbr20");
        let got = rt.block_on(async move {
            let (mut c, info) = play(&url, transport, Some(&format!("npt={x}-"))).await;
            let mut packets = Vec::new();
            while let Some(i) = c.next(Duration::from_secs(3)).await {
                if let isochron_loadgen::Incoming::Rtp(p) = i {
                    packets.push(p);
                    if packets.len() >= 200 {
                        break;
                    }
                }
            }
            c.teardown().await.unwrap();
            (packets, info)
        });
        let (packets, info) = got;
        assert!(!packets.is_empty(), "no packets after seek to {x}");
        assert_eq!(
            info.seq,
            Some(packets[0].header.sequence),
            "RTP-Info seq is the first packet's"
        );
        let bytes: Vec<u8> = packets.iter().flat_map(|p| p.payload.clone()).collect();
        let pcr = first_pcr(&bytes).expect("a PCR in the first 200 packets");
        let t = (pcr.wrapping_sub(src_pcr0)) as f64 / 27e6;
        assert!((t - x).abs() <= 1.0, "seek to {x}: first PCR at {t:.3} s");
        // The stream from the seek point is the file's bytes from a packet boundary on.
        // PAT/PMT repeat in the file: match a window of 64 packets, not just the first.
        let window = &bytes[..188 * 64];
        let start = (0..src.len() / 188)
            .find(|&i| src[i * 188..].starts_with(window))
            .expect("the received stream is a run of source packets");
        assert_same_bytes(&bytes, &src[start * 188..start * 188 + bytes.len()], "after seek");
        let range = info.range.unwrap_or_default();
        let npt: f64 = range.trim_start_matches("npt=").split('-').next().unwrap().parse().unwrap();
        assert!((npt - x).abs() <= 1.0 && npt <= x + 1e-3, "Range {range} for a seek to {x}");
    }
}

/// Receives RTP for `d`, appending to `all`.
async fn drain(c: &mut Client, all: &mut Collected, d: Duration) {
    let until = tokio::time::Instant::now() + d;
    while let Some(i) = c.next(until.saturating_duration_since(tokio::time::Instant::now())).await {
        if let isochron_loadgen::Incoming::Rtp(p) = i {
            all.packets.push(p);
        }
    }
}

#[test]
fn sequence_numbers_continue_across_seeks() {
    let _load = load(weight::PLAYER);
    let vbr = fixture("vbr20");
    let (_d, server) = serve(&[&vbr], None);
    let url = server.url("vbr20");
    let all = runtime().block_on(async move {
        let (mut c, first) = play(&url, Transport::Udp, None).await;
        let mut all = Collected::default();
        drain(&mut c, &mut all, Duration::from_secs(1)).await;
        // A new range while playing: an immediate seek (RFC 2326 §10.5).
        let agg = c.aggregate_url();
        let r = c.request("PLAY", &agg, &[("Range", "npt=12-")]).await.unwrap();
        assert_eq!(u16::from(r.status()), 200);
        drain(&mut c, &mut all, Duration::from_secs(1)).await;
        c.pause().await.unwrap();
        drain(&mut c, &mut all, Duration::from_millis(300)).await;
        let info = c.play(Some("npt=5-")).await.unwrap();
        let before = all.packets.last().unwrap().header.sequence;
        assert_eq!(info.seq, Some(before.wrapping_add(1)), "RTP-Info after PAUSE + seek");
        drain(&mut c, &mut all, Duration::from_secs(1)).await;
        c.teardown().await.unwrap();
        assert_eq!(first.seq, Some(all.packets[0].header.sequence));
        all
    });
    all.check_contiguous().unwrap_or_else(|e| panic!("across seeks: {e}"));
    assert!(all.packets.len() > 300);
}

#[test]
fn pause_then_play_resumes_with_no_missing_or_repeated_packet() {
    let _load = load(weight::PLAYER);
    let (_d, server) = serve(&[], None);
    let src = std::fs::read(demo()).unwrap();
    let rt = runtime();
    for transport in [Transport::Udp, Transport::Tcp] {
        let url = server.url("demo");
        let (all, resumed_seq, quiet) = rt.block_on(async move {
            let (mut c, _) = play(&url, transport, None).await;
            let mut all = Collected::default();
            let until = tokio::time::Instant::now() + Duration::from_secs(3);
            while let Some(i) = c.next(until - tokio::time::Instant::now()).await {
                if let isochron_loadgen::Incoming::Rtp(p) = i {
                    all.packets.push(p);
                }
            }
            c.pause().await.unwrap();
            // Packets already on the wire when PAUSE was answered still arrive; then silence.
            while let Some(i) = c.next(Duration::from_millis(300)).await {
                if let isochron_loadgen::Incoming::Rtp(p) = i {
                    all.packets.push(p);
                }
            }
            let quiet = c.next(Duration::from_millis(1500)).await.is_none();
            let info = c.play(None).await.unwrap();
            let rest = c.collect(Duration::from_secs(5), Duration::from_secs(30)).await.unwrap();
            assert!(rest.bye, "BYE at the end");
            all.packets.extend(rest.packets);
            c.teardown().await.unwrap();
            (all, info.seq, quiet)
        });
        assert!(quiet, "{transport:?}: packets kept coming while paused");
        all.check_contiguous().unwrap_or_else(|e| panic!("{transport:?}: {e}"));
        assert!(resumed_seq.is_some());
        assert_same_bytes(&all.payload(), &src, &format!("{transport:?} across a pause"));
    }
}

#[test]
fn a_hundred_concurrent_sessions_are_all_byte_exact() {
    let _load = load(weight::HEAVY);
    let clip = fixture("rate5m");
    let (_d, server) = serve(&[&clip], None);
    let src = std::fs::read(&clip).unwrap();
    let url = server.url("rate5m");
    let results = runtime().block_on(async move {
        let mut tasks = Vec::new();
        for i in 0..100 {
            let url = url.clone();
            let transport = if i % 2 == 0 { Transport::Udp } else { Transport::Tcp };
            tasks.push(tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(20 * i)).await;
                let (mut c, _) = play(&url, transport, None).await;
                let got = c.collect(Duration::from_secs(5), Duration::from_secs(60)).await;
                let _ = c.teardown().await;
                (i, transport, got)
            }));
        }
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    });
    let mut failures = Vec::new();
    for (i, transport, got) in results {
        match got {
            Ok(c) if c.payload() == src && c.bye => {}
            Ok(c) => failures.push(format!(
                "session {i} ({transport:?}): {} of {} bytes, bye {}",
                c.payload().len(),
                src.len(),
                c.bye
            )),
            Err(e) => failures.push(format!("session {i} ({transport:?}): {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} sessions failed:\n{}\n{}",
        failures.len(),
        failures.join("\n"),
        server.log()
    );
    let metrics = server.http_get("/metrics");
    let errors =
        metrics.lines().find_map(|l| l.strip_prefix("isochron_send_errors_total ")).unwrap_or("?");
    assert_eq!(errors, "0", "kernel refused datagrams");
}

/// Malformed and random requests, from a seeded generator.
fn hostile_requests(n: usize) -> Vec<Vec<u8>> {
    let mut rng = isochron_base::mix::SplitMix64::new(0x15_0C_4A_05);
    let good =
        b"DESCRIBE rtsp://127.0.0.1/demo RTSP/1.0\r\nCSeq: 2\r\nAccept: application/sdp\r\n\r\n";
    let shapes: &[&[u8]] = &[
        b"\r\n\r\n",
        b"DESCRIBE\r\n\r\n",
        b"DESCRIBE rtsp://127.0.0.1/demo\r\nCSeq: 1\r\n\r\n",
        b"DESCRIBE rtsp://127.0.0.1/demo RTSP/1.0\r\n\r\n",
        b"DESCRIBE rtsp://127.0.0.1/demo RTSP/1.0\r\nCSeq: x\r\n\r\n",
        b"PLAY rtsp://127.0.0.1/demo RTSP/1.0\r\nCSeq: 3\r\nSession: nope\r\n\r\n",
        b"SETUP rtsp://127.0.0.1/demo/trackID=0 RTSP/1.0\r\nCSeq: 4\r\nTransport: RTP/AVP;multicast\r\n\r\n",
        b"SETUP rtsp://127.0.0.1/demo/trackID=0 RTSP/1.0\r\nCSeq: 4\r\nTransport: garbage\r\n\r\n",
        b"SETUP rtsp://127.0.0.1/../../etc/passwd RTSP/1.0\r\nCSeq: 4\r\nTransport: RTP/AVP/TCP;interleaved=0-1\r\n\r\n",
        b"PLAY rtsp://127.0.0.1/demo RTSP/1.0\r\nCSeq: 5\r\nRange: npt=abc-\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"OPTIONS * RTSP/1.0\r\nCSeq: 1\r\nContent-Length: -5\r\n\r\n",
        b"OPTIONS * RTSP/1.0\r\nCSeq: 1\r\nContent-Length: 99999999999\r\n\r\n",
        b"OPTIONS * RTSP/1.0\r\nCSeq: 1\r\nRequire: funky-feature\r\n\r\n",
        b"DESCRIBE rtsp://127.0.0.1/no-such-object RTSP/1.0\r\nCSeq: 9\r\n\r\n",
        b"\x00\x01\x02\x03\xff\xfe\r\n\r\n",
    ];
    (0..n)
        .map(|i| {
            let r = rng.next_u64();
            match i % 4 {
                0 => shapes[(r as usize) % shapes.len()].to_vec(),
                1 => {
                    // A valid request with its structure broken: a separator of the request
                    // line or of a header replaced by a control byte, or a line ending mangled.
                    let mut v = good.to_vec();
                    let seps: Vec<usize> = v
                        .iter()
                        .enumerate()
                        .filter(|&(i, &b)| {
                            (i < 38 && b == b' ') || b == b'\r' || (b == b':' && i > 38)
                        })
                        .map(|(i, _)| i)
                        .collect();
                    let at = seps[(r as usize) % seps.len()];
                    v[at] = [0u8, 1, 0x7f, b'\n', 0x1b][(rng.next_u64() % 5) as usize];
                    v
                }
                2 => {
                    // Random bytes, ending as a message would.
                    let len = 1 + (r % 300) as usize;
                    let mut v: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
                    v.extend_from_slice(b"\r\n\r\n");
                    v
                }
                _ => {
                    // A request line with random printable junk and an oversized header.
                    let junk: String =
                        (0..(r % 80)).map(|_| (33 + rng.next_u64() % 94) as u8 as char).collect();
                    let big = "x".repeat((rng.next_u64() % 100_000) as usize);
                    format!(
                        "{junk} rtsp://127.0.0.1/demo RTSP/1.0\r\nCSeq: 1\r\nX-Big: {big}\r\n\r\n"
                    )
                    .into_bytes()
                }
            }
        })
        .collect()
}

#[test]
fn hostile_requests_get_4xx_or_a_closed_connection_and_a_playing_session_stays_exact() {
    let _load = load(weight::PLAYER);
    require("gst-launch-1.0");
    let (dir, server) = serve(&[], None);
    let out_ts = dir.path().join("gst.ts");
    let url = server.url("demo");
    let player = {
        let out_ts = out_ts.clone();
        std::thread::spawn(move || {
            run(
                Command::new("gst-launch-1.0").args([
                    "-q",
                    "-e",
                    "rtspsrc",
                    &format!("location={url}"),
                    "protocols=tcp",
                    "!",
                    "rtpmp2tdepay",
                    "!",
                    "filesink",
                    &format!("location={}", out_ts.display()),
                ]),
                90,
            )
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    let requests = hostile_requests(1000);
    let mut statuses = std::collections::BTreeMap::<String, usize>::new();
    let started = Instant::now();
    for req in &requests {
        let mut s = TcpStream::connect(server.rtsp).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = s.write_all(req);
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut resp = Vec::new();
        let _ = s.read_to_end(&mut resp);
        let line = String::from_utf8_lossy(&resp).lines().next().unwrap_or("").to_string();
        let code = line.split_whitespace().nth(1).unwrap_or("closed").to_string();
        // 4xx, or a closed connection. Three 5xx codes are the RFC's answers to requests that
        // are well-formed but ask for what we do not speak: 501 for an unknown method, 505 for
        // an unsupported RTSP version, 551 for an unknown Require tag (RFC 2326 §7.1.1, §11.4).
        let ok = code == "closed"
            || code.starts_with('4')
            || ["501", "505", "551"].contains(&code.as_str());
        assert!(
            ok,
            "request {:?} got {line:?}",
            String::from_utf8_lossy(&req[..req.len().min(80)])
        );
        *statuses.entry(code).or_default() += 1;
    }
    eprintln!("1000 hostile requests in {:?}: {statuses:?}", started.elapsed());
    let _ = player.join().unwrap();
    let got = std::fs::read(&out_ts).unwrap_or_default();
    assert_same_bytes(&got, &std::fs::read(demo()).unwrap(), "the session playing meanwhile");
    // The server still serves new sessions.
    let out = run(
        Command::new("ffprobe")
            .args(["-v", "error", "-rtsp_transport", "tcp", "-show_entries", "format=duration"])
            .arg(server.url("demo")),
        30,
    );
    assert!(out.status.success());
}

#[test]
fn udp_sessions_are_reaped_without_liveness_and_kept_alive_by_requests() {
    let _load = load(weight::PLAYER);
    let vbr = fixture("vbr20");
    let (_d, server) = serve(&[&vbr], Some("[rtsp]\nsession_timeout_s = 5\n"));
    let url = server.url("vbr20");
    let sessions = || server.http_get("/api/v1/sessions");
    runtime().block_on(async {
        // Silent UDP client (no RTCP, no requests): reaped after the timeout; the packets stop.
        let (mut silent, _) = play_with(&url, Transport::Udp, None, false).await;
        let id = silent.session().unwrap().to_string();
        // Kept alive by GET_PARAMETER every 2 s (and no RTCP).
        let (mut chatty, _) = play_with(&url, Transport::Udp, None, false).await;
        let chatty_id = chatty.session().unwrap().to_string();
        // Interleaved: never times out while the connection is open.
        let (tcp, _) = play(&url, Transport::Tcp, None).await;
        let tcp_id = tcp.session().unwrap().to_string();
        // Kept alive by RTCP receiver reports alone.
        let (rtcp_only, _) = play(&url, Transport::Udp, None).await;
        let rtcp_id = rtcp_only.session().unwrap().to_string();
        let agg = chatty.aggregate_url();
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let r = chatty.request("GET_PARAMETER", &agg, &[]).await.unwrap();
            assert_eq!(u16::from(r.status()), 200);
        }
        let list = tokio::task::block_in_place(sessions);
        assert!(!list.contains(&id), "silent UDP session still listed: {list}");
        assert!(list.contains(&chatty_id), "kept-alive session reaped: {list}");
        assert!(list.contains(&tcp_id), "interleaved session reaped: {list}");
        assert!(list.contains(&rtcp_id), "session sending RTCP reaped: {list}");
        // The reaped session's packets stopped.
        while silent.next(Duration::from_millis(100)).await.is_some() {}
        assert!(silent.next(Duration::from_secs(1)).await.is_none(), "reaped session still sends");
        let r = silent.request("PLAY", &agg, &[]).await.unwrap();
        assert_eq!(u16::from(r.status()), 454, "a reaped session is unknown");
        // Closing the connection ends an interleaved session.
        drop(tcp);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let list = tokio::task::block_in_place(sessions);
        assert!(!list.contains(&tcp_id), "interleaved session outlived its connection: {list}");
        chatty.teardown().await.unwrap();
    });
}
