//! HTTP delivery with real clients: byte ranges (RFC 9110 §14) checked against the source with a
//! std client and curl, HLS (RFC 8216) read by ffmpeg and cut into segments that concatenate to
//! the source, the player page played by headless Chromium, and RTSP staying byte-exact while a
//! download runs.

#![allow(clippy::print_stderr)] // tests report measurements on stderr

use crate::common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use isochron_base::mix::SplitMix64;
use isochron_loadgen::Transport;

/// A parsed HTTP response.
struct Resp {
    status: u16,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

impl Resp {
    fn header(&self, k: &str) -> &str {
        self.headers.get(&k.to_ascii_lowercase()).map_or("", String::as_str)
    }
}

/// One HTTP/1.1 request with `Connection: close`; the body is read to EOF and checked against
/// `Content-Length`.
fn request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Resp {
    let mut s = TcpStream::connect(addr).expect("connect HTTP");
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read response");
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("end of headers");
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let mut lines = head.lines();
    let status: u16 = lines.next().unwrap().split_whitespace().nth(1).unwrap().parse().unwrap();
    let headers: HashMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let body = raw[end + 4..].to_vec();
    if method != "HEAD"
        && let Some(len) = headers.get("content-length")
    {
        assert_eq!(len.parse::<usize>().unwrap(), body.len(), "{method} {path}: Content-Length");
    }
    Resp { status, headers, body }
}

fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Resp {
    request(addr, "GET", path, headers)
}

/// Checks a 206 for `range` (`a-b`, `a-` or `-n`) against the source.
fn check_range(addr: SocketAddr, name: &str, src: &[u8], spec: &str) {
    let len = src.len() as u64;
    let (a, b) = match spec.split_once('-').unwrap() {
        ("", n) => (len.saturating_sub(n.parse().unwrap()), len - 1),
        (a, "") => (a.parse().unwrap(), len - 1),
        (a, b) => (a.parse().unwrap(), b.parse::<u64>().unwrap().min(len - 1)),
    };
    let r = get(addr, &format!("/objects/{name}"), &[("Range", &format!("bytes={spec}"))]);
    assert_eq!(r.status, 206, "bytes={spec}: {}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("content-range"), format!("bytes {a}-{b}/{len}"), "bytes={spec}");
    assert_eq!(r.header("content-type"), "video/mp2t");
    assert_same_bytes(&r.body, &src[a as usize..=b as usize], &format!("bytes={spec}"));
}

/// Splits a `multipart/byteranges` body (RFC 9110 §14.6) into (Content-Range, bytes) parts.
fn multipart(content_type: &str, body: &[u8]) -> Vec<(String, Vec<u8>)> {
    let boundary = content_type
        .split(';')
        .find_map(|p| p.trim().strip_prefix("boundary="))
        .expect("a boundary parameter")
        .trim_matches('"');
    let delim = format!("--{boundary}");
    let d = delim.as_bytes();
    let mut starts = Vec::new();
    let mut i = 0;
    while i + d.len() <= body.len() {
        if &body[i..i + d.len()] == d && (i < 2 || &body[i - 2..i] == b"\r\n") {
            starts.push(i);
            i += d.len();
        } else {
            i += 1;
        }
    }
    let mut parts = Vec::new();
    for w in starts.windows(2) {
        let part = &body[w[0] + d.len()..w[1] - 2]; // less the CRLF before the next delimiter
        let part = part.strip_prefix(b"\r\n").expect("CRLF after the delimiter");
        let end = part.windows(4).position(|x| x == b"\r\n\r\n").expect("part headers");
        let head = String::from_utf8_lossy(&part[..end]).into_owned();
        let range = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-range").then(|| v.trim().to_string())
            })
            .expect("Content-Range in each part");
        parts.push((range, part[end + 4..].to_vec()));
    }
    let last = *starts.last().expect("a closing delimiter");
    assert_eq!(&body[last + d.len()..last + d.len() + 2], b"--", "closing delimiter");
    parts
}

