//! One benchmark run in real time: the `CycleScheduler` (the server's scheduling core) over the
//! real per-disk IO threads, with dummy consumers (XTREAM §3, Table 1 and Fig. 5; issue 4 part 6).
//!
//! # What happens
//!
//! The workload (`isochron_sched::workload`: CBR, VBR by a trace, or heterogeneous; read or
//! write) offers `streams` streams arriving about `spacing` apart (stratified random, as in the
//! virtual-time harness). The admission policy decides, from each disk's profile (its model, or
//! its `isochron-profile.json`), how many of them it admits, in order, until its first refusal
//! (XTREAM Table 1's nested sets); those run. One driver thread owns the scheduler (one owner,
//! fed by the IO threads' completions over a channel) and, at each stream's arrival, opens and
//! starts it; each disk's [`IoWorker`] reads (`O_DIRECT`, checksum-verified) the pool block that
//! stands for the logical block the scheduler asks for ([`BenchStore::physical`]).
//!
//! Each playing stream has a consumer that takes every block at its deadline (its first packet's
//! send time on the stream's anchored clock) and counts a **missed deadline** when the block is
//! not in memory by then; it releases the block when the next one's send time comes (the block
//! has been "played"). The scheduler counts misses too (`CycleEvent::Missed`); both are reported
//! and should agree. A recording stream hands in each block when its last byte has been
//! "captured"; its misses are the scheduler's (a block not written by the end of the next cycle).
//!
//! **Initial latency** is request → first block in memory. An optional probe (the last admitted
//! stream) restarts at a random block every `probe_every` to sample it under full load (Fig. 5).
//!
//! Throughput and utilisation are measured in the steady state: from one cycle after the last
//! arrival to the end, from the IO threads' counters.
//!
//! Not here: the search for MaxN ([`crate::search`]), and any network.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use anyhow::{Context as _, bail};
use isochron_base::mix::{SplitMix64, hash_words};
use isochron_base::{
    BitRate, BlockIndex, BlockKey, DiskId, Instant, IoFailure, LatencySummary, MediaTime, RunId,
    StreamId,
};
use isochron_diskio::{AlignedBuf, IoCommand, IoConfig, IoDone, IoStats, IoWorker};
use isochron_sched::admission::{AdmissionConfig, AdmissionController, AdmissionPolicy, Direction};
use isochron_sched::cycle::{CycleConfig, CycleEvent, CycleScheduler, IoClass, RecordBlock};
use isochron_sched::plan::{Anchor, ReadDone};
use isochron_sched::sim::{SimStream, admitted_prefix_by, staggered};
use isochron_sched::workload::{self, WorkloadKind, WorkloadSpec};
use isochron_store::Block;
use serde::Serialize;

use crate::data::{BenchStore, ProfileSource};

/// A block as the scheduler's cache holds it.
type BlockRef = Arc<Block<AlignedBuf>>;

/// What to run.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchConfig {
    /// CBR, VBR or heterogeneous.
    pub kind: WorkloadKind,
    /// Playback (reads) or recording (writes).
    pub direction: Direction,
    /// The workload's mean rate.
    pub mean_rate: BitRate,
    /// Streams offered.
    pub streams: usize,
    /// Admission policy.
    pub policy: AdmissionPolicy,
    /// Cycle length `T`.
    pub cycle: Duration,
    /// Share of each cycle admission keeps free for non-real-time IO.
    pub nrt_share: f64,
    /// Cycles of read-ahead past the current one (the scheduler's `lookahead_cycles`).
    pub lookahead_cycles: u32,
    /// IOs submitted to each disk's IO thread at once (the scheduler's `disk_queue_depth`; the
    /// thread still does one at a time).
    pub queue_depth: u32,
    /// Mean time between arrivals.
    pub spacing: Duration,
    /// How long to run after the last arrival.
    pub duration: Duration,
    /// Seed of the workload and arrivals.
    pub seed: u64,
    /// VBR trace (per-block send times), or `None` for the synthetic one.
    pub trace: Option<Arc<[MediaTime]>>,
    /// Restart the last admitted stream this often (initial latency under load).
    pub probe_every: Option<Duration>,
}

