//! A deterministic virtual-time harness for the [`CycleScheduler`]: modelled disks, dummy
//! consumers, missed deadlines (XTREAM §3's dummy streams, in virtual time).
//!
//! Disks follow Gennart's model ([`DiskModel`]: a seek drawn from its distribution plus
//! `size / rate`), one IO at a time in the order the scheduler hands them over. A playing stream
//! arrives, asks for admission, starts at its first block, and releases each block at the send
//! time of the next one (its consumer never waits: a block that is late is counted, not waited
//! for). A recording hands in each block when its last packet has been "captured". Optional
//! non-real-time load keeps a backlog of requests on every disk. Everything is a pure function of
//! the configuration and the seed.
//!
//! [`find_max_n`] searches the largest number of streams of a workload that runs with no missed
//! deadline (XTREAM's MaxN, found "by trial and error" in the paper, by bisection here), which is
//! what `isochron bench-disk` and the Table-1 report compare the admission policies against.
//!
//! Not here: real disks (`isochron bench-disk` drives the same scheduler over `diskio`).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use isochron_base::mix::{SplitMix64, hash_words};
use isochron_base::{BlockIndex, DiskId, Instant, RunId, StreamId};

use crate::admission::{
    AdmissionConfig, AdmissionController, AdmissionPolicy, Direction, StreamDemand,
};
use crate::cycle::{
    CycleConfig, CycleEvent, CycleIo, CycleReport, CycleScheduler, CycleStats, IoClass, NrtDone,
    NrtId, NrtKind, NrtRequest, RecordBlock, WriteDone,
};
use crate::plan::{Anchor, ReadDone};
use crate::profile::{DiskModel, ProfileError};
use crate::workload::{StreamSpec, uniform};

/// Non-real-time load: every disk keeps `backlog` requests of `request_len` queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NrtLoad {
    /// Read or write.
    pub kind: NrtKind,
    /// Size of each request.
    pub request_len: isochron_base::Bytes,
    /// Requests kept queued per disk.
    pub backlog: usize,
}

/// A simulation.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// The scheduler's settings.
    pub cycle: CycleConfig,
    /// Admission settings (the profiles come from the disk models).
    pub admission: AdmissionConfig,
    /// The disks, `DiskId(0)`, `DiskId(1)`, …
    pub disks: Vec<DiskModel>,
    /// How long to run after the last arrival.
    pub horizon: Duration,
    /// Seed of the disks' seek times and of restart positions.
    pub seed: u64,
    /// Non-real-time load, if any.
    pub nrt: Option<NrtLoad>,
    /// Misses with a deadline before this time are not counted in the report (a warm-up);
    /// zero counts the whole run.
    pub measure_from: Duration,
}

impl SimConfig {
    /// One cycle length for both the scheduler and admission, 60 s horizon, seed 1, no NRT load.
    #[must_use]
    pub fn new(disks: Vec<DiskModel>, policy: AdmissionPolicy, cycle: Duration) -> Self {
        Self {
            cycle: CycleConfig { cycle, ..CycleConfig::default() },
            admission: AdmissionConfig { policy, cycle, ..AdmissionConfig::default() },
            disks,
            horizon: Duration::from_secs(60),
            seed: 1,
            nrt: None,
            measure_from: Duration::ZERO,
        }
    }

    /// The same simulation with another admission policy.
    #[must_use]
    pub fn with_policy(&self, policy: AdmissionPolicy) -> Self {
        let mut c = self.clone();
        c.admission.policy = policy;
        c
    }

    /// The admission controller this simulation uses: each disk's model profiles.
    pub fn controller(&self) -> Result<AdmissionController, ProfileError> {
        let mut profiles = Vec::with_capacity(self.disks.len());
        let mut writes = Vec::with_capacity(self.disks.len());
        for (i, m) in self.disks.iter().enumerate() {
            let d = DiskId(u16::try_from(i).unwrap_or(u16::MAX));
            profiles.push((d, m.read_profile()?));
            writes.push((d, m.write_profile()?));
        }
        let mut c = AdmissionController::new(self.admission.clone(), profiles);
        for (d, p) in writes {
            c.set_write_profile(d, p);
        }
        Ok(c)
    }
}

