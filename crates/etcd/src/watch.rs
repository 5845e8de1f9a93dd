//! [`Watch`]: the changes under a prefix, from a revision on, through members that come and go.
//!
//! Design: a watch owns one thread, which holds the gateway's watch stream (`POST /v3/watch`, one
//! JSON message per line of a chunked answer) and hands each batch of events to the watch's
//! bounded channel; [`Watch::next_batch`] and the iterator read that channel. The thread reads
//! with a short timeout ([`Timeouts::watch_poll`]) so that it notices a cancellation within
//! that time without closing the stream, and opens the stream again when it breaks (a member
//! killed, a member that lost its leader: the stream asks for one with gRPC's `hasleader`
//! metadata) or stays silent for [`Timeouts::watch_idle`] (a member that vanished without
//! closing the connection). It reopens on the endpoints in turn, from the revision after the
//! last event delivered, so no event is lost or repeated across reconnections (etcd's watch
//! guarantee: events in revision order, from the start revision).
//!
//! Dropping a [`Watch`] (or a [`WatchCanceller`]'s cancel from another thread) never blocks:
//! it raises a flag and the thread ends at its next poll, or at once if it was handing over a
//! batch. [`Watch::cancel`] also waits for the thread, which is bounded by the poll interval
//! and the connection timeouts.
//!
//! A start revision that etcd has compacted away ends the watch with
//! [`WatchError::Compacted`]: the caller lists again and watches from the listing's revision.

use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::client::{Client, EtcdError, Timeouts, to_json};
use crate::wire;

/// One change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchEvent {
    /// A key was written.
    Put {
        /// The key.
        key: Vec<u8>,
        /// Its new value.
        value: Vec<u8>,
        /// The revision of the write.
        mod_revision: i64,
    },
    /// A key was deleted (or its lease ended).
    Delete {
        /// The key.
        key: Vec<u8>,
        /// The revision of the deletion.
        mod_revision: i64,
    },
}

impl WatchEvent {
    /// The key changed.
    #[must_use]
    pub fn key(&self) -> &[u8] {
        match self {
            Self::Put { key, .. } | Self::Delete { key, .. } => key,
        }
    }

    /// The revision of the change.
    #[must_use]
    pub fn mod_revision(&self) -> i64 {
        match self {
            Self::Put { mod_revision, .. } | Self::Delete { mod_revision, .. } => *mod_revision,
        }
    }
}

/// Why a watch gave no batch.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The revision to watch from has been compacted away. Terminal: list again, then watch
    /// from the listing's revision + 1.
    #[error(
        "watch from revision {requested}: etcd has compacted its history up to revision \
         {compact_revision}; list again and watch from the listing's revision"
    )]
    Compacted {
        /// etcd's compaction revision.
        compact_revision: i64,
        /// The revision the watch needed next.
        requested: i64,
    },
    /// No endpoint could be reached. Not terminal: the watch keeps trying and resumes where it
    /// stopped.
    #[error("watch: {0} (still trying)")]
    Unreachable(EtcdError),
    /// etcd refused the watch or answered something unreadable. Terminal.
    #[error("watch: {0}")]
    Failed(EtcdError),
    /// The watch has ended: cancelled, or after its terminal error was returned.
    #[error("the watch has ended")]
    Closed,
}

impl WatchError {
    /// Whether the watch has ended (every error but [`WatchError::Unreachable`]).
    #[must_use]
    pub fn is_terminal(&self) -> bool {
        !matches!(self, Self::Unreachable(_))
    }
}

type Item = Result<Vec<WatchEvent>, WatchError>;

