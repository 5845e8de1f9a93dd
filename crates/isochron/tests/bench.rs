//! `isochron bench` end to end against a real `isochron serve` (issue 5): a fixed load whose
//! report, samples, plots and verdict agree with each other and with the file served; a player
//! starved on purpose (the server paced slower with SET_PARAMETER) whose starvations are
//! counted; SET_PARAMETER `x-isochron-rate` measured on the wire; a ramp that stops at the
//! first N the server does not serve; and an MP4 object played as native RTP, every track set
//! up, over UDP and TCP; an N_max search of whole-object trials checked by an independent client.

#![allow(clippy::print_stderr)] // the independent client's report is shown on stderr

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use isochron_loadgen::{Client, Incoming, Transport};
use serde_json::Value;

fn bench(server: &Server, out: &Path, extra: &[&str], secs: u64) -> Value {
    bench_url(server, &server.url("demo"), out, extra, secs)
}

/// `isochron bench URL --out OUT EXTRA…` against `server` (its metrics and PID given), bounded
/// by `secs`; the report.
fn bench_url(server: &Server, url: &str, out: &Path, extra: &[&str], secs: u64) -> Value {
    let metrics = format!("http://{}/metrics", server.http);
    let pid = server.pid().to_string();
    let res = run(
        Command::new(bin())
            .args(["bench", url, "--out"])
            .arg(out)
            .args(["--metrics", &metrics, "--server-pid", &pid, "--seed", "5"])
            .args(extra)
            .env("RUST_LOG", "warn"),
        secs,
    );
    assert!(
        res.status.success(),
        "bench failed:\n{}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&res.stdout),
        String::from_utf8_lossy(&res.stderr),
        server.log()
    );
    let text = std::fs::read_to_string(out.join("report.json")).expect("report.json");
    serde_json::from_str(&text).expect("report.json is JSON")
}

fn samples(out: &Path) -> Vec<std::collections::HashMap<String, String>> {
    let text = std::fs::read_to_string(out.join("samples.csv")).expect("samples.csv");
    let mut lines = text.lines();
    let header: Vec<String> = lines.next().expect("header").split(',').map(String::from).collect();
    lines
        .map(|l| {
            let row: Vec<&str> = l.split(',').collect();
            assert_eq!(row.len(), header.len(), "ragged row {l}");
            header.iter().cloned().zip(row.iter().map(|v| v.to_string())).collect()
        })
        .collect()
}

fn num(row: &std::collections::HashMap<String, String>, k: &str) -> f64 {
    row[k].parse().unwrap_or_else(|_| panic!("{k} = {:?}", row[k]))
}

#[test]
fn fixed_load_report_is_consistent_with_itself_and_the_file() {
    let dir = tempdir();
    let server = Server::start(&dir.path().join("store"), ServeOptions::default());
    let out = dir.path().join("report");
    // The 12 s demo clip: three clients play it whole, then start again and are stopped.
    let r =
        bench(&server, &out, &["--clients", "3", "--duration", "16", "--buffer-ms", "1000"], 60);

    for f in ["report.json", "samples.csv", "verdict.txt"] {
        assert!(out.join(f).is_file(), "{f}");
    }
    for f in ["cpu.svg", "b_avgnet.svg", "b_disk_cache.svg", "r_dr.svg", "b_net.svg"] {
        let svg = std::fs::read_to_string(out.join(f)).expect(f);
        assert!(svg.starts_with("<svg") && svg.contains("number of clients N"), "{f}");
    }
    assert_eq!(r["parameters"]["load"]["shape"], "fixed");
    assert_eq!(r["seed"], 5);

    // Every session that got the whole stream got exactly the file, on time.
    let size = std::fs::metadata(demo()).unwrap().len();
    let sessions = r["sessions"].as_array().unwrap();
    let complete: Vec<&Value> = sessions.iter().filter(|s| s["outcome"] == "complete").collect();
    assert!(complete.len() >= 3, "{:#}", r["sessions_summary"]);
    for s in &complete {
        assert_eq!(s["bytes"].as_u64(), Some(size), "{s:#}");
        assert_eq!(s["starvations"], 0, "{s:#}");
        assert_eq!(s["lost"], 0, "{s:#}");
        let ratio = s["received_bits_s"].as_f64().unwrap() / s["content_bits_s"].as_f64().unwrap();
        assert!((0.9..1.15).contains(&ratio), "received vs content rate {ratio}: {s:#}");
        // PLAY → first RTP: a block read and a packet, well under the 1 s buffer.
        let start = s["start_latency_ms"].as_f64().expect("start latency");
        assert!((0.0..1000.0).contains(&start), "start latency {start} ms: {s:#}");
    }
    assert_eq!(r["sessions_summary"]["error"], 0, "{:#}", r["sessions"]);
    let start = &r["sessions_summary"]["start_latency_ms"];
    assert!(start["count"].as_u64().unwrap() >= complete.len() as u64, "{start:#}");
    let ms = |k: &str| start[k].as_f64().unwrap_or_else(|| panic!("{k}: {start:#}"));
    assert!(ms("p50_ms") <= ms("p99_ms") && ms("p99_ms") <= ms("max_ms"), "{start:#}");

    // One sample a second; their sums agree with the sessions'.
    let rows = samples(&out);
    assert!((13..=18).contains(&rows.len()), "{} samples", rows.len());
    let rx: f64 = rows.iter().map(|row| num(row, "rx_bytes")).sum();
    let got: u64 = sessions.iter().map(|s| s["bytes"].as_u64().unwrap()).sum();
    assert!(rx <= got as f64 && rx >= 0.8 * got as f64, "samples {rx} vs sessions {got}");
    let starved: f64 = rows.iter().map(|row| num(row, "starvations")).sum();
    let starved_sessions: u64 = sessions.iter().map(|s| s["starvations"].as_u64().unwrap()).sum();
    assert!(starved <= starved_sessions as f64);
    assert!(rows.iter().all(|row| num(row, "sessions") <= 3.0));
    // The server's own counters were scraped: B_disk + B_cache cover what was sent.
    let served: f64 = rows
        .iter()
        .skip(1)
        .map(|row| num(row, "b_disk_bytes_s") + num(row, "b_cache_bytes_s"))
        .sum();
    assert!(served > 0.5 * size as f64, "B_disk + B_cache {served}");
    assert!(rows.iter().skip(1).all(|row| num(row, "server_rss_bytes") > 0.0));

    // Per-N aggregates come from steady samples at N = 3, and agree with N_max.
    let per_n = r["per_n"].as_array().unwrap();
    assert!(per_n.iter().any(|p| p["n"] == 3), "{per_n:#?}");
    let steady = rows.iter().filter(|row| row["steady"] == "true").count();
    let counted: u64 = per_n.iter().map(|p| p["samples"].as_u64().unwrap()).sum();
    assert_eq!(counted as usize, steady);
    let pass3 = per_n.iter().find(|p| p["n"] == 3).unwrap()["pass"].as_bool().unwrap();
    if pass3 {
        assert_eq!(r["n_max"], 3);
        assert_eq!(r["bottleneck"], "none_reached");
    } else {
        assert_eq!(r["first_failure_n"], 3);
    }

    // The verdict file says what report.json says.
    let verdict = std::fs::read_to_string(out.join("verdict.txt")).unwrap();
    let named = r["verdict"]["bottleneck"].as_str().unwrap();
    let first = verdict.lines().next().unwrap();
    assert!(first.starts_with("bottleneck: "), "{verdict}");
    assert_eq!(named, r["bottleneck"].as_str().unwrap());
    assert!(verdict.contains("at N = "), "{verdict}");
    // The bench is cheap.
    assert!(r["bench_cpu_pct"].as_f64().unwrap() < 50.0, "{}", r["bench_cpu_pct"]);
}

