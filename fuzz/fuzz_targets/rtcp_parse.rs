//! Fuzzes the RTCP compound parser, the RTP header parser and the LSN header-extension reader:
//! any datagram parses to packets or an error, never a panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    for p in isochron_rtp::rtcp::parse_compound(data) {
        match p {
            Ok(p) => {
                let _ = p.media_ssrcs();
            }
            Err(_) => break,
        }
    }
    let _ = isochron_rtp::RtpHeader::parse(data);
    let _ = isochron_rtp::lsn(data);
});
