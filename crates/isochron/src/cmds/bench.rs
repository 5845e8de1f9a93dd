//! `isochron bench`: Yima §3's measurement against any RTSP server. Emulation clients (real RTSP
//! sessions whose players consume the MPEG-TS by its PCR behind a playout buffer, or a native
//! presentation's tracks, every one set up, by their RTP timestamps; with MTFC rate requests)
//! under a load shape; a sample every second of the clients (B_net, B_avgNet, R_Δr,
//! starvations) and of the server (`/proc`, and isochron's `/metrics`); N_max; the bottleneck
//! named with its evidence (He et al.); Yima's Figure 3 panels. The work is
//! `isochron_loadgen::bench`; this file parses the flags, runs it and writes the report.
//!
//! With `--shape RATE --server-cmd CMD` the server runs in a network namespace of its own, joined
//! to the clients' namespace through a bridge by veth pairs shaped with `tc` to RATE (see
//! [`super::shape`]).

#![allow(clippy::print_stdout)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use isochron_base::Pace;
use isochron_loadgen::Transport;
use isochron_loadgen::bench::{
    ClientSettings, LatencySummary, Load, MtfcConfig, Outcome, Popularity, RunConfig, RunResult,
    Thresholds, decide, plot, report,
};
use serde_json::json;

