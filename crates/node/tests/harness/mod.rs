//! N nodes in virtual time, each the server's own three cores — [`NodeCore`], the disk
//! scheduler's [`CycleScheduler`] over modelled disks, the sender's [`Pacer`] — wired as the
//! server wires them (`isochron_server::wiring`, `sessions.rs`), joined by an in-memory network
//! with per-message delay, with an etcd that keeps leases, and with players that check every
//! packet they get byte for byte.
//!
//! Faults are injected at chosen times: a node crashes (it stops, its messages and lease with
//! it), stands still (a SIGSTOP: nothing runs, messages wait, packets fall due unsent, then
//! everything at once), is cut off from its peers while its players still reach it (a
//! partition), or etcd stops answering. Everything is a pure function of the seed.
//!
//! What the players check is what a viewer sees: each packet's bytes are those of its GSN (the
//! payload carries its GSN and a pattern derived from it), its RTP sequence number is the
//! session's offset plus that GSN (RFC 3550 §5.1; the offset from the PLAY's `RTP-Info`,
//! RFC 2326 §12.33), every GSN of the object arrives, and the session ends with one BYE.

#![allow(dead_code)]

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use isochron_base::mix::SplitMix64;
use isochron_base::{BlockKey, Bytes, DiskId, Gsn, Instant, MediaTime, NodeId, ObjectId};
use isochron_cluster::{ClusterConfig, MemberInfo, Message};
use isochron_node::{NodeConfig, NodeCore, NodeOutput, Ticket, Transport};
use isochron_pacing::pacer::{Pacer, PacerConfig, PacerEvent, StreamOp, Transmit};
use isochron_rtsp::rtsp_types::{HeaderName, Method, Response, StatusCode};
use isochron_rtsp::server::{ConnId, ConnInfo, ServerConfig, ServerCore};
use isochron_sched::admission::{AdmissionConfig, AdmissionController};
use isochron_sched::cycle::{CycleConfig, CycleEvent, CycleIo, CycleScheduler, IoClass};
use isochron_sched::plan::ReadDone;
use isochron_sched::profile::DiskModel;
use isochron_store::block::{Block, BlockBuilder, PacketMeta};

use crate::common::{Clip, PER_BLOCK, SECOND, conn, request, session_of};

/// A block as the disks hold it and the pacer sends it.
pub(crate) type SharedBlock = Arc<Block<Vec<u8>>>;

/// Bytes of one packet's payload (seven TS packets).
pub(crate) const PAYLOAD: usize = 1316;

/// The payload of packet `gsn`: its GSN, then a pattern that depends on it.
#[must_use]
pub(crate) fn payload(gsn: u64) -> Vec<u8> {
    let mut p = vec![0u8; PAYLOAD];
    p[..8].copy_from_slice(&gsn.to_le_bytes());
    for (i, b) in p.iter_mut().enumerate().skip(8) {
        *b = (gsn.wrapping_mul(31).wrapping_add(i as u64) % 251) as u8;
    }
    p
}

/// The encoded blocks of the object `clip` of [`Clip::new`]: `blocks` blocks of
/// [`PER_BLOCK`] packets, one every 10 ms.
#[must_use]
pub(crate) fn blocks(blocks: u64) -> Arc<Vec<SharedBlock>> {
    let object = ObjectId(7);
    let made = (0..blocks)
        .map(|i| {
            let key = BlockKey { object, index: isochron_base::BlockIndex(i as u32) };
            let first = i * PER_BLOCK;
            let mut b = BlockBuilder::new(key, Gsn(first), Bytes::mib(1));
            for g in first..first + PER_BLOCK {
                let meta = PacketMeta {
                    send_time: MediaTime::from_nanos(g * SECOND / PER_BLOCK),
                    ts_packets: 7,
                    random_access: g == first,
                    discontinuity: false,
                };
                b.push(meta, &payload(g));
            }
            Arc::new(Block::parse(b.finish(), Some(key)).expect("a block the builder made"))
        })
        .collect();
    Arc::new(made)
}

/// Something that happens to the cluster at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Node `n` crashes for good.
    Crash(u16),
    /// Node `n` stands still for the duration (SIGSTOP, a stalled VM).
    Stall(u16, Duration),
    /// Node `n` cannot reach its peers, nor they it, for the duration; players still reach it.
    /// Control messages across it arrive when it heals (TCP).
    Partition(u16, Duration),
    /// etcd answers nobody for the duration.
    EtcdDown(Duration),
    /// Node `n` gets the CPU only once a quantum (the second field) for the duration (a machine
    /// too busy to run it): between, it stands still, its packets falling due unsent.
    Slow(u16, Duration, Duration),
}

