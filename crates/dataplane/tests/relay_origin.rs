//! A relayed session's origin, as a real sender thread: its own blocks from its pacer, another
//! node's packets relayed to it scrambled (swapped at block boundaries, duplicated, some never
//! arriving until asked for with a NACK), and a client on RTSP/TCP. The client must get every
//! packet once, in sequence order, then the BYE — the defects of relay delivery under load
//! (issue 26: swapped packets, duplicates after a takeover, a lost datagram on the node-to-node
//! hop that TCP clients never got back).

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, UdpSocket};
use std::time::{Duration, Instant};

mod common;

use isochron_base::{BlockIndex, Bytes, Gsn, MediaTime, RunId, StreamId, TrackSeqs};
use isochron_dataplane::clock::Clock;
use isochron_dataplane::pacer::{
    PlayRun, RtcpMode, ShareBlock, StreamOp, StreamSetup, single_offset,
};
use isochron_dataplane::sender::{OutFrame, SenderCommand, SharedBlock, StreamTransport};
use isochron_rtp::RtpHeader;
use isochron_rtp::rtcp::{RtcpPacket, nack_seqs, parse_compound};
use isochron_rtsp::server::Position;
use isochron_sched::Anchor;

const BLOCKS: u32 = 12;
const PER_BLOCK: u64 = 40;
const SSRC: u32 = 0x1234_5678;

/// Block `index` of 40 one-TS-packet units, 1 ms apart, each payload marked with its GSN.
fn block(index: u32) -> SharedBlock {
    common::block(index, PER_BLOCK, 1, MediaTime::from_nanos(1_000_000), Bytes::kib(64))
}

/// The RTP datagram the other node sends for packet `gsn` (sequence number = GSN, offset 0).
fn relayed(gsn: u64) -> Vec<u8> {
    let b = block((gsn / PER_BLOCK) as u32);
    let p = b.packet((gsn % PER_BLOCK) as usize);
    let h = RtpHeader {
        marker: false,
        payload_type: 33,
        sequence: gsn as u16,
        timestamp: 0,
        ssrc: SSRC,
    };
    let mut d = h.to_bytes().to_vec();
    d.extend_from_slice(p.payload);
    d
}

