//! HTTP byte ranges (RFC 9110 §14): the `Range` header's grammar and which bytes it selects.
//!
//! Why a parser of its own: the media handlers (the `media` module) stream objects of many
//! gigabytes from the block store, so a request must be resolved into exact byte intervals before
//! a single block is read, and every malformed or hostile header must get a clear answer. This
//! module is sans-IO and depends on nothing but `std` and `isochron-base`, so the fuzz target
//! (`fuzz/fuzz_targets/http_range.rs`) compiles it on its own.
//!
//! The grammar (RFC 9110 §14.1.1, §14.1.2):
//!
//! ```text
//! ranges-specifier = range-unit "=" range-set
//! range-set        = 1#range-spec             ; comma-separated, OWS allowed, empty items ignored
//! range-spec       = int-range / suffix-range / other-range
//! int-range        = first-pos "-" [ last-pos ]
//! suffix-range     = "-" suffix-length
//! ```
//!
//! The unit is matched case-insensitively (§14.1); a unit other than `bytes` is reported as
//! [`RangeError::UnknownUnit`], which a server must answer by ignoring the header (§14.2). An
//! int-range is satisfiable when its first position is inside the representation; a
//! suffix-range when its length is not zero; a range set when one of its ranges is (§14.1.1).
//! Ranges past the end are clipped to it (§14.1.2). Ranges are served in the order asked; a set
//! in which two ranges overlap is coalesced into ascending, disjoint ranges first (§14.3 and
//! §17.15: overlapping ranges would multiply the bytes one request costs; 64 × `0-` once asked
//! for 64 copies of an object), so a response never carries a byte twice. A set of more than
//! [`MAX_RANGES`] ranges is refused (§14.6 and §17.15 allow refusing "many small ranges").

use std::fmt;

use isochron_base::Bytes;

/// Most ranges one request may ask for.
pub const MAX_RANGES: usize = 64;

/// One `range-spec` as written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeSpec {
    /// `first-last` (both inclusive).
    FromTo(u64, u64),
    /// `first-`: to the end.
    From(u64),
    /// `-n`: the last `n` bytes.
    Suffix(u64),
}

/// A resolved range: the bytes `start..end` of the representation (`end` exclusive, never
/// empty).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteRange {
    /// First byte.
    pub start: Bytes,
    /// One past the last byte.
    pub end: Bytes,
}

impl ByteRange {
    /// The number of bytes.
    #[must_use]
    pub fn len(&self) -> Bytes {
        Bytes(self.end.0 - self.start.0)
    }

    /// Whether it selects no byte (never true for a resolved range).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.end.0 <= self.start.0
    }

    /// The `Content-Range` value for this range of a `total`-byte representation (§14.4):
    /// `bytes first-last/total`.
    #[must_use]
    pub fn content_range(&self, total: Bytes) -> String {
        format!("bytes {}-{}/{}", self.start.0, self.end.0 - 1, total.0)
    }
}

/// Why a `Range` header was not a range set this server can serve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RangeError {
    /// The unit is not `bytes` (the header is to be ignored, RFC 9110 §14.2).
    UnknownUnit(String),
    /// No `=` after the unit.
    MissingEquals,
    /// The range set has no range.
    Empty,
    /// A range is not `a-b`, `a-` or `-n` with decimal numbers.
    Syntax {
        /// The offending range-spec.
        spec: String,
    },
    /// `a-b` with `b < a` (§14.1.1: invalid).
    Backwards {
        /// First position.
        first: u64,
        /// Last position.
        last: u64,
    },
    /// More than [`MAX_RANGES`] ranges.
    TooMany(usize),
}

impl fmt::Display for RangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownUnit(u) => write!(f, "range unit {u:?} is not \"bytes\""),
            Self::MissingEquals => write!(f, "no '=' after the range unit"),
            Self::Empty => write!(f, "the range set is empty"),
            Self::Syntax { spec } => {
                write!(f, "range {spec:?} is not of the form first-last, first- or -suffix")
            }
            Self::Backwards { first, last } => {
                write!(f, "range {first}-{last} ends before it starts")
            }
            Self::TooMany(n) => write!(f, "{n} ranges asked for; at most {MAX_RANGES} are served"),
        }
    }
}

impl std::error::Error for RangeError {}

