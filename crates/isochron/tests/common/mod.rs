//! Shared harness of the integration tests: a real `isochron` process on loopback, generated media
//! fixtures, and external players (ffmpeg, GStreamer, VLC) run with hard time limits.
//!
//! Fixtures are generated once per target directory (under `CARGO_TARGET_TMPDIR`, behind a file
//! lock, since tests run in parallel) with ffmpeg's synthetic sources, so the tests carry
//! no media files beyond the bundled demo clip.

#![allow(dead_code, unreachable_pub, clippy::print_stderr)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// The TS timing index (PCR-derived send times) of a file.
pub fn ts_index(path: &Path) -> isochron_media::TsIndex {
    let mut s = isochron_media::TsScanner::new();
    s.push(&std::fs::read(path).expect("reading the clip")).expect("a TS file");
    s.finish().expect("a complete TS file")
}

/// Connects to `url` with the loadgen client, DESCRIBEs, SETs UP over `transport` (which must
/// answer 200) and PLAYs from the start.
pub async fn start_play(
    url: &str,
    transport: isochron_loadgen::Transport,
) -> (isochron_loadgen::Client, isochron_loadgen::PlayInfo) {
    let mut c = isochron_loadgen::Client::connect(url).await.expect("connect");
    c.describe().await.expect("DESCRIBE");
    let r = c.setup(transport).await.expect("SETUP");
    assert_eq!(u16::from(r.status()), 200, "SETUP");
    let info = c.play(None).await.expect("PLAY");
    (c, info)
}

/// The `isochron` binary under test: the one cargo built, or `ISOCHRON_TEST_BIN` (a copy kept
/// for repeated runs while the tree is rebuilt).
pub fn bin() -> &'static str {
    static BIN: OnceLock<String> = OnceLock::new();
    BIN.get_or_init(|| {
        std::env::var("ISOCHRON_TEST_BIN")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_isochron").to_owned())
    })
}

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The bundled demo clip.
pub fn demo() -> PathBuf {
    repo().join("assets/demo.ts")
}

/// A fresh temporary directory, removed on drop.
/// Whether network namespaces (`isochron_loadgen::testbed`) work here. In CI they must (a
/// missing one panics with the reason); elsewhere, without root, `what` is skipped with a line
/// saying so.
pub fn namespaces_or_skip(what: &str) -> bool {
    use isochron_loadgen::testbed::Testbed;
    match Testbed::available() {
        Ok(()) => true,
        Err(why) if Testbed::is_root() || std::env::var_os("CI").is_some() => {
            panic!("{what} must run here: {why}")
        }
        Err(why) => {
            eprintln!("{what}: skipped: {why}");
            false
        }
    }
}

pub fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("isochron-test-").tempdir().expect("tempdir")
}

/// Fails the test if a required tool is missing: CI installs them (scripts/test.sh), so a missing
/// tool is a broken environment, not a reason to skip.
pub fn require(tool: &str) {
    let ok = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "{tool} is not installed; run scripts/test.sh, which installs it");
}

/// Runs `cmd` under `timeout -k 5 secs` and returns its output.
pub fn run(cmd: &mut Command, secs: u64) -> Output {
    let prog = cmd.get_program().to_string_lossy().into_owned();
    let args: Vec<String> = cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
    let mut t = Command::new("timeout");
    t.args(["-k", "5", &secs.to_string(), &prog]).args(&args);
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => t.env(k, v),
            None => t.env_remove(k),
        };
    }
    if let Some(d) = cmd.get_current_dir() {
        t.current_dir(d);
    }
    t.stdin(Stdio::null()).output().unwrap_or_else(|e| panic!("running {prog}: {e}"))
}

