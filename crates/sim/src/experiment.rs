//! The paper's two experiments: throughput against node count, and strand-delay jitter.
//!
//! Why: these are the measurements behind Gennart et al.'s Figures 4 and 6 (throughput and
//! per-component utilisation against the number of disk nodes, §5.1 and §5.2) and Figure 5
//! (strand-delay cumulative distributions at a given architecture utilisation, §5.1).
//!
//! * **Throughput** ([`throughput`], [`sweep`]): "all strands are requested at the beginning of
//!   the experiment and the experiment is finished when the last strand has been processed. The
//!   throughput is defined as the total stream size divided by the maximum time." A component's
//!   utilisation is its busy time over that time; the bottleneck is the class with the most
//!   utilised component. Beside it, the analytic bound of `model` for the same strands. A strand's
//!   steps wait for the gates of its route (`model`): a point-to-point request window, and a
//!   point-to-point node without read-ahead reading a disk's next strand for read + resample.
//! * **Jitter** ([`jitter`]): strands are requested at regular intervals, chosen so that the
//!   most loaded component is busy the requested fraction of the time ("the utilization of an
//!   architecture is defined as the maximal utilization of any component"); the delay of a
//!   strand is from its request to its last step (with a request window, from the time it was
//!   due to be requested: the wait for the window counts). Reported: the delay distribution
//!   (CDF points), its mean and standard deviation, and the disk accesses' own standard
//!   deviation (the paper's 7.07 ms for a 10 ms mean seek).
//!
//! Everything is a pure function of the scenario (its seed included).

use std::collections::BTreeMap;
use std::time::Duration;

use isochron_base::{Instant, MbPerSec};
use serde::Serialize;

use crate::engine::{Engine, JobId};
use crate::model::{Architecture, Component, Machine, Operation, Route};
use crate::scenario::Scenario;

/// Strands requested in a jitter run unless told otherwise.
pub const DEFAULT_JITTER_STRANDS: u32 = 20_000;

/// Share of a jitter run's first strands left out of its statistics (the queues start empty).
pub const JITTER_WARMUP: f64 = 0.1;

/// One point of a throughput sweep: one architecture with one node count.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Point {
    /// Disk nodes.
    pub nodes: u32,
    /// Simulated throughput: stream bytes over the time the last strand finished, MB/s.
    pub throughput_mb_s: f64,
    /// The analytic bound for the same strands (the least of the per-class bounds), MB/s.
    pub analytic_mb_s: f64,
    /// The class of the most utilised component in the simulation.
    pub bottleneck: Component,
    /// Mean utilisation of each class of component over the run, by class name.
    pub utilization: BTreeMap<Component, f64>,
    /// The class that sets the analytic bound.
    #[serde(skip)]
    pub analytic_bottleneck: Component,
    /// The analytic bound of every class, MB/s.
    #[serde(skip)]
    pub bounds: BTreeMap<Component, f64>,
    /// Utilisation of the most utilised component of each class.
    #[serde(skip)]
    pub max_utilization: BTreeMap<Component, f64>,
}

/// A throughput sweep over node counts: the `--json` document of `isochron simulate`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Sweep {
    /// The architecture.
    pub arch: Architecture,
    /// The operation.
    pub op: Operation,
    /// One point per node count, increasing.
    pub points: Vec<Point>,
}

impl Sweep {
    /// The point for `nodes`, if simulated.
    #[must_use]
    pub fn at(&self, nodes: u32) -> Option<&Point> {
        self.points.iter().find(|p| p.nodes == nodes)
    }
}

/// Rounds to 4 decimals, so reports stay readable (and stay deterministic: the simulation is).
fn r4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

fn routes(s: &Scenario, m: &Machine, op: Operation, strands: u32) -> Vec<Route> {
    (0..strands).map(|i| m.strand_route(s, op, i)).collect()
}

/// Simulates the throughput experiment for one node count.
#[must_use]
pub fn throughput(s: &Scenario, arch: Architecture, op: Operation, nodes: u32) -> Point {
    let m = Machine::new(s, arch, nodes);
    let routes = routes(s, &m, op, s.strands());
    let bounds = m.analytic_bounds(s, &routes);
    let bytes: u64 = routes.iter().map(|r| r.bytes).sum();
    let mut e = Engine::new(m.specs.clone(), s.seed);
    for r in &routes {
        e.add_job_gated(Instant::ZERO, r.gates.clone(), r.steps.clone());
    }
    e.run();
    let span = e.now() - Instant::ZERO;
    let (utilization, max_utilization) = utilisations(&m, &e, span);
    let bottleneck = most_utilised(&max_utilization);
    let (analytic_bottleneck, analytic) = bounds
        .iter()
        .min_by(|a, b| a.1.0.total_cmp(&b.1.0))
        .map_or((Component::Disk, 0.0), |(c, v)| (*c, v.0));
    Point {
        nodes: m.nodes,
        throughput_mb_s: r4(MbPerSec::from_bytes_per_sec(bytes as f64 / span.as_secs_f64()).0),
        analytic_mb_s: r4(analytic),
        bottleneck,
        utilization,
        analytic_bottleneck,
        bounds: bounds.into_iter().map(|(c, v)| (c, r4(v.0))).collect(),
        max_utilization,
    }
}

