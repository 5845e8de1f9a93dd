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
//! channels (`sched_events`, `sender_events` below). HTTP is `isochron-http`'s: [`start`] binds its
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
pub mod profile;
pub mod recorder;
pub mod reorg;
pub mod sessions;
pub mod tls;

mod rtcp_rx;
mod rtsp_conn;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use isochron_base::DiskId;
use isochron_dataplane::clock::Clock;
use isochron_dataplane::net::UdpPair;
use isochron_dataplane::pacer::PacerEvent;
use isochron_dataplane::sched_thread::{SchedCommand, SchedEvent, SchedSink, SchedThread};
use isochron_dataplane::sender::{SenderCommand, SenderSink, SenderThread};
use isochron_dataplane::shards::Senders;
use isochron_diskio::{IoDone, IoWorker, Store};
use isochron_rtsp::codec::Limits;
use isochron_rtsp::server::{ServerConfig, ServerCore};
use isochron_sched::{AdmissionController, CycleScheduler};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::config::Settings;
use crate::library::Library;
use crate::profile::disk_profile;
use crate::recorder::Recorders;
use crate::reorg::{ReorgCommand, Reorganiser};
use crate::sessions::{Manager, SessionCommand};

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

/// Starts the server on an open store. Must run inside a tokio runtime.
pub async fn start(settings: Settings, store: Store) -> anyhow::Result<RunningServer> {
    let started = (std::time::Instant::now(), std::time::SystemTime::now());
    let store = Arc::new(store);
    let clock = Clock::new();
    let library = Arc::new(Library::load(&store).context("reading the catalog")?);

    if let Some(dir) = &settings.media_dir {
        anyhow::ensure!(dir.is_dir(), "media directory {} does not exist", dir.display());
        let (st, lib, d) = (Arc::clone(&store), Arc::clone(&library), dir.clone());
        tokio::task::spawn_blocking(move || media_watch::ingest_existing(&st, &lib, &d)).await?;
    }

    let (sched_tx, sched_rx) = crossbeam_channel::unbounded::<SchedCommand>();
    let (shard_txs, shard_rxs): (Vec<_>, Vec<_>) = (0..settings.sender_threads)
        .map(|_| crossbeam_channel::unbounded::<SenderCommand>())
        .unzip();
    let sender_tx = Senders::new(shard_txs);
    let (sessions_tx, sessions_rx) = tokio::sync::mpsc::unbounded_channel::<SessionCommand>();
    let (reorg_tx, reorg_rx) = tokio::sync::mpsc::unbounded_channel::<ReorgCommand>();

    let spawn_worker = disk_worker_factory(&sched_tx, &reorg_tx, settings.nrt_share);
    let mut workers = HashMap::new();
    let mut profiles = Vec::new();
    for id in store.disk_ids() {
        workers.insert(id, spawn_worker(&store, id)?);
        profiles.push((id, disk_profile(&store, id)));
    }

    let (rtsp_listener, rtsps_listener) = bind_rtsp(&settings).await?;
    let rtsp_addr = rtsp_listener.local_addr()?;
    let rtsps_addr = rtsps_listener.as_ref().map(TcpListener::local_addr).transpose()?;
    let (rtsp_limits, http_max_connections) = connection_caps(&settings);
    let udp = UdpPair::bind_shards(
        rtsp_addr.ip(),
        settings.rtp_port,
        settings.udp_send_buffer.as_usize(),
        settings.sender_threads,
    )
    .with_context(|| {
        format!("binding UDP ports {} and +1 (config key rtsp.rtp_port)", settings.rtp_port)
    })?;
    let rtp_port = udp[0].rtp_port()?;
    let rtcp_socket = udp[0].rtcp.try_clone()?;

    let mut threads = Vec::new();
    let sched = SchedThread {
        clock,
        scheduler: CycleScheduler::new(
            settings.cycle.clone(),
            AdmissionController::new(settings.admission.clone(), profiles),
        ),
        rx: sched_rx,
        workers,
        sender: sender_tx.clone(),
        on_event: sched_events(sessions_tx.clone(), reorg_tx.clone()),
        remote: settings.cluster.as_ref().map(|_| remote_reads(&store, sched_tx.clone())),
    };
    threads.push(std::thread::Builder::new().name("isochron-sched".into()).spawn(|| sched.run())?);
    let gso = settings.gso && isochron_dataplane::net::gso_supported();
    // In a cluster a share overdue past a peer's suspicion is held a moment: its part may have
    // been taken over, and the word is on its way (docs/design/takeover.md).
    let timing = isochron_cluster::ClusterConfig::new(isochron_base::NodeId(0), "", 0);
    let hold_after = settings.cluster.as_ref().map(|_| timing.hold_after());
    for (i, (rx, udp)) in shard_rxs.into_iter().zip(udp).enumerate() {
        let sender = SenderThread {
            clock,
            rx,
            udp: Arc::new(udp),
            on_event: sender_events(sched_tx.clone(), sessions_tx.clone()),
            rtcp_interval: settings.rtcp_interval,
            batch_packets: settings.batch_packets,
            quantum: settings.send_quantum,
            retransmit_window: settings.retransmit_window,
            gso,
            shards: settings.sender_threads,
            sent_through: sender_tx.sent_through_of(i),
            hold_after,
            hold_window: timing.hold_window,
        };
        let name = format!("isochron-sender-{i}");
        threads.push(std::thread::Builder::new().name(name).spawn(|| sender.run())?);
    }
    info!(threads = settings.sender_threads, gso, "sender shards");
    let stop = Arc::new(AtomicBool::new(false));
    {
        let (stop, tx, nacks) = (Arc::clone(&stop), sessions_tx.clone(), sender_tx.clone());
        threads.push(
            std::thread::Builder::new()
                .name("isochron-rtcp".into())
                .spawn(move || rtcp_rx::run(rtcp_socket, stop, tx, nacks))?,
        );
    }

    // From the operating system's generator: SSRCs and offsets from the seed, session ids from
    // a key of their own, so that no id can be guessed (RFC 2326 §16).
    let seed: u64 = rand::random();
    let core = server_core(&settings, rtp_port, seed);
    // The cluster: control connections and relay on the control port, the link the session
    // manager talks to peers through, and blocks for other nodes' disks written over HTTP.
    let mut tasks = Vec::new();
    let view = settings.cluster.as_ref().map(|c| {
        Arc::new(cluster::ClusterView {
            node: c.node.clone(),
            prefix: c.prefix.clone(),
            // It answered a moment ago (`open_or_create_store`).
            etcd_ok: AtomicBool::new(true),
            ..cluster::ClusterView::default()
        })
    });
    let mut control = None;
    let (node_name, link) = match (&settings.cluster, &view) {
        (Some(c), Some(view)) => {
            let addr = SocketAddr::new(c.advertise, c.control_port);
            let listener = TcpListener::bind(addr).await.with_context(|| {
                format!("binding the control port {addr} (config key cluster.control_port)")
            })?;
            let (relay, relay_buffer) = isochron_dataplane::net::relay_socket(addr)
                .with_context(|| format!("binding the relay port {addr} (UDP)"))?;
            if relay_buffer < isochron_dataplane::net::RELAY_RECV_BUFFER {
                warn!(
                    bytes = relay_buffer,
                    "the relay port's receive buffer is small (net.core.rmem_max): relayed packets \
                     may be lost on a busy node and asked for again"
                );
            }
            {
                let (sender, view, stop) = (sender_tx.clone(), Arc::clone(view), Arc::clone(&stop));
                threads.push(
                    std::thread::Builder::new()
                        .name("isochron-relay".into())
                        .spawn(move || cluster::receive_relay(relay, sender, view, stop))?,
                );
            }
            store.set_remote(Arc::new(cluster::HttpBlocks::new(
                Arc::downgrade(&store),
                Arc::clone(view),
            )));
            let (out_tx, out_rx) = tokio::sync::mpsc::unbounded_channel();
            let id = cluster::node_id(&c.node);
            let hello = isochron_cluster::Message::Hello {
                node: id,
                name: c.node.clone(),
                incarnation: seed,
            };
            tasks.push(tokio::spawn(cluster::send_control(out_rx, Arc::clone(view), hello)));
            tasks.push(tokio::spawn(cluster::accept_control(
                listener,
                Arc::clone(view),
                sessions_tx.clone(),
            )));
            control = Some(addr);
            let link = sessions::ClusterLink {
                out: out_tx,
                store: Arc::clone(&store),
                local_disks: Arc::new(store.local_disks()),
                view: Arc::clone(view),
            };
            ((id, c.node.clone()), Some(link))
        }
        _ => ((isochron_base::NodeId(0), "local".to_owned()), None),
    };
    let manager = Manager::new(
        core,
        Arc::clone(&library),
        clock,
        sched_tx.clone(),
        sender_tx.clone(),
        format!("isochron@{}", rtsp_addr.ip()),
        sessions_tx.clone(),
        node_name,
        link,
    );
    tasks.push(tokio::spawn(manager.run(sessions_rx)));
    let reorganiser = Reorganiser::new(
        Arc::clone(&store),
        Arc::clone(&library),
        sched_tx.clone(),
        Box::new(spawn_worker),
        reorg_tx.clone(),
        sessions_tx.clone(),
    );
    tasks.push(tokio::spawn(reorganiser.run(reorg_rx)));
    // A cluster node resumes once it knows its peers (the membership poll sends `Resume`).
    if settings.cluster.is_none() && store.meta().pending().is_some() {
        info!("a reorganisation was interrupted; resuming it");
        let _ = reorg_tx.send(ReorgCommand::Resume);
    }

    let conn_config = rtsp_conn::ConnConfig {
        limits: Limits { max_message_bytes: settings.max_message.as_usize() },
        queue_frames: settings.tcp_queue_frames,
        request_timeout: settings.request_timeout,
        idle_timeout: settings.idle_timeout,
    };
    let listening = Arc::new(rtsp_conn::Listening {
        config: conn_config,
        sessions: sessions_tx.clone(),
        auth: Arc::clone(&settings.auth),
        limits: Arc::clone(&rtsp_limits),
        next_id: AtomicU64::new(1),
    });
    tasks.push(tokio::spawn(rtsp_conn::listen(rtsp_listener, None, Arc::clone(&listening))));
    // Memory freed after a burst (a flood of connections, a crowd of sessions that left) goes
    // back to the system rather than holding the resident size at its peak.
    tasks.push(tokio::spawn(async {
        let mut every = tokio::time::interval(Duration::from_secs(30));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let _ = tokio::task::spawn_blocking(isochron_dataplane::net::release_free_memory).await;
        }
    }));
    if let Some(listener) = rtsps_listener {
        let tls = settings.tls.as_ref().map(|t| t.acceptor().clone());
        tasks.push(tokio::spawn(rtsp_conn::listen(listener, tls, listening)));
    }

    // The HTTP listener is bound here, so that its address is known and a bind error is
    // reported before the server is up; `isochron_http::serve` serves it.
    let mut http = None;
    if let Some(addr) = settings.http_listen {
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding HTTP to {addr} (config key http.listen)"))?;
        let recorders = Arc::new(Recorders::new(
            Arc::clone(&store),
            Arc::clone(&library),
            sched_tx.clone(),
            sessions_tx.clone(),
        ));
        let handles = Handles {
            recorders,
            library: Arc::clone(&library),
            sessions: sessions_tx.clone(),
            sched: sched_tx.clone(),
            sender: sender_tx.clone(),
            reorg: reorg_tx.clone(),
            store: Arc::clone(&store),
            node: NodeIdentity {
                rtsp: rtsp_addr,
                http: listener.local_addr()?,
                rtp_port,
                started: started.0,
                started_unix_ms: started
                    .1
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64),
            },
            hls_segment: settings.hls_segment,
            cluster: view.clone(),
            auth: Arc::clone(&settings.auth),
            tls: settings.tls.clone(),
            rtsp_limits: Arc::clone(&rtsp_limits),
            http_limits: conn_limits::ConnLimits::new(
                http_max_connections,
                settings.http_max_connections_per_client,
                settings.client_prefix,
            ),
        };
        info!("{}", settings.auth.notice());
        http = Some((listener, handles));
    }
    let http_addr = http.as_ref().map(|(_, h)| h.node.http);

    if let Some(dir) = settings.media_dir.clone() {
        tasks.push(tokio::spawn(media_watch::watch(
            dir,
            settings.media_scan_interval,
            Arc::clone(&store),
            Arc::clone(&library),
        )));
    }

    // Registration last: peers learn of this node once it can serve.
    let lease = Arc::new(std::sync::Mutex::new(None));
    if let (Some(c), Some(view), Some(control)) = (&settings.cluster, &view, control) {
        let record = cluster::NodeRecord {
            id: cluster::node_id(&c.node).0,
            name: c.node.clone(),
            rtsp: advertised(rtsp_addr, c.advertise),
            http: http_addr.map(|a| advertised(a, c.advertise)),
            control,
        };
        let client = cluster::connect(c)?;
        let (cs, rec) = (c.clone(), record.clone());
        let (client2, keeper) = tokio::task::spawn_blocking(move || {
            let keeper = cluster::register(&client, &cs, &rec)?;
            Ok::<_, anyhow::Error>((client, keeper))
        })
        .await??;
        *lease.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(keeper);
        let poll = cluster::Poller {
            client: client2,
            record,
            lease: Arc::clone(&lease),
            settings: c.clone(),
            view: Arc::clone(view),
            store: Arc::clone(&store),
            library: Arc::clone(&library),
            sessions: sessions_tx.clone(),
            reorg: reorg_tx.clone(),
            stop: Arc::clone(&stop),
            every: Duration::from_secs(1),
        };
        threads.push(
            std::thread::Builder::new()
                .name("isochron-members".into())
                .spawn(move || poll.run())?,
        );
    }

    info!(%rtsp_addr, ?rtsps_addr, ?http_addr, rtp_port, "isochron serving");
    Ok(RunningServer {
        rtsp_addr,
        rtsps_addr,
        http_addr,
        rtp_port,
        library,
        sched: sched_tx,
        sender: sender_tx,
        reorg: reorg_tx,
        http,
        stop,
        tasks,
        threads,
        lease,
    })
}

