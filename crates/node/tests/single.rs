//! A single node's decisions, driven by RTSP requests and the scheduler's and sender's notices
//! with no thread, socket or clock: what a PLAY, a seek while playing, a PAUSE and a refusal
//! make the node do, and in which order (RFC 2326 §10.5, §10.6, §12.33).

use std::net::Ipv4Addr;
use std::sync::Arc;

use isochron_base::{DiskId, Gsn, Instant, MediaTime, NodeId, Replicas, RunId, StreamId};
use isochron_cluster::ShareKey;
use isochron_node::abr::ReceiverFeedback;
use isochron_node::{NodeConfig, NodeCore, NodeOutput, Ticket};
use isochron_pacing::pacer::{PlayRun, RunReport, StreamOp};
use isochron_rtsp::rtsp_types::{HeaderName, Method, Response, StatusCode};
use isochron_rtsp::server::{ConnId, Position, ServerConfig, ServerCore};
use isochron_sched::{Decision, ReadOp, Refusal};

mod common;

use common::{Clip, SECOND, conn, request, session_of};

/// A single node and the player on connection 1.
struct Node {
    core: NodeCore,
    /// What its catalog holds.
    clip: Arc<Clip>,
    now: Instant,
    tickets: u64,
    cseq: u32,
    session: Option<String>,
    /// The SSRC the SETUP's answer gave.
    ssrc: Option<u32>,
}

impl Node {
    fn new() -> Self {
        Self::with(Clip::new(4, |_| Replicas::single(DiskId(0))))
    }

    fn with(clip: Clip) -> Self {
        Self::configured(clip, false)
    }

    /// A node that degrades instead of refusing (`sched.degrade`) or not.
    fn configured(clip: Clip, degrade: bool) -> Self {
        let config = NodeConfig {
            node: NodeId(0),
            name: "solo".into(),
            unix_base_ns: 0,
            cluster: None,
            degrade,
            live: isochron_live::EdgeConfig::default(),
        };
        let rtsp = ServerCore::new(ServerConfig::default(), 3);
        let clip = Arc::new(clip);
        let core = NodeCore::new(config, rtsp, Arc::clone(&clip) as _);
        let now = Instant::from_nanos(SECOND);
        Self { core, clip, now, tickets: 0, cseq: 0, session: None, ssrc: None }
    }

    /// Sends a request; returns its ticket.
    fn request(&mut self, method: Method, uri: &str, headers: &[(&str, &str)]) -> Ticket {
        self.cseq += 1;
        let req = request(method, uri, self.cseq, self.session.as_deref(), headers);
        let ticket = Ticket(self.tickets);
        self.tickets += 1;
        self.core.handle_request(self.now, &conn(Ipv4Addr::LOCALHOST), &req, ticket);
        ticket
    }

    /// A PLAY from the start: the node asks its scheduler to admit the share, and only that.
    fn play_asks_admission(&mut self) -> (ShareKey, u32) {
        self.request(Method::Play, "rtsp://127.0.0.1:8554/clip", &[]);
        match self.outputs().as_slice() {
            [NodeOutput::Admit { key, open, .. }] => (*key, *open),
            other => panic!("one admission request: {other:?}"),
        }
    }

    fn outputs(&mut self) -> Vec<NodeOutput> {
        std::iter::from_fn(|| self.core.poll_output()).collect()
    }

    /// DESCRIBE and SETUP (UDP), answered at once.
    fn set_up(&mut self) {
        self.set_up_with("RTP/AVP;unicast;client_port=5000-5001");
    }

    /// DESCRIBE and SETUP with transport `t`.
    fn set_up_with(&mut self, t: &str) {
        self.core.handle_conn_opened(ConnId(1));
        self.request(Method::Describe, "rtsp://127.0.0.1:8554/clip", &[]);
        assert_eq!(status(&self.outputs()), vec![StatusCode::Ok]);
        self.request(Method::Setup, "rtsp://127.0.0.1:8554/clip/trackID=0", &[("Transport", t)]);
        let out = self.outputs();
        let r = response(&out).expect("SETUP is answered at once");
        self.session = session_of(r);
        let transport = r.header(&HeaderName::try_from("Transport").unwrap()).unwrap().as_str();
        self.ssrc = transport
            .split(';')
            .find_map(|p| p.strip_prefix("ssrc="))
            .and_then(|h| u32::from_str_radix(h, 16).ok());
    }
}

fn status(out: &[NodeOutput]) -> Vec<StatusCode> {
    out.iter()
        .filter_map(|o| match o {
            NodeOutput::Respond { response, .. } => Some(response.status()),
            _ => None,
        })
        .collect()
}

fn response(out: &[NodeOutput]) -> Option<&Response<Vec<u8>>> {
    out.iter().find_map(|o| match o {
        NodeOutput::Respond { response, .. } => Some(response),
        _ => None,
    })
}

/// The stream and run of the first run started in `out`.
fn run_started(out: &[NodeOutput]) -> Option<(StreamId, RunId)> {
    out.iter().find_map(|o| match o {
        NodeOutput::Send(StreamOp::Play { stream, play }) => Some((*stream, play.run)),
        _ => None,
    })
}

/// The run a batch of outputs starts, if it starts one.
fn run_sent(out: &[NodeOutput]) -> Option<PlayRun> {
    out.iter().find_map(|o| match o {
        NodeOutput::Send(StreamOp::Play { play, .. }) => Some(*play),
        _ => None,
    })
}

