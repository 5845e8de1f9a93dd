//! The disk profiler: throughput against IO size, measured with `O_DIRECT` reads at random
//! positions (Diskbench; XTREAM §2.3, Fig. 3).
//!
//! Why: XTREAM's admission controller predicts whether a cycle's IOs fit from a measured curve of
//! throughput against IO size ([`DiskProfile`]); this module measures that curve on a real disk
//! and keeps it next to the disk, in `<disk>/isochron-profile.json`
//! ([`PROFILE_FILE`]), where the server and `isochron bench-disk` load it from ([`load`]).
//!
//! # Measurement
//!
//! [`profile_dir`] creates (or reuses) a scratch file in the directory ([`SCRATCH_FILE`], 1 GiB
//! by default, filled with non-zero data and fsynced so that the filesystem has really allocated
//! it), then for every size from 4 KiB to 8 MiB (powers of two) reads `M` times (100 by default)
//! at uniformly random 4 KiB-aligned positions with `O_DIRECT`, one read at a time, timing each.
//! Per size (see [`summarize`]):
//!
//! * **mean** throughput = size / mean time (the harmonic form: admission adds up IO *times*);
//! * **min** throughput = size / the `q`-quantile of the times (`q` = 0.99 by default, the
//!   quantile the model's min curve uses, [`MIN_CURVE_SEEK_QUANTILE`]; `q` = 1 is the slowest
//!   read, Diskbench's literal minimum);
//! * **max** throughput = size / the `(1 − q)`-quantile of the times.
//!
//! Filesystems that refuse `O_DIRECT` (tmpfs, some overlays) fall back to buffered reads with
//! `POSIX_FADV_DONTNEED` after each, and the result says so ([`Measurement::direct_io`]): such a
//! profile is affected by the page cache.
//!
//! An emulated disk (a [`isochron_store::DiskModel`]) is not measured: [`from_model`] gives its
//! profile from the model (Gennart's seek distribution plus `size / rate`), as the emulation
//! itself will behave.
//!
//! # File form
//!
//! `{"sizes":[…],"min_mib_s":[…],"mean_mib_s":[…],"max_mib_s":[…]}`: sizes in bytes, throughputs
//! in MiB/s ([`ProfileFile`]). [`save`] writes it crash-safely (temp file, fsync, rename).
//!
//! Not here: deciding anything from the profile (that is `isochron_sched::admission`), plotting
//! (`isochron-diskbench`'s `plot`), and queue depths above one (the scheduler issues one
//! IO at a time per disk, so that is what is profiled).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use isochron_base::Bytes;
use isochron_base::mix::{SplitMix64, hash_words};
use isochron_sched::profile::{
    Curve, DiskModel, DiskProfile, MIN_CURVE_SEEK_QUANTILE, ProfileError, profiler_sizes,
};
use serde::{Deserialize, Serialize};

use crate::AlignedBuf;

/// Name of a disk's profile file, in the disk's directory.
pub const PROFILE_FILE: &str = "isochron-profile.json";
/// Name of the profiler's scratch file, in the profiled directory (kept for the next run).
pub const SCRATCH_FILE: &str = "isochron-profile.scratch";
/// Default size of the scratch file.
pub const DEFAULT_FILE_SIZE: Bytes = Bytes(1 << 30);
/// Default number of reads per size.
pub const DEFAULT_SAMPLES: usize = 100;

/// Alignment of the positions read (`O_DIRECT`).
const ALIGN: u64 = AlignedBuf::ALIGN as u64;
/// Bytes in one MiB.
const MIB: f64 = 1_048_576.0;
/// Chunk in which the scratch file is written.
const FILL_CHUNK: usize = 8 << 20;

/// What to measure.
#[derive(Clone, Debug, PartialEq)]
pub struct ProfileOptions {
    /// The IO sizes, increasing. Default: powers of two from 4 KiB to 8 MiB ([`profiler_sizes`]).
    pub sizes: Vec<Bytes>,
    /// Reads per size (`M`). Default [`DEFAULT_SAMPLES`].
    pub samples: usize,
    /// Size of the scratch file read from. Default [`DEFAULT_FILE_SIZE`] (1 GiB).
    pub file_size: Bytes,
    /// Quantile of the read times the min curve is taken at (see the module docs). Default
    /// [`MIN_CURVE_SEEK_QUANTILE`] (0.99).
    pub min_quantile: f64,
    /// Seed of the random positions.
    pub seed: u64,
}

