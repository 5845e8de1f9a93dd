//! What the audio payload formats with fragments share: AAC (RFC 3640 §3.2.3), AC-3 (RFC 4184
//! §4.1.1) and MPEG audio (RFC 2250 §3.5).
//!
//! Each sends a frame (AU) that does not fit a payload in fragments, and takes several whole
//! frames a payload; their headers differ (AU headers, FT and NF, Frag_offset), and so does how a
//! receiver tells a first fragment from a later one. What they share is here: the packetizer's
//! size limit and refusal of empty frames ([`frame_packetizer`]), the frame being reassembled
//! ([`Partial`]), and what a depacketizer does around each format's reading of a payload
//! ([`Frames`]): dropping that frame on an error, a loss or a new timestamp, and dropping the
//! fragments of a frame whose start was lost. The fragmentation itself is `super::fragment`,
//! which H.264 and H.265 use too. Opus is never fragmented and keeps nothing between payloads,
//! so it needs none of this.

use super::PayloadError;

/// A frame being reassembled from fragments, and the damage a loss leaves.
#[derive(Clone, Debug)]
pub(super) struct Partial {
    /// The fragments of the frame so far, in order.
    pub(super) bytes: Vec<u8>,
    /// What makes the frame whole: its length in bytes (AAC, MPEG audio) or its number of
    /// fragments (AC-3); 0 while no frame is being reassembled.
    pub(super) expected: usize,
    /// The fragments received (AC-3 counts them: its fragments carry no offset).
    pub(super) fragments: usize,
    /// After a loss: later fragments whose frame began before it are dropped without an error.
    pub(super) resync: bool,
}

impl Partial {
    /// Whether a frame is being reassembled.
    pub(super) const fn active(&self) -> bool {
        self.expected > 0
    }

    /// Starts a frame with its first fragment.
    pub(super) fn begin(&mut self, data: &[u8], expected: usize) {
        self.bytes.extend_from_slice(data);
        self.expected = expected;
        self.fragments = 1;
    }

    /// A later fragment with no frame begun: dropped after a loss, else an error.
    pub(super) fn orphan(&self, format: &'static str) -> Result<Vec<Vec<u8>>, PayloadError> {
        if self.resync {
            return Ok(Vec::new());
        }
        Err(PayloadError::Fragment {
            format,
            what: "a later fragment without the first (a lost packet)",
        })
    }

    /// The frame if `whole` (which ends it), else nothing yet.
    pub(super) fn finish_if(&mut self, whole: bool) -> Vec<Vec<u8>> {
        if !whole {
            return Vec::new();
        }
        let frame = std::mem::take(&mut self.bytes);
        self.clear();
        vec![frame]
    }

    /// Drops the frame being reassembled.
    fn clear(&mut self) {
        self.bytes.clear();
        self.expected = 0;
        self.fragments = 0;
    }
}

/// The state of an audio depacketizer: the format `F` (its settings, if it has any) and the frame
/// being reassembled.
#[derive(Clone, Debug)]
pub(super) struct Frames<F> {
    /// The format.
    pub(super) format: F,
    /// The frame being reassembled.
    pub(super) partial: Partial,
}

/// How one audio format reads a payload, implemented for its [`Frames`].
pub(super) trait Framing {
    /// Whether the dropping that follows a loss ends only at a marker bit (AAC, whose later
    /// fragments look like first ones; an error in a payload without the marker bit starts it
    /// too, and a new timestamp ends it) rather than at the next first fragment or whole frame
    /// (AC-3, MPEG audio).
    const RESYNC_AT_MARKER: bool = false;

    /// Reads one payload: returns the frames it completes, or keeps a fragment in the
    /// [`Partial`].
    fn take(&mut self, payload: &[u8], marker: bool) -> Result<Vec<Vec<u8>>, PayloadError>;
}

impl<F> Frames<F> {
    /// No frame, no loss.
    pub(super) const fn new(format: F) -> Self {
        let partial = Partial { bytes: Vec::new(), expected: 0, fragments: 0, resync: false };
        Self { format, partial }
    }
}