#[test]
fn objects_serve_exact_bytes_and_ranges() {
    let _load = load(weight::LIGHT);
    require("curl");
    let clip = fixture("vbr60");
    let (dir, server) = serve_fixtures(&[&clip], None);
    let addr = server.http;
    let mut checked = 0;
    for (name, path) in [("vbr60", clip), ("demo", demo())] {
        let src = std::fs::read(&path).unwrap();
        let len = src.len() as u64;
        // The whole object, and HEAD.
        let t = Instant::now();
        let full = get(addr, &format!("/objects/{name}"), &[]);
        eprintln!("{name}: {len} bytes in {:.2} s", t.elapsed().as_secs_f64());
        assert_eq!(full.status, 200);
        assert_eq!(full.header("content-type"), "video/mp2t");
        assert_eq!(full.header("accept-ranges"), "bytes");
        let etag = full.header("etag").to_string();
        assert!(etag.starts_with('"') && etag.ends_with('"'), "strong ETag: {etag}");
        assert_same_bytes(&full.body, &src, &format!("GET /objects/{name}"));
        let head = request(addr, "HEAD", &format!("/objects/{name}"), &[]);
        assert_eq!(head.status, 200);
        assert!(head.body.is_empty());
        assert_eq!(head.header("content-length"), len.to_string());
        assert_eq!(head.header("etag"), etag);

        // Random ranges from a seeded generator: tiny, medium, multi-MiB, open and suffix.
        let mut rng = SplitMix64::new(0x4854_5450 ^ len);
        let mut below = |n: u64| rng.next_u64() % n.max(1);
        for i in 0..60 {
            let start = below(len);
            let spec = match i % 6 {
                0 => format!("{start}-{}", start + below(188)),
                1 => format!("{start}-{}", start + below(64 << 10)),
                2 => {
                    let start = below(len.saturating_sub(8 << 20).max(1));
                    format!("{start}-{}", start + (1 << 20) + below(7 << 20))
                }
                3 => format!("{start}-"),
                4 => format!("-{}", 1 + below(len)),
                // Past the end: clipped (RFC 9110 §14.1.2).
                _ => format!("{start}-{}", len + below(1 << 20)),
            };
            check_range(addr, name, &src, &spec);
            checked += 1;
        }
        for spec in ["0-0", &format!("{}-", len - 1), "-1", &format!("-{}", len + 5)] {
            check_range(addr, name, &src, spec);
            checked += 1;
        }

        // Several disjoint ranges: multipart/byteranges, parts in the order asked (overlapping
        // ones are coalesced: `http::range`).
        let asked = [(0u64, 99u64), (len / 2, len / 2 + 300_000), (len - 500, len - 1), (107, 107)];
        let spec = asked.iter().map(|(a, b)| format!("{a}-{b}")).collect::<Vec<_>>().join(", ");
        let r = get(addr, &format!("/objects/{name}"), &[("Range", &format!("bytes={spec}"))]);
        assert_eq!(r.status, 206);
        assert!(r.header("content-type").starts_with("multipart/byteranges"), "{:?}", r.headers);
        let parts = multipart(r.header("content-type"), &r.body);
        assert_eq!(parts.len(), asked.len());
        for ((range, bytes), (a, b)) in parts.iter().zip(asked) {
            assert_eq!(range, &format!("bytes {a}-{b}/{len}"));
            assert_same_bytes(bytes, &src[a as usize..=b as usize], range);
        }
        // An unsatisfiable range among satisfiable ones is dropped.
        let r = get(
            addr,
            &format!("/objects/{name}"),
            &[("Range", &format!("bytes={}-,10-19", len + 10))],
        );
        assert_eq!((r.status, r.header("content-range")), (206, &*format!("bytes 10-19/{len}")));

        // Unsatisfiable and malformed sets: 416 with the length.
        for bad in
            [format!("bytes={len}-"), "bytes=-0".into(), format!("bytes={}-{}", len, len + 9)]
        {
            let r = get(addr, &format!("/objects/{name}"), &[("Range", &bad)]);
            assert_eq!(r.status, 416, "{bad}");
            assert_eq!(r.header("content-range"), format!("bytes */{len}"), "{bad}");
        }
        let r = get(addr, &format!("/objects/{name}"), &[("Range", "bytes=9-5")]);
        assert_eq!(r.status, 416);
        assert!(String::from_utf8_lossy(&r.body).contains("ends before it starts"));
        // Another unit is ignored (§14.2); a stale If-Range gets the whole object (§13.1.5).
        let r = request(addr, "HEAD", &format!("/objects/{name}"), &[("Range", "items=0-5")]);
        assert_eq!(r.status, 200);
        let r = request(
            addr,
            "HEAD",
            &format!("/objects/{name}"),
            &[("Range", "bytes=0-5"), ("If-Range", "\"stale\"")],
        );
        assert_eq!((r.status, r.header("content-length")), (200, &*len.to_string()));
        let r = request(
            addr,
            "HEAD",
            &format!("/objects/{name}"),
            &[("Range", "bytes=0-5"), ("If-Range", &etag)],
        );
        assert_eq!((r.status, r.header("content-length")), (206, "6"));
        let r = get(addr, &format!("/objects/{name}"), &[("If-None-Match", &etag)]);
        assert_eq!(r.status, 304);

        // curl as a real client.
        let out = dir.path().join(format!("{name}.part"));
        let (a, b) = (len / 3, len / 3 + 2_500_000);
        let res = run(
            Command::new("curl")
                .args(["-sS", "-f", "-r", &format!("{a}-{b}"), "-o"])
                .arg(&out)
                .arg(format!("http://{addr}/objects/{name}")),
            60,
        );
        assert!(res.status.success(), "curl: {}", String::from_utf8_lossy(&res.stderr));
        let b = b.min(len - 1);
        assert_same_bytes(&std::fs::read(&out).unwrap(), &src[a as usize..=b as usize], "curl -r");
    }
    let r = get(addr, "/objects/no-such-clip", &[]);
    assert_eq!(r.status, 404);
    assert!(String::from_utf8_lossy(&r.body).contains("no-such-clip"));
    let reads = server.metric("isochron_http_block_requests_total");
    eprintln!("{checked} single ranges checked; {reads} block requests through the scheduler");
    assert!(reads > 0.0, "HTTP reads go through the scheduler");
}