/// A generated fixture, made once per target dir.
pub fn fixture(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fixtures");
    std::fs::create_dir_all(&dir).expect("fixture dir");
    let path = dir.join(format!("{name}.ts"));
    let lock = std::fs::File::create(dir.join(format!("{name}.lock"))).expect("lock file");
    lock.lock().expect("lock");
    if !path.exists() {
        require("ffmpeg");
        let tmp = dir.join(format!("{name}.tmp.ts"));
        let args: Vec<String> = match name {
            // ≥ 60 s (vbr60), 20 s (vbr20) or 12 s (vbr12) of VBR H.264 + AAC at several Mb/s
            // (1 s GOP): the byte-exact, player and protocol tests play the 20 s one (its length
            // proves nothing more); pacing, the crash tests and HTTP downloads want the long
            // one; the cluster's join and removal, over in a few seconds, the short one.
            "vbr60" | "vbr20" | "vbr12" => format!(
                "-f lavfi -i testsrc2=size=960x540:rate=25 \
                 -f lavfi -i sine=frequency=330:sample_rate=48000 -t {} \
                 -c:v libx264 -preset ultrafast -g 25 -b:v 4M -maxrate 7M -bufsize 4M \
                 -pix_fmt yuv420p -c:a aac -b:a 128k -f mpegts",
                match name {
                    "vbr60" => 62,
                    "vbr20" => 20,
                    _ => 12,
                }
            )
            .split_whitespace()
            .map(String::from)
            .collect(),
            // 15 s at about 5 Mb/s: the 100-session test.
            "rate5m" => "-f lavfi -i testsrc2=size=960x540:rate=25 \
                -f lavfi -i sine=frequency=550:sample_rate=48000 -t 15 \
                -c:v libx264 -preset ultrafast -g 25 -b:v 4800k -maxrate 5M -bufsize 2M \
                -pix_fmt yuv420p -c:a aac -b:a 128k -f mpegts"
                .split_whitespace()
                .map(String::from)
                .collect(),
            // 30 s of 640×360 MPEG-2 VBR, about 2.2 Mb/s, in GOPs of 1.52 s: two seconds in three
            // hold an I-frame, whatever the phase of a one-second sample, so the rate swings
            // from one second to the next (the rate-pacing test).
            "gop38" => "-f lavfi -i testsrc2=size=640x360:rate=25,noise=alls=6:allf=t \
                -f lavfi -i sine=frequency=370:sample_rate=48000 -t 30 \
                -c:v mpeg2video -b:v 2M -maxrate 5M -bufsize 2M -g 38 -bf 2 \
                -c:a mp2 -b:a 128k -f mpegts"
                .split_whitespace()
                .map(String::from)
                .collect(),
            // 8 s and 60 s at about 300 kb/s: the churn test's clips (250 players a round).
            "low8" | "low60" => format!(
                "-f lavfi -i testsrc2=size=320x180:rate=25 \
                 -f lavfi -i sine=frequency=660:sample_rate=48000 -t {} \
                 -c:v libx264 -preset ultrafast -g 25 -b:v 250k -maxrate 400k -bufsize 400k \
                 -pix_fmt yuv420p -c:a aac -b:a 48k -f mpegts",
                if name == "low8" { 8 } else { 60 }
            )
            .split_whitespace()
            .map(String::from)
            .collect(),
            // 30 s at about 2 Mb/s: the retransmission tests (1 % of its ~5,000 packets lost).
            "clip30" => "-f lavfi -i testsrc2=size=640x360:rate=25 \
                -f lavfi -i sine=frequency=440:sample_rate=48000 -t 30 \
                -c:v libx264 -preset ultrafast -g 25 -b:v 1800k -maxrate 2500k -bufsize 2M \
                -pix_fmt yuv420p -c:a aac -b:a 96k -f mpegts"
                .split_whitespace()
                .map(String::from)
                .collect(),
            // 60 s of 1280×720 H.264 + AAC, about 6 Mb/s, with 20 s of film grain in the middle
            // at 10 Mb/s or more: the relay-under-load run (a heavy part that a loaded relay
            // must keep up with).
            "grain60" => "-f lavfi -i testsrc2=size=1280x720:rate=25 \
                -f lavfi -i sine=frequency=500:sample_rate=48000 -t 60 \
                -vf noise=alls=24:allf=t:enable='between(t,20,40)' \
                -c:v libx264 -preset ultrafast -g 50 -b:v 6M -maxrate 14M -bufsize 8M \
                -pix_fmt yuv420p -c:a aac -b:a 128k -f mpegts"
                .split_whitespace()
                .map(String::from)
                .collect(),
            // 3 s of 1920×1080 MPEG-2 noise at a steady 300 Mb/s (CBR video at 290 Mb/s, the
            // TS padded to 300 Mb/s): CineGrid's striped read, more than one 100 Mb/s node.
            "cg300" => "-f lavfi -i testsrc2=size=1920x1080:rate=25,noise=alls=40:allf=t -t 3 \
                -c:v mpeg2video -g 12 -bf 0 -b:v 290M -minrate 290M -maxrate 290M \
                -bufsize 20M -muxrate 300M -f mpegts"
                .split_whitespace()
                .map(String::from)
                .collect(),
            other => panic!("unknown fixture {other}"),
        };
        let out = run(
            Command::new("ffmpeg").args(["-nostdin", "-v", "error", "-y"]).args(&args).arg(&tmp),
            300,
        );
        assert!(out.status.success(), "ffmpeg {name}: {}", String::from_utf8_lossy(&out.stderr));
        std::fs::rename(&tmp, &path).expect("rename fixture");
    }
    path
}

