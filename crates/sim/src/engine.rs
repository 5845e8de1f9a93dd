//! The discrete-event engine: resources with FIFO queues, jobs that cross them step by step.
//!
//! Why: Gennart et al. model a system as "a set of components (bus, disks, processors, links)"
//! that "perform elementary operations sequentially", while "systems perform composite
//! operations concurrently", a composite operation being "a series of elementary component
//! operations" (§3.1). That is exactly this engine: a [`Resource`](ResourceSpec) is a component
//! (one or more identical servers, one FIFO queue); a job is a composite operation, a list of
//! [`Step`]s; a step is an elementary operation that holds one or more resources at once for its
//! service time (a processor stalled on a cache miss holds itself *and* the bus; a link transfer
//! through the crossbar holds the sending node's link *and* an interface link).
//!
//! A step acquires its resources in the order listed, holding what it has while it waits for
//! the next (blocking, as a stalled processor or a wormhole-routed packet does); its service
//! starts when it holds them all, and it releases them all when it ends. A resource released
//! goes to the head of its queue at once. Service time is the step's fixed time plus, for a disk,
//! seeks drawn from Gennart's seek density (isochron-sched's [`DiskModel`]) with the resource's
//! own seeded generator.
//!
//! A step of a job may also wait for an earlier job to have ended some of its steps ([`Gate`],
//! [`Engine::add_job_gated`]): a requester that keeps a bounded number of requests outstanding
//! issues the next one when a response comes back (`model`'s point-to-point strand requests,
//! §4), and a disk node that does not read ahead starts a disk's next strand once its processor
//! is done with the last one. The wait is not queueing at a resource: the step's timing starts
//! when the gate opens.
//!
//! Determinism: virtual time is integer nanoseconds ([`Instant`]); events are ordered by
//! (time, sequence number); queues are FIFO; every random draw comes from a generator seeded by
//! (seed, resource index) and is taken in event order. So the same jobs and seed always give the
//! same timings, bit for bit.
//!
//! Not here: what the components and operations are (`model`), experiments (`experiment`).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use isochron_base::Instant;
use isochron_base::mix::{SplitMix64, hash_words};
use isochron_sched::DiskModel;

/// A resource of an [`Engine`], by index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourceId(pub usize);

/// A job of an [`Engine`], by index (the order jobs were added in).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobId(pub usize);

/// A component: `servers` identical servers behind one FIFO queue.
#[derive(Clone, Debug, PartialEq)]
pub struct ResourceSpec {
    /// A name for reports (`disk 3`, `bus`).
    pub name: String,
    /// Identical servers (4 for the pool of interface links; 1 for most components).
    pub servers: usize,
    /// For a disk: the mean of its seek-time density; steps on it with `seeks > 0` draw from it.
    pub seek_mean: Option<Duration>,
}

/// One elementary operation of a job.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// The resources held together during the step, acquired in this order (none: a delay).
    pub resources: Vec<ResourceId>,
    /// Service time without seeks (a transfer: bytes over the component's rate).
    pub fixed: Duration,
    /// Seeks to draw from the first resource's seek density and add to the service time.
    pub seeks: u32,
}

impl Step {
    /// The mean service time in seconds: the fixed time plus the seeks at `seek_mean` each.
    #[must_use]
    pub fn mean_secs(&self, seek_mean: Duration) -> f64 {
        self.fixed.as_secs_f64() + f64::from(self.seeks) * seek_mean.as_secs_f64()
    }
}

/// A condition on one step of a job: it may not begin before job `on` (an earlier job) has
/// ended `steps_done` of its steps (all of them: until `on` is done).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gate {
    /// The step that waits (0: the job's start).
    pub step: usize,
    /// The job waited for.
    pub on: JobId,
    /// How many of `on`'s steps must have ended.
    pub steps_done: usize,
}

/// When one step of a job waited and ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepTiming {
    /// When the job asked for the step's first resource (after any [`Gate`] on it opened).
    pub enqueued: Instant,
    /// When it held every resource and service began.
    pub started: Instant,
    /// When service ended.
    pub ended: Instant,
}