/// Batches of changes under a prefix (see the module documentation). Also an iterator that
/// blocks for the next batch and ends when the watch does.
#[derive(Debug)]
pub struct Watch {
    rx: Option<Receiver<Item>>,
    cancel: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Cancels a [`Watch`] from another thread: a blocked [`Watch::next_batch`] then returns
/// [`WatchError::Closed`] within the poll interval.
#[derive(Clone, Debug)]
pub struct WatchCanceller(Arc<AtomicBool>);

impl WatchCanceller {
    /// Cancels the watch.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Batches in flight between the stream thread and the consumer.
const CHANNEL_BATCHES: usize = 64;
/// Longest pause between reconnection rounds.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

impl Client {
    /// Watches every key starting with `prefix`, from `start_revision` (0: from now on).
    pub fn watch_prefix(&self, prefix: &[u8], start_revision: i64) -> Watch {
        Watch::start(self.clone(), prefix.to_vec(), wire::prefix_end(prefix), start_revision)
    }
}

impl Watch {
    fn start(client: Client, key: Vec<u8>, range_end: Vec<u8>, start_revision: i64) -> Self {
        let (tx, rx) = sync_channel(CHANNEL_BATCHES);
        let cancel = Arc::new(AtomicBool::new(false));
        let stream = Stream {
            timeouts: *client.timeouts(),
            client,
            key,
            range_end,
            next_revision: start_revision,
            cancel: Arc::clone(&cancel),
            tx,
        };
        let thread =
            std::thread::Builder::new().name("etcd-watch".into()).spawn(move || stream.run());
        let thread = match thread {
            Ok(t) => Some(t),
            Err(e) => {
                // The receiver then reports the watch as ended at once.
                tracing::error!(error = %e, "cannot start a watch thread");
                None
            }
        };
        Self { rx: Some(rx), cancel, thread }
    }

    /// The next batch, waiting at most `timeout`: `Ok(None)` if none came in time.
    pub fn next_batch(&mut self, timeout: Duration) -> Result<Option<Vec<WatchEvent>>, WatchError> {
        let Some(rx) = &self.rx else { return Err(WatchError::Closed) };
        match rx.recv_timeout(timeout) {
            Ok(item) => item.map(Some),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => Err(WatchError::Closed),
        }
    }

    /// A handle that cancels this watch from another thread.
    #[must_use]
    pub fn canceller(&self) -> WatchCanceller {
        WatchCanceller(Arc::clone(&self.cancel))
    }

    /// Cancels the watch and waits for its thread to end.
    pub fn cancel(mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        // Dropping the receiver releases a thread blocked handing over a batch.
        self.rx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Iterator for Watch {
    type Item = Item;

    /// Blocks for the next batch or error; `None` once the watch has ended.
    fn next(&mut self) -> Option<Item> {
        self.rx.as_ref()?.recv().ok()
    }
}

impl Drop for Watch {
    /// Raises the cancellation flag without waiting: the thread ends at its next poll.
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
    }
}

/// The stream thread's state.
struct Stream {
    client: Client,
    timeouts: Timeouts,
    key: Vec<u8>,
    range_end: Vec<u8>,
    /// The revision to watch from when the stream is (re)opened; 0 until the first stream
    /// tells the current revision, when watching from now on.
    next_revision: i64,
    cancel: Arc<AtomicBool>,
    tx: SyncSender<Item>,
}

/// How reading one stream ended.
enum Ended {
    /// Open another stream; `progressed`: this one delivered something (no backoff needed).
    Reopen { progressed: bool },
    /// The watch is over.
    Stop,
}

impl Stream {
    fn run(mut self) {
        let mut failures = 0u32;
        while !self.cancelled() {
            let request = to_json(&wire::WatchRequest {
                create_request: wire::WatchCreateRequest {
                    key: self.key.clone(),
                    range_end: self.range_end.clone(),
                    start_revision: self.next_revision,
                    progress_notify: true,
                },
            });
            let client = self.client.clone();
            let opened = client
                .failover("watch", |endpoint| client.open_stream(endpoint, "/v3/watch", &request));
            let progressed = match opened {
                Ok((endpoint, reader)) => {
                    tracing::debug!(endpoint, revision = self.next_revision, "watch stream open");
                    match self.follow(endpoint, reader) {
                        Ended::Reopen { progressed } => progressed,
                        Ended::Stop => return,
                    }
                }
                Err(e) if e.is_unreachable() => {
                    tracing::warn!(error = %e, "watch: no etcd endpoint answers; retrying");
                    // Best effort: a consumer that does not read is not waited for.
                    if let Err(TrySendError::Disconnected(_)) =
                        self.tx.try_send(Err(WatchError::Unreachable(e)))
                    {
                        return;
                    }
                    false
                }
                Err(e) => {
                    let _ = self.tx.send(Err(WatchError::Failed(e)));
                    return;
                }
            };
            failures = if progressed { 0 } else { failures + 1 };
            if failures > 0 {
                let backoff = Duration::from_millis(100 << failures.min(5)).min(MAX_BACKOFF);
                self.pause(backoff);
            }
        }
    }

