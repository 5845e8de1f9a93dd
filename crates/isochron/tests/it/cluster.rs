//! A cluster of three nodes, each in its own network namespace with its own address (veth to a
//! bridge, `isochron_loadgen::testbed`), on a 3-member etcd in the root namespace; the clients
//! in a fourth namespace. Yima §2.2's bipartite delivery to isochron's own client (packets from
//! every node's address, byte-exact), and `auto` delivery (relay) to ffmpeg, GStreamer and VLC
//! through any node, over UDP and TCP. Bad input: a node name already live, an unreachable etcd,
//! a block size other than the cluster's — each a clear error that changes nothing. Replication
//! across nodes: two copies of every block on two nodes, a node's read failing over to the copy
//! on another node (read through its owner) and the bad copy repaired from it.

#![allow(clippy::print_stderr)]

use crate::common;

use std::io::Read as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{assert_same_bytes, bin, demo, framemd5_packets, media_fixture, require, run};
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
    /// Disks on each node (`d0`, `d1` …).
    disks: usize,
    dir: tempfile::TempDir,
    // Dropped last: the namespaces outlive the processes in them.
    etcd: EtcdCluster,
    bed: Testbed,
    // Its share of the machine (a heavy one), taken once its turn has come.
    _load: common::Load,
    // One cluster at a time: each test loads the machine's cores with four or five processes
    // and twenty streams, and players under CPU starvation are not what these tests measure.
    _serial: std::sync::MutexGuard<'static, ()>,
}

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// 64 KiB blocks, so that the 12 s demo clip has blocks on every node.
const CONFIG: &str = "[store]\nblock_size_kib = 64\nseed_demo = false\n";

fn serve_cmd(host: &Host, dir: &Path, name: &str, etcd: &str, config: &Path) -> Command {
    serve_cmd_on(host, dir, name, etcd, config, 1)
}

