//! Nobody locks others out (`[rtsp] max_sessions_per_client`, `max_connections_per_client`,
//! `request_timeout_s`): a hostile client elsewhere on the network sends SETUP after SETUP on
//! one connection and keeps it open, opens connections up to its cap, and trickles half a
//! request; from each cap on it gets 503 with `Retry-After`, the trickle gets 408, and a real
//! player from another address still plays the object to the end, byte for byte. The same
//! over HTTP (`[http] max_connections_per_client`, the header timeout). At full size: 20,000
//! idle connections and 1,000 SETUPs from one address, and the server's memory afterwards. And
//! the other ways a client could hold what is not its own: `destination=` naming another host,
//! a UDP client that vanishes mid-stream, clients that vanish after the end.

#![allow(clippy::print_stderr)] // a report of what was measured

use crate::common;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{ServeOptions, Server, assert_same_bytes, demo, run, tempdir};
use isochron_loadgen::testbed::Testbed;

/// Sends `n` SETUPs (each making a new session) on one connection; returns the statuses, the
/// Retry-After seen, and the connection (kept open: its sessions stay).
fn setups(server: SocketAddr, n: usize) -> (Vec<u16>, bool, TcpStream) {
    let mut s = TcpStream::connect(server).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut statuses = Vec::new();
    let mut retry_after = false;
    for i in 0..n {
        let req = format!(
            "SETUP rtsp://{server}/demo RTSP/1.0\r\nCSeq: {i}\r\nTransport: RTP/AVP;unicast;client_port={}-{}\r\n\r\n",
            20_000 + 2 * i,
            20_001 + 2 * i
        );
        s.write_all(req.as_bytes()).unwrap();
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        statuses.push(line.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0));
        let mut len = 0usize;
        loop {
            let mut h = String::new();
            r.read_line(&mut h).unwrap();
            let lower = h.to_ascii_lowercase();
            if lower.starts_with("retry-after:") {
                retry_after = true;
            }
            if let Some(v) = lower.strip_prefix("content-length:") {
                len = v.trim().parse().unwrap_or(0);
            }
            if h == "\r\n" || h.is_empty() {
                break;
            }
        }
        let mut body = vec![0; len];
        r.read_exact(&mut body).unwrap();
    }
    (statuses, retry_after, s)
}

/// One request on `demo` with `headers`, answered; returns the status and the session id
/// (empty when there is none).
fn request(
    s: &mut TcpStream,
    r: &mut BufReader<TcpStream>,
    method: &str,
    server: SocketAddr,
    headers: &[(&str, &str)],
) -> (u16, String) {
    let (status, session, _) = request_to(s, r, method, &format!("rtsp://{server}/demo"), headers);
    (status, session)
}

