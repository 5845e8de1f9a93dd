//! What an SRT publisher asks for and sends, sans-IO: its stream id, and its messages of
//! MPEG-TS made into the RTP payloads a feed's recording takes.
//!
//! Why: SRT (draft-sharabayko-srt-01) carries a transport stream in *messages* with no framing
//! of its own, and names what a caller wants only by the stream id of its handshake
//! (§3.2.1.3, the `SID` extension). The server's SRT listener (IO) hands both here; what
//! comes out is a feed like one published as `MP2T/90000` over RTSP RECORD: RFC 2250 RTP
//! packets of whole 188-byte TS packets, seven at most, so that the feed's recording, its
//! viewers and its time-shift are those of every other feed (`docs/design/live.md`).
//!
//! - **Stream ids** ([`StreamRequest::parse`]): `publish:NAME` or `publish:NAME:TOKEN` (a user's
//!   bearer token, for `[auth]`), or the access-control convention of SRT's own documentation,
//!   `#!::r=NAME,m=publish` (with `t=TOKEN` for the token). Other modes (`request`, the
//!   convention's default) are refused: isochron takes feeds over SRT; viewers use RTSP or HLS.
//! - **Alignment** ([`TsPacketizer`]): the bytes of the messages, in order, are cut at 188-byte
//!   TS packets (a sender may split them anywhere; libsrt senders send 1,316 bytes, seven
//!   packets, a message); bytes before a sync byte are skipped and counted. A payload is cut at
//!   the end of a message or at seven packets, whichever comes first, so that a message's
//!   packets leave when it arrived; and before a PAT, and before a packet that starts a random
//!   access (its `random_access_indicator`) unless the tables just before it lead the payload,
//!   so that a viewer who joins at that seek point gets the program's tables and then the key
//!   frame from its first packet.

use std::collections::VecDeque;
use std::fmt;

/// TS packets in one RTP payload at most (RFC 2250 §2: as many as fit an Ethernet MTU).
pub const TS_PER_PAYLOAD: usize = 7;

const TS: usize = 188;

/// The longest stream id SRT carries (§3.2.1.3: 512 bytes).
pub const MAX_STREAM_ID: usize = 512;

/// What a caller's stream id asks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamRequest {
    /// The name to publish as.
    pub name: String,
    /// The bearer token it carries, if any.
    pub token: Option<String>,
}

/// A stream id that asks for nothing isochron does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamIdError(pub String);

impl fmt::Display for StreamIdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StreamIdError {}

impl StreamRequest {
    /// Reads a stream id (see the module docs). The name is not checked here beyond being
    /// non-empty: the recorder checks it as every object name.
    ///
    /// # Errors
    ///
    /// [`StreamIdError`] saying what is wrong and what is expected.
    pub fn parse(id: &str) -> Result<Self, StreamIdError> {
        let bad = |m: String| Err(StreamIdError(m));
        if id.len() > MAX_STREAM_ID {
            return bad(format!("a stream id of {} bytes (at most {MAX_STREAM_ID})", id.len()));
        }
        let (name, token) = if let Some(kv) = id.strip_prefix("#!::") {
            let (mut name, mut mode, mut token) = (None, None, None);
            for pair in kv.split(',') {
                let Some((k, v)) = pair.split_once('=') else {
                    return bad(format!("stream id {id:?}: {pair:?} is not key=value"));
                };
                match k {
                    "r" => name = Some(v),
                    "m" => mode = Some(v),
                    "t" => token = Some(v),
                    // The convention's other keys (user, session, type, host) ask nothing here.
                    _ => {}
                }
            }
            match mode {
                Some("publish") => {}
                m => {
                    return bad(format!(
                        "stream id {id:?}: mode {:?}; only m=publish is taken over SRT (watch \
                         over RTSP or HLS)",
                        m.unwrap_or("request")
                    ));
                }
            }
            let Some(name) = name else {
                return bad(format!("stream id {id:?} names no resource (r=NAME)"));
            };
            (name, token)
        } else {
            let Some(rest) = id.strip_prefix("publish:") else {
                return bad(format!(
                    "stream id {id:?}: expected publish:NAME, publish:NAME:TOKEN or \
                     #!::r=NAME,m=publish"
                ));
            };
            match rest.split_once(':') {
                Some((name, token)) => (name, Some(token)),
                None => (rest, None),
            }
        };
        if name.is_empty() {
            return bad(format!("stream id {id:?} has an empty name"));
        }
        let token = token.filter(|t| !t.is_empty()).map(str::to_owned);
        Ok(Self { name: name.to_owned(), token })
    }
}

/// Whether a payload is to start at `packet` rather than go on after `payload`: at a PAT (a
/// multiplexer sends PAT and PMT just before a key frame, which a joining player needs first),
/// or at a packet that starts a random access, unless the payload holds only the tables before
/// it so far.
fn starts_access(payload: &[u8], packet: &[u8]) -> bool {
    let pid = |p: &[u8]| (u16::from(p[1] & 0x1F) << 8) | u16::from(p[2]);
    if pid(packet) == 0 {
        return true;
    }
    isochron_media::live::ts_random_access(packet) && pid(payload) != 0
}

