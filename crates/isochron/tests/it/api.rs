//! The HTTP API and `/metrics` against a real server while streams play: the counters move, the
//! JSON endpoints agree with the sessions the clients opened, errors are JSON with the right
//! status, and the exposition keeps the names the other tests and `isochron bench` read.

#![allow(clippy::print_stderr)] // tests report what they observed on stderr

use crate::common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use isochron_loadgen::Transport;

/// Every unlabelled and labelled sample of `/metrics`, keyed by its series text
/// (`name` or `name{labels}`).
fn samples(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// A request to the server's HTTP API: `(status, body)`.
fn http(server: &Server, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(server.http).expect("connect HTTP");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let body = body.unwrap_or("");
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    let mut resp = String::new();
    s.read_to_string(&mut resp).expect("read");
    let status = resp.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, resp.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default())
}

fn json(server: &Server, path: &str) -> serde_json::Value {
    let text = server.http_get(path);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}: {text}"))
}

#[test]
fn metrics_and_json_move_while_streams_play() {
    let _load = load(weight::LIGHT);
    let vbr = fixture("vbr20");
    let (_dir, server) = serve_fixtures(&[&vbr], None);
    let rt = runtime();
    let url = server.url("vbr20");
    // Three sessions of the 20 s clip (about 4 Mb/s: a 1 MiB block every 2 s), over both
    // transports, received in the background.
    let clients = rt.block_on(async {
        let mut tasks = Vec::new();
        for transport in [Transport::Udp, Transport::Tcp, Transport::Udp] {
            let (mut c, _) = start_play(&url, transport).await;
            tasks.push(tokio::spawn(async move {
                // Until the test is done with the streams (no BYE by then: an error, ignored).
                let got = c.collect(Duration::from_secs(5), Duration::from_secs(8)).await;
                got.map_or_else(|e| e.to_string(), |c| c.packets.len().to_string())
            }));
        }
        tasks
    });
    std::thread::sleep(Duration::from_millis(1500));
    let first = samples(&server.http_get("/metrics"));
    let sessions = json(&server, "/api/v1/sessions");
    std::thread::sleep(Duration::from_secs(3));
    let text = server.http_get("/metrics");
    let second = samples(&text);
    let m = |s: &HashMap<String, f64>, k: &str| {
        *s.get(k).unwrap_or_else(|| panic!("no {k} in /metrics:\n{text}"))
    };

    // The counters moved while the streams played.
    for k in ["isochron_packets_sent_total", "isochron_payload_bytes_sent_total"] {
        eprintln!("{k}: {} -> {}", m(&first, k), m(&second, k));
        assert!(m(&second, k) > m(&first, k), "{k} did not grow");
    }
    let served = |s: &HashMap<String, f64>| {
        m(s, "isochron_disk_bytes_total") + m(s, "isochron_cache_bytes_total")
    };
    eprintln!("B_disk + B_cache: {} -> {}", served(&first), served(&second));
    assert!(served(&second) > served(&first), "no block bytes delivered between the samples");
    assert!(served(&second) > 0.0);
    // The one disk read the clip's blocks; sessions started together share them in the cache.
    let disk0 = m(&second, "isochron_disk_read_bytes_total{disk=\"0\"}");
    eprintln!("disk 0 read {disk0} bytes; B_disk {}", m(&second, "isochron_disk_bytes_total"));
    assert!(disk0 > 0.0);
    assert!(
        m(&second, "isochron_cache_hits_total") + m(&second, "isochron_cache_coalesced_total")
            > 0.0
    );
    assert!(m(&second, "isochron_cache_misses_total") > 0.0);
    assert_eq!(m(&second, "isochron_sessions"), 3.0);
    assert_eq!(m(&second, "isochron_sessions_by_state{state=\"playing\"}"), 3.0);
    assert_eq!(m(&second, "isochron_admission_accepts_total"), 3.0);
    assert_eq!(m(&second, "isochron_admission_rejects_total"), 0.0);
    assert_eq!(m(&second, "isochron_admission_rejects_by_reason_total{reason=\"bandwidth\"}"), 0.0);
    assert_eq!(m(&second, "isochron_missed_deadlines_total"), 0.0);
    assert!(second.contains_key("isochron_disk_queue_depth{disk=\"0\"}"));
    assert_eq!(m(&second, "isochron_reorg_state{state=\"idle\"}"), 1.0);
    assert_eq!(m(&second, "isochron_reorg_remaining_blocks"), 0.0);
    // The helpers of the other tests still find the unlabelled samples.
    assert_eq!(server.metric("isochron_admission_rejects_total"), 0.0);
    assert!(text.contains("# TYPE isochron_disk_read_bytes_total counter\n"));

    // The JSON API agrees.
    let sessions = sessions.as_array().expect("sessions array");
    assert_eq!(sessions.len(), 3);
    for s in sessions {
        assert_eq!(s["object"], "vbr20");
        assert_eq!(s["state"], "playing");
        assert!(s["client"].as_str().is_some_and(|c| c.starts_with("127.0.0.1:")), "{s}");
        assert!(s["bitrate_bps"].as_u64().is_some_and(|b| b > 0));
    }
    let o = json(&server, "/api/v1/overview");
    assert_eq!(o["sessions"].as_array().unwrap().len(), 3);
    for s in o["sessions"].as_array().unwrap() {
        assert!(s["packets_sent"].as_u64().unwrap() > 0, "{s}");
        assert!(s["position_s"].as_f64().unwrap() > 0.0, "{s}");
        assert!(s["blocks_delivered"].as_u64().unwrap() > 0, "{s}");
    }
    assert!(
        o["totals"]["packets_sent"].as_u64().unwrap()
            >= m(&second, "isochron_packets_sent_total") as u64
    );
    assert_eq!(o["nodes"].as_array().unwrap().len(), 1);
    assert_eq!(o["nodes"][0]["sessions"], 3);
    assert!(o["nodes"][0]["playing_bitrate_bps"].as_u64().unwrap() > 0);
    assert_eq!(o["disks"][0]["id"], 0);
    assert!(o["disks"][0]["read_bytes"].as_u64().unwrap() > 0);
    assert_eq!(o["reorg"]["state"], "idle");
    let adm = json(&server, "/api/v1/admission?limit=2");
    let decisions = adm["decisions"].as_array().unwrap();
    assert_eq!(decisions.len(), 2, "limit");
    assert!(decisions[0]["seq"].as_u64() > decisions[1]["seq"].as_u64(), "newest first");
    for d in decisions {
        assert_eq!((d["verdict"].as_str(), d["object"].as_str()), (Some("admit"), Some("vbr20")));
        assert!(d["rate_bps"].as_u64().unwrap() > 0);
    }
    assert_eq!(adm["accepts_total"], 3);
    let nodes = json(&server, "/api/v1/nodes");
    assert_eq!(nodes[0]["rtsp"], server.rtsp.to_string());
    assert!(nodes[0]["uptime_s"].as_f64().unwrap() > 0.0);
    assert_eq!(nodes[0]["disks"], serde_json::json!([0]));
    let reorg = json(&server, "/api/v1/reorg");
    assert_eq!((reorg["state"].as_str(), reorg["remaining"].as_u64()), (Some("idle"), Some(0)));
    let disks = json(&server, "/api/v1/disks");
    assert!(disks["disks"][0]["blocks"].as_u64().unwrap() > 0);
    assert_eq!(disks["reorganisation"]["state"], "idle");

    // Errors are JSON with the right status.
    for (method, path, body, want) in [
        ("GET", "/api/v1/nothing", None, 404),
        ("GET", "/api/v1/admission?limit=many", None, 400),
        ("GET", "/api/v1/overview?after=soon", None, 400),
        ("DELETE", "/api/v1/disks/x", None, 400),
        ("DELETE", "/api/v1/disks/7", None, 409),
        ("POST", "/api/v1/disks", Some("{\"path\": 1}"), 422),
    ] {
        let (status, text) = http(&server, method, path, body);
        assert_eq!(status, want, "{method} {path}: {text}");
        let v: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{method} {path}: {text}");
        eprintln!("{method} {path}: {status} {text}");
    }

    let got: Vec<String> = rt.block_on(async {
        let mut v = Vec::new();
        for t in clients {
            v.push(t.await.unwrap());
        }
        v
    });
    eprintln!("clients: {got:?}");
    server.stop();
}

#[test]
fn the_cli_reports_the_servers_json_errors() {
    let _load = load(weight::LIGHT);
    let (_dir, server) = serve_fixtures(&[], None);
    let out = run(
        std::process::Command::new(bin())
            .args(["disk", "remove", "9", "--server"])
            .arg(format!("http://{}", server.http)),
        60,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "removing an unknown disk succeeded");
    assert!(stderr.contains("409") && stderr.contains("disk"), "{stderr}");
    eprintln!("{stderr}");
    server.stop();
}
