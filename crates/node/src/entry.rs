//! The objects a node plays, as its decisions need them, and what the node's IO tells it about
//! them.
//!
//! An [`ObjectEntry`] pairs an object's catalog record with its [`ObjectPlan`]: every block's
//! disks (placement, Yima §2.1; SCADDAR epochs), first GSN, first send time and size. The node
//! core reads entries through a [`Catalog`] its owner provides: the server's library and shared
//! store, or a harness's objects in memory.

use std::collections::BTreeMap;
use std::sync::Arc;

use isochron_base::{BlockIndex, Bytes, DiskId, ObjectId, Replicas};
use isochron_sched::{ObjectPlan, PlannedBlock};
use isochron_store::Epoch;
use isochron_store::block::BLOCK_ALIGN;
use isochron_store::catalog::ObjectRecord;

/// One playable object.
#[derive(Debug)]
pub struct ObjectEntry {
    /// The catalog record.
    pub record: ObjectRecord,
    /// Where its packet blocks are (what streams read).
    pub plan: Arc<ObjectPlan>,
    /// Where a native object's source-file blocks are (what HTTP serves; they follow the
    /// packet blocks in index order). Empty for MPEG-TS.
    pub source: Vec<PlannedBlock>,
    /// The placement epoch of the plan. A stream keeps the plan it started with; in a cluster,
    /// every node of a session plans it at the epoch of the node that opened it.
    pub epoch: Epoch,
}

impl ObjectEntry {
    /// The entry for `record` planned as of placement epoch `epoch`, each block's copies from
    /// `copies` (the store's placement at that epoch).
    #[must_use]
    pub fn planned_with(
        record: ObjectRecord,
        epoch: Epoch,
        copies: impl Fn(&ObjectRecord, BlockIndex) -> Replicas,
    ) -> Self {
        let mut blocks: Vec<PlannedBlock> = record
            .blocks
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let copies = copies(&record, BlockIndex(i as u32));
                PlannedBlock {
                    disk: copies.primary(),
                    copies,
                    first_gsn: b.first_gsn,
                    first_send_time: b.first_send_time,
                    len: Bytes(u64::from(b.encoded_len)).align_up(BLOCK_ALIGN as u64),
                }
            })
            .collect();
        let source = blocks.split_off(record.media_blocks().len());
        let plan = Arc::new(ObjectPlan { object: record.id, blocks });
        Self { record, plan, source, epoch }
    }

    /// Where block `index` is: a packet block or a source-file block.
    #[must_use]
    pub fn planned(&self, index: usize) -> Option<&PlannedBlock> {
        let media = self.plan.blocks.len();
        match index.checked_sub(media) {
            None => self.plan.blocks.get(index),
            Some(i) => self.source.get(i),
        }
    }
}

/// What a node's IO knows and the node core asks: the objects, the placement, whether the
/// cluster's membership can be confirmed. The server implements it over its library and shared
/// store; a harness over objects in memory. Every method answers at once (reads of state the
/// owner keeps current), so the core stays a function of its inputs.
pub trait Catalog: isochron_rtsp::server::Library {
    /// The playable object `id` (the node's library).
    fn by_id(&self, id: ObjectId) -> Option<Arc<ObjectEntry>>;

    /// Object `id` read from the shared catalog, for an object another node ingested and this
    /// node has not polled yet (a cluster; `None` on a single node). Added to the library.
    fn shared_entry(&self, id: ObjectId) -> Option<Arc<ObjectEntry>>;

    /// `entry` planned at `epoch` (the origin's epoch, which differs from this node's during a
    /// SCADDAR flip one of them has not seen yet): every node of a session reads the same
    /// placement, so no block is sent twice or by nobody.
    fn at_epoch(&self, entry: Arc<ObjectEntry>, epoch: Epoch) -> Arc<ObjectEntry>;

    /// Each disk's owner (a node's name), as the store's metadata says now (empty on a single
    /// node). A takeover decides on one snapshot.
    fn disk_owners(&self) -> BTreeMap<DiskId, String>;

    /// Whether the cluster's membership and placement can be confirmed (etcd answers). A node
    /// that cannot takes no new sessions; those open go on.
    fn membership_confirmed(&self) -> bool;
}
