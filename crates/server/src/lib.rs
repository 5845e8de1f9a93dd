//! isochron's runtime: the control plane, and the wiring of the threads and tasks that drive the
//! sans-IO cores.
//!
//! ```text
//!  RTSP conns ──SessionCommand──▶ session manager (ServerCore) ──SchedCommand──▶ scheduler thread
//!  (tokio tasks)                        ▲      │                                 (Scheduler + cache)
//!                                       │      └──SenderCommand──▶ sender thread ◀──blocks──┘  │
//!  RTCP thread ──liveness───────────────┤          (Pacer, sendmmsg)  ──BlockDone──▶         │
//!  sender, scheduler thread (sinks) ────┘                                                      ▼
//!                                                               per-disk IO threads (O_DIRECT reads)
//! ```
//!
//! This crate owns the control plane: the session manager ([`sessions`], with the RTSP
//! connections and the RTCP receiver), the objects ([`library`], [`media_watch`]), recordings
//! ([`recorder`]: one task each, handing their blocks to the scheduler thread as an admitted write
//! stream) and the online reorganiser ([`reorg`]). The scheduler and sender threads are
//! `isochron-dataplane`'s; [`start`] builds them and wires their event sinks to the owners'
//! channels (`sched_events`, `sender_events` in the private `wiring` module, which holds
//! [`start`]'s steps). HTTP is `isochron-http`'s: [`start`] binds its
//! listener and hands out the [`Handles`] it serves from.
//!
//! Each piece of mutable state has one owner fed by a closed command enum: the session manager
//! owns the RTSP sessions, the scheduler thread owns the scheduler and block cache, the sender
//! thread owns pacing and transports, each IO thread owns its disk. Only this crate, the data
//! plane, HTTP, `loadgen` and the binary know tokio; the cores they drive never read a clock or do
//! IO.

pub mod cluster;
pub mod cluster_view;
pub mod config;
pub mod conn_limits;
pub mod library;
pub mod media_watch;
pub mod nrt;
pub mod profile;
pub mod recorder;
pub mod reorg;
pub mod sessions;
pub mod tls;
pub mod transcoder;

mod publisher;
mod rtcp_rx;
mod rtsp_conn;
mod srt_publish;
mod wiring;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use isochron_dataplane::clock::Clock;
use isochron_dataplane::sched_thread::SchedCommand;
use isochron_dataplane::sender::SenderCommand;
use isochron_dataplane::shards::Senders;
use isochron_diskio::Store;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tracing::info;

use crate::config::Settings;
use crate::library::Library;
use crate::recorder::Recorders;
use crate::reorg::ReorgCommand;
use crate::sessions::SessionCommand;
use crate::wiring::Wiring;

/// The bundled demo clip (12 s of H.264 + AAC in MPEG-TS, made by `assets/make-demo.sh`).
pub const DEMO_TS: &[u8] = include_bytes!("../../../assets/demo.ts");

/// The `Server` header value; must not start with `WMServer/` (ffmpeg switches dialect on it).
pub const SERVER_NAME: &str = concat!("isochron/", env!("CARGO_PKG_VERSION"));

/// Opens the store at `settings.data_dir`, creating it (and seeding the demo clip, if enabled)
/// when there is none.
pub fn open_or_create_store(settings: &Settings) -> anyhow::Result<Store> {
    if let Some(c) = &settings.cluster {
        // Nothing is written before etcd answers and the name is known not to be live.
        let client = cluster::connect(c)?;
        cluster::check_not_live(&client, c)?;
        let catalog = isochron_etcd::EtcdCatalog::new(client, &c.prefix);
        let store = Store::join(
            &settings.data_dir,
            Box::new(catalog),
            &c.node,
            &settings.disks,
            settings.block_size,
            settings.replication,
        )
        .with_context(|| format!("joining the cluster as node {}", c.node))?;
        return Ok(store);
    }
    if Store::exists(&settings.data_dir) {
        let store = Store::open(&settings.data_dir)
            .with_context(|| format!("opening the store at {}", settings.data_dir.display()))?;
        store.check_replication(settings.replication)?;
        return Ok(store);
    }
    let store = Store::create_with(
        &settings.data_dir,
        &settings.disks,
        settings.block_size,
        isochron_store::PlacementVariant::default(),
        settings.replication.unwrap_or(1),
    )
    .with_context(|| format!("creating a store at {}", settings.data_dir.display()))?;
    info!(dir = %settings.data_dir.display(), "created a new store");
    if settings.seed_demo {
        let mut src = std::io::Cursor::new(DEMO_TS);
        isochron_diskio::ingest::ingest(&store, &mut src, "demo.ts (bundled)", "demo", &mut |_| {})
            .context("ingesting the bundled demo clip")?;
        info!("seeded the store with the bundled demo clip as \"demo\"");
    }
    Ok(store)
}

