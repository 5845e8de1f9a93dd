//! Fuzzes RTSP framing and the session core together: the input is a connection's byte stream.
//! Frames are decoded in a loop; every request goes through a `ServerCore` (with a fake library
//! and a fake data plane that finishes each PLAY/PAUSE, sometimes refusing), interleaved frames
//! count as RTCP, and the virtual clock advances so that sessions also time out. Nothing may
//! panic, decoding must always progress, and every response must survive an encode/decode round
//! trip (so no client bytes can inject a header line). The bytes are also read as a session
//! description. Requests also drive a publisher's core (`Publish`, from the first ANNOUNCE that
//! parses): its responses round-trip too, and it names a track only for a channel set up.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use isochron_base::{BitRate, Gsn, Instant, MediaTime, ObjectId};
use isochron_rtsp::codec::{self, Decoded, Frame, Limits};
use isochron_rtsp::sdp::MediaTrack;
use isochron_rtsp::server::publish::{Publish, PublishStep};
use isochron_rtsp::server::{
    ConnId, ConnInfo, Handled, Library, Pacing, PlayOutcome, PlayStart, Position, Presentation,
    Rates, ServerConfig, ServerCore,
};

const DURATION: MediaTime = MediaTime::from_nanos(10_000_000_000);

struct FakeLibrary;

impl Library for FakeLibrary {
    fn lookup(&self, name: &str) -> Option<Presentation> {
        // Two native tracks for "m.mp4" (a SETUP per track), one MP2T stream otherwise.
        let track = |kind: &str, pt, clock_rate| MediaTrack {
            kind: kind.into(),
            payload_type: pt,
            encoding: "H264".into(),
            clock_rate,
            channels: 0,
            fmtp: String::new(),
        };
        let tracks = match name {
            "m.mp4" | "m.mp4~360p" => {
                vec![track("video", 96, 90_000), track("audio", 97, 48_000)]
            }
            _ => Vec::new(),
        };
        // `m.mp4` is a title with a ladder (and `m.mp4~360p` one rendition of it, which
        // `?rendition=360p` names).
        let ladder = if name == "m.mp4" { vec![ObjectId(7), ObjectId(8)] } else { Vec::new() };
        matches!(name, "test.ts" | "a" | "m.mp4" | "m.mp4~360p").then(|| Presentation {
            object: ObjectId(7),
            name: name.to_owned(),
            duration: DURATION,
            avg_bitrate: BitRate(2_000_000),
            tracks,
            ladder,
            // `a` is a live feed: described with an open range.
            live: name == "a",
        })
    }
}

fn position(t: MediaTime) -> Position {
    Position::at(Gsn(t.as_nanos() / 10_000_000), t)
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| run(data));

