//! Batched UDP receive with `recvmmsg(2)`: one system call takes up to [`BATCH`] datagrams into
//! buffers allocated once, so an emulation client costs no allocation and few syscalls per
//! packet: the bench must be cheaper than the server it measures.
//!
//! Each datagram carries the kernel's receive time (`SO_TIMESTAMPNS`, socket(7)) when the socket
//! asks for it with [`enable_timestamps`]: a measurement of the server's pacing must not include
//! how long this process took to get the CPU back on a busy machine.
//!
//! Each datagram's source address is kept too (`msg_name`, into `sockaddr_storage`s allocated
//! with the buffers): in a cluster every node sends its own blocks from its own address
//! (Yima §2.2, bipartite delivery), and the bench attributes what it receives to each node.
//!
//! Not here: readiness. The caller waits for the socket to be readable (tokio) and calls
//! [`RecvBatch::recv`] inside `try_io`, which turns `EAGAIN` into "not ready".

use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::time::{Duration, Instant, SystemTime};

/// Datagrams taken per call.
pub const BATCH: usize = 32;
/// Largest datagram kept whole (an RTP packet of 7 TS packets is 1 328 bytes).
pub const SLOT_BYTES: usize = 2048;

/// Control-message space per datagram: one `SCM_TIMESTAMPNS` (a `timespec`), 8-byte aligned.
const CMSG_BYTES: usize = 64;

/// Asks the kernel to stamp every datagram `fd` receives with its arrival time (socket(7)
/// `SO_TIMESTAMPNS`), which [`RecvBatch::arrival`] then reports. When no socket on the host had
/// stamping on, the kernel turns it on in deferred work: datagrams of the next few milliseconds
/// may be stamped when read instead.
pub fn enable_timestamps(fd: RawFd) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: `on` is a live c_int and its size is passed with it.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&raw const on).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Receive buffers for one socket.
#[derive(Debug)]
pub struct RecvBatch {
    bufs: Vec<u8>,
    lens: [usize; BATCH],
    /// Kernel receive times (wall clock), when the socket has timestamps enabled.
    stamps: [Option<SystemTime>; BATCH],
    /// Control-message buffers, `u64` for the alignment `cmsghdr` needs.
    control: Vec<u64>,
    /// Source addresses as the kernel wrote them (`msg_name`), with their lengths.
    names: Vec<libc::sockaddr_storage>,
    name_lens: [libc::socklen_t; BATCH],
    count: usize,
    /// The clocks read together after the last batch, to turn wall-clock stamps into `Instant`s.
    clocks: (Instant, SystemTime),
}

impl Default for RecvBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl RecvBatch {
    /// Buffers for [`BATCH`] datagrams of up to [`SLOT_BYTES`] each.
    #[must_use]
    pub fn new() -> Self {
        Self {
            bufs: vec![0; BATCH * SLOT_BYTES],
            lens: [0; BATCH],
            stamps: [None; BATCH],
            control: vec![0; BATCH * CMSG_BYTES / 8],
            // SAFETY: an all-zero sockaddr_storage is valid (family AF_UNSPEC).
            names: vec![unsafe { std::mem::zeroed() }; BATCH],
            name_lens: [0; BATCH],
            count: 0,
            clocks: (Instant::now(), SystemTime::now()),
        }
    }

