//! `isochron play` of a native presentation: every track (H.264, AAC, … RTP, RFC 6184 and RFC
//! 3640) set up into one session and consumed by its own RTP timestamps from `RTP-Info`'s
//! start (`isochron_loadgen::bench::native_playout`, the emulation client's player): a
//! starvation is the clock reaching the newest media received on a track. Each track's sequence
//! numbers are checked (a gap is a loss on that track). Over UDP the receiver reports say what
//! the path did (`isochron_loadgen::reception`: the fraction lost, the last sender report
//! echoed), which the server's adaptive bit rate reads; with `--mtfc` the player asks for a
//! faster or slower pace as its buffer level crosses its thresholds.
//!
//! `--out` writes the first H.264 track as an Annex B byte stream: the parameter sets of the
//! SDP's `sprop-parameter-sets` (RFC 6184 §8.1) first, then every access unit as it is
//! reassembled (`isochron_media::fmp4::Reassembler`). A session switched between the renditions
//! of a ladder carries the new picture's parameter sets in-band before its key frame: the file
//! plays through the switch.

use std::fmt;
use std::io::Write;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use base64::Engine as _;
use isochron_loadgen::Client;
use isochron_loadgen::Presentation;
use isochron_loadgen::bench::mtfc::{Mtfc, MtfcConfig};
use isochron_loadgen::bench::native_playout::NativePlayout;
use isochron_loadgen::bench::playout::PlayState;
use isochron_loadgen::bench::session::{range_length, track_starts};
use isochron_loadgen::client::{MediaSink, status_line};
use isochron_media::fmp4::{Fmp4Codec, Fmp4Sample, Fmp4Track, Reassembler};
use isochron_rtp::RtpHeader;
use isochron_rtp::rtcp::{RtcpPacket, parse_compound};
use serde::Serialize;
use tokio::sync::mpsc;

use super::{Args, SILENCE, TEARDOWN_WAIT, TICK};

/// What the receive path hands the session.
enum In {
    Rtp { at: Instant, track: usize, packet: Vec<u8> },
    Bye { at: Instant, track: usize, reason: Option<String> },
}

/// The receive path's sink: packets to the session's loop, as they come.
struct Forward(mpsc::UnboundedSender<In>);

impl MediaSink for Forward {
    fn on_rtp(&mut self, at: Instant, _from: SocketAddr, track: usize, packet: &[u8]) {
        let _ = self.0.send(In::Rtp { at, track, packet: packet.to_vec() });
    }

    fn on_rtcp(&mut self, at: Instant, track: usize, packet: &[u8]) {
        for p in parse_compound(packet).flatten() {
            if let RtcpPacket::Bye { reason, .. } = p {
                let reason = reason.map(str::to_owned);
                let _ = self.0.send(In::Bye { at, track, reason });
            }
        }
    }

    fn on_tick(&mut self, _at: Instant) {}
}

/// One track's counts.
#[derive(Clone, Debug, Default, Serialize)]
pub(super) struct TrackSummary {
    /// Its encoding (`H264`, `mpeg4-generic`, …).
    encoding: String,
    /// Packets received.
    packets: u64,
    /// Packets missing from its sequence.
    lost: u64,
    /// Whether its input ended (BYE, or the announced length reached).
    ended: bool,
    #[serde(skip)]
    last_seq: Option<u16>,
}

/// What a native session did.
#[derive(Clone, Debug, Default, Serialize)]
pub(super) struct NativeSummary {
    /// Each track, in the order set up.
    tracks: Vec<TrackSummary>,
    /// Times the playout clock caught up with a track's newest media.
    starvations: u64,
    /// Time spent stalled, ms.
    stall_ms: u64,
    /// Packets that came after their deadline.
    late_packets: u64,
    /// Media played, s.
    media_s: f64,
    /// H.264 access units written to `--out`.
    video_frames: u64,
    /// Rate changes asked for (MTFC).
    rate_requests: u64,
    /// The reason a BYE gave, if one did (the server cut the stream).
    pub(super) bye_reason: Option<String>,
}

impl NativeSummary {
    /// Packets lost on every track.
    pub(super) fn lost(&self) -> u64 {
        self.tracks.iter().map(|t| t.lost).sum()
    }
}

