//! A cluster's ladder jobs in etcd: every rung of a ladder is a task any node may make, claimed
//! under the claiming node's lease, so that a ladder's rungs spread over the nodes and a rung
//! whose node dies is made by another.
//!
//! Keys, under the cluster's prefix `P` (`docs/design/renditions.md`, "In a cluster"):
//!
//! - `P/transcode/tasks/TITLE~RUNG`: a [`TaskRecord`] (the one-rung plan, who submitted it;
//!   `error` once it failed). Put by the node that took the upload (or found the file), only if
//!   absent or failed; deleted by the node that stored the rendition.
//! - `P/transcode/claims/TITLE~RUNG`: a [`ClaimRecord`] (the node, its progress), attached to
//!   that node's lease: it vanishes with the node, within the lease's TTL, and the task is free
//!   again. Put in a transaction that holds only if no claim exists.
//!
//! [`Claimer`] runs on a thread of its own (the etcd client blocks): twice a second it reads
//! both prefixes, tells the transcoder what it read, and claims one free task when this node
//! runs fewer than `transcode.jobs` and no fewer than any other live node ([`choose`]: the
//! nodes with the most spare job slots take the work first). The transcoder runs what it was
//! given and tells the claimer each rung's progress and end.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use isochron_etcd::membership::{live_prefix, transcode_claims_prefix, transcode_tasks_prefix};
use isochron_etcd::{Client, Compare, CompareOp, LeaseId, TxnOp};
use isochron_transcode::LadderPlan;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc::UnboundedSender;
use tracing::{info, warn};

use super::{JobState, TranscodeCommand};
use crate::cluster::SharedLease;

/// A rung to make, as etcd holds it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    /// The title.
    pub title: String,
    /// The plan: the source as probed where it was submitted, and this one rung.
    pub plan: LadderPlan,
    /// The node that submitted it.
    pub submitted_by: String,
    /// Unix time it was submitted.
    pub submitted_unix_s: u64,
    /// Why it failed for good, after [`ATTEMPTS`] tries (then no node claims it until it is
    /// submitted again).
    #[serde(default)]
    pub error: Option<String>,
    /// Tries that failed so far (a write to a node that just died fails until the cluster has
    /// removed that node's disks: such a rung is tried again, not given up).
    #[serde(default)]
    pub attempts: u32,
    /// Why the last try failed.
    #[serde(default)]
    pub last_error: Option<String>,
    /// Unix time before which no node claims it again (a failed try waits [`RETRY_AFTER`]).
    #[serde(default)]
    pub not_before_unix_s: u64,
}

/// Tries of a task before it fails for good.
pub const ATTEMPTS: u32 = 3;

/// The wait after a failed try.
pub const RETRY_AFTER: Duration = Duration::from_secs(5);

impl TaskRecord {
    /// The rendition's object name, `TITLE~RUNG` (the task's key).
    #[must_use]
    pub fn name(&self) -> String {
        let rung = self.plan.rungs.first().map_or("", |r| r.name.as_str());
        isochron_store::catalog::rendition_name(&self.title, rung)
    }
}

/// A claim, as etcd holds it (attached to the claiming node's lease).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClaimRecord {
    /// The node making the rung.
    pub node: String,
    /// The fraction of the source encoded.
    pub progress: f64,
    /// Unix time it was claimed.
    pub claimed_unix_s: u64,
}

/// A task as the API shows it (`GET /api/v1/transcode`'s `tasks`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TaskInfo {
    /// The rendition it makes, `TITLE~RUNG`.
    pub name: String,
    /// The title.
    pub title: String,
    /// Queued (no claim), running (claimed) or failed.
    pub state: JobState,
    /// The node making it.
    pub node: Option<String>,
    /// The fraction of the source encoded.
    pub progress: f64,
    /// The node that submitted it.
    pub submitted_by: String,
    /// Why it failed; or, while it is queued again, why its last try failed.
    pub error: Option<String>,
    /// Tries that failed.
    pub attempts: u32,
}

/// What the transcoder tells the claimer.
#[derive(Debug)]
pub enum ClaimCommand {
    /// Put these tasks (those absent or failed).
    Publish(Vec<TaskRecord>),
    /// A rung this node claimed has encoded `progress` of its source.
    Progress {
        /// `TITLE~RUNG`.
        name: String,
        /// 0 to 1.
        progress: f64,
    },
    /// A rung this node claimed ended: stored (`None`), or failed.
    Ended {
        /// `TITLE~RUNG`.
        name: String,
        /// Why it failed.
        error: Option<String>,
    },
}

