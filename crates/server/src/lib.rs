//! isochron's runtime: RTSP listener, scheduler thread, sender thread, HTTP API
