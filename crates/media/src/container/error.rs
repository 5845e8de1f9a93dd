//! Why a container cannot be indexed.
//!
//! Every message names what is at fault — the box or element, its file offset, the track — so
//! that an operator can find it with a hex viewer; the caller adds the file name. A file that
//! merely holds tracks we cannot serve is not an error as long as one track is usable: those
//! tracks are reported in [`MediaIndex::skipped`](super::MediaIndex::skipped).

use super::{ContainerKind, SkippedTrack};

/// Why a byte stream cannot be indexed as an MP4 or Matroska file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ContainerError {
    /// The first bytes match none of the containers [`sniff`](super::sniff) knows.
    #[error(
        "not a recognised container: the first bytes are neither an MP4 (ISO BMFF) box, \
         a Matroska/WebM EBML header nor MPEG-TS packets"
    )]
    Unrecognised,
    /// MPEG-TS and M2TS files have their own indexer.
    #[error(
        "{kind} files are not demuxed by the container demuxer: index them with TsScanner \
         (convert M2TS with M2tsToTs first)"
    )]
    TransportStream {
        /// The transport-stream flavour that was passed in.
        kind: ContainerKind,
    },
    /// A box or element extends past the end of the file.
    #[error(
        "file truncated: {what} at offset {offset} needs {needed} bytes but the file ends \
         at {file_len}"
    )]
    Truncated {
        /// The box or element, e.g. `"moov box"` or `"Cluster element"`.
        what: String,
        /// The file offset where it starts.
        offset: u64,
        /// Its length in bytes, including its header.
        needed: u64,
        /// The file length the demuxer was given.
        file_len: u64,
    },
    /// The caller's reads ended before the file length it announced.
    #[error("the file ended at offset {offset}, before its stated length of {file_len} bytes")]
    ShortRead {
        /// Where the empty read happened.
        offset: u64,
        /// The file length the demuxer was given.
        file_len: u64,
    },
    /// A box or element does not follow its specification.
    #[error("malformed {what} at offset {offset}: {detail}")]
    Malformed {
        /// The box or element, e.g. `"stsd box"` or `"SimpleBlock element"`.
        what: String,
        /// The file offset where it starts.
        offset: u64,
        /// What is wrong with it.
        detail: String,
    },
    /// The sample tables of a track contradict each other.
    #[error("track {track}: inconsistent sample table ({table}): {detail}")]
    SampleTable {
        /// The container's track id.
        track: u64,
        /// The table at fault, e.g. `"stsc"` or `"trun"`.
        table: &'static str,
        /// What does not add up.
        detail: String,
    },
    /// A sample's bytes lie (partly) beyond the end of the file.
    #[error(
        "track {track}: sample {sample} at offset {offset} ({size} bytes) lies beyond the end \
         of the file ({file_len} bytes)"
    )]
    SampleOutsideFile {
        /// The container's track id.
        track: u64,
        /// The sample's number within its track, from 0.
        sample: u64,
        /// The sample's file offset.
        offset: u64,
        /// The sample's size.
        size: u32,
        /// The file length.
        file_len: u64,
    },
    /// A box or element is larger than the demuxer is willing to hold in memory.
    #[error("{what} at offset {offset} is {size} bytes, over the limit of {limit} bytes")]
    TooLarge {
        /// The box or element.
        what: String,
        /// The file offset where it starts.
        offset: u64,
        /// Its size in bytes.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The file declares more samples than the limit for its size.
    #[error(
        "more than {limit} samples: over the limit for a {file_len}-byte file \
         (at most one sample per 4 bytes, and 50 million in all)"
    )]
    TooManySamples {
        /// The limit that was hit.
        limit: u64,
        /// The file length.
        file_len: u64,
    },
    /// No track can be served; `found` lists every track and why it was refused.
    #[error("no supported track: {}", describe_skipped(found))]
    NoSupportedTrack {
        /// Every track of the file, with the reason it was skipped.
        found: Vec<SkippedTrack>,
    },
    /// A box or element that every file of this kind needs is absent.
    #[error("no {what}: {detail}")]
    Missing {
        /// The box or element, e.g. `"moov box"`.
        what: &'static str,
        /// Why it matters.
        detail: &'static str,
    },
    /// The caller handed bytes from another offset than the one asked for (a caller bug).
    #[error(
        "the demuxer asked for bytes at offset {expected:?} but was given bytes at offset {got}"
    )]
    UnexpectedData {
        /// The offset [`Demuxer::poll_need`](super::Demuxer::poll_need) asked for, if any.
        expected: Option<u64>,
        /// The offset the caller passed.
        got: u64,
    },
    /// [`Demuxer::finish`](super::Demuxer::finish) was called while bytes were still needed.
    #[error("demuxing is not finished: bytes at offset {offset} are still needed")]
    Unfinished {
        /// The offset still needed.
        offset: u64,
    },
}

/// `"track 2: codec mjpeg is not supported (…); track 3: …"`, or a note that there are no tracks.
fn describe_skipped(found: &[SkippedTrack]) -> String {
    if found.is_empty() {
        return "the file has no tracks".to_owned();
    }
    found.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container::SUPPORTED_CODECS;

    #[test]
    fn messages() {
        let e = ContainerError::NoSupportedTrack {
            found: vec![SkippedTrack {
                id: 2,
                codec: "mjpeg".to_owned(),
                reason: format!("codec mjpeg is not supported (supported: {SUPPORTED_CODECS})"),
            }],
        };
        assert_eq!(
            e.to_string(),
            "no supported track: track 2: codec mjpeg is not supported \
             (supported: H.264, H.265, AAC, Opus, AC-3, MP3)"
        );
        assert_eq!(
            ContainerError::NoSupportedTrack { found: vec![] }.to_string(),
            "no supported track: the file has no tracks"
        );
        let e = ContainerError::Malformed {
            what: "stsd box".to_owned(),
            offset: 401,
            detail: "no sample entry".to_owned(),
        };
        assert_eq!(e.to_string(), "malformed stsd box at offset 401: no sample entry");
        let e = ContainerError::TransportStream { kind: ContainerKind::M2ts };
        assert!(e.to_string().starts_with("M2TS files are not demuxed"), "{e}");
        let e = ContainerError::Truncated {
            what: "moov box".to_owned(),
            offset: 40,
            needed: 1000,
            file_len: 500,
        };
        assert_eq!(
            e.to_string(),
            "file truncated: moov box at offset 40 needs 1000 bytes but the file ends at 500"
        );
    }
}
