//! [`Client`]: etcd's KV, transaction, lease and maintenance calls over the JSON gateway, with
//! failover between endpoints.
//!
//! Every call tries the endpoints in order, starting from the last one that answered, and moves
//! on when an endpoint cannot be reached (connection refused or reset, a timeout) or answers with
//! a server error (HTTP 5xx: etcd's `Unavailable` such as "no leader", `DeadlineExceeded`, an
//! internal error). An answer of etcd that is an error about the request itself (HTTP 4xx: a
//! lease that is not found, a compacted revision, a malformed request) is returned as it is: it
//! would be the same on every member. When every endpoint failed, the error lists each one and
//! why ([`EtcdError::Unreachable`]).
//!
//! A write whose answer was lost (a timeout after etcd applied it) is retried on the next
//! endpoint and so may be applied twice. The writes this crate builds on are either idempotent
//! or guarded by a compare, whose second attempt fails the compare; callers that read the
//! failure branch (as [`crate::register_live`] does) can recognise their own first attempt.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::wire;

/// How long the client waits. Every call has its own budget per endpoint tried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// Establishing a TCP connection to an endpoint.
    pub connect: Duration,
    /// One whole call to one endpoint (connection, request and response).
    pub request: Duration,
    /// How often a watch's stream reader wakes up when nothing arrives, to notice that the
    /// watch was cancelled (also its budget for the stream's response headers).
    pub watch_poll: Duration,
    /// A watch stream silent for this long is opened again (from the next revision): this is
    /// how a watch notices a member that vanished without closing its connections.
    pub watch_idle: Duration,
}

impl Default for Timeouts {
    /// 1 s to connect, 5 s per call, a watch polled every second and re-opened after 10 s of
    /// silence.
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(1),
            request: Duration::from_secs(5),
            watch_poll: Duration::from_secs(1),
            watch_idle: Duration::from_secs(10),
        }
    }
}

/// One endpoint that could not serve a call, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// The endpoint's URL.
    pub endpoint: String,
    /// Why it failed ("connection refused", "timed out after 2 s", "HTTP 503: …").
    pub reason: String,
}

impl fmt::Display for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.endpoint, self.reason)
    }
}

/// Errors of calls to etcd.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// No endpoint could serve the call.
    #[error("etcd unreachable for {op}: {}", list(attempts))]
    Unreachable {
        /// The operation.
        op: &'static str,
        /// Each endpoint tried, in order, and why it failed.
        attempts: Vec<Attempt>,
    },
    /// etcd answered with an error about the request.
    #[error("etcd at {endpoint}: {op}: {message} (gRPC code {code}, HTTP {status})")]
    Etcd {
        /// The operation.
        op: &'static str,
        /// The endpoint that answered.
        endpoint: String,
        /// The HTTP status.
        status: u16,
        /// The gRPC status code (5: not found, 11: out of range, …).
        code: i32,
        /// etcd's message.
        message: String,
    },
    /// etcd answered something this client cannot read.
    #[error("etcd at {endpoint}: {op}: unexpected answer: {reason}")]
    Protocol {
        /// The operation.
        op: &'static str,
        /// The endpoint that answered.
        endpoint: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An endpoint given to [`Client::connect`] is not usable.
    #[error("etcd endpoint {endpoint:?}: {reason}")]
    InvalidEndpoint {
        /// The endpoint.
        endpoint: String,
        /// Why.
        reason: &'static str,
    },
}

fn list(attempts: &[Attempt]) -> String {
    attempts.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

impl EtcdError {
    /// Whether no endpoint could be reached (as opposed to etcd refusing the request).
    #[must_use]
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Self::Unreachable { .. })
    }

    /// Whether etcd said that what was asked for does not exist (gRPC `NotFound`: a lease).
    #[must_use]
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Etcd { code: 5, .. })
    }
}

/// An etcd lease id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseId(pub i64);

impl fmt::Display for LeaseId {
    /// Hexadecimal, as `etcdctl` shows lease ids.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:x}", self.0)
    }
}

/// A key with its value and revisions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyValue {
    /// The key.
    pub key: Vec<u8>,
    /// The value.
    pub value: Vec<u8>,
    /// The revision that created the key (since its last deletion).
    pub create_revision: i64,
    /// The revision of the key's last change.
    pub mod_revision: i64,
    /// How many times the key was written since it was created.
    pub version: i64,
    /// The lease the key is attached to, if any.
    pub lease: Option<LeaseId>,
}