#[test]
fn a_server_paced_too_slow_starves_the_players() {
    let dir = tempdir();
    let server = Server::start(&dir.path().join("store"), ServeOptions::default());
    let out = dir.path().join("report");
    // Every session asks for 0.7 × its nominal pace (SET_PARAMETER) and plays at 1 ×.
    let r = bench(
        &server,
        &out,
        &["--clients", "2", "--duration", "10", "--buffer-ms", "500", "--force-rate", "0.7"],
        60,
    );
    let sessions = r["sessions"].as_array().unwrap();
    assert!(!sessions.is_empty());
    for s in sessions.iter().filter(|s| s["bytes"].as_u64().unwrap() > 0) {
        // 500 ms buffered, drained at 0.3 s/s: a starvation every couple of seconds.
        assert!(s["starvations"].as_u64().unwrap() >= 2, "{s:#}");
        assert!(s["late"].as_u64().unwrap() > 0, "{s:#}");
        assert!(s["stall_ms"].as_u64().unwrap() > 500, "{s:#}");
        assert_eq!(s["rate_refused"], false);
        // What the server sent follows the pace asked for.
        let ratio = s["received_bits_s"].as_f64().unwrap() / s["content_bits_s"].as_f64().unwrap();
        assert!((0.6..0.8).contains(&ratio), "received / content = {ratio}: {s:#}");
    }
    let rows = samples(&out);
    assert!(rows.iter().map(|row| num(row, "starvations")).sum::<f64>() >= 2.0);
    // N = 2 was not served, so there is no N_max and the verdict names no "none reached".
    assert_eq!(r["n_max"], Value::Null, "{:#}", r["per_n"]);
    assert_eq!(r["first_failure_n"], 2);
    assert_ne!(r["bottleneck"], "none_reached");
    assert!(std::fs::read_to_string(out.join("verdict.txt")).unwrap().contains("starvations"));
    // The server carried out every session's pace change.
    let m = server.http_get("/metrics");
    let changes: f64 = m
        .lines()
        .find_map(|l| l.strip_prefix("isochron_pace_changes_total "))
        .and_then(|v| v.parse().ok())
        .expect("pace_changes_total");
    assert!(
        changes >= sessions.len() as f64,
        "{changes} pace changes, {} sessions",
        sessions.len()
    );
}

