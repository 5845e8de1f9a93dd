//! Admission control from disk profiles (XTREAM §2.3, Eq. 1–3), generalised to blocks placed
//! pseudo-randomly over many disks (`docs/design/scheduler.md`, *Admission*).
//!
//! # XTREAM's test
//! With `n` streams each reading `BR_i · T` bytes per cycle of length `T`, the average IO size is
//! `S_avg = T · ΣBR / n` (Eq. 2) and the stream set fits iff `P(S_avg) > ΣBR` (Eq. 3), where
//! `P(S)` is the profiled throughput of IOs of size `S`. Under the linear disk model
//! (`time(S) = T_a + S/R`) that is exact: the cycle takes `Σ(T_a + S_i/R) = n·(T_a + S_avg/R)
//! = n·S_avg / P(S_avg) = T·ΣBR / P(S_avg)`, which is at most `T` iff `P(S_avg) ≥ ΣBR`.
//! [`xtream_fits`] is that test, literally, with the non-real-time reserve `f`:
//! `(1 − f)·P(S_avg) ≥ ΣBR`.
//!
//! # isochron's generalisation
//! isochron reads fixed-size blocks (one IO per block, 1 MiB by default) spread over `D` disks.
//! Stream `i`, at rate `BR_i` (bytes/s) with blocks of `B_i` bytes, needs `r_i = BR_i·T / B_i`
//! block reads per cycle on average; a fraction `p_{i,d}` of its blocks is on disk `d` (its
//! object's actual placement, or `1/D` for a recording whose blocks are not placed yet). Each
//! block read on `d` takes `t_d = B_i / P_d(B_i)` on the policy's curve of `d`'s profile.
//!
//! Which disk each of a cycle's blocks is on is random (Yima placement), so the per-disk work is
//! a sum of Bernoulli trials: its mean and variance (in seconds per cycle) are
//!
//! ```text
//! μ_d  = Σ_i r_i · p_{i,d} · t_{i,d}
//! σ²_d = Σ_i r_i · p_{i,d} · (1 − p_{i,d}) · t_{i,d}²
//! ```
//!
//! and the set is admitted iff, on every disk, the work fits in the real-time part of the cycle
//! with probability at least `1 − ε` under the normal approximation of that binomial sum:
//!
//! ```text
//! μ_d + z_{1−ε} · σ_d / √w  ≤  (1 − f) · T          for every disk d
//! ```
//!
//! `z_{1−ε}` is the standard normal quantile ([`normal_quantile`]); `ε` is
//! [`AdmissionConfig::overflow_probability`]; `w` is [`AdmissionConfig::window_cycles`] (default
//! 2): because every block is read at least a cycle before it is due, one cycle's overflow spills
//! into the next without a miss, so what must fit with probability `1 − ε` is the work of `w`
//! consecutive cycles in `w·(1 − f)·T` (mean `w·μ`, variance `w·σ²`). `w = 1` is the strict
//! per-cycle test. On one disk (`p = 1`, `σ = 0`) this is exactly
//! Eq. 3 with `S_avg = B` (every IO is one block): `ΣBR ≤ (1 − f)·P(B)`. Writes (recording,
//! issue 4 part 5) add their own terms with the disk's *write* profile, which is the mixed
//! condition `ΣBR_r / P_r + ΣBR_w / P_w ≤ 1 − f` in time form.
//!
//! The variance term covers the imbalance of random placement only. Two other sources of
//! variation are not in the test: which cycle a slow stream's next block falls in (a 250 kb/s
//! stream reads a 1 MiB block every 33 s), and random seek times. Both average out over the
//! double buffer's one-cycle slack; the virtual-time harness (`sim`) measures what is left.
//!
//! Policies (XTREAM §3.3, Adm1–Adm3): [`AdmissionPolicy::Conservative`] uses the min curve and
//! peak rates; [`AdmissionPolicy::Aggressive`] the mean curve and peak rates;
//! [`AdmissionPolicy::AggressiveAvg`] the mean curve and average rates; [`AdmissionPolicy::Off`]
//! admits everything (overload experiments) but still accounts the load.
//!
//! Decisions are values ([`Decision`]), never errors. Not here: other resources (NIC, CPU,
//! memory), which the server checks itself.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use isochron_base::{BitRate, Bytes, DiskId, StreamId};

use crate::plan::ObjectPlan;
use crate::profile::{Curve, DiskProfile};

/// How strictly new streams are admitted (`--admission`, TOML `admission`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum AdmissionPolicy {
    /// Min curve, peak rates: XTREAM's Adm1, the strongest guarantee.
    Conservative,
    /// Mean curve, peak rates: XTREAM's Adm2.
    #[default]
    Aggressive,
    /// Mean curve, average rates: XTREAM's Adm3, the most streams, the least guarantee for VBR.
    AggressiveAvg,
    /// Admit everything (load is still accounted): for overload experiments.
    Off,
}

impl AdmissionPolicy {
    /// Every policy, in the order of the `--admission` help text.
    pub const ALL: [Self; 4] =
        [Self::Conservative, Self::Aggressive, Self::AggressiveAvg, Self::Off];

    /// The profile curve the policy predicts with (`Off` accounts with the mean curve).
    #[must_use]
    pub fn curve(self) -> Curve {
        match self {
            Self::Conservative => Curve::Min,
            Self::Aggressive | Self::AggressiveAvg | Self::Off => Curve::Mean,
        }
    }

    /// Whether the policy uses a stream's peak rate (otherwise its average rate).
    #[must_use]
    pub fn uses_peak_rate(self) -> bool {
        matches!(self, Self::Conservative | Self::Aggressive)
    }

    /// The name used by `--admission` and the config file.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Conservative => "conservative",
            Self::Aggressive => "aggressive",
            Self::AggressiveAvg => "aggressive-avg",
            Self::Off => "off",
        }
    }
}