impl From<wire::KeyValue> for KeyValue {
    fn from(kv: wire::KeyValue) -> Self {
        Self {
            key: kv.key,
            value: kv.value,
            create_revision: kv.create_revision,
            mod_revision: kv.mod_revision,
            version: kv.version,
            lease: (kv.lease != 0).then_some(LeaseId(kv.lease)),
        }
    }
}

/// The keys of a range read and the store revision they were read at: a caller can list and
/// then watch from `revision + 1` without missing or repeating a change.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GetResponse {
    /// The keys, in key order.
    pub kvs: Vec<KeyValue>,
    /// The store revision of the read.
    pub revision: i64,
}

/// How a [`Compare`] compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompareOp {
    /// `==`.
    Equal,
    /// `!=`.
    NotEqual,
    /// The key's field is greater than the operand.
    Greater,
    /// The key's field is less than the operand.
    Less,
}

/// What a [`Compare`] looks at, with its operand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CompareTarget {
    /// The key's version (0 if it does not exist).
    Version(i64),
    /// The key's creation revision (0 if it does not exist).
    CreateRevision(i64),
    /// The key's last modification revision (0 if it does not exist).
    ModRevision(i64),
    /// The key's value, bytewise (a key that does not exist fails every value compare).
    Value(Vec<u8>),
    /// The key's lease (`LeaseId(0)`: none).
    Lease(LeaseId),
}

/// One condition of a transaction (`etcdserverpb.Compare`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compare {
    /// The key compared.
    pub key: Vec<u8>,
    /// The comparison.
    pub op: CompareOp,
    /// The field and operand.
    pub target: CompareTarget,
}

impl Compare {
    /// Compares `key`'s version.
    pub fn version(key: impl Into<Vec<u8>>, op: CompareOp, version: i64) -> Self {
        Self { key: key.into(), op, target: CompareTarget::Version(version) }
    }

    /// Compares `key`'s creation revision; `create_revision(key, Equal, 0)` means "`key` does
    /// not exist".
    pub fn create_revision(key: impl Into<Vec<u8>>, op: CompareOp, revision: i64) -> Self {
        Self { key: key.into(), op, target: CompareTarget::CreateRevision(revision) }
    }

    /// Compares `key`'s last modification revision.
    pub fn mod_revision(key: impl Into<Vec<u8>>, op: CompareOp, revision: i64) -> Self {
        Self { key: key.into(), op, target: CompareTarget::ModRevision(revision) }
    }

    /// Compares `key`'s value bytewise.
    pub fn value(key: impl Into<Vec<u8>>, op: CompareOp, value: impl Into<Vec<u8>>) -> Self {
        Self { key: key.into(), op, target: CompareTarget::Value(value.into()) }
    }

    /// Compares `key`'s lease.
    pub fn lease(key: impl Into<Vec<u8>>, op: CompareOp, lease: LeaseId) -> Self {
        Self { key: key.into(), op, target: CompareTarget::Lease(lease) }
    }

    fn to_wire(&self) -> wire::Compare {
        let mut c = wire::Compare {
            key: self.key.clone(),
            result: match self.op {
                CompareOp::Equal => "EQUAL",
                CompareOp::NotEqual => "NOT_EQUAL",
                CompareOp::Greater => "GREATER",
                CompareOp::Less => "LESS",
            },
            ..Default::default()
        };
        c.target = match &self.target {
            CompareTarget::Version(v) => {
                c.version = Some(*v);
                "VERSION"
            }
            CompareTarget::CreateRevision(v) => {
                c.create_revision = Some(*v);
                "CREATE"
            }
            CompareTarget::ModRevision(v) => {
                c.mod_revision = Some(*v);
                "MOD"
            }
            CompareTarget::Value(v) => {
                c.value = Some(v.clone());
                "VALUE"
            }
            CompareTarget::Lease(l) => {
                c.lease = Some(l.0);
                "LEASE"
            }
        };
        c
    }
}

/// One operation of a transaction branch (`etcdserverpb.RequestOp`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnOp {
    /// Writes a key, attached to a lease or not.
    Put {
        /// The key.
        key: Vec<u8>,
        /// The value.
        value: Vec<u8>,
        /// The lease, if any.
        lease: Option<LeaseId>,
    },
    /// Deletes a key, or every key with a prefix.
    Delete {
        /// The key or prefix.
        key: Vec<u8>,
        /// Whether `key` is a prefix.
        prefix: bool,
    },
    /// Reads a key, or every key with a prefix.
    Get {
        /// The key or prefix.
        key: Vec<u8>,
        /// Whether `key` is a prefix.
        prefix: bool,
    },
}

