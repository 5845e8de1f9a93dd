//! Failures injected while the cluster bench runs, and the audit of every session after it:
//! the cluster soak of issue 30 (`scripts/soak-cluster.sh`, `docs/results/soak.md`).
//!
//! Why: CineGrid's future work asks for a server that holds for an hour, and a cluster holds
//! only if it also outlives its parts. Yima §2.7 asks for "continuous streaming service while
//! surviving disk crashes"; `docs/design/takeover.md` says what isochron promises when a node
//! dies: with K ≥ 2 copies every session it did not hold the RTSP connection of plays on,
//! byte-exact, its blocks sent by the holders of their next copies. Here that promise is
//! exercised on a schedule, and every session is judged against it.
//!
//! * `--chaos-kill-every S`: every S seconds the next node in turn is SIGKILLed, stays down
//!   `--chaos-down` seconds, and is started again on the same store; once every node sees all
//!   up, `isochron fsck --server` checks the whole cluster (every block, K copies).
//! * `--chaos-etcd-every S`: every S seconds the next etcd member in turn is restarted (the
//!   others keep the quorum: `--etcd-members 3`).
//! * The audit reads the bench's sessions: a session whose RTSP node was killed while it
//!   played (or was down when it began) is the one loss the design accepts (its client's only
//!   connection broke, `docs/design/takeover.md`'s non-goals); every
//!   other must have played to the end, or to the run's end, with no sequence gap and no
//!   starvation, and an MP2T session that played to the end must have received exactly its
//!   file's TS packets ([`isochron_loadgen::bench::digest`]).
//!
//! Not here: building the cluster ([`super::bench_cluster`]), the measurement ([`super::bench`]).

#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use isochron_etcd::testing::EtcdCluster;
use isochron_loadgen::bench::digest::ts_digest;
use serde::Serialize;
use serde_json::json;

/// What to inject.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ChaosSpec {
    /// SIGKILL a node (the next in turn) this often.
    pub(crate) kill_every: Option<Duration>,
    /// How long a killed node stays down.
    pub(crate) down: Duration,
    /// Restart an etcd member (the next in turn) this often.
    pub(crate) etcd_every: Option<Duration>,
}

impl ChaosSpec {
    /// Whether anything is injected.
    pub(crate) fn any(&self) -> bool {
        self.kill_every.is_some() || self.etcd_every.is_some()
    }
}

/// One injected failure and what followed it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ChaosEvent {
    /// Seconds after the bench started.
    pub(crate) at_s: f64,
    /// `kill` (a node, SIGKILL) or `etcd-restart`.
    pub(crate) what: &'static str,
    /// The node's name or `etcd<i>`.
    pub(crate) target: String,
    /// The target's address (a node's), to find the sessions it held.
    pub(crate) ip: Option<String>,
    /// Seconds from the failure until the target was back (every node seeing all up, for a
    /// node; healthy, for an etcd member).
    pub(crate) back_after_s: Option<f64>,
    /// A node: whether `fsck --server` found the cluster clean once it was back, and its
    /// report.
    pub(crate) fsck_clean: Option<bool>,
    pub(crate) fsck: Option<serde_json::Value>,
    /// What went wrong bringing it back, if anything.
    pub(crate) error: Option<String>,
}

/// What the chaos loop needs of the cluster: kill, restart and check nodes.
pub(crate) trait Cluster {
    /// How many nodes.
    fn len(&self) -> usize;
    /// Node `i`'s name and address.
    fn node(&self, i: usize) -> (String, String);
    /// SIGKILLs node `i` and waits for it to exit.
    fn kill(&mut self, i: usize) -> anyhow::Result<()>;
    /// Starts node `i` again on its store and waits until every node sees all up.
    fn restart(&mut self, i: usize) -> anyhow::Result<()>;
    /// `isochron fsck --server` through node `i`: clean, and the report.
    fn fsck(&self, i: usize) -> anyhow::Result<(bool, serde_json::Value)>;
}

