//! A virtual-time harness for several [`ClusterCore`]s: a simulated network with per-link delay,
//! partitions and crashes, and for each node a model of its scheduler (admission by a share
//! capacity) and its sender (which packets of the object it sends, when, on the session's
//! clock). quinn's `Pair`, generalised to N nodes.
//!
//! Every packet a node "sends" is logged with its GSN, node and virtual send time, so tests can
//! check what a client would have received: each packet exactly once, in time order, from the
//! node that holds it.

#![allow(dead_code, unreachable_pub)]

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, HashSet};
use std::time::Duration;

use isochron_base::Position;
use isochron_base::{
    BitRate, BlockIndex, DiskId, Epoch, Gsn, Instant, MediaTime, NodeId, ObjectId, Pace, RunId,
    StreamId,
};
use isochron_cluster::{
    ClusterConfig, ClusterCore, Delivery, Dest, LocalAction, LocalAnchor, MemberInfo, Message,
    OpenSpec, Refusal, Role, RunSpec, RunTracks, SessionEvent, ShareFailure, ShareKey, ShareReport,
    StartSpec, StopKind, TrackSpec,
};

/// Packets per block, and the media time between packets.
pub const PACKETS_PER_BLOCK: u64 = 50;
pub const PACKET_INTERVAL: Duration = Duration::from_millis(10);
/// The test object.
pub const OBJECT: ObjectId = ObjectId(7);

/// The object: which node holds each block (replica 0), and its other copies.
#[derive(Clone, Debug)]
pub struct Object {
    pub owners: Vec<NodeId>,
    /// Nodes in the cluster.
    pub nodes: u16,
    /// Copies of every block (K): replica r is on the node r after replica 0's, in a ring
    /// (distinct nodes, like `isochron_store::replica` with K ≤ nodes).
    pub replication: u16,
}

impl Object {
    /// `blocks` blocks spread over `nodes` pseudo-randomly (seeded).
    pub fn new(blocks: usize, nodes: u16, seed: u64) -> Self {
        let mut x = seed;
        let owners = (0..blocks)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                NodeId(((x >> 33) % u64::from(nodes)) as u16 + 1)
            })
            .collect();
        Self { owners, nodes, replication: 1 }
    }

    /// The nodes holding `block`'s copies, replica 0 first.
    pub fn copies(&self, block: usize) -> Vec<NodeId> {
        let first = self.owners[block].0 - 1;
        (0..self.replication).map(|r| NodeId((first + r) % self.nodes + 1)).collect()
    }

    /// Who sends the packet `gsn` when the nodes in `dead` are lost: the first copy on a node
    /// not in `dead` (`docs/design/takeover.md`).
    pub fn sender(&self, gsn: u64, dead: &BTreeSet<NodeId>) -> Option<NodeId> {
        self.copies((gsn / PACKETS_PER_BLOCK) as usize).into_iter().find(|n| !dead.contains(n))
    }

    pub fn packets(&self) -> u64 {
        self.owners.len() as u64 * PACKETS_PER_BLOCK
    }

    pub fn time(gsn: u64) -> MediaTime {
        MediaTime::from_nanos(gsn * PACKET_INTERVAL.as_nanos() as u64)
    }

    pub fn owner(&self, gsn: u64) -> NodeId {
        self.owners[(gsn / PACKETS_PER_BLOCK) as usize]
    }

    pub fn position(gsn: u64) -> Position {
        Position::at(Gsn(gsn), Self::time(gsn))
    }
}

/// One packet on the (simulated) wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sent {
    pub node: NodeId,
    pub stream: StreamId,
    pub gsn: u64,
    /// True time (the harness's clock).
    pub at: Instant,
}

/// A run's part taken over while its node was lost ([`Run::withhold`]).
#[derive(Debug)]
struct Withholding {
    /// From this media time on.
    from: MediaTime,
    /// The blocks taken over (`None`: all).
    blocks: Option<BTreeSet<u64>>,
    /// The give-back point's block, once known.
    until: Option<u64>,
    /// Blocks it sends anyway: taken over since, or its own again, their taker lost in turn.
    exempt: BTreeSet<u64>,
}

impl Withholding {
    /// Whether packet `g` is of a block taken over from it.
    fn covers(&self, g: u64) -> bool {
        let b = g / PACKETS_PER_BLOCK;
        Object::time(g) >= self.from
            && self.blocks.as_ref().is_none_or(|w| w.contains(&b))
            && !self.exempt.contains(&b)
    }
}