impl fmt::Display for AdmissionPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An admission policy name that is not one of `conservative | aggressive | aggressive-avg | off`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown admission policy {0:?}: expected conservative, aggressive, aggressive-avg or off")]
pub struct ParsePolicyError(pub String);

impl FromStr for AdmissionPolicy {
    type Err = ParsePolicyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|p| p.as_str() == s).ok_or_else(|| ParsePolicyError(s.into()))
    }
}

/// Admission settings.
#[derive(Clone, Debug, PartialEq)]
pub struct AdmissionConfig {
    /// The policy. Default [`AdmissionPolicy::Aggressive`].
    pub policy: AdmissionPolicy,
    /// Cycle length `T` (config `cycle_ms`). Default 1 s.
    pub cycle: Duration,
    /// Share `f` of each cycle kept for non-real-time IO, in `[0, 1)`. Default 0.1.
    pub nrt_share: f64,
    /// Probability `ε` that a disk's real-time work overflows its share of a cycle because of
    /// random placement. Default 0.01 (`z ≈ 2.33`).
    pub overflow_probability: f64,
    /// Consecutive cycles `w` whose work the placement test bounds together: the double buffer
    /// reads every block at least one cycle early, so a cycle that overflows spills into the
    /// next without a miss, and what must fit is the work of `w` cycles in `w·(1 − f)·T`. The
    /// variance of that sum is `w·σ²`, so the test is `μ + z·σ/√w ≤ (1 − f)·T`. Default 2;
    /// 1 is the strict per-cycle test.
    pub window_cycles: u32,
    /// The node's network egress for streams (config `sched.egress_mbps`), or `None` for no
    /// limit: a played stream also needs its rate on the node's link, which no disk test
    /// sees. Each read stream counts the rate the policy uses times its share of the bytes
    /// this node sends (its part on this node's disks); recordings count none. Default `None`.
    pub egress: Option<BitRate>,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        Self {
            policy: AdmissionPolicy::Aggressive,
            cycle: Duration::from_secs(1),
            nrt_share: 0.1,
            overflow_probability: 0.01,
            window_cycles: 2,
            egress: None,
        }
    }
}

/// Whether a stream reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Playback: block reads.
    Read,
    /// Recording: block writes.
    Write,
}

/// Where a stream's blocks are.
#[derive(Clone, Debug, PartialEq)]
pub enum Placement {
    /// Spread evenly over every profiled disk (a recording: its blocks are placed as written).
    Uniform,
    /// The fraction of the stream's bytes on each disk (fractions are normalised to sum to 1).
    Shares(Vec<(DiskId, f64)>),
    /// The fraction of the stream's bytes on each of *these* disks, as given (not normalised):
    /// a cluster node's share of a stream whose other blocks other nodes read.
    Part(Vec<(DiskId, f64)>),
}

/// What one stream asks of the disks.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamDemand {
    /// Read or write.
    pub direction: Direction,
    /// Mean rate.
    pub avg_bitrate: BitRate,
    /// Peak rate.
    pub peak_bitrate: BitRate,
    /// Size of one IO (the stream's mean block size).
    pub block_size: Bytes,
    /// Which disks hold its blocks.
    pub placement: Placement,
}

impl StreamDemand {
    /// The demand of playing `plan`: its mean block size and its bytes per disk.
    #[must_use]
    pub fn read(plan: &ObjectPlan, avg_bitrate: BitRate, peak_bitrate: BitRate) -> Self {
        let mut per_disk: BTreeMap<DiskId, u64> = BTreeMap::new();
        let mut total = 0u64;
        for b in &plan.blocks {
            *per_disk.entry(b.disk).or_default() += b.len.0;
            total += b.len.0;
        }
        let n = plan.blocks.len().max(1) as u64;
        let shares = per_disk
            .into_iter()
            .map(|(d, bytes)| (d, if total == 0 { 0.0 } else { bytes as f64 / total as f64 }))
            .collect();
        Self {
            direction: Direction::Read,
            avg_bitrate,
            peak_bitrate,
            block_size: Bytes(total / n),
            placement: Placement::Shares(shares),
        }
    }

    /// The demand of this node's share of playing `plan`: the part of the object's bytes on the
    /// disks in `local`, with the fractions of the whole (so a node with a third of the blocks is
    /// charged a third of the rate, with the variance of a third).
    #[must_use]
    pub fn read_part(
        plan: &ObjectPlan,
        avg_bitrate: BitRate,
        peak_bitrate: BitRate,
        local: &BTreeSet<DiskId>,
    ) -> Self {
        let mut d = Self::read(plan, avg_bitrate, peak_bitrate);
        if let Placement::Shares(v) = d.placement {
            d.placement =
                Placement::Part(v.into_iter().filter(|(d, _)| local.contains(d)).collect());
        }
        d
    }

    /// The demand of a recording at the given rates, written in blocks of `block_size` placed
    /// evenly over the disks.
    #[must_use]
    pub fn write(avg_bitrate: BitRate, peak_bitrate: BitRate, block_size: Bytes) -> Self {
        Self {
            direction: Direction::Write,
            avg_bitrate,
            peak_bitrate,
            block_size,
            placement: Placement::Uniform,
        }
    }
}

/// The outcome of an admission request: a decision, not an error.
#[derive(Clone, Debug, PartialEq)]
#[must_use]
pub enum Decision {
    /// The stream may run.
    Admit,
    /// The stream may not run (RTSP 453 Not Enough Bandwidth).
    Reject(Refusal),
}

impl Decision {
    /// Whether the stream was admitted.
    #[must_use]
    pub fn is_admit(&self) -> bool {
        matches!(self, Self::Admit)
    }
}

