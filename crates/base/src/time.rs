//! Time as the cores see it.
//!
//! [`Instant`] is a point on a driver's monotonic clock, in nanoseconds since an arbitrary epoch.
//! The server converts `std::time::Instant` to it at the edge; the simulator starts it at zero; a
//! test steps it by hand. Cores therefore never read a clock (moonfire-nvr's `Clocks`, quinn's
//! `now` arguments).
//!
//! [`MediaTime`] is a position on an object's own timeline: the send time of a packet relative to
//! the object's first PCR, in nanoseconds. It is what `npt` means in RTSP (RFC 2326 §3.6) for a
//! stored MPEG-TS object.

use std::fmt;
use std::ops::{Add, Sub};
use std::time::Duration;

/// A point in time on a monotonic clock, in nanoseconds since the clock's epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(u64);

impl Instant {
    /// The clock's epoch.
    pub const ZERO: Self = Self(0);

    /// The instant `nanos` nanoseconds after the epoch.
    #[must_use]
    pub const fn from_nanos(nanos: u64) -> Self {
        Self(nanos)
    }

    /// Nanoseconds since the epoch.
    #[must_use]
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// The time from `earlier` to `self`, or zero if `earlier` is later.
    #[must_use]
    pub fn saturating_duration_since(self, earlier: Self) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// `self - d`, or the epoch if that would be before it.
    #[must_use]
    pub fn saturating_sub(self, d: Duration) -> Self {
        Self(self.0.saturating_sub(duration_nanos(d)))
    }
}

impl Add<Duration> for Instant {
    type Output = Self;
    fn add(self, d: Duration) -> Self {
        Self(self.0.saturating_add(duration_nanos(d)))
    }
}

impl Sub for Instant {
    type Output = Duration;
    /// Saturating difference; see [`Instant::saturating_duration_since`].
    fn sub(self, earlier: Self) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

/// A position on an object's timeline, in nanoseconds from its first PCR.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MediaTime(u64);

impl MediaTime {
    /// The start of the object.
    pub const ZERO: Self = Self(0);

    /// The position `nanos` nanoseconds after the start.
    #[must_use]
    pub const fn from_nanos(nanos: u64) -> Self {
        Self(nanos)
    }

    /// Nanoseconds since the start.
    #[must_use]
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// The position `secs` seconds after the start; negative and non-finite values give zero.
    #[must_use]
    pub fn from_secs_f64(secs: f64) -> Self {
        if secs.is_finite() && secs > 0.0 { Self((secs * 1e9).round() as u64) } else { Self(0) }
    }

    /// Seconds since the start.
    #[must_use]
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// The position in ticks of the 90 kHz MPEG system clock (RFC 2250 §2 RTP timestamps),
    /// rounded to the nearest tick, so that `from_90khz(t).as_90khz() == t`.
    #[must_use]
    pub fn as_90khz(self) -> u64 {
        ((u128::from(self.0) * 90_000 + 500_000_000) / 1_000_000_000) as u64
    }

    /// The position `ticks` ticks of the 90 kHz clock after the start.
    #[must_use]
    pub fn from_90khz(ticks: u64) -> Self {
        Self((u128::from(ticks) * 1_000_000_000 / 90_000) as u64)
    }

    /// The duration from `earlier` to `self`, or zero if `earlier` is later.
    #[must_use]
    pub fn saturating_duration_since(self, earlier: Self) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for MediaTime {
    type Output = Self;
    fn add(self, d: Duration) -> Self {
        Self(self.0.saturating_add(duration_nanos(d)))
    }
}

impl fmt::Display for MediaTime {
    /// Seconds with millisecond precision, the form RTSP's `npt` uses.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:03}", self.0 / 1_000_000_000, (self.0 / 1_000_000) % 1000)
    }
}

fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A pacing speed: how fast a stream's media clock runs against the wall clock, in parts per
/// million (1 000 000 = the stream's own timing).
///
/// MTFC rate smoothing (Yima §2.5; `docs/design/mtfc.md`) lets a client ask the server to
/// send a session faster or slower than its nominal rate; the pacer then maps a media span `m` to
/// the wall span `m / pace`. An integer ratio keeps that mapping exact: re-anchoring at a packet
/// and scaling again never accumulates rounding drift.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pace(u32);

impl Pace {
    /// The stream's own timing.
    pub const NOMINAL: Self = Self(1_000_000);
    /// The slowest pace accepted (a tenth of nominal).
    pub const MIN: Self = Self(100_000);
    /// The fastest pace accepted (ten times nominal).
    pub const MAX: Self = Self(10_000_000);