impl BenchConfig {
    /// `streams` read streams of `kind` at `mean_rate`, aggressive admission, `T` = 1 s, NRT
    /// share 0.1, two cycles of read-ahead, one IO per disk, arrivals 2 s apart, 60 s.
    #[must_use]
    pub fn new(kind: WorkloadKind, mean_rate: BitRate, streams: usize) -> Self {
        Self {
            kind,
            direction: Direction::Read,
            mean_rate,
            streams,
            policy: AdmissionPolicy::Aggressive,
            cycle: Duration::from_secs(1),
            nrt_share: 0.1,
            lookahead_cycles: 2,
            queue_depth: 1,
            spacing: Duration::from_secs(2),
            duration: Duration::from_secs(60),
            seed: 1,
            trace: None,
            probe_every: None,
        }
    }

    /// The admission settings of this run.
    #[must_use]
    pub fn admission_config(&self) -> AdmissionConfig {
        AdmissionConfig {
            policy: self.policy,
            cycle: self.cycle,
            nrt_share: self.nrt_share,
            ..AdmissionConfig::default()
        }
    }

    /// The offered streams (the first `n` of the workload, prefix-stable), with their arrivals.
    #[must_use]
    pub fn workload(&self, store: &BenchStore, n: usize) -> Vec<SimStream> {
        let span = self.spacing.mul_f64(n as f64) + self.duration;
        let spec = WorkloadSpec {
            kind: self.kind,
            direction: self.direction,
            mean_rate: self.mean_rate,
            block_size: store.block_len(),
            disks: store.disk_ids(),
            // Long enough for a restart in the first half to play to the end of the run.
            duration: span * 2 + Duration::from_secs(30),
            seed: self.seed,
            trace: self.trace.clone(),
            peak_window: Duration::from_secs(1),
        };
        staggered(workload::generate(&spec, n), self.spacing, self.seed)
    }
}

/// One disk of the run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DiskInfo {
    /// Its id.
    pub id: u16,
    /// Its directory.
    pub path: String,
    /// Its emulation model (spec form), if emulated.
    pub model: Option<String>,
    /// Where its profile came from (`model`, a file, or `none`).
    pub profile: String,
    /// Admission's predicted real-time work per cycle of the admitted set, `(μ + z·σ)/T`.
    pub predicted_load: f64,
    /// Fraction of the steady state the disk's IO thread was busy.
    pub utilisation: f64,
}

/// What a run measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct BenchReport {
    /// `cbr`, `vbr` or `heterogeneous`.
    pub kind: String,
    /// `read` or `write`.
    pub direction: String,
    /// The workload's mean rate, bits/s.
    pub mean_rate_bps: u64,
    /// The admission policy.
    pub policy: String,
    /// Bytes per block IO.
    pub block_bytes: u64,
    /// Cycle length, ms.
    pub cycle_ms: u64,
    /// Read-ahead cycles.
    pub lookahead_cycles: u32,
    /// IOs submitted per disk at once.
    pub queue_depth: u32,
    /// The disks.
    pub disks: Vec<DiskInfo>,
    /// Streams offered.
    pub streams_requested: usize,
    /// Streams admitted (and run).
    pub streams_admitted: usize,
    /// Seconds between the first and the last arrival.
    pub ramp_s: f64,
    /// Seconds run after the last arrival.
    pub duration_s: f64,
    /// Deadlines the consumers checked (reads: one per block played, at its first packet's
    /// send time); `missed_deadlines` of them found the block missing.
    pub deadlines: u64,
    /// Blocks not in memory at their deadline, as the consumers saw them (reads), or recorded
    /// blocks not written in time (writes).
    pub missed_deadlines: u64,
    /// The scheduler's own count of missed deadlines (reads and writes).
    pub sched_missed_deadlines: u64,
    /// Most missed deadlines in one cycle.
    pub max_missed_per_cycle: u32,
    /// Cycles run.
    pub cycles: u64,
    /// Cycles with at least one missed deadline.
    pub cycles_with_misses: u64,
    /// Streams with at least one missed deadline.
    pub streams_with_misses: usize,
    /// Reads that completed after the deadline they were queued with.
    pub late_reads: u64,
    /// Reads or writes that failed.
    pub io_errors: u64,
    /// Blocks delivered to consumers (reads) or written (writes).
    pub blocks: u64,
    /// Initial latency (request → first block in memory) of every start.
    pub initial_latency: LatencySummary,
    /// Initial latency of the probe's restarts after the last arrival (full load).
    pub probe_latency: LatencySummary,
    /// Bytes read (or written) per second in the steady state, all disks.
    pub bytes_per_s: f64,
    /// Bytes per second the admitted streams need on average (Σ mean rates).
    pub demand_bytes_per_s: f64,
}

