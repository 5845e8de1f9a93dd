//! isochron's block format, Yima/SCADDAR placement and catalog records (pure, no IO)
