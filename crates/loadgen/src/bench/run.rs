//! A bench run: a load shape of emulation clients, a sample every second, N_max.
//!
//! Load shapes (Yima §3.1 staggers arrivals at 0.5 per minute; He et al. vary connections and
//! the number of distinct files):
//!
//! * [`Load::Fixed`]: N clients from the start;
//! * [`Load::Arrivals`]: one client more every `60 / per_min` seconds;
//! * [`Load::Ramp`]: `step` clients more every `interval` until N fails, then two more steps
//!   to show the curves past N_max;
//! * [`Load::Bisect`]: trials of fixed N (1, 2, 4, … until one fails, then bisection), each
//!   `trial` long, for N_max in fewer client-seconds than a ramp; from a guess `from`, trials
//!   double up from it while they pass and halve down while they fail.
//!
//! Everything is bounded by the run's duration. Clients keep their load: a session that plays
//! to its end is followed by a new one (the object picked by the popularity law).
//!
//! The runner task is the one owner of the samples and of the list of sessions' counters; the
//! clients are tasks of their own (see [`super::session`]).
//!
//! Not here: writing the report (the binary), drawing, the verdict.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::Serialize;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use super::procfs::{ProcSampler, Resources};
use super::prom;
use super::report::{
    PerN, RateVariation, Sample, ServerSample, SourceSample, aggregate, aggregate_target, n_max,
    rate_variation,
};
use super::session::{ClientSettings, SessionCounters, SessionRecord, run_client, state};
use crate::sources::Traffic;

/// How the number of clients evolves.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "shape")]
pub enum Load {
    /// `clients` from the start.
    Fixed {
        /// N.
        clients: usize,
    },
    /// Staggered arrivals.
    Arrivals {
        /// Arrivals per minute.
        per_min: f64,
        /// At most this many clients.
        max: usize,
    },
    /// Add `step` clients every `interval` until a step fails.
    Ramp {
        /// Clients added per step (also the first step's N).
        step: usize,
        /// Time per step.
        interval: Duration,
        /// At most this many clients.
        max: usize,
    },
    /// Trials of fixed N, doubling then bisecting.
    Bisect {
        /// Time per trial.
        trial: Duration,
        /// At most this many clients.
        max: usize,
        /// The first trial's N (1 by default): doubling up from it while trials pass, halving
        /// down while they fail, then bisection.
        from: usize,
    },
}

/// A run's settings.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// What every client does.
    pub clients: ClientSettings,
    /// The load shape.
    pub load: Load,
    /// The whole run's bound.
    pub duration: Duration,
    /// Seed of every random choice (objects, seek positions, pause times).
    pub seed: u64,
    /// Sampling interval.
    pub interval: Duration,
    /// The server's PID, for its own CPU, memory and IO.
    pub server_pid: Option<u32>,
    /// Restrict network counters to this interface.
    pub iface: Option<String>,
    /// The servers' Prometheus endpoints (a cluster's: one per node).
    pub metrics: Vec<String>,
    /// B_avgNet may fall this fraction below the content's rate before N fails.
    pub tolerance: f64,
    /// Live: a shell command that publishes a feed to the URLs, started for each trial
    /// ([`super::feed`]); `{trial}` in it and in the URLs is the trial's number. The clients
    /// join once it is described and watch it once, to its end.
    pub publish: Option<String>,
}

/// One fixed-N trial of a bisection.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct Trial {
    /// The trial's number (from 1).
    pub trial: u32,
    /// N.
    pub n: usize,
    /// Whether N was served.
    pub pass: bool,
}

/// What a run produced.
#[derive(Clone, Debug, Serialize)]
pub struct RunResult {
    /// Every sample.
    pub samples: Vec<Sample>,
    /// Every session.
    pub sessions: Vec<SessionRecord>,
    /// Per-N aggregates.
    pub per_n: Vec<PerN>,
    /// N_max.
    pub n_max: Option<usize>,
    /// The first N that failed.
    pub first_failure: Option<usize>,
    /// Bisection trials.
    pub trials: Vec<Trial>,
    /// The content's mean rate over everything received, bits/s.
    pub content_bits_s: f64,
    /// The bench's own CPU over the run, % of one CPU.
    pub bench_cpu_pct: f64,
    /// The run's length, s.
    pub elapsed_s: f64,
    /// How much the received rate varied over the steady samples (Yima §2.5).
    pub variation: RateVariation,
}

