//! What the node core hands back: answers to requests, work for the scheduler and the sender,
//! messages for peers. Work on a running stream is said in the words of the core that does it
//! ([`ReadOp`] for the cycle scheduler, [`StreamOp`] for the pacer), so the owner passes it on
//! unchanged. Its owner carries each out (quinn's `poll_transmit` shape): the core
//! names what to do, the owner holds the channels, sockets and connections to do it with.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use isochron_base::{BlockIndex, NodeId, ObjectId, RunId, StreamId};
use isochron_cluster::{Message, ShareKey};
use isochron_pacing::pacer::{StreamOp, StreamSetup};
use isochron_pacing::rtx::RtxSetup;
use isochron_rtsp::rtsp_types::Response;
use isochron_rtsp::server::ConnId;
use isochron_sched::{ObjectPlan, OpenStream, ReadOp};

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
    /// Admit a share's stream at the disk scheduler (XTREAM admission); the decision comes
    /// back as [`crate::NodeCore::handle_admitted`] for `key`.
    Admit {
        /// The share.
        key: ShareKey,
        /// Which of the session's opens it is: hand it back with the decision
        /// ([`crate::NodeCore::handle_admitted`]).
        open: u32,
        /// The request.
        req: OpenStream,
        /// The object's name, for the admission log.
        name: String,
    },
    /// Work for the disk scheduler on an admitted stream's reads.
    Read(ReadOp),
    /// A new stream at the sender: its pacing, each track's way to the client.
    AddStream {
        /// Pacing parameters.
        setup: StreamSetup,
        /// Each track's transport, by track index (`None`: the client did not set it up).
        transports: Vec<Option<Transport>>,
        /// The RFC 4588 RTX stream of each track (by track index) its player negotiated.
        rtx: Vec<Option<RtxSetup>>,
        /// This node is the origin of a relayed session: the other nodes' relay addresses,
        /// where requests for the holes go.
        relay: Option<Vec<SocketAddr>>,
    },
    /// Work for the sender on one of its streams (the pacer's vocabulary).
    Send(StreamOp),
    /// A message for a peer.
    Transmit {
        /// The peer.
        to: NodeId,
        /// The message (boxed: a run's start is a few hundred bytes).
        msg: Box<Message>,
    },
    /// Hand chunk `index` of live feed `feed` to a viewer's stream (the chunk the owner holds
    /// since [`crate::FeedEvent::Chunk`]; one shared buffer for every viewer).
    Deliver {
        /// The feed.
        feed: ObjectId,
        /// The viewer's stream.
        stream: StreamId,
        /// Its run.
        run: RunId,
        /// The chunk.
        index: BlockIndex,
    },
    /// No viewer needs chunk `index` of feed `feed` any more: the owner drops it.
    Evict {
        /// The feed.
        feed: ObjectId,
        /// The chunk.
        index: BlockIndex,
    },
    /// A feed's recording was committed further (`plan` is its longer plan): the scheduler's
    /// streams playing a prefix of it read on.
    Grow {
        /// The object's plan, as committed now.
        plan: Arc<ObjectPlan>,
    },
    /// Close an RTSP connection `after` this long (the BYE queued before it goes first).
    CloseConn {
        /// The connection.
        conn: ConnId,
        /// The delay.
        after: Duration,
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