impl fmt::Display for NativeSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (k, t) in self.tracks.iter().enumerate() {
            writeln!(f, "  track {k} ({}): {} packets, {} lost", t.encoding, t.packets, t.lost)?;
        }
        writeln!(
            f,
            "  played {:.1} s: {} starvations ({} ms stalled), {} late packets",
            self.media_s, self.starvations, self.stall_ms, self.late_packets
        )?;
        if self.video_frames > 0 {
            writeln!(f, "  {} video frames written", self.video_frames)?;
        }
        if let Some(r) = &self.bye_reason {
            writeln!(f, "  the server ended the stream: {r}")?;
        }
        Ok(())
    }
}

/// The NAL units of `a=fmtp:PT … sprop-parameter-sets=…` for payload type `pt` in `sdp`.
fn parameter_sets(sdp: &str, pt: u8) -> Vec<Vec<u8>> {
    let prefix = format!("a=fmtp:{pt} ");
    let Some(fmtp) = sdp.lines().find_map(|l| l.trim().strip_prefix(prefix.as_str())) else {
        return Vec::new();
    };
    fmtp.split(';')
        .filter_map(|kv| kv.trim().strip_prefix("sprop-parameter-sets="))
        .flat_map(|v| v.split(','))
        .filter_map(|b| base64::engine::general_purpose::STANDARD.decode(b.trim()).ok())
        .filter(|nal| !nal.is_empty())
        .collect()
}

/// Writes an access unit of length-prefixed NAL units (what the reassembler gives) as Annex B.
fn write_annex_b(out: &mut dyn Write, au: &[u8]) -> std::io::Result<()> {
    let mut rest = au;
    while rest.len() >= 4 {
        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let Some(nal) = rest.get(4..4 + len) else { break };
        out.write_all(&[0, 0, 0, 1])?;
        out.write_all(nal)?;
        rest = &rest[4 + len..];
    }
    Ok(())
}

