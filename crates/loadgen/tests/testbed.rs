//! The network-namespace testbed on the real kernel: reachability, shaping measured with
//! iperf3, UDP loss from the nftables rule, two testbeds at once, and nothing left behind after
//! a drop (also after a panic) or a killed process.
//!
//! Needs root; when not root (and not in CI) each test prints why and passes. As root, a
//! missing tool (iproute2, nftables, iperf3, ping) fails the test.
#![allow(clippy::print_stderr)] // tests report what they measured on stderr

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use isochron_loadgen::testbed::{Host, Testbed, wait_listening};

const PREFIX: &str = "itest";

/// Whether the test can run; false (with the reason printed) only when not root outside CI.
fn can_run(test: &str) -> bool {
    match Testbed::available() {
        Ok(()) => {
            let _ = Testbed::cleanup_stale(PREFIX);
            true
        }
        Err(why) if !Testbed::is_root() && std::env::var_os("CI").is_none() => {
            eprintln!("{test}: skipped: {why}");
            false
        }
        Err(why) => panic!("{test}: the testbed must run here: {why}"),
    }
}

fn ping(from: &Host, to: Ipv4Addr) -> bool {
    from.command("ping")
        .args(["-c", "1", "-W", "2", &to.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("running ping (iputils-ping)")
        .success()
}

fn netns_list() -> String {
    String::from_utf8(Command::new("ip").args(["netns", "list"]).output().unwrap().stdout).unwrap()
}

fn link_names() -> Vec<String> {
    let out = Command::new("ip").args(["-o", "link", "show"]).output().unwrap().stdout;
    String::from_utf8(out)
        .unwrap()
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n).to_string())
        .collect()
}

/// Asserts nothing of a testbed (its namespaces and interfaces) is left.
fn assert_gone(namespaces: &[String], interfaces: &[String]) {
    let list = netns_list();
    let listed: Vec<&str> = list.lines().filter_map(|l| l.split_whitespace().next()).collect();
    for ns in namespaces {
        assert!(!listed.contains(&ns.as_str()), "namespace {ns} left: {list}");
    }
    let links = link_names();
    for i in interfaces {
        assert!(!links.contains(i), "interface {i} left: {links:?}");
    }
}

#[test]
fn hosts_reach_each_other_and_the_root_namespace() {
    if !can_run("hosts_reach_each_other_and_the_root_namespace") {
        return;
    }
    let tb = Testbed::new(PREFIX).unwrap();
    let a = tb.add_host("a").unwrap();
    let b = tb.add_host("b").unwrap();
    assert_ne!(a.ip, b.ip);
    assert_eq!(a.ip.octets()[..3], tb.host_ip().octets()[..3]);
    assert!(ping(&a, b.ip), "a → b");
    assert!(ping(&b, a.ip), "b → a");
    assert!(ping(&a, tb.host_ip()), "a → bridge");
    assert!(ping(&b, tb.host_ip()), "b → bridge");
    // A socket in the root namespace is reachable at host_ip() (where etcd would listen).
    let listener = std::net::TcpListener::bind((tb.host_ip(), 0)).unwrap();
    let to = listener.local_addr().unwrap();
    let connected = a.in_namespace(move || std::net::TcpStream::connect(to).is_ok()).unwrap();
    assert!(connected, "a → {to}");
    // An alias on b is reachable from a, and from hosts added afterwards.
    let alias = Ipv4Addr::new(10, 77, 0, 1);
    tb.add_alias(&b, alias).unwrap();
    let c = tb.add_host("c").unwrap();
    assert!(ping(&a, alias), "a → alias");
    assert!(ping(&c, alias), "c → alias");
}