/// Runs `config` on `store` in real time (blocks for the ramp plus `duration`).
pub fn run(store: &BenchStore, config: &BenchConfig) -> anyhow::Result<BenchReport> {
    let (controller, mut disks) = controller(store, config)?;
    let mut offered = config.workload(store, config.streams);
    let mut prefix = controller.clone();
    let admitted = admitted_prefix_by(&mut prefix, &offered);
    for d in &mut disks {
        d.predicted_load = prefix.utilisation(DiskId(d.id)).unwrap_or(0.0);
    }
    offered.truncate(admitted);
    if let (Some(every), Some(last)) = (config.probe_every, offered.last_mut()) {
        last.restart_every = Some(every);
    }
    let cycle = CycleConfig {
        cycle: config.cycle,
        disk_queue_depth: config.queue_depth.max(1),
        lookahead_cycles: config.lookahead_cycles.max(1),
        ..CycleConfig::default()
    };
    let sched = CycleScheduler::<BlockRef>::new(cycle, controller);

    let (tx, rx) = mpsc::channel::<IoDone>();
    let mut workers = BTreeMap::new();
    // Recordings write through the non-real-time class with the whole disk (nothing else runs).
    let share = if config.direction == Direction::Write { 1.0 } else { 0.0 };
    for (id, dir) in store.disks() {
        let tx = tx.clone();
        let w = IoWorker::spawn_with(
            dir,
            id,
            IoConfig { nrt_share: share, ..IoConfig::default() },
            Box::new(move |done| {
                // The driver stops listening only after the workers are shut down.
                let _ = tx.send(done);
            }),
        )
        .with_context(|| format!("starting the IO thread of disk {id}"))?;
        workers.insert(id, w);
    }
    drop(tx);

    let last_arrival = offered.iter().map(|s| s.arrival).max().unwrap_or_default();
    let demand: f64 = offered.iter().map(|s| s.spec.avg_bitrate.bytes_per_sec()).sum();
    let mut driver = Driver {
        store,
        config,
        streams: &offered,
        sched,
        workers: &workers,
        clock: std::time::Instant::now(),
        timers: BinaryHeap::new(),
        seq: 0,
        players: offered.iter().map(|_| Player::default()).collect(),
        in_flight: HashMap::new(),
        next_tag: 0,
        write_blocks: HashMap::new(),
        rng: SplitMix64::new(hash_words(&[config.seed, 0x5245_5354])),
        end: Instant::ZERO + last_arrival + config.duration,
        last_arrival: Instant::ZERO + last_arrival,
        steady: None,
        consumer_misses: BTreeMap::new(),
        latencies: Vec::new(),
        probe_latencies: Vec::new(),
        report: BenchReport::default(),
    };
    for (i, s) in offered.iter().enumerate() {
        driver.push(Instant::ZERO + s.arrival, Timer::Arrive(i));
    }
    driver.push(driver.last_arrival + config.cycle, Timer::Steady);
    let result = driver.run(&rx);
    let end_stats = snapshot(&workers);
    let end_at = driver.clock.elapsed();
    let (mut report, util) = driver.finish(end_stats, end_at);
    drop(workers);
    if config.direction == Direction::Write {
        for i in 0..offered.len() {
            store.remove_write_files(i as u64);
        }
    }
    result?;
    for d in &mut disks {
        d.utilisation = util.get(&d.id).copied().unwrap_or(0.0);
    }
    report.disks = disks;
    report.streams_requested = config.streams;
    report.streams_admitted = admitted;
    report.ramp_s = last_arrival.as_secs_f64();
    report.demand_bytes_per_s = demand;
    Ok(report)
}

