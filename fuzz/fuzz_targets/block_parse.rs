//! Fuzzes the block parser: a corrupt block read from disk is an error, never a panic, and a
//! block that parses can be walked packet by packet.
#![no_main]

use isochron_store::block::Block;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(b) = Block::parse(data, None) {
        for i in 0..b.packet_count() {
            let p = b.packet(i);
            assert_eq!(p.payload.len() % 188, 0);
        }
        let _ = b.payload();
    }
});
