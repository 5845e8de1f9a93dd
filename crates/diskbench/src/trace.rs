//! VBR traces from a real clip: when each block of a VBR stream is due (XTREAM §3: VBR dummy
//! streams "by a real clip's trace"; issue 4 part 6).
//!
//! Why: a synthetic trace (`isochron_sched::workload::synthetic_vbr_trace`) has whatever
//! burstiness it was given; a real encoder's output has the burstiness admission has to live
//! with. [`ClipTrace::from_ts_file`] scans an MPEG-TS file with `isochron_media::TsScanner` (the
//! ingest's own pass 1) and keeps the cumulative bytes of its payload units against their send
//! times (PCR-interpolated). [`ClipTrace::block_send_times`] then cuts that curve into blocks,
//! interpolating linearly between units and looping the clip as often as needed.
//!
//! A clip has one mean rate; experiments need others. Two ways to scale ([`TraceScale`]):
//!
//! * [`TraceScale::Bytes`] (default): keep the clip's timeline and multiply every unit's size by
//!   `rate / clip_rate` (equivalently, cut the clip into blocks of `block · clip_rate / rate`
//!   bytes). The rate's variation over one second, which is what peak-rate admission and the
//!   double buffer see, is the clip's own.
//! * [`TraceScale::Time`]: cut the clip into blocks of the block size and stretch (or squeeze)
//!   its timeline to the rate. At rates far above the clip's, a second of the stream is many
//!   seconds of the clip and the variation averages out (nearly CBR).
//!
//! Not here: turning a trace into streams (`isochron_sched::workload::generate` does, each
//! stream from its own random point of the trace).

use std::fs::File;
use std::io::Read as _;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use isochron_base::{BitRate, Bytes, MediaTime};
use isochron_media::TsScanner;

/// How a clip's trace is scaled to another mean rate (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TraceScale {
    /// Scale the bytes, keep the timeline.
    #[default]
    Bytes,
    /// Scale the timeline, keep the bytes.
    Time,
}

impl std::str::FromStr for TraceScale {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<Self> {
        match s {
            "bytes" => Ok(Self::Bytes),
            "time" => Ok(Self::Time),
            _ => bail!("unknown trace scaling {s:?}: expected bytes or time"),
        }
    }
}

/// A clip's payload bytes against time.
#[derive(Clone, Debug, PartialEq)]
pub struct ClipTrace {
    /// Send time of each unit, seconds from the first, non-decreasing.
    times: Vec<f64>,
    /// Bytes before each unit; one more entry than `times` (the total last).
    cum: Vec<f64>,
    /// The clip's length: the last unit's time plus the mean gap between units.
    duration: f64,
}

