//! Packing a feed's units into *chunks*: small blocks of the store's native format (version 2,
//! `docs/design/block-format.md`) that hold a few tens of milliseconds of the feed each.
//!
//! Why blocks: the sender paces and stamps blocks (a packet's send time, track, RTP time, track
//! sequence number and marker are all in its entry), and hands interleaved connections a
//! reference to the block rather than a copy. A chunk of the live edge is therefore sent to N
//! viewers as one shared buffer, by the very code that sends a stored object; and since its
//! packets are numbered as the recording's are (one GSN counter, each track's `track_seq`), a
//! viewer can later move between the recording and the edge without renumbering (time-shift,
//! `docs/design/live.md`).
//!
//! Why small: a packet can leave only once its chunk is sealed. A chunk is sealed when it spans
//! [`ChunkConfig::span`] of arrivals, holds [`ChunkConfig::bytes`], or has been open for `span`
//! (a timer, so that a quiet feed is not held back): the live latency this adds is at most the
//! span.

use std::collections::VecDeque;
use std::time::Duration;

use isochron_base::{
    BlockIndex, BlockKey, Bytes, Gsn, Instant, MediaTime, ObjectId, Position, TrackSeqs,
};
use isochron_media::native::NativeUnit;
use isochron_store::block::{BlockBuilder, NativeMeta};

/// How chunks are cut.
#[derive(Clone, Copy, Debug)]
pub struct ChunkConfig {
    /// The longest a chunk stays open (from its first unit's arrival).
    pub span: Duration,
    /// The most payload bytes a chunk holds.
    pub bytes: usize,
}

impl Default for ChunkConfig {
    fn default() -> Self {
        Self { span: Duration::from_millis(20), bytes: 48 * 1024 }
    }
}

/// What the edge needs to know of a chunk (its bytes go to the glue, which holds them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkInfo {
    /// Its index among the feed's chunks (also its block index).
    pub index: BlockIndex,
    /// Its first packet.
    pub first: Position,
    /// The seek points that start in it (a viewer may start at one), in order.
    pub keys: Vec<Position>,
    /// Its packets.
    pub packets: u32,
    /// The send time of its last packet.
    pub last_time: MediaTime,
}

/// One sealed chunk: its description and its encoded bytes (a block, padded to its alignment).
#[derive(Clone, Debug)]
pub struct Chunk {
    /// What it holds.
    pub info: ChunkInfo,
    /// The encoded block.
    pub bytes: Vec<u8>,
}

struct Open {
    builder: BlockBuilder,
    opened: Instant,
    info: ChunkInfo,
    bytes: usize,
}

/// Packs the units of one feed into chunks, in arrival order (see the module docs).
pub struct ChunkPacker {
    object: ObjectId,
    config: ChunkConfig,
    next_index: u32,
    next_gsn: u64,
    /// Each track's next `track_seq`: a position's per-track numbers.
    track_next: Vec<u32>,
    open: Option<Open>,
    sealed: VecDeque<Chunk>,
}

/// The block size a chunk is built within: room for `bytes` of payload and its entries, or one
/// largest RTP payload.
fn capacity(bytes: usize) -> Bytes {
    let room = bytes.max(usize::from(u16::MAX)) * 2 + 4096;
    Bytes(room.next_multiple_of(4096) as u64)
}

impl ChunkPacker {
    /// A packer of the feed recorded as `object`, of `tracks` tracks.
    #[must_use]
    pub fn new(object: ObjectId, tracks: usize, config: ChunkConfig) -> Self {
        Self {
            object,
            config,
            next_index: 0,
            next_gsn: 0,
            track_next: vec![0; tracks],
            open: None,
            sealed: VecDeque::new(),
        }
    }

    /// The position of the next unit: its GSN, send time and each track's next number.
    fn position(&self, time: MediaTime) -> Position {
        Position { gsn: Gsn(self.next_gsn), time, tracks: TrackSeqs::new(&self.track_next) }
    }