/// Waits for the bench (`bench`) to end, injecting the failures of `spec` meanwhile; returns
/// its exit status and the events.
pub(crate) fn run(
    mut bench: Child,
    cluster: &mut dyn Cluster,
    etcd: &mut EtcdCluster,
    etcd_members: usize,
    spec: ChaosSpec,
) -> anyhow::Result<(ExitStatus, Vec<ChaosEvent>)> {
    let t0 = Instant::now();
    let mut events = Vec::new();
    let mut next_kill = spec.kill_every.map(|e| t0 + e);
    let mut next_etcd = spec.etcd_every.map(|e| t0 + e);
    let (mut kills, mut restarts) = (0usize, 0usize);
    loop {
        if let Some(status) = bench.try_wait().context("waiting for the bench")? {
            return Ok((status, events));
        }
        let now = Instant::now();
        if let (Some(at), Some(every)) = (next_kill, spec.kill_every)
            && now >= at
        {
            let i = kills % cluster.len().max(1);
            kills += 1;
            next_kill = Some(at + every);
            events.push(kill_and_restart(cluster, i, spec.down, t0));
            continue;
        }
        if let (Some(at), Some(every)) = (next_etcd, spec.etcd_every)
            && now >= at
        {
            let i = restarts % etcd_members.max(1);
            restarts += 1;
            next_etcd = Some(at + every);
            let at_s = t0.elapsed().as_secs_f64();
            let t = Instant::now();
            let r = etcd.restart(i);
            println!("chaos: etcd member {i} restarted at {at_s:.0} s ({r:?})");
            events.push(ChaosEvent {
                at_s,
                what: "etcd-restart",
                target: format!("etcd{i}"),
                ip: None,
                back_after_s: r.is_ok().then(|| t.elapsed().as_secs_f64()),
                fsck_clean: None,
                fsck: None,
                error: r.err().map(|e| e.to_string()),
            });
            continue;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// SIGKILLs node `i`, starts it again after `down`, waits for the cluster, checks it.
fn kill_and_restart(
    cluster: &mut dyn Cluster,
    i: usize,
    down: Duration,
    t0: Instant,
) -> ChaosEvent {
    let (name, ip) = cluster.node(i);
    let at_s = t0.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut event = ChaosEvent {
        at_s,
        what: "kill",
        target: name.clone(),
        ip: Some(ip),
        back_after_s: None,
        fsck_clean: None,
        fsck: None,
        error: None,
    };
    let back = cluster.kill(i).and_then(|()| {
        std::thread::sleep(down);
        cluster.restart(i)
    });
    match back {
        Ok(()) => {
            event.back_after_s = Some(t.elapsed().as_secs_f64());
            match cluster.fsck(i) {
                Ok((clean, report)) => {
                    event.fsck_clean = Some(clean);
                    event.fsck = Some(report);
                }
                Err(e) => event.error = Some(format!("fsck: {e:#}")),
            }
        }
        Err(e) => event.error = Some(format!("{e:#}")),
    }
    println!(
        "chaos: {name} killed at {at_s:.0} s, back after {}, fsck {}",
        event.back_after_s.map_or_else(|| "never".into(), |s| format!("{s:.1} s")),
        match event.fsck_clean {
            Some(true) => "clean",
            Some(false) => "NOT clean",
            None => "not run",
        }
    );
    event
}

/// How each session ended, against the promise (see the module docs).
#[derive(Debug, Default, Clone, Serialize)]
pub(crate) struct Audit {
    /// Sessions the bench started.
    pub(crate) started: usize,
    /// Played to the end, every packet once, no starvation (and MP2T: the file's content).
    pub(crate) byte_exact: usize,
    /// MP2T sessions checked against their file's digest among them.
    pub(crate) digest_checked: usize,
    /// Stopped by the run's end, nothing missing so far.
    pub(crate) cut_by_the_end: usize,
    /// Refused (453 or 503).
    pub(crate) refused: usize,
    /// Their RTSP node was killed while they played, or was down when they began: excused.
    pub(crate) on_a_killed_node: usize,
    /// Anything else: the promise broken. Each with the reason.
    pub(crate) broken: Vec<String>,
    /// Parts of sessions taken over, given back and withheld (the nodes' `/metrics`,
    /// `isochron_takeovers_total`, summed over the nodes' lives).
    pub(crate) takeovers: BTreeMap<String, f64>,
}

/// Judges every session of the bench's `report` (its `sessions`) against the kills in
/// `events`; `media` are the files ingested (an MP2T object is checked against its file).
pub(crate) fn audit(
    report: &serde_json::Value,
    events: &[ChaosEvent],
    media: &[std::path::PathBuf],
    takeovers: BTreeMap<String, f64>,
) -> anyhow::Result<Audit> {
    let mut digests = BTreeMap::new();
    for f in media {
        let Some(stem) = f.file_stem().and_then(|s| s.to_str()) else { continue };
        if is_mp2t(f) {
            let bytes = std::fs::read(f).with_context(|| format!("reading {}", f.display()))?;
            digests.insert(stem.to_owned(), format!("{:016x}", ts_digest(&bytes)));
        }
    }
    let mut a = Audit { takeovers, ..Audit::default() };
    let empty = Vec::new();
    let sessions = report["sessions"].as_array().unwrap_or(&empty);
    // The bench starts within a second of the chaos clock; a kill this close to a session's
    // span counts as during it.
    const SLACK_S: f64 = 2.0;
    for s in sessions {
        a.started += 1;
        let url = s["url"].as_str().unwrap_or("");
        let (start, end) =
            (s["start_s"].as_f64().unwrap_or(0.0), s["end_s"].as_f64().unwrap_or(0.0));
        let host =
            url.strip_prefix("rtsp://").and_then(|r| r.split([':', '/']).next()).unwrap_or("");
        // Its RTSP node was killed while it played, or was down (not yet back) when it began.
        let killed = events.iter().any(|e| {
            let back = e.at_s + e.back_after_s.unwrap_or(f64::INFINITY);
            e.what == "kill"
                && e.ip.as_deref() == Some(host)
                && back + SLACK_S >= start
                && e.at_s - SLACK_S <= end
        });
        let n = |k: &str| s[k].as_u64().unwrap_or(0);
        let outcome = s["outcome"].as_str().unwrap_or("");
        let who = format!(
            "client {} session {} ({url}, {start:.0}–{end:.0} s)",
            s["client"], s["session"]
        );
        if outcome == "refused" {
            a.refused += 1;
            continue;
        }
        if killed {
            a.on_a_killed_node += 1;
            continue;
        }
        let mut wrong = Vec::new();
        if n("lost") > 0 {
            wrong.push(format!("{} packets lost", n("lost")));
        }
        if n("starvations") > 0 {
            wrong.push(format!("{} starvations", n("starvations")));
        }
        match outcome {
            "complete" => {
                let object = url.rsplit('/').next().unwrap_or("").split('?').next().unwrap_or("");
                if let (Some(want), Some(got)) = (digests.get(object), s["ts_digest"].as_str())
                    && n("seeks") == 0
                {
                    a.digest_checked += 1;
                    if want != got {
                        wrong.push(format!("content digest {got}, the file's {want}"));
                    }
                }
                if wrong.is_empty() {
                    a.byte_exact += 1;
                }
            }
            "stopped" => {
                if wrong.is_empty() {
                    a.cut_by_the_end += 1;
                }
            }
            other => wrong.push(format!(
                "ended {other}: {}",
                s["error"].as_str().unwrap_or("no error given")
            )),
        }
        if !wrong.is_empty() {
            a.broken.push(format!("{who}: {}", wrong.join(", ")));
        }
    }
    Ok(a)
}

/// Whether `f` is MPEG-TS by its name (`.ts`, `.m2ts`, `.mts`).
fn is_mp2t(f: &Path) -> bool {
    f.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| ["ts", "m2ts", "mts"].contains(&e.to_ascii_lowercase().as_str()))
}

/// The audit as `report.json`'s `cluster.chaos`.
pub(crate) fn to_json(events: &[ChaosEvent], audit: &Audit) -> serde_json::Value {
    json!({ "events": events, "sessions": audit })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(at_s: f64, ip: &str) -> ChaosEvent {
        ChaosEvent {
            at_s,
            what: "kill",
            target: "n2".into(),
            ip: Some(ip.into()),
            back_after_s: Some(6.0),
            fsck_clean: Some(true),
            fsck: None,
            error: None,
        }
    }

    #[test]
    fn sessions_are_judged_against_the_kills_and_their_files() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("clip.ts");
        let ts: Vec<u8> = (0..10u8).flat_map(|i| [0x47, i].into_iter().chain([i; 186])).collect();
        std::fs::write(&file, &ts).unwrap();
        let good = format!("{:016x}", ts_digest(&ts));
        let s = |client: u64, host: &str, outcome: &str, start: f64, end: f64, digest: &str| {
            json!({"client": client, "session": 0, "url": format!("rtsp://{host}:8554/clip?delivery=bipartite"),
                   "start_s": start, "end_s": end, "outcome": outcome, "lost": 0, "starvations": 0,
                   "seeks": 0, "ts_digest": digest, "error": null})
        };
        let report = json!({"sessions": [
            s(0, "10.0.0.2", "complete", 0.0, 70.0, &good),
            s(1, "10.0.0.3", "error", 100.0, 130.0, &good),
            s(2, "10.0.0.2", "complete", 100.0, 170.0, "0000000000000001"),
            s(3, "10.0.0.2", "stopped", 190.0, 200.0, &good),
            s(4, "10.0.0.2", "refused", 190.0, 191.0, ""),
            s(5, "10.0.0.2", "error", 150.0, 160.0, &good),
            // Refused a connection while n2 (10.0.0.3) was down, after the kill.
            s(6, "10.0.0.3", "error", 124.0, 124.5, ""),
        ]});
        let a = audit(&report, &[event(120.0, "10.0.0.3")], &[file], BTreeMap::new()).unwrap();
        assert_eq!(a.started, 7);
        assert_eq!((a.byte_exact, a.digest_checked), (1, 2));
        assert_eq!((a.on_a_killed_node, a.cut_by_the_end, a.refused), (2, 1, 1));
        assert_eq!(a.broken.len(), 2, "{:?}", a.broken);
        assert!(a.broken[0].contains("content digest 0000000000000001"), "{:?}", a.broken);
        assert!(a.broken[1].contains("ended error"), "{:?}", a.broken);
    }
}
