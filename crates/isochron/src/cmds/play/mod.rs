//! `isochron play URL`: isochron's own player-side client (what openRTSP is to LIVE555). One
//! RTSP session (DESCRIBE, SETUP, PLAY, TEARDOWN at the end) whose packets go through the player
//! core, `isochron_loadgen::player`: a jitter buffer in RTP sequence (GSN) order, the PCR playout
//! clock, and per-source counts with each cluster node's LSN gaps (Yima §2.2, §2.6). Over UDP it
//! asks for lost packets again (RBEC, Yima §2.3): an RTCP generic NACK (RFC 4585 §6.2.1) to the
//! RTCP port of the node that sent each one (`isochron_loadgen::player::repair`). `--out`
//! writes the payloads in order (the MPEG-TS); the summary goes to stderr as a table, or to
//! stdout as one JSON object with `--json`.
//!
//! The session ends on RTCP BYE (after a grace of the buffer for packets still on their way) or
//! once the media the PLAY `Range` announced has arrived; `--timeout`, a long silence, Ctrl-C
//! or a BYE giving a reason (the server cut the stream) end it with exit status 1, after the
//! summary, as does a packet lost for good. RTSP refusals exit 1 with the status line.
//!
//! An object served as native RTP (one stream per track, from MP4 or Matroska) is played by
//! [`native`]: every track set up, consumed by its RTP timestamps; `--out` writes the video
//! track's H.264 as an Annex B byte stream.

#![allow(clippy::print_stdout, clippy::print_stderr)]

mod native;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use isochron_loadgen::bench::mtfc::MtfcConfig;
use isochron_loadgen::bench::session::range_length;
use isochron_loadgen::client::status_line;
use isochron_loadgen::player::{Ext, Player, RepairConfig, Summary};
use isochron_loadgen::{Client, Incoming, Transport};

/// The longest wait between two looks at the player's state.
const TICK: Duration = Duration::from_millis(100);
/// Nothing received for this long (neither RTP nor RTCP): the server is gone.
const SILENCE: Duration = Duration::from_secs(10);
/// How long TEARDOWN may take at the end.
const TEARDOWN_WAIT: Duration = Duration::from_secs(2);

/// play arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The object to play (`rtsp://host:port/name`).
    #[arg(value_name = "URL")]
    url: String,
    /// Write the received MPEG-TS (the payloads in RTP sequence order) to FILE; `-` for stdout.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Lower transport: udp or tcp (interleaved on the RTSP connection).
    #[arg(long, value_name = "T", default_value = "udp")]
    transport: Transport,
    /// Jitter buffer: a packet waits at most this long for those before it; playback starts
    /// (and resumes after a starvation) with this much media buffered.
    #[arg(long, value_name = "MS", default_value_t = 2000)]
    buffer_ms: u64,
    /// Print the summary as one JSON object on stdout (instead of a table on stderr).
    #[arg(long)]
    json: bool,
    /// Give up after S seconds (exit status 1) [default: no limit].
    #[arg(long, value_name = "S")]
    timeout: Option<f64>,
    /// Do not ask for lost packets again (no RTCP NACKs).
    #[arg(long)]
    no_retransmit: bool,
    /// Smooth the server's rate to keep the buffer level (MTFC, Yima §2.5): ask the server to
    /// pace faster or slower as the buffer crosses its thresholds.
    #[arg(long)]
    mtfc: bool,
    /// With `--mtfc`: ask the server to send at the object's mean byte rate rather than on the
    /// content's own schedule (`x-isochron-pacing: rate`), so that a VBR stream's traffic is
    /// smooth (Yima §2.5); MTFC then steers the buffer around it. A server that cannot (a
    /// cluster, a feed) paces by content, and a warning says so.
    #[arg(long, requires = "mtfc")]
    rate_paced: bool,
}

/// Runs `isochron play`.
pub(crate) fn run(a: Args) -> anyhow::Result<ExitCode> {
    let to_stdout = a.out.as_deref().is_some_and(|p| p.as_os_str() == "-");
    if a.json && to_stdout {
        bail!("--json and --out - both write to standard output");
    }
    let timeout = match a.timeout {
        Some(s) if !(s.is_finite() && s > 0.0) => bail!("--timeout {s}: expected seconds > 0"),
        Some(s) => Some(Duration::from_secs_f64(s)),
        None => None,
    };
    let mut out: Box<dyn Write> = match &a.out {
        None => Box::new(std::io::sink()),
        Some(_) if to_stdout => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
        )),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let buffer = Duration::from_millis(a.buffer_ms.max(1));
    let (played, cut_short) = rt.block_on(play(&a, buffer, timeout, &mut out))?;
    out.flush().context("writing --out")?;
    drop(out);
    let (bye_reason, lost) = match &played {
        Played::Mp2t(summary) => {
            report(&a, summary)?;
            (summary.bye_reason.clone(), summary.lost)
        }
        Played::Native(summary) => {
            report(&a, summary)?;
            (summary.bye_reason.clone(), summary.lost())
        }
    };
    // A BYE that gives a reason (RFC 3550 §6.6) is the server's word that the stream was cut (a
    // block with no good copy, a node down): not a normal end, whatever arrived before it.
    // Packets never received, not even by retransmission, are a hole in what was written.
    let cut_short = cut_short
        .or_else(|| bye_reason.map(|r| anyhow!("the server ended the stream: {r}")))
        .or_else(|| (lost > 0).then(|| anyhow!("{lost} packets lost and not repaired")));
    match cut_short {
        None => Ok(ExitCode::SUCCESS),
        Some(why) => Err(why),
    }
}

