//! The jitter buffer: puts one session's RTP packets back in global order.
//!
//! Why: a cluster's nodes each pace their own packets on a shared clock and send them from
//! their own addresses (Yima §2.2), so a client receives one session slightly out of order. The
//! RTP sequence number is `offset + GSN` (the global order, `isochron_rtsp::rtp_seq`); unwrapped
//! to 64 bits (RFC 3550 §A.1's extended sequence number) it orders the packets for the player.
//!
//! The rule: the packet next in order is released as soon as it is there (the gap before a
//! packet is filled); a packet that has waited `hold` since it arrived is released even though
//! packets before it are missing, and those are then *lost*. A packet that comes after its slot
//! was released is *late* (not released; a lost one it fills counts late instead of lost), one
//! that comes twice a *duplicate*; one that comes after a packet numbered above it, and in time,
//! *reordered*. Until the first packet's number is known ([`ReorderBuffer::set_start`], from
//! RTP-Info), the first packet released is the lowest received within `hold` of the first
//! arrival.
//!
//! The slots are a ring indexed by the extended number, grown (never shrunk) when the packets
//! held span more of it; in steady state a packet costs no allocation. A copy of a number already
//! decided is told late or duplicate by the numbers skipped as lost, which are remembered apart
//! from the ring (as far back as 16-bit numbers can be ordered, `MAX_SPAN`): the ring spans only
//! the packets held, a few milliseconds of a fast stream, while a retransmission asked for twice
//! can bring its second copy hundreds of milliseconds after the first (every number below the
//! next to release was either released or lost, so one not remembered lost is a duplicate).
//!
//! Not here: payloads, sources, clocks (`now` is an argument), sockets.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The extended number of the first packet is its 16-bit number plus this, so that packets
/// numbered below it (arrived later) still unwrap to a positive number.
const BASE: u64 = 1 << 16;
/// A packet more than this far ahead of the oldest one held is not held (a wild jump, or a
/// window too large for 16-bit numbers to order): it counts as late.
const MAX_SPAN: u64 = 1 << 15;
/// The ring's first size.
const INITIAL_SLOTS: usize = 1 << 10;

/// What became of a packet given to [`ReorderBuffer::push`].
#[derive(Debug, PartialEq, Eq)]
pub enum Arrival<T> {
    /// Held until its turn; `reordered` if a packet numbered above it came first.
    Held {
        /// Whether it arrived after a packet numbered above it.
        reordered: bool,
    },
    /// Already held or released: the item comes back.
    Duplicate(T),
    /// Its slot was released already (or it is too far ahead to hold): the item comes back.
    Late(T),
}

/// Counts of a [`ReorderBuffer`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReorderStats {
    /// Packets released in order.
    pub released: u64,
    /// Numbers skipped at release and never received since.
    pub lost: u64,
    /// Packets that arrived after their slot was released.
    pub late: u64,
    /// Packets that arrived twice (or more).
    pub duplicates: u64,
    /// Packets held that arrived after one numbered above them.
    pub reordered: u64,
}

/// A held packet: its extended number and what is held for it.
type Slot<T> = Option<(u64, T)>;

/// The jitter buffer of one session (see the module docs); `T` is what is held per packet.
#[derive(Clone, Debug)]
pub struct ReorderBuffer<T> {
    hold: Duration,
    slots: Vec<Slot<T>>,
    /// The next extended number to release, once known.
    next: Option<u64>,
    /// The highest extended number received.
    highest: Option<u64>,
    /// Before the start is known: the lowest number held.
    lowest: Option<u64>,
    /// The first number released or skipped: numbers below it are late.
    first: Option<u64>,
    /// Numbers skipped as lost and not received since, ascending, none more than `MAX_SPAN`
    /// below `next`.
    skipped: VecDeque<u64>,
    /// Held packets in arrival order: `(arrival, ext)`; entries below `next` are stale.
    queue: VecDeque<(Instant, u64)>,
    held: usize,
    /// Release everything held without waiting.
    flushing: bool,
    stats: ReorderStats,
}

impl<T> ReorderBuffer<T> {
    /// A buffer that holds a packet at most `hold` for the packets before it.
    #[must_use]
    pub fn new(hold: Duration) -> Self {
        Self {
            hold,
            slots: (0..INITIAL_SLOTS).map(|_| None).collect(),
            next: None,
            highest: None,
            first: None,
            skipped: VecDeque::new(),
            lowest: None,
            queue: VecDeque::with_capacity(INITIAL_SLOTS),
            held: 0,
            flushing: false,
            stats: ReorderStats::default(),
        }
    }

