//! The retransmission buffer: what this node sent lately, by RTP sequence number (sans-IO).
//!
//! Why: Yima's retransmission-based error control (RBEC, Yima §2.6; Zimmermann et al., MMCN 2003)
//! has the client ask the node that *sent* a lost packet for it again, because that node still
//! holds it. A client names the lost packets by their RTP sequence numbers in an RTCP generic NACK
//! (RFC 4585 §6.2.1); each node keeps, per UDP stream, the packets it sent during the last
//! `window` and answers the numbers it finds. Numbers it did not send (another node's, or older
//! than the window) are counted and ignored: in a cluster a client may ask a node for a packet
//! another node sent (a whole block lost in a row), and only the sender answers.
//!
//! A packet is kept as a reference to its block and its index there, never a copy: the block
//! stays alive in memory for up to `window` after its last packet (at most about one block per
//! stream beyond what the scheduler's cache accounts for). A packet relayed for another node
//! (relay delivery, the origin forwards what the other nodes send) is kept as its datagram.
//!
//! How a kept packet goes out again is the sender thread's business: as it was, or in an RFC 4588
//! RTX stream for players that negotiated one.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use isochron_base::{Instant, StreamId};
use isochron_rtp::RtpHeader;
use isochron_store::block::Block;

/// An RFC 4588 retransmission stream a player negotiated (SSRC-multiplexed, §5.3): the SDP
/// offered payload type `payload_type` as `rtx` with `apt` the media's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtxSetup {
    /// The RTX payload type.
    pub payload_type: u8,
    /// The RTX stream's SSRC.
    pub ssrc: u32,
}

/// A packet as it was sent.
#[derive(Debug)]
pub enum Sent<B> {
    /// A packet this node paced from one of its blocks.
    Block {
        /// The block.
        block: Arc<Block<B>>,
        /// The packet's index in it.
        packet: usize,
        /// Its RTP header.
        header: RtpHeader,
    },
    /// A packet relayed for another node: the datagram as sent.
    Datagram(Arc<[u8]>),
}

impl<B> Clone for Sent<B> {
    fn clone(&self) -> Self {
        match self {
            Self::Block { block, packet, header } => {
                Self::Block { block: Arc::clone(block), packet: *packet, header: *header }
            }
            Self::Datagram(d) => Self::Datagram(Arc::clone(d)),
        }
    }
}

/// Counters, monotonic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetransmitStats {
    /// NACKs handled (for a known stream).
    pub nacks: u64,
    /// Sequence numbers they asked for.
    pub requested: u64,
    /// Packets found and handed back for resending.
    pub resent: u64,
    /// Numbers not in the buffer (not sent by this node, or older than the window).
    pub missed: u64,
    /// NACKs for a stream this node does not know.
    pub unknown_stream: u64,
}

impl RetransmitStats {
    /// Adds another buffer's counters to these.
    pub fn add(&mut self, o: &Self) {
        self.nacks += o.nacks;
        self.requested += o.requested;
        self.resent += o.resent;
        self.missed += o.missed;
        self.unknown_stream += o.unknown_stream;
    }
}

/// How many of the newest packets a lookup walks when the binary search misses (a stream whose
/// numbers did not only go forward, e.g. relayed datagrams that arrived out of order).
const SCAN: usize = 256;

/// One track's packets in the order sent. Each carries its sequence number extended past the
/// 16-bit wrap (`ext`, relative to the previous packet's), so that a track numbered forward
/// (as RTP is: "increments by one for each RTP data packet sent", RFC 3550 §5.1) is sorted by
/// `ext` and found by binary search: no index to update per packet sent.
#[derive(Debug)]
struct Ring<B> {
    /// `(sent at, extended sequence number, packet)`, oldest first.
    entries: VecDeque<(Instant, u64, Sent<B>)>,
}

impl<B> Ring<B> {
    fn expire(&mut self, horizon: Instant) {
        while self.entries.front().is_some_and(|(at, _, _)| *at < horizon) {
            self.entries.pop_front();
        }
    }

    /// `seq` extended relative to the newest packet (within ±32 767 of it).
    fn extend(&self, seq: u16) -> u64 {
        match self.entries.back() {
            Some(&(_, ext, _)) => {
                let delta = i64::from(seq.wrapping_sub(ext as u16) as i16);
                ext.wrapping_add_signed(delta)
            }
            // Far from 0 both ways, so extension never wraps.
            None => (1 << 32) + u64::from(seq),
        }
    }

