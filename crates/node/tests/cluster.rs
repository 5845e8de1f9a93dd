//! Three node cores in virtual time, joined by an in-memory network: a bipartite session's
//! shares, and what the survivors take over when a node crashes (Yima §2.2; the takeover rules
//! of `docs/design/takeover.md`), decided by the same `NodeCore` the server runs, with the
//! scheduler admitting every share and the senders keeping up.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use isochron_base::{DiskId, Gsn, Instant, MediaTime, NodeId, Replicas};
use isochron_cluster::{MemberInfo, Message};
use isochron_node::{NodeConfig, NodeCore, NodeOutput, Ticket};
use isochron_pacing::pacer::StreamOp;
use isochron_rtsp::rtsp_types::{Method, StatusCode};
use isochron_rtsp::server::{ConnId, ServerConfig, ServerCore};
use isochron_sched::Decision;

mod common;

use common::{Clip, SECOND, conn, request, session_of};

const BLOCKS: u64 = 12;

/// The object every node plays: node `n` (1..=3) owns disk `n - 1`, and one etcd answers
/// every node or none.
fn clip(etcd: Arc<AtomicBool>) -> Clip {
    let owners = (0..3u16).map(|d| (DiskId(d), format!("n{}", d + 1))).collect();
    Clip::new(BLOCKS, copies).in_cluster(owners, etcd)
}

/// Node `n` (1..=3) owns disk `n - 1`; block `i`'s copies are on disks `i mod 3` and
/// `i + 1 mod 3`.
fn copies(i: u64) -> Replicas {
    let mut r = Replicas::single(DiskId((i % 3) as u16));
    r.push(DiskId(((i + 1) % 3) as u16));
    r
}

/// What one node was asked to send.
#[derive(Default)]
struct Sent {
    /// The blocks of its share (`StreamOp::Add`).
    share: BTreeSet<u32>,
    /// Blocks taken over (`StreamOp::Extend`), with where from.
    taken: Vec<(u32, MediaTime)>,
    plays: Vec<(Gsn, u16)>,
    answers: Vec<StatusCode>,
}

struct Cluster {
    now: Instant,
    nodes: BTreeMap<u16, NodeCore>,
    crashed: BTreeSet<u16>,
    net: VecDeque<(u16, u16, Message)>,
    sent: BTreeMap<u16, Sent>,
    /// Whether etcd answers.
    etcd: Arc<AtomicBool>,
}

impl Cluster {
    fn new() -> Self {
        let mut nodes = BTreeMap::new();
        let etcd = Arc::new(AtomicBool::new(true));
        for n in 1..=3u16 {
            let disks: BTreeSet<DiskId> = [DiskId(n - 1)].into();
            let config = NodeConfig {
                node: NodeId(n),
                name: format!("n{n}"),
                unix_base_ns: 1_800_000_000 * SECOND,
                cluster: Some((Arc::new(disks), 2)),
                degrade: false,
                live: isochron_live::EdgeConfig::default(),
            };
            let rtsp = ServerCore::new(ServerConfig::default(), u64::from(n));
            let mut core = NodeCore::new(config, rtsp, Arc::new(clip(Arc::clone(&etcd))));
            for m in 1..=3u16 {
                let relay = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, m as u8)), 7000);
                let info = MemberInfo { id: NodeId(m), name: format!("n{m}"), live: true };
                core.handle_member(Instant::ZERO, info, Some(relay));
            }
            nodes.insert(n, core);
        }
        let sent = (1..=3).map(|n| (n, Sent::default())).collect();
        let mut c = Self {
            now: Instant::ZERO,
            nodes,
            crashed: BTreeSet::new(),
            net: VecDeque::new(),
            sent,
            etcd,
        };
        c.settle();
        c
    }

    /// Carries out every output until none is left: messages delivered at once (none to or
    /// from a crashed node), every share admitted, what the senders are asked recorded.
    fn settle(&mut self) {
        loop {
            let mut any = false;
            let ids: Vec<u16> = self.nodes.keys().copied().collect();
            for id in ids {
                let now = self.now;
                let core = self.nodes.get_mut(&id).unwrap();
                let mut admitted = Vec::new();
                while let Some(out) = core.poll_output() {
                    any = true;
                    let sent = self.sent.get_mut(&id).unwrap();
                    match out {
                        NodeOutput::Transmit { to, msg } if !self.crashed.contains(&id) => {
                            self.net.push_back((id, to.0, *msg));
                        }
                        NodeOutput::Admit { key, open, .. } => admitted.push((key, open)),
                        NodeOutput::AddStream { setup, .. } => {
                            let share = setup.share.expect("a bipartite share");
                            sent.share.extend(share.iter().map(|b| b.index.0));
                        }
                        NodeOutput::Send(StreamOp::Extend { blocks, from, .. }) => {
                            sent.taken.extend(blocks.iter().map(|b| (b.index.0, from)));
                        }
                        NodeOutput::Send(StreamOp::Play { play, .. }) => {
                            sent.plays.push((play.start.gsn, play.seq_offsets[0]));
                        }
                        NodeOutput::Respond { response, .. } => {
                            sent.answers.push(response.status())
                        }
                        _ => {}
                    }
                }
                for (key, open) in admitted {
                    core.handle_admitted(now, key, open, Some(Decision::Admit));
                }
            }
            while let Some((from, to, msg)) = self.net.pop_front() {
                any = true;
                if self.crashed.contains(&to) {
                    continue;
                }
                let now = self.now;
                self.nodes.get_mut(&to).unwrap().handle_message(now, NodeId(from), msg);
            }
            if !any {
                break;
            }
        }
    }

    /// Runs the timers of the live nodes for `d`, a heartbeat at a time, their senders keeping
    /// up.
    fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        while self.now < end {
            self.now = self.now + Duration::from_millis(50);
            let now = self.now;
            for (id, core) in &mut self.nodes {
                if !self.crashed.contains(id) {
                    core.handle_sent_through(now);
                    core.handle_timeout(now);
                }
            }
            self.settle();
        }
    }

    /// A player on node `origin` (connection 1): DESCRIBE, SETUP over UDP, PLAY; isochron's
    /// own client, so the session is bipartite.
    fn play(&mut self, origin: u16) {
        let conn = conn(Ipv4Addr::new(10, 0, 0, origin as u8));
        let core = self.nodes.get_mut(&origin).unwrap();
        core.handle_conn_opened(ConnId(1));
        let mut session = None;
        let setup = "RTP/AVP;unicast;client_port=5000-5001";
        let steps: [(Method, &str, Option<&str>); 3] = [
            (Method::Describe, "rtsp://10.0.0.1:8554/clip", None),
            (Method::Setup, "rtsp://10.0.0.1:8554/clip/trackID=0", Some(setup)),
            (Method::Play, "rtsp://10.0.0.1:8554/clip", None),
        ];
        for (i, (method, uri, transport)) in steps.into_iter().enumerate() {
            let is_setup = method == Method::Setup;
            let mut headers = vec![("User-Agent", "isochron/test")];
            headers.extend(transport.map(|t| ("Transport", t)));
            let req = request(method, uri, i as u32 + 1, session.as_deref(), &headers);
            let core = self.nodes.get_mut(&origin).unwrap();
            core.handle_request(self.now, &conn, &req, Ticket(i as u64));
            if is_setup {
                let out: Vec<NodeOutput> = std::iter::from_fn(|| core.poll_output()).collect();
                let s = out.iter().find_map(|o| match o {
                    NodeOutput::Respond { response, .. } => session_of(response),
                    _ => None,
                });
                session = Some(s.expect("SETUP answered with a session"));
            }
            self.settle();
        }
    }
}

