//! What the H.264 (RFC 6184) and H.265 (RFC 7798) payload formats share.
//!
//! Both carry NAL units three ways: one NAL unit as the whole payload (RFC 6184 §5.6, RFC 7798
//! §4.4.1), several small ones aggregated (STAP-A, RFC 6184 §5.7.1; AP, RFC 7798 §4.4.2), and
//! one large one fragmented (FU-A, RFC 6184 §5.8; FU, RFC 7798 §4.4.3). They differ only in
//! the NAL header (one byte or two), the packet type numbers and which NAL types are parameter
//! sets or random access points, which [`Syntax`] captures. The packetizer here sends single NAL
//! unit packets and fragments, never aggregates; the depacketizer takes all three.

use super::{MAX_ACCESS_UNIT_BYTES, Payload, PayloadError, check_max_payload, fragment};

/// The NAL unit syntax of one codec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Syntax {
    /// H.264: one-byte NAL header, F(1) NRI(2) Type(5).
    H264,
    /// H.265: two-byte NAL header, F(1) Type(6) LayerId(6) TID(3).
    H265,
}

impl Syntax {
    /// The format's name in error messages.
    pub(super) const fn name(self) -> &'static str {
        match self {
            Self::H264 => "H.264",
            Self::H265 => "H.265",
        }
    }

    /// The NAL unit header length.
    pub(super) const fn header_len(self) -> usize {
        match self {
            Self::H264 => 1,
            Self::H265 => 2,
        }
    }

    /// The type of the NAL unit (or packet) starting with `first`.
    pub(super) const fn nal_type(self, first: u8) -> u8 {
        match self {
            Self::H264 => first & 0x1f,
            Self::H265 => (first >> 1) & 0x3f,
        }
    }

    /// The names and NAL types of the parameter sets, in the order they must be sent.
    pub(super) const fn param_kinds(self) -> &'static [(&'static str, u8)] {
        match self {
            Self::H264 => &[("SPS", 7), ("PPS", 8)],
            Self::H265 => &[("VPS", 32), ("SPS", 33), ("PPS", 34)],
        }
    }

    /// The index in [`Self::param_kinds`] of NAL type `t`, if it is a parameter set.
    fn param_kind(self, t: u8) -> Option<usize> {
        self.param_kinds().iter().position(|&(_, pt)| pt == t)
    }

    /// Whether NAL type `t` makes its access unit a random access point: an IDR picture
    /// (H.264 type 5) or an IRAP picture (H.265 types 16..=23: BLA, IDR, CRA, reserved IRAP).
    pub(super) fn is_random_access(self, t: u8) -> bool {
        match self {
            Self::H264 => t == 5,
            Self::H265 => (16..=23).contains(&t),
        }
    }

    /// Whether the packetizer drops NAL type `t`: access unit delimiters and filler data
    /// (H.264 types 9 and 12, H.265 types 35 and 38) are not worth sending, and the types the
    /// payload format takes for its own packets (H.264 0 and 24..=31, RFC 6184 §5.4; H.265
    /// 48..=63, RFC 7798 §4.4) cannot be sent as themselves.
    fn is_dropped(self, t: u8) -> bool {
        match self {
            Self::H264 => matches!(t, 0 | 9 | 12 | 24..=31),
            Self::H265 => matches!(t, 35 | 38 | 48..=63),
        }
    }

    /// The fragmentation unit packet type (FU-A 28, FU 49).
    const fn fu_type(self) -> u8 {
        match self {
            Self::H264 => 28,
            Self::H265 => 49,
        }
    }

    /// The aggregation packet type (STAP-A 24, AP 48).
    const fn ap_type(self) -> u8 {
        match self {
            Self::H264 => 24,
            Self::H265 => 48,
        }
    }

    /// What the depacketizer does with packet type `t` that is neither a fragment nor an
    /// aggregate: `Ok(true)` for a NAL unit, `Ok(false)` to ignore, or an error.
    fn single_nal(self, t: u8) -> Result<bool, PayloadError> {
        let unsupported =
            |why| Err(PayloadError::Unsupported { format: self.name(), packet_type: t, why });
        match (self, t) {
            // RFC 6184 §5.2: STAP-B, MTAP16, MTAP24 and FU-B exist only in interleaved mode.
            (Self::H264, 25..=27 | 29) => unsupported("interleaved packetization-mode=2 only"),
            // RFC 6184 §5.4: types 0 and 30-31 are undefined; receivers ignore them.
            (Self::H264, 0 | 30 | 31) => Ok(false),
            (Self::H265, 50) => unsupported("PACI packets (RFC 7798 §4.4.4) are not taken"),
            // RFC 7798 §4.4: types 51-63 are unspecified; receivers ignore them.
            (Self::H265, 51..) => Ok(false),
            _ => Ok(true),
        }
    }
}

