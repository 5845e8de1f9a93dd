//! Dummy-stream workloads for the disk experiments (XTREAM §3: "dummy" CBR and VBR streams, read
//! or write, not sent over the network; issue 4 part 6).
//!
//! A workload is a list of [`StreamSpec`]s: each an object plan (blocks with disks and send
//! times) and its average and peak rates. Three kinds, as in XTREAM's Table 1:
//!
//! * **CBR**: every stream at the mean rate;
//! * **VBR**: every stream plays a VBR trace (per-block send times: a real clip's, or a synthetic
//!   one from [`synthetic_vbr_trace`]) scaled to the mean rate, from its own random point in it;
//! * **heterogeneous**: CBR streams whose rates lie between 1/10 and 10 times the mean, with the
//!   mean as their expectation.
//!
//! Workloads are pure functions of their seed, and **prefix-stable**: the first `k` streams of a
//! workload of `n` are the workload of `k`. That is what lets a search over `N` ([`crate::sim`])
//! compare nested stream sets.
//!
//! Not here: running them (the `sim` harness in virtual time, `isochron bench-disk` on real
//! disks).

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use isochron_base::mix::{SplitMix64, hash_words, reduce};
use isochron_base::{BitRate, Bytes, DiskId, Gsn, MediaTime, ObjectId, StreamId};

use crate::admission::Direction;
use crate::cycle::OpenRecord;
use crate::plan::{ObjectPlan, OpenStream, PlannedBlock};

/// The three stream mixes of XTREAM's Table 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WorkloadKind {
    /// Constant bit rate, all streams at the mean rate.
    Cbr,
    /// Variable bit rate by a trace, scaled to the mean rate.
    Vbr,
    /// Constant bit rates between 1/10 and 10 times the mean.
    Heterogeneous,
}

impl WorkloadKind {
    /// Every kind.
    pub const ALL: [Self; 3] = [Self::Cbr, Self::Vbr, Self::Heterogeneous];

    /// The name on the command line: `cbr`, `vbr`, `heterogeneous`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cbr => "cbr",
            Self::Vbr => "vbr",
            Self::Heterogeneous => "heterogeneous",
        }
    }
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A workload kind name that is not `cbr`, `vbr` or `heterogeneous`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown workload kind {0:?}: expected cbr, vbr or heterogeneous")]
pub struct ParseKindError(pub String);

impl FromStr for WorkloadKind {
    type Err = ParseKindError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|k| k.as_str() == s).ok_or_else(|| ParseKindError(s.into()))
    }
}

/// What to generate.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadSpec {
    /// The mix.
    pub kind: WorkloadKind,
    /// Playback or recording streams.
    pub direction: Direction,
    /// The mean rate.
    pub mean_rate: BitRate,
    /// The block size (every block is full).
    pub block_size: Bytes,
    /// The disks blocks are placed on, pseudo-randomly (Yima placement).
    pub disks: Vec<DiskId>,
    /// The media length of each stream's object.
    pub duration: Duration,
    /// The seed.
    pub seed: u64,
    /// For VBR: the trace, as per-block send times of blocks of `block_size` (a real clip's
    /// block plan). `None`: a synthetic trace from the seed.
    pub trace: Option<Arc<[MediaTime]>>,
    /// Window over which the peak rate is measured. Default 1 s (the catalog's definition).
    pub peak_window: Duration,
}

impl WorkloadSpec {
    /// A CBR read workload at `mean_rate` on `disks` with 1 MiB blocks, 10 min long, seed 1.
    #[must_use]
    pub fn new(kind: WorkloadKind, mean_rate: BitRate, disks: Vec<DiskId>) -> Self {
        Self {
            kind,
            direction: Direction::Read,
            mean_rate,
            block_size: Bytes::mib(1),
            disks,
            duration: Duration::from_secs(600),
            seed: 1,
            trace: None,
            peak_window: Duration::from_secs(1),
        }
    }
}

/// One generated stream.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamSpec {
    /// Its object: blocks, disks and send times (for a recording, when each block is produced).
    pub plan: Arc<ObjectPlan>,
    /// Mean rate.
    pub avg_bitrate: BitRate,
    /// Peak rate over the spec's peak window.
    pub peak_bitrate: BitRate,
    /// Playback or recording.
    pub direction: Direction,
}

impl StreamSpec {
    /// The request to play it as `stream`.
    #[must_use]
    pub fn open(&self, stream: StreamId) -> OpenStream {
        OpenStream {
            stream,
            plan: Arc::clone(&self.plan),
            avg_bitrate: self.avg_bitrate,
            peak_bitrate: self.peak_bitrate,
            local: None,
        }
    }

