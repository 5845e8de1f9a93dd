//! UDP sockets and batched sends: the server's network platform code.
//!
//! Why one socket pair for every session: the advertised `server_port` is the same in every SETUP
//! reply (players filter on it: `ffmpeg -rtsp_flags filter_src`), and one `sendmmsg(2)` call can
//! then carry the due packets of many sessions at once (DESIGN §2.8). RTCP from clients arrives on
//! the RTCP socket and is demultiplexed by the SSRC it reports on.
//!
//! Why `sendmmsg` with two iovecs per packet: the 12-byte RTP header lives in a small array, the
//! payload stays where the disk read put it (the block buffer, shared by every session playing
//! that block), so no payload is copied per session and nothing is allocated per packet.

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
}

fn udp_socket(addr: SocketAddr, send_buffer: usize) -> io::Result<UdpSocket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    // Best effort: the kernel caps it at net.core.wmem_max.
    let _ = s.set_send_buffer_size(send_buffer);
    let _ = s.set_recv_buffer_size(1 << 20);
    s.bind(&addr.into())?;
    Ok(s.into())
}

/// The longest header a [`Batch`] datagram has: RTP's 12 bytes and the LSN extension's 8.
pub const MAX_HEADER: usize = isochron_rtp::RTP_HEADER_LSN_LEN;

/// A reusable batch of datagrams for one `sendmmsg(2)` call. Lives on one thread: it holds raw
/// pointers into the headers and payloads it was given until [`Batch::send`] returns.
pub struct Batch {
    headers: Vec<([u8; MAX_HEADER], usize)>,
    addrs: Vec<SockAddr>,
    payloads: Vec<(*const u8, usize)>,
    iovecs: Vec<[libc::iovec; 2]>,
    msgs: Vec<libc::mmsghdr>,
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch").field("len", &self.headers.len()).finish()
    }
}

impl Batch {
    /// An empty batch with room for `capacity` datagrams.
    #[must_use]
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            headers: Vec::with_capacity(capacity),
            addrs: Vec::with_capacity(capacity),
            payloads: Vec::with_capacity(capacity),
            iovecs: Vec::with_capacity(capacity),
            msgs: Vec::with_capacity(capacity),
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

    /// Queues a datagram of `header` (at most [`MAX_HEADER`] bytes: an RTP header, with the LSN
    /// extension when it has one) followed by `payload`.
    ///
    /// The payload is referenced, not copied: the caller keeps it alive and unmoved until
    /// [`Batch::send`] returns (the sender thread holds the block's `Arc` for that long).
    pub fn push(&mut self, to: SocketAddr, header: &[u8], payload: &[u8]) {
        let mut h = [0u8; MAX_HEADER];
        h[..header.len()].copy_from_slice(header);
        self.headers.push((h, header.len()));
        self.addrs.push(to.into());
        self.payloads.push((payload.as_ptr(), payload.len()));
    }

    /// Sends everything queued on `socket`, then empties the batch. Returns how many datagrams
    /// the kernel accepted; a datagram it refuses (e.g. no route) is skipped, not retried.
    pub fn send(&mut self, socket: &UdpSocket) -> io::Result<usize> {
        use std::os::fd::AsRawFd;
        let n = self.headers.len();
        self.iovecs.clear();
        self.msgs.clear();
        for i in 0..n {
            let (ptr, len) = self.payloads[i];
            self.iovecs.push([
                libc::iovec {
                    iov_base: self.headers[i].0.as_mut_ptr().cast(),
                    iov_len: self.headers[i].1,
                },
                libc::iovec { iov_base: ptr.cast_mut().cast(), iov_len: len },
            ]);
        }
        for i in 0..n {
            // SAFETY: mmsghdr is plain old data; all-zero is a valid value.
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_name = self.addrs[i].as_ptr().cast_mut().cast();
            m.msg_hdr.msg_namelen = self.addrs[i].len();
            m.msg_hdr.msg_iov = self.iovecs[i].as_mut_ptr();
            m.msg_hdr.msg_iovlen = 2;
            self.msgs.push(m);
        }
        let mut sent = 0;
        let mut result = Ok(0);
        while sent < n {
            let remaining = (n - sent) as libc::c_uint;
            // SAFETY: `msgs[sent..]` are initialised mmsghdrs whose name, iovec and payload
            // pointers stay valid for the call: addresses and headers are owned by `self`, and
            // the caller guarantees the payloads outlive this call (see `push`).
            let r = unsafe {
                libc::sendmmsg(socket.as_raw_fd(), self.msgs[sent..].as_mut_ptr(), remaining, 0)
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::Interrupted => continue,
                    io::ErrorKind::WouldBlock => {
                        result = Err(e);
                        break;
                    }
                    // This datagram is refused (bad address, no route …): skip it.
                    _ => {
                        sent += 1;
                        result = Err(e);
                        continue;
                    }
                }
            }
            sent += r as usize;
        }
        self.headers.clear();
        self.addrs.clear();
        self.payloads.clear();
        match result {
            Ok(_) => Ok(sent),
            Err(e) if sent == 0 => Err(e),
            Err(_) => Ok(sent),
        }
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
    fn batch_sends_header_and_payload_in_order() {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let pair = UdpPair::bind(lo, 0, 1 << 20).unwrap();
        let port = pair.rtp_port().unwrap();
        assert_eq!(port % 2, 0);
        assert_eq!(pair.rtcp.local_addr().unwrap().port(), port + 1);
        let rx = UdpSocket::bind((lo, 0)).unwrap();
        let to = rx.local_addr().unwrap();
        let payloads: Vec<Vec<u8>> = (0..100u8).map(|i| vec![i; 188]).collect();
        let mut b = Batch::with_capacity(100);
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
