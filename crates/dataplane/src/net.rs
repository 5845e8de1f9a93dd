//! UDP sockets and batched sends: the server's network platform code.
//!
//! Why one socket pair for every session: the advertised `server_port` is the same in every SETUP
//! reply (players filter on it: `ffmpeg -rtsp_flags filter_src`), and one `sendmmsg(2)` call can
//! then carry the due packets of many sessions at once. RTCP from clients arrives on
//! the RTCP socket and is demultiplexed by the SSRC it reports on.
//!
//! Why `sendmmsg` with two iovecs per packet: the 12-byte RTP header lives in a small array, the
//! payload stays where the disk read put it (the block buffer, shared by every session playing
//! that block), so no payload is copied per session and nothing is allocated per packet.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// The shared RTP/RTCP socket pair.
#[derive(Debug)]
pub struct UdpPair {
    /// Sends RTP; receives (and drops) the clients' NAT "punch" packets.
    pub rtp: UdpSocket,
    /// Sends SRs and BYEs; receives RTCP from clients.
    pub rtcp: UdpSocket,
}

impl UdpPair {
    /// Binds `ip:port` and `ip:port+1`. With `port == 0`, finds a free even/odd pair.
    pub fn bind(ip: IpAddr, port: u16, send_buffer: usize) -> io::Result<Self> {
        if port != 0 {
            let rtp = udp_socket(SocketAddr::new(ip, port), send_buffer)?;
            let rtcp = udp_socket(SocketAddr::new(ip, port + 1), send_buffer)?;
            return Ok(Self { rtp, rtcp });
        }
        for _ in 0..64 {
            let probe = udp_socket(SocketAddr::new(ip, 0), send_buffer)?;
            let p = probe.local_addr()?.port() & !1;
            drop(probe);
            if p == 0 || p == u16::MAX - 1 {
                continue;
            }
            let Ok(rtp) = udp_socket(SocketAddr::new(ip, p), send_buffer) else { continue };
            let Ok(rtcp) = udp_socket(SocketAddr::new(ip, p + 1), send_buffer) else { continue };
            return Ok(Self { rtp, rtcp });
        }
        Err(io::Error::new(io::ErrorKind::AddrInUse, "no free UDP port pair for RTP/RTCP"))
    }

    /// The RTP port (RTCP is the next one).
    pub fn rtp_port(&self) -> io::Result<u16> {
        Ok(self.rtp.local_addr()?.port())
    }

    /// `k` pairs on the same two ports, one per sender shard, each with its own send buffer:
    /// bound with `SO_REUSEPORT`, and a one-instruction classic BPF program
    /// (`SO_ATTACH_REUSEPORT_CBPF`) steers every datagram that arrives to the first pair, the
    /// one the server reads RTCP from — without it the kernel would spread the clients' RTCP
    /// over sockets nobody reads. The first pair is `[0]`. Where the kernel refuses any of
    /// this, the shards share one pair (a warning says so). `port == 0` finds a free pair.
    pub fn bind_shards(
        ip: IpAddr,
        port: u16,
        send_buffer: usize,
        k: usize,
    ) -> io::Result<Vec<Self>> {
        if k <= 1 {
            return Ok(vec![Self::bind(ip, port, send_buffer)?]);
        }
        let ports: Vec<u16> = if port != 0 { vec![port] } else { (0..64).map(|_| 0).collect() };
        let mut last_error = None;
        for p in ports {
            match bind_group(ip, p, send_buffer, k) {
                Ok(pairs) => return Ok(pairs),
                Err(e) => last_error = Some(e),
            }
        }
        let e = last_error.unwrap_or_else(|| io::Error::other("no port tried"));
        tracing::warn!(
            error = %e,
            shards = k,
            "SO_REUSEPORT sockets for the sender shards refused: the shards share one socket pair"
        );
        let first = Self::bind(ip, port, send_buffer)?;
        let mut pairs = Vec::with_capacity(k);
        for _ in 1..k {
            pairs.push(Self { rtp: first.rtp.try_clone()?, rtcp: first.rtcp.try_clone()? });
        }
        pairs.insert(0, first);
        Ok(pairs)
    }
}

