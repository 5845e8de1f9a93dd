//! Capacity planning: the CineGrid format table, and streams per node and nodes needed.
//!
//! Why: before buying disks and nodes for an audience, an operator needs to know which resource
//! of a node runs out first and how many nodes that means. The CineGrid report (§2, Table 1)
//! gives the uncompressed bandwidth of the formats that matter for very high bit-rate
//! streaming (`Frame (MB) = X · Y · bpp / 8`, `Flow (MB/s) = Frame · fps`,
//! `Stream (Gb/s) = Flow · 8`); Gennart et al. (§5) reduce a stream to what the client's network
//! takes by resampling and compressing; Yima's scale-up shows nodes running out of network or
//! CPU before disk. This module combines them: a stream's rate (a format and a compression
//! ratio, or a bit rate), a node's resources (its disks, through isochron's own admission
//! controller over their profiles; its link; its CPU's send rate), and an audience.
//!
//! Disks are judged by `isochron-sched`'s [`AdmissionController`] (XTREAM Eq. 1–3 per disk with
//! the random-placement variance term) over a [`DiskProfile`] — measured by `isochron
//! profile-disk`, or a model's — so the planner predicts what the server would admit. For a
//! modelled disk, [`sched_max_n`] also runs the virtual-time cycle scheduler (`sched::sim`) over
//! it and finds the most streams with no missed deadline.
//!
//! A link carries more than the stream's bit rate: every RTP packet of 7 TS packets (1 316 bytes)
//! adds RTP (12), UDP (8), IPv4 (20) and Ethernet (14) headers, [`WIRE_OVERHEAD`] = 1 370/1 316
//! (what a Linux qdisc counts; a physical port also sees preamble, FCS and gap). The link's
//! streams are `link × link_share / (rate × WIRE_OVERHEAD)`; `link_share` is the headroom
//! VBR peaks need below a full link.
//!
//! A node can also be described by a measurement instead of models: an `isochron bench` run's
//! N_max for streams of a known rate, and the resource its verdict named ([`Measured`]). The
//! planner scales that capacity to the planned rate (the bench's bottleneck carried
//! `N_max × rate` bits/s) and weighs it with the modelled resources.
//!
//! Not here: reading profile files and bench reports (the binary).

use std::fmt;
use std::time::Duration;

use isochron_base::{BitRate, Bytes, DiskId, MbPerSec, StreamId};
use isochron_sched::profile::ProfileError;
use isochron_sched::sim::{SimConfig, find_max_n, staggered};
use isochron_sched::workload::{WorkloadKind, WorkloadSpec, generate};
use isochron_sched::{
    AdmissionConfig, AdmissionController, Curve, DiskModel, DiskProfile, Placement, StreamDemand,
};
use serde::Serialize;

/// One row of the CineGrid format table.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Format {
    /// Short name for the command line (`1080p`, `4k`).
    pub name: &'static str,
    /// The report's name for it.
    pub label: &'static str,
    /// Horizontal pixels.
    pub width_px: u32,
    /// Vertical pixels.
    pub height_px: u32,
    /// Frames per second.
    pub fps: u32,
    /// Bits per pixel.
    pub bits_per_pixel: u32,
}

/// The CineGrid report's Table 1, in its order (2K at 24 and at 48 frames/s are two rows).
pub const FORMATS: [Format; 6] = [
    Format {
        name: "720p",
        label: "720p HD",
        width_px: 1280,
        height_px: 720,
        fps: 60,
        bits_per_pixel: 24,
    },
    Format {
        name: "1080p",
        label: "1080p HD",
        width_px: 1920,
        height_px: 1080,
        fps: 30,
        bits_per_pixel: 24,
    },
    Format {
        name: "2k24",
        label: "2K",
        width_px: 2048,
        height_px: 1080,
        fps: 24,
        bits_per_pixel: 36,
    },
    Format {
        name: "2k48",
        label: "2K",
        width_px: 2048,
        height_px: 1080,
        fps: 48,
        bits_per_pixel: 36,
    },
    Format {
        name: "shd",
        label: "SHD",
        width_px: 3840,
        height_px: 2160,
        fps: 30,
        bits_per_pixel: 24,
    },
    Format {
        name: "4k",
        label: "4K",
        width_px: 4096,
        height_px: 2160,
        fps: 24,
        bits_per_pixel: 36,
    },
];