/// A stream of a simulation.
#[derive(Clone, Debug, PartialEq)]
pub struct SimStream {
    /// What it plays or records.
    pub spec: StreamSpec,
    /// When it asks for admission (and starts, if admitted).
    pub arrival: Duration,
    /// For a playing stream: restart (as a seek would) at a random block this often, to sample
    /// initial latency under load.
    pub restart_every: Option<Duration>,
}

impl SimStream {
    /// Where a restart (see `restart_every`) begins, from a uniform random `draw`: a block in
    /// the first half, so the stream has blocks left to play. Both drivers of a workload, this
    /// simulator and the real-time disk bench, restart streams alike.
    #[must_use]
    pub fn restart_block(&self, draw: u64) -> BlockIndex {
        let n = self.spec.plan.blocks.len() as u64;
        BlockIndex(u32::try_from(draw % (n / 2).max(1)).unwrap_or(0))
    }
}

/// Streams arriving about one every `spacing`: stream `i` at `(i + u_i)·spacing` with `u_i`
/// uniform in `[0, 1)` from `seed` (stratified: the order is kept, and no arrival pattern
/// resonates with the streams' block periods as a fixed spacing can). None restarts.
#[must_use]
pub fn staggered(specs: Vec<StreamSpec>, spacing: Duration, seed: u64) -> Vec<SimStream> {
    specs
        .into_iter()
        .enumerate()
        .map(|(i, spec)| {
            let u = uniform(&mut SplitMix64::new(hash_words(&[seed, i as u64, 0x4152])));
            SimStream { spec, arrival: spacing.mul_f64(i as f64 + u), restart_every: None }
        })
        .collect()
}

/// What a simulation measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SimReport {
    /// Streams that asked for admission.
    pub offered: usize,
    /// Streams admitted.
    pub admitted: usize,
    /// Blocks not in memory by their deadline (from `measure_from` on).
    pub missed_deadlines: u64,
    /// Recorded blocks not written by their deadline (from `measure_from` on).
    pub missed_write_deadlines: u64,
    /// Streams with at least one missed deadline.
    pub streams_with_misses: usize,
    /// Per start of a playing stream: request to first block in memory.
    pub initial_latencies: Vec<Duration>,
    /// Blocks delivered to consumers.
    pub delivered: u64,
    /// Blocks written for recordings.
    pub written: u64,
    /// Non-real-time bytes completed.
    pub nrt_bytes_done: u64,
    /// Every cycle's counts, in order.
    pub cycles: Vec<CycleReport>,
    /// Per disk: the fraction of the run it was busy.
    pub disk_utilisation: Vec<f64>,
    /// Virtual time simulated.
    pub elapsed: Duration,
    /// The scheduler's counters at the end.
    pub stats: CycleStats,
}

impl SimReport {
    /// Missed deadlines of both kinds.
    #[must_use]
    pub fn missed(&self) -> u64 {
        self.missed_deadlines + self.missed_write_deadlines
    }

    /// The `q`-quantile (nearest rank) of the initial latencies.
    #[must_use]
    pub fn latency_quantile(&self, q: f64) -> Option<Duration> {
        let mut v = self.initial_latencies.clone();
        if v.is_empty() {
            return None;
        }
        v.sort_unstable();
        let rank = ((q.clamp(0.0, 1.0) * v.len() as f64).ceil() as usize).clamp(1, v.len());
        Some(v[rank - 1])
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    DiskDone(usize),
    Arrival(usize),
    Restart(usize),
    BlockDone { stream: usize, run: RunId, index: u32 },
    Produce { stream: usize, index: u32 },
}

impl Ev {
    /// Order at equal times: completions first (a block arriving at its deadline is in time).
    fn priority(self) -> u8 {
        match self {
            Self::DiskDone(_) => 0,
            _ => 2,
        }
    }
}

#[derive(Debug, Default)]
struct Disk {
    queue: VecDeque<CycleIo>,
    current: Option<CycleIo>,
    busy: Duration,
}

#[derive(Debug, Default)]
struct Player {
    admitted: bool,
    run: RunId,
    started: Instant,
    anchor: Option<Anchor>,
    missed: u64,
}

struct Sim<'a> {
    config: &'a SimConfig,
    streams: &'a [SimStream],
    sched: CycleScheduler<()>,
    heap: BinaryHeap<Reverse<(Instant, u8, u64, Ev)>>,
    seq: u64,
    disks: Vec<Disk>,
    players: Vec<Player>,
    rng: SplitMix64,
    nrt_next: u64,
    end: Instant,
    report: SimReport,
}

