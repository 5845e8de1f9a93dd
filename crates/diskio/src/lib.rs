//! All of isochron's storage IO: disk directories, O_DIRECT reads, per-disk IO threads, the redb catalog, ingest