impl Format {
    /// The format named `name` (case-insensitive), if in the table.
    #[must_use]
    pub fn by_name(name: &str) -> Option<Self> {
        FORMATS.into_iter().find(|f| f.name.eq_ignore_ascii_case(name))
    }

    /// Pixels per frame (equation 1).
    #[must_use]
    pub fn frame_pixels(&self) -> u64 {
        u64::from(self.width_px) * u64::from(self.height_px)
    }

    /// Megabytes (10⁶ bytes) per frame (equation 2).
    #[must_use]
    pub fn frame_mb(&self) -> f64 {
        self.frame_pixels() as f64 * f64::from(self.bits_per_pixel) / 8.0 / 1e6
    }

    /// Uncompressed flow (equation 3).
    #[must_use]
    pub fn flow(&self) -> MbPerSec {
        MbPerSec(self.frame_mb() * f64::from(self.fps))
    }

    /// Uncompressed stream, Gb/s (equation 4: the flow times 8).
    #[must_use]
    pub fn stream_gb_s(&self) -> f64 {
        self.flow().0 * 8.0 / 1e3
    }

    /// The stream's rate compressed `ratio` : 1.
    #[must_use]
    pub fn compressed(&self, ratio: f64) -> BitRate {
        MbPerSec(self.flow().0 / ratio.max(1e-9)).to_bit_rate()
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}×{} at {} fps, {} bpp)",
            self.label, self.width_px, self.height_px, self.fps, self.bits_per_pixel
        )
    }
}

/// The format table as text, one row per format, as `isochron plan --formats` prints it.
#[must_use]
pub fn format_table() -> String {
    let mut s = format!(
        "{:<7} {:<9} {:>5} {:>5} {:>4} {:>4} {:>9} {:>9} {:>9} {:>8}\n",
        "name", "format", "X", "Y", "fps", "bpp", "pixels", "frame MB", "MB/s", "Gb/s"
    );
    for f in FORMATS {
        s.push_str(&format!(
            "{:<7} {:<9} {:>5} {:>5} {:>4} {:>4} {:>9} {:>9.1} {:>9.0} {:>8.2}\n",
            f.name,
            f.label,
            f.width_px,
            f.height_px,
            f.fps,
            f.bits_per_pixel,
            f.frame_pixels(),
            f.frame_mb(),
            f.flow().0,
            f.stream_gb_s()
        ));
    }
    s
}

/// Bytes on the link per byte of stream (RTP/UDP/IPv4/Ethernet headers on 7-TS-packet
/// payloads: 1 370 / 1 316).
pub const WIRE_OVERHEAD: f64 = 1370.0 / 1316.0;

/// The resources of one node.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeSpec {
    /// The node's disks' profiles (one per disk; empty: disks are not a limit).
    pub disks: Vec<DiskProfile>,
    /// The network link's rate (`None`: not a limit).
    pub link: Option<BitRate>,
    /// Share of the link that streams may use, in `(0, 1]` (protocol overhead, headroom).
    pub link_share: f64,
    /// The rate at which the node's CPU can read, packetise and send stream data (`None`: not a
    /// limit). isochron has no model of it: measure it (`isochron bench`) and pass it in.
    pub cpu: Option<MbPerSec>,
    /// Admission settings (policy, cycle, non-real-time share).
    pub admission: AdmissionConfig,
    /// The block size (one IO).
    pub block: Bytes,
    /// A bench run of a real node (`None`: no measurement).
    pub measured: Option<Measured>,
}

/// What an `isochron bench` run measured of a real node: the most streams it served (N_max) of
/// a given mean rate, and the resource its verdict named (He et al.'s bottleneck rules).
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// The most concurrent streams served.
    pub n_max: u64,
    /// The mean rate of the content those streams played.
    pub stream_rate: BitRate,
    /// The verdict's bottleneck as the report names it (`network`, `cpu`, `disk`, …).
    pub bottleneck: String,
    /// Whether the run reached a load it could not serve; if not, N_max is a lower bound.
    pub limit_reached: bool,
}