/// The cluster's settings.
#[derive(Clone, Debug)]
pub(crate) struct Setup {
    /// Nodes `1..=nodes`; node `n` owns disk `n - 1`.
    pub(crate) nodes: u16,
    /// Blocks of the object (one second each).
    pub(crate) blocks: u64,
    /// Copies of every block: block `i` is on disks `i, i + 1, …` (mod the node count).
    pub(crate) copies: u8,
    /// One-way message delay between nodes: uniform in this range.
    pub(crate) delay: (Duration, Duration),
    /// The seed of delays and disk seeks.
    pub(crate) seed: u64,
}

impl Default for Setup {
    fn default() -> Self {
        Self {
            nodes: 3,
            blocks: 12,
            copies: 2,
            delay: (Duration::from_micros(100), Duration::from_millis(2)),
            seed: 1,
        }
    }
}

/// A node's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Up {
    Running,
    Crashed,
    StalledUntil(Instant),
}

/// One disk: IOs served one at a time, each a seek plus a transfer (Gennart's model).
struct Disk {
    queue: VecDeque<CycleIo>,
    busy: Option<(Instant, CycleIo)>,
}

/// One node: the node core, the scheduler and the pacer, as the server runs them.
pub(crate) struct Node {
    id: u16,
    core: NodeCore,
    sched: CycleScheduler<SharedBlock>,
    pacer: Pacer<Vec<u8>>,
    disks: BTreeMap<DiskId, Disk>,
    /// Where each stream's packets go.
    routes: BTreeMap<isochron_base::StreamId, SocketAddr>,
    up: Up,
    next_tick: Instant,
    /// Answers to requests, by ticket.
    pub(crate) answers: BTreeMap<u64, Response<Vec<u8>>>,
    /// The last time this node renewed its lease.
    renewed: Instant,
    /// Whether the others see its lease.
    live_in_etcd: bool,
    /// Connections it closed.
    closed: Vec<ConnId>,
    /// How often each stream's run ended (more than once: revived by a takeover).
    ends: BTreeMap<isochron_base::StreamId, u32>,
    /// Withholds its pacer was told (its part taken over while it was lost).
    withholds: u32,
    /// Slow until then, running once a quantum ([`Fault::Slow`]).
    slow: Option<(Instant, Duration)>,
}

/// What one player got.
#[derive(Debug, Default)]
pub(crate) struct Player {
    /// Its RTP address.
    pub(crate) addr: Option<SocketAddr>,
    /// The node its RTSP connection is to.
    pub(crate) origin: u16,
    /// The sequence offset from the PLAY's `RTP-Info`.
    pub(crate) seq_offset: Option<u16>,
    /// How often each GSN arrived.
    pub(crate) got: BTreeMap<u64, u32>,
    /// What was wrong with packets that arrived (bytes, numbering).
    pub(crate) wrong: Vec<String>,
    /// BYEs received.
    pub(crate) byes: u32,
    /// When the first BYE arrived.
    pub(crate) bye_at: Option<Instant>,
    /// The reasons of those that gave one (the session could not go on, RFC 3550 §6.6).
    pub(crate) bye_reasons: Vec<String>,
    /// Its origin closed its RTSP connection.
    pub(crate) closed: bool,
    /// When the last RTP packet arrived.
    pub(crate) last_packet: Option<Instant>,
    /// The PLAY's status.
    pub(crate) play_status: Option<StatusCode>,
}

impl Player {
    /// GSNs of `0..total` that never arrived.
    #[must_use]
    pub(crate) fn missing(&self, total: u64) -> Vec<u64> {
        (0..total).filter(|g| !self.got.contains_key(g)).collect()
    }

    /// Packets that arrived more than once (counting each extra copy).
    #[must_use]
    pub(crate) fn duplicates(&self) -> u64 {
        self.got.values().map(|n| u64::from(n.saturating_sub(1))).sum()
    }