/// Cuts SRT messages of MPEG-TS into payloads of whole TS packets (see the module docs).
#[derive(Debug, Default)]
pub struct TsPacketizer {
    pending: Vec<u8>,
    ready: VecDeque<Vec<u8>>,
    skipped: u64,
}

impl TsPacketizer {
    /// A packetizer at the stream's first byte.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The next message's bytes.
    pub fn push_message(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
        let mut at = 0;
        let mut payload = Vec::new();
        while self.pending.len() - at >= TS {
            if self.pending[at] != 0x47 {
                // Lost sync: on to the next sync byte.
                let next = self.pending[at + 1..].iter().position(|&b| b == 0x47);
                let skip = next.map_or(self.pending.len() - at, |n| n + 1);
                self.skipped += skip as u64;
                at += skip;
                continue;
            }
            let packet = &self.pending[at..at + TS];
            if !payload.is_empty() && starts_access(&payload, packet) {
                self.ready.push_back(std::mem::take(&mut payload));
            }
            payload.extend_from_slice(packet);
            at += TS;
            if payload.len() == TS * TS_PER_PAYLOAD {
                self.ready.push_back(std::mem::take(&mut payload));
            }
        }
        if !payload.is_empty() {
            self.ready.push_back(payload);
        }
        self.pending.drain(..at);
    }

    /// The next payload of whole TS packets.
    pub fn poll_payload(&mut self) -> Option<Vec<u8>> {
        self.ready.pop_front()
    }

    /// Bytes skipped to find a sync byte.
    #[must_use]
    pub fn skipped(&self) -> u64 {
        self.skipped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_ids_name_the_feed_and_its_token() {
        let ok = |id: &str| StreamRequest::parse(id).unwrap();
        assert_eq!(ok("publish:cam"), StreamRequest { name: "cam".into(), token: None });
        assert_eq!(ok("publish:cam:s3cret").token.as_deref(), Some("s3cret"));
        assert_eq!(ok("publish:cam:").token, None);
        let conv = ok("#!::u=alice,r=lecture-1,m=publish,t=tok");
        assert_eq!(conv, StreamRequest { name: "lecture-1".into(), token: Some("tok".into()) });
        let err = |id: &str| StreamRequest::parse(id).unwrap_err().0;
        assert!(err("read:cam").contains("expected publish:NAME"));
        assert!(err("#!::r=cam").contains("only m=publish"));
        assert!(err("#!::r=cam,m=request").contains("mode \"request\""));
        assert!(err("#!::m=publish").contains("names no resource"));
        assert!(err("#!::r=cam,publish").contains("not key=value"));
        assert!(err("publish:").contains("empty name"));
        assert!(err(&"x".repeat(600)).contains("600 bytes"));
    }

    fn packets(n: usize, first: u8) -> Vec<u8> {
        (0..n)
            .flat_map(|i| {
                let mut p = vec![first.wrapping_add(i as u8); TS];
                p[0] = 0x47;
                p
            })
            .collect()
    }

    #[test]
    fn messages_become_payloads_of_whole_packets_whatever_their_cuts() {
        let mut t = TsPacketizer::new();
        // A libsrt message: seven packets, one payload.
        t.push_message(&packets(7, 0));
        assert_eq!(t.poll_payload().unwrap(), packets(7, 0));
        assert!(t.poll_payload().is_none());
        // Ten packets cut mid-packet: seven, then the three whole ones of the message; the
        // fraction waits for the next message.
        let all = packets(11, 10);
        t.push_message(&all[..10 * TS + 50]);
        assert_eq!(t.poll_payload().unwrap(), all[..7 * TS]);
        assert_eq!(t.poll_payload().unwrap(), all[7 * TS..10 * TS]);
        assert!(t.poll_payload().is_none());
        t.push_message(&all[10 * TS + 50..]);
        assert_eq!(t.poll_payload().unwrap(), all[10 * TS..]);
        // Garbage before a sync byte is skipped and counted.
        let mut junk = vec![1, 2, 3];
        junk.extend(packets(2, 40));
        t.push_message(&junk);
        assert_eq!(t.poll_payload().unwrap(), packets(2, 40));
        assert_eq!(t.skipped(), 3);
        // A key frame's first packet starts a payload of its own, or goes with the PAT and
        // PMT just before it, which start one.
        let key = |m: &mut Vec<u8>, k: usize| {
            m[k * TS + 3] = 0x20;
            m[k * TS + 4] = 7;
            m[k * TS + 5] = 0x40;
        };
        let mut m = packets(5, 60);
        key(&mut m, 2);
        t.push_message(&m);
        assert_eq!(t.poll_payload().unwrap(), m[..2 * TS]);
        assert_eq!(t.poll_payload().unwrap(), m[2 * TS..]);
        let mut m = packets(6, 70);
        (m[TS + 1], m[TS + 2]) = (0x40, 0);
        key(&mut m, 3);
        t.push_message(&m);
        assert_eq!(t.poll_payload().unwrap(), m[..TS]);
        assert_eq!(t.poll_payload().unwrap(), m[TS..]);
    }
}
