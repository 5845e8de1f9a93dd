//! `isochron serve`.

#![allow(clippy::print_stdout)]

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use isochron_server::config::ConfigFile;

/// Flags override the config file, which overrides the defaults.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Config file (TOML; see config/example.toml).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Store directory [config: store.data_dir].
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// RTSP listen address [config: rtsp.listen].
    #[arg(long, value_name = "ADDR")]
    rtsp: Option<String>,
    /// RTSPS (RTSP over TLS) listen address; needs --tls-cert and --tls-key (or tls.cert_file, key_file)
    /// [config: rtsp.rtsps_listen].
    #[arg(long, value_name = "ADDR")]
    rtsps: Option<String>,
    /// SRT listen address (UDP) of publishers of MPEG-TS, `srt://HOST:PORT?streamid=publish:NAME`
    /// [config: live.srt_listen].
    #[arg(long, value_name = "ADDR")]
    srt: Option<String>,
    /// TLS certificate chain (PEM) for RTSPS and HTTPS [config: tls.cert_file].
    #[arg(long, value_name = "FILE")]
    tls_cert: Option<String>,
    /// TLS private key (PEM) [config: tls.key_file].
    #[arg(long, value_name = "FILE")]
    tls_key: Option<String>,
    /// HTTP listen address, or "" to disable [config: http.listen].
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,
    /// UDP port for RTP, RTCP on the next; 0 picks a pair [config: rtsp.rtp_port].
    #[arg(long, value_name = "PORT")]
    rtp_port: Option<u16>,
    /// Ingest and serve every .ts file in DIR, also ones added later [config: media.dir].
    #[arg(long, value_name = "DIR")]
    media: Option<PathBuf>,
    /// Do not seed a new store with the demo clip [config: store.seed_demo].
    #[arg(long)]
    no_demo: bool,
    /// Copies of every block a new store keeps (1 to 8), each on a distinct disk (distinct
    /// nodes in a cluster with enough of them); reads fail over to the next copy. Fixed when the
    /// store is created: another value for an existing store is an error
    /// [config: store.replication].
    #[arg(long, value_name = "K")]
    replication: Option<u8>,
    /// A disk of this node (repeat for several): DIR, or DIR,seek_ms=10,rate_mib_s=4 for an
    /// emulated disk [config: store.disks].
    #[arg(long = "disk", value_name = "DIR[,seek_ms=N,rate_mib_s=N]")]
    disks: Vec<String>,
    /// Run as a node of the cluster whose state is in this etcd (comma-separated endpoints)
    /// [config: cluster.etcd].
    #[arg(long, value_name = "URL[,URL…]", value_delimiter = ',')]
    etcd: Vec<String>,
    /// This node's name in the cluster [config: cluster.node].
    #[arg(long, value_name = "NAME")]
    node: Option<String>,
    /// The IP other nodes and clients reach this node at [config: cluster.advertise].
    #[arg(long, value_name = "HOST")]
    advertise: Option<String>,
    /// TCP (control) and UDP (relay) port between nodes [config: cluster.control_port].
    #[arg(long, value_name = "PORT")]
    control_port: Option<u16>,
    /// Admission control: conservative (min curve, peak rates), aggressive (mean curve, peak
    /// rates), aggressive-avg (mean curve, average rates) or off [config: sched.admission].
    #[arg(
        long,
        value_name = "MODE",
        value_parser = ["conservative", "aggressive", "aggressive-avg", "off"]
    )]
    admission: Option<String>,
    /// The node's network egress for streams, Mb/s; admission refuses past it (0: no limit)
    /// [config: sched.egress_mbps].
    #[arg(long, value_name = "MBPS")]
    egress_mbps: Option<u64>,
    /// Degrade instead of refuse: a PLAY of a title with renditions is admitted at the
    /// highest rendition that fits, stepping playing sessions down to make room
    /// [config: sched.degrade].
    #[arg(long)]
    degrade: bool,
    /// Sender threads, sessions hashed to them; 0 = one per core [config: sender.threads].
    #[arg(long, value_name = "K")]
    sender_threads: Option<usize>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut file = match &args.config {
        Some(p) => ConfigFile::load(p)?,
        None => ConfigFile::default(),
    };
    if let Some(d) = args.data {
        file.store.data_dir = d;
    }
    if let Some(a) = args.rtsp {
        file.rtsp.listen = a;
    }
    if let Some(a) = args.rtsps {
        file.rtsp.rtsps_listen = a;
    }
    if let Some(a) = args.srt {
        file.live.srt_listen = a;
    }
    if let Some(f) = args.tls_cert {
        file.tls.cert_file = f;
    }
    if let Some(f) = args.tls_key {
        file.tls.key_file = f;
    }
    if let Some(a) = args.http {
        file.http.listen = a;
    }
    if let Some(p) = args.rtp_port {
        file.rtsp.rtp_port = p;
    }
    if let Some(m) = args.media {
        file.media.dir = Some(m);
    }
    if args.no_demo {
        file.store.seed_demo = false;
    }
    if let Some(k) = args.replication {
        file.store.replication = Some(k);
    }
    if !args.disks.is_empty() {
        file.store.disks = args.disks;
    }
    if !args.etcd.is_empty() {
        file.cluster.etcd = args.etcd;
    }
    if let Some(n) = args.node {
        file.cluster.node = n;
    }
    if let Some(a) = args.advertise {
        file.cluster.advertise = a;
    }
    if let Some(p) = args.control_port {
        file.cluster.control_port = p;
    }
    if let Some(a) = args.admission {
        file.sched.admission = a;
    }
    if let Some(m) = args.egress_mbps {
        file.sched.egress_mbps = m;
    }
    if args.degrade {
        file.sched.degrade = true;
    }
    if let Some(k) = args.sender_threads {
        file.sender.threads = k;
    }
    let settings = file.validate()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("isochron-rt")
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let s = settings.clone();
        let store = tokio::task::spawn_blocking(move || isochron_server::open_or_create_store(&s))
            .await??;
        let mut server = isochron_server::start(settings, store).await?;
        if let Some((listener, handles)) = server.take_http() {
            server.add_task(isochron_http::serve(listener, handles));
        }
        let http = server.http_addr.map_or_else(|| "off".to_string(), |a| a.to_string());
        let rtsps = server.rtsps_addr.map_or_else(|| "off".to_string(), |a| a.to_string());
        let srt = server.srt_addr.map_or_else(|| "off".to_string(), |a| a.to_string());
        println!(
            "listening: rtsp={} rtsps={rtsps} http={http} rtp={} srt={srt}",
            server.rtsp_addr, server.rtp_port
        );
        let objects = server.library.list();
        if objects.is_empty() {
            println!(
                "no objects yet: ingest some with `isochron ingest FILE` (a cluster: \
                 `isochron ingest --server URL FILE`) or use --media DIR"
            );
        }
        for e in &objects {
            println!(
                "play: {}   ({:.1} s)",
                server.url(&e.record.name),
                e.record.duration.as_secs_f64()
            );
        }
        shutdown_signal().await;
        println!("shutting down");
        server.shutdown().await;
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(ExitCode::SUCCESS)
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
