//! RTSP/RTP client for isochron's tests and benchmarks