#[derive(Debug)]
struct Run {
    run: RunId,
    spec: RunSpec,
    /// Clock segments: (from media time, anchor, pace); the last whose `from` ≤ t applies.
    clock: Vec<(MediaTime, LocalAnchor, Pace)>,
    /// Own packets still to send, ascending.
    todo: Vec<u64>,
    next: usize,
    end: Option<MediaTime>,
    last_sent: Option<u64>,
    /// Pending stop: report when the cutoff's due time passes.
    stop_at: Option<Instant>,
    ended: bool,
    /// Its part taken over while it was lost (`LocalAction::Withhold`): its packets from this
    /// media time on, of the blocks taken over (`None`: all), are not sent until released;
    /// then those of blocks up to the give-back point's (a block index) are passed over, and
    /// the rest sent; but for the blocks it sends anyway (the last set: taken over since, or
    /// its own again, their taker lost in turn).
    withhold: Option<Withholding>,
    /// Held on finding its next packet overdue by more than `hold_after` (the server's
    /// pacer): nothing is sent until then, unless a withhold or release comes first.
    hold_until: Option<Instant>,
    /// Whether the hold of this stretch of lateness was used already.
    hold_used: bool,
    /// Frozen (`LocalAction::Freeze`): a relayed session's feeder whose origin is silent.
    frozen: bool,
}

impl Run {
    /// The next packet, unless a withhold not yet released stops it.
    fn next_packet(&self) -> Option<u64> {
        let g = *self.todo.get(self.next)?;
        match &self.withhold {
            Some(w) if w.until.is_none() && w.covers(g) => None,
            _ => Some(g),
        }
    }

    fn due(&self, t: MediaTime) -> Instant {
        let (_, a, p) =
            self.clock.iter().rev().find(|(from, _, _)| *from <= t).unwrap_or(&self.clock[0]);
        a.wall + p.wall_span(t.saturating_duration_since(a.media))
    }

    /// Where the share stands: after a stop, its first packet not sent; after its end, none.
    fn report(&self, stopped: bool) -> ShareReport {
        ShareReport {
            next: self.todo.get(self.next).copied().filter(|_| stopped).map(Object::position),
            last_sent: self.last_sent.map(Object::position),
        }
    }
}

/// A node: its core, its clock offset, and the models of its scheduler and sender.
pub struct SimNode {
    pub core: ClusterCore,
    /// This node's clock minus the true clock, ns.
    pub skew_ns: i64,
    pub capacity: usize,
    /// Admitted shares, with the members lost when each opened (planned without them).
    admitted: HashMap<ShareKey, BTreeSet<NodeId>>,
    runs: HashMap<ShareKey, Run>,
    pub events: Vec<SessionEvent>,
    pub byes: Vec<ShareKey>,
    /// Every takeover asked of this node: share, dead set, from.
    pub takeovers: Vec<(ShareKey, BTreeSet<NodeId>, MediaTime)>,
    /// Every give-back asked of this node: share, the member back, from.
    pub givebacks: Vec<(ShareKey, NodeId, MediaTime)>,
    /// Every withhold asked of this node: share, from.
    pub withholds: Vec<(ShareKey, MediaTime)>,
    /// Every release asked of this node: share, at.
    pub releases: Vec<(ShareKey, MediaTime)>,
    /// Every freeze asked of this node.
    pub freezes: Vec<ShareKey>,
    pub crashed: bool,
    /// Stopped (SIGSTOP) until then: nothing runs, messages to it wait in its sockets.
    pub paused_until: Option<Instant>,
    /// How late its sender hands out every packet (a busy machine).
    pub lag: Duration,
    /// Its process's incarnation, said in its `Hello`s.
    pub incarnation: u64,
}

impl SimNode {
    fn local_now(&self, t: Instant) -> Instant {
        Instant::from_nanos(t.as_nanos().saturating_add_signed(self.skew_ns))
    }

    fn true_time(&self, local: Instant) -> Instant {
        Instant::from_nanos(local.as_nanos().saturating_add_signed(-self.skew_ns))
    }

    pub fn admitted(&self) -> usize {
        self.admitted.len()
    }
}

/// The harness.
pub struct Harness {
    pub now: Instant,
    pub nodes: BTreeMap<NodeId, SimNode>,
    pub object: Object,
    /// One-way delay of every link.
    pub delay: Duration,
    /// Links (from, to) that drop everything.
    pub cut: HashSet<(NodeId, NodeId)>,
    net: BinaryHeap<Reverse<(Instant, u64, u16, u16)>>,
    /// Messages on their way (`None`: the end of the sender's connection, read after what it
    /// sent before).
    in_flight: HashMap<u64, Option<Message>>,
    seq: u64,
    pub sent: Vec<Sent>,
    /// Messages delivered, by kind.
    pub message_counts: BTreeMap<&'static str, u64>,
    /// Encoded control bytes sent, by kind.
    pub message_bytes: BTreeMap<&'static str, u64>,
}

impl Harness {
    /// `n` nodes, all live and knowing each other, with an object of `blocks` blocks.
    pub fn new(n: u16, blocks: usize) -> Self {
        Self::with_skews(&vec![0; n as usize], blocks)
    }

    /// Nodes whose clocks are off the true clock by `skews_ms`.
    pub fn with_skews(skews_ms: &[i64], blocks: usize) -> Self {
        Self::build(skews_ms, blocks, 1)
    }

