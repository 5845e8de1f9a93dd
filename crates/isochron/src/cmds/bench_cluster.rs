//! `isochron bench --cluster-nodes N --shape RATE --ingest FILE`: the bench against a cluster of
//! N isochron nodes, each behind a link of its own, on one machine — Yima's Figure 4 (§3.3:
//! N_max of 1, 2, 4 nodes; each node's share of the bandwidth).
//!
//! ```text
//!   root namespace: etcd (one member, on the bridge's .1), this process
//!        │ bridge (loadgen::testbed)
//!        ├── n1: isochron serve --etcd … --node n1 --disk d0   (veth under tbf at RATE)
//!        ├── …
//!        ├── nN
//!        └── clients: isochron bench … (the same binary; unshaped, or --client-shape)
//! ```
//!
//! Every node runs in a network namespace of its own with its own address, its veth pair shaped
//! to RATE in both directions ([`Host::shape`]); the nodes share one etcd (a member in the root
//! namespace, on free ports). Node 1 creates the store (`[store] block_size_kib`, 16 KiB by
//! default: each node's share of a stream is bursty at the grain of a block, which must be
//! small against a link's queue, `docs/design/cluster.md`; admission off: the links are what
//! is measured), the others join it; `--ingest` files go in through node 1 (from its
//! namespace: writes are member-only) and the run waits until every node lists them. The bench
//! then re-runs itself in the clients' namespace with the same flags minus the cluster ones,
//! playing `rtsp://NODE:8554/OBJECT?delivery=D` for every node and object, the sessions' RTSP
//! node taken in turn (`--popularity round-robin` unless given), `--link` N × RATE.
//!
//! Around the run it reads each node's counters — its veth's (what the node put on its link),
//! its shaper's drops (what it sent faster than the link carries), its `/metrics` (payload
//! bytes sent; node-to-node control, relay and block bytes), its CPU time — and adds them to
//! `report.json` as `cluster` (per node, with its share of the bytes the nodes sent, and the
//! node-to-node bytes against the media bytes), and draws `node_bytes.svg` (each node's B_net
//! over the run against the mean). Everything is removed at the end, also on failure. Needs
//! root and iproute2, and etcd (`etcd-server`).
//!
//! Not here: the measurement ([`super::bench`]), namespaces and shaping
//! ([`isochron_loadgen::testbed`]), etcd members ([`isochron_etcd::testing`]).

#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::{Child, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use isochron_etcd::testing::{ClusterOptions, EtcdCluster};
use isochron_loadgen::bench::plot;
use isochron_loadgen::testbed::{Host, Testbed};

use super::bench_chaos::{self, ChaosSpec};
use serde::Serialize;
use serde_json::json;

/// The prefix of the cluster bench's namespaces.
const PREFIX: &str = "isochron_cbench";

/// The flags of `bench` that configure the cluster, not the measurement (with a value).
const CLUSTER_FLAGS: [&str; 13] = [
    "--cluster-nodes",
    "--shape",
    "--server-cmd",
    "--ingest",
    "--client-shape",
    "--delivery",
    "--block-kib",
    "--replication",
    "--kill-nodes",
    "--etcd-members",
    "--chaos-kill-every",
    "--chaos-down",
    "--chaos-etcd-every",
];

/// What cluster to build.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    /// How many nodes.
    pub(crate) nodes: usize,
    /// Each node's link, bits/s.
    pub(crate) node_bits_s: f64,
    /// The clients' link, bits/s (`None`: unshaped).
    pub(crate) client_bits_s: Option<f64>,
    /// The files to ingest (object name = file stem).
    pub(crate) media: Vec<PathBuf>,
    /// `?delivery=` of the URLs.
    pub(crate) delivery: String,
    /// The store's block size, KiB.
    pub(crate) block_kib: u32,
    /// Copies of every block.
    pub(crate) replication: u8,
    /// How many nodes (the last ones) to kill before the measurement.
    pub(crate) kill: usize,
    /// etcd members (1, or 3 to restart one at a time).
    pub(crate) etcd_members: usize,
    /// Failures injected during the measurement ([`super::bench_chaos`]).
    pub(crate) chaos: ChaosSpec,
    /// Where the report goes.
    pub(crate) out: PathBuf,
}

/// A node's process, stopped (TERM, then KILL after 10 s) on drop.
struct Node {
    name: String,
    host: Host,
    child: Option<Child>,
}

