//! The sender's hot path allocates nothing per packet: a counting global allocator watches one
//! sender thread (its allocations are counted, no other thread's) while it sends 10 000
//! packets of one stream over UDP, with and without GSO. The payloads go out by reference
//! (`sendmmsg` iovecs into the blocks), so no copy is made either; what the thread allocates
//! is per command and per block (the pacer's and the retransmission buffer's tables), not per
//! packet.

#![allow(clippy::print_stderr)] // the counts are reported on stderr

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use isochron_base::{
    BlockIndex, BlockKey, Bytes, Gsn, MediaTime, ObjectId, RunId, StreamId, TrackSeqs,
};
use isochron_dataplane::clock::Clock;
use isochron_dataplane::net::{UdpPair, gso_supported, receive_socket};
use isochron_dataplane::pacer::{PlayRun, StreamOp, StreamSetup, single_offset};
use isochron_dataplane::sender::{SenderCommand, SenderThread, SharedBlock, StreamTransport};
use isochron_diskio::AlignedBuf;
use isochron_rtsp::server::Position;
use isochron_sched::Anchor;
use isochron_store::block::{Block, BlockBuilder, PacketMeta};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static WATCHED: Cell<bool> = const { Cell::new(false) };
}

fn count() {
    if WATCHED.try_with(Cell::get).unwrap_or(false) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const BLOCKS: u32 = 40;
const PER_BLOCK: u64 = 250;

/// Block `index` of 250 seven-TS-packet units, 100 µs apart.
fn block(index: u32) -> SharedBlock {
    let key = BlockKey::new(ObjectId(1), BlockIndex(index));
    let first = u64::from(index) * PER_BLOCK;
    let mut b = BlockBuilder::new(key, Gsn(first), Bytes::kib(512));
    for g in first..first + PER_BLOCK {
        let meta = PacketMeta {
            send_time: MediaTime::from_nanos(g * 100_000),
            ts_packets: 7,
            random_access: false,
            discontinuity: false,
        };
        let mut payload = vec![0xff; 7 * 188];
        for p in payload.chunks_mut(188) {
            p[0] = 0x47;
        }
        b.push(meta, &payload);
    }
    let bytes = b.finish();
    Arc::new(Block::parse(AlignedBuf::copy_from(&bytes), Some(key)).expect("a valid block"))
}

/// Sends the stream with a watched sender thread; returns (packets received, allocations).
fn run(gso: bool) -> (u64, u64) {
    let lo = Ipv4Addr::LOCALHOST.into();
    // The receiver is this test's thread: on a busy machine it may be descheduled for a while,
    // and 10 000 packets a second overflow a default receive buffer in 16 ms (a lost packet,
    // nothing of the sender's). A relay socket's buffer holds 0.6 s of them.
    let (rx, _) = receive_socket(SocketAddr::new(lo, 0)).unwrap();
    let rtcp_rx = UdpSocket::bind((lo, 0)).unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let to = rx.local_addr().unwrap();
    let clock = Clock::new();
    let (tx, cmds) = crossbeam_channel::unbounded();
    let (ev_tx, _events) = crossbeam_channel::unbounded();
    let sender = SenderThread {
        clock,
        rx: cmds,
        udp: Arc::new(UdpPair::bind(lo, 0, 8 << 20).unwrap()),
        on_event: Box::new(move |ev| {
            let _ = ev_tx.send(ev);
        }),
        rtcp_interval: Duration::from_secs(5),
        batch_packets: 64,
        quantum: Duration::from_micros(500),
        retransmit_window: Duration::from_secs(1),
        gso,
        shards: 1,
        sent_through: Arc::default(),
        hold_after: None,
        hold_window: Duration::from_millis(300),
    };
    let blocks: Vec<SharedBlock> = (0..BLOCKS).map(block).collect();
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let thread = std::thread::spawn(move || {
        WATCHED.set(true);
        sender.run();
        WATCHED.set(false);
    });
    let stream = StreamId(1);
    let setup = StreamSetup::whole(stream, 7, 0, 0, BlockIndex(BLOCKS - 1));
    let transport = StreamTransport::Udp { rtp: to, rtcp: rtcp_rx.local_addr().unwrap() };
    tx.send(SenderCommand::Add {
        setup,
        transports: vec![Some(transport)],
        cname: "t".into(),
        rtx: Vec::new(),
        relay: None,
    })
    .unwrap();
    let start = Position { gsn: Gsn(0), time: MediaTime::ZERO, tracks: TrackSeqs::default() };
    let play = PlayRun {
        run: RunId(1),
        start,
        from: BlockIndex(0),
        end: None,
        seq_offsets: single_offset(0),
        anchor: None,
        trick: None,
    };
    tx.send(SenderCommand::Stream(StreamOp::Play { stream, play })).unwrap();
    let anchor = Anchor { wall: clock.now() + Duration::from_millis(20), media: MediaTime::ZERO };
    for (i, b) in blocks.into_iter().enumerate() {
        let anchor = (i == 0).then_some(anchor);
        let index = BlockIndex(i as u32);
        tx.send(SenderCommand::Block { stream, run: RunId(1), index, block: b, anchor }).unwrap();
    }
    let total = u64::from(BLOCKS) * PER_BLOCK;
    let mut got = 0;
    let mut buf = [0u8; 2048];
    while got < total {
        let Ok(n) = rx.recv(&mut buf) else { break };
        assert_eq!(n, 12 + 7 * 188, "one RTP packet of seven TS packets");
        assert_eq!(u16::from_be_bytes([buf[2], buf[3]]), got as u16, "in order, none lost");
        got += 1;
    }
    tx.send(SenderCommand::Shutdown).unwrap();
    thread.join().unwrap();
    (got, ALLOCATIONS.load(Ordering::Relaxed) - before)
}

#[test]
fn the_sender_allocates_nothing_per_packet() {
    for gso in [false, true] {
        if gso && !gso_supported() {
            continue;
        }
        let (packets, allocations) = run(gso);
        eprintln!("gso {gso}: {packets} packets, {allocations} allocations on the sender thread");
        assert_eq!(packets, u64::from(BLOCKS) * PER_BLOCK);
        assert!(
            allocations * 100 < packets,
            "{allocations} allocations for {packets} packets (gso {gso})"
        );
    }
}