/// Runs a simulation to `last arrival + horizon` and reports what happened.
pub fn run(config: &SimConfig, streams: &[SimStream]) -> Result<SimReport, ProfileError> {
    let sched = CycleScheduler::new(config.cycle.clone(), config.controller()?);
    let last = streams.iter().map(|s| s.arrival).max().unwrap_or_default();
    let end = Instant::ZERO + last + config.horizon;
    let mut sim = Sim {
        config,
        streams,
        sched,
        heap: BinaryHeap::new(),
        seq: 0,
        disks: config.disks.iter().map(|_| Disk::default()).collect(),
        players: streams.iter().map(|_| Player::default()).collect(),
        rng: SplitMix64::new(hash_words(&[config.seed, 0x0053_494d])),
        nrt_next: 0,
        end,
        report: SimReport { offered: streams.len(), ..SimReport::default() },
    };
    for (i, s) in streams.iter().enumerate() {
        sim.push(Instant::ZERO + s.arrival, Ev::Arrival(i));
    }
    if let Some(load) = config.nrt {
        for d in 0..config.disks.len() {
            for _ in 0..load.backlog {
                sim.submit_nrt(Instant::ZERO, d, load);
            }
        }
    }
    sim.pump(Instant::ZERO);
    sim.run();
    Ok(sim.finish())
}

