//! Retransmission requests: which packets are missing, which node to ask, and when (sans-IO).
//!
//! Why: Yima's retransmission-based error control (RBEC, Yima §2.6; Zimmermann et al., MMCN 2003)
//! repairs a loss by asking the node that sent the packet, because that node still holds it
//! (`isochron_dataplane::rtx`). In a cluster each node sends its own blocks, so the client must
//! find, for every missing packet, the node that sent it:
//!
//! - Within a block, consecutive packets come from one node. Every packet a node sends to an
//!   isochron client carries, next to its LSN, the RTP sequence number of its block's last packet
//!   (`isochron_rtp::block_end`). So any packet received of a block names the node that owes the
//!   packets after it up to the block's end, including a block's lost tail.
//! - A loss at the start of a block is before every packet received of it: it is asked of the node
//!   that sent the next packet received (the block that follows in the global order), which is
//!   right unless a whole block was lost; a number still missing after two requests is asked of
//!   every node (each answers only what it sent).
//!
//! When: a number is *missing* once a packet numbered above it arrived (the gap in the global
//! order), or once the stream went quiet for `tail_wait` while a block is known to continue past
//! the highest number received (a lost tail). It is asked for after `reorder_wait` (it may only
//! be late), then again every `retry` up to `tries` times, and forgotten once the jitter buffer
//! released past it. The loss per node is what each node's LSN gaps count (`super::lsn`).
//!
//! Both waits adapt, the way TCP's RACK widens its reordering window on a duplicate (RFC 8985
//! §6.2 step 4): a second copy of a packet already recovered shows a request was not needed.
//! Asked once, the packet was only late: the reorder wait doubles. Asked more than once, a
//! retransmission was still on its way: the retry interval doubles. Each grows at most once per
//! request made under its current value (a burst of duplicates is one signal), up to
//! `max_reorder_wait` and `max_retry`, and never shrinks within a session. A busy machine that
//! delays a sender or a retransmission thus costs a few duplicates, not one per packet.
//!
//! Not here: sockets, the NACK's wire format (`isochron_rtp::rtcp::write_nack`), the order of
//! release ([`super::reorder`]).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::time::{Duration, Instant};

/// When to ask for a missing packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RepairConfig {
    /// How long a gap may just be reordering before it is asked for.
    pub reorder_wait: Duration,
    /// How long before asking again.
    pub retry: Duration,
    /// Requests per packet at most.
    pub tries: u32,
    /// Silence after which a block known to continue past the highest number received is taken
    /// to have lost its tail.
    pub tail_wait: Duration,
    /// The most `reorder_wait` grows to (see the module docs).
    pub max_reorder_wait: Duration,
    /// The most `retry` grows to.
    pub max_retry: Duration,
}

impl Default for RepairConfig {
    fn default() -> Self {
        Self {
            reorder_wait: Duration::from_millis(10),
            retry: Duration::from_millis(150),
            tries: 4,
            tail_wait: Duration::from_millis(200),
            max_reorder_wait: Duration::from_millis(160),
            max_retry: Duration::from_millis(1_200),
        }
    }
}

/// Which sources to ask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ask {
    /// The source with this index (the caller's numbering, as given to
    /// [`Repairs::handle_packet`]).
    Source(usize),
    /// Every source.
    All,
}

/// One request to send: the RTP sequence numbers to ask `to` for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Whom to ask.
    pub to: Ask,
    /// The numbers (16-bit, as on the wire).
    pub seqs: Vec<u16>,
}

/// Counters, monotonic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RepairStats {
    /// Packets found missing.
    pub missing: u64,
    /// Packets asked for at least once.
    pub requested: u64,
    /// Requests made (numbers times tries; a request to every source counts once).
    pub requests: u64,
    /// Packets asked for that arrived before their slot was released.
    pub recovered: u64,
    /// Second copies of packets recovered: requests that were not needed.
    pub spurious: u64,
}

#[derive(Clone, Copy, Debug)]
struct Miss {
    tries: u32,
    /// When it is asked for next (its entry in the timer heap); `None`: not any more.
    due: Option<Instant>,
    /// The waits' generation when it was found missing.
    generation: u32,
}

/// A packet recovered, kept until released to tell a second copy from a new packet.
#[derive(Clone, Copy, Debug)]
struct Recovered {
    tries: u32,
    generation: u32,
}