/// What the API says about this server as a node: where it listens and since when.
#[derive(Clone, Debug)]
pub struct NodeIdentity {
    /// RTSP listen address.
    pub rtsp: SocketAddr,
    /// HTTP listen address.
    pub http: SocketAddr,
    /// The RTP port (RTCP is the next one).
    pub rtp_port: u16,
    /// When the server started (for the uptime).
    pub started: std::time::Instant,
    /// The same, in milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
}

/// What the HTTP side (`isochron-http`) serves from: every owner's command channel, the objects,
/// the store, the recordings and the node's identity. [`start`] makes them, with the bound HTTP
/// listener, when `http.listen` is set ([`RunningServer::take_http`]).
#[derive(Clone, Debug)]
pub struct Handles {
    /// The recordings (`PUT /api/v1/record/NAME`).
    pub recorders: Arc<Recorders>,
    /// The objects served.
    pub library: Arc<Library>,
    /// The session manager's command channel.
    pub sessions: tokio::sync::mpsc::UnboundedSender<SessionCommand>,
    /// The scheduler thread's command channel.
    pub sched: crossbeam_channel::Sender<SchedCommand>,
    /// The sender thread's command channel.
    pub sender: Senders,
    /// The reorganiser's command channel.
    pub reorg: tokio::sync::mpsc::UnboundedSender<ReorgCommand>,
    /// The transcoder's command channel (ladder jobs).
    pub transcoder: tokio::sync::mpsc::UnboundedSender<transcoder::TranscodeCommand>,
    /// The ladder settings (`[transcode]`).
    pub transcode: transcoder::TranscodeSettings,
    /// The store.
    pub store: Arc<Store>,
    /// Where this server listens and since when.
    pub node: NodeIdentity,
    /// Target duration of an HLS segment (`http.hls_segment_s`).
    pub hls_segment: Duration,
    /// The cluster, when this node is in one.
    pub cluster: Option<Arc<cluster::ClusterView>>,
    /// Who may do what (`[auth]`).
    pub auth: Arc<isochron_auth::Authority>,
    /// The certificate (`[tls]`): the HTTP port then speaks HTTPS too.
    pub tls: Option<tls::Tls>,
    /// The RTSP connection caps and their refusals.
    pub rtsp_limits: Arc<conn_limits::ConnLimits>,
    /// The HTTP connection caps (`http.max_connections`, `max_connections_per_client`).
    pub http_limits: Arc<conn_limits::ConnLimits>,
}

/// A running server.
#[derive(Debug)]
pub struct RunningServer {
    /// Where RTSP listens.
    pub rtsp_addr: SocketAddr,
    /// Where RTSPS listens, if enabled (`rtsp.rtsps_listen`).
    pub rtsps_addr: Option<SocketAddr>,
    /// Where SRT publishers connect, if enabled (`live.srt_listen`).
    pub srt_addr: Option<SocketAddr>,
    /// Where HTTP listens, if enabled.
    pub http_addr: Option<SocketAddr>,
    /// The RTP port (RTCP is the next one).
    pub rtp_port: u16,
    /// The objects served.
    pub library: Arc<Library>,
    sched: crossbeam_channel::Sender<SchedCommand>,
    sender: Senders,
    /// The reorganiser's command channel.
    pub reorg: tokio::sync::mpsc::UnboundedSender<ReorgCommand>,
    http: Option<(TcpListener, Handles)>,
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<()>>,
    threads: Vec<std::thread::JoinHandle<()>>,
    lease: cluster::SharedLease,
}

