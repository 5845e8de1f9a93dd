//! Counter-based pseudo-random numbers.
//!
//! Yima's placement stores only a per-object seed and recomputes "the i-th random number of the
//! seeded sequence" on every lookup. A counter-based generator makes that O(1) per block: the i-th
//! number is a hash of `(seed, i)`. We use the SplitMix64 finaliser (Steele, Lea, Flood, OOPSLA
//! 2014), a bijection on `u64` with full avalanche, pinned by golden vectors here and in `store`:
//! placement is persistent state, so this function must never change.

/// The SplitMix64 increment (the golden ratio in 64-bit fixed point).
pub const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// The SplitMix64 output function applied to `z + GOLDEN_GAMMA`.
///
/// `splitmix64(0) == 0xE220_A839_7B1D_CDAF`, the first output of SplitMix64 seeded with 0.
#[must_use]
pub const fn splitmix64(z: u64) -> u64 {
    let mut z = z.wrapping_add(GOLDEN_GAMMA);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A hash of a list of words: each word is folded into the state with [`splitmix64`].
///
/// Used as `hash_words(&[seed, block, epoch])` by placement; distinct lists of the same length
/// give independent-looking outputs.
#[must_use]
pub fn hash_words(words: &[u64]) -> u64 {
    words.iter().fold(0x6A09_E667_F3BC_C908, |acc, &w| splitmix64(acc ^ splitmix64(w)))
}

/// Maps a uniformly distributed `h` onto `0..n` without modulo bias worth measuring
/// (Lemire's multiply-shift; the bias is below `n / 2^64`).
#[must_use]
pub fn reduce(h: u64, n: u32) -> u32 {
    ((u128::from(h) * u128::from(n)) >> 64) as u32
}

/// A small seeded generator for non-persistent uses (session ids, SSRCs in tests, workloads).
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose sequence is fixed by `seed`.
    #[must_use]
    pub const fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next number of the sequence.
    pub fn next_u64(&mut self) -> u64 {
        let out = splitmix64(self.state);
        self.state = self.state.wrapping_add(GOLDEN_GAMMA);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Golden vectors: these values are persistent placement state. If this test fails, every
    /// stored block would be looked up on the wrong disk.
    #[test]
    fn golden_vectors() {
        assert_eq!(splitmix64(0), 0xE220_A839_7B1D_CDAF);
        let mut g = SplitMix64::new(0);
        assert_eq!(g.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(g.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(hash_words(&[1, 2, 3]), hash_words(&[1, 2, 3]));
        assert_ne!(hash_words(&[1, 2, 3]), hash_words(&[1, 3, 2]));
    }

    #[test]
    fn reduce_stays_in_range() {
        for h in [0, 1, u64::MAX, u64::MAX / 2] {
            assert!(reduce(h, 7) < 7);
        }
        assert_eq!(reduce(u64::MAX, 10), 9);
        assert_eq!(reduce(0, 10), 0);
    }
}
