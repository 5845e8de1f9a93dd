//! The cluster's session rules under failures, in virtual time, 500 seeds a test:
//! three to five nodes running the server's own cores (`NodeCore`, `CycleScheduler`, `Pacer`),
//! bipartite sessions (Yima §2.2: every node sends its own blocks straight to the player) on
//! one to three origins, and a fault at a seeded time — a member or an origin crashing, a node
//! standing still (SIGSTOP), a second one stopping about when the first resumes, one on
//! a machine so busy it runs once every 10–300 ms, a partition that heals, etcd gone
//! (`docs/design/takeover.md`).
//! Each player checks every packet byte for byte, that none is missing, and how its session
//! ended (`harness`).
//!
//! `HARNESS_SEEDS=N` runs N seeds a test (default 500: 4,000 seeded runs in about 32 s
//! on two cores); `HARNESS_SEED=S` runs seed S alone,
//! and with `HARNESS_TRACE` set a failure's message lists every node core's outputs.

use std::time::Duration;

use isochron_base::mix::{SplitMix64, hash_words};
use isochron_rtsp::rtsp_types::StatusCode;

mod common;
mod harness;

use harness::{Fault, Setup, Sim};

/// The seeds a test runs.
fn seeds() -> std::ops::Range<u64> {
    let var = |k: &str| std::env::var(k).ok().and_then(|s| s.parse::<u64>().ok());
    match (var("HARNESS_SEED"), var("HARNESS_SEEDS")) {
        (Some(s), _) => s..s + 1,
        (None, n) => 0..n.unwrap_or(500),
    }
}

/// Which faults a test draws from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    None,
    CrashMember,
    CrashOrigin,
    Stall,
    /// A node stands still long enough to be taken over, and another one stops about when it
    /// resumes: from a second before (both stopped a while) to 900 ms after (before or after
    /// its give-back point).
    StallTwice,
    Partition,
    EtcdDown,
    Slow,
}

/// One seeded run of fault kind `kind`: 3–5 nodes, 2 copies (3 on four or five nodes, one
/// time in two), 1–3 players on random origins starting in the first two seconds, the fault
/// at a random time while they play, then the object's length plus a margin.
fn run(seed: u64, kind: Kind) -> (Sim, String, Option<Fault>) {
    let mut rng = SplitMix64::new(hash_words(&[seed, kind as u64, 0x5eed]));
    let mut draw = |n: u64| rng.next_u64() % n;
    let nodes = 3 + draw(3) as u16;
    let copies = if nodes >= 4 && draw(2) == 0 { 3 } else { 2 };
    let setup = Setup { nodes, copies, seed, ..Setup::default() };
    let blocks = setup.blocks;
    let mut sim = Sim::new(setup);
    let players = 1 + draw(3) as u16;
    let mut origins = Vec::new();
    let mut at = Duration::ZERO;
    for p in 0..players {
        at += Duration::from_millis(draw(700));
        sim.run_until(at);
        let origin = 1 + draw(u64::from(nodes)) as u16;
        sim.play(origin, 5000 + 2 * p);
        origins.push(origin);
    }
    // Any time while they play, late ones too: a survivor whose share ended before the loss
    // goes on with the blocks it gains.
    let when = at + Duration::from_millis(500 + draw(11_000));
    let pick_member = |draw: &mut dyn FnMut(u64) -> u64| loop {
        let n = 1 + draw(u64::from(nodes)) as u16;
        if !origins.contains(&n) {
            return Some(n);
        }
        if origins.len() == usize::from(nodes) {
            return None;
        }
    };
    let mut then = String::new();
    let fault = match kind {
        Kind::None => None,
        Kind::CrashMember => pick_member(&mut draw).map(Fault::Crash),
        Kind::CrashOrigin => Some(Fault::Crash(origins[draw(origins.len() as u64) as usize])),
        Kind::Stall => {
            let n = 1 + draw(u64::from(nodes)) as u16;
            Some(Fault::Stall(n, Duration::from_millis(100 + draw(3500))))
        }
        Kind::StallTwice => {
            let n = 1 + draw(u64::from(nodes)) as u16;
            let first = Duration::from_millis(1200 + draw(2400));
            let m = 1 + (n + draw(u64::from(nodes) - 1) as u16) % nodes;
            let second = when + first + Duration::from_millis(draw(1900)) - Duration::from_secs(1);
            let fault = Fault::Stall(m, Duration::from_millis(1200 + draw(2400)));
            then = format!(", then {fault:?} at {:.3} s", second.as_secs_f64());
            sim.inject(second, fault);
            Some(Fault::Stall(n, first))
        }
        Kind::Partition => {
            let n = 1 + draw(u64::from(nodes)) as u16;
            Some(Fault::Partition(n, Duration::from_millis(100 + draw(4500))))
        }
        Kind::EtcdDown => Some(Fault::EtcdDown(Duration::from_millis(200 + draw(6000)))),
        Kind::Slow => {
            let n = 1 + draw(u64::from(nodes)) as u16;
            let quantum = Duration::from_millis(10 + draw(290));
            Some(Fault::Slow(n, Duration::from_millis(500 + draw(6000)), quantum))
        }
    };
    if let Some(f) = fault {
        sim.inject(when, f);
    }
    sim.run_until(at + Duration::from_secs(blocks + 10));
    let what = format!(
        "seed {seed}: {nodes} nodes, {copies} copies, players on {origins:?}, {fault:?} at {:.3} s{then}",
        when.as_secs_f64()
    );
    (sim, what, fault)
}

