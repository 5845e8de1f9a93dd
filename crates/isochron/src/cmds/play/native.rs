//! `isochron play` of a native presentation: every track (H.264, AAC, … RTP, RFC 6184 and RFC
//! 3640) set up into one session and consumed by its own RTP timestamps from `RTP-Info`'s
//! start (`isochron_loadgen::bench::native_playout`, the emulation client's player): a
//! starvation is the clock reaching the newest media received on a track. Each track's packets
//! pass a jitter buffer (`isochron_loadgen::player::reorder`) that puts them back in sequence
//! order: a packet overtaken on the way (a path may reorder, RFC 3550 §A.3 counts it received)
//! waits up to [`REORDER_HOLD`] for the ones before it, and a number still missing then is a loss
//! on that track. Over UDP the receiver reports say what
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
use isochron_loadgen::bench::mtfc::Mtfc;
use isochron_loadgen::bench::native_playout::NativePlayout;
use isochron_loadgen::bench::playout::PlayState;
use isochron_loadgen::bench::session::{range_length, track_starts};
use isochron_loadgen::client::{MediaSink, status_line};
use isochron_loadgen::player::reorder::{Arrival, ReorderBuffer};
use isochron_media::fmp4::{Fmp4Codec, Fmp4Sample, Fmp4Track, Reassembler};
use isochron_rtp::RtpHeader;
use isochron_rtp::rtcp::{RtcpPacket, parse_compound};
use serde::Serialize;
use tokio::sync::mpsc;

use super::{Args, SILENCE, TEARDOWN_WAIT, TICK};

/// How long a packet waits for those numbered before it (overtaken on the path) before they
/// count as lost.
const REORDER_HOLD: Duration = Duration::from_millis(300);

/// Most gaps a track's summary lists (where they were, for a failure's message).
const GAPS_LISTED: usize = 8;

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
    /// Packets missing from its sequence (never received, or too late to be put back in
    /// order).
    lost: u64,
    /// Packets that arrived after one numbered above them, in time to be put back in order.
    reordered: u64,
    /// Packets that arrived twice.
    duplicates: u64,
    /// The first gaps: where each began, its length, and when it was found (s after PLAY).
    gaps: Vec<Gap>,
    /// Whether its input ended (BYE, or the announced length reached).
    ended: bool,
}

/// A run of sequence numbers a track never received.
#[derive(Clone, Debug, Default, Serialize)]
struct Gap {
    /// The first number missing.
    seq: u16,
    /// How many are missing.
    count: u64,
    /// When the packet after them was released, s after PLAY.
    at_s: f64,
}

/// One track's jitter buffer: packets in sequence order to the track's consumer.
struct TrackOrder {
    buffer: ReorderBuffer<(Instant, Vec<u8>)>,
    /// The extended number last released.
    last: Option<u64>,
}

impl TrackOrder {
    fn new(start: Option<u16>) -> Self {
        let mut buffer = ReorderBuffer::new(REORDER_HOLD);
        if let Some(seq) = start {
            buffer.set_start(seq);
        }
        Self { buffer, last: None }
    }

    /// The packets `now` releases, in order, each after noting a gap before it in `t`.
    fn release(
        &mut self,
        now: Instant,
        since: Instant,
        t: &mut TrackSummary,
    ) -> Vec<(Instant, Vec<u8>)> {
        let mut out = Vec::new();
        while let Some((ext, packet)) = self.buffer.pop(now) {
            if let Some(last) = self.last
                && ext > last + 1
                && t.gaps.len() < GAPS_LISTED
            {
                let at_s = now.saturating_duration_since(since).as_secs_f64();
                t.gaps.push(Gap { seq: (last + 1) as u16, count: ext - last - 1, at_s });
            }
            self.last = Some(ext);
            out.push(packet);
        }
        let stats = self.buffer.stats();
        t.lost = stats.lost + stats.late;
        (t.reordered, t.duplicates) = (stats.reordered, stats.duplicates);
        out
    }
}