    fn push(&mut self, now: Instant, seq: u16, sent: Sent<B>) {
        let ext = self.extend(seq);
        self.entries.push_back((now, ext, sent));
    }

    /// The newest packet numbered `seq`: within the 65 535 packets before the newest (a number
    /// past the newest was sent before it, a wrap earlier).
    fn find(&self, seq: u16) -> Option<&Sent<B>> {
        let newest = self.entries.back()?.1;
        let mut ext = self.extend(seq);
        if ext > newest {
            ext -= 1 << 16;
        }
        let after = self.entries.partition_point(|(_, e, _)| *e <= ext);
        if let Some((_, e, sent)) = after.checked_sub(1).and_then(|i| self.entries.get(i))
            && *e == ext
        {
            return Some(sent);
        }
        self.entries.iter().rev().take(SCAN).find(|(_, e, _)| *e as u16 == seq).map(|(_, _, s)| s)
    }
}

/// Per stream and track (each track is its own RTP stream, with its own sequence numbers), the
/// packets sent during the last `window` (see the module docs).
#[derive(Debug)]
pub struct RetransmitBuffer<B> {
    window: Duration,
    streams: HashMap<StreamId, Vec<Ring<B>>>,
    stats: RetransmitStats,
}

impl<B> RetransmitBuffer<B> {
    /// A buffer keeping each packet for `window` after it was sent.
    #[must_use]
    pub fn new(window: Duration) -> Self {
        Self { window, streams: HashMap::new(), stats: RetransmitStats::default() }
    }

    /// Keep what `stream` sends from now on.
    pub fn handle_add(&mut self, stream: StreamId) {
        self.streams.insert(stream, Vec::new());
    }

    /// Forget `stream`.
    pub fn handle_remove(&mut self, stream: StreamId) {
        self.streams.remove(&stream);
    }

    /// Whether `stream` is kept.
    #[must_use]
    pub fn keeps(&self, stream: StreamId) -> bool {
        self.streams.contains_key(&stream)
    }

    /// `stream` sent packet `seq` of `track` at `now` (ignored for a stream not added).
    pub fn handle_sent(
        &mut self,
        now: Instant,
        stream: StreamId,
        track: u8,
        seq: u16,
        sent: Sent<B>,
    ) {
        let Some(rings) = self.streams.get_mut(&stream) else { return };
        let t = usize::from(track);
        if rings.len() <= t {
            rings.resize_with(t + 1, || Ring { entries: VecDeque::new() });
        }
        let ring = &mut rings[t];
        ring.expire(now.saturating_sub(self.window));
        ring.push(now, seq, sent);
    }

    /// A NACK for `stream`'s `track` at `now` asking for `seqs`: the packets found, in the
    /// order asked.
    pub fn handle_nack(
        &mut self,
        now: Instant,
        stream: StreamId,
        track: u8,
        seqs: impl IntoIterator<Item = u16>,
    ) -> Vec<Sent<B>> {
        let Some(rings) = self.streams.get_mut(&stream) else {
            self.stats.unknown_stream += 1;
            return Vec::new();
        };
        let Some(ring) = rings.get_mut(usize::from(track)) else {
            let n = seqs.into_iter().count() as u64;
            self.stats.nacks += 1;
            self.stats.requested += n;
            self.stats.missed += n;
            return Vec::new();
        };
        ring.expire(now.saturating_sub(self.window));
        self.stats.nacks += 1;
        let mut found = Vec::new();
        for seq in seqs {
            self.stats.requested += 1;
            match ring.find(seq).cloned() {
                Some(sent) => {
                    self.stats.resent += 1;
                    found.push(sent);
                }
                None => self.stats.missed += 1,
            }
        }
        found
    }

    /// A NACK for an SSRC no stream of this node has.
    pub fn handle_unknown(&mut self) {
        self.stats.unknown_stream += 1;
    }

    /// Counters so far.
    #[must_use]
    pub fn stats(&self) -> RetransmitStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Instant {
        Instant::from_nanos(n * 1_000_000)
    }

    fn datagram(seq: u16) -> Sent<Vec<u8>> {
        Sent::Datagram(Arc::from(seq.to_be_bytes().to_vec()))
    }

    fn seqs_of(found: &[Sent<Vec<u8>>]) -> Vec<u16> {
        found
            .iter()
            .map(|s| match s {
                Sent::Datagram(d) => u16::from_be_bytes([d[0], d[1]]),
                Sent::Block { header, .. } => header.sequence,
            })
            .collect()
    }

