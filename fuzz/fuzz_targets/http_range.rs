//! Fuzzes the HTTP `Range` parser (RFC 9110 §14): any header value parses to ranges or a named
//! error, never a panic, and resolved ranges always lie inside the representation.
#![no_main]

// The parser depends only on std and isochron-base, so it is compiled here on its own rather than
// pulling the HTTP crate (and the server, and tokio) into the fuzz build.
#[path = "../../crates/http/src/range.rs"]
#[allow(dead_code)]
mod http_range;

use isochron_base::Bytes;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else { return };
    let Ok(value) = std::str::from_utf8(rest) else { return };
    let len = Bytes(u64::from(n) * 1000 + u64::from(n % 7));
    match http_range::parse(value) {
        Ok(specs) => {
            assert!(!specs.is_empty() && specs.len() <= http_range::MAX_RANGES);
            for r in http_range::resolve(&specs, len) {
                assert!(r.start.0 < r.end.0 && r.end.0 <= len.0, "{r:?} of {len:?}");
                let _ = r.content_range(len);
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
