//! `/metrics`: the server's counters in the Prometheus text exposition format, version 0.0.4.
//!
//! Why a module of its own: the HTTP handler gathers one [`Gathered`] snapshot from the owners of
//! the state (scheduler, sender, session manager, reorganiser, recorders); turning it into text is
//! a pure function, so the format can be checked by a unit test without a server.
//!
//! Conventions: every family has `# HELP` and `# TYPE` lines before its samples; counters end in
//! `_total` and only grow (per disk, while the disk is attached); rates are left to Prometheus
//! (`rate(isochron_disk_read_bytes_total[1m])`). Names the tests and `isochron bench` read
//! (`isochron_disk_bytes_total`, `isochron_admission_rejects_total`, …) are kept as they were;
//! labelled breakdowns are separate families so that summing a family never double-counts.

use std::fmt::Write as _;

use isochron_dataplane::pacer::LATENESS_BUCKETS_US;
use isochron_sched::admission::Refusal;

use crate::state::Gathered;

/// The metric kinds used here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Only grows.
    Counter,
    /// Goes up and down.
    Gauge,
    /// Cumulative buckets (`_bucket{le=…}`), `_sum` and `_count`.
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Counter => "counter",
            Self::Gauge => "gauge",
            Self::Histogram => "histogram",
        }
    }
}

/// A writer of the text format: families, then their samples.
#[derive(Debug, Default)]
pub(crate) struct Exposition {
    out: String,
}

impl Exposition {
    /// Starts family `isochron_{name}`.
    pub(crate) fn family(&mut self, name: &str, kind: Kind, help: &str) {
        debug_assert_eq!(kind == Kind::Counter, name.ends_with("_total"), "{name}");
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.out, "# HELP isochron_{name} {help}");
        let _ = writeln!(self.out, "# TYPE isochron_{name} {}", kind.as_str());
    }

    /// A sample of family `isochron_{name}` with `labels`.
    pub(crate) fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        let _ = write!(self.out, "isochron_{name}");
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let v = v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
                let _ = write!(self.out, "{k}=\"{v}\"");
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {}", format_value(value));
    }

    /// A family with one unlabelled sample.
    pub(crate) fn single(&mut self, name: &str, kind: Kind, help: &str, value: f64) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }

    /// The text.
    pub(crate) fn finish(self) -> String {
        self.out
    }
}

/// A value as the format spells it (`NaN`, `+Inf`, `-Inf`, or a Go-parsable float).
fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf".into() } else { "-Inf".into() }
    } else {
        v.to_string()
    }
}