impl Default for ProfileOptions {
    fn default() -> Self {
        Self {
            sizes: profiler_sizes(),
            samples: DEFAULT_SAMPLES,
            file_size: DEFAULT_FILE_SIZE,
            min_quantile: MIN_CURVE_SEEK_QUANTILE,
            seed: 1,
        }
    }
}

/// A measured profile and how it was measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    /// The three curves.
    pub profile: DiskProfile,
    /// Whether the reads bypassed the page cache (`O_DIRECT`); `false` after the filesystem
    /// refused it, and then the profile is affected by the page cache.
    pub direct_io: bool,
    /// The scratch file read from.
    pub scratch: PathBuf,
    /// Whether the scratch file was written by this run (rather than reused).
    pub created_scratch: bool,
    /// Reads per size.
    pub samples: usize,
    /// Wall time of the measurement (excluding the creation of the scratch file).
    pub elapsed: Duration,
}

/// Why profiling, loading or saving failed. Every variant names the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum ProfilerError {
    /// A filesystem operation failed.
    #[error("cannot {op} {path}: {source}")]
    Io {
        /// What was being done ("open", "read", "fsync", …).
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// A profile file is not the expected JSON.
    #[error("{path}: not a disk profile: {source}")]
    Json {
        /// The file.
        path: PathBuf,
        /// The parse error.
        source: serde_json::Error,
    },
    /// A profile file parses but its curves are not a usable profile.
    #[error("{path}: {source}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong with the curves.
        source: ProfileError,
    },
    /// The options cannot produce a profile.
    #[error("cannot profile {path}: {reason}")]
    BadOptions {
        /// The directory.
        path: PathBuf,
        /// What is wrong (no sizes, no samples, a file smaller than the largest size, …).
        reason: String,
    },
    /// An emulated disk's model cannot be turned into a profile.
    #[error("emulated disk model {model}: {source}")]
    Model {
        /// The model, in its spec form.
        model: String,
        /// Why.
        source: ProfileError,
    },
}

/// The profile file's JSON form: sizes in bytes, throughputs in MiB/s.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileFile {
    /// IO sizes, bytes, increasing.
    pub sizes: Vec<u64>,
    /// Min throughput per size, MiB/s.
    pub min_mib_s: Vec<f64>,
    /// Mean throughput per size, MiB/s.
    pub mean_mib_s: Vec<f64>,
    /// Max throughput per size, MiB/s.
    pub max_mib_s: Vec<f64>,
}

impl ProfileFile {
    /// The file form of `profile`.
    #[must_use]
    pub fn from_profile(profile: &DiskProfile) -> Self {
        Self {
            sizes: profile.sizes().iter().map(|s| s.0).collect(),
            min_mib_s: profile.curve_mib_s(Curve::Min),
            mean_mib_s: profile.curve_mib_s(Curve::Mean),
            max_mib_s: profile.curve_mib_s(Curve::Max),
        }
    }

    /// The profile these curves describe, checked ([`DiskProfile::new`]).
    pub fn to_profile(&self) -> Result<DiskProfile, ProfileError> {
        DiskProfile::from_mib_s(
            self.sizes.iter().map(|s| Bytes(*s)).collect(),
            &self.min_mib_s,
            &self.mean_mib_s,
            &self.max_mib_s,
        )
    }
}

/// The profile file of the disk in `dir`: `dir/isochron-profile.json`.
#[must_use]
pub fn profile_path(dir: &Path) -> PathBuf {
    dir.join(PROFILE_FILE)
}

/// The profile as JSON text (one line, then a newline).
#[must_use]
pub fn to_json(profile: &DiskProfile) -> String {
    // Serialising plain numbers and vectors cannot fail; fall back to an empty object anyway.
    let mut s = serde_json::to_string(&ProfileFile::from_profile(profile))
        .unwrap_or_else(|_| String::from("{}"));
    s.push('\n');
    s
}

