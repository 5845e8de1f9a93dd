//! Latency distributions, as the benches report them: nearest-rank quantiles of a set of
//! latencies in milliseconds. One type for `isochron bench` (PLAY → first RTP packet) and
//! `isochron bench-disk` (request → first block in memory), so their reports read alike.

use serde::Serialize;

/// A distribution of latencies (ms): how many, nearest-rank quantiles and the extremes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct LatencySummary {
    /// Values summarised.
    pub count: usize,
    /// Smallest, ms.
    pub min_ms: f64,
    /// Median, ms.
    pub p50_ms: f64,
    /// 90th percentile, ms.
    pub p90_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Largest, ms.
    pub max_ms: f64,
    /// Mean, ms.
    pub mean_ms: f64,
}

impl LatencySummary {
    /// The summary of `values` (ms); `None` when there are none.
    #[must_use]
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Self> {
        let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        // Nearest rank: the smallest value with at least q of the values at or below it.
        let q = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        Some(Self {
            count: v.len(),
            min_ms: v[0],
            p50_ms: q(0.5),
            p90_ms: q(0.9),
            p99_ms: q(0.99),
            max_ms: v[v.len() - 1],
            mean_ms: v.iter().sum::<f64>() / v.len() as f64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_summary_uses_nearest_rank() {
        assert_eq!(LatencySummary::of([]), None);
        let s = LatencySummary::of((1..=200).rev().map(f64::from)).unwrap();
        assert_eq!((s.count, s.min_ms, s.max_ms), (200, 1.0, 200.0));
        assert_eq!((s.p50_ms, s.p90_ms, s.p99_ms), (100.0, 180.0, 198.0));
        assert!((s.mean_ms - 100.5).abs() < 1e-9);
        let one = LatencySummary::of([7.0, f64::NAN]).unwrap();
        assert_eq!((one.count, one.p50_ms, one.p99_ms), (1, 7.0, 7.0));
    }
}