/// A generated media file of another container (MP4, Matroska), made once per target dir:
/// `name` is its file name. The variants of one encode (`moov` first or last, fragmented) are
/// remuxed from it with `-c copy`, so their samples are the same.
pub fn media_fixture(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fixtures");
    std::fs::create_dir_all(&dir).expect("fixture dir");
    let path = dir.join(name);
    let lock = std::fs::File::create(dir.join(format!("{name}.lock"))).expect("lock file");
    lock.lock().expect("lock");
    if path.exists() {
        return path;
    }
    require("ffmpeg");
    let split = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<String>>();
    // 10 s of 640×360 H.264 (x264's default B-frames, 1 s GOP) and 48 kHz stereo AAC.
    let h264_aac = "-f lavfi -i testsrc2=size=640x360:rate=25 \
        -f lavfi -i sine=frequency=440:sample_rate=48000 -ac 2 -t 10 \
        -c:v libx264 -preset veryfast -g 25 -pix_fmt yuv420p -c:a aac -b:a 128k";
    let (input, args): (Option<PathBuf>, Vec<String>) = match name {
        "h264_aac.mp4" => (None, split(&format!("{h264_aac} -movflags +faststart"))),
        "h264_aac_moov_last.mp4" => {
            (Some(media_fixture("h264_aac.mp4")), split("-map 0 -c copy -f mp4"))
        }
        "h264_aac_fragmented.mp4" => (
            Some(media_fixture("h264_aac.mp4")),
            split("-map 0 -c copy -movflags +frag_keyframe+empty_moov+default_base_moof -f mp4"),
        ),
        // The same without B-frames (decode order is presentation order).
        "h264_aac_nobf.mp4" => (None, split(&format!("{h264_aac} -bf 0 -movflags +faststart"))),
        "hevc_aac.mp4" => (
            None,
            split(
                "-f lavfi -i testsrc2=size=640x360:rate=25 \
                 -f lavfi -i sine=frequency=550:sample_rate=48000 -ac 2 -t 8 \
                 -c:v libx265 -preset ultrafast -x265-params keyint=25:log-level=error \
                 -tag:v hvc1 -pix_fmt yuv420p -c:a aac -b:a 96k -movflags +faststart",
            ),
        ),
        "h264_opus.mkv" => (
            None,
            split(
                "-f lavfi -i testsrc2=size=640x360:rate=25 \
                 -f lavfi -i sine=frequency=660:sample_rate=48000 -ac 2 -t 8 \
                 -c:v libx264 -preset veryfast -g 25 -pix_fmt yuv420p -c:a libopus -b:a 64k \
                 -f matroska",
            ),
        ),
        // 45 s of 320×180 H.264 whose every frame differs (testsrc's running clock), no audio:
        // a live feed whose packets identify the moment they were published.
        "h264_clock_45s.mp4" => (
            None,
            split(
                "-f lavfi -i testsrc=size=320x180:rate=25 -t 45 \
                 -c:v libx264 -preset veryfast -g 25 -pix_fmt yuv420p -movflags +faststart",
            ),
        ),
        // 12 s of 1080p H.264 (2 s GOP, B-frames) + AAC: the rendition ladder's source.
        "h264_1080p_12s.mp4" => (
            None,
            split(
                "-f lavfi -i testsrc2=size=1920x1080:rate=25 \
                 -f lavfi -i sine=frequency=440:sample_rate=48000 -ac 2 -t 12 \
                 -c:v libx264 -preset ultrafast -g 50 -b:v 6M \
                 -pix_fmt yuv420p -c:a aac -b:a 128k -movflags +faststart",
            ),
        ),
        // 90 s of 640×360 H.264 + AAC with film grain (hard to compress: every rung of its
        // ladder spends its whole rate): the browser's adaptive play behind a shaped link.
        "h264_360p_grain_90s.mp4" => (
            None,
            split(
                "-f lavfi -i testsrc2=size=640x360:rate=25 \
                 -f lavfi -i sine=frequency=500:sample_rate=48000 -ac 2 -t 90 \
                 -vf noise=alls=20:allf=t -c:v libx264 -preset ultrafast -g 50 -b:v 3M \
                 -pix_fmt yuv420p -c:a aac -b:a 128k -movflags +faststart",
            ),
        ),
        // 40 s of 1080p H.264 + AAC: the GStreamer frame-for-frame test.
        "h264_1080p_40s.mp4" => (
            None,
            split(
                "-f lavfi -i testsrc2=size=1920x1080:rate=25 \
                 -f lavfi -i sine=frequency=330:sample_rate=48000 -ac 2 -t 40 \
                 -c:v libx264 -preset ultrafast -g 50 -b:v 5M -maxrate 8M -bufsize 8M \
                 -pix_fmt yuv420p -c:a aac -b:a 128k -movflags +faststart",
            ),
        ),
        other => panic!("unknown media fixture {other}"),
    };
    let tmp = dir.join(format!("tmp.{name}"));
    let mut cmd = Command::new("ffmpeg");
    cmd.args(["-nostdin", "-v", "error", "-y"]);
    if let Some(i) = &input {
        cmd.arg("-i").arg(i);
    }
    let out = run(cmd.args(&args).arg(&tmp), 600);
    assert!(out.status.success(), "ffmpeg {name}: {}", String::from_utf8_lossy(&out.stderr));
    std::fs::rename(&tmp, &path).expect("rename fixture");
    path
}

/// A running `isochron serve` on loopback ports chosen by the kernel.
pub struct Server {
    child: Child,
    /// RTSP address.
    pub rtsp: SocketAddr,
    /// RTSPS address, when one was asked for.
    pub rtsps: Option<SocketAddr>,
    /// SRT address of publishers, when one was asked for (`live.srt_listen`).
    pub srt: Option<SocketAddr>,
    /// HTTP address.
    pub http: SocketAddr,
    /// RTP port.
    pub rtp_port: u16,
    /// Its store directory.
    pub data: PathBuf,
    /// Its log (stderr).
    pub log: PathBuf,
}