/// `k` pairs sharing `port` and `port + 1` (a free even port when 0), the group's arrivals
/// steered to the first.
fn bind_group(ip: IpAddr, port: u16, send_buffer: usize, k: usize) -> io::Result<Vec<UdpPair>> {
    let port = if port != 0 {
        port
    } else {
        let probe = udp_socket(SocketAddr::new(ip, 0), send_buffer)?;
        let p = probe.local_addr()?.port() & !1;
        if p == 0 || p == u16::MAX - 1 {
            return Err(io::Error::new(io::ErrorKind::AddrInUse, "probed an unusable port"));
        }
        p
    };
    let mut pairs = Vec::with_capacity(k);
    for i in 0..k {
        let rtp = reuse_port_socket(SocketAddr::new(ip, port), send_buffer)?;
        let rtcp = reuse_port_socket(SocketAddr::new(ip, port + 1), send_buffer)?;
        if i == 0 {
            steer_to_first(&rtp)?;
            steer_to_first(&rtcp)?;
        }
        pairs.push(UdpPair { rtp, rtcp });
    }
    Ok(pairs)
}

/// The receive buffer a [`receive_socket`] asks for: about 6 000 datagrams, a quarter of a
/// second of a 300 Mb/s node's relayed packets, so that a receiving thread descheduled for that
/// long on a busy machine loses nothing.
pub const RECEIVE_BUFFER: usize = 8 << 20;

/// A UDP socket for datagrams nobody sends twice unasked, bound to `addr`, with a receive
/// buffer of [`RECEIVE_BUFFER`]: the RTP packets other nodes relay through a cluster node and
/// the NACKs of relayed sessions' origins (relay delivery), a publisher's RTP over UDP, an SRT
/// listener's feeds (its ARQ repairs a hole only within its latency). Above
/// `net.core.rmem_max` the buffer is forced when the process may (`SO_RCVBUFFORCE`, root).
/// Returns the socket and the buffer the kernel gave (which counts its bookkeeping: about twice
/// the bytes asked for).
///
/// # Errors
/// When the address cannot be bound.
pub fn receive_socket(addr: SocketAddr) -> io::Result<(UdpSocket, usize)> {
    use std::os::fd::AsRawFd;
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    let _ = s.set_recv_buffer_size(RECEIVE_BUFFER);
    if s.recv_buffer_size().unwrap_or(0) < RECEIVE_BUFFER {
        let size = RECEIVE_BUFFER as libc::c_int;
        // SAFETY: `size` lives on this stack for the call; the kernel copies the int.
        let _ = unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                std::ptr::addr_of!(size).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
    }
    let got = s.recv_buffer_size().unwrap_or(0);
    s.bind(&addr.into())?;
    Ok((s.into(), got))
}

fn udp_socket(addr: SocketAddr, send_buffer: usize) -> io::Result<UdpSocket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    // Best effort: the kernel caps it at net.core.wmem_max.
    let _ = s.set_send_buffer_size(send_buffer);
    let _ = s.set_recv_buffer_size(1 << 20);
    s.bind(&addr.into())?;
    Ok(s.into())
}

fn reuse_port_socket(addr: SocketAddr, send_buffer: usize) -> io::Result<UdpSocket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    let _ = s.set_send_buffer_size(send_buffer);
    let _ = s.set_recv_buffer_size(1 << 20);
    s.set_reuse_port(true)?;
    s.bind(&addr.into())?;
    Ok(s.into())
}

/// Attaches to `socket`'s `SO_REUSEPORT` group a classic BPF program that answers 0 for every
/// datagram: the group's first socket receives all of them.
fn steer_to_first(socket: &UdpSocket) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut program =
        [libc::sock_filter { code: (libc::BPF_RET | libc::BPF_K) as u16, jt: 0, jf: 0, k: 0 }];
    let fprog = libc::sock_fprog { len: 1, filter: program.as_mut_ptr() };
    // SAFETY: `fprog` and the program it points to live on this stack for the call; the kernel
    // copies the program.
    let r = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            std::ptr::addr_of!(fprog).cast(),
            size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if r == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// The longest header a [`Batch`] datagram has: RTP's 12 bytes and the LSN extension's 8.