/// Rate pacing smooths a VBR stream's traffic (Yima §2.5, `docs/design/mtfc.md`): the same
/// clip, whole, to two clients paced by the content and two that ask for rate pacing with
/// MTFC; each client's per-second received rate varies less than half as much when rate-paced,
/// with nothing lost, no starvation and the same mean.
#[test]
fn rate_pacing_halves_the_spread_of_a_vbr_streams_traffic_and_loses_nothing() {
    let clip = fixture("gop38");
    let (dir, server) = serve_fixtures(&[&clip], None);
    let url = server.url("gop38");
    let play = |name: &'static str, extra: &'static [&'static str]| {
        let out = dir.path().join(name);
        let args = [&["--clients", "2", "--duration", "35"][..], extra].concat();
        bench_url(&server, &url, &out, &args, 90)
    };
    let [content, rate]: [Value; 2] = std::thread::scope(|s| {
        let content = s.spawn(|| play("content", &[]));
        let rate = s.spawn(|| play("rate", &["--mtfc", "--rate-paced"]));
        [content.join().expect("content bench"), rate.join().expect("rate bench")]
    });
    let spread = |r: &Value| {
        let v = &r["rate_variation"];
        assert!(v["clients"].as_u64().unwrap() >= 2, "{v:#}");
        assert!(v["samples"].as_u64().unwrap() >= 20, "{v:#}");
        assert!(v["aggregate_samples"].as_u64().unwrap() >= 15, "{v:#}");
        let f = |k: &str| v[k].as_f64().unwrap();
        (f("client_mean_bits_s"), f("client_sd_bits_s"), f("aggregate_sd_bits_s"))
    };
    let ((c_mean, c_sd, c_agg), (r_mean, r_sd, r_agg)) = (spread(&content), spread(&rate));
    eprintln!("aggregate spread: {r_agg:.0} rate-paced, {c_agg:.0} by content");
    assert!(r_agg < 0.5 * c_agg, "aggregate spread: {r_agg:.0} rate-paced, {c_agg:.0} by content");
    eprintln!(
        "per-second spread: {r_sd:.0} rate-paced, {c_sd:.0} by content; means {r_mean:.0}, {c_mean:.0}"
    );
    assert!(r_sd < 0.5 * c_sd, "per-second spread: {r_sd:.0} rate-paced, {c_sd:.0} by content");
    assert!((r_mean / c_mean - 1.0).abs() < 0.05, "mean rates {r_mean:.0} and {c_mean:.0}");
    for r in [&content, &rate] {
        let s = &r["sessions_summary"];
        assert_eq!((s["starvations"].as_u64(), s["lost"].as_u64()), (Some(0), Some(0)), "{s:#}");
        assert!(s["complete"].as_u64().unwrap() >= 2, "every client plays the clip whole: {s:#}");
    }
    for s in rate["sessions"].as_array().unwrap() {
        assert_eq!(s["rate_refused"], false, "the server paces by rate: {s:#}");
    }
}

/// An object ingested from an MP4 (H.264 + AAC) is served as two RTP streams: every emulation
/// client sets up both tracks (over UDP a port pair each, over TCP channels 0-1 and 2-3), plays
/// each by its RTP timestamps from RTP-Info's start, and gets every packet of the object on
/// time, with MTFC rate requests accepted for the session as a whole.
#[test]
fn native_objects_play_every_track_over_udp_and_tcp() {
    let mp4 = media_fixture("h264_aac.mp4");
    let (dir, server) = serve_fixtures(&[&mp4], None);
    let url = server.url("h264_aac");
    // The object's RTP payload bytes and packets (both tracks), from the catalog.
    let objects: Value = serde_json::from_str(&server.http_get("/api/v1/objects")).unwrap();
    let object = objects
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == "h264_aac")
        .unwrap_or_else(|| panic!("no h264_aac in {objects:#}"));
    let (size, packets) = (object["bytes"].as_u64().unwrap(), object["packets"].as_u64().unwrap());
    assert!(size > 100_000 && packets > 100, "{object:#}");
    // Both transports at once: three clients each play the 10 s clip whole, then start again
    // and are stopped.
    let play = |transport: &'static str| {
        let out = dir.path().join(format!("report-{transport}"));
        let extra = ["--clients", "3", "--duration", "13", "--buffer-ms", "1000"];
        let args = [&extra[..], &["--transport", transport]].concat();
        (transport, bench_url(&server, &url, &out, &args, 60))
    };
    let reports: [(&str, Value); 2] = std::thread::scope(|s| {
        let udp = s.spawn(|| play("udp"));
        let tcp = s.spawn(|| play("tcp"));
        [udp.join().expect("udp bench"), tcp.join().expect("tcp bench")]
    });
    for (transport, r) in &reports {
        assert_eq!(r["parameters"]["transport"], *transport);
        let sessions = r["sessions"].as_array().unwrap();
        let complete: Vec<&Value> =
            sessions.iter().filter(|s| s["outcome"] == "complete").collect();
        assert!(complete.len() >= 3, "{transport}: {:#}", r["sessions_summary"]);
        for s in &complete {
            // Both tracks, every packet of each, on time.
            let tracks = s["tracks"].as_array().unwrap();
            assert_eq!(tracks.len(), 2, "{transport}: {s:#}");
            for t in tracks {
                assert!(
                    t["packets"].as_u64().unwrap() > 50,
                    "{transport}: a track unplayed: {s:#}"
                );
                assert_eq!(t["lost"], 0, "{transport}: {s:#}");
            }
            let by_track: u64 = tracks.iter().map(|t| t["bytes"].as_u64().unwrap()).sum();
            assert_eq!(by_track, s["bytes"].as_u64().unwrap());
            assert_eq!(s["bytes"].as_u64(), Some(size), "{transport}: {s:#}");
            assert_eq!(s["packets"].as_u64(), Some(packets), "{transport}: {s:#}");
            assert_eq!(s["starvations"], 0, "{transport}: {s:#}");
            assert_eq!(s["late"], 0, "{transport}: {s:#}");
            assert_eq!(s["rate_refused"], false, "{transport}: {s:#}");
            let media = s["media_s"].as_f64().unwrap();
            assert!((9.5..10.5).contains(&media), "{transport}: media {media} s: {s:#}");
            let ratio =
                s["received_bits_s"].as_f64().unwrap() / s["content_bits_s"].as_f64().unwrap();
            assert!((0.9..1.15).contains(&ratio), "{transport}: received / content {ratio}: {s:#}");
        }
        let summary = &r["sessions_summary"];
        assert_eq!(summary["error"], 0, "{transport}: {:#}", r["sessions"]);
        assert_eq!(summary["starvations"], 0, "{transport}: {summary:#}");
        assert_eq!(summary["lost"], 0, "{transport}: {summary:#}");
        // Steady samples at N = 3, and N = 3 served.
        let per_n = r["per_n"].as_array().unwrap();
        let at3 = per_n.iter().find(|p| p["n"] == 3).unwrap_or_else(|| panic!("{per_n:#?}"));
        assert_eq!(at3["pass"], true, "{transport}: {at3:#}");
        assert_eq!(r["n_max"], 3, "{transport}: {:#}", r["verdict"]);
    }
}

