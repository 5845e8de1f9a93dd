//! Disk profiles: throughput as a function of IO size, the input of admission control.
//!
//! XTREAM's admission controller predicts whether a cycle's IOs fit from a measured curve of disk
//! throughput against IO size (XTREAM §2.3, Fig. 3; Diskbench): reads of one size at random
//! positions, repeated, give a min, a mean and a max throughput per size. [`DiskProfile`] holds
//! those three curves at the measured sizes and interpolates between them (linearly in
//! `log(size)`, the axis Diskbench plots on); [`DiskModel`] produces the profile of an emulated
//! disk from Gennart's model (a seek-time distribution plus `size / rate`), so experiments run
//! on any machine and admission can be tested against a model whose answer is known
//! (`docs/design/scheduler.md`).
//!
//! Units: sizes are [`Bytes`], throughputs are bytes per second (`f64`). The profiler's file
//! form (`{"sizes":[…],"min_mib_s":[…],"mean_mib_s":[…],"max_mib_s":[…]}`) is in MiB/s:
//! [`DiskProfile::from_mib_s`] and [`DiskProfile::curve_mib_s`] convert. JSON itself is not
//! parsed here: this crate has no serde dependency, and the driver that reads the file (the
//! `profile-disk` command) owns the format.
//!
//! Not here: measuring a disk (that is IO: `isochron profile-disk` in the binary).

use std::fmt;
use std::time::Duration;

use isochron_base::Bytes;

/// Bytes in one MiB, as `f64`.
const MIB: f64 = 1_048_576.0;

/// Quantile of the seek-time distribution that the model's **min** curve uses: a read is this
/// slow or faster 99 % of the time (Diskbench's min throughput is a low percentile of the
/// measured throughputs; the disk profiler's min curve uses the same quantile by default).
pub const MIN_CURVE_SEEK_QUANTILE: f64 = 0.99;

/// Quantile of the seek-time distribution that the model's **max** curve uses (the fast end).
pub const MAX_CURVE_SEEK_QUANTILE: f64 = 0.01;

/// Which of a profile's three curves to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Curve {
    /// The lowest throughput measured at each size (a high percentile of IO time).
    Min,
    /// The mean throughput: size divided by the mean IO time.
    Mean,
    /// The highest throughput measured at each size.
    Max,
}

impl fmt::Display for Curve {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Min => "min",
            Self::Mean => "mean",
            Self::Max => "max",
        })
    }
}

/// Why a set of curves is not a usable profile.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ProfileError {
    /// No sizes were measured.
    #[error("disk profile has no sizes")]
    Empty,
    /// A curve does not have one value per size.
    #[error("disk profile: {curve} curve has {len} points for {sizes} sizes")]
    LengthMismatch {
        /// The curve at fault.
        curve: Curve,
        /// Its number of points.
        len: usize,
        /// The number of sizes.
        sizes: usize,
    },
    /// Sizes are not strictly increasing, or one is zero.
    #[error("disk profile: size {index} ({size} B) is not above the previous one ({prev} B)")]
    SizesNotIncreasing {
        /// Position of the offending size.
        index: usize,
        /// The offending size in bytes.
        size: u64,
        /// The size before it (0 for the first).
        prev: u64,
    },
    /// A throughput is zero, negative or not finite.
    #[error("disk profile: {curve} throughput at {size} B is {value} B/s")]
    BadThroughput {
        /// The curve at fault.
        curve: Curve,
        /// The size at fault, in bytes.
        size: u64,
        /// The value found.
        value: f64,
    },
    /// At some size the curves are out of order (`min ≤ mean ≤ max` must hold).
    #[error("disk profile at {size} B: min {min} ≤ mean {mean} ≤ max {max} B/s does not hold")]
    Unordered {
        /// The size at fault, in bytes.
        size: u64,
        /// Min throughput there.
        min: f64,
        /// Mean throughput there.
        mean: f64,
        /// Max throughput there.
        max: f64,
    },
}

/// Throughput against IO size: min, mean and max curves at measured sizes.
#[derive(Clone, Debug, PartialEq)]
pub struct DiskProfile {
    sizes: Vec<Bytes>,
    min: Vec<f64>,
    mean: Vec<f64>,
    max: Vec<f64>,
}

