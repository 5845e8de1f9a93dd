//! `isochron bench-disk`: XTREAM's dummy-stream evaluation (§3, Table 1, Fig. 5) on real or
//! emulated disks, in real time and without a network: N streams (CBR, VBR by a clip's trace,
//! heterogeneous; read or write) under an admission policy, scheduled by the server's cycle
//! scheduler over the real IO threads, with consumers that count missed deadlines.
//!
//! The disks hold a throw-away store of random blocks (`--prepare`, once per disk set). With
//! `--find-max-n` the command searches the most streams that run with no missed deadline
//! (admission off) and reports what each policy admits. `--fio SECONDS` measures, in the same
//! invocation, what `fio` reads from each real disk with the same IO size and `O_DIRECT`, for the
//! efficiency ratio. The work is `isochron_diskbench`.

#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use isochron_base::{BitRate, Bytes};
use isochron_diskbench::{
    AdmissionPolicy, BenchConfig, BenchReport, BenchStore, ClipTrace, Direction, MaxNReport,
    PrepareOptions, SearchConfig, TraceScale, WorkloadKind, find_max_n,
};
use isochron_store::catalog::DiskSpec;
use serde_json::json;

/// bench-disk arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The bench store (catalog of the block pool); created by --prepare.
    #[arg(long, value_name = "DIR")]
    store: PathBuf,
    /// Create the bench store and write its block pool, then exit.
    #[arg(long)]
    prepare: bool,
    /// With --prepare: a disk, `PATH[,seek_ms=M][,rate_mib_s=R]` (emulated with a model);
    /// repeat for several [default: STORE/disk-0].
    #[arg(long, value_name = "SPEC")]
    disk: Vec<DiskSpec>,
    /// With --prepare: block size, KiB.
    #[arg(long, value_name = "KIB", default_value_t = 1024)]
    blocks_kib: u64,
    /// With --prepare: pool blocks per disk.
    #[arg(long, value_name = "N", default_value_t = 256)]
    pool_blocks: u32,
    /// Workload: cbr, vbr or het (heterogeneous: rates between 1/10 and 10 × the mean).
    #[arg(long, value_name = "KIND", default_value = "cbr", value_parser = parse_kind)]
    kind: WorkloadKind,
    /// Mean stream rate in bits/s (suffixes k, M, G).
    #[arg(long, value_name = "RATE", default_value = "1M", value_parser = parse_rate)]
    rate: BitRate,
    /// Streams offered (admitted in order until the policy's first refusal).
    #[arg(long, value_name = "N", default_value_t = 10)]
    streams: usize,
    /// Recording streams (writes) instead of playback.
    #[arg(long)]
    write: bool,
    /// Admission policy: conservative, aggressive, aggressive-avg or off.
    #[arg(long, value_name = "POLICY", default_value = "aggressive")]
    admission: AdmissionPolicy,
    /// VBR trace: an MPEG-TS clip whose per-block send times the streams follow
    /// [default: a synthetic trace].
    #[arg(long, value_name = "FILE.ts")]
    trace: Option<PathBuf>,
    /// How the clip's trace is scaled to --rate: bytes (keep its timeline) or time (stretch it).
    #[arg(long, value_name = "HOW", default_value = "bytes")]
    trace_scale: TraceScale,
    /// Cycle length, ms.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    cycle_ms: u64,
    /// Cycles read ahead past the current one.
    #[arg(long, value_name = "L", default_value_t = 2)]
    lookahead: u32,
    /// IOs submitted to each disk's IO thread at once (it still does one at a time).
    #[arg(long, value_name = "D", default_value_t = 1)]
    queue_depth: u32,
    /// Share of each cycle admission keeps for non-real-time IO.
    #[arg(long, value_name = "F", default_value_t = 0.1)]
    nrt_share: f64,
    /// Mean time between arrivals, ms.
    #[arg(long, value_name = "MS", default_value_t = 2000)]
    spacing_ms: u64,
    /// Seconds to run after the last arrival.
    #[arg(long, value_name = "S", default_value_t = 60.0)]
    duration: f64,
    /// Workload seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Restart the last admitted stream every S seconds (initial latency under load).
    #[arg(long, value_name = "S")]
    probe_every: Option<f64>,
    /// Search the most streams with no missed deadline (admission off).
    #[arg(long)]
    find_max_n: bool,
    /// With --find-max-n: first N to try [default: what aggressive admission admits].
    #[arg(long, value_name = "N")]
    start_n: Option<usize>,
    /// With --find-max-n: the most streams to try.
    #[arg(long, value_name = "N", default_value_t = 2000)]
    max_n_limit: usize,
    /// With --find-max-n: seconds each probe runs after its last arrival [default: --duration];
    /// the result is confirmed over --duration.
    #[arg(long, value_name = "S")]
    probe_duration: Option<f64>,
    /// After the run, measure each real disk with fio for S seconds (same IO size, O_DIRECT,
    /// random reads, queue depth 1) and report the efficiency ratio.
    #[arg(long, value_name = "S")]
    fio: Option<f64>,
    /// Write the report as JSON to FILE (`-` for stdout, instead of the summary).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

