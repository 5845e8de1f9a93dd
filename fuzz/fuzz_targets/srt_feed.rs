//! Fuzzes what an SRT publisher sends (`isochron_live::srt`): any text as a stream id is a
//! request or an error, never a panic; and any bytes, cut into messages anywhere, become
//! payloads of at most seven whole TS packets, each starting with the sync byte, which with
//! the bytes skipped account for every byte but a last partial packet.
#![no_main]

use isochron_live::srt::{StreamRequest, TS_PER_PAYLOAD, TsPacketizer};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(r) = StreamRequest::parse(text) {
            assert!(!r.name.is_empty());
        }
    }
    // Records: a length byte, then the message.
    let (mut rest, mut t, mut fed, mut out) = (data, TsPacketizer::new(), 0usize, 0usize);
    while let [len, tail @ ..] = rest {
        let n = usize::from(*len).min(tail.len());
        t.push_message(&tail[..n]);
        fed += n;
        while let Some(p) = t.poll_payload() {
            assert!(!p.is_empty() && p.len() % 188 == 0 && p.len() <= 188 * TS_PER_PAYLOAD);
            assert!(p.chunks(188).all(|c| c[0] == 0x47));
            out += p.len();
        }
        rest = &tail[n..];
    }
    let accounted = out + usize::try_from(t.skipped()).unwrap_or(usize::MAX);
    assert!(accounted <= fed && fed - accounted < 188, "{fed} fed, {accounted} out");
});