/// The playlist's segments: (duration, uri), with the target duration.
fn parse_playlist(text: &str) -> (u64, Vec<(f64, String)>) {
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("#EXTM3U"), "{text}");
    for tag in ["#EXT-X-VERSION:3", "#EXT-X-MEDIA-SEQUENCE:0", "#EXT-X-PLAYLIST-TYPE:VOD"] {
        assert!(text.lines().any(|l| l == tag), "no {tag} in\n{text}");
    }
    assert_eq!(text.lines().last(), Some("#EXT-X-ENDLIST"));
    let target = text
        .lines()
        .find_map(|l| l.strip_prefix("#EXT-X-TARGETDURATION:"))
        .expect("target duration")
        .parse()
        .unwrap();
    let mut segs = Vec::new();
    let mut dur = None;
    for l in text.lines() {
        if let Some(d) = l.strip_prefix("#EXTINF:") {
            dur = Some(d.trim_end_matches(',').split(',').next().unwrap().parse::<f64>().unwrap());
        } else if !l.starts_with('#') && !l.is_empty() {
            segs.push((dur.take().expect("EXTINF before each URI"), l.to_string()));
        }
    }
    (target, segs)
}

fn pid(p: &[u8]) -> u16 {
    (u16::from(p[1] & 0x1f) << 8) | u16::from(p[2])
}

/// The PMT PID of the program in a PAT packet.
fn pmt_pid(pat: &[u8]) -> u16 {
    let at = 5 + usize::from(pat[4]);
    let sec = &pat[at..];
    let e = sec[8..12].to_vec();
    assert_ne!(u16::from(e[0]) << 8 | u16::from(e[1]), 0, "first program is a real one");
    (u16::from(e[2] & 0x1f) << 8) | u16::from(e[3])
}