/// Pace measured on the wire: RTP timestamps (90 kHz send times) per second of arrival, as the
/// Theil–Sen slope (the median of the slopes between pairs of packets at least half a second
/// apart): a stall of the machine, which delays a run of packets, moves the median little.
async fn pace(client: &mut Client, span: Duration) -> f64 {
    let mut points: Vec<(Instant, u32)> = Vec::new();
    let end = Instant::now() + span;
    while Instant::now() < end {
        if let Some(Incoming::Rtp(p)) = client.next(Duration::from_millis(500)).await {
            points.push((p.at, p.header.timestamp));
        }
    }
    assert!(points.len() >= 20, "{} packets", points.len());
    // About 200 points spread over the span, and the slopes between every far-enough pair.
    let step = points.len().div_ceil(200);
    let sample: Vec<(Instant, u32)> = points.iter().step_by(step).copied().collect();
    let mut slopes = Vec::new();
    for (i, &(ta, a)) in sample.iter().enumerate() {
        for &(tb, b) in &sample[i + 1..] {
            let dt = tb.duration_since(ta).as_secs_f64();
            if dt >= 0.5 {
                slopes.push(f64::from(b.wrapping_sub(a)) / 90_000.0 / dt);
            }
        }
    }
    assert!(!slopes.is_empty(), "no packets half a second apart");
    slopes.sort_by(f64::total_cmp);
    slopes[slopes.len() / 2]
}

#[test]
fn set_parameter_rate_changes_the_pace_on_the_wire() {
    let dir = tempdir();
    let server = Server::start(&dir.path().join("store"), ServeOptions::default());
    let url = server.url("demo");
    runtime().block_on(async {
        let (mut c, _) = start_play(&url, Transport::Udp).await;
        let nominal = pace(&mut c, Duration::from_secs(2)).await;
        assert!((0.9..1.1).contains(&nominal), "nominal pace {nominal}");

        let agg = c.aggregate_url();
        let params = [("Content-Type", "text/parameters")];
        let r = c
            .request_with_body("SET_PARAMETER", &agg, &params, "x-isochron-rate: 2\r\n")
            .await
            .unwrap();
        assert_eq!(u16::from(r.status()), 200);
        assert_eq!(String::from_utf8_lossy(r.body()), "x-isochron-rate: 2\r\n");
        let fast = pace(&mut c, Duration::from_secs(2)).await;
        assert!((1.8..2.2).contains(&fast), "pace after x-isochron-rate 2: {fast}");

        let r = c
            .request_with_body("SET_PARAMETER", &agg, &params, "x-isochron-rate: 0.5\r\n")
            .await
            .unwrap();
        assert_eq!(u16::from(r.status()), 200);
        let slow = pace(&mut c, Duration::from_secs(2)).await;
        assert!((0.45..0.55).contains(&slow), "pace after x-isochron-rate 0.5: {slow}");

        // A value out of range is refused and changes nothing.
        let r = c
            .request_with_body("SET_PARAMETER", &agg, &params, "x-isochron-rate: 40\r\n")
            .await
            .unwrap();
        assert_eq!(u16::from(r.status()), 400);
        c.teardown().await.unwrap();
    });
    let m = server.http_get("/metrics");
    assert!(m.contains("isochron_pace_changes_total 2\n"), "{m}");
}

#[test]
fn a_ramp_stops_at_the_first_n_not_served() {
    // The server takes two sessions; the third client's SETUP gets 453, so step 3 never has
    // a steady sample: it is the first failure, and the ramp stops two steps later.
    let dir = tempdir();
    let config = "[rtsp]\nmax_sessions = 2\n";
    let server = Server::start(
        &dir.path().join("store"),
        ServeOptions { config: Some(config), ..ServeOptions::default() },
    );
    let out = dir.path().join("report");
    // Steps of 6 s: each N has four or five steady samples (a session's first second, and the
    // second in which the next one starts, are not steady), so one slow second on a machine
    // busy with the other benches does not decide it.
    let args = ["--ramp", "--ramp-step", "1", "--ramp-interval", "6", "--max-clients", "6"];
    let r = bench(
        &server,
        &out,
        &[&args[..], &["--duration", "60", "--buffer-ms", "1000"]].concat(),
        90,
    );
    assert_eq!(r["parameters"]["load"]["shape"], "ramp", "{:#}", r["parameters"]);
    assert_eq!(r["n_max"], 2, "{:#}", r["per_n"]);
    assert_eq!(r["first_failure_n"], 3, "{:#}", r["per_n"]);
    let per_n = r["per_n"].as_array().unwrap();
    let at = |n: u64| per_n.iter().find(|p| p["n"] == n).unwrap_or_else(|| panic!("N = {n}"));
    for (n, pass) in [(1, true), (2, true), (3, false)] {
        assert_eq!(at(n)["pass"], pass, "N = {n}: {:#}", at(n));
    }
    assert!(r["elapsed_s"].as_f64().unwrap() < 45.0, "the ramp ran on: {}", r["elapsed_s"]);
    // The third client's SETUP was refused (503: the session table is full), not an error.
    let summary = &r["sessions_summary"];
    assert!(summary["refused"].as_u64().unwrap() >= 1, "{summary:#}");
    assert_eq!(summary["error"], 0, "{:#}", r["sessions"]);
}

