//! The configuration file: one TOML document, every key optional, unknown keys rejected.
//!
//! The file format is kept apart from the cores' config structs (`CycleConfig`, the RTSP
//! `ServerConfig`): [`ConfigFile`] is what users write, [`ConfigFile::validate`] turns it into
//! checked runtime values once, at the edge ("parse, don't validate"). `config/example.toml` is the
//! documentation of every key with its unit and default; a test proves it equals
//! [`ConfigFile::default`], so the two cannot drift apart.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use isochron_base::{BitRate, Bytes};
use isochron_sched::{AdmissionConfig, AdmissionPolicy, CycleConfig};
use isochron_store::catalog::DiskSpec;
use serde::{Deserialize, Serialize};

/// The whole configuration file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConfigFile {
    /// `[store]`: where media lives.
    pub store: StoreSection,
    /// `[rtsp]`: the RTSP listener and sessions.
    pub rtsp: RtspSection,
    /// `[sender]`: the packet sender thread.
    pub sender: SenderSection,
    /// `[sched]`: the block scheduler and cache.
    pub sched: SchedSection,
    /// `[http]`: the HTTP API.
    pub http: HttpSection,
    /// `[media]`: the watched media directory.
    pub media: MediaSection,
    /// `[cluster]`: a node of a cluster on etcd.
    pub cluster: ClusterSection,
    /// `[auth]`: who may read, record and administer (`isochron_auth`).
    pub auth: isochron_auth::AuthSection,
    /// `[tls]`: the certificate for RTSPS and HTTPS.
    pub tls: TlsSection,
    /// `[transcode]`: ladders of renditions made by the server.
    pub transcode: TranscodeSection,
    /// `[live]`: feeds published to the server.
    pub live: LiveSection,
}

/// `[tls]`: a certificate and its key, both PEM. With them the HTTP port also speaks HTTPS (on
/// the same port: a connection that opens with a TLS handshake gets TLS) and `rtsp.rtsps_listen`
/// can be set. Both or neither.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsSection {
    /// The certificate chain, leaf first (PEM). Default: none (no TLS).
    pub cert_file: String,
    /// The certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1). Default: none.
    pub key_file: String,
}

/// `[store]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreSection {
    /// Directory of the catalog and, unless `disks` is set, of the one disk. Default
    /// `isochron-data`.
    pub data_dir: PathBuf,
    /// Block size of a new store, in KiB (a multiple of 4, at least 64). Default 1024.
    pub block_size_kib: u64,
    /// Disks of a new store: `PATH`, or `PATH,seek_ms=10,rate_mib_s=4` for a directory that
    /// behaves like a disk with that mean seek time and transfer rate (Gennart's model). Default:
    /// none, meaning one disk at `<data_dir>/disk-0`.
    pub disks: Vec<String>,
    /// Seed a new store with the bundled demo clip, as `demo`. Default true.
    pub seed_demo: bool,
    /// Copies of every block a new store keeps (1 to 8), each on a distinct disk (distinct
    /// nodes in a cluster with enough of them); reads fail over to the next copy. Fixed when the
    /// store is created. Default: unset, meaning 1 for a new store and whatever an existing
    /// store keeps; a value other than an existing store's is an error.
    pub replication: Option<u8>,
}

impl Default for StoreSection {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("isochron-data"),
            block_size_kib: 1024,
            disks: Vec::new(),
            seed_demo: true,
            replication: None,
        }
    }
}

/// `[rtsp]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RtspSection {
    /// Address the RTSP listener binds. Default `0.0.0.0:8554`.
    pub listen: String,
    /// Address of an RTSPS listener (RTSP over TLS, media interleaved on the TLS connection;
    /// needs `[tls]`), e.g. `0.0.0.0:322`; empty: none. Default empty.
    pub rtsps_listen: String,
    /// UDP port for RTP; RTCP uses the next one. Shared by every session. 0 picks a free pair.
    /// Default 6970.
    pub rtp_port: u16,
    /// Seconds without a request or RTCP before a UDP session is reaped; advertised in
    /// `Session: …;timeout=`. Default 60.
    pub session_timeout_s: u64,
    /// Seconds a *paused* UDP session lives without a request or RTCP (ffmpeg sends nothing
    /// while paused). At least `session_timeout_s`. Default 300.
    pub paused_session_timeout_s: u64,
    /// Seconds a *playing* UDP session whose client has sent RTCP lives after its last sign of
    /// life: a client that reported and fell silent is gone, and its stream stops well before
    /// `session_timeout_s`. At least 5; a value above `session_timeout_s` means that. Default 20.
    pub silence_timeout_s: u64,
    /// Most RTSP sessions at once; further SETUPs get 503 Service Unavailable. Default 1000.
    pub max_sessions: usize,
    /// Most RTSP connections open at once (kept below the open-files limit, which is raised to
    /// its hard limit at start); more get 503 and are closed. Default 4096.
    pub max_connections: usize,
    /// Most RTSP connections one client (IP address) may hold; more get 503 and are closed.
    /// Loopback clients are exempt. Default 300.
    pub max_connections_per_client: usize,
    /// Seconds a connection may take to send a whole request (and its first one): a client that
    /// trickles bytes (slowloris) or says nothing is answered 408 and closed. Default 10.
    pub request_timeout_s: u64,
    /// Most RTSP sessions one client (IP address) may hold; further SETUPs from it get 503 with
    /// `Retry-After`. Loopback clients are exempt. Default 256.
    pub max_sessions_per_client: usize,
    /// The last slots of `max_sessions`, kept for authenticated users and loopback clients: an
    /// anonymous SETUP is refused (503) once `max_sessions - reserved_sessions` are alive.
    /// Less than `max_sessions`. Default: a tenth of `max_sessions`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_sessions: Option<usize>,
    /// The last slots of `max_connections`, kept for clients that prove something: a connection
    /// that takes one must send credentials that verify, or a request on a session of its own,
    /// first; anything else gets 503 and the connection closes. Less than `max_connections`.
    /// Default: a sixteenth of `max_connections`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_connections: Option<usize>,
    /// Largest RTSP message accepted, in KiB; larger ones get 400 and the connection closes.
    /// Default 64.
    pub max_message_kib: u64,
    /// Seconds a session may stay set up without being played; then it ends and frees its
    /// slot (players PLAY right after SETUP). Default 20.
    pub setup_timeout_s: u64,
    /// Seconds a connection that has set up no session may stay quiet between requests; then
    /// it is closed. Default 30.
    pub idle_timeout_s: u64,
    /// Prefix length by which IPv4 clients are counted against the per-client caps (sessions
    /// and connections, RTSP and HTTP): 32 counts each address, 24 a /24. Default 32.
    pub client_prefix_v4: u8,
    /// Prefix length by which IPv6 clients are counted (one client usually holds a /64, and
    /// could otherwise take millions of addresses). Default 64.
    pub client_prefix_v6: u8,
}