impl Node {
    fn http(&self) -> String {
        format!("http://{}:8080", self.host.ip)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(c) = self.child.take() {
            super::shape::stop_child(c, Duration::from_secs(10));
        }
    }
}

/// One node's counters at one instant.
#[derive(Debug, Clone, Default)]
struct Counters {
    /// Bytes the node put on its link (the root-side veth's receive count).
    wire_tx: u64,
    /// Packets its link dropped on the way out (its token bucket's queue full).
    link_drops: u64,
    /// Bytes the node received on its link.
    wire_rx: u64,
    /// `/metrics`: RTP payload bytes sent.
    payload: f64,
    /// `/metrics`: control bytes to and from peers.
    control_out: f64,
    control_in: f64,
    /// `/metrics`: relayed RTP packets and bytes.
    relay_packets: f64,
    relay_bytes: f64,
    /// `/metrics`: block bytes written to peers.
    block_out: f64,
    /// CPU time of the node's process, clock ticks.
    cpu_ticks: u64,
}

/// One node's part of the run, as `report.json`'s `cluster.nodes[]` has it.
#[derive(Debug, Clone, Serialize)]
struct NodeReport {
    name: String,
    ip: IpAddr,
    /// Bytes the node put on its link during the bench (Ethernet frames).
    wire_tx_bytes: u64,
    /// Its mean rate on the link over the bench, bits/s.
    wire_tx_bits_s: f64,
    /// Packets it sent that its link dropped during the bench (the shaper's queue full): more
    /// than the link carries at once. Its clients lose them unless they ask again.
    link_drops: u64,
    /// RTP payload bytes it sent (its `/metrics`).
    payload_bytes: f64,
    /// Its share of the payload bytes all nodes sent, 0–1.
    share: f64,
    /// Its share against the mean share (1 = the mean).
    share_vs_mean: f64,
    /// Node-to-node control bytes it sent and received.
    control_bytes_out: f64,
    control_bytes_in: f64,
    /// Relayed RTP it forwarded (bipartite: none).
    relay_packets: f64,
    relay_bytes: f64,
    /// Block bytes it wrote to peers during the bench (ingest is before it).
    block_bytes_out: f64,
    /// Its process's CPU over the bench, % of one CPU.
    cpu_pct: f64,
}