impl TxnOp {
    /// A put.
    pub fn put(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>, lease: Option<LeaseId>) -> Self {
        Self::Put { key: key.into(), value: value.into(), lease }
    }

    /// A delete of one key.
    pub fn delete(key: impl Into<Vec<u8>>) -> Self {
        Self::Delete { key: key.into(), prefix: false }
    }

    /// A read of one key.
    pub fn get(key: impl Into<Vec<u8>>) -> Self {
        Self::Get { key: key.into(), prefix: false }
    }

    fn to_wire(&self) -> wire::RequestOp {
        let range_end =
            |key: &[u8], prefix: bool| if prefix { wire::prefix_end(key) } else { vec![] };
        match self {
            Self::Put { key, value, lease } => wire::RequestOp {
                request_put: Some(wire::PutRequest {
                    key: key.clone(),
                    value: value.clone(),
                    lease: lease.map_or(0, |l| l.0),
                }),
                ..Default::default()
            },
            Self::Delete { key, prefix } => wire::RequestOp {
                request_delete_range: Some(wire::DeleteRangeRequest {
                    key: key.clone(),
                    range_end: range_end(key, *prefix),
                }),
                ..Default::default()
            },
            Self::Get { key, prefix } => wire::RequestOp {
                request_range: Some(wire::RangeRequest {
                    key: key.clone(),
                    range_end: range_end(key, *prefix),
                    ..Default::default()
                }),
                ..Default::default()
            },
        }
    }
}

/// The answer to one [`TxnOp`], in the order of the branch that ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnOpResponse {
    /// A put was applied.
    Put,
    /// A delete removed this many keys.
    Delete {
        /// How many keys were deleted.
        deleted: u64,
    },
    /// A read's keys.
    Get(GetResponse),
}

impl TxnOpResponse {
    /// The first key of a read's answer (`None` for other operations or no key).
    #[must_use]
    pub fn first_kv(&self) -> Option<&KeyValue> {
        match self {
            Self::Get(r) => r.kvs.first(),
            _ => None,
        }
    }
}

/// The answer to [`Client::txn`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnResponse {
    /// Whether every compare held (so the success branch ran).
    pub succeeded: bool,
    /// The answers of the branch that ran.
    pub responses: Vec<TxnOpResponse>,
    /// The store revision after the transaction.
    pub revision: i64,
}

/// A granted lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The lease's id.
    pub id: LeaseId,
    /// The TTL etcd granted (it may raise a short one to its minimum).
    pub ttl: Duration,
}

/// One member's status ([`Client::status`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberStatus {
    /// The member's id.
    pub member_id: u64,
    /// The leader's id as this member knows it (0: no leader).
    pub leader: u64,
    /// The member's etcd version.
    pub version: String,
    /// The size of its database file, in bytes.
    pub db_size: i64,
    /// Its raft index.
    pub raft_index: u64,
    /// Its raft term.
    pub raft_term: u64,
    /// The alarms or errors it reports.
    pub errors: Vec<String>,
}

impl MemberStatus {
    /// Whether the member knows a leader and reports no error.
    #[must_use]
    pub fn is_healthy(&self) -> bool {
        self.leader != 0 && self.errors.is_empty()
    }

    /// Whether this member is the leader.
    #[must_use]
    pub fn is_leader(&self) -> bool {
        self.leader != 0 && self.leader == self.member_id
    }
}

/// The status of one endpoint, or why it could not be had.
#[derive(Debug)]
pub struct EndpointStatus {
    /// The endpoint.
    pub endpoint: String,
    /// Its member's status.
    pub status: Result<MemberStatus, EtcdError>,
}

/// A connection to an etcd cluster through its JSON gateway. Cheap to clone (the clones share
/// the connection pool and the preferred endpoint); blocking; safe to use from several threads.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    endpoints: Vec<String>,
    /// The index of the endpoint that answered last: the first one tried.
    preferred: AtomicUsize,
    /// Unary calls: one budget per call.
    agent: ureq::Agent,
    /// Watch streams: short reads, no total budget.
    stream_agent: ureq::Agent,
    timeouts: Timeouts,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("endpoints", &self.inner.endpoints)
            .field("timeouts", &self.inner.timeouts)
            .finish_non_exhaustive()
    }
}