impl DiskProfile {
    /// A profile from curves in bytes per second, one value per size. Sizes must increase
    /// strictly; every value must be finite and positive, with `min ≤ mean ≤ max` at each size.
    pub fn new(
        sizes: Vec<Bytes>,
        min: Vec<f64>,
        mean: Vec<f64>,
        max: Vec<f64>,
    ) -> Result<Self, ProfileError> {
        if sizes.is_empty() {
            return Err(ProfileError::Empty);
        }
        for (curve, v) in [(Curve::Min, &min), (Curve::Mean, &mean), (Curve::Max, &max)] {
            if v.len() != sizes.len() {
                return Err(ProfileError::LengthMismatch {
                    curve,
                    len: v.len(),
                    sizes: sizes.len(),
                });
            }
        }
        let mut prev = 0;
        for (index, s) in sizes.iter().enumerate() {
            if s.0 <= prev {
                return Err(ProfileError::SizesNotIncreasing { index, size: s.0, prev });
            }
            prev = s.0;
        }
        for i in 0..sizes.len() {
            for (curve, value) in
                [(Curve::Min, min[i]), (Curve::Mean, mean[i]), (Curve::Max, max[i])]
            {
                if !(value.is_finite() && value > 0.0) {
                    return Err(ProfileError::BadThroughput { curve, size: sizes[i].0, value });
                }
            }
            if !(min[i] <= mean[i] && mean[i] <= max[i]) {
                return Err(ProfileError::Unordered {
                    size: sizes[i].0,
                    min: min[i],
                    mean: mean[i],
                    max: max[i],
                });
            }
        }
        Ok(Self { sizes, min, mean, max })
    }

    /// A profile from curves in MiB/s, the unit of the profiler's JSON file.
    pub fn from_mib_s(
        sizes: Vec<Bytes>,
        min_mib_s: &[f64],
        mean_mib_s: &[f64],
        max_mib_s: &[f64],
    ) -> Result<Self, ProfileError> {
        let conv = |v: &[f64]| v.iter().map(|x| x * MIB).collect();
        Self::new(sizes, conv(min_mib_s), conv(mean_mib_s), conv(max_mib_s))
    }

    /// The profile of an emulated disk with mean seek `mean_seek` and transfer rate `rate`
    /// (bytes/s), at the profiler's sizes ([`profiler_sizes`]). See [`DiskModel`]; a rate that is
    /// not finite and positive gives [`ProfileError::BadThroughput`].
    pub fn from_model(mean_seek: Duration, rate: f64) -> Result<Self, ProfileError> {
        DiskModel::new(mean_seek, rate).read_profile()
    }

    /// The measured sizes.
    #[must_use]
    pub fn sizes(&self) -> &[Bytes] {
        &self.sizes
    }

    /// One curve's values in bytes per second, one per size.
    #[must_use]
    pub fn curve(&self, curve: Curve) -> &[f64] {
        match curve {
            Curve::Min => &self.min,
            Curve::Mean => &self.mean,
            Curve::Max => &self.max,
        }
    }

    /// One curve's values in MiB/s (the profiler file's unit).
    #[must_use]
    pub fn curve_mib_s(&self, curve: Curve) -> Vec<f64> {
        self.curve(curve).iter().map(|v| v / MIB).collect()
    }

    /// Throughput in bytes per second of IOs of `size` on `curve`.
    ///
    /// Between two measured sizes the value is interpolated linearly in `log(size)`. Below the
    /// smallest size the IO *time* is taken as the smallest size's (access time dominates there),
    /// so throughput falls in proportion to size; above the largest size the throughput is the
    /// largest size's. Both extrapolations under-estimate a real disk, never over-estimate it.
    #[must_use]
    pub fn throughput(&self, size: Bytes, curve: Curve) -> f64 {
        let p = self.curve(curve);
        let first = self.sizes[0].0 as f64;
        let s = size.0 as f64;
        if s <= first {
            return p[0] * s / first;
        }
        let after = self.sizes.partition_point(|x| x.0 as f64 <= s);
        if after >= self.sizes.len() {
            return p[p.len() - 1];
        }
        // sizes[after - 1] <= s < sizes[after]; after >= 1 since s > sizes[0].
        let (a, b) = (self.sizes[after - 1].0 as f64, self.sizes[after].0 as f64);
        let x = (s.ln() - a.ln()) / (b.ln() - a.ln());
        p[after - 1] + x * (p[after] - p[after - 1])
    }

    /// Time one IO of `size` takes on `curve`: `size / throughput(size)`, and the smallest
    /// measured size's time for sizes below it (including zero).
    #[must_use]
    pub fn time_for(&self, size: Bytes, curve: Curve) -> Duration {
        let s = size.max(self.sizes[0]);
        Duration::from_secs_f64(s.0 as f64 / self.throughput(s, curve))
    }
}

/// The sizes `isochron profile-disk` measures: powers of two from 4 KiB to 8 MiB.
#[must_use]
pub fn profiler_sizes() -> Vec<Bytes> {
    (12..=23).map(|k| Bytes(1 << k)).collect()
}