/// bench arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The objects to play (`rtsp://host:port/name`); several for a many-object workload.
    /// With --cluster-nodes, none: the bench makes them (each node × each --ingest object).
    #[arg(value_name = "URL", required_unless_present_any = ["cluster_nodes", "scale_up"])]
    urls: Vec<String>,
    /// Where the report goes (report.json, samples.csv, *.svg, verdict.txt); created.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Lower transport: udp or tcp (interleaved); a list (`udp,tcp`) mixes them, client k
    /// using the list's entry k mod its length.
    #[arg(long, value_name = "T", default_value = "udp", value_delimiter = ',')]
    transport: Vec<Transport>,
    /// Playout buffer depth: playback starts (and resumes after a starvation) with this much
    /// media buffered.
    #[arg(long, value_name = "MS", default_value_t = 2000)]
    buffer_ms: u64,
    /// The whole run's length, seconds.
    #[arg(long, value_name = "S", default_value_t = 60)]
    duration: u64,
    /// Fixed load: N clients from the start.
    #[arg(long, value_name = "N", group = "shape_of_load")]
    clients: Option<usize>,
    /// Staggered arrivals, clients per minute (Yima: 0.5).
    #[arg(long, value_name = "PER_MIN", group = "shape_of_load")]
    arrival_rate: Option<f64>,
    /// Ramp: add --ramp-step clients every --ramp-interval seconds until N fails.
    #[arg(long, group = "shape_of_load")]
    ramp: bool,
    /// Find N_max by trials of fixed N (doubling, then bisection), each playing the whole
    /// object (--trial).
    #[arg(long, group = "shape_of_load")]
    find_nmax: bool,
    /// Clients added per ramp step.
    #[arg(long, value_name = "K", default_value_t = 1)]
    ramp_step: usize,
    /// Seconds per ramp step.
    #[arg(long, value_name = "S", default_value_t = 10)]
    ramp_interval: u64,
    /// Seconds per N_max trial: at least the longest object's length, so every session is
    /// served the heaviest part of a VBR clip [default: that length + the playout buffer + 3 s].
    #[arg(long, value_name = "S")]
    trial: Option<u64>,
    /// The first N_max trial's N: doubling up from it while trials pass, halving down while
    /// they fail, then bisection (a guess saves the trials below it).
    #[arg(long, value_name = "N", default_value_t = 1)]
    nmax_from: usize,
    /// Staggered looping clients: client k starts at a fraction frac(k × 0.618…) of its object
    /// and plays it in a loop on one session (PLAY from 0 at its end), so N clients play N
    /// parts spread over the whole object and none leaves during a trial.
    #[arg(long)]
    stagger: bool,
    /// Upper bound on clients for --arrival-rate, --ramp and --find-nmax.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    max_clients: usize,
    /// Which URL a new session plays: uniform, zipf:S, or round-robin (client k plays URL k mod
    /// the number of URLs).
    #[arg(long, value_name = "LAW", default_value = "uniform")]
    popularity: Popularity,
    /// Each interactive client (--interactive-share) seeks (PLAY with a random Range) about
    /// every S seconds.
    #[arg(long, value_name = "S")]
    seek_every: Option<f64>,
    /// Each interactive client (--interactive-share) pauses about every S seconds, for
    /// --pause-ms.
    #[arg(long, value_name = "S")]
    pause_every: Option<f64>,
    /// The share of clients that seek and pause (--seek-every, --pause-every): client k is one
    /// when frac(k × 0.618…) is below it, so any first N clients hold about that share.
    #[arg(long, value_name = "F", default_value_t = 1.0)]
    interactive_share: f64,
    /// Length of a pause.
    #[arg(long, value_name = "MS", default_value_t = 2000)]
    pause_ms: u64,
    /// Clients ask for a faster or slower pace when their buffer runs low or high (MTFC,
    /// Yima's client-driven rate smoothing; isochron only). Standard players never do: without
    /// this flag the bench loads a server as they do (nominal pacing).
    #[arg(long, conflicts_with = "no_mtfc")]
    mtfc: bool,
    /// Nominal pacing, no MTFC rate requests (the default; kept for scripts).
    #[arg(long, hide = true)]
    no_mtfc: bool,
    /// With --mtfc: clients also ask the server to pace by bytes at the object's mean rate
    /// (x-isochron-pacing: rate), so that a VBR stream's bursts land in their buffers and not
    /// on the network; MTFC's rate requests steer that rate (isochron only, one node).
    #[arg(long, requires = "mtfc")]
    rate_paced: bool,
    /// MTFC's intermediate thresholds K.
    #[arg(long, value_name = "K", default_value_t = 8)]
    mtfc_thresholds: u32,
    /// Ask every session for this pace once (x-isochron-rate, e.g. 0.8) and no MTFC: emulates
    /// a server that sends slower (or faster) than the content's own rate.
    #[arg(long, value_name = "R")]
    force_rate: Option<f64>,
    /// Seed of every random choice [default: from the clock; always in report.json].
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// The server's PID: adds its CPU, memory and IO to the samples.
    #[arg(long, value_name = "PID")]
    server_pid: Option<u32>,
    /// Network counters of this interface only [default: all, loopback included].
    #[arg(long, value_name = "NAME")]
    iface: Option<String>,
    /// The server's Prometheus endpoint (`http://ADDR/metrics`): B_disk, B_cache, admission
    /// rejects, missed deadlines. Repeat it for every node of a cluster: their counters are
    /// summed, and each node's B_disk and B_cache kept apart (Yima Fig. 4e/f; `--cluster-nodes`
    /// gives every node's).
    #[arg(long, value_name = "URL")]
    metrics: Vec<String>,
    /// The link rate, for the network rule and plot (e.g. 100mbit, 1gbit).
    #[arg(long, value_name = "RATE", value_parser = parse_link_rate)]
    link: Option<f64>,
    /// B_avgNet may fall this fraction below the content's rate before N fails.
    #[arg(long, value_name = "F", default_value_t = 0.05)]
    tolerance: f64,
    /// Shape the link between server and clients to RATE (e.g. 100mbit): two network
    /// namespaces on a bridge, their veth pairs under `tc` (needs root and --server-cmd).
    #[arg(long, value_name = "RATE", value_parser = parse_link_rate)]
    shape: Option<f64>,
    /// With --shape: the server's command line, run in the server namespace (its address there
    /// is 10.77.0.1; URLs should name it).
    #[arg(long, value_name = "CMD", conflicts_with = "cluster_nodes")]
    server_cmd: Option<String>,
    /// A cluster of N isochron nodes instead of --server-cmd: each node in a namespace of its
    /// own behind a link shaped to --shape RATE, on a local etcd; the --ingest files ingested
    /// through node 1; sessions spread over the nodes (round-robin); per-node bytes, CPU and
    /// node-to-node traffic in report.json's `cluster` (needs root, iproute2 and etcd).
    #[arg(long, value_name = "N", requires_all = ["shape", "ingest"])]
    cluster_nodes: Option<usize>,
    /// With --cluster-nodes: a media file to ingest and play (object name = file stem); repeat
    /// for several.
    #[arg(long, value_name = "FILE")]
    ingest: Vec<PathBuf>,
    /// With --cluster-nodes: shape the clients' link to RATE too [default: unshaped].
    #[arg(long, value_name = "RATE", value_parser = parse_link_rate)]
    client_shape: Option<f64>,
    /// With --cluster-nodes: the URLs' `?delivery=` (bipartite, relay or auto).
    #[arg(long, value_name = "D", default_value = "bipartite", value_parser = ["bipartite", "relay", "auto"])]
    delivery: String,
    /// With --cluster-nodes: the cluster store's block size, KiB (the stripe unit: small
    /// enough that each node's share of a stream is smooth; docs/results/fig4.md).
    #[arg(long, value_name = "KIB", default_value_t = 16)]
    block_kib: u32,
    /// With --cluster-nodes: copies of every block (`store.replication`).
    #[arg(long, value_name = "K", default_value_t = 1)]
    replication: u8,
    /// With --cluster-nodes: SIGKILL the last M nodes after the ingest, wait until the others
    /// see them down, and measure the survivors (capacity after a failure): the killed nodes'
    /// blocks are sent from their other copies, and are not re-created during the run.
    #[arg(long, value_name = "M", default_value_t = 0)]
    kill_nodes: usize,
    /// With --cluster-nodes: etcd members (3 for --chaos-etcd-every: one restarts, two keep
    /// the quorum).
    #[arg(long, value_name = "N", default_value_t = 1)]
    etcd_members: usize,
    /// With --cluster-nodes and --replication 2 or more: every S seconds SIGKILL the next node
    /// in turn, start it again after --chaos-down, and check the cluster with fsck once every
    /// node sees it up; report.json's `cluster.chaos` audits every session (the soak).
    #[arg(long, value_name = "S")]
    chaos_kill_every: Option<u64>,
    /// How long a node killed by --chaos-kill-every stays down, seconds.
    #[arg(long, value_name = "S", default_value_t = 5)]
    chaos_down: u64,
    /// With --cluster-nodes and --etcd-members 3: every S seconds restart the next etcd member
    /// in turn.
    #[arg(long, value_name = "S")]
    chaos_etcd_every: Option<u64>,
    /// Instead of a run: read the report.json of cluster runs (directories given as the URL
    /// arguments) and write Yima's Figure 4 summary into --out: `scale_up.svg` (N_max against
    /// the number of nodes) and `scale_up.json`.
    #[arg(long)]
    scale_up: bool,
    /// Live viewers: a shell command that publishes a feed to the URL (e.g. `ffmpeg -re -i
    /// clip.ts -c copy -f mpegts 'srt://HOST:PORT?streamid=publish:live{trial}'`), started for
    /// each trial (for --clients, once); `{trial}` in it and in the URLs is the trial's number,
    /// so each trial watches a feed of its own. The clients join when the feed is described
    /// and watch it once, to its end; the trial ends with it. With --find-nmax, --trial bounds
    /// a trial: at least the feed's length.
    #[arg(long, value_name = "CMD", conflicts_with_all = ["cluster_nodes", "stagger", "scale_up"])]
    publish: Option<String>,
    /// Threads of the bench's runtime.
    #[arg(long, value_name = "N", default_value_t = 1)]
    threads: usize,
}

