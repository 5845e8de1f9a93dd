//! Program-specific information: PAT and PMT sections (ISO/IEC 13818-1 §2.4.4).
//!
//! Why: the analyser must know which PIDs carry video (random-access points are only meaningful
//! there), which PID carries the PCR the PMT designates (`PCR_PID`, §2.4.4.9), and what each
//! elementary stream is, for the catalog and the SDP. The PAT (PID 0, §2.4.4.3) names each
//! program's PMT PID; each PMT (§2.4.4.8) lists the program's elementary streams with their
//! `stream_type` (table 2-34) and descriptors.
//!
//! Sections are reassembled per PID across packets, honouring `pointer_field` (§2.4.4.2): the
//! bytes before the pointed-to offset finish the previous section, and several sections may follow
//! in one packet until `0xFF` stuffing. A continuity-counter gap drops the partial section. Each
//! complete section is checked against its CRC_32 (Annex A); a section that fails is counted and
//! skipped, never an error — PSI repeats every few hundred milliseconds, so the next copy serves.
//!
//! What this module does not do: conditional access, NIT/SDT/EIT, or private sections. The codec
//! names follow ffmpeg's (`h264`, `aac`, …); MPEG audio (types 0x03/0x04) is reported as `mp3`
//! without probing the layer, as ffmpeg's stream-type table does.

use std::collections::BTreeMap;

use crate::packet::{NULL_PID, PAT_PID, Packet};

/// Largest PAT/PMT section: 3 header bytes + a `section_length` of at most 1021 (§2.4.4.3,
/// §2.4.4.8).
const MAX_SECTION_LEN: usize = 3 + 1021;
/// `table_id` of a PAT section (table 2-31).
const TABLE_PAT: u8 = 0x00;
/// `table_id` of a PMT section (table 2-31).
const TABLE_PMT: u8 = 0x02;

/// What kind of elementary stream a PID carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StreamKind {
    /// A video stream; its random-access points are seek points.
    Video,
    /// An audio stream.
    Audio,
    /// Anything else: subtitles, data, private streams we do not recognise.
    Other,
}

/// One elementary stream of the transport stream, as announced by a PMT.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamInfo {
    /// The `program_number` of the PMT that lists the stream.
    pub program: u16,
    /// The elementary stream's PID.
    pub pid: u16,
    /// The PMT's `stream_type` (ISO/IEC 13818-1 table 2-34).
    pub stream_type: u8,
    /// Video, audio or other.
    pub kind: StreamKind,
    /// The codec, named as ffmpeg names it (`"h264"`, `"hevc"`, `"mpeg2video"`, `"aac"`, `"mp3"`,
    /// `"ac3"`, …); `"private_data"` for an unidentified type 0x06 and `"unknown"` for types this
    /// analyser does not know.
    pub codec: &'static str,
}

/// The kind and codec name of a `stream_type`, refined by the ES descriptors for private PES
/// (type 0x06), whose content only descriptors identify.
pub(crate) fn classify(stream_type: u8, es_descriptors: &[u8]) -> (StreamKind, &'static str) {
    use StreamKind::{Audio, Other, Video};
    match stream_type {
        0x01 => (Video, "mpeg1video"),
        0x02 => (Video, "mpeg2video"),
        0x10 => (Video, "mpeg4"),
        0x1B => (Video, "h264"),
        0x24 => (Video, "hevc"),
        0x33 => (Video, "vvc"),
        0x42 => (Video, "cavs"),
        0xD1 => (Video, "dirac"),
        0xEA => (Video, "vc1"),
        0x03 | 0x04 => (Audio, "mp3"),
        0x0F => (Audio, "aac"),
        0x11 => (Audio, "aac_latm"),
        0x81 => (Audio, "ac3"),
        0x87 => (Audio, "eac3"),
        0x05 => (Other, "private_sections"),
        0x06 => classify_private(es_descriptors),
        0x15 => (Other, "timed_id3"),
        0x86 => (Other, "scte_35"),
        _ => (Other, "unknown"),
    }
}

