//! [`LeaseKeeper`]: a lease kept alive from its own thread, so that the keys attached to it
//! (a node's liveness key) vanish within the TTL of the node's death, and only then.
//!
//! Design: the keeper grants the lease, then its thread renews it every TTL/3 (etcd's own
//! clients renew at TTL/3 too), and retries every ≤ 0.5 s while no endpoint answers. Its state
//! is a small value behind a mutex, read with [`LeaseKeeper::state`], and every change of kind
//! is also passed to an optional callback on the keeper's thread. If etcd says the lease is
//! gone (its TTL ran out while etcd was unreachable, or someone revoked it), the state becomes
//! [`LeaseState::Lost`] and the thread stops renewing: the keys are gone, and re-registering is
//! the caller's decision. Shutting the keeper down (or dropping it) stops the thread and revokes
//! the lease, deleting its keys at once.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::client::{Client, EtcdError, Lease, LeaseId};

/// Where a kept lease stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseState {
    /// The last renewal succeeded.
    Alive,
    /// Renewals have failed since `since` (the first failure); the keeper keeps trying. Once
    /// the lease's TTL has passed since the last success, etcd has probably ended it.
    Unreachable {
        /// When renewals started failing.
        since: Instant,
        /// The last failure.
        error: String,
    },
    /// etcd says the lease is gone: its keys are deleted. The keeper no longer renews it.
    Lost,
    /// The keeper was shut down and the lease revoked.
    Revoked,
}

impl LeaseState {
    fn same_kind(&self, other: &Self) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }
}

/// A lease renewed by a thread of its own (see the module documentation).
#[derive(Debug)]
pub struct LeaseKeeper {
    client: Client,
    lease: Lease,
    state: Arc<Mutex<LeaseState>>,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// The fastest renewal while etcd is unreachable.
const RETRY: Duration = Duration::from_millis(500);

impl LeaseKeeper {
    /// Grants a lease of `ttl` (whole seconds; etcd may raise it to its minimum) and starts
    /// keeping it alive.
    pub fn start(client: &Client, ttl: Duration) -> Result<Self, EtcdError> {
        Self::start_with_callback(client, ttl, |_| {})
    }

    /// As [`LeaseKeeper::start`], calling `on_change` on the keeper's thread whenever the state
    /// changes kind (alive, unreachable, lost). It must return quickly.
    pub fn start_with_callback(
        client: &Client,
        ttl: Duration,
        on_change: impl FnMut(&LeaseState) + Send + 'static,
    ) -> Result<Self, EtcdError> {
        let lease = client.lease_grant(ttl)?;
        let state = Arc::new(Mutex::new(LeaseState::Alive));
        let (stop, stopped) = mpsc::channel();
        let keeper = Renewer {
            client: client.clone(),
            lease,
            state: Arc::clone(&state),
            on_change: Box::new(on_change),
        };
        let thread = std::thread::Builder::new()
            .name("etcd-lease".into())
            .spawn(move || keeper.run(&stopped));
        let thread = match thread {
            Ok(t) => t,
            Err(e) => {
                // Without a thread the lease would lapse silently: give it back and fail.
                let _ = client.lease_revoke(lease.id);
                return Err(EtcdError::Protocol {
                    op: "lease keeper",
                    endpoint: String::new(),
                    reason: format!("cannot start the keeper thread: {e}"),
                });
            }
        };
        tracing::debug!(lease = %lease.id, ttl_s = lease.ttl.as_secs(), "lease granted");
        Ok(Self { client: client.clone(), lease, state, stop: Some(stop), thread: Some(thread) })
    }

    /// The lease's id (to attach keys to it).
    #[must_use]
    pub fn id(&self) -> LeaseId {
        self.lease.id
    }

    /// The TTL etcd granted.
    #[must_use]
    pub fn ttl(&self) -> Duration {
        self.lease.ttl
    }

    /// The current state.
    #[must_use]
    pub fn state(&self) -> LeaseState {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Stops renewing and revokes the lease (deleting its keys); returns whether it still
    /// existed.
    pub fn shutdown(mut self) -> Result<bool, EtcdError> {
        self.stop_and_revoke()
    }

    fn stop_and_revoke(&mut self) -> Result<bool, EtcdError> {
        // Dropping the sender wakes the thread, which ends before its next renewal.
        self.stop = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let existed = self.client.lease_revoke(self.lease.id)?;
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = LeaseState::Revoked;
        Ok(existed)
    }
}

impl Drop for LeaseKeeper {
    /// Shuts down as [`LeaseKeeper::shutdown`] (waiting for the revocation, bounded by the
    /// client's timeouts), logging a failure.
    fn drop(&mut self) {
        if self.thread.is_some()
            && let Err(e) = self.stop_and_revoke()
        {
            tracing::warn!(lease = %self.lease.id, error = %e, "cannot revoke the lease; it will expire");
        }
    }
}

/// The keeper thread.
struct Renewer {
    client: Client,
    lease: Lease,
    state: Arc<Mutex<LeaseState>>,
    on_change: Box<dyn FnMut(&LeaseState) + Send>,
}

impl Renewer {
    fn run(mut self, stopped: &mpsc::Receiver<()>) {
        let interval = (self.lease.ttl / 3).max(Duration::from_millis(100));
        let mut wait = interval;
        loop {
            match stopped.recv_timeout(wait) {
                Err(RecvTimeoutError::Timeout) => {}
                Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
            }
            let next = match self.client.lease_keepalive(self.lease.id) {
                Ok(ttl) if !ttl.is_zero() => LeaseState::Alive,
                Ok(_) => LeaseState::Lost,
                Err(e) => {
                    let since = match &*self.state.lock().unwrap_or_else(PoisonError::into_inner) {
                        LeaseState::Unreachable { since, .. } => *since,
                        _ => Instant::now(),
                    };
                    LeaseState::Unreachable { since, error: e.to_string() }
                }
            };
            wait = match next {
                LeaseState::Alive => interval,
                _ => interval.min(RETRY),
            };
            let lost = next == LeaseState::Lost;
            self.set(next);
            if lost {
                tracing::warn!(lease = %self.lease.id, "etcd says the lease is gone");
                // Nothing left to renew: wait for the shutdown.
                let _ = stopped.recv();
                return;
            }
        }
    }

    fn set(&mut self, next: LeaseState) {
        let changed = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            let changed = !state.same_kind(&next);
            *state = next.clone();
            changed
        };
        if changed {
            tracing::info!(lease = %self.lease.id, state = ?next, "lease state changed");
            (self.on_change)(&next);
        }
    }
}