/// A link rate in bits/s: `100mbit`, `1gbit`, `5000kbit`, `100M`, `1G`, `2500000`.
pub(crate) fn parse_link_rate(s: &str) -> Result<f64, String> {
    let lower = s.trim().to_ascii_lowercase();
    let body = lower.strip_suffix("bit").or_else(|| lower.strip_suffix("bps")).unwrap_or(&lower);
    let (num, mult) = match body.chars().last() {
        Some('k') => (&body[..body.len() - 1], 1e3),
        Some('m') => (&body[..body.len() - 1], 1e6),
        Some('g') => (&body[..body.len() - 1], 1e9),
        _ => (body, 1.0),
    };
    match num.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v * mult),
        _ => Err(format!("{s:?}: expected a rate such as 100mbit or 1gbit")),
    }
}

/// Runs `isochron bench`.
pub(crate) fn run(a: Args) -> anyhow::Result<ExitCode> {
    if a.duration == 0 {
        bail!("--duration must be at least 1 second");
    }
    if a.scale_up {
        return scale_up(&a.out, &a.urls);
    }
    if let (Some(nodes), Some(rate)) = (a.cluster_nodes, a.shape) {
        return super::bench_cluster::run(&super::bench_cluster::Spec {
            nodes,
            node_bits_s: rate,
            client_bits_s: a.client_shape,
            media: a.ingest.clone(),
            delivery: a.delivery.clone(),
            block_kib: a.block_kib,
            replication: a.replication,
            kill: a.kill_nodes,
            etcd_members: a.etcd_members,
            chaos: super::bench_chaos::ChaosSpec {
                kill_every: a.chaos_kill_every.map(|s| Duration::from_secs(s.max(1))),
                down: Duration::from_secs(a.chaos_down),
                etcd_every: a.chaos_etcd_every.map(|s| Duration::from_secs(s.max(1))),
            },
            out: a.out,
        });
    }
    if a.shape.is_some() && a.server_cmd.is_none() {
        bail!("--shape needs --server-cmd or --cluster-nodes");
    }
    if let (Some(rate), Some(cmd)) = (a.shape, &a.server_cmd) {
        return super::shape::run(rate, cmd, &a.urls);
    }
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let seed = a.seed.unwrap_or_else(|| {
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    });
    let load = if let Some(n) = a.clients {
        Load::Fixed { clients: n }
    } else if let Some(r) = a.arrival_rate {
        Load::Arrivals { per_min: r, max: a.max_clients }
    } else if a.ramp {
        Load::Ramp {
            step: a.ramp_step.max(1),
            interval: Duration::from_secs(a.ramp_interval.max(1)),
            max: a.max_clients,
        }
    } else if a.find_nmax {
        let trial = match (&a.publish, a.trial) {
            (Some(_), Some(t)) => Duration::from_secs(t.max(2)),
            (Some(_), None) => bail!(
                "--publish with --find-nmax needs --trial: a live feed's length is not known \
                 before it ends (at least the feed's length, so every viewer sees all of it)"
            ),
            (None, t) => trial_length(&a.urls, t, Duration::from_millis(a.buffer_ms))?,
        };
        if Duration::from_secs(a.duration) < trial {
            bail!(
                "--duration {} s cannot hold one --find-nmax trial of {:.0} s: the search runs \
                 several trials within --duration (e.g. --duration 3600)",
                a.duration,
                trial.as_secs_f64()
            );
        }
        Load::Bisect { trial, max: a.max_clients, from: a.nmax_from.max(1) }
    } else {
        Load::Fixed { clients: 1 }
    };
    let force_pace = match a.force_rate {
        Some(r) => Some(
            Pace::from_multiplier(r)
                .with_context(|| format!("--force-rate {r}: expected 0.1 to 10"))?,
        ),
        None => None,
    };
    let buffer = Duration::from_millis(a.buffer_ms.max(1));
    let settings = ClientSettings {
        urls: a.urls.clone(),
        transports: a.transport.clone(),
        buffer,
        mtfc: a.mtfc.then(|| match a.rate_paced {
            true => MtfcConfig::for_rate_pacing(buffer, a.mtfc_thresholds),
            false => MtfcConfig::for_depth(buffer, a.mtfc_thresholds),
        }),
        force_pace,
        rate_paced: a.rate_paced,
        popularity: a.popularity,
        seek_every: a.seek_every.map(Duration::from_secs_f64),
        pause_every: a.pause_every.map(Duration::from_secs_f64),
        pause_for: Duration::from_millis(a.pause_ms),
        interactive_share: a.interactive_share.clamp(0.0, 1.0),
        repeat: true,
        stagger: a.stagger,
        epoch: std::time::Instant::now(),
    };
    let link = a.shape.or(a.link);
    let config = RunConfig {
        clients: settings,
        load,
        duration: Duration::from_secs(a.duration),
        seed,
        interval: Duration::from_secs(1),
        server_pid: a.server_pid,
        iface: a.iface.clone(),
        metrics: a.metrics.clone(),
        tolerance: a.tolerance,
        publish: a.publish.clone(),
    };
    let started = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(a.threads.max(1))
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let result = rt.block_on(isochron_loadgen::bench::run(config))?;
    let files = write_report(&a, seed, started, load, link, &result)?;
    let s = &result;
    let start = start_latency(s).map_or_else(String::new, |l| {
        format!(", PLAY → first RTP p50 {:.1} ms p99 {:.1} ms", l.p50_ms, l.p99_ms)
    });
    let late = lateness(s).map_or_else(String::new, |l| {
        format!(", session lateness p99 {:.0} ms max {:.0} ms", l.p99_ms, l.max_ms)
    });
    println!(
        "isochron bench ({}): {} sessions, N_max = {}, bottleneck: {}{start}{late}; the bench \
         {:.0} % of a CPU ({} threads); report in {} ({} files)",
        pacing(&a),
        s.sessions.len(),
        s.n_max.map_or_else(|| "none".into(), |n| n.to_string()),
        files.0,
        s.bench_cpu_pct,
        a.threads.max(1),
        a.out.display(),
        files.1
    );
    Ok(ExitCode::SUCCESS)
}

