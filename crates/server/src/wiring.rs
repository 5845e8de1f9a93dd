//! The server's start-up, in named steps: what [`crate::start`] runs, in this order.
//!
//! Why the order: every owner (the scheduler thread, the sender shards, the RTCP thread, the
//! session manager, the reorganiser, the HTTP side) is given the others' command senders, so the
//! channels are made first ([`channels`]) and each step takes the receiver of the owner it starts.
//! Sockets are bound before any owner serves, so a bind error names its config key and nothing
//! half-started is left answering; a cluster node registers in etcd last, once it can serve
//! (peers learn of it only then: docs/design/cluster.md).
//!
//! 1. [`load_library`]: the catalog, and the media directory's files ingested.
//! 2. [`channels`]: the owners' senders ([`Ends`]) and receivers ([`Inboxes`]).
//! 3. [`open_disks`]: one IO thread per local disk, and each disk's profile.
//! 4. [`bind_media`]: RTSP/RTSPS listeners, the sender shards' UDP pairs.
//! 5. [`Wiring::data_plane`]: the scheduler thread, the sender shards, the RTCP receiver.
//! 6. [`Wiring::cluster_transport`]: control connections, the relay port, blocks over HTTP.
//! 7. [`Wiring::owners`]: the session manager and the reorganiser.
//! 8. [`Wiring::rtsp`]: the RTSP (and RTSPS) accept loops.
//! 9. [`Wiring::http`]: the HTTP listener and the [`Handles`] it serves from.
//! 10. [`Wiring::register`]: the membership record and its lease, the membership poll.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;

use anyhow::Context as _;
use isochron_base::{DiskId, NodeId};
use isochron_dataplane::clock::Clock;
use isochron_dataplane::net::UdpPair;
use isochron_dataplane::pacer::PacerEvent;
use isochron_dataplane::sched_thread::{SchedCommand, SchedEvent, SchedSink, SchedThread};
use isochron_dataplane::sender::{SenderCommand, SenderSink, SenderThread};
use isochron_dataplane::shards::Senders;
use isochron_diskio::{IoDone, IoWorker, Store};
use isochron_rtsp::codec::Limits;
use isochron_rtsp::server::{ServerConfig, ServerCore};
use isochron_sched::profile::DiskProfile;
use isochron_sched::{AdmissionController, CycleScheduler};
use tokio::net::TcpListener;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::config::Settings;
use crate::library::Library;
use crate::profile::disk_profile;
use crate::recorder::Recorders;
use crate::reorg::{ReorgCommand, Reorganiser};
use crate::sessions::{ClusterLink, Manager, SessionCommand};
use crate::transcoder::tasks::{ClaimCommand, Claimer};
use crate::transcoder::{ClusterJobs, JobIo, Laddering, TranscodeCommand, Transcoder};
use crate::{Handles, NodeIdentity, SERVER_NAME, cluster, conn_limits, media_watch, reorg};
use crate::{rtcp_rx, rtsp_conn};

/// Every owner's command sender; each owner is given the others' (the wiring).
#[derive(Clone)]
pub(crate) struct Ends {
    pub(crate) sched: crossbeam_channel::Sender<SchedCommand>,
    pub(crate) sender: Senders,
    pub(crate) sessions: UnboundedSender<SessionCommand>,
    pub(crate) reorg: UnboundedSender<ReorgCommand>,
    pub(crate) transcoder: UnboundedSender<TranscodeCommand>,
}

/// Every owner's command receiver, taken by the step that starts the owner.
pub(crate) struct Inboxes {
    pub(crate) sched: crossbeam_channel::Receiver<SchedCommand>,
    pub(crate) shards: Vec<crossbeam_channel::Receiver<SenderCommand>>,
    pub(crate) sessions: UnboundedReceiver<SessionCommand>,
    pub(crate) reorg: UnboundedReceiver<ReorgCommand>,
    pub(crate) transcoder: UnboundedReceiver<TranscodeCommand>,
}