/// Parses a `Range` header value (RFC 9110 §14.1.1, §14.2).
///
/// # Errors
///
/// [`RangeError::UnknownUnit`] for another unit; the other variants for a malformed `bytes`
/// range set, naming the problem.
pub fn parse(value: &str) -> Result<Vec<RangeSpec>, RangeError> {
    let value = value.trim_matches([' ', '\t']);
    let Some((unit, set)) = value.split_once('=') else {
        // "bytes" alone, or another unit with some other syntax.
        return if value.eq_ignore_ascii_case("bytes") {
            Err(RangeError::MissingEquals)
        } else {
            Err(RangeError::UnknownUnit(value.chars().take(32).collect()))
        };
    };
    let unit = unit.trim_matches([' ', '\t']);
    if !unit.eq_ignore_ascii_case("bytes") {
        return Err(RangeError::UnknownUnit(unit.chars().take(32).collect()));
    }
    let mut specs = Vec::new();
    // `#rule` lists may hold empty elements (RFC 9110 §5.6.1): skip them.
    for item in set.split(',').map(|s| s.trim_matches([' ', '\t'])).filter(|s| !s.is_empty()) {
        if specs.len() == MAX_RANGES {
            let total = set.split(',').filter(|s| !s.trim().is_empty()).count();
            return Err(RangeError::TooMany(total));
        }
        specs.push(parse_spec(item)?);
    }
    if specs.is_empty() {
        return Err(RangeError::Empty);
    }
    Ok(specs)
}

fn parse_spec(item: &str) -> Result<RangeSpec, RangeError> {
    let syntax = || RangeError::Syntax { spec: item.chars().take(64).collect() };
    let (first, last) = item.split_once('-').ok_or_else(syntax)?;
    match (first.is_empty(), last.is_empty()) {
        (true, true) => Err(syntax()),
        (true, false) => Ok(RangeSpec::Suffix(number(last).ok_or_else(syntax)?)),
        (false, true) => Ok(RangeSpec::From(number(first).ok_or_else(syntax)?)),
        (false, false) => {
            let (first, last) =
                (number(first).ok_or_else(syntax)?, number(last).ok_or_else(syntax)?);
            if last < first {
                return Err(RangeError::Backwards { first, last });
            }
            Ok(RangeSpec::FromTo(first, last))
        }
    }
}

/// `1*DIGIT`, saturating at `u64::MAX` (a position that large is past any end anyway).
fn number(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(s.bytes().fold(0u64, |n, b| n.saturating_mul(10).saturating_add(u64::from(b - b'0'))))
}

/// The satisfiable ranges of `specs` for a `len`-byte representation, in the order asked,
/// clipped to its end, or ascending and merged if any two overlap; empty when the set is
/// unsatisfiable (answer 416, §15.5.17). Their lengths never add up to more than `len`.
#[must_use]
pub fn resolve(specs: &[RangeSpec], len: Bytes) -> Vec<ByteRange> {
    let ranges = satisfiable(specs, len.0);
    let mut sorted = ranges.clone();
    sorted.sort_by_key(|r| r.start);
    if sorted.windows(2).all(|w| w[0].end <= w[1].start) {
        return ranges;
    }
    let mut merged: Vec<ByteRange> = Vec::with_capacity(sorted.len());
    for r in sorted {
        match merged.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => merged.push(r),
        }
    }
    merged
}