pub const MAX_HEADER: usize = isochron_rtp::RTP_HEADER_LSN_LEN;

/// Most datagrams in one UDP GSO send (the kernel's `UDP_MAX_SEGMENTS` is 64 or more).
const MAX_SEGMENTS: u32 = 64;
/// Most bytes in one UDP GSO send (a UDP payload over IPv4 is at most 65 507 bytes).
const MAX_GSO_BYTES: usize = 65_000;
/// Control buffer of one message: a `cmsghdr` and the `u16` segment size, 8-byte aligned.
type Cmsg = [u64; 4];

/// Whether this kernel takes UDP generic segmentation offload (`UDP_SEGMENT`, Linux 4.18): set
/// on a throw-away socket.
#[must_use]
pub fn gso_supported() -> bool {
    use std::os::fd::AsRawFd;
    let Ok(s) = UdpSocket::bind((std::net::Ipv4Addr::LOCALHOST, 0)) else { return false };
    let size: libc::c_int = 1200;
    // SAFETY: a valid socket and a c_int option value that lives across the call.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_UDP,
            libc::UDP_SEGMENT,
            std::ptr::addr_of!(size).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

/// A hasher for the batch's destination addresses: a multiply-and-rotate over the address's
/// bytes. The keys are this sender's own clients, so flooding resistance buys nothing, and the
/// default SipHash was a visible share of the send loop (a lookup per datagram).
#[derive(Default)]
struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.write_u64(u64::from(n));
    }

    fn write_u16(&mut self, n: u16) {
        self.write_u64(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

/// The datagrams of one message: one, or several of `seg_len` bytes (the last may be
/// shorter) sent as one UDP GSO buffer.
#[derive(Clone, Copy, Debug)]
struct Message {
    count: u32,
    seg_len: usize,
    total: usize,
    /// Whether another datagram of `seg_len` or less may join (not after a shorter one).
    open: bool,
}

/// A reusable batch of datagrams for one `sendmmsg(2)` call. Lives on one thread: it holds raw
/// pointers into the headers and payloads it was given until [`Batch::send`] returns.
///
/// With UDP GSO on, datagrams to the same address whose sizes allow it (equal, the last of a
/// run possibly shorter) travel as one message with a `UDP_SEGMENT` control message: the
/// kernel walks its stack once for the lot and cuts them into datagrams at the end (a
/// high-bit-rate stream has several packets due in each quantum). Nothing is copied or
/// allocated per datagram: the vectors are reused from batch to batch.
pub struct Batch {
    /// Per datagram: its header, payload and message.
    headers: Vec<([u8; MAX_HEADER], usize)>,
    payloads: Vec<(*const u8, usize)>,
    message_of: Vec<u32>,
    /// Per message: the destination and its datagrams.
    addrs: Vec<SockAddr>,
    messages: Vec<Message>,
    /// The message still open to more datagrams, per destination.
    open_to: HashMap<SocketAddr, u32, BuildHasherDefault<AddrHasher>>,
    gso: bool,
    // Scratch for `send`.
    ends: Vec<usize>,
    order: Vec<u32>,
    iovecs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
    cmsgs: Vec<Cmsg>,
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("len", &self.headers.len())
            .field("messages", &self.messages.len())
            .field("gso", &self.gso)
            .finish()
    }
}

impl Batch {
    /// An empty batch with room for `capacity` datagrams, coalescing them with UDP GSO when
    /// `gso` (see [`gso_supported`]).
    #[must_use]
    pub fn with_capacity(capacity: usize, gso: bool) -> Self {
        Self {
            headers: Vec::with_capacity(capacity),
            payloads: Vec::with_capacity(capacity),
            message_of: Vec::with_capacity(capacity),
            addrs: Vec::with_capacity(capacity),
            messages: Vec::with_capacity(capacity),
            open_to: HashMap::with_capacity_and_hasher(capacity, BuildHasherDefault::default()),
            gso,
            ends: Vec::with_capacity(capacity),
            order: Vec::with_capacity(capacity),
            iovecs: Vec::with_capacity(2 * capacity),
            msgs: Vec::with_capacity(capacity),
            cmsgs: vec![[0; 4]; capacity],
        }
    }

    /// Datagrams queued.
    #[must_use]
    pub fn len(&self) -> usize {
        self.headers.len()
    }

    /// Whether nothing is queued.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.headers.is_empty()
    }

    /// Whether datagrams are coalesced with UDP GSO (off after the kernel refused it).
    #[must_use]
    pub fn gso(&self) -> bool {
        self.gso
    }

    /// Queues a datagram of `header` (at most [`MAX_HEADER`] bytes: an RTP header, with the LSN
    /// extension when it has one) followed by `payload`.
    ///
    /// The payload is referenced, not copied: the caller keeps it alive and unmoved until
    /// [`Batch::send`] returns (the sender thread holds the block's `Arc` for that long).
    pub fn push(&mut self, to: SocketAddr, header: &[u8], payload: &[u8]) {
        let mut h = [0u8; MAX_HEADER];
        h[..header.len()].copy_from_slice(header);
        self.headers.push((h, header.len()));
        self.payloads.push((payload.as_ptr(), payload.len()));
        let len = header.len() + payload.len();
        if self.gso
            && let Some(&m) = self.open_to.get(&to)
        {
            let msg = &mut self.messages[m as usize];
            if msg.open
                && len <= msg.seg_len
                && msg.count < MAX_SEGMENTS
                && msg.total + len <= MAX_GSO_BYTES
            {
                msg.count += 1;
                msg.total += len;
                msg.open = len == msg.seg_len;
                self.message_of.push(m);
                return;
            }
        }
        let m = self.messages.len() as u32;
        self.messages.push(Message { count: 1, seg_len: len, total: len, open: true });
        self.addrs.push(to.into());
        self.message_of.push(m);
        if self.gso {
            self.open_to.insert(to, m);
        }
    }

    /// Sends everything queued on `socket`, then empties the batch. Returns how many datagrams
    /// the kernel accepted; a datagram it refuses (e.g. no route) is skipped, not retried. A
    /// GSO message the kernel refuses is sent again as single datagrams, and GSO is turned off
    /// for good if the device cannot do it (`EIO`).
    pub fn send(&mut self, socket: &UdpSocket) -> io::Result<usize> {
        let result = self.send_all(socket);
        self.headers.clear();
        self.payloads.clear();
        self.message_of.clear();
        self.addrs.clear();
        self.messages.clear();
        self.open_to.clear();
        result
    }

    fn send_all(&mut self, socket: &UdpSocket) -> io::Result<usize> {
        use std::os::fd::AsRawFd;
        let n = self.headers.len();
        let n_msgs = self.messages.len();
        if n == 0 {
            return Ok(0);
        }
        // The datagrams in message order, by a counting sort: `ends[m]` walks message m's
        // slots and ends one past its last.
        self.ends.clear();
        let mut at = 0;
        for m in &self.messages {
            self.ends.push(at);
            at += m.count as usize;
        }
        self.order.clear();
        self.order.resize(n, 0);
        for (i, &m) in self.message_of.iter().enumerate() {
            let slot = &mut self.ends[m as usize];
            self.order[*slot] = i as u32;
            *slot += 1;
        }
        self.iovecs.clear();
        for &i in &self.order {
            let i = i as usize;
            let (ptr, len) = self.payloads[i];
            self.iovecs.push(libc::iovec {
                iov_base: self.headers[i].0.as_mut_ptr().cast(),
                iov_len: self.headers[i].1,
            });
            self.iovecs.push(libc::iovec { iov_base: ptr.cast_mut().cast(), iov_len: len });
        }
        if self.cmsgs.len() < n_msgs {
            self.cmsgs.resize(n_msgs, [0; 4]);
        }
        self.msgs.clear();
        for (m, msg) in self.messages.iter().enumerate() {
            let start = self.ends[m] - msg.count as usize;
            // SAFETY: mmsghdr is plain old data; all-zero is a valid value.
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_name = self.addrs[m].as_ptr().cast_mut().cast();
            h.msg_hdr.msg_namelen = self.addrs[m].len();
            h.msg_hdr.msg_iov = self.iovecs[2 * start..].as_mut_ptr();
            h.msg_hdr.msg_iovlen = 2 * msg.count as usize;
            if msg.count > 1 {
                let c = &mut self.cmsgs[m];
                segment_cmsg(c, msg.seg_len as u16);
                h.msg_hdr.msg_control = c.as_mut_ptr().cast();
                // SAFETY: CMSG_SPACE only computes a size.
                h.msg_hdr.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as usize;
            }
            self.msgs.push(h);
        }
        let (mut done, mut datagrams, mut result) = (0, 0, Ok(()));
        while done < n_msgs {
            let remaining = (n_msgs - done) as libc::c_uint;
            // SAFETY: `msgs[done..]` are initialised mmsghdrs whose name, iovec, control and
            // payload pointers stay valid for the call: addresses, headers, iovecs and control
            // buffers are owned by `self` and not touched until it returns, and the caller
            // guarantees the payloads outlive this call (see `push`).
            let r = unsafe {
                libc::sendmmsg(socket.as_raw_fd(), self.msgs[done..].as_mut_ptr(), remaining, 0)
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::Interrupted => continue,
                    io::ErrorKind::WouldBlock => {
                        result = Err(e);
                        break;
                    }
                    // This message is refused: a GSO buffer goes again datagram by datagram
                    // (`EIO`: the device cannot segment, so GSO stays off); a single datagram
                    // (bad address, no route …) is skipped.
                    _ => {
                        if self.messages[done].count > 1 {
                            if e.raw_os_error() == Some(libc::EIO) && self.gso {
                                self.gso = false;
                                tracing::warn!(error = %e, "UDP GSO refused: sending datagrams singly");
                            }
                            datagrams += self.send_singly(socket, done);
                        } else {
                            result = Err(e);
                        }
                        done += 1;
                        continue;
                    }
                }
            }
            let r = r as usize;
            datagrams +=
                self.messages[done..done + r].iter().map(|m| m.count as usize).sum::<usize>();
            done += r;
        }
        match result {
            Ok(()) => Ok(datagrams),
            Err(e) if datagrams == 0 => Err(e),
            Err(_) => Ok(datagrams),
        }
    }

    /// Sends message `m`'s datagrams one `sendmsg(2)` each; returns how many the kernel took.
    fn send_singly(&mut self, socket: &UdpSocket, m: usize) -> usize {
        use std::os::fd::AsRawFd;
        let count = self.messages[m].count as usize;
        let start = self.ends[m] - count;
        let mut sent = 0;
        for k in start..start + count {
            // SAFETY: msghdr is plain old data; all-zero is a valid value.
            let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
            h.msg_name = self.addrs[m].as_ptr().cast_mut().cast();
            h.msg_namelen = self.addrs[m].len();
            h.msg_iov = self.iovecs[2 * k..].as_mut_ptr();
            h.msg_iovlen = 2;
            // SAFETY: as in `send_all`: every pointer in `h` is valid for the call.
            if unsafe { libc::sendmsg(socket.as_raw_fd(), &h, 0) } >= 0 {
                sent += 1;
            }
        }
        sent
    }
}