/// Writes `profile` to `path` crash-safely (temp file, fsync, rename).
pub fn save(path: &Path, profile: &DiskProfile) -> Result<(), ProfilerError> {
    let io = |op, p: &Path| {
        let path = p.to_owned();
        move |source| ProfilerError::Io { op, path, source }
    };
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut f = File::create(&tmp).map_err(io("create", &tmp))?;
    f.write_all(to_json(profile).as_bytes()).map_err(io("write", &tmp))?;
    f.sync_all().map_err(io("fsync", &tmp))?;
    drop(f);
    fs::rename(&tmp, path).map_err(io("rename", &tmp))?;
    if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        File::open(dir).and_then(|d| d.sync_all()).map_err(io("fsync", dir))?;
    }
    Ok(())
}

/// Reads and checks a profile file.
pub fn load(path: &Path) -> Result<DiskProfile, ProfilerError> {
    let bytes = fs::read(path).map_err(|source| ProfilerError::Io {
        op: "read",
        path: path.to_owned(),
        source,
    })?;
    from_json(&bytes).map_err(|e| match e {
        FromJsonError::Json(source) => ProfilerError::Json { path: path.to_owned(), source },
        FromJsonError::Invalid(source) => ProfilerError::Invalid { path: path.to_owned(), source },
    })
}

