//! Why a block's IO failed, as the failure crosses threads and crates: a kind to decide on and
//! the words to show.
//!
//! Why: a block read fails on a disk's IO thread (`isochron_diskio`), is reported by the cycle
//! scheduler's core (`isochron_sched`), and is acted on by the session manager, the HTTP server,
//! the repair queue and, in a cluster, by the node that asked for the block. Formatted into a
//! `String` at the first hop, no later hop could tell a missing copy from a corrupt one, a
//! detached disk or a node that did not answer. [`IoFailure`] keeps the kind typed and carries
//! the context a person reads, as retina's and pingora's errors do (a kind plus context); it is
//! `Clone` because one failure is told to several owners (the stream and the repair queue).

use std::fmt;

use serde::{Deserialize, Serialize};

/// What went wrong, in terms a caller decides on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IoFailureKind {
    /// The copy is not where the plan puts it (no block file).
    Missing,
    /// The copy is there but is not the block: checksum, header or key.
    Corrupt,
    /// The operating system failed the IO (permissions, a device error, a full disk) or the
    /// disk's directory is not usable.
    Os,
    /// The disk is not attached to this node (removed, or never opened here).
    Detached,
    /// The IO was not done: its thread stopped first.
    Cancelled,
    /// The IO was not done: the stream it was for is not open (closed, or never admitted).
    Closed,
    /// Another node was asked for the block and failed or could not be reached.
    Remote,
    /// Every copy was tried and failed; the context says what each said.
    Exhausted,
}

impl IoFailureKind {
    /// The kind's name, as logs and metrics label it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Corrupt => "corrupt",
            Self::Os => "os",
            Self::Detached => "detached",
            Self::Cancelled => "cancelled",
            Self::Closed => "closed",
            Self::Remote => "remote",
            Self::Exhausted => "exhausted",
        }
    }
}

impl fmt::Display for IoFailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed block IO: its [`IoFailureKind`] and what happened, in words that name the disk, the
/// block or the node at fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IoFailure {
    kind: IoFailureKind,
    context: String,
}

impl IoFailure {
    /// A failure of `kind`, described by `context`.
    #[must_use]
    pub fn new(kind: IoFailureKind, context: impl Into<String>) -> Self {
        Self { kind, context: context.into() }
    }

    /// What went wrong.
    #[must_use]
    pub fn kind(&self) -> IoFailureKind {
        self.kind
    }

    /// What happened, in words.
    #[must_use]
    pub fn context(&self) -> &str {
        &self.context
    }

    /// The same failure with `what` said before it (`"block 3/12 could not be read: …"`).
    #[must_use]
    pub fn within(self, what: impl fmt::Display) -> Self {
        Self { kind: self.kind, context: format!("{what}: {}", self.context) }
    }

    /// Every copy failed: one failure of kind [`IoFailureKind::Exhausted`] that says what each
    /// copy's failure said, in the order tried.
    #[must_use]
    pub fn exhausted<'a>(
        what: impl fmt::Display,
        each: impl IntoIterator<Item = &'a Self>,
    ) -> Self {
        let each: Vec<&str> = each.into_iter().map(Self::context).collect();
        let context = if each.is_empty() {
            format!("{what}: no copy to read")
        } else {
            format!("{what}: {}", each.join("; "))
        };
        Self { kind: IoFailureKind::Exhausted, context }
    }
}

impl fmt::Display for IoFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.context)
    }
}

impl std::error::Error for IoFailure {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kind_survives_context_and_copies_are_listed_in_order() {
        let a = IoFailure::new(IoFailureKind::Corrupt, "disk 0: checksum mismatch");
        let b = IoFailure::new(IoFailureKind::Detached, "disk 1 is not attached");
        let within = a.clone().within("block 3/12");
        assert_eq!(within.kind(), IoFailureKind::Corrupt);
        assert_eq!(within.to_string(), "block 3/12: disk 0: checksum mismatch");
        let all = IoFailure::exhausted("reading block 3/12", [&a, &b]);
        assert_eq!(all.kind(), IoFailureKind::Exhausted);
        assert_eq!(
            all.to_string(),
            "reading block 3/12: disk 0: checksum mismatch; disk 1 is not attached"
        );
        assert_eq!(IoFailure::exhausted("reading", []).to_string(), "reading: no copy to read");
        assert_eq!(IoFailureKind::Remote.to_string(), "remote");
    }
}