#[test]
fn shaping_limits_both_directions() {
    if !can_run("shaping_limits_both_directions") {
        return;
    }
    const RATE: u64 = 50_000_000;
    let tb = Testbed::new(PREFIX).unwrap();
    let shaped = tb.add_host("shaped").unwrap();
    let free = tb.add_host("free").unwrap();
    shaped.shape(RATE).unwrap();
    let mut server = free
        .command("iperf3")
        .args(["-s", "-B", &free.ip.to_string(), "-p", "5201"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("running iperf3");
    wait_listening(server.id(), 5201, Duration::from_secs(10)).unwrap();
    for (dir, reverse) in [("shaped → free", false), ("free → shaped", true)] {
        let mut c = shaped.command("iperf3");
        c.args(["-c", &free.ip.to_string(), "-p", "5201", "-t", "3", "-J"]);
        if reverse {
            c.arg("-R");
        }
        let out = c.output().expect("running iperf3");
        assert!(out.status.success(), "iperf3 {dir}: {}", String::from_utf8_lossy(&out.stdout));
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let bps = j["end"]["sum_received"]["bits_per_second"].as_f64().unwrap();
        let ratio = bps / RATE as f64;
        eprintln!(
            "{dir}: {:.1} Mb/s through a {} Mb/s shape ({ratio:.3})",
            bps / 1e6,
            RATE / 1_000_000
        );
        assert!((0.85..=1.15).contains(&ratio), "{dir}: {bps} bit/s, not within 15 % of {RATE}");
    }
    let _ = server.kill();
    let _ = server.wait();
    shaped.unshape().unwrap();
}

/// Sends `n` datagrams from `from` to `to`'s port and returns how many arrived.
fn udp_delivered(from: &Host, to: &Host, n: u32) -> u32 {
    let at = SocketAddr::from((to.ip, 0));
    let rx = to.in_namespace(move || UdpSocket::bind(at)).unwrap().unwrap();
    let dest = rx.local_addr().unwrap();
    rx.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let counter = std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        let mut got = 0u32;
        while rx.recv(&mut buf).is_ok() {
            got += 1;
        }
        got
    });
    let src = SocketAddr::from((from.ip, 0));
    let tx = from.in_namespace(move || UdpSocket::bind(src)).unwrap().unwrap();
    for i in 0..n {
        tx.send_to(&[i as u8; 100], dest).unwrap();
        // Paced, so that only the rule drops (not a full receive buffer).
        if i % 50 == 49 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    counter.join().unwrap()
}

#[test]
fn udp_drop_rule_drops_about_p_percent() {
    if !can_run("udp_drop_rule_drops_about_p_percent") {
        return;
    }
    let tb = Testbed::new(PREFIX).unwrap();
    let a = tb.add_host("snd").unwrap();
    let b = tb.add_host("rcv").unwrap();
    b.drop_udp_percent(10).unwrap();
    let got = udp_delivered(&a, &b, 2000);
    let lost = 100.0 * f64::from(2000 - got) / 2000.0;
    eprintln!("p=10: {got}/2000 arrived, {lost:.2} % lost");
    assert!((5.0..=15.0).contains(&lost), "{lost} % lost at p=10");
    // ICMP is not touched.
    assert!(ping(&a, b.ip));
    b.drop_udp_percent(0).unwrap();
    let got = udp_delivered(&a, &b, 1000);
    assert!(got >= 995, "{got}/1000 arrived with the rule removed");
}

#[test]
fn two_testbeds_at_once_do_not_collide() {
    if !can_run("two_testbeds_at_once_do_not_collide") {
        return;
    }
    let one = Testbed::new(PREFIX).unwrap();
    let two = Testbed::new(PREFIX).unwrap();
    assert_ne!(one.bridge(), two.bridge());
    assert_ne!(one.subnet(), two.subnet());
    assert!(one.bridge().len() <= 15);
    let (a1, a2) = (one.add_host("x").unwrap(), two.add_host("x").unwrap());
    assert_ne!(a1.ns, a2.ns);
    assert!(ping(&a1, one.host_ip()));
    assert!(ping(&a2, two.host_ip()));
    let (ns, ifs) = (one.namespaces(), one.interfaces());
    drop(one);
    assert_gone(&ns, &ifs);
    // The other one still works.
    assert!(ping(&a2, two.host_ip()));
}

#[test]
fn drop_removes_everything_even_after_a_panic() {
    if !can_run("drop_removes_everything_even_after_a_panic") {
        return;
    }
    let tb = Testbed::new(PREFIX).unwrap();
    let h = tb.add_host("h").unwrap();
    let g = tb.add_host("g").unwrap();
    h.shape(10_000_000).unwrap();
    g.drop_udp_percent(50).unwrap();
    // A process still running in a namespace does not keep anything alive.
    let mut sleeper = h.command("sleep").arg("60").spawn().unwrap();
    let (ns, ifs) = (tb.namespaces(), tb.interfaces());
    assert_eq!(ns.len(), 2);
    assert_eq!(ifs.len(), 3);
    drop(tb);
    assert_gone(&ns, &ifs);
    let status = sleeper.wait().unwrap();
    assert!(!status.success(), "the process in the namespace was killed: {status}");

    let names = std::sync::Mutex::new((Vec::new(), Vec::new()));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let tb = Testbed::new(PREFIX).unwrap();
        tb.add_host("p").unwrap();
        *names.lock().unwrap() = (tb.namespaces(), tb.interfaces());
        panic!("a test fails with a testbed alive (this panic is expected)");
    }));
    assert!(result.is_err());
    let (ns, ifs) = names.into_inner().unwrap();
    assert_eq!((ns.len(), ifs.len()), (1, 2));
    assert_gone(&ns, &ifs);
}

#[test]
fn cleanup_stale_removes_what_a_dead_process_left() {
    if !can_run("cleanup_stale_removes_what_a_dead_process_left") {
        return;
    }
    // A pid that is no longer alive, and the names a testbed of it would have made.
    let mut child = Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let prefix = "itest_stale";
    let ns = format!("{prefix}-{dead}-0-h");
    let bridge = format!("tbst{}", dead % 1_000_000);
    let run = |args: &[&str]| {
        assert!(Command::new("ip").args(args).status().unwrap().success(), "ip {args:?}");
    };
    run(&["netns", "add", &ns]);
    run(&["link", "add", "name", &bridge, "type", "bridge"]);
    run(&["link", "set", "dev", &bridge, "alias", &format!("{prefix}-{dead}-0")]);
    // A live process's testbed with the same prefix is kept.
    let live = Testbed::new(prefix).unwrap();
    let host = live.add_host("live").unwrap();
    let removed = Testbed::cleanup_stale(prefix).unwrap();
    // (Another process running this test may have removed them first: they are stale to it.)
    assert!(!removed.contains(&host.ns), "{removed:?}");
    assert!(!removed.iter().any(|r| live.interfaces().contains(r)), "{removed:?}");
    assert_gone(std::slice::from_ref(&ns), std::slice::from_ref(&bridge));
    assert!(netns_list().contains(&host.ns), "a live testbed was removed");
    assert!(ping(&host, live.host_ip()));
}

#[test]
fn a_timeout_of_wait_listening_names_the_port() {
    if !can_run("a_timeout_of_wait_listening_names_the_port") {
        return;
    }
    let tb = Testbed::new(PREFIX).unwrap();
    let h = tb.add_host("w").unwrap();
    let mut sleeper = h.command("sleep").arg("5").spawn().unwrap();
    let t = Instant::now();
    let e = wait_listening(sleeper.id(), 4321, Duration::from_millis(300)).unwrap_err();
    assert!(e.to_string().contains("4321"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(3));
    let _ = sleeper.kill();
    let _ = sleeper.wait();
}