/// Why a stream was not admitted.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Refusal {
    /// Some disk would be over its real-time share of the cycle.
    Bandwidth(Overload),
    /// A disk holding the stream's blocks has no profile to predict it with.
    NoProfile {
        /// The disk.
        disk: DiskId,
    },
    /// There is no profiled disk to place a recording on.
    NoDisks,
    /// The configured stream limit is reached.
    TooManyStreams {
        /// The limit.
        limit: usize,
    },
    /// A stream with this id is already open.
    DuplicateStream,
    /// The node's network egress would be over its limit.
    Egress(EgressOverload),
}

impl Refusal {
    /// Every [`Refusal::kind`], in name order.
    pub const KINDS: [&'static str; 6] =
        ["bandwidth", "duplicate_stream", "egress", "no_disks", "no_profile", "too_many_streams"];

    /// A short, stable name for the kind of refusal (`bandwidth`, `no_profile`, `no_disks`,
    /// `too_many_streams`, `duplicate_stream`, `egress`): a metrics label and an API field, where the
    /// [`Display`](fmt::Display) text carries the numbers.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Bandwidth(_) => "bandwidth",
            Self::NoProfile { .. } => "no_profile",
            Self::NoDisks => "no_disks",
            Self::TooManyStreams { .. } => "too_many_streams",
            Self::DuplicateStream => "duplicate_stream",
            Self::Egress(_) => "egress",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Bandwidth(o) => o.fmt(f),
            Self::NoProfile { disk } => write!(f, "disk {disk} has no profile"),
            Self::NoDisks => f.write_str("no profiled disk to record on"),
            Self::TooManyStreams { limit } => write!(f, "stream limit of {limit} reached"),
            Self::DuplicateStream => f.write_str("stream id already open"),
            Self::Egress(o) => o.fmt(f),
        }
    }
}

/// The node's egress with a new stream against its limit.
#[derive(Clone, Debug, PartialEq)]
pub struct EgressOverload {
    /// What the new stream would send from this node.
    pub needed: BitRate,
    /// What the streams admitted send.
    pub admitted: BitRate,
    /// The limit (`sched.egress_mbps`).
    pub limit: BitRate,
}

impl fmt::Display for EgressOverload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "not enough network egress: {} admitted + {} for this stream is over the node's {}",
            self.admitted, self.needed, self.limit
        )
    }
}

/// The disks a stream would overload, with the numbers.
#[derive(Clone, Debug, PartialEq)]
pub struct Overload {
    /// The policy that decided.
    pub policy: AdmissionPolicy,
    /// Every disk over its share, by disk id.
    pub disks: Vec<DiskOverload>,
}

impl fmt::Display for Overload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not enough disk bandwidth ({} admission):", self.policy)?;
        for d in &self.disks {
            write!(f, " {d};")?;
        }
        Ok(())
    }
}

/// One disk's predicted real-time work per cycle against what it has.
#[derive(Clone, Debug, PartialEq)]
pub struct DiskOverload {
    /// The disk.
    pub disk: DiskId,
    /// Predicted work per cycle with the new stream, `μ + z·σ`.
    pub needed: Duration,
    /// The real-time share of the cycle, `(1 − f)·T`.
    pub available: Duration,
    /// Expected block IOs per cycle with the new stream.
    pub ios_per_cycle: f64,
}

impl fmt::Display for DiskOverload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "disk {} needs {:.1} ms of {:.1} ms per cycle ({:.2} IOs)",
            self.disk,
            self.needed.as_secs_f64() * 1e3,
            self.available.as_secs_f64() * 1e3,
            self.ios_per_cycle
        )
    }
}

/// The real-time load admitted on one disk.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DiskLoad {
    /// Expected work per cycle `μ`, seconds.
    pub mean_s: f64,
    /// Variance of the work per cycle `σ²`, seconds².
    pub var_s2: f64,
    /// Expected block IOs per cycle.
    pub ios: f64,
}

impl DiskLoad {
    /// `μ + z·σ`, seconds.
    #[must_use]
    pub fn needed_s(&self, z: f64) -> f64 {
        self.mean_s + z * self.var_s2.max(0.0).sqrt()
    }

    fn add(&mut self, o: &Self) {
        self.mean_s += o.mean_s;
        self.var_s2 += o.var_s2;
        self.ios += o.ios;
    }

    fn sub(&mut self, o: &Self) {
        self.mean_s = (self.mean_s - o.mean_s).max(0.0);
        self.var_s2 = (self.var_s2 - o.var_s2).max(0.0);
        self.ios = (self.ios - o.ios).max(0.0);
    }
}

#[derive(Clone, Debug)]
struct DiskEntry {
    read: DiskProfile,
    write: DiskProfile,
    load: DiskLoad,
}

/// Decides whether streams fit and keeps the load of the admitted ones.
#[derive(Clone, Debug)]
pub struct AdmissionController {
    config: AdmissionConfig,
    z: f64,
    disks: BTreeMap<DiskId, DiskEntry>,
    streams: HashMap<StreamId, Admitted>,
    /// What the admitted streams send from this node, bits/s.
    egress_bps: f64,
}

/// What an admitted stream counts against the disks and the link.
#[derive(Clone, Debug)]
struct Admitted {
    per_disk: Vec<(DiskId, DiskLoad)>,
    egress_bps: f64,
}

impl AdmissionController {
    /// A controller for disks with the given read profiles (writes use the same profile until
    /// [`Self::set_write_profile`]).
    #[must_use]
    pub fn new(
        config: AdmissionConfig,
        profiles: impl IntoIterator<Item = (DiskId, DiskProfile)>,
    ) -> Self {
        let eps = config.overflow_probability.clamp(1e-12, 0.5);
        let window = f64::from(config.window_cycles.max(1));
        Self {
            z: normal_quantile(1.0 - eps) / window.sqrt(),
            disks: profiles
                .into_iter()
                .map(|(d, p)| {
                    (d, DiskEntry { write: p.clone(), read: p, load: DiskLoad::default() })
                })
                .collect(),
            config,
            streams: HashMap::new(),
            egress_bps: 0.0,
        }
    }