/// Builds the cluster, runs the bench in the clients' namespace, reports per node, tears down.
pub(crate) fn run(spec: &Spec) -> anyhow::Result<ExitCode> {
    if spec.nodes == 0 {
        bail!("--cluster-nodes must be at least 1");
    }
    if spec.media.is_empty() {
        bail!("--cluster-nodes needs --ingest FILE (the media the clients play)");
    }
    if spec.kill >= spec.nodes {
        bail!("--kill-nodes {} leaves no node of {} to measure", spec.kill, spec.nodes);
    }
    if spec.kill >= usize::from(spec.replication.max(1)) {
        bail!(
            "--kill-nodes {} needs --replication above it: with {} cop{} of every block, some \
             blocks would have none left",
            spec.kill,
            spec.replication,
            if spec.replication == 1 { "y" } else { "ies" }
        );
    }
    std::fs::create_dir_all(&spec.out)
        .with_context(|| format!("creating {}", spec.out.display()))?;
    let exe = std::env::current_exe().context("finding the isochron binary")?;
    let _ = Testbed::cleanup_stale(PREFIX);
    let bed = Testbed::new(PREFIX).context("building the network (needs root)")?;
    if spec.chaos.etcd_every.is_some() && spec.etcd_members < 3 {
        bail!("--chaos-etcd-every needs --etcd-members 3 (or more): one member is the quorum");
    }
    if spec.chaos.kill_every.is_some() && (spec.replication < 2 || spec.kill > 0) {
        bail!(
            "--chaos-kill-every needs --replication 2 or more (a dead node's blocks are sent \
             from their next copies) and no --kill-nodes"
        );
    }
    let mut etcd = EtcdCluster::start_with(ClusterOptions {
        members: spec.etcd_members.max(1),
        extra_client_ip: Some(IpAddr::V4(bed.host_ip())),
        ..ClusterOptions::default()
    })
    .context("starting etcd (Debian: etcd-server)")?;
    let etcd_url = etcd.extra_endpoints().join(",");
    let work = tempfile::Builder::new().prefix("isochron-cbench-").tempdir()?;
    let config = work.path().join("cluster.toml");
    std::fs::write(
        &config,
        format!(
            "[store]\nblock_size_kib = {}\nreplication = {}\nseed_demo = false\n\n\
             [sched]\nadmission = \"off\"\n\n[cluster]\ndead_after_s = {}\n",
            spec.block_kib,
            spec.replication.max(1),
            // With nodes killed, what is measured is the survivors sending the dead nodes'
            // blocks from their other copies: no re-replication during the run.
            if spec.kill > 0 { 86_400 } else { 30 },
        ),
    )?;
    let logs = spec.out.join("logs");
    std::fs::create_dir_all(&logs)?;
    let node_rate = spec.node_bits_s.round() as u64;
    let mut nodes: Vec<Node> = Vec::new();
    let launch = Launch { exe: exe.clone(), config, work: work.path().into(), etcd_url, logs };
    for i in 1..=spec.nodes {
        let name = format!("n{i}");
        let host = bed.add_host(&name)?;
        host.shape(node_rate).with_context(|| format!("shaping {name}'s link"))?;
        let child = launch.spawn(&host, &name)?;
        let node = Node { name, host, child: Some(child) };
        // One at a time: the first creates the store, the others join it.
        wait_for(&format!("{}/healthz", node.http()), Duration::from_secs(60), |_| true)
            .with_context(|| {
                format!("node {} did not start (log: {})", node.name, launch.logs.display())
            })?;
        nodes.push(node);
    }
    for n in &nodes {
        let want = spec.nodes;
        wait_for(&format!("{}/api/v1/nodes", n.http()), Duration::from_secs(30), |body| {
            body.matches("\"state\":\"up\"").count() == want
        })
        .with_context(|| format!("{} never saw {want} nodes up", n.name))?;
    }
    let clients = bed.add_host("clients")?;
    if let Some(r) = spec.client_bits_s {
        clients.shape(r.round() as u64).context("shaping the clients' link")?;
    }
    let etcd_url = &launch.etcd_url;
    println!(
        "isochron bench: {} node(s) at {} Mb/s each, etcd {etcd_url}, clients at {}",
        spec.nodes,
        spec.node_bits_s / 1e6,
        spec.client_bits_s.map_or_else(|| "full speed".into(), |r| format!("{} Mb/s", r / 1e6))
    );
    let mut objects = Vec::new();
    for file in &spec.media {
        let name = file
            .file_stem()
            .and_then(|s| s.to_str())
            .with_context(|| format!("{}: no file name", file.display()))?
            .to_owned();
        let file = std::path::absolute(file)?;
        let t = Instant::now();
        let out = nodes[0]
            .host
            .command(&exe)
            .args(["ingest", "--server", &nodes[0].http()])
            .arg(&file)
            .stdin(Stdio::null())
            .output()
            .context("running isochron ingest")?;
        if !out.status.success() {
            bail!("ingest {}: {}", file.display(), String::from_utf8_lossy(&out.stderr).trim());
        }
        for n in &nodes {
            let quoted = format!("\"{name}\"");
            wait_for(&format!("{}/api/v1/objects", n.http()), Duration::from_secs(30), |b| {
                b.contains(&quoted)
            })
            .with_context(|| format!("{} never listed {name}", n.name))?;
        }
        println!("ingested {name} through n1 in {:.1} s", t.elapsed().as_secs_f64());
        objects.push(name);
    }
    let killed = kill_last(&mut nodes, spec.kill)?;
    let urls: Vec<String> = objects
        .iter()
        .flat_map(|o| {
            nodes
                .iter()
                .map(move |n| format!("rtsp://{}:8554/{o}?delivery={}", n.host.ip, spec.delivery))
        })
        .collect();
    let metrics: Vec<String> = nodes.iter().map(|n| format!("{}/metrics", n.http())).collect();
    let args = bench_args(std::env::args().skip(1), &urls, &metrics, spec);
    let before: Vec<Counters> = nodes.iter().map(|n| counters(&bed, n)).collect();
    let t0 = Instant::now();
    let mut chaos = None;
    let status = if spec.chaos.any() {
        let bench = clients
            .command(&exe)
            .args(&args)
            .spawn()
            .context("running the bench in the clients' namespace")?;
        let mut live = LiveCluster { nodes: &mut nodes, launch: &launch, retired: BTreeMap::new() };
        let (status, events) =
            bench_chaos::run(bench, &mut live, &mut etcd, spec.etcd_members, spec.chaos)?;
        let mut takeovers = live.retired.clone();
        for n in live.nodes.iter() {
            for (k, v) in takeover_counts(n) {
                *takeovers.entry(k).or_default() += v;
            }
        }
        chaos = Some((events, takeovers));
        status
    } else {
        clients
            .command(&exe)
            .args(&args)
            .status()
            .context("running the bench in the clients' namespace")?
    };
    let elapsed = t0.elapsed().as_secs_f64();
    let after: Vec<Counters> = nodes.iter().map(|n| counters(&bed, n)).collect();
    let report = node_reports(&nodes, &before, &after, elapsed);
    write_cluster(spec, &urls, &report, &killed, elapsed, chaos)?;
    drop(nodes);
    drop(etcd);
    drop(bed);
    Ok(if status.success() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// How a node is started, the first time and after a kill.
struct Launch {
    exe: PathBuf,
    config: PathBuf,
    work: PathBuf,
    etcd_url: String,
    logs: PathBuf,
}

impl Launch {
    /// Starts node `name` in `host`'s namespace on its store (`work/name`), its log appended
    /// to `logs/name.log`.
    fn spawn(&self, host: &Host, name: &str) -> anyhow::Result<Child> {
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(self.logs.join(format!("{name}.log")))?;
        host.command(&self.exe)
            .arg("serve")
            .arg("--config")
            .arg(&self.config)
            .arg("--data")
            .arg(self.work.join(name))
            .args(["--rtsp", &format!("{}:8554", host.ip)])
            .args(["--http", &format!("{}:8080", host.ip)])
            .args(["--rtp-port", "0", "--etcd", &self.etcd_url, "--node", name, "--disk", "d0"])
            .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting node {name}"))
    }
}

/// The running cluster, as the chaos loop kills and restarts it.
struct LiveCluster<'a> {
    nodes: &'a mut Vec<Node>,
    launch: &'a Launch,
    /// The takeover counters of node lives that ended (a restarted node counts from 0).
    retired: BTreeMap<String, f64>,
}

impl bench_chaos::Cluster for LiveCluster<'_> {
    fn len(&self) -> usize {
        self.nodes.len()
    }

    fn node(&self, i: usize) -> (String, String) {
        (self.nodes[i].name.clone(), self.nodes[i].host.ip.to_string())
    }

    fn kill(&mut self, i: usize) -> anyhow::Result<()> {
        let n = &mut self.nodes[i];
        for (k, v) in takeover_counts(n) {
            *self.retired.entry(k).or_default() += v;
        }
        if let Some(mut c) = n.child.take() {
            c.kill().with_context(|| format!("killing {}", n.name))?;
            let _ = c.wait();
        }
        Ok(())
    }

    fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        let n = &mut self.nodes[i];
        // The killed process's etcd lease may still hold the node's name: the new one refuses
        // to start ("already live") until it lapses. Start it again until it stays up.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let mut child = self.launch.spawn(&n.host, &n.name)?;
            let up = Instant::now() + Duration::from_secs(15);
            while Instant::now() < up && child.try_wait()?.is_none() {
                if get(&format!("{}/healthz", n.http())).is_ok() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            if child.try_wait()?.is_none() && get(&format!("{}/healthz", n.http())).is_ok() {
                n.child = Some(child);
                break;
            }
            let _ = child.kill();
            let _ = child.wait();
            if Instant::now() >= deadline {
                bail!(
                    "{} did not start again within 60 s (its log: {})",
                    n.name,
                    self.launch.logs.display()
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        let want = self.nodes.len();
        for n in self.nodes.iter() {
            wait_for(&format!("{}/api/v1/nodes", n.http()), Duration::from_secs(60), |body| {
                body.matches("\"state\":\"up\"").count() == want
            })
            .with_context(|| format!("{} never saw {want} nodes up", n.name))?;
        }
        Ok(())
    }

    fn fsck(&self, i: usize) -> anyhow::Result<(bool, serde_json::Value)> {
        let n = &self.nodes[i];
        let out = n
            .host
            .command(&self.launch.exe)
            .args(["fsck", "--json", "--server", &n.http()])
            .stdin(Stdio::null())
            .output()
            .context("running isochron fsck")?;
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(
            |_| json!({ "stderr": String::from_utf8_lossy(&out.stderr).trim().to_owned() }),
        );
        Ok((out.status.success(), report))
    }
}

/// A node's `isochron_takeovers_total` by event, from its `/metrics` (none if it is down).
fn takeover_counts(n: &Node) -> Vec<(String, f64)> {
    let Ok(text) = get(&format!("{}/metrics", n.http())) else { return Vec::new() };
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("isochron_takeovers_total{event=\"")?;
            let (event, value) = rest.split_once("\"}")?;
            Some((event.to_owned(), value.trim().parse().ok()?))
        })
        .collect()
}