/// The RTSP server core of the session manager: its timeouts and caps from the settings, SSRCs
/// and offsets from `seed`, session ids from a random key of their own (RFC 2326 §16: no id can
/// be guessed).
fn server_core(settings: &Settings, rtp_port: u16, seed: u64) -> ServerCore {
    ServerCore::new(
        ServerConfig {
            session_timeout: settings.session_timeout,
            paused_session_timeout: settings.paused_session_timeout,
            silence_timeout: settings.silence_timeout,
            retransmit: Some(settings.retransmit_window),
            server_name: SERVER_NAME.into(),
            server_ports: (rtp_port, rtp_port + 1),
            max_sessions: settings.max_sessions,
            max_sessions_per_client: settings.max_sessions_per_client,
            reserved_sessions: settings.reserved_sessions,
            setup_timeout: Some(settings.setup_timeout),
            client_prefix: settings.client_prefix,
        },
        seed,
    )
    .with_id_key(rand::random())
}

/// The RTSP listener, and the RTSPS one when configured: bound before anything is served, a
/// bind error naming its config key.
async fn bind_rtsp(settings: &Settings) -> anyhow::Result<(TcpListener, Option<TcpListener>)> {
    let rtsp = TcpListener::bind(settings.rtsp_listen).await.with_context(|| {
        format!("binding RTSP to {} (config key rtsp.listen)", settings.rtsp_listen)
    })?;
    let rtsps =
        match settings.rtsps_listen {
            Some(addr) => Some(TcpListener::bind(addr).await.with_context(|| {
                format!("binding RTSPS to {addr} (config key rtsp.rtsps_listen)")
            })?),
            None => None,
        };
    Ok((rtsp, rtsps))
}

