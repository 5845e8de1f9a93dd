//! Fuzzes the block parser: a corrupt block read from disk is an error, never a panic, and a
//! block that parses can be walked packet by packet. Each input is parsed as it is (almost
//! always stopped by the checksum) and resealed (the checksum recomputed, as a writer would),
//! so that the checks behind the checksum — lengths, entries, versions 1 to 3 — are reached.
#![no_main]

use isochron_store::block::{Block, reseal};

fn walk(data: &[u8]) {
    if let Ok(b) = Block::parse(data, None) {
        let payload = b.payload().len();
        for p in b.packets() {
            assert!(p.payload.len() <= payload);
            if !b.is_native() && !b.is_raw() {
                assert_eq!(p.payload.len() % 188, 0);
            }
        }
        if b.is_raw() {
            assert_eq!(b.packet_count(), 0);
        }
    }
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    walk(data);
    let mut sealed = data.to_vec();
    if reseal(&mut sealed) {
        walk(&sealed);
    }
});