impl Default for RtspSection {
    fn default() -> Self {
        Self {
            listen: "0.0.0.0:8554".into(),
            rtsps_listen: String::new(),
            rtp_port: 6970,
            session_timeout_s: 60,
            paused_session_timeout_s: 300,
            silence_timeout_s: 20,
            max_sessions: 1000,
            max_sessions_per_client: 256,
            reserved_sessions: None,
            reserved_connections: None,
            max_connections: 4096,
            max_connections_per_client: 300,
            request_timeout_s: 10,
            max_message_kib: 64,
            setup_timeout_s: 20,
            idle_timeout_s: 30,
            client_prefix_v4: 32,
            client_prefix_v6: 64,
        }
    }
}

/// `[sender]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SenderSection {
    /// Interval between RTCP sender reports of a stream, in ms. Default 5000.
    pub rtcp_interval_ms: u64,
    /// Most packets handed to one `sendmmsg` call. Default 64.
    pub batch_packets: usize,
    /// The sender thread wakes at most once per this many µs and sends every packet due by then
    /// in batches, so a packet may leave up to this late. Default 500; 0 wakes for every packet.
    pub quantum_us: u64,
    /// UDP send buffer requested for the RTP socket, in KiB. Default 8192.
    pub udp_send_buffer_kib: u64,
    /// Frames queued per RTSP connection for interleaved (TCP) delivery before the stream waits
    /// for the client. Default 512.
    pub tcp_queue_frames: usize,
    /// How long each UDP stream keeps the packets it sent, to answer a client's retransmission
    /// requests (RTCP generic NACK, RFC 4585 §6.2.1), in ms; also the `rtx-time` offered to
    /// players that negotiate RFC 4588 RTX. Default 1000; 0 answers none.
    pub retransmit_ms: u64,
    /// Sender threads (shards): sessions are hashed to them, each with its own pacer, batches
    /// and socket on the one RTP port. Default 0: one per core.
    pub threads: usize,
    /// Send a stream's packets due in the same quantum as one UDP GSO buffer (`UDP_SEGMENT`)
    /// where the kernel has it. Default true.
    pub gso: bool,
}

impl Default for SenderSection {
    fn default() -> Self {
        Self {
            rtcp_interval_ms: 5000,
            batch_packets: 64,
            quantum_us: 500,
            udp_send_buffer_kib: 8192,
            tcp_queue_frames: 512,
            retransmit_ms: 1000,
            threads: 0,
            gso: true,
        }
    }
}

/// `[sched]`: the XTREAM cycle scheduler and admission control.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedSection {
    /// Cycle length T, in ms: each disk does one round of reads per cycle. Default 1000.
    pub cycle_ms: u64,
    /// Cycles a stream's blocks are read ahead: a block is read in the cycle in which its
    /// deadline falls before the end of the `lookahead_cycles`-th next cycle (1 = XTREAM's
    /// double buffer). Default 2.
    pub lookahead_cycles: u32,
    /// Admission policy: `conservative` (min curve, peak rates), `aggressive` (mean curve, peak
    /// rates), `aggressive-avg` (mean curve, average rates) or `off`. Default `aggressive-avg`.
    pub admission: String,
    /// Reads in flight per disk. Default 1 (XTREAM: one IO thread per disk).
    pub disk_queue_depth: u32,
    /// Block cache for unpinned blocks, in MiB. Default 256.
    pub cache_mib: u64,
    /// Memory for objects' first blocks, kept so that a start from the beginning waits for no
    /// disk, in MiB (beside `cache_mib`; the objects started least recently leave first when
    /// they do not all fit). 0: none. Default 64.
    pub resident_mib: u64,
    /// Delay from a start's first block in memory to its first packet, in ms. Default 20.
    pub startup_delay_ms: u64,
    /// Most streams admitted at once. Default 10000.
    pub max_streams: usize,
    /// Share of each disk's time kept for non-real-time work (reorganisation copies), in
    /// percent; admission leaves it free in every cycle. Default 20.
    pub nrt_share_percent: u32,
    /// The node's network egress for streams, Mb/s: admission refuses (453) a stream whose
    /// rate would take what the node sends over it. 0: no limit. Default 0.
    pub egress_mbps: u64,
    /// Degrade instead of refuse: a PLAY of a title with renditions that admission refuses
    /// at the rendition it would start on is admitted at the highest one that fits, and when
    /// none fits, sessions playing higher renditions are stepped down, fairly, to make room
    /// (docs/design/renditions.md). Default false.
    pub degrade: bool,
}