/// The `seq=` of a PLAY response's RTP-Info.
fn rtp_info_seq(r: &Response<Vec<u8>>) -> u16 {
    let info = r.header(&HeaderName::try_from("RTP-Info").unwrap()).unwrap().as_str();
    let seq = info.split(';').find_map(|p| p.trim().strip_prefix("seq=")).unwrap();
    seq.parse().unwrap()
}

#[test]
fn a_play_is_answered_once_admitted_and_before_the_run_starts_and_a_seek_continues_numbering() {
    let mut n = Node::new();
    n.set_up();
    n.request(Method::Play, "rtsp://127.0.0.1:8554/clip", &[("Range", "npt=0-")]);
    let out = n.outputs();
    assert!(status(&out).is_empty(), "no answer before admission: {out:?}");
    let key = match out.as_slice() {
        [NodeOutput::Admit { key, open, req, name }] => {
            assert_eq!(name, "clip");
            assert_eq!(req.plan.blocks.len(), 4);
            (*key, *open)
        }
        other => panic!("one admission request: {other:?}"),
    };

    n.core.handle_admitted(n.now, key.0, key.1, Some(Decision::Admit));
    let out = n.outputs();
    // The answer first (RFC 2326 §12.33: RTP-Info before the first packet can leave), then the
    // stream set up at the sender, the run started there and at the scheduler.
    let kinds: Vec<&str> = out
        .iter()
        .map(|o| match o {
            NodeOutput::Respond { .. } => "respond",
            NodeOutput::AddStream { .. } => "add",
            NodeOutput::Send(StreamOp::Pace { .. }) => "pace",
            NodeOutput::Send(StreamOp::Play { .. }) => "play",
            NodeOutput::Read(ReadOp::Start { .. }) => "start",
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(kinds, ["respond", "add", "pace", "play", "start"]);
    let first = response(&out).unwrap();
    assert_eq!(first.status(), StatusCode::Ok);
    let seq0 = rtp_info_seq(first);
    let (stream, run1) = match &out[3] {
        NodeOutput::Send(StreamOp::Play { stream, play }) => {
            assert_eq!(play.start.gsn, Gsn(0));
            (*stream, play.run)
        }
        _ => unreachable!(),
    };

    // A seek while playing: every node stops first, to learn where numbering stands.
    n.now = Instant::from_nanos(3 * SECOND / 2);
    n.request(Method::Play, "rtsp://127.0.0.1:8554/clip", &[("Range", "npt=2.5-")]);
    let out = n.outputs();
    assert!(status(&out).is_empty(), "no answer before the run stopped: {out:?}");
    assert!(
        matches!(out.as_slice(), [NodeOutput::Send(StreamOp::Stop { run, cutoff: None, .. })] if *run == run1),
        "{out:?}"
    );
    // It stopped with 150 packets sent: the next run's first packet is number 150 after the
    // first, though it starts at the seek point at 2 s (GSN 200).
    let next = Position::at(Gsn(150), MediaTime::from_nanos(3 * SECOND / 2));
    let report = RunReport { next: Some(next), last_sent: None };
    n.core.handle_share_stopped(n.now, stream, run1, report);
    let out = n.outputs();
    let r = response(&out).expect("the seek is answered once stopped");
    assert_eq!(r.status(), StatusCode::Ok);
    assert_eq!(rtp_info_seq(r), seq0.wrapping_add(150), "numbering continues across the seek");
    let play = out.iter().find_map(|o| match o {
        NodeOutput::Send(StreamOp::Play { play, .. }) => Some(play),
        _ => None,
    });
    let play = play.expect("a second run");
    assert_eq!(play.start.gsn, Gsn(200), "the seek point at or before 2.5 s");
    assert!(play.run > run1);
    assert_eq!(play.seq_offsets[0], seq0.wrapping_add(150).wrapping_sub(200));

    // PAUSE waits for the sender to stop, then answers.
    n.request(Method::Pause, "rtsp://127.0.0.1:8554/clip", &[]);
    let out = n.outputs();
    assert!(status(&out).is_empty());
    assert!(matches!(out.as_slice(), [NodeOutput::Send(StreamOp::Stop { .. })]), "{out:?}");
    let next = Position::at(Gsn(260), MediaTime::from_nanos(2_600_000_000));
    n.core.handle_share_stopped(
        n.now,
        stream,
        play.run,
        RunReport { next: Some(next), last_sent: None },
    );
    assert_eq!(status(&n.outputs()), vec![StatusCode::Ok]);
}

#[test]
fn a_refusal_by_the_scheduler_is_a_453_and_the_share_is_forgotten() {
    let mut n = Node::new();
    n.set_up();
    let key = n.play_asks_admission();
    let refusal = Refusal::NoProfile { disk: DiskId(0) };
    n.core.handle_admitted(n.now, key.0, key.1, Some(Decision::Reject(refusal)));
    let out = n.outputs();
    assert_eq!(status(&out), vec![StatusCode::NotEnoughBandwidth]);
    assert!(
        out.iter().any(|o| matches!(o, NodeOutput::Read(ReadOp::Close { .. }))),
        "the reservation is given back: {out:?}"
    );
    assert_eq!(n.core.oldest_epoch(), None, "nothing of the refused session is kept");
}

#[test]
fn a_session_whose_read_fails_ends_with_a_bye_naming_the_cause() {
    let mut n = Node::new();
    n.set_up();
    let key = n.play_asks_admission();
    n.core.handle_admitted(n.now, key.0, key.1, Some(Decision::Admit));
    let (stream, run) = run_started(&n.outputs()).expect("the run");
    let error = isochron_base::IoFailure::new(isochron_base::IoFailureKind::Corrupt, "checksum");
    n.core.handle_read_failed(n.now, stream, error);
    let out = n.outputs();
    assert!(matches!(out.as_slice(), [NodeOutput::Send(StreamOp::Stop { .. })]), "{out:?}");
    n.core.handle_share_stopped(n.now, stream, run, RunReport::default());
    let out = n.outputs();
    let bye = out.iter().find_map(|o| match o {
        NodeOutput::Send(StreamOp::Bye { reason, .. }) => reason.clone(),
        _ => None,
    });
    assert!(bye.is_some_and(|r| r.contains("checksum")), "{out:?}");
    assert!(out.iter().any(|o| matches!(o, NodeOutput::CloseConn { conn: ConnId(1), .. })));
}

#[test]
fn a_play_waiting_for_admission_is_answered_when_its_session_ends_meanwhile() {
    let mut n = Node::new();
    // Interleaved: the session ends with its connection (RFC 2326 §10.12).
    n.set_up_with("RTP/AVP/TCP;unicast;interleaved=0-1");
    let key = n.play_asks_admission();
    n.core.handle_conn_closed(n.now, ConnId(1));
    let out = n.outputs();
    assert_eq!(status(&out), vec![StatusCode::InternalServerError], "answered, not left: {out:?}");
    // The admission answered after the session is gone starts nothing.
    n.core.handle_admitted(n.now, key.0, key.1, Some(Decision::Admit));
    let out = n.outputs();
    assert!(
        !out.iter().any(|o| matches!(o, NodeOutput::Send(StreamOp::Play { .. }))),
        "nothing plays for a closed session: {out:?}"
    );
    assert!(status(&out).is_empty());
}

/// A title played from its ladder (`clip`: 100 packets a second; `clip~low`: 50) switches
/// rendition on its player's receiver reports: a report losing a quarter of the packets stops
/// the run just before the first packet of the next seek point half a second ahead or more
/// (its GSN, its time), the reservation moves to the lower rendition, and the next run starts
/// at that seek point of it, numbered on from where the first stopped. No request is answered:
/// the player sees one stream.
#[test]
fn a_lossy_report_switches_a_ladder_down_at_the_next_seek_point_numbered_on() {
    let mut n = Node::with(Clip::new(6, |_| Replicas::single(DiskId(0))).with_ladder());
    n.set_up();
    let ssrc = n.ssrc.expect("the SETUP's SSRC");
    let key = n.play_asks_admission();
    n.core.handle_admitted(n.now, key.0, key.1, Some(Decision::Admit));
    let out = n.outputs();
    let first = response(&out).expect("the PLAY's answer");
    let seq0 = rtp_info_seq(first);
    let (stream, run1) = run_started(&out).expect("the run starts");

    // 2 s in, a report that lost a quarter: stop before the seek point at 3 s (2.5 s or later).
    n.now = n.now + std::time::Duration::from_secs(2);
    let lossy =
        ReceiverFeedback { ssrc, fraction_lost: 64, rtt: None, highest_seq: None, jitter: 0 };
    n.core.handle_rtcp(n.now, &[ssrc], &[lossy], &[]);
    let out = n.outputs();
    assert!(
        matches!(
            out.as_slice(),
            [NodeOutput::Send(StreamOp::Stop { run, cutoff: Some(c), before: Some(Gsn(300)), .. })]
                if *run == run1 && *c == MediaTime::from_nanos(3 * SECOND)
        ),
        "{out:?}"
    );

    // Stopped there: the old reservation closes, the low rendition's is asked for.
    n.now = n.now + std::time::Duration::from_secs(1);
    let at = Position::at(Gsn(300), MediaTime::from_nanos(3 * SECOND));
    let report = RunReport { next: Some(at), last_sent: None };
    n.core.handle_share_stopped(n.now, stream, run1, report);
    let out = n.outputs();
    let key = out
        .iter()
        .find_map(|o| match o {
            NodeOutput::Admit { key, open, name, .. } if name == "clip~low" => Some((*key, *open)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("the low rendition's admission: {out:?}"));
    assert!(status(&out).is_empty(), "{out:?}");

    // Admitted: a run of the low rendition from its seek point at 3 s (GSN 150), the first
    // packet numbered seq0 + 300, where the first run stopped.
    n.core.handle_admitted(n.now, key.0, key.1, Some(Decision::Admit));
    let out = n.outputs();
    assert!(status(&out).is_empty(), "no answer: {out:?}");
    let play = run_sent(&out).unwrap_or_else(|| panic!("the low rendition's run: {out:?}"));
    assert_eq!((play.start.gsn, play.start.time), (Gsn(150), MediaTime::from_nanos(3 * SECOND)));
    assert_eq!(play.seq_offsets[0].wrapping_add(150), seq0.wrapping_add(300));
}

/// A busy node's stop comes after the key frame's packets left, or its deadline passes before
/// the run reached the key frame: the session does not go on in the other rendition from a
/// key frame (the media between would be missing, or sent twice). It goes on exactly where it
/// stopped, in the rendition it played, numbered on; nothing is admitted.
#[test]
fn a_switch_whose_stop_came_late_goes_on_where_it_stopped_in_the_same_rendition() {
    // 0.2 s past the key frame at 3 s (GSN 300): its packets had left.
    stop_off_the_key_frame(Position::at(Gsn(320), MediaTime::from_nanos(3 * SECOND + SECOND / 5)));
    // 0.2 s before it: the stop's deadline passed with the run behind its clock.
    stop_off_the_key_frame(Position::at(Gsn(280), MediaTime::from_nanos(3 * SECOND - SECOND / 5)));
}

fn stop_off_the_key_frame(past: Position) {
    let mut n = Node::with(Clip::new(6, |_| Replicas::single(DiskId(0))).with_ladder());
    n.set_up();
    let ssrc = n.ssrc.expect("the SETUP's SSRC");
    let key = n.play_asks_admission();
    n.core.handle_admitted(n.now, key.0, key.1, Some(Decision::Admit));
    let out = n.outputs();
    let seq0 = rtp_info_seq(response(&out).expect("the PLAY's answer"));
    let (stream, run1) = run_started(&out).expect("the run starts");
    n.now = n.now + std::time::Duration::from_secs(2);
    let lossy =
        ReceiverFeedback { ssrc, fraction_lost: 64, rtt: None, highest_seq: None, jitter: 0 };
    n.core.handle_rtcp(n.now, &[ssrc], &[lossy], &[]);
    assert!(
        n.outputs()
            .iter()
            .any(|o| matches!(o, NodeOutput::Send(StreamOp::Stop { run, .. }) if *run == run1)),
        "the switch's stop"
    );
    n.now = n.now + std::time::Duration::from_secs(1);
    n.core.handle_share_stopped(
        n.now,
        stream,
        run1,
        RunReport { next: Some(past), last_sent: None },
    );
    let out = n.outputs();
    assert!(!out.iter().any(|o| matches!(o, NodeOutput::Admit { .. })), "no reopening: {out:?}");
    assert!(status(&out).is_empty(), "no answer: {out:?}");
    let play = run_sent(&out).unwrap_or_else(|| panic!("the run going on: {out:?}"));
    assert_eq!((play.start.gsn, play.start.time), (past.gsn, past.time));
    let at = past.gsn.0 as u16;
    assert_eq!(play.seq_offsets[0].wrapping_add(at), seq0.wrapping_add(at), "numbered on");
    // The chooser decides again: the next lossy report stops the new run.
    n.now = n.now + std::time::Duration::from_millis(500);
    n.core.handle_rtcp(n.now, &[ssrc], &[lossy], &[]);
    let out = n.outputs();
    assert!(out.iter().any(|o| matches!(o, NodeOutput::Send(StreamOp::Stop { .. }))), "{out:?}");
}

/// A player that has lost packets sent again reports no loss, but it asked for a tenth of
/// what its reports' span covers (generic NACKs): the ladder steps down as on a lossy report,
/// once the span's requests had time to come (the next report, half a second on or more).
#[test]
fn nacks_for_a_tenth_of_the_packets_switch_a_ladder_down() {
    let mut n = Node::with(Clip::new(6, |_| Replicas::single(DiskId(0))).with_ladder());
    n.set_up();
    let ssrc = n.ssrc.expect("the SETUP's SSRC");
    let key = n.play_asks_admission();
    n.core.handle_admitted(n.now, key.0, key.1, Some(Decision::Admit));
    let (_, run1) = run_started(&n.outputs()).expect("the run starts");
    let report = |seq| ReceiverFeedback {
        ssrc,
        fraction_lost: 0,
        rtt: None,
        highest_seq: Some(seq),
        jitter: 0,
    };
    let stopped = |out: &[NodeOutput]| {
        out.iter()
            .any(|o| matches!(o, NodeOutput::Send(StreamOp::Stop { run, .. }) if *run == run1))
    };
    n.now = n.now + std::time::Duration::from_secs(1);
    n.core.handle_rtcp(n.now, &[ssrc], &[report(100)], &[]);
    // A NACK alone, then a report with one that asks for those four again and 26 more: 30
    // packets of the 300 since the last report.
    n.now = n.now + std::time::Duration::from_secs(1);
    n.core.handle_rtcp(n.now, &[ssrc], &[], &[(ssrc, vec![150, 151, 152, 153])]);
    assert!(!stopped(&n.outputs()), "a NACK alone decides nothing");
    n.core.handle_rtcp(n.now, &[ssrc], &[report(400)], &[(ssrc, (150..180).collect())]);
    assert!(!stopped(&n.outputs()), "its span is judged at the next report");
    n.now = n.now + std::time::Duration::from_secs(1);
    n.core.handle_rtcp(n.now, &[ssrc], &[report(700)], &[]);
    let out = n.outputs();
    assert!(stopped(&out), "{out:?}");
}

/// With MTFC the session's clock runs at the pace its player asks for, and the player's buffer,
/// which comes with each request, is feedback too: a session paced at 1.5 from its start
/// reports, 2 s in, a buffer falling under a quarter of its depth. It switches down at the first
/// seek point half a second past where its clock is (3 s of media by then: the seek point at
/// 4 s), not where a clock at its own pace would be (2 s: the one at 3 s).
#[test]
fn an_mtfc_paced_session_switches_down_on_its_players_buffer_at_its_own_clocks_seek_point() {
    let mut n = Node::with(Clip::new(6, |_| Replicas::single(DiskId(0))).with_ladder());
    n.set_up();
    let key = n.play_asks_admission();
    n.core.handle_admitted(n.now, key.0, key.1, Some(Decision::Admit));
    let (_, run1) = run_started(&n.outputs()).expect("the run starts");
    let rate = |n: &mut Node, buffer: &str| {
        n.cseq += 1;
        let uri = "rtsp://127.0.0.1:8554/clip";
        let headers = [("Content-Type", "text/parameters")];
        let req = request(Method::SetParameter, uri, n.cseq, n.session.as_deref(), &headers)
            .replace_body(format!("x-isochron-rate: 1.5\r\nx-isochron-buffer: {buffer}\r\n"));
        n.core.handle_request(
            n.now,
            &conn(Ipv4Addr::LOCALHOST),
            &req.map_body(|b| b.into_bytes()),
            Ticket(99),
        );
        n.outputs()
    };
    let stops = |out: &[NodeOutput]| {
        out.iter()
            .filter_map(|o| match o {
                NodeOutput::Send(StreamOp::Stop { run, cutoff, before, .. }) if *run == run1 => {
                    Some((*cutoff, *before))
                }
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(status(&rate(&mut n, "1.8/2")), vec![StatusCode::Ok]);
    // Under half its depth, but not a quarter: nothing yet.
    n.now = n.now + std::time::Duration::from_secs(1);
    let out = rate(&mut n, "0.9/2");
    assert_eq!((status(&out), stops(&out)), (vec![StatusCode::Ok], vec![]), "{out:?}");
    // Under a quarter and falling: down, before the seek point at 4 s.
    n.now = n.now + std::time::Duration::from_secs(1);
    let out = rate(&mut n, "0.4/2");
    let four = MediaTime::from_nanos(4 * SECOND);
    assert_eq!(stops(&out), vec![(Some(four), Some(Gsn(400)))], "{out:?}");
}

/// Over RTSP/TCP the receiver reports come interleaved on the session's own connection: one
/// there that says the path queues (its round trip 600 ms over the least seen) steps the
/// ladder down; the same report arriving on another connection, naming this session's SSRC,
/// changes nothing.
#[test]
fn an_interleaved_report_on_the_sessions_own_connection_switches_it_and_none_other_does() {
    let mut n = Node::with(Clip::new(6, |_| Replicas::single(DiskId(0))).with_ladder());
    n.set_up_with("RTP/AVP/TCP;unicast;interleaved=0-1");
    let ssrc = n.ssrc.expect("the SETUP's SSRC");
    let key = n.play_asks_admission();
    n.core.handle_admitted(n.now, key.0, key.1, Some(Decision::Admit));
    let out = n.outputs();
    let (_, run1) = run_started(&out).expect("the run starts");
    let report = |ms| ReceiverFeedback {
        ssrc,
        fraction_lost: 0,
        rtt: Some(std::time::Duration::from_millis(ms)),
        highest_seq: None,
        jitter: 0,
    };
    // The least round trip, then one 600 ms over it: first from a stranger's connection.
    n.now = n.now + std::time::Duration::from_millis(500);
    n.core.handle_interleaved_rtcp(n.now, ConnId(1), 1, &[report(20)]);
    n.now = n.now + std::time::Duration::from_secs(2);
    n.core.handle_conn_opened(ConnId(2));
    n.core.handle_interleaved_rtcp(n.now, ConnId(2), 1, &[report(620)]);
    let out = n.outputs();
    assert!(!out.iter().any(|o| matches!(o, NodeOutput::Send(StreamOp::Stop { .. }))), "{out:?}");
    // The same report on the session's connection: a switch down at the next seek point.
    n.core.handle_interleaved_rtcp(n.now, ConnId(1), 1, &[report(620)]);
    let out = n.outputs();
    assert!(
        out.iter().any(|o| matches!(o,
            NodeOutput::Send(StreamOp::Stop { run, cutoff: Some(_), .. }) if *run == run1)),
        "{out:?}"
    );
}

/// The admission asked for in `out`, of the object named `name`.
fn admission_of(out: &[NodeOutput], name: &str) -> (ShareKey, u32) {
    out.iter()
        .find_map(|o| match o {
            NodeOutput::Admit { key, open, name: n, .. } if n == name => Some((*key, *open)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("an admission of {name}: {out:?}"))
}

/// Degrade instead of refuse, on a ladder of two (`clip`, `clip~low`) where each new session
/// finds the node fuller: the first PLAY gets the high rendition; the second, refused it, the
/// low one; the third, refused both, waits while the first steps down at its next seek point
/// (a switch like a report's), and is admitted once that frees the room; the fourth, with
/// nothing left to step down, is refused (453). Counted in the node's stats.
#[test]
fn degrade_admits_lower_and_steps_a_playing_session_down_to_make_room() {
    let full = || Some(Decision::Reject(Refusal::TooManyStreams { limit: 1 }));
    let mut n = Node::configured(Clip::new(6, |_| Replicas::single(DiskId(0))).with_ladder(), true);

    // A: the high rendition, admitted.
    n.set_up();
    let key = n.play_asks_admission();
    n.core.handle_admitted(n.now, key.0, key.1, Some(Decision::Admit));
    let out = n.outputs();
    assert_eq!(status(&out), vec![StatusCode::Ok]);
    let (a, run_a) = run_started(&out).expect("A's run");

    // B: refused the high rendition, admitted at the low one.
    n.now = n.now + std::time::Duration::from_millis(500);
    n.session = None;
    n.set_up();
    let key = n.play_asks_admission();
    n.core.handle_admitted(n.now, key.0, key.1, full());
    let out = n.outputs();
    assert!(status(&out).is_empty(), "no answer yet: {out:?}");
    let key = admission_of(&out, "clip~low");
    n.core.handle_admitted(n.now, key.0, key.1, Some(Decision::Admit));
    assert_eq!(status(&n.outputs()), vec![StatusCode::Ok]);
    assert_eq!(n.core.abr_stats().admitted_degraded, 1);

    // C: refused both: A (the only session above the lowest rung) steps down at its next
    // seek point; C waits.
    n.now = n.now + std::time::Duration::from_millis(500);
    n.session = None;
    n.set_up();
    let key = n.play_asks_admission();
    n.core.handle_admitted(n.now, key.0, key.1, full());
    let key = admission_of(&n.outputs(), "clip~low");
    n.core.handle_admitted(n.now, key.0, key.1, full());
    let out = n.outputs();
    assert!(status(&out).is_empty(), "C waits for room: {out:?}");
    assert!(
        out.iter().any(|o| matches!(o, NodeOutput::Send(StreamOp::Stop { run, before: Some(_), .. }) if *run == run_a)),
        "A stops before a key frame: {out:?}"
    );
    assert_eq!(n.core.abr_stats().stepped_down_for_room, 1);

    // A stopped at 2 s: it reopens on the low rendition, and once admitted there the room is
    // free: C is tried again and admitted.
    n.now = n.now + std::time::Duration::from_secs(1);
    let at = Position::at(Gsn(200), MediaTime::from_nanos(2 * SECOND));
    n.core.handle_share_stopped(n.now, a, run_a, RunReport { next: Some(at), last_sent: None });
    let key = admission_of(&n.outputs(), "clip~low");
    n.core.handle_admitted(n.now, key.0, key.1, Some(Decision::Admit));
    let out = n.outputs();
    assert!(
        out.iter()
            .any(|o| matches!(o, NodeOutput::Send(StreamOp::Play { stream, .. }) if *stream == a)),
        "A plays on, low: {out:?}"
    );
    let key = admission_of(&out, "clip~low");
    n.core.handle_admitted(n.now, key.0, key.1, Some(Decision::Admit));
    assert_eq!(status(&n.outputs()), vec![StatusCode::Ok], "C is answered");
    assert_eq!(n.core.abr_stats().switches_down, 1);

    // D: every session is on the lowest rung: refused.
    n.session = None;
    n.set_up();
    let key = n.play_asks_admission();
    n.core.handle_admitted(n.now, key.0, key.1, full());
    let key = admission_of(&n.outputs(), "clip~low");
    n.core.handle_admitted(n.now, key.0, key.1, full());
    assert_eq!(status(&n.outputs()), vec![StatusCode::NotEnoughBandwidth]);
    let playing: Vec<String> = n.core.sessions().into_iter().map(|s| s.object).collect();
    assert_eq!(playing.iter().filter(|o| *o == "clip~low").count(), 3, "{playing:?}");
}

/// A step up closes the session's reservation and asks for the higher one; if that is refused
/// the rung it left is asked for again. Meanwhile no other session's admission goes to the
/// scheduler, so none can take the room the old rung needs back: B's PLAY is held until A's
/// step up is decided, then asked for.
#[test]
fn admissions_wait_while_a_step_up_is_decided() {
    let mut n = Node::with(Clip::new(60, |_| Replicas::single(DiskId(0))).with_ladder());
    n.set_up();
    let ssrc = n.ssrc.expect("the SETUP's SSRC");
    let key = n.play_asks_admission();
    n.core.handle_admitted(n.now, key.0, key.1, Some(Decision::Admit));
    let (a, mut run) = run_started(&n.outputs()).expect("A's run");
    // Down to the low rendition on a lossy report, then up after clean reports.
    let reports = |n: &mut Node, secs: u64, fraction_lost: u8| {
        let mut stop = None;
        for _ in 0..secs {
            n.now = n.now + std::time::Duration::from_secs(1);
            let rtt = Some(std::time::Duration::from_millis(20));
            let fb = ReceiverFeedback { ssrc, fraction_lost, rtt, highest_seq: None, jitter: 0 };
            n.core.handle_rtcp(n.now, &[ssrc], &[fb], &[]);
            stop = n.outputs().into_iter().find_map(|o| match o {
                NodeOutput::Send(StreamOp::Stop { cutoff: Some(c), before: Some(b), .. }) => {
                    Some(Position::at(b, c))
                }
                _ => None,
            });
            if stop.is_some() {
                break;
            }
        }
        stop.expect("a switch")
    };
    let at = reports(&mut n, 1, 64);
    n.core.handle_share_stopped(n.now, a, run, RunReport { next: Some(at), last_sent: None });
    let key = admission_of(&n.outputs(), "clip~low");
    n.core.handle_admitted(n.now, key.0, key.1, Some(Decision::Admit));
    run = n
        .outputs()
        .iter()
        .find_map(|o| match o {
            NodeOutput::Send(StreamOp::Play { play, .. }) => Some(play.run),
            _ => None,
        })
        .expect("A's low run");
    let at = reports(&mut n, 30, 0);
    n.core.handle_share_stopped(n.now, a, run, RunReport { next: Some(at), last_sent: None });
    let up = admission_of(&n.outputs(), "clip");

    // B's PLAY meanwhile: held.
    n.session = None;
    n.set_up();
    n.request(Method::Play, "rtsp://127.0.0.1:8554/clip", &[]);
    let asked: Vec<String> = n
        .outputs()
        .into_iter()
        .filter_map(|o| match o {
            NodeOutput::Admit { name, .. } => Some(name),
            _ => None,
        })
        .collect();
    assert!(asked.is_empty(), "B is held, not asked for: {asked:?}");

    // A's step up refused: A's low rung is asked for again, B's still held; once A has it
    // back, B's admission goes ahead.
    let full = Refusal::TooManyStreams { limit: 1 };
    n.core.handle_admitted(n.now, up.0, up.1, Some(Decision::Reject(full)));
    let out = n.outputs();
    let back = admission_of(&out, "clip~low");
    assert_eq!(out.iter().filter(|o| matches!(o, NodeOutput::Admit { .. })).count(), 1, "{out:?}");
    n.core.handle_admitted(n.now, back.0, back.1, Some(Decision::Admit));
    let out = n.outputs();
    admission_of(&out, "clip");
    assert_eq!(n.core.abr_stats().step_ups_refused, 1);
}

/// A chunk of a live feed: `index`, with a seek point at its first packet when `key`.
fn live_chunk(index: u32, key: bool) -> isochron_live::ChunkInfo {
    let gsn = u64::from(index) * 10;
    let first = Position::at(Gsn(gsn), MediaTime::from_nanos(gsn * SECOND / 100));
    isochron_live::ChunkInfo {
        index: isochron_base::BlockIndex(index),
        first,
        keys: if key { vec![first] } else { Vec::new() },
        packets: 10,
        last_time: first.time,
    }
}

/// The chunks handed to viewers in `out`, as (stream, chunk index).
fn delivered(out: &[NodeOutput]) -> Vec<(StreamId, u32)> {
    out.iter()
        .filter_map(|o| match o {
            NodeOutput::Deliver { stream, index, .. } => Some((*stream, index.0)),
            _ => None,
        })
        .collect()
}

/// Opens feed 7 (one 90 kHz track) on `n`'s node and sets a session up: the feed and its
/// anchor.
fn open_feed(n: &mut Node) -> (isochron_base::ObjectId, isochron_sched::Anchor) {
    let feed = isochron_base::ObjectId(7);
    let anchor = isochron_sched::Anchor { wall: n.now, media: MediaTime::ZERO };
    let tracks = vec![(90_000, 33)];
    n.core.handle_feed(n.now, isochron_node::FeedEvent::Opened { feed, anchor, tracks });
    n.set_up();
    (feed, anchor)
}

/// `docs/design/live.md`, step 2: a PLAY of a feed being published joins its live edge, with no
/// admission and no disk read. It is answered once there is a seek point to start at, with the
/// RTP-Info of that packet, before its run starts; the chunks since that seek point go to it a
/// start delay later, then each chunk as it comes; the feed's end is its BYE; a TEARDOWN
/// removes its stream and it is handed nothing more.
#[test]
fn a_viewer_of_a_live_feed_joins_at_its_newest_seek_point_and_follows_its_edge() {
    use isochron_node::FeedEvent;
    let mut n = Node::new();
    let (feed, anchor) = open_feed(&mut n);
    n.core.handle_feed(n.now, FeedEvent::Chunk { feed, info: live_chunk(0, false) });
    // No viewer can start before a seek point: the chunk is dropped at once.
    let out = n.outputs();
    assert!(matches!(out.as_slice(), [NodeOutput::Evict { index, .. }] if index.0 == 0), "{out:?}");
    n.request(Method::Play, "rtsp://127.0.0.1:8554/clip", &[]);
    let out = n.outputs();
    assert!(
        matches!(out.as_slice(), [NodeOutput::AddStream { setup, .. }] if setup.last_block.0 == u32::MAX),
        "a stream with no last block, no admission, no answer yet: {out:?}"
    );
    n.now = n.now + std::time::Duration::from_millis(20);
    n.core.handle_feed(n.now, FeedEvent::Chunk { feed, info: live_chunk(1, true) });
    let out = n.outputs();
    let answer = out.iter().position(|o| matches!(o, NodeOutput::Respond { .. })).unwrap();
    let started = out.iter().position(|o| matches!(o, NodeOutput::Send(StreamOp::Play { .. })));
    assert!(started.is_some_and(|s| s > answer), "answered, then started: {out:?}");
    assert_eq!(status(&out), vec![StatusCode::Ok]);
    // RTP-Info: the seek point's number (the GSN of an MPEG-TS feed) after the offset.
    let NodeOutput::Send(StreamOp::Play { stream, play }) = &out[started.unwrap()] else {
        unreachable!()
    };
    let stream = *stream;
    assert_eq!(play.start.gsn, Gsn(10));
    assert_eq!(play.anchor, Some(anchor));
    let seq = rtp_info_seq(response(&out).unwrap());
    assert_eq!(seq, play.seq_offsets[0].wrapping_add(10));
    assert!(delivered(&out).is_empty(), "the first chunks wait for the start delay: {out:?}");
    n.now = n.now + std::time::Duration::from_millis(20);
    n.core.handle_feed(n.now, FeedEvent::Chunk { feed, info: live_chunk(2, false) });
    assert!(delivered(&n.outputs()).is_empty());
    n.now = n.now + std::time::Duration::from_millis(20);
    n.core.handle_feed(n.now, FeedEvent::Chunk { feed, info: live_chunk(3, false) });
    assert_eq!(delivered(&n.outputs()), vec![(stream, 1), (stream, 2), (stream, 3)]);
    n.core.handle_feed(n.now, FeedEvent::Chunk { feed, info: live_chunk(4, false) });
    assert_eq!(delivered(&n.outputs()), vec![(stream, 4)]);
    // The feed ends: the viewer's stream ends after the last chunk (its BYE after its last
    // packet).
    n.core.handle_feed(n.now, FeedEvent::Ended { feed });
    let out = n.outputs();
    assert!(
        out.iter()
            .any(|o| matches!(o, NodeOutput::Send(StreamOp::Last { last, .. }) if last.0 == 4)),
        "{out:?}"
    );
    n.request(Method::Teardown, "rtsp://127.0.0.1:8554/clip", &[]);
    let out = n.outputs();
    assert!(out.iter().any(|o| matches!(o, NodeOutput::Send(StreamOp::Remove { .. }))), "{out:?}");
    assert_eq!(status(&out), vec![StatusCode::Ok]);
}

/// A PLAY of a feed that ends before its first seek point is answered (not left waiting).
#[test]
fn a_viewer_waiting_for_a_key_frame_is_answered_when_the_feed_ends() {
    use isochron_node::FeedEvent;
    let mut n = Node::new();
    let (feed, _) = open_feed(&mut n);
    n.request(Method::Play, "rtsp://127.0.0.1:8554/clip", &[]);
    assert!(status(&n.outputs()).is_empty(), "waits for a key frame");
    n.core.handle_feed(n.now, FeedEvent::Ended { feed });
    let out = n.outputs();
    assert_eq!(status(&out), vec![StatusCode::InternalServerError], "{out:?}");
}

/// Time-shift further back than the edge keeps, on a single node (`docs/design/live.md`): a PLAY
/// whose `Range` starts before the edge's oldest seek point plays the feed's recording from
/// disk, admitted at the scheduler like any stored object, its stream with no last block; each
/// commit grows the scheduler's plan of it; `npt=now-` takes the session to the edge (the
/// recording's stream goes first), a start before the window back to disk; the feed's end gives
/// the stream its last block (its BYE follows it).
#[test]
fn a_viewer_going_back_further_than_the_edge_keeps_plays_the_recording_as_it_grows() {
    use isochron_node::FeedEvent;
    const URI: &str = "rtsp://127.0.0.1:8554/clip";
    let mut n = Node::with(Clip::new(2, |_| Replicas::single(DiskId(0))));
    n.clip.live.store(true, std::sync::atomic::Ordering::Relaxed);
    let (feed, _) = open_feed(&mut n);
    // The edge keeps the feed from 2 s on (chunks of 0.1 s), a seek point at its first chunk;
    // the recording has 2 s committed (seek points at 0 and 1 s).
    n.core.handle_feed(n.now, FeedEvent::Chunk { feed, info: live_chunk(20, true) });
    n.core.handle_feed(n.now, FeedEvent::Chunk { feed, info: live_chunk(21, false) });
    n.outputs();
    let admitted = |n: &mut Node, blocks: usize| {
        let out = n.outputs();
        let [NodeOutput::Admit { key, open, req, .. }] = out.as_slice() else {
            panic!("admitted as a stored object is: {out:?}")
        };
        assert_eq!(req.plan.blocks.len(), blocks, "as committed");
        n.core.handle_admitted(n.now, *key, *open, Some(Decision::Admit));
        n.outputs()
    };
    let removed_before_added = |out: &[NodeOutput]| {
        let removed =
            out.iter().position(|o| matches!(o, NodeOutput::Send(StreamOp::Remove { .. })));
        let added = out.iter().position(|o| matches!(o, NodeOutput::AddStream { .. }));
        removed.is_some_and(|r| added.is_none_or(|a| r < a))
    };

    n.request(Method::Play, URI, &[("Range", "npt=1.5-")]);
    let out = admitted(&mut n, 2);
    assert!(
        out.iter().any(
            |o| matches!(o, NodeOutput::AddStream { setup, .. } if setup.last_block.0 == u32::MAX)
        ),
        "no last block while the feed runs: {out:?}"
    );
    assert_eq!(status(&out), vec![StatusCode::Ok]);
    assert_eq!(run_sent(&out).map(|r| r.start.gsn), Some(Gsn(common::PER_BLOCK)), "from 1 s");

    // A commit: the scheduler's plan grows; one that adds nothing changes nothing.
    n.clip.grow(4);
    n.core.handle_feed(n.now, FeedEvent::Committed { feed });
    let out = n.outputs();
    assert!(
        matches!(out.as_slice(), [NodeOutput::Grow { plan }] if plan.blocks.len() == 4),
        "{out:?}"
    );
    n.core.handle_feed(n.now, FeedEvent::Committed { feed });
    assert!(n.outputs().is_empty());

    // To the edge: the recording's stream and reservation go, the edge's viewer comes.
    n.request(Method::Play, URI, &[("Range", "npt=now-")]);
    let out = n.outputs();
    assert!(removed_before_added(&out), "{out:?}");
    assert!(out.iter().any(|o| matches!(o, NodeOutput::Read(ReadOp::Close { .. }))), "{out:?}");
    assert_eq!(status(&out), vec![StatusCode::Ok], "joined at the edge's seek point");

    // Back before the window: the edge's stream goes, the recording (4 blocks now) from 0.
    n.request(Method::Play, URI, &[("Range", "npt=0.5-")]);
    let before = n.outputs();
    assert!(removed_before_added(&before), "{before:?}");
    let (key, open) = admission_of(&before, "clip");
    n.core.handle_admitted(n.now, key, open, Some(Decision::Admit));
    let out = n.outputs();
    assert_eq!(run_sent(&out).map(|r| r.start.gsn), Some(Gsn(0)), "{out:?}");

    // The feed ends, its recording committed to 5 blocks: the stream learns its last.
    n.clip.grow(5);
    n.core.handle_feed(n.now, FeedEvent::Ended { feed });
    let out = n.outputs();
    assert!(out.iter().any(|o| matches!(o, NodeOutput::Grow { plan } if plan.blocks.len() == 5)));
    assert!(
        out.iter()
            .any(|o| matches!(o, NodeOutput::Send(StreamOp::Last { last, .. }) if last.0 == 4)),
        "{out:?}"
    );
}