/// The `isochron_bench-…` namespaces that exist now.
fn bench_namespaces() -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().expect("ip netns list");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with("isochron_bench-"))
        .map(String::from)
        .collect()
}

#[test]
fn shaped_bench_runs_over_the_testbed_and_leaves_nothing() {
    if !namespaces_or_skip("shaped bench") {
        return;
    }
    let dir = tempdir();
    let out = dir.path().join("out");
    let before = bench_namespaces();
    let server_cmd = format!(
        "{} serve --rtsp 10.77.0.1:8554 --http 10.77.0.1:8080 --data {}",
        bin(),
        dir.path().join("store").display()
    );
    let res = run(
        Command::new(bin())
            .args(["bench", "rtsp://10.77.0.1:8554/demo", "--out"])
            .arg(&out)
            .args(["--clients", "2", "--duration", "4", "--seed", "5", "--shape", "3mbit"])
            .args(["--metrics", "http://10.77.0.1:8080/metrics", "--server-cmd", &server_cmd])
            .env("RUST_LOG", "warn"),
        120,
    );
    assert!(
        res.status.success(),
        "shaped bench failed:\n{}\n{}",
        String::from_utf8_lossy(&res.stdout),
        String::from_utf8_lossy(&res.stderr)
    );
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(r["parameters"]["link_bits_s"], 3e6, "{:#}", r["parameters"]);
    assert!(r["parameters"]["server_pid"].as_u64().is_some(), "{:#}", r["parameters"]);
    let rows = samples(&out);
    assert!(rows.iter().any(|s| num(s, "b_net_bits_s") > 0.0), "no media went through the link");
    // At most the rate plus one bucket (64 KiB) in any one-second sample.
    for s in &rows {
        assert!(num(s, "b_net_bits_s") <= 3.6e6, "faster than the shaped link: {s:?}");
    }
    let left: Vec<String> =
        bench_namespaces().into_iter().filter(|n| !before.contains(n)).collect();
    assert!(left.is_empty(), "namespaces left: {left:?}");
}

/// Runs `isochron bench --out OUT` with `args` (words separated by spaces) and `demo.ts`
/// ingested (a cluster bench: it builds namespaces), which must succeed within `secs`; returns
/// OUT, the bench's output and its `report.json`. OUT lives in `dir`.
fn cluster_bench(dir: &Path, args: &str, secs: u64) -> (std::path::PathBuf, String, Value) {
    let out = dir.join("out");
    let res = run(
        Command::new(bin())
            .args(["bench", "--out"])
            .arg(&out)
            .args(args.split_whitespace())
            .arg("--ingest")
            .arg(demo())
            // Warnings, and each takeover (what to read when a session broke).
            .env("RUST_LOG", "warn,isochron_node::core::share=info"),
        secs,
    );
    let stdout = String::from_utf8_lossy(&res.stdout).into_owned();
    assert!(
        res.status.success(),
        "cluster bench failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&res.stderr)
    );
    let report = std::fs::read_to_string(out.join("report.json")).unwrap();
    (out, stdout, serde_json::from_str(&report).unwrap())
}

