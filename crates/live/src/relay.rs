//! A feed's live edge between the nodes of a cluster (`docs/design/live.md`, step 6): the
//! frames the publisher's node sends each other node that serves the feed, once per node.
//!
//! Why chunks, not packets: a chunk is already what a node's edge holds and what its viewers'
//! senders take (a block of the store's format, its packets numbered as the recording numbers
//! them). A node that receives the publisher's chunks, with what the edge needs to know of each
//! ([`ChunkInfo`]), runs its own edge on them exactly as the publisher's node does: its viewers
//! start at a seek point with the recording's numbers, go back into the window, and catch up,
//! and the feed crosses to it once, however many viewers it has (Yima §2.2 has every node send
//! its own blocks to the client; a live feed is written on one node, so its edge is copied).
//!
//! A frame is a kind byte and a 4-byte big-endian length, then the body:
//!
//! - `1` *opened*: 8 bytes, the nanoseconds since the feed's first packet arrived, as the
//!   publisher's node wrote the frame (the receiver puts the feed on its own clock with it);
//! - `2` *chunk*: the chunk's index (4), packet count (4) and last send time (8 ns), its first
//!   position, a 2-byte count of seek points and each seek point's position, then the block's
//!   bytes to the frame's end. A position is its GSN (8), send time (8 ns), a track count (1)
//!   and each track's next sequence number (4);
//! - `3` *ended*: empty; the feed ended (its recording is finished);
//! - `4` *alive*: empty; sent when nothing else was for a second, so that a receiver tells a
//!   quiet feed from a node that stopped.
//!
//! Not here: the connection (the server's, over HTTP between members), the clock.

use std::time::Duration;

use isochron_base::{BlockIndex, Gsn, MAX_TRACKS, MediaTime, Position, TrackSeqs};

use crate::chunk::ChunkInfo;

/// The largest frame body accepted: a chunk is at most a few tens of KiB.
pub const MAX_FRAME: usize = 4 << 20;

/// Most seek points one chunk may name.
const MAX_KEYS: usize = 1024;

/// One frame of a feed between nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FeedFrame {
    /// The feed runs: its first packet arrived this long before the frame was written.
    Opened {
        /// Time since the feed's first packet, at the publisher's node.
        elapsed: Duration,
    },
    /// A sealed chunk of the feed.
    Chunk {
        /// What the edge needs to know of it.
        info: ChunkInfo,
        /// The block's bytes.
        bytes: Vec<u8>,
    },
    /// The feed ended.
    Ended,
    /// Nothing else to send for a while.
    Alive,
}

/// A frame that cannot be read: the connection carrying it is closed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RelayError {
    /// An unknown kind byte.
    Kind(u8),
    /// A body longer than [`MAX_FRAME`].
    TooLong(usize),
    /// A body that does not hold what its kind says.
    Body(&'static str),
}

impl std::fmt::Display for RelayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Kind(k) => write!(f, "feed relay: unknown frame kind {k}"),
            Self::TooLong(n) => write!(f, "feed relay: a frame of {n} bytes (at most {MAX_FRAME})"),
            Self::Body(what) => write!(f, "feed relay: a frame's body is short or bad: {what}"),
        }
    }
}

impl std::error::Error for RelayError {}