impl StepTiming {
    /// Service time (without the wait).
    #[must_use]
    pub fn service(&self) -> Duration {
        self.ended - self.started
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Arrive(usize),
    StepDone(usize),
}

#[derive(Debug)]
struct Resource {
    spec: ResourceSpec,
    free: usize,
    queue: VecDeque<usize>,
    busy_ns: u128,
    rng: SplitMix64,
}

#[derive(Debug)]
struct Job {
    arrival: Instant,
    /// Gates on this job's steps.
    gates: Vec<Gate>,
    /// Jobs waiting for this one to have ended a number of steps: `(steps_done, job)`.
    watchers: Vec<(usize, usize)>,
    steps: Vec<Step>,
    step: usize,
    held: Vec<ResourceId>,
    timings: Vec<StepTiming>,
    done: Option<Instant>,
}

/// The engine: resources, jobs, the event queue and the virtual clock.
#[derive(Debug)]
pub struct Engine {
    now: Instant,
    seq: u64,
    events: BinaryHeap<Reverse<(Instant, u64, Event)>>,
    resources: Vec<Resource>,
    jobs: Vec<Job>,
}

impl Engine {
    /// An engine over `resources`, with random draws seeded by `seed`.
    #[must_use]
    pub fn new(resources: Vec<ResourceSpec>, seed: u64) -> Self {
        let resources = resources
            .into_iter()
            .enumerate()
            .map(|(i, spec)| Resource {
                free: spec.servers.max(1),
                spec,
                queue: VecDeque::new(),
                busy_ns: 0,
                rng: SplitMix64::new(hash_words(&[seed, i as u64, 0x0053_494d])),
            })
            .collect();
        Self { now: Instant::ZERO, seq: 0, events: BinaryHeap::new(), resources, jobs: Vec::new() }
    }

    /// Adds a job that starts its first step at `arrival`. Returns its id. A step with no
    /// resources is a pure delay of its fixed time.
    pub fn add_job(&mut self, arrival: Instant, steps: Vec<Step>) -> JobId {
        self.add_job_gated(arrival, Vec::new(), steps)
    }

    /// Adds a job that arrives at `arrival` and whose steps wait for their `gates` to open
    /// (a gate on step 0 with `steps_done: usize::MAX`: the job starts when `on` finishes).
    /// Gates on jobs that are not earlier than this one are ignored (they could never open in
    /// order), and a gate asking for more steps than its job has waits for the job to finish.
    /// Its [`job`](Self::job) arrival stays `arrival`, so its delay counts the waits.
    pub fn add_job_gated(&mut self, arrival: Instant, gates: Vec<Gate>, steps: Vec<Step>) -> JobId {
        let id = self.jobs.len();
        let gates = gates
            .into_iter()
            .filter(|g| g.on.0 < id)
            .map(|g| Gate { steps_done: g.steps_done.min(self.jobs[g.on.0].steps.len()), ..g })
            .collect();
        self.jobs.push(Job {
            arrival,
            gates,
            watchers: Vec::new(),
            timings: Vec::with_capacity(steps.len()),
            steps,
            step: 0,
            held: Vec::new(),
            done: None,
        });
        self.schedule(arrival, Event::Arrive(id));
        JobId(id)
    }

    /// Runs until no event is left: every job has finished.
    pub fn run(&mut self) {
        while let Some(Reverse((t, _, ev))) = self.events.pop() {
            self.now = t;
            match ev {
                Event::Arrive(j) => self.enter_step(j),
                Event::StepDone(j) => self.finish_step(j),
            }
        }
    }

    /// The virtual time of the last event processed.
    #[must_use]
    pub fn now(&self) -> Instant {
        self.now
    }

    /// A job's arrival, per-step timings and completion (`None` if it has not finished).
    #[must_use]
    pub fn job(&self, id: JobId) -> (Instant, &[StepTiming], Option<Instant>) {
        let j = &self.jobs[id.0];
        (j.arrival, &j.timings, j.done)
    }

    /// Number of jobs.
    #[must_use]
    pub fn job_count(&self) -> usize {
        self.jobs.len()
    }