impl Sim<'_> {
    fn push(&mut self, at: Instant, ev: Ev) {
        self.seq += 1;
        self.heap.push(Reverse((at, ev.priority(), self.seq, ev)));
    }

    fn run(&mut self) {
        loop {
            let next = self.heap.peek().map(|Reverse((t, p, ..))| (*t, *p));
            let timer = self.sched.poll_timeout();
            let use_timer = match (timer, next) {
                (Some(t), Some((e, p))) => t < e || (t == e && p > 0),
                (Some(_), None) => true,
                (None, _) => false,
            };
            let now = match (use_timer, timer, next) {
                (true, Some(t), _) => t,
                (false, _, Some((e, _))) => e,
                _ => break,
            };
            if now > self.end {
                break;
            }
            if use_timer {
                self.sched.handle_timeout(now);
            } else if let Some(Reverse((_, _, _, ev))) = self.heap.pop() {
                self.handle(now, ev);
            }
            self.pump(now);
        }
    }

    fn handle(&mut self, now: Instant, ev: Ev) {
        match ev {
            Ev::DiskDone(d) => self.disk_done(now, d),
            Ev::Arrival(i) => self.arrive(now, i),
            Ev::Restart(i) => self.restart(now, i),
            Ev::BlockDone { stream, run, index } => {
                self.sched.handle_block_done(now, sid(stream), run, BlockIndex(index));
            }
            Ev::Produce { stream, index } => self.produce(now, stream, index),
        }
    }

    fn arrive(&mut self, now: Instant, i: usize) {
        let s = &self.streams[i];
        let admitted = match s.spec.direction {
            Direction::Read => self.sched.handle_open(now, s.spec.open(sid(i))).is_admit(),
            Direction::Write => {
                self.sched.handle_open_record(now, s.spec.record(sid(i))).is_admit()
            }
        };
        if !admitted {
            return;
        }
        self.report.admitted += 1;
        self.players[i].admitted = true;
        match s.spec.direction {
            Direction::Read => {
                self.start(now, i, BlockIndex(0));
                if let Some(every) = s.restart_every {
                    self.push(now + every, Ev::Restart(i));
                }
            }
            Direction::Write => self.schedule_produce(now, i, 0),
        }
    }

    fn start(&mut self, now: Instant, i: usize, from: BlockIndex) {
        let plan = &self.streams[i].spec.plan;
        let media = plan.blocks.get(from.0 as usize).map(|b| b.first_send_time).unwrap_or_default();
        let p = &mut self.players[i];
        p.run = p.run.next();
        p.started = now;
        p.anchor = None;
        let run = p.run;
        self.sched.handle_start(now, sid(i), run, from, media);
    }

    fn restart(&mut self, now: Instant, i: usize) {
        let s = &self.streams[i];
        let from = s.restart_block(self.rng.next_u64());
        self.sched.handle_stop(now, sid(i));
        self.start(now, i, from);
        if let Some(every) = s.restart_every {
            self.push(now + every, Ev::Restart(i));
        }
    }

    /// Block `index` of recording `i` is complete when the next block starts.
    fn schedule_produce(&mut self, arrival: Instant, i: usize, index: u32) {
        let plan = &self.streams[i].spec.plan;
        let Some(first) = plan.blocks.first() else { return };
        // The last block's end is unknown: the recording stops before it.
        let Some(next) = plan.blocks.get(index as usize + 1) else { return };
        let done = next.first_send_time.saturating_duration_since(first.first_send_time);
        self.push(arrival + done, Ev::Produce { stream: i, index });
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
        // Next block: relative to this stream's arrival.
        let arrival = Instant::ZERO + self.streams[i].arrival;
        self.schedule_produce(arrival, i, index + 1);
    }

    fn submit_nrt(&mut self, now: Instant, disk: usize, load: NrtLoad) {
        self.nrt_next += 1;
        let req = NrtRequest {
            id: NrtId(self.nrt_next),
            disk: did(disk),
            kind: load.kind,
            len: load.request_len,
        };
        let _ = self.sched.handle_nrt(now, req);
    }

    fn disk_done(&mut self, now: Instant, d: usize) {
        let Some(io) = self.disks[d].current.take() else { return };
        match io.class {
            IoClass::Read { key } => {
                self.sched.handle_read_done(now, ReadDone { disk: io.disk, key, result: Ok(()) });
            }
            IoClass::Write { key, .. } => {
                self.sched.handle_write_done(now, WriteDone { disk: io.disk, key, result: Ok(()) });
            }
            IoClass::Nrt { id, offset, .. } => {
                self.report.nrt_bytes_done += io.len.0;
                self.sched
                    .handle_nrt_done(now, NrtDone { id, disk: io.disk, offset, result: Ok(()) });
            }
        }
        self.start_disk(now, d);
    }

    fn start_disk(&mut self, now: Instant, d: usize) {
        if self.disks[d].current.is_some() {
            return;
        }
        let Some(io) = self.disks[d].queue.pop_front() else { return };
        let model = self.config.disks[d];
        let rate = match io.class {
            IoClass::Write { .. } | IoClass::Nrt { kind: NrtKind::Write, .. } => model.write_rate,
            _ => model.read_rate,
        };
        let seek = model.sample_seek(uniform(&mut self.rng));
        let t = DiskModel::io_time(seek, io.len, rate);
        self.disks[d].busy += t;
        self.disks[d].current = Some(io);
        self.push(now + t, Ev::DiskDone(d));
    }

    /// Hands issued IO to the disks and reacts to the scheduler's events.
    fn pump(&mut self, now: Instant) {
        loop {
            let mut any = false;
            while let Some(io) = self.sched.poll_io() {
                any = true;
                let d = usize::from(io.disk.0);
                if d < self.disks.len() {
                    self.disks[d].queue.push_back(io);
                    self.start_disk(now, d);
                }
            }
            while let Some(ev) = self.sched.poll_event() {
                any = true;
                self.event(now, ev);
            }
            if !any {
                break;
            }
        }
    }

    fn event(&mut self, now: Instant, ev: CycleEvent<()>) {
        match ev {
            CycleEvent::Deliver { stream, index, anchor, run, .. } => {
                let i = stream.0 as usize;
                let p = &mut self.players[i];
                if run != p.run {
                    return;
                }
                if let Some(a) = anchor {
                    p.anchor = Some(a);
                    self.report.initial_latencies.push(now - p.started);
                }
                self.report.delivered += 1;
                let Some(a) = p.anchor else { return };
                let plan = &self.streams[i].spec.plan;
                let j = index.0 as usize;
                let this = plan.blocks[j].first_send_time;
                let next = match plan.blocks.get(j + 1) {
                    Some(b) => b.first_send_time,
                    None => {
                        let prev =
                            j.checked_sub(1).map_or(this, |k| plan.blocks[k].first_send_time);
                        this + this.saturating_duration_since(prev)
                    }
                };
                let end = a.wall + next.saturating_duration_since(a.media);
                self.push(end.max(now), Ev::BlockDone { stream: i, run, index: index.0 });
            }
            CycleEvent::Missed { stream, deadline, .. } => {
                if deadline < Instant::ZERO + self.config.measure_from {
                    return;
                }
                if let Some(p) = self.players.get_mut(stream.0 as usize) {
                    p.missed += 1;
                }
                if self
                    .streams
                    .get(stream.0 as usize)
                    .is_some_and(|s| s.spec.direction == Direction::Write)
                {
                    self.report.missed_write_deadlines += 1;
                } else {
                    self.report.missed_deadlines += 1;
                }
            }
            CycleEvent::Written { .. } => self.report.written += 1,
            CycleEvent::NrtDone { .. } => {
                if let Some(load) = self.config.nrt {
                    self.resubmit_nrt(now, load);
                }
            }
            CycleEvent::CycleEnd(r) => self.report.cycles.push(r),
            CycleEvent::ReadFailed { .. }
            | CycleEvent::WriteFailed { .. }
            | CycleEvent::Failover { .. }
            | CycleEvent::GivenBack { .. } => {}
        }
    }

    fn resubmit_nrt(&mut self, now: Instant, load: NrtLoad) {
        // Each disk keeps `backlog` requests: top up whichever disks are below it.
        for d in 0..self.disks.len() {
            let queued = self.sched.nrt_pending(did(d));
            for _ in queued..load.backlog {
                self.submit_nrt(now, d, load);
            }
        }
    }

    fn finish(mut self) -> SimReport {
        let stats = self.sched.stats();
        let elapsed = self.end - Instant::ZERO;
        self.report.streams_with_misses = self.players.iter().filter(|p| p.missed > 0).count();
        self.report.disk_utilisation = self
            .disks
            .iter()
            .map(|d| d.busy.as_secs_f64() / elapsed.as_secs_f64().max(1e-9))
            .collect();
        self.report.elapsed = elapsed;
        self.report.stats = stats;
        self.report
    }
}