/// SIGKILLs the last `m` nodes and waits until every survivor's `/api/v1/nodes` shows them
/// down (their leases lapsed) and the others up. Returns the killed nodes' names.
fn kill_last(nodes: &mut Vec<Node>, m: usize) -> anyhow::Result<Vec<String>> {
    let mut killed = Vec::new();
    for _ in 0..m {
        let Some(mut n) = nodes.pop() else { break };
        if let Some(mut c) = n.child.take() {
            c.kill().with_context(|| format!("killing {}", n.name))?;
            let _ = c.wait();
        }
        killed.push(n.name.clone());
    }
    if killed.is_empty() {
        return Ok(killed);
    }
    let t = Instant::now();
    let up = nodes.len();
    for n in nodes.iter() {
        wait_for(&format!("{}/api/v1/nodes", n.http()), Duration::from_secs(60), |body| {
            body.matches("\"state\":\"up\"").count() == up
                && body.matches("\"state\":\"down\"").count() >= killed.len()
        })
        .with_context(|| format!("{} never saw {} down", n.name, killed.join(", ")))?;
    }
    println!(
        "killed {} (SIGKILL); the {up} others saw it down after {:.1} s",
        killed.join(", "),
        t.elapsed().as_secs_f64()
    );
    Ok(killed)
}

