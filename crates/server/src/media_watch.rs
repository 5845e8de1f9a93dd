//! The watched media directory: `serve --media DIR` ingests and serves every media file in it
//! (`.ts`, `.m2ts`, `.mts`, `.mp4`, `.m4v`, `.m4a`, `.mov`, `.mkv`, `.mka`, `.webm`), including files that
//! appear while the server runs ("drop a file in, it streams").
//!
//! The directory is scanned every `scan_interval`. A new file is ingested once its size and
//! modification time have not changed between two scans, so a file still being copied in is not
//! ingested half-written. A file that fails to ingest is reported once and retried only if it
//! changes. The object name is the file stem, with characters outside `[A-Za-z0-9._-]` replaced
//! by `_`.
//!
//! With `transcode.ladder` every file's ladder is asked of the transcoder once it is stored
//! (and again after a restart, or when the file changes), when a rung of it is not stored yet.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use isochron_diskio::Store;
use tracing::{info, warn};

use crate::library::Library;
use crate::transcoder::Laddering;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
}

#[derive(Debug)]
enum Seen {
    Changing(Stamp),
    Failed(Stamp),
}

/// The object name for a media file: its stem, made safe.
#[must_use]
pub fn object_name(path: &Path) -> Option<String> {
    let stem = path.file_stem()?.to_string_lossy();
    let name: String = stem
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' })
        .collect();
    (!name.is_empty() && name != "." && name != "..").then_some(name)
}

fn media_files(dir: &Path) -> Vec<(PathBuf, Stamp)> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut v: Vec<_> = rd
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(is_media_extension))
        .filter_map(|p| {
            let m = std::fs::metadata(&p).ok()?;
            m.is_file().then(|| (p, Stamp { len: m.len(), modified: m.modified().ok() }))
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// The file extensions of media the directory ingests: MPEG-TS, M2TS, MP4 and Matroska/WebM.
const MEDIA_EXTENSIONS: &[&str] =
    &["ts", "m2ts", "mts", "mp4", "m4v", "m4a", "mov", "mkv", "mka", "webm"];

fn is_media_extension(e: &std::ffi::OsStr) -> bool {
    MEDIA_EXTENSIONS.iter().any(|m| e.eq_ignore_ascii_case(m))
}

/// Ingests one file into the store and the library; logs the outcome.
fn ingest_one(store: &Store, library: &Library, path: &Path, name: &str) -> bool {
    match isochron_diskio::ingest::ingest_file(store, path, name, &mut |_| {}) {
        Ok(report) => {
            if report.trailing_bytes > 0 {
                warn!(file = %path.display(), bytes = report.trailing_bytes,
                    "file ends in a partial MPEG-TS packet; ingested the whole packets only");
            }
            for s in &report.skipped {
                warn!(file = %path.display(), "{s}; ingested the other tracks");
            }
            let rec = report.record;
            info!(file = %path.display(), object = %rec.name, duration_s = rec.duration.as_secs_f64(),
                blocks = rec.blocks.len(), "ingested");
            library.insert(Arc::new(crate::library::entry(store, rec)));
            true
        }
        Err(e) => {
            warn!("cannot ingest {}: {e}", path.display());
            false
        }
    }
}

/// Ingests every `.ts` in `dir` that is not stored yet (at startup: files already there are
/// taken as complete).
pub(crate) fn ingest_existing(store: &Store, library: &Library, dir: &Path) {
    for (path, _) in media_files(dir) {
        let Some(name) = object_name(&path) else { continue };
        if !library.contains(&name) {
            ingest_one(store, library, &path, &name);
        }
    }
}

/// Watches `dir` forever (and ladders its files with `laddering`).
pub(crate) async fn watch(
    dir: PathBuf,
    interval: Duration,
    store: Arc<Store>,
    library: Arc<Library>,
    laddering: Option<Laddering>,
) {
    let laddering = laddering.map(Arc::new);
    let mut seen: HashMap<PathBuf, Seen> = HashMap::new();
    // The files whose ladder was asked for (or could not be), as they were then.
    let mut laddered: HashMap<PathBuf, Stamp> = HashMap::new();
    let mut tick = tokio::time::interval(interval);
    loop {
        tick.tick().await;
        let d = dir.clone();
        let files = tokio::task::spawn_blocking(move || media_files(&d)).await.unwrap_or_default();
        for (path, stamp) in files {
            let Some(name) = object_name(&path) else { continue };
            if library.contains(&name) {
                seen.remove(&path);
                if let Some(l) = &laddering
                    && laddered.get(&path) != Some(&stamp)
                {
                    laddered.insert(path.clone(), stamp);
                    let (l, st, p) = (Arc::clone(l), Arc::clone(&store), path.clone());
                    let _ = tokio::task::spawn_blocking(move || l.ask(&st, &p, &name)).await;
                }
                continue;
            }
            match seen.get(&path) {
                Some(Seen::Failed(s)) if *s == stamp => continue,
                Some(Seen::Changing(s)) if *s == stamp && stamp.len > 0 => {}
                _ => {
                    seen.insert(path, Seen::Changing(stamp));
                    continue;
                }
            }
            let (st, lib, p, n) = (Arc::clone(&store), Arc::clone(&library), path.clone(), name);
            let ok = tokio::task::spawn_blocking(move || ingest_one(&st, &lib, &p, &n))
                .await
                .unwrap_or(false);
            if ok {
                seen.remove(&path);
            } else {
                seen.insert(path, Seen::Failed(stamp));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_from_paths() {
        assert_eq!(object_name(Path::new("/m/clip.ts")).as_deref(), Some("clip"));
        assert_eq!(object_name(Path::new("my clip (1).ts")).as_deref(), Some("my_clip__1_"));
        assert_eq!(object_name(Path::new("a.b.ts")).as_deref(), Some("a.b"));
    }
}