    /// The request to record it as `stream`.
    #[must_use]
    pub fn record(&self, stream: StreamId) -> OpenRecord {
        let n = self.plan.blocks.len().max(1) as u64;
        let bytes: u64 = self.plan.blocks.iter().map(|b| b.len.0).sum();
        OpenRecord {
            stream,
            object: self.plan.object,
            avg_bitrate: self.avg_bitrate,
            peak_bitrate: self.peak_bitrate,
            block_size: Bytes(bytes / n),
        }
    }
}

/// The first `n` streams of the workload (prefix-stable).
#[must_use]
pub fn generate(spec: &WorkloadSpec, n: usize) -> Vec<StreamSpec> {
    let trace = match (&spec.kind, &spec.trace) {
        (WorkloadKind::Vbr, Some(t)) => Some(durations_of(t)),
        (WorkloadKind::Vbr, None) => Some(durations_of(&synthetic_vbr_trace(
            spec.seed,
            256,
            spec.block_size,
            spec.mean_rate,
        ))),
        _ => None,
    };
    (0..n).map(|i| stream_spec(spec, i, trace.as_deref())).collect()
}

fn stream_spec(spec: &WorkloadSpec, i: usize, trace: Option<&[f64]>) -> StreamSpec {
    let mut rng = SplitMix64::new(hash_words(&[spec.seed, i as u64, 0x5354_5245_414d]));
    let object = ObjectId(i as u64 + 1);
    let block = spec.block_size.max(Bytes(1));
    let mean = spec.mean_rate.bytes_per_sec().max(1.0);
    // Seconds each block lasts, cycled as long as needed.
    let durations: Vec<f64> = match (spec.kind, trace) {
        (WorkloadKind::Vbr, Some(t)) if !t.is_empty() => {
            let trace_rate = block.0 as f64 * t.len() as f64 / t.iter().sum::<f64>();
            let scale = trace_rate / mean;
            let start = reduce(rng.next_u64(), t.len() as u32) as usize;
            (0..t.len()).map(|k| t[(start + k) % t.len()] * scale).collect()
        }
        (WorkloadKind::Heterogeneous, _) => {
            vec![block.0 as f64 / heterogeneous_rate(spec.seed, i, mean)]
        }
        _ => vec![block.0 as f64 / mean],
    };
    let total = spec.duration.as_secs_f64();
    let mut blocks = Vec::new();
    let mut t = 0.0;
    let mut k = 0usize;
    while t < total || blocks.is_empty() {
        let index = blocks.len() as u64;
        let disk = if spec.disks.is_empty() {
            DiskId(0)
        } else {
            let h = hash_words(&[spec.seed, object.0, index]);
            spec.disks[reduce(h, spec.disks.len() as u32) as usize]
        };
        blocks.push(PlannedBlock {
            disk,
            copies: isochron_base::Replicas::single(disk),
            first_gsn: Gsn(index * 1000),
            first_send_time: MediaTime::from_secs_f64(t),
            len: block,
        });
        t += durations[k % durations.len()];
        k += 1;
    }
    let plan = ObjectPlan { object, blocks };
    let avg = BitRate::from_bytes_per(Bytes(block.0 * plan.blocks.len() as u64), t);
    let peak = peak_bitrate(&plan, Duration::from_secs_f64(t), spec.peak_window).max(avg);
    StreamSpec {
        plan: Arc::new(plan),
        avg_bitrate: avg,
        peak_bitrate: peak,
        direction: spec.direction,
    }
}

/// The rate of stream `i` of a heterogeneous workload: between `mean/10` and `10·mean`, with
/// expectation `mean`. The distribution is log-uniform on `[mean/10, mean]` with probability `q`
/// and on `[mean, 10·mean]` otherwise, where `q = (9 − ln 10) / 8.1 ≈ 0.827` makes the
/// expectation `mean` (`E = (q·0.9 + (1 − q)·9) / ln 10 = 1` in units of the mean).
///
/// Stream `i` takes the quantile `frac(u₀ + i·φ)` (φ the golden ratio, `u₀` from the seed): a
/// low-discrepancy sequence, so that every prefix of the workload has a mean close to `mean`
/// (independent draws would give a 5-stream prefix holding two 10× streams as often as not).
fn heterogeneous_rate(seed: u64, i: usize, mean: f64) -> f64 {
    const PHI_FRAC: f64 = 0.618_033_988_749_894_9;
    let q = (9.0 - 10f64.ln()) / 8.1;
    let u0 = uniform(&mut SplitMix64::new(hash_words(&[seed, 0x0048_4554])));
    let u = (u0 + i as f64 * PHI_FRAC).fract();
    let factor = if u < q { 10f64.powf(u / q - 1.0) } else { 10f64.powf((u - q) / (1.0 - q)) };
    mean * factor
}

/// A uniform sample in `[0, 1)`.
pub(crate) fn uniform(rng: &mut SplitMix64) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

