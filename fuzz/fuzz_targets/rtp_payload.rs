//! Fuzzes the native RTP payload formats (`isochron_rtp::payload`): any bytes, cut into payloads
//! with marker bits, losses and flushes, never panic a depacketizer of any format; and any bytes
//! as an access unit are either refused by a packetizer or sent in payloads that fit
//! `max_payload`, with the marker bit where the format puts it, which the format's depacketizer
//! turns back into the same access unit (for H.264 and H.265: the NAL units the packetizer
//! sends, with 4-byte lengths).
#![no_main]

use isochron_rtp::payload::{
    AacDepacketizer, AacPacketizer, Ac3Depacketizer, Ac3Packetizer, Depacketizer, H264Depacketizer,
    H264Packetizer, H265Depacketizer, H265Packetizer, MpaDepacketizer, MpaPacketizer,
    OpusDepacketizer, OpusPacketizer, Packetizer, Payload,
};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    depacketize_anything(data);
    round_trip(data);
});

/// Reads `data` as records of a control byte (bit 0 the marker, bits 1-2: 1 a loss before the
/// payload, 2 a flush), a length byte and that many payload bytes, and feeds them to every
/// depacketizer.
fn depacketize_anything(data: &[u8]) {
    let mut ds: Vec<Box<dyn Depacketizer>> = vec![
        Box::new(H264Depacketizer::new()),
        Box::new(H265Depacketizer::new()),
        Box::new(AacDepacketizer::new()),
        Box::new(OpusDepacketizer::new()),
        Box::new(Ac3Depacketizer::new()),
        Box::new(MpaDepacketizer::new()),
    ];
    if let Ok(lbr) = AacDepacketizer::with_lengths(6, 2, 2) {
        ds.push(Box::new(lbr));
    }
    for d in &mut ds {
        let mut rest = data;
        let mut out = Vec::new();
        while let [ctl, len, tail @ ..] = rest {
            let len = usize::from(*len).min(tail.len());
            let (payload, tail) = tail.split_at(len);
            match (ctl >> 1) & 3 {
                1 => d.lost(),
                2 => out.extend(d.flush()),
                _ => {}
            }
            let _ = d.push_into(payload, ctl & 1 == 1, &mut out);
            rest = tail;
            out.clear();
        }
    }
}

/// Reads `data` as two bytes of `max_payload`, a byte choosing the NAL length size, and the
/// access unit; checks every packetizer against its depacketizer.
fn round_trip(data: &[u8]) {
    let [m0, m1, ls, au @ ..] = data else {
        return;
    };
    let max = usize::from(u16::from_be_bytes([*m0, *m1]) % 2048);
    let len_size = [1u8, 2, 4, 3][usize::from(ls & 3)];

    for h265 in [false, true] {
        let p: Box<dyn Packetizer> = if h265 {
            match H265Packetizer::new(len_size, vec![], vec![], vec![], max) {
                Ok(p) => Box::new(p),
                Err(_) => continue,
            }
        } else {
            match H264Packetizer::new(len_size, vec![], vec![], max) {
                Ok(p) => Box::new(p),
                Err(_) => continue,
            }
        };
        let want = sent_nals(au, usize::from(len_size), h265);
        let d: Box<dyn Depacketizer> = if h265 {
            Box::new(H265Depacketizer::new())
        } else {
            Box::new(H264Depacketizer::new())
        };
        let got = check(p, d, au, max, true, true);
        match (want, got) {
            (None, None) => {}
            (Some(want), Some(got)) if want.is_empty() => assert!(got.is_empty()),
            (Some(want), Some(got)) => assert_eq!(got, [want]),
            (want, got) => panic!("h265 {h265}: expected {want:?}, got {got:?}"),
        }
    }

    let whole = |got: Option<Vec<Vec<u8>>>| {
        if let Some(got) = got {
            assert_eq!(got, [au]);
        }
    };
    if let Ok(p) = AacPacketizer::new(max) {
        whole(check(Box::new(p), Box::new(AacDepacketizer::new()), au, max, true, true));
    }
    let p = OpusPacketizer::with_max_payload(max);
    whole(check(Box::new(p), Box::new(OpusDepacketizer::new()), au, max, false, true));
    if let Ok(p) = Ac3Packetizer::new(max) {
        whole(check(Box::new(p), Box::new(Ac3Depacketizer::new()), au, max, true, true));
    }
    // MPEG audio payloads are split by frame headers, which arbitrary bytes are not: only
    // check that nothing panics.
    if let Ok(p) = MpaPacketizer::new(max) {
        let _ = check(Box::new(p), Box::new(MpaDepacketizer::new()), au, max, false, false);
    }
}

/// Packetizes `au`, checks sizes and marker bits, and depacketizes; `None` if refused. The
/// depacketizer must take every payload, except MPEG audio's (`strict` false), which may find
/// arbitrary bytes not to be frames.
fn check(
    mut p: Box<dyn Packetizer>,
    mut d: Box<dyn Depacketizer>,
    au: &[u8],
    max: usize,
    marker_on_last: bool,
    strict: bool,
) -> Option<Vec<Vec<u8>>> {
    let sentinel = Payload { bytes: vec![0xee], marker: true };
    let mut payloads = vec![sentinel.clone()];
    if p.packetize(au, &mut payloads).is_err() {
        assert_eq!(payloads, [sentinel], "nothing appended on an error");
        return None;
    }
    payloads.remove(0);
    let n = payloads.len();
    let mut got = Vec::new();
    for (i, pl) in payloads.iter().enumerate() {
        assert!(pl.bytes.len() <= max, "payload {i} of {n}: {} bytes", pl.bytes.len());
        assert_eq!(pl.marker, marker_on_last && i + 1 == n, "marker of payload {i} of {n}");
        let r = d.push_into(&pl.bytes, pl.marker, &mut got);
        if strict {
            r.unwrap_or_else(|e| panic!("payload {i} of {n} refused: {e}"));
            assert!(i + 1 == n || got.is_empty(), "an access unit before the last payload");
        }
    }
    Some(got)
}

/// The NAL units of an access unit with `len_size`-byte lengths that the packetizer sends
/// (all but access unit delimiters, filler data and the types the payload format reserves),
/// with 4-byte lengths; `None` if the packetizer must refuse it.
fn sent_nals(au: &[u8], len_size: usize, h265: bool) -> Option<Vec<u8>> {
    if !matches!(len_size, 1 | 2 | 4) {
        return None;
    }
    let header = if h265 { 2 } else { 1 };
    let mut out = Vec::new();
    let mut rest = au;
    while !rest.is_empty() {
        let (prefix, tail) = rest.split_at_checked(len_size)?;
        let len = prefix.iter().fold(0usize, |a, &b| (a << 8) | usize::from(b));
        let (nal, tail) = tail.split_at_checked(len)?;
        if len < header || nal[0] & 0x80 != 0 {
            return None;
        }
        let dropped = if h265 {
            matches!((nal[0] >> 1) & 0x3f, 35 | 38 | 48..)
        } else {
            matches!(nal[0] & 0x1f, 0 | 9 | 12 | 24..)
        };
        if !dropped {
            out.extend_from_slice(&(len as u32).to_be_bytes());
            out.extend_from_slice(nal);
        }
        rest = tail;
    }
    Some(out)
}
