//! isochron's etcd client: the cluster's catalog, leases and watches (Yima's shared-nothing
//! cluster keeps its catalog, placement epochs, disk list and node membership in etcd).
//!
//! Why the JSON gateway: etcd's native API is gRPC (`api/etcdserverpb/rpc.proto`, the
//! [etcd v3 API](https://etcd.io/docs/v3.4/learning/api/)), and the Rust gRPC clients
//! (`etcd-client` on tonic/prost) compile the protobufs in a build script that needs `protoc`:
//! `cargo run --release -- serve` must build on a fresh machine without it. etcd 3.4 also serves
//! the same API as JSON over HTTP/1.1 on its client port, under `/v3/`
//! ([gRPC gateway](https://etcd.io/docs/v3.4/dev-guide/api_grpc_gateway/)): unary calls are
//! `POST /v3/kv/range`, `/v3/kv/txn`, `/v3/lease/grant`, … with the request message as JSON, and
//! server streams (watch, lease keep-alive) answer one JSON message per line of a chunked
//! response. This crate speaks that with `ureq` (blocking HTTP/1.1) and `serde_json`: the
//! encoding details are in `wire`.
//!
//! What is here: [`Client`] (KV, transactions, leases, member status, failover between
//! endpoints, errors that name every endpoint tried), [`Watch`] (a prefix's changes from a
//! revision, on its own thread, resuming across members), [`LeaseKeeper`] (a lease renewed on
//! its own thread, its state queryable), [`EtcdCatalog`] (the [`isochron_store::Catalog`] of a
//! cluster, atomic through transactions, with a listing and a watch of its changes), the
//! membership primitives ([`register_live`]) and a test harness ([`testing::EtcdCluster`]: real
//! etcd members as child processes).
//!
//! What is not: the cluster logic (who joins, who owns which disk, when to reorganise) is the
//! server's; no TLS or authentication (etcd on a trusted network); no async runtime: every call
//! blocks, and the callers run them on their own threads.

mod catalog;
mod client;
mod lease;
pub mod membership;
pub mod testing;
mod watch;
mod wire;

pub use catalog::{CatalogChange, CatalogListing, CatalogWatch, EtcdCatalog};
pub use client::{
    Attempt, Client, Compare, CompareOp, CompareTarget, EndpointStatus, EtcdError, GetResponse,
    KeyValue, Lease, LeaseId, MemberStatus, Timeouts, TxnOp, TxnOpResponse, TxnResponse,
};
pub use lease::{LeaseKeeper, LeaseState};
pub use membership::{RegisterError, register_live};
pub use watch::{Watch, WatchCanceller, WatchError, WatchEvent};