/// [`serve_cmd`] with `disks` disks (`d0`, `d1` …) on the node.
fn serve_cmd_on(
    host: &Host,
    dir: &Path,
    name: &str,
    etcd: &str,
    config: &Path,
    disks: usize,
) -> Command {
    let mut c = host.command(bin());
    c.args(["serve", "--config"])
        .arg(config)
        .arg("--data")
        .arg(dir.join(name))
        .args(["--rtsp", &format!("{}:8554", host.ip)])
        .args(["--http", &format!("{}:8080", host.ip)])
        .args(["--rtp-port", "0", "--etcd", etcd, "--node", name])
        // A switch's stop, where every node stopped, is worth its line when a test fails;
        // `ISOCHRON_TEST_LOG` replaces the filter when a failure needs more.
        .env(
            "RUST_LOG",
            std::env::var("ISOCHRON_TEST_LOG").unwrap_or_else(|_| {
                "info,isochron_node::core::switch=debug,isochron_server::recorder=debug".into()
            }),
        );
    for i in 0..disks {
        c.args(["--disk", &format!("d{i}")]);
    }
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

/// Starts node `name` of the cluster on `etcd` in a namespace of its own (its log in `dir`) and
/// waits until it answers HTTP.
fn spawn_node(bed: &Testbed, dir: &Path, name: &str, etcd: &str, disks: usize) -> Node {
    let host = bed.add_host(name).expect("host");
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    let child = serve_cmd_on(&host, dir, name, etcd, &dir.join("cluster.toml"), disks)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("isochron serve");
    let node = Node { host, child, name: name.to_owned() };
    assert!(wait_http(&node.http(), Duration::from_secs(20)), "{name} did not start");
    node
}

/// Polls `url` until its body satisfies `ok` (at most 10 s); `what` names the wait.
fn wait_body(url: &str, ok: impl Fn(&str) -> bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let body = ureq::get(url)
            .call()
            .ok()
            .and_then(|r| r.into_body().read_to_string().ok())
            .unwrap_or_default();
        if ok(&body) {
            return;
        }
        assert!(Instant::now() < deadline, "{url}: never {what}: {body}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn start_cluster() -> Cluster {
    start_cluster_with(CONFIG)
}

/// [`start_cluster`] with another config file.
fn start_cluster_with(config_text: &str) -> Cluster {
    start_cluster_on(config_text, 1)
}

/// [`start_cluster_with`], `disks` disks on each node.
fn start_cluster_on(config_text: &str, disks: usize) -> Cluster {
    if let Err(why) = Testbed::available() {
        panic!("the cluster tests need network namespaces (run as root): {why}");
    }
    let serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let load = common::load_first(common::weight::HEAVY);
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
    std::fs::write(&config, config_text).unwrap();
    // One at a time: the first creates the store, the others join it.
    let nodes: Vec<Node> = (1..=3)
        .map(|i| spawn_node(&bed, dir.path(), &format!("n{i}"), &etcd_urls, disks))
        .collect();
    // Every node sees every other as up before the cluster is used.
    for n in &nodes {
        let url = format!("{}/api/v1/nodes", n.http());
        wait_body(&url, |b| b.matches("\"state\":\"up\"").count() == 3, "three nodes up");
    }
    let client = bed.add_host("client").expect("client host");
    Cluster { nodes, client, etcd_urls, disks, dir, etcd, bed, _load: load, _serial: serial }
}

impl Cluster {
    /// Starts node `name` in a namespace of its own and waits until it answers HTTP.
    fn start_node(&self, name: &str) -> Node {
        spawn_node(&self.bed, self.dir.path(), name, &self.etcd_urls, self.disks)
    }

    fn log(&self, node: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{node}.log"))).unwrap_or_default()
    }

    fn logs(&self) -> String {
        self.nodes.iter().map(|n| format!("--- {}\n{}", n.name, self.log(&n.name))).collect()
    }

    /// Ingests the demo through node `i` (from its own namespace: writes are open to cluster
    /// members and loopback only) and waits until every node lists it.
    fn ingest_demo(&self, i: usize) {
        self.ingest(i, &demo());
    }

    /// Ingests `file` through node `i`; every node lists it (by its stem) when that returns.
    fn ingest(&self, i: usize, file: &Path) {
        let node = &self.nodes[i];
        let out =
            run(node.host.command(bin()).args(["ingest", "--server", &node.http()]).arg(file), 60);
        assert!(out.status.success(), "ingest: {}", String::from_utf8_lossy(&out.stderr));
        // `ingest --server` returns once every node lists the object: no waiting here.
        let name = file.file_stem().unwrap().to_str().unwrap();
        for n in &self.nodes {
            let listed = get_text(&format!("{}/api/v1/objects", n.http()));
            assert!(listed.contains(&format!("\"{name}\"")), "{} does not list {name}", n.name);
        }
    }

    fn client_cmd(&self, program: &str) -> Command {
        self.client.command(program)
    }

    /// Waits at most `limit` for `child` (killed then): whether it succeeded, and its stdout
    /// and stderr.
    fn child_output_within_full(&self, mut child: Child, limit: Duration) -> (bool, String) {
        let deadline = Instant::now() + limit;
        while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }

    /// Waits at most `limit` for `child` (killed then) and returns its stderr.
    fn child_output_within(&self, mut child: Child, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        String::from_utf8_lossy(&out.stderr).into_owned()
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

    // Every player at once (each a whole play of the 12 s demo): isochron's own client,
    // bipartite, packets from all three node addresses; GStreamer (relay, as auto picks for it)
    // through node 2 over UDP and node 3 over TCP; ffmpeg through node 1 (UDP) and node 3 (TCP);
    // VLC through node 2 (its SAT>IP module, as in tests/it/players.rs). Each byte-exact or
    // decoded to the end without an error.
    let home = tempfile::Builder::new().prefix("isochron-vlc-").tempdir().unwrap();
    let _ = Command::new("chmod").arg("777").arg(home.path()).status();
    std::thread::scope(|s| {
        s.spawn(|| {
            let out_ts = tmp(d, "play.ts");
            let summary =
                play_summary(&c, spawn_play(&c, &c.nodes[0].rtsp("demo"), &out_ts), "play");
            let sources = source_ips(&summary);
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
        });
        for (node, transport) in [(1, "udp"), (2, "tcp")] {
            let want = &want;
            let c = &c;
            s.spawn(move || {
                let path = tmp(d, &format!("gst-{transport}.ts"));
                let res = run(
                    c.client_cmd("gst-launch-1.0").args([
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
                if let Err(e) = common::gst_ended_cleanly(&res) {
                    panic!("gst {transport}: {e}\n{}", c.logs());
                }
                assert_same_bytes(
                    &got,
                    want,
                    &format!("GStreamer {transport} via {}", c.nodes[node].name),
                );
            });
        }
        for (node, transport) in [(0, "udp"), (2, "tcp")] {
            let c = &c;
            s.spawn(move || {
                // Packet hashes (-c copy) and a full decode. Over TCP ffmpeg neither reorders
                // nor asks again: every packet in order proves the relay's sequencing.
                let md5 = tmp(d, &format!("ffmpeg-{transport}.md5"));
                let res = run(
                    c.client_cmd("ffmpeg")
                        .args(["-nostdin", "-v", "error", "-rtsp_transport", transport, "-i"])
                        .arg(c.nodes[node].rtsp("demo"))
                        .args(["-map", "0", "-c", "copy", "-f", "framemd5", "-y"])
                        .arg(&md5)
                        .args(["-map", "0", "-f", "null", "-"]),
                    60,
                );
                let err = String::from_utf8_lossy(&res.stderr);
                assert!(
                    res.status.success() && err.trim().is_empty(),
                    "ffmpeg {transport} through {}: {err}\n{}",
                    c.nodes[node].name,
                    c.logs()
                );
                if transport == "tcp" {
                    let got = framemd5_packets(&std::fs::read_to_string(&md5).unwrap());
                    let want = common::source_framemd5(&demo());
                    if let Err(e) = common::check_ffmpeg_copy(&got, &want) {
                        panic!("ffmpeg over TCP relayed through n3: {e}\n{}", c.logs());
                    }
                }
            });
        }
        // Twenty relayed RTSP/TCP streams through n2 at once: isochron's client counts a
        // packet that came after one numbered above it; the relay releases in sequence order,
        // once each.
        for k in 0..20 {
            let (c, want) = (&c, &want);
            s.spawn(move || {
                let out_ts = tmp(d, &format!("tcp-{k}.ts"));
                let tcp = ["--transport", "tcp"];
                let child = spawn_play_with(c, &c.nodes[1].rtsp("demo"), &tcp, &out_ts);
                let summary = play_summary(c, child, &format!("play over TCP {k}"));
                for key in ["reordered", "duplicates", "lost", "late"] {
                    assert_eq!(summary[key], 0, "play over TCP {k}: {key}: {summary}");
                }
                assert_same_bytes(&std::fs::read(&out_ts).unwrap(), want, "play over TCP");
            });
        }
        s.spawn(|| {
            let dump = home.path().join("vlc.ts");
            let res = run(
                c.client_cmd("runuser")
                    .args(["-u", "nobody", "--", "env"])
                    .arg(format!("HOME={}", home.path().display()))
                    .args([
                        "cvlc",
                        "-I",
                        "dummy",
                        "--play-and-exit",
                        "--demux",
                        "dump",
                        "--demuxdump-file",
                    ])
                    .arg(&dump)
                    .arg(c.nodes[1].rtsp("demo")),
                60,
            );
            assert!(res.status.success(), "vlc: {}", String::from_utf8_lossy(&res.stderr));
            assert_same_bytes(&std::fs::read(&dump).unwrap_or_default(), &want, "VLC via n2");
        });
    });

    // HTTP delivery through any node: blocks on other nodes' disks are read there.
    let mut body = Vec::new();
    ureq::get(&format!("{}/objects/demo", c.nodes[2].http()))
        .call()
        .unwrap()
        .into_body()
        .into_reader()
        .read_to_end(&mut body)
        .unwrap();
    assert_same_bytes(&body, &want, "GET /objects/demo via n3");

    // Node-to-node traffic in bipartite delivery is control only; /api/v1/nodes lists all three.
    let nodes: serde_json::Value = get_json(&format!("{}/api/v1/nodes", c.nodes[0].http()));
    let names: Vec<&str> =
        nodes.as_array().unwrap().iter().map(|n| n["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["n1", "n2", "n3"], "{nodes}");
    assert!(nodes.as_array().unwrap().iter().all(|n| n["state"] == "up"), "{nodes}");
    // Each node's own figures, from every node's answer: all three sent media and control.
    for n in nodes.as_array().unwrap() {
        let local = &n["local"];
        assert_eq!(local["name"], n["name"], "{nodes}");
        assert!(local["payload_bytes_sent"].as_u64() > Some(0), "{nodes}");
        assert!(local["control_bytes_sent"].as_u64() > Some(0), "{nodes}");
        assert_eq!(local["disks"], n["disks"], "{nodes}");
    }
    // The dashboard's overview charts every node's send and control bandwidth.
    let overview = get_json(&format!("{}/api/v1/overview", c.nodes[1].http()));
    let mut charted: Vec<&str> =
        overview["nodes"].as_array().unwrap().iter().map(|n| n["name"].as_str().unwrap()).collect();
    charted.sort_unstable();
    assert_eq!(charted, ["n1", "n2", "n3"], "{overview}");

    // Node-to-node control traffic against the media bytes the nodes sent (/metrics).
    let (mut control, mut media, mut relayed) = (0.0, 0.0, 0.0);
    for n in &c.nodes {
        let text = get_text(&format!("{}/metrics", n.http()));
        control += metric(&text, "isochron_cluster_control_bytes_total{direction=\"out\"}");
        media += metric(&text, "isochron_payload_bytes_sent_total");
        relayed += metric(&text, "isochron_cluster_relay_packets_total");
    }
    assert!(control > 0.0 && relayed > 0.0, "control {control} B, relayed {relayed} packets");
    assert!(control < 0.01 * media, "control {control} B is not < 1 % of media {media} B");

    // An MP4 (H.264 + AAC, two RTP streams) over the cluster: ffmpeg records every frame through
    // node 2 over UDP and node 3 over TCP (each node's packets of both tracks, one numbering per
    // track), and the original file comes back over HTTP from blocks on every node.
    let mp4 = media_fixture("h264_aac.mp4");
    c.ingest(0, &mp4);
    let frames = |path: &Path| -> Vec<String> {
        let out = run(
            Command::new("ffmpeg")
                .args(["-nostdin", "-v", "error", "-i"])
                .arg(path)
                .args(["-map", "0:v:0", "-f", "framemd5", "-"]),
            120,
        );
        framemd5_packets(&String::from_utf8_lossy(&out.stdout)).into_iter().map(|p| p.2).collect()
    };
    let want_frames = frames(&mp4);
    std::thread::scope(|s| {
        for (node, transport) in [(1, "udp"), (2, "tcp")] {
            let (c, frames, want_frames) = (&c, &frames, &want_frames);
            s.spawn(move || {
                let rec = tmp(d, &format!("mp4-{transport}.mp4"));
                let res = run(
                    c.client_cmd("timeout")
                        .args(["-k", "5", "60", "ffmpeg", "-nostdin", "-v", "error"])
                        .args([
                            "-rtsp_transport",
                            transport,
                            "-i",
                            &c.nodes[node].rtsp("h264_aac"),
                            "-map",
                            "0",
                            "-c",
                            "copy",
                            "-y",
                        ])
                        .arg(&rec),
                    70,
                );
                assert!(
                    res.status.success(),
                    "ffmpeg mp4 {transport}: {}\n{}",
                    String::from_utf8_lossy(&res.stderr),
                    c.logs()
                );
                let got = frames(&rec);
                // A player's lost first frame aside (ffmpeg with B-frames,
                // docs/design/native-rtp.md).
                assert!(
                    got.len() + 1 >= want_frames.len()
                        && want_frames.windows(got.len()).any(|w| w == got),
                    "MP4 via {} over {transport}: {} of {} frames\n{}",
                    c.nodes[node].name,
                    got.len(),
                    want_frames.len(),
                    c.logs()
                );
            });
        }
    });
    let mut body = Vec::new();
    ureq::get(&format!("{}/objects/h264_aac", c.nodes[2].http()))
        .call()
        .unwrap()
        .into_body()
        .with_config()
        .limit(64 << 20)
        .reader()
        .read_to_end(&mut body)
        .unwrap();
    assert_same_bytes(&body, &std::fs::read(&mp4).unwrap(), "GET /objects/h264_aac via n3");
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
    let nodes = get_text(&format!("{}/api/v1/nodes", c.nodes[0].http()));
    // A number of copies other than the cluster's (1).
    let copies = d.join("copies.toml");
    std::fs::write(&copies, "[store]\nblock_size_kib = 64\nseed_demo = false\nreplication = 2\n")
        .unwrap();
    let out = run(&mut serve_cmd(&c.nodes[2].host, d, "n7", &c.etcd_urls, &copies), 20);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("keeps 1 copy of every block")
            && err.contains("store.replication"),
        "{err}"
    );
    assert!(!nodes.contains("\"n8\"") && !nodes.contains("\"n9\""), "{nodes}");
    assert!(!d.join("n8").exists(), "nothing on disk for a refused node");
    assert!(!d.join("n7").exists(), "nothing on disk for a refused node");
}

fn get_json(url: &str) -> serde_json::Value {
    serde_json::from_str(&get_text(url)).unwrap()
}

/// The body of `GET url`, as text.
fn get_text(url: &str) -> String {
    ureq::get(url).call().unwrap().into_body().read_to_string().unwrap()
}

/// Block files on the node's disks.
fn blocks_on(c: &Cluster, node: &str) -> usize {
    (0..c.disks).map(|i| walk(&c.dir.path().join(node).join(format!("d{i}")).join("blocks"))).sum()
}

/// Plays `url` with isochron's client in the client namespace, writing `out`.
fn spawn_play(c: &Cluster, url: &str, out: &Path) -> Child {
    spawn_play_with(c, url, &[], out)
}

/// [`spawn_play`] with more `isochron play` options (`--transport tcp`).
fn spawn_play_with(c: &Cluster, url: &str, options: &[&str], out: &Path) -> Child {
    c.client_cmd(bin())
        .args(["play", url, "--json", "--timeout", "90"])
        .args(options)
        .arg("--out")
        .arg(out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("isochron play")
}

/// Waits for a play that must exit 0: its summary. A play that fails prints its summary all
/// the same (what it received, from which nodes): the failure shows it.
fn play_summary(c: &Cluster, child: Child, what: &str) -> serde_json::Value {
    output_summary(c, &child.wait_with_output().unwrap(), what)
}

/// [`play_summary`] of a play already waited for.
fn output_summary(c: &Cluster, res: &Output, what: &str) -> serde_json::Value {
    assert!(
        res.status.success(),
        "{what}: {}\nits summary: {}\n{}",
        String::from_utf8_lossy(&res.stderr),
        String::from_utf8_lossy(&res.stdout),
        c.logs()
    );
    serde_json::from_slice(&res.stdout).expect("play --json")
}

/// Waits for a play: its summary, checked clean (no loss, no starvation) and byte-exact.
fn check_play(c: &Cluster, child: Child, out: &Path, want: &[u8], what: &str) -> serde_json::Value {
    check_output(c, &child.wait_with_output().unwrap(), out, want, what)
}

/// [`check_play`] of a play already waited for.
fn check_output(
    c: &Cluster,
    res: &Output,
    out: &Path,
    want: &[u8],
    what: &str,
) -> serde_json::Value {
    let summary = output_summary(c, res, what);
    assert_eq!(summary["lost"], 0, "{what}: {summary}\n{}", c.logs());
    assert_eq!(summary["starvations"], 0, "{what}: the buffer ran dry: {summary}\n{}", c.logs());
    assert_same_bytes(&std::fs::read(out).unwrap(), want, what);
    summary
}

fn source_ips(summary: &serde_json::Value) -> Vec<String> {
    let mut ips: Vec<String> = summary["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["address"].as_str().unwrap().split(':').next().unwrap().to_owned())
        .collect();
    ips.sort();
    ips
}

/// Waits (30 s at most) until the reorganisation `node` coordinates (its joining) is done and
/// moved something; returns its status.
fn wait_for_reorg(c: &Cluster, node: &Node) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = get_json(&format!("{}/api/v1/reorg", node.http()));
        if r["state"] == "idle" && r["moved"].as_u64() > Some(0) && r.get("pending_epoch").is_none()
        {
            return r;
        }
        assert!(r["state"] != "failed", "reorganisation failed: {r}\n{}", c.logs());
        assert!(Instant::now() < deadline, "reorganisation not done: {r}\n{}", c.logs());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Yima §2.1 with SCADDAR: a node is a group of disks. A fourth node joins while ten streams of
/// a VBR clip play (its two disks are one SCADDAR addition; blocks move to it from every node in
/// the disks' non-real-time share), then is removed the same way (`isochron node remove`) while
/// ten more play. Every stream is byte-exact to its last byte and ended by the server's BYE:
/// blocks that moved under a running session are still sent, by someone, on time. With one
/// copy, a node killed then cuts a stream: `isochron play` exits non-zero with the reason.
fn a_fourth_node_joins_and_leaves_while_streams_play(replication: usize) {
    let clip = common::fixture("vbr12");
    let config =
        format!("[store]\nblock_size_kib = 64\nseed_demo = false\nreplication = {replication}\n");
    let mut c = start_cluster_on(&config, 2);
    let d = c.dir.path().to_owned();
    c.ingest(0, &clip);
    c.ingest_demo(1);
    let want = std::fs::read(&clip).unwrap();
    let objects = get_json(&format!("{}/api/v1/objects", c.nodes[0].http()));
    let blocks: u64 =
        objects.as_array().unwrap().iter().map(|o| o["blocks"].as_u64().unwrap()).sum();
    let total_blocks = blocks as usize * replication;
    let before: usize = c.nodes.iter().map(|n| blocks_on(&c, &n.name)).sum();
    assert_eq!(before, total_blocks, "{replication} copies of every block");
    let check_all = |c: &Cluster, plays: Vec<(Child, PathBuf)>, what: &str| {
        let mut summaries = Vec::new();
        for (k, (child, out)) in plays.into_iter().enumerate() {
            let what = format!("stream {k} {what} (K = {replication})");
            let summary = check_play(c, child, &out, &want, &what);
            assert_eq!(summary["ended"], "bye", "{what}: {summary}");
            summaries.push(summary);
        }
        summaries
    };

    // Ten streams through the three nodes.
    let plays: Vec<(Child, PathBuf)> = (0..10)
        .map(|k| {
            let out = d.join(format!("join-{k}.ts"));
            (spawn_play(&c, &c.nodes[k % 3].rtsp("vbr12"), &out), out)
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));

    // n4 joins: its disks are a SCADDAR addition, pending until the blocks that move are on it.
    let n4 = c.start_node("n4");
    let reorg = wait_for_reorg(&c, &n4);
    let moved = reorg["moved"].as_u64().unwrap();
    let mut plays = plays;
    let playing =
        plays.iter_mut().map(|(p, _)| p.try_wait()).filter(|w| matches!(w, Ok(None))).count();
    eprintln!("reorganisation done with {playing} of 10 streams playing: {reorg}");
    assert_eq!(playing, 10, "the reorganisation did not complete while the streams played");
    check_all(&c, plays, "during the join");

    // Once no stream reads the old placement, the moved blocks' sources are deleted: K copies
    // of every block again, `moved` of them on n4 (with K = 2 some second copies move between
    // the old nodes too: a block's copies are on distinct nodes, and n4 took some first ones).
    c.nodes.push(n4);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let on: Vec<usize> = c.nodes.iter().map(|n| blocks_on(&c, &n.name)).collect();
        let on_n4 = if replication == 1 { on[3] as u64 == moved } else { on[3] > 0 };
        if on.iter().sum::<usize>() == total_blocks && on_n4 {
            break;
        }
        assert!(Instant::now() < deadline, "sources not deleted: {on:?}\n{}", c.logs());
        std::thread::sleep(Duration::from_millis(200));
    }

    // n4 leaves: `isochron node remove` (from a member's namespace) drains it while ten new
    // streams play, some through it.
    let plays: Vec<(Child, PathBuf)> = (0..10)
        .map(|k| {
            let out = d.join(format!("remove-{k}.ts"));
            (spawn_play(&c, &c.nodes[k % 4].rtsp("vbr12"), &out), out)
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let res = run(
        c.nodes[0].host.command(bin()).args([
            "node",
            "remove",
            "n4",
            "--server",
            &c.nodes[0].http(),
            "--wait",
            "60",
        ]),
        90,
    );
    assert!(
        res.status.success(),
        "node remove: {}\n{}",
        String::from_utf8_lossy(&res.stderr),
        c.logs()
    );
    // They were planned with n4: packets from all four addresses.
    let mut all: Vec<String> = c.nodes.iter().map(|n| n.host.ip.to_string()).collect();
    all.sort();
    for s in check_all(&c, plays, "during the removal") {
        assert_eq!(source_ips(&s), all, "{s}");
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let on: Vec<usize> = c.nodes.iter().map(|n| blocks_on(&c, &n.name)).collect();
        if on.iter().sum::<usize>() == total_blocks && on[3] == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "n4 not drained: {on:?}\n{}", c.logs());
        std::thread::sleep(Duration::from_millis(200));
    }
    let nodes = get_json(&format!("{}/api/v1/nodes", c.nodes[0].http()));
    let n4 = nodes.as_array().unwrap().iter().find(|n| n["name"] == "n4").unwrap();
    assert_eq!(n4["disks"], serde_json::json!([]), "{nodes}");
    // New streams are planned without it (the short demo proves that).
    let out = d.join("after-remove.ts");
    let demo_bytes = std::fs::read(demo()).unwrap();
    let s =
        check_play(&c, spawn_play(&c, &c.nodes[0].rtsp("demo"), &out), &out, &demo_bytes, "after");
    assert!(!source_ips(&s).contains(&c.nodes[3].host.ip.to_string()), "{s}");

    // With one copy, a node's death cuts the streams it holds blocks of: the server ends them
    // with a BYE that says why, and the client exits non-zero with the reason.
    if replication == 1 {
        let out = d.join("cut.ts");
        let play = spawn_play(&c, &c.nodes[0].rtsp("demo"), &out);
        std::thread::sleep(Duration::from_secs(2));
        let n3 = &mut c.nodes[2];
        n3.child.kill().expect("SIGKILL n3");
        let _ = n3.child.wait();
        let res = play.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&res.stderr);
        assert!(!res.status.success(), "a cut stream exited 0: {err}");
        assert!(err.contains("the server ended the stream: node n3 is down"), "{err}");
        let summary: serde_json::Value = serde_json::from_slice(&res.stdout).expect("play --json");
        assert_eq!(summary["bye_reason"], "node n3 is down", "{summary}");
    }
}

#[test]
fn a_fourth_node_joins_and_leaves_while_streams_play_one_copy() {
    a_fourth_node_joins_and_leaves_while_streams_play(1);
}

#[test]
fn a_fourth_node_joins_and_leaves_while_streams_play_two_copies() {
    a_fourth_node_joins_and_leaves_while_streams_play(2);
}

/// etcd holds membership and placement, never the streams: losing one of three members changes
/// nothing; losing all of them leaves running sessions playing while new ones get 503 (with
/// `Retry-After`), and the cluster takes new sessions again once etcd is back.
#[test]
fn streams_outlive_etcd_and_new_sessions_wait_for_it() {
    require("ffmpeg");
    let mut c = start_cluster();
    let d = c.dir.path().to_owned();
    c.ingest_demo(0);
    let want = std::fs::read(demo()).unwrap();

    // One member of three killed while three streams play, and a new one starts meanwhile.
    let plays: Vec<(Child, PathBuf)> = (0..3)
        .map(|k| {
            let out = d.join(format!("member-{k}.ts"));
            (spawn_play(&c, &c.nodes[k].rtsp("demo"), &out), out)
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    c.etcd.kill(0).expect("kill an etcd member");
    let out = d.join("member-new.ts");
    let fresh = spawn_play(&c, &c.nodes[1].rtsp("demo"), &out);
    for (k, (child, out)) in plays.into_iter().enumerate() {
        check_play(&c, child, &out, &want, &format!("stream {k}, one etcd member down"));
    }
    check_play(&c, fresh, &out, &want, "a stream started with one etcd member down");
    c.etcd.restart(0).expect("restart the member");

    // All of etcd down while three streams play: they play to the end; a new PLAY gets 503.
    let plays: Vec<(Child, PathBuf)> = (0..3)
        .map(|k| {
            let out = d.join(format!("outage-{k}.ts"));
            (spawn_play(&c, &c.nodes[k].rtsp("demo"), &out), out)
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    for i in 0..3 {
        c.etcd.kill(i).expect("kill etcd");
    }
    std::thread::sleep(Duration::from_secs(2));
    let res = run(
        c.client_cmd("ffmpeg").args([
            "-v",
            "error",
            "-i",
            &c.nodes[2].rtsp("demo"),
            "-f",
            "null",
            "-",
        ]),
        30,
    );
    let err = String::from_utf8_lossy(&res.stderr);
    assert!(!res.status.success() && err.contains("503"), "ffmpeg with etcd down: {err}");
    let res = run(c.client_cmd(bin()).args(["play", &c.nodes[0].rtsp("demo"), "--json"]), 30);
    let err = String::from_utf8_lossy(&res.stderr);
    assert!(!res.status.success() && err.contains("503"), "play with etcd down: {err}");
    for (k, (child, out)) in plays.into_iter().enumerate() {
        check_play(&c, child, &out, &want, &format!("stream {k} through the etcd outage"));
    }
    assert!(c.log("n3").contains("etcd is unreachable"), "{}", c.log("n3"));

    // etcd returns: new sessions are taken again, from every node's address.
    c.etcd.restart_many(&[0, 1, 2]).expect("etcd back");
    let deadline = Instant::now() + Duration::from_secs(30);
    let summary = loop {
        let out = d.join("after-outage.ts");
        let res = run(
            c.client_cmd(bin())
                .args(["play", &c.nodes[2].rtsp("demo"), "--json", "--timeout", "60", "--out"])
                .arg(&out),
            90,
        );
        if res.status.success() {
            assert_same_bytes(&std::fs::read(&out).unwrap(), &want, "after the outage");
            break serde_json::from_slice::<serde_json::Value>(&res.stdout).unwrap();
        }
        let err = String::from_utf8_lossy(&res.stderr);
        assert!(Instant::now() < deadline, "no session after etcd came back: {err}\n{}", c.logs());
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(source_ips(&summary).len(), 3, "{summary}");
    let nodes = get_json(&format!("{}/api/v1/nodes", c.nodes[0].http()));
    assert!(nodes.as_array().unwrap().iter().all(|n| n["state"] == "up"), "{nodes}");
}

/// Files under `dir`, recursively.
fn walk(dir: &Path) -> usize {
    let Ok(rd) = std::fs::read_dir(dir) else { return 0 };
    rd.flatten().map(|e| if e.path().is_dir() { walk(&e.path()) } else { 1 }).sum()
}

/// Yima's retransmission-based error control (§2.3): the client's network loses 1 % of the UDP
/// datagrams it receives (nftables in its namespace). isochron's client asks the node that sent
/// each lost packet (an RTCP generic NACK to its RTCP port), found by that node's LSN gap and the
/// block end in the packets; every node answers from what it sent. GStreamer (relay through one
/// node, as `auto` picks for it) asks with RFC 4585 NACKs and takes the repairs in the RFC 4588
/// RTX stream the description offered it. Both end byte-exact.
#[test]
fn loss_is_repaired_by_the_node_that_sent_each_packet() {
    require("gst-launch-1.0");
    let clip = common::fixture("clip30");
    let c = start_cluster();
    let d = c.dir.path();
    c.ingest(0, &clip);
    let want = std::fs::read(&clip).unwrap();

    let gst_out = tmp(d, "gst-loss.ts");
    let gst =
        spawn_gst_with(&c, 2, "clip30", &["protocols=udp", "do-retransmission=true"], &gst_out);
    let play_out = tmp(d, "play-loss.ts");
    let play = spawn_play(&c, &c.nodes[1].rtsp("clip30"), &play_out);
    // The loss starts once both have their first packets: a receiver asks again only for the
    // gaps after the first packet it got. With the rule in place from the start, one run (of
    // two of the cluster and live modules under load) lost GStreamer's first packet for good:
    // its file 1,504 bytes short, different from TS packet 0 on.
    let started = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.len() > 0);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(started(&gst_out) && started(&play_out)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    c.client.drop_udp_percent(1).expect("nft loss rule");
    let summary = check_play(&c, play, &play_out, &want, "isochron play under 1 % loss");
    eprintln!("isochron play under 1 % loss: {summary}");
    let sources = summary["sources"].as_array().unwrap();
    assert_eq!(sources.len(), 3, "bipartite from all three nodes: {summary}");
    let lost_by_network: u64 = sources.iter().map(|s| s["lsn_gaps"].as_u64().unwrap()).sum();
    assert!(lost_by_network > 10, "1 % of ~5,000 packets should be lost: {summary}");
    assert!(summary["recovered"].as_u64().unwrap() >= lost_by_network, "{summary}");
    for s in sources {
        assert!(s["nacked"].as_u64().unwrap() > 0, "no NACK went to {}: {summary}", s["address"]);
    }

    let gst = c.child_output_within(gst, Duration::from_secs(90));
    assert_same_bytes(
        &std::fs::read(&gst_out).unwrap_or_default(),
        &want,
        &format!("GStreamer with do-retransmission under 1 % loss: {gst}"),
    );

    // Every node answered NACKs for what it sent; the relaying node (n3) also for GStreamer.
    for n in &c.nodes {
        let m = get_text(&format!("{}/metrics", n.http()));
        let resent = metric(&m, "isochron_retransmitted_packets_total");
        let nacks = metric(&m, "isochron_nacks_received_total");
        let missed = metric(&m, "isochron_retransmit_missed_total");
        eprintln!(
            "{}: {nacks} NACKs, {resent} packets resent, {missed} asked for not sent",
            n.name
        );
        assert!(resent > 0.0, "{} retransmitted nothing:\n{m}", n.name);
        assert!(nacks > 0.0, "{}", n.name);
    }
}

/// `store.replication = 2` on three nodes of one disk each: every block has its two copies on
/// two nodes. The first copy of the block at 7 s is corrupted and the first copy of the one at
/// 9.5 s deleted, each on its node's disk, before isochron's client plays (bipartite) — not
/// "1.5 s in": on a busy machine the test thread ran that late once, after the 7 s block had
/// been read, and saw one failover instead of two. The node whose
/// share reads the block fails over to the copy on another node (read through its owner in that
/// node's non-real-time share), the stream is byte-exact, and each bad copy is repaired from the
/// other node's copy.
#[test]
fn a_bad_copy_fails_over_to_the_copy_on_another_node_and_is_repaired() {
    let c =
        start_cluster_with("[store]\nblock_size_kib = 64\nseed_demo = false\nreplication = 2\n");
    let d = c.dir.path();
    c.ingest_demo(0);
    let want = std::fs::read(demo()).unwrap();

    // Where each block's copies are, from the cluster's catalog in etcd.
    let endpoints: Vec<String> = c.etcd_urls.split(',').map(str::to_owned).collect();
    let client = isochron_etcd::Client::connect(&endpoints, isochron_etcd::Timeouts::default())
        .expect("etcd");
    let catalog = isochron_etcd::EtcdCatalog::new(client, "/isochron/");
    use isochron_store::Catalog as _;
    let meta = catalog.meta().unwrap();
    assert_eq!(meta.replication, 2);
    let rec = catalog.object("demo").unwrap().expect("demo");
    let file = |disk: isochron_base::DiskId, i: u32| {
        let owner = meta.disk(disk).and_then(|r| r.owner.clone()).expect("an owner");
        d.join(owner)
            .join("d0")
            .join("blocks")
            .join(format!("{:016x}", rec.id.0))
            .join(format!("{i:08x}.blk"))
    };
    let mut total = 0;
    for i in 0..rec.block_count() {
        let r = meta.replicas_at(&rec, isochron_base::BlockIndex(i), meta.active_epoch);
        assert_eq!(r.len(), 2);
        assert_ne!(meta.node_of(r.as_slice()[0]), meta.node_of(r.as_slice()[1]), "two nodes");
        for disk in r.iter() {
            assert!(file(disk, i).is_file(), "block {i} on disk {disk}");
        }
        total += 2;
    }
    let on_disks: usize = c.nodes.iter().map(|n| blocks_on(&c, &n.name)).sum();
    assert_eq!(on_disks, total, "exactly two copies of every block");

    let at = |t: f64| {
        (0..rec.block_count())
            .rev()
            .find(|&i| rec.blocks[i as usize].first_send_time.as_secs_f64() <= t)
            .unwrap()
    };
    let (bad, gone) = (at(7.0), at(9.5));
    let primary = |i: u32| meta.replicas_at(&rec, isochron_base::BlockIndex(i), meta.active_epoch);
    let (bad_file, gone_file) =
        (file(primary(bad).primary(), bad), file(primary(gone).primary(), gone));
    let other = |i: u32| file(primary(i).as_slice()[1], i);

    let mut bytes = std::fs::read(&bad_file).unwrap();
    let mid = bytes.len() / 2;
    for b in &mut bytes[mid..mid + 64] {
        *b ^= 0xA5;
    }
    std::fs::write(&bad_file, &bytes).unwrap();
    std::fs::remove_file(&gone_file).unwrap();
    let out = tmp(d, "replicated.ts");
    let child = spawn_play(&c, &c.nodes[0].rtsp("demo"), &out);
    check_play(&c, child, &out, &want, "isochron play through bad copies on two nodes");

    // The nodes that held the bad copies failed over and repaired them from the other copies.
    let sum = |name: &str| -> f64 {
        c.nodes.iter().map(|n| metric(&get_text(&format!("{}/metrics", n.http())), name)).sum()
    };
    assert_eq!(sum("isochron_read_failovers_total "), 2.0, "{}", c.logs());
    let deadline = Instant::now() + Duration::from_secs(20);
    while sum("isochron_repaired_copies_total ") < 2.0 {
        assert!(Instant::now() < deadline, "copies not repaired\n{}", c.logs());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(std::fs::read(&bad_file).unwrap(), std::fs::read(other(bad)).unwrap());
    assert_eq!(std::fs::read(&gone_file).unwrap(), std::fs::read(other(gone)).unwrap());

    // fsck across the cluster, through any node: clean; then, with no stream reading them, the
    // second copy of block 0 corrupted and the second copy of the last block deleted (copies on
    // whichever nodes hold them) are found, named, and repaired from the first copies.
    let fsck = |args: &[&str]| {
        let out =
            run(c.client_cmd(bin()).args(["fsck", "--server", &c.nodes[2].http()]).args(args), 120);
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    // The client namespace is not a member: fsck is refused there (it reads every disk and may
    // write), and allowed from a member's namespace.
    let (ok, text) = fsck(&[]);
    assert!(!ok && text.is_empty(), "fsck from a non-member: {text}");
    let node_fsck = |args: &[&str]| {
        let out = run(
            c.nodes[1]
                .host
                .command(bin())
                .args(["fsck", "--server", &c.nodes[2].http()])
                .args(args),
            120,
        );
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let (ok, text) = node_fsck(&[]);
    assert!(ok && text.contains("clean: 2 copies of every block"), "{text}");
    let last = rec.block_count() - 1;
    let (corrupt, deleted) = (other(0), other(last));
    let mut bytes = std::fs::read(&corrupt).unwrap();
    bytes[100] ^= 0xFF;
    std::fs::write(&corrupt, &bytes).unwrap();
    std::fs::remove_file(&deleted).unwrap();
    let (ok, text) = node_fsck(&[]);
    assert!(!ok, "{text}");
    assert!(text.contains("demo block 0 copy 1") && text.contains("checksum"), "{text}");
    assert!(
        text.contains(&format!("demo block {last} copy 1")) && text.contains("missing"),
        "{text}"
    );
    let (ok, text) = node_fsck(&["--repair"]);
    assert!(ok && text.matches("repaired:").count() == 2, "{text}\n{}", c.logs());
    let (ok, text) = node_fsck(&["--json"]);
    assert!(ok, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["copies_checked"], v["copies_expected"], "{v}");
    assert_eq!(v["copies_expected"].as_u64(), Some(u64::from(rec.block_count()) * 2), "{v}");
    assert_eq!(
        std::fs::read(&corrupt).unwrap(),
        std::fs::read(file(primary(0).primary(), 0)).unwrap()
    );
    assert!(deleted.is_file());
}

/// Restarts `node` (killed) in its namespace on its data, appending to its log; retries while
/// etcd still holds the killed process's lease (the node's name is live until it lapses).
fn restart(c: &Cluster, node: &mut Node) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let log = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(c.dir.path().join(format!("{}.log", node.name)))
            .unwrap();
        let config = c.dir.path().join("cluster.toml");
        node.child =
            serve_cmd_on(&node.host, c.dir.path(), &node.name, &c.etcd_urls, &config, c.disks)
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("isochron serve");
        let up = Instant::now() + Duration::from_secs(15);
        while Instant::now() < up {
            if ureq::get(&format!("{}/healthz", node.http())).call().is_ok() {
                return;
            }
            if node.child.try_wait().unwrap().is_some() {
                break; // exited: its name still live, or a start-up error (in the log)
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = node.child.kill();
        let _ = node.child.wait();
        assert!(Instant::now() < deadline, "{} did not restart\n{}", node.name, c.log(&node.name));
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Crash safety across the cluster: 25 SIGKILLs of random nodes, each during an ingest through
/// a random node or while a fourth node joins (and later leaves), every killed node restarted on
/// its data. Afterwards `fsck --server` checks every copy on every node (clean: K copies of every
/// block), every object the catalog lists is byte-exact through HTTP (nothing half-written is
/// listed), and every ingest that reported success is listed.
#[test]
fn sigkills_during_ingests_and_joins_leave_every_object_whole() {
    let mut c = start_cluster_with(
        "[store]\nblock_size_kib = 64\nseed_demo = false\nreplication = 2\n\
         [cluster]\nlease_ttl_s = 2\n",
    );
    let d = c.dir.path().to_path_buf();
    let want = std::fs::read(demo()).unwrap();
    let mut rng = isochron_base::mix::SplitMix64::new(
        std::env::var("ISOCHRON_CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(13),
    );
    let mut pick = |n: u64| rng.next_u64() % n;
    let mut committed = Vec::new();
    let mut joined = false;
    // Kills that found the round's ingest still running.
    let mut during = 0;
    for round in 0..25u32 {
        let name = format!("o{round:02}");
        let file = d.join(format!("{name}.ts"));
        std::fs::copy(demo(), &file).unwrap();
        // A fourth node joins at round 8 and is removed at round 16, both while nodes die.
        if round == 8 {
            c.nodes.push(c.start_node("n4"));
            joined = true;
        }
        if round == 16 && joined {
            let any = &c.nodes[0];
            let out = run(
                any.host.command(bin()).args(["node", "remove", "n4", "--server", &any.http()]),
                30,
            );
            eprintln!("round {round}: node remove n4: {}", String::from_utf8_lossy(&out.stderr));
        }
        let via = pick(c.nodes.len() as u64) as usize;
        let ingest = c.nodes[via]
            .host
            .command(bin())
            .args(["ingest", "--server", &c.nodes[via].http()])
            .arg(&file)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("ingest");
        std::thread::sleep(Duration::from_millis(pick(700)));
        let mut ingest = ingest;
        if ingest.try_wait().unwrap().is_none() {
            during += 1;
        }
        let victim = pick(c.nodes.len() as u64) as usize;
        let _ = c.nodes[victim].child.kill();
        let _ = c.nodes[victim].child.wait();
        let (ok, out) = exit_within(ingest, Duration::from_secs(60));
        eprintln!(
            "round {round}: ingest {name} via {}, killed {}: {}",
            c.nodes[via].name,
            c.nodes[victim].name,
            out.lines().last().unwrap_or("")
        );
        if ok {
            committed.push(name);
        }
        let mut node = std::mem::replace(
            &mut c.nodes[victim],
            Node { host: c.client.clone(), child: dummy_child(), name: String::new() },
        );
        restart(&c, &mut node);
        c.nodes[victim] = node;
    }

    // Every node up, and no reorganisation pending anywhere (a join or removal finished).
    let n = c.nodes.len();
    for node in &c.nodes {
        let url = format!("{}/api/v1/nodes", node.http());
        wait_body(&url, |b| b.matches("\"state\":\"up\"").count() >= n, "every node up");
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    for node in &c.nodes {
        loop {
            let r = get_json(&format!("{}/api/v1/reorg", node.http()));
            if r["pending_epoch"].is_null() {
                break;
            }
            assert!(Instant::now() < deadline, "reorganisation never finished: {r}\n{}", c.logs());
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    let fsck = run(
        c.nodes[0].host.command(bin()).args(["fsck", "--server", &c.nodes[0].http(), "--json"]),
        300,
    );
    let report = String::from_utf8_lossy(&fsck.stdout);
    assert!(fsck.status.success(), "fsck after 25 kills: {report}\n{}", c.logs());

    let listed = get_json(&format!("{}/api/v1/objects", c.nodes[1].http()));
    let names: Vec<String> =
        listed.as_array().unwrap().iter().map(|o| o["name"].as_str().unwrap().to_owned()).collect();
    for name in &committed {
        assert!(names.contains(name), "{name} was ingested but is not listed: {names:?}");
    }
    for name in &names {
        let node = &c.nodes[pick(c.nodes.len() as u64) as usize];
        let got = ureq::get(&format!("{}/objects/{name}", node.http()))
            .call()
            .unwrap()
            .into_body()
            .with_config()
            .limit(64 << 20)
            .read_to_vec()
            .unwrap();
        assert_same_bytes(&got, &want, &format!("{name} through {}", node.name));
    }
    eprintln!(
        "25 kills ({during} during an ingest): {} of 25 ingests committed, {} objects listed, \
         fsck: {report}",
        committed.len(),
        names.len()
    );
    assert!(during >= 3, "only {during} of 25 kills came while an ingest ran: not a crash test");
}

/// Waits at most `limit` for `child` (killed then): whether it exited with success, and its
/// stderr.
fn exit_within(mut child: Child, limit: Duration) -> (bool, String) {
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A child that has exited, to stand in a `Node` while the real one restarts.
fn dummy_child() -> Child {
    let mut c = Command::new("true").spawn().expect("true");
    let _ = c.wait();
    c
}

/// `docs/design/takeover.md`: three nodes, `store.replication = 2`. A fourth node joined and
/// was removed again (`node remove`, then stopped): it has left for good and counts for
/// nothing. isochron's client plays bipartite through n1 and n2, GStreamer relayed through n1;
/// n3 (no session's origin) is killed (SIGKILL) partway. The holders of the second copies of
/// n3's blocks take its part of every session over within the clients' buffers: every stream
/// ends byte-exact and no client's buffer runs dry; a new session is accepted after the kill
/// (one copy of every block lives) and plays byte-exact.
#[test]
fn a_node_killed_mid_stream_is_taken_over_by_the_other_copies() {
    require("gst-launch-1.0");
    let clip = common::fixture("clip30");
    let mut c =
        start_cluster_with("[store]\nblock_size_kib = 64\nseed_demo = false\nreplication = 2\n");
    let d = c.dir.path().to_owned();
    c.ingest(0, &clip);
    c.ingest_demo(1);
    let want = std::fs::read(&clip).unwrap();

    // n4 joins (blocks move to it), is removed (they move back) and stops.
    let mut n4 = c.start_node("n4");
    wait_for_reorg(&c, &n4);
    let res = run(
        c.nodes[0].host.command(bin()).args(["node", "remove", "n4", "--server"]).args([
            &c.nodes[0].http(),
            "--wait",
            "60",
        ]),
        90,
    );
    let err = String::from_utf8_lossy(&res.stderr);
    assert!(res.status.success(), "node remove: {err}\n{}", c.logs());
    assert!(Command::new("kill").arg(n4.child.id().to_string()).status().unwrap().success());
    let (stopped, _) =
        exit_within(std::mem::replace(&mut n4.child, dummy_child()), Duration::from_secs(10));
    assert!(stopped, "n4 did not stop on SIGTERM\n{}", c.log("n4"));
    wait_body(
        &format!("{}/api/v1/nodes", c.nodes[0].http()),
        |b| b.matches("\"state\":\"up\"").count() == 3,
        "n4 gone",
    );

    let gst_out = tmp(&d, "gst-takeover.ts");
    let gst = spawn_gst(&c, 0, "clip30", &gst_out);
    let plays: Vec<(Child, PathBuf)> = (0..4)
        .map(|i| {
            let out = tmp(&d, &format!("takeover-{i}.ts"));
            (spawn_play(&c, &c.nodes[i % 2].rtsp("clip30"), &out), out)
        })
        .collect();
    std::thread::sleep(Duration::from_secs(8));
    let n3 = &mut c.nodes[2];
    n3.child.kill().expect("SIGKILL n3");
    let _ = n3.child.wait();
    // A new session, once n1 knows n3 is gone: n3 is the only node lost (n4 left for good).
    let after_out = tmp(&d, "after-kill.ts");
    let after = spawn_play(&c, &c.nodes[1].rtsp("demo"), &after_out);
    for (i, (child, out)) in plays.into_iter().enumerate() {
        let summary =
            check_play(&c, child, &out, &want, &format!("isochron play {i} past n3's death"));
        eprintln!("isochron play {i}: {summary}");
    }
    let demo_bytes = std::fs::read(demo()).unwrap();
    check_play(&c, after, &after_out, &demo_bytes, "a new session after n3's death");
    let gst = c.child_output_within(gst, Duration::from_secs(90));
    assert_same_bytes(
        &std::fs::read(&gst_out).unwrap_or_default(),
        &want,
        &format!("GStreamer relayed through n1 past n3's death: {gst}\n{}", c.logs()),
    );
    assert!(c.log("n1").contains("taking over"), "{}", c.logs());
    // And counted, as a soak's report reads it (`isochron_takeovers_total`).
    let taken: f64 = (0..2)
        .map(|i| {
            let text = get_text(&format!("{}/metrics", c.nodes[i].http()));
            metric(&text, "isochron_takeovers_total{event=\"taken_over\"}")
        })
        .sum();
    assert!(taken >= 1.0, "no takeover counted by n1 and n2\n{}", c.logs());
}

/// The origin's death (`docs/design/takeover.md`, *When the origin dies*): K = 2 on three
/// nodes; two isochron plays through n3 and two through n1 (bipartite), GStreamer relayed
/// through n1; n3 is killed partway. The sessions n3 was the origin of keep flowing from n1 and
/// n2 (their shares run on, orphaned, and take n3's blocks over) and arrive byte-exact; their
/// client gets no BYE and ends after 10 s of silence (exit status 1, TEARDOWN unanswered). The
/// sessions through n1 (isochron play, GStreamer relayed) end byte-exact with no starvation.
#[test]
fn an_origin_killed_mid_stream_leaves_its_bipartite_sessions_playing() {
    require("gst-launch-1.0");
    let clip = common::fixture("clip30");
    let mut c =
        start_cluster_with("[store]\nblock_size_kib = 64\nseed_demo = false\nreplication = 2\n");
    let d = c.dir.path().to_owned();
    c.ingest(0, &clip);
    let want = std::fs::read(&clip).unwrap();

    let gst_out = tmp(&d, "gst-origin.ts");
    let gst = spawn_gst(&c, 0, "clip30", &gst_out);
    let plays: Vec<(Child, PathBuf, usize)> = [2, 2, 0, 0]
        .into_iter()
        .enumerate()
        .map(|(i, node)| {
            let out = tmp(&d, &format!("origin-{i}.ts"));
            (spawn_play(&c, &c.nodes[node].rtsp("clip30"), &out), out, node)
        })
        .collect();
    std::thread::sleep(Duration::from_secs(8));
    let n3 = &mut c.nodes[2];
    n3.child.kill().expect("SIGKILL n3");
    let _ = n3.child.wait();
    for (i, (child, out, node)) in plays.into_iter().enumerate() {
        let what = format!("isochron play {i} through n{} past n3's death", node + 1);
        if node == 2 {
            // Every packet arrives, byte-exact; but no BYE comes (the origin sent the session's
            // RTCP), so the client ends only after 10 s of silence, exit status 1, and counts
            // that wait as a starvation at the end (an open issue: a BYE from the node that
            // sends the last block).
            let res = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&res.stderr);
            let summary: serde_json::Value =
                serde_json::from_slice(&res.stdout).unwrap_or_else(|_| panic!("{what}: {stderr}"));
            eprintln!("{what}: {summary}\n{stderr}");
            assert_eq!(summary["lost"], 0, "{what}: {summary}");
            assert_eq!(summary["ended"], "incomplete", "no BYE from a dead origin: {summary}");
            assert!(stderr.contains("nothing received"), "{what}: {stderr}");
            assert_same_bytes(&std::fs::read(&out).unwrap(), &want, &what);
            continue;
        }
        let summary = check_play(&c, child, &out, &want, &what);
        eprintln!("{what}: {summary}");
    }
    let gst = c.child_output_within(gst, Duration::from_secs(90));
    assert_same_bytes(
        &std::fs::read(&gst_out).unwrap_or_default(),
        &want,
        &format!("GStreamer relayed through n1 past n3's death: {gst}\n{}", c.logs()),
    );
}

/// Stops node `i`'s process for `d` (SIGSTOP, then SIGCONT): a GC or VM pause, a node starved
/// of CPU.
fn pause(c: &Cluster, i: usize, d: Duration) {
    let pid = c.nodes[i].child.id().to_string();
    assert!(Command::new("kill").args(["-STOP", &pid]).status().unwrap().success());
    std::thread::sleep(d);
    assert!(Command::new("kill").args(["-CONT", &pid]).status().unwrap().success());
}

/// Three nodes keeping two copies of every block (64 KiB blocks), the 30 s clip ingested
/// through n1: the cluster, the clip's path and its bytes.
fn two_copies_of_clip30() -> (Cluster, PathBuf, Vec<u8>) {
    let clip = common::fixture("clip30");
    let c =
        start_cluster_with("[store]\nblock_size_kib = 64\nseed_demo = false\nreplication = 2\n");
    c.ingest(0, &clip);
    let want = std::fs::read(&clip).unwrap();
    (c, clip, want)
}

/// A node SIGKILLed and started again within its lease is a new process, not one that stood
/// still (`docs/design/takeover.md`: another incarnation in its `Hello` runs none of its old
/// shares). K = 2 on three nodes. n1 is killed and started again first, so the origin of the
/// sessions is a restarted process that must learn its peers' incarnations anew; three isochron
/// plays through it; n2 is killed partway and started again at once. n1 and n3 take n2's part
/// over and must keep it: given back to the new n2, which never had those shares, every
/// session lost n2's part to its end (what the cluster soak's first rehearsal found,
/// `docs/results/soak.md`). Every stream ends byte-exact with no starvation.
#[test]
fn a_node_killed_and_started_again_keeps_no_old_part_and_loses_no_stream() {
    let (mut c, _clip, want) = two_copies_of_clip30();
    let d = c.dir.path().to_owned();
    // Kills node `i` and starts it again on its data (within its lease: `restart` retries
    // until the new process registers).
    let kill_and_restart = |c: &mut Cluster, i: usize| {
        let _ = c.nodes[i].child.kill();
        let _ = c.nodes[i].child.wait();
        let mut node = std::mem::replace(
            &mut c.nodes[i],
            Node { host: c.client.clone(), child: dummy_child(), name: String::new() },
        );
        restart(c, &mut node);
        c.nodes[i] = node;
    };
    kill_and_restart(&mut c, 0);
    wait_body(
        &format!("{}/api/v1/nodes", c.nodes[0].http()),
        |b| b.matches("\"state\":\"up\"").count() == 3,
        "n1 back, seeing n2 and n3",
    );
    let plays: Vec<(Child, PathBuf)> = (0..3)
        .map(|i| {
            let out = tmp(&d, &format!("restarted-{i}.ts"));
            (spawn_play(&c, &c.nodes[0].rtsp("clip30"), &out), out)
        })
        .collect();
    std::thread::sleep(Duration::from_secs(8));
    kill_and_restart(&mut c, 1);
    for (i, (child, out)) in plays.into_iter().enumerate() {
        let what = format!("isochron play {i} through a restarted n1, n2 killed and restarted");
        let summary = check_play(&c, child, &out, &want, &what);
        eprintln!("{what}: {summary}");
    }
}

/// ffmpeg in the client namespace reading `node`'s `object` over RTSP/TCP (relayed) and writing
/// each packet's MD5 (`-c copy -f framemd5`) into `md5`; killed after 90 s at most.
fn spawn_ffmpeg_md5(c: &Cluster, node: usize, object: &str, md5: &Path) -> Child {
    c.client_cmd("timeout")
        .args(["-k", "5", "90", "ffmpeg", "-nostdin", "-v", "error"])
        .args(["-rtsp_transport", "tcp", "-i", &c.nodes[node].rtsp(object)])
        .args(["-map", "0", "-c", "copy", "-f", "framemd5", "-y"])
        .arg(md5)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ffmpeg")
}

/// `docs/design/takeover.md`, *A node that stood still*: K = 2 on three nodes; eight isochron
/// plays (bipartite, four through n1 and four through n3), GStreamer and ffmpeg over RTSP/TCP
/// through n1 and through n3 (relayed). n3, the origin of half of them, stands still for 3 s
/// (SIGSTOP, shorter than its lease, longer than the others' suspicion), then n2, the origin of
/// none, for 15 s (its lease lapses: it is down, taken over, and taken back when it speaks).
/// Nobody's stream ends: every client exits 0 with every byte (ffmpeg: every packet, in order),
/// none starved, and few of the packets the isochron clients receive are sent twice (under 1 %
/// in the suite's conditions; asserted at most 1 %).
#[test]
fn a_node_that_stands_still_ends_no_stream() {
    require("gst-launch-1.0");
    let (c, clip, want) = two_copies_of_clip30();
    let d = c.dir.path().to_owned();

    // Relayed through a stopped node, packets stop for as long as it does: the player's
    // buffer must outlast the stall (GStreamer drops what comes later than its latency).
    let gsts: Vec<(Child, PathBuf, usize)> = [0, 2]
        .into_iter()
        .map(|node| {
            let out = tmp(&d, &format!("gst-paused-{node}.ts"));
            let props = ["protocols=tcp", "latency=4000"];
            (spawn_gst_with(&c, node, "clip30", &props, &out), out, node)
        })
        .collect();
    let ffmpegs: Vec<(Child, PathBuf, usize)> = [0, 2]
        .into_iter()
        .map(|node| {
            let md5 = tmp(&d, &format!("ffmpeg-paused-{node}.md5"));
            (spawn_ffmpeg_md5(&c, node, "clip30", &md5), md5, node)
        })
        .collect();
    let plays: Vec<(Child, PathBuf, usize)> = [0, 0, 0, 0, 2, 2, 2, 2]
        .into_iter()
        .enumerate()
        .map(|(i, node)| {
            let out = tmp(&d, &format!("paused-{i}.ts"));
            (spawn_play(&c, &c.nodes[node].rtsp("clip30"), &out), out, node)
        })
        .collect();
    std::thread::sleep(Duration::from_secs(6));
    pause(&c, 2, Duration::from_secs(3));
    std::thread::sleep(Duration::from_secs(3));
    pause(&c, 1, Duration::from_secs(15));
    let plays = plays.into_iter().enumerate().map(|(i, (child, out, node))| {
        (child, out, format!("isochron play {i} through n{} past the pauses", node + 1))
    });
    let (received, duplicates) = check_plays_to_the_bye(&c, plays, &want);
    let relay_counts = |node: usize| relay_counts(&c, node);
    for (child, out, node) in gsts {
        let gst = c.child_output_within(child, Duration::from_secs(60));
        assert_same_bytes(
            &std::fs::read(&out).unwrap_or_default(),
            &want,
            &format!(
                "GStreamer relayed through n{} past the pauses: {gst}\n{}\n{}",
                node + 1,
                relay_counts(node),
                c.logs()
            ),
        );
    }
    let src = common::source_framemd5(&clip);
    for (child, md5, node) in ffmpegs {
        let err = c.child_output_within(child, Duration::from_secs(60));
        let got = framemd5_packets(&std::fs::read_to_string(&md5).unwrap_or_default());
        if let Err(e) = common::check_ffmpeg_copy(&got, &src) {
            panic!(
                "ffmpeg relayed through n{} past the pauses: {e}\n{err}\n{}\n{}",
                node + 1,
                relay_counts(node),
                c.logs()
            );
        }
    }
    // Sent twice per pause: the stopped node's part between how far its last heartbeat (every
    // 50 ms) said it had got, less the 30 ms progress margin, and where it stopped (10 to 15
    // packets a play). Not what fell due while it stood still: told on resuming that it was
    // taken over, it held that back and took its part back where the others gave it back
    // (`docs/design/takeover.md`), and the others sent none of what they had read ahead past
    // that point. Measured 0, 0, 0.49 % alone, 0 beside the other cluster tests (13.3 % when
    // the resumed node sent what fell due and the takers their lookahead; up to 0.91 % with
    // 100 ms heartbeats, a 100 ms margin, and a resumed origin that sent the blocks of a taker
    // whose word came second).
    eprintln!("duplicates: {duplicates} of {received} packets received");
    let dups = format!("{duplicates} of {received} packets were duplicates");
    assert!(duplicates <= 0.01 * received, "{dups}\n{}", c.logs());
    // The object reads back whole through any node (`isochron cat --server`).
    let back = tmp(&d, "cat-paused.ts");
    let res = run(
        c.client_cmd(bin())
            .args(["cat", "--server", &c.nodes[1].http(), "clip30", "--output"])
            .arg(&back),
        60,
    );
    assert!(res.status.success(), "cat --server: {}", String::from_utf8_lossy(&res.stderr));
    assert_same_bytes(&std::fs::read(&back).unwrap(), &want, "cat --server through n2");
    let logs = c.logs();
    assert!(c.log("n3").contains("stood still"), "{logs}");
    assert!(c.log("n2").contains("stood still"), "{logs}");
}

/// Waits for each play (`what` names it): byte-exact, nothing lost, never starved, ended by
/// the server's BYE. Returns the packets they received and how many of those were duplicates.
fn check_plays_to_the_bye(
    c: &Cluster,
    plays: impl Iterator<Item = (Child, PathBuf, String)>,
    want: &[u8],
) -> (f64, f64) {
    let (mut received, mut duplicates) = (0.0, 0.0);
    for (child, out, what) in plays {
        let summary = check_play(c, child, &out, want, &what);
        eprintln!("{what}: {summary}");
        assert_eq!(summary["ended"], "bye", "{what}: {summary}");
        received += summary["packets"].as_f64().unwrap();
        duplicates += summary["duplicates"].as_f64().unwrap();
    }
    (received, duplicates)
}

/// `node`'s relay and loss counters (`/metrics`), for a failure's message.
fn relay_counts(c: &Cluster, node: usize) -> String {
    let metrics = get_text(&format!("{}/metrics", c.nodes[node].http()));
    let counts: Vec<String> = metrics
        .lines()
        .filter(|l| !l.starts_with('#') && (l.contains("lost") || l.contains("relay")))
        .map(str::to_owned)
        .collect();
    counts.join("\n")
}

/// `docs/design/takeover.md`, *A relaying origin that stood still*: K = 2 on three nodes; four
/// isochron plays (bipartite), GStreamer and ffmpeg over RTSP/TCP (relayed), all through n1.
/// n2, the origin of none, stands still for 3 s; then n1, the entry node of every one, for
/// 15 s: its lease lapses, and it registers again on resuming. The relayed streams stop with
/// it and go on from where they stopped (its feeders froze, and it re-pinned their sessions'
/// clocks by its stall); the bipartite ones never stop (the others took n1's part over).
/// Every client exits 0 with every byte (ffmpeg: every packet, in order), none starved.
#[test]
fn an_entry_node_that_stands_still_past_its_lease_ends_no_stream() {
    require("gst-launch-1.0");
    let (c, clip, want) = two_copies_of_clip30();
    let d = c.dir.path().to_owned();
    let gst_out = tmp(&d, "gst-entry-paused.ts");
    let gst = spawn_gst_with(&c, 0, "clip30", &["protocols=tcp", "latency=20000"], &gst_out);
    let md5 = tmp(&d, "ffmpeg-entry-paused.md5");
    let ffmpeg = spawn_ffmpeg_md5(&c, 0, "clip30", &md5);
    let plays: Vec<(Child, PathBuf)> = (0..4)
        .map(|i| {
            let out = tmp(&d, &format!("entry-paused-{i}.ts"));
            (spawn_play(&c, &c.nodes[0].rtsp("clip30"), &out), out)
        })
        .collect();
    std::thread::sleep(Duration::from_secs(5));
    pause(&c, 1, Duration::from_secs(3));
    std::thread::sleep(Duration::from_secs(2));
    pause(&c, 0, Duration::from_secs(15));
    let plays = plays.into_iter().enumerate().map(|(i, (child, out))| {
        (child, out, format!("isochron play {i} through n1 past its pause"))
    });
    let (received, duplicates) = check_plays_to_the_bye(&c, plays, &want);
    // As in `a_node_that_stands_still_ends_no_stream`: measured 0.43 % beside the other
    // cluster tests, 0.22 % beside the stand-still test (0.01 to 0.9 % with 100 ms heartbeats).
    // Beside the live tests (a dozen players on two cores) 1.97 % once in ten runs: 117 to 120
    // a play, two blocks or so each, as when n1's hold (`ClusterConfig::hold_window`, 300 ms
    // of wall time) runs out before it has read the takers' words (that run's logs were not
    // kept; the failure prints them now).
    eprintln!("duplicates: {duplicates} of {received} packets received");
    let dups = format!("{duplicates} of {received} packets were duplicates");
    assert!(duplicates <= 0.03 * received, "{dups}\n{}", c.logs());
    let err = c.child_output_within(ffmpeg, Duration::from_secs(60));
    let got = framemd5_packets(&std::fs::read_to_string(&md5).unwrap_or_default());
    if let Err(e) = common::check_ffmpeg_copy(&got, &common::source_framemd5(&clip)) {
        let counts = relay_counts(&c, 0);
        panic!("ffmpeg relayed through n1 past its pause: {e}\n{err}\n{counts}\n{}", c.logs());
    }
    let out = c.child_output_within(gst, Duration::from_secs(120));
    let what = format!(
        "GStreamer relayed through n1 past its pause: {out}\n{}\n{}",
        relay_counts(&c, 0),
        c.logs()
    );
    assert_same_bytes(&std::fs::read(&gst_out).unwrap_or_default(), &want, &what);
    let logs = c.logs();
    assert!(c.log("n1").contains("stood still"), "{logs}");
    assert!(c.log("n3").contains("the origin of a relayed session is silent"), "{logs}");
}

/// GStreamer playing `node`'s `object` relayed over RTSP/TCP into `out`, in the client namespace.
fn spawn_gst(c: &Cluster, node: usize, object: &str, out: &Path) -> Child {
    spawn_gst_with(c, node, object, &["protocols=tcp"], out)
}

/// GStreamer playing `node`'s `object` into `out` in the client namespace, with `rtspsrc`
/// properties `props` (its transport among them) and a 2 s latency unless `props` sets one.
fn spawn_gst_with(c: &Cluster, node: usize, object: &str, props: &[&str], out: &Path) -> Child {
    let location = format!("location={}", c.nodes[node].rtsp(object));
    let sink = format!("location={}", out.display());
    let latency = if props.iter().any(|p| p.starts_with("latency=")) { "" } else { "latency=2000" };
    c.client_cmd("gst-launch-1.0")
        .args(["-q", "-e", "rtspsrc", &location])
        .args(props)
        .args(
            [latency, "!", "rtpmp2tdepay", "!", "filesink", &sink]
                .into_iter()
                .filter(|a| !a.is_empty()),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gst-launch-1.0")
}

/// `docs/design/takeover.md`, *After the takeover: re-creating the copies*: three nodes,
/// `store.replication = 2`, 20 streams (18 isochron clients bipartite through n1 and n2, two
/// GStreamer relayed), n3 killed (SIGKILL) 15 s in. No client's buffer runs dry and every stream
/// ends byte-exact; once n3's lease has lapsed for `cluster.dead_after_s`, n1 (the lowest-named
/// survivor) removes n3's disk as one SCADDAR removal whose copies are read from the live
/// replicas, and `isochron fsck --server` (from a member's namespace) finds 2 copies of every
/// block, all on n1 and n2.
#[test]
fn a_dead_nodes_copies_are_re_created_from_the_other_replicas() {
    require("gst-launch-1.0");
    let clip = common::fixture("clip30");
    let mut c = start_cluster_with(
        "[store]\nblock_size_kib = 64\nseed_demo = false\nreplication = 2\n\
         [cluster]\nlease_ttl_s = 2\ndead_after_s = 4\n",
    );
    let d = c.dir.path().to_owned();
    c.ingest(0, &clip);
    let want = std::fs::read(&clip).unwrap();

    let gsts: Vec<(Child, PathBuf)> = (0..2)
        .map(|i| {
            let out = tmp(&d, &format!("gst-rerep-{i}.ts"));
            (spawn_gst(&c, i, "clip30", &out), out)
        })
        .collect();
    let plays: Vec<(Child, PathBuf)> = (0..18)
        .map(|i| {
            let out = tmp(&d, &format!("rerep-{i}.ts"));
            (spawn_play(&c, &c.nodes[i % 2].rtsp("clip30"), &out), out)
        })
        .collect();
    std::thread::sleep(Duration::from_secs(15));
    let n3 = &mut c.nodes[2];
    n3.child.kill().expect("SIGKILL n3");
    let _ = n3.child.wait();
    // Every play's outcome first, then the checks: a failure shows the others beside it.
    let outcomes: Vec<_> = plays
        .into_iter()
        .map(|(child, out)| (child.wait_with_output().expect("isochron play"), out))
        .collect();
    for (i, (res, _)) in outcomes.iter().enumerate() {
        let how = if res.status.success() { "ok" } else { "FAILED" };
        let err = String::from_utf8_lossy(&res.stderr);
        eprintln!("isochron play {i} via n{}: {how} {}", i % 2 + 1, err.trim());
    }
    for (i, (res, out)) in outcomes.into_iter().enumerate() {
        let what = format!("isochron play {i} via n{} past n3's death", i % 2 + 1);
        let summary = check_output(&c, &res, &out, &want, &what);
        eprintln!("isochron play {i}: {summary}");
    }
    for (i, (gst, out)) in gsts.into_iter().enumerate() {
        let gst = c.child_output_within(gst, Duration::from_secs(90));
        assert_same_bytes(
            &std::fs::read(&out).unwrap_or_default(),
            &want,
            &format!(
                "GStreamer {i} relayed through n{} past n3's death: {gst}\n{}",
                i + 1,
                c.logs()
            ),
        );
    }

    // The re-replication, coordinated by n1, progress in its /api/v1/reorg.
    let reorg = format!("{}/api/v1/reorg", c.nodes[0].http());
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        let v = get_json(&reorg);
        let op = v["operation"].as_str().unwrap_or_default().to_owned();
        assert_ne!(v["state"], "failed", "{v}\n{}", c.logs());
        if op.contains("re-replicate") && v["state"] == "idle" {
            break v;
        }
        assert!(Instant::now() < deadline, "no re-replication: {v}\n{}", c.logs());
        std::thread::sleep(Duration::from_millis(250));
    };
    eprintln!("re-replication: {status}");
    assert!(status["moved"].as_u64().unwrap() > 0, "{status}");
    assert_eq!(status["moved"], status["total"], "{status}");
    assert!(c.log("n1").contains("re-creating its copies"), "{}", c.logs());
    // n3 holds no disk at the new epoch.
    let nodes = get_json(&format!("{}/api/v1/nodes", c.nodes[1].http()));
    let n3 = nodes.as_array().unwrap().iter().find(|n| n["name"] == "n3").expect("n3 listed");
    assert_eq!(n3["state"], "down", "{nodes}");
    assert_eq!(n3["disks"], serde_json::json!([]), "{nodes}");

    // fsck across the cluster from a member's namespace: 2 live copies of every block.
    let out = run(
        c.nodes[1].host.command(bin()).args(["fsck", "--server", &c.nodes[0].http(), "--json"]),
        120,
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    eprintln!("fsck: {v}");
    assert_eq!(v["clean"], true, "{v}");
    assert_eq!(v["unchecked"], serde_json::json!({}), "{v}");
    let blocks = v["blocks"].as_u64().unwrap();
    assert!(blocks > 0, "{v}");
    assert_eq!(v["copies_expected"].as_u64(), Some(blocks * 2), "{v}");
    assert_eq!(v["copies_checked"], v["copies_expected"], "{v}");

    // n3 restarts on its data: it joins with no disk in use (its disk retired, its block files
    // deleted) and the copies stay where they are: fsck still clean with 2 copies of every
    // block, on n1 and n2.
    let mut n3 = std::mem::replace(
        &mut c.nodes[2],
        Node { host: c.client.clone(), child: dummy_child(), name: "n3".into() },
    );
    let before = blocks_on(&c, "n3");
    restart(&c, &mut n3);
    c.nodes[2] = n3;
    assert!(before > 0, "n3 died with no block file");
    assert_eq!(blocks_on(&c, "n3"), 0, "n3's retired disk keeps block files\n{}", c.log("n3"));
    for n in &c.nodes {
        let url = format!("{}/api/v1/nodes", n.http());
        wait_body(&url, |b| b.matches("\"state\":\"up\"").count() == 3, "three nodes up");
    }
    let out = run(
        c.nodes[1].host.command(bin()).args(["fsck", "--server", &c.nodes[2].http(), "--json"]),
        120,
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}\n{}", c.logs());
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    eprintln!("fsck after n3's restart: {v}");
    assert_eq!(v["copies_expected"].as_u64(), Some(blocks * 2), "{v}");
    assert_eq!(v["copies_checked"], v["copies_expected"], "{v}");
}

/// The relay under load (issue 26), run on demand: `cargo test --release -p isochron --test it
/// cluster::relay_under_load -- --ignored --nocapture` (root; `stress-ng` installed). Three nodes,
/// K = 2, ten GStreamer players relayed through n1 (five over UDP, five over RTSP/TCP) on a 60 s
/// clip whose middle 20 s run at 10 Mb/s or more, `stress-ng --cpu 2` taking both cores, n3
/// SIGKILLed 15 s in. Every TCP session must end byte-exact; a UDP session byte-exact or its
/// losses counted in n1's `isochron_relay_lost_packets_total`.
#[test]
#[ignore = "a load run of minutes, on demand (docs/design/closing.md)"]
fn relay_under_load() {
    require("gst-launch-1.0");
    require("stress-ng");
    let clip = common::fixture("grain60");
    let mut c =
        start_cluster_with("[store]\nblock_size_kib = 64\nseed_demo = false\nreplication = 2\n");
    let d = c.dir.path().to_owned();
    c.ingest(0, &clip);
    let want = std::fs::read(&clip).unwrap();
    let mut hog = Command::new("stress-ng")
        .args(["--cpu", "2", "--timeout", "120"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("stress-ng");
    let players: Vec<(Child, PathBuf, &str)> = (0..10)
        .map(|i| {
            let transport = if i % 2 == 0 { "udp" } else { "tcp" };
            let out = tmp(&d, &format!("relay-{i}-{transport}.ts"));
            let props = [&*format!("protocols={transport}"), "udp-buffer-size=4194304"];
            (spawn_gst_with(&c, 0, "grain60", &props, &out), out, transport)
        })
        .collect();
    std::thread::sleep(Duration::from_secs(15));
    let n3 = &mut c.nodes[2];
    n3.child.kill().expect("SIGKILL n3");
    let _ = n3.child.wait();
    let mut report = Vec::new();
    let mut tcp_failures = Vec::new();
    for (i, (child, out, transport)) in players.into_iter().enumerate() {
        let stderr = c.child_output_within(child, Duration::from_secs(120));
        let got = std::fs::read(&out).unwrap_or_default();
        let exact = got == want;
        report.push(format!(
            "player {i} ({transport}): {} of {} bytes, exact {exact}",
            got.len(),
            want.len()
        ));
        if transport == "tcp" && !exact {
            tcp_failures.push(format!("player {i}: {stderr}"));
        }
    }
    let _ = hog.kill();
    let _ = hog.wait();
    let metrics = get_text(&format!("{}/metrics", c.nodes[0].http()));
    let relay: Vec<&str> = metrics.lines().filter(|l| l.starts_with("isochron_relay_")).collect();
    eprintln!("{}\n{}", report.join("\n"), relay.join("\n"));
    assert!(tcp_failures.is_empty(), "{}\n{}", tcp_failures.join("\n"), c.logs());
}

/// A ladder uploaded through one node of three is made on all three at once (each claims a
/// rung from etcd under its lease and reads the title's source from the store in the disks'
/// non-real-time share); a node SIGKILLed mid-encode: its rung is claimed again by a survivor
/// once its lease has lapsed (and its writes wait until the cluster has removed the dead node's
/// disks), the ladder completes, nothing partial is listed, and the renditions — made on
/// different nodes — have their heights, decode without error and have their key frames at the
/// same times. Two copies of every block, so that the source stays readable without the node.
#[test]
fn a_ladder_is_made_on_every_node_and_outlives_a_node_killed_mid_encode() {
    require("ffprobe");
    let mut c = start_cluster_with(
        "[store]\nblock_size_kib = 256\nseed_demo = false\nreplication = 2\n\
         [cluster]\nlease_ttl_s = 2\ndead_after_s = 4\n",
    );
    let n1 = c.nodes[0].http();
    let rungs = ["720p", "480p", "360p", "240p"];
    let follow = c.nodes[0]
        .host
        .command(bin())
        .args(["ingest", "--server", &n1, "--name", "film", "--ladder", &rungs.join(",")])
        .arg(media_fixture("h264_1080p_12s.mp4"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("isochron ingest");
    // Three rungs at once, one on each node; the victim: a node other than the one the CLI
    // follows, with its encode under way.
    let running = |v: &serde_json::Value| -> Vec<(String, String, f64)> {
        v["tasks"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|t| t["state"] == "running")
            .map(|t| {
                let s = |k: &str| t[k].as_str().unwrap_or_default().to_owned();
                (s("name"), s("node"), t["progress"].as_f64().unwrap_or(0.0))
            })
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    let (victim, task) = loop {
        let v = get_json(&format!("{n1}/api/v1/transcode"));
        let now = running(&v);
        let nodes: std::collections::BTreeSet<&str> = now.iter().map(|t| t.1.as_str()).collect();
        if nodes.len() == 3
            && let Some(t) = now.iter().find(|t| t.1 != "n1" && t.2 > 0.0)
        {
            break (t.1.clone(), t.0.clone());
        }
        assert!(Instant::now() < deadline, "never three rungs on three nodes: {v}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let i = c.nodes.iter().position(|n| n.name == victim).unwrap();
    let mut dead = c.nodes.remove(i);
    dead.child.kill().unwrap();
    dead.child.wait().unwrap();
    // Its rung goes to a survivor.
    let deadline = Instant::now() + Duration::from_secs(120);
    let taken_by = loop {
        let v = get_json(&format!("{n1}/api/v1/transcode"));
        if let Some(t) = running(&v).into_iter().find(|t| t.0 == task && t.1 != victim) {
            break t.1;
        }
        let listed = get_text(&format!("{n1}/api/v1/objects"));
        if listed.contains(&format!("\"{task}\"")) {
            break "(made before we looked)".into();
        }
        assert!(Instant::now() < deadline, "{task} of dead {victim} never taken over: {v}");
        std::thread::sleep(Duration::from_millis(200));
    };
    eprintln!("{task}: {victim} killed mid-encode, made by {taken_by}");
    let out = c.child_output_within_full(follow, Duration::from_secs(300));
    assert!(out.0, "the ladder did not complete: {}\n{}", out.1, c.logs());
    assert!(out.1.contains("transcoded film into 720p, 480p, 360p, 240p"), "{}", out.1);
    // The title and its four renditions, nothing else; no task left in etcd.
    let objects = get_json(&format!("{n1}/api/v1/objects"));
    let mut names: Vec<&str> =
        objects.as_array().unwrap().iter().filter_map(|o| o["name"].as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["film", "film~240p", "film~360p", "film~480p", "film~720p"]);
    let v = get_json(&format!("{n1}/api/v1/transcode"));
    assert_eq!(v["tasks"], serde_json::json!([]), "{v}");
    // Each rendition, read back from the store through n1.
    let mut key_frames = Vec::new();
    for rung in rungs {
        let file = c.dir.path().join(format!("film~{rung}.mp4"));
        let body = ureq::get(&format!("{n1}/objects/film~{rung}"))
            .call()
            .unwrap()
            .into_body()
            .with_config()
            .limit(256 << 20)
            .read_to_vec()
            .unwrap();
        std::fs::write(&file, body).unwrap();
        let lines: u32 = rung.trim_end_matches('p').parse().unwrap();
        assert_eq!(crate::renditions::height(&file), lines, "film~{rung}");
        let decode = run(
            Command::new("ffmpeg").args(["-v", "error", "-i"]).arg(&file).args(["-f", "null", "-"]),
            120,
        );
        assert!(
            decode.status.success() && decode.stderr.is_empty(),
            "film~{rung}: {}",
            String::from_utf8_lossy(&decode.stderr)
        );
        let keys: Vec<f64> = crate::renditions::video_packets(&file)
            .into_iter()
            .filter(|p| p.2)
            .map(|p| p.0)
            .collect();
        key_frames.push((rung, keys));
    }
    let first = &key_frames[0].1;
    assert!(first.len() >= 6, "a key frame every 2 s of 12 s: {first:?}");
    for (rung, keys) in &key_frames {
        assert_eq!(keys, first, "film~{rung}'s key frames against film~720p's");
    }
}

/// Degrade instead of refuse across a cluster (`sched.degrade`, `sched.egress_mbps` on every
/// node): players over RTSP/TCP (isochron play first, then ffmpeg) arrive at n1 a second and a
/// half apart for the grain ladder (made by
/// the cluster: 360p at 1.5 Mb/s, 240p at 400 kb/s) until one is refused. Every node sends its
/// own blocks and counts its share of each stream against its egress; the node that runs out
/// first refuses, and the origin admits the next PLAY a rung lower (or steps the highest-rate
/// session down to make room) instead of answering 453. At least twice as many play as were
/// admitted at the top rung, each records its 20 s whole, and the mix is in `/metrics`.
#[test]
fn a_cluster_degrades_instead_of_refusing_with_players() {
    require("ffprobe");
    let c = start_cluster_with(
        "[store]\nblock_size_kib = 256\nseed_demo = false\n\
         [sched]\ndegrade = true\negress_mbps = 2\n",
    );
    let n1 = c.nodes[0].http();
    let src = media_fixture("h264_360p_grain_90s.mp4");
    let ladder = run(
        c.nodes[0]
            .host
            .command(bin())
            .args([
                "ingest",
                "--server",
                &n1,
                "--name",
                "grain",
                "--ladder",
                "360p:1500k,240p:400k",
            ])
            .arg(&src),
        300,
    );
    assert!(ladder.status.success(), "{}", String::from_utf8_lossy(&ladder.stderr));
    let url = c.nodes[0].rtsp("grain");
    // Players until one is refused (one finishes within its 1.5 s only when refused).
    let results: Vec<(Output, PathBuf)> = std::thread::scope(|scope| {
        let mut running = Vec::new();
        let mut done = Vec::new();
        for k in 0..14 {
            let out = c.dir.path().join(format!("p{k}.mp4"));
            let mut cmd = c.client_cmd("timeout");
            cmd.args(["-k", "5", "90"]);
            if k == 0 {
                // isochron's own player first: it counts every packet of every track.
                cmd.arg(bin()).args(["play", &url, "--transport", "tcp", "--timeout", "21"]);
                cmd.args(["--json", "--out"]);
                cmd.arg(out.with_extension("h264"));
            } else {
                cmd.args(["ffmpeg", "-nostdin", "-v", "error", "-rtsp_transport", "tcp"])
                    .args(["-i", &url, "-t", "20", "-map", "0", "-c", "copy", "-f", "mp4", "-y"])
                    .arg(&out);
            }
            running.push(scope.spawn(move || (run(&mut cmd, 100), out)));
            std::thread::sleep(Duration::from_millis(1500));
            if running.last().is_some_and(std::thread::ScopedJoinHandle::is_finished) {
                let last = running.pop().unwrap().join().expect("player");
                let refused = String::from_utf8_lossy(&last.0.stderr).contains("453");
                done.push(last);
                if refused {
                    break;
                }
            }
        }
        let mut all: Vec<(Output, PathBuf)> =
            running.into_iter().map(|h| h.join().expect("player")).collect();
        all.extend(done);
        all
    });
    let logs = c.logs();
    let (refused, played): (Vec<_>, Vec<_>) =
        results.iter().partition(|(o, _)| String::from_utf8_lossy(&o.stderr).contains("453"));
    assert!(!refused.is_empty(), "players until one got 453: {} played\n{logs}", played.len());
    // isochron play (stepped down first): no packet lost, every frame of its 21 s (it is cut by
    // its --timeout, hence exit status 1). The players use RTSP/TCP: what is measured is
    // admission across the nodes, not a loaded machine's UDP losses (ffmpeg asks for no packet
    // again).
    let (own, _) = played.iter().find(|(_, r)| r.ends_with("p0.mp4")).expect("isochron play");
    let v: serde_json::Value = serde_json::from_slice(&own.stdout).expect("play --json");
    eprintln!("isochron play: {v}");
    for t in v["tracks"].as_array().unwrap() {
        assert_eq!(t["lost"], 0, "{v}\n{logs}");
    }
    assert!(v["video_frames"].as_u64().unwrap() >= 20 * 25, "{v}\n{logs}");
    let own_runs = crate::renditions::height_runs(&c.dir.path().join("p0.h264"));
    assert_eq!(own_runs.iter().map(|r| r.0).collect::<Vec<_>>(), [360, 240], "{own_runs:?}");
    // ffmpeg's recordings: 20 s each, by ffmpeg's clock. ffmpeg times RTP by the sender
    // reports' NTP clock, and a cluster's switch of rendition takes the stop and the new run's
    // start a control margin ahead on every node (about 0.3 s) before the next packet goes:
    // its timestamps jump by that pause, so its 20 s hold that much less media. The frames
    // are all there (isochron play counted them): the jumps are measured and added back.
    let mut top = 0;
    for (o, rec) in played.iter().filter(|(_, r)| !r.ends_with("p0.mp4")) {
        assert!(o.status.success(), "{}\n{logs}", String::from_utf8_lossy(&o.stderr));
        let runs = crate::renditions::height_runs(rec);
        let frames: usize = runs.iter().map(|r| r.1).sum();
        let mut pts: Vec<f64> = crate::renditions::video_packets(rec).iter().map(|p| p.0).collect();
        pts.sort_by(f64::total_cmp);
        let jumps: Vec<(f64, f64)> = pts
            .windows(2)
            .filter(|w| w[0] > 0.0 && w[1] - w[0] > 0.05)
            .map(|w| (w[0], w[1]))
            .collect();
        let jumped: f64 = jumps.iter().map(|(a, b)| b - a - 0.04).sum();
        // The audio's timestamps too: ffmpeg's `-t 20` ends the file on whichever track gets
        // there first, so a jump in either shortens the other.
        let mut audio: Vec<f64> =
            crate::renditions::packets_of(rec, "a:0").iter().map(|p| p.0).collect();
        audio.sort_by(f64::total_cmp);
        let audio_jumps: Vec<(f64, f64)> =
            audio.windows(2).filter(|w| w[1] - w[0] > 0.1).map(|w| (w[0], w[1])).collect();
        let ends = (pts.last().copied(), audio.last().copied());
        let seen = format!(
            "{}: {runs:?}, timestamps jump {jumps:?}, audio jumps {audio_jumps:?}, \
             last video and audio {ends:?}",
            rec.display()
        );
        eprintln!("{seen}");
        assert!(jumped < 1.0, "{seen}");
        let held = frames + (jumped * 25.0).round() as usize;
        assert!(held >= 20 * 25 - 2, "{frames} frames held: {seen}\n{logs}");
        top += usize::from(runs.first().is_some_and(|r| r.0 == 360));
    }
    top += 1; // isochron play's, admitted at 360p
    // Those admitted at the top rung are what refusal would have admitted: a node's egress
    // refused the next one there, on some node.
    assert!(top >= 1 && played.len() >= 2 * top, "{top} at 360p, {} in all", played.len());
    assert!(logs.contains("not enough network egress"), "{logs}");
    let metrics = get_text(&format!("{n1}/metrics"));
    let degraded = metric(&metrics, "isochron_admitted_degraded_total")
        + metric(&metrics, "isochron_stepped_down_for_room_total");
    assert!(degraded >= 1.0, "{metrics}");
}

/// Step 6 of `docs/design/live.md`: ffmpeg publishes a 20 s feed (the 10 s clip twice)
/// over RTSP RECORD to n1; ten players on each of n2 and n3 watch it live (on each: ffmpeg over
/// TCP and over UDP to the feed's end, four `isochron play` over UDP and four over TCP). Every
/// ffmpeg decodes a run of the feed's frames to its end, every `isochron play` ends on the BYE
/// with nothing lost, and the feed crossed from n1 to each other node once: the bytes each
/// received are within 10 % of the recording's, twenty viewers or not, and n1 sent no more
/// than the two copies. Meanwhile n2's `/api/v1/live` lists the feed (published on n1, its
/// ten viewers on n2), and ffmpeg reads n3's HLS event playlist of it from its first segment
/// to its end: every frame of the feed from the first. Once it has ended, the server's ladder
/// (`transcode.ladder`) is made of the recording by whichever node claims the rung, from that
/// node's HLS of it: `cam~240p`, read from n3, is 240 lines and every frame of the feed.
#[test]
fn a_feed_published_on_one_node_is_watched_on_the_others_crossing_once_to_each() {
    require("ffmpeg");
    require("ffprobe");
    // A publisher with credentials; viewers anonymous.
    let c = start_cluster_with(&format!(
        "{CONFIG}[auth]\nanonymous = [\"read\"]\n[[auth.users]]\nname = \"cam\"\n\
         password = \"cam-secret\"\npermissions = [\"publish\"]\nobjects = [\"cam\"]\n\
         [transcode]\nladder = \"240p:300k\"\n"
    ));
    let src = media_fixture("h264_aac.mp4");
    let (n1, others) = (&c.nodes[0], &c.nodes[1..]);
    let feed_in = "isochron_cluster_feed_bytes_total{direction=\"in\"}";
    let feed_out = "isochron_cluster_feed_bytes_total{direction=\"out\"}";
    let dir = c.dir.path();
    let (feed, plays, recordings) = std::thread::scope(|s| {
        let publisher = c.client_cmd("ffmpeg");
        let url = format!("rtsp://cam:cam-secret@{}:8554/cam", n1.host.ip);
        let src = &src;
        let feed = s.spawn(move || crate::live::publish_looped(publisher, src, 2, &url, "tcp"));
        // Each other node subscribes once the feed is announced: its first chunks arrive.
        let deadline = Instant::now() + Duration::from_secs(20);
        for n in others {
            let url = format!("{}/metrics", n.http());
            while metric(&get_text(&url), feed_in) == 0.0 && !feed.is_finished() {
                assert!(
                    Instant::now() < deadline,
                    "{} never received the feed\n{}",
                    n.name,
                    c.logs()
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        if feed.is_finished() {
            let o = feed.join().unwrap();
            panic!(
                "the publisher ended early: {}\n{}",
                String::from_utf8_lossy(&o.stderr),
                c.logs()
            );
        }
        let mut plays = Vec::new();
        let mut recordings = Vec::new();
        for (k, n) in others.iter().enumerate() {
            let url = n.rtsp("cam");
            for (i, transport) in ["udp", "tcp"].into_iter().cycle().take(8).enumerate() {
                let out = dir.join(format!("play-{k}-{i}.h264"));
                plays.push((
                    format!("isochron play on {} over {transport} #{i}", n.name),
                    spawn_play_with(&c, &url, &["--transport", transport], &out),
                ));
            }
            for transport in ["tcp", "udp"] {
                let out = dir.join(format!("ffmpeg-{k}-{transport}.mp4"));
                let child = c
                    .client_cmd("timeout")
                    .args(["-k", "5", "60", "ffmpeg", "-nostdin", "-v", "error"])
                    .args(["-rtsp_transport", transport, "-i", &url, "-map", "0"])
                    .args(["-c", "copy", "-y"])
                    .arg(&out)
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("ffmpeg");
                recordings.push((format!("ffmpeg on {} over {transport}", n.name), out, child));
            }
        }
        // n2's API lists the feed published on n1 with its viewers there.
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            let live = get_json(&format!("{}/api/v1/live", others[0].http()));
            let cam = live.as_array().unwrap().iter().find(|f| f["name"] == "cam").cloned();
            if let Some(cam) = cam.filter(|c| c["viewers"] == 10) {
                break cam;
            }
            assert!(Instant::now() < deadline, "n2's /api/v1/live: {live}\n{}", c.logs());
            std::thread::sleep(Duration::from_millis(200));
        };
        assert_eq!((&status["node"], &status["transport"]), (&"n1".into(), &"cluster".into()));
        assert!(status["zero_unix_ms"].as_u64() > Some(0) && status["bytes"].as_u64() > Some(0));
        // HLS from n3 of the feed published on n1, from its first segment, once n3 lists the
        // growing recording.
        let list_url = format!("{}/hls/cam/index.m3u8", others[1].http());
        let deadline = Instant::now() + Duration::from_secs(15);
        let list = loop {
            // 404 until n3 lists the recording's first commit.
            let list = ureq::get(&list_url)
                .call()
                .ok()
                .and_then(|r| r.into_body().read_to_string().ok())
                .unwrap_or_default();
            if list.contains("0.m4s") {
                break list;
            }
            assert!(Instant::now() < deadline, "no HLS segment on n3: {list}\n{}", c.logs());
            std::thread::sleep(Duration::from_millis(200));
        };
        assert!(list.contains("#EXT-X-PLAYLIST-TYPE:EVENT") && !list.contains("ENDLIST"), "{list}");
        let hls_out = dir.join("hls-n3.mkv");
        let hls = c
            .client_cmd("timeout")
            .args(["-k", "5", "60", "ffmpeg", "-nostdin", "-v", "error"])
            .args(["-live_start_index", "0", "-i", &list_url, "-map", "0", "-c", "copy", "-y"])
            .arg(&hls_out)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("ffmpeg");
        recordings.push(("ffmpeg reading n3's HLS from the start".to_owned(), hls_out, hls));
        (feed.join().unwrap(), plays, recordings)
    });
    assert!(
        feed.status.success(),
        "publishing: {}\n{}",
        String::from_utf8_lossy(&feed.stderr),
        c.logs()
    );
    for (what, child) in plays {
        let summary = play_summary(&c, child, &what);
        for t in summary["tracks"].as_array().unwrap() {
            assert_eq!(t["lost"], 0, "{what}: {summary}");
            assert_eq!(t["ended"], true, "{what}: {summary}");
        }
    }
    let one = crate::native::decoded_video(&src);
    let want: Vec<String> = one.iter().chain(&one).cloned().collect();
    for (what, out, child) in recordings {
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{what}: {}\n{}", String::from_utf8_lossy(&o.stderr), c.logs());
        let got = crate::native::decoded_video(&out);
        crate::live::a_run_of(&got, &want, true, &what);
        assert!(got.len() > 12 * 25, "{what}: {} frames", got.len());
        if what.contains("HLS") {
            assert_eq!(got.first(), want.first(), "{what}: from the feed's first frame");
        }
    }
    // One copy of the feed: the recording, committed whole once the feed ended.
    let deadline = Instant::now() + Duration::from_secs(15);
    let recorded = loop {
        let live = get_text(&format!("{}/api/v1/live", n1.http()));
        let objects = get_json(&format!("{}/api/v1/objects", n1.http()));
        let cam = objects.as_array().unwrap().iter().find(|o| o["name"] == "cam").cloned();
        if let Some(cam) = cam.filter(|_| !live.contains("\"cam\"")) {
            break cam["bytes"].as_f64().unwrap();
        }
        assert!(Instant::now() < deadline, "cam not committed: {objects}\n{}", c.logs());
        std::thread::sleep(Duration::from_millis(200));
    };
    let sent = metric(&get_text(&format!("{}/metrics", n1.http())), feed_out);
    let mut received = 0.0;
    for n in others {
        let got = metric(&get_text(&format!("{}/metrics", n.http())), feed_in);
        eprintln!(
            "{} received {got} bytes of the feed, {:.3} of its recording ({recorded} bytes)",
            n.name,
            got / recorded
        );
        assert!(
            (got / recorded - 1.0).abs() <= 0.10,
            "{}: {got} bytes of the feed for {recorded} recorded",
            n.name
        );
        received += got;
    }
    assert!(
        sent <= received * 1.01 + 4096.0,
        "n1 sent {sent} bytes, the others received {received}"
    );

    // The recording's ladder, made by the node that claimed the rung.
    let deadline = Instant::now() + Duration::from_secs(240);
    let job = loop {
        let jobs = get_json(&format!("{}/api/v1/transcode", n1.http()));
        let job = jobs["jobs"].as_array().and_then(|j| j.first()).cloned();
        if let Some(j) = job.filter(|j| j["state"] == "done" || j["state"] == "failed") {
            break j;
        }
        assert!(Instant::now() < deadline, "no ladder within 240 s: {jobs}\n{}", c.logs());
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!((&job["title"], &job["state"]), (&"cam".into(), &"done".into()), "{job}");
    let rendition = dir.join("cam-240p.mp4");
    let url = format!("{}/objects/cam~240p", others[1].http());
    let body = ureq::get(&url).call().expect(&url).into_body().read_to_vec().expect(&url);
    std::fs::write(&rendition, body).unwrap();
    assert_eq!(crate::renditions::height(&rendition), 240);
    let got = crate::native::decoded_video(&rendition).len();
    assert!(got + 2 >= want.len() && got <= want.len(), "{got} frames of {}", want.len());
}

/// Issue 28's crash of one node of three mid-feed (`docs/design/live.md`, step 6), two copies
/// of every block: GStreamer publishes the 30 s clip's transport stream over SRT to n1 as
/// `cam`, recorded as it arrives over the three nodes' disks; `isochron play` watches it live
/// on n2, and one `isochron play` on each of n2 and n3 plays the demo title meanwhile. n1 is
/// killed (SIGKILL) 8 s into the feed. The feed's viewer on n2 gets its BYE at once (the
/// subscription's connection closes) with nothing lost; the title's players end byte-exact
/// with no starvation, n1's copies taken over by the others; the recording is listed on n2 with
/// what n1 had committed (between 3.5 and 8 s) and is, through n2 and n3, the published stream
/// byte for byte (null packets aside) up to its end, its lost copies read from the others.
/// Restarted, n1 lists the same, and `fsck --server` finds every copy of every block.
#[test]
fn a_node_killed_mid_feed_keeps_what_it_committed_and_the_others_play_on() {
    require("gst-launch-1.0");
    let clip = common::fixture("clip30");
    let mut c = start_cluster_with(
        "[store]\nblock_size_kib = 64\nseed_demo = false\nreplication = 2\n\
         [live]\nsrt_listen = \"0.0.0.0:8890\"\n[auth]\nanonymous = [\"read\", \"publish\"]\n",
    );
    let d = c.dir.path().to_owned();
    c.ingest_demo(1);
    let (want, title) = (std::fs::read(&clip).unwrap(), std::fs::read(demo()).unwrap());
    let srt = format!("srt://{}:8890?streamid=publish:cam", c.nodes[0].host.ip);
    // srtsink may wait long for a peer that died: bounded.
    let mut cmd = c.client_cmd("timeout");
    cmd.args(["-k", "5", "45", "gst-launch-1.0"]);
    let mut publisher = crate::live::gst_publish_srt_cmd(cmd, &clip, &srt)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gst-launch-1.0");
    let started = Instant::now();
    let feed_in = "isochron_cluster_feed_bytes_total{direction=\"in\"}";
    let n2_metrics = format!("{}/metrics", c.nodes[1].http());
    while metric(&get_text(&n2_metrics), feed_in) == 0.0 {
        assert!(publisher.try_wait().unwrap().is_none(), "the publisher ended\n{}", c.logs());
        assert!(started.elapsed() < Duration::from_secs(10), "n2 never got the feed\n{}", c.logs());
        std::thread::sleep(Duration::from_millis(100));
    }
    let live_out = tmp(&d, "live-n2.ts");
    let live = spawn_play(&c, &c.nodes[1].rtsp("cam"), &live_out);
    let titles: Vec<(Child, PathBuf, String)> = [1, 2]
        .into_iter()
        .map(|i| {
            let out = tmp(&d, &format!("title-n{}.ts", i + 1));
            let what = format!("isochron play of the title on n{} past n1's death", i + 1);
            (spawn_play(&c, &c.nodes[i].rtsp("demo"), &out), out, what)
        })
        .collect();
    std::thread::sleep(Duration::from_secs(8).saturating_sub(started.elapsed()));
    let n1 = &mut c.nodes[0];
    n1.child.kill().expect("SIGKILL n1");
    let _ = n1.child.wait();
    let killed = Instant::now();

    let res = live.wait_with_output().unwrap();
    let summary: serde_json::Value = serde_json::from_slice(&res.stdout)
        .unwrap_or_else(|_| panic!("the feed's viewer: {}", String::from_utf8_lossy(&res.stderr)));
    eprintln!("the feed's viewer on n2, {:?} after the kill: {summary}", killed.elapsed());
    assert_eq!((&summary["ended"], &summary["lost"]), (&"bye".into(), &0.into()), "{summary}");
    assert!(killed.elapsed() < Duration::from_secs(10), "no BYE in time: {summary}");
    let watched = std::fs::read(&live_out).unwrap();
    assert!(watched.len() > 4 * 250_000, "{} bytes of the feed watched", watched.len());
    for (child, out, what) in titles {
        let summary = check_play(&c, child, &out, &title, &what);
        eprintln!("{what}: {summary}");
    }
    let _ = publisher.kill();
    let _ = publisher.wait();

    // What n1 committed is the recording, listed on n2, and served whole by n2 and n3.
    let published: Vec<u8> = crate::live::without_nulls(&want).concat();
    let deadline = Instant::now() + Duration::from_secs(15);
    let cam = loop {
        let objects = get_json(&format!("{}/api/v1/objects", c.nodes[1].http()));
        let cam = objects.as_array().unwrap().iter().find(|o| o["name"] == "cam").cloned();
        let live = get_text(&format!("{}/api/v1/live", c.nodes[1].http()));
        if let Some(cam) = cam.filter(|_| !live.contains("\"cam\"")) {
            break cam;
        }
        assert!(Instant::now() < deadline, "no recording on n2: {objects}\n{}", c.logs());
        std::thread::sleep(Duration::from_millis(200));
    };
    let duration = cam["duration_s"].as_f64().unwrap();
    assert!((3.5..8.5).contains(&duration), "committed before the kill: {cam}\n{}", c.logs());
    let size = cam["bytes"].as_u64().unwrap() as usize;
    for node in &c.nodes[1..] {
        let got = ureq::get(&format!("{}/objects/cam", node.http()))
            .call()
            .and_then(|r| r.into_body().with_config().limit(64 << 20).read_to_vec())
            .unwrap_or_else(|e| panic!("cam through {}: {e}\n{}", node.name, c.logs()));
        assert_eq!(got.len(), size, "{}: {cam}", node.name);
        let got: Vec<u8> = crate::live::without_nulls(&got).concat();
        assert_same_bytes(&got, &published[..got.len()], &format!("cam through {}", node.name));
    }
    let out = tmp(&d, "recording-n3.ts");
    let play = spawn_play(&c, &c.nodes[2].rtsp("cam"), &out);
    let summary = play_summary(&c, play, "the recording through n3");
    assert_eq!((&summary["ended"], &summary["lost"]), (&"bye".into(), &0.into()), "{summary}");
    let got: Vec<u8> = crate::live::without_nulls(&std::fs::read(&out).unwrap()).concat();
    assert_same_bytes(&got, &published[..got.len()], "the recording played through n3");

    let mut n1 = c.nodes.remove(0);
    restart(&c, &mut n1);
    c.nodes.insert(0, n1);
    let url = format!("{}/api/v1/nodes", c.nodes[1].http());
    wait_body(&url, |b| b.matches("\"state\":\"up\"").count() == 3, "n1 up again");
    let listed = get_json(&format!("{}/api/v1/objects", c.nodes[0].http()));
    let again = listed.as_array().unwrap().iter().find(|o| o["name"] == "cam").cloned();
    assert_eq!(again.as_ref().map(|o| &o["bytes"]), Some(&cam["bytes"]), "{listed}");
    let fsck = run(
        c.nodes[1].host.command(bin()).args(["fsck", "--server", &c.nodes[1].http(), "--json"]),
        120,
    );
    let report = String::from_utf8_lossy(&fsck.stdout);
    assert!(fsck.status.success(), "fsck after n1's crash mid-feed: {report}\n{}", c.logs());
}