fn sid(i: usize) -> StreamId {
    StreamId(i as u64)
}

fn did(d: usize) -> DiskId {
    DiskId(u16::try_from(d).unwrap_or(u16::MAX))
}

/// How many of `streams`, offered in order, the configuration's policy admits before its first
/// refusal (XTREAM Table 1's "admits N" for nested stream sets). Pure admission arithmetic: no
/// simulation; run [`run`] on that prefix to check it misses nothing.
pub fn admitted_prefix(config: &SimConfig, streams: &[SimStream]) -> Result<usize, ProfileError> {
    Ok(admitted_prefix_by(&mut config.controller()?, streams))
}

/// How many of `streams`, offered in order, `controller` admits before its first refusal: the
/// arithmetic of [`admitted_prefix`] for a controller built elsewhere (the disk bench builds
/// one from measured profiles).
pub fn admitted_prefix_by(controller: &mut AdmissionController, streams: &[SimStream]) -> usize {
    streams
        .iter()
        .enumerate()
        .take_while(|(i, s)| {
            let demand = match s.spec.direction {
                Direction::Read => {
                    StreamDemand::read(&s.spec.plan, s.spec.avg_bitrate, s.spec.peak_bitrate)
                }
                Direction::Write => {
                    let r = s.spec.record(sid(*i));
                    StreamDemand::write(r.avg_bitrate, r.peak_bitrate, r.block_size)
                }
            };
            controller.admit(sid(*i), &demand).is_admit()
        })
        .count()
}

/// The result of [`find_max_n`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MaxN {
    /// The most streams that ran with no missed deadline (0 if even one stream missed).
    pub max_n: usize,
    /// Every run of the search: (streams, missed deadlines).
    pub runs: Vec<(usize, u64)>,
}