    /// `n` nodes and an object with `k` copies of every block.
    pub fn with_replication(n: u16, blocks: usize, k: u8) -> Self {
        Self::build(&vec![0; n as usize], blocks, k)
    }

    fn build(skews_ms: &[i64], blocks: usize, k: u8) -> Self {
        let n = skews_ms.len() as u16;
        let mut nodes = BTreeMap::new();
        // Unix time at true zero: a fixed date, so wall anchors look like real ones.
        let unix_zero: u64 = 1_800_000_000_000_000_000;
        for i in 1..=n {
            let skew = skews_ms[usize::from(i - 1)] * 1_000_000;
            // Each node's Instant::ZERO is at true zero; its Unix clock is skewed.
            let mut config = ClusterConfig::new(
                NodeId(i),
                format!("n{i}"),
                unix_zero.saturating_add_signed(skew),
            );
            config.replication = k;
            let mut core = ClusterCore::new(config);
            // Each peer's control connection opens with its `Hello`, which may come before
            // etcd has shown the peer (a node that registered a moment ago).
            for j in (1..=n).filter(|j| *j != i) {
                core.handle_message(Instant::ZERO, NodeId(j), hello(j, 1));
            }
            for j in 1..=n {
                core.handle_member(
                    Instant::ZERO,
                    MemberInfo { id: NodeId(j), name: format!("n{j}"), live: true },
                );
            }
            nodes.insert(
                NodeId(i),
                SimNode {
                    core,
                    skew_ns: 0,
                    capacity: usize::MAX,
                    admitted: HashMap::new(),
                    runs: HashMap::new(),
                    events: Vec::new(),
                    byes: Vec::new(),
                    takeovers: Vec::new(),
                    givebacks: Vec::new(),
                    withholds: Vec::new(),
                    releases: Vec::new(),
                    freezes: Vec::new(),
                    crashed: false,
                    paused_until: None,
                    lag: Duration::ZERO,
                    incarnation: 1,
                },
            );
        }
        Self {
            now: Instant::ZERO,
            nodes,
            object: Object { replication: u16::from(k), ..Object::new(blocks, n, 42) },
            delay: Duration::from_micros(200),
            cut: HashSet::new(),
            net: BinaryHeap::new(),
            in_flight: HashMap::new(),
            seq: 0,
            sent: Vec::new(),
            message_counts: BTreeMap::new(),
            message_bytes: BTreeMap::new(),
        }
    }

    pub fn node(&mut self, id: u16) -> &mut SimNode {
        self.nodes.get_mut(&NodeId(id)).expect("node")
    }

    // ----- the RTSP side, as a test drives it ------------------------------------------------

    pub fn open(&mut self, origin: u16, stream: u64, delivery: Delivery) {
        let now = self.now;
        self.node(origin).core.open(
            now,
            OpenSpec {
                stream: StreamId(stream),
                object: OBJECT,
                epoch: Epoch(1),
                avg_bitrate: BitRate(5_000_000),
                peak_bitrate: BitRate(8_000_000),
                delivery,
            },
        );
        self.flush();
    }

    pub fn start(&mut self, origin: u16, stream: u64, run: RunId, from_gsn: u64, udp: bool) {
        let now = self.now;
        let dest = if udp {
            Dest::Udp {
                rtp: "10.0.0.9:5000".parse().unwrap(),
                rtcp: "10.0.0.9:5001".parse().unwrap(),
            }
        } else {
            Dest::Origin
        };
        self.node(origin).core.start(
            now,
            StreamId(stream),
            run,
            StartSpec {
                start: Object::position(from_gsn),
                end: None,
                tracks: RunTracks::one(TrackSpec::mp2t(1, 0, 0, dest)),
                trick: None,
            },
            Pace::NOMINAL,
        );
        self.flush();
    }

    pub fn stop(&mut self, origin: u16, stream: u64, kind: StopKind) {
        let now = self.now;
        assert!(self.node(origin).core.stop(now, StreamId(stream), kind));
        self.flush();
    }

    pub fn pace(&mut self, origin: u16, stream: u64, pace: Pace) {
        let now = self.now;
        self.node(origin).core.pace(now, StreamId(stream), pace);
        self.flush();
    }

    pub fn close(&mut self, origin: u16, stream: u64) {
        let now = self.now;
        self.node(origin).core.close(now, StreamId(stream));
        self.flush();
    }

    /// A node's machine is gone (power, cable): it stops processing, its messages are lost,
    /// nothing closes its connections, and after `lease` every other node hears from etcd
    /// that it is down.
    pub fn power_off(&mut self, id: u16) {
        self.node(id).crashed = true;
    }