    /// The resources' specs, by id.
    pub fn resources(&self) -> impl Iterator<Item = (ResourceId, &ResourceSpec)> {
        self.resources.iter().enumerate().map(|(i, r)| (ResourceId(i), &r.spec))
    }

    /// Server-time a resource spent serving steps, over all its servers. Time a resource is
    /// held by a step still waiting for its next resource is not counted: it is contention, not
    /// work (a component's utilisation is its busy time over the simulated time, §5.1).
    #[must_use]
    pub fn busy(&self, r: ResourceId) -> Duration {
        let ns = self.resources[r.0].busy_ns;
        Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// Fraction of `span` that a resource's servers were held, averaged over its servers.
    #[must_use]
    pub fn utilisation(&self, r: ResourceId, span: Duration) -> f64 {
        let servers = self.resources[r.0].spec.servers.max(1) as f64;
        let span = span.as_secs_f64();
        if span <= 0.0 { 0.0 } else { self.busy(r).as_secs_f64() / (servers * span) }
    }

    fn schedule(&mut self, at: Instant, ev: Event) {
        self.seq += 1;
        self.events.push(Reverse((at, self.seq, ev)));
    }

    fn enter_step(&mut self, j: usize) {
        let job = &mut self.jobs[j];
        if job.step >= job.steps.len() {
            job.done = Some(self.now);
            self.wake_watchers(j);
            return;
        }
        let step = job.step;
        let jobs = &self.jobs;
        let closed = jobs[j]
            .gates
            .iter()
            .find(|g| g.step == step && jobs[g.on.0].step < g.steps_done)
            .copied();
        if let Some(g) = closed {
            // Re-entered (as an arrival) when `g.on` has ended enough steps.
            self.jobs[g.on.0].watchers.push((g.steps_done, j));
            return;
        }
        self.jobs[j].timings.push(StepTiming { enqueued: self.now, ..StepTiming::default() });
        self.acquire(j);
    }

    /// Schedules, now, every job waiting for job `j` to have ended as many steps as it has.
    fn wake_watchers(&mut self, j: usize) {
        let ended = self.jobs[j].step;
        let (ready, waiting): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.jobs[j].watchers).into_iter().partition(|w| w.0 <= ended);
        self.jobs[j].watchers = waiting;
        for (_, w) in ready {
            self.schedule(self.now, Event::Arrive(w));
        }
    }

    /// Takes the current step's resources in order until one is busy (then waits in its queue)
    /// or all are held (then starts service).
    fn acquire(&mut self, j: usize) {
        loop {
            let job = &self.jobs[j];
            let step = &job.steps[job.step];
            let h = job.held.len();
            if h == step.resources.len() {
                self.start_service(j);
                return;
            }
            let r = step.resources[h];
            let res = &mut self.resources[r.0];
            if res.free > 0 {
                res.free -= 1;
                self.jobs[j].held.push(r);
            } else {
                res.queue.push_back(j);
                return;
            }
        }
    }

    fn start_service(&mut self, j: usize) {
        let job = &self.jobs[j];
        let step = &job.steps[job.step];
        let mut service = step.fixed;
        if let (true, Some(first)) = (step.seeks > 0, step.resources.first()) {
            let res = &mut self.resources[first.0];
            if let Some(mean) = res.spec.seek_mean {
                let model = DiskModel::new(mean, 1.0);
                for _ in 0..step.seeks {
                    service += model.sample_seek(uniform(&mut res.rng));
                }
            }
        }
        let now = self.now;
        let job = &mut self.jobs[j];
        if let Some(t) = job.timings.last_mut() {
            t.started = now;
        }
        self.schedule(now + service, Event::StepDone(j));
    }