impl RunningServer {
    /// The `rtsp://` URL of object `name`, with a loopback host when listening on all interfaces.
    #[must_use]
    pub fn url(&self, name: &str) -> String {
        let mut a = self.rtsp_addr;
        if a.ip().is_unspecified() {
            a.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        format!("rtsp://{a}/{name}")
    }

    /// The bound HTTP listener and the handles to serve it from (`isochron_http::serve`), once;
    /// `None` when HTTP is disabled.
    pub fn take_http(&mut self) -> Option<(TcpListener, Handles)> {
        self.http.take()
    }

    /// Adds a task started beside the server (the HTTP server): [`RunningServer::shutdown`]
    /// aborts it with the server's own.
    pub fn add_task(&mut self, task: JoinHandle<()>) {
        self.tasks.push(task);
    }

    /// Stops every task and thread.
    pub async fn shutdown(self) {
        for t in &self.tasks {
            t.abort();
        }
        let _ = self.sched.send(SchedCommand::Shutdown);
        let _ = self.sender.send(SenderCommand::Shutdown);
        self.stop.store(true, Ordering::Relaxed);
        let threads = self.threads;
        let lease = self.lease;
        let _ = tokio::task::spawn_blocking(move || {
            // The membership poll first: it may re-register.
            for t in threads {
                let _ = t.join();
            }
            // Leaving at once rather than after the lease's TTL: peers see the node go.
            let kept = lease.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
            if let Some(l) = kept {
                let _ = l.shutdown();
            }
        })
        .await;
    }
}

/// Starts the server on an open store, in the steps of the `wiring` module and in their order. Must run
/// inside a tokio runtime.
pub async fn start(settings: Settings, store: Store) -> anyhow::Result<RunningServer> {
    let started = (std::time::Instant::now(), std::time::SystemTime::now());
    let store = Arc::new(store);
    let library = wiring::load_library(&settings, &store).await?;
    let (ends, inboxes) = wiring::channels(settings.sender_threads);
    let spawn_worker = wiring::disk_worker_factory(&ends, settings.nrt_share);
    let disks = wiring::open_disks(&store, &spawn_worker)?;
    let media = wiring::bind_media(&settings).await?;
    let rtsp_addr = media.rtsp.local_addr()?;
    let rtsps_addr = media.rtsps.as_ref().map(TcpListener::local_addr).transpose()?;
    let (rtsp_limits, http_max_connections) = wiring::connection_caps(&settings);
    let rtp_port = media.rtp_port;
    let recorders = Arc::new(Recorders::new(
        Arc::clone(&store),
        Arc::clone(&library),
        ends.sched.clone(),
        ends.sessions.clone(),
    ));
    let mut w = Wiring {
        settings,
        store,
        library,
        recorders,
        clock: Clock::new(),
        ends,
        stop: Arc::new(AtomicBool::new(false)),
        threads: Vec::new(),
        tasks: Vec::new(),
    };
    w.data_plane(inboxes.sched, inboxes.shards, disks, media.udp, media.rtcp)?;
    // From the operating system's generator: SSRCs and offsets from the seed, session ids from
    // a key of their own, so that no id can be guessed (RFC 2326 §16).
    let seed: u64 = rand::random();
    let core = wiring::server_core(&w.settings, rtp_port, seed);
    let mut transport = w.cluster_transport(seed).await?;
    w.owners(core, (inboxes.sessions, inboxes.reorg), &mut transport, rtsp_addr, spawn_worker);
    w.rtsp(media.rtsp, media.rtsps, &rtsp_limits);
    let srt_addr = w.srt().await?;
    let node = (rtsp_addr, rtp_port, started);
    let view = transport.view.clone();
    let http = w.http(node, view, &rtsp_limits, http_max_connections).await?;
    let http_addr = http.as_ref().map(|(_, h)| h.node.http);
    let http_local = http.as_ref().map(|(l, _)| l.local_addr()).transpose()?;
    let claims = w.transcoder(inboxes.transcoder, http_local);
    w.media_watch();
    w.live_ladder(http_local);
    let lease = w.register(&transport, (rtsp_addr, http_addr), claims).await?;
    info!(%rtsp_addr, ?rtsps_addr, ?http_addr, ?srt_addr, rtp_port, "isochron serving");
    Ok(RunningServer {
        rtsp_addr,
        rtsps_addr,
        srt_addr,
        http_addr,
        rtp_port,
        library: w.library,
        sched: w.ends.sched,
        sender: w.ends.sender,
        reorg: w.ends.reorg,
        http,
        stop: w.stop,
        tasks: w.tasks,
        threads: w.threads,
        lease,
    })
}