    #[test]
    fn answers_what_it_sent_within_the_window_and_counts_the_rest() {
        let (s, other) = (StreamId(1), StreamId(2));
        let mut b = RetransmitBuffer::new(Duration::from_millis(100));
        b.handle_add(s);
        // Sequence numbers wrap on the way; 10 ms apart.
        for (i, seq) in (65_530u16..=65_535).chain(0..4).enumerate() {
            b.handle_sent(ms(i as u64 * 10), s, 0, seq, datagram(seq));
        }
        b.handle_sent(ms(5), other, 0, 1, datagram(1)); // not added: not kept
        let found = b.handle_nack(ms(95), s, 0, [65_535, 2, 7]);
        assert_eq!(seqs_of(&found), [65_535, 2]);
        // At 125 ms the packets sent before 25 ms (the first three) are gone.
        let found = b.handle_nack(ms(125), s, 0, [65_530, 65_532, 65_533, 3]);
        assert_eq!(seqs_of(&found), [65_533, 3]);
        assert!(b.handle_nack(ms(125), other, 0, [1]).is_empty());
        let st = b.stats();
        assert_eq!(
            (st.nacks, st.requested, st.resent, st.missed, st.unknown_stream),
            (2, 7, 4, 3, 1)
        );
        b.handle_remove(s);
        assert!(!b.keeps(s));
    }

    #[test]
    fn a_number_sent_twice_answers_with_the_newest() {
        let s = StreamId(1);
        let mut b: RetransmitBuffer<Vec<u8>> = RetransmitBuffer::new(Duration::from_millis(100));
        b.handle_add(s);
        b.handle_sent(ms(0), s, 0, 9, Sent::Datagram(Arc::from(vec![0u8, 1])));
        b.handle_sent(ms(60), s, 0, 9, Sent::Datagram(Arc::from(vec![0u8, 2])));
        // The first copy expires; the newer one stays findable.
        let found = b.handle_nack(ms(120), s, 0, [9]);
        assert!(matches!(&found[..], [Sent::Datagram(d)] if d[1] == 2));
    }

    /// Each track keeps its own numbers: a NACK names one track's.
    #[test]
    fn tracks_are_kept_apart() {
        let s = StreamId(1);
        let mut b = RetransmitBuffer::new(Duration::from_millis(100));
        b.handle_add(s);
        b.handle_sent(ms(0), s, 0, 7, datagram(7));
        b.handle_sent(ms(1), s, 1, 7, Sent::Datagram(Arc::from(vec![1u8, 7])));
        let found = b.handle_nack(ms(2), s, 1, [7]);
        assert!(matches!(&found[..], [Sent::Datagram(d)] if d[0] == 1));
        assert!(b.handle_nack(ms(2), s, 2, [7, 8]).is_empty());
        assert_eq!(b.stats().missed, 2);
    }

    /// Numbers found across several wraps of the 16-bit space (binary search over the extended
    /// numbers), and numbers that went backwards (datagrams relayed out of order) still found.
    #[test]
    fn finds_numbers_across_wraps_and_out_of_order() {
        let s = StreamId(1);
        let mut b = RetransmitBuffer::new(Duration::from_secs(10));
        b.handle_add(s);
        let mut seq = 65_000u16;
        for i in 0..150_000u64 {
            b.handle_sent(Instant::from_nanos(i), s, 0, seq, datagram(seq));
            seq = seq.wrapping_add(1);
        }
        // The newest 65 536 are unambiguous; an older copy of a number is shadowed by the newest.
        let newest = seq.wrapping_sub(1);
        let found = b.handle_nack(ms(1), s, 0, [newest, newest.wrapping_sub(40_000), 7]);
        assert_eq!(seqs_of(&found), [newest, newest.wrapping_sub(40_000), 7]);
        // Out of order: 5, 3, 4, 6.
        let o = StreamId(2);
        b.handle_add(o);
        for (i, q) in [5u16, 3, 4, 6].into_iter().enumerate() {
            b.handle_sent(ms(i as u64), o, 0, q, datagram(q));
        }
        assert_eq!(seqs_of(&b.handle_nack(ms(5), o, 0, [3, 4, 5, 6, 9])), [3, 4, 5, 6]);
        assert_eq!(b.stats().missed, 1);
    }
}
