//! Unit newtypes: sizes and rates.
//!
//! Sizes are [`Bytes`], rates are [`BitRate`] (bits per second, as media rates are quoted) or
//! [`MbPerSec`] (decimal megabytes per second, as hardware throughputs are quoted: Gennart et
//! al.'s Table 2, the CineGrid format table). Config keys carry the unit in their names
//! (`block_size_kib`, `rate_mb_s`); these types carry it in code.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};

/// A number of bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bytes(pub u64);

impl Bytes {
    /// `n` kibibytes.
    #[must_use]
    pub const fn kib(n: u64) -> Self {
        Self(n * 1024)
    }

    /// `n` mebibytes.
    #[must_use]
    pub const fn mib(n: u64) -> Self {
        Self(n * 1024 * 1024)
    }

    /// The count as `usize`, saturating on 32-bit targets.
    #[must_use]
    pub fn as_usize(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }

    /// The size rounded up to a multiple of `align`, which must be a power of two.
    #[must_use]
    pub const fn align_up(self, align: u64) -> Self {
        debug_assert!(align.is_power_of_two());
        Self((self.0 + align - 1) & !(align - 1))
    }
}

impl Add for Bytes {
    type Output = Self;
    fn add(self, o: Self) -> Self {
        Self(self.0 + o.0)
    }
}

impl AddAssign for Bytes {
    fn add_assign(&mut self, o: Self) {
        self.0 += o.0;
    }
}

impl Sub for Bytes {
    type Output = Self;
    /// Saturating difference.
    fn sub(self, o: Self) -> Self {
        Self(self.0.saturating_sub(o.0))
    }
}

impl fmt::Display for Bytes {
    /// A human-readable size: `812 B`, `4.0 KiB`, `1.5 MiB`, `2.25 GiB`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
        if self.0 < 1024 {
            return write!(f, "{} B", self.0);
        }
        let mut v = self.0 as f64 / 1024.0;
        let mut unit = 0;
        while v >= 1024.0 && unit + 1 < UNITS.len() {
            v /= 1024.0;
            unit += 1;
        }
        write!(f, "{v:.2} {}", UNITS[unit])
    }
}

/// A data rate in bits per second.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BitRate(pub u64);

impl BitRate {
    /// The rate at which `bytes` are delivered in `secs` seconds (zero for a zero duration).
    #[must_use]
    pub fn from_bytes_per(bytes: Bytes, secs: f64) -> Self {
        if secs > 0.0 { Self((bytes.0 as f64 * 8.0 / secs).round() as u64) } else { Self(0) }
    }

    /// Bytes per second.
    #[must_use]
    pub fn bytes_per_sec(self) -> f64 {
        self.0 as f64 / 8.0
    }
}

impl fmt::Display for BitRate {
    /// `kb/s` below one megabit, `Mb/s` above.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 < 1_000_000 {
            write!(f, "{:.1} kb/s", self.0 as f64 / 1e3)
        } else {
            write!(f, "{:.2} Mb/s", self.0 as f64 / 1e6)
        }
    }
}

impl std::str::FromStr for BitRate {
    type Err = ParseRateError;

    /// Bits per second, with an optional decimal suffix `k`, `M` or `G` (either case):
    /// `250k`, `1.5M`, `4000000`. Must be positive and finite.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason| ParseRateError { input: s.to_owned(), reason };
        let (num, mult) = match s.char_indices().last() {
            Some((i, 'k' | 'K')) => (&s[..i], 1e3),
            Some((i, 'm' | 'M')) => (&s[..i], 1e6),
            Some((i, 'g' | 'G')) => (&s[..i], 1e9),
            _ => (s, 1.0),
        };
        let v: f64 = num.trim().parse().map_err(|_| err("is not a rate like 250k or 1.5M"))?;
        let bits = v * mult;
        if !(bits.is_finite() && bits >= 1.0 && bits < u64::MAX as f64) {
            return Err(err("must be at least 1 bit/s"));
        }
        Ok(Self(bits.round() as u64))
    }
}

