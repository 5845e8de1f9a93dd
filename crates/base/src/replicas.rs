//! The disks of a block's copies.
//!
//! Why here: with block replication (`store.replication` K) every block has K copies on K
//! distinct disks, which the store computes from the placement seed (`isochron-store`'s
//! `replica` module) and the scheduler reads from (`isochron-sched`'s plans fail over to the next
//! copy). Both need the same small value type without depending on each other. It is a fixed
//! array, `Copy` and allocation-free, because a plan holds one per block.

use std::fmt;

use crate::DiskId;

/// The most copies of a block a store may keep (`store.replication` is 1 to this).
pub const MAX_REPLICAS: usize = 8;

/// The disks of a block's copies in replica order: replica 0 (the primary, where readers go
/// first) then the others. Holds 1 to [`MAX_REPLICAS`] distinct disks.
#[derive(Clone, Copy)]
pub struct Replicas {
    len: u8,
    disks: [DiskId; MAX_REPLICAS],
}

impl Replicas {
    /// One copy, on `disk` (a store without replication).
    #[must_use]
    pub const fn single(disk: DiskId) -> Self {
        Self { len: 1, disks: [disk; MAX_REPLICAS] }
    }

    /// Appends replica `self.len()` on `disk`. Returns `false` (and changes nothing) when the
    /// list is full or already names `disk`: copies are on distinct disks.
    pub fn push(&mut self, disk: DiskId) -> bool {
        if self.len as usize >= MAX_REPLICAS || self.contains(disk) {
            return false;
        }
        self.disks[self.len as usize] = disk;
        self.len += 1;
        true
    }

    /// The disks, replica 0 first.
    #[must_use]
    pub fn as_slice(&self) -> &[DiskId] {
        &self.disks[..self.len as usize]
    }

    /// Replica 0: the disk readers go to first.
    #[must_use]
    pub const fn primary(&self) -> DiskId {
        self.disks[0]
    }

    /// How many copies.
    #[must_use]
    #[allow(clippy::len_without_is_empty)] // never empty
    pub const fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether a copy is on `disk`.
    #[must_use]
    pub fn contains(&self, disk: DiskId) -> bool {
        self.as_slice().contains(&disk)
    }

    /// The replica number of the copy on `disk`, if any.
    #[must_use]
    pub fn position(&self, disk: DiskId) -> Option<usize> {
        self.as_slice().iter().position(|&d| d == disk)
    }

    /// The disks, replica 0 first.
    pub fn iter(&self) -> impl Iterator<Item = DiskId> + '_ {
        self.as_slice().iter().copied()
    }
}

impl PartialEq for Replicas {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Replicas {}

impl std::hash::Hash for Replicas {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl fmt::Debug for Replicas {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

impl fmt::Display for Replicas {
    /// `3` for one copy, `3,0,5` for three (replica 0 first).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_and_bounded() {
        let mut r = Replicas::single(DiskId(3));
        assert_eq!(r.len(), 1);
        assert!(!r.push(DiskId(3)), "a disk twice");
        assert!(r.push(DiskId(0)));
        assert_eq!(r.as_slice(), &[DiskId(3), DiskId(0)]);
        assert_eq!(r.primary(), DiskId(3));
        assert_eq!(r.position(DiskId(0)), Some(1));
        assert_eq!(r.position(DiskId(7)), None);
        assert_eq!(r.to_string(), "3,0");
        for d in 10..20 {
            let _ = r.push(DiskId(d));
        }
        assert_eq!(r.len(), MAX_REPLICAS);
        // Equality looks at the copies only, not at unused slots.
        let mut a = Replicas::single(DiskId(1));
        let mut b = Replicas::single(DiskId(1));
        assert!(a.push(DiskId(2)) && b.push(DiskId(2)));
        assert_eq!(a, b);
        let mut c = Replicas::single(DiskId(9));
        c.disks[0] = DiskId(1);
        assert!(c.push(DiskId(2)));
        assert_eq!(a, c, "unused slots differ");
        assert_ne!(a, Replicas::single(DiskId(1)));
    }
}