/// The RTSP connection caps and the HTTP connection cap. Connections are files: take the hard
/// limit, and keep the RTSP cap well below it (HTTP, disks and sockets need their share); the
/// reserve shrinks with a cap the open-files limit lowered, never more than half.
fn connection_caps(settings: &Settings) -> (Arc<conn_limits::ConnLimits>, usize) {
    let max_connections = match isochron_dataplane::net::raise_open_files_limit() {
        Ok((soft, hard)) => {
            let room = usize::try_from(soft.saturating_sub(512) / 2).unwrap_or(usize::MAX).max(16);
            let cap = settings.max_connections.min(room);
            info!(soft, hard, rtsp_connections = cap, "open-files limit");
            cap
        }
        Err(e) => {
            warn!(error = %e, "reading the open-files limit");
            settings.max_connections
        }
    };
    let rtsp = conn_limits::ConnLimits::with_reserve(
        max_connections,
        settings.reserved_connections.min(max_connections / 2),
        settings.max_connections_per_client,
        settings.client_prefix,
    );
    (rtsp, settings.http_max_connections.min(max_connections))
}

/// What starts a disk's IO thread (at start, and for a disk a reorganisation adds): one IO
/// thread per disk. Real-time reads and HTTP delivery's non-real-time reads complete to the
/// scheduler thread; the reorganiser's non-real-time copies complete to the reorganiser (told
/// apart by tag, `reorg::NRT_TAG_BASE`).
fn disk_worker_factory(
    sched_tx: &crossbeam_channel::Sender<SchedCommand>,
    reorg_tx: &tokio::sync::mpsc::UnboundedSender<ReorgCommand>,
    nrt_share: f64,
) -> impl Fn(&Store, DiskId) -> anyhow::Result<IoWorker> + Send + 'static {
    let (sched_tx, reorg_tx) = (sched_tx.clone(), reorg_tx.clone());
    move |store: &Store, id: DiskId| -> anyhow::Result<IoWorker> {
        let disk = store.disk(id).with_context(|| format!("disk {id} is not open"))?;
        let (sched_tx, reorg_tx) = (sched_tx.clone(), reorg_tx.clone());
        let on_done = Box::new(move |done: IoDone| match done {
            IoDone::Read(r) => {
                let _ = sched_tx.send(SchedCommand::ReadDone(r));
            }
            IoDone::Write(w) => {
                let _ = sched_tx.send(SchedCommand::WriteDone(w));
            }
            // HTTP delivery's reads carry the scheduler thread's tags.
            IoDone::NrtRead(r) if r.tag < reorg::NRT_TAG_BASE => {
                let _ = sched_tx.send(SchedCommand::HttpReadDone(r));
            }
            other => {
                let _ = reorg_tx.send(ReorgCommand::Io(other));
            }
        });
        IoWorker::spawn(disk, id, nrt_share, on_done)
            .with_context(|| format!("starting the IO thread of disk {id}"))
    }
}

