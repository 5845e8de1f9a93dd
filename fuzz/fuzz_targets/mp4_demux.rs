//! Fuzzes the MP4 demuxer: any bytes give a clean error or an index whose samples lie inside the
//! file and point at real tracks, in decode order; the sans-IO driver fed reads of any size
//! (the first byte picks it) gives the same result as the in-memory path.
#![no_main]

mod common;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    common::check(isochron_media::ContainerKind::Mp4, data);
});
