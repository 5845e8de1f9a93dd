//! The `Range` header in Normal Play Time (RFC 2326 §3.6, §12.29).
//!
//! Parses the forms the clients send: `npt=0.000-` (ffmpeg), `npt=0-9.991`
//! (GStreamer, end included), `npt=5-` (live555), `npt=now-`, `npt=-Y`, and `hh:mm:ss.frac`.
//! Times are kept in integer nanoseconds ([`MediaTime`]), never through `f64`, so that a value we
//! format and a client echoes back parses to exactly the same instant.
//!
//! Only NPT is served. `smpte` and `clock` ranges are refused with 457 rather than ignored: a VOD
//! object has no SMPTE or wall-clock timeline, and silently starting at 0 would make a client's
//! seek look like success. Formatting writes three decimals, flooring start times and ceiling end
//! times, so that the advertised interval always contains the media (GStreamer ends the stream at
//! the `Range` end).

use isochron_base::MediaTime;

/// A parsed NPT time: `now` or an offset from the start of the presentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NptTime {
    /// `now`: the current position (RFC 2326 §3.6); in a PLAY while paused it means "resume".
    Now,
    /// An offset from the start of the presentation.
    At(MediaTime),
}

/// A parsed `Range: npt=...` value (RFC 2326 §3.6 `npt-range`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NptRange {
    /// The start; `None` for the `npt=-Y` form.
    pub start: Option<NptTime>,
    /// The end; `None` for an open range (`npt=X-`).
    pub end: Option<MediaTime>,
}

/// Why a `Range` was refused (all answered with 457 Invalid Range, RFC 2326 §11.3.7).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    /// The value does not follow the `npt-range` grammar; `at` is the byte offset of the fault.
    #[error("bad npt range {input:?} at byte {at}")]
    Syntax {
        /// The header value as received.
        input: String,
        /// Byte offset in `input` where parsing failed.
        at: usize,
    },
    /// A range unit other than `npt` (`smpte`, `clock`, ...).
    #[error("range unit {0:?} is not served (only npt)")]
    UnsupportedUnit(String),
    /// The end is before the start.
    #[error("range end {end} is before its start {start}")]
    Reversed {
        /// The requested start.
        start: MediaTime,
        /// The requested end.
        end: MediaTime,
    },
    /// The start lies beyond the end of the presentation.
    #[error("range start {start} is beyond the end of the presentation ({duration})")]
    StartBeyondEnd {
        /// The requested start.
        start: MediaTime,
        /// The presentation's duration.
        duration: MediaTime,
    },
}

impl NptRange {
    /// Parses a `Range` header value. Parameters after `;` (RFC 2326 §12.29 `;time=`) are
    /// ignored. `npt=5-3` is refused as [`RangeError::Reversed`].
    ///
    /// # Errors
    ///
    /// [`RangeError::Syntax`] with the offending offset, or [`RangeError::UnsupportedUnit`].
    pub fn parse(value: &str) -> Result<Self, RangeError> {
        let syntax = |at: usize| RangeError::Syntax { input: value.to_owned(), at };
        let spec = value.split(';').next().unwrap_or_default();
        let lead = spec.len() - spec.trim_start().len();
        let spec = spec.trim();
        let Some((unit, rest)) = spec.split_once('=') else {
            return Err(if is_other_unit(spec) {
                RangeError::UnsupportedUnit(spec.to_owned())
            } else {
                syntax(lead)
            });
        };
        let unit = unit.trim();
        if !unit.eq_ignore_ascii_case("npt") {
            return Err(if is_other_unit(unit) {
                RangeError::UnsupportedUnit(unit.to_owned())
            } else {
                syntax(lead)
            });
        }
        let rest_at = lead + spec.len() - rest.len();
        let Some((a, b)) = rest.split_once('-') else {
            return Err(syntax(rest_at + rest.len()));
        };
        let b_at = rest_at + a.len() + 1;
        let (a, b) = (a.trim(), b.trim());
        let start = if a.is_empty() {
            None
        } else {
            Some(parse_npt_time(a).ok_or_else(|| syntax(rest_at))?)
        };
        let end = if b.is_empty() {
            None
        } else {
            match parse_npt_time(b) {
                Some(NptTime::At(t)) => Some(t),
                _ => return Err(syntax(b_at)),
            }
        };
        if start.is_none() && end.is_none() {
            return Err(syntax(b_at));
        }
        if let (Some(NptTime::At(s)), Some(e)) = (start, end)
            && e < s
        {
            return Err(RangeError::Reversed { start: s, end: e });
        }
        Ok(Self { start, end })
    }
}

fn is_other_unit(unit: &str) -> bool {
    let unit = unit.to_ascii_lowercase();
    unit.starts_with("smpte") || unit == "clock" || unit == "utc"
}

/// `now`, `S[.frac]` or `H:MM:SS[.frac]` (RFC 2326 §3.6). Fraction digits beyond nanoseconds
/// are accepted and truncated.
fn parse_npt_time(s: &str) -> Option<NptTime> {
    if s.eq_ignore_ascii_case("now") {
        return Some(NptTime::Now);
    }
    let (whole, frac) = match s.split_once('.') {
        Some((w, f)) => (w, f),
        None => (s, ""),
    };
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let secs = if whole.contains(':') {
        let mut it = whole.split(':');
        let (h, m, sec) = (it.next()?, it.next()?, it.next()?);
        if it.next().is_some() {
            return None;
        }
        let h = digits(h, 1, 20)?;
        let m = digits(m, 1, 2)?;
        let sec = digits(sec, 1, 2)?;
        if m >= 60 || sec >= 60 {
            return None;
        }
        h.checked_mul(3600)?.checked_add(m * 60 + sec)?
    } else {
        digits(whole, 1, 20)?
    };
    let mut nanos: u64 = 0;
    for (i, b) in frac.bytes().take(9).enumerate() {
        nanos += u64::from(b - b'0') * 10u64.pow(8 - i as u32);
    }
    let total = secs.checked_mul(1_000_000_000)?.checked_add(nanos)?;
    Some(NptTime::At(MediaTime::from_nanos(total)))
}