/// Options for [`Server::start`].
#[derive(Default)]
pub struct ServeOptions<'a> {
    /// `--media DIR`.
    pub media: Option<&'a Path>,
    /// `--no-demo`.
    pub no_demo: bool,
    /// `--config FILE` contents, written to a temp file.
    pub config: Option<&'a str>,
    /// `--http ADDR` [default: 127.0.0.1:0].
    pub http: Option<&'a str>,
    /// `--rtsp ADDR` [default: 127.0.0.1:0].
    pub rtsp: Option<&'a str>,
}

impl<'a> ServeOptions<'a> {
    /// RTSP and HTTP on every address (`0.0.0.0:0`), for clients in other network namespaces,
    /// with `config`.
    #[must_use]
    pub fn everywhere(config: Option<&'a str>) -> Self {
        Self { rtsp: Some("0.0.0.0:0"), http: Some("0.0.0.0:0"), config, ..Self::default() }
    }
}

impl Server {
    /// Starts a server on the store at `data` (created with the demo clip unless it exists).
    pub fn start(data: &Path, opts: ServeOptions<'_>) -> Self {
        let log = data.with_extension("log");
        let logf = std::fs::File::create(&log).expect("log file");
        let mut cmd = Command::new(bin());
        let http = opts.http.unwrap_or("127.0.0.1:0");
        let rtsp = opts.rtsp.unwrap_or("127.0.0.1:0");
        cmd.args(["serve", "--rtsp", rtsp, "--http", http, "--rtp-port", "0"])
            .arg("--data")
            .arg(data);
        if let Some(m) = opts.media {
            cmd.arg("--media").arg(m);
        }
        if opts.no_demo {
            cmd.arg("--no-demo");
        }
        if let Some(text) = opts.config {
            let cfg = data.with_extension("toml");
            std::fs::write(&cfg, text).expect("config");
            cmd.arg("--config").arg(cfg);
        }
        let mut child = cmd
            .env(
                "RUST_LOG",
                "info,isochron_server=debug,isochron_node=debug,isochron_dataplane=debug,isochron_http=debug",
            )
            .stdout(Stdio::piped())
            .stderr(logf)
            .spawn()
            .expect("spawn isochron serve");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let deadline = Instant::now() + Duration::from_secs(60);
        let listening = loop {
            assert!(Instant::now() < deadline, "server did not start; log: {}", read(&log));
            match lines.next() {
                Some(Ok(l)) if l.starts_with("listening:") => break l,
                Some(Ok(_)) => {}
                _ => panic!("server exited before listening; log:\n{}", read(&log)),
            }
        };
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let field = |k: &str| {
            listening
                .split_whitespace()
                .find_map(|w| w.strip_prefix(k))
                .unwrap_or_else(|| panic!("no {k} in {listening:?}"))
                .to_string()
        };
        Self {
            child,
            rtsp: field("rtsp=").parse().expect("rtsp addr"),
            rtsps: field("rtsps=").parse().ok(),
            srt: field("srt=").parse().ok(),
            http: field("http=").parse().expect("http addr"),
            rtp_port: field("rtp=").parse().expect("rtp port"),
            data: data.to_path_buf(),
            log,
        }
    }

    /// The URL of object `name`.
    pub fn url(&self, name: &str) -> String {
        format!("rtsp://{}/{name}", self.rtsp)
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        read(&self.log)
    }

    /// The value of metric `name` (a sample without labels) from `/metrics`.
    pub fn metric(&self, name: &str) -> f64 {
        let text = self.http_get("/metrics");
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in metrics:\n{text}"))
    }

    /// GETs `path` from the HTTP API and returns the body (HTTP/1.0, so the server closes).
    pub fn http_get(&self, path: &str) -> String {
        String::from_utf8_lossy(&self.http_get_bytes(path)).into_owned()
    }

    /// [`Server::http_get`]'s body as bytes (a binary segment).
    pub fn http_get_bytes(&self, path: &str) -> Vec<u8> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(self.http).expect("connect HTTP");
        s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").expect("write");
        let mut resp = Vec::new();
        s.read_to_end(&mut resp).expect("read");
        let at = resp.windows(4).position(|w| w == b"\r\n\r\n").map_or(resp.len(), |i| i + 4);
        resp.split_off(at)
    }

    /// Stops the server with SIGTERM and waits for it.
    pub fn stop(mut self) {
        self.terminate();
    }

    /// Kills the server with SIGKILL (a crash) and waits for it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn terminate(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.terminate();
        }
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

/// One packet of an ffmpeg `framemd5` listing: `(stream_index, size, hash)`.
pub type PacketHash = (String, String, String);

/// `(stream_index, size, hash)` of every packet in an ffmpeg `framemd5` listing.
pub fn framemd5_packets(text: &str) -> Vec<PacketHash> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split(',').map(str::trim).collect();
            (f[0].to_string(), f[4].to_string(), f[5].to_string())
        })
        .collect()
}

