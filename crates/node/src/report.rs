//! What the node core reports of its sessions and of the cluster (the HTTP API's
//! `GET /api/v1/sessions` and `GET /api/v1/cluster`).

use serde::Serialize;

/// A session as the HTTP API shows it.
#[derive(Clone, Debug, Serialize)]
pub struct SessionInfo {
    /// The RTSP session id.
    pub id: String,
    /// The stream id.
    pub stream: u64,
    /// The object's name.
    pub object: String,
    /// `ready`, `playing` or `paused`.
    pub state: String,
    /// `udp` or `tcp`.
    pub transport: String,
    /// `bipartite` or `relay` (a single node: `bipartite`, it sends everything itself).
    pub delivery: String,
    /// The client: where UDP media goes (`ip:rtp_port`), or the RTSP connection's peer for
    /// interleaved (TCP) media.
    pub client: String,
    /// The object's mean bit rate, bit/s.
    pub bitrate_bps: u64,
    /// Blocks of this stream not in memory by their deadline (the scheduler's per-stream count);
    /// filled in by the HTTP API.
    pub missed_deadlines: u64,
    /// Blocks the scheduler has delivered to the sender for this stream.
    pub blocks_delivered: u64,
    /// Media time of the last packet sent, seconds into the object (the sender's; filled in by
    /// the HTTP API).
    pub position_s: f64,
    /// The pace (1.0 = the object's own timing), from the sender.
    pub pace: f64,
    /// RTP packets sent to this session (the sender's count).
    pub packets_sent: u64,
    /// RTP payload bytes sent to this session.
    pub bytes_sent: u64,
}

/// The cluster as one node sees it.
#[derive(Clone, Debug, Serialize)]
pub struct ClusterInfo {
    /// Sessions this node is the origin of.
    pub sessions: usize,
    /// Shares this node runs (its own sessions' included).
    pub shares: usize,
    /// Every member: name, health, clock offset.
    pub members: Vec<MemberSummary>,
    /// Times this node found it had stood still (`cluster::ClusterConfig::stall`).
    pub stalls: u64,
}

/// One member, as the cluster core sees it.
#[derive(Clone, Debug, Serialize)]
pub struct MemberSummary {
    /// Its id.
    pub id: u32,
    /// Its name.
    pub name: String,
    /// `up`, `suspect` or `down`.
    pub health: String,
    /// Its clock minus ours, ns.
    pub clock_offset_ns: i64,
    /// Heartbeat round trip, µs.
    pub round_trip_us: Option<u64>,
}
