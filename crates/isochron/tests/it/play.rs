//! `isochron play` against a real `isochron serve`: the demo clip and a 20 s VBR clip over UDP
//! and interleaved TCP, each written byte-exact by `--out` (to a file and to stdout), with the JSON
//! summary's counts (nothing lost, duplicated or late; one source: the server's RTP socket over
//! UDP, its RTSP address over TCP); refusals (404, and 453 from admission control) and
//! `--timeout` exit non-zero with the status line or the reason. The UDP runs smooth the rate
//! with MTFC (`--mtfc`), the VBR clip's around its mean rate (`--rate-paced`): their rate
//! requests reach the server and the bytes stay exact.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;
use isochron_loadgen::{Client, Transport};
use serde_json::Value;

/// `isochron play URL --json` plus `extra`, bounded by `secs`.
fn play(url: &str, extra: &[&str], secs: u64) -> Output {
    run(Command::new(bin()).args(["play", url, "--json"]).args(extra), secs)
}

/// The JSON summary of a successful run.
fn summary(out: &Output, what: &str) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{what}: {:?}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{what}: {e}: {stdout}"))
}

/// Checks a complete session's counts: everything received once, in time, from `source`.
fn assert_clean(s: &Value, size: u64, source: &str, what: &str) {
    assert_eq!(s["ended"], "bye", "{what}: {s:#}");
    for k in ["lost", "late"] {
        assert_eq!(s[k], 0, "{what}: {k}: {s:#}");
    }
    // A packet asked for again may come twice (it was only late, on a busy machine): each
    // request brings at most one copy more, and nothing else may.
    let (dups, nacks) = (s["duplicates"].as_u64().unwrap(), s["nacks"].as_u64().unwrap());
    assert!(dups <= nacks, "{what}: {dups} duplicates for {nacks} NACKs: {s:#}");
    assert_eq!(s["packets"], s["written_packets"], "{what}: {s:#}");
    assert_eq!(s["written_bytes"].as_u64(), Some(size), "{what}: {s:#}");
    let sources = s["sources"].as_array().expect("sources");
    assert_eq!(sources.len(), 1, "{what}: one source: {s:#}");
    assert_eq!(sources[0]["address"], source, "{what}: {s:#}");
    assert_eq!(sources[0]["packets"], s["packets"], "{what}: {s:#}");
    assert_eq!(sources[0]["bytes"].as_u64(), Some(size), "{what}: {s:#}");
    assert!(s["media_s"].as_f64().unwrap() > 0.0, "{what}: {s:#}");
}

/// Plays `name` over UDP (with MTFC; `rate_paced`: around the object's mean rate) and TCP to
/// files, and over UDP to stdout, at once; each copy must be `src`'s bytes.
fn plays_byte_exact(server: &Server, name: &str, src: &Path, secs: u64, rate_paced: bool) {
    let dir = tempdir();
    let url = server.url(name);
    let want = std::fs::read(src).unwrap();
    let size = want.len() as u64;
    let runs: Vec<(Transport, std::thread::JoinHandle<Output>)> = [Transport::Udp, Transport::Tcp]
        .into_iter()
        .map(|t| {
            let (url, out) = (url.clone(), dir.path().join(format!("{}.ts", t.as_str())));
            let handle = std::thread::spawn(move || {
                let out = out.to_str().unwrap().to_string();
                let mtfc: &[&str] = match t {
                    Transport::Udp if rate_paced => &["--mtfc", "--rate-paced"],
                    Transport::Udp => &["--mtfc"],
                    Transport::Tcp => &[],
                };
                play(&url, &[&["--transport", t.as_str(), "--out", &out], mtfc].concat(), secs)
            });
            (t, handle)
        })
        .collect();
    // Without --json, `--out -` writes the stream to stdout and the table to stderr.
    let piped = run(Command::new(bin()).args(["play", &url, "--out", "-"]), secs);
    for (t, handle) in runs {
        let what = format!("{name} over {}", t.as_str());
        let out = handle.join().unwrap();
        let s = summary(&out, &what);
        let source = match t {
            Transport::Udp => format!("127.0.0.1:{}", server.rtp_port),
            Transport::Tcp => server.rtsp.to_string(),
        };
        assert_clean(&s, size, &source, &what);
        assert_eq!(s["transport"], t.as_str());
        if t == Transport::Udp {
            assert!(s["rate_requests"].as_u64().unwrap() > 0, "{what}: MTFC asked nothing: {s:#}");
        }
        let granted = String::from_utf8_lossy(&out.stderr)
            .contains("rate pacing: the server sends at the object's mean rate");
        assert_eq!(granted, rate_paced && t == Transport::Udp, "{what}");
        let got = std::fs::read(dir.path().join(format!("{}.ts", t.as_str()))).unwrap();
        assert_same_bytes(&got, &want, &what);
    }
    let table = String::from_utf8_lossy(&piped.stderr);
    assert!(piped.status.success(), "{name} to stdout: {table}");
    assert!(table.contains("ended: bye") && table.contains("lost 0"), "{table}");
    assert_same_bytes(&piped.stdout, &want, &format!("{name} to stdout"));
    assert!(
        server.metric("isochron_pace_changes_total") > 0.0,
        "no MTFC pace change reached {name}"
    );
}