    /// Reads one stream until it breaks, idles out, or the watch ends.
    fn follow(&mut self, endpoint: &str, mut reader: impl Read) -> Ended {
        let mut pending: Vec<u8> = Vec::new();
        let mut chunk = vec![0u8; 64 * 1024];
        let mut last_data = Instant::now();
        let mut progressed = false;
        loop {
            if self.cancelled() {
                return Ended::Stop;
            }
            match reader.read(&mut chunk) {
                Ok(0) => {
                    tracing::debug!(endpoint, "watch stream closed by the server");
                    return Ended::Reopen { progressed };
                }
                Ok(n) => {
                    last_data = Instant::now();
                    pending.extend_from_slice(&chunk[..n]);
                    while let Some(end) = pending.iter().position(|&b| b == b'\n') {
                        let line: Vec<u8> = pending.drain(..=end).collect();
                        if line.iter().all(u8::is_ascii_whitespace) {
                            continue;
                        }
                        match self.handle(endpoint, &line) {
                            Some(Ended::Stop) => return Ended::Stop,
                            Some(Ended::Reopen { .. }) => return Ended::Reopen { progressed },
                            None => progressed = true,
                        }
                    }
                }
                Err(e) if is_poll_timeout(&e) => {
                    if last_data.elapsed() >= self.timeouts.watch_idle {
                        tracing::debug!(endpoint, "watch stream idle; reopening");
                        return Ended::Reopen { progressed: true };
                    }
                }
                Err(e) => {
                    tracing::debug!(endpoint, error = %e, "watch stream broken; reopening");
                    return Ended::Reopen { progressed };
                }
            }
        }
    }

    /// Handles one message of the stream: `None` to go on reading.
    fn handle(&mut self, endpoint: &str, line: &[u8]) -> Option<Ended> {
        let msg: wire::StreamMessage<wire::WatchResponse> = match wire::decode(line) {
            Ok(m) => m,
            Err(reason) => {
                let e = EtcdError::Protocol { op: "watch", endpoint: endpoint.to_owned(), reason };
                let _ = self.tx.send(Err(WatchError::Failed(e)));
                return Some(Ended::Stop);
            }
        };
        let Some(r) = msg.result else {
            let (message, code) = msg.error.unwrap_or_default().message_and_code();
            tracing::warn!(endpoint, message, code, "watch stream error; reopening");
            return Some(Ended::Reopen { progressed: false });
        };
        if r.compact_revision > 0 {
            let _ = self.tx.send(Err(WatchError::Compacted {
                compact_revision: r.compact_revision,
                requested: self.next_revision,
            }));
            return Some(Ended::Stop);
        }
        if r.canceled {
            tracing::warn!(
                endpoint,
                reason = r.cancel_reason,
                "watch cancelled by etcd; reopening"
            );
            return Some(Ended::Reopen { progressed: false });
        }
        let Some(last) = r.events.last() else {
            // Created, or a progress notification: every change up to the header's revision
            // has been sent. (When created with a start revision, older events follow.)
            if !r.created || self.next_revision == 0 {
                self.next_revision = self.next_revision.max(r.header.revision + 1);
            }
            return None;
        };
        self.next_revision = last.kv.mod_revision + 1;
        let batch = r.events.into_iter().map(event).collect();
        match self.tx.send(Ok(batch)) {
            Ok(()) => None,
            Err(_) => Some(Ended::Stop),
        }
    }

    fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }

    /// Sleeps `d`, waking early when the watch is cancelled.
    fn pause(&self, d: Duration) {
        let end = Instant::now() + d;
        while !self.cancelled() {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            std::thread::sleep(left.min(Duration::from_millis(50)));
        }
    }
}

fn event(e: wire::Event) -> WatchEvent {
    if e.kind == "DELETE" {
        WatchEvent::Delete { key: e.kv.key, mod_revision: e.kv.mod_revision }
    } else {
        WatchEvent::Put { key: e.kv.key, value: e.kv.value, mod_revision: e.kv.mod_revision }
    }
}

/// Whether a read failed only because the poll interval passed with nothing to read.
fn is_poll_timeout(e: &std::io::Error) -> bool {
    let inner = e.get_ref().and_then(|i| i.downcast_ref::<ureq::Error>());
    matches!(inner, Some(ureq::Error::Timeout(ureq::Timeout::PerRead)))
        || matches!(e.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock)
}