/// Gennart's disk model, used to emulate a disk: one IO of `S` bytes takes `seek + S / rate`,
/// where `seek` follows the density `s(t) = 2/(3m) · (1 − t/(3m))` on `[0, 3m]` (mean `m`,
/// variance `m²/2`): short seeks are likelier than long ones, the longest is three times the mean.
///
/// Its CDF is `F(t) = 2u − u²` with `u = t/(3m)`, so the `p`-quantile is `3m·(1 − √(1 − p))`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DiskModel {
    /// Mean seek (access) time `m`.
    pub mean_seek: Duration,
    /// Sequential read rate, bytes per second.
    pub read_rate: f64,
    /// Sequential write rate, bytes per second.
    pub write_rate: f64,
}

impl DiskModel {
    /// A disk reading and writing at `rate` bytes per second.
    #[must_use]
    pub fn new(mean_seek: Duration, rate: f64) -> Self {
        Self { mean_seek, read_rate: rate, write_rate: rate }
    }

    /// The `p`-quantile of the seek time (`p` is clamped to `[0, 1]`).
    #[must_use]
    pub fn seek_quantile(&self, p: f64) -> Duration {
        let p = p.clamp(0.0, 1.0);
        self.mean_seek.mul_f64(3.0 * (1.0 - (1.0 - p).sqrt()))
    }

    /// A seek time drawn from the distribution, given a uniform sample `u` in `[0, 1)`
    /// (inverse-CDF sampling; the caller owns the random source).
    #[must_use]
    pub fn sample_seek(&self, u: f64) -> Duration {
        self.seek_quantile(u)
    }

    /// Time of one IO of `size` bytes at `rate` after a seek of `seek`.
    #[must_use]
    pub fn io_time(seek: Duration, size: Bytes, rate: f64) -> Duration {
        seek + Duration::from_secs_f64(size.0 as f64 / rate)
    }

    /// The read profile at the profiler's sizes: mean curve from the mean seek, min curve from
    /// the [`MIN_CURVE_SEEK_QUANTILE`] seek, max curve from the [`MAX_CURVE_SEEK_QUANTILE`] seek.
    pub fn read_profile(&self) -> Result<DiskProfile, ProfileError> {
        self.profile_at(&profiler_sizes(), self.read_rate)
    }

    /// The write profile, as [`Self::read_profile`] at the write rate.
    pub fn write_profile(&self) -> Result<DiskProfile, ProfileError> {
        self.profile_at(&profiler_sizes(), self.write_rate)
    }