/// The repair state of one session (see the module docs). Numbers are the jitter buffer's
/// extended ones ([`super::reorder::ReorderBuffer::extend`]).
#[derive(Clone, Debug)]
pub struct Repairs {
    config: RepairConfig,
    /// The waits now: `config`'s, grown by spurious requests (see the module docs).
    reorder_wait: Duration,
    retry: Duration,
    /// Bumped each time a wait grows: a duplicate of a packet found missing before then says
    /// nothing about the new wait.
    generation: u32,
    recovered: BTreeMap<u64, Recovered>,
    /// Blocks seen: last number → (lowest number received of it, its sender).
    blocks: BTreeMap<u64, (u64, usize)>,
    missing: BTreeMap<u64, Miss>,
    /// `(when, number)` of the requests to make, earliest first; an entry whose number is no
    /// longer missing, or is due at another time, is stale and skipped. Every call costs only
    /// what is due, whatever the number missing (a burst of loss must not make the client fall
    /// behind its socket).
    timers: BinaryHeap<Reverse<(Instant, u64)>>,
    highest: Option<u64>,
    last_arrival: Option<Instant>,
    stats: RepairStats,
}

/// Most numbers tracked as missing at once; a larger gap is not a loss to repair but a jump.
const MAX_MISSING: usize = 4096;

impl Repairs {
    /// An empty state.
    #[must_use]
    pub fn new(config: RepairConfig) -> Self {
        Self {
            config,
            reorder_wait: config.reorder_wait,
            retry: config.retry,
            generation: 0,
            recovered: BTreeMap::new(),
            blocks: BTreeMap::new(),
            missing: BTreeMap::new(),
            timers: BinaryHeap::new(),
            highest: None,
            last_arrival: None,
            stats: RepairStats::default(),
        }
    }

    /// The first number due (RTP-Info `seq`, RFC 2326 §12.33), before any packet arrived: a
    /// stream whose first packets are lost has them found missing by the first packet that
    /// comes, like any other gap.
    pub fn expect_first(&mut self, ext: u64) {
        if self.highest.is_none() {
            self.highest = ext.checked_sub(1);
        }
    }

    /// Packet `ext` arrived at `at` from source `source`, with the last number of its block if it
    /// carried one; `held` if the jitter buffer took it in time (not a duplicate, not late).
    /// Returns whether it repaired a loss asked for. A copy not held of a packet recovered is a
    /// request that was not needed: the waits grow (see the module docs).
    pub fn handle_packet(
        &mut self,
        at: Instant,
        ext: u64,
        source: usize,
        block_end: Option<u64>,
        held: bool,
    ) -> bool {
        self.last_arrival = Some(at);
        let mut repaired = false;
        if let Some(m) = self.missing.remove(&ext)
            && m.tries > 0
            && held
        {
            self.stats.recovered += 1;
            self.recovered.insert(ext, Recovered { tries: m.tries, generation: m.generation });
            repaired = true;
        } else if !held && let Some(r) = self.recovered.remove(&ext) {
            self.handle_spurious(r);
        }
        if let Some(end) = block_end.filter(|&e| e >= ext && e - ext < MAX_MISSING as u64) {
            self.blocks
                .entry(end)
                .and_modify(|(low, _)| *low = (*low).min(ext))
                .or_insert((ext, source));
        }
        match self.highest {
            Some(h) if ext > h => {
                self.note_missing(at, h + 1, ext);
                self.highest = Some(ext);
            }
            None => self.highest = Some(ext),
            Some(_) => {}
        }
        repaired
    }

    /// The requests due at `now`. `released` is the jitter buffer's next number to release:
    /// numbers below it are no longer worth asking for.
    pub fn poll_requests(&mut self, now: Instant, released: Option<u64>) -> Vec<Request> {
        if let Some(r) = released {
            while self.missing.first_key_value().is_some_and(|(&k, _)| k < r) {
                self.missing.pop_first();
            }
            while self.recovered.first_key_value().is_some_and(|(&k, _)| k < r) {
                self.recovered.pop_first();
            }
            while self.blocks.first_key_value().is_some_and(|(&k, _)| k < r) {
                self.blocks.pop_first();
            }
        }
        self.note_tail(now);
        let tries = self.config.tries;
        let mut by_source: BTreeMap<Option<usize>, Vec<u16>> = BTreeMap::new();
        while let Some(&Reverse((at, ext))) = self.timers.peek() {
            if at > now {
                break;
            }
            self.timers.pop();
            let Some(m) = self.missing.get_mut(&ext) else { continue };
            if m.due != Some(at) {
                continue;
            }
            if m.tries == 0 {
                self.stats.requested += 1;
            }
            m.tries += 1;
            self.stats.requests += 1;
            m.due = (m.tries < tries).then_some(now + self.retry);
            if let Some(next) = m.due {
                self.timers.push(Reverse((next, ext)));
            }
            let to = if m.tries > 2 { None } else { Self::owner(&self.blocks, ext) };
            by_source.entry(to).or_default().push(ext as u16);
        }
        by_source
            .into_iter()
            .map(|(to, seqs)| Request { to: to.map_or(Ask::All, Ask::Source), seqs })
            .collect()
    }