/// Every player got every packet, each right; one whose origin lives got one BYE at the end.
fn assert_whole(sim: &Sim, what: &str, cut_off: Option<u16>) {
    let total = sim.total_packets();
    for (addr, p) in &sim.players {
        let ctx =
            || format!("{what}, player {addr} on n{}; log:\n{}", p.origin, sim.log.join("\n"));
        assert_eq!(p.play_status, Some(StatusCode::Ok), "PLAY answered 200: {}", ctx());
        let wrong = &p.wrong[..p.wrong.len().min(5)];
        assert!(p.wrong.is_empty(), "wrong packets {wrong:?}: {}", ctx());
        // An origin cut off from every member has lost as many as there are copies: it ends
        // its sessions, saying why, and closes their connections (a clean error).
        if cut_off == Some(p.origin) && !p.bye_reasons.is_empty() {
            assert!(p.closed, "the connection closed after the BYE: {}", ctx());
            continue;
        }
        let missing = p.missing(total);
        assert!(
            missing.is_empty(),
            "{} packets missing (first {:?}): {}",
            missing.len(),
            &missing[..missing.len().min(10)],
            ctx()
        );
        // A dead origin's session has nobody to send its BYE (`docs/design/takeover.md`).
        let byes = if sim.crashed(p.origin) { 0 } else { 1 };
        assert_eq!(p.byes, byes, "BYEs at the end: {}", ctx());
    }
}

fn check(kind: Kind) -> (u64, u64) {
    let (mut packets, mut dups) = (0, 0);
    for seed in seeds() {
        let (sim, what, fault) = run(seed, kind);
        let cut_off = match fault {
            Some(Fault::Partition(n, _)) => Some(n),
            _ => None,
        };
        assert_whole(&sim, &what, cut_off);
        for p in sim.players.values() {
            packets += p.got.values().map(|n| u64::from(*n)).sum::<u64>();
            dups += p.duplicates();
        }
    }
    (packets, dups)
}

#[test]
fn without_faults_every_packet_arrives_once() {
    let (packets, dups) = check(Kind::None);
    assert_eq!(dups, 0, "no packet twice in {packets}");
}

#[test]
fn a_member_that_crashes_is_taken_over_without_a_hole() {
    check(Kind::CrashMember);
}

#[test]
fn an_origin_that_crashes_leaves_its_sessions_playing() {
    check(Kind::CrashOrigin);
}

#[test]
fn a_node_that_stands_still_loses_nothing() {
    check(Kind::Stall);
}

#[test]
fn a_taker_that_stands_still_before_it_gives_back_loses_nothing() {
    check(Kind::StallTwice);
}

#[test]
fn a_partition_that_heals_loses_nothing() {
    check(Kind::Partition);
}

#[test]
fn a_node_on_a_busy_machine_loses_nothing() {
    check(Kind::Slow);
}

#[test]
fn with_etcd_gone_a_playing_session_goes_on() {
    let (packets, dups) = check(Kind::EtcdDown);
    assert_eq!(dups, 0, "nobody was lost: no packet twice in {packets}");
}

/// One scenario by hand: `nodes` nodes, `copies` copies, a player on each origin of `players`
/// (started `ms` apart in order), `fault` at `at`.
fn scenario(nodes: u16, copies: u8, players: &[(u16, u64)], fault: Fault, at: Duration) -> Sim {
    let mut sim = Sim::new(Setup { nodes, copies, ..Setup::default() });
    let mut t = Duration::ZERO;
    for (i, (origin, after_ms)) in players.iter().enumerate() {
        t += Duration::from_millis(*after_ms);
        sim.run_until(t);
        sim.play(*origin, 5000 + 2 * i as u16);
    }
    sim.inject(at, fault);
    sim.run_until(t + Duration::from_secs(22));
    sim
}

/// n1's own blocks (0, 4, 8) are all sent by 9.25 s; n4 crashes at 9.6 s, when n1's share has
/// ended (its closed connection says so at once): n1 takes n4's block 11 over (its second
/// copy) all the same, its run revived, and the origin waits for its word before the BYE.
#[test]
fn a_share_that_ended_before_a_loss_sends_the_blocks_it_gains() {
    let sim = scenario(4, 2, &[(3, 0)], Fault::Crash(4), Duration::from_millis(9600));
    assert_whole(&sim, "n4 crashed after n1's share ended", None);
    assert_eq!(sim.revived(1), 1, "n1's run ended twice");
    // The origin heard every sender's word at once: its BYE follows the last packet by the
    // pacer's `bye_delay`, not by the 2 s it would wait for a word that does not come.
    let p = sim.players.values().next().unwrap();
    let after = p.bye_at.unwrap().saturating_duration_since(p.last_packet.unwrap());
    assert!(after < Duration::from_millis(700), "BYE {after:?} after the last packet");
}

/// n2 is cut off from n1 (the origin) and n3 for 1.05 s from 8.9 s: each side loses the
/// other after 1 s and takes the other's part over (n2 the origin's block 9, whose second
/// copy it holds). Told by the other when the link heals, each holds back its own part up to
/// the give-back point's block (block 9), not what it took: before, both held back the end of
/// block 9, each thinking the other sent it.
#[test]
fn both_sides_of_a_partition_keep_the_parts_they_took_from_each_other() {
    let sim = scenario(
        3,
        2,
        &[(1, 0)],
        Fault::Partition(2, Duration::from_millis(1050)),
        Duration::from_millis(8900),
    );
    assert_whole(&sim, "n2 cut off 1.05 s", None);
    assert!(sim.withholds(1) > 0 && sim.withholds(2) > 0, "both sides were told");
}
