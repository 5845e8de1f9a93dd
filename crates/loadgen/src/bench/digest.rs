//! A session's content checked without keeping it: the sum of a hash of every distinct MPEG-TS
//! packet it received, against the same sum over the file the object was ingested from.
//!
//! Why: a soak (issue 30's cluster soak) asks every session to end *byte-exact*, over an hour
//! of hundreds of sessions; a bench cannot write each one to disk as `isochron play --out`
//! does. Counting packets and sequence gaps shows that nothing is missing, not that what came
//! is the right content: a node that sent the wrong block, or a takeover that sent a share from
//! the wrong offset, would pass them. The digest here catches both.
//!
//! How: every 188-byte TS packet is hashed on its own and the hashes are added (mod 2⁶⁴), so
//! the digest does not depend on the order packets arrive in (a cluster's nodes send one
//! sequence from several sources, slightly out of order). Order is what the RTP sequence check
//! already verifies. A packet that comes twice (a retransmission, or the overlap of a takeover,
//! `docs/design/takeover.md`, which players drop by sequence number) is counted once: [`Seen`]
//! keeps which sequence numbers came. The hash is not cryptographic: it guards against
//! mistakes, not against a server that forges content.

/// The size of an MPEG-TS packet.
pub const TS_PACKET: usize = 188;

/// One TS packet's hash: its bytes as little-endian 64-bit words (the last one zero-padded),
/// each mixed in by rotate, xor and multiply, then a final avalanche.
#[must_use]
pub fn ts_packet_hash(p: &[u8]) -> u64 {
    let mut h: u64 = 0x9E37_79B9_7F4A_7C15 ^ p.len() as u64;
    for chunk in p.chunks(8) {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        h = (h.rotate_left(23) ^ u64::from_le_bytes(w)).wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xC4CE_B9FE_1A85_EC53);
    h ^ (h >> 33)
}

/// The digest of a run of whole TS packets (the trailing partial packet, if any, is left out):
/// what a session that received all of them, each at least once, reports.
#[must_use]
pub fn ts_digest(bytes: &[u8]) -> u64 {
    bytes.chunks_exact(TS_PACKET).fold(0u64, |d, p| d.wrapping_add(ts_packet_hash(p)))
}

/// Which RTP sequence numbers of one stream have come (extended past the 16-bit wrap, RFC 3550
/// §A.1), to count each packet once.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    /// The extended number of bit 0 of `bits`, and the highest number seen.
    base: u64,
    max: Option<u64>,
    bits: Vec<u64>,
}

/// Packets this far before the first one received still count (reordered at the start).
const MARGIN: u64 = 4096;

impl Seen {
    /// Sequence number `seq` came; `true` the first time.
    pub fn insert(&mut self, seq: u16) -> bool {
        let ext = match self.max {
            None => {
                let first = (1 << 16) + u64::from(seq);
                self.base = first - MARGIN;
                self.max = Some(first);
                first
            }
            Some(max) => {
                let ahead = seq.wrapping_sub(max as u16) as i16;
                let ext = max.wrapping_add_signed(i64::from(ahead));
                if ahead > 0 {
                    self.max = Some(ext);
                }
                ext
            }
        };
        let Some(i) = ext.checked_sub(self.base) else { return true };
        let (word, bit) = ((i / 64) as usize, i % 64);
        if word >= self.bits.len() {
            self.bits.resize(word + 1, 0);
        }
        let fresh = self.bits[word] & (1 << bit) == 0;
        self.bits[word] |= 1 << bit;
        fresh
    }

    /// Forgets every number (the server may number anew after a seek).
    pub fn clear(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packets(n: u8) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| [0x47, i].into_iter().chain((2..188).map(|k| (k as u8) ^ i)).collect())
            .collect()
    }

    #[test]
    fn the_digest_is_the_files_whatever_the_order_and_the_grouping() {
        let ps = packets(20);
        let file: Vec<u8> = ps.concat();
        let mut rev = 0u64;
        for p in ps.iter().rev() {
            rev = rev.wrapping_add(ts_packet_hash(p));
        }
        assert_eq!(ts_digest(&file), rev);
        // A partial packet at the end is not content a session can receive.
        let mut longer = file.clone();
        longer.extend_from_slice(&[0x47, 1, 2]);
        assert_eq!(ts_digest(&longer), ts_digest(&file));
        // One byte changed anywhere, or one packet missing, changes it.
        let mut bad = file.clone();
        bad[188 * 7 + 100] ^= 1;
        assert_ne!(ts_digest(&bad), ts_digest(&file));
        assert_ne!(ts_digest(&file[188..]), ts_digest(&file));
        // Two packets swapped between positions do not (order is the sequence check's job).
        let mut swapped = ps;
        swapped.swap(3, 9);
        assert_eq!(ts_digest(&swapped.concat()), ts_digest(&file));
    }

    #[test]
    fn a_sequence_number_counts_once_across_the_wrap_and_a_little_before_the_first() {
        let mut s = Seen::default();
        assert!(s.insert(65_534));
        assert!(s.insert(65_535));
        assert!(s.insert(0));
        assert!(s.insert(1));
        assert!(!s.insert(65_535), "a duplicate across the wrap");
        assert!(!s.insert(0));
        assert!(s.insert(65_530), "reordered before the first");
        assert!(!s.insert(65_530));
        assert!(s.insert(3));
        assert!(s.insert(2), "late, not a duplicate");
        s.clear();
        assert!(s.insert(0), "numbered anew");
    }
}