/// How one call to one endpoint failed.
pub(crate) enum Failure {
    /// The endpoint could not serve it: try the next one.
    Transport(String),
    /// etcd refused the request, or answered nonsense.
    Final(EtcdError),
}

/// Largest response body read (a long listing).
const MAX_BODY: u64 = 1 << 30;
/// Keys per page of [`Client::get_prefix`].
const PAGE: i64 = 500;
/// The gRPC metadata asking a member to refuse (or end) a watch while it has no leader, so a
/// member cut off from the cluster does not keep a watch silently stalled.
const REQUIRE_LEADER: (&str, &str) = ("Grpc-Metadata-hasleader", "true");

impl Client {
    /// A client of the cluster at `endpoints` (`http://host:port`, etcd's client URLs). Nothing
    /// is contacted yet. Only plain HTTP is supported.
    pub fn connect(endpoints: &[String], timeouts: Timeouts) -> Result<Self, EtcdError> {
        if endpoints.is_empty() {
            return Err(EtcdError::InvalidEndpoint {
                endpoint: String::new(),
                reason: "no endpoint given",
            });
        }
        let mut clean = Vec::with_capacity(endpoints.len());
        for e in endpoints {
            let Some(rest) = e.strip_prefix("http://") else {
                return Err(EtcdError::InvalidEndpoint {
                    endpoint: e.clone(),
                    reason: "must start with http:// (TLS is not supported)",
                });
            };
            if rest.trim_end_matches('/').is_empty() || rest.contains(char::is_whitespace) {
                return Err(EtcdError::InvalidEndpoint {
                    endpoint: e.clone(),
                    reason: "must be http://HOST:PORT",
                });
            }
            clean.push(e.trim_end_matches('/').to_owned());
        }
        // Statuses are read here (etcd's error bodies), not turned into ureq errors.
        let config = || {
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_connect(Some(timeouts.connect))
        };
        let agent = config().timeout_global(Some(timeouts.request)).build().into();
        let stream_agent = config().timeout_per_read(Some(timeouts.watch_poll)).build().into();
        Ok(Self {
            inner: Arc::new(Inner {
                endpoints: clean,
                preferred: AtomicUsize::new(0),
                agent,
                stream_agent,
                timeouts,
            }),
        })
    }

    /// The endpoints, as given (without a trailing `/`).
    #[must_use]
    pub fn endpoints(&self) -> &[String] {
        &self.inner.endpoints
    }

    /// The timeouts.
    #[must_use]
    pub fn timeouts(&self) -> &Timeouts {
        &self.inner.timeouts
    }

    /// The value of `key`, if it exists.
    pub fn get(&self, key: &[u8]) -> Result<Option<KeyValue>, EtcdError> {
        let req = wire::RangeRequest { key: key.to_vec(), ..Default::default() };
        let r: wire::RangeResponse = self.unary("get", "/v3/kv/range", &req)?;
        Ok(r.kvs.into_iter().next().map(KeyValue::from))
    }

    /// Every key starting with `prefix`, in key order, read at one revision (in pages of a few
    /// hundred keys, each read at the revision of the first).
    pub fn get_prefix(&self, prefix: &[u8]) -> Result<GetResponse, EtcdError> {
        let range_end = wire::prefix_end(prefix);
        let mut out = GetResponse::default();
        let mut key = prefix.to_vec();
        loop {
            let req = wire::RangeRequest {
                key,
                range_end: range_end.clone(),
                limit: PAGE,
                revision: out.revision,
            };
            let r: wire::RangeResponse = self.unary("get prefix", "/v3/kv/range", &req)?;
            if out.revision == 0 {
                out.revision = r.header.revision;
            }
            let Some(last) = r.kvs.last() else { break };
            key = last.key.clone();
            key.push(0);
            out.kvs.extend(r.kvs.into_iter().map(KeyValue::from));
            if !r.more {
                break;
            }
        }
        Ok(out)
    }