/// `--scale-up`: N_max of each cluster run in `runs` against its number of nodes.
fn scale_up(out: &std::path::Path, runs: &[String]) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut points = Vec::new();
    let mut rows = Vec::new();
    for dir in runs {
        let path = std::path::Path::new(dir).join("report.json");
        let doc: serde_json::Value = serde_json::from_slice(
            &std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?,
        )
        .with_context(|| format!("parsing {}", path.display()))?;
        let nodes = doc["cluster"]["node_count"]
            .as_u64()
            .with_context(|| format!("{}: not a --cluster-nodes run", path.display()))?;
        let n_max = doc["n_max"].as_u64().unwrap_or(0);
        points.push((nodes as usize, n_max as usize));
        rows.push(json!({
            "run": dir,
            "nodes": nodes,
            "n_max": n_max,
            "first_failure_n": doc["first_failure_n"],
            "node_to_node_fraction": doc["cluster"]["node_to_node_fraction"],
            "max_share_deviation": doc["cluster"]["max_share_deviation"],
            "shares": doc["cluster"]["nodes"].as_array().map(|v| {
                v.iter().map(|n| n["share"].clone()).collect::<Vec<_>>()
            }),
        }));
    }
    points.sort_unstable();
    let one = points.iter().find(|p| p.0 == 1).map(|p| p.1);
    let ratios: Vec<serde_json::Value> = points
        .iter()
        .map(|&(k, n)| {
            json!({
                "nodes": k,
                "n_max": n,
                "vs_one_node": one.filter(|&o| o > 0).map(|o| n as f64 / o as f64),
            })
        })
        .collect();
    plot::scale_up(&out.join("scale_up.svg"), &points)?;
    let doc = json!({ "points": ratios, "runs": rows });
    std::fs::write(out.join("scale_up.json"), serde_json::to_vec_pretty(&doc)?)
        .with_context(|| format!("writing {}", out.join("scale_up.json").display()))?;
    for &(k, n) in &points {
        let r = one
            .filter(|&o| o > 0)
            .map_or_else(String::new, |o| format!(" ({:.2} × one node)", n as f64 / o as f64));
        println!("{k} node(s): N_max = {n}{r}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The sessions' start latencies (PLAY sent → first RTP packet).
fn start_latency(r: &RunResult) -> Option<LatencySummary> {
    LatencySummary::of(r.sessions.iter().filter_map(|s| s.start_latency_ms))
}

/// The sessions' lateness: how far behind its stream's own schedule each one's latest packet
/// came.
fn lateness(r: &RunResult) -> Option<LatencySummary> {
    LatencySummary::of(r.sessions.iter().filter(|s| s.packets > 0).map(|s| s.lateness_max_ms))
}

/// How the clients pace, for the report.
fn pacing(a: &Args) -> &'static str {
    match (a.force_rate, a.mtfc) {
        (Some(_), _) => "forced rate",
        (None, true) if a.rate_paced => {
            "MTFC, rate-paced: clients ask for rate pacing and rate changes, which standard players do not"
        }
        (None, true) => "MTFC: clients ask for rate changes, which standard players do not",
        (None, false) => "nominal pacing, as standard players",
    }
}

/// An N_max trial's length: `--trial` if it covers the longest object, else an error naming
/// it; without `--trial`, that object's length (from DESCRIBE) + the playout buffer + 3 s.
fn trial_length(urls: &[String], trial: Option<u64>, buffer: Duration) -> anyhow::Result<Duration> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let mut longest: Option<(&str, Duration)> = None;
    for url in urls {
        let length = rt.block_on(async {
            let mut c = isochron_loadgen::Client::connect(url).await?;
            let p = c.describe_presentation().await?;
            let _ = c.teardown().await;
            Ok::<_, anyhow::Error>(p.duration)
        });
        let length = length.with_context(|| format!("DESCRIBE {url} (to size the trials)"))?;
        if let Some(d) = length
            && longest.is_none_or(|(_, l)| d > l)
        {
            longest = Some((url, d));
        }
    }
    match (trial, longest) {
        (Some(t), Some((url, d))) if Duration::from_secs(t) < d => bail!(
            "--trial {t} s is shorter than {url} ({:.1} s): an N_max trial plays the whole \
             object, so that every session is served its heaviest part (leave --trial out for \
             the object's length + the playout buffer + 3 s)",
            d.as_secs_f64()
        ),
        (Some(t), _) => Ok(Duration::from_secs(t.max(2))),
        (None, Some((_, d))) => Ok(d + buffer + Duration::from_secs(3)),
        (None, None) => bail!(
            "the objects' length is unknown (their SDP has no a=range): give --trial, at least \
             the longest object's length"
        ),
    }
}

