//! Membership primitives: the keys a cluster's nodes register under, and the one atomic step
//! that is not a plain put.
//!
//! Keys, under the cluster's prefix `P`: `P/live/<name>` (attached to the node's lease: it
//! vanishes within the TTL of the node's death) and `P/nodes/<name>` (the node's durable record).
//! Listing and watching them is [`Client::get_prefix`] and [`Client::watch_prefix`] on
//! [`live_prefix`] and [`nodes_prefix`]; what the values mean is the cluster layer's business,
//! not this module's.

use isochron_store::catalog::{CatalogError, validate_title};

use crate::catalog::dir;
use crate::client::{Client, Compare, CompareOp, EtcdError, LeaseId, TxnOp};

/// Why [`register_live`] did not register.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    /// Another holder (another process, or an older lease of this node) is live under the name.
    #[error("node {name:?} is already live (holder: {:?})", String::from_utf8_lossy(holder_value))]
    AlreadyLive {
        /// The name.
        name: String,
        /// The current holder's value.
        holder_value: Vec<u8>,
    },
    /// The name is not a valid node name (the rules of object names).
    #[error("invalid node name: {0}")]
    InvalidName(#[from] CatalogError),
    /// etcd failed.
    #[error(transparent)]
    Etcd(#[from] EtcdError),
}

/// `P/live/`.
#[must_use]
pub fn live_prefix(prefix: &str) -> String {
    format!("{}live/", dir(prefix))
}

/// `P/transcode/tasks/`: the rungs a cluster's nodes are to make (one key a rung, `TITLE~RUNG`).
#[must_use]
pub fn transcode_tasks_prefix(prefix: &str) -> String {
    format!("{}transcode/tasks/", dir(prefix))
}

/// `P/transcode/claims/`: which node makes a rung (attached to that node's lease).
#[must_use]
pub fn transcode_claims_prefix(prefix: &str) -> String {
    format!("{}transcode/claims/", dir(prefix))
}

/// `P/nodes/`.
#[must_use]
pub fn nodes_prefix(prefix: &str) -> String {
    format!("{}nodes/", dir(prefix))
}

/// `P/live/<name>`.
#[must_use]
pub fn live_key(prefix: &str, name: &str) -> String {
    format!("{}{name}", live_prefix(prefix))
}

/// Puts `P/live/<name>` = `value` attached to `lease`, only if no one holds the key: one
/// transaction. A retried call whose first attempt had registered (same value, same lease)
/// succeeds.
pub fn register_live(
    client: &Client,
    prefix: &str,
    name: &str,
    value: &[u8],
    lease: LeaseId,
) -> Result<(), RegisterError> {
    validate_title(name)?;
    let key = live_key(prefix, name).into_bytes();
    let r = client.txn(
        &[Compare::create_revision(key.clone(), CompareOp::Equal, 0)],
        &[TxnOp::put(key.clone(), value, Some(lease))],
        &[TxnOp::get(key)],
    )?;
    if r.succeeded {
        return Ok(());
    }
    match r.responses.first().and_then(|g| g.first_kv()) {
        Some(kv) if kv.lease == Some(lease) && kv.value == value => Ok(()),
        Some(kv) => Err(RegisterError::AlreadyLive {
            name: name.to_owned(),
            holder_value: kv.value.clone(),
        }),
        // The compare failed, so the branch's read found the key (one transaction): this arm
        // is not taken, and would report a holder without a value.
        None => Err(RegisterError::AlreadyLive { name: name.to_owned(), holder_value: Vec::new() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        assert_eq!(live_prefix("/isochron/c1"), "/isochron/c1/live/");
        assert_eq!(nodes_prefix("/isochron/c1/"), "/isochron/c1/nodes/");
        assert_eq!(live_key("/p/", "node-a"), "/p/live/node-a");
    }
}