/// Simulates the throughput experiment for every node count in `nodes`.
#[must_use]
pub fn sweep(
    s: &Scenario,
    arch: Architecture,
    op: Operation,
    nodes: std::ops::RangeInclusive<u32>,
) -> Sweep {
    Sweep { arch, op, points: nodes.map(|n| throughput(s, arch, op, n)).collect() }
}

fn utilisations(
    m: &Machine,
    e: &Engine,
    span: Duration,
) -> (BTreeMap<Component, f64>, BTreeMap<Component, f64>) {
    let mut sum: BTreeMap<Component, (f64, usize)> = BTreeMap::new();
    let mut max: BTreeMap<Component, f64> = BTreeMap::new();
    for (id, _) in e.resources() {
        let c = m.classes[id.0];
        let u = e.utilisation(id, span);
        let s = sum.entry(c).or_insert((0.0, 0));
        s.0 += u;
        s.1 += 1;
        let mx = max.entry(c).or_insert(0.0);
        *mx = mx.max(u);
    }
    let mean = sum.into_iter().map(|(c, (t, n))| (c, r4(t / n as f64))).collect();
    (mean, max.into_iter().map(|(c, u)| (c, r4(u))).collect())
}

fn most_utilised(max: &BTreeMap<Component, f64>) -> Component {
    // Ties go to the class listed first (BTreeMap order), so the choice is deterministic.
    let mut best = (Component::Disk, f64::NEG_INFINITY);
    for (c, u) in max {
        if *u > best.1 {
            best = (*c, *u);
        }
    }
    best.0
}

/// The strand-delay distribution of a jitter run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Jitter {
    /// The architecture.
    pub arch: Architecture,
    /// The operation.
    pub op: Operation,
    /// Disk nodes.
    pub nodes: u32,
    /// The architecture utilisation asked for (of the most loaded component).
    pub target_utilization: f64,
    /// The most utilised component's measured utilisation.
    pub measured_utilization: f64,
    /// The class of that component.
    pub bottleneck: Component,
    /// Time between strand requests, ms.
    pub interval_ms: f64,
    /// Strands in the statistics (after the warm-up).
    pub strands: usize,
    /// Mean delay, request to last step, ms.
    pub mean_ms: f64,
    /// Standard deviation of the delay, ms.
    pub std_ms: f64,
    /// Mean disk access time (seeks plus transfer), ms.
    pub disk_mean_ms: f64,
    /// Standard deviation of the disk access time, ms (measured).
    pub disk_std_ms: f64,
    /// Standard deviation of the disk access time from the model: `√k · m/√2` for `k` seeks
    /// of mean `m` per strand (7.07 ms for one 10 ms seek).
    pub disk_std_model_ms: f64,
    /// The delay CDF: `(delay_ms, probability)` at probabilities 0, 0.025, …, 1 (nearest rank).
    pub cdf: Vec<(f64, f64)>,
}