/// Renders every metric of `g`.
#[allow(clippy::too_many_lines)] // one flat list of metrics reads better than pieces
pub(crate) fn render(g: &Gathered) -> String {
    use Kind::{Counter, Gauge, Histogram};
    let mut e = Exposition::default();
    let (send, sched) = (&g.send, &g.sched);
    let c = sched.stats.cache;
    let st = &sched.stats;

    e.single("sessions", Gauge, "RTSP sessions.", g.sessions.len() as f64);
    e.family("sessions_by_state", Gauge, "RTSP sessions by state.");
    for state in ["ready", "playing", "paused"] {
        let n = g.sessions.iter().filter(|s| s.state == state).count();
        e.sample("sessions_by_state", &[("state", state)], n as f64);
    }
    e.family(
        "sessions_playing_by_object",
        Gauge,
        "RTSP sessions playing, by the object (rendition) they play.",
    );
    let mut by_object: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for s in g.sessions.iter().filter(|s| s.state == "playing") {
        *by_object.entry(s.object.as_str()).or_default() += 1;
    }
    for (object, n) in by_object {
        e.sample("sessions_playing_by_object", &[("object", object)], n as f64);
    }
    let abr = &g.abr;
    e.family("rendition_switches_total", Counter, "Switches between renditions, by direction.");
    e.sample("rendition_switches_total", &[("direction", "down")], abr.switches_down as f64);
    e.sample("rendition_switches_total", &[("direction", "up")], abr.switches_up as f64);
    e.single(
        "rendition_step_ups_refused_total",
        Counter,
        "Steps up to a higher rendition admission refused.",
        abr.step_ups_refused as f64,
    );
    e.single(
        "admitted_degraded_total",
        Counter,
        "PLAYs admitted at a lower rendition than they asked for (sched.degrade).",
        abr.admitted_degraded as f64,
    );
    e.single(
        "stepped_down_for_room_total",
        Counter,
        "Sessions stepped down a rendition to make room for a PLAY (sched.degrade).",
        abr.stepped_down_for_room as f64,
    );
    let t = &g.takeover;
    e.family(
        "takeovers_total",
        Counter,
        "What the cluster's takeover rules did on this node (docs/design/takeover.md): parts of \
         sessions taken over from a lost node, given back to one that returned, and this node's \
         own parts held back while another sent them.",
    );
    e.sample("takeovers_total", &[("event", "taken_over")], t.taken_over as f64);
    e.sample("takeovers_total", &[("event", "given_back")], t.given_back as f64);
    e.sample("takeovers_total", &[("event", "withheld")], t.withheld as f64);
    e.single("streams", Gauge, "Streams admitted by the scheduler.", sched.streams as f64);
    e.single("objects", Gauge, "Playable objects.", g.objects as f64);
    e.single("uptime_seconds", Gauge, "Seconds since the server started.", g.uptime_s);
    e.family("build_info", Gauge, "The server's version (always 1).");
    e.sample("build_info", &[("version", env!("CARGO_PKG_VERSION"))], 1.0);

    e.single("packets_sent_total", Counter, "RTP packets sent.", send.pacer.packets as f64);
    e.single(
        "payload_bytes_sent_total",
        Counter,
        "RTP payload bytes sent.",
        send.pacer.payload_bytes as f64,
    );
    e.single(
        "send_errors_total",
        Counter,
        "Datagrams the kernel refused.",
        send.send_errors as f64,
    );
    e.single("sendmmsg_calls_total", Counter, "sendmmsg calls.", send.syscalls as f64);
    let rtx = send.retransmit;
    e.single(
        "nacks_received_total",
        Counter,
        "RTCP generic NACKs (RFC 4585) received for this node's streams.",
        rtx.nacks as f64,
    );
    e.single(
        "retransmit_requested_total",
        Counter,
        "Sequence numbers asked for in NACKs.",
        rtx.requested as f64,
    );
    e.single(
        "retransmitted_packets_total",
        Counter,
        "Packets sent again in answer to a NACK.",
        rtx.resent as f64,
    );
    e.single(
        "retransmit_missed_total",
        Counter,
        "Sequence numbers asked for that this node did not send within the retransmission window.",
        rtx.missed as f64,
    );
    e.single(
        "nacks_unknown_stream_total",
        Counter,
        "NACKs for an SSRC none of this node's streams has.",
        rtx.unknown_stream as f64,
    );
    let reseq = send.reseq;
    e.single(
        "relay_reordered_total",
        Counter,
        "Relayed sessions' packets that reached their origin after a later one (sent in order).",
        reseq.reordered as f64,
    );
    e.single(
        "relay_duplicates_total",
        Counter,
        "Relayed sessions' packets that reached their origin twice (the second dropped).",
        reseq.duplicates as f64,
    );
    e.single(
        "relay_nacked_total",
        Counter,
        "Sequence numbers the origins of relayed sessions asked the other nodes for again.",
        reseq.nacked as f64,
    );
    e.single(
        "relay_lost_packets_total",
        Counter,
        "Relayed sessions' packets that never reached their origin, even when asked for again \
         (the client never got them).",
        reseq.lost as f64,
    );
    e.single(
        "relay_stale_total",
        Counter,
        "Relayed packets that came after their number was given up or before their run (dropped).",
        reseq.stale as f64,
    );
    e.single(
        "interleaved_lost_total",
        Counter,
        "RTP frames an RTSP connection's queue refused (a defect: room is reserved for them).",
        send.interleaved_lost as f64,
    );
    e.single(
        "relay_cut_streams_total",
        Counter,
        "Relayed TCP streams whose connection was closed because packets were lost on the way.",
        send.relay_cut as f64,
    );
    e.single(
        "underruns_total",
        Counter,
        "Packets due whose block was not in memory.",
        send.pacer.underruns as f64,
    );
    e.single(
        "pace_changes_total",
        Counter,
        "Changes of a stream's pace (MTFC rate requests, SET_PARAMETER x-isochron-rate).",
        send.pacer.pace_changes as f64,
    );
    e.single(
        "packet_lateness_max_seconds",
        Gauge,
        "Largest delay of a packet past its send time (of streams no client held back).",
        send.pacer.lateness_us_max as f64 / 1e6,
    );
    e.family(
        "packet_lateness_seconds",
        Histogram,
        "Delay of packets past their send times (every sender shard).",
    );
    let mut below = 0;
    for (bound, n) in LATENESS_BUCKETS_US.iter().zip(send.pacer.lateness_buckets) {
        below += n;
        let le = format!("{}", *bound as f64 / 1e6);
        e.sample("packet_lateness_seconds_bucket", &[("le", &le)], below as f64);
    }
    // Packets a slow TCP client held back are not timed (`PacerStats::held_packets`).
    let timed = send.pacer.packets.saturating_sub(send.pacer.held_packets) as f64;
    e.sample("packet_lateness_seconds_bucket", &[("le", "+Inf")], timed);
    e.sample("packet_lateness_seconds_sum", &[], send.pacer.lateness_us_sum as f64 / 1e6);
    e.sample("packet_lateness_seconds_count", &[], timed);
    e.single(
        "packets_held_by_clients_total",
        Counter,
        "RTP packets of streams a slow TCP client held back (not in packet_lateness_seconds).",
        send.pacer.held_packets as f64,
    );
    e.single(
        "release_timeouts_total",
        Counter,
        "Shares of a node that stood still that took their part back on their own word because the \
         point to take it back at did not come in time (docs/design/takeover.md).",
        send.pacer.release_timeouts as f64,
    );

    e.single(
        "disk_bytes_total",
        Counter,
        "Block bytes delivered from disk reads (Yima B_disk).",
        c.bytes_from_disk as f64,
    );
    e.single(
        "cache_bytes_total",
        Counter,
        "Block bytes delivered from the cache (Yima B_cache).",
        c.bytes_from_cache as f64,
    );
    e.single("cache_used_bytes", Gauge, "Bytes held by the block cache.", sched.cache_bytes as f64);
    e.single(
        "resident_objects",
        Gauge,
        "Objects whose first block is kept in memory (or being read to be).",
        st.resident_objects as f64,
    );
    for (name, help, v) in [
        ("cache_hits_total", "Block requests answered from the cache.", c.hits),
        ("cache_misses_total", "Block requests that needed a disk read.", c.misses),
        (
            "cache_coalesced_total",
            "Block requests that joined a disk read already in flight.",
            c.coalesced,
        ),
        ("cache_evictions_total", "Cached blocks evicted to make room.", c.evictions),
        ("reads_total", "Block reads issued.", st.reads),
        (
            "resident_reads_total",
            "Reads of objects' first blocks, kept in memory so that starts wait for no disk.",
            st.resident_reads,
        ),
        ("writes_total", "Recording block writes issued.", st.writes),
        ("late_reads_total", "Block reads finished after their deadline.", st.late_reads),
        ("failed_reads_total", "Block reads that failed (each copy's failure).", st.failed_reads),
        (
            "read_failovers_total",
            "Failed real-time reads re-issued to another copy of the block.",
            st.failovers,
        ),
        ("missed_deadlines_total", "Blocks not in memory by their deadline.", st.missed_deadlines),
        (
            "missed_write_deadlines_total",
            "Recorded blocks not on disk by their deadline.",
            st.missed_write_deadlines,
        ),
        ("cycles_total", "Scheduler cycles ended.", st.cycles),
        (
            "cycles_with_misses_total",
            "Cycles in which a deadline was missed.",
            st.cycles_with_misses,
        ),
        ("admission_accepts_total", "Streams admitted.", st.admitted),
        ("admission_rejects_total", "Streams rejected.", st.rejected),
    ] {
        e.single(name, Counter, help, v as f64);
    }
    e.family(
        "admission_rejects_by_reason_total",
        Counter,
        "Streams rejected, by the kind of refusal (bandwidth, no_profile, no_disks, \
         too_many_streams, duplicate_stream).",
    );
    for kind in Refusal::KINDS {
        let n = sched.rejects_by_reason.iter().find(|(k, _)| *k == kind).map_or(0, |(_, n)| *n);
        e.sample("admission_rejects_by_reason_total", &[("reason", kind)], n as f64);
    }

    let h = &sched.http;
    for (name, help, v) in [
        ("http_block_requests_total", "Blocks HTTP delivery asked the scheduler for.", h.requests),
        (
            "http_cache_hits_total",
            "HTTP block requests answered from the block cache.",
            h.cache_hits,
        ),
        (
            "http_disk_reads_total",
            "Non-real-time disk reads issued for HTTP delivery.",
            h.disk_reads,
        ),
        ("http_failed_reads_total", "HTTP delivery's block reads that failed.", h.failed),
        (
            "http_read_failovers_total",
            "HTTP delivery's failed reads re-issued to another copy of the block.",
            h.failovers,
        ),
        ("http_block_bytes_total", "Block bytes handed to HTTP responses.", h.bytes),
    ] {
        e.single(name, Counter, help, v as f64);
    }
    e.single(
        "http_reads_in_flight",
        Gauge,
        "HTTP delivery's disk reads queued or in service.",
        h.in_flight as f64,
    );

    let rec = &g.recordings;
    e.single("recordings", Gauge, "Recordings in progress.", rec.active as f64);
    e.single(
        "recorded_bytes_total",
        Counter,
        "Request body bytes accepted by recordings.",
        rec.bytes as f64,
    );
    e.single("recordings_committed_total", Counter, "Recordings committed.", rec.committed as f64);
    e.single(
        "recordings_failed_total",
        Counter,
        "Recordings that failed after admission (nothing committed).",
        rec.failed as f64,
    );

    let reorg = &g.reorg;
    e.single(
        "reorg_running",
        Gauge,
        "1 while a disk reorganisation runs.",
        f64::from(u8::from(reorg.state == "running")),
    );
    e.family("reorg_state", Gauge, "The reorganiser's state: 1 for the current one, else 0.");
    for state in ["idle", "running", "failed"] {
        e.sample("reorg_state", &[("state", state)], f64::from(u8::from(reorg.state == state)));
    }
    e.single(
        "reorg_moved_blocks",
        Gauge,
        "Blocks the current (or last) reorganisation has copied.",
        reorg.moved as f64,
    );
    e.single(
        "reorg_total_blocks",
        Gauge,
        "Blocks the current (or last) reorganisation must copy.",
        reorg.total as f64,
    );
    e.single(
        "reorg_remaining_blocks",
        Gauge,
        "Blocks the current reorganisation has still to copy.",
        reorg.total.saturating_sub(reorg.moved) as f64,
    );
    e.single(
        "reorg_moved_bytes",
        Gauge,
        "Bytes the current (or last) reorganisation has copied.",
        reorg.bytes as f64,
    );
    let r = &reorg.repair;
    for (name, help, v) in [
        (
            "repair_requested_total",
            "Bad copies reported for repair (a read of them failed over to another copy).",
            r.requested,
        ),
        (
            "repaired_copies_total",
            "Bad copies rewritten from a good copy and verified.",
            r.repaired,
        ),
        ("repair_failed_total", "Repairs of bad copies that failed.", r.failed),
        ("repaired_bytes_total", "Bytes of copies rewritten by repairs.", r.bytes),
    ] {
        e.single(name, Counter, help, v as f64);
    }
    e.single(
        "repairs_in_progress",
        Gauge,
        "Repairs of bad copies running now.",
        r.in_progress as f64,
    );
    e.single(
        "bad_copies",
        Gauge,
        "Copies the scheduler avoids because a read of them failed, until repaired.",
        sched.bad_copies as f64,
    );

    let disks = &sched.disks;
    let ids: Vec<String> = disks.iter().map(|d| d.disk.0.to_string()).collect();
    let per_disk = |e: &mut Exposition, name: &str, kind, help, f: &dyn Fn(usize) -> f64| {
        e.family(name, kind, help);
        for (i, id) in ids.iter().enumerate() {
            e.sample(name, &[("disk", id)], f(i));
        }
    };
    per_disk(&mut e, "disk_queue_depth", Gauge, "Reads queued or in flight per disk.", &|i| {
        disks[i].queue as f64
    });
    per_disk(
        &mut e,
        "disk_reads_total",
        Counter,
        "Real-time block reads completed per disk.",
        &|i| disks[i].reads as f64,
    );
    per_disk(
        &mut e,
        "disk_read_bytes_total",
        Counter,
        "Bytes of real-time block reads completed per disk.",
        &|i| disks[i].read_bytes as f64,
    );
    per_disk(
        &mut e,
        "disk_nrt_bytes_total",
        Counter,
        "Bytes of non-real-time IO (reorganisation copies) per disk.",
        &|i| disks[i].io.nrt_bytes as f64,
    );
    per_disk(&mut e, "disk_io_errors_total", Counter, "Failed IOs per disk.", &|i| {
        disks[i].io.errors as f64
    });
    e.family(
        "disk_busy_seconds_total",
        Counter,
        "Time each disk's IO thread spent serving IO, by class (rt: streams and recordings, \
         nrt: reorganisation).",
    );
    for (d, id) in disks.iter().zip(&ids) {
        e.sample(
            "disk_busy_seconds_total",
            &[("disk", id), ("class", "rt")],
            d.io.rt_busy.as_secs_f64(),
        );
        e.sample(
            "disk_busy_seconds_total",
            &[("disk", id), ("class", "nrt")],
            d.io.nrt_busy.as_secs_f64(),
        );
    }
    e.family(
        "disk_admitted_utilisation",
        Gauge,
        "Predicted share of each disk's real-time cycle time in use by admitted streams, 0..1.",
    );
    for (d, u) in &sched.utilisation {
        e.sample("disk_admitted_utilisation", &[("disk", &d.0.to_string())], *u);
    }
    e.finish()
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashSet};
    use std::time::Duration;

    use isochron_base::DiskId;
    use isochron_dataplane::sched_thread::DiskSnapshot;
    use isochron_server::sessions::SessionInfo;

    use super::*;

    /// What a parsed exposition holds: each family's type, and every sample by name and labels.
    #[derive(Debug, Default)]
    struct Parsed {
        types: BTreeMap<String, String>,
        samples: BTreeMap<String, f64>,
    }

    fn is_name(s: &str) -> bool {
        let mut chars = s.chars();
        chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    }

    fn parse_value(s: &str) -> Result<f64, String> {
        match s {
            "NaN" => Ok(f64::NAN),
            "+Inf" => Ok(f64::INFINITY),
            "-Inf" => Ok(f64::NEG_INFINITY),
            _ => s.parse().map_err(|e| format!("bad value {s:?}: {e}")),
        }
    }

    /// A sample's labels, unescaped, in order.
    type Labels = Vec<(String, String)>;

    /// `{k="v",…}` at the start of `s`: the labels (unescaped) and the rest of the line.
    fn parse_labels(s: &str) -> Result<(Labels, &str), String> {
        let mut labels = Vec::new();
        let mut rest = s.strip_prefix('{').ok_or("no {")?;
        loop {
            if let Some(r) = rest.strip_prefix('}') {
                return Ok((labels, r));
            }
            let (name, r) = rest.split_once("=\"").ok_or_else(|| format!("bad label in {s:?}"))?;
            if !is_name(name) || name.starts_with("__") {
                return Err(format!("bad label name {name:?}"));
            }
            let mut value = String::new();
            let mut chars = r.char_indices();
            let end = loop {
                match chars.next() {
                    Some((_, '\\')) => match chars.next() {
                        Some((_, 'n')) => value.push('\n'),
                        Some((_, c @ ('\\' | '"'))) => value.push(c),
                        other => return Err(format!("bad escape {other:?} in {s:?}")),
                    },
                    Some((i, '"')) => break i,
                    Some((_, c)) => value.push(c),
                    None => return Err(format!("unterminated label value in {s:?}")),
                }
            };
            labels.push((name.to_string(), value));
            rest = &r[end + 1..];
            rest = rest.strip_prefix(',').unwrap_or(rest);
        }
    }

    /// Checks the text format 0.0.4 strictly enough to catch what a scraper would reject:
    /// comment syntax, one TYPE per family before its samples, contiguous families, valid names,
    /// labels and values, no duplicate series, counters named `_total`.
    fn parse(text: &str) -> Result<Parsed, String> {
        let mut p = Parsed::default();
        let mut helped = HashSet::new();
        let mut done: HashSet<String> = HashSet::new();
        let mut current: Option<String> = None;
        if !text.ends_with('\n') {
            return Err("no final newline".into());
        }
        for line in text.lines() {
            if let Some(c) = line.strip_prefix("# ") {
                let mut parts = c.splitn(3, ' ');
                let (kw, name, rest) = (parts.next(), parts.next(), parts.next());
                let name = name.ok_or_else(|| format!("comment without a name: {line:?}"))?;
                if !is_name(name) {
                    return Err(format!("bad metric name {name:?}"));
                }
                if current.as_deref() != Some(name) {
                    if let Some(prev) = current.take() {
                        done.insert(prev);
                    }
                    if done.contains(name) {
                        return Err(format!("family {name} is not contiguous"));
                    }
                    current = Some(name.to_string());
                }
                match kw {
                    Some("HELP") => {
                        if !helped.insert(name.to_string()) {
                            return Err(format!("two HELP lines for {name}"));
                        }
                    }
                    Some("TYPE") => {
                        let t = rest.ok_or("TYPE without a type")?;
                        if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&t) {
                            return Err(format!("bad type {t:?}"));
                        }
                        if p.samples.keys().any(|k| k.split('{').next() == Some(name)) {
                            return Err(format!("TYPE of {name} after its samples"));
                        }
                        if p.types.insert(name.to_string(), t.to_string()).is_some() {
                            return Err(format!("two TYPE lines for {name}"));
                        }
                        if t == "counter" && !name.ends_with("_total") {
                            return Err(format!("counter {name} does not end in _total"));
                        }
                    }
                    _ => return Err(format!("unknown comment {line:?}")),
                }
                continue;
            }
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let name_end = line.find(['{', ' ']).ok_or_else(|| format!("no value: {line:?}"))?;
            let name = &line[..name_end];
            if !is_name(name) {
                return Err(format!("bad metric name {name:?}"));
            }
            let of_histogram = current.as_deref().is_some_and(|f| {
                p.types.get(f).is_some_and(|t| t == "histogram")
                    && ["_bucket", "_sum", "_count"].iter().any(|s| name == format!("{f}{s}"))
            });
            if current.as_deref() != Some(name) && !of_histogram {
                return Err(format!("sample {name} outside its family (no TYPE before it?)"));
            }
            let (labels, rest) = if line[name_end..].starts_with('{') {
                parse_labels(&line[name_end..])?
            } else {
                (Vec::new(), &line[name_end..])
            };
            let mut fields = rest.trim_start_matches(' ').split(' ');
            let value = parse_value(fields.next().unwrap_or(""))?;
            if let Some(ts) = fields.next() {
                ts.parse::<i64>().map_err(|e| format!("bad timestamp {ts:?}: {e}"))?;
            }
            if fields.next().is_some() {
                return Err(format!("trailing fields: {line:?}"));
            }
            let mut names: Vec<&str> = labels.iter().map(|(k, _)| k.as_str()).collect();
            names.sort_unstable();
            if names.windows(2).any(|w| w[0] == w[1]) {
                return Err(format!("repeated label in {line:?}"));
            }
            let key = if labels.is_empty() {
                name.to_string()
            } else {
                let l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                format!("{name}{{{}}}", l.join(","))
            };
            if p.samples.insert(key, value).is_some() {
                return Err(format!("duplicate series: {line:?}"));
            }
        }
        Ok(p)
    }

    fn gathered() -> Gathered {
        let mut g = Gathered::default();
        g.sched.stats.cache.bytes_from_disk = 3 << 20;
        g.sched.stats.cache.bytes_from_cache = 1 << 20;
        g.sched.stats.cache.hits = 7;
        g.sched.stats.admitted = 4;
        g.sched.stats.rejected = 3;
        g.sched.rejects_by_reason = vec![("bandwidth", 2), ("no_disks", 1)];
        g.sched.disks = vec![
            DiskSnapshot {
                disk: DiskId(0),
                queue: 2,
                reads: 3,
                read_bytes: 3 << 20,
                ..Default::default()
            },
            DiskSnapshot {
                disk: DiskId(1),
                queue: 0,
                reads: 0,
                read_bytes: 0,
                ..Default::default()
            },
        ];
        g.sched.disks[0].io.rt_busy = Duration::from_millis(1500);
        g.sched.utilisation = vec![(DiskId(0), 0.25), (DiskId(1), f64::NAN)];
        g.send.pacer.packets = 1000;
        g.send.pacer.payload_bytes = 1_316_000;
        g.sessions = vec![SessionInfo {
            id: "abc".into(),
            stream: 1,
            object: "demo \"quoted\"\\".into(),
            state: "playing".into(),
            transport: "udp".into(),
            delivery: "bipartite".into(),
            client: "127.0.0.1:5000".into(),
            bitrate_bps: 2_000_000,
            missed_deadlines: 0,
            blocks_delivered: 3,
            position_s: 1.5,
            pace: 1.0,
            packets_sent: 1000,
            bytes_sent: 1_316_000,
        }];
        g.abr.switches_down = 2;
        g.abr.admitted_degraded = 1;
        g.reorg.state = "running".into();
        g.reorg.moved = 10;
        g.reorg.total = 40;
        g.reorg.repair.repaired = 3;
        g.sched.stats.failovers = 4;
        g.objects = 2;
        g.uptime_s = 12.5;
        g
    }

    #[test]
    fn the_exposition_parses_and_holds_the_values() {
        let text = render(&gathered());
        let p = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let v = |k: &str| *p.samples.get(k).unwrap_or_else(|| panic!("no {k} in\n{text}"));
        assert_eq!(v("isochron_sessions"), 1.0);
        assert_eq!(v("isochron_sessions_by_state{state=playing}"), 1.0);
        assert_eq!(v("isochron_rendition_switches_total{direction=down}"), 2.0);
        assert_eq!(v("isochron_admitted_degraded_total"), 1.0);
        assert_eq!(v("isochron_packets_sent_total"), 1000.0);
        assert_eq!(v("isochron_payload_bytes_sent_total"), 1_316_000.0);
        assert_eq!(v("isochron_disk_bytes_total"), f64::from(3u32 << 20));
        assert_eq!(v("isochron_cache_bytes_total"), f64::from(1u32 << 20));
        assert_eq!(v("isochron_cache_hits_total"), 7.0);
        assert_eq!(v("isochron_admission_accepts_total"), 4.0);
        assert_eq!(v("isochron_admission_rejects_total"), 3.0);
        assert_eq!(v("isochron_admission_rejects_by_reason_total{reason=bandwidth}"), 2.0);
        assert_eq!(v("isochron_admission_rejects_by_reason_total{reason=no_profile}"), 0.0);
        assert_eq!(v("isochron_disk_queue_depth{disk=0}"), 2.0);
        assert_eq!(v("isochron_disk_read_bytes_total{disk=0}"), f64::from(3u32 << 20));
        assert_eq!(v("isochron_disk_read_bytes_total{disk=1}"), 0.0);
        assert_eq!(v("isochron_disk_busy_seconds_total{disk=0,class=rt}"), 1.5);
        assert!(v("isochron_disk_admitted_utilisation{disk=1}").is_nan());
        assert_eq!(v("isochron_reorg_moved_blocks"), 10.0);
        assert_eq!(v("isochron_repaired_copies_total"), 3.0);
        assert_eq!(v("isochron_read_failovers_total"), 4.0);
        assert_eq!(v("isochron_reorg_remaining_blocks"), 30.0);
        assert_eq!(v("isochron_reorg_state{state=running}"), 1.0);
        assert_eq!(v("isochron_reorg_state{state=idle}"), 0.0);
        assert_eq!(p.types["isochron_disk_read_bytes_total"], "counter");
        assert_eq!(p.types["isochron_disk_queue_depth"], "gauge");
        // Every family has a HELP and a TYPE, and every counter is named `_total`.
        assert_eq!(text.matches("# HELP ").count(), p.types.len());
        for (name, t) in &p.types {
            assert_eq!(t == "counter", name.ends_with("_total"), "{name} is a {t}");
        }
    }

    #[test]
    fn labels_are_escaped() {
        let mut e = Exposition::default();
        e.family("x", Kind::Gauge, "A help text with a \\ backslash.");
        e.sample("x", &[("object", "a \"b\"\\\nc")], 1.0);
        let text = e.finish();
        assert!(text.contains(r#"isochron_x{object="a \"b\"\\\nc"} 1"#), "{text}");
        let p = parse(&text).unwrap();
        assert_eq!(p.samples.len(), 1);
    }

    #[test]
    fn the_checker_rejects_malformed_text() {
        for bad in [
            "isochron_x 1\n",                                                   // no TYPE
            "# TYPE isochron_x gauge\nisochron_x{a=\"1} 1\n",                   // unterminated
            "# TYPE isochron_x counter\nisochron_x 1\n", // counter without _total
            "# TYPE isochron_x gauge\nisochron_x one\n", // bad value
            "# TYPE isochron_x gauge\nisochron_x 1\nisochron_x 2\n", // duplicate series
            "# TYPE isochron_x gauge\n# TYPE isochron_y gauge\nisochron_x 1\n", // interleaved
        ] {
            assert!(parse(bad).is_err(), "accepted {bad:?}");
        }
    }
}
