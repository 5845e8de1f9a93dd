//! Why a scan fails.
//!
//! Only input that cannot be ingested as a paced MPEG-TS object is an error: not a 188-byte
//! transport stream at all, or one without the PCRs that pacing needs. Everything else — PSI with
//! bad CRCs, continuity gaps, a truncated last packet, PCR discontinuities — is tolerated and
//! reported through `TsIndex`. Messages name the offset and byte at fault; the caller adds the
//! file name.

use crate::TS_PACKET_SIZE;

/// Why a byte stream cannot be indexed as an MPEG-TS object.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TsError {
    /// Nothing was pushed.
    #[error("empty file: no MPEG-TS packets")]
    Empty,
    /// The input is shorter than one packet (its first byte was the sync byte).
    #[error("file of {len} bytes is shorter than one {TS_PACKET_SIZE}-byte MPEG-TS packet")]
    TooShort {
        /// The input's length in bytes.
        len: u64,
    },
    /// A packet boundary does not hold the sync byte: the input is not a 188-byte transport
    /// stream (or is corrupt from that point on).
    #[error(
        "byte {byte:#04x} at offset {offset} is not the MPEG-TS sync byte 0x47 \
         (not a {TS_PACKET_SIZE}-byte MPEG-TS file)"
    )]
    NotTransportStream {
        /// The file offset of the offending byte, a multiple of 188.
        offset: u64,
        /// The byte found there.
        byte: u8,
    },
    /// Fewer than two usable PCRs on the PCR PID, so there is no clock to pace the stream by.
    #[error(
        "no usable PCR: fewer than two program clock references on one PID, \
         so the stream cannot be paced"
    )]
    NoPcr,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages() {
        let e = TsError::NotTransportStream { offset: 940, byte: 0x4a };
        assert_eq!(
            e.to_string(),
            "byte 0x4a at offset 940 is not the MPEG-TS sync byte 0x47 \
             (not a 188-byte MPEG-TS file)"
        );
        assert_eq!(TsError::Empty.to_string(), "empty file: no MPEG-TS packets");
        assert_eq!(
            TsError::TooShort { len: 5 }.to_string(),
            "file of 5 bytes is shorter than one 188-byte MPEG-TS packet"
        );
        assert!(TsError::NoPcr.to_string().contains("fewer than two"));
    }
}
