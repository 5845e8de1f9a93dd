//! [`EtcdCluster`]: real etcd members as child processes, for tests of this crate and of the
//! cluster code above it.
//!
//! Each member gets free loopback client and peer ports, a data directory in one temporary
//! directory, its log in a file beside it, and the cluster a unique `--initial-cluster-token`,
//! so that clusters of concurrent tests never join each other (the layout of etcd's own
//! Procfile, on ports chosen at run time). A member can also listen on an extra address (a
//! bridge address that nodes in network namespaces reach). Members can be killed with SIGKILL
//! and restarted on their data; dropping the cluster kills them all.
//!
//! The `etcd` binary is `$ETCD_BIN` or `etcd` on the `PATH` (Debian's `etcd-server`). If there
//! is none, starting fails with [`HarnessError::NotInstalled`], which says how to install it:
//! tests must not pass silently without etcd.

use std::fs;
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::client::{Client, EtcdError, Timeouts};

/// What cluster to start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterOptions {
    /// How many members (1 or 3, typically).
    pub members: usize,
    /// An extra address every member's client port also listens on (same port number).
    pub extra_client_ip: Option<IpAddr>,
    /// How long to wait for the members to be healthy.
    pub startup_timeout: Duration,
}

impl Default for ClusterOptions {
    /// One member, loopback only, 60 s to start (a loaded machine fsyncs slowly).
    fn default() -> Self {
        Self { members: 1, extra_client_ip: None, startup_timeout: Duration::from_secs(60) }
    }
}