impl Measured {
    /// Streams of `rate` the measured node carries: the bottleneck's `N_max × stream_rate`
    /// over `rate`.
    #[must_use]
    pub fn streams(&self, rate: BitRate) -> u64 {
        let carried = u128::from(self.n_max) * u128::from(self.stream_rate.0);
        u64::try_from(carried / u128::from(rate.0.max(1))).unwrap_or(u64::MAX)
    }
}

/// Which resource of a node limits it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Resource {
    /// The disks (admission control over their profiles).
    Disk,
    /// The network link.
    Link,
    /// The CPU.
    Cpu,
    /// A bench run's measured capacity (its verdict names the resource).
    Bench,
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Disk => "disk",
            Self::Link => "link",
            Self::Cpu => "cpu",
            Self::Bench => "bench",
        })
    }
}

/// What the planner predicts.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    /// The stream rate planned for.
    pub stream_mb_s: f64,
    /// Streams each resource of a node can carry (absent: not a limit).
    pub per_resource: Vec<(Resource, u64)>,
    /// Streams per node: the least of them (`None` if nothing limits).
    pub streams_per_node: Option<u64>,
    /// The resource that sets it.
    pub bottleneck: Option<Resource>,
    /// The audience planned for.
    pub audience: u64,
    /// Nodes needed for the audience (`None` if a node carries no stream, or nothing limits).
    pub nodes: Option<u64>,
}

/// Why a plan cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The stream rate is zero.
    #[error("the stream rate is zero")]
    ZeroRate,
    /// A modelled disk is not a usable profile.
    #[error("disk model: {0}")]
    Profile(#[from] ProfileError),
}

/// Streams of `rate` that admission control admits on disks with `profiles` (each stream's
/// blocks spread evenly over them), by admitting identical streams until the first refusal.
#[must_use]
pub fn disk_streams(
    profiles: &[DiskProfile],
    config: &AdmissionConfig,
    block: Bytes,
    rate: BitRate,
) -> u64 {
    let mut c = AdmissionController::new(
        config.clone(),
        profiles
            .iter()
            .enumerate()
            .map(|(i, p)| (DiskId(u16::try_from(i).unwrap_or(u16::MAX)), p.clone())),
    );
    let demand = StreamDemand {
        direction: isochron_sched::Direction::Read,
        avg_bitrate: rate,
        peak_bitrate: rate,
        block_size: block,
        placement: Placement::Uniform,
    };
    // The most streams the disks' sequential rate could carry bounds the loop.
    let ceiling: f64 = profiles.iter().map(|p| p.throughput(Bytes(u64::MAX / 2), Curve::Max)).sum();
    let limit = (ceiling / rate.bytes_per_sec().max(1.0)).ceil() as u64 + 1;
    let mut n = 0u64;
    while n <= limit && c.admit(StreamId(n), &demand).is_admit() {
        n += 1;
    }
    n
}

/// Plans `audience` streams of `rate` on nodes like `node`.
pub fn plan(node: &NodeSpec, rate: BitRate, audience: u64) -> Result<Plan, PlanError> {
    if rate.0 == 0 {
        return Err(PlanError::ZeroRate);
    }
    let stream = MbPerSec::from_bit_rate(rate);
    let mut per_resource = Vec::new();
    if !node.disks.is_empty() {
        per_resource
            .push((Resource::Disk, disk_streams(&node.disks, &node.admission, node.block, rate)));
    }
    if let Some(link) = node.link {
        let usable = link.0 as f64 * node.link_share.clamp(0.0, 1.0);
        let wire = rate.0 as f64 * WIRE_OVERHEAD;
        per_resource.push((Resource::Link, (usable / wire).floor() as u64));
    }
    if let Some(cpu) = node.cpu {
        per_resource.push((Resource::Cpu, (cpu.0 / stream.0).floor() as u64));
    }
    if let Some(m) = &node.measured {
        per_resource.push((Resource::Bench, m.streams(rate)));
    }
    let best = per_resource.iter().min_by_key(|(_, n)| *n).copied();
    let nodes = match best {
        Some((_, n)) if n > 0 => Some(audience.div_ceil(n)),
        _ => None,
    };
    Ok(Plan {
        stream_mb_s: stream.0,
        streams_per_node: best.map(|b| b.1),
        bottleneck: best.map(|b| b.0),
        per_resource,
        audience,
        nodes,
    })
}