#[test]
fn cluster_bench_spreads_sessions_over_shaped_nodes_and_reports_each() {
    if !namespaces_or_skip("cluster bench") {
        return;
    }
    let dir = tempdir();
    let (out, _, r) = cluster_bench(
        dir.path(),
        concat!(
            "--cluster-nodes 2 --shape 20mbit --block-kib 16 --clients 3 --stagger --no-mtfc ",
            "--duration 6 --seed 5"
        ),
        180,
    );
    let c = &r["cluster"];
    assert_eq!(c["node_count"], 2, "{c:#}");
    assert_eq!(r["parameters"]["popularity"], "round_robin", "{:#}", r["parameters"]);
    assert_eq!(r["parameters"]["link_bits_s"], 40e6, "both nodes' links: {:#}", r["parameters"]);
    // Sessions took the nodes in turn, every one playing from a staggered start.
    let urls: Vec<&str> =
        r["sessions"].as_array().unwrap().iter().map(|s| s["url"].as_str().unwrap()).collect();
    let ips: Vec<String> = c["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["ip"].as_str().unwrap().to_owned())
        .collect();
    for ip in &ips {
        assert!(urls.iter().any(|u| u.contains(ip.as_str())), "no session through {ip}: {urls:?}");
    }
    assert!(urls.iter().all(|u| u.ends_with("/demo?delivery=bipartite")), "{urls:?}");
    assert_eq!(r["sessions_summary"]["starvations"], 0, "{:#}", r["sessions_summary"]);
    // Each node sent part of every stream (bipartite), measured on its link and by its counters.
    for n in c["nodes"].as_array().unwrap() {
        assert!(n["payload_bytes"].as_f64().unwrap() > 0.0, "{n:#}");
        assert!(n["wire_tx_bytes"].as_u64().unwrap() as f64 > n["payload_bytes"].as_f64().unwrap());
        assert!((0.2..0.8).contains(&n["share"].as_f64().unwrap()), "{n:#}");
        assert_eq!(n["relay_bytes"], 0.0, "bipartite: nothing relayed: {n:#}");
    }
    let frac = c["node_to_node_fraction"].as_f64().unwrap();
    assert!(frac > 0.0 && frac < 0.01, "node-to-node {frac} of media");
    let per_n = r["per_n"].as_array().unwrap();
    assert!(per_n.iter().any(|p| p["per_source"].as_object().is_some_and(|m| m.len() == 2)));
    assert!(out.join("node_bytes.svg").exists() && out.join("b_net_nodes.svg").exists());
    // The scale-up summary of this one run.
    let scale = dir.path().join("scale");
    let res =
        run(Command::new(bin()).args(["bench", "--scale-up", "--out"]).arg(&scale).arg(&out), 30);
    assert!(res.status.success(), "{}", String::from_utf8_lossy(&res.stderr));
    let s: Value =
        serde_json::from_str(&std::fs::read_to_string(scale.join("scale_up.json")).unwrap())
            .unwrap();
    assert_eq!(s["points"][0]["nodes"], 2, "{s:#}");
    assert!(scale.join("scale_up.svg").exists());
}

#[test]
fn cluster_bench_with_a_node_killed_measures_the_survivors_serving_its_copies() {
    if !namespaces_or_skip("cluster bench") {
        return;
    }
    let dir = tempdir();
    let (_, stdout, r) = cluster_bench(
        dir.path(),
        concat!(
            "--cluster-nodes 3 --shape 20mbit --replication 2 --kill-nodes 1 --clients 4 ",
            "--stagger --no-mtfc --duration 6 --seed 5"
        ),
        240,
    );
    assert!(stdout.contains("killed n3 (SIGKILL)"), "{stdout}");
    let c = &r["cluster"];
    assert_eq!(c["node_count"], 3, "{c:#}");
    assert_eq!(c["replication"], 2, "{c:#}");
    assert_eq!(c["killed"], serde_json::json!(["n3"]), "{c:#}");
    assert_eq!(r["parameters"]["link_bits_s"], 40e6, "the survivors' links: {:#}", r["parameters"]);
    // Every session opened while n3 was down, on n1 or n2, and played to its end: n3's blocks
    // came from their other copies.
    let s = &r["sessions_summary"];
    assert_eq!(s["refused"], 0, "{s:#}");
    assert_eq!(s["error"], 0, "{s:#}");
    assert_eq!(s["starvations"], 0, "{s:#}");
    let nodes = c["nodes"].as_array().unwrap();
    let names: Vec<&str> = nodes.iter().map(|n| n["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["n1", "n2"]);
    for n in nodes {
        assert!((0.2..0.8).contains(&n["share"].as_f64().unwrap()), "{n:#}");
    }
    let per_n = r["per_n"].as_array().unwrap();
    assert!(per_n.iter().any(|p| p["per_source"].as_object().is_some_and(|m| m.len() == 2)));
}

/// A node SIGKILLed under load (`--chaos-kill-every`): the survivors take its part of every
/// session over and catch up on what was overdue without overflowing their links. Sent at
/// once, that backlog (about a second of the lost node's share of every session) met each
/// survivor's 8 Mb/s link together and its shaper dropped packets the clients (which, like
/// standard players, do not ask again) never got (docs/design/takeover.md, "The catch-up's
/// pace"). Every session not on the killed node's RTSP connection must end with every packet
/// and, played to its end, the file's content; the node comes back and fsck finds it clean.
#[test]
fn cluster_chaos_a_killed_node_is_taken_over_with_nothing_lost_on_shaped_links() {
    if !namespaces_or_skip("cluster chaos bench") {
        return;
    }
    let dir = tempdir();
    let (out, stdout, r) = cluster_bench(
        dir.path(),
        concat!(
            "--cluster-nodes 3 --replication 2 --shape 8mbit --block-kib 16 --buffer-ms 2000 ",
            "--no-mtfc --arrival-rate 60 --max-clients 10 --duration 30 --chaos-kill-every 20 ",
            "--chaos-down 3 --seed 7"
        ),
        300,
    );
    let c = &r["cluster"];
    let events = c["chaos"]["events"].as_array().unwrap();
    let kills: Vec<&Value> = events.iter().filter(|e| e["what"] == "kill").collect();
    // At 20 s; the next would be at 40 s, past the 30 s run's end even on a busy machine (a
    // 40 s run under load saw a second kill at its very end, one run in five).
    assert_eq!(kills.len(), 1, "one kill in 30 s: {events:#?}");
    assert_eq!(kills[0]["fsck_clean"], true, "{:#}", kills[0]);
    assert!(kills[0]["back_after_s"].as_f64().is_some(), "{:#}", kills[0]);
    let a = &c["chaos"]["sessions"];
    assert!(a["takeovers"]["taken_over"].as_f64().unwrap_or(0.0) > 0.0, "{a:#}");
    assert_eq!(a["broken"], serde_json::json!([]), "{stdout}\n{}", node_logs(&out));
    assert!(a["byte_exact"].as_u64().unwrap() >= 5, "{a:#}");
    assert!(a["digest_checked"].as_u64().unwrap() >= 5, "{a:#}");
    // What the survivors sent, their links carried.
    for n in c["nodes"].as_array().unwrap() {
        assert_eq!(n["link_drops"], 0, "{n:#}");
    }
}

/// Every node's log (the cluster bench keeps them in `OUT/logs`; warnings and takeovers), each
/// under a `--- NODE` line as the cluster tests print theirs: what to read when a session broke.
fn node_logs(out: &Path) -> String {
    let mut logs: Vec<_> = std::fs::read_dir(out.join("logs"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    logs.sort();
    logs.iter()
        .map(|log| {
            let name = log.file_stem().unwrap_or_default().to_string_lossy();
            format!("--- {name}\n{}", std::fs::read_to_string(log).unwrap_or_default())
        })
        .collect()
}

/// Builds `tools/rtsp-probe.c` (an RTSP load client sharing no code with isochron) once.
fn rtsp_probe() -> std::path::PathBuf {
    require("cc");
    let out = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rtsp-probe");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/rtsp-probe.c");
    let res = run(Command::new("cc").args(["-O2", "-Wall", "-o"]).arg(&out).arg(&src), 120);
    assert!(res.status.success(), "cc: {}", String::from_utf8_lossy(&res.stderr));
    out
}

/// An N_max search as a standard player loads a server: nominal pacing unless `--mtfc`, each
/// trial the whole object (a shorter `--trial` refused, naming the object), every session's
/// lateness and the server's late packets in the report, a search whose `--duration` cannot hold
/// one trial refused; and an independent client (C, epoll + recvmmsg, lateness from RTP
/// timestamps) agrees that those sessions were served on time, for an MP2T object and a native
/// one.
#[test]
fn an_nmax_search_plays_whole_objects_and_an_independent_client_agrees() {
    let mp4 = media_fixture("h264_aac.mp4");
    let (dir, server) = serve_fixtures(&[&mp4], None);
    let out = dir.path().join("nmax");
    let args = ["--find-nmax", "--nmax-from", "2", "--max-clients", "2", "--buffer-ms", "1000"];
    let r = bench(&server, &out, &[&args[..], &["--duration", "60"]].concat(), 120);
    let p = &r["parameters"];
    assert_eq!(p["mtfc"], false, "{p:#}");
    assert!(p["pacing"].as_str().unwrap().starts_with("nominal"), "{p:#}");
    // The demo clip is 12 s: one trial of 12 + 1 + 3 s at N = 2, which passes, and the search
    // ends at --max-clients.
    let trial = &r["parameters"]["load"];
    assert_eq!(trial["trial"]["secs"], 16, "{trial:#}");
    assert_eq!(r["trials"].as_array().unwrap().len(), 1, "{:#}", r["trials"]);
    assert_eq!(r["n_max"], 2, "{:#}", r["per_n"]);
    let summary = &r["sessions_summary"];
    // The server's own lateness was scraped; on a loaded test machine a few packets may leave
    // more than 50 ms late, but not one in a hundred.
    let late = summary["server_late_packets"].as_f64().expect("the server's late packets");
    let packets = summary["bytes"].as_f64().unwrap() / 1316.0;
    assert!(late <= 0.01 * packets, "{late} of {packets} packets late: {summary:#}");
    assert_eq!(summary["sessions_later_than_buffer"], 0, "{summary:#}");
    for s in r["sessions"].as_array().unwrap().iter().filter(|s| s["outcome"] == "complete") {
        let late = s["lateness_max_ms"].as_f64().unwrap();
        assert!((0.0..500.0).contains(&late), "{s:#}");
    }

    // A search that cannot run is refused, and says why: the stderr of `bench demo ARGS`.
    let refused = |name: &str, args: &[&str]| {
        let res = run(
            Command::new(bin())
                .args(["bench", &server.url("demo"), "--find-nmax"])
                .args(args)
                .arg("--out")
                .arg(dir.path().join(name)),
            30,
        );
        let err = String::from_utf8_lossy(&res.stderr).into_owned();
        assert!(!res.status.success(), "{err}");
        err
    };
    // A trial shorter than the object, naming it.
    let err = refused("short", &["--trial", "5"]);
    assert!(err.contains("--trial 5 s is shorter than") && err.contains("/demo (12.0 s)"), "{err}");
    // A --duration that cannot hold one trial.
    let err = refused("brief", &["--buffer-ms", "1000", "--duration", "10"]);
    assert!(err.contains("--duration 10 s cannot hold one --find-nmax trial of 16 s"), "{err}");

    // The independent client: three sessions of each object, every packet within 500 ms of
    // its stream's schedule.
    let probe = rtsp_probe();
    for url in [server.url("demo"), server.url("h264_aac")] {
        let res = run(Command::new(&probe).args([&url, "3", "6", "500"]), 30);
        let text = String::from_utf8_lossy(&res.stdout);
        eprintln!("{url}:\n{text}{}", String::from_utf8_lossy(&res.stderr));
        assert!(res.status.success(), "{url}: {text}");
        assert!(
            text.contains("rtsp-probe: 3 sessions") && text.contains(" 0 over 500 ms"),
            "{text}"
        );
    }
}

/// Live viewers' N_max (`--publish`): every trial publishes a feed of its own (ffmpeg over SRT,
/// in real time, `live{trial}`), its N viewers join once it is described and watch it whole to
/// its BYE, and the trial ends with the feed; each feed is recorded. Without `--trial` the
/// search is refused: a feed's length is unknown before it ends.
#[test]
fn a_live_nmax_search_publishes_a_feed_per_trial_watched_whole() {
    require("ffmpeg");
    let src = media_fixture("h264_aac.mp4");
    let dir = tempdir();
    let config = "[live]\nsrt_listen = \"127.0.0.1:0\"\n";
    let server = Server::start(
        &dir.path().join("store"),
        ServeOptions { no_demo: true, config: Some(config), ..ServeOptions::default() },
    );
    let srt = server.srt.expect("SRT address");
    // Each feed the clip's first 5 s, in real time.
    let publish = format!(
        "ffmpeg -nostdin -v error -re -t 5 -i {} -map 0 -c copy -f mpegts \
         'srt://{srt}?streamid=publish:live{{trial}}&pkt_size=1316'",
        src.display()
    );
    let url = server.url("live{trial}");
    let out = dir.path().join("live");
    let search = ["--find-nmax", "--nmax-from", "2", "--max-clients", "4", "--buffer-ms", "1000"];
    let r = bench_url(
        &server,
        &url,
        &out,
        &[&search[..], &["--publish", &publish, "--trial", "30"]].concat(),
        150,
    );
    let trials: Vec<(u64, bool)> = r["trials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["n"].as_u64().unwrap(), t["pass"].as_bool().unwrap()))
        .collect();
    assert_eq!(trials, [(2, true), (4, true)], "{:#}", r["per_n"]);
    assert_eq!(r["n_max"], 4);
    assert_eq!(r["parameters"]["publish"], publish.as_str());
    let sessions = r["sessions"].as_array().unwrap();
    let on = |name: &str| sessions.iter().filter(|s| s["url"] == server.url(name)).count();
    assert_eq!((sessions.len(), on("live1"), on("live2")), (6, 2, 4), "{sessions:#?}");
    for s in sessions {
        // The whole 5 s feed from its first seek point (the clip's are a second apart), to
        // the BYE; the trial ends with it, not at its 30 s bound.
        let (media, span) = (s["media_s"].as_f64().unwrap(), s["end_s"].as_f64().unwrap());
        let span = span - s["start_s"].as_f64().unwrap();
        assert!(s["outcome"] == "complete" && s["lost"] == 0, "{s:#}");
        assert!(media > 3.5 && span < 15.0, "{s:#}");
    }
    let objects = server.http_get("/api/v1/objects");
    assert!(objects.contains("\"live1\"") && objects.contains("\"live2\""), "{objects}");

    let res = run(
        Command::new(bin())
            .args(["bench", &url, "--publish", &publish, "--find-nmax", "--out"])
            .arg(dir.path().join("no-trial")),
        30,
    );
    let err = String::from_utf8_lossy(&res.stderr);
    assert!(!res.status.success() && err.contains("--publish with --find-nmax needs --trial"));
    server.stop();
}

/// XTREAM Fig. 5's goal, end to end: a start's latency does not grow with what the disk is
/// doing. The demo in 64 KiB blocks on one emulated disk so slow that a read takes about 300 ms
/// (seek 300 ms, 4 MiB/s). The server keeps every object's first block in memory
/// (`sched.resident_mib`, on by default), read once in the disk's idle time. Then three staggered
/// clients start at once (`--stagger`: client 0 from the beginning, the others from 62 % and
/// 24 % in): the two seeks wait for the disk, one read and then the other's, while client 0's
/// PLAY gets its first packet at once, from memory, whatever the disk is doing.
#[test]
fn a_start_from_the_beginning_waits_for_no_disk() {
    let dir = tempdir();
    let data = dir.path().join("store");
    let disk = format!("{},seek_ms=300,rate_mib_s=4", dir.path().join("d0").display());
    let out = run(
        Command::new(bin())
            .args(["ingest", "--data"])
            .arg(&data)
            .args(["--disk", &disk, "--block-size-kib", "64"])
            .arg(demo()),
        120,
    );
    assert!(out.status.success(), "ingest: {}", String::from_utf8_lossy(&out.stderr));
    let config = Some("[sched]\nadmission = \"off\"\n");
    let server = Server::start(&data, ServeOptions { config, ..ServeOptions::default() });
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.metric("isochron_resident_reads_total") < 1.0 {
        assert!(Instant::now() < deadline, "no first block read:\n{}", server.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(server.metric("isochron_resident_objects"), 1.0);
    // The read issued takes about 316 ms.
    std::thread::sleep(Duration::from_millis(800));
    let reads = server.metric("isochron_reads_total");

    let report = dir.path().join("report");
    let r = bench(&server, &report, &["--clients", "3", "--stagger", "--duration", "4"], 60);
    let first = |client: u64| {
        let s = r["sessions"].as_array().unwrap().iter().find(|s| s["client"] == client);
        let s = s.unwrap_or_else(|| panic!("no session of client {client}: {r:#}"));
        s["start_latency_ms"].as_f64().unwrap_or_else(|| panic!("no start latency: {s:#}"))
    };
    let (from_start, seeks) = (first(0), [first(1), first(2)]);
    eprintln!("start latency: {from_start:.1} ms from the beginning, {seeks:?} ms for the seeks");
    assert!(seeks.iter().all(|ms| *ms > 200.0), "a seek waits for a read: {seeks:?}");
    assert!(from_start < 150.0, "from the beginning: {from_start:.1} ms\n{}", server.log());
    // The seeks read from the disk; nothing read block 0 again.
    assert!(server.metric("isochron_reads_total") > reads);
    assert_eq!(server.metric("isochron_resident_reads_total"), 1.0);
}