/// The scheduler thread's events, wired to their owners: a read failed on every copy ends the
/// session's stream; a bad copy goes to the reorganiser to be repaired.
fn sched_events(
    sessions: tokio::sync::mpsc::UnboundedSender<SessionCommand>,
    reorg: tokio::sync::mpsc::UnboundedSender<ReorgCommand>,
) -> SchedSink {
    Box::new(move |ev| match ev {
        SchedEvent::ReadFailed { stream, error } => {
            let _ = sessions.send(SessionCommand::ReadFailed { stream, error });
        }
        SchedEvent::CopyFailed { key, disk, error } => {
            let _ = reorg.send(ReorgCommand::Repair { key, disk, error });
        }
    })
}

/// A cluster node's reads of copies on other nodes' disks, for the scheduler thread's failover:
/// each on a blocking thread of the runtime, through the owner's non-real-time share
/// (`RemoteBlocks::read_block_nrt`), completing as a [`SchedCommand::ReadDone`].
fn remote_reads(
    store: &Arc<Store>,
    sched: crossbeam_channel::Sender<SchedCommand>,
) -> isochron_dataplane::sched_thread::RemoteRead {
    let store = Arc::downgrade(store);
    let rt = tokio::runtime::Handle::current();
    Box::new(move |disk, key, tag| {
        let (store, sched) = (store.clone(), sched.clone());
        rt.spawn_blocking(move || {
            let started = std::time::Instant::now();
            let remote = store.upgrade().and_then(|s| s.remote());
            let result = isochron_diskio::store::read_remote_block(remote.as_deref(), disk, key)
                .map(Arc::new);
            let done =
                isochron_diskio::ReadDone { disk, key, tag, result, service: started.elapsed() };
            let _ = sched.send(SchedCommand::ReadDone(done));
        });
    })
}

