//! RTP and RTCP wire formats for isochron (RFC 3550, RFC 2250 MP2T payload)