fn satisfiable(specs: &[RangeSpec], len: u64) -> Vec<ByteRange> {
    specs
        .iter()
        .filter_map(|s| {
            let (start, end) = match *s {
                RangeSpec::FromTo(a, b) => (a, b.saturating_add(1).min(len)),
                RangeSpec::From(a) => (a, len),
                RangeSpec::Suffix(n) => (len.saturating_sub(n), len),
            };
            (start < end).then_some(ByteRange { start: Bytes(start), end: Bytes(end) })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(a: u64, b: u64) -> ByteRange {
        ByteRange { start: Bytes(a), end: Bytes(b) }
    }

    #[test]
    fn overlapping_ranges_are_coalesced_and_never_cost_more_than_the_object() {
        let len = Bytes(1000);
        let many = parse(&format!("bytes={}", vec!["0-"; MAX_RANGES].join(","))).unwrap();
        assert_eq!(resolve(&many, len), [r(0, 1000)]);
        let specs = parse("bytes=500-599,0-99,550-700,-50").unwrap();
        assert_eq!(resolve(&specs, len), [r(0, 100), r(500, 701), r(950, 1000)]);
        // Disjoint ranges keep the order asked, adjacent ones stay apart.
        let specs = parse("bytes=500-599,0-99,100-199").unwrap();
        assert_eq!(resolve(&specs, len), [r(500, 600), r(0, 100), r(100, 200)]);
    }

    proptest::proptest! {
        #[test]
        fn no_set_of_ranges_serves_a_byte_twice(
            specs in proptest::collection::vec((0u64..2000, 0u64..2000, 0u8..3), 0..MAX_RANGES),
        ) {
            let specs: Vec<RangeSpec> = specs
                .into_iter()
                .map(|(a, b, k)| match k {
                    0 => RangeSpec::FromTo(a.min(b), a.max(b)),
                    1 => RangeSpec::From(a),
                    _ => RangeSpec::Suffix(b),
                })
                .collect();
            let got = resolve(&specs, Bytes(1000));
            let total: u64 = got.iter().map(|r| r.len().0).sum();
            proptest::prop_assert!(total <= 1000);
        }
    }

    #[test]
    fn the_three_forms() {
        assert_eq!(parse("bytes=0-499").unwrap(), [RangeSpec::FromTo(0, 499)]);
        assert_eq!(parse("bytes=9500-").unwrap(), [RangeSpec::From(9500)]);
        assert_eq!(parse("bytes=-500").unwrap(), [RangeSpec::Suffix(500)]);
        assert_eq!(
            parse(" Bytes = 0-0 , ,-1,\t5-").unwrap(),
            [RangeSpec::FromTo(0, 0), RangeSpec::Suffix(1), RangeSpec::From(5)]
        );
    }

    #[test]
    fn resolution_follows_rfc_9110_examples() {
        // §14.1.2's examples for a 10000-byte representation.
        let len = Bytes(10_000);
        let one = |h: &str| resolve(&parse(h).unwrap(), len);
        assert_eq!(one("bytes=0-499"), [r(0, 500)]);
        assert_eq!(one("bytes=500-999"), [r(500, 1000)]);
        assert_eq!(one("bytes=-500"), [r(9500, 10_000)]);
        assert_eq!(one("bytes=9500-"), [r(9500, 10_000)]);
        assert_eq!(one("bytes=0-0,-1"), [r(0, 1), r(9999, 10_000)]);
        assert_eq!(one("bytes=0-999999"), [r(0, 10_000)]);
        assert_eq!(one("bytes=-999999"), [r(0, 10_000)]);
        assert!(one("bytes=10000-").is_empty());
        assert!(one("bytes=-0").is_empty());
        assert_eq!(one("bytes=20000-,0-0"), [r(0, 1)]);
        assert!(resolve(&parse("bytes=0-").unwrap(), Bytes(0)).is_empty());
        assert_eq!(r(5, 10).content_range(len), "bytes 5-9/10000");
    }

    #[test]
    fn bad_headers_name_the_problem() {
        assert_eq!(parse("items=0-5"), Err(RangeError::UnknownUnit("items".into())));
        assert_eq!(parse("bytes"), Err(RangeError::MissingEquals));
        assert_eq!(parse("bytes="), Err(RangeError::Empty));
        assert_eq!(parse("bytes= , "), Err(RangeError::Empty));
        assert_eq!(parse("bytes=5-2"), Err(RangeError::Backwards { first: 5, last: 2 }));
        for bad in ["bytes=-", "bytes=a-b", "bytes=1-2-3", "bytes=+1-2", "bytes=1", "bytes=0x1-"] {
            let e = parse(bad).unwrap_err();
            assert!(matches!(e, RangeError::Syntax { .. }), "{bad}: {e:?}");
            assert!(e.to_string().contains("is not of the form"), "{e}");
        }
        let many = format!("bytes={}", vec!["0-0"; MAX_RANGES + 1].join(","));
        assert_eq!(parse(&many), Err(RangeError::TooMany(MAX_RANGES + 1)));
        assert_eq!(
            parse(&format!("bytes={}", vec!["0-0"; MAX_RANGES].join(","))).unwrap().len(),
            64
        );
    }

    #[test]
    fn huge_numbers_saturate() {
        let specs = parse("bytes=99999999999999999999999-").unwrap();
        assert_eq!(specs, [RangeSpec::From(u64::MAX)]);
        assert!(resolve(&specs, Bytes(10)).is_empty());
        let specs = parse("bytes=0-99999999999999999999999").unwrap();
        assert_eq!(resolve(&specs, Bytes(10)), [r(0, 10)]);
    }
}