    fn receive(&mut self, now: Instant, seq: u16, bytes: &[u8]) {
        self.last_packet = Some(now);
        let Some(gsn) = bytes.get(..8).map(|b| u64::from_le_bytes(b.try_into().unwrap())) else {
            self.wrong.push(format!("a packet of {} bytes", bytes.len()));
            return;
        };
        if bytes != payload(gsn).as_slice() {
            self.wrong.push(format!("packet {gsn}: its bytes differ from the object's"));
        }
        match self.seq_offset {
            Some(o) if o.wrapping_add(gsn as u16) != seq => {
                self.wrong.push(format!("packet {gsn} numbered {seq}, offset {o}"));
            }
            None => self.wrong.push(format!("packet {gsn} before the PLAY's answer")),
            _ => {}
        }
        *self.got.entry(gsn).or_default() += 1;
    }
}

/// The cluster and its players, in virtual time.
pub(crate) struct Sim {
    /// Now.
    pub(crate) now: Instant,
    setup: Setup,
    rng: SplitMix64,
    /// The nodes, by number.
    pub(crate) nodes: BTreeMap<u16, Node>,
    /// Messages in flight: (arrival, sequence) → (from, to, message).
    net: BinaryHeap<Reverse<(Instant, u64)>>,
    /// Messages on their way: from, to, and the message (`None`: the connection's end, read
    /// after every message sent on it before).
    in_flight: BTreeMap<u64, (u16, u16, Option<Message>)>,
    /// Each link's last arrival time: a link's messages keep their order.
    link_last: BTreeMap<(u16, u16), Instant>,
    seq: u64,
    /// Faults still to come, by time.
    faults: Vec<(Instant, Fault)>,
    /// Nodes cut off from their peers until a time.
    partitioned: BTreeMap<u16, Instant>,
    /// etcd is down until a time.
    etcd_down_until: Option<Instant>,
    etcd: Arc<AtomicBool>,
    /// The players, by RTP address.
    pub(crate) players: BTreeMap<SocketAddr, Player>,
    blocks: Arc<Vec<SharedBlock>>,
    model: DiskModel,
    lease_ttl: Duration,
    /// What happened, for a failing seed's message.
    pub(crate) log: Vec<String>,
    /// Log every output of every node core too (`HARNESS_TRACE` set).
    trace: bool,
}

