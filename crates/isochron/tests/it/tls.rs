//! TLS (`[tls]`, `isochron_server::tls`): a pair from `isochron cert --self-signed`, RTSPS played
//! by ffmpeg and GStreamer with Digest credentials, and HTTPS on the HTTP port taking Basic
//! credentials from a client elsewhere on the network (in a namespace of its own) that plain
//! HTTP refuses it, plus the CLI over HTTPS trusting the pair through `ISOCHRON_CA_FILE`.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::{ServeOptions, Server, bin, curl, demo, require, run, tempdir};
use isochron_loadgen::testbed::Testbed;

/// `isochron cert --self-signed DIR`: the pair's paths.
fn self_signed(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let out = run(Command::new(bin()).args(["cert", "--self-signed"]).arg(dir), 30);
    assert!(out.status.success(), "cert: {}", String::from_utf8_lossy(&out.stderr));
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the key is its owner's only");
    // A second run keeps the pair.
    let again = run(Command::new(bin()).args(["cert", "--self-signed"]).arg(dir), 30);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("exists"));
    (cert, key)
}

fn config(cert: &Path, key: &Path) -> String {
    format!(
        r#"
[tls]
cert_file = "{}"
key_file = "{}"

[rtsp]
rtsps_listen = "0.0.0.0:0"

[auth]
anonymous = []

[[auth.users]]
name = "viewer"
password = "view-secret"
permissions = ["read"]

[[auth.users]]
name = "ops"
password = "ops-secret"
permissions = ["read", "record", "admin"]
"#,
        cert.display(),
        key.display()
    )
}

#[test]
fn ffmpeg_and_gstreamer_play_rtsps_with_digest() {
    let _load = common::load(common::weight::PLAYER);
    require("ffmpeg");
    require("gst-launch-1.0");
    let dir = tempdir();
    let (cert, key) = self_signed(&dir.path().join("tls"));
    let server = Server::start(
        &dir.path().join("store"),
        ServeOptions { config: Some(&config(&cert, &key)), ..ServeOptions::default() },
    );
    let port = server.rtsps.expect("an RTSPS listener").port();
    let url = |creds: &str| format!("rtsps://{creds}127.0.0.1:{port}/demo");
    let ffmpeg = |url: &str, out: &Path| {
        run(
            Command::new("timeout")
                .args(["-k", "5", "60", "ffmpeg", "-nostdin", "-v", "error", "-i", url])
                .args(["-map", "0", "-c", "copy", "-f", "framemd5", "-y"])
                .arg(out),
            90,
        )
    };
    // No credentials: 401 over TLS too.
    let md5 = dir.path().join("none.md5");
    let res = ffmpeg(&url(""), &md5);
    assert!(!res.status.success());
    assert!(String::from_utf8_lossy(&res.stderr).contains("401"));
    // ffmpeg (rtsps: interleaved on the TLS connection): every packet of the source but at most
    // the last video one (ffmpeg does not flush the last PES at BYE).
    let res = ffmpeg(&url("viewer:view-secret@"), &md5);
    assert!(res.status.success(), "ffmpeg: {}", String::from_utf8_lossy(&res.stderr));
    let got = common::framemd5_packets(&std::fs::read_to_string(&md5).unwrap());
    let want = common::source_framemd5(&demo());
    let missing: Vec<_> = want.iter().filter(|p| !got.contains(p)).collect();
    assert!(missing.len() <= 1 && missing.iter().all(|p| p.0 == "0"), "missing: {missing:?}");
    // GStreamer, byte for byte. Offered UDP first, it is refused (461: media stays inside TLS)
    // and falls back to interleaving.
    let want = std::fs::read(demo()).unwrap();
    for transport in ["tcp", "udp+tcp"] {
        let out = dir.path().join(format!("gst-{transport}.ts"));
        let (got, stderr) = common::gst_fetch_with(
            None,
            &url("viewer:view-secret@"),
            &out,
            transport,
            &["tls-validation-flags=0"],
        );
        common::assert_same_bytes(&got, &want, &format!("GStreamer over RTSPS ({stderr})"));
    }
    let log = server.log();
    assert!(log.contains("status=461"), "the UDP offer was refused:\n{log}");
    drop(server);
}

