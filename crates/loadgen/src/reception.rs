//! What a client's receiver reports say: the reception statistics of one RTP stream
//! (RFC 3550 §6.4.1, computed as its appendix A.3 does).
//!
//! Why real numbers: a server that adapts a session's rendition to its path (isochron's ABR over
//! RTSP) reads them — the fraction lost since the last report, and the round trip through LSR
//! and DLSR, which echo the last sender report and say how long the client held it. A client
//! whose reports say nothing (every field 0) keeps its session alive but steers nothing.
//!
//! One [`Reception`] per stream, shared between the receive path (which counts each packet and
//! notes each sender report) and the task sending reports. Not kept: interarrival jitter (0 in
//! the reports), SSRC changes, probation of a new source.

use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use isochron_rtp::ReportBlock;
use isochron_rtp::rtcp::{RtcpPacket, parse_compound};

/// Sequence numbers are extended from here, so that packets a little before the first one
/// received (reordered) stay positive.
const ORIGIN: u64 = 1 << 16;

#[derive(Debug, Default)]
struct State {
    /// The extended sequence number of the first packet, and the highest.
    base: u64,
    max: Option<u64>,
    received: u64,
    expected_prior: u64,
    received_prior: u64,
    /// The last sender report: the middle 32 bits of its NTP time, and when it arrived.
    last_sr: Option<(u32, Instant)>,
}

/// One stream's reception statistics (see the module docs).
#[derive(Debug, Default)]
pub struct Reception {
    state: Mutex<State>,
}

impl Reception {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An RTP packet with sequence number `seq` arrived.
    pub fn on_rtp(&self, seq: u16) {
        let mut s = self.state();
        match s.max {
            None => {
                let first = ORIGIN + u64::from(seq);
                (s.base, s.max) = (first, Some(first));
            }
            Some(max) => {
                let ahead = seq.wrapping_sub(max as u16) as i16;
                if ahead > 0 {
                    s.max = Some(max + ahead as u64);
                }
            }
        }
        s.received += 1;
    }

    /// An RTP packet (header included) arrived: counted by its sequence number.
    pub fn on_rtp_packet(&self, packet: &[u8]) {
        if packet.len() >= 4 {
            self.on_rtp(u16::from_be_bytes([packet[2], packet[3]]));
        }
    }

    /// A compound RTCP packet arrived at `at`: its sender report, if any, is the one the next
    /// reports echo.
    pub fn on_rtcp(&self, at: Instant, packet: &[u8]) {
        for p in parse_compound(packet).flatten() {
            if let RtcpPacket::SenderReport { info, .. } = p {
                self.state().last_sr = Some((info.ntp.middle32(), at));
            }
        }
    }

    /// The report block on stream `ssrc` at `now`, and the start of the next interval (the
    /// fraction lost is over the interval since the previous call).
    pub fn report(&self, ssrc: u32, now: Instant) -> ReportBlock {
        let mut s = self.state();
        let (expected, lost) = match s.max {
            None => (0, 0),
            Some(max) => {
                let expected = max + 1 - s.base;
                (expected, expected as i64 - s.received as i64)
            }
        };
        let expected_interval = expected.saturating_sub(s.expected_prior);
        let received_interval = s.received.saturating_sub(s.received_prior);
        (s.expected_prior, s.received_prior) = (expected, s.received);
        let lost_interval = expected_interval as i64 - received_interval as i64;
        let fraction_lost = if expected_interval == 0 || lost_interval <= 0 {
            0
        } else {
            ((lost_interval << 8) / expected_interval as i64).min(255) as u8
        };
        let (lsr, dlsr) = s.last_sr.map_or((0, 0), |(lsr, at)| {
            let held = now.saturating_duration_since(at);
            (lsr, ((held.as_nanos() << 16) / 1_000_000_000).min(u128::from(u32::MAX)) as u32)
        });
        ReportBlock {
            ssrc,
            fraction_lost,
            // A signed 24-bit count (RFC 3550 §6.4.1), clamped.
            cumulative_lost: lost.clamp(-0x80_0000, 0x7f_ffff) as i32,
            highest_seq: s.max.map_or(0, |m| (m - ORIGIN) as u32),
            jitter: 0,
            lsr,
            dlsr,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn losses_and_the_highest_number_over_a_wrap() {
        let r = Reception::default();
        let t = Instant::now();
        for seq in [65_530u16, 65_531, 65_533, 65_535, 0, 1, 2, 3] {
            r.on_rtp(seq);
        }
        let b = r.report(7, t);
        // 65530 ..= 65539 (3 after the wrap): 10 expected, 8 received.
        assert_eq!((b.ssrc, b.highest_seq, b.cumulative_lost), (7, 65_536 + 3, 2));
        assert_eq!(b.fraction_lost, 51, "2 in 10: 51/256");
        assert_eq!((b.lsr, b.dlsr), (0, 0), "no sender report yet");
        // The next interval: ten more, none lost; a late one from before is not a loss.
        for seq in 4..14 {
            r.on_rtp(seq);
        }
        r.on_rtp(65_532);
        let b = r.report(7, t);
        assert_eq!((b.fraction_lost, b.cumulative_lost), (0, 1));
    }

    #[test]
    fn a_sender_report_is_echoed_with_how_long_it_was_held() {
        let r = Reception::default();
        let t = Instant::now();
        let mut sr = Vec::new();
        let ntp = isochron_rtp::NtpTimestamp::from_unix_nanos(1_700_000_000_000_000_000);
        let info = isochron_rtp::SenderReport {
            ssrc: 9,
            ntp,
            rtp_timestamp: 0,
            packet_count: 0,
            octet_count: 0,
        };
        isochron_rtp::rtcp::write_sender_report(&mut sr, &info);
        r.on_rtcp(t, &sr);
        let b = r.report(9, t + Duration::from_millis(250));
        assert_eq!((b.lsr, b.dlsr), (ntp.middle32(), 16_384));
    }
}
