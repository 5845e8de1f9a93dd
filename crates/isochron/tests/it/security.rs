//! A session belongs to its client (RFC 2326 §16, session hijacking): a stranger in a network
//! namespace of its own, holding the ids of two GStreamer players' sessions (UDP and TCP), gets
//! 454 for TEARDOWN, PAUSE, PLAY, SET_PARAMETER and GET_PARAMETER on them, and the players end
//! byte-exact; the sessions API shows ids and client addresses to `admin` only. And a request
//! trickled one byte at a time is answered 408 at `request_timeout_s`, not kept open by its bytes.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{ServeOptions, Server, curl, demo, tempdir};
use isochron_loadgen::testbed::Testbed;

/// Sends `request` (CRLF line ends, `CSeq` included) on `conn` and returns the response's status.
fn status_of(conn: &mut TcpStream, request: &str) -> u16 {
    conn.write_all(request.as_bytes()).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    // The response's head, then its body (Content-Length), if any.
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = conn.read(&mut buf).expect("a response");
        assert!(n > 0, "the server closed the connection: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    let line = text.lines().next().unwrap_or_default();
    line.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("{text}"))
}

/// The sessions `GET /api/v1/sessions` lists, as `(id, client, state)`.
fn sessions(json: &str) -> Vec<(String, String, String)> {
    let v: serde_json::Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let f = |k: &str| s[k].as_str().unwrap_or_default().to_owned();
            (f("id"), f("client"), f("state"))
        })
        .collect()
}