/// Writes the public packetizer and depacketizer of one NAL unit format over [`NalPacketizer`]
/// and [`NalDepacketizer`] with the docs given: the types, their constructors and methods, and
/// their `Default`, [`super::Packetizer`] and [`super::Depacketizer`] impls (the depacketizer's
/// through `depacketizer`). H.264 and H.265 differ in the [`Syntax`] and in the lists of
/// parameter sets their packetizers take, in the order [`Syntax::param_kinds`] gives. It names
/// these items and the payload traits and types as the invoking module imports them.
macro_rules! nal_format {
    (
        $syntax:expr;
        $(#[$packetizer_doc:meta])*
        packetizer $packetizer:ident;
        $(#[$new_doc:meta])*
        fn new($($sets:ident),+);
        $(#[$packetize_doc:meta])*
        fn packetize;
        $(#[$depacketizer_doc:meta])*
        depacketizer $depacketizer:ident;
        $(#[$push_doc:meta])*
        fn push;
    ) => {
        impl $packetizer {
            $(#[$new_doc])*
            pub fn new(
                nal_length_size: u8,
                $($sets: Vec<Vec<u8>>,)+
                max_payload: usize,
            ) -> Result<Self, PayloadError> {
                let params = vec![$($sets),+];
                let inner = NalPacketizer::new($syntax, nal_length_size, params, max_payload)?;
                Ok(Self { inner })
            }

            /// The payloads of an access unit (see [`Self::packetize`]).
            fn payloads(&self, au: &[u8], out: &mut Vec<Payload>) -> Result<(), PayloadError> {
                self.inner.packetize(au, out)
            }
        }

        impl_packetizer! {
            $packetizer;
            $(#[$packetize_doc])*
            fn packetize(au);
        }

        $(#[$packetizer_doc])*
        #[derive(Clone, Debug)]
        pub struct $packetizer {
            inner: NalPacketizer,
        }

        depacketizer! {
            $(#[$depacketizer_doc])*
            pub struct $depacketizer(NalDepacketizer) -> Option<Vec<u8>>;
            /// An empty depacketizer.
            pub const fn new() = NalDepacketizer::new($syntax);
            $(#[$push_doc])*
            fn push;
            /// Packets were lost before the next payload: drops the access unit being assembled
            /// and what follows of it up to and including the next marker-bit packet (unless
            /// [`Self::flush`] is called first because a new timestamp began).
            fn lost;
            /// Ends the access unit being assembled without a marker bit (call it when the RTP
            /// timestamp changes): returns it if whole, and stops dropping after a loss.
            fn flush;
        }
    };
}
pub(super) use nal_format;

/// Splits an access unit of NAL units prefixed with `len_size`-byte big-endian lengths (the
/// MP4 and Matroska form, ISO/IEC 14496-15), checking each NAL unit.
pub(super) fn split_au(
    syntax: Syntax,
    au: &[u8],
    len_size: usize,
) -> Result<Vec<&[u8]>, PayloadError> {
    let mut nals = Vec::new();
    let mut pos = 0;
    while pos < au.len() {
        let remaining = au.len() - pos;
        let Some(prefix) = au.get(pos..pos + len_size) else {
            return Err(PayloadError::TruncatedLength { offset: pos, len_size, remaining });
        };
        let len = prefix.iter().fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        let start = pos + len_size;
        if len == 0 {
            return Err(PayloadError::EmptyNal { offset: pos });
        }
        let Some(nal) = au.get(start..start.saturating_add(len)) else {
            return Err(PayloadError::NalPastEnd { offset: pos, len, remaining: au.len() - start });
        };
        check_nal(syntax, nal, start)?;
        nals.push(nal);
        pos = start + len;
    }
    Ok(nals)
}

/// Checks that a NAL unit at `offset` has a whole header with forbidden_zero_bit clear.
fn check_nal(syntax: Syntax, nal: &[u8], offset: usize) -> Result<(), PayloadError> {
    if nal.len() < syntax.header_len() {
        return Err(PayloadError::NalTooShort {
            format: syntax.name(),
            offset,
            len: nal.len(),
            need: syntax.header_len(),
        });
    }
    if nal[0] & 0x80 != 0 {
        return Err(PayloadError::ForbiddenBit { offset });
    }
    Ok(())
}

/// The packetizer of both formats.
#[derive(Clone, Debug)]
pub(super) struct NalPacketizer {
    syntax: Syntax,
    len_size: usize,
    /// The parameter sets, one list per kind of [`Syntax::param_kinds`].
    params: Vec<Vec<Vec<u8>>>,
    max_payload: usize,
}

impl NalPacketizer {
    /// Checks the settings; `params` has one list per kind of [`Syntax::param_kinds`].
    pub(super) fn new(
        syntax: Syntax,
        nal_length_size: u8,
        params: Vec<Vec<Vec<u8>>>,
        max_payload: usize,
    ) -> Result<Self, PayloadError> {
        if !matches!(nal_length_size, 1 | 2 | 4) {
            return Err(PayloadError::NalLengthSize(nal_length_size));
        }
        // A fragment: the payload header, the FU header and at least one byte of the NAL unit.
        let max_payload = check_max_payload(syntax.name(), max_payload, syntax.header_len() + 2)?;
        for (&(kind, want), sets) in syntax.param_kinds().iter().zip(&params) {
            for (index, set) in sets.iter().enumerate() {
                let bad = |reason| PayloadError::ParameterSet {
                    format: syntax.name(),
                    kind,
                    index,
                    reason,
                };
                if set.len() < syntax.header_len() {
                    return Err(bad("shorter than a NAL unit header"));
                }
                if set[0] & 0x80 != 0 {
                    return Err(bad("forbidden_zero_bit set"));
                }
                if syntax.nal_type(set[0]) != want {
                    return Err(bad("wrong NAL unit type"));
                }
            }
        }
        Ok(Self { syntax, len_size: usize::from(nal_length_size), params, max_payload })
    }

    /// Packetizes one access unit (see `H264Packetizer::packetize`).
    pub(super) fn packetize(&self, au: &[u8], out: &mut Vec<Payload>) -> Result<(), PayloadError> {
        let syntax = self.syntax;
        let nals = split_au(syntax, au, self.len_size)?;
        let first = out.len();
        let random_access = nals.iter().any(|n| syntax.is_random_access(syntax.nal_type(n[0])));
        let kinds = self.params.len();
        let mut present = [false; 3];
        for n in &nals {
            if let Some(k) = syntax.param_kind(syntax.nal_type(n[0])) {
                present[k] = true;
            }
        }
        // Parameter-set kinds below `settled` are either in the AU or already inserted.
        let mut settled = 0;
        for nal in nals {
            let t = syntax.nal_type(nal[0]);
            if syntax.is_dropped(t) {
                continue;
            }
            if random_access {
                // Missing parameter sets go just before the first NAL unit that should follow
                // them: a later kind of parameter set, or anything that is not one.
                let upto = syntax.param_kind(t).unwrap_or(kinds);
                while settled < upto {
                    if !present[settled] {
                        for set in &self.params[settled] {
                            self.emit(set, out);
                        }
                    }
                    settled += 1;
                }
            }
            self.emit(nal, out);
        }
        if let Some(last) = out[first..].last_mut() {
            last.marker = true;
        }
        Ok(())
    }

    /// Appends the payloads of one NAL unit: itself if it fits, else fragments.
    fn emit(&self, nal: &[u8], out: &mut Vec<Payload>) {
        if nal.len() <= self.max_payload {
            out.push(Payload { bytes: nal.to_vec(), marker: false });
            return;
        }
        let h = self.syntax.header_len();
        let (header, body) = nal.split_at(h);
        let t = self.syntax.nal_type(header[0]);
        // Each fragment repeats the payload header (or FU indicator) and adds the FU header.
        let chunk = self.max_payload - (h + 1);
        // FU header: S, E (and R = 0 in H.264), then the NAL unit type.
        let fu_header =
            |i, n| t | if i == 0 { 0x80 } else { 0 } | if i + 1 == n { 0x40 } else { 0 };
        let fu = self.syntax.fu_type();
        match self.syntax {
            // FU indicator: F and NRI of the NAL unit, type 28 (RFC 6184 §5.8).
            Syntax::H264 => {
                fragment(out, body, chunk, false, |i, n| [(header[0] & 0xe0) | fu, fu_header(i, n)])
            }
            // Payload header: F, LayerId and TID of the NAL unit, type 49 (RFC 7798 §4.4.3).
            Syntax::H265 => fragment(out, body, chunk, false, |i, n| {
                [(header[0] & 0x81) | (fu << 1), header[1], fu_header(i, n)]
            }),
        }
    }
}

/// A NAL unit being reassembled from fragments.
#[derive(Clone, Copy, Debug)]
struct Fu {
    /// Offset of its 4-byte length prefix in the AU buffer.
    start: usize,
    /// Its NAL unit type, which every fragment repeats.
    nal_type: u8,
}

/// The depacketizer of both formats: builds the access unit as NAL units with 4-byte lengths.
#[derive(Clone, Debug)]
pub(super) struct NalDepacketizer {
    syntax: Syntax,
    au: Vec<u8>,
    fu: Option<Fu>,
    /// Dropping payloads up to the next marker bit (the rest of a damaged AU).
    discarding: bool,
}

impl NalDepacketizer {
    /// An empty depacketizer.
    pub(super) const fn new(syntax: Syntax) -> Self {
        Self { syntax, au: Vec::new(), fu: None, discarding: false }
    }

    /// Feeds one payload (see `H264Depacketizer::push`).
    pub(super) fn push(
        &mut self,
        payload: &[u8],
        marker: bool,
    ) -> Result<Option<Vec<u8>>, PayloadError> {
        if self.discarding {
            self.discarding = !marker;
            return Ok(None);
        }
        if let Err(e) = self.take(payload) {
            self.clear();
            self.discarding = !marker;
            return Err(e);
        }
        if !marker {
            return Ok(None);
        }
        if self.fu.is_some() {
            self.clear();
            return Err(PayloadError::Fragment {
                format: self.syntax.name(),
                what: "the marker bit ends the access unit inside a fragmented NAL unit",
            });
        }
        Ok(if self.au.is_empty() { None } else { Some(std::mem::take(&mut self.au)) })
    }

    /// Drops the AU being assembled and the rest of it up to the next marker bit.
    pub(super) fn lost(&mut self) {
        self.clear();
        self.discarding = true;
    }

    /// Ends the AU without a marker bit: returns it if it holds whole NAL units and no
    /// loss was reported since it began; stops discarding.
    pub(super) fn flush(&mut self) -> Option<Vec<u8>> {
        let whole = !self.discarding && self.fu.is_none() && !self.au.is_empty();
        self.discarding = false;
        let au = std::mem::take(&mut self.au);
        self.fu = None;
        whole.then_some(au)
    }

    fn clear(&mut self) {
        self.au.clear();
        self.fu = None;
    }

    /// Adds the NAL units of one payload to the AU.
    fn take(&mut self, payload: &[u8]) -> Result<(), PayloadError> {
        let syntax = self.syntax;
        let h = syntax.header_len();
        let Some(&first) = payload.first().filter(|_| payload.len() >= h) else {
            return Err(PayloadError::Truncated {
                format: syntax.name(),
                what: "the payload header",
                len: payload.len(),
                need: h,
            });
        };
        let t = syntax.nal_type(first);
        if t == syntax.fu_type() {
            return self.fragment(payload);
        }
        if self.fu.is_some() {
            return Err(PayloadError::Fragment {
                format: syntax.name(),
                what: "a packet arrived before the fragmented NAL unit ended (a lost packet)",
            });
        }
        if t == syntax.ap_type() {
            return self.aggregate(payload);
        }
        if syntax.single_nal(t)? {
            self.reserve(4 + payload.len())?;
            self.append_nal(payload);
        }
        Ok(())
    }

    /// Checks that `more` bytes fit the AU buffer's limit.
    fn reserve(&self, more: usize) -> Result<(), PayloadError> {
        let len = self.au.len().saturating_add(more);
        if len > MAX_ACCESS_UNIT_BYTES {
            return Err(PayloadError::TooLarge {
                format: self.syntax.name(),
                len,
                max: MAX_ACCESS_UNIT_BYTES,
            });
        }
        Ok(())
    }

    /// Appends one whole NAL unit with its 4-byte length (below [`MAX_ACCESS_UNIT_BYTES`], so
    /// the length fits).
    fn append_nal(&mut self, nal: &[u8]) {
        self.au.extend_from_slice(&(nal.len() as u32).to_be_bytes());
        self.au.extend_from_slice(nal);
    }

    /// STAP-A (RFC 6184 §5.7.1) or AP (RFC 7798 §4.4.2, without DONL fields): NAL units each
    /// after a 16-bit size.
    fn aggregate(&mut self, payload: &[u8]) -> Result<(), PayloadError> {
        let syntax = self.syntax;
        let h = syntax.header_len();
        let malformed =
            |offset, what| PayloadError::Malformed { format: syntax.name(), offset, what };
        let mut pos = h;
        let mut nals = 0;
        while pos < payload.len() {
            let Some(size) = payload.get(pos..pos + 2) else {
                return Err(malformed(pos, "a NAL unit size cut off"));
            };
            let size = usize::from(u16::from_be_bytes([size[0], size[1]]));
            let start = pos + 2;
            let Some(nal) = payload.get(start..start + size) else {
                return Err(malformed(pos, "a NAL unit size past the end of the payload"));
            };
            if size < h {
                return Err(PayloadError::NalTooShort {
                    format: syntax.name(),
                    offset: start,
                    len: size,
                    need: h,
                });
            }
            self.reserve(4 + size)?;
            self.append_nal(nal);
            nals += 1;
            pos = start + size;
        }
        if nals == 0 {
            return Err(malformed(h, "an aggregation packet with no NAL unit"));
        }
        Ok(())
    }

    /// FU-A (RFC 6184 §5.8) or FU (RFC 7798 §4.4.3, without DONL).
    fn fragment(&mut self, payload: &[u8]) -> Result<(), PayloadError> {
        let syntax = self.syntax;
        let h = syntax.header_len();
        let fragment = |what| PayloadError::Fragment { format: syntax.name(), what };
        let Some(&fu_header) = payload.get(h) else {
            return Err(PayloadError::Truncated {
                format: syntax.name(),
                what: "the FU header",
                len: payload.len(),
                need: h + 1,
            });
        };
        let (start, end) = (fu_header & 0x80 != 0, fu_header & 0x40 != 0);
        let nal_type = match syntax {
            Syntax::H264 => fu_header & 0x1f,
            Syntax::H265 => fu_header & 0x3f,
        };
        let data = &payload[h + 1..];
        if start {
            if self.fu.is_some() {
                return Err(fragment("a fragment start before the previous NAL unit ended"));
            }
            self.reserve(4 + h + data.len())?;
            let at = self.au.len();
            self.au.extend_from_slice(&[0; 4]);
            match syntax {
                Syntax::H264 => self.au.push((payload[0] & 0xe0) | nal_type),
                Syntax::H265 => {
                    self.au.extend_from_slice(&[(payload[0] & 0x81) | (nal_type << 1), payload[1]]);
                }
            }
            self.fu = Some(Fu { start: at, nal_type });
        } else {
            let Some(fu) = self.fu else {
                return Err(fragment("a continuation without its start (a lost packet)"));
            };
            if fu.nal_type != nal_type {
                return Err(fragment("the NAL unit type changed between fragments"));
            }
            self.reserve(data.len())?;
        }
        self.au.extend_from_slice(data);
        if end && let Some(fu) = self.fu.take() {
            let len = (self.au.len() - fu.start - 4) as u32;
            self.au[fu.start..fu.start + 4].copy_from_slice(&len.to_be_bytes());
        }
        Ok(())
    }
}
