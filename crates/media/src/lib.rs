//! MPEG-TS parsing for isochron: packets, PCR timing, RTP payload units, random-access points