impl Sim {
    /// A cluster of `setup.nodes` nodes, every member known to every other.
    #[must_use]
    pub(crate) fn new(setup: Setup) -> Self {
        let etcd = Arc::new(AtomicBool::new(true));
        let n = setup.nodes;
        let copies = setup.copies;
        let owners = (0..n).map(|d| (DiskId(d), format!("n{}", d + 1))).collect();
        let clip = Arc::new(
            Clip::new(setup.blocks, move |i| {
                let mut r = isochron_base::Replicas::single(DiskId((i % u64::from(n)) as u16));
                for k in 1..u64::from(copies) {
                    r.push(DiskId(((i + k) % u64::from(n)) as u16));
                }
                r
            })
            .in_cluster(owners, Arc::clone(&etcd)),
        );
        let model = DiskModel::new(Duration::from_millis(8), 100.0 * 1024.0 * 1024.0);
        let profile = model.read_profile().expect("a disk model's profile");
        let timing = ClusterConfig::new(NodeId(0), "", 0);
        let mut nodes = BTreeMap::new();
        for id in 1..=n {
            let disk = DiskId(id - 1);
            let config = NodeConfig {
                node: NodeId(id),
                name: format!("n{id}"),
                unix_base_ns: 1_800_000_000 * SECOND,
                cluster: Some((Arc::new([disk].into()), copies)),
                degrade: false,
                live: isochron_live::EdgeConfig::default(),
            };
            let rtsp = ServerCore::new(ServerConfig::default(), u64::from(id));
            let core = NodeCore::new(config, rtsp, clip.clone());
            let cycle = CycleConfig::default();
            let admission = AdmissionConfig { cycle: cycle.cycle, ..AdmissionConfig::default() };
            let sched = CycleScheduler::new(
                cycle,
                AdmissionController::new(admission, [(disk, profile.clone())]),
            );
            let pacer = Pacer::new(PacerConfig {
                hold_after: Some(timing.hold_after()),
                hold_window: timing.hold_window,
                ..PacerConfig::default()
            });
            let disks = [(disk, Disk { queue: VecDeque::new(), busy: None })].into();
            nodes.insert(
                id,
                Node {
                    id,
                    core,
                    sched,
                    pacer,
                    disks,
                    routes: BTreeMap::new(),
                    up: Up::Running,
                    next_tick: Instant::ZERO,
                    answers: BTreeMap::new(),
                    renewed: Instant::ZERO,
                    live_in_etcd: true,
                    closed: Vec::new(),
                    ends: BTreeMap::new(),
                    withholds: 0,
                    slow: None,
                },
            );
        }
        let mut sim = Self {
            now: Instant::ZERO,
            rng: SplitMix64::new(setup.seed),
            blocks: blocks(setup.blocks),
            setup,
            nodes,
            net: BinaryHeap::new(),
            in_flight: BTreeMap::new(),
            link_last: BTreeMap::new(),
            seq: 0,
            faults: Vec::new(),
            partitioned: BTreeMap::new(),
            etcd_down_until: None,
            etcd,
            players: BTreeMap::new(),
            model,
            lease_ttl: Duration::from_secs(5),
            log: Vec::new(),
            trace: std::env::var_os("HARNESS_TRACE").is_some(),
        };
        let ids: Vec<u16> = sim.nodes.keys().copied().collect();
        for id in &ids {
            for m in &ids {
                let relay = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, *m as u8)), 7000);
                let info = MemberInfo { id: NodeId(*m), name: format!("n{m}"), live: true };
                sim.nodes.get_mut(id).unwrap().core.handle_member(Instant::ZERO, info, Some(relay));
            }
        }
        sim.pump_all();
        sim
    }

    /// Schedules `fault` at `at` (from the start).
    pub(crate) fn inject(&mut self, at: Duration, fault: Fault) {
        self.faults.push((Instant::ZERO + at, fault));
        self.faults.sort_by_key(|(t, _)| *t);
    }

    /// The packets of the object.
    #[must_use]
    pub(crate) fn total_packets(&self) -> u64 {
        self.setup.blocks * PER_BLOCK
    }

    /// A player on node `origin` with RTP port `port`: DESCRIBE, SETUP over UDP, PLAY, as
    /// isochron's own client (so the session is bipartite: every node sends its own blocks).
    pub(crate) fn play(&mut self, origin: u16, port: u16) -> SocketAddr {
        let ip = Ipv4Addr::new(10, 0, 0, origin as u8);
        let c = ConnInfo { id: ConnId(u64::from(port)), ..conn(ip) };
        let addr = SocketAddr::new(c.peer.ip(), port);
        self.players.insert(addr, Player { addr: Some(addr), origin, ..Player::default() });
        let now = self.now;
        self.node(origin).core.handle_conn_opened(c.id);
        let setup = format!("RTP/AVP;unicast;client_port={port}-{}", port + 1);
        let steps: [(Method, &str, Option<&str>); 3] = [
            (Method::Describe, "rtsp://10.0.0.1:8554/clip", None),
            (Method::Setup, "rtsp://10.0.0.1:8554/clip/trackID=0", Some(&setup)),
            (Method::Play, "rtsp://10.0.0.1:8554/clip", None),
        ];
        let mut session = None;
        for (i, (method, uri, transport)) in steps.into_iter().enumerate() {
            let mut headers = vec![("User-Agent", "isochron/test")];
            headers.extend(transport.map(|t| ("Transport", t)));
            let req = request(method.clone(), uri, i as u32 + 1, session.as_deref(), &headers);
            let ticket = u64::from(port) * 10 + i as u64;
            self.node(origin).core.handle_request(now, &c, &req, Ticket(ticket));
            // Answers may wait on other nodes (a PLAY on every node's admission).
            let deadline = self.now + Duration::from_secs(5);
            while !self.node(origin).answers.contains_key(&ticket) && self.now < deadline {
                self.step();
            }
            let Some(resp) = self.node(origin).answers.get(&ticket).cloned() else {
                panic!("{method:?} not answered");
            };
            if method == Method::Setup {
                session = session_of(&resp);
            }
            if method == Method::Play {
                let p = self.players.get_mut(&addr).unwrap();
                p.play_status = Some(resp.status());
                p.seq_offset = rtp_info_seq(&resp);
            }
        }
        addr
    }

    /// Streams of node `id` whose run ended more than once (a takeover revived it).
    pub(crate) fn revived(&self, id: u16) -> usize {
        self.nodes[&id].ends.values().filter(|n| **n > 1).count()
    }

    /// Withholds node `id`'s pacer was told.
    pub(crate) fn withholds(&self, id: u16) -> u32 {
        self.nodes[&id].withholds
    }

    /// Whether node `id` crashed.
    pub(crate) fn crashed(&self, id: u16) -> bool {
        self.nodes.get(&id).is_some_and(|n| n.up == Up::Crashed)
    }

    fn node(&mut self, id: u16) -> &mut Node {
        self.nodes.get_mut(&id).expect("a node of the cluster")
    }

    /// Runs until `until` (from the start).
    pub(crate) fn run_until(&mut self, until: Duration) {
        let end = Instant::ZERO + until;
        while self.now < end {
            if !self.step_before(end) {
                self.now = end;
            }
        }
    }

    fn step(&mut self) {
        let far = self.now + Duration::from_secs(3600);
        self.step_before(far);
    }

    /// Advances to the next thing that happens before `end` and does it; `false` if nothing
    /// does.
    fn step_before(&mut self, end: Instant) -> bool {
        let Some(next) = self.next_event() else { return false };
        if next >= end {
            return false;
        }
        self.now = self.now.max(next);
        let now = self.now;
        self.apply_faults(now);
        self.etcd_tick(now);
        self.deliver(now);
        let ids: Vec<u16> = self.nodes.keys().copied().collect();
        for id in ids {
            if self.nodes[&id].up == Up::Running {
                self.run_node(id, now);
                let n = self.node(id);
                if let Some((until, quantum)) = n.slow {
                    if now < until {
                        n.up = Up::StalledUntil(now + quantum);
                    } else {
                        n.slow = None;
                    }
                }
            }
        }
        true
    }

    /// When something happens next.
    fn next_event(&self) -> Option<Instant> {
        let mut t: Vec<Instant> = Vec::new();
        t.extend(self.faults.first().map(|(t, _)| *t));
        t.extend(self.net.peek().map(|Reverse((t, _))| *t));
        t.extend(self.partitioned.values().copied());
        t.extend(self.etcd_down_until);
        for n in self.nodes.values() {
            match n.up {
                Up::Crashed => continue,
                Up::StalledUntil(u) => {
                    t.push(u);
                    continue;
                }
                Up::Running => {}
            }
            t.push(n.next_tick);
            t.extend(n.pacer.poll_timeout());
            t.extend(n.sched.poll_timeout());
            t.extend(n.disks.values().filter_map(|d| d.busy.as_ref().map(|(t, _)| *t)));
            if self.etcd_down_until.is_none() {
                t.push(n.renewed + Duration::from_secs(1));
            }
        }
        // Leases run out at their time.
        if self.etcd_down_until.is_none() {
            for n in self.nodes.values().filter(|n| n.live_in_etcd) {
                t.push(n.renewed + self.lease_ttl);
            }
        }
        t.into_iter().min().map(|x| x.max(self.now))
    }

    fn apply_faults(&mut self, now: Instant) {
        while self.faults.first().is_some_and(|(t, _)| *t <= now) {
            let (_, f) = self.faults.remove(0);
            self.log.push(format!("{:.3}: {f:?}", secs(now)));
            match f {
                Fault::Crash(n) => {
                    self.node(n).up = Up::Crashed;
                    // Its kernel closes its control connections: the others read the end
                    // after what it sent before (a stalled one on resuming).
                    let others: Vec<u16> = self.nodes.keys().copied().filter(|m| *m != n).collect();
                    for to in others {
                        let at = self.link_last.get(&(n, to)).map_or(now, |t| (*t).max(now));
                        self.seq += 1;
                        self.in_flight.insert(self.seq, (n, to, None));
                        self.net.push(Reverse((at, self.seq)));
                    }
                }
                Fault::Stall(n, d) => self.node(n).up = Up::StalledUntil(now + d),
                Fault::Partition(n, d) => {
                    self.partitioned.insert(n, now + d);
                }
                Fault::EtcdDown(d) => {
                    self.etcd_down_until = Some(now + d);
                    self.etcd.store(false, Ordering::Relaxed);
                }
                Fault::Slow(n, d, quantum) => self.node(n).slow = Some((now + d, quantum)),
            }
        }
        for n in self.nodes.values_mut() {
            if let Up::StalledUntil(u) = n.up
                && u <= now
            {
                n.up = Up::Running;
            }
        }
        self.partitioned.retain(|_, u| *u > now);
        if self.etcd_down_until.is_some_and(|u| u <= now) {
            self.etcd_down_until = None;
            self.etcd.store(true, Ordering::Relaxed);
            // etcd's leader renews every lease when it comes back (etcd 3.4 `lease` semantics).
            for n in self.nodes.values_mut() {
                n.renewed = now;
            }
        }
    }

    /// Leases: a running node renews its own every second while etcd answers; a lease not
    /// renewed for the TTL lapses and every node hears the member is down; one renewed again
    /// is live again.
    fn etcd_tick(&mut self, now: Instant) {
        if self.etcd_down_until.is_some() {
            return;
        }
        let mut changes = Vec::new();
        for n in self.nodes.values_mut() {
            if n.up == Up::Running && now >= n.renewed + Duration::from_secs(1) {
                n.renewed = now;
                if !n.live_in_etcd {
                    n.live_in_etcd = true;
                    changes.push((n.id, true));
                }
            }
            if n.live_in_etcd && now >= n.renewed + self.lease_ttl {
                n.live_in_etcd = false;
                changes.push((n.id, false));
            }
        }
        for (id, live) in changes {
            self.log.push(format!("{:.3}: etcd says n{id} live={live}", secs(now)));
            let relay = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, id as u8)), 7000);
            for n in self.nodes.values_mut() {
                if n.up != Up::Crashed {
                    let info = MemberInfo { id: NodeId(id), name: format!("n{id}"), live };
                    n.core.handle_member(now, info, live.then_some(relay));
                }
            }
        }
    }

    /// Delivers the messages due; those to a stalled node wait for it.
    fn deliver(&mut self, now: Instant) {
        while let Some(&Reverse((t, seq))) = self.net.peek() {
            if t > now {
                break;
            }
            self.net.pop();
            let Some((from, to, msg)) = self.in_flight.remove(&seq) else { continue };
            match self.nodes[&to].up {
                Up::Crashed => {}
                Up::StalledUntil(u) => {
                    self.in_flight.insert(seq, (from, to, msg));
                    self.net.push(Reverse((u, seq)));
                }
                Up::Running => {
                    let node = self.node(to);
                    let sent = node.pacer.sent_through(now).unwrap_or(now);
                    node.core.handle_sent_through(sent);
                    match msg {
                        Some(msg) => node.core.handle_message(now, NodeId(from), msg),
                        None => node.core.handle_peer_closed(now, NodeId(from)),
                    }
                }
            }
        }
    }

    /// Sends `msg` over the control connection from `from` to `to` (TCP): after the link's
    /// delay, in order; across a partition when it heals (TCP retransmits; no connection
    /// breaks in a partition this short).
    fn send(&mut self, from: u16, to: u16, msg: Message) {
        if self.nodes.get(&to).is_none_or(|n| n.up == Up::Crashed) {
            return;
        }
        let heals = [from, to].iter().filter_map(|n| self.partitioned.get(n)).max().copied();
        let (lo, hi) = self.setup.delay;
        let span = (hi - lo).as_nanos() as u64;
        let d = lo + Duration::from_nanos(if span == 0 { 0 } else { self.rng.next_u64() % span });
        self.seq += 1;
        // Messages between two nodes keep their order (one TCP connection).
        let at = heals.map_or(self.now, |h| h.max(self.now)) + d;
        let last = self.link_last.entry((from, to)).or_insert(at);
        let at = at.max(*last);
        *last = at;
        self.in_flight.insert(self.seq, (from, to, Some(msg)));
        self.net.push(Reverse((at, self.seq)));
    }

    fn pump_all(&mut self) {
        let now = self.now;
        let ids: Vec<u16> = self.nodes.keys().copied().collect();
        for id in ids {
            if self.nodes[&id].up == Up::Running {
                self.run_node(id, now);
            }
        }
    }

    /// Runs node `id` at `now`: its disks, timers, scheduler and pacer, until nothing is left
    /// to do.
    fn run_node(&mut self, id: u16, now: Instant) {
        let mut outbox = Vec::new();
        let mut to_players = Vec::new();
        {
            let seed = self.rng.next_u64();
            let model = self.model;
            let blocks = Arc::clone(&self.blocks);
            let n = self.nodes.get_mut(&id).unwrap();
            let sent = n.pacer.sent_through(now).unwrap_or(now);
            n.core.handle_sent_through(sent);
            if n.next_tick <= now {
                n.core.handle_timeout(now);
                n.next_tick = now + n.core.tick();
            }
            let mut trace = self.trace.then(Vec::new);
            let mut cx = Drive {
                seed,
                model,
                blocks: &blocks,
                outbox: &mut outbox,
                players: &mut to_players,
                trace: trace.as_mut(),
            };
            n.drive(now, &mut cx);
            for t in trace.into_iter().flatten() {
                self.log.push(format!("{:.3} n{id}: {t}", secs(now)));
            }
        }
        for (to, msg) in outbox {
            self.send(id, to, msg);
        }
        // A player's connection is its RTP port's (`play`).
        for conn in std::mem::take(&mut self.node(id).closed) {
            let closed = self
                .players
                .values_mut()
                .find(|p| p.origin == id && p.addr.is_some_and(|a| u64::from(a.port()) == conn.0));
            if let Some(p) = closed {
                p.closed = true;
            }
        }
        for (addr, t) in to_players {
            let Some(p) = self.players.get_mut(&addr) else { continue };
            match t {
                Delivered::Rtp { seq, payload } => p.receive(now, seq, &payload),
                Delivered::Bye(reason) => {
                    p.byes += 1;
                    p.bye_at.get_or_insert(now);
                    p.bye_reasons.extend(reason);
                }
            }
        }
    }
}

