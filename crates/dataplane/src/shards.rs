//! The sender on every core: sessions hashed to K sender threads.
//!
//! Why shards rather than one sender thread with helpers: the sender's state (the [`Pacer`]'s
//! streams, their transports, the retransmission buffer) is per stream and nothing a stream
//! does touches another's, so K threads that each own whole streams need no lock on the hot
//! path, and each keeps its own `sendmmsg` batches and its own UDP socket (bound to the one
//! advertised `server_port` with `SO_REUSEPORT`, [`crate::net::UdpPair::bind_shards`]). One
//! thread was the ceiling of a node: the kernel's send path for ~3 Gb/s of 1.3 kB datagrams
//! fills a core. The scheduler and the block cache stay single-owner: they feed every shard.
//!
//! [`Senders`] is what the rest of the server holds instead of one channel: it routes each
//! [`SenderCommand`] to the shard owning its stream (by a hash of the [`StreamId`]), the
//! commands that name an SSRC (a NACK, a relayed packet) by the SSRCs the streams were added
//! with, and asks every shard for counters and progress, merging the answers.
//!
//! [`Pacer`]: crate::pacer::Pacer

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crossbeam_channel::Sender;
use isochron_base::{Instant, StreamId};
use tokio::sync::oneshot;

use crate::pacer::{StreamOp, StreamProgress};
use crate::sender::{SenderCommand, SenderStats, SentThrough};

/// A sender shard's thread has exited (the server is shutting down).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Disconnected;

impl std::fmt::Display for Disconnected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the sender thread has exited")
    }
}

impl std::error::Error for Disconnected {}

/// The sender shards' command channels, with the routes of the SSRCs they serve.
#[derive(Clone, Debug)]
pub struct Senders {
    shards: Arc<[Sender<SenderCommand>]>,
    routes: Arc<Mutex<SsrcRoutes>>,
    /// Each shard's published progress, by shard.
    progress: Arc<[Arc<SentThrough>]>,
}

/// Which shard serves each SSRC, and which SSRCs each stream added.
#[derive(Debug, Default)]
struct SsrcRoutes {
    by_ssrc: HashMap<u32, usize>,
    by_stream: HashMap<StreamId, Vec<u32>>,
}

impl Senders {
    /// The handle over shards fed by `shards` (at least one).
    ///
    /// # Panics
    /// If `shards` is empty.
    #[must_use]
    pub fn new(shards: Vec<Sender<SenderCommand>>) -> Self {
        assert!(!shards.is_empty(), "a sender needs at least one shard");
        let progress = shards.iter().map(|_| Arc::new(SentThrough::new())).collect();
        Self { shards: shards.into(), routes: Arc::default(), progress }
    }

    /// Where shard `i` publishes how far it has got (`SenderThread::sent_through`).
    ///
    /// # Panics
    /// If there is no shard `i`.
    #[must_use]
    pub fn sent_through_of(&self, i: usize) -> Arc<SentThrough> {
        Arc::clone(&self.progress[i])
    }

    /// How far every shard has got: the earliest of their words (every packet due before it
    /// has been handed out), `None` while no shard plays a stream.
    #[must_use]
    pub fn sent_through(&self) -> Option<Instant> {
        self.progress.iter().filter_map(|p| p.read()).min()
    }

    /// How many shards.
    #[must_use]
    pub fn len(&self) -> usize {
        self.shards.len()
    }

    /// Never: a handle has at least one shard (for clippy's `len` without `is_empty`).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The shard that owns `stream`: a hash of its id, so consecutive ids spread evenly.
    #[must_use]
    pub fn shard_of(&self, stream: StreamId) -> usize {
        let h = isochron_base::mix::hash_words(&[stream.0, 0x7368_6172_6473]);
        (h % self.shards.len() as u64) as usize
    }

    /// Sends `cmd` to the shard it concerns: by stream, or by SSRC for a NACK or a relayed
    /// packet (an SSRC no shard serves goes to the first, which counts it as unknown).
    /// `Stats` and `Progress` are asked of every shard and answered merged; `Shutdown` goes to
    /// every shard.
    ///
    /// # Errors
    /// When the shard's thread has exited (the server is shutting down).
    pub fn send(&self, cmd: SenderCommand) -> Result<(), Disconnected> {
        let shard = match &cmd {
            SenderCommand::Add { setup, .. } => {
                let shard = self.shard_of(setup.stream);
                let ssrcs: Vec<u32> = setup.tracks.iter().map(|t| t.ssrc).collect();
                let mut routes = self.routes();
                for &ssrc in &ssrcs {
                    routes.by_ssrc.insert(ssrc, shard);
                }
                routes.by_stream.insert(setup.stream, ssrcs);
                shard
            }
            SenderCommand::Stream(StreamOp::Remove { stream }) => {
                let mut routes = self.routes();
                if let Some(ssrcs) = routes.by_stream.remove(stream) {
                    for ssrc in ssrcs {
                        routes.by_ssrc.remove(&ssrc);
                    }
                }
                self.shard_of(*stream)
            }
            SenderCommand::Nack { ssrc, .. } => self.shard_of_ssrc(*ssrc),
            SenderCommand::Relayed { datagram } => match datagram.get(8..12) {
                Some(b) => self.shard_of_ssrc(u32::from_be_bytes([b[0], b[1], b[2], b[3]])),
                None => 0,
            },
            SenderCommand::Stream(op) => self.shard_of(op.stream()),
            SenderCommand::Block { stream, .. } | SenderCommand::GiveBack { stream, .. } => {
                self.shard_of(*stream)
            }
            SenderCommand::Stats { .. } | SenderCommand::Progress { .. } => {
                return self.gather(cmd);
            }
            SenderCommand::Shutdown => {
                for s in self.shards.iter() {
                    let _ = s.send(SenderCommand::Shutdown);
                }
                return Ok(());
            }
        };
        self.shards[shard].send(cmd).map_err(|_| Disconnected)
    }