/// Identifies a private PES stream (type 0x06) from DVB descriptors (ETSI EN 300 468 §6.2) or a
/// registration descriptor (§2.6.8); with none of those it is `Other`.
fn classify_private(descriptors: &[u8]) -> (StreamKind, &'static str) {
    use StreamKind::{Audio, Other, Video};
    for (tag, body) in Descriptors(descriptors) {
        let found = match tag {
            0x6A => Some((Audio, "ac3")),
            0x7A => Some((Audio, "eac3")),
            0x7B => Some((Audio, "dts")),
            0x7C => Some((Audio, "aac")),
            0x56 => Some((Other, "dvb_teletext")),
            0x59 => Some((Other, "dvb_subtitle")),
            0x05 => match body.get(..4) {
                Some(b"AC-3") => Some((Audio, "ac3")),
                Some(b"EAC3") => Some((Audio, "eac3")),
                Some(b"Opus") => Some((Audio, "opus")),
                Some(b"BSSD") => Some((Audio, "s302m")),
                Some(b"DTS1" | b"DTS2" | b"DTS3") => Some((Audio, "dts")),
                Some(b"HEVC") => Some((Video, "hevc")),
                Some(b"KLVA") => Some((Other, "klv")),
                Some(b"ID3 ") => Some((Other, "timed_id3")),
                _ => None,
            },
            _ => None,
        };
        if let Some(found) = found {
            return found;
        }
    }
    (Other, "private_data")
}

/// An iterator over `(tag, body)` of a descriptor loop (§2.6); stops at the first truncated one.
struct Descriptors<'a>(&'a [u8]);

impl<'a> Iterator for Descriptors<'a> {
    type Item = (u8, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let (&tag, rest) = self.0.split_first()?;
        let (&len, rest) = rest.split_first()?;
        let Some(body) = rest.get(..usize::from(len)) else {
            self.0 = &[];
            return None;
        };
        self.0 = rest.get(usize::from(len)..).unwrap_or(&[]);
        Some((tag, body))
    }
}

/// CRC-32/MPEG-2 (ISO/IEC 13818-1 Annex A): polynomial 0x04C11DB7, initial value 0xFFFFFFFF, no
/// reflection, no final XOR. Over a whole section including its CRC_32 field it yields 0.
pub(crate) fn crc32_mpeg2(data: &[u8]) -> u32 {
    data.iter()
        .fold(0xFFFF_FFFF_u32, |crc, &b| (crc << 8) ^ CRC_TABLE[usize::from((crc >> 24) as u8 ^ b)])
}

const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u32) << 24;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000_0000 != 0 { (crc << 1) ^ 0x04C1_1DB7 } else { crc << 1 };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// Reassembles the sections of one PID from its packets' payloads (§2.4.4.2).
#[derive(Clone, Debug, Default)]
struct SectionAssembler {
    /// The bytes of a section that started in an earlier packet (empty when none is pending).
    partial: Vec<u8>,
    /// Whether `partial` holds the start of a section waiting for more bytes.
    pending: bool,
    /// The continuity counter of the last packet with a payload.
    last_cc: Option<u8>,
}

