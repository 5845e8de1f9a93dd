//! A sender thread with a backlog still answers its commands. Behind a full link the sockets
//! block and a send pass lasts as long as the link takes to carry what is due; a pass that sent
//! every overdue packet before looking at its commands again held a TEARDOWN's removal and the
//! next sessions' starts for as long as the backlog lasted (a second behind a 1 Gb/s link after
//! an overloaded trial, `docs/results/fig3.md`). Here the backlog is a stream whose every packet
//! is due at once: the thread must answer a command, and stop the stream when it is removed,
//! long before it has sent them all.

use std::net::{Ipv4Addr, UdpSocket};
use std::time::Duration;

mod common;

use isochron_base::{BlockIndex, Bytes, Gsn, MediaTime, RunId, StreamId, TrackSeqs};
use isochron_dataplane::clock::Clock;
use isochron_dataplane::pacer::{PlayRun, StreamOp, StreamSetup, single_offset};
use isochron_dataplane::sender::{SenderCommand, SenderStats, StreamTransport};
use isochron_rtsp::server::Position;
use isochron_sched::Anchor;

const BLOCKS: u32 = 200;
/// 190 packets of 7 TS packets (1,316 bytes) fill a 256 KiB block.
const PER_BLOCK: u64 = 190;
const SSRC: u32 = 0x0bac_1096;

fn stats(tx: &crossbeam_channel::Sender<SenderCommand>) -> SenderStats {
    let (reply, rx) = tokio::sync::oneshot::channel();
    tx.send(SenderCommand::Stats { reply }).unwrap();
    rx.blocking_recv().unwrap()
}

#[test]
fn a_senders_commands_do_not_wait_for_its_backlog() {
    // Where the packets go: never read, so the kernel drops what does not fit.
    let client = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    client.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let to = client.local_addr().unwrap();
    let clock = Clock::new();
    let (tx, cmds) = crossbeam_channel::unbounded();

    // The whole stream is queued before the thread starts, every packet at media time 0: the
    // thread's first pass finds 38,000 packets (50 MB) due.
    let stream = StreamId(1);
    let setup = StreamSetup::whole(stream, SSRC, 0, 0, BlockIndex(BLOCKS - 1));
    let transports = vec![Some(StreamTransport::Udp { rtp: to, rtcp: to })];
    let add =
        SenderCommand::Add { setup, transports, cname: "t".into(), rtx: Vec::new(), relay: None };
    tx.send(add).unwrap();
    let play = PlayRun {
        run: RunId(1),
        start: Position { gsn: Gsn(0), time: MediaTime::ZERO, tracks: TrackSeqs::default() },
        from: BlockIndex(0),
        end: None,
        seq_offsets: single_offset(0),
        anchor: Some(Anchor { wall: clock.now(), media: MediaTime::ZERO }),
        trick: None,
    };
    tx.send(SenderCommand::Stream(StreamOp::Play { stream, play })).unwrap();
    for i in 0..BLOCKS {
        let block = common::block(i, PER_BLOCK, 7, MediaTime::ZERO, Bytes::kib(256));
        let index = BlockIndex(i);
        tx.send(SenderCommand::Block { stream, run: RunId(1), index, block, anchor: None })
            .unwrap();
    }
    let total = u64::from(BLOCKS) * PER_BLOCK;
    let thread = std::thread::spawn(move || common::sender(clock, cmds).run());

    // Once the pass has begun, a command is answered before the backlog is through.
    let mut buf = [0u8; 1500];
    client.recv(&mut buf).expect("the stream's first packet");
    let during = stats(&tx);
    assert!(
        during.pacer.packets < total,
        "{} of {total} sent before a command",
        during.pacer.packets
    );
    // And a removal stops the rest.
    tx.send(SenderCommand::Stream(StreamOp::Remove { stream })).unwrap();
    let removed = stats(&tx).pacer.packets;
    std::thread::sleep(Duration::from_millis(50));
    let after = stats(&tx);
    assert_eq!(after.pacer.packets, removed, "nothing sent after the removal");
    assert!(removed < total, "{removed} of {total} sent before the removal");
    assert_eq!(after.streams, 0);
    tx.send(SenderCommand::Shutdown).unwrap();
    thread.join().unwrap();
}