#[test]
fn every_block_has_one_sender_and_a_crashed_node_s_blocks_go_to_their_next_copy() {
    let mut c = Cluster::new();
    c.play(1);
    assert_eq!(c.sent[&1].answers.last(), Some(&StatusCode::Ok), "the PLAY is answered 200");
    // Each node sends the blocks whose first copy is on its disk, on one numbering.
    for n in 1..=3u16 {
        let own: BTreeSet<u32> = (0..BLOCKS as u32).filter(|i| i % 3 == u32::from(n - 1)).collect();
        assert_eq!(c.sent[&n].share, own, "node {n}'s share");
        assert_eq!(c.sent[&n].plays.len(), 1, "node {n} started one run");
    }
    let plays: BTreeSet<(Gsn, u16)> = c.sent.values().flat_map(|s| s.plays.clone()).collect();
    assert_eq!(plays.len(), 1, "every node starts at the same packet with the same offset");

    // Four seconds in, node 3 crashes: within the suspicion time (1 s) the survivors take its
    // blocks over from where its last heartbeat said its sender had got (less the progress
    // margin, 30 ms), each block by its next copy: block i on disk 2 (i mod 3 = 2) has its
    // second copy on disk 0, node 1's. The session's clock was pinned 250 ms after the PLAY,
    // so the crash is at media time 3.75 s.
    c.run_for(Duration::from_secs(4));
    let crashed_at = MediaTime::from_nanos(4 * SECOND - 250_000_000);
    c.crashed.insert(3);
    c.run_for(Duration::from_secs(2));
    let taken: BTreeSet<u32> = c.sent[&1].taken.iter().map(|(b, _)| *b).collect();
    assert_eq!(taken, [5, 8, 11].into(), "node 1 takes node 3's blocks from the one playing on");
    assert!(c.sent[&2].taken.is_empty(), "node 2 holds no second copy of node 3's blocks");
    for (_, from) in &c.sent[&1].taken {
        // A heartbeat (50 ms) and the margin (30 ms) before the crash at most; never after it.
        let lag = crashed_at.saturating_duration_since(*from);
        assert!(
            lag <= Duration::from_millis(80),
            "taken over from {from:?}, crash at {crashed_at:?}"
        );
        assert!(*from <= crashed_at, "nothing the crashed node had not sent is skipped");
    }
}

#[test]
fn with_etcd_gone_a_new_session_is_refused_and_a_playing_one_goes_on() {
    let mut c = Cluster::new();
    c.play(1);
    c.run_for(Duration::from_secs(1));
    c.etcd.store(false, Ordering::Relaxed);
    c.run_for(Duration::from_secs(3));
    for n in 1..=3u16 {
        assert!(c.sent[&n].taken.is_empty(), "node {n} took nothing over: nobody was lost");
    }
    // A second player on node 2: its PLAY is refused with 503 (no share reserved anywhere).
    c.play(2);
    assert_eq!(c.sent[&2].answers.last(), Some(&StatusCode::ServiceUnavailable));
    assert_eq!(c.sent[&2].plays.len(), 1, "node 2 runs only its share of the first session");
    c.etcd.store(true, Ordering::Relaxed);
    c.play(2);
    assert_eq!(c.sent[&2].answers.last(), Some(&StatusCode::Ok), "taken once etcd answers");
}