fn run(data: &[u8]) {
    // The same bytes as a session description (a DESCRIBE's answer, an ANNOUNCE's body): an
    // error or a description, never a panic.
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = isochron_rtsp::sdp::parse::Presentation::parse(text);
    }
    let limits = Limits { max_message_bytes: 8 * 1024 };
    let config = ServerConfig { max_sessions: 4, ..ServerConfig::default() };
    let mut core = ServerCore::new(config, u64::from(data.first().copied().unwrap_or(0)));
    let local = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 8554);
    let conns: Vec<ConnInfo> = (0..2u16)
        .map(|i| ConnInfo {
            id: ConnId(u64::from(i)),
            // two clients: one anonymous on a plain connection, one a user on TLS
            // (interleaved only), each holding the other's sessions in its requests at times
            peer: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1 + i as u8)), 40_000 + i),
            local,
            secure: i == 1,
            user: (i == 1).then(|| "u".into()),
        })
        .collect();
    let mut now = Instant::from_nanos(1);
    let mut publish: Option<Publish> = None;
    let mut wire = Vec::new();
    let mut off = 0;
    let mut step = 0u64;
    while off < data.len() {
        match codec::decode(&data[off..], &limits) {
            Decoded::Frame(frame, used) => {
                assert!(used >= 1 && off + used <= data.len(), "decode must progress");
                off += used;
                step += 1;
                now = now + Duration::from_secs(step % 7 * 15);
                let conn = &conns[usize::from(step.is_multiple_of(3))];
                match frame {
                    Frame::Request(req) => {
                        publish_request(&mut publish, &req, step);
                        let resp = match core.handle_request(now, conn, &req, &FakeLibrary) {
                            Handled::Respond(r) => r,
                            Handled::Play(action) => {
                                let first = match action.start {
                                    PlayStart::Seek(t) => position(t),
                                    PlayStart::Resume(p) => p,
                                    PlayStart::Beginning => Position::START,
                                };
                                let outcome = match step % 5 {
                                    3 => PlayOutcome::Rejected { reason: "fuzz".into() },
                                    4 => PlayOutcome::Failed { reason: "fuzz".into() },
                                    _ => PlayOutcome::Started {
                                        first,
                                        end: action.end.filter(|e| *e < DURATION),
                                        seq_offsets: vec![step as u16, !step as u16],
                                        rates: Rates::NORMAL,
                                    },
                                };
                                core.finish_play(now, action, outcome)
                            }
                            Handled::Pause(action) => {
                                core.finish_pause(now, action, position(MediaTime::ZERO))
                            }
                            Handled::Rate(action) => {
                                let pace = action.pace;
                                let pacing = match step % 2 {
                                    0 => action.pacing.unwrap_or(Pacing::Content),
                                    _ => Pacing::Content,
                                };
                                core.finish_rate(now, action, pace, pacing)
                            }
                        };
                        round_trip(&resp, &mut wire);
                    }
                    Frame::Data { channel, payload } => {
                        if let Some(p) = &publish
                            && let Some(t) = p.track_of_channel(channel)
                        {
                            assert!(p.tracks_set_up().contains(&t), "a track set up");
                        }
                        core.handle_interleaved_rtcp(now, conn.id, channel);
                        if payload.len() >= 4 {
                            let ssrc = u32::from_be_bytes([
                                payload[0], payload[1], payload[2], payload[3],
                            ]);
                            core.handle_rtcp(now, ssrc);
                        }
                        let first = core.sessions().next().map(|v| v.stream());
                        if let (Some(stream), 0xFF) = (first, channel) {
                            core.handle_end_of_stream(now, stream, position(DURATION));
                        }
                    }
                    Frame::Response(_) => {}
                }
                core.handle_timeout(now);
                if let Some(t) = core.poll_timeout() {
                    assert!(t > now, "poll_timeout must be in the future after handle_timeout");
                }
                while core.poll_event().is_some() {}
            }
            Decoded::Incomplete => {
                assert!(data.len() - off < limits.incomplete_bound(), "Incomplete beyond bound");
                break;
            }
            Decoded::Invalid(e) => {
                let _ = core.invalid_response(&e);
                break;
            }
        }
    }
    for conn in &conns {
        core.handle_conn_closed(now, conn.id);
    }
    core.handle_timeout(now + Duration::from_secs(3600));
    while core.poll_event().is_some() {}
    assert_eq!(core.session_count(), 0, "every session ends by close or timeout");
}

/// Every response survives an encode/decode round trip (no client bytes can inject a header
/// line).
fn round_trip(resp: &isochron_rtsp::rtsp_types::Response<Vec<u8>>, wire: &mut Vec<u8>) {
    wire.clear();
    codec::encode_response(resp, wire);
    match codec::decode(wire, &Limits::default()) {
        Decoded::Frame(Frame::Response(back), n) => {
            assert_eq!(n, wire.len(), "response framing");
            assert_eq!(&back, resp, "response round trip");
        }
        other => panic!("response does not round-trip: {other:?}"),
    }
}

/// `req` to the publisher's core: the first ANNOUNCE that parses makes it (accepted or
/// refused by `step`), every request after goes to it, and a RECORD is admitted or refused.
fn publish_request(
    publish: &mut Option<Publish>,
    req: &isochron_rtsp::rtsp_types::Request<Vec<u8>>,
    step: u64,
) {
    let mut wire = Vec::new();
    let Some(p) = publish else {
        if req.method() == isochron_rtsp::rtsp_types::Method::Announce
            && let Ok(mut p) = Publish::announce(req, "fuzz")
        {
            let resp = if step % 4 == 0 {
                p.refuse(&isochron_rtsp::status::Refusal::NotFound("fuzz".into()))
            } else {
                p.accept()
            };
            round_trip(&resp, &mut wire);
            *publish = Some(p);
        }
        return;
    };
    let resp = match p.handle_request(req, "S") {
        PublishStep::Respond(r) | PublishStep::End(r) => r,
        PublishStep::Record => p.finish_record(if step % 3 == 0 {
            Err(isochron_rtsp::status::Refusal::NotEnoughBandwidth("fuzz".into()))
        } else {
            Ok(())
        }),
        PublishStep::SetupUdp { client_ports, .. } => p.finish_setup_udp(if step % 5 == 0 {
            Err(isochron_rtsp::status::Refusal::Unavailable("fuzz".into()))
        } else {
            Ok((client_ports.0 ^ 1, client_ports.1))
        }),
    };
    round_trip(&resp, &mut wire);
}