/// A disk model fitted to a profile's mean curve: IO time `t(S) = seek + S / rate` by least
/// squares over the measured sizes (the seek clamped to ≥ 0), so a measured disk can be
/// simulated by the cycle scheduler's harness.
pub fn fit_model(profile: &DiskProfile) -> Result<DiskModel, PlanError> {
    let pts: Vec<(f64, f64)> = profile
        .sizes()
        .iter()
        .zip(profile.curve(Curve::Mean))
        .map(|(s, p)| (s.0 as f64, s.0 as f64 / p))
        .collect();
    let n = pts.len() as f64;
    let (mx, my) =
        (pts.iter().map(|p| p.0).sum::<f64>() / n, pts.iter().map(|p| p.1).sum::<f64>() / n);
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    if !(slope.is_finite() && slope > 0.0) {
        let size = profile.sizes().first().map_or(0, |s| s.0);
        return Err(ProfileError::BadThroughput { curve: Curve::Mean, size, value: slope }.into());
    }
    let seek = (my - slope * mx).max(0.0);
    Ok(DiskModel::new(Duration::from_secs_f64(seek), 1.0 / slope))
}

/// The result of running the cycle scheduler over modelled disks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SchedPrediction {
    /// Streams the admission policy admits (in the harness, before any runs).
    pub admitted: usize,
    /// The most streams that ran with no missed deadline (admission off).
    pub max_n: usize,
    /// Every run of the search: (streams, missed deadlines).
    pub runs: Vec<(usize, u64)>,
}

/// A search of the most streams the cycle scheduler runs without a miss ([`sched_max_n`]).
#[derive(Clone, Debug, PartialEq)]
pub struct SchedSearch {
    /// Admission settings (the policy decides `admitted`; the search runs with admission off).
    pub admission: AdmissionConfig,
    /// The block size.
    pub block: Bytes,
    /// The CBR streams' rate.
    pub rate: BitRate,
    /// Time between arrivals (stratified random, as `sched::sim::staggered`).
    pub spacing: Duration,
    /// How long each run plays after the last arrival.
    pub horizon: Duration,
    /// The most streams to try.
    pub limit: usize,
    /// Seed of the workload and of the disks' seeks.
    pub seed: u64,
}