/// Step 2: the owners' channels, one sender shard per `sender_threads`.
pub(crate) fn channels(sender_threads: usize) -> (Ends, Inboxes) {
    let (sched, sched_rx) = crossbeam_channel::unbounded::<SchedCommand>();
    let (shard_txs, shards): (Vec<_>, Vec<_>) =
        (0..sender_threads).map(|_| crossbeam_channel::unbounded::<SenderCommand>()).unzip();
    let (sessions, sessions_rx) = tokio::sync::mpsc::unbounded_channel::<SessionCommand>();
    let (reorg, reorg_rx) = tokio::sync::mpsc::unbounded_channel::<ReorgCommand>();
    let (transcoder, transcoder_rx) = tokio::sync::mpsc::unbounded_channel::<TranscodeCommand>();
    let ends = Ends { sched, sender: Senders::new(shard_txs), sessions, reorg, transcoder };
    let inboxes = Inboxes {
        sched: sched_rx,
        shards,
        sessions: sessions_rx,
        reorg: reorg_rx,
        transcoder: transcoder_rx,
    };
    (ends, inboxes)
}

/// Step 1: the catalog's objects; with a media directory, its files not yet in the store are
/// ingested first.
pub(crate) async fn load_library(
    settings: &Settings,
    store: &Arc<Store>,
) -> anyhow::Result<Arc<Library>> {
    let library = Arc::new(Library::load(store).context("reading the catalog")?);
    if let Some(dir) = &settings.media_dir {
        anyhow::ensure!(dir.is_dir(), "media directory {} does not exist", dir.display());
        let (st, lib, d) = (Arc::clone(store), Arc::clone(&library), dir.clone());
        tokio::task::spawn_blocking(move || media_watch::ingest_existing(&st, &lib, &d)).await?;
    }
    Ok(library)
}

/// The local disks' IO threads and every disk's profile, for the scheduler thread.
pub(crate) struct Disks {
    workers: HashMap<DiskId, IoWorker>,
    profiles: Vec<(DiskId, DiskProfile)>,
}

/// Step 3: an IO thread for every local disk, and every disk's profile (for admission).
pub(crate) fn open_disks(
    store: &Store,
    spawn_worker: &impl Fn(&Store, DiskId) -> anyhow::Result<IoWorker>,
) -> anyhow::Result<Disks> {
    let mut workers = HashMap::new();
    let mut profiles = Vec::new();
    for id in store.disk_ids() {
        workers.insert(id, spawn_worker(store, id)?);
        profiles.push((id, disk_profile(store, id)));
    }
    Ok(Disks { workers, profiles })
}

/// The sockets bound before anything is served.
pub(crate) struct MediaSockets {
    /// RTSP's listener.
    pub(crate) rtsp: TcpListener,
    /// RTSPS's, when `rtsp.rtsps_listen` is set.
    pub(crate) rtsps: Option<TcpListener>,
    /// One RTP/RTCP pair per sender shard (the first pair's RTCP socket is the receiver's).
    pub(crate) udp: Vec<UdpPair>,
    /// The RTP port (RTCP is the next one).
    pub(crate) rtp_port: u16,
    /// The RTCP receiver's socket.
    pub(crate) rtcp: std::net::UdpSocket,
}

/// Step 4: the RTSP listeners and the sender shards' UDP pairs, each bind error naming its
/// config key.
pub(crate) async fn bind_media(settings: &Settings) -> anyhow::Result<MediaSockets> {
    let (rtsp, rtsps) = bind_rtsp(settings).await?;
    let udp = UdpPair::bind_shards(
        rtsp.local_addr()?.ip(),
        settings.rtp_port,
        settings.udp_send_buffer.as_usize(),
        settings.sender_threads,
    )
    .with_context(|| {
        format!("binding UDP ports {} and +1 (config key rtsp.rtp_port)", settings.rtp_port)
    })?;
    let rtp_port = udp[0].rtp_port()?;
    let rtcp = udp[0].rtcp.try_clone()?;
    Ok(MediaSockets { rtsp, rtsps, udp, rtp_port, rtcp })
}