fn parse_kind(s: &str) -> Result<WorkloadKind, String> {
    match s {
        "het" => Ok(WorkloadKind::Heterogeneous),
        other => other.parse().map_err(|e| format!("{e}")),
    }
}

pub(crate) fn parse_rate(s: &str) -> Result<BitRate, String> {
    s.parse().map_err(|e: isochron_base::ParseRateError| e.to_string())
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.prepare {
        let disks = args
            .disk
            .iter()
            .map(super::absolute_spec)
            .collect::<anyhow::Result<Vec<DiskSpec>>>()?;
        let opts = PrepareOptions {
            block_size: Bytes::kib(args.blocks_kib),
            pool_blocks_per_disk: args.pool_blocks,
            ..PrepareOptions::default()
        };
        let b = BenchStore::prepare(&args.store, &disks, &opts)?;
        for (id, d) in b.disks() {
            println!(
                "disk {id}: {} ({} pool blocks of {}){}",
                d.path().display(),
                b.pool_blocks(id),
                b.block_len(),
                d.model().map(|m| format!(", emulated {m}")).unwrap_or_default()
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let store = BenchStore::open(&args.store)?;
    let trace = match &args.trace {
        Some(path) => {
            let clip = ClipTrace::from_ts_file(path)?;
            tracing::info!(clip = %path.display(), rate = %clip.mean_rate(),
                seconds = clip.duration_s(), "VBR trace");
            Some(clip.trace_for(args.trace_scale, store.block_len(), args.rate))
        }
        None => None,
    };
    let config = BenchConfig {
        kind: args.kind,
        direction: if args.write { Direction::Write } else { Direction::Read },
        mean_rate: args.rate,
        streams: args.streams,
        policy: args.admission,
        cycle: Duration::from_millis(args.cycle_ms.max(1)),
        nrt_share: args.nrt_share,
        lookahead_cycles: args.lookahead,
        queue_depth: args.queue_depth,
        spacing: Duration::from_millis(args.spacing_ms),
        duration: Duration::from_secs_f64(args.duration.max(0.0)),
        seed: args.seed,
        trace,
        probe_every: args.probe_every.map(|s| Duration::from_secs_f64(s.max(0.001))),
    };
    let quiet = args.json.as_deref() == Some(Path::new("-"));
    let mut out = if args.find_max_n {
        let search = SearchConfig {
            start: args.start_n,
            limit: args.max_n_limit,
            probe_duration: Duration::from_secs_f64(
                args.probe_duration.unwrap_or(args.duration).max(0.0),
            ),
            confirm_duration: config.duration,
        };
        let report = find_max_n(&store, &config, &search, &mut |r| {
            if !quiet {
                println!(
                    "  {} streams over {:.0} s{}: {} missed",
                    r.n,
                    r.duration_s,
                    if r.confirm { " (confirmation)" } else { "" },
                    r.missed
                );
            }
        })?;
        if !quiet {
            print_max_n(&report);
        }
        serde_json::to_value(&report)?
    } else {
        let report = isochron_diskbench::run(&store, &config)?;
        if !quiet {
            print_report(&report);
        }
        json!({ "run": report })
    };
    if let Some(secs) = args.fio {
        let fio = run_fio(&store, secs)?;
        let bench = match (out.get("run"), out.get("at_max_n")) {
            (Some(r), _) | (None, Some(r)) => r.get("bytes_per_s").and_then(|v| v.as_f64()),
            _ => None,
        };
        let ratio = bench.filter(|_| fio > 0.0).map(|b| b / fio);
        if !quiet {
            println!("fio (same IO size, O_DIRECT, randread, QD 1): {:.1} MiB/s", fio / 1048576.0);
            if let Some(r) = ratio {
                println!("efficiency: scheduler / fio = {:.1} %", r * 100.0);
            }
        }
        out["fio_bytes_per_s"] = json!(fio);
        out["efficiency"] = json!(ratio);
    }
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&out)?;
        if quiet {
            println!("{text}");
        } else {
            std::fs::write(path, text + "\n")
                .with_context(|| format!("writing {}", path.display()))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_report(r: &BenchReport) {
    println!(
        "{} {} streams at {} mean, {} admission, blocks of {} KiB, T = {} ms, lookahead {}",
        r.kind,
        r.direction,
        BitRate(r.mean_rate_bps),
        r.policy,
        r.block_bytes / 1024,
        r.cycle_ms,
        r.lookahead_cycles
    );
    println!(
        "streams: {} requested, {} admitted; ramp {:.0} s, then {:.0} s",
        r.streams_requested, r.streams_admitted, r.ramp_s, r.duration_s
    );
    println!(
        "missed deadlines: {} (scheduler: {}), at most {} in one cycle, {} of {} cycles, {} \
         streams",
        r.missed_deadlines,
        r.sched_missed_deadlines,
        r.max_missed_per_cycle,
        r.cycles_with_misses,
        r.cycles,
        r.streams_with_misses
    );
    let l = &r.initial_latency;
    println!(
        "initial latency (request → first block in memory): p50 {:.1} ms, p99 {:.1} ms, max \
         {:.1} ms ({} starts)",
        l.p50_ms, l.p99_ms, l.max_ms, l.count
    );
    if r.probe_latency.count > 0 {
        let l = &r.probe_latency;
        println!(
            "  probe restarts at full load: p50 {:.1} ms, p99 {:.1} ms ({} starts)",
            l.p50_ms, l.p99_ms, l.count
        );
    }
    println!(
        "throughput: {:.2} MiB/s (streams need {:.2} MiB/s)",
        r.bytes_per_s / 1048576.0,
        r.demand_bytes_per_s / 1048576.0
    );
    for d in &r.disks {
        println!(
            "disk {} {}: utilisation {:.1} % (admission predicted {:.1} %), profile {}",
            d.id,
            d.path,
            d.utilisation * 100.0,
            d.predicted_load * 100.0,
            d.profile
        );
    }
}

fn print_max_n(m: &MaxNReport) {
    println!("MaxN = {}", m.max_n);
    for (p, n) in &m.admits {
        println!("  {p} admits {n}");
    }
    if let Some(r) = &m.at_max_n {
        print_report(r);
    }
}

/// fio's random-read throughput (bytes/s, summed over the real disks, one after the other) with
/// the bench's IO size and `O_DIRECT`, on a file of the pool's size in each disk's directory.
fn run_fio(store: &BenchStore, secs: f64) -> anyhow::Result<f64> {
    let mut total = 0.0;
    for (id, d) in store.disks() {
        if d.model().is_some() {
            continue;
        }
        let size = (store.pool_blocks(id) as u64 * store.block_len().0).max(64 << 20);
        let file = d.path().join("isochron-fio.dat");
        let output = std::process::Command::new("fio")
            .args([
                "--name=isochron",
                &format!("--filename={}", file.display()),
                &format!("--size={size}"),
                "--direct=1",
                &format!("--bs={}", store.block_len().0),
                "--rw=randread",
                "--ioengine=psync",
                "--iodepth=1",
                "--time_based",
                &format!("--runtime={}", secs.max(1.0).round() as u64),
                "--output-format=json",
            ])
            .output()
            .context("running fio (apt-get install fio)")?;
        if !output.status.success() {
            bail!("fio failed: {}", String::from_utf8_lossy(&output.stderr));
        }
        let v: serde_json::Value = serde_json::from_slice(&output.stdout)
            .context("fio's JSON output could not be parsed")?;
        let bw = v["jobs"][0]["read"]["bw_bytes"].as_f64().unwrap_or(0.0);
        tracing::info!(disk = %id, mib_s = bw / 1048576.0, "fio");
        total += bw;
    }
    Ok(total)
}