/// Why the harness could not provide a cluster.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// No etcd binary.
    #[error(
        "etcd is not installed ({binary:?} not found): install Debian's etcd-server \
         (`apt-get install etcd-server`), or set ETCD_BIN to an etcd 3.4+ binary"
    )]
    NotInstalled {
        /// The binary looked for.
        binary: PathBuf,
    },
    /// A member could not be started.
    #[error("cannot start etcd member {member}: {source}")]
    Spawn {
        /// The member's name.
        member: String,
        /// The error.
        source: io::Error,
    },
    /// A member exited while starting.
    #[error("etcd member {member} exited while starting ({status}); the end of its log:\n{log}")]
    Exited {
        /// The member's name.
        member: String,
        /// Its exit status.
        status: String,
        /// The end of its log.
        log: String,
    },
    /// A member did not become healthy in time.
    #[error("etcd member {member} not healthy after {waited:?}; the end of its log:\n{log}")]
    NotHealthy {
        /// The member's name.
        member: String,
        /// How long the harness waited.
        waited: Duration,
        /// The end of its log.
        log: String,
    },
    /// No member has this index.
    #[error("no etcd member {index} (the cluster has {count})")]
    NoMember {
        /// The index asked for.
        index: usize,
        /// How many members there are.
        count: usize,
    },
    /// The client could not be built.
    #[error(transparent)]
    Client(#[from] EtcdError),
    /// Temporary files or ports.
    #[error("etcd test harness: {0}")]
    Io(#[from] io::Error),
}

/// Running etcd members (see the module documentation). Killed on drop.
#[derive(Debug)]
pub struct EtcdCluster {
    members: Vec<Member>,
    binary: PathBuf,
    options: ClusterOptions,
    // Last: removed after the members are killed.
    dir: tempfile::TempDir,
}

#[derive(Debug)]
struct Member {
    name: String,
    client_port: u16,
    args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
}

/// Start attempts when another process took a chosen port in the meantime.
const START_ATTEMPTS: usize = 3;
static CLUSTERS: AtomicU64 = AtomicU64::new(0);

impl EtcdCluster {
    /// Starts `members` members on loopback and waits until they are healthy.
    pub fn start(members: usize) -> Result<Self, HarnessError> {
        Self::start_with(ClusterOptions { members, ..ClusterOptions::default() })
    }

    /// Starts a cluster as `options` say and waits until every member is healthy.
    pub fn start_with(options: ClusterOptions) -> Result<Self, HarnessError> {
        let binary = PathBuf::from(std::env::var_os("ETCD_BIN").unwrap_or_else(|| "etcd".into()));
        match Command::new(&binary).arg("--version").stdout(Stdio::null()).status() {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(HarnessError::NotInstalled { binary });
            }
            Err(e) => return Err(HarnessError::Spawn { member: "--version".into(), source: e }),
            Ok(_) => {}
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            match Self::try_start(&binary, &options) {
                Err(HarnessError::Exited { log, .. })
                    if attempt < START_ATTEMPTS && log.contains("address already in use") => {}
                other => return other,
            }
        }
    }

    fn try_start(binary: &Path, options: &ClusterOptions) -> Result<Self, HarnessError> {
        let dir = tempfile::Builder::new().prefix("isochron-etcd-").tempdir()?;
        let ports = free_ports(2 * options.members)?;
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos();
        let token = format!(
            "isochron-test-{}-{}-{nanos}",
            std::process::id(),
            CLUSTERS.fetch_add(1, Ordering::Relaxed)
        );
        let peer_url = |i: usize| format!("http://127.0.0.1:{}", ports[2 * i + 1]);
        let initial: Vec<String> =
            (0..options.members).map(|i| format!("m{i}={}", peer_url(i))).collect();
        let initial = initial.join(",");
        let members = (0..options.members)
            .map(|i| {
                let name = format!("m{i}");
                let client_port = ports[2 * i];
                let mut client_urls = vec![format!("http://127.0.0.1:{client_port}")];
                if let Some(ip) = options.extra_client_ip {
                    client_urls.push(format!("http://{}", SocketAddr::new(ip, client_port)));
                }
                let client_urls = client_urls.join(",");
                let data_dir = dir.path().join(&name);
                let args = [
                    "--name",
                    &name,
                    "--data-dir",
                    &data_dir.to_string_lossy(),
                    "--listen-client-urls",
                    &client_urls,
                    "--advertise-client-urls",
                    &client_urls,
                    "--listen-peer-urls",
                    &peer_url(i),
                    "--initial-advertise-peer-urls",
                    &peer_url(i),
                    "--initial-cluster",
                    &initial,
                    "--initial-cluster-token",
                    &token,
                    "--initial-cluster-state",
                    "new",
                    "--logger",
                    "zap",
                    "--log-outputs",
                    "stderr",
                ]
                .map(String::from)
                .to_vec();
                let log = dir.path().join(format!("{name}.log"));
                Member { name, client_port, args, log, child: None }
            })
            .collect();
        let mut cluster =
            Self { members, binary: binary.to_owned(), options: options.clone(), dir };
        for i in 0..cluster.members.len() {
            cluster.spawn(i)?;
        }
        for i in 0..cluster.members.len() {
            cluster.wait_healthy(i)?;
        }
        Ok(cluster)
    }

    /// The loopback client URL of every member.
    #[must_use]
    pub fn endpoints(&self) -> Vec<String> {
        (0..self.members.len()).map(|i| self.endpoint(i)).collect()
    }

    /// The loopback client URL of member `i` (panics if there is no such member).
    #[must_use]
    pub fn endpoint(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.members[i].client_port)
    }

    /// The client URLs on the extra address (empty without one).
    #[must_use]
    pub fn extra_endpoints(&self) -> Vec<String> {
        let Some(ip) = self.options.extra_client_ip else { return Vec::new() };
        self.members
            .iter()
            .map(|m| format!("http://{}", SocketAddr::new(ip, m.client_port)))
            .collect()
    }

    /// How many members the cluster has.
    #[must_use]
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the cluster has no members.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// A client of every member, with the default timeouts.
    pub fn client(&self) -> Result<Client, HarnessError> {
        self.client_with(Timeouts::default())
    }

    /// A client of every member, with `timeouts`.
    pub fn client_with(&self, timeouts: Timeouts) -> Result<Client, HarnessError> {
        Ok(Client::connect(&self.endpoints(), timeouts)?)
    }

    /// Kills member `i` with SIGKILL and reaps it.
    pub fn kill(&mut self, i: usize) -> Result<(), HarnessError> {
        let count = self.members.len();
        let m = self.members.get_mut(i).ok_or(HarnessError::NoMember { index: i, count })?;
        if let Some(mut child) = m.child.take() {
            // `Child::kill` is SIGKILL on Unix.
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    /// Starts member `i` again on its data directory (after [`EtcdCluster::kill`]) and waits
    /// until it is healthy.
    pub fn restart(&mut self, i: usize) -> Result<(), HarnessError> {
        self.kill(i)?;
        self.spawn(i)?;
        self.wait_healthy(i)
    }

    /// Starts every member in `members` again (after [`EtcdCluster::kill`]), then waits until
    /// each is healthy: what a quorum lost all at once needs, since one member alone never is.
    pub fn restart_many(&mut self, members: &[usize]) -> Result<(), HarnessError> {
        for &i in members {
            self.kill(i)?;
            self.spawn(i)?;
        }
        for &i in members {
            self.wait_healthy(i)?;
        }
        Ok(())
    }

    /// The end of member `i`'s log (for failure messages).
    #[must_use]
    pub fn log_tail(&self, i: usize) -> String {
        self.members.get(i).map(|m| tail(&m.log)).unwrap_or_default()
    }

    fn spawn(&mut self, i: usize) -> Result<(), HarnessError> {
        let m = &mut self.members[i];
        let spawn_err = |source| HarnessError::Spawn { member: m.name.clone(), source };
        let log =
            fs::OpenOptions::new().create(true).append(true).open(&m.log).map_err(spawn_err)?;
        let mut cmd = Command::new(&self.binary);
        cmd.args(&m.args).stdin(Stdio::null()).stdout(log.try_clone().map_err(spawn_err)?);
        cmd.stderr(log);
        // etcd refuses a flag also given in its environment: give it none of ours.
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("ETCD_") && k != "ETCD_UNSUPPORTED_ARCH" {
                cmd.env_remove(k);
            }
        }
        m.child = Some(cmd.spawn().map_err(spawn_err)?);
        Ok(())
    }

    /// Waits until member `i` answers `/health` with `true` (it has a leader).
    fn wait_healthy(&mut self, i: usize) -> Result<(), HarnessError> {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_millis(500)))
            .timeout_global(Some(Duration::from_secs(2)))
            .build()
            .into();
        let url = format!("{}/health", self.endpoint(i));
        let start = Instant::now();
        loop {
            let m = &mut self.members[i];
            if let Some(child) = &mut m.child
                && let Some(status) = child.try_wait()?
            {
                m.child = None;
                return Err(HarnessError::Exited {
                    member: m.name.clone(),
                    status: status.to_string(),
                    log: tail(&m.log),
                });
            }
            let healthy = agent
                .get(&url)
                .call()
                .ok()
                .and_then(|mut r| r.body_mut().read_to_string().ok())
                .is_some_and(|body| body.replace(' ', "").contains(r#""health":"true""#));
            if healthy {
                return Ok(());
            }
            if start.elapsed() > self.options.startup_timeout {
                return Err(HarnessError::NotHealthy {
                    member: m.name.clone(),
                    waited: start.elapsed(),
                    log: tail(&m.log),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            let _ = self.kill(i);
        }
        tracing::debug!(dir = %self.dir.path().display(), "etcd test cluster stopped");
    }
}

/// A loopback URL where nothing listens (a port just freed): connections are refused.
pub fn closed_endpoint() -> Result<String, HarnessError> {
    Ok(format!("http://127.0.0.1:{}", free_ports(1)?[0]))
}

/// `n` distinct free TCP ports on loopback (held together while choosing, so they differ).
fn free_ports(n: usize) -> io::Result<Vec<u16>> {
    let listeners: Vec<TcpListener> =
        (0..n).map(|_| TcpListener::bind("127.0.0.1:0")).collect::<io::Result<_>>()?;
    listeners.iter().map(|l| l.local_addr().map(|a| a.port())).collect()
}

/// The last 40 lines of a log file.
fn tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}
