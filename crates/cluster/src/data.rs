//! The data connection's wire format: block transfers between nodes.
//!
//! Why a second connection and format: blocks are up to megabytes, control messages tens of
//! bytes; on one connection a block would delay every control message behind it (at 100 Mb/s a
//! 1 MiB block holds the line for 84 ms). Blocks travel between nodes for four reasons: relay
//! delivery (a node forwards its blocks to the session's origin), an HTTP ingest (the receiving
//! node sends each block to the node owning its disk), a reorganisation (a block moves to a disk
//! of another node, SCADDAR) and HTTP delivery (a node reads another's block).
//!
//! A frame is a 4-byte big-endian length, then a header — one version byte ([`DATA_VERSION`]) and
//! the postcard encoding of a pinned mirror of [`DataHeader`], itself length-prefixed (2 bytes) —
//! and then the payload: the block's bytes, untouched, so a sender writes header and block with
//! one vectored write and a receiver parses the block in place (its own checksum covers it).

use isochron_base::{BlockIndex, BlockKey, DiskId, NodeId, ObjectId, StreamId};
use serde::{Deserialize, Serialize};

use crate::message::ShareKey;
use crate::wire::WireError;

/// The format version this build writes and the newest it reads.
pub const DATA_VERSION: u8 = 1;

/// The largest data frame accepted: a block of the largest block size and its header.
pub const MAX_DATA_FRAME: usize = 65 * 1024 * 1024;

/// What a data frame carries besides its payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DataHeader {
    /// First frame on a data connection: who is sending.
    Hello {
        /// The sender.
        node: NodeId,
    },
    /// Relay: block `index` of a share's run, for the origin to pace (payload: the block).
    Forward {
        /// The share.
        key: ShareKey,
        /// The run.
        run: u64,
        /// The block's index.
        index: BlockIndex,
    },
    /// Write the payload block to `disk` (which the receiver owns) in its non-real-time share.
    Put {
        /// Matches the answer to the request.
        tag: u64,
        /// The disk.
        disk: DiskId,
        /// The block.
        key: BlockKey,
    },
    /// Answer to [`DataHeader::Put`]: durable on disk, or why not.
    PutDone {
        /// The request's tag.
        tag: u64,
        /// `None`: written.
        error: Option<String>,
    },
    /// Read block `key` from `disk` (which the receiver owns) in its non-real-time share.
    Get {
        /// Matches the answer to the request.
        tag: u64,
        /// The disk.
        disk: DiskId,
        /// The block.
        key: BlockKey,
    },
    /// Answer to [`DataHeader::Get`]: the block as payload, or why not.
    GetDone {
        /// The request's tag.
        tag: u64,
        /// `None`: the payload is the block.
        error: Option<String>,
    },
}

impl DataHeader {
    /// The header's name, for logs and metrics labels.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Hello { .. } => "hello",
            Self::Forward { .. } => "forward",
            Self::Put { .. } => "put",
            Self::PutDone { .. } => "put_done",
            Self::Get { .. } => "get",
            Self::GetDone { .. } => "get_done",
        }
    }
}