/// Writes into `buf` a `UDP_SEGMENT` control message: cut the buffer into datagrams of
/// `seg_len` bytes.
fn segment_cmsg(buf: &mut Cmsg, seg_len: u16) {
    let c = buf.as_mut_ptr().cast::<libc::cmsghdr>();
    // SAFETY: `buf` is 32 bytes, 8-byte aligned: room for a cmsghdr and its 2 data bytes
    // (CMSG_SPACE(2) is 24 on 64-bit Linux); the data may be unaligned, so it is written so.
    unsafe {
        (*c).cmsg_level = libc::SOL_UDP;
        (*c).cmsg_type = libc::UDP_SEGMENT;
        (*c).cmsg_len = libc::CMSG_LEN(2) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg_len);
    }
}

/// Raises this process's soft limit of open files to its hard limit (connections are files),
/// returning `(soft, hard)` after the attempt, for the server to log and to size its connection
/// caps below.
pub fn raise_open_files_limit() -> io::Result<(u64, u64)> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit write/read the one struct passed, which lives on this stack.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if lim.rlim_cur < lim.rlim_max {
        let want = libc::rlimit { rlim_cur: lim.rlim_max, rlim_max: lim.rlim_max };
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } == 0 {
            lim = want;
        }
    }
    Ok((lim.rlim_cur, lim.rlim_max))
}