impl Default for SchedSection {
    fn default() -> Self {
        Self {
            cycle_ms: 1000,
            lookahead_cycles: 2,
            admission: "aggressive-avg".into(),
            disk_queue_depth: 1,
            cache_mib: 256,
            resident_mib: 64,
            startup_delay_ms: 20,
            max_streams: 10_000,
            nrt_share_percent: 20,
            egress_mbps: 0,
            degrade: false,
        }
    }
}

/// `[http]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpSection {
    /// Address the HTTP API binds; empty disables it. Default `0.0.0.0:8080`.
    pub listen: String,
    /// Target duration of an HLS segment (`/hls/NAME/N.ts`), in seconds: segments are cut at
    /// the seek point (keyframe) nearest each multiple, so they last about this long, more when
    /// keyframes are further apart. 1 to 60. Default 4.
    pub hls_segment_s: u64,
    /// Most HTTP connections open at once (at most `rtsp.max_connections`); more get 503 and
    /// are closed. Every connection must send a request's headers within 10 s. Default 1024.
    pub max_connections: usize,
    /// Most HTTP connections one client (IP address) may hold; more get 503 and are closed.
    /// Loopback clients are exempt. Default 64.
    pub max_connections_per_client: usize,
}

impl Default for HttpSection {
    fn default() -> Self {
        Self {
            listen: "0.0.0.0:8080".into(),
            hls_segment_s: 4,
            max_connections: 1024,
            max_connections_per_client: 64,
        }
    }
}

/// `[media]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MediaSection {
    /// A directory whose `.ts` files are ingested and served, including files that appear while
    /// the server runs. Default: none.
    pub dir: Option<PathBuf>,
    /// How often the directory is scanned, in ms. Default 1000.
    pub scan_interval_ms: u64,
}

impl Default for MediaSection {
    fn default() -> Self {
        Self { dir: None, scan_interval_ms: 1000 }
    }
}

/// `[transcode]`: ladders of renditions made by the server (`docs/design/renditions.md`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TranscodeSection {
    /// The ladder made of every title uploaded without a `?ladder=` of its own and of every
    /// file of the media directory, e.g. `"720p,480p,240p"` (rungs taller than a title are
    /// left out). Default: empty, none.
    pub ladder: String,
    /// Milliseconds between two key frames of every rendition (500 to 10000). Default 2000.
    pub idr_interval_ms: u64,
    /// Threads for ffmpeg's decoder, filters and each encoder (0: ffmpeg chooses). Default 0.
    pub threads: u32,
    /// The jobs' nice level (0 to 19; playback runs at 0). Default 10.
    pub nice: u8,
    /// Whether the jobs run in the idle scheduling class (`SCHED_IDLE`: only on CPU time no
    /// playback thread wants). Default true.
    pub idle_class: bool,
    /// Jobs at once (1 to 16). Default 1.
    pub jobs: usize,
}

impl Default for TranscodeSection {
    fn default() -> Self {
        let budget = isochron_transcode::Budget::default();
        Self {
            ladder: String::new(),
            idr_interval_ms: 2000,
            threads: budget.threads,
            nice: budget.nice,
            idle_class: true,
            jobs: 1,
        }
    }
}

/// `[live]`: feeds published over RTSP (ANNOUNCE, RECORD; `docs/design/live.md`), recorded as
/// they arrive on an admitted write stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LiveSection {
    /// The mean rate admitted for a feed whose description gives no `b=AS` bandwidth, kb/s.
    /// Default 8000.
    pub default_rate_kbps: u64,
    /// A feed's peak rate as a percentage of its mean (100 to 1000): what admission reserves
    /// the disks for, and the most the recorder takes. Default 200.
    pub peak_percent: u32,
    /// How much of a running feed is kept in memory for viewers to go back into (time-shift,
    /// `Range: npt=…`), seconds (0 to 3600; each feed's memory grows with it). Default 60.
    pub window_s: u64,
    /// Where SRT publishers of MPEG-TS connect (UDP, `srt://HOST:PORT?streamid=publish:NAME`),
    /// like `0.0.0.0:8890`. Default: none (no SRT).
    pub srt_listen: String,
    /// How long a feed whose publisher dropped (its connection lost without TEARDOWN, its SRT
    /// connection timed out) waits for a publisher of the same name and tracks to go on with
    /// it, seconds (0 to 3600; 0: the feed ends at once). Default 10.
    pub grace_s: u64,
}

impl Default for LiveSection {
    fn default() -> Self {
        Self {
            default_rate_kbps: 8000,
            peak_percent: 200,
            window_s: 60,
            srt_listen: String::new(),
            grace_s: 10,
        }
    }
}

/// `[live]`, checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveSettings {
    /// The mean rate of a feed that announces none.
    pub default_rate: BitRate,
    /// Peak over mean, percent.
    pub peak_percent: u32,
    /// The time-shift window kept of each feed.
    pub window: Duration,
    /// Where SRT publishers connect, if anywhere.
    pub srt_listen: Option<SocketAddr>,
    /// How long a dropped publisher's feed waits for it.
    pub grace: Duration,
}

