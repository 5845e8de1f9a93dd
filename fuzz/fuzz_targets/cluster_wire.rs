//! Fuzzes the control connections' frame reader: any byte stream yields control messages or an
//! error, never a panic, and every control message decoded re-encodes to a frame that decodes to
//! itself.
#![no_main]

use isochron_cluster::wire::{FrameReader, decode_body, encode_frame};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut r = FrameReader::default();
    r.feed(data);
    while let Ok(Some(m)) = r.next_message() {
        let f = encode_frame(&m);
        assert_eq!(decode_body(&f[4..]).as_ref(), Ok(&m));
    }
});