/// The bytes TCP socket `fd` holds that its peer has not acknowledged: those not yet sent and
/// those in flight (`SIOCOUTQ`, tcp(7)). What a connection's queue ahead of its client holds,
/// the network's included. `fd` must be an open TCP socket the caller holds.
pub fn unacked_bytes(fd: std::os::fd::RawFd) -> io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: `fd` is an open socket (the caller's contract); the kernel writes one int to `n`,
    // which lives on this stack across the call.
    if unsafe { libc::ioctl(fd, libc::TIOCOUTQ, std::ptr::addr_of_mut!(n)) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(usize::try_from(n).unwrap_or(0))
}

/// Makes the coming close of TCP socket `fd` an abort (RFC 9293 §3.10.7.1: a reset, the
/// unsent data dropped) and ends its receiving side now, so that a task blocked reading it wakes
/// to the end and lets go: a stream that cannot go on ends with an error its player sees, where
/// a FIN reads as a normal end. `fd` must be the open descriptor of a TCP socket the caller
/// holds (the owner of the stream, or one of its halves, is alive across the call).
pub fn abort_on_close(fd: std::os::fd::RawFd) -> io::Result<()> {
    let linger = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: `fd` is an open socket (the caller's contract); the option value lives on this
    // stack across the call, and the kernel copies it.
    let set = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            std::ptr::addr_of!(linger).cast(),
            size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    if set != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above; shutdown only changes the socket's state.
    if unsafe { libc::shutdown(fd, libc::SHUT_RD) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Gives the allocator's free memory back to the system (glibc `malloc_trim`, which releases the
/// free pages of every arena). A burst of connections or sessions (a flood, a crowd that left)
/// otherwise keeps the process's resident size at its peak: glibc returns memory only from the
/// top of each arena's heap. Does nothing with another C library.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn an_aborted_close_resets_the_connection() {
        use std::io::{Read, Write};
        use std::os::fd::AsRawFd;
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        server.write_all(b"before").unwrap();
        let mut buf = [0u8; 6];
        client.read_exact(&mut buf).unwrap();
        abort_on_close(server.as_raw_fd()).unwrap();
        // The receiving side has ended: a read sees the end at once.
        assert_eq!(server.read(&mut buf).unwrap(), 0);
        drop(server);
        let err = client.read(&mut buf).expect_err("a reset, not an end");
        assert_eq!(err.kind(), io::ErrorKind::ConnectionReset);
    }

    #[test]
    fn shard_sockets_send_from_one_port_and_every_arrival_reaches_the_first() {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let pairs = UdpPair::bind_shards(lo, 0, 1 << 20, 3).unwrap();
        assert_eq!(pairs.len(), 3);
        let port = pairs[0].rtp_port().unwrap();
        let rx = UdpSocket::bind((lo, 0)).unwrap();
        for p in &pairs {
            assert_eq!(p.rtp_port().unwrap(), port);
            assert_eq!(p.rtcp.local_addr().unwrap().port(), port + 1);
            p.rtp.send_to(b"x", rx.local_addr().unwrap()).unwrap();
            let (_, from) = rx.recv_from(&mut [0u8; 8]).unwrap();
            assert_eq!(from.port(), port, "sent from the advertised port");
        }
        // Datagrams from many source ports (the kernel's hash would spread them over the
        // group) all reach the first pair's RTCP socket.
        pairs[0].rtcp.set_read_timeout(Some(std::time::Duration::from_secs(2))).unwrap();
        for i in 0..32u8 {
            let client = UdpSocket::bind((lo, 0)).unwrap();
            client.send_to(&[i], (lo, port + 1)).unwrap();
            let mut b = [0u8; 8];
            let (n, _) = pairs[0].rtcp.recv_from(&mut b).unwrap();
            assert_eq!(&b[..n], &[i]);
        }
    }

    #[test]
    #[allow(clippy::print_stderr)] // says why it checked nothing
    fn gso_coalesces_equal_datagrams_per_destination_and_the_kernel_cuts_them() {
        if !gso_supported() {
            eprintln!("no UDP GSO on this kernel: nothing to check");
            return;
        }
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let pair = UdpPair::bind(lo, 0, 1 << 20).unwrap();
        let (rx1, rx2) = (UdpSocket::bind((lo, 0)).unwrap(), UdpSocket::bind((lo, 0)).unwrap());
        let (to1, to2) = (rx1.local_addr().unwrap(), rx2.local_addr().unwrap());
        // Ten 1328-byte datagrams to each, interleaved, the last to rx1 shorter; then one more
        // to rx1 that cannot join (after the short one).
        let big: Vec<Vec<u8>> = (0..21u8).map(|i| vec![i; 1316]).collect();
        let mut b = Batch::with_capacity(64, true);
        for i in 0..10 {
            b.push(to1, &[i as u8; 12], &big[i]);
            b.push(to2, &[100 + i as u8; 12], &big[10 + i]);
        }
        b.push(to1, &[10; 12], &big[20][..500]);
        b.push(to1, &[11; 12], &big[20]);
        assert_eq!(b.messages.len(), 3, "{b:?}");
        assert_eq!(b.send(&pair.rtp).unwrap(), 22);
        assert!(b.gso(), "loopback segments");
        let mut buf = [0u8; 2048];
        for i in 0..12u8 {
            let (n, _) = rx1.recv_from(&mut buf).unwrap();
            let want = match i {
                10 => 512,
                _ => 1328,
            };
            assert_eq!((n, &buf[..12]), (want, &[i; 12][..]), "datagram {i} to rx1");
            let body = if i < 10 { i } else { 20 };
            assert!(buf[12..n].iter().all(|&x| x == body));
        }
        for i in 0..10u8 {
            let (n, _) = rx2.recv_from(&mut buf).unwrap();
            assert_eq!((n, buf[0], buf[12]), (1328, 100 + i, 10 + i));
        }
    }

    #[test]
    fn batch_sends_header_and_payload_in_order() {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let pair = UdpPair::bind(lo, 0, 1 << 20).unwrap();
        let port = pair.rtp_port().unwrap();
        assert_eq!(port % 2, 0);
        assert_eq!(pair.rtcp.local_addr().unwrap().port(), port + 1);
        let rx = UdpSocket::bind((lo, 0)).unwrap();
        let to = rx.local_addr().unwrap();
        let payloads: Vec<Vec<u8>> = (0..100u8).map(|i| vec![i; 188]).collect();
        let mut b = Batch::with_capacity(100, false);
        for (i, p) in payloads.iter().enumerate() {
            b.push(to, &[i as u8; 12], p);
        }
        assert_eq!(b.send(&pair.rtp).unwrap(), 100);
        assert!(b.is_empty());
        let mut buf = [0u8; 2048];
        for i in 0..100u8 {
            let (n, from) = rx.recv_from(&mut buf).unwrap();
            assert_eq!(from.port(), port, "sent from the advertised port");
            assert_eq!(n, 200);
            assert_eq!(&buf[..12], &[i; 12]);
            assert_eq!(&buf[12..200], &[i; 188][..]);
        }
    }
}