/// What steps 6 to 10 share: the settings, the store and its objects, the clock, the owners'
/// senders, the stop flag, and the threads and tasks started so far (which
/// [`crate::RunningServer::shutdown`] stops).
pub(crate) struct Wiring {
    pub(crate) settings: Settings,
    pub(crate) store: Arc<Store>,
    pub(crate) library: Arc<Library>,
    /// The recordings in progress, over HTTP and RTSP alike.
    pub(crate) recorders: Arc<Recorders>,
    pub(crate) clock: Clock,
    pub(crate) ends: Ends,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) threads: Vec<std::thread::JoinHandle<()>>,
    pub(crate) tasks: Vec<JoinHandle<()>>,
}

/// A cluster node's transport (step 6): its id and name, the link the session manager talks
/// to peers through, and the control address it advertises.
pub(crate) struct Transport {
    pub(crate) node: (NodeId, String),
    pub(crate) link: Option<ClusterLink>,
    pub(crate) control: Option<SocketAddr>,
    pub(crate) view: Option<Arc<cluster::ClusterView>>,
}

impl Wiring {
    fn thread(&mut self, name: &str, f: impl FnOnce() + Send + 'static) -> anyhow::Result<()> {
        let t = std::thread::Builder::new()
            .name(name.into())
            .spawn(f)
            .with_context(|| format!("starting thread {name}"))?;
        self.threads.push(t);
        Ok(())
    }

    /// Step 5: the scheduler thread (the cycle scheduler and its cache, the disks' IO threads),
    /// one sender thread per UDP pair, and the RTCP receiver.
    pub(crate) fn data_plane(
        &mut self,
        sched_rx: crossbeam_channel::Receiver<SchedCommand>,
        shard_rxs: Vec<crossbeam_channel::Receiver<SenderCommand>>,
        disks: Disks,
        udp: Vec<UdpPair>,
        rtcp: std::net::UdpSocket,
    ) -> anyhow::Result<()> {
        let Disks { workers, profiles } = disks;
        let s = &self.settings;
        let e = self.ends.clone();
        let sched = SchedThread {
            clock: self.clock,
            scheduler: CycleScheduler::new(
                s.cycle.clone(),
                AdmissionController::new(s.admission.clone(), profiles),
            ),
            rx: sched_rx,
            workers,
            sender: e.sender.clone(),
            on_event: sched_events(e.sessions.clone(), e.reorg.clone()),
            remote: s.cluster.as_ref().map(|_| remote_reads(&self.store, e.sched.clone())),
        };
        self.thread("isochron-sched", || sched.run())?;
        // Every object's first block stays in memory (within `sched.resident_mib`), so that a
        // start from the beginning waits for no disk (docs/design/scheduler.md).
        let to_sched = e.sched.clone();
        self.library.on_insert(move |entry| {
            let _ = to_sched.send(SchedCommand::KeepResident { plan: Arc::clone(&entry.plan) });
        });
        let s = &self.settings;
        let gso = s.gso && isochron_dataplane::net::gso_supported();
        // In a cluster a share overdue past a peer's suspicion is held a moment: its part may
        // have been taken over, and the word is on its way (docs/design/takeover.md).
        let timing = isochron_cluster::ClusterConfig::new(NodeId(0), "", 0);
        let hold_after = s.cluster.as_ref().map(|_| timing.hold_after());
        let senders: Vec<SenderThread> = shard_rxs
            .into_iter()
            .zip(udp)
            .enumerate()
            .map(|(i, (rx, udp))| SenderThread {
                clock: self.clock,
                rx,
                udp: Arc::new(udp),
                on_event: sender_events(e.sched.clone(), e.sessions.clone()),
                rtcp_interval: s.rtcp_interval,
                batch_packets: s.batch_packets,
                quantum: s.send_quantum,
                retransmit_window: s.retransmit_window,
                gso,
                shards: s.sender_threads,
                sent_through: e.sender.sent_through_of(i),
                hold_after,
                hold_window: timing.hold_window,
            })
            .collect();
        info!(threads = s.sender_threads, gso, "sender shards");
        for (i, sender) in senders.into_iter().enumerate() {
            self.thread(&format!("isochron-sender-{i}"), || sender.run())?;
        }
        let (stop, tx, nacks) = (Arc::clone(&self.stop), e.sessions, e.sender);
        self.thread("isochron-rtcp", move || rtcp_rx::run(rtcp, stop, tx, nacks))
    }