/// Fetches every segment of `name`'s playlist and checks it: PAT then PMT first (after any other
/// SI in segment 0), durations near the 4 s target. Returns the segments.
fn fetch_segments(addr: SocketAddr, name: &str, duration_s: f64) -> Vec<Vec<u8>> {
    let r = get(addr, &format!("/hls/{name}/index.m3u8"), &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), "application/vnd.apple.mpegurl");
    let text = String::from_utf8(r.body).unwrap();
    let (target, segs) = parse_playlist(&text);
    let mut out = Vec::new();
    for (i, (d, uri)) in segs.iter().enumerate() {
        assert!(d.round() as u64 <= target, "segment {i}: {d} s over the target {target}");
        if i + 1 < segs.len() {
            assert!((2.0..=6.5).contains(d), "segment {i} lasts {d} s (target 4 s)");
        }
        let seg = get(addr, &format!("/hls/{name}/{uri}"), &[]);
        assert_eq!(seg.status, 200, "{uri}");
        assert_eq!(seg.header("content-type"), "video/mp2t");
        let body = seg.body;
        assert_eq!(body.len() % 188, 0, "{uri}: whole packets");
        let pkts: Vec<&[u8]> = body.chunks_exact(188).collect();
        let first = pkts.iter().position(|p| !(0x10..=0x1f).contains(&pid(p))).unwrap();
        assert!(i == 0 || first == 0, "{uri} starts with PID {}", pid(pkts[0]));
        assert_eq!(pid(pkts[first]), 0, "{uri}: PAT first");
        assert_eq!(pid(pkts[first + 1]), pmt_pid(pkts[first]), "{uri}: PMT after the PAT");
        out.push(body);
    }
    let total: f64 = segs.iter().map(|s| s.0).sum();
    assert!((total - duration_s).abs() < 0.5, "EXTINFs sum to {total} s, object {duration_s} s");
    eprintln!(
        "{name}: {} segments, target {target}, durations {:?}",
        segs.len(),
        segs.iter().map(|s| s.0).collect::<Vec<_>>()
    );
    out
}

fn duration_of(server: &Server, name: &str) -> f64 {
    let v: serde_json::Value = serde_json::from_str(&server.http_get("/api/v1/objects")).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == name)
        .and_then(|o| o["duration_s"].as_f64())
        .unwrap_or_else(|| panic!("no {name} in {v}"))
}

/// ffmpeg reads the playlist to the end: exit 0 and no error lines.
fn ffmpeg_reads(addr: SocketAddr, name: &str) {
    let out = run(
        Command::new("ffmpeg")
            .args(["-nostdin", "-v", "error", "-i"])
            .arg(format!("http://{addr}/hls/{name}/index.m3u8"))
            .args(["-map", "0", "-c", "copy", "-f", "mpegts", "-y", "/dev/null"]),
        120,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "ffmpeg on {name}'s playlist: {err}");
    assert!(err.trim().is_empty(), "ffmpeg reported errors on {name}'s playlist:\n{err}");
}

#[test]
fn hls_segments_concatenate_to_the_source_and_ffmpeg_reads_them() {
    let _load = load(weight::LIGHT);
    require("ffmpeg");
    let clip = fixture("vbr60");
    let (_dir, server) = serve_fixtures(&[&clip], None);
    for (name, path) in [("vbr60", clip), ("demo", demo())] {
        let src = std::fs::read(&path).unwrap();
        let segs = fetch_segments(server.http, name, duration_of(&server, name));
        assert_same_bytes(&segs.concat(), &src, &format!("{name}'s segments concatenated"));
        ffmpeg_reads(server.http, name);
    }
    for (path, status) in [
        ("/hls/vbr60/99.ts", 404),
        ("/hls/vbr60/x.ts", 404),
        ("/hls/nope/index.m3u8", 404),
        ("/hls/vbr60/0.ts", 200),
    ] {
        assert_eq!(request(server.http, "HEAD", path, &[]).status, status, "{path}");
    }
}