/// One request on `url` with `headers`, answered; returns the status, the session id (empty
/// when there is none) and the response's header lines.
fn request_to(
    s: &mut TcpStream,
    r: &mut BufReader<TcpStream>,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
) -> (u16, String, String) {
    static CSEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    let cseq = CSEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut req = format!("{method} {url} RTSP/1.0\r\nCSeq: {cseq}\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let status = line.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let (mut session, mut len, mut head) = (String::new(), 0usize, String::new());
    loop {
        let mut h = String::new();
        r.read_line(&mut h).unwrap();
        head.push_str(&h);
        if let Some(v) = h.strip_prefix("Session: ") {
            session = v.split(';').next().unwrap().trim().to_owned();
        }
        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
        if h == "\r\n" || h.is_empty() {
            break;
        }
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body).unwrap();
    (status, session, head)
}

#[test]
fn one_client_cannot_fill_the_session_table() {
    let _load = common::load(common::weight::HEAVY);
    if !common::namespaces_or_skip("limits") {
        return;
    }
    common::require("gst-launch-1.0");
    let bed = Testbed::new("isochron_limits").expect("testbed");
    let hostile = bed.add_host("hostile").unwrap();
    let player = bed.add_host("player").unwrap();
    let dir = tempdir();
    let config = "[rtsp]\nmax_sessions = 40\nmax_sessions_per_client = 30\n\
                  max_connections_per_client = 4\nrequest_timeout_s = 2\n\n\
                  [http]\nmax_connections_per_client = 3\n";
    let server = Server::start(&dir.path().join("store"), ServeOptions::everywhere(Some(config)));
    let addr = SocketAddr::new(bed.host_ip().into(), server.rtsp.port());
    let (statuses, retry_after, conn) =
        hostile.in_namespace(move || setups(addr, 35)).expect("the hostile client ran");
    // Three more connections from the same address fill its cap; the fifth is refused at
    // once. A connection that trickles half a request is answered 408 and closed.
    let (fifth, slow) = hostile
        .in_namespace(move || {
            let idle: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(addr).unwrap()).collect();
            let mut fifth = TcpStream::connect(addr).unwrap();
            fifth.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut got = String::new();
            let _ = fifth.read_to_string(&mut got);
            drop(idle);
            // The server gives their slots back once it sees them close.
            std::thread::sleep(Duration::from_millis(500));
            let mut slow = TcpStream::connect(addr).unwrap();
            slow.write_all(b"OPTIONS rtsp://x/ RTSP/1.0\r\nCSeq: 1\r\n").unwrap();
            slow.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let t = Instant::now();
            let mut answer = String::new();
            let _ = slow.read_to_string(&mut answer);
            (got, (answer, t.elapsed()))
        })
        .unwrap();
    assert!(fifth.starts_with("RTSP/1.0 503"), "{fifth:?}");
    assert!(fifth.contains("Retry-After"), "{fifth:?}");
    let (answer, after) = slow;
    assert!(answer.starts_with("RTSP/1.0 408"), "{answer:?}");
    assert!(after >= Duration::from_millis(1500) && after < Duration::from_secs(8), "{after:?}");
    // HTTP: three silent connections fill the client's cap, the fourth gets 503; a request
    // whose headers never end is cut off after the header timeout.
    let http = SocketAddr::new(bed.host_ip().into(), server.http.port());
    let (fourth, cut_after) = hostile
        .in_namespace(move || {
            let idle: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(http).unwrap()).collect();
            let mut fourth = TcpStream::connect(http).unwrap();
            fourth.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut got = String::new();
            let _ = fourth.read_to_string(&mut got);
            drop(idle);
            // The server gives their slots back once it sees them close.
            std::thread::sleep(Duration::from_millis(500));
            let mut slow = TcpStream::connect(http).unwrap();
            slow.write_all(b"GET /api/v1/objects HTTP/1.1\r\nHost: x\r\n").unwrap();
            slow.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let t = Instant::now();
            let _ = slow.read_to_string(&mut String::new());
            (got, t.elapsed())
        })
        .unwrap();
    assert!(fourth.starts_with("HTTP/1.1 503"), "{fourth:?}");
    assert!(fourth.contains("Retry-After"), "{fourth:?}");
    assert!(cut_after < Duration::from_secs(20), "a trickled request held {cut_after:?}");
    let metrics = server.http_get("/metrics");
    assert!(
        metrics.contains("isochron_http_connections_refused_total{cap=\"per_client\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("isochron_rtsp_connections_refused_total{cap=\"per_client\"} 1"),
        "{metrics}"
    );
    let ok = statuses.iter().filter(|s| **s == 200).count();
    assert_eq!(ok, 30, "{statuses:?}");
    assert!(statuses[30..].iter().all(|s| *s == 503), "{statuses:?}");
    assert!(retry_after, "503 names when to retry");
    // The table has room for others: a player from another address plays to the end.
    let out = dir.path().join("player.ts");
    let (got, stderr) =
        common::gst_fetch_in(Some(&player), &format!("rtsp://{addr}/demo"), &out, "tcp");
    assert_same_bytes(
        &got,
        &std::fs::read(demo()).unwrap(),
        &format!("the other client ({stderr})"),
    );
    drop(conn);
}