    /// Step 6: in a cluster, the control port (connections to and from peers, this node's
    /// hello carrying `incarnation`), the relay port and its thread, and block IO on other
    /// nodes' disks over HTTP; alone, the node's default name.
    pub(crate) async fn cluster_transport(
        &mut self,
        incarnation: u64,
    ) -> anyhow::Result<Transport> {
        let Some(c) = self.settings.cluster.clone() else {
            let node = (NodeId(0), "local".to_owned());
            return Ok(Transport { node, link: None, control: None, view: None });
        };
        let view = Arc::new(cluster::ClusterView {
            node: c.node.clone(),
            prefix: c.prefix.clone(),
            // It answered a moment ago (`open_or_create_store`).
            etcd_ok: AtomicBool::new(true),
            ..cluster::ClusterView::default()
        });
        let addr = SocketAddr::new(c.advertise, c.control_port);
        let listener = bind_tcp(addr).with_context(|| {
            format!("binding the control port {addr} (config key cluster.control_port)")
        })?;
        let (relay, relay_buffer) = isochron_dataplane::net::receive_socket(addr)
            .with_context(|| format!("binding the relay port {addr} (UDP)"))?;
        if relay_buffer < isochron_dataplane::net::RECEIVE_BUFFER {
            warn!(
                bytes = relay_buffer,
                "the relay port's receive buffer is small (net.core.rmem_max): relayed packets \
                 may be lost on a busy node and asked for again"
            );
        }
        let (sender, v, stop) =
            (self.ends.sender.clone(), Arc::clone(&view), Arc::clone(&self.stop));
        self.thread("isochron-relay", move || cluster::receive_relay(relay, sender, v, stop))?;
        self.store.set_remote(Arc::new(cluster::HttpBlocks::new(
            Arc::downgrade(&self.store),
            Arc::clone(&view),
        )));
        let id = cluster::node_id(&c.node);
        let hello =
            isochron_cluster::Message::Hello { node: id, name: c.node.clone(), incarnation };
        self.tasks.push(tokio::spawn(cluster::accept_control(
            listener,
            Arc::clone(&view),
            self.ends.sessions.clone(),
        )));
        let link = ClusterLink {
            out: Box::new(cluster::ControlOut::new(Arc::clone(&view), &hello)),
            store: Arc::clone(&self.store),
            local_disks: Arc::new(self.store.local_disks()),
            view: Arc::clone(&view),
        };
        Ok(Transport {
            node: (id, c.node),
            link: Some(link),
            control: Some(addr),
            view: Some(view),
        })
    }

    /// Step 7: the session manager (the RTSP server core `core`, the cluster's link) and the
    /// reorganiser; a single node resumes an interrupted reorganisation at once (a cluster node
    /// once it knows its peers: the membership poll sends `Resume`).
    pub(crate) fn owners(
        &mut self,
        core: ServerCore,
        inboxes: (UnboundedReceiver<SessionCommand>, UnboundedReceiver<ReorgCommand>),
        transport: &mut Transport,
        rtsp_addr: SocketAddr,
        spawn_worker: impl Fn(&Store, DiskId) -> anyhow::Result<IoWorker> + Send + 'static,
    ) {
        let (sessions_rx, reorg_rx) = inboxes;
        let e = &self.ends;
        let manager = Manager::new(
            core,
            Arc::clone(&self.library),
            self.clock,
            e.sched.clone(),
            e.sender.clone(),
            format!("isochron@{}", rtsp_addr.ip()),
            e.sessions.clone(),
            transport.node.clone(),
            transport.link.take(),
            (self.settings.degrade, self.settings.live.window),
        );
        self.tasks.push(tokio::spawn(manager.run(sessions_rx)));
        let reorganiser = Reorganiser::new(
            Arc::clone(&self.store),
            Arc::clone(&self.library),
            e.sched.clone(),
            Box::new(spawn_worker),
            e.reorg.clone(),
            e.sessions.clone(),
        );
        self.tasks.push(tokio::spawn(reorganiser.run(reorg_rx)));
        if self.settings.cluster.is_none() && self.store.meta().pending().is_some() {
            info!("a reorganisation was interrupted; resuming it");
            let _ = self.ends.reorg.send(ReorgCommand::Resume);
        }
    }