/// What a node's run needs from the simulation, and where its effects go.
struct Drive<'a> {
    /// The seed of this run's disk seeks.
    seed: u64,
    model: DiskModel,
    blocks: &'a [SharedBlock],
    /// Messages for peers.
    outbox: &'a mut Vec<(u16, Message)>,
    /// What reached players.
    players: &'a mut Vec<(SocketAddr, Delivered)>,
    /// The node core's outputs and the pacer's events, when tracing.
    trace: Option<&'a mut Vec<String>>,
}

/// What reached a player.
enum Delivered {
    Rtp { seq: u16, payload: Vec<u8> },
    Bye(Option<String>),
}

impl Node {
    /// Carries out everything due at `now`, as the server's owners would, until quiet.
    fn drive(&mut self, now: Instant, cx: &mut Drive<'_>) {
        let Drive { seed, model, blocks, outbox, players, trace } = cx;
        let (model, blocks) = (*model, *blocks);
        let mut rng = SplitMix64::new(*seed);
        loop {
            let mut any = false;
            // Disks: a finished read goes to the scheduler, the next IO starts.
            for (disk, d) in &mut self.disks {
                if let Some((t, io)) = d.busy.take_if(|(t, _)| *t <= now) {
                    let _ = t;
                    any = true;
                    if let IoClass::Read { key } = io.class {
                        let block = Arc::clone(&blocks[key.index.0 as usize]);
                        self.sched.handle_read_done(
                            now,
                            ReadDone { disk: *disk, key, result: Ok(block) },
                        );
                    }
                }
                if d.busy.is_none()
                    && let Some(io) = d.queue.pop_front()
                {
                    any = true;
                    let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                    let t = DiskModel::io_time(model.sample_seek(u), io.len, model.read_rate);
                    d.busy = Some((now + t, io));
                }
            }
            if self.sched.poll_timeout().is_some_and(|t| t <= now) {
                self.sched.handle_timeout(now);
            }
            while let Some(out) = self.core.poll_output() {
                any = true;
                if let Some(t) = trace.as_deref_mut() {
                    t.push(format!("{out:?}"));
                }
                self.output(now, out, outbox);
            }
            while let Some(io) = self.sched.poll_io() {
                any = true;
                if let Some(d) = self.disks.get_mut(&io.disk) {
                    d.queue.push_back(io);
                }
            }
            while let Some(ev) = self.sched.poll_event() {
                any = true;
                match ev {
                    CycleEvent::Deliver { stream, index, block, anchor, run } => {
                        self.pacer.handle_block(stream, run, index, block, anchor);
                    }
                    CycleEvent::ReadFailed { stream, error, .. } => {
                        self.core.handle_read_failed(now, stream, error);
                    }
                    CycleEvent::GivenBack { stream, run, blocks } => {
                        self.pacer.handle_give_back(stream, run, &blocks);
                    }
                    _ => {}
                }
            }
            while let Some(t) = self.pacer.poll_transmit(now, |_| true) {
                any = true;
                match t {
                    Transmit::Rtp { stream, block, packet, seq, .. } => {
                        if let Some(addr) = self.routes.get(&stream) {
                            let payload = block.packet(packet).payload.to_vec();
                            players.push((*addr, Delivered::Rtp { seq, payload }));
                        }
                    }
                    Transmit::Rtcp { stream, bye: true, reason, .. } => {
                        if let Some(addr) = self.routes.get(&stream) {
                            let reason = reason.map(|r| r.to_string());
                            players.push((*addr, Delivered::Bye(reason)));
                        }
                    }
                    Transmit::Rtcp { .. } => {}
                }
            }
            while let Some(ev) = self.pacer.poll_event() {
                any = true;
                if let Some(t) = trace.as_deref_mut() {
                    t.push(format!("{ev:?}"));
                }
                match ev {
                    PacerEvent::BlockDone { stream, run, index } => {
                        self.sched.handle_block_done(now, stream, run, index);
                    }
                    PacerEvent::Paced { stream, run, anchor, pace } => {
                        self.sched.handle_pace(now, stream, run, anchor, pace);
                    }
                    PacerEvent::Ended { stream, run, report } => {
                        *self.ends.entry(stream).or_default() += 1;
                        self.sched.handle_stop(now, stream);
                        self.core.handle_share_ended(now, stream, run, report);
                    }
                    PacerEvent::Stopped { stream, run, report } => {
                        self.sched.handle_stop(now, stream);
                        self.core.handle_share_stopped(now, stream, run, report);
                    }
                }
            }
            if !any {
                break;
            }
        }
    }