impl SectionAssembler {
    /// Feeds one packet of this PID; complete sections are appended to `out`.
    fn push(&mut self, packet: &Packet<'_>, out: &mut Vec<Vec<u8>>) {
        if !packet.has_payload {
            return;
        }
        let cc = packet.continuity_counter;
        if let Some(last) = self.last_cc {
            if cc == last {
                // A duplicate packet (§2.4.3.3 allows one): nothing new.
                return;
            }
            if cc != (last + 1) & 0x0F {
                self.reset();
            }
        }
        self.last_cc = Some(cc);
        let payload = packet.payload;
        if !packet.payload_unit_start {
            if self.pending {
                self.partial.extend_from_slice(payload);
                self.emit_partial(out);
            }
            return;
        }
        let Some((&pointer, rest)) = payload.split_first() else {
            self.reset();
            return;
        };
        let pointer = usize::from(pointer);
        if self.pending {
            // The bytes before the pointed-to offset finish the previous section.
            self.partial.extend_from_slice(rest.get(..pointer).unwrap_or(rest));
            self.emit_partial(out);
        }
        self.reset();
        let Some(mut data) = rest.get(pointer..) else {
            return;
        };
        loop {
            match data.first() {
                None | Some(0xFF) => return,
                Some(_) => {}
            }
            let Some(len) = section_len(data) else {
                // The header itself continues in the next packet.
                self.start_partial(data);
                return;
            };
            if len > MAX_SECTION_LEN {
                return;
            }
            match data.get(..len) {
                Some(section) => {
                    out.push(section.to_vec());
                    data = data.get(len..).unwrap_or(&[]);
                }
                None => {
                    self.start_partial(data);
                    return;
                }
            }
        }
    }

    fn start_partial(&mut self, data: &[u8]) {
        self.partial.clear();
        self.partial.extend_from_slice(data);
        self.pending = true;
    }

    /// Emits the pending section if it is complete; drops it if it is impossible.
    fn emit_partial(&mut self, out: &mut Vec<Vec<u8>>) {
        let Some(len) = section_len(&self.partial) else {
            return;
        };
        if len > MAX_SECTION_LEN {
            self.reset();
        } else if let Some(section) = self.partial.get(..len) {
            out.push(section.to_vec());
            // Whatever follows in this packet is stuffing: a new section would have set PUSI.
            self.reset();
        }
    }

    fn reset(&mut self) {
        self.partial.clear();
        self.pending = false;
    }
}

/// The total length of the section starting at `data` (3 + `section_length`), once its 3-byte
/// header is available.
fn section_len(data: &[u8]) -> Option<usize> {
    let b1 = *data.get(1)?;
    let b2 = *data.get(2)?;
    Some(3 + ((usize::from(b1 & 0x0F) << 8) | usize::from(b2)))
}

/// The long-form section header shared by PAT and PMT (§2.4.4.3, §2.4.4.8), checked: right
/// `table_id`, `section_syntax_indicator` set, `current_next_indicator` set, and room for the
/// CRC. Returns the 16-bit id after `section_length` and the body between the 8-byte header and
/// the CRC.
fn long_section(section: &[u8], table_id: u8) -> Option<(u16, &[u8])> {
    if *section.first()? != table_id || section.get(1)? & 0x80 == 0 {
        return None;
    }
    if section.get(5)? & 0x01 == 0 {
        // A table that is not yet applicable.
        return None;
    }
    let id = u16::from_be_bytes([*section.get(3)?, *section.get(4)?]);
    let body = section.get(8..section.len().checked_sub(4)?)?;
    Some((id, body))
}

/// Parses a PAT section into `(program_number, program_map_PID)` pairs (§2.4.4.3); program 0
/// (the network PID) is left out.
fn parse_pat(section: &[u8]) -> Option<Vec<(u16, u16)>> {
    let (_ts_id, body) = long_section(section, TABLE_PAT)?;
    Some(
        body.chunks_exact(4)
            .map(|e| (u16::from_be_bytes([e[0], e[1]]), u16::from_be_bytes([e[2] & 0x1F, e[3]])))
            .filter(|&(program, _)| program != 0)
            .collect(),
    )
}

/// One parsed PMT section (§2.4.4.8).
#[derive(Debug, PartialEq, Eq)]
struct Pmt {
    program: u16,
    pcr_pid: u16,
    streams: Vec<StreamInfo>,
}