    /// Writes `key`, attached to `lease` if given; returns the new store revision.
    pub fn put(&self, key: &[u8], value: &[u8], lease: Option<LeaseId>) -> Result<i64, EtcdError> {
        let req = wire::PutRequest {
            key: key.to_vec(),
            value: value.to_vec(),
            lease: lease.map_or(0, |l| l.0),
        };
        let r: wire::HeaderOnly = self.unary("put", "/v3/kv/put", &req)?;
        Ok(r.header.revision)
    }

    /// Deletes `key`; returns how many keys were deleted (0 or 1).
    pub fn delete(&self, key: &[u8]) -> Result<u64, EtcdError> {
        self.delete_range("delete", key, vec![])
    }

    /// Deletes every key starting with `prefix`; returns how many were deleted.
    pub fn delete_prefix(&self, prefix: &[u8]) -> Result<u64, EtcdError> {
        self.delete_range("delete prefix", prefix, wire::prefix_end(prefix))
    }

    fn delete_range(
        &self,
        op: &'static str,
        key: &[u8],
        range_end: Vec<u8>,
    ) -> Result<u64, EtcdError> {
        let req = wire::DeleteRangeRequest { key: key.to_vec(), range_end };
        let r: wire::DeleteRangeResponse = self.unary(op, "/v3/kv/deleterange", &req)?;
        Ok(u64::try_from(r.deleted).unwrap_or(0))
    }

    /// A transaction: if every compare holds, the `success` operations run, else the `failure`
    /// ones, atomically.
    pub fn txn(
        &self,
        compares: &[Compare],
        success: &[TxnOp],
        failure: &[TxnOp],
    ) -> Result<TxnResponse, EtcdError> {
        let req = wire::TxnRequest {
            compare: compares.iter().map(Compare::to_wire).collect(),
            success: success.iter().map(TxnOp::to_wire).collect(),
            failure: failure.iter().map(TxnOp::to_wire).collect(),
        };
        let r: wire::TxnResponse = self.unary("txn", "/v3/kv/txn", &req)?;
        let responses = r
            .responses
            .into_iter()
            .map(|op| {
                if let Some(g) = op.response_range {
                    TxnOpResponse::Get(GetResponse {
                        kvs: g.kvs.into_iter().map(KeyValue::from).collect(),
                        revision: r.header.revision,
                    })
                } else if let Some(d) = op.response_delete_range {
                    TxnOpResponse::Delete { deleted: u64::try_from(d.deleted).unwrap_or(0) }
                } else {
                    TxnOpResponse::Put
                }
            })
            .collect();
        Ok(TxnResponse { succeeded: r.succeeded, responses, revision: r.header.revision })
    }

    /// Compacts the history up to `revision`: watches and reads at older revisions then fail
    /// (a watch with [`crate::WatchError::Compacted`]).
    pub fn compact(&self, revision: i64) -> Result<(), EtcdError> {
        let req = wire::CompactionRequest { revision };
        self.unary::<_, wire::HeaderOnly>("compact", "/v3/kv/compaction", &req).map(drop)
    }

