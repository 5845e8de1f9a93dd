//! The transcoder: ladders of renditions made by the running server (the server-side
//! processing of Gennart et al.: format, resolution and rate conversion; the design is
//! `docs/design/renditions.md`).
//!
//! One owner task holds the jobs and is fed by [`TranscodeCommand`]s: a title uploaded with a
//! ladder (`PUT /api/v1/objects/NAME?ladder=…`, or `transcode.ladder` for every upload) or
//! found in the media directory (`serve --media` with `transcode.ladder`) becomes a queued job;
//! at most `transcode.jobs` run at once, each on a blocking thread of its own that runs the
//! supervised `ffmpeg` of `isochron-transcode` (niced, its threads bounded: the CPU budget that
//! keeps playback first) and then ingests each rendition. The jobs' progress is what `GET
//! /api/v1/transcode`, the dashboard and `isochron ingest --server … --ladder` show.
//!
//! A rendition is listed only once all of it is stored (its catalog entry is its ingest's last
//! step), and a job cut short — the server stopped, ffmpeg failed — leaves no partial object:
//! its encodes are in a work directory of the store's root (`.transcode-TITLE`), made afresh
//! by the next job of the title and removed after. The media directory's titles are looked at
//! again on every scan, so a job cut short by a restart is made again (the renditions already
//! stored are kept); an upload's job is not (its spooled file is gone with the server).

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use isochron_diskio::Store;
use isochron_diskio::ingest::{IngestError, IngestReport, ingest_file};
use isochron_store::catalog::rendition_name;
use isochron_transcode::{Budget, Ladder, LadderPlan, TranscodeError};
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};
use tracing::{info, warn};

use crate::library::Library;

/// The server's ladder settings (`[transcode]`).
#[derive(Clone, Debug)]
pub struct TranscodeSettings {
    /// The ladder made of every title uploaded without one of its own and of every file of
    /// the media directory (`transcode.ladder`); `None`: only uploads that ask for one.
    pub ladder: Option<Ladder>,
    /// The time between two key frames of every rendition (`transcode.idr_interval_s`).
    pub idr_interval: Duration,
    /// Each job's CPU budget (`transcode.threads`, `transcode.nice`).
    pub budget: Budget,
    /// Jobs run at once (`transcode.jobs`).
    pub jobs: usize,
}

impl Default for TranscodeSettings {
    fn default() -> Self {
        Self {
            ladder: None,
            idr_interval: Duration::from_secs(2),
            budget: Budget::default(),
            jobs: 1,
        }
    }
}

/// Why a ladder could not be made.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// The encode failed (or could not start).
    #[error(transparent)]
    Transcode(#[from] TranscodeError),
    /// A rendition's ingest failed.
    #[error("rendition {name}: {source}")]
    Ingest {
        /// The rendition's object name.
        name: String,
        /// Why.
        source: IngestError,
    },
    /// The work directory could not be made or read.
    #[error("{}: {source}", path.display())]
    Work {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The job's thread ended without an answer (it panicked).
    #[error("the job stopped without finishing")]
    Lost,
}

/// Makes `plan`'s renditions of `file` and stores each as `TITLE~RUNG`, skipping those stored
/// already; `progress` gets the source time encoded so far. The encodes go to a work directory
/// in the store's root, made afresh (a job cut short restarts) and removed after; each
/// rendition is listed only once all of it is stored (the catalog entry is an ingest's last
/// step). Returns what each ingest stored, highest rung first. Used by the server's jobs and
/// by `isochron ingest --ladder` alike.
pub fn make_renditions(
    store: &Store,
    file: &Path,
    title: &str,
    plan: &LadderPlan,
    budget: Budget,
    progress: &mut dyn FnMut(Duration),
) -> Result<Vec<IngestReport>, JobError> {
    let mut todo = plan.clone();
    let catalog = store.catalog();
    todo.rungs.retain(|r| matches!(catalog.object(&rendition_name(title, &r.name)), Ok(None)));
    if todo.rungs.is_empty() {
        return Ok(Vec::new());
    }
    let work = store.root().join(format!(".transcode-{title}"));
    let fail = |source| JobError::Work { path: work.clone(), source };
    if work.exists() {
        std::fs::remove_dir_all(&work).map_err(fail)?;
    }
    std::fs::create_dir_all(&work).map_err(fail)?;
    let result = (|| {
        let outputs = isochron_transcode::run_ladder(&todo, file, &work, budget, progress)?;
        let mut reports = Vec::new();
        for (rung, path) in outputs {
            let name = rendition_name(title, &rung.name);
            let report = ingest_file(store, &path, &name, &mut |_| {})
                .map_err(|source| JobError::Ingest { name, source })?;
            reports.push(report);
        }
        Ok(reports)
    })();
    let _ = std::fs::remove_dir_all(&work);
    result
}

/// What a job is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Waiting for a free slot (`transcode.jobs`).
    Queued,
    /// Encoding or storing.
    Running,
    /// Every rendition is stored.
    Done,
    /// It failed (see its error).
    Failed,
}