/// Runs isochron's cycle scheduler in virtual time (`sched::sim`) over `disks` with CBR streams
/// arriving as `search` says: what the admission policy admits, and the most streams with no
/// missed deadline.
pub fn sched_max_n(
    disks: &[DiskModel],
    search: &SchedSearch,
) -> Result<SchedPrediction, PlanError> {
    let SchedSearch { admission, block, rate, spacing, horizon, limit, seed } = search.clone();
    if rate.0 == 0 {
        return Err(PlanError::ZeroRate);
    }
    let ids: Vec<DiskId> =
        (0..disks.len()).map(|i| DiskId(u16::try_from(i).unwrap_or(u16::MAX))).collect();
    let mut config = SimConfig::new(disks.to_vec(), admission.policy, admission.cycle);
    config.admission = admission;
    config.horizon = horizon;
    config.seed = seed;
    let mut spec = WorkloadSpec::new(WorkloadKind::Cbr, rate, ids);
    spec.block_size = block;
    spec.seed = seed;
    spec.duration = spacing.mul_f64(limit as f64) + horizon + Duration::from_secs(10);
    let streams_for = |n: usize| staggered(generate(&spec, n), spacing, seed);
    let admitted = isochron_sched::sim::admitted_prefix(&config, &streams_for(limit))?;
    let found = find_max_n(&config, streams_for, limit)?;
    Ok(SchedPrediction { admitted, max_n: found.max_n, runs: found.runs })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two significant figures, as the CineGrid table prints.
    fn sig2(x: f64) -> f64 {
        let mag = 10f64.powf(x.abs().log10().floor() - 1.0);
        (x / mag).round() * mag
    }

    #[test]
    fn formats_match_the_cinegrid_table() {
        // (name, pixels, frame MB, MB/s, Gb/s) as printed in the report's Table 1. The seed's
        // text has "1.2" and "94" in the Gb/s cells of the two 2K rows, which contradict its own
        // equation (4) (240 × 8 = 1.9 Gb/s, 480 × 8 = 3.8 Gb/s): extraction damage, so those
        // two are checked against the equation.
        let table = [
            ("720p", 921_600, 2.8, 170.0, 1.3),
            ("1080p", 2_073_600, 6.2, 190.0, 1.5),
            ("2k24", 2_211_840, 10.0, 240.0, 1.9),
            ("2k48", 2_211_840, 10.0, 480.0, 3.8),
            ("shd", 8_294_400, 25.0, 750.0, 6.0),
            ("4k", 8_847_360, 40.0, 960.0, 7.6),
        ];
        assert_eq!(FORMATS.len(), table.len());
        for (f, (name, px, mb, flow, gb)) in FORMATS.iter().zip(table) {
            assert_eq!(f.name, name);
            assert_eq!(f.frame_pixels(), px, "{name}");
            assert!((sig2(f.frame_mb()) - mb).abs() < 1e-9, "{name}: {}", f.frame_mb());
            assert!((sig2(f.flow().0) - flow).abs() < 1e-9, "{name}: {}", f.flow());
            assert!((sig2(f.stream_gb_s()) - gb).abs() < 1e-9, "{name}: {}", f.stream_gb_s());
        }
        let t = format_table();
        assert_eq!(t.lines().count(), 7);
        assert!(t.contains("4k") && t.contains("8847360") && t.contains("7.64"), "{t}");
        assert_eq!(Format::by_name("SHD").map(|f| f.fps), Some(30));
        assert!(Format::by_name("8k").is_none());
    }

    #[test]
    fn sage_and_ntt_rates() {
        // CineGrid: SHD at 12:1 (NTT JPEG2000) is 500 Mb/s; 1080p at 6:1 (SAGE) about 250 Mb/s.
        let shd = Format::by_name("shd").unwrap().compressed(12.0);
        assert!((shd.0 as f64 / 1e6 - 497.7).abs() < 1.0, "{shd}");
        let hd = Format::by_name("1080p").unwrap().compressed(6.0);
        assert!((hd.0 as f64 / 1e6 - 248.8).abs() < 1.0, "{hd}");
    }

    fn node(disks: usize) -> NodeSpec {
        let p =
            DiskModel::new(Duration::from_millis(10), 4.0 * 1_048_576.0).read_profile().unwrap();
        NodeSpec {
            disks: vec![p; disks],
            link: Some(BitRate(100_000_000)),
            link_share: 1.0,
            cpu: None,
            admission: AdmissionConfig::default(),
            block: Bytes::mib(1),
            measured: None,
        }
    }

    #[test]
    fn the_link_limits_a_node_with_fast_disks() {
        // Yima: 5.3 Mb/s streams on 100 Mb/s are link-bound at 18 (5.52 Mb/s with headers; it
        // measured 12 at 68 Mb/s). 5.57 Mb/s streams (our Figure 3 clip): 17 on a full link.
        let mut n = node(8);
        let p = plan(&n, BitRate(5_300_000), 100).unwrap();
        assert_eq!(p.bottleneck, Some(Resource::Link));
        assert_eq!(p.streams_per_node, Some(18));
        assert_eq!(p.nodes, Some(6));
        n.link_share = 0.68;
        assert_eq!(plan(&n, BitRate(5_300_000), 100).unwrap().streams_per_node, Some(12));
        n.link_share = 1.0;
        assert_eq!(plan(&n, BitRate(5_570_000), 100).unwrap().streams_per_node, Some(17));
        n.link_share = 0.9;
        assert_eq!(plan(&n, BitRate(5_570_000), 100).unwrap().streams_per_node, Some(15));
    }

    #[test]
    fn the_disks_limit_a_node_with_a_slow_disk() {
        // One 4 MiB/s disk with 10 ms seeks: 1 MiB blocks at 1 MiB/(10 ms + 250 ms) ≈ 4.03 MB/s,
        // 90 % of it for real time, less the placement margin (one disk: none).
        let n = node(1);
        let p = plan(&n, BitRate(4_000_000), 1000).unwrap();
        assert_eq!(p.bottleneck, Some(Resource::Disk));
        let disk = p.per_resource.iter().find(|r| r.0 == Resource::Disk).unwrap().1;
        let expected = (0.9 * 1_048_576.0 / 0.26 / 500_000.0_f64).floor() as u64;
        assert_eq!(disk, expected);
        assert_eq!(p.nodes, Some(1000u64.div_ceil(expected)));
        // More disks, more streams; fewer than 4× as many, as random placement imbalances them.
        let four = disk_streams(&node(4).disks, &n.admission, n.block, BitRate(4_000_000));
        assert!(four > 3 * disk / 2 && four < 4 * disk, "{four} vs {disk}");
    }

    #[test]
    fn cpu_and_nothing() {
        let mut n = node(0);
        n.link = None;
        n.cpu = Some(MbPerSec(10.0));
        let p = plan(&n, BitRate(8_000_000), 50).unwrap();
        assert_eq!(
            (p.bottleneck, p.streams_per_node, p.nodes),
            (Some(Resource::Cpu), Some(10), Some(5))
        );
        n.cpu = None;
        let p = plan(&n, BitRate(8_000_000), 50).unwrap();
        assert_eq!((p.bottleneck, p.nodes), (None, None));
        assert!(matches!(plan(&node(1), BitRate(0), 1), Err(PlanError::ZeroRate)));
    }

    #[test]
    fn a_bench_run_scales_to_the_planned_rate() {
        // Measured: 17 streams of 5.43 Mb/s, network-bound (our 100 Mb/s Figure 3 run).
        let m = Measured {
            n_max: 17,
            stream_rate: BitRate(5_430_000),
            bottleneck: "network".into(),
            limit_reached: true,
        };
        assert_eq!(m.streams(BitRate(5_430_000)), 17);
        assert_eq!(m.streams(BitRate(10_860_000)), 8);
        assert_eq!(m.streams(BitRate(5_430_000 / 2)), 34);
        let mut n = node(0);
        n.link = None;
        n.measured = Some(m);
        let p = plan(&n, BitRate(10_860_000), 40).unwrap();
        assert_eq!(
            (p.bottleneck, p.streams_per_node, p.nodes),
            (Some(Resource::Bench), Some(8), Some(5))
        );
        // A model that is tighter wins.
        n.cpu = Some(MbPerSec(8.0));
        assert_eq!(plan(&n, BitRate(10_860_000), 40).unwrap().bottleneck, Some(Resource::Cpu));
    }

    #[test]
    fn a_model_is_recovered_from_its_profile() {
        let m = DiskModel::new(Duration::from_millis(8), 50e6);
        let fit = fit_model(&m.read_profile().unwrap()).unwrap();
        assert!((fit.mean_seek.as_secs_f64() - 0.008).abs() < 1e-6, "{fit:?}");
        assert!((fit.read_rate / 50e6 - 1.0).abs() < 1e-6, "{fit:?}");
    }

    #[test]
    fn the_scheduler_agrees_with_admission_on_a_model_disk() {
        let m = DiskModel::new(Duration::from_millis(5), 40.0 * 1_048_576.0);
        let cfg = AdmissionConfig::default();
        let rate = BitRate(20_000_000);
        let search = SchedSearch {
            admission: cfg.clone(),
            block: Bytes::mib(1),
            rate,
            spacing: Duration::from_millis(200),
            horizon: Duration::from_secs(20),
            limit: 40,
            seed: 1,
        };
        let r = sched_max_n(&[m], &search).unwrap();
        let admitted = disk_streams(&[m.read_profile().unwrap()], &cfg, Bytes::mib(1), rate);
        assert_eq!(r.admitted as u64, admitted);
        // Admission keeps 10 % for non-real-time IO: what it admits runs without a miss.
        assert!(r.max_n >= r.admitted && r.max_n > 0, "{r:?}");
        assert!(!r.runs.is_empty());
    }
}