/// Totals over all sessions, for per-second deltas.
#[derive(Clone, Debug, Default)]
struct Totals {
    bytes: u64,
    packets: u64,
    media_ns: u64,
    starvations: u64,
    lost: u64,
    late: u64,
    rate_changes: u64,
    /// Per source IP.
    by_source: BTreeMap<IpAddr, Traffic>,
}

struct Runner {
    config: RunConfig,
    settings: Arc<ClientSettings>,
    epoch: Instant,
    procfs: ProcSampler,
    counters: Vec<Arc<SessionCounters>>,
    registry_tx: mpsc::UnboundedSender<Arc<SessionCounters>>,
    registry_rx: mpsc::UnboundedReceiver<Arc<SessionCounters>>,
    prev: Totals,
    prev_at: Instant,
    /// Per `/metrics` URL: its last reading.
    prev_metrics: Vec<Option<(Instant, HashMap<String, f64>)>>,
    samples: Vec<Sample>,
    sessions: Vec<SessionRecord>,
    next_client: usize,
    last_sessions: usize,
    /// Per entry of `counters`: whether it was served at the last sample.
    served: Vec<bool>,
    /// Per entry of `counters`: its bytes, whether it played and its count of seeks, pauses and
    /// loops at the last sample; and its rate (bits/s) in each sample it played through (by the
    /// sample's index): playing at both ends, with no seek, pause or loop in between. A start-up
    /// (the buffer filling; an MTFC client asks for its fastest rate then) or the gap of a new
    /// PLAY is not the stream's traffic.
    client_bytes: Vec<(u64, bool, u64)>,
    client_rates: Vec<Vec<(usize, f64)>>,
    /// The most packets counted lost so far (all sessions): a sample reports only what exceeds
    /// it. A client counts a gap in the sequence as lost at once and takes it back when the
    /// packet comes late; from a cluster's nodes (several sources, one sequence) packets
    /// often come out of order by a little, and a gap counted in one sample and filled in the
    /// next would otherwise stay in the first.
    lost_mark: u64,
}