    /// Step 8: the RTSP accept loop (and the RTSPS one), under the connection caps; and a task
    /// that gives memory freed after a burst back to the system.
    pub(crate) fn rtsp(
        &mut self,
        rtsp: TcpListener,
        rtsps: Option<TcpListener>,
        limits: &Arc<conn_limits::ConnLimits>,
    ) {
        let s = &self.settings;
        let conn_config = rtsp_conn::ConnConfig {
            limits: Limits { max_message_bytes: s.max_message.as_usize() },
            queue_frames: s.tcp_queue_frames,
            request_timeout: s.request_timeout,
            idle_timeout: s.idle_timeout,
        };
        let listening = Arc::new(rtsp_conn::Listening {
            config: conn_config,
            sessions: self.ends.sessions.clone(),
            auth: Arc::clone(&s.auth),
            limits: Arc::clone(limits),
            next_id: AtomicU64::new(1),
            publishing: Arc::new(crate::publisher::Publishing {
                recorders: Arc::clone(&self.recorders),
                live: s.live,
            }),
        });
        self.tasks.push(tokio::spawn(rtsp_conn::listen(rtsp, None, Arc::clone(&listening))));
        // Memory freed after a burst (a flood of connections, a crowd of sessions that left)
        // goes back to the system rather than holding the resident size at its peak.
        self.tasks.push(tokio::spawn(async {
            let mut every = tokio::time::interval(Duration::from_secs(30));
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let _ =
                    tokio::task::spawn_blocking(isochron_dataplane::net::release_free_memory).await;
            }
        }));
        if let Some(listener) = rtsps {
            let tls = s.tls.as_ref().map(|t| t.acceptor().clone());
            self.tasks.push(tokio::spawn(rtsp_conn::listen(listener, tls, listening)));
        }
    }

    /// Step 8½: the SRT listener of publishers, when `live.srt_listen` is set: its address.
    pub(crate) async fn srt(&mut self) -> anyhow::Result<Option<SocketAddr>> {
        let s = &self.settings;
        let Some(addr) = s.live.srt_listen else { return Ok(None) };
        let shared = Arc::new(crate::srt_publish::SrtPublishing {
            recorders: Arc::clone(&self.recorders),
            live: s.live,
            auth: Arc::clone(&s.auth),
        });
        let (local, task) = crate::srt_publish::bind(addr, shared)
            .await
            .with_context(|| format!("binding SRT to {addr} (config key live.srt_listen)"))?;
        self.tasks.push(tokio::spawn(task));
        Ok(Some(local))
    }

    /// Step 9: the HTTP listener, bound here so that its address is known and a bind error is
    /// reported before the server is up, and the handles `isochron_http::serve` serves it from
    /// (`None`: `http.listen` is off).
    pub(crate) async fn http(
        &self,
        node: (SocketAddr, u16, (std::time::Instant, std::time::SystemTime)),
        view: Option<Arc<cluster::ClusterView>>,
        rtsp_limits: &Arc<conn_limits::ConnLimits>,
        http_max_connections: usize,
    ) -> anyhow::Result<Option<(TcpListener, Handles)>> {
        let s = &self.settings;
        let Some(addr) = s.http_listen else { return Ok(None) };
        let (rtsp, rtp_port, started) = node;
        let listener = bind_tcp(addr)
            .with_context(|| format!("binding HTTP to {addr} (config key http.listen)"))?;
        let e = &self.ends;
        let handles = Handles {
            recorders: Arc::clone(&self.recorders),
            library: Arc::clone(&self.library),
            sessions: e.sessions.clone(),
            sched: e.sched.clone(),
            sender: e.sender.clone(),
            reorg: e.reorg.clone(),
            transcoder: e.transcoder.clone(),
            transcode: s.transcode.clone(),
            store: Arc::clone(&self.store),
            node: NodeIdentity {
                rtsp,
                http: listener.local_addr()?,
                rtp_port,
                started: started.0,
                started_unix_ms: started
                    .1
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64),
            },
            hls_segment: s.hls_segment,
            cluster: view,
            auth: Arc::clone(&s.auth),
            tls: s.tls.clone(),
            rtsp_limits: Arc::clone(rtsp_limits),
            http_limits: conn_limits::ConnLimits::new(
                http_max_connections,
                s.http_max_connections_per_client,
                s.client_prefix,
            ),
        };
        info!("{}", s.auth.notice());
        Ok(Some((listener, handles)))
    }

    /// The transcoder: the ladder jobs (`transcoder`). In a cluster, returns the inbox of the
    /// claimer of its rungs' tasks, which [`Wiring::register`] starts once the node has a lease.
    pub(crate) fn transcoder(
        &mut self,
        inbox: UnboundedReceiver<TranscodeCommand>,
        http: Option<SocketAddr>,
    ) -> Option<std::sync::mpsc::Receiver<ClaimCommand>> {
        let (cluster, claims) = match &self.settings.cluster {
            Some(c) => {
                let (tx, rx) = std::sync::mpsc::channel();
                (Some(ClusterJobs { node: c.node.clone(), claims: tx }), Some(rx))
            }
            None => (None, None),
        };
        let io = JobIo {
            sched: self.ends.sched.clone(),
            reorg: self.ends.reorg.clone(),
            http: http.map(own_http),
        };
        let t = Transcoder::new(
            self.settings.transcode.clone(),
            (Arc::clone(&self.store), Arc::clone(&self.library)),
            io,
            cluster,
            self.ends.transcoder.clone(),
        );
        self.tasks.push(tokio::spawn(t.run(inbox)));
        claims
    }

    /// The media directory's watcher (new files are ingested as they appear, and laddered
    /// with `transcode.ladder`).
    pub(crate) fn media_watch(&mut self) {
        if let Some(dir) = self.settings.media_dir.clone() {
            let ladder = self.settings.transcode.ladder.clone().map(|l| Laddering {
                ladder: l,
                settings: self.settings.transcode.clone(),
                jobs: self.ends.transcoder.clone(),
            });
            self.tasks.push(tokio::spawn(media_watch::watch(
                dir,
                self.settings.media_scan_interval,
                Arc::clone(&self.store),
                Arc::clone(&self.library),
                ladder,
            )));
        }
    }

    /// Live recordings get the server's ladder (`transcode.ladder`) once their feed ends, made
    /// from their HLS (a live recording keeps no source file) on this node's HTTP at `http`
    /// (in a cluster, each rung's task is made by whichever node claims it, from its own).
    pub(crate) fn live_ladder(&self, http: Option<SocketAddr>) {
        let (Some(ladder), Some(http)) = (self.settings.transcode.ladder.clone(), http) else {
            return;
        };
        let laddering = Laddering {
            ladder,
            settings: self.settings.transcode.clone(),
            jobs: self.ends.transcoder.clone(),
        };
        self.recorders.ladder_live_with(laddering, own_http(http));
    }

    /// Step 10, last: a cluster node's membership record under a lease (peers learn of this
    /// node once it can serve), the membership poll's thread, and the claimer of ladder tasks
    /// (`claims`: its inbox). Returns the lease's holder.
    pub(crate) async fn register(
        &mut self,
        transport: &Transport,
        (rtsp_addr, http_addr): (SocketAddr, Option<SocketAddr>),
        claims: Option<std::sync::mpsc::Receiver<ClaimCommand>>,
    ) -> anyhow::Result<cluster::SharedLease> {
        let lease = Arc::new(std::sync::Mutex::new(None));
        let (Some(c), Some(view), Some(control)) =
            (self.settings.cluster.clone(), &transport.view, transport.control)
        else {
            return Ok(lease);
        };
        let record = cluster::NodeRecord {
            id: cluster::node_id(&c.node).0,
            name: c.node.clone(),
            rtsp: advertised(rtsp_addr, c.advertise),
            http: http_addr.map(|a| advertised(a, c.advertise)),
            control,
        };
        let client = cluster::connect(&c)?;
        let (cs, rec) = (c.clone(), record.clone());
        let (client2, keeper) = tokio::task::spawn_blocking(move || {
            let keeper = cluster::register(&client, &cs, &rec)?;
            Ok::<_, anyhow::Error>((client, keeper))
        })
        .await??;
        *lease.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(keeper);
        let (claims_client, c2) = (client2.clone(), c.clone());
        let poll = cluster::Poller {
            client: client2,
            record,
            lease: Arc::clone(&lease),
            settings: c,
            view: Arc::clone(view),
            store: Arc::clone(&self.store),
            library: Arc::clone(&self.library),
            sessions: self.ends.sessions.clone(),
            reorg: self.ends.reorg.clone(),
            stop: Arc::clone(&self.stop),
            every: Duration::from_secs(1),
        };
        self.thread("isochron-members", move || poll.run())?;
        if let Some(inbox) = claims {
            let claimer = Claimer {
                client: claims_client,
                prefix: c2.prefix,
                node: c2.node,
                lease: Arc::clone(&lease),
                slots: self.settings.transcode.jobs.max(1),
                jobs: self.ends.transcoder.clone(),
                inbox,
                stop: Arc::clone(&self.stop),
            };
            self.thread("isochron-transcode", move || claimer.run())?;
        }
        Ok(lease)
    }
}