    /// Grants a lease of `ttl` (whole seconds, at least 1).
    pub fn lease_grant(&self, ttl: Duration) -> Result<Lease, EtcdError> {
        let secs = i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX);
        let req = wire::LeaseRequest { id: 0, ttl: secs };
        let r: wire::LeaseResponse = self.unary("lease grant", "/v3/lease/grant", &req)?;
        if !r.error.is_empty() || r.id == 0 {
            return Err(EtcdError::Protocol {
                op: "lease grant",
                endpoint: self.preferred_endpoint(),
                reason: format!("no lease granted: {:?}", r.error),
            });
        }
        Ok(Lease { id: LeaseId(r.id), ttl: secs_duration(r.ttl) })
    }

    /// Renews lease `id` once; returns its remaining TTL, zero when the lease is gone (expired
    /// or revoked).
    pub fn lease_keepalive(&self, id: LeaseId) -> Result<Duration, EtcdError> {
        let req = wire::LeaseRequest { id: id.0, ttl: 0 };
        let r: wire::StreamMessage<wire::LeaseResponse> =
            self.unary("lease keep-alive", "/v3/lease/keepalive", &req)?;
        match (r.result, r.error) {
            (Some(l), _) => Ok(secs_duration(l.ttl)),
            (None, Some(e)) => {
                let (message, code) = e.message_and_code();
                if code == 5 {
                    return Ok(Duration::ZERO);
                }
                Err(EtcdError::Etcd {
                    op: "lease keep-alive",
                    endpoint: self.preferred_endpoint(),
                    status: 200,
                    code,
                    message,
                })
            }
            (None, None) => Err(EtcdError::Protocol {
                op: "lease keep-alive",
                endpoint: self.preferred_endpoint(),
                reason: "neither a result nor an error".into(),
            }),
        }
    }

    /// Revokes lease `id`, deleting the keys attached to it; returns whether the lease existed.
    pub fn lease_revoke(&self, id: LeaseId) -> Result<bool, EtcdError> {
        let req = wire::LeaseRequest { id: id.0, ttl: 0 };
        match self.unary::<_, wire::HeaderOnly>("lease revoke", "/v3/lease/revoke", &req) {
            Ok(_) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The remaining TTL of lease `id`, or `None` if it is gone.
    pub fn lease_time_to_live(&self, id: LeaseId) -> Result<Option<Duration>, EtcdError> {
        let req = wire::LeaseRequest { id: id.0, ttl: 0 };
        let r: wire::LeaseResponse =
            self.unary("lease time-to-live", "/v3/lease/timetolive", &req)?;
        Ok((r.ttl >= 0).then(|| secs_duration(r.ttl)))
    }

    /// The status of every endpoint's member, each asked on its own (no failover).
    #[must_use]
    pub fn status(&self) -> Vec<EndpointStatus> {
        let body = to_json(&wire::Empty {});
        self.inner
            .endpoints
            .iter()
            .map(|endpoint| {
                let status = match self.post_once(endpoint, "/v3/maintenance/status", &body) {
                    Ok(bytes) => {
                        parse::<wire::StatusResponse>("status", endpoint, &bytes).map(|s| {
                            MemberStatus {
                                member_id: s.header.member_id,
                                leader: s.leader,
                                version: s.version,
                                db_size: s.db_size,
                                raft_index: s.raft_index,
                                raft_term: s.raft_term,
                                errors: s.errors,
                            }
                        })
                    }
                    Err(Failure::Transport(reason)) => Err(EtcdError::Unreachable {
                        op: "status",
                        attempts: vec![Attempt { endpoint: endpoint.clone(), reason }],
                    }),
                    Err(Failure::Final(e)) => Err(e.with_op("status")),
                };
                EndpointStatus { endpoint: endpoint.clone(), status }
            })
            .collect()
    }

    /// Calls `path` with `req` on the endpoints in turn, from the preferred one.
    fn unary<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        op: &'static str,
        path: &str,
        req: &Req,
    ) -> Result<Resp, EtcdError> {
        let body = to_json(req);
        let (endpoint, bytes) =
            self.failover(op, |endpoint| self.post_once(endpoint, path, &body))?;
        parse(op, endpoint, &bytes)
    }

    /// Runs `call` on each endpoint in turn, from the preferred one, until one does not fail
    /// with [`Failure::Transport`]; that endpoint becomes the preferred one.
    pub(crate) fn failover<T>(
        &self,
        op: &'static str,
        mut call: impl FnMut(&str) -> Result<T, Failure>,
    ) -> Result<(&str, T), EtcdError> {
        let n = self.inner.endpoints.len();
        let start = self.inner.preferred.load(Ordering::Relaxed) % n;
        let mut attempts = Vec::new();
        for k in 0..n {
            let i = (start + k) % n;
            let endpoint = &self.inner.endpoints[i];
            match call(endpoint) {
                Ok(v) => {
                    self.inner.preferred.store(i, Ordering::Relaxed);
                    return Ok((endpoint, v));
                }
                Err(Failure::Transport(reason)) => {
                    tracing::debug!(endpoint, op, reason, "etcd endpoint failed, trying the next");
                    attempts.push(Attempt { endpoint: endpoint.clone(), reason });
                }
                Err(Failure::Final(e)) => {
                    self.inner.preferred.store(i, Ordering::Relaxed);
                    return Err(e.with_op(op));
                }
            }
        }
        Err(EtcdError::Unreachable { op, attempts })
    }

    fn preferred_endpoint(&self) -> String {
        let n = self.inner.endpoints.len();
        self.inner.endpoints[self.inner.preferred.load(Ordering::Relaxed) % n].clone()
    }

    /// One POST to one endpoint: the body of a 2xx answer.
    fn post_once(&self, endpoint: &str, path: &str, body: &[u8]) -> Result<Vec<u8>, Failure> {
        let resp = self
            .inner
            .agent
            .post(format!("{endpoint}{path}"))
            .header("Content-Type", "application/json")
            .send(body)
            .map_err(|e| Failure::Transport(self.reason(&e, self.inner.timeouts.request)))?;
        let status = resp.status().as_u16();
        let bytes = resp
            .into_body()
            .with_config()
            .limit(MAX_BODY)
            .read_to_vec()
            .map_err(|e| Failure::Transport(self.reason(&e, self.inner.timeouts.request)))?;
        if (200..300).contains(&status) {
            return Ok(bytes);
        }
        Err(status_failure(endpoint, status, &bytes))
    }

    /// Opens a watch stream on one endpoint: the reader of its body.
    pub(crate) fn open_stream(
        &self,
        endpoint: &str,
        path: &str,
        body: &[u8],
    ) -> Result<ureq::BodyReader<'static>, Failure> {
        let resp = self
            .inner
            .stream_agent
            .post(format!("{endpoint}{path}"))
            .header("Content-Type", "application/json")
            .header(REQUIRE_LEADER.0, REQUIRE_LEADER.1)
            .send(body)
            .map_err(|e| Failure::Transport(self.reason(&e, self.inner.timeouts.watch_poll)))?;
        let status = resp.status().as_u16();
        if resp.status().is_success() {
            return Ok(resp.into_body().into_with_config().limit(u64::MAX).reader());
        }
        let bytes = resp.into_body().read_to_vec().unwrap_or_default();
        Err(status_failure(endpoint, status, &bytes))
    }

    /// Why a transport failed, in words (`budget`: the time budget that ran out on a timeout).
    pub(crate) fn reason(&self, e: &ureq::Error, budget: Duration) -> String {
        match e {
            ureq::Error::Timeout(ureq::Timeout::Connect) => {
                format!("no connection within {}", secs(self.inner.timeouts.connect))
            }
            ureq::Error::Timeout(_) => format!("timed out after {}", secs(budget)),
            ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => {
                "connection refused".into()
            }
            ureq::Error::Io(io) => io.to_string(),
            ureq::Error::HostNotFound => "host not found".into(),
            other => other.to_string(),
        }
    }
}