/// The claimer's view of one read of etcd.
#[derive(Clone, Debug, Default)]
pub struct View {
    /// Tasks by name.
    pub tasks: BTreeMap<String, TaskRecord>,
    /// Claims by task name.
    pub claims: BTreeMap<String, ClaimRecord>,
    /// Live nodes.
    pub live: BTreeSet<String>,
}

impl View {
    /// The tasks as the API shows them, oldest first.
    #[must_use]
    pub fn infos(&self) -> Vec<TaskInfo> {
        let mut out: Vec<(u64, TaskInfo)> = self
            .tasks
            .iter()
            .map(|(name, t)| {
                let claim = self.claims.get(name);
                let state = match (&t.error, claim) {
                    (Some(_), _) => JobState::Failed,
                    (None, Some(_)) => JobState::Running,
                    (None, None) => JobState::Queued,
                };
                let info = TaskInfo {
                    name: name.clone(),
                    title: t.title.clone(),
                    state,
                    node: claim.map(|c| c.node.clone()),
                    progress: claim.map_or(0.0, |c| c.progress),
                    submitted_by: t.submitted_by.clone(),
                    error: t.error.clone().or_else(|| t.last_error.clone()),
                    attempts: t.attempts,
                };
                (t.submitted_unix_s, info)
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));
        out.into_iter().map(|(_, i)| i).collect()
    }
}

/// The task node `me` should claim at unix time `now`, if any: one not failed, not claimed and
/// not waiting after a failed try, oldest first, when `me` holds fewer than `slots` claims and
/// no more than any other live node (a node with spare job slots takes the work before one
/// that runs more).
#[must_use]
pub fn choose(view: &View, me: &str, slots: usize, now: u64) -> Option<String> {
    let held = |node: &str| view.claims.values().filter(|c| c.node == node).count();
    let mine = held(me);
    if mine >= slots.max(1) {
        return None;
    }
    if view.live.iter().filter(|n| n.as_str() != me).any(|n| held(n) < mine) {
        return None;
    }
    let mut free: Vec<(&String, &TaskRecord)> = view
        .tasks
        .iter()
        .filter(|(n, t)| {
            t.error.is_none() && t.not_before_unix_s <= now && !view.claims.contains_key(*n)
        })
        .collect();
    free.sort_by(|a, b| a.1.submitted_unix_s.cmp(&b.1.submitted_unix_s).then(a.0.cmp(b.0)));
    free.first().map(|(n, _)| (*n).clone())
}

/// How often the claimer reads etcd.
const EVERY: Duration = Duration::from_millis(500);