    /// A pace of `ppm` parts per million, clamped to [`Self::MIN`]..=[`Self::MAX`].
    #[must_use]
    pub fn from_ppm(ppm: u32) -> Self {
        Self(ppm.clamp(Self::MIN.0, Self::MAX.0))
    }

    /// A pace from a multiplier (`1.05` = 5 % faster), rounded to the nearest ppm; `None` if the
    /// multiplier is not finite or lies outside [`Self::MIN`]..=[`Self::MAX`].
    #[must_use]
    pub fn from_multiplier(m: f64) -> Option<Self> {
        let ppm = (m * 1e6).round();
        (ppm.is_finite() && ppm >= f64::from(Self::MIN.0) && ppm <= f64::from(Self::MAX.0))
            .then_some(Self(ppm as u32))
    }

    /// Parts per million.
    #[must_use]
    pub const fn ppm(self) -> u32 {
        self.0
    }

    /// The multiplier (`1.0` = nominal).
    #[must_use]
    pub fn as_f64(self) -> f64 {
        f64::from(self.0) / 1e6
    }

    /// The wall-clock span in which a media span `media` is sent at this pace: `media / pace`,
    /// rounded down to the nanosecond.
    #[must_use]
    pub fn wall_span(self, media: Duration) -> Duration {
        let ns = media.as_nanos() * 1_000_000 / u128::from(self.0);
        Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// The media span sent in a wall-clock span `wall` at this pace: `wall × pace`, rounded down.
    #[must_use]
    pub fn media_span(self, wall: Duration) -> Duration {
        let ns = wall.as_nanos() * u128::from(self.0) / 1_000_000;
        Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }
}

impl Default for Pace {
    fn default() -> Self {
        Self::NOMINAL
    }
}

impl fmt::Display for Pace {
    /// The multiplier with up to six decimals, as `x-isochron-rate` carries it: `1.05`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (int, frac) = (self.0 / 1_000_000, self.0 % 1_000_000);
        if frac == 0 {
            return write!(f, "{int}");
        }
        let digits = format!("{frac:06}");
        write!(f, "{int}.{}", digits.trim_end_matches('0'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instant_arithmetic_saturates() {
        let a = Instant::from_nanos(5);
        assert_eq!(a + Duration::from_nanos(10), Instant::from_nanos(15));
        assert_eq!(a - Instant::from_nanos(9), Duration::ZERO);
        assert_eq!(a.saturating_sub(Duration::from_secs(1)), Instant::ZERO);
    }

    #[test]
    fn media_time_conversions() {
        let t = MediaTime::from_secs_f64(1.5);
        assert_eq!(t.as_nanos(), 1_500_000_000);
        assert_eq!(t.as_90khz(), 135_000);
        assert_eq!(MediaTime::from_90khz(135_000), t);
        assert_eq!(t.to_string(), "1.500");
        assert_eq!(MediaTime::from_secs_f64(-3.0), MediaTime::ZERO);
        assert_eq!(MediaTime::from_secs_f64(f64::NAN), MediaTime::ZERO);
        for ticks in [0, 1, 2, 3, 7, 89_999, 90_001, 1 << 33] {
            assert_eq!(MediaTime::from_90khz(ticks).as_90khz(), ticks, "{ticks}");
        }
    }

    #[test]
    fn pace_spans_are_exact_and_round_trip() {
        let p = Pace::from_multiplier(1.05).unwrap();
        assert_eq!(p.ppm(), 1_050_000);
        assert_eq!(p.to_string(), "1.05");
        assert_eq!(Pace::NOMINAL.to_string(), "1");
        assert_eq!(
            Pace::from_multiplier(0.5).unwrap().wall_span(Duration::from_secs(1)),
            Duration::from_secs(2)
        );
        assert_eq!(p.wall_span(Duration::from_nanos(1_050)), Duration::from_nanos(1_000));
        assert_eq!(p.media_span(Duration::from_nanos(1_000)), Duration::from_nanos(1_050));
        assert!(Pace::from_multiplier(0.01).is_none());
        assert!(Pace::from_multiplier(f64::NAN).is_none());
        assert!(Pace::from_multiplier(11.0).is_none());
        assert_eq!(Pace::from_ppm(1), Pace::MIN);
    }
}