    /// Receives up to [`BATCH`] datagrams without blocking; returns how many arrived
    /// (`WouldBlock` when none). Datagrams longer than [`SLOT_BYTES`] are truncated.
    pub fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        // SAFETY: zeroed iovec and mmsghdr are valid (null pointers, zero lengths) and are
        // filled in below before use.
        let mut iov: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        for (i, (v, h)) in iov.iter_mut().zip(hdrs.iter_mut()).enumerate() {
            v.iov_base = self.bufs[i * SLOT_BYTES..].as_mut_ptr().cast();
            v.iov_len = SLOT_BYTES;
            h.msg_hdr.msg_iov = v;
            h.msg_hdr.msg_iovlen = 1;
            h.msg_hdr.msg_control = self.control[i * CMSG_BYTES / 8..].as_mut_ptr().cast();
            h.msg_hdr.msg_controllen = CMSG_BYTES as _;
            h.msg_hdr.msg_name = (&raw mut self.names[i]).cast();
            h.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        }
        // SAFETY: `hdrs` points at BATCH headers whose iovecs point into `self.bufs`, whose
        // control buffers point into `self.control` and whose names point into `self.names`,
        // all outliving the call; the kernel writes at most SLOT_BYTES, CMSG_BYTES and the size
        // of a sockaddr_storage into each.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                hdrs.as_mut_ptr(),
                BATCH as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            self.count = 0;
            return Err(io::Error::last_os_error());
        }
        let n = n as usize;
        self.clocks = (Instant::now(), SystemTime::now());
        for (i, h) in hdrs[..n].iter().enumerate() {
            self.lens[i] = (h.msg_len as usize).min(SLOT_BYTES);
            self.stamps[i] = timestamp(&h.msg_hdr);
            self.name_lens[i] = h.msg_hdr.msg_namelen;
        }
        self.count = n;
        Ok(n)
    }

    /// When datagram `i` of the last batch arrived: the kernel's stamp if the socket has
    /// timestamps enabled, else the time the batch was taken.
    #[must_use]
    pub fn arrival(&self, i: usize) -> Instant {
        debug_assert!(i < self.count);
        let (now, wall) = self.clocks;
        match self.stamps[i] {
            Some(at) => now - wall.duration_since(at).unwrap_or(Duration::ZERO),
            None => now,
        }
    }

    /// Datagram `i` of the last batch.
    #[must_use]
    pub fn packet(&self, i: usize) -> &[u8] {
        debug_assert!(i < self.count);
        &self.bufs[i * SLOT_BYTES..i * SLOT_BYTES + self.lens[i]]
    }

    /// Where datagram `i` of the last batch came from (`None` for an address family other than
    /// IPv4 and IPv6).
    #[must_use]
    pub fn source(&self, i: usize) -> Option<SocketAddr> {
        debug_assert!(i < self.count);
        // SAFETY: recvmmsg wrote `name_lens[i]` bytes of an address into `names[i]` (a copy of
        // the storage, no allocation); SockAddr reads only within that length and the family.
        let addr = unsafe { socket2::SockAddr::new(self.names[i], self.name_lens[i]) };
        addr.as_socket()
    }

    /// The datagrams of the last batch.
    pub fn packets(&self) -> impl Iterator<Item = &[u8]> {
        (0..self.count).map(|i| self.packet(i))
    }
}

/// The `SCM_TIMESTAMPNS` control message of a received datagram, if any.
fn timestamp(msg: &libc::msghdr) -> Option<SystemTime> {
    // SAFETY: `msg` was filled by recvmmsg; the CMSG_* macros walk its control buffer within
    // `msg_controllen`, and a SCM_TIMESTAMPNS payload is a `timespec` (socket(7)), read
    // unaligned as the macros do not promise its alignment.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                let d =
                    Duration::new(u64::try_from(ts.tv_sec).ok()?, u32::try_from(ts.tv_nsec).ok()?);
                return Some(SystemTime::UNIX_EPOCH + d);
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;

    #[test]
    fn takes_several_datagrams_in_one_call() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut b = RecvBatch::new();
        assert_eq!(b.recv(rx.as_raw_fd()).unwrap_err().kind(), io::ErrorKind::WouldBlock);
        for i in 0..5u8 {
            tx.send_to(&[i; 100], rx.local_addr().unwrap()).unwrap();
        }
        tx.send_to(&[9; 3000], rx.local_addr().unwrap()).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(b.recv(rx.as_raw_fd()).unwrap(), 6);
        let got: Vec<(usize, u8)> = b.packets().map(|p| (p.len(), p[0])).collect();
        assert_eq!(got[..5], [(100, 0), (100, 1), (100, 2), (100, 3), (100, 4)]);
        assert_eq!(got[5], (SLOT_BYTES, 9), "truncated to the slot");
        assert_eq!(b.source(0), Some(tx.local_addr().unwrap()));
    }

    #[test]
    fn each_datagram_names_its_sender() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let senders: Vec<std::net::UdpSocket> =
            (0..3).map(|_| std::net::UdpSocket::bind("127.0.0.1:0").unwrap()).collect();
        for round in 0..2u8 {
            for (k, s) in senders.iter().enumerate() {
                s.send_to(&[round, k as u8], rx.local_addr().unwrap()).unwrap();
            }
        }
        std::thread::sleep(Duration::from_millis(50));
        let mut b = RecvBatch::new();
        assert_eq!(b.recv(rx.as_raw_fd()).unwrap(), 6);
        for i in 0..6 {
            let k = usize::from(b.packet(i)[1]);
            assert_eq!(b.source(i), Some(senders[k].local_addr().unwrap()), "datagram {i}");
        }
    }

    #[test]
    fn kernel_stamps_date_each_datagram_from_its_arrival_not_from_the_read() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        enable_timestamps(rx.as_raw_fd()).unwrap();
        // The first socket to ask turns stamping on in a deferred kernel work item.
        std::thread::sleep(Duration::from_millis(100));
        let mut b = RecvBatch::new();
        tx.send_to(b"early", rx.local_addr().unwrap()).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        tx.send_to(b"late", rx.local_addr().unwrap()).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let read = Instant::now();
        assert_eq!(b.recv(rx.as_raw_fd()).unwrap(), 2);
        let (early, late) = (b.arrival(0), b.arrival(1));
        let gap = late.duration_since(early);
        assert!(gap >= Duration::from_millis(190), "arrivals {gap:?} apart");
        assert!(read.duration_since(early) >= Duration::from_millis(240), "stamped at the read");
    }
}