/// Players that play to the end and vanish without TEARDOWN (a killed player, a dropped phone)
/// free their slots `session_timeout` after the end, not `paused_session_timeout`: with a table
/// of two, two such clients and then a third that finds room once their streams ended.
#[test]
fn clients_that_vanish_after_the_end_free_their_slots_by_liveness() {
    let _load = common::load(common::weight::PLAYER);
    common::require("ffprobe");
    let dir = tempdir();
    let config =
        "[rtsp]\nmax_sessions = 2\nsession_timeout_s = 20\npaused_session_timeout_s = 300\n";
    let server = Server::start(
        &dir.path().join("store"),
        ServeOptions { config: Some(config), ..ServeOptions::default() },
    );
    let addr = server.rtsp;
    let vanish = |i: usize| {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let transport =
            format!("RTP/AVP;unicast;client_port={}-{}", 30_000 + 2 * i, 30_001 + 2 * i);
        let (status, session) =
            request(&mut s, &mut r, "SETUP", addr, &[("Transport", &transport)]);
        assert_eq!(status, 200, "client {i}");
        let (status, _) = request(&mut s, &mut r, "PLAY", addr, &[("Session", &session)]);
        assert_eq!(status, 200, "client {i}");
        // Gone: no TEARDOWN, no RTCP.
    };
    vanish(0);
    vanish(1);
    let probe = || {
        let out = run(
            Command::new("ffprobe")
                .args(["-v", "error", "-rtsp_transport", "tcp", "-show_entries", "format=duration"])
                .arg(server.url("demo")),
            30,
        );
        out.status.success()
    };
    assert!(!probe(), "the table is full while the two streams play");
    // The demo lasts 12 s: the sessions end before their liveness runs out (20 s after the
    // PLAY, their last sign of life), and are reaped then, not 300 s after it.
    let t = Instant::now();
    while !probe() {
        assert!(t.elapsed() < Duration::from_secs(60), "the vanished clients' slots never freed");
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// A SETUP naming another host as `destination=` (RFC 2326 §12.39) cannot aim the stream at
/// it: the server sends to the address the request came from, and the other host, listening on
/// the very port named, receives nothing.
#[test]
fn a_setup_cannot_send_the_stream_to_another_host() {
    let _load = common::load(common::weight::LIGHT);
    if !common::namespaces_or_skip("destination=") {
        return;
    }
    let bed = Testbed::new("isochron_dest").expect("testbed");
    let client = bed.add_host("client").unwrap();
    let victim = bed.add_host("victim").unwrap();
    let dir = tempdir();
    let server = Server::start(
        &dir.path().join("store"),
        ServeOptions { rtsp: Some("0.0.0.0:0"), ..ServeOptions::default() },
    );
    let addr = SocketAddr::new(bed.host_ip().into(), server.rtsp.port());
    let listen = || {
        let s = std::net::UdpSocket::bind("0.0.0.0:31000").unwrap();
        s.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
        s
    };
    let target = victim.in_namespace(listen).unwrap();
    let count = |s: &std::net::UdpSocket, for_: Duration| {
        let (t, mut n, mut buf) = (Instant::now(), 0, [0u8; 2048]);
        while t.elapsed() < for_ {
            if s.recv(&mut buf).is_ok() {
                n += 1;
            }
        }
        n
    };
    let victim_ip = victim.ip;
    let got = client
        .in_namespace(move || {
            let own = listen();
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut r = BufReader::new(s.try_clone().unwrap());
            let transport =
                format!("RTP/AVP;unicast;destination={victim_ip};client_port=31000-31001");
            let (status, session) =
                request(&mut s, &mut r, "SETUP", addr, &[("Transport", &transport)]);
            assert_eq!(status, 200);
            let (status, _) = request(&mut s, &mut r, "PLAY", addr, &[("Session", &session)]);
            assert_eq!(status, 200);
            let n = count(&own, Duration::from_secs(3));
            let _ = request(&mut s, &mut r, "TEARDOWN", addr, &[("Session", &session)]);
            n
        })
        .unwrap();
    assert!(got > 100, "the client itself receives the stream: {got} packets");
    assert_eq!(count(&target, Duration::from_secs(1)), 0, "nothing reached the other host");
    drop(server);
    drop(bed);
}

/// A UDP client that sent RTCP and then fell silent is gone: its stream stops
/// `rtsp.silence_timeout_s` after its last report, well before `session_timeout_s`, and its
/// slot is free.
#[test]
fn a_playing_udp_client_that_falls_silent_is_stopped_early() {
    let _load = common::load(common::weight::PLAYER);
    let vbr = common::fixture("vbr20");
    let config = "[rtsp]\nsession_timeout_s = 60\nsilence_timeout_s = 5\n";
    let (_dir, server) = common::serve_fixtures(&[&vbr], Some(config));
    let addr = server.rtsp;
    let rtp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = rtp.local_addr().unwrap().port();
    let rtcp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    rtp.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let url = format!("rtsp://{addr}/vbr20");
    let transport = format!("RTP/AVP;unicast;client_port={port}-{}", port + 1);
    let (status, session, head) =
        request_to(&mut s, &mut r, "SETUP", &url, &[("Transport", &transport)]);
    assert_eq!(status, 200, "{head}");
    let ssrc = head
        .split(';')
        .find_map(|p| p.trim().strip_prefix("ssrc="))
        .and_then(|v| u32::from_str_radix(v.trim(), 16).ok())
        .unwrap_or_else(|| panic!("no ssrc in {head}"));
    let (status, _, _) = request_to(&mut s, &mut r, "PLAY", &url, &[("Session", &session)]);
    assert_eq!(status, 200);
    // One receiver report naming the stream (RFC 3550 §6.4.2), then nothing.
    let mut rr = vec![0x81, 201, 0, 7, 0, 0, 0, 9];
    rr.extend_from_slice(&ssrc.to_be_bytes());
    rr.extend_from_slice(&[0; 20]);
    let reported = Instant::now();
    rtcp.send_to(&rr, ("127.0.0.1", server.rtp_port + 1)).unwrap();
    let (mut last, mut buf, mut n) = (reported, [0u8; 2048], 0u64);
    while reported.elapsed() < Duration::from_secs(20) {
        if rtp.recv(&mut buf).is_ok() {
            n += 1;
            last = Instant::now();
        }
    }
    let stopped = last.duration_since(reported);
    assert!(n > 100, "{n} packets");
    assert!(
        stopped >= Duration::from_secs(4) && stopped < Duration::from_secs(9),
        "the stream stopped {stopped:?} after the last report (silence_timeout 5 s, session \
         timeout 60 s); log:\n{}",
        server.log()
    );
    let (status, _, _) =
        request_to(&mut s, &mut r, "GET_PARAMETER", &url, &[("Session", &session)]);
    assert_eq!(status, 454, "the session is gone");
}

/// Opens argv[3] TCP connections to argv[1]:argv[2], prints how many it holds and how many
/// seconds opening them took, and holds them.
const HOLD: &str = "import resource, socket, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
held = []
start = time.monotonic()
for _ in range(int(sys.argv[3])):
    try:
        held.append(socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5))
    except OSError:
        pass
print(len(held), time.monotonic() - start, flush=True)
time.sleep(3600)
";

/// The hostile client at full size: 10,000 idle RTSP and 10,000 idle HTTP connections
/// and 1,000 SETUPs from one address. It holds its caps (the rest are refused with 503; the
/// connections admitted that say nothing are closed at the request timeout, which frees their
/// slots for the next ones of a flood that lasts longer than that), a
/// player on another address plays byte-exact meanwhile, and once the hostile client lets go the
/// server's resident memory is back within 20 % of where it was before (within 60 s).
#[test]
fn twenty_thousand_idle_connections_lock_nobody_out_and_leave_no_memory_behind() {
    let _load = common::load(common::weight::HEAVY);
    if !common::namespaces_or_skip("20,000 connections") {
        return;
    }
    common::require("gst-launch-1.0");
    common::raise_open_files();
    let bed = Testbed::new("isochron_flood").expect("testbed");
    let hostile = bed.add_host("hostile").unwrap();
    let player = bed.add_host("player").unwrap();
    let dir = tempdir();
    let server = Server::start(&dir.path().join("store"), ServeOptions::everywhere(None));
    let rtsp = SocketAddr::new(bed.host_ip().into(), server.rtsp.port());
    let http = SocketAddr::new(bed.host_ip().into(), server.http.port());
    let want = std::fs::read(demo()).unwrap();
    let play = |name: &str| {
        let out = dir.path().join(name);
        let (got, stderr) =
            common::gst_fetch_in(Some(&player), &format!("rtsp://{rtsp}/demo"), &out, "tcp");
        assert_same_bytes(&got, &want, &format!("the other client ({stderr})"));
    };
    // Warm: the object's blocks in the cache, every thread started.
    play("warm.ts");
    let before = common::rss_kib(server.pid());
    // Two processes of the hostile client (each has its own open-files limit) hold 10,000
    // idle connections each, to RTSP and to HTTP, until they are killed.
    let flood = |to: SocketAddr| {
        let mut child = hostile
            .command("python3")
            .args(["-c", HOLD, &to.ip().to_string(), &to.port().to_string(), "10000"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let mut words = line.split_whitespace();
        let held = words.next().and_then(|w| w.parse::<usize>().ok()).unwrap_or(0);
        let secs = words.next().and_then(|w| w.parse::<f64>().ok()).unwrap_or(0.0);
        (child, (held, secs))
    };
    let (mut rtsp_flood, (rtsp_held, rtsp_secs)) = flood(rtsp);
    let (mut http_flood, (http_held, http_secs)) = flood(http);
    let statuses = hostile
        .in_namespace(move || {
            // The held ones that said nothing are answered 408 and closed by the server after
            // rtsp.request_timeout_s (HTTP: its header timeout), which frees the client's
            // connection slots for its SETUPs.
            std::thread::sleep(Duration::from_secs(11));
            setups(rtsp, 1000)
        })
        .expect("the hostile client ran");
    let (statuses, _, conn) = statuses;
    let during = common::rss_kib(server.pid());
    play("during.ts");
    let ok = statuses.iter().filter(|s| **s == 200).count();
    assert!(ok <= 256, "one client holds at most max_sessions_per_client: {ok}");
    let metrics = server.http_get("/metrics");
    let refused = |proto: &str| {
        metrics
            .lines()
            .find_map(|l| {
                l.strip_prefix(&format!(
                    "isochron_{proto}_connections_refused_total{{cap=\"per_client\"}} "
                ))?
                .parse::<f64>()
                .ok()
            })
            .unwrap_or(0.0)
    };
    eprintln!(
        "{rtsp_held} RTSP connections opened in {rtsp_secs:.1} s, {http_held} HTTP in \
         {http_secs:.1} s; RSS before {before} KiB, during {during} KiB"
    );
    // The client holds at most its cap at once (300 RTSP, 64 HTTP); each 10 s request timeout
    // that passes while it opens frees the idle ones for as many more. Everything else it opens
    // is refused.
    for (proto, held, secs, cap) in
        [("rtsp", rtsp_held, rtsp_secs, 300.0), ("http", http_held, http_secs, 64.0)]
    {
        let admitted = cap * (1.0 + (secs / 10.0).floor());
        let least = held as f64 - admitted;
        assert!(
            refused(proto) >= least && least >= held as f64 / 2.0,
            "{proto}: {} refused of {held} opened in {secs:.1} s (at most {admitted} admitted)\n{metrics}",
            refused(proto)
        );
    }
    assert_eq!(rtsp_held + http_held, 20_000, "every connection was accepted by the kernel");
    for c in [&mut rtsp_flood, &mut http_flood] {
        let _ = c.kill();
        let _ = c.wait();
    }
    drop(conn);
    // The server gives memory back within its trim interval (30 s): wait for that, at most 60 s.
    let released = Instant::now();
    let mut after = common::rss_kib(server.pid());
    while after * 5 > before * 6 && released.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_secs(1));
        after = common::rss_kib(server.pid());
    }
    let waited = released.elapsed().as_secs();
    eprintln!("RSS {waited} s after the release: {after} KiB");
    assert!(
        after * 5 <= before * 6,
        "RSS {after} KiB {waited} s after the release, {before} KiB before (during: {during} KiB)"
    );
    drop(server);
    drop(bed);
}