impl ClipTrace {
    /// The trace of the MPEG-TS file at `path` (scanned, not stored).
    pub fn from_ts_file(path: &Path) -> anyhow::Result<Self> {
        let mut f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        let mut scanner = TsScanner::new();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = f.read(&mut buf).with_context(|| format!("reading {}", path.display()))?;
            if n == 0 {
                break;
            }
            scanner.push(&buf[..n]).with_context(|| format!("scanning {}", path.display()))?;
        }
        let index = scanner.finish().with_context(|| format!("scanning {}", path.display()))?;
        let units: Vec<(f64, u64)> =
            index.units().map(|u| (u.send_time.as_secs_f64(), u.byte_len().0)).collect();
        Self::from_units(&units).with_context(|| format!("{}", path.display()))
    }

    /// A trace from `(send time in seconds, bytes)` per unit, in order.
    pub fn from_units(units: &[(f64, u64)]) -> anyhow::Result<Self> {
        if units.len() < 2 {
            bail!("the clip has fewer than two payload units");
        }
        let t0 = units[0].0;
        let mut times = Vec::with_capacity(units.len());
        let mut cum = Vec::with_capacity(units.len() + 1);
        let mut total = 0.0;
        let mut last = 0.0f64;
        for (t, bytes) in units {
            // Discontinuities can step time back: keep it non-decreasing.
            last = last.max(t - t0);
            times.push(last);
            cum.push(total);
            total += *bytes as f64;
        }
        cum.push(total);
        let span = times[times.len() - 1];
        if span <= 0.0 {
            bail!("the clip's units all have the same send time");
        }
        let duration = span + span / (times.len() - 1) as f64;
        Ok(Self { times, cum, duration })
    }

    /// The clip's length.
    #[must_use]
    pub fn duration_s(&self) -> f64 {
        self.duration
    }

    /// The clip's payload bytes.
    #[must_use]
    pub fn bytes(&self) -> Bytes {
        Bytes(self.cum[self.cum.len() - 1] as u64)
    }

    /// The clip's mean rate.
    #[must_use]
    pub fn mean_rate(&self) -> BitRate {
        BitRate::from_bytes_per(self.bytes(), self.duration)
    }

    /// The time (seconds) at which the clip, looped, has sent `bytes` bytes.
    fn time_at(&self, bytes: f64) -> f64 {
        let total = self.cum[self.cum.len() - 1];
        let loops = (bytes / total).floor();
        let rest = bytes - loops * total;
        // Unit k is sent over [times[k], times[k+1]) (the last one until `duration`).
        let k =
            self.cum.partition_point(|c| *c <= rest).saturating_sub(1).min(self.times.len() - 1);
        let (t_a, t_b) = (self.times[k], self.times.get(k + 1).copied().unwrap_or(self.duration));
        let (c_a, c_b) = (self.cum[k], self.cum[k + 1]);
        let frac = if c_b > c_a { (rest - c_a) / (c_b - c_a) } else { 0.0 };
        loops * self.duration + t_a + frac * (t_b - t_a)
    }

    /// Send times of consecutive blocks of `clip_bytes` bytes of the clip (looped), at least
    /// `min_blocks` of them and at least one whole pass of the clip.
    #[must_use]
    pub fn block_send_times(&self, clip_bytes: f64, min_blocks: usize) -> Vec<MediaTime> {
        let total = self.cum[self.cum.len() - 1];
        let clip_bytes = clip_bytes.max(1.0);
        let per_pass = (total / clip_bytes).ceil() as usize;
        let n = min_blocks.max(per_pass).max(2);
        (0..n).map(|m| MediaTime::from_secs_f64(self.time_at(m as f64 * clip_bytes))).collect()
    }

    /// The trace for streams of `block_size` blocks at mean rate `rate`, scaled as `scale` says:
    /// per-block send times for `isochron_sched::workload::WorkloadSpec::trace`.
    #[must_use]
    pub fn trace_for(
        &self,
        scale: TraceScale,
        block_size: Bytes,
        rate: BitRate,
    ) -> Arc<[MediaTime]> {
        let clip_rate = self.mean_rate().bytes_per_sec().max(1.0);
        let clip_bytes = match scale {
            TraceScale::Bytes => block_size.0 as f64 * clip_rate / rate.bytes_per_sec().max(1.0),
            TraceScale::Time => block_size.0 as f64,
        };
        self.block_send_times(clip_bytes, 64).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clip of 20 units of 1000 B, 10 ms apart for the first ten and 30 ms for the rest.
    fn clip() -> ClipTrace {
        let mut t = 0.0;
        let units: Vec<(f64, u64)> = (0..20)
            .map(|k| {
                let u = (t, 1000);
                t += if k < 10 { 0.01 } else { 0.03 };
                u
            })
            .collect();
        ClipTrace::from_units(&units).unwrap()
    }

    #[test]
    fn blocks_follow_the_cumulative_curve_and_loop() {
        let c = clip();
        // Units at 0, .01, …, .09 (first ten), .10, .13, …, .37; duration .37 + .37/19.
        assert!((c.duration_s() - (0.37 + 0.37 / 19.0)).abs() < 1e-12);
        assert_eq!(c.bytes(), Bytes(20_000));
        // Blocks of 2500 B: 2.5 units each.
        let b = c.block_send_times(2500.0, 0);
        assert_eq!(b.len(), 8);
        let s: Vec<f64> = b.iter().map(|t| t.as_secs_f64()).collect();
        assert!((s[1] - 0.025).abs() < 1e-9, "{s:?}");
        assert!((s[2] - 0.05).abs() < 1e-9);
        // Block 4 starts at 10 000 B: unit 10, sent at 0.10.
        assert!((s[4] - 0.10).abs() < 1e-9);
        // Block 5 at 12 500 B: half-way through unit 12 (0.16 .. 0.19).
        assert!((s[5] - 0.175).abs() < 1e-9, "{s:?}");
        // Looping: block 8 of 20 blocks starts exactly one clip later.
        let b = c.block_send_times(2500.0, 20);
        let d = b[8].as_secs_f64() - b[0].as_secs_f64();
        assert!((d - c.duration_s()).abs() < 1e-9, "{d}");
        assert!(b.windows(2).all(|w| w[1] > w[0]));
    }

    #[test]
    fn scaling_by_bytes_keeps_the_timeline_and_by_time_keeps_the_blocks() {
        let c = clip();
        let rate = c.mean_rate();
        // Ten times the clip's rate, by bytes: blocks of a tenth of the block size in the clip.
        let ten = BitRate(rate.0 * 10);
        let by_bytes = c.trace_for(TraceScale::Bytes, Bytes(25_000), ten);
        assert!((by_bytes[1].as_secs_f64() - 0.025).abs() < 1e-6, "{:?}", &by_bytes[..3]);
        // By time: blocks of the block size, on the clip's own timeline (the workload stretches).
        let by_time = c.trace_for(TraceScale::Time, Bytes(2500), ten);
        assert!((by_time[1].as_secs_f64() - 0.025).abs() < 1e-9);
        assert_eq!("bytes".parse::<TraceScale>().unwrap(), TraceScale::Bytes);
        assert!("x".parse::<TraceScale>().is_err());
        assert!(ClipTrace::from_units(&[(0.0, 1)]).is_err());
    }
}