    /// One output of the node core, carried out as the session manager does.
    fn output(&mut self, now: Instant, out: NodeOutput, outbox: &mut Vec<(u16, Message)>) {
        match out {
            NodeOutput::Respond { ticket, response } => {
                self.answers.insert(ticket.0, response);
            }
            NodeOutput::Admit { key, open, req, .. } => {
                let d = self.sched.handle_open(now, req);
                self.core.handle_admitted(now, key, open, Some(d));
            }
            NodeOutput::Read(op) => read_op(&mut self.sched, now, op),
            NodeOutput::AddStream { setup, transports, .. } => {
                if let Some(Some(Transport::Udp { rtp, .. })) = transports.first() {
                    self.routes.insert(setup.stream, *rtp);
                }
                self.pacer.handle_add(setup);
            }
            NodeOutput::Send(op) => {
                if matches!(op, StreamOp::Withhold { .. }) {
                    self.withholds += 1;
                }
                self.pacer.handle_op(now, op);
            }
            NodeOutput::Transmit { to, msg } => outbox.push((to.0, *msg)),
            NodeOutput::CloseConn { conn, .. } => self.closed.push(conn),
            // No live feed in these scenarios.
            NodeOutput::Deliver { .. } | NodeOutput::Evict { .. } | NodeOutput::Grow { .. } => {}
        }
    }
}