impl EtcdError {
    /// The same error, for operation `op`.
    fn with_op(self, op: &'static str) -> Self {
        match self {
            Self::Etcd { endpoint, status, code, message, .. } => {
                Self::Etcd { op, endpoint, status, code, message }
            }
            Self::Protocol { endpoint, reason, .. } => Self::Protocol { op, endpoint, reason },
            other => other,
        }
    }
}

/// What a non-2xx answer means: a 5xx is a transport failure (try another member); anything
/// else is etcd's error about the request.
fn status_failure(endpoint: &str, status: u16, bytes: &[u8]) -> Failure {
    let (message, code) = match wire::decode::<wire::ErrorBody>(bytes) {
        Ok(e) => e.message_and_code(),
        Err(_) => (String::from_utf8_lossy(bytes).trim().to_owned(), 0),
    };
    if status >= 500 {
        return Failure::Transport(format!("HTTP {status}: {message}"));
    }
    Failure::Final(EtcdError::Etcd { op: "", endpoint: endpoint.to_owned(), status, code, message })
}

fn parse<T: DeserializeOwned>(
    op: &'static str,
    endpoint: &str,
    bytes: &[u8],
) -> Result<T, EtcdError> {
    wire::decode(bytes).map_err(|reason| EtcdError::Protocol {
        op,
        endpoint: endpoint.to_owned(),
        reason,
    })
}

pub(crate) fn to_json<T: Serialize>(v: &T) -> Vec<u8> {
    // The request structs hold only strings, integers, booleans and vectors of them: serde_json
    // cannot fail on them (its errors are for non-string map keys and failing writers).
    serde_json::to_vec(v).expect("serialising a request struct to a Vec cannot fail")
}

fn secs_duration(ttl: i64) -> Duration {
    Duration::from_secs(u64::try_from(ttl).unwrap_or(0))
}