/// MTFC's settings (`--mtfc`): around the object's mean rate when `--rate-paced` was asked for
/// and granted (said on stderr); a refusal is warned of, and the stream keeps its content's
/// pacing.
async fn mtfc_config(
    a: &Args,
    client: &mut Client,
    buffer: Duration,
) -> anyhow::Result<MtfcConfig> {
    if a.rate_paced {
        if client.ask_rate_pacing().await? {
            eprintln!("isochron: rate pacing: the server sends at the object's mean rate");
            return Ok(MtfcConfig::for_rate_pacing(buffer, 4));
        }
        eprintln!(
            "isochron: warning: the server paces this stream by its content, not at its mean rate \
             (a cluster or a live feed)"
        );
    }
    Ok(MtfcConfig::for_depth(buffer, 4))
}

/// Prints `summary`: one JSON object on stdout with `--json`, else a table on stderr.
fn report<S: serde::Serialize + std::fmt::Display>(a: &Args, summary: &S) -> anyhow::Result<()> {
    if a.json {
        let mut v = serde_json::to_value(summary)?;
        v["url"] = a.url.clone().into();
        v["transport"] = a.transport.as_str().into();
        v["buffer_ms"] = a.buffer_ms.into();
        println!("{v}");
    } else {
        eprintln!("isochron play {} over {}", a.url, a.transport.as_str());
        eprint!("{summary}");
    }
    Ok(())
}

/// The session: RTSP up to PLAY (errors are RTSP refusals or a dead server), then packets
/// into the player until it is done or the session is cut short (the second value says why).
async fn play(
    a: &Args,
    buffer: Duration,
    timeout: Option<Duration>,
    out: &mut dyn Write,
) -> anyhow::Result<(Played, Option<anyhow::Error>)> {
    let started = Instant::now();
    let mut client = Client::connect(&a.url).await?;
    let presentation = client.describe_presentation().await?;
    if !presentation.is_mp2t() {
        let deadline = timeout.map(|t| started + t);
        let (native, cut_short) =
            native::play(a, client, &presentation, (buffer, deadline), out).await?;
        return Ok((Played::Native(native), cut_short));
    }
    let r = client.setup(a.transport).await?;
    if u16::from(r.status()) != 200 {
        bail!("SETUP: {}", status_line(&r));
    }
    let info = client.play(None).await?;
    let mut player = Player::new(buffer);
    if a.transport == Transport::Udp && !a.no_retransmit {
        player = player.with_repairs(RepairConfig::default());
    }
    if a.mtfc {
        player = player.with_mtfc(mtfc_config(a, &mut client, buffer).await?);
    }
    let mut mtfc_on = a.mtfc;
    player.handle_play(info.seq, info.range.as_deref().and_then(range_length));
    let mut media_ssrc = None;
    let deadline = timeout.map(|t| started + t);
    let mut heard = Instant::now();
    let interrupt = tokio::signal::ctrl_c();
    tokio::pin!(interrupt);
    let cut_short = loop {
        let now = Instant::now();
        let wake =
            [player.poll_timeout(), deadline].into_iter().flatten().fold(now + TICK, Instant::min);
        tokio::select! {
            got = client.next(wake.saturating_duration_since(now)) => match got {
                Some(Incoming::Rtp(p)) => {
                    heard = Instant::now();
                    media_ssrc.get_or_insert(p.header.ssrc);
                    let ext = Ext { lsn: p.lsn, block_end: p.block_end };
                    player.handle_packet(p.at, p.from, p.header.sequence, ext, &p.payload);
                }
                Some(Incoming::Rtcp { at, bye, bye_reason, .. }) => {
                    heard = Instant::now();
                    if bye {
                        player.handle_bye(at, bye_reason);
                    }
                }
                None => {}
            },
            _ = &mut interrupt => break Some(anyhow!("interrupted")),
        }
        let now = Instant::now();
        while let Some(payload) = player.poll_payload(now) {
            out.write_all(payload).context("writing --out")?;
        }
        for (node, seqs) in player.poll_requests(now) {
            let Some(ssrc) = media_ssrc else { break };
            if let Err(e) = client.send_nack(node, ssrc, &seqs).await {
                tracing::debug!(%node, error = %e, "NACK not sent");
            }
        }
        if let Some((pace, buffer)) = player.poll_rate(now).filter(|_| mtfc_on)
            && !client.set_rate(pace, buffer).await?
        {
            eprintln!("isochron: warning: the server refused the MTFC rate request; MTFC off");
            mtfc_on = false;
        }
        if player.is_done(now) {
            break None;
        }
        if deadline.is_some_and(|d| now >= d) {
            break Some(anyhow!("the stream did not end within --timeout"));
        }
        if now.duration_since(heard) >= SILENCE {
            break Some(anyhow!("nothing received for {} s", SILENCE.as_secs()));
        }
    };
    let now = Instant::now();
    player.finish(now);
    while let Some(payload) = player.poll_payload(now) {
        out.write_all(payload).context("writing --out")?;
    }
    match tokio::time::timeout(TEARDOWN_WAIT, client.teardown()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!("isochron: warning: {e:#}"),
        Err(_) => eprintln!("isochron: warning: TEARDOWN: no response within {TEARDOWN_WAIT:?}"),
    }
    Ok((Played::Mp2t(player.summary()), cut_short))
}

/// What a session played: an MPEG-TS object through the player core, or native tracks.
enum Played {
    Mp2t(Summary),
    Native(native::NativeSummary),
}