/// Releases what each track's jitter buffer lets go at `now`: the video track's packets to the
/// reassembler, its access units to `out`. Returns how many access units were written.
fn release(
    now: Instant,
    t0: Instant,
    order: &mut [TrackOrder],
    summary: &mut NativeSummary,
    video: Option<usize>,
    mut reassembler: Option<&mut Reassembler>,
    out: &mut dyn Write,
) -> anyhow::Result<u64> {
    let mut frames = 0;
    let mut samples: Vec<Fmp4Sample> = Vec::new();
    for (k, (o, t)) in order.iter_mut().zip(&mut summary.tracks).enumerate() {
        let released = o.release(now, t0, t);
        let Some(r) = reassembler.as_deref_mut().filter(|_| Some(k) == video) else { continue };
        for (at, packet) in released {
            let Ok((h, body)) = RtpHeader::parse(&packet) else { continue };
            let ns = at.saturating_duration_since(t0).as_nanos() as u64;
            r.push(&packet[body], h.marker, h.timestamp, ns, &mut samples);
            for s in samples.drain(..) {
                write_annex_b(out, &s.data).context("writing --out")?;
                frames += 1;
            }
        }
    }
    Ok(frames)
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
    let starts = track_starts(&urls, &info);
    let rtptimes: Vec<Option<u32>> = starts.iter().map(|s| s.rtptime).collect();
    playout.handle_start(Instant::now(), &rtptimes);
    let mut order: Vec<TrackOrder> = starts.iter().map(|s| TrackOrder::new(s.seq)).collect();
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
    let mut mtfc = None;
    if a.mtfc {
        mtfc = Some(Mtfc::new(super::mtfc_config(a, &mut client, buffer).await?));
    }
    let mut next_sample = Instant::now();
    let t0 = Instant::now();
    let mut heard = Instant::now();
    let interrupt = tokio::signal::ctrl_c();
    tokio::pin!(interrupt);
    let cut_short = loop {
        tokio::select! {
            got = tokio::time::timeout(TICK, rx.recv()) => match got {
                Ok(Some(In::Rtp { at, track, packet })) => {
                    heard = Instant::now();
                    let Ok((h, _)) = RtpHeader::parse(&packet) else { continue };
                    let (Some(t), Some(o)) =
                        (summary.tracks.get_mut(track), order.get_mut(track))
                    else {
                        continue;
                    };
                    t.packets += 1;
                    playout.handle_packet(at, track, h.timestamp, packet.len());
                    // A copy or a straggler is counted by the buffer and dropped.
                    let _: Arrival<_> = o.buffer.push(at, h.sequence, (at, packet));
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
        let frames = release(now, t0, &mut order, &mut summary, video, reassembler.as_mut(), out)?;
        summary.video_frames += frames;
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
    for o in &mut order {
        o.buffer.flush();
    }
    let now = Instant::now();
    summary.video_frames +=
        release(now, t0, &mut order, &mut summary, video, reassembler.as_mut(), out)?;
    let mut samples = Vec::new();
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
    fn a_packet_overtaken_on_the_path_is_put_back_in_order_and_not_lost() {
        let t0 = Instant::now();
        let mut o = TrackOrder::new(Some(100));
        let mut t = TrackSummary::default();
        let mut got = Vec::new();
        for (k, seq) in [100u16, 102, 101, 103].into_iter().enumerate() {
            let at = t0 + Duration::from_millis(k as u64);
            o.buffer.push(at, seq, (at, vec![seq as u8]));
            got.extend(o.release(at, t0, &mut t).into_iter().map(|(_, p)| p[0]));
        }
        assert_eq!(got, [100, 101, 102, 103]);
        assert_eq!((t.lost, t.reordered, t.gaps.len()), (0, 1, 0));
    }

    #[test]
    fn a_number_missing_past_the_hold_is_a_gap_where_it_was() {
        let t0 = Instant::now();
        let mut o = TrackOrder::new(Some(65_534));
        let mut t = TrackSummary::default();
        for seq in [65_534u16, 65_535, 2] {
            o.buffer.push(t0, seq, (t0, Vec::new()));
        }
        assert_eq!(o.release(t0, t0, &mut t).len(), 2, "2 waits for 0 and 1");
        let later = t0 + REORDER_HOLD;
        assert_eq!(o.release(later, t0, &mut t).len(), 1);
        assert_eq!(t.lost, 2);
        assert_eq!((t.gaps[0].seq, t.gaps[0].count), (0, 2));
        // One of them after all, too late to be put back: still missing from what was played.
        o.buffer.push(later, 1, (later, Vec::new()));
        assert!(o.release(later, t0, &mut t).is_empty());
        assert_eq!(t.lost, 2);
    }

    #[test]
    fn an_access_unit_is_written_with_start_codes() {
        let mut out = Vec::new();
        write_annex_b(&mut out, &[0, 0, 0, 2, 0x65, 1, 0, 0, 0, 1, 0x06]).unwrap();
        assert_eq!(out, vec![0, 0, 0, 1, 0x65, 1, 0, 0, 0, 1, 0x06]);
    }
}