    /// Crashes a node's process: as [`Self::power_off`], but its kernel closes its control
    /// connections, and the others read their end at once.
    pub fn crash(&mut self, id: u16) {
        self.node(id).crashed = true;
        // Its kernel closes its control connections: the others read the end after what it
        // sent before (every message takes `delay`).
        let others: Vec<NodeId> = self.nodes.keys().copied().filter(|n| n.0 != id).collect();
        for to in others {
            self.seq += 1;
            self.in_flight.insert(self.seq, None);
            self.net.push(Reverse((self.now + self.delay, self.seq, id, to.0)));
        }
    }

    /// Starts a crashed node again: a new process (another incarnation), with a fresh core
    /// that knows every member and runs no share, whose control connections open with its
    /// `Hello` to every other node.
    pub fn restart(&mut self, id: u16) {
        let now = self.now;
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        let node = self.node(id);
        let mut core = ClusterCore::new(node.core.config().clone());
        let local = node.local_now(now);
        for j in &ids {
            let info = MemberInfo { id: *j, name: format!("n{}", j.0), live: true };
            core.handle_member(local, info);
        }
        node.core = core;
        node.crashed = false;
        node.admitted.clear();
        node.runs.clear();
        node.incarnation += 1;
        let incarnation = node.incarnation;
        for (nid, n) in &mut self.nodes {
            if nid.0 != id && !n.crashed {
                let local = n.local_now(now);
                n.core.handle_message(local, NodeId(id), hello(id, incarnation));
            }
        }
        self.flush();
    }

    /// Stops a node for `d` (SIGSTOP, then SIGCONT): none of its timers, messages or packets
    /// run meanwhile; messages to it wait, and on resuming it handles them, its timers, and
    /// sends every packet that fell due at once, as a resumed process does.
    pub fn pause(&mut self, id: u16, d: Duration) {
        let until = self.now + d;
        self.node(id).paused_until = Some(until);
    }

    /// Cuts every control link between `id` and the other nodes, both ways (its packets to
    /// clients still flow); `self.cut.clear()` heals them.
    pub fn isolate(&mut self, id: u16) {
        let others: Vec<NodeId> = self.nodes.keys().copied().filter(|n| n.0 != id).collect();
        for n in others {
            self.cut.insert((NodeId(id), n));
            self.cut.insert((n, NodeId(id)));
        }
    }

    /// `id` left the cluster for good (removed, its disks retired): every live node forgets it.
    pub fn removed(&mut self, id: u16) {
        let now = self.now;
        for (nid, n) in &mut self.nodes {
            if nid.0 != id && !n.crashed {
                n.core.remove_member(now, NodeId(id));
            }
        }
        self.flush();
    }

    /// etcd reports `id` down to every live node.
    pub fn lease_lapsed(&mut self, id: u16) {
        self.etcd_says(id, false);
    }

    /// etcd reports `id` live again (it registered under a new lease) to every live node.
    pub fn lease_renewed(&mut self, id: u16) {
        self.etcd_says(id, true);
    }

    fn etcd_says(&mut self, id: u16, live: bool) {
        let now = self.now;
        for (nid, n) in &mut self.nodes {
            if nid.0 != id && !n.crashed {
                let info = MemberInfo { id: NodeId(id), name: format!("n{id}"), live };
                n.core.handle_member(now, info);
            }
        }
        self.flush();
    }

    // ----- time ------------------------------------------------------------------------------

    /// Runs until `t` (true time).
    pub fn run_until(&mut self, t: Instant) {
        while let Some(next) = self.next_event().filter(|n| *n <= t) {
            self.now = self.now.max(next);
            self.step();
        }
        self.now = self.now.max(t);
    }

    /// Runs for `d`.
    pub fn run_for(&mut self, d: Duration) {
        let t = self.now + d;
        self.run_until(t);
    }

    fn next_event(&self) -> Option<Instant> {
        let net = self.net.peek().map(|Reverse((t, ..))| *t);
        let nodes = self.nodes.values().filter(|n| !n.crashed).flat_map(|n| {
            let core = n.core.poll_timeout().map(|l| n.true_time(l));
            let runs =
                n.runs.values().filter_map(|r| Self::run_wakeup(r, n.lag).map(|l| n.true_time(l)));
            let paused = n.paused_until.unwrap_or(Instant::ZERO);
            core.into_iter().chain(runs).map(move |t| t.max(paused))
        });
        net.into_iter().chain(nodes).min()
    }

    fn run_wakeup(r: &Run, lag: Duration) -> Option<Instant> {
        if r.ended {
            return None;
        }
        let packet = r.next_packet().filter(|_| !r.frozen).map(|g| {
            let due = r.due(Object::time(g)) + lag;
            r.hold_until.map_or(due, |h| due.max(h))
        });
        match (packet, r.stop_at) {
            (Some(p), Some(s)) => Some(p.min(s)),
            (p, s) => p.or(s),
        }
    }