    /// A unit arrived (in the order [`isochron_media::live::LiveIngest`] gives them), at `now`.
    pub fn push(&mut self, now: Instant, unit: &NativeUnit) {
        if unit.payload.is_empty() || unit.payload.len() > usize::from(u16::MAX) {
            return;
        }
        let full = self.open.as_ref().is_some_and(|o| {
            o.bytes + unit.payload.len() > self.config.bytes || !o.builder.fits(unit.payload.len())
        });
        if full {
            self.seal();
        }
        let t = usize::from(unit.track);
        if t >= self.track_next.len() {
            self.track_next.resize(t + 1, 0);
        }
        // The unit's own number is its track's next (the ingest numbers from the first packet).
        self.track_next[t] = unit.track_seq;
        let here = self.position(unit.send_time);
        let open = self.open.get_or_insert_with(|| {
            let key = BlockKey::new(self.object, BlockIndex(self.next_index));
            Open {
                builder: BlockBuilder::new_native(key, here.gsn, capacity(self.config.bytes)),
                opened: now,
                info: ChunkInfo {
                    index: BlockIndex(self.next_index),
                    first: here,
                    keys: Vec::new(),
                    packets: 0,
                    last_time: unit.send_time,
                },
                bytes: 0,
            }
        });
        if unit.random_access {
            open.info.keys.push(here);
        }
        open.builder.push_native(
            NativeMeta {
                send_time: unit.send_time,
                track: unit.track,
                rtp_time: unit.rtp_time,
                track_seq: unit.track_seq,
                marker: unit.marker,
                random_access: unit.random_access,
            },
            &unit.payload,
        );
        open.bytes += unit.payload.len();
        open.info.packets += 1;
        open.info.last_time = unit.send_time;
        self.next_gsn += 1;
        self.track_next[t] = unit.track_seq.wrapping_add(1);
        if now.saturating_duration_since(open.opened) >= self.config.span {
            self.seal();
        }
    }

    /// Seals the open chunk if it has been open for the span.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.poll_timeout().is_some_and(|t| t <= now) {
            self.seal();
        }
    }

    /// When the open chunk is to be sealed.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.open.as_ref().map(|o| o.opened + self.config.span)
    }

    /// The feed ended: the open chunk is sealed.
    pub fn finish(&mut self) {
        self.seal();
    }

    fn seal(&mut self) {
        let Some(open) = self.open.take() else { return };
        self.next_index += 1;
        self.sealed.push_back(Chunk { info: open.info, bytes: open.builder.finish() });
    }

    /// The next sealed chunk.
    pub fn poll_chunk(&mut self) -> Option<Chunk> {
        self.sealed.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use isochron_store::block::Block;

    fn unit(track: u8, seq: u32, ms: u64, key: bool) -> NativeUnit {
        NativeUnit {
            track,
            send_time: MediaTime::from_nanos(ms * 1_000_000),
            rtp_time: (ms * 90) as u32,
            track_seq: seq,
            marker: true,
            random_access: key,
            npt: MediaTime::from_nanos(ms * 1_000_000),
            payload: vec![track; 1000],
        }
    }

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn chunks_are_sealed_by_span_and_size_and_number_packets_as_the_recording_does() {
        let config = ChunkConfig { span: Duration::from_millis(20), bytes: 3000 };
        let mut p = ChunkPacker::new(ObjectId(7), 2, config);
        p.push(at(0), &unit(0, 0, 0, true));
        p.push(at(1), &unit(1, 0, 1, false));
        p.push(at(2), &unit(0, 1, 2, false));
        assert!(p.poll_chunk().is_none());
        // A fourth would pass 3000 bytes: the first chunk is sealed before it.
        p.push(at(3), &unit(1, 1, 3, false));
        let c = p.poll_chunk().unwrap();
        assert_eq!(c.info.index, BlockIndex(0));
        assert_eq!(c.info.packets, 3);
        assert_eq!(c.info.keys, vec![Position::start_of(2)]);
        let block = Block::parse(c.bytes.as_slice(), None).unwrap();
        assert_eq!(block.packet_count(), 3);
        assert!(block.packet(0).random_access);
        // The open chunk is sealed by the timer.
        assert_eq!(p.poll_timeout(), Some(at(23)));
        p.handle_timeout(at(22));
        assert!(p.poll_chunk().is_none());
        p.handle_timeout(at(23));
        let c = p.poll_chunk().unwrap();
        assert_eq!(c.info.index, BlockIndex(1));
        assert_eq!(c.info.first.gsn, Gsn(3));
        assert_eq!(c.info.first.tracks, TrackSeqs::new(&[2, 1]));
        // A key frame in a later chunk is a position with each track's next number.
        p.push(at(40), &unit(0, 2, 40, true));
        p.finish();
        let c = p.poll_chunk().unwrap();
        assert_eq!(
            c.info.keys,
            vec![Position {
                gsn: Gsn(4),
                time: MediaTime::from_nanos(40_000_000),
                tracks: TrackSeqs::new(&[2, 2])
            }]
        );
        let block = Block::parse(c.bytes.as_slice(), None).unwrap();
        assert_eq!(block.header().first_gsn, Gsn(4));
    }
}