/// Checks an ffmpeg `-c copy` packet listing of a stream against its source's: every packet, in
/// order, but for the source's last video packet, which ffmpeg does not flush at the BYE (the
/// RTP demuxer sees no next PES start). A swapped, lost or repeated packet anywhere else fails.
pub fn check_ffmpeg_copy(got: &[PacketHash], want: &[PacketHash]) -> Result<(), String> {
    if got == want {
        return Ok(());
    }
    let last_video = want.iter().rposition(|p| p.0 == "0");
    let mut without = want.to_vec();
    if let Some(i) = last_video {
        without.remove(i);
    }
    if got == without.as_slice() {
        return Ok(());
    }
    let first = got
        .iter()
        .zip(&without)
        .position(|(a, b)| a != b)
        .unwrap_or_else(|| got.len().min(without.len()));
    Err(format!(
        "{} of {} packets; the first that differs is packet {first}: {:?} instead of {:?}",
        got.len(),
        want.len(),
        got.get(first),
        without.get(first)
    ))
}

/// The source's packet listing, computed once per file.
pub fn source_framemd5(path: &Path) -> Vec<PacketHash> {
    type Cache = std::sync::Mutex<std::collections::HashMap<PathBuf, Vec<PacketHash>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(v) = cache.lock().unwrap().get(path) {
        return v.clone();
    }
    let out = run(
        Command::new("ffmpeg")
            .args(["-nostdin", "-v", "error", "-i"])
            .arg(path)
            .args(["-map", "0", "-c", "copy", "-f", "framemd5", "-"]),
        120,
    );
    assert!(out.status.success());
    let v = framemd5_packets(&String::from_utf8_lossy(&out.stdout));
    cache.lock().unwrap().insert(path.to_path_buf(), v.clone());
    v
}

/// Asserts two byte strings are equal, reporting the first difference compactly.
pub fn assert_same_bytes(got: &[u8], want: &[u8], what: &str) {
    if got == want {
        return;
    }
    let first =
        got.iter().zip(want).position(|(a, b)| a != b).unwrap_or_else(|| got.len().min(want.len()));
    panic!(
        "{what}: {} bytes received vs {} expected; first difference at byte {first} (TS packet {})",
        got.len(),
        want.len(),
        first / 188
    );
}

/// Creates the store `data` on one emulated disk (`disk`: `DIR,seek_ms=…,rate_mib_s=…`) holding
/// the demo clip.
pub fn demo_store_on(data: &Path, disk: &str) {
    let out = run(
        Command::new(bin())
            .arg("ingest")
            .arg("--data")
            .arg(data)
            .args(["--disk", disk])
            .arg(demo()),
        120,
    );
    assert!(out.status.success(), "ingest: {}", String::from_utf8_lossy(&out.stderr));
}

/// A temporary store holding the demo clip and the given fixtures (ingested with the CLI), served
/// by a new server with the given config text.
pub fn serve_fixtures(extra: &[&Path], config: Option<&str>) -> (tempfile::TempDir, Server) {
    let dir = tempdir();
    let data = dir.path().join("store");
    if !extra.is_empty() {
        // The CLI creates the store without the demo clip that `serve` seeds: add it too.
        let demo = demo();
        for f in extra.iter().copied().chain([demo.as_path()]) {
            let out = run(Command::new(bin()).arg("ingest").arg("--data").arg(&data).arg(f), 120);
            assert!(out.status.success(), "ingest: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
    let server = Server::start(&data, ServeOptions { config, ..ServeOptions::default() });
    (dir, server)
}

/// Raises this process's open-files limit to 65,536 where it may (root), else its soft limit
/// to its hard one (tests that hold thousands of sockets).
pub fn raise_open_files() {
    // SAFETY: getrlimit and setrlimit on local structs.
    unsafe {
        let mut l = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) != 0 {
            return;
        }
        let want = l.rlim_max.max(65_536);
        let more = libc::rlimit { rlim_cur: want, rlim_max: want };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &more) != 0 && l.rlim_cur < l.rlim_max {
            l.rlim_cur = l.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        }
    }
}

/// The resident set of process `pid`, KiB (`VmRSS` in /proc/PID/status).
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:")?.trim().strip_suffix("kB")?.trim().parse().ok())
        .unwrap_or(0)
}