    fn step(&mut self) {
        let now = self.now;
        // Network deliveries due.
        while let Some(&Reverse((t, id, from, to))) = self.net.peek() {
            if t > now {
                break;
            }
            self.net.pop();
            let node = self.nodes.get_mut(&NodeId(to)).expect("node");
            if let Some(until) = node.paused_until.filter(|u| *u > now) {
                // Waits in the stopped node's socket; order kept (same instant, later seq).
                self.seq += 1;
                let msg = self.in_flight.remove(&id).expect("message");
                self.in_flight.insert(self.seq, msg);
                self.net.push(Reverse((until, self.seq, from, to)));
                continue;
            }
            let msg = self.in_flight.remove(&id).expect("message");
            if node.crashed {
                continue;
            }
            let local = node.local_now(now);
            let Some(msg) = msg else {
                node.core.handle_peer_closed(local, NodeId(from));
                continue;
            };
            *self.message_counts.entry(msg.kind()).or_default() += 1;
            node.core.handle_message(local, NodeId(from), msg);
        }
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        // Where a relayed packet reaches the client from: its origin, once that runs (a stopped
        // one reads what waited in its socket on resuming), never a dead one.
        let relays: HashMap<NodeId, Option<Instant>> = self
            .nodes
            .iter()
            .map(|(id, n)| (*id, (!n.crashed).then(|| n.paused_until.unwrap_or(now).max(now))))
            .collect();
        for id in ids {
            let node = self.nodes.get_mut(&id).expect("node");
            if node.crashed || node.paused_until.is_some_and(|u| u > now) {
                continue;
            }
            node.paused_until = None;
            let local = node.local_now(now);
            // How far its sender has got, as the server's sender threads report it: the due
            // time of the earliest packet not yet handed out.
            let through = node
                .runs
                .values()
                .filter(|r| !r.ended)
                .filter_map(|r| r.next_packet().map(|g| r.due(Object::time(g))))
                .fold(local, Instant::min);
            node.core.handle_sent_through(through);
            if node.core.poll_timeout().is_some_and(|t| t <= local) {
                node.core.handle_timeout(local);
            }
            // Packets due.
            let lag = node.lag;
            let (hold_after, hold_window) =
                (node.core.config().hold_after(), node.core.config().hold_window);
            let mut finished = Vec::new();
            for (key, r) in &mut node.runs {
                if r.ended || r.frozen {
                    continue;
                }
                while let Some(g) = r.next_packet() {
                    let t = Object::time(g);
                    let due = r.due(t) + lag;
                    if r.end.is_some_and(|e| t > e) || due > local {
                        break;
                    }
                    // Released after a withhold: its blocks up to the give-back point are the
                    // takers'.
                    if let Some(w) = &r.withhold
                        && w.until.is_some_and(|u| g / PACKETS_PER_BLOCK <= u)
                        && w.covers(g)
                    {
                        r.next += 1;
                        continue;
                    }
                    // The server's pacer holds a stream overdue past `hold_after`, once, unless
                    // the word for its whole part came already (withheld, every block).
                    let late = local.saturating_duration_since(due);
                    let told_all = r.withhold.as_ref().is_some_and(|w| w.blocks.is_none());
                    if late > hold_after && !r.hold_used && !told_all {
                        r.hold_used = true;
                        r.hold_until = Some(local + hold_window);
                        break;
                    }
                    if r.hold_until.is_some_and(|h| h > local) {
                        break;
                    }
                    if late <= hold_after {
                        r.hold_used = false;
                    }
                    // A feeder's packets reach the client from the origin (relay).
                    if r.spec.role == Role::Feeder {
                        if let Some(at) = relays[&key.origin] {
                            self.sent.push(Sent {
                                node: key.origin,
                                stream: key.stream,
                                gsn: g,
                                at,
                            });
                        }
                    } else {
                        self.sent.push(Sent { node: id, stream: key.stream, gsn: g, at: now });
                    }
                    r.last_sent = Some(g);
                    r.next += 1;
                }
                if r.stop_at.is_some_and(|s| s <= local) {
                    r.ended = true;
                    finished.push((*key, r.run, r.report(true), true));
                } else if r
                    .todo
                    .get(r.next)
                    .is_none_or(|g| r.end.is_some_and(|e| Object::time(*g) > e))
                    && r.stop_at.is_none()
                {
                    r.ended = true;
                    finished.push((*key, r.run, r.report(false), false));
                }
            }
            for (key, run, report, stopped) in finished {
                if stopped {
                    node.core.handle_share_stopped(local, key, run, report);
                } else {
                    node.core.handle_share_ended(local, key, run, report);
                }
            }
        }
        self.flush();
    }

