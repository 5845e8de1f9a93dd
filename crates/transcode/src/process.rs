//! The IO of a ladder job, quarantined here: `ffprobe` and the supervised `ffmpeg`.
//!
//! The job runs under `nice` in the idle scheduling class, with a thread bound if asked
//! ([`Budget`]), bound to the thread that starts it, reports progress from
//! `-progress pipe:1`, keeps the tail of ffmpeg's error output for the error it returns, and is
//! killed (and reaped) if its caller gives up on it — an abandoned job leaves no process
//! behind. Its outputs are plain files in a directory the caller owns; nothing here touches the
//! store.

use std::io::{BufRead as _, BufReader, Read as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::ladder::{Budget, LadderError, LadderPlan, Rung, SourceInfo};
use crate::progress::ProgressParser;

/// Why a ladder job failed.
#[derive(Debug, thiserror::Error)]
pub enum TranscodeError {
    /// A tool could not be started.
    #[error("cannot run {tool}: {source} (is ffmpeg installed?)")]
    Spawn {
        /// `ffmpeg` or `ffprobe`.
        tool: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// The plan is not possible for this source.
    #[error(transparent)]
    Ladder(#[from] LadderError),
    /// ffmpeg failed.
    #[error("ffmpeg failed ({status}): {stderr}")]
    Failed {
        /// Its exit status.
        status: String,
        /// The end of what it wrote on stderr.
        stderr: String,
    },
    /// Reading its output failed.
    #[error("reading ffmpeg's output: {0}")]
    Io(#[from] std::io::Error),
}

/// Describes `file` with `ffprobe`: an error if it has no decodable video.
pub fn probe(file: &Path) -> Result<SourceInfo, TranscodeError> {
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-print_format", "json", "-show_streams", "-show_format"])
        .arg(file)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| TranscodeError::Spawn { tool: "ffprobe", source })?;
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr);
        let why = why.trim();
        return Err(LadderError::Undecodable {
            why: if why.is_empty() { format!("ffprobe {}", out.status) } else { why.to_owned() },
        }
        .into());
    }
    Ok(SourceInfo::from_ffprobe_json(&String::from_utf8_lossy(&out.stdout))?)
}

/// Binds the child to its caller and puts it last in the CPU's queue, both kept across `nice`'s
/// exec of ffmpeg and inherited by every thread ffmpeg starts:
/// - the kernel kills it with SIGKILL when the thread that starts it ends, however it ends
///   (`PR_SET_PDEATHSIG`): a caller killed outright — `isochron ingest` or the server
///   SIGKILLed — leaves no encode running behind it (the job runs on that thread until the
///   child is reaped, so the signal never comes early);
/// - with `idle`, it runs in the idle scheduling class (`SCHED_IDLE`, sched(7)): only on CPU
///   time no other thread wants. A nice level alone is not enough: ffmpeg's twenty-odd threads at nice 10
///   together outweighed the server's few sender threads, and 298 players of a 2-core server
///   starved twice during one ladder (`docs/results/transcode.md`).
fn bound_to_caller(command: &mut Command, idle: bool) {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: the closure runs in the child between fork and exec and makes two
    // async-signal-safe system calls (prctl, sched_setscheduler) on a parameter on its own
    // stack, touching no memory of the parent's.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            let param = libc::sched_param { sched_priority: 0 };
            if idle && libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// A child process killed and reaped when dropped.
struct Supervised(Child);

impl Drop for Supervised {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// Runs the ladder `plan` on `input`, writing each rung into `out_dir` (which must exist).
/// `progress` gets the output time reached, about twice a second. Returns each rung's file,
/// highest first, once ffmpeg has exited 0 and every file is there.
pub fn run_ladder(
    plan: &LadderPlan,
    input: &Path,
    out_dir: &Path,
    budget: Budget,
    progress: &mut dyn FnMut(Duration),
) -> Result<Vec<(Rung, PathBuf)>, TranscodeError> {
    let args = plan.ffmpeg_args(&input.to_string_lossy(), &out_dir.to_string_lossy(), budget);
    let mut command = Command::new("nice");
    command.arg("-n").arg(budget.nice.min(19).to_string()).arg("ffmpeg").args(&args);
    bound_to_caller(&mut command, budget.idle);
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| TranscodeError::Spawn { tool: "ffmpeg", source })?;
    let mut child = Supervised(child);
    // stderr on its own thread, so that neither pipe can fill and stall ffmpeg.
    let mut stderr = child.0.stderr.take().expect("piped");
    let errors = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let stdout = child.0.stdout.take().expect("piped");
    let mut parser = ProgressParser::new();
    for line in BufReader::new(stdout).lines() {
        if let Some(t) = parser.handle_line(&line?) {
            progress(t);
        }
    }
    let status = child.0.wait()?;
    let stderr = errors.join().unwrap_or_default();
    if !status.success() {
        let tail: String = {
            let t = stderr.trim();
            let start = t.len().saturating_sub(2000);
            let start = (start..t.len()).find(|&i| t.is_char_boundary(i)).unwrap_or(t.len());
            t[start..].to_owned()
        };
        return Err(TranscodeError::Failed { status: status.to_string(), stderr: tail });
    }
    plan.rungs
        .iter()
        .map(|r| {
            let path = out_dir.join(LadderPlan::output_name(r));
            match std::fs::metadata(&path) {
                Ok(m) if m.len() > 0 => Ok((r.clone(), path)),
                _ => Err(TranscodeError::Failed {
                    status: status.to_string(),
                    stderr: format!("no output for rung {}", r.name),
                }),
            }
        })
        .collect()
}
