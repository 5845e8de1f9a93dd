//! The recent admission decisions, for `GET /api/v1/admission`, the dashboard and the per-reason
//! reject counters of `/metrics`.
//!
//! Why a log of its own: the scheduler's counters say *how many* streams were admitted or refused,
//! but an operator looking at a refusal wants *which* request, at what rate, and why. Every
//! admission (a playing stream's and a recording's) is decided on the scheduler thread, so that
//! thread owns this log and records each decision where it is made: one owner, no lock. It is a
//! plain value (sans-IO): the thread passes the wall-clock time in.

use std::collections::{BTreeMap, VecDeque};

use isochron_base::{BitRate, StreamId};
use isochron_sched::Decision;
use serde::Serialize;

/// Decisions kept ([`AdmissionLog::new`]'s default capacity).
pub const DEFAULT_CAPACITY: usize = 256;

/// What was asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AdmissionKind {
    /// A stream to play (an RTSP PLAY).
    Play,
    /// A recording (an HTTP PUT).
    Record,
}

/// One admission request and its outcome, as `GET /api/v1/admission` shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AdmissionEntry {
    /// A sequence number, increasing from 1 (tells a client which entries it has already seen).
    pub seq: u64,
    /// When the decision was made, milliseconds since the Unix epoch.
    pub time_unix_ms: u64,
    /// The stream the request was for.
    pub stream: u64,
    /// The object's name.
    pub object: String,
    /// Play or record.
    pub kind: AdmissionKind,
    /// The rate the admission policy tested, bit/s (the peak or the average, by policy).
    pub rate_bps: u64,
    /// The declared mean rate, bit/s.
    pub avg_bitrate_bps: u64,
    /// The declared peak rate, bit/s.
    pub peak_bitrate_bps: u64,
    /// `admit` or `reject`.
    pub verdict: &'static str,
    /// The refusal's kind ([`isochron_sched::admission::Refusal::kind`]); `None` when admitted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
    /// The refusal in words, with the numbers; `None` when admitted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// One admission request, as the scheduler thread sees it.
#[derive(Clone, Debug)]
pub struct AdmissionRequest<'a> {
    /// The stream.
    pub stream: StreamId,
    /// The object's name.
    pub object: &'a str,
    /// Play or record.
    pub kind: AdmissionKind,
    /// Declared mean rate.
    pub avg_bitrate: BitRate,
    /// Declared peak rate.
    pub peak_bitrate: BitRate,
    /// Whether the policy tests the peak rate (otherwise the mean).
    pub uses_peak: bool,
}

/// The last decisions and the refusals counted by kind.
#[derive(Clone, Debug)]
pub struct AdmissionLog {
    entries: VecDeque<AdmissionEntry>,
    capacity: usize,
    next_seq: u64,
    rejects_by_reason: BTreeMap<&'static str, u64>,
}

impl Default for AdmissionLog {
    fn default() -> Self {
        Self::new(DEFAULT_CAPACITY)
    }
}

impl AdmissionLog {
    /// An empty log keeping the last `capacity` decisions (at least one).
    #[must_use]
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            entries: VecDeque::with_capacity(capacity),
            capacity,
            next_seq: 1,
            rejects_by_reason: BTreeMap::new(),
        }
    }

    /// Records `decision` on `req`, made at `time_unix_ms`.
    pub fn record(&mut self, time_unix_ms: u64, req: &AdmissionRequest<'_>, decision: &Decision) {
        let (verdict, reason, detail) = match decision {
            Decision::Admit => ("admit", None, None),
            Decision::Reject(r) => {
                *self.rejects_by_reason.entry(r.kind()).or_default() += 1;
                ("reject", Some(r.kind()), Some(r.to_string()))
            }
        };
        if self.entries.len() == self.capacity {
            self.entries.pop_front();
        }
        let rate = if req.uses_peak { req.peak_bitrate } else { req.avg_bitrate };
        self.entries.push_back(AdmissionEntry {
            seq: self.next_seq,
            time_unix_ms,
            stream: req.stream.0,
            object: req.object.to_string(),
            kind: req.kind,
            rate_bps: rate.0,
            avg_bitrate_bps: req.avg_bitrate.0,
            peak_bitrate_bps: req.peak_bitrate.0,
            verdict,
            reason,
            detail,
        });
        self.next_seq += 1;
    }

    /// The kept decisions, oldest first.
    pub fn entries(&self) -> impl DoubleEndedIterator<Item = &AdmissionEntry> + '_ {
        self.entries.iter()
    }

    /// The last `n` decisions, newest first.
    #[must_use]
    pub fn latest(&self, n: usize) -> Vec<AdmissionEntry> {
        self.entries.iter().rev().take(n).cloned().collect()
    }

    /// Refusals since start, by kind, in name order.
    #[must_use]
    pub fn rejects_by_reason(&self) -> Vec<(&'static str, u64)> {
        self.rejects_by_reason.iter().map(|(k, v)| (*k, *v)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use isochron_sched::admission::Refusal;

    fn req(stream: u64) -> AdmissionRequest<'static> {
        AdmissionRequest {
            stream: StreamId(stream),
            object: "demo",
            kind: AdmissionKind::Play,
            avg_bitrate: BitRate(2_000_000),
            peak_bitrate: BitRate(3_000_000),
            uses_peak: true,
        }
    }

    #[test]
    fn keeps_the_last_decisions_and_counts_refusals_by_kind() {
        let mut log = AdmissionLog::new(3);
        log.record(10, &req(1), &Decision::Admit);
        log.record(11, &req(2), &Decision::Reject(Refusal::NoDisks));
        log.record(12, &req(3), &Decision::Reject(Refusal::TooManyStreams { limit: 2 }));
        log.record(13, &req(4), &Decision::Reject(Refusal::NoDisks));
        let seqs: Vec<u64> = log.entries().map(|e| e.seq).collect();
        assert_eq!(seqs, [2, 3, 4], "the oldest decision is dropped");
        let newest = log.latest(2);
        assert_eq!((newest[0].stream, newest[1].stream), (4, 3));
        assert_eq!(newest[0].verdict, "reject");
        assert_eq!(newest[0].reason, Some("no_disks"));
        assert_eq!(newest[0].rate_bps, 3_000_000, "the policy tests the peak rate");
        assert_eq!(log.rejects_by_reason(), [("no_disks", 2), ("too_many_streams", 1)]);
    }

    #[test]
    fn an_admission_serialises_without_a_reason() {
        let mut log = AdmissionLog::default();
        log.record(5, &AdmissionRequest { uses_peak: false, ..req(7) }, &Decision::Admit);
        let v = serde_json::to_value(&log.latest(1)[0]).unwrap();
        assert_eq!(v["verdict"], "admit");
        assert_eq!(v["kind"], "play");
        assert_eq!(v["rate_bps"], 2_000_000);
        assert!(v.get("reason").is_none());
    }
}