fn parse_pmt(section: &[u8]) -> Option<Pmt> {
    let (program, body) = long_section(section, TABLE_PMT)?;
    let pcr_pid = u16::from_be_bytes([body.first()? & 0x1F, *body.get(1)?]);
    let info_len = (usize::from(body.get(2)? & 0x0F) << 8) | usize::from(*body.get(3)?);
    let mut es = body.get(4 + info_len..)?;
    let mut streams = Vec::new();
    while let Some(head) = es.get(..5) {
        let stream_type = head[0];
        let pid = u16::from_be_bytes([head[1] & 0x1F, head[2]]);
        let es_info_len = (usize::from(head[3] & 0x0F) << 8) | usize::from(head[4]);
        let Some(descriptors) = es.get(5..5 + es_info_len) else {
            break;
        };
        let (kind, codec) = classify(stream_type, descriptors);
        streams.push(StreamInfo { program, pid, stream_type, kind, codec });
        es = es.get(5 + es_info_len..).unwrap_or(&[]);
    }
    Some(Pmt { program, pcr_pid, streams })
}

/// What the scanner learns from PSI, fed every packet of the file.
#[derive(Clone, Debug, Default)]
pub(crate) struct PsiTracker {
    pat: SectionAssembler,
    /// One assembler per PMT PID named by a PAT.
    pmts: BTreeMap<u16, SectionAssembler>,
    streams: Vec<StreamInfo>,
    /// The `PCR_PID` of the first PMT seen that names one.
    pcr_pid: Option<u16>,
    crc_errors: u64,
    /// Bumped whenever a PMT adds a stream or changes one.
    generation: u64,
    sections: Vec<Vec<u8>>,
}

impl PsiTracker {
    /// Feeds one packet (any PID; only PID 0 and PMT PIDs are looked at).
    pub(crate) fn handle(&mut self, packet: &Packet<'_>) {
        let mut sections = std::mem::take(&mut self.sections);
        if packet.pid == PAT_PID {
            self.pat.push(packet, &mut sections);
            for s in &sections {
                if self.crc_ok(s) {
                    self.on_pat(s);
                }
            }
        } else if let Some(assembler) = self.pmts.get_mut(&packet.pid) {
            assembler.push(packet, &mut sections);
            for s in &sections {
                if self.crc_ok(s) {
                    self.on_pmt(s);
                }
            }
        }
        sections.clear();
        self.sections = sections;
    }

    /// The elementary streams of every PMT seen, in order of first appearance.
    pub(crate) fn streams(&self) -> &[StreamInfo] {
        &self.streams
    }

    /// The kind of stream `pid` carries, if a PMT listed it.
    pub(crate) fn kind(&self, pid: u16) -> Option<StreamKind> {
        self.streams.iter().find(|s| s.pid == pid).map(|s| s.kind)
    }

    /// The `PCR_PID` of the first PMT that named one.
    pub(crate) fn pcr_pid(&self) -> Option<u16> {
        self.pcr_pid
    }

    /// How many PAT/PMT sections failed their CRC and were skipped.
    pub(crate) fn crc_errors(&self) -> u64 {
        self.crc_errors
    }

    /// A counter that changes whenever [`kind`](Self::kind) may answer differently for some PID.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    fn crc_ok(&mut self, section: &[u8]) -> bool {
        let ok = crc32_mpeg2(section) == 0;
        if !ok {
            self.crc_errors += 1;
        }
        ok
    }

    fn on_pat(&mut self, section: &[u8]) {
        let Some(programs) = parse_pat(section) else {
            return;
        };
        for (_program, pid) in programs {
            if pid != PAT_PID && pid != NULL_PID {
                self.pmts.entry(pid).or_default();
            }
        }
    }

    fn on_pmt(&mut self, section: &[u8]) {
        let Some(pmt) = parse_pmt(section) else {
            return;
        };
        if self.pcr_pid.is_none() && pmt.pcr_pid != NULL_PID {
            self.pcr_pid = Some(pmt.pcr_pid);
        }
        for stream in pmt.streams {
            match self.streams.iter_mut().find(|s| s.pid == stream.pid) {
                Some(known) if *known == stream => {}
                Some(known) => {
                    *known = stream;
                    self.generation += 1;
                }
                None => {
                    self.streams.push(stream);
                    self.generation += 1;
                }
            }
        }
    }
}