impl LiveSettings {
    /// The mean and peak rates to admit for a feed that announced `bandwidth_kbps` (`b=AS`).
    #[must_use]
    pub fn rates(&self, bandwidth_kbps: Option<u64>) -> (BitRate, BitRate) {
        let mean = bandwidth_kbps
            .filter(|&k| k > 0)
            .map_or(self.default_rate, |k| BitRate(k.saturating_mul(1000)));
        (mean, BitRate(mean.0.saturating_mul(u64::from(self.peak_percent)) / 100))
    }
}

/// `[cluster]`: run as one node of a cluster whose shared state is in etcd
/// (`docs/design/cluster.md`). Off unless `etcd` is set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterSection {
    /// etcd endpoints; empty: a single node (the catalog in redb).
    pub etcd: Vec<String>,
    /// This node's name.
    pub node: String,
    /// The address other nodes and clients reach this node at; empty: the RTSP listen address.
    pub advertise: String,
    /// TCP port of the control connections; the same UDP port takes relayed RTP.
    pub control_port: u16,
    /// Key prefix of the cluster in etcd.
    pub prefix: String,
    /// TTL of the node's lease in etcd, in seconds.
    pub lease_ttl_s: u64,
    /// Seconds a node's lease must have lapsed before the node counts as dead and the cluster
    /// re-creates its copies from the other replicas (`docs/design/takeover.md`): a quick
    /// restart within it triggers no re-replication.
    pub dead_after_s: u64,
}

impl Default for ClusterSection {
    fn default() -> Self {
        Self {
            etcd: Vec::new(),
            node: String::new(),
            advertise: String::new(),
            control_port: 8556,
            prefix: "/isochron/".into(),
            lease_ttl_s: 5,
            dead_after_s: 30,
        }
    }
}