/// The bytes that precede a payload of `payload_len` bytes: frame length, version, header.
#[must_use]
pub fn encode_data_head(header: &DataHeader, payload_len: usize) -> Vec<u8> {
    let body = postcard::to_allocvec(&D::from(header)).expect("postcard into a Vec is infallible");
    let hlen = u16::try_from(body.len()).expect("a data header is a few dozen bytes");
    let total = 1 + 2 + body.len() + payload_len;
    let mut out = Vec::with_capacity(4 + 3 + body.len());
    out.extend_from_slice(&u32::try_from(total).unwrap_or(u32::MAX).to_be_bytes());
    out.push(DATA_VERSION);
    out.extend_from_slice(&hlen.to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// Splits a data frame body (without its 4-byte length) into its header and payload.
pub fn decode_data(body: &[u8]) -> Result<(DataHeader, &[u8]), WireError> {
    let (&version, rest) = body.split_first().ok_or(WireError::Empty)?;
    if version == 0 || version > DATA_VERSION {
        return Err(WireError::Version { found: version });
    }
    let Some((len, rest)) = rest.split_first_chunk::<2>() else {
        return Err(WireError::Decode("data header length missing".into()));
    };
    let len = usize::from(u16::from_be_bytes(*len));
    let Some((head, payload)) = rest.split_at_checked(len) else {
        return Err(WireError::Decode(format!("data header of {len} bytes is cut short")));
    };
    let (d, trailing): (D, _) =
        postcard::take_from_bytes(head).map_err(|e| WireError::Decode(e.to_string()))?;
    if !trailing.is_empty() {
        return Err(WireError::Trailing(trailing.len()));
    }
    Ok((d.into(), payload))
}

/// The length of the frame whose 4-byte prefix is `prefix`, or an error if it is too long.
pub fn data_frame_len(prefix: [u8; 4]) -> Result<usize, WireError> {
    let len = u32::from_be_bytes(prefix) as usize;
    if len > MAX_DATA_FRAME {
        return Err(WireError::TooLong(len));
    }
    Ok(len)
}

// The pinned mirror. Never change a variant or field of a written version: add a version.
#[derive(Serialize, Deserialize)]
enum D {
    Hello { node: u16 },
    Forward { origin: u16, stream: u64, run: u64, index: u32 },
    Put { tag: u64, disk: u16, object: u64, index: u32 },
    PutDone { tag: u64, error: Option<String> },
    Get { tag: u64, disk: u16, object: u64, index: u32 },
    GetDone { tag: u64, error: Option<String> },
}

impl From<&DataHeader> for D {
    fn from(h: &DataHeader) -> Self {
        match h {
            DataHeader::Hello { node } => Self::Hello { node: node.0 },
            DataHeader::Forward { key, run, index } => Self::Forward {
                origin: key.origin.0,
                stream: key.stream.0,
                run: *run,
                index: index.0,
            },
            DataHeader::Put { tag, disk, key } => {
                Self::Put { tag: *tag, disk: disk.0, object: key.object.0, index: key.index.0 }
            }
            DataHeader::PutDone { tag, error } => Self::PutDone { tag: *tag, error: error.clone() },
            DataHeader::Get { tag, disk, key } => {
                Self::Get { tag: *tag, disk: disk.0, object: key.object.0, index: key.index.0 }
            }
            DataHeader::GetDone { tag, error } => Self::GetDone { tag: *tag, error: error.clone() },
        }
    }
}

impl From<D> for DataHeader {
    fn from(d: D) -> Self {
        let key = |object, index| BlockKey::new(ObjectId(object), BlockIndex(index));
        match d {
            D::Hello { node } => Self::Hello { node: NodeId(node) },
            D::Forward { origin, stream, run, index } => Self::Forward {
                key: ShareKey { origin: NodeId(origin), stream: StreamId(stream) },
                run,
                index: BlockIndex(index),
            },
            D::Put { tag, disk, object, index } => {
                Self::Put { tag, disk: DiskId(disk), key: key(object, index) }
            }
            D::PutDone { tag, error } => Self::PutDone { tag, error },
            D::Get { tag, disk, object, index } => {
                Self::Get { tag, disk: DiskId(disk), key: key(object, index) }
            }
            D::GetDone { tag, error } => Self::GetDone { tag, error },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(h: &DataHeader, payload: &[u8]) -> Vec<u8> {
        let mut f = encode_data_head(h, payload.len());
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn headers_and_payloads_round_trip() {
        let key = BlockKey::new(ObjectId(3), BlockIndex(9));
        let all = [
            DataHeader::Hello { node: NodeId(4) },
            DataHeader::Forward {
                key: ShareKey { origin: NodeId(1), stream: StreamId(8) },
                run: 2,
                index: BlockIndex(5),
            },
            DataHeader::Put { tag: 1, disk: DiskId(6), key },
            DataHeader::PutDone { tag: 1, error: None },
            DataHeader::PutDone { tag: 2, error: Some("disk 6: no space".into()) },
            DataHeader::Get { tag: 3, disk: DiskId(6), key },
            DataHeader::GetDone { tag: 3, error: None },
        ];
        for h in &all {
            for payload in [&[][..], &[1, 2, 3][..], &[0x47; 4096][..]] {
                let f = frame(h, payload);
                let len = data_frame_len(f[..4].try_into().unwrap()).unwrap();
                assert_eq!(len, f.len() - 4);
                let (got, p) = decode_data(&f[4..]).unwrap();
                assert_eq!((&got, p), (h, payload));
            }
        }
        // Pinned: version 1.
        assert_eq!(
            frame(&DataHeader::Put { tag: 1, disk: DiskId(6), key }, &[9]),
            [0, 0, 0, 9, 1, 0, 5, 2, 1, 6, 3, 9, 9]
        );
    }

    #[test]
    fn bad_frames_are_named() {
        assert_eq!(decode_data(&[]), Err(WireError::Empty));
        assert_eq!(decode_data(&[7]), Err(WireError::Version { found: 7 }));
        assert!(matches!(decode_data(&[1, 0]), Err(WireError::Decode(_))));
        assert!(matches!(decode_data(&[1, 0, 9, 0]), Err(WireError::Decode(_))));
        assert_eq!(data_frame_len([255; 4]), Err(WireError::TooLong(u32::MAX as usize)));
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(0u8..=255, 0..64)) {
            let _ = decode_data(&bytes);
        }
    }
}