    /// Drains every node's outputs until nothing is left.
    pub fn flush(&mut self) {
        loop {
            let mut any = false;
            let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
            for id in ids {
                let object = self.object.clone();
                let now = self.now;
                let node = self.nodes.get_mut(&id).expect("node");
                if node.crashed {
                    while node.core.poll_transmit().is_some() {}
                    continue;
                }
                if node.paused_until.is_some_and(|u| u > now) {
                    continue;
                }
                let local = node.local_now(now);
                while let Some((to, msg)) = node.core.poll_transmit() {
                    any = true;
                    *self.message_bytes.entry(msg.kind()).or_default() +=
                        isochron_cluster::wire::encode_frame(&msg).len() as u64;
                    if self.cut.contains(&(id, to)) {
                        continue;
                    }
                    self.seq += 1;
                    self.in_flight.insert(self.seq, Some(msg));
                    self.net.push(Reverse((now + self.delay, self.seq, id.0, to.0)));
                }
                while let Some(action) = node.core.poll_local() {
                    any = true;
                    Self::carry_out(node, &object, id, local, action);
                }
                while let Some(ev) = node.core.poll_event() {
                    node.events.push(ev);
                }
            }
            if !any {
                break;
            }
        }
    }

    fn carry_out(
        node: &mut SimNode,
        object: &Object,
        id: NodeId,
        local: Instant,
        action: LocalAction,
    ) {
        match action {
            LocalAction::Admit { key, lost, .. } => {
                let no_copy = (0..object.packets())
                    .step_by(PACKETS_PER_BLOCK as usize)
                    .find(|g| object.sender(*g, &lost).is_none());
                let result = if let Some(g) = no_copy {
                    Err(Refusal {
                        node: format!("n{}", id.0),
                        disk: None,
                        reason: format!(
                            "block {} has no copy on a live node",
                            g / PACKETS_PER_BLOCK
                        ),
                    })
                } else if node.admitted.len() < node.capacity {
                    node.admitted.insert(key, lost);
                    Ok(())
                } else {
                    Err(Refusal {
                        node: format!("n{}", id.0),
                        disk: Some(DiskId(id.0 * 10)),
                        reason: "disk full of streams".into(),
                    })
                };
                node.core.handle_admitted(local, key, result);
            }
            LocalAction::Start { key, run, spec, anchor } => {
                let none = BTreeSet::new();
                let lost = node.admitted.get(&key).unwrap_or(&none);
                // A share opened with members lost is planned without them.
                let own = |g: &u64| match spec.role {
                    Role::Whole => true,
                    Role::Share { .. } | Role::Feeder => object.sender(*g, lost) == Some(id),
                };
                let todo: Vec<u64> = (spec.start.gsn.0..object.packets()).filter(own).collect();
                // A single node pins its clock when its first block is in memory: 20 ms.
                let anchor = anchor.unwrap_or(LocalAnchor {
                    wall: local + Duration::from_millis(20),
                    media: spec.start.time,
                });
                node.runs.insert(
                    key,
                    Run {
                        run,
                        spec,
                        clock: vec![(MediaTime::ZERO, anchor, spec.pace)],
                        todo,
                        next: 0,
                        end: spec.end,
                        last_sent: None,
                        stop_at: None,
                        ended: false,
                        withhold: None,
                        hold_until: None,
                        hold_used: false,
                        frozen: false,
                    },
                );
            }
            LocalAction::Stop { key, run, cutoff, .. } => {
                let Some(r) = node.runs.get_mut(&key).filter(|r| r.run == run && !r.ended) else {
                    node.core.handle_share_stopped(local, key, run, ShareReport::default());
                    return;
                };
                match cutoff {
                    Some(c) => {
                        r.end = Some(r.end.map_or(c, |e| e.min(c)));
                        r.stop_at = Some(r.due(c).max(local));
                    }
                    None => r.stop_at = Some(local),
                }
            }
            LocalAction::Pace { key, run, anchor, pace } => {
                let Some(r) = node.runs.get_mut(&key).filter(|r| r.run == run) else { return };
                let anchor = anchor.unwrap_or_else(|| {
                    // A single node re-pins at its current packet.
                    let g = r.todo.get(r.next).copied().unwrap_or(0);
                    let t = Object::time(g);
                    LocalAnchor { wall: r.due(t), media: t }
                });
                r.clock.push((anchor.media, anchor, pace));
                r.hold_until = None;
            }
            LocalAction::Freeze { key, run } | LocalAction::Thaw { key, run } => {
                let frozen = matches!(action, LocalAction::Freeze { .. });
                if frozen {
                    node.freezes.push(key);
                }
                if let Some(r) = node.runs.get_mut(&key).filter(|r| r.run == run) {
                    r.frozen = frozen;
                }
            }
            LocalAction::TakeOver { key, run, dead, from, .. } => {
                node.takeovers.push((key, dead.clone(), from));
                // A share that ended (not stopped) goes on with the blocks it gains.
                let Some(r) =
                    node.runs.get_mut(&key).filter(|r| r.run == run && r.stop_at.is_none())
                else {
                    return;
                };
                let first = from.as_nanos() / PACKET_INTERVAL.as_nanos() as u64;
                // On the origin, a block with no copy left fails the session (the node
                // core's `take_over`).
                let start = first.max(r.spec.start.gsn.0);
                let orphan = (start..object.packets()).find(|g| object.sender(*g, &dead).is_none());
                if let Some(g) = orphan.filter(|_| key.origin == id) {
                    let error = ShareFailure::NoCopy(BlockIndex((g / PACKETS_PER_BLOCK) as u32));
                    node.core.handle_share_failed(local, key, run, &error);
                    return;
                }
                // Its own blocks: by its plan, which left out the members lost before it opened.
                let none = node.admitted.get(&key).cloned().unwrap_or_default();
                let mut rest: BTreeSet<u64> = r.todo[r.next..].iter().copied().collect();
                // Blocks now this node's, and never its own: nothing it sent is resent.
                let taken: Vec<u64> = (first.max(r.spec.start.gsn.0)..object.packets())
                    .filter(|g| object.sender(*g, &dead) == Some(id))
                    .filter(|g| object.sender(*g, &none) != Some(id))
                    .collect();
                rest.extend(&taken);
                // Its own blocks withheld for a taker lost now, up to the give-back point's:
                // its own again, from where the taker was (the node core's `take_over`).
                if let Some(w) = r.withhold.as_mut() {
                    // Blocks taken over are not the part it was told it was lost for.
                    w.exempt.extend(taken.iter().map(|g| g / PACKETS_PER_BLOCK));
                    let since = from.max(w.from);
                    let last = w.until.unwrap_or(u64::MAX).min(object.owners.len() as u64 - 1);
                    for b in first / PACKETS_PER_BLOCK..=last {
                        let copies = object.copies(b as usize);
                        let next = copies.iter().find(|n| **n != id);
                        if copies[0] == id
                            && w.blocks.as_ref().is_none_or(|w| w.contains(&b))
                            && next.is_some_and(|n| dead.contains(n))
                            && w.exempt.insert(b)
                        {
                            let packets = b * PACKETS_PER_BLOCK..(b + 1) * PACKETS_PER_BLOCK;
                            rest.extend(packets.filter(|g| Object::time(*g) >= since));
                        }
                    }
                }
                r.todo.truncate(r.next);
                r.todo.extend(rest);
                let was_ended = r.ended;
                r.ended = r.todo.len() == r.next;
                // The origin waits for the share's word after a loss (`Message::Status`).
                node.core.handle_taken_over(local, key, run, was_ended && !r.ended);
            }
            LocalAction::GiveBack { key, run, dead, node: back, at } => {
                node.givebacks.push((key, back, at));
                let Some(r) = node.runs.get_mut(&key).filter(|r| r.run == run && !r.ended) else {
                    return;
                };
                // Blocks after the one holding `at` that are this node's only with `back` lost.
                let mut old = dead.clone();
                old.insert(back);
                let holding = at.as_nanos() / PACKET_INTERVAL.as_nanos() as u64 / PACKETS_PER_BLOCK;
                let none = node.admitted.get(&key).cloned().unwrap_or_default();
                let keep = |g: &u64| {
                    g / PACKETS_PER_BLOCK <= holding
                        || object.sender(*g, &dead) == Some(id)
                        || object.sender(*g, &none) == Some(id)
                        || object.sender(*g, &old) != Some(id)
                };
                let rest: Vec<u64> = r.todo[r.next..].iter().copied().filter(keep).collect();
                r.todo.truncate(r.next);
                r.todo.extend(rest);
            }
            LocalAction::Withhold { key, run, from, takers, until, lost_besides } => {
                node.withholds.push((key, from));
                let holding = |at: MediaTime| {
                    at.as_nanos() / PACKET_INTERVAL.as_nanos() as u64 / PACKETS_PER_BLOCK
                };
                // The blocks whose next copy (the first on another node) is on a taker; on the
                // origin's word with the origin lost here too, those whose first copy off the
                // other lost members is this node's.
                let own = |b: &u64, lost: &Option<BTreeSet<NodeId>>| {
                    lost.as_ref()
                        .is_none_or(|l| object.sender(b * PACKETS_PER_BLOCK, l) == Some(id))
                };
                let blocks = match (&takers, &lost_besides) {
                    (None, None) => None,
                    (None, Some(_)) => Some(
                        (0..object.owners.len() as u64).filter(|b| own(b, &lost_besides)).collect(),
                    ),
                    (Some(takers), _) => Some(
                        (0..object.owners.len() as u64)
                            .filter(|b| {
                                let next =
                                    object.copies(*b as usize).into_iter().find(|n| *n != id);
                                next.is_some_and(|n| takers.contains(&n)) && own(b, &lost_besides)
                            })
                            .collect(),
                    ),
                };
                if let Some(r) = node.runs.get_mut(&key).filter(|r| r.run == run && !r.ended) {
                    // A word for some blocks (one taker's) leaves the hold to run out: the
                    // other takers' word may be on its way (the pacer's rule).
                    if blocks.is_none() {
                        r.hold_until = None;
                        r.hold_used = true;
                    }
                    let until = until.map(holding);
                    // A word said again keeps what was exempt (the pacer's rule).
                    let exempt = r.withhold.take().map(|w| w.exempt).unwrap_or_default();
                    r.withhold = Some(Withholding { from, blocks, until, exempt });
                }
            }
            LocalAction::Release { key, run, at } => {
                node.releases.push((key, at));
                if let Some(r) = node.runs.get_mut(&key).filter(|r| r.run == run && !r.ended)
                    && let Some(Withholding { until, .. }) = r.withhold.as_mut()
                {
                    let holding =
                        at.as_nanos() / PACKET_INTERVAL.as_nanos() as u64 / PACKETS_PER_BLOCK;
                    *until = Some(holding);
                    if r.withhold.as_ref().is_some_and(|w| w.blocks.is_none()) {
                        r.hold_until = None;
                    }
                }
            }
            LocalAction::Bye { key } => node.byes.push(key),
            LocalAction::Close { key } => {
                node.admitted.remove(&key);
                node.runs.remove(&key);
            }
        }
    }