/// `2 s`, `0.5 s`.
pub(crate) fn secs(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_checked() {
        let t = Timeouts::default();
        let err = Client::connect(&[], t).unwrap_err();
        assert!(err.to_string().contains("no endpoint given"), "{err}");
        let err = Client::connect(&["https://a:1".into()], t).unwrap_err();
        assert!(err.to_string().contains("TLS is not supported"), "{err}");
        let err = Client::connect(&["127.0.0.1:2379".into()], t).unwrap_err();
        assert!(err.to_string().contains("must start with http://"), "{err}");
        let err = Client::connect(&["http://".into()], t).unwrap_err();
        assert!(err.to_string().contains("http://HOST:PORT"), "{err}");
        let c = Client::connect(&["http://a:1/".into(), "http://b:2".into()], t).unwrap();
        assert_eq!(c.endpoints(), ["http://a:1", "http://b:2"]);
    }

    #[test]
    fn compares_and_ops_encode() {
        let json = |c: &Compare| serde_json::to_string(&c.to_wire()).unwrap();
        assert_eq!(
            json(&Compare::create_revision("k", CompareOp::Equal, 0)),
            r#"{"key":"aw==","target":"CREATE","result":"EQUAL","create_revision":"0"}"#
        );
        assert_eq!(
            json(&Compare::version("k", CompareOp::Greater, 2)),
            r#"{"key":"aw==","target":"VERSION","result":"GREATER","version":"2"}"#
        );
        assert_eq!(
            json(&Compare::mod_revision("k", CompareOp::NotEqual, 9)),
            r#"{"key":"aw==","target":"MOD","result":"NOT_EQUAL","mod_revision":"9"}"#
        );
        assert_eq!(
            json(&Compare::value("k", CompareOp::Less, [1u8])),
            r#"{"key":"aw==","target":"VALUE","result":"LESS","value":"AQ=="}"#
        );
        assert_eq!(
            json(&Compare::lease("k", CompareOp::Equal, LeaseId(7))),
            r#"{"key":"aw==","target":"LEASE","result":"EQUAL","lease":"7"}"#
        );
        let op = |o: &TxnOp| serde_json::to_string(&o.to_wire()).unwrap();
        assert_eq!(op(&TxnOp::get("k")), r#"{"request_range":{"key":"aw=="}}"#);
        assert_eq!(
            op(&TxnOp::Get { key: b"p/".to_vec(), prefix: true }),
            r#"{"request_range":{"key":"cC8=","range_end":"cDA="}}"#
        );
        assert_eq!(op(&TxnOp::delete("k")), r#"{"request_delete_range":{"key":"aw=="}}"#);
        assert_eq!(
            op(&TxnOp::put("k", "v", Some(LeaseId(3)))),
            r#"{"request_put":{"key":"aw==","value":"dg==","lease":"3"}}"#
        );
    }

    #[test]
    fn statuses_are_classified() {
        let body =
            br#"{"error":"etcdserver: no leader","message":"etcdserver: no leader","code":14}"#;
        match status_failure("e", 503, body) {
            Failure::Transport(r) => assert_eq!(r, "HTTP 503: etcdserver: no leader"),
            _ => panic!("a 503 is a transport failure"),
        }
        let body = br#"{"error":"etcdserver: requested lease not found","message":"etcdserver: requested lease not found","code":5}"#;
        match status_failure("http://e:1", 404, body) {
            Failure::Final(e) => {
                assert!(e.is_not_found());
                let e = e.with_op("lease revoke");
                assert_eq!(
                    e.to_string(),
                    "etcd at http://e:1: lease revoke: etcdserver: requested lease not found \
                     (gRPC code 5, HTTP 404)"
                );
            }
            _ => panic!("a 404 is final"),
        }
        match status_failure("e", 400, b"not json") {
            Failure::Final(EtcdError::Etcd { message, code: 0, .. }) => {
                assert_eq!(message, "not json");
            }
            _ => panic!("a 400 is final"),
        }
    }

    #[test]
    fn unreachable_lists_every_attempt() {
        let e = EtcdError::Unreachable {
            op: "put",
            attempts: vec![
                Attempt {
                    endpoint: "http://127.0.0.1:2379".into(),
                    reason: "connection refused".into(),
                },
                Attempt {
                    endpoint: "http://10.0.0.2:2379".into(),
                    reason: "timed out after 2 s".into(),
                },
            ],
        };
        assert!(e.is_unreachable());
        assert_eq!(
            e.to_string(),
            "etcd unreachable for put: http://127.0.0.1:2379 (connection refused), \
             http://10.0.0.2:2379 (timed out after 2 s)"
        );
        assert_eq!(secs(Duration::from_millis(500)), "0.5 s");
        assert_eq!(LeaseId(255).to_string(), "ff");
    }
}
