//! Identifier newtypes.
//!
//! Each id is a distinct type so that the compiler, not a reviewer, catches a disk id passed where
//! a node id was meant. All are `Copy` and print as their bare number.

use std::fmt;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident($inner:ty)) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub $inner);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }

        impl From<$inner> for $name {
            fn from(v: $inner) -> Self {
                Self(v)
            }
        }
    };
}

id_type!(
    /// A stored media object (one ingested file). Assigned by the catalog, never reused.
    ObjectId(u64)
);
id_type!(
    /// The position of a block within its object, counted from 0.
    BlockIndex(u32)
);
id_type!(
    /// Global sequence number: the index of an RTP payload unit within its object, counted from 0.
    ///
    /// Fixed at ingest, so every node that holds a block can stamp its packets without asking
    /// anyone (Yima's GSN).
    Gsn(u64)
);
id_type!(
    /// A disk of the store. Assigned when the disk joins and never reused.
    DiskId(u16)
);
id_type!(
    /// A node of a cluster.
    NodeId(u16)
);
id_type!(
    /// One playing stream (an RTSP session's data flow) inside the server.
    StreamId(u64)
);
id_type!(
    /// One run of a stream: every start, seek or resume of a stream begins a new run, and
    /// whatever is still in flight for an older one (a block being read, a packet due, a
    /// takeover's word) names its run and is recognised as stale by it.
    RunId(u64)
);

impl RunId {
    /// The run after this one.
    #[must_use]
    pub fn next(self) -> Self {
        Self(self.0 + 1)
    }
}

impl Gsn {
    /// The next sequence number.
    #[must_use]
    pub fn next(self) -> Self {
        Self(self.0 + 1)
    }
}

/// The key of one block of one object, the unit of placement, IO and caching.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlockKey {
    /// The object the block belongs to.
    pub object: ObjectId,
    /// The block's index within the object.
    pub index: BlockIndex,
}

impl BlockKey {
    /// The key of block `index` of `object`.
    #[must_use]
    pub fn new(object: ObjectId, index: BlockIndex) -> Self {
        Self { object, index }
    }
}

impl fmt::Display for BlockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.object, self.index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_bare_number() {
        assert_eq!(DiskId(3).to_string(), "3");
        assert_eq!(BlockKey::new(ObjectId(7), BlockIndex(12)).to_string(), "7/12");
        assert_eq!(Gsn(41).next(), Gsn(42));
    }
}

/// A placement epoch: epoch 0 is a store's initial disk set, epoch `j` follows its `j`-th
/// scaling operation (SCADDAR, `isochron_store::placement::PlacementLog`). A session is planned
/// at one; the cluster's messages name it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Epoch(pub u32);

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}
