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
//! its encodes are in a work directory of the store's root (`.transcode-TITLE~RUNG…`), made
//! afresh by the next job of those rungs and removed after; what a server killed outright left
//! is swept when it starts again ([`sweep_work`]). The media directory's titles are looked at
//! again on every scan, so a job cut short by a restart is made again (the renditions already
//! stored are kept); an upload's job is not (its spooled file is gone with the server).
//!
//! A job's IO is non-real-time: its renditions' blocks are written through the disks'
//! non-real-time share ([`crate::nrt::NrtWrites`]), as a reorganisation's copies are.
//!
//! In a cluster a ladder is not made where it was submitted: each rung becomes a task in etcd
//! ([`tasks`]) that any node claims under its lease, reads the title's source from the store
//! in the share ([`crate::nrt::spool_source`]; a title that keeps no source file, a live
//! recording, from the node's own HLS of it) and makes; a rung whose node dies is claimed
//! again by another once that node's lease has lapsed. The submitting node's job follows its
//! rungs' tasks and the catalog.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use isochron_dataplane::sched_thread::SchedCommand;
use isochron_diskio::Store;
use isochron_diskio::ingest::{IngestError, IngestReport, ingest_file_via};
use isochron_diskio::store::CopyWriter;
use isochron_store::catalog::rendition_name;
use isochron_transcode::{Budget, Ladder, LadderPlan, TranscodeError};
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};
use tracing::{info, warn};

use crate::library::Library;
use crate::nrt::{NrtWrites, SpoolError};
use crate::reorg::ReorgCommand;

pub mod tasks;

use tasks::{ClaimCommand, TaskInfo, TaskRecord, View};

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
    /// The title's source could not be read from the store.
    #[error(transparent)]
    Source(#[from] SpoolError),
    /// The title is not listed on this node.
    #[error("title {0:?} is not in the catalog")]
    NoTitle(String),
    /// The job's thread ended without an answer (it panicked).
    #[error("the job stopped without finishing")]
    Lost,
}

/// The work directory of a job making `plan`'s rungs of `title`: `.transcode-TITLE~RUNG…` in
/// the store's root, one name per set of rungs (a cluster node may make two rungs of one title
/// at once).
#[must_use]
pub fn work_dir(store: &Store, title: &str, plan: &LadderPlan) -> PathBuf {
    let mut name = format!(".transcode-{title}");
    for r in &plan.rungs {
        name.push('~');
        name.push_str(&r.name);
    }
    store.root().join(name)
}

/// Removes what jobs cut short left in the store's root (work directories, spooled sources):
/// of `title`, or of every title. Only where no job runs: a server as it starts, the CLI on
/// the store it holds.
pub fn sweep_work(store: &Store, title: Option<&str>) {
    let Ok(entries) = std::fs::read_dir(store.root()) else { return };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(".transcode-")) else {
            continue;
        };
        let ours = title.is_none_or(|t| {
            rest.strip_prefix(t).is_some_and(|r| r.is_empty() || r.starts_with(['~', '.']))
        });
        if !ours {
            continue;
        }
        let path = e.path();
        let removed = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        match removed {
            Ok(()) => info!(path = %path.display(), "removed what a ladder job cut short left"),
            Err(e) => warn!(path = %path.display(), error = %e, "cannot remove a job's leftovers"),
        }
    }
}

