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
use isochron_loadgen::testbed::{Host, Testbed};

/// Sends `request` (CRLF line ends, `CSeq` included) on `conn` and returns the response's status.
fn status_of(conn: &mut TcpStream, request: &str) -> u16 {
    let text = response_head(conn, request);
    let line = text.lines().next().unwrap_or_default();
    line.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("{text}"))
}

/// Sends `request` on `conn` and returns the response's head (its body, if any, is left unread:
/// the caller's next request goes on another connection).
fn response_head(conn: &mut TcpStream, request: &str) -> String {
    conn.write_all(request.as_bytes()).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = common::read_some(conn, &mut buf).expect("a response");
        assert!(n > 0, "the server closed the connection: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// An RFC 2069 Digest `Authorization` (MD5, no qop) for `method uri` as `user:password`.
fn digest(user: &str, password: &str, nonce: &str, method: &str, uri: &str) -> String {
    let md5 = |s: String| format!("{:x}", <md5::Md5 as md5::Digest>::digest(s.as_bytes()));
    let ha1 = md5(format!("{user}:isochron:{password}"));
    let ha2 = md5(format!("{method}:{uri}"));
    let response = md5(format!("{ha1}:{nonce}:{ha2}"));
    format!(
        "Digest username=\"{user}\", realm=\"isochron\", nonce=\"{nonce}\", uri=\"{uri}\", \
         response=\"{response}\""
    )
}

/// A fresh nonce from the server's MD5 challenge to a DESCRIBE without credentials.
fn nonce(rtsp: SocketAddr) -> String {
    let mut conn = TcpStream::connect(rtsp).unwrap();
    let head = response_head(
        &mut conn,
        &format!("DESCRIBE rtsp://{rtsp}/demo RTSP/1.0\r\nCSeq: 1\r\n\r\n"),
    );
    let md5 = head
        .lines()
        .find(|l| l.starts_with("WWW-Authenticate: Digest") && !l.contains("SHA-256"))
        .unwrap_or_else(|| panic!("an MD5 challenge: {head}"));
    let start = md5.find("nonce=\"").expect("a nonce") + 7;
    md5[start..start + md5[start..].find('"').unwrap()].to_owned()
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
    let server = Server::start(&dir.path().join("store"), ServeOptions::everywhere(None));
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

/// With users: the sessions API shows ids and addresses to a user with `admin`, not to a reader;
/// and a reader holding the admin's session id (from the same address) gets 454 for every
/// request on it, while the admin's GStreamer plays on byte-exact.
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
    // A session to list: the admin's GStreamer, playing.
    let url = server.url("demo").replace("rtsp://", "rtsp://ops:ops@");
    let out = dir.path().join("admin.ts");
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
    // The reader, told the id, from the same address with its own good credentials.
    let rtsp = server.rtsp;
    let uri = format!("rtsp://{rtsp}/demo");
    for (method, extra) in [
        ("PAUSE", ""),
        ("PLAY", "Range: npt=5-\r\n"),
        ("SET_PARAMETER", "Content-Type: text/parameters\r\nContent-Length: 0\r\n"),
        ("TEARDOWN", ""),
    ] {
        let mut conn = TcpStream::connect(rtsp).unwrap();
        let answer = digest("viewer", "viewer", &nonce(rtsp), method, &uri);
        let request = format!(
            "{method} {uri} RTSP/1.0\r\nCSeq: 3\r\nSession: {}\r\nAuthorization: {answer}\r\n\
             {extra}\r\n",
            full[0].0
        );
        assert_eq!(status_of(&mut conn, &request), 454, "the reader's {method} on the admin's");
    }
    let (got, stderr) = player.join().unwrap();
    common::assert_same_bytes(&got, &std::fs::read(demo()).unwrap(), &format!("admin ({stderr})"));
}

/// One byte every 2 s does not keep a request open: 408 at `request_timeout_s` (4 s here),
/// counted from the connection's opening for its first request (from a later request's first
/// byte).
#[test]
fn a_trickled_request_is_answered_408_at_the_request_timeout() {
    let _load = common::load(common::weight::LIGHT);
    let dir = tempdir();
    let server = Server::start(
        &dir.path().join("store"),
        ServeOptions { config: Some("[rtsp]\nrequest_timeout_s = 4\n"), ..ServeOptions::default() },
    );
    // Before the connection opens: the server's clock starts at its accept, which is earlier
    // than any instant taken after `connect` returns.
    let start = Instant::now();
    let mut conn = TcpStream::connect(server.rtsp).unwrap();
    conn.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let request = format!("OPTIONS rtsp://{}/demo RTSP/1.0\r\nCSeq: 1\r\n\r\n", server.rtsp);
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

/// A Digest answer is good for its own Request-URI only, and wrong answers from one address slow
/// down (exponentially, capped) and are logged.
#[test]
fn digest_answers_are_for_one_uri_and_guessing_slows_down() {
    let _load = common::load(common::weight::LIGHT);
    let dir = tempdir();
    let config = "[auth]\nanonymous = []\n\n[[auth.users]]\nname = \"ops\"\npassword = \"right\"\n\
                  permissions = [\"read\"]\n";
    let server = Server::start(
        &dir.path().join("store"),
        ServeOptions { config: Some(config), ..ServeOptions::default() },
    );
    let rtsp = server.rtsp;
    let describe = |uri: &str, authorization: &str| {
        let mut conn = TcpStream::connect(rtsp).unwrap();
        status_of(
            &mut conn,
            &format!(
                "DESCRIBE {uri} RTSP/1.0\r\nCSeq: 2\r\nAuthorization: {authorization}\r\n\r\n"
            ),
        )
    };
    // A right answer opens the URI it was made for, and no other.
    let demo = format!("rtsp://{rtsp}/demo");
    let n = nonce(rtsp);
    let answer = digest("ops", "right", &n, "DESCRIBE", &demo);
    assert_eq!(describe(&demo, &answer), 200);
    assert_eq!(describe(&format!("{demo}/"), &answer), 401, "an answer for {demo} used elsewhere");
    assert_eq!(
        describe(&format!("{demo}/"), &digest("ops", "right", &n, "DESCRIBE", &format!("{demo}/"))),
        200
    );

    // Ten wrong answers: the first few cost nothing, then each waits longer (0.1 s, 0.2 s, …,
    // capped at 1 s): 3.5 s in all.
    let start = Instant::now();
    for _ in 0..10 {
        let n = nonce(rtsp);
        assert_eq!(describe(&demo, &digest("ops", "guess", &n, "DESCRIBE", &demo)), 401);
    }
    let took = start.elapsed();
    assert!(took >= Duration::from_secs(3), "ten wrong answers took {took:?}");
    assert!(
        server.log().contains("answers from this address and user are slowed"),
        "{}",
        server.log()
    );
    // The right answer still opens (after its turn), and clears the count.
    let n = nonce(rtsp);
    assert_eq!(describe(&demo, &digest("ops", "right", &n, "DESCRIBE", &demo)), 200);
    let t = Instant::now();
    let n = nonce(rtsp);
    assert_eq!(describe(&demo, &digest("ops", "right", &n, "DESCRIBE", &demo)), 200);
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "a right answer after a right one waits {:?}",
        t.elapsed()
    );
}

/// Slots are not held for nothing: a connection that set up no session is closed after
/// `idle_timeout_s` of quiet, one that did may stay quiet; a session set up and never played
/// ends at `setup_timeout_s`.
#[test]
fn idle_connections_and_sessions_never_played_free_their_slots() {
    let _load = common::load(common::weight::LIGHT);
    let dir = tempdir();
    let server = Server::start(
        &dir.path().join("store"),
        ServeOptions {
            config: Some("[rtsp]\nidle_timeout_s = 2\nsetup_timeout_s = 3\n"),
            ..ServeOptions::default()
        },
    );
    let rtsp = server.rtsp;
    let url = format!("rtsp://{rtsp}/demo");
    let connect = || {
        let c = TcpStream::connect(rtsp).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c
    };
    // SETUP over TCP on `conn`: the session's id.
    let setup = |conn: &mut TcpStream| {
        let head = response_head(
            conn,
            &format!(
                "SETUP {url}/trackID=0 RTSP/1.0\r\nCSeq: 1\r\n\
                 Transport: RTP/AVP/TCP;unicast;interleaved=0-1\r\n\r\n"
            ),
        );
        assert!(head.starts_with("RTSP/1.0 200"), "{head}");
        let line = head.lines().find(|l| l.starts_with("Session: ")).expect("a Session header");
        line["Session: ".len()..].split(';').next().unwrap().to_owned()
    };
    // A connection that asked for the options, and one that set up a session over TCP.
    let mut asked = connect();
    assert_eq!(status_of(&mut asked, &format!("OPTIONS {url} RTSP/1.0\r\nCSeq: 1\r\n\r\n")), 200);
    let mut holder = connect();
    let session = setup(&mut holder);
    // The quiet connection without a session is closed at about 2 s.
    let t = Instant::now();
    let mut buf = [0u8; 64];
    assert_eq!(common::read_some(&mut asked, &mut buf).unwrap_or(0), 0, "closed");
    let closed_after = t.elapsed();
    assert!(closed_after < Duration::from_secs(4), "closed after {closed_after:?}");
    // The session, never played, ends at 3 s; its connection stays open and is told so.
    std::thread::sleep(Duration::from_millis(1500));
    let play = format!("PLAY {url} RTSP/1.0\r\nCSeq: 2\r\nSession: {session}\r\n\r\n");
    assert_eq!(status_of(&mut holder, &play), 454, "a session never played lives 3 s");
    // A session played in time is not ended.
    let mut player = connect();
    let session = setup(&mut player);
    let play = format!("PLAY {url} RTSP/1.0\r\nCSeq: 2\r\nSession: {session}\r\n\r\n");
    player.write_all(play.as_bytes()).unwrap();
    std::thread::sleep(Duration::from_secs(4));
    let listed = sessions(&server.http_get("/api/v1/sessions"));
    assert!(listed.iter().any(|s| s.0 == session), "the played session lives: {listed:?}");
}

/// The namespaces of a crowd test: the crowd's, and a player's on another network (named
/// `beds`); `None` where namespaces cannot be made here (the test is skipped).
fn crowd_and_player(what: &str, beds: (&str, &str)) -> Option<(Testbed, Host, Testbed, Host)> {
    common::require("gst-launch-1.0");
    common::require("python3");
    if !common::namespaces_or_skip(what) {
        return None;
    }
    let crowd_bed = Testbed::new(beds.0).expect("testbed");
    let crowd = crowd_bed.add_host("crowd").expect("crowd namespace");
    let player_bed = Testbed::new(beds.1).expect("testbed");
    let player = player_bed.add_host("player").expect("player namespace");
    Some((crowd_bed, crowd, player_bed, player))
}

/// The crowd of [`a_crowd_of_addresses_in_one_network_cannot_fill_the_tables`]: from each source
/// address given, `idle` connections that say nothing and one that sends `setups` SETUPs and
/// never plays; prints how many SETUPs got 200, then holds everything open until killed.
const CROWD: &str = r#"
import socket, sys, time
server, port, addrs = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
idle, setups = int(sys.argv[4]), int(sys.argv[5])
held, ok = [], 0
def conn(a):
    s = socket.socket()
    s.bind((a, 0))
    s.settimeout(5)
    try:
        s.connect((server, port))
    except OSError:
        pass
    return s
for a in addrs:
    for _ in range(idle):
        held.append(conn(a))
    s = conn(a)
    for i in range(setups):
        req = ("SETUP rtsp://%s:%d/demo RTSP/1.0\r\nCSeq: %d\r\n"
               "Transport: RTP/AVP;unicast;client_port=%d-%d\r\n\r\n"
               % (server, port, i, 20000 + 2 * i, 20001 + 2 * i))
        try:
            s.sendall(req.encode())
            line = s.recv(4096).decode(errors="replace").split("\r\n")[0]
        except OSError:
            line = ""
        if line.startswith("RTSP/1.0 200"):
            ok += 1
    held.append(s)
print(ok, flush=True)
time.sleep(3600)
"#;

/// With clients counted by /24 (`rtsp.client_prefix_v4 = 24`), 4 and then 64 addresses of one
/// network that set up sessions they never play and hold idle connections get one network's
/// share: a GStreamer player on another network starts and plays byte-exact meanwhile, and the
/// one already playing never notices.
#[test]
fn a_crowd_of_addresses_in_one_network_cannot_fill_the_tables() {
    let _load = common::load(common::weight::PLAYER);
    let Some((crowd_bed, crowd, player_bed, player)) =
        crowd_and_player("a crowd of addresses", ("isochron_crowd", "isochron_viewers"))
    else {
        return;
    };
    let mut addrs = vec![crowd.ip];
    for k in 100..163u8 {
        let a = std::net::Ipv4Addr::new(
            crowd_bed.subnet().octets()[0],
            crowd_bed.subnet().octets()[1],
            crowd_bed.subnet().octets()[2],
            k,
        );
        crowd_bed.add_alias(&crowd, a).expect("an alias");
        addrs.push(a);
    }
    let dir = tempdir();
    let config = "[rtsp]\nclient_prefix_v4 = 24\nmax_sessions = 200\nmax_sessions_per_client = 64\n\
                  max_connections_per_client = 40\n";
    let server = Server::start(&dir.path().join("store"), ServeOptions::everywhere(Some(config)));
    let want = std::fs::read(demo()).unwrap();
    let url = format!("rtsp://{}:{}/demo", player_bed.host_ip(), server.rtsp.port());
    let fetch = |name: &str, transport: &str| {
        let out = dir.path().join(name);
        let (got, stderr) = common::gst_fetch_in(Some(&player), &url, &out, transport);
        common::assert_same_bytes(&got, &want, &format!("{name} ({stderr})"));
    };
    std::thread::scope(|s| {
        // A player already playing when the crowd comes.
        let early = s.spawn(|| fetch("early.ts", "udp"));
        std::thread::sleep(Duration::from_secs(2));
        let run_crowd = |addrs: &[std::net::Ipv4Addr]| {
            let list: Vec<String> = addrs.iter().map(ToString::to_string).collect();
            let mut child = crowd
                .command("python3")
                .args(["-c", CROWD, &crowd_bed.host_ip().to_string()])
                .arg(server.rtsp.port().to_string())
                .arg(list.join(","))
                .args(["2", "8"])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("python3");
            let mut line = String::new();
            std::io::BufRead::read_line(
                &mut std::io::BufReader::new(child.stdout.take().unwrap()),
                &mut line,
            )
            .unwrap();
            (child, line.trim().parse::<usize>().unwrap_or(usize::MAX))
        };
        // Four addresses, then sixty-four: one network's share of sessions, whatever the count.
        let (mut four, ok4) = run_crowd(&addrs[..4]);
        assert_eq!(ok4, 32, "four addresses, eight sessions each, within the network's 64");
        let (mut many, ok64) = run_crowd(&addrs[4..]);
        assert_eq!(ok4 + ok64, 64, "sixty-four addresses of one /24 hold its 64 sessions");
        // A new player on another network starts and plays to the end meanwhile.
        fetch("late.ts", "tcp");
        early.join().unwrap();
        let metrics = server.http_get("/metrics");
        assert!(
            !metrics.contains("isochron_rtsp_connections_refused_total{cap=\"per_client\"} 0"),
            "the crowd's connections were capped: {metrics}"
        );
        for c in [&mut four, &mut many] {
            let _ = c.kill();
            let _ = c.wait();
        }
    });
    drop(server);
    drop(player_bed);
    drop(crowd_bed);
}

/// The crowd of [`the_reserved_slots_are_for_players_that_prove_themselves`]: opens connections
/// from `addr` and asks each for OPTIONS until one is not answered 200, SETUPs `setups` sessions
/// on the first and never plays them; prints `<connections answered 200> <status of the next>
/// <SETUPs answered 200>`, then holds everything open until killed.
const RESERVE_CROWD: &str = r#"
import socket, sys, time
server, port, addr, setups = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
held, ok, refused = [], 0, ""
def ask(s, req):
    try:
        s.sendall(req.encode())
        return s.recv(4096).decode(errors="replace").split("\r\n")[0]
    except OSError:
        return "closed"
while len(held) < 200:
    s = socket.socket()
    s.bind((addr, 0))
    s.settimeout(5)
    s.connect((server, port))
    line = ask(s, "OPTIONS rtsp://%s:%d/demo RTSP/1.0\r\nCSeq: 1\r\n\r\n" % (server, port))
    if not line.startswith("RTSP/1.0 200"):
        refused = line.split(" ")[1] if " " in line else line
        break
    held.append(s)
set_up = 0
for i in range(setups):
    line = ask(held[0], "SETUP rtsp://%s:%d/demo RTSP/1.0\r\nCSeq: %d\r\n"
               "Transport: RTP/AVP;unicast;client_port=%d-%d\r\n\r\n"
               % (server, port, i + 2, 20000 + 2 * i, 20001 + 2 * i))
    if line.startswith("RTSP/1.0 200"):
        set_up += 1
print(len(held), refused, set_up, flush=True)
time.sleep(3600)
"#;

/// The last slots of both tables are kept (`rtsp.reserved_connections`,
/// `rtsp.reserved_sessions`): an anonymous crowd fills them up to the reserve and no further (a
/// connection on a reserved slot is challenged, and closed if it proves nothing), and a
/// GStreamer player with credentials, from another network, still starts and plays byte-exact.
#[test]
fn the_reserved_slots_are_for_players_that_prove_themselves() {
    let _load = common::load(common::weight::PLAYER);
    let Some((crowd_bed, crowd, player_bed, player)) =
        crowd_and_player("the reserved slots", ("isochron_resv", "isochron_resp"))
    else {
        return;
    };
    let dir = tempdir();
    let config = "[rtsp]\nmax_connections = 30\nreserved_connections = 10\n\
                  max_connections_per_client = 100\nmax_sessions = 30\nreserved_sessions = 10\n\
                  setup_timeout_s = 120\n\n[auth]\nanonymous = [\"read\"]\n\n[[auth.users]]\n\
                  name = \"viewer\"\npassword = \"pw\"\npermissions = [\"read\"]\n";
    let server = Server::start(&dir.path().join("store"), ServeOptions::everywhere(Some(config)));
    let host = crowd_bed.host_ip().to_string();
    let mut child = crowd
        .command("python3")
        .args(["-c", RESERVE_CROWD, &host, &server.rtsp.port().to_string()])
        .arg(crowd.ip.to_string())
        .arg("25")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let mut words = line.split_whitespace();
    let (held, refused, set_up) = (words.next(), words.next(), words.next());
    assert_eq!(
        (held, refused, set_up),
        (Some("20"), Some("401"), Some("20")),
        "the crowd holds 30 - 10 connections, is challenged on the 21st, and sets up 30 - 10 \
         sessions: {line:?}"
    );
    // Anonymous from another network: challenged on a reserved slot.
    let url = format!("rtsp://{}:{}/demo", player_bed.host_ip(), server.rtsp.port());
    let out = dir.path().join("anonymous.ts");
    let (got, stderr) = common::gst_fetch_in(Some(&player), &url, &out, "tcp");
    assert!(got.is_empty(), "an anonymous player took a reserved slot: {stderr}");
    // With credentials: a reserved connection and a reserved session, byte-exact.
    let want = std::fs::read(demo()).unwrap();
    let url = format!("rtsp://viewer:pw@{}:{}/demo", player_bed.host_ip(), server.rtsp.port());
    let out = dir.path().join("viewer.ts");
    let (got, stderr) = common::gst_fetch_in(Some(&player), &url, &out, "tcp");
    common::assert_same_bytes(&got, &want, &format!("the viewer ({stderr})"));
    let metrics = server.http_get("/metrics");
    assert!(
        !metrics.contains("isochron_rtsp_connections_refused_total{cap=\"reserve\"} 0"),
        "no connection was refused on a reserved slot: {metrics}"
    );
    let _ = child.kill();
    let _ = child.wait();
    drop(server);
    drop(player_bed);
    drop(crowd_bed);
}

/// A wave of players behind one address (a NAT): each sets up and plays a UDP session, waits
/// for the server's BYE at the end, and vanishes without TEARDOWN. Prints `<served> <refused>
/// <cut>` (served: every step 200 and the BYE seen).
const NAT_WAVE: &str = r#"
import socket, sys, threading, time
server, port, addr, name, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
counts = {"served": 0, "refused": 0, "cut": 0}
lock = threading.Lock()
def count(k):
    with lock:
        counts[k] += 1
def pair():
    while True:
        rtp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rtp.bind((addr, 0))
        p = rtp.getsockname()[1]
        if p % 2:
            rtp.close()
            continue
        rtcp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            rtcp.bind((addr, p + 1))
        except OSError:
            rtp.close()
            continue
        return rtp, rtcp, p
def player(i):
    url = "rtsp://%s:%d/%s" % (server, port, name)
    rtp, rtcp, p = pair()
    rtp.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
    c = socket.socket()
    c.bind((addr, 0))
    c.settimeout(10)
    try:
        c.connect((server, port))
        c.sendall(("SETUP %s/trackID=0 RTSP/1.0\r\nCSeq: 1\r\n"
                   "Transport: RTP/AVP;unicast;client_port=%d-%d\r\n\r\n" % (url, p, p + 1)).encode())
        head = c.recv(4096).decode(errors="replace")
        if not head.startswith("RTSP/1.0 200"):
            count("refused")
            return
        session = [l for l in head.split("\r\n") if l.startswith("Session:")][0][8:].split(";")[0].strip()
        c.sendall(("PLAY %s RTSP/1.0\r\nCSeq: 2\r\nSession: %s\r\n\r\n" % (url, session)).encode())
        if not c.recv(4096).decode(errors="replace").startswith("RTSP/1.0 200"):
            count("refused")
            return
    except OSError:
        count("refused")
        return
    rtcp.settimeout(1)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            data = rtcp.recv(2048)
        except socket.timeout:
            continue
        # A compound packet: walk it for a BYE (packet type 203).
        o = 0
        while o + 4 <= len(data):
            if data[o + 1] == 203:
                count("served")
                for s in (rtp, rtcp, c):
                    s.close()
                return
            o += 4 * ((data[o + 2] << 8 | data[o + 3]) + 1)
    count("cut")
threads = [threading.Thread(target=player, args=(i,)) for i in range(n)]
for t in threads:
    t.start()
    time.sleep(0.01)
for t in threads:
    t.join()
print(counts["served"], counts["refused"], counts["cut"], flush=True)
"#;

/// 200 players behind one address play an 8 s clip to the end and vanish without TEARDOWN; 5 s
/// later 200 more start from the same address: none is refused (a session whose stream ended
/// frees its client's slot at once, not at its timeout; the cap is 256 a client).
#[test]
fn two_waves_of_players_behind_one_address_are_all_served() {
    let _load = common::load(common::weight::PLAYER);
    common::require("python3");
    if !common::namespaces_or_skip("players behind one address") {
        return;
    }
    let bed = Testbed::new("isochron_nat").expect("testbed");
    let nat = bed.add_host("nat").expect("a namespace");
    let clip = common::fixture("low8");
    let dir = tempdir();
    let data = dir.path().join("store");
    let out = common::run(
        std::process::Command::new(common::bin()).arg("ingest").arg("--data").arg(&data).arg(&clip),
        120,
    );
    assert!(out.status.success(), "ingest: {}", String::from_utf8_lossy(&out.stderr));
    let server = Server::start(&data, ServeOptions::everywhere(None));
    let wave = || {
        let out = nat
            .command("python3")
            .args(["-c", NAT_WAVE, &bed.host_ip().to_string()])
            .arg(server.rtsp.port().to_string())
            .args([&nat.ip.to_string(), "low8", "200"])
            .output()
            .expect("python3");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let first = wave();
    std::thread::sleep(Duration::from_secs(5));
    let second = wave();
    assert_eq!(
        (first.as_str(), second.as_str()),
        ("200 0 0", "200 0 0"),
        "served refused cut, per wave\n{}",
        server.log().lines().rev().take(40).collect::<Vec<_>>().join("\n")
    );
}
