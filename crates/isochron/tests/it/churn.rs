//! Churn (issue 15): rounds of players that play a clip to the end and vanish without TEARDOWN
//! (a killed player, a dropped phone), one round per clip length. Each round must be served in
//! full: every SETUP and PLAY answered 200, every player given its BYE and every payload byte.
//! Before sessions whose stream ended and whose client left were reaped by liveness, they lived
//! `paused_session_timeout` (five times `session_timeout`) and the fifth round found the
//! 1,000-session table full.
//!
//! CI runs six rounds at an eighth of the time scale: an 8 s clip, a round every 8 s,
//! `session_timeout_s = 8`, `paused_session_timeout_s = 40` (the defaults' ratio),
//! `silence_timeout_s = 5` — without liveness the fifth round would find four rounds' sessions
//! still paused and the table full. `ISOCHRON_CHURN_FULL=1` runs the scale: ten rounds of
//! a 60 s clip, a round a minute, the default timeouts (about 11 minutes).

#![allow(clippy::print_stderr)] // a report of what was measured

use crate::common;

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{ServeOptions, Server, bin, fixture, run, tempdir};
use isochron_loadgen::client::{Client, Incoming, Transport};

const PLAYERS: usize = 250;

/// What a round's players got.
#[derive(Debug, Default)]
struct Round {
    refused: AtomicU64,
    failed: AtomicU64,
    cut: AtomicU64,
    served: AtomicU64,
}

/// One player: SETUP and PLAY over UDP, receive until the BYE, then vanish (the connection and
/// sockets dropped, no TEARDOWN). `want` payload bytes.
async fn player(url: String, want: u64, limit: Duration, round: Arc<Round>) {
    let Ok(mut client) = Client::connect(&url).await else {
        round.failed.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let ok = async {
        client.describe().await.ok()?;
        let r = client.setup(Transport::Udp).await.ok()?;
        (u16::from(r.status()) == 200).then_some(())?;
        client.play(None).await.ok()
    }
    .await;
    if ok.is_none() {
        round.refused.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let (deadline, mut got, mut bye) = (Instant::now() + limit, 0u64, false);
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match client.next(left.min(Duration::from_secs(1))).await {
            Some(Incoming::Rtp(p)) => got += p.payload.len() as u64,
            Some(Incoming::Rtcp { bye: true, .. }) => {
                bye = true;
                // Stragglers on the RTP socket.
                let grace = Instant::now() + Duration::from_millis(300);
                while let Some(left) = grace.checked_duration_since(Instant::now()) {
                    if let Some(Incoming::Rtp(p)) = client.next(left).await {
                        got += p.payload.len() as u64;
                    }
                }
                break;
            }
            _ => {}
        }
    }
    drop(client);
    if bye && got == want {
        round.served.fetch_add(1, Ordering::Relaxed);
    } else {
        round.cut.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn rounds_of_players_that_vanish_at_the_end_are_all_served() {
    let _load = common::load(common::weight::PLAYER);
    let full = std::env::var_os("ISOCHRON_CHURN_FULL").is_some_and(|v| v == "1");
    let (clip, period, n_rounds, config) = if full {
        (fixture("low60"), Duration::from_secs(60), 10, String::new())
    } else {
        (
            fixture("low8"),
            Duration::from_secs(8),
            6,
            "[rtsp]\nsession_timeout_s = 8\npaused_session_timeout_s = 40\n\
             silence_timeout_s = 5\n"
                .to_owned(),
        )
    };
    // Sockets: 250 players hold three each, and two rounds overlap at their ends.
    common::raise_open_files();
    let dir = tempdir();
    let data = dir.path().join("store");
    let out = run(Command::new(bin()).arg("ingest").arg("--data").arg(&data).arg(&clip), 120);
    assert!(out.status.success(), "ingest: {}", String::from_utf8_lossy(&out.stderr));
    let server =
        Server::start(&data, ServeOptions { config: Some(&config), ..ServeOptions::default() });
    let name = clip.file_stem().unwrap().to_str().unwrap().to_owned();
    let url = server.url(&name);
    let want = std::fs::metadata(&clip).unwrap().len();
    let rt = common::runtime();
    let start = Instant::now();
    let mut rounds = Vec::new();
    let mut tasks = Vec::new();
    for r in 0..n_rounds {
        let at = start + period * r as u32;
        std::thread::sleep(at.saturating_duration_since(Instant::now()));
        let round = Arc::new(Round::default());
        for _ in 0..PLAYERS {
            tasks.push(rt.spawn(player(url.clone(), want, period * 3, Arc::clone(&round))));
        }
        rounds.push(round);
    }
    rt.block_on(async {
        for t in tasks {
            let _ = t.await;
        }
    });
    let report: Vec<String> = rounds
        .iter()
        .enumerate()
        .map(|(i, r)| {
            format!(
                "round {}: served {} refused {} cut {} failed {}",
                i + 1,
                r.served.load(Ordering::Relaxed),
                r.refused.load(Ordering::Relaxed),
                r.cut.load(Ordering::Relaxed),
                r.failed.load(Ordering::Relaxed)
            )
        })
        .collect();
    eprintln!("{}", report.join("\n"));
    for (i, r) in rounds.iter().enumerate() {
        assert_eq!(
            r.served.load(Ordering::Relaxed),
            PLAYERS as u64,
            "round {} not served in full:\n{}\nlog:\n{}",
            i + 1,
            report.join("\n"),
            server.log().lines().rev().take(80).collect::<Vec<_>>().join("\n")
        );
    }
}