/// Writes report.json, samples.csv, the plots and verdict.txt; returns the bottleneck's name
/// and the number of files.
fn write_report(
    a: &Args,
    seed: u64,
    started: u64,
    load: Load,
    link: Option<f64>,
    r: &RunResult,
) -> anyhow::Result<(String, usize)> {
    let failed = r.first_failure.is_some();
    let at = match r.first_failure {
        Some(n) => r.per_n.iter().find(|p| p.n == n).or_else(|| r.per_n.last()),
        None => r.per_n.last(),
    };
    let verdict = decide(at, failed, link, &Thresholds::default());
    let mut files = vec!["report.json".to_string(), "samples.csv".into(), "verdict.txt".into()];
    report::write_samples(&a.out.join("samples.csv"), &r.samples)?;
    for f in plot::figure3(&a.out, &r.per_n, r.n_max, r.content_bits_s, link)? {
        files.push(f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default());
    }
    std::fs::write(a.out.join("verdict.txt"), verdict.text(r.n_max))
        .with_context(|| format!("writing {}", a.out.join("verdict.txt").display()))?;
    let count = |o: Outcome| r.sessions.iter().filter(|s| s.outcome == o).count();
    let sum = |f: &dyn Fn(&isochron_loadgen::bench::SessionRecord) -> u64| {
        r.sessions.iter().map(f).sum::<u64>()
    };
    let bench_max = r.samples.iter().map(|s| s.bench_cpu_pct).fold(0.0f64, f64::max);
    let doc = json!({
        "tool": "isochron bench",
        "version": env!("CARGO_PKG_VERSION"),
        "parameters": {
            "urls": a.urls,
            "transport": a.transport.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(","),
            "buffer_ms": a.buffer_ms,
            "duration_s": a.duration,
            "load": load,
            "popularity": a.popularity,
            "seek_every_s": a.seek_every,
            "pause_every_s": a.pause_every,
            "pause_ms": a.pause_ms,
            "interactive_share": a.interactive_share,
            "pacing": pacing(a),
            "publish": a.publish,
            "mtfc": a.mtfc && a.force_rate.is_none(),
            "mtfc_thresholds": (a.mtfc && a.force_rate.is_none()).then_some(a.mtfc_thresholds),
            "rate_paced": a.rate_paced && a.force_rate.is_none(),
            "force_rate": a.force_rate,
            "server_pid": a.server_pid,
            "iface": a.iface,
            "metrics": a.metrics,
            "link_bits_s": link,
            "shape_bits_s": a.shape,
            "server_cmd": a.server_cmd,
            "tolerance": a.tolerance,
            "threads": a.threads,
            "stagger": a.stagger,
        },
        "seed": seed,
        "started_unix_s": started,
        "elapsed_s": r.elapsed_s,
        "n_max": r.n_max,
        "first_failure_n": r.first_failure,
        "trials": r.trials,
        "content_mean_bits_s": r.content_bits_s,
        "bottleneck": verdict.bottleneck,
        "verdict": verdict,
        "thresholds": Thresholds::default(),
        "per_n": r.per_n,
        "bench_cpu_pct": r.bench_cpu_pct,
        "bench_cpu_max_pct": bench_max,
        "rate_variation": r.variation,
        "sessions_summary": {
            "count": r.sessions.len(),
            "complete": count(Outcome::Complete),
            "stopped": count(Outcome::Stopped),
            "refused": count(Outcome::Refused),
            "error": count(Outcome::Error),
            "starvations": sum(&|s| s.starvations),
            "lost": sum(&|s| s.lost),
            "late": sum(&|s| s.late),
            "rate_changes": sum(&|s| s.rate_changes),
            "bytes": sum(&|s| s.bytes),
            "start_latency_ms": start_latency(r),
            "lateness_max_ms": lateness(r),
            "sessions_later_than_buffer": r.sessions.iter()
                .filter(|s| s.lateness_max_ms > a.buffer_ms as f64).count(),
            "server_late_packets": report::sum_present(
                r.samples.iter().filter_map(|s| s.server_late_packets)),
        },
        "sessions": r.sessions,
        "samples": r.samples.len(),
        "files": files,
    });
    let path = a.out.join("report.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&doc)?)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok((verdict.bottleneck.to_string(), files.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_rates() {
        assert_eq!(parse_link_rate("100mbit"), Ok(100e6));
        assert_eq!(parse_link_rate("1gbit"), Ok(1e9));
        assert_eq!(parse_link_rate("5000kbit"), Ok(5e6));
        assert_eq!(parse_link_rate("100M"), Ok(100e6));
        assert_eq!(parse_link_rate("2500000"), Ok(2.5e6));
        assert!(parse_link_rate("fast").is_err());
        assert!(parse_link_rate("-1m").is_err());
    }
}