    /// Sets a disk's write profile (ignored for a disk without a read profile).
    pub fn set_write_profile(&mut self, disk: DiskId, profile: DiskProfile) {
        if let Some(e) = self.disks.get_mut(&disk) {
            e.write = profile;
        }
    }

    /// The settings.
    #[must_use]
    pub fn config(&self) -> &AdmissionConfig {
        &self.config
    }

    /// The factor of `σ` in use: `z_{1−ε} / √w`.
    #[must_use]
    pub fn z(&self) -> f64 {
        self.z
    }

    /// The profiled disks.
    pub fn disks(&self) -> impl Iterator<Item = DiskId> + '_ {
        self.disks.keys().copied()
    }

    /// The real-time share of a cycle, `(1 − f)·T`.
    #[must_use]
    pub fn available(&self) -> Duration {
        self.config.cycle.mul_f64((1.0 - self.config.nrt_share).clamp(0.0, 1.0))
    }

    /// The load admitted on `disk`.
    #[must_use]
    pub fn load(&self, disk: DiskId) -> Option<DiskLoad> {
        self.disks.get(&disk).map(|e| e.load)
    }

    /// `disk`'s predicted work per cycle `μ + z·σ` as a fraction of the cycle.
    #[must_use]
    pub fn utilisation(&self, disk: DiskId) -> Option<f64> {
        let e = self.disks.get(&disk)?;
        Some(e.load.needed_s(self.z) / self.config.cycle.as_secs_f64())
    }

    /// Number of streams admitted and not released.
    #[must_use]
    pub fn stream_count(&self) -> usize {
        self.streams.len()
    }

    /// A conservative (min-curve) estimate of one IO of `len` on `disk`, or `None` for a disk
    /// without a profile. The cycle scheduler sizes non-real-time IOs with it.
    #[must_use]
    pub fn estimate(&self, disk: DiskId, direction: Direction, len: Bytes) -> Option<Duration> {
        let e = self.disks.get(&disk)?;
        let p = match direction {
            Direction::Read => &e.read,
            Direction::Write => &e.write,
        };
        Some(p.time_for(len, Curve::Min))
    }

    /// Whether `demand` would fit next to the admitted streams, without admitting it.
    pub fn check(&self, demand: &StreamDemand) -> Decision {
        match self.demand_per_disk(demand) {
            Ok(per_disk) => self.decide(&per_disk, self.egress_of(demand)),
            Err(refusal) if self.config.policy == AdmissionPolicy::Off => {
                let _ = refusal;
                Decision::Admit
            }
            Err(refusal) => Decision::Reject(refusal),
        }
    }

    /// Admits `stream` if `demand` fits, and from then on counts its load until
    /// [`Self::release`]. A stream id already admitted is refused.
    pub fn admit(&mut self, stream: StreamId, demand: &StreamDemand) -> Decision {
        if self.streams.contains_key(&stream) {
            return Decision::Reject(Refusal::DuplicateStream);
        }
        let per_disk = match self.demand_per_disk(demand) {
            Ok(v) => v,
            // Off admits what it cannot account (unprofiled disks).
            Err(_) if self.config.policy == AdmissionPolicy::Off => Vec::new(),
            Err(refusal) => return Decision::Reject(refusal),
        };
        let egress_bps = self.egress_of(demand);
        let decision = self.decide(&per_disk, egress_bps);
        if decision.is_admit() {
            self.count(stream, Admitted { per_disk, egress_bps });
        }
        decision
    }

    /// What the admitted streams send from this node (see [`AdmissionConfig::egress`]).
    #[must_use]
    pub fn egress(&self) -> BitRate {
        BitRate(self.egress_bps.round() as u64)
    }

    /// Adds a disk that joined the store, or replaces a disk's profile (read and write).
    pub fn set_disk(&mut self, disk: DiskId, profile: DiskProfile) {
        match self.disks.get_mut(&disk) {
            Some(e) => {
                e.write = profile.clone();
                e.read = profile;
            }
            None => {
                let e =
                    DiskEntry { write: profile.clone(), read: profile, load: DiskLoad::default() };
                self.disks.insert(disk, e);
            }
        }
    }

    /// Forgets a retired disk. Streams' loads on it must have been re-accounted first
    /// ([`Self::reaccount`]).
    pub fn remove_disk(&mut self, disk: DiskId) {
        self.disks.remove(&disk);
    }

    /// Re-accounts an admitted stream whose blocks moved to other disks (a placement epoch flip),
    /// without a check: the stream is already playing and keeps its guarantee. Does nothing for a
    /// stream that is not admitted.
    pub fn reaccount(&mut self, stream: StreamId, demand: &StreamDemand) {
        if !self.release(stream) {
            return;
        }
        let per_disk = self.demand_per_disk(demand).unwrap_or_default();
        self.count(stream, Admitted { per_disk, egress_bps: self.egress_of(demand) });
    }

    /// Releases an admitted stream's load. Returns whether it was admitted.
    pub fn release(&mut self, stream: StreamId) -> bool {
        let Some(admitted) = self.streams.remove(&stream) else { return false };
        for (d, l) in &admitted.per_disk {
            if let Some(e) = self.disks.get_mut(d) {
                e.load.sub(l);
            }
        }
        self.egress_bps = (self.egress_bps - admitted.egress_bps).max(0.0);
        true
    }

    fn count(&mut self, stream: StreamId, admitted: Admitted) {
        for (d, l) in &admitted.per_disk {
            if let Some(e) = self.disks.get_mut(d) {
                e.load.add(l);
            }
        }
        self.egress_bps += admitted.egress_bps;
        self.streams.insert(stream, admitted);
    }

    /// The rate the policy counts for `demand`: its peak or its mean.
    fn rate_of(&self, demand: &StreamDemand) -> BitRate {
        if self.config.policy.uses_peak_rate() { demand.peak_bitrate } else { demand.avg_bitrate }
    }

    /// What `demand` sends from this node, bits/s: the rate the policy uses times the share of
    /// the stream's bytes on this node's disks (all of them but for a cluster node's part).
    fn egress_of(&self, demand: &StreamDemand) -> f64 {
        if demand.direction == Direction::Write {
            return 0.0;
        }
        let rate = self.rate_of(demand);
        let share = match &demand.placement {
            Placement::Part(v) => v.iter().map(|(_, s)| s.max(0.0)).sum::<f64>().min(1.0),
            Placement::Uniform | Placement::Shares(_) => 1.0,
        };
        rate.0 as f64 * share
    }

    fn decide(&self, per_disk: &[(DiskId, DiskLoad)], egress_bps: f64) -> Decision {
        if self.config.policy == AdmissionPolicy::Off {
            return Decision::Admit;
        }
        let available = self.available();
        let mut over = Vec::new();
        for (d, l) in per_disk {
            let Some(e) = self.disks.get(d) else { continue };
            let mut total = e.load;
            total.add(l);
            let needed = total.needed_s(self.z);
            // A small tolerance so that a set computed to fit exactly is not refused by rounding.
            if needed > available.as_secs_f64() * (1.0 + 1e-9) {
                over.push(DiskOverload {
                    disk: *d,
                    needed: Duration::from_secs_f64(needed.max(0.0)),
                    available,
                    ios_per_cycle: total.ios,
                });
            }
        }
        if !over.is_empty() {
            return Decision::Reject(Refusal::Bandwidth(Overload {
                policy: self.config.policy,
                disks: over,
            }));
        }
        match self.config.egress {
            // The same tolerance as the disks': a set that fits exactly is admitted.
            Some(limit) if self.egress_bps + egress_bps > limit.0 as f64 * (1.0 + 1e-9) => {
                Decision::Reject(Refusal::Egress(EgressOverload {
                    needed: BitRate(egress_bps.round() as u64),
                    admitted: self.egress(),
                    limit,
                }))
            }
            _ => Decision::Admit,
        }
    }

    /// The stream's expected work and variance on each disk it touches.
    fn demand_per_disk(&self, demand: &StreamDemand) -> Result<Vec<(DiskId, DiskLoad)>, Refusal> {
        let policy = self.config.policy;
        let rate = self.rate_of(demand);
        let block = demand.block_size.max(Bytes(1));
        let ios = rate.bytes_per_sec() * self.config.cycle.as_secs_f64() / block.0 as f64;
        let shares: Vec<(DiskId, f64)> = match &demand.placement {
            Placement::Uniform => {
                if self.disks.is_empty() {
                    return Err(Refusal::NoDisks);
                }
                let p = 1.0 / self.disks.len() as f64;
                self.disks.keys().map(|d| (*d, p)).collect()
            }
            Placement::Part(v) => v.iter().filter(|(_, s)| *s > 0.0).copied().collect(),
            Placement::Shares(v) => {
                let sum: f64 = v.iter().map(|(_, s)| s.max(0.0)).sum();
                let mut out = Vec::with_capacity(v.len());
                for (d, s) in v {
                    if *s <= 0.0 || sum <= 0.0 {
                        continue;
                    }
                    out.push((*d, s / sum));
                }
                out
            }
        };
        let mut per_disk = Vec::with_capacity(shares.len());
        for (d, p) in shares {
            let Some(e) = self.disks.get(&d) else {
                return Err(Refusal::NoProfile { disk: d });
            };
            let profile = match demand.direction {
                Direction::Read => &e.read,
                Direction::Write => &e.write,
            };
            let t = profile.time_for(block, policy.curve()).as_secs_f64();
            per_disk.push((
                d,
                DiskLoad { mean_s: ios * p * t, var_s2: ios * p * (1.0 - p) * t * t, ios: ios * p },
            ));
        }
        Ok(per_disk)
    }
}