/// The claimer thread (see the module docs).
pub struct Claimer {
    /// The etcd client.
    pub client: Client,
    /// The cluster's key prefix.
    pub prefix: String,
    /// This node's name.
    pub node: String,
    /// This node's lease (claims are attached to it).
    pub lease: SharedLease,
    /// Rungs this node makes at once (`transcode.jobs`).
    pub slots: usize,
    /// The transcoder.
    pub jobs: UnboundedSender<TranscodeCommand>,
    /// The transcoder's commands to the claimer.
    pub inbox: Receiver<ClaimCommand>,
    /// Set at shutdown.
    pub stop: Arc<AtomicBool>,
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Claimer {
    fn tasks_key(&self, name: &str) -> Vec<u8> {
        format!("{}{name}", transcode_tasks_prefix(&self.prefix)).into_bytes()
    }

    fn claim_key(&self, name: &str) -> Vec<u8> {
        format!("{}{name}", transcode_claims_prefix(&self.prefix)).into_bytes()
    }

    fn lease(&self) -> Option<LeaseId> {
        let guard = self.lease.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        guard.as_ref().map(isochron_etcd::LeaseKeeper::id)
    }

    /// Runs until `stop` or until the transcoder is gone.
    pub fn run(self) {
        let mut next_read = Instant::now();
        let mut claimed: BTreeMap<String, u64> = BTreeMap::new();
        while !self.stop.load(Ordering::Relaxed) {
            let wait = next_read.saturating_duration_since(Instant::now());
            match self.inbox.recv_timeout(wait) {
                Ok(cmd) => {
                    if let Err(e) = self.handle(cmd, &mut claimed) {
                        warn!(error = %e, "transcode tasks: etcd");
                    }
                    continue;
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            next_read = Instant::now() + EVERY;
            match self.read() {
                Ok(view) => {
                    if let Some(name) = choose(&view, &self.node, self.slots, unix_now())
                        && let Some(task) = view.tasks.get(&name)
                    {
                        match self.claim(&name) {
                            Ok(true) => {
                                info!(task = %name, "claimed a rung to make");
                                claimed.insert(name.clone(), unix_now());
                                let cmd = TranscodeCommand::Claimed { task: task.clone() };
                                if self.jobs.send(cmd).is_err() {
                                    return;
                                }
                            }
                            Ok(false) => {}
                            Err(e) => warn!(task = %name, error = %e, "claiming a rung"),
                        }
                    }
                    if self.jobs.send(TranscodeCommand::Tasks { view }).is_err() {
                        return;
                    }
                }
                Err(e) => warn!(error = %e, "transcode tasks: reading etcd"),
            }
        }
    }

    fn read(&self) -> Result<View, isochron_etcd::EtcdError> {
        let mut view = View::default();
        let tasks = transcode_tasks_prefix(&self.prefix);
        for kv in self.client.get_prefix(tasks.as_bytes())?.kvs {
            let name = String::from_utf8_lossy(&kv.key[tasks.len()..]).into_owned();
            match serde_json::from_slice::<TaskRecord>(&kv.value) {
                Ok(t) => {
                    view.tasks.insert(name, t);
                }
                Err(e) => {
                    warn!(task = %name, error = %e, "a transcode task etcd holds is not JSON")
                }
            }
        }
        let claims = transcode_claims_prefix(&self.prefix);
        for kv in self.client.get_prefix(claims.as_bytes())?.kvs {
            let name = String::from_utf8_lossy(&kv.key[claims.len()..]).into_owned();
            if let Ok(c) = serde_json::from_slice::<ClaimRecord>(&kv.value) {
                view.claims.insert(name, c);
            }
        }
        let live = live_prefix(&self.prefix);
        for kv in self.client.get_prefix(live.as_bytes())?.kvs {
            view.live.insert(String::from_utf8_lossy(&kv.key[live.len()..]).into_owned());
        }
        Ok(view)
    }

    /// Claims task `name` under this node's lease: `false` if another node was first (or the
    /// task is gone, or this node has no lease).
    fn claim(&self, name: &str) -> Result<bool, isochron_etcd::EtcdError> {
        let Some(lease) = self.lease() else { return Ok(false) };
        let record =
            ClaimRecord { node: self.node.clone(), progress: 0.0, claimed_unix_s: unix_now() };
        let value = serde_json::to_vec(&record).unwrap_or_default();
        let r = self.client.txn(
            &[
                Compare::create_revision(self.claim_key(name), CompareOp::Equal, 0),
                Compare::version(self.tasks_key(name), CompareOp::Greater, 0),
            ],
            &[TxnOp::put(self.claim_key(name), value, Some(lease))],
            &[],
        )?;
        Ok(r.succeeded)
    }

    fn handle(
        &self,
        cmd: ClaimCommand,
        claimed: &mut BTreeMap<String, u64>,
    ) -> Result<(), isochron_etcd::EtcdError> {
        match cmd {
            ClaimCommand::Publish(tasks) => {
                for t in tasks {
                    let key = self.tasks_key(&t.name());
                    let value = serde_json::to_vec(&t).unwrap_or_default();
                    let absent = Compare::version(key.clone(), CompareOp::Equal, 0);
                    let put = TxnOp::put(key.clone(), value.clone(), None);
                    if !self.client.txn(&[absent], &[put], &[TxnOp::get(key.clone())])?.succeeded {
                        // A failed task is submitted again; a queued or running one stays.
                        let failed = self
                            .client
                            .get(&key)?
                            .and_then(|kv| serde_json::from_slice::<TaskRecord>(&kv.value).ok())
                            .is_some_and(|old| old.error.is_some());
                        if failed {
                            self.client.put(&key, &value, None)?;
                        }
                    }
                }
            }
            ClaimCommand::Progress { name, progress } => {
                let (Some(lease), Some(&since)) = (self.lease(), claimed.get(&name)) else {
                    return Ok(());
                };
                let record =
                    ClaimRecord { node: self.node.clone(), progress, claimed_unix_s: since };
                let value = serde_json::to_vec(&record).unwrap_or_default();
                let key = self.claim_key(&name);
                self.client.txn(
                    &[Compare::lease(key.clone(), CompareOp::Equal, lease)],
                    &[TxnOp::put(key, value, Some(lease))],
                    &[],
                )?;
            }
            ClaimCommand::Ended { name, error } => {
                claimed.remove(&name);
                let claim = self.claim_key(&name);
                let task = self.tasks_key(&name);
                match error {
                    None => {
                        self.client.txn(&[], &[TxnOp::delete(task), TxnOp::delete(claim)], &[])?;
                    }
                    Some(error) => {
                        if let Some(kv) = self.client.get(&task)?
                            && let Ok(mut t) = serde_json::from_slice::<TaskRecord>(&kv.value)
                        {
                            let error = format!("on node {}: {error}", self.node);
                            t.attempts += 1;
                            if t.attempts >= ATTEMPTS {
                                t.error = Some(error);
                            } else {
                                warn!(task = %name, attempt = t.attempts, %error,
                                    "a rung failed; it is tried again");
                                t.last_error = Some(error);
                                t.not_before_unix_s = unix_now() + RETRY_AFTER.as_secs();
                            }
                            let value = serde_json::to_vec(&t).unwrap_or_default();
                            self.client.txn(
                                &[],
                                &[TxnOp::put(task, value, None), TxnOp::delete(claim)],
                                &[],
                            )?;
                        } else {
                            self.client.delete(&claim)?;
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use isochron_transcode::{Ladder, SourceInfo};

    fn task(title: &str, rung: &str, at: u64) -> TaskRecord {
        let source = SourceInfo {
            width: 1920,
            height: 1080,
            video_codec: "h264".into(),
            has_audio: true,
            duration: Some(Duration::from_secs(60)),
        };
        let ladder = Ladder::parse(rung).unwrap();
        let plan = LadderPlan::new(source, &ladder, Duration::from_secs(2)).unwrap();
        TaskRecord {
            title: title.into(),
            plan,
            submitted_by: "n1".into(),
            submitted_unix_s: at,
            error: None,
            attempts: 0,
            last_error: None,
            not_before_unix_s: 0,
        }
    }

    fn claim(node: &str) -> ClaimRecord {
        ClaimRecord { node: node.into(), progress: 0.0, claimed_unix_s: 0 }
    }

    fn view(tasks: &[TaskRecord], claims: &[(&str, &str)]) -> View {
        View {
            tasks: tasks.iter().map(|t| (t.name(), t.clone())).collect(),
            claims: claims.iter().map(|(n, node)| ((*n).to_owned(), claim(node))).collect(),
            live: ["n1", "n2", "n3"].iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    #[test]
    fn the_oldest_free_task_goes_to_a_node_with_a_free_slot() {
        let tasks = [task("b", "720p", 2), task("a", "480p", 1), task("a", "1080p", 1)];
        let v = view(&tasks, &[]);
        assert_eq!(choose(&v, "n1", 1, 0).as_deref(), Some("a~1080p"));
        let v = view(&tasks, &[("a~1080p", "n2")]);
        assert_eq!(choose(&v, "n1", 1, 0).as_deref(), Some("a~480p"));
        // n2's one slot is taken.
        assert_eq!(choose(&v, "n2", 1, 0), None);
        assert_eq!(choose(&v, "n2", 2, 0), None, "n2 runs more than n1 and n3: they go first");
        let v = view(&tasks, &[("a~1080p", "n2"), ("a~480p", "n1"), ("b~720p", "n3")]);
        assert_eq!(choose(&v, "n1", 2, 0), None, "nothing left");
    }

    #[test]
    fn a_failed_task_is_not_claimed_and_the_api_shows_each_state() {
        let mut failed = task("a", "480p", 1);
        failed.error = Some("ffmpeg: no video".into());
        let tasks = [failed, task("a", "720p", 1), task("a", "1080p", 1)];
        let v = view(&tasks, &[("a~1080p", "n3")]);
        assert_eq!(choose(&v, "n1", 1, 0).as_deref(), Some("a~720p"));
        let states: Vec<(String, JobState, Option<String>)> =
            v.infos().into_iter().map(|i| (i.name, i.state, i.node)).collect();
        assert_eq!(
            states,
            vec![
                ("a~1080p".into(), JobState::Running, Some("n3".into())),
                ("a~480p".into(), JobState::Failed, None),
                ("a~720p".into(), JobState::Queued, None),
            ]
        );
    }

    #[test]
    fn a_try_that_failed_waits_before_the_task_is_claimed_again() {
        let mut t = task("a", "480p", 1);
        t.attempts = 1;
        t.not_before_unix_s = 100;
        let v = view(&[t], &[]);
        assert_eq!(choose(&v, "n1", 1, 99), None);
        assert_eq!(choose(&v, "n1", 1, 100).as_deref(), Some("a~480p"));
    }

    #[test]
    fn records_round_trip_through_json() {
        let t = task("film", "720p:2500k", 7);
        let back: TaskRecord = serde_json::from_slice(&serde_json::to_vec(&t).unwrap()).unwrap();
        assert_eq!(back, t);
        assert_eq!(back.name(), "film~720p");
    }
}