#[test]
fn https_takes_basic_from_the_network_and_plain_http_does_not() {
    let _load = common::load(common::weight::LIGHT);
    require("curl");
    if !common::namespaces_or_skip("HTTPS from another host") {
        return;
    }
    let bed = Testbed::new("isochron_tls").expect("testbed");
    let client = bed.add_host("client").expect("client namespace");
    let dir = tempdir();
    let (cert, key) = self_signed(&dir.path().join("tls"));
    let server = Server::start(
        &dir.path().join("store"),
        ServeOptions {
            http: Some("0.0.0.0:0"),
            config: Some(&config(&cert, &key)),
            ..ServeOptions::default()
        },
    );
    let port = server.http.port();
    let (https, http) =
        (format!("https://{}:{port}", bed.host_ip()), format!("http://{}:{port}", bed.host_ip()));
    // Basic over plain HTTP from elsewhere: refused, and over HTTPS on the same port: taken.
    let (code, body) =
        curl(Some(&client), &["-u", "ops:ops-secret", &format!("{http}/api/v1/disks")]);
    assert_eq!(code, 401, "{body}");
    let (code, body) =
        curl(Some(&client), &["-k", "-u", "ops:ops-secret", &format!("{https}/api/v1/disks")]);
    assert_eq!(code, 200, "{body}");
    // A read-only user may not add a disk; the admin may, and a byte range comes over TLS.
    let spot = dir.path().join("spot");
    std::fs::create_dir_all(&spot).unwrap();
    let add = format!("{{\"spec\":\"{}\"}}", spot.display());
    let disks = format!("{https}/api/v1/disks");
    let json = "Content-Type: application/json";
    let (code, body) =
        curl(Some(&client), &["-k", "-u", "viewer:view-secret", "-H", json, "-d", &add, &disks]);
    assert_eq!(code, 403, "{body}");
    let (code, body) =
        curl(Some(&client), &["-k", "-u", "ops:ops-secret", "-H", json, "-d", &add, &disks]);
    assert_eq!(code, 202, "{body}");
    let (code, body) = curl(
        Some(&client),
        &[
            "-k",
            "-u",
            "viewer:view-secret",
            "-r",
            "0-187",
            "-w",
            "%{size_download}\n%{http_code}",
            &format!("{https}/objects/demo"),
        ],
    );
    // The body, then what curl counted.
    assert_eq!(code, 206);
    assert!(body.ends_with("188"), "188 bytes: {}", body.len());
    // A client that does not trust the certificate stops at the handshake.
    let (code, _) = curl(Some(&client), &["-u", "ops:ops-secret", &disks]);
    assert_eq!(code, 0);
    // The CLI over HTTPS, trusting the pair through ISOCHRON_CA_FILE (its names cover
    // 127.0.0.1); without it the handshake fails and says so.
    let local = format!("https://ops:ops-secret@127.0.0.1:{port}");
    let ls = |ca: Option<&Path>| {
        let mut cmd = Command::new(bin());
        cmd.args(["ls", "--server", &local]);
        match ca {
            Some(ca) => cmd.env("ISOCHRON_CA_FILE", ca),
            None => cmd.env_remove("ISOCHRON_CA_FILE"),
        };
        run(&mut cmd, 30)
    };
    let out = ls(Some(&cert));
    assert!(out.status.success(), "ls over HTTPS: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("demo"));
    let out = ls(None);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("ops-secret"), "no password in messages: {err}");
    drop(server);
    drop(bed);
}