/// Runs the jitter experiment: `strands` strands requested at regular intervals such that the
/// most loaded component is busy `utilisation` of the time (clamped to `(0, 1]`).
#[must_use]
pub fn jitter(
    s: &Scenario,
    arch: Architecture,
    op: Operation,
    nodes: u32,
    utilisation: f64,
    strands: u32,
) -> Jitter {
    let target = if utilisation.is_finite() { utilisation.clamp(1e-3, 1.0) } else { 0.5 };
    let strands = strands.max(2);
    let m = Machine::new(s, arch, nodes);
    let routes = routes(s, &m, op, strands);
    // Each resource's mean work per strand over its servers; the largest sets the interval.
    let bytes: f64 = routes.iter().map(|r| r.bytes as f64).sum();
    let bounds = m.analytic_bounds(s, &routes);
    let max_work_per_byte = bounds.values().map(|b| 1.0 / b.bytes_per_sec()).fold(0.0f64, f64::max);
    let interval = max_work_per_byte * bytes / f64::from(strands) / target;
    let mut e = Engine::new(m.specs.clone(), s.seed);
    let ids: Vec<JobId> = (0u32..)
        .zip(&routes)
        .map(|(i, r)| {
            let at = Instant::from_nanos((f64::from(i) * interval * 1e9).round() as u64);
            e.add_job_gated(at, r.gates.clone(), r.steps.clone())
        })
        .collect();
    e.run();
    let span = e.now() - Instant::ZERO;
    let (_, max_u) = utilisations(&m, &e, span);
    let bottleneck = most_utilised(&max_u);
    let skip = (f64::from(strands) * JITTER_WARMUP) as usize;
    let mut delays = Vec::with_capacity(ids.len() - skip);
    let mut disk = Vec::with_capacity(ids.len() - skip);
    for (id, route) in ids.iter().zip(&routes).skip(skip) {
        let (arrival, timings, done) = e.job(*id);
        let done = done.unwrap_or_else(|| e.now());
        delays.push((done - arrival).as_secs_f64() * 1e3);
        disk.push(timings[route.disk_step].service().as_secs_f64() * 1e3);
    }
    let (mean_ms, std_ms) = mean_std(&delays);
    let (disk_mean_ms, disk_std_ms) = mean_std(&disk);
    let k = f64::from(s.stream.disk_requests_per_strand);
    delays.sort_by(f64::total_cmp);
    let cdf = (0..=40)
        .map(|i| {
            let q = f64::from(i) / 40.0;
            let rank = ((q * delays.len() as f64).ceil() as usize).clamp(1, delays.len());
            (r4(delays[rank - 1]), q)
        })
        .collect();
    Jitter {
        arch,
        op,
        nodes: m.nodes,
        target_utilization: target,
        measured_utilization: max_u.get(&bottleneck).copied().unwrap_or(0.0),
        bottleneck,
        interval_ms: r4(interval * 1e3),
        strands: delays.len(),
        mean_ms: r4(mean_ms),
        std_ms: r4(std_ms),
        disk_mean_ms: r4(disk_mean_ms),
        disk_std_ms: r4(disk_std_ms),
        disk_std_model_ms: r4(k.sqrt() * s.disk.seek_mean_ms / 2f64.sqrt()),
        cdf,
    }
}

fn mean_std(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_node_read_is_disk_bound_and_below_its_bound() {
        let s = Scenario::default();
        for arch in Architecture::ALL {
            let p = throughput(&s, arch, Operation::Read, 1);
            assert_eq!(p.bottleneck, Component::Disk, "{arch}");
            // 256 seeks drawn at random: within a few per cent of the mean-seek bound.
            assert!((p.throughput_mb_s / p.analytic_mb_s - 1.0).abs() < 0.05, "{arch}: {p:?}");
            assert!(p.utilization[&Component::Disk] > 0.9);
        }
    }

    #[test]
    fn throughput_grows_with_nodes_until_saturation() {
        let s = Scenario::default();
        let w = sweep(&s, Architecture::PointToPoint, Operation::Read, 1..=4);
        assert_eq!(w.points.len(), 4);
        // Disk-bound: linear in the node count.
        let one = w.points[0].throughput_mb_s;
        for p in &w.points {
            assert!((p.throughput_mb_s / (one * f64::from(p.nodes)) - 1.0).abs() < 0.1, "{p:?}");
        }
        assert_eq!(w.at(3).map(|p| p.nodes), Some(3));
    }

    #[test]
    fn same_seed_same_result_other_seed_other_result() {
        let s = Scenario::default();
        let a = throughput(&s, Architecture::SharedBus, Operation::Resample, 5);
        assert_eq!(a, throughput(&s, Architecture::SharedBus, Operation::Resample, 5));
        let other = Scenario { seed: 99, ..s };
        assert_ne!(a, throughput(&other, Architecture::SharedBus, Operation::Resample, 5));
    }

    #[test]
    fn jitter_at_low_utilisation_is_the_disks() {
        // Almost no queueing at 10 %: the delay varies as the disk access does (m/√2).
        let s = Scenario::default();
        let j = jitter(&s, Architecture::SharedBus, Operation::Read, 8, 0.1, 4000);
        assert!((j.disk_std_ms - 7.07).abs() < 0.3, "{j:?}");
        assert!((j.std_ms - j.disk_std_ms).abs() < 0.5, "{j:?}");
        assert!((j.measured_utilization - 0.1).abs() < 0.02, "{j:?}");
        assert_eq!(j.cdf.len(), 41);
        assert!(j.cdf.windows(2).all(|w| w[0].0 <= w[1].0));
        assert_eq!(j.cdf[40].1, 1.0);
    }

    #[test]
    fn jitter_grows_with_utilisation() {
        let s = Scenario::default();
        let lo = jitter(&s, Architecture::PointToPoint, Operation::Read, 8, 0.3, 4000);
        let hi = jitter(&s, Architecture::PointToPoint, Operation::Read, 8, 0.9, 4000);
        assert!(hi.std_ms > lo.std_ms && hi.mean_ms > lo.mean_ms, "{lo:?} {hi:?}");
        assert!((hi.measured_utilization - 0.9).abs() < 0.05, "{hi:?}");
    }
}