/// The admission controller of a run (each disk's profile: its model or its profile file) and
/// the disks' descriptions. A disk without a profile is an error unless admission is off.
pub fn controller(
    store: &BenchStore,
    config: &BenchConfig,
) -> anyhow::Result<(AdmissionController, Vec<DiskInfo>)> {
    let mut profiles = Vec::new();
    let mut disks = Vec::new();
    for (id, dir) in store.disks() {
        let profile = store.profile(id)?;
        let source = match &profile {
            Some((_, ProfileSource::Model(m))) => format!("model {m}"),
            Some((_, ProfileSource::File(p))) => p.display().to_string(),
            None if config.policy == AdmissionPolicy::Off => "none".into(),
            None => bail!(
                "disk {id} ({}) has no profile: run `isochron profile-disk {}` first, or use \
                 --admission off",
                dir.path().display(),
                dir.path().display()
            ),
        };
        if let Some((p, _)) = profile {
            profiles.push((id, p));
        }
        disks.push(DiskInfo {
            id: id.0,
            path: dir.path().display().to_string(),
            model: dir.model().map(|m| m.to_string()),
            profile: source,
            predicted_load: 0.0,
            utilisation: 0.0,
        });
    }
    Ok((AdmissionController::new(config.admission_config(), profiles), disks))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    Arrive(usize),
    Restart(usize),
    Check { stream: usize, run: RunId, index: u32 },
    BlockDone { stream: usize, run: RunId, index: u32 },
    Produce { stream: usize, index: u32 },
    Steady,
}

#[derive(Debug, Default)]
struct Player {
    admitted: bool,
    arrival: Instant,
    run: RunId,
    requested: Instant,
    anchor: Option<Anchor>,
    /// The next block index the consumer expects to be delivered.
    next: u32,
    missed: u64,
}

#[derive(Clone, Copy, Debug)]
enum Flight {
    Read { disk: DiskId, key: BlockKey },
    Write { disk: DiskId, key: BlockKey },
}

struct Driver<'a> {
    store: &'a BenchStore,
    config: &'a BenchConfig,
    streams: &'a [SimStream],
    sched: CycleScheduler<BlockRef>,
    workers: &'a BTreeMap<DiskId, IoWorker>,
    clock: std::time::Instant,
    timers: BinaryHeap<Reverse<(Instant, u64, Timer)>>,
    seq: u64,
    players: Vec<Player>,
    in_flight: HashMap<u64, Flight>,
    next_tag: u64,
    write_blocks: HashMap<BlockKey, BlockRef>,
    rng: SplitMix64,
    end: Instant,
    last_arrival: Instant,
    steady: Option<(Duration, BTreeMap<DiskId, IoStats>)>,
    /// Consumer-observed misses per cycle index.
    consumer_misses: BTreeMap<u64, u32>,
    latencies: Vec<Duration>,
    probe_latencies: Vec<Duration>,
    report: BenchReport,
}