#[test]
fn a_relayed_session_reaches_a_tcp_client_in_order_once_and_whole() {
    let lo = Ipv4Addr::LOCALHOST;
    // The other node's relay port: where the origin's NACKs come.
    let feeder = UdpSocket::bind((lo, 0)).unwrap();
    feeder.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    let clock = Clock::new();
    let (tx, cmds) = crossbeam_channel::unbounded();
    let sender = common::sender(clock, cmds);
    let thread = std::thread::spawn(move || sender.run());

    // The origin holds the even blocks; the other node the odd ones.
    let stream = StreamId(1);
    let own: Vec<ShareBlock> = (0..BLOCKS)
        .filter(|i| i % 2 == 0)
        .map(|i| ShareBlock {
            index: BlockIndex(i),
            first: Position::at(Gsn(u64::from(i) * PER_BLOCK), MediaTime::ZERO),
        })
        .collect();
    let mut setup = StreamSetup::whole(stream, SSRC, 0, 0, BlockIndex(BLOCKS - 1));
    setup.share = Some(own.into());
    setup.rtcp = RtcpMode::Timer;
    let (frames, mut client) = tokio::sync::mpsc::channel::<OutFrame>(512);
    let transport = StreamTransport::Interleaved { frames, rtp_channel: 0, rtcp_channel: 1 };
    tx.send(SenderCommand::Add {
        setup,
        transports: vec![Some(transport)],
        cname: "t".into(),
        rtx: Vec::new(),
        relay: Some(vec![feeder.local_addr().unwrap()]),
    })
    .unwrap();
    let anchor = Anchor { wall: clock.now() + Duration::from_millis(30), media: MediaTime::ZERO };
    let start = Position { gsn: Gsn(0), time: MediaTime::ZERO, tracks: TrackSeqs::default() };
    let play = PlayRun {
        run: RunId(1),
        start,
        from: BlockIndex(0),
        end: None,
        seq_offsets: single_offset(0),
        anchor: Some(anchor),
        trick: None,
    };
    tx.send(SenderCommand::Stream(StreamOp::Play { stream, play })).unwrap();
    for i in (0..BLOCKS).filter(|i| i % 2 == 0) {
        tx.send(SenderCommand::Block {
            stream,
            run: RunId(1),
            index: BlockIndex(i),
            block: block(i),
            anchor: None,
        })
        .unwrap();
    }

    // The other node's packets, relayed: each odd block's packets in a scrambled order (its
    // first one last, so it comes after the origin's next block has begun), every fifth one
    // twice, and every seventh one not at all until a NACK asks for it.
    let total = u64::from(BLOCKS) * PER_BLOCK;
    let withheld: BTreeSet<u64> =
        (0..total).filter(|g| (g / PER_BLOCK) % 2 == 1 && g % 7 == 3).collect();
    std::thread::scope(|s| {
        s.spawn(|| {
            let base = Instant::now() + Duration::from_millis(30);
            for b in (0..BLOCKS).filter(|i| i % 2 == 1) {
                let first = u64::from(b) * PER_BLOCK;
                let mut order: Vec<u64> = (first + 1..first + PER_BLOCK).collect();
                order.swap(3, 9);
                order.push(first);
                for g in order {
                    let due = base + Duration::from_millis(g);
                    std::thread::sleep(due.saturating_duration_since(Instant::now()));
                    if withheld.contains(&g) {
                        continue;
                    }
                    tx.send(SenderCommand::Relayed { datagram: relayed(g) }).unwrap();
                    if g % 5 == 0 {
                        tx.send(SenderCommand::Relayed { datagram: relayed(g) }).unwrap();
                    }
                }
            }
            // Every node sent its last packet: the session's BYE is asked for (it must wait
            // for what is still missing, the very last packet among it).
            tx.send(SenderCommand::Stream(StreamOp::Bye { stream, reason: None })).unwrap();
            // Answer the origin's NACKs, as the other node's retransmission buffer does.
            let deadline = Instant::now() + Duration::from_secs(3);
            let mut buf = [0u8; 1500];
            let mut answered = BTreeSet::new();
            while Instant::now() < deadline && answered.len() < withheld.len() {
                let Ok(n) = feeder.recv(&mut buf) else { continue };
                for p in parse_compound(&buf[..n]).map_while(Result::ok) {
                    if let RtcpPacket::Nack { media_ssrc, pairs, .. } = p {
                        assert_eq!(media_ssrc, SSRC);
                        // (A packet that merely came late may be asked for too, and numbers
                        // past the end or of the origin's own blocks: this node sent none of
                        // those, so it answers none.)
                        for seq in nack_seqs(&pairs) {
                            let g = u64::from(seq);
                            if g >= total || (g / PER_BLOCK).is_multiple_of(2) {
                                continue;
                            }
                            if withheld.contains(&g) {
                                answered.insert(g);
                            }
                            tx.send(SenderCommand::Relayed { datagram: relayed(g) }).unwrap();
                        }
                    }
                }
            }
            assert_eq!(answered, withheld, "every withheld packet asked for");
        });

        // The client: every RTP frame on channel 0, in order, once, then the BYE on channel 1.
        let mut next = 0u64;
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut bye = false;
        while !bye && Instant::now() < deadline {
            let Ok(frame) = client.try_recv() else {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            };
            let (a, b) = frame.parts();
            let bytes = [a, b].concat();
            match bytes[1] {
                0 => {
                    let (h, range) = RtpHeader::parse(&bytes[4..]).expect("RTP");
                    assert_eq!(u64::from(h.sequence), next, "in order, once");
                    let g = u64::from_be_bytes(bytes[4..][range][4..12].try_into().unwrap());
                    assert_eq!(g, next, "the payload of that number");
                    next += 1;
                }
                1 => {
                    let bye_seen = parse_compound(&bytes[4..])
                        .map_while(Result::ok)
                        .any(|p| matches!(p, RtcpPacket::Bye { .. }));
                    if bye_seen {
                        assert_eq!(next, total, "the BYE after every packet");
                        bye = true;
                    }
                }
                c => panic!("channel {c}"),
            }
        }
        assert_eq!(next, total, "every packet");
        assert!(bye, "the BYE came");
    });
    let (reply, rx) = tokio::sync::oneshot::channel();
    tx.send(SenderCommand::Stats { reply }).unwrap();
    let stats = rx.blocking_recv().unwrap();
    assert_eq!(stats.reseq.lost, 0);
    assert!(stats.reseq.duplicates > 0 && stats.reseq.reordered > 0, "{:?}", stats.reseq);
    tx.send(SenderCommand::Shutdown).unwrap();
    thread.join().unwrap();
}