impl<F> Frames<F>
where
    Self: Framing,
{
    /// [`Framing::take`], dropping the frame being reassembled on an error.
    pub(super) fn push(
        &mut self,
        payload: &[u8],
        marker: bool,
    ) -> Result<Vec<Vec<u8>>, PayloadError> {
        let r = self.take(payload, marker);
        if r.is_err() {
            self.partial.clear();
            if Self::RESYNC_AT_MARKER {
                self.partial.resync = !marker;
            }
        }
        r
    }

    /// Packets were lost: drops the frame being reassembled and its later fragments.
    pub(super) fn lost(&mut self) {
        self.partial.clear();
        self.partial.resync = true;
    }

    /// A new RTP timestamp began: drops a frame whose last fragment never came.
    pub(super) fn flush(&mut self) -> Option<Vec<u8>> {
        self.partial.clear();
        if Self::RESYNC_AT_MARKER {
            self.partial.resync = false;
        }
        None
    }
}

/// Writes an audio format's packetizer with the docs given: the type, which holds the largest
/// payload; `new`, which refuses one below the format's `$min` bytes; `packetize`, which refuses
/// an empty frame and leaves the rest to `$cut` (a function of the frame, the piece of it that a
/// payload holds after the `$header`-byte payload header, and `out`); and its
/// [`super::Packetizer`] impl. It names `Payload`, `PayloadError`, `check_max_payload`,
/// `non_empty` and `impl_packetizer` as the invoking module imports them.
macro_rules! frame_packetizer {
    (
        $(#[$doc:meta])*
        packetizer $ty:ident(
            $format:literal, $header:literal-byte header, at least $min:literal bytes
        );
        $(#[$new_doc:meta])*
        fn new;
        $(#[$packetize_doc:meta])*
        fn packetize = $cut:path;
    ) => {
        $(#[$doc])*
        #[derive(Clone, Debug)]
        pub struct $ty {
            max_payload: usize,
        }

        impl $ty {
            $(#[$new_doc])*
            pub fn new(max_payload: usize) -> Result<Self, PayloadError> {
                Ok(Self { max_payload: check_max_payload($format, max_payload, $min)? })
            }

            /// The payloads of a frame (see [`Self::packetize`]).
            fn payloads(&self, frame: &[u8], out: &mut Vec<Payload>) -> Result<(), PayloadError> {
                // `new` saw to it that a payload holds the header and at least a byte.
                $cut(non_empty($format, "frame", frame)?, self.max_payload - $header, out)
            }
        }

        impl_packetizer! {
            $ty;
            $(#[$packetize_doc])*
            fn packetize(frame);
        }
    };
}
pub(super) use frame_packetizer;

/// Writes the depacketizer of an audio format without settings (AC-3, MPEG audio), with the docs
/// given for the type and `push`: through `depacketizer`, the type over the [`Frames`] of the
/// unit type `$format` that it declares to name the format (for its [`Framing`] impl), `new`,
/// `Default`, `push`, `push_into`, `lost` and `flush`, whose other docs such formats share, and
/// the [`super::Depacketizer`] impl. It names [`Frames`], `Depacketizer`, `PayloadError`,
/// `depacketizer` and `impl_depacketizer` as the invoking module imports them.
macro_rules! frame_depacketizer {
    (
        $(#[$doc:meta])*
        pub struct $ty:ident($format:ident);
        $(#[$push_doc:meta])*
        fn push;
    ) => {
        /// The payload format, for [`Framing`].
        #[derive(Clone, Copy, Debug)]
        struct $format;

        depacketizer! {
            $(#[$doc])*
            pub struct $ty(Frames<$format>) -> Vec<Vec<u8>>, push_into;
            /// An empty depacketizer.
            pub const fn new() = Frames::new($format);
            $(#[$push_doc])*
            fn push;
            /// Packets were lost: drops a frame being reassembled, and its later fragments.
            fn lost;
            /// A new RTP timestamp began: drops a frame whose last fragment never came.
            fn flush;
        }
    };
}
pub(super) use frame_depacketizer;