/// Encodes `frame`.
#[must_use]
pub fn encode(frame: &FeedFrame) -> Vec<u8> {
    let mut body = Vec::new();
    let kind = match frame {
        FeedFrame::Opened { elapsed } => {
            let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
            body.extend_from_slice(&ns.to_be_bytes());
            1
        }
        FeedFrame::Chunk { info, bytes } => {
            body.extend_from_slice(&info.index.0.to_be_bytes());
            body.extend_from_slice(&info.packets.to_be_bytes());
            body.extend_from_slice(&info.last_time.as_nanos().to_be_bytes());
            put_position(&mut body, &info.first);
            let keys = info.keys.len().min(MAX_KEYS);
            body.extend_from_slice(&(keys as u16).to_be_bytes());
            for k in &info.keys[..keys] {
                put_position(&mut body, k);
            }
            body.extend_from_slice(bytes);
            2
        }
        FeedFrame::Ended => 3,
        FeedFrame::Alive => 4,
    };
    let mut out = Vec::with_capacity(5 + body.len());
    out.push(kind);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

fn put_position(out: &mut Vec<u8>, p: &Position) {
    out.extend_from_slice(&p.gsn.0.to_be_bytes());
    out.extend_from_slice(&p.time.as_nanos().to_be_bytes());
    let seqs = p.tracks.as_slice();
    out.push(seqs.len() as u8);
    for s in seqs {
        out.extend_from_slice(&s.to_be_bytes());
    }
}

/// Reads frames from a byte stream, however it was cut.
#[derive(Debug, Default)]
pub struct FrameReader {
    buf: Vec<u8>,
}

impl FrameReader {
    /// Takes bytes received.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole frame, if one has arrived.
    ///
    /// # Errors
    /// When the bytes are not a frame (the stream cannot go on).
    pub fn next_frame(&mut self) -> Result<Option<FeedFrame>, RelayError> {
        let Some(head) = self.buf.get(..5) else { return Ok(None) };
        let kind = head[0];
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        if len > MAX_FRAME {
            return Err(RelayError::TooLong(len));
        }
        if !(1..=4).contains(&kind) {
            return Err(RelayError::Kind(kind));
        }
        if self.buf.len() < 5 + len {
            return Ok(None);
        }
        let body: Vec<u8> = self.buf.drain(..5 + len).skip(5).collect();
        decode(kind, &body).map(Some)
    }
}

fn decode(kind: u8, body: &[u8]) -> Result<FeedFrame, RelayError> {
    let mut r = Cursor(body);
    let frame = match kind {
        1 => FeedFrame::Opened { elapsed: Duration::from_nanos(r.u64("elapsed")?) },
        2 => {
            let index = BlockIndex(r.u32("index")?);
            let packets = r.u32("packets")?;
            let last_time = MediaTime::from_nanos(r.u64("last time")?);
            let first = r.position()?;
            let n = usize::from(r.u16("seek points")?);
            if n > MAX_KEYS {
                return Err(RelayError::Body("too many seek points"));
            }
            let keys = (0..n).map(|_| r.position()).collect::<Result<Vec<_>, _>>()?;
            if r.0.is_empty() {
                return Err(RelayError::Body("a chunk with no block"));
            }
            let info = ChunkInfo { index, first, keys, packets, last_time };
            return Ok(FeedFrame::Chunk { info, bytes: r.0.to_vec() });
        }
        3 => FeedFrame::Ended,
        4 => FeedFrame::Alive,
        k => return Err(RelayError::Kind(k)),
    };
    if r.0.is_empty() { Ok(frame) } else { Err(RelayError::Body("trailing bytes")) }
}

/// A body being read.
struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn take<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], RelayError> {
        let (head, rest) = self.0.split_first_chunk::<N>().ok_or(RelayError::Body(what))?;
        self.0 = rest;
        Ok(*head)
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, RelayError> {
        self.take(what).map(u16::from_be_bytes)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, RelayError> {
        self.take(what).map(u32::from_be_bytes)
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, RelayError> {
        self.take(what).map(u64::from_be_bytes)
    }

    fn position(&mut self) -> Result<Position, RelayError> {
        let gsn = Gsn(self.u64("a position's GSN")?);
        let time = MediaTime::from_nanos(self.u64("a position's time")?);
        let [n] = self.take::<1>("a position's tracks")?;
        if usize::from(n) > MAX_TRACKS {
            return Err(RelayError::Body("a position with too many tracks"));
        }
        let seqs = (0..n).map(|_| self.u32("a track's number")).collect::<Result<Vec<_>, _>>()?;
        Ok(Position { gsn, time, tracks: TrackSeqs::new(&seqs) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn position(gsn: u64, ms: u64, seqs: &[u32]) -> Position {
        Position {
            gsn: Gsn(gsn),
            time: MediaTime::from_nanos(ms * 1_000_000),
            tracks: TrackSeqs::new(seqs),
        }
    }

    fn frames() -> Vec<FeedFrame> {
        let info = ChunkInfo {
            index: BlockIndex(7),
            first: position(300, 1_200, &[200, 100]),
            keys: vec![position(301, 1_210, &[200, 101]), position(310, 1_215, &[])],
            packets: 12,
            last_time: MediaTime::from_nanos(1_219_000_000),
        };
        vec![
            FeedFrame::Opened { elapsed: Duration::from_millis(2_345) },
            FeedFrame::Chunk { info, bytes: vec![9; 4096] },
            FeedFrame::Alive,
            FeedFrame::Ended,
        ]
    }

    #[test]
    fn frames_cut_anywhere_read_back_as_written() {
        let frames = frames();
        let wire: Vec<u8> = frames.iter().flat_map(encode).collect();
        for cut in [1, 3, 5, 17, 1000, wire.len()] {
            let mut r = FrameReader::default();
            let mut got = Vec::new();
            for piece in wire.chunks(cut) {
                r.feed(piece);
                while let Some(f) = r.next_frame().unwrap() {
                    got.push(f);
                }
            }
            assert_eq!(got, frames, "cut every {cut} bytes");
        }
    }

    #[test]
    fn bad_frames_are_named() {
        let mut r = FrameReader::default();
        r.feed(&[9, 0, 0, 0, 0]);
        assert_eq!(r.next_frame(), Err(RelayError::Kind(9)));
        let mut r = FrameReader::default();
        r.feed(&[2, 0xff, 0, 0, 0]);
        assert!(matches!(r.next_frame(), Err(RelayError::TooLong(_))));
        let mut r = FrameReader::default();
        r.feed(&[2, 0, 0, 0, 3, 1, 2, 3]);
        assert_eq!(r.next_frame(), Err(RelayError::Body("index")));
        let mut r = FrameReader::default();
        r.feed(&[3, 0, 0, 0, 1, 0]);
        assert_eq!(r.next_frame(), Err(RelayError::Body("trailing bytes")));
        // A position naming more tracks than any object has.
        let mut body = vec![0u8; 16];
        body.extend_from_slice(&[0; 16]);
        body.push(MAX_TRACKS as u8 + 1);
        let mut wire = vec![2];
        wire.extend_from_slice(&(body.len() as u32).to_be_bytes());
        wire.extend_from_slice(&body);
        let mut r = FrameReader::default();
        r.feed(&wire);
        assert_eq!(r.next_frame(), Err(RelayError::Body("a position with too many tracks")));
    }
}