/// A [`BitRate`] that did not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseRateError {
    input: String,
    reason: &'static str,
}

impl fmt::Display for ParseRateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} {}", self.input, self.reason)
    }
}

impl std::error::Error for ParseRateError {}

/// A throughput in decimal megabytes (10⁶ bytes) per second: the unit of hardware figures
/// (Gennart et al.'s Table 2: "4MB/s" disks, "8MB/s" links) and of the CineGrid format table.
///
/// Config keys in this unit end in `_mb_s`. Not [`BitRate`]: media rates are quoted in bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, PartialOrd)]
pub struct MbPerSec(pub f64);

impl MbPerSec {
    /// Bytes in one (decimal) megabyte.
    pub const BYTES_PER_MB: f64 = 1e6;

    /// Bytes per second.
    #[must_use]
    pub fn bytes_per_sec(self) -> f64 {
        self.0 * Self::BYTES_PER_MB
    }

    /// The throughput of `bytes_per_sec` bytes per second.
    #[must_use]
    pub fn from_bytes_per_sec(bytes_per_sec: f64) -> Self {
        Self(bytes_per_sec / Self::BYTES_PER_MB)
    }

    /// The same rate in bits per second (rounded).
    #[must_use]
    pub fn to_bit_rate(self) -> BitRate {
        BitRate((self.bytes_per_sec() * 8.0).round().max(0.0) as u64)
    }

    /// The same rate as a throughput in decimal megabytes per second.
    #[must_use]
    pub fn from_bit_rate(rate: BitRate) -> Self {
        Self::from_bytes_per_sec(rate.bytes_per_sec())
    }

    /// Seconds to move `bytes` at this rate (infinite for a zero rate).
    #[must_use]
    pub fn secs_for(self, bytes: f64) -> f64 {
        bytes / self.bytes_per_sec()
    }
}

impl fmt::Display for MbPerSec {
    /// `12.35 MB/s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.2} MB/s", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_display_and_align() {
        assert_eq!(Bytes(812).to_string(), "812 B");
        assert_eq!(Bytes::mib(3).to_string(), "3.00 MiB");
        assert_eq!(Bytes(4097).align_up(4096), Bytes(8192));
        assert_eq!(Bytes(4096).align_up(4096), Bytes(4096));
    }

    #[test]
    fn bitrate_from_bytes() {
        let r = BitRate::from_bytes_per(Bytes(1_000_000), 2.0);
        assert_eq!(r, BitRate(4_000_000));
        assert_eq!(r.to_string(), "4.00 Mb/s");
        assert_eq!(BitRate::from_bytes_per(Bytes(5), 0.0), BitRate(0));
    }

    #[test]
    fn bitrate_parse() {
        assert_eq!("250k".parse(), Ok(BitRate(250_000)));
        assert_eq!("1.5M".parse(), Ok(BitRate(1_500_000)));
        assert_eq!("2g".parse(), Ok(BitRate(2_000_000_000)));
        assert_eq!("4000".parse(), Ok(BitRate(4000)));
        for bad in ["", "M", "abc", "-1M", "0", "nan", "inf", "1e30G"] {
            let e = bad.parse::<BitRate>().unwrap_err().to_string();
            assert!(e.starts_with(&format!("{bad:?} ")), "{e}");
        }
    }

    #[test]
    fn mb_per_sec_conversions() {
        let r = MbPerSec(4.0);
        assert_eq!(r.bytes_per_sec(), 4e6);
        assert!((r.secs_for(40_000.0) - 0.01).abs() < 1e-15);
        assert_eq!(r.to_bit_rate(), BitRate(32_000_000));
        assert_eq!(MbPerSec::from_bit_rate(BitRate(8_000_000)), MbPerSec(1.0));
        assert_eq!(r.to_string(), "4.00 MB/s");
    }
}