/// Makes `plan`'s renditions of `file` and stores each as `TITLE~RUNG`, skipping those stored
/// already; `progress` gets the source time encoded so far. The encodes go to a work directory
/// in the store's root, made afresh (a job cut short restarts) and removed after; each
/// rendition is listed only once all of it is stored (the catalog entry is an ingest's last
/// step); its blocks' copies are written by `via` when given (the server's jobs: the disks'
/// non-real-time share). Returns what each ingest stored, highest rung first. Used by the
/// server's jobs and by `isochron ingest --ladder` alike.
pub fn make_renditions(
    store: &Store,
    file: &Path,
    title: &str,
    plan: &LadderPlan,
    budget: Budget,
    via: Option<&dyn CopyWriter>,
    progress: &mut dyn FnMut(Duration),
) -> Result<Vec<IngestReport>, JobError> {
    let mut todo = plan.clone();
    let catalog = store.catalog();
    todo.rungs.retain(|r| matches!(catalog.object(&rendition_name(title, &r.name)), Ok(None)));
    if todo.rungs.is_empty() {
        return Ok(Vec::new());
    }
    let work = work_dir(store, title, &todo);
    let fail = |source| JobError::Work { path: work.clone(), source };
    if work.exists() {
        std::fs::remove_dir_all(&work).map_err(fail)?;
    }
    std::fs::create_dir_all(&work).map_err(fail)?;
    let result = (|| {
        let started = Instant::now();
        let outputs = isochron_transcode::run_ladder(&todo, file, &work, budget, progress)?;
        let rungs = todo.rungs.iter().map(|r| r.name.as_str()).collect::<Vec<_>>().join(",");
        info!(title, %rungs, seconds = started.elapsed().as_secs_f64(),
            "ladder encoded; storing the renditions");
        let mut reports = Vec::new();
        for (rung, path) in outputs {
            let name = rendition_name(title, &rung.name);
            let report = ingest_file_via(store, &path, &name, &mut |_| {}, via)
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
    /// Waiting for a free slot (`transcode.jobs`), or in a cluster for a node to claim it.
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
    /// In a cluster: the nodes making its rungs now (a ladder submitted here), or this node
    /// (a rung it claimed); empty on a single server.
    pub nodes: Vec<String>,
}

/// The source of a job.
#[derive(Debug)]
pub struct JobSource {
    /// The file to encode.
    pub path: PathBuf,
    /// Whether the file is the job's to remove when it ends (an upload's spooled copy).
    pub remove_after: bool,
}

/// What `GET /api/v1/transcode` shows.
#[derive(Clone, Debug, Default, Serialize)]
pub struct JobList {
    /// This node's jobs, oldest first: the ladders submitted here and, in a cluster, the rungs
    /// it claimed.
    pub jobs: Vec<JobInfo>,
    /// In a cluster: every rung queued, running or failed in etcd (a stored rung's task is
    /// gone).
    pub tasks: Vec<TaskInfo>,
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
    /// The jobs.
    List {
        /// The reply.
        reply: oneshot::Sender<JobList>,
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
    /// In a cluster: this node claimed a rung ([`tasks::Claimer`]); make it.
    Claimed {
        /// The task.
        task: TaskRecord,
    },
    /// In a cluster: the tasks and claims etcd holds now.
    Tasks {
        /// What the claimer read.
        view: View,
    },
}

/// Jobs kept after they end, for the API (the oldest ended ones go first).
const KEEP_ENDED: usize = 64;

/// What a job makes, and from what.
enum Work {
    /// A ladder made here from a local file (a single server).
    Local(Option<JobSource>),
    /// A ladder submitted here in a cluster: its rungs are tasks any node makes.
    Ladder,
    /// A rung this node claimed from the cluster's tasks (`TITLE~RUNG`).
    Claimed(String),
}

struct Job {
    info: JobInfo,
    plan: LadderPlan,
    work: Work,
    started: Option<Instant>,
    /// When a claimed rung's progress was last told to etcd.
    told: Option<Instant>,
}

/// A cluster node's link to the tasks in etcd.
pub struct ClusterJobs {
    /// This node's name.
    pub node: String,
    /// The claimer ([`tasks::Claimer`]).
    pub claims: std::sync::mpsc::Sender<ClaimCommand>,
}

/// The IO a job needs beyond the store: the scheduler thread (non-real-time reads of a source
/// in the store) and the reorganiser (non-real-time writes).
#[derive(Clone)]
pub struct JobIo {
    /// The scheduler thread.
    pub sched: crossbeam_channel::Sender<SchedCommand>,
    /// The reorganiser.
    pub reorg: mpsc::UnboundedSender<ReorgCommand>,
    /// This node's HTTP (`http://host:port`), whose HLS of a title is the source of a claimed
    /// rung when the title keeps no source file (a live recording).
    pub http: Option<String>,
}

/// How often a claimed rung's progress goes to etcd.
const TELL_PROGRESS: Duration = Duration::from_secs(1);

/// The owner of the jobs.
pub struct Transcoder {
    settings: TranscodeSettings,
    store: Arc<Store>,
    library: Arc<Library>,
    io: JobIo,
    cluster: Option<ClusterJobs>,
    /// The last view of the cluster's tasks.
    view: View,
    me: mpsc::UnboundedSender<TranscodeCommand>,
    jobs: BTreeMap<u64, Job>,
    queue: VecDeque<u64>,
    running: usize,
    next: u64,
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Transcoder {
    /// A transcoder storing into `store` and listing in `library`, its jobs' IO through `io`;
    /// `me` is its own channel (its jobs report on it); `cluster` in a cluster.
    #[must_use]
    pub fn new(
        settings: TranscodeSettings,
        (store, library): (Arc<Store>, Arc<Library>),
        io: JobIo,
        cluster: Option<ClusterJobs>,
        me: mpsc::UnboundedSender<TranscodeCommand>,
    ) -> Self {
        Self {
            settings,
            store,
            library,
            io,
            cluster,
            view: View::default(),
            me,
            jobs: BTreeMap::new(),
            queue: VecDeque::new(),
            running: 0,
            next: 1,
        }
    }

    /// Runs until every sender is gone (first sweeping what jobs cut short left: none runs
    /// yet).
    pub async fn run(mut self, mut rx: mpsc::UnboundedReceiver<TranscodeCommand>) {
        let store = Arc::clone(&self.store);
        let _ = tokio::task::spawn_blocking(move || sweep_work(&store, None)).await;
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
                let jobs = self
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
                let tasks = if self.cluster.is_some() { self.view.infos() } else { Vec::new() };
                let _ = reply.send(JobList { jobs, tasks });
            }
            TranscodeCommand::Progress { id, done } => self.progress(id, done),
            TranscodeCommand::Finished { id, result } => self.finished(id, result),
            TranscodeCommand::Claimed { task } => self.claimed(task),
            TranscodeCommand::Tasks { view } => {
                self.view = view;
                self.follow_ladders();
            }
        }
    }

    fn progress(&mut self, id: u64, done: Duration) {
        let Some(j) = self.jobs.get_mut(&id) else { return };
        let total = j.plan.source.duration.unwrap_or_default().as_secs_f64();
        if total > 0.0 {
            j.info.progress = (done.as_secs_f64() / total).clamp(0.0, 0.999);
        }
        if let (Work::Claimed(name), Some(c)) = (&j.work, &self.cluster)
            && j.told.is_none_or(|t| t.elapsed() >= TELL_PROGRESS)
        {
            j.told = Some(Instant::now());
            let cmd = ClaimCommand::Progress { name: name.clone(), progress: j.info.progress };
            let _ = c.claims.send(cmd);
        }
    }

    fn new_job(&mut self, title: String, plan: LadderPlan, work: Work) -> u64 {
        let id = self.next;
        self.next += 1;
        let info = JobInfo {
            id,
            title,
            rungs: plan.rungs.iter().map(|r| r.name.clone()).collect(),
            state: JobState::Queued,
            progress: 0.0,
            seconds: 0.0,
            submitted_unix_s: unix_now(),
            error: None,
            nodes: Vec::new(),
        };
        self.jobs.insert(id, Job { info, plan, work, started: None, told: None });
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

    fn submit(&mut self, title: String, source: JobSource, plan: LadderPlan) -> u64 {
        let pending = self.jobs.values().find(|j| {
            j.info.title == title
                && !matches!(j.work, Work::Claimed(_))
                && matches!(j.info.state, JobState::Queued | JobState::Running)
        });
        if let Some(j) = pending {
            if source.remove_after {
                let _ = std::fs::remove_file(&source.path);
            }
            return j.info.id;
        }
        let rungs = plan.rungs.iter().map(|r| r.name.as_str()).collect::<Vec<_>>().join(",");
        let Some(cluster) = &self.cluster else {
            let id = self.new_job(title, plan, Work::Local(Some(source)));
            info!(job = id, title = %self.jobs[&id].info.title, %rungs, "ladder job queued");
            self.queue.push_back(id);
            return id;
        };
        // A cluster: the store holds the source; each rung is a task for any node.
        if source.remove_after {
            let _ = std::fs::remove_file(&source.path);
        }
        let tasks: Vec<TaskRecord> = plan
            .rungs
            .iter()
            .map(|r| TaskRecord {
                title: title.clone(),
                plan: LadderPlan { rungs: vec![r.clone()], ..plan.clone() },
                submitted_by: cluster.node.clone(),
                submitted_unix_s: unix_now(),
                error: None,
                attempts: 0,
                last_error: None,
                not_before_unix_s: 0,
            })
            .collect();
        let _ = cluster.claims.send(ClaimCommand::Publish(tasks));
        let id = self.new_job(title, plan, Work::Ladder);
        if let Some(j) = self.jobs.get_mut(&id) {
            j.started = Some(Instant::now());
        }
        info!(job = id, title = %self.jobs[&id].info.title, %rungs,
            "ladder job: its rungs are tasks for the cluster's nodes");
        id
    }

    /// A ladder submitted here in a cluster, from its rungs' tasks and the catalog: done once
    /// every rendition is listed, failed once a rung's task failed.
    fn follow_ladders(&mut self) {
        for j in self.jobs.values_mut() {
            if !matches!(j.work, Work::Ladder)
                || !matches!(j.info.state, JobState::Queued | JobState::Running)
            {
                continue;
            }
            let (mut done, mut progress, mut running, mut nodes) = (0, 0.0, false, Vec::new());
            let mut error = None;
            for rung in &j.info.rungs {
                let name = rendition_name(&j.info.title, rung);
                let task = self.view.tasks.get(&name);
                let claim = self.view.claims.get(&name);
                if self.library.get(&name).is_some() && task.is_none() {
                    done += 1;
                    progress += 1.0;
                } else if let Some(e) = task.and_then(|t| t.error.clone()) {
                    error = Some(format!("rung {rung}: {e}"));
                } else if let Some(c) = claim {
                    running = true;
                    progress += c.progress;
                    nodes.push(c.node.clone());
                }
            }
            let n = j.info.rungs.len().max(1);
            j.info.progress = (progress / n as f64).clamp(0.0, 1.0);
            j.info.nodes = nodes;
            if let Some(t) = j.started {
                j.info.seconds = t.elapsed().as_secs_f64();
            }
            if let Some(e) = error {
                warn!(job = j.info.id, title = %j.info.title, error = %e, "ladder job failed");
                j.info.state = JobState::Failed;
                j.info.error = Some(e);
            } else if done == n {
                j.info.state = JobState::Done;
                info!(job = j.info.id, title = %j.info.title, seconds = j.info.seconds,
                    "ladder made by the cluster");
            } else if running || done > 0 {
                j.info.state = JobState::Running;
            }
        }
    }

    /// A rung this node claimed: made at once (the claimer counts this node's slots).
    fn claimed(&mut self, task: TaskRecord) {
        let node = self.cluster.as_ref().map(|c| c.node.clone()).into_iter().collect();
        let id = self.new_job(task.title.clone(), task.plan.clone(), Work::Claimed(task.name()));
        let Some(job) = self.jobs.get_mut(&id) else { return };
        job.info.nodes = node;
        job.info.state = JobState::Running;
        job.started = Some(Instant::now());
        self.running += 1;
        let (store, library, io) =
            (Arc::clone(&self.store), Arc::clone(&self.library), self.io.clone());
        let budget = self.settings.budget;
        let me = self.me.clone();
        tokio::spawn(async move {
            let progress = me.clone();
            let run = tokio::task::spawn_blocking(move || {
                make_claimed(&store, &library, &io, &task, budget, &mut |done| {
                    let _ = progress.send(TranscodeCommand::Progress { id, done });
                })
            });
            let result = run.await.unwrap_or(Err(JobError::Lost));
            let _ = me.send(TranscodeCommand::Finished { id, result });
        });
    }

    fn start_queued(&mut self) {
        while self.running < self.settings.jobs.max(1) {
            let Some(id) = self.queue.pop_front() else { return };
            let Some(job) = self.jobs.get_mut(&id) else { continue };
            let Work::Local(source) = &mut job.work else { continue };
            let Some(source) = source.take() else { continue };
            job.info.state = JobState::Running;
            job.started = Some(Instant::now());
            self.running += 1;
            let (store, plan, title) =
                (Arc::clone(&self.store), job.plan.clone(), job.info.title.clone());
            let (me, budget, reorg) =
                (self.me.clone(), self.settings.budget, self.io.reorg.clone());
            tokio::spawn(async move {
                let progress = me.clone();
                let run = tokio::task::spawn_blocking(move || {
                    let via = NrtWrites { store: Arc::downgrade(&store), reorg };
                    let result = make_renditions(
                        &store,
                        &source.path,
                        &title,
                        &plan,
                        budget,
                        Some(&via),
                        &mut |done| {
                            let _ = progress.send(TranscodeCommand::Progress { id, done });
                        },
                    );
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
        if let (Work::Claimed(name), Some(c)) = (&job.work, &self.cluster) {
            let error = result.as_ref().err().map(ToString::to_string);
            let _ = c.claims.send(ClaimCommand::Ended { name: name.clone(), error });
        }
        match result {
            Ok(reports) => {
                for r in reports {
                    let entry = crate::library::entry(&self.store, r.record);
                    self.library.insert(Arc::new(entry));
                }
                job.info.state = JobState::Done;
                job.info.progress = 1.0;
                info!(job = id, title = %job.info.title, rungs = %job.info.rungs.join(","),
                    seconds = job.info.seconds, "renditions made");
            }
            Err(e) => {
                warn!(job = id, title = %job.info.title, error = %e, "ladder job failed");
                job.info.state = JobState::Failed;
                job.info.error = Some(e.to_string());
            }
        }
    }
}

/// How long a claimed rung waits for its title to be listed on this node (the catalog reaches
/// each node through etcd's watch).
const TITLE_WAIT: Duration = Duration::from_secs(10);

/// Makes a claimed rung: the title's source spooled from the store (read in the disks'
/// non-real-time share, wherever its blocks are) next to the work directory, encoded, the
/// rendition stored through the share, the spool removed.
fn make_claimed(
    store: &Arc<Store>,
    library: &Library,
    io: &JobIo,
    task: &TaskRecord,
    budget: Budget,
    progress: &mut dyn FnMut(Duration),
) -> Result<Vec<IngestReport>, JobError> {
    let name = task.name();
    if matches!(store.catalog().object(&name), Ok(Some(_))) {
        return Ok(Vec::new()); // made already (by a node whose claim lapsed before it ended)
    }
    let deadline = Instant::now() + TITLE_WAIT;
    let entry = loop {
        if let Some(e) = library.get(&task.title) {
            break e;
        }
        if Instant::now() >= deadline {
            return Err(JobError::NoTitle(task.title.clone()));
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let via = NrtWrites { store: Arc::downgrade(store), reorg: io.reorg.clone() };
    if entry.record.source_blocks().1.is_empty()
        && let Some(http) = &io.http
    {
        // No source file (a live recording): its HLS on this node, read as fast as it comes.
        let url = PathBuf::from(format!("{http}/hls/{}/index.m3u8", task.title));
        return make_renditions(store, &url, &task.title, &task.plan, budget, Some(&via), progress);
    }
    let mut spool = work_dir(store, &task.title, &task.plan).into_os_string();
    spool.push(".source");
    let spool = PathBuf::from(spool);
    let result = (|| {
        crate::nrt::spool_source(store, &io.sched, &entry, &spool)?;
        make_renditions(store, &spool, &task.title, &task.plan, budget, Some(&via), progress)
    })();
    let _ = std::fs::remove_file(&spool);
    result
}

/// The server-wide ladder (`transcode.ladder`) asked for the titles that come without one: the
/// media directory's files, and the recordings of live feeds once they end.
#[derive(Debug)]
pub(crate) struct Laddering {
    pub(crate) ladder: Ladder,
    pub(crate) settings: TranscodeSettings,
    pub(crate) jobs: mpsc::UnboundedSender<TranscodeCommand>,
}

impl Laddering {
    /// Asks for `name`'s ladder from `source` (a file, or a URL ffmpeg reads) when a rung is
    /// not stored yet (the renditions already stored are kept: a job cut short by a restart is
    /// made again). Blocking: ffprobe.
    pub(crate) fn ask(&self, store: &Store, source: &Path, name: &str) {
        let plan = match plan(source, &self.ladder, &self.settings, false) {
            Ok(p) => p,
            Err(e) => {
                warn!(source = %source.display(), "cannot make the ladder of {name}: {e}");
                return;
            }
        };
        let catalog = store.catalog();
        let missing = plan
            .rungs
            .iter()
            .any(|r| matches!(catalog.object(&rendition_name(name, &r.name)), Ok(None)));
        if missing {
            let source = JobSource { path: source.to_owned(), remove_after: false };
            let _ = self.jobs.send(TranscodeCommand::Submit {
                title: name.to_owned(),
                source,
                plan,
                reply: None,
            });
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