/// The RTSP server core of the session manager: its timeouts and caps from the settings, SSRCs
/// and offsets from `seed`, session ids from a random key of their own (RFC 2326 §16: no id can
/// be guessed).
pub(crate) fn server_core(settings: &Settings, rtp_port: u16, seed: u64) -> ServerCore {
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
pub(crate) async fn bind_rtsp(
    settings: &Settings,
) -> anyhow::Result<(TcpListener, Option<TcpListener>)> {
    let rtsp = bind_tcp(settings.rtsp_listen).with_context(|| {
        format!("binding RTSP to {} (config key rtsp.listen)", settings.rtsp_listen)
    })?;
    let rtsps =
        match settings.rtsps_listen {
            Some(addr) => Some(bind_tcp(addr).with_context(|| {
                format!("binding RTSPS to {addr} (config key rtsp.rtsps_listen)")
            })?),
            None => None,
        };
    Ok((rtsp, rtsps))
}

/// The accept queue of every listener: the kernel caps it at `net.core.somaxconn` (4096 by
/// default since Linux 5.4).
const LISTEN_BACKLOG: u32 = 4096;

/// A TCP listener on `addr` (with `SO_REUSEADDR`, as `TcpListener::bind` sets) whose accept
/// queue holds [`LISTEN_BACKLOG`] connections. With the default of 128 a flood of connections
/// (a hostile client opening thousands) overflows the queue between two turns of the accept
/// loop, and the kernel drops other clients' SYNs: each waits a second for its retransmission
/// (23 of 3,000 connections opened back to back did).
fn bind_tcp(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// The RTSP connection caps and the HTTP connection cap. Connections are files: take the hard
/// limit, and keep the RTSP cap well below it (HTTP, disks and sockets need their share); the
/// reserve shrinks with a cap the open-files limit lowered, never more than half.
pub(crate) fn connection_caps(settings: &Settings) -> (Arc<conn_limits::ConnLimits>, usize) {
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
pub(crate) fn disk_worker_factory(
    ends: &Ends,
    nrt_share: f64,
) -> impl Fn(&Store, DiskId) -> anyhow::Result<IoWorker> + Send + 'static {
    let (sched_tx, reorg_tx) = (ends.sched.clone(), ends.reorg.clone());
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
    sessions: UnboundedSender<SessionCommand>,
    reorg: UnboundedSender<ReorgCommand>,
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
    sessions: UnboundedSender<SessionCommand>,
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

/// The base URL of this node's HTTP, as a process on the node reaches it (`http://host:port`;
/// loopback when it listens on every address).
fn own_http(mut http: SocketAddr) -> String {
    if http.ip().is_unspecified() {
        http.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    format!("http://{http}")
}