/// Section builders for test fixtures.
#[cfg(test)]
pub(crate) mod build {
    use super::crc32_mpeg2;

    /// Appends the CRC_32 to a section whose `section_length` already counts it.
    fn with_crc(mut s: Vec<u8>) -> Vec<u8> {
        let crc = crc32_mpeg2(&s);
        s.extend_from_slice(&crc.to_be_bytes());
        s
    }

    /// A long-form section: table id, 16-bit id, version 0, current, section 0 of 0, then `body`.
    fn long_section(table_id: u8, id: u16, body: &[u8]) -> Vec<u8> {
        let section_length = 5 + body.len() + 4;
        let mut s =
            vec![table_id, 0xB0 | ((section_length >> 8) as u8 & 0x0F), section_length as u8];
        s.extend_from_slice(&id.to_be_bytes());
        s.extend_from_slice(&[0xC1, 0x00, 0x00]);
        s.extend_from_slice(body);
        with_crc(s)
    }

    /// A PAT section listing `(program_number, pmt_pid)` pairs.
    pub(crate) fn pat(programs: &[(u16, u16)]) -> Vec<u8> {
        let mut body = Vec::new();
        for &(program, pid) in programs {
            body.extend_from_slice(&program.to_be_bytes());
            body.extend_from_slice(&(0xE000 | pid).to_be_bytes());
        }
        long_section(0x00, 1, &body)
    }