    /// The first packet's number (RTP-Info `seq`, RFC 2326 §12.33): packets before it are late,
    /// and it is released as soon as it comes. Only before any packet arrived.
    pub fn set_start(&mut self, seq: u16) {
        if self.highest.is_none() {
            self.next = Some(BASE + u64::from(seq));
        }
    }

    /// Counts so far.
    #[must_use]
    pub fn stats(&self) -> ReorderStats {
        self.stats
    }

    /// The extended number released next, once known: numbers below it are decided.
    #[must_use]
    pub fn next(&self) -> Option<u64> {
        self.next
    }

    /// Packets held.
    #[must_use]
    pub fn held(&self) -> usize {
        self.held
    }

    /// The extended number of 16-bit `seq`: the one nearest the highest received (or the start).
    #[must_use]
    pub fn extend(&self, seq: u16) -> u64 {
        match self.highest.or(self.next) {
            None => BASE + u64::from(seq),
            Some(r) => r.wrapping_add_signed(i64::from(seq.wrapping_sub(r as u16) as i16)),
        }
    }

    /// Packet `seq` arrived at `at` (arrivals in time order) carrying `item`.
    pub fn push(&mut self, at: Instant, seq: u16, item: T) -> Arrival<T> {
        let ext = self.extend(seq);
        if let Some(next) = self.next
            && ext < next
        {
            if self.first.is_none_or(|f| ext < f) {
                self.stats.late += 1;
                return Arrival::Late(item);
            }
            return match self.skipped.binary_search(&ext) {
                Ok(i) => {
                    // It came after all, too late to be released.
                    self.skipped.remove(i);
                    self.stats.lost -= 1;
                    self.stats.late += 1;
                    Arrival::Late(item)
                }
                Err(_) => {
                    self.stats.duplicates += 1;
                    Arrival::Duplicate(item)
                }
            };
        }
        let low = self.next.or(self.lowest).map_or(ext, |l| l.min(ext));
        let high = self.highest.map_or(ext, |h| h.max(ext));
        if high - low >= MAX_SPAN {
            self.stats.late += 1;
            return Arrival::Late(item);
        }
        if high - low >= self.slots.len() as u64 {
            // Below MAX_SPAN: fits a usize.
            self.grow((high - low + 1).next_power_of_two() as usize);
        }
        let mask = self.slots.len() as u64 - 1;
        let slot = &mut self.slots[(ext & mask) as usize];
        if slot.as_ref().is_some_and(|(e, _)| *e == ext) {
            self.stats.duplicates += 1;
            return Arrival::Duplicate(item);
        }
        *slot = Some((ext, item));
        self.held += 1;
        let at = self.queue.back().map_or(at, |(last, _)| at.max(*last));
        self.queue.push_back((at, ext));
        let reordered = self.highest.is_some_and(|h| ext < h);
        if reordered {
            self.stats.reordered += 1;
        }
        self.highest = Some(high);
        if self.next.is_none() {
            self.lowest = Some(low);
        }
        Arrival::Held { reordered }
    }

    /// The next packet in order if it may go at `now`: `(extended number, item)`. Numbers
    /// skipped to reach it are counted lost.
    pub fn pop(&mut self, now: Instant) -> Option<(u64, T)> {
        loop {
            if self.held == 0 {
                self.queue.clear();
                return None;
            }
            let Some(next) = self.next else {
                // The start is not known: wait for the first arrival's hold to end.
                let (first, _) = *self.queue.front()?;
                if !self.due(first, now) {
                    return None;
                }
                self.next = self.lowest.take();
                self.first = self.next;
                continue;
            };
            let mask = self.slots.len() as u64 - 1;
            let i = (next & mask) as usize;
            if self.first.is_none() {
                self.first = Some(next);
            }
            if self.slots[i].as_ref().is_some_and(|(e, _)| *e == next) {
                let (_, item) = self.slots[i].take()?;
                self.next = Some(next + 1);
                self.held -= 1;
                self.stats.released += 1;
                return Some((next, item));
            }
            // A gap: skip it once the oldest packet held has waited its time.
            while self.queue.front().is_some_and(|(_, e)| *e < next) {
                self.queue.pop_front();
            }
            let (oldest, _) = *self.queue.front()?;
            if !self.due(oldest, now) {
                return None;
            }
            self.stats.lost += 1;
            self.skipped.push_back(next);
            while self.skipped.front().is_some_and(|&e| next - e > MAX_SPAN) {
                self.skipped.pop_front();
            }
            self.next = Some(next + 1);
        }
    }