#[test]
fn a_stranger_holding_a_session_id_can_do_nothing_with_it() {
    let _load = common::load(common::weight::PLAYER);
    common::require("gst-launch-1.0");
    if !common::namespaces_or_skip("session hijacking from another address") {
        return;
    }
    let bed = Testbed::new("isochron_hijack").expect("testbed");
    let stranger = bed.add_host("stranger").expect("stranger namespace");
    let dir = tempdir();
    let server = Server::start(
        &dir.path().join("store"),
        ServeOptions {
            rtsp: Some("0.0.0.0:0"),
            http: Some("0.0.0.0:0"),
            ..ServeOptions::default()
        },
    );
    let want = std::fs::read(demo()).unwrap();
    let rtsp = SocketAddr::from((bed.host_ip(), server.rtsp.port()));
    let api = format!("http://{}:{}/api/v1/sessions", bed.host_ip(), server.http.port());

    std::thread::scope(|s| {
        let players: Vec<_> = ["udp", "tcp"]
            .into_iter()
            .map(|transport| {
                let (dir, url) = (dir.path(), server.url("demo"));
                s.spawn(move || {
                    let out = dir.join(format!("gst-{transport}.ts"));
                    (transport, common::gst_fetch(&url, &out, transport))
                })
            })
            .collect();

        // Both players are playing: loopback (trusted, an admin with no users configured) sees
        // their ids and addresses.
        let deadline = Instant::now() + Duration::from_secs(30);
        let ids = loop {
            let listed = sessions(&server.http_get("/api/v1/sessions"));
            let playing: Vec<_> = listed.iter().filter(|s| s.2 == "playing").collect();
            if playing.len() == 2 {
                assert!(playing.iter().all(|s| s.1.starts_with("127.0.0.1:")), "{listed:?}");
                break playing.iter().map(|s| s.0.clone()).collect::<Vec<_>>();
            }
            assert!(Instant::now() < deadline, "two players playing: {listed:?}");
            std::thread::sleep(Duration::from_millis(100));
        };
        assert!(ids.iter().all(|id| id.len() == 16), "{ids:?}");

        // The stranger, from its own address, sees neither ids nor addresses…
        let (code, body) = curl(Some(&stranger), &[&api]);
        assert_eq!(code, 200, "{body}");
        let seen = sessions(&body);
        assert_eq!(seen.len(), 2, "{body}");
        for (id, client, _) in &seen {
            assert!(!ids.contains(id) && client.is_empty(), "the stranger saw {id} {client}");
        }
        // …and, told the ids, can do nothing with them.
        let statuses = stranger
            .in_namespace(move || {
                let mut conn = TcpStream::connect(rtsp).expect("the stranger connects");
                conn.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let url = format!("rtsp://{rtsp}/demo");
                let mut statuses = Vec::new();
                let mut cseq = 0;
                for id in &ids {
                    for (method, extra, body) in [
                        ("PLAY", "Range: npt=10-\r\n", ""),
                        ("PAUSE", "", ""),
                        (
                            "SET_PARAMETER",
                            "Content-Type: text/parameters\r\n",
                            "x-isochron-rate: 10\r\n",
                        ),
                        ("GET_PARAMETER", "", ""),
                        ("TEARDOWN", "", ""),
                    ] {
                        cseq += 1;
                        let request = format!(
                            "{method} {url} RTSP/1.0\r\nCSeq: {cseq}\r\nSession: {id}\r\n\
                                 {extra}Content-Length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        statuses.push((method, status_of(&mut conn, &request)));
                    }
                }
                statuses
            })
            .expect("in the stranger's namespace");
        assert_eq!(statuses.len(), 10);
        for (method, status) in &statuses {
            assert_eq!(*status, 454, "{method} on another's session: {statuses:?}");
        }

        for player in players {
            let (transport, (got, stderr)) = player.join().unwrap();
            common::assert_same_bytes(
                &got,
                &want,
                &format!("GStreamer over {transport}, its session attacked ({stderr})"),
            );
        }
    });
    drop(server);
    drop(bed);
}

/// With users: the sessions API shows ids and addresses to a user with `admin`, not to a reader.
#[test]
fn only_admins_see_session_ids_and_clients() {
    let _load = common::load(common::weight::PLAYER);
    common::require("gst-launch-1.0");
    let dir = tempdir();
    let config = "[auth]\nanonymous = []\n\n[[auth.users]]\nname = \"ops\"\npassword = \"ops\"\n\
                  permissions = [\"read\", \"admin\"]\n\n[[auth.users]]\nname = \"viewer\"\n\
                  password = \"viewer\"\npermissions = [\"read\"]\n";
    let server = Server::start(
        &dir.path().join("store"),
        ServeOptions { config: Some(config), ..ServeOptions::default() },
    );
    // A session to list: a reader's GStreamer, playing.
    let url = server.url("demo").replace("rtsp://", "rtsp://viewer:viewer@");
    let out = dir.path().join("viewer.ts");
    let player = std::thread::spawn(move || common::gst_fetch(&url, &out, "udp"));
    let api = format!("http://{}/api/v1/sessions", server.http);
    let deadline = Instant::now() + Duration::from_secs(10);
    let (code, full) = loop {
        let (code, body) = curl(None, &["-u", "ops:ops", &api]);
        let playing = sessions(&body).iter().any(|s| s.2 == "playing");
        if code != 200 || playing || Instant::now() > deadline {
            break (code, body);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(code, 200, "{full}");
    let full = sessions(&full);
    assert_eq!(full.len(), 1, "{full:?}");
    assert_eq!(full[0].0.len(), 16);
    assert!(full[0].1.starts_with("127.0.0.1:"), "{full:?}");
    let (code, body) = curl(None, &["-u", "viewer:viewer", &api]);
    assert_eq!(code, 200, "{body}");
    let seen = sessions(&body);
    assert_eq!(seen.len(), 1, "{body}");
    assert_ne!(seen[0].0, full[0].0);
    assert!(seen[0].1.is_empty(), "{body}");
    let (got, stderr) = player.join().unwrap();
    common::assert_same_bytes(&got, &std::fs::read(demo()).unwrap(), &format!("viewer ({stderr})"));
}

/// One byte every 2 s does not keep a request open: 408 at `request_timeout_s` (4 s here),
/// counted from the request's first byte.
#[test]
fn a_trickled_request_is_answered_408_at_the_request_timeout() {
    let _load = common::load(common::weight::LIGHT);
    let dir = tempdir();
    let server = Server::start(
        &dir.path().join("store"),
        ServeOptions { config: Some("[rtsp]\nrequest_timeout_s = 4\n"), ..ServeOptions::default() },
    );
    let mut conn = TcpStream::connect(server.rtsp).unwrap();
    conn.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let request = format!("OPTIONS rtsp://{}/demo RTSP/1.0\r\nCSeq: 1\r\n\r\n", server.rtsp);
    let start = Instant::now();
    let mut answer = Vec::new();
    for byte in request.bytes().take(request.len() - 1) {
        if conn.write_all(&[byte]).is_err() {
            break;
        }
        let until = Instant::now() + Duration::from_secs(2);
        let mut buf = [0u8; 512];
        while Instant::now() < until {
            match conn.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
                Err(_) => {}
            }
        }
        if !answer.is_empty() || start.elapsed() > Duration::from_secs(20) {
            break;
        }
    }
    let waited = start.elapsed();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("RTSP/1.0 408"), "after {waited:?}: {answer:?}");
    assert!(
        waited >= Duration::from_secs(4) && waited < Duration::from_secs(7),
        "408 after {waited:?}"
    );
}