/// The sender thread's events, wired to their owners: a block sent and a pace change go to the
/// scheduler thread; the end of a stream stops its reads and tells the session manager.
fn sender_events(
    sched: crossbeam_channel::Sender<SchedCommand>,
    sessions: tokio::sync::mpsc::UnboundedSender<SessionCommand>,
) -> SenderSink {
    Box::new(move |ev| match ev {
        PacerEvent::BlockDone { stream, run, index } => {
            let _ = sched.send(SchedCommand::BlockDone { stream, run, index });
        }
        PacerEvent::Paced { stream, run, anchor, pace } => {
            let _ = sched.send(SchedCommand::Pace { stream, run, anchor, pace });
        }
        PacerEvent::Ended { stream, run, report } => {
            let _ = sched.send(SchedCommand::Stop { stream });
            let _ = sessions.send(SessionCommand::ShareEnded { stream, run, report });
        }
        PacerEvent::Stopped { stream, run, report } => {
            let _ = sched.send(SchedCommand::Stop { stream });
            let _ = sessions.send(SessionCommand::ShareStopped { stream, run, report });
        }
    })
}

/// `addr` with the advertised IP when it is bound to a wildcard.
fn advertised(addr: SocketAddr, ip: std::net::IpAddr) -> SocketAddr {
    if addr.ip().is_unspecified() { SocketAddr::new(ip, addr.port()) } else { addr }
}
