//! What the sender threads' tests build their streams from.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Receiver;
use isochron_base::{BlockIndex, BlockKey, Bytes, Gsn, MediaTime, ObjectId};
use isochron_dataplane::clock::Clock;
use isochron_dataplane::net::UdpPair;
use isochron_dataplane::sender::{SenderCommand, SenderThread, SharedBlock};
use isochron_diskio::AlignedBuf;
use isochron_store::block::{Block, BlockBuilder, PacketMeta};

/// Block `index` of object 1 in blocks of `per_block` packets (`capacity` each), packet `g`
/// of the object sent at `g × spacing`, `ts_packets` TS packets long, its first eight bytes
/// after the sync byte's TS header its GSN.
pub(crate) fn block(
    index: u32,
    per_block: u64,
    ts_packets: u8,
    spacing: MediaTime,
    capacity: Bytes,
) -> SharedBlock {
    let key = BlockKey::new(ObjectId(1), BlockIndex(index));
    let first = u64::from(index) * per_block;
    let mut b = BlockBuilder::new(key, Gsn(first), capacity);
    for g in first..first + per_block {
        let meta = PacketMeta {
            send_time: MediaTime::from_nanos(g * spacing.as_nanos()),
            ts_packets,
            random_access: false,
            discontinuity: false,
        };
        let mut payload = vec![0xff; 188 * usize::from(ts_packets)];
        payload[0] = 0x47;
        payload[4..12].copy_from_slice(&g.to_be_bytes());
        b.push(meta, &payload);
    }
    let bytes = b.finish();
    Arc::new(Block::parse(AlignedBuf::copy_from(&bytes), Some(key)).expect("a valid block"))
}

/// A sender thread on loopback as a single node's (one shard, no hold), fed by `rx`.
pub(crate) fn sender(clock: Clock, rx: Receiver<SenderCommand>) -> SenderThread {
    SenderThread {
        clock,
        rx,
        udp: Arc::new(UdpPair::bind(Ipv4Addr::LOCALHOST.into(), 0, 1 << 20).unwrap()),
        on_event: Box::new(|_| {}),
        rtcp_interval: Duration::from_secs(60),
        batch_packets: 64,
        quantum: Duration::from_micros(500),
        retransmit_window: Duration::from_secs(1),
        gso: false,
        shards: 1,
        sent_through: Arc::default(),
        hold_after: None,
        hold_window: Duration::from_millis(300),
    }
}