#[test]
fn the_demo_plays_byte_exact_over_udp_and_tcp() {
    let _load = load(weight::PLAYER);
    let dir = tempdir();
    let server = Server::start(&dir.path().join("store"), ServeOptions::default());
    // The 12 s clip, a 2 s grace after the BYE.
    plays_byte_exact(&server, "demo", &demo(), 60, false);
}

#[test]
fn a_vbr_clip_plays_byte_exact_over_udp_and_tcp() {
    let _load = load(weight::PLAYER);
    let vbr = fixture("vbr20");
    let (_dir, server) = serve_fixtures(&[&vbr], None);
    // 20 s of VBR at several Mb/s, the UDP copy sent at its mean rate.
    plays_byte_exact(&server, "vbr20", &vbr, 120, true);
}

#[test]
fn refusals_and_timeouts_exit_non_zero_with_the_reason() {
    let _load = load(weight::LIGHT);
    // One slow emulated disk under aggressive admission (as in admission.rs): a handful of
    // streams fill it, and the next PLAY gets 453.
    let dir = tempdir();
    let (data, disk) = (dir.path().join("store"), dir.path().join("d0"));
    demo_store_on(&data, &format!("{},seek_ms=20,rate_mib_s=1", disk.display()));
    let config = Some("[sched]\nadmission = \"aggressive-avg\"\n");
    let server = Server::start(&data, ServeOptions { config, ..ServeOptions::default() });
    let url = server.url("demo");

    let out = play(&server.url("no-such-object"), &[], 30);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("DESCRIBE: 404 Not Found"), "{err}");

    // Cut short by --timeout: exit 1, the reason, and the summary of what came.
    let out = play(&url, &["--timeout", "2"], 30);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--timeout"), "{err}");
    let s: Value = serde_json::from_slice(&out.stdout).expect("the summary on stdout");
    assert_eq!(s["ended"], "incomplete", "{s:#}");
    assert!(s["packets"].as_u64().unwrap() > 0, "{s:#}");

    // Fill the disk with sessions of the loadgen client, then ask once more.
    let rt = runtime();
    let held = rt.block_on(async {
        let mut held = Vec::new();
        for _ in 0..64 {
            let mut c = Client::connect(&url).await.unwrap();
            c.describe().await.unwrap();
            c.setup(Transport::Tcp).await.unwrap();
            let agg = c.aggregate_url();
            let r = c.request("PLAY", &agg, &[]).await.unwrap();
            match u16::from(r.status()) {
                200 => held.push(c),
                453 => return held,
                s => panic!("PLAY answered {s}; log:\n{}", server.log()),
            }
        }
        panic!("64 streams admitted on a disk that holds a handful")
    });
    assert!(!held.is_empty());
    let out = play(&url, &[], 30);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("PLAY: 453 Not Enough Bandwidth"), "the status line: {err}");
    assert!(out.stdout.is_empty(), "no summary for a refused session");
    drop(held);

    // --json and --out - cannot share stdout.
    let out = play(&url, &["--out", "-"], 10);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("standard output"));
}