/// The bench's own flags for the run in the clients' namespace: ours minus the cluster's, plus
/// the URLs, round-robin over them unless a popularity was given, every node's `metrics`
/// unless some were given, and the link.
fn bench_args(
    ours: impl Iterator<Item = String>,
    urls: &[String],
    metrics: &[String],
    spec: &Spec,
) -> Vec<String> {
    let mut args: Vec<String> = Vec::new();
    let mut skip = false;
    for a in ours {
        if skip {
            skip = false;
            continue;
        }
        if CLUSTER_FLAGS.contains(&a.as_str()) {
            skip = true;
            continue;
        }
        if CLUSTER_FLAGS.iter().any(|f| a.starts_with(&format!("{f}="))) {
            continue;
        }
        args.push(a);
    }
    let has =
        |args: &[String], f: &str| args.iter().any(|a| a == f || a.starts_with(&format!("{f}=")));
    if !has(&args, "--popularity") {
        args.extend(["--popularity".into(), "round-robin".into()]);
    }
    if !has(&args, "--metrics") {
        // Every node's counters, each kept apart: B_disk and B_cache per node (Yima Fig. 4e/f).
        for url in metrics {
            args.extend(["--metrics".into(), url.clone()]);
        }
    }
    if !has(&args, "--link") {
        let total = spec.node_bits_s * (spec.nodes - spec.kill) as f64;
        args.extend(["--link".into(), format!("{}bit", total.round() as u64)]);
    }
    args.extend(urls.iter().cloned());
    args
}

