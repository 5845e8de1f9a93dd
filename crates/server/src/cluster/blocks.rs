//! Block writes and reads to and from the nodes that own their disks, over HTTP (an ingest
//! through any node, a reorganisation's copies), accepted only from cluster members.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use isochron_base::{BlockKey, DiskId, IoFailure, IoFailureKind};
use isochron_diskio::Store;
use isochron_diskio::store::RemoteBlocks;

use crate::cluster_view::ClusterView;

use super::lock;

/// Writes blocks to the nodes that own their disks, over HTTP.
pub struct HttpBlocks {
    /// The store (for each disk's owner).
    pub store: std::sync::Weak<Store>,
    /// Live members' addresses.
    pub view: Arc<ClusterView>,
    /// The HTTP agent.
    pub agent: ureq::Agent,
}

impl HttpBlocks {
    /// An agent with timeouts fit for one block.
    #[must_use]
    pub fn new(store: std::sync::Weak<Store>, view: Arc<ClusterView>) -> Self {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(30)))
            .http_status_as_error(false)
            .build()
            .into();
        Self { store, view, agent }
    }
}

impl HttpBlocks {
    /// The URL of block `key` on disk `disk` under `path` at the disk's owner, and the owner.
    fn url(&self, path: &str, disk: DiskId, key: BlockKey) -> Result<(String, String), IoFailure> {
        let store = self
            .store
            .upgrade()
            .ok_or_else(|| IoFailure::new(IoFailureKind::Closed, "the store is closed"))?;
        let owner = store
            .disk_owner(disk)
            .ok_or_else(|| remote(format!("disk {disk} has no owner node")))?;
        let http = lock(&self.view.live)
            .get(&owner)
            .and_then(|r| r.http)
            .ok_or_else(|| remote(format!("node {owner} (owner of disk {disk}) is not live")))?;
        let url = format!(
            "http://{http}/api/v1/cluster/{path}/{}/{}/{}",
            disk.0, key.object.0, key.index.0
        );
        Ok((url, owner))
    }

    fn put(&self, path: &str, disk: DiskId, key: BlockKey, bytes: &[u8]) -> Result<(), IoFailure> {
        let (url, owner) = self.url(path, disk, key)?;
        let resp =
            self.agent.put(&url).send(bytes).map_err(|e| remote(format!("node {owner}: {e}")))?;
        if !resp.status().is_success() {
            let status = resp.status();
            let body = resp.into_body().read_to_string().unwrap_or_default();
            return Err(remote(format!("node {owner} answered {status}: {}", body.trim())));
        }
        self.view.block_bytes_out.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    fn get(&self, path: &str, disk: DiskId, key: BlockKey) -> Result<Vec<u8>, IoFailure> {
        let (url, owner) = self.url(path, disk, key)?;
        let resp = self.agent.get(&url).call().map_err(|e| remote(format!("node {owner}: {e}")))?;
        let status = resp.status();
        let mut body = resp.into_body();
        if !status.is_success() {
            let text = body.read_to_string().unwrap_or_default();
            return Err(remote(format!("node {owner} answered {status}: {}", text.trim())));
        }
        let bytes = body
            .with_config()
            .limit(64 << 20)
            .read_to_vec()
            .map_err(|e| remote(format!("node {owner}: reading block {key}: {e}")))?;
        self.view.block_bytes_in.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Ok(bytes)
    }
}

/// A failure of another node's IO, or of reaching it.
fn remote(context: String) -> IoFailure {
    IoFailure::new(IoFailureKind::Remote, context)
}

impl RemoteBlocks for HttpBlocks {
    fn write_block(&self, disk: DiskId, key: BlockKey, bytes: &[u8]) -> Result<(), IoFailure> {
        self.put("blocks", disk, key, bytes)
    }

    fn write_block_nrt(&self, disk: DiskId, key: BlockKey, bytes: &[u8]) -> Result<(), IoFailure> {
        self.put("moves", disk, key, bytes)
    }

    fn read_block_nrt(&self, disk: DiskId, key: BlockKey) -> Result<Vec<u8>, IoFailure> {
        self.get("moves", disk, key)
    }
}
