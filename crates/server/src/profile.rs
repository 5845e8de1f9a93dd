//! Each disk's admission profile, as the scheduler thread's admission control and the
//! reorganiser (when a disk joins) need it.
//!
//! Why a module of its own: both the server's start and the reorganiser ask for a disk's profile,
//! and admission must treat every disk alike whichever asked. The profile comes from the disk's
//! emulation model or from the file `isochron profile-disk` wrote; a disk with neither is not
//! limited by admission (and a warning says so). Not here: measuring a disk (`isochron
//! profile-disk`, `isochron_diskio::profile`).

use isochron_base::DiskId;
use isochron_diskio::Store;
use isochron_sched::{DiskModel, DiskProfile};
use tracing::warn;

/// The admission profile of disk `id`: from its emulation model, or from the
/// `isochron-profile.json` that `isochron profile-disk` wrote in its directory. A disk with
/// neither is given an unlimited profile (admission cannot predict it, so it does not limit it)
/// and a warning says how to profile it.
pub fn disk_profile(store: &Store, id: DiskId) -> DiskProfile {
    let meta = store.meta();
    let record = meta.disks.iter().find(|d| d.id == id);
    if let Some(model) = record.and_then(|d| d.model) {
        let m = DiskModel::new(model.mean_seek, model.rate as f64);
        if let Ok(p) = m.read_profile() {
            return p;
        }
    }
    if let Some(d) = store.disk(id) {
        let path = d.path().join(PROFILE_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => match parse_profile(&text) {
                Ok(p) => return p,
                Err(e) => {
                    warn!(disk = %id, file = %path.display(), error = %e, "unusable disk profile")
                }
            },
            Err(_) => warn!(
                disk = %id,
                "disk {id} has no profile: admission does not limit it (run `isochron profile-disk {}`)",
                d.path().display()
            ),
        }
    }
    unlimited_profile()
}

/// The file `isochron profile-disk` writes in a disk's directory.
pub const PROFILE_FILE: &str = "isochron-profile.json";

/// Parses `{"sizes":[…],"min_mib_s":[…],"mean_mib_s":[…],"max_mib_s":[…]}`.
fn parse_profile(text: &str) -> anyhow::Result<DiskProfile> {
    #[derive(serde::Deserialize)]
    struct ProfileJson {
        sizes: Vec<u64>,
        min_mib_s: Vec<f64>,
        mean_mib_s: Vec<f64>,
        max_mib_s: Vec<f64>,
    }
    let j: ProfileJson = serde_json::from_str(text)?;
    let sizes = j.sizes.into_iter().map(isochron_base::Bytes).collect();
    Ok(DiskProfile::from_mib_s(sizes, &j.min_mib_s, &j.mean_mib_s, &j.max_mib_s)?)
}

/// A profile so fast that admission never limits the disk.
fn unlimited_profile() -> DiskProfile {
    let sizes: Vec<_> = isochron_sched::profile::profiler_sizes();
    let fast = vec![1e9; sizes.len()];
    DiskProfile::from_mib_s(sizes, &fast, &fast, &fast).expect("a valid constant profile")
}