/// A read op applied to the scheduler, as the scheduler thread does (`sched_thread.rs`).
fn read_op(s: &mut CycleScheduler<SharedBlock>, now: Instant, op: isochron_sched::ReadOp) {
    use isochron_sched::ReadOp;
    match op {
        ReadOp::Start { stream, run, from, media, pinned: None } => {
            s.handle_start(now, stream, run, from, media);
        }
        ReadOp::Start { stream, run, from, pinned: Some((anchor, pace)), .. } => {
            s.handle_start_pinned(now, stream, run, from, anchor, pace);
        }
        ReadOp::TakeOver { stream, run, blocks } => s.handle_take_over(now, stream, run, &blocks),
        ReadOp::GiveBack { stream, run, blocks } => s.handle_give_back(now, stream, run, &blocks),
        ReadOp::Close { stream } => s.handle_close(now, stream),
    }
}

/// The `seq` of a PLAY response's `RTP-Info` (RFC 2326 §12.33).
fn rtp_info_seq(r: &Response<Vec<u8>>) -> Option<u16> {
    let v = r.header(&HeaderName::try_from("RTP-Info").unwrap())?;
    v.as_str().split(';').find_map(|p| p.trim().strip_prefix("seq=")?.parse().ok())
}

fn secs(t: Instant) -> f64 {
    t.as_nanos() as f64 / 1e9
}