/// GETs `url` until `ok(body)` or `limit` passes.
fn wait_for(url: &str, limit: Duration, ok: impl Fn(&str) -> bool) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        let last = match get(url) {
            Ok(body) if ok(&body) => return Ok(()),
            Ok(body) => body,
            Err(e) => format!("{e:#}"),
        };
        if Instant::now() >= deadline {
            bail!("{url}: not ready after {limit:?} (last: {})", last.trim());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn get(url: &str) -> anyhow::Result<String> {
    let agent: ureq::Agent =
        ureq::Agent::config_builder().timeout_global(Some(Duration::from_secs(5))).build().into();
    Ok(agent.get(url).call()?.body_mut().read_to_string()?)
}

/// A node's counters now: its veth's, its `/metrics`', its CPU time.
fn counters(bed: &Testbed, n: &Node) -> Counters {
    let mut c = Counters::default();
    // The root-side end of the node's veth: what it receives is what the node sent.
    if let Some(veth) = bed.interfaces().into_iter().find(|i| veth_of(i, &n.host)) {
        let stat = |f: &str| {
            std::fs::read_to_string(format!("/sys/class/net/{veth}/statistics/{f}"))
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        c.wire_tx = stat("rx_bytes");
        c.wire_rx = stat("tx_bytes");
    }
    c.link_drops = n.host.uplink_drops().unwrap_or(0);
    if let Ok(text) = get(&format!("{}/metrics", n.http())) {
        // Each sample with its labels, as written (prom::parse sums label sets).
        let v = |k: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(k).and_then(|v| v.trim().parse::<f64>().ok()))
                .unwrap_or(0.0)
        };
        c.payload = v("isochron_payload_bytes_sent_total");
        c.control_out = v("isochron_cluster_control_bytes_total{direction=\"out\"}");
        c.control_in = v("isochron_cluster_control_bytes_total{direction=\"in\"}");
        c.relay_packets = v("isochron_cluster_relay_packets_total");
        c.relay_bytes = v("isochron_cluster_relay_bytes_total");
        c.block_out = v("isochron_cluster_block_bytes_out_total");
    }
    if let Some(pid) = n.child.as_ref().map(Child::id)
        && let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        && let Some((_, rest)) = stat.rsplit_once(')')
    {
        let f: Vec<&str> = rest.split_whitespace().collect();
        // Fields 14 and 15 (utime, stime): 12 and 13 after the state.
        let t = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        c.cpu_ticks = t(11) + t(12);
    }
    c
}

/// Whether root-namespace interface `iface` is `host`'s veth end: its alias is the host's
/// namespace + `-veth`.
fn veth_of(iface: &str, host: &Host) -> bool {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/ifalias"))
        .is_ok_and(|a| a.trim() == format!("{}-veth", host.ns))
}

fn node_reports(
    nodes: &[Node],
    before: &[Counters],
    after: &[Counters],
    elapsed: f64,
) -> Vec<NodeReport> {
    // USER_HZ, the unit of /proc/PID/stat's times: 100 on every Linux this runs on.
    const HZ: f64 = 100.0;
    let d = |a: f64, b: f64| (b - a).max(0.0);
    let mut out: Vec<NodeReport> = nodes
        .iter()
        .zip(before.iter().zip(after))
        .map(|(n, (b, a))| {
            let wire = a.wire_tx.saturating_sub(b.wire_tx);
            NodeReport {
                name: n.name.clone(),
                ip: IpAddr::V4(n.host.ip),
                wire_tx_bytes: wire,
                wire_tx_bits_s: wire as f64 * 8.0 / elapsed.max(1e-3),
                link_drops: a.link_drops.saturating_sub(b.link_drops),
                payload_bytes: d(b.payload, a.payload),
                share: 0.0,
                share_vs_mean: 0.0,
                control_bytes_out: d(b.control_out, a.control_out),
                control_bytes_in: d(b.control_in, a.control_in),
                relay_packets: d(b.relay_packets, a.relay_packets),
                relay_bytes: d(b.relay_bytes, a.relay_bytes),
                block_bytes_out: d(b.block_out, a.block_out),
                cpu_pct: 100.0 * a.cpu_ticks.saturating_sub(b.cpu_ticks) as f64
                    / HZ
                    / elapsed.max(1e-3),
            }
        })
        .collect();
    let total: f64 = out.iter().map(|n| n.payload_bytes).sum();
    let k = out.len().max(1) as f64;
    for n in &mut out {
        n.share = if total > 0.0 { n.payload_bytes / total } else { 0.0 };
        n.share_vs_mean = n.share * k;
    }
    out
}

