//! Fuzzes the RTCP compound parser (with generic NACKs expanded to their sequence numbers), the
//! RTP header parser and the LSN and block-end header-extension readers: any datagram parses to
//! packets or an error, never a panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    for p in isochron_rtp::rtcp::parse_compound(data) {
        match p {
            Ok(p) => {
                let _ = p.media_ssrcs();
                if let isochron_rtp::RtcpPacket::Nack { pairs, .. } = &p {
                    let _ = isochron_rtp::rtcp::nack_seqs(pairs).count();
                }
            }
            Err(_) => break,
        }
    }
    let _ = isochron_rtp::RtpHeader::parse(data);
    let _ = isochron_rtp::lsn(data);
    let _ = isochron_rtp::block_end(data);
});