/// Over RTSPS too, a request trickled one byte every 2 s (each its own TLS record) is answered
/// 408 at `request_timeout_s` (4 s here) from its first byte, not kept open by its bytes.
#[test]
fn a_trickled_rtsps_request_is_answered_408_at_the_request_timeout() {
    let _load = common::load(common::weight::LIGHT);
    require("python3");
    let dir = tempdir();
    let (cert, key) = self_signed(&dir.path().join("tls"));
    let config = config(&cert, &key).replace("[rtsp]\n", "[rtsp]\nrequest_timeout_s = 4\n");
    let server = Server::start(
        &dir.path().join("store"),
        ServeOptions { config: Some(&config), ..ServeOptions::default() },
    );
    let rtsps = server.rtsps.expect("an RTSPS listener");
    const TRICKLE: &str = r#"
import socket, ssl, sys, time
port = int(sys.argv[1])
ctx = ssl.create_default_context()
ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
# Before the connection opens: the server's clock starts when its handshake ends, earlier than
# any instant taken after ours returns.
start, answer = time.time(), b""
s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)))
s.settimeout(0.1)
req = b"OPTIONS rtsps://127.0.0.1:%d/demo RTSP/1.0\r\nCSeq: 1\r\n\r\n" % port
for b in req[:-1]:
    try:
        s.sendall(bytes([b]))
    except OSError:
        break
    until = time.time() + 2
    while time.time() < until and not answer:
        try:
            answer += s.recv(512)
        except (socket.timeout, ssl.SSLWantReadError):
            pass
        except OSError:
            break
    if answer or time.time() - start > 20:
        break
print("%.1f" % (time.time() - start), answer.split(b"\r\n")[0].decode(errors="replace"), flush=True)
"#;
    let out = Command::new("python3")
        .args(["-c", TRICKLE, &rtsps.port().to_string()])
        .output()
        .expect("python3");
    let said = String::from_utf8_lossy(&out.stdout);
    let (waited, status) = said.trim().split_once(' ').unwrap_or(("0", ""));
    let waited: f64 = waited.parse().unwrap_or(0.0);
    assert_eq!(
        status,
        "RTSP/1.0 408 Request Time-out",
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!((4.0..7.0).contains(&waited), "408 after {waited} s");
}

/// A live feed watched over RTSPS (issue 28: viewers over UDP, TCP and RTSPS): `ops` publishes
/// the 10 s clip twice over RTSP; ffmpeg watches it live over RTSPS with a viewer's Digest
/// credentials for 5 s, interleaved on the TLS connection: a run of the feed's frames, none
/// missing, from wherever it joined.
#[test]
fn a_live_feed_is_watched_over_rtsps() {
    let _load = common::load(common::weight::PLAYER);
    require("ffmpeg");
    let src = common::media_fixture("h264_aac.mp4");
    let dir = tempdir();
    let (cert, key) = self_signed(&dir.path().join("tls"));
    let server = Server::start(
        &dir.path().join("store"),
        ServeOptions { no_demo: true, config: Some(&config(&cert, &key)), ..Default::default() },
    );
    let port = server.rtsps.expect("an RTSPS listener").port();
    let published = format!("rtsp://ops:ops-secret@127.0.0.1:{}/cam", server.rtsp.port());
    let watched = dir.path().join("watched.mp4");
    let watch = std::thread::scope(|s| {
        let feed = s.spawn(|| {
            crate::live::publish_looped(Command::new("ffmpeg"), &src, 2, &published, "tcp")
        });
        // Well after the feed's first key frame.
        std::thread::sleep(std::time::Duration::from_secs(3));
        let url = format!("rtsps://viewer:view-secret@127.0.0.1:{port}/cam");
        let watch = run(
            Command::new("timeout")
                .args(["-k", "5", "30", "ffmpeg", "-nostdin", "-v", "error", "-i", &url])
                .args(["-t", "5", "-map", "0", "-c", "copy", "-y"])
                .arg(&watched),
            40,
        );
        let feed = feed.join().unwrap();
        assert!(feed.status.success(), "publishing: {}", String::from_utf8_lossy(&feed.stderr));
        watch
    });
    assert!(
        watch.status.success(),
        "ffmpeg over RTSPS: {}",
        String::from_utf8_lossy(&watch.stderr)
    );
    let one = crate::native::decoded_video(&src);
    let want: Vec<String> = one.iter().chain(&one).cloned().collect();
    // Less the last two frames: `-t` cuts in decode order.
    let got = crate::native::decoded_video(&watched);
    let got = &got[..got.len().saturating_sub(2)];
    crate::live::a_run_of(got, &want, false, "ffmpeg watching over RTSPS");
    assert!(got.len() >= 4 * 25, "{} frames", got.len());
}
