//! Fuzzes the reader of a feed's frames between nodes (`isochron_live::relay`): any bytes, cut
//! anywhere, give frames or an error, never a panic; every frame read re-encodes to bytes that
//! read back as the same frame.
#![no_main]

use isochron_live::relay::{FrameReader, encode};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let cut = data.first().map_or(1, |b| usize::from(*b).max(1));
    let mut reader = FrameReader::default();
    for piece in data.chunks(cut) {
        reader.feed(piece);
        loop {
            match reader.next_frame() {
                Ok(Some(frame)) => {
                    let mut again = FrameReader::default();
                    again.feed(&encode(&frame));
                    assert_eq!(again.next_frame(), Ok(Some(frame)));
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
});
