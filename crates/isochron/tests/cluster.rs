//! A cluster of three nodes, each in its own network namespace with its own address (veth to a
//! bridge, `isochron_loadgen::testbed`), on a 3-member etcd in the root namespace; the clients
//! in a fourth namespace. Yima §2.2's bipartite delivery to isochron's own client (packets from
//! every node's address, byte-exact), and `auto` delivery (relay) to ffmpeg, GStreamer and VLC
//! through any node, over UDP and TCP. Bad input: a node name already live, an unreachable etcd,
//! a block size other than the cluster's — each a clear error that changes nothing.

#![allow(clippy::print_stderr)]

mod common;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{assert_same_bytes, bin, demo, require, run};
use isochron_etcd::testing::{ClusterOptions, EtcdCluster};
use isochron_loadgen::testbed::{Host, Testbed};

/// One node: its namespace, its process, its data directory.
struct Node {
    host: Host,
    child: Child,
    name: String,
}

impl Node {
    fn rtsp(&self, object: &str) -> String {
        format!("rtsp://{}:8554/{object}", self.host.ip)
    }

    fn http(&self) -> String {
        format!("http://{}:8080", self.host.ip)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Cluster {
    nodes: Vec<Node>,
    client: Host,
    etcd_urls: String,
    dir: tempfile::TempDir,
    // Dropped last: the namespaces outlive the processes in them.
    _etcd: EtcdCluster,
    _bed: Testbed,
}

/// 64 KiB blocks, so that the 12 s demo clip has blocks on every node.
const CONFIG: &str = "[store]\nblock_size_kib = 64\nseed_demo = false\n";

fn serve_cmd(host: &Host, dir: &Path, name: &str, etcd: &str, config: &Path) -> Command {
    let mut c = host.command(bin());
    c.args(["serve", "--config"])
        .arg(config)
        .arg("--data")
        .arg(dir.join(name))
        .args(["--rtsp", &format!("{}:8554", host.ip)])
        .args(["--http", &format!("{}:8080", host.ip)])
        .args(["--rtp-port", "0", "--etcd", etcd, "--node", name, "--disk", "d0"])
        .env("RUST_LOG", "info");
    c
}

fn wait_http(url: &str, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if ureq::get(&format!("{url}/healthz")).call().is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

fn start_cluster() -> Cluster {
    if let Err(why) = Testbed::available() {
        assert!(std::env::var_os("CI").is_none(), "the cluster test needs root in CI: {why}");
        eprintln!("skipping: {why}");
        std::process::exit(0);
    }
    let bed = Testbed::new("cl").expect("testbed");
    let etcd = EtcdCluster::start_with(ClusterOptions {
        members: 3,
        extra_client_ip: Some(IpAddr::V4(bed.host_ip())),
        ..ClusterOptions::default()
    })
    .expect("3-member etcd");
    let etcd_urls = etcd.extra_endpoints().join(",");
    let dir = common::tempdir();
    let config = dir.path().join("cluster.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let mut nodes = Vec::new();
    for i in 1..=3 {
        let name = format!("n{i}");
        let host = bed.add_host(&name).expect("host");
        let log = std::fs::File::create(dir.path().join(format!("{name}.log"))).unwrap();
        let child = serve_cmd(&host, dir.path(), &name, &etcd_urls, &config)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("isochron serve");
        let node = Node { host, child, name };
        // One at a time: the first creates the store, the others join it.
        assert!(wait_http(&node.http(), Duration::from_secs(20)), "{} did not start", node.name);
        nodes.push(node);
    }
    // Every node sees every other as up before the cluster is used.
    for n in &nodes {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let body = ureq::get(&format!("{}/api/v1/nodes", n.http()))
                .call()
                .ok()
                .and_then(|r| r.into_body().read_to_string().ok())
                .unwrap_or_default();
            if body.matches("\"state\":\"up\"").count() == 3 {
                break;
            }
            assert!(Instant::now() < deadline, "{} never saw three nodes up: {body}", n.name);
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let client = bed.add_host("client").expect("client host");
    Cluster { nodes, client, etcd_urls, dir, _etcd: etcd, _bed: bed }
}

impl Cluster {
    fn log(&self, node: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{node}.log"))).unwrap_or_default()
    }

    fn logs(&self) -> String {
        self.nodes.iter().map(|n| format!("--- {}\n{}", n.name, self.log(&n.name))).collect()
    }

    /// Ingests the demo through node `i` (from its own namespace: writes are open to cluster
    /// members and loopback only) and waits until every node lists it.
    fn ingest_demo(&self, i: usize) {
        let node = &self.nodes[i];
        let out = run(
            node.host.command(bin()).args(["ingest", "--server", &node.http()]).arg(demo()),
            60,
        );
        assert!(out.status.success(), "ingest: {}", String::from_utf8_lossy(&out.stderr));
        for n in &self.nodes {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let body = ureq::get(&format!("{}/api/v1/objects", n.http()))
                    .call()
                    .ok()
                    .and_then(|r| r.into_body().read_to_string().ok())
                    .unwrap_or_default();
                if body.contains("\"demo\"") {
                    break;
                }
                assert!(Instant::now() < deadline, "{} never listed demo", n.name);
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    fn client_cmd(&self, program: &str) -> Command {
        self.client.command(program)
    }
}

fn tmp(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

#[test]
fn three_nodes_serve_bipartite_to_isochron_and_relay_to_standard_players() {
    for t in ["ffmpeg", "gst-launch-1.0", "cvlc", "runuser"] {
        require(t);
    }
    let c = start_cluster();
    let d = c.dir.path();
    c.ingest_demo(1);
    let want = std::fs::read(demo()).unwrap();

    // Every block on its owner: each node's disk holds some of the object's blocks.
    for n in &c.nodes {
        let blocks = walk(&d.join(&n.name).join("d0").join("blocks"));
        assert!(blocks > 0, "node {} holds none of the blocks\n{}", n.name, c.logs());
    }

    // isochron's own client: bipartite, packets from all three node addresses, byte-exact.
    let out_ts = tmp(d, "play.ts");
    let out = run(
        c.client_cmd(bin())
            .args(["play", &c.nodes[0].rtsp("demo"), "--json", "--timeout", "60", "--out"])
            .arg(&out_ts),
        90,
    );
    assert!(out.status.success(), "play: {}\n{}", String::from_utf8_lossy(&out.stderr), c.logs());
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("play --json");
    let sources: Vec<String> = summary["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["address"].as_str().unwrap().split(':').next().unwrap().to_owned())
        .collect();
    for n in &c.nodes {
        assert!(
            sources.contains(&n.host.ip.to_string()),
            "no packets from {} ({}): {summary}",
            n.name,
            n.host.ip
        );
    }
    assert_eq!(summary["lost"], 0, "{summary}");
    assert_same_bytes(&std::fs::read(&out_ts).unwrap(), &want, "isochron play, bipartite");

    // GStreamer (relay, as auto picks for it) through node 2 over UDP and node 3 over TCP:
    // byte-exact.
    for (node, transport) in [(1, "udp"), (2, "tcp")] {
        let path = tmp(d, &format!("gst-{transport}.ts"));
        let res = run(
            c.client_cmd("gst-launch-1.0").args([
                "-q",
                "-e",
                "rtspsrc",
                &format!("location={}", c.nodes[node].rtsp("demo")),
                &format!("protocols={transport}"),
                "latency=2000",
                "!",
                "rtpmp2tdepay",
                "!",
                "filesink",
                &format!("location={}", path.display()),
            ]),
            60,
        );
        let got = std::fs::read(&path).unwrap_or_default();
        assert!(res.status.success(), "gst {transport}: {}", String::from_utf8_lossy(&res.stderr));
        assert_same_bytes(
            &got,
            &want,
            &format!("GStreamer {transport} via {}", c.nodes[node].name),
        );
    }

    // ffmpeg through node 1 (UDP) and node 3 (TCP): decodes to the end without an error.
    for (node, transport) in [(0, "udp"), (2, "tcp")] {
        let res = run(
            c.client_cmd("ffmpeg").args([
                "-v",
                "error",
                "-rtsp_transport",
                transport,
                "-i",
                &c.nodes[node].rtsp("demo"),
                "-f",
                "null",
                "-",
            ]),
            60,
        );
        let err = String::from_utf8_lossy(&res.stderr);
        assert!(res.status.success() && err.trim().is_empty(), "ffmpeg {transport}: {err}");
    }

    // VLC through node 2 (its SAT>IP module, as in tests/players.rs): to the end, byte-exact.
    let home = tempfile::Builder::new().prefix("isochron-vlc-").tempdir().unwrap();
    let _ = Command::new("chmod").arg("777").arg(home.path()).status();
    let dump = home.path().join("vlc.ts");
    let res = run(
        c.client_cmd("runuser")
            .args(["-u", "nobody", "--", "env"])
            .arg(format!("HOME={}", home.path().display()))
            .args(["cvlc", "-I", "dummy", "--play-and-exit", "--demux", "dump", "--demuxdump-file"])
            .arg(&dump)
            .arg(c.nodes[1].rtsp("demo")),
        60,
    );
    assert!(res.status.success(), "vlc: {}", String::from_utf8_lossy(&res.stderr));
    assert_same_bytes(&std::fs::read(&dump).unwrap_or_default(), &want, "VLC via n2");

    // Node-to-node traffic in bipartite delivery is control only; /api/v1/nodes lists all three.
    let nodes: serde_json::Value = serde_json::from_str(
        &ureq::get(&format!("{}/api/v1/nodes", c.nodes[0].http()))
            .call()
            .unwrap()
            .into_body()
            .read_to_string()
            .unwrap(),
    )
    .unwrap();
    let names: Vec<&str> =
        nodes.as_array().unwrap().iter().map(|n| n["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["n1", "n2", "n3"], "{nodes}");
    assert!(nodes.as_array().unwrap().iter().all(|n| n["state"] == "up"), "{nodes}");

    // Node-to-node control traffic against the media bytes the nodes sent (/metrics).
    let (mut control, mut media, mut relayed) = (0.0, 0.0, 0.0);
    for n in &c.nodes {
        let text = ureq::get(&format!("{}/metrics", n.http()))
            .call()
            .unwrap()
            .into_body()
            .read_to_string()
            .unwrap();
        control += metric(&text, "isochron_cluster_control_bytes_total{direction=\"out\"}");
        media += metric(&text, "isochron_payload_bytes_sent_total");
        relayed += metric(&text, "isochron_cluster_relay_packets_total");
    }
    assert!(control > 0.0 && relayed > 0.0, "control {control} B, relayed {relayed} packets");
    assert!(control < 0.01 * media, "control {control} B is not < 1 % of media {media} B");
}

/// The value of the sample named `name` (with its labels) in a Prometheus text.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok()))
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
}

#[test]
fn bad_cluster_input_is_refused_and_changes_nothing() {
    let c = start_cluster();
    let d = c.dir.path();
    let config = d.join("cluster.toml");
    // A name already live.
    let out = run(&mut serve_cmd(&c.nodes[2].host, d, "n1", &c.etcd_urls, &config), 20);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("node n1 is already live"), "{err}");
    assert!(
        !d.join("n1").join("d0").join("blocks").read_dir().is_ok_and(|mut r| r.next().is_some())
    );
    // An unreachable etcd.
    let out =
        run(&mut serve_cmd(&c.nodes[2].host, d, "n9", "http://10.255.255.1:2379", &config), 30);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("etcd at http://10.255.255.1:2379"), "{err}");
    assert!(!d.join("n9").exists(), "nothing on disk for a node that could not start");
    // A block size other than the cluster's.
    let other = d.join("other.toml");
    std::fs::write(&other, "[store]\nblock_size_kib = 128\nseed_demo = false\n").unwrap();
    let out = run(&mut serve_cmd(&c.nodes[2].host, d, "n8", &c.etcd_urls, &other), 20);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("node n8: block size")
            && err.contains("differs from the cluster store's"),
        "{err}"
    );
    let nodes = ureq::get(&format!("{}/api/v1/nodes", c.nodes[0].http()))
        .call()
        .unwrap()
        .into_body()
        .read_to_string()
        .unwrap();
    assert!(!nodes.contains("\"n8\"") && !nodes.contains("\"n9\""), "{nodes}");
    assert!(!d.join("n8").exists(), "nothing on disk for a refused node");
}

/// Files under `dir`, recursively.
fn walk(dir: &Path) -> usize {
    let Ok(rd) = std::fs::read_dir(dir) else { return 0 };
    rd.flatten().map(|e| if e.path().is_dir() { walk(&e.path()) } else { 1 }).sum()
}