/// Why JSON text is not a profile ([`from_json`]).
#[derive(Debug, thiserror::Error)]
pub enum FromJsonError {
    /// Not the expected JSON object.
    #[error("not a disk profile: {0}")]
    Json(#[from] serde_json::Error),
    /// The curves are not a usable profile.
    #[error(transparent)]
    Invalid(#[from] ProfileError),
}

/// Parses the profile file form.
pub fn from_json(bytes: &[u8]) -> Result<DiskProfile, FromJsonError> {
    let file: ProfileFile = serde_json::from_slice(bytes)?;
    Ok(file.to_profile()?)
}

/// The profile of an emulated disk: its model's, at the profiler's sizes. A model without a
/// transfer rate ([`isochron_store::DiskModel::UNLIMITED_RATE`]) gets a rate of 1 TiB/s.
pub fn from_model(model: &isochron_store::DiskModel) -> Result<DiskProfile, ProfilerError> {
    sched_model(model)
        .read_profile()
        .map_err(|source| ProfilerError::Model { model: model.to_string(), source })
}

/// The scheduler's form of an emulation model (same seek distribution, rate as `f64`).
#[must_use]
pub fn sched_model(model: &isochron_store::DiskModel) -> DiskModel {
    let rate = if model.rate == isochron_store::DiskModel::UNLIMITED_RATE {
        MIB * MIB
    } else {
        model.rate as f64
    };
    DiskModel::new(model.mean_seek, rate)
}

/// One size's min, mean and max throughput in bytes per second from its read times (sorted in
/// place): `size / t_q`, `size / mean(t)`, `size / t_{1−q}` with `t_q` the nearest-rank
/// `q`-quantile (`q` = `min_quantile`, clamped to `[0.5, 1]`). Min and max are clamped around the
/// mean so that `min ≤ mean ≤ max` holds even when one very slow read drags the mean below the
/// quantile's throughput. Zero times count as one nanosecond. `None` without times.
#[must_use]
pub fn summarize(
    size: Bytes,
    times: &mut [Duration],
    min_quantile: f64,
) -> Option<(f64, f64, f64)> {
    if times.is_empty() {
        return None;
    }
    times.sort_unstable();
    let secs = |d: Duration| d.as_secs_f64().max(1e-9);
    let q = min_quantile.clamp(0.5, 1.0);
    let rank = |p: f64| ((p * times.len() as f64).ceil() as usize).clamp(1, times.len()) - 1;
    let slow = secs(times[rank(q)]);
    let fast = secs(times[rank(1.0 - q)]);
    let mean_t = times.iter().map(|t| secs(*t)).sum::<f64>() / times.len() as f64;
    let s = size.0 as f64;
    let mean = s / mean_t;
    Some(((s / slow).min(mean), mean, (s / fast).max(mean)))
}

/// Measures the disk holding `dir` (see the module docs). Blocks for the duration: about
/// `samples × Σ time(size)`, plus writing the scratch file the first time.
pub fn profile_dir(dir: &Path, opts: &ProfileOptions) -> Result<Measurement, ProfilerError> {
    let bad = |reason: String| ProfilerError::BadOptions { path: dir.to_owned(), reason };
    let Some(largest) = opts.sizes.iter().copied().max() else {
        return Err(bad("no IO sizes".into()));
    };
    if opts.samples == 0 {
        return Err(bad("zero samples per size".into()));
    }
    if opts.sizes.iter().any(|s| s.0 == 0 || s.0 % ALIGN != 0) {
        return Err(bad(format!("IO sizes must be positive multiples of {ALIGN} bytes")));
    }
    let file_size = opts.file_size.align_up(ALIGN);
    if file_size < largest {
        return Err(bad(format!(
            "the scratch file ({file_size}) is smaller than the largest IO ({largest})"
        )));
    }
    let scratch = dir.join(SCRATCH_FILE);
    let created_scratch = ensure_scratch(&scratch, file_size)?;
    let io = |op| {
        let path = scratch.clone();
        move |source| ProfilerError::Io { op, path, source }
    };
    let direct = OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(&scratch);
    let start = Instant::now();
    let curves = match direct {
        Ok(f) => match measure(&f, true, opts, file_size, largest) {
            // Some filesystems accept the open and refuse the read.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => None,
            other => Some(other.map_err(io("read"))?),
        },
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => None,
        Err(e) => return Err(io("open")(e)),
    };
    let direct_io = curves.is_some();
    let (min, mean, max) = match curves {
        Some(c) => c,
        None => {
            tracing::warn!(path = %scratch.display(), "O_DIRECT refused; profiling with \
                buffered reads (the page cache will show in the profile)");
            let f = File::open(&scratch).map_err(io("open"))?;
            measure(&f, false, opts, file_size, largest).map_err(io("read"))?
        }
    };
    let profile = DiskProfile::new(opts.sizes.clone(), min, mean, max)
        .map_err(|source| ProfilerError::Invalid { path: scratch.clone(), source })?;
    Ok(Measurement {
        profile,
        direct_io,
        scratch,
        created_scratch,
        samples: opts.samples,
        elapsed: start.elapsed(),
    })
}

/// The three curves (bytes/s) from `opts.samples` reads of each size at random aligned
/// positions of `file`; after each buffered read the file's cached pages are dropped.
fn measure(
    file: &File,
    direct: bool,
    opts: &ProfileOptions,
    file_size: Bytes,
    largest: Bytes,
) -> io::Result<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    let mut buf = AlignedBuf::zeroed(largest.as_usize());
    let mut rng = SplitMix64::new(hash_words(&[opts.seed, 0x0050_524f_4649_4c45]));
    let (mut min, mut mean, mut max) = (Vec::new(), Vec::new(), Vec::new());
    let mut times = Vec::with_capacity(opts.samples);
    for &size in &opts.sizes {
        times.clear();
        let positions = (file_size.0 - size.0) / ALIGN + 1;
        for _ in 0..opts.samples {
            let offset = (rng.next_u64() % positions) * ALIGN;
            let dst = &mut buf.spare_mut()[..size.as_usize()];
            let t0 = Instant::now();
            read_exact_at(file, dst, offset)?;
            times.push(t0.elapsed());
            if !direct {
                drop_cache(file);
            }
        }
        // `samples > 0` was checked by the caller, so there are times.
        let (lo, avg, hi) = summarize(size, &mut times, opts.min_quantile).unwrap_or_default();
        tracing::debug!(%size, min = lo / MIB, mean = avg / MIB, max = hi / MIB, "profiled size");
        min.push(lo);
        mean.push(avg);
        max.push(hi);
    }
    Ok((min, mean, max))
}

/// Makes sure `path` is a scratch file of at least `size` bytes of non-zero data, fsynced.
/// Returns whether it had to write it.
fn ensure_scratch(path: &Path, size: Bytes) -> Result<bool, ProfilerError> {
    let io = |op| {
        let path = path.to_owned();
        move |source| ProfilerError::Io { op, path, source }
    };
    if fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() >= size.0) {
        return Ok(false);
    }
    tracing::info!(path = %path.display(), %size, "writing the profiler's scratch file");
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut f = File::create(&tmp).map_err(io("create"))?;
    let mut rng = SplitMix64::new(hash_words(&[0x0053_4352_4154_4348, size.0]));
    let mut chunk = vec![0u8; FILL_CHUNK];
    let mut written = 0u64;
    while written < size.0 {
        for w in chunk.chunks_exact_mut(8) {
            // `| 1`: every word is non-zero, so no filesystem can store the file sparsely.
            w.copy_from_slice(&(rng.next_u64() | 1).to_le_bytes());
        }
        let n = usize::try_from(size.0 - written).unwrap_or(usize::MAX).min(FILL_CHUNK);
        f.write_all(&chunk[..n]).map_err(io("write"))?;
        written += n as u64;
    }
    f.sync_all().map_err(io("fsync"))?;
    drop_cache(&f);
    drop(f);
    fs::rename(&tmp, path).map_err(io("rename"))?;
    Ok(true)
}

