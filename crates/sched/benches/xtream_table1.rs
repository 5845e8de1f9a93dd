//! XTREAM's Table 1 in virtual time: MaxN (most streams with no missed deadline, by search) and
//! the number each admission policy admits, for CBR / VBR / heterogeneous streams at three rates,
//! on one emulated disk (10 ms mean seek, 4 MiB/s, 1 MiB blocks, T = 1 s); then the initial
//! latency p99 at 1, MaxN/2 and MaxN streams.
//!
//! `cargo bench -p isochron-sched --bench xtream_table1 [-- NRT_SHARE SPACING_S LOOKAHEAD]`
//! (defaults 0.1, 2, 1). Each admitted set is run again and its missed deadlines reported.
#![allow(clippy::print_stdout, missing_docs)]

use std::time::Duration;

use isochron_base::{BitRate, DiskId};
use isochron_sched::admission::AdmissionPolicy;
use isochron_sched::profile::DiskModel;
use isochron_sched::sim::{self, SimConfig};
use isochron_sched::workload::{self, WorkloadKind, WorkloadSpec};

fn main() {
    let args: Vec<f64> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let nrt_share = args.first().copied().unwrap_or(0.1);
    let spacing = Duration::from_secs_f64(args.get(1).copied().unwrap_or(2.0));
    let lookahead = args.get(2).copied().unwrap_or(1.0) as u32;
    let disk = DiskModel::new(Duration::from_millis(10), 4.0 * 1_048_576.0);
    let mut cfg = SimConfig::new(vec![disk], AdmissionPolicy::Off, Duration::from_secs(1));
    cfg.admission.nrt_share = nrt_share;
    cfg.cycle.lookahead_cycles = lookahead;
    cfg.horizon = Duration::from_secs(120);
    println!(
        "disk: seek 10 ms, 4 MiB/s; 1 MiB blocks; T = 1 s; nrt_share {nrt_share}; arrivals ~{:?} \
         apart; lookahead {lookahead}; horizon 120 s after the last arrival",
        spacing
    );
    println!("| rate | type | MaxN | conservative | aggressive | aggressive-avg |");
    println!("|---|---|---|---|---|---|");
    let policies = [
        AdmissionPolicy::Conservative,
        AdmissionPolicy::Aggressive,
        AdmissionPolicy::AggressiveAvg,
    ];
    for kind in WorkloadKind::ALL {
        for rate in [250_000u64, 1_000_000, 2_000_000] {
            let mut spec = WorkloadSpec::new(kind, BitRate(rate), vec![DiskId(0)]);
            spec.duration = Duration::from_secs(1200);
            let streams = |n| sim::staggered(workload::generate(&spec, n), spacing, 7);
            let Ok(m) = sim::find_max_n(&cfg, streams, 1000) else { return };
            let pool = streams(m.max_n * 2 + 10);
            let mut row = format!("| {} kb/s | {kind} | {} |", rate / 1000, m.max_n);
            for p in policies {
                let c = cfg.with_policy(p);
                let Ok(n) = sim::admitted_prefix(&c, &pool) else { return };
                let Ok(r) = sim::run(&c, &pool[..n]) else { return };
                row += &format!(" {n} ({} missed) |", r.missed());
            }
            println!("{row}");
        }
    }
    // Initial latency: a probe restarting every 8 s next to N − 1 CBR 1 Mb/s streams.
    let spec = WorkloadSpec {
        duration: Duration::from_secs(1200),
        ..WorkloadSpec::new(WorkloadKind::Cbr, BitRate(1_000_000), vec![DiskId(0)])
    };
    let streams = |n| sim::staggered(workload::generate(&spec, n), spacing, 3);
    let Ok(m) = sim::find_max_n(&cfg, streams, 1000) else { return };
    for n in [1, m.max_n / 2, m.max_n] {
        let mut s = streams(n);
        let probe = s.len() - 1;
        s[probe].restart_every = Some(Duration::from_secs(8));
        let mut c = cfg.clone();
        c.horizon = Duration::from_secs(400);
        let Ok(r) = sim::run(&c, &s) else { return };
        println!(
            "initial latency, CBR 1 Mb/s, {n} streams: p50 {:?} p99 {:?} ({} samples, {} missed)",
            r.latency_quantile(0.5).unwrap_or_default(),
            r.latency_quantile(0.99).unwrap_or_default(),
            r.initial_latencies.len(),
            r.missed()
        );
    }
}