/// curl from `host`'s namespace (or this one with `None`): the status and the body (with what
/// `-w` adds after it).
pub fn curl(host: Option<&isochron_loadgen::testbed::Host>, args: &[&str]) -> (u16, String) {
    let mut cmd = match host {
        Some(h) => h.command("curl"),
        None => Command::new("curl"),
    };
    let out = run(
        cmd.args(["-sS", "--max-time", "20", "-o", "-", "-w", "\n%{http_code}"]).args(args),
        30,
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

/// Receives `url` with GStreamer (`rtspsrc ! rtpmp2tdepay ! filesink`) over `transport` and
/// returns the transport stream it wrote, with gst-launch's stderr for messages. The exit code is
/// not checked: over TCP gst-launch sometimes exits 1 at EOS ("Could not write to resource")
/// with its output complete; callers check the bytes.
///
/// Over UDP the socket's receive buffer is the only slack when udpsrc's thread is starved on a
/// loaded 2-core CI machine (four ffmpeg decodes, VLC and GStreamer share it): rtspsrc's default
/// 512 KiB is under a second of the VBR fixture, and a CI run lost 478 KB to it. Ask for 16 MiB
/// (scripts/test.sh raises net.core.rmem_max so the kernel grants it), as the ffmpeg tests do, and
/// give the jitter buffer 5 s so a late burst is not declared lost before it is read.
pub fn gst_fetch(url: &str, out: &Path, transport: &str) -> (Vec<u8>, String) {
    gst_fetch_in(None, url, out, transport)
}

/// Whether `gst-launch-1.0 -e` (run without `-q`) ended as a player that played to its end:
/// exit 0, or the one error GStreamer 1.22's `rtspsrc` raises on its own while it shuts down
/// after EOS. gst-launch sets the pipeline to PAUSED and at once to READY; `rtspsrc` queues a
/// PAUSE for its RTSP thread, then the READY transition flushes the connection to send TEARDOWN
/// (`gst_rtspsrc_loop_send_cmd`, `gstrtspsrc.c` 1.22 l. 6319-6322, "connection flush busy
/// PAUSE"). When the flush lands while that thread is writing the PAUSE, the write is cancelled
/// with nothing written, which `gstrtspconnection.c` reports as `GST_RTSP_EEOF`: "Could not send
/// message. (Received end-of-file)" — whatever the server did (`GST_DEBUG=rtspsrc:5` shows the
/// PAUSE's "sending message" and the flush a few hundred microseconds apart; the server is not
/// involved before the PAUSE reaches it, and keeps the connection open: docs/design/closing.md).
/// One failed send may be reported twice: by `gst_rtspsrc_try_send` and again by
/// `gst_rtspsrc_pause`, its caller (both "Could not send message" — a send error, where a
/// connection the server had closed reads as "Could not receive message" or "The server closed
/// the connection"). Anything else is an error.
pub fn gst_ended_cleanly(out: &Output) -> Result<(), String> {
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    if gst_shutdown_race(out) {
        eprintln!("GStreamer's own shutdown race after EOS (tolerated): {stderr}");
        Ok(())
    } else {
        let stdout = String::from_utf8_lossy(&out.stdout);
        Err(format!("{}\n{stdout}\n{stderr}", out.status))
    }
}

/// Whether every error `gst-launch-1.0 -e` reported is its own shutdown race after EOS (one
/// failed send, reported once or twice, while the pipeline is torn down; see
/// [`gst_ended_cleanly`]), and there was at least one.
pub fn gst_shutdown_race(out: &Output) -> bool {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let errors = stderr.matches("ERROR: from element").count();
    let sends = stderr.matches("Could not send message. (Received end-of-file)").count();
    stdout.contains("Got EOS from element")
        && (1..=2).contains(&errors)
        && sends == errors
        && !stderr.contains("Could not receive message")
        && !stderr.contains("closed the connection")
}

/// [`gst_fetch`] from `host`'s network namespace (`None`: this one).
pub fn gst_fetch_in(
    host: Option<&isochron_loadgen::testbed::Host>,
    url: &str,
    out: &Path,
    transport: &str,
) -> (Vec<u8>, String) {
    gst_fetch_with(host, url, out, transport, &[])
}

/// [`gst_fetch_in`] with more `rtspsrc` properties (`name=value`).
pub fn gst_fetch_with(
    host: Option<&isochron_loadgen::testbed::Host>,
    url: &str,
    out: &Path,
    transport: &str,
    properties: &[&str],
) -> (Vec<u8>, String) {
    let drops_before = udp_rcvbuf_errors();
    let mut cmd = match host {
        Some(h) => h.command("gst-launch-1.0"),
        None => Command::new("gst-launch-1.0"),
    };
    let res = run(
        cmd.args([
            "-q",
            "-e",
            "rtspsrc",
            &format!("location={url}"),
            &format!("protocols={transport}"),
            "udp-buffer-size=16777216",
            "latency=5000",
        ])
        .args(properties)
        .args([
            "!",
            "rtpmp2tdepay",
            "!",
            "filesink",
            &format!("location={}", out.display()),
        ]),
        120,
    );
    let mut msg = String::from_utf8_lossy(&res.stderr).into_owned();
    if let (Some(a), Some(b)) = (drops_before, udp_rcvbuf_errors()) {
        msg.push_str(&format!("\nhost-wide UDP receive-buffer drops during the run: {}", b - a));
    }
    (std::fs::read(out).unwrap_or_default(), msg)
}

/// The kernel's count of UDP datagrams dropped because a socket's receive buffer was full
/// (`Udp: RcvbufErrors` in /proc/net/snmp), to tell a receiver that fell behind from a server
/// that did not send.
pub fn udp_rcvbuf_errors() -> Option<u64> {
    let snmp = std::fs::read_to_string("/proc/net/snmp").ok()?;
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp: "));
    let (names, values) = (udp.next()?, udp.next()?);
    let i = names.split_whitespace().position(|n| n == "RcvbufErrors")?;
    values.split_whitespace().nth(i)?.parse().ok()
}

/// A multi-threaded runtime for tests that use the async client.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime")
}

/// The machine's own timing noise: an ideal pacer, a thread with a deadline every 2 ms that
/// sleeps until the next one, as the server's sender does, and records how late it meets each.
/// A stall of S ms makes the deadlines it covers late by S, S − 2, … as it does the server's
/// packets, so the two distributions compare. On a shared VM with CPU steal every thread wakes
/// late at times; the server is judged on what it adds to that, in the same run.
pub struct MachineJitter {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<f64>>,
}

impl MachineJitter {
    /// Starts the ideal pacer.
    pub fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut late_ms = Vec::new();
            let mut due = Instant::now();
            while !flag.load(Ordering::Relaxed) {
                due += Duration::from_millis(2);
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
                let now = Instant::now();
                late_ms.push(now.duration_since(due).as_secs_f64() * 1e3);
            }
            late_ms
        });
        Self { stop, thread }
    }

    /// Sorted wake-up lateness in milliseconds.
    pub fn finish(self) -> Vec<f64> {
        self.stop.store(true, Ordering::Relaxed);
        let mut v = self.thread.join().unwrap();
        v.sort_by(f64::total_cmp);
        v
    }
}

