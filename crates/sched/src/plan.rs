//! What the scheduler knows of an object and of a stream: block plans, admission requests, read
//! completions and pacing anchors.
//!
//! Why a module of its own: these types cross every boundary of the data plane — the library
//! builds [`ObjectPlan`]s from catalog records, the session manager opens streams with
//! [`OpenStream`], the disk threads answer with [`ReadDone`], and the pacer paces by the
//! [`Anchor`] the [`CycleScheduler`](crate::CycleScheduler) hands out with a stream's first block
//! (Yima's per-stream media clock; XTREAM's double buffer is in `cycle`).

use std::collections::BTreeSet;
use std::sync::Arc;

use isochron_base::{
    BitRate, BlockIndex, BlockKey, Bytes, DiskId, Gsn, Instant, MediaTime, Replicas,
};
use isochron_base::{IoFailure, ObjectId, Pace, RunId, StreamId};

/// Where one block of an object is and when it plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlannedBlock {
    /// The disk holding the block's first copy (replica 0): where it is read.
    pub disk: DiskId,
    /// Every copy's disk, replica 0 (`disk`) first (`store.replication`): a read that fails is
    /// re-issued to the next copy ([`CycleScheduler`](crate::CycleScheduler)'s failover).
    pub copies: Replicas,
    /// The GSN of the block's first packet.
    pub first_gsn: Gsn,
    /// The send time of the block's first packet.
    pub first_send_time: MediaTime,
    /// The block's size on disk (what a read transfers and the cache holds).
    pub len: Bytes,
}

/// The blocks of one object in order, as the scheduler needs them. Shared by every stream of the
/// object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectPlan {
    /// The object.
    pub object: ObjectId,
    /// Its blocks, by index.
    pub blocks: Vec<PlannedBlock>,
}

impl ObjectPlan {
    /// The block holding packet `gsn`, if the object has it.
    #[must_use]
    pub fn block_of(&self, gsn: Gsn) -> Option<BlockIndex> {
        let after = self.blocks.partition_point(|b| b.first_gsn <= gsn);
        let i = after.checked_sub(1)?;
        Some(BlockIndex(u32::try_from(i).ok()?))
    }

    /// The key of block `index`.
    #[must_use]
    pub fn key(&self, index: BlockIndex) -> BlockKey {
        BlockKey::new(self.object, index)
    }

    /// The plan with every block read from its first copy on a disk not `lost`: a session
    /// opened while a node is down (`docs/design/takeover.md`) is sent and admitted as the
    /// copies it will really read. The copies keep their order, so a later loss picks the
    /// next copy by the same rule. `Err`: the first block with no copy left.
    pub fn without(&self, lost: impl Fn(DiskId) -> bool) -> Result<Self, BlockIndex> {
        let blocks = self
            .blocks
            .iter()
            .enumerate()
            .map(|(i, b)| match b.copies.iter().find(|d| !lost(*d)) {
                Some(disk) => Ok(PlannedBlock { disk, ..*b }),
                None => Err(BlockIndex(i as u32)),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { object: self.object, blocks })
    }
}

/// A request to admit a stream.
#[derive(Clone, Debug)]
pub struct OpenStream {
    /// The stream's id, chosen by the caller.
    pub stream: StreamId,
    /// The object it plays.
    pub plan: Arc<ObjectPlan>,
    /// The object's mean rate.
    pub avg_bitrate: BitRate,
    /// The object's peak rate over one-second windows.
    pub peak_bitrate: BitRate,
    /// In a cluster, the disks of this node: the stream is this node's *share* of a session
    /// (Yima §2.2), which reads only the blocks on them and is admitted for their part of the
    /// object's rate. `None`: every block is read here (a single node).
    pub local: Option<Arc<BTreeSet<DiskId>>>,
}

impl OpenStream {
    /// Whether this node reads block `index`'s disk.
    #[must_use]
    pub fn reads(&self, disk: DiskId) -> bool {
        self.local.as_ref().is_none_or(|l| l.contains(&disk))
    }
}

/// A completed read.
#[derive(Debug)]
pub struct ReadDone<V> {
    /// The disk the read was issued to.
    pub disk: DiskId,
    /// The block.
    pub key: BlockKey,
    /// The block's contents, or why it could not be read.
    pub result: Result<V, IoFailure>,
}

/// Where a stream's media clock is pinned to the wall clock: the packet whose send time is
/// `media` is due at `wall`; later packets are due at `wall + (send_time − media)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Anchor {
    /// Wall-clock time of `media`.
    pub wall: Instant,
    /// The media time of the start.
    pub media: MediaTime,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_without_lost_disks_reads_each_block_from_its_next_copy() {
        let block = |first: u16, second: u16| {
            let mut copies = Replicas::single(DiskId(first));
            copies.push(DiskId(second));
            PlannedBlock {
                disk: DiskId(first),
                copies,
                first_gsn: Gsn(0),
                first_send_time: MediaTime::ZERO,
                len: Bytes(1),
            }
        };
        let plan =
            ObjectPlan { object: ObjectId(1), blocks: vec![block(0, 1), block(2, 0), block(1, 2)] };
        let without = plan.without(|d| d == DiskId(0)).unwrap();
        let disks: Vec<DiskId> = without.blocks.iter().map(|b| b.disk).collect();
        assert_eq!(disks, [DiskId(1), DiskId(2), DiskId(1)]);
        // The copies keep their order.
        assert_eq!(without.blocks[1].copies.as_slice(), [DiskId(2), DiskId(0)]);
        assert_eq!(plan.without(|_| false).unwrap(), plan);
        // Block 0's copies are both lost.
        assert_eq!(plan.without(|d| d != DiskId(2)), Err(BlockIndex(0)));
    }
}

/// What a node asks of one stream's reads at the scheduler: one variant per
/// `CycleScheduler::handle_*` a session's decisions call after admission (the node core emits
/// them, the scheduler thread applies them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadOp {
    /// Start run `run` of a stream at block `from`, media time `media`.
    Start {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: RunId,
        /// First block.
        from: BlockIndex,
        /// Media time of the first packet.
        media: MediaTime,
        /// The clock and pace the session's origin pinned (a cluster), else `None`: the
        /// scheduler anchors the stream when its first block is in memory.
        pinned: Option<(Anchor, Pace)>,
    },
    /// A cluster share's run takes over blocks of a lost node
    /// ([`CycleScheduler::handle_take_over`](crate::CycleScheduler::handle_take_over)).
    TakeOver {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: RunId,
        /// The blocks.
        blocks: Vec<BlockIndex>,
    },
    /// A cluster share's run gives back blocks it took over
    /// ([`CycleScheduler::handle_give_back`](crate::CycleScheduler::handle_give_back)).
    GiveBack {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: RunId,
        /// The blocks.
        blocks: Vec<BlockIndex>,
    },
    /// Close a stream: its reservation is given back.
    Close {
        /// The stream.
        stream: StreamId,
    },
}