    fn finish_step(&mut self, j: usize) {
        let now = self.now;
        let held = {
            let job = &mut self.jobs[j];
            if let Some(t) = job.timings.last_mut() {
                t.ended = now;
            }
            job.step += 1;
            std::mem::take(&mut job.held)
        };
        let served = self.jobs[j].timings.last().map_or(Duration::ZERO, StepTiming::service);
        for r in held {
            let res = &mut self.resources[r.0];
            res.busy_ns += served.as_nanos();
            match res.queue.pop_front() {
                Some(w) => {
                    self.jobs[w].held.push(r);
                    self.acquire(w);
                }
                None => res.free += 1,
            }
        }
        if self.jobs[j].step < self.jobs[j].steps.len() {
            self.wake_watchers(j);
        }
        self.enter_step(j);
    }
}

/// A uniform sample in `[0, 1)`.
fn uniform(rng: &mut SplitMix64) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// Time to move `bytes` at `bytes_per_sec`, rounded to the nanosecond.
#[must_use]
pub fn transfer_time(bytes: f64, bytes_per_sec: f64) -> Duration {
    Duration::from_nanos((bytes / bytes_per_sec * 1e9).round().max(0.0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(name: &str, servers: usize) -> ResourceSpec {
        ResourceSpec { name: name.into(), servers, seek_mean: None }
    }

    fn step(r: &[usize], ms: u64) -> Step {
        Step {
            resources: r.iter().map(|i| ResourceId(*i)).collect(),
            fixed: Duration::from_millis(ms),
            seeks: 0,
        }
    }

    fn ms(t: Instant) -> u64 {
        t.as_nanos() / 1_000_000
    }

    #[test]
    fn fifo_queue_and_pipeline() {
        // Two jobs through A (10 ms) then B (5 ms): the second waits for A, B overlaps.
        let mut e = Engine::new(vec![res("A", 1), res("B", 1)], 1);
        let a = e.add_job(Instant::ZERO, vec![step(&[0], 10), step(&[1], 5)]);
        let b = e.add_job(Instant::ZERO, vec![step(&[0], 10), step(&[1], 5)]);
        e.run();
        assert_eq!(ms(e.job(a).2.unwrap()), 15);
        let (_, t, done) = e.job(b);
        assert_eq!(ms(t[0].started), 10);
        assert_eq!(ms(done.unwrap()), 25);
        assert_eq!(e.busy(ResourceId(0)), Duration::from_millis(20));
        assert!((e.utilisation(ResourceId(1), Duration::from_millis(25)) - 0.4).abs() < 1e-12);
    }

    #[test]
    fn pools_serve_in_parallel() {
        let mut e = Engine::new(vec![res("links", 2)], 1);
        let ids: Vec<_> = (0..3).map(|_| e.add_job(Instant::ZERO, vec![step(&[0], 10)])).collect();
        e.run();
        let done: Vec<u64> = ids.iter().map(|i| ms(e.job(*i).2.unwrap())).collect();
        assert_eq!(done, vec![10, 10, 20]);
        assert!((e.utilisation(ResourceId(0), Duration::from_millis(20)) - 0.75).abs() < 1e-12);
    }

    #[test]
    fn multi_resource_steps_hold_what_they_have_while_waiting() {
        // Job 1 holds B for 30 ms. Job 2 needs A then B: it takes A at 0 and holds it, blocked,
        // until B frees at 30, so job 3 (A only) cannot start before job 2 ends at 40.
        let mut e = Engine::new(vec![res("A", 1), res("B", 1)], 1);
        e.add_job(Instant::ZERO, vec![step(&[1], 30)]);
        let j2 = e.add_job(Instant::ZERO, vec![step(&[0, 1], 10)]);
        let j3 = e.add_job(Instant::ZERO, vec![step(&[0], 5)]);
        e.run();
        assert_eq!(ms(e.job(j2).2.unwrap()), 40);
        assert_eq!(ms(e.job(j3).1[0].started), 40);
        // A served 10 ms for job 2 (it was held, blocked, 30 ms more) and 5 ms for job 3.
        assert_eq!(e.busy(ResourceId(0)), Duration::from_millis(15));
    }

    #[test]
    fn seeks_follow_the_density_and_are_reproducible() {
        let disk = ResourceSpec {
            name: "disk".into(),
            servers: 1,
            seek_mean: Some(Duration::from_millis(10)),
        };
        let run = |seed| {
            let mut e = Engine::new(vec![disk.clone()], seed);
            let n = 20_000;
            for _ in 0..n {
                e.add_job(Instant::ZERO, vec![Step { seeks: 1, ..step(&[0], 0) }]);
            }
            e.run();
            (0..n).map(|i| e.job(JobId(i)).1[0].service().as_secs_f64()).collect::<Vec<_>>()
        };
        let s = run(3);
        assert_eq!(s, run(3));
        assert_ne!(s, run(4));
        let n = s.len() as f64;
        let mean = s.iter().sum::<f64>() / n;
        let sd = (s.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
        assert!((mean - 0.010).abs() < 0.0002, "{mean}");
        // Gennart: standard deviation m/√2 = 7.07 ms.
        assert!((sd - 0.00707).abs() < 0.0002, "{sd}");
        assert!(s.iter().all(|x| *x >= 0.0 && *x <= 0.030 + 1e-9));
    }

    #[test]
    fn a_step_without_resources_is_a_delay() {
        let mut e = Engine::new(vec![res("A", 1)], 1);
        let j = e.add_job(Instant::ZERO, vec![step(&[], 4), step(&[0], 1)]);
        e.run();
        assert_eq!(ms(e.job(j).1[1].started), 4);
        assert_eq!(ms(e.job(j).2.unwrap()), 5);
    }

    #[test]
    fn a_job_after_another_starts_when_it_finishes() {
        // Job 1 (A, 10 ms) then job 2 after it: job 2 arrives at 0 but starts at 10, and its
        // delay counts the wait. Job 3 after job 2, due at 50: it starts at 50, not 20. Job 4
        // after a finished job starts at its arrival.
        let mut e = Engine::new(vec![res("A", 1), res("B", 1)], 1);
        let after = |on| vec![Gate { step: 0, on, steps_done: usize::MAX }];
        let j1 = e.add_job(Instant::ZERO, vec![step(&[0], 10)]);
        let j2 = e.add_job_gated(Instant::ZERO, after(j1), vec![step(&[1], 10)]);
        let j3 = e.add_job_gated(Instant::from_nanos(50_000_000), after(j2), vec![step(&[1], 1)]);
        e.run();
        assert_eq!(ms(e.job(j2).0), 0);
        assert_eq!(ms(e.job(j2).1[0].enqueued), 10);
        assert_eq!(ms(e.job(j2).2.unwrap()), 20);
        assert_eq!(ms(e.job(j3).1[0].started), 50);
        let j4 = e.add_job_gated(Instant::from_nanos(60_000_000), after(j1), vec![step(&[0], 1)]);
        e.run();
        assert_eq!(ms(e.job(j4).1[0].started), 60);
    }

    #[test]
    fn a_gated_step_waits_for_another_jobs_step() {
        // Job 1: A for 10 ms, then B for 10 ms. Job 2: B for 1 ms, then A for 1 ms, the A step
        // gated on job 1 having ended its first step. Job 2's B runs at once (0–1); its A waits
        // for the gate (10), not for A's queue, and its timing starts when the gate opens.
        let mut e = Engine::new(vec![res("A", 1), res("B", 1)], 1);
        let j1 = e.add_job(Instant::ZERO, vec![step(&[0], 10), step(&[1], 10)]);
        let gate = Gate { step: 1, on: j1, steps_done: 1 };
        let j2 = e.add_job_gated(Instant::ZERO, vec![gate], vec![step(&[1], 1), step(&[0], 1)]);
        e.run();
        let (_, t, done) = e.job(j2);
        assert_eq!((ms(t[0].started), ms(t[0].ended)), (0, 1));
        assert_eq!((ms(t[1].enqueued), ms(t[1].started)), (10, 10));
        assert_eq!(ms(done.unwrap()), 11);
        // Job 1's second step was not delayed by job 2.
        assert_eq!(ms(e.job(j1).2.unwrap()), 20);
    }

    #[test]
    fn later_arrivals_start_later() {
        let mut e = Engine::new(vec![res("A", 1)], 1);
        let j = e.add_job(Instant::from_nanos(7_000_000), vec![step(&[0], 1)]);
        e.run();
        assert_eq!(ms(e.job(j).1[0].started), 7);
        assert_eq!(ms(e.job(j).2.unwrap()), 8);
    }
}