/// Fills `dst` from `offset`, retrying short reads.
fn read_exact_at(file: &File, dst: &mut [u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < dst.len() {
        match file.read_at(&mut dst[done..], offset + done as u64) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Asks the kernel to drop `file`'s cached pages (for buffered reads and freshly written data).
fn drop_cache(file: &File) {
    // SAFETY: `file` is open for the duration of the call; (0, 0) means the whole file; the
    // advice is a hint with no memory-safety effect.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        tracing::debug!(rc, "posix_fadvise(DONTNEED) failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|m| Duration::from_millis(*m)).collect()
    }

    #[test]
    fn summary_is_size_over_time_quantiles_and_harmonic_mean() {
        // 100 reads of 1 MiB: 98 of 10 ms, one of 20 ms, one of 50 ms.
        let mut t = ms(&[10; 98]);
        t.push(Duration::from_millis(20));
        t.push(Duration::from_millis(50));
        let (min, mean, max) = summarize(Bytes::mib(1), &mut t, 0.99).unwrap();
        // p99 (rank 99 of 100) is 20 ms; p1 is 10 ms; the mean time is 10.5 ms.
        assert!((min - MIB / 0.020).abs() < 1e-6, "{min}");
        assert!((max - MIB / 0.010).abs() < 1e-6, "{max}");
        assert!((mean - MIB / 0.0105).abs() < 1e-6, "{mean}");
        // q = 1: the slowest read.
        let (min, ..) = summarize(Bytes::mib(1), &mut t, 1.0).unwrap();
        assert!((min - MIB / 0.050).abs() < 1e-6);
        // The mean is size / mean time, not the mean of throughputs.
        let mut t = ms(&[10, 30]);
        let (_, mean, _) = summarize(Bytes(1000), &mut t, 1.0).unwrap();
        assert!((mean - 1000.0 / 0.020).abs() < 1e-9);
        assert!(summarize(Bytes(1), &mut [], 0.99).is_none());
    }

    #[test]
    fn summary_stays_ordered_with_one_huge_outlier() {
        // 99 reads of 1 ms and one of 1 s: the mean time (10.99 ms) is above the p99 time (1 ms).
        let mut t = ms(&[1; 99]);
        t.push(Duration::from_secs(1));
        let (min, mean, max) = summarize(Bytes::kib(4), &mut t, 0.99).unwrap();
        assert!(min <= mean && mean <= max, "{min} {mean} {max}");
        assert_eq!(min, mean);
        // Zero times do not divide by zero.
        let mut z = vec![Duration::ZERO; 3];
        let (a, b, c) = summarize(Bytes(4096), &mut z, 0.99).unwrap();
        assert!(a.is_finite() && b.is_finite() && c.is_finite());
    }

    #[test]
    fn json_round_trip_and_exact_form() {
        let p = DiskProfile::from_mib_s(
            vec![Bytes(4096), Bytes::mib(1)],
            &[1.0, 100.0],
            &[1.5, 150.0],
            &[2.0, 200.5],
        )
        .unwrap();
        let json = to_json(&p);
        assert_eq!(
            json,
            "{\"sizes\":[4096,1048576],\"min_mib_s\":[1.0,100.0],\"mean_mib_s\":[1.5,150.0],\
             \"max_mib_s\":[2.0,200.5]}\n"
        );
        assert_eq!(from_json(json.as_bytes()).unwrap(), p);
        // Through a file.
        let dir = tempfile::tempdir().unwrap();
        let path = profile_path(dir.path());
        save(&path, &p).unwrap();
        assert_eq!(load(&path).unwrap(), p);
        // A model profile survives the MiB/s conversion closely.
        let m = isochron_store::DiskModel { mean_seek: Duration::from_millis(10), rate: 4 << 20 };
        let p = from_model(&m).unwrap();
        let back = from_json(to_json(&p).as_bytes()).unwrap();
        for c in [Curve::Min, Curve::Mean, Curve::Max] {
            for (a, b) in p.curve(c).iter().zip(back.curve(c)) {
                assert!((a / b - 1.0).abs() < 1e-12);
            }
        }
        // 1 MiB on the model: 10 ms + 250 ms.
        let t = p.time_for(Bytes::mib(1), Curve::Mean).as_secs_f64();
        assert!((t - 0.26).abs() < 1e-9, "{t}");
    }

    #[test]
    fn bad_files_are_named_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.json");
        let e = load(&path).unwrap_err();
        assert!(matches!(e, ProfilerError::Io { op: "read", .. }), "{e}");
        fs::write(&path, "{\"sizes\":[1]}").unwrap();
        let e = load(&path).unwrap_err();
        assert!(e.to_string().contains("not a disk profile"), "{e}");
        fs::write(
            &path,
            "{\"sizes\":[4096],\"min_mib_s\":[3],\"mean_mib_s\":[2],\"max_mib_s\":[4]}",
        )
        .unwrap();
        let e = load(&path).unwrap_err();
        assert!(matches!(e, ProfilerError::Invalid { .. }), "{e}");
        assert!(e.to_string().contains("p.json"), "{e}");
        fs::write(
            &path,
            "{\"sizes\":[4096],\"min_mib_s\":[1],\"mean_mib_s\":[2],\"max_mib_s\":[4],\"x\":1}",
        )
        .unwrap();
        assert!(matches!(load(&path).unwrap_err(), ProfilerError::Json { .. }));
    }

    #[test]
    fn profiles_a_small_scratch_file_in_shape() {
        // Shape only: a CI machine's disk gives no numbers worth checking, only the curves' shape.
        let dir = tempfile::tempdir().unwrap();
        let opts = ProfileOptions {
            sizes: vec![Bytes::kib(4), Bytes::kib(64), Bytes::mib(1)],
            samples: 8,
            file_size: Bytes::mib(4),
            ..ProfileOptions::default()
        };
        let m = profile_dir(dir.path(), &opts).unwrap();
        assert!(m.created_scratch);
        assert_eq!(m.profile.sizes().len(), 3);
        for i in 0..3 {
            let (a, b, c) = (
                m.profile.curve(Curve::Min)[i],
                m.profile.curve(Curve::Mean)[i],
                m.profile.curve(Curve::Max)[i],
            );
            assert!(a > 0.0 && a <= b && b <= c, "{a} {b} {c}");
        }
        let scratch = fs::read(&m.scratch).unwrap();
        assert_eq!(scratch.len(), 4 << 20);
        assert!(scratch.chunks_exact(8).all(|w| w != [0u8; 8]));
        // Reused the second time.
        let m2 = profile_dir(dir.path(), &opts).unwrap();
        assert!(!m2.created_scratch);
        // Bad options are refused with the reason.
        let e =
            profile_dir(dir.path(), &ProfileOptions { samples: 0, ..opts.clone() }).unwrap_err();
        assert!(e.to_string().contains("zero samples"), "{e}");
        let e = profile_dir(dir.path(), &ProfileOptions { file_size: Bytes(4096), ..opts })
            .unwrap_err();
        assert!(e.to_string().contains("smaller than the largest IO"), "{e}");
    }
}
