//! Assembling a [`MediaIndex`] from per-track sample lists, under the sample budget.
//!
//! Why one place: both parsers must enforce the same limits (a sample count bounded by the file
//! size, sample bytes inside the file), order samples the same way (decode time across tracks,
//! compared exactly), and compute the presentation duration the same way.

use std::cmp::Ordering;

use super::{
    ContainerError, ContainerKind, MAX_SAMPLES, MediaIndex, NANOS_PER_SECOND, Sample, SkippedTrack,
    Track,
};

/// The most samples a file of `file_len` bytes may hold: one per 8 bytes plus 1024, at most
/// [`MAX_SAMPLES`].
pub(crate) fn sample_limit(file_len: u64) -> u64 {
    (file_len / 8).saturating_add(1024).min(MAX_SAMPLES)
}

/// `t` ticks at `timescale` Hz in nanoseconds, rounded half away from zero, saturated.
pub(crate) fn ticks_to_ns(t: i64, timescale: u32) -> i64 {
    rescale(t, u64::from(NANOS_PER_SECOND), u64::from(timescale))
}

/// `t × num / den`, rounded to the nearest (halves away from zero), saturated to `i64`; 0 if
/// `den` is 0.
pub(crate) fn rescale(t: i64, num: u64, den: u64) -> i64 {
    if den == 0 {
        return 0;
    }
    let p = i128::from(t) * i128::from(num);
    let d = i128::from(den);
    let q = if p >= 0 { (p + d / 2) / d } else { (p - d / 2) / d };
    i64::try_from(q).unwrap_or(if q < 0 { i64::MIN } else { i64::MAX })
}

/// Compares `a / ta` with `b / tb` exactly (timescales are non-zero).
pub(crate) fn cmp_time(a: i64, ta: u32, b: i64, tb: u32) -> Ordering {
    (i128::from(a) * i128::from(tb)).cmp(&(i128::from(b) * i128::from(ta)))
}

/// Tracks and their samples as a parser finds them.
#[derive(Debug)]
pub(crate) struct IndexBuilder {
    file_len: u64,
    limit: u64,
    count: u64,
    pub(crate) tracks: Vec<Track>,
    /// Per track, in decode order.
    pub(crate) samples: Vec<Vec<Sample>>,
    pub(crate) skipped: Vec<SkippedTrack>,
}

impl IndexBuilder {
    /// An empty builder for a file of `file_len` bytes.
    pub(crate) fn new(file_len: u64) -> Self {
        Self {
            file_len,
            limit: sample_limit(file_len),
            count: 0,
            tracks: Vec::new(),
            samples: Vec::new(),
            skipped: Vec::new(),
        }
    }

    /// Adds a supported track; returns its index.
    pub(crate) fn add_track(&mut self, track: Track) -> Result<u16, ContainerError> {
        let index = u16::try_from(self.tracks.len()).map_err(|_| ContainerError::Malformed {
            what: "track list".to_owned(),
            offset: 0,
            detail: format!("more than {} supported tracks", u16::MAX),
        })?;
        self.tracks.push(track);
        self.samples.push(Vec::new());
        Ok(index)
    }

    /// Records a skipped track.
    pub(crate) fn skip(&mut self, id: u64, codec: impl Into<String>, reason: impl Into<String>) {
        self.skipped.push(SkippedTrack { id, codec: codec.into(), reason: reason.into() });
    }

    /// Fails if `n` more samples would exceed the limit.
    pub(crate) fn reserve(&mut self, n: u64) -> Result<(), ContainerError> {
        if self.count.saturating_add(n) > self.limit {
            return Err(ContainerError::TooManySamples {
                limit: self.limit,
                file_len: self.file_len,
            });
        }
        Ok(())
    }

    /// Appends a sample to its track (whose index is `sample.track`), checking the budget and
    /// that its bytes lie inside the file.
    pub(crate) fn push(&mut self, sample: Sample) -> Result<(), ContainerError> {
        let t = usize::from(sample.track);
        let Some(list) = self.samples.get_mut(t) else {
            return Ok(());
        };
        if self.count >= self.limit {
            return Err(ContainerError::TooManySamples {
                limit: self.limit,
                file_len: self.file_len,
            });
        }
        let end = sample.offset.checked_add(u64::from(sample.size));
        if end.is_none_or(|end| end > self.file_len) {
            return Err(ContainerError::SampleOutsideFile {
                track: self.tracks.get(t).map_or(0, |tr| tr.id),
                sample: list.len() as u64,
                offset: sample.offset,
                size: sample.size,
                file_len: self.file_len,
            });
        }
        if list.capacity() == list.len() {
            // Grow gently: the budget bounds the total, not each track.
            list.reserve(list.len().clamp(16, 1 << 20));
        }
        list.push(sample);
        self.count += 1;
        Ok(())
    }

    /// Sorts the samples into one decode-order list and computes the duration.
    pub(crate) fn finish(self, kind: ContainerKind) -> Result<MediaIndex, ContainerError> {
        if self.tracks.is_empty() {
            return Err(ContainerError::NoSupportedTrack { found: self.skipped });
        }
        let timescales: Vec<u32> = self.tracks.iter().map(|t| t.timescale.max(1)).collect();
        let mut samples = Vec::with_capacity(usize::try_from(self.count).unwrap_or(0));
        for list in self.samples {
            samples.extend(list);
        }
        let ts = |s: &Sample| timescales.get(usize::from(s.track)).copied().unwrap_or(1);
        // Stable: equal times keep track order, then order within the track.
        samples.sort_by(|a, b| cmp_time(a.dts, ts(a), b.dts, ts(b)));
        let duration_ns = samples
            .iter()
            .map(|s| ticks_to_ns(s.pts.saturating_add(i64::from(s.duration)), ts(s)))
            .max()
            .unwrap_or(0);
        Ok(MediaIndex {
            kind,
            tracks: self.tracks,
            samples,
            skipped: self.skipped,
            duration_ns: u64::try_from(duration_ns).unwrap_or(0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rescale_rounds_half_away_from_zero_and_saturates() {
        assert_eq!(ticks_to_ns(1, 3), 333_333_333);
        assert_eq!(ticks_to_ns(2, 3), 666_666_667);
        assert_eq!(ticks_to_ns(-2, 3), -666_666_667);
        assert_eq!(ticks_to_ns(-1024, 48_000), -21_333_333);
        assert_eq!(ticks_to_ns(1, 2_000_000_000), 1); // 0.5 ns rounds up
        assert_eq!(ticks_to_ns(-1, 2_000_000_000), -1);
        assert_eq!(ticks_to_ns(i64::MAX, 1), i64::MAX);
        assert_eq!(ticks_to_ns(i64::MIN, 1), i64::MIN);
        assert_eq!(rescale(5, 1, 0), 0);
    }

    #[test]
    fn compares_times_exactly() {
        // 1/3 s vs 333_333_333 ns: the ns value is smaller.
        assert_eq!(cmp_time(1, 3, 333_333_333, NANOS_PER_SECOND), Ordering::Greater);
        assert_eq!(cmp_time(1024, 48_000, 512, 24_000), Ordering::Equal);
        assert_eq!(cmp_time(i64::MAX, 1, i64::MAX, 2), Ordering::Greater);
    }

    #[test]
    fn limits() {
        assert_eq!(sample_limit(0), 1024);
        assert_eq!(sample_limit(8 << 40), MAX_SAMPLES);
        let mut b = IndexBuilder::new(100);
        assert!(b.reserve(1036).is_ok());
        assert!(matches!(b.reserve(1037), Err(ContainerError::TooManySamples { limit: 1036, .. })));
    }
}