    /// When [`Self::pop`] next has something to release without a new arrival (`None`: nothing
    /// held). Exact after `pop` returned `None`.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.held == 0 {
            return None;
        }
        let (oldest, _) = *self.queue.front()?;
        Some(if self.flushing { oldest } else { oldest + self.hold })
    }

    /// Releases everything held from now on without waiting (the stream ended): what is still
    /// missing between the packets held is lost.
    pub fn flush(&mut self) {
        self.flushing = true;
    }

    fn due(&self, arrival: Instant, now: Instant) -> bool {
        self.flushing || arrival + self.hold <= now
    }

    /// Re-places every held packet in a ring of `size` (a power of two ≥ the span held).
    fn grow(&mut self, size: usize) {
        let size = size.max(self.slots.len() * 2);
        let old = std::mem::replace(&mut self.slots, (0..size).map(|_| None).collect());
        let mask = size as u64 - 1;
        for (ext, item) in old.into_iter().flatten() {
            self.slots[(ext & mask) as usize] = Some((ext, item));
        }
        self.queue.reserve(size.saturating_sub(self.queue.capacity()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOLD: Duration = Duration::from_millis(100);

    fn ms(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    /// A buffer told that packet `first` comes first, and the time origin.
    fn started(first: u16) -> (Instant, ReorderBuffer<u16>) {
        let mut b = ReorderBuffer::new(HOLD);
        b.set_start(first);
        (Instant::now(), b)
    }

    /// Releases everything that may go at `now`, as 16-bit numbers.
    fn drain(b: &mut ReorderBuffer<u16>, now: Instant) -> Vec<u16> {
        std::iter::from_fn(|| b.pop(now))
            .map(|(ext, seq)| {
                assert_eq!(ext as u16, seq, "extended number matches the item");
                seq
            })
            .collect()
    }

    /// Every permutation of `0..n` (Heap's algorithm).
    fn permutations(n: usize) -> Vec<Vec<u16>> {
        fn heap(k: usize, a: &mut Vec<u16>, out: &mut Vec<Vec<u16>>) {
            if k <= 1 {
                out.push(a.clone());
                return;
            }
            for i in 0..k {
                heap(k - 1, a, out);
                let j = if k.is_multiple_of(2) { i } else { 0 };
                a.swap(j, k - 1);
            }
        }
        let mut out = Vec::new();
        heap(n, &mut (0..n as u16).collect(), &mut out);
        out
    }

    #[test]
    fn every_order_of_a_small_window_comes_out_in_order() {
        for n in 1..=6 {
            for perm in permutations(n) {
                for start in [0u16, 1000, 65_533] {
                    let (t0, mut b) = started(start);
                    let mut out = Vec::new();
                    let mut highest: Option<u16> = None;
                    let mut reordered = 0;
                    for (i, &k) in perm.iter().enumerate() {
                        let seq = start.wrapping_add(k);
                        let at = ms(t0, i as u64);
                        assert!(matches!(b.push(at, seq, seq), Arrival::Held { .. }));
                        if highest.is_some_and(|h| k < h) {
                            reordered += 1;
                        }
                        highest = highest.max(Some(k));
                        out.extend(drain(&mut b, at));
                    }
                    let want: Vec<u16> = (0..n as u16).map(|k| start.wrapping_add(k)).collect();
                    assert_eq!(out, want, "{perm:?} from {start}: released as soon as in order");
                    let s = b.stats();
                    assert_eq!((s.lost, s.late, s.duplicates), (0, 0, 0), "{perm:?}");
                    assert_eq!(s.reordered, reordered, "{perm:?}");
                    assert_eq!(b.held(), 0);
                    assert_eq!(b.poll_timeout(), None);
                }
            }
        }
    }

    #[test]
    fn without_a_start_the_lowest_within_the_hold_goes_first() {
        for perm in permutations(5) {
            let t0 = Instant::now();
            let mut b = ReorderBuffer::new(HOLD);
            for (i, &k) in perm.iter().enumerate() {
                let seq = 65_534u16.wrapping_add(k);
                b.push(ms(t0, i as u64), seq, seq);
                assert!(
                    drain(&mut b, ms(t0, i as u64)).is_empty(),
                    "held until the first hold ends"
                );
            }
            assert_eq!(b.poll_timeout(), Some(ms(t0, 100)));
            assert_eq!(drain(&mut b, ms(t0, 100)), [65_534, 65_535, 0, 1, 2], "{perm:?}");
        }
    }

    #[test]
    fn the_sequence_number_wraps_many_times() {
        let (t0, mut b) = started(65_000);
        let mut out = Vec::new();
        // 200 000 packets, every pair swapped: 3 wraps.
        for i in 0..200_000u64 {
            let k = i ^ 1;
            let seq = (65_000 + k) as u16;
            let at = ms(t0, i / 10);
            b.push(at, seq, seq);
            while let Some((ext, _)) = b.pop(at) {
                out.push(ext);
            }
        }
        assert_eq!(out.len(), 200_000);
        assert!(out.windows(2).all(|w| w[1] == w[0] + 1), "consecutive extended numbers");
        assert_eq!(out[199_999] - out[0], 199_999);
        assert_eq!(b.stats().reordered, 100_000);
        assert_eq!(b.stats().lost, 0);
    }

    #[test]
    fn duplicates_are_told_from_late_packets() {
        let (t0, mut b) = started(10);
        b.push(ms(t0, 0), 10, 10);
        assert_eq!(drain(&mut b, ms(t0, 0)), [10]);
        assert_eq!(b.push(ms(t0, 1), 10, 10), Arrival::Duplicate(10), "already released");
        b.push(ms(t0, 2), 12, 12);
        assert_eq!(b.push(ms(t0, 3), 12, 12), Arrival::Duplicate(12), "held");
        // 11 never comes in time: 12 goes at its hold's end, 11 is lost …
        assert!(drain(&mut b, ms(t0, 101)).is_empty());
        assert_eq!(b.poll_timeout(), Some(ms(t0, 102)));
        assert_eq!(drain(&mut b, ms(t0, 102)), [12]);
        assert_eq!(b.stats().lost, 1);
        // … until it comes late: late, not lost; a second copy of it is a duplicate.
        assert_eq!(b.push(ms(t0, 150), 11, 11), Arrival::Late(11));
        assert_eq!(b.push(ms(t0, 151), 11, 11), Arrival::Duplicate(11));
        assert_eq!(b.push(ms(t0, 152), 9, 9), Arrival::Late(9), "before the start");
        let s = b.stats();
        assert_eq!((s.released, s.lost, s.late, s.duplicates), (2, 0, 2, 3));
    }

    #[test]
    fn a_copy_far_behind_the_ring_is_still_a_duplicate_and_a_lost_one_still_late() {
        // Packets 0..10 000 in order, 5 missing: the ring never grows past its first size,
        // which the copies below come far behind (a retransmission asked for twice, at
        // tens of thousands of packets a second).
        let (t0, mut b) = started(0);
        for seq in (0..10_000u16).filter(|&s| s != 5) {
            b.push(ms(t0, u64::from(seq) / 10), seq, seq);
            drain(&mut b, ms(t0, u64::from(seq) / 10));
        }
        assert_eq!(b.slots.len(), INITIAL_SLOTS);
        let (s, now) = (b.stats(), ms(t0, 1_000));
        assert_eq!((s.released, s.lost), (9_999, 1));
        assert_eq!(b.push(now, 7, 7), Arrival::Duplicate(7), "released 9 993 packets ago");
        assert_eq!(b.push(now, 5, 5), Arrival::Late(5), "skipped as lost");
        assert_eq!(b.push(now, 5, 5), Arrival::Duplicate(5), "a second late copy");
        let s = b.stats();
        assert_eq!((s.lost, s.late, s.duplicates), (0, 1, 2));
    }

    #[test]
    fn a_gap_never_filled_is_lost_once_the_packets_after_it_waited() {
        let (t0, mut b) = started(0);
        for (i, seq) in [0u16, 1, 4, 5, 6].into_iter().enumerate() {
            b.push(ms(t0, i as u64 * 10), seq, seq);
        }
        assert_eq!(drain(&mut b, ms(t0, 50)), [0, 1]);
        // 4 arrived at 20 ms: it and those after it go at 120 ms, 2 and 3 lost.
        assert_eq!(b.poll_timeout(), Some(ms(t0, 120)));
        assert!(drain(&mut b, ms(t0, 119)).is_empty());
        assert_eq!(drain(&mut b, ms(t0, 120)), [4, 5, 6]);
        assert_eq!(b.stats().lost, 2);
        // A gap at the end of the stream: the flush releases what is held at once.
        b.push(ms(t0, 130), 9, 9);
        b.flush();
        assert_eq!(drain(&mut b, ms(t0, 130)), [9]);
        assert_eq!(b.stats().lost, 4);
        assert_eq!(b.stats().released, 6);
    }

    #[test]
    fn a_wide_window_grows_the_ring_and_a_wild_jump_is_not_held() {
        let (t0, mut b) = started(0);
        // 5 000 packets held behind a missing first one.
        for seq in 1..=5_000u16 {
            b.push(t0, seq, seq);
        }
        assert_eq!(b.held(), 5_000);
        assert_eq!(b.push(t0, 0, 0), Arrival::Held { reordered: true });
        let out = drain(&mut b, t0);
        assert_eq!(out, (0..=5_000).collect::<Vec<u16>>());
        // Ahead by less than half the number space each time, but 55 000 past the oldest held.
        assert_eq!(b.push(t0, 30_000, 2), Arrival::Held { reordered: false });
        assert_eq!(b.push(t0, 60_000, 3), Arrival::Late(3), "beyond the span");
        assert_eq!(b.held(), 1);
    }
}