/// Finds the most streams, among the first `n` of `streams_for(n)`, that run with no missed
/// deadline, admission off: doubling from 1 until a run misses (or `limit`), then bisection.
/// Assumes a set that misses stays missing when streams are added (true of the nested, prefix-
/// stable workloads of [`crate::workload`] up to the noise of one seed).
pub fn find_max_n(
    config: &SimConfig,
    mut streams_for: impl FnMut(usize) -> Vec<SimStream>,
    limit: usize,
) -> Result<MaxN, ProfileError> {
    let config = config.with_policy(AdmissionPolicy::Off);
    let mut out = MaxN::default();
    let mut misses = |n: usize, out: &mut MaxN| -> Result<u64, ProfileError> {
        let m = run(&config, &streams_for(n))?.missed();
        out.runs.push((n, m));
        Ok(m)
    };
    if limit == 0 || misses(1, &mut out)? > 0 {
        return Ok(out);
    }
    let (mut good, mut bad) = (1usize, None);
    while good < limit {
        let n = (good * 2).min(limit);
        if misses(n, &mut out)? == 0 {
            good = n;
        } else {
            bad = Some(n);
            break;
        }
    }
    if let Some(mut bad) = bad {
        while bad - good > 1 {
            let mid = good + (bad - good) / 2;
            if misses(mid, &mut out)? == 0 {
                good = mid;
            } else {
                bad = mid;
            }
        }
    }
    out.max_n = good;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use isochron_base::{BitRate, Bytes};

    use super::*;
    use crate::workload::{self, WorkloadKind, WorkloadSpec};

    const MIB: f64 = 1_048_576.0;

    /// One emulated disk: 10 ms mean seek, 4 MiB/s, so a 1 MiB block takes 0.26 s on average and
    /// the disk reads 3.85 blocks per second.
    fn one_disk(policy: AdmissionPolicy) -> SimConfig {
        let d = DiskModel::new(Duration::from_millis(10), 4.0 * MIB);
        SimConfig::new(vec![d], policy, Duration::from_secs(1))
    }

    fn cbr(rate: u64, disks: u16, n: usize) -> Vec<StreamSpec> {
        let mut spec =
            WorkloadSpec::new(WorkloadKind::Cbr, BitRate(rate), (0..disks).map(DiskId).collect());
        spec.duration = Duration::from_secs(600);
        workload::generate(&spec, n)
    }

    #[test]
    fn below_capacity_no_deadline_is_missed() {
        // 24 × 1 Mb/s = 2.86 blocks/s of 3.85: 74 % load, over 60 s after the last arrival.
        let c = one_disk(AdmissionPolicy::Off);
        let r = run(&c, &staggered(cbr(1_000_000, 1, 24), Duration::from_secs(2), 1)).unwrap();
        assert_eq!(r.admitted, 24);
        assert_eq!(r.missed(), 0, "{r:?}");
        assert!(r.elapsed >= Duration::from_secs(60));
        assert!(r.delivered > 24 * 8, "{}", r.delivered);
        assert!(
            r.disk_utilisation[0] > 0.5 && r.disk_utilisation[0] < 0.9,
            "{:?}",
            r.disk_utilisation
        );
        // Several disks, heterogeneous rates, admitted by the aggressive policy.
        let d = DiskModel::new(Duration::from_millis(10), 4.0 * MIB);
        let c = SimConfig::new(vec![d; 4], AdmissionPolicy::Aggressive, Duration::from_secs(1));
        let mut spec = WorkloadSpec::new(
            WorkloadKind::Heterogeneous,
            BitRate(2_000_000),
            (0..4).map(DiskId).collect(),
        );
        spec.duration = Duration::from_secs(600);
        let streams = staggered(workload::generate(&spec, 200), Duration::from_secs(1), 2);
        let n = admitted_prefix(&c, &streams).unwrap();
        assert!(n > 10, "{n}");
        let r = run(&c, &streams[..n]).unwrap();
        assert_eq!((r.admitted, r.missed()), (n, 0));
    }

    #[test]
    fn overload_with_admission_off_misses_and_counts() {
        let c = one_disk(AdmissionPolicy::Off);
        let at = |n| run(&c, &staggered(cbr(1_000_000, 1, n), Duration::from_secs(1), 1)).unwrap();
        let ok = at(28);
        let over = at(40);
        let far = at(56);
        assert_eq!(ok.missed(), 0);
        assert!(
            over.missed() > 0 && far.missed() > over.missed(),
            "{} {}",
            over.missed(),
            far.missed()
        );
        assert!(far.streams_with_misses > over.streams_with_misses);
        // Every miss is in exactly one cycle's count (the last cycle may still be open).
        let per_cycle: u64 = far.cycles.iter().map(|c| u64::from(c.missed)).sum();
        assert!(
            per_cycle <= far.stats.missed_deadlines && per_cycle + 10 >= far.stats.missed_deadlines
        );
        assert!(far.stats.cycles_with_misses > 0);
        // With admission on, the same offered load is trimmed and runs clean.
        let adm = one_disk(AdmissionPolicy::Aggressive);
        let r = run(&adm, &staggered(cbr(1_000_000, 1, 56), Duration::from_secs(1), 1)).unwrap();
        assert!(r.admitted < 32 && r.admitted >= 28, "{}", r.admitted);
        assert_eq!(r.missed(), 0);
    }

    /// XTREAM §2.2 and Fig. 5: initial latency is one IO plus the IO in progress, whatever the
    /// load. A probe stream restarts at random blocks every 8 s next to N − 1 others.
    #[test]
    fn initial_latency_does_not_grow_with_load() {
        let c = one_disk(AdmissionPolicy::Off);
        let max_n =
            find_max_n(&c, |n| staggered(cbr(1_000_000, 1, n), Duration::from_secs(2), 3), 64)
                .unwrap()
                .max_n;
        assert!(max_n >= 28, "{max_n}");
        let p99 = |n: usize| {
            let mut s = staggered(cbr(1_000_000, 1, n), Duration::from_secs(2), 3);
            let probe = s.len() - 1;
            // A restart reads a fresh block: every 8 s is about the load of a 1 Mb/s stream.
            s[probe].restart_every = Some(Duration::from_secs(8));
            let mut c = c.clone();
            c.horizon = Duration::from_secs(400);
            let r = run(&c, &s).unwrap();
            // The restarts add load: at MaxN itself a few blocks may be late; below, none.
            if n <= max_n / 2 {
                assert_eq!(r.missed(), 0, "n = {n}");
            }
            assert!(r.initial_latencies.len() >= 40, "{}", r.initial_latencies.len());
            r.latency_quantile(0.99).unwrap()
        };
        let (one, half, full) = (p99(1), p99(max_n / 2), p99(max_n));
        // One IO: 1 MiB at 4 MiB/s after a seek of at most 30 ms.
        assert!(one >= Duration::from_millis(250) && one <= Duration::from_millis(280), "{one:?}");
        assert!(half <= full.max(one * 2), "{half:?}");
        assert!(full <= one * 2, "p99 at MaxN {full:?} vs at 1 stream {one:?}");
    }

    #[test]
    fn nrt_gets_its_share_and_never_causes_a_miss() {
        // Real-time load up to what admission allows with 30 % reserved, plus an endless backlog
        // of 4 MiB non-real-time reads.
        let mut c = one_disk(AdmissionPolicy::Aggressive);
        c.admission.nrt_share = 0.3;
        c.nrt = Some(NrtLoad { kind: NrtKind::Read, request_len: Bytes::mib(4), backlog: 2 });
        let streams = staggered(cbr(1_000_000, 1, 60), Duration::from_secs(1), 4);
        let n = admitted_prefix(&c, &streams).unwrap();
        assert_eq!(n, 22, "0.7 / (0.1192 · 0.26) = 22.6");
        let r = run(&c, &streams).unwrap();
        assert_eq!(r.admitted, n);
        assert_eq!(r.missed(), 0);
        // Once every stream has arrived, NRT gets at least its 30 % of the disk's time (its
        // chunks' mean seek plus transfer at 4 MiB/s).
        let steady: Vec<_> = r.cycles.iter().filter(|x| x.index >= 70).collect();
        let busy: f64 = steady
            .iter()
            .map(|x| f64::from(x.nrt_ios) * 0.010 + x.nrt_bytes as f64 / (4.0 * MIB))
            .sum::<f64>()
            / steady.len() as f64;
        assert!(busy >= 0.3, "NRT {busy:.3} s per 1 s cycle");
        // Most cycles get some; in a cycle where real-time reads bunch up, NRT yields (the
        // average above is what the reserve guarantees).
        let with = steady.iter().filter(|x| x.nrt_bytes > 0).count();
        assert!(with * 100 >= steady.len() * 75, "{with} of {}", steady.len());
        assert!(r.nrt_bytes_done > 0);
    }

    #[test]
    fn recordings_write_at_their_rate_when_admitted() {
        let mut spec =
            WorkloadSpec::new(WorkloadKind::Cbr, BitRate(2_000_000), vec![DiskId(0), DiskId(1)]);
        spec.direction = Direction::Write;
        spec.duration = Duration::from_secs(600);
        let d = DiskModel {
            write_rate: 3.0 * MIB,
            ..DiskModel::new(Duration::from_millis(10), 4.0 * MIB)
        };
        let c = SimConfig::new(vec![d; 2], AdmissionPolicy::Aggressive, Duration::from_secs(1));
        let streams = staggered(workload::generate(&spec, 80), Duration::from_secs(1), 5);
        let n = admitted_prefix(&c, &streams).unwrap();
        assert!(n >= 10, "{n}");
        assert!(n < 80);
        let r = run(&c, &streams).unwrap();
        assert_eq!(r.admitted, n);
        assert_eq!(r.missed(), 0);
        // Each recording produces a block every 4.19 s; all but the last one or two are written.
        let produced: u64 = streams[..n]
            .iter()
            .map(|s| {
                let left = r.elapsed.saturating_sub(s.arrival).as_secs_f64();
                (left / (1_048_576.0 / 250_000.0)).floor() as u64
            })
            .sum();
        assert!(
            r.written + 2 * n as u64 >= produced && r.written <= produced,
            "{} of {produced}",
            r.written
        );
        // Mixed: recordings and playbacks on the same disks, admission on both.
        let mut mixed = staggered(workload::generate(&spec, 10), Duration::from_secs(2), 6);
        let mut play =
            WorkloadSpec::new(WorkloadKind::Cbr, BitRate(2_000_000), vec![DiskId(0), DiskId(1)]);
        play.duration = Duration::from_secs(600);
        play.seed = 9;
        let mut p = staggered(workload::generate(&play, 10), Duration::from_secs(2), 7);
        for s in &mut p {
            s.arrival += Duration::from_secs(1);
        }
        mixed.extend(p);
        let r = run(&c, &mixed).unwrap();
        assert!(r.admitted >= 10 && r.admitted < 20, "{}", r.admitted);
        assert_eq!(r.missed(), 0);
        assert!(r.written > 0 && r.delivered > 0);
    }

    #[test]
    fn runs_are_deterministic() {
        let c = one_disk(AdmissionPolicy::Off);
        let s = staggered(cbr(2_000_000, 1, 20), Duration::from_secs(1), 8);
        assert_eq!(run(&c, &s).unwrap(), run(&c, &s).unwrap());
    }

    #[test]
    fn max_n_search_brackets_the_capacity() {
        // 2 Mb/s CBR: the disk holds 3.85 / 0.238 = 16.1 streams at 100 % load.
        let c = SimConfig {
            cycle: CycleConfig { lookahead_cycles: 2, ..CycleConfig::default() },
            ..one_disk(AdmissionPolicy::Off)
        };
        let m = find_max_n(&c, |n| staggered(cbr(2_000_000, 1, n), Duration::from_secs(2), 9), 100)
            .unwrap();
        assert!((13..=16).contains(&m.max_n), "{m:?}");
        assert!(m.runs.iter().any(|(n, miss)| *n == m.max_n + 1 && *miss > 0));
        let adm = c.with_policy(AdmissionPolicy::AggressiveAvg);
        let pool = staggered(cbr(2_000_000, 1, 40), Duration::from_secs(2), 9);
        let n = admitted_prefix(&adm, &pool).unwrap();
        assert!(n <= m.max_n && n * 10 >= m.max_n * 8, "admitted {n} of MaxN {}", m.max_n);
        assert_eq!(run(&adm, &pool[..n]).unwrap().missed(), 0);
    }
}
