//! MaxN: the most streams of a workload that run with no missed deadline (XTREAM Table 1, where
//! it was found "manually … using trial and error"), searched in real time, and the number each
//! admission policy admits (Adm1–Adm3).
//!
//! The search runs the workload's first `n` streams with admission off. It starts from a guess
//! (by default what the aggressive policy admits), steps up (or down) by an eighth until the
//! outcome changes, then bisects; every probe runs `probe_duration` after the last arrival. The
//! result is then confirmed with a run of `confirm_duration` (≥ 60 s for Table 1): while the
//! confirmation misses it steps down by an eighth, then bisects with confirmation-length runs. Like the virtual-time search
//! (`isochron_sched::sim::find_max_n`) it assumes that a set that misses keeps missing when
//! streams are added, which holds for the nested, prefix-stable workloads up to the noise of a
//! real disk; the runs are all reported so that the noise shows.
//!
//! Not here: the runs themselves ([`crate::run`](mod@crate::run)).

use std::collections::BTreeMap;
use std::time::Duration;

use isochron_sched::admission::AdmissionPolicy;
use serde::Serialize;

use crate::data::BenchStore;
use crate::run::{self, BenchConfig, BenchReport};

/// How to search.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchConfig {
    /// The first `n` to try; `None`: what the aggressive policy admits (or 8 without profiles).
    pub start: Option<usize>,
    /// The most streams to try.
    pub limit: usize,
    /// Run time after the last arrival of each probe.
    pub probe_duration: Duration,
    /// Run time after the last arrival of the confirmation (skipped when not longer than the
    /// probes').
    pub confirm_duration: Duration,
}

impl Default for SearchConfig {
    fn default() -> Self {
        Self {
            start: None,
            limit: 2000,
            probe_duration: Duration::from_secs(60),
            confirm_duration: Duration::from_secs(60),
        }
    }
}

/// One run of the search.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SearchRun {
    /// Streams.
    pub n: usize,
    /// Missed deadlines.
    pub missed: u64,
    /// Seconds run after the last arrival.
    pub duration_s: f64,
    /// Whether this was a confirmation run.
    pub confirm: bool,
    /// Steady-state bytes per second.
    pub bytes_per_s: f64,
}

/// The outcome of [`find_max_n`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MaxNReport {
    /// The most streams that ran with no missed deadline (0 if one stream missed).
    pub max_n: usize,
    /// Every run, in order.
    pub runs: Vec<SearchRun>,
    /// How many streams each policy admits (of `4·MaxN + 20` offered), by policy name.
    pub admits: BTreeMap<String, usize>,
    /// The report of the last clean run at `max_n` (the confirmation, if any).
    pub at_max_n: Option<BenchReport>,
}

/// How many of the workload's first `offered` streams `policy` admits before its first refusal
/// (pure arithmetic from the disks' profiles; nothing runs).
pub fn admitted_count(
    store: &BenchStore,
    config: &BenchConfig,
    policy: AdmissionPolicy,
    offered: usize,
) -> anyhow::Result<usize> {
    let c = BenchConfig { policy, ..config.clone() };
    let (mut controller, _) = run::controller(store, &c)?;
    Ok(isochron_sched::sim::admitted_prefix_by(&mut controller, &c.workload(store, offered)))
}

/// Searches MaxN for `base`'s workload (its `streams` and `policy` are ignored); `on_run` sees
/// every run as it ends.
pub fn find_max_n(
    store: &BenchStore,
    base: &BenchConfig,
    search: &SearchConfig,
    on_run: &mut dyn FnMut(&SearchRun),
) -> anyhow::Result<MaxNReport> {
    let limit = search.limit.max(1);
    let mut runs = Vec::new();
    let mut last_clean: BTreeMap<usize, BenchReport> = BTreeMap::new();
    let mut probe = |n: usize, duration: Duration, confirm: bool| -> anyhow::Result<u64> {
        let c = BenchConfig { streams: n, policy: AdmissionPolicy::Off, duration, ..base.clone() };
        let r = run::run(store, &c)?;
        let missed = r.missed_deadlines.max(r.sched_missed_deadlines);
        let sr = SearchRun {
            n,
            missed,
            duration_s: duration.as_secs_f64(),
            confirm,
            bytes_per_s: r.bytes_per_s,
        };
        on_run(&sr);
        runs.push(sr);
        if missed == 0 {
            last_clean.insert(n, r);
        }
        Ok(missed)
    };
    let start = match search.start {
        Some(s) => s,
        None => admitted_count(store, base, AdmissionPolicy::Aggressive, limit).unwrap_or(8),
    }
    .clamp(1, limit);
    let step = |n: usize| (n / 8).max(1);
    let (mut good, mut bad) = (0usize, limit + 1);
    if probe(start, search.probe_duration, false)? == 0 {
        good = start;
        while good < limit {
            let n = (good + step(good)).min(limit);
            if probe(n, search.probe_duration, false)? == 0 {
                good = n;
            } else {
                bad = n;
                break;
            }
        }
    } else {
        bad = start;
        while bad > 1 {
            let n = bad - step(bad).min(bad - 1);
            if probe(n, search.probe_duration, false)? == 0 {
                good = n;
                break;
            }
            bad = n;
        }
    }
    while bad - good > 1 && good < limit {
        let mid = good + (bad - good) / 2;
        if probe(mid, search.probe_duration, false)? == 0 {
            good = mid;
        } else {
            bad = mid;
        }
    }
    if search.confirm_duration > search.probe_duration {
        // A miss steps down by an eighth until a confirmation is clean, then bisects between it
        // and the lowest failed one, all with confirmation-length runs (a device whose short-run
        // rate exceeds its sustained rate can put the probes' answer far above MaxN).
        let mut failed = None;
        while good > 0 {
            if probe(good, search.confirm_duration, true)? == 0 {
                break;
            }
            failed = Some(good);
            good -= step(good).min(good);
        }
        if let Some(mut bad) = failed {
            while good > 0 && bad - good > 1 {
                let mid = good + (bad - good) / 2;
                if probe(mid, search.confirm_duration, true)? == 0 {
                    good = mid;
                } else {
                    bad = mid;
                }
            }
        }
    }
    let offered = 4 * good + 20;
    let mut admits = BTreeMap::new();
    for p in
        [AdmissionPolicy::Conservative, AdmissionPolicy::Aggressive, AdmissionPolicy::AggressiveAvg]
    {
        if let Ok(n) = admitted_count(store, base, p, offered) {
            admits.insert(p.to_string(), n);
        }
    }
    let at_max_n = last_clean.remove(&good);
    Ok(MaxNReport { max_n: good, runs, admits, at_max_n })
}