/// Adds `cluster` to the bench's `report.json` and draws `node_bytes.svg`.
fn write_cluster(
    spec: &Spec,
    urls: &[String],
    nodes: &[NodeReport],
    killed: &[String],
    elapsed: f64,
    chaos: Option<(Vec<bench_chaos::ChaosEvent>, BTreeMap<String, f64>)>,
) -> anyhow::Result<()> {
    let path = spec.out.join("report.json");
    let mut doc: serde_json::Value = match std::fs::read(&path) {
        Ok(b) => serde_json::from_slice(&b).with_context(|| format!("{}", path.display()))?,
        Err(_) => json!({}),
    };
    let chaos = match chaos {
        Some((events, takeovers)) => {
            let audit = bench_chaos::audit(&doc, &events, &spec.media, takeovers)?;
            println!(
                "chaos: {} sessions: {} byte-exact ({} checked against their file), {} cut by \
                 the run's end, {} on a killed node, {} refused, {} broken",
                audit.started,
                audit.byte_exact,
                audit.digest_checked,
                audit.cut_by_the_end,
                audit.on_a_killed_node,
                audit.refused,
                audit.broken.len()
            );
            for b in audit.broken.iter().take(20) {
                println!("  broken: {b}");
            }
            Some(bench_chaos::to_json(&events, &audit))
        }
        None => None,
    };
    let media: f64 = nodes.iter().map(|n| n.payload_bytes).sum();
    let node_to_node: f64 =
        nodes.iter().map(|n| n.control_bytes_out + n.relay_bytes + n.block_bytes_out).sum();
    let spread = nodes.iter().map(|n| (n.share_vs_mean - 1.0).abs()).fold(0.0f64, f64::max);
    doc["cluster"] = json!({
        "nodes": nodes,
        "node_count": spec.nodes,
        "replication": spec.replication.max(1),
        "killed": killed,
        "node_link_bits_s": spec.node_bits_s,
        "client_link_bits_s": spec.client_bits_s,
        "delivery": spec.delivery,
        "block_size_kib": spec.block_kib,
        "media": spec.media,
        "urls": urls,
        "bench_wall_s": elapsed,
        "media_bytes": media,
        "node_to_node_bytes": node_to_node,
        "node_to_node_fraction": if media > 0.0 { node_to_node / media } else { 0.0 },
        "max_share_deviation": spread,
        "etcd_members": spec.etcd_members.max(1),
        "chaos": chaos,
    });
    std::fs::write(&path, serde_json::to_vec_pretty(&doc)?)
        .with_context(|| format!("writing {}", path.display()))?;
    let bars: Vec<(String, f64)> =
        nodes.iter().map(|n| (format!("{} ({})", n.name, n.ip), n.wire_tx_bits_s / 1e6)).collect();
    plot::node_bars(
        &spec.out.join("node_bytes.svg"),
        "B_net per node over the run (Yima Fig. 4: each node's share)",
        "Mb/s on the node's link",
        &bars,
        Some(spec.node_bits_s / 1e6),
    )?;
    println!(
        "cluster: media {:.1} MB from {} nodes, shares {}, node-to-node {:.4} % of media, \
         packets their links dropped {}",
        media / 1e6,
        nodes.len(),
        nodes
            .iter()
            .map(|n| format!("{} {:.1} %", n.name, 100.0 * n.share))
            .collect::<Vec<_>>()
            .join(", "),
        if media > 0.0 { 100.0 * node_to_node / media } else { 0.0 },
        nodes.iter().map(|n| format!("{} {}", n.name, n.link_drops)).collect::<Vec<_>>().join(", ")
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inner_bench_gets_the_urls_without_the_cluster_flags() {
        let spec = Spec {
            nodes: 2,
            node_bits_s: 100e6,
            client_bits_s: None,
            media: vec![],
            delivery: "bipartite".into(),
            block_kib: 64,
            replication: 1,
            kill: 0,
            etcd_members: 1,
            chaos: ChaosSpec::default(),
            out: PathBuf::from("o"),
        };
        let ours = "bench --out o --cluster-nodes 2 --shape 100mbit --ingest a.ts \
                    --delivery=relay --find-nmax --trial 60"
            .split_whitespace()
            .map(String::from);
        let urls = ["rtsp://a/x".to_string(), "rtsp://b/x".into()];
        let metrics = ["http://a:8080/metrics".to_string(), "http://b:8080/metrics".into()];
        let got = bench_args(ours, &urls, &metrics, &spec);
        assert_eq!(
            got.join(" "),
            "bench --out o --find-nmax --trial 60 --popularity round-robin --metrics \
             http://a:8080/metrics --metrics http://b:8080/metrics --link 200000000bit \
             rtsp://a/x rtsp://b/x"
        );
    }
}