/// Plays `presentation` (DESCRIBEd on `client`) to its end; the second value says why it was
/// cut short, if it was.
pub(super) async fn play(
    a: &Args,
    mut client: Client,
    presentation: &Presentation,
    (buffer, deadline): (Duration, Option<Instant>),
    out: &mut dyn Write,
) -> anyhow::Result<(NativeSummary, Option<anyhow::Error>)> {
    let media = &presentation.media;
    let urls: Vec<String> = media
        .iter()
        .enumerate()
        .map(|(k, m)| client.control_url(m.control.as_deref().unwrap_or(&format!("trackID={k}"))))
        .collect();
    let clocks: Vec<u32> = media.iter().map(|m| m.clock_rate).collect();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let r = client.setup_sink_tracks(a.transport, Box::new(Forward(tx)), &urls).await?;
    if u16::from(r.status()) != 200 {
        bail!("SETUP: {}", status_line(&r));
    }
    let info = client.play(None).await?;
    let mut playout = NativePlayout::new(buffer, &clocks);
    let starts: Vec<Option<u32>> = track_starts(&urls, &info).iter().map(|s| s.rtptime).collect();
    playout.handle_start(Instant::now(), &starts);
    if let Some(length) = info.range.as_deref().and_then(range_length) {
        playout.handle_length(length);
    }
    let mut summary = NativeSummary {
        tracks: media
            .iter()
            .map(|m| TrackSummary { encoding: m.encoding.clone(), ..TrackSummary::default() })
            .collect(),
        ..NativeSummary::default()
    };
    // The first H.264 track goes to --out, its parameter sets first.
    let video = media.iter().position(|m| m.encoding.eq_ignore_ascii_case("H264"));
    let mut reassembler = video.and_then(|v| {
        Reassembler::new(&Fmp4Track {
            codec: Fmp4Codec::H264 { avcc: Vec::new() },
            timescale: media[v].clock_rate,
            width: 0,
            height: 0,
            channels: 0,
            sample_rate: 0,
        })
    });
    if let Some(v) = video {
        for nal in parameter_sets(&presentation.sdp, media[v].payload_type) {
            out.write_all(&[0, 0, 0, 1]).context("writing --out")?;
            out.write_all(&nal).context("writing --out")?;
        }
    }
    let mut mtfc = a.mtfc.then(|| Mtfc::new(MtfcConfig::for_depth(buffer, 4)));
    let mut next_sample = Instant::now();
    let mut samples: Vec<Fmp4Sample> = Vec::new();
    let t0 = Instant::now();
    let mut heard = Instant::now();
    let interrupt = tokio::signal::ctrl_c();
    tokio::pin!(interrupt);
    let cut_short = loop {
        tokio::select! {
            got = tokio::time::timeout(TICK, rx.recv()) => match got {
                Ok(Some(In::Rtp { at, track, packet })) => {
                    heard = Instant::now();
                    let Ok((h, body)) = RtpHeader::parse(&packet) else { continue };
                    let Some(t) = summary.tracks.get_mut(track) else { continue };
                    t.packets += 1;
                    if let Some(last) = t.last_seq {
                        let ahead = h.sequence.wrapping_sub(last) as i16;
                        if ahead > 0 {
                            t.lost += u64::from(ahead.unsigned_abs()) - 1;
                            t.last_seq = Some(h.sequence);
                        }
                    } else {
                        t.last_seq = Some(h.sequence);
                    }
                    playout.handle_packet(at, track, h.timestamp, packet.len());
                    if Some(track) == video
                        && let Some(r) = reassembler.as_mut()
                    {
                        let ns = at.saturating_duration_since(t0).as_nanos() as u64;
                        r.push(&packet[body], h.marker, h.timestamp, ns, &mut samples);
                        for s in samples.drain(..) {
                            write_annex_b(out, &s.data).context("writing --out")?;
                            summary.video_frames += 1;
                        }
                    }
                }
                Ok(Some(In::Bye { at, track, reason })) => {
                    heard = Instant::now();
                    playout.handle_track_end(at, track);
                    if let Some(t) = summary.tracks.get_mut(track) {
                        t.ended = true;
                    }
                    if reason.is_some() {
                        summary.bye_reason = reason;
                    }
                }
                Ok(None) => break Some(anyhow!("the connection closed")),
                Err(_) => {}
            },
            _ = &mut interrupt => break Some(anyhow!("interrupted")),
        }
        let now = Instant::now();
        playout.advance(now);
        if let Some(m) = mtfc.as_mut()
            && now >= next_sample
        {
            next_sample = now + Duration::from_millis(100);
            let level = playout.level(now);
            if let Some(pace) = m.handle_level(now, level) {
                summary.rate_requests += 1;
                if !client.set_rate(pace, m.buffer_level(playout.state(), level)).await? {
                    eprintln!(
                        "isochron: warning: the server refused the MTFC rate request; MTFC off"
                    );
                    mtfc = None;
                }
            }
        }
        if playout.state() == PlayState::Finished {
            break None;
        }
        if deadline.is_some_and(|d| now >= d) {
            break Some(anyhow!("the stream did not end within --timeout"));
        }
        if now.duration_since(heard) >= SILENCE {
            break Some(anyhow!("nothing received for {} s", SILENCE.as_secs()));
        }
    };
    if let Some(r) = reassembler.as_mut() {
        r.finish(&mut samples);
        for s in samples.drain(..) {
            write_annex_b(out, &s.data).context("writing --out")?;
            summary.video_frames += 1;
        }
    }
    let stats = playout.stats();
    summary.starvations = stats.starvations;
    summary.stall_ms = stats.stall_ns / 1_000_000;
    summary.late_packets = stats.late_packets;
    summary.media_s = stats.media_ns as f64 / 1e9;
    if playout.input_ended() {
        for t in &mut summary.tracks {
            t.ended = true;
        }
    }
    match tokio::time::timeout(TEARDOWN_WAIT, client.teardown()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!("isochron: warning: {e:#}"),
        Err(_) => eprintln!("isochron: warning: TEARDOWN: no response within {TEARDOWN_WAIT:?}"),
    }
    Ok((summary, cut_short))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_sets_come_from_the_fmtp_of_the_payload_type() {
        let sdp = "v=0\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\n\
                   a=fmtp:96 packetization-mode=1;profile-level-id=64001e;\
                   sprop-parameter-sets=Z2QAHqw=,aO48gA==\r\n";
        assert_eq!(
            parameter_sets(sdp, 96),
            vec![vec![0x67, 0x64, 0x00, 0x1e, 0xac], vec![0x68, 0xee, 0x3c, 0x80]]
        );
        assert!(parameter_sets(sdp, 97).is_empty());
    }

    #[test]
    fn an_access_unit_is_written_with_start_codes() {
        let mut out = Vec::new();
        write_annex_b(&mut out, &[0, 0, 0, 2, 0x65, 1, 0, 0, 0, 1, 0x06]).unwrap();
        assert_eq!(out, vec![0, 0, 0, 1, 0x65, 1, 0, 0, 0, 1, 0x06]);
    }
}
