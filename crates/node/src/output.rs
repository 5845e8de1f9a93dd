//! What the node core hands back: answers to requests, work for the scheduler and the sender,
//! messages for peers. Its owner carries each out (quinn's `poll_transmit` shape): the core
//! names what to do, the owner holds the channels, sockets and connections to do it with.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use isochron_base::{BlockIndex, MediaTime, NodeId, Pace, RunId, StreamId};
use isochron_cluster::{Message, ShareKey};
use isochron_pacing::pacer::{PlayRun, ShareBlock, StreamSetup};
use isochron_pacing::rtx::RtxSetup;
use isochron_rtsp::rtsp_types::Response;
use isochron_rtsp::server::ConnId;
use isochron_sched::{Anchor, OpenStream};

/// Names a request the core has not answered yet; the owner keeps the reply channel under it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ticket(pub u64);

/// One thing for the node core's owner to do.
#[derive(Debug)]
pub enum NodeOutput {
    /// Answer the request given `ticket`.
    Respond {
        /// The request.
        ticket: Ticket,
        /// The answer.
        response: Response<Vec<u8>>,
    },
    /// Work for the disk scheduler.
    Read(ReadOp),
    /// Work for the sender.
    Send(SendOp),
    /// A message for a peer.
    Transmit {
        /// The peer.
        to: NodeId,
        /// The message (boxed: a run's start is a few hundred bytes).
        msg: Box<Message>,
    },
    /// Close an RTSP connection `after` this long (the BYE queued before it goes first).
    CloseConn {
        /// The connection.
        conn: ConnId,
        /// The delay.
        after: Duration,
    },
}

/// Work for the disk scheduler (XTREAM's cycle scheduler, on its thread).
#[derive(Debug)]
pub enum ReadOp {
    /// Admit a share's stream; the decision comes back as [`crate::NodeCore::handle_admitted`]
    /// for `key`.
    Open {
        /// The share.
        key: ShareKey,
        /// The request.
        req: OpenStream,
        /// The object's name, for the admission log.
        name: String,
    },
    /// Start run `run` of a stream at block `from`, media time `media`.
    Start {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: RunId,
        /// First block.
        from: BlockIndex,
        /// Media time of the first packet.
        media: MediaTime,
        /// The clock and pace the session's origin pinned (a cluster), else `None`: the
        /// scheduler anchors the stream when its first block is in memory.
        pinned: Option<(Anchor, Pace)>,
    },
    /// A share's run takes over blocks of a lost node.
    TakeOver {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: RunId,
        /// The blocks.
        blocks: Vec<BlockIndex>,
    },
    /// A share's run gives back blocks it took over.
    GiveBack {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: RunId,
        /// The blocks.
        blocks: Vec<BlockIndex>,
    },
    /// Close a stream: its reservation is given back.
    Close {
        /// The stream.
        stream: StreamId,
    },
}

/// Where one track of a stream goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// UDP to the client (or, for a relayed session's feeder, to the origin's relay port).
    Udp {
        /// RTP address.
        rtp: SocketAddr,
        /// RTCP address.
        rtcp: SocketAddr,
    },
    /// Interleaved on an RTSP connection (RFC 2326 §10.12).
    Interleaved {
        /// The connection.
        conn: ConnId,
        /// RTP channel.
        rtp_channel: u8,
        /// RTCP channel.
        rtcp_channel: u8,
    },
}

/// Work for the sender (the pacer, `isochron_pacing::pacer`, on its thread).
#[derive(Debug)]
pub enum SendOp {
    /// A new stream.
    Add {
        /// Pacing parameters.
        setup: StreamSetup,
        /// Each track's transport, by track index (`None`: the client did not set it up).
        transports: Vec<Option<Transport>>,
        /// The RFC 4588 RTX stream its player negotiated.
        rtx: Option<RtxSetup>,
        /// This node is the origin of a relayed session: the other nodes' relay addresses,
        /// where requests for the holes go.
        relay: Option<Vec<SocketAddr>>,
    },
    /// Start a run.
    Play {
        /// The stream.
        stream: StreamId,
        /// The run.
        play: PlayRun,
    },
    /// Stop run `run` now or after its last packet at or before `cutoff`.
    Stop {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: RunId,
        /// The cutoff (a cluster's synchronised pause).
        cutoff: Option<MediaTime>,
    },
    /// Re-pin run `run`'s clock (a cluster's pace change).
    Reanchor {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: RunId,
        /// The new anchor.
        anchor: Anchor,
        /// The new pace.
        pace: Pace,
    },
    /// Pace a stream at a new speed (MTFC).
    Pace {
        /// The stream.
        stream: StreamId,
        /// The pace.
        pace: Pace,
    },
    /// A running share gains blocks taken over from a lost node.
    Extend {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: RunId,
        /// The blocks gained.
        blocks: Vec<ShareBlock>,
        /// How far the lost node had got.
        from: MediaTime,
    },
    /// This node's part of a share was taken over from `from` while it was lost.
    Withhold {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: RunId,
        /// Where its part was taken over from.
        from: MediaTime,
        /// The blocks taken over (`None`: every block of the share).
        blocks: Option<Vec<BlockIndex>>,
        /// The give-back point, when known already.
        until: Option<MediaTime>,
    },
    /// The share's part is its own again after the block holding `at`.
    Release {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: RunId,
        /// The give-back point.
        at: MediaTime,
    },
    /// Freeze or thaw a relayed session's feeder.
    Freeze {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: RunId,
        /// Frozen (`true`) or thawed.
        frozen: bool,
    },
    /// A running share passes over every packet of blocks it gives back.
    PassOver {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: RunId,
        /// The blocks.
        blocks: Vec<BlockIndex>,
    },
    /// Send the session's BYE.
    Bye {
        /// The stream.
        stream: StreamId,
        /// Why it ends, when it could not go on.
        reason: Option<Arc<str>>,
    },
    /// Forget a stream.
    Remove {
        /// The stream.
        stream: StreamId,
    },
}