/// A job as the API shows it.
#[derive(Clone, Debug, Serialize)]
pub struct JobInfo {
    /// The job's number (from 1, in order of submission on this node).
    pub id: u64,
    /// The title.
    pub title: String,
    /// The rungs it makes (those not stored yet when it was submitted).
    pub rungs: Vec<String>,
    /// Its state.
    pub state: JobState,
    /// The fraction of the source encoded, 0 to 1 (1 once done).
    pub progress: f64,
    /// Seconds it has run (so far, or in all).
    pub seconds: f64,
    /// Unix time it was submitted.
    pub submitted_unix_s: u64,
    /// Why it failed.
    pub error: Option<String>,
}

/// The source of a job.
#[derive(Debug)]
pub struct JobSource {
    /// The file to encode.
    pub path: PathBuf,
    /// Whether the file is the job's to remove when it ends (an upload's spooled copy).
    pub remove_after: bool,
}

/// Commands to the transcoder.
#[derive(Debug)]
pub enum TranscodeCommand {
    /// Make `plan`'s renditions of `source` as the title `title`. A title with a job queued or
    /// running gets no second one (its id is answered).
    Submit {
        /// The title (stored already).
        title: String,
        /// Its source file.
        source: JobSource,
        /// The ladder, checked against the source.
        plan: LadderPlan,
        /// The job's id.
        reply: Option<oneshot::Sender<u64>>,
    },
    /// The jobs, oldest first.
    List {
        /// The reply.
        reply: oneshot::Sender<Vec<JobInfo>>,
    },
    /// A running job encoded up to `done` of its source.
    Progress {
        /// The job.
        id: u64,
        /// How far.
        done: Duration,
    },
    /// A job ended.
    Finished {
        /// The job.
        id: u64,
        /// The renditions stored, or why not.
        result: Result<Vec<IngestReport>, JobError>,
    },
}

/// Jobs kept after they end, for the API (the oldest ended ones go first).
const KEEP_ENDED: usize = 64;

struct Job {
    info: JobInfo,
    plan: LadderPlan,
    source: Option<JobSource>,
    started: Option<Instant>,
}

/// The owner of the jobs.
pub struct Transcoder {
    settings: TranscodeSettings,
    store: Arc<Store>,
    library: Arc<Library>,
    me: mpsc::UnboundedSender<TranscodeCommand>,
    jobs: BTreeMap<u64, Job>,
    queue: VecDeque<u64>,
    running: usize,
    next: u64,
}

impl Transcoder {
    /// A transcoder storing into `store` and listing in `library`; `me` is its own channel
    /// (its jobs report on it).
    #[must_use]
    pub fn new(
        settings: TranscodeSettings,
        store: Arc<Store>,
        library: Arc<Library>,
        me: mpsc::UnboundedSender<TranscodeCommand>,
    ) -> Self {
        Self {
            settings,
            store,
            library,
            me,
            jobs: BTreeMap::new(),
            queue: VecDeque::new(),
            running: 0,
            next: 1,
        }
    }

    /// Runs until every sender is gone.
    pub async fn run(mut self, mut rx: mpsc::UnboundedReceiver<TranscodeCommand>) {
        while let Some(cmd) = rx.recv().await {
            self.handle(cmd);
            self.start_queued();
        }
    }

    fn handle(&mut self, cmd: TranscodeCommand) {
        match cmd {
            TranscodeCommand::Submit { title, source, plan, reply } => {
                let id = self.submit(title, source, plan);
                if let Some(reply) = reply {
                    let _ = reply.send(id);
                }
            }
            TranscodeCommand::List { reply } => {
                let now = Instant::now();
                let list = self
                    .jobs
                    .values()
                    .map(|j| {
                        let mut info = j.info.clone();
                        if let (JobState::Running, Some(t)) = (info.state, j.started) {
                            info.seconds = now.duration_since(t).as_secs_f64();
                        }
                        info
                    })
                    .collect();
                let _ = reply.send(list);
            }
            TranscodeCommand::Progress { id, done } => {
                if let Some(j) = self.jobs.get_mut(&id) {
                    let total = j.plan.source.duration.unwrap_or_default().as_secs_f64();
                    if total > 0.0 {
                        j.info.progress = (done.as_secs_f64() / total).clamp(0.0, 0.999);
                    }
                }
            }
            TranscodeCommand::Finished { id, result } => self.finished(id, result),
        }
    }