/// A decimal number of `min..=max` digits.
fn digits(s: &str, min: usize, max: usize) -> Option<u64> {
    if s.len() < min || s.len() > max || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// `t` as NPT seconds with three decimals, rounded down: `12.480`.
#[must_use]
pub fn npt_floor(t: MediaTime) -> String {
    let ms = t.as_nanos() / 1_000_000;
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

/// `t` as NPT seconds with three decimals, rounded up: for ends and durations, so that the
/// advertised range never cuts off the last packets.
#[must_use]
pub fn npt_ceil(t: MediaTime) -> String {
    let ms = t.as_nanos().div_ceil(1_000_000);
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

/// The `Range` value of a PLAY response (RFC 2326 §12.29):
/// `npt=<start floored>-<end ceiled>`, or `npt=<start>-` without an end.
#[must_use]
pub fn format_npt_range(start: MediaTime, end: Option<MediaTime>) -> String {
    match end {
        Some(end) => format!("npt={}-{}", npt_floor(start), npt_ceil(end)),
        None => format!("npt={}-", npt_floor(start)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: f64) -> Option<NptTime> {
        Some(NptTime::At(MediaTime::from_secs_f64(secs)))
    }

    fn ms(ms: u64) -> MediaTime {
        MediaTime::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn client_forms_parse() {
        let cases: &[(&str, Option<NptTime>, Option<MediaTime>)] = &[
            ("npt=0.000-", at(0.0), None),            // ffmpeg
            ("npt=6.400-", at(6.4), None),            // ffmpeg seek
            ("npt=0-9.991", at(0.0), Some(ms(9991))), // GStreamer
            ("npt=5-", at(5.0), None),                // live555
            ("npt=now-", Some(NptTime::Now), None),   // RFC 2326 §3.6
            ("npt=-20", None, Some(ms(20_000))),      // open start
            ("npt=1:02:03.5-", at(3723.5), None),     // hh:mm:ss.frac
            ("npt=0:00:10-0:01:00", at(10.0), Some(ms(60_000))),
            ("npt = 1.25 - 2.5", at(1.25), Some(ms(2500))),
            ("NPT=3-", at(3.0), None),
            ("npt=3.-", at(3.0), None),
            ("npt=0.000-;time=19970123T143720Z", at(0.0), None),
            ("npt=1.0000000019-", Some(NptTime::At(MediaTime::from_nanos(1_000_000_001))), None),
        ];
        for (input, start, end) in cases {
            assert_eq!(
                NptRange::parse(input),
                Ok(NptRange { start: *start, end: *end }),
                "{input}"
            );
        }
    }

    #[test]
    fn bad_syntax_is_refused_with_position() {
        for (input, pos) in [
            ("npt=abc-", 4),
            ("npt=", 4),
            ("npt=5", 5),
            ("npt=-", 5),
            ("npt=1-now", 6),
            ("npt=1:60:00-", 4),
            ("npt=.5-", 4),
            ("npt=1-2x", 6),
            ("npt=99999999999999999999999-", 4),
            ("bogus", 0),
            ("", 0),
            ("foo=1-2", 0),
        ] {
            match NptRange::parse(input) {
                Err(RangeError::Syntax { at, .. }) => assert_eq!(at, pos, "{input}"),
                other => panic!("{input}: {other:?}"),
            }
        }
        assert_eq!(
            NptRange::parse("npt=5-3"),
            Err(RangeError::Reversed { start: ms(5000), end: ms(3000) })
        );
        assert!(matches!(
            NptRange::parse("smpte=0:10:20-"),
            Err(RangeError::UnsupportedUnit(u)) if u == "smpte"
        ));
        assert!(matches!(
            NptRange::parse("clock=19961108T143720.25Z-"),
            Err(RangeError::UnsupportedUnit(_))
        ));
    }

    #[test]
    fn formatting_floors_starts_and_ceils_ends() {
        assert_eq!(format_npt_range(ms(1234), Some(ms(56_789))), "npt=1.234-56.789");
        assert_eq!(format_npt_range(ms(12_480), None), "npt=12.480-");
        let t = MediaTime::from_nanos(9_991_000_001);
        assert_eq!(npt_floor(t), "9.991");
        assert_eq!(npt_ceil(t), "9.992");
        assert_eq!(npt_ceil(MediaTime::ZERO), "0.000");
        assert_eq!(npt_ceil(ms(5_400_120)), "5400.120");
    }

    #[test]
    fn format_parse_round_trip() {
        for nanos in [0, 1, 999_999, 1_000_000, 1_234_567_890, 5_400_120_000_000, u64::MAX / 2] {
            let t = MediaTime::from_nanos(nanos);
            let floor = MediaTime::from_nanos(nanos / 1_000_000 * 1_000_000);
            let ceil = MediaTime::from_nanos(nanos.div_ceil(1_000_000) * 1_000_000);
            let text = format_npt_range(t, Some(t));
            assert_eq!(
                NptRange::parse(&text),
                Ok(NptRange { start: Some(NptTime::At(floor)), end: Some(ceil) }),
                "{text}"
            );
        }
    }
}