    /// Every shard's counters, summed (the largest lateness is the largest of any shard).
    pub async fn stats(&self) -> Option<SenderStats> {
        let (tx, rx) = oneshot::channel();
        self.send(SenderCommand::Stats { reply: tx }).ok()?;
        rx.await.ok()
    }

    /// Every shard's streams' progress.
    pub async fn progress(&self) -> Option<Vec<StreamProgress>> {
        let (tx, rx) = oneshot::channel();
        self.send(SenderCommand::Progress { reply: tx }).ok()?;
        rx.await.ok()
    }

    fn shard_of_ssrc(&self, ssrc: u32) -> usize {
        self.routes().by_ssrc.get(&ssrc).copied().unwrap_or(0)
    }

    fn routes(&self) -> std::sync::MutexGuard<'_, SsrcRoutes> {
        self.routes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Asks every shard for its `Stats` or `Progress` and answers `cmd`'s reply with the
    /// merge. With one shard the command goes straight through; with more, a short-lived
    /// thread waits for the answers (these are asked about once a second, by the API).
    fn gather(&self, cmd: SenderCommand) -> Result<(), Disconnected> {
        if self.shards.len() == 1 {
            return self.shards[0].send(cmd).map_err(|_| Disconnected);
        }
        match cmd {
            SenderCommand::Stats { reply } => {
                let answers = self.ask_all(|reply| SenderCommand::Stats { reply })?;
                gather_then(answers, reply, |all| {
                    let mut total = SenderStats::default();
                    for s in &all {
                        total.add(s);
                    }
                    total
                });
            }
            SenderCommand::Progress { reply } => {
                let answers = self.ask_all(|reply| SenderCommand::Progress { reply })?;
                gather_then(answers, reply, |all| all.into_iter().flatten().collect());
            }
            other => return self.shards[0].send(other).map_err(|_| Disconnected),
        }
        Ok(())
    }

    /// Sends every shard the command `ask` makes with a reply channel; the replies' receivers.
    fn ask_all<T>(
        &self,
        ask: impl Fn(oneshot::Sender<T>) -> SenderCommand,
    ) -> Result<Vec<oneshot::Receiver<T>>, Disconnected> {
        let mut answers = Vec::with_capacity(self.shards.len());
        for s in self.shards.iter() {
            let (tx, rx) = oneshot::channel();
            s.send(ask(tx)).map_err(|_| Disconnected)?;
            answers.push(rx);
        }
        Ok(answers)
    }
}

/// On a short-lived thread: waits for every answer and sends `reply` their merge (nothing if a
/// shard exited meanwhile).
fn gather_then<T: Send + 'static, R: Send + 'static>(
    answers: Vec<oneshot::Receiver<T>>,
    reply: oneshot::Sender<R>,
    merge: impl FnOnce(Vec<T>) -> R + Send + 'static,
) {
    spawn_gatherer(move || {
        let all = answers.into_iter().map(|rx| rx.blocking_recv().ok()).collect::<Option<_>>()?;
        let _ = reply.send(merge(all));
        Some(())
    });
}

fn spawn_gatherer(f: impl FnOnce() -> Option<()> + Send + 'static) {
    let spawned =
        std::thread::Builder::new().name("isochron-sender-stats".into()).spawn(move || {
            let _ = f();
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "could not start a thread to gather the sender shards' counters");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_spread_over_the_shards_and_each_stays_on_one() {
        let (txs, _rxs): (Vec<_>, Vec<_>) =
            (0..4).map(|_| crossbeam_channel::unbounded::<SenderCommand>()).unzip();
        let s = Senders::new(txs);
        let mut per = [0usize; 4];
        for id in 1..=4000 {
            let a = s.shard_of(StreamId(id));
            assert_eq!(a, s.shard_of(StreamId(id)));
            per[a] += 1;
        }
        for n in per {
            assert!((800..1200).contains(&n), "{per:?}");
        }
    }
}