    // ----- checks ----------------------------------------------------------------------------

    /// The GSNs sent for `stream`, in send order.
    pub fn gsns(&self, stream: u64) -> Vec<u64> {
        self.sent.iter().filter(|s| s.stream == StreamId(stream)).map(|s| s.gsn).collect()
    }

    /// Asserts that `stream`'s packets were each sent once, by their owner (bipartite) or by
    /// `only` (relay), from `from` to the object's end.
    pub fn assert_complete(&self, stream: u64, from: u64, only: Option<u16>) {
        let mut seen = HashSet::new();
        for s in self.sent.iter().filter(|s| s.stream == StreamId(stream)) {
            assert!(seen.insert(s.gsn), "gsn {} sent twice", s.gsn);
            match only {
                Some(n) => assert_eq!(s.node, NodeId(n), "gsn {} from the wrong node", s.gsn),
                None => {
                    assert_eq!(s.node, self.object.owner(s.gsn), "gsn {} not from its owner", s.gsn)
                }
            }
        }
        for g in from..self.object.packets() {
            assert!(seen.contains(&g), "gsn {g} never sent");
        }
    }

    /// Asserts that every packet of `stream` from `from` to the end was sent at least once;
    /// returns how many were sent more than once.
    pub fn assert_every_packet(&self, stream: u64, from: u64) -> usize {
        let mut seen = HashSet::new();
        let mut dups = 0;
        for s in self.sent.iter().filter(|s| s.stream == StreamId(stream)) {
            if !seen.insert(s.gsn) {
                dups += 1;
            }
        }
        for g in from..self.object.packets() {
            assert!(seen.contains(&g), "gsn {g} never sent");
        }
        dups
    }