/// Runs the bench. `epoch` in `config.clients` is replaced by the run's start.
pub async fn run(mut config: RunConfig) -> anyhow::Result<RunResult> {
    let epoch = Instant::now();
    config.clients.epoch = epoch;
    let cpu0 = super::procfs::parse_pid_stat(
        &std::fs::read_to_string("/proc/self/stat").unwrap_or_default(),
    );
    let (registry_tx, registry_rx) = mpsc::unbounded_channel();
    let mut r = Runner {
        settings: Arc::new(config.clients.clone()),
        procfs: ProcSampler::new(config.server_pid, config.iface.clone()),
        config,
        epoch,
        counters: Vec::new(),
        registry_tx,
        registry_rx,
        prev: Totals::default(),
        prev_at: epoch,
        prev_metrics: Vec::new(),
        samples: Vec::new(),
        sessions: Vec::new(),
        next_client: 0,
        last_sessions: 0,
        served: Vec::new(),
        client_bytes: Vec::new(),
        client_rates: Vec::new(),
        lost_mark: 0,
    };
    r.procfs.sample(epoch);
    r.scrape().await;
    let tol = r.config.tolerance;
    let mut trials = Vec::new();
    // The N at which a ramp stopped (its samples failed, or none was steady).
    let mut ramp_failure: Option<usize> = None;
    match r.config.load {
        Load::Fixed { clients } => {
            let span = r.config.duration;
            r.phase(0, span, &mut |_, _| Some(clients)).await;
        }
        Load::Arrivals { per_min, max } => {
            let span = r.config.duration;
            let gap = 60.0 / per_min.max(1e-6);
            r.phase(0, span, &mut |t, _| Some(max.min(1 + (t.as_secs_f64() / gap) as usize))).await;
        }
        Load::Ramp { step, interval, max } => {
            let span = r.config.duration;
            let mut failed_step: Option<u64> = None;
            let mut checked = 0u64;
            r.phase(0, span, &mut |t, samples| {
                let k = (t.as_secs_f64() / interval.as_secs_f64()) as u64;
                // The step that ended is judged once a sample of the next one is in: the churn
                // of the next step's first sessions marks the ended step's last sample unsteady
                // (`Runner::sample`), and the judgment must be the one the report's `per_n` makes
                // of the same samples. At the largest N no next step comes.
                let n = (step * (checked as usize + 1)).min(max);
                let next_in = n == max || samples.last().is_some_and(|s| s.n_target != n);
                if k > checked && next_in && failed_step.is_none() {
                    checked += 1;
                    let last: Vec<Sample> = samples
                        .iter()
                        .rev()
                        .skip_while(|s| s.n_target != n)
                        .take_while(|s| s.n_target == n)
                        .cloned()
                        .collect();
                    // No steady sample in a whole step: the clients never all got served.
                    let judged = aggregate(&last, tol);
                    if judged.is_empty() || judged.iter().any(|p| !p.pass) {
                        info!(n, "ramp: N failed");
                        failed_step = Some(checked);
                        ramp_failure = Some(n);
                    }
                }
                let k = match failed_step {
                    Some(f) if k >= f + 2 => return None,
                    _ => k,
                };
                Some((step * (k as usize + 1)).min(max))
            })
            .await;
        }
        Load::Bisect { trial, max, from } => {
            let deadline = epoch + r.config.duration;
            let (mut lo, mut hi): (usize, Option<usize>) = (0, None);
            let mut n = from.clamp(1, max.max(1));
            let mut k = 0u32;
            while Instant::now() + trial <= deadline && n >= 1 && n <= max {
                k += 1;
                let from = r.samples.len();
                r.phase(k, trial, &mut |_, _| Some(n)).await;
                let per = aggregate(&r.samples[from..], tol);
                let pass = !per.is_empty() && per.iter().all(|p| p.pass);
                info!(trial = k, n, pass, "bisection trial");
                trials.push(Trial { trial: k, n, pass });
                if pass {
                    lo = n;
                } else {
                    hi = Some(n);
                }
                match next_trial(n, lo, hi, max) {
                    Some(next) => n = next,
                    None => break,
                }
            }
        }
    }
    let mut per_n = aggregate(&r.samples, tol);
    let (mut best, mut first_failure) = n_max(&per_n);
    if let Some(f) = ramp_failure {
        best = per_n.iter().filter(|p| p.pass && p.n < f).map(|p| p.n).max();
        first_failure = Some(f);
    }
    if !trials.is_empty() {
        // Bisection: N_max is the largest N that passed below the smallest that failed.
        let fail = trials.iter().filter(|t| !t.pass).map(|t| t.n).min();
        best = trials.iter().filter(|t| t.pass && fail.is_none_or(|f| t.n < f)).map(|t| t.n).max();
        first_failure = fail;
    }
    // A load can fail with no steady sample at all (clients not getting through): then judge
    // it on every sample taken while it was the target, so the verdict looks at that load.
    if let Some(f) = first_failure
        && !per_n.iter().any(|p| p.n == f)
    {
        per_n.extend(aggregate_target(&r.samples, f, tol));
        per_n.sort_by_key(|p| p.n);
    }
    let (bytes, media_s) =
        r.sessions.iter().fold((0u64, 0.0f64), |(b, m), s| (b + s.bytes, m + s.media_s));
    let elapsed = epoch.elapsed().as_secs_f64();
    let cpu1 = super::procfs::parse_pid_stat(
        &std::fs::read_to_string("/proc/self/stat").unwrap_or_default(),
    );
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let bench_cpu_pct = match (cpu0, cpu1) {
        (Some((u0, s0)), Some((u1, s1))) => {
            100.0 * (u1 + s1).saturating_sub(u0 + s0) as f64 / hz / elapsed.max(1e-3)
        }
        _ => 0.0,
    };
    Ok(RunResult {
        sessions: r.sessions,
        per_n,
        n_max: best,
        first_failure,
        trials,
        content_bits_s: if media_s > 0.0 { bytes as f64 * 8.0 / media_s } else { 0.0 },
        bench_cpu_pct,
        elapsed_s: elapsed,
        variation: rate_variation(&r.samples, &r.client_rates),
        samples: r.samples,
    })
}