/// A source with one PAT and PMT at its head only: later segments get copies of them.
#[test]
fn hls_inserts_pat_and_pmt_where_the_source_has_none() {
    let _load = load(weight::LIGHT);
    require("ffmpeg");
    let dir = tempdir();
    let src = std::fs::read(demo()).unwrap();
    let pmt = pmt_pid(src.chunks_exact(188).find(|p| pid(p) == 0).unwrap());
    let mut seen = (false, false);
    let mut stripped = Vec::new();
    for p in src.chunks_exact(188) {
        let keep = match pid(p) {
            0 => !std::mem::replace(&mut seen.0, true),
            x if x == pmt => !std::mem::replace(&mut seen.1, true),
            _ => true,
        };
        if keep {
            stripped.extend_from_slice(p);
        }
    }
    let path = dir.path().join("onepat.ts");
    std::fs::write(&path, &stripped).unwrap();
    let (_d, server) = serve_fixtures(&[&path], None);
    let segs = fetch_segments(server.http, "onepat", duration_of(&server, "onepat"));
    assert!(segs.len() >= 3, "{} segments", segs.len());
    let head: Vec<u8> = src
        .chunks_exact(188)
        .filter(|p| pid(p) == 0 || pid(p) == pmt)
        .take(2)
        .flatten()
        .copied()
        .collect();
    let mut rebuilt = segs[0].clone();
    for (i, s) in segs.iter().enumerate().skip(1) {
        assert_eq!(&s[..376], &head[..], "segment {i} starts with copies of the PAT and PMT");
        rebuilt.extend_from_slice(&s[376..]);
    }
    assert_same_bytes(&rebuilt, &stripped, "segments less the inserted PSI");
    ffmpeg_reads(server.http, "onepat");
}

#[test]
fn chromium_plays_the_watch_page() {
    let _load = load(weight::HEAVY);
    let (_dir, server) = serve_fixtures(&[], None);
    let js = get(server.http, "/assets/vendor/hls.light.min.js", &[]);
    assert_eq!(js.status, 200);
    assert!(js.header("content-type").starts_with("text/javascript"));
    assert!(js.header("cache-control").contains("max-age"));
    let page = get(server.http, "/watch/demo", &[]);
    assert_eq!(page.status, 200);
    assert!(String::from_utf8_lossy(&page.body).contains("hls.light.min.js"));
    assert_eq!(get(server.http, "/watch/nope", &[]).status, 404);

    let beacon = Beacon::new();
    let url = format!("http://{}/watch/demo?report={}", server.http, beacon.url());
    let t = Instant::now();
    let (v, _) = watch_report(None, &url, &beacon, Duration::from_secs(60));
    eprintln!("page report after {:.1} s: {v}", t.elapsed().as_secs_f64());
    assert!(v["time"].as_f64().unwrap() >= 5.0, "{v}");
}

#[test]
fn rtsp_stays_byte_exact_during_http_downloads() {
    let _load = load(weight::HEAVY);
    let (long, rtsp_clip) = (fixture("vbr60"), fixture("rate5m"));
    let (_dir, server) = serve_fixtures(&[&long, &rtsp_clip], None);
    let src = std::fs::read(&rtsp_clip).unwrap();
    let long_src = std::fs::read(&long).unwrap();
    let addr = server.http;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let downloader = {
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut n = 0;
            let mut bytes = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || n == 0 {
                let r = get(addr, "/objects/vbr60", &[]);
                assert_eq!(r.status, 200);
                assert_same_bytes(&r.body, &long_src, "download during RTSP");
                bytes += r.body.len();
                n += 1;
            }
            (n, bytes)
        })
    };
    let url = server.url("rate5m");
    let t = Instant::now();
    let got = runtime().block_on(async move {
        let (mut c, _) = start_play(&url, Transport::Udp).await;
        let got = c.collect(Duration::from_secs(5), Duration::from_secs(60)).await.unwrap();
        let _ = c.teardown().await;
        got
    });
    let secs = t.elapsed().as_secs_f64();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (n, bytes) = downloader.join().expect("downloads");
    eprintln!(
        "RTSP stream of {} bytes in {secs:.1} s alongside {n} downloads ({:.1} MB)",
        src.len(),
        bytes as f64 / 1e6
    );
    assert_same_bytes(&got.payload(), &src, "RTSP during HTTP downloads");
    assert!(got.bye, "the stream ended with BYE");
    assert_eq!(server.metric("isochron_missed_deadlines_total"), 0.0, "no stream deadline missed");
    assert!(server.metric("isochron_http_disk_reads_total") > 0.0);
}