fn standard_normal(rng: &mut SplitMix64) -> f64 {
    let u1 = uniform(rng).max(f64::MIN_POSITIVE);
    let u2 = uniform(rng);
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Per-block durations (seconds) of a trace of send times; the last block lasts the mean of the
/// others.
fn durations_of(send_times: &[MediaTime]) -> Vec<f64> {
    let mut d: Vec<f64> = send_times
        .windows(2)
        .map(|w| w[1].saturating_duration_since(w[0]).as_secs_f64().max(1e-6))
        .collect();
    let mean = if d.is_empty() { 1.0 } else { d.iter().sum::<f64>() / d.len() as f64 };
    if !send_times.is_empty() {
        d.push(mean);
    }
    d
}

/// A synthetic VBR trace of `blocks` blocks of `block_size` at mean rate `mean_rate`: scenes of
/// 1 to about 10 blocks (geometric, mean 3) whose rate is the mean times a log-normal factor
/// (σ = 0.35, clamped to 0.4–2.5), rescaled so that the whole trace has the mean rate exactly.
/// Returns the blocks' send times.
#[must_use]
pub fn synthetic_vbr_trace(
    seed: u64,
    blocks: usize,
    block_size: Bytes,
    mean_rate: BitRate,
) -> Vec<MediaTime> {
    const SIGMA: f64 = 0.35;
    let mut rng = SplitMix64::new(hash_words(&[seed, 0x0056_4252]));
    let mean = mean_rate.bytes_per_sec().max(1.0);
    let mut durations = Vec::with_capacity(blocks);
    while durations.len() < blocks {
        let factor =
            (SIGMA * standard_normal(&mut rng) - SIGMA * SIGMA / 2.0).exp().clamp(0.4, 2.5);
        let mut scene = 1;
        while uniform(&mut rng) < 2.0 / 3.0 && scene < 10 {
            scene += 1;
        }
        for _ in 0..scene {
            durations.push(block_size.0 as f64 / (mean * factor));
        }
    }
    durations.truncate(blocks);
    let want = block_size.0 as f64 * blocks as f64 / mean;
    let scale = want / durations.iter().sum::<f64>().max(f64::MIN_POSITIVE);
    let mut t = 0.0;
    durations
        .iter()
        .map(|d| {
            let s = MediaTime::from_secs_f64(t);
            t += d * scale;
            s
        })
        .collect()
}

/// The highest mean rate over any window of `window` of a plan whose blocks are sent evenly
/// over their durations (the last block ends at `end`, media time from the first block).
#[must_use]
pub fn peak_bitrate(plan: &ObjectPlan, end: Duration, window: Duration) -> BitRate {
    let n = plan.blocks.len();
    if n == 0 || window.is_zero() {
        return BitRate(0);
    }
    let start = |j: usize| plan.blocks[j].first_send_time.as_secs_f64();
    let stop = |j: usize| if j + 1 < n { start(j + 1) } else { end.as_secs_f64().max(start(j)) };
    // Prefix bytes before block j.
    let mut prefix = Vec::with_capacity(n + 1);
    prefix.push(0.0);
    for b in &plan.blocks {
        let last = prefix.last().copied().unwrap_or(0.0);
        prefix.push(last + b.len.0 as f64);
    }
    // Bytes sent by time t.
    let sent = |t: f64| -> f64 {
        let j = plan.blocks.partition_point(|b| b.first_send_time.as_secs_f64() <= t);
        if j == 0 {
            return 0.0;
        }
        let j = j - 1;
        let (a, b) = (start(j), stop(j));
        let frac = if b > a { ((t - a) / (b - a)).clamp(0.0, 1.0) } else { 1.0 };
        prefix[j] + frac * plan.blocks[j].len.0 as f64
    };
    let w = window.as_secs_f64();
    let mut best: f64 = 0.0;
    for j in 0..n {
        for t in [start(j), stop(j) - w] {
            best = best.max(sent(t + w) - sent(t));
        }
    }
    BitRate((best * 8.0 / w).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: WorkloadKind) -> WorkloadSpec {
        WorkloadSpec::new(kind, BitRate(1_000_000), vec![DiskId(0), DiskId(1), DiskId(2)])
    }

    #[test]
    fn cbr_streams_have_the_mean_rate_and_spread_over_disks() {
        let s = generate(&spec(WorkloadKind::Cbr), 4);
        assert_eq!(s.len(), 4);
        for x in &s {
            let r = x.avg_bitrate.0 as f64;
            assert!((r / 1e6 - 1.0).abs() < 0.01, "{r}");
            assert!((x.peak_bitrate.0 as f64 / r - 1.0).abs() < 0.01);
            // 1 MiB at 125 kB/s: 8.39 s per block.
            let d = x.plan.blocks[1].first_send_time.as_secs_f64();
            assert!((d - 1_048_576.0 / 125_000.0).abs() < 1e-6);
            let on0 = x.plan.blocks.iter().filter(|b| b.disk == DiskId(0)).count();
            assert!(on0 > 0 && on0 < x.plan.blocks.len());
        }
        assert_ne!(s[0].plan.object, s[1].plan.object);
    }

    #[test]
    fn workloads_are_prefix_stable_and_seeded() {
        for kind in WorkloadKind::ALL {
            let a = generate(&spec(kind), 10);
            let b = generate(&spec(kind), 4);
            assert_eq!(&a[..4], &b[..]);
            let other = WorkloadSpec { seed: 2, ..spec(kind) };
            assert_ne!(generate(&other, 4), b, "{kind}");
        }
    }

    #[test]
    fn heterogeneous_rates_stay_in_range_with_the_mean_as_expectation() {
        let s = generate(
            &WorkloadSpec {
                duration: Duration::from_secs(60),
                ..spec(WorkloadKind::Heterogeneous)
            },
            4000,
        );
        let rates: Vec<f64> = s.iter().map(|x| x.avg_bitrate.0 as f64 / 1e6).collect();
        assert!(rates.iter().all(|r| (0.0999..=10.01).contains(r)), "out of range");
        let mean = rates.iter().sum::<f64>() / rates.len() as f64;
        // Whole blocks round each stream's rate a little; the expectation is the mean.
        assert!((mean - 1.0).abs() < 0.03, "{mean}");
        // Low discrepancy: short prefixes already have about the mean rate.
        for n in [10, 20, 50] {
            let m = rates[..n].iter().sum::<f64>() / n as f64;
            assert!((m - 1.0).abs() < 0.3, "prefix {n}: {m}");
        }
    }

    #[test]
    fn vbr_follows_its_trace_with_a_peak_above_the_mean() {
        let trace = synthetic_vbr_trace(7, 256, Bytes::mib(1), BitRate(1_000_000));
        let n = trace.len() as f64;
        let end = trace[255].as_secs_f64() * n / (n - 1.0);
        assert!((1_048_576.0 * n / end / 125_000.0 - 1.0).abs() < 0.02);
        let s = generate(&spec(WorkloadKind::Vbr), 8);
        for x in &s {
            assert!(x.peak_bitrate > x.avg_bitrate, "{x:?}");
            assert!(x.peak_bitrate.0 < 4 * x.avg_bitrate.0);
        }
        // Streams start at different points of the trace.
        assert_ne!(s[0].plan.blocks[1].first_send_time, s[1].plan.blocks[1].first_send_time);
        // A given trace is followed: a two-block-rate clip alternating 1 s and 3 s blocks.
        let clip: Arc<[MediaTime]> =
            (0..10).map(|k| MediaTime::from_secs_f64(f64::from(k / 2 * 4 + (k % 2)))).collect();
        let w = WorkloadSpec { trace: Some(clip), ..spec(WorkloadKind::Vbr) };
        let x = &generate(&w, 1)[0];
        let d: Vec<f64> = x
            .plan
            .blocks
            .windows(2)
            .take(4)
            .map(|p| p[1].first_send_time.as_secs_f64() - p[0].first_send_time.as_secs_f64())
            .collect();
        // Scaled to 1 Mb/s: mean block time 8.39 s, so 4.19 s and 12.58 s alternate.
        let short = d.iter().copied().fold(f64::MAX, f64::min);
        let long = d.iter().copied().fold(0.0, f64::max);
        assert!((long / short - 3.0).abs() < 1e-6, "{d:?}");
    }

    #[test]
    fn peak_over_windows() {
        // Blocks of 1000 B: 1 s, then 0.5 s, then 1 s (ends at 2.5 s).
        let plan = ObjectPlan {
            object: ObjectId(1),
            blocks: [0.0, 1.0, 1.5]
                .iter()
                .map(|t| PlannedBlock {
                    disk: DiskId(0),
                    copies: isochron_base::Replicas::single(DiskId(0)),
                    first_gsn: Gsn(0),
                    first_send_time: MediaTime::from_secs_f64(*t),
                    len: Bytes(1000),
                })
                .collect(),
        };
        let end = Duration::from_millis(2500);
        // Best 1 s window: the 0.5 s block (1000 B) + 0.5 s of a 1000 B/s neighbour = 1500 B.
        assert_eq!(peak_bitrate(&plan, end, Duration::from_secs(1)), BitRate(12_000));
        assert_eq!(peak_bitrate(&plan, end, Duration::from_millis(500)), BitRate(16_000));
        assert_eq!("vbr".parse(), Ok(WorkloadKind::Vbr));
        assert!("abr".parse::<WorkloadKind>().is_err());
    }
}