/// The `f` quantile (0–1) of sorted samples.
pub fn quantile(sorted: &[f64], f: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * f) as usize]
}

/// Starts Debian's headless Chromium on `url` with the flags this closed network needs (a fresh
/// profile, no background networking, no sandbox as root, autoplay without a gesture), plus
/// `extra` flags before the URL. The caller waits on it (or kills it) and reads its output.
pub fn chromium(url: &str, extra: &[&str], secs: u64) -> Child {
    chromium_in(None, url, extra, secs)
}

/// [`chromium`] in `host`'s network namespace (`None`: this one).
pub fn chromium_in(
    host: Option<&isochron_loadgen::testbed::Host>,
    url: &str,
    extra: &[&str],
    secs: u64,
) -> Child {
    require("chromium");
    let profile = tempdir();
    let mut c = match host {
        Some(h) => h.command("timeout"),
        None => Command::new("timeout"),
    };
    c.args(["-k", "5", &secs.to_string(), "chromium"])
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--mute-audio",
            "--autoplay-policy=no-user-gesture-required",
        ])
        .arg(format!("--user-data-dir={}", profile.keep().display()))
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c.spawn().expect("starting chromium")
}

/// Opens a watch page in Chromium (in `host`'s namespace, or this one) and returns the page's
/// report (its `report=` is `beacon`'s URL) with Chromium's stderr, where the page's console
/// lines are: panics, showing that stderr, if no report came within `wait` or the report is not
/// `"ok": true`.
pub fn watch_report(
    host: Option<&isochron_loadgen::testbed::Host>,
    page: &str,
    beacon: &Beacon,
    wait: Duration,
) -> (serde_json::Value, String) {
    let secs = wait.as_secs() + 60;
    let child = chromium_in(host, page, &["--enable-logging=stderr", "--v=0"], secs);
    let report = beacon.wait(wait);
    // SIGTERM to `timeout`, which passes it on to chromium.
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let out = child.wait_with_output().expect("chromium output");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let Some(report) = report else {
        panic!("no report from the page within {wait:?}; chromium's stderr:\n{stderr}");
    };
    let v: serde_json::Value = serde_json::from_str(&report)
        .unwrap_or_else(|e| panic!("report {report:?}: {e}; chromium's stderr:\n{stderr}"));
    assert_eq!(v["ok"], true, "{report}; chromium's stderr:\n{stderr}");
    (v, stderr)
}

/// A one-shot HTTP listener for a page's report: the page POSTs (a CORS "simple" request, so
/// no preflight) a text body to [`Beacon::url`], and [`Beacon::wait`] returns the first body.
pub struct Beacon {
    listener: std::net::TcpListener,
}

impl Beacon {
    /// Listens on a free loopback port.
    pub fn new() -> Self {
        Self::on(std::net::Ipv4Addr::LOCALHOST)
    }

    /// Listens on a free port of `ip` (a testbed's host address, for a page in a namespace).
    pub fn on(ip: std::net::Ipv4Addr) -> Self {
        Self { listener: std::net::TcpListener::bind((ip, 0)).expect("beacon listener") }
    }

    /// The URL to POST to.
    pub fn url(&self) -> String {
        format!("http://{}/report", self.listener.local_addr().unwrap())
    }