/// XTREAM's test, literally (Eq. 2–3 with the non-real-time reserve): streams at `rates`
/// (bytes/s) each reading `rate · cycle` bytes per cycle fit on a disk with `profile` iff
/// `(1 − nrt_share) · P(S_avg) ≥ ΣBR`, with `S_avg = cycle · ΣBR / n`. An empty set fits.
#[must_use]
pub fn xtream_fits(
    profile: &DiskProfile,
    curve: Curve,
    cycle: Duration,
    rates: &[f64],
    nrt_share: f64,
) -> bool {
    if rates.is_empty() {
        return true;
    }
    let total: f64 = rates.iter().sum();
    let s_avg = cycle.as_secs_f64() * total / rates.len() as f64;
    (1.0 - nrt_share) * profile.throughput(Bytes(s_avg.round() as u64), curve) >= total
}

/// The standard normal quantile `Φ⁻¹(p)` for `p` in `(0, 1)` (Acklam's rational approximation,
/// relative error below 1.2·10⁻⁹); `±∞` at the ends, NaN outside.
#[must_use]
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    const LOW: f64 = 0.024_25;
    if p.is_nan() || !(0.0..=1.0).contains(&p) {
        return f64::NAN;
    }
    if p == 0.0 {
        return f64::NEG_INFINITY;
    }
    if p == 1.0 {
        return f64::INFINITY;
    }
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < LOW {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - LOW {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use isochron_base::{Gsn, MediaTime, ObjectId};
    use proptest::prelude::*;

    use super::*;
    use crate::plan::PlannedBlock;
    use crate::profile::DiskModel;

    const MIB: f64 = 1_048_576.0;

    fn disk() -> DiskModel {
        DiskModel::new(Duration::from_millis(10), 4.0 * MIB)
    }

    fn controller(policy: AdmissionPolicy, disks: u16, nrt_share: f64) -> AdmissionController {
        let p = disk().read_profile().unwrap();
        let config = AdmissionConfig { policy, nrt_share, ..AdmissionConfig::default() };
        AdmissionController::new(config, (0..disks).map(|d| (DiskId(d), p.clone())))
    }

    fn plan_on(disks: &[u16]) -> Arc<ObjectPlan> {
        Arc::new(ObjectPlan {
            object: ObjectId(1),
            blocks: disks
                .iter()
                .enumerate()
                .map(|(i, d)| PlannedBlock {
                    disk: DiskId(*d),
                    copies: isochron_base::Replicas::single(DiskId(*d)),
                    first_gsn: Gsn(i as u64),
                    first_send_time: MediaTime::from_nanos(i as u64),
                    len: Bytes::mib(1),
                })
                .collect(),
        })
    }

    /// Admits streams of one demand until the first refusal; returns how many fit.
    fn fill(c: &mut AdmissionController, demand: &StreamDemand) -> usize {
        (0..10_000).take_while(|i| c.admit(StreamId(*i), demand).is_admit()).count()
    }

    #[test]
    fn policy_names_round_trip() {
        for p in AdmissionPolicy::ALL {
            assert_eq!(p.to_string().parse::<AdmissionPolicy>(), Ok(p));
        }
        assert_eq!("aggressive-avg".parse(), Ok(AdmissionPolicy::AggressiveAvg));
        let e = "lax".parse::<AdmissionPolicy>().unwrap_err();
        assert!(e.to_string().contains("\"lax\""), "{e}");
    }

    #[test]
    fn normal_quantiles() {
        assert!(normal_quantile(0.5).abs() < 1e-12);
        assert!((normal_quantile(0.975) - 1.959_963_985).abs() < 1e-8);
        assert!((normal_quantile(0.99) - 2.326_347_874).abs() < 1e-8);
        assert!((normal_quantile(0.001) + 3.090_232_306).abs() < 1e-8);
        assert!(normal_quantile(1.0).is_infinite() && normal_quantile(-0.1).is_nan());
    }

    /// One disk, 1 MiB blocks, T = 1 s, f = 0.1: a block read takes 10 + 250 ms on the mean
    /// curve, so (1 − f)·T holds 0.9 / 0.26 = 3.46 blocks per cycle; a 1 Mb/s stream reads
    /// 125 000 / 1 048 576 = 0.1192 blocks per cycle. 29 streams need 0.899 s, 30 need 0.930 s.
    /// On the min curve (seek p99 = 27 ms) a read takes 0.277 s: 27 need 0.8916 s, 28 need 0.925 s.
    #[test]
    fn one_disk_cbr_hand_computed() {
        let demand = StreamDemand::read(&plan_on(&[0; 8]), BitRate(1_000_000), BitRate(1_000_000));
        assert_eq!(fill(&mut controller(AdmissionPolicy::Aggressive, 1, 0.1), &demand), 29);
        assert_eq!(fill(&mut controller(AdmissionPolicy::AggressiveAvg, 1, 0.1), &demand), 29);
        assert_eq!(fill(&mut controller(AdmissionPolicy::Conservative, 1, 0.1), &demand), 27);
        // No NRT reserve: 1.0 / 0.26 = 3.846 blocks → 32 streams (32·0.1192·0.26 = 0.992 s).
        assert_eq!(fill(&mut controller(AdmissionPolicy::Aggressive, 1, 0.0), &demand), 32);
        let mut off = controller(AdmissionPolicy::Off, 1, 0.1);
        assert_eq!(fill(&mut off, &demand), 10_000);
    }

    #[test]
    fn vbr_peak_vs_average() {
        // Average 1 Mb/s, peak 2 Mb/s: the peak policies count 2 Mb/s.
        let demand = StreamDemand::read(&plan_on(&[0; 8]), BitRate(1_000_000), BitRate(2_000_000));
        assert_eq!(fill(&mut controller(AdmissionPolicy::Aggressive, 1, 0.1), &demand), 14);
        assert_eq!(fill(&mut controller(AdmissionPolicy::AggressiveAvg, 1, 0.1), &demand), 29);
    }

    /// A 100 Mb/s egress admits 17 streams of 5.6 Mb/s (95.2 Mb/s) and refuses the 18th
    /// with the numbers, whatever the disks could do; a cluster node counts its part of a
    /// stream only; recordings send nothing; a release frees its rate.
    #[test]
    fn egress_limits_what_the_disks_would_admit() {
        let p = disk().read_profile().unwrap();
        let config = AdmissionConfig {
            policy: AdmissionPolicy::AggressiveAvg,
            nrt_share: 0.0,
            egress: Some(BitRate(100_000_000)),
            ..AdmissionConfig::default()
        };
        let mut c = AdmissionController::new(config, (0..16).map(|d| (DiskId(d), p.clone())));
        let demand = StreamDemand::read(
            &plan_on(&(0..16).collect::<Vec<_>>()),
            BitRate(5_600_000),
            BitRate(9_000_000),
        );
        assert_eq!(fill(&mut c, &demand), 17);
        assert_eq!(c.egress(), BitRate(95_200_000));
        let Decision::Reject(r @ Refusal::Egress(_)) = c.check(&demand) else { panic!() };
        assert_eq!(r.kind(), "egress");
        assert_eq!(
            r.to_string(),
            "not enough network egress: 95.20 Mb/s admitted + 5.60 Mb/s for this stream is \
             over the node's 100.00 Mb/s"
        );
        // A quarter of a stream's bytes on this node: a quarter of its rate leaves it.
        let part =
            StreamDemand { placement: Placement::Part(vec![(DiskId(0), 0.25)]), ..demand.clone() };
        assert_eq!(c.admit(StreamId(1000), &part), Decision::Admit);
        assert_eq!(c.egress(), BitRate(96_600_000));
        let write = StreamDemand { direction: Direction::Write, ..demand.clone() };
        assert_eq!(c.admit(StreamId(1001), &write), Decision::Admit);
        assert_eq!(c.egress(), BitRate(96_600_000));
        assert!(c.release(StreamId(0)) && c.release(StreamId(1000)));
        assert_eq!(c.egress(), BitRate(89_600_000));
        assert_eq!(c.check(&demand), Decision::Admit);
    }

    #[test]
    fn refusal_carries_the_numbers_and_release_frees() {
        let mut c = controller(AdmissionPolicy::Aggressive, 1, 0.1);
        let demand = StreamDemand::read(&plan_on(&[0; 8]), BitRate(1_000_000), BitRate(1_000_000));
        assert_eq!(fill(&mut c, &demand), 29);
        let Decision::Reject(Refusal::Bandwidth(o)) = c.check(&demand) else { panic!() };
        assert_eq!(o.disks.len(), 1);
        let d = &o.disks[0];
        assert_eq!(d.disk, DiskId(0));
        assert_eq!(d.available, Duration::from_millis(900));
        let want = 30.0 * 125_000.0 / MIB * 0.26;
        assert!((d.needed.as_secs_f64() - want).abs() < 1e-6, "{d}");
        assert!((d.ios_per_cycle - 30.0 * 125_000.0 / MIB).abs() < 1e-9);
        assert!(o.to_string().contains("disk 0 needs 929.8 ms of 900.0 ms"), "{o}");
        assert!(c.release(StreamId(3)));
        assert!(!c.release(StreamId(3)));
        assert_eq!(c.admit(StreamId(100), &demand), Decision::Admit);
        assert_eq!(c.admit(StreamId(100), &demand), Decision::Reject(Refusal::DuplicateStream));
    }

    /// Four disks, a stream at 1 MiB/s spread evenly: per disk r·p = 0.25 blocks per cycle,
    /// variance r·p·(1 − p)·t² = 0.1875·t². With n streams, μ = 0.25·n·t and
    /// σ = √(0.1875·n)·t; admitted while (0.25·n + 2.326·√(0.1875·n))·0.26 ≤ 0.9:
    /// n = 4 needs (1 + 2.015)·0.26 = 0.784 s, n = 5 needs (1.25 + 2.252)·0.26 = 0.911 s.
    #[test]
    fn many_disks_binomial_bound_hand_computed() {
        let p = disk().read_profile().unwrap();
        let strict = AdmissionConfig { window_cycles: 1, ..AdmissionConfig::default() };
        let mut c = AdmissionController::new(strict, (0..4).map(|d| (DiskId(d), p.clone())));
        let plan = plan_on(&[0, 1, 2, 3]);
        let rate = BitRate((MIB * 8.0) as u64);
        let demand = StreamDemand::read(&plan, rate, rate);
        let z = normal_quantile(0.99);
        let fits = |n: f64| (0.25 * n + z * (0.1875 * n).sqrt()) * 0.26 <= 0.9;
        let want = (1..100).take_while(|n| fits(*n as f64)).count();
        assert_eq!(want, 4);
        assert_eq!(fill(&mut c, &demand), want);
        // Over the default window of two cycles σ counts 1/√2: 0.25·n + 1.645·0.433·√n ≤ 3.46:
        // n = 6 needs (1.5 + 1.745)·0.26 = 0.844 s, n = 7 needs (1.75 + 1.885)·0.26 = 0.945 s.
        assert_eq!(fill(&mut controller(AdmissionPolicy::Aggressive, 4, 0.1), &demand), 6);
        // With ε = 0.5 (z = 0) the bound is the mean: 0.25·n·0.26 ≤ 0.9 → n ≤ 13.
        let cfg = AdmissionConfig { overflow_probability: 0.5, ..AdmissionConfig::default() };
        let mut c = AdmissionController::new(cfg, (0..4).map(|d| (DiskId(d), p.clone())));
        assert_eq!(fill(&mut c, &demand), 13);
    }

    #[test]
    fn unprofiled_disks_and_recordings() {
        let mut c = controller(AdmissionPolicy::Aggressive, 2, 0.1);
        let demand = StreamDemand::read(&plan_on(&[0, 5]), BitRate(1), BitRate(1));
        assert_eq!(
            c.admit(StreamId(1), &demand),
            Decision::Reject(Refusal::NoProfile { disk: DiskId(5) })
        );
        let mut off = controller(AdmissionPolicy::Off, 2, 0.1);
        assert_eq!(off.admit(StreamId(1), &demand), Decision::Admit);
        let none = AdmissionController::new(AdmissionConfig::default(), []);
        let w = StreamDemand::write(BitRate(1), BitRate(1), Bytes::mib(1));
        assert_eq!(none.check(&w), Decision::Reject(Refusal::NoDisks));
        // Mixed reads and writes share the disk: a write profile half as fast costs twice.
        let mut c = controller(AdmissionPolicy::Aggressive, 1, 0.1);
        let slow = DiskModel::new(Duration::from_millis(10), 2.0 * MIB).read_profile().unwrap();
        c.set_write_profile(DiskId(0), slow);
        let w = StreamDemand::write(BitRate(1_000_000), BitRate(1_000_000), Bytes::mib(1));
        // A write block takes 10 + 500 ms: 0.1192 · 0.51 = 0.0608 s per stream → 14 fit in 0.9 s.
        assert_eq!(fill(&mut c, &w), 14);
        let r = StreamDemand::read(&plan_on(&[0]), BitRate(1_000_000), BitRate(1_000_000));
        // 0.9 − 14·0.0608 = 0.0488 s left: one read (0.031 s) fits, a second does not.
        assert_eq!(c.admit(StreamId(1000), &r), Decision::Admit);
        assert!(!c.admit(StreamId(1001), &r).is_admit());
    }

    /// The XTREAM test on its own model: under `time(S) = T_a + S/R`, Eq. 2–3 with the exact
    /// `P` accept exactly the sets whose cycle `Σ(T_a + BR_i·T/R)` fits in `T`.
    #[test]
    fn s_avg_is_exact_under_the_linear_model_at_measured_sizes() {
        let m = disk();
        let p = m.read_profile().unwrap();
        // ΣBR = 4 MiB/s over 4 streams: S_avg = 1 MiB, a measured size.
        let rates = [0.5 * MIB, 1.0 * MIB, 1.5 * MIB, 1.0 * MIB];
        let cycle_time = |r: f64| 4.0 * 0.010 + rates.iter().sum::<f64>() / r;
        let fast = DiskModel::new(Duration::from_millis(10), 5.0 * MIB);
        let pf = fast.read_profile().unwrap();
        assert!(cycle_time(5.0 * MIB) <= 1.0);
        assert!(xtream_fits(&pf, Curve::Mean, Duration::from_secs(1), &rates, 0.0));
        let slow = DiskModel::new(Duration::from_millis(10), 4.1 * MIB);
        let ps = slow.read_profile().unwrap();
        assert!(cycle_time(4.1 * MIB) > 1.0);
        assert!(!xtream_fits(&ps, Curve::Mean, Duration::from_secs(1), &rates, 0.0));
        // On the 4 MiB/s disk: cycle 0.04 + 1.0 = 1.04 s: does not fit; P(1 MiB) = 3.85 MiB/s.
        assert!(!xtream_fits(&p, Curve::Mean, Duration::from_secs(1), &rates, 0.0));
        assert!(xtream_fits(&p, Curve::Mean, Duration::from_secs(1), &[], 0.0));
    }

    proptest! {
        /// Eq. 3 ⇔ the cycle fits, for any rates, when P is the exact model curve: a profile
        /// measured at S_avg itself.
        #[test]
        fn s_avg_is_exact_under_the_linear_model(
            rates_kib in proptest::collection::vec(16u32..2048, 1..40),
            seek_ms in 1u32..30,
            rate_mib in 2u32..200,
        ) {
            let rates: Vec<f64> = rates_kib.iter().map(|r| f64::from(*r) * 1024.0).collect();
            let m = DiskModel::new(Duration::from_millis(u64::from(seek_ms)), f64::from(rate_mib) * MIB);
            let total: f64 = rates.iter().sum();
            let s_avg = Bytes((total / rates.len() as f64).round() as u64);
            let p = m.profile_at(&[s_avg], m.read_rate).unwrap();
            let cycle: f64 = rates
                .iter()
                .map(|r| m.mean_seek.as_secs_f64() + r / m.read_rate)
                .sum();
            let fits = xtream_fits(&p, Curve::Mean, Duration::from_secs(1), &rates, 0.0);
            // Away from the boundary (rounding of S_avg to whole bytes), they agree.
            if (cycle - 1.0).abs() > 1e-6 {
                prop_assert_eq!(fits, cycle <= 1.0, "cycle {} s", cycle);
            }
        }

        /// The fixed-block controller on one disk is Eq. 3 with S_avg = B: it admits exactly
        /// while ΣBR ≤ (1 − f)·P(B).
        #[test]
        fn one_disk_controller_is_eq3_with_block_ios(
            rates_kbps in proptest::collection::vec(100u64..20_000, 1..60),
            nrt in 0u32..5,
        ) {
            let f = f64::from(nrt) * 0.1;
            let mut c = controller(AdmissionPolicy::AggressiveAvg, 1, f);
            let p = disk().read_profile().unwrap();
            let cap = (1.0 - f) * p.throughput(Bytes::mib(1), Curve::Mean);
            let plan = plan_on(&[0]);
            let mut sum = 0.0;
            for (i, k) in rates_kbps.iter().enumerate() {
                let br = BitRate(k * 1000);
                let d = c.admit(StreamId(i as u64), &StreamDemand::read(&plan, br, br));
                let would = sum + br.bytes_per_sec();
                if (would - cap).abs() > 1e-3 {
                    prop_assert_eq!(d.is_admit(), would <= cap);
                }
                if d.is_admit() {
                    sum = would;
                }
            }
        }
    }

    #[test]
    fn refusal_kinds_are_stable_labels() {
        let kinds = [
            Refusal::NoProfile { disk: DiskId(1) }.kind(),
            Refusal::NoDisks.kind(),
            Refusal::TooManyStreams { limit: 3 }.kind(),
            Refusal::DuplicateStream.kind(),
            Refusal::Bandwidth(Overload { policy: AdmissionPolicy::Off, disks: Vec::new() }).kind(),
            Refusal::Egress(EgressOverload {
                needed: BitRate(1),
                admitted: BitRate(2),
                limit: BitRate(2),
            })
            .kind(),
        ];
        assert_eq!(
            kinds,
            [
                "no_profile",
                "no_disks",
                "too_many_streams",
                "duplicate_stream",
                "bandwidth",
                "egress"
            ]
        );
        assert!(kinds.iter().all(|k| Refusal::KINDS.contains(k)));
    }
}
