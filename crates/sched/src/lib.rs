//! isochron's block scheduler and shared block cache (sans-IO)