    /// The profile at `sizes` for transfers at `rate`; errors as [`DiskProfile::new`] when
    /// `sizes` is empty or unordered or `rate` is not finite and positive.
    pub fn profile_at(&self, sizes: &[Bytes], rate: f64) -> Result<DiskProfile, ProfileError> {
        if !(rate.is_finite() && rate > 0.0) {
            let size = sizes.first().map_or(0, |s| s.0);
            return Err(ProfileError::BadThroughput { curve: Curve::Mean, size, value: rate });
        }
        let curve = |seek: Duration| -> Vec<f64> {
            sizes.iter().map(|s| s.0 as f64 / Self::io_time(seek, *s, rate).as_secs_f64()).collect()
        };
        let min = curve(self.seek_quantile(MIN_CURVE_SEEK_QUANTILE));
        let mean = curve(self.mean_seek);
        let max = curve(self.seek_quantile(MAX_CURVE_SEEK_QUANTILE));
        DiskProfile::new(sizes.to_vec(), min, mean, max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> DiskModel {
        DiskModel::new(Duration::from_millis(10), 4.0 * MIB)
    }

    #[test]
    fn seek_distribution_quantiles_and_mean() {
        let m = model();
        assert_eq!(m.seek_quantile(0.0), Duration::ZERO);
        assert_eq!(m.seek_quantile(1.0), Duration::from_millis(30));
        // p99: 3m(1 − √0.01) = 2.7m.
        let p99 = m.seek_quantile(0.99).as_secs_f64();
        assert!((p99 - 0.027).abs() < 1e-9, "{p99}");
        // The median solves 2u − u² = 1/2: u = 1 − √½.
        let med = m.seek_quantile(0.5).as_secs_f64();
        assert!((med - 0.03 * (1.0 - 0.5f64.sqrt())).abs() < 1e-9);
        // Mean of inverse-CDF samples on a fine grid ≈ m.
        let n = 100_000;
        let mean: f64 =
            (0..n).map(|i| m.sample_seek((i as f64 + 0.5) / n as f64).as_secs_f64()).sum::<f64>()
                / n as f64;
        assert!((mean - 0.010).abs() < 1e-6, "{mean}");
    }

    #[test]
    fn model_profile_matches_the_linear_model_at_measured_sizes() {
        let p = model().read_profile().unwrap();
        assert_eq!(p.sizes().len(), 12);
        let one_mib = Bytes::mib(1);
        // mean: 1 MiB / (10 ms + 250 ms).
        let mean = p.throughput(one_mib, Curve::Mean);
        assert!((mean - MIB / 0.26).abs() < 1e-6, "{mean}");
        let t = p.time_for(one_mib, Curve::Mean).as_secs_f64();
        assert!((t - 0.26).abs() < 1e-9);
        // min: seek at p99 = 27 ms.
        let t = p.time_for(one_mib, Curve::Min).as_secs_f64();
        assert!((t - 0.277).abs() < 1e-9, "{t}");
        // Curves are ordered and throughput grows with size.
        for c in [Curve::Min, Curve::Mean, Curve::Max] {
            assert!(p.curve(c).windows(2).all(|w| w[0] < w[1]), "{c} not increasing");
        }
        assert!(p.min.iter().zip(&p.mean).all(|(a, b)| a <= b));
        assert!(p.mean.iter().zip(&p.max).all(|(a, b)| a <= b));
    }

    #[test]
    fn interpolation_is_log_linear_and_extrapolation_conservative() {
        let p = DiskProfile::new(
            vec![Bytes(1000), Bytes(100_000)],
            vec![10.0, 1000.0],
            vec![20.0, 2000.0],
            vec![30.0, 3000.0],
        )
        .unwrap();
        // 10 000 is halfway in log between 1 000 and 100 000.
        assert!((p.throughput(Bytes(10_000), Curve::Mean) - 1010.0).abs() < 1e-9);
        assert_eq!(p.throughput(Bytes(1000), Curve::Min), 10.0);
        assert_eq!(p.throughput(Bytes(100_000), Curve::Max), 3000.0);
        // Below: same time as the smallest size. Above: flat throughput.
        assert!((p.throughput(Bytes(500), Curve::Mean) - 10.0).abs() < 1e-12);
        assert_eq!(p.time_for(Bytes(0), Curve::Mean), p.time_for(Bytes(1000), Curve::Mean));
        assert_eq!(p.throughput(Bytes(1_000_000), Curve::Mean), 2000.0);
        // Interpolated IO time grows with size on a model profile.
        let m = model().read_profile().unwrap();
        let mut last = Duration::ZERO;
        for k in 0..400u64 {
            let t = m.time_for(Bytes(4096 + k * 23_000), Curve::Mean);
            assert!(t >= last);
            last = t;
        }
    }

    #[test]
    fn interpolation_error_against_the_model_is_small() {
        // Between doublings, log-linear interpolation of S/(a + S/R) stays within a few per cent.
        let m = model();
        let p = m.read_profile().unwrap();
        for k in 0..200 {
            let s = Bytes((4096.0 * 2f64.powf(k as f64 * 11.0 / 200.0)) as u64);
            let exact = s.0 as f64 / DiskModel::io_time(m.mean_seek, s, m.read_rate).as_secs_f64();
            let got = p.throughput(s, Curve::Mean);
            assert!((got / exact - 1.0).abs() < 0.06, "{s}: {got} vs {exact}");
        }
    }

    #[test]
    fn invalid_profiles_are_named() {
        let e = DiskProfile::new(vec![], vec![], vec![], vec![]).unwrap_err();
        assert_eq!(e, ProfileError::Empty);
        let e =
            DiskProfile::new(vec![Bytes(2), Bytes(2)], vec![1.0; 2], vec![1.0; 2], vec![1.0; 2])
                .unwrap_err();
        assert!(matches!(e, ProfileError::SizesNotIncreasing { index: 1, .. }), "{e}");
        let e = DiskProfile::new(vec![Bytes(2)], vec![2.0], vec![1.0], vec![3.0]).unwrap_err();
        assert!(matches!(e, ProfileError::Unordered { .. }));
        let e = DiskProfile::new(vec![Bytes(2)], vec![0.0], vec![1.0], vec![3.0]).unwrap_err();
        assert!(e.to_string().contains("min throughput at 2 B is 0"), "{e}");
        let e = DiskProfile::new(vec![Bytes(2)], vec![1.0, 2.0], vec![1.0], vec![3.0]).unwrap_err();
        assert!(matches!(e, ProfileError::LengthMismatch { curve: Curve::Min, len: 2, sizes: 1 }));
    }

    #[test]
    fn model_with_a_bad_rate_is_an_error() {
        let e = DiskProfile::from_model(Duration::from_millis(10), 0.0).unwrap_err();
        assert!(matches!(e, ProfileError::BadThroughput { .. }), "{e}");
    }

    #[test]
    fn mib_s_round_trip() {
        let p = DiskProfile::from_mib_s(vec![Bytes::mib(1)], &[3.0], &[3.5], &[4.0]).unwrap();
        assert_eq!(p.throughput(Bytes::mib(1), Curve::Mean), 3.5 * MIB);
        assert_eq!(p.curve_mib_s(Curve::Max), vec![4.0]);
    }
}