    fn submit(&mut self, title: String, source: JobSource, plan: LadderPlan) -> u64 {
        let pending = self.jobs.values().find(|j| {
            j.info.title == title && matches!(j.info.state, JobState::Queued | JobState::Running)
        });
        if let Some(j) = pending {
            if source.remove_after {
                let _ = std::fs::remove_file(&source.path);
            }
            return j.info.id;
        }
        let id = self.next;
        self.next += 1;
        let submitted_unix_s =
            SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let info = JobInfo {
            id,
            title,
            rungs: plan.rungs.iter().map(|r| r.name.clone()).collect(),
            state: JobState::Queued,
            progress: 0.0,
            seconds: 0.0,
            submitted_unix_s,
            error: None,
        };
        info!(job = id, title = %info.title, rungs = %info.rungs.join(","), "ladder job queued");
        self.jobs.insert(id, Job { info, plan, source: Some(source), started: None });
        self.queue.push_back(id);
        let ended: Vec<u64> = self
            .jobs
            .values()
            .filter(|j| matches!(j.info.state, JobState::Done | JobState::Failed))
            .map(|j| j.info.id)
            .collect();
        for old in ended.iter().take(ended.len().saturating_sub(KEEP_ENDED)) {
            self.jobs.remove(old);
        }
        id
    }

    fn start_queued(&mut self) {
        while self.running < self.settings.jobs.max(1) {
            let Some(id) = self.queue.pop_front() else { return };
            let Some(job) = self.jobs.get_mut(&id) else { continue };
            let Some(source) = job.source.take() else { continue };
            job.info.state = JobState::Running;
            job.started = Some(Instant::now());
            self.running += 1;
            let (store, plan, title) =
                (Arc::clone(&self.store), job.plan.clone(), job.info.title.clone());
            let (me, budget) = (self.me.clone(), self.settings.budget);
            tokio::spawn(async move {
                let progress = me.clone();
                let run = tokio::task::spawn_blocking(move || {
                    let result =
                        make_renditions(&store, &source.path, &title, &plan, budget, &mut |done| {
                            let _ = progress.send(TranscodeCommand::Progress { id, done });
                        });
                    if source.remove_after {
                        let _ = std::fs::remove_file(&source.path);
                    }
                    result
                });
                let result = run.await.unwrap_or(Err(JobError::Lost));
                let _ = me.send(TranscodeCommand::Finished { id, result });
            });
        }
    }

    fn finished(&mut self, id: u64, result: Result<Vec<IngestReport>, JobError>) {
        self.running = self.running.saturating_sub(1);
        let Some(job) = self.jobs.get_mut(&id) else { return };
        if let Some(t) = job.started {
            job.info.seconds = t.elapsed().as_secs_f64();
        }
        match result {
            Ok(reports) => {
                for r in reports {
                    let entry = crate::library::entry(&self.store, r.record);
                    self.library.insert(Arc::new(entry));
                }
                job.info.state = JobState::Done;
                job.info.progress = 1.0;
                info!(job = id, title = %job.info.title, seconds = job.info.seconds, "ladder made");
            }
            Err(e) => {
                warn!(job = id, title = %job.info.title, error = %e, "ladder job failed");
                job.info.state = JobState::Failed;
                job.info.error = Some(e.to_string());
            }
        }
    }
}

/// A plan of `ladder` for `file` (probed with ffprobe) with `settings`' key-frame interval:
/// the error names the rung (or what cannot be decoded); the caller names the file. A ladder
/// asked for (`strict`) may not have a rung taller than the source; the server's own
/// (`transcode.ladder`) leaves such rungs out.
pub fn plan(
    file: &Path,
    ladder: &Ladder,
    settings: &TranscodeSettings,
    strict: bool,
) -> Result<LadderPlan, TranscodeError> {
    let source = isochron_transcode::probe(file)?;
    let interval = settings.idr_interval;
    Ok(if strict {
        LadderPlan::new(source, ladder, interval)?
    } else {
        LadderPlan::fitting(source, ladder, interval)?
    })
}