    /// Asserts that every packet of `stream` from `from` to the end was sent at least once, the
    /// first time no later than `late` after its due time on the session's clock (pace 1, the
    /// clock read off the first packet sent): what a client with a buffer of `late` needs.
    /// Returns how many packets were sent more than once.
    pub fn assert_delivered_in_time(&self, stream: u64, from: u64, late: Duration) -> usize {
        let mine: Vec<&Sent> = self.sent.iter().filter(|s| s.stream == StreamId(stream)).collect();
        let zero = mine.iter().find(|s| s.gsn == from).expect("the first packet was sent").at;
        let mut first: BTreeMap<u64, Instant> = BTreeMap::new();
        let mut dups = 0;
        for s in &mine {
            match first.entry(s.gsn) {
                std::collections::btree_map::Entry::Occupied(_) => dups += 1,
                std::collections::btree_map::Entry::Vacant(v) => {
                    v.insert(s.at);
                }
            }
        }
        for g in from..self.object.packets() {
            let at = *first.get(&g).unwrap_or_else(|| panic!("gsn {g} never sent"));
            let due = zero + PACKET_INTERVAL * u32::try_from(g - from).unwrap();
            assert!(at <= due + late, "gsn {g} sent at {at:?}, due {due:?}: later than {late:?}");
        }
        dups
    }

    /// Asserts that `stream`'s packets left in GSN order within `slack` (what a client's jitter
    /// buffer must absorb).
    pub fn assert_ordered(&self, stream: u64, slack: Duration) {
        let mut by_gsn: Vec<&Sent> =
            self.sent.iter().filter(|s| s.stream == StreamId(stream)).collect();
        by_gsn.sort_by_key(|s| s.gsn);
        let mut latest = Instant::ZERO;
        for s in by_gsn {
            assert!(
                s.at + slack >= latest,
                "gsn {} at {:?} left more than {slack:?} before an earlier packet (at {:?})",
                s.gsn,
                s.at,
                latest
            );
            latest = latest.max(s.at);
        }
    }
}

/// Node `id`'s `Hello` as incarnation `incarnation` of its process.
fn hello(id: u16, incarnation: u64) -> Message {
    Message::Hello { node: NodeId(id), name: format!("n{id}"), incarnation }
}