    /// When [`Self::poll_requests`] next has something to do without a new arrival (possibly
    /// earlier: a request whose packet came meanwhile).
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let c = self.config;
        let ask = self.timers.peek().map(|Reverse((at, _))| *at);
        let tail = match (self.highest, self.last_arrival) {
            (Some(h), Some(at)) if self.blocks.range(h + 1..).next().is_some() => {
                Some(at + c.tail_wait)
            }
            _ => None,
        };
        [ask, tail].into_iter().flatten().min()
    }

    /// Counters so far.
    #[must_use]
    pub fn stats(&self) -> RepairStats {
        self.stats
    }

    /// The reorder wait and retry interval now (grown from the configuration's by spurious
    /// requests).
    #[must_use]
    pub fn waits(&self) -> (Duration, Duration) {
        (self.reorder_wait, self.retry)
    }

    /// A second copy of a recovered packet arrived: it was asked for without need. A request made
    /// under the current waits makes the one at fault grow.
    fn handle_spurious(&mut self, r: Recovered) {
        self.stats.spurious += 1;
        if r.generation != self.generation {
            return;
        }
        let c = self.config;
        let (wait, max) = if r.tries <= 1 {
            (&mut self.reorder_wait, c.max_reorder_wait)
        } else {
            (&mut self.retry, c.max_retry)
        };
        let grown = (*wait * 2).min(max);
        if grown > *wait {
            *wait = grown;
            self.generation += 1;
        }
    }

    /// Numbers `from..to` are missing, found at `at`.
    fn note_missing(&mut self, at: Instant, from: u64, to: u64) {
        for ext in from..to {
            if self.missing.len() >= MAX_MISSING {
                break;
            }
            if let std::collections::btree_map::Entry::Vacant(v) = self.missing.entry(ext) {
                let due = at + self.reorder_wait;
                v.insert(Miss { tries: 0, due: Some(due), generation: self.generation });
                self.timers.push(Reverse((due, ext)));
                self.stats.missing += 1;
            }
        }
    }

    /// After `tail_wait` of silence, the numbers past the highest received up to the end of a
    /// block seen are missing (a lost tail).
    fn note_tail(&mut self, now: Instant) {
        let (Some(h), Some(at)) = (self.highest, self.last_arrival) else { return };
        if now < at + self.config.tail_wait {
            return;
        }
        let Some(end) = self.blocks.range(h + 1..).map(|(&e, _)| e).max() else { return };
        // Found now, but lost at least `tail_wait` ago: ask at once.
        self.note_missing(now.checked_sub(self.reorder_wait).unwrap_or(now), h + 1, end + 1);
        self.highest = Some(end);
    }

    /// The source that sent (or, at a block's start, most likely sent) number `ext`.
    fn owner(blocks: &BTreeMap<u64, (u64, usize)>, ext: u64) -> Option<usize> {
        blocks.range(ext..).next().map(|(_, &(_, source))| source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(t0: Instant, n: u64) -> Instant {
        t0 + Duration::from_millis(n)
    }

    #[test]
    fn a_loss_inside_a_block_is_asked_of_its_sender_once_reordering_is_ruled_out() {
        let t0 = Instant::now();
        let mut r = Repairs::new(RepairConfig::default());
        // Block 100..=103 from source 0, block 104..=106 from source 1; 102 and 105 lost.
        for (i, (ext, src, end)) in
            [(100, 0, 103), (101, 0, 103), (103, 0, 103), (104, 1, 106), (106, 1, 106)]
                .into_iter()
                .enumerate()
        {
            assert!(!r.handle_packet(ms(t0, i as u64), ext, src, Some(end), true));
        }
        assert_eq!(r.poll_requests(ms(t0, 5), Some(100)), [], "within the reorder wait");
        assert_eq!(r.poll_timeout(), Some(ms(t0, 12)), "102 found at 2 ms, + 10 ms");
        let want = [
            Request { to: Ask::Source(0), seqs: vec![102] },
            Request { to: Ask::Source(1), seqs: vec![105] },
        ];
        assert_eq!(r.poll_requests(ms(t0, 14), Some(100)), want);
        assert_eq!(r.poll_requests(ms(t0, 20), Some(100)), [], "retry after 150 ms");
        // 102 comes back in time: recovered; 105 is asked again.
        assert!(r.handle_packet(ms(t0, 30), 102, 0, None, true));
        assert_eq!(
            r.poll_requests(ms(t0, 170), Some(100)),
            [Request { to: Ask::Source(1), seqs: vec![105] }]
        );
        // The third try goes to every source.
        assert_eq!(
            r.poll_requests(ms(t0, 330), Some(100)),
            [Request { to: Ask::All, seqs: vec![105] }]
        );
        let s = r.stats();
        assert_eq!((s.missing, s.requested, s.requests, s.recovered), (2, 2, 4, 1));
        // Released past: forgotten.
        assert_eq!(r.poll_requests(ms(t0, 1_000), Some(107)), []);
        assert_eq!(r.poll_timeout(), None);
    }

    #[test]
    fn the_first_packets_lost_are_asked_for_once_the_first_one_comes() {
        let t0 = Instant::now();
        let mut r = Repairs::new(RepairConfig::default());
        // PLAY said 100 comes first; 100 and 101 are lost, 102..=104 is source 1's block.
        r.expect_first(100);
        r.handle_packet(ms(t0, 0), 102, 1, Some(104), true);
        assert_eq!(
            r.poll_requests(ms(t0, 10), Some(100)),
            [Request { to: Ask::Source(1), seqs: vec![100, 101] }]
        );
        // Without it, the first packet received is where the stream starts.
        let mut r = Repairs::new(RepairConfig::default());
        r.handle_packet(ms(t0, 0), 102, 1, Some(104), true);
        assert_eq!(r.poll_requests(ms(t0, 10), Some(102)), []);
    }

    #[test]
    fn a_lost_start_of_block_asks_the_next_sender_and_a_lost_tail_is_found_by_silence() {
        let t0 = Instant::now();
        let mut r = Repairs::new(RepairConfig::default());
        // Source 0 sends 10..=13 but 13 is lost (the stream's last block, its tail).
        // Before it, source 1's block 6..=9 lost 6 and 7 (its start).
        r.handle_packet(ms(t0, 0), 5, 2, Some(5), true);
        r.handle_packet(ms(t0, 1), 8, 1, Some(9), true);
        r.handle_packet(ms(t0, 2), 9, 1, Some(9), true);
        r.handle_packet(ms(t0, 3), 10, 0, Some(13), true);
        r.handle_packet(ms(t0, 4), 11, 0, Some(13), true);
        r.handle_packet(ms(t0, 5), 12, 0, Some(13), true);
        assert_eq!(
            r.poll_requests(ms(t0, 20), Some(5)),
            [Request { to: Ask::Source(1), seqs: vec![6, 7] }]
        );
        assert_eq!(r.poll_timeout(), Some(ms(t0, 170)), "the retry comes before the tail's 205");
        // Silence: at 205 ms the tail 13 is missing and asked for at once, of source 0 (6 and 7
        // were released meanwhile).
        let got = r.poll_requests(ms(t0, 205), Some(8));
        assert_eq!(got, [Request { to: Ask::Source(0), seqs: vec![13] }]);
        assert!(r.handle_packet(ms(t0, 206), 13, 0, None, true));
        // A late copy (not held) is not a recovery.
        assert!(!r.handle_packet(ms(t0, 207), 6, 1, None, false));
    }

    #[test]
    fn a_copy_of_a_packet_recovered_makes_the_wait_at_fault_grow_once_per_signal() {
        let t0 = Instant::now();
        let mut r = Repairs::new(RepairConfig::default());
        // 11 and 12 are only late: found at 2 ms, asked at 12, then both the originals (held)
        // and the resends (duplicates) come.
        for (t, ext) in [(0, 10), (2, 13)] {
            r.handle_packet(ms(t0, t), ext, 0, Some(20), true);
        }
        assert_eq!(r.poll_requests(ms(t0, 12), Some(10)).len(), 1);
        assert!(r.handle_packet(ms(t0, 13), 11, 0, None, true));
        assert!(r.handle_packet(ms(t0, 13), 12, 0, None, true));
        r.handle_packet(ms(t0, 14), 11, 0, None, false);
        r.handle_packet(ms(t0, 14), 12, 0, None, false);
        let wait = Duration::from_millis;
        assert_eq!(r.waits(), (wait(20), wait(150)), "one signal: one doubling");
        assert_eq!(r.stats().spurious, 2);
        // A new gap waits 20 ms.
        r.handle_packet(ms(t0, 20), 15, 0, Some(20), true);
        assert_eq!(r.poll_requests(ms(t0, 39), Some(10)), []);
        assert_eq!(r.poll_requests(ms(t0, 40), Some(10)).len(), 1);
        // 14 is asked again at 190 ms; the first resend arrives after that, then the second: the
        // retry was too short.
        assert_eq!(r.poll_requests(ms(t0, 190), Some(10)).len(), 1);
        assert!(r.handle_packet(ms(t0, 200), 14, 0, None, true));
        r.handle_packet(ms(t0, 201), 14, 0, None, false);
        assert_eq!(r.waits(), (wait(20), wait(300)));
        // A copy after release says nothing.
        assert_eq!(r.poll_requests(ms(t0, 300), Some(16)), []);
        r.handle_packet(ms(t0, 301), 14, 0, None, false);
        assert_eq!(r.stats().spurious, 3);
    }
}
