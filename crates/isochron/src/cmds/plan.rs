//! `isochron plan`: capacity planning. `--formats` prints the CineGrid format table; otherwise,
//! for a stream (a format and a compression ratio, or a bit rate), a node (disk profiles as
//! written by `isochron profile-disk`, or modelled disks; a link; a CPU send rate) and an
//! audience, it predicts streams per node, the bottleneck and the nodes needed, with isochron's
//! own admission controller, and with `--sched` the virtual-time cycle scheduler's MaxN.
//!
//! A real node can stand in for the models: `--bench REPORT` reads an `isochron bench` run's
//! `report.json` (its N_max, the content's mean rate and the verdict's bottleneck) and the
//! planner scales that capacity to the planned rate.
//!
//! The planner is `isochron_sim::plan` (pure); this command reads the profile files and the
//! bench report.

#![allow(clippy::print_stdout)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use isochron_base::{BitRate, Bytes, MbPerSec};
use isochron_diskio::profile;
use isochron_sched::{AdmissionConfig, AdmissionPolicy, DiskModel, DiskProfile};
use isochron_sim::plan::{self, Format, NodeSpec};
use serde_json::json;

/// plan arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Print the CineGrid format table (pixels, fps, bits per pixel → MB per frame, MB/s, Gb/s
    /// uncompressed) and exit.
    #[arg(long)]
    formats: bool,
    /// The stream's format (a name from --formats).
    #[arg(long, value_name = "NAME")]
    format: Option<String>,
    /// With --format: compression ratio R (R:1) [default: 1, uncompressed].
    #[arg(long, value_name = "R")]
    compression: Option<f64>,
    /// The stream's bit rate (suffixes k, M, G), instead of --format.
    #[arg(long, value_name = "RATE", value_parser = super::bench_disk::parse_rate)]
    bitrate: Option<BitRate>,
    /// A disk profile JSON (`isochron profile-disk`); repeat for each disk of a node.
    #[arg(long, value_name = "FILE")]
    profile: Vec<PathBuf>,
    /// A modelled disk's mean seek, ms (with --disk-rate-mb-s).
    #[arg(long, value_name = "MS")]
    disk_seek_ms: Option<f64>,
    /// A modelled disk's transfer rate, MB/s (with --disk-seek-ms).
    #[arg(long, value_name = "MB_S")]
    disk_rate_mb_s: Option<f64>,
    /// Disks per node [default: the number of --profile files, or 1].
    #[arg(long, value_name = "N")]
    disks: Option<usize>,
    /// The node's network link, Gb/s.
    #[arg(long, value_name = "GB_S")]
    link_gb_s: Option<f64>,
    /// Share of the link streams may use (protocol overhead and headroom).
    #[arg(long, value_name = "F", default_value_t = 0.9)]
    link_share: f64,
    /// Stream data the node's CPU can read, packetise and send, MB/s (measure it with a
    /// benchmark; no limit if absent).
    #[arg(long, value_name = "MB_S")]
    cpu_mb_s: Option<f64>,
    /// An `isochron bench` run's report.json from a real node: its N_max, scaled from the
    /// content's mean rate to the planned one, is the node's measured capacity.
    #[arg(long, value_name = "FILE")]
    bench: Option<PathBuf>,
    /// Concurrent streams to serve.
    #[arg(long, value_name = "N", default_value_t = 1)]
    audience: u64,
    /// Block (IO) size, KiB.
    #[arg(long, value_name = "KIB", default_value_t = 1024)]
    block_kib: u64,
    /// Scheduler cycle, ms.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    cycle_ms: u64,
    /// Admission policy: conservative, aggressive, aggressive-avg.
    #[arg(long, value_name = "POLICY", default_value = "aggressive")]
    admission: AdmissionPolicy,
    /// Share of each cycle kept for non-real-time IO.
    #[arg(long, value_name = "F", default_value_t = 0.1)]
    nrt_share: f64,
    /// Also run the cycle scheduler in virtual time over the (modelled or fitted) disks and
    /// search the most streams with no missed deadline.
    #[arg(long)]
    sched: bool,
    /// With --sched: the most streams to try.
    #[arg(long, value_name = "N", default_value_t = 400)]
    sched_limit: usize,
    /// With --sched: seconds each run plays after the last arrival.
    #[arg(long, value_name = "S", default_value_t = 30)]
    sched_horizon_s: u64,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.formats {
        print!("{}", plan::format_table());
        return Ok(ExitCode::SUCCESS);
    }
    let rate = match (&args.format, args.bitrate) {
        (Some(_), Some(_)) => bail!("give --format or --bitrate, not both"),
        (None, None) => {
            bail!("give --format NAME [--compression R] or --bitrate RATE (or --formats)")
        }
        (None, Some(r)) => r,
        (Some(name), None) => {
            let Some(f) = Format::by_name(name) else {
                bail!("unknown format {name:?}: see isochron plan --formats");
            };
            let ratio = args.compression.unwrap_or(1.0);
            if !(ratio.is_finite() && ratio >= 1.0) {
                bail!("--compression {ratio}: a ratio R:1 with R ≥ 1");
            }
            f.compressed(ratio)
        }
    };
    if !(args.link_share > 0.0 && args.link_share <= 1.0) {
        bail!("--link-share {}: a share in (0, 1]", args.link_share);
    }
    if !(0.0..1.0).contains(&args.nrt_share) {
        bail!("--nrt-share {}: a share in [0, 1)", args.nrt_share);
    }
    let (profiles, models) = disks(&args)?;
    let admission = AdmissionConfig {
        policy: args.admission,
        cycle: Duration::from_millis(args.cycle_ms.max(1)),
        nrt_share: args.nrt_share,
        ..AdmissionConfig::default()
    };
    let block = Bytes::kib(args.block_kib.max(4));
    let node = NodeSpec {
        disks: profiles,
        link: args.link_gb_s.map(|g| BitRate((g * 1e9).round().max(0.0) as u64)),
        link_share: args.link_share,
        cpu: args.cpu_mb_s.map(MbPerSec),
        admission: admission.clone(),
        block,
        measured: args.bench.as_deref().map(bench_report).transpose()?,
    };
    let p = plan::plan(&node, rate, args.audience)?;
    let sched = if args.sched {
        if models.is_empty() {
            bail!("--sched needs disks: --profile FILE or --disk-seek-ms and --disk-rate-mb-s");
        }
        let search = plan::SchedSearch {
            admission: admission.clone(),
            block,
            rate,
            spacing: Duration::from_millis(200),
            horizon: Duration::from_secs(args.sched_horizon_s.max(1)),
            limit: args.sched_limit.max(1),
            seed: 1,
        };
        Some(plan::sched_max_n(&models, &search)?)
    } else {
        None
    };
    if args.json {
        let v = json!({
            "stream_mb_s": p.stream_mb_s,
            "stream_mbit_s": rate.0 as f64 / 1e6,
            "per_resource": p.per_resource.iter().map(|(r, n)| (r.to_string(), *n)).collect::<std::collections::BTreeMap<_, _>>(),
            "streams_per_node": p.streams_per_node,
            "bottleneck": p.bottleneck,
            "audience": p.audience,
            "nodes": p.nodes,
            "sched": sched,
            "bench": node.measured.as_ref().map(|m| json!({
                "n_max": m.n_max,
                "stream_mbit_s": m.stream_rate.0 as f64 / 1e6,
                "bottleneck": m.bottleneck,
                "limit_reached": m.limit_reached,
            })),
        });
        println!("{v}");
        return Ok(ExitCode::SUCCESS);
    }
    println!("stream: {rate} ({:.3} MB/s)", p.stream_mb_s);
    println!(
        "node: {} disk(s){}, link {}, cpu {}",
        models.len().max(node.disks.len()),
        models
            .first()
            .map(|m| format!(
                " (≈ {:.1} ms seek, {:.1} MB/s)",
                m.mean_seek.as_secs_f64() * 1e3,
                m.read_rate / 1e6
            ))
            .unwrap_or_default(),
        node.link.map_or_else(
            || "not limited".into(),
            |l| format!(
                "{l} × {} (streams count {:.1} % more for RTP/UDP/IP/Ethernet headers)",
                args.link_share,
                (plan::WIRE_OVERHEAD - 1.0) * 100.0
            )
        ),
        node.cpu.map_or_else(|| "not limited".into(), |c| c.to_string()),
    );
    println!(
        "admission: {} over {} blocks, cycle {} ms, {} % kept for non-real-time IO",
        admission.policy,
        block,
        args.cycle_ms,
        args.nrt_share * 100.0
    );
    for (r, n) in &p.per_resource {
        match (r, &node.measured) {
            (plan::Resource::Bench, Some(m)) => println!(
                "  {r:<5} {}{n:>7} streams (measured: N_max {} of {}, bottleneck {})",
                if m.limit_reached { " " } else { "≥" },
                m.n_max,
                m.stream_rate,
                m.bottleneck
            ),
            _ => println!("  {r:<5} {n:>8} streams"),
        }
    }
    match (p.streams_per_node, p.bottleneck) {
        (Some(n), Some(plan::Resource::Bench)) => println!(
            "streams per node: {n} (bottleneck: bench, measured {})",
            node.measured.as_ref().map_or("", |m| m.bottleneck.as_str())
        ),
        (Some(n), Some(b)) => println!("streams per node: {n} (bottleneck: {b})"),
        _ => println!("streams per node: not limited by anything given"),
    }
    match p.nodes {
        Some(n) => println!("nodes for {} streams: {n}", p.audience),
        None => println!("nodes for {} streams: cannot say", p.audience),
    }
    if let Some(s) = sched {
        println!(
            "cycle scheduler in virtual time: admission admits {}, MaxN (no missed deadline) {}",
            s.admitted, s.max_n
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The parts of an `isochron bench` report.json the planner uses.
#[derive(serde::Deserialize)]
struct BenchReport {
    tool: String,
    n_max: Option<u64>,
    first_failure_n: Option<u64>,
    content_mean_bits_s: f64,
    bottleneck: String,
}

/// Reads a bench run's measured capacity from its report.json.
fn bench_report(path: &std::path::Path) -> anyhow::Result<plan::Measured> {
    let name = path.display();
    let text = std::fs::read_to_string(path).with_context(|| format!("bench report {name}"))?;
    let r: BenchReport = serde_json::from_str(&text)
        .with_context(|| format!("bench report {name}: not an isochron bench report.json"))?;
    if r.tool != "isochron bench" {
        bail!("bench report {name}: written by {:?}, not isochron bench", r.tool);
    }
    let Some(n_max) = r.n_max.filter(|n| *n > 0) else {
        bail!("bench report {name}: the run served no load (n_max is {:?})", r.n_max);
    };
    if !(r.content_mean_bits_s.is_finite() && r.content_mean_bits_s >= 1.0) {
        bail!("bench report {name}: content_mean_bits_s {} is not a rate", r.content_mean_bits_s);
    }
    Ok(plan::Measured {
        n_max,
        stream_rate: BitRate(r.content_mean_bits_s.round() as u64),
        bottleneck: r.bottleneck,
        limit_reached: r.first_failure_n.is_some(),
    })
}

/// The node's disk profiles and, for the scheduler harness, their models (a modelled disk's
/// own; a measured profile's fitted model).
fn disks(args: &Args) -> anyhow::Result<(Vec<DiskProfile>, Vec<DiskModel>)> {
    let mut profiles = Vec::new();
    let mut models = Vec::new();
    for path in &args.profile {
        let p = profile::load(path)?;
        models.push(plan::fit_model(&p).with_context(|| path.display().to_string())?);
        profiles.push(p);
    }
    match (args.disk_seek_ms, args.disk_rate_mb_s) {
        (Some(seek), Some(rate)) => {
            if !profiles.is_empty() {
                bail!("give --profile or a modelled disk, not both");
            }
            if !(seek.is_finite() && seek >= 0.0 && rate.is_finite() && rate > 0.0) {
                bail!("--disk-seek-ms {seek} --disk-rate-mb-s {rate}: out of range");
            }
            let m = DiskModel::new(Duration::from_secs_f64(seek / 1e3), rate * 1e6);
            profiles.push(m.read_profile()?);
            models.push(m);
        }
        (None, None) => {}
        _ => bail!("a modelled disk needs both --disk-seek-ms and --disk-rate-mb-s"),
    }
    if let Some(n) = args.disks {
        if profiles.is_empty() {
            bail!("--disks {n}: give a --profile or a modelled disk");
        }
        if profiles.len() == 1 {
            profiles = vec![profiles[0].clone(); n];
            models = vec![models[0]; n];
        } else if profiles.len() != n {
            bail!("--disks {n} but {} --profile files", profiles.len());
        }
    }
    Ok((profiles, models))
}
