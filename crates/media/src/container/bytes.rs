//! Big-endian reading over a byte slice, for the box and element parsers.
//!
//! Why a cursor rather than indexing: every read is checked, so a short box yields `None` (which
//! the parser turns into a [`ContainerError::Malformed`](super::ContainerError::Malformed) naming
//! the box) and never an out-of-bounds panic.

/// A checked big-endian reader over a slice.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `data`.
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Self { data, pos: 0 }
    }

    /// The bytes not read yet.
    pub(crate) fn rest(&self) -> &'a [u8] {
        self.data.get(self.pos..).unwrap_or_default()
    }

    /// How many bytes are left.
    pub(crate) fn remaining(&self) -> usize {
        self.data.len().saturating_sub(self.pos)
    }

    /// The next `n` bytes.
    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let out = self.data.get(self.pos..end)?;
        self.pos = end;
        Some(out)
    }

    /// Skips `n` bytes.
    pub(crate) fn skip(&mut self, n: usize) -> Option<()> {
        self.take(n).map(|_| ())
    }

    /// The next `N` bytes as an array.
    pub(crate) fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    /// One byte.
    pub(crate) fn u8(&mut self) -> Option<u8> {
        Some(self.array::<1>()?[0])
    }

    /// A big-endian `u16`.
    pub(crate) fn u16(&mut self) -> Option<u16> {
        self.array().map(u16::from_be_bytes)
    }

    /// A big-endian `u32`.
    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.array().map(u32::from_be_bytes)
    }

    /// A big-endian `i32`.
    pub(crate) fn i32(&mut self) -> Option<i32> {
        self.array().map(i32::from_be_bytes)
    }

    /// A big-endian `u64`.
    pub(crate) fn u64(&mut self) -> Option<u64> {
        self.array().map(u64::from_be_bytes)
    }

    /// A big-endian `i64`.
    pub(crate) fn i64(&mut self) -> Option<i64> {
        self.array().map(i64::from_be_bytes)
    }
}

/// Reads bits most-significant first, for the AudioSpecificConfig (ISO/IEC 14496-3 §1.6.2.1).
#[derive(Clone, Debug)]
pub(crate) struct BitReader<'a> {
    data: &'a [u8],
    bit: usize,
}

impl<'a> BitReader<'a> {
    /// A reader at the first bit of `data`.
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Self { data, bit: 0 }
    }

    /// The next `n` (≤ 32) bits as an unsigned number.
    pub(crate) fn bits(&mut self, n: u32) -> Option<u32> {
        let mut v = 0u32;
        for _ in 0..n.min(32) {
            let byte = *self.data.get(self.bit / 8)?;
            let b = (byte >> (7 - (self.bit % 8))) & 1;
            v = (v << 1) | u32::from(b);
            self.bit += 1;
        }
        Some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_reads_and_stops_at_the_end() {
        let mut c = Cursor::new(&[1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(c.u16(), Some(0x0102));
        assert_eq!(c.array::<3>(), Some([3, 4, 5]));
        assert_eq!(c.remaining(), 2);
        assert_eq!(c.u32(), None);
        assert_eq!(c.rest(), &[6, 7]);
        assert_eq!(c.take(usize::MAX), None);
        assert_eq!(c.u8(), Some(6));
        assert_eq!(c.skip(1), Some(()));
        assert_eq!(c.u8(), None);
    }

    #[test]
    fn bits() {
        let mut r = BitReader::new(&[0b1001_0001, 0b1000_0000]);
        assert_eq!(r.bits(5), Some(0b10010));
        assert_eq!(r.bits(4), Some(0b0011));
        assert_eq!(r.bits(7), Some(0));
        assert_eq!(r.bits(1), None);
    }
}
