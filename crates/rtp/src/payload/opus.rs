//! Opus over RTP, RFC 7587.
//!
//! One Opus packet (RFC 6716 §3) is one RTP payload, with no payload header, and is never
//! fragmented (§4.2): a packet larger than a payload cannot be sent and is refused. The marker
//! bit is left clear (§4.1 sets it only on the first packet after a DTX silence, which a server
//! replaying stored packets cannot tell). The RTP clock is always 48 kHz and the `a=rtpmap`
//! always `opus/48000/2`, mono or stereo (§7); [`opus_fmtp`] tells which.

use super::{
    DEFAULT_MAX_PAYLOAD, Depacketizer, Packetizer, Payload, PayloadError, impl_depacketizer,
    impl_packetizer, non_empty,
};

/// Opus, RFC 7587: one Opus packet a payload, marker bit clear.
#[derive(Clone, Debug)]
pub struct OpusPacketizer {
    max_payload: usize,
}

impl Default for OpusPacketizer {
    fn default() -> Self {
        Self::new()
    }
}

impl OpusPacketizer {
    /// A packetizer refusing packets over [`DEFAULT_MAX_PAYLOAD`] bytes (a 20 ms frame is at
    /// most 1275 bytes, RFC 6716 §3.4).
    #[must_use]
    pub const fn new() -> Self {
        Self { max_payload: DEFAULT_MAX_PAYLOAD }
    }

    /// A packetizer refusing packets over `max_payload` bytes.
    #[must_use]
    pub const fn with_max_payload(max_payload: usize) -> Self {
        Self { max_payload }
    }

    /// The payload of an Opus packet (see [`Self::packetize`]).
    fn payloads(&self, packet: &[u8], out: &mut Vec<Payload>) -> Result<(), PayloadError> {
        let packet = non_empty("Opus", "packet", packet)?;
        if packet.len() > self.max_payload {
            return Err(PayloadError::TooLarge {
                format: "Opus",
                len: packet.len(),
                max: self.max_payload,
            });
        }
        out.push(Payload { bytes: packet.to_vec(), marker: false });
        Ok(())
    }
}

impl_packetizer! {
    OpusPacketizer;
    /// Appends the one payload of an Opus packet to `out`.
    ///
    /// Errors (and nothing appended): an empty packet, or one over the size limit.
    fn packetize(packet);
}

/// Opus packets from RFC 7587 payloads: each payload is one packet.
#[derive(Clone, Debug, Default)]
pub struct OpusDepacketizer;

impl OpusDepacketizer {
    /// A depacketizer.
    #[must_use]
    pub const fn new() -> Self {
        Self
    }

    /// The Opus packet in `payload`; the marker bit does not matter. Errors on an empty
    /// payload (RFC 6716 §3.1: every packet has a TOC byte).
    pub fn push(&mut self, payload: &[u8], _marker: bool) -> Result<Option<Vec<u8>>, PayloadError> {
        Ok(Some(non_empty("Opus", "payload", payload)?.to_vec()))
    }
}

impl_depacketizer!(OpusDepacketizer: push);

/// The `a=fmtp` value (what follows `a=fmtp:<pt> `) for an Opus stream of `channels`
/// channels: `sprop-stereo=1` for two, `sprop-stereo=0` otherwise (RFC 7587 §6.1). RFC 7587
/// carries mono and stereo only; more channels need another format.
#[must_use]
pub fn opus_fmtp(channels: u8) -> String {
    format!("sprop-stereo={}", u8::from(channels == 2))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{Marker, Rng, round_trip_with};
    use super::*;

    #[test]
    fn one_packet_a_payload() {
        let mut rng = Rng::new(9);
        let mut p = OpusPacketizer::new();
        let mut d = OpusDepacketizer::new();
        for size in [1, 3, 160, 1275, 1276, DEFAULT_MAX_PAYLOAD] {
            let packet = rng.bytes(size);
            let got = round_trip_with(&mut p, &mut d, &packet, DEFAULT_MAX_PAYLOAD, Marker::Never);
            assert_eq!(got, [packet]);
        }
        let mut out = Vec::new();
        assert!(matches!(
            p.packetize(&[0; DEFAULT_MAX_PAYLOAD + 1], &mut out),
            Err(PayloadError::TooLarge { len: 1317, max: 1316, .. })
        ));
        assert!(matches!(p.packetize(&[], &mut out), Err(PayloadError::Empty { .. })));
        assert!(out.is_empty());
        assert!(OpusPacketizer::with_max_payload(10).packetize(&[0; 11], &mut out).is_err());
        assert!(d.push(&[], true).is_err());
    }

    #[test]
    fn fmtp() {
        assert_eq!(opus_fmtp(2), "sprop-stereo=1");
        assert_eq!(opus_fmtp(1), "sprop-stereo=0");
    }
}
