//! The server's pacing, measured alone: this binary holds one test so that cargo runs nothing
//! else beside it, and the client dates each datagram with the kernel's receive time, so what is
//! measured is when the server sent it (the sender paces each packet by its PCR-derived send
//! time). A control thread measures the machine's own wake-up lateness in the
//! same run, and the bar is 50 ms on top of it: a VM with CPU steal delays every thread.

#![allow(clippy::print_stderr)] // tests report measurements on stderr

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use isochron_loadgen::Transport;

/// What one play of the clip measured.
struct Run {
    p50: f64,
    p99: f64,
    max: f64,
    machine_p99: f64,
    line: String,
}

/// Plays the whole clip once over UDP, checks its packets and RTCP, and measures the pacing.
fn play_once(server: &Server, vbr: &Path) -> Run {
    let idx = ts_index(vbr);
    let src = std::fs::read(vbr).unwrap();
    let url = server.url("vbr20");
    let control = MachineJitter::start();
    let (c, info) = runtime().block_on(async move {
        let (mut c, info) = start_play(&url, Transport::Udp).await;
        let got = c.collect(Duration::from_secs(5), Duration::from_secs(120)).await.unwrap();
        c.teardown().await.unwrap();
        (got, info)
    });
    let control = control.finish();
    assert!(c.sr, "an RTCP sender report arrived");
    assert!(c.bye, "an RTCP BYE ended the stream");
    c.check_contiguous().unwrap();
    assert_eq!(info.seq, Some(c.packets[0].header.sequence), "RTP-Info seq");
    assert_eq!(info.rtptime, Some(c.packets[0].header.timestamp), "RTP-Info rtptime");
    assert_same_bytes(&c.payload(), &src, "60 s clip");
    // Arrival time vs send time (from the file's PCR, relative to the first packet).
    let t0 = c.packets[0].at;
    let mut ts_packet = 0u64;
    let mut dev_ms: Vec<f64> = Vec::with_capacity(c.packets.len());
    for p in &c.packets {
        let send = idx.send_time(ts_packet).as_secs_f64();
        let arrive = p.at.duration_since(t0).as_secs_f64();
        dev_ms.push((arrive - send).abs() * 1e3);
        if std::env::var_os("PACING_TRACE").is_some() {
            eprintln!("trace {send:.4} {:.2}", (arrive - send) * 1e3);
        }
        ts_packet += (p.payload.len() / 188) as u64;
    }
    dev_ms.sort_by(f64::total_cmp);
    let q = |f: f64| quantile(&dev_ms, f);
    let (p50, p99, max) = (q(0.5), q(0.99), q(1.0));
    let machine_p99 = quantile(&control, 0.99);
    let line = format!(
        "pacing over {} packets: p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.2} ms; \
         the machine's own wake-up lateness over {} sleeps: p50 {:.2} ms, p99 {machine_p99:.2} ms, \
         max {:.2} ms; server: underruns {}, max packet lateness {} s",
        dev_ms.len(),
        control.len(),
        quantile(&control, 0.5),
        quantile(&control, 1.0),
        server.metric("isochron_underruns_total"),
        server.metric("isochron_packet_lateness_max_seconds"),
    );
    eprintln!("{line}");
    Run { p50, p99, max, machine_p99, line }
}

/// The bar: p99 within 50 ms of the send times, on top of the machine's own p99 wake-up
/// lateness in the same run. A shared VM's CPU steal comes in bursts that hit one thread and not
/// another, so one run may be unlucky: the clip is played up to three times and the test passes
/// when one run meets the bar (a pacer that is late fails every run).
#[test]
fn packets_leave_within_50ms_of_their_send_times_and_rtcp_brackets_the_stream() {
    let vbr = fixture("vbr20");
    let (_d, server) = serve_fixtures(&[&vbr], None);
    let mut runs = Vec::new();
    for _ in 0..3 {
        let r = play_once(&server, &vbr);
        let pass = r.p99 <= 50.0 + r.machine_p99;
        runs.push(r);
        if pass {
            return;
        }
    }
    let best = runs.iter().min_by(|a, b| a.p99.total_cmp(&b.p99)).unwrap();
    panic!(
        "in each of {} runs the p99 deviation exceeded 50 ms over the machine's own p99 \
         wake-up lateness; the best: p99 {:.2} ms (p50 {:.2}, max {:.2}) vs machine {:.2} ms\n{}",
        runs.len(),
        best.p99,
        best.p50,
        best.max,
        best.machine_p99,
        runs.iter().map(|r| r.line.as_str()).collect::<Vec<_>>().join("\n")
    );
}