impl Driver<'_> {
    fn now(&self) -> Instant {
        Instant::from_nanos(u64::try_from(self.clock.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    fn push(&mut self, at: Instant, t: Timer) {
        self.seq += 1;
        self.timers.push(Reverse((at, self.seq, t)));
    }

    fn run(&mut self, rx: &mpsc::Receiver<IoDone>) -> anyhow::Result<()> {
        loop {
            let now = self.now();
            if now >= self.end {
                return Ok(());
            }
            while let Some(Reverse((t, ..))) = self.timers.peek()
                && *t <= now
            {
                let Some(Reverse((_, _, timer))) = self.timers.pop() else { break };
                let at = self.now();
                self.timer(at, timer);
                self.pump();
            }
            if self.sched.poll_timeout().is_some_and(|t| t <= now) {
                self.sched.handle_timeout(now);
                self.pump();
            }
            let mut wake = self.end;
            if let Some(Reverse((t, ..))) = self.timers.peek() {
                wake = wake.min(*t);
            }
            if let Some(t) = self.sched.poll_timeout() {
                wake = wake.min(t);
            }
            let now = self.now();
            let first = if wake > now {
                match rx.recv_timeout(wake.saturating_duration_since(now)) {
                    Ok(done) => Some(done),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => bail!("every IO thread stopped"),
                }
            } else {
                None
            };
            for done in first.into_iter().chain(std::iter::from_fn(|| rx.try_recv().ok())) {
                let at = self.now();
                self.done(at, done);
                self.pump();
            }
        }
    }

    /// Hands issued IO to the disks and the scheduler's events to the consumers.
    fn pump(&mut self) {
        loop {
            let mut any = false;
            while let Some(io) = self.sched.poll_io() {
                any = true;
                self.submit(io.disk, io.class);
            }
            while let Some(ev) = self.sched.poll_event() {
                any = true;
                let now = self.now();
                self.event(now, ev);
            }
            if !any {
                break;
            }
        }
    }

    fn submit(&mut self, disk: DiskId, class: IoClass) {
        let Some(worker) = self.workers.get(&disk) else {
            tracing::error!(%disk, "IO for a disk without an IO thread");
            return;
        };
        self.next_tag += 1;
        let tag = self.next_tag;
        match class {
            IoClass::Read { key } => {
                let Some(phys) = self.store.physical(disk, key) else { return };
                self.in_flight.insert(tag, Flight::Read { disk, key });
                worker.submit(IoCommand::Read { key: phys, tag });
            }
            IoClass::Write { stream, key } => {
                let phys = BenchStore::write_key(stream.0, key.index);
                let block = match self.write_blocks.get(&phys) {
                    Some(b) => Arc::clone(b),
                    None => match self.store.random_block(phys, self.config.seed) {
                        Ok(b) => {
                            let b = Arc::new(b);
                            self.write_blocks.insert(phys, Arc::clone(&b));
                            b
                        }
                        Err(e) => {
                            tracing::error!(error = %e, "cannot build a block to write");
                            return;
                        }
                    },
                };
                self.in_flight.insert(tag, Flight::Write { disk, key });
                worker.submit(IoCommand::NrtWrite { key: phys, block, tag });
            }
            IoClass::Nrt { .. } => {}
        }
    }

    fn done(&mut self, now: Instant, done: IoDone) {
        let Some(flight) = self.in_flight.remove(&done.tag()) else { return };
        match (flight, done) {
            (Flight::Read { disk, key }, IoDone::Read(r)) => {
                if r.result.is_err() {
                    self.report.io_errors += 1;
                }
                let result = r.result.map_err(IoFailure::from);
                self.sched.handle_read_done(now, ReadDone { disk, key, result });
            }
            (Flight::Write { disk, key }, IoDone::NrtWrite(w)) => {
                if w.result.is_err() {
                    self.report.io_errors += 1;
                }
                let result = w.result.map_err(IoFailure::from);
                self.sched
                    .handle_write_done(now, isochron_sched::cycle::WriteDone { disk, key, result });
            }
            (f, d) => tracing::error!(?f, key = %d.key(), "completion of an unexpected kind"),
        }
    }

    fn timer(&mut self, now: Instant, t: Timer) {
        match t {
            Timer::Arrive(i) => self.arrive(now, i),
            Timer::Restart(i) => self.restart(now, i),
            Timer::Check { stream, run, index } => self.check(now, stream, run, index),
            Timer::BlockDone { stream, run, index } => {
                if self.players[stream].run == run {
                    self.sched.handle_block_done(now, sid(stream), run, BlockIndex(index));
                }
            }
            Timer::Produce { stream, index } => self.produce(now, stream, index),
            Timer::Steady => {
                self.steady = Some((self.clock.elapsed(), snapshot(self.workers)));
            }
        }
    }

    fn arrive(&mut self, now: Instant, i: usize) {
        let s = &self.streams[i];
        self.players[i].arrival = now;
        self.players[i].requested = now;
        let decision = match s.spec.direction {
            Direction::Read => self.sched.handle_open(now, s.spec.open(sid(i))),
            Direction::Write => self.sched.handle_open_record(now, s.spec.record(sid(i))),
        };
        if !decision.is_admit() {
            tracing::warn!(stream = i, ?decision, "a stream admission had predicted was refused");
            return;
        }
        self.players[i].admitted = true;
        match s.spec.direction {
            Direction::Read => {
                self.start(now, i, BlockIndex(0));
                if let Some(every) = s.restart_every {
                    self.push(now + every, Timer::Restart(i));
                }
            }
            Direction::Write => self.schedule_produce(i, 0),
        }
    }

    fn start(&mut self, now: Instant, i: usize, from: BlockIndex) {
        let plan = &self.streams[i].spec.plan;
        let media = plan.blocks.get(from.0 as usize).map(|b| b.first_send_time).unwrap_or_default();
        let p = &mut self.players[i];
        p.run = p.run.next();
        p.requested = now;
        p.anchor = None;
        p.next = from.0;
        let run = p.run;
        self.sched.handle_start(now, sid(i), run, from, media);
    }

    fn restart(&mut self, now: Instant, i: usize) {
        let s = &self.streams[i];
        let from = s.restart_block(self.rng.next_u64());
        self.sched.handle_stop(now, sid(i));
        self.start(now, i, from);
        if let Some(every) = s.restart_every {
            self.push(now + every, Timer::Restart(i));
        }
    }

    /// The deadline of block `index` of stream `i` on its anchored clock.
    fn deadline(&self, i: usize, index: u32) -> Option<Instant> {
        let a = self.players[i].anchor?;
        let plan = &self.streams[i].spec.plan;
        let send = match plan.blocks.get(index as usize) {
            Some(b) => b.first_send_time,
            None => {
                // After the last block: one more mean block duration.
                let last = plan.blocks.last()?.first_send_time;
                let n = plan.blocks.len().max(2) as u64 - 1;
                last + Duration::from_nanos(last.as_nanos() / n)
            }
        };
        Some(a.wall + send.saturating_duration_since(a.media))
    }

    fn check(&mut self, now: Instant, i: usize, run: RunId, index: u32) {
        if self.players[i].run != run {
            return;
        }
        self.report.deadlines += 1;
        if self.players[i].next <= index {
            self.players[i].missed += 1;
            self.report.missed_deadlines += 1;
            let cycle_ns = u64::try_from(self.config.cycle.as_nanos()).unwrap_or(1).max(1);
            *self.consumer_misses.entry(now.as_nanos() / cycle_ns).or_default() += 1;
        }
        let next = index + 1;
        if (next as usize) < self.streams[i].spec.plan.blocks.len()
            && let Some(d) = self.deadline(i, next)
            && d < self.end
        {
            self.push(d, Timer::Check { stream: i, run, index: next });
        }
    }

    fn schedule_produce(&mut self, i: usize, index: u32) {
        let plan = &self.streams[i].spec.plan;
        let (Some(first), Some(next)) = (plan.blocks.first(), plan.blocks.get(index as usize + 1))
        else {
            return;
        };
        let done = next.first_send_time.saturating_duration_since(first.first_send_time);
        let at = self.players[i].arrival + done;
        self.push(at, Timer::Produce { stream: i, index });
    }

    fn produce(&mut self, now: Instant, i: usize, index: u32) {
        let plan = &self.streams[i].spec.plan;
        let b = plan.blocks[index as usize];
        let key = plan.key(BlockIndex(index));
        let _ = self.sched.handle_record_block(
            now,
            sid(i),
            RecordBlock { key, disk: b.disk, len: b.len },
        );
        self.schedule_produce(i, index + 1);
    }

    fn event(&mut self, now: Instant, ev: CycleEvent<BlockRef>) {
        match ev {
            CycleEvent::Deliver { stream, index, anchor, run, block } => {
                drop(block);
                let i = stream.0 as usize;
                if self.players.get(i).is_none_or(|p| p.run != run) {
                    return;
                }
                if let Some(a) = anchor {
                    self.players[i].anchor = Some(a);
                    let latency = now.saturating_duration_since(self.players[i].requested);
                    self.latencies.push(latency);
                    if self.streams[i].restart_every.is_some() && now > self.last_arrival {
                        self.probe_latencies.push(latency);
                    }
                    // The consumer checks every later block at its deadline.
                    let next = index.0 + 1;
                    if let Some(d) = self.deadline(i, next)
                        && d < self.end
                        && (next as usize) < self.streams[i].spec.plan.blocks.len()
                    {
                        self.push(d, Timer::Check { stream: i, run, index: next });
                    }
                }
                self.players[i].next = self.players[i].next.max(index.0 + 1);
                self.report.blocks += 1;
                // Played until the next block's send time.
                if let Some(end) = self.deadline(i, index.0 + 1) {
                    self.push(end.max(now), Timer::BlockDone { stream: i, run, index: index.0 });
                }
            }
            CycleEvent::Missed { .. } => self.report.sched_missed_deadlines += 1,
            CycleEvent::Written { .. } => self.report.blocks += 1,
            CycleEvent::ReadFailed { stream, key, error } => {
                tracing::error!(%stream, %key, %error, "block read failed");
            }
            CycleEvent::WriteFailed { stream, key, disk, error } => {
                tracing::error!(%stream, %key, %disk, %error, "block write failed");
            }
            CycleEvent::Failover { key, failed, next, error } => {
                tracing::warn!(%key, %failed, %next, %error, "block read failed over");
            }
            CycleEvent::CycleEnd(r) => {
                self.report.cycles += 1;
                if r.missed > 0 {
                    self.report.cycles_with_misses += 1;
                }
                self.report.max_missed_per_cycle = self.report.max_missed_per_cycle.max(r.missed);
            }
            CycleEvent::NrtDone { .. } | CycleEvent::GivenBack { .. } => {}
        }
    }

    /// The report, and each disk's steady-state utilisation.
    fn finish(
        mut self,
        end: BTreeMap<DiskId, IoStats>,
        end_at: Duration,
    ) -> (BenchReport, BTreeMap<u16, f64>) {
        let c = self.config;
        let stats = self.sched.stats();
        let mut r = std::mem::take(&mut self.report);
        r.kind = c.kind.to_string();
        r.direction = match c.direction {
            Direction::Read => "read".into(),
            Direction::Write => "write".into(),
        };
        r.mean_rate_bps = c.mean_rate.0;
        r.policy = c.policy.to_string();
        r.block_bytes = self.store.block_len().0;
        r.cycle_ms = u64::try_from(c.cycle.as_millis()).unwrap_or(u64::MAX);
        r.lookahead_cycles = c.lookahead_cycles;
        r.queue_depth = c.queue_depth;
        r.duration_s = c.duration.as_secs_f64();
        r.late_reads = stats.late_reads;
        if c.direction == Direction::Write {
            r.missed_deadlines = stats.missed_write_deadlines;
        }
        let consumer_max = self.consumer_misses.values().copied().max().unwrap_or(0);
        r.max_missed_per_cycle = r.max_missed_per_cycle.max(consumer_max);
        r.streams_with_misses = self.players.iter().filter(|p| p.missed > 0).count();
        let ms = |v: &[Duration]| {
            LatencySummary::of(v.iter().map(|d| d.as_secs_f64() * 1e3)).unwrap_or_default()
        };
        r.initial_latency = ms(&self.latencies);
        r.probe_latency = ms(&self.probe_latencies);
        let (from, start) = self.steady.take().unwrap_or_else(|| (Duration::ZERO, BTreeMap::new()));
        let secs = end_at.saturating_sub(from).as_secs_f64().max(1e-9);
        let mut bytes = 0u64;
        let mut util = BTreeMap::new();
        for (id, e) in &end {
            let s = start.get(id).copied().unwrap_or_default();
            bytes += (e.rt_bytes + e.nrt_bytes).saturating_sub(s.rt_bytes + s.nrt_bytes);
            let busy = (e.rt_busy + e.nrt_busy).saturating_sub(s.rt_busy + s.nrt_busy);
            util.insert(id.0, busy.as_secs_f64() / secs);
        }
        r.bytes_per_s = bytes as f64 / secs;
        (r, util)
    }
}

fn snapshot(workers: &BTreeMap<DiskId, IoWorker>) -> BTreeMap<DiskId, IoStats> {
    workers.iter().map(|(id, w)| (*id, w.stats())).collect()
}

fn sid(i: usize) -> StreamId {
    StreamId(i as u64)
}