    /// A PMT section for `program` with `(stream_type, pid, es_descriptors)` entries.
    pub(crate) fn pmt(program: u16, pcr_pid: u16, streams: &[(u8, u16, &[u8])]) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&(0xE000 | pcr_pid).to_be_bytes());
        body.extend_from_slice(&0xF000u16.to_be_bytes());
        for &(stream_type, pid, descriptors) in streams {
            body.push(stream_type);
            body.extend_from_slice(&(0xE000 | pid).to_be_bytes());
            body.extend_from_slice(&(0xF000 | descriptors.len() as u16).to_be_bytes());
            body.extend_from_slice(descriptors);
        }
        long_section(0x02, program, &body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet;

    /// Wraps `payload` (at most 184 bytes) into a payload-only packet.
    fn ts(pid: u16, pusi: bool, cc: u8, payload: &[u8]) -> [u8; 188] {
        let mut p = [0xFF; 188];
        p[0] = 0x47;
        p[1] = (u8::from(pusi) << 6) | (pid >> 8) as u8;
        p[2] = pid as u8;
        p[3] = 0x10 | (cc & 0x0F);
        p[4..4 + payload.len()].copy_from_slice(payload);
        p
    }

    fn feed(tracker: &mut PsiTracker, packets: &[[u8; 188]]) {
        for p in packets {
            tracker.handle(&packet::parse(p));
        }
    }

    fn pointer(ptr: u8, rest: &[u8]) -> Vec<u8> {
        let mut v = vec![ptr];
        v.extend_from_slice(rest);
        v
    }

    #[test]
    fn crc_check_value() {
        // The CRC-32/MPEG-2 check value from the CRC catalogue.
        assert_eq!(crc32_mpeg2(b"123456789"), 0x0376_E6E7);
        assert_eq!(crc32_mpeg2(&build::pat(&[(1, 0x1000)])), 0);
    }

    #[test]
    fn pat_then_pmt_in_single_packets() {
        let mut t = PsiTracker::default();
        let pat = build::pat(&[(0, 0x0010), (1, 0x1000)]);
        let pmt = build::pmt(1, 0x100, &[(0x1B, 0x100, &[]), (0x0F, 0x101, &[])]);
        feed(&mut t, &[ts(0, true, 0, &pointer(0, &pat)), ts(0x1000, true, 0, &pointer(0, &pmt))]);
        assert_eq!(t.pcr_pid(), Some(0x100));
        assert_eq!(t.kind(0x100), Some(StreamKind::Video));
        assert_eq!(t.kind(0x101), Some(StreamKind::Audio));
        assert_eq!(t.streams()[0].codec, "h264");
        assert_eq!(t.streams()[1].codec, "aac");
        assert_eq!(t.streams()[1].program, 1);
        // The NIT entry (program 0) did not become a PMT PID.
        assert!(!t.pmts.contains_key(&0x0010));
        assert_eq!(t.crc_errors(), 0);
    }

    #[test]
    fn pmt_spanning_packets_with_pointer_field() {
        // A PMT with enough streams to need three packets.
        let entries: Vec<(u8, u16, &[u8])> =
            (0..80).map(|i| (if i == 0 { 0x02 } else { 0x03 }, 0x200 + i, &[][..])).collect();
        let pmt = build::pmt(7, 0x200, &entries);
        assert!(pmt.len() > 2 * 184);
        let pat = build::pat(&[(7, 0x300)]);
        let mut packets = vec![ts(0, true, 0, &pointer(0, &pat))];
        // First packet: pointer 0 then the first 183 bytes.
        packets.push(ts(0x300, true, 0, &pointer(0, &pmt[..183])));
        packets.push(ts(0x300, false, 1, &pmt[183..367]));
        // The last packet starts with the tail (pointer_field = its length), then a new section
        // starts: a second copy of the PMT that only fits partially.
        let tail = &pmt[367..];
        let mut last = pointer(tail.len() as u8, tail);
        last.extend_from_slice(&pmt[..184 - last.len()]);
        packets.push(ts(0x300, true, 2, &last));
        let mut t = PsiTracker::default();
        feed(&mut t, &packets);
        assert_eq!(t.streams().len(), 80);
        assert_eq!(t.kind(0x200), Some(StreamKind::Video));
        assert_eq!(t.streams()[0].codec, "mpeg2video");
        assert_eq!(t.kind(0x24F), Some(StreamKind::Audio));
        assert!(t.pmts[&0x300].pending, "second copy is waiting for its continuation");
    }

    #[test]
    fn several_sections_in_one_packet() {
        let pmt1 = build::pmt(1, 0x100, &[(0x1B, 0x100, &[])]);
        let pmt2 = build::pmt(2, 0x200, &[(0x24, 0x200, &[])]);
        let pat = build::pat(&[(1, 0x1000), (2, 0x1000)]);
        let mut payload = pointer(0, &pmt1);
        payload.extend_from_slice(&pmt2);
        let mut t = PsiTracker::default();
        feed(&mut t, &[ts(0, true, 0, &pointer(0, &pat)), ts(0x1000, true, 0, &payload)]);
        assert_eq!(t.streams().len(), 2);
        assert_eq!(t.streams()[1].codec, "hevc");
        // The first PMT's PCR_PID wins.
        assert_eq!(t.pcr_pid(), Some(0x100));
    }

    #[test]
    fn bad_crc_is_counted_and_skipped() {
        let mut pat = build::pat(&[(1, 0x1000)]);
        let last = pat.len() - 1;
        pat[last] ^= 1;
        let mut t = PsiTracker::default();
        feed(&mut t, &[ts(0, true, 0, &pointer(0, &pat))]);
        assert_eq!(t.crc_errors(), 1);
        assert!(t.pmts.is_empty());
    }

    #[test]
    fn continuity_gap_drops_partial_section() {
        let entries: Vec<(u8, u16, &[u8])> = (0..80).map(|i| (0x1B, 0x200 + i, &[][..])).collect();
        let pmt = build::pmt(7, 0x200, &entries);
        let pat = build::pat(&[(7, 0x300)]);
        let packets = [
            ts(0, true, 0, &pointer(0, &pat)),
            ts(0x300, true, 0, &pointer(0, &pmt[..183])),
            // CC jumps from 0 to 2: a packet was lost.
            ts(0x300, false, 2, &pmt[183..367]),
            ts(0x300, false, 3, &pmt[367..]),
        ];
        let mut t = PsiTracker::default();
        feed(&mut t, &packets);
        assert!(t.streams().is_empty());
        assert_eq!(t.crc_errors(), 0);
    }

    #[test]
    fn duplicate_packet_is_ignored() {
        let entries: Vec<(u8, u16, &[u8])> = (0..40).map(|i| (0x1B, 0x200 + i, &[][..])).collect();
        let pmt = build::pmt(7, 0x200, &entries);
        let pat = build::pat(&[(7, 0x300)]);
        let first = ts(0x300, true, 0, &pointer(0, &pmt[..183]));
        let packets =
            [ts(0, true, 0, &pointer(0, &pat)), first, first, ts(0x300, false, 1, &pmt[183..])];
        let mut t = PsiTracker::default();
        feed(&mut t, &packets);
        assert_eq!(t.streams().len(), 40);
    }

    #[test]
    fn private_streams_are_identified_by_descriptors() {
        let ac3_dvb: &[u8] = &[0x6A, 0x01, 0x00];
        let opus_reg: &[u8] = &[0x05, 0x04, b'O', b'p', b'u', b's'];
        let lang_then_sub: &[u8] = &[0x0A, 0x04, b'e', b'n', b'g', 0x00, 0x59, 0x00];
        assert_eq!(classify(0x06, ac3_dvb), (StreamKind::Audio, "ac3"));
        assert_eq!(classify(0x06, opus_reg), (StreamKind::Audio, "opus"));
        assert_eq!(classify(0x06, lang_then_sub), (StreamKind::Other, "dvb_subtitle"));
        assert_eq!(classify(0x06, &[]), (StreamKind::Other, "private_data"));
        // A truncated descriptor loop stops quietly.
        assert_eq!(classify(0x06, &[0x6A, 0x09, 0x00]), (StreamKind::Other, "private_data"));
    }

    #[test]
    fn stream_type_table() {
        for t in [0x01, 0x02, 0x10, 0x1B, 0x24, 0x42, 0xD1, 0xEA] {
            assert_eq!(classify(t, &[]).0, StreamKind::Video, "type {t:#x}");
        }
        for t in [0x03, 0x04, 0x0F, 0x11, 0x81, 0x87] {
            assert_eq!(classify(t, &[]).0, StreamKind::Audio, "type {t:#x}");
        }
        assert_eq!(classify(0x99, &[]), (StreamKind::Other, "unknown"));
    }

    #[test]
    fn malformed_sections_do_not_panic() {
        let pmt = build::pmt(1, 0x100, &[(0x1B, 0x100, &[0x05, 0x04, b'H', b'E'])]);
        for cut in 0..pmt.len() {
            let _ = parse_pmt(&pmt[..cut]);
            let _ = parse_pat(&pmt[..cut]);
        }
        // An ES_info_length running past the section end stops the loop.
        let mut bad = build::pmt(1, 0x100, &[(0x1B, 0x100, &[])]);
        bad[15] = 0xF3;
        bad[16] = 0xFF;
        assert_eq!(parse_pmt(&bad).map(|p| p.streams.len()), Some(0));
        let mut t = PsiTracker::default();
        for byte in 0..=255u8 {
            t.handle(&packet::parse(&ts(0, byte & 1 == 0, byte, &[byte; 184])));
        }
    }

    #[test]
    fn not_current_table_is_ignored() {
        let mut pat = build::pat(&[(1, 0x1000)]);
        pat[5] &= !1;
        assert_eq!(parse_pat(&pat), None);
    }
}