/// The N of the next bisection trial after one of `n` clients, given the largest N that
/// passed (`lo`, 0: none yet) and the smallest that failed (`hi`); `None` when the search is
/// over (N_max is `lo`). Doubles while every trial passes, halves while every trial fails,
/// then bisects.
fn next_trial(n: usize, lo: usize, hi: Option<usize>, max: usize) -> Option<usize> {
    match hi {
        Some(h) if h - lo <= 1 => None,
        None if lo >= max => None,
        None => Some((n * 2).min(max)),
        Some(h) if lo == 0 => Some(h / 2),
        Some(h) => Some(lo + (h - lo) / 2),
    }
}

type Shape<'a> = dyn FnMut(Duration, &[Sample]) -> Option<usize> + 'a;

impl Runner {
    /// Runs clients for `span` (or until the run's end), with as many clients as `shape` says
    /// at each sample (`None`: stop now); then stops them and collects their sessions.
    async fn phase(&mut self, trial: u32, span: Duration, shape: &mut Shape<'_>) {
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut clients: Vec<JoinHandle<Vec<SessionRecord>>> = Vec::new();
        let mut publisher = match self.config.publish.clone() {
            Some(cmd) => match self.publish(trial.max(1), &cmd).await {
                Ok(p) => Some(p),
                Err(e) => {
                    // The trial has no feed to watch: no sample, so it fails.
                    warn!(trial, error = %format!("{e:#}"), "no feed for the trial");
                    return;
                }
            },
            None => None,
        };
        let start = Instant::now();
        let end = (start + span).min(self.epoch + self.config.duration);
        let mut tick = tokio::time::interval(self.config.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        self.last_sessions = 0;
        loop {
            let t = start.elapsed();
            let Some(target) = shape(t, &self.samples) else { break };
            while clients.len() < target {
                let id = self.next_client;
                self.next_client += 1;
                clients.push(tokio::spawn(run_client(
                    Arc::clone(&self.settings),
                    id,
                    self.config.seed,
                    stop_rx.clone(),
                    self.registry_tx.clone(),
                )));
            }
            tick.tick().await;
            if Instant::now() >= end {
                break;
            }
            self.sample(trial, target).await;
            // A feed's trial is over when the feed is and its viewers have seen it end.
            if let Some(p) = publisher.as_mut()
                && p.exited()
                && clients.iter().all(JoinHandle::is_finished)
            {
                break;
            }
        }
        drop(publisher);
        let _ = stop_tx.send(true);
        for c in clients {
            let abort = c.abort_handle();
            match tokio::time::timeout(Duration::from_secs(5), c).await {
                Ok(Ok(records)) => self.sessions.extend(records),
                Ok(Err(e)) => warn!(error = %e, "a client task failed"),
                Err(_) => {
                    abort.abort();
                    warn!("a client did not stop in time");
                }
            }
        }
        // Sessions of the next phase are new: their deltas start from their own zero.
        while let Ok(c) = self.registry_rx.try_recv() {
            self.counters.push(c);
        }
        self.prev = self.totals();
    }

    /// Starts the trial's publisher and, once its feed is live, points the clients at it.
    async fn publish(&mut self, trial: u32, cmd: &str) -> anyhow::Result<super::feed::Publisher> {
        use super::feed::{Publisher, for_trial};
        let urls: Vec<String> =
            self.config.clients.urls.iter().map(|u| for_trial(u, trial)).collect();
        let mut p = Publisher::start(&for_trial(cmd, trial))?;
        let first = urls.first().context("no URL to watch the feed at")?;
        let took = p.wait_live(first).await?;
        info!(trial, url = first, took_ms = took.as_millis() as u64, "the feed is live");
        self.settings =
            Arc::new(ClientSettings { urls, repeat: false, ..(*self.settings).clone() });
        Ok(p)
    }

    fn totals(&self) -> Totals {
        let r = Ordering::Relaxed;
        let mut t = Totals::default();
        for c in &self.counters {
            t.bytes += c.bytes.load(r);
            t.packets += c.packets.load(r);
            t.media_ns += c.media_ns.load(r);
            t.starvations += c.starvations.load(r);
            t.lost += c.lost.load(r);
            t.late += c.late.load(r);
            t.rate_changes += c.rate_changes.load(r);
            for (ip, x) in c.source_traffic() {
                let e = t.by_source.entry(ip).or_default();
                e.packets += x.packets;
                e.bytes += x.bytes;
            }
        }
        t
    }

    /// Reads every server's `/metrics` at once; per URL, in order: the counters' increase since
    /// its last reading and the seconds between (`None` when it did not answer, now or then).
    async fn scrape(&mut self) -> Vec<Option<(f64, HashMap<String, f64>)>> {
        let now = Instant::now();
        let reads = self.config.metrics.iter().cloned().map(|url| {
            tokio::task::spawn_blocking(move || {
                let agent: ureq::Agent = ureq::Agent::config_builder()
                    .timeout_global(Some(Duration::from_millis(800)))
                    .build()
                    .into();
                agent.get(&url).call().ok()?.body_mut().read_to_string().ok()
            })
        });
        let reads: Vec<_> = reads.collect();
        self.prev_metrics.resize(reads.len(), None);
        let mut out = Vec::with_capacity(reads.len());
        for (read, prev) in reads.into_iter().zip(self.prev_metrics.iter_mut()) {
            let Some(text) = read.await.ok().flatten() else {
                debug!("metrics scrape failed");
                *prev = None;
                out.push(None);
                continue;
            };
            let m = prom::parse(&text);
            let was = prev.replace((now, m.clone()));
            out.push(was.map(|(t, p)| {
                let dt = now.saturating_duration_since(t).as_secs_f64().max(1e-3);
                let delta = prom::ISOCHRON_COUNTERS
                    .iter()
                    .filter_map(|k| {
                        let (a, b) = (p.get(*k)?, m.get(*k)?);
                        Some(((*k).to_string(), (b - a).max(0.0)))
                    })
                    .collect();
                (dt, delta)
            }));
        }
        out
    }

    async fn sample(&mut self, trial: u32, target: usize) {
        while let Ok(c) = self.registry_rx.try_recv() {
            self.counters.push(c);
        }
        // The servers first: their answers take a varying few milliseconds, which must not fall
        // between this sample's clock and its counts (a smooth stream's seconds came out 2 %
        // above and below its rate, one after the other).
        let metrics = self.scrape().await;
        let now = Instant::now();
        let res = self.procfs.sample(now).unwrap_or_default();
        let totals = self.totals();
        let dt = now.saturating_duration_since(self.prev_at).as_secs_f64().max(1e-3);
        let d = |a: u64, b: u64| b.saturating_sub(a);
        let r = Ordering::Relaxed;
        let (mut sessions, mut paused, mut stalled, mut level_sum) = (0, 0, 0, 0u64);
        // Whether the set of served sessions changed during the interval (a start or an end):
        // then the sample mixes two loads and is not steady.
        self.served.resize(self.counters.len(), false);
        self.client_bytes.resize(self.counters.len(), (0, false, 0));
        self.client_rates.resize(self.counters.len(), Vec::new());
        let mut churn = false;
        let at = self.samples.len();
        // Every session played through this sample; one's new PLAY may show in the one before.
        let (mut through, mut gap_before) = (true, false);
        let per_client = self.client_bytes.iter_mut().zip(self.client_rates.iter_mut());
        for ((c, was), (prev, rates)) in
            self.counters.iter().zip(self.served.iter_mut()).zip(per_client)
        {
            // Served: set up and sent to (a first packet came), not paused or played out.
            let st = c.state.load(r);
            let served = c.open.load(r)
                && c.first_ns.load(r) != 0
                && !matches!(st, state::PAUSED | state::FINISHED | state::DRAINING);
            let (bytes, playing) = (c.bytes.load(r), st == state::PLAYING);
            let plays = c.seeks.load(r) + c.pauses.load(r) + c.loops.load(r);
            if plays != prev.2 {
                // The stream ended (or stopped) before its new PLAY was counted: the sample
                // before may hold part of the gap too.
                if rates.last().is_some_and(|(i, _)| i + 1 == at) {
                    rates.pop();
                }
                gap_before = true;
            }
            if playing && prev.1 && plays == prev.2 {
                rates.push((at, bytes.saturating_sub(prev.0) as f64 * 8.0 / dt));
            } else if served || *was {
                through = false;
            }
            *prev = (bytes, playing, plays);
            churn |= served != *was;
            *was = served;
            if !c.open.load(r) || c.first_ns.load(r) == 0 {
                continue;
            }
            match st {
                state::PAUSED => paused += 1,
                state::FINISHED | state::DRAINING => {}
                st => {
                    sessions += 1;
                    level_sum += c.level_ms.load(r);
                    if st == state::STALLED {
                        stalled += 1;
                    }
                }
            }
        }
        let bytes = d(self.prev.bytes, totals.bytes) as f64;
        let packets = d(self.prev.packets, totals.packets);
        let lost = d(self.lost_mark, totals.lost);
        self.lost_mark = self.lost_mark.max(totals.lost);
        let media_s = d(self.prev.media_ns, totals.media_ns) as f64 / 1e9;
        // The content's bytes in that media time: those received plus the lost packets' (at the
        // mean size), so that loss does not pass for a thinner stream.
        let content_bytes =
            if packets > 0 { bytes + lost as f64 * bytes / packets as f64 } else { bytes };
        let b_net = bytes * 8.0 / dt;
        let sources = totals
            .by_source
            .iter()
            .filter_map(|(ip, now)| {
                let was = self.prev.by_source.get(ip).copied().unwrap_or_default();
                let (packets, bytes) = (d(was.packets, now.packets), d(was.bytes, now.bytes));
                let b_net_bits_s = bytes as f64 * 8.0 / dt;
                (packets > 0).then_some((*ip, SourceSample { packets, bytes, b_net_bits_s }))
            })
            .collect();
        // Summed over the servers that answered; `None` if none did.
        let read = || metrics.iter().flatten();
        let sum = |xs: Vec<f64>| (!xs.is_empty()).then(|| xs.iter().sum::<f64>());
        let m = |k: &str| sum(read().filter_map(|(_, d)| d.get(k).copied()).collect());
        let per_s = |k: &str| sum(read().filter_map(|(dt, d)| d.get(k).map(|v| v / dt)).collect());
        // Each node of several on its own (by the address of its `/metrics`).
        let servers = match self.config.metrics.len() {
            0 | 1 => BTreeMap::new(),
            _ => self
                .config
                .metrics
                .iter()
                .zip(&metrics)
                .filter_map(|(url, got)| {
                    let (dt, d) = got.as_ref()?;
                    let rate = |k: &str| d.get(k).map(|v| v / dt);
                    let server = ServerSample {
                        b_disk_bytes_s: rate("isochron_disk_bytes_total"),
                        b_cache_bytes_s: rate("isochron_cache_bytes_total"),
                    };
                    Some((url_ip(url)?, server))
                })
                .collect(),
        };
        let Resources {
            cpu_user_pct,
            cpu_system_pct,
            cpu_idle_pct,
            cpu_iowait_pct,
            cpu_steal_pct,
            server_cpu_pct,
            mem_used_bytes,
            mem_available_pct,
            server_rss_bytes,
            disk_read_bytes_s,
            disk_write_bytes_s,
            disk_util_pct,
            net_rx_bytes_s,
            net_tx_bytes_s,
            bench_cpu_pct,
        } = res;
        let s = Sample {
            t_s: now.saturating_duration_since(self.epoch).as_secs_f64(),
            trial,
            n_target: target,
            sessions,
            paused,
            stalled,
            steady: sessions == target && sessions == self.last_sessions && !churn,
            played_through: through,
            b_net_bits_s: b_net,
            b_avgnet_bits_s: if sessions > 0 { b_net / sessions as f64 } else { 0.0 },
            content_bits_s: if media_s > 0.0 { content_bytes * 8.0 / media_s } else { 0.0 },
            rx_bytes: bytes as u64,
            rx_packets: packets,
            content_bytes: content_bytes as u64,
            media_s,
            r_dr: d(self.prev.rate_changes, totals.rate_changes) as f64 / dt,
            starvations: d(self.prev.starvations, totals.starvations),
            starvations_total: totals.starvations,
            lost,
            late: d(self.prev.late, totals.late),
            level_ms_mean: if sessions > 0 { level_sum as f64 / sessions as f64 } else { 0.0 },
            cpu_user_pct,
            cpu_system_pct,
            cpu_idle_pct,
            cpu_iowait_pct,
            cpu_steal_pct,
            server_cpu_pct,
            mem_used_bytes,
            mem_available_pct,
            server_rss_bytes,
            disk_read_bytes_s,
            disk_write_bytes_s,
            disk_util_pct,
            net_rx_bytes_s,
            net_tx_bytes_s,
            bench_cpu_pct,
            b_disk_bytes_s: per_s("isochron_disk_bytes_total"),
            b_cache_bytes_s: per_s("isochron_cache_bytes_total"),
            admission_rejects: m("isochron_admission_rejects_total"),
            missed_deadlines: m("isochron_missed_deadlines_total"),
            packets_sent_s: per_s("isochron_packets_sent_total"),
            pace_changes_s: per_s("isochron_pace_changes_total"),
            underruns: m("isochron_underruns_total"),
            server_late_packets: m(prom::LATENESS_COUNT)
                .zip(m(prom::LATENESS_WITHIN_50MS))
                .map(|(all, on_time)| (all - on_time).max(0.0)),
            sources,
            servers,
        };
        debug!(t = s.t_s, n = sessions, b_net = s.b_net_bits_s, "sample");
        if gap_before && let Some(last) = self.samples.last_mut() {
            last.played_through = false;
        }
        if churn && let Some(last) = self.samples.last_mut() {
            // A session that starts or ends usually stopped (or started) receiving during the
            // interval before its state changed: that sample mixed two loads too.
            last.steady = false;
        }
        self.last_sessions = sessions;
        self.prev = totals;
        self.prev_at = now;
        self.samples.push(s);
    }
}

/// The IP address of a URL's host (`http://10.0.0.2:8080/metrics`), if it is one.
fn url_ip(url: &str) -> Option<IpAddr> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host = rest.split('/').next()?;
    let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']').parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The trials a search runs when N passes up to `n_max`.
    fn search(from: usize, max: usize, n_max: usize) -> Vec<usize> {
        let (mut lo, mut hi, mut n, mut tried) = (0, None, from, Vec::new());
        loop {
            tried.push(n);
            if n <= n_max {
                lo = n;
            } else {
                hi = Some(n);
            }
            match next_trial(n, lo, hi, max) {
                Some(next) => n = next,
                None => return tried,
            }
        }
    }

    #[test]
    fn a_metrics_urls_host_is_its_servers_address() {
        assert_eq!(url_ip("http://10.200.4.3:8080/metrics"), Some("10.200.4.3".parse().unwrap()));
        assert_eq!(url_ip("http://[::1]:8080/metrics"), Some("::1".parse().unwrap()));
        assert_eq!(url_ip("http://node1:8080/metrics"), None);
    }

    #[test]
    fn bisection_doubles_then_bisects_from_its_first_guess() {
        assert_eq!(search(1, 1000, 17), [1, 2, 4, 8, 16, 32, 24, 20, 18, 17]);
        assert_eq!(search(16, 20, 17), [16, 20, 18, 17]);
        assert_eq!(search(64, 80, 66), [64, 80, 72, 68, 66, 67]);
        // A guess too high halves down first.
        assert_eq!(search(64, 1000, 17), [64, 32, 16, 24, 20, 18, 17]);
        assert_eq!(search(4, 1000, 0), [4, 2, 1]);
        // Everything passes up to the bound.
        assert_eq!(search(16, 20, 100), [16, 20]);
    }
}