    /// The body of the first POST, or `None` after `limit`.
    pub fn wait(&self, limit: Duration) -> Option<String> {
        use std::io::Write;
        let deadline = Instant::now() + limit;
        self.listener.set_nonblocking(true).unwrap();
        loop {
            match self.listener.accept() {
                Ok((mut s, _)) => {
                    s.set_nonblocking(false).unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    // Headers, then Content-Length bytes of body.
                    while let Ok(n) = read_some(&mut s, &mut chunk) {
                        if n == 0 {
                            break;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        let text = String::from_utf8_lossy(&buf).into_owned();
                        if let Some(end) = text.find("\r\n\r\n") {
                            let len = text[..end]
                                .lines()
                                .find_map(|l| {
                                    let (k, v) = l.split_once(':')?;
                                    k.eq_ignore_ascii_case("content-length")
                                        .then(|| v.trim().parse::<usize>().ok())?
                                })
                                .unwrap_or(0);
                            if buf.len() >= end + 4 + len {
                                let _ = s.write_all(
                                    b"HTTP/1.1 204 No Content\r\nAccess-Control-Allow-Origin: *\r\n\
                                      Connection: close\r\n\r\n",
                                );
                                return Some(
                                    String::from_utf8_lossy(&buf[end + 4..end + 4 + len])
                                        .into_owned(),
                                );
                            }
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        return None;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => panic!("beacon: {e}"),
            }
        }
    }
}

/// How much of the machine a test takes while it runs, in units of [`LOAD_UNITS`]: the
/// integration tests run side by side in one binary (`tests/it`), and [`load`] lets a test start
/// only when its units are free, in the order the tests asked, so a heavier test is never starved
/// by lighter ones. The weights are what each test needs to keep its own timing on a two-core
/// machine. Tests that measure capacity or timing need the machine to themselves: they are
/// binaries of their own (`tests/bench.rs`, `pacing.rs`, `cinegrid.rs`, `admission.rs`,
/// `diskbench.rs`), which `cargo test` runs one at a time after this one.
pub mod weight {
    /// An exchange with one server: requests, short clips, ingest, the CLI.
    pub const LIGHT: u32 = 1;
    /// A server and real players, or a long stream.
    pub const PLAYER: u32 = 2;
    /// A cluster of nodes, hundreds of sessions, a 1080p decode, a browser.
    pub const HEAVY: u32 = 4;
}

/// The units [`load`] shares out.
pub const LOAD_UNITS: u32 = 10;

/// Held while a test runs: its share of the machine, given back on drop. With
/// `ISOCHRON_LOAD_LOG=FILE` set, each drop appends a line to FILE: the test's name, its units,
/// the seconds it waited for them and the seconds it held them (where the suite's time goes).
#[must_use = "the share is given back when this is dropped"]
pub struct Load(u32, Instant, Duration);

#[derive(Default)]
struct Loads {
    used: u32,
    /// Who waits, in the order they are to start: (lane, ticket).
    waiting: std::collections::BTreeSet<(u8, u64)>,
    next: u64,
}

static LOADS: std::sync::Mutex<Loads> =
    std::sync::Mutex::new(Loads { used: 0, waiting: std::collections::BTreeSet::new(), next: 0 });
static LOADS_FREED: std::sync::Condvar = std::sync::Condvar::new();

/// Waits for `units` of the machine (see [`weight`]) and holds them until the guard drops.
pub fn load(units: u32) -> Load {
    load_in_lane(1, units)
}

/// [`load`] ahead of every test that asked with [`load`]: for the tests of the longest chain
/// (the cluster tests, one cluster at a time), whose waits would otherwise add up.
pub fn load_first(units: u32) -> Load {
    load_in_lane(0, units)
}

fn load_in_lane(lane: u8, units: u32) -> Load {
    let asked = Instant::now();
    let units = units.min(LOAD_UNITS);
    let mut l = LOADS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let me = (lane, l.next);
    l.next += 1;
    l.waiting.insert(me);
    while l.waiting.first() != Some(&me) || l.used + units > LOAD_UNITS {
        l = LOADS_FREED.wait(l).unwrap_or_else(std::sync::PoisonError::into_inner);
    }
    l.waiting.remove(&me);
    l.used += units;
    LOADS_FREED.notify_all();
    Load(units, Instant::now(), asked.elapsed())
}

impl Drop for Load {
    fn drop(&mut self) {
        let mut l = LOADS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        l.used -= self.0;
        LOADS_FREED.notify_all();
        drop(l);
        if let Some(path) = std::env::var_os("ISOCHRON_LOAD_LOG") {
            use std::io::Write as _;
            let name = std::thread::current().name().unwrap_or("?").to_owned();
            let (units, waited, held) =
                (self.0, self.2.as_secs_f64(), self.1.elapsed().as_secs_f64());
            let line = format!("{name} {units} {waited:.1} {held:.1}\n");
            let f = std::fs::OpenOptions::new().create(true).append(true).open(path);
            let _ = f.and_then(|mut f| f.write_all(line.as_bytes()));
        }
    }
}

/// `r.read(buf)`, again when a signal interrupted it. A socket with a read timeout
/// (`SO_RCVTIMEO`) answers `EINTR` to any signal whose handler runs meanwhile, `SA_RESTART` or
/// not (signal(7)): in a test process whose other tests spawn children, a `SIGCHLD` handler
/// (tokio's process reaping) is enough.
pub fn read_some(r: &mut impl std::io::Read, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match r.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            other => return other,
        }
    }
}