/// A config problem, naming the key at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The IO error.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this schema (unknown key, wrong type …).
    #[error("config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message, which names the key and line.
        message: String,
    },
    /// A key has a value out of range.
    #[error("config key {key}: {message}")]
    Invalid {
        /// The dotted key, e.g. `store.block_size_kib`.
        key: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A key of `[auth]` is wrong (its key names the user, e.g. `auth.users[1].token`).
    #[error("config key {0}")]
    Auth(#[from] isochron_auth::ConfigError),
}

/// Checked runtime settings derived from a [`ConfigFile`].
#[derive(Clone, Debug)]
pub struct Settings {
    /// The store directory.
    pub data_dir: PathBuf,
    /// Block size for a new store.
    pub block_size: Bytes,
    /// Disks for a new store.
    pub disks: Vec<DiskSpec>,
    /// Seed a new store with the demo clip.
    pub seed_demo: bool,
    /// Copies of every block (`store.replication`): for a new store (1 when unset), and checked
    /// against an existing store's.
    pub replication: Option<u8>,
    /// RTSP listen address.
    pub rtsp_listen: SocketAddr,
    /// The RTSPS listen address (`rtsp.rtsps_listen`), with `tls`.
    pub rtsps_listen: Option<SocketAddr>,
    /// The certificate and key (`[tls]`), for RTSPS and HTTPS.
    pub tls: Option<crate::tls::Tls>,
    /// RTP port (RTCP = +1); 0 = pick.
    pub rtp_port: u16,
    /// UDP session idle timeout.
    pub session_timeout: Duration,
    /// Paused UDP session idle timeout.
    pub paused_session_timeout: Duration,
    /// Idle timeout of a playing UDP session whose client has sent RTCP.
    pub silence_timeout: Duration,
    /// Session limit.
    pub max_sessions: usize,
    /// Session limit per client address.
    pub max_sessions_per_client: usize,
    /// Sessions kept for authenticated and loopback clients.
    pub reserved_sessions: usize,
    /// Connections given only on probation.
    pub reserved_connections: usize,
    /// RTSP connection limit.
    pub max_connections: usize,
    /// RTSP connection limit per client address.
    pub max_connections_per_client: usize,
    /// Time to send a whole RTSP request.
    pub request_timeout: Duration,
    /// Life of a session set up and never played.
    pub setup_timeout: Duration,
    /// Quiet allowed to a connection that set up no session.
    pub idle_timeout: Duration,
    /// Prefix lengths (IPv4, IPv6) by which clients are counted against per-client caps.
    pub client_prefix: (u8, u8),
    /// HTTP connection limit.
    pub http_max_connections: usize,
    /// HTTP connection limit per client address.
    pub http_max_connections_per_client: usize,
    /// Largest RTSP message.
    pub max_message: Bytes,
    /// RTCP SR interval.
    pub rtcp_interval: Duration,
    /// sendmmsg batch.
    pub batch_packets: usize,
    /// The sender's wake-up quantum.
    pub send_quantum: Duration,
    /// How long sent packets are kept for retransmission.
    pub retransmit_window: Duration,
    /// Sender threads (`sender.threads`, resolved: at least 1).
    pub sender_threads: usize,
    /// UDP GSO asked for (`sender.gso`).
    pub gso: bool,
    /// UDP send buffer.
    pub udp_send_buffer: Bytes,
    /// Interleaved frames queued per connection.
    pub tcp_queue_frames: usize,
    /// The cycle scheduler's config.
    pub cycle: CycleConfig,
    /// Admission control's config.
    pub admission: AdmissionConfig,
    /// Degrade instead of refuse (`sched.degrade`).
    pub degrade: bool,
    /// Fraction of disk time for non-real-time work.
    pub nrt_share: f64,
    /// HTTP listen address, if enabled.
    pub http_listen: Option<SocketAddr>,
    /// Target HLS segment duration.
    pub hls_segment: Duration,
    /// Watched media directory.
    pub media_dir: Option<PathBuf>,
    /// Scan interval of the media directory.
    pub media_scan_interval: Duration,
    /// Cluster mode, when `[cluster] etcd` is set.
    pub cluster: Option<crate::cluster::ClusterSettings>,
    /// The access policy (`[auth]`).
    pub auth: std::sync::Arc<isochron_auth::Authority>,
    /// Ladders made by the server (`[transcode]`).
    pub transcode: crate::transcoder::TranscodeSettings,
    /// Published feeds (`[live]`).
    pub live: LiveSettings,
}

impl ConfigFile {
    /// Reads and parses `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
        Self::parse(&text, path)
    }

    /// Parses TOML text; `path` is only used in messages.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        toml::from_str(text)
            .map_err(|e| ConfigError::Parse { path: path.to_owned(), message: e.to_string() })
    }

    /// Checks every value and converts to runtime settings.
    pub fn validate(&self) -> Result<Settings, ConfigError> {
        let invalid = |key, message: &str| ConfigError::Invalid { key, message: message.into() };
        let s = &self.store;
        // 16 KiB at least: a cluster stripes each stream over its nodes block by block, and a
        // smaller block spreads a node's share of a stream more evenly in time
        // (docs/results/fig4.md).
        if s.block_size_kib < 16
            || !s.block_size_kib.is_multiple_of(4)
            || s.block_size_kib > 64 * 1024
        {
            return Err(invalid(
                "store.block_size_kib",
                &format!("{} is not a multiple of 4 between 16 and 65536", s.block_size_kib),
            ));
        }
        if let Some(k) = s.replication
            && !(1..=isochron_base::MAX_REPLICAS).contains(&usize::from(k))
        {
            return Err(invalid(
                "store.replication",
                &format!("{k} is not between 1 and {}", isochron_base::MAX_REPLICAS),
            ));
        }
        let addr = |key, v: &str| {
            v.parse::<SocketAddr>().map_err(|e| ConfigError::Invalid {
                key,
                message: format!("{v:?} is not an address like 0.0.0.0:8554 ({e})"),
            })
        };
        let rtsp_listen = addr("rtsp.listen", &self.rtsp.listen)?;
        let tls = match (self.tls.cert_file.as_str(), self.tls.key_file.as_str()) {
            ("", "") => None,
            ("", _) => return Err(invalid("tls.cert_file", "must be set with tls.key_file")),
            (_, "") => return Err(invalid("tls.key_file", "must be set with tls.cert_file")),
            (cert, key) => Some(
                crate::tls::Tls::load(Path::new(cert), Path::new(key))
                    .map_err(|e| ConfigError::Invalid { key: e.key, message: e.message })?,
            ),
        };
        let rtsps_listen = match self.rtsp.rtsps_listen.as_str() {
            "" => None,
            _ if tls.is_none() => {
                return Err(invalid(
                    "rtsp.rtsps_listen",
                    "needs a certificate: set tls.cert_file and tls.key_file",
                ));
            }
            v => Some(addr("rtsp.rtsps_listen", v)?),
        };
        let http_listen = match self.http.listen.as_str() {
            "" => None,
            v => Some(addr("http.listen", v)?),
        };
        if self.rtsp.rtp_port == u16::MAX {
            return Err(invalid("rtsp.rtp_port", "65535 leaves no port for RTCP"));
        }
        if self.rtsp.session_timeout_s < 5 {
            return Err(invalid("rtsp.session_timeout_s", "must be at least 5"));
        }
        if self.rtsp.paused_session_timeout_s < self.rtsp.session_timeout_s {
            return Err(invalid(
                "rtsp.paused_session_timeout_s",
                "must be at least rtsp.session_timeout_s",
            ));
        }
        if self.rtsp.silence_timeout_s < 5 {
            return Err(invalid("rtsp.silence_timeout_s", "must be at least 5"));
        }
        if self.rtsp.max_message_kib == 0 {
            return Err(invalid("rtsp.max_message_kib", "must be at least 1"));
        }
        for (key, v) in [
            ("rtsp.max_sessions_per_client", self.rtsp.max_sessions_per_client),
            ("rtsp.max_connections", self.rtsp.max_connections),
            ("rtsp.max_connections_per_client", self.rtsp.max_connections_per_client),
            ("http.max_connections", self.http.max_connections),
            ("http.max_connections_per_client", self.http.max_connections_per_client),
        ] {
            if v == 0 {
                return Err(invalid(key, "must be at least 1"));
            }
        }
        if self.rtsp.reserved_sessions.is_some_and(|r| r >= self.rtsp.max_sessions) {
            return Err(invalid("rtsp.reserved_sessions", "must be less than rtsp.max_sessions"));
        }
        if self.rtsp.reserved_connections.is_some_and(|r| r >= self.rtsp.max_connections) {
            return Err(invalid(
                "rtsp.reserved_connections",
                "must be less than rtsp.max_connections",
            ));
        }
        if !(1..=600).contains(&self.rtsp.request_timeout_s) {
            return Err(invalid("rtsp.request_timeout_s", "must be between 1 and 600"));
        }
        if !(1..=3600).contains(&self.rtsp.setup_timeout_s) {
            return Err(invalid("rtsp.setup_timeout_s", "must be between 1 and 3600"));
        }
        if !(1..=3600).contains(&self.rtsp.idle_timeout_s) {
            return Err(invalid("rtsp.idle_timeout_s", "must be between 1 and 3600"));
        }
        if !(8..=32).contains(&self.rtsp.client_prefix_v4) {
            return Err(invalid("rtsp.client_prefix_v4", "must be between 8 and 32"));
        }
        if !(16..=128).contains(&self.rtsp.client_prefix_v6) {
            return Err(invalid("rtsp.client_prefix_v6", "must be between 16 and 128"));
        }
        if self.sender.rtcp_interval_ms < 100 {
            return Err(invalid("sender.rtcp_interval_ms", "must be at least 100"));
        }
        if !(1..=1024).contains(&self.sender.batch_packets) {
            return Err(invalid("sender.batch_packets", "must be between 1 and 1024"));
        }
        if self.sender.quantum_us > 20_000 {
            return Err(invalid("sender.quantum_us", "must be at most 20000 (20 ms)"));
        }
        if self.sender.retransmit_ms > 10_000 {
            return Err(invalid("sender.retransmit_ms", "must be at most 10000 (10 s)"));
        }
        if self.sender.threads > 256 {
            return Err(invalid("sender.threads", "must be at most 256 (0: one per core)"));
        }
        if self.sender.tcp_queue_frames < 16 {
            return Err(invalid("sender.tcp_queue_frames", "must be at least 16"));
        }
        if !(10..=60_000).contains(&self.sched.cycle_ms) {
            return Err(invalid("sched.cycle_ms", "must be between 10 and 60000"));
        }
        if !(1..=8).contains(&self.sched.lookahead_cycles) {
            return Err(invalid("sched.lookahead_cycles", "must be between 1 and 8"));
        }
        let policy: AdmissionPolicy = self.sched.admission.parse().map_err(|_| {
            invalid(
                "sched.admission",
                &format!(
                    "{:?} is not one of conservative, aggressive, aggressive-avg, off",
                    self.sched.admission
                ),
            )
        })?;
        if self.sched.disk_queue_depth == 0 {
            return Err(invalid("sched.disk_queue_depth", "must be at least 1"));
        }
        if !(1..=90).contains(&self.sched.nrt_share_percent) {
            return Err(invalid("sched.nrt_share_percent", "must be between 1 and 90"));
        }
        if self.sched.egress_mbps > 1_000_000 {
            return Err(invalid(
                "sched.egress_mbps",
                "must be at most 1000000 (1 Tb/s; 0: no limit)",
            ));
        }
        if !(1..=60).contains(&self.http.hls_segment_s) {
            return Err(invalid("http.hls_segment_s", "must be between 1 and 60"));
        }
        if self.media.scan_interval_ms < 50 {
            return Err(invalid("media.scan_interval_ms", "must be at least 50"));
        }
        let transcode = self.transcode_settings()?;
        let disks = s
            .disks
            .iter()
            .map(|d| {
                d.parse::<DiskSpec>().map_err(|e| ConfigError::Invalid {
                    key: "store.disks",
                    message: format!("{d:?}: {e}"),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Settings {
            data_dir: s.data_dir.clone(),
            block_size: Bytes::kib(s.block_size_kib),
            disks,
            seed_demo: s.seed_demo,
            replication: s.replication,
            rtsp_listen,
            rtsps_listen,
            tls,
            rtp_port: self.rtsp.rtp_port,
            session_timeout: Duration::from_secs(self.rtsp.session_timeout_s),
            paused_session_timeout: Duration::from_secs(self.rtsp.paused_session_timeout_s),
            silence_timeout: Duration::from_secs(self.rtsp.silence_timeout_s),
            max_sessions: self.rtsp.max_sessions,
            max_sessions_per_client: self.rtsp.max_sessions_per_client,
            reserved_sessions: self.rtsp.reserved_sessions.unwrap_or(self.rtsp.max_sessions / 10),
            reserved_connections: self
                .rtsp
                .reserved_connections
                .unwrap_or(self.rtsp.max_connections / 16),
            max_connections: self.rtsp.max_connections,
            max_connections_per_client: self.rtsp.max_connections_per_client,
            request_timeout: Duration::from_secs(self.rtsp.request_timeout_s),
            setup_timeout: Duration::from_secs(self.rtsp.setup_timeout_s),
            idle_timeout: Duration::from_secs(self.rtsp.idle_timeout_s),
            client_prefix: (self.rtsp.client_prefix_v4, self.rtsp.client_prefix_v6),
            http_max_connections: self.http.max_connections,
            http_max_connections_per_client: self.http.max_connections_per_client,
            max_message: Bytes::kib(self.rtsp.max_message_kib),
            rtcp_interval: Duration::from_millis(self.sender.rtcp_interval_ms),
            batch_packets: self.sender.batch_packets,
            send_quantum: Duration::from_micros(self.sender.quantum_us),
            retransmit_window: Duration::from_millis(self.sender.retransmit_ms),
            gso: self.sender.gso,
            sender_threads: match self.sender.threads {
                0 => std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
                n => n,
            },
            udp_send_buffer: Bytes::kib(self.sender.udp_send_buffer_kib),
            tcp_queue_frames: self.sender.tcp_queue_frames,
            cycle: CycleConfig {
                cycle: Duration::from_millis(self.sched.cycle_ms),
                disk_queue_depth: self.sched.disk_queue_depth,
                cache_capacity: Bytes::mib(self.sched.cache_mib),
                resident_capacity: Bytes::mib(self.sched.resident_mib),
                startup_delay: Duration::from_millis(self.sched.startup_delay_ms),
                max_streams: self.sched.max_streams,
                lookahead_cycles: self.sched.lookahead_cycles,
                ..CycleConfig::default()
            },
            admission: AdmissionConfig {
                policy,
                cycle: Duration::from_millis(self.sched.cycle_ms),
                nrt_share: f64::from(self.sched.nrt_share_percent) / 100.0,
                egress: (self.sched.egress_mbps > 0)
                    .then(|| BitRate(self.sched.egress_mbps * 1_000_000)),
                ..AdmissionConfig::default()
            },
            degrade: self.sched.degrade,
            nrt_share: f64::from(self.sched.nrt_share_percent) / 100.0,
            http_listen,
            hls_segment: Duration::from_secs(self.http.hls_segment_s),
            cluster: self.cluster_settings(rtsp_listen)?,
            media_dir: self.media.dir.clone(),
            media_scan_interval: Duration::from_millis(self.media.scan_interval_ms),
            auth: std::sync::Arc::new(isochron_auth::Authority::new(&self.auth, rand::random())?),
            transcode,
            live: self.live_settings()?,
        })
    }

    fn live_settings(&self) -> Result<LiveSettings, ConfigError> {
        let l = &self.live;
        let invalid = |key, message: &str| ConfigError::Invalid { key, message: message.into() };
        if !(1..=10_000_000).contains(&l.default_rate_kbps) {
            return Err(invalid("live.default_rate_kbps", "must be between 1 and 10000000"));
        }
        if !(100..=1000).contains(&l.peak_percent) {
            return Err(invalid("live.peak_percent", "must be between 100 and 1000"));
        }
        if l.window_s > 3600 {
            return Err(invalid("live.window_s", "must be between 0 and 3600"));
        }
        if l.grace_s > 3600 {
            return Err(invalid("live.grace_s", "must be between 0 and 3600"));
        }
        let srt_listen = match l.srt_listen.as_str() {
            "" => None,
            v => Some(v.parse::<SocketAddr>().map_err(|e| ConfigError::Invalid {
                key: "live.srt_listen",
                message: format!("{v:?} is not an address like 0.0.0.0:8890 ({e})"),
            })?),
        };
        Ok(LiveSettings {
            default_rate: BitRate(l.default_rate_kbps * 1000),
            peak_percent: l.peak_percent,
            window: Duration::from_secs(l.window_s),
            srt_listen,
            grace: Duration::from_secs(l.grace_s),
        })
    }

    fn transcode_settings(&self) -> Result<crate::transcoder::TranscodeSettings, ConfigError> {
        let t = &self.transcode;
        let invalid = |key, message: &str| ConfigError::Invalid { key, message: message.into() };
        let ladder = match t.ladder.trim() {
            "" => None,
            spec => Some(isochron_transcode::Ladder::parse(spec).map_err(|e| {
                ConfigError::Invalid { key: "transcode.ladder", message: e.to_string() }
            })?),
        };
        if !(500..=10_000).contains(&t.idr_interval_ms) {
            return Err(invalid("transcode.idr_interval_ms", "must be between 500 and 10000"));
        }
        let idr_interval = Duration::from_millis(t.idr_interval_ms);
        if t.nice > 19 {
            return Err(invalid("transcode.nice", "must be between 0 and 19"));
        }
        if !(1..=16).contains(&t.jobs) {
            return Err(invalid("transcode.jobs", "must be between 1 and 16"));
        }
        Ok(crate::transcoder::TranscodeSettings {
            ladder,
            idr_interval,
            budget: isochron_transcode::Budget {
                threads: t.threads,
                nice: t.nice,
                idle: t.idle_class,
            },
            jobs: t.jobs,
        })
    }
}

impl ConfigFile {
    fn cluster_settings(
        &self,
        rtsp_listen: SocketAddr,
    ) -> Result<Option<crate::cluster::ClusterSettings>, ConfigError> {
        let c = &self.cluster;
        let invalid = |key, message: String| ConfigError::Invalid { key, message };
        if c.etcd.is_empty() {
            return Ok(None);
        }
        for e in &c.etcd {
            if !(e.starts_with("http://") || e.starts_with("https://")) {
                return Err(invalid(
                    "cluster.etcd",
                    format!("{e:?} is not an endpoint like http://127.0.0.1:2379"),
                ));
            }
        }
        if c.node.is_empty()
            || c.node.len() > 64
            || !c.node.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(invalid(
                "cluster.node",
                format!("{:?} is not a node name (1 to 64 of a-z, 0-9, - and _)", c.node),
            ));
        }
        let advertise = match c.advertise.as_str() {
            "" if !rtsp_listen.ip().is_unspecified() => rtsp_listen.ip(),
            "" => {
                return Err(invalid(
                    "cluster.advertise",
                    "must be set when rtsp.listen is a wildcard address".into(),
                ));
            }
            a => a.parse().map_err(|e| {
                invalid("cluster.advertise", format!("{a:?} is not an IP address ({e})"))
            })?,
        };
        if !(1..=60).contains(&c.lease_ttl_s) {
            return Err(invalid("cluster.lease_ttl_s", "must be between 1 and 60".into()));
        }
        if c.dead_after_s > 86_400 {
            return Err(invalid("cluster.dead_after_s", "must be at most 86400 (a day)".into()));
        }
        Ok(Some(crate::cluster::ClusterSettings {
            etcd: c.etcd.clone(),
            node: c.node.clone(),
            advertise,
            control_port: c.control_port,
            prefix: c.prefix.clone(),
            lease_ttl: Duration::from_secs(c.lease_ttl_s),
            dead_after: Duration::from_secs(c.dead_after_s),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = include_str!("../../../config/example.toml");

    #[test]
    fn shipped_example_equals_defaults() {
        let parsed = ConfigFile::parse(EXAMPLE, Path::new("config/example.toml")).unwrap();
        assert_eq!(parsed, ConfigFile::default());
        parsed.validate().unwrap();
    }

    #[test]
    fn empty_file_is_the_defaults() {
        assert_eq!(ConfigFile::parse("", Path::new("x")).unwrap(), ConfigFile::default());
    }

    #[test]
    fn errors_name_the_key() {
        let cases: &[(&str, &str)] = &[
            ("[store]\nblock_sise_kib = 4", "unknown field `block_sise_kib`"),
            ("[nope]\n", "unknown field `nope`"),
            ("[rtsp]\nrtp_port = \"x\"", "rtp_port"),
            ("[store]\nblock_size_kib = 66", "store.block_size_kib"),
            ("[store]\nreplication = 0", "store.replication"),
            ("[store]\nreplication = 9", "store.replication"),
            ("[rtsp]\nlisten = \"localhost\"", "rtsp.listen"),
            ("[rtsp]\nrtsps_listen = \"0.0.0.0:322\"", "rtsp.rtsps_listen"),
            ("[tls]\ncert_file = \"c.pem\"", "tls.key_file"),
            ("[tls]\nkey_file = \"k.pem\"", "tls.cert_file"),
            ("[tls]\ncert_file = \"/nonexistent/c.pem\"\nkey_file = \"k.pem\"", "tls.cert_file"),
            ("[http]\nlisten = \"1.2.3.4\"", "http.listen"),
            ("[rtsp]\nsession_timeout_s = 1", "rtsp.session_timeout_s"),
            ("[rtsp]\nmax_sessions = 10\nreserved_sessions = 10", "rtsp.reserved_sessions"),
            ("[rtsp]\nreserved_connections = 4096", "rtsp.reserved_connections"),
            ("[rtsp]\npaused_session_timeout_s = 10", "rtsp.paused_session_timeout_s"),
            ("[rtsp]\nsilence_timeout_s = 4", "rtsp.silence_timeout_s"),
            ("[sender]\nbatch_packets = 0", "sender.batch_packets"),
            ("[sender]\nquantum_us = 50000", "sender.quantum_us"),
            ("[sender]\nretransmit_ms = 60000", "sender.retransmit_ms"),
            ("[sched]\nlookahead_cycles = 0", "sched.lookahead_cycles"),
            ("[sched]\nadmission = \"lenient\"", "sched.admission"),
            ("[sender]\nthreads = 1000", "sender.threads"),
            ("[sched]\ncycle_ms = 1", "sched.cycle_ms"),
            ("[http]\nhls_segment_s = 0", "http.hls_segment_s"),
            ("[live]\ndefault_rate_kbps = 0", "live.default_rate_kbps"),
            ("[live]\npeak_percent = 50", "live.peak_percent"),
            ("[live]\nwindow_s = 7200", "live.window_s"),
            ("[store]\ndisks = [\"d0,seek_ms=x\"]", "store.disks"),
            ("[store]\ndisks = [\"d0,speed=3\"]", "store.disks"),
            ("[cluster]\netcd = [\"127.0.0.1:2379\"]", "cluster.etcd"),
            ("[cluster]\netcd = [\"http://e:2379\"]\nnode = \"a b\"", "cluster.node"),
            ("[cluster]\netcd = [\"http://e:2379\"]\nnode = \"n1\"", "cluster.advertise"),
            (
                "[cluster]\netcd = [\"http://e:2379\"]\nnode = \"n1\"\nadvertise = \"10.0.0.1\"\n\
                 dead_after_s = 100000",
                "cluster.dead_after_s",
            ),
        ];
        for (text, want) in cases {
            let msg = match ConfigFile::parse(text, Path::new("c.toml")) {
                Err(e) => e.to_string(),
                Ok(c) => c.validate().map(|_| ()).unwrap_err().to_string(),
            };
            assert!(msg.contains(want), "{text:?}: {msg:?} lacks {want:?}");
        }
    }

    #[test]
    fn a_feed_is_admitted_at_its_announced_bandwidth_or_the_default() {
        let live = ConfigFile::parse("[live]\npeak_percent = 150", Path::new("c"))
            .unwrap()
            .validate()
            .unwrap()
            .live;
        assert_eq!(live.rates(Some(1628)), (BitRate(1_628_000), BitRate(2_442_000)));
        // None, or a `b=AS:0`: the default, 8 Mb/s.
        assert_eq!(live.rates(None), (BitRate(8_000_000), BitRate(12_000_000)));
        assert_eq!(live.rates(Some(0)), live.rates(None));
    }

    #[test]
    fn http_can_be_disabled() {
        let c = ConfigFile::parse("[http]\nlisten = \"\"", Path::new("c")).unwrap();
        assert!(c.validate().unwrap().http_listen.is_none());
    }
}
